//! Applying contracts and the evaluation loop.
//!
//! [`Agent`] owns the quota backend (chosen by [`hwqos_sched::backend::detect`]
//! unless configured), the crash guardian, and what the current contract
//! resolved to. [`Agent::apply`] pins every thread of every matched process
//! (verified) and enforces its quotas; entries or processes that cannot apply
//! are skipped with a log line. [`Agent::maintain`] (once a second) follows
//! processes that appear or exit and threads created since, and re-pins.
//! [`run_loop`] is `hwqos-sra run`: sample counters and x, analyse, update and
//! save the sensitivity model, decide, save the contract, apply.

use crate::config::Config;
use hwqos_core::{Frame, Ticker, Timestamp};
use hwqos_pmu::backend::perf::PerfBackend;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use hwqos_pmu::target::{online_cpus, Resolver, TargetSelector};
use hwqos_sched::analysis::AnalysisParams;
use hwqos_sched::backend::userspace::{
    OverflowRoute, ThrottleMethod, UserspaceBackend, UserspaceOptions,
};
use hwqos_sched::backend::{detect, BackendKind, QuotaBackend, QuotaStats};
use hwqos_sched::contract::{Contract, Guard, Skipped};
use hwqos_sched::guardian::GuardianClient;
use hwqos_sched::model::SensitivityModel;
use hwqos_sched::SchedError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to throttle, as parsed from the CLI or config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Throttle {
    Sigstop,
    Freeze,
}

/// Parses backend / throttle / route words; `None` backend = auto.
pub fn parse_enforce(
    backend: &str,
    throttle: &str,
    route: &str,
) -> Result<(Option<BackendKind>, Throttle, OverflowRoute), String> {
    let b = match backend {
        "auto" => None,
        other => Some(other.parse::<BackendKind>().map_err(|e| e.to_string())?),
    };
    let t = match throttle {
        "sigstop" => Throttle::Sigstop,
        "freeze" => Throttle::Freeze,
        other => return Err(format!("throttle `{other}` (expected sigstop or freeze)")),
    };
    let r = match route {
        "direct" => OverflowRoute::Direct,
        "agent" => OverflowRoute::Agent,
        other => return Err(format!("route `{other}` (expected direct or agent)")),
    };
    if t == Throttle::Freeze && r == OverflowRoute::Direct {
        return Err(
            "throttle `freeze` needs route `agent` (the direct route stops with SIGSTOP)".into(),
        );
    }
    Ok((b, t, r))
}

#[derive(Clone, Debug)]
pub struct AgentOptions {
    pub backend: Option<BackendKind>,
    pub throttle: Throttle,
    pub route: OverflowRoute,
    pub rt_priority: i32,
    pub lending: bool,
    pub state_dir: PathBuf,
    pub proc_root: PathBuf,
}

/// What one process of the contract got.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Applied {
    pub entry: String,
    pub affinity: Vec<u32>,
    pub pinned_threads: usize,
    pub enforced: bool,
}

/// The agent's state as `/metrics` shows it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Snapshot {
    pub backend: String,
    pub throttle: String,
    pub route: String,
    pub contract_version: u64,
    pub evaluations: u64,
    pub applied: BTreeMap<u32, Applied>,
    pub quota: BTreeMap<u32, QuotaStats>,
    pub skipped: Vec<Skipped>,
    pub apply_errors: u64,
    pub stop_latency_p50_ns: Option<u64>,
    pub stop_latency_p99_ns: Option<u64>,
}

/// What `thaw` reads: everything the agent may have throttled.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ThrottleState {
    pub pids: Vec<u32>,
    pub cgroups: Vec<PathBuf>,
}

pub const STATE_FILE: &str = "enforced.json";

pub struct Agent {
    backend: Box<dyn QuotaBackend>,
    backend_kind: BackendKind,
    opts: AgentOptions,
    catalog: Catalog,
    resolver: Resolver,
    online: Vec<u32>,
    contract: Option<Contract>,
    applied: BTreeMap<u32, Applied>,
    skipped: Vec<Skipped>,
    apply_errors: u64,
    freeze_parent: Option<PathBuf>,
    pub evaluations: u64,
}

