//! hwqos-loadgen: the thin command layer over [`hwqos_loadsynth`] — parsing,
//! progress bars, signals, systemd notification and exit codes.
//!
//! - [`cli`]: the clap definitions (public for man pages and completions);
//! - [`AgentConfig`]: the TOML configuration (safety caps, I/O settings, model);
//! - [`metrics`]: the OpenMetrics `/metrics` exposition;
//! - [`run`]: executes one command.

pub mod cli;
pub mod metrics;

use cli::{Cli, Command, LoopArgs};
use hwqos_loadsynth::actuate::{Actuators, CacheLevels};
use hwqos_loadsynth::config::{LoadConfig, SafetyCaps};
use hwqos_loadsynth::control::PairStatus;
use hwqos_loadsynth::generator::dcache;
use hwqos_loadsynth::generator::io::IoSettings;
use hwqos_loadsynth::knob::StopFlag;
use hwqos_loadsynth::model::LoadModel;
use hwqos_loadsynth::source::{LocalSource, MeasureOn, Measurement, MetricSource, MonitorSource};
use hwqos_loadsynth::synth::{self, SynthOptions};
use hwqos_loadsynth::targets::{self, LoadTargets, Target};
use hwqos_loadsynth::{LoadError, LoadMetric};
use hwqos_topology::HardwareModel;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// `[run]`: what the agent replays.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSection {
    pub model: Option<PathBuf>,
    pub dynamic: bool,
    /// Apply the model's knobs fixed instead of holding its targets.
    pub open_loop: bool,
    /// Replay a model made on a different CPU model anyway.
    pub force: bool,
}

/// The default `/metrics` address of `run` (synthesize and replay serve
/// only with `--metrics-listen`).
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9465";

/// `[metrics]`: the OpenMetrics endpoint of `run`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSection {
    /// Serve `/metrics` while `run` replays.
    pub enabled: bool,
    /// Address to listen on (loopback; the unit allows no other).
    pub listen: String,
}

impl Default for MetricsSection {
    fn default() -> MetricsSection {
        MetricsSection {
            enabled: true,
            listen: DEFAULT_METRICS_LISTEN.into(),
        }
    }
}

/// The agent's configuration file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub caps: SafetyCaps,
    pub io: IoSettings,
    pub tlb_huge_pages: bool,
    /// Nice value of the generator threads (see `LoadConfig::nice`).
    pub nice: Option<i32>,
    pub run: RunSection,
    pub metrics: MetricsSection,
}

impl AgentConfig {
    /// Reads and validates a TOML configuration.
    pub fn load(path: &Path) -> Result<AgentConfig, String> {
        // Regular files only, bounded: /dev/zero or a FIFO is refused at once.
        let text = hwqos_core::fs::read_text_bounded(path, 1 << 20)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let c: AgentConfig =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        c.caps
            .validate()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        c.metrics
            .listen
            .parse::<std::net::SocketAddr>()
            .map_err(|e| {
                format!(
                    "{}: [metrics] listen = \"{}\": {e} (expected IP:PORT, e.g. {DEFAULT_METRICS_LISTEN})",
                    path.display(),
                    c.metrics.listen
                )
            })?;
        Ok(c)
    }

    pub fn load_config(&self) -> LoadConfig {
        LoadConfig {
            caps: self.caps.clone(),
            io: self.io.clone(),
            tlb_huge_pages: self.tlb_huge_pages,
            nice: self.nice,
        }
    }
}

/// A failure and its exit code.
struct Failure(u8, String);

impl From<LoadError> for Failure {
    fn from(e: LoadError) -> Failure {
        let code = match &e {
            LoadError::BadFile { .. }
            | LoadError::WrongNode(_)
            | LoadError::Unsupported(_)
            | LoadError::Cap(_)
            | LoadError::Config(_) => 2,
            _ => 1,
        };
        Failure(code, e.to_string())
    }
}

fn usage(msg: impl Into<String>) -> Failure {
    Failure(2, msg.into())
}

/// SIGTERM and SIGINT, blocked in every thread from the start of [`run`]
/// (threads inherit the mask) and taken by one `sigwait` thread: no handler
/// and no polling (a polling thread would add context switches to what is
/// measured), and a signal that arrives during start-up stays pending.
fn stop_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set
}

