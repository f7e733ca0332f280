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
    /// The empty string.
    #[error("metric name is empty")]
    Empty,
    /// The name (carried) has no dot or does not start with one of [`FAMILIES`].
    #[error("metric name `{0}` must start with one of hw., sw., os., app., derived.")]
    UnknownFamily(String),
    /// A dot-separated part is empty or has a character outside `[a-z0-9_]`.
    #[error("metric name `{name}` has an invalid part `{part}`: parts are non-empty and use only a-z, 0-9 and _")]
    BadPart {
        /// The whole name as given.
        name: String,
        /// The first offending part.
        part: String,
    },
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

    /// The name as text, e.g. `hw.l1d.miss`.
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

    /// How the monitor exposes this metric on `/metrics`: a counter as its
    /// per-second rate (`hwqos_sw_page_faults_per_second`; time counters
    /// in seconds per second), a gauge in base units with the unit as
    /// suffix (`hwqos_os_proc_rss_bytes`, `hwqos_os_cpu_util_ratio`);
    /// application metrics named `…_us`/`…_ms`/`…_ns` become `…_seconds`.
    /// The one rule the exposition and whoever reads it back (a Prometheus
    /// query) share.
    pub fn exposition(&self) -> Exposition {
        let info = self.info();
        let base = self.openmetrics_name();
        let (scale, unit): (f64, Option<&'static str>) = match info.unit {
            Unit::Nanoseconds => (1e-9, Some("seconds")),
            Unit::Microseconds => (1e-6, Some("seconds")),
            Unit::Seconds => (1.0, Some("seconds")),
            Unit::Bytes => (1.0, Some("bytes")),
            Unit::Ratio => (1.0, Some("ratio")),
            Unit::Percent => (0.01, Some("ratio")),
            _ => (1.0, None),
        };
        // Strip an abbreviated unit the name carries and convert to base units.
        let (base, scale, unit) = match (unit, self.family()) {
            (None, "app") => [("_us", 1e-6), ("_ms", 1e-3), ("_ns", 1e-9)]
                .iter()
                .find_map(|&(suffix, s)| Some((base.strip_suffix(suffix)?.to_string(), s)))
                .map_or((base.clone(), scale, unit), |(stem, s)| {
                    (stem, s, Some("seconds"))
                }),
            (Some(u), _) => {
                let stem = base.strip_suffix(&format!("_{u}")).unwrap_or(&base);
                (stem.to_string(), scale, unit)
            }
            _ => (base, scale, unit),
        };
        let named = match unit {
            Some(u) => format!("{base}_{u}"),
            None => base,
        };
        if info.kind == MetricKind::Counter {
            Exposition {
                name: format!("{named}_per_second"),
                unit: None,
                scale,
                per_second: true,
            }
        } else {
            Exposition {
                name: named,
                unit,
                scale,
                per_second: false,
            }
        }
    }
}

/// How a metric appears on `/metrics` ([`MetricName::exposition`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Exposition {
    /// The family name (`hwqos_sw_task_clock_seconds_per_second`).
    pub name: String,
    /// A gauge's base unit (`seconds`, `bytes`, `ratio`); `None` for a
    /// rate and for a unitless gauge.
    pub unit: Option<&'static str>,
    /// Factor from the metric's value to the exposed one (a rate is
    /// further divided by its interval in seconds).
    pub scale: f64,
    /// Exposed as a per-second rate (counters).
    pub per_second: bool,
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
    /// The metric this describes.
    pub name: MetricName,
    /// The unit of its sample values.
    pub unit: Unit,
    /// Whether values are per-interval counter increments or levels.
    pub kind: MetricKind,
    /// One line for humans (OpenMetrics `# HELP`, `hwqos list`).
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

