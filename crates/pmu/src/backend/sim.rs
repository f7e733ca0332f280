//! A deterministic simulated PMU for tests: the hardware paths of the sampler
//! (capacity limits, multiplexing, scaling, unavailable events, vanished tasks)
//! exercised on nodes without a hardware PMU.
//!
//! - **Virtual clock**: time only moves when a test calls [`SimBackend::advance`].
//! - **Scripted counts**: per metric, optionally per subject (task, CPU, cgroup on
//!   a CPU), a [`Script`] gives the true cumulative count at each virtual time. A
//!   running counter accumulates the truth's increase while it is on the PMU.
//! - **Counters**: each *context* — a task, or a CPU (CPU-wide and cgroup groups on
//!   that CPU share it) — has `capacity` hardware counters. Software events
//!   (`attr.type_ == SOFTWARE`) need none.
//! - **Kernel-style multiplexing**: when the enabled groups of a context need more
//!   counters than it has, the scheduler rotates them round-robin every
//!   `quantum` ns (default 1 ms, perf's default multiplexing interval): at each
//!   quantum it schedules groups in list order while they fit, then moves the
//!   first to the back. Enabled groups accumulate `time_enabled`; only scheduled
//!   ones accumulate `time_running` and counts.
//!
//! [`SimBackend`] is a cheap handle (`Clone`): a test keeps one to drive the clock
//! while the sampler owns another.

use super::{BackendKind, CountTarget, CounterBackend, GroupId, GroupReading};
use crate::event::perf_type;
use crate::{Event, PmuError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// perf's default multiplexing interval (`perf_event_mux_interval_ms` = 1).
pub const DEFAULT_QUANTUM_NS: u64 = 1_000_000;

/// The true count of one event over virtual time.
#[derive(Clone)]
pub enum Script {
    /// A constant rate in events per nanosecond.
    Rate(f64),
    /// Piecewise-constant rates: `(from_ns, events_per_ns)`, sorted by time; the
    /// rate before the first step is 0.
    Steps(Vec<(u64, f64)>),
    /// The true cumulative count at a virtual time (must not decrease).
    Cumulative(Arc<dyn Fn(u64) -> f64 + Send + Sync>),
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Script::Rate(r) => write!(f, "Rate({r})"),
            Script::Steps(s) => write!(f, "Steps({s:?})"),
            Script::Cumulative(_) => f.write_str("Cumulative(..)"),
        }
    }
}

impl Script {
    /// The true cumulative count from time 0 to `t`.
    pub fn cumulative(&self, t: u64) -> f64 {
        match self {
            Script::Rate(r) => r * t as f64,
            Script::Steps(steps) => {
                let mut total = 0.0;
                for (i, &(from, rate)) in steps.iter().enumerate() {
                    if from >= t {
                        break;
                    }
                    let until = steps.get(i + 1).map_or(t, |&(next, _)| next.min(t));
                    total += rate * until.saturating_sub(from) as f64;
                }
                total
            }
            Script::Cumulative(f) => f(t),
        }
    }

    /// The true count between `from` and `to`.
    pub fn between(&self, from: u64, to: u64) -> f64 {
        (self.cumulative(to) - self.cumulative(from)).max(0.0)
    }
}

/// What a script applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SimSubject {
    /// Groups opened on the thread with this tid ([`CountTarget::Task`]).
    Task(u32),
    /// Groups opened on this CPU ([`CountTarget::Cpu`]).
    Cpu(u32),
    /// Groups opened on this cgroup directory and CPU ([`CountTarget::Cgroup`]).
    Cgroup(PathBuf, u32),
}

impl SimSubject {
    fn of(target: &CountTarget) -> SimSubject {
        match target {
            CountTarget::Task { tid, .. } => SimSubject::Task(*tid),
            CountTarget::Cpu { cpu } => SimSubject::Cpu(*cpu),
            CountTarget::Cgroup { path, cpu } => SimSubject::Cgroup(path.clone(), *cpu),
        }
    }

    /// The PMU a subject's groups compete for.
    fn context(&self) -> SimSubject {
        match self {
            SimSubject::Cgroup(_, cpu) => SimSubject::Cpu(*cpu),
            other => other.clone(),
        }
    }
}

struct SimGroup {
    subject: SimSubject,
    events: Vec<Event>,
    hw_counters: usize,
    enabled: bool,
    time_enabled: u64,
    time_running: u64,
    counts: Vec<f64>,
    /// Scheduled on the PMU during the current quantum.
    on_pmu: bool,
}

