//! hwqos-monitor: continuous hardware and software characteristics monitoring
//! (the thesis' Charmon, chapter 5 and section 8.3.1) as a node agent.
//!
//! - [`cli`]: the command line (clap), shared with the man-page generator;
//! - [`config`]: the TOML configuration, validated with errors naming file, key and problem;
//! - [`db`]: the bounded in-memory frame database;
//! - [`segments`]: the append-only recordings a flush writes (JSON lines / CSV segments);
//! - [`frame_codec`]: the compact lossless encoding the database stores frames in;
//! - [`api_server`]: the live API on a Unix socket (protocol and client in [`hwqos_pmu::api`]);
//! - [`openmetrics`]: the `/metrics` endpoint in OpenMetrics text format;
//! - [`service`]: the sampling thread, signals, reload and shutdown — [`service::run`]
//!   is the whole agent, [`service::Monitor`] the embeddable part.

pub mod api_server;
pub mod cli;
pub mod config;
pub mod db;
pub mod frame_codec;
pub mod openmetrics;
pub mod segments;
pub mod service;

pub use config::{Config, ConfigError};
pub use service::{run, Engine, Monitor, MonitorError, MonitorHandle, RunOptions};
