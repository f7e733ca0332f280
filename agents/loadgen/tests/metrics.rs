//! `GET /metrics`: the agent (`run`) and `synthesize --metrics-listen` serve
//! every `hwqos_loadgen_*` family in OpenMetrics text, with the model's
//! targets and knobs, measured values and an error ratio that agree, and
//! `promtool check metrics` accepts the exposition when promtool is installed.
//! `run` with `[run] model_dir` is observed through the same endpoint.

use hwqos_testsupport::{http_get, promtool_check_metrics};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_hwqos-loadgen");

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// A valid model of this node: one CPU-utilization pair on CPU 0.
fn model_json() -> String {
    versioned_model(0, 0, 0.05)
}

/// A model of this node of version `version`: one CPU-utilization pair on
/// `cpu` with `target` (knob 0.01 below it).
fn versioned_model(version: u64, cpu: u32, target: f64) -> String {
    let node = hwqos_topology::HardwareModel::this_node().unwrap();
    let knob = target - 0.01;
    let entry = serde_json::json!({
        "metric": "cpu_util", "cpu": cpu, "target": target, "knob": knob,
        "controller": {"gains": {"kp": 0.3, "ki": 1.5, "kd": 0.0}, "bias": target,
                       "integral": 0.0, "knob": knob, "range": [0.0, 0.95]},
        "tolerance": [0.01, 0.0], "series": []
    });
    serde_json::json!({
        "schema": "hwqos.loadmodel/1", "created": "x", "version": version, "node": node,
        "convergence_s": 1.0, "samples": 4, "period_s": 0.25, "entries": [entry]
    })
    .to_string()
}

/// Writes `name` into `dir` as a distributor should: a dotfile renamed.
fn put_atomically(dir: &Path, name: &str, text: &str) -> String {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).unwrap();
    path.display().to_string()
}

/// Reads the child's stderr until `metrics on ADDR`; the rest of stderr is
/// drained on a thread so the child never blocks on a full pipe.
fn metrics_addr(child: &mut Child) -> String {
    let (addr, lines) = read_metrics_addr(child);
    std::thread::spawn(move || for _ in lines {});
    addr
}

/// Reads the child's stderr until `metrics on ADDR`; the rest is left in
/// the returned reader.
fn read_metrics_addr(
    child: &mut Child,
) -> (String, std::io::Lines<BufReader<std::process::ChildStderr>>) {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("metrics on ").map(str::to_string))
        .expect("the agent never printed `metrics on ADDR`");
    (addr, lines)
}

/// (content type, body) of a `GET /metrics` that must answer 200.
fn scrape(addr: &str) -> (String, String) {
    let r = http_get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(r.status, 200, "{r:?}");
    let ctype = r.header("content-type").unwrap_or_default().to_string();
    (ctype, r.body)
}

