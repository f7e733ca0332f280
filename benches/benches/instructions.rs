//! Instruction-count benchmarks of hwqos' hot paths: the deterministic
//! performance gate (`scripts/bench-gate`, docs/performance.md).
//!
//! Each benchmark runs once under valgrind's callgrind (gungraun); only the
//! benchmark function is counted, never the setup that builds its input.
//! Every input is fixed (no clock reads in setups, no random seeds), so the
//! instruction counts are the same from run to run on the same build.
//!
//! `cargo bench -p hwqos-benches --bench instructions` needs valgrind and the
//! `gungraun-runner` binary of the same version as the `gungraun` library;
//! `scripts/bench-gate` installs the runner and compares with the baseline.

use gungraun::{library_benchmark, library_benchmark_group, main};
use hwqos_api::{FrameFilter, Response};
use hwqos_compress::learn::Learner;
use hwqos_compress::policy::Selector;
use hwqos_compress::{CodecId, PolicyKind, Registry};
use hwqos_core::ticker::{LatencyHistogram, SlackEstimator};
use hwqos_core::{CounterReading, Frame, MetricName, Sample, Scope, ScopeLabel, Ticker, Timestamp};
use hwqos_loadsynth::control::{ClosedLoop, Controller, Gains, KnobSink};
use hwqos_loadsynth::generator::{branch, dcache, icache};
use hwqos_loadsynth::source::Measurement;
use hwqos_loadsynth::LoadMetric;
use hwqos_monitor::openmetrics::{Exposition, SelfMetrics};
use hwqos_pmu::backend::sim::{Script, SimBackend};
use hwqos_pmu::backend::{CountTarget, CounterBackend, GroupId, GroupReading};
use hwqos_pmu::event::perf_type;
use hwqos_pmu::{Event, EventAttr, EventSource};
use hwqos_sched::backend::{QuotaSet, QuotaStats};
use hwqos_sched::decision::decide;
use hwqos_sched::model::{ProcessModel, Sensitivity, SensitivityModel};
use hwqos_topology::Topology;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

// ---------------------------------------------------------------------------
// Fixed inputs
// ---------------------------------------------------------------------------

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
/// Processes in the thesis' 100-process case.
const PROCESSES: u32 = 100;

/// A deterministic pseudo-random stream (splitmix64; no RNG, no seed).
fn noise(i: u64) -> u64 {
    let mut z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^ (z >> 31)
}

fn tick_time(seq: u64) -> Timestamp {
    Timestamp {
        mono_ns: seq * 100_000_000,
        wall_ns: 1_760_000_000_000_000_000 + seq as i64 * 100_000_000,
    }
}

/// What one tick measured about one process, before it becomes samples.
struct ProcessTick {
    pid: u32,
    comm: String,
    counters: [CounterReading; 4],
    gauges: [f64; 10],
}

/// The raw measurements of one tick of 100 processes (multiplexed hardware
/// counters, software counters at full time).
fn process_ticks(seq: u64) -> Vec<ProcessTick> {
    (0..PROCESSES)
        .map(|i| {
            let pid = 4000 + i;
            let salt = seq * 1000 + u64::from(pid);
            let enabled = 100_000_000 - noise(salt) % 20_000;
            let running = enabled - noise(salt + 1) % (enabled / 2);
            let counters = std::array::from_fn(|k| CounterReading {
                raw: noise(salt + 2 + k as u64) % 300_000_000,
                time_enabled: enabled,
                time_running: if PROCESS_COUNTERS[k].starts_with("hw.") {
                    running
                } else {
                    enabled
                },
            });
            let gauges =
                std::array::from_fn(|k| (noise(salt + 10 + k as u64) % 1_000_000) as f64 / 997.0);
            ProcessTick {
                pid,
                comm: format!("worker-{pid}"),
                counters,
                gauges,
            }
        })
        .collect()
}

