//! Policy and throttle decisions on a deterministic in-memory network: two
//! endpoints exchange frames directly, the link cost is configured rather
//! than measured, and the CPU load is scripted.

use hwqos_compress::codec::CodecId;
use hwqos_compress::learn::Learner;
use hwqos_compress::policy::Selector;
use hwqos_compress::throttle::{per_cpu_utilization, CpuAggregate};
use hwqos_compress::wire::parse_all;
use hwqos_compress::{
    CpuLoad, Endpoint, PolicyKind, ProcStatLoad, Registry, Sampling, ScriptedLoad, StreamConfig,
    ThrottleConfig,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Frames in `bytes` go to `to`; its replies go back to `from`. Returns the messages.
fn deliver(from: &mut Endpoint, to: &mut Endpoint, bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut msgs = Vec::new();
    let mut replies = Vec::new();
    for f in parse_all(bytes, to.limits()).unwrap() {
        if let Some(m) = to.decode(f, &mut replies).unwrap() {
            msgs.push(m);
        }
    }
    let mut back = Vec::new();
    for f in parse_all(&replies, from.limits()).unwrap() {
        assert!(from.decode(f, &mut back).unwrap().is_none());
    }
    msgs
}

fn sim_config(policy: &str) -> StreamConfig {
    StreamConfig {
        policy: policy.parse().unwrap(),
        throttle: None,
        sampling: Sampling::Inline,
        // The sampler's wall-time share is not limited on the simulated link.
        adaptive: hwqos_compress::policy::AdaptiveTuning {
            explore_share: f64::INFINITY,
            burst_share: f64::INFINITY,
            ..Default::default()
        },
        link_ns_per_byte: Some(800.0), // 10 Mbit/s
        round_messages: 100,
        ..Default::default()
    }
}

fn pair(cfg: StreamConfig) -> (Endpoint, Endpoint) {
    let reg = Arc::new(Registry::standard());
    let mut a = Endpoint::new(cfg.clone(), reg.clone());
    let mut b = Endpoint::new(cfg, reg);
    a.handshake_in_memory(&mut b).unwrap();
    (a, b)
}

fn send(a: &mut Endpoint, b: &mut Endpoint, msg: &[u8]) -> CodecId {
    let mut out = Vec::new();
    let c = a.encode(msg, &mut out).unwrap();
    let got = deliver(a, b, &out);
    assert_eq!(got, vec![msg.to_vec()]);
    c
}

/// A pseudo-random, incompressible message.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn the_prediction_is_equation_7_6() {
    let mut l = Learner::new(1.0, Some(10.0));
    l.observe_rtt(1_000_000);
    l.observe_compression(CodecId::LZ4, 1000, 250, 2000);
    l.observe_local_decompression(CodecId::LZ4, 1000, 500);
    l.end_round(None);
    // t_c = 2 ns/B * 1000, t_s = (250 + 14 header) * 10, RTT/2 = 500 us, t_d = 0.5 * 1000
    let t = l.predict(CodecId::LZ4, 1000.0).unwrap();
    assert!(
        (t - (2000.0 + 2640.0 + 500_000.0 + 500.0)).abs() < 1e-6,
        "{t}"
    );
    let none = l.predict(CodecId::NONE, 1000.0).unwrap();
    assert!((none - (10_140.0 + 500_000.0)).abs() < 1e-6, "{none}");
    // A receiver's own figure replaces the local one.
    l.observe_remote_decompression(CodecId::LZ4, 1000, 3000);
    l.end_round(None);
    let t2 = l.predict(CodecId::LZ4, 1000.0).unwrap();
    assert!(
        (t2 - (2000.0 + 2640.0 + 500_000.0 + 3000.0)).abs() < 1e-6,
        "{t2}"
    );
}

fn learner_lz4_best() -> Learner {
    let mut l = Learner::new(1.0, Some(100.0));
    for id in Registry::standard().ids().into_iter().skip(1) {
        // lz4: cheap and good; every other codec: slower, worse.
        let (out, ns) = if id == CodecId::LZ4 {
            (200, 1000)
        } else {
            (600, 50_000)
        };
        l.observe_compression(id, 1000, out, ns);
        l.observe_local_decompression(id, 1000, ns / 4);
    }
    l.observe_message_size(1000);
    l.end_round(None);
    l
}

#[test]
fn majority_gives_the_best_everything_but_one_percent_per_other_codec() {
    let reg = Registry::standard();
    let mut s = Selector::new(PolicyKind::Majority, reg.ids(), &reg, 42);
    s.start_round(&learner_lz4_best(), false);
    let mut counts: BTreeMap<CodecId, u32> = BTreeMap::new();
    let n = 100_000;
    for _ in 0..n {
        *counts.entry(s.pick()).or_default() += 1;
    }
    let share = |c: CodecId| f64::from(counts.get(&c).copied().unwrap_or(0)) / f64::from(n);
    // 1% for each other codec of this build (features), `none` included.
    let best = 1.0 - 0.01 * (reg.len() - 1) as f64;
    assert!((share(CodecId::LZ4) - best).abs() < 0.01, "{counts:?}");
    for id in reg.ids() {
        if id != CodecId::LZ4 {
            assert!((share(id) - 0.01).abs() < 0.003, "{id}: {counts:?}");
        }
    }
}

