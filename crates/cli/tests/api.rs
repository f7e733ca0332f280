//! `hwqos api` against a real `hwqos-monitor` (software events, so it runs
//! on nodes without a PMU): status, a window, a subscription and the event
//! sets printed as the live API's JSON lines, and the errors a user meets
//! (no monitor, a bad pattern). Every wait is for a condition.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const HWQOS: &str = env!("CARGO_BIN_EXE_hwqos");

/// The monitor binary, built in the same target directory (`cargo test
/// --workspace` builds it; a lone `cargo test -p hwqos-cli` builds it here).
fn monitor_bin() -> PathBuf {
    let bin = Path::new(HWQOS).with_file_name("hwqos-monitor");
    if !bin.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "hwqos-monitor", "--bin", "hwqos-monitor"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("running cargo build -p hwqos-monitor");
        assert!(status.success(), "cargo build -p hwqos-monitor failed");
    }
    assert!(bin.exists(), "{} not built", bin.display());
    bin
}

struct Monitor {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `hwqos-monitor` at 20 Hz, per CPU, software events, its live API on a
/// socket of its own; returns once a window holds two frames.
fn start_monitor() -> Monitor {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("monitor.sock");
    let config = dir.path().join("monitor.toml");
    std::fs::write(
        &config,
        format!(
            "rate_hz = 20\nper_cpu = true\nprocfs = false\n\
             event_sets = [[\"sw.task_clock\", \"sw.context_switches\"]]\n\
             [output]\ndir = {:?}\n[api]\nsocket = {socket:?}\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
            dir.path().join("out")
        ),
    )
    .unwrap();
    let child = Command::new(monitor_bin())
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.path().join("monitor.log")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let mut m = Monitor { child, dir, socket };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(s)) = m.child.try_wait() {
            panic!(
                "hwqos-monitor exited with {s}: {}",
                std::fs::read_to_string(m.dir.path().join("monitor.log")).unwrap_or_default()
            );
        }
        if m.socket.exists() {
            let out = api(&m.socket, &["window", "--frames", "2"]);
            if out.status.success() && lines(&out).len() == 3 {
                return m;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the monitor's API never held 2 frames"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn api(socket: &Path, args: &[&str]) -> Output {
    Command::new(HWQOS)
        .arg("api")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap()
}

/// Standard output as JSON lines.
fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn ok(out: Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "hwqos api failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines(&out)
}

#[test]
fn status_window_subscribe_and_event_sets_print_the_apis_json_lines() {
    let m = start_monitor();

    let status = ok(api(&m.socket, &["--hello", "status"]));
    assert_eq!(status.len(), 2, "{status:?}");
    assert_eq!(status[0]["type"], "hello");
    assert_eq!(status[0]["schema"], "hwqos.api/1");
    assert_eq!(status[0]["rate_hz"], 20.0);
    assert_eq!(status[1]["type"], "status");
    assert!(
        status[1]["frames_sampled"].as_u64().is_some(),
        "{}",
        status[1]
    );

    // A window: at most 3 frames, oldest first, filtered, then the end line
    // with their count.
    let w = ok(api(
        &m.socket,
        &[
            "window",
            "--frames",
            "3",
            "--scope",
            "cpu:*",
            "--metric",
            "sw.task_clock",
        ],
    ));
    let (end, frames) = w.split_last().unwrap();
    assert_eq!(end["type"], "end");
    assert_eq!(end["count"].as_u64(), Some(frames.len() as u64));
    assert!((2..=3).contains(&frames.len()), "{w:?}");
    let seqs: Vec<u64> = frames
        .iter()
        .map(|f| f["frame"]["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|s| s[0] < s[1]), "{seqs:?}");
    let mut samples = 0;
    for f in frames {
        assert_eq!(f["type"], "frame");
        for s in f["frame"]["samples"].as_array().unwrap() {
            assert_eq!(s["scope"]["kind"], "cpu", "{s}");
            assert_eq!(s["metric"], "sw.task_clock", "{s}");
            // A counter: the scaled value and its raw reading.
            assert!(s["counter"]["raw"].as_u64().is_some(), "{s}");
            samples += 1;
        }
    }
    assert!(samples > 0, "no sw.task_clock samples: {w:?}");

    // A subscription: exactly --count frames, newer than the window's, then
    // the command ends by itself.
    let t = Instant::now();
    let sub = ok(api(
        &m.socket,
        &["subscribe", "--count", "2", "--metric", "sw.*"],
    ));
    assert_eq!(sub.len(), 2, "{sub:?}");
    let s0 = sub[0]["frame"]["seq"].as_u64().unwrap();
    let s1 = sub[1]["frame"]["seq"].as_u64().unwrap();
    assert!(
        s0 > *seqs.last().unwrap() && s1 > s0,
        "{s0} {s1} after {seqs:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(20));
    for f in &sub {
        for s in f["frame"]["samples"].as_array().unwrap() {
            assert!(s["metric"].as_str().unwrap().starts_with("sw."), "{s}");
        }
    }

    let sets = ok(api(&m.socket, &["event-sets"]));
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0]["type"], "event_sets");
    assert_eq!(
        sets[0]["sets"],
        serde_json::json!([["sw.task_clock", "sw.context_switches"]])
    );
}

#[test]
fn no_monitor_and_bad_patterns_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.sock");
    let out = api(&missing, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect to the monitor at") && err.contains("none.sock"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    // A bad pattern is a usage error before any connection.
    let out = api(&missing, &["subscribe", "--metric", "hw*x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid metric pattern `hw*x`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = api(&missing, &["--timeout", "-1", "status"]);
    assert_eq!(out.status.code(), Some(2));
}
