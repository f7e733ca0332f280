//! What hwqos-loadgen's commands do on a node, as a library other Rust
//! services embed: [`capture`] a recording into targets, write [`pairs`] by
//! hand, [`synthesize`] a model in closed loop, [`replay`] it (also what the
//! agent runs), and [`generate`] fixed knobs.
//!
//! Each function takes its inputs already parsed, a [`StopFlag`](crate::knob::StopFlag) that the
//! caller sets to end it (hwqos-loadgen sets it from its signal thread; an
//! embedding service from its own shutdown), and, for the loops, an
//! [`Observer`] that sees every interval (progress bars, an exposition, a
//! watchdog heartbeat fed from the loop itself). None of them prints, handles
//! signals, writes files on its own or talks to systemd: that is the
//! embedding program's part. Errors are [`LoadError`]s, and
//! [`LoadError::is_bad_input`] tells bad input (exit status 2 in the agents)
//! from runtime failures (1).
//!
//! A flag stops one run: the generators set it when they are stopped, so
//! give every run a new [`StopFlag`](crate::knob::StopFlag).
//!
//! Synthesizing a model for one target and replaying it for a minute, as a
//! service embedding this crate would (it needs a node with perf_event
//! access, so it is compiled, not run, as a doctest):
//!
//! ```no_run
//! use hwqos_loadsynth::config::LoadConfig;
//! use hwqos_loadsynth::knob::StopFlag;
//! use hwqos_loadsynth::workflow::{self, replay::ReplayOptions, NoObserver};
//! use std::time::Duration;
//!
//! let cfg = LoadConfig::default(); // safety caps, I/O generator settings
//! let targets = workflow::pairs::targets_from_pairs(&["cpu_util@1=0.35"])?;
//! let stop = StopFlag::new(); // set it from your shutdown path
//! let model = workflow::synthesize::synthesize(
//!     &targets,
//!     &Default::default(),
//!     &cfg,
//!     &stop,
//!     &mut NoObserver,
//! )?;
//! model.save("model.json".as_ref())?; // atomic: never a half file
//! let opts = ReplayOptions {
//!     duration: Some(Duration::from_secs(60)),
//!     ..ReplayOptions::default()
//! };
//! let report = workflow::replay::replay(&model, &opts, &cfg, &StopFlag::new(), &mut NoObserver)?;
//! for d in &report.deviations {
//!     println!("{}@{}: {:+.1}%", d.metric, d.cpu, d.relative * 100.0);
//! }
//! # Ok::<(), hwqos_loadsynth::LoadError>(())
//! ```

pub mod capture;
pub mod generate;
pub mod pairs;
pub mod replay;
pub mod scope;
pub mod synthesize;

use crate::control::PairStatus;

use crate::LoadError;
use hwqos_topology::HardwareModel;

pub use replay::{ReplayStart, ReplayedPair};

/// Sees a loop's progress; every method has an empty default. Called from
/// the thread that runs the loop, once per control or measurement interval
/// (a replay without measurement calls [`Observer::replay_interval`] every
/// ~50 ms), so it is also the place to feed a watchdog from.
pub trait Observer {
    /// One control interval of [`synthesize`]: every pair's status, the
    /// intervals done and the seconds since the loop started.
    fn synthesis_interval(&mut self, _status: &[PairStatus], _samples: u64, _elapsed_s: f64) {}
    /// A [`replay`] has started its generators and is about to loop.
    fn replay_started(&mut self, _start: &ReplayStart<'_>) {}
    /// One pass of the replay loop, `t_s` seconds after it started.
    fn replay_interval(&mut self, _t_s: f64, _pairs: &[ReplayedPair]) {}
    /// The loop ended; the generators are being stopped and joined.
    fn stopping(&mut self) {}
}

/// An observer that ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}

/// This node's hardware model (topology, CPU model, caches), a runtime
/// failure ([`LoadError::Node`]) when it cannot be read.
pub fn this_node() -> Result<HardwareModel, LoadError> {
    HardwareModel::this_node()
        .map_err(|e| LoadError::Node(format!("reading this node's hardware model: {e}")))
}