#[test]
fn adaptive_sends_only_the_best_and_round_robin_cycles() {
    let reg = Registry::standard();
    let mut s = Selector::new(PolicyKind::Adaptive, reg.ids(), &reg, 1);
    s.start_round(&learner_lz4_best(), false);
    assert!((0..1000).all(|_| s.pick() == CodecId::LZ4));
    let mut rr = Selector::new(PolicyKind::RoundRobin, reg.ids(), &reg, 1);
    let picks: Vec<CodecId> = (0..20).map(|_| rr.pick()).collect();
    assert_eq!(picks[0], CodecId::LZ4);
    assert_eq!(picks[10], CodecId::LZ4);
    assert!(!picks.contains(&CodecId::NONE));
}

#[cfg(all(feature = "lzma", feature = "bzip2"))]
#[test]
fn adaptive_explores_without_sending_bad_codecs_and_majority_does_not() {
    let zeros = vec![0u8; 600];
    let mut per_policy = BTreeMap::new();
    for p in ["adaptive", "majority"] {
        let (mut a, mut b) = pair(sim_config(p));
        let mut used: BTreeMap<CodecId, u32> = BTreeMap::new();
        for i in 0..1500 {
            let c = send(&mut a, &mut b, &zeros);
            if i >= 500 {
                *used.entry(c).or_default() += 1;
            }
        }
        per_policy.insert(p, (used, a.stats()));
    }
    // The slow codecs (milliseconds per message here) cost far more than they
    // save on this link: adaptive learns that from samples and never sends
    // with them; majority keeps sending 1% with each. (Adaptive may move
    // between the fast codecs, which compress zeros equally well.)
    let slow = [
        CodecId::LZMA0,
        CodecId::LZMA6,
        CodecId::BZIP2_1,
        CodecId::BZIP2_9,
    ];
    let (adaptive, st) = &per_policy["adaptive"];
    assert!(
        adaptive
            .keys()
            .all(|c| !slow.contains(c) && *c != CodecId::NONE),
        "adaptive sent with a slow codec or uncompressed: {adaptive:?}"
    );
    // It learned about the other codecs from samples, not from sending.
    assert!(st.samples >= 10, "{st:?}");
    let (majority, _) = &per_policy["majority"];
    let slow_sent = slow.iter().filter(|c| majority.contains_key(c)).count();
    assert!(
        slow_sent >= 3,
        "majority keeps sending slow codecs: {majority:?}"
    );
}

#[test]
fn adaptive_reselects_within_a_few_rounds_after_a_content_change() {
    let (mut a, mut b) = pair(sim_config("adaptive"));
    let text = b"REGISTER sip:registrar.example.invalid SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1\r\n"
        .repeat(8);
    for _ in 0..1000 {
        send(&mut a, &mut b, &text);
    }
    assert_ne!(
        a.selector().chosen(),
        CodecId::NONE,
        "compressible text on a slow link"
    );
    // Content change at message 1000: incompressible from now on.
    let mut switched_at = None;
    for i in 0..2000 {
        let c = send(&mut a, &mut b, &noise(i, text.len()));
        if c == CodecId::NONE && a.selector().chosen() == CodecId::NONE {
            switched_at.get_or_insert(i);
        }
    }
    let at = switched_at.expect("re-selected none for incompressible content");
    // Choices change at round ends (100 messages here), and which round
    // depends on measured codec costs: 40–195 messages in 60 runs on the
    // idle development VM, more than 300 once under a parallel workspace
    // test run. The bound is half the target of 2,000.
    assert!(at <= 1000, "re-selection took {at} messages");
    // And back: compressible content again.
    let mut back_at = None;
    for i in 0..2000u64 {
        send(&mut a, &mut b, &text);
        if a.selector().chosen() != CodecId::NONE {
            back_at.get_or_insert(i);
        }
    }
    assert!(back_at.expect("re-selected a codec") <= 1000, "{back_at:?}");
}

#[test]
fn on_a_free_link_compression_is_not_chosen() {
    let mut cfg = sim_config("adaptive");
    cfg.link_ns_per_byte = Some(0.0);
    let (mut a, mut b) = pair(cfg);
    for _ in 0..800 {
        send(&mut a, &mut b, &[b'x'; 500]);
    }
    assert_eq!(a.selector().chosen(), CodecId::NONE);
    let st = a.stats();
    assert_eq!(
        st.sent_per_codec.keys().collect::<Vec<_>>(),
        vec!["none"],
        "{st:?}"
    );
}

#[test]
fn probes_measure_rtt_and_carry_receiver_decompression_statistics() {
    let mut cfg = sim_config("one:zstd-3");
    cfg.probe_every = 10;
    let (mut a, mut b) = pair(cfg);
    for _ in 0..300 {
        send(&mut a, &mut b, &[b'q'; 400]);
    }
    let st = a.stats();
    assert!(st.rtt_ns.is_some(), "{st:?}");
    let est = a.learner().codecs[&CodecId::ZSTD3];
    assert!(est.remote_decompress_ns_per_byte.count() > 0, "{est:?}");
}

