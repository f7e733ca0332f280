//! Counting perf counters on every thread of a process, summed: the
//! resource usage *r* of a process for the limit finder and the experiments.
//! Threads that start later are added by [`ProcessCounter::refresh`]; the
//! counts of threads that exit are kept.

use crate::SchedError;
use hwqos_pmu::EventAttr;
use perf_event_open_sys as sys;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Opens a perf counter for `attr` on thread `tid`; with `sample_period`
/// it starts disabled (for overflow use), otherwise it counts at once.
pub fn open(
    tid: u32,
    name: &str,
    attr: &EventAttr,
    sample_period: Option<u64>,
) -> Result<OwnedFd, SchedError> {
    // SAFETY: perf_event_attr is plain data; all-zero is its documented default.
    let mut a: sys::bindings::perf_event_attr = unsafe { std::mem::zeroed() };
    a.type_ = attr.type_;
    a.size = std::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
    a.config = attr.config;
    a.__bindgen_anon_3.config1 = attr.config1;
    a.__bindgen_anon_4.config2 = attr.config2;
    a.set_exclude_hv(1);
    if let Some(p) = sample_period {
        a.__bindgen_anon_1.sample_period = p;
        a.set_disabled(1);
        a.__bindgen_anon_2.wakeup_events = 1;
    }
    // SAFETY: `a` is initialised; the kernel copies it.
    let fd = unsafe {
        sys::perf_event_open(
            &mut a,
            tid as i32,
            -1,
            -1,
            sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
        )
    };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::ESRCH) => SchedError::Vanished { pid: tid },
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => SchedError::Event {
                name: name.to_string(),
                reason: format!("this machine cannot count it ({err})"),
            },
            _ => SchedError::io(format!("perf_event_open({name}, tid {tid})"), err),
        });
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads a counting counter's value.
pub fn read(fd: &OwnedFd) -> Option<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: reading 8 bytes into a buffer of 8.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
    (n == 8).then(|| u64::from_ne_bytes(buf))
}

/// One event counted on every thread of a process.
pub struct ProcessCounter {
    proc_root: PathBuf,
    pid: u32,
    name: String,
    attr: EventAttr,
    threads: BTreeMap<u32, OwnedFd>,
    exited: u64,
}

impl ProcessCounter {
    /// Opens the event `attr` (called `name` in errors) on every current
    /// thread of `pid`, counting at once. Fails with
    /// [`SchedError::Vanished`] when the process is gone or no thread could
    /// be opened, [`SchedError::Event`] when the machine cannot count it.
    pub fn open(
        proc_root: &Path,
        pid: u32,
        name: &str,
        attr: EventAttr,
    ) -> Result<ProcessCounter, SchedError> {
        let mut c = ProcessCounter {
            proc_root: proc_root.to_path_buf(),
            pid,
            name: name.to_string(),
            attr,
            threads: BTreeMap::new(),
            exited: 0,
        };
        c.refresh()?;
        if c.threads.is_empty() {
            return Err(SchedError::Vanished { pid });
        }
        Ok(c)
    }

    /// Adds new threads and folds exited ones into the total.
    pub fn refresh(&mut self) -> Result<(), SchedError> {
        let tids = crate::proc::threads(&self.proc_root, self.pid)
            .ok_or(SchedError::Vanished { pid: self.pid })?;
        let gone: Vec<u32> = self
            .threads
            .keys()
            .copied()
            .filter(|t| !tids.contains(t))
            .collect();
        for t in gone {
            if let Some(fd) = self.threads.remove(&t) {
                self.exited += read(&fd).unwrap_or(0);
            }
        }
        for tid in tids {
            if self.threads.contains_key(&tid) {
                continue;
            }
            match open(tid, &self.name, &self.attr, None) {
                Ok(fd) => {
                    self.threads.insert(tid, fd);
                }
                Err(e) if e.is_vanished() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Events counted on the process since the counters were opened.
    pub fn total(&self) -> u64 {
        self.exited
            + self
                .threads
                .values()
                .map(|fd| read(fd).unwrap_or(0))
                .sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Page faults of this process: touching N fresh pages adds at least N.
    #[test]
    fn counts_page_faults_of_this_process() {
        let attr = EventAttr {
            type_: 1,
            config: 2,
            config1: 0,
            config2: 0,
            modes: Default::default(),
        };
        let c = ProcessCounter::open(
            Path::new("/proc"),
            std::process::id(),
            "sw.page_faults",
            attr,
        )
        .unwrap();
        let before = c.total();
        hwqos_core::mem::touch_fresh_pages(500).unwrap();
        let after = c.total();
        assert!(after - before >= 500, "{} faults", after - before);
        assert!(matches!(
            ProcessCounter::open(Path::new("/proc"), 999_999_999, "x", attr),
            Err(SchedError::Vanished { .. })
        ));
    }
}
