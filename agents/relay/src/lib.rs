//! The relay agent's library: a compressing side and a decompressing side
//! that carry unmodified TCP traffic across a link with adaptive compression
//! ([`hwqos_compress`]). Applications connect to the `compress` side, which
//! frames and compresses their bytes towards the `decompress` side, which
//! hands them to the real server; both directions of a connection are
//! compressed across the link.
//!
//! Everything the relay does lives here; the binary's `main.rs` is thin glue
//! over this library and `hwqos-agent`'s lifecycle: it parses [`cli::Cli`],
//! loads a [`Config`], calls [`start`], and then, on the runtime, reloads on
//! SIGHUP ([`Running::reload`]), drains on SIGTERM/SIGINT
//! ([`Running::shutdown`]), and feeds the systemd watchdog only while
//! [`Running::is_accepting`] holds; exit statuses, located configuration
//! errors and sd_notify come from `hwqos_agent::lifecycle`.
//!
//! Modules:
//!
//! - [`cli`]: the command line (clap), shared with the man-page generator;
//! - [`config`]: the TOML configuration (`/etc/hwqos/relay.toml`, every key
//!   optional, `deploy/config/relay.toml` explains each) and its validation;
//! - [`auth`]: the link side's pre-shared-key handshake (authenticates the
//!   peer relay, does not encrypt);
//! - [`cpu_source`]: the throttle's CPU utilization — the monitor's live API
//!   while `hwqos-monitor` runs, `/proc/stat` otherwise;
//! - [`limits`]: per-peer decompression (expansion) budgets and aggregated
//!   warnings;
//! - [`chunk`]: how much of the application's bytes one message carries
//!   (grows with a bulk transfer up to `chunk_bytes`);
//! - [`service`]: accept loop, per-connection pumps, reload, drain;
//! - [`metrics`]: statistics and the OpenMetrics exposition
//!   (`hwqos_relay_*`).

#![deny(missing_docs)]

pub mod auth;
pub mod chunk;
pub mod cli;
pub mod config;
pub mod cpu_source;
pub mod limits;
pub mod metrics;
pub mod service;

pub use config::{Config, ConfigError, Mode};
pub use service::{start, Running};