#[test]
fn the_throttle_starts_with_a_budget_backs_off_under_load_and_resumes() {
    let cfg = StreamConfig {
        throttle: Some(ThrottleConfig {
            target: 0.7,
            ..Default::default()
        }),
        round_messages: 50,
        ..sim_config("one:zstd-3")
    };
    // Rounds 1-10: idle CPU; 11-70: saturated; then idle again.
    let script = std::iter::repeat_n(0.2, 10)
        .chain(std::iter::repeat_n(1.0, 60))
        .chain(std::iter::repeat_n(0.2, 1000));
    let reg = Arc::new(Registry::standard());
    let mut a = Endpoint::with_cpu_load(
        cfg.clone(),
        reg.clone(),
        Some(Box::new(ScriptedLoad::new(script))),
    );
    let mut b = Endpoint::new(
        StreamConfig {
            throttle: None,
            ..cfg
        },
        reg,
    );
    a.handshake_in_memory(&mut b).unwrap();
    let msg = b"status=ok;load=0.25;peer=node-7;".repeat(20);
    // Round 0 draws on the initial share's budget (half a CPU for 100 ms):
    // it is compressed (the thesis' zero start left it uncompressed).
    let round0: Vec<CodecId> = (0..50).map(|_| send(&mut a, &mut b, &msg)).collect();
    assert!(round0.iter().all(|&c| c == CodecId::ZSTD3), "{round0:?}");
    let compressed_in = |a: &mut Endpoint, b: &mut Endpoint, rounds: usize| {
        (0..rounds * 50)
            .filter(|_| send(a, b, &msg) != CodecId::NONE)
            .count()
    };
    let idle = compressed_in(&mut a, &mut b, 10);
    assert!(idle > 0, "compression starts while the CPU is idle");
    let _ = compressed_in(&mut a, &mut b, 40);
    let st = a.stats();
    assert_eq!(st.cpu_share, Some(0.0), "{st:?}");
    assert_eq!(
        compressed_in(&mut a, &mut b, 10),
        0,
        "no compression under overload"
    );
    assert!(a.stats().throttled_messages > 0);
    let _ = compressed_in(&mut a, &mut b, 10);
    assert!(compressed_in(&mut a, &mut b, 10) > 0, "compression resumes");
}

#[test]
fn cpu_utilization_comes_from_per_cpu_proc_stat_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let stat = |cpu0: [u64; 4], cpu1: [u64; 4]| {
        format!(
            "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 {} 0 {} {} {} 0 0 0 0 0\ncpu1 {} 0 {} {} {} 0 0 0 0 0\nctxt 1\n",
            cpu0[0], cpu0[1], cpu0[2], cpu0[3], cpu1[0], cpu1[1], cpu1[2], cpu1[3]
        )
    };
    std::fs::write(dir.path().join("stat"), stat([0, 0, 0, 0], [0, 0, 0, 0])).unwrap();
    let mut mean = ProcStatLoad::new(dir.path(), CpuAggregate::Mean, Duration::ZERO);
    let mut max = ProcStatLoad::new(dir.path(), CpuAggregate::Max, Duration::ZERO);
    assert_eq!(mean.utilization(), None, "the first reading only primes");
    assert_eq!(max.utilization(), None);
    // cpu0: 90 busy of 100; cpu1: 10 busy (user) of 100 (idle 80 + iowait 10).
    std::fs::write(
        dir.path().join("stat"),
        stat([60, 30, 10, 0], [10, 0, 80, 10]),
    )
    .unwrap();
    let m = mean.utilization().unwrap();
    assert!((m - 0.5).abs() < 1e-9, "{m}");
    let x = max.utilization().unwrap();
    assert!((x - 0.9).abs() < 1e-9, "{x}");
    let real = per_cpu_utilization(&Default::default(), &Default::default());
    assert!(real.is_empty());
}

/// Counts the probe frames in `bytes`.
fn probes_in(bytes: &[u8], to: &Endpoint) -> usize {
    parse_all(bytes, to.limits())
        .unwrap()
        .iter()
        .filter(|f| f.header.kind == hwqos_compress::wire::FrameKind::Probe)
        .count()
}

#[test]
fn on_a_free_link_exploration_and_probes_back_off() {
    let mut cfg = sim_config("adaptive");
    cfg.link_ns_per_byte = Some(0.0);
    cfg.probe_every = 16;
    let (mut a, mut b) = pair(cfg);
    let msg = [b'x'; 500];
    let mut probes_early = 0;
    for _ in 0..1000 {
        let mut out = Vec::new();
        a.encode(&msg, &mut out).unwrap();
        probes_early += probes_in(&out, &b);
        deliver(&mut a, &mut b, &out);
    }
    let samples_early = a.stats().samples;
    let mut probes_late = 0;
    for _ in 0..4000 {
        let mut out = Vec::new();
        a.encode(&msg, &mut out).unwrap();
        probes_late += probes_in(&out, &b);
        deliver(&mut a, &mut b, &out);
    }
    let samples_late = a.stats().samples - samples_early;
    assert_eq!(a.selector().chosen(), CodecId::NONE);
    assert!(a.selector().backoff() >= 64, "{}", a.selector().backoff());
    // Without back-off: a sample every 4 and a probe every 16 messages, so
    // 1,000 and 250 in 4,000 messages.
    assert!(
        samples_late < 100,
        "samples in 4,000 messages: {samples_late}"
    );
    assert!(probes_late < 100, "probes in 4,000 messages: {probes_late}");
    assert!(
        probes_early > probes_late / 4,
        "{probes_early} {probes_late}"
    );
}

