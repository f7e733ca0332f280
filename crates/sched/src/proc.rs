//! Small `/proc` and affinity helpers: thread lists, task state, CPU affinity
//! of every thread of a process (verified after setting), cgroup membership.

use crate::SchedError;
use std::path::{Path, PathBuf};

/// The thread ids of process `pid`, sorted; `None` when the process is gone.
pub fn threads(proc_root: &Path, pid: u32) -> Option<Vec<u32>> {
    let dir = std::fs::read_dir(proc_root.join(pid.to_string()).join("task")).ok()?;
    let mut tids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Some(tids)
}

/// The one-letter scheduler state of a task (`R`, `S`, `T`, …) from
/// `/proc/<pid>/stat`; `None` when it is gone.
pub fn task_state(proc_root: &Path, pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    // The comm field may contain spaces and parentheses: the state follows the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

/// Whether process `pid` exists.
pub fn exists(proc_root: &Path, pid: u32) -> bool {
    proc_root.join(pid.to_string()).join("stat").exists()
}

/// The process's cgroup v2 path (the `0::` line of `/proc/<pid>/cgroup`),
/// relative to the cgroup2 mount.
pub fn cgroup2_path(proc_root: &Path, pid: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| PathBuf::from(p.trim_start_matches('/')))
}

/// The errors of [`hwqos_core::affinity`] in this crate's terms: a thread
/// that no longer exists (ESRCH) is [`SchedError::Vanished`].
fn affinity_error(tid: u32, what: String, e: std::io::Error) -> SchedError {
    if e.raw_os_error() == Some(libc::ESRCH) {
        SchedError::Vanished { pid: tid }
    } else {
        SchedError::io(what, e)
    }
}

/// Sets the CPU affinity of one thread ([`hwqos_core::affinity::set_thread_affinity`]).
pub fn set_thread_affinity(tid: u32, cpus: &[u32]) -> Result<(), SchedError> {
    hwqos_core::affinity::set_thread_affinity(tid, cpus)
        .map_err(|e| affinity_error(tid, format!("sched_setaffinity({tid}, {cpus:?})"), e))
}

/// The CPU affinity of one thread, sorted ([`hwqos_core::affinity::thread_affinity`]).
pub fn thread_affinity(tid: u32) -> Result<Vec<u32>, SchedError> {
    hwqos_core::affinity::thread_affinity(tid)
        .map_err(|e| affinity_error(tid, format!("sched_getaffinity({tid})"), e))
}

/// The outcome of pinning a process.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AffinityReport {
    /// Threads whose affinity was set and read back equal.
    pub verified: Vec<u32>,
    /// Threads that exited while being pinned (skipped).
    pub vanished: Vec<u32>,
}

/// Pins every thread of `pid` to `cpus` and reads each back. New threads
/// inherit the affinity of the thread that creates them, so threads started
/// later are covered; callers re-run this each evaluation period to catch
/// threads that changed their own affinity.
pub fn pin_process(proc_root: &Path, pid: u32, cpus: &[u32]) -> Result<AffinityReport, SchedError> {
    let tids = threads(proc_root, pid).ok_or(SchedError::Vanished { pid })?;
    let mut want = cpus.to_vec();
    want.sort_unstable();
    want.dedup();
    let mut report = AffinityReport::default();
    for tid in tids {
        match set_thread_affinity(tid, &want).and_then(|_| thread_affinity(tid)) {
            Ok(got) if got == want => report.verified.push(tid),
            Ok(got) => {
                return Err(SchedError::invalid(
                    format!("affinity of thread {tid} of process {pid}"),
                    format!("set {want:?} but the kernel reports {got:?}"),
                ))
            }
            Err(e) if e.is_vanished() => report.vanished.push(tid),
            Err(e) => return Err(e),
        }
    }
    if report.verified.is_empty() {
        return Err(SchedError::Vanished { pid });
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn pins_every_thread_and_reads_it_back() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let proc_root = Path::new("/proc");
        let report = pin_process(proc_root, pid, &[0]).unwrap();
        assert_eq!(report.verified, vec![pid]);
        assert_eq!(thread_affinity(pid).unwrap(), vec![0]);
        // Just spawned: running or already asleep, never stopped.
        assert!(matches!(task_state(proc_root, pid), Some('R' | 'S' | 'D')));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(matches!(
            pin_process(proc_root, pid, &[0]),
            Err(SchedError::Vanished { .. })
        ));
    }

    #[test]
    fn state_parses_comm_with_parentheses() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("7")).unwrap();
        std::fs::write(dir.path().join("7/stat"), "7 (a) b) T 1 2 3").unwrap();
        assert_eq!(task_state(dir.path(), 7), Some('T'));
        assert_eq!(task_state(dir.path(), 8), None);
    }
}
