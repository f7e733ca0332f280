//! Event-set rotation, multiplex scaling, unavailable events, vanished tasks and
//! capacity limits, proven on the deterministic simulated PMU (the same sampler
//! code that drives perf_event on real nodes).

use hwqos_core::{Frame, Scope, Timestamp};
use hwqos_pmu::backend::sim::{Script, SimBackend, SimSubject, DEFAULT_QUANTUM_NS};
use hwqos_pmu::backend::{BackendKind, CountTarget, CounterBackend};
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use hwqos_pmu::target::{Resolver, TargetSelector};
use hwqos_pmu::PmuError;

const TICK_NS: u64 = 10_000_000;

/// Scripted truth: events per ns of each hardware event.
const RATES: &[(&str, f64)] = &[
    ("hw.cycles", 2.0),
    ("hw.instructions", 3.0),
    ("hw.l1d.miss", 0.02),
    ("hw.l1d.access", 0.8),
    ("hw.llc.miss", 0.001),
    ("hw.llc.access", 0.004),
];

fn three_sets() -> Vec<Vec<String>> {
    RATES
        .chunks(2)
        .map(|pair| pair.iter().map(|(n, _)| n.to_string()).collect())
        .collect()
}

fn scripted_sim(capacity: usize) -> SimBackend {
    let sim = SimBackend::new(capacity);
    for &(metric, rate) in RATES {
        sim.script(metric, Script::Rate(rate));
    }
    sim
}

fn my_tid() -> u32 {
    nix::unistd::gettid().as_raw() as u32
}

fn at(sim: &SimBackend) -> Timestamp {
    Timestamp {
        mono_ns: sim.now(),
        wall_ns: 0,
    }
}

fn sampler_on(
    sim: &SimBackend,
    targets: Vec<TargetSelector>,
    sets: Vec<Vec<String>>,
) -> Result<Sampler, PmuError> {
    let cfg = SamplerConfig {
        targets,
        event_sets: sets,
        rescan_every: 0,
        ..SamplerConfig::default()
    };
    Sampler::new(
        cfg,
        &Catalog::for_this_node(),
        Box::new(sim.clone()),
        Resolver::for_this_node(),
    )
}

fn tick(sampler: &mut Sampler, sim: &SimBackend) -> Frame {
    sim.advance(TICK_NS);
    sampler.sample(at(sim))
}

fn rate_of(metric: &str) -> f64 {
    RATES
        .iter()
        .find(|(n, _)| *n == metric)
        .map(|(_, r)| *r)
        .unwrap()
}

#[test]
fn rotation_reports_each_set_in_turn_with_exact_unmultiplexed_values() {
    let sim = scripted_sim(2);
    let tid = my_tid();
    let mut s = sampler_on(&sim, vec![TargetSelector::Tid(tid)], three_sets()).unwrap();
    assert_eq!(s.backend_kind(), BackendKind::Simulated);
    let scope = Scope::Thread {
        pid: std::process::id(),
        tid,
    };
    assert_eq!(s.targets(), vec![scope.clone()]);
    let first = s.sample(at(&sim));
    assert!(
        first.samples.is_empty(),
        "the first tick only starts counting"
    );
    for k in 0..30usize {
        let f = tick(&mut s, &sim);
        assert_eq!(f.seq, k as u64 + 1);
        assert_eq!(f.interval_ns, TICK_NS);
        let set = &three_sets()[k % 3];
        let counters: Vec<_> = f.samples.iter().filter(|x| x.counter.is_some()).collect();
        assert_eq!(counters.len(), 2, "exactly one set per tick: {counters:?}");
        for name in set {
            let sample = f
                .get(&scope, name)
                .unwrap_or_else(|| panic!("tick {k}: {name} missing"));
            let truth = rate_of(name) * TICK_NS as f64;
            assert!(
                (sample.value - truth).abs() / truth < 0.01,
                "{name}: {} vs {truth}",
                sample.value
            );
            assert!(
                !sample.multiplexed(),
                "rotation keeps one set on the PMU: {sample:?}"
            );
            let rate = f.value(&scope, &format!("derived.rate.{name}")).unwrap();
            assert!((rate - rate_of(name) * 1e9).abs() / (rate_of(name) * 1e9) < 0.01);
        }
        if k % 3 == 0 {
            let ipc = f.value(&scope, "derived.ipc").unwrap();
            assert!((ipc - 1.5).abs() < 1e-9, "IPC from one group: {ipc}");
        } else {
            assert!(
                f.value(&scope, "derived.ipc").is_none(),
                "no IPC across groups"
            );
        }
        if k % 3 == 1 {
            let ratio = f.value(&scope, "derived.l1d.miss_ratio").unwrap();
            assert!((ratio - 0.025).abs() < 1e-9);
        }
    }
    assert_eq!(sim.enabled_groups(), 1);
}

