//! Measured probes of the node (seed 001's methodology): every probe pins the
//! calling thread to one CPU, calibrates the overhead of its own timing and
//! subtracts it, repeats its measurement in batches, and reports a
//! [`hwqos_core::stats::Summary`] (median, mean, spread, 95 % CI) per quantity.
//!
//! - [`clock`]: clock-read overhead (`clock_gettime`, `rdtsc`) and TSC→ns rate;
//! - [`syscall`]: raw `SYS_getpid`, thread and process spawn cost;
//! - [`ctxswitch`]: pipe ping-pong between threads and between processes,
//!   cross-checked with the kernel's `sw.context_switches` counter;
//! - [`memlat`]: pointer-chase latency versus working-set size, inferred cache
//!   boundaries and per-level latencies;
//! - [`bandwidth`]: read, write and copy bandwidth;
//! - [`pagefault`]: minor page-fault cost (cross-checked with `getrusage`);
//! - [`net`]: loopback TCP round trip and connect cost (127.0.0.1 only);
//! - [`timer`]: sleep accuracy (AESM/AESV/RESM/RESV) and CPU cost per strategy.
//!
//! Each probe is a function taking [`ProbeOptions`] and returning a result
//! struct; [`run`] runs a selection of them into a [`Measured`].

pub mod bandwidth;
pub mod clock;
pub mod ctxswitch;
pub mod memlat;
pub mod net;
pub mod pagefault;
pub mod syscall;
pub mod timer;

use hwqos_core::stats::{summarize, Summary};
use hwqos_core::time::monotonic_ns;
use serde::{Deserialize, Serialize};
use std::hint::black_box;

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot pin the probe to CPU {cpu}: {source}")]
    Pin { cpu: u32, source: nix::Error },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

impl ProbeError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> ProbeError {
        ProbeError::Io {
            what: what.into(),
            source,
        }
    }
}

/// How the probes run.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// The CPU to pin to; default: the last CPU the caller may run on.
    pub cpu: Option<u32>,
    /// Scaled-down variant (fewer repeats, shorter sweeps): about 10 s in all.
    pub quick: bool,
    /// Batches per measured quantity; default 15 (quick: 5).
    pub repeats: Option<usize>,
    /// Seed of every pseudo-random sequence (pointer chase, timer requests).
    pub seed: u64,
    /// Timer probe: sleep requests per strategy (default 40, quick 30; seed
    /// 003 used 1000).
    pub timer_requests: Option<usize>,
    /// Timer probe: requests are uniform in 0..this many ms (default 100,
    /// quick 10).
    pub timer_max_ms: Option<f64>,
    /// Memory-latency sweep: stop at this working-set size instead of 4× the
    /// LLC (2× in quick mode).
    pub memlat_max_bytes: Option<u64>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            cpu: None,
            quick: false,
            repeats: None,
            seed: DEFAULT_SEED,
            timer_requests: None,
            timer_max_ms: None,
            memlat_max_bytes: None,
        }
    }
}

/// The default seed of the pseudo-random sequences.
pub const DEFAULT_SEED: u64 = 0x6877_716f_7331;

impl ProbeOptions {
    pub fn quick() -> ProbeOptions {
        ProbeOptions {
            quick: true,
            ..ProbeOptions::default()
        }
    }

    pub(crate) fn repeats(&self) -> usize {
        self.repeats
            .unwrap_or(if self.quick { 5 } else { 15 })
            .max(2)
    }

    /// Scales a default batch size down for quick mode.
    pub(crate) fn scaled(&self, default: u64) -> u64 {
        if self.quick {
            (default / 5).max(1)
        } else {
            default
        }
    }
}

/// The probes by name (`hwqos probe NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    Clock,
    Syscall,
    Ctxswitch,
    Memlat,
    Bandwidth,
    Pagefault,
    Net,
    Timer,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 8] = [
        ProbeKind::Clock,
        ProbeKind::Syscall,
        ProbeKind::Ctxswitch,
        ProbeKind::Memlat,
        ProbeKind::Bandwidth,
        ProbeKind::Pagefault,
        ProbeKind::Net,
        ProbeKind::Timer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::Clock => "clock",
            ProbeKind::Syscall => "syscall",
            ProbeKind::Ctxswitch => "ctxswitch",
            ProbeKind::Memlat => "memlat",
            ProbeKind::Bandwidth => "bandwidth",
            ProbeKind::Pagefault => "pagefault",
            ProbeKind::Net => "net",
            ProbeKind::Timer => "timer",
        }
    }
}