/// Sets `stop` when SIGTERM or SIGINT arrives; generators see it within
/// their ~10 ms slice.
fn stop_on_signals(stop: &StopFlag) {
    let stop = stop.clone();
    std::thread::spawn(move || {
        if stop_signals().wait().is_ok() {
            stop.stop();
        }
    });
}

/// A source that ends with an error once stopped.
struct Stoppable<'a> {
    inner: Box<dyn MetricSource + 'a>,
    stop: StopFlag,
}

impl MetricSource for Stoppable<'_> {
    fn next(&mut self) -> Result<Measurement, LoadError> {
        if self.stop.is_stopped() {
            return Err(LoadError::Measure("stopped by signal".into()));
        }
        self.inner.next()
    }
}

/// Parses `--measure-processes` (`self` is this process).
fn measure_on(list: Option<&str>) -> Result<MeasureOn, Failure> {
    let Some(list) = list else {
        return Ok(MeasureOn::WholeCpu);
    };
    let pids =
        list.split(',')
            .map(|p| match p.trim() {
                "self" => Ok(std::process::id()),
                p => p.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    usage(format!("--measure-processes: `{p}` is not a PID or `self`"))
                }),
            })
            .collect::<Result<Vec<u32>, Failure>>()?;
    Ok(MeasureOn::Processes(pids))
}

fn open_source(
    wanted: &[(LoadMetric, u32)],
    period: Duration,
    monitor: Option<&Path>,
    on: MeasureOn,
) -> Result<Box<dyn MetricSource>, LoadError> {
    Ok(match monitor {
        Some(sock) => Box::new(MonitorSource::connect(sock, wanted)?),
        None => Box::new(LocalSource::measuring(wanted, period, on)?),
    })
}

fn fmt_value(m: LoadMetric, v: f64) -> String {
    match m {
        LoadMetric::CpuUtil => format!("{:.2}%", v * 100.0),
        m if m.max_value().is_some() => format!("{v:.4}"),
        _ => format!("{v:.1}"),
    }
}

/// One progress bar per pair (hidden when stderr is not a terminal).
struct Bars {
    _multi: MultiProgress,
    bars: Vec<ProgressBar>,
}

impl Bars {
    fn new(n: usize, total: u64) -> Bars {
        let multi = MultiProgress::new();
        let style = ProgressStyle::with_template("{prefix:>24} [{bar:30}] {msg}")
            .expect("static template")
            .progress_chars("=> ");
        let bars = (0..n)
            .map(|_| {
                let b = multi.add(ProgressBar::new(total));
                b.set_style(style.clone());
                b
            })
            .collect();
        Bars {
            _multi: multi,
            bars,
        }
    }

    fn update(&self, status: &[PairStatus], pos: u64) {
        for (b, s) in self.bars.iter().zip(status) {
            b.set_prefix(format!("{}@{}", s.metric, s.cpu));
            b.set_position(pos);
            let err = s.measured.map(|m| {
                if s.target != 0.0 {
                    format!("{:+.1}%", 100.0 * (m - s.target) / s.target)
                } else {
                    format!("{:+.4}", m - s.target)
                }
            });
            b.set_message(format!(
                "target {} measured {} error {} knob {:.4}{}",
                fmt_value(s.metric, s.target),
                s.measured.map_or("-".into(), |m| fmt_value(s.metric, m)),
                err.unwrap_or_else(|| "-".into()),
                s.knob,
                if s.within { " ✓" } else { "" }
            ));
        }
    }

    fn finish(&self) {
        for b in &self.bars {
            b.finish();
        }
    }
}

/// Splits `METRIC@CPU=VALUE` into the metric, the CPU and the value text.
fn parse_pair(s: &str) -> Result<(LoadMetric, u32, &str), String> {
    let (lhs, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected METRIC@CPU=VALUE"))?;
    let (metric, cpu) = lhs
        .split_once('@')
        .ok_or_else(|| format!("`{s}`: expected METRIC@CPU=VALUE"))?;
    let metric: LoadMetric = metric.parse()?;
    let cpu: u32 = cpu.parse().map_err(|_| format!("`{s}`: bad CPU `{cpu}`"))?;
    Ok((metric, cpu, value))
}

fn parse_target(s: &str) -> Result<Target, String> {
    let (metric, cpu, value) = parse_pair(s)?;
    let mean: f64 = value
        .parse()
        .map_err(|_| format!("`{s}`: bad value `{value}`"))?;
    metric.validate(mean)?;
    Ok(Target {
        metric,
        cpu,
        mean,
        stddev: 0.0,
        series: Vec::new(),
    })
}

/// `METRIC@CPU=VALUE` as a knob setting (value in the generator's knob unit).
fn parse_knob(s: &str) -> Result<((LoadMetric, u32), f64), String> {
    let (metric, cpu, value) = parse_pair(s)?;
    let v: f64 = value
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("`{s}`: bad knob value `{value}`"))?;
    Ok(((metric, cpu), v))
}

