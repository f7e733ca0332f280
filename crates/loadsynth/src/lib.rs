//! hwqos-loadsynth: generators of hardware usage (data and instruction
//! caches, TLB, branches, CPU, memory bandwidth, page faults, context
//! switches, file I/O), each with one intensity knob, and the PID controllers
//! that drive them until a node's measured usage matches a captured target
//! (thesis chapter 6). hwqos-loadgen is the command-line and agent shell
//! around it.
//!
//! The method has three steps, each a file format and a function:
//!
//! 1. **Capture**: a monitor recording of the production node becomes
//!    [`targets::LoadTargets`] (`hwqos.loadtargets/1`): per
//!    [`LoadMetric`] and CPU the mean and the time series, with that node's
//!    hardware model ([`workflow::capture`]; hand-written `METRIC@CPU=VALUE`
//!    targets come from [`workflow::pairs`]).
//! 2. **Synthesize**: on the test node a [`control::ClosedLoop`] of
//!    [`control::Controller`]s turns the generators' knobs until every pair
//!    is within tolerance, and the knobs and controller states are saved as a
//!    [`model::LoadModel`] (`hwqos.loadmodel/1`) tied to the node it was made
//!    on ([`workflow::synthesize`]).
//! 3. **Replay**: the model's knobs are started again — held in closed loop,
//!    or fixed (open loop), optionally following the recorded series — and
//!    the deviation from each target is reported ([`workflow::replay`], also
//!    the agent's `run`). [`workflow::generate`] runs fixed knobs with no
//!    target at all (a background load).
//!
//! The parts:
//!
//! - [`metric`]: the controllable metrics ([`LoadMetric`]), their units, how
//!   each is measured and which values are possible;
//! - [`generator`]: the generators, one thread per metric and CPU, pinned,
//!   each reading its [`knob::Knob`] and the shared [`knob::StopFlag`] every
//!   ~10 ms; [`actuate::Actuators`] starts, steers and stops them, clamped to
//!   the [`config::SafetyCaps`] of a [`config::LoadConfig`];
//! - [`source`]: where measurements come from, behind
//!   [`source::MetricSource`]: in-process perf/procfs
//!   ([`source::LocalSource`]) or a running monitor's live API
//!   ([`source::MonitorSource`]); [`sim`]: a simulated plant for tests;
//! - [`control`]: PID controllers with interval-scaled gains and anti-windup,
//!   coupled cache levels controlled deepest first, and the closed loop;
//! - [`targets`], [`model`]: the two file formats (bounded reads, schema
//!   checked first, atomic saves); [`synth`]: the synthesis and replay loops
//!   over these parts;
//! - [`workflow`]: what hwqos-loadgen's commands do on a node — capture,
//!   synthesize, replay, generate — for any Rust service that embeds load
//!   synthesis: inputs as values, a [`knob::StopFlag`] the caller sets to
//!   stop, a [`workflow::Observer`] per interval; no printing, signal
//!   handling or systemd here (hwqos-loadgen is that glue);
//! - [`gate`]: the release gate under replayed load (thesis 6.4.3) — a
//!   baseline and a candidate command run bare and under a replayed model,
//!   interleaved and repeated, with the candidate's effect per condition and
//!   its interval.
//!
//! Every failure is a [`LoadError`]; [`LoadError::is_bad_input`] separates
//! bad input from runtime failures.
//!
//! ```
//! use hwqos_loadsynth::workflow::pairs::targets_from_pairs;
//! use hwqos_loadsynth::LoadMetric;
//!
//! let t = targets_from_pairs(&["cpu_util@1=0.35", "l1d_miss_ratio@1=0.2"])?;
//! assert_eq!(t.targets[0].metric, LoadMetric::CpuUtil);
//! assert_eq!(t.targets[0].cpu, 1);
//! // A busy share above 1 is impossible, and said so before anything runs.
//! assert!(targets_from_pairs(&["cpu_util@1=1.5"]).unwrap_err().is_bad_input());
//! # Ok::<(), hwqos_loadsynth::LoadError>(())
//! ```

#![deny(missing_docs)]

pub mod actuate;
pub mod config;
pub mod control;
pub mod error;
pub mod gate;
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
