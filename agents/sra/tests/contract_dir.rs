//! Contracts from a watched directory (issue 21 item 3): `hwqos-sra run`
//! with `[agent] contract_dir` applies what a configuration tool writes
//! there (atomically: a dotfile renamed into place), keeps the last good
//! contract when the file turns invalid, counts the rejection on
//! `/metrics`, and follows the next valid version. The evaluation period is
//! 30 s and every wait at most 20 s, so the changes are seen through the
//! inotify watch, not the periodic rescan. Software events only; the target
//! is a `sleep`. `validate-dir`'s report and exit statuses.

use hwqos_testsupport::{http_get, wait_for};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hwqos-sra"))
}

/// A child killed and reaped when dropped, so a failed assertion leaves
/// nothing running.
struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn contract(pid: u32, version: u64, quota: u64) -> String {
    format!(
        r#"{{"schema":"hwqos.contract/1","version":{version},"entries":[{{"name":"sleeper","process":"pid:{pid}","period_us":100000,"quotas":{{"sw.page_faults":{quota}}}}}]}}"#
    )
}

/// Writes `name` the way a configuration tool should: a dotfile renamed
/// into place.
fn put_atomically(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// The value of the unlabelled gauge `name` on `/metrics` (`None` when the
/// endpoint or the line is missing).
fn gauge(addr: &str, name: &str) -> Option<f64> {
    let body = http_get(addr, "/metrics").ok()?.body;
    let prefix = format!("{name} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

fn quota_line(addr: &str, pid: u32) -> String {
    let body = http_get(addr, "/metrics")
        .map(|r| r.body)
        .unwrap_or_default();
    let prefix = format!(
        "hwqos_sra_event_quota{{pid=\"{pid}\",entry=\"sleeper\",event=\"sw.page_faults\"}} "
    );
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .unwrap_or_default()
}

#[test]
fn run_applies_the_directory_s_best_contract_and_keeps_the_last_good_one() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let contracts = d.join("contracts.d");
    std::fs::create_dir(&contracts).unwrap();
    let target = Killed(Command::new("sleep").arg("60").spawn().unwrap());
    let pid = target.0.id();
    let config = d.join("sra.toml");
    std::fs::write(
        &config,
        format!(
            r#"[agent]
evaluation_period_s = 30
sample_interval_ms = 100
model = "{dd}/model.json"
contract = "{dd}/contract.json"
contract_dir = "{cd}"
state_dir = "{dd}/state"
metrics_listen = "127.0.0.1:0"
[monitor]
targets = ["pid:{pid}"]
events = ["sw.page_faults", "sw.task_clock"]
x_metric = "app.x"
api_socket = ""
[[monitor.app_sources]]
type = "command"
argv = ["echo", "1"]
every_ms = 1000
metric = "app.x"
"#,
            dd = d.display(),
            cd = contracts.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(bin())
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().unwrap();
    let agent = Killed(child);
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut l = sink.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
    let mut addr = String::new();
    wait_for("the metrics address", WAIT, || {
        let l = log.lock().unwrap();
        match l.lines().find_map(|x| x.strip_prefix("metrics on ")) {
            Some(a) => {
                addr = a.to_string();
                true
            }
            None => false,
        }
    });
    let log_text = || log.lock().unwrap().clone();
    wait_for("contract_version 0 on /metrics", WAIT, || {
        gauge(&addr, "hwqos_sra_contract_version") == Some(0.0)
    });

    // v1: applied.
    put_atomically(&contracts, "node.json", &contract(pid, 1, 1000));
    wait_for("contract_version 1", WAIT, || {
        gauge(&addr, "hwqos_sra_contract_version") == Some(1.0)
    });
    wait_for("the v1 quota enforced", WAIT, || {
        quota_line(&addr, pid) == "1000"
    });
    assert_eq!(gauge(&addr, "hwqos_sra_contract_dir_rejected"), Some(0.0));

    // An invalid v2 replaces it: rejected, counted, v1 stays applied.
    put_atomically(&contracts, "node.json", &contract(pid, 2, 0));
    wait_for("the rejection counted", WAIT, || {
        gauge(&addr, "hwqos_sra_contract_dir_rejected").is_some_and(|v| v >= 1.0)
    });
    assert_eq!(gauge(&addr, "hwqos_sra_contract_version"), Some(1.0));
    assert_eq!(quota_line(&addr, pid), "1000");
    let l = log_text();
    assert!(
        l.contains("node.json") && l.contains("quota of `sw.page_faults` is zero"),
        "{l}"
    );
    // The tool's temporary files were never read.
    assert!(!l.contains(".node.json.tmp"), "{l}");
    let out = Command::new(bin())
        .arg("validate-dir")
        .arg(&contracts)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));

    // A valid v3: applied.
    put_atomically(&contracts, "node.json", &contract(pid, 3, 3000));
    wait_for("contract_version 3", WAIT, || {
        gauge(&addr, "hwqos_sra_contract_version") == Some(3.0)
    });
    wait_for("the v3 quota enforced", WAIT, || {
        quota_line(&addr, pid) == "3000"
    });
    let saved = std::fs::read_to_string(d.join("contract.json")).unwrap();
    assert_eq!(
        hwqos_sched::contract::Contract::parse(&saved)
            .unwrap()
            .version,
        3
    );

    // SAFETY: kill(2) on a process of this test; no memory is involved.
    unsafe { libc::kill(agent.0.id() as i32, libc::SIGTERM) };
    let mut agent = agent;
    let status = agent.0.wait().unwrap();
    assert!(status.success(), "{}", log_text());
    drop(target);
}

#[test]
fn validate_dir_reports_each_file_and_exits_2_on_any_invalid_one() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let run = |dir: &Path| {
        let out = Command::new(bin())
            .arg("validate-dir")
            .arg(dir)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, _) = run(d);
    assert_eq!(code, Some(0));
    assert!(out.contains("would apply: nothing"), "{out}");
    std::fs::write(d.join("a.json"), contract(1, 2, 10)).unwrap();
    std::fs::write(d.join("b.json"), contract(1, 5, 10)).unwrap();
    std::fs::write(d.join(".c.json"), "not even json").unwrap();
    std::fs::write(d.join("c.json.tmp"), "not even json").unwrap();
    let (code, out, err) = run(d);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        out,
        "a.json: ok v2\nb.json: ok v5\nwould apply: b.json (v5)\n"
    );
    std::fs::write(d.join("c.json"), "{\"schema\":").unwrap();
    let (code, out, err) = run(d);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(out.contains("c.json: rejected: "), "{out}");
    assert!(out.contains("would apply: b.json (v5)"), "{out}");
    assert!(err.contains("1 of 3 contract file(s) rejected"), "{err}");
    let (code, _, err) = run(&d.join("missing"));
    assert_eq!(code, Some(2));
    assert!(err.contains("missing"), "{err}");
}
