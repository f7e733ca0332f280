//! Crash safety: a guardian process that thaws whatever the agent throttled
//! when the agent dies, however it dies (`kill -9` included).
//!
//! The agent starts the guardian as a child (`hwqos-sra` runs it as a hidden
//! subcommand) whose standard input is a pipe whose write end only the agent
//! holds (close-on-exec, so no other child inherits it). Before it throttles a
//! process the agent registers the pid or the freezer cgroup with a line on
//! that pipe. When the agent exits or is killed the kernel closes the write
//! end, the guardian reads end-of-file, thaws every cgroup and sends `SIGCONT`
//! to every pid still registered, and exits. The guardian ignores
//! `SIGTERM`/`SIGINT`/`SIGHUP` so a group-wide stop signal cannot kill it
//! before the agent's pipe closes.
//!
//! Protocol, one line each: `pid N`, `cgroup PATH`, `-pid N`, `-cgroup PATH`,
//! and `bye` (clean shutdown: the agent has released everything and is
//! still alive, so the guardian thaws what is left at once and exits).

use std::collections::BTreeSet;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

/// What the guardian holds at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registry {
    /// Processes the agent may have stopped; each gets `SIGCONT`.
    pub pids: BTreeSet<u32>,
    /// Freezer cgroup directories the agent may have frozen; each is thawed.
    pub cgroups: BTreeSet<PathBuf>,
    /// The agent said `bye`.
    pub clean: bool,
}

impl Registry {
    /// Applies one protocol line; unknown lines are ignored with a warning
    /// (a newer agent talking to an older guardian must not stop it).
    pub fn apply(&mut self, line: &str) {
        let line = line.trim();
        if let Some(p) = line.strip_prefix("pid ") {
            if let Ok(pid) = p.trim().parse::<u32>() {
                self.pids.insert(pid);
                return;
            }
        } else if let Some(p) = line.strip_prefix("-pid ") {
            if let Ok(pid) = p.trim().parse::<u32>() {
                self.pids.remove(&pid);
                return;
            }
        } else if let Some(p) = line.strip_prefix("cgroup ") {
            self.cgroups.insert(PathBuf::from(p));
            return;
        } else if let Some(p) = line.strip_prefix("-cgroup ") {
            self.cgroups.remove(Path::new(p));
            return;
        } else if line == "bye" {
            self.clean = true;
            return;
        } else if line.is_empty() {
            return;
        }
        tracing::warn!(line, "guardian: ignoring an unknown line");
    }
}

/// Thaws `registry`: writes `0` to each cgroup's `cgroup.freeze` and sends
/// `SIGCONT` to each pid. Returns how many of each were thawed (vanished ones
/// are skipped).
pub fn thaw(registry: &Registry) -> (usize, usize) {
    let mut cgroups = 0;
    for dir in &registry.cgroups {
        if std::fs::write(dir.join("cgroup.freeze"), "0").is_ok() {
            cgroups += 1;
        }
    }
    let mut pids = 0;
    for &pid in &registry.pids {
        if let Ok(p) = i32::try_from(pid) {
            // SAFETY: kill(2) with a positive pid has no memory effects.
            if unsafe { libc::kill(p, libc::SIGCONT) } == 0 {
                pids += 1;
            }
        }
    }
    (pids, cgroups)
}

