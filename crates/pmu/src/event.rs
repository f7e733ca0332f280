//! The resolved form of an event: what the catalog produces from a name and what
//! backends open.

use hwqos_core::MetricName;
use serde::{Deserialize, Serialize};

/// `perf_event_attr.type` values of the generic perf ABI.
pub mod perf_type {
    /// `PERF_TYPE_HARDWARE`: generic CPU events (cycles, instructions, …).
    pub const HARDWARE: u32 = 0;
    /// `PERF_TYPE_SOFTWARE`: kernel-counted events (task-clock, page faults, …).
    pub const SOFTWARE: u32 = 1;
    /// `PERF_TYPE_TRACEPOINT`: a kernel tracepoint; `config` is its id.
    pub const TRACEPOINT: u32 = 2;
    /// `PERF_TYPE_HW_CACHE`: generic cache events; `config` packs cache, op and result.
    pub const HW_CACHE: u32 = 3;
    /// `PERF_TYPE_RAW`: a model-specific raw encoding in `config`.
    pub const RAW: u32 = 4;
    /// `PERF_TYPE_BREAKPOINT`: a hardware breakpoint.
    pub const BREAKPOINT: u32 = 5;
}

/// The `perf_event_attr` fields that identify an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventAttr {
    /// `perf_event_attr.type`: a generic type or a dynamic PMU's type from sysfs.
    #[serde(rename = "type")]
    pub type_: u32,
    /// `perf_event_attr.config`: the event selector, interpreted per `type_`.
    pub config: u64,
    /// `perf_event_attr.config1` (extension of `config`, e.g. offcore response); 0 if unused.
    #[serde(default)]
    pub config1: u64,
    /// `perf_event_attr.config2` (further extension of `config`); 0 if unused.
    #[serde(default)]
    pub config2: u64,
    /// The privilege levels counted (perf's `:u` / `:k` modifiers).
    #[serde(default, skip_serializing_if = "Modes::is_all")]
    pub modes: Modes,
}

/// Which privilege levels an event counts: perf's event modifiers `:u` (user
/// mode only) and `:k` (kernel mode only); no modifier (or `:uk`) counts both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Modes {
    /// User and kernel mode (no modifier).
    #[default]
    All,
    /// `:u`: user mode only.
    User,
    /// `:k`: kernel mode only.
    Kernel,
}

impl Modes {
    /// Whether both user and kernel mode are counted.
    pub fn is_all(&self) -> bool {
        *self == Modes::All
    }

    /// Parses perf's modifier letters after the `:` (`u`, `k`, `uk`, `ku`).
    /// Other perf modifiers are refused with the reason.
    pub fn parse(modifiers: &str) -> Result<Modes, String> {
        let (mut user, mut kernel) = (false, false);
        for c in modifiers.chars() {
            match c {
                'u' => user = true,
                'k' => kernel = true,
                other => {
                    return Err(format!(
                        "event modifier `{other}` is not supported (hwqos knows `u` and `k`)"
                    ))
                }
            }
        }
        match (user, kernel) {
            (true, false) => Ok(Modes::User),
            (false, true) => Ok(Modes::Kernel),
            (true, true) => Ok(Modes::All),
            (false, false) => Err("an empty event modifier after `:`".to_string()),
        }
    }
}

impl EventAttr {
    /// Whether the event is counted by the CPU's PMU (as opposed to a kernel
    /// software event that works everywhere).
    pub fn is_hardware(&self) -> bool {
        !matches!(self.type_, perf_type::SOFTWARE | perf_type::TRACEPOINT)
    }
}

/// Where an event's encoding came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventSource {
    /// A generic hwqos name (`hw.cycles`, `sw.page_faults`).
    Generic,
    /// perf's own symbolic name (`L1-dcache-load-misses`, `task-clock`).
    PerfName,
    /// A raw encoding (`r0151`).
    Raw,
    /// A `pmu/term=…/` event encoded through the PMU's sysfs `format/`.
    Sysfs {
        /// The PMU's name under `/sys/bus/event_source/devices` (`cpu`, `uncore_imc_0`, …).
        pmu: String,
    },
    /// From hwqos's curated per-vendor table (events the generic ABI lacks).
    Curated {
        /// The name of the table the encoding was taken from.
        table: String,
    },
}

/// A resolved event: the name the user gave, the metric it is reported as, and
/// its encoding.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Event {
    /// The name exactly as given (reported back in `hwqos stat --json` as `event`).
    pub name: String,
    /// The metric samples of this event are published as.
    pub metric: MetricName,
    /// The `perf_event_attr` encoding backends open.
    pub attr: EventAttr,
    /// How the name was resolved to `attr`.
    pub source: EventSource,
}

impl Event {
    /// Whether the event needs the CPU's PMU (see [`EventAttr::is_hardware`]).
    pub fn is_hardware(&self) -> bool {
        self.attr.is_hardware()
    }
}
