//! The monitor engine: one [`Frame`] per tick from counter groups rotated per
//! target, plus procfs and application metrics (thesis 5.3.1, Listing 8.3).
//!
//! Each target (a process, a thread, a CPU, a cgroup) has the same list of event
//! sets, each a counter group per counting unit (a thread of the process, the
//! CPU, the cgroup on each CPU). Exactly one set per target is enabled at a time:
//! at every tick the enabled set is disabled, read (its increase since it was
//! enabled at the previous tick), and the next set is enabled. So each set
//! always has the PMU to itself (no kernel multiplexing unless something else
//! competes for counters), each reading covers exactly one interval, and the
//! derived metrics of a group only mix events that were counted together.
//!
//! The first call to [`Sampler::sample`] starts counting and returns a frame
//! without counter samples; a target that appears later reports from the tick
//! after it appeared.
//!
//! **Processes.** A process is counted with one inherited group per thread that
//! exists when it is attached; threads (and child processes) it creates later are
//! counted by the kernel's inheritance into those groups, including after they
//! exit. Groups stay open until the process is gone — closing the group of an
//! exited thread would drop the counts of the threads it created. A thread created
//! in the instant between listing a process's threads and opening its creator's
//! group is missed. Targets are rescanned every `rescan_every` ticks: new
//! matching processes are attached, and processes that are gone are read one last
//! time (perf keeps an exited task's final counts readable), reported, and closed.
//!
//! **Summing units.** The per-thread (or per-CPU) readings of one process (or
//! cgroup) are scaled per unit and then summed, see [`combine`].

use crate::appmetric::{AppMetrics, AppSource};
use crate::backend::{BackendKind, CountTarget, CounterBackend, GroupId, GroupReading};
use crate::catalog::Catalog;
use crate::derived::{self, CpiPenalties};
use crate::event::perf_type;
use crate::procfs::ProcfsSampler;
use crate::target::{online_cpus, Resolved, Resolver, TargetSelector};
use crate::{Event, PmuError};
use hwqos_core::metric::names;
use hwqos_core::{CounterReading, Frame, MetricName, Sample, Scope, ScopeLabel, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;

/// What to monitor and how (the engine part of the monitor's configuration).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplerConfig {
    /// Processes, threads, cgroups and units to count per target.
    pub targets: Vec<TargetSelector>,
    /// Also count every CPU system-wide (one `cpu:N` scope each).
    pub per_cpu: bool,
    /// The CPUs for `per_cpu` and cgroup counting (default: all online CPUs).
    pub cpus: Option<Vec<u32>>,
    /// Event sets (names as the catalog accepts them), rotated one per tick.
    pub event_sets: Vec<Vec<String>>,
    /// Add `/proc` software metrics (system, per CPU, per monitored process).
    pub procfs: bool,
    /// Ticks between target rescans (0: never rescan).
    pub rescan_every: u32,
    /// Cycles per miss for the CPI stack.
    pub cpi_penalties: CpiPenalties,
    /// Application performance metric sources.
    pub app_sources: Vec<AppSource>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            targets: Vec::new(),
            per_cpu: false,
            cpus: None,
            event_sets: Vec::new(),
            procfs: false,
            rescan_every: 10,
            cpi_penalties: CpiPenalties::default(),
            app_sources: Vec::new(),
        }
    }
}

/// An event this node cannot count, and why; defined with the live API
/// protocol, which reports it.
pub use hwqos_api::UnavailableEvent;

#[derive(Clone, Debug)]
struct EventSet {
    events: Vec<Event>,
}

/// One counting unit of a target: a thread, a CPU, or a cgroup on one CPU.
struct Unit {
    target: CountTarget,
    /// One group per event set (`None` where opening failed for this unit).
    groups: Vec<Option<GroupId>>,
    /// Each set's cumulative reading when it was last disabled (zeros at open).
    last: Vec<GroupReading>,
}

struct Monitored {
    label: Option<String>,
    /// Units by tid (tasks) or CPU number (CPU-wide, cgroup).
    units: BTreeMap<u32, Unit>,
    /// The set being counted.
    active: usize,
    /// When the active set was enabled (`None`: not counting yet).
    enabled_at: Option<u64>,
}

/// Buffers one tick reuses, so that a steady tick allocates only what the
/// frame itself holds (and what [`derived::derive`] builds).
#[derive(Default)]
struct TickScratch {
    /// The group just read.
    reading: GroupReading,
    /// The per-unit increments of the target being reported (the first
    /// `n` are this tick's).
    deltas: Vec<GroupReading>,
    /// One event's reading per unit, for [`combine`].
    readings: Vec<CounterReading>,
    /// Per event set: its counts this tick by metric, for
    /// [`derived::derive`]; the keys stay between ticks (no name is cloned
    /// for it once a set has reported).
    counts: Vec<HashMap<MetricName, f64>>,
    /// Targets to drop after this tick.
    dropped: Vec<Scope>,
}

