//! Per-process quotas of the userspace backend against real kernel software
//! counters (no PMU needed):
//!
//! - a child with four spinning threads, the fourth started after
//!   enforcement began, held to a per-process `sw.task_clock` quota: the
//!   backend's per-period sums (the kernel's counts) within 2 % of the quota,
//!   and the scheduler's own run time of every thread
//!   (`/proc/PID/task/TID/schedstat`, an oracle independent of perf) agreeing
//!   with those sums, so no thread went uncounted;
//! - the same child under `quota_scope = thread` runs far past the quota
//!   (the contrast: the per-thread bound lets the sum reach threads × quota);
//! - two events per quota set: whichever is used up first throttles.
//!
//! No assertion on elapsed time; the statistics are over many periods.

use hwqos_pmu::event::perf_type;
use hwqos_pmu::EventAttr;
use hwqos_sched::backend::userspace::{
    OverflowRoute, ThrottleMethod, UserspaceBackend, UserspaceOptions,
};
use hwqos_sched::backend::{EventQuota, PeriodUsage, QuotaBackend, QuotaScope, QuotaSet};
use hwqos_sched::leech::{self, LeechKind, LeechSpec, DUTY_FULL};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The tests here measure CPU-bound children on a 2-core machine: one at a
/// time, or they take each other's CPU.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const CHILD_ENV: &str = "HWQOS_SCHED_PROCESS_QUOTA_CHILD";
const LATE_FILE_ENV: &str = "HWQOS_SCHED_LATE_THREAD_FILE";

