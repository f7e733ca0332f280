//! System-call cost (raw `syscall(SYS_getpid)`, which no libc caches), and the
//! cost of starting and joining a thread and of forking, exiting and reaping a
//! process.

use super::{merge_cost, per_op_ns, pin, ProbeError, ProbeOptions, Solo};
use hwqos_core::stats::Summary;
use serde::{Deserialize, Serialize};
use std::hint::black_box;

/// What the [`syscall`](self) probe measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyscallResult {
    /// ns per `syscall(SYS_getpid)`.
    pub getpid_ns: Summary,
    /// ns per `std::thread::spawn` + `join` of an empty thread.
    pub thread_spawn_ns: Summary,
    /// ns per `fork` + child `_exit(0)` + `waitpid`.
    pub process_spawn_ns: Summary,
}

/// One raw getpid system call.
pub fn raw_getpid() -> libc::c_long {
    // SAFETY: SYS_getpid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) }
}

/// Forks a child that exits at once and reaps it.
pub fn fork_exit_wait() -> Result<(), std::io::Error> {
    // SAFETY: the child only calls the async-signal-safe `_exit`.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(std::io::Error::last_os_error()),
        // SAFETY: in the child, `_exit` is async-signal-safe and ends it at once.
        0 => unsafe { libc::_exit(0) },
        child => {
            let mut status = 0;
            loop {
                // SAFETY: waiting for our own child with a valid status pointer.
                let rc = unsafe { libc::waitpid(child, &mut status, 0) };
                if rc == child {
                    return Ok(());
                }
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(e);
                }
            }
        }
    }
}

/// Runs the system-call probe pinned as `options` says. Errors when pinning
/// or `fork` fails.
pub fn run(options: &ProbeOptions) -> Result<SyscallResult, ProbeError> {
    let (_pin, _cpu) = pin(options)?;
    let repeats = options.repeats();
    let overhead = super::timing_overhead_ns();
    let getpid_ns = per_op_ns(repeats, options.scaled(20_000), overhead, Solo::Yes, || {
        black_box(raw_getpid());
    })
    .ok_or_else(|| ProbeError::Other("no getpid samples".into()))?;
    let thread_spawn_ns = per_op_ns(repeats, options.scaled(200), overhead, Solo::No, || {
        let h = std::thread::spawn(|| black_box(1));
        let _ = black_box(h.join());
    })
    .ok_or_else(|| ProbeError::Other("no thread samples".into()))?;
    let mut fork_error = None;
    let process_spawn_ns = per_op_ns(repeats, options.scaled(100), overhead, Solo::No, || {
        if let Err(e) = fork_exit_wait() {
            fork_error.get_or_insert(e);
        }
    })
    .ok_or_else(|| ProbeError::Other("no fork samples".into()))?;
    if let Some(e) = fork_error {
        return Err(ProbeError::io("fork", e));
    }
    Ok(SyscallResult {
        getpid_ns,
        thread_spawn_ns,
        process_spawn_ns,
    })
}

/// Merges interleaved repetitions (see [`super::merge_summaries`]).
pub fn merge(parts: Vec<SyscallResult>) -> Option<SyscallResult> {
    Some(SyscallResult {
        getpid_ns: merge_cost(&parts, |p| &p.getpid_ns)?,
        thread_spawn_ns: merge_cost(&parts, |p| &p.thread_spawn_ns)?,
        process_spawn_ns: merge_cost(&parts, |p| &p.process_spawn_ns)?,
    })
}