#[test]
fn a_confident_compressing_choice_backs_off_at_most_16_times() {
    let (mut a, mut b) = pair(sim_config("adaptive"));
    let zeros = vec![0u8; 600];
    for _ in 0..3000 {
        send(&mut a, &mut b, &zeros);
    }
    assert_ne!(a.selector().chosen(), CodecId::NONE);
    assert!(a.selector().backoff() <= 16, "{}", a.selector().backoff());
}

#[test]
fn where_no_codec_can_win_nothing_is_sampled() {
    let mut cfg = sim_config("adaptive");
    cfg.link_ns_per_byte = Some(0.0);
    let (mut a, mut b) = pair(cfg);
    for _ in 0..2000 {
        send(&mut a, &mut b, &[b'x'; 500]);
    }
    // On a free link no codec can save anything, so the sampler earns no
    // credit and spends nothing.
    let st = a.stats();
    assert_eq!((st.samples, st.sample_ns), (0, 0), "{st:?}");
    assert_eq!(st.sample_credit_ns, 0.0);
    assert!(a.learner().codecs.values().all(|e| e.ratio.count() == 0));
}

#[test]
fn exploration_cost_is_bounded_by_what_compression_could_save() {
    // A loopback-like link: 1 ns per byte, so sending a 500-byte message
    // costs about 0.5 us and no codec can save more than that per message.
    let mut cfg = sim_config("adaptive");
    cfg.link_ns_per_byte = Some(1.0);
    let (mut a, mut b) = pair(cfg);
    let mut src = hwqos_compress::datasets::MessageSource::new(
        hwqos_compress::datasets::DataSet::Realistic,
        512,
        3,
    );
    for _ in 0..3000 {
        send(&mut a, &mut b, &src.next_message());
    }
    let st = a.stats();
    // The credit is a quarter of what `none` costs on the link per message.
    let sent: u64 = st.app_bytes_sent;
    let most = 0.25 * (sent as f64 + 14.0 * 3000.0) * 1.0;
    // (20% slack: the credit uses the moving average of the message size.)
    assert!(st.sample_credit_ns <= 1.2 * most, "{st:?}");
    // A sample starts only when its expected cost fits in the credit, so
    // the sampler never spends more than the credit plus one sample.
    assert!(
        st.sample_ns as f64 <= st.sample_credit_ns + st.max_sample_ns as f64,
        "{st:?}"
    );
    // The codecs whose setup alone costs more than a message's link time
    // are never tried.
    for slow in [
        CodecId::LZMA0,
        CodecId::LZMA6,
        CodecId::BZIP2_1,
        CodecId::BZIP2_9,
        CodecId::DEFLATE,
    ] {
        assert!(
            a.learner()
                .codecs
                .get(&slow)
                .is_none_or(|e| e.ratio.count() == 0),
            "{slow} was sampled"
        );
    }
}

/// A node whose utilization is a background load plus what compression uses
/// of its share: `share` of one CPU on a 2-CPU node is `share / 2`.
struct SimulatedNode {
    background: Arc<std::sync::Mutex<f64>>,
    share: Arc<std::sync::Mutex<f64>>,
}

impl CpuLoad for SimulatedNode {
    fn utilization(&mut self) -> Option<f64> {
        let u = *self.background.lock().unwrap() + *self.share.lock().unwrap() / 2.0;
        Some(u.min(1.0))
    }
}

#[test]
fn the_throttle_holds_a_reachable_target_reacts_within_readings_and_resumes() {
    use hwqos_compress::throttle::CpuThrottle;
    let background = Arc::new(std::sync::Mutex::new(0.1));
    let share = Arc::new(std::sync::Mutex::new(0.0));
    let mut t = CpuThrottle::new(
        ThrottleConfig {
            target: 0.75,
            ..Default::default()
        },
        Box::new(SimulatedNode {
            background: background.clone(),
            share: share.clone(),
        }),
    );
    let step = |t: &mut CpuThrottle| {
        // One reading per call (the simulated source is always fresh).
        t.round_budget_ns(1_000_000);
        *share.lock().unwrap() = t.share();
        t.last_utilization().unwrap()
    };
    // Idle node: even a full CPU for compression stays below the target,
    // so compression gets most of a CPU (the integral is bounded at half a
    // CPU so that it unwinds quickly when the load comes).
    for _ in 0..20 {
        step(&mut t);
    }
    assert!(t.share() > 0.7, "{}", t.share());
    // A burner takes one of the two CPUs (0.5) and the rest of the node
    // adds 0.1: the target is reachable only by cutting compression to
    // about 0.3 of a CPU. Within 10 readings utilization is held there.
    *background.lock().unwrap() = 0.6;
    let first = step(&mut t);
    assert!(first > 0.75, "{first}");
    let mut held = Vec::new();
    for i in 0..40 {
        let u = step(&mut t);
        if i >= 10 {
            held.push(u);
        }
    }
    assert!(
        held.iter().all(|u| (u - 0.75).abs() <= 0.05),
        "utilization not held within 5 pp of 0.75: {held:?}"
    );
    assert!((t.share() - 0.3).abs() < 0.1, "{}", t.share());
    // Background above the target: no share can reach it; compression stops.
    *background.lock().unwrap() = 0.9;
    for _ in 0..10 {
        step(&mut t);
    }
    assert_eq!(t.share(), 0.0);
    // The burner stops: compression resumes within a few readings.
    *background.lock().unwrap() = 0.1;
    let resumed = (0..5).position(|_| {
        step(&mut t);
        t.share() > 0.0
    });
    assert!(resumed.is_some(), "compression did not resume");
    for _ in 0..10 {
        step(&mut t);
    }
    assert!(t.share() > 0.7, "{}", t.share());
}

