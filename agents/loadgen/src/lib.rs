//! The load generator agent's library: the command layer over
//! [`hwqos_loadsynth::workflow`] for the capture → synthesize → replay
//! workflow (thesis 6.2.1: capture a production node's hardware usage,
//! synthesize it on a test node with feedback control, replay it). What each
//! command does lives in `hwqos-loadsynth`; here are the configuration file,
//! the signal thread, the progress bars, the `/metrics` exposition, systemd
//! notification and exit statuses. The binary's `main.rs` is thin glue: it
//! parses [`cli::Cli`] and hands it to [`run`], whose lifecycle is
//! `hwqos-agent`'s.
//!
//! - [`cli`]: the clap definitions (public for man pages and completions);
//! - [`AgentConfig`]: the TOML configuration (safety caps, I/O settings,
//!   huge pages, nice value, [`RunSection`] for the agent's model,
//!   [`MetricsSection`]; `deploy/config/loadgen.toml` explains each key);
//! - [`metrics`]: the OpenMetrics `/metrics` exposition (`hwqos_loadgen_*`);
//! - [`run`]: executes one command and returns the exit status.
//!
//! The lifecycle is [`hwqos_agent::lifecycle`]'s: exit status 0 (SIGTERM
//! included), 1 runtime failure, 2 bad input; configuration errors name
//! file, line and key; `run` notifies READY/STATUS/STOPPING and feeds the
//! watchdog from its replay loop ([`Heartbeat`]).
//!
//! **Stopping — the one way.** [`run`] starts with
//! `hwqos_agent::lifecycle::StopSignals::install` (as hwqos-sra does): SIGTERM,
//! SIGINT and SIGHUP are blocked before any other thread exists (every thread
//! inherits the mask) and one thread takes them with `sigwait` and sets the
//! run's [`StopFlag`], which the generators check every ~10 ms slice. There is
//! no handler, so no generator or measurement syscall is interrupted (EINTR),
//! nothing polls (which would add context switches to what is measured), and
//! a signal that arrives during start-up stays pending until the flag exists.
//! SIGHUP is taken and ignored (loadgen has nothing to reload).

#![deny(missing_docs)]

pub mod cli;
pub mod metrics;

use anyhow::Context as _;
use cli::{Cli, Command, LoopArgs};
use hwqos_agent::lifecycle::{bad_input, ConfigError, Heartbeat, ServiceManager, StopSignals};
use hwqos_agent::watched::{Limits, WatchedDir, WatchedFiles};
use hwqos_loadsynth::config::{LoadConfig, SafetyCaps};
use hwqos_loadsynth::control::PairStatus;
use hwqos_loadsynth::gate;
use hwqos_loadsynth::generator::dcache;
use hwqos_loadsynth::generator::io::IoSettings;
use hwqos_loadsynth::knob::StopFlag;
use hwqos_loadsynth::model::LoadModel;
use hwqos_loadsynth::source::MeasureOn;
use hwqos_loadsynth::synth::{ReplayMode, SynthOptions};
use hwqos_loadsynth::targets::LoadTargets;
use hwqos_loadsynth::workflow::{self, replay::Measuring, Observer, ReplayStart, ReplayedPair};
use hwqos_loadsynth::{LoadError, LoadMetric};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The program name in messages.
const AGENT: &str = "hwqos-loadgen";

/// `[run]`: what the agent replays.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSection {
    /// The model (`hwqos.loadmodel/1`, written by `synthesize`) that `run`
    /// replays when its command line names none. No default: until it is
    /// set, `check-config` and `run` exit 2 naming `[run] model`.
    pub model: Option<PathBuf>,
    /// A directory of models distributed by a configuration tool (instead
    /// of `model`): `run` replays the valid model of highest `version`
    /// there, switches when a better one arrives (inotify) and keeps the one
    /// replaying when a new file is invalid (`hwqos_core::watch_dir`'s rule;
    /// `hwqos-loadgen validate-dir DIR` checks one).
    pub model_dir: Option<PathBuf>,
    /// Replay the model's recorded time series, not just its means (default
    /// off).
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
    /// `[caps]`: hard limits no model, controller or knob can exceed (memory
    /// of all generators, CPU share, I/O bytes and rate, fault, switch and
    /// memory-bandwidth rates); a model needing more memory is refused
    /// before anything starts, every knob is clamped to its cap.
    pub caps: SafetyCaps,
    /// `[io]`: the file I/O generator (directory, block and file size,
    /// access pattern, sync mode); its file is removed on stop.
    pub io: IoSettings,
    /// Use 2 MiB transparent huge pages for the DTLB generator (default off).
    pub tlb_huge_pages: bool,
    /// Nice value of the generator threads (see `LoadConfig::nice`).
    pub nice: Option<i32>,
    /// `[run]`: what the `run` command (the systemd service) replays.
    pub run: RunSection,
    /// `[metrics]`: the `/metrics` endpoint of `run`.
    pub metrics: MetricsSection,
}

