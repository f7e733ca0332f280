//! The compression throttle (thesis 7.2.6–7.2.7, 7.3.3): a PID controller
//! from current CPU utilization to the share of one CPU that compression may
//! use, turned into a time budget per round. The budget starts at 0; when a
//! round's budget is spent, messages go uncompressed.
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

use hwqos_pmu::procfs::{parse_proc_stat, CpuTimes};
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
        ProcStatLoad::new("/proc", CpuAggregate::Mean, Duration::from_millis(200))
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
        let u = per_cpu_utilization(&before, &snap);
        if u.is_empty() {
            return None;
        }
        Some(match self.aggregate {
            CpuAggregate::Mean => u.values().sum::<f64>() / u.len() as f64,
            CpuAggregate::Max => u.values().copied().fold(0.0, f64::max),
        })
    }
}

/// A fixed or scripted load, for tests and simulations.
pub struct ScriptedLoad {
    values: std::collections::VecDeque<f64>,
    last: f64,
}

impl ScriptedLoad {
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
    pub kp: f64,
    pub ki: f64,
    pub kd: f64,
    /// Largest share of one CPU compression may get.
    pub max_share: f64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            target: 0.8,
            kp: 0.5,
            ki: 0.2,
            kd: 0.0,
            max_share: 1.0,
        }
    }
}

/// The PID throttle of one stream.
pub struct Throttle {
    pid: pid::Pid<f64>,
    config: ThrottleConfig,
    load: Box<dyn CpuLoad>,
    share: f64,
    last_util: Option<f64>,
}

impl Throttle {
    pub fn new(config: ThrottleConfig, load: Box<dyn CpuLoad>) -> Self {
        let mut pid = pid::Pid::new(config.target, config.max_share);
        pid.p(config.kp, config.max_share)
            .i(config.ki, config.max_share)
            .d(config.kd, config.max_share);
        Throttle {
            pid,
            config,
            load,
            share: 0.0,
            last_util: None,
        }
    }

    /// Changes the target utilization (keeps the integral).
    pub fn set_target(&mut self, target: f64) {
        self.config.target = target;
        self.pid.setpoint(target);
    }

    pub fn config(&self) -> ThrottleConfig {
        self.config
    }

    /// Updates the controller if a fresh utilization is available and returns
    /// the budget (ns) for a round expected to last `round_wall_ns`.
    pub fn round_budget_ns(&mut self, round_wall_ns: u64) -> u64 {
        if let Some(u) = self.load.utilization() {
            self.last_util = Some(u);
            let out = self.pid.next_control_output(u).output;
            self.share = out.clamp(0.0, self.config.max_share);
        }
        (self.share * round_wall_ns as f64) as u64
    }

    /// Current share of one CPU granted to compression.
    pub fn share(&self) -> f64 {
        self.share
    }

    pub fn last_utilization(&self) -> Option<f64> {
        self.last_util
    }
}
