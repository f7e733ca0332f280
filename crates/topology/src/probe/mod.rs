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
//!
//! **Interleaved repetitions.** On a shared machine (a cloud VM) other work
//! disturbs the node for a second or so at a time. Run back to back, such a
//! disturbance falls on most samples of ONE probe and shifts that probe's
//! median for the whole run. [`run`] therefore splits every probe's batches
//! into `R` repetitions ([`ProbeOptions::rounds`], default 5, quick 3) and
//! runs them round-robin over the whole run (clock 1, syscall 1, …, timer 1,
//! clock 2, …), so a disturbance hits one repetition of each probe. The
//! repetitions are merged with [`merge_summaries_with`]: `n`, `mean`,
//! `stddev`, `min`, `max` and the 95 % CI are exact over all samples of all
//! repetitions; the headline `median` is, for a cost (time per operation),
//! the LOWEST repetition median and, for a rate (bandwidth), the HIGHEST
//! ([`Headline`]). Disturbances on a shared machine only ever add time: on
//! the development VM whole stretches of tens of seconds ran system calls at
//! 200 instead of 140 ns, which moved the median of repetition medians by
//! 40 % between runs while the least disturbed repetition's median stayed
//! within 1 %. Each repetition's median still discards that repetition's
//! outlying batches, so one lucky batch cannot set the headline.
//!
//! **Preempted batches.** Batches of operations that involve no other task of
//! the probe (clock reads, system calls, page faults, memory loops) are
//! timed with the thread's involuntary context switches read before and
//! after ([`Preemptions`]); a batch during which another task took the CPU
//! is measured again (at most as many extra batches as the probe has).

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
    /// The thread could not be pinned (a CPU outside the caller's affinity
    /// or offline).
    #[error("cannot pin the probe to CPU {cpu}: {source}")]
    Pin {
        /// The CPU asked for.
        cpu: u32,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A system call the probe needs failed (mmap, pipe, bind…).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Anything else, e.g. a probe that got no valid samples.
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
    /// Interleaved repetitions [`run`] splits each probe into; default 5
    /// (quick 3). 1 runs every probe in one piece.
    pub rounds: Option<usize>,
    /// Set by [`run`]: this call is repetition `.0` of `.1` and does its share
    /// (about `1/.1`) of the probe's batches. `None`: the whole probe.
    pub round: Option<(usize, usize)>,
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
            rounds: None,
            round: None,
        }
    }
}

/// The default seed of the pseudo-random sequences.
pub const DEFAULT_SEED: u64 = 0x6877_716f_7331;

impl ProbeOptions {
    /// The quick variant (about 10 s in all) with every other option at its
    /// default.
    pub fn quick() -> ProbeOptions {
        ProbeOptions {
            quick: true,
            ..ProbeOptions::default()
        }
    }

    /// Batches of this call: the probe's total, or this repetition's share
    /// of it (at least 2, so every repetition has a spread).
    pub(crate) fn repeats(&self) -> usize {
        self.share(self.repeats_total()).max(2)
    }

    /// Batches of the whole probe over all repetitions.
    pub(crate) fn repeats_total(&self) -> usize {
        self.repeats
            .unwrap_or(if self.quick { 5 } else { 15 })
            .max(2)
    }

    /// This call's share of `total` units: all of them outside a round,
    /// else `ceil(total / rounds)` (at least 1).
    pub(crate) fn share(&self, total: usize) -> usize {
        match self.round {
            Some((_, n)) if n > 1 => total.div_ceil(n).max(1),
            _ => total,
        }
    }

    /// Interleaved repetitions of [`run`].
    pub fn rounds(&self) -> usize {
        self.rounds.unwrap_or(if self.quick { 3 } else { 5 }).max(1)
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
    /// [`clock`]: clock-read cost and TSC rate.
    Clock,
    /// [`syscall`]: system call, thread and process spawn cost.
    Syscall,
    /// [`ctxswitch`]: context-switch cost by pipe ping-pong.
    Ctxswitch,
    /// [`memlat`]: pointer-chase latency curve and cache levels.
    Memlat,
    /// [`bandwidth`]: single-thread memory bandwidth.
    Bandwidth,
    /// [`pagefault`]: minor page-fault cost.
    Pagefault,
    /// [`net`]: loopback TCP round trip and connect cost.
    Net,
    /// [`timer`]: sleep accuracy per sleep strategy.
    Timer,
}

impl ProbeKind {
    /// Every probe, in the order [`run`] runs them.
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