impl AgentConfig {
    /// Reads and validates a TOML configuration; a mistake is a
    /// [`ConfigError`] naming file, line and key.
    pub fn load(path: &Path) -> Result<AgentConfig, ConfigError> {
        let (c, text): (AgentConfig, String) = hwqos_agent::lifecycle::load_toml(path)?;
        c.load_config()
            .validate()
            .map_err(|e| ConfigError::invalid(path, &text, &e.key, e.expected))?;
        if let Err(e) = c.metrics.listen.parse::<std::net::SocketAddr>() {
            return Err(ConfigError::invalid(
                path,
                &text,
                "metrics.listen",
                format!(
                    "expected IP:PORT (e.g. {DEFAULT_METRICS_LISTEN}), found \"{}\": {e}",
                    c.metrics.listen
                ),
            ));
        }
        Ok(c)
    }

    /// The generators' part of the configuration.
    pub fn load_config(&self) -> LoadConfig {
        LoadConfig {
            caps: self.caps.clone(),
            io: self.io.clone(),
            tlb_huge_pages: self.tlb_huge_pages,
            nice: self.nice,
        }
    }
}

/// A library error as the agent reports it: bad input (exit 2) or a
/// runtime failure (exit 1).
fn failed(e: LoadError) -> anyhow::Error {
    if e.is_bad_input() {
        bad_input(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

/// Executes one command; returns the process exit status.
pub fn run(cli: Cli) -> ExitCode {
    let signals = match StopSignals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{AGENT}: taking SIGTERM/SIGINT/SIGHUP: {e}");
            return ExitCode::from(hwqos_agent::lifecycle::EXIT_RUNTIME);
        }
    };
    let stop = StopFlag::from_atomic(signals.stop_flag());
    let result = match &cli.config {
        Some(p) => AgentConfig::load(p).map_err(anyhow::Error::new),
        None => Ok(AgentConfig::default()),
    }
    .and_then(|config| execute(cli.command, &config, cli.config.as_deref(), &stop));
    if let Err(e) = &result {
        if let Some(r) = e.downcast_ref::<Regression>() {
            eprintln!("{AGENT}: {r}");
            return ExitCode::from(EXIT_REGRESSION);
        }
    }
    hwqos_agent::lifecycle::finish(AGENT, result)
}

/// Exit status of `gate --fail-on-regression PCT` when the loaded
/// regression is significant and exceeds PCT.
pub const EXIT_REGRESSION: u8 = 3;

/// The gate failed: a significant loaded regression above the limit.
#[derive(Debug)]
struct Regression {
    estimate: f64,
    low: f64,
    high: f64,
    limit: f64,
}

impl std::fmt::Display for Regression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "gate failed: the candidate regresses by {:+.2}% under load (95% interval {:+.2}% .. {:+.2}%), more than --fail-on-regression {}%",
            self.estimate, self.low, self.high, self.limit
        )
    }
}

impl std::error::Error for Regression {}

fn parse_measure_on(list: Option<&str>) -> anyhow::Result<Option<MeasureOn>> {
    list.map(|l| {
        workflow::scope::parse_processes(l)
            .map_err(|e| bad_input(format!("--measure-processes: {e}")))
    })
    .transpose()
}

