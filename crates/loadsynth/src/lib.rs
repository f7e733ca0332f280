//! hwqos-loadsynth: generators of hardware usage (cache, TLB, branch, CPU,
//! memory bandwidth, page faults, context switches, file I/O), each with one
//! intensity knob, and the PID controllers that drive them until a node's
//! measured usage matches a captured target (thesis chapter 6).
//!
//! - [`metric`]: the controllable metrics, how each is measured, valid values;
//! - [`generator`]: the generators (threads pinned per CPU); [`actuate`] starts,
//!   steers and stops them under the [`config`] safety caps;
//! - [`source`]: where measurements come from (in-process perf/procfs, the
//!   monitor's live API); [`sim`]: a simulated plant for tests;
//! - [`control`]: PID controllers with anti-windup and the closed loop;
//! - [`targets`], [`model`]: the `hwqos.loadtargets/1` and `hwqos.loadmodel/1`
//!   files; [`synth`]: the synthesis and replay loops over those parts;
//! - [`workflow`]: what hwqos-loadgen's commands do on a node — capture,
//!   synthesize, replay (the agent's `run`), generate — for any Rust service
//!   that embeds load synthesis: inputs as values, a [`knob::StopFlag`] the
//!   caller sets to stop, an [`workflow::Observer`] per interval; no printing,
//!   signal handling or systemd here (hwqos-loadgen is that glue).

pub mod actuate;
pub mod config;
pub mod control;
pub mod error;
pub mod generator;
pub mod knob;
pub mod metric;
pub mod model;
pub mod sim;
pub mod source;
pub mod synth;
pub mod targets;
pub mod workflow;

pub use error::LoadError;
pub use metric::LoadMetric;