/// Every pair's CPU must be online here.
fn check_cpus(
    pairs: &[((LoadMetric, u32), f64)],
    topology: &hwqos_topology::Topology,
) -> Result<(), Failure> {
    let online = topology.online_cpus();
    match pairs.iter().find(|((_, cpu), _)| !online.contains(cpu)) {
        Some(((m, cpu), _)) => Err(usage(format!(
            "{m} targets CPU {cpu}, which is not online on this node (online: {online:?})"
        ))),
        None => Ok(()),
    }
}

/// Starts `/metrics` on `addr` when given; prints the bound address on
/// stderr (`metrics on ADDR`) so a caller that asked for port 0 finds it.
fn start_metrics(
    addr: Option<&str>,
    mode: &str,
    file: &Path,
) -> Result<(metrics::SharedSnapshot, Option<metrics::MetricsServer>), Failure> {
    let snapshot = std::sync::Arc::new(std::sync::Mutex::new(metrics::Snapshot::new(
        mode,
        &file.display().to_string(),
    )));
    let server = match addr {
        Some(a) => {
            // Exit 1, not 2: a port in use may be free after a restart.
            let srv =
                metrics::MetricsServer::start(a, snapshot.clone()).map_err(|e| Failure(1, e))?;
            eprintln!("metrics on {}", srv.local_addr());
            Some(srv)
        }
        None => None,
    };
    Ok((snapshot, server))
}

fn lock(s: &metrics::SharedSnapshot) -> std::sync::MutexGuard<'_, metrics::Snapshot> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Consecutive in-tolerance intervals after which a replayed pair counts as
/// converged on `/metrics` (synthesize's `--needed` default).
const REPLAY_NEEDED: u32 = 8;

fn this_node() -> Result<HardwareModel, Failure> {
    HardwareModel::this_node()
        .map_err(|e| Failure(1, format!("reading this node's hardware model: {e}")))
}

/// Executes one command; returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    if let Err(e) = stop_signals().thread_block() {
        eprintln!("hwqos-loadgen: blocking SIGTERM/SIGINT: {e}");
        return ExitCode::from(1);
    }
    let config = match &cli.config {
        Some(p) => match AgentConfig::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("hwqos-loadgen: {e}");
                return ExitCode::from(2);
            }
        },
        None => AgentConfig::default(),
    };
    match execute(cli.command, &config, cli.config.as_deref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, msg)) => {
            eprintln!("hwqos-loadgen: {msg}");
            ExitCode::from(code)
        }
    }
}

