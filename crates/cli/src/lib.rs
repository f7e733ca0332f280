//! The `hwqos` command line as a library: every subcommand is a function here so
//! it can be tested without spawning the binary; `main.rs` only parses arguments
//! and maps errors to exit codes.
//!
//! - [`args`]: the clap definitions;
//! - [`stat`], [`stat_run`]: `hwqos stat` (perf-stat-like counting);
//! - [`list`]: event names and their availability here;
//! - [`child`]: starting a measured command held until its counters are enabled;
//! - [`top`]: the live per-process / per-CPU view;
//! - [`record`]: recordings made with the monitor engine;
//! - [`report`], [`plot`]: summaries and SVG plots of recordings;
//! - [`probe`]: `hwqos probe`, the node's hardware model (hwqos-topology);
//! - [`progress`]: progress bars of the long steps (only on a terminal);
//! - [`error`]: exit codes (2 for usage and configuration errors).

pub mod args;
pub mod child;
pub mod error;
pub mod list;
pub mod plot;
pub mod probe;
pub mod progress;
pub mod record;
pub mod report;
pub mod stat;
pub mod stat_run;
pub mod top;

use anyhow::Result;
use args::{Cli, Command};

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<u8> {
    if cli.list_events {
        list::run(cli.json, &[], &mut std::io::stdout().lock())?;
        return Ok(0);
    }
    match cli.command {
        Some(Command::List(a)) => {
            list::run(a.json, &a.filter, &mut std::io::stdout().lock())?;
            Ok(0)
        }
        Some(Command::Spec(a)) => {
            list::run_spec(&a, &mut std::io::stdout().lock())?;
            Ok(0)
        }
        Some(Command::Stat(a)) => {
            let mut backend = hwqos_pmu::backend::perf::PerfBackend::for_this_node();
            let mut resolve = node_resolver();
            // Counts go to standard error like perf's (standard output belongs
            // to the measured command), or to the -o file.
            let mut out: Box<dyn std::io::Write> = match &a.output {
                Some(path) => Box::new(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .write(true)
                        .append(a.append)
                        .truncate(!a.append)
                        .open(path)
                        .map_err(|e| error::usage(format!("-o {}: {e}", path.display())))?,
                ),
                None => Box::new(std::io::stderr().lock()),
            };
            stat_run::run(
                &a,
                stat_run::StatEnv {
                    backend: &mut backend,
                    resolve: &mut resolve,
                    out: &mut out,
                },
            )
        }
        Some(Command::Record(a)) => record::run(&a),
        Some(Command::Report(a)) => {
            report::run(&a.recording, a.json, &mut std::io::stdout().lock())?;
            Ok(0)
        }
        Some(Command::Plot(a)) => {
            plot::run(&a.recording, &a.output, &a.metrics, &a.scopes)?;
            Ok(0)
        }
        Some(Command::Top(a)) => {
            top::run(&a, &mut std::io::stdout().lock())?;
            Ok(0)
        }
        Some(Command::Probe(a)) => probe::run(&a, &mut std::io::stdout().lock()),
        None => Err(error::usage("no subcommand given (see hwqos --help)")),
    }
}

/// Resolves event names through this node's catalog.
pub fn node_resolver() -> impl FnMut(&str) -> Result<hwqos_pmu::Event, hwqos_pmu::PmuError> {
    let catalog = hwqos_pmu::catalog::Catalog::for_this_node();
    move |name: &str| catalog.resolve(name)
}