fn spin_forever() {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

/// Re-executed as the child. `spin`: three spinning threads named `spin`,
/// and a fourth once the file named by `LATE_FILE_ENV` exists. `faults`:
/// one page-faulting thread.
#[test]
fn child_process() {
    let Some(kind) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    if kind == "faults" {
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
        return;
    }
    let spawn = || {
        std::thread::Builder::new()
            .name("spin".into())
            .spawn(spin_forever)
            .unwrap()
    };
    for _ in 0..3 {
        spawn();
    }
    let late = PathBuf::from(std::env::var_os(LATE_FILE_ENV).unwrap());
    while !late.exists() {
        std::thread::sleep(Duration::from_millis(2));
    }
    spawn();
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn spawn_child(kind: &str, late_file: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, kind)
        .env(LATE_FILE_ENV, late_file)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn tids(pid: u32) -> Vec<u32> {
    hwqos_sched::proc::threads(Path::new("/proc"), pid).unwrap_or_default()
}

fn spinners(pid: u32) -> usize {
    tids(pid)
        .iter()
        .filter(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                .is_ok_and(|c| c.trim() == "spin")
        })
        .count()
}

/// The scheduler's run time of every thread of `pid`, ns (first field of
/// `/proc/PID/task/TID/schedstat`): the oracle, independent of perf.
fn run_time_ns(pid: u32) -> u64 {
    tids(pid)
        .iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/task/{t}/schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("gave up waiting for {what}");
}

fn sw(name: &str, config: u64, quota: u64) -> EventQuota {
    EventQuota {
        name: name.into(),
        attr: EventAttr {
            type_: perf_type::SOFTWARE,
            config,
            config1: 0,
            config2: 0,
            modes: Default::default(),
        },
        quota,
    }
}

/// `PERF_COUNT_SW_TASK_CLOCK`, ns.
fn task_clock(quota: u64) -> EventQuota {
    sw("sw.task_clock", 1, quota)
}

/// `PERF_COUNT_SW_PAGE_FAULTS`.
fn page_faults(quota: u64) -> EventQuota {
    sw("sw.page_faults", 2, quota)
}

fn backend(route: OverflowRoute) -> UserspaceBackend {
    UserspaceBackend::start(
        UserspaceOptions {
            route,
            method: ThrottleMethod::Sigstop,
            ..UserspaceOptions::default()
        },
        None,
    )
    .unwrap()
}

/// Releases `pid`, then checks it is not left stopped and runs again (its
/// run time grows), and kills it.
fn release_and_check(mut b: UserspaceBackend, mut child: Child) {
    let pid = child.id();
    b.release(pid).unwrap();
    drop(b);
    assert!(
        child.try_wait().unwrap().is_none(),
        "the child exited during the run"
    );
    let before = run_time_ns(pid);
    wait_for("the released child to run again", || {
        run_time_ns(pid) > before + 50_000_000
    });
    assert_ne!(
        hwqos_sched::proc::task_state(Path::new("/proc"), pid),
        Some('T')
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

const PERIOD: Duration = Duration::from_millis(100);
/// 10 ms of CPU per 100 ms period; the four spinners could use up to 200 ms
/// of CPU per period on this 2-core machine, so even a loaded machine leaves
/// them the quota (and the thread scope's 4 × quota needs only a fifth).
const QUOTA_NS: u64 = 10_000_000;

struct SpinRun {
    /// Per-period sums over all threads, from the second period on.
    used: Vec<u64>,
    /// Index in `used` of the first period after the late thread ran.
    late_from: usize,
    /// The scheduler's run time of the child over the enforced window, ns.
    oracle_ns: u64,
    /// The backend's counts over the same window (from the moment every
    /// counter was armed).
    counted_ns: u64,
}

/// Four spinning threads (the fourth started after enforcement began) under
/// a `sw.task_clock` quota of [`QUOTA_NS`] per [`PERIOD`].
fn spin_run(scope: QuotaScope, route: OverflowRoute, periods: usize) -> SpinRun {
    let dir = tempfile::tempdir().unwrap();
    let late_file = dir.path().join("late");
    let child = spawn_child("spin", &late_file);
    let pid = child.id();
    wait_for("three spinning threads", || spinners(pid) == 3);
    let mut b = backend(route);
    let quotas = QuotaSet {
        period: PERIOD,
        events: vec![task_clock(QUOTA_NS)],
        scope,
    };
    b.enforce(pid, &quotas).unwrap();
    // The oracle's window starts once every counter is armed: enforce opens
    // them thread by thread while the spinners run, uncounted (on a loaded
    // VM tens of ms of CPU, which once made the oracle 4 % above the count).
    let start_counted = b.stats(pid).unwrap().events[0].total;
    let start_ns = run_time_ns(pid);
    let late_at = periods / 4;
    wait_for("periods before the late thread", || {
        b.history(pid).len() >= late_at
    });
    std::fs::write(&late_file, "").unwrap();
    wait_for("the late thread", || spinners(pid) == 4);
    // It runs within a period: from the next complete one on, four threads.
    // (The child notices the file only while it is not throttled, so the
    // late thread may come several periods after `late_at`: the run lasts
    // until three quarters of `periods` have passed with four threads.)
    let late_from = b.history(pid).len() + 1;
    let end = periods.max(late_from + periods * 3 / 4);
    wait_for("the periods", || b.history(pid).len() > end);
    let history: Vec<PeriodUsage> = b.history(pid);
    // Each period lasts from renewal to renewal; on the deadline grid a
    // late renewal lengthens one period and shortens the next, so the
    // lengths average the configured period (a missed deadline adds one).
    let lengths: Vec<u64> = history[1..].iter().map(|p| p.length_ns).collect();
    assert!(lengths.iter().all(|&l| l > 0), "period lengths {lengths:?}");
    let mean = lengths.iter().sum::<u64>() as f64 / lengths.len() as f64;
    assert!(
        (mean / PERIOD.as_nanos() as f64 - 1.0).abs() < 0.05,
        "mean period length {mean} ns against {PERIOD:?}: {lengths:?}"
    );
    let counted_ns = b.stats(pid).unwrap().events[0].total - start_counted;
    let oracle_ns = run_time_ns(pid) - start_ns;
    release_and_check(b, child);
    let used: Vec<u64> = history[1..].iter().map(|p| p.used[0]).collect();
    SpinRun {
        used,
        late_from: late_from - 1,
        oracle_ns,
        counted_ns,
    }
}

/// |sum − quota| / quota of each period, sorted.
fn errors(used: &[u64], quota: u64) -> Vec<f64> {
    let mut e: Vec<f64> = used
        .iter()
        .map(|u| (*u as f64 - quota as f64).abs() / quota as f64)
        .collect();
    e.sort_by(f64::total_cmp);
    e
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[s.len() / 2]
}

/// The acceptance test: per-process scope holds the sum over four threads,
/// one of them started after enforcement began, to the quota.
///
/// Asserted, over at least 120 periods (the first, partial one left out),
/// 90 or more of them with the late thread: the sum within 2 % of the quota
/// (|sum − quota| / quota ≤ 0.02) in at least 98 % of the periods. Before
/// the fixes described in docs/sra.md about one period in ten was outside
/// (up to 90 × the quota); now most runs have none, and the exceptions are
/// single periods where interrupt work charged to one thread (softirqs run
/// on top of whatever thread is current) delayed both its stop and the
/// agent woken on its CPU. Also asserted: the scheduler's run
/// time of the child (schedstat, independent of perf) within 2 % of the
/// backend's count over the same window (an uncounted thread would add a
/// quarter); and the released child runs again, not stopped.
#[test]
fn process_scope_holds_four_threads_to_the_quota() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let _serial = serial();
    let r = spin_run(QuotaScope::Process, OverflowRoute::Direct, 120);
    let all = errors(&r.used, QUOTA_NS);
    let late = errors(&r.used[r.late_from..], QUOTA_NS);
    let (min, max) = (*r.used.iter().min().unwrap(), *r.used.iter().max().unwrap());
    eprintln!(
        "process scope, direct route: {} periods (late thread from {}), |sum-quota|/quota median {:.3} % p90 {:.3} % max {:.3} %; with the late thread median {:.3} % max {:.3} %; periods {min}..={max} ns (quota {QUOTA_NS}); schedstat {} ns vs counted {} ns",
        r.used.len(),
        r.late_from,
        100.0 * quantile(&all, 0.5),
        100.0 * quantile(&all, 0.9),
        100.0 * all.last().unwrap(),
        100.0 * quantile(&late, 0.5),
        100.0 * late.last().unwrap(),
        r.oracle_ns,
        r.counted_ns,
    );
    assert!(r.used.len() - r.late_from >= 90, "{}", r.late_from);
    let outside: Vec<(usize, u64)> = r
        .used
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, u)| u.abs_diff(QUOTA_NS) * 50 > QUOTA_NS)
        .collect();
    assert!(
        outside.len() * 50 <= r.used.len(),
        "more than 2 % of the periods outside quota ± 2 % (index, ns): {outside:?}"
    );
    let ratio = r.oracle_ns as f64 / r.counted_ns as f64;
    assert!(
        (0.98..=1.02).contains(&ratio),
        "schedstat {} ns vs counted {} ns",
        r.oracle_ns,
        r.counted_ns
    );
}

