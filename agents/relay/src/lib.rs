//! The relay agent: a compressing side and a decompressing side that carry
//! unmodified TCP traffic across a link with adaptive compression
//! (hwqos-compress). The library holds the logic; `main.rs` is CLI glue.
//!
//! - [`cli`]: the command line (clap), shared with the man-page generator;
//! - [`config`]: the TOML configuration and its validation;
//! - [`auth`]: the link side's pre-shared-key handshake;
//! - [`cpu_source`]: the throttle's CPU utilization — the monitor's live API
//!   while `hwqos-monitor` runs, `/proc/stat` otherwise;
//! - [`limits`]: per-peer expansion budgets and aggregated warnings;
//! - [`service`]: accept loop, per-connection pumps, reload, drain;
//! - [`metrics`]: statistics and the OpenMetrics exposition.

pub mod auth;
pub mod cli;
pub mod config;
pub mod cpu_source;
pub mod limits;
pub mod metrics;
pub mod service;

pub use config::{Config, ConfigError, Mode};
pub use service::{start, Running};