struct SimState {
    now: u64,
    quantum: u64,
    capacity: usize,
    groups: BTreeMap<u64, SimGroup>,
    next_id: u64,
    /// Round-robin order of groups per context (rotated each quantum).
    rotation: HashMap<SimSubject, Vec<u64>>,
    scripts: HashMap<(Option<SimSubject>, String), Script>,
    unavailable: HashMap<String, String>,
    vanished: HashSet<u32>,
    /// Whether the schedule must be recomputed before time moves on.
    dirty: bool,
}

/// A deterministic simulated counter backend (tests only).
#[derive(Clone)]
pub struct SimBackend {
    state: Arc<Mutex<SimState>>,
}

impl SimBackend {
    /// A PMU with `capacity` hardware counters per context, at virtual time 0.
    pub fn new(capacity: usize) -> SimBackend {
        SimBackend {
            state: Arc::new(Mutex::new(SimState {
                now: 0,
                quantum: DEFAULT_QUANTUM_NS,
                capacity,
                groups: BTreeMap::new(),
                next_id: 1,
                rotation: HashMap::new(),
                scripts: HashMap::new(),
                unavailable: HashMap::new(),
                vanished: HashSet::new(),
                dirty: true,
            })),
        }
    }

    /// Sets the multiplexing rotation interval (ns, at least 1).
    pub fn with_quantum(self, quantum_ns: u64) -> SimBackend {
        self.lock().quantum = quantum_ns.max(1);
        self
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding the lock only happens in a failing test; the
        // state is still the best information available.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The virtual time in ns.
    pub fn now(&self) -> u64 {
        self.lock().now
    }

    /// Moves virtual time forward by `ns`, counting and multiplexing as the
    /// kernel would.
    pub fn advance(&self, ns: u64) {
        self.lock().advance(ns);
    }

    /// Scripts the true count of `metric` (a metric name such as `hw.cycles` or
    /// an event name as given) for every subject without its own script.
    pub fn script(&self, metric: &str, script: Script) {
        self.lock()
            .scripts
            .insert((None, metric.to_string()), script);
    }

    /// Scripts the true count of `metric` for one subject.
    pub fn script_for(&self, subject: SimSubject, metric: &str, script: Script) {
        self.lock()
            .scripts
            .insert((Some(subject), metric.to_string()), script);
    }

    /// Makes an event (by metric or event name) impossible to open, with `reason`.
    pub fn make_unavailable(&self, metric: &str, reason: &str) {
        self.lock()
            .unavailable
            .insert(metric.to_string(), reason.to_string());
    }

    /// Makes a task disappear: its groups fail with [`PmuError::NoSuchTask`].
    pub fn vanish_task(&self, tid: u32) {
        self.lock().vanished.insert(tid);
    }

    /// Number of groups currently open.
    pub fn open_groups(&self) -> usize {
        self.lock().groups.len()
    }

    /// Number of groups currently enabled.
    pub fn enabled_groups(&self) -> usize {
        self.lock().groups.values().filter(|g| g.enabled).count()
    }
}

impl SimState {
    fn script_for(&self, subject: &SimSubject, event: &Event) -> Option<&Script> {
        let keys = [event.metric.as_str(), event.name.as_str()];
        keys.iter()
            .find_map(|k| self.scripts.get(&(Some(subject.clone()), k.to_string())))
            .or_else(|| {
                keys.iter()
                    .find_map(|k| self.scripts.get(&(None, k.to_string())))
            })
    }

    /// Decides which enabled groups are on the PMU for the coming quantum.
    fn schedule(&mut self) {
        for g in self.groups.values_mut() {
            g.on_pmu = g.enabled && g.hw_counters == 0;
        }
        for order in self.rotation.values() {
            let mut free = self.capacity;
            for id in order {
                let Some(g) = self.groups.get_mut(id) else {
                    continue;
                };
                if !g.enabled || g.hw_counters == 0 {
                    continue;
                }
                if g.hw_counters > free {
                    // Like the kernel's flexible groups: stop at the first that does not fit.
                    break;
                }
                free -= g.hw_counters;
                g.on_pmu = true;
            }
        }
        self.dirty = false;
    }

    /// Moves each context's first enabled hardware group to the back, if the
    /// context is overcommitted (the kernel only rotates when multiplexing).
    fn rotate(&mut self) {
        let groups = &self.groups;
        for order in self.rotation.values_mut() {
            let needed: usize = order
                .iter()
                .filter_map(|id| groups.get(id))
                .filter(|g| g.enabled)
                .map(|g| g.hw_counters)
                .sum();
            if needed > self.capacity && !order.is_empty() {
                order.rotate_left(1);
            }
        }
        self.dirty = true;
    }

