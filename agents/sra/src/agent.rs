//! Applying contracts.
//!
//! [`Agent`] owns the quota backend (chosen by [`hwqos_sched::backend::detect`]
//! unless configured), the crash guardian, and what the current contract
//! resolved to. [`Agent::apply`] pins every thread of every matched process
//! (verified) and enforces its quotas; entries or processes that cannot apply
//! are skipped with a log line. [`Agent::maintain`] (once a second) follows
//! processes that appear or exit and threads created since, and re-pins.
//! Everything the agent may have throttled is written to the state file
//! ([`crate::thaw`]) after every change, for `hwqos-sra thaw`.

use crate::enforce::{AgentOptions, ThrottleMechanism};
use crate::thaw::ThrottleState;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::target::{online_cpus, Resolver};
use hwqos_sched::backend::userspace::{ThrottleMethod, UserspaceBackend, UserspaceOptions};
use hwqos_sched::backend::{detect, BackendKind, QuotaBackend, QuotaStats};
use hwqos_sched::contract::{Contract, Guard, Skipped};
use hwqos_sched::guardian::GuardianClient;
use hwqos_sched::SchedError;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What one process of the contract got.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Applied {
    /// The name of the contract entry that covers the process.
    pub entry: String,
    /// The CPUs the entry pins it to (empty: its affinity is left alone).
    pub affinity: Vec<u32>,
    /// Threads pinned and verified on the last pass (0 without affinity).
    pub pinned_threads: usize,
    /// Whether the backend enforces the entry's quotas on it.
    pub enforced: bool,
}

/// What the agent enforces, as `/metrics` shows it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AgentState {
    /// The quota backend in use (`userspace` or `sched_sra`).
    pub backend: String,
    /// The throttle mechanism word (`sigstop`, `freeze`).
    pub throttle: String,
    /// The overflow route (`direct`, `agent`).
    pub route: String,
    /// Version of the contract applied (0: none).
    pub contract_version: u64,
    /// Evaluation periods completed (`run`).
    pub evaluations: u64,
    /// Frames from the node monitor's live API.
    pub frames_from_monitor: u64,
    /// Frames from the agent's own sampler.
    pub frames_sampled: u64,
    /// Files of the contract directory rejected since start (each version
    /// of a bad file once).
    pub contract_dir_rejected: u64,
    /// What each covered process got, by pid.
    pub applied: BTreeMap<u32, Applied>,
    /// The backend's quota statistics of each enforced process, by pid.
    pub quota: BTreeMap<u32, QuotaStats>,
    /// Contract entries that could not apply, with the reasons.
    pub skipped: Vec<Skipped>,
    /// Pinning or enforcement failures since start.
    pub apply_errors: u64,
    /// Median latency in ns from reading an overflow signal to issuing the
    /// throttle (agent route; `None` before the first one).
    pub stop_latency_p50_ns: Option<u64>,
    /// 99th percentile of the same latency, in ns.
    pub stop_latency_p99_ns: Option<u64>,
    /// The same latency as `/metrics`' histogram (agent route; `None` on
    /// the direct route and with the kernel backend).
    #[serde(skip)]
    pub stop_latency: Option<StopLatency>,
}

/// The stop latency since start in the classic histogram form `/metrics`
/// writes: the backend's log-linear histogram read at power-of-two bounds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StopLatency {
    /// Latencies recorded.
    pub count: u64,
    /// Their exact sum, in ns.
    pub sum_ns: u128,
    /// `(bound_ns, n)`: `n` latencies above the previous bound and at most
    /// `bound_ns` (exact: each bound is the largest value of a bucket of
    /// the backend's histogram), ascending; the rest are above the last.
    pub buckets: Vec<(u64, u64)>,
}

impl StopLatency {
    /// The bucket bounds: `2^k - 1` ns for k = 10..=30, about 1 µs to 1.07 s
    /// (a SIGSTOP or freeze issued takes microseconds; a loaded node,
    /// milliseconds).
    pub const BOUNDS_NS: [u64; 21] = {
        let mut b = [0u64; 21];
        let mut i = 0;
        while i < 21 {
            b[i] = (1u64 << (10 + i)) - 1;
            i += 1;
        }
        b
    };

    /// Reads `h` at [`StopLatency::BOUNDS_NS`].
    pub fn from_histogram(h: &hwqos_core::ticker::LatencyHistogram) -> StopLatency {
        let mut below = 0;
        let buckets = Self::BOUNDS_NS
            .iter()
            .map(|&bound| {
                let at_most = h.count_at_most(bound);
                let n = at_most - below;
                below = at_most;
                (bound, n)
            })
            .collect();
        StopLatency {
            count: h.count(),
            sum_ns: h.sum_ns(),
            buckets,
        }
    }
}

/// The enforcing agent: one quota backend, the current contract and what
/// it applied, and (optionally) a crash guardian that thaws everything if
/// the agent dies. [`Agent::apply`] installs a contract,
/// [`Agent::maintain`] follows process churn, [`Agent::shutdown`] releases
/// all.
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
    /// Evaluation periods completed (`run`).
    pub evaluations: u64,
    /// Frames read from the node monitor's live API (`run`).
    pub frames_from_monitor: u64,
    /// Frames counted by the agent's own sampler (`run`, no monitor).
    pub frames_sampled: u64,
    /// Files of the contract directory rejected since start (`run` with
    /// `contract_dir`).
    pub contract_dir_rejected: u64,
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
                        ThrottleMechanism::Sigstop => ThrottleMethod::Sigstop,
                        ThrottleMechanism::Freeze => {
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
            frames_from_monitor: 0,
            frames_sampled: 0,
            contract_dir_rejected: 0,
        })
    }

    /// The quota backend in use (the detected one when `auto`).
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

    /// The contract applied now (`None` before the first).
    pub fn contract(&self) -> Option<&Contract> {
        self.contract.as_ref()
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
        crate::thaw::write_state(
            &self.opts.state_dir,
            &ThrottleState {
                pids: self.backend.enforced(),
                cgroups: self.freeze_parent.iter().cloned().collect(),
            },
        );
    }

    /// What the agent enforces now, for `/metrics` and the logs.
    pub fn state(&self) -> AgentState {
        let lat = self.backend.stop_latency();
        AgentState {
            backend: self.backend_kind.as_str().into(),
            throttle: self.opts.throttle.as_str().into(),
            route: format!("{:?}", self.opts.route).to_lowercase(),
            contract_version: self.contract.as_ref().map(|c| c.version).unwrap_or(0),
            evaluations: self.evaluations,
            frames_from_monitor: self.frames_from_monitor,
            frames_sampled: self.frames_sampled,
            contract_dir_rejected: self.contract_dir_rejected,
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
            stop_latency: lat.as_ref().map(StopLatency::from_histogram),
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
        let _ = std::fs::remove_file(self.opts.state_dir.join(crate::thaw::STATE_FILE));
        tracing::info!("all processes released");
    }
}

/// Shared between the agent thread and the `/metrics` server.
pub type SharedState = Arc<Mutex<AgentState>>;
