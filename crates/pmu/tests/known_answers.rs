//! Known-answer tests of the real perf_event backend and the sampler on kernel
//! software events (they work on nodes without a hardware PMU):
//!
//! - a pipe ping-pong of N round trips between two threads pinned to one CPU
//!   makes exactly 2N context switches;
//! - touching K fresh small pages of an anonymous mapping makes K page faults;
//! - the task clock of a busy loop equals the thread's `getrusage` CPU time;
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
const RUSAGE: &str = "HWQOS-RUSAGE-NS";

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
    println!("{RUSAGE} {}", rusage_ns(libc::RUSAGE_SELF));
    println!("{DONE}");
    if gated {
        let mut rest = Vec::new();
        let _ = stdin.lock().read_to_end(&mut rest);
    }
}

fn pingpong(round_trips: u64) {
    // Both threads on one CPU: every hand-over is exactly one context switch.
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

fn rusage_ns(who: libc::c_int) -> u64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer.
    assert_eq!(unsafe { libc::getrusage(who, &mut ru) }, 0);
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
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

/// A child stopped right before its workload: counters can be attached to all
/// its threads, then `go` runs the workload and returns the child's own rusage.
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

    fn go(&mut self) {
        writeln!(self.child.stdin.as_mut().unwrap(), "go").unwrap();
        wait_for(&mut self.out, RUSAGE);
        wait_for(&mut self.out, DONE);
    }

    fn finish(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
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
fn count_with_sampler(workload: &str) -> Frame {
    let mut child = GatedChild::spawn(workload);
    let mut s = sampler(vec![TargetSelector::Pid(child.pid())], &EVENTS);
    s.sample(now());
    child.go();
    let frame = s.sample(now());
    child.finish();
    frame
}

/// Counts the gated workload with inherited groups on every thread of the child,
/// straight through the backend; returns the summed values in `EVENTS` order.
fn count_with_backend(workload: &str) -> Vec<u64> {
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
    child.go();
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
    sum
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
    let f = count_with_sampler(&format!("pingpong:{ROUND_TRIPS}"));
    let pid = f.scopes()[0].clone();
    assert!(matches!(pid, Scope::Process { .. }));
    let cs = f.get(&pid, "sw.context_switches").unwrap();
    assert!(!cs.multiplexed());
    assert_within(
        "context switches",
        cs.value,
        2.0 * ROUND_TRIPS as f64,
        0.005,
    );
    let rate = f.value(&pid, "derived.rate.sw.context_switches").unwrap();
    assert_within("rate", rate, cs.value / (f.interval_ns as f64 / 1e9), 1e-9);
}

#[test]
fn pingpong_context_switches_are_2n_through_the_backend() {
    let counts = count_with_backend(&format!("pingpong:{ROUND_TRIPS}"));
    assert_within(
        "context switches",
        counts[0] as f64,
        2.0 * ROUND_TRIPS as f64,
        0.005,
    );
}

#[test]
fn fresh_pages_fault_once_each_through_the_sampler() {
    let f = count_with_sampler(&format!("pages:{PAGES}"));
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
    let counts = count_with_backend(&format!("pages:{PAGES}"));
    assert_within("page faults", counts[1] as f64, PAGES as f64, 0.02);
}

#[test]
fn task_clock_of_a_busy_loop_matches_getrusage() {
    let tid = nix::unistd::gettid().as_raw() as u32;
    let mut s = sampler(vec![TargetSelector::Tid(tid)], &["sw.task_clock"]);
    let scope = Scope::Thread {
        pid: std::process::id(),
        tid,
    };
    s.sample(now());
    let before = rusage_ns(libc::RUSAGE_THREAD);
    burn_thread_cpu(300_000_000);
    let used = rusage_ns(libc::RUSAGE_THREAD) - before;
    let f = s.sample(now());
    assert_within(
        "task clock via sampler",
        f.value(&scope, "sw.task_clock").unwrap(),
        used as f64,
        0.02,
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
    backend.enable(g).unwrap();
    let before = rusage_ns(libc::RUSAGE_THREAD);
    burn_thread_cpu(300_000_000);
    let used = rusage_ns(libc::RUSAGE_THREAD) - before;
    backend.disable(g).unwrap();
    let r = backend.read(g).unwrap();
    assert_within(
        "task clock via backend",
        r.values[0] as f64,
        used as f64,
        0.02,
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
fn whole_process_counts_agree_with_perf_stat_and_rusage() {
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
    assert_eq!(s.targets(), vec![Scope::Process { pid }]);
    s.sample(now());
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let rusage: u64 = wait_for(&mut out, RUSAGE)
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
    assert_within(
        "task clock vs the child's rusage",
        ours("sw.task_clock"),
        rusage as f64,
        0.02,
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
