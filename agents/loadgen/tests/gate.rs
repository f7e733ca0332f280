//! `hwqos-loadgen gate`: a baseline and a candidate command run bare and
//! under a replayed load model, with known answers — a candidate doing 4×
//! the work shows a positive effect in both conditions; x read with
//! `--x-regex` gives the exact relative effect (and an identical pair an
//! interval of exactly 0); `--fail-on-regression` exits 3 only above its
//! limit; bad input names what was wrong; the load runs exactly during the
//! loaded runs and nothing of it is left afterwards, also after SIGINT.
//!
//! The model is written by hand (knobs fixed at a 30 % CPU share on every
//! CPU, this node's hardware model): synthesizing one would measure the whole
//! CPU, which on a shared test machine holds anything but the target.

use hwqos_core::recording::read_recording;
use hwqos_core::Scope;
use hwqos_loadsynth::actuate::knob_range;
use hwqos_loadsynth::config::LoadConfig;
use hwqos_loadsynth::control::{Controller, Gains};
use hwqos_loadsynth::gate::{self, Condition, GateOptions, Verdict};
use hwqos_loadsynth::knob::StopFlag;
use hwqos_loadsynth::model::{LoadModel, ModelEntry, ModelScope, MODEL_SCHEMA};
use hwqos_loadsynth::LoadMetric;
use hwqos_testsupport::wait_for;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A model holding `share` of every online CPU busy, open loop.
fn model(share: f64) -> LoadModel {
    let node = hwqos_topology::HardwareModel::this_node().unwrap();
    let cfg = LoadConfig::default();
    let range = knob_range(LoadMetric::CpuUtil, &cfg);
    let entries = node
        .topology
        .cpus
        .iter()
        .filter(|c| c.online)
        .map(|c| ModelEntry {
            metric: LoadMetric::CpuUtil,
            cpu: c.id,
            target: share,
            knob: share,
            controller: Controller::new(
                share,
                share,
                range,
                Gains::default_for(LoadMetric::CpuUtil),
            )
            .state(),
            tolerance: (0.01, 0.0),
            measured: Some(share),
            series: Vec::new(),
        })
        .collect();
    let m = LoadModel {
        schema: MODEL_SCHEMA.into(),
        created: "2026-01-01T00:00:00Z".into(),
        version: 0,
        node,
        convergence_s: 0.0,
        samples: 0,
        period_s: 0.25,
        measured_on: ModelScope::WholeCpu,
        entries,
    };
    m.validate().unwrap();
    m
}

fn model_file(dir: &Path) -> String {
    let p = dir.join("model.json");
    model(0.3).save(&p).unwrap();
    p.display().to_string()
}

fn loadgen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hwqos-loadgen"))
        .args(args)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs the gate with `--json` and returns the report.
fn gate_json(model: &str, args: &[&str]) -> (Output, Value) {
    let mut all = vec!["gate", model, "-r", "2", "--settle", "0.1", "--json"];
    all.extend_from_slice(args);
    let o = loadgen(&all);
    let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o, v)
}

fn condition<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["condition"] == name)
        .unwrap()
}

fn triple(v: &Value) -> (f64, f64, f64) {
    let a = v.as_array().unwrap();
    (
        a[0].as_f64().unwrap(),
        a[1].as_f64().unwrap(),
        a[2].as_f64().unwrap(),
    )
}

/// A shell loop of `n` iterations: CPU work proportional to `n`.
fn work(n: u32) -> String {
    format!("i=0; while [ $i -lt {n} ]; do i=$((i+1)); done")
}

