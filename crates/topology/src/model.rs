//! The versioned hardware model file (`hwqos probe --json -o node.json`): the
//! static topology, the OS inventory and, optionally, the measured probes.
//!
//! [`HardwareModel::save`] writes atomically (temporary file + rename);
//! [`HardwareModel::load`] rejects files that are too large, not JSON, not a
//! hardware model, or of another schema version with a message naming the
//! file and the problem. [`diff`] lists what differs between two models (a
//! replication on a test node is only trustworthy when hardware and OS match),
//! and [`HardwareModel::cpi_penalties`] turns measured latencies into the
//! monitor's CPI-stack penalties.

use crate::os::OsInventory;
use crate::probe::Measured;
use crate::sysfs::format_size;
use crate::topology::{Topology, TopologyError};
use hwqos_pmu::derived::CpiPenalties;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The schema this build writes and reads.
pub const SCHEMA: &str = "hwqos.hwmodel/1";

/// The largest model file accepted (a 1024-CPU model is well under 4 MiB).
pub const MAX_MODEL_BYTES: u64 = 64 << 20;

/// Relative difference above which [`diff`] reports a measured figure.
pub const DEFAULT_TOLERANCE: f64 = 0.10;

/// Why a model file cannot be used.
#[derive(Debug, thiserror::Error)]
///
/// Every variant about a file carries its `path`, so the message names it.
pub enum ModelError {
    /// The file does not exist or cannot be read.
    #[error("{}: cannot read the hardware model: {source}", path.display())]
    Read {
        /// The model file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_MODEL_BYTES`]; it is not read.
    #[error("{}: {bytes} bytes is larger than a hardware model can be ({MAX_MODEL_BYTES} bytes at most)", path.display())]
    TooLarge {
        /// The model file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// The file is not valid JSON.
    #[error("{}:{line}:{column}: corrupt hardware model (not valid JSON): {message}", path.display())]
    Corrupt {
        /// The model file.
        path: PathBuf,
        /// 1-based line of the syntax error.
        line: usize,
        /// 1-based column of the syntax error.
        column: usize,
        /// serde_json's message.
        message: String,
    },
    /// Valid JSON but not a hardware model: not an object, no `schema`, or
    /// another kind of file's schema.
    #[error("{}: not a hwqos hardware model: {reason}", path.display())]
    NotAModel {
        /// The model file.
        path: PathBuf,
        /// Why it is not one.
        reason: String,
    },
    /// A hardware model of another schema version (`hwqos.hwmodel/N` other
    /// than [`SCHEMA`]).
    #[error("{}: hardware model schema `{found}` is not supported (this hwqos reads `{SCHEMA}`); re-create it with `hwqos probe --json -o FILE`", path.display())]
    ForeignVersion {
        /// The model file.
        path: PathBuf,
        /// The schema it names.
        found: String,
    },
    /// The right schema, but a field is missing or has the wrong type.
    #[error("{}: invalid hardware model: {message}", path.display())]
    Invalid {
        /// The model file.
        path: PathBuf,
        /// serde_json's message, naming the field.
        message: String,
    },
    /// [`HardwareModel::save`] could not create, write, sync or rename the
    /// file.
    #[error("{}: cannot write the hardware model: {source}", path.display())]
    Write {
        /// The model file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Reading the live node's topology failed ([`HardwareModel::this_node`]).
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

/// The node's hardware model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HardwareModel {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// RFC 3339 creation time (UTC).
    pub created: String,
    /// The node's host name when the model was created (informational:
    /// [`diff`] ignores it).
    pub host: Option<String>,
    /// The CPU model string, a copy of [`Topology::cpu_model`].
    pub cpu_model: Option<String>,
    /// The hwqos version that wrote the file.
    pub hwqos_version: String,
    /// The static topology: CPUs, packages, NUMA nodes, caches.
    pub topology: Topology,
    /// The OS settings that matter to performance.
    pub os: OsInventory,
    /// The probe results; `None` for a model made without `hwqos probe`'s
    /// measurements (e.g. [`HardwareModel::this_node`]).
    pub measured: Option<Measured>,
}

impl HardwareModel {
    /// A model of the live node without measurements.
    pub fn this_node() -> Result<HardwareModel, ModelError> {
        let topology = Topology::this_node()?;
        Ok(HardwareModel::new(topology, OsInventory::this_node(), None))
    }

    /// A model of the given parts, stamped now with this host's name and this
    /// hwqos version.
    pub fn new(topology: Topology, os: OsInventory, measured: Option<Measured>) -> HardwareModel {
        HardwareModel {
            schema: SCHEMA.to_string(),
            created: hwqos_core::time::format_rfc3339(hwqos_core::time::wall_ns()),
            host: crate::sysfs::read_trimmed(Path::new("/proc/sys/kernel/hostname")),
            cpu_model: topology.cpu_model.clone(),
            hwqos_version: env!("CARGO_PKG_VERSION").to_string(),
            topology,
            os,
            measured,
        }
    }

    /// The model as pretty-printed JSON with a final newline: the file format
    /// [`save`](Self::save) writes.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a model always serializes");
        s.push('\n');
        s
    }

    /// Writes the model atomically: a temporary file in the same directory,
    /// synced, then renamed over `path`.
    pub fn save(&self, path: &Path) -> Result<(), ModelError> {
        let werr = |source| ModelError::Write {
            path: path.to_path_buf(),
            source,
        };
        // Not secret, and read by agents running as other users.
        hwqos_core::fs::write_atomic(path, self.to_json().as_bytes(), 0o644).map_err(werr)?;
        Ok(())
    }

    /// Reads and checks a model file.
    pub fn load(path: &Path) -> Result<HardwareModel, ModelError> {
        let rerr = |source| ModelError::Read {
            path: path.to_path_buf(),
            source,
        };
        // Regular files only, bounded, never blocking on a FIFO.
        let bytes = match hwqos_core::fs::read_file_bounded(path, MAX_MODEL_BYTES) {
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                return Err(ModelError::TooLarge {
                    path: path.to_path_buf(),
                    bytes,
                });
            }
            r => r.map_err(rerr)?,
        };
        HardwareModel::from_slice(&bytes, path)
    }

    /// Parses and checks model bytes; `path` names them in errors.
    pub fn from_slice(bytes: &[u8], path: &Path) -> Result<HardwareModel, ModelError> {
        let p = || path.to_path_buf();
        if bytes.len() as u64 > MAX_MODEL_BYTES {
            return Err(ModelError::TooLarge {
                path: p(),
                bytes: bytes.len() as u64,
            });
        }
        let value: Value = serde_json::from_slice(bytes).map_err(|e| ModelError::Corrupt {
            path: p(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        let Some(obj) = value.as_object() else {
            return Err(ModelError::NotAModel {
                path: p(),
                reason: "the top level is not a JSON object".into(),
            });
        };
        match obj.get("schema") {
            None => {
                return Err(ModelError::NotAModel {
                    path: p(),
                    reason: "it has no `schema` field".into(),
                })
            }
            Some(Value::String(s)) if s == SCHEMA => {}
            Some(Value::String(s)) if s.starts_with("hwqos.hwmodel/") => {
                return Err(ModelError::ForeignVersion {
                    path: p(),
                    found: s.clone(),
                })
            }
            Some(other) => {
                return Err(ModelError::NotAModel {
                    path: p(),
                    reason: format!("its schema is {other}, not `{SCHEMA}`"),
                })
            }
        }
        serde_json::from_value(value).map_err(|e| ModelError::Invalid {
            path: p(),
            message: e.to_string(),
        })
    }

    /// The measured figures by name, for tables and [`diff`].
    pub fn figures(&self) -> Vec<Figure> {
        self.measured.as_ref().map(figures).unwrap_or_default()
    }

    /// CPI-stack penalties (cycles per miss) from the measured latencies:
    /// `l1d` = L2 latency − L1d latency, `l2` = next level − L2, `llc` =
    /// memory − LLC; `l1i` is taken equal to `l1d` (an L1i miss is served by
    /// the same L2). The TLB and branch penalties are not measured and keep
    /// the defaults. Cycles are TSC cycles (`None` without a TSC rate or
    /// without at least an L1d and a memory plateau).
    pub fn cpi_penalties(&self) -> Option<CpiPenalties> {
        let m = self.measured.as_ref()?.memlat.as_ref()?;
        let mem = m.memory_latency_cycles?;
        let levels: Vec<(u8, f64)> = m
            .levels
            .iter()
            .filter_map(|l| Some((l.level?, l.latency_cycles?)))
            .collect();
        let at = |lvl: u8| levels.iter().position(|(l, _)| *l == lvl);
        let next = |i: usize| levels.get(i + 1).map(|l| l.1).unwrap_or(mem);
        let gap = |i: usize| (next(i) - levels[i].1).max(0.0);
        let l1 = at(1)?;
        let mut p = CpiPenalties {
            l1d: gap(l1),
            ..CpiPenalties::default()
        };
        p.l1i = p.l1d;
        if let Some(i) = at(2) {
            p.l2 = gap(i);
        }
        p.llc = (mem - levels.last()?.1).max(0.0);
        p.validate().ok()?;
        Some(p)
    }
}

/// One measured figure: a dotted name, its value and unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Dotted name, e.g. `memlat.L2.latency`, `bandwidth.read`.
    pub name: String,
    /// The value (a median for repeated measurements), in `unit`.
    pub value: f64,
    /// `ns`, `us`, `MHz`, `KiB`, `GB/s` or `%`.
    pub unit: &'static str,
}

/// The key measured figures (medians), in a stable order.
pub fn figures(m: &Measured) -> Vec<Figure> {
    let mut v = Vec::new();
    let mut add = |name: String, value: f64, unit: &'static str| {
        if value.is_finite() {
            v.push(Figure { name, value, unit })
        }
    };
    if let Some(c) = &m.clock {
        add(
            "clock.clock_gettime".into(),
            c.clock_gettime_ns.median,
            "ns",
        );
        if let Some(r) = &c.rdtsc_ns {
            add("clock.rdtsc".into(), r.median, "ns");
        }
        if let Some(h) = c.tsc_hz {
            add("clock.tsc_rate".into(), h / 1e6, "MHz");
        }
    }
    if let Some(s) = &m.syscall {
        add("syscall.getpid".into(), s.getpid_ns.median, "ns");
        add(
            "syscall.thread_spawn".into(),
            s.thread_spawn_ns.median,
            "ns",
        );
        add(
            "syscall.process_spawn".into(),
            s.process_spawn_ns.median,
            "ns",
        );
    }
    if let Some(c) = &m.ctxswitch {
        add("ctxswitch.pipe_pair".into(), c.pipe_pair_ns.median, "ns");
        add(
            "ctxswitch.threads.round_trip".into(),
            c.threads.round_trip_ns.median,
            "ns",
        );
        add(
            "ctxswitch.threads.switch".into(),
            c.threads.switch_ns.median,
            "ns",
        );
        add(
            "ctxswitch.processes.round_trip".into(),
            c.processes.round_trip_ns.median,
            "ns",
        );
        add(
            "ctxswitch.processes.switch".into(),
            c.processes.switch_ns.median,
            "ns",
        );
    }
    if let Some(l) = &m.memlat {
        for lvl in &l.levels {
            add(
                format!("memlat.{}.size", lvl.name),
                lvl.effective_size_bytes as f64 / 1024.0,
                "KiB",
            );
            add(format!("memlat.{}.latency", lvl.name), lvl.latency_ns, "ns");
        }
        add("memlat.memory.latency".into(), l.memory_latency_ns, "ns");
    }
    if let Some(b) = &m.bandwidth {
        add("bandwidth.read".into(), b.read_gbs.median, "GB/s");
        add("bandwidth.write".into(), b.write_gbs.median, "GB/s");
        add("bandwidth.copy".into(), b.copy_gbs.median, "GB/s");
    }
    if let Some(p) = &m.pagefault {
        add("pagefault.minor".into(), p.fault_ns.median, "ns");
    }
    if let Some(n) = &m.net {
        add("net.tcp_rtt".into(), n.rtt_ns.median, "ns");
        add("net.tcp_connect".into(), n.connect_ns.median, "ns");
    }
    if let Some(t) = &m.timer {
        for s in &t.strategies {
            // The median sleep error, not AESM: the mean is dominated by rare
            // huge outliers and varies up to 100x between runs on a shared VM.
            add(
                format!("timer.{}.median_error", s.strategy),
                s.ae_median_ns / 1e3,
                "us",
            );
            add(
                format!("timer.{}.cpu", s.strategy),
                s.cpu_fraction * 100.0,
                "%",
            );
        }
    }
    v
}

/// One difference between two models.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// Dotted path (`topology.caches[2].size_bytes`, `os.sysctls.vm.swappiness`,
    /// `measured.memlat.L2.latency`).
    pub path: String,
    /// The value in the first model (`(absent)` when missing).
    pub a: String,
    /// The value in the second model (`(absent)` when missing).
    pub b: String,
}

/// What differs between two models: every topology and OS-inventory value
/// (exactly) and every measured figure whose relative difference exceeds
/// `tolerance` (0.10 = 10 %). Creation time, host name and version are
/// ignored; measured figures only compare when both models have them.
pub fn diff(a: &HardwareModel, b: &HardwareModel, tolerance: f64) -> Vec<Difference> {
    let mut out = Vec::new();
    if a.cpu_model != b.cpu_model {
        out.push(Difference {
            path: "cpu_model".into(),
            a: format!("{:?}", a.cpu_model),
            b: format!("{:?}", b.cpu_model),
        });
    }
    for (name, va, vb) in [
        ("topology", to_value(&a.topology), to_value(&b.topology)),
        ("os", to_value(&a.os), to_value(&b.os)),
    ] {
        let (fa, fb) = (flatten(name, &va), flatten(name, &vb));
        let keys: std::collections::BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
        for k in keys {
            let (x, y) = (fa.get(k), fb.get(k));
            if x != y {
                let show = |v: Option<&String>| v.cloned().unwrap_or_else(|| "(absent)".into());
                out.push(Difference {
                    path: k.clone(),
                    a: show(x),
                    b: show(y),
                });
            }
        }
    }
    let (fa, fb) = (a.figures(), b.figures());
    for x in &fa {
        let Some(y) = fb.iter().find(|y| y.name == x.name) else {
            continue;
        };
        let scale = x.value.abs().max(y.value.abs());
        if scale > 0.0 && (x.value - y.value).abs() / scale > tolerance {
            out.push(Difference {
                path: format!("measured.{}", x.name),
                a: format!("{:.4} {}", x.value, x.unit),
                b: format!("{:.4} {}", y.value, y.unit),
            });
        }
    }
    out
}

fn to_value<T: Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

/// Flattens JSON into dotted paths → scalar text; arrays of scalars stay one value.
fn flatten(prefix: &str, v: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    fn walk(path: String, v: &Value, out: &mut BTreeMap<String, String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    walk(format!("{path}.{k}"), x, out);
                }
            }
            Value::Array(a) if a.iter().any(|x| x.is_object() || x.is_array()) => {
                for (i, x) in a.iter().enumerate() {
                    walk(format!("{path}[{i}]"), x, out);
                }
            }
            other => {
                out.insert(path, other.to_string());
            }
        }
    }
    walk(prefix.to_string(), v, &mut out);
    out
}

/// A human summary of the static part (used by `hwqos probe` tables).
pub fn describe_caches(t: &Topology) -> Vec<(String, String, String)> {
    t.data_cache_levels()
        .into_iter()
        .map(|l| {
            let d = t.cache_domains(l);
            let size = d
                .first()
                .and_then(|d| d.cache.size_bytes)
                .map(format_size)
                .unwrap_or_else(|| "?".into());
            let groups: Vec<String> = d
                .iter()
                .map(|d| crate::sysfs::format_cpu_list(&d.cpus))
                .collect();
            (
                d.first().map(|d| d.cache.name()).unwrap_or_default(),
                size,
                groups.join(" | "),
            )
        })
        .collect()
}
