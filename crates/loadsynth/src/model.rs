//! Load models (`hwqos.loadmodel/1`): the knob values and controller states
//! the closed loop converged to, the targets they reproduce (with series for
//! dynamic replay) and the identity of the node they were made on (thesis
//! 6.2.1 step 2).

use crate::control::ControllerState;
use crate::metric::LoadMetric;
use crate::targets::read_checked;
use crate::LoadError;
use hwqos_topology::HardwareModel;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The `schema` value every model file carries; any other is refused.
pub const MODEL_SCHEMA: &str = "hwqos.loadmodel/1";

/// One synthesized pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// The metric reproduced.
    pub metric: LoadMetric,
    /// The CPU it was reproduced on.
    pub cpu: u32,
    /// The target mean, in the metric's unit.
    pub target: f64,
    /// The knob to replay (mean over the converged hold window).
    pub knob: f64,
    /// The controller's state at the end of synthesis (closed-loop replay
    /// resumes from it).
    pub controller: ControllerState,
    /// `(absolute, relative)` tolerance it converged to; the larger applies.
    pub tolerance: (f64, f64),
    /// Mean measured value over the hold window after convergence; `None`
    /// when nothing was measured for the pair then.
    #[serde(default)]
    pub measured: Option<f64>,
    /// The target's series `(seconds, value)` for `--dynamic` replay.
    #[serde(default)]
    pub series: Vec<(f64, f64)>,
}

/// What the closed loop measured when the model was made: replay measures
/// the same unless told otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ModelScope {
    /// Everything on each CPU (the default).
    #[default]
    WholeCpu,
    /// Only processes: the synthesizing process itself (`this_process`) and
    /// `others` (PIDs of that time, e.g. a background load that was topped up).
    Processes {
        /// Whether the synthesizing process itself was measured.
        this_process: bool,
        /// Other processes measured, by their PIDs at the time.
        #[serde(default)]
        others: Vec<u32>,
    },
}

/// A synthesized load model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadModel {
    /// Always [`MODEL_SCHEMA`].
    pub schema: String,
    /// When it was made, RFC 3339 UTC.
    pub created: String,
    /// Version for distribution through a watched directory (the load
    /// generator's `[run] model_dir`): of the valid models there, the
    /// highest version is replayed. `synthesize` writes 0; whoever
    /// distributes models stamps it (older files without it read as 0).
    #[serde(default)]
    pub version: u64,
    /// The node the knobs were found on.
    pub node: HardwareModel,
    /// Seconds the closed loop took to converge.
    pub convergence_s: f64,
    /// Measurement intervals the closed loop took to converge.
    pub samples: u64,
    /// Length of one measurement interval, seconds.
    pub period_s: f64,
    /// What was measured (models written before this field: the whole CPU).
    #[serde(default)]
    pub measured_on: ModelScope,
    /// One entry per synthesized (metric, CPU) pair.
    pub entries: Vec<ModelEntry>,
}

impl LoadModel {
    /// Checks the schema, every target against its metric's valid values
    /// and every knob against its range; the error says which entry.
    pub fn validate(&self) -> Result<(), String> {
        if self.schema != MODEL_SCHEMA {
            return Err(format!(
                "schema `{}`, expected `{MODEL_SCHEMA}`",
                self.schema
            ));
        }
        for e in &self.entries {
            e.metric
                .validate(e.target)
                .map_err(|m| format!("cpu {}: {m}", e.cpu))?;
            if !e.knob.is_finite() || e.knob < e.controller.range.0 || e.knob > e.controller.range.1
            {
                return Err(format!(
                    "{} on CPU {}: knob {} outside its range {:?}",
                    e.metric, e.cpu, e.knob, e.controller.range
                ));
            }
        }
        Ok(())
    }

    /// Reads (at most [`crate::targets::MAX_FILE_BYTES`]) and validates a
    /// model file; any problem is [`LoadError::BadFile`] naming `path`.
    pub fn load(path: &Path) -> Result<LoadModel, LoadError> {
        let value = read_checked(path, MODEL_SCHEMA)?;
        let bad = |reason: String| LoadError::BadFile {
            path: path.display().to_string(),
            reason,
        };
        let m: LoadModel = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        m.validate().map_err(bad)?;
        Ok(m)
    }

    /// Reads a model as a distributed one is checked before it replaces
    /// the one replaying (`[run] model_dir`): [`LoadModel::load`], then
    /// [`LoadModel::check_node`] against `here` (skipped when `force`) and
    /// every entry's CPU online there. The error is the reason.
    pub fn check_for(path: &Path, here: &HardwareModel, force: bool) -> Result<LoadModel, String> {
        let m = LoadModel::load(path).map_err(|e| match e {
            LoadError::BadFile { reason, .. } => reason,
            e => e.to_string(),
        })?;
        if !force {
            m.check_node(here).map_err(|e| e.to_string())?;
        }
        let online = here.topology.online_cpus();
        if let Some(e) = m.entries.iter().find(|e| !online.contains(&e.cpu)) {
            return Err(format!(
                "{} targets CPU {}, which is not online on this node (online: {online:?})",
                e.metric, e.cpu
            ));
        }
        Ok(m)
    }

    /// Saves the model atomically (the previous file stays whole if
    /// writing fails).
    pub fn save(&self, path: &Path) -> Result<(), LoadError> {
        crate::targets::save_json(path, self)
    }

    /// Checks the model fits `here`: a different CPU model or a different
    /// cache geometry is an error (the knobs mean other things there); other
    /// differences (kernel, sysctls, memory) are returned as warnings.
    pub fn check_node(&self, here: &HardwareModel) -> Result<Vec<String>, LoadError> {
        if self.node.cpu_model != here.cpu_model {
            return Err(LoadError::WrongNode(format!(
                "the model was made on CPU `{}` but this node has `{}`; synthesize a model here",
                self.node.cpu_model.as_deref().unwrap_or("unknown"),
                here.cpu_model.as_deref().unwrap_or("unknown")
            )));
        }
        /// (level, size, ways, line size) of each cache.
        type Geometry = (Option<u8>, Option<u64>, Option<u32>, Option<u32>);
        let geometry = |m: &HardwareModel| -> Vec<Geometry> {
            m.topology
                .caches
                .iter()
                .map(|c| (c.level, c.size_bytes, c.ways, c.line_size))
                .collect()
        };
        let mut gm = geometry(&self.node);
        let mut gh = geometry(here);
        gm.dedup();
        gh.dedup();
        if gm != gh {
            return Err(LoadError::WrongNode(format!(
                "the model's cache geometry {gm:?} differs from this node's {gh:?}"
            )));
        }
        Ok(hwqos_topology::diff(&self.node, here, 0.1)
            .into_iter()
            .map(|d| format!("{}: model {} vs here {}", d.path, d.a, d.b))
            .collect())
    }
}

impl hwqos_core::watch_dir::Versioned for LoadModel {
    fn version(&self) -> u64 {
        self.version
    }
}
