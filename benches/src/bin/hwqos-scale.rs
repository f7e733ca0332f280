//! How the sampler and the monitor's database scale with the number of
//! monitored processes and CPUs (issue 22, item 5), for
//! `docs/experiments/scale.sh`.
//!
//! - `--sim PROCS CPUS`: the sampler on the simulated PMU (hwqos-pmu's
//!   `SimBackend`, 6 hardware counters per context) counting 4 events
//!   (3 hardware, 1 software) per process for `PROCS` processes of a
//!   synthetic `/proc` tree and per CPU for `CPUS` CPUs, ticking at 10 Hz of
//!   virtual time, every frame pushed into a `FrameDb` with the monitor's
//!   default bounds (30,000 frames, 256 MiB). It ticks until the database is
//!   full (it evicted a frame) or `--max-ticks`, and reports the CPU time of
//!   `sample()` + `push()` per tick (thread CPU time; the simulator's own
//!   clock advance is outside it) and the peak RSS.
//! - `--real PROCS`: the same with the `perf_event` backend of this node on
//!   `PROCS` real processes (`sleep` children) and every CPU, 4 software
//!   events (this node has no hardware PMU), `--ticks` ticks at 10 Hz of
//!   wall time, the database holding all of them.
//!
//! Prints one JSON line.

use hwqos_core::{Frame, Timestamp};
use hwqos_monitor::db::FrameDb;
use hwqos_pmu::backend::sim::{Script, SimBackend};
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use hwqos_pmu::target::{Resolver, TargetSelector};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICK_NS: u64 = 100_000_000;
const DB_FRAMES: usize = 30_000;
const DB_BYTES: usize = 256 << 20;
const SIM_EVENTS: [(&str, f64); 4] = [
    ("hw.cycles", 2.0),
    ("hw.instructions", 3.0),
    ("hw.llc.miss", 0.001),
    ("sw.task_clock", 1.0),
];
const REAL_EVENTS: [&str; 4] = [
    "sw.task_clock",
    "sw.context_switches",
    "sw.page_faults",
    "sw.cpu_migrations",
];

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `VmHWM` (peak RSS) and `VmRSS` of this process, in KiB.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// A `/proc` tree of `n` single-threaded processes named `simproc`
/// (pids 1000..), which is all the resolver reads of them.
fn synthetic_proc(root: &Path, n: u32) {
    for pid in 1000..1000 + n {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(dir.join("task").join(pid.to_string())).expect("proc dir");
        std::fs::write(dir.join("comm"), "simproc\n").expect("comm");
        std::fs::write(dir.join("cmdline"), "simproc\0").expect("cmdline");
    }
}

/// Per-tick CPU times (ns) in, the summary out.
struct Costs(Vec<u64>);

impl Costs {
    fn summary(mut self) -> serde_json::Value {
        self.0.sort_unstable();
        let n = self.0.len().max(1);
        let mean = self.0.iter().sum::<u64>() as f64 / n as f64;
        serde_json::json!({
            "ticks": self.0.len(),
            "cpu_us_per_tick_median": self.0.get(n / 2).copied().unwrap_or(0) as f64 / 1e3,
            "cpu_us_per_tick_mean": mean / 1e3,
            "cpu_us_per_tick_p99": self.0.get(n * 99 / 100).copied().unwrap_or(0) as f64 / 1e3,
        })
    }
}

fn samples(frame: &Frame) -> usize {
    frame.samples.len()
}