#[test]
fn a_candidate_doing_four_times_the_work_is_slower_in_both_conditions() {
    let dir = tempfile::tempdir().unwrap();
    let m = model_file(dir.path());
    let rec = dir.path().join("rec");
    let (o, r) = gate_json(
        &m,
        &[
            "--baseline",
            &work(50_000),
            "--candidate",
            &work(200_000),
            "--record-dir",
            rec.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(r["x"], "wall time (s)");
    for c in ["bare", "loaded"] {
        let c = condition(&r, c);
        let (effect, _, _) = triple(&c["effect_pct"]);
        // 4× the iterations: about +300 %; whatever the machine's other
        // load does to either, the sign and a large effect remain.
        assert!(effect > 50.0, "{c}");
        assert_eq!(c["runs"], 2);
        // The candidate's CPU time (its counters) is larger too.
        let cb = c["counters"][0]["task_clock_ns"].as_f64().unwrap();
        let cc = c["counters"][1]["task_clock_ns"].as_f64().unwrap();
        assert!(cb > 0.0 && cc > 2.0 * cb, "{c}");
    }
    // Interleaved: repetition 0 bare then loaded, repetition 1 loaded then
    // bare, baseline before candidate in each.
    let order: Vec<(String, String)> = r["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["condition"].as_str().unwrap().to_string(),
                x["version"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("bare", "baseline"),
        ("bare", "candidate"),
        ("loaded", "baseline"),
        ("loaded", "candidate"),
        ("loaded", "baseline"),
        ("loaded", "candidate"),
        ("bare", "baseline"),
        ("bare", "candidate"),
    ];
    assert_eq!(
        order,
        want.map(|(a, b)| (a.to_string(), b.to_string())).to_vec()
    );
    // One recording per version and condition, one frame per run, holding
    // the run's x and counters; readable by every hwqos tool.
    let recordings = r["recordings"].as_array().unwrap();
    assert_eq!(recordings.len(), 4);
    for v in ["baseline", "candidate"] {
        for c in ["bare", "loaded"] {
            let path = rec.join(format!("{v}-{c}.jsonl"));
            let read = read_recording(&path).unwrap();
            assert_eq!(read.frames.len(), 2, "{}", path.display());
            let xs: Vec<f64> = r["runs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["condition"] == c && x["version"] == v)
                .map(|x| x["x"].as_f64().unwrap())
                .collect();
            for (f, x) in read.frames.iter().zip(&xs) {
                assert_eq!(f.value(&Scope::System, "app.gate.x"), Some(*x));
                assert!(f.value(&Scope::System, "sw.task_clock").unwrap() > 0.0);
            }
        }
    }
    // `hwqos diff`'s engine reads the loaded pair and finds the report's
    // means of x and of the CPU time.
    let cmp = hwqos_core::compare::compare(
        &read_recording(rec.join("baseline-loaded.jsonl")).unwrap(),
        &read_recording(rec.join("candidate-loaded.jsonl")).unwrap(),
        &hwqos_core::compare::CompareOptions::default(),
    )
    .unwrap();
    let loaded = condition(&r, "loaded");
    let change = |m: &str| {
        cmp.changes
            .iter()
            .find(|c| c.metric.as_str() == m)
            .unwrap_or_else(|| panic!("{m} not compared: {cmp:?}"))
    };
    let close = |a: f64, b: &Value| (a - b.as_f64().unwrap()).abs() <= 1e-9 * a.abs().max(1.0);
    let x = change("app.gate.x");
    assert!(close(x.mean_a, &loaded["baseline_mean"]), "{x:?}");
    assert!(close(x.mean_b, &loaded["candidate_mean"]), "{x:?}");
    let cpu = change("sw.task_clock");
    assert!(
        close(cpu.mean_a, &loaded["counters"][0]["task_clock_ns"]),
        "{cpu:?}"
    );
    assert!(
        close(cpu.mean_b, &loaded["counters"][1]["task_clock_ns"]),
        "{cpu:?}"
    );
    // The text report names the recordings to compare. The commands fail
    // (exit 9) unless no signal is blocked in them: the agent's
    // SIGTERM/SIGINT/SIGHUP mask (its signal thread takes them) must not
    // reach the commands, or a `kill` in them would do nothing.
    // (dash unblocks them for a foreground command, not for a background
    // job: the check runs as one.)
    let unblocked = "grep -q '^SigBlk:[[:space:]]*0*$' /proc/self/status & wait $! || exit 9";
    let o = loadgen(&[
        "gate",
        &m,
        "-r",
        "2",
        "--settle",
        "0",
        "--baseline",
        unblocked,
        "--candidate",
        unblocked,
        "--record-dir",
        rec.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&format!(
            "hwqos diff {} {}",
            rec.join("baseline-loaded.jsonl").display(),
            rec.join("candidate-loaded.jsonl").display()
        )),
        "{text}"
    );
}

#[test]
fn x_from_stdout_gives_the_exact_effect_and_the_gate_fails_only_above_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let m = model_file(dir.path());
    let re = r"rtt=([0-9.]+) ms";
    let svg = dir.path().join("gate.svg");
    let (o, r) = gate_json(
        &m,
        &[
            "--baseline",
            "echo start; echo 'rtt=10 ms'",
            "--candidate",
            "echo 'rtt=11.5 ms'; echo rtt=99 ms",
            "--x-regex",
            re,
            "--plot",
            svg.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for c in ["bare", "loaded"] {
        let c = condition(&r, c);
        assert_eq!(c["baseline_mean"], 10.0);
        assert_eq!(c["candidate_mean"], 11.5);
        let (e, lo, hi) = triple(&c["effect_pct"]);
        assert!((e - 15.0).abs() < 1e-9 && lo == e && hi == e, "{c}");
        assert_eq!(c["verdict"], "regression");
    }
    // The plot: both panels with the effect and verdict, both versions
    // named with their means, and the 4 baseline runs as 4 dots (-r 2, two
    // conditions; the legend has one more per panel).
    let plot = std::fs::read_to_string(&svg).unwrap();
    for label in [
        "bare: +15.0 % [+15.0 %, +15.0 %], regression",
        "loaded: +15.0 % [+15.0 %, +15.0 %], regression",
        "baseline (mean 10.0000)",
        "candidate (mean 11.5000)",
    ] {
        assert!(plot.contains(label), "no `{label}` in the SVG");
    }
    assert_eq!(plot.matches("<circle").count(), 4 + 2);
    // Higher is better: the same change is an improvement.
    let (o, r) = gate_json(
        &m,
        &[
            "--baseline",
            "echo rtt=10 ms",
            "--candidate",
            "echo rtt=11.5 ms",
            "--x-regex",
            re,
            "--x-direction",
            "higher",
            "--fail-on-regression",
            "0",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let c = condition(&r, "loaded");
    assert_eq!(c["verdict"], "improvement");
    assert!((triple(&c["regression_pct"]).0 + 15.0).abs() < 1e-9);
    // Identical commands: an effect of 0 whose interval contains 0.
    let (o, r) = gate_json(
        &m,
        &[
            "--baseline",
            "echo rtt=10 ms",
            "--candidate",
            "echo rtt=10 ms",
            "--x-regex",
            re,
            "--fail-on-regression",
            "0",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for c in ["bare", "loaded"] {
        let c = condition(&r, c);
        let (e, lo, hi) = triple(&c["effect_pct"]);
        assert!(e == 0.0 && lo <= 0.0 && hi >= 0.0, "{c}");
        assert_eq!(c["verdict"], "no_change");
    }
    // +15 % fails a 10 % gate (exit 3, saying so), passes a 20 % one.
    let fail = |pct: &str| {
        gate_json(
            &m,
            &[
                "--baseline",
                "echo rtt=10 ms",
                "--candidate",
                "echo rtt=11.5 ms",
                "--x-regex",
                re,
                "--fail-on-regression",
                pct,
            ],
        )
        .0
    };
    let o = fail("10");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("regresses by +15.00% under load"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fail("20").status.code(), Some(0));
}

#[test]
fn bad_input_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let m = model_file(dir.path());
    let run = |args: &[&str]| {
        let mut all = vec!["gate", &m, "-r", "2", "--settle", "0"];
        all.extend_from_slice(args);
        loadgen(&all)
    };
    // A command that fails: which one, which run, its status and stderr.
    let o = run(&[
        "--baseline",
        "true",
        "--candidate",
        "echo broken >&2; exit 3",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("candidate run 1 (bare): `echo broken >&2; exit 3` exited with status 3")
            && e.contains("broken"),
        "{e}"
    );
    // A regex without a group.
    let o = run(&[
        "--baseline",
        "true",
        "--candidate",
        "true",
        "--x-regex",
        "rtt=[0-9]+",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("has 0 capture groups"),
        "{}",
        stderr(&o)
    );
    // A regex that matches nothing.
    let o = run(&[
        "--baseline",
        "echo latency 5",
        "--candidate",
        "true",
        "--x-regex",
        "rtt=([0-9]+)",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("baseline run 1 (bare)")
            && stderr(&o).contains("matched nothing in its stdout (it was `latency 5`)"),
        "{}",
        stderr(&o)
    );
    // A missing model.
    let missing = dir.path().join("nope.json");
    let o = loadgen(&[
        "gate",
        missing.to_str().unwrap(),
        "--baseline",
        "true",
        "--candidate",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("nope.json"), "{}", stderr(&o));
    // One repetition cannot give an interval; a bad direction.
    let o = loadgen(&[
        "gate",
        &m,
        "-r",
        "1",
        "--baseline",
        "true",
        "--candidate",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("at least 2 repetitions"),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "--baseline",
        "true",
        "--candidate",
        "true",
        "--x-direction",
        "up",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("`up`"), "{}", stderr(&o));
}

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

#[test]
fn the_load_runs_exactly_during_the_loaded_runs() {
    // In this process (the only test here that runs the gate in-process):
    // each command counts the generator threads of its parent, the gate, and
    // prints 1 + that count as x.
    let m = model(0.3);
    let generators = m.entries.len() as f64;
    let count =
        "n=$(grep -l '^loadgen-' /proc/$PPID/task/*/comm 2>/dev/null | wc -l); echo x=$((n+1))";
    let opts = GateOptions {
        baseline: count.into(),
        candidate: count.into(),
        repetitions: 2,
        x_regex: Some("x=([0-9]+)".into()),
        settle: Duration::from_millis(100),
        ..GateOptions::default()
    };
    let mut seen = 0;
    let report = gate::gate(
        &m,
        &opts,
        &LoadConfig::default(),
        &StopFlag::new(),
        &mut |_| seen += 1,
    )
    .unwrap();
    assert_eq!(seen, 8);
    for r in &report.runs {
        let want = match r.condition {
            Condition::Bare => 1.0,
            Condition::Loaded => 1.0 + generators,
        };
        assert_eq!(r.x, want, "{r:?}");
    }
    let loaded = report.condition(Condition::Loaded).unwrap();
    assert_eq!(loaded.verdict, Verdict::NoChange);
    assert_eq!(loaded.baseline_mean, 1.0 + generators);
    // Nothing of the load is left.
    let left: Vec<String> = thread_names()
        .into_iter()
        .filter(|n| n.starts_with("loadgen-") || n == "gate-load")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // A failing command under load: the error, and still nothing left.
    let opts = GateOptions {
        baseline: "if grep -q '^loadgen-' /proc/$PPID/task/*/comm; then exit 7; fi".into(),
        candidate: "true".into(),
        x_regex: None,
        ..opts
    };
    let e = gate::gate(
        &m,
        &opts,
        &LoadConfig::default(),
        &StopFlag::new(),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("baseline run 1 (loaded): `if grep")
            && e.to_string().contains("exited with status 7"),
        "{e}"
    );
    assert!(!thread_names()
        .iter()
        .any(|n| n.starts_with("loadgen-") || n == "gate-load"));
}

#[test]
fn sigint_during_a_loaded_run_kills_the_command_and_stops_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let m = model_file(dir.path());
    let pidfile: PathBuf = dir.path().join("pid");
    // Bare runs end at once; the first loaded run writes its PID and sleeps.
    let cmd = format!(
        "if grep -q '^loadgen-' /proc/$PPID/task/*/comm; then echo $$ > {}; exec sleep 60; fi",
        pidfile.display()
    );
    let child = Command::new(env!("CARGO_BIN_EXE_hwqos-loadgen"))
        .args([
            "gate",
            &m,
            "-r",
            "2",
            "--settle",
            "0.1",
            "--baseline",
            &cmd,
            "--candidate",
            &cmd,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let gate_pid = child.id();
    wait_for(
        "the loaded command to start",
        Duration::from_secs(30),
        || std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n')),
    );
    let sleeper: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The load runs in the gate now.
    let generators = || {
        std::fs::read_dir(format!("/proc/{gate_pid}/task"))
            .map(|d| {
                d.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                    .filter(|n| n.starts_with("loadgen-"))
                    .count()
            })
            .unwrap_or(0)
    };
    assert!(generators() > 0);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(gate_pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("stopped (SIGINT/SIGTERM) during the baseline run 1 (loaded)"),
        "{}",
        stderr(&o)
    );
    // The command was killed, not left to the init process.
    assert!(
        !Path::new(&format!("/proc/{sleeper}")).exists(),
        "sleep {sleeper} is still running"
    );
}
