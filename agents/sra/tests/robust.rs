//! `hwqos-sra` against an operator's red team (issue 17): no combination of
//! `kill -9` of the agent and its guardian leaves a target stopped; the agent
//! never throttles itself, its guardian, PID 1 or kernel threads; contracts
//! that would do nothing, and unreadable inputs, are refused with exit 2.
//!
//! Waits are bounded polls for a condition (a failure, never a hang), not
//! timing assertions.

use hwqos_testsupport::wait_for;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hwqos-sra"))
}

fn stat_field(pid: u32, field: usize) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    rest.split_whitespace().nth(field).map(str::to_string)
}

fn state(pid: u32) -> Option<char> {
    stat_field(pid, 0)?.chars().next()
}

fn ppid(pid: u32) -> Option<u32> {
    stat_field(pid, 1)?.parse().ok()
}

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

/// Polls `cond` every 10 ms, at most `limit` times; false when it never held.
fn poll(limit: u32, mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn kill9(pid: u32) {
    // SAFETY: kill(2) with a positive pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
}

/// The guardian children of `agent` (`hwqos-sra __guardian`).
fn guardians(agent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if ppid(pid) != Some(agent) {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains("__guardian") {
            out.push(pid);
        }
    }
    out
}

/// An agent enforcing 20 page faults per 500 ms on a faulting leech (the
/// leech is stopped almost all the time), with its stderr collected.
struct Setup {
    _dir: tempfile::TempDir,
    victim: Child,
    agent: Child,
    log: Arc<Mutex<String>>,
}

impl Setup {
    fn start(extra: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let victim = leech();
        let pid = victim.id();
        wait_for("the leech to fault", Duration::from_secs(30), || {
            minor_faults(pid) > 1000
        });
        let contract = dir.path().join("contract.json");
        std::fs::write(
            &contract,
            format!(
                r#"{{"schema":"hwqos.contract/1","entries":[{{"name":"victim","process":"pid:{pid}","period_us":500000,"quotas":{{"sw.page_faults":20}}}}]}}"#
            ),
        )
        .unwrap();
        let mut agent = Command::new(bin())
            .arg("apply")
            .arg(&contract)
            .args(extra)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let mut err = agent.stderr.take().unwrap();
        let l = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                l.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let a = agent.id();
        wait_for("the guardian", Duration::from_secs(30), || {
            guardians(a).len() == 1
        });
        wait_for("the victim to be stopped", Duration::from_secs(60), || {
            state(pid) == Some('T')
        });
        Setup {
            _dir: dir,
            victim,
            agent,
            log,
        }
    }

    fn victim(&self) -> u32 {
        self.victim.id()
    }

    fn guardian(&self) -> u32 {
        guardians(self.agent.id())[0]
    }

    /// After every hwqos process is gone: the victim leaves state T within a
    /// bounded wait and stays runnable (it faults far beyond its quota).
    fn assert_victim_runs(mut self) {
        let pid = self.victim();
        let _ = self.agent.wait();
        let left_stopped = !poll(200, || state(pid) != Some('T'));
        if left_stopped {
            // Leave nothing stopped behind the failing test.
            // SAFETY: kill(2) on a process of this test; no memory is involved.
            unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        }
        let faults = minor_faults(pid);
        let runs = poll(300, || minor_faults(pid) > faults + 20_000);
        let _ = self.victim.kill();
        let _ = self.victim.wait();
        assert!(!left_stopped, "the victim was left stopped (state T)");
        assert!(runs, "the victim does not make progress");
    }
}

#[test]
fn kill_9_of_the_guardian_is_noticed_logged_and_the_guardian_respawned() {
    let s = Setup::start(&[]);
    let old = s.guardian();
    kill9(old);
    let agent = s.agent.id();
    wait_for("a new guardian", Duration::from_secs(30), || {
        let g = guardians(agent);
        g.len() == 1 && g[0] != old
    });
    wait_for("the error line", Duration::from_secs(30), || {
        let l = s.log.lock().unwrap();
        l.contains("ERROR") && l.contains("guardian")
    });
    // Enforcement goes on, under the new guardian.
    let pid = s.victim();
    wait_for(
        "the victim to be stopped again",
        Duration::from_secs(60),
        || state(pid) == Some('T'),
    );
    kill9(agent);
    s.assert_victim_runs();
}

#[test]
fn kill_9_of_the_guardian_then_the_agent_leaves_nothing_stopped() {
    let s = Setup::start(&[]);
    kill9(s.guardian());
    kill9(s.agent.id());
    s.assert_victim_runs();
}

#[test]
fn kill_9_of_the_agent_then_the_guardian_leaves_nothing_stopped() {
    let s = Setup::start(&[]);
    let g = s.guardian();
    kill9(s.agent.id());
    kill9(g);
    s.assert_victim_runs();
}

#[test]
fn kill_9_of_the_guardian_then_the_agent_on_the_agent_route_leaves_nothing_stopped() {
    let s = Setup::start(&["--route", "agent"]);
    kill9(s.guardian());
    kill9(s.agent.id());
    s.assert_victim_runs();
}

#[test]
fn kill_9_of_the_agent_alone_leaves_nothing_stopped() {
    let s = Setup::start(&[]);
    kill9(s.agent.id());
    s.assert_victim_runs();
}

// ---------------------------------------------------------------- defect 4

/// Runs `hwqos-sra apply` on `contract` through `sh -c`, so the contract can
/// name the agent's own pid (`$$` becomes the agent on `exec`); `prelude` runs
/// in the shell first. Waits for the exit (bounded: a self-stopped agent is
/// killed and reported as `None`).
fn apply_via_shell(
    exe: &Path,
    dir: &Path,
    contract_body: &str,
    prelude: &str,
) -> (Option<i32>, String) {
    let contract = dir.join("contract.json");
    std::fs::write(dir.join("contract.tmpl"), contract_body).unwrap();
    let script = format!(
        "{prelude}\nsed \"s/SELF/$$/g\" {tmpl} > {c}\nexec {exe} apply {c} --duration-s 1 --state-dir {state}",
        tmpl = dir.join("contract.tmpl").display(),
        c = contract.display(),
        exe = exe.display(),
        state = dir.join("state").display(),
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let pid = child.id();
    let mut code = None;
    let exited = poll(1000, || match child.try_wait() {
        Ok(Some(st)) => {
            code = st.code();
            true
        }
        _ => false,
    });
    if !exited {
        // It stopped itself: kill it; its guardian thaws whatever it held.
        for g in guardians(pid) {
            // SAFETY: kill(2) on a process of this test; no memory is involved.
            unsafe { libc::kill(g as i32, libc::SIGCONT) };
        }
        kill9(pid);
        let _ = child.wait();
    }
    (code, reader.join().unwrap())
}

fn quota_entry(name: &str, process: &str) -> String {
    format!(
        r#"{{"name":"{name}","process":"{process}","period_us":10000,"quotas":{{"sw.task_clock":1000000}}}}"#
    )
}

#[test]
fn a_pid_selector_naming_the_agent_itself_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        r#"{{"schema":"hwqos.contract/1","entries":[{}]}}"#,
        quota_entry("me", "pid:SELF")
    );
    let (code, err) = apply_via_shell(&bin(), dir.path(), &body, "");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("entry `me`") && err.contains("own"), "{err}");
}

