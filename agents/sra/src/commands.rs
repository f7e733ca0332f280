//! The `hwqos-sra` commands: each wires the command line to hwqos-sched and
//! the agent modules. Errors that are the user's input (a contract, a model,
//! a configuration, a flag) are [`bad_input`] or a located
//! [`crate::config::ConfigError`], so the process exits with status 2.

use crate::agent::{Agent, AgentState};
use crate::cli::{
    AnalyseArgs, ApplyArgs, DecideArgs, EnforceArgs, FindLimitArgs, LeechArgs, PredictArgs,
};
use crate::config::Config;
use crate::enforce::AgentOptions;
use crate::service::Service;
use anyhow::Context as _;
use hwqos_agent::lifecycle::bad_input;
use hwqos_pmu::target::TargetSelector;
use hwqos_sched::analysis::AnalysisParams;
use hwqos_sched::guardian::GuardianClient;
use hwqos_sched::leech::{LeechSpec, LeechThreads};
use hwqos_sched::model::SensitivityModel;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Starts the crash guardian: this binary again, as `__guardian`.
fn spawn_guardian() -> anyhow::Result<GuardianClient> {
    let exe = std::env::current_exe().context("locating the hwqos-sra binary for the guardian")?;
    // The same command again whenever the agent finds its guardian dead.
    let g = GuardianClient::spawn_with(move || {
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("__guardian");
        // Not the agent's blocked stop signals: the guardian sets its own.
        hwqos_core::process::clear_signal_mask_on_exec(&mut cmd);
        cmd
    })
    .context("starting the crash guardian")?;
    tracing::info!(pid = g.child_pid(), "crash guardian started");
    Ok(g)
}

fn agent_options(e: &EnforceArgs) -> anyhow::Result<AgentOptions> {
    AgentOptions::parse(
        &e.backend,
        &e.throttle,
        &e.route,
        e.rt_priority,
        e.lend,
        e.state_dir.clone(),
    )
    .map_err(|e| bad_input(format!("--{e}")))
}

/// The per-period usage of every enforced process as JSON lines
/// (`{"pid","period","used","throttled","length_ns"}`), for `apply --history-out`.
pub fn history_jsonl(agent: &Agent) -> String {
    let mut out = String::new();
    for (pid, h) in agent.histories() {
        for p in h {
            out.push_str(
                &serde_json::json!({"pid": pid, "period": p.period, "used": p.used, "throttled": p.throttled, "length_ns": p.length_ns})
                    .to_string(),
            );
            out.push('\n');
        }
    }
    out
}

/// `hwqos-sra apply`: enforce one contract until SIGTERM or `--duration-s`.
pub fn apply(a: ApplyArgs) -> anyhow::Result<()> {
    let text = hwqos_sched::input::read_regular(&a.contract, hwqos_sched::input::MAX_INPUT_BYTES)
        .map_err(|e| bad_input(e.to_string()))?;
    let contract = hwqos_sched::contract::Contract::parse(&text)
        .map_err(|e| bad_input(format!("{}: {e}", a.contract.display())))?;
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
        return Err(bad_input(format!(
            "{}: {} (nothing applied; --allow-partial applies the other entries)",
            a.contract.display(),
            reasons.join("; ")
        )));
    }
    agent.apply(contract);
    service.publish(&agent);
    service.ready("enforcing the contract");
    eprintln!("applied; enforcing until SIGTERM");
    let deadline = a
        .duration_s
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let mut heartbeat = service.heartbeat();
    while !service.stop_requested() && deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(200));
        agent.maintain();
        service.publish(&agent);
        heartbeat.beat();
    }
    if let Some(path) = &a.history_out {
        std::fs::write(path, history_jsonl(&agent))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    report_final(&agent.state());
    agent.shutdown();
    service.finish();
    Ok(())
}

fn report_final(state: &AgentState) {
    eprintln!(
        "final state: {}",
        serde_json::to_string(&state.quota).unwrap_or_default()
    );
    if let (Some(p50), Some(p99)) = (state.stop_latency_p50_ns, state.stop_latency_p99_ns) {
        eprintln!("overflow signal read -> throttle issued: p50 {p50} ns, p99 {p99} ns");
    }
}