/// Builds a frame the way the sampler does: one scaled counter sample per
/// reading that ran, one gauge per derived or OS value, one label per process.
fn build_frame(seq: u64, ticks: Vec<ProcessTick>) -> Frame {
    let time = tick_time(seq);
    let mut samples = Vec::with_capacity(ticks.len() * 14);
    let mut labels = Vec::with_capacity(ticks.len());
    for t in ticks {
        let scope = Scope::Process { pid: t.pid };
        for (name, reading) in PROCESS_COUNTERS.iter().zip(t.counters) {
            samples.extend(Sample::counter(
                time,
                scope.clone(),
                MetricName::from_static(name),
                reading,
            ));
        }
        for (name, value) in PROCESS_GAUGES.iter().zip(t.gauges) {
            samples.push(Sample::gauge(
                time,
                scope.clone(),
                MetricName::from_static(name),
                value,
            ));
        }
        labels.push(ScopeLabel {
            scope,
            name: t.comm,
        });
    }
    Frame {
        seq,
        time,
        interval_ns: 100_000_000,
        samples,
        labels,
    }
}

fn hundred_process_frame(seq: u64) -> Frame {
    build_frame(seq, process_ticks(seq))
}

// ---------------------------------------------------------------------------
// hwqos-pmu: reading and scaling a counter group
// ---------------------------------------------------------------------------

fn sim_event(metric: &'static str, type_: u32) -> Event {
    Event {
        name: metric.into(),
        metric: MetricName::from_static(metric),
        attr: EventAttr {
            type_,
            config: 0,
            config1: 0,
            config2: 0,
            modes: Default::default(),
        },
        source: EventSource::Generic,
    }
}

/// A simulated PMU with 2 counters per context and two enabled groups of
/// 2 hardware + 2 software events on one task (so they multiplex), read
/// once; the benchmark reads the first group again one 100 ms tick later.
struct PmuTick {
    sim: SimBackend,
    group: GroupId,
    events: Vec<Event>,
    previous: GroupReading,
}

fn multiplexed_sim_group() -> PmuTick {
    let mut sim = SimBackend::new(2);
    for (metric, rate) in [
        ("hw.cycles", 3.0),
        ("hw.instructions", 2.5),
        ("hw.cache.miss", 0.01),
        ("hw.branch.miss", 0.02),
        ("sw.task_clock", 1.0),
        ("sw.page_faults", 0.0001),
    ] {
        sim.script(metric, Script::Rate(rate));
    }
    let target = CountTarget::Task {
        tid: 4242,
        inherit: false,
    };
    let events = vec![
        sim_event("hw.cycles", perf_type::HARDWARE),
        sim_event("hw.instructions", perf_type::HARDWARE),
        sim_event("sw.task_clock", perf_type::SOFTWARE),
        sim_event("sw.page_faults", perf_type::SOFTWARE),
    ];
    let other = vec![
        sim_event("hw.cache.miss", perf_type::HARDWARE),
        sim_event("hw.branch.miss", perf_type::HARDWARE),
    ];
    let group = sim.open_group(&target, &events).expect("open group");
    let second = sim.open_group(&target, &other).expect("open group");
    sim.enable(group).expect("enable");
    sim.enable(second).expect("enable");
    sim.advance(100_000_000);
    let previous = sim.read(group).expect("read");
    sim.advance(100_000_000);
    PmuTick {
        sim,
        group,
        events,
        previous,
    }
}

// One group read and the per-event delta, scaling and counter sample.
#[library_benchmark]
#[bench::sim_4_events_multiplexed(multiplexed_sim_group())]
fn pmu_read_and_scale(mut tick: PmuTick) -> Vec<Sample> {
    let now = tick.sim.read(tick.group).expect("read");
    let time = tick_time(2);
    let scope = Scope::Thread {
        pid: 4242,
        tid: 4242,
    };
    let mut out = Vec::with_capacity(tick.events.len());
    for (i, event) in tick.events.iter().enumerate() {
        let (Some(raw), Some(before)) = (now.values.get(i), tick.previous.values.get(i)) else {
            continue;
        };
        let reading = CounterReading {
            raw: *raw,
            time_enabled: now.time_enabled,
            time_running: now.time_running,
        }
        .delta_since(&CounterReading {
            raw: *before,
            time_enabled: tick.previous.time_enabled,
            time_running: tick.previous.time_running,
        });
        out.extend(Sample::counter(
            time,
            scope.clone(),
            event.metric.clone(),
            reading,
        ));
    }
    black_box(out)
}

