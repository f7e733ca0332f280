//! `hwqos-sra` end to end: crash safety under `kill -9`, contracts with
//! vanished pids / offline CPUs / unknown events, `decide` on a fixture
//! topology, `analyse` on a recording with a planted correlation, `thaw`.

use hwqos_testsupport::{http_get, promtool_check_metrics, wait_for};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hwqos-sra"))
}

fn stat_field(pid: u32, field: usize) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    // Fields after the comm: index 0 is the state (field 3 of stat(5)).
    rest.split_whitespace().nth(field).map(str::to_string)
}

fn state(pid: u32) -> Option<char> {
    stat_field(pid, 0)?.chars().next()
}

/// minflt, field 10 of stat(5).
fn minor_faults(pid: u32) -> u64 {
    stat_field(pid, 7).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn leech() -> Child {
    Command::new(bin())
        .args(["leech", "faults", "--working-set", "1048576"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn write_contract(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("contract.json");
    std::fs::write(&p, body).unwrap();
    p
}

fn kill(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}

#[test]
fn kill_9_of_the_agent_leaves_nothing_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let mut victim = leech();
    let pid = victim.id();
    wait_for("the leech to fault", Duration::from_secs(30), || {
        minor_faults(pid) > 1000
    });
    // 20 faults per 500 ms: the leech is stopped almost all the time.
    let contract = write_contract(
        dir.path(),
        &format!(
            r#"{{"schema":"hwqos.contract/1","entries":[{{"name":"victim","process":"pid:{pid}","period_us":500000,"quotas":{{"sw.page_faults":20}}}}]}}"#
        ),
    );
    let mut agent = Command::new(bin())
        .args(["apply", contract.to_str().unwrap(), "--state-dir"])
        .arg(dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the victim to be stopped", Duration::from_secs(60), || {
        state(pid) == Some('T')
    });
    let throttled_faults = minor_faults(pid);
    agent.kill().unwrap(); // SIGKILL
    agent.wait().unwrap();
    // Progress, not timing: the victim faults far beyond what its quota
    // would have allowed (20 per 500 ms) once the guardian has thawed it.
    wait_for("the victim to run again", Duration::from_secs(90), || {
        minor_faults(pid) > throttled_faults + 20_000
    });
    assert_ne!(state(pid), Some('T'));
    let mut err = String::new();
    agent
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    kill(&mut victim);
}

#[test]
fn bad_entries_are_skipped_with_a_reason_and_the_rest_applies() {
    let dir = tempfile::tempdir().unwrap();
    let mut victim = leech();
    let pid = victim.id();
    let contract = write_contract(
        dir.path(),
        &format!(
            r#"{{"schema":"hwqos.contract/1","entries":[
              {{"name":"ok","process":"pid:{pid}","affinity":[0],"period_us":10000,"quotas":{{"sw.page_faults":100}}}},
              {{"name":"bad-cpu","process":"name:no-such-process-a","affinity":[4095]}},
              {{"name":"bad-event","process":"name:no-such-process-b","quotas":{{"hw.nonsense":3}}}},
              {{"name":"gone","process":"pid:999999999"}}]}}"#
        ),
    );
    let out = Command::new(bin())
        .args([
            "apply",
            contract.to_str().unwrap(),
            "--duration-s",
            "1",
            "--allow-partial",
            "--state-dir",
        ])
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("CPU 4095 is not online") && err.contains("entry=bad-cpu"),
        "{err}"
    );
    assert!(
        err.contains("hw.nonsense") && err.contains("entry=bad-event"),
        "{err}"
    );
    assert!(
        err.contains("no running process matches `pid:999999999`"),
        "{err}"
    );
    assert!(err.contains("pinned and verified"), "{err}");
    assert!(err.contains("\"overflows\":"), "{err}");
    // Released on exit: the victim runs and is not stopped.
    assert_ne!(state(pid), Some('T'));
    let cpus = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        cpus.lines()
            .any(|l| l.starts_with("Cpus_allowed_list:") && l.trim_end().ends_with('0')),
        "{cpus}"
    );
    kill(&mut victim);

    // Structural errors are fatal with status 2 and name the field.
    let bad = write_contract(
        dir.path(),
        r#"{"schema":"hwqos.contract/1","entries":[{"name":"x","process":"pid:1","quotas":{"sw.page_faults":0}}]}"#,
    );
    let out = Command::new(bin())
        .args(["apply", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("quota of `sw.page_faults` is zero"));
}

