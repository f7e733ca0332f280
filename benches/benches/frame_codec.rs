//! Benchmarks of the monitor's frame codec on a frame of the thesis' 100-process
//! case: 100 processes × 14 metrics + 2 CPUs × 12 metrics = 1,424 samples.
//!
//! `cargo bench -p hwqos-benches --bench frame_codec` measures;
//! `… -- --test` runs every benchmark once as a smoke test.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hwqos_core::{CounterReading, Frame, MetricName, Sample, Scope, ScopeLabel, Timestamp};
use hwqos_monitor::frame_codec::{decode, encode, Dictionary};
use std::hint::black_box;

const PROCESS_COUNTERS: [&str; 4] = [
    "hw.cycles",
    "hw.instructions",
    "hw.cache.miss",
    "sw.task_clock",
];
const PROCESS_GAUGES: [&str; 10] = [
    "derived.rate.hw.cycles",
    "derived.rate.hw.instructions",
    "derived.rate.hw.cache.miss",
    "derived.rate.sw.task_clock",
    "derived.ipc",
    "derived.cpu_utilization",
    "os.proc.cpu",
    "os.proc.minor_faults",
    "os.proc.threads",
    "os.proc.rss",
];
const CPU_GAUGES: [&str; 8] = [
    "derived.rate.hw.cycles",
    "derived.rate.hw.instructions",
    "derived.ipc",
    "os.cpu.util",
    "os.cpu.user",
    "os.cpu.system",
    "os.cpu.iowait",
    "os.cpu.irq",
];

/// A deterministic pseudo-random stream (no RNG dependency needed).
fn noise(i: u64) -> u64 {
    let mut z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^ (z >> 31)
}

fn scope_samples(
    t: Timestamp,
    scope: Scope,
    gauges: &[&'static str],
    salt: u64,
    out: &mut Vec<Sample>,
) {
    let enabled = 100_000_000 - noise(salt) % 20_000;
    let running = enabled - noise(salt + 1) % (enabled / 2);
    let mut counts = Vec::new();
    for (i, name) in PROCESS_COUNTERS.iter().enumerate() {
        let reading = CounterReading {
            raw: noise(salt + 2 + i as u64) % 300_000_000,
            time_enabled: enabled,
            time_running: if name.starts_with("hw.") {
                running
            } else {
                enabled
            },
        };
        if let Some(s) = Sample::counter(t, scope.clone(), MetricName::from_static(name), reading) {
            counts.push(s.value);
            out.push(s);
        }
    }
    for (i, name) in gauges.iter().enumerate() {
        let value = match counts.get(i) {
            Some(c) if name.starts_with("derived.rate.") => c / 0.1,
            _ => (noise(salt + 10 + i as u64) % 1_000_000) as f64 / 997.0,
        };
        out.push(Sample::gauge(
            t,
            scope.clone(),
            MetricName::from_static(name),
            value,
        ));
    }
}

fn hundred_process_frame(seq: u64) -> Frame {
    let t = Timestamp {
        mono_ns: seq * 100_000_000,
        wall_ns: 1_760_000_000_000_000_000 + seq as i64 * 100_000_000,
    };
    let mut samples = Vec::with_capacity(1424);
    let mut labels = Vec::new();
    for pid in 4000..4100 {
        let scope = Scope::Process { pid };
        scope_samples(
            t,
            scope.clone(),
            &PROCESS_GAUGES,
            seq * 1000 + u64::from(pid),
            &mut samples,
        );
        labels.push(ScopeLabel {
            scope,
            name: format!("worker-{pid}"),
        });
    }
    for cpu in 0..2 {
        scope_samples(
            t,
            Scope::Cpu { cpu },
            &CPU_GAUGES,
            seq * 1000 + u64::from(cpu),
            &mut samples,
        );
    }
    Frame {
        seq,
        time: t,
        interval_ns: 100_000_000,
        samples,
        labels,
    }
}

fn bench_codec(c: &mut Criterion) {
    let frame = hundred_process_frame(1);
    assert_eq!(frame.samples.len(), 1424);
    let mut dict = Dictionary::new();
    let mut bytes = Vec::new();
    encode(&frame, &mut dict, &mut bytes).expect("encode");
    assert_eq!(decode(&bytes, &dict).expect("decode"), frame);

    let mut group = c.benchmark_group("frame_codec");
    group.throughput(Throughput::Elements(frame.samples.len() as u64));
    group.bench_function("encode_1424_samples", |b| {
        let mut out = Vec::with_capacity(bytes.len());
        b.iter(|| {
            out.clear();
            encode(black_box(&frame), &mut dict, &mut out).expect("encode");
            black_box(out.len())
        })
    });
    group.bench_function("decode_1424_samples", |b| {
        b.iter(|| decode(black_box(&bytes), &dict).expect("decode"))
    });
    group.finish();
}

criterion_group!(benches, bench_codec);
criterion_main!(benches);
