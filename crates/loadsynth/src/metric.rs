//! The metrics a load model can hold, how each is measured (which recording /
//! monitor metrics it is computed from) and which values are possible.

use hwqos_core::metric::names;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// One controllable metric of one CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum LoadMetric {
    /// Busy share of the CPU (0..=1), from `/proc/stat`.
    CpuUtil,
    /// Page faults per second on the CPU (`sw.page_faults`).
    PageFaultRate,
    /// Context switches per second on the CPU (`sw.context_switches`).
    ContextSwitchRate,
    /// Instructions retired per second on the CPU (`hw.instructions`, user
    /// and kernel mode, every task on the CPU): a hardware counter rate.
    InstRate,
    /// L1 data-cache misses per L1D access.
    L1dMissRatio,
    /// L2 misses per L2 access.
    L2MissRatio,
    /// Last-level-cache misses per LLC access.
    LlcMissRatio,
    /// L1 instruction-cache misses per L1I access.
    L1iMissRatio,
    /// Data-TLB misses per DTLB access.
    DtlbMissRatio,
    /// Instruction-TLB misses per ITLB access.
    ItlbMissRatio,
    /// Mispredicted branches per branch.
    BranchMissRatio,
    /// Bytes per second streamed through memory (open loop: the generator's own count).
    MemBandwidth,
    /// Bytes per second written to files (open loop: the generator's own count).
    IoWriteRate,
}

/// How a metric is computed from monitor samples of one CPU scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Formula {
    /// The gauge as is.
    Gauge(&'static str),
    /// A counter's increment divided by the interval in seconds.
    Rate(&'static str),
    /// Counter `numerator` / counter `denominator` over the same interval.
    Ratio(&'static str, &'static str),
    /// Not measured by counters; the generator's own count is the measurement.
    SelfReported,
}

/// Every metric, in the order controllers are started: deeper cache levels
/// before shallower ones (an L2 miss is also an L1 miss).
pub const ALL: [LoadMetric; 13] = [
    LoadMetric::CpuUtil,
    LoadMetric::PageFaultRate,
    LoadMetric::ContextSwitchRate,
    LoadMetric::InstRate,
    LoadMetric::LlcMissRatio,
    LoadMetric::L2MissRatio,
    LoadMetric::L1dMissRatio,
    LoadMetric::L1iMissRatio,
    LoadMetric::DtlbMissRatio,
    LoadMetric::ItlbMissRatio,
    LoadMetric::BranchMissRatio,
    LoadMetric::MemBandwidth,
    LoadMetric::IoWriteRate,
];

impl LoadMetric {
    /// The stable name used in target and model files.
    pub fn name(self) -> &'static str {
        match self {
            LoadMetric::CpuUtil => "cpu_util",
            LoadMetric::PageFaultRate => "page_fault_rate",
            LoadMetric::ContextSwitchRate => "context_switch_rate",
            LoadMetric::InstRate => "inst_rate",
            LoadMetric::L1dMissRatio => "l1d_miss_ratio",
            LoadMetric::L2MissRatio => "l2_miss_ratio",
            LoadMetric::LlcMissRatio => "llc_miss_ratio",
            LoadMetric::L1iMissRatio => "l1i_miss_ratio",
            LoadMetric::DtlbMissRatio => "dtlb_miss_ratio",
            LoadMetric::ItlbMissRatio => "itlb_miss_ratio",
            LoadMetric::BranchMissRatio => "branch_miss_ratio",
            LoadMetric::MemBandwidth => "mem_bandwidth",
            LoadMetric::IoWriteRate => "io_write_rate",
        }
    }

    /// Unit for humans.
    pub fn unit(self) -> &'static str {
        match self {
            LoadMetric::CpuUtil => "share",
            LoadMetric::PageFaultRate => "faults/s",
            LoadMetric::ContextSwitchRate => "switches/s",
            LoadMetric::InstRate => "instructions/s",
            LoadMetric::MemBandwidth | LoadMetric::IoWriteRate => "bytes/s",
            _ => "ratio",
        }
    }

    /// How the metric is computed from per-CPU monitor samples.
    pub fn formula(self) -> Formula {
        match self {
            LoadMetric::CpuUtil => Formula::Gauge(names::OS_CPU_UTIL),
            LoadMetric::PageFaultRate => Formula::Rate(names::SW_PAGE_FAULTS),
            LoadMetric::ContextSwitchRate => Formula::Rate(names::SW_CONTEXT_SWITCHES),
            LoadMetric::InstRate => Formula::Rate(names::HW_INSTRUCTIONS),
            LoadMetric::L1dMissRatio => Formula::Ratio(names::HW_L1D_MISS, names::HW_L1D_ACCESS),
            LoadMetric::L2MissRatio => Formula::Ratio(names::HW_L2_MISS, names::HW_L2_ACCESS),
            LoadMetric::LlcMissRatio => Formula::Ratio(names::HW_LLC_MISS, names::HW_LLC_ACCESS),
            LoadMetric::L1iMissRatio => Formula::Ratio(names::HW_L1I_MISS, names::HW_L1I_ACCESS),
            LoadMetric::DtlbMissRatio => Formula::Ratio(names::HW_DTLB_MISS, names::HW_DTLB_ACCESS),
            LoadMetric::ItlbMissRatio => Formula::Ratio(names::HW_ITLB_MISS, names::HW_ITLB_ACCESS),
            LoadMetric::BranchMissRatio => {
                Formula::Ratio(names::HW_BRANCH_MISS, names::HW_BRANCHES)
            }
            LoadMetric::MemBandwidth | LoadMetric::IoWriteRate => Formula::SelfReported,
        }
    }

    /// The counter events the metric needs (empty for gauges and self-reported metrics).
    pub fn events(self) -> Vec<&'static str> {
        match self.formula() {
            Formula::Rate(e) => vec![e],
            Formula::Ratio(n, d) => vec![n, d],
            Formula::Gauge(_) | Formula::SelfReported => Vec::new(),
        }
    }

    /// Whether the metric needs hardware (PMU) events: the miss ratios and
    /// the instruction rate.
    pub fn is_hardware(self) -> bool {
        self.events().iter().any(|e| e.starts_with("hw."))
    }

    /// The largest possible value (`None`: unbounded rates).
    pub fn max_value(self) -> Option<f64> {
        match self {
            LoadMetric::PageFaultRate
            | LoadMetric::ContextSwitchRate
            | LoadMetric::InstRate
            | LoadMetric::MemBandwidth
            | LoadMetric::IoWriteRate => None,
            _ => Some(1.0),
        }
    }

    /// `v` for people: utilization as a percentage, ratios with four
    /// decimals, rates with one.
    pub fn format_value(self, v: f64) -> String {
        match self {
            LoadMetric::CpuUtil => format!("{:.2}%", v * 100.0),
            m if m.max_value().is_some() => format!("{v:.4}"),
            _ => format!("{v:.1}"),
        }
    }

    /// Checks that `value` is possible for this metric.
    pub fn validate(self, value: f64) -> Result<(), String> {
        if !value.is_finite() || value < 0.0 {
            return Err(format!(
                "{} = {value} is impossible (must be a finite value ≥ 0 {})",
                self.name(),
                self.unit()
            ));
        }
        if let Some(max) = self.max_value() {
            if value > max {
                return Err(format!(
                    "{} = {value} is impossible (a {} lies in 0..=1; {:.0}% was asked)",
                    self.name(),
                    self.unit(),
                    value * 100.0
                ));
            }
        }
        Ok(())
    }

    /// Cache depth for coupled metrics: higher is deeper (controlled first).
    pub fn depth(self) -> u8 {
        match self {
            LoadMetric::LlcMissRatio => 3,
            LoadMetric::L2MissRatio => 2,
            LoadMetric::L1dMissRatio => 1,
            _ => 0,
        }
    }

    /// Default convergence tolerance: (absolute, relative); the larger applies.
    pub fn default_tolerance(self) -> (f64, f64) {
        match self {
            LoadMetric::CpuUtil => (0.01, 0.0),
            LoadMetric::PageFaultRate => (5.0, 0.02),
            LoadMetric::ContextSwitchRate => (5.0, 0.05),
            // A counter rate with an exact generator: 1 % (the hardware
            // validation asks ±3 % of the converged model).
            LoadMetric::InstRate => (1000.0, 0.01),
            LoadMetric::MemBandwidth | LoadMetric::IoWriteRate => (1024.0, 0.03),
            _ => (0.002, 0.05),
        }
    }
}