library_benchmark_group!(name = pmu; benchmarks = pmu_read_and_scale);

// ---------------------------------------------------------------------------
// hwqos-core: building a frame, the ticker's deadline arithmetic
// ---------------------------------------------------------------------------

// 100 processes × (4 counters + 10 gauges) + 100 labels = 1,400 samples.
#[library_benchmark]
#[bench::hundred_processes(process_ticks(1))]
fn core_build_frame(ticks: Vec<ProcessTick>) -> Frame {
    black_box(build_frame(1, black_box(ticks)))
}

/// The ticker's bookkeeping around each wake-up, without the clock: the
/// slack estimate's update and the early-wake time it gives
/// (`SleepStrategy::SlackCompensated`), the lateness histogram, and at the
/// end a period change that re-anchors the grid and the percentiles of
/// `Ticker::stats`. (`Ticker::wait` itself reads the clock and sleeps until
/// the next deadline, so its count is not repeatable.)
struct TickerBooks {
    ticker: Ticker,
    slack: SlackEstimator,
    lateness: LatencyHistogram,
    /// Observed wake-up latencies (ns), fixed.
    latencies: Vec<u64>,
}

fn ticker_books() -> TickerBooks {
    TickerBooks {
        ticker: Ticker::starting_at(Duration::from_millis(10), 1_000_000_000)
            .expect("valid period")
            .with_strategy(hwqos_core::SleepStrategy::SlackCompensated),
        slack: SlackEstimator::new(),
        lateness: LatencyHistogram::new(),
        latencies: (0..100).map(|i| 20_000 + noise(i) % 200_000).collect(),
    }
}

// 100 wake-ups' bookkeeping, then a period change and the statistics.
#[library_benchmark]
#[bench::hundred_ticks(ticker_books())]
fn core_ticker_bookkeeping(mut books: TickerBooks) -> u64 {
    let mut acc = 0u64;
    let period = 10_000_000u64;
    let first = books.ticker.next_deadline_ns();
    for (seq, latency) in books.latencies.iter().enumerate() {
        let deadline = first + seq as u64 * period;
        let wake_at = deadline.saturating_sub(books.slack.headroom_ns());
        books.slack.observe(*latency);
        books.lateness.record(black_box(*latency));
        acc = acc.wrapping_add(wake_at);
    }
    books
        .ticker
        .set_period(Duration::from_millis(5))
        .expect("valid period");
    acc = acc.wrapping_add(books.ticker.next_deadline_ns());
    acc = acc.wrapping_add(books.lateness.percentile(50.0).unwrap_or(0));
    acc = acc.wrapping_add(books.lateness.percentile(99.0).unwrap_or(0));
    black_box(acc)
}

library_benchmark_group!(name = core; benchmarks = core_build_frame, core_ticker_bookkeeping);

// ---------------------------------------------------------------------------
// hwqos-monitor: OpenMetrics exposition; hwqos-api: the live API's frame line
// ---------------------------------------------------------------------------

/// An exposition that took in tick 1; the benchmark takes in tick 2 and
/// renders the whole `/metrics` page.
fn exposition_after_one_tick() -> (Exposition, Frame, SelfMetrics) {
    let mut exp = Exposition::new();
    exp.update(&hundred_process_frame(1), 10);
    let me = SelfMetrics {
        version: "0.1.0".into(),
        backend: "simulated".into(),
        frames_sampled: 2,
        period_s: 0.1,
        last_frame_wall_ns: Some(tick_time(2).wall_ns),
        ..SelfMetrics::default()
    };
    (exp, hundred_process_frame(2), me)
}

