//! Per-CPU-model target specs (thesis 5.3.3): a JSON file that says which PMUs
//! and events a node (or a CPU model) offers and how many counters can run at
//! once, so the monitor's code stays generic across machines.
//!
//! A spec is generated from sysfs (`/sys/bus/event_source/devices/*`), the CPU
//! model in `/proc/cpuinfo` and hwqos's curated per-model table; the counter
//! capacity comes from CPUID on this node (Intel leaf 0xA, AMD leaf 0x80000022),
//! from the curated table, or — for an Armv8 core the table does not know —
//! from probing how large a group runs ([`probe_group_capacity`]). [`check_availability`] asks a counter backend which
//! events really open — what `--list-events` shows.

use crate::backend::CounterBackend;
use crate::catalog::{curated, generic_event_names, sysfs, Catalog, CpuModel, Vendor};
use crate::event::{EventAttr, EventSource};
use crate::PmuError;
use hwqos_core::MetricName;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub use crate::catalog::PmuInfo;

/// The spec format version this code writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// What one node or CPU model offers for counting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetSpec {
    /// Always [`SCHEMA_VERSION`].
    pub schema: u32,
    /// The CPU model the spec describes (selects curated events).
    pub cpu: CpuModel,
    /// Hardware counters per logical CPU.
    pub counters: CounterCapacity,
    /// The PMUs sysfs lists, with their types, formats and event aliases.
    pub pmus: Vec<PmuInfo>,
    /// Every generic hwqos event with its encoding here, or why there is none.
    pub events: Vec<SpecEvent>,
}

/// How many hardware counters one CPU can run at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterCapacity {
    /// Programmable counters per logical CPU; `None` if not known.
    pub general_purpose: Option<usize>,
    /// Fixed-function counters (cycles, instructions, ref-cycles) per logical CPU.
    pub fixed: Option<usize>,
    /// How this is known (CPUID leaf, curated table, no PMU in sysfs).
    pub source: String,
}

/// One event of a spec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecEvent {
    /// The generic hwqos event name (`hw.cycles`, `sw.page_faults`).
    pub name: String,
    /// The metric the event is reported as.
    pub metric: MetricName,
    /// The encoding; absent when the event cannot be encoded on this model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attr: Option<EventAttr>,
    /// Where the encoding came from; absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<EventSource>,
    /// `Some(false)` when known to be unavailable, `None` when only a probe on
    /// the node can tell (see [`check_availability`]).
    #[serde(default)]
    pub available: Option<bool>,
    /// Why the event is unavailable; set exactly when `available` is `Some(false)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl TargetSpec {
    /// How many events one counter group can hold without multiplexing: the
    /// general-purpose counters (fixed ones only serve cycles/instructions, so
    /// they are not counted on). `None` if unknown.
    pub fn capacity(&self) -> Option<usize> {
        self.counters.general_purpose
    }

    /// The most hardware events one group can hold: general-purpose plus fixed
    /// counters. `None` when unknown or when the node has no hardware counters
    /// (then hardware events are reported unavailable, not "too many").
    pub fn max_group_events(&self) -> Option<usize> {
        let general = self.counters.general_purpose.filter(|&n| n > 0)?;
        Some(general + self.counters.fixed.unwrap_or(0))
    }

    /// The spec's event by name.
    pub fn event(&self, name: &str) -> Option<&SpecEvent> {
        self.events.iter().find(|e| e.name == name)
    }

    /// A catalog that resolves names against this spec's PMUs and CPU model
    /// (for resolving a remote node's events from its spec file).
    pub fn catalog(&self) -> Catalog {
        Catalog::from_parts(self.pmus.clone(), Some(self.cpu.clone()))
    }

    /// The spec as indented JSON (the format [`TargetSpec::from_json`] reads).
    pub fn to_json_pretty(&self) -> Result<String, PmuError> {
        serde_json::to_string_pretty(self)
            .map_err(|e| PmuError::Config(format!("cannot encode target spec: {e}")))
    }

    /// Parses a spec, rejecting other schema versions with a clear message.
    pub fn from_json(text: &str) -> Result<TargetSpec, PmuError> {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| PmuError::Config(format!("target spec is not valid JSON: {e}")))?;
        match value.get("schema") {
            None => {
                return Err(PmuError::Config(format!(
                    "target spec has no `schema` field (expected \"schema\": {SCHEMA_VERSION})"
                )))
            }
            Some(v) if v.as_u64() != Some(u64::from(SCHEMA_VERSION)) => {
                return Err(PmuError::Config(format!(
                    "target spec schema {v} is not supported: this hwqos reads schema {SCHEMA_VERSION} only"
                )))
            }
            Some(_) => {}
        }
        serde_json::from_value(value).map_err(|e| {
            PmuError::Config(format!(
                "target spec (schema {SCHEMA_VERSION}) is malformed: {e}"
            ))
        })
    }

    /// Reads a spec file.
    pub fn read(path: &Path) -> Result<TargetSpec, PmuError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PmuError::io(format!("reading target spec {}", path.display()), e))?;
        TargetSpec::from_json(&text).map_err(|e| match e {
            PmuError::Config(msg) => PmuError::Config(format!("{}: {msg}", path.display())),
            other => other,
        })
    }

    /// Writes the spec as pretty JSON.
    pub fn write(&self, path: &Path) -> Result<(), PmuError> {
        let json = self.to_json_pretty()?;
        std::fs::write(path, json + "\n")
            .map_err(|e| PmuError::io(format!("writing target spec {}", path.display()), e))
    }
}