/// `hwqos-sra run`: the closed loop of [`crate::run`] under a configuration.
pub fn run(path: &Path, check_only: bool) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    if check_only {
        println!("{}: ok", path.display());
        return Ok(());
    }
    let a = &config.agent;
    let opts = AgentOptions::parse(
        &a.backend,
        &a.throttle,
        &a.route,
        a.rt_priority,
        a.lending,
        a.state_dir.clone(),
    )
    .map_err(|e| bad_input(format!("{}: agent.{e}", path.display())))?;
    let guardian = spawn_guardian()?;
    let service = Service::start(a.metrics_listen.as_deref())?;
    let mut agent = Agent::new(opts, Some(guardian))?;
    service.publish(&agent);
    service.ready("running the closed loop");
    let mut heartbeat = service.heartbeat();
    let r = crate::run::run_loop(
        &config,
        &mut agent,
        service.signals(),
        &mut heartbeat,
        service.shared(),
    );
    agent.shutdown();
    service.finish();
    r
}

/// `hwqos-sra analyse`: correlation tables (and SVGs) of a recording, and
/// the model updated with `--model` (quotas kept).
pub fn analyse(a: AnalyseArgs) -> anyhow::Result<()> {
    if let Some(url) = &a.prometheus {
        return analyse_prometheus(url, &a);
    }
    let prometheus_only = [
        ("--selector", a.selector.is_some()),
        ("--start", a.start.is_some()),
        ("--end", a.end.is_some()),
        ("--step", a.step.is_some()),
        ("--group-by", a.group_by.is_some()),
        ("--outlier-tolerance", a.outlier_tolerance.is_some()),
    ];
    if let Some((flag, _)) = prometheus_only.iter().find(|(_, given)| *given) {
        return Err(bad_input(format!(
            "{flag} only applies with --prometheus (not to a recording)"
        )));
    }
    let recording = a
        .recording
        .as_deref()
        .ok_or_else(|| bad_input("a recording or --prometheus URL is required"))?;
    let rec =
        hwqos_core::recording::read_recording(recording).map_err(|e| bad_input(e.to_string()))?;
    let params = AnalysisParams {
        step_ns: a.step_ms.max(1) * 1_000_000,
        filter_order: a.order,
        filter_cutoff: a.cutoff,
        threshold: a.threshold,
    };
    let analyses = hwqos_sched::evaluation::analyse_frames(&rec.frames, &a.x, &params);
    if analyses.is_empty() {
        return Err(bad_input(format!(
            "{}: no process scope has both resource samples and `{}`",
            recording.display(),
            a.x
        )));
    }
    let mut results = Vec::new();
    for (series, r) in &analyses {
        match r {
            Ok(r) => results.push(r),
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
        let mut model = SensitivityModel::load(path)?;
        let interval = rec.frames.first().map(|f| f.interval_ns).unwrap_or(1);
        hwqos_sched::evaluation::update_model(&mut model, &analyses, interval, TargetSelector::Pid);
        model.save(path)?;
    }
    Ok(())
}

/// `hwqos-sra analyse --prometheus`: the fleet's Decision Engine. Two range
/// queries (every process-scope `hwqos_` series and every series of x,
/// within `--selector`), grouped per process name and node, analysed per
/// node and pooled over the nodes per process name
/// ([`hwqos_sched::prometheus::analyse_fleet`]); `--model` records each
/// pooled analysis under `name:COMM`. Flags that cannot mean anything are
/// bad input (exit 2); an unreachable or failing Prometheus is a runtime
/// error (exit 1).
fn analyse_prometheus(url: &str, a: &AnalyseArgs) -> anyhow::Result<()> {
    use hwqos_sched::prometheus as prom;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let input = |e: hwqos_sched::SchedError| bad_input(e.to_string());
    prom::BaseUrl::parse(url).map_err(input)?;
    let start = a.start.as_deref().ok_or_else(|| {
        bad_input("--prometheus needs --start (RFC 3339, unix seconds or now-DURATION)")
    })?;
    let start = prom::parse_time(start, now).map_err(input)?;
    let end = prom::parse_time(a.end.as_deref().unwrap_or("now"), now).map_err(input)?;
    if start >= end {
        return Err(bad_input(format!(
            "--start ({start}) must be before --end ({end})"
        )));
    }
    let step = prom::parse_duration(a.step.as_deref().unwrap_or("15s")).map_err(input)?;
    let group_by_text = a.group_by.as_deref().unwrap_or("node,comm");
    let tolerance = a
        .outlier_tolerance
        .unwrap_or(prom::DEFAULT_OUTLIER_TOLERANCE);
    let group_by: Vec<String> = group_by_text
        .split(',')
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    if !group_by.iter().any(|l| l == prom::PROCESS_LABEL) {
        return Err(bad_input(format!(
            "--group-by `{}` must include `{}`",
            group_by_text,
            prom::PROCESS_LABEL
        )));
    }
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        return Err(bad_input(format!(
            "--outlier-tolerance {tolerance} is not a number ≥ 0"
        )));
    }
    let (resource_q, x_q, x_exposed) =
        prom::fleet_queries(a.selector.as_deref().unwrap_or("{}"), &a.x).map_err(input)?;
    let resources = prom::query_range(url, &resource_q, start, end, step)
        .with_context(|| format!("querying {url} for {resource_q}"))?;
    let xs = prom::query_range(url, &x_q, start, end, step)
        .with_context(|| format!("querying {url} for {x_q}"))?;
    let groups = prom::group(&resources, &xs, &group_by).map_err(input)?;
    if groups.is_empty() {
        return Err(bad_input(format!(
            "{url}: no process (grouped by {}) has both process-scope hwqos_ series and `{x_exposed}` between {start} and {end} ({} resource series, {} x series found)",
            group_by.join(","),
            resources.len(),
            xs.len()
        )));
    }
    let params = AnalysisParams {
        step_ns: (step * 1e9).round().max(1.0) as u64,
        filter_order: a.order,
        filter_cutoff: a.cutoff,
        threshold: a.threshold,
    };
    let fleet = prom::analyse_fleet(&groups, &params, tolerance).map_err(input)?;
    if let Some(dir) = &a.svg_dir {
        std::fs::create_dir_all(dir)?;
        for f in fleet.iter().filter(|f| !f.pooled.resources.is_empty()) {
            let path = dir.join(format!("{}.svg", f.process.replace(['/', ':'], "_")));
            hwqos_sched::analysis::render_svg(&f.pooled, &path)?;
            eprintln!("wrote {}", path.display());
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&fleet)?);
    } else {
        for f in &fleet {
            println!("{}", f.table());
        }
    }
    if let Some(path) = &a.model {
        let mut model = SensitivityModel::load(path)?;
        for f in fleet.iter().filter(|f| !f.pooled.resources.is_empty()) {
            model.record_analysis(
                &TargetSelector::Name(f.process.clone()),
                &f.pooled,
                f.cpu_demand,
            );
        }
        model.save(path)?;
    }
    Ok(())
}

