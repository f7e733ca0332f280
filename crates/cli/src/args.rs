//! The command line of `hwqos` (clap derive).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// hwqos: hardware and software characteristics of a Linux node — count events
/// like `perf stat`, watch processes and CPUs live, record, summarize and plot.
#[derive(Debug, Parser)]
#[command(
    name = "hwqos",
    version,
    propagate_version = true,
    arg_required_else_help = true,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// Same as `hwqos list`: the events this node offers and why the rest is unavailable.
    #[arg(long = "list-events")]
    pub list_events: bool,
    /// With --list-events: one JSON object per event.
    #[arg(long, requires = "list_events")]
    pub json: bool,
    /// The subcommand; `None` only with `--list-events`.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands, one per [`crate::run`] branch.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Count events for a command, processes, or the whole system (like `perf stat`).
    Stat(StatArgs),
    /// List event names with their availability on this node.
    #[command(visible_alias = "list-events")]
    List(ListArgs),
    /// Write this node's target spec (JSON, per CPU model): PMUs, counter capacity, events and their availability.
    Spec(SpecArgs),
    /// Live per-process and per-CPU view (plain periodic tables when not on a terminal).
    Top(TopArgs),
    /// Sample metrics into a JSON-lines recording (and optionally CSV).
    Record(RecordArgs),
    /// Summarize a recording per scope and metric (count, mean, median, p99, CI).
    Report(ReportArgs),
    /// Plot a recording as SVG: time series per metric and scope, CPI-stack bars.
    Plot(PlotArgs),
    /// Compare two recordings: per scope and metric, the change from A to B
    /// with an autocorrelation-aware confidence interval, ranked, with a
    /// verdict; release gates with --fail-on (exit 1 when one fails).
    Diff(DiffArgs),
    /// Measure this node's hardware model: topology, caches, OS settings and
    /// probes (clock, syscall, ctxswitch, memlat, bandwidth, pagefault, net, timer).
    Probe(ProbeArgs),
    /// Ask a running hwqos-monitor over its live API (Unix socket): its
    /// status, recent frames or a live subscription, printed as the API's
    /// JSON lines (schema hwqos.api/1), like `curl --unix-socket` for the monitor.
    Api(ApiArgs),
}

/// What to count in: processes, the whole system, or a command run by hwqos.
#[derive(Debug, Args, Clone, Default)]
pub struct TargetArgs {
    /// Attach to existing processes (all their threads), comma-separated pids.
    #[arg(
        short = 'p',
        long = "pid",
        value_delimiter = ',',
        value_name = "PID",
        conflicts_with = "all_cpus"
    )]
    pub pids: Vec<u32>,
    /// System-wide: count on every online CPU (needs root or perf_event_paranoid ≤ 0).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,
    /// The command to run and measure, with or without `--` before it (like
    /// perf). With -p, -t, -a or -C it only sets how long to count.
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `hwqos stat`'s flags (perf stat's, where they exist).
#[derive(Debug, Args)]
pub struct StatArgs {
    /// Events, comma-separated, by any catalog name: generic (`sw.task_clock`,
    /// `hw.cycles`), perf's (`task-clock`, `page-faults`, `L1-dcache-load-misses`),
    /// raw (`r0151`) or sysfs (`cpu/event=0x51,umask=0x1/`). May be repeated.
    /// Default: perf's list (task-clock, context-switches, cpu-migrations,
    /// page-faults, cycles, instructions, branches, branch-misses).
    #[arg(short = 'e', long = "event", value_name = "EVENTS")]
    pub events: Vec<String>,
    /// Print counts every MS milliseconds (deltas), then the totals.
    #[arg(short = 'I', long = "interval-print", value_name = "MS")]
    pub interval_ms: Option<u64>,
    /// CSV-like output with this field separator, in perf's field order
    /// (`[time,][CPU,]count,unit,event,run-time,percentage,metric,unit`).
    #[arg(
        short = 'x',
        long = "field-separator",
        value_name = "SEP",
        conflicts_with_all = ["json", "json_full"]
    )]
    pub separator: Option<String>,
    /// One JSON object per counter and line, in perf's own JSON shape
    /// (`counter-value`, `unit`, `event`, `event-runtime`, `pcnt-running`, …).
    #[arg(short = 'j', long, conflicts_with = "json_full")]
    pub json: bool,
    /// One JSON object per counter and scope in hwqos's schema `hwqos.stat/1`
    /// (metric name, scope, scaled value, raw count, enabled and running times).
    #[arg(long = "json-full")]
    pub json_full: bool,
    /// Write the counts to FILE instead of standard error (perf's -o).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// With -o: append to FILE instead of replacing it.
    #[arg(long, requires = "output")]
    pub append: bool,
    /// One line per CPU instead of the sum over CPUs (perf's -A; with -a or -C).
    #[arg(short = 'A', long = "no-aggr")]
    pub per_cpu: bool,
    /// Count only on these CPUs, system-wide (e.g. `0-3,6`; implies -a).
    #[arg(short = 'C', long = "cpu", value_name = "CPUS", conflicts_with_all = ["pids", "tids"])]
    pub cpus: Option<String>,
    /// Count only these threads (comma-separated tids; no inheritance).
    #[arg(
        short = 't',
        long = "tid",
        value_delimiter = ',',
        value_name = "TID",
        conflicts_with_all = ["pids", "all_cpus"]
    )]
    pub tids: Vec<u32>,
    /// Run the command N times and print the mean and the relative standard
    /// deviation of each count (perf's -r).
    #[arg(short = 'r', long = "repeat", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Accepted for perf compatibility: hwqos never merges events of
    /// several PMUs into one line.
    #[arg(long = "no-merge")]
    pub no_merge: bool,
    /// What to count in.
    #[command(flatten)]
    pub target: TargetArgs,
}

