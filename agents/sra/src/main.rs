//! `hwqos-sra`: command-line and service-manager glue around
//! [`hwqos_sra::agent`] and hwqos-sched. Exit codes: 0 success (SIGTERM
//! included), 1 runtime failure, 2 bad configuration or input.

use anyhow::Context as _;
use clap::Parser;
use hwqos_sched::guardian::GuardianClient;
use hwqos_sra::agent::{self, Agent, AgentOptions, SharedSnapshot, Snapshot};
use hwqos_sra::cli::{
    AnalyseArgs, Cli, Command, DecideArgs, EnforceArgs, FindLimitArgs, LeechArgs,
};
use hwqos_sra::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An error that exits with status 2 (bad configuration or input).
#[derive(Debug)]
struct BadInput(String);
impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for BadInput {}

fn bad(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(msg.into()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Guardian = cli.command {
        // Before anything else: no logging setup, no threads.
        hwqos_sched::guardian::ignore_group_stop_signals();
        // SAFETY: getppid has no preconditions.
        let agent = unsafe { libc::getppid() } as u32;
        let reg = hwqos_sched::guardian::run_for(std::io::stdin().lock(), Some(agent));
        if !reg.pids.is_empty() || !reg.cgroups.is_empty() {
            eprintln!(
                "hwqos-sra guardian: agent gone; thawed {} pid(s) and {} cgroup(s)",
                reg.pids.len(),
                reg.cgroups.len()
            );
        }
        return ExitCode::SUCCESS;
    }
    hwqos_agent::init_logging();
    let result = match cli.command {
        Command::Run {
            config,
            check_config,
        } => cmd_run(config, check_config),
        Command::Apply(a) => cmd_apply(a),
        Command::Analyse(a) => cmd_analyse(a),
        Command::Decide(a) => cmd_decide(a),
        Command::FindLimit(a) => cmd_find_limit(a),
        Command::Leech(a) => cmd_leech(a),
        Command::Thaw { state_dir } => {
            let (p, c) = agent::thaw_from_state(&state_dir);
            println!("thawed {p} process(es) and {c} cgroup(s)");
            Ok(())
        }
        Command::Guardian => unreachable!("handled above"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hwqos-sra: {e:#}");
            if e.downcast_ref::<BadInput>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn notify(state: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::debug!("sd_notify: {e}");
    }
}

fn spawn_guardian() -> anyhow::Result<GuardianClient> {
    let exe = std::env::current_exe().context("locating the hwqos-sra binary for the guardian")?;
    // The same command again whenever the agent finds its guardian dead.
    let g = GuardianClient::spawn_with(move || {
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("__guardian");
        cmd
    })
    .context("starting the crash guardian")?;
    tracing::info!(pid = g.child_pid(), "crash guardian started");
    Ok(g)
}

fn agent_options(e: &EnforceArgs) -> anyhow::Result<AgentOptions> {
    let (backend, throttle, route) =
        agent::parse_enforce(&e.backend, &e.throttle, &e.route).map_err(bad)?;
    if e.lend && route != hwqos_sched::backend::userspace::OverflowRoute::Agent {
        return Err(bad("--lend needs --route agent"));
    }
    Ok(AgentOptions {
        backend,
        throttle,
        route,
        rt_priority: e.rt_priority,
        lending: e.lend,
        state_dir: e.state_dir.clone(),
        proc_root: PathBuf::from("/proc"),
    })
}

/// Stop flag set by SIGTERM/SIGINT; serves /metrics when asked. The agent
/// work runs on the calling thread; the runtime lives in its own threads.
struct Service {
    rt: tokio::runtime::Runtime,
    stop: Arc<AtomicBool>,
    stop_tx: tokio::sync::watch::Sender<bool>,
    snapshot: SharedSnapshot,
}

impl Service {
    fn start(metrics_listen: Option<&str>) -> anyhow::Result<Service> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("starting the runtime")?;
        let stop = Arc::new(AtomicBool::new(false));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let snapshot: SharedSnapshot = Arc::new(Mutex::new(Snapshot::default()));
        let s = stop.clone();
        rt.spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            s.store(true, Ordering::SeqCst);
        });
        if let Some(addr) = metrics_listen {
            let listener = rt
                .block_on(tokio::net::TcpListener::bind(addr))
                .map_err(|e| bad(format!("metrics_listen {addr}: {e}")))?;
            let local = listener.local_addr()?;
            eprintln!("metrics on {local}");
            rt.spawn(hwqos_sra::metrics::serve(
                listener,
                snapshot.clone(),
                stop_rx,
            ));
        }
        Ok(Service {
            rt,
            stop,
            stop_tx,
            snapshot,
        })
    }

    fn publish(&self, a: &Agent) {
        *self.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = a.snapshot();
    }

    fn finish(self) {
        let _ = self.stop_tx.send(true);
        self.rt.shutdown_timeout(Duration::from_secs(2));
    }
}

fn watchdog_tick(last: &mut Instant) {
    if let Some(d) = sd_notify::watchdog_enabled() {
        if last.elapsed() >= d / 2 {
            notify(&[sd_notify::NotifyState::Watchdog]);
            *last = Instant::now();
        }
    }
}

fn cmd_apply(a: hwqos_sra::cli::ApplyArgs) -> anyhow::Result<()> {
    let text = hwqos_sched::input::read_regular(&a.contract, hwqos_sched::input::MAX_INPUT_BYTES)
        .map_err(|e| bad(e.to_string()))?;
    let contract = hwqos_sched::contract::Contract::parse(&text)
        .map_err(|e| bad(format!("{}: {e}", a.contract.display())))?;
    let opts = agent_options(&a.enforce)?;
    let guardian = spawn_guardian()?;
    let service = Service::start(a.metrics_listen.as_deref())?;
    let mut agent = Agent::new(opts, Some(guardian))?;
    // A contract that cannot apply as written is an error, unless asked.
    let skipped = agent.check(&contract);
    if !skipped.is_empty() && !a.allow_partial {
        let reasons: Vec<String> = skipped
            .iter()
            .map(|s| format!("entry `{}`: {}", s.entry, s.reason))
            .collect();
        agent.shutdown();
        service.finish();
        return Err(bad(format!(
            "{}: {} (nothing applied; --allow-partial applies the other entries)",
            a.contract.display(),
            reasons.join("; ")
        )));
    }
    agent.apply(contract);
    service.publish(&agent);
    notify(&[sd_notify::NotifyState::Ready]);
    eprintln!("applied; enforcing until SIGTERM");
    let deadline = a
        .duration_s
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let mut wd = Instant::now();
    while !service.stop.load(Ordering::SeqCst) && deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(200));
        agent.maintain();
        service.publish(&agent);
        watchdog_tick(&mut wd);
    }
    notify(&[sd_notify::NotifyState::Stopping]);
    if let Some(path) = &a.history_out {
        let mut out = String::new();
        for (pid, h) in agent.histories() {
            for p in h {
                out.push_str(&serde_json::json!({"pid": pid, "period": p.period, "used": p.used, "throttled": p.throttled}).to_string());
                out.push('\n');
            }
        }
        std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))?;
    }
    let snap = agent.snapshot();
    eprintln!(
        "final state: {}",
        serde_json::to_string(&snap.quota).unwrap_or_default()
    );
    if let (Some(p50), Some(p99)) = (snap.stop_latency_p50_ns, snap.stop_latency_p99_ns) {
        eprintln!("overflow signal read -> throttle issued: p50 {p50} ns, p99 {p99} ns");
    }
    agent.shutdown();
    service.finish();
    Ok(())
}

