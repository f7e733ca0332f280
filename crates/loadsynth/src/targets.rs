//! Load targets (`hwqos.loadtargets/1`): per metric and CPU, the mean and the
//! time series captured from a monitor recording of the production node
//! (thesis 6.2.1 step 1), with that node's hardware model.

use crate::metric::{self, Formula, LoadMetric};
use crate::source::values_from_frame;
use crate::LoadError;
use hwqos_core::recording::Recording;
use hwqos_core::Scope;
use hwqos_topology::HardwareModel;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The `schema` value every targets file carries; any other is refused.
pub const TARGETS_SCHEMA: &str = "hwqos.loadtargets/1";

/// Longest target or model file accepted (the series are bounded by it).
pub const MAX_FILE_BYTES: u64 = 256 << 20;

/// One metric of one CPU to reproduce.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// The metric to reproduce.
    pub metric: LoadMetric,
    /// The CPU it was measured on.
    pub cpu: u32,
    /// Its mean over the recording, in the metric's unit (the static target).
    pub mean: f64,
    /// Its standard deviation over the recording (informational; 0 when
    /// not given).
    #[serde(default)]
    pub stddev: f64,
    /// `(seconds since the recording's start, value)` per sample.
    #[serde(default)]
    pub series: Vec<(f64, f64)>,
}

/// Where the targets came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaptureSource {
    /// The recording file, as the caller named it.
    pub recording: String,
    /// The node name in the recording's header.
    pub node: String,
    /// The recording's sampling rate, Hz.
    pub rate_hz: f64,
    /// Frames the recording held.
    pub frames: usize,
}

/// A targets file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadTargets {
    /// Always [`TARGETS_SCHEMA`].
    pub schema: String,
    /// When the file was made, RFC 3339 UTC.
    pub created: String,
    /// The recording captured; `None` for hand-written targets.
    pub source: Option<CaptureSource>,
    /// The production node's hardware model (topology and OS inventory).
    pub hardware: Option<HardwareModel>,
    /// The pairs to reproduce, no (metric, CPU) twice.
    pub targets: Vec<Target>,
}

