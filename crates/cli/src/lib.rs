//! The `hwqos` command line as a library: every subcommand is a function here so
//! it can be tested without spawning the binary; `main.rs` only parses arguments
//! and maps errors to exit codes.
//!
//! - [`args`]: the clap definitions;
//! - [`stat`], [`stat_run`]: `hwqos stat` (perf-stat-like counting);
//! - [`child`]: starting a measured command held until its counters are enabled;
//! - [`report`], [`plot`]: summaries and SVG plots of recordings;
//! - [`error`]: exit codes (2 for usage and configuration errors).

pub mod args;
pub mod child;
pub mod error;
pub mod plot;
pub mod report;
pub mod stat;
pub mod stat_run;

use anyhow::Result;
use args::{Cli, Command};

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Some(Command::Stat(a)) => {
            let mut backend = hwqos_pmu::backend::perf::PerfBackend::new();
            let mut resolve = node_resolver()?;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            stat_run::run(
                &a,
                stat_run::StatEnv {
                    backend: &mut backend,
                    resolve: &mut resolve,
                    out: &mut out,
                },
            )
        }
        Some(Command::Report(a)) => {
            report::run(&a.recording, a.json, &mut std::io::stdout().lock())?;
            Ok(0)
        }
        Some(Command::Plot(a)) => {
            plot::run(&a.recording, &a.output, &a.metrics, &a.scopes)?;
            Ok(0)
        }
        _ => Err(error::usage("this subcommand is not built yet")),
    }
}

/// Resolves event names through this node's catalog.
pub fn node_resolver() -> Result<impl FnMut(&str) -> Result<hwqos_pmu::Event, hwqos_pmu::PmuError>> {
    Ok(|name: &str| {
        Err(hwqos_pmu::PmuError::UnknownEvent {
            name: name.to_string(),
            reason: "the catalog is not available yet".into(),
        })
    })
}