#[test]
fn thaw_continues_processes_named_in_the_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = victim.id();
    // SAFETY: kill(2) on a process of this test; no memory is involved.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    wait_for("stop", Duration::from_secs(30), || state(pid) == Some('T'));
    std::fs::write(
        dir.path().join("enforced.json"),
        format!(r#"{{"pids":[{pid}],"cgroups":[]}}"#),
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["thaw", "--state-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("thawed 1 process"));
    wait_for("continue", Duration::from_secs(30), || {
        state(pid) == Some('S')
    });
    kill(&mut victim);
}

#[test]
fn decide_on_the_thesis_machine() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.json");
    std::fs::write(
        &model,
        r#"{"schema":"hwqos.sensitivity/1","processes":[
          {"process":"name:mem1","sensitive_to":[{"resource":"L1-dcache-load-misses","correlation":0.9}]},
          {"process":"name:mem2","sensitive_to":[{"resource":"L1-dcache-load-misses","correlation":0.8}]},
          {"process":"name:cpu1"},{"process":"name:cpu2"}]}"#,
    )
    .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/topology/tests/fixtures/haswell-laptop");
    let out_path = dir.path().join("contract.json");
    let out = Command::new(bin())
        .args(["decide", "--model"])
        .arg(&model)
        .arg("--topology-root")
        .arg(&root)
        .arg("--out")
        .arg(&out_path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("name:mem1 → CPUs [0]") && text.contains("name:mem2 → CPUs [1]"),
        "{text}"
    );
    let c = hwqos_sched::contract::Contract::parse(&std::fs::read_to_string(&out_path).unwrap())
        .unwrap();
    assert_eq!(c.entries.len(), 4);
}

