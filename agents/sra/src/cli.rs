//! The `hwqos-sra` command line (clap definitions only), public so the
//! packaging generator (`deploy/package`) can render its man page and shell
//! completions.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Shared-resource-aware process allocation and quota scheduling.
#[derive(Parser, Debug)]
#[command(name = "hwqos-sra", version)]
pub struct Cli {
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands: `run` is the systemd agent; the others are its steps
/// one at a time, `thaw` its ExecStopPost, `__guardian` its crash guardian.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the monitor → analyse → decide → apply loop every evaluation period.
    Run {
        /// Configuration file (TOML).
        #[arg(
            short = 'c',
            long,
            value_name = "FILE",
            default_value = "/etc/hwqos/sra.toml"
        )]
        config: PathBuf,
        /// Validate the configuration and exit (0: valid, 2: invalid).
        #[arg(long)]
        check_config: bool,
    },
    /// Apply a contract (affinity + quotas) and enforce it until SIGTERM.
    Apply(ApplyArgs),
    /// Correlate resources with the application metric in a monitor recording
    /// (table, and an SVG per process like thesis Fig. 8.11), or over a fleet
    /// from Prometheus (`--prometheus`: pooled per process name, per-node check).
    Analyse(AnalyseArgs),
    /// Predict x under a configuration change (thesis 6.4.4): fit x to r̂ in
    /// a production recording, take r̂'s mean in a test recording made under
    /// the change, and print x̂ with its prediction interval. Only windows
    /// that are full observations of a scope count (not a partial or late
    /// tick, nor the window its process exited in or after); how many were
    /// left out is printed.
    Predict(PredictArgs),
    /// Print the placement and its explanations for a sensitivity model on a
    /// hardware model (this machine, or a sysfs/procfs fixture root).
    Decide(DecideArgs),
    /// Find a process's resource quota with a leech (thesis Listing 8.2).
    FindLimit(FindLimitArgs),
    /// Run a leech: cpu, memory, fpu or faults.
    Leech(LeechArgs),
    /// Thaw and SIGCONT everything the agent may have throttled (ExecStopPost).
    Thaw {
        /// The agent's state directory.
        #[arg(long, default_value = "/run/hwqos-sra")]
        state_dir: PathBuf,
    },
    /// Check a contract directory as `run` with `contract_dir` reads it:
    /// each `*.json` file (dotfiles and temporary files ignored) is `ok
    /// vVERSION` or rejected with the reason, then the file that would be
    /// applied. Exit 0: every file valid; 2: any invalid, or no directory.
    ValidateDir {
        /// The directory (e.g. /etc/hwqos/contracts.d).
        dir: PathBuf,
    },
    /// Internal: the crash guardian (reads the agent's pipe on stdin).
    #[command(hide = true, name = "__guardian")]
    Guardian,
}

/// How quotas are enforced.
#[derive(Args, Debug, Clone)]
pub struct EnforceArgs {
    /// auto (the SCHED_SRA class when /proc/sched_sra exists), userspace or sched_sra.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Userspace backend: sigstop or freeze (cgroup v2 freezer).
    #[arg(long, default_value = "sigstop")]
    pub throttle: String,
    /// Userspace backend: direct (the kernel stops the task at the overflow)
    /// or agent (the overflow signal goes to the agent, which throttles).
    #[arg(long, default_value = "direct")]
    pub route: String,
    /// SCHED_FIFO priority of the quota threads (0: none, else 1..=99).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i32).range(0..=99))]
    pub rt_priority: i32,
    /// MemGuard-style lending of unused budget between processes with the
    /// same event and period (userspace backend, route agent).
    #[arg(long)]
    pub lend: bool,
    /// State directory (the list of throttled processes for `thaw`).
    #[arg(long, default_value = "/run/hwqos-sra")]
    pub state_dir: PathBuf,
}

/// `apply`'s arguments.
#[derive(Args, Debug)]
pub struct ApplyArgs {
    /// The contract (hwqos.contract/1 JSON).
    pub contract: PathBuf,
    /// How the contract's quotas are enforced.
    #[command(flatten)]
    pub enforce: EnforceArgs,
    /// Serve OpenMetrics on this address (e.g. 127.0.0.1:9466).
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// Stop after this many seconds (default: until SIGTERM/SIGINT).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Write per-period usage of every enforced process here on exit, one JSON
    /// line per period: pid, period, used (per quota event), throttled, length_ns.
    #[arg(long)]
    pub history_out: Option<PathBuf>,
    /// Apply what can apply even when some entries cannot (an unknown event,
    /// no matching process, a process matched twice, …): each is logged and
    /// skipped. Without it any such entry is an error (exit 2).
    #[arg(long)]
    pub allow_partial: bool,
}

