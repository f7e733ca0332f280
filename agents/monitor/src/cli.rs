//! The `hwqos-monitor` command line (clap definitions only), public so the
//! packaging generator (`deploy/package`) can render its man page and shell
//! completions.

use clap::Parser;
use std::path::PathBuf;

/// Continuous hardware and software characteristics monitoring of this node.
#[derive(Parser, Debug)]
#[command(name = "hwqos-monitor", version, about)]
pub struct Cli {
    /// Configuration file (TOML). Without it, /etc/hwqos/monitor.toml if it
    /// exists, else the built-in defaults.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Validate the configuration and exit (0: valid, 2: invalid).
    #[arg(long)]
    pub check_config: bool,
    /// List the events this node offers, and why the others are unavailable.
    #[arg(long)]
    pub list_events: bool,
    /// Sampling rate in Hz (overrides `rate_hz`, also across reloads).
    #[arg(long, value_name = "HZ")]
    pub rate: Option<f64>,
    /// Sample one interval, print the frame as JSON and exit.
    #[arg(long)]
    pub once: bool,
}
