//! `GET /metrics`: the agent (`run`) and `synthesize --metrics-listen` serve
//! every `hwqos_loadgen_*` family in OpenMetrics text, with the model's
//! targets and knobs, measured values and an error ratio that agree, and
//! `promtool check metrics` accepts the exposition when promtool is installed.

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
    let node = hwqos_topology::HardwareModel::this_node().unwrap();
    let entry = serde_json::json!({
        "metric": "cpu_util", "cpu": 0, "target": 0.05, "knob": 0.04,
        "controller": {"gains": {"kp": 0.3, "ki": 1.5, "kd": 0.0}, "bias": 0.05,
                       "integral": 0.0, "knob": 0.04, "range": [0.0, 0.95]},
        "tolerance": [0.01, 0.0], "series": []
    });
    serde_json::json!({
        "schema": "hwqos.loadmodel/1", "created": "x", "node": node,
        "convergence_s": 1.0, "samples": 4, "period_s": 0.25, "entries": [entry]
    })
    .to_string()
}

/// Reads the child's stderr until `metrics on ADDR`; the rest of stderr is
/// drained on a thread so the child never blocks on a full pipe.
fn metrics_addr(child: &mut Child) -> String {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("metrics on ").map(str::to_string))
        .expect("the agent never printed `metrics on ADDR`");
    std::thread::spawn(move || for _ in lines {});
    addr
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

/// Scrapes until `done` holds for the body (the agent must stay alive).
fn scrape_until(child: &mut Child, addr: &str, done: impl Fn(&str) -> bool) -> String {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the agent exited early: {status}");
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
