//! The userspace quota backend: works on any stock kernel with `perf_event`.
//!
//! Per thread of an enforced process and per quota event it opens one perf
//! counter whose sample period is the quota, re-armed at every period
//! boundary (see [`arm`]); its value at the boundary is the period's exact
//! usage. When a counter overflows the kernel sends a signal:
//!
//! - [`OverflowRoute::Agent`]: a real-time signal to the
//!   backend's overflow thread (`F_SETOWN_EX` with `F_OWNER_TID`, `F_SETSIG`,
//!   `O_ASYNC`), read through a `signalfd` with the counter's fd in
//!   `ssi_fd`. In thread scope each thread's counter is armed with the whole
//!   budget for the period, so any overflow means the budget is used up and
//!   the thread throttles the process at once (cgroup v2 freeze or `SIGSTOP`, see
//!   [`ThrottleMethod`]).
//! - [`OverflowRoute::Direct`] (the default): `SIGSTOP` straight to the counted thread
//!   (`F_SETOWN_EX` to the target, `F_SETSIG` = `SIGSTOP`): the kernel stops
//!   the process on its way back to user space after the overflowing event,
//!   with no agent wake-up in between (only with [`ThrottleMethod::Sigstop`]).
//!   This is the precise route: the agent route's overshoot is the agent's
//!   wake-up latency times the event rate (docs/experiments/sra.md).
//!
//! What a quota bounds is the quota set's [`QuotaScope`]:
//!
//! - [`QuotaScope::Thread`] (the default): each counter is armed with the whole budget, on
//!   the route above. A process is stopped as soon as one of its threads has
//!   counted the quota, so a period's total is the quota plus whatever the
//!   other threads counted meanwhile — exact for a process with one busy
//!   thread, at most `threads × quota` in the worst case.
//! - [`QuotaScope::Process`]: the sum over the threads. What
//!   is left of the period's allowance is split among the live threads'
//!   counters by weight (see `split`, each share at least `min_share`, the
//!   shares summing to at most what is left). When one share runs out the
//!   agent is signalled: it rescans the thread list, reads every counter
//!   and re-splits the rest with `PERF_EVENT_IOC_PERIOD` and no reset
//!   (counts stay exact), or throttles when less than threads × the minimum
//!   share is left, and then `park`s every counter so none overflows again
//!   that period. On the direct route each counter still stops its thread
//!   in the kernel at the end of its share, and a second counter per thread
//!   and event (`notify`, opened and armed first, so it never overflows
//!   later) signals the agent, which continues the process
//!   after the re-split: the agent's latency costs the process run time,
//!   never quota. On the agent route there is one counter, signalling the
//!   agent, and the agent throttles as soon as what is left is no more than
//!   its own wake-up lets through (overshoot = latency × event rate).
//!   Counters with `inherit` were not used: the kernel applies
//!   `PERF_EVENT_IOC_PERIOD` to the parent event only, so an inherited
//!   thread's budget could not be re-split.
//!
//! A renewal thread wakes at every period boundary (absolute deadlines, final
//! approach with `hwqos_core::ticker::sleep_until`), reads each counter and
//! re-arms it at once, and thaws the process. With
//! [`UserspaceOptions::lending`] unused budget moves between processes
//! (MemGuard-style, agent route). Before
//! throttling anything the backend registers it with the crash guardian
//! ([`crate::guardian`]) and, for `SIGSTOP`, arms a kernel-held dead man's
//! switch ([`crate::deadman`]) that continues the process when the agent
//! and its guardian are both gone, so no process stays stopped if they die.

use super::{EventQuota, PeriodUsage, QuotaBackend, QuotaScope, QuotaSet, QuotaStats};
use crate::guardian::GuardianClient;
use crate::SchedError;
use hwqos_core::ticker::{sleep_until, LatencyHistogram, SlackEstimator};
use hwqos_core::time::monotonic_ns;
use hwqos_core::SleepStrategy;
use perf_event_open_sys as sys;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Per-period usage kept per process for statistics (bounded).
pub const HISTORY_PERIODS: usize = 8192;

/// How a process is throttled once its quota is used up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ThrottleMethod {
    /// `SIGSTOP` the process, `SIGCONT` at renewal.
    Sigstop,
    /// Move the process into its own cgroup under this cgroup2 directory and
    /// freeze it through `cgroup.freeze`.
    Freeze {
        /// The cgroup2 directory under which each process gets its own cgroup.
        parent: PathBuf,
    },
}

/// Where the overflow signal goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverflowRoute {
    /// A real-time signal to the backend's overflow thread, which throttles
    /// the process (either [`ThrottleMethod`]; needed for lending). Overshoot
    /// is the agent's wake-up latency times the event rate.
    Agent,
    /// `SIGSTOP` from the kernel straight to the counted thread (the default,
    /// the precise route): only with [`ThrottleMethod::Sigstop`], no lending,
    /// and only for processes the kernel lets this one signal (same user or
    /// root).
    Direct,
}

/// How the userspace backend runs; [`Default`] is `/proc`, SIGSTOP, the direct
/// route, `SIGRTMIN+4`, `SCHED_FIFO` 10, no lending.
#[derive(Clone, Debug)]
pub struct UserspaceOptions {
    /// Where `/proc` is (thread lists, status); a fake tree in tests.
    pub proc_root: PathBuf,
    /// How a process is throttled when its quota is used up.
    pub method: ThrottleMethod,
    /// Where the counter-overflow signal goes.
    pub route: OverflowRoute,
    /// Offset from `SIGRTMIN` of the overflow signal.
    pub rt_signal_offset: i32,
    /// `SCHED_FIFO` priority of the overflow and renewal threads (0 = leave
    /// them `SCHED_OTHER`).
    pub realtime_priority: i32,
    /// MemGuard-style lending (agent route only): at each period a process
    /// whose previous period used less than its quota donates the unused
    /// part (above a margin of 1/8 of the quota) to a pool shared by the
    /// processes with the same event and period; a process that exhausts its
    /// budget borrows from the pool in chunks of 1/4 of its quota before it
    /// is throttled. Periods are aligned to a common grid so they renew together.
    pub lending: bool,
}

/// Lending pools: (event encoding, period) → events available this period.
type PoolKey = (u32, u64, u64, u64, u64);

fn pool_key(e: &EventQuota, period_ns: u64) -> PoolKey {
    (
        e.attr.type_,
        e.attr.config,
        e.attr.config1,
        e.attr.config2,
        period_ns,
    )
}

