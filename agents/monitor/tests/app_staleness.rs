//! Application metrics pushed on an `[[app]]` socket stay on `/metrics` for
//! `[metrics] app_stale_s` after the push, not only for the rotation horizon
//! (2 × sets, at least 10 ticks: 0.1 s at 100 Hz, about 1 s at the default
//! 10 Hz), and go after it. The frame source is scripted (no counters needed);
//! the application metrics go through `hwqos_pmu::appmetric`'s real socket.

use hwqos_core::{CounterReading, Frame, MetricName, Sample, Scope, Timestamp};
use hwqos_monitor::Config;
use hwqos_monitor::{FrameSource, Monitor, MonitorHandle, NodeSources};
use hwqos_pmu::api::UnavailableEvent;
use hwqos_pmu::appmetric::{AppMetrics, AppSource};
use hwqos_pmu::backend::BackendKind;
use hwqos_pmu::PmuError;
use hwqos_testsupport::wait_for;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One counter for `cpu:0` a tick, plus what the application sources received.
struct WithApps {
    sets: Vec<Vec<String>>,
    app: AppMetrics,
}

impl FrameSource for WithApps {
    fn sample(&mut self, time: Timestamp) -> Frame {
        let mut samples: Vec<Sample> = Sample::counter(
            time,
            Scope::Cpu { cpu: 0 },
            MetricName::from_static("sw.page_faults"),
            CounterReading {
                raw: 5,
                time_enabled: 10,
                time_running: 10,
            },
        )
        .into_iter()
        .collect();
        samples.extend(self.app.drain());
        Frame {
            seq: 0,
            time,
            interval_ns: 10_000_000,
            samples,
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
        Vec::new()
    }
    fn backend(&self) -> BackendKind {
        BackendKind::Simulated
    }
}

fn engine() -> NodeSources {
    NodeSources {
        make_source: Arc::new(|c: &Config| {
            Ok(Box::new(WithApps {
                sets: c.event_sets.clone(),
                app: AppMetrics::start(&c.apps)?,
            }) as Box<dyn FrameSource>)
        }),
        check_event: Arc::new(|_: &str| Ok(())),
    }
}

/// How long a wait may take before the test fails: a bound for slow
/// machines, not a speed assertion.
const DEADLINE: Duration = Duration::from_secs(30);

const SERIES: &str = "hwqos_app_queue_depth{scope=\"system\"} 7.0\n";

fn start(app_stale_s: f64) -> (tempfile::TempDir, Monitor, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("app.sock");
    let mut config = Config {
        rate_hz: 100.0,
        event_sets: vec![vec!["sw.page_faults".into()]],
        apps: vec![AppSource::Socket { path: sock.clone() }],
        ..Config::default()
    };
    config.output.dir = dir.path().join("out");
    config.api.enabled = false;
    config.metrics.enabled = false;
    config.metrics.app_stale_s = app_stale_s;
    let monitor = Monitor::start(config, None, None, engine()).unwrap();
    (dir, monitor, sock)
}

fn push(sock: &std::path::Path, line: &str) {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(line.as_bytes()).unwrap();
}

fn shown(h: &MonitorHandle) -> bool {
    h.render_metrics().contains(SERIES)
}

#[test]
fn a_pushed_metric_stays_for_the_staleness_window_then_goes() {
    let (_dir, monitor, sock) = start(3.0);
    let h = monitor.handle();
    wait_for("100 frames", DEADLINE, || h.status().frames_sampled >= 100);
    let pushed = Instant::now();
    push(&sock, "app.queue_depth 7\n");
    wait_for("the pushed value on /metrics", DEADLINE, || shown(&h));
    // Far beyond the rotation horizon (10 ticks = 0.1 s here; the ~1 s that
    // an application metric lasted before at 10 Hz), well within 3 s.
    std::thread::sleep(Duration::from_millis(1500));
    let text = h.render_metrics();
    assert!(
        text.contains(SERIES) || pushed.elapsed() >= Duration::from_secs(3),
        "gone after {:?}:\n{text}",
        pushed.elapsed()
    );
    assert!(text.contains("hwqos_monitor_app_series_held 1\n"), "{text}");
    // Gone once the window has passed since the tick that carried it (which
    // came after the push).
    wait_for("the value to go", DEADLINE, || !shown(&h));
    assert!(
        pushed.elapsed() >= Duration::from_secs(3),
        "gone after {:?}, before the 3 s window",
        pushed.elapsed()
    );
    assert!(h
        .render_metrics()
        .contains("hwqos_monitor_app_series_held 0\n"));
    monitor.stop();
}

#[test]
fn a_zero_window_shows_pushed_metrics_only_within_the_rotation_horizon() {
    let (_dir, monitor, sock) = start(0.0);
    let h = monitor.handle();
    wait_for("100 frames", DEADLINE, || h.status().frames_sampled >= 100);
    push(&sock, "app.queue_depth 7\n");
    // It shows for 10 ticks (0.1 s): seen or not, it must go quickly.
    wait_for("the value to go", DEADLINE, || !shown(&h));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!shown(&h));
    monitor.stop();
}

#[test]
fn the_window_changes_on_reload() {
    let (_dir, monitor, sock) = start(600.0);
    let h = monitor.handle();
    wait_for("100 frames", DEADLINE, || h.status().frames_sampled >= 100);
    push(&sock, "app.queue_depth 7\n");
    wait_for("the pushed value on /metrics", DEADLINE, || shown(&h));
    std::thread::sleep(Duration::from_millis(300));
    assert!(shown(&h), "held beyond the rotation horizon");
    let mut shorter = (*h.config()).clone();
    shorter.metrics.app_stale_s = 0.5;
    h.apply(shorter).unwrap();
    assert_eq!(h.config().metrics.app_stale_s, 0.5);
    wait_for("the value to go after the reload", DEADLINE, || !shown(&h));
    monitor.stop();
}
