//! Behaviour of the accurate sleeps and of the drift-free ticker. No test
//! asserts how fast anything is: only orderings the kernel guarantees (a sleep
//! never ends before its deadline) and exact grid arithmetic.

use hwqos_core::ticker::{
    set_thread_timer_slack, sleep_for, sleep_until, thread_timer_slack, LatencyHistogram,
    ParseStrategyError, SlackEstimator, SleepErrorStats, SleepStrategy, Tick, Ticker, TickerError,
    DEFAULT_HYBRID_SPIN_NS, MAX_PERIOD,
};
use hwqos_core::time::monotonic_ns;
use std::time::Duration;

const ALL_STRATEGIES: [SleepStrategy; 5] = [
    SleepStrategy::Relative,
    SleepStrategy::Absolute,
    SleepStrategy::SlackCompensated,
    SleepStrategy::BusyWait,
    SleepStrategy::Hybrid { spin_ns: 200_000 },
];

/// Checks that consecutive ticks lie on the grid `first.deadline + (seq − first.seq)·period`.
fn assert_on_grid(ticks: &[Tick], period_ns: u64) {
    let first = ticks[0];
    for pair in ticks.windows(2) {
        let (prev, tick) = (pair[0], pair[1]);
        assert_eq!(
            tick.seq,
            prev.seq + 1 + tick.missed,
            "{tick:?} after {prev:?}"
        );
    }
    for tick in ticks {
        assert_eq!(
            tick.deadline_ns,
            first.deadline_ns + (tick.seq - first.seq) * period_ns,
            "{tick:?}"
        );
        assert!(tick.woke_ns >= tick.deadline_ns, "{tick:?}");
        assert_eq!(tick.lateness_ns, tick.woke_ns - tick.deadline_ns);
    }
}

#[test]
fn deadlines_form_an_exact_grid_for_every_strategy() {
    // An odd period so that any rounding would show.
    let period = Duration::from_nanos(1_234_567);
    for strategy in ALL_STRATEGIES {
        let start = monotonic_ns() + 1_000_000;
        let mut ticker = Ticker::starting_at(period, start)
            .unwrap()
            .with_strategy(strategy);
        let ticks: Vec<Tick> = (0..40).map(|_| ticker.wait()).collect();
        assert_eq!(ticks[0].deadline_ns, start + ticks[0].seq * 1_234_567);
        assert_on_grid(&ticks, 1_234_567);
        let stats = ticker.stats();
        assert_eq!(stats.ticks, 40, "{strategy}");
        assert_eq!(stats.missed, ticks.iter().map(|t| t.missed).sum::<u64>());
        let max = ticks.iter().map(|t| t.lateness_ns).max().unwrap();
        assert_eq!(stats.max_lateness_ns, max);
        assert!(stats.p50_lateness_ns <= stats.p99_lateness_ns && stats.p99_lateness_ns <= max);
    }
}

#[test]
fn relative_sleeping_drift_is_tracked() {
    // Relative sleeps measure each period from the previous wake-up, so every
    // wake-up latency adds to the lateness of all later ticks.
    let period_ns = 2_000_000;
    let mut ticker = Ticker::new(Duration::from_nanos(period_ns))
        .unwrap()
        .with_strategy(SleepStrategy::Relative);
    let ticks: Vec<Tick> = (0..25).map(|_| ticker.wait()).collect();
    assert_on_grid(&ticks, period_ns);
    for pair in ticks.windows(2) {
        let (prev, tick) = (pair[0], pair[1]);
        if tick.missed == 0 {
            assert!(
                tick.woke_ns - prev.woke_ns >= period_ns,
                "{tick:?} after {prev:?}"
            );
            assert!(
                tick.lateness_ns >= prev.lateness_ns,
                "{tick:?} after {prev:?}"
            );
        }
    }
    // Over a stretch without missed ticks the drift strictly grows (each
    // sleep ends after its target, and the clock is read after that).
    let resync = ticks.iter().rposition(|t| t.missed > 0).unwrap_or(0);
    let (from, to) = (ticks[resync], ticks[ticks.len() - 1]);
    if to.seq > from.seq + 1 {
        assert!(to.lateness_ns > from.lateness_ns, "{to:?} vs {from:?}");
    }
    assert!(ticker.stats().max_lateness_ns >= to.lateness_ns);
    assert_eq!(ticker.stats().ticks, 25);
}

