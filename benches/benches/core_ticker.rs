//! Benchmarks of the hwqos-core ticker's bookkeeping around each wake-up:
//! the slack estimate's update and the early-wake time it gives, the
//! deadline grid re-anchored on a period change, the lateness histogram and
//! the sleep-error statistics. Nothing here sleeps: `Ticker::wait` reads the
//! clock and sleeps until a deadline, so only the arithmetic around it is
//! measured.
//!
//! `cargo bench -p hwqos-benches --bench core_ticker` measures;
//! `… -- --test` runs every benchmark once as a smoke test.

use criterion::{criterion_group, criterion_main, Criterion};
use hwqos_core::ticker::{LatencyHistogram, SlackEstimator, SleepErrorStats};
use hwqos_core::{SleepStrategy, Ticker};
use std::hint::black_box;
use std::time::Duration;

/// A deterministic pseudo-random stream (splitmix64; no RNG, no seed).
fn noise(i: u64) -> u64 {
    let mut z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^ (z >> 31)
}

/// 1,024 wake-up latencies between 20 and 220 µs, cycled through.
fn latencies() -> Vec<u64> {
    (0..1024).map(|i| 20_000 + noise(i) % 200_000).collect()
}

fn bench_slack(c: &mut Criterion) {
    let latencies = latencies();
    let mut slack = SlackEstimator::new();
    let mut i = 0;
    // What `SleepStrategy::SlackCompensated` does per wake-up: the early-wake
    // time for the next deadline, then the observed latency.
    c.bench_function("slack_estimator_headroom_and_observe", |b| {
        b.iter(|| {
            let early = slack.headroom_ns();
            slack.observe(black_box(latencies[i % latencies.len()]));
            i += 1;
            black_box(early)
        })
    });
}

fn bench_deadline(c: &mut Criterion) {
    let mut ticker = Ticker::starting_at(Duration::from_millis(10), 1_000_000_000)
        .expect("valid period")
        .with_strategy(SleepStrategy::SlackCompensated);
    let periods = [Duration::from_millis(10), Duration::from_millis(5)];
    let mut i = 0;
    // A period change (grid re-anchored, slack bound adjusted) and the next
    // deadline on the new grid.
    c.bench_function("ticker_set_period_next_deadline", |b| {
        b.iter(|| {
            ticker
                .set_period(black_box(periods[i % 2]))
                .expect("valid period");
            i += 1;
            black_box(ticker.next_deadline_ns())
        })
    });
}

fn bench_lateness(c: &mut Criterion) {
    let latencies = latencies();
    let mut histogram = LatencyHistogram::new();
    let mut i = 0;
    c.bench_function("latency_histogram_record", |b| {
        b.iter(|| {
            histogram.record(black_box(latencies[i % latencies.len()]));
            i += 1;
        })
    });
    // The ticker's statistics after a day at 10 Hz (864,000 wake-ups).
    let mut day = LatencyHistogram::new();
    for k in 0..864_000u64 {
        day.record(latencies[(k % 1024) as usize]);
    }
    c.bench_function("latency_histogram_p50_p99_864k", |b| {
        b.iter(|| {
            let p50 = black_box(&day).percentile(50.0);
            let p99 = black_box(&day).percentile(99.0);
            black_box((p50, p99))
        })
    });
}

fn bench_sleep_error(c: &mut Criterion) {
    let latencies = latencies();
    let mut stats = SleepErrorStats::new();
    let mut i = 0;
    c.bench_function("sleep_error_stats_record", |b| {
        b.iter(|| {
            let requested = 1_000_000;
            stats.record(
                black_box(requested),
                requested + latencies[i % latencies.len()],
            );
            i += 1;
        })
    });
    c.bench_function("sleep_error_stats_summary", |b| {
        b.iter(|| black_box(black_box(&stats).summary()))
    });
}

criterion_group!(
    name = benches;
    config = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_slack, bench_deadline, bench_lateness, bench_sleep_error
);
criterion_main!(benches);
