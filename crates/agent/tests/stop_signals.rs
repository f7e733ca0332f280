//! StopSignals in a process of its own (harness = false: the test harness's
//! threads would not have the mask, and a SIGTERM would kill them all).
//! Known answers: SIGHUP sets only the reload request, SIGTERM and SIGINT
//! set the stop flag, the process survives all three; a child inherits the
//! blocked mask unless started through `clear_signal_mask_on_exec`.

use hwqos_agent::lifecycle::StopSignals;
use std::time::{Duration, Instant};

fn wait(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn blocked_mask(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .expect("SigBlk line");
    u64::from_str_radix(line.trim(), 16).unwrap()
}

fn raise(sig: libc::c_int) {
    // SAFETY: kill(2) on this process; no memory is involved.
    assert_eq!(unsafe { libc::kill(libc::getpid(), sig) }, 0);
}

fn main() {
    let signals = StopSignals::install().expect("installing");
    let again = StopSignals::install().expect("a second install");
    let bit = |sig: libc::c_int| 1u64 << (sig - 1);

    // Threads started now inherit the mask.
    let mask = std::thread::spawn(blocked_mask_of_thread).join().unwrap();
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        assert_ne!(mask & bit(sig), 0, "signal {sig} blocked in a new thread");
    }

    raise(libc::SIGHUP);
    wait("the reload request", || again.take_reload());
    assert!(!signals.stop_requested(), "SIGHUP is not a stop");
    assert!(!signals.take_reload(), "the request was taken once");

    // A child started through hwqos_core::process blocks none of them.
    // A plain Command keeps the blocked mask across exec; the helper clears it.
    let mut plain = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let plain_mask = blocked_mask(plain.id());
    plain.kill().unwrap();
    plain.wait().unwrap();
    assert_ne!(plain_mask & bit(libc::SIGTERM), 0, "std keeps the mask");
    let mut cmd = std::process::Command::new("sleep");
    cmd.arg("30");
    let mut child = hwqos_core::process::clear_signal_mask_on_exec(&mut cmd)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let child_mask = blocked_mask(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        child_mask & (bit(libc::SIGTERM) | bit(libc::SIGINT) | bit(libc::SIGHUP)),
        0,
        "a child blocks none of the three"
    );

    raise(libc::SIGTERM);
    wait("the stop flag after SIGTERM", || signals.stop_requested());
    assert!(again.stop_flag().load(std::sync::atomic::Ordering::SeqCst));
    raise(libc::SIGINT);
    std::thread::sleep(Duration::from_millis(50));
    assert!(signals.stop_requested());
    println!(
        "stop_signals: SIGHUP → reload, SIGTERM/SIGINT → stop, process alive, child unmasked: ok"
    );
}

fn blocked_mask_of_thread() -> u64 {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .expect("SigBlk line");
    u64::from_str_radix(line.trim(), 16).unwrap()
}
