//! Running a command under measurement: the child is forked, held at a pipe until
//! its counters are open and enabled, then released to `exec`.
//!
//! `perf stat` instead opens its counters with `enable_on_exec`, so it counts from
//! the `exec` itself; hwqos enables them just before releasing the child, so its
//! counts also include the few microseconds between the release and the `exec`
//! (one pipe read and the `execvp` path search): a handful of page faults and at
//! most one context switch more than perf. Counters opened with `inherit` follow
//! every thread and process the command creates.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// A forked child waiting for [`HeldChild::release`] before it runs the command.
#[derive(Debug)]
pub struct HeldChild {
    pid: libc::pid_t,
    program: String,
    go: Option<OwnedFd>,
    exec_error: OwnedFd,
}

/// A released child that is running (or has run) the command.
#[derive(Debug)]
pub struct RunningChild {
    pid: libc::pid_t,
}

fn pipe_cloexec() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("creating a pipe");
    }
    // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl HeldChild {
    /// Forks a child that will `execvp(argv[0], argv)` once released.
    pub fn spawn(argv: &[String]) -> Result<HeldChild> {
        let Some(program) = argv.first() else {
            bail!("no command given");
        };
        let c_args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .with_context(|| format!("command `{program}` has an argument with a NUL byte"))?;
        let mut c_ptrs: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
        c_ptrs.push(std::ptr::null());
        let (go_rx, go_tx) = pipe_cloexec()?;
        let (err_rx, err_tx) = pipe_cloexec()?;
        // SAFETY: after fork the child only calls async-signal-safe functions
        // (close, read, write, execvp, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error()).context("fork");
        }
        if pid == 0 {
            // SAFETY: see above; every pointer was built before the fork.
            unsafe {
                libc::close(go_tx.as_raw_fd());
                libc::close(err_rx.as_raw_fd());
                let mut byte = 0u8;
                loop {
                    let n = libc::read(go_rx.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
                    if n == 1 {
                        break;
                    }
                    if n == 0 || *libc::__errno_location() != libc::EINTR {
                        // The parent went away without releasing us.
                        libc::_exit(127);
                    }
                }
                libc::execvp(c_ptrs[0], c_ptrs.as_ptr());
                let errno = *libc::__errno_location();
                let bytes = errno.to_ne_bytes();
                libc::write(err_tx.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                libc::_exit(127);
            }
        }
        drop(go_rx);
        drop(err_tx);
        Ok(HeldChild {
            pid,
            program: program.clone(),
            go: Some(go_tx),
            exec_error: err_rx,
        })
    }

    /// The child's process id (valid before release: counters attach to it).
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Lets the child `exec` the command. Fails if the command cannot be run
    /// (not found, not executable); the child is reaped in that case.
    pub fn release(mut self) -> Result<RunningChild> {
        let go = self.go.take();
        if let Some(go) = &go {
            let byte = [1u8];
            // SAFETY: writing one byte from a valid buffer to our pipe end.
            let n = unsafe { libc::write(go.as_raw_fd(), byte.as_ptr().cast(), 1) };
            if n != 1 {
                return Err(std::io::Error::last_os_error()).context("releasing the child");
            }
        }
        drop(go);
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < buf.len() {
            // SAFETY: reading into the unfilled tail of `buf`.
            let n = unsafe {
                libc::read(
                    self.exec_error.as_raw_fd(),
                    buf[got..].as_mut_ptr().cast(),
                    buf.len() - got,
                )
            };
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if n <= 0 {
                break;
            }
            got += n as usize;
        }
        let running = RunningChild { pid: self.pid };
        if got == buf.len() {
            let err = std::io::Error::from_raw_os_error(i32::from_ne_bytes(buf));
            let _ = running.wait();
            return Err(err).with_context(|| format!("cannot run `{}`", self.program));
        }
        Ok(running)
    }
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        // Dropped without release (an error while opening counters): closing the
        // pipe makes the child exit; reap it so no zombie is left.
        if self.go.take().is_some() {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
        }
    }
}

impl RunningChild {
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Waits for the command to end; returns its exit code, or 128 + the signal
    /// number if a signal killed it (the shell's convention).
    pub fn wait(&self) -> Result<i32> {
        loop {
            let mut status = 0;
            // SAFETY: waiting for our own child with a valid status pointer.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e).context("waiting for the command");
            }
            if libc::WIFEXITED(status) {
                return Ok(libc::WEXITSTATUS(status));
            }
            if libc::WIFSIGNALED(status) {
                return Ok(128 + libc::WTERMSIG(status));
            }
        }
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM set a flag instead of killing hwqos, so a measurement
/// ended with Ctrl-C still prints its counts (the measured command, in the same
/// process group, gets the signal itself).
pub fn catch_interrupts() -> Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(note_interrupt),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sigaction(sig, &action) }
            .with_context(|| format!("installing a {sig} handler"))?;
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived since [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Whether a process exists (and is not a zombie).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_child_runs_only_after_release_and_reports_status() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let script = format!("touch {}; exit 7", marker.display());
        let child = HeldChild::spawn(&["sh".into(), "-c".into(), script]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!marker.exists(), "child ran before release");
        let running = child.release().unwrap();
        assert_eq!(running.wait().unwrap(), 7);
        assert!(marker.exists());
    }

    #[test]
    fn missing_program_is_a_clear_error() {
        let child = HeldChild::spawn(&["/nonexistent/hwqos-no-such-cmd".into()]).unwrap();
        let err = child.release().unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("cannot run `/nonexistent/hwqos-no-such-cmd`"),
            "{text}"
        );
        assert!(text.contains("No such file"), "{text}");
    }

    #[test]
    fn dropped_child_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let child = HeldChild::spawn(&["touch".into(), marker.display().to_string()]).unwrap();
        assert!(process_alive(child.pid()));
        drop(child);
        assert!(!marker.exists());
    }
}