#[test]
fn analyse_finds_the_planted_resource_and_draws_it() {
    use hwqos_core::recording::{CounterClass, RecordedBackend, RecordingHeader, RecordingWriter};
    use hwqos_core::{Frame, MetricName, Sample, Scope, Timestamp};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.jsonl");
    let header = RecordingHeader::new(
        "test",
        Timestamp::default(),
        10.0,
        RecordedBackend::Simulated,
        CounterClass::Software,
    );
    let mut w = RecordingWriter::new(std::fs::File::create(&path).unwrap(), &header).unwrap();
    for i in 0..300u64 {
        let t = Timestamp {
            mono_ns: i * 100_000_000,
            wall_ns: 0,
        };
        let slow = (i as f64 * 0.05).sin();
        let sample = |m: &str, v: f64| Sample {
            time: t,
            scope: Scope::Process { pid: 42 },
            metric: MetricName::new(m).unwrap(),
            value: v,
            counter: None,
        };
        let frame = Frame {
            seq: i,
            time: t,
            interval_ns: 100_000_000,
            samples: vec![
                sample("sw.page_faults", 1000.0 + 300.0 * slow),
                sample("sw.context_switches", ((i * 7919) % 13) as f64),
                sample("app.rate", 5e5 - 1e5 * slow),
            ],
            labels: vec![],
        };
        w.write_frame(&frame).unwrap();
    }
    w.finish().unwrap();
    let svg = dir.path().join("svg");
    let out = Command::new(bin())
        .args([
            "analyse",
            path.to_str().unwrap(),
            "--x",
            "app.rate",
            "--svg-dir",
        ])
        .arg(&svg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first_row = text.lines().nth(2).unwrap();
    assert!(
        first_row.starts_with("sw.page_faults")
            && first_row.contains("-1.000")
            && first_row.ends_with('*'),
        "{text}"
    );
    assert!(std::fs::read_to_string(svg.join("pid_42.svg"))
        .unwrap()
        .contains("Corr = "));
}

/// `run`: one evaluation period end to end — counters and x sampled, the
/// model and the contract written, the contract applied (the process pinned).
#[test]
fn run_loop_analyses_decides_and_applies() {
    let dir = tempfile::tempdir().unwrap();
    let mut victim = Command::new(bin())
        .args(["leech", "cpu", "--duty", "0.5"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = victim.id();
    let d = dir.path().display();
    let config = dir.path().join("sra.toml");
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
[[monitor.app_sources]]
type = "command"
argv = ["sh", "-c", "cut -d' ' -f1 /proc/{pid}/schedstat"]
every_ms = 100
metric = "app.x"
[analysis]
step_ms = 100
filter_cutoff = 1.0
threshold = 0.0
"#
        ),
    )
    .unwrap();
    let check = Command::new(bin())
        .args(["run", "--check-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let mut agent = Command::new(bin())
        .args(["run", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let contract = dir.path().join("contract.json");
    wait_for("the first contract", Duration::from_secs(90), || {
        contract.exists()
    });
    let c = hwqos_sched::contract::Contract::parse(&std::fs::read_to_string(&contract).unwrap())
        .unwrap();
    assert_eq!(c.version, 1);
    assert_eq!(c.entries.len(), 1);
    assert_eq!(c.entries[0].process.to_string(), format!("pid:{pid}"));
    let cpus = c.entries[0].affinity.clone();
    assert!(!cpus.is_empty());
    let model = hwqos_sched::model::SensitivityModel::load(&dir.path().join("model.json")).unwrap();
    assert_eq!(model.processes.len(), 1);
    wait_for("the pin", Duration::from_secs(30), || {
        hwqos_sched::proc::thread_affinity(pid)
            .map(|a| a == cpus)
            .unwrap_or(false)
    });
    // SAFETY: kill(2) on a process of this test; no memory is involved.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let status = agent.wait().unwrap();
    let mut err = String::new();
    agent
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}");
    assert!(err.contains("decision:"), "{err}");
    kill(&mut victim);
}

/// `/metrics` shows the backend, the skipped entries and the live quota
/// statistics, and passes `promtool check metrics` when promtool is present.
#[test]
fn metrics_endpoint_shows_the_enforcement() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut victim = leech();
    let pid = victim.id();
    let contract = write_contract(
        dir.path(),
        &format!(
            r#"{{"schema":"hwqos.contract/1","entries":[
              {{"name":"v","process":"pid:{pid}","period_us":10000,"quotas":{{"sw.page_faults":100}}}},
              {{"name":"gone","process":"pid:999999999"}}]}}"#
        ),
    );
    let mut agent = Command::new(bin())
        .args([
            "apply",
            contract.to_str().unwrap(),
            "--metrics-listen",
            "127.0.0.1:0",
            "--allow-partial",
            "--state-dir",
        ])
        .arg(dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(agent.stderr.take().unwrap()).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("metrics on ").map(str::to_string))
        .expect("metrics address");
    std::thread::spawn(move || for _ in lines {});
    let mut body = String::new();
    wait_for("periods in /metrics", Duration::from_secs(30), || {
        body = http_get(&addr, "/metrics").expect("GET /metrics").body;
        body.lines()
            .any(|l| l.starts_with("hwqos_sra_periods{") && !l.ends_with(" 0"))
    });
    assert!(
        body.contains(
            "hwqos_sra_info{backend=\"userspace\",throttle=\"sigstop\",route=\"direct\"} 1"
        ),
        "{body}"
    );
    assert!(body.contains("hwqos_sra_skipped_entries 1"), "{body}");
    assert!(
        body.contains(&format!(
            "hwqos_sra_event_quota{{pid=\"{pid}\",entry=\"v\",event=\"sw.page_faults\"}} 100"
        )),
        "{body}"
    );
    assert!(body.ends_with("# EOF\n"));
    promtool_check_metrics(&body);
    // SAFETY: kill(2) on a process of this test; no memory is involved.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    assert!(agent.wait().unwrap().success());
    assert_ne!(state(pid), Some('T'));
    kill(&mut victim);
}