impl Agent {
    /// Starts the backend. `guardian` receives every process before it can
    /// be throttled.
    pub fn new(opts: AgentOptions, guardian: Option<GuardianClient>) -> Result<Agent, SchedError> {
        let detected = detect(&opts.proc_root);
        let kind = opts.backend.unwrap_or(detected);
        let mut freeze_parent = None;
        let backend: Box<dyn QuotaBackend> = match kind {
            BackendKind::SchedSra => Box::new(
                hwqos_sched::backend::sched_sra::SchedSraBackend::open(&opts.proc_root)?,
            ),
            BackendKind::Userspace => {
                let method =
                    match opts.throttle {
                        Throttle::Sigstop => ThrottleMethod::Sigstop,
                        Throttle::Freeze => {
                            let mount = hwqos_pmu::target::cgroup2_mount(&opts.proc_root)
                                .ok_or_else(|| SchedError::Unsupported {
                                    backend: "userspace".into(),
                                    reason:
                                        "throttle = freeze but no cgroup2 mount in /proc/mounts"
                                            .into(),
                                })?;
                            let parent = mount.join("hwqos-sra");
                            freeze_parent = Some(parent.clone());
                            ThrottleMethod::Freeze { parent }
                        }
                    };
                Box::new(UserspaceBackend::start(
                    UserspaceOptions {
                        proc_root: opts.proc_root.clone(),
                        method,
                        route: opts.route,
                        realtime_priority: opts.rt_priority,
                        lending: opts.lending,
                        ..UserspaceOptions::default()
                    },
                    guardian,
                )?)
            }
        };
        tracing::info!(
            backend = kind.as_str(),
            detected = detected.as_str(),
            throttle = ?opts.throttle,
            route = ?opts.route,
            lending = opts.lending,
            "quota backend ready"
        );
        std::fs::create_dir_all(&opts.state_dir).map_err(|e| SchedError::File {
            path: opts.state_dir.clone(),
            source: e,
        })?;
        let own = std::process::id();
        Ok(Agent {
            backend,
            backend_kind: kind,
            resolver: Resolver::for_this_node().excluding_pid(Some(own)),
            catalog: Catalog::for_this_node(),
            online: online_cpus(Path::new("/sys")),
            opts,
            contract: None,
            applied: BTreeMap::new(),
            skipped: Vec::new(),
            apply_errors: 0,
            freeze_parent,
            evaluations: 0,
        })
    }

    pub fn backend_kind(&self) -> BackendKind {
        self.backend_kind
    }

    /// Applies a contract: releases processes it no longer covers, pins and
    /// enforces the rest. Never fails as a whole: what cannot apply is
    /// skipped and logged.
    pub fn apply(&mut self, contract: Contract) {
        tracing::info!(
            version = contract.version,
            entries = contract.entries.len(),
            "applying contract"
        );
        for e in &contract.entries {
            for line in &e.explanation {
                tracing::info!(entry = %e.name, "decision: {line}");
            }
        }
        self.contract = Some(contract);
        self.reconcile(true);
    }

    /// What of `contract` cannot apply on this machine now (the entries
    /// [`Agent::apply`] would skip, with the reasons), without applying it.
    pub fn check(&self, contract: &Contract) -> Vec<Skipped> {
        contract
            .resolve(&self.online, &self.catalog, &self.resolver, &self.guard())
            .1
    }

    /// The agent's own processes: itself (every thread), its guardian and
    /// its other children. No selector ever matches them.
    fn guard(&self) -> Guard {
        let guardian: Vec<u32> = self.backend.guardian_pid().into_iter().collect();
        Guard::for_this_process(&guardian)
    }

