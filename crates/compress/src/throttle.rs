//! The compression throttle (thesis 7.2.6–7.2.7, 7.3.3): a PID controller
//! from current CPU utilization to the share of one CPU that compression may
//! use, turned into a time budget per round. Until the first reading the
//! share is [`ThrottleConfig::initial_share`] (the controller's integral
//! starts there) and the first round's budget is that share of
//! [`INITIAL_WINDOW`], so a short stream compresses from its first message
//! (the thesis started from 0, which left every stream shorter than two
//! readings uncompressed); when a round's budget is spent, messages go
//! uncompressed.
//!
//! The input is the utilization of the CPUs over the last interval, computed
//! from `/proc/stat` per-CPU tick deltas (hwqos-pmu's procfs parser), not the
//! 1-minute load average the thesis used: the load average counts runnable
//! *and* uninterruptible tasks rather than busy time, is not a fraction of
//! capacity (a load of 2 saturates this 2-CPU VM but is light on a 32-CPU
//! node), and its one-minute exponential decay makes
//! the controller react about a minute late — the thesis needed it to damp
//! oscillation, which the PID's own integral term and a 200 ms minimum
//! sampling interval do here without the lag.

use hwqos_procfs::{parse_proc_stat, CpuTimes};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A source of CPU utilization in [0, 1].
pub trait CpuLoad: Send {
    /// The utilization since the previous reading, or `None` when no fresh
    /// value is available yet (too soon, or the source failed).
    fn utilization(&mut self) -> Option<f64>;
}

/// How per-CPU utilizations are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuAggregate {
    /// Mean over the online CPUs (node utilization).
    Mean,
    /// The busiest CPU.
    Max,
    /// Mean over the CPUs this process may run on (its affinity mask, read
    /// at every reading): for a relay pinned to some CPUs of a shared node,
    /// the load it competes with, not the whole node's.
    Affinity,
    /// Not a combination of per-CPU values: the CPU use of this process's
    /// cgroup as a share of the cgroup's CPU limit (all online CPUs when
    /// unlimited), from [`CgroupLoad`]. For a relay that
    /// shares a CPU quota with the applications it serves (a container, a
    /// systemd slice), the quota is the capacity to protect.
    Cgroup,
}

impl CpuAggregate {
    /// Combines per-CPU utilizations (CPU number → [0, 1]) as this choice
    /// says: the mean, the busiest CPU, or the mean over this process's
    /// affinity mask (`Cgroup` takes the busiest, for callers that have only
    /// per-CPU values). `None` when no CPU is left to combine. The one
    /// combination for every per-CPU source (`/proc/stat` here, the monitor's
    /// live API in the relay).
    pub fn combine(self, per_cpu: &BTreeMap<u32, f64>) -> Option<f64> {
        let values: Vec<f64> = match self {
            CpuAggregate::Affinity => {
                let mine = affinity_cpus()?;
                per_cpu
                    .iter()
                    .filter(|(c, _)| mine.contains(c))
                    .map(|(_, v)| *v)
                    .collect()
            }
            _ => per_cpu.values().copied().collect(),
        };
        if values.is_empty() {
            return None;
        }
        Some(match self {
            CpuAggregate::Max | CpuAggregate::Cgroup => values.iter().copied().fold(0.0, f64::max),
            CpuAggregate::Mean | CpuAggregate::Affinity => {
                values.iter().sum::<f64>() / values.len() as f64
            }
        })
    }

    /// The `/proc` source for this choice, read at most every 200 ms, or the
    /// cgroup source, read at most every 100 ms (cgroup usage is accounted
    /// in nanoseconds, not in 10 ms ticks, so a shorter interval is not noise;
    /// it is still one CFS period, so quota throttling averages out).
    pub fn source(self) -> Box<dyn CpuLoad> {
        match self {
            CpuAggregate::Cgroup => Box::new(CgroupLoad::own(Duration::from_millis(100)).primed()),
            other => Box::new(ProcStatLoad::with_aggregate(other)),
        }
    }
}

