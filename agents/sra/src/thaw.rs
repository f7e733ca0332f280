//! The throttle state file and `hwqos-sra thaw`: after every change the
//! agent writes (atomically) every pid and freezer cgroup it may have
//! throttled to `STATE_DIR/enforced.json`; `thaw` continues them all, for
//! the case where the agent and its guardian both died.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What `thaw` reads: everything the agent may have throttled.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ThrottleState {
    /// Processes that may be stopped (SIGSTOP throttle): each gets SIGCONT.
    pub pids: Vec<u32>,
    /// Freezer cgroups that may be frozen (`freeze` throttle): each and its
    /// children are thawed.
    pub cgroups: Vec<PathBuf>,
}

/// The state file's name in the state directory.
pub const STATE_FILE: &str = "enforced.json";

/// Writes the state file atomically ([`hwqos_core::fs::write_atomic`]); a
/// failure is logged (enforcement goes on).
pub fn write_state(state_dir: &Path, state: &ThrottleState) {
    let path = state_dir.join(STATE_FILE);
    let bytes = serde_json::to_vec(state).unwrap_or_default();
    if let Err(e) = hwqos_core::fs::write_atomic(&path, &bytes, 0o644) {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the throttle state");
    }
}

/// `hwqos-sra thaw`: SIGCONT every pid and thaw every freezer cgroup the
/// state file names (and every child cgroup of those). Returns (pids, cgroups).
pub fn thaw_from_state(state_dir: &Path) -> (usize, usize) {
    let path = state_dir.join(STATE_FILE);
    let text = match hwqos_sched::input::read_regular(&path, hwqos_sched::input::MAX_INPUT_BYTES) {
        Ok(t) => t,
        Err(e) => {
            if !e.is_vanished() {
                tracing::warn!(error = %e, "unreadable throttle state; nothing to thaw from it");
            }
            return (0, 0);
        }
    };
    let state: ThrottleState = match serde_json::from_str(&text) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "unreadable throttle state; nothing to thaw from it");
            return (0, 0);
        }
    };
    let mut registry = hwqos_sched::guardian::Registry::default();
    registry.pids.extend(state.pids);
    for parent in &state.cgroups {
        if let Ok(dir) = std::fs::read_dir(parent) {
            for e in dir.flatten() {
                if e.path().join("cgroup.freeze").exists() {
                    registry.cgroups.insert(e.path());
                }
            }
        }
    }
    hwqos_sched::guardian::thaw(&registry)
}