/// `analyse`'s arguments.
#[derive(Args, Debug)]
pub struct AnalyseArgs {
    /// A monitor recording (JSON lines); or use --prometheus.
    #[arg(required_unless_present = "prometheus")]
    pub recording: Option<PathBuf>,
    /// Read the fleet's series from this Prometheus instead of a recording:
    /// http://HOST:PORT[/prefix] (plain HTTP only, no TLS).
    #[arg(long, value_name = "URL", conflicts_with = "recording")]
    pub prometheus: Option<String>,
    /// With --prometheus: label matchers every series must match, in braces
    /// (default `{}`: all).
    #[arg(long)]
    pub selector: Option<String>,
    /// With --prometheus: start of the range (RFC 3339, unix seconds, now-DURATION).
    #[arg(long)]
    pub start: Option<String>,
    /// With --prometheus: end of the range (RFC 3339, unix seconds, now,
    /// now-DURATION; default now).
    #[arg(long)]
    pub end: Option<String>,
    /// With --prometheus: the query step, also the analysis time base (5s,
    /// 1m, …; default 15s).
    #[arg(long)]
    pub step: Option<String>,
    /// With --prometheus: the labels a process series is grouped by
    /// (comma-separated; must include comm; a missing node label is the
    /// instance; default node,comm).
    #[arg(long)]
    pub group_by: Option<String>,
    /// With --prometheus: a node is flagged an outlier when its Corr(r̂, x)
    /// is more than this from the median over the nodes (default 0.3).
    #[arg(long)]
    pub outlier_tolerance: Option<f64>,
    /// The application metric x: an `app.*` metric (with --prometheus also
    /// its exposed name, e.g. hwqos_app_rate).
    #[arg(long)]
    pub x: String,
    /// Time-base step in milliseconds (recordings; --prometheus uses --step).
    #[arg(long, default_value_t = 100)]
    pub step_ms: u64,
    /// Butterworth order.
    #[arg(long, default_value_t = 4)]
    pub order: usize,
    /// Butterworth cutoff as a fraction of Nyquist (≥ 1: no filter).
    #[arg(long, default_value_t = 0.2)]
    pub cutoff: f64,
    /// θ: |Corr| threshold for r̂.
    #[arg(long, default_value_t = 0.5)]
    pub threshold: f64,
    /// Write one SVG per process into this directory.
    #[arg(long)]
    pub svg_dir: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Add the results to this sensitivity model (atomic save).
    #[arg(long)]
    pub model: Option<PathBuf>,
}

