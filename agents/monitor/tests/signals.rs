//! Signals: SIGHUP reloads without losing the database (and a rejected config
//! keeps the running one), SIGUSR1 flushes files that read back, SIGTERM and
//! SIGINT shut down cleanly.

mod common;

use common::{config_text, Running, SW_SETS};
use hwqos_core::recording::{self, CounterClass, RecordedBackend};
use hwqos_pmu::api::FrameFilter;
use hwqos_testsupport::wait_for;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

fn oldest_seq(m: &Running) -> u64 {
    let frames = m
        .client()
        .window(None, None, FrameFilter::default())
        .unwrap();
    frames.first().expect("frames in the database").seq
}

#[test]
fn sighup_reloads_and_keeps_the_database() {
    let m = Running::start(&format!("rate_hz = 100\n{SW_SETS}\n"), "");
    let mut c = m.client();
    wait_for("20 frames", LIMIT, || {
        c.status().unwrap().frames_in_db >= 20
    });
    let before = c.status().unwrap();
    let first = oldest_seq(&m);

    // A new rate and new event sets: the sampler is rebuilt, the database kept.
    let new = config_text(
        "rate_hz = 50\nevent_sets = [[\"sw.page_faults\"]]\n",
        &m.socket,
        &m.out,
        "",
    );
    std::fs::write(&m.config, new).unwrap();
    m.signal(libc::SIGHUP);
    wait_for("the reload", LIMIT, || c.status().unwrap().reloads == 1);
    let after = c.status().unwrap();
    assert_eq!(after.rate_hz, 50.0);
    assert_eq!(after.event_sets, vec![vec!["sw.page_faults".to_string()]]);
    assert!(after.frames_in_db >= before.frames_in_db, "database shrank");
    assert_eq!(oldest_seq(&m), first, "the oldest frame is still there");
    // Sampling goes on with sequence numbers continuing.
    let seq = after.last_seq.unwrap();
    wait_for("new frames", LIMIT, || {
        c.status().unwrap().last_seq.unwrap() > seq
    });

    // A broken config is rejected: the running configuration stays.
    std::fs::write(&m.config, "rate_hz = 0\n").unwrap();
    m.signal(libc::SIGHUP);
    wait_for("the rejection to be logged", LIMIT, || {
        m.log().contains("reload rejected")
    });
    let kept = c.status().unwrap();
    assert_eq!(kept.reloads, 1);
    assert_eq!(kept.rate_hz, 50.0);
    assert!(
        m.log().contains("rate_hz"),
        "the log names the bad key: {}",
        m.log()
    );
    let seq = kept.last_seq.unwrap();
    wait_for("sampling after the rejection", LIMIT, || {
        c.status().unwrap().last_seq.unwrap() > seq
    });
}

#[test]
fn sigusr1_flushes_files_that_read_back() {
    let m = Running::start(&format!("rate_hz = 100\n{SW_SETS}\n"), "");
    let mut c = m.client();
    wait_for("10 frames", LIMIT, || {
        c.status().unwrap().frames_in_db >= 10
    });
    assert!(m.outputs("jsonl").is_empty());
    m.signal(libc::SIGUSR1);
    wait_for("the flushed files", LIMIT, || {
        m.outputs("jsonl").len() == 1 && m.outputs("csv").len() == 1
    });

    let rec = recording::read_recording(&m.outputs("jsonl")[0]).unwrap();
    assert_eq!(rec.header.schema, recording::SCHEMA);
    assert_eq!(rec.header.rate_hz, 100.0);
    assert_eq!(rec.header.backend, RecordedBackend::Perf);
    assert_eq!(rec.header.counters, CounterClass::Software);
    assert!(rec.frames.len() >= 10, "{} frames", rec.frames.len());
    assert!(rec.frames.windows(2).all(|w| w[1].seq > w[0].seq));
    let csv = recording::read_csv(&m.outputs("csv")[0]).unwrap();
    assert!(csv.metrics.iter().any(|m| m.as_str() == "sw.task_clock"));
    // One row per scope per tick.
    let rows: usize = rec.frames.iter().map(|f| f.scopes().len()).sum();
    assert_eq!(csv.rows.len(), rows);
    // Written atomically: no temporary files left.
    let names: Vec<_> = std::fs::read_dir(&m.out).unwrap().collect();
    assert_eq!(names.len(), 2, "{names:?}");

    // The API flush does the same.
    let paths = c.flush().unwrap();
    assert_eq!(paths.len(), 2);
    assert!(paths.iter().all(|p| p.exists()));
}

#[test]
fn sigterm_exits_cleanly_removes_the_socket_and_flushes() {
    let mut m = Running::start(&format!("rate_hz = 50\n{SW_SETS}\n"), "");
    let mut c = m.client();
    wait_for("5 frames", LIMIT, || c.status().unwrap().frames_in_db >= 5);
    drop(c);
    m.signal(libc::SIGTERM);
    let status = m.wait_exit();
    assert!(status.success(), "exit status {status}; log: {}", m.log());
    assert!(!m.socket.exists(), "socket not removed");
    assert_eq!(m.outputs("jsonl").len(), 1, "final flush missing");
}

#[test]
fn sigint_without_flush_on_exit() {
    let mut m = Running::start(&format!("rate_hz = 50\n{SW_SETS}\n"), "");
    // Turn the final flush off through a reload, then interrupt.
    let text = config_text(&format!("rate_hz = 50\n{SW_SETS}\n"), &m.socket, &m.out, "")
        .replace("[output]\n", "[output]\nflush_on_exit = false\n");
    std::fs::write(&m.config, text).unwrap();
    let mut c = m.client();
    m.signal(libc::SIGHUP);
    wait_for("the reload", LIMIT, || c.status().unwrap().reloads == 1);
    drop(c);
    m.signal(libc::SIGINT);
    let status = m.wait_exit();
    assert!(status.success(), "exit status {status}");
    assert!(!m.socket.exists());
    assert!(
        m.outputs("jsonl").is_empty(),
        "flushed although flush_on_exit = false"
    );
}
