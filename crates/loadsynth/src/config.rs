//! Safety caps and generator settings, as read from the agent's TOML config
//! (`deploy/config/loadgen.toml`). Every knob is clamped to its cap, and the
//! generators' memory is checked against the memory cap before any starts.

use crate::generator::io::IoSettings;
use serde::{Deserialize, Serialize};

/// Hard limits no model or controller can exceed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SafetyCaps {
    /// Memory all generators together may map and touch, in bytes.
    pub max_memory_bytes: u64,
    /// Highest duty cycle (busy share) of the CPU generator on any CPU, 0..=1.
    pub max_cpu_share: f64,
    /// Bytes the I/O generator may write in total over the whole run.
    pub max_io_bytes: u64,
    /// Highest I/O write rate, bytes per second.
    pub max_io_rate: f64,
    /// Highest page-fault rate per CPU, faults per second.
    pub max_fault_rate: f64,
    /// Highest context-switch rate per CPU, switches per second.
    pub max_switch_rate: f64,
    /// Highest memory-bandwidth rate per CPU, bytes per second.
    pub max_mem_bandwidth: f64,
    /// Highest instruction rate of the instruction generator per CPU,
    /// instructions per second (its CPU time is bounded by `max_cpu_share`
    /// as well).
    pub max_inst_rate: f64,
}

impl Default for SafetyCaps {
    fn default() -> Self {
        SafetyCaps {
            max_memory_bytes: 512 << 20,
            max_cpu_share: 0.95,
            max_io_bytes: 1 << 30,
            max_io_rate: 64.0 * 1024.0 * 1024.0,
            max_fault_rate: 200_000.0,
            max_switch_rate: 200_000.0,
            max_mem_bandwidth: 4.0 * 1024.0 * 1024.0 * 1024.0,
            max_inst_rate: 2e10,
        }
    }
}

/// A setting that cannot work: its dotted key (as in the agent's TOML) and
/// what was expected instead. An agent turns it into a located
/// configuration error (`file:line: key `caps.max_cpu_share`: expected …`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSetting {
    /// Dotted key, e.g. `caps.max_cpu_share`.
    pub key: String,
    /// What was expected, and what was found.
    pub expected: String,
}

impl std::fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.expected)
    }
}

impl std::error::Error for InvalidSetting {}

impl SafetyCaps {
    /// Rejects caps that make no sense (negative, NaN, a CPU share above 1).
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let rates = [
            ("max_io_rate", self.max_io_rate),
            ("max_fault_rate", self.max_fault_rate),
            ("max_switch_rate", self.max_switch_rate),
            ("max_mem_bandwidth", self.max_mem_bandwidth),
            ("max_inst_rate", self.max_inst_rate),
        ];
        for (name, v) in rates {
            if !v.is_finite() || v < 0.0 {
                return Err(InvalidSetting {
                    key: format!("caps.{name}"),
                    expected: format!("expected a finite value ≥ 0, found {v}"),
                });
            }
        }
        if !(0.0..=1.0).contains(&self.max_cpu_share) {
            return Err(InvalidSetting {
                key: "caps.max_cpu_share".into(),
                expected: format!("expected a share in 0..=1, found {}", self.max_cpu_share),
            });
        }
        Ok(())
    }
}

/// Everything the generators need besides the model: caps and I/O settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct LoadConfig {
    /// Upper bounds every knob is clamped to.
    pub caps: SafetyCaps,
    /// Where and how the file I/O generator writes.
    pub io: IoSettings,
    /// Use 2 MiB transparent huge pages for the TLB generator.
    pub tlb_huge_pages: bool,
    /// Nice value of the generator threads (-20..=19; negative values need
    /// CAP_SYS_NICE). On a node where other work competes for the CPUs, a
    /// negative value lets the generators get the CPU time their knobs ask for.
    pub nice: Option<i32>,
}

impl LoadConfig {
    /// Checks the caps and the nice value before anything starts.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        self.caps.validate()?;
        match self.nice {
            Some(n) if !(-20..=19).contains(&n) => Err(InvalidSetting {
                key: "nice".into(),
                expected: format!("expected a nice value in -20..=19, found {n}"),
            }),
            _ => Ok(()),
        }
    }
}
