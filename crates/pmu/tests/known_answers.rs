//! Known-answer tests of the real perf_event backend and the sampler on kernel
//! software events (they work on nodes without a hardware PMU):
//!
//! - a pipe ping-pong of N round trips between two threads pinned to one CPU
//!   makes exactly 2N context switches, plus the involuntary ones the kernel
//!   itself reports (`ru_nivcsw`) when other work shares the CPU;
//! - touching K fresh small pages of an anonymous mapping makes K page faults;
//! - the task clock of a busy loop equals the thread's CPU clock
//!   (`CLOCK_THREAD_CPUTIME_ID`), and a whole process's equals its
//!   `CLOCK_PROCESS_CPUTIME_ID` (both exact, unlike `getrusage`, whose
//!   tick-sampled split may lag on a loaded machine). The task clock also
//!   counts interrupt and steal time that falls into the task's time slices,
//!   which the CPU clocks leave out, so on a busy node it may exceed them by
//!   at most the interrupt and steal time `/proc/stat` reports meanwhile;
//! - whole-process counts agree with `perf stat` on the same workload.
//!
//! Workloads run in a child process — this test binary re-executed with
//! `workload_child_entry` as the only test and the workload in an environment
//! variable — so the harness's other test threads are not counted.

mod common;
use common::{child_test_args, touch_fresh_pages};

use hwqos_core::{Frame, Scope, Timestamp};
use hwqos_pmu::backend::perf::PerfBackend;
use hwqos_pmu::backend::{BackendKind, CountTarget, CounterBackend, GroupReading};
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use hwqos_pmu::target::{Resolver, TargetSelector};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

const WORKLOAD_ENV: &str = "HWQOS_KA_WORKLOAD";
const GATED_ENV: &str = "HWQOS_KA_GATED";
const READY: &str = "HWQOS-READY";
const DONE: &str = "HWQOS-DONE";
const CPU_TIME: &str = "HWQOS-CPU-NS";
const SWITCHES: &str = "HWQOS-SWITCHES";

const ROUND_TRIPS: u64 = 10_000;
const PAGES: u64 = 20_000;
const EVENTS: [&str; 3] = ["sw.context_switches", "sw.page_faults", "sw.task_clock"];

// ---------------------------------------------------------------- child side

/// Not a test: the child side of the workloads below. Without the workload
/// environment variable (a normal test run) it returns at once.
#[test]
fn workload_child_entry() {
    let Ok(spec) = std::env::var(WORKLOAD_ENV) else {
        return;
    };
    let gated = std::env::var(GATED_ENV).is_ok_and(|v| v == "1");
    let stdin = std::io::stdin();
    if gated {
        println!("{READY}");
        let mut line = String::new();
        stdin.lock().read_line(&mut line).unwrap();
    }
    let (voluntary, involuntary) = switches_so_far();
    for step in spec.split(',') {
        let (what, n) = step.split_once(':').unwrap();
        let n: u64 = n.parse().unwrap();
        match what {
            "pingpong" => pingpong(n),
            "pages" => touch_fresh_pages(n as usize),
            "busy_ms" => burn_thread_cpu(n * 1_000_000),
            other => panic!("unknown workload {other}"),
        }
    }
    let (v, i) = switches_so_far();
    println!("{SWITCHES} {} {}", v - voluntary, i - involuntary);
    println!("{CPU_TIME} {}", hwqos_core::time::process_cpu_ns());
    println!("{DONE}");
    if gated {
        let mut rest = Vec::new();
        let _ = stdin.lock().read_to_end(&mut rest);
    }
}

fn pingpong(round_trips: u64) {
    // Both threads on one CPU: every hand-over is exactly one context switch.
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
    let (to_b_r, to_b_w) = nix::unistd::pipe().unwrap();
    let (to_a_r, to_a_w) = nix::unistd::pipe().unwrap();
    let (mut to_b_r, mut to_b_w) = (std::fs::File::from(to_b_r), std::fs::File::from(to_b_w));
    let (mut to_a_r, mut to_a_w) = (std::fs::File::from(to_a_r), std::fs::File::from(to_a_w));
    let b = std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        for _ in 0..round_trips {
            to_b_r.read_exact(&mut byte).unwrap();
            to_a_w.write_all(&byte).unwrap();
        }
    });
    let mut byte = [1u8; 1];
    for _ in 0..round_trips {
        to_b_w.write_all(&byte).unwrap();
        to_a_r.read_exact(&mut byte).unwrap();
    }
    b.join().unwrap();
}