#[test]
fn a_thread_blocked_for_several_periods_skips_the_missed_deadlines() {
    let period_ns = 100_000_000;
    let mut slack = SlackEstimator::new();
    let mut ticker = Ticker::new(Duration::from_nanos(period_ns))
        .unwrap()
        .with_strategy(SleepStrategy::Absolute);
    let first = ticker.wait();
    // Work for 3.5 periods after the tick's deadline: deadlines +1, +2 and +3
    // pass, so they are skipped and the ticker waits for +4.
    sleep_until(
        first.deadline_ns + 7 * period_ns / 2,
        &SleepStrategy::Absolute,
        &mut slack,
    );
    let tick = ticker.wait();
    assert_eq!(tick.missed, 3, "{tick:?} after {first:?}");
    assert_eq!(tick.seq, first.seq + 4);
    assert_eq!(tick.deadline_ns, first.deadline_ns + 4 * period_ns);
    assert!(tick.woke_ns >= tick.deadline_ns);
    assert_eq!(ticker.stats().missed, 3);
    // Back on the grid afterwards.
    let next = ticker.wait();
    assert_eq!(
        next.deadline_ns,
        first.deadline_ns + (next.seq - first.seq) * period_ns
    );
}

#[test]
fn a_tick_late_by_less_than_a_period_is_delivered_late() {
    let period_ns = 100_000_000;
    let mut slack = SlackEstimator::new();
    let mut ticker = Ticker::new(Duration::from_nanos(period_ns))
        .unwrap()
        .with_strategy(SleepStrategy::Hybrid { spin_ns: 50_000 });
    let first = ticker.wait();
    let blocked_until = first.deadline_ns + 13 * period_ns / 10;
    sleep_until(blocked_until, &SleepStrategy::Absolute, &mut slack);
    let tick = ticker.wait();
    if tick.missed == 0 {
        assert_eq!(tick.seq, first.seq + 1);
        assert!(tick.woke_ns >= blocked_until);
        assert!(tick.lateness_ns >= 3 * period_ns / 10, "{tick:?}");
    } else {
        // Only if the blocking sleep itself overslept by more than 0.7 periods.
        assert!(tick.woke_ns >= first.deadline_ns + 2 * period_ns);
    }
}

#[test]
fn set_period_reanchors_at_the_last_deadline() {
    let mut ticker = Ticker::new(Duration::from_millis(3)).unwrap();
    let before: Vec<Tick> = (0..3).map(|_| ticker.wait()).collect();
    let last = before[2];
    ticker.set_period(Duration::from_nanos(4_500_001)).unwrap();
    assert_eq!(ticker.period(), Duration::from_nanos(4_500_001));
    assert_eq!(ticker.next_deadline_ns(), last.deadline_ns + 4_500_001);
    let after: Vec<Tick> = (0..10).map(|_| ticker.wait()).collect();
    assert_eq!(after[0].seq, last.seq + 1 + after[0].missed);
    for tick in &after {
        assert_eq!(
            tick.deadline_ns,
            last.deadline_ns + (tick.seq - last.seq) * 4_500_001
        );
    }
    assert!(ticker.set_period(Duration::ZERO).is_err());
    assert_eq!(ticker.period(), Duration::from_nanos(4_500_001));
}

