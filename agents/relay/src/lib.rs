//! The relay agent: a compressing side and a decompressing side that carry
//! unmodified TCP traffic across a link with adaptive compression
//! (hwqos-compress). The library holds the logic; `main.rs` is CLI glue.
//!
//! - [`cli`]: the command line (clap), shared with the man-page generator;
//! - [`config`]: the TOML configuration and its validation;
//! - [`service`]: accept loop, per-connection pumps, reload, drain;
//! - [`metrics`]: statistics and the OpenMetrics exposition.

pub mod cli;
pub mod config;
pub mod metrics;
pub mod service;

pub use config::{Config, ConfigError, Mode};
pub use service::{start, Running};