impl std::str::FromStr for ProbeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProbeKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = ProbeKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown probe `{s}` (expected one of: {})",
                    names.join(", ")
                )
            })
    }
}

impl std::fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything measured, one optional result per probe.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The CPU the probes were pinned to.
    pub cpu: u32,
    pub quick: bool,
    pub seed: u64,
    /// Wall time the probes took, seconds.
    pub duration_s: f64,
    /// Load average (1 min) when the probes started: other work on the node
    /// disturbs the numbers.
    pub loadavg_1m: Option<f64>,
    /// Load average (1 min) when the probes ended.
    pub loadavg_1m_end: Option<f64>,
    /// Share of the pinned CPU's time stolen by the hypervisor while the
    /// probes ran (`/proc/stat` steal), if readable.
    pub steal_fraction: Option<f64>,
    /// Share of the pinned CPU's time NOT idle while the probes ran (the
    /// probes' own work plus everything else that ran there).
    pub busy_fraction: Option<f64>,
    pub clock: Option<clock::ClockResult>,
    pub syscall: Option<syscall::SyscallResult>,
    pub ctxswitch: Option<ctxswitch::CtxSwitchResult>,
    pub memlat: Option<memlat::MemLatResult>,
    pub bandwidth: Option<bandwidth::BandwidthResult>,
    pub pagefault: Option<pagefault::PageFaultResult>,
    pub net: Option<net::NetResult>,
    pub timer: Option<timer::TimerResult>,
    /// Probes that failed and why (the others still ran).
    pub errors: Vec<(ProbeKind, String)>,
}

/// Runs `kinds` (in the order of [`ProbeKind::ALL`]) and collects their results.
/// A failing probe is recorded in [`Measured::errors`]; the rest still run.
/// `progress` is called with each probe's name before it starts.
pub fn run(
    kinds: &[ProbeKind],
    options: &ProbeOptions,
    mut progress: impl FnMut(ProbeKind),
) -> Measured {
    let start = monotonic_ns();
    let cpu = options.cpu.unwrap_or_else(default_cpu);
    let options = ProbeOptions {
        cpu: Some(cpu),
        ..options.clone()
    };
    let mut m = Measured {
        cpu,
        quick: options.quick,
        seed: options.seed,
        loadavg_1m: loadavg_1m(),
        ..Measured::default()
    };
    let stat_start = cpu_times(cpu);
    let mut kinds = kinds.to_vec();
    kinds.sort();
    kinds.dedup();
    // memlat converts ns to cycles with the TSC rate the clock probe measures.
    let mut tsc_hz = None;
    for kind in kinds {
        progress(kind);
        let r: Result<(), ProbeError> = (|| {
            match kind {
                ProbeKind::Clock => {
                    let c = clock::run(&options)?;
                    tsc_hz = c.tsc_hz;
                    m.clock = Some(c);
                }
                ProbeKind::Syscall => m.syscall = Some(syscall::run(&options)?),
                ProbeKind::Ctxswitch => m.ctxswitch = Some(ctxswitch::run(&options)?),
                ProbeKind::Memlat => {
                    let topo = crate::Topology::this_node().ok();
                    let hz = tsc_hz.or_else(clock::tsc_hz_quick);
                    m.memlat = Some(memlat::run(&options, topo.as_ref(), hz)?)
                }
                ProbeKind::Bandwidth => {
                    let topo = crate::Topology::this_node().ok();
                    m.bandwidth = Some(bandwidth::run(&options, topo.as_ref())?)
                }
                ProbeKind::Pagefault => m.pagefault = Some(pagefault::run(&options)?),
                ProbeKind::Net => m.net = Some(net::run(&options)?),
                ProbeKind::Timer => m.timer = Some(timer::run(&options)?),
            }
            Ok(())
        })();
        if let Err(e) = r {
            tracing::warn!("probe {kind} failed: {e}");
            m.errors.push((kind, e.to_string()));
        }
    }
    m.duration_s = (monotonic_ns() - start) as f64 / 1e9;
    m.loadavg_1m_end = loadavg_1m();
    if let (Some(a), Some(b)) = (stat_start, cpu_times(cpu)) {
        let total = b.total.saturating_sub(a.total).max(1) as f64;
        m.steal_fraction = Some(b.steal.saturating_sub(a.steal) as f64 / total);
        m.busy_fraction = Some(1.0 - b.idle.saturating_sub(a.idle) as f64 / total);
    }
    m
}