/// The contrast: with `quota_scope = thread` each thread may count the
/// quota, so the same four threads run far past it (median period above
/// 1.5 × quota; up to 4 × is possible), and the kernel's own run time
/// agrees with the counts (within 6 %: see below).
#[test]
fn thread_scope_lets_the_sum_reach_threads_times_quota() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let _serial = serial();
    let r = spin_run(QuotaScope::Thread, OverflowRoute::Direct, 40);
    let m = median(&r.used[r.late_from..]);
    eprintln!(
        "thread scope, direct route: median period {m} ns with four threads (quota {QUOTA_NS}, {:.2} × quota); schedstat {} ns vs counted {} ns",
        m as f64 / QUOTA_NS as f64,
        r.oracle_ns,
        r.counted_ns
    );
    assert!(m as f64 > 1.5 * QUOTA_NS as f64, "median {m}");
    // Thread scope has no mid-period rounds: the late thread is counted from
    // the next period boundary on, so up to a period of its run time is not.
    let ratio = r.oracle_ns as f64 / r.counted_ns as f64;
    assert!((0.98..=1.06).contains(&ratio), "ratio {ratio}");
}

/// The agent route with process scope: every round, the last included,
/// goes through the agent, so a period's overshoot is the agent's wake-up
/// latency times the event rate — small on an idle machine, tens of percent
/// in periods when this 2-core VM is loaded (docs/sra.md). Asserted what
/// holds under load: the run-time oracle agrees with the counts (no thread
/// uncounted) and the median period stays below 1.5 × quota, far from the
/// 4 × the thread scope allows; the quantiles are printed.
#[test]
#[ignore = "the agent route's overshoot is the agent's wake-up latency times the event rate: on a loaded 2-core VM whole runs go bad (median period up to 1.6 x quota, before and after the direct-route fixes of docs/sra.md); run with --ignored"]
fn process_scope_on_the_agent_route() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let _serial = serial();
    let r = spin_run(QuotaScope::Process, OverflowRoute::Agent, 80);
    let e = errors(&r.used, QUOTA_NS);
    let m = median(&r.used);
    eprintln!(
        "process scope, agent route: |sum-quota|/quota median {:.3} % p90 {:.3} % max {:.3} %; median period {m} ns; schedstat {} ns vs counted {} ns",
        100.0 * quantile(&e, 0.5),
        100.0 * quantile(&e, 0.9),
        100.0 * e.last().unwrap(),
        r.oracle_ns,
        r.counted_ns
    );
    assert!(m as f64 <= 1.5 * QUOTA_NS as f64, "median {m}");
    let ratio = r.oracle_ns as f64 / r.counted_ns as f64;
    assert!((0.98..=1.02).contains(&ratio), "ratio {ratio}");
}