fn burn_thread_cpu(ns: u64) {
    let start = hwqos_core::time::thread_cpu_ns();
    let mut x = 0u64;
    while hwqos_core::time::thread_cpu_ns() - start < ns {
        for i in 0..1_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    std::hint::black_box(x);
}

/// The kernel's own (voluntary, involuntary) context-switch counts of this
/// process, finished threads included.
fn switches_so_far() -> (u64, u64) {
    // SAFETY: an all-zero rusage is a valid value (plain integers).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) }, 0);
    (ru.ru_nvcsw as u64, ru.ru_nivcsw as u64)
}

// ---------------------------------------------------------------- parent side

fn child_command(workload: &str, gated: bool) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(child_test_args("workload_child_entry"))
        .env(WORKLOAD_ENV, workload)
        .env(GATED_ENV, if gated { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    cmd
}

/// Reads the child's stdout up to a line starting with `marker`; returns that line.
fn wait_for(out: &mut BufReader<ChildStdout>, marker: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "child ended before printing {marker}");
        if line.starts_with(marker) {
            return line.trim().to_string();
        }
    }
}

/// What the child reported of its workload.
struct ChildReport {
    /// Voluntary and involuntary context switches during the workload.
    switches: (u64, u64),
}

/// A child stopped right before its workload: counters can be attached to all
/// its threads, then `go` runs the workload and returns the child's report.
struct GatedChild {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl GatedChild {
    fn spawn(workload: &str) -> GatedChild {
        let mut child = child_command(workload, true).spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        wait_for(&mut out, READY);
        GatedChild { child, out }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn threads(&self) -> Vec<u32> {
        std::fs::read_dir(format!("/proc/{}/task", self.pid()))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect()
    }

    fn go(&mut self) -> ChildReport {
        writeln!(self.child.stdin.as_mut().unwrap(), "go").unwrap();
        let switches = read_switches(&wait_for(&mut self.out, SWITCHES));
        wait_for(&mut self.out, DONE);
        ChildReport { switches }
    }

    fn finish(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

fn read_switches(line: &str) -> (u64, u64) {
    let mut f = line.split(' ').skip(1).map(|v| v.parse().unwrap());
    (f.next().unwrap(), f.next().unwrap())
}

/// The known answer of a pinned ping-pong of [`ROUND_TRIPS`]: 2N switches, to
/// which a loaded CPU adds involuntary ones (preemptions) the kernel reports
/// itself; the counter must equal the kernel's total and the total must be 2N
/// once those are accounted for.
fn assert_pingpong_switches(counted: f64, report: &ChildReport) {
    let (voluntary, involuntary) = report.switches;
    let expected = 2.0 * ROUND_TRIPS as f64;
    assert_within(
        "context switches vs the kernel's own count",
        counted,
        (voluntary + involuntary) as f64,
        0.005,
    );
    let excess = counted - expected;
    assert!(
        excess >= -0.005 * expected && excess <= involuntary as f64 + 0.005 * expected,
        "context switches: got {counted}, expected {expected} plus at most \
         {involuntary} involuntary ones"
    );
}

fn now() -> Timestamp {
    Timestamp::now()
}

fn sampler(targets: Vec<TargetSelector>, events: &[&str]) -> Sampler {
    let cfg = SamplerConfig {
        targets,
        event_sets: vec![events.iter().map(|e| e.to_string()).collect()],
        rescan_every: 0,
        ..SamplerConfig::default()
    };
    let s = Sampler::new(
        cfg,
        &Catalog::for_this_node(),
        Box::new(PerfBackend::new()),
        Resolver::for_this_node(),
    )
    .unwrap();
    assert_eq!(s.backend_kind(), BackendKind::Perf);
    assert!(
        s.unavailable().is_empty(),
        "software events work everywhere: {:?}",
        s.unavailable()
    );
    s
}

/// Counts the gated workload on the child process through the sampler.
fn count_with_sampler(workload: &str) -> (Frame, ChildReport) {
    let mut child = GatedChild::spawn(workload);
    let mut s = sampler(vec![TargetSelector::Pid(child.pid())], &EVENTS);
    s.sample(now());
    let report = child.go();
    let frame = s.sample(now());
    child.finish();
    (frame, report)
}

/// Counts the gated workload with inherited groups on every thread of the child,
/// straight through the backend; returns the summed values in `EVENTS` order.
fn count_with_backend(workload: &str) -> (Vec<u64>, ChildReport) {
    let catalog = Catalog::for_this_node();
    let events: Vec<_> = EVENTS.iter().map(|e| catalog.resolve(e).unwrap()).collect();
    let mut child = GatedChild::spawn(workload);
    let mut backend = PerfBackend::new();
    let groups: Vec<_> = child
        .threads()
        .into_iter()
        .map(|tid| {
            backend
                .open_group(&CountTarget::Task { tid, inherit: true }, &events)
                .unwrap()
        })
        .collect();
    for g in &groups {
        backend.enable(*g).unwrap();
    }
    let report = child.go();
    let mut sum = vec![0u64; EVENTS.len()];
    for g in &groups {
        backend.disable(*g).unwrap();
        let r: GroupReading = backend.read(*g).unwrap();
        assert_eq!(
            r.time_enabled, r.time_running,
            "software events never multiplex"
        );
        for (s, v) in sum.iter_mut().zip(&r.values) {
            *s += v;
        }
    }
    child.finish();
    (sum, report)
}

/// Interrupt, softirq and steal time of all CPUs so far (`/proc/stat`), in ns.
fn interrupt_and_steal_ns() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu: Vec<f64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (cpu[5] + cpu[6] + cpu[7]) * 1e9 / hz
}

/// A task clock against a CPU clock measured over the same work: within `rel`
/// below, and above by at most `rel` plus the interrupt and steal time that
/// passed meanwhile (`since` = [`interrupt_and_steal_ns`] at the start) and
/// two ticks of `/proc/stat` granularity.
fn assert_task_clock(what: &str, got: f64, cpu_clock: f64, since: f64) {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let extra = interrupt_and_steal_ns() - since + 2.0 * 1e9 / hz;
    assert!(
        got >= cpu_clock * (1.0 - 0.02) && got <= cpu_clock * 1.02 + extra,
        "{what}: got {got}, expected {cpu_clock} (-2%, +2% + {extra} ns of interrupt and steal time)"
    );
}

fn assert_within(what: &str, got: f64, expected: f64, rel: f64) {
    let err = (got - expected).abs() / expected;
    assert!(
        err <= rel,
        "{what}: got {got}, expected {expected} (error {:.3}% > {:.3}%)",
        err * 100.0,
        rel * 100.0
    );
}

#[test]
fn pingpong_context_switches_are_2n_through_the_sampler() {
    let (f, report) = count_with_sampler(&format!("pingpong:{ROUND_TRIPS}"));
    let pid = f.scopes()[0].clone();
    assert!(matches!(pid, Scope::Process { .. }));
    let cs = f.get(&pid, "sw.context_switches").unwrap();
    assert!(!cs.multiplexed());
    assert_pingpong_switches(cs.value, &report);
    let rate = f.value(&pid, "derived.rate.sw.context_switches").unwrap();
    assert_within("rate", rate, cs.value / (f.interval_ns as f64 / 1e9), 1e-9);
}

#[test]
fn pingpong_context_switches_are_2n_through_the_backend() {
    let (counts, report) = count_with_backend(&format!("pingpong:{ROUND_TRIPS}"));
    assert_pingpong_switches(counts[0] as f64, &report);
}

#[test]
fn fresh_pages_fault_once_each_through_the_sampler() {
    let (f, _) = count_with_sampler(&format!("pages:{PAGES}"));
    let pid = f.scopes()[0].clone();
    assert_within(
        "page faults",
        f.value(&pid, "sw.page_faults").unwrap(),
        PAGES as f64,
        0.02,
    );
}

#[test]
fn fresh_pages_fault_once_each_through_the_backend() {
    let (counts, _) = count_with_backend(&format!("pages:{PAGES}"));
    assert_within("page faults", counts[1] as f64, PAGES as f64, 0.02);
}

#[test]
fn task_clock_of_a_busy_loop_matches_the_thread_cpu_clock() {
    let tid = nix::unistd::gettid().as_raw() as u32;
    let mut s = sampler(vec![TargetSelector::Tid(tid)], &["sw.task_clock"]);
    let scope = Scope::Thread {
        pid: std::process::id(),
        tid,
    };
    let since = interrupt_and_steal_ns();
    s.sample(now());
    let before = hwqos_core::time::thread_cpu_ns();
    burn_thread_cpu(300_000_000);
    let used = hwqos_core::time::thread_cpu_ns() - before;
    let f = s.sample(now());
    assert_task_clock(
        "task clock via sampler",
        f.value(&scope, "sw.task_clock").unwrap(),
        used as f64,
        since,
    );

    let mut backend = PerfBackend::new();
    let event = Catalog::for_this_node().resolve("task-clock").unwrap();
    let g = backend
        .open_group(
            &CountTarget::Task {
                tid,
                inherit: false,
            },
            &[event],
        )
        .unwrap();
    let since = interrupt_and_steal_ns();
    backend.enable(g).unwrap();
    let before = hwqos_core::time::thread_cpu_ns();
    burn_thread_cpu(300_000_000);
    let used = hwqos_core::time::thread_cpu_ns() - before;
    backend.disable(g).unwrap();
    let r = backend.read(g).unwrap();
    assert_task_clock(
        "task clock via backend",
        r.values[0] as f64,
        used as f64,
        since,
    );
}

/// `perf stat`'s counts of a whole run, by event name; `None` if perf is missing.
fn perf_stat(workload: &str) -> Option<Vec<(String, f64)>> {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("perf")
        .args([
            "stat",
            "-x,",
            "-e",
            "task-clock,page-faults,context-switches",
            "--",
        ])
        .arg(exe)
        .args(child_test_args("workload_child_entry"))
        .env(WORKLOAD_ENV, workload)
        .env(GATED_ENV, "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("perf stat failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                Some((f.get(2)?.to_string(), f.first()?.parse().ok()?))
            })
            .collect(),
    )
}

#[test]
fn whole_process_counts_agree_with_perf_stat_and_the_cpu_clock() {
    let workload = format!("pingpong:{ROUND_TRIPS},pages:{PAGES},busy_ms:300");
    // Counters are attached before the workload's exec, like `perf stat -- CMD`:
    // a shell waits for one line, then execs the workload in the same process.
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("sh")
        .args(["-c", "read -r go && exec \"$0\" \"$@\""])
        .arg(exe)
        .args(child_test_args("workload_child_entry"))
        .env(WORKLOAD_ENV, &workload)
        .env(GATED_ENV, "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut s = sampler(vec![TargetSelector::Pid(pid)], &EVENTS);
    let since = interrupt_and_steal_ns();
    assert_eq!(s.targets(), vec![Scope::Process { pid }]);
    s.sample(now());
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let cpu_ns: u64 = wait_for(&mut out, CPU_TIME)
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap();
    wait_for(&mut out, DONE);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    // The child has exited and been reaped: its final counts are still readable.
    let f = s.sample(now());
    let scope = Scope::Process { pid };
    let ours = |m: &str| {
        f.value(&scope, m)
            .unwrap_or_else(|| panic!("{m} missing: {f:?}"))
    };
    assert_task_clock(
        "task clock vs the child's process CPU clock",
        ours("sw.task_clock"),
        cpu_ns as f64,
        since,
    );

    let Some(perf) = perf_stat(&workload) else {
        eprintln!("note: `perf` is not installed; skipping the perf stat comparison");
        return;
    };
    let theirs = |e: &str| perf.iter().find(|(n, _)| n == e).map(|(_, v)| *v).unwrap();
    assert_within(
        "page faults vs perf stat",
        ours("sw.page_faults"),
        theirs("page-faults"),
        0.02,
    );
    assert_within(
        "context switches vs perf stat",
        ours("sw.context_switches"),
        theirs("context-switches"),
        0.02,
    );
    // perf prints task-clock in msec.
    assert!(
        theirs("task-clock") * 1e6 > 300e6,
        "perf saw the busy loop too"
    );
}
