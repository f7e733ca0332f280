//! Rotates two event sets on this process: one set is counted per tick, the
//! next set at the next tick, so each set always has the counters to itself.
//! Sets can be replaced at runtime with `Sampler::set_event_sets`.
//!
//! `cargo run -p hwqos-pmu --example rotating_sets`. Known answers, asserted:
//! each frame holds only the set that was counting; the page-fault set sees
//! the N fresh pages touched while it counted.

use hwqos_pmu::{Frame, Sampler, SamplerConfig, Scope, TargetSelector, Timestamp};

const PAGES: usize = 512;

/// Touches PAGES fresh pages; returns them (freed pages would be reused).
fn touch_fresh_pages() -> Vec<u8> {
    let mut buf = vec![0u8; PAGES * 4096];
    for page in buf.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(buf)
}

fn main() -> Result<(), hwqos_pmu::PmuError> {
    let me = std::process::id();
    let mut sampler = Sampler::for_this_node(SamplerConfig {
        targets: vec![TargetSelector::Pid(me)],
        event_sets: vec![
            vec!["sw.page_faults".into()],
            vec!["sw.context_switches".into(), "sw.task_clock".into()],
        ],
        ..SamplerConfig::default()
    })?;
    let me = Scope::Process { pid: me };
    let has = |f: &Frame, m| f.value(&me, m).is_some();

    sampler.sample(Timestamp::now()); // set 0 starts counting
    let mut kept = Vec::new();
    for tick in 1..=4 {
        kept.push(touch_fresh_pages());
        let frame = sampler.sample(Timestamp::now());
        let names: Vec<&str> = frame.samples.iter().map(|s| s.metric.as_str()).collect();
        println!("tick {tick}: {names:?}");
        if tick % 2 == 1 {
            // Set 0 was counting during this tick.
            let faults = frame.value(&me, "sw.page_faults").unwrap();
            assert!(faults >= PAGES as f64, "{faults} faults for {PAGES} pages");
            assert!(!has(&frame, "sw.context_switches"));
        } else {
            assert!(has(&frame, "sw.task_clock") && has(&frame, "sw.context_switches"));
            assert!(!has(&frame, "sw.page_faults"));
        }
    }
    Ok(())
}
