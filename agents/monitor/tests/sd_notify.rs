//! The service-manager protocol against a real notify socket: the test binds a
//! Unix datagram socket, passes it as `$NOTIFY_SOCKET` (as systemd does for a
//! `Type=notify` unit) and reads what the monitor binary sends: `READY=1` once
//! serving, `WATCHDOG=1` only when `$WATCHDOG_USEC` is set for its pid,
//! `RELOADING=1` + `MONOTONIC_USEC` then `READY=1` on SIGHUP, `STOPPING=1` on
//! SIGTERM, and `STATUS=` lines.

mod common;

use common::{config_text, BIN, SW_SETS};
use hwqos_pmu::api::ApiClient;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Generous bound on each wait (slow, shared machines), not a speed assertion.
const LIMIT: Duration = Duration::from_secs(30);

/// A monitor started with a notify socket; killed on drop (also on panic).
struct Notified {
    child: Child,
    notify: UnixDatagram,
    socket: PathBuf,
    dir: tempfile::TempDir,
    /// Every message received so far, one entry per datagram.
    seen: Vec<String>,
}

impl Notified {
    fn start(watchdog: Option<(&str, Option<&str>)>) -> Notified {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("monitor.sock");
        let config = dir.path().join("monitor.toml");
        let body = format!("rate_hz = 100\n{SW_SETS}\n");
        std::fs::write(
            &config,
            config_text(&body, &socket, &dir.path().join("out"), ""),
        )
        .expect("write config");
        let notify_path = dir.path().join("notify.sock");
        let notify = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
        notify.set_read_timeout(Some(LIMIT)).expect("timeout");
        let mut cmd = Command::new(BIN);
        cmd.arg("--config")
            .arg(&config)
            .env("NOTIFY_SOCKET", &notify_path)
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("monitor.log")).expect("log file"),
            ));
        if let Some((usec, pid)) = watchdog {
            cmd.env("WATCHDOG_USEC", usec);
            if let Some(pid) = pid {
                cmd.env("WATCHDOG_PID", pid);
            }
        }
        let child = cmd.spawn().expect("spawn hwqos-monitor");
        Notified {
            child,
            notify,
            socket,
            dir,
            seen: Vec::new(),
        }
    }

    /// Receives datagrams until one contains `line` as a whole line; returns
    /// that datagram.
    fn expect_line(&mut self, line: &str) -> String {
        let mut buf = vec![0u8; 4096];
        loop {
            let n = match self.notify.recv(&mut buf) {
                Ok(n) => n,
                Err(e) => panic!(
                    "no `{line}` from the monitor ({e}); received so far: {:?}\nlog:\n{}",
                    self.seen,
                    self.log()
                ),
            };
            let msg = String::from_utf8(buf[..n].to_vec()).expect("UTF-8 notify message");
            self.seen.push(msg.clone());
            if msg.lines().any(|l| l == line) {
                return msg;
            }
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("monitor.log")).unwrap_or_default()
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill failed");
    }

    fn frames_sampled(&self) -> u64 {
        let mut c = ApiClient::connect(&self.socket).expect("connect to the API");
        c.set_read_timeout(Some(LIMIT)).expect("timeout");
        c.status().expect("status").frames_sampled
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        for _ in 0..3000 {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the monitor did not exit; log:\n{}", self.log());
    }

    fn count(&self, line: &str) -> usize {
        self.seen
            .iter()
            .filter(|m| m.lines().any(|l| l == line))
            .count()
    }
}

impl Drop for Notified {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn monotonic_usec() -> u64 {
    hwqos_core::time::monotonic_ns() / 1000
}

#[test]
fn ready_watchdog_reload_and_stopping_reach_the_notify_socket() {
    // 100 ms watchdog: the monitor pings every 50 ms.
    let mut m = Notified::start(Some(("100000", None)));
    m.expect_line("READY=1");
    // The API answers once READY was sent: READY means serving.
    assert!(m.frames_sampled() < u64::MAX);
    assert!(
        m.seen.iter().any(|s| s
            .lines()
            .any(|l| l.starts_with("STATUS=sampling at 100 Hz"))),
        "a STATUS line before READY: {:?}",
        m.seen
    );
    for _ in 0..3 {
        m.expect_line("WATCHDOG=1");
    }

    let before = monotonic_usec();
    m.signal(libc::SIGHUP);
    let reloading = m.expect_line("RELOADING=1");
    let after = monotonic_usec();
    let usec: u64 = reloading
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .unwrap_or_else(|| panic!("RELOADING=1 without MONOTONIC_USEC: {reloading:?}"))
        .parse()
        .expect("MONOTONIC_USEC is a number");
    assert!(
        (before..=after).contains(&usec),
        "MONOTONIC_USEC={usec} is CLOCK_MONOTONIC between the signal ({before}) and its receipt ({after})"
    );
    m.expect_line("READY=1");
    assert!(
        m.seen.iter().any(|s| s.contains("1 reloads")),
        "the STATUS after the reload counts it: {:?}",
        m.seen
    );
    // The watchdog keeps going after the reload.
    m.expect_line("WATCHDOG=1");

    m.signal(libc::SIGTERM);
    m.expect_line("STOPPING=1");
    let status = m.wait_exit();
    assert!(status.success(), "exit {status}; log:\n{}", m.log());
}

#[test]
fn no_watchdog_pings_unless_enabled_for_this_pid() {
    // Without WATCHDOG_USEC, and with WATCHDOG_USEC meant for another pid
    // (pid 1 is never the monitor), the monitor must not ping.
    for watchdog in [None, Some(("100000", Some("1")))] {
        let mut m = Notified::start(watchdog);
        m.expect_line("READY=1");
        // 100 frames at 100 Hz take at least a second: twenty ping intervals
        // of the 100 ms watchdog, had it been enabled.
        let mut polls = 0;
        while m.frames_sampled() < 100 {
            polls += 1;
            assert!(polls < 3000, "sampling stalled; log:\n{}", m.log());
            std::thread::sleep(Duration::from_millis(10));
        }
        m.signal(libc::SIGTERM);
        m.expect_line("STOPPING=1");
        assert!(m.wait_exit().success(), "log:\n{}", m.log());
        assert_eq!(
            m.count("WATCHDOG=1"),
            0,
            "watchdog {watchdog:?}: pings sent: {:?}",
            m.seen
        );
    }
}