fn execute(
    cmd: Command,
    config: &AgentConfig,
    config_path: Option<&Path>,
    stop: &StopFlag,
) -> anyhow::Result<()> {
    let cfg = config.load_config();
    let config_name =
        || config_path.map_or("the configuration".into(), |p| p.display().to_string());
    match cmd {
        Command::CheckConfig => {
            if config.run.model.is_some() && config.run.model_dir.is_some() {
                return Err(bad_input(format!(
                    "{}: [run] model and [run] model_dir are both set; keep one",
                    config_name()
                )));
            }
            // The agent's model must exist and load: the unit runs this
            // before `run` (exit 2 stops systemd from restarting it). A
            // model directory may still be empty: `run` waits for a model.
            if let Some(m) = &config.run.model {
                LoadModel::load(m).map_err(|e| {
                    bad_input(format!(
                        "{}: [run] model = \"{}\": {e} (make one with `hwqos-loadgen synthesize TARGETS -o {}`)",
                        config_name(),
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
            let metrics = metrics
                .iter()
                .map(|m| m.parse::<LoadMetric>())
                .collect::<Result<_, _>>()
                .map_err(bad_input)?;
            let opts = workflow::capture::CaptureOptions {
                hardware_model,
                metrics,
                cpus,
                processes_as_cpu,
            };
            let t = workflow::capture::capture(&recording, &opts).map_err(failed)?;
            for x in &t.targets {
                println!(
                    "{:>22}@{:<3} mean {} (sd {}, {} samples)",
                    x.metric.name(),
                    x.cpu,
                    x.metric.format_value(x.mean),
                    x.metric.format_value(x.stddev),
                    x.series.len()
                );
            }
            t.save(&output).map_err(failed)
        }
        Command::Targets { targets, output } => workflow::pairs::targets_from_pairs(&targets)
            .and_then(|t| t.save(&output))
            .map_err(failed),
        Command::Synthesize {
            targets,
            output,
            loop_args,
        } => synthesize(&targets, &output, &loop_args, &cfg, stop),
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
            let args = ReplayArgs {
                duration,
                verify,
                dynamic,
                open_loop,
                force,
                json,
                period_ms,
                on: parse_measure_on(measure_processes.as_deref())?,
                metrics_listen,
            };
            replay(&model, &args, &cfg, stop, None)
        }
        Command::Run {
            model,
            dynamic,
            metrics_listen,
        } => {
            let model = model.or_else(|| config.run.model.clone());
            if model.is_none() && config.run.model_dir.is_none() {
                return Err(bad_input(format!(
                    "no model to replay: set [run] model or [run] model_dir in {} or give one \
                     as an argument (make one with `hwqos-loadgen synthesize TARGETS -o FILE`; \
                     docs/loadgen.md)",
                    config_name()
                )));
            }
            let service = ServiceManager::from_env();
            service.status("loading model");
            let args = ReplayArgs {
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
            match (model, &config.run.model_dir) {
                (Some(model), _) => replay(&model, &args, &cfg, stop, Some(service)),
                (None, Some(dir)) => {
                    run_model_dir(dir, config.run.force, &args, &cfg, stop, service)
                }
                (None, None) => unreachable!("checked above"),
            }
        }
        Command::ValidateDir { dir, force } => {
            let scan = model_dir(&dir, force || config.run.force)?
                .rescan()
                .map_err(|e| bad_input(format!("model directory {}: {e}", dir.display())))?;
            let (report, failure) =
                hwqos_agent::watched::report(&scan, &dir, "load model", "replay");
            print!("{report}");
            failure.map_or(Ok(()), |f| Err(bad_input(f)))
        }
        Command::Generate { knobs, duration } => {
            let mut pairs = Vec::new();
            for k in &knobs {
                let pair = workflow::pairs::parse_knob(k).map_err(failed)?;
                hwqos_loadsynth::actuate::check_knob(pair.0 .0, pair.1, &cfg)
                    .map_err(|e| bad_input(format!("--knob `{k}`: {e}")))?;
                pairs.push(pair);
            }
            let duration = duration.map(|d| Duration::from_secs_f64(d.max(0.0)));
            workflow::generate::generate(&pairs, duration, &cfg, stop).map_err(failed)
        }
        Command::Gate {
            model,
            baseline,
            candidate,
            repetitions,
            x_regex,
            x_direction,
            fail_on_regression,
            settle,
            closed_loop,
            force,
            record_dir,
            json,
            plot,
        } => {
            let opts = gate::GateOptions {
                baseline,
                candidate,
                repetitions,
                x_regex,
                direction: x_direction
                    .parse()
                    .map_err(|e: LoadError| bad_input(format!("--x-direction: {e}")))?,
                level: 0.95,
                settle: Duration::from_secs_f64(settle.clamp(0.0, 3600.0)),
                closed_loop,
                force,
                record_dir,
            };
            run_gate(
                &model,
                &opts,
                fail_on_regression,
                json,
                plot.as_deref(),
                &cfg,
                stop,
            )
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
                .map_err(bad_input)?;
            let ratios: Vec<f64> = ratios
                .split(',')
                .map(|r| {
                    r.trim()
                        .parse::<f64>()
                        .map_err(|_| format!("bad ratio `{r}`"))
                })
                .collect::<Result<_, _>>()
                .map_err(bad_input)?;
            let plan = dcache::Plan::new(&geoms).map_err(bad_input)?;
            let f = plan.fractions_for(&ratios).map_err(bad_input)?;
            let mut buf = dcache::Buffer::new(plan).context("mapping the buffer")?;
            let sum = buf.read(&f, reads);
            println!("reads {reads} fractions {f:?} checksum {sum}");
            Ok(())
        }
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
            b.set_message(format!(
                "target {} measured {} error {} knob {:.4}{}",
                s.metric.format_value(s.target),
                s.measured.map_or("-".into(), |m| s.metric.format_value(m)),
                s.measured
                    .map_or("-".into(), |m| relative_error(s.target, m)),
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

fn relative_error(target: f64, measured: f64) -> String {
    if target != 0.0 {
        format!("{:+.1}%", 100.0 * (measured - target) / target)
    } else {
        format!("{:+.4}", measured - target)
    }
}

/// Consecutive in-tolerance intervals after which a replayed pair counts as
/// converged on `/metrics` (synthesize's `--needed` default).
const REPLAY_NEEDED: u32 = 8;

/// What the loops report to: progress bars on the terminal, the `/metrics`
/// state, and for the agent the service manager (READY, STOPPING) and the
/// watchdog, fed once per pass of the loop.
struct Reporter {
    state: metrics::SharedLoopState,
    bars: Option<Bars>,
    bar: Option<ProgressBar>,
    needed: u32,
    service: Option<(Arc<ServiceManager>, Heartbeat)>,
    model_path: PathBuf,
}

impl Reporter {
    fn state(&self) -> std::sync::MutexGuard<'_, metrics::LoopState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn beat(&mut self) {
        if let Some((_, heartbeat)) = &mut self.service {
            heartbeat.beat();
        }
    }
}

impl Observer for Reporter {
    fn synthesis_interval(&mut self, status: &[PairStatus], samples: u64, elapsed_s: f64) {
        if let Some(b) = &self.bars {
            b.update(status, samples);
        }
        let needed = self.needed;
        let mut state = self.state();
        for p in status {
            state.update_pair(
                p.metric.name(),
                p.cpu,
                p.target,
                p.measured,
                p.knob,
                p.measured.map(|_| p.within),
                needed,
                elapsed_s,
            );
        }
        state.samples = samples;
        drop(state);
        self.beat();
    }

    fn replay_started(&mut self, start: &ReplayStart<'_>) {
        // Not eprintln!: an agent whose stderr reader died must go on.
        let _ = writeln!(
            std::io::stderr(),
            "replaying {}: {}, measuring {}",
            self.model_path.display(),
            match start.mode {
                ReplayMode::ClosedLoop => "targets held in closed loop",
                ReplayMode::OpenLoop => "knobs fixed (open loop)",
            },
            start
                .measuring
                .map_or("nothing".into(), workflow::scope::describe)
        );
        {
            let mut state = self.state();
            for e in &start.model.entries {
                state.update_pair(
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
        if let Some((service, _)) = &self.service {
            service.ready(&format!(
                "replaying {} ({} pairs)",
                self.model_path.display(),
                start.model.entries.len()
            ));
        }
        self.beat();
    }

    fn replay_interval(&mut self, t_s: f64, pairs: &[ReplayedPair]) {
        if let Some(bar) = &self.bar {
            bar.set_position(t_s as u64);
            let msg: Vec<String> = pairs
                .iter()
                .filter_map(|p| {
                    let v = p.measured?;
                    let m = p.metric;
                    Some(if p.target != 0.0 {
                        format!(
                            "{m}@{} {} ({:+.1}%)",
                            p.cpu,
                            m.format_value(v),
                            100.0 * (v - p.target) / p.target
                        )
                    } else {
                        format!("{m}@{} {}", p.cpu, m.format_value(v))
                    })
                })
                .collect();
            bar.set_message(msg.join("  "));
        }
        {
            let mut state = self.state();
            for p in pairs {
                state.update_pair(
                    p.metric.name(),
                    p.cpu,
                    p.target,
                    p.measured,
                    p.knob,
                    p.within,
                    REPLAY_NEEDED,
                    t_s,
                );
            }
            if pairs.iter().any(|p| p.measured.is_some()) {
                state.samples += 1;
            }
        }
        self.beat();
    }

    fn stopping(&mut self) {
        if let Some(b) = &self.bars {
            b.finish();
        }
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        if let Some((service, _)) = &self.service {
            service.stopping();
        }
    }
}

/// Starts `/metrics` on `addr` when given; prints the bound address on
/// stderr (`metrics on ADDR`) so a caller that asked for port 0 finds it.
fn start_metrics(
    addr: Option<&str>,
    mode: &str,
    file: &Path,
) -> anyhow::Result<(metrics::SharedLoopState, Option<metrics::MetricsServer>)> {
    let state = Arc::new(std::sync::Mutex::new(metrics::LoopState::new(
        mode,
        &file.display().to_string(),
    )));
    let server = match addr {
        Some(a) => {
            // Exit 1, not 2: a port in use may be free after a restart.
            let srv =
                metrics::MetricsServer::start(a, state.clone()).map_err(anyhow::Error::msg)?;
            let _ = writeln!(std::io::stderr(), "metrics on {}", srv.local_addr());
            Some(srv)
        }
        None => None,
    };
    Ok((state, server))
}

fn synthesize(
    targets_path: &Path,
    output: &Path,
    a: &LoopArgs,
    cfg: &LoadConfig,
    stop: &StopFlag,
) -> anyhow::Result<()> {
    let t = LoadTargets::load(targets_path).map_err(failed)?;
    if t.targets.is_empty() {
        return Err(bad_input(format!("{}: no targets", targets_path.display())));
    }
    let opts = workflow::synthesize::SynthesisOptions {
        control: SynthOptions {
            period: Duration::from_millis(a.period_ms.max(10)),
            needed: a.needed.max(1),
            timeout: Duration::from_secs_f64(a.timeout.max(0.1)),
            hold: a.hold,
        },
        monitor_socket: a.monitor_socket.clone(),
        measure_on: parse_measure_on(a.measure_processes.as_deref())?.unwrap_or_default(),
    };
    let (state, _server) = start_metrics(a.metrics_listen.as_deref(), "synthesize", targets_path)?;
    let total = (opts.control.timeout.as_secs_f64() / opts.control.period.as_secs_f64()) as u64;
    let mut reporter = Reporter {
        state,
        bars: Some(Bars::new(t.targets.len(), total)),
        bar: None,
        needed: opts.control.needed,
        service: None,
        model_path: targets_path.to_path_buf(),
    };
    let model =
        workflow::synthesize::synthesize(&t, &opts, cfg, stop, &mut reporter).map_err(failed)?;
    println!(
        "converged in {:.1} s ({} samples of {} ms)",
        model.convergence_s, model.samples, a.period_ms
    );
    for e in &model.entries {
        println!(
            "{:>22}@{:<3} target {} measured {} knob {:.5}",
            e.metric.name(),
            e.cpu,
            e.metric.format_value(e.target),
            e.measured.map_or("-".into(), |m| e.metric.format_value(m)),
            e.knob
        );
    }
    model.save(output).map_err(failed)
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

/// `replay`, or `run` when a service manager is given.
fn replay(
    model_path: &Path,
    a: &ReplayArgs,
    cfg: &LoadConfig,
    stop: &StopFlag,
    service: Option<Arc<ServiceManager>>,
) -> anyhow::Result<()> {
    let model = LoadModel::load(model_path).map_err(failed)?;
    let mode = if service.is_some() { "run" } else { "replay" };
    let (state, server) = start_metrics(a.metrics_listen.as_deref(), mode, model_path)?;
    replay_loaded(
        &model,
        model_path,
        a,
        cfg,
        stop,
        state,
        server.is_some(),
        service,
    )
}

/// Replays a loaded model (read from `model_path`), reporting to `state`
/// (and `/metrics` when `serving`) and to systemd when `service` is given.
#[allow(clippy::too_many_arguments)]
fn replay_loaded(
    model: &LoadModel,
    model_path: &Path,
    a: &ReplayArgs,
    cfg: &LoadConfig,
    stop: &StopFlag,
    state: metrics::SharedLoopState,
    serving: bool,
    service: Option<Arc<ServiceManager>>,
) -> anyhow::Result<()> {
    let agent = service.is_some();
    let closed = !a.open_loop;
    // Closed loop (the default) measures all along; open loop only for
    // --verify or /metrics. A measurement that cannot start is fatal for
    // --verify and a closed-loop replay (exit 1), a warning for the agent
    // (it replays the knobs open loop) and /metrics.
    let measuring = if a.verify || (closed && !agent) {
        Measuring::Required
    } else if serving || closed {
        Measuring::IfPossible
    } else {
        Measuring::Never
    };
    let opts = workflow::replay::ReplayOptions {
        duration: a
            .duration
            .map(|d| Duration::from_secs_f64(d.clamp(0.0, 1e12))),
        dynamic: a.dynamic,
        mode: if closed {
            ReplayMode::ClosedLoop
        } else {
            ReplayMode::OpenLoop
        },
        force: a.force,
        period: Duration::from_millis(a.period_ms.max(10)),
        measure_on: a.on.clone(),
        measuring,
    };
    let mut reporter = Reporter {
        state,
        bars: None,
        bar: Some(ProgressBar::new(a.duration.map_or(0, |d| d as u64))),
        needed: REPLAY_NEEDED,
        service: service.map(|s| {
            let h = s.heartbeat();
            (s, h)
        }),
        model_path: model_path.to_path_buf(),
    };
    let report =
        workflow::replay::replay(model, &opts, cfg, stop, &mut reporter).map_err(|e| match e {
            LoadError::Measure(m) if measuring == Measuring::Required && !a.verify => {
                anyhow::anyhow!("{m} (--open-loop replays the knobs without measuring)")
            }
            e => failed(e),
        })?;
    if a.verify {
        eprintln!(
            "measured {} ({})",
            report
                .measured
                .as_ref()
                .map_or("nothing".into(), workflow::scope::describe),
            match report.mode {
                ReplayMode::ClosedLoop => "closed loop",
                ReplayMode::OpenLoop => "open loop",
            }
        );
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&report.deviations).expect("serializes")
            );
        } else {
            for d in &report.deviations {
                println!(
                    "{:>22}@{:<3} target {} measured {} deviation {:+.2}% ({} samples)",
                    d.metric.name(),
                    d.cpu,
                    d.metric.format_value(d.target),
                    d.metric.format_value(d.measured),
                    d.relative * 100.0,
                    d.samples
                );
            }
        }
    }
    Ok(())
}

/// A model directory whose files are checked as [`LoadModel::check_for`]
/// does against this node.
fn model_dir(dir: &Path, force: bool) -> anyhow::Result<WatchedDir<LoadModel>> {
    let node = workflow::this_node().map_err(failed)?;
    Ok(WatchedDir::new(
        dir,
        Limits::default(),
        Box::new(move |path, _| LoadModel::check_for(path, &node, force)),
    ))
}

/// How often `run` rescans a model directory without an inotify event (a
/// lost watch, a directory created later).
const MODEL_DIR_RESCAN: Duration = Duration::from_secs(5);

/// `run` with `[run] model_dir`: replays the directory's best model; when a
/// different valid file becomes the best (a higher version arrives, the one
/// replaying is removed or rewritten while another is valid), stops that
/// replay — its generators end — and starts the new one. An invalid file
/// changes nothing, and a directory left with no valid model keeps the one
/// replaying. A model whose replay fails is not retried until the
/// directory's choice changes. `/metrics` stays up throughout.
fn run_model_dir(
    dir: &Path,
    force: bool,
    a: &ReplayArgs,
    cfg: &LoadConfig,
    stop: &StopFlag,
    service: Arc<ServiceManager>,
) -> anyhow::Result<()> {
    let mut files = WatchedFiles::new(model_dir(dir, force)?, "load model");
    let (state, server) = start_metrics(a.metrics_listen.as_deref(), "run", dir)?;
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .model_dir_rejected = Some(0);
    let mut heartbeat = service.heartbeat();
    let mut failed_model: Option<Arc<LoadModel>> = None;
    let mut waiting_said = false;
    while !stop.is_stopped() {
        files.ensure_watch();
        let best = rescan_counted(&mut files, &state).and_then(|s| {
            s.chosen()
                .map(|(f, m)| (f.path.clone(), f.name.clone(), m.clone()))
        });
        let Some((path, name, model)) =
            best.filter(|(_, _, m)| !failed_model.as_ref().is_some_and(|f| Arc::ptr_eq(f, m)))
        else {
            if !waiting_said {
                let line = format!("waiting for a valid load model in {}", dir.display());
                tracing::info!("{line}");
                service.ready(&line);
                waiting_said = true;
            }
            wait_for_change(&mut files, stop, &mut heartbeat);
            continue;
        };
        waiting_said = false;
        failed_model = None;
        tracing::info!(
            dir = %dir.display(),
            file = %name,
            version = model.version,
            "replaying the model directory's best load model"
        );
        // The previous model's pairs go with it.
        {
            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
            let rejected = s.model_dir_rejected;
            *s = metrics::LoopState::new("run", &path.display().to_string());
            s.model_dir_rejected = rejected;
        }
        // The watcher ends this replay when the directory's choice changes
        // or the agent stops.
        let this_run = StopFlag::new();
        let watcher = {
            let (this_run, stop, replaying, state) =
                (this_run.clone(), stop.clone(), model.clone(), state.clone());
            std::thread::Builder::new()
                .name("model-dir".into())
                .spawn(move || {
                    // Ends the replay however this thread ends (a panic
                    // included): the agent's stop reaches the replay only
                    // through this thread.
                    struct EndsTheRun(StopFlag);
                    impl Drop for EndsTheRun {
                        fn drop(&mut self) {
                            self.0.stop();
                        }
                    }
                    let _ends = EndsTheRun(this_run.clone());
                    let mut last_scan = Instant::now();
                    while !this_run.is_stopped() {
                        std::thread::sleep(Duration::from_millis(100));
                        if stop.is_stopped() {
                            break;
                        }
                        if !files.poll() && last_scan.elapsed() < MODEL_DIR_RESCAN {
                            continue;
                        }
                        last_scan = Instant::now();
                        files.ensure_watch();
                        // A directory left without a valid model keeps
                        // the one replaying, as the SRA agent keeps its
                        // contract.
                        let changed = rescan_counted(&mut files, &state).is_some_and(|s| {
                            s.chosen().is_some_and(|(_, m)| !Arc::ptr_eq(m, &replaying))
                        });
                        if changed {
                            tracing::info!("the model directory's best load model changed");
                            break;
                        }
                    }
                    files
                })
                .map_err(|e| anyhow::anyhow!("starting the model directory watcher: {e}"))?
        };
        let result = replay_loaded(
            &model,
            &path,
            a,
            cfg,
            &this_run,
            state.clone(),
            server.is_some(),
            Some(service.clone()),
        );
        this_run.stop();
        files = watcher
            .join()
            .map_err(|_| anyhow::anyhow!("the model directory watcher panicked"))?;
        if let Err(e) = result {
            tracing::error!(file = %name, error = %format!("{e:#}"), "replaying the load model failed; waiting for another");
            failed_model = Some(model);
        }
    }
    Ok(())
}

/// Rescans the model directory, adding its new rejections to `/metrics`.
fn rescan_counted(
    files: &mut WatchedFiles<LoadModel>,
    state: &metrics::SharedLoopState,
) -> Option<hwqos_agent::watched::Scan<LoadModel>> {
    let scan = files.rescan()?;
    if !scan.new_rejections.is_empty() {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        *s.model_dir_rejected.get_or_insert(0) += scan.new_rejections.len() as u64;
    }
    Some(scan)
}

/// Waits until the watched directory may have changed (an inotify event,
/// or [`MODEL_DIR_RESCAN`] passed) or the agent stops, feeding the watchdog.
fn wait_for_change(
    files: &mut WatchedFiles<LoadModel>,
    stop: &StopFlag,
    heartbeat: &mut Heartbeat,
) {
    let since = Instant::now();
    while !stop.is_stopped() && since.elapsed() < MODEL_DIR_RESCAN {
        heartbeat.beat();
        if files.poll() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `gate`: runs the library's gate, prints each run on stderr and the report
/// on stdout (text or JSON), and fails with [`EXIT_REGRESSION`] when asked.
fn run_gate(
    model_path: &Path,
    opts: &gate::GateOptions,
    fail_on_regression: Option<f64>,
    json: bool,
    plot: Option<&Path>,
    cfg: &LoadConfig,
    stop: &StopFlag,
) -> anyhow::Result<()> {
    if let Some(p) = fail_on_regression {
        if !p.is_finite() || p < 0.0 {
            return Err(bad_input(format!(
                "--fail-on-regression {p}: expected a percentage >= 0"
            )));
        }
    }
    let model = LoadModel::load(model_path).map_err(failed)?;
    let total = 4 * opts.repetitions;
    let report = gate::gate(&model, opts, cfg, stop, &mut |r: &gate::GateRun| {
        eprintln!(
            "run {:>3}/{total}: {:<9} {:<6} x {:.6} (wall {:.3} s, cpu {:.3} s, {} faults, {} switches)",
            r.index + 1,
            r.version.name(),
            r.condition.name(),
            r.x,
            r.wall_s,
            r.counters.task_clock_ns / 1e9,
            r.counters.page_faults,
            r.counters.context_switches
        );
    })
    .map_err(failed)?;
    if let Some(svg) = plot {
        render_gate_svg(&report, svg)?;
        eprintln!("plot: {}", svg.display());
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serializes")
        );
    } else {
        println!(
            "x: {} ({} is better), {} runs per version and condition, {:.0}% intervals (Welch)",
            report.x,
            match report.direction {
                gate::Direction::Lower => "lower",
                gate::Direction::Higher => "higher",
            },
            report.repetitions,
            report.level * 100.0
        );
        println!(
            "{:<7} {:>14} {:>14} {:>10} {:>22}  verdict",
            "", "baseline", "candidate", "effect", "interval"
        );
        for c in &report.conditions {
            println!(
                "{:<7} {:>14.6} {:>14.6} {:>+9.2}% [{:>+8.2}%, {:>+8.2}%]  {}",
                c.condition.name(),
                c.baseline_mean,
                c.candidate_mean,
                c.effect_pct.0,
                c.effect_pct.1,
                c.effect_pct.2,
                c.verdict.name()
            );
        }
        for c in &report.conditions {
            let (b, k) = &c.counters;
            println!(
                "{:<7} counters per run (baseline -> candidate): cpu {:.3} -> {:.3} s, page faults {:.0} -> {:.0}, context switches {:.0} -> {:.0}",
                c.condition.name(),
                b.task_clock_ns / 1e9,
                k.task_clock_ns / 1e9,
                b.page_faults,
                k.page_faults,
                b.context_switches,
                k.context_switches
            );
        }
        for (v, c, p) in &report.recordings {
            println!("recording {} {}: {}", v.name(), c.name(), p.display());
        }
        let loaded = |v: gate::Version| {
            report
                .recordings
                .iter()
                .find(|r| r.0 == v && r.1 == gate::Condition::Loaded)
                .map(|r| r.2.display().to_string())
        };
        if let (Some(b), Some(c)) = (
            loaded(gate::Version::Baseline),
            loaded(gate::Version::Candidate),
        ) {
            println!("compare the counters: hwqos diff {b} {c}");
        }
    }
    if let Some(limit) = fail_on_regression {
        if report.fails(limit) {
            let r = report
                .condition(gate::Condition::Loaded)
                .expect("the report has a loaded condition");
            return Err(anyhow::Error::new(Regression {
                estimate: r.regression_pct.0,
                low: r.regression_pct.1,
                high: r.regression_pct.2,
                limit,
            }));
        }
    }
    Ok(())
}

/// `gate --plot`: x of every run, one panel per condition (bare, loaded),
/// baseline and candidate by repetition with their means as dashed lines;
/// each panel's caption gives the effect, its interval and the verdict.
fn render_gate_svg(report: &gate::GateReport, path: &Path) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let xs = report.runs.iter().map(|r| r.x);
    let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(v), h.max(v)));
    // Headroom above the runs for the legend (upper left).
    let (lo, hi) = if hi > lo {
        let d = (hi - lo) * 0.08;
        (lo - d, hi + 4.0 * d)
    } else {
        let d = lo.abs().max(1.0) * 0.05;
        (lo - d, hi + d)
    };
    let reps = report.repetitions.max(1);
    let plot = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1000, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let (title, body) = root.split_vertically(36);
        title.titled(
            &format!(
                "hwqos-loadgen gate: x = {}, {} runs per version and condition",
                report.x, report.repetitions
            ),
            ("sans-serif", 18),
        )?;
        let panels = body.split_evenly((1, report.conditions.len().max(1)));
        for (area, c) in panels.iter().zip(&report.conditions) {
            let verdict = c.verdict.name();
            let mut chart = ChartBuilder::on(area)
                .caption(
                    format!(
                        "{}: {:+.1} % [{:+.1} %, {:+.1} %], {verdict}",
                        c.condition.name(),
                        c.effect_pct.0,
                        c.effect_pct.1,
                        c.effect_pct.2
                    ),
                    ("sans-serif", 15),
                )
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(60)
                .build_cartesian_2d(-0.5f64..(reps as f64 - 0.5), lo..hi)?;
            chart
                .configure_mesh()
                .x_desc("repetition")
                .y_desc(report.x.as_str())
                .draw()?;
            for (v, color) in [
                (gate::Version::Baseline, BLUE),
                (gate::Version::Candidate, RED),
            ] {
                let runs: Vec<(f64, f64)> = report
                    .runs
                    .iter()
                    .filter(|r| r.version == v && r.condition == c.condition)
                    .map(|r| (r.repetition as f64, r.x))
                    .collect();
                let mean = match v {
                    gate::Version::Baseline => c.baseline_mean,
                    gate::Version::Candidate => c.candidate_mean,
                };
                let label = format!("{} (mean {mean:.4})", v.name());
                match v {
                    gate::Version::Baseline => chart
                        .draw_series(runs.iter().map(|&p| Circle::new(p, 4, color.filled())))?
                        .label(label)
                        .legend(move |(x, y)| Circle::new((x, y), 4, color.filled())),
                    gate::Version::Candidate => chart
                        .draw_series(
                            runs.iter()
                                .map(|&p| TriangleMarker::new(p, 5, color.filled())),
                        )?
                        .label(label)
                        .legend(move |(x, y)| TriangleMarker::new((x, y), 5, color.filled())),
                };
                chart.draw_series(DashedLineSeries::new(
                    [(-0.5, mean), (reps as f64 - 0.5, mean)],
                    6,
                    4,
                    color.mix(0.6).stroke_width(1),
                ))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()?;
        }
        root.present()?;
        Ok(())
    };
    plot().map_err(|e| anyhow::anyhow!("rendering {}: {e}", path.display()))
}
