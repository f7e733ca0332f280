//! The decision engine's inputs besides the hardware model: the resource
//! sensitivity model (what each process is sensitive to, its CPU demand and
//! its measured quotas; persisted as JSON with an atomic save so decisions
//! survive restarts) and manually defined constraints.

use crate::analysis::ProcessCorrelation;
use crate::SchedError;
use hwqos_pmu::target::TargetSelector;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The `schema` value every model file carries; any other is refused.
pub const SCHEMA: &str = "hwqos.sensitivity/1";

/// What one process is sensitive to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessModel {
    /// Which process this is (`name:X`, `pid:N`, … as in contracts).
    pub process: TargetSelector,
    /// Resources sorted by |Corr(r, x, p)|, highest first; the first is r̂.
    #[serde(default)]
    pub sensitive_to: Vec<Sensitivity>,
    /// CPUs' worth of work it needs (1.0 = one logical CPU busy).
    #[serde(default = "one")]
    pub cpu_demand: f64,
    /// Quotas found by the resource-limit finder (event → per period).
    #[serde(default)]
    pub quotas: BTreeMap<String, u64>,
    /// The period of `quotas`, in microseconds (default 10 ms).
    #[serde(default = "default_period_us")]
    pub period_us: u64,
}

fn one() -> f64 {
    1.0
}

/// The smallest CPU demand a measurement is recorded as (a hundredth of a CPU).
pub const MIN_CPU_DEMAND: f64 = 0.01;
/// The largest CPU demand a model accepts.
pub const MAX_CPU_DEMAND: f64 = 4096.0;

impl ProcessModel {
    /// A process the model knows nothing of yet: no sensitivities, one CPU of
    /// demand, no quotas, a 10 ms quota period.
    pub fn new(process: TargetSelector) -> ProcessModel {
        ProcessModel {
            process,
            sensitive_to: Vec::new(),
            cpu_demand: one(),
            quotas: BTreeMap::new(),
            period_us: default_period_us(),
        }
    }
}

/// The sensitivities an analysis found: its selected resources (|Corr| ≥ θ),
/// highest |correlation| first, so the first is r̂.
pub fn sensitivities(analysis: &ProcessCorrelation) -> Vec<Sensitivity> {
    analysis
        .resources
        .iter()
        .filter(|r| analysis.selected.contains(&r.resource))
        .map(|r| Sensitivity {
            resource: r.resource.clone(),
            correlation: r.correlation,
            level: None,
        })
        .collect()
}
fn default_period_us() -> u64 {
    10_000
}

/// One resource a process is sensitive to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sensitivity {
    /// The resource (event) name, as in the analysis.
    pub resource: String,
    /// Corr(r, x, p), in [-1, 1].
    pub correlation: f64,
    /// Cache level the resource lives at (1, 2, 3…); `None` → from the name
    /// ([`level_of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<u8>,
}

impl Sensitivity {
    /// The cache level this resource lives at: `level` when given, else
    /// [`level_of`] the name; `None` for CPU-time resources.
    pub fn cache_level(&self) -> Option<u8> {
        self.level.or_else(|| level_of(&self.resource))
    }
}

/// The cache level a resource name refers to: `L1`/`l1d`/`L1-dcache` → 1,
/// `L2`/`l2_` → 2, `L3`/`LLC`/`cache-misses`/memory traffic → the last level
/// (reported as 3). CPU-time resources (`task_clock`, `cycles`,
/// `instructions`) have none: they are CPU demand, not a shared cache.
pub fn level_of(resource: &str) -> Option<u8> {
    let r = resource.to_ascii_lowercase();
    if r.contains("l1") {
        Some(1)
    } else if r.contains("l2") {
        Some(2)
    } else if r.contains("l3")
        || r.contains("llc")
        || r.contains("cache")
        || r.contains("mem")
        || r.contains("page_fault")
        || r.contains("page-fault")
        || r.contains("dtlb")
    {
        Some(3)
    } else {
        None
    }
}

