//! `hwqos-loadgen`: command-line glue around [`hwqos_loadgen::run`]. Exit
//! statuses follow [`hwqos_agent::lifecycle`]: 0 success (SIGTERM included),
//! 1 runtime failure (no convergence, a generator error), 2 bad input
//! (targets, models, configuration, arguments).

use clap::Parser;

fn main() -> std::process::ExitCode {
    hwqos_agent::init_logging();
    hwqos_loadgen::run(hwqos_loadgen::cli::Cli::parse())
}