/// Two events in one quota set: the process is throttled by whichever is
/// used up first. A page-faulting child under {task_clock, page_faults}:
/// with a tight fault quota and a loose CPU quota the faults event binds
/// (its median period at the quota, overflows counted on it, the CPU event
/// well below its quota), and the other way round with a tight CPU quota.
/// Both scopes, direct route.
#[test]
fn any_one_of_two_events_throttles() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    for scope in [QuotaScope::Process, QuotaScope::Thread] {
        // (task_clock ns, page faults) per 40 ms, and which one binds. The
        // CPU quota is 10 ms: the task clock's overflow comes from an
        // hrtimer, tens of µs late on this loaded VM, under 1 % of that.
        for (cpu, faults, binding) in [(39_000_000, 1200, 1), (10_000_000, 100_000_000, 0)] {
            let child = spawn_child("faults", &dir.path().join("unused"));
            let pid = child.id();
            std::thread::sleep(Duration::from_millis(300));
            let mut b = backend(OverflowRoute::Direct);
            let quotas = QuotaSet {
                period: Duration::from_millis(40),
                events: vec![task_clock(cpu), page_faults(faults)],
                scope,
            };
            b.enforce(pid, &quotas).unwrap();
            wait_for("the periods", || b.history(pid).len() > 60);
            let history = b.history(pid);
            let stats = b.stats(pid).unwrap();
            release_and_check(b, child);
            let periods = &history[1..];
            let col = |i: usize| periods.iter().map(|p| p.used[i]).collect::<Vec<u64>>();
            let quota = [cpu, faults];
            let other = 1 - binding;
            let (mb, mo) = (median(&col(binding)), median(&col(other)));
            let throttled = periods.iter().filter(|p| p.throttled).count();
            eprintln!(
                "{scope:?}: quotas {quota:?}: median {} of {} (binding), {} of {}; throttled {throttled}/{}; overflows {:?}",
                mb,
                quota[binding],
                mo,
                quota[other],
                periods.len(),
                stats.events.iter().map(|e| e.overflows).collect::<Vec<_>>()
            );
            let err = (mb as f64 - quota[binding] as f64).abs() / quota[binding] as f64;
            assert!(err <= 0.02, "{scope:?}: binding event median {mb}");
            assert!(
                (mo as f64) < 0.8 * quota[other] as f64,
                "{scope:?}: the other event's median {mo}"
            );
            assert!(throttled > periods.len() / 2, "throttled in {throttled}");
            assert!(stats.events[binding].overflows > periods.len() as u64 / 2);
            assert!(stats.events[other].overflows < periods.len() as u64 / 10);
        }
    }
}
