//! hwqos-pmu: continuous sampling of PMU hardware counters and software metrics
//! per process, thread, CPU and cgroup — the engine behind `hwqos-monitor` and
//! `hwqos stat`, usable from any Rust service.
//!
//! The central type is [`sampler::Sampler`]: built from a [`sampler::SamplerConfig`]
//! (event sets, [`target::TargetSelector`]s, application sources), it opens counter
//! groups through a [`backend::CounterBackend`], rotates one event set per target
//! per tick, and returns one [`hwqos_core::Frame`] per call to
//! [`sampler::Sampler::sample`] — scaled counter deltas, derived metrics, `/proc`
//! metrics and application metrics on one monotonic time base. Event names become
//! [`Event`]s (an [`EventAttr`] encoding plus the metric they are reported as)
//! through a [`catalog::Catalog`]; what a node or CPU model can count is written
//! down as a [`spec::TargetSpec`]. Every fallible operation returns [`PmuError`].
//!
//! - [`event`]: the resolved form of an event (`perf_event_attr` encoding + metric name);
//! - [`catalog`], [`spec`]: event names (generic `hw.*`/`sw.*`, perf syntax, raw,
//!   sysfs `pmu/event=…/`), per-CPU-model target specs and availability probing;
//! - [`backend`]: counter backends — real `perf_event` and a deterministic simulator;
//! - [`target`]: selecting what to monitor (pid, name, regex, cgroup, systemd unit)
//!   and following processes and threads as they come and go;
//! - [`derived`]: IPC/CPI, miss ratios, rates and CPI stacks from one group and interval;
//! - [`appmetric`]: application performance metrics (*x*) on the counters' time base;
//! - [`sampler`]: event-set rotation per target, scaling, one [`hwqos_core::Frame`] per tick;
//! - [`error`]: the one error type, [`PmuError`], for all of the above.
//!
//! Two modules are other crates re-exported under their old paths since the split
//! (their code lives in `crates/procfs` and `crates/api`):
//!
//! - [`procfs`] is `hwqos_procfs`: software metrics from `/proc` (CPU utilization,
//!   run queue, interrupts, per-process faults and CPU time);
//! - [`api`] is `hwqos_api`: the live API protocol (JSON lines on a Unix socket)
//!   and a client. Clients that only talk to a running monitor depend on
//!   `hwqos-api` alone, without perf_event.

#![deny(missing_docs)]

pub mod appmetric;
pub mod backend;
pub mod catalog;
pub mod derived;
pub mod error;
pub mod event;
pub mod sampler;
pub mod spec;
pub mod target;

pub use hwqos_api as api;
pub use hwqos_procfs as procfs;

pub use backend::BackendKind;
pub use catalog::Catalog;
pub use error::PmuError;
pub use event::{Event, EventAttr, EventSource, Modes};
/// The frame types [`Sampler::sample`] returns, from `hwqos-core`.
pub use hwqos_core::{Frame, Sample, Scope, Timestamp};
pub use sampler::{Sampler, SamplerConfig, SamplerProblem};
pub use target::{Resolver, TargetSelector};
