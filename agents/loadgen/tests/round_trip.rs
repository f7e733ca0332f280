//! Capture → synthesize → replay from a monitor recording made here: a
//! workload pinned to CPU 1 (CPU, page-fault and context-switch load) is
//! recorded with the monitor engine (the sampler hwqos-monitor and
//! `hwqos record` use) into a `hwqos.recording/1` file; `capture` turns it into
//! targets, `synthesize` finds knobs in closed loop, and `replay --verify`
//! without the loop must reproduce every captured metric within ±3%.
//!
//! On this shared VM the workload's and the replay's own processes are
//! measured (process scopes pinned to CPU 1), not the whole CPU, so other
//! tenants' load does not count; generators run at nice −20 when allowed.
//! The CPU and context-switch generators top up the totals of all generator
//! threads on their CPU (`hwqos_loadsynth::generator::Siblings`), so the open-loop
//! replay does not drift when contention changes what the page-fault and
//! switch generators cost.

use hwqos_core::recording::{CounterClass, RecordedBackend, RecordingHeader, RecordingWriter};
use hwqos_core::Timestamp;
use hwqos_pmu::backend::perf::PerfBackend;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use hwqos_pmu::target::{Resolver, TargetSelector};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_hwqos-loadgen");

fn nice_config(dir: &Path) -> String {
    let p = dir.join("nice.toml");
    let root = nix::unistd::geteuid().is_root();
    std::fs::write(&p, if root { "nice = -20\n" } else { "" }).unwrap();
    p.display().to_string()
}

fn record(pid: u32, path: &Path, seconds: f64, hz: f64) {
    let cfg = SamplerConfig {
        targets: vec![TargetSelector::Pid(pid)],
        event_sets: vec![vec![
            "sw.task_clock".into(),
            "sw.page_faults".into(),
            "sw.context_switches".into(),
        ]],
        rescan_every: 0,
        ..SamplerConfig::default()
    };
    let mut sampler = Sampler::new(
        cfg,
        &Catalog::for_this_node(),
        Box::new(PerfBackend::for_this_node()),
        Resolver::for_this_node(),
    )
    .unwrap();
    let header = RecordingHeader::new(
        hwqos_core::recording::node_name(),
        Timestamp::now(),
        hz,
        RecordedBackend::Perf,
        CounterClass::Software,
    );
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = RecordingWriter::new(file, &header).unwrap();
    let mut ticker = hwqos_core::Ticker::new(Duration::from_secs_f64(1.0 / hz)).unwrap();
    for _ in 0..=(seconds * hz) as usize {
        ticker.wait();
        w.write_frame(&sampler.sample(Timestamp::now())).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn capture_synthesize_replay_reproduces_within_3_percent() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = nice_config(dir.path());
    // The "production" workload.
    let mut workload = Command::new(BIN)
        .args(["--config", &cfg, "generate", "--duration", "30"])
        .args([
            "--knob",
            "cpu_util@1=0.35",
            "--knob",
            "page_fault_rate@1=5000",
        ])
        .args(["--knob", "context_switch_rate@1=1500"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let rec = dir.path().join("prod.jsonl");
    record(workload.id(), &rec, 6.0, 4.0);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(workload.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    assert!(workload.wait().unwrap().success());

    let targets = dir.path().join("targets.json");
    let o = Command::new(BIN)
        .args([
            "capture",
            rec.to_str().unwrap(),
            "-o",
            targets.to_str().unwrap(),
        ])
        .args(["--processes-as-cpu", "1"])
        .args([
            "--metric",
            "cpu_util",
            "--metric",
            "page_fault_rate",
            "--metric",
            "context_switch_rate",
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "capture: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let t = hwqos_loadsynth::targets::LoadTargets::load(&targets).unwrap();
    assert_eq!(t.targets.len(), 3, "{:?}", t.targets);

    let model = dir.path().join("model.json");
    let o = Command::new(BIN)
        .args(["--config", &cfg, "synthesize", targets.to_str().unwrap()])
        .args([
            "-o",
            model.to_str().unwrap(),
            "--measure-processes",
            "self",
            "--timeout",
            "60",
            "--hold",
            "40",
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "synthesize: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&o.stdout));

    let o = Command::new(BIN)
        .args(["--config", &cfg, "replay", model.to_str().unwrap()])
        .args([
            "--duration",
            "10",
            "--verify",
            "--json",
            "--measure-processes",
            "self",
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let devs: Vec<hwqos_loadsynth::synth::Deviation> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(devs.len(), 3, "{devs:?}");
    for d in &devs {
        eprintln!(
            "{}: captured {:.4} replayed {:.4} ({:+.2}%)",
            d.metric,
            d.target,
            d.measured,
            d.relative * 100.0
        );
    }
    for d in &devs {
        assert!(d.relative.abs() <= 0.03, "{d:?}");
    }
}