/// A manually defined constraint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Constraint {
    /// Never place `process` on the same core (SMT siblings) as `other`.
    NotSameCore {
        /// The process to keep apart.
        process: TargetSelector,
        /// The process it must not share a core with.
        other: TargetSelector,
    },
    /// `process` may only use these CPUs.
    OnlyCpus {
        /// The process restricted.
        process: TargetSelector,
        /// The logical CPU numbers it may use.
        cpus: Vec<u32>,
    },
    /// At most `quota` events of `event` per period for `process`.
    MaxEvents {
        /// The process limited.
        process: TargetSelector,
        /// The event name (hwqos `sw.*`/`hw.*` or perf name).
        event: String,
        /// Events allowed per period.
        quota: u64,
        /// The period, in microseconds (default 10 ms).
        #[serde(default = "default_period_us")]
        period_us: u64,
    },
}

/// The persisted model: processes and constraints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensitivityModel {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// What is known of each process, one per selector.
    #[serde(default)]
    pub processes: Vec<ProcessModel>,
    /// Constraints the decision engine must respect whatever the model says.
    #[serde(default)]
    pub constraints: Vec<Constraint>,
}

impl Default for SensitivityModel {
    fn default() -> Self {
        SensitivityModel {
            schema: SCHEMA.into(),
            processes: Vec::new(),
            constraints: Vec::new(),
        }
    }
}

/// Upper bound on a model file (bad input must not allocate unboundedly).
pub const MAX_MODEL_BYTES: u64 = 16 << 20;

impl SensitivityModel {
    /// Parses and validates a model: [`SCHEMA`], no unknown fields, CPU
    /// demand in (0, 4096], correlations in [-1, 1]; anything else is
    /// [`SchedError::Invalid`].
    pub fn parse(text: &str) -> Result<SensitivityModel, SchedError> {
        let m: SensitivityModel = serde_json::from_str(text)
            .map_err(|e| SchedError::invalid("sensitivity model", e.to_string()))?;
        if m.schema != SCHEMA {
            return Err(SchedError::invalid(
                "sensitivity model",
                format!("schema `{}` (expected `{SCHEMA}`)", m.schema),
            ));
        }
        for p in &m.processes {
            if !(p.cpu_demand.is_finite() && p.cpu_demand > 0.0 && p.cpu_demand <= 4096.0) {
                return Err(SchedError::invalid(
                    format!("sensitivity model entry `{}`", p.process),
                    format!("cpu_demand {} (expected 0 < demand ≤ 4096)", p.cpu_demand),
                ));
            }
            if let Some(s) = p
                .sensitive_to
                .iter()
                .find(|s| !s.correlation.is_finite() || s.correlation.abs() > 1.0)
            {
                return Err(SchedError::invalid(
                    format!("sensitivity model entry `{}`", p.process),
                    format!(
                        "correlation {} of `{}` is not in [-1, 1]",
                        s.correlation, s.resource
                    ),
                ));
            }
        }
        Ok(m)
    }

