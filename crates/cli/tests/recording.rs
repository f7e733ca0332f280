//! `hwqos record` / `report` / `plot` / `list` / `top` end to end.

use serde_json::Value;
use std::process::{Command, Output};

const HWQOS: &str = env!("CARGO_BIN_EXE_hwqos");
const TESTLOAD: &str = env!("CARGO_BIN_EXE_hwqos-testload");

fn hwqos(args: &[&str]) -> Output {
    Command::new(HWQOS).args(args).output().expect("run hwqos")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn record_report_and_plot_a_command() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("run.jsonl");
    let csv = dir.path().join("run.csv");
    let svg = dir.path().join("run.svg");
    let (rec_s, csv_s, svg_s) = (
        rec.to_str().unwrap(),
        csv.to_str().unwrap(),
        svg.to_str().unwrap(),
    );
    let o = hwqos(&[
        "record",
        "-o",
        rec_s,
        "--csv",
        csv_s,
        "-F",
        "20",
        "-e",
        "sw.page_faults,sw.context_switches",
        "--",
        TESTLOAD,
        "--pages",
        "20000",
        "--sleep-ms",
        "200",
        "--exit",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));

    // The recording's page faults of the command add up to the pages it touched.
    let body = std::fs::read_to_string(&rec).unwrap();
    let mut lines = body.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["schema"], "hwqos.recording/1");
    assert_eq!(header["counters"], "software");
    let mut faults = 0.0;
    let mut pid = None;
    for l in lines {
        let frame: Value = serde_json::from_str(l).unwrap();
        for s in frame["samples"].as_array().unwrap() {
            if s["scope"]["kind"] == "process" && s["metric"] == "sw.page_faults" {
                faults += s["value"].as_f64().unwrap();
                pid = s["scope"]["pid"].as_u64();
            }
        }
    }
    assert!(
        (20_000.0..=20_000.0 * 1.03).contains(&faults),
        "faults {faults}"
    );
    let pid = pid.expect("process samples");
    assert!(std::fs::read_to_string(&csv)
        .unwrap()
        .starts_with("seq,mono_ns,wall_time,scope,label,"));

    let o = hwqos(&["report", rec_s, "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = rows
        .iter()
        .find(|r| r["scope"] == format!("pid:{pid}") && r["metric"] == "sw.page_faults")
        .expect("page-fault row");
    assert_eq!(row["schema"], "hwqos.report/1");
    assert_eq!(row["label"], "hwqos-testload");
    let n = row["count"].as_f64().unwrap();
    assert!((row["mean"].as_f64().unwrap() * n - faults).abs() < 1e-6 * faults);
    assert_eq!(row["multiplexed_share"], 0.0);
    let o = hwqos(&["report", rec_s]);
    assert!(text(&o.stdout).contains("95% CI of mean"));

    let scope = format!("pid:{pid}");
    let o = hwqos(&[
        "plot",
        rec_s,
        "-o",
        svg_s,
        "--scope",
        &scope,
        "--metric",
        "sw.page_faults",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(
        doc.starts_with("<svg") && doc.contains("sw.page_faults [events]") && doc.contains(&scope)
    );

    let o = hwqos(&["plot", rec_s, "-o", svg_s, "--metric", "hw.no_such"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("hw.no_such"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn bad_recordings_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("empty.jsonl", "", "empty file"),
        ("garbage.jsonl", "hello\n", "not a recording header"),
        (
            "future.jsonl",
            "{\"schema\":\"hwqos.recording/9\"}\n",
            "unsupported schema `hwqos.recording/9`",
        ),
    ];
    for (name, body, expect) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        for cmd in [
            vec!["report", p.to_str().unwrap()],
            vec!["plot", p.to_str().unwrap(), "-o", "/dev/null"],
        ] {
            let o = hwqos(&cmd);
            assert_eq!(o.status.code(), Some(2), "{cmd:?}");
            let err = text(&o.stderr);
            assert!(err.contains(expect) && err.contains(name), "{cmd:?}: {err}");
        }
    }
    let o = hwqos(&["report", "/nonexistent/rec.jsonl"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("/nonexistent/rec.jsonl"));
}

#[test]
fn record_rejects_bad_options() {
    let o = hwqos(&["record", "-F", "0", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("-F"), "{}", text(&o.stderr));
    let o = hwqos(&["record", "-o", "/nonexistent/dir/x.jsonl", "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("/nonexistent/dir/x.jsonl"));
    let o = hwqos(&["record", "-e", "bogus-ev", "-o", "/dev/null", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("bogus-ev"), "{}", text(&o.stderr));
}

#[test]
fn list_reports_every_event_with_a_reason_when_unavailable() {
    let o = hwqos(&["list", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let task_clock = rows
        .iter()
        .find(|r| r["name"] == "sw.task_clock")
        .expect("sw.task_clock listed");
    assert_eq!(task_clock["available"], true);
    for r in &rows {
        assert_eq!(r["schema"], "hwqos.events/1");
        if r["available"] == false {
            assert!(!r["reason"].as_str().unwrap_or("").is_empty(), "{r}");
        }
    }
    let alias = hwqos(&["--list-events"]);
    assert!(alias.status.success());
    assert!(text(&alias.stdout).contains("sw.page_faults"));
}

#[test]
fn top_without_a_terminal_prints_plain_blocks() {
    let o = hwqos(&["top", "-d", "0.2", "-n", "2", "--top", "3"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(!out.contains('\x1b'), "escape codes in plain output");
    assert_eq!(out.matches("hwqos top —").count(), 2, "{out}");
    assert_eq!(out.matches("  CPU  util%").count(), 2);
    // Every online CPU has a row in each block.
    let cpus = std::thread::available_parallelism().unwrap().get();
    let block = out.split("hwqos top —").nth(1).unwrap();
    let cpu_rows = block
        .lines()
        .skip_while(|l| !l.contains("CPU  util%"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .count();
    assert_eq!(cpu_rows, cpus, "{block}");
}

#[test]
fn a_recording_cut_by_kill_reads_up_to_its_last_whole_frame() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("run.jsonl");
    let o = hwqos(&[
        "record",
        "-o",
        rec.to_str().unwrap(),
        "-F",
        "20",
        "-e",
        "sw.page_faults",
        "--",
        TESTLOAD,
        "--sleep-ms",
        "300",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let body = std::fs::read_to_string(&rec).unwrap();
    let whole = body.lines().count() - 1;
    // What kill -9 in the middle of writing the next frame leaves behind.
    let last = body.lines().last().unwrap();
    let cut = format!("{body}{}", &last[..last.len() / 2]);
    std::fs::write(&rec, cut).unwrap();
    let o = hwqos(&["report", rec.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("incomplete last frame")
            && err.contains(&format!("read {whole} whole frames")),
        "{err}"
    );
    assert!(
        text(&o.stdout).contains(&format!("{whole} frames")),
        "{}",
        text(&o.stdout)
    );
    let svg = dir.path().join("run.svg");
    let o = hwqos(&["plot", rec.to_str().unwrap(), "-o", svg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("incomplete last frame"));
}

#[test]
fn a_rate_the_node_cannot_sustain_is_reported_with_the_rate_achieved() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("fast.jsonl");
    // 200 kHz with procfs metrics of every process is far beyond any node.
    let o = hwqos(&[
        "record",
        "-a",
        "-F",
        "200000",
        "--duration",
        "0.5",
        "-o",
        rec.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("-F 200000 Hz is more than this node sustains"),
        "{err}"
    );
    assert!(err.contains("Hz achieved"), "{err}");
    assert!(
        err.matches("<not supported>").count() <= 1,
        "one line per cause: {err}"
    );
    let o = hwqos(&[
        "record",
        "-a",
        "-F",
        "10",
        "--duration",
        "0.5",
        "-o",
        rec.to_str().unwrap(),
    ]);
    assert!(
        !text(&o.stderr).contains("more than this node sustains"),
        "{}",
        text(&o.stderr)
    );
}