/// Generates the spec of the node whose sysfs is mounted at `sysfs_root` and
/// procfs at `proc_root`. CPUID is consulted only when these are this node's own
/// `/sys` and `/proc`; for any other tree the curated table is used.
pub fn generate(sysfs_root: &Path, proc_root: &Path) -> TargetSpec {
    let this_node = sysfs_root == Path::new("/sys") && proc_root == Path::new("/proc");
    let catalog = Catalog::load_with_cpu(sysfs_root, proc_root);
    let counters = counter_capacity(&catalog, sysfs_root, this_node);
    spec_from_catalog(&catalog, counters)
}

/// [`generate`] for this node.
/// Fills in each event's `available`/`reason` by opening it once on `backend`
/// (for a spec of the node the backend runs on).
pub fn probe_availability(spec: &mut TargetSpec, backend: &mut dyn CounterBackend) {
    let catalog = spec.catalog();
    let names: Vec<String> = spec.events.iter().map(|e| e.name.clone()).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    for status in check_availability(&catalog, backend, &refs) {
        if let Some(event) = spec.events.iter_mut().find(|e| e.name == status.name) {
            event.available = Some(status.available);
            event.reason = status.reason;
        }
    }
}

/// [`generate`] for this node's own `/sys` and `/proc` (CPUID consulted).
pub fn generate_for_this_node() -> TargetSpec {
    generate(Path::new("/sys"), Path::new("/proc"))
}

fn spec_from_catalog(catalog: &Catalog, counters: CounterCapacity) -> TargetSpec {
    let no_counters = counters.general_purpose == Some(0);
    let events = generic_event_names()
        .into_iter()
        .map(|name| {
            let metric = MetricName::from_static(name);
            match catalog.resolve(name) {
                Ok(event) => {
                    let (available, reason) = if event.is_hardware() && no_counters {
                        (
                            Some(false),
                            Some(format!("no hardware counters: {}", counters.source)),
                        )
                    } else {
                        (None, None)
                    };
                    SpecEvent {
                        name: name.to_string(),
                        metric: event.metric,
                        attr: Some(event.attr),
                        source: Some(event.source),
                        available,
                        reason,
                    }
                }
                Err(err) => SpecEvent {
                    name: name.to_string(),
                    metric,
                    attr: None,
                    source: None,
                    available: Some(false),
                    reason: Some(reason_of(&err)),
                },
            }
        })
        .collect();
    TargetSpec {
        schema: SCHEMA_VERSION,
        cpu: catalog.cpu().cloned().unwrap_or_else(CpuModel::unknown),
        counters,
        pmus: catalog.pmus().to_vec(),
        events,
    }
}

