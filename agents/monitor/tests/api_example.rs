//! `crates/api/examples/subscribe.rs` (issue 23) against a real monitor: the
//! example connects, reads the status and prints frames of software metrics.
//! The example binary is built by `cargo test --workspace` (cargo builds every
//! example of the packages it tests); `cargo test -p hwqos-monitor --test
//! api_example` alone needs `cargo build -p hwqos-api --examples` first.

mod common;

use common::{Running, SW_SETS};
use std::path::PathBuf;
use std::process::Command;

/// `target/debug/examples/NAME` of hwqos-api.
fn example(name: &str) -> PathBuf {
    hwqos_testsupport::example_path("hwqos-api", name)
}

#[test]
fn subscribe_example_prints_frames_of_a_running_monitor() {
    let m = Running::start(&format!("rate_hz = 20\nper_cpu = true\n{SW_SETS}\n"), "");
    let out = Command::new(example("subscribe"))
        .arg(&m.socket)
        .arg("4")
        .output()
        .expect("run the subscribe example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("at 20 Hz"), "{stdout}");
    assert!(stdout.contains("sw.page_faults"), "event sets: {stdout}");
    let seqs: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("frame seq="))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs.len(), 4, "{stdout}");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // per_cpu: every frame but the monitor's first (seq 0: counting starts)
    // carries the software metrics of every CPU.
    for l in stdout
        .lines()
        .filter(|l| l.starts_with("frame ") && !l.starts_with("frame seq=0 "))
    {
        let n: usize = l
            .split("samples=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(n > 0, "a frame without software samples: {l}");
    }
}

#[test]
fn subscribe_example_without_a_monitor_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(example("subscribe"))
        .arg(dir.path().join("none.sock"))
        .output()
        .expect("run the subscribe example");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no monitor to subscribe to"), "{stderr}");
}
