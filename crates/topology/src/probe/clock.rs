//! Clock-read overhead (`clock_gettime(CLOCK_MONOTONIC)`, and `rdtsc` on
//! x86-64) and the TSC rate: TSC ticks per second of `CLOCK_MONOTONIC`, the
//! factor that turns TSC deltas (and ns) into cycles of the TSC.

use super::{
    merge_cost, merge_summaries, merge_summaries_with, per_op_ns, pin, Headline, ProbeError,
    ProbeOptions, Solo,
};
use hwqos_core::stats::Summary;
use hwqos_core::time::monotonic_ns;
use serde::{Deserialize, Serialize};
use std::hint::black_box;

/// What the [`clock`](self) probe measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockResult {
    /// ns per `clock_gettime(CLOCK_MONOTONIC)` call (vDSO on most nodes).
    pub clock_gettime_ns: Summary,
    /// ns per `rdtsc`, where the CPU has one.
    pub rdtsc_ns: Option<Summary>,
    /// TSC ticks per second (median over the calibration intervals).
    pub tsc_hz: Option<f64>,
    /// TSC rate per calibration interval, Hz.
    pub tsc_hz_summary: Option<Summary>,
    /// `constant_tsc` and `nonstop_tsc` are both set in /proc/cpuinfo.
    pub tsc_invariant: bool,
}

/// Reads the time-stamp counter.
#[cfg(target_arch = "x86_64")]
pub fn rdtsc() -> Option<u64> {
    // SAFETY: RDTSC is available on every x86-64 CPU and has no side effects.
    Some(unsafe { core::arch::x86_64::_rdtsc() })
}

/// Reads the time-stamp counter (none on this architecture).
#[cfg(not(target_arch = "x86_64"))]
pub fn rdtsc() -> Option<u64> {
    None
}

/// TSC ticks per second measured over `interval_ms` against `CLOCK_MONOTONIC`.
pub fn tsc_rate(interval_ms: u64) -> Option<f64> {
    let c0 = rdtsc()?;
    let t0 = monotonic_ns();
    let end = t0 + interval_ms * 1_000_000;
    while monotonic_ns() < end {
        std::hint::spin_loop();
    }
    let c1 = rdtsc()?;
    let t1 = monotonic_ns();
    Some((c1.wrapping_sub(c0)) as f64 / ((t1 - t0) as f64 / 1e9))
}

/// A 20 ms TSC rate estimate for probes run without the clock probe.
pub fn tsc_hz_quick() -> Option<f64> {
    tsc_rate(20)
}

/// Runs the clock probe pinned as `options` says. `rdtsc` figures and the
/// TSC rate are `None` off x86-64. Errors when pinning fails.
pub fn run(options: &ProbeOptions) -> Result<ClockResult, ProbeError> {
    let (_pin, _cpu) = pin(options)?;
    let repeats = options.repeats();
    let ops = options.scaled(200_000);
    // The loop itself is the only overhead here: no timer overhead to subtract
    // beyond the two reads that bracket each batch.
    let overhead = super::timing_overhead_ns();
    let clock_gettime_ns = per_op_ns(repeats, ops, overhead, Solo::Yes, || {
        black_box(monotonic_ns());
    })
    .ok_or_else(|| ProbeError::Other("no clock_gettime samples".into()))?;
    let rdtsc_ns = rdtsc().and_then(|_| {
        per_op_ns(repeats, ops, overhead, Solo::Yes, || {
            black_box(rdtsc());
        })
    });
    let intervals: Vec<f64> = (0..options.share(if options.quick { 3 } else { 10 }).max(2))
        .filter_map(|_| tsc_rate(if options.quick { 10 } else { 20 }))
        .collect();
    let tsc_hz_summary = hwqos_core::stats::summarize(&intervals);
    let topo = crate::Topology::this_node().ok();
    Ok(ClockResult {
        clock_gettime_ns,
        rdtsc_ns,
        tsc_hz: tsc_hz_summary.map(|s| s.median),
        tsc_hz_summary,
        tsc_invariant: topo.is_some_and(|t| t.invariant_tsc()),
    })
}

/// Merges interleaved repetitions (see [`super::merge_summaries`]).
pub fn merge(parts: Vec<ClockResult>) -> Option<ClockResult> {
    let first = parts.first()?;
    let rdtsc: Vec<Summary> = parts.iter().filter_map(|p| p.rdtsc_ns).collect();
    let rates: Vec<Summary> = parts.iter().filter_map(|p| p.tsc_hz_summary).collect();
    let tsc_hz_summary = merge_summaries(&rates);
    Some(ClockResult {
        clock_gettime_ns: merge_cost(&parts, |p| &p.clock_gettime_ns)?,
        rdtsc_ns: merge_summaries_with(&rdtsc, Headline::Lowest),
        tsc_hz: tsc_hz_summary.map(|s| s.median),
        tsc_hz_summary,
        tsc_invariant: first.tsc_invariant,
    })
}