#[test]
fn set_period_before_the_first_tick_keeps_the_first_deadline() {
    let start = monotonic_ns() + 2_000_000;
    let mut ticker = Ticker::starting_at(Duration::from_millis(5), start).unwrap();
    ticker.set_period(Duration::from_millis(1)).unwrap();
    assert_eq!(ticker.next_deadline_ns(), start);
}

#[test]
fn bad_periods_are_rejected() {
    assert_eq!(
        Ticker::new(Duration::ZERO).err(),
        Some(TickerError::ZeroPeriod)
    );
    assert!(matches!(
        Ticker::new(Duration::from_nanos(10)),
        Err(TickerError::PeriodTooShort { .. })
    ));
    assert!(matches!(
        Ticker::new(MAX_PERIOD + Duration::from_secs(1)),
        Err(TickerError::PeriodTooLong { .. })
    ));
    assert!(matches!(
        Ticker::new(Duration::MAX),
        Err(TickerError::PeriodTooLong { .. })
    ));
    for hz in [0.0, -5.0, f64::NAN, f64::INFINITY] {
        assert!(
            matches!(Ticker::from_rate_hz(hz), Err(TickerError::BadRate(_))),
            "{hz}"
        );
    }
    assert!(Ticker::from_rate_hz(1e12).is_err());
    assert!(Ticker::from_rate_hz(1e-9).is_err());
    let message = Ticker::new(Duration::ZERO).err().unwrap().to_string();
    assert!(message.contains("period"), "{message}");
}

#[test]
fn rate_gives_the_period() {
    let ticker = Ticker::from_rate_hz(1000.0).unwrap();
    assert_eq!(ticker.period(), Duration::from_millis(1));
    assert_eq!(
        Ticker::from_rate_hz(3.0).unwrap().period(),
        Duration::from_nanos(333_333_333)
    );
}

#[test]
fn default_strategy_depends_on_the_period() {
    assert_eq!(
        Ticker::new(Duration::from_millis(100)).unwrap().strategy(),
        SleepStrategy::SlackCompensated
    );
    assert_eq!(
        Ticker::new(Duration::from_millis(1)).unwrap().strategy(),
        SleepStrategy::SlackCompensated
    );
    assert_eq!(
        Ticker::new(Duration::from_micros(500)).unwrap().strategy(),
        SleepStrategy::Hybrid {
            spin_ns: DEFAULT_HYBRID_SPIN_NS
        }
    );
    // The spin tail never exceeds half the period.
    assert_eq!(
        Ticker::new(Duration::from_micros(100)).unwrap().strategy(),
        SleepStrategy::Hybrid { spin_ns: 50_000 }
    );
}