#[library_benchmark]
#[bench::hundred_processes(exposition_after_one_tick())]
fn openmetrics_update_and_render(input: (Exposition, Frame, SelfMetrics)) -> String {
    let (mut exp, frame, me) = input;
    exp.update(black_box(&frame), 10);
    black_box(exp.render(&me))
}

// The JSON line a live-API subscriber receives for one frame.
#[library_benchmark]
#[bench::unfiltered(hundred_process_frame(1))]
fn api_frame_line(frame: Frame) -> String {
    black_box(Response::Frame { frame }.to_line())
}

fn frame_and_filter() -> (Frame, FrameFilter) {
    let filter = FrameFilter::new(&["pid:40*"], &["hw.*", "derived.ipc"]).expect("valid patterns");
    (hundred_process_frame(1), filter)
}

// A filtered subscription: the filter applied, then the frame line.
#[library_benchmark]
#[bench::pid_and_metric_patterns(frame_and_filter())]
fn api_filtered_frame_line(input: (Frame, FrameFilter)) -> String {
    let (frame, filter) = input;
    let frame = filter.apply(black_box(&frame));
    black_box(Response::Frame { frame }.to_line())
}

library_benchmark_group!(
    name = exposition;
    benchmarks = openmetrics_update_and_render, api_frame_line, api_filtered_frame_line
);

// ---------------------------------------------------------------------------
// hwqos-compress: the selector's choice per message, each codec on a small message
// ---------------------------------------------------------------------------

/// A small message: one process's samples of a frame as JSON (about 1.4 KB).
fn small_message() -> Vec<u8> {
    let mut frame = hundred_process_frame(1);
    frame.samples.truncate(14);
    frame.labels.truncate(1);
    serde_json::to_vec(&frame).expect("frame encodes")
}

/// An adaptive selector after three rounds on a measured 100 Mbit/s link
/// (80 ns per byte), with lz4, zstd-1 and zstd-3 measured.
fn trained_selector() -> (Selector, Learner) {
    let registry = Registry::standard();
    let ids = registry.ids();
    let mut selector = Selector::new(PolicyKind::Adaptive, ids, &registry, 7);
    let mut learner = Learner::new(0.2, Some(80.0));
    for round in 0..3u64 {
        for m in 0..20u64 {
            let size = 1400 + (noise(round * 100 + m) % 64) as usize;
            learner.observe_message_size(size);
            learner.observe_compression(CodecId::NONE, size, size, 50);
            learner.observe_compression(CodecId::LZ4, size, size / 3, 2_000);
            learner.observe_local_decompression(CodecId::LZ4, size, 700);
            learner.observe_compression(CodecId::ZSTD1, size, size / 4, 6_000);
            learner.observe_local_decompression(CodecId::ZSTD1, size, 1_500);
            learner.observe_compression(CodecId::ZSTD3, size, size / 5, 12_000);
            learner.observe_local_decompression(CodecId::ZSTD3, size, 1_600);
        }
        learner.end_round(None);
        selector.start_round(&learner, false);
    }
    (selector, learner)
}

// 1,000 messages: each one's codec, and the candidate to sample with it.
#[library_benchmark]
#[bench::adaptive_1000_messages(trained_selector())]
fn compress_selector_per_message(input: (Selector, Learner)) -> u64 {
    let (mut selector, _learner) = input;
    let mut acc = 0u64;
    for _ in 0..1000 {
        acc += u64::from(selector.pick().0);
        if let Some((c, _)) = selector.explore() {
            acc += u64::from(c.0);
        }
    }
    black_box(acc)
}

// A round boundary: the learner's round closed and the next choice made.
#[library_benchmark]
#[bench::adaptive(trained_selector())]
fn compress_selector_round(input: (Selector, Learner)) -> CodecId {
    let (mut selector, mut learner) = input;
    learner.observe_compression(CodecId::LZ4, 1400, 470, 2_000);
    learner.end_round(None);
    selector.start_round(&learner, false);
    black_box(selector.chosen())
}