/// Jiffies of one CPU from `/proc/stat`.
#[derive(Clone, Copy, Debug)]
struct CpuTimes {
    total: u64,
    idle: u64,
    steal: u64,
}

fn cpu_times(cpu: u32) -> Option<CpuTimes> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let label = format!("cpu{cpu}");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(label.as_str()))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest counted in user).
    Some(CpuTimes {
        total: v.iter().take(8).sum(),
        idle: v.get(3)? + v.get(4).copied().unwrap_or(0),
        steal: v.get(7).copied().unwrap_or(0),
    })
}

/// The last CPU this thread may run on (CPU 0 often takes most interrupts).
pub fn default_cpu() -> u32 {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    let set = sched_getaffinity(Pid::from_raw(0)).unwrap_or_else(|_| CpuSet::new());
    (0..CpuSet::count())
        .rev()
        .find(|c| set.is_set(*c).unwrap_or(false))
        .map(|c| c as u32)
        .unwrap_or(0)
}

fn loadavg_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Pins the calling thread to one CPU until dropped, then restores its
/// previous affinity.
pub struct Pinned {
    previous: Option<nix::sched::CpuSet>,
}

impl Pinned {
    pub fn to(cpu: u32) -> Result<Pinned, ProbeError> {
        use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
        use nix::unistd::Pid;
        let previous = sched_getaffinity(Pid::from_raw(0)).ok();
        let mut set = CpuSet::new();
        set.set(cpu as usize)
            .map_err(|source| ProbeError::Pin { cpu, source })?;
        sched_setaffinity(Pid::from_raw(0), &set)
            .map_err(|source| ProbeError::Pin { cpu, source })?;
        Ok(Pinned { previous })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(set) = &self.previous {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), set);
        }
    }
}

/// Pins to the options' CPU (or the default one).
pub(crate) fn pin(options: &ProbeOptions) -> Result<(Pinned, u32), ProbeError> {
    let cpu = options.cpu.unwrap_or_else(default_cpu);
    Ok((Pinned::to(cpu)?, cpu))
}

/// The overhead of one timed interval: the median of back-to-back
/// `CLOCK_MONOTONIC` read pairs, in ns. Subtracted from every batch.
pub fn timing_overhead_ns() -> f64 {
    let mut v: Vec<f64> = (0..2001)
        .map(|_| {
            let a = monotonic_ns();
            let b = monotonic_ns();
            (b - a) as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `repeats` batches of `ops` calls of `op` and returns the summary of
/// the per-call time in ns, with `overhead_ns` subtracted from each batch.
/// One unmeasured batch warms caches and branch predictors first.
pub(crate) fn per_op_ns(
    repeats: usize,
    ops: u64,
    overhead_ns: f64,
    mut op: impl FnMut(),
) -> Option<Summary> {
    for _ in 0..ops.min(1000) {
        op();
    }
    let mut v = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t0 = monotonic_ns();
        for _ in 0..ops {
            op();
        }
        let t1 = monotonic_ns();
        v.push((((t1 - t0) as f64 - overhead_ns).max(0.0)) / ops as f64);
    }
    black_box(&v);
    summarize(&v)
}

/// SplitMix64: a tiny, fully specified generator, so a fixed seed gives the
/// same pointer chase and the same timer requests across builds and
/// dependency updates (rand's StdRng does not promise that).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0) by Lemire's multiply-shift (bias < n/2⁶⁴).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_known_answer() {
        // Reference values of SplitMix64 with seed 1234567 (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
        let mut r = SplitMix64::new(7);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn probe_names_round_trip() {
        for k in ProbeKind::ALL {
            assert_eq!(k.name().parse::<ProbeKind>().unwrap(), k);
        }
        assert!("bogus".parse::<ProbeKind>().unwrap_err().contains("memlat"));
    }

    #[test]
    fn pinning_restores_the_previous_affinity() {
        use nix::sched::sched_getaffinity;
        use nix::unistd::Pid;
        let before = sched_getaffinity(Pid::from_raw(0)).unwrap();
        let cpu = default_cpu();
        {
            let _p = Pinned::to(cpu).unwrap();
            let now = sched_getaffinity(Pid::from_raw(0)).unwrap();
            assert!(now.is_set(cpu as usize).unwrap());
            let count = (0..nix::sched::CpuSet::count())
                .filter(|c| now.is_set(*c).unwrap())
                .count();
            assert_eq!(count, 1);
        }
        assert_eq!(sched_getaffinity(Pid::from_raw(0)).unwrap(), before);
    }
}