fn sim(procs: u32, cpus: u32, max_ticks: u64) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("hwqos-scale-{}", std::process::id()));
    synthetic_proc(&dir, procs);
    // One scheduling quantum per tick: the 4 events fit the 6 counters, so
    // nothing multiplexes and a finer quantum would only slow the simulator.
    let backend = SimBackend::new(6).with_quantum(TICK_NS);
    for (metric, rate) in SIM_EVENTS {
        backend.script(metric, Script::Rate(rate));
    }
    let cfg = SamplerConfig {
        targets: vec![TargetSelector::Name("simproc".into())],
        per_cpu: cpus > 0,
        cpus: (cpus > 0).then(|| (0..cpus).collect()),
        event_sets: vec![SIM_EVENTS.iter().map(|(m, _)| m.to_string()).collect()],
        rescan_every: 0,
        ..SamplerConfig::default()
    };
    let mut sampler = Sampler::new(
        cfg,
        &Catalog::for_this_node(),
        Box::new(backend.clone()),
        Resolver::new(dir.clone(), None),
    )
    .expect("sampler on the simulated PMU");
    let mut db = FrameDb::new(DB_FRAMES, DB_BYTES);
    let mut costs = Vec::new();
    let mut last_samples = 0;
    let mut full_at = None;
    for tick in 0..max_ticks {
        backend.advance(TICK_NS);
        let time = Timestamp {
            mono_ns: backend.now(),
            wall_ns: backend.now() as i64,
        };
        let t0 = thread_cpu_ns();
        let frame = sampler.sample(time);
        last_samples = samples(&frame);
        db.push(Arc::new(frame));
        costs.push(thread_cpu_ns() - t0);
        if db.evicted() > 0 {
            full_at = Some(tick + 1);
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (hwm, rss) = rss_kib();
    serde_json::json!({
        "backend": "simulated",
        "processes": procs,
        "cpus": cpus,
        "samples_per_frame": last_samples,
        "cost": Costs(costs).summary(),
        "db_frames": db.len(),
        "db_bytes": db.bytes(),
        "db_full_at_tick": full_at,
        "peak_rss_kib": hwm,
        "rss_kib": rss,
    })
}

fn real(procs: u32, ticks: u64) -> serde_json::Value {
    let mut children: Vec<std::process::Child> = (0..procs)
        .map(|_| {
            std::process::Command::new("sleep")
                .arg("600")
                .spawn()
                .expect("spawn sleep")
        })
        .collect();
    let cfg = SamplerConfig {
        targets: children
            .iter()
            .map(|c| TargetSelector::Pid(c.id()))
            .collect(),
        per_cpu: true,
        event_sets: vec![REAL_EVENTS.iter().map(|m| m.to_string()).collect()],
        rescan_every: 0,
        ..SamplerConfig::default()
    };
    let mut sampler = Sampler::for_this_node(cfg).expect("perf_event sampler");
    let mut db = FrameDb::new(DB_FRAMES, DB_BYTES);
    let mut costs = Vec::new();
    let mut last_samples = 0;
    let start = Instant::now();
    for tick in 0..ticks {
        let due = start + Duration::from_nanos(TICK_NS * tick);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let t0 = thread_cpu_ns();
        let frame = sampler.sample(Timestamp::now());
        last_samples = samples(&frame);
        db.push(Arc::new(frame));
        costs.push(thread_cpu_ns() - t0);
    }
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let (hwm, rss) = rss_kib();
    serde_json::json!({
        "backend": "perf_event (software events)",
        "processes": procs,
        "cpus": sampler.targets().iter().filter(|s| matches!(s, hwqos_core::Scope::Cpu { .. })).count(),
        "samples_per_frame": last_samples,
        "cost": Costs(costs).summary(),
        "db_frames": db.len(),
        "db_bytes": db.bytes(),
        "peak_rss_kib": hwm,
        "rss_kib": rss,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> u64 {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| usage())
    };
    let flag = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .map(|i| num(i + 1))
            .unwrap_or(default)
    };
    let out = match args.first().map(String::as_str) {
        Some("--sim") => sim(num(1) as u32, num(2) as u32, flag("--max-ticks", 40_000)),
        Some("--real") => real(num(1) as u32, flag("--ticks", 100)),
        _ => usage(),
    };
    println!("{out}");
}

fn usage() -> ! {
    eprintln!("usage: hwqos-scale --sim PROCS CPUS [--max-ticks N] | --real PROCS [--ticks N]");
    std::process::exit(2)
}
