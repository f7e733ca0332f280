//! The userspace quota backend against real software counters: a child that
//! page-faults far faster than its quota is held to the quota in every period
//! (the kernel's own per-period counts are the oracle).

use hwqos_pmu::event::perf_type;
use hwqos_pmu::EventAttr;
use hwqos_sched::backend::userspace::{
    OverflowRoute, ThrottleMethod, UserspaceBackend, UserspaceOptions,
};
use hwqos_sched::backend::{EventQuota, QuotaBackend, QuotaScope, QuotaSet};
use hwqos_sched::leech::{self, LeechKind, LeechSpec, DUTY_FULL};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

const CHILD_ENV: &str = "HWQOS_SCHED_TEST_CHILD";

/// Re-executed as the faulting child: faults until killed.
#[test]
fn child_faulter() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let spec = LeechSpec {
        kind: LeechKind::Faults,
        working_set: 256 * 4096,
        stride: 64,
    };
    leech::run(
        &spec,
        &AtomicU64::new(DUTY_FULL),
        &AtomicBool::new(false),
        &AtomicU64::new(0),
    )
    .unwrap();
}

/// minflt of a process (field 10 of /proc/PID/stat).
fn minor_faults(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(end) = s.rfind(')') else { return 0 };
    s[end + 2..]
        .split_whitespace()
        .nth(7)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn spawn_faulter() -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_faulter",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn page_faults(quota: u64) -> QuotaSet {
    QuotaSet {
        period: Duration::from_millis(10),
        events: vec![EventQuota {
            name: "sw.page_faults".into(),
            attr: EventAttr {
                type_: perf_type::SOFTWARE,
                config: 2, // PERF_COUNT_SW_PAGE_FAULTS
                config1: 0,
                config2: 0,
                modes: Default::default(),
            },
            quota,
        }],
        // These tests are about the routes' precision with one busy thread,
        // where both scopes mean the same; thread scope is the one that
        // stops at exactly the quota (process scope stops short of it by
        // fewer events than threads). Process scope: tests/process_quota.rs.
        scope: QuotaScope::Thread,
    }
}

fn run_periods(route: OverflowRoute, quota: u64, periods: u64) -> Vec<u64> {
    let mut child = spawn_faulter();
    let pid = child.id();
    // Let the child start faulting (its test harness starts first).
    std::thread::sleep(Duration::from_millis(300));
    let mut backend = UserspaceBackend::start(
        UserspaceOptions {
            route,
            method: ThrottleMethod::Sigstop,
            ..UserspaceOptions::default()
        },
        None,
    )
    .unwrap();
    backend.enforce(pid, &page_faults(quota)).unwrap();
    while backend.history(pid).len() < periods as usize + 1 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let history = backend.history(pid);
    let stats = backend.stats(pid).unwrap();
    backend.release(pid).unwrap();
    drop(backend);
    if let Some(status) = child.try_wait().unwrap() {
        panic!("the child exited during the run: {status}");
    }
    // Released: the child runs freely again (progress, not timing).
    let faults = || minor_faults(pid);
    let before = faults();
    let mut progressed = false;
    for _ in 0..500 {
        if faults() > before + 10 * QUOTA {
            progressed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(progressed, "the child did not run again after release");
    assert_ne!(
        hwqos_sched::proc::task_state(std::path::Path::new("/proc"), pid),
        Some('T')
    );
    child.kill().unwrap();
    child.wait().unwrap();
    eprintln!(
        "{route:?}: stats {stats:?}; throttled periods {}",
        history.iter().filter(|p| p.throttled).count()
    );
    // The first period started mid-way: skip it.
    history[1..].iter().map(|p| p.used[0]).collect()
}

const QUOTA: u64 = 400;

/// Returns the per-period counts after checking that the child, which faults
/// far faster than the quota, reached it in most periods.
fn throttled_run(route: OverflowRoute, periods: u64) -> Vec<u64> {
    let used = run_periods(route, QUOTA, periods);
    let max = *used.iter().max().unwrap();
    let mean = used.iter().sum::<u64>() as f64 / used.len() as f64;
    let reached = used.iter().filter(|&&u| u >= QUOTA).count();
    eprintln!(
        "{route:?}: {} periods, max {max}, mean {mean:.1} page faults per period (quota {QUOTA}), quota reached in {reached}",
        used.len()
    );
    assert!(
        reached > used.len() / 2,
        "quota reached in only {reached} periods"
    );
    used
}

/// The acceptance bound: with the overflow stopping the task in the kernel,
/// no period exceeds the quota by more than 2 % over 1,000 periods.
#[test]
fn direct_route_holds_page_faults_to_the_quota_in_every_period() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let used = throttled_run(OverflowRoute::Direct, 1000);
    let max = *used.iter().max().unwrap();
    assert!(
        max as f64 <= QUOTA as f64 * 1.02,
        "a period used {max} page faults with a quota of {QUOTA}"
    );
}

/// Through the agent the overshoot is the agent's wake-up latency times the
/// fault rate (measured in docs/experiments/sra.md, not asserted). Asserted:
/// it throttles in most periods (inside `throttled_run`), and after release
/// the child is not stopped and keeps faulting (kernel fault counts).
#[test]
fn agent_route_throttles_and_releases() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let used = throttled_run(OverflowRoute::Agent, 200);
    assert!(used.iter().sum::<u64>() > 0);
}

/// MemGuard-style lending: an idle process (`sleep`) donates the unused part
/// of its page-fault budget, and a faulting process with the same quota
/// borrows it, so the faulter's periods exceed its own quota while the pair
/// stays within their summed quotas. Kernel per-period counts as the oracle.
#[test]
fn lending_moves_unused_budget_to_the_busy_process() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let mut idle = Command::new("sleep").arg("30").spawn().unwrap();
    let mut busy = spawn_faulter();
    std::thread::sleep(Duration::from_millis(300));
    let mut backend = UserspaceBackend::start(
        UserspaceOptions {
            route: OverflowRoute::Agent,
            method: ThrottleMethod::Sigstop,
            lending: true,
            ..UserspaceOptions::default()
        },
        None,
    )
    .unwrap();
    backend.enforce(idle.id(), &page_faults(QUOTA)).unwrap();
    backend.enforce(busy.id(), &page_faults(QUOTA)).unwrap();
    while backend.history(busy.id()).len() < 201 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let used: Vec<u64> = backend.history(busy.id())[2..]
        .iter()
        .map(|p| p.used[0])
        .collect();
    let borrowed = backend.stats(busy.id()).unwrap().events[0].borrowed;
    backend.release_all();
    drop(backend);
    for c in [&mut idle, &mut busy] {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    let mut sorted = used.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    eprintln!("lending: busy process median {median} per period (own quota {QUOTA}), borrowed {borrowed} in total");
    assert!(borrowed > 0);
    // The idle process donates 400 − 400/8 = 350 per period: the busy one
    // runs well past its own quota in the typical period.
    assert!(median as f64 > QUOTA as f64 * 1.3, "median {median}");
}