#[test]
fn a_regex_matching_the_guardian_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A uniquely named copy, so the regex matches no other test's guardian.
    let unique = format!("sra-guardian-test-{}", std::process::id());
    let exe = dir.path().join(&unique);
    std::fs::copy(bin(), &exe).unwrap();
    let body = format!(
        r#"{{"schema":"hwqos.contract/1","entries":[{}]}}"#,
        quota_entry("g", &format!("regex:{unique}.*__guardian"))
    );
    let (code, err) = apply_via_shell(&exe, dir.path(), &body, "");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("entry `g`") && err.contains("own"), "{err}");
}

#[test]
fn a_cgroup_selector_holding_the_agent_never_throttles_it() {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let Some(root) = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some("cgroup2"))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(PathBuf::from)
    else {
        eprintln!("no cgroup2 mount: the cgroup selector cannot be tried here");
        return;
    };
    let name = format!("hwqos-sra-selftest-{}", std::process::id());
    let cg = root.join(&name);
    std::fs::create_dir_all(&cg).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        r#"{{"schema":"hwqos.contract/1","entries":[{}]}}"#,
        quota_entry("cg", &format!("cgroup:/{name}"))
    );
    let prelude = format!("echo $$ > {}/cgroup.procs", cg.display());
    let (code, err) = apply_via_shell(&bin(), dir.path(), &body, &prelude);
    let _ = poll(300, || std::fs::remove_dir(&cg).is_ok());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("entry `cg`") && err.contains("own"), "{err}");
}