    /// The probe's name on the command line (`hwqos probe NAME`) and in JSON.
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
    /// Whether the quick variant ran ([`ProbeOptions::quick`]).
    pub quick: bool,
    /// The seed of the pseudo-random sequences ([`ProbeOptions::seed`]).
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
    /// Interleaved repetitions each probe was split into (0 in files written
    /// before repetitions existed: one piece per probe).
    #[serde(default)]
    pub rounds: usize,
    /// The [`clock`] probe's result; `None` when not run or failed (then
    /// in [`errors`](Self::errors)), and so for every probe below.
    pub clock: Option<clock::ClockResult>,
    /// The [`syscall`] probe's result.
    pub syscall: Option<syscall::SyscallResult>,
    /// The [`ctxswitch`] probe's result.
    pub ctxswitch: Option<ctxswitch::CtxSwitchResult>,
    /// The [`memlat`] probe's result.
    pub memlat: Option<memlat::MemLatResult>,
    /// The [`bandwidth`] probe's result.
    pub bandwidth: Option<bandwidth::BandwidthResult>,
    /// The [`pagefault`] probe's result.
    pub pagefault: Option<pagefault::PageFaultResult>,
    /// The [`net`] probe's result.
    pub net: Option<net::NetResult>,
    /// The [`timer`] probe's result.
    pub timer: Option<timer::TimerResult>,
    /// Probes that failed and why (the others still ran).
    pub errors: Vec<(ProbeKind, String)>,
}

/// Runs `kinds` (in the order of [`ProbeKind::ALL`]) and collects their results.
/// Each probe runs as [`ProbeOptions::rounds`] repetitions interleaved
/// round-robin with the other probes' (see the module docs), merged at the end.
/// A failing probe is recorded in [`Measured::errors`] and not run again; the
/// rest still run. `progress` is called with each probe's name before its
/// first repetition.
pub fn run(
    kinds: &[ProbeKind],
    options: &ProbeOptions,
    mut progress: impl FnMut(ProbeKind),
) -> Measured {
    let start = monotonic_ns();
    let cpu = options.cpu.unwrap_or_else(default_cpu);
    let rounds = options.rounds();
    let mut m = Measured {
        cpu,
        quick: options.quick,
        seed: options.seed,
        loadavg_1m: loadavg_1m(),
        rounds,
        ..Measured::default()
    };
    let stat_start = cpu_times(cpu);
    let mut kinds = kinds.to_vec();
    kinds.sort();
    kinds.dedup();
    let topo = crate::Topology::this_node().ok();
    // memlat converts ns to cycles with the TSC rate the clock probe measures.
    let mut tsc_hz = None;
    let mut parts = Parts::default();
    let mut failed: Vec<ProbeKind> = Vec::new();
    for round in 0..rounds {
        let options = ProbeOptions {
            cpu: Some(cpu),
            round: (rounds > 1).then_some((round, rounds)),
            ..options.clone()
        };
        for &kind in &kinds {
            if failed.contains(&kind) {
                continue;
            }
            if round == 0 {
                progress(kind);
            }
            let r: Result<(), ProbeError> = (|| {
                match kind {
                    ProbeKind::Clock => {
                        let c = clock::run(&options)?;
                        if tsc_hz.is_none() {
                            tsc_hz = c.tsc_hz;
                        }
                        parts.clock.push(c);
                    }
                    ProbeKind::Syscall => parts.syscall.push(syscall::run(&options)?),
                    ProbeKind::Ctxswitch => parts.ctxswitch.push(ctxswitch::run(&options)?),
                    ProbeKind::Memlat => {
                        if tsc_hz.is_none() {
                            tsc_hz = clock::tsc_hz_quick();
                        }
                        parts
                            .memlat
                            .push(memlat::run(&options, topo.as_ref(), tsc_hz)?)
                    }
                    ProbeKind::Bandwidth => parts
                        .bandwidth
                        .push(bandwidth::run(&options, topo.as_ref())?),
                    ProbeKind::Pagefault => parts.pagefault.push(pagefault::run(&options)?),
                    ProbeKind::Net => parts.net.push(net::run(&options)?),
                    ProbeKind::Timer => parts.timer.push(timer::run(&options)?),
                }
                Ok(())
            })();
            if let Err(e) = r {
                tracing::warn!("probe {kind} failed: {e}");
                m.errors.push((kind, e.to_string()));
                failed.push(kind);
            }
        }
    }
    let ok = |k: ProbeKind| !failed.contains(&k);
    if ok(ProbeKind::Clock) {
        m.clock = clock::merge(parts.clock);
    }
    if ok(ProbeKind::Syscall) {
        m.syscall = syscall::merge(parts.syscall);
    }
    if ok(ProbeKind::Ctxswitch) {
        m.ctxswitch = ctxswitch::merge(parts.ctxswitch);
    }
    if ok(ProbeKind::Memlat) {
        m.memlat = memlat::merge(parts.memlat, topo.as_ref(), cpu);
    }
    if ok(ProbeKind::Bandwidth) {
        m.bandwidth = bandwidth::merge(parts.bandwidth);
    }
    if ok(ProbeKind::Pagefault) {
        m.pagefault = pagefault::merge(parts.pagefault);
    }
    if ok(ProbeKind::Net) {
        m.net = net::merge(parts.net);
    }
    if ok(ProbeKind::Timer) {
        m.timer = timer::merge(parts.timer);
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

/// The repetitions of each probe, before merging.
#[derive(Default)]
struct Parts {
    clock: Vec<clock::ClockResult>,
    syscall: Vec<syscall::SyscallResult>,
    ctxswitch: Vec<ctxswitch::CtxSwitchResult>,
    memlat: Vec<memlat::MemLatResult>,
    bandwidth: Vec<bandwidth::BandwidthResult>,
    pagefault: Vec<pagefault::PageFaultResult>,
    net: Vec<net::NetResult>,
    timer: Vec<timer::TimerResult>,
}

/// Merges the summaries of repetitions of one quantity into one summary.
///
/// - `median`: the median of the repetitions' medians. A disturbance that
///   lasts about one repetition moves one of the R medians, and the median
///   of R values ignores up to ⌈R/2⌉−1 of them; the pooled median would not
///   (its samples from a disturbed repetition still pull it).
/// - `n`, `mean`, `min`, `max`: exact over all samples; `stddev`: the exact
///   pooled sample standard deviation (within- plus between-repetition sums
///   of squares); `ci95`: Student-t interval of the mean from those.
/// - `p99`: the largest repetition p99 (an upper bound of the pooled p99).
///
/// `None` for no parts; one part is returned unchanged.
pub fn merge_summaries_with(parts: &[Summary], headline: Headline) -> Option<Summary> {
    match parts {
        [] => return None,
        [one] => return Some(*one),
        _ => {}
    }
    let n: usize = parts.iter().map(|p| p.n).sum();
    let nf = n as f64;
    let mean = parts.iter().map(|p| p.n as f64 * p.mean).sum::<f64>() / nf;
    let ss: f64 = parts
        .iter()
        .map(|p| {
            let within = (p.n.saturating_sub(1)) as f64 * p.stddev * p.stddev;
            within + p.n as f64 * (p.mean - mean).powi(2)
        })
        .sum();
    let stddev = if n > 1 { (ss / (nf - 1.0)).sqrt() } else { 0.0 };
    let medians: Vec<f64> = parts.iter().map(|p| p.median).collect();
    let ci95 = (n >= 2)
        .then(|| hwqos_core::stats::student_t_quantile(0.975, nf - 1.0))
        .flatten()
        .map(|t| hwqos_core::stats::ConfidenceInterval {
            mean,
            half_width: t * stddev / nf.sqrt(),
            level: 0.95,
            n,
        });
    Some(Summary {
        n,
        min: parts.iter().map(|p| p.min).fold(f64::INFINITY, f64::min),
        max: parts
            .iter()
            .map(|p| p.max)
            .fold(f64::NEG_INFINITY, f64::max),
        mean,
        median: match headline {
            Headline::MedianOfMedians => hwqos_core::stats::median(&medians)?,
            Headline::Lowest => medians.iter().copied().fold(f64::INFINITY, f64::min),
            Headline::Highest => medians.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        },
        stddev,
        p99: parts
            .iter()
            .map(|p| p.p99)
            .fold(f64::NEG_INFINITY, f64::max),
        ci95,
    })
}

/// Which repetition median becomes the merged headline `median`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Headline {
    /// The median of the repetition medians (ratios, counts, rates of a clock).
    MedianOfMedians,
    /// The lowest repetition median: a cost, which disturbances only raise.
    Lowest,
    /// The highest repetition median: a rate, which disturbances only lower.
    Highest,
}

/// [`merge_summaries_with`] the [`Headline::MedianOfMedians`].
pub fn merge_summaries(parts: &[Summary]) -> Option<Summary> {
    merge_summaries_with(parts, Headline::MedianOfMedians)
}

/// A cost field (time per operation) of every part, merged with
/// [`Headline::Lowest`].
pub(crate) fn merge_cost<T>(parts: &[T], field: impl Fn(&T) -> &Summary) -> Option<Summary> {
    let v: Vec<Summary> = parts.iter().map(|p| *field(p)).collect();
    merge_summaries_with(&v, Headline::Lowest)
}

/// A rate field (bytes per second) of every part, merged with
/// [`Headline::Highest`].
pub(crate) fn merge_rate<T>(parts: &[T], field: impl Fn(&T) -> &Summary) -> Option<Summary> {
    let v: Vec<Summary> = parts.iter().map(|p| *field(p)).collect();
    merge_summaries_with(&v, Headline::Highest)
}

/// The calling thread's involuntary context switches so far: a change over
/// a timed batch means another task ran on the CPU during it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preemptions(i64);

impl Preemptions {
    /// The calling thread's involuntary context switches now (`getrusage`).
    pub fn now() -> Preemptions {
        // SAFETY: an all-zero rusage is a valid value (plain integers).
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage fills the struct it is given; RUSAGE_THREAD is
        // valid on Linux.
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
        Preemptions(u.ru_nivcsw)
    }

    /// Whether the thread was preempted since `self`.
    pub fn since(self) -> bool {
        Preemptions::now() != self
    }
}

/// Runs `batch` until it returns `repeats` values measured without
/// preemption ([`Preemptions`]); see [`keep_clean`].
pub(crate) fn unpreempted<T>(repeats: usize, mut batch: impl FnMut() -> T) -> Vec<T> {
    keep_clean(repeats, || {
        let before = Preemptions::now();
        let value = batch();
        (value, before.since())
    })
}

/// Runs `attempt` (a value and whether it was disturbed) until `repeats`
/// undisturbed values are in, or `2 × repeats + 2` attempts are spent;
/// disturbed values then fill up what is missing, latest first.
pub(crate) fn keep_clean<T>(repeats: usize, mut attempt: impl FnMut() -> (T, bool)) -> Vec<T> {
    let mut clean = Vec::with_capacity(repeats);
    let mut disturbed = Vec::new();
    for _ in 0..2 * repeats + 2 {
        if clean.len() == repeats {
            break;
        }
        match attempt() {
            (value, false) => clean.push(value),
            (value, true) => disturbed.push(value),
        }
    }
    while clean.len() < repeats {
        match disturbed.pop() {
            Some(v) => clean.push(v),
            None => break,
        }
    }
    clean
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
    hwqos_core::affinity::thread_affinity(0)
        .ok()
        .and_then(|cpus| cpus.last().copied())
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
    previous: Option<Vec<u32>>,
}

impl Pinned {
    /// Pins the calling thread to `cpu`; errors with [`ProbeError::Pin`] when
    /// the kernel refuses.
    pub fn to(cpu: u32) -> Result<Pinned, ProbeError> {
        let previous = hwqos_core::affinity::thread_affinity(0).ok();
        hwqos_core::affinity::pin_current_thread(cpu)
            .map_err(|source| ProbeError::Pin { cpu, source })?;
        Ok(Pinned { previous })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(cpus) = &self.previous {
            let _ = hwqos_core::affinity::set_thread_affinity(0, cpus);
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
/// [`Solo::Yes`]: `op` involves no other task, so batches during which the
/// thread was preempted are measured again ([`unpreempted`]).
pub(crate) fn per_op_ns(
    repeats: usize,
    ops: u64,
    overhead_ns: f64,
    solo: Solo,
    mut op: impl FnMut(),
) -> Option<Summary> {
    for _ in 0..ops.min(1000) {
        op();
    }
    let mut batch = || {
        let t0 = monotonic_ns();
        for _ in 0..ops {
            op();
        }
        let t1 = monotonic_ns();
        (((t1 - t0) as f64 - overhead_ns).max(0.0)) / ops as f64
    };
    let v: Vec<f64> = match solo {
        Solo::Yes => unpreempted(repeats, batch),
        Solo::No => (0..repeats).map(|_| batch()).collect(),
    };
    black_box(&v);
    summarize(&v)
}

/// Whether a timed operation involves only the measuring thread (then a
/// preemption during its batch is a disturbance, not part of the cost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Solo {
    Yes,
    No,
}

/// SplitMix64: a tiny, fully specified generator, so a fixed seed gives the
/// same pointer chase and the same timer requests across builds and
/// dependency updates (rand's StdRng does not promise that).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed` (any value, 0 included).
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next pseudo-random 64-bit value.
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
    fn merged_summaries_pool_exactly_and_take_the_median_of_medians() {
        let reps: [&[f64]; 3] = [&[1.0, 2.0, 3.0], &[2.0, 3.0, 4.0, 5.0], &[100.0, 101.0]];
        let parts: Vec<Summary> = reps.iter().map(|r| summarize(r).unwrap()).collect();
        let all: Vec<f64> = reps.concat();
        let pooled = summarize(&all).unwrap();
        let m = merge_summaries(&parts).unwrap();
        assert_eq!(m.n, 9);
        assert_eq!((m.min, m.max), (1.0, 101.0));
        assert!((m.mean - pooled.mean).abs() < 1e-9);
        assert!((m.stddev - pooled.stddev).abs() < 1e-9, "{m:?} {pooled:?}");
        let ci = m.ci95.unwrap();
        let want = pooled.ci95.unwrap();
        assert!((ci.half_width - want.half_width).abs() < 1e-9);
        // Repetition medians 2, 3.5, 100.5: the disturbed one does not move it.
        assert_eq!(m.median, 3.5);
        assert_eq!(merge_summaries(&parts[..1]), Some(parts[0]));
        assert_eq!(merge_summaries(&[]), None);
    }

    #[test]
    fn costs_take_the_lowest_and_rates_the_highest_repetition_median() {
        let reps: [&[f64]; 3] = [
            &[140.0, 141.0, 200.0],
            &[200.0, 201.0, 199.0],
            &[139.0, 250.0, 142.0],
        ];
        let parts: Vec<Summary> = reps.iter().map(|r| summarize(r).unwrap()).collect();
        let cost = merge_summaries_with(&parts, Headline::Lowest).unwrap();
        assert_eq!(cost.median, 141.0);
        assert_eq!(cost.min, 139.0, "min stays exact over all samples");
        let rate = merge_summaries_with(&parts, Headline::Highest).unwrap();
        assert_eq!(rate.median, 200.0);
        assert_eq!(cost.n, 9);
        assert_eq!(cost.mean, rate.mean);
    }

    #[test]
    fn disturbed_batches_are_measured_again() {
        let mut calls = 0;
        // Every third attempt disturbed: 4 clean ones from 5 attempts.
        let v = keep_clean(4, || {
            calls += 1;
            (calls, calls % 3 == 0)
        });
        assert_eq!(v, vec![1, 2, 4, 5]);
        // All disturbed: 2 × 3 + 2 attempts, the latest fill up.
        let mut calls = 0;
        let v = keep_clean(3, || {
            calls += 1;
            (calls, true)
        });
        assert_eq!(v, vec![8, 7, 6]);
        let mut calls = 0;
        let v = keep_clean(3, || {
            calls += 1;
            (calls, calls <= 6)
        });
        assert_eq!(v, vec![7, 8, 6]);
    }

    #[test]
    fn sharing_the_cpu_without_blocking_is_a_preemption() {
        // Both threads pinned to one CPU and never blocking: whenever the
        // spinner makes progress while this thread busy-waits, this thread
        // was preempted (involuntarily) to let it run.
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let cpu = default_cpu();
        let _pin = Pinned::to(cpu).unwrap();
        let (spins, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let spinner = {
            let (spins, stop) = (spins.clone(), stop.clone());
            std::thread::spawn(move || {
                let _pin = Pinned::to(cpu).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    spins.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        while spins.load(Ordering::Relaxed) == 0 {
            std::hint::spin_loop();
        }
        let before = Preemptions::now();
        let seen = spins.load(Ordering::Relaxed);
        let give_up = monotonic_ns() + 10_000_000_000;
        while spins.load(Ordering::Relaxed) == seen && monotonic_ns() < give_up {
            std::hint::spin_loop();
        }
        let progressed = spins.load(Ordering::Relaxed) != seen;
        let preempted = before.since();
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        assert!(progressed, "the spinner never ran on the shared CPU");
        assert!(preempted, "the spinner ran, so this thread was preempted");
    }

    #[test]
    fn repetitions_share_the_batches() {
        let o = ProbeOptions::default();
        assert_eq!(o.repeats(), 15);
        let r = ProbeOptions {
            round: Some((1, 5)),
            ..ProbeOptions::default()
        };
        assert_eq!(r.repeats(), 3);
        assert_eq!(r.share(40), 8);
        assert_eq!(r.share(1), 1);
        let q = ProbeOptions {
            round: Some((0, 3)),
            ..ProbeOptions::quick()
        };
        assert_eq!(q.repeats(), 2);
        assert_eq!(ProbeOptions::default().rounds(), 5);
        assert_eq!(ProbeOptions::quick().rounds(), 3);
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
