//! Benchmarks of the monitor's per-tick hot path: reading a counter group with
//! the perf backend (software events, so it runs on nodes without a PMU), a
//! whole sampler tick on this process, and encoding a frame as JSON.
//!
//! `cargo bench -p hwqos-benches --bench pmu_read` measures;
//! `… -- --test` runs every benchmark once as a smoke test.

use criterion::{criterion_group, criterion_main, Criterion};
use hwqos_core::{CounterReading, Frame, MetricName, Sample, Scope, Timestamp};
use hwqos_pmu::backend::perf::PerfBackend;
use hwqos_pmu::backend::{CountTarget, CounterBackend};
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use hwqos_pmu::target::{Resolver, TargetSelector};
use std::hint::black_box;

const EVENTS: [&str; 4] = [
    "sw.task_clock",
    "sw.page_faults",
    "sw.context_switches",
    "sw.cpu_migrations",
];

fn bench_group_read(c: &mut Criterion) {
    let catalog = Catalog::for_this_node();
    let events: Vec<_> = EVENTS
        .iter()
        .filter_map(|e| catalog.resolve(e).ok())
        .collect();
    let mut backend = PerfBackend::new();
    // Criterion runs on the main thread, whose tid is the pid.
    let me = CountTarget::Task {
        tid: std::process::id(),
        inherit: false,
    };
    let group = match backend.open_group(&me, &events) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("skipping perf group benchmarks: {e}");
            return;
        }
    };
    if let Err(e) = backend.enable(group) {
        eprintln!("skipping perf group benchmarks: {e}");
        return;
    }
    c.bench_function("perf_read_group_4_sw_events", |b| {
        b.iter(|| black_box(backend.read(group).ok()))
    });
    c.bench_function("perf_disable_read_enable_4_sw_events", |b| {
        b.iter(|| {
            let _ = backend.disable(group);
            let r = backend.read(group).ok();
            let _ = backend.enable(group);
            black_box(r)
        })
    });
}

fn bench_sampler_tick(c: &mut Criterion) {
    let cfg = SamplerConfig {
        targets: vec![TargetSelector::Pid(std::process::id())],
        event_sets: vec![
            EVENTS[..2].iter().map(|e| e.to_string()).collect(),
            EVENTS[2..].iter().map(|e| e.to_string()).collect(),
        ],
        rescan_every: 0,
        ..SamplerConfig::default()
    };
    let sampler = Sampler::new(
        cfg,
        &Catalog::for_this_node(),
        Box::new(PerfBackend::new()),
        Resolver::for_this_node(),
    );
    let mut sampler = match sampler {
        Ok(s) => s,
        Err(e) => {
            eprintln!("skipping the sampler benchmark: {e}");
            return;
        }
    };
    c.bench_function("sampler_tick_this_process_2_sets", |b| {
        b.iter(|| black_box(sampler.sample(Timestamp::now())))
    });
}

/// A frame the size of a busy tick: 100 processes × (4 counters + 4 rates + 1 derived).
fn big_frame() -> Frame {
    let t = Timestamp {
        mono_ns: 1_000_000_000,
        wall_ns: 1_700_000_000_000_000_000,
    };
    let mut samples = Vec::new();
    for pid in 1000..1100u32 {
        let scope = Scope::Process { pid };
        for (i, e) in EVENTS.iter().enumerate() {
            let metric =
                MetricName::new(*e).unwrap_or_else(|_| MetricName::from_static("sw.task_clock"));
            let reading = CounterReading {
                raw: 123_456 + i as u64,
                time_enabled: 100_000_000,
                time_running: 50_000_000,
            };
            samples.extend(Sample::counter(t, scope.clone(), metric.clone(), reading));
            samples.push(Sample::gauge(
                t,
                scope.clone(),
                hwqos_core::metric::rate_name(&metric),
                2_469_120.0,
            ));
        }
        samples.push(Sample::gauge(
            t,
            scope,
            MetricName::from_static("derived.cpu_utilization"),
            0.5,
        ));
    }
    Frame {
        seq: 42,
        time: t,
        interval_ns: 100_000_000,
        samples,
        labels: Vec::new(),
    }
}

fn bench_frame_json(c: &mut Criterion) {
    let frame = big_frame();
    c.bench_function("frame_to_json_900_samples", |b| {
        b.iter(|| {
            black_box(
                serde_json::to_vec(black_box(&frame))
                    .map(|v| v.len())
                    .unwrap_or(0),
            )
        })
    });
}

criterion_group!(
    benches,
    bench_group_read,
    bench_sampler_tick,
    bench_frame_json
);
criterion_main!(benches);
