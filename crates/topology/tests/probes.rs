//! Live probes on the machine that runs the tests, checked against answers
//! the kernel or the machine's own sysfs gives — never against a duration:
//!
//! - ping-pong: the kernel's `sw.context_switches` counter (perf software
//!   event) sees 2 switches per round trip;
//! - page faults: `getrusage` sees one minor fault per touched page;
//! - pointer chase: the inferred L1d capacity is at most one sweep step above
//!   the sysfs L1d size and at least half of it, and the next boundary lies
//!   between L1d and the sysfs L2 size (caches shared with other work look
//!   smaller than sysfs says, never larger; see docs/probe.md);
//! - timers: no strategy wakes before its deadline.

use hwqos_topology::probe::{self, ctxswitch, memlat, pagefault, timer, ProbeOptions};
use hwqos_topology::Topology;

/// The probes pin to the same CPU: one at a time, or the ping-pong threads
/// evict the pointer chase's working set from the L2 it is measuring.
static ONE_PROBE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_PROBE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Extra switches allowed per 1000 expected: preemption by other work on the
/// CPU adds involuntary switches on a busy machine; none can be missing.
const SLACK_PER_MILLE: u64 = 50;

fn check_switches(what: &str, counted: Result<u64, String>, rounds: u64) {
    let counted = counted.unwrap_or_else(|e| {
        panic!("{what}: the sw.context_switches counter is unavailable ({e}); run as root or with perf_event_paranoid <= 1")
    });
    let expected = 2 * rounds;
    assert!(
        counted + 2 >= expected && counted <= expected + 20 + expected * SLACK_PER_MILLE / 1000,
        "{what}: {counted} switches counted for {rounds} round trips (expected {expected})"
    );
}

#[test]
fn thread_ping_pong_is_two_counted_switches_per_round_trip() {
    let _alone = alone();
    let cpu = probe::default_cpu();
    let _pin = probe::Pinned::to(cpu).unwrap();
    let rounds = 2000;
    let (times, counted) = ctxswitch::threads(cpu, 2, rounds, 0.0).unwrap();
    assert_eq!(times.len(), 2);
    check_switches("threads", counted, 2 * rounds);
}

#[test]
fn process_ping_pong_is_two_counted_switches_per_round_trip() {
    let _alone = alone();
    let cpu = probe::default_cpu();
    let _pin = probe::Pinned::to(cpu).unwrap();
    let rounds = 2000;
    let (_, counted) = ctxswitch::processes(2, rounds, 0.0).unwrap();
    check_switches("processes", counted, 2 * rounds);
}

#[test]
fn one_minor_fault_per_fresh_page() {
    let _alone = alone();
    let pages = 2048;
    let (_, faults) = pagefault::touch_fresh_pages(pages).unwrap();
    assert!(
        faults >= pages as i64 && faults <= pages as i64 + 8,
        "{faults} minor faults for {pages} fresh pages"
    );
}