#[test]
fn kernel_style_multiplexing_is_scaled_within_one_percent_and_flagged() {
    let mut sim = scripted_sim(2);
    let catalog = Catalog::for_this_node();
    let target = CountTarget::Task {
        tid: 4242,
        inherit: true,
    };
    let groups: Vec<_> = three_sets()
        .iter()
        .map(|set| {
            let events: Vec<_> = set.iter().map(|n| catalog.resolve(n).unwrap()).collect();
            (set.clone(), sim.open_group(&target, &events).unwrap())
        })
        .collect();
    for (_, g) in &groups {
        sim.enable(*g).unwrap();
    }
    // Not a whole number of rotations: the shares differ by at most one quantum.
    let span = 1_000 * DEFAULT_QUANTUM_NS + DEFAULT_QUANTUM_NS / 2;
    sim.advance(span);
    for (set, g) in &groups {
        let r = sim.read(*g).unwrap();
        assert_eq!(r.time_enabled, span);
        assert!(
            r.time_running < r.time_enabled,
            "three 2-counter groups on 2 counters multiplex"
        );
        let share = r.time_running as f64 / r.time_enabled as f64;
        assert!(
            (share - 1.0 / 3.0).abs() < 0.01,
            "round-robin share {share}"
        );
        for (i, name) in set.iter().enumerate() {
            let reading = hwqos_core::CounterReading {
                raw: r.values[i],
                time_enabled: r.time_enabled,
                time_running: r.time_running,
            };
            assert!(reading.multiplexed());
            let truth = rate_of(name) * span as f64;
            let scaled = reading.scaled().unwrap();
            assert!(
                (scaled - truth).abs() / truth < 0.01,
                "{name}: scaled {scaled} vs truth {truth}"
            );
        }
    }
}

#[test]
fn sampler_flags_samples_multiplexed_by_competing_groups() {
    let mut sim = scripted_sim(2);
    let tid = my_tid();
    let catalog = Catalog::for_this_node();
    // Someone else holds two counters on the same task for the whole run.
    let other: Vec<_> = ["hw.cycles", "hw.instructions"]
        .iter()
        .map(|n| catalog.resolve(n).unwrap())
        .collect();
    let squatter = sim
        .open_group(
            &CountTarget::Task {
                tid,
                inherit: false,
            },
            &other,
        )
        .unwrap();
    sim.enable(squatter).unwrap();
    let mut s = sampler_on(
        &sim,
        vec![TargetSelector::Tid(tid)],
        vec![three_sets()[1].clone()],
    )
    .unwrap();
    let scope = Scope::Thread {
        pid: std::process::id(),
        tid,
    };
    s.sample(at(&sim));
    for _ in 0..10 {
        let f = tick(&mut s, &sim);
        let miss = f.get(&scope, "hw.l1d.miss").unwrap();
        assert!(miss.multiplexed(), "{miss:?}");
        let truth = rate_of("hw.l1d.miss") * TICK_NS as f64;
        assert!(
            (miss.value - truth).abs() / truth < 0.01,
            "{} vs {truth}",
            miss.value
        );
    }
}

#[test]
fn unavailable_events_are_listed_and_the_rest_keep_working() {
    let sim = scripted_sim(2);
    sim.make_unavailable("hw.llc.miss", "no such event on this simulated CPU");
    sim.make_unavailable("hw.l1d.access", "no such event on this simulated CPU");
    sim.make_unavailable("hw.l1d.miss", "no such event on this simulated CPU");
    let tid = my_tid();
    let mut s = sampler_on(&sim, vec![TargetSelector::Tid(tid)], three_sets()).unwrap();
    let mut names: Vec<_> = s.unavailable().iter().map(|u| u.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["hw.l1d.access", "hw.l1d.miss", "hw.llc.miss"]);
    assert!(s.unavailable()[0].reason.contains("simulated CPU"));
    // The emptied L1D set is dropped; the LLC set keeps its access event.
    assert_eq!(
        s.event_sets(),
        vec![
            vec!["hw.cycles".to_string(), "hw.instructions".into()],
            vec!["hw.llc.access".into()]
        ]
    );
    let scope = Scope::Thread {
        pid: std::process::id(),
        tid,
    };
    s.sample(at(&sim));
    let f1 = tick(&mut s, &sim);
    let f2 = tick(&mut s, &sim);
    assert!(f1.value(&scope, "hw.cycles").is_some());
    let llc = f2.value(&scope, "hw.llc.access").unwrap();
    assert!((llc - rate_of("hw.llc.access") * TICK_NS as f64).abs() < 1.0);
    assert!(f2.value(&scope, "hw.llc.miss").is_none());
}

