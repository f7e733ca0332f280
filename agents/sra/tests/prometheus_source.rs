//! `hwqos-sra analyse --prometheus` against a real Prometheus: known
//! synthetic series for three nodes are backfilled into a TSDB with
//! `promtool tsdb create-blocks-from openmetrics` (hours in the past, so they
//! land in blocks), Prometheus serves that TSDB on a loopback port, and the
//! analysis must find the known answer — r̂ = `sw.page_faults` pooled over
//! the nodes, the node whose x is unrelated to r flagged as an outlier, the
//! two others not — and add it to a sensitivity model under `name:svc`.
//!
//! Without `prometheus` and `promtool` on PATH the test prints a skip line,
//! unless `CI` is set (the CI image installs both), where that is a failure.

use hwqos_testsupport::{http_get, wait_for};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const STEP_S: u64 = 15;
const POINTS: u64 = 240;

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Kills and reaps Prometheus however the test ends.
struct Prometheus {
    child: Child,
    addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// r on every node: two slow waves (periods of 40 and 97 steps).
fn r(i: u64) -> f64 {
    let t = i as f64;
    1000.0
        + 300.0 * (2.0 * std::f64::consts::PI * t / 40.0).sin()
        + 100.0 * (2.0 * std::f64::consts::PI * t / 97.0).sin()
}

/// Small deterministic noise in [-5, 5].
fn noise(i: u64, node: u64) -> f64 {
    ((i * 7919 + node * 104_729) % 11) as f64 - 5.0
}

/// x: 2·r + noise on nodes 1 and 2 (per process); unrelated to r on node 3
/// (a wave of period 29 steps, reported at system scope).
fn x(i: u64, node: u64) -> f64 {
    if node == 3 {
        500.0 + 100.0 * (2.0 * std::f64::consts::PI * i as f64 / 29.0).sin() + noise(i, node)
    } else {
        2.0 * r(i) + noise(i, node)
    }
}

/// The OpenMetrics text: every family's series in time order, `# EOF` last.
fn openmetrics(t0: u64) -> String {
    let mut out = String::new();
    let labels = |node: u64, process: bool| {
        let base =
            format!("job=\"hwqos-monitor\",instance=\"node{node}:9464\",node=\"node{node}\"");
        if process {
            format!(
                "{base},scope=\"process\",pid=\"{}\",comm=\"svc\"",
                100 + node
            )
        } else {
            format!("{base},scope=\"system\"")
        }
    };
    type F = fn(u64, u64) -> f64;
    let families: [(&str, F); 3] = [
        ("hwqos_sw_page_faults_per_second", |i, _| r(i)),
        ("hwqos_sw_context_switches_per_second", |i, node| {
            200.0 + 50.0 * (2.0 * std::f64::consts::PI * i as f64 / 61.0 + node as f64).cos()
        }),
        ("hwqos_sw_task_clock_seconds_per_second", |i, _| {
            0.5 + 0.01 * ((i * 13) % 7) as f64
        }),
    ];
    for (name, f) in families {
        writeln!(out, "# TYPE {name} gauge").unwrap();
        for node in 1..=3 {
            for i in 0..POINTS {
                let t = t0 + i * STEP_S;
                writeln!(out, "{name}{{{}}} {} {t}", labels(node, true), f(i, node)).unwrap();
            }
        }
    }
    writeln!(out, "# TYPE hwqos_app_rate gauge").unwrap();
    for node in 1..=3 {
        for i in 0..POINTS {
            let t = t0 + i * STEP_S;
            writeln!(
                out,
                "hwqos_app_rate{{{}}} {} {t}",
                labels(node, node != 3),
                x(i, node)
            )
            .unwrap();
        }
    }
    out.push_str("# EOF\n");
    out
}

/// Backfills the series and starts Prometheus on them; `None` (skip) when
/// the binaries are missing outside CI.
fn start(dir: &Path, t0: u64) -> Option<Prometheus> {
    let (Some(prometheus), Some(promtool)) = (on_path("prometheus"), on_path("promtool")) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "prometheus and promtool must be installed on CI"
        );
        eprintln!("skipped: prometheus or promtool not on PATH");
        return None;
    };
    let om = dir.join("fleet.om");
    std::fs::write(&om, openmetrics(t0)).unwrap();
    let data = dir.join("data");
    let out = Command::new(&promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool backfill failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 15s\n").unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(&prometheus)
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg(format!("--web.listen-address={addr}"))
        .arg(format!("--config.file={}", config.display()))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut p = Prometheus { child, addr };
    wait_for("Prometheus /-/ready", Duration::from_secs(60), || {
        if let Ok(Some(status)) = p.child.try_wait() {
            panic!(
                "prometheus exited ({status}): {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
        }
        http_get(&p.addr, "/-/ready").is_ok_and(|r| r.status == 200)
    });
    Some(p)
}

fn sra(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hwqos-sra"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_fleet_analysis_finds_r_hat_and_the_odd_node() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // Five hours back, on the step grid: in a block, inside retention.
    let t0 = (now - 5 * 3600) / STEP_S * STEP_S;
    let end = t0 + (POINTS - 1) * STEP_S;
    let dir = tempfile::tempdir().unwrap();
    let Some(prom) = start(dir.path(), t0) else {
        return;
    };
    let url = format!("http://{}", prom.addr);
    let model = dir.path().join("model.json");
    let (start_s, end_s) = (t0.to_string(), end.to_string());
    let common = [
        "analyse",
        "--prometheus",
        url.as_str(),
        "--selector",
        "{job=\"hwqos-monitor\"}",
        "--start",
        start_s.as_str(),
        "--end",
        end_s.as_str(),
        "--step",
        "15s",
        "--x",
        "app.rate",
    ];
    let mut args = common.to_vec();
    args.extend(["--json", "--model", model.to_str().unwrap()]);
    let out = sra(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let fleet = v.as_array().unwrap();
    assert_eq!(fleet.len(), 1, "{stdout}");
    let svc = &fleet[0];
    assert_eq!(svc["process"], "svc");
    let pooled = &svc["pooled"];
    assert_eq!(pooled["selected"][0], "sw.page_faults", "{stdout}");
    assert_eq!(pooled["resources"][0]["resource"], "sw.page_faults");
    let corr = pooled["resources"][0]["correlation"].as_f64().unwrap();
    assert!(corr > 0.5, "pooled Corr {corr}: {stdout}");
    // Every node's groups made it, each on the full step grid.
    let nodes = svc["nodes"].as_array().unwrap();
    let names: Vec<&str> = nodes.iter().map(|n| n["node"].as_str().unwrap()).collect();
    assert_eq!(names, ["node1", "node2", "node3"], "{stdout}");
    for n in nodes {
        assert_eq!(n["samples"].as_u64(), Some(POINTS), "{stdout}");
        let c = n["correlation"].as_f64().unwrap();
        if n["node"] == "node3" {
            assert_eq!(n["outlier"], true, "{stdout}");
            assert!(c.abs() < 0.5, "node3 Corr {c}");
        } else {
            assert_eq!(n["outlier"], false, "{stdout}");
            assert!(c > 0.95, "{} Corr {c}", n["node"]);
        }
    }
    // The pooled analysis is in the model, keyed by the process name, with
    // the CPU demand from task_clock (seconds per second = CPUs).
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    let text = m.to_string();
    assert!(text.contains("name:svc"), "{text}");
    assert!(text.contains("sw.page_faults"), "{text}");
    let demand = m["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["process"] == "name:svc"))
        .and_then(|p| p["cpu_demand"].as_f64());
    assert!(
        demand.is_some_and(|d| (0.5..0.57).contains(&d)),
        "cpu demand {demand:?}: {text}"
    );

    // The text report names the outlier; --svg-dir draws the pooled analysis.
    let svg_dir = dir.path().join("svg");
    let mut args = common.to_vec();
    args.extend(["--svg-dir", svg_dir.to_str().unwrap()]);
    let out = sra(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    eprintln!("{text}");
    assert!(text.contains("pooled over 3 nodes"), "{text}");
    let node3 = text.lines().find(|l| l.starts_with("node3")).unwrap();
    assert!(node3.contains("OUTLIER"), "{text}");
    let svg = std::fs::read_to_string(svg_dir.join("svc.svg")).unwrap();
    assert!(svg.contains("sw.page_faults"), "the SVG names r̂");

    // Prometheus's own error comes back named (too many points per series).
    let mut args = common.to_vec();
    let i = args.iter().position(|a| *a == "15s").unwrap();
    args[i] = "1ms";
    let out = sra(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("status error") && err.contains("resolution"),
        "{err}"
    );

    // A selector that matches nothing is bad input (exit 2), saying so.
    let mut args = common.to_vec();
    args[4] = "{job=\"nothing\"}";
    let out = sra(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no process"), "{err}");
    drop(prom);
}

#[test]
fn an_unreachable_or_tls_prometheus_is_an_error_not_a_hang() {
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}");
    let base = [
        "analyse",
        "--prometheus",
        "",
        "--start",
        "now-1h",
        "--x",
        "app.rate",
    ];
    let mut args = base.to_vec();
    args[2] = &url;
    let out = sra(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("connecting to"), "{err}");
    args[2] = "https://127.0.0.1:9090";
    let out = sra(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("TLS"), "{err}");
    // Prometheus-only flags with a recording are refused, naming the flag.
    let out = sra(&["analyse", "rec.jsonl", "--x", "app.rate", "--step", "5s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--step only applies with --prometheus"),
        "{err}"
    );
}
