//! Runs this crate's stream-pair examples (issue 23) and checks what they
//! print; each also asserts its own round trips. `cargo test` builds the
//! examples before it runs any test; `cargo test -p hwqos-compress --test
//! examples` alone needs `cargo build -p hwqos-compress --examples` first.

/// Runs this crate's example `name` and returns its stdout.
fn run_example(name: &str) -> String {
    hwqos_testsupport::run_example("hwqos-compress", name)
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