/// `hwqos list`'s flags.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// One JSON object per event.
    #[arg(long)]
    pub json: bool,
    /// Only these events, like `perf list`: `sw` (or `software`), `hw` (or
    /// `hardware`), `cache` (or `hwcache`), `tracepoint`, or a glob pattern
    /// matched against the names (`*fault*`, `hw.l1d.*`).
    #[arg(value_name = "FILTER")]
    pub filter: Vec<String>,
}

/// `hwqos spec`'s flags.
#[derive(Debug, Args)]
pub struct SpecArgs {
    /// Write the spec to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Do not open each event to check it (availability only where it is known statically).
    #[arg(long)]
    pub no_probe: bool,
}

/// `hwqos top`'s flags.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Seconds between updates.
    #[arg(
        short = 'd',
        long = "delay",
        default_value_t = 1.0,
        value_name = "SECS"
    )]
    pub delay: f64,
    /// Stop after this many updates (default: run until Ctrl-C).
    #[arg(short = 'n', long = "iterations", value_name = "N")]
    pub iterations: Option<u64>,
    /// Plain periodic tables without escape codes, even on a terminal.
    #[arg(long)]
    pub plain: bool,
    /// Processes shown per update in plain mode (the interactive view fills
    /// the terminal and scrolls).
    #[arg(long = "top", default_value_t = 15, value_name = "N")]
    pub top: usize,
    /// Only these processes (comma-separated pids, all their threads); the
    /// CPUs are shown as always.
    #[arg(short = 'p', long = "pid", value_delimiter = ',', value_name = "PID")]
    pub pids: Vec<u32>,
    /// Counter event sets rotated per process and CPU; sets separated by `;`,
    /// events in a set by `,` (default: context switches, page faults,
    /// instructions and cycles; the hardware events are dropped, and IPC/CPI
    /// shown as n/a, where the node has no PMU).
    #[arg(short = 'e', long = "events", value_name = "SETS")]
    pub events: Option<String>,
}

/// `hwqos record`'s flags.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Output recording (JSON lines).
    #[arg(
        short = 'o',
        long = "output",
        default_value = "hwqos.jsonl",
        value_name = "FILE"
    )]
    pub output: PathBuf,
    /// Also write the frames as CSV (one row per scope per tick).
    #[arg(long = "csv", value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Sampling rate in Hz.
    #[arg(short = 'F', long = "freq", default_value_t = 10.0, value_name = "HZ")]
    pub freq: f64,
    /// Event sets rotated each tick: sets separated by `;`, events by `,`.
    #[arg(short = 'e', long = "events", value_name = "SETS")]
    pub events: Option<String>,
    /// Stop after this many seconds (default: when the command or processes end, or on Ctrl-C).
    #[arg(long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,
    /// What to record.
    #[command(flatten)]
    pub target: TargetArgs,
}

/// `hwqos report`'s flags.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A recording written by `hwqos record` or hwqos-monitor (JSON lines).
    pub recording: PathBuf,
    /// One JSON object per scope and metric.
    #[arg(long)]
    pub json: bool,
}

