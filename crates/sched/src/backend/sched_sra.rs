//! The `SCHED_SRA` kernel backend (`kernel-patch/README.md`, "Interface").
//!
//! Per thread of an enforced process: write `period_ns=… event=T:C:Q …` to
//! `/proc/<pid>/task/<tid>/sched_sra`, then `sched_setattr(tid, policy 8)`.
//! Quotas change in place by writing the same events with new numbers; a
//! different event set needs the task out of the class first (`EBUSY`).
//! Release switches every thread back to `SCHED_OTHER`, which unthrottles it
//! at once and releases its counters. Statistics are the keys the kernel
//! reports in the same file. New threads start as `SCHED_NORMAL` and are added
//! by [`QuotaBackend::refresh_threads`].
//!
//! The kernel class counts and throttles each task on its own. For
//! [`QuotaScope::Process`] the backend therefore gives each of the `n`
//! threads an even share, ⌊quota / n⌋ (at least 1), re-divided whenever
//! [`QuotaBackend::refresh_threads`] finds the thread count changed: the
//! process's sum stays within the quota, but a thread cannot use a share
//! another thread leaves unused (the userspace backend re-divides within the
//! period instead).

use super::{QuotaBackend, QuotaScope, QuotaSet, QuotaStats};
use crate::SchedError;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

/// The scheduling policy number of `SCHED_SRA`.
pub const SCHED_SRA: u32 = 8;

/// The policy switch, behind a trait so tests can run against a fake /proc.
pub trait PolicySwitch: Send {
    /// Sets the scheduling policy of thread `tid` (`SCHED_SRA` = [`SCHED_SRA`],
    /// `SCHED_OTHER` = 0), keeping its nice value.
    fn set_policy(&mut self, tid: u32, policy: u32) -> io::Result<()>;
}

/// The real `sched_setattr(2)`.
pub struct Syscall;

#[repr(C)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

impl PolicySwitch for Syscall {
    fn set_policy(&mut self, tid: u32, policy: u32) -> io::Result<()> {
        // Keep the thread's nice value across the switch.
        // SAFETY: getpriority has no memory effects; errno is reset first.
        let nice = unsafe {
            *libc::__errno_location() = 0;
            libc::getpriority(libc::PRIO_PROCESS, tid)
        };
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            sched_policy: policy,
            sched_flags: 0,
            sched_nice: nice,
            sched_priority: 0,
            sched_runtime: 0,
            sched_deadline: 0,
            sched_period: 0,
        };
        // SAFETY: attr is a valid sched_attr of the size it declares.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sched_setattr,
                tid as libc::pid_t,
                &attr as *const SchedAttr,
                0u32,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

struct Task {
    quotas: QuotaSet,
    tids: BTreeSet<u32>,
}

/// The [`QuotaBackend`] on the `SCHED_SRA` kernel class: the kernel counts
/// and throttles, this keeps which threads of which process it configured.
pub struct SchedSraBackend {
    proc_root: PathBuf,
    switch: Box<dyn PolicySwitch>,
    tasks: BTreeMap<u32, Task>,
}

/// The configuration line for a quota set.
pub fn config_line(q: &QuotaSet) -> String {
    let mut s = format!("period_ns={}", q.period.as_nanos());
    for e in &q.events {
        s.push_str(&format!(
            " event={}:{}:{}",
            e.attr.type_, e.attr.config, e.quota
        ));
    }
    s.push('\n');
    s
}

/// What each of `threads` threads is configured with: `q` itself for
/// [`QuotaScope::Thread`], an even share ⌊quota / threads⌋ (at least 1) of
/// every quota for [`QuotaScope::Process`].
pub fn thread_share(q: &QuotaSet, threads: usize) -> QuotaSet {
    let mut share = q.clone();
    if q.scope == QuotaScope::Process {
        for e in &mut share.events {
            e.quota = (e.quota / threads.max(1) as u64).max(1);
        }
    }
    share
}

/// Parses the `key value` lines of a per-task `sched_sra` file.
pub fn parse_stats(text: &str) -> BTreeMap<String, Vec<String>> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let k = it.next()?.to_string();
            Some((k, it.map(str::to_string).collect()))
        })
        .collect()
}