fn execute(cmd: Command, config: &AgentConfig, config_path: Option<&Path>) -> Result<(), Failure> {
    let cfg = config.load_config();
    match cmd {
        Command::CheckConfig => {
            // The agent's model must exist and load: the unit runs this
            // before `run` (exit 2 stops systemd from restarting it).
            if let Some(m) = &config.run.model {
                LoadModel::load(m).map_err(|e| {
                    usage(format!(
                        "{}: [run] model = \"{}\": {e} (make one with `hwqos-loadgen synthesize TARGETS -o {}`)",
                        config_path.map_or("(configuration)".into(), |p| p.display().to_string()),
                        m.display(),
                        m.display()
                    ))
                })?;
            }
            println!(
                "{}: ok",
                config_path.map_or("(default configuration)".into(), |p| p
                    .display()
                    .to_string())
            );
            Ok(())
        }
        Command::Capture {
            recording,
            output,
            hardware_model,
            metrics,
            cpus,
            processes_as_cpu,
        } => {
            let rec = hwqos_core::recording::read_recording(&recording)
                .map_err(|e| usage(format!("{}: {e}", recording.display())))?;
            let hw = match hardware_model {
                Some(p) => {
                    HardwareModel::load(&p).map_err(|e| usage(format!("{}: {e}", p.display())))?
                }
                None => this_node()?,
            };
            let metrics: Vec<LoadMetric> = metrics
                .iter()
                .map(|m| m.parse::<LoadMetric>())
                .collect::<Result<_, _>>()
                .map_err(usage)?;
            let mut t = targets::capture(
                &rec,
                &recording.display().to_string(),
                Some(hw),
                processes_as_cpu,
            )?;
            t.filter(&metrics, (!cpus.is_empty()).then_some(&cpus[..]));
            if t.targets.is_empty() {
                return Err(usage("no targets left after --metric/--cpu"));
            }
            for x in &t.targets {
                println!(
                    "{:>22}@{:<3} mean {} (sd {}, {} samples)",
                    x.metric.name(),
                    x.cpu,
                    fmt_value(x.metric, x.mean),
                    fmt_value(x.metric, x.stddev),
                    x.series.len()
                );
            }
            t.save(&output)?;
            Ok(())
        }
        Command::Targets { targets, output } => {
            let list: Vec<Target> = targets
                .iter()
                .map(|s| parse_target(s))
                .collect::<Result<_, _>>()
                .map_err(usage)?;
            let t = LoadTargets::new(list);
            t.validate().map_err(usage)?;
            t.save(&output)?;
            Ok(())
        }
        Command::Synthesize {
            targets,
            output,
            loop_args,
        } => synthesize(&targets, &output, &loop_args, &cfg),
        Command::Replay {
            model,
            duration,
            verify,
            dynamic,
            open_loop,
            force,
            json,
            period_ms,
            measure_processes,
            metrics_listen,
        } => {
            let on = measure_processes
                .as_deref()
                .map(|p| measure_on(Some(p)))
                .transpose()?;
            let opts = ReplayArgs {
                duration,
                verify,
                dynamic,
                open_loop,
                force,
                json,
                period_ms,
                on,
                metrics_listen,
            };
            replay(&model, &opts, &cfg, false)
        }
        Command::Run {
            model,
            dynamic,
            metrics_listen,
        } => {
            let model = model.or_else(|| config.run.model.clone()).ok_or_else(|| {
                usage(format!(
                    "no model to replay: set [run] model in {} or give one as an argument \
                     (make one with `hwqos-loadgen synthesize TARGETS -o FILE`; docs/loadgen.md)",
                    config_path.map_or("the configuration".into(), |p| p.display().to_string())
                ))
            })?;
            let notify = sd_notify::notify;
            let _ = notify(&[sd_notify::NotifyState::Status("loading model")]);
            let opts = ReplayArgs {
                duration: None,
                verify: false,
                dynamic: dynamic || config.run.dynamic,
                open_loop: config.run.open_loop,
                force: config.run.force,
                json: false,
                period_ms: 250,
                on: None,
                metrics_listen: metrics_listen.or_else(|| {
                    config
                        .metrics
                        .enabled
                        .then(|| config.metrics.listen.clone())
                }),
            };
            replay(&model, &opts, &cfg, true)
        }
        Command::Generate { knobs, duration } => {
            let pairs: Vec<((LoadMetric, u32), f64)> = knobs
                .iter()
                .map(|k| parse_knob(k).map_err(usage))
                .collect::<Result<_, _>>()?;
            for (k, ((m, _), v)) in knobs.iter().zip(&pairs) {
                hwqos_loadsynth::actuate::check_knob(*m, *v, &cfg)
                    .map_err(|e| usage(format!("--knob `{k}`: {e}")))?;
            }
            let topology = hwqos_topology::Topology::this_node()
                .map_err(|e| Failure(1, format!("reading this node's topology: {e}")))?;
            check_cpus(&pairs, &topology)?;
            let act = synth::actuators_for(&pairs, &topology, &cfg)?;
            let stop = act.stop_flag();
            stop_on_signals(&stop);
            let end =
                duration.map(|d| std::time::Instant::now() + Duration::from_secs_f64(d.max(0.0)));
            while !stop.is_stopped() && end.is_none_or(|e| std::time::Instant::now() < e) {
                std::thread::sleep(Duration::from_millis(20));
                if !act.finished().is_empty() {
                    break;
                }
            }
            act.stop()?;
            Ok(())
        }
        Command::GenDcache {
            levels,
            ratios,
            reads,
        } => {
            let geoms: Vec<dcache::Geometry> = levels
                .iter()
                .map(|l| dcache::Geometry::parse(l))
                .collect::<Result<_, _>>()
                .map_err(usage)?;
            let ratios: Vec<f64> = ratios
                .split(',')
                .map(|r| {
                    r.trim()
                        .parse::<f64>()
                        .map_err(|_| format!("bad ratio `{r}`"))
                })
                .collect::<Result<_, _>>()
                .map_err(usage)?;
            let plan = dcache::Plan::new(&geoms).map_err(usage)?;
            let f = plan.fractions_for(&ratios).map_err(usage)?;
            let mut buf = dcache::Buffer::new(plan)
                .map_err(|e| Failure(1, format!("mapping the buffer: {e}")))?;
            let sum = buf.read(&f, reads);
            println!("reads {reads} fractions {f:?} checksum {sum}");
            Ok(())
        }
    }
}