/// Reads a JSON file of at most [`MAX_FILE_BYTES`] and checks its `schema`
/// before anything else.
pub(crate) fn read_checked(path: &Path, schema: &str) -> Result<serde_json::Value, LoadError> {
    let bad = |reason: String| LoadError::BadFile {
        path: path.display().to_string(),
        reason,
    };
    // Regular files only, bounded: /dev/zero or a FIFO is refused at once.
    let text =
        hwqos_core::fs::read_text_bounded(path, MAX_FILE_BYTES).map_err(|e| bad(e.to_string()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(s) if s == schema => Ok(value),
        Some(s) => Err(bad(format!("schema `{s}`, expected `{schema}`"))),
        None => Err(bad(format!("no `schema` field (expected `{schema}`)"))),
    }
}

/// Writes `value` as pretty JSON (and a final newline) to `path` through
/// [`hwqos_core::fs::write_atomic`]: a crash or a failed write leaves the
/// previous file whole, never half of the new one. Mode 0644.
pub(crate) fn save_json<T: Serialize>(path: &Path, value: &T) -> Result<(), LoadError> {
    let text = serde_json::to_string_pretty(value).expect("targets and models serialize") + "\n";
    hwqos_core::fs::write_atomic(path, text.as_bytes(), 0o644)
        .map_err(|e| LoadError::Io(format!("writing {}", path.display()), e))
}

impl LoadTargets {
    /// Targets without a source (hand-written or for tests).
    pub fn new(targets: Vec<Target>) -> LoadTargets {
        LoadTargets {
            schema: TARGETS_SCHEMA.into(),
            created: hwqos_core::time::format_rfc3339(hwqos_core::time::wall_ns()),
            source: None,
            hardware: None,
            targets,
        }
    }

    /// Checks every value is possible and no pair appears twice.
    pub fn validate(&self) -> Result<(), String> {
        if self.schema != TARGETS_SCHEMA {
            return Err(format!(
                "schema `{}`, expected `{TARGETS_SCHEMA}`",
                self.schema
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for t in &self.targets {
            t.metric
                .validate(t.mean)
                .map_err(|e| format!("cpu {}: {e}", t.cpu))?;
            for (_, v) in &t.series {
                t.metric
                    .validate(*v)
                    .map_err(|e| format!("cpu {} series: {e}", t.cpu))?;
            }
            if !seen.insert((t.metric, t.cpu)) {
                return Err(format!("{} on CPU {} appears twice", t.metric, t.cpu));
            }
        }
        Ok(())
    }

    /// Reads (at most [`MAX_FILE_BYTES`]) and validates a targets file; any
    /// problem is [`LoadError::BadFile`] naming `path`.
    pub fn load(path: &Path) -> Result<LoadTargets, LoadError> {
        let value = read_checked(path, TARGETS_SCHEMA)?;
        let bad = |reason: String| LoadError::BadFile {
            path: path.display().to_string(),
            reason,
        };
        let t: LoadTargets = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        t.validate().map_err(bad)?;
        Ok(t)
    }

    /// Saves the targets atomically (the previous file stays whole if
    /// writing fails).
    pub fn save(&self, path: &Path) -> Result<(), LoadError> {
        save_json(path, self)
    }

    /// Keeps only `metrics` (all when empty) and `cpus` (all when `None`).
    pub fn filter(&mut self, metrics: &[LoadMetric], cpus: Option<&[u32]>) {
        self.targets.retain(|t| {
            (metrics.is_empty() || metrics.contains(&t.metric))
                && cpus.is_none_or(|c| c.contains(&t.cpu))
        });
    }
}

/// Captures targets from a recording: every measurable metric of every CPU
/// scope present in it (mean, standard deviation and series).
///
/// With `processes_as_cpu = Some(n)`, the recording's process scopes are
/// summed and taken as CPU n's load instead (a recording of processes
/// pinned to one CPU, e.g. `hwqos record -p PID`).
pub fn capture(
    rec: &Recording,
    recording_path: &str,
    hardware: Option<HardwareModel>,
    processes_as_cpu: Option<u32>,
) -> Result<LoadTargets, LoadError> {
    let converted: Vec<hwqos_core::Frame>;
    let frames: &[hwqos_core::Frame] = match processes_as_cpu {
        Some(cpu) => {
            converted = rec
                .frames
                .iter()
                .map(|f| crate::source::processes_as_cpu(f, &[], cpu))
                .collect();
            &converted
        }
        None => &rec.frames,
    };
    let mut cpus: Vec<u32> = frames
        .iter()
        .flat_map(|f| &f.samples)
        .filter_map(|s| match s.scope {
            Scope::Cpu { cpu } => Some(cpu),
            _ => None,
        })
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    let wanted: Vec<(LoadMetric, u32)> = metric::ALL
        .iter()
        .filter(|m| m.formula() != Formula::SelfReported)
        .flat_map(|m| cpus.iter().map(move |c| (*m, *c)))
        .collect();
    let start = rec.header.started.mono_ns;
    let mut series: std::collections::BTreeMap<(LoadMetric, u32), Vec<(f64, f64)>> =
        Default::default();
    for f in frames {
        for (k, v) in values_from_frame(f, &wanted) {
            series
                .entry(k)
                .or_default()
                .push((f.time.mono_ns.saturating_sub(start) as f64 / 1e9, v));
        }
    }
    if series.is_empty() {
        return Err(LoadError::BadFile {
            path: recording_path.into(),
            reason: "no per-CPU samples of any load metric (record with per-CPU counting, e.g. `hwqos record -a`)".into(),
        });
    }
    let targets = series
        .into_iter()
        .map(|((metric, cpu), s)| {
            let values: Vec<f64> = s.iter().map(|p| p.1).collect();
            Target {
                metric,
                cpu,
                mean: hwqos_core::stats::mean(&values).unwrap_or(0.0),
                stddev: hwqos_core::stats::stddev(&values).unwrap_or(0.0),
                series: s,
            }
        })
        .collect();
    Ok(LoadTargets {
        source: Some(CaptureSource {
            recording: recording_path.into(),
            node: rec.header.node.clone(),
            rate_hz: rec.header.rate_hz,
            frames: rec.frames.len(),
        }),
        hardware,
        ..LoadTargets::new(targets)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::recording::{CounterClass, RecordedBackend, RecordingHeader};
    use hwqos_core::{Frame, MetricName, Sample, Timestamp};

    fn frame(seq: u64, samples: Vec<(Scope, &'static str, f64)>) -> Frame {
        let time = Timestamp {
            mono_ns: 1_000_000_000 + seq * 250_000_000,
            wall_ns: 0,
        };
        Frame {
            seq,
            time,
            interval_ns: if seq == 0 { 0 } else { 250_000_000 },
            samples: samples
                .into_iter()
                .map(|(scope, m, v)| Sample::gauge(time, scope, MetricName::from_static(m), v))
                .collect(),
            labels: Vec::new(),
        }
    }

    fn recording(frames: Vec<Frame>) -> Recording {
        let header = RecordingHeader::new(
            "prod",
            Timestamp {
                mono_ns: 1_000_000_000,
                wall_ns: 0,
            },
            4.0,
            RecordedBackend::Simulated,
            CounterClass::Software,
        );
        Recording {
            header,
            frames,
            truncated_at: None,
        }
    }

    #[test]
    fn captures_per_cpu_means_and_series() {
        let cpu1 = Scope::Cpu { cpu: 1 };
        let rec = recording(
            (0..5)
                .map(|i| {
                    frame(
                        i,
                        vec![
                            (cpu1.clone(), "os.cpu.util", 0.3 + 0.01 * i as f64),
                            (cpu1.clone(), "sw.page_faults", 1000.0),
                            (cpu1.clone(), "hw.llc.miss", 10.0),
                            (cpu1.clone(), "hw.llc.access", 40.0),
                        ],
                    )
                })
                .collect(),
        );
        let t = capture(&rec, "prod.jsonl", None, None).unwrap();
        let get = |m: LoadMetric| {
            t.targets
                .iter()
                .find(|x| x.metric == m && x.cpu == 1)
                .unwrap()
        };
        assert!((get(LoadMetric::CpuUtil).mean - 0.32).abs() < 1e-9);
        assert_eq!(get(LoadMetric::CpuUtil).series.len(), 5);
        // Rates need an interval: the first frame has none.
        assert_eq!(get(LoadMetric::PageFaultRate).series.len(), 4);
        assert!((get(LoadMetric::PageFaultRate).mean - 4000.0).abs() < 1e-6);
        assert!((get(LoadMetric::LlcMissRatio).mean - 0.25).abs() < 1e-12);
        assert_eq!(t.source.as_ref().unwrap().frames, 5);
        t.validate().unwrap();
    }

    #[test]
    fn processes_are_summed_as_one_cpu() {
        let rec = recording(
            (0..3)
                .map(|i| {
                    frame(
                        i,
                        vec![
                            (Scope::Process { pid: 10 }, "sw.task_clock", 50_000_000.0),
                            (Scope::Process { pid: 11 }, "sw.task_clock", 25_000_000.0),
                            (Scope::Process { pid: 10 }, "sw.context_switches", 100.0),
                        ],
                    )
                })
                .collect(),
        );
        let t = capture(&rec, "p.jsonl", None, Some(2)).unwrap();
        let util = t
            .targets
            .iter()
            .find(|x| x.metric == LoadMetric::CpuUtil)
            .unwrap();
        assert_eq!(util.cpu, 2);
        assert!((util.mean - 0.3).abs() < 1e-9, "{}", util.mean);
        let cs = t
            .targets
            .iter()
            .find(|x| x.metric == LoadMetric::ContextSwitchRate)
            .unwrap();
        assert!((cs.mean - 400.0).abs() < 1e-9);
    }

    #[test]
    fn a_recording_without_cpu_scopes_is_an_error() {
        let rec = recording(vec![frame(0, vec![(Scope::System, "os.load1", 1.0)])]);
        let e = capture(&rec, "x.jsonl", None, None).unwrap_err();
        assert!(e.to_string().contains("per-CPU"), "{e}");
    }
}
