//! Affinity applies to threads a process creates after it was pinned (they
//! inherit the mask of the thread that creates them), read back from the
//! kernel for every thread.

use hwqos_sched::proc::{pin_process, thread_affinity, threads};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_ENV: &str = "HWQOS_SCHED_AFFINITY_CHILD";

/// Re-executed as the child: waits, then starts three more threads.
#[test]
fn child_spawns_threads_late() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    std::thread::sleep(Duration::from_millis(500));
    let handles: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(|| std::thread::sleep(Duration::from_secs(30))))
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn threads_created_after_pinning_inherit_the_affinity() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let online = hwqos_pmu::target::online_cpus(Path::new("/sys"));
    let cpu = *online.last().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_spawns_threads_late",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let proc_root = Path::new("/proc");
    let before = threads(proc_root, pid).unwrap();
    let report = pin_process(proc_root, pid, &[cpu]).unwrap();
    assert_eq!(report.verified.len(), before.len());
    let mut all = Vec::new();
    for _ in 0..500 {
        all = threads(proc_root, pid).unwrap_or_default();
        if all.len() >= before.len() + 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        all.len() >= before.len() + 3,
        "the child started no threads: {all:?}"
    );
    for tid in &all {
        assert_eq!(thread_affinity(*tid).unwrap(), vec![cpu], "thread {tid}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