impl Default for UserspaceOptions {
    fn default() -> Self {
        UserspaceOptions {
            proc_root: PathBuf::from("/proc"),
            method: ThrottleMethod::Sigstop,
            route: OverflowRoute::Direct,
            rt_signal_offset: 4,
            realtime_priority: 10,
            lending: false,
        }
    }
}

struct Counter {
    quota: OwnedFd,
    /// The count at which the counter overflows next (its budget this
    /// period, plus what it borrowed).
    armed: u64,
    /// Events counted in the previous period: this thread's weight in the
    /// process-scope split.
    last: u64,
    /// Process scope on the direct route: a second counter of the same
    /// event and budget whose overflow signals the agent (to re-split),
    /// while `quota`'s overflow stops the thread in the kernel. Opened and
    /// armed before `quota`, so it never overflows after it (see
    /// `open_thread`).
    notify: Option<OwnedFd>,
}

impl Counter {
    /// [`arm`] the notifier, then the counter.
    fn arm(&mut self, budget: u64) -> Result<(), SchedError> {
        if let Some(n) = &self.notify {
            arm(n, budget)?;
        }
        self.armed = budget;
        arm(&self.quota, budget)
    }

    /// [`extend`] the notifier, then the counter, by `more` from `count`.
    fn extend(&mut self, count: u64, more: u64) -> Result<(), SchedError> {
        if let Some(n) = &self.notify {
            extend(n, more)?;
        }
        self.armed = count + more;
        extend(&self.quota, more)
    }
}

struct ThreadCounters {
    /// One per quota event.
    counters: Vec<Counter>,
}

struct Task {
    pid: u32,
    quotas: QuotaSet,
    threads: BTreeMap<u32, ThreadCounters>,
    /// Counts of threads that exited during the current period.
    exited: Vec<u64>,
    /// Counts of all completed periods.
    completed: Vec<u64>,
    /// Process scope: this period's budget per event (the quota, or
    /// lending's prediction plus what was borrowed).
    allowance: Vec<u64>,
    /// Process scope: per event, a decaying maximum of what the process
    /// counted between its counters' overflows and the agent's re-split
    /// (the agent's wake-up latency times the event rate).
    late: Vec<u64>,
    next_deadline_ns: u64,
    /// When the current period began (the last renewal, or the start).
    period_started_ns: u64,
    throttled_since_ns: Option<u64>,
    throttled_this_period: bool,
    cgroup: Option<PathBuf>,
    original_cgroup: Option<PathBuf>,
    /// `SIGCONT` from the kernel if every holder dies (`SIGSTOP` throttling).
    /// Declared after `threads`, so an orderly drop closes the counters first.
    _deadman: Option<crate::deadman::DeadMan>,
    stats: QuotaStats,
    history: VecDeque<PeriodUsage>,
}

struct State {
    tasks: BTreeMap<u32, Task>,
    /// quota counter fd → (pid, tid, event index)
    by_fd: HashMap<RawFd, (u32, u32, usize)>,
    guardian: Option<GuardianClient>,
    /// Overflow signal read → throttle issued, ns.
    stop_latency: LatencyHistogram,
    renew_lateness: LatencyHistogram,
    missed_periods: u64,
    errors: u64,
    pools: HashMap<PoolKey, u64>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    stop: AtomicBool,
    overflow_tid: AtomicI32,
    opts: UserspaceOptions,
}

/// The userspace backend (see the module docs).
pub struct UserspaceBackend {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl UserspaceBackend {
    /// Starts the overflow and renewal threads. `guardian` receives every
    /// process (or cgroup) before it is first throttled.
    pub fn start(
        opts: UserspaceOptions,
        guardian: Option<GuardianClient>,
    ) -> Result<UserspaceBackend, SchedError> {
        if let ThrottleMethod::Freeze { parent } = &opts.method {
            std::fs::create_dir_all(parent).map_err(|e| SchedError::File {
                path: parent.clone(),
                source: e,
            })?;
            if opts.route == OverflowRoute::Direct {
                return Err(SchedError::invalid(
                    "userspace backend options",
                    "the direct overflow route stops with SIGSTOP; it cannot freeze cgroups",
                ));
            }
        }
        if opts.lending && opts.route == OverflowRoute::Direct {
            return Err(SchedError::invalid(
                "userspace backend options",
                "lending needs the agent route (the direct route stops in the kernel, with no chance to borrow)",
            ));
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                tasks: BTreeMap::new(),
                by_fd: HashMap::new(),
                guardian,
                stop_latency: LatencyHistogram::new(),
                renew_lateness: LatencyHistogram::new(),
                missed_periods: 0,
                errors: 0,
                pools: HashMap::new(),
            }),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            overflow_tid: AtomicI32::new(0),
            opts,
        });
        let mut threads = Vec::new();
        // Process-scope quotas re-split their budget at every overflow, so
        // the overflow thread runs on both routes.
        {
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("sra-overflow".into())
                    .spawn(move || overflow_thread(s, ready_tx))
                    .map_err(|e| SchedError::io("spawn overflow thread", e))?,
            );
            ready_rx
                .recv()
                .map_err(|_| SchedError::invalid("overflow thread", "exited during start"))??;
        }
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("sra-renew".into())
                .spawn(move || renewal_thread(s))
                .map_err(|e| SchedError::io("spawn renewal thread", e))?,
        );
        Ok(UserspaceBackend { shared, threads })
    }

    /// Lateness of period renewals after their deadline.
    pub fn renew_lateness(&self) -> LatencyHistogram {
        lock(&self.shared.state).renew_lateness.clone()
    }

    /// Renewals whose deadline had passed by more than a period.
    pub fn missed_periods(&self) -> u64 {
        lock(&self.shared.state).missed_periods
    }
}

