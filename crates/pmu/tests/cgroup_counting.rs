//! Counting a cgroup with the real perf backend (perf's cgroup mode: one
//! counter per CPU that counts only tasks of that cgroup): a child moved into a
//! fresh cgroup v2 directory touches K fresh pages, and both the `cgroup:` scope
//! and the member process's scope report K page faults (±2 %).
//!
//! Needs root and a cgroup2 mount (CI runs as root); elsewhere it says why and
//! checks nothing. The child is this test binary re-executed with
//! `cgroup_child_entry` as its only test.

mod common;
use common::{child_test_args, expect_line, touch_fresh_pages};

use hwqos_core::{Frame, Scope, Timestamp};
use hwqos_pmu::backend::perf::PerfBackend;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use hwqos_pmu::target::{Resolver, TargetSelector};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

const CHILD_ENV: &str = "HWQOS_CGROUP_CHILD";
const PAGES: usize = 20_000;

/// Not a test: the child side. Without the environment variable it returns at
/// once. On `go` it touches `PAGES` fresh pages and prints `HWQOS-DONE`.
#[test]
fn cgroup_child_entry() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    println!("HWQOS-READY");
    for line in std::io::stdin().lock().lines() {
        if line.unwrap().trim() == "go" {
            touch_fresh_pages(PAGES);
            println!("HWQOS-DONE");
        }
    }
}

struct TempCgroup(PathBuf);

impl Drop for TempCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn value(frame: &Frame, scope: &Scope, metric: &str) -> f64 {
    frame
        .value(scope, metric)
        .unwrap_or_else(|| panic!("no {metric} for {scope} in {frame:?}"))
}

#[test]
fn cgroup_and_member_process_count_the_faults_of_k_fresh_pages() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("cgroup counting test: not root, nothing checked");
        return;
    }
    let resolver = Resolver::for_this_node();
    let Some(root) = resolver.cgroup2_root().map(PathBuf::from) else {
        eprintln!("cgroup counting test: no cgroup2 mount, nothing checked");
        return;
    };
    let name = format!("hwqos-test-cgcount-{}", std::process::id());
    let dir = root.join(&name);
    std::fs::create_dir(&dir).expect("create a test cgroup");
    let cgroup = TempCgroup(dir);

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(child_test_args("cgroup_child_entry"))
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    expect_line(&mut out, "HWQOS-READY");
    std::fs::write(cgroup.0.join("cgroup.procs"), child.id().to_string())
        .expect("move the child into the test cgroup");

    let cfg = SamplerConfig {
        targets: vec![TargetSelector::Cgroup(PathBuf::from(format!("/{name}")))],
        event_sets: vec![vec!["sw.page_faults".into(), "sw.task_clock".into()]],
        rescan_every: 0,
        ..SamplerConfig::default()
    };
    let mut sampler = Sampler::new(
        cfg,
        &Catalog::for_this_node(),
        Box::new(PerfBackend::new()),
        resolver,
    )
    .expect("sampler");
    let cg_scope = Scope::Cgroup {
        path: format!("/{name}"),
    };
    let proc_scope = Scope::Process { pid: child.id() };
    assert!(
        sampler.targets().contains(&cg_scope),
        "{:?}",
        sampler.targets()
    );
    assert!(
        sampler.targets().contains(&proc_scope),
        "{:?}",
        sampler.targets()
    );
    sampler.sample(Timestamp::now());

    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    expect_line(&mut out, "HWQOS-DONE");
    let frame = sampler.sample(Timestamp::now());
    drop(child.stdin.take());
    child.wait().unwrap();

    let k = PAGES as f64;
    for scope in [&cg_scope, &proc_scope] {
        let faults = value(&frame, scope, "sw.page_faults");
        assert!(
            (faults - k).abs() <= 0.02 * k,
            "{scope}: {faults} page faults for {PAGES} fresh pages"
        );
        assert!(value(&frame, scope, "sw.task_clock") > 0.0);
    }
}
