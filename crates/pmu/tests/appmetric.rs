//! Application metric sources: each delivers known values with the right metric
//! and scope, garbage is rejected and counted without panics, the queue bound holds.

use hwqos_core::{Sample, Scope, Timestamp};
use hwqos_pmu::appmetric::{
    first_number, parse_push_line, parse_tail_line, timestamp_from_wall, AppMetrics, AppOptions,
    AppSource, AppStats, MAX_LINE,
};
use hwqos_pmu::PmuError;
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// Waits (up to a generous bound, not a timing assertion) until `done` holds for
/// everything drained so far; returns it.
fn collect_until(
    app: &mut AppMetrics,
    mut done: impl FnMut(&[Sample], &AppStats) -> bool,
) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    loop {
        got.extend(app.drain());
        if done(&got, &app.stats()) {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting; have {got:?}, stats {:?}",
            app.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn values(samples: &[Sample]) -> Vec<f64> {
    samples.iter().map(|s| s.value).collect()
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn tail(path: &Path, from_start: bool) -> AppSource {
    AppSource::TailFile {
        path: path.to_path_buf(),
        metric: "app.rtt_us".parse().unwrap(),
        scope: Scope::Process { pid: 42 },
        from_start,
        poll_ms: 5,
    }
}

#[test]
fn sources_deserialize_from_toml_and_json() {
    #[derive(serde::Deserialize)]
    struct Cfg {
        app: Vec<AppSource>,
    }
    let cfg: Cfg = toml::from_str(
        r#"
        [[app]]
        type = "tail_file"
        path = "/var/log/app/rtt.log"
        metric = "app.rtt_us"
        scope = "pid:1234"

        [[app]]
        type = "socket"
        path = "/run/hwqos/app.sock"

        [[app]]
        type = "command"
        argv = ["/usr/bin/app-stat", "--rate"]
        every_ms = 1000
        metric = "app.requests"
        "#,
    )
    .unwrap();
    assert_eq!(
        cfg.app[0],
        AppSource::TailFile {
            path: "/var/log/app/rtt.log".into(),
            metric: "app.rtt_us".parse().unwrap(),
            scope: Scope::Process { pid: 1234 },
            from_start: false,
            poll_ms: 100,
        }
    );
    assert!(matches!(
        &cfg.app[2],
        AppSource::Command {
            scope: Scope::System,
            timeout_ms: None,
            ..
        }
    ));
    let json = serde_json::to_string(&cfg.app[0]).unwrap();
    assert!(
        json.contains(r#""type":"tail_file""#) && json.contains(r#""scope":"pid:1234""#),
        "{json}"
    );
    assert_eq!(
        serde_json::from_str::<AppSource>(&json).unwrap(),
        cfg.app[0]
    );

    for bad in [
        r#"{"type":"socket","path":"/x","extra":1}"#,
        r#"{"type":"pipe","path":"/x"}"#,
        r#"{"type":"tail_file","path":"/x","metric":"app.a","scope":"pid:x"}"#,
        r#"{"type":"tail_file","path":"/x","metric":"Bad"}"#,
    ] {
        assert!(serde_json::from_str::<AppSource>(bad).is_err(), "{bad}");
    }
}

#[test]
fn misconfigured_sources_fail_to_start_with_a_clear_message() {
    let cases = [
        (
            AppSource::TailFile {
                path: "/x".into(),
                metric: "hw.cycles".parse().unwrap(),
                scope: Scope::System,
                from_start: false,
                poll_ms: 10,
            },
            "not an application metric",
        ),
        (
            AppSource::Command {
                argv: vec![],
                every_ms: 10,
                metric: "app.x".parse().unwrap(),
                scope: Scope::System,
                timeout_ms: None,
            },
            "argv must name a program",
        ),
        (
            AppSource::Command {
                argv: vec!["true".into()],
                every_ms: 0,
                metric: "app.x".parse().unwrap(),
                scope: Scope::System,
                timeout_ms: None,
            },
            "every_ms",
        ),
    ];
    for (src, why) in cases {
        let e = AppMetrics::start(&[src]).err().expect("must fail");
        assert!(matches!(&e, PmuError::Config(m) if m.contains(why)), "{e}");
    }
    let e = AppMetrics::start_with(&[], AppOptions { queue_capacity: 0 })
        .err()
        .unwrap();
    assert!(e.to_string().contains("capacity"), "{e}");
}

#[test]
fn line_parsers_known_answers() {
    assert_eq!(
        parse_tail_line("1700000000.5 153"),
        Ok(Some((Some(1_700_000_000.5), 153.0)))
    );
    assert_eq!(parse_tail_line("  -\t-2.5e1 "), Ok(Some((None, -25.0))));
    assert_eq!(parse_tail_line(""), Ok(None));
    assert_eq!(parse_tail_line("# comment"), Ok(None));
    for bad in ["153", "1 2 3", "x 1", "1 nan", "1 inf", "- y"] {
        assert!(parse_tail_line(bad).is_err(), "{bad}");
    }
    let (m, v, s) = parse_push_line("app.rtt_us 153 pid:1234").unwrap().unwrap();
    assert_eq!(
        (m.as_str(), v, s),
        ("app.rtt_us", 153.0, Scope::Process { pid: 1234 })
    );
    let (_, _, s) = parse_push_line("app.q 1").unwrap().unwrap();
    assert_eq!(s, Scope::System);
    assert_eq!(parse_push_line("   "), Ok(None));
    for bad in [
        "app.rtt_us",
        "hw.cycles 5",
        "App.x 5",
        "app.x five",
        "app.x 5 pid:abc",
        "app.x 5 system extra",
    ] {
        assert!(parse_push_line(bad).is_err(), "{bad}");
    }
    assert_eq!(first_number("latency: 42.5 ms (p99 80)"), Some(42.5));
    assert_eq!(first_number("-3e2\n"), Some(-300.0));
    assert_eq!(first_number("none here"), None);
}

#[test]
fn wall_timestamps_map_onto_the_monotonic_base() {
    let now = Timestamp::now();
    let t = timestamp_from_wall(now.wall_ns as f64 / 1e9 - 2.0).unwrap();
    // The clocks' offset is preserved (to well within a second), the wall time exactly.
    let offset_now = now.wall_ns as i128 - now.mono_ns as i128;
    let offset_t = t.wall_ns as i128 - t.mono_ns as i128;
    assert!(
        (offset_now - offset_t).abs() < 500_000_000,
        "{offset_now} vs {offset_t}"
    );
    assert!(t.mono_ns < now.mono_ns);
    // Before boot or absurd: no timestamp.
    assert!(timestamp_from_wall(0.0).is_none());
    assert!(timestamp_from_wall(f64::NAN).is_none());
    assert!(timestamp_from_wall(1e300).is_none());
}

#[test]
fn tail_file_follows_creation_garbage_truncation_and_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rtt.log");
    // The file does not exist yet.
    let mut app = AppMetrics::start(&[tail(&path, false)]).unwrap();
    let wall = Timestamp::now().wall_ns as f64 / 1e9;
    append(
        &path,
        &format!("- 1.5\n{wall:.6} 2.5\nnot a line\n1 2 3\n# comment\n\n"),
    );
    let got = collect_until(&mut app, |s, st| s.len() >= 2 && st.rejected >= 2);
    assert_eq!(values(&got), vec![1.5, 2.5]);
    for s in &got {
        assert_eq!(s.metric.as_str(), "app.rtt_us");
        assert_eq!(s.scope, Scope::Process { pid: 42 });
        assert!(s.counter.is_none());
    }
    assert!((got[1].time.wall_ns as f64 / 1e9 - wall).abs() < 1e-5);
    assert_eq!(app.stats().rejected, 2);

    // A line split across two writes is taken once complete.
    append(&path, "- 3");
    std::thread::sleep(Duration::from_millis(30));
    append(&path, ".5\n");
    assert_eq!(
        values(&collect_until(&mut app, |s, _| !s.is_empty())),
        vec![3.5]
    );

    // Truncated in place, then written again.
    std::fs::write(&path, "").unwrap();
    std::thread::sleep(Duration::from_millis(30));
    append(&path, "- 7\n");
    assert_eq!(
        values(&collect_until(&mut app, |s, _| !s.is_empty())),
        vec![7.0]
    );

    // Rotated: the old file is read to its end, then the new one from its start.
    append(&path, "- 8\n");
    std::fs::rename(&path, dir.path().join("rtt.log.1")).unwrap();
    append(&path, "- 9\n");
    let got = collect_until(&mut app, |s, _| s.len() >= 2);
    assert_eq!(values(&got), vec![8.0, 9.0]);

    // An over-long line is rejected, and the next line still parses.
    append(&path, &format!("- {}\n- 10\n", "1".repeat(MAX_LINE + 10)));
    let got = collect_until(&mut app, |s, st| !s.is_empty() && st.rejected >= 3);
    assert_eq!(values(&got), vec![10.0]);
    app.stop();
}

#[test]
fn tail_file_skips_history_unless_from_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.log");
    std::fs::write(&path, "- 1\n- 2\n").unwrap();
    let mut later = AppMetrics::start(&[tail(&path, false)]).unwrap();
    let mut all = AppMetrics::start(&[tail(&path, true)]).unwrap();
    append(&path, "- 3\n");
    assert_eq!(
        values(&collect_until(&mut later, |s, _| !s.is_empty())),
        vec![3.0]
    );
    assert_eq!(
        values(&collect_until(&mut all, |s, _| s.len() >= 3)),
        vec![1.0, 2.0, 3.0]
    );
}

#[test]
fn queue_bound_drops_the_oldest_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("burst.log");
    let lines: String = (1..=20).map(|i| format!("- {i}\n")).collect();
    std::fs::write(&path, lines).unwrap();
    let mut app =
        AppMetrics::start_with(&[tail(&path, true)], AppOptions { queue_capacity: 5 }).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.stats().received < 20 {
        assert!(Instant::now() < deadline, "{:?}", app.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(values(&app.drain()), vec![16.0, 17.0, 18.0, 19.0, 20.0]);
    assert_eq!(app.stats().dropped, 15);
}

#[test]
fn socket_accepts_lines_from_many_clients_and_rejects_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.sock");
    // A stale socket file left by a crashed process is replaced.
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let mut app = AppMetrics::start(&[AppSource::Socket { path: path.clone() }]).unwrap();

    let mut a = UnixStream::connect(&path).unwrap();
    let mut b = UnixStream::connect(&path).unwrap();
    a.write_all(b"app.rtt_us 153 pid:1234\nhw.cycles 5\n")
        .unwrap();
    b.write_all(b"app.queue_len 7\n").unwrap();
    b.write_all(b"app.x five\napp.y 1 pid:zz\n").unwrap();
    // Over-long line, then a valid one on the same connection.
    let long = format!("app.z {}\napp.after_long 1\n", "9".repeat(MAX_LINE + 1));
    b.write_all(long.as_bytes()).unwrap();
    a.write_all(b"app.bin \xff\xfe\n").unwrap();
    // The last line of a connection needs no newline.
    let mut c = UnixStream::connect(&path).unwrap();
    c.write_all(b"app.last 2.5").unwrap();
    drop(c);

    let got = collect_until(&mut app, |s, st| s.len() >= 4 && st.rejected >= 5);
    let mut by_metric: Vec<(String, f64, Scope)> = got
        .iter()
        .map(|s| (s.metric.to_string(), s.value, s.scope.clone()))
        .collect();
    by_metric.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        by_metric,
        vec![
            ("app.after_long".to_string(), 1.0, Scope::System),
            ("app.last".to_string(), 2.5, Scope::System),
            ("app.queue_len".to_string(), 7.0, Scope::System),
            (
                "app.rtt_us".to_string(),
                153.0,
                Scope::Process { pid: 1234 }
            ),
        ]
    );
    // hw.cycles, five, pid:zz, the long line, the non-UTF-8 line.
    assert_eq!(app.stats().rejected, 5);

    // A live socket is never taken over.
    let e = AppMetrics::start(&[AppSource::Socket { path: path.clone() }])
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("another process is listening"),
        "{e}"
    );
    drop((a, b));
    app.stop();
    assert!(!path.exists(), "socket removed on stop");
}