impl Drop for UserspaceBackend {
    fn drop(&mut self) {
        self.release_all();
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl QuotaBackend for UserspaceBackend {
    fn name(&self) -> &'static str {
        "userspace"
    }

    fn enforce(&mut self, pid: u32, quotas: &QuotaSet) -> Result<(), SchedError> {
        quotas.validate()?;
        let opts = &self.shared.opts;
        let guard = crate::contract::Guard {
            proc_root: opts.proc_root.clone(),
            own: [std::process::id()]
                .into_iter()
                .chain(
                    lock(&self.shared.state)
                        .guardian
                        .as_ref()
                        .and_then(|g| g.child_pid()),
                )
                .collect(),
            own_children: false,
        };
        if guard.is_own(pid) {
            return Err(SchedError::invalid(
                "quota target",
                format!("pid {pid} is the agent itself, one of its threads or its guardian"),
            ));
        }
        if opts.route == OverflowRoute::Direct {
            direct_route_allowed(&opts.proc_root, pid)?;
        }
        let mut st = lock(&self.shared.state);
        if st.tasks.contains_key(&pid) {
            release_locked(&mut st, opts, pid);
        }
        let tids =
            crate::proc::threads(&opts.proc_root, pid).ok_or(SchedError::Vanished { pid })?;
        let mut deadman = None;
        let (cgroup, original_cgroup) = match &opts.method {
            ThrottleMethod::Sigstop => {
                if let Some(g) = st.guardian.as_mut() {
                    g.register_pid(pid)
                        .map_err(|e| SchedError::io("register with the guardian", e))?;
                }
                deadman = Some(crate::deadman::DeadMan::arm(pid)?);
                let status =
                    std::fs::read_to_string(opts.proc_root.join(pid.to_string()).join("status"))
                        .unwrap_or_default();
                if !crate::deadman::DeadMan::can_signal(&status) {
                    tracing::warn!(
                        pid,
                        "the kernel will not deliver the dead man's SIGCONT to this process \
                         (another user, and the agent is not root): if the agent and its \
                         guardian both die, only `hwqos-sra thaw` (the unit's ExecStopPost) \
                         continues it"
                    );
                }
                (None, None)
            }
            ThrottleMethod::Freeze { parent } => {
                let original = crate::proc::cgroup2_path(&opts.proc_root, pid);
                let dir = parent.join(format!("pid-{pid}"));
                if let Some(g) = st.guardian.as_mut() {
                    g.register_cgroup(&dir)
                        .map_err(|e| SchedError::io("register with the guardian", e))?;
                }
                move_into_cgroup(&dir, pid)?;
                (Some(dir), original)
            }
        };
        let mut task = Task {
            pid,
            quotas: quotas.clone(),
            threads: BTreeMap::new(),
            exited: vec![0; quotas.events.len()],
            completed: vec![0; quotas.events.len()],
            allowance: quotas.events.iter().map(|e| e.quota).collect(),
            late: vec![0; quotas.events.len()],
            next_deadline_ns: 0,
            period_started_ns: 0,
            throttled_since_ns: None,
            throttled_this_period: false,
            cgroup,
            original_cgroup,
            _deadman: deadman,
            stats: QuotaStats::new(pid, quotas),
            history: VecDeque::new(),
        };
        let owner = self.shared.overflow_tid.load(Ordering::SeqCst);
        for tid in tids {
            match open_thread(tid, &quotas.events, opts, owner, quotas.scope) {
                Ok(tc) => {
                    for (i, c) in tc.counters.iter().enumerate() {
                        st.by_fd.insert(c.quota.as_raw_fd(), (pid, tid, i));
                        if let Some(n) = &c.notify {
                            st.by_fd.insert(n.as_raw_fd(), (pid, tid, i));
                        }
                    }
                    task.threads.insert(tid, tc);
                }
                Err(e) if e.is_vanished() => continue,
                Err(e) => {
                    drop(task);
                    return Err(e);
                }
            }
        }
        if task.threads.is_empty() {
            return Err(SchedError::Vanished { pid });
        }
        let period_ns = quotas.period.as_nanos() as u64;
        task.period_started_ns = monotonic_ns();
        task.next_deadline_ns = if opts.lending {
            // On the common grid, so processes sharing a pool renew together.
            (monotonic_ns() / period_ns + 1) * period_ns
        } else {
            monotonic_ns() + period_ns
        };
        if quotas.scope == QuotaScope::Process {
            arm_process(&mut task)?;
        } else {
            for tc in task.threads.values() {
                for (i, c) in tc.counters.iter().enumerate() {
                    arm(&c.quota, quotas.events[i].quota)?;
                }
            }
        }
        st.tasks.insert(pid, task);
        drop(st);
        self.shared.wake.notify_all();
        tracing::info!(pid, backend = "userspace", ?quotas, "enforcing quotas");
        Ok(())
    }

    fn release(&mut self, pid: u32) -> Result<(), SchedError> {
        let mut st = lock(&self.shared.state);
        release_locked(&mut st, &self.shared.opts, pid);
        Ok(())
    }

    fn stats(&self, pid: u32) -> Option<QuotaStats> {
        let st = lock(&self.shared.state);
        let t = st.tasks.get(&pid)?;
        let mut s = t.stats.clone();
        s.throttled = t.throttled_since_ns.is_some();
        let current = period_sums(t);
        let totals: Vec<u64> = current
            .iter()
            .zip(&t.completed)
            .map(|(a, b)| a + b)
            .collect();
        for (e, total) in s.events.iter_mut().zip(totals) {
            e.total = total;
        }
        Some(s)
    }

    fn enforced(&self) -> Vec<u32> {
        lock(&self.shared.state).tasks.keys().copied().collect()
    }

    fn history(&self, pid: u32) -> Vec<PeriodUsage> {
        lock(&self.shared.state)
            .tasks
            .get(&pid)
            .map(|t| t.history.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Overflow-signal-read → throttle-issued latency (agent route only).
    fn stop_latency(&self) -> Option<LatencyHistogram> {
        (self.shared.opts.route == OverflowRoute::Agent)
            .then(|| lock(&self.shared.state).stop_latency.clone())
    }

    fn check_guardian(&mut self) {
        if let Some(g) = lock(&self.shared.state).guardian.as_mut() {
            g.ensure_alive();
        }
    }

    fn guardian_pid(&self) -> Option<u32> {
        lock(&self.shared.state)
            .guardian
            .as_ref()
            .and_then(|g| g.child_pid())
    }

    fn refresh_threads(&mut self) -> Vec<u32> {
        let opts = &self.shared.opts;
        let owner = self.shared.overflow_tid.load(Ordering::SeqCst);
        let mut st = lock(&self.shared.state);
        let pids: Vec<u32> = st.tasks.keys().copied().collect();
        let mut gone = Vec::new();
        for pid in pids {
            if crate::proc::threads(&opts.proc_root, pid).is_none() {
                tracing::info!(pid, "enforced process exited; releasing");
                release_locked(&mut st, opts, pid);
                gone.push(pid);
                continue;
            }
            let State {
                tasks,
                by_fd,
                pools,
                stop_latency,
                errors,
                ..
            } = &mut *st;
            let task = tasks.get_mut(&pid).expect("listed");
            let Some(new) = sync_threads(task, by_fd, opts, owner) else {
                continue;
            };
            if new.is_empty() {
                continue;
            }
            if task.quotas.scope == QuotaScope::Thread {
                for tid in &new {
                    for (i, c) in task.threads[tid].counters.iter().enumerate() {
                        if let Err(e) = arm(&c.quota, task.quotas.events[i].quota) {
                            tracing::warn!(pid, error = %e, "cannot arm a quota counter");
                        }
                    }
                }
            } else if task.throttled_since_ns.is_some() {
                // Held until the period ends; the renewal re-splits.
                for tid in &new {
                    for c in task
                        .threads
                        .get_mut(tid)
                        .expect("opened")
                        .counters
                        .iter_mut()
                    {
                        let _ = c.arm(1);
                    }
                }
            } else if let Some(idx) = process_round(task, opts, pools) {
                throttle_process(task, opts, idx, monotonic_ns(), stop_latency, errors);
            } else if opts.route == OverflowRoute::Direct {
                thaw(task, opts);
            }
        }
        gone
    }
}

/// Rescans `/proc/PID/task`: folds the counts of threads that exited into
/// `exited` and opens counters (disabled, not armed yet) on new threads.
/// Returns the new threads; `None` when the process is gone.
fn sync_threads(
    task: &mut Task,
    by_fd: &mut HashMap<RawFd, (u32, u32, usize)>,
    opts: &UserspaceOptions,
    owner: i32,
) -> Option<Vec<u32>> {
    let now = crate::proc::threads(&opts.proc_root, task.pid)?;
    let old: Vec<u32> = task.threads.keys().copied().collect();
    for tid in old.iter().filter(|t| now.binary_search(t).is_err()) {
        if let Some(tc) = task.threads.remove(tid) {
            for (i, c) in tc.counters.iter().enumerate() {
                task.exited[i] += crate::counter::read(&c.quota).unwrap_or(0);
                by_fd.remove(&c.quota.as_raw_fd());
                if let Some(n) = &c.notify {
                    by_fd.remove(&n.as_raw_fd());
                }
            }
        }
    }
    let mut added = Vec::new();
    for tid in now {
        if task.threads.contains_key(&tid) {
            continue;
        }
        match open_thread(tid, &task.quotas.events, opts, owner, task.quotas.scope) {
            Ok(tc) => {
                for (i, c) in tc.counters.iter().enumerate() {
                    by_fd.insert(c.quota.as_raw_fd(), (task.pid, tid, i));
                    if let Some(n) = &c.notify {
                        by_fd.insert(n.as_raw_fd(), (task.pid, tid, i));
                    }
                }
                tracing::debug!(pid = task.pid, tid, "counting a new thread");
                task.threads.insert(tid, tc);
                added.push(tid);
            }
            Err(e) => tracing::debug!(pid = task.pid, tid, error = %e, "new thread not counted"),
        }
    }
    Some(added)
}

/// The smallest share a process-scope split gives a thread: 1/512 of the
/// period's allowance (at least 1, and small enough that every thread gets
/// one). A used-up share overflows again every `share` events (every
/// `max(share, 10 µs)` for the clock events); far below the cost of one
/// overflow (interrupt, irq_work, two signals: about 10 µs on this VM) a
/// thread inside the kernel never gets back to user space to stop (see
/// [`park`]). The price: a period ends up to `threads × min_share` short of
/// its allowance (the split stops when less than that is left).
fn min_share(allowance: u64, threads: u64) -> u64 {
    (allowance / 512).min(allowance / threads.max(1)).max(1)
}

/// Splits `remaining` events among threads by weight, each share at least
/// `min` and the shares summing to at most `remaining` when `remaining` ≥
/// `min` × the number of threads.
fn split(remaining: u64, weights: &[u64], min: u64) -> Vec<u64> {
    let n = weights.len() as u64;
    let total: u128 = weights.iter().map(|w| *w as u128).sum::<u128>().max(1);
    let spare = remaining.saturating_sub(n.saturating_mul(min)) as u128;
    weights
        .iter()
        .map(|w| min + (spare * *w as u128 / total) as u64)
        .collect()
}

/// The weights of one event's counters: what each thread counted this
/// period and the last, plus a floor (a quarter of the mean) so an idle
/// thread still gets a share and is noticed when it wakes.
fn weights(counts: &[(u64, u64)]) -> Vec<u64> {
    let sum: u64 = counts.iter().map(|(now, last)| now + last).sum();
    let floor = sum / (4 * counts.len().max(1) as u64) + 1;
    counts
        .iter()
        .map(|(now, last)| now + last + floor)
        .collect()
}

/// A process-scope period's first arming: each event's allowance split by
/// the threads' last-period weights, every counter (and notifier) reset.
fn arm_process(task: &mut Task) -> Result<(), SchedError> {
    for i in 0..task.quotas.events.len() {
        let w = weights(
            &task
                .threads
                .values()
                .map(|tc| (0, tc.counters[i].last))
                .collect::<Vec<_>>(),
        );
        let n = task.threads.len() as u64;
        let shares = split(task.allowance[i], &w, min_share(task.allowance[i], n));
        for (tc, share) in task.threads.values_mut().zip(shares) {
            tc.counters[i].arm(share)?;
        }
    }
    Ok(())
}

/// Below this much left of an event's allowance a process-scope process
/// borrows (lending): 1/64 of the allowance, the thread count, or twice what
/// the process counted during the agent's recent wake-ups, whichever is
/// largest.
fn low_water(allowance: u64, threads: u64, late: u64) -> u64 {
    (allowance / 64).max(threads).max(late.saturating_mul(2))
}

/// A process-scope round, run on an overflow and when new threads appear:
/// reads every counter of the process and, per event, re-splits what is left
/// of the allowance among the live threads (counting on, no reset). Returns
/// the event to throttle on when one is used up: fewer events left than
/// threads, or (agent route) no more than the agent's wake-up would let
/// through. On the direct route every share is also a hard stop in the
/// kernel, so the agent's latency costs the process run time, never quota;
/// the caller continues the process after a re-split.
fn process_round(
    task: &mut Task,
    opts: &UserspaceOptions,
    pools: &mut HashMap<PoolKey, u64>,
) -> Option<usize> {
    let n = task.threads.len() as u64;
    if n == 0 {
        return None;
    }
    let period_ns = task.quotas.period.as_nanos() as u64;
    let direct = opts.route == OverflowRoute::Direct;
    let mut plans = Vec::with_capacity(task.quotas.events.len());
    for i in 0..task.quotas.events.len() {
        let mut sum = task.exited[i];
        let mut late = 0;
        let mut counts = Vec::with_capacity(task.threads.len());
        for tc in task.threads.values() {
            let c = &tc.counters[i];
            let v = crate::counter::read(&c.quota).unwrap_or(0);
            sum += v;
            late += v.saturating_sub(c.armed);
            counts.push((v, c.last));
        }
        task.late[i] = late.max(task.late[i] - task.late[i] / 8);
        let mut remaining = task.allowance[i].saturating_sub(sum);
        if opts.lending && remaining <= low_water(task.allowance[i], n, task.late[i]) {
            let q = &task.quotas.events[i];
            let key = pool_key(q, period_ns);
            let available = pools.get(&key).copied().unwrap_or(0);
            if available > 0 {
                let chunk = available.min((q.quota / 4).max(1));
                pools.insert(key, available - chunk);
                task.allowance[i] += chunk;
                task.stats.events[i].borrowed += chunk;
                remaining += chunk;
            }
        }
        let min = min_share(task.allowance[i], n);
        if remaining < n * min || (!direct && remaining <= task.late[i]) {
            return Some(i);
        }
        plans.push((counts, remaining, min));
    }
    for (i, (counts, remaining, min)) in plans.into_iter().enumerate() {
        let shares = split(remaining, &weights(&counts), min);
        for ((tc, share), (count, _)) in task.threads.values_mut().zip(shares).zip(counts) {
            if let Err(e) = tc.counters[i].extend(count, share) {
                tracing::warn!(pid = task.pid, error = %e, "cannot re-split a quota counter");
            }
        }
    }
    None
}

/// Process scope, once the process is throttled: every counter (and
/// notifier) gets a whole allowance before its next overflow, counting on
/// without a reset, so none overflows again this period.
///
/// A used-up share keeps overflowing every `share` events (for the clock
/// events every `max(share, 10 µs)` of run time, an hrtimer). The last
/// shares of a period are tiny; a thread that is inside the kernel when its
/// share runs out (an idle thread woken by the group stop or the agent's
/// `SIGCONT`, still in the scheduler) sees no return to user space between
/// those overflows on a VM where each one (hrtimer interrupt, irq_work,
/// `SIGSTOP` to itself, a real-time signal to the agent) costs about as long
/// as the period: it never reaches the `SIGSTOP`, runs on, counted, until the
/// period's renewal re-arms it (up to 100 ms of one thread against a 10 ms
/// quota, thousands of signals to the agent; docs/sra.md). Re-armed here,
/// it leaves the kernel and stops.
fn park(task: &mut Task) {
    for (i, a) in task.allowance.iter().enumerate() {
        for tc in task.threads.values_mut() {
            let c = &mut tc.counters[i];
            let count = crate::counter::read(&c.quota).unwrap_or(c.armed);
            if let Err(e) = c.extend(count, (*a).max(1)) {
                tracing::warn!(pid = task.pid, error = %e, "cannot park a quota counter");
            }
        }
    }
}

/// Process scope: [`throttle_now`], then [`park`] every counter, so none
/// overflows again before the period renews.
fn throttle_process(
    task: &mut Task,
    opts: &UserspaceOptions,
    idx: usize,
    got_ns: u64,
    stop_latency: &mut LatencyHistogram,
    errors: &mut u64,
) {
    throttle_now(task, opts, idx, got_ns, stop_latency, errors);
    park(task);
}

/// Throttles `task` now on behalf of event `idx` and records it.
fn throttle_now(
    task: &mut Task,
    opts: &UserspaceOptions,
    idx: usize,
    got_ns: u64,
    stop_latency: &mut LatencyHistogram,
    errors: &mut u64,
) {
    match throttle(task, opts) {
        Ok(()) => {
            let now = monotonic_ns();
            stop_latency.record(now.saturating_sub(got_ns));
            task.throttled_since_ns = Some(now);
            task.throttled_this_period = true;
            task.stats.nr_throttled += 1;
            task.stats.events[idx].overflows += 1;
        }
        Err(e) => {
            *errors += 1;
            tracing::warn!(pid = task.pid, error = %e, "could not throttle");
        }
    }
}

fn move_into_cgroup(dir: &Path, pid: u32) -> Result<(), SchedError> {
    std::fs::create_dir_all(dir).map_err(|e| SchedError::File {
        path: dir.to_path_buf(),
        source: e,
    })?;
    std::fs::write(dir.join("cgroup.procs"), pid.to_string()).map_err(|e| {
        if e.raw_os_error() == Some(libc::ESRCH) {
            SchedError::Vanished { pid }
        } else {
            SchedError::File {
                path: dir.join("cgroup.procs"),
                source: e,
            }
        }
    })
}

fn release_locked(st: &mut State, opts: &UserspaceOptions, pid: u32) {
    let Some(task) = st.tasks.remove(&pid) else {
        return;
    };
    for tc in task.threads.values() {
        for c in &tc.counters {
            st.by_fd.remove(&c.quota.as_raw_fd());
            if let Some(n) = &c.notify {
                st.by_fd.remove(&n.as_raw_fd());
            }
            // Disable first so no overflow stops the process after the thaw.
            // SAFETY: ioctl on an fd we own.
            unsafe { sys::ioctls::DISABLE(c.quota.as_raw_fd(), 0) };
        }
    }
    thaw(&task, opts);
    match (&task.cgroup, &opts.method) {
        (Some(dir), ThrottleMethod::Freeze { .. }) => {
            if let Some(mount) = cgroup2_mount_of(dir) {
                let back = mount.join(task.original_cgroup.clone().unwrap_or_default());
                let _ = std::fs::write(back.join("cgroup.procs"), pid.to_string());
            }
            let _ = std::fs::remove_dir(dir);
            if let Some(g) = st.guardian.as_mut() {
                let _ = g.forget_cgroup(dir);
            }
        }
        _ => {
            if let Some(g) = st.guardian.as_mut() {
                let _ = g.forget_pid(pid);
            }
        }
    }
    tracing::info!(pid, "released");
}

/// The cgroup2 mount point above a directory (the parent of the first
/// ancestor that has no `cgroup.procs`... kept simple: the nearest ancestor
/// whose parent has no `cgroup.controllers`).
fn cgroup2_mount_of(dir: &Path) -> Option<PathBuf> {
    let mut cur = dir.to_path_buf();
    while let Some(parent) = cur.parent() {
        if !parent.join("cgroup.controllers").exists() {
            return Some(cur);
        }
        cur = parent.to_path_buf();
    }
    None
}

fn throttle(task: &mut Task, opts: &UserspaceOptions) -> Result<(), SchedError> {
    match &task.cgroup {
        Some(dir) => {
            std::fs::write(dir.join("cgroup.freeze"), "1").map_err(|e| SchedError::File {
                path: dir.join("cgroup.freeze"),
                source: e,
            })?
        }
        None => {
            let _ = opts;
            // SAFETY: kill(2) with a positive pid.
            if unsafe { libc::kill(task.pid as i32, libc::SIGSTOP) } != 0 {
                return Err(SchedError::last_os(format!("SIGSTOP {}", task.pid)));
            }
        }
    }
    Ok(())
}

fn thaw(task: &Task, _opts: &UserspaceOptions) {
    match &task.cgroup {
        Some(dir) => {
            let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
        }
        None => {
            // SAFETY: kill(2) with a positive pid.
            unsafe { libc::kill(task.pid as i32, libc::SIGCONT) };
        }
    }
}

/// The kernel delivers an overflow signal to another process only when the
/// counter's owner (who called `F_SETOWN_EX`) is root or shares a real or
/// saved user id with the target (`sigio_perm()` in fs/fcntl.c; capabilities
/// such as `CAP_KILL` do not count there). Otherwise the SIGSTOP of the direct
/// route is silently dropped, so such processes are refused with the reason
/// instead of being left unthrottled.
fn direct_route_allowed(proc_root: &std::path::Path, pid: u32) -> Result<(), SchedError> {
    // SAFETY: getuid/geteuid have no preconditions.
    let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
    if euid == 0 {
        return Ok(());
    }
    let status = std::fs::read_to_string(proc_root.join(pid.to_string()).join("status"))
        .map_err(|_| SchedError::Vanished { pid })?;
    direct_route_check(uid, euid, pid, &status)
}

/// [`direct_route_allowed`] for a caller with `uid`/`euid` and the target's
/// `/proc/PID/status` text.
fn direct_route_check(uid: u32, euid: u32, pid: u32, status: &str) -> Result<(), SchedError> {
    if euid == 0 {
        return Ok(());
    }
    let ids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .map(|v| {
            v.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let (real, saved) = (ids.first().copied(), ids.get(2).copied());
    if [real, saved]
        .iter()
        .flatten()
        .any(|t| *t == uid || *t == euid)
    {
        return Ok(());
    }
    Err(SchedError::invalid(
        "quota route",
        format!(
            "the direct route cannot stop pid {pid} (user {}): the kernel sends counter-overflow \
             signals only to processes of the same user or from root; use route = \"agent\" \
             (the agent stops it with kill(2) and CAP_KILL) or run as root",
            real.map_or("?".to_string(), |u| u.to_string())
        ),
    ))
}

/// Opens one quota counter per event on `tid`, disabled. Thread scope
/// follows the route. Process scope signals the agent on the agent route;
/// on the direct route the counter stops the thread in the kernel and a
/// second counter (`notify`) signals the agent, which re-splits.
fn open_thread(
    tid: u32,
    events: &[EventQuota],
    opts: &UserspaceOptions,
    overflow_tid: i32,
    scope: QuotaScope,
) -> Result<ThreadCounters, SchedError> {
    let mut counters = Vec::new();
    let direct = opts.route == OverflowRoute::Direct;
    let rt = libc::SIGRTMIN() + opts.rt_signal_offset;
    for q in events {
        // The notifier is opened first: the kernel schedules a thread's
        // events in the order they were created, so when both start from
        // the same count (re-armed while the thread was stopped) the
        // notifier starts first and overflows no later than the counter that
        // stops the thread. Opened the other way round, the stop came first
        // and the thread was switched out before the notifier's period ran
        // out: no signal to the agent, the process stopped for the rest of
        // the period (docs/sra.md).
        let notify = if direct && scope == QuotaScope::Process {
            let n = crate::counter::open(tid, &q.name, &q.attr, Some(q.quota))?;
            route_signal(n.as_raw_fd(), overflow_tid, rt)?;
            Some(n)
        } else {
            None
        };
        let quota = crate::counter::open(tid, &q.name, &q.attr, Some(q.quota))?;
        if direct {
            route_signal(quota.as_raw_fd(), tid as i32, libc::SIGSTOP)?;
        } else {
            route_signal(quota.as_raw_fd(), overflow_tid, rt)?;
        }
        counters.push(Counter {
            quota,
            armed: q.quota,
            last: 0,
            notify,
        });
    }
    Ok(ThreadCounters { counters })
}

fn route_signal(fd: RawFd, owner_tid: i32, signal: i32) -> Result<(), SchedError> {
    // <linux/fcntl.h>; the libc crate does not export these for every target.
    const F_SETSIG: libc::c_int = 10;
    const F_SETOWN_EX: libc::c_int = 15;
    const F_OWNER_TID: libc::c_int = 0;
    #[repr(C)]
    struct FOwnerEx {
        type_: libc::c_int,
        pid: libc::pid_t,
    }
    let owner = FOwnerEx {
        type_: F_OWNER_TID,
        pid: owner_tid,
    };
    // SAFETY: fcntl on an fd we own with valid arguments.
    unsafe {
        if libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx) != 0 {
            return Err(SchedError::last_os("fcntl(F_SETOWN_EX)"));
        }
        if libc::fcntl(fd, F_SETSIG, signal) != 0 {
            return Err(SchedError::last_os("fcntl(F_SETSIG)"));
        }
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if libc::fcntl(fd, libc::F_SETFL, fl | libc::O_ASYNC | libc::O_NONBLOCK) != 0 {
            return Err(SchedError::last_os("fcntl(F_SETFL, O_ASYNC)"));
        }
    }
    Ok(())
}

/// Arms a quota counter to overflow after `budget` events from now: disabled,
/// the new period set while disabled (so the kernel restarts the period from
/// zero when the counter is enabled again), reset, enabled. The counter keeps
/// counting after its overflow, so its value at the end of the period is the
/// period's exact usage, overshoot included (the next overflow would come
/// only after another `budget` events, which a throttled process never reaches).
pub fn arm(fd: &OwnedFd, budget: u64) -> Result<(), SchedError> {
    let fd = fd.as_raw_fd();
    let mut period = budget.max(1);
    // SAFETY: perf ioctls on an fd we own; PERIOD reads the u64 we pass.
    unsafe {
        sys::ioctls::DISABLE(fd, 0);
        if sys::ioctls::PERIOD(fd, &mut period as *mut u64 as u64) != 0 {
            return Err(SchedError::last_os("PERF_EVENT_IOC_PERIOD"));
        }
        sys::ioctls::RESET(fd, 0);
        if sys::ioctls::ENABLE(fd, 0) != 0 {
            return Err(SchedError::last_os("PERF_EVENT_IOC_ENABLE"));
        }
    }
    Ok(())
}

/// Lets a counter overflow again after `more` events without resetting its
/// count (lending, process-scope rounds): the period set (on a counting
/// event the kernel stops it, updates the count, restarts the period from
/// zero and starts it again, with no window in which the thread runs
/// uncounted), then enabled (a counter opened on a new thread is still
/// disabled; for the others a no-op).
fn extend(fd: &OwnedFd, more: u64) -> Result<(), SchedError> {
    let fd = fd.as_raw_fd();
    let mut period = more.max(1);
    // SAFETY: perf ioctls on an fd we own; PERIOD reads the u64 we pass.
    unsafe {
        if sys::ioctls::PERIOD(fd, &mut period as *mut u64 as u64) != 0 {
            return Err(SchedError::last_os("PERF_EVENT_IOC_PERIOD"));
        }
        if sys::ioctls::ENABLE(fd, 0) != 0 {
            return Err(SchedError::last_os("PERF_EVENT_IOC_ENABLE"));
        }
    }
    Ok(())
}

fn period_sums(task: &Task) -> Vec<u64> {
    let mut sums = task.exited.clone();
    for tc in task.threads.values() {
        for (i, c) in tc.counters.iter().enumerate() {
            sums[i] += crate::counter::read(&c.quota).unwrap_or(0);
        }
    }
    sums
}

fn overflow_thread(shared: Arc<Shared>, ready: std::sync::mpsc::Sender<Result<(), SchedError>>) {
    let sig = libc::SIGRTMIN() + shared.opts.rt_signal_offset;
    // SAFETY: signal-set manipulation on local storage; signalfd on our own mask.
    let sfd = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signalfd(-1, &set, libc::SFD_CLOEXEC)
    };
    if sfd < 0 {
        let _ = ready.send(Err(SchedError::last_os("signalfd")));
        return;
    }
    // SAFETY: fresh fd we own.
    let sfd = unsafe { OwnedFd::from_raw_fd(sfd) };
    let _ = hwqos_core::ticker::set_thread_timer_slack(1);
    if shared.opts.realtime_priority > 0 {
        set_fifo(shared.opts.realtime_priority);
    }
    // SAFETY: gettid has no preconditions.
    shared
        .overflow_tid
        .store(unsafe { libc::gettid() }, Ordering::SeqCst);
    let _ = ready.send(Ok(()));
    // SAFETY: an all-zero signalfd_siginfo is a valid value (plain integers).
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    while !shared.stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd: sfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
            continue;
        }
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading one siginfo into a buffer of its size.
        let n = unsafe {
            libc::read(
                sfd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        };
        if n as usize != size {
            continue;
        }
        let got_ns = monotonic_ns();
        let mut st = lock(&shared.state);
        let owner = shared.overflow_tid.load(Ordering::SeqCst);
        on_overflow(&mut st, &shared.opts, owner, info.ssi_fd, got_ns);
    }
}

fn on_overflow(st: &mut State, opts: &UserspaceOptions, owner: i32, fd: RawFd, got_ns: u64) {
    let Some(&(pid, tid, idx)) = st.by_fd.get(&fd) else {
        return; // a counter closed since the signal was queued
    };
    let State {
        tasks,
        by_fd,
        stop_latency,
        errors,
        pools,
        ..
    } = st;
    let Some(task) = tasks.get_mut(&pid) else {
        return;
    };
    if task.throttled_since_ns.is_some() {
        return;
    }
    if task.quotas.scope == QuotaScope::Process {
        // One thread used its share: pick up new threads, read them all and
        // re-split what is left, or throttle. (No staleness check: a round
        // is right at any moment, and on the direct route the notifier may
        // overflow a few events before the counter that stops.)
        sync_threads(task, by_fd, opts, owner);
        match process_round(task, opts, pools) {
            Some(i) => throttle_process(task, opts, i, got_ns, stop_latency, errors),
            // Direct route: the share's end stopped the process in the
            // kernel (or is about to); the counters are re-armed, so this
            // SIGCONT comes after any such stop.
            None if opts.route == OverflowRoute::Direct => thaw(task, opts),
            None => {}
        }
        return;
    }
    // A signal queued before the last renewal re-armed the counter is stale:
    // the counter now holds less than its budget. (The counter keeps counting
    // after its overflow, so a current one holds at least the quota.)
    let quota = task.quotas.events[idx].quota;
    let (current, armed) = task
        .threads
        .get(&tid)
        .and_then(|t| t.counters.get(idx))
        .map(|c| (crate::counter::read(&c.quota).unwrap_or(0), c.armed))
        .unwrap_or((0, quota));
    tracing::trace!(pid, tid, current, armed, got_ns, "overflow signal");
    if current < armed {
        return;
    }
    if opts.lending {
        let key = pool_key(
            &task.quotas.events[idx],
            task.quotas.period.as_nanos() as u64,
        );
        let available = pools.get(&key).copied().unwrap_or(0);
        if available > 0 {
            let chunk = available.min((quota / 4).max(1));
            if let Some(c) = task
                .threads
                .get_mut(&tid)
                .and_then(|t| t.counters.get_mut(idx))
            {
                if extend(&c.quota, chunk).is_ok() {
                    c.armed = current + chunk;
                    pools.insert(key, available - chunk);
                    task.stats.events[idx].borrowed += chunk;
                    return;
                }
            }
        }
    }
    // Thread scope: every quota counter is armed with the process's whole
    // remaining budget for the period, so an overflow of any one thread's
    // counter means that thread has used at least the quota: throttle first,
    // count later.
    throttle_now(task, opts, idx, got_ns, stop_latency, errors);
}

/// Runs the calling thread under `SCHED_FIFO` so an overflow or a period
/// boundary preempts the throttled workload at once (needs `CAP_SYS_NICE`;
/// without it the thread stays `SCHED_OTHER` and a warning is logged).
fn set_fifo(priority: i32) {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; param is initialised.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        tracing::warn!(
            priority,
            error = %std::io::Error::last_os_error(),
            "cannot run the quota threads under SCHED_FIFO; throttling latency will follow the load"
        );
    }
}

fn renewal_thread(shared: Arc<Shared>) {
    let _ = hwqos_core::ticker::set_thread_timer_slack(1);
    if shared.opts.realtime_priority > 0 {
        set_fifo(shared.opts.realtime_priority);
    }
    let mut slack = SlackEstimator::new();
    const HEADROOM_NS: u64 = 200_000;
    let mut st = lock(&shared.state);
    while !shared.stop.load(Ordering::SeqCst) {
        let next = st.tasks.values().map(|t| t.next_deadline_ns).min();
        let Some(deadline) = next else {
            st = shared
                .wake
                .wait_timeout(st, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        };
        let now = monotonic_ns();
        if now + HEADROOM_NS < deadline {
            let wait = Duration::from_nanos(deadline - HEADROOM_NS - now);
            st = shared
                .wake
                .wait_timeout(st, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue; // the set of tasks may have changed
        }
        if now < deadline {
            drop(st);
            sleep_until(deadline, &SleepStrategy::Absolute, &mut slack);
            st = lock(&shared.state);
        }
        let owner = shared.overflow_tid.load(Ordering::SeqCst);
        renew_due(&mut st, &shared.opts, owner);
    }
}

fn renew_due(st: &mut State, opts: &UserspaceOptions, owner: i32) {
    let now = monotonic_ns();
    let State {
        tasks,
        by_fd,
        renew_lateness,
        missed_periods,
        pools,
        ..
    } = st;
    if opts.lending {
        // A new period for every pool with a process due: unused loans expire.
        for task in tasks.values().filter(|t| t.next_deadline_ns <= now) {
            let period_ns = task.quotas.period.as_nanos() as u64;
            for e in &task.quotas.events {
                pools.insert(pool_key(e, period_ns), 0);
            }
        }
    }
    for task in tasks.values_mut() {
        if task.next_deadline_ns > now {
            continue;
        }
        let period_ns = task.quotas.period.as_nanos() as u64;
        renew_lateness.record(now - task.next_deadline_ns);
        // Read each counter and re-arm it at once: the period boundary is
        // the re-arm, and the few events between the read and the reset
        // belong to no period (never counted twice, never against the quota).
        // With lending, this period's budget is predicted from the previous
        // period's usage plus a margin; the rest of the quota is donated.
        let budgets: Vec<u64> = task
            .quotas
            .events
            .iter()
            .zip(&task.stats.events)
            .map(|(q, s)| {
                if opts.lending && task.stats.nr_periods > 0 {
                    (s.last_period + q.quota / 8).clamp(1, q.quota)
                } else {
                    q.quota
                }
            })
            .collect();
        if opts.lending {
            for (q, b) in task.quotas.events.iter().zip(&budgets) {
                *pools.entry(pool_key(q, period_ns)).or_insert(0) += q.quota - b;
            }
        }
        // Threads that started or ended during the period: the ended ones'
        // counts go into `exited`, the new ones are armed below.
        sync_threads(task, by_fd, opts, owner);
        let process = task.quotas.scope == QuotaScope::Process;
        let direct = opts.route == OverflowRoute::Direct;
        let stopped_now = crate::proc::task_state(&opts.proc_root, task.pid) == Some('T');
        let mut used = std::mem::replace(&mut task.exited, vec![0; task.quotas.events.len()]);
        for (tid, tc) in task.threads.iter_mut() {
            for (i, c) in tc.counters.iter_mut().enumerate() {
                let v = crate::counter::read(&c.quota).unwrap_or(0);
                used[i] += v;
                c.last = v;
                if !process {
                    if let Err(e) = c.arm(budgets[i]) {
                        tracing::warn!(pid = task.pid, tid, error = %e, "cannot re-arm a quota counter");
                    }
                }
            }
        }
        // Which events were used up: process scope, all but fewer events
        // than threads of the allowance (what a split cannot bound).
        let threads = task.threads.len().max(1) as u64;
        let exhausted: Vec<bool> = if process {
            used.iter()
                .zip(&task.allowance)
                .map(|(u, a)| u + threads * min_share(*a, threads) > *a)
                .collect()
        } else {
            used.iter()
                .zip(&task.quotas.events)
                .map(|(u, q)| *u >= q.quota)
                .collect()
        };
        if process {
            task.allowance = budgets;
            if let Err(e) = arm_process(task) {
                tracing::warn!(pid = task.pid, error = %e, "cannot re-arm a quota counter");
            }
        }
        for (t, u) in task.completed.iter_mut().zip(&used) {
            *t += u;
        }
        // Direct route: the kernel stopped the process at the overflow.
        let stopped_by_kernel = direct
            && !task.throttled_this_period
            && exhausted.iter().any(|e| *e)
            && (!process || stopped_now);
        let throttled = task.throttled_this_period || stopped_by_kernel;
        // Also continue a process found stopped without a recorded throttle
        // (a SIGSTOP whose signal was still in flight at the last renewal,
        // or, process scope on the direct route, a share's end the agent
        // had not re-split yet).
        let stray = !throttled && task.cgroup.is_none() && stopped_now;
        if stray {
            tracing::debug!(
                pid = task.pid,
                "continuing a process stopped outside a recorded throttle"
            );
        }
        // The counters are re-armed (process scope, direct route: the
        // notifiers first), so this SIGCONT comes after any stop they sent.
        if throttled || stray {
            thaw(task, opts);
        }
        tracing::trace!(pid = task.pid, ?used, throttled, now, "period renewed");
        if let Some(since) = task.throttled_since_ns.take() {
            task.stats.throttled_ns += now.saturating_sub(since);
        }
        if stopped_by_kernel {
            task.stats.nr_throttled += 1;
        }
        for (i, e) in task.stats.events.iter_mut().enumerate() {
            e.last_period = used[i];
            if stopped_by_kernel && exhausted[i] {
                e.overflows += 1;
            }
        }
        if task.history.len() == HISTORY_PERIODS {
            task.history.pop_front();
        }
        task.history.push_back(PeriodUsage {
            period: task.stats.nr_periods,
            used,
            throttled,
            length_ns: now.saturating_sub(task.period_started_ns),
        });
        task.period_started_ns = now;
        task.stats.nr_periods += 1;
        task.throttled_this_period = false;
        let mut next = task.next_deadline_ns + period_ns;
        if next <= now {
            let behind = (now - next) / period_ns + 1;
            *missed_periods += behind;
            next += behind * period_ns;
        }
        task.next_deadline_ns = next;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn direct_route_needs_root_or_the_same_user() {
        let status = "Name:\tleech\nUid:\t65534\t65534\t65534\t65534\n";
        assert!(super::direct_route_check(0, 0, 7, status).is_ok());
        assert!(super::direct_route_check(65534, 65534, 7, status).is_ok());
        let e = super::direct_route_check(998, 998, 7, status)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("pid 7") && e.contains("route = \"agent\""),
            "{e}"
        );
        // The saved uid counts too (a setuid program that switched users).
        let setuid = "Uid:\t1000\t1000\t998\t1000\n";
        assert!(super::direct_route_check(998, 998, 7, setuid).is_ok());
    }
}