/// CPU use of a cgroup against its CPU limit. cgroup v2: Δ`usage_usec` of
/// `cpu.stat` over Δwall time × the limit in CPUs (`cpu.max` quota /
/// period); cgroup v1: Δ`cpuacct.usage` (ns) and `cpu.cfs_quota_us` /
/// `cpu.cfs_period_us`. Without a limit the capacity is the online CPUs.
pub struct CgroupLoad {
    /// The cumulative usage file and its unit in ns (1,000 for v2's µs).
    usage: (PathBuf, f64),
    limit: CgroupLimit,
    min_interval: Duration,
    last: Option<(Instant, u64)>,
}

enum CgroupLimit {
    /// v2 `cpu.max`.
    Max(PathBuf),
    /// v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`.
    Cfs(PathBuf, PathBuf),
}

impl CgroupLoad {
    /// A cgroup v2 directory.
    pub fn new(dir: impl Into<PathBuf>, min_interval: Duration) -> Self {
        let dir = dir.into();
        CgroupLoad {
            usage: (dir.join("cpu.stat"), 1000.0),
            limit: CgroupLimit::Max(dir.join("cpu.max")),
            min_interval,
            last: None,
        }
    }

    /// A cgroup v1 pair: the `cpuacct` and the `cpu` controller directories.
    pub fn new_v1(
        cpuacct_dir: impl Into<PathBuf>,
        cpu_dir: impl Into<PathBuf>,
        min_interval: Duration,
    ) -> Self {
        let cpu = cpu_dir.into();
        CgroupLoad {
            usage: (cpuacct_dir.into().join("cpuacct.usage"), 1.0),
            limit: CgroupLimit::Cfs(cpu.join("cpu.cfs_quota_us"), cpu.join("cpu.cfs_period_us")),
            min_interval,
            last: None,
        }
    }

    /// This process's cgroup, from `/proc/self/cgroup`: the v1 `cpuacct` and
    /// `cpu` hierarchies where they are mounted, else the unified (v2) one.
    pub fn own(min_interval: Duration) -> Self {
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let path_of = |controller: &str| {
            text.lines().find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, names, path) = (f.next()?, f.next()?, f.next()?);
                names
                    .split(',')
                    .any(|n| n == controller)
                    .then(|| path.trim().trim_start_matches('/').to_string())
            })
        };
        let root = PathBuf::from("/sys/fs/cgroup");
        if let (Some(acct), Some(cpu)) = (path_of("cpuacct"), path_of("cpu")) {
            let (acct_dir, cpu_dir) = (root.join("cpuacct").join(acct), root.join("cpu").join(cpu));
            if acct_dir.join("cpuacct.usage").exists() {
                return CgroupLoad::new_v1(acct_dir, cpu_dir, min_interval);
            }
        }
        let unified = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("0::")
                    .map(|p| p.trim().trim_start_matches('/').to_string())
            })
            .unwrap_or_default();
        CgroupLoad::new(root.join(unified), min_interval)
    }

    /// Takes the first usage reading now.
    pub fn primed(mut self) -> Self {
        self.last = self.usage_ns().map(|u| (Instant::now(), u));
        self
    }

    /// CPU the cgroup used so far (ns).
    pub fn usage_ns(&self) -> Option<u64> {
        let text = std::fs::read_to_string(&self.usage.0).ok()?;
        let v: f64 = if self.usage.1 == 1.0 {
            text.trim().parse().ok()?
        } else {
            text.lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse().ok())?
        };
        Some((v * self.usage.1) as u64)
    }

    /// The cgroup's CPU limit in CPUs.
    pub fn capacity(&self) -> Option<f64> {
        let online = std::thread::available_parallelism()
            .map(|n| n.get() as f64)
            .ok();
        let read = |p: &PathBuf| std::fs::read_to_string(p).ok();
        let limited = match &self.limit {
            CgroupLimit::Max(p) => read(p).and_then(|t| {
                let mut f = t.split_whitespace();
                let q: f64 = f.next()?.parse().ok()?; // "max" does not parse
                let period: f64 = f.next()?.parse().ok()?;
                (period > 0.0).then(|| q / period)
            }),
            CgroupLimit::Cfs(q, p) => {
                let q: f64 = read(q)?.trim().parse().ok()?;
                let p: f64 = read(p)?.trim().parse().ok()?;
                (q > 0.0 && p > 0.0).then(|| q / p) // -1: unlimited
            }
        };
        limited.or(online)
    }
}