/// The name of every metric in [`REGISTRY`] as a constant: code that produces
/// or looks up one of hwqos's own metrics names it through these, so a typo
/// is a compile error rather than a silently empty series.
pub mod names {
    /// `hw.cycles`
    pub const HW_CYCLES: &str = "hw.cycles";
    /// `hw.ref_cycles`
    pub const HW_REF_CYCLES: &str = "hw.ref_cycles";
    /// `hw.instructions`
    pub const HW_INSTRUCTIONS: &str = "hw.instructions";
    /// `hw.branches`
    pub const HW_BRANCHES: &str = "hw.branches";
    /// `hw.branch.miss`
    pub const HW_BRANCH_MISS: &str = "hw.branch.miss";
    /// `hw.cache.ref`
    pub const HW_CACHE_REF: &str = "hw.cache.ref";
    /// `hw.cache.miss`
    pub const HW_CACHE_MISS: &str = "hw.cache.miss";
    /// `hw.bus_cycles`
    pub const HW_BUS_CYCLES: &str = "hw.bus_cycles";
    /// `hw.stalled_cycles.frontend`
    pub const HW_STALLED_CYCLES_FRONTEND: &str = "hw.stalled_cycles.frontend";
    /// `hw.stalled_cycles.backend`
    pub const HW_STALLED_CYCLES_BACKEND: &str = "hw.stalled_cycles.backend";
    /// `hw.l1d.access`
    pub const HW_L1D_ACCESS: &str = "hw.l1d.access";
    /// `hw.l1d.miss`
    pub const HW_L1D_MISS: &str = "hw.l1d.miss";
    /// `hw.l1d.store`
    pub const HW_L1D_STORE: &str = "hw.l1d.store";
    /// `hw.l1i.access`
    pub const HW_L1I_ACCESS: &str = "hw.l1i.access";
    /// `hw.l1i.miss`
    pub const HW_L1I_MISS: &str = "hw.l1i.miss";
    /// `hw.l2.access`
    pub const HW_L2_ACCESS: &str = "hw.l2.access";
    /// `hw.l2.miss`
    pub const HW_L2_MISS: &str = "hw.l2.miss";
    /// `hw.llc.access`
    pub const HW_LLC_ACCESS: &str = "hw.llc.access";
    /// `hw.llc.miss`
    pub const HW_LLC_MISS: &str = "hw.llc.miss";
    /// `hw.dtlb.access`
    pub const HW_DTLB_ACCESS: &str = "hw.dtlb.access";
    /// `hw.dtlb.miss`
    pub const HW_DTLB_MISS: &str = "hw.dtlb.miss";
    /// `hw.itlb.access`
    pub const HW_ITLB_ACCESS: &str = "hw.itlb.access";
    /// `hw.itlb.miss`
    pub const HW_ITLB_MISS: &str = "hw.itlb.miss";
    /// `hw.bpu.access`
    pub const HW_BPU_ACCESS: &str = "hw.bpu.access";
    /// `hw.bpu.miss`
    pub const HW_BPU_MISS: &str = "hw.bpu.miss";
    /// `hw.node.access`
    pub const HW_NODE_ACCESS: &str = "hw.node.access";
    /// `hw.node.miss`
    pub const HW_NODE_MISS: &str = "hw.node.miss";
    /// `sw.task_clock`
    pub const SW_TASK_CLOCK: &str = "sw.task_clock";
    /// `sw.cpu_clock`
    pub const SW_CPU_CLOCK: &str = "sw.cpu_clock";
    /// `sw.page_faults`
    pub const SW_PAGE_FAULTS: &str = "sw.page_faults";
    /// `sw.minor_faults`
    pub const SW_MINOR_FAULTS: &str = "sw.minor_faults";
    /// `sw.major_faults`
    pub const SW_MAJOR_FAULTS: &str = "sw.major_faults";
    /// `sw.context_switches`
    pub const SW_CONTEXT_SWITCHES: &str = "sw.context_switches";
    /// `sw.cpu_migrations`
    pub const SW_CPU_MIGRATIONS: &str = "sw.cpu_migrations";
    /// `sw.alignment_faults`
    pub const SW_ALIGNMENT_FAULTS: &str = "sw.alignment_faults";
    /// `sw.emulation_faults`
    pub const SW_EMULATION_FAULTS: &str = "sw.emulation_faults";
    /// `os.cpu.util`
    pub const OS_CPU_UTIL: &str = "os.cpu.util";
    /// `os.cpu.user`
    pub const OS_CPU_USER: &str = "os.cpu.user";
    /// `os.cpu.system`
    pub const OS_CPU_SYSTEM: &str = "os.cpu.system";
    /// `os.cpu.iowait`
    pub const OS_CPU_IOWAIT: &str = "os.cpu.iowait";
    /// `os.cpu.irq`
    pub const OS_CPU_IRQ: &str = "os.cpu.irq";
    /// `os.interrupts`
    pub const OS_INTERRUPTS: &str = "os.interrupts";
    /// `os.softirqs`
    pub const OS_SOFTIRQS: &str = "os.softirqs";
    /// `os.ctxt`
    pub const OS_CTXT: &str = "os.ctxt";
    /// `os.runqueue`
    pub const OS_RUNQUEUE: &str = "os.runqueue";
    /// `os.load1`
    pub const OS_LOAD1: &str = "os.load1";
    /// `os.proc.cpu`
    pub const OS_PROC_CPU: &str = "os.proc.cpu";
    /// `os.proc.minor_faults`
    pub const OS_PROC_MINOR_FAULTS: &str = "os.proc.minor_faults";
    /// `os.proc.major_faults`
    pub const OS_PROC_MAJOR_FAULTS: &str = "os.proc.major_faults";
    /// `os.proc.threads`
    pub const OS_PROC_THREADS: &str = "os.proc.threads";
    /// `os.proc.rss`
    pub const OS_PROC_RSS: &str = "os.proc.rss";
    /// `os.mem.available`
    pub const OS_MEM_AVAILABLE: &str = "os.mem.available";
    /// `derived.ipc`
    pub const DERIVED_IPC: &str = "derived.ipc";
    /// `derived.cpi`
    pub const DERIVED_CPI: &str = "derived.cpi";
    /// `derived.l1d.miss_ratio`
    pub const DERIVED_L1D_MISS_RATIO: &str = "derived.l1d.miss_ratio";
    /// `derived.l2.miss_ratio`
    pub const DERIVED_L2_MISS_RATIO: &str = "derived.l2.miss_ratio";
    /// `derived.llc.miss_ratio`
    pub const DERIVED_LLC_MISS_RATIO: &str = "derived.llc.miss_ratio";
    /// `derived.dtlb.miss_ratio`
    pub const DERIVED_DTLB_MISS_RATIO: &str = "derived.dtlb.miss_ratio";
    /// `derived.branch.miss_ratio`
    pub const DERIVED_BRANCH_MISS_RATIO: &str = "derived.branch.miss_ratio";
    /// `derived.cpu_utilization`
    pub const DERIVED_CPU_UTILIZATION: &str = "derived.cpu_utilization";
    /// `derived.cpi.base`
    pub const DERIVED_CPI_BASE: &str = "derived.cpi.base";
    /// `derived.cpi.l1d`
    pub const DERIVED_CPI_L1D: &str = "derived.cpi.l1d";
    /// `derived.cpi.l1i`
    pub const DERIVED_CPI_L1I: &str = "derived.cpi.l1i";
    /// `derived.cpi.l2`
    pub const DERIVED_CPI_L2: &str = "derived.cpi.l2";
    /// `derived.cpi.llc`
    pub const DERIVED_CPI_LLC: &str = "derived.cpi.llc";
    /// `derived.cpi.dtlb`
    pub const DERIVED_CPI_DTLB: &str = "derived.cpi.dtlb";
    /// `derived.cpi.itlb`
    pub const DERIVED_CPI_ITLB: &str = "derived.cpi.itlb";
    /// `derived.cpi.branch`
    pub const DERIVED_CPI_BRANCH: &str = "derived.cpi.branch";
}