/// `hwqos-sra predict`: x under a change, from a production recording (the
/// fit), a test recording under the change (r′) and optionally a recording
/// where the change is real (the check). Every failure is bad input (exit 2).
pub fn predict(a: PredictArgs) -> anyhow::Result<()> {
    let read =
        |p: &Path| hwqos_core::recording::read_recording(p).map_err(|e| bad_input(e.to_string()));
    let production = read(&a.production)?;
    let test = read(&a.test)?;
    let actual = a.actual.as_deref().map(read).transpose()?;
    let options = hwqos_sched::predict::PredictOptions {
        x_metric: a.x,
        resource: a.resource,
        scope: a.scope,
        test_scope: a.test_scope,
        actual_scope: a.actual_scope,
        analysis: AnalysisParams {
            step_ns: a.step_ms.max(1) * 1_000_000,
            filter_order: a.order,
            filter_cutoff: a.cutoff,
            threshold: a.threshold,
        },
        level: a.level,
    };
    let p = hwqos_sched::predict::predict_recordings(
        &production.frames,
        &test.frames,
        actual.as_ref().map(|r| r.frames.as_slice()),
        &options,
    )
    .map_err(|e| bad_input(e.to_string()))?;
    if let Some(svg) = &a.plot {
        hwqos_sched::predict::render_svg(
            &p,
            &production.frames,
            actual.as_ref().map(|r| r.frames.as_slice()),
            &options,
            svg,
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        eprintln!("plot: {}", svg.display());
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        // The text report carries the warning itself; JSON readers get it on stderr too.
        if let Some(w) = &p.extrapolation {
            eprintln!("warning: extrapolation: {w}");
        }
    } else {
        print!("{}", p.text());
    }
    Ok(())
}

/// `hwqos-sra decide`: a contract from a model and a topology.
pub fn decide(a: DecideArgs) -> anyhow::Result<()> {
    let model = SensitivityModel::load(&a.model).map_err(|e| bad_input(e.to_string()))?;
    let topo =
        hwqos_topology::Topology::read(&a.topology_root).map_err(|e| bad_input(e.to_string()))?;
    let mut d = hwqos_sched::decision::decide(&topo, &model)?;
    d.contract.version = a.version;
    for e in &d.contract.entries {
        println!("{} → CPUs {:?}", e.process, e.affinity);
        for line in &e.explanation {
            println!("    {line}");
        }
    }
    let json = d.contract.to_json();
    match &a.out {
        Some(p) => hwqos_core::fs::write_atomic(p, (json + "\n").as_bytes(), 0o644)
            .with_context(|| format!("writing {}", p.display()))?,
        None => println!("{json}"),
    }
    Ok(())
}

fn leech_spec(kind: &str, working_set: usize, stride: usize) -> anyhow::Result<LeechSpec> {
    Ok(LeechSpec {
        kind: kind
            .parse()
            .map_err(|e: hwqos_sched::SchedError| bad_input(e.to_string()))?,
        working_set,
        stride,
    })
}

/// `hwqos-sra leech`: interference at a fixed duty until SIGTERM or `--duration-s`.
pub fn leech(a: LeechArgs) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&a.duty) {
        return Err(bad_input(format!("--duty {} is not in [0, 1]", a.duty)));
    }
    let spec = leech_spec(&a.kind, a.working_set, a.stride)?;
    let service = Service::start(None)?;
    let leech = LeechThreads::start(&spec, a.threads, a.cpu, a.duty, service.stop_flag())?;
    let deadline = a
        .duration_s
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let start = Instant::now();
    while !service.stop_requested()
        && deadline.is_none_or(|d| Instant::now() < d)
        && !leech.any_finished()
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let work = leech.work();
    leech.stop()?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{work} work units in {secs:.2} s ({:.0}/s)",
        work as f64 / secs
    );
    service.finish();
    Ok(())
}

