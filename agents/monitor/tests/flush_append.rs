//! Flushes append: through `MonitorHandle::flush`/`flush_report` on a running
//! monitor (scripted frame source), a second flush appends only the frames
//! sampled since the first, a flush after the database's ring wrapped reports
//! the frames lost, and a flush writes bytes in proportion to its new frames.

use hwqos_core::recording;
use hwqos_core::{CounterReading, Frame, MetricName, Sample, Scope, Timestamp};
use hwqos_monitor::Config;
use hwqos_monitor::{FrameSource, Monitor, MonitorHandle, NodeSources};
use hwqos_pmu::api::UnavailableEvent;
use hwqos_pmu::backend::BackendKind;
use hwqos_pmu::PmuError;
use hwqos_testsupport::wait_for;
use std::sync::Arc;
use std::time::Duration;

/// `procs` processes with a counter and a gauge each, every tick.
struct Scripted {
    sets: Vec<Vec<String>>,
    procs: u32,
}

impl FrameSource for Scripted {
    fn sample(&mut self, time: Timestamp) -> Frame {
        let mut samples = Vec::new();
        for pid in 1..=self.procs {
            let scope = Scope::Process { pid };
            samples.extend(Sample::counter(
                time,
                scope.clone(),
                MetricName::from_static("sw.page_faults"),
                CounterReading {
                    raw: u64::from(pid),
                    time_enabled: 10,
                    time_running: 10,
                },
            ));
            samples.push(Sample::gauge(
                time,
                scope,
                MetricName::from_static("os.proc.cpu"),
                0.5,
            ));
        }
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

fn engine(procs: u32) -> NodeSources {
    NodeSources {
        make_source: Arc::new(move |c: &Config| {
            Ok(Box::new(Scripted {
                sets: c.event_sets.clone(),
                procs,
            }) as Box<dyn FrameSource>)
        }),
        check_event: Arc::new(|_: &str| Ok(())),
    }
}

/// How long a wait may take before the test fails: a bound for slow
/// machines, not a speed assertion.
const DEADLINE: Duration = Duration::from_secs(30);

fn start(frames: usize, procs: u32) -> (tempfile::TempDir, Monitor) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        rate_hz: 200.0,
        event_sets: vec![vec!["sw.page_faults".into()]],
        ..Config::default()
    };
    config.database.frames = frames;
    config.output.dir = dir.path().to_path_buf();
    config.api.enabled = false;
    config.metrics.enabled = false;
    let monitor = Monitor::start(config, None, None, engine(procs)).unwrap();
    (dir, monitor)
}

fn sampled(h: &MonitorHandle) -> u64 {
    h.status().frames_sampled
}

#[test]
fn a_second_flush_appends_only_the_new_frames() {
    let (_dir, monitor) = start(10_000, 3);
    let h = monitor.handle();
    wait_for("20 frames", DEADLINE, || sampled(&h) >= 20);
    let first = h.flush_report().unwrap();
    assert!(first.frames >= 20 && first.gap.is_none(), "{first:?}");
    let n = sampled(&h);
    wait_for("20 more frames", DEADLINE, || sampled(&h) >= n + 20);
    let second = h.flush().unwrap();
    assert_eq!(second, first.paths, "the same files grow");
    monitor.stop();
    let third = h.flush_report().unwrap();
    // Read back: every frame once, in order, without a gap (no missed ticks
    // are needed for that: the sequence is compared with the database's).
    let rec = recording::read_recording(&first.paths[0]).unwrap();
    assert!(rec.frames.windows(2).all(|w| w[1].seq > w[0].seq));
    let mut seqs: Vec<u64> = rec.frames.iter().map(|f| f.seq).collect();
    seqs.dedup();
    assert_eq!(seqs.len(), rec.frames.len(), "a frame written twice");
    assert_eq!(rec.frames.last().map(|f| f.seq), third.last_seq);
    assert_eq!(
        rec.frames.len() as u64,
        h.output_stats().frames_written,
        "all frames flushed are in the file"
    );
    let csv = recording::read_csv(&first.paths[1]).unwrap();
    assert_eq!(csv.rows.len(), rec.frames.len() * 3);
    assert_eq!(h.output_stats().frames_lost, 0);
    let text = h.render_metrics();
    assert!(
        text.contains(&format!(
            "hwqos_monitor_flushed_frames {}\n",
            rec.frames.len()
        )),
        "{text}"
    );
    assert!(
        text.contains("hwqos_monitor_flush_lost_frames 0\n"),
        "{text}"
    );
}

#[test]
fn a_flush_after_the_ring_wrapped_reports_the_gap() {
    let (_dir, monitor) = start(20, 1);
    let h = monitor.handle();
    wait_for("5 frames", DEADLINE, || sampled(&h) >= 5);
    let first = h.flush_report().unwrap();
    let n = sampled(&h);
    // More than the ring holds since that flush.
    wait_for("60 more frames", DEADLINE, || sampled(&h) >= n + 60);
    monitor.stop();
    let second = h.flush_report().unwrap();
    let gap = second.gap.expect("the frames that fell out are reported");
    assert!(gap.frames >= 30, "{gap:?}");
    assert_eq!(gap.after_seq, first.last_seq);
    assert_eq!(h.output_stats().frames_lost, gap.frames);
    assert!(h
        .render_metrics()
        .contains(&format!("hwqos_monitor_flush_lost_frames {}\n", gap.frames)));
    // What was flushed plus what was lost is everything sampled.
    let rec = recording::read_recording(&first.paths[0]).unwrap();
    assert_eq!(
        rec.frames.len() as u64 + gap.frames,
        h.status().frames_sampled
    );
}

#[test]
fn flushed_bytes_follow_the_new_frames_not_the_database() {
    let (_dir, monitor) = start(100_000, 20);
    let h = monitor.handle();
    wait_for("1000 frames", DEADLINE, || sampled(&h) >= 1000);
    let whole = h.flush_report().unwrap();
    let per_frame = whole.bytes / whole.frames;
    for _ in 0..3 {
        let r = h.flush_report().unwrap();
        // Only the few frames of the last moments, however large the database.
        assert!(
            r.bytes <= (r.frames + 1) * per_frame * 2,
            "{} bytes for {} new frames ({per_frame} a frame)",
            r.bytes,
            r.frames
        );
    }
    monitor.stop();
    h.flush().unwrap();
    // Nothing new: nothing written.
    let idle = h.flush_report().unwrap();
    assert_eq!((idle.frames, idle.bytes), (0, 0));
    assert_eq!(idle.paths, whole.paths);
}