    fn run_slice(&mut self, from: u64, to: u64) {
        if self.dirty {
            self.schedule();
        }
        let len = to - from;
        let ids: Vec<u64> = self.groups.keys().copied().collect();
        for id in ids {
            let Some(g) = self.groups.get(&id) else {
                continue;
            };
            if !g.enabled {
                continue;
            }
            let increments: Vec<f64> = if g.on_pmu {
                g.events
                    .iter()
                    .map(|e| {
                        self.script_for(&g.subject, e)
                            .map_or(0.0, |s| s.between(from, to))
                    })
                    .collect()
            } else {
                Vec::new()
            };
            if let Some(g) = self.groups.get_mut(&id) {
                g.time_enabled += len;
                if g.on_pmu {
                    g.time_running += len;
                    for (c, inc) in g.counts.iter_mut().zip(increments) {
                        *c += inc;
                    }
                }
            }
        }
    }

    fn advance(&mut self, ns: u64) {
        let end = self.now + ns;
        while self.now < end {
            let next_boundary = (self.now / self.quantum + 1) * self.quantum;
            let to = next_boundary.min(end);
            self.run_slice(self.now, to);
            self.now = to;
            if to == next_boundary {
                self.rotate();
            }
        }
    }

    fn check_task(&self, subject: &SimSubject) -> Result<(), PmuError> {
        match subject {
            SimSubject::Task(tid) if self.vanished.contains(tid) => {
                Err(PmuError::NoSuchTask { tid: *tid })
            }
            _ => Ok(()),
        }
    }