#[test]
fn pid_1_and_kernel_threads_are_refused_without_force() {
    let dir = tempfile::tempdir().unwrap();
    // No quotas and no affinity: even the unfixed agent would not touch them.
    for (sel, want) in [("pid:1", "PID 1"), ("pid:2", "kernel thread")] {
        let flags = std::fs::read_to_string("/proc/2/stat").unwrap_or_default();
        if sel == "pid:2" && !flags.contains("kthreadd") {
            eprintln!("pid 2 is not kthreadd here (a pid namespace); skipped");
            continue;
        }
        let c = dir.path().join("c.json");
        std::fs::write(
            &c,
            format!(
                r#"{{"schema":"hwqos.contract/1","entries":[{{"name":"x","process":"{sel}"}}]}}"#
            ),
        )
        .unwrap();
        let out = Command::new(bin())
            .arg("apply")
            .arg(&c)
            .args(["--duration-s", "0.2", "--state-dir"])
            .arg(dir.path().join("state"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sel}: {err}");
        assert!(
            err.contains(want) && err.contains("\"force\": true") && err.contains("entry `x`"),
            "{sel}: {err}"
        );
    }
}

// ---------------------------------------------------------------- defect 6

fn apply_status(dir: &Path, body: &str, extra: &[&str]) -> (Option<i32>, String) {
    let c = dir.join("c.json");
    std::fs::write(&c, body).unwrap();
    let out = Command::new(bin())
        .arg("apply")
        .arg(&c)
        .args(["--duration-s", "0.3"])
        .args(extra)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn contracts_that_would_do_nothing_exit_2_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = victim.id();
    let doc = |entries: &str| format!(r#"{{"schema":"hwqos.contract/1","entries":[{entries}]}}"#);
    let pid_text = format!("pid {pid}");
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            doc(&format!(
                r#"{{"name":"ev","process":"pid:{pid}","quotas":{{"hw.nonsense":3}}}}"#
            )),
            vec!["entry `ev`", "hw.nonsense"],
        ),
        (
            doc(r#"{"name":"gone","process":"pid:999999999"}"#),
            vec!["entry `gone`", "no running process matches `pid:999999999`"],
        ),
        (doc(""), vec!["no entries"]),
        (
            doc(&format!(
                r#"{{"name":"a","process":"pid:{pid}"}},{{"name":"b","process":"pid:{pid}","affinity":[0]}}"#
            )),
            vec!["entry 1 (`b`)", "entry 0 (`a`)", "one entry per process"],
        ),
        (
            doc(&format!(
                r#"{{"name":"a","process":"pid:{pid}"}},{{"name":"b","process":"name:sleep"}}"#
            )),
            vec!["entry `b`", "entry `a`", &pid_text],
        ),
        (
            doc(&format!(
                r#"{{"name":"dup","process":"pid:{pid}","quotas":{{"sw.page_faults":100,"sw.page_faults":5}}}}"#
            )),
            vec!["duplicate key `sw.page_faults`"],
        ),
        (
            doc(&format!(
                r#"{{"name":"dup2","process":"pid:{pid}","process":"pid:1"}}"#
            )),
            vec!["duplicate key `process`"],
        ),
        (
            doc(&format!(
                r#"{{"name":"max","process":"pid:{pid}","quotas":{{"sw.page_faults":18446744073709551615}}}}"#
            )),
            vec![
                "entry 0 (`max`)",
                "quota of `sw.page_faults`",
                "9223372036854775807",
            ],
        ),
    ];
    for (body, wants) in &cases {
        let (code, err) = apply_status(dir.path(), body, &[]);
        assert_eq!(code, Some(2), "{body}: {err}");
        for w in wants {
            assert!(err.contains(w), "{body}: `{w}` not in {err}");
        }
        assert!(!err.contains("EINVAL"), "{err}");
    }
    // --allow-partial applies what can apply and warns about the rest.
    let body = doc(&format!(
        r#"{{"name":"ok","process":"pid:{pid}","affinity":[0]}},{{"name":"ev","process":"pid:999999999","quotas":{{"hw.nonsense":3}}}}"#
    ));
    let (code, err) = apply_status(dir.path(), &body, &["--allow-partial"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("contract entry skipped") && err.contains("entry=ev"),
        "{err}"
    );
    let _ = victim.kill();
    let _ = victim.wait();
}

#[test]
fn rt_priority_out_of_range_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sra.toml");
    std::fs::write(
        &config,
        "[agent]\nrt_priority = 1000\n[monitor]\ntargets = [\"name:a\"]\nx_metric = \"app.x\"\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["run", "--check-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("sra.toml:2: key `agent.rt_priority`") && err.contains("1..=99, found 1000"),
        "{err}"
    );
    let out = Command::new(bin())
        .args(["apply", "/nonexistent.json", "--rt-priority", "1000"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("rt-priority") && err.contains("1000"), "{err}");
}

/// Runs `args` with a bounded wait (a reader blocked on a FIFO is killed and
/// reported as `None`).
fn run_bounded(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let mut child = Command::new(bin())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut code = None;
    let exited = poll(1000, || match child.try_wait() {
        Ok(Some(st)) => {
            code = st.code();
            true
        }
        _ => false,
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    (code, reader.join().unwrap())
}

#[test]
fn contract_and_config_readers_refuse_devices_and_fifos() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let state = dir.path().join("state");
    for input in [Path::new("/dev/zero"), fifo.as_path()] {
        let (code, err) = run_bounded(&[
            "apply".as_ref(),
            input.as_os_str(),
            "--state-dir".as_ref(),
            state.as_os_str(),
        ]);
        assert_eq!(code, Some(2), "{}: {err}", input.display());
        assert!(
            err.contains(&input.display().to_string()) && err.contains("not a regular file"),
            "{err}"
        );
        let (code, err) = run_bounded(&[
            "run".as_ref(),
            "--check-config".as_ref(),
            "--config".as_ref(),
            input.as_os_str(),
        ]);
        assert_eq!(code, Some(2), "{}: {err}", input.display());
        assert!(err.contains("not a regular file"), "{err}");
    }
    // A regular file over the bound is refused by size, not read whole.
    let big = dir.path().join("big.json");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(64 << 20).unwrap();
    let (code, err) = run_bounded(&[
        "apply".as_ref(),
        big.as_os_str(),
        "--state-dir".as_ref(),
        state.as_os_str(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("larger than 16777216 bytes"), "{err}");
}
