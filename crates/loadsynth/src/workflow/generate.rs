//! `generate`: generators at fixed knobs, open loop (a background load, or
//! a workload to record), until a duration ends or the stop flag is set.

use super::pairs::{self, Pair};
use crate::config::LoadConfig;
use crate::knob::StopFlag;
use crate::synth;
use crate::LoadError;
use std::time::{Duration, Instant};

/// Runs `knobs` (each checked against its cap by the caller, see
/// [`crate::actuate::check_knob`]) for `duration` (`None`: until `stop`).
/// A generator that ends on its own (an error, the I/O cap) ends the run;
/// its error is returned.
pub fn generate(
    knobs: &[Pair],
    duration: Option<Duration>,
    cfg: &LoadConfig,
    stop: &StopFlag,
) -> Result<(), LoadError> {
    let topology = hwqos_topology::Topology::this_node()
        .map_err(|e| LoadError::Node(format!("reading this node's topology: {e}")))?;
    pairs::check_online(knobs, &topology)?;
    let act = synth::actuators_for(knobs, &topology, cfg, stop)?;
    let end = duration.map(|d| Instant::now() + d);
    // The generators watch the flag themselves; this thread only waits for
    // the end and looks for a generator that ended.
    while !stop.is_stopped() && end.is_none_or(|e| Instant::now() < e) {
        std::thread::sleep(Duration::from_millis(20));
        if !act.finished().is_empty() {
            break;
        }
    }
    act.stop()?;
    Ok(())
}
