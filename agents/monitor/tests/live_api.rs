//! The live API: a client subscribes and receives frames at the configured
//! rate; windows, status, event-set changes and the server's protections.

mod common;

use common::{Running, SW_SETS};
use hwqos_pmu::api::{ApiClient, ApiError, FrameFilter};
use hwqos_testsupport::wait_for;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

const RATE_HZ: f64 = 50.0;

#[test]
fn subscriber_receives_frames_at_the_configured_rate() {
    let m = Running::start(
        &format!("rate_hz = {RATE_HZ}\nper_cpu = true\n{SW_SETS}\n"),
        "",
    );
    let filter = FrameFilter::new(&["cpu:*"], &["sw.*"]).unwrap();
    let sub = m.client().subscribe(filter).unwrap();
    const TICKS: usize = 50;
    let frames: Vec<_> = sub.take(TICKS).collect::<Result<_, _>>().unwrap();
    assert_eq!(frames.len(), TICKS);

    // Every tick reached the subscriber: consecutive sequence numbers, except
    // for ticks the monitor itself reports as missed (an overloaded machine).
    let span = frames[TICKS - 1].seq - frames[0].seq;
    let missed = m.client().status().unwrap().missed_ticks;
    assert!(
        span as usize + 1 >= TICKS && span <= (TICKS as u64 - 1) + missed,
        "seq span {span} for {TICKS} frames with {missed} missed ticks"
    );
    for w in frames.windows(2) {
        assert!(
            w[1].seq > w[0].seq,
            "seq not increasing: {} then {}",
            w[0].seq,
            w[1].seq
        );
    }

    // Timestamps follow the period: the mean spacing per tick over the span is
    // the period within 20% (the ticker runs on absolute deadlines).
    let period_ns = 1e9 / RATE_HZ;
    let elapsed = (frames[TICKS - 1].time.mono_ns - frames[0].time.mono_ns) as f64;
    let per_tick = elapsed / span as f64;
    assert!(
        (per_tick - period_ns).abs() < 0.2 * period_ns,
        "mean tick spacing {per_tick} ns, period {period_ns} ns"
    );
    // Each frame's counters cover one interval of about one period.
    let median_interval = {
        let mut v: Vec<u64> = frames[1..].iter().map(|f| f.interval_ns).collect();
        v.sort_unstable();
        v[v.len() / 2] as f64
    };
    assert!(
        (median_interval - period_ns).abs() < 0.5 * period_ns,
        "median interval {median_interval} ns"
    );

    // The filter was applied: only CPU scopes and sw.* metrics, and the
    // software counters are there.
    let mut saw_task_clock = false;
    for f in &frames {
        for s in &f.samples {
            assert_eq!(s.scope.kind(), "cpu", "{:?}", s.scope);
            assert!(s.metric.as_str().starts_with("sw."), "{}", s.metric);
            saw_task_clock |= s.metric.as_str() == "sw.task_clock";
        }
    }
    assert!(saw_task_clock, "no sw.task_clock samples for any CPU");
}

#[test]
fn window_status_and_event_sets() {
    let m = Running::start(&format!("rate_hz = 100\n{SW_SETS}\n"), "");
    let mut c = m.client();
    assert_eq!(c.hello().rate_hz, 100.0);
    wait_for("10 frames in the database", Duration::from_secs(30), || {
        c.status().unwrap().frames_in_db >= 10
    });
    let status = c.status().unwrap();
    assert_eq!(status.rate_hz, 100.0);
    assert_eq!(status.db_capacity, 30_000);
    assert_eq!(
        status.event_sets,
        vec![vec![
            "sw.task_clock",
            "sw.page_faults",
            "sw.context_switches"
        ]]
    );

    let w = c.window(None, Some(5), FrameFilter::default()).unwrap();
    assert_eq!(w.len(), 5);
    assert!(
        w.windows(2).all(|p| p[1].seq > p[0].seq),
        "window is oldest first"
    );
    let w = c.window(Some(0.0), None, FrameFilter::default()).unwrap();
    assert_eq!(
        w.len(),
        1,
        "a zero-second window holds the newest frame only"
    );

    let sets = c
        .set_event_sets(vec![vec!["sw.cpu_migrations".into()]])
        .unwrap();
    assert_eq!(sets.sets, vec![vec!["sw.cpu_migrations".to_string()]]);
    assert_eq!(c.get_event_sets().unwrap().sets, sets.sets);
    // The next frames carry the new set's metric (after one tick to start counting).
    let sub = m
        .client()
        .subscribe(FrameFilter::new(&["cpu:*"], &["sw.*"]).unwrap())
        .unwrap();
    let mut found = false;
    for f in sub.take(20) {
        let f = f.unwrap();
        if f.samples
            .iter()
            .any(|s| s.metric.as_str() == "sw.cpu_migrations")
        {
            assert!(f
                .samples
                .iter()
                .all(|s| s.metric.as_str() == "sw.cpu_migrations"));
            found = true;
            break;
        }
    }
    assert!(
        found,
        "sw.cpu_migrations never appeared after set_event_sets"
    );

    // An unknown event is refused and the old sets stay.
    match c.set_event_sets(vec![vec!["hw.bogus".into()]]) {
        Err(ApiError::Server(msg)) => assert!(msg.contains("hw.bogus"), "{msg}"),
        other => panic!("expected a server error, got {other:?}"),
    }
    assert_eq!(c.get_event_sets().unwrap().sets, sets.sets);
}

