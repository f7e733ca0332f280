//! Counts this process's own page faults and context switches with
//! hwqos-pmu's sampler (software events: they work without a hardware PMU).
//!
//! `cargo run -p hwqos-pmu --example own_process`. Known answers, asserted:
//! touching N fresh pages faults at least N times, and N sleeps switch
//! context at least N times.

use hwqos_pmu::{Sampler, SamplerConfig, Scope, TargetSelector, Timestamp};
use std::time::Duration;

const PAGES: usize = 1024;
const SLEEPS: u32 = 20;

fn main() -> Result<(), hwqos_pmu::PmuError> {
    let me = std::process::id();
    let mut sampler = Sampler::for_this_node(SamplerConfig {
        targets: vec![TargetSelector::Pid(me)],
        event_sets: vec![vec![
            "sw.page_faults".into(),
            "sw.context_switches".into(),
            "sw.task_clock".into(),
        ]],
        ..SamplerConfig::default()
    })?;
    // The first sample starts counting and has no counter samples yet.
    let first = sampler.sample(Timestamp::now());
    assert!(first.samples.is_empty());

    // Work to count: fresh zero pages are mapped on first write, one fault each;
    // each sleep gives up the CPU, one context switch each.
    let mut buf = vec![0u8; PAGES * 4096];
    for page in buf.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(&buf);
    for _ in 0..SLEEPS {
        std::thread::sleep(Duration::from_millis(1));
    }

    let frame = sampler.sample(Timestamp::now());
    let me = Scope::Process { pid: me };
    let value = |metric| frame.value(&me, metric).expect(metric);
    let (faults, switches) = (value("sw.page_faults"), value("sw.context_switches"));
    println!("touched {PAGES} fresh pages: sw.page_faults = {faults}");
    println!("slept {SLEEPS} times: sw.context_switches = {switches}");
    println!("sw.task_clock = {} ns", value("sw.task_clock"));
    assert!(faults >= PAGES as f64, "fewer faults than fresh pages");
    assert!(
        switches >= SLEEPS as f64,
        "fewer context switches than sleeps"
    );
    Ok(())
}
