//! Benchmarks of hwqos-sched, the SRA loop's steps: the correlation analysis
//! of one evaluation period, the production fit of `predict`, the decision
//! engine, contract parsing, and what a quota backend computes when it puts
//! a process under quotas and reads its per-period statistics back.
//!
//! `cargo bench -p hwqos-benches --bench sched` measures;
//! `… -- --test` runs every benchmark once as a smoke test.

use criterion::{criterion_group, criterion_main, Criterion};
use hwqos_core::{Frame, MetricName, Sample, Scope, Timestamp};
use hwqos_sched::analysis::{from_frames, AnalysisParams};
use hwqos_sched::backend::sched_sra::{config_line, parse_stats, thread_share};
use hwqos_sched::backend::{QuotaSet, QuotaStats};
use hwqos_sched::contract::Contract;
use hwqos_sched::decision::decide;
use hwqos_sched::evaluation::analyse_frames;
use hwqos_sched::model::{ProcessModel, Sensitivity, SensitivityModel};
use hwqos_sched::predict::fit;
use hwqos_topology::Topology;
use std::hint::black_box;
use std::time::Duration;

const STEP_NS: u64 = 100_000_000; // the SRA agent's default sample interval
const X_METRIC: &str = "app.latency_us";
const RESOURCES: [&str; 6] = [
    "hw.cache.miss",
    "hw.instructions",
    "sw.page_faults",
    "sw.context_switches",
    "sw.cpu_migrations",
    "sw.task_clock",
];

/// A deterministic pseudo-random stream (splitmix64; no RNG, no seed).
fn noise(i: u64) -> f64 {
    let mut z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (z ^ (z >> 31)) as f64 / u64::MAX as f64
}

/// A recording of `frames` ticks of `processes` processes, each with the six
/// resources and *x*; *x* follows the cache misses, the rest is noise.
fn recording(frames: u64, processes: u32) -> Vec<Frame> {
    (0..frames)
        .map(|i| {
            let time = Timestamp {
                mono_ns: i * STEP_NS,
                wall_ns: 0,
            };
            let mut samples = Vec::new();
            for p in 0..processes {
                let pid = 4000 + p;
                let salt = (i * 64 + u64::from(p)) * 8;
                let load = (i as f64 * 0.05 + f64::from(p)).sin();
                let sample = |metric: &str, value: f64| Sample {
                    time,
                    scope: Scope::Process { pid },
                    metric: MetricName::new(metric).expect("a valid metric name"),
                    value,
                    counter: None,
                };
                for (k, resource) in RESOURCES.iter().enumerate() {
                    let base = 1000.0 * (k + 1) as f64;
                    let value = if k == 0 {
                        base * (1.5 + load)
                    } else {
                        base * (1.0 + noise(salt + k as u64))
                    };
                    samples.push(sample(resource, value));
                }
                samples.push(sample(X_METRIC, 200.0 + 80.0 * load + 20.0 * noise(salt)));
            }
            Frame {
                seq: i,
                time,
                interval_ns: STEP_NS,
                samples,
                labels: Vec::new(),
            }
        })
        .collect()
}

fn bench_analysis(c: &mut Criterion) {
    let params = AnalysisParams::default();
    // One evaluation period of `hwqos-sra run` at its defaults: 30 s of
    // 100 ms samples.
    let period = recording(300, 8);
    c.bench_function("sra_analyse_frames_300_frames_8_processes", |b| {
        b.iter(|| black_box(analyse_frames(black_box(&period), X_METRIC, &params)))
    });
    // `predict`'s production fit on a 5-minute recording, r̂ chosen by it.
    let production = from_frames(&recording(3000, 1), X_METRIC)
        .into_values()
        .next()
        .expect("one process with x and resources");
    c.bench_function("predict_fit_3000_samples_6_resources", |b| {
        b.iter(|| black_box(fit(black_box(&production), None, &params).expect("a fit")))
    });
}

/// The thesis' 16-CPU two-socket server with 4 LLC-sensitive, 4
/// L1-sensitive and 4 CPU-bound processes.
fn numa_server_model() -> (Topology, SensitivityModel) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/topology/tests/fixtures/numa-server");
    let topo = Topology::read(&root).expect("the fixture reads");
    let process = |name: String, resource: Option<(&str, f64)>| {
        let mut p = ProcessModel::new(format!("name:{name}").parse().expect("a selector"));
        p.sensitive_to = resource
            .map(|(r, correlation)| {
                vec![Sensitivity {
                    resource: r.into(),
                    correlation,
                    level: None,
                }]
            })
            .unwrap_or_default();
        p
    };
    let mut model = SensitivityModel::default();
    for i in 0..4 {
        model
            .processes
            .push(process(format!("llc{i}"), Some(("LLC-load-misses", 0.8))));
        model.processes.push(process(
            format!("l1d{i}"),
            Some(("L1-dcache-load-misses", 0.9)),
        ));
        model.processes.push(process(format!("cpu{i}"), None));
    }
    (topo, model)
}

fn bench_decision(c: &mut Criterion) {
    let (topo, model) = numa_server_model();
    c.bench_function("sra_decide_numa_server_12_processes", |b| {
        b.iter(|| black_box(decide(black_box(&topo), black_box(&model)).expect("a decision")))
    });
    let contract = decide(&topo, &model).expect("a decision").contract;
    let text = contract.to_json();
    c.bench_function("contract_parse_12_entries", |b| {
        b.iter(|| black_box(Contract::parse(black_box(&text)).expect("a valid contract")))
    });
}

/// A quota set of four events (from its JSON form, so that fields added with
/// defaults do not break the benchmark).
fn four_event_quotas() -> QuotaSet {
    serde_json::from_str(
        r#"{
            "period": {"secs": 0, "nanos": 10000000},
            "events": [
                {"name": "sw.page_faults", "attr": {"type": 1, "config": 2}, "quota": 1000},
                {"name": "sw.context_switches", "attr": {"type": 1, "config": 3}, "quota": 50},
                {"name": "sw.cpu_migrations", "attr": {"type": 1, "config": 4}, "quota": 10},
                {"name": "sw.task_clock", "attr": {"type": 1, "config": 1}, "quota": 5000000}
            ]
        }"#,
    )
    .expect("a quota set")
}

fn bench_quotas(c: &mut Criterion) {
    let quotas = four_event_quotas();
    // Putting a process of 8 threads under quotas: the set checked, zero
    // statistics made, each thread's share and SCHED_SRA configuration line.
    c.bench_function("quota_set_up_4_events_8_threads", |b| {
        b.iter(|| {
            let quotas = black_box(&quotas);
            quotas.validate().expect("valid quotas");
            let stats = QuotaStats::new(4242, quotas);
            let line = config_line(&thread_share(quotas, 8));
            black_box((stats, line))
        })
    });
    // One thread's per-task SCHED_SRA statistics, as the kernel writes them.
    let mut text =
        String::from("throttled 0\nnr_throttled 17\nthrottled_ns 4200000\nnr_periods 3000\n");
    for i in 0..4 {
        text.push_str(&format!(
            "event{i}_last_period {}\nevent{i}_count {}\n",
            100 * (i + 1),
            300_000 * (i + 1)
        ));
    }
    c.bench_function("sched_sra_parse_stats_4_events", |b| {
        b.iter(|| black_box(parse_stats(black_box(&text))))
    });
}

criterion_group!(
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench_analysis, bench_decision, bench_quotas
);
criterion_main!(benches);