    /// Follows process and thread churn for the current contract and re-pins;
    /// replaces a crash guardian that died.
    pub fn maintain(&mut self) {
        self.backend.check_guardian();
        for pid in self.backend.refresh_threads() {
            self.applied.remove(&pid);
        }
        self.reconcile(false);
    }

    fn reconcile(&mut self, log_skips: bool) {
        let Some(contract) = self.contract.clone() else {
            return;
        };
        let (resolved, skipped) =
            contract.resolve(&self.online, &self.catalog, &self.resolver, &self.guard());
        if log_skips {
            for s in &skipped {
                tracing::warn!(entry = %s.entry, "contract entry skipped: {}", s.reason);
            }
        }
        self.skipped = skipped;
        let mut wanted: BTreeMap<u32, (usize, bool)> = BTreeMap::new();
        for (i, r) in resolved.iter().enumerate() {
            for &pid in &r.pids {
                wanted.entry(pid).or_insert((i, false));
            }
        }
        // Release what the contract no longer covers.
        let stale: Vec<u32> = self
            .applied
            .keys()
            .copied()
            .filter(|p| !wanted.contains_key(p))
            .collect();
        for pid in stale {
            let _ = self.backend.release(pid);
            self.applied.remove(&pid);
            tracing::info!(pid, "no longer in the contract: released");
        }
        for (pid, (i, _)) in wanted {
            let r = &resolved[i];
            let is_new = !self.applied.contains_key(&pid);
            let mut applied = Applied {
                entry: r.entry.name.clone(),
                affinity: r.entry.affinity.clone(),
                pinned_threads: 0,
                enforced: false,
            };
            if !r.entry.affinity.is_empty() {
                match hwqos_sched::proc::pin_process(&self.opts.proc_root, pid, &r.entry.affinity) {
                    Ok(rep) => {
                        applied.pinned_threads = rep.verified.len();
                        if is_new {
                            tracing::info!(pid, entry = %r.entry.name, cpus = ?r.entry.affinity, threads = rep.verified.len(), "pinned and verified");
                        }
                    }
                    Err(e) if e.is_vanished() => {
                        tracing::info!(pid, entry = %r.entry.name, "process vanished before pinning; skipped");
                        continue;
                    }
                    Err(e) => {
                        self.apply_errors += 1;
                        tracing::warn!(pid, entry = %r.entry.name, error = %e, "pinning failed; skipped");
                        continue;
                    }
                }
            }
            let previous = self.applied.get(&pid).cloned();
            match &r.quotas {
                Some(q) => {
                    let unchanged = previous
                        .as_ref()
                        .is_some_and(|p| p.enforced && p.entry == r.entry.name)
                        && !is_new
                        && self.backend.stats(pid).is_some_and(|s| {
                            s.events.len() == q.events.len()
                                && s.events
                                    .iter()
                                    .zip(&q.events)
                                    .all(|(a, b)| a.quota == b.quota && a.name == b.name)
                        });
                    if unchanged {
                        applied.enforced = true;
                    } else {
                        match self.backend.enforce(pid, q) {
                            Ok(()) => applied.enforced = true,
                            Err(e) if e.is_vanished() => {
                                tracing::info!(pid, entry = %r.entry.name, "process vanished before enforcing; skipped");
                                continue;
                            }
                            Err(e) => {
                                self.apply_errors += 1;
                                tracing::warn!(pid, entry = %r.entry.name, error = %e, "quota enforcement failed; skipped");
                            }
                        }
                    }
                }
                None => {
                    if previous.is_some_and(|p| p.enforced) {
                        let _ = self.backend.release(pid);
                    }
                }
            }
            self.applied.insert(pid, applied);
        }
        self.write_state();
    }