#[test]
fn the_throttle_does_not_wind_up_while_compression_uses_less_than_its_share() {
    use hwqos_compress::throttle::CpuThrottle;
    // Compression wants only 0.2 of a CPU; the node is far below the target.
    let background = Arc::new(std::sync::Mutex::new(0.1));
    let used = Arc::new(std::sync::Mutex::new(0.0));
    let mut t = CpuThrottle::new(
        ThrottleConfig {
            target: 0.75,
            ..Default::default()
        },
        Box::new(SimulatedNode {
            background: background.clone(),
            share: used.clone(),
        }),
    );
    let wall = 1_000_000u64;
    let step = |t: &mut CpuThrottle| {
        let u = *used.lock().unwrap();
        t.round_budget(wall, (u * wall as f64) as u64);
        *used.lock().unwrap() = t.share().min(0.2);
    };
    for _ in 0..200 {
        step(&mut t);
    }
    // Enough for what compression uses, but not wound up to a whole CPU.
    assert!(t.share() >= 0.2, "{}", t.share());
    assert!(t.share() <= 0.6, "{}", t.share());
    // Overload: compression stops within three readings.
    *background.lock().unwrap() = 0.95;
    let stopped = (0..3).position(|_| {
        step(&mut t);
        t.share() == 0.0
    });
    assert!(stopped.is_some(), "share {}", t.share());
    for _ in 0..50 {
        step(&mut t);
    }
    // Load gone: it resumes within three readings.
    *background.lock().unwrap() = 0.1;
    let resumed = (0..3).position(|_| {
        step(&mut t);
        t.share() > 0.0
    });
    assert!(resumed.is_some());
}

#[test]
fn cgroup_use_and_limit_come_from_the_v1_and_v2_files() {
    use hwqos_compress::CgroupLoad;
    let v1 = tempfile::tempdir().unwrap();
    let (acct, cpu) = (v1.path().join("cpuacct"), v1.path().join("cpu"));
    std::fs::create_dir_all(&acct).unwrap();
    std::fs::create_dir_all(&cpu).unwrap();
    std::fs::write(acct.join("cpuacct.usage"), "123456789\n").unwrap();
    std::fs::write(cpu.join("cpu.cfs_quota_us"), "50000\n").unwrap();
    std::fs::write(cpu.join("cpu.cfs_period_us"), "100000\n").unwrap();
    let l = CgroupLoad::new_v1(&acct, &cpu, Duration::ZERO);
    assert_eq!(l.usage_ns(), Some(123_456_789));
    assert_eq!(l.capacity(), Some(0.5));
    // No quota (-1): the online CPUs.
    std::fs::write(cpu.join("cpu.cfs_quota_us"), "-1\n").unwrap();
    let online = std::thread::available_parallelism().unwrap().get() as f64;
    assert_eq!(l.capacity(), Some(online));

    let v2 = tempfile::tempdir().unwrap();
    std::fs::write(
        v2.path().join("cpu.stat"),
        "usage_usec 42\nuser_usec 40\nsystem_usec 2\n",
    )
    .unwrap();
    std::fs::write(v2.path().join("cpu.max"), "150000 100000\n").unwrap();
    let mut l = CgroupLoad::new(v2.path(), Duration::ZERO);
    assert_eq!(l.usage_ns(), Some(42_000));
    assert_eq!(l.capacity(), Some(1.5));
    std::fs::write(v2.path().join("cpu.max"), "max 100000\n").unwrap();
    assert_eq!(l.capacity(), Some(online));
    assert_eq!(l.utilization(), None, "the first reading only primes");
    // A cgroup that vanished: no reading, not a panic.
    drop(v2);
    assert_eq!(l.utilization(), None);
}

#[test]
fn a_much_faster_or_slower_link_restarts_the_link_estimate_and_a_spike_does_not() {
    let mut l = Learner::new(0.1, None);
    // 10 Mbit/s, 5 ms: 10 ms small probes, 2 KiB padding adds 1.64 ms.
    for i in 0..6 {
        assert!(!l.observe_rtt(10_000_000 + i * 10_000));
        assert!(!l.observe_padded_rtt(11_638_400 + i * 10_000, 2048));
    }
    let slow = l.net.link_ns_per_byte().unwrap();
    assert!((slow - 800.0).abs() < 10.0, "{slow}");
    // One RTT far below the window is not enough, the second in a row is.
    assert!(!l.observe_rtt(420_000));
    assert!(l.observe_rtt(410_000));
    assert_eq!(l.net.changes, 1);
    assert_eq!(l.net.link_ns_per_byte(), None, "old link estimate kept");
    assert_eq!(l.net.rtt_ns.get(), Some(410_000.0));
    // The new link (1 Gbit/s, 0.2 ms) is measured from scratch.
    for _ in 0..3 {
        assert!(!l.observe_rtt(400_000));
        assert!(!l.observe_padded_rtt(416_384, 2048));
    }
    let fast = l.net.link_ns_per_byte().unwrap();
    assert!((fast - 8.0).abs() < 0.5, "{fast}");
    // A single spike, even two in a row, is noise.
    assert!(!l.observe_rtt(5_000_000));
    assert!(!l.observe_rtt(6_000_000));
    assert!(!l.observe_rtt(400_000));
    assert_eq!(l.net.changes, 1);
    // Three far slower probes in a row are a slower link.
    assert!(!l.observe_rtt(10_000_000));
    assert!(!l.observe_padded_rtt(11_600_000, 2048));
    assert!(l.observe_rtt(10_000_000));
    assert_eq!(l.net.changes, 2);
    assert_eq!(l.net.link_ns_per_byte(), None);
}