/// The guardian's main loop: reads protocol lines until end-of-file, then
/// thaws everything still registered and returns what it thawed.
///
/// With `agent` (the agent's pid, the guardian's parent) the guardian waits
/// after end-of-file until it has been reparented — the kernel closes every
/// file of a dying process before reparenting its children, so no perf
/// counter of the agent can stop a process after the thaw — at most 1 s,
/// then thaws, and thaws once more 10 ms later.
pub fn run_for(input: impl Read, agent: Option<u32>) -> Registry {
    let registry = read_until_eof(input);
    if let (Some(agent), false) = (agent, registry.clean) {
        for _ in 0..1000 {
            // SAFETY: getppid has no preconditions.
            if unsafe { libc::getppid() } as u32 != agent {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    thaw(&registry);
    std::thread::sleep(std::time::Duration::from_millis(10));
    thaw(&registry);
    registry
}

/// [`run_for`] without waiting for a parent (tests run the guardian in a thread).
pub fn run(input: impl Read) -> Registry {
    run_for(input, None)
}

fn read_until_eof(input: impl Read) -> Registry {
    let mut registry = Registry::default();
    let mut reader = BufReader::new(input);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => registry.apply(&line),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    registry
}

/// Makes the calling (guardian) process ignore the stop signals a service
/// manager sends to the whole group.
pub fn ignore_group_stop_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGPIPE] {
        // SAFETY: setting a signal's disposition to SIG_IGN is always sound.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}

/// The agent's end of the guardian pipe. It keeps a copy of everything
/// registered so that a guardian that died (`kill -9`) can be replaced by a
/// new one that knows the same: [`GuardianClient::ensure_alive`] (the agent
/// calls it at least once a second, and before every registration) notices
/// the death, logs it as an error and starts the replacement.
pub struct GuardianClient {
    out: Box<dyn WriteDebug>,
    child: Option<Child>,
    respawn: Option<Box<dyn Fn() -> Command + Send>>,
    registry: Registry,
    restarts: u64,
}

impl std::fmt::Debug for GuardianClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardianClient")
            .field("child", &self.child_pid())
            .field("registry", &self.registry)
            .field("restarts", &self.restarts)
            .finish()
    }
}

trait WriteDebug: Write + Send + std::fmt::Debug {}
impl<T: Write + Send + std::fmt::Debug> WriteDebug for T {}

fn start(mut command: Command) -> io::Result<(Child, ChildStdin)> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    let stdin: ChildStdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("guardian has no stdin pipe"))?;
    Ok((child, stdin))
}

impl GuardianClient {
    /// Starts `command` (which must run [`run`] on its standard input) as the
    /// guardian. A guardian started this way is not replaced when it dies
    /// (see [`GuardianClient::spawn_with`]).
    pub fn spawn(command: Command) -> io::Result<GuardianClient> {
        let (child, stdin) = start(command)?;
        Ok(GuardianClient {
            out: Box::new(stdin),
            child: Some(child),
            respawn: None,
            registry: Registry::default(),
            restarts: 0,
        })
    }

    /// Starts the guardian from `make()`, and a new one from `make()`
    /// whenever it is found dead.
    pub fn spawn_with(make: impl Fn() -> Command + Send + 'static) -> io::Result<GuardianClient> {
        let (child, stdin) = start(make())?;
        Ok(GuardianClient {
            out: Box::new(stdin),
            child: Some(child),
            respawn: Some(Box::new(make)),
            registry: Registry::default(),
            restarts: 0,
        })
    }

    /// A client over any writer (tests run [`run`] in a thread on a pipe).
    pub fn from_writer(out: impl Write + Send + std::fmt::Debug + 'static) -> GuardianClient {
        GuardianClient {
            out: Box::new(out),
            child: None,
            respawn: None,
            registry: Registry::default(),
            restarts: 0,
        }
    }

    /// Checks that the guardian process still runs; when it has died,
    /// logs an error and starts a new one that is told everything still
    /// registered. Returns true when it started a new one.
    pub fn ensure_alive(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        let status = match child.try_wait() {
            Ok(None) => return false,
            Ok(Some(s)) => s.to_string(),
            Err(e) => e.to_string(),
        };
        tracing::error!(
            pid = child.id(),
            status,
            pids = self.registry.pids.len(),
            cgroups = self.registry.cgroups.len(),
            "the crash guardian died; starting a new one and registering everything again"
        );
        self.restart()
    }

    fn restart(&mut self) -> bool {
        let Some(make) = self.respawn.as_ref() else {
            return false;
        };
        match start(make()) {
            Ok((child, stdin)) => {
                self.restarts += 1;
                tracing::info!(
                    pid = child.id(),
                    restarts = self.restarts,
                    "crash guardian restarted"
                );
                self.out = Box::new(stdin);
                self.child = Some(child);
                let mut lines = String::new();
                for pid in &self.registry.pids {
                    lines.push_str(&format!("pid {pid}\n"));
                }
                for dir in &self.registry.cgroups {
                    lines.push_str(&format!("cgroup {}\n", dir.display()));
                }
                if let Err(e) = self.write(&lines) {
                    tracing::error!(error = %e, "cannot register with the new crash guardian");
                }
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start a new crash guardian (will retry)");
                false
            }
        }
    }