    fn write_state(&self) {
        let state = ThrottleState {
            pids: self.backend.enforced(),
            cgroups: self.freeze_parent.iter().cloned().collect(),
        };
        let path = self.opts.state_dir.join(STATE_FILE);
        let tmp = self.opts.state_dir.join(format!(".{STATE_FILE}.tmp"));
        let ok = std::fs::write(&tmp, serde_json::to_vec(&state).unwrap_or_default())
            .and_then(|_| std::fs::rename(&tmp, &path));
        if let Err(e) = ok {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the throttle state");
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let lat = self.backend.stop_latency();
        Snapshot {
            backend: self.backend_kind.as_str().into(),
            throttle: format!("{:?}", self.opts.throttle).to_lowercase(),
            route: format!("{:?}", self.opts.route).to_lowercase(),
            contract_version: self.contract.as_ref().map(|c| c.version).unwrap_or(0),
            evaluations: self.evaluations,
            applied: self.applied.clone(),
            quota: self
                .applied
                .keys()
                .filter_map(|p| self.backend.stats(*p).map(|s| (*p, s)))
                .collect(),
            skipped: self.skipped.clone(),
            apply_errors: self.apply_errors,
            stop_latency_p50_ns: lat.as_ref().and_then(|h| h.percentile(50.0)),
            stop_latency_p99_ns: lat.as_ref().and_then(|h| h.percentile(99.0)),
        }
    }

    /// Per-period usage of every enforced process (for `apply --history-out`).
    pub fn histories(&self) -> BTreeMap<u32, Vec<hwqos_sched::backend::PeriodUsage>> {
        self.backend
            .enforced()
            .into_iter()
            .map(|p| (p, self.backend.history(p)))
            .collect()
    }

    /// Releases everything (no process is left throttled) and clears the state file.
    pub fn shutdown(mut self) {
        self.backend.release_all();
        if let Some(parent) = &self.freeze_parent {
            let _ = std::fs::remove_dir(parent);
        }
        let _ = std::fs::remove_file(self.opts.state_dir.join(STATE_FILE));
        tracing::info!("all processes released");
    }
}

/// `hwqos-sra thaw`: SIGCONT every pid and thaw every freezer cgroup the
/// state file names (and every child cgroup of those). Returns (pids, cgroups).
pub fn thaw_from_state(state_dir: &Path) -> (usize, usize) {
    let path = state_dir.join(STATE_FILE);
    let text = match hwqos_sched::input::read_regular(&path, hwqos_sched::input::MAX_INPUT_BYTES) {
        Ok(t) => t,
        Err(e) => {
            if !e.is_vanished() {
                tracing::warn!(error = %e, "unreadable throttle state; nothing to thaw from it");
            }
            return (0, 0);
        }
    };
    let state: ThrottleState = match serde_json::from_str(&text) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "unreadable throttle state; nothing to thaw from it");
            return (0, 0);
        }
    };
    let mut registry = hwqos_sched::guardian::Registry::default();
    registry.pids.extend(state.pids);
    for parent in &state.cgroups {
        if let Ok(dir) = std::fs::read_dir(parent) {
            for e in dir.flatten() {
                if e.path().join("cgroup.freeze").exists() {
                    registry.cgroups.insert(e.path());
                }
            }
        }
    }
    hwqos_sched::guardian::thaw(&registry)
}

