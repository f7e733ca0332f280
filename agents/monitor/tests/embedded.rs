//! The monitor as a library: `Monitor::start` with a scripted frame source
//! (no counters needed), checking sequencing, the database bounds across a
//! reload, event-set changes and flushing.

use hwqos_core::{CounterReading, Frame, MetricName, Sample, Scope, Timestamp};
use hwqos_monitor::Config;
use hwqos_monitor::{FrameSource, Monitor, NodeSources};
use hwqos_pmu::api::UnavailableEvent;
use hwqos_pmu::backend::BackendKind;
use hwqos_pmu::PmuError;
use hwqos_testsupport::wait_for;
use std::sync::Arc;
use std::time::Duration;

/// Reports one multiplexed counter per tick for `cpu:0`: 100 raw at half time.
struct Scripted {
    sets: Vec<Vec<String>>,
}

impl FrameSource for Scripted {
    fn sample(&mut self, time: Timestamp) -> Frame {
        let reading = CounterReading {
            raw: 100,
            time_enabled: 10,
            time_running: 5,
        };
        Frame {
            seq: 0,
            time,
            interval_ns: 10_000_000,
            samples: vec![Sample::counter(
                time,
                Scope::Cpu { cpu: 0 },
                MetricName::from_static("sw.page_faults"),
                reading,
            )
            .unwrap()],
            labels: vec![],
        }
    }
    fn event_sets(&self) -> Vec<Vec<String>> {
        self.sets.clone()
    }
    fn set_event_sets(&mut self, sets: Vec<Vec<String>>) -> Result<(), PmuError> {
        self.sets = sets;
        Ok(())
    }
    fn unavailable(&self) -> Vec<UnavailableEvent> {
        vec![UnavailableEvent {
            name: "hw.cycles".into(),
            reason: "scripted".into(),
        }]
    }
    fn backend(&self) -> BackendKind {
        BackendKind::Simulated
    }
}

fn engine() -> NodeSources {
    NodeSources {
        make_source: Arc::new(|c: &Config| {
            Ok(Box::new(Scripted {
                sets: c.event_sets.clone(),
            }) as Box<dyn FrameSource>)
        }),
        check_event: Arc::new(|n: &str| {
            if n.starts_with("sw.") {
                Ok(())
            } else {
                Err("scripted catalog knows sw.* only".into())
            }
        }),
    }
}

/// How long a wait may take before the test fails: a bound for slow
/// machines, not a speed assertion.
const DEADLINE: Duration = Duration::from_secs(30);

#[test]
fn embedded_monitor_with_a_scripted_source() {
    let out = tempfile::tempdir().unwrap();
    let mut config = Config {
        rate_hz: 200.0,
        event_sets: vec![vec!["sw.page_faults".into()]],
        ..Config::default()
    };
    config.database.frames = 20;
    config.output.dir = out.path().to_path_buf();
    config.api.enabled = false;
    config.metrics.enabled = false;
    let monitor = Monitor::start(config.clone(), None, None, engine()).unwrap();
    let h = monitor.handle();
    wait_for("a full database", DEADLINE, || {
        h.status().frames_in_db == 20
    });
    let status = h.status();
    assert_eq!(status.db_capacity, 20);
    assert_eq!(status.backend, BackendKind::Simulated);
    assert_eq!(status.unavailable.len(), 1);
    assert!(status.multiplexed_samples >= 20);

    // Sequence numbers are the monitor's ticks: gaps only for missed ticks.
    let frames = h.window(None, None);
    let span = frames.last().unwrap().seq - frames[0].seq;
    assert!(span >= 19, "{span}");

    // The exposition shows the scaled rate and the running ratio: 100 raw at
    // half time = 200 events in 10 ms = 20000/s.
    let text = h.render_metrics();
    assert!(
        text.contains("hwqos_sw_page_faults_per_second{scope=\"cpu\",cpu=\"0\"} 20000.0\n"),
        "{text}"
    );
    assert!(text.contains(
        "hwqos_counter_running_ratio{metric=\"sw.page_faults\",scope=\"cpu\",cpu=\"0\"} 0.5\n"
    ));

    // A reload that shrinks the database keeps the newest frames.
    let newest = h.window(None, Some(1))[0].seq;
    let mut smaller = config.clone();
    smaller.database.frames = 5;
    h.apply(smaller).unwrap();
    let kept = h.window(None, None);
    assert!(kept.len() <= 5);
    assert!(kept.last().unwrap().seq >= newest);

    // Event sets: unknown names are refused, known ones applied.
    assert!(h
        .set_event_sets(vec![vec!["hw.cycles".into()]])
        .unwrap_err()
        .contains("hw.cycles"));
    let sets = h
        .set_event_sets(vec![vec!["sw.task_clock".into()]])
        .unwrap();
    assert_eq!(sets.sets, vec![vec!["sw.task_clock".to_string()]]);

    // Flush writes a simulated-backend recording.
    let paths = h.flush().unwrap();
    let rec = hwqos_core::recording::read_recording(&paths[0]).unwrap();
    assert_eq!(
        rec.header.backend,
        hwqos_core::recording::RecordedBackend::Simulated
    );
    assert!(!rec.frames.is_empty() && rec.frames.len() <= 5);
    monitor.stop();
}

#[test]
fn set_event_sets_refuses_an_empty_list_and_too_many_sets() {
    let out = tempfile::tempdir().unwrap();
    let mut config = Config {
        rate_hz: 100.0,
        event_sets: vec![vec!["sw.page_faults".into()]],
        ..Config::default()
    };
    config.output.dir = out.path().to_path_buf();
    config.api.enabled = false;
    config.metrics.enabled = false;
    let monitor = Monitor::start(config, None, None, engine()).unwrap();
    let h = monitor.handle();
    let before = h.event_sets().sets;
    let e = h.set_event_sets(vec![]).unwrap_err();
    assert!(e.contains("no event sets given"), "{e}");
    let thousand: Vec<Vec<String>> = (0..1000)
        .map(|_| vec!["sw.page_faults".into(), "sw.task_clock".into()])
        .collect();
    let e = h.set_event_sets(thousand).unwrap_err();
    assert!(e.contains("1000 event sets given; at most 32"), "{e}");
    // The sets in effect are unchanged.
    assert_eq!(h.event_sets().sets, before);
    monitor.stop();
}

#[test]
fn start_removes_the_temporary_file_of_an_interrupted_flush() {
    let out = tempfile::tempdir().unwrap();
    // What kill -9 during a flush leaves: a hidden, half-written temporary file.
    let stale = out
        .path()
        .join(".hwqos-node-20260101T000000Z-99.k3Xq9a.tmp");
    std::fs::write(&stale, vec![b'{'; 1 << 20]).unwrap();
    let recording = out.path().join("hwqos-node-20260101T000000Z-98.jsonl");
    std::fs::write(&recording, b"{}\n").unwrap();
    let mut config = Config {
        rate_hz: 100.0,
        event_sets: vec![vec!["sw.page_faults".into()]],
        ..Config::default()
    };
    config.output.dir = out.path().to_path_buf();
    config.api.enabled = false;
    config.metrics.enabled = false;
    let monitor = Monitor::start(config, None, None, engine()).unwrap();
    assert!(!stale.exists(), "the stale temporary file is still there");
    assert!(recording.exists(), "a finished recording was removed");
    monitor.stop();
}
