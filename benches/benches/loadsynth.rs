//! Benchmarks of hwqos-loadsynth's replay path: the generators' inner steps,
//! one PID step and one closed-loop step over 8 (metric, CPU) pairs, a frame
//! turned into the loop's measurement, the dynamic replay's per-tick target
//! and knob lookup, and a load model file read and validated.
//!
//! `cargo bench -p hwqos-benches --bench loadsynth` measures;
//! `… -- --test` runs every benchmark once as a smoke test.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hwqos_core::metric::names;
use hwqos_core::{Frame, MetricName, Sample, Scope, Timestamp};
use hwqos_loadsynth::control::{ClosedLoop, Controller, Gains, KnobSink};
use hwqos_loadsynth::generator::{branch, dcache, icache};
use hwqos_loadsynth::model::{LoadModel, ModelEntry, ModelScope, MODEL_SCHEMA};
use hwqos_loadsynth::source::{values_from_frame, Measurement};
use hwqos_loadsynth::synth::{dynamic_knob, dynamic_target};
use hwqos_loadsynth::LoadMetric;
use hwqos_topology::{HardwareModel, OsInventory, Topology};
use std::hint::black_box;
use std::time::Duration;

/// The replay's measurement period (`SynthOptions::default`).
const PERIOD_NS: u64 = 250_000_000;
const CPUS: [u32; 2] = [0, 1];
/// CPU load and the three coupled cache miss ratios, with their targets.
const PAIRS: [(LoadMetric, f64); 4] = [
    (LoadMetric::CpuUtil, 0.6),
    (LoadMetric::L1dMissRatio, 0.05),
    (LoadMetric::L2MissRatio, 0.2),
    (LoadMetric::LlcMissRatio, 0.3),
];
/// A 5-minute recording at the replay's 4 Hz.
const SERIES_POINTS: usize = 1200;

/// A deterministic pseudo-random stream (splitmix64; no RNG, no seed).
fn noise(i: u64) -> f64 {
    let mut z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (z ^ (z >> 31)) as f64 / u64::MAX as f64
}

fn bench_generators(c: &mut Criterion) {
    let mut g = c.benchmark_group("generator");
    g.throughput(Throughput::Elements(10_000));
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    g.bench_function("branch_10k_30pct_unpredictable", |b| {
        b.iter(|| black_box(branch::branches(black_box(0.3), 10_000, &mut state)))
    });
    let mut state = 1u64;
    g.bench_function("icache_10k_calls_25pct_far", |b| {
        b.iter(|| black_box(icache::calls(black_box(0.25), 10_000, &mut state)))
    });
    // One block of reads from a plan for a 32 KiB/8-way L1 and a 256 KiB/4-way
    // L2, with 10 % L1 and 5 % L2 misses asked for.
    let levels = [
        dcache::Geometry {
            size_bytes: 32 * 1024,
            ways: 8,
            line_size: 64,
        },
        dcache::Geometry {
            size_bytes: 256 * 1024,
            ways: 4,
            line_size: 64,
        },
    ];
    let plan = dcache::Plan::new(&levels).expect("a plan");
    let mut buffer = dcache::Buffer::new(plan).expect("mapping");
    g.throughput(Throughput::Elements(65_536));
    g.bench_function("dcache_65536_reads_l1_l2", |b| {
        b.iter(|| black_box(buffer.read(black_box(&[0.10, 0.05]), 65_536)))
    });
    g.finish();
}

/// Takes the knobs without keeping them: only the loop's own work is timed.
struct DiscardKnobs(f64);

impl KnobSink for DiscardKnobs {
    fn set(&mut self, _metric: LoadMetric, _cpu: u32, value: f64) {
        self.0 += value;
    }
}

fn closed_loop() -> ClosedLoop {
    let mut lp = ClosedLoop::new(8);
    for cpu in CPUS {
        for (metric, target) in PAIRS {
            lp.add(
                metric,
                cpu,
                Controller::new(target, 0.1, (0.0, 1.0), Gains::default_for(metric)),
                metric.default_tolerance(),
            );
        }
    }
    lp
}

fn bench_control(c: &mut Criterion) {
    let mut controller = Controller::new(
        0.6,
        0.2,
        (0.0, 1.0),
        Gains::default_for(LoadMetric::CpuUtil),
    );
    let mut measured = 0.0;
    // Against a first-order plant (gain 0.5, lag 0.5), so the error varies.
    c.bench_function("pid_step", |b| {
        b.iter(|| {
            let knob = controller.step(black_box(measured), 0.25, 1.0);
            measured += 0.5 * (0.5 * knob - measured);
            black_box(knob)
        })
    });
    let mut lp = closed_loop();
    let mut m = Measurement {
        t_ns: PERIOD_NS,
        interval_ns: PERIOD_NS,
        values: CPUS
            .iter()
            .flat_map(|&cpu| PAIRS.map(|(metric, target)| ((metric, cpu), target * 0.9)))
            .collect(),
    };
    let mut sink = DiscardKnobs(0.0);
    c.bench_function("closed_loop_step_8_pairs", |b| {
        b.iter(|| {
            m.t_ns += PERIOD_NS;
            black_box(lp.step(black_box(&m), &mut sink))
        })
    });
}

