//! Drives one load generator from code: page faults at a fixed rate on one
//! CPU, started, steered through its knob, and stopped.
//!
//! `cargo run -p hwqos-loadsynth --example generator`. Known answer,
//! asserted: the kernel's count of this process's minor faults
//! (`getrusage`) grew by at least the faults the generator says it caused.

use hwqos_loadsynth::actuate::{Actuators, CacheLevels};
use hwqos_loadsynth::config::LoadConfig;
use hwqos_loadsynth::LoadMetric;
use std::time::{Duration, Instant};

const FAULTS: u64 = 20_000;

fn minor_faults() -> u64 {
    // SAFETY: getrusage writes one rusage struct, which is plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to that struct.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) }, 0);
    ru.ru_minflt as u64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let topology = hwqos_topology::Topology::this_node()?;
    let cpu = 0;
    let caches = CacheLevels::of(&topology, cpu);
    let before = minor_faults();
    // Generators run pinned on their CPU, one thread each, until stopped.
    let pair = (LoadMetric::PageFaultRate, cpu);
    let act = Actuators::start(&[(pair, 10_000.0)], &caches, &LoadConfig::default())?;
    let (low, high) = act.range(pair.0, pair.1).expect("started");
    println!("page_fault_rate knob range on cpu {cpu}: {low}..={high} faults/s");
    act.knob(pair.0, pair.1).expect("started").set(50_000.0); // steer it
    let deadline = Instant::now() + Duration::from_secs(30);
    while act.work_done(pair.0, pair.1).unwrap() < FAULTS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let done = act.work_done(pair.0, pair.1).unwrap();
    let took = act.stop()?;
    let counted = minor_faults() - before;
    println!("generator faults = {done}");
    println!("kernel minor faults = {counted}");
    println!("stopped in {took:?}");
    assert!(done >= FAULTS, "the generator stalled at {done} faults");
    assert!(
        counted >= done,
        "the kernel counted fewer faults than generated"
    );
    Ok(())
}