fn cmd_run(path: PathBuf, check: bool) -> anyhow::Result<()> {
    let config = Config::load(&path).map_err(|e| bad(e.to_string()))?;
    if check {
        println!("{}: ok", path.display());
        return Ok(());
    }
    let guardian = spawn_guardian()?;
    let a = &config.agent;
    let enforce = EnforceArgs {
        backend: a.backend.clone(),
        throttle: a.throttle.clone(),
        route: a.route.clone(),
        rt_priority: a.rt_priority,
        lend: a.lending,
        state_dir: a.state_dir.clone(),
    };
    let service = Service::start(a.metrics_listen.as_deref())?;
    let mut agent = Agent::new(agent_options(&enforce)?, Some(guardian))?;
    service.publish(&agent);
    notify(&[sd_notify::NotifyState::Ready]);
    let stop = service.stop.clone();
    let snapshot = service.snapshot.clone();
    let r = agent::run_loop(&config, &mut agent, &stop, &snapshot);
    notify(&[sd_notify::NotifyState::Stopping]);
    agent.shutdown();
    service.finish();
    r
}

fn cmd_analyse(a: AnalyseArgs) -> anyhow::Result<()> {
    let rec =
        hwqos_core::recording::read_recording(&a.recording).map_err(|e| bad(e.to_string()))?;
    let params = hwqos_sched::analysis::AnalysisParams {
        step_ns: a.step_ms.max(1) * 1_000_000,
        filter_order: a.order,
        filter_cutoff: a.cutoff,
        threshold: a.threshold,
    };
    let analyses = hwqos_sched::evaluation::analyse_frames(&rec.frames, &a.x, &params);
    if analyses.is_empty() {
        return Err(bad(format!(
            "{}: no process scope has both resource samples and `{}`",
            a.recording.display(),
            a.x
        )));
    }
    let mut results = Vec::new();
    for (series, r) in &analyses {
        match r {
            Ok(r) => results.push(r.clone()),
            Err(e) => eprintln!("{}: {e}", series.process),
        }
    }
    if let Some(dir) = &a.svg_dir {
        std::fs::create_dir_all(dir)?;
        for r in &results {
            let path = dir.join(format!("{}.svg", r.process.replace(':', "_")));
            hwqos_sched::analysis::render_svg(r, &path)?;
            eprintln!("wrote {}", path.display());
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        for r in &results {
            println!("{}", r.table());
        }
    }
    if let Some(path) = &a.model {
        let mut model = hwqos_sched::model::SensitivityModel::load(path)?;
        let interval = rec.frames.first().map(|f| f.interval_ns).unwrap_or(1);
        hwqos_sched::evaluation::update_model(&mut model, &analyses, interval, |pid| {
            hwqos_pmu::target::TargetSelector::Pid(pid)
        });
        model.save(path)?;
    }
    Ok(())
}

fn cmd_decide(a: DecideArgs) -> anyhow::Result<()> {
    let model =
        hwqos_sched::model::SensitivityModel::load(&a.model).map_err(|e| bad(e.to_string()))?;
    let topo = hwqos_topology::Topology::read(&a.topology_root).map_err(|e| bad(e.to_string()))?;
    let d = hwqos_sched::decision::decide(&topo, &model)?;
    for e in &d.contract.entries {
        println!("{} → CPUs {:?}", e.process, e.affinity);
        for line in &e.explanation {
            println!("    {line}");
        }
    }
    let json = d.contract.to_json();
    match &a.out {
        Some(p) => {
            std::fs::write(p, json + "\n").with_context(|| format!("writing {}", p.display()))?
        }
        None => println!("{json}"),
    }
    Ok(())
}

fn leech_spec(
    kind: &str,
    working_set: usize,
    stride: usize,
) -> anyhow::Result<hwqos_sched::leech::LeechSpec> {
    Ok(hwqos_sched::leech::LeechSpec {
        kind: kind
            .parse()
            .map_err(|e: hwqos_sched::SchedError| bad(e.to_string()))?,
        working_set,
        stride,
    })
}

fn pin_self(cpu: Option<u32>) -> anyhow::Result<()> {
    if let Some(c) = cpu {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        hwqos_sched::proc::set_thread_affinity(tid, &[c])?;
    }
    Ok(())
}

fn cmd_leech(a: LeechArgs) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&a.duty) {
        return Err(bad(format!("--duty {} is not in [0, 1]", a.duty)));
    }
    let spec = leech_spec(&a.kind, a.working_set, a.stride)?;
    let duty = Arc::new(AtomicU64::new(
        (a.duty * hwqos_sched::leech::DUTY_FULL as f64) as u64,
    ));
    let work = Arc::new(AtomicU64::new(0));
    let service = Service::start(None)?;
    let mut handles = Vec::new();
    for _ in 0..a.threads.max(1) {
        let (spec, duty, stop, work, cpu) = (
            spec.clone(),
            duty.clone(),
            service.stop.clone(),
            work.clone(),
            a.cpu,
        );
        handles.push(std::thread::spawn(move || -> anyhow::Result<()> {
            pin_self(cpu)?;
            hwqos_sched::leech::run(&spec, &duty, &stop, &work)?;
            Ok(())
        }));
    }
    let deadline = a
        .duration_s
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let start = Instant::now();
    while !service.stop.load(Ordering::SeqCst)
        && deadline.is_none_or(|d| Instant::now() < d)
        && handles.iter().all(|h| !h.is_finished())
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    service.stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("leech thread panicked"))??;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{} work units in {secs:.2} s ({:.0}/s)",
        work.load(Ordering::Relaxed),
        work.load(Ordering::Relaxed) as f64 / secs
    );
    service.finish();
    Ok(())
}