    /// How many times a dead guardian was replaced.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    fn write(&mut self, text: &str) -> io::Result<()> {
        self.out.write_all(text.as_bytes())?;
        self.out.flush()
    }

    fn send(&mut self, line: String) -> io::Result<()> {
        self.ensure_alive();
        self.registry.apply(&line);
        match self.write(&line) {
            Ok(()) => Ok(()),
            // The guardian died after the check: a new one gets the whole
            // registry, this line included.
            Err(e) if self.respawn.is_some() => {
                tracing::error!(error = %e, "the crash guardian's pipe is closed");
                if self.ensure_alive() || self.restart() {
                    Ok(())
                } else {
                    Err(e)
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Registers a pid the agent is about to stop.
    pub fn register_pid(&mut self, pid: u32) -> io::Result<()> {
        self.send(format!("pid {pid}\n"))
    }

    /// Unregisters a pid the agent has continued (or that is gone).
    pub fn forget_pid(&mut self, pid: u32) -> io::Result<()> {
        self.send(format!("-pid {pid}\n"))
    }

    /// Registers a freezer cgroup directory the agent is about to freeze.
    pub fn register_cgroup(&mut self, dir: &Path) -> io::Result<()> {
        self.send(format!("cgroup {}\n", dir.display()))
    }

    /// Unregisters a cgroup directory the agent has thawed or removed.
    pub fn forget_cgroup(&mut self, dir: &Path) -> io::Result<()> {
        self.send(format!("-cgroup {}\n", dir.display()))
    }

    /// The guardian's pid when it is a child process.
    pub fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for GuardianClient {
    fn drop(&mut self) {
        // A clean goodbye, then closing the pipe makes the guardian thaw
        // whatever is still registered and exit; reap it.
        let _ = self.write("bye\n");
        self.out = Box::new(io::sink());
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_follows_the_protocol() {
        let mut r = Registry::default();
        for l in [
            "pid 10",
            "pid 11",
            "cgroup /a/b",
            "-pid 10",
            "junk",
            "",
            "pid x",
        ] {
            r.apply(l);
        }
        assert_eq!(r.pids.iter().copied().collect::<Vec<_>>(), vec![11]);
        assert_eq!(r.cgroups.len(), 1);
        r.apply("-cgroup /a/b");
        assert!(r.cgroups.is_empty());
        assert!(!r.clean);
        r.apply("bye");
        assert!(r.clean);
    }

    /// A guardian found dead is replaced by one that knows every pid.
    #[test]
    fn a_dead_guardian_is_replaced_and_told_everything() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        // Each "guardian" writes what it reads to a file named by its pid.
        let make = move || {
            let mut c = Command::new("sh");
            c.arg("-c").arg(format!("exec cat > {}/g-$$", d.display()));
            c
        };
        let mut g = GuardianClient::spawn_with(make).unwrap();
        g.register_pid(4242).unwrap();
        g.register_pid(4343).unwrap();
        g.forget_pid(4343).unwrap();
        let first = g.child_pid().unwrap();
        // SAFETY: kill(2) on a process of this test; no memory is involved.
        unsafe { libc::kill(first as i32, libc::SIGKILL) };
        let mut replaced = false;
        for _ in 0..300 {
            if g.ensure_alive() {
                replaced = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(replaced);
        let second = g.child_pid().unwrap();
        assert_ne!(second, first);
        assert_eq!(g.restarts(), 1);
        g.register_pid(4444).unwrap();
        drop(g); // says bye and waits for the guardian
        let text = std::fs::read_to_string(dir.path().join(format!("g-{second}"))).unwrap();
        // The new guardian got the registry (4242, not the forgotten 4343).
        assert_eq!(text, "pid 4242\npid 4444\nbye\n");
    }

    #[test]
    fn eof_thaws_a_stopped_child() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let (reader, writer) = std::io::pipe().unwrap();
        let guardian = std::thread::spawn(move || run(reader));
        let mut client = GuardianClient::from_writer(writer);
        client.register_pid(pid).unwrap();
        // SAFETY: kill(2) on a process of this test; no memory is involved.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        wait_state(pid, 'T');
        drop(client);
        let reg = guardian.join().unwrap();
        assert!(reg.pids.contains(&pid));
        wait_state(pid, 'S');
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn wait_state(pid: u32, want: char) {
        for _ in 0..1000 {
            if crate::proc::task_state(Path::new("/proc"), pid) == Some(want) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("pid {pid} never reached state {want}");
    }
}
