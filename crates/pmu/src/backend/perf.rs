//! The shipped counter backend: Linux `perf_event_open` through perf-event2.
//!
//! Every group is a disabled leader plus members opened enabled (perf's own
//! way: the leader's state gates the group) with read format
//! `TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING | GROUP | ID`, so one `read(2)` returns
//! the whole group with the times the kernel used for multiplexing. Task groups
//! may be opened with `inherit`: the kernel then counts threads and child
//! processes the task creates later and sums them (alive and exited) into the
//! group read, and enable/disable ioctls reach the inherited copies too.
//!
//! Kernel and user mode are both counted, like `perf stat` as root. Where the
//! kernel refuses that for lack of privilege (`perf_event_paranoid` ≥ 2 without
//! `CAP_PERFMON`), the group is reopened counting user mode only and a warning
//! is logged, as `perf stat` does.

use super::{BackendKind, CountTarget, CounterBackend, GroupId, GroupReading};
use crate::{Event, EventAttr, PmuError};
use perf_event::{Builder, Counter, ReadFormat};
use std::collections::HashMap;
use std::fs::File;
use std::io;

/// Adapts a resolved [`EventAttr`] to perf-event2's event trait.
struct AttrEvent(EventAttr);

impl perf_event::events::Event for AttrEvent {
    fn update_attrs(self, attr: &mut perf_event_open_sys::bindings::perf_event_attr) {
        attr.type_ = self.0.type_;
        attr.config = self.0.config;
        attr.config1 = self.0.config1;
        attr.config2 = self.0.config2;
    }
}

struct OpenGroup {
    /// The leader first, then the members, in the order the events were given.
    counters: Vec<Counter>,
    /// The task counted, for error messages (`None` for CPU-wide and cgroup groups).
    tid: Option<u32>,
    /// The kernel's id of each counter, in the order of `counters`.
    ids: Vec<u64>,
    /// The buffer one group `read(2)` fills: `nr`, `time_enabled`,
    /// `time_running`, then `value, id` per counter (allocated once at open).
    buf: Vec<u64>,
}

/// `u64`s before the per-counter entries in a group read (`nr`,
/// `time_enabled`, `time_running`).
const READ_PREFIX: usize = 3;
/// `u64`s per counter in a group read (`value`, `id`).
const READ_ENTRY: usize = 2;

/// Parses one group read (`nr, time_enabled, time_running, {value, id}×nr`)
/// into `out`, one value per id of `ids` in their order (0 for an id the read
/// lacks). `None` if `words` is shorter than its own `nr` says.
fn parse_group_read(words: &[u64], ids: &[u64], out: &mut GroupReading) -> Option<()> {
    let nr = usize::try_from(*words.first()?).ok()?;
    let entries = words.get(READ_PREFIX..READ_PREFIX + nr.checked_mul(READ_ENTRY)?)?;
    out.time_enabled = words[1];
    out.time_running = words[2];
    out.values.clear();
    for (i, id) in ids.iter().enumerate() {
        // The kernel lists the leader, then the members in the order they
        // joined the group, which is the order of `ids`: try that slot first.
        let at = |k: usize| entries.get(k * READ_ENTRY..k * READ_ENTRY + READ_ENTRY);
        let value = match at(i) {
            Some(&[value, got]) if got == *id => value,
            _ => entries
                .chunks_exact(READ_ENTRY)
                .find(|e| e[1] == *id)
                .map_or(0, |e| e[0]),
        };
        out.values.push(value);
    }
    Some(())
}

/// Counter groups on the kernel's perf_event subsystem.
pub struct PerfBackend {
    groups: HashMap<u64, OpenGroup>,
    next_id: u64,
    capacity: Option<usize>,
    /// Whether falling back to user mode was already reported: it is one
    /// cause, so it is one warning, however many groups it affects.
    warned_user_only: bool,
}

impl Default for PerfBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl PerfBackend {
    /// A backend that does not know the PMU's capacity (the kernel still
    /// refuses groups that can never fit).
    pub fn new() -> PerfBackend {
        Self::with_capacity(None)
    }