/// Most [`SamplerProblem`]s kept between two [`Sampler::take_problems`];
/// older ones are dropped first (and counted).
pub const MAX_PROBLEMS: usize = 256;

/// Something that went wrong for one target or source while sampling: the
/// sampler carries on without it (the rest of the frame is still right), logs
/// it with `tracing`, and keeps it for the caller, who may act on it (alert,
/// widen permissions, drop the target). Drained with
/// [`Sampler::take_problems`].
#[derive(Clone, Debug, PartialEq)]
pub enum SamplerProblem {
    /// An event set could not be opened on one unit of a target (a task, a
    /// CPU, a cgroup on a CPU): that set is not counted there.
    OpenFailed {
        /// Where the group was to be opened.
        target: CountTarget,
        /// Why (`perf_event_open`'s error, named).
        error: String,
    },
    /// No counter group could be opened on any unit of a target: it is not
    /// monitored (a rescan tries again when it is found anew).
    NotMonitored {
        /// The target left out.
        scope: Scope,
    },
    /// Reading, enabling or disabling a counter group failed this tick for a
    /// reason other than its task having exited.
    CounterFailed {
        /// The target.
        scope: Scope,
        /// The unit: a thread id or a CPU number.
        unit: u32,
        /// Why.
        error: String,
    },
    /// Resolving the target selectors again failed; the current targets are kept.
    RescanFailed {
        /// Why.
        error: String,
    },
    /// The node's `/proc` metrics could not be read this tick.
    ProcfsFailed {
        /// Why.
        error: String,
    },
}

/// The bounded queue behind [`Sampler::take_problems`].
#[derive(Default)]
struct Problems {
    queue: VecDeque<SamplerProblem>,
    dropped: u64,
}

impl Problems {
    fn push(&mut self, problem: SamplerProblem) {
        if self.queue.len() >= MAX_PROBLEMS {
            self.queue.pop_front();
            self.dropped += 1;
        }
        self.queue.push_back(problem);
    }
}

/// Per-target counter rotation, scaling and derived metrics; see the module docs.
pub struct Sampler {
    cfg: SamplerConfig,
    catalog: Catalog,
    backend: Box<dyn CounterBackend>,
    resolver: Resolver,
    sets: Vec<EventSet>,
    unavailable: Vec<UnavailableEvent>,
    targets: BTreeMap<Scope, Monitored>,
    cpus: Vec<u32>,
    procfs: Option<ProcfsSampler>,
    app: Option<AppMetrics>,
    seq: u64,
    ticks: u64,
    prev_time: Option<Timestamp>,
    scratch: TickScratch,
    /// Samples and labels in the previous frame: the next one's capacity.
    last_len: (usize, usize),
    problems: Problems,
}

impl Sampler {
    /// A sampler for this node as every hwqos tool builds one: this node's
    /// event catalog, the `perf_event` backend and `/proc` targets, never
    /// counting the calling process itself. The one place that assembles it.
    pub fn for_this_node(cfg: SamplerConfig) -> Result<Sampler, PmuError> {
        Sampler::new(
            cfg,
            &Catalog::for_this_node(),
            Box::new(crate::backend::perf::PerfBackend::for_this_node()),
            Resolver::for_this_node().excluding_pid(Some(std::process::id())),
        )
    }

    /// Resolves the event names and targets and opens the counter groups
    /// (disabled). Unknown event names, an event set with more hardware events
    /// than the backend can count at once, bad selectors and bad penalties are
    /// errors; events the node cannot count are dropped and listed in
    /// [`Sampler::unavailable`].
    pub fn new(
        cfg: SamplerConfig,
        catalog: &Catalog,
        backend: Box<dyn CounterBackend>,
        resolver: Resolver,
    ) -> Result<Sampler, PmuError> {
        cfg.cpi_penalties.validate().map_err(PmuError::Config)?;
        let mut backend = backend;
        let (sets, unavailable) = resolve_sets(&cfg.event_sets, catalog, backend.as_mut())?;
        let cpus = match &cfg.cpus {
            Some(cpus) if cpus.is_empty() => {
                return Err(PmuError::Config(
                    "the CPU list for per-CPU counting is empty".into(),
                ))
            }
            Some(cpus) => cpus.clone(),
            None => online_cpus(Path::new("/sys")),
        };
        let resolved = resolver.resolve(&cfg.targets)?;
        let app = if cfg.app_sources.is_empty() {
            None
        } else {
            Some(AppMetrics::start(&cfg.app_sources)?)
        };
        let procfs = cfg.procfs.then(|| ProcfsSampler::new("/proc"));
        let mut sampler = Sampler {
            cfg,
            catalog: catalog.clone(),
            backend,
            resolver,
            sets,
            unavailable,
            targets: BTreeMap::new(),
            cpus,
            procfs,
            app,
            seq: 0,
            ticks: 0,
            prev_time: None,
            scratch: TickScratch::default(),
            last_len: (0, 0),
            problems: Problems::default(),
        };
        if sampler.cfg.per_cpu {
            for cpu in sampler.cpus.clone() {
                sampler.attach(
                    Scope::Cpu { cpu },
                    None,
                    vec![(cpu, CountTarget::Cpu { cpu })],
                );
            }
        }
        sampler.follow(&resolved);
        Ok(sampler)
    }

