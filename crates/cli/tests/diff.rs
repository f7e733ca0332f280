//! `hwqos diff` end to end, on recordings this test makes with the real
//! `hwqos record` of a paced workload (`hwqos-testload --period-ms`), counted
//! with kernel software events (page faults work without a PMU).
//!
//! The workload touches a fixed number of fresh pages every 10 ms on absolute
//! deadlines, so its page faults per tick do not depend on how much CPU the
//! (shared, 2-core) machine gives it: two recordings of the same workload
//! differ only by sampling noise, and a recording with 20 % more pages per
//! unit of work has 20 % more page faults (a little less: the start-up faults
//! of the process are the same in both).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HWQOS: &str = env!("CARGO_BIN_EXE_hwqos");
const TESTLOAD: &str = env!("CARGO_BIN_EXE_hwqos-testload");

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Starts `hwqos record` of `ms` milliseconds of the paced workload touching
/// `pages` pages per 10 ms unit, sampled at 50 Hz.
fn start_recording(out: &Path, pages: u32, ms: u32) -> std::process::Child {
    Command::new(HWQOS)
        .args(["record", "-o"])
        .arg(out)
        .args(["-F", "50", "-e", "sw.page_faults,sw.task_clock", "--"])
        .arg(TESTLOAD)
        .args(["--period-ms", "10", "--for-ms"])
        .arg(ms.to_string())
        .arg("--pages")
        .arg(pages.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start hwqos record")
}

/// Records every `(path, pages)` for `ms` milliseconds at once and waits for
/// all of them.
fn record_all(jobs: &[(PathBuf, u32)], ms: u32) {
    let children: Vec<_> = jobs
        .iter()
        .map(|(p, pages)| start_recording(p, *pages, ms))
        .collect();
    for c in children {
        let o = c.wait_with_output().expect("wait for hwqos record");
        assert!(o.status.success(), "hwqos record: {}", text(&o.stderr));
    }
}

fn diff(args: &[&str]) -> Output {
    Command::new(HWQOS)
        .arg("diff")
        .args(args)
        .output()
        .expect("run hwqos diff")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The page-fault row of the workload process in `hwqos diff --json`.
fn page_fault_row(a: &Path, b: &Path) -> Value {
    let o = diff(&[
        s(a),
        s(b),
        "--json",
        "--scope",
        "hwqos-testload",
        "--metric",
        "sw.page_faults",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(doc["schema"], "hwqos.diff/1");
    let rows = doc["changes"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{doc}");
    rows[0].clone()
}

#[test]
fn an_injected_page_fault_regression_is_found_and_gated_and_a_a_pairs_show_no_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: String| dir.path().join(name);
    let (base, worse) = (path("base.jsonl".into()), path("worse.jsonl".into()));
    // 3 s each: the sampler's late ticks (this machine is shared) make the
    // per-tick counts vary by ±50 %, so the regression needs ~150 ticks to
    // stand well clear of the interval.
    record_all(&[(base.clone(), 100), (worse.clone(), 120)], 3000);

    // The regression: +20 % pages per unit of work, so about +19.7 % page
    // faults per tick (the process's start-up faults are the same in both);
    // a tick more or less in one recording moves the per-tick mean by ~1 %.
    let row = page_fault_row(&base, &worse);
    eprintln!("injected +20 % pages: {row}");
    assert_eq!(row["verdict"], "regressed", "{row}");
    assert_eq!(row["direction"], "higher_is_worse");
    let rel = row["relative"].as_f64().unwrap();
    assert!((0.12..=0.28).contains(&rel), "relative change {rel}: {row}");
    assert!(row["relative_low"].as_f64().unwrap() > 0.0, "{row}");
    assert!(row["scope"].as_str().unwrap().contains('→'), "{row}");
    // Reversed, the same change is an improvement.
    assert_eq!(page_fault_row(&worse, &base)["verdict"], "improved");

    // The gate fails (exit 1) on +20 % against +5 %, passes against +50 %.
    let svg = path("diff.svg".into());
    let o = diff(&[
        s(&base),
        s(&worse),
        "--scope",
        "process",
        "--fail-on",
        "sw.page_faults>+5%",
        "--plot",
        s(&svg),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("gate `sw.page_faults>+5%` failed"),
        "{}",
        text(&o.stderr)
    );
    let out = text(&o.stdout);
    let table_row = out
        .lines()
        .find(|l| l.contains("hwqos-testload") && l.contains(" sw.page_faults "))
        .unwrap_or_else(|| panic!("no page-fault row in\n{out}"));
    assert!(table_row.ends_with("regressed"), "{table_row}");
    assert!(out.contains("95% CI of change"), "{out}");
    // Software events only: one line about the CPI, no invented numbers.
    assert!(
        out.contains("CPI: not in these recordings (counters: software in A, software in B)"),
        "{out}"
    );
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(
        doc.starts_with("<svg") && doc.contains("sw.page_faults (regressed)"),
        "{}",
        &doc[..200.min(doc.len())]
    );
    let o = diff(&[s(&base), s(&worse), "--fail-on", "sw.page_*>+50%"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));

    // A/A: 20 pairs of recordings of the same workload, two pairs at a time.
    let mut no_change = 0;
    let mut verdicts = Vec::new();
    for batch in 0..10 {
        let names: Vec<(PathBuf, u32)> = (0..4)
            .map(|k| (path(format!("aa{batch}_{k}.jsonl")), 100))
            .collect();
        record_all(&names, 1000);
        for pair in names.chunks(2) {
            let row = page_fault_row(&pair[0].0, &pair[1].0);
            no_change += usize::from(row["verdict"] == "no_change");
            verdicts.push(format!(
                "{} {:+.2}% [{:+.2}%, {:+.2}%]",
                row["verdict"],
                row["relative"].as_f64().unwrap_or(f64::NAN) * 100.0,
                row["relative_low"].as_f64().unwrap_or(f64::NAN) * 100.0,
                row["relative_high"].as_f64().unwrap_or(f64::NAN) * 100.0
            ));
        }
    }
    eprintln!("A/A verdicts:\n{}", verdicts.join("\n"));
    assert!(
        no_change >= 19,
        "A/A pairs without change: {no_change}/20\n{verdicts:#?}"
    );
}

#[test]
fn bad_input_is_a_clear_error_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.jsonl");
    record_all(&[(good.clone(), 10)], 300);
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "hello\n").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![s(&good), s(&bad)],
            "bad.jsonl:1: not a recording header",
        ),
        (
            vec![s(&good), "/nonexistent/b.jsonl"],
            "/nonexistent/b.jsonl",
        ),
        (
            vec![s(&good), s(&good), "--fail-on", "sw.page_faults>>5%"],
            "--fail-on: gate `sw.page_faults>>5%`",
        ),
        (
            vec![s(&good), s(&good), "--fail-on", "sw.page_faults=5%"],
            "no `>` or `<`",
        ),
        (
            vec![s(&good), s(&good), "--fail-on", "sw.no_such>+5%"],
            "gate `sw.no_such>+5%` matches no compared metric",
        ),
        (
            vec![s(&good), s(&good), "--metric", "hw.*"],
            "--metric: metric `hw.*` matches no metric",
        ),
        (
            vec![s(&good), s(&good), "--scope", "cpu:999"],
            "--scope: scope `cpu:999`",
        ),
        (
            vec![s(&good), s(&good), "--confidence", "95"],
            "--confidence 95",
        ),
    ];
    for (args, expect) in cases {
        let o = diff(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(expect),
            "{args:?}: expected `{expect}` in {}",
            text(&o.stderr)
        );
    }
    // A recording compared with itself: no change anywhere, gates pass.
    let o = diff(&[s(&good), s(&good), "--json", "--fail-on", "sw.*>+0%"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["failed_gates"], 0);
    for row in doc["changes"].as_array().unwrap() {
        assert_eq!(row["verdict"], "no_change", "{row}");
        assert_eq!(row["diff"], 0.0, "{row}");
    }
}