fn synthesize(
    targets_path: &Path,
    output: &Path,
    a: &LoopArgs,
    cfg: &LoadConfig,
) -> Result<(), Failure> {
    let t = LoadTargets::load(targets_path)?;
    if t.targets.is_empty() {
        return Err(usage(format!("{}: no targets", targets_path.display())));
    }
    let node = this_node()?;
    if let Some(hw) = &t.hardware {
        if hw.cpu_model != node.cpu_model {
            tracing::warn!(
                "the targets come from CPU `{}`, this node is `{}`: ratios transfer, rates may not be reachable",
                hw.cpu_model.as_deref().unwrap_or("?"),
                node.cpu_model.as_deref().unwrap_or("?")
            );
        }
    }
    let pairs: Vec<((LoadMetric, u32), f64)> = t
        .targets
        .iter()
        .map(|x| ((x.metric, x.cpu), synth::initial_knob(&t, x.metric, x.cpu)))
        .collect();
    check_cpus(&pairs, &node.topology)?;
    let wanted: Vec<(LoadMetric, u32)> = pairs.iter().map(|p| p.0).collect();
    let period = Duration::from_millis(a.period_ms.max(10));
    let on = measure_on(a.measure_processes.as_deref())?;
    let scope = match &on {
        MeasureOn::WholeCpu => hwqos_loadsynth::model::ModelScope::WholeCpu,
        MeasureOn::Processes(p) => hwqos_loadsynth::model::ModelScope::Processes {
            this_process: p.contains(&std::process::id()),
            others: p
                .iter()
                .copied()
                .filter(|x| *x != std::process::id())
                .collect(),
        },
    };
    // Generators first, then the source: replay opens them in this order too,
    // so both count the generator threads the same way.
    let mut act = synth::actuators_for(&pairs, &node.topology, cfg)?;
    let source = open_source(&wanted, period, a.monitor_socket.as_deref(), on)?;
    let stop = act.stop_flag();
    stop_on_signals(&stop);
    let (snapshot, _server) =
        start_metrics(a.metrics_listen.as_deref(), "synthesize", targets_path)?;
    let loop_start = std::time::Instant::now();
    let mut src = Stoppable {
        inner: source,
        stop: stop.clone(),
    };
    let opts = SynthOptions {
        period,
        needed: a.needed.max(1),
        timeout: Duration::from_secs_f64(a.timeout.max(0.1)),
        hold: a.hold,
    };
    let total = (opts.timeout.as_secs_f64() / period.as_secs_f64()) as u64;
    let bars = Bars::new(t.targets.len(), total);
    let ranges = {
        let r: std::collections::BTreeMap<(LoadMetric, u32), (f64, f64)> = wanted
            .iter()
            .filter_map(|k| act.range(k.0, k.1).map(|r| (*k, r)))
            .collect();
        move |m: LoadMetric, c: u32| r.get(&(m, c)).copied().unwrap_or((0.0, 1.0))
    };
    let needed = opts.needed;
    let result = synth::synthesize(&t, node, &mut src, &mut act, &ranges, &opts, &mut |s, n| {
        bars.update(s, n);
        let mut snap = lock(&snapshot);
        let elapsed = loop_start.elapsed().as_secs_f64();
        for p in s {
            snap.update_pair(
                p.metric.name(),
                p.cpu,
                p.target,
                p.measured,
                p.knob,
                p.measured.map(|_| p.within),
                needed,
                elapsed,
            );
        }
        snap.samples = n;
    });
    bars.finish();
    let stopped = act.stop();
    let mut model = result?;
    stopped?;
    model.measured_on = scope;
    println!(
        "converged in {:.1} s ({} samples of {} ms)",
        model.convergence_s, model.samples, a.period_ms
    );
    for e in &model.entries {
        println!(
            "{:>22}@{:<3} target {} measured {} knob {:.5}",
            e.metric.name(),
            e.cpu,
            fmt_value(e.metric, e.target),
            e.measured.map_or("-".into(), |m| fmt_value(e.metric, m)),
            e.knob
        );
    }
    model.save(output)?;
    Ok(())
}

