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
    pub pids: BTreeSet<u32>,
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

/// The agent's end of the guardian pipe.
#[derive(Debug)]
pub struct GuardianClient {
    out: Box<dyn WriteDebug>,
    child: Option<Child>,
}

trait WriteDebug: Write + Send + std::fmt::Debug {}
impl<T: Write + Send + std::fmt::Debug> WriteDebug for T {}

impl GuardianClient {
    /// Starts `command` (which must run [`run`] on its standard input) as the
    /// guardian.
    pub fn spawn(mut command: Command) -> io::Result<GuardianClient> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        let stdin: ChildStdin = child
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("guardian has no stdin pipe"))?;
        Ok(GuardianClient {
            out: Box::new(stdin),
            child: Some(child),
        })
    }

    /// A client over any writer (tests run [`run`] in a thread on a pipe).
    pub fn from_writer(out: impl Write + Send + std::fmt::Debug + 'static) -> GuardianClient {
        GuardianClient {
            out: Box::new(out),
            child: None,
        }
    }

    fn send(&mut self, line: String) -> io::Result<()> {
        self.out.write_all(line.as_bytes())?;
        self.out.flush()
    }

    /// Registers a pid the agent is about to stop.
    pub fn register_pid(&mut self, pid: u32) -> io::Result<()> {
        self.send(format!("pid {pid}\n"))
    }

    pub fn forget_pid(&mut self, pid: u32) -> io::Result<()> {
        self.send(format!("-pid {pid}\n"))
    }

    /// Registers a freezer cgroup directory the agent is about to freeze.
    pub fn register_cgroup(&mut self, dir: &Path) -> io::Result<()> {
        self.send(format!("cgroup {}\n", dir.display()))
    }

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
        let _ = self.send("bye\n".to_string());
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

    #[test]
    fn eof_thaws_a_stopped_child() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let (reader, writer) = std::io::pipe().unwrap();
        let guardian = std::thread::spawn(move || run(reader));
        let mut client = GuardianClient::from_writer(writer);
        client.register_pid(pid).unwrap();
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
