//! The OpenMetrics endpoint: content type, format, and `promtool check metrics`.

mod common;

use common::{wait_until, Running, SW_SETS};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("HTTP response");
    (head.to_string(), body.to_string())
}

fn promtool() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join("promtool"))
        .find(|p| p.is_file())
}

#[test]
fn metrics_endpoint_serves_valid_openmetrics() {
    let me = std::process::id();
    let m = Running::start(
        &format!("rate_hz = 20\n{SW_SETS}\n[[target]]\nselect = \"pid:{me}\"\n"),
        "",
    );
    let mut c = m.client();
    wait_until("3 frames", Duration::from_secs(30), || {
        c.status().unwrap().frames_sampled >= 3
    });
    let addr = c.status().unwrap().metrics_listen.expect("metrics address");
    let (head, body) = http_get(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "no EOF terminator");
    assert!(
        body.contains("# TYPE hwqos_sw_task_clock_seconds_per_second gauge"),
        "{body}"
    );
    assert!(
        body.contains("hwqos_sw_task_clock_seconds_per_second{scope=\"cpu\",cpu=\"0\"}"),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "hwqos_sw_task_clock_seconds_per_second{{scope=\"process\",pid=\"{me}\",comm=\""
        )),
        "process series with comm label missing: {body}"
    );
    assert!(body.contains("# UNIT hwqos_monitor_tick_lateness_seconds seconds"));
    assert!(body.contains("hwqos_monitor_frames_sampled "));
    assert!(body.contains("hwqos_monitor_build_info{version=\""));

    let (head, _) = http_get(&addr, "/other");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    let Some(promtool) = promtool() else {
        eprintln!("SKIPPED promtool check: `promtool` is not installed (Debian package `prometheus`; the README's test command installs it)");
        return;
    };
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- exposition ---\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
