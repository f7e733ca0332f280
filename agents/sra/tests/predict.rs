//! `hwqos-sra predict` end to end on synthetic recordings written with
//! `RecordingWriter` (issue 20, item 3): x = 3 + 2 r + noise with a fixed
//! seed in production; the test run holds r′, the actual run the real x.
//! Known answers: a and b recovered, the interval covers the truth (and the
//! actual run), an extrapolation is flagged, and bad input exits 2 with a
//! message naming what is wrong.

use hwqos_core::recording::{CounterClass, RecordedBackend, RecordingHeader, RecordingWriter};
use hwqos_core::{Frame, MetricName, Sample, Scope, ScopeLabel, Timestamp};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hwqos-sra"))
}

/// xorshift64* and Box–Muller: seeded standard normal noise.
struct Rng(u64);
impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

const STEP: u64 = 100_000_000;

/// One frame per 100 ms for process `pid` (named `victim`): the resource
/// `sw.context_switches` = r, a constant `sw.page_faults`, and x where given.
fn write(path: &Path, pid: u32, rows: &[(f64, Option<f64>)]) {
    let header = RecordingHeader::new(
        "test",
        Timestamp::default(),
        10.0,
        RecordedBackend::Simulated,
        CounterClass::Software,
    );
    let mut w = RecordingWriter::new(std::fs::File::create(path).unwrap(), &header).unwrap();
    for (i, (r, x)) in rows.iter().enumerate() {
        let time = Timestamp {
            mono_ns: i as u64 * STEP,
            wall_ns: 0,
        };
        let sample = |m: &str, v: f64| Sample {
            time,
            scope: Scope::Process { pid },
            metric: MetricName::new(m).unwrap(),
            value: v,
            counter: None,
        };
        let mut samples = vec![
            sample("sw.context_switches", *r),
            sample("sw.page_faults", 4.0),
        ];
        if let Some(x) = x {
            samples.push(sample("app.latency_us", *x));
        }
        w.write_frame(&Frame {
            seq: i as u64,
            time,
            interval_ns: STEP,
            samples,
            labels: vec![ScopeLabel {
                scope: Scope::Process { pid },
                name: "victim".into(),
            }],
        })
        .unwrap();
    }
    w.finish().unwrap();
}

struct Files {
    _dir: tempfile::TempDir,
    prod: PathBuf,
    test: PathBuf,
    far: PathBuf,
    actual: PathBuf,
    short: PathBuf,
}

/// Production: r sweeps 1..9, x = 3 + 2 r + N(0, 0.5²) (seed 42). Test:
/// r′ ≈ 6 (truth 15); far: r′ ≈ 20 (outside production's 1..9); actual:
/// r ≈ 6 and x = 3 + 2 r + noise, the change made real.
fn files() -> Files {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let mut g = Rng(42);
    let prod: Vec<(f64, Option<f64>)> = (0..400)
        .map(|i| {
            let r = 5.0 + 4.0 * (i as f64 * 0.07).sin();
            (r, Some(3.0 + 2.0 * r + 0.5 * g.normal()))
        })
        .collect();
    write(&p("prod.jsonl"), 100, &prod);
    let test: Vec<(f64, Option<f64>)> = (0..100).map(|_| (6.0 + 0.3 * g.normal(), None)).collect();
    write(&p("test.jsonl"), 200, &test);
    let far: Vec<(f64, Option<f64>)> = (0..100).map(|_| (20.0 + 0.3 * g.normal(), None)).collect();
    write(&p("far.jsonl"), 201, &far);
    let actual: Vec<(f64, Option<f64>)> = (0..100)
        .map(|_| {
            let r = 6.0 + 0.3 * g.normal();
            (r, Some(3.0 + 2.0 * r + 0.5 * g.normal()))
        })
        .collect();
    write(&p("actual.jsonl"), 300, &actual);
    write(&p("short.jsonl"), 400, &prod[..6]);
    Files {
        prod: p("prod.jsonl"),
        test: p("test.jsonl"),
        far: p("far.jsonl"),
        actual: p("actual.jsonl"),
        short: p("short.jsonl"),
        _dir: dir,
    }
}