/// `hwqos-sra find-limit`: thesis Listing 8.2 against a running victim;
/// with `--model` the quota is recorded in the model (the rest kept).
pub fn find_limit(a: FindLimitArgs) -> anyhow::Result<()> {
    if a.x_command.trim().is_empty() {
        return Err(bad_input("--x-command: an empty command line"));
    }
    let catalog = hwqos_pmu::catalog::Catalog::for_this_node();
    let event = catalog
        .resolve(&a.event)
        .map_err(|e| bad_input(e.to_string()))?;
    let counter =
        hwqos_sched::counter::ProcessCounter::open(Path::new("/proc"), a.pid, &a.event, event.attr)
            .map_err(|e| bad_input(format!("victim pid {}: {e}", a.pid)))?;
    let spec = leech_spec(&a.leech, a.working_set, a.stride)?;
    let leech_cpu = match a.leech_cpu {
        Some(c) => c,
        None => *hwqos_sched::proc::thread_affinity(a.pid)?
            .first()
            .ok_or_else(|| bad_input("victim has no CPU"))?,
    };
    let service = Service::start(None)?;
    let mut leech = LeechThreads::start(
        &spec,
        1,
        Some(leech_cpu),
        0.0,
        Arc::new(AtomicBool::new(false)),
    )?;
    let params = hwqos_sched::limit::LimitParams {
        omega: a.omega,
        baseline: Duration::from_secs_f64(a.baseline_s),
        step_interval: Duration::from_secs_f64(a.step_s),
        step: a.step,
        period: Duration::from_secs_f64(a.period_ms / 1000.0),
    };
    let mut probe =
        hwqos_sched::limit::CommandProbe::new(&a.x_command, counter, service.stop_flag());
    let result = hwqos_sched::limit::find_limit(&mut probe, &mut leech, &params);
    let _ = leech.stop();
    service.finish();
    let result = result?;
    println!("{}", serde_json::to_string_pretty(&result)?);
    if let Some(path) = &a.model {
        let mut model = SensitivityModel::load(path)?;
        model.record_quota(
            &TargetSelector::Pid(a.pid),
            &a.event,
            result.quota_per_period,
            (a.period_ms * 1000.0).round() as u64,
        );
        model.save(path)?;
    }
    Ok(())
}

/// `hwqos-sra thaw`: continue everything the state file names.
pub fn thaw(state_dir: &Path) -> anyhow::Result<()> {
    let (p, c) = crate::thaw::thaw_from_state(state_dir);
    println!("thawed {p} process(es) and {c} cgroup(s)");
    Ok(())
}

/// `hwqos-sra validate-dir`: checks every contract of a directory as `run`
/// reads them; exit 2 when any is invalid.
pub fn validate_dir(dir: &Path) -> anyhow::Result<()> {
    let scan = hwqos_sched::contract_dir::scan(dir, Default::default())
        .map_err(|e| bad_input(format!("contract directory: {e}")))?;
    let (report, failure) = hwqos_agent::watched::report(&scan, dir, "contract", "apply");
    print!("{report}");
    failure.map_or(Ok(()), |f| Err(bad_input(f)))
}
