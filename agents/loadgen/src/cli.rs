//! The `hwqos-loadgen` command line (clap definitions only), public so the
//! packaging generator (`deploy/package`) can render its man page and shell
//! completions.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Capture a production node's hardware usage, synthesize it on a test node
/// with feedback control, and replay it (thesis 6.2.1).
#[derive(Parser, Debug)]
#[command(name = "hwqos-loadgen", version)]
pub struct Cli {
    /// Configuration file (TOML: safety caps, I/O generator settings, agent model).
    #[arg(short = 'c', long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands: capture, targets, synthesize and replay are the capture →
/// synthesize → replay workflow; run is the systemd agent.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Per metric and CPU, the mean and time series of a monitor recording.
    Capture {
        /// A recording written by `hwqos record -a` or hwqos-monitor (JSON lines).
        recording: PathBuf,
        /// Output targets file (`hwqos.loadtargets/1`).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        /// The production node's hardware model (`hwqos probe` output); default: this node's.
        #[arg(long = "hardware-model", value_name = "FILE")]
        hardware_model: Option<PathBuf>,
        /// Only these metrics (repeatable; e.g. cpu_util, page_fault_rate).
        #[arg(long = "metric", value_name = "NAME")]
        metrics: Vec<String>,
        /// Only these CPUs (repeatable).
        #[arg(long = "cpu", value_name = "N")]
        cpus: Vec<u32>,
        /// Sum the recording's process scopes and take them as CPU N's load
        /// (a recording of processes pinned to CPU N, `hwqos record -p PID`).
        #[arg(long = "processes-as-cpu", value_name = "N")]
        processes_as_cpu: Option<u32>,
    },
    /// Write a targets file by hand: `METRIC@CPU=VALUE` (e.g. cpu_util@1=0.35).
    Targets {
        /// One target per metric and CPU (e.g. cpu_util@1=0.35).
        #[arg(required = true, value_name = "METRIC@CPU=VALUE")]
        targets: Vec<String>,
        /// Output targets file (`hwqos.loadtargets/1`).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
    },
    /// Run the closed loop until the targets are met; store the knobs as a model.
    Synthesize {
        /// Targets file (`hwqos.loadtargets/1`).
        targets: PathBuf,
        /// Output model (`hwqos.loadmodel/1`).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        /// The closed loop's settings.
        #[command(flatten)]
        loop_args: LoopArgs,
    },
    /// Replay a model: its targets held in closed loop from the stored knobs
    /// (default), or its knobs fixed (`--open-loop`).
    Replay {
        /// Model file (`hwqos.loadmodel/1`).
        model: PathBuf,
        /// Seconds to run (default: until SIGINT/SIGTERM).
        #[arg(long, value_name = "SECS")]
        duration: Option<f64>,
        /// Measure and report the deviation per metric.
        #[arg(long)]
        verify: bool,
        /// Replay the recorded time series, not just the mean.
        #[arg(long)]
        dynamic: bool,
        /// Apply the model's knobs fixed instead of holding its targets: the
        /// totals then move with whatever else runs on the CPU.
        #[arg(long)]
        open_loop: bool,
        /// Replay a model made on a different CPU model anyway.
        #[arg(long)]
        force: bool,
        /// Print the deviations as JSON.
        #[arg(long)]
        json: bool,
        /// Measurement period in milliseconds (with --verify).
        #[arg(long, default_value_t = 250, value_name = "MS")]
        period_ms: u64,
        /// Measure only these processes (comma-separated PIDs, `self` for this
        /// one) instead of everything on the CPU; see `synthesize --help`.
        /// Default: what the model was synthesized on (the whole CPU, or
        /// `self` for a model made with --measure-processes).
        #[arg(long, value_name = "PIDS")]
        measure_processes: Option<String>,
        /// Serve OpenMetrics `/metrics` on this address (e.g. 127.0.0.1:9465;
        /// port 0 picks a free one, printed on stderr).
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<String>,
    },
    /// Agent mode (systemd): replay the configured model until SIGTERM,
    /// measuring it and serving `/metrics` (`[metrics]` in the configuration);
    /// with `[run] model_dir`, the best model of that directory, switching
    /// when it changes.
    Run {
        /// Model file (default: `[run] model`, else `[run] model_dir`).
        model: Option<PathBuf>,
        /// Replay the recorded time series.
        #[arg(long)]
        dynamic: bool,
        /// `/metrics` address (default: `[metrics] listen`, 127.0.0.1:9465).
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<String>,
    },
    /// Check the configuration and exit (0: valid, 2: invalid).
    CheckConfig,
    /// Check every model of a directory as `run` reads `[run] model_dir`
    /// (each file ok or why not, and which one `run` would replay); exit 2
    /// when any file is invalid.
    ValidateDir {
        /// The directory.
        dir: PathBuf,
        /// Accept models made on another CPU model (as `[run] force`).
        #[arg(long)]
        force: bool,
    },
    /// Run generators open loop at fixed knobs (a background load, or a
    /// workload to record): `--knob METRIC@CPU=VALUE`, repeatable.
    Generate {
        /// A generator's fixed knob (repeatable; e.g. cpu_util@1=0.15).
        #[arg(long = "knob", required = true, value_name = "METRIC@CPU=VALUE")]
        knobs: Vec<String>,
        /// Seconds to run (default: until SIGINT/SIGTERM).
        #[arg(long, value_name = "SECS")]
        duration: Option<f64>,
    },
    /// Release gate under replayed load (thesis 6.4.3): run a baseline and
    /// a candidate command bare and under the model's replayed load,
    /// interleaved and repeated, and report the candidate's effect on x per
    /// condition with a 95 % interval. Exit 3 with --fail-on-regression PCT
    /// when the loaded regression is significant and exceeds PCT.
    Gate {
        /// Model file (`hwqos.loadmodel/1`, from `synthesize`).
        model: PathBuf,
        /// The baseline command (run with `sh -c`).
        #[arg(long, value_name = "CMD")]
        baseline: String,
        /// The candidate command (run with `sh -c`).
        #[arg(long, value_name = "CMD")]
        candidate: String,
        /// Repetitions of each version in each condition (at least 2).
        #[arg(
            short = 'r',
            long = "repetitions",
            default_value_t = 5,
            value_name = "N"
        )]
        repetitions: u32,
        /// Read x from the command's stdout: a regular expression with one
        /// capture group around the number (default: x is the wall time, s).
        #[arg(long, value_name = "REGEX")]
        x_regex: Option<String>,
        /// Which way of x is better: lower or higher.
        #[arg(long, default_value = "lower", value_name = "lower|higher")]
        x_direction: String,
        /// Exit 3 when the loaded condition's regression is significant and
        /// its estimate exceeds PCT percent.
        #[arg(long, value_name = "PCT")]
        fail_on_regression: Option<f64>,
        /// Seconds the load runs before a loaded command starts.
        #[arg(long, default_value_t = 1.0, value_name = "SECS")]
        settle: f64,
        /// Hold the model's targets in closed loop, measuring this process
        /// (the generators, not the command), instead of its fixed knobs.
        #[arg(long)]
        closed_loop: bool,
        /// Replay a model made on a different CPU model anyway.
        #[arg(long)]
        force: bool,
        /// Write `baseline-bare.jsonl`, `candidate-loaded.jsonl`, … here (the
        /// commands' counters per run, for `hwqos diff`).
        #[arg(long, value_name = "DIR")]
        record_dir: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Also draw x per run as an SVG: one panel per condition, baseline
        /// and candidate by repetition, their means, the effect and verdict.
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
    },
    /// (internal) Read with the data-cache generator for an external cache
    /// model: `--level SIZE,WAYS,LINE` per level, shallowest first.
    #[command(hide = true)]
    GenDcache {
        /// One cache level's geometry in bytes, cachegrind's `--D1=` syntax
        /// (repeatable, shallowest first; e.g. 32768,8,64).
        #[arg(long = "level", required = true, value_name = "SIZE,WAYS,LINE")]
        levels: Vec<String>,
        /// Miss ratio per level (misses per access at that level), comma-separated.
        #[arg(long, value_name = "R1,R2,..")]
        ratios: String,
        /// Number of reads to make.
        #[arg(long, default_value_t = 20_000_000)]
        reads: u64,
    },
}

