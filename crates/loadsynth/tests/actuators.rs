//! Generators start under the caps, do their work, and on stop every thread
//! ends and the memory it touched is given back (the kernel's own accounting:
//! the generator threads listed in /proc/self/task and the resident set in
//! /proc/self/status; not the mapped size, which keeps malloc's per-thread
//! arenas).

use hwqos_loadsynth::actuate::{Actuators, CacheLevels};
use hwqos_loadsynth::config::LoadConfig;
use hwqos_loadsynth::generator::dcache;
use hwqos_loadsynth::LoadMetric;
use std::sync::Mutex;
use std::time::Duration;

/// Both tests count this process's generator threads and resident memory.
static SERIAL: Mutex<()> = Mutex::new(());

/// Threads named by the load generator (`loadgen-…`). The harness's own
/// threads come and go as it schedules the other test, so the process's
/// whole thread count is not a known answer.
fn generator_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with("loadgen-"))
        .count()
}

/// A joined thread may still be listed for a moment: the kernel wakes the
/// joiner when it clears the thread's id, just before it reaps the task.
fn generator_threads_after_stop() -> usize {
    for _ in 0..1000 {
        if generator_threads() == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    generator_threads()
}

fn status(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn stop_ends_every_thread_and_unmaps_every_buffer() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let topo = hwqos_topology::Topology::this_node().unwrap();
    let cpu = topo.online_cpus()[0];
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = LoadConfig::default();
    cfg.io.dir = dir.path().to_path_buf();
    // This test is about starting and stopping, not the node's geometry: a
    // node whose caches the data-cache generator cannot model (this VM's
    // Xeon reports a 260 MiB, 20-way L3: not a power-of-two set count) gets
    // the geometry of the cachegrind test (32 KiB/8-way L1, 32 MiB/16-way LLC).
    let mut caches = CacheLevels::of(&topo, cpu);
    let geoms: Vec<dcache::Geometry> = caches.levels.iter().map(|l| l.1).collect();
    if dcache::Plan::new(&geoms).is_err() || caches.levels.len() < 3 {
        let g = |size_bytes, ways| dcache::Geometry {
            size_bytes,
            ways,
            line_size: 64,
        };
        caches = CacheLevels {
            levels: vec![
                (LoadMetric::L1dMissRatio, g(32 << 10, 8)),
                (LoadMetric::L2MissRatio, g(1 << 20, 16)),
                (LoadMetric::LlcMissRatio, g(32 << 20, 16)),
            ],
        };
    }
    let pairs = [
        ((LoadMetric::CpuUtil, cpu), 0.1),
        ((LoadMetric::PageFaultRate, cpu), 2000.0),
        ((LoadMetric::ContextSwitchRate, cpu), 2000.0),
        ((LoadMetric::L1dMissRatio, cpu), 0.1),
        ((LoadMetric::LlcMissRatio, cpu), 0.5),
        ((LoadMetric::DtlbMissRatio, cpu), 0.1),
        ((LoadMetric::BranchMissRatio, cpu), 0.1),
        ((LoadMetric::MemBandwidth, cpu), 1e8),
        ((LoadMetric::IoWriteRate, cpu), 1e6),
    ];
    assert_eq!(generator_threads(), 0);
    let rss_before = status("VmRSS:");
    let act = Actuators::start(&pairs, &caches, &cfg).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        act.finished().is_empty(),
        "a generator ended early: {:?}",
        act.finished()
    );
    // Each generator is a thread (two for context switches) and has mapped its buffer.
    let threads = generator_threads();
    assert!(threads >= 9, "{threads} generator threads running");
    let rss = status("VmRSS:");
    assert!(
        rss > rss_before + 16 * 1024,
        "buffers touched: {rss} kB, {rss_before} kB before"
    );
    // Each does work once it is scheduled: on a loaded machine that can take
    // longer than the 300 ms above, so wait for it (the deadline catches a
    // generator that never works, it does not time one).
    for m in [
        LoadMetric::PageFaultRate,
        LoadMetric::MemBandwidth,
        LoadMetric::IoWriteRate,
    ] {
        let start = std::time::Instant::now();
        while act.work_done(m, cpu).unwrap() == 0 {
            assert!(start.elapsed() < Duration::from_secs(30), "{m} did no work");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    act.stop().unwrap();
    assert_eq!(
        generator_threads_after_stop(),
        0,
        "a generator thread outlived stop"
    );
    // Buffers are unmapped (allow 8 MiB of allocator and stack noise).
    let after = status("VmRSS:");
    assert!(
        after <= rss_before + 8 * 1024,
        "{after} kB resident vs {rss_before} kB before"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "I/O file left behind"
    );
}

#[test]
fn the_memory_cap_refuses_before_starting() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let topo = hwqos_topology::Topology::this_node().unwrap();
    let mut cfg = LoadConfig::default();
    cfg.caps.max_memory_bytes = 1 << 20;
    let e = Actuators::start(
        &[((LoadMetric::MemBandwidth, 0), 1e6)],
        &CacheLevels::of(&topo, 0),
        &cfg,
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("max_memory_bytes"), "{e}");
    assert_eq!(generator_threads(), 0);
}