/// `hwqos-sra run`: the monitor → analyse → decide → apply loop.
pub fn run_loop(
    config: &Config,
    agent: &mut Agent,
    stop: &AtomicBool,
    snapshot: &Mutex<Snapshot>,
) -> anyhow::Result<()> {
    let a = &config.agent;
    let catalog = Catalog::for_this_node();
    let sampler_cfg = SamplerConfig {
        targets: config.monitor.targets.clone(),
        event_sets: vec![config.monitor.events.clone()],
        app_sources: config.monitor.app_sources.clone(),
        rescan_every: 10,
        ..SamplerConfig::default()
    };
    let resolver = Resolver::for_this_node().excluding_pid(Some(std::process::id()));
    let mut sampler = Sampler::new(
        sampler_cfg,
        &catalog,
        Box::new(PerfBackend::for_this_node()),
        resolver,
    )?;
    for u in sampler.unavailable() {
        tracing::warn!(event = %u.name, reason = %u.reason, "event not countable here");
    }
    let topology = hwqos_topology::Topology::this_node()?;
    let mut model = SensitivityModel::load(&a.model)?;
    let saved = hwqos_sched::input::read_regular(&a.contract, hwqos_sched::input::MAX_INPUT_BYTES);
    let mut version = match saved {
        Ok(t) => match Contract::parse(&t) {
            Ok(c) => {
                tracing::info!(version = c.version, "re-applying the saved contract");
                let v = c.version;
                agent.apply(c);
                v
            }
            Err(e) => {
                tracing::warn!(path = %a.contract.display(), error = %e, "saved contract ignored");
                0
            }
        },
        Err(_) => 0,
    };
    let params = AnalysisParams {
        step_ns: config.analysis.step_ms * 1_000_000,
        filter_order: config.analysis.filter_order,
        filter_cutoff: config.analysis.filter_cutoff,
        threshold: config.analysis.threshold,
    };
    let mut ticker = Ticker::new(Duration::from_millis(a.sample_interval_ms))?;
    let mut frames: VecDeque<Frame> = VecDeque::new();
    let eval_every = Duration::from_secs_f64(a.evaluation_period_s);
    let mut last_eval = Instant::now();
    let mut last_maintain = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        ticker.wait();
        let frame = sampler.sample(Timestamp::now());
        if frames.len() == a.max_frames {
            frames.pop_front();
        }
        frames.push_back(frame);
        if last_maintain.elapsed() >= Duration::from_secs(1) {
            // The loop makes progress: tell systemd's watchdog (WatchdogSec=30s).
            if sd_notify::watchdog_enabled().is_some() {
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
            }
            agent.maintain();
            *snapshot.lock().unwrap_or_else(|p| p.into_inner()) = agent.snapshot();
            last_maintain = Instant::now();
        }
        if last_eval.elapsed() < eval_every {
            continue;
        }
        last_eval = Instant::now();
        let list: Vec<Frame> = frames.drain(..).collect();
        let keys = Resolver::for_this_node();
        let updated = hwqos_sched::evaluation::evaluate(
            &list,
            &config.monitor.x_metric,
            &params,
            &mut model,
            |pid| selector_for(&keys, &config.monitor.targets, pid),
        );
        agent.evaluations += 1;
        if updated == 0 {
            tracing::info!(
                "evaluation: no process with both resource samples and x; contract unchanged"
            );
            continue;
        }
        if let Err(e) = model.save(&a.model) {
            tracing::warn!(error = %e, "cannot save the sensitivity model");
        }
        match hwqos_sched::decision::decide(&topology, &model) {
            Ok(d) => {
                version += 1;
                let mut c = d.contract;
                c.version = version;
                save_atomic(&a.contract, c.to_json().as_bytes());
                agent.apply(c);
            }
            Err(e) => tracing::warn!(error = %e, "decision failed; contract unchanged"),
        }
        *snapshot.lock().unwrap_or_else(|p| p.into_inner()) = agent.snapshot();
    }
    Ok(())
}

fn save_atomic(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    let r = path
        .parent()
        .map(std::fs::create_dir_all)
        .unwrap_or(Ok(()))
        .and_then(|_| std::fs::write(&tmp, bytes))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        tracing::warn!(path = %path.display(), error = %e, "cannot save");
    }
}

/// The model key of process `pid`: the configured selector when it denotes
/// exactly this process (`name:victim`), else `pid:N`.
pub fn selector_for(resolver: &Resolver, targets: &[TargetSelector], pid: u32) -> TargetSelector {
    targets
        .iter()
        .find(|t| {
            resolver
                .resolve(std::slice::from_ref(*t))
                .map(|r| r.processes.len() == 1 && r.processes[0].pid == pid)
                .unwrap_or(false)
        })
        .cloned()
        .unwrap_or(TargetSelector::Pid(pid))
}

/// Shared between the agent thread and the `/metrics` server.
pub type SharedSnapshot = Arc<Mutex<Snapshot>>;
