//! The sampler follows real process churn with the perf backend: processes that
//! start matching a regex are attached at the next rescan, threads they create
//! later are counted, and a process that exits is reported one last time and
//! then dropped.
//!
//! The processes are this test binary re-executed with `churn_child_entry` as the
//! only test; a `--skip MARKER` argument makes their command lines unique.

mod common;
use common::{child_test_args, expect_line};

use hwqos_core::{Frame, Scope, Timestamp};
use hwqos_pmu::backend::perf::PerfBackend;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use hwqos_pmu::target::{Resolver, TargetSelector};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

const CHILD_ENV: &str = "HWQOS_CHURN_CHILD";
const THREAD_CPU_NS: u64 = 30_000_000;

/// Not a test: the child side of the churn test. Without the environment
/// variable (a normal test run) it returns at once. For each `spawn` line on
/// stdin it starts a thread that burns `THREAD_CPU_NS` of CPU and exits, then
/// prints `HWQOS-SPAWNED`; it exits at end of input.
#[test]
fn churn_child_entry() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    println!("HWQOS-READY");
    for line in std::io::stdin().lock().lines() {
        if line.unwrap().trim() == "spawn" {
            std::thread::spawn(|| {
                let start = hwqos_core::time::thread_cpu_ns();
                while hwqos_core::time::thread_cpu_ns() - start < THREAD_CPU_NS {
                    std::hint::black_box(0u64);
                }
            })
            .join()
            .unwrap();
            println!("HWQOS-SPAWNED");
        }
    }
}

struct ChurnChild {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl ChurnChild {
    fn spawn(marker: &str) -> ChurnChild {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(child_test_args("churn_child_entry"))
            .args(["--skip", marker])
            .env(CHILD_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        expect_line(&mut out, "HWQOS-READY");
        ChurnChild { child, out }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A new thread runs and exits inside the child.
    fn new_thread(&mut self) {
        writeln!(self.child.stdin.as_mut().unwrap(), "spawn").unwrap();
        expect_line(&mut self.out, "HWQOS-SPAWNED");
    }

    fn exit(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

fn task_clock(f: &Frame, pid: u32) -> Option<f64> {
    f.value(&Scope::Process { pid }, "sw.task_clock")
}

#[test]
fn sampler_follows_processes_and_threads_as_they_come_and_go() {
    let marker = format!("hwqos-churn-{}", std::process::id());
    let first = ChurnChild::spawn(&marker);
    let cfg = SamplerConfig {
        targets: vec![TargetSelector::Regex(format!("--skip {marker}$"))],
        event_sets: vec![
            vec!["sw.task_clock".into(), "sw.page_faults".into()],
            vec!["sw.context_switches".into()],
        ],
        rescan_every: 1,
        procfs: true,
        ..SamplerConfig::default()
    };
    let mut s = Sampler::new(
        cfg,
        &Catalog::for_this_node(),
        Box::new(PerfBackend::new()),
        Resolver::for_this_node(),
    )
    .unwrap();
    let a = first.pid();
    assert_eq!(s.targets(), vec![Scope::Process { pid: a }]);
    let f = s.sample(Timestamp::now());
    assert!(
        task_clock(&f, a).is_none(),
        "the first tick starts counting"
    );
    let comm = std::fs::read_to_string(format!("/proc/{a}/comm")).unwrap();
    assert_eq!(
        f.label(&Scope::Process { pid: a }),
        Some(comm.trim()),
        "processes are labelled with comm"
    );

    // Threads created after attaching are counted (inherited groups), even
    // though they have exited by the time of the tick.
    let mut first = first;
    first.new_thread();
    first.new_thread();
    let f = s.sample(Timestamp::now());
    let cpu = task_clock(&f, a).expect("set 0 reports task clock");
    assert!(
        cpu >= 2.0 * THREAD_CPU_NS as f64,
        "two {THREAD_CPU_NS} ns threads counted: {cpu}"
    );
    assert!(
        f.value(&Scope::Process { pid: a }, "os.proc.cpu").is_some(),
        "procfs per-process metrics"
    );
    let f = s.sample(Timestamp::now());
    assert!(
        f.value(&Scope::Process { pid: a }, "sw.context_switches")
            .is_some(),
        "rotated to set 1"
    );
    assert!(task_clock(&f, a).is_none());

    // A new matching process is picked up at the next rescan.
    let mut second = ChurnChild::spawn(&marker);
    let b = second.pid();
    s.sample(Timestamp::now());
    assert_eq!(
        s.targets(),
        vec![Scope::Process { pid: a }, Scope::Process { pid: b }]
    );
    second.new_thread();
    let f = s.sample(Timestamp::now());
    let f2 = s.sample(Timestamp::now());
    let b_cpu = task_clock(&f, b)
        .or(task_clock(&f2, b))
        .expect("the new process reports");
    assert!(b_cpu >= THREAD_CPU_NS as f64, "{b_cpu}");

    // The first process exits: it is dropped from the targets at the next rescan
    // and the tick goes on for the others.
    first.exit();
    let mut gone_at = None;
    for i in 0..3 {
        let f = s.sample(Timestamp::now());
        if !s.targets().contains(&Scope::Process { pid: a }) {
            gone_at = Some(i);
            assert!(
                f.samples
                    .iter()
                    .any(|x| x.scope == Scope::Process { pid: a } && x.counter.is_some()),
                "an exited process's final counts are reported once"
            );
            assert!(
                f.samples
                    .iter()
                    .any(|x| x.scope == Scope::Process { pid: b }),
                "the others still report"
            );
            break;
        }
    }
    assert!(gone_at.is_some(), "the exited process is dropped");
    assert_eq!(s.targets(), vec![Scope::Process { pid: b }]);
    let f = s.sample(Timestamp::now());
    assert!(f
        .samples
        .iter()
        .all(|x| x.scope != Scope::Process { pid: a }));
    second.exit();
}