#[test]
fn strategy_names_parse_and_print() {
    let cases = [
        ("relative", SleepStrategy::Relative),
        ("absolute", SleepStrategy::Absolute),
        ("slack-compensated", SleepStrategy::SlackCompensated),
        ("busy-wait", SleepStrategy::BusyWait),
        (
            "hybrid",
            SleepStrategy::Hybrid {
                spin_ns: DEFAULT_HYBRID_SPIN_NS,
            },
        ),
        ("hybrid:50us", SleepStrategy::Hybrid { spin_ns: 50_000 }),
        ("hybrid:2ms", SleepStrategy::Hybrid { spin_ns: 2_000_000 }),
        ("hybrid:1234ns", SleepStrategy::Hybrid { spin_ns: 1234 }),
    ];
    for (name, strategy) in cases {
        assert_eq!(name.parse::<SleepStrategy>(), Ok(strategy), "{name}");
        assert_eq!(strategy.to_string(), name);
        let json = serde_json::to_string(&strategy).unwrap();
        assert_eq!(json, format!("\"{name}\""));
        assert_eq!(
            serde_json::from_str::<SleepStrategy>(&json).unwrap(),
            strategy
        );
    }
    assert_eq!(
        " Busy-Wait ".parse::<SleepStrategy>(),
        Ok(SleepStrategy::BusyWait)
    );
    assert_eq!("hybrid:7".parse(), Ok(SleepStrategy::Hybrid { spin_ns: 7 }));
    assert_eq!(
        "hybrid:1s".parse(),
        Ok(SleepStrategy::Hybrid {
            spin_ns: 1_000_000_000
        })
    );
    for name in SleepStrategy::NAMES {
        assert!(name.parse::<SleepStrategy>().is_ok(), "{name}");
    }

    assert_eq!(
        "spin".parse::<SleepStrategy>(),
        Err(ParseStrategyError::Unknown("spin".into()))
    );
    assert!(matches!(
        "absolute:5us".parse::<SleepStrategy>(),
        Err(ParseStrategyError::Unknown(_))
    ));
    for bad in [
        "hybrid:",
        "hybrid:fast",
        "hybrid:5 parsecs",
        "hybrid:2s",
        "hybrid:99999999999999999999",
    ] {
        let err = bad.parse::<SleepStrategy>().unwrap_err();
        assert!(
            matches!(err, ParseStrategyError::BadSpin { .. }),
            "{bad}: {err}"
        );
    }
    let message = "sleepy".parse::<SleepStrategy>().unwrap_err().to_string();
    assert!(
        message.contains("sleepy") && message.contains("slack-compensated"),
        "{message}"
    );
    assert!(serde_json::from_str::<SleepStrategy>("\"nap\"").is_err());
}

#[test]
fn one_shot_sleeps_never_end_early() {
    let mut slack = SlackEstimator::new();
    for strategy in ALL_STRATEGIES {
        for _ in 0..5 {
            let deadline = monotonic_ns() + 700_000;
            let woke = sleep_until(deadline, &strategy, &mut slack);
            assert!(woke >= deadline, "{strategy}");
            assert!(monotonic_ns() >= woke);
        }
        // A deadline in the past returns at once with the current time.
        let before = monotonic_ns();
        assert!(sleep_until(before.saturating_sub(1_000_000), &strategy, &mut slack) >= before);
        let start = monotonic_ns();
        let woke = sleep_for(Duration::from_micros(300), &strategy, &mut slack);
        assert!(woke >= start + 300_000, "{strategy}");
    }
}

#[test]
fn slack_compensated_sleeps_learn_the_wake_up_latency() {
    // A sleep is observed only when its deadline lies beyond the estimator's
    // headroom; a headroom bounded at 100 µs and 20 ms sleeps keep every
    // sleep observed however late a busy machine wakes us (with the default
    // bound, 1 ms sleeps on a loaded VM outgrew the headroom: 2 of 5).
    let mut slack = SlackEstimator::with_max(100_000);
    for _ in 0..5 {
        sleep_for(
            Duration::from_millis(20),
            &SleepStrategy::SlackCompensated,
            &mut slack,
        );
    }
    assert_eq!(slack.observations(), 5);
    // Other strategies leave the estimator alone.
    sleep_for(
        Duration::from_millis(1),
        &SleepStrategy::Absolute,
        &mut slack,
    );
    assert_eq!(slack.observations(), 5);
}

#[test]
fn slack_estimator_rises_fast_falls_slowly_and_is_bounded() {
    let mut slack = SlackEstimator::with_max(1_000_000);
    assert_eq!(slack.estimate_ns(), SlackEstimator::INITIAL_NS);
    // Rising by a quarter of the gap: 60000 → 70000.
    slack.observe(100_000);
    assert_eq!(slack.estimate_ns(), 70_000);
    for _ in 0..200 {
        slack.observe(100_000);
    }
    assert_eq!(slack.estimate_ns(), 100_000);
    // Falling by a sixteenth of the gap: 100000 → 95000.
    slack.observe(20_000);
    assert_eq!(slack.estimate_ns(), 95_000);
    // One huge preemption counts only up to the bound.
    let mut bounded = SlackEstimator::with_max(1_000_000);
    for _ in 0..100 {
        bounded.observe(50_000_000);
    }
    assert_eq!(bounded.estimate_ns(), 1_000_000);
    assert_eq!(bounded.headroom_ns(), 1_000_000);
    // Headroom: estimate · 1.5 + 10 µs.
    assert_eq!(slack.headroom_ns(), 95_000 + 47_500 + 10_000);
    bounded.set_max_ns(200_000);
    assert_eq!(bounded.estimate_ns(), 200_000);
}