struct ReplayArgs {
    duration: Option<f64>,
    verify: bool,
    dynamic: bool,
    open_loop: bool,
    force: bool,
    json: bool,
    period_ms: u64,
    /// What to measure; `None`: what the model was synthesized on.
    on: Option<MeasureOn>,
    metrics_listen: Option<String>,
}

/// What a replay measures: `--measure-processes` if given, else the model's
/// own scope (`self` for a model made on processes: the PIDs of that time
/// are gone, and are named in a warning).
fn replay_scope(model: &LoadModel, given: Option<&MeasureOn>) -> MeasureOn {
    use hwqos_loadsynth::model::ModelScope;
    if let Some(on) = given {
        return on.clone();
    }
    match &model.measured_on {
        ModelScope::WholeCpu => MeasureOn::WholeCpu,
        ModelScope::Processes {
            this_process,
            others,
        } => {
            if !others.is_empty() {
                tracing::warn!(
                    "the model was synthesized measuring this process and PIDs {others:?}; \
                     replay measures only this process (list the others with --measure-processes self,PID…)"
                );
            }
            if !this_process {
                tracing::warn!("the model was synthesized without `self` in --measure-processes; measuring this process");
            }
            MeasureOn::Processes(vec![std::process::id()])
        }
    }
}

fn describe_scope(on: &MeasureOn) -> String {
    match on {
        MeasureOn::WholeCpu => "the whole CPU".into(),
        MeasureOn::Processes(p) if p == &[std::process::id()] => "this process".into(),
        MeasureOn::Processes(p) => format!("processes {p:?}"),
    }
}

