//! hwqos-pmu: continuous sampling of PMU hardware counters and software metrics
//! per process, thread, CPU and cgroup — the engine behind `hwqos-monitor` and
//! `hwqos stat`, usable from any Rust service.
//!
//! - [`event`]: the resolved form of an event (`perf_event_attr` encoding + metric name);
//! - [`catalog`], [`spec`]: event names (generic `hw.*`/`sw.*`, perf syntax, raw,
//!   sysfs `pmu/event=…/`), per-CPU-model target specs and availability probing;
//! - [`backend`]: counter backends — real `perf_event` and a deterministic simulator;
//! - [`procfs`]: software metrics from `/proc` (CPU utilization, run queue, interrupts,
//!   per-process faults and CPU time) — the `hwqos-procfs` crate, re-exported;
//! - [`target`]: selecting what to monitor (pid, name, regex, cgroup, systemd unit)
//!   and following processes and threads as they come and go;
//! - [`derived`]: IPC/CPI, miss ratios, rates and CPI stacks from one group and interval;
//! - [`appmetric`]: application performance metrics (*x*) on the counters' time base;
//! - [`sampler`]: event-set rotation per target, scaling, one [`hwqos_core::Frame`] per tick;
//! - [`api`]: the live API protocol (JSON lines on a Unix socket) and a client — the
//!   `hwqos-api` crate, re-exported (clients that only talk to a monitor depend on
//!   `hwqos-api` alone, without perf_event).

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

pub use error::PmuError;
pub use event::{Event, EventAttr, EventSource, Modes};
