//! `capture`: a monitor recording (JSON lines from `hwqos record -a` or
//! hwqos-monitor) into targets, per metric and CPU the mean and the series.

use crate::targets::{self, LoadTargets};
use crate::{LoadError, LoadMetric};
use hwqos_topology::HardwareModel;
use std::path::{Path, PathBuf};

/// What to take from a recording.
#[derive(Clone, Debug, Default)]
pub struct CaptureOptions {
    /// The production node's hardware model (`hwqos probe` output);
    /// `None`: this node's.
    pub hardware_model: Option<PathBuf>,
    /// Only these metrics (all when empty).
    pub metrics: Vec<LoadMetric>,
    /// Only these CPUs (all when empty).
    pub cpus: Vec<u32>,
    /// Sum the recording's process scopes as CPU N's load.
    pub processes_as_cpu: Option<u32>,
}

/// Reads `recording` and returns its targets; save them with
/// [`LoadTargets::save`]. An unreadable recording or hardware model is bad
/// input, and so are filters that leave no target.
pub fn capture(recording: &Path, opts: &CaptureOptions) -> Result<LoadTargets, LoadError> {
    let bad = |path: &Path, reason: String| LoadError::BadFile {
        path: path.display().to_string(),
        reason,
    };
    let rec = hwqos_core::recording::read_recording(recording)
        .map_err(|e| bad(recording, e.to_string()))?;
    let hw = match &opts.hardware_model {
        Some(p) => HardwareModel::load(p).map_err(|e| bad(p, e.to_string()))?,
        None => super::this_node()?,
    };
    let mut t = targets::capture(
        &rec,
        &recording.display().to_string(),
        Some(hw),
        opts.processes_as_cpu,
    )?;
    t.filter(
        &opts.metrics,
        (!opts.cpus.is_empty()).then_some(&opts.cpus[..]),
    );
    if t.targets.is_empty() {
        return Err(LoadError::Invalid(
            "no targets left after the metric and CPU filters".into(),
        ));
    }
    Ok(t)
}
