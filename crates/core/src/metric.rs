//! Metric names, units and kinds, defined once.
//!
//! A metric name is a stable dotted lower-case name such as `hw.l1d.miss` or
//! `app.rtt_us`. The first component is the family: `hw` (PMU hardware events),
//! `sw` (kernel software events), `os` (operating-system statistics from procfs),
//! `app` (application performance metrics, the thesis' *x*) and `derived`
//! (values computed from other metrics of one counter group within one interval).
//! The [`REGISTRY`] lists the metrics hwqos knows about with their unit and kind;
//! names that are not in it (raw events, application metrics) are still valid and
//! get [`MetricInfo::fallback`].

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The families a metric name may start with.
pub const FAMILIES: &[&str] = &["hw", "sw", "os", "app", "derived"];

/// A validated dotted metric name (`family.part[.part…]`, each part `[a-z0-9_]+`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MetricName(String);

/// Why a string is not a metric name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricNameError {
    #[error("metric name is empty")]
    Empty,
    #[error("metric name `{0}` must start with one of hw., sw., os., app., derived.")]
    UnknownFamily(String),
    #[error("metric name `{name}` has an invalid part `{part}`: parts are non-empty and use only a-z, 0-9 and _")]
    BadPart { name: String, part: String },
}

impl MetricName {
    /// Parses and validates a metric name.
    pub fn new(name: impl Into<String>) -> Result<Self, MetricNameError> {
        let name = name.into();
        if name.is_empty() {
            return Err(MetricNameError::Empty);
        }
        let mut parts = name.split('.');
        let family = parts.next().unwrap_or_default();
        if !FAMILIES.contains(&family) || !name.contains('.') {
            return Err(MetricNameError::UnknownFamily(name));
        }
        for part in name.split('.') {
            let ok = !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !ok {
                return Err(MetricNameError::BadPart {
                    part: part.to_string(),
                    name,
                });
            }
        }
        Ok(MetricName(name))
    }

    /// A name known to be valid at compile time (registry entries, tests).
    ///
    /// # Panics
    /// If `name` is not a valid metric name; only use it with literals.
    pub fn from_static(name: &'static str) -> Self {
        match Self::new(name) {
            Ok(n) => n,
            Err(e) => panic!("invalid static metric name: {e}"),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The family: `hw`, `sw`, `os`, `app` or `derived`.
    pub fn family(&self) -> &str {
        self.0.split('.').next().unwrap_or_default()
    }

    /// Registry information, or a fallback for names the registry does not list.
    pub fn info(&self) -> MetricInfo {
        lookup(self.as_str())
            .cloned()
            .unwrap_or_else(|| MetricInfo::fallback(self))
    }

    /// The name in OpenMetrics form: dots become underscores, prefixed `hwqos_`.
    pub fn openmetrics_name(&self) -> String {
        format!("hwqos_{}", self.0.replace('.', "_"))
    }
}

impl fmt::Display for MetricName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for MetricName {
    type Err = MetricNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for MetricName {
    type Error = MetricNameError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<MetricName> for String {
    fn from(m: MetricName) -> String {
        m.0
    }
}

impl AsRef<str> for MetricName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The unit of a metric's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// A count of events (per interval for counters).
    Events,
    /// Nanoseconds.
    Nanoseconds,
    /// Microseconds.
    Microseconds,
    /// Seconds.
    Seconds,
    /// Bytes.
    Bytes,
    /// A fraction in 0..=1 (utilization, miss ratio).
    Ratio,
    /// Percent.
    Percent,
    /// Events per second.
    PerSecond,
    /// A dimensionless number (IPC, CPI, run-queue length).
    Dimensionless,
    /// Not known (application metrics the user defines).
    Unknown,
}

impl Unit {
    /// The unit suffix OpenMetrics expects in a metric family name, if any.
    pub fn openmetrics_suffix(self) -> Option<&'static str> {
        match self {
            Unit::Seconds => Some("seconds"),
            Unit::Bytes => Some("bytes"),
            Unit::Ratio => Some("ratio"),
            _ => None,
        }
    }
}

/// Whether a metric's value is a per-interval count of a monotonic counter or a
/// point-in-time level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricKind {
    /// Increments of a monotonic counter over the sampling interval.
    Counter,
    /// A level at the sampling instant (or an average over the interval).
    Gauge,
}

/// What the registry knows about a metric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricInfo {
    pub name: MetricName,
    pub unit: Unit,
    pub kind: MetricKind,
    pub help: String,
}