#[test]
fn socket_refuses_to_replace_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-socket");
    std::fs::write(&path, "precious").unwrap();
    let e = AppMetrics::start(&[AppSource::Socket { path: path.clone() }])
        .err()
        .unwrap();
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
}

fn command(script: &str, every_ms: u64, timeout_ms: Option<u64>) -> AppSource {
    AppSource::Command {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        every_ms,
        metric: "app.latency_ms".parse().unwrap(),
        scope: "cpu:1".parse().unwrap(),
        timeout_ms,
    }
}

#[test]
fn command_output_first_number_is_sampled_periodically() {
    let mut app = AppMetrics::start(&[command("echo latency: 42.5 ms p99 80", 20, None)]).unwrap();
    let got = collect_until(&mut app, |s, _| s.len() >= 3);
    for s in &got {
        assert_eq!((s.metric.as_str(), s.value), ("app.latency_ms", 42.5));
        assert_eq!(s.scope, Scope::Cpu { cpu: 1 });
    }
    assert!(got
        .windows(2)
        .all(|w| w[0].time.mono_ns < w[1].time.mono_ns));
    assert_eq!(app.stats().command_failures, 0);
}

#[test]
fn failing_commands_are_counted_not_fatal() {
    let mut app = AppMetrics::start(&[
        command("echo no number here", 20, None),
        command("echo 5; exit 3", 20, None),
        AppSource::Command {
            argv: vec!["/nonexistent/hwqos-no-such-program".into()],
            every_ms: 20,
            metric: "app.x".parse().unwrap(),
            scope: Scope::System,
            timeout_ms: None,
        },
    ])
    .unwrap();
    collect_until(&mut app, |_, st| st.command_failures >= 6);
    assert!(app.drain().is_empty());
}