    fn group(&mut self, id: GroupId) -> Result<&mut SimGroup, PmuError> {
        let g = self.groups.get(&id.0).ok_or(PmuError::NoSuchGroup(id.0))?;
        self.check_task(&g.subject)?;
        self.groups
            .get_mut(&id.0)
            .ok_or(PmuError::NoSuchGroup(id.0))
    }
}

impl CounterBackend for SimBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Simulated
    }

    fn capacity(&self) -> Option<usize> {
        Some(self.lock().capacity)
    }

    fn open_group(&mut self, target: &CountTarget, events: &[Event]) -> Result<GroupId, PmuError> {
        let mut st = self.lock();
        if events.is_empty() {
            return Err(PmuError::Config(
                "cannot open an empty counter group".into(),
            ));
        }
        let subject = SimSubject::of(target);
        st.check_task(&subject)?;
        for e in events {
            let reason = st
                .unavailable
                .get(e.metric.as_str())
                .or_else(|| st.unavailable.get(&e.name));
            if let Some(reason) = reason {
                return Err(PmuError::Unavailable {
                    name: e.name.clone(),
                    reason: reason.clone(),
                });
            }
        }
        let hw_counters = events
            .iter()
            .filter(|e| e.attr.type_ != perf_type::SOFTWARE)
            .count();
        if hw_counters > st.capacity {
            return Err(PmuError::SetTooLarge {
                set: events.iter().map(|e| e.name.clone()).collect(),
                len: hw_counters,
                capacity: st.capacity,
            });
        }
        let id = st.next_id;
        st.next_id += 1;
        st.rotation.entry(subject.context()).or_default().push(id);
        st.groups.insert(
            id,
            SimGroup {
                subject,
                events: events.to_vec(),
                hw_counters,
                enabled: false,
                time_enabled: 0,
                time_running: 0,
                counts: vec![0.0; events.len()],
                on_pmu: false,
            },
        );
        st.dirty = true;
        Ok(GroupId(id))
    }

    fn enable(&mut self, group: GroupId) -> Result<(), PmuError> {
        let mut st = self.lock();
        st.group(group)?.enabled = true;
        st.dirty = true;
        Ok(())
    }

    fn disable(&mut self, group: GroupId) -> Result<(), PmuError> {
        let mut st = self.lock();
        st.group(group)?.enabled = false;
        st.dirty = true;
        Ok(())
    }

    fn read(&mut self, group: GroupId) -> Result<GroupReading, PmuError> {
        let mut st = self.lock();
        let g = st.group(group)?;
        Ok(GroupReading {
            time_enabled: g.time_enabled,
            time_running: g.time_running,
            values: g.counts.iter().map(|c| c.round() as u64).collect(),
        })
    }

    fn close(&mut self, group: GroupId) {
        let mut st = self.lock();
        if let Some(g) = st.groups.remove(&group.0) {
            let ctx = g.subject.context();
            if let Some(order) = st.rotation.get_mut(&ctx) {
                order.retain(|id| *id != group.0);
            }
            st.dirty = true;
        }
    }

    /// Probing checks availability without a task: the simulator needs none.
    fn probe(&mut self, event: &Event) -> Result<(), PmuError> {
        let g = self.open_group(&CountTarget::Cpu { cpu: 0 }, std::slice::from_ref(event))?;
        self.close(g);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventAttr, EventSource};
    use hwqos_core::MetricName;

    fn ev(metric: &'static str, type_: u32) -> Event {
        Event {
            name: metric.into(),
            metric: MetricName::from_static(metric),
            attr: EventAttr {
                type_,
                config: 0,
                config1: 0,
                config2: 0,
                modes: Default::default(),
            },
            source: EventSource::Generic,
        }
    }

    #[test]
    fn scripts_integrate_exactly() {
        assert_eq!(Script::Rate(2.0).between(10, 20), 20.0);
        let steps = Script::Steps(vec![(0, 1.0), (100, 3.0)]);
        assert_eq!(steps.cumulative(50), 50.0);
        assert_eq!(steps.cumulative(150), 100.0 + 150.0);
        assert_eq!(steps.between(90, 110), 10.0 + 30.0);
        let late = Script::Steps(vec![(100, 1.0)]);
        assert_eq!(late.cumulative(50), 0.0);
    }

    #[test]
    fn dedicated_counters_run_all_the_time() {
        let mut sim = SimBackend::new(2);
        sim.script("hw.cycles", Script::Rate(3.0));
        let t = CountTarget::Task {
            tid: 1,
            inherit: true,
        };
        let g = sim
            .open_group(&t, &[ev("hw.cycles", perf_type::HARDWARE)])
            .unwrap();
        sim.advance(500);
        assert_eq!(
            sim.read(g).unwrap().time_enabled,
            0,
            "disabled groups see no time"
        );
        sim.enable(g).unwrap();
        sim.advance(1_000);
        let r = sim.read(g).unwrap();
        assert_eq!(
            (r.time_enabled, r.time_running, r.values[0]),
            (1_000, 1_000, 3_000)
        );
    }

    #[test]
    fn overcommitted_context_multiplexes_round_robin() {
        let mut sim = SimBackend::new(2);
        sim.script("hw.cycles", Script::Rate(1.0));
        let t = CountTarget::Cpu { cpu: 0 };
        let hw = || {
            [
                ev("hw.cycles", perf_type::HARDWARE),
                ev("hw.instructions", perf_type::HARDWARE),
            ]
        };
        let groups: Vec<GroupId> = (0..3).map(|_| sim.open_group(&t, &hw()).unwrap()).collect();
        for g in &groups {
            sim.enable(*g).unwrap();
        }
        sim.advance(3 * 100 * DEFAULT_QUANTUM_NS);
        for g in &groups {
            let r = sim.read(*g).unwrap();
            assert_eq!(r.time_enabled, 300 * DEFAULT_QUANTUM_NS);
            assert_eq!(r.time_running, 100 * DEFAULT_QUANTUM_NS);
            assert_eq!(r.values[0], 100 * DEFAULT_QUANTUM_NS);
        }
        // Another task has its own PMU context: no multiplexing there.
        let other = sim
            .open_group(
                &CountTarget::Task {
                    tid: 9,
                    inherit: false,
                },
                &hw(),
            )
            .unwrap();
        sim.enable(other).unwrap();
        sim.advance(10 * DEFAULT_QUANTUM_NS);
        let r = sim.read(other).unwrap();
        assert_eq!(r.time_enabled, r.time_running);
    }

    #[test]
    fn limits_unavailable_and_vanished() {
        let mut sim = SimBackend::new(1);
        let two = [
            ev("hw.cycles", perf_type::HARDWARE),
            ev("hw.instructions", perf_type::HARDWARE),
        ];
        let t = CountTarget::Task {
            tid: 5,
            inherit: true,
        };
        assert!(matches!(
            sim.open_group(&t, &two),
            Err(PmuError::SetTooLarge { capacity: 1, .. })
        ));
        // Software events need no counter.
        let mixed = [
            ev("hw.cycles", perf_type::HARDWARE),
            ev("sw.task_clock", perf_type::SOFTWARE),
        ];
        let g = sim.open_group(&t, &mixed).unwrap();
        sim.make_unavailable("hw.l2.miss", "no L2 event on this model");
        let err = sim.probe(&ev("hw.l2.miss", perf_type::RAW)).unwrap_err();
        assert!(matches!(err, PmuError::Unavailable { ref reason, .. } if reason.contains("L2")));
        sim.vanish_task(5);
        assert!(matches!(sim.read(g), Err(PmuError::NoSuchTask { tid: 5 })));
        assert!(matches!(
            sim.open_group(&t, &mixed),
            Err(PmuError::NoSuchTask { tid: 5 })
        ));
        sim.close(g);
        assert_eq!(sim.open_groups(), 0);
    }
}