#[test]
fn padded_probes_thin_out_once_the_link_estimate_is_steady() {
    // Majority sends probes at a fixed pace (no back-off), every other one
    // padded while the link is being measured.
    let mut cfg = sim_config("majority");
    cfg.link_ns_per_byte = None;
    cfg.probe_every = 16;
    let (mut a, mut b) = pair(cfg.clone());
    let msg = [b'x'; 300];
    for _ in 0..1000 {
        send(&mut a, &mut b, &msg);
    }
    let early = a.stats().padded_probes;
    for _ in 0..2048 {
        send(&mut a, &mut b, &msg);
    }
    let late = a.stats().padded_probes - early;
    // 2,048 messages: 128 probes, 64 padded slots, every 4th padded once
    // steady (16). A link change (not expected in memory, but a stalled
    // test thread can look like one) restarts the dense probing: at most
    // 3 padded probes there and 6 in the slots until steady again.
    let changes = a.stats().link_changes;
    let most = 24 + 9 * changes;
    assert!(
        (12..=most).contains(&late),
        "padded probes in 2,048 messages: {late} (link changes: {changes})"
    );
    assert!(a.learner().net.link_ns_per_byte().is_some());
    // With a configured link cost no probe is padded at all.
    cfg.link_ns_per_byte = Some(800.0);
    let (mut a, mut b) = pair(cfg);
    for _ in 0..500 {
        send(&mut a, &mut b, &msg);
    }
    assert_eq!(a.stats().padded_probes, 0);
    assert!(a.stats().rtt_ns.is_some());
}

#[test]
fn adaptive_sends_a_cheap_codec_with_a_good_sampled_ratio_until_the_link_is_measured() {
    let reg = Registry::standard();
    // Only lz4 has been sampled (the first codec sampled while the link is
    // unmeasured), no link estimate yet.
    let learner = |out: usize, link: Option<f64>| {
        let mut l = Learner::new(1.0, link);
        l.observe_compression(CodecId::LZ4, 1000, out, 1000);
        l.observe_local_decompression(CodecId::LZ4, 1000, 250);
        l.observe_message_size(1000);
        l.end_round(None);
        l
    };
    let mut s = Selector::new(PolicyKind::Adaptive, reg.ids(), &reg, 1);
    s.start_round(&learner(200, None), false);
    assert_eq!(s.pick(), CodecId::LZ4, "ratio 0.2 on an unknown link");

    // Incompressible content: nothing to gain, keep sending uncompressed.
    let mut s = Selector::new(PolicyKind::Adaptive, reg.ids(), &reg, 1);
    s.start_round(&learner(1010, None), false);
    assert_eq!(s.pick(), CodecId::NONE, "ratio 1.01 on an unknown link");
    let mut s = Selector::new(PolicyKind::Adaptive, reg.ids(), &reg, 1);
    s.start_round(&learner(501, None), false);
    assert_eq!(s.pick(), CodecId::NONE, "ratio just above the bound");

    // Once the link is measured the prediction decides: on a link where
    // sending is nearly free (loopback), `none` wins again.
    let mut s = Selector::new(PolicyKind::Adaptive, reg.ids(), &reg, 1);
    s.start_round(&learner(200, None), false);
    assert_eq!(s.pick(), CodecId::LZ4);
    s.start_round(&learner(200, Some(0.01)), false);
    assert_eq!(s.pick(), CodecId::NONE, "loopback: compression cannot pay");
    // On a slow link lz4 stays.
    let mut s = Selector::new(PolicyKind::Adaptive, reg.ids(), &reg, 1);
    s.start_round(&learner(200, None), false);
    s.start_round(&learner(200, Some(800.0)), false);
    assert_eq!(s.pick(), CodecId::LZ4, "10 Mbit/s: lz4 saves 0.6 ms");
}

#[test]
fn after_the_link_was_measured_a_gap_in_its_estimate_keeps_the_choice() {
    let reg = Registry::standard();
    let mut l = Learner::new(1.0, Some(0.01));
    l.observe_compression(CodecId::LZ4, 1000, 200, 1000);
    l.observe_local_decompression(CodecId::LZ4, 1000, 250);
    l.observe_message_size(1000);
    l.end_round(None);
    let mut s = Selector::new(PolicyKind::Adaptive, reg.ids(), &reg, 1);
    s.start_round(&l, false);
    assert_eq!(s.pick(), CodecId::NONE, "loopback");
    // The link estimate is gone (a link change restarts it): no optimistic
    // lz4 on what was a free link a moment ago.
    l.net.fixed_link_ns_per_byte = None;
    s.start_round(&l, false);
    assert_eq!(s.pick(), CodecId::NONE);
}