    /// The problems met since the last call (at most [`MAX_PROBLEMS`], the
    /// newest), oldest first, and how many older ones were dropped for
    /// room. Each was also logged with `tracing`.
    pub fn take_problems(&mut self) -> (Vec<SamplerProblem>, u64) {
        let dropped = std::mem::take(&mut self.problems.dropped);
        (self.problems.queue.drain(..).collect(), dropped)
    }

    /// Events removed from their sets because this node cannot count them.
    pub fn unavailable(&self) -> &[UnavailableEvent] {
        &self.unavailable
    }

    /// The event sets being rotated (names as given, unavailable ones removed).
    pub fn event_sets(&self) -> Vec<Vec<String>> {
        self.sets
            .iter()
            .map(|s| s.events.iter().map(|e| e.name.clone()).collect())
            .collect()
    }

    /// Which backend the counts come from (real `perf_event` or the simulator).
    pub fn backend_kind(&self) -> BackendKind {
        self.backend.kind()
    }

    /// The scopes currently counted.
    pub fn targets(&self) -> Vec<Scope> {
        self.targets.keys().cloned().collect()
    }

    /// Replaces the event sets at runtime. Atomic: on error (unknown event, set
    /// too large) the old sets stay in place. Counting restarts with the first
    /// new set at the next tick.
    pub fn set_event_sets(&mut self, sets: Vec<Vec<String>>) -> Result<(), PmuError> {
        let (new_sets, unavailable) = resolve_sets(&sets, &self.catalog, self.backend.as_mut())?;
        for target in self.targets.values_mut() {
            for unit in target.units.values() {
                for g in unit.groups.iter().flatten() {
                    self.backend.close(*g);
                }
            }
        }
        self.sets = new_sets;
        self.unavailable = unavailable;
        self.cfg.event_sets = sets;
        let scopes: Vec<Scope> = self.targets.keys().cloned().collect();
        for scope in scopes {
            let Some(mut target) = self.targets.remove(&scope) else {
                continue;
            };
            target.active = 0;
            target.enabled_at = None;
            let units = std::mem::take(&mut target.units);
            for (key, unit) in units {
                if let Some(u) = open_unit(
                    self.backend.as_mut(),
                    &self.sets,
                    unit.target,
                    &mut self.problems,
                ) {
                    target.units.insert(key, u);
                }
            }
            if !target.units.is_empty() || self.sets.is_empty() {
                self.targets.insert(scope, target);
            }
        }
        Ok(())
    }