/// `predict`'s arguments.
#[derive(Args, Debug)]
pub struct PredictArgs {
    /// The production recording (JSON lines): x and the resources per process.
    pub production: PathBuf,
    /// A recording made under the changed configuration (e.g. on a test node
    /// under replayed production load, with the change applied): r̂'s mean there.
    #[arg(long, value_name = "RECORDING")]
    pub test: PathBuf,
    /// The application metric x (an `app.*` metric in the recording).
    #[arg(long)]
    pub x: String,
    /// Fit x to this resource instead of r̂ (the most correlated one).
    #[arg(long, value_name = "METRIC")]
    pub resource: Option<String>,
    /// The production scope (default: the only process with x and resources).
    #[arg(long)]
    pub scope: Option<String>,
    /// The scope in the test recording (default: the process with the
    /// production process's name, else the only one with the resource).
    #[arg(long)]
    pub test_scope: Option<String>,
    /// A recording where the change is real: report the actual mean x, the
    /// prediction error and whether it lies inside the interval.
    #[arg(long, value_name = "RECORDING")]
    pub actual: Option<PathBuf>,
    /// The scope in the actual recording (default: as for --test-scope, with x).
    #[arg(long)]
    pub actual_scope: Option<String>,
    /// Time-base step in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub step_ms: u64,
    /// Butterworth order.
    #[arg(long, default_value_t = 4)]
    pub order: usize,
    /// Butterworth cutoff as a fraction of Nyquist (≥ 1: no filter), for
    /// picking r̂ and for the fit.
    #[arg(long, default_value_t = 0.2)]
    pub cutoff: f64,
    /// θ: |Corr| threshold for r̂.
    #[arg(long, default_value_t = 0.5)]
    pub threshold: f64,
    /// Level of the prediction interval.
    #[arg(long, default_value_t = 0.95)]
    pub level: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also draw the prediction as an SVG: production's (r, x) pairs, the
    /// fitted line, r′ with x̂ and its interval, and the actual run.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// `decide`'s arguments.
#[derive(Args, Debug)]
pub struct DecideArgs {
    /// Sensitivity model (hwqos.sensitivity/1 JSON).
    #[arg(long)]
    pub model: PathBuf,
    /// Root holding sys/ and proc/ of the hardware model (default: this machine).
    #[arg(long, default_value = "/")]
    pub topology_root: PathBuf,
    /// Write the contract here (default: print it), atomically: a
    /// temporary dotfile renamed over it, so an agent watching the directory
    /// (`[agent] contract_dir`) never sees a partial file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The contract's version (agents watching a contract directory apply
    /// the valid contract of highest version; 0 is what an agent reports
    /// before any contract).
    #[arg(long, default_value_t = 0)]
    pub version: u64,
}

/// `find-limit`'s arguments.
#[derive(Args, Debug)]
pub struct FindLimitArgs {
    /// The victim process.
    #[arg(long)]
    pub pid: u32,
    /// The resource r (an event name, e.g. sw.page_faults or L1-dcache-loads).
    #[arg(long)]
    pub event: String,
    /// A shell command line (run with `sh -c`) that prints the victim's
    /// current performance x (its first number). One argument: quote it.
    #[arg(long, value_name = "SHELL_COMMAND")]
    pub x_command: String,
    /// Leech kind: cpu, memory, fpu or faults.
    #[arg(long, default_value = "memory")]
    pub leech: String,
    /// CPU to run the leech on (default: the victim's first allowed CPU).
    #[arg(long)]
    pub leech_cpu: Option<u32>,
    /// Memory leech working set in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub working_set: usize,
    /// Memory leech stride in bytes.
    #[arg(long, default_value_t = 64)]
    pub stride: usize,
    /// ω: lowest acceptable fraction of x̄.
    #[arg(long, default_value_t = 0.9)]
    pub omega: f64,
    /// Seconds to measure x̄ alone.
    #[arg(long, default_value_t = 3.0)]
    pub baseline_s: f64,
    /// Seconds per ramp step.
    #[arg(long, default_value_t = 1.0)]
    pub step_s: f64,
    /// Leech intensity added per step.
    #[arg(long, default_value_t = 0.1)]
    pub step: f64,
    /// Quota period in milliseconds.
    #[arg(long, default_value_t = 10.0)]
    pub period_ms: f64,
    /// Store the quota in this sensitivity model (under pid:PID).
    #[arg(long)]
    pub model: Option<PathBuf>,
}

/// `leech`'s arguments.
#[derive(Args, Debug)]
pub struct LeechArgs {
    /// cpu, memory, fpu or faults.
    pub kind: String,
    /// Duty cycle in [0, 1].
    #[arg(long, default_value_t = 1.0)]
    pub duty: f64,
    /// Working set in bytes (memory, faults).
    #[arg(long, default_value_t = 64 << 20)]
    pub working_set: usize,
    /// Stride in bytes (memory).
    #[arg(long, default_value_t = 64)]
    pub stride: usize,
    /// Pin the leech to this CPU.
    #[arg(long)]
    pub cpu: Option<u32>,
    /// Threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Stop after this many seconds (default: until SIGTERM/SIGINT).
    #[arg(long)]
    pub duration_s: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_after_the_x_command_are_options() {
        let cli = Cli::try_parse_from([
            "hwqos-sra",
            "find-limit",
            "--pid",
            "42",
            "--event",
            "sw.task_clock",
            "--x-command",
            "cat /tmp/x | head -1",
            "--leech",
            "cpu",
        ])
        .unwrap();
        let Command::FindLimit(a) = cli.command else {
            panic!("not find-limit")
        };
        assert_eq!(a.x_command, "cat /tmp/x | head -1");
        assert_eq!(a.leech, "cpu");
    }

    #[test]
    fn analyse_takes_a_recording_or_prometheus_not_both() {
        let parse = |args: &[&str]| {
            let mut v = vec!["hwqos-sra", "analyse", "--x", "app.rate"];
            v.extend_from_slice(args);
            Cli::try_parse_from(v)
        };
        assert!(parse(&["rec.jsonl"]).is_ok());
        let cli = parse(&["--prometheus", "http://127.0.0.1:9090", "--start", "now-1h"]).unwrap();
        let Command::Analyse(a) = cli.command else {
            panic!("not analyse")
        };
        assert_eq!(a.recording, None);
        assert_eq!(a.start.as_deref(), Some("now-1h"));
        assert!(parse(&[]).is_err());
        assert!(parse(&["rec.jsonl", "--prometheus", "http://127.0.0.1:9090"]).is_err());
    }
}
