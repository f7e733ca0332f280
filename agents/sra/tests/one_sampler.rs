//! One sampler per node (issue 19): while `hwqos-monitor` serves its live
//! API, `hwqos-sra run` reads the monitor's frames and holds no
//! `perf_event` counter of its own, and still evaluates (a contract comes
//! out); without a monitor it samples on its own, as before. Software
//! events only, so it runs on nodes without a PMU. No timed assertions:
//! every wait is for a condition, with a generous deadline.

use hwqos_testsupport::{perf_event_fds, wait_for};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(60);

fn sra() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hwqos-sra"))
}

/// The monitor binary, built in the same target directory (`cargo test
/// --workspace` builds it; a lone `cargo test -p hwqos-sra` builds it here).
fn monitor_bin() -> PathBuf {
    let bin = sra().with_file_name("hwqos-monitor");
    if !bin.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "hwqos-monitor", "--bin", "hwqos-monitor"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("running cargo build -p hwqos-monitor");
        assert!(status.success(), "cargo build -p hwqos-monitor failed");
    }
    assert!(bin.exists(), "{} not built", bin.display());
    bin
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn victim() -> Killed {
    Killed(
        Command::new(sra())
            .args(["leech", "cpu", "--duty", "0.5"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Starts `hwqos-monitor` counting `pid` with software events, its live API
/// at `socket`; returns once the socket answers.
fn start_monitor(dir: &Path, pid: u32, socket: &Path) -> Killed {
    let config = dir.join("monitor.toml");
    std::fs::write(
        &config,
        format!(
            "rate_hz = 10\nper_cpu = false\nprocfs = false\n\
             event_sets = [[\"sw.task_clock\", \"sw.context_switches\"]]\n\
             [[target]]\nselect = \"pid:{pid}\"\n\
             [output]\ndir = {:?}\n[api]\nsocket = {socket:?}\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
            dir.join("out")
        ),
    )
    .unwrap();
    let mut m = Killed(
        Command::new(monitor_bin())
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("monitor.log")).unwrap(),
            ))
            .spawn()
            .unwrap(),
    );
    wait_for("the monitor's live API", DEADLINE, || {
        if let Ok(Some(s)) = m.0.try_wait() {
            panic!(
                "hwqos-monitor exited with {s}: {}",
                std::fs::read_to_string(dir.join("monitor.log")).unwrap_or_default()
            );
        }
        hwqos_pmu::api::ApiClient::connect(socket).is_ok()
    });
    m
}

/// `hwqos-sra run` on `pid` with the monitor's socket at `socket`; its
/// stderr is collected.
fn start_sra(dir: &Path, pid: u32, socket: &Path) -> (Killed, Arc<Mutex<String>>) {
    let d = dir.display();
    let config = dir.join("sra.toml");
    std::fs::write(
        &config,
        format!(
            r#"[agent]
evaluation_period_s = 2
sample_interval_ms = 100
model = "{d}/model.json"
contract = "{d}/contract.json"
state_dir = "{d}/state"
metrics_listen = "127.0.0.1:0"
[monitor]
targets = ["pid:{pid}"]
events = ["sw.task_clock", "sw.context_switches"]
x_metric = "app.x"
api_socket = "{}"
[[monitor.app_sources]]
type = "command"
argv = ["sh", "-c", "cut -d' ' -f1 /proc/{pid}/schedstat"]
every_ms = 100
metric = "app.x"
[analysis]
step_ms = 100
filter_cutoff = 1.0
threshold = 0.0
"#,
            socket.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(sra())
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().unwrap();
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut l = sink.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
    (Killed(child), log)
}

fn metrics_addr(log: &Mutex<String>) -> Option<String> {
    let l = log.lock().unwrap();
    l.lines()
        .find_map(|x| x.strip_prefix("metrics on "))
        .map(str::to_string)
}

/// The value of `hwqos_sra_frames{source="SOURCE"}` on `/metrics`.
fn frames_from(addr: &str, source: &str) -> u64 {
    let body = hwqos_testsupport::http_get(addr, "/metrics")
        .map(|r| r.body)
        .unwrap_or_default();
    let prefix = format!("hwqos_sra_frames{{source=\"{source}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

#[test]
fn with_a_monitor_the_agent_reads_its_frames_and_opens_no_counters() {
    let dir = tempfile::tempdir().unwrap();
    let v = victim();
    let pid = v.0.id();
    let socket = dir.path().join("monitor.sock");
    let _monitor = start_monitor(dir.path(), pid, &socket);
    let (agent, log) = start_sra(dir.path(), pid, &socket);
    let agent_pid = agent.0.id();
    wait_for("the agent's metrics address", DEADLINE, || {
        metrics_addr(&log).is_some()
    });
    let addr = metrics_addr(&log).unwrap();
    // Frames come from the monitor; the agent never holds a perf_event fd.
    let contract = dir.path().join("contract.json");
    wait_for("a contract from frames the monitor sent", DEADLINE, || {
        assert_eq!(
            perf_event_fds(agent_pid),
            Some(0),
            "the agent opened counters of its own:\n{}",
            log.lock().unwrap()
        );
        contract.exists() && frames_from(&addr, "monitor") > 0
    });
    assert_eq!(frames_from(&addr, "sampler"), 0, "{}", log.lock().unwrap());
    let c = hwqos_sched::contract::Contract::parse(&std::fs::read_to_string(&contract).unwrap())
        .unwrap();
    assert_eq!(c.entries[0].process.to_string(), format!("pid:{pid}"));
    assert_eq!(perf_event_fds(agent_pid), Some(0));
    assert!(
        log.lock()
            .unwrap()
            .contains("reading frames from the monitor's live API"),
        "{}",
        log.lock().unwrap()
    );
}

#[test]
fn without_a_monitor_the_agent_samples_itself() {
    let dir = tempfile::tempdir().unwrap();
    let v = victim();
    let pid = v.0.id();
    // Nothing listens here.
    let socket = dir.path().join("no-monitor.sock");
    let (agent, log) = start_sra(dir.path(), pid, &socket);
    let agent_pid = agent.0.id();
    wait_for("the agent's own counters", DEADLINE, || {
        perf_event_fds(agent_pid).is_some_and(|n| n > 0)
    });
    wait_for("the agent's metrics address", DEADLINE, || {
        metrics_addr(&log).is_some()
    });
    let addr = metrics_addr(&log).unwrap();
    let contract = dir.path().join("contract.json");
    wait_for("a contract from the agent's own samples", DEADLINE, || {
        contract.exists() && frames_from(&addr, "sampler") > 0
    });
    assert_eq!(frames_from(&addr, "monitor"), 0);
}