/// `hwqos plot`'s flags.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// A recording written by `hwqos record` or hwqos-monitor (JSON lines).
    pub recording: PathBuf,
    /// The SVG file to write.
    #[arg(short = 'o', long = "output", value_name = "FILE.svg")]
    pub output: PathBuf,
    /// Only these metrics (repeatable; default: every metric in the recording).
    #[arg(long = "metric", value_name = "M")]
    pub metrics: Vec<String>,
    /// Only these scopes, e.g. `pid:42`, `cpu:0`, `system` (repeatable).
    #[arg(long = "scope", value_name = "S")]
    pub scopes: Vec<String>,
}

/// `hwqos diff`'s flags.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline recording (JSON lines from `hwqos record` or hwqos-monitor).
    #[arg(value_name = "A.jsonl")]
    pub a: PathBuf,
    /// The recording compared with the baseline.
    #[arg(value_name = "B.jsonl")]
    pub b: PathBuf,
    /// Confidence level of the intervals and verdicts, in (0, 1).
    #[arg(long, default_value_t = 0.95, value_name = "LEVEL")]
    pub confidence: f64,
    /// One JSON object (schema `hwqos.diff/1`) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write an SVG of the ranked relative changes with their intervals.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Release gate, repeatable: `METRIC>+N%` or `METRIC<-N%` (metric name or
    /// glob; without `%` the threshold is in the metric's unit). Exit 1 when a
    /// significant change passes a threshold.
    #[arg(long = "fail-on", value_name = "GATE")]
    pub fail_on: Vec<String>,
    /// Only these metrics (repeatable; name or glob such as `sw.*`).
    #[arg(long = "metric", value_name = "M")]
    pub metrics: Vec<String>,
    /// Only these scopes (repeatable): `pid:42`, `cpu:*`, a kind (`system`,
    /// `node`, `cpu`, `process`, …) or a process label (`comm`).
    #[arg(long = "scope", value_name = "S")]
    pub scopes: Vec<String>,
}

/// `hwqos probe`'s flags.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Probes to run, e.g. `memlat ctxswitch` (default: all of clock, syscall,
    /// ctxswitch, memlat, bandwidth, pagefault, net, timer).
    #[arg(value_name = "PROBE")]
    pub probes: Vec<String>,
    /// Scaled-down probes (fewer repeats, shorter sweeps, 0-10 ms timer requests).
    #[arg(long)]
    pub quick: bool,
    /// Only the static model (topology, caches, OS inventory): no probes.
    #[arg(long = "static", conflicts_with_all = ["quick", "plot"])]
    pub static_only: bool,
    /// Print the JSON hardware model instead of tables (to FILE with -o).
    #[arg(long)]
    pub json: bool,
    /// Write the JSON hardware model to FILE (atomically).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write an SVG of the memory-latency curve with its detected boundaries.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Show what differs between two hardware models (exit 0: same, 1: different).
    #[arg(
        long,
        num_args = 2,
        value_names = ["A.json", "B.json"],
        conflicts_with_all = ["probes", "quick", "static_only", "output", "plot"]
    )]
    pub diff: Option<Vec<PathBuf>>,
    /// With --diff: relative difference of measured figures that counts (0.1 = 10 %).
    #[arg(
        long,
        default_value_t = 0.10,
        value_name = "FRACTION",
        requires = "diff"
    )]
    pub tolerance: f64,
    /// Pin the probes to this CPU (default: the last CPU allowed).
    #[arg(long, value_name = "CPU")]
    pub cpu: Option<u32>,
    /// Batches per measured quantity (default 15, quick 5; memlat: 3, quick 2).
    #[arg(long, value_name = "N")]
    pub repeats: Option<usize>,
    /// Seed of the pointer chase and the timer requests.
    #[arg(long, default_value_t = hwqos_topology::probe::DEFAULT_SEED, value_name = "N")]
    pub seed: u64,
    /// Timer probe: sleep requests per strategy (default 40, quick 30; seed 003 used 1000).
    #[arg(long, value_name = "N")]
    pub timer_requests: Option<usize>,
    /// Timer probe: requests uniform in 0..MS milliseconds (default 100, quick 10).
    #[arg(long, value_name = "MS")]
    pub timer_max_ms: Option<f64>,
}

