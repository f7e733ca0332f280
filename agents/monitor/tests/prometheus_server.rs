//! A real Prometheus server (Debian's `prometheus`, `/usr/bin/prometheus`) on
//! loopback scrapes a running `hwqos-monitor`, and the test reads metrics
//! back through Prometheus's HTTP query API (`/api/v1/query`): the scrape
//! target is up, the sampling period is exactly 1/rate, one per-CPU series per
//! online CPU, and the frames counter Prometheus stored is one the monitor has
//! passed. Every wait is a bounded number of polls, not a speed assertion.

mod common;

use common::{Running, SW_SETS};
use hwqos_testsupport::http_get;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PROMETHEUS: &str = "/usr/bin/prometheus";
/// Polls of the query API (every 250 ms) before giving up.
const POLLS: usize = 480;

/// The Prometheus server process; killed on drop, also when the test panics.
struct PrometheusServer {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl PrometheusServer {
    fn start(dir: &Path, target: &str) -> PrometheusServer {
        assert!(
            Path::new(PROMETHEUS).is_file(),
            "{PROMETHEUS} is missing: install Debian's `prometheus` package (scripts/test.sh does)"
        );
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: hwqos-monitor\n    static_configs:\n      - targets: ['{target}']\n        labels:\n          node: test-node\n"
            ),
        )
        .expect("write prometheus.yml");
        let storage = dir.join("tsdb");
        let log = dir.join("prometheus.log");
        // A free loopback port (Prometheus does not report a port 0 choice).
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", storage.display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--storage.tsdb.retention.time=1h")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).expect("log file")))
            .spawn()
            .expect("spawn prometheus");
        PrometheusServer { child, addr, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs an instant query; `None` while Prometheus is not answering yet.
    fn query(&mut self, promql: &str) -> Option<serde_json::Value> {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("prometheus exited with {status}:\n{}", self.log());
        }
        let r = http_get(
            &self.addr,
            &format!("/api/v1/query?query={}", percent_encode(promql)),
        )
        .ok()?;
        if r.status != 200 {
            return None;
        }
        let body = r.body;
        let v: serde_json::Value = serde_json::from_str(&body).expect("query answer is JSON");
        assert_eq!(v["status"], "success", "{body}");
        Some(v["data"]["result"].clone())
    }

    /// Polls `promql` until it returns a non-empty vector; returns its samples
    /// as (labels, value).
    fn wait_for(&mut self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        for _ in 0..POLLS {
            if let Some(serde_json::Value::Array(result)) = self.query(promql) {
                if !result.is_empty() {
                    return result
                        .iter()
                        .map(|s| {
                            let value = s["value"][1]
                                .as_str()
                                .and_then(|v| v.parse::<f64>().ok())
                                .unwrap_or_else(|| panic!("bad sample {s}"));
                            (s["metric"].clone(), value)
                        })
                        .collect();
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "no result for `{promql}` after {POLLS} polls; prometheus log:\n{}",
            self.log()
        );
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn prometheus_scrapes_the_monitor_and_answers_queries() {
    let m = Running::start(&format!("rate_hz = 20\n{SW_SETS}\n"), "");
    let mut c = m.client();
    let target = c
        .status()
        .expect("status")
        .metrics_listen
        .expect("the monitor's /metrics address");
    let mut prom = PrometheusServer::start(m.dir.path(), &target);

    // The scrape worked: `up` is 1 for our target, with our static label.
    let up = prom.wait_for("up{job=\"hwqos-monitor\"} == 1");
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0].0["node"], "test-node");
    assert_eq!(up[0].0["instance"], target.as_str());

    // Known answer: the period is 1/20 s exactly.
    let period = prom.wait_for("hwqos_monitor_sampling_period_seconds");
    assert_eq!(period.len(), 1);
    assert_eq!(period[0].1, 0.05);

    // One per-CPU task-clock series per online CPU (the kernel's count).
    let cpus = prom.wait_for(
        "count(hwqos_sw_task_clock_seconds_per_second{job=\"hwqos-monitor\",scope=\"cpu\"})",
    );
    assert_eq!(
        cpus[0].1 as usize,
        hwqos_pmu::target::online_cpus(Path::new("/sys")).len()
    );

    // The frames counter Prometheus stored is one the monitor has reached.
    let stored = prom.wait_for("hwqos_monitor_frames_sampled")[0].1;
    let now = c.status().expect("status").frames_sampled as f64;
    assert!(
        stored >= 1.0 && stored <= now,
        "stored {stored}, monitor at {now}"
    );
}