fn counter_capacity(catalog: &Catalog, sysfs_root: &Path, this_node: bool) -> CounterCapacity {
    if catalog.core_pmus().next().is_none() {
        return CounterCapacity {
            general_purpose: Some(0),
            fixed: Some(0),
            source: format!(
                "no CPU core PMU under {} (a virtual machine without a virtual PMU?); software events need no counters",
                sysfs::devices_dir(sysfs_root).display()
            ),
        };
    }
    let unknown_cpu = CpuModel::unknown();
    let cpu = catalog.cpu().unwrap_or(&unknown_cpu);
    if this_node {
        if let Some(capacity) = cpuid_capacity(cpu.vendor) {
            return capacity;
        }
    }
    match cpu.vendor {
        Vendor::Intel | Vendor::Amd | Vendor::Hygon => match curated::x86_row(cpu) {
            Some(row) => CounterCapacity {
                general_purpose: Some(row.general_purpose),
                fixed: Some(row.fixed),
                source: format!("curated table `{}` ({})", row.table, row.note),
            },
            None => unknown_capacity(cpu),
        },
        Vendor::Arm => match curated::arm_general_purpose(cpu) {
            None if this_node => arm_probed_capacity(catalog, cpu),
            Some(n) => CounterCapacity {
                general_purpose: Some(n),
                fixed: Some(1),
                source: format!(
                    "curated table `{}`: {} implement{} {n} event counters (PMCR_EL0.N) plus the cycle counter",
                    curated::ARM_TABLE,
                    cpu.model_name,
                    if cpu.parts.len() == 1 { "s" } else { "" }
                ),
            },
            None => unknown_capacity(cpu),
        },
        Vendor::Unknown => unknown_capacity(cpu),
    }
}

/// The generic Armv8 fallback for a core outside the curated table (QEMU's
/// `-cpu max` among them): every PMUv3 has `PMCR_EL0.N` event counters plus
/// the cycle counter, but `PMCR_EL0` is not readable at EL0, so N is measured
/// with [`probe_group_capacity`] on `hw.instructions` (`INST_RETIRED` never
/// runs on the cycle counter, so the largest group that runs is N).
fn arm_probed_capacity(catalog: &Catalog, cpu: &CpuModel) -> CounterCapacity {
    let mut backend = crate::backend::perf::PerfBackend::with_capacity(None);
    match catalog
        .resolve(hwqos_core::metric::names::HW_INSTRUCTIONS)
        .ok()
        .and_then(|event| probe_group_capacity(&mut backend, &event, MAX_PROBED_GROUP))
    {
        Some(n) => CounterCapacity {
            general_purpose: Some(n),
            fixed: Some(1),
            source: format!(
                "probed: {} is not in the curated table ({}); groups of up to {n} `hw.instructions` ran on its core PMU (the Armv8 PMUv3 event counters, PMCR_EL0.N), plus the architected cycle counter",
                cpu.describe(),
                curated::COVERAGE
            ),
        },
        None => unknown_capacity(cpu),
    }
}

/// The largest group [`probe_group_capacity`] tries (the Armv8 architecture
/// allows 31 event counters).
pub const MAX_PROBED_GROUP: usize = 32;

/// How many copies of `event` one group can count at once on the calling
/// thread: groups of 1, 2, … copies are opened, enabled around a short busy
/// loop and read; the answer is the largest group that opened and ran
/// (`time_running` > 0). A group that does not fit the PMU either fails to
/// open (x86 and Arm validate groups at open) or never runs. Counters held by
/// others (an NMI watchdog, another profiler) reduce the answer, which is what
/// a group can use now. `None` when not even one copy runs.
pub fn probe_group_capacity(
    backend: &mut dyn CounterBackend,
    event: &crate::event::Event,
    max: usize,
) -> Option<usize> {
    let me = crate::backend::CountTarget::Task {
        tid: nix::unistd::gettid().as_raw() as u32,
        inherit: false,
    };
    let mut fits = 0;
    for k in 1..=max {
        let events = vec![event.clone(); k];
        let Ok(group) = backend.open_group(&me, &events) else {
            break;
        };
        let ran = backend.enable(group).is_ok() && {
            let mut x = 0u64;
            for i in 0..200_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            std::hint::black_box(x);
            let _ = backend.disable(group);
            backend
                .read(group)
                .is_ok_and(|r| r.time_running > 0 && r.values.len() == k)
        };
        backend.close(group);
        if !ran {
            break;
        }
        fits = k;
    }
    (fits > 0).then_some(fits)
}

fn unknown_capacity(cpu: &CpuModel) -> CounterCapacity {
    CounterCapacity {
        general_purpose: None,
        fixed: None,
        source: format!(
            "{} is not in hwqos's curated table ({})",
            cpu.describe(),
            curated::COVERAGE
        ),
    }
}

