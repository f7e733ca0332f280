//! The `hwqos-sra` agent's library: shared-resource-aware allocation and
//! quota scheduling (thesis chapter 8) on top of hwqos-sched. The domain
//! logic — analysis, the sensitivity model, decisions, contracts, quota
//! backends, the resource-limit finder and leeches — lives in hwqos-sched;
//! this library holds the agent: applying contracts, the closed loop, its
//! frames and its process lifecycle.
//!
//! The binary's `main.rs` is thin glue over this library and
//! `hwqos-agent`'s lifecycle: it parses [`cli::Cli`], runs the hidden crash
//! guardian (`__guardian`, straight into hwqos-sched before any logging or
//! thread) or calls the [`commands`] function of the subcommand, and hands
//! the result to `hwqos_agent::lifecycle::finish` for the exit status (0
//! success, SIGTERM included; 1 runtime failure; 2 bad configuration or
//! input).
//!
//! - [`cli`]: the command line (clap), shared with the man-page generator;
//! - [`config`]: the TOML configuration of `run` (`/etc/hwqos/sra.toml`,
//!   explained in `deploy/config/sra.toml`);
//! - [`commands`]: one function per subcommand;
//! - [`enforce`]: backend / throttle mechanism / route words and [`enforce::AgentOptions`];
//! - [`agent`]: applying contracts (affinity + quota backend + crash guardian);
//! - [`thaw`]: the throttle state file and `thaw`;
//! - [`frames`]: frames from the node monitor's live API, or the agent's own
//!   sampler when no monitor serves;
//! - [`run`]: the monitor → analyse → decide → apply loop;
//! - [`service`]: signals, systemd notification and `/metrics` (from hwqos-agent);
//! - [`metrics`]: the OpenMetrics exposition of the agent's state
//!   (`hwqos_sra_*`).

#![deny(missing_docs)]

pub mod agent;
pub mod cli;
pub mod commands;
pub mod config;
pub mod enforce;
pub mod frames;
pub mod metrics;
pub mod run;
pub mod service;
pub mod thaw;