fn replay(model_path: &Path, a: &ReplayArgs, cfg: &LoadConfig, agent: bool) -> Result<(), Failure> {
    let ReplayArgs {
        duration,
        verify,
        dynamic,
        open_loop,
        force,
        json,
        period_ms,
        ..
    } = *a;
    let model = LoadModel::load(model_path)?;
    let node = this_node()?;
    match model.check_node(&node) {
        Ok(warnings) => {
            for w in warnings {
                tracing::warn!("this node differs from the model's: {w}");
            }
        }
        Err(e) if force => tracing::warn!("{e} (replaying anyway: --force)"),
        Err(e) => return Err(e.into()),
    }
    let pairs: Vec<((LoadMetric, u32), f64)> = model
        .entries
        .iter()
        .map(|e| ((e.metric, e.cpu), e.knob))
        .collect();
    check_cpus(&pairs, &node.topology)?;
    let wanted: Vec<(LoadMetric, u32)> = pairs.iter().map(|p| p.0).collect();
    let cpu = wanted.first().map_or(0, |w| w.1);
    let mut act = Actuators::start(&pairs, &CacheLevels::of(&node.topology, cpu), cfg)?;
    let stop = act.stop_flag();
    stop_on_signals(&stop);
    let mode = if agent { "run" } else { "replay" };
    let (snapshot, server) = start_metrics(a.metrics_listen.as_deref(), mode, model_path)?;
    // Closed loop (the default) measures all along; open loop only for
    // --verify or /metrics. A measurement that cannot start is fatal for
    // --verify and a closed-loop replay (exit 1, naming --open-loop), a
    // warning for the agent (it replays the knobs open loop) and /metrics.
    let on = replay_scope(&model, a.on.as_ref());
    let measure = || {
        LocalSource::measuring(
            &wanted,
            Duration::from_millis(period_ms.max(10)),
            on.clone(),
        )
    };
    let mut mode = if open_loop {
        synth::ReplayMode::OpenLoop
    } else {
        synth::ReplayMode::ClosedLoop
    };
    let mut source = if verify || (mode == synth::ReplayMode::ClosedLoop && !agent) {
        Some(measure().map_err(|e| {
            Failure(
                1,
                format!(
                    "measuring {} to hold the targets: {e} (--open-loop replays the knobs without measuring)",
                    describe_scope(&on)
                ),
            )
        })?)
    } else if server.is_some() || mode == synth::ReplayMode::ClosedLoop {
        match measure() {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(
                    "measuring {}: {e}; replaying the model's knobs open loop",
                    describe_scope(&on)
                );
                None
            }
        }
    } else {
        None
    };
    if source.is_none() {
        mode = synth::ReplayMode::OpenLoop;
    }
    eprintln!(
        "replaying {}: {}, measuring {}",
        model_path.display(),
        match (mode, source.is_some()) {
            (synth::ReplayMode::ClosedLoop, _) => "targets held in closed loop",
            (synth::ReplayMode::OpenLoop, _) => "knobs fixed (open loop)",
        },
        if source.is_some() {
            describe_scope(&on)
        } else {
            "nothing".into()
        }
    );
    let knob_handles: Vec<Option<hwqos_loadsynth::knob::Knob>> = model
        .entries
        .iter()
        .map(|e| act.knob(e.metric, e.cpu).cloned())
        .collect();
    {
        let mut snap = lock(&snapshot);
        for e in &model.entries {
            snap.update_pair(
                e.metric.name(),
                e.cpu,
                e.target,
                None,
                e.knob,
                None,
                REPLAY_NEEDED,
                0.0,
            );
        }
    }
    let watchdog = sd_notify::watchdog_enabled().filter(|d| !d.is_zero());
    if agent {
        let _ = sd_notify::notify(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(&format!(
                "replaying {} ({} pairs)",
                model_path.display(),
                model.entries.len()
            )),
        ]);
    }
    let mut last_ping = std::time::Instant::now();
    let d = Duration::from_secs_f64(duration.unwrap_or(f64::MAX / 4.0).clamp(0.0, 1e12));
    let bar = ProgressBar::new(duration.map_or(0, |d| d as u64));
    let result = synth::replay(
        &model,
        &mut act,
        source.as_mut().map(|s| s as &mut dyn MetricSource),
        d,
        dynamic,
        mode,
        2,
        &mut |t: f64, values: &synth::Values| {
            bar.set_position(t as u64);
            let msg: Vec<String> = values
                .iter()
                .map(|((m, c), v)| {
                    let target = model
                        .entries
                        .iter()
                        .find(|e| e.metric == *m && e.cpu == *c)
                        .map(|e| e.target)
                        .filter(|t| *t != 0.0);
                    match target {
                        Some(t) => format!(
                            "{m}@{c} {} ({:+.1}%)",
                            fmt_value(*m, *v),
                            100.0 * (v - t) / t
                        ),
                        None => format!("{m}@{c} {}", fmt_value(*m, *v)),
                    }
                })
                .collect();
            bar.set_message(msg.join("  "));
            {
                let mut snap = lock(&snapshot);
                for (e, k) in model.entries.iter().zip(&knob_handles) {
                    let measured = values.get(&(e.metric, e.cpu)).copied();
                    let knob = k.as_ref().map_or(e.knob, |k| k.get());
                    snap.update_pair(
                        e.metric.name(),
                        e.cpu,
                        e.target,
                        measured,
                        knob,
                        measured.map(|m| {
                            hwqos_loadsynth::control::within(e.metric, e.tolerance, e.target, m)
                        }),
                        REPLAY_NEEDED,
                        t,
                    );
                }
                if !values.is_empty() {
                    snap.samples += 1;
                }
            }
            if let Some(w) = watchdog {
                if last_ping.elapsed() >= w / 2 {
                    let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                    last_ping = std::time::Instant::now();
                }
            }
        },
    );
    bar.finish_and_clear();
    if agent {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    }
    let took = act.stop()?;
    tracing::debug!("generators stopped in {took:?}");
    let deviations = result?;
    if verify {
        eprintln!(
            "measured {} ({})",
            describe_scope(&on),
            if mode == synth::ReplayMode::ClosedLoop {
                "closed loop"
            } else {
                "open loop"
            }
        );
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(&deviations).expect("serializes")
            );
        } else {
            for d in &deviations {
                println!(
                    "{:>22}@{:<3} target {} measured {} deviation {:+.2}% ({} samples)",
                    d.metric.name(),
                    d.cpu,
                    fmt_value(d.metric, d.target),
                    fmt_value(d.metric, d.measured),
                    d.relative * 100.0,
                    d.samples
                );
            }
        }
    }
    Ok(())
}
