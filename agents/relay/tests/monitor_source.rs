//! One sampler per node: with `hwqos-monitor` running, the relay's throttle
//! reads CPU utilization from the monitor's live API and the relay holds no
//! perf_event descriptors; without it, the throttle reads `/proc/stat` as
//! before, and still no perf_event descriptors.
//!
//! The monitor is the binary cargo built next to the relay's
//! (`target/<profile>/hwqos-monitor`); the test asks cargo to build it
//! first (a no-op when it is fresh), since another package's binary is not
//! built for this package's tests.

use hwqos_testsupport::{http_get, perf_event_fds, wait_for};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const RELAY: &str = env!("CARGO_BIN_EXE_hwqos-relay");
const GENEROUS: Duration = Duration::from_secs(60);

/// Kills the child on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn monitor_binary() -> PathBuf {
    let dir = Path::new(RELAY).parent().expect("target dir");
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build.args(["build", "-p", "hwqos-monitor", "--bin", "hwqos-monitor"]);
    if dir.ends_with("release") {
        build.arg("--release");
    }
    let status = build.status().expect("run cargo build for hwqos-monitor");
    assert!(status.success(), "cargo build -p hwqos-monitor failed");
    let bin = dir.join("hwqos-monitor");
    assert!(bin.exists(), "{} missing after the build", bin.display());
    bin
}

fn start_monitor(dir: &Path) -> (Proc, PathBuf) {
    let socket = dir.join("monitor.sock");
    let config = dir.join("monitor.toml");
    std::fs::write(
        &config,
        format!(
            "rate_hz = 10\nprocfs = true\nevent_sets = [[\"sw.task_clock\", \"sw.page_faults\"]]\n\n\
             [output]\ndir = {:?}\n\n[api]\nsocket = {socket:?}\n\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
            dir.join("out")
        ),
    )
    .unwrap();
    let child = Command::new(monitor_binary())
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn hwqos-monitor");
    let mut m = Proc(child);
    wait_for("the monitor's socket", GENEROUS, || {
        if let Ok(Some(s)) = m.0.try_wait() {
            panic!("hwqos-monitor exited early: {s}");
        }
        hwqos_api::ApiClient::connect(&socket).is_ok()
    });
    (m, socket)
}

/// Starts the relay with `monitor_socket`; returns it and its metrics address.
fn start_relay(dir: &Path, monitor_socket: &Path) -> (Proc, String) {
    let config = dir.join("relay.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nconnect = \"127.0.0.1:9\"\ncpu_target = 0.8\n\
             monitor_socket = {monitor_socket:?}\n[metrics]\nlisten = \"127.0.0.1:0\"\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(RELAY)
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hwqos-relay");
    let stderr = child.stderr.take().unwrap();
    let relay = Proc(child);
    let mut metrics = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if let Some(a) = line.strip_prefix("metrics on ") {
            metrics = Some(a.to_string());
            break;
        }
    }
    (
        relay,
        metrics.expect("the relay printed its metrics address"),
    )
}

/// The `source` label of `hwqos_relay_throttle_source_info`.
fn throttle_source(metrics: &str) -> Option<String> {
    let body = http_get(metrics, "/metrics").ok()?.body;
    let line = body
        .lines()
        .find(|l| l.starts_with("hwqos_relay_throttle_source_info{"))?;
    let rest = line.split("source=\"").nth(1)?;
    Some(rest.split('"').next()?.to_string())
}

#[test]
fn with_the_monitor_the_throttle_reads_its_live_api_and_opens_no_counters() {
    let dir = tempfile::tempdir().unwrap();
    let (_monitor, socket) = start_monitor(dir.path());
    let (relay, metrics) = start_relay(dir.path(), &socket);
    // The shared throttle reads on the first refill; the reader thread
    // subscribes at start: wait until the monitor is the source.
    wait_for("the throttle to read the monitor", GENEROUS, || {
        throttle_source(&metrics).as_deref() == Some("monitor")
    });
    assert_eq!(perf_event_fds(relay.0.id()), Some(0));
}

#[test]
fn without_the_monitor_the_throttle_reads_proc_stat_and_opens_no_counters() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("no-monitor.sock");
    let (relay, metrics) = start_relay(dir.path(), &absent);
    wait_for("the throttle's first reading", GENEROUS, || {
        throttle_source(&metrics).as_deref() == Some("procfs")
    });
    assert_eq!(perf_event_fds(relay.0.id()), Some(0));
}