/// Two streams compressing in a one-CPU cgroup (the burner experiment):
/// a share moves utilization about twice as much as on the plant above, and
/// the share set after a reading shows only in the next one.
struct DoubledNode {
    background: f64,
    share: Arc<std::sync::Mutex<f64>>,
}

impl CpuLoad for DoubledNode {
    fn utilization(&mut self) -> Option<f64> {
        Some((self.background + 2.0 * *self.share.lock().unwrap()).min(1.0))
    }
}

#[test]
fn the_throttle_settles_without_oscillating_when_a_share_moves_utilization_twice_as_much() {
    use hwqos_compress::throttle::CpuThrottle;
    let share = Arc::new(std::sync::Mutex::new(0.0));
    let mut t = CpuThrottle::new(
        ThrottleConfig::default(),
        Box::new(DoubledNode {
            background: 0.4,
            share: share.clone(),
        }),
    );
    let mut readings = Vec::new();
    for _ in 0..60 {
        t.round_budget_ns(1_000_000);
        *share.lock().unwrap() = t.share();
        readings.push(t.last_utilization().unwrap());
    }
    // kp 0.2 / ki 0.8 swung between 0.4 and 1.0 here for ever (and the
    // burner experiment showed the same swing); the defaults settle.
    let tail = &readings[20..];
    assert!(
        tail.iter().all(|u| (u - 0.8).abs() <= 0.05),
        "not held within 5 pp of 0.8: {tail:?}"
    );
    assert!((t.share() - 0.2).abs() < 0.03, "{}", t.share());
    // Overload (at or above 0.95): compression stops with the next reading.
    assert!((t.overload_threshold() - 0.95).abs() < 1e-9);
}

/// A node whose utilization is a background plus twice the compression
/// time the streams drew in the last interval, as a share of it.
struct DrawnNode {
    utilization: Arc<std::sync::Mutex<f64>>,
}

impl CpuLoad for DrawnNode {
    fn utilization(&mut self) -> Option<f64> {
        Some(*self.utilization.lock().unwrap())
    }
}

#[test]
fn streams_sharing_a_throttle_draw_one_share_and_hold_the_target() {
    use hwqos_compress::SharedThrottle;
    use std::time::Instant;
    let utilization = Arc::new(std::sync::Mutex::new(0.4));
    let shared = SharedThrottle::with_cpu_load(
        ThrottleConfig::default(),
        Box::new(DrawnNode {
            utilization: utilization.clone(),
        }),
    );
    let streams: Vec<SharedThrottle> = (0..8).map(|_| shared.clone()).collect();
    let t0 = Instant::now();
    let interval = Duration::from_millis(10);
    // Before the controller's first reading the bucket holds the initial
    // share's worth of 100 ms: the first messages compress at once. The
    // streams spend it here, so the steps below see only the controller.
    assert!(shared.has_budget_at(t0));
    let mut initial_ns = 0u64;
    while shared.has_budget_at(t0) {
        shared.charge(100_000);
        initial_ns += 100_000;
    }
    assert_eq!(initial_ns, 50_000_000, "0.5 of a CPU for 100 ms");
    let mut readings = Vec::new();
    for step in 1..=60u32 {
        let now = t0 + interval * step;
        // Every stream compresses 100 µs messages while the bucket has time
        // left; the first poll of the step refills it (one reading).
        let mut drawn_ns = 0u64;
        for s in &streams {
            while s.has_budget_at(now) {
                s.charge(100_000);
                drawn_ns += 100_000;
            }
        }
        // Eight greedy streams together draw the one share (plus at most one
        // message's overshoot), not eight shares.
        let allowed = shared.share() * interval.as_nanos() as f64;
        assert!(
            drawn_ns as f64 <= allowed + 100_000.0,
            "step {step}: drew {drawn_ns} ns with a share of {}",
            shared.share()
        );
        let u = 0.4 + 2.0 * drawn_ns as f64 / interval.as_nanos() as f64;
        *utilization.lock().unwrap() = u.min(1.0);
        readings.push(u);
    }
    let tail = &readings[30..];
    assert!(
        tail.iter().all(|u| (u - 0.8).abs() <= 0.05),
        "not held within 5 pp of 0.8: {tail:?}"
    );
}

/// Answers every probe frame in `bytes` (frames `from` encoded) on `to` and
/// returns the reply frames, unstamped.
fn answer(from_bytes: &[u8], to: &mut Endpoint) -> Vec<u8> {
    let mut replies = Vec::new();
    for f in parse_all(from_bytes, to.limits()).unwrap() {
        to.decode(f, &mut replies).unwrap();
    }
    replies
}