#[test]
fn a_vanished_task_is_dropped_without_breaking_the_tick() {
    let sim = scripted_sim(2);
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let helper = std::thread::spawn(move || {
        tid_tx.send(my_tid()).unwrap();
        let _ = stop_rx.recv();
    });
    let other = tid_rx.recv().unwrap();
    let me = my_tid();
    let pid = std::process::id();
    let mut s = sampler_on(
        &sim,
        vec![TargetSelector::Tid(me), TargetSelector::Tid(other)],
        vec![three_sets()[0].clone()],
    )
    .unwrap();
    s.sample(at(&sim));
    let f = tick(&mut s, &sim);
    assert!(f
        .value(&Scope::Thread { pid, tid: other }, "hw.cycles")
        .is_some());
    sim.vanish_task(other);
    let f = tick(&mut s, &sim);
    assert!(
        f.value(&Scope::Thread { pid, tid: me }, "hw.cycles")
            .is_some(),
        "the others still report"
    );
    assert!(f
        .get(&Scope::Thread { pid, tid: other }, "hw.cycles")
        .is_none());
    assert_eq!(s.targets(), vec![Scope::Thread { pid, tid: me }]);
    let f = tick(&mut s, &sim);
    assert!(f
        .value(&Scope::Thread { pid, tid: me }, "hw.cycles")
        .is_some());
    stop_tx.send(()).unwrap();
    helper.join().unwrap();
}

#[test]
fn per_cpu_targets_use_their_own_scripts() {
    let sim = scripted_sim(2);
    sim.script_for(
        SimSubject::Cpu(1),
        "hw.cycles",
        Script::Steps(vec![(0, 1.0), (3 * TICK_NS, 4.0)]),
    );
    let cfg = SamplerConfig {
        per_cpu: true,
        cpus: Some(vec![0, 1]),
        event_sets: vec![three_sets()[0].clone()],
        rescan_every: 0,
        ..SamplerConfig::default()
    };
    let mut s = Sampler::new(
        cfg,
        &Catalog::for_this_node(),
        Box::new(sim.clone()),
        Resolver::for_this_node(),
    )
    .unwrap();
    assert_eq!(
        s.targets(),
        vec![Scope::Cpu { cpu: 0 }, Scope::Cpu { cpu: 1 }]
    );
    s.sample(at(&sim));
    let expect_cpu1 = [1.0, 1.0, 1.0, 4.0, 4.0];
    for rate in expect_cpu1 {
        let f = tick(&mut s, &sim);
        assert_eq!(
            f.value(&Scope::Cpu { cpu: 0 }, "hw.cycles"),
            Some(2.0 * TICK_NS as f64)
        );
        assert_eq!(
            f.value(&Scope::Cpu { cpu: 1 }, "hw.cycles"),
            Some(rate * TICK_NS as f64)
        );
    }
}

