//! The frame database's memory at the thesis' size: 30,000 frames of a target of
//! 100 processes (14 metrics each, 4 of them counters, the hardware ones
//! multiplexed) plus 2 CPUs (12 metrics each) — 1,424 samples a frame, sampled at
//! 10 Hz. Decoded, such a frame takes about 150 KB; the database must hold all
//! 30,000 in a few hundred MiB and respect `max_mib`.

use hwqos_core::{CounterReading, Frame, MetricName, Sample, Scope, ScopeLabel, Timestamp};
use hwqos_monitor::db::FrameDb;
use std::sync::Arc;

const FRAMES: u64 = 30_000;
const PROCESSES: u32 = 100;
const MIB: usize = 1 << 20;

/// splitmix64: deterministic variety without a dependency.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Metric names, validated once (the test builds 40 million samples).
fn m(name: &'static str) -> MetricName {
    thread_local! {
        static NAMES: std::cell::RefCell<std::collections::HashMap<&'static str, MetricName>> =
            Default::default();
    }
    NAMES.with(|names| {
        names
            .borrow_mut()
            .entry(name)
            .or_insert_with(|| MetricName::from_static(name))
            .clone()
    })
}

const EVENTS: [&str; 4] = [
    "hw.cycles",
    "hw.instructions",
    "hw.cache.miss",
    "sw.task_clock",
];
const RATES: [&str; 4] = [
    "derived.rate.hw.cycles",
    "derived.rate.hw.instructions",
    "derived.rate.hw.cache.miss",
    "derived.rate.sw.task_clock",
];

/// The counters of one scope for one interval, as a perf group reports them:
/// raw counts, the group's `time_enabled`, hardware events multiplexed.
fn counters(
    g: &mut Gen,
    t: Timestamp,
    scope: &Scope,
    enabled: u64,
    secs: f64,
    out: &mut Vec<Sample>,
) -> (f64, f64) {
    let running = enabled - g.range(0, enabled / 2);
    let cycles = g.range(1_000_000, 300_000_000);
    let raws = [
        cycles,
        cycles * g.range(5, 30) / 10,
        g.range(100, 2_000_000),
        g.range(0, enabled),
    ];
    let mut values = [0.0; 4];
    for (i, (name, raw)) in EVENTS.iter().zip(raws).enumerate() {
        let reading = CounterReading {
            raw,
            time_enabled: enabled,
            time_running: if name.starts_with("hw.") {
                running
            } else {
                enabled
            },
        };
        if let Some(s) = Sample::counter(t, scope.clone(), m(name), reading) {
            values[i] = s.value;
            out.push(s);
        }
    }
    for (name, v) in RATES.iter().zip(values) {
        out.push(Sample::gauge(t, scope.clone(), m(name), v / secs));
    }
    (values[1] / values[0], values[3] / (secs * 1e9))
}

/// One 10 Hz tick of the 100-process target: 100 × 14 + 2 × 12 samples.
fn frame(g: &mut Gen, seq: u64) -> Frame {
    let interval_ns = 100_000_000 + g.range(0, 200_000) - 100_000;
    let secs = interval_ns as f64 / 1e9;
    let t = Timestamp {
        mono_ns: 5_000_000_000 + seq * 100_000_000 + g.range(0, 50_000),
        wall_ns: 1_760_000_000_000_000_000 + seq as i64 * 100_000_000,
    };
    let mut samples = Vec::with_capacity(1424);
    let mut labels = Vec::with_capacity(PROCESSES as usize);
    for i in 0..PROCESSES {
        let pid = 4000 + i * 13;
        let scope = Scope::Process { pid };
        let enabled = interval_ns - g.range(0, 20_000);
        let (ipc, util) = counters(g, t, &scope, enabled, secs, &mut samples);
        let gauges = [
            ("derived.ipc", ipc),
            ("derived.cpu_utilization", util),
            ("os.proc.cpu", g.range(0, 11) as f64 / 10.0),
            ("os.proc.minor_faults", g.range(0, 500) as f64),
            ("os.proc.threads", (1 + i % 40) as f64),
            ("os.proc.rss", (g.range(2_000, 400_000) * 4096) as f64),
        ];
        for (name, v) in gauges {
            samples.push(Sample::gauge(t, scope.clone(), m(name), v));
        }
        labels.push(ScopeLabel {
            scope,
            name: format!("worker-{i}"),
        });
    }
    for cpu in 0..2 {
        let scope = Scope::Cpu { cpu };
        let (ipc, _) = counters(g, t, &scope, interval_ns, secs, &mut samples);
        samples.truncate(samples.len() - 2); // 2 of the 4 rates
        samples.push(Sample::gauge(t, scope.clone(), m("derived.ipc"), ipc));
        let user = g.unit() * 0.7;
        let system = g.unit() * 0.2;
        let ratios = [
            ("os.cpu.util", user + system),
            ("os.cpu.user", user),
            ("os.cpu.system", system),
            ("os.cpu.iowait", g.unit() * 0.01),
            ("os.cpu.irq", g.unit() * 0.01),
        ];
        for (name, v) in ratios {
            samples.push(Sample::gauge(t, scope.clone(), m(name), v));
        }
    }
    Frame {
        seq,
        time: t,
        interval_ns,
        samples,
        labels,
    }
}

