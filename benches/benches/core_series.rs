//! Benchmarks of the hwqos-core series operations at the monitor's default
//! database size (30,000 points) and of the Butterworth filters.
//!
//! `cargo bench -p hwqos-benches --bench core_series` measures;
//! `… -- --test` runs every benchmark once as a smoke test.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use hwqos_core::filter::{butterworth_lowpass_filtfilt, Butterworth};
use hwqos_core::Series;
use std::hint::black_box;

const POINTS: usize = 30_000;
const STEP_NS: u64 = 100_000_000; // 10 Hz, the monitor's default rate

/// A deterministic, noisy-looking signal (no RNG dependency needed).
fn signal(i: usize, phase: f64) -> f64 {
    let t = i as f64;
    (t * 0.01 + phase).sin()
        + 0.3 * (t * 0.37 + phase).sin()
        + 0.1 * ((i * 7919 % 101) as f64 / 101.0)
}

fn series(phase: f64, offset_ns: u64) -> Series {
    Series::from_points(
        POINTS,
        (0..POINTS).map(|i| (offset_ns + i as u64 * STEP_NS, signal(i, phase))),
    )
}

fn bench_push(c: &mut Criterion) {
    let mut full = series(0.0, 0);
    let mut t = POINTS as u64 * STEP_NS;
    c.bench_function("series_push_ring_full", |b| {
        b.iter(|| {
            t += STEP_NS;
            full.push(black_box(t), black_box(1.5));
        })
    });
}

fn bench_statistics(c: &mut Criterion) {
    let s = series(0.0, 0);
    c.bench_function("series_percentile_p99_30k", |b| {
        b.iter(|| black_box(&s).percentile(black_box(99.0)))
    });
    c.bench_function("series_mean_30k", |b| b.iter(|| black_box(&s).mean()));
}

fn bench_resample(c: &mut Criterion) {
    let s = series(0.0, 0);
    let end = (POINTS as u64 - 1) * STEP_NS;
    // Onto a grid offset by a third of a step: every point is interpolated.
    c.bench_function("series_resample_30k", |b| {
        b.iter(|| black_box(&s).resample(STEP_NS / 3, end, STEP_NS))
    });
}

fn bench_correlation(c: &mut Criterion) {
    let a = series(0.0, 0);
    let b_series = series(0.5, STEP_NS / 2);
    c.bench_function("series_correlation_30k", |b| {
        b.iter(|| black_box(&a).correlation(black_box(&b_series), STEP_NS))
    });
}

fn bench_lowpass(c: &mut Criterion) {
    let s = series(0.0, 0);
    c.bench_function("series_lowpass_order4_30k", |b| {
        b.iter(|| black_box(&s).lowpass(4, black_box(0.1)))
    });
    let values = s.values();
    c.bench_function("filtfilt_order4_30k", |b| {
        b.iter(|| butterworth_lowpass_filtfilt(black_box(&values), 4, 0.1))
    });
    c.bench_function("butterworth_causal_order4_30k", |b| {
        b.iter_batched(
            || Butterworth::new(4, 0.1),
            |filter| filter.map(|mut f| values.iter().map(|&x| f.process(x)).sum::<f64>()),
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(
    benches,
    bench_push,
    bench_statistics,
    bench_resample,
    bench_correlation,
    bench_lowpass
);
criterion_main!(benches);