    /// Takes one tick: reads and rotates every target's counters, adds procfs
    /// and application metrics. Never fails as a whole: a target whose tasks
    /// vanished is dropped, other per-target errors are logged.
    ///
    /// **The first call starts counting and returns a frame without counter
    /// samples** (there is no interval yet); each later call reports what the
    /// event set that was enabled counted since the previous call. A target
    /// that appears later reports from the tick after it appeared.
    ///
    /// Counting this process's page faults while it touches fresh pages:
    ///
    /// ```
    /// use hwqos_pmu::{Sampler, SamplerConfig, Scope, TargetSelector, Timestamp};
    ///
    /// let me = std::process::id();
    /// let mut sampler = Sampler::for_this_node(SamplerConfig {
    ///     targets: vec![TargetSelector::Pid(me)],
    ///     event_sets: vec![vec!["sw.page_faults".into(), "sw.task_clock".into()]],
    ///     ..SamplerConfig::default()
    /// })?;
    /// assert!(sampler.sample(Timestamp::now()).samples.is_empty()); // starts counting
    /// const PAGES: usize = 256;
    /// let mut buf = vec![0u8; PAGES * 4096]; // fresh zero pages, mapped on first write
    /// for page in buf.chunks_mut(4096) {
    ///     page[0] = 1;
    /// }
    /// std::hint::black_box(&buf);
    /// let frame = sampler.sample(Timestamp::now());
    /// let faults = frame.value(&Scope::Process { pid: me }, "sw.page_faults").unwrap();
    /// assert!(faults >= PAGES as f64, "{faults} page faults for {PAGES} fresh pages");
    /// # Ok::<(), hwqos_pmu::PmuError>(())
    /// ```
    pub fn sample(&mut self, time: Timestamp) -> Frame {
        let interval_ns = self
            .prev_time
            .map_or(0, |p| time.mono_ns.saturating_sub(p.mono_ns));
        self.prev_time = Some(time);
        let mut frame = Frame {
            seq: self.seq,
            time,
            interval_ns,
            samples: Vec::with_capacity(self.last_len.0),
            labels: Vec::with_capacity(self.last_len.1),
        };
        self.seq += 1;
        self.ticks += 1;

        let mut gone: Vec<Scope> = Vec::new();
        if self.cfg.rescan_every > 0
            && self.ticks > 1
            && (self.ticks - 1) % u64::from(self.cfg.rescan_every) == 0
        {
            gone = self.rescan();
        }

        // The targets are taken out for the tick (no per-tick list of scopes);
        // those to drop are dropped after it.
        let mut targets = std::mem::take(&mut self.targets);
        let mut dropped = std::mem::take(&mut self.scratch.dropped);
        for (scope, target) in targets.iter_mut() {
            let last_time = gone.contains(scope);
            let alive = self.tick_target(scope, target, time, last_time, &mut frame.samples);
            if !alive {
                // Every task of the target vanished (procfs state goes too).
                dropped.push(scope.clone());
                continue;
            }
            if let Some(label) = &target.label {
                frame.labels.push(ScopeLabel {
                    scope: scope.clone(),
                    name: label.clone(),
                });
            }
            if last_time {
                dropped.push(scope.clone());
            }
        }
        self.targets = targets;
        for scope in dropped.drain(..) {
            self.detach(&scope);
        }
        self.scratch.dropped = dropped;

        if let Some(procfs) = self.procfs.as_mut() {
            match procfs.sample_system(time) {
                Ok(s) => frame.samples.extend(s),
                Err(e) => {
                    tracing::warn!(error = %e, "procfs system metrics");
                    self.problems.push(SamplerProblem::ProcfsFailed {
                        error: e.to_string(),
                    });
                }
            }
            for scope in self.targets.keys() {
                if let Scope::Process { pid } = scope {
                    if let Some(s) = procfs.sample_process(*pid, time) {
                        frame.samples.extend(s);
                    }
                }
            }
        }
        if let Some(app) = self.app.as_mut() {
            frame.samples.extend(app.drain());
        }
        self.last_len = (frame.samples.len(), frame.labels.len());
        frame
    }