/// Compression and decompression of one small message.
fn codec_roundtrip(name: &str) -> usize {
    let registry = Registry::standard();
    let codec = registry.by_name(name).expect("a standard codec");
    let input = small_message();
    let mut packed = Vec::new();
    let mut unpacked = Vec::new();
    codec.compress(&input, &mut packed).expect("compress");
    codec
        .decompress(&packed, input.len(), &mut unpacked)
        .expect("decompress");
    packed.len() + unpacked.len()
}

fn codec_input(name: &'static str) -> (std::sync::Arc<dyn hwqos_compress::Codec>, Vec<u8>) {
    let registry = Registry::standard();
    let codec = registry.by_name(name).expect("a standard codec").clone();
    // Not measured: proves the codec round-trips the message.
    assert!(codec_roundtrip(name) > 0);
    (codec, small_message())
}

#[library_benchmark]
#[bench::none(codec_input("none"))]
#[bench::lz4(codec_input("lz4"))]
#[bench::snappy(codec_input("snappy"))]
#[bench::zstd_1(codec_input("zstd-1"))]
#[bench::zstd_3(codec_input("zstd-3"))]
#[bench::zstd_9(codec_input("zstd-9"))]
#[bench::lzma_0(codec_input("lzma-0"))]
#[bench::lzma_6(codec_input("lzma-6"))]
#[bench::bzip2_1(codec_input("bzip2-1"))]
#[bench::bzip2_9(codec_input("bzip2-9"))]
#[bench::deflate(codec_input("deflate"))]
fn compress_codec_small_message(
    input: (std::sync::Arc<dyn hwqos_compress::Codec>, Vec<u8>),
) -> usize {
    let (codec, message) = input;
    let mut packed = Vec::new();
    let mut unpacked = Vec::new();
    codec.compress(&message, &mut packed).expect("compress");
    codec
        .decompress(&packed, message.len(), &mut unpacked)
        .expect("decompress");
    black_box(packed.len() + unpacked.len())
}

library_benchmark_group!(
    name = compress;
    benchmarks = compress_selector_per_message, compress_selector_round, compress_codec_small_message
);

// ---------------------------------------------------------------------------
// hwqos-sched: the SRA decision and quota accounting
// ---------------------------------------------------------------------------