/// x from a command sampled every 200 ms, r from counting counters on every
/// thread of the victim.
struct CommandProbe {
    argv: Vec<String>,
    counter: hwqos_sched::counter::ProcessCounter,
    stop: Arc<AtomicBool>,
}

impl CommandProbe {
    fn x(&self) -> Result<f64, hwqos_sched::SchedError> {
        let out = std::process::Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .output()
            .map_err(|e| hwqos_sched::SchedError::io(format!("running {:?}", self.argv), e))?;
        let text = String::from_utf8_lossy(&out.stdout);
        hwqos_pmu::appmetric::first_number(&text).ok_or_else(|| {
            hwqos_sched::SchedError::invalid(
                "x command",
                format!("{:?} printed no number", self.argv),
            )
        })
    }
}

impl hwqos_sched::limit::Probe for CommandProbe {
    fn measure(&mut self, interval: Duration) -> Result<(f64, f64), hwqos_sched::SchedError> {
        self.counter.refresh()?;
        let r0 = self.counter.total();
        let start = Instant::now();
        let mut xs = Vec::new();
        while start.elapsed() < interval {
            if self.stop.load(Ordering::SeqCst) {
                return Err(hwqos_sched::SchedError::invalid(
                    "find-limit",
                    "interrupted",
                ));
            }
            std::thread::sleep(Duration::from_millis(200).min(interval));
            xs.push(self.x()?);
        }
        let r1 = self.counter.total();
        let secs = start.elapsed().as_secs_f64();
        let x = hwqos_core::stats::mean(&xs).unwrap_or(0.0);
        tracing::info!(x, r_per_s = (r1 - r0) as f64 / secs, "measured");
        Ok((x, (r1 - r0) as f64 / secs))
    }
}

