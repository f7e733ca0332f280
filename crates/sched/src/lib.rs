//! hwqos-sched: shared-resource-aware allocation and scheduling (thesis
//! chapter 8): correlation of hardware usage with application performance,
//! resource sensitivity models, the placement decision engine, contracts, and
//! quota enforcement backends.
//!
//! - [`backend`]: the [`backend::QuotaBackend`] seam with the userspace
//!   backend (perf overflow signals + freeze/SIGSTOP) and the `SCHED_SRA` kernel class;
//! - [`guardian`]: the crash guardian that thaws everything if the agent dies;
//! - [`proc`]: thread lists, task state, affinity of every thread (verified).

pub mod analysis;
pub mod backend;
pub mod contract;
pub mod counter;
pub mod decision;
pub mod error;
pub mod guardian;
pub mod leech;
pub mod limit;
pub mod model;
pub mod proc;

pub use error::SchedError;
