//! The `hwqos` command line as a library: every subcommand is a function here so
//! it can be tested without spawning the binary; `main.rs` only parses arguments
//! and maps errors to exit codes.
//!
//! `hwqos` is the operator's tool on a node: `stat` counts events for a command,
//! processes or the whole system the way `perf stat` does (same CSV and JSON
//! shapes, plus `--json-full` lines with the raw `time_enabled`/`time_running`);
//! `list` and `spec` say which events this node can count and why the others
//! cannot; `top` is a live per-process and per-CPU view; `record`, `report`,
//! `plot` and `diff` make, summarize, draw and compare recordings in hwqos-core's format; `probe`
//! measures the node's hardware model (hwqos-topology). The sampling is the
//! same engine as the monitor agent's (hwqos-pmu's sampler and backends), so
//! numbers from the CLI and from the agents agree.
//!
//! [`run`] takes a parsed [`args::Cli`] and returns the exit code; each
//! subcommand's module has a `run` taking its argument struct and an output
//! writer, so tests and other Rust tools can drive a subcommand with a
//! simulated backend ([`stat_run::StatEnv`]) or read recordings with the same
//! code `hwqos report` uses ([`report::columns`]). Errors that are the user's
//! (bad flags, unknown events, unreadable files) are marked by
//! [`error::usage`] and end with exit status 2.
//!
//! - [`args`]: the clap definitions;
//! - [`stat`], [`stat_run`]: `hwqos stat` (perf-stat-like counting);
//! - [`list`]: event names and their availability here;
//! - [`child`]: starting a measured command held until its counters are enabled;
//! - [`top`]: the live per-process / per-CPU view;
//! - [`record`]: recordings made with the monitor engine;
//! - [`report`], [`plot`]: summaries and SVG plots of recordings;
//! - [`diff`]: `hwqos diff`, two recordings compared (the engine is
//!   [`hwqos_core::compare`]);
//! - [`probe`]: `hwqos probe`, the node's hardware model (hwqos-topology);
//! - [`api`]: `hwqos api`, a running monitor's live API as JSON lines;
//! - [`progress`]: progress bars of the long steps (only on a terminal);
//! - [`error`]: exit codes (2 for usage and configuration errors).
//!
//! # Example
//!
//! Splitting frames into the per-scope, per-metric columns `hwqos report` and
//! `hwqos plot` work on:
//!
//! ```rust
//! use hwqos_core::{Frame, MetricName, Sample, Scope, Timestamp};
//!
//! let metric = MetricName::from_static("os.cpu.util");
//! let frames: Vec<Frame> = (0..3u64)
//!     .map(|seq| {
//!         let time = Timestamp { mono_ns: seq * 1_000_000_000, wall_ns: 0 };
//!         let sample = Sample::gauge(time, Scope::System, metric.clone(), 0.25 * seq as f64);
//!         Frame { seq, time, interval_ns: 1_000_000_000, samples: vec![sample], labels: vec![] }
//!     })
//!     .collect();
//! let columns = hwqos_cli::report::columns(&frames);
//! let util = &columns[&Scope::System][&metric];
//! assert_eq!(util.times, vec![0.0, 1.0, 2.0]);
//! assert_eq!(util.values, vec![0.0, 0.25, 0.5]);
//! assert_eq!(util.multiplexed, 0);
//! ```

#![deny(missing_docs)]

pub mod api;
pub mod args;
pub mod child;
pub mod diff;
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
        Some(Command::Diff(a)) => diff::run(&a, &mut std::io::stdout().lock()),
        Some(Command::Top(a)) => {
            top::run(&a, &mut std::io::stdout().lock())?;
            Ok(0)
        }
        Some(Command::Probe(a)) => probe::run(&a, &mut std::io::stdout().lock()),
        Some(Command::Api(a)) => api::run(&a, &mut std::io::stdout().lock()),
        None => Err(error::usage("no subcommand given (see hwqos --help)")),
    }
}

/// Resolves event names through this node's catalog.
pub fn node_resolver() -> impl FnMut(&str) -> Result<hwqos_pmu::Event, hwqos_pmu::PmuError> {
    let catalog = hwqos_pmu::catalog::Catalog::for_this_node();
    move |name: &str| catalog.resolve(name)
}