#[test]
fn pointer_chase_finds_the_l1d_and_l2_at_most_one_step_above_sysfs() {
    let _alone = alone();
    let topo = Topology::this_node().unwrap();
    let cpu = probe::default_cpu();
    let Some(l1d) = topo.cache_of(cpu, 1).and_then(|c| c.size_bytes) else {
        panic!("this machine's sysfs shows no L1d size for CPU {cpu}");
    };
    // Up to 8× the L2 is enough for both boundaries (the full sweep to 4× the
    // LLC is what `hwqos probe memlat` runs).
    let l2 = topo.cache_of(cpu, 2).and_then(|c| c.size_bytes);
    let options = ProbeOptions {
        cpu: Some(cpu),
        repeats: Some(3),
        memlat_max_bytes: Some(l2.unwrap_or(l1d * 16) * 8),
        ..ProbeOptions::default()
    };
    // Robust statistics against other work on a shared machine: each run
    // infers from the median of 3 sweeps per size, and of 3 runs the LARGEST
    // inferred capacity counts — interference (another hyperthread or VM
    // using the same cache) can only make a cache look smaller, never larger.
    let runs: Vec<memlat::MemLatResult> = (0..3)
        .map(|_| memlat::run(&options, Some(&topo), None).unwrap())
        .collect();
    let largest = |i: usize| -> u64 {
        runs.iter()
            .map(|r| r.levels.get(i).map_or(0, |l| l.effective_size_bytes))
            .max()
            .unwrap_or(0)
    };
    let steps = runs[0].steps_per_octave;
    let step = 2f64.powf(1.0 / f64::from(steps)) * 1.01;
    let curves = || {
        runs.iter()
            .map(|r| {
                r.points
                    .iter()
                    .filter(|p| p.size_bytes >= l1d / 4 && p.size_bytes <= l1d * 2)
                    .map(|p| (p.size_bytes / 1024, (p.median_ns * 100.0).round() / 100.0))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    let first = largest(0);
    // On this project's development VM the L1d boundary is exactly the sysfs
    // size in every run (docs/probe.md); on a cloud guest whose host runs
    // another vCPU on the sibling hyperthread the usable L1d shrinks for
    // seconds at a time, so the test accepts down to half the sysfs size.
    assert!(
        first as f64 <= l1d as f64 * step && first >= l1d / 2,
        "L1d inferred at {first} B (largest of 3 runs), sysfs says {l1d} B; curves near the L1d (KiB, ns): {:?}",
        curves()
    );
    if !memlat::within_one_step(first, l1d, steps) {
        eprintln!(
            "note: L1d inferred at {first} B, more than one sweep step below the sysfs {l1d} B \
             (the cache is shared with other work); curves: {:?}",
            curves()
        );
    }
    for r in &runs {
        assert_eq!(r.levels.first().map(|l| l.name.as_str()), Some("L1d"));
    }
    if let Some(l2) = l2 {
        // The L2 boundary is the half-miss point of the creeping L2 curve
        // (docs/probe.md). On this VM the two vCPUs can be hyperthreads of
        // one host core sharing its L2: while the other vCPU is busy (a
        // build, another test job) the usable L2 is 0.5–0.8 of sysfs's. So,
        // like the L1d: the largest of the runs must lie above the L1d and
        // at most one step above the sysfs L2; below one step of it is
        // reported, not failed.
        let mut all: Vec<u64> = runs
            .iter()
            .map(|r| r.levels.get(1).map_or(0, |l| l.effective_size_bytes))
            .collect();
        all.sort_unstable();
        let largest_l2 = all[all.len() - 1];
        let curves_l2 = || {
            runs.iter()
                .map(|r| {
                    r.points
                        .iter()
                        .filter(|p| p.size_bytes >= 64 << 10)
                        .map(|p| (p.size_bytes / 1024, (p.median_ns * 100.0).round() / 100.0))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        assert!(
            largest_l2 as f64 <= l2 as f64 * step && largest_l2 as f64 > first as f64 * step,
            "L2 inferred at {largest_l2} B (largest of 3 runs: {all:?}), sysfs says {l2} B, L1d at {first} B; curves (KiB, ns): {:?}",
            curves_l2()
        );
        if !memlat::within_one_step(largest_l2, l2, steps) {
            eprintln!(
                "note: L2 inferred at {largest_l2} B (runs: {all:?}), more than one sweep step below the sysfs {l2} B \
                 (the L2 is shared with other work); curves: {:?}",
                curves_l2()
            );
        }
    }
    for r in &runs {
        let l = &r.levels;
        assert!(
            l.windows(2).all(|w| w[1].latency_ns > w[0].latency_ns),
            "{l:?}"
        );
    }
}

#[test]
fn no_sleep_strategy_wakes_early() {
    let _alone = alone();
    let series = timer::requests(20, 2.0, 9);
    for s in timer::strategies() {
        let a = timer::measure(&s, &series).unwrap();
        assert_eq!(a.requests, 20);
        assert!(a.aesm_ns >= 0.0 && a.resm >= 0.0, "{s}: {a:?}");
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn tsc_counts_forward() {
    let _alone = alone();
    let a = probe::clock::rdtsc().unwrap();
    let b = probe::clock::rdtsc().unwrap();
    assert!(b > a);
    assert!(probe::clock::tsc_rate(5).unwrap() > 1e6);
}