#[test]
fn protocol_errors_and_limits() {
    let m = Running::start(&format!("rate_hz = 20\n{SW_SETS}\n"), "");
    let stream = UnixStream::connect(&m.socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut w = stream;
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains("\"schema\":\"hwqos.api/1\""), "{line}");

    for (request, expect) in [
        ("{\"op\":\"dance\"}\n", "bad request"),
        ("not json\n", "bad request"),
        ("{\"op\":\"subscribe\",\"scopes\":[\"disk:1\"]}\n", "disk:1"),
        ("{\"op\":\"window\",\"seconds\":-1}\n", "non-negative"),
    ] {
        w.write_all(request.as_bytes()).unwrap();
        line.clear();
        reader.read_line(&mut line).unwrap();
        assert!(
            line.starts_with("{\"type\":\"error\""),
            "{request} -> {line}"
        );
        assert!(line.contains(expect), "{request} -> {line}");
    }
    // The connection is still usable after errors.
    w.write_all(b"{\"op\":\"status\"}\n").unwrap();
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("{\"type\":\"status\""), "{line}");

    // An overlong request line is refused and the connection closed.
    let long = vec![b'x'; hwqos_pmu::api::MAX_REQUEST_BYTES + 10];
    let _ = w.write_all(&long);
    let _ = w.write_all(b"\n");
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains("longer than"), "{line}");
    line.clear();
    assert_eq!(
        reader.read_line(&mut line).unwrap_or(0),
        0,
        "connection should be closed"
    );
}

#[test]
fn slow_subscriber_is_dropped_without_stalling_the_sampler() {
    // A tiny queue at a high rate; the subscriber never reads.
    let m = Running::start(&format!("rate_hz = 1000\n{SW_SETS}\n"), "client_queue = 4");
    let mut stalled = UnixStream::connect(&m.socket).unwrap();
    stalled.write_all(b"{\"op\":\"subscribe\"}\n").unwrap();
    let mut c: ApiClient = m.client();
    let before = c.status().unwrap().frames_sampled;
    wait_for(
        "the stalled subscriber to be dropped",
        Duration::from_secs(60),
        || c.status().unwrap().dropped_subscribers >= 1,
    );
    let after = c.status().unwrap();
    assert!(after.frames_sampled > before, "the sampler kept sampling");
    assert_eq!(after.subscribers, 0);
    drop(stalled);
}

#[test]
fn socket_permissions_and_stale_socket() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    // A stale socket left by a dead monitor is replaced.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(std::fs::symlink_metadata(&stale)
        .unwrap()
        .file_type()
        .is_socket());
    let m = Running::start(&format!("rate_hz = 10\n{SW_SETS}\n"), "");
    let mode = std::fs::metadata(&m.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o660);
    let listener = hwqos_monitor::api_server::bind(&stale);
    assert!(
        listener.is_ok(),
        "stale socket not replaced: {:?}",
        listener.err()
    );
    // A live socket (another monitor) is not stolen.
    match hwqos_monitor::api_server::bind(&m.socket) {
        Err(e) => assert!(e.to_string().contains("already running"), "{e}"),
        Ok(_) => panic!("bound over a live monitor's socket"),
    }
}