fn topology_fixture(name: &str) -> Topology {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/topology/tests/fixtures")
        .join(name);
    Topology::read(&root).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn process(name: &str, resource: Option<(&str, f64)>) -> ProcessModel {
    ProcessModel {
        process: format!("name:{name}").parse().expect("a selector"),
        sensitive_to: resource
            .map(|(r, c)| {
                vec![Sensitivity {
                    resource: r.into(),
                    correlation: c,
                    level: None,
                }]
            })
            .unwrap_or_default(),
        cpu_demand: 1.0,
        quotas: BTreeMap::new(),
        period_us: 10_000,
    }
}

/// The thesis' 16-CPU two-socket server with 4 LLC-sensitive, 4
/// L1-sensitive and 4 CPU-bound processes.
fn numa_server_model() -> (Topology, SensitivityModel) {
    let mut model = SensitivityModel::default();
    for i in 0..4 {
        model
            .processes
            .push(process(&format!("llc{i}"), Some(("LLC-load-misses", 0.8))));
        model.processes.push(process(
            &format!("l1d{i}"),
            Some(("L1-dcache-load-misses", 0.9)),
        ));
        model.processes.push(process(&format!("cpu{i}"), None));
    }
    (topology_fixture("numa-server"), model)
}

#[library_benchmark]
#[bench::numa_server_12_processes(numa_server_model())]
fn sra_decide(input: (Topology, SensitivityModel)) -> usize {
    let (topo, model) = input;
    let d = decide(black_box(&topo), black_box(&model)).expect("a decision");
    black_box(d.contract.entries.len())
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

// What a backend does when a process is put under quotas: the set checked,
// zero statistics made.
#[library_benchmark]
#[bench::four_events(four_event_quotas())]
fn sra_quota_accounting(quotas: QuotaSet) -> QuotaStats {
    quotas.validate().expect("valid quotas");
    black_box(QuotaStats::new(4242, black_box(&quotas)))
}

library_benchmark_group!(name = sra; benchmarks = sra_decide, sra_quota_accounting);

// ---------------------------------------------------------------------------
// hwqos-loadsynth: a PID step, loadgen generator steps
// ---------------------------------------------------------------------------

// 100 steps of one controller against a first-order plant (gain 2, lag 0.5).
#[library_benchmark]
#[bench::hundred_steps(Controller::new(0.6, 0.2, (0.0, 1.0), Gains::default_for(LoadMetric::CpuUtil)))]
fn loadsynth_pid_step(mut controller: Controller) -> f64 {
    let mut measured = 0.0;
    for _ in 0..100 {
        let knob = controller.step(measured, 0.25, 1.0);
        measured += 0.5 * (0.5 * knob - measured);
    }
    black_box(controller.knob())
}

struct Knobs(Vec<(LoadMetric, u32, f64)>);

impl KnobSink for Knobs {
    fn set(&mut self, metric: LoadMetric, cpu: u32, value: f64) {
        self.0.push((metric, cpu, value));
    }
}

/// A closed loop over three coupled cache metrics and CPU load on 2 CPUs.
fn closed_loop() -> (ClosedLoop, Measurement) {
    let mut lp = ClosedLoop::new(8);
    let metrics = [
        (LoadMetric::CpuUtil, 0.6),
        (LoadMetric::L1dMissRatio, 0.05),
        (LoadMetric::L2MissRatio, 0.2),
        (LoadMetric::LlcMissRatio, 0.3),
    ];
    let mut values = BTreeMap::new();
    for cpu in 0..2 {
        for (metric, target) in metrics {
            lp.add(
                metric,
                cpu,
                Controller::new(target, 0.1, (0.0, 1.0), Gains::default_for(metric)),
                (0.01, 0.05),
            );
            values.insert((metric, cpu), target * 0.9);
        }
    }
    let m = Measurement {
        t_ns: 250_000_000,
        interval_ns: 250_000_000,
        values,
    };
    (lp, m)
}

#[library_benchmark]
#[bench::eight_pairs(closed_loop())]
fn loadsynth_closed_loop_step(input: (ClosedLoop, Measurement)) -> usize {
    let (mut lp, m) = input;
    let mut knobs = Knobs(Vec::with_capacity(8));
    black_box(lp.step(black_box(&m), &mut knobs));
    black_box(knobs.0.len())
}

// One batch of 10,000 branches, 30 % of them unpredictable.
#[library_benchmark]
#[bench::ten_thousand(0x2545_f491_4f6c_dd1d)]
fn loadgen_branch_step(mut state: u64) -> u64 {
    black_box(branch::branches(black_box(0.3), 10_000, &mut state))
}

// 10,000 calls through the generated jump table, a quarter of them far.
#[library_benchmark]
#[bench::ten_thousand(1)]
fn loadgen_icache_step(mut state: u64) -> u64 {
    black_box(icache::calls(black_box(0.25), 10_000, &mut state))
}

/// A mapped data-cache plan for a 32 KiB/8-way L1 and 256 KiB/4-way L2.
fn dcache_buffer() -> dcache::Buffer {
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
    dcache::Buffer::new(plan).expect("mapping")
}

// One block (65,536 reads) with 10 % L1 and 5 % L2 misses asked for.
#[library_benchmark]
#[bench::one_block(dcache_buffer())]
fn loadgen_dcache_step(mut buffer: dcache::Buffer) -> u64 {
    black_box(buffer.read(black_box(&[0.10, 0.05]), 65_536))
}

library_benchmark_group!(
    name = loadsynth;
    benchmarks = loadsynth_pid_step, loadsynth_closed_loop_step, loadgen_branch_step,
        loadgen_icache_step, loadgen_dcache_step
);

main!(
    library_benchmark_groups = pmu,
    core,
    exposition,
    compress,
    sra,
    loadsynth
);