/// A monitor frame of one tick: 100 processes × 14 metrics, then the per-CPU
/// counters and utilization the load metrics are computed from.
fn monitor_frame(processes: u32) -> Frame {
    let time = Timestamp {
        mono_ns: 10 * PERIOD_NS,
        wall_ns: 0,
    };
    let mut samples = Vec::new();
    for pid in 4000..4000 + processes {
        for k in 0..14 {
            samples.push(Sample::gauge(
                time,
                Scope::Process { pid },
                MetricName::from_static(names::OS_PROC_CPU),
                f64::from(k),
            ));
        }
    }
    for cpu in CPUS {
        for (name, value) in [
            (names::HW_L1D_ACCESS, 2.5e8),
            (names::HW_L1D_MISS, 1.2e7),
            (names::HW_L2_ACCESS, 1.2e7),
            (names::HW_L2_MISS, 2.4e6),
            (names::HW_LLC_ACCESS, 2.4e6),
            (names::HW_LLC_MISS, 7.2e5),
            (names::OS_CPU_UTIL, 0.55),
        ] {
            samples.push(Sample::gauge(
                time,
                Scope::Cpu { cpu },
                MetricName::from_static(name),
                value,
            ));
        }
    }
    Frame {
        seq: 10,
        time,
        interval_ns: PERIOD_NS,
        samples,
        labels: Vec::new(),
    }
}

fn bench_measurement(c: &mut Criterion) {
    let wanted: Vec<(LoadMetric, u32)> = CPUS
        .iter()
        .flat_map(|&cpu| PAIRS.map(|(metric, _)| (metric, cpu)))
        .collect();
    // The in-process source's frame (per-CPU samples only) and one from the
    // monitor's live API (process samples first).
    let local = monitor_frame(0);
    c.bench_function("values_from_frame_8_pairs_per_cpu_frame", |b| {
        b.iter(|| black_box(values_from_frame(black_box(&local), &wanted)))
    });
    let monitor = monitor_frame(100);
    c.bench_function("values_from_frame_8_pairs_100_process_frame", |b| {
        b.iter(|| black_box(values_from_frame(black_box(&monitor), &wanted)))
    });
}

/// A model of the 8 pairs on the 16-CPU fixture, each with a 5-minute series
/// for dynamic replay.
fn load_model() -> LoadModel {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/topology/tests/fixtures/numa-server");
    let topology = Topology::read(&root).expect("the fixture reads");
    let node = HardwareModel::new(topology, OsInventory::read(&root), None);
    let mut entries = Vec::new();
    for cpu in CPUS {
        for (k, (metric, target)) in PAIRS.into_iter().enumerate() {
            let controller =
                Controller::new(target, target, (0.0, 1.0), Gains::default_for(metric));
            let series = (0..SERIES_POINTS)
                .map(|i| {
                    let t_s = i as f64 * PERIOD_NS as f64 / 1e9;
                    let wobble =
                        0.8 + 0.4 * noise((u64::from(cpu) * 8 + k as u64) << 20 | i as u64);
                    (t_s, target * wobble)
                })
                .collect();
            entries.push(ModelEntry {
                metric,
                cpu,
                target,
                knob: target,
                controller: controller.state(),
                tolerance: metric.default_tolerance(),
                measured: Some(target),
                series,
            });
        }
    }
    LoadModel {
        schema: MODEL_SCHEMA.into(),
        created: "2026-11-28T00:00:00Z".into(),
        version: 1,
        node,
        convergence_s: 12.0,
        samples: 48,
        period_s: PERIOD_NS as f64 / 1e9,
        measured_on: ModelScope::WholeCpu,
        entries,
    }
}

fn bench_model(c: &mut Criterion) {
    let model = load_model();
    // A dynamic replay's per-tick work besides the loop: each pair's target
    // and knob at the elapsed time, which walks through the series (looping
    // over it) as the replay's clock would; each lookup scans from the end.
    let mut t_s = 0.0;
    c.bench_function("dynamic_target_and_knob_8_pairs_1200_points", |b| {
        b.iter(|| {
            t_s += 0.25;
            let mut sum = 0.0;
            for e in &model.entries {
                sum += dynamic_target(e, black_box(t_s)) + dynamic_knob(e, black_box(t_s));
            }
            black_box(sum)
        })
    });
    let path =
        std::env::temp_dir().join(format!("hwqos-bench-loadmodel-{}.json", std::process::id()));
    model.save(&path).expect("the model saves");
    c.bench_function("load_model_load_8_pairs_1200_points", |b| {
        b.iter(|| black_box(LoadModel::load(black_box(&path)).expect("the model loads")))
    });
    let _ = std::fs::remove_file(&path);
}

criterion_group!(
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_generators, bench_control, bench_measurement, bench_model
);
criterion_main!(benches);