impl CpuLoad for CgroupLoad {
    fn utilization(&mut self) -> Option<f64> {
        let now = Instant::now();
        if let Some((t, _)) = &self.last {
            if now.duration_since(*t) < self.min_interval {
                return None;
            }
        }
        let usage = self.usage_ns()?;
        let (t0, u0) = self.last.replace((now, usage))?;
        let wall_ns = now.duration_since(t0).as_secs_f64() * 1e9;
        let cap = self.capacity()?;
        (wall_ns > 0.0 && cap > 0.0)
            .then(|| (usage.saturating_sub(u0) as f64 / (wall_ns * cap)).clamp(0.0, 1.0))
    }
}

/// The CPUs this process may run on (`sched_getaffinity`), or `None` when
/// the call fails.
pub fn affinity_cpus() -> Option<std::collections::BTreeSet<u32>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills the set we own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .map(|c| c as u32)
                .collect(),
        )
    }
}

/// Utilization from `/proc/stat` per-CPU deltas.
pub struct ProcStatLoad {
    path: PathBuf,
    aggregate: CpuAggregate,
    min_interval: Duration,
    last: Option<(Instant, BTreeMap<u32, CpuTimes>)>,
}

impl ProcStatLoad {
    /// Reads `<proc_root>/stat` at most every `min_interval` (the kernel
    /// accounts in 10 ms ticks; shorter intervals are mostly noise).
    pub fn new(
        proc_root: impl Into<PathBuf>,
        aggregate: CpuAggregate,
        min_interval: Duration,
    ) -> Self {
        ProcStatLoad {
            path: proc_root.into().join("stat"),
            aggregate,
            min_interval,
            last: None,
        }
    }

    /// `/proc`, mean over CPUs, 200 ms.
    pub fn system() -> Self {
        ProcStatLoad::with_aggregate(CpuAggregate::Mean)
    }

    /// `/proc`, 200 ms, combined with `aggregate`; primed (the first
    /// snapshot is taken now, so the first utilization is due 200 ms after
    /// creation rather than 200 ms after the first call).
    pub fn with_aggregate(aggregate: CpuAggregate) -> Self {
        ProcStatLoad::new("/proc", aggregate, Duration::from_millis(200)).primed()
    }

    /// Takes the first snapshot now.
    pub fn primed(mut self) -> Self {
        self.last = self.read().map(|s| (Instant::now(), s));
        self
    }

    fn read(&self) -> Option<BTreeMap<u32, CpuTimes>> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        parse_proc_stat(&text).ok().map(|s| s.cpus)
    }
}

/// Busy share of each CPU between two snapshots.
pub fn per_cpu_utilization(
    before: &BTreeMap<u32, CpuTimes>,
    after: &BTreeMap<u32, CpuTimes>,
) -> BTreeMap<u32, f64> {
    after
        .iter()
        .filter_map(|(cpu, a)| {
            let d = a.delta_since(before.get(cpu)?);
            let total = d.total();
            (total > 0).then(|| (*cpu, 1.0 - (d.idle + d.iowait) as f64 / total as f64))
        })
        .collect()
}

impl CpuLoad for ProcStatLoad {
    fn utilization(&mut self) -> Option<f64> {
        let now = Instant::now();
        if let Some((t, _)) = &self.last {
            if now.duration_since(*t) < self.min_interval {
                return None;
            }
        }
        let snap = self.read()?;
        let prev = self.last.replace((now, snap.clone()));
        let (_, before) = prev?;
        self.aggregate.combine(&per_cpu_utilization(&before, &snap))
    }
}

/// A fixed or scripted load, for tests and simulations.
pub struct ScriptedLoad {
    values: std::collections::VecDeque<f64>,
    last: f64,
}

impl ScriptedLoad {
    /// A load that reports `values` in turn (utilizations in [0, 1]), then
    /// repeats the last one (0 if `values` is empty).
    pub fn new(values: impl IntoIterator<Item = f64>) -> Self {
        ScriptedLoad {
            values: values.into_iter().collect(),
            last: 0.0,
        }
    }
}