/// `hwqos api`'s flags: where the monitor is, and what to ask.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// The monitor's socket (`[api] socket` in its configuration).
    #[arg(
        short = 's',
        long,
        value_name = "PATH",
        env = "HWQOS_MONITOR_SOCKET",
        default_value = "/run/hwqos/monitor.sock"
    )]
    pub socket: PathBuf,
    /// Give up when the monitor sends nothing for SECS seconds (0: wait forever).
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub timeout: f64,
    /// Print the monitor's hello line (schema, node, version, rate) first.
    #[arg(long)]
    pub hello: bool,
    /// The request.
    #[command(subcommand)]
    pub request: ApiRequest,
}

/// `hwqos api`'s requests, one per live-API operation that only reads.
#[derive(Debug, Subcommand)]
pub enum ApiRequest {
    /// The monitor's state: one `{"type":"status",…}` line.
    Status,
    /// Recent frames from the monitor's database, oldest first, one
    /// `{"type":"frame",…}` line each, then `{"type":"end","count":N}`.
    Window {
        /// At most the N newest frames.
        #[arg(long, value_name = "N")]
        frames: Option<usize>,
        /// At most the frames of the last SECS seconds.
        #[arg(long, value_name = "SECS")]
        seconds: Option<f64>,
        /// Which scopes and metrics.
        #[command(flatten)]
        filter: ApiFilterArgs,
    },
    /// Frames as the monitor samples them, one `{"type":"frame",…}` line per
    /// tick, until --count frames (default: until the monitor stops or ^C).
    Subscribe {
        /// Stop after N frames.
        #[arg(long, value_name = "N")]
        count: Option<usize>,
        /// Which scopes and metrics.
        #[command(flatten)]
        filter: ApiFilterArgs,
    },
    /// The event sets being rotated and the events dropped as unavailable:
    /// one `{"type":"event_sets",…}` line.
    EventSets,
}

/// Frame filters of `hwqos api window` and `subscribe` (none: everything).
#[derive(Debug, Args, Clone, Default)]
pub struct ApiFilterArgs {
    /// Keep samples of these scopes (repeatable): exact (`pid:42`, `cpu:0`,
    /// `system`) or a prefix ending in `*` (`cpu:*`, `cgroup:/system.slice/*`).
    #[arg(long = "scope", value_name = "PAT")]
    pub scopes: Vec<String>,
    /// Keep samples of these metrics (repeatable): exact (`hw.instructions`)
    /// or a prefix ending in `*` (`hw.*`).
    #[arg(long = "metric", value_name = "PAT")]
    pub metrics: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn api_takes_a_socket_a_request_and_filters() {
        let cli = Cli::try_parse_from([
            "hwqos",
            "api",
            "--socket",
            "/tmp/m.sock",
            "window",
            "--frames",
            "5",
            "--scope",
            "pid:*",
            "--metric",
            "hw.*",
            "--metric",
            "derived.ipc",
        ])
        .unwrap();
        let Some(Command::Api(a)) = cli.command else {
            panic!("not api")
        };
        assert_eq!(a.socket, PathBuf::from("/tmp/m.sock"));
        let ApiRequest::Window { frames, filter, .. } = a.request else {
            panic!("not window")
        };
        assert_eq!(frames, Some(5));
        assert_eq!(filter.scopes, ["pid:*"]);
        assert_eq!(filter.metrics, ["hw.*", "derived.ipc"]);
        assert!(
            Cli::try_parse_from(["hwqos", "api"]).is_err(),
            "a request is required"
        );
        assert!(Cli::try_parse_from(["hwqos", "api", "set-event-sets"]).is_err());
    }

    #[test]
    fn stat_takes_the_command_after_double_dash() {
        let cli = Cli::try_parse_from([
            "hwqos",
            "stat",
            "-e",
            "task-clock",
            "-I",
            "100",
            "--",
            "ls",
            "-l",
        ])
        .unwrap();
        let Some(Command::Stat(a)) = cli.command else {
            panic!("not stat")
        };
        assert_eq!(a.target.command, ["ls", "-l"]);
        assert_eq!(a.interval_ms, Some(100));
        let Some(Command::Stat(b)) =
            Cli::try_parse_from(["hwqos", "stat", "-e", "page-faults", "ls", "-l", "--color"])
                .unwrap()
                .command
        else {
            panic!("not stat")
        };
        assert_eq!(b.target.command, ["ls", "-l", "--color"], "CMD without --");
        assert!(Cli::try_parse_from(["hwqos", "stat", "-p", "1", "-a"]).is_err());
        assert!(
            Cli::try_parse_from(["hwqos", "--list-events", "--json"])
                .unwrap()
                .list_events
        );
    }
}