    /// Opens groups for new targets and returns the targets that are gone.
    fn rescan(&mut self) -> Vec<Scope> {
        let resolved = match self.resolver.resolve(&self.cfg.targets) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "target rescan failed; keeping the current targets");
                self.problems.push(SamplerProblem::RescanFailed {
                    error: e.to_string(),
                });
                return Vec::new();
            }
        };
        let wanted = self.wanted_scopes(&resolved);
        let gone = self
            .targets
            .keys()
            .filter(|s| !matches!(s, Scope::Cpu { .. }) && !wanted.contains(s))
            .cloned()
            .collect();
        self.follow(&resolved);
        gone
    }

    fn cgroup_scope(&self, dir: &Path) -> Scope {
        let rel = self
            .resolver
            .cgroup2_root()
            .and_then(|root| dir.strip_prefix(root).ok())
            .map(|r| format!("/{}", r.display()))
            .unwrap_or_else(|| dir.display().to_string());
        Scope::Cgroup { path: rel }
    }

    fn wanted_scopes(&self, resolved: &Resolved) -> Vec<Scope> {
        let mut out: Vec<Scope> = resolved
            .processes
            .iter()
            .map(|p| Scope::Process { pid: p.pid })
            .collect();
        out.extend(
            resolved
                .threads
                .iter()
                .map(|&(pid, tid)| Scope::Thread { pid, tid }),
        );
        out.extend(resolved.cgroups.iter().map(|d| self.cgroup_scope(d)));
        out
    }

    /// Attaches every resolved target not yet monitored.
    fn follow(&mut self, resolved: &Resolved) {
        for p in &resolved.processes {
            let scope = Scope::Process { pid: p.pid };
            if let Some(known) = self.targets.get_mut(&scope) {
                // A process attached before it exec'd keeps the name it had then
                // until a rescan sees the new one.
                if known.label.as_deref() != Some(p.comm.as_str()) {
                    known.label = Some(p.comm.clone());
                }
                continue;
            }
            let units = p
                .threads
                .iter()
                .map(|&tid| (tid, CountTarget::Task { tid, inherit: true }))
                .collect();
            self.attach(scope, Some(p.comm.clone()), units);
        }
        for &(pid, tid) in &resolved.threads {
            let scope = Scope::Thread { pid, tid };
            if !self.targets.contains_key(&scope) {
                self.attach(
                    scope,
                    None,
                    vec![(
                        tid,
                        CountTarget::Task {
                            tid,
                            inherit: false,
                        },
                    )],
                );
            }
        }
        for dir in &resolved.cgroups {
            let scope = self.cgroup_scope(dir);
            if self.targets.contains_key(&scope) {
                continue;
            }
            let units = self
                .cpus
                .iter()
                .map(|&cpu| {
                    (
                        cpu,
                        CountTarget::Cgroup {
                            path: dir.clone(),
                            cpu,
                        },
                    )
                })
                .collect();
            self.attach(scope, None, units);
        }
    }

    fn attach(&mut self, scope: Scope, label: Option<String>, units: Vec<(u32, CountTarget)>) {
        let mut opened = BTreeMap::new();
        for (key, target) in units {
            if let Some(unit) = open_unit(
                self.backend.as_mut(),
                &self.sets,
                target,
                &mut self.problems,
            ) {
                opened.insert(key, unit);
            }
        }
        if opened.is_empty() && !self.sets.is_empty() {
            tracing::debug!(%scope, "no counter group could be opened; not monitoring it");
            self.problems.push(SamplerProblem::NotMonitored { scope });
            return;
        }
        tracing::debug!(%scope, units = opened.len(), "monitoring");
        self.targets.insert(
            scope,
            Monitored {
                label,
                units: opened,
                active: 0,
                enabled_at: None,
            },
        );
    }

    fn detach(&mut self, scope: &Scope) {
        if let Some(target) = self.targets.remove(scope) {
            for unit in target.units.values() {
                for g in unit.groups.iter().flatten() {
                    self.backend.close(*g);
                }
            }
        }
        if let (Scope::Process { pid }, Some(procfs)) = (scope, self.procfs.as_mut()) {
            procfs.forget(*pid);
        }
        tracing::debug!(%scope, "target gone");
    }

    /// Reads the active set of one target (if it is counting), reports it, and
    /// rotates to the next set (unless the target is being dropped). Returns
    /// whether the target still has units; one without (every task vanished)
    /// is for the caller to drop.
    fn tick_target(
        &mut self,
        scope: &Scope,
        target: &mut Monitored,
        time: Timestamp,
        last_time: bool,
        out: &mut Vec<Sample>,
    ) -> bool {
        let n_sets = self.sets.len();
        if n_sets == 0 {
            return true;
        }
        let backend = self.backend.as_mut();
        let problems = &mut self.problems;
        let scratch = &mut self.scratch;
        let rotate = n_sets > 1 && !last_time;
        if let Some(enabled_at) = target.enabled_at {
            let active = target.active;
            let mut n = 0;
            let mut vanished: Vec<u32> = Vec::new();
            for (key, unit) in target.units.iter_mut() {
                let Some(g) = unit.groups[active] else {
                    continue;
                };
                if rotate {
                    if let Err(e) = backend.disable(g) {
                        note_error(scope, &e, *key, &mut vanished, problems);
                        continue;
                    }
                }
                match backend.read_into(g, &mut scratch.reading) {
                    Ok(()) => {
                        if scratch.deltas.len() == n {
                            scratch.deltas.push(GroupReading::default());
                        }
                        let last = &mut unit.last[active];
                        delta_into(&scratch.reading, last, &mut scratch.deltas[n]);
                        copy_reading(&scratch.reading, last);
                        n += 1;
                    }
                    Err(e) => note_error(scope, &e, *key, &mut vanished, problems),
                }
            }
            for key in vanished {
                if let Some(unit) = target.units.remove(&key) {
                    for g in unit.groups.iter().flatten() {
                        backend.close(*g);
                    }
                }
            }
            let interval = time.mono_ns.saturating_sub(enabled_at);
            if scratch.counts.len() < n_sets {
                scratch.counts.resize_with(n_sets, HashMap::new);
            }
            report(
                scope,
                time,
                &self.sets[active].events,
                &scratch.deltas[..n],
                interval,
                &self.cfg.cpi_penalties,
                &mut ReportScratch {
                    readings: &mut scratch.readings,
                    counts: &mut scratch.counts[active],
                },
                out,
            );
            if rotate {
                target.active = (active + 1) % n_sets;
            }
        }
        if target.units.is_empty() {
            return false;
        }
        if last_time || (target.enabled_at.is_some() && !rotate) {
            if !last_time {
                target.enabled_at = Some(time.mono_ns);
            }
            return true;
        }
        let active = target.active;
        let mut vanished = Vec::new();
        for (key, unit) in target.units.iter_mut() {
            if let Some(g) = unit.groups[active] {
                if let Err(e) = backend.enable(g) {
                    note_error(scope, &e, *key, &mut vanished, problems);
                }
            }
        }
        for key in vanished {
            if let Some(unit) = target.units.remove(&key) {
                for g in unit.groups.iter().flatten() {
                    backend.close(*g);
                }
            }
        }
        target.enabled_at = Some(time.mono_ns);
        !target.units.is_empty()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        for target in self.targets.values() {
            for unit in target.units.values() {
                for g in unit.groups.iter().flatten() {
                    self.backend.close(*g);
                }
            }
        }
        if let Some(app) = self.app.take() {
            app.stop();
        }
    }
}

