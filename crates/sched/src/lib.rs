//! hwqos-sched: shared-resource-aware allocation and scheduling (thesis
//! chapter 8): correlation of hardware usage with application performance,
//! resource sensitivity models, the placement decision engine, contracts, and
//! quota enforcement backends.
//!
//! - [`analysis`]: align, normalize, Butterworth-filter and correlate the
//!   resource series *R* with the application metric *x*; pick r̂ above θ;
//!   table and SVG (thesis Fig. 8.11);
//! - [`model`]: the resource sensitivity model and manual constraints,
//!   persisted as JSON with an atomic save;
//! - [`evaluation`]: one evaluation of the closed loop — frames to
//!   per-process analyses to an updated model (quotas kept);
//! - [`decision`]: the decision engine — placement by r̂ and cache domains,
//!   then by CPU demand, with constraints and explanations;
//! - [`contract`]: the allocation-and-scheduling contract (`hwqos.contract/1`,
//!   thesis Fig. 8.9), validation and resolution against this machine;
//! - [`proc`]: thread lists, task state, verified affinity of every thread;
//! - [`backend`]: the [`backend::QuotaBackend`] seam with the userspace
//!   backend (perf overflow signals + SIGSTOP/cgroup freeze) and the
//!   `SCHED_SRA` kernel class, and [`backend::detect`];
//! - [`deadman`]: the kernel-held SIGCONT for a throttled process if every hwqos process dies;
//! - [`guardian`]: the crash guardian that thaws everything if the agent dies;
//! - [`input`]: bounded reading of regular files, duplicate-key detection;
//! - [`counter`]: counting perf counters summed over a process's threads;
//! - [`limit`], [`leech`]: the resource-limit finder (Listing 8.2) and the
//!   CPU / memory / FPU / page-fault leeches (thesis 8.4.2).

pub mod analysis;
pub mod backend;
pub mod contract;
pub mod counter;
pub mod deadman;
pub mod decision;
pub mod error;
pub mod evaluation;
pub mod guardian;
pub mod input;
pub mod leech;
pub mod limit;
pub mod model;
pub mod proc;

pub use error::SchedError;