    /// Loads a model; a missing file is an empty model (first start).
    pub fn load(path: &Path) -> Result<SensitivityModel, SchedError> {
        let text = match crate::input::read_regular(path, MAX_MODEL_BYTES) {
            Err(SchedError::File { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(SensitivityModel::default())
            }
            Err(e) => return Err(e),
            Ok(t) => t,
        };
        Self::parse(&text)
            .map_err(|e| SchedError::invalid(format!("{}", path.display()), e.to_string()))
    }

    /// Saves atomically ([`hwqos_core::fs::write_atomic`]: a temporary file
    /// in the same directory, fsync, rename over the old one), so a crash
    /// leaves the old model or the new one, never half a file.
    pub fn save(&self, path: &Path) -> Result<(), SchedError> {
        let json = serde_json::to_string_pretty(self).expect("a model always serializes");
        hwqos_core::fs::write_atomic(path, json.as_bytes(), 0o644).map_err(|e| SchedError::File {
            path: path.to_path_buf(),
            source: e,
        })
    }

    /// The model of `process`, if it has one.
    pub fn get(&self, process: &TargetSelector) -> Option<&ProcessModel> {
        self.processes.iter().find(|p| &p.process == process)
    }

    /// The model of `process`, created with [`ProcessModel::new`]'s defaults
    /// when it has none yet.
    pub fn entry(&mut self, process: &TargetSelector) -> &mut ProcessModel {
        let i = match self.processes.iter().position(|p| &p.process == process) {
            Some(i) => i,
            None => {
                self.processes.push(ProcessModel::new(process.clone()));
                self.processes.len() - 1
            }
        };
        &mut self.processes[i]
    }

    /// Records a correlation analysis of `process` (thesis Listing 8.1): its
    /// sensitivities become the selected resources of `analysis`, and its
    /// CPU demand becomes `cpu_demand` when one was measured. Everything else
    /// the model knows of the process — the quotas the resource-limit finder
    /// found and their period — is kept. This is the one conversion from an
    /// analysis to a model entry (`hwqos-sra analyse --model` and the `run`
    /// loop both use it).
    pub fn record_analysis(
        &mut self,
        process: &TargetSelector,
        analysis: &ProcessCorrelation,
        cpu_demand: Option<f64>,
    ) {
        let entry = self.entry(process);
        entry.sensitive_to = sensitivities(analysis);
        if let Some(d) = cpu_demand.filter(|d| d.is_finite() && *d > 0.0) {
            entry.cpu_demand = d.clamp(MIN_CPU_DEMAND, MAX_CPU_DEMAND);
        }
    }

    /// Records a quota the resource-limit finder found for `process`
    /// (thesis Listing 8.2): `quota` events of `event` per `period_us`. The
    /// sensitivities, CPU demand and the quotas of other events are kept.
    pub fn record_quota(
        &mut self,
        process: &TargetSelector,
        event: &str,
        quota: u64,
        period_us: u64,
    ) {
        let entry = self.entry(process);
        entry.quotas.insert(event.to_string(), quota);
        entry.period_us = period_us;
    }

    /// Inserts or replaces the model of `process`.
    pub fn upsert(&mut self, model: ProcessModel) {
        match self
            .processes
            .iter_mut()
            .find(|p| p.process == model.process)
        {
            Some(p) => *p = model,
            None => self.processes.push(model),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_is_atomic_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.json");
        assert_eq!(
            SensitivityModel::load(&path).unwrap(),
            SensitivityModel::default()
        );
        let mut m = SensitivityModel::default();
        m.upsert(ProcessModel {
            process: "name:p1".parse().unwrap(),
            sensitive_to: vec![Sensitivity {
                resource: "L1-dcache-load-misses".into(),
                correlation: 0.9,
                level: None,
            }],
            cpu_demand: 1.0,
            quotas: BTreeMap::new(),
            period_us: 10_000,
        });
        m.constraints.push(Constraint::NotSameCore {
            process: "name:p1".parse().unwrap(),
            other: "name:p2".parse().unwrap(),
        });
        m.save(&path).unwrap();
        assert_eq!(SensitivityModel::load(&path).unwrap(), m);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temporary file left behind");
        assert_eq!(m.processes[0].sensitive_to[0].cache_level(), Some(1));
    }

    #[test]
    fn bad_models_are_named() {
        let e = SensitivityModel::parse(r#"{"schema":"x"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema `x`"));
        let e = SensitivityModel::parse(
            r#"{"schema":"hwqos.sensitivity/1","processes":[{"process":"name:a","cpu_demand":-1}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cpu_demand -1"), "{e}");
        let e = SensitivityModel::parse(
            r#"{"schema":"hwqos.sensitivity/1","processes":[{"process":"name:a","sensitive_to":[{"resource":"x","correlation":3}]}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("correlation 3"), "{e}");
    }

    #[test]
    fn quotas_and_analyses_merge_in_either_order() {
        let sel: TargetSelector = "name:a".parse().unwrap();
        let analysis = ProcessCorrelation {
            process: "pid:1".into(),
            samples: 3,
            resources: vec![],
            selected: vec![],
            x_raw: vec![],
            x_filtered: vec![],
        };
        let mut m = SensitivityModel::default();
        m.record_analysis(&sel, &analysis, Some(0.001));
        assert_eq!(m.get(&sel).unwrap().cpu_demand, MIN_CPU_DEMAND);
        m.record_quota(&sel, "sw.page_faults", 12, 20_000);
        m.record_analysis(&sel, &analysis, None);
        let e = m.get(&sel).unwrap();
        assert_eq!(e.quotas["sw.page_faults"], 12);
        assert_eq!((e.period_us, e.cpu_demand), (20_000, MIN_CPU_DEMAND));
        assert_eq!(m.processes.len(), 1);
    }

    #[test]
    fn levels_from_names() {
        assert_eq!(level_of("L1-dcache-load-misses"), Some(1));
        assert_eq!(level_of("hw.l2.misses"), Some(2));
        assert_eq!(level_of("LLC-load-misses"), Some(3));
        assert_eq!(level_of("sw.page_faults"), Some(3));
        assert_eq!(level_of("sw.task_clock"), None);
    }
}