/// The value of the sample whose name and labels are exactly `series`.
fn value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// Scrapes until `done` holds for the body (the agent must stay alive);
/// fails with the last body after 60 s.
fn scrape_until(child: &mut Child, addr: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the agent exited early: {status}");
        }
        if std::time::Instant::now() > deadline {
            let last = scrape(addr).1;
            let _ = child.kill();
            panic!("not seen within 60 s; last /metrics:\n{last}");
        }
        let (ctype, body) = scrape(addr);
        assert_eq!(
            ctype,
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        if done(&body) {
            return body;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn sigterm(child: &Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

const FAMILIES: [&str; 8] = [
    "hwqos_loadgen_info",
    "hwqos_loadgen_target",
    "hwqos_loadgen_measured",
    "hwqos_loadgen_error_ratio",
    "hwqos_loadgen_knob",
    "hwqos_loadgen_converged",
    "hwqos_loadgen_convergence_seconds",
    "hwqos_loadgen_samples",
];

fn has_every_family(body: &str) {
    for f in FAMILIES {
        assert!(
            body.contains(&format!("# TYPE {f} gauge\n")),
            "no {f}:\n{body}"
        );
    }
    assert!(body.ends_with("# EOF\n"), "{body}");
}

/// Agent mode: `run` serves the configured `[metrics] listen` address, shows
/// the model's target and knob, measures the pair, and stops cleanly.
#[test]
fn run_serves_the_model_and_its_measurements() {
    let dir = tempfile::tempdir().unwrap();
    let model = write(dir.path(), "m.json", &model_json());
    let cfg = write(
        dir.path(),
        "c.toml",
        // Open loop: the knob stays the model's, so the exposition's values
        // are known (closed loop, the default, moves it with the load here).
        &format!(
            "[run]\nmodel = \"{model}\"\nopen_loop = true\n[metrics]\nlisten = \"127.0.0.1:0\"\n"
        ),
    );
    let mut child = Command::new(BIN)
        .args(["--config", &cfg, "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = metrics_addr(&mut child);
    let pair = "{metric=\"cpu_util\",cpu=\"0\"}";
    let body = scrape_until(&mut child, &addr, |b| {
        value(b, "hwqos_loadgen_samples").unwrap_or(0.0) >= 2.0
    });
    has_every_family(&body);
    assert!(
        body.contains(&format!(
            "hwqos_loadgen_info{{mode=\"run\",model=\"{model}\"}} 1\n"
        )),
        "{body}"
    );
    assert_eq!(
        value(&body, &format!("hwqos_loadgen_target{pair}")),
        Some(0.05)
    );
    assert_eq!(
        value(&body, &format!("hwqos_loadgen_knob{pair}")),
        Some(0.04)
    );
    let measured = value(&body, &format!("hwqos_loadgen_measured{pair}")).expect("measured");
    assert!((0.0..=1.0).contains(&measured), "utilization {measured}");
    let err = value(&body, &format!("hwqos_loadgen_error_ratio{pair}")).expect("error");
    assert!(
        (err - (measured - 0.05) / 0.05).abs() < 1e-6,
        "{err} {measured}"
    );
    let conv = value(&body, &format!("hwqos_loadgen_converged{pair}")).expect("converged");
    assert!(conv == 0.0 || conv == 1.0);
    promtool_check_metrics(&body);
    sigterm(&child);
    let status = child.wait().unwrap();
    assert!(status.success(), "exit after SIGTERM: {status}");
}

/// `synthesize --metrics-listen`: the closed loop's pairs appear while it
/// runs; a pair reported converged has a convergence time and at least
/// `--needed` in-tolerance samples behind it. The page-fault rate of this
/// process is the kernel's count (`--measure-processes self`), which the loop
/// meets reliably on a shared node.
#[test]
fn synthesize_reports_convergence() {
    let dir = tempfile::tempdir().unwrap();
    let targets = dir.path().join("t.json");
    let o = Command::new(BIN)
        .args(["targets", "page_fault_rate@0=3000", "-o"])
        .arg(&targets)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut child = Command::new(BIN)
        .arg("synthesize")
        .arg(&targets)
        .args(["-o"])
        .arg(dir.path().join("m.json"))
        .args(["--measure-processes", "self", "--needed", "4"])
        .args(["--hold", "100000", "--timeout", "300"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = metrics_addr(&mut child);
    let pair = "{metric=\"page_fault_rate\",cpu=\"0\"}";
    let conv_series = format!("hwqos_loadgen_convergence_seconds{pair}");
    let body = scrape_until(&mut child, &addr, |b| value(b, &conv_series).is_some());
    has_every_family(&body);
    assert!(body.contains("hwqos_loadgen_info{mode=\"synthesize\","));
    assert_eq!(
        value(&body, &format!("hwqos_loadgen_target{pair}")),
        Some(3000.0)
    );
    let samples = value(&body, "hwqos_loadgen_samples").unwrap();
    assert!(samples >= 4.0, "converged after {samples} samples");
    assert!(value(&body, &conv_series).unwrap() > 0.0);
    assert!(value(&body, &format!("hwqos_loadgen_knob{pair}")).unwrap() > 0.0);
    promtool_check_metrics(&body);
    sigterm(&child);
    // Stopped during the hold: no model, exit 1 ("stopped by signal").
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "exit after SIGTERM: {status}");
}

/// A bad `[metrics] listen` is named with its file, line and key (the
/// located configuration error of `hwqos_agent::lifecycle`), exit code 2.
#[test]
fn bad_listen_address_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "c.toml", "[metrics]\nlisten = \"localhost\"\n");
    let o = Command::new(BIN)
        .args(["--config", &cfg, "check-config"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("c.toml:2: key `metrics.listen`: expected IP:PORT")
            && err.contains("found \"localhost\""),
        "{err}"
    );
}

/// `[run] model_dir`: `run` serves `/metrics` while the directory is empty,
/// replays the valid model of highest version, keeps it when an invalid file
/// of a higher version arrives (counted in
/// `hwqos_loadgen_model_dir_rejected`) and switches when a better valid one
/// arrives — all with its stderr a broken pipe; `validate-dir` reports the
/// same choice and exits 2 for the bad file.
#[test]
fn run_replays_the_best_model_of_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models.d");
    std::fs::create_dir(&models).unwrap();
    let cfg = write(
        dir.path(),
        "c.toml",
        &format!(
            "[run]\nmodel_dir = \"{}\"\nopen_loop = true\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
            models.display()
        ),
    );
    let mut child = Command::new(BIN)
        .args(["--config", &cfg, "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The log's reader goes away (as when whatever collects an agent's
    // stderr dies): every log line from now on meets a broken pipe, and the
    // agent must go on — the rejection below is logged by the thread that
    // watches the directory.
    let (addr, log) = read_metrics_addr(&mut child);
    drop(log);
    let pair = "{metric=\"cpu_util\",cpu=\"0\"}";
    let target = format!("hwqos_loadgen_target{pair}");
    let replaying = |b: &str, file: &str| {
        b.contains(&format!(
            "hwqos_loadgen_info{{mode=\"run\",model=\"{file}\"}} 1\n"
        ))
    };

    // Empty: served, nothing replayed.
    let body = scrape_until(&mut child, &addr, |b| {
        value(b, "hwqos_loadgen_model_dir_rejected") == Some(0.0)
    });
    assert_eq!(value(&body, &target), None, "{body}");

    let a = put_atomically(&models, "a.json", &versioned_model(1, 0, 0.05));
    scrape_until(&mut child, &addr, |b| {
        replaying(b, &a) && value(b, &target) == Some(0.05)
    });

    // A higher version for a CPU this node does not have: rejected, and the
    // replay goes on with a.json.
    put_atomically(&models, "b.json", &versioned_model(5, 9999, 0.05));
    let body = scrape_until(&mut child, &addr, |b| {
        value(b, "hwqos_loadgen_model_dir_rejected") == Some(1.0)
    });
    assert!(replaying(&body, &a), "{body}");
    assert_eq!(value(&body, &target), Some(0.05));

    let c = put_atomically(&models, "c.json", &versioned_model(3, 0, 0.07));
    let body = scrape_until(&mut child, &addr, |b| {
        replaying(b, &c) && value(b, &target) == Some(0.07)
    });
    let knob = value(&body, &format!("hwqos_loadgen_knob{pair}")).expect("knob");
    assert!((knob - 0.06).abs() < 1e-12, "{knob}");
    assert_eq!(value(&body, "hwqos_loadgen_model_dir_rejected"), Some(1.0));
    promtool_check_metrics(&body);

    let out = Command::new(BIN)
        .args(["validate-dir", &models.display().to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("a.json: ok v1\n"), "{stdout}");
    assert!(
        stdout.contains("b.json: rejected: ") && stdout.contains("CPU 9999, which is not online"),
        "{stdout}"
    );
    assert!(stdout.ends_with("would replay: c.json (v3)\n"), "{stdout}");

    sigterm(&child);
    let status = child.wait().unwrap();
    assert!(status.success(), "exit after SIGTERM: {status}");
}
