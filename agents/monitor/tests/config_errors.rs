//! Every bad configuration is a fatal error: exit status 2 and a message in
//! the agents' one format, `file:line: key `k`: expected…` (file, line, key
//! and what was expected). No panics.

mod common;

use common::{run, SW_SETS};

/// Writes `text` to a config file (with a writable output dir appended unless
/// the text has an `[output]` section) and runs `--check-config` on it.
fn check(text: &str) -> (i32, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let text = if text.contains("[output]") {
        text.to_string()
    } else {
        format!("{text}\n[output]\ndir = {:?}\n", dir.path().join("out"))
    };
    std::fs::write(&path, text).unwrap();
    let out = run(&["--check-config", "--config", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    (out.status.code().unwrap_or(-1), stderr, dir)
}

fn assert_config_error(text: &str, must_contain: &[&str]) {
    let (code, stderr, _dir) = check(text);
    assert_eq!(code, 2, "exit code for {text:?}: {stderr}");
    assert!(
        stderr.contains("bad.toml"),
        "message does not name the file: {stderr}"
    );
    for m in must_contain {
        assert!(
            stderr.contains(m),
            "message for {text:?} lacks {m:?}: {stderr}"
        );
    }
}

#[test]
fn valid_config_passes_check() {
    let (code, stderr, _dir) = check(&format!(
        "rate_hz = 1000\n{SW_SETS}\n[[target]]\nselect = \"pid:1\"\n"
    ));
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn unknown_key() {
    assert_config_error(
        "rate_hz = 10\nsample_rate = 5\n",
        &["bad.toml:2: key `sample_rate`: ", "unknown field"],
    );
    assert_config_error(
        "[database]\nframez = 5\n",
        &["bad.toml:2: key `database.framez`: ", "unknown field"],
    );
}

#[test]
fn bad_type() {
    assert_config_error(
        "rate_hz = \"fast\"\n",
        &["bad.toml:1: key `rate_hz`: ", "invalid type"],
    );
    assert_config_error("per_cpu = 3\n", &["per_cpu", "invalid type"]);
    assert_config_error(
        "[database]\nframes = \"many\"\n",
        &["database.frames", "invalid type"],
    );
}

#[test]
fn toml_syntax_error() {
    assert_config_error("rate_hz = = 3\n", &["bad.toml:1:"]);
}

#[test]
fn unknown_event() {
    assert_config_error(
        "event_sets = [[\"sw.page_faults\"], [\"hw.no_such_event\"]]\n",
        &["event_sets", "hw.no_such_event", "set 2"],
    );
}

#[test]
fn impossible_rate() {
    for rate in ["0", "0.05", "20000", "-1"] {
        assert_config_error(
            &format!("rate_hz = {rate}\n"),
            &[
                "bad.toml:1: key `rate_hz`: ",
                "not a possible sampling rate",
            ],
        );
    }
    // The same check applies to `--rate`.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ok.toml");
    std::fs::write(
        &path,
        format!("[output]\ndir = {:?}\n", dir.path().join("out")),
    )
    .unwrap();
    let out = run(&[
        "--check-config",
        "--rate",
        "0",
        "--config",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate"));
}

#[test]
fn unwritable_output_dir() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    assert_config_error(
        &format!("[output]\ndir = {:?}\n", blocker.join("out")),
        &[
            "bad.toml:2: key `output.dir`: ",
            "cannot create output directory",
        ],
    );
}

#[test]
fn non_loopback_metrics_listen() {
    assert_config_error(
        "[metrics]\nlisten = \"0.0.0.0:9464\"\n",
        &["metrics.listen", "not a loopback address"],
    );
    assert_config_error(
        "[metrics]\nlisten = \"nowhere\"\n",
        &["metrics.listen", "not an IP:PORT"],
    );
}

#[test]
fn bad_target_selector() {
    assert_config_error(
        "[[target]]\nselect = \"process:1\"\n",
        &["bad.toml:2: key `target.select`: ", "process:1"],
    );
}

#[test]
fn empty_and_duplicate_event_sets() {
    assert_config_error("event_sets = [[]]\n", &["event_sets", "empty"]);
    assert_config_error(
        "event_sets = [[\"sw.page_faults\", \"sw.page_faults\"]]\n",
        &["event_sets", "twice"],
    );
}

#[test]
fn zero_database() {
    assert_config_error("[database]\nframes = 0\n", &["database.frames"]);
}

#[test]
fn missing_file() {
    let out = run(&["--check-config", "--config", "/nonexistent/monitor.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/monitor.toml") && stderr.contains("cannot read"),
        "{stderr}"
    );
}

#[test]
fn running_with_a_bad_config_also_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "rate_hz = 0\n").unwrap();
    let out = run(&["--config", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn unknown_sleep_strategy() {
    assert_config_error(
        "sleep = \"nap\"\n",
        &["bad.toml:1: key `sleep`: ", "nap", "slack-compensated"],
    );
}

#[test]
fn sleep_strategy_is_accepted() {
    let (code, out, _dir) = check(&format!("sleep = \"hybrid:50us\"\n{SW_SETS}\n"));
    assert_eq!(code, 0, "{out}");
}

/// Runs `--check-config --config PATH`, killing it if it has not exited after
/// 30 s (a generous bound: a reader that blocks on a FIFO never exits).
fn check_path(path: &std::path::Path) -> (Option<i32>, String) {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let mut child = Command::new(common::BIN)
        .args(["--check-config", "--config"])
        .arg(path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    use std::io::Read;
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    (status.and_then(|s| s.code()), stderr)
}

#[test]
fn config_paths_that_are_not_regular_files_are_refused_without_reading_them() {
    // /dev/zero would be read without end.
    let (code, stderr) = check_path(std::path::Path::new("/dev/zero"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("/dev/zero")
            && stderr.contains("is a character device, not a regular file"),
        "{stderr}"
    );
    // A FIFO without a writer would block the reader for ever.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("monitor.toml");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (code, stderr) = check_path(&fifo);
    assert_eq!(code, Some(2), "still running after 30 s, or: {stderr}");
    assert!(stderr.contains("is a FIFO, not a regular file"), "{stderr}");
    // A config file larger than the bound is refused, not parsed.
    let big = dir.path().join("big.toml");
    std::fs::write(&big, "#".repeat(2 << 20)).unwrap();
    let (code, stderr) = check_path(&big);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is larger than 1048576 bytes"), "{stderr}");
}