/// Closed-loop settings.
#[derive(clap::Args, Debug, Clone)]
pub struct LoopArgs {
    /// Measurement period in milliseconds.
    #[arg(long, default_value_t = 250, value_name = "MS")]
    pub period_ms: u64,
    /// Give up after this many seconds (exit 1).
    #[arg(long, default_value_t = 120.0, value_name = "SECS")]
    pub timeout: f64,
    /// Consecutive samples within tolerance that count as converged.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub needed: u32,
    /// Samples after convergence over which the stored knobs are averaged.
    #[arg(long, default_value_t = 24, value_name = "N")]
    pub hold: u32,
    /// Measure through a running hwqos-monitor's API socket instead of in-process counters.
    #[arg(long, value_name = "SOCKET")]
    pub monitor_socket: Option<PathBuf>,
    /// Measure only these processes (comma-separated PIDs, `self` for this
    /// one) instead of everything on the CPU: on a shared node, list this
    /// process and the background load to top up; other tenants then do not
    /// count. All targets must be on one CPU.
    #[arg(long, value_name = "PIDS")]
    pub measure_processes: Option<String>,
    /// Serve OpenMetrics `/metrics` on this address while the loop runs
    /// (e.g. 127.0.0.1:9465; port 0 picks a free one, printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
}