impl CpuLoad for ScriptedLoad {
    fn utilization(&mut self) -> Option<f64> {
        if let Some(v) = self.values.pop_front() {
            self.last = v;
        }
        Some(self.last)
    }
}

/// Controller gains and limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThrottleConfig {
    /// Target CPU utilization in [0, 1].
    pub target: f64,
    /// Proportional gain: share of a CPU per unit of utilization error.
    pub kp: f64,
    /// Integral gain (per reading).
    pub ki: f64,
    /// Derivative gain (per reading).
    pub kd: f64,
    /// Largest share of one CPU compression may get.
    pub max_share: f64,
    /// Bound of the integral term (either sign), as a fraction of
    /// `max_share`; [`CpuThrottle::round_budget`] lowers it further to what
    /// compression actually uses (anti-windup).
    pub integral_limit: f64,
    /// How per-CPU utilizations combine into the input (for the
    /// `/proc/stat` source that [`crate::Endpoint::new`] creates).
    pub cpu_aggregate: CpuAggregate,
    /// Share of one CPU compression gets before the first reading (the
    /// controller's integral starts there; at most `max_share`). 0 is the
    /// thesis' start, which kept every stream shorter than two readings
    /// (400 ms) uncompressed.
    pub initial_share: f64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            target: 0.8,
            kp: 0.1,
            ki: 0.4,
            kd: 0.0,
            max_share: 1.0,
            integral_limit: 1.0,
            cpu_aggregate: CpuAggregate::Mean,
            initial_share: 0.5,
        }
    }
}

/// Wall time whose worth of the initial share the first round may spend
/// (and the most unused budget a round carries over, see
/// [`CpuThrottle::next_budget`]).
pub const INITIAL_WINDOW: Duration = Duration::from_millis(100);

/// The PID controller (the `pid` crate's semantics: proportional and
/// integral terms each limited, derivative on the measurement, output
/// limited), with an integral that can start at a given value.
#[derive(Clone, Debug)]
struct Controller {
    setpoint: f64,
    kp: f64,
    ki: f64,
    kd: f64,
    limit: f64,
    i_limit: f64,
    integral: f64,
    prev: Option<f64>,
}

impl Controller {
    fn output(&mut self, measurement: f64) -> f64 {
        let lim = |l: f64, v: f64| v.clamp(-l, l);
        let error = self.setpoint - measurement;
        let p = lim(self.limit, self.kp * error);
        self.integral = lim(self.i_limit, self.integral + self.ki * error);
        let d = lim(
            self.limit,
            -self.kd * self.prev.map_or(0.0, |prev| measurement - prev),
        );
        self.prev = Some(measurement);
        lim(self.limit, p + self.integral + d)
    }
}

/// The PID throttle of one stream.
pub struct CpuThrottle {
    pid: Controller,
    config: ThrottleConfig,
    load: Box<dyn CpuLoad>,
    share: f64,
    last_util: Option<f64>,
    /// Compression time spent and wall time since the last reading.
    used_ns: u64,
    wall_ns: u64,
}

impl CpuThrottle {
    /// A throttle reading utilization from `load`, starting at `config.initial_share`.
    pub fn new(config: ThrottleConfig, load: Box<dyn CpuLoad>) -> Self {
        let share = config.initial_share.clamp(0.0, config.max_share);
        CpuThrottle {
            pid: Controller {
                setpoint: config.target,
                kp: config.kp,
                ki: config.ki,
                kd: config.kd,
                limit: config.max_share,
                i_limit: config.integral_limit * config.max_share,
                integral: share,
                prev: None,
            },
            config,
            load,
            share,
            last_util: None,
            used_ns: 0,
            wall_ns: 0,
        }
    }

    /// Changes the target utilization (keeps the integral).
    pub fn set_target(&mut self, target: f64) {
        self.config.target = target;
        self.pid.setpoint = target;
    }

    /// The configuration, with the current target.
    pub fn config(&self) -> ThrottleConfig {
        self.config
    }