impl SchedSraBackend {
    /// Opens the backend when `<proc_root>/sched_sra` exists.
    pub fn open(proc_root: &Path) -> Result<SchedSraBackend, SchedError> {
        Self::with_switch(proc_root, Box::new(Syscall))
    }

    /// [`SchedSraBackend::open`] with another policy switch (tests use a fake
    /// one over a fake `proc_root`). Fails with [`SchedError::Unsupported`]
    /// when `<proc_root>/sched_sra` does not exist.
    pub fn with_switch(
        proc_root: &Path,
        switch: Box<dyn PolicySwitch>,
    ) -> Result<SchedSraBackend, SchedError> {
        if !proc_root.join("sched_sra").exists() {
            return Err(SchedError::Unsupported {
                backend: "sched_sra".into(),
                reason: format!(
                    "{} does not exist (kernel without SCHED_SRA)",
                    proc_root.join("sched_sra").display()
                ),
            });
        }
        Ok(SchedSraBackend {
            proc_root: proc_root.to_path_buf(),
            switch,
            tasks: BTreeMap::new(),
        })
    }

    fn file(&self, pid: u32, tid: u32) -> PathBuf {
        self.proc_root
            .join(pid.to_string())
            .join("task")
            .join(tid.to_string())
            .join("sched_sra")
    }

    fn configure(
        &mut self,
        pid: u32,
        tid: u32,
        q: &QuotaSet,
        events_changed: bool,
    ) -> Result<(), SchedError> {
        let path = self.file(pid, tid);
        let line = config_line(q);
        if events_changed {
            // The kernel refuses a different event set while the task is SRA.
            self.switch
                .set_policy(tid, libc::SCHED_OTHER as u32)
                .map_err(|e| SchedError::io(format!("sched_setattr({tid}, SCHED_OTHER)"), e))?;
        }
        let write = |p: &Path| std::fs::write(p, &line);
        match write(&path) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                // A different event set: leave the class, reconfigure, re-enter.
                self.switch
                    .set_policy(tid, libc::SCHED_OTHER as u32)
                    .map_err(|e| SchedError::io(format!("sched_setattr({tid}, SCHED_OTHER)"), e))?;
                write(&path).map_err(|e| SchedError::File {
                    path: path.clone(),
                    source: e,
                })?;
            }
            Err(e)
                if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                return Err(SchedError::Vanished { pid: tid })
            }
            Err(e) => return Err(SchedError::File { path, source: e }),
        }
        self.switch
            .set_policy(tid, SCHED_SRA)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ESRCH) => SchedError::Vanished { pid: tid },
                Some(libc::ENOENT) => SchedError::Event {
                    name: q
                        .events
                        .iter()
                        .map(|e| e.name.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                    reason: "this machine cannot count it (ENOENT from sched_setattr)".into(),
                },
                _ => SchedError::io(format!("sched_setattr({tid}, SCHED_SRA)"), e),
            })
    }
}