/// On the agent route the agent measures how long it takes from reading an
/// overflow signal to issuing the throttle: `/metrics` reports it as the
/// histogram `hwqos_sra_stop_latency_seconds` (`_bucket`, `_sum`, `_count`),
/// consistent with itself, and the page passes `promtool check metrics`
/// (the gauge with a `quantile` label it replaced did not).
#[test]
fn stop_latencies_on_the_agent_route_are_a_histogram_promtool_accepts() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut victim = leech();
    let pid = victim.id();
    let contract = write_contract(
        dir.path(),
        &format!(
            r#"{{"schema":"hwqos.contract/1","entries":[
              {{"name":"v","process":"pid:{pid}","period_us":10000,"quotas":{{"sw.page_faults":100}}}}]}}"#
        ),
    );
    let mut agent = Command::new(bin())
        .args([
            "apply",
            contract.to_str().unwrap(),
            "--route",
            "agent",
            "--metrics-listen",
            "127.0.0.1:0",
            "--state-dir",
        ])
        .arg(dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(agent.stderr.take().unwrap()).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("metrics on ").map(str::to_string))
        .expect("metrics address");
    std::thread::spawn(move || for _ in lines {});
    let value = |body: &str, series: &str| -> Option<f64> {
        body.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    };
    let mut body = String::new();
    wait_for(
        "stop latencies in /metrics",
        Duration::from_secs(60),
        || {
            body = http_get(&addr, "/metrics").expect("GET /metrics").body;
            value(&body, "hwqos_sra_stop_latency_seconds_count").is_some_and(|n| n > 0.0)
        },
    );
    assert!(
        body.contains(
            "hwqos_sra_info{backend=\"userspace\",throttle=\"sigstop\",route=\"agent\"} 1"
        ),
        "{body}"
    );
    assert!(
        body.contains("# TYPE hwqos_sra_stop_latency_seconds histogram\n"),
        "{body}"
    );
    assert!(!body.contains("quantile="), "{body}");
    let count = value(&body, "hwqos_sra_stop_latency_seconds_count").unwrap();
    let sum = value(&body, "hwqos_sra_stop_latency_seconds_sum").expect("_sum");
    let inf = value(&body, "hwqos_sra_stop_latency_seconds_bucket{le=\"+Inf\"}").expect("+Inf");
    assert_eq!(inf, count, "{body}");
    // Each latency is positive and below a second on any machine that runs
    // this test; the mean lies between the two.
    assert!(
        sum > 0.0 && sum / count < 1.0,
        "sum {sum}, count {count}: {body}"
    );
    // Cumulative buckets never decrease and end at the count.
    let buckets: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with("hwqos_sra_stop_latency_seconds_bucket{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(buckets.len(), 22, "{body}");
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{body}");
    assert!(body.ends_with("# EOF\n"));
    promtool_check_metrics(&body);
    // SAFETY: kill(2) on a process of this test; no memory is involved.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    assert!(agent.wait().unwrap().success());
    assert_ne!(state(pid), Some('T'));
    kill(&mut victim);
}

/// The cgroup v2 freezer path: the victim is moved into the agent's freezer
/// cgroup and frozen; after `kill -9` of the agent the guardian thaws the
/// cgroup and the victim makes progress again. Needs a writable cgroup2 mount
/// (any systemd machine, and this VM's hybrid layout); where /proc/mounts has
/// none the test says so and checks nothing else.
#[test]
fn kill_9_with_the_cgroup_freezer_thaws_the_cgroup() {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let Some(root) = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some("cgroup2"))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(PathBuf::from)
    else {
        eprintln!("no cgroup2 mount: the freezer path cannot run here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut victim = leech();
    let pid = victim.id();
    wait_for("the leech to fault", Duration::from_secs(30), || {
        minor_faults(pid) > 1000
    });
    let contract = write_contract(
        dir.path(),
        &format!(
            r#"{{"schema":"hwqos.contract/1","entries":[{{"name":"victim","process":"pid:{pid}","period_us":500000,"quotas":{{"sw.page_faults":20}}}}]}}"#
        ),
    );
    let mut agent = Command::new(bin())
        .args([
            "apply",
            contract.to_str().unwrap(),
            "--throttle",
            "freeze",
            "--route",
            "agent",
            "--state-dir",
        ])
        .arg(dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let frozen = root.join("hwqos-sra").join(format!("pid-{pid}"));
    wait_for("the victim to be frozen", Duration::from_secs(60), || {
        std::fs::read_to_string(frozen.join("cgroup.events")).is_ok_and(|e| e.contains("frozen 1"))
    });
    let throttled_faults = minor_faults(pid);
    agent.kill().unwrap();
    agent.wait().unwrap();
    wait_for("the victim to run again", Duration::from_secs(90), || {
        minor_faults(pid) > throttled_faults + 20_000
    });
    assert!(std::fs::read_to_string(frozen.join("cgroup.events"))
        .unwrap()
        .contains("frozen 0"));
    kill(&mut victim);
    // The empty freezer cgroup is left behind after a crash (the agent could
    // not move the victim back); remove it so the test leaves nothing.
    let _ = std::fs::remove_dir(&frozen);
    let _ = std::fs::remove_dir(root.join("hwqos-sra"));
}