    /// The first round's budget (ns): the initial share of [`INITIAL_WINDOW`].
    pub fn initial_budget_ns(&self) -> u64 {
        (self.share * INITIAL_WINDOW.as_nanos() as f64) as u64
    }

    /// Updates the controller if a fresh utilization is available and returns
    /// the budget (ns) for a round expected to last `round_wall_ns`; the
    /// round that ended took `round_wall_ns` and compression used
    /// `round_used_ns` of it.
    ///
    /// At or above [`CpuThrottle::overload_threshold`] the share drops to 0
    /// and the integral is cleared.
    ///
    /// Anti-windup: the integral is bounded by what compression actually used
    /// since the last reading (1.5 × that share + 0.05 of a CPU, at most
    /// `integral_limit`). While compression cannot use its whole share (the
    /// node is below the target whatever the share), the integral would
    /// otherwise climb to its limit and take seconds to come down once
    /// the load rises.
    pub fn round_budget(&mut self, round_wall_ns: u64, round_used_ns: u64) -> u64 {
        self.used_ns += round_used_ns;
        self.wall_ns += round_wall_ns;
        if let Some(u) = self.load.utilization() {
            self.last_util = Some(u);
            let used = self.used_ns as f64 / self.wall_ns.max(1) as f64;
            self.used_ns = 0;
            self.wall_ns = 0;
            self.pid.i_limit =
                (1.5 * used + 0.05).min(self.config.integral_limit) * self.config.max_share;
            let out = self.pid.output(u);
            self.share = out.clamp(0.0, self.config.max_share);
            if u >= self.overload_threshold() {
                // Overload (thesis 7.2.6): stop compressing at once rather
                // than at the gentle rate that keeps the loop steady near
                // the target, and ramp up again from nothing.
                self.pid.integral = 0.0;
                self.share = 0.0;
            }
        }
        (self.share * round_wall_ns as f64) as u64
    }

    /// The next round's budget for an [`crate::Endpoint`]: this round's
    /// [`round_budget`](Self::round_budget) plus what the round left unspent
    /// of `previous_budget_ns`, at most the share of the longer of the round
    /// and [`INITIAL_WINDOW`]. Short rounds (messages back to back) then keep
    /// the budget they did not use instead of each getting the share of a
    /// few microseconds.
    pub fn next_budget(
        &mut self,
        round_wall_ns: u64,
        round_used_ns: u64,
        previous_budget_ns: u64,
    ) -> u64 {
        let fresh = self.round_budget(round_wall_ns, round_used_ns);
        let left = previous_budget_ns.saturating_sub(round_used_ns);
        let cap = self.share * round_wall_ns.max(INITIAL_WINDOW.as_nanos() as u64) as f64;
        (fresh.saturating_add(left) as f64).min(cap) as u64
    }

    /// [`CpuThrottle::round_budget`] for a caller that does not track use
    /// (compression assumed to use its whole share).
    pub fn round_budget_ns(&mut self, round_wall_ns: u64) -> u64 {
        let used = (self.share * round_wall_ns as f64) as u64;
        self.round_budget(round_wall_ns, used)
    }

    /// Utilization at which compression stops at once: three quarters of
    /// the way from the target to a saturated CPU (0.95 for a target of 0.8).
    pub fn overload_threshold(&self) -> f64 {
        self.config.target + 0.75 * (1.0 - self.config.target)
    }

    /// Current share of one CPU granted to compression.
    pub fn share(&self) -> f64 {
        self.share
    }

    /// The utilization, in [0, 1], of the last reading; `None` before the first
    /// reading or when the load could not be read.
    pub fn last_utilization(&self) -> Option<f64> {
        self.last_util
    }
}

/// Longest stretch of unused budget a [`SharedThrottle`] keeps: compression
/// may catch up at most this much wall time's worth of its share. A second:
/// on a slow link one 256 KiB message is 210 ms of 10 Mbit/s, and its
/// compression with a strong codec, or a sample of a slow one, costs tens
/// of ms; with 100 ms kept (30 ms at a share of 0.3, the node at 10 %
/// utilization) 45 of 128 such messages went raw (32 MB of shared
/// libraries: 15.0 s against 8.9 s with the throttle off), with a second 2
/// (9.2 s; docs/compression.md). Over a second compression still gets its
/// share on average, and an overloaded node (share 0) keeps none.
const SHARED_BURST: Duration = Duration::from_millis(1000);