/// The RTT estimate after 8 probes whose replies the peer held for 30 ms
/// each (a request/response peer's think time), stamped or not.
fn rtt_after_held_replies(stamp: bool) -> f64 {
    let mut cfg = sim_config("one:none");
    cfg.probe_every = 1;
    let (mut a, mut b) = pair(cfg);
    for i in 0..10u8 {
        let mut out = Vec::new();
        a.encode(&[i; 64], &mut out).unwrap();
        let mut replies = answer(&out, &mut b);
        assert!(!replies.is_empty(), "every message carries a probe");
        std::thread::sleep(Duration::from_millis(30));
        if stamp {
            b.stamp_replies(&mut replies);
        }
        let mut back = Vec::new();
        for f in parse_all(&replies, a.limits()).unwrap() {
            a.decode(f, &mut back).unwrap();
        }
    }
    a.stats().rtt_ns.expect("probes answered")
}

/// A probe reply tells how long the answering end held it, and the prober
/// takes that out of the round trip: the peer's pause between reading a
/// request and writing its next message is not network time. (An unstamped
/// reply counts the 30 ms; the stamped one leaves the microseconds of
/// encoding and decoding, far below 30 ms whatever the machine's speed.)
#[test]
fn a_reply_held_by_the_peer_does_not_count_as_round_trip_time() {
    assert!(rtt_after_held_replies(false) >= 30e6);
    let stamped = rtt_after_held_replies(true);
    assert!(stamped < 15e6, "stamped RTT {stamped} ns");
}

/// Stamping sets the hold time of the replies it is asked for, only those,
/// and leaves every other byte as it was.
#[test]
fn stamping_sets_only_the_hold_time_of_the_named_replies() {
    use hwqos_compress::wire::{write_control, FrameKind, LinkProbeReply};
    let reply = |seq| LinkProbeReply {
        seq,
        echoed_sent_ns: 1234,
        probe_len: 12,
        held_ns: 0,
        reports: vec![],
    };
    let mut frames = Vec::new();
    write_control(FrameKind::ProbeReply, &reply(7).encode(), &mut frames);
    write_control(FrameKind::Probe, &[0; 12], &mut frames);
    write_control(FrameKind::ProbeReply, &reply(8).encode(), &mut frames);
    let before = frames.clone();
    LinkProbeReply::stamp_held(&mut frames, |seq| (seq == 8).then_some(555));
    let got: Vec<_> = parse_all(&frames, Default::default())
        .unwrap()
        .into_iter()
        .filter(|f| f.header.kind == FrameKind::ProbeReply)
        .map(|f| LinkProbeReply::decode(&f.payload).unwrap())
        .collect();
    assert_eq!(got[0], reply(7));
    assert_eq!(got[1].held_ns, 555);
    assert_eq!(got[1].seq, 8);
    let changed: Vec<usize> = (0..frames.len())
        .filter(|&i| frames[i] != before[i])
        .collect();
    assert_eq!(changed.len(), 2, "555 takes two bytes: {changed:?}");
    // Garbage after the frames stops the walk without touching it.
    let mut junk = frames.clone();
    junk.extend_from_slice(b"not a frame");
    LinkProbeReply::stamp_held(&mut junk, |_| Some(1));
    assert!(junk.ends_with(b"not a frame"));
}

/// Issue 25, item 3: the default throttle (reading this node's
/// `/proc/stat`) used to start from a zero budget and take its first
/// reading 200 ms after the first round, so a short stream never
/// compressed. 200 messages back to back on a 10 Mbit/s link (the
/// in-memory network with the link's cost configured) must compress from
/// the first rounds. No timing is asserted.
#[test]
fn a_short_stream_on_a_slow_link_compresses_with_the_default_throttle() {
    use hwqos_compress::datasets::{DataSet, MessageSource};
    let cfg = StreamConfig {
        link_ns_per_byte: Some(800.0),
        ..Default::default()
    };
    assert!(cfg.throttle.is_some() && cfg.sampling == Sampling::AfterSend);
    let reg = Arc::new(Registry::standard());
    // The default throttle on this node's /proc/stat, primed at creation as
    // the default source is; its first reading is due after the stream
    // ends (here an hour; by default 200 ms, which a debug build on a
    // loaded node can exceed, and a saturated node then rightly stops
    // compression — not what this test is about).
    let load = ProcStatLoad::new("/proc", CpuAggregate::Mean, Duration::from_secs(3600)).primed();
    let mut a = Endpoint::with_cpu_load(cfg.clone(), reg.clone(), Some(Box::new(load)));
    let mut b = Endpoint::new(cfg, reg);
    a.handshake_in_memory(&mut b).unwrap();
    let mut src = MessageSource::new(DataSet::Realistic, 512, 7);
    let mut raw = 0usize;
    for _ in 0..200 {
        // Batches of about 4 KiB of records, as a relay's reads would be.
        let mut msg = Vec::new();
        while msg.len() < 4096 {
            msg.extend(src.next_message());
        }
        raw += msg.len();
        let mut out = Vec::new();
        a.encode(&msg, &mut out).unwrap();
        assert_eq!(deliver(&mut a, &mut b, &out), vec![msg]);
        a.run_deferred_sample();
    }
    let st = a.stats();
    let compressed: u64 = st
        .sent_per_codec
        .iter()
        .filter(|(c, _)| c.as_str() != "none")
        .map(|(_, n)| n)
        .sum();
    assert!(
        (st.wire_bytes_sent as f64) < 0.5 * raw as f64,
        "{} bytes on the wire for {raw} bytes of messages; {compressed} of 200 compressed: {st:?}",
        st.wire_bytes_sent
    );
}
