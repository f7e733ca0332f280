//! The `hwqos-sra` agent: shared-resource-aware allocation and quota
//! scheduling (thesis chapter 8) on top of hwqos-sched. The library holds the
//! logic; `main.rs` is CLI glue.
//!
//! - [`cli`]: the command line (clap), shared with the man-page generator;
//! - [`config`]: the TOML configuration of `run`;
//! - [`agent`]: applying contracts (affinity + quota backend + crash
//!   guardian) and the monitor → analyse → decide → apply loop;
//! - [`metrics`]: the OpenMetrics exposition of the agent's state.

pub mod agent;
pub mod cli;
pub mod config;
pub mod metrics;