#[test]
fn hanging_command_is_killed_with_its_children() {
    let tag = format!("31.{}", std::process::id());
    // sh forks sleep (it is not the last command), so killing only sh would leave it.
    let script = format!("sleep {tag}; echo 1");
    let mut app = AppMetrics::start(&[command(&script, 20, Some(100))]).unwrap();
    collect_until(&mut app, |_, st| st.command_failures >= 1);
    app.stop();
    let leftover = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| String::from_utf8_lossy(&c).contains(&tag));
    assert!(!leftover, "the hanging command's child survived");
}

#[test]
fn socket_serves_at_most_max_clients_at_once() {
    use hwqos_pmu::appmetric::MAX_CLIENTS;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.sock");
    let mut app = AppMetrics::start(&[AppSource::Socket { path: path.clone() }]).unwrap();
    let mut clients: Vec<UnixStream> = (0..MAX_CLIENTS + 6)
        .map(|_| UnixStream::connect(&path).unwrap())
        .collect();
    collect_until(&mut app, |_, st| st.refused_clients == 6);
    for (i, c) in clients.iter_mut().enumerate() {
        // Writes to refused connections fail or go nowhere; that is the point.
        let _ = c.write_all(format!("app.client {i}\n").as_bytes());
    }
    let got = collect_until(&mut app, |s, _| s.len() >= MAX_CLIENTS);
    let mut seen: Vec<f64> = values(&got);
    seen.sort_by(f64::total_cmp);
    assert_eq!(seen, (0..MAX_CLIENTS).map(|i| i as f64).collect::<Vec<_>>());
    assert_eq!(app.stats().refused_clients, 6);
}