fn note_error(
    scope: &Scope,
    e: &PmuError,
    key: u32,
    vanished: &mut Vec<u32>,
    problems: &mut Problems,
) {
    match e {
        PmuError::NoSuchTask { .. } => {
            tracing::debug!(%scope, unit = key, "task vanished");
            vanished.push(key);
        }
        other => {
            tracing::warn!(%scope, unit = key, error = %other, "counter group failed this tick");
            problems.push(SamplerProblem::CounterFailed {
                scope: scope.clone(),
                unit: key,
                error: other.to_string(),
            });
        }
    }
}

/// `now − before` per value (wrapping) and per time (saturating), into `out`
/// (its buffer reused).
fn delta_into(now: &GroupReading, before: &GroupReading, out: &mut GroupReading) {
    out.time_enabled = now.time_enabled.saturating_sub(before.time_enabled);
    out.time_running = now.time_running.saturating_sub(before.time_running);
    out.values.clear();
    out.values.extend(
        now.values
            .iter()
            .enumerate()
            .map(|(i, v)| v.wrapping_sub(before.values.get(i).copied().unwrap_or(0))),
    );
}

/// Copies `from` into `to`, reusing `to`'s buffer.
fn copy_reading(from: &GroupReading, to: &mut GroupReading) {
    to.time_enabled = from.time_enabled;
    to.time_running = from.time_running;
    to.values.clone_from(&from.values);
}

/// Opens one group per event set on `target`. `None` if the task is gone;
/// sets that fail otherwise are skipped for this unit (logged, and kept in
/// `problems`).
fn open_unit(
    backend: &mut dyn CounterBackend,
    sets: &[EventSet],
    target: CountTarget,
    problems: &mut Problems,
) -> Option<Unit> {
    let mut groups = Vec::with_capacity(sets.len());
    for set in sets {
        match backend.open_group(&target, &set.events) {
            Ok(g) => groups.push(Some(g)),
            Err(PmuError::NoSuchTask { .. }) => {
                for g in groups.into_iter().flatten() {
                    backend.close(g);
                }
                return None;
            }
            Err(e) => {
                tracing::warn!(?target, error = %e, "cannot open an event set on this target");
                problems.push(SamplerProblem::OpenFailed {
                    target: target.clone(),
                    error: e.to_string(),
                });
                groups.push(None);
            }
        }
    }
    Some(Unit {
        target,
        last: vec![GroupReading::default(); groups.len()],
        groups,
    })
}

