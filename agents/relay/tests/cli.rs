//! The binary: `--check-config`, exit code 2 with file and key on bad
//! configuration, SIGHUP reload and SIGTERM exit 0.

use hwqos_testsupport::{http_get, wait_for};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

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

/// The body of `GET /metrics`.
fn scrape(addr: &str) -> String {
    http_get(addr, "/metrics").expect("GET /metrics").body
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
    wait_for("the reload to be applied", Duration::from_secs(20), || {
        scrape(&metrics).contains("policy=\"one:lz4\"")
    });
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

fn check(config: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(["--check-config", "--config"])
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 17: a non-loopback `listen` needs the explicit opt-in; 4 GiB sizes,
/// `/dev/zero` and a FIFO as the configuration fail at once, naming what.
#[test]
fn check_config_refuses_open_binds_huge_sizes_and_non_regular_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("relay.toml");
    std::fs::write(&p, "mode = \"decompress\"\nlisten = \"0.0.0.0:7401\"\n").unwrap();
    let (code, err) = check(&p);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("`listen`") && err.contains("allow_non_loopback = true"),
        "{err}"
    );
    std::fs::write(
        &p,
        "mode = \"decompress\"\nlisten = \"0.0.0.0:7401\"\nallow_non_loopback = true\n",
    )
    .unwrap();
    let (code, err) = check(&p);
    assert_eq!(code, Some(0), "{err}");

    for key in ["max_message", "chunk_bytes"] {
        std::fs::write(&p, format!("{key} = 4294967296\n")).unwrap();
        let (code, err) = check(&p);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(&format!("`{key}`")), "{err}");
    }

    let (code, err) = check(std::path::Path::new("/dev/zero"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("/dev/zero") && err.contains("not a regular file"),
        "{err}"
    );
    let fifo = dir.path().join("fifo.toml");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // No writer ever opens it: a blocking read would hang this test.
    let (code, err) = check(&fifo);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("FIFO"), "{err}");

    let key = dir.path().join("relay.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&p, "psk_file = \"relay.key\"\n").unwrap();
    let (code, err) = check(&p);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("psk_file") && err.contains("chmod 600"),
        "{err}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, err) = check(&p);
    assert_eq!(code, Some(0), "{err}");
}

/// Issue 17 item 7: a flood of refused connections is one WARN, then one
/// line with the count, not a line per connection.
#[test]
fn refused_connections_are_logged_aggregated() {
    // A peer that accepts and never answers: the one allowed connection
    // stays in its handshake.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("relay.toml");
    std::fs::write(
        &p,
        format!(
            "listen = \"127.0.0.1:0\"\nconnect = \"{}\"\nmax_connections = 1\nhandshake_timeout_ms = 300000\ncpu_target = 0\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
            silent.local_addr().unwrap()
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&p)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut listen, mut metrics) = (None, None);
    for l in lines.by_ref() {
        let l = l.unwrap();
        if let Some(a) = l.strip_prefix("listening on ") {
            listen = Some(a.to_string());
        }
        if let Some(a) = l.strip_prefix("metrics on ") {
            metrics = Some(a.to_string());
            break;
        }
    }
    let (listen, metrics) = (listen.unwrap(), metrics.unwrap());
    let _held = std::net::TcpStream::connect(&listen).unwrap();
    wait_for(
        "the first connection to be accepted",
        Duration::from_secs(60),
        || scrape(&metrics).contains("\nhwqos_relay_connections 1\n"),
    );
    for _ in 0..200 {
        let mut s = std::net::TcpStream::connect(&listen).unwrap();
        // Refused: closed at once.
        let mut b = Vec::new();
        let _ = s.read_to_end(&mut b);
    }
    wait_for(
        "the refusals to be counted",
        Duration::from_secs(60),
        || scrape(&metrics).contains("\nhwqos_relay_connections_refused 200\n"),
    );
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    child.wait().unwrap();
    let refused: Vec<&String> = rest.iter().filter(|l| l.contains("refused")).collect();
    assert!(
        (1..=3).contains(&refused.len()),
        "{} lines: {refused:#?}",
        refused.len()
    );
    let counted: u64 = refused
        .iter()
        .filter_map(|l| {
            l.split("refused ")
                .nth(1)?
                .split(" more")
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(counted, 199, "{refused:#?}");
    drop(silent);
}
