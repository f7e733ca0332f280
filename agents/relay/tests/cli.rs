//! The binary: `--check-config`, exit code 2 with file and key on bad
//! configuration, SIGHUP reload and SIGTERM exit 0.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_hwqos-relay");

#[test]
fn check_config_accepts_the_shipped_file() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/config/relay.toml"
    );
    let out = Command::new(BIN)
        .args(["--check-config", "--config", path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_configuration_exits_2_naming_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("relay.toml");
    std::fs::write(&p, "cpu_target = 7\n").unwrap();
    let out = Command::new(BIN)
        .args(["--check-config", "--config"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("relay.toml") && err.contains("cpu_target"),
        "{err}"
    );

    let out = Command::new(BIN)
        .args(["--config", "/nonexistent/relay.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/relay.toml"));
}

fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r
}

#[test]
fn sighup_reloads_the_policy_and_sigterm_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("relay.toml");
    let base = "listen = \"127.0.0.1:0\"\nconnect = \"127.0.0.1:9\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n";
    std::fs::write(&p, format!("policy = \"majority\"\n{base}")).unwrap();
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&p)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut metrics = None;
    for l in lines.by_ref() {
        let l = l.unwrap();
        if let Some(a) = l.strip_prefix("metrics on ") {
            metrics = Some(a.to_string());
            break;
        }
    }
    let metrics = metrics.expect("metrics address line");
    assert!(scrape(&metrics).contains("policy=\"majority\""));
    std::fs::write(&p, format!("policy = \"one:lz4\"\n{base}")).unwrap();
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !scrape(&metrics).contains("policy=\"one:lz4\"") {
        assert!(Instant::now() < deadline, "reload not applied");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}