/// Counter capacity from CPUID of the CPU this code runs on.
#[cfg(target_arch = "x86_64")]
fn cpuid_capacity(vendor: Vendor) -> Option<CounterCapacity> {
    #[allow(unused_unsafe)] // `__cpuid` is safe on newer toolchains
    // SAFETY: CPUID exists on every x86_64 CPU; leaves above the maximum reported
    // by leaf 0 / 0x80000000 are not queried.
    let cpuid = |leaf: u32| unsafe { std::arch::x86_64::__cpuid(leaf) };
    match vendor {
        Vendor::Intel if cpuid(0).eax >= 0xa => {
            let leaf = cpuid(0xa);
            intel_leaf_a_capacity(leaf.eax, leaf.edx)
        }
        Vendor::Amd | Vendor::Hygon if cpuid(0x8000_0000).eax >= 0x8000_0022 => {
            amd_leaf_80000022_capacity(cpuid(0x8000_0022).ebx)
        }
        _ => None,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_capacity(_vendor: Vendor) -> Option<CounterCapacity> {
    None
}

/// Decodes Intel CPUID leaf 0xA (SDM vol. 2A, CPUID): EAX[7:0] architectural
/// perfmon version, EAX[15:8] general-purpose counters per logical CPU, EDX[4:0]
/// fixed counters (version 2 and later). Version 0 means no architectural PMU
/// (typical in a VM without a virtual PMU).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // CPUID is x86-only
fn intel_leaf_a_capacity(eax: u32, edx: u32) -> Option<CounterCapacity> {
    let version = eax & 0xff;
    if version == 0 {
        return None;
    }
    let general_purpose = ((eax >> 8) & 0xff) as usize;
    let fixed = if version > 1 {
        (edx & 0x1f) as usize
    } else {
        0
    };
    Some(CounterCapacity {
        general_purpose: Some(general_purpose),
        fixed: Some(fixed),
        source: format!("CPUID leaf 0xA (architectural perfmon version {version})"),
    })
}

/// Decodes AMD CPUID leaf 0x80000022 (PerfMonV2, Zen 4 and later): EBX[3:0]
/// `NumPerfCtrCore`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // CPUID is x86-only
fn amd_leaf_80000022_capacity(ebx: u32) -> Option<CounterCapacity> {
    let general_purpose = (ebx & 0xf) as usize;
    (general_purpose > 0).then(|| CounterCapacity {
        general_purpose: Some(general_purpose),
        fixed: Some(0),
        source: "CPUID leaf 0x80000022 (AMD PerfMonV2 NumPerfCtrCore)".to_string(),
    })
}

/// Whether one event can be counted on this node, and why not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventStatus {
    /// The name as given.
    pub name: String,
    /// The metric it is reported as; absent if the name did not resolve.
    pub metric: Option<MetricName>,
    /// Whether the name resolved and the probe could open it.
    pub available: bool,
    /// Why it is not available (resolution or open error); `None` when available.
    pub reason: Option<String>,
    /// Where the encoding came from; absent if the name did not resolve.
    pub source: Option<EventSource>,
}

/// Resolves each name and probes it with `backend` (opening and closing it on the
/// calling thread).
pub fn check_availability(
    catalog: &Catalog,
    backend: &mut dyn CounterBackend,
    names: &[&str],
) -> Vec<EventStatus> {
    names
        .iter()
        .map(|&name| match catalog.resolve(name) {
            Ok(event) => {
                let probe = backend.probe(&event);
                EventStatus {
                    name: name.to_string(),
                    metric: Some(event.metric),
                    available: probe.is_ok(),
                    reason: probe.err().map(|e| reason_of(&e)),
                    source: Some(event.source),
                }
            }
            Err(err) => EventStatus {
                name: name.to_string(),
                metric: None,
                available: false,
                reason: Some(reason_of(&err)),
                source: None,
            },
        })
        .collect()
}

/// The part of an error that explains it, without repeating the event name.
fn reason_of(err: &PmuError) -> String {
    match err {
        PmuError::Unavailable { reason, .. } => reason.clone(),
        PmuError::UnknownEvent { reason, .. } => format!("unknown event: {reason}"),
        PmuError::Permission { reason, .. } => format!("permission denied: {reason}"),
        other => other.to_string(),
    }
}

/// A plain-text table of statuses: event, metric, status, reason.
pub fn render_event_table(statuses: &[EventStatus]) -> String {
    let metric_of = |s: &EventStatus| s.metric.as_ref().map_or("-".to_string(), |m| m.to_string());
    let name_w = statuses
        .iter()
        .map(|s| s.name.len())
        .chain([5])
        .max()
        .unwrap_or(5);
    let metric_w = statuses
        .iter()
        .map(|s| metric_of(s).len())
        .chain([6])
        .max()
        .unwrap_or(6);
    let status_w = "unavailable".len();
    let mut out = format!(
        "{:<name_w$}  {:<metric_w$}  {:<status_w$}  REASON\n",
        "EVENT", "METRIC", "STATUS"
    );
    for s in statuses {
        let status = if s.available {
            "available"
        } else {
            "unavailable"
        };
        let line = format!(
            "{:<name_w$}  {:<metric_w$}  {:<status_w$}  {}",
            s.name,
            metric_of(s),
            status,
            s.reason.as_deref().unwrap_or("")
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::SimBackend;
    use crate::backend::{BackendKind, CountTarget, GroupId, GroupReading};

    /// A simulated PMU whose virtual clock moves 1 ms whenever a group is
    /// enabled (the probe's busy loop, in virtual time).
    struct Ticking(SimBackend);

    impl CounterBackend for Ticking {
        fn kind(&self) -> BackendKind {
            self.0.kind()
        }
        fn capacity(&self) -> Option<usize> {
            None
        }
        fn open_group(&mut self, t: &CountTarget, e: &[crate::Event]) -> Result<GroupId, PmuError> {
            self.0.open_group(t, e)
        }
        fn enable(&mut self, g: GroupId) -> Result<(), PmuError> {
            self.0.enable(g)?;
            self.0.advance(1_000_000);
            Ok(())
        }
        fn disable(&mut self, g: GroupId) -> Result<(), PmuError> {
            self.0.disable(g)
        }
        fn read(&mut self, g: GroupId) -> Result<GroupReading, PmuError> {
            self.0.read(g)
        }
        fn close(&mut self, g: GroupId) {
            self.0.close(g)
        }
    }

    #[test]
    fn probed_group_capacity_is_the_largest_group_that_runs() {
        let instructions = Catalog::from_parts(Vec::new(), None)
            .resolve(hwqos_core::metric::names::HW_INSTRUCTIONS)
            .unwrap();
        for capacity in [1, 4, 6] {
            let mut pmu = Ticking(SimBackend::new(capacity));
            assert_eq!(
                probe_group_capacity(&mut pmu, &instructions, MAX_PROBED_GROUP),
                Some(capacity)
            );
            assert_eq!(pmu.0.open_groups(), 0, "every probe group is closed");
        }
        let mut none = Ticking(SimBackend::new(0));
        assert_eq!(probe_group_capacity(&mut none, &instructions, 8), None);
        // Bounded by `max` where groups always fit.
        let mut big = Ticking(SimBackend::new(64));
        assert_eq!(probe_group_capacity(&mut big, &instructions, 8), Some(8));
    }

    #[test]
    fn cpuid_leaves_decode() {
        // A Skylake client: version 4, 4 GP counters (48 bits), 3 fixed (48 bits).
        let sky = intel_leaf_a_capacity(0x0730_0404, 0x0000_0603).unwrap();
        assert_eq!((sky.general_purpose, sky.fixed), (Some(4), Some(3)));
        assert!(sky.source.contains("version 4"));
        // Version 1 has no fixed counters; version 0 is no PMU at all.
        let v1 = intel_leaf_a_capacity(0x0728_0201, 0x0000_0603).unwrap();
        assert_eq!((v1.general_purpose, v1.fixed), (Some(2), Some(0)));
        assert_eq!(intel_leaf_a_capacity(0, 0), None);
        // Zen 4: 6 core counters.
        let zen4 = amd_leaf_80000022_capacity(0x0000_0106).unwrap();
        assert_eq!((zen4.general_purpose, zen4.fixed), (Some(6), Some(0)));
        assert_eq!(amd_leaf_80000022_capacity(0), None);
    }
}