#[test]
fn latency_histogram_known_answers() {
    let mut h = LatencyHistogram::new();
    assert_eq!((h.percentile(50.0), h.max(), h.mean()), (None, None, None));
    for v in 1..=1000u64 {
        h.record(v);
    }
    assert_eq!(h.count(), 1000);
    assert_eq!((h.min(), h.max()), (Some(1), Some(1000)));
    assert_eq!(h.mean(), Some(500.5));
    let within = |actual: u64, expected: f64| (actual as f64 - expected).abs() <= expected * 0.035;
    assert!(
        within(h.percentile(50.0).unwrap(), 500.0),
        "{:?}",
        h.percentile(50.0)
    );
    assert!(
        within(h.percentile(99.0).unwrap(), 990.0),
        "{:?}",
        h.percentile(99.0)
    );
    assert_eq!(h.percentile(100.0), Some(1000));
    assert_eq!(h.percentile(0.0), Some(1));
    assert_eq!(h.percentile(101.0), None);
    // Small values are exact.
    let mut small = LatencyHistogram::new();
    for v in [3, 3, 3, 7, 9] {
        small.record(v);
    }
    assert_eq!(small.percentile(50.0), Some(3));
    assert_eq!(small.percentile(80.0), Some(7));
    small.merge(&h);
    assert_eq!(small.count(), 1005);
    assert_eq!((small.min(), small.max()), (Some(1), Some(1000)));
    small.clear();
    assert_eq!(small.count(), 0);
}

#[test]
fn sleep_error_statistics_known_answers() {
    let mut stats = SleepErrorStats::new();
    assert!(stats.summary().is_none());
    // Requested 10, 20, 40; slept 12, 21, 43: absolute errors 2, 1, 3 (mean 2,
    // variance 1); relative errors 0.2, 0.05, 0.075 (mean 0.108333…, variance
    // 0.0064583…).
    for (requested, actual) in [(10, 12), (20, 21), (40, 43)] {
        stats.record(requested, actual);
    }
    let s = stats.summary().unwrap();
    assert_eq!(s.n, 3);
    assert!((s.aesm_ns - 2.0).abs() < 1e-12);
    assert!((s.aesv_ns2 - 1.0).abs() < 1e-12);
    assert!((s.resm - 0.325 / 3.0).abs() < 1e-12);
    let m = 0.325 / 3.0;
    let v = ((0.2f64 - m).powi(2) + (0.05f64 - m).powi(2) + (0.075f64 - m).powi(2)) / 2.0;
    assert!((s.resv - v).abs() < 1e-12);
    // Early wake-ups give negative errors.
    let mut early = SleepErrorStats::new();
    early.record(100, 90);
    assert_eq!(early.summary().unwrap().aesm_ns, -10.0);
}

#[test]
fn thread_timer_slack_can_be_set_per_thread() {
    // Timer slack is per thread: change it on a thread of our own only.
    std::thread::spawn(|| {
        let default = thread_timer_slack().unwrap();
        set_thread_timer_slack(1_000).unwrap();
        assert_eq!(thread_timer_slack().unwrap(), 1_000);
        set_thread_timer_slack(1).unwrap();
        assert_eq!(thread_timer_slack().unwrap(), 1);
        // 0 restores the default.
        set_thread_timer_slack(0).unwrap();
        assert_eq!(thread_timer_slack().unwrap(), default);
    })
    .join()
    .unwrap();
}
