//! `hwqos-loadgen`: command-line glue around [`hwqos_loadgen::run`]. Exit
//! codes: 0 success (SIGTERM included), 1 runtime failure (no convergence, a
//! generator error), 2 bad input (targets, models, configuration).

use clap::Parser;
use std::io::IsTerminal;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    hwqos_loadgen::run(hwqos_loadgen::cli::Cli::parse())
}
