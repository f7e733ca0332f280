//! The `hwqos-monitor` agent's library: continuous hardware and software
//! characteristics monitoring (the thesis' Charmon, chapter 5 and section
//! 8.3.1) as a node agent.
//!
//! The binary's `main.rs` is thin glue over this library and `hwqos-agent`'s
//! lifecycle: it parses [`cli::Cli`], raises the open-file limit (every
//! counter is a file), answers `--list-events`, loads the configuration
//! (`--config`, else `/etc/hwqos/monitor.toml` if it exists, else the
//! built-in defaults; `deploy/config/monitor.toml` explains each key),
//! answers `--check-config` and `--once` ([`source::sample_once`]), and
//! otherwise hands over to [`service::run_with`]; `hwqos_agent::lifecycle`
//! turns the result into the exit status (0 success, 1 runtime failure, 2
//! bad configuration).
//!
//! One sampling thread makes a frame per tick; the frame database keeps the
//! history (for `window` requests and flushes), the live state hands each
//! frame to the live API's subscribers and to `/metrics`. The modules, from
//! the bottom up (each uses only those above it):
//!
//! - [`frame_codec`]: the compact lossless encoding the database stores frames in;
//! - [`db`]: the bounded in-memory frame database;
//! - [`segments`]: the append-only recordings a flush writes (JSON lines / CSV segments);
//! - [`config`]: the TOML configuration, validated with errors naming file,
//!   line, key and what was expected (`hwqos_agent::lifecycle::ConfigError`);
//! - [`error`]: [`MonitorError`] and its exit statuses;
//! - [`source`]: where frames come from ([`FrameSource`], [`NodeSources`]);
//! - [`openmetrics`]: the OpenMetrics text of the newest frames (rendering only);
//! - [`counters`]: the running counts and the `window` byte account;
//! - [`live`]: what the sampler publishes for subscribers and `/metrics`;
//! - `state`: what the sampling thread and the handles share, behind which lock;
//! - `sampling`: the sampling thread (it also feeds the systemd watchdog);
//! - [`monitor`]: [`Monitor`] (starts and stops the sampling thread) and [`MonitorHandle`];
//! - `reload`, `flush`: [`MonitorHandle::apply`]/[`MonitorHandle::reload`]
//!   and [`MonitorHandle::flush`];
//! - [`api_server`]: the live API on a Unix socket (protocol and client in [`hwqos_pmu::api`]);
//! - [`service`]: the whole agent — [`service::run`] wires the monitor, the
//!   API, `/metrics` (hwqos-agent's server), the service manager and the signals;
//! - [`cli`]: the command line (clap), shared with the man-page generator.

#![deny(missing_docs)]

pub mod api_server;
pub mod cli;
pub mod config;
pub mod counters;
pub mod db;
pub mod error;
mod flush;
pub mod frame_codec;
pub mod live;
pub mod monitor;
pub mod openmetrics;
mod reload;
mod sampling;
pub mod segments;
pub mod service;
pub mod source;
mod state;

/// The version reported in status, hello lines and recordings.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use config::{Config, ConfigError};
pub use error::MonitorError;
pub use monitor::{Monitor, MonitorHandle};
pub use service::{run, RunOptions};
pub use source::{FrameSource, NodeSources};
