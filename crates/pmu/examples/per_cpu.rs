//! Counts every event per CPU (`per_cpu`: one `cpu:N` scope each, all tasks
//! on that CPU), here on the one CPU this thread is pinned to. CPU-wide
//! counting needs `perf_event_paranoid` ≤ 0 or CAP_PERFMON.
//!
//! `cargo run -p hwqos-pmu --example per_cpu`. Known answer, asserted: after
//! this thread touches N fresh pages on CPU c, `cpu:c` counted at least N
//! page faults.

use hwqos_pmu::{Sampler, SamplerConfig, Scope, Timestamp};
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

const PAGES: usize = 1024;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() } as u32;
    let mut set = CpuSet::new();
    set.set(cpu as usize)?;
    sched_setaffinity(Pid::from_raw(0), &set)?; // this thread only

    let mut sampler = Sampler::for_this_node(SamplerConfig {
        per_cpu: true,
        cpus: Some(vec![cpu]),
        event_sets: vec![vec!["sw.page_faults".into(), "sw.cpu_clock".into()]],
        ..SamplerConfig::default()
    })?;
    sampler.sample(Timestamp::now()); // starts counting

    let mut buf = vec![0u8; PAGES * 4096];
    for page in buf.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(&buf);

    let frame = sampler.sample(Timestamp::now());
    let scope = Scope::Cpu { cpu };
    let faults = frame
        .value(&scope, "sw.page_faults")
        .ok_or("no cpu scope")?;
    let clock_ns = frame.value(&scope, "sw.cpu_clock").ok_or("no cpu_clock")?;
    println!("cpu:{cpu}: sw.page_faults = {faults}, sw.cpu_clock = {clock_ns} ns");
    println!("scopes in the frame: {:?}", frame.scopes());
    assert!(
        faults >= PAGES as f64,
        "fewer faults on cpu:{cpu} than pages touched there"
    );
    Ok(())
}