impl MetricInfo {
    /// The description used for names the registry does not list: raw events and
    /// `sw.*`/`hw.*` names are counters, everything else a unitless gauge.
    pub fn fallback(name: &MetricName) -> MetricInfo {
        let kind = match name.family() {
            "hw" | "sw" => MetricKind::Counter,
            _ => MetricKind::Gauge,
        };
        let unit = if kind == MetricKind::Counter {
            Unit::Events
        } else {
            Unit::Unknown
        };
        MetricInfo {
            name: name.clone(),
            unit,
            kind,
            help: format!("{name} (not in the hwqos registry)"),
        }
    }
}

/// A registry row: name, unit, kind, help.
pub type RegistryEntry = (&'static str, Unit, MetricKind, &'static str);

use MetricKind::{Counter, Gauge};
use Unit::*;

/// Every metric hwqos itself produces, with unit, kind and a one-line help.
pub const REGISTRY: &[RegistryEntry] = &[
    // PMU hardware events (generic names; see hwqos-pmu's catalog for encodings).
    ("hw.cycles", Events, Counter, "CPU cycles"),
    (
        "hw.ref_cycles",
        Events,
        Counter,
        "reference cycles (constant rate)",
    ),
    ("hw.instructions", Events, Counter, "instructions retired"),
    (
        "hw.branches",
        Events,
        Counter,
        "branch instructions retired",
    ),
    ("hw.branch.miss", Events, Counter, "mispredicted branches"),
    (
        "hw.cache.ref",
        Events,
        Counter,
        "last-level cache references (perf generic)",
    ),
    (
        "hw.cache.miss",
        Events,
        Counter,
        "last-level cache misses (perf generic)",
    ),
    ("hw.bus_cycles", Events, Counter, "bus cycles"),
    (
        "hw.stalled_cycles.frontend",
        Events,
        Counter,
        "cycles stalled in the front end",
    ),
    (
        "hw.stalled_cycles.backend",
        Events,
        Counter,
        "cycles stalled in the back end",
    ),
    (
        "hw.l1d.access",
        Events,
        Counter,
        "L1 data cache read accesses",
    ),
    ("hw.l1d.miss", Events, Counter, "L1 data cache read misses"),
    (
        "hw.l1d.store",
        Events,
        Counter,
        "L1 data cache write accesses",
    ),
    (
        "hw.l1i.access",
        Events,
        Counter,
        "L1 instruction cache accesses",
    ),
    (
        "hw.l1i.miss",
        Events,
        Counter,
        "L1 instruction cache misses",
    ),
    (
        "hw.l2.access",
        Events,
        Counter,
        "L2 cache accesses (model-specific event)",
    ),
    (
        "hw.l2.miss",
        Events,
        Counter,
        "L2 cache misses (model-specific event)",
    ),
    (
        "hw.llc.access",
        Events,
        Counter,
        "last-level cache read accesses",
    ),
    (
        "hw.llc.miss",
        Events,
        Counter,
        "last-level cache read misses",
    ),
    ("hw.dtlb.access", Events, Counter, "data TLB read accesses"),
    ("hw.dtlb.miss", Events, Counter, "data TLB read misses"),
    (
        "hw.itlb.access",
        Events,
        Counter,
        "instruction TLB accesses",
    ),
    ("hw.itlb.miss", Events, Counter, "instruction TLB misses"),
    (
        "hw.bpu.access",
        Events,
        Counter,
        "branch prediction unit accesses",
    ),
    (
        "hw.bpu.miss",
        Events,
        Counter,
        "branch prediction unit misses",
    ),
    (
        "hw.node.access",
        Events,
        Counter,
        "local NUMA node memory accesses",
    ),
    (
        "hw.node.miss",
        Events,
        Counter,
        "remote NUMA node memory accesses",
    ),
    // Kernel software events.
    (
        "sw.task_clock",
        Nanoseconds,
        Counter,
        "time the task ran on a CPU (ns)",
    ),
    ("sw.cpu_clock", Nanoseconds, Counter, "CPU clock time (ns)"),
    ("sw.page_faults", Events, Counter, "page faults"),
    ("sw.minor_faults", Events, Counter, "minor page faults"),
    ("sw.major_faults", Events, Counter, "major page faults"),
    ("sw.context_switches", Events, Counter, "context switches"),
    (
        "sw.cpu_migrations",
        Events,
        Counter,
        "migrations between CPUs",
    ),
    ("sw.alignment_faults", Events, Counter, "alignment faults"),
    ("sw.emulation_faults", Events, Counter, "emulation faults"),
    // Operating-system statistics from procfs.
    (
        "os.cpu.util",
        Ratio,
        Gauge,
        "CPU utilization over the interval (busy / total jiffies)",
    ),
    (
        "os.cpu.user",
        Ratio,
        Gauge,
        "share of the interval in user mode",
    ),
    (
        "os.cpu.system",
        Ratio,
        Gauge,
        "share of the interval in kernel mode",
    ),
    (
        "os.cpu.iowait",
        Ratio,
        Gauge,
        "share of the interval waiting for I/O",
    ),
    (
        "os.cpu.irq",
        Ratio,
        Gauge,
        "share of the interval serving hard and soft interrupts",
    ),
    (
        "os.interrupts",
        Events,
        Counter,
        "hardware interrupts serviced (from /proc/interrupts)",
    ),
    (
        "os.softirqs",
        Events,
        Counter,
        "soft interrupts serviced (from /proc/softirqs)",
    ),
    (
        "os.ctxt",
        Events,
        Counter,
        "context switches, whole system (from /proc/stat)",
    ),
    (
        "os.runqueue",
        Dimensionless,
        Gauge,
        "runnable tasks (from /proc/loadavg)",
    ),
    ("os.load1", Dimensionless, Gauge, "1-minute load average"),
    (
        "os.proc.cpu",
        Ratio,
        Gauge,
        "process CPU time over the interval, in CPUs",
    ),
    (
        "os.proc.minor_faults",
        Events,
        Counter,
        "process minor faults (from /proc/PID/stat)",
    ),
    (
        "os.proc.major_faults",
        Events,
        Counter,
        "process major faults (from /proc/PID/stat)",
    ),
    (
        "os.proc.threads",
        Dimensionless,
        Gauge,
        "process thread count",
    ),
    ("os.proc.rss", Bytes, Gauge, "process resident set size"),
    (
        "os.mem.available",
        Bytes,
        Gauge,
        "available memory (from /proc/meminfo)",
    ),
    // Derived from one group within one interval.
    (
        "derived.ipc",
        Dimensionless,
        Gauge,
        "instructions per cycle",
    ),
    (
        "derived.cpi",
        Dimensionless,
        Gauge,
        "cycles per instruction",
    ),
    (
        "derived.l1d.miss_ratio",
        Ratio,
        Gauge,
        "L1D misses / L1D accesses",
    ),
    (
        "derived.l2.miss_ratio",
        Ratio,
        Gauge,
        "L2 misses / L2 accesses",
    ),
    (
        "derived.llc.miss_ratio",
        Ratio,
        Gauge,
        "LLC misses / LLC accesses",
    ),
    (
        "derived.dtlb.miss_ratio",
        Ratio,
        Gauge,
        "DTLB misses / DTLB accesses",
    ),
    (
        "derived.branch.miss_ratio",
        Ratio,
        Gauge,
        "branch misses / branches",
    ),
    (
        "derived.cpu_utilization",
        Ratio,
        Gauge,
        "task clock / wall time",
    ),
    (
        "derived.cpi.base",
        Dimensionless,
        Gauge,
        "CPI stack: base (non-stall) component",
    ),
    (
        "derived.cpi.l1d",
        Dimensionless,
        Gauge,
        "CPI stack: L1D miss component",
    ),
    (
        "derived.cpi.l1i",
        Dimensionless,
        Gauge,
        "CPI stack: L1I miss component",
    ),
    (
        "derived.cpi.l2",
        Dimensionless,
        Gauge,
        "CPI stack: L2 miss component",
    ),
    (
        "derived.cpi.llc",
        Dimensionless,
        Gauge,
        "CPI stack: LLC miss component",
    ),
    (
        "derived.cpi.dtlb",
        Dimensionless,
        Gauge,
        "CPI stack: DTLB miss component",
    ),
    (
        "derived.cpi.itlb",
        Dimensionless,
        Gauge,
        "CPI stack: ITLB miss component",
    ),
    (
        "derived.cpi.branch",
        Dimensionless,
        Gauge,
        "CPI stack: branch misprediction component",
    ),
];

