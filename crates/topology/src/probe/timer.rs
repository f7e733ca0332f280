//! Timer accuracy per sleep strategy (seed 003 sections 3.2–3.7): a series of
//! sleep requests uniform in 0..`max_ms` from a fixed seed (the same series
//! for every strategy), each slept with the core ticker's `sleep_for`; the
//! absolute and relative errors' sample means and variances (AESM, AESV,
//! RESM, RESV) and the CPU time the sleeping thread used.

use super::{pin, ProbeError, ProbeOptions, SplitMix64};
use hwqos_core::ticker::{
    sleep_for, thread_timer_slack, SlackEstimator, SleepErrorStats, SleepStrategy,
    DEFAULT_HYBRID_SPIN_NS,
};
use hwqos_core::time::{monotonic_ns, thread_cpu_ns};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StrategyAccuracy {
    pub strategy: String,
    pub requests: u64,
    /// Absolute error sample mean (ns) and variance (ns²).
    pub aesm_ns: f64,
    pub aesv_ns2: f64,
    /// Relative error sample mean and variance.
    pub resm: f64,
    pub resv: f64,
    /// Largest single absolute error, ns.
    pub max_error_ns: f64,
    /// Thread CPU time per second slept (1.0: one CPU busy).
    pub cpu_fraction: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimerResult {
    pub requests_per_strategy: usize,
    pub max_ms: f64,
    pub seed: u64,
    /// The thread's timer slack while sleeping (Linux default 50 µs).
    pub timer_slack_ns: Option<u64>,
    pub strategies: Vec<StrategyAccuracy>,
}

/// The strategies measured, in the core ticker's order.
pub fn strategies() -> [SleepStrategy; 5] {
    [
        SleepStrategy::Relative,
        SleepStrategy::Absolute,
        SleepStrategy::SlackCompensated,
        SleepStrategy::BusyWait,
        SleepStrategy::Hybrid {
            spin_ns: DEFAULT_HYBRID_SPIN_NS,
        },
    ]
}

/// The request series (ns): `n` values uniform in [0, max_ms) ms.
pub fn requests(n: usize, max_ms: f64, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| (rng.unit() * max_ms * 1e6) as u64).collect()
}

/// Sleeps every request with `strategy` and summarizes the errors.
pub fn measure(strategy: &SleepStrategy, requests: &[u64]) -> Option<StrategyAccuracy> {
    let mut stats = SleepErrorStats::new();
    let mut slack = SlackEstimator::new();
    let mut max_error = 0.0f64;
    let cpu0 = thread_cpu_ns();
    let wall0 = monotonic_ns();
    for &r in requests {
        let t0 = monotonic_ns();
        let woke = sleep_for(Duration::from_nanos(r), strategy, &mut slack);
        let actual = woke - t0;
        stats.record(r, actual);
        max_error = max_error.max((actual as f64 - r as f64).abs());
    }
    let cpu = thread_cpu_ns() - cpu0;
    let wall = monotonic_ns() - wall0;
    let s = stats.summary()?;
    Some(StrategyAccuracy {
        strategy: strategy.to_string(),
        requests: s.n,
        aesm_ns: s.aesm_ns,
        aesv_ns2: s.aesv_ns2,
        resm: s.resm,
        resv: s.resv,
        max_error_ns: max_error,
        cpu_fraction: cpu as f64 / wall.max(1) as f64,
    })
}

pub fn run(options: &ProbeOptions) -> Result<TimerResult, ProbeError> {
    let (_pin, _cpu) = pin(options)?;
    let n = options
        .timer_requests
        .unwrap_or(if options.quick { 30 } else { 40 })
        .max(2);
    let max_ms = options
        .timer_max_ms
        .unwrap_or(if options.quick { 10.0 } else { 100.0 });
    if !(max_ms.is_finite() && max_ms > 0.0 && max_ms <= 10_000.0) {
        return Err(ProbeError::Other(format!(
            "timer request range 0..{max_ms} ms is not in (0, 10000] ms"
        )));
    }
    let series = requests(n, max_ms, options.seed);
    let strategies = strategies()
        .iter()
        .filter_map(|s| measure(s, &series))
        .collect();
    Ok(TimerResult {
        requests_per_strategy: n,
        max_ms,
        seed: options.seed,
        timer_slack_ns: thread_timer_slack().ok(),
        strategies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_series_is_fixed_and_in_range() {
        let a = requests(1000, 100.0, 5);
        assert_eq!(a, requests(1000, 100.0, 5));
        assert_ne!(a, requests(1000, 100.0, 6));
        assert!(a.iter().all(|r| *r < 100_000_000));
        let mean = a.iter().sum::<u64>() as f64 / a.len() as f64;
        assert!(
            (mean - 50e6).abs() < 5e6,
            "uniform 0-100 ms has mean ≈ 50 ms: {mean}"
        );
    }
}