    /// A backend that rejects event sets with more hardware events than
    /// `capacity` up front.
    pub fn with_capacity(capacity: Option<usize>) -> PerfBackend {
        PerfBackend {
            groups: HashMap::new(),
            next_id: 1,
            capacity,
            warned_user_only: false,
        }
    }

    /// A backend with this node's capacity from its target spec.
    pub fn for_this_node() -> PerfBackend {
        Self::with_capacity(crate::spec::generate_for_this_node().max_group_events())
    }

    /// Number of groups currently open.
    pub fn open_groups(&self) -> usize {
        self.groups.len()
    }

    fn group(&mut self, id: GroupId) -> Result<&mut OpenGroup, PmuError> {
        self.groups
            .get_mut(&id.0)
            .ok_or(PmuError::NoSuchGroup(id.0))
    }

    fn open_counters(
        target: &CountTarget,
        events: &[Event],
        cgroup_dir: Option<&File>,
        user_only: bool,
    ) -> Result<Vec<Counter>, PmuError> {
        let tid = match target {
            CountTarget::Task { tid, .. } => Some(*tid),
            _ => None,
        };
        let mut counters: Vec<Counter> = Vec::with_capacity(events.len());
        for event in events {
            let mut builder = Builder::new(AttrEvent(event.attr));
            builder
                .read_format(
                    ReadFormat::TOTAL_TIME_ENABLED
                        | ReadFormat::TOTAL_TIME_RUNNING
                        | ReadFormat::GROUP
                        | ReadFormat::ID,
                )
                // Only the leader starts disabled, as perf opens groups: the
                // leader's state gates the whole group, and members opened
                // disabled were seen to stay at 0 in CPU-wide groups
                // (kernel 6.18) even after a group enable.
                .enabled(!counters.is_empty())
                .exclude_user(event.attr.modes == crate::Modes::Kernel)
                .exclude_kernel(user_only || event.attr.modes == crate::Modes::User)
                .exclude_hv(true);
            match target {
                CountTarget::Task { tid, inherit } => {
                    builder
                        .observe_pid(*tid as libc::pid_t)
                        .any_cpu()
                        .inherit(*inherit);
                }
                CountTarget::Cpu { cpu } => {
                    builder.any_pid().one_cpu(*cpu as usize);
                }
                CountTarget::Cgroup { cpu, .. } => {
                    let dir = cgroup_dir.ok_or_else(|| {
                        PmuError::Config("cgroup target opened without its directory".into())
                    })?;
                    builder.observe_cgroup(dir).one_cpu(*cpu as usize);
                }
            }
            let opened = match counters.first_mut() {
                None => builder.build(),
                Some(leader) => builder.build_with_group(leader),
            };
            match opened {
                Ok(c) => counters.push(c),
                Err(e) => return Err(classify(&event.name, tid, e)),
            }
        }
        Ok(counters)
    }
}

fn classify(name: &str, tid: Option<u32>, err: io::Error) -> PmuError {
    if err.raw_os_error().is_none() && err.kind() == io::ErrorKind::Unsupported {
        return PmuError::Unavailable {
            name: name.to_string(),
            reason: format!("{err} (kernel too old for the requested perf_event_attr)"),
        };
    }
    PmuError::from_open_errno(name, tid, err)
}

/// Maps an error from an ioctl or read on an open group: a task that went away
/// shows up as ESRCH/ENODEV or an empty read.
fn io_error(tid: Option<u32>, what: &str, err: io::Error) -> PmuError {
    match (tid, err.raw_os_error()) {
        (Some(tid), Some(libc::ESRCH) | Some(libc::ENODEV)) => PmuError::NoSuchTask { tid },
        (Some(tid), None) if err.kind() == io::ErrorKind::UnexpectedEof => {
            PmuError::NoSuchTask { tid }
        }
        _ => PmuError::io(what.to_string(), err),
    }
}