#[test]
fn thirty_thousand_frames_of_a_hundred_processes_fit_in_a_few_hundred_mib() {
    let mut g = Gen(42);
    let first = frame(&mut g, 0);
    assert_eq!(first.samples.len(), 1424);
    assert_eq!(first.scopes().len(), 102);

    let mut db = FrameDb::new(FRAMES as usize, 400 * MIB);
    db.push(Arc::new(first.clone()));
    for seq in 1..FRAMES {
        db.push(Arc::new(frame(&mut g, seq)));
    }
    assert_eq!(db.len(), FRAMES as usize, "nothing was evicted");
    assert_eq!(db.evicted(), 0);
    let per_frame = db.encoded_bytes() as f64 / FRAMES as f64;
    let decoded = hwqos_monitor::db::frame_bytes(&first);
    println!(
        "encoded {per_frame:.0} B/frame ({:.2} B/sample; decoded {decoded} B/frame); \
         accounted {:.1} MiB for {FRAMES} frames (dictionary {} KiB)",
        per_frame / 1424.0,
        db.bytes() as f64 / MIB as f64,
        db.dictionary_bytes() / 1024,
    );
    assert!(db.bytes() < 400 * MIB, "{} MiB", db.bytes() / MIB);
    // At least 10 times smaller than decoded frames.
    assert!(
        per_frame * 10.0 < decoded as f64,
        "{per_frame} vs {decoded}"
    );

    // What is stored is what was pushed (NaN-free frames, so `==` is exact).
    let snapshot = db.encoded_frames();
    assert_eq!(snapshot.frames().next().unwrap().unwrap(), first);
    let window = db.window(Some(0.95), None);
    assert_eq!(window.len(), 10);
    assert_eq!(window[9].seq, FRAMES - 1);
}

#[test]
fn max_mib_evicts_the_oldest_frames() {
    let mut g = Gen(7);
    let bound = 16 * MIB;
    let mut db = FrameDb::new(FRAMES as usize, bound);
    let total = 3000;
    for seq in 0..total {
        db.push(Arc::new(frame(&mut g, seq)));
        assert!(db.bytes() <= bound, "{} bytes at frame {seq}", db.bytes());
    }
    let kept = db.len() as u64;
    assert!(kept < total, "the bound evicted nothing");
    assert_eq!(db.evicted(), total - kept);
    // The bound is used, not wasted: one more frame would not have fit.
    let per_frame = db.encoded_bytes() / db.len();
    assert!(db.bytes() + per_frame > bound, "{} of {bound}", db.bytes());
    let seqs: Vec<u64> = db
        .encoded_frames()
        .frames()
        .map(|f| f.unwrap().seq)
        .collect();
    assert_eq!(seqs, (total - kept..total).collect::<Vec<_>>());

    // Lowering the bound on reload keeps the newest frames.
    db.set_limits(FRAMES as usize, bound / 2);
    assert!(db.bytes() <= bound / 2);
    assert!((db.len() as u64) < kept / 2 + 2);
    assert_eq!(db.latest().map(|f| f.seq), Some(total - 1));
    assert_eq!(db.encoded_frames().last_seq(), Some(total - 1));
}