/// Looks a metric name up in the registry.
pub fn lookup(name: &str) -> Option<&'static MetricInfo> {
    registry().iter().find(|m| m.name.as_str() == name)
}

/// The registry as [`MetricInfo`] values (built once).
pub fn registry() -> &'static [MetricInfo] {
    static CELL: std::sync::OnceLock<Vec<MetricInfo>> = std::sync::OnceLock::new();
    CELL.get_or_init(|| {
        REGISTRY
            .iter()
            .map(|&(name, unit, kind, help)| MetricInfo {
                name: MetricName::from_static(name),
                unit,
                kind,
                help: help.to_string(),
            })
            .collect()
    })
}

/// A derived rate metric name: `<name>.rate` is not registered; rates are published
/// as `derived.rate.<family>.<rest>` so they stay in the `derived` family.
pub fn rate_name(of: &MetricName) -> MetricName {
    MetricName(format!("derived.rate.{}", of.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_and_invalid_names() {
        assert!(MetricName::new("hw.l1d.miss").is_ok());
        assert!(MetricName::new("app.rtt_us").is_ok());
        assert_eq!(MetricName::new(""), Err(MetricNameError::Empty));
        assert!(matches!(
            MetricName::new("foo.bar"),
            Err(MetricNameError::UnknownFamily(_))
        ));
        assert!(matches!(
            MetricName::new("hw"),
            Err(MetricNameError::UnknownFamily(_))
        ));
        assert!(matches!(
            MetricName::new("hw.L1d"),
            Err(MetricNameError::BadPart { .. })
        ));
        assert!(matches!(
            MetricName::new("hw..x"),
            Err(MetricNameError::BadPart { .. })
        ));
    }

    #[test]
    fn registry_is_consistent() {
        let reg = registry();
        assert_eq!(reg.len(), REGISTRY.len());
        let mut names: Vec<_> = reg.iter().map(|m| m.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), reg.len(), "duplicate registry names");
        assert_eq!(lookup("sw.task_clock").unwrap().unit, Unit::Nanoseconds);
    }

    #[test]
    fn fallback_and_serde() {
        let m = MetricName::new("app.latency_p99").unwrap();
        assert_eq!(m.info().kind, MetricKind::Gauge);
        let raw = MetricName::new("hw.raw.r0151").unwrap();
        assert_eq!(raw.info().kind, MetricKind::Counter);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, "\"app.latency_p99\"");
        assert!(serde_json::from_str::<MetricName>("\"nope\"").is_err());
        assert_eq!(m.openmetrics_name(), "hwqos_app_latency_p99");
    }
}