fn predict(args: &[&str]) -> Output {
    Command::new(bin())
        .arg("predict")
        .args(args)
        .output()
        .unwrap()
}

fn json_ok(args: &[&str]) -> Value {
    let out = predict(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn f(v: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(v, |v, k| &v[k])
        .as_f64()
        .unwrap_or_else(|| panic!("{path:?} in {v}"))
}

#[test]
fn prediction_recovers_the_line_and_covers_the_truth() {
    let fs = files();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (prod, test, actual) = (s(&fs.prod), s(&fs.test), s(&fs.actual));
    let v = json_ok(&[
        &prod,
        "--test",
        &test,
        "--x",
        "app.latency_us",
        "--actual",
        &actual,
        "--json",
    ]);
    // r̂ is the varying resource, not the constant one.
    assert_eq!(v["fit"]["resource"], "sw.context_switches");
    assert_eq!(v["fit"]["named"], false);
    assert_eq!(v["test"]["scope"], "pid:200");
    let (a, b) = (f(&v, &["fit", "a"]), f(&v, &["fit", "b"]));
    assert!(
        (a - 3.0).abs() < 0.3 && (b - 2.0).abs() < 0.06,
        "a {a} b {b}"
    );
    assert!(f(&v, &["fit", "r_squared"]) > 0.95);
    assert_eq!(f(&v, &["fit", "n"]), 400.0);
    // The truth at the test run's mean r′ is 3 + 2 r′ (≈ 15).
    let truth = 3.0 + 2.0 * f(&v, &["test", "mean"]);
    assert!((truth - 15.0).abs() < 0.2, "{truth}");
    let (low, high) = (f(&v, &["low"]), f(&v, &["high"]));
    assert!(low < truth && truth < high, "[{low}, {high}] vs {truth}");
    assert!(high - low < 2.0, "[{low}, {high}] too wide to say anything");
    assert!(v["extrapolation"].is_null());
    // The real run: inside, with a small relative error.
    let act = &v["actual"];
    assert_eq!(act["x"]["scope"], "pid:300");
    assert_eq!(act["inside"], true);
    let err = f(act, &["error_relative"]);
    let mean = f(act, &["x", "mean"]);
    assert!(
        (err - (f(&v, &["x_predicted"]) - mean) / mean).abs() < 1e-9,
        "{err}"
    );
    assert!(err.abs() < 0.03, "{err}");

    // Unfiltered and with the resource named: the same line, named.
    let v = json_ok(&[
        &prod,
        "--test",
        &test,
        "--x",
        "app.latency_us",
        "--resource",
        "sw.context_switches",
        "--cutoff",
        "1",
        "--json",
    ]);
    assert_eq!(v["fit"]["named"], true);
    assert!((f(&v, &["fit", "b"]) - 2.0).abs() < 0.05);

    // Text output names the fit and the interval; --plot writes the SVG
    // with one dot per production step (400) and every series named.
    let svg = fs._dir.path().join("predict.svg");
    let out = predict(&[
        &prod,
        "--test",
        &test,
        "--x",
        "app.latency_us",
        "--actual",
        &actual,
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("x = ") && text.contains("95 % interval"),
        "{text}"
    );
    let plot = std::fs::read_to_string(&svg).unwrap();
    let dots = plot
        .lines()
        .filter(|l| l.contains("<circle") && l.contains("r=\"2\""))
        .count();
    assert_eq!(dots, 400);
    for label in [
        "production (r, x)",
        "actual run (r, x)",
        "fit x = ",
        "test r′ ",
        "actual run: mean x ",
    ] {
        assert!(plot.contains(label), "no `{label}` in the SVG");
    }
}

#[test]
fn extrapolation_is_flagged() {
    let fs = files();
    let out = predict(&[
        fs.prod.to_str().unwrap(),
        "--test",
        fs.far.to_str().unwrap(),
        "--x",
        "app.latency_us",
        "--json",
    ]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = v["extrapolation"].as_str().unwrap();
    assert!(w.contains("outside production's range"), "{w}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning"));
    // Still the line's value there (3 + 2·20 ≈ 43), inside the interval.
    let truth = 3.0 + 2.0 * f(&v, &["test", "mean"]);
    assert!(f(&v, &["low"]) < truth && truth < f(&v, &["high"]));
}

#[test]
fn bad_input_exits_2_naming_it() {
    let fs = files();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (prod, test, short) = (s(&fs.prod), s(&fs.test), s(&fs.short));
    let missing = fs.prod.with_file_name("nope.jsonl");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![&prod, "--test", &test, "--x", "app.rtt_us"],
            "`app.rtt_us`",
        ),
        (
            vec![&short, "--test", &test, "--x", "app.latency_us"],
            "too few samples",
        ),
        (
            vec![
                &prod,
                "--test",
                &test,
                "--x",
                "app.latency_us",
                "--resource",
                "sw.page_faults",
            ],
            "constant",
        ),
        (
            vec![
                &prod,
                "--test",
                &test,
                "--x",
                "app.latency_us",
                "--resource",
                "sw.cpu_migrations",
            ],
            "`sw.cpu_migrations`",
        ),
        (
            vec![
                &prod,
                "--test",
                &test,
                "--x",
                "app.latency_us",
                "--scope",
                "pid:1",
            ],
            "`pid:1`",
        ),
        (
            vec![
                &prod,
                "--test",
                missing.to_str().unwrap(),
                "--x",
                "app.latency_us",
            ],
            "nope.jsonl",
        ),
    ];
    for (args, needle) in cases {
        let out = predict(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: `{needle}` not in {err}");
    }
}

/// A test recording as hwqos-monitor writes it when the victim exits before
/// the monitor stops: a partial first tick (30 ms), full windows with r = 5
/// and 7, the window the process exited in (it ran 4 ms) and two windows of
/// zeros (its counters not enabled at all). r′ is the mean of the full
/// windows only, 6, and the text and JSON say what was left out.
#[test]
fn windows_that_are_not_full_observations_are_left_out_and_reported() {
    let fs = files();
    let path = fs.prod.with_file_name("exiting.jsonl");
    let header = RecordingHeader::new(
        "test",
        Timestamp::default(),
        10.0,
        RecordedBackend::Simulated,
        CounterClass::Software,
    );
    let mut w = RecordingWriter::new(std::fs::File::create(&path).unwrap(), &header).unwrap();
    let ms = 1_000_000u64;
    let mut windows: Vec<(u64, f64, u64)> = vec![(30 * ms, 1.0, 9 * ms)];
    windows.extend((0..100).map(|i| (100 * ms, if i % 2 == 0 { 5.0 } else { 7.0 }, 30 * ms)));
    windows.push((100 * ms, 2.0, 4 * ms));
    windows.extend([(100 * ms, 0.0, 0); 2]);
    let mut t = 0;
    for (i, (interval, r, enabled)) in windows.iter().enumerate() {
        t += interval;
        let time = Timestamp {
            mono_ns: t,
            wall_ns: 0,
        };
        w.write_frame(&Frame {
            seq: i as u64,
            time,
            interval_ns: *interval,
            samples: vec![Sample {
                time,
                scope: Scope::Process { pid: 210 },
                metric: MetricName::new("sw.context_switches").unwrap(),
                value: *r,
                counter: Some(hwqos_core::CounterReading {
                    raw: *r as u64,
                    time_enabled: *enabled,
                    time_running: *enabled,
                }),
            }],
            labels: vec![],
        })
        .unwrap();
    }
    w.finish().unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (prod, test) = (s(&fs.prod), s(&path));
    let v = json_ok(&[&prod, "--test", &test, "--x", "app.latency_us", "--json"]);
    assert_eq!(f(&v, &["test", "mean"]), 6.0);
    assert_eq!(f(&v, &["test", "n"]), 100.0);
    let d = &v["test"]["dropped"];
    assert_eq!(
        (&d["off_interval"], &d["exit_window"], &d["after_exit"]),
        (&Value::from(1), &Value::from(1), &Value::from(2))
    );
    assert_eq!(v["fit"]["dropped"]["after_exit"], 0);
    let out = predict(&[&prod, "--test", &test, "--x", "app.latency_us"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("n 100, n_eff")
            && text.contains("left out 4 (not full windows: 1 off-interval, 1 exit, 2 after exit)"),
        "{text}"
    );
}