impl QuotaBackend for SchedSraBackend {
    fn name(&self) -> &'static str {
        "sched_sra"
    }

    fn enforce(&mut self, pid: u32, quotas: &QuotaSet) -> Result<(), SchedError> {
        quotas.validate()?;
        let tids =
            crate::proc::threads(&self.proc_root, pid).ok_or(SchedError::Vanished { pid })?;
        let events_changed = self.tasks.get(&pid).is_some_and(|t| {
            t.quotas
                .events
                .iter()
                .map(|e| e.attr)
                .ne(quotas.events.iter().map(|e| e.attr))
        });
        let mut done = BTreeSet::new();
        let share = thread_share(quotas, tids.len());
        for tid in tids {
            match self.configure(pid, tid, &share, events_changed) {
                Ok(()) => {
                    done.insert(tid);
                }
                Err(e) if e.is_vanished() => continue,
                Err(e) => {
                    for t in &done {
                        let _ = self.switch.set_policy(*t, libc::SCHED_OTHER as u32);
                    }
                    return Err(e);
                }
            }
        }
        if done.is_empty() {
            return Err(SchedError::Vanished { pid });
        }
        tracing::info!(
            pid,
            backend = "sched_sra",
            threads = done.len(),
            "enforcing quotas"
        );
        self.tasks.insert(
            pid,
            Task {
                quotas: quotas.clone(),
                tids: done,
            },
        );
        Ok(())
    }

    fn release(&mut self, pid: u32) -> Result<(), SchedError> {
        if let Some(t) = self.tasks.remove(&pid) {
            for tid in t.tids {
                let _ = self.switch.set_policy(tid, libc::SCHED_OTHER as u32);
                let _ = std::fs::write(self.file(pid, tid), "clear\n");
            }
        }
        Ok(())
    }

    fn stats(&self, pid: u32) -> Option<QuotaStats> {
        let t = self.tasks.get(&pid)?;
        let mut s = QuotaStats::new(pid, &t.quotas);
        let num = |m: &BTreeMap<String, Vec<String>>, k: &str| -> u64 {
            m.get(k)
                .and_then(|v| v.first())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        for tid in &t.tids {
            let Ok(text) = std::fs::read_to_string(self.file(pid, *tid)) else {
                continue;
            };
            let m = parse_stats(&text);
            s.throttled |= num(&m, "throttled") != 0;
            s.nr_throttled += num(&m, "nr_throttled");
            s.throttled_ns += num(&m, "throttled_ns");
            s.nr_periods = s.nr_periods.max(num(&m, "nr_periods"));
            for (i, e) in s.events.iter_mut().enumerate() {
                e.last_period += num(&m, &format!("event{i}_last_period"));
                e.total += num(&m, &format!("event{i}_count"));
            }
        }
        Some(s)
    }

    fn enforced(&self) -> Vec<u32> {
        self.tasks.keys().copied().collect()
    }

    fn refresh_threads(&mut self) -> Vec<u32> {
        let mut gone = Vec::new();
        let pids: Vec<u32> = self.tasks.keys().copied().collect();
        for pid in pids {
            let Some(now) = crate::proc::threads(&self.proc_root, pid) else {
                self.tasks.remove(&pid);
                gone.push(pid);
                continue;
            };
            let (quotas, known) = {
                let t = &self.tasks[&pid];
                (t.quotas.clone(), t.tids.clone())
            };
            let mut tids: BTreeSet<u32> =
                known.iter().copied().filter(|t| now.contains(t)).collect();
            let share = thread_share(&quotas, now.len());
            if quotas.scope == QuotaScope::Process && now.len() != known.len() {
                // A new division: the threads kept get their new share in place.
                for tid in tids.clone() {
                    if let Err(e) = self.configure(pid, tid, &share, false) {
                        tracing::debug!(pid, tid, error = %e, "thread share not updated");
                    }
                }
            }
            for tid in now.iter().copied().filter(|t| !known.contains(t)) {
                match self.configure(pid, tid, &share, false) {
                    Ok(()) => {
                        tids.insert(tid);
                    }
                    Err(e) => {
                        tracing::debug!(pid, tid, error = %e, "new thread not added to SCHED_SRA")
                    }
                }
            }
            if let Some(t) = self.tasks.get_mut(&pid) {
                t.tids = tids;
            }
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::EventQuota;
    use hwqos_pmu::EventAttr;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[derive(Clone, Default)]
    struct Fake(Arc<Mutex<Vec<(u32, u32)>>>);
    impl PolicySwitch for Fake {
        fn set_policy(&mut self, tid: u32, policy: u32) -> io::Result<()> {
            self.0.lock().unwrap().push((tid, policy));
            Ok(())
        }
    }

    fn quotas(q: u64) -> QuotaSet {
        QuotaSet {
            period: Duration::from_millis(10),
            events: vec![EventQuota {
                name: "sw.page_faults".into(),
                attr: EventAttr {
                    type_: 1,
                    config: 2,
                    config1: 0,
                    config2: 0,
                    modes: Default::default(),
                },
                quota: q,
            }],
            scope: QuotaScope::Thread,
        }
    }

    #[test]
    fn configures_every_thread_then_switches_policy() {
        let root = tempfile::tempdir().unwrap();
        assert!(SchedSraBackend::open(root.path()).is_err());
        std::fs::write(
            root.path().join("sched_sra"),
            "tasks 0\nevents 0\ntimers 0\n",
        )
        .unwrap();
        assert_eq!(
            super::super::detect(root.path()),
            super::super::BackendKind::SchedSra
        );
        for tid in [40, 41] {
            let d = root.path().join("40/task").join(tid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("sched_sra"), "").unwrap();
        }
        let fake = Fake::default();
        let mut b = SchedSraBackend::with_switch(root.path(), Box::new(fake.clone())).unwrap();
        b.enforce(40, &quotas(50)).unwrap();
        for tid in [40, 41] {
            let text =
                std::fs::read_to_string(root.path().join(format!("40/task/{tid}/sched_sra")))
                    .unwrap();
            assert_eq!(text, "period_ns=10000000 event=1:2:50\n");
        }
        assert_eq!(
            *fake.0.lock().unwrap(),
            vec![(40, SCHED_SRA), (41, SCHED_SRA)]
        );
        // The kernel's statistics, as a read returns them.
        for (tid, used) in [(40, 30), (41, 20)] {
            std::fs::write(
                root.path().join(format!("40/task/{tid}/sched_sra")),
                format!("policy 8\nthrottled 1\nnr_throttled 4\nthrottled_ns 1000\nnr_periods 9\nevent0 1 2 50\nevent0_last_period {used}\nevent0_count 400\n"),
            )
            .unwrap();
        }
        let s = b.stats(40).unwrap();
        assert!(s.throttled);
        assert_eq!((s.nr_throttled, s.throttled_ns, s.nr_periods), (8, 2000, 9));
        assert_eq!((s.events[0].last_period, s.events[0].total), (50, 800));
        b.release(40).unwrap();
        let calls = fake.0.lock().unwrap().clone();
        assert_eq!(&calls[2..], &[(40, 0), (41, 0)]);
        assert!(b.enforced().is_empty());
        assert!(matches!(
            b.enforce(99, &quotas(5)),
            Err(SchedError::Vanished { pid: 99 })
        ));
        // Process scope: the two threads share the quota evenly (the kernel
        // class counts per task), and a third thread re-divides it.
        let process = QuotaSet {
            scope: QuotaScope::Process,
            ..quotas(50)
        };
        b.enforce(40, &process).unwrap();
        let line = |tid: u32| {
            std::fs::read_to_string(root.path().join(format!("40/task/{tid}/sched_sra"))).unwrap()
        };
        assert_eq!(line(40), "period_ns=10000000 event=1:2:25\n");
        assert_eq!(line(41), "period_ns=10000000 event=1:2:25\n");
        let d = root.path().join("40/task/42");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("sched_sra"), "").unwrap();
        assert!(b.refresh_threads().is_empty());
        for tid in [40, 41, 42] {
            assert_eq!(line(tid), "period_ns=10000000 event=1:2:16\n", "tid {tid}");
        }
        assert_eq!(thread_share(&quotas(50), 3), quotas(50));
        assert_eq!(
            thread_share(
                &QuotaSet {
                    scope: QuotaScope::Process,
                    ..quotas(2)
                },
                3
            )
            .events[0]
                .quota,
            1
        );
    }
}