impl CounterBackend for PerfBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Perf
    }

    fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    fn open_group(&mut self, target: &CountTarget, events: &[Event]) -> Result<GroupId, PmuError> {
        if events.is_empty() {
            return Err(PmuError::Config(
                "cannot open an empty counter group".into(),
            ));
        }
        let cgroup_dir = match target {
            CountTarget::Cgroup { path, .. } => Some(File::open(path).map_err(|e| {
                PmuError::io(format!("opening cgroup directory {}", path.display()), e)
            })?),
            _ => None,
        };
        let counters = match Self::open_counters(target, events, cgroup_dir.as_ref(), false) {
            Err(PmuError::Permission { name, reason }) => {
                if self.warned_user_only {
                    tracing::debug!(event = %name, %reason, "counting user mode only");
                } else {
                    self.warned_user_only = true;
                    tracing::warn!(
                        "counting user mode only ({reason}); every further counter likewise"
                    );
                }
                Self::open_counters(target, events, cgroup_dir.as_ref(), true)?
            }
            other => other?,
        };
        let tid = match target {
            CountTarget::Task { tid, .. } => Some(*tid),
            _ => None,
        };
        let id = self.next_id;
        self.next_id += 1;
        let ids = counters.iter().map(Counter::id).collect();
        let buf = vec![0; READ_PREFIX + READ_ENTRY * counters.len()];
        self.groups.insert(
            id,
            OpenGroup {
                counters,
                tid,
                ids,
                buf,
            },
        );
        Ok(GroupId(id))
    }

    fn enable(&mut self, group: GroupId) -> Result<(), PmuError> {
        let g = self.group(group)?;
        let tid = g.tid;
        g.counters[0]
            .enable_group()
            .map_err(|e| io_error(tid, "enabling counter group", e))
    }

    fn disable(&mut self, group: GroupId) -> Result<(), PmuError> {
        let g = self.group(group)?;
        let tid = g.tid;
        g.counters[0]
            .disable_group()
            .map_err(|e| io_error(tid, "disabling counter group", e))
    }

    fn read(&mut self, group: GroupId) -> Result<GroupReading, PmuError> {
        let g = self.group(group)?;
        let tid = g.tid;
        let (leader, _) = g.counters.split_at_mut(1);
        let data = leader[0]
            .read_group()
            .map_err(|e| io_error(tid, "reading counter group", e))?;
        let values = g
            .counters
            .iter()
            .map(|c| data.get(c).map(|entry| entry.value()).unwrap_or(0))
            .collect();
        Ok(GroupReading {
            time_enabled: data.time_enabled().map_or(0, |d| d.as_nanos() as u64),
            time_running: data.time_running().map_or(0, |d| d.as_nanos() as u64),
            values,
        })
    }

    /// One `read(2)` of the leader into the group's own buffer, parsed into
    /// `out`: no allocation once `out.values` has room for the group.
    fn read_into(&mut self, group: GroupId, out: &mut GroupReading) -> Result<(), PmuError> {
        use std::os::fd::AsRawFd;
        let g = self.group(group)?;
        let tid = g.tid;
        let fd = g.counters[0].as_raw_fd();
        let bytes = std::mem::size_of_val(g.buf.as_slice());
        let n = loop {
            // SAFETY: `buf` is a live, exclusively borrowed buffer of `bytes`
            // bytes and `fd` is the leader's open descriptor.
            let n = unsafe { libc::read(fd, g.buf.as_mut_ptr().cast(), bytes) };
            if n >= 0 {
                break n as usize;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(io_error(tid, "reading counter group", err));
            }
        };
        let words = &g.buf[..n / std::mem::size_of::<u64>()];
        if n == 0 || parse_group_read(words, &g.ids, out).is_none() {
            // As perf-event2 reports it: a task whose counters can no longer
            // be scheduled reads empty.
            let err = io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("short group read ({n} of {bytes} bytes)"),
            );
            return Err(io_error(tid, "reading counter group", err));
        }
        Ok(())
    }

    fn close(&mut self, group: GroupId) {
        self.groups.remove(&group.0);
    }
}

