//! The `hwqos-relay` command line (clap definitions only), public so the
//! packaging generator (`deploy/package`) can render its man page and shell
//! completions.

use clap::Parser;
use std::path::PathBuf;

/// Transparent TCP relay with adaptive message compression.
#[derive(Parser, Debug)]
#[command(name = "hwqos-relay", version)]
pub struct Cli {
    /// Configuration file (TOML).
    #[arg(
        short = 'c',
        long,
        value_name = "FILE",
        default_value = "/etc/hwqos/relay.toml"
    )]
    pub config: PathBuf,
    /// Validate the configuration and exit (0: valid, 2: invalid).
    #[arg(long)]
    pub check_config: bool,
}