/// A registry row: name, unit, kind, help.
pub type RegistryEntry = (&'static str, Unit, MetricKind, &'static str);

use MetricKind::{Counter, Gauge};
use Unit::*;

/// Every metric hwqos itself produces, with unit, kind and a one-line help.
pub const REGISTRY: &[RegistryEntry] = &[
    // PMU hardware events (generic names; see hwqos-pmu's catalog for encodings).
    (names::HW_CYCLES, Events, Counter, "CPU cycles"),
    (
        names::HW_REF_CYCLES,
        Events,
        Counter,
        "reference cycles (constant rate)",
    ),
    (
        names::HW_INSTRUCTIONS,
        Events,
        Counter,
        "instructions retired",
    ),
    (
        names::HW_BRANCHES,
        Events,
        Counter,
        "branch instructions retired",
    ),
    (
        names::HW_BRANCH_MISS,
        Events,
        Counter,
        "mispredicted branches",
    ),
    (
        names::HW_CACHE_REF,
        Events,
        Counter,
        "last-level cache references (perf generic)",
    ),
    (
        names::HW_CACHE_MISS,
        Events,
        Counter,
        "last-level cache misses (perf generic)",
    ),
    (names::HW_BUS_CYCLES, Events, Counter, "bus cycles"),
    (
        names::HW_STALLED_CYCLES_FRONTEND,
        Events,
        Counter,
        "cycles stalled in the front end",
    ),
    (
        names::HW_STALLED_CYCLES_BACKEND,
        Events,
        Counter,
        "cycles stalled in the back end",
    ),
    (
        names::HW_L1D_ACCESS,
        Events,
        Counter,
        "L1 data cache read accesses",
    ),
    (
        names::HW_L1D_MISS,
        Events,
        Counter,
        "L1 data cache read misses",
    ),
    (
        names::HW_L1D_STORE,
        Events,
        Counter,
        "L1 data cache write accesses",
    ),
    (
        names::HW_L1I_ACCESS,
        Events,
        Counter,
        "L1 instruction cache accesses",
    ),
    (
        names::HW_L1I_MISS,
        Events,
        Counter,
        "L1 instruction cache misses",
    ),
    (
        names::HW_L2_ACCESS,
        Events,
        Counter,
        "L2 cache accesses (model-specific event)",
    ),
    (
        names::HW_L2_MISS,
        Events,
        Counter,
        "L2 cache misses (model-specific event)",
    ),
    (
        names::HW_LLC_ACCESS,
        Events,
        Counter,
        "last-level cache read accesses",
    ),
    (
        names::HW_LLC_MISS,
        Events,
        Counter,
        "last-level cache read misses",
    ),
    (
        names::HW_DTLB_ACCESS,
        Events,
        Counter,
        "data TLB read accesses",
    ),
    (names::HW_DTLB_MISS, Events, Counter, "data TLB read misses"),
    (
        names::HW_ITLB_ACCESS,
        Events,
        Counter,
        "instruction TLB accesses",
    ),
    (
        names::HW_ITLB_MISS,
        Events,
        Counter,
        "instruction TLB misses",
    ),
    (
        names::HW_BPU_ACCESS,
        Events,
        Counter,
        "branch prediction unit accesses",
    ),
    (
        names::HW_BPU_MISS,
        Events,
        Counter,
        "branch prediction unit misses",
    ),
    (
        names::HW_NODE_ACCESS,
        Events,
        Counter,
        "local NUMA node memory accesses",
    ),
    (
        names::HW_NODE_MISS,
        Events,
        Counter,
        "remote NUMA node memory accesses",
    ),
    // Kernel software events.
    (
        names::SW_TASK_CLOCK,
        Nanoseconds,
        Counter,
        "time the task ran on a CPU (ns)",
    ),
    (
        names::SW_CPU_CLOCK,
        Nanoseconds,
        Counter,
        "CPU clock time (ns)",
    ),
    (names::SW_PAGE_FAULTS, Events, Counter, "page faults"),
    (names::SW_MINOR_FAULTS, Events, Counter, "minor page faults"),
    (names::SW_MAJOR_FAULTS, Events, Counter, "major page faults"),
    (
        names::SW_CONTEXT_SWITCHES,
        Events,
        Counter,
        "context switches",
    ),
    (
        names::SW_CPU_MIGRATIONS,
        Events,
        Counter,
        "migrations between CPUs",
    ),
    (
        names::SW_ALIGNMENT_FAULTS,
        Events,
        Counter,
        "alignment faults",
    ),
    (
        names::SW_EMULATION_FAULTS,
        Events,
        Counter,
        "emulation faults",
    ),
    // Operating-system statistics from procfs.
    (
        names::OS_CPU_UTIL,
        Ratio,
        Gauge,
        "CPU utilization over the interval (busy / total jiffies)",
    ),
    (
        names::OS_CPU_USER,
        Ratio,
        Gauge,
        "share of the interval in user mode",
    ),
    (
        names::OS_CPU_SYSTEM,
        Ratio,
        Gauge,
        "share of the interval in kernel mode",
    ),
    (
        names::OS_CPU_IOWAIT,
        Ratio,
        Gauge,
        "share of the interval waiting for I/O",
    ),
    (
        names::OS_CPU_IRQ,
        Ratio,
        Gauge,
        "share of the interval serving hard and soft interrupts",
    ),
    (
        names::OS_INTERRUPTS,
        Events,
        Counter,
        "hardware interrupts serviced (from /proc/interrupts)",
    ),
    (
        names::OS_SOFTIRQS,
        Events,
        Counter,
        "soft interrupts serviced (from /proc/softirqs)",
    ),
    (
        names::OS_CTXT,
        Events,
        Counter,
        "context switches, whole system (from /proc/stat)",
    ),
    (
        names::OS_RUNQUEUE,
        Dimensionless,
        Gauge,
        "runnable tasks (from /proc/loadavg)",
    ),
    (
        names::OS_LOAD1,
        Dimensionless,
        Gauge,
        "1-minute load average",
    ),
    (
        names::OS_PROC_CPU,
        Ratio,
        Gauge,
        "process CPU time over the interval, in CPUs",
    ),
    (
        names::OS_PROC_MINOR_FAULTS,
        Events,
        Counter,
        "process minor faults (from /proc/PID/stat)",
    ),
    (
        names::OS_PROC_MAJOR_FAULTS,
        Events,
        Counter,
        "process major faults (from /proc/PID/stat)",
    ),
    (
        names::OS_PROC_THREADS,
        Dimensionless,
        Gauge,
        "process thread count",
    ),
    (
        names::OS_PROC_RSS,
        Bytes,
        Gauge,
        "process resident set size",
    ),
    (
        names::OS_MEM_AVAILABLE,
        Bytes,
        Gauge,
        "available memory (from /proc/meminfo)",
    ),
    // Derived from one group within one interval.
    (
        names::DERIVED_IPC,
        Dimensionless,
        Gauge,
        "instructions per cycle",
    ),
    (
        names::DERIVED_CPI,
        Dimensionless,
        Gauge,
        "cycles per instruction",
    ),
    (
        names::DERIVED_L1D_MISS_RATIO,
        Ratio,
        Gauge,
        "L1D misses / L1D accesses",
    ),
    (
        names::DERIVED_L2_MISS_RATIO,
        Ratio,
        Gauge,
        "L2 misses / L2 accesses",
    ),
    (
        names::DERIVED_LLC_MISS_RATIO,
        Ratio,
        Gauge,
        "LLC misses / LLC accesses",
    ),
    (
        names::DERIVED_DTLB_MISS_RATIO,
        Ratio,
        Gauge,
        "DTLB misses / DTLB accesses",
    ),
    (
        names::DERIVED_BRANCH_MISS_RATIO,
        Ratio,
        Gauge,
        "branch misses / branches",
    ),
    (
        names::DERIVED_CPU_UTILIZATION,
        Ratio,
        Gauge,
        "task clock / wall time",
    ),
    (
        names::DERIVED_CPI_BASE,
        Dimensionless,
        Gauge,
        "CPI stack: base (non-stall) component",
    ),
    (
        names::DERIVED_CPI_L1D,
        Dimensionless,
        Gauge,
        "CPI stack: L1D miss component",
    ),
    (
        names::DERIVED_CPI_L1I,
        Dimensionless,
        Gauge,
        "CPI stack: L1I miss component",
    ),
    (
        names::DERIVED_CPI_L2,
        Dimensionless,
        Gauge,
        "CPI stack: L2 miss component",
    ),
    (
        names::DERIVED_CPI_LLC,
        Dimensionless,
        Gauge,
        "CPI stack: LLC miss component",
    ),
    (
        names::DERIVED_CPI_DTLB,
        Dimensionless,
        Gauge,
        "CPI stack: DTLB miss component",
    ),
    (
        names::DERIVED_CPI_ITLB,
        Dimensionless,
        Gauge,
        "CPI stack: ITLB miss component",
    ),
    (
        names::DERIVED_CPI_BRANCH,
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