#[test]
fn capacity_violations_and_unknown_events_are_rejected() {
    let sim = scripted_sim(2);
    let too_big = vec![vec![
        "hw.cycles".to_string(),
        "hw.instructions".into(),
        "hw.l1d.miss".into(),
    ]];
    let err = sampler_on(&sim, vec![TargetSelector::Tid(my_tid())], too_big.clone())
        .err()
        .expect("a 3-event set on 2 counters is rejected");
    assert!(
        matches!(
            err,
            PmuError::SetTooLarge {
                len: 3,
                capacity: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("hw.l1d.miss"), "{err}");
    // Software events need no hardware counter.
    let mixed = vec![vec![
        "hw.cycles".to_string(),
        "hw.instructions".into(),
        "sw.task_clock".into(),
    ]];
    assert!(sampler_on(&sim, vec![TargetSelector::Tid(my_tid())], mixed).is_ok());
    let err = sampler_on(&sim, vec![], vec![vec!["hw.no_such_thing".to_string()]])
        .err()
        .expect("unknown names are config errors");
    assert!(matches!(err, PmuError::UnknownEvent { .. }), "{err}");
}

#[test]
fn runtime_set_changes_are_atomic() {
    let sim = scripted_sim(2);
    let tid = my_tid();
    let mut s = sampler_on(&sim, vec![TargetSelector::Tid(tid)], three_sets()).unwrap();
    let before = s.event_sets();
    let bad = vec![
        vec!["hw.cycles".to_string()],
        vec!["bogus.event.name".to_string()],
    ];
    assert!(s.set_event_sets(bad).is_err());
    let too_big = vec![vec![
        "hw.cycles".to_string(),
        "hw.instructions".into(),
        "hw.llc.miss".into(),
    ]];
    assert!(matches!(
        s.set_event_sets(too_big),
        Err(PmuError::SetTooLarge { .. })
    ));
    assert_eq!(s.event_sets(), before, "invalid input leaves the old sets");
    assert_eq!(sim.open_groups(), 3);

    s.set_event_sets(vec![vec!["hw.llc.miss".to_string()]])
        .unwrap();
    assert_eq!(
        sim.open_groups(),
        1,
        "old groups closed, one new group per target"
    );
    let scope = Scope::Thread {
        pid: std::process::id(),
        tid,
    };
    s.sample(at(&sim));
    let f = tick(&mut s, &sim);
    let v = f.value(&scope, "hw.llc.miss").unwrap();
    assert!((v - rate_of("hw.llc.miss") * TICK_NS as f64).abs() < 1.0);
    drop(s);
    assert_eq!(
        sim.open_groups(),
        0,
        "dropping the sampler closes its groups"
    );
}

/// A `/proc` tree under `root` with processes `pids` named `simproc`.
fn add_processes(root: &std::path::Path, pids: std::ops::Range<u32>) {
    for pid in pids {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(dir.join("task").join(pid.to_string())).unwrap();
        std::fs::write(dir.join("comm"), "simproc\n").unwrap();
        std::fs::write(dir.join("cmdline"), "simproc\0").unwrap();
    }
}

#[test]
fn problems_reach_the_caller_bounded_and_counted() {
    use hwqos_pmu::sampler::{SamplerProblem, MAX_PROBLEMS};
    let proc_root = tempfile::tempdir().unwrap();
    add_processes(proc_root.path(), 1000..1001);
    let sim = scripted_sim(2);
    let cfg = SamplerConfig {
        targets: vec![TargetSelector::Name("simproc".into())],
        event_sets: vec![vec!["hw.cycles".into(), "hw.instructions".into()]],
        rescan_every: 1,
        ..SamplerConfig::default()
    };
    let mut sampler = Sampler::new(
        cfg,
        &Catalog::for_this_node(),
        Box::new(sim.clone()),
        Resolver::new(proc_root.path().to_path_buf(), None),
    )
    .unwrap();
    tick(&mut sampler, &sim);
    assert_eq!(sampler.take_problems(), (Vec::new(), 0), "a healthy start");

    // A process that appears once the PMU refuses the event: its set
    // cannot be opened on its task; the caller is told which and why.
    sim.make_unavailable("hw.instructions", "taken by another tool");
    add_processes(proc_root.path(), 1001..1002);
    let frame = tick(&mut sampler, &sim);
    assert!(frame
        .samples
        .iter()
        .any(|s| s.scope == Scope::Process { pid: 1000 }));
    let (problems, dropped) = sampler.take_problems();
    assert_eq!(dropped, 0);
    assert_eq!(problems.len(), 1, "{problems:?}");
    match &problems[0] {
        SamplerProblem::OpenFailed { target, error } => {
            assert_eq!(
                *target,
                CountTarget::Task {
                    tid: 1001,
                    inherit: true
                }
            );
            assert!(error.contains("taken by another tool"), "{error}");
        }
        other => panic!("expected OpenFailed, got {other:?}"),
    }
    assert_eq!(sampler.take_problems(), (Vec::new(), 0), "drained");

    // 300 more such processes: 300 problems, the newest MAX_PROBLEMS kept
    // and the rest counted.
    add_processes(proc_root.path(), 1002..1302);
    tick(&mut sampler, &sim);
    let (problems, dropped) = sampler.take_problems();
    assert_eq!(problems.len(), MAX_PROBLEMS);
    assert_eq!(dropped, 300 - MAX_PROBLEMS as u64);
    assert!(matches!(
        problems.last(),
        Some(SamplerProblem::OpenFailed {
            target: CountTarget::Task { tid: 1301, .. },
            ..
        })
    ));
}
