//! The resolved form of an event: what the catalog produces from a name and what
//! backends open.

use hwqos_core::MetricName;
use serde::{Deserialize, Serialize};

/// `perf_event_attr.type` values of the generic perf ABI.
pub mod perf_type {
    pub const HARDWARE: u32 = 0;
    pub const SOFTWARE: u32 = 1;
    pub const TRACEPOINT: u32 = 2;
    pub const HW_CACHE: u32 = 3;
    pub const RAW: u32 = 4;
    pub const BREAKPOINT: u32 = 5;
}

/// The `perf_event_attr` fields that identify an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventAttr {
    /// `perf_event_attr.type`: a generic type or a dynamic PMU's type from sysfs.
    #[serde(rename = "type")]
    pub type_: u32,
    pub config: u64,
    #[serde(default)]
    pub config1: u64,
    #[serde(default)]
    pub config2: u64,
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
    Sysfs { pmu: String },
    /// From hwqos's curated per-vendor table (events the generic ABI lacks).
    Curated { table: String },
}

/// A resolved event: the name the user gave, the metric it is reported as, and
/// its encoding.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Event {
    /// The name exactly as given (reported back in `hwqos stat --json` as `event`).
    pub name: String,
    /// The metric samples of this event are published as.
    pub metric: MetricName,
    pub attr: EventAttr,
    pub source: EventSource,
}

impl Event {
    pub fn is_hardware(&self) -> bool {
        self.attr.is_hardware()
    }
}