/// Resolves names, checks set sizes against the backend's capacity and probes
/// availability. Unknown names and too-large sets are errors.
fn resolve_sets(
    names: &[Vec<String>],
    catalog: &Catalog,
    backend: &mut dyn CounterBackend,
) -> Result<(Vec<EventSet>, Vec<UnavailableEvent>), PmuError> {
    let mut resolved: Vec<Vec<Event>> = Vec::with_capacity(names.len());
    let mut unavailable: Vec<UnavailableEvent> = Vec::new();
    for set in names {
        let mut events = Vec::with_capacity(set.len());
        for name in set {
            match catalog.resolve(name) {
                Ok(event) => events.push(event),
                // Well-formed, but this CPU model has no encoding for it.
                Err(PmuError::Unavailable { name, reason }) => {
                    if !unavailable.iter().any(|u| u.name == name) {
                        unavailable.push(UnavailableEvent { name, reason });
                    }
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(capacity) = backend.capacity() {
            let hw = events
                .iter()
                .filter(|e| e.attr.type_ != perf_type::SOFTWARE)
                .count();
            if hw > capacity {
                return Err(PmuError::SetTooLarge {
                    set: set.clone(),
                    len: hw,
                    capacity,
                });
            }
        }
        resolved.push(events);
    }
    let mut verdicts: HashMap<String, bool> = HashMap::new();
    let mut sets = Vec::new();
    for events in resolved {
        let mut kept = Vec::new();
        for event in events {
            let ok = match verdicts.get(&event.name) {
                Some(ok) => *ok,
                None => {
                    let ok = match backend.probe(&event) {
                        Ok(()) => true,
                        Err(e) => {
                            let reason = match e {
                                PmuError::Unavailable { reason, .. }
                                | PmuError::Permission { reason, .. } => reason,
                                other => other.to_string(),
                            };
                            tracing::info!(event = %event.name, %reason, "event unavailable");
                            unavailable.push(UnavailableEvent {
                                name: event.name.clone(),
                                reason,
                            });
                            false
                        }
                    };
                    verdicts.insert(event.name.clone(), ok);
                    ok
                }
            };
            if ok {
                kept.push(event);
            }
        }
        if !kept.is_empty() {
            sets.push(EventSet { events: kept });
        }
    }
    Ok((sets, unavailable))
}

/// Sums the readings of one event over the units of a target (threads of a
/// process, CPUs of a cgroup).
///
/// Each unit is scaled on its own (`raw × enabled / running`) and the scaled
/// values are summed — summing raw counts and times first would weight units by
/// their enabled time rather than their counts. Units whose counter never ran
/// while enabled have no estimate of their own; they are covered by
/// extrapolating the others' total to the whole enabled time
/// (`S = S_known × E_all / E_known`).
///
/// The returned reading keeps the summed `raw` and enabled time and sets
/// `time_running` so that its [`CounterReading::scaled`] equals `S` (exactly when
/// no unit was multiplexed, to within rounding otherwise); the exact `S` is
/// returned alongside. `None` when no unit could be scaled.
pub fn combine(readings: &[CounterReading]) -> Option<(CounterReading, f64)> {
    let mut raw: u64 = 0;
    let mut e_all: u64 = 0;
    let mut e_known: u64 = 0;
    let mut s_known = 0.0;
    let mut running: u64 = 0;
    let mut any_known = false;
    let mut multiplexed = false;
    for r in readings {
        raw = raw.wrapping_add(r.raw);
        e_all += r.time_enabled;
        running += r.time_running.min(r.time_enabled);
        multiplexed |= r.multiplexed();
        if let Some(s) = r.scaled() {
            any_known = true;
            s_known += s;
            e_known += r.time_enabled;
        }
    }
    if !any_known {
        return None;
    }
    let scaled = if e_known > 0 && e_known < e_all {
        s_known * e_all as f64 / e_known as f64
    } else {
        s_known
    };
    let time_running = if !multiplexed {
        e_all.max(running)
    } else if scaled > 0.0 {
        ((raw as f64 * e_all as f64 / scaled).round() as u64).min(e_all)
    } else {
        running
    };
    Some((
        CounterReading {
            raw,
            time_enabled: if multiplexed {
                e_all
            } else {
                e_all.max(running)
            },
            time_running,
        },
        scaled,
    ))
}

/// The buffers [`report`] reuses from tick to tick.
struct ReportScratch<'a> {
    /// One event's reading per unit.
    readings: &'a mut Vec<CounterReading>,
    /// The set's counts by metric (keys kept between calls, values replaced).
    counts: &'a mut HashMap<MetricName, f64>,
}

/// Turns the per-unit deltas of one set into counter samples plus derived metrics.
#[allow(clippy::too_many_arguments)]
fn report(
    scope: &Scope,
    time: Timestamp,
    events: &[Event],
    deltas: &[GroupReading],
    interval_ns: u64,
    penalties: &CpiPenalties,
    scratch: &mut ReportScratch<'_>,
    out: &mut Vec<Sample>,
) {
    if deltas.is_empty() {
        return;
    }
    let counts = &mut *scratch.counts;
    // Mark every kept metric absent; the events that report this tick set
    // theirs, and the absent ones are removed below.
    for v in counts.values_mut() {
        *v = f64::NAN;
    }
    for (i, event) in events.iter().enumerate() {
        let readings = &mut *scratch.readings;
        readings.clear();
        readings.extend(deltas.iter().map(|d| CounterReading {
            raw: d.values.get(i).copied().unwrap_or(0),
            time_enabled: d.time_enabled,
            time_running: d.time_running,
        }));
        let Some((reading, value)) = combine(readings) else {
            tracing::debug!(%scope, event = %event.name, "counter never ran this interval");
            continue;
        };
        if let Some(mut sample) =
            Sample::counter(time, scope.clone(), event.metric.clone(), reading)
        {
            sample.value = value;
            out.push(sample);
            match counts.get_mut(&event.metric) {
                Some(v) => *v = value,
                None => {
                    counts.insert(event.metric.clone(), value);
                }
            }
        }
    }
    // A scaled count is never NaN (finite raw and times), so NaN means absent.
    if counts.values().any(|v| v.is_nan()) {
        counts.retain(|_, v| !v.is_nan());
    }
    // A CPU-wide task-clock also runs while the CPU idles, so over a CPU it
    // measures the interval, not busy time: a CPU's utilization is /proc/stat's
    // non-idle share (`os.cpu.util`), never task-clock over the interval.
    let counts_only_busy_time = !matches!(scope, Scope::Cpu { .. } | Scope::System);
    for (metric, value) in derived::derive(counts, interval_ns, penalties) {
        if !counts_only_busy_time && metric.as_str() == names::DERIVED_CPU_UTILIZATION {
            continue;
        }
        out.push(Sample::gauge(time, scope.clone(), metric, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(raw: u64, e: u64, run: u64) -> CounterReading {
        CounterReading {
            raw,
            time_enabled: e,
            time_running: run,
        }
    }

    #[test]
    fn a_cpu_scope_has_no_task_clock_utilization() {
        let event = Event {
            name: "task-clock".into(),
            metric: MetricName::from_static("sw.task_clock"),
            attr: crate::EventAttr {
                type_: crate::event::perf_type::SOFTWARE,
                config: 1,
                config1: 0,
                config2: 0,
                modes: Default::default(),
            },
            source: crate::EventSource::Generic,
        };
        let whole_interval = GroupReading {
            time_enabled: 1_000_000,
            time_running: 1_000_000,
            values: vec![1_000_000],
        };
        let util = |scope: Scope| {
            let mut out = Vec::new();
            report(
                &scope,
                Timestamp {
                    mono_ns: 0,
                    wall_ns: 0,
                },
                std::slice::from_ref(&event),
                std::slice::from_ref(&whole_interval),
                1_000_000,
                &CpiPenalties::default(),
                &mut ReportScratch {
                    readings: &mut Vec::new(),
                    counts: &mut HashMap::new(),
                },
                &mut out,
            );
            assert!(out.iter().any(|s| s.metric.as_str() == "sw.task_clock"));
            out.iter()
                .find(|s| s.metric.as_str() == "derived.cpu_utilization")
                .map(|s| s.value)
        };
        assert_eq!(util(Scope::Process { pid: 1 }), Some(1.0));
        assert_eq!(
            util(Scope::Cpu { cpu: 0 }),
            None,
            "idle time is not busy time"
        );
    }

    #[test]
    fn combining_unmultiplexed_units_is_a_plain_sum() {
        let (c, v) = combine(&[r(100, 1_000, 1_000), r(50, 400, 400), r(0, 0, 0)]).unwrap();
        assert_eq!(c, r(150, 1_400, 1_400));
        assert_eq!(v, 150.0);
        assert!(!c.multiplexed());
    }

    #[test]
    fn combining_scales_each_unit_before_summing() {
        // Unit A ran half its enabled time, unit B all of it.
        let (c, v) = combine(&[r(100, 1_000, 500), r(300, 1_000, 1_000)]).unwrap();
        assert_eq!(v, 200.0 + 300.0);
        assert!(c.multiplexed());
        assert!((c.scaled().unwrap() - v).abs() / v < 1e-6, "{c:?}");
        // A unit that never ran is extrapolated from the others.
        let (_, v) = combine(&[r(100, 1_000, 1_000), r(0, 1_000, 0)]).unwrap();
        assert_eq!(v, 200.0);
        assert!(combine(&[r(0, 1_000, 0)]).is_none());
    }

    #[test]
    fn config_from_toml_with_defaults_and_unknown_keys_rejected() {
        let cfg: SamplerConfig = toml::from_str(
            r#"
            targets = ["pid:1", "regex:^nginx"]
            event_sets = [["hw.cycles", "hw.instructions"], ["sw.page_faults"]]
            [cpi_penalties]
            llc = 220.0
            "#,
        )
        .unwrap();
        assert_eq!(cfg.targets.len(), 2);
        assert_eq!(cfg.event_sets[1], vec!["sw.page_faults".to_string()]);
        assert_eq!(cfg.rescan_every, 10);
        assert_eq!(cfg.cpi_penalties.llc, 220.0);
        let err = toml::from_str::<SamplerConfig>("event_set = []").unwrap_err();
        assert!(err.to_string().contains("event_set"), "{err}");
    }
}