impl fmt::Display for LoadMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LoadMetric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ALL.iter().copied().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<&str> = ALL.iter().map(|m| m.name()).collect();
            format!("unknown metric `{s}` (known: {})", names.join(", "))
        })
    }
}

impl TryFrom<String> for LoadMetric {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<LoadMetric> for String {
    fn from(m: LoadMetric) -> String {
        m.name().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_listed() {
        for m in ALL {
            assert_eq!(m.name().parse::<LoadMetric>().unwrap(), m);
        }
        let e = "l4_miss_ratio".parse::<LoadMetric>().unwrap_err();
        assert!(e.contains("unknown metric `l4_miss_ratio`") && e.contains("cpu_util"));
    }

    #[test]
    fn impossible_values_are_rejected() {
        let e = LoadMetric::LlcMissRatio.validate(1.5).unwrap_err();
        assert!(e.contains("150%"), "{e}");
        assert!(LoadMetric::PageFaultRate.validate(-1.0).is_err());
        assert!(LoadMetric::CpuUtil.validate(f64::NAN).is_err());
        assert!(LoadMetric::PageFaultRate.validate(1e6).is_ok());
        // An instruction rate is unbounded above, but not negative or infinite.
        assert!(LoadMetric::InstRate.validate(3e8).is_ok());
        let e = LoadMetric::InstRate.validate(-1.0).unwrap_err();
        assert!(
            e.contains("inst_rate") && e.contains("instructions/s"),
            "{e}"
        );
        assert!(LoadMetric::InstRate.validate(f64::INFINITY).is_err());
    }

    #[test]
    fn the_instruction_rate_is_a_hardware_counter_rate() {
        assert_eq!(
            LoadMetric::InstRate.formula(),
            Formula::Rate(names::HW_INSTRUCTIONS)
        );
        assert!(LoadMetric::InstRate.is_hardware());
        assert!(LoadMetric::L1dMissRatio.is_hardware());
        assert!(!LoadMetric::PageFaultRate.is_hardware());
        assert!(!LoadMetric::CpuUtil.is_hardware());
        assert_eq!(LoadMetric::InstRate.format_value(3e8), "300000000.0");
    }
}