/// Leech threads whose duty the finder ramps.
struct ThreadLeech {
    duty: Arc<AtomicU64>,
}

impl hwqos_sched::limit::Ramp for ThreadLeech {
    fn set_intensity(&mut self, i: f64) {
        tracing::info!(intensity = i, "leech intensity");
        self.duty.store(
            (i.clamp(0.0, 1.0) * hwqos_sched::leech::DUTY_FULL as f64) as u64,
            Ordering::SeqCst,
        );
    }
}

fn cmd_find_limit(a: FindLimitArgs) -> anyhow::Result<()> {
    if a.x_command.trim().is_empty() {
        return Err(bad("--x-command: an empty command line"));
    }
    let catalog = hwqos_pmu::catalog::Catalog::for_this_node();
    let event = catalog.resolve(&a.event).map_err(|e| bad(e.to_string()))?;
    let counter = hwqos_sched::counter::ProcessCounter::open(
        std::path::Path::new("/proc"),
        a.pid,
        &a.event,
        event.attr,
    )
    .map_err(|e| bad(format!("victim pid {}: {e}", a.pid)))?;
    let spec = leech_spec(&a.leech, a.working_set, a.stride)?;
    let leech_cpu = match a.leech_cpu {
        Some(c) => c,
        None => *hwqos_sched::proc::thread_affinity(a.pid)?
            .first()
            .ok_or_else(|| bad("victim has no CPU"))?,
    };
    let service = Service::start(None)?;
    let duty = Arc::new(AtomicU64::new(0));
    let work = Arc::new(AtomicU64::new(0));
    let leech_stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let (spec, duty, stop, work) =
            (spec.clone(), duty.clone(), leech_stop.clone(), work.clone());
        std::thread::spawn(move || -> anyhow::Result<()> {
            pin_self(Some(leech_cpu))?;
            hwqos_sched::leech::run(&spec, &duty, &stop, &work)?;
            Ok(())
        })
    };
    let params = hwqos_sched::limit::LimitParams {
        omega: a.omega,
        baseline: Duration::from_secs_f64(a.baseline_s),
        step_interval: Duration::from_secs_f64(a.step_s),
        step: a.step,
        period: Duration::from_secs_f64(a.period_ms / 1000.0),
    };
    let mut probe = CommandProbe {
        argv: vec!["sh".into(), "-c".into(), a.x_command.clone()],
        counter,
        stop: service.stop.clone(),
    };
    let result = hwqos_sched::limit::find_limit(&mut probe, &mut ThreadLeech { duty }, &params);
    leech_stop.store(true, Ordering::SeqCst);
    let _ = handle.join();
    service.finish();
    let result = result?;
    println!("{}", serde_json::to_string_pretty(&result)?);
    if let Some(path) = &a.model {
        let mut model = hwqos_sched::model::SensitivityModel::load(path)?;
        let sel: hwqos_pmu::target::TargetSelector = format!("pid:{}", a.pid)
            .parse()
            .map_err(|e| bad(format!("{e}")))?;
        model.record_quota(
            &sel,
            &a.event,
            result.quota_per_period,
            (a.period_ms * 1000.0).round() as u64,
        );
        model.save(path)?;
    }
    Ok(())
}
