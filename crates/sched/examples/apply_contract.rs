//! Applies an SRA contract from code: parse it, resolve it against this
//! machine, pin the process and enforce its page-fault quota with the
//! userspace backend (perf overflow signals + SIGSTOP), then release it.
//! The process is a child this example starts (itself, faulting forever).
//!
//! `cargo run -p hwqos-sched --example apply_contract` (as root or with
//! CAP_SYS_NICE/CAP_KILL over the child: it is our own, so any user works
//! where perf_event_paranoid allows counting it). Known answers, asserted:
//! every thread reads back the contract's affinity, and the quota stopped
//! the child in periods where it reached it.

use hwqos_pmu::{target::online_cpus, Catalog, Resolver};
use hwqos_sched::backend::userspace::{UserspaceBackend, UserspaceOptions};
use hwqos_sched::backend::QuotaBackend;
use hwqos_sched::contract::{Contract, Guard};
use hwqos_sched::leech::{self, LeechKind, LeechSpec, DUTY_FULL};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("child") {
        let spec = LeechSpec {
            kind: LeechKind::Faults,
            working_set: 256 * 4096,
            stride: 64,
        };
        let (duty, stop, work) = (
            AtomicU64::new(DUTY_FULL),
            AtomicBool::new(false),
            AtomicU64::new(0),
        );
        leech::run(&spec, &duty, &stop, &work)?; // faults until killed
        return Ok(());
    }
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg("child")
        .spawn()?;
    let cpus = online_cpus(Path::new("/sys"));
    let cpu = *cpus.last().expect("an online CPU");
    let contract = Contract::parse(&format!(
        r#"{{ "schema": "hwqos.contract/1",
             "entries": [ {{ "name": "faulter", "process": "pid:{}", "affinity": [{cpu}],
                            "period_us": 10000, "quotas": {{ "sw.page_faults": 400 }} }} ] }}"#,
        child.id()
    ))?;
    let (resolved, skipped) = contract.resolve(
        &cpus,
        &Catalog::for_this_node(),
        &Resolver::for_this_node(),
        // Never this process; its children are fair game here (an agent's
        // own guard also protects its children: its guardian).
        &Guard {
            own_children: false,
            ..Guard::for_this_process(&[])
        },
    );
    assert!(skipped.is_empty(), "skipped: {skipped:?}");

    let mut backend = UserspaceBackend::start(UserspaceOptions::default(), None)?;
    for entry in &resolved {
        for &pid in &entry.pids {
            let pinned =
                hwqos_sched::proc::pin_process(Path::new("/proc"), pid, &entry.entry.affinity)?;
            println!(
                "{}: pid {pid} pinned to {:?}: threads {:?}",
                entry.entry.name, entry.entry.affinity, pinned.verified
            );
            if let Some(quotas) = &entry.quotas {
                backend.enforce(pid, quotas)?;
            }
        }
    }
    let pid = child.id();
    while backend.history(pid).len() < 21 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = backend.stats(pid).expect("enforced");
    let history = backend.history(pid);
    backend.release(pid)?;
    child.kill()?;
    child.wait()?;

    // The first period started mid-way: skip it.
    let used: Vec<u64> = history[1..].iter().map(|p| p.used[0]).collect();
    println!("page faults per 10 ms period: {used:?}");
    println!(
        "periods = {}, throttled = {}",
        stats.nr_periods, stats.nr_throttled
    );
    assert!(
        stats.nr_throttled > 0,
        "the child was never held to its quota"
    );
    assert!(
        used.iter().all(|&n| n <= 2 * 400),
        "a period far over its quota"
    );
    Ok(())
}
