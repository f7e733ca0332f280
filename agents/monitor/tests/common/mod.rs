//! Helpers for the monitor's integration tests: a monitor process with its own
//! temporary socket, output directory and an ephemeral /metrics port.

#![allow(dead_code)]

use hwqos_pmu::api::ApiClient;
use hwqos_testsupport::wait_for;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_hwqos-monitor");

/// Software events only: countable on every Linux node, PMU or not.
pub const SW_SETS: &str =
    r#"event_sets = [["sw.task_clock", "sw.page_faults", "sw.context_switches"]]"#;

/// Runs the binary with arguments and returns its output.
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run hwqos-monitor")
}

/// A monitor process under test; killed on drop.
pub struct Running {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub out: PathBuf,
}

impl Running {
    /// Starts `hwqos-monitor -c CONFIG` where CONFIG is `body` plus an
    /// `[output]`, `[api]` and `[metrics]` section in a fresh temporary directory
    /// (`extra_sections` are appended verbatim, e.g. more `[api]` keys go there
    /// via `api_extra`).
    pub fn start(body: &str, api_extra: &str) -> Running {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("monitor.sock");
        let out = dir.path().join("out");
        let config = dir.path().join("monitor.toml");
        std::fs::write(&config, config_text(body, &socket, &out, api_extra)).expect("write config");
        let child = Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("monitor.log")).expect("log file"),
            ))
            .spawn()
            .expect("spawn hwqos-monitor");
        let mut r = Running {
            child,
            dir,
            config,
            socket,
            out,
        };
        let sock = r.socket.clone();
        wait_for("the monitor socket", Duration::from_secs(30), || {
            if sock.exists() && ApiClient::connect(&sock).is_ok() {
                return true;
            }
            if let Ok(Some(status)) = r.child.try_wait() {
                panic!("hwqos-monitor exited early with {status}");
            }
            false
        });
        r
    }

    /// The monitor's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("monitor.log")).unwrap_or_default()
    }

    pub fn client(&self) -> ApiClient {
        let c = ApiClient::connect(&self.socket).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        c
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill failed");
    }

    /// Waits for the process to exit (generous bound).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let mut status = None;
        wait_for("the monitor to exit", Duration::from_secs(30), || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        status.expect("an exit status")
    }

    /// Files in the output directory with the given extension.
    pub fn outputs(&self, ext: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&self.out)
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|e| e == ext))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn config_text(body: &str, socket: &Path, out: &Path, api_extra: &str) -> String {
    format!(
        "{body}\n\n[output]\ndir = {out:?}\n\n[api]\nsocket = {socket:?}\n{api_extra}\n\n[metrics]\nlisten = \"127.0.0.1:0\"\n"
    )
}
