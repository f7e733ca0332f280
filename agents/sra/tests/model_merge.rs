//! Issue 19 regression: `find-limit --model` and `analyse --model` write the
//! same sensitivity model file, and neither erases what the other found.
//! Before the conversion from an analysis to a model entry was one function
//! in hwqos-sched, `analyse --model` replaced the entry with empty quotas.

use hwqos_core::recording::{CounterClass, RecordedBackend, RecordingHeader, RecordingWriter};
use hwqos_core::{Frame, MetricName, Sample, Scope, Timestamp};
use hwqos_sched::model::SensitivityModel;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hwqos-sra"))
}

/// A recording where the process `pid`'s page faults follow its performance
/// (perfectly anti-correlated, as in the `analyse` known-answer test).
fn write_recording(path: &Path, pid: u32) {
    let header = RecordingHeader::new(
        "test",
        Timestamp::default(),
        10.0,
        RecordedBackend::Simulated,
        CounterClass::Software,
    );
    let mut w = RecordingWriter::new(std::fs::File::create(path).unwrap(), &header).unwrap();
    for i in 0..300u64 {
        let t = Timestamp {
            mono_ns: i * 100_000_000,
            wall_ns: 0,
        };
        let slow = (i as f64 * 0.05).sin();
        let sample = |m: &str, v: f64| Sample {
            time: t,
            scope: Scope::Process { pid },
            metric: MetricName::new(m).unwrap(),
            value: v,
            counter: None,
        };
        let frame = Frame {
            seq: i,
            time: t,
            interval_ns: 100_000_000,
            samples: vec![
                sample("sw.page_faults", 1000.0 + 300.0 * slow),
                sample("sw.context_switches", ((i * 7919) % 13) as f64),
                sample("app.rate", 5e5 - 1e5 * slow),
            ],
            labels: vec![],
        };
        w.write_frame(&frame).unwrap();
    }
    w.finish().unwrap();
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn analyse_model_keeps_the_quotas_find_limit_found() {
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("model.json");
    // The victim: page faults it causes are what find-limit counts.
    let mut victim = Command::new(bin())
        .args(["leech", "faults", "--working-set", "1048576"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = victim.id();
    // x is constant, so the victim never degrades: one step at full intensity.
    let found = run_ok(
        Command::new(bin())
            .args(["find-limit", "--pid", &pid.to_string()])
            .args(["--event", "sw.page_faults", "--x-command", "echo 100"])
            .args(["--leech", "cpu", "--baseline-s", "0.3", "--step-s", "0.3"])
            .args(["--step", "1", "--period-ms", "20", "--model"])
            .arg(&model_path),
    );
    let result: serde_json::Value = serde_json::from_str(&found).unwrap();
    let quota = result["quota_per_period"].as_u64().unwrap();
    assert!(quota >= 1);
    let after_limit = SensitivityModel::load(&model_path).unwrap();
    let selector = format!("pid:{pid}");
    let entry = |m: &SensitivityModel| {
        m.processes
            .iter()
            .find(|p| p.process.to_string() == selector)
            .cloned()
            .unwrap_or_else(|| panic!("no model entry for {selector}: {m:?}"))
    };
    assert_eq!(entry(&after_limit).quotas["sw.page_faults"], quota);
    assert_eq!(entry(&after_limit).period_us, 20_000);

    // Then the correlation analysis of the same process, into the same file.
    let rec = dir.path().join("rec.jsonl");
    write_recording(&rec, pid);
    run_ok(
        Command::new(bin())
            .arg("analyse")
            .arg(&rec)
            .args(["--x", "app.rate", "--model"])
            .arg(&model_path),
    );
    let _ = victim.kill();
    let _ = victim.wait();
    let merged = SensitivityModel::load(&model_path).unwrap();
    assert_eq!(merged.processes.len(), 1, "{merged:?}");
    let e = entry(&merged);
    assert_eq!(
        e.sensitive_to.first().map(|s| s.resource.as_str()),
        Some("sw.page_faults"),
        "the analysis found the planted resource: {e:?}"
    );
    assert_eq!(
        e.quotas.get("sw.page_faults"),
        Some(&quota),
        "analyse --model erased the quota find-limit found: {e:?}"
    );
    assert_eq!(e.period_us, 20_000, "and its period: {e:?}");
    assert_eq!(
        e.cpu_demand,
        entry(&after_limit).cpu_demand,
        "a recording without task_clock leaves the CPU demand as it was"
    );
}