/// Raises this process's soft open-file limit to its hard limit, as `perf`
/// does: every counter is a file descriptor, and monitoring all threads of a
/// node with several event sets needs far more than the usual 1024. Returns the
/// new soft limit.
pub fn raise_open_file_limit() -> std::io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(std::io::Error::from)?;
    }
    Ok(hard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::perf_type;
    use crate::EventSource;
    use hwqos_core::MetricName;

    fn sw(name: &'static str, metric: &'static str, config: u64) -> Event {
        Event {
            name: name.into(),
            metric: MetricName::from_static(metric),
            attr: EventAttr {
                type_: perf_type::SOFTWARE,
                config,
                config1: 0,
                config2: 0,
                modes: Default::default(),
            },
            source: EventSource::Generic,
        }
    }

    fn me() -> CountTarget {
        CountTarget::Task {
            tid: nix::unistd::gettid().as_raw() as u32,
            inherit: false,
        }
    }

    #[test]
    fn group_counts_only_while_enabled() {
        let mut b = PerfBackend::new();
        let events = [
            sw("task-clock", "sw.task_clock", 1),
            sw("page-faults", "sw.page_faults", 2),
        ];
        let g = b.open_group(&me(), &events).unwrap();
        let r0 = b.read(g).unwrap();
        assert_eq!(r0.values, vec![0, 0]);
        assert_eq!(r0.time_enabled, 0);
        b.enable(g).unwrap();
        let mut v = vec![0u8; 64 * 4096];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        b.disable(g).unwrap();
        let r1 = b.read(g).unwrap();
        assert!(r1.values[0] > 0, "task clock advanced: {r1:?}");
        assert!(r1.time_enabled > 0 && r1.time_running == r1.time_enabled);
        let r2 = b.read(g).unwrap();
        assert_eq!(r1, r2, "a disabled group does not count");
        b.close(g);
        assert!(matches!(b.read(g), Err(PmuError::NoSuchGroup(_))));
    }

    #[test]
    fn inherited_group_sums_threads_created_later() {
        let mut b = PerfBackend::new();
        let me_inherit = CountTarget::Task {
            tid: nix::unistd::gettid().as_raw() as u32,
            inherit: true,
        };
        let g = b
            .open_group(&me_inherit, &[sw("page-faults", "sw.page_faults", 2)])
            .unwrap();
        b.enable(g).unwrap();
        const PAGES: usize = 2000;
        std::thread::spawn(|| {
            let mut v = vec![0u8; PAGES * 4096];
            for i in (0..v.len()).step_by(4096) {
                v[i] = 1;
            }
            std::hint::black_box(&v);
        })
        .join()
        .unwrap();
        b.disable(g).unwrap();
        let r = b.read(g).unwrap();
        assert!(
            r.values[0] >= PAGES as u64 / 2,
            "the exited thread's faults are included: {r:?}"
        );
    }

    /// Regression: members opened disabled stayed at 0 in CPU-wide groups led
    /// by a software event, although the leader counted (kernel 6.18). A
    /// thread pinned to the counted CPU touches fresh pages and sleeps, so
    /// every member has a known lower bound.
    #[test]
    fn every_member_of_a_cpu_wide_group_counts() {
        const PAGES: usize = 2_000;
        let mut b = PerfBackend::new();
        let events = [
            sw("task-clock", "sw.task_clock", 1),
            sw("page-faults", "sw.page_faults", 2),
            sw("context-switches", "sw.context_switches", 3),
        ];
        let g = b.open_group(&CountTarget::Cpu { cpu: 0 }, &events).unwrap();
        assert_eq!(b.read(g).unwrap().values, vec![0, 0, 0], "not yet enabled");
        b.enable(g).unwrap();
        std::thread::spawn(|| {
            let mut only_cpu0 = nix::sched::CpuSet::new();
            only_cpu0.set(0).unwrap();
            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &only_cpu0).unwrap();
            hwqos_core::mem::touch_fresh_pages(PAGES).unwrap();
            for _ in 0..10 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
        .join()
        .unwrap();
        b.disable(g).unwrap();
        let r = b.read(g).unwrap();
        assert!(r.values[0] > 0, "task clock: {r:?}");
        assert!(r.values[1] >= PAGES as u64, "page faults: {r:?}");
        assert!(r.values[2] >= 10, "context switches: {r:?}");
        assert_eq!(r, b.read(g).unwrap(), "a disabled group does not count");
    }

    /// The same known answer through a task group led by task-clock.
    #[test]
    fn every_member_of_a_task_group_counts() {
        const PAGES: usize = 2_000;
        let mut b = PerfBackend::new();
        let events = [
            sw("task-clock", "sw.task_clock", 1),
            sw("page-faults", "sw.page_faults", 2),
        ];
        let g = b.open_group(&me(), &events).unwrap();
        b.enable(g).unwrap();
        hwqos_core::mem::touch_fresh_pages(PAGES).unwrap();
        b.disable(g).unwrap();
        let r = b.read(g).unwrap();
        assert!(r.values[0] > 0 && r.values[1] >= PAGES as u64, "{r:?}");
    }

    #[test]
    fn a_group_read_is_parsed_by_id() {
        let mut out = GroupReading {
            values: vec![9, 9, 9, 9, 9],
            ..GroupReading::default()
        };
        // nr, enabled, running, then (value, id) in the kernel's order.
        let words = [3, 1_000, 800, 11, 70, 22, 71, 33, 72];
        parse_group_read(&words, &[70, 71, 72], &mut out).unwrap();
        assert_eq!(
            out,
            GroupReading {
                time_enabled: 1_000,
                time_running: 800,
                values: vec![11, 22, 33],
            }
        );
        // Another order, and an id the read lacks.
        parse_group_read(&words, &[72, 99, 70], &mut out).unwrap();
        assert_eq!(out.values, vec![33, 0, 11]);
        // Shorter than its own count says, or empty.
        assert!(parse_group_read(&words[..8], &[70, 71, 72], &mut out).is_none());
        assert!(parse_group_read(&[], &[70], &mut out).is_none());
    }

    /// The per-tick read gives exactly what the allocating read gives.
    #[test]
    fn read_into_agrees_with_read() {
        const PAGES: usize = 500;
        let mut b = PerfBackend::new();
        let events = [
            sw("task-clock", "sw.task_clock", 1),
            sw("page-faults", "sw.page_faults", 2),
            sw("context-switches", "sw.context_switches", 3),
        ];
        let g = b.open_group(&me(), &events).unwrap();
        b.enable(g).unwrap();
        hwqos_core::mem::touch_fresh_pages(PAGES).unwrap();
        b.disable(g).unwrap();
        let mut into = GroupReading::default();
        b.read_into(g, &mut into).unwrap();
        assert_eq!(into, b.read(g).unwrap());
        assert!(into.values[1] >= PAGES as u64, "{into:?}");
        assert!(into.time_enabled > 0 && into.time_running == into.time_enabled);
        b.close(g);
        assert!(matches!(
            b.read_into(g, &mut into),
            Err(PmuError::NoSuchGroup(_))
        ));
    }

    #[test]
    fn missing_task_and_empty_group_are_errors() {
        let mut b = PerfBackend::new();
        let gone = CountTarget::Task {
            tid: u32::MAX / 2,
            inherit: true,
        };
        let err = b
            .open_group(&gone, &[sw("task-clock", "sw.task_clock", 1)])
            .unwrap_err();
        assert!(matches!(err, PmuError::NoSuchTask { .. }), "{err}");
        assert!(matches!(b.open_group(&me(), &[]), Err(PmuError::Config(_))));
    }

    #[test]
    fn nonexistent_software_event_is_unavailable() {
        let mut b = PerfBackend::new();
        let err = b.probe(&sw("bogus", "sw.bogus", 999)).unwrap_err();
        assert!(
            matches!(err, PmuError::Unavailable { ref name, .. } if name == "bogus"),
            "{err}"
        );
    }
}
