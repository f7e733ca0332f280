//! The command line: clear errors and exit code 2 for bad targets and models
//! (unknown metric, impossible value, wrong schema, a model made on another
//! CPU), configuration checks, and a clean stop on SIGTERM that leaves
//! nothing behind.

use hwqos_testsupport::wait_for;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn loadgen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hwqos-loadgen"))
        .args(args)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn unknown_metric_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(
        dir.path(),
        "t.json",
        r#"{"schema":"hwqos.loadtargets/1","created":"x","source":null,"hardware":null,
            "targets":[{"metric":"l4_miss_ratio","cpu":0,"mean":0.1}]}"#,
    );
    let o = loadgen(&["synthesize", &t, "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown metric `l4_miss_ratio`"),
        "{}",
        stderr(&o)
    );
    // The same on the command line.
    let o = loadgen(&["targets", "l4_miss_ratio@0=0.1", "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown metric"), "{}", stderr(&o));
}

#[test]
fn impossible_ratio_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(
        dir.path(),
        "t.json",
        r#"{"schema":"hwqos.loadtargets/1","created":"x","source":null,"hardware":null,
            "targets":[{"metric":"llc_miss_ratio","cpu":0,"mean":1.5}]}"#,
    );
    let o = loadgen(&["synthesize", &t, "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("150%"), "{}", stderr(&o));
    let o = loadgen(&["targets", "cpu_util@0=1.5", "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("impossible"), "{}", stderr(&o));
}

#[test]
fn wrong_schema_versions_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(
        dir.path(),
        "t.json",
        r#"{"schema":"hwqos.loadtargets/2","targets":[]}"#,
    );
    let o = loadgen(&["synthesize", &t, "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("schema `hwqos.loadtargets/2`, expected `hwqos.loadtargets/1`"),
        "{}",
        stderr(&o)
    );
    let m = write(dir.path(), "m.json", r#"{"schema":"hwqos.loadmodel/0"}"#);
    let o = loadgen(&["replay", &m, "--duration", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expected `hwqos.loadmodel/1`"),
        "{}",
        stderr(&o)
    );
    let o = loadgen(&[
        "replay",
        &write(dir.path(), "x.json", "not json"),
        "--duration",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not JSON"), "{}", stderr(&o));
}

/// A valid model of this node: one CPU-utilization pair at a small knob.
fn model_json(cpu_model: Option<&str>) -> String {
    let mut node = hwqos_topology::HardwareModel::this_node().unwrap();
    if let Some(m) = cpu_model {
        node.cpu_model = Some(m.into());
    }
    let entry = serde_json::json!({
        "metric": "cpu_util", "cpu": 0, "target": 0.05, "knob": 0.05,
        "controller": {"gains": {"kp": 0.3, "ki": 1.5, "kd": 0.0}, "bias": 0.05,
                       "integral": 0.0, "knob": 0.05, "range": [0.0, 0.95]},
        "tolerance": [0.01, 0.0], "series": []
    });
    serde_json::json!({
        "schema": "hwqos.loadmodel/1", "created": "x", "node": node,
        "convergence_s": 1.0, "samples": 4, "period_s": 0.25, "entries": [entry]
    })
    .to_string()
}

#[test]
fn model_from_a_different_cpu_is_refused_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let m = write(
        dir.path(),
        "m.json",
        &model_json(Some("Imaginary CPU 9000")),
    );
    let o = loadgen(&["replay", &m, "--duration", "0.2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("Imaginary CPU 9000"), "{}", stderr(&o));
    let o = loadgen(&["replay", &m, "--duration", "0.2", "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn configuration_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.toml", "[caps]\nmax_cpu_share = 0.5\n");
    let o = loadgen(&["--config", &good, "check-config"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let bad = write(dir.path(), "bad.toml", "[caps]\nmax_cpu_share = 1.5\n");
    let o = loadgen(&["--config", &bad, "check-config"]);
    assert_eq!(o.status.code(), Some(2));
    // file:line: key `…`: expected … (hwqos_agent::lifecycle::ConfigError)
    assert!(
        stderr(&o)
            .contains("bad.toml:2: key `caps.max_cpu_share`: expected a share in 0..=1, found 1.5"),
        "{}",
        stderr(&o)
    );
    let typo = write(dir.path(), "typo.toml", "[caps]\nmax_cpu_shares = 0.5\n");
    let o = loadgen(&["--config", &typo, "check-config"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("typo.toml:2"), "{}", stderr(&o));
    assert!(stderr(&o).contains("max_cpu_shares"), "{}", stderr(&o));
    let nice = write(dir.path(), "nice.toml", "nice = 40\n");
    let o = loadgen(&["--config", &nice, "check-config"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("nice.toml:1: key `nice`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn devices_and_fifos_are_refused_as_configuration_model_and_targets() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let fifo = fifo.to_str().unwrap();
    // Without a bound these read /dev/zero until memory ran out, and blocked
    // on the FIFO (no writer) for ever.
    for (args, kind) in [
        (
            vec!["--config", "/dev/zero", "check-config"],
            "a character device",
        ),
        (vec!["--config", fifo, "check-config"], "a FIFO"),
        (vec!["replay", "/dev/zero"], "a character device"),
        (vec!["replay", fifo], "a FIFO"),
    ] {
        let o = loadgen(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(kind), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn memory_cap_is_enforced_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "c.toml", "[caps]\nmax_memory_bytes = 1048576\n");
    let o = loadgen(&[
        "--config",
        &cfg,
        "generate",
        "--knob",
        "page_fault_rate@0=100",
        "--duration",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("max_memory_bytes"), "{}", stderr(&o));
}

/// SIGTERM: every generator (CPU, faults, switches, I/O) stops, the process
/// exits 0, and the I/O generator's file is gone.
#[test]
fn sigterm_stops_everything_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "c.toml",
        &format!(
            "[io]\ndir = \"{}\"\nblock_bytes = 4096\nfile_bytes = 1048576\n",
            dir.path().display()
        ),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_hwqos-loadgen"))
        .args(["--config", &cfg, "generate"])
        .args([
            "--knob",
            "cpu_util@0=0.2",
            "--knob",
            "page_fault_rate@0=1000",
        ])
        .args([
            "--knob",
            "context_switch_rate@0=1000",
            "--knob",
            "io_write_rate@0=1000000",
        ])
        .spawn()
        .unwrap();
    wait_for_io_file(child.id(), dir.path());
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit after SIGTERM: {status}");
    assert_eq!(io_files(dir.path()), Vec::<String>::new(), "left behind");
}

/// Files in `dir` other than the test's own configuration.
fn io_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".toml"))
        .collect()
}

/// Waits until process `pid` holds a file in `dir` open (the I/O generator
/// runs; with O_TMPFILE the file has no name to wait for).
fn wait_for_io_file(pid: u32, dir: &Path) {
    let dir = dir.canonicalize().unwrap();
    let what = format!("the I/O generator to open its file in {}", dir.display());
    wait_for(&what, Duration::from_secs(60), || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|fds| {
                fds.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.starts_with(&dir)))
            })
            .unwrap_or(false)
    });
}

/// `kill -9` gives the generator no chance to clean up: its file must still
/// not stay behind (it has no name: O_TMPFILE), and a named file left by a
/// process that is gone (older versions, file systems without O_TMPFILE) is
/// removed when the next I/O generator starts in that directory.
#[test]
fn kill_9_leaves_no_io_file_and_stale_files_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "c.toml",
        &format!(
            "[io]\ndir = \"{}\"\nblock_bytes = 4096\nfile_bytes = 1048576\n",
            dir.path().display()
        ),
    );
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = dir.path().join(format!("hwqos-loadgen-io-{dead}-0.dat"));
    std::fs::write(&stale, b"left by a killed generator").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hwqos-loadgen"))
        .args(["--config", &cfg, "generate"])
        .args(["--knob", "io_write_rate@0=1000000"])
        .spawn()
        .unwrap();
    wait_for_io_file(child.id(), dir.path());
    assert!(
        !stale.exists(),
        "the stale file {} is still there",
        stale.display()
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(io_files(dir.path()), Vec::<String>::new(), "left behind");
}

/// A knob outside its range is an error naming the value, not a silent clamp.
#[test]
fn a_knob_out_of_range_is_named() {
    let o = loadgen(&["generate", "--knob", "cpu_util@0=5.0", "--duration", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("cpu_util@0=5.0") && e.contains("knob 5 ") && e.contains("0..=0.95"),
        "{e}"
    );
    assert!(e.contains("caps.max_cpu_share"), "{e}");
    let o = loadgen(&[
        "generate",
        "--knob",
        "llc_miss_ratio@0=1.5",
        "--duration",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("knob 1.5"), "{}", stderr(&o));
}

/// The shipped configuration names no model (none is shipped): check-config
/// accepts it, `run` refuses with exit 2 naming `[run] model`; a model named
/// there that does not exist fails check-config (the unit's ExecStartPre).
#[test]
fn the_shipped_configuration_and_a_missing_model_are_explained() {
    let shipped = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/config/loadgen.toml"
    );
    let o = loadgen(&["--config", shipped, "check-config"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = loadgen(&["--config", shipped, "run"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("[run] model"), "{}", stderr(&o));
    assert!(stderr(&o).contains("synthesize"), "{}", stderr(&o));
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-model.json");
    let cfg = write(
        dir.path(),
        "c.toml",
        &format!("[run]\nmodel = \"{}\"\n", missing.display()),
    );
    let o = loadgen(&["--config", &cfg, "check-config"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("[run] model") && stderr(&o).contains("no-such-model.json"),
        "{}",
        stderr(&o)
    );
}

/// `replay --verify` measures what the model was synthesized on (here: this
/// process, as `--measure-processes self` records it) unless
/// `--measure-processes` says otherwise, and says what it measured.
#[test]
fn replay_verify_measures_the_models_scope() {
    let dir = tempfile::tempdir().unwrap();
    let mut model: serde_json::Value = serde_json::from_str(&model_json(None)).unwrap();
    model["measured_on"] =
        serde_json::json!({"kind": "processes", "this_process": true, "others": []});
    let m = write(dir.path(), "m.json", &model.to_string());
    let o = loadgen(&["replay", &m, "--duration", "2", "--verify", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("measured this process"),
        "{}",
        stderr(&o)
    );
    let devs: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    // This process's own share, not the whole CPU's (other tenants' builds).
    let measured = devs[0]["measured"].as_f64().unwrap();
    assert!(measured < 0.2, "measured {measured}");
    // A whole-CPU model measured on this process, as asked.
    let m = write(dir.path(), "w.json", &model_json(None));
    let o = loadgen(&[
        "replay",
        &m,
        "--duration",
        "1",
        "--verify",
        "--measure-processes",
        "self",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("measured this process"),
        "{}",
        stderr(&o)
    );
    let o = loadgen(&["replay", &m, "--duration", "1", "--verify"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("measured the whole CPU"),
        "{}",
        stderr(&o)
    );
}

/// Agent mode: `run` replays the configured model, tells the service manager
/// READY=1 and, on SIGTERM, STOPPING=1, and exits 0.
#[test]
fn run_notifies_ready_and_stopping_and_exits_on_sigterm() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let model = write(dir.path(), "m.json", &model_json(None));
    let cfg = write(
        dir.path(),
        "c.toml",
        &format!("[run]\nmodel = \"{model}\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n"),
    );
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hwqos-loadgen"))
        .args(["--config", &cfg, "run"])
        .env("NOTIFY_SOCKET", &sock_path)
        .spawn()
        .unwrap();
    let mut buf = [0u8; 4096];
    let mut seen = String::new();
    while !seen.contains("READY=1") {
        let n = sock.recv(&mut buf).expect("no READY=1 from the agent");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        seen.push('\n');
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    while !seen.contains("STOPPING=1") {
        let n = sock.recv(&mut buf).expect("no STOPPING=1 from the agent");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "exit after SIGTERM: {status}; notifications: {seen}"
    );
}

#[test]
fn a_cpu_that_is_not_online_is_named() {
    let o = loadgen(&["generate", "--knob", "cpu_util@4095=0.1", "--duration", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("CPU 4095"), "{}", stderr(&o));
}