/// One throttle for every stream of a process (the relay's connections).
///
/// Each stream with its own [`CpuThrottle`] reads the same CPU utilization and
/// reacts to it on its own: with N streams compressing, a change of
/// utilization moves N shares at once, so the loop gain grows with the
/// number of streams and the node oscillates (two streams in one cgroup
/// were enough with the first gains). A shared throttle runs one controller
/// for the process: its share of one CPU is a bucket of compression time
/// that fills at that share of the wall time (at most
/// a second's worth is kept; it starts full at the initial share) and that
/// every stream draws from.
#[derive(Clone)]
pub struct SharedThrottle {
    inner: std::sync::Arc<std::sync::Mutex<SharedState>>,
}

struct SharedState {
    throttle: CpuThrottle,
    last_refill: Instant,
    /// Compression time charged since the last refill.
    charged_ns: u64,
    /// Compression time left (negative after an expensive message).
    tokens_ns: i64,
}

impl SharedThrottle {
    /// A shared throttle reading the source `config.cpu_aggregate` names.
    pub fn new(config: ThrottleConfig) -> Self {
        SharedThrottle::with_cpu_load(config, config.cpu_aggregate.source())
    }

    /// The same with another CPU-load source (simulations, tests).
    pub fn with_cpu_load(config: ThrottleConfig, load: Box<dyn CpuLoad>) -> Self {
        let throttle = CpuThrottle::new(config, load);
        // The bucket starts full at the initial share (see
        // `ThrottleConfig::initial_share`): the first connections compress
        // before the controller's first reading.
        let tokens_ns = i64::try_from(throttle.initial_budget_ns()).unwrap_or(i64::MAX);
        SharedThrottle {
            inner: std::sync::Arc::new(std::sync::Mutex::new(SharedState {
                throttle,
                last_refill: Instant::now(),
                charged_ns: 0,
                tokens_ns,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SharedState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True while compression time is left; refills the bucket (and updates
    /// the controller when a fresh utilization reading is due) first.
    pub fn has_budget(&self) -> bool {
        self.has_budget_at(Instant::now())
    }

    /// [`SharedThrottle::has_budget`] at a given instant (simulations and
    /// tests drive the clock themselves).
    pub fn has_budget_at(&self, now: Instant) -> bool {
        let mut s = self.lock();
        s.refill(now);
        s.tokens_ns > 0
    }

    /// Charges compression time spent by one of the streams.
    pub fn charge(&self, ns: u64) {
        let mut s = self.lock();
        s.charged_ns += ns;
        s.tokens_ns = s
            .tokens_ns
            .saturating_sub(i64::try_from(ns).unwrap_or(i64::MAX));
    }

    /// Changes the target utilization (keeps the integral).
    pub fn set_target(&self, target: f64) {
        self.lock().throttle.set_target(target);
    }

    /// The controller's configuration.
    pub fn config(&self) -> ThrottleConfig {
        self.lock().throttle.config()
    }

    /// Current share of one CPU granted to the process's compression.
    pub fn share(&self) -> f64 {
        self.lock().throttle.share()
    }

    /// The utilization, in [0, 1], of the last reading; `None` before the first
    /// reading or when the load could not be read.
    pub fn last_utilization(&self) -> Option<f64> {
        self.lock().throttle.last_utilization()
    }
}

impl SharedState {
    fn refill(&mut self, now: Instant) {
        let wall = now.saturating_duration_since(self.last_refill);
        // Refilling per message would only add lock traffic.
        if wall < Duration::from_millis(1) {
            return;
        }
        let wall_ns = wall.as_nanos() as u64;
        let used = std::mem::take(&mut self.charged_ns);
        let budget = self.throttle.round_budget(wall_ns, used);
        let cap = (self.throttle.share() * SHARED_BURST.as_nanos() as f64) as i64;
        self.tokens_ns = self
            .tokens_ns
            .saturating_add(i64::try_from(budget).unwrap_or(i64::MAX))
            .min(cap);
        self.last_refill = now;
    }
}
