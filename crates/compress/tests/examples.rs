//! Runs this crate's stream-pair examples (issue 23) and checks what they
//! print; each also asserts its own round trips. `cargo test` builds the
//! examples before it runs any test; `cargo test -p hwqos-compress --test
//! examples` alone needs `cargo build -p hwqos-compress --examples` first.

use std::process::Command;

/// Runs `target/debug/examples/NAME` and returns its stdout; fails on a
/// non-zero exit.
fn run_example(name: &str) -> String {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} not built: run `cargo build -p hwqos-compress --examples`",
        path.display()
    );
    let out = Command::new(&path).output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn value(stdout: &str, key: &str) -> u64 {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {stdout}"));
    line.trim_start_matches(" = ").parse().expect(key)
}

/// 200 messages, every one echoed; a slow link makes compression pay.
fn check(stdout: &str) {
    assert_eq!(value(stdout, "messages_sent"), 200, "{stdout}");
    let (app, wire) = (
        value(stdout, "app_bytes_sent"),
        value(stdout, "wire_bytes_sent"),
    );
    assert!(wire * 2 < app, "{wire} wire bytes for {app}: {stdout}");
}

#[test]
fn blocking_stream_pair_compresses_on_a_slow_link() {
    check(&run_example("stream_pair"));
}

#[cfg(feature = "tokio")]
#[test]
fn tokio_stream_pair_compresses_on_a_slow_link() {
    check(&run_example("stream_pair_tokio"));
}
