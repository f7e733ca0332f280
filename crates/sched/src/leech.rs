//! Leeches (thesis 8.4.2): processes that consume one shared resource at a
//! controllable intensity, used to find a victim's resource limit
//! (Listing 8.2) and to create interference in the QoS experiments.
//!
//! - [`LeechKind::Cpu`]: integer work on the core;
//! - [`LeechKind::Memory`]: strided writes over a working set (set the working
//!   set above the last-level cache to load memory, below L1/L2 to load those);
//! - [`LeechKind::Fpu`]: dependent floating-point multiply-adds;
//! - [`LeechKind::Faults`]: minor page faults (touch fresh pages, drop them
//!   with `MADV_DONTNEED`, repeat) — a software-countable resource for
//!   PMU-less machines.
//!
//! Intensity is a duty cycle: in each 1 ms slice the leech works for
//! `duty × 1 ms` and sleeps the rest, so a ramp is a sequence of duties.

use hwqos_core::mem::AnonMapping;
use hwqos_core::time::monotonic_ns;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Which shared resource a leech consumes (parsed from `cpu`, `memory`/`mem`,
/// `fpu`, `faults`/`page-faults`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeechKind {
    /// Integer work on the core.
    Cpu,
    /// Strided writes over [`LeechSpec::working_set`].
    Memory,
    /// Dependent floating-point multiply-adds.
    Fpu,
    /// Minor page faults over [`LeechSpec::working_set`].
    Faults,
}

impl std::str::FromStr for LeechKind {
    type Err = crate::SchedError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cpu" => Ok(LeechKind::Cpu),
            "memory" | "mem" => Ok(LeechKind::Memory),
            "fpu" => Ok(LeechKind::Fpu),
            "faults" | "page-faults" => Ok(LeechKind::Faults),
            _ => Err(crate::SchedError::invalid(
                "leech kind",
                format!("`{s}` (expected cpu, memory, fpu or faults)"),
            )),
        }
    }
}

/// A leech's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeechSpec {
    /// The resource it consumes.
    pub kind: LeechKind,
    /// Working set in bytes (memory and faults leeches).
    pub working_set: usize,
    /// Bytes between consecutive accesses (memory leech).
    pub stride: usize,
}

impl Default for LeechSpec {
    fn default() -> Self {
        LeechSpec {
            kind: LeechKind::Cpu,
            working_set: 64 << 20,
            stride: 64,
        }
    }
}

/// The duty cycle as parts per million (so it fits an atomic).
pub const DUTY_FULL: u64 = 1_000_000;
const SLICE_NS: u64 = 1_000_000;

/// Runs a leech until `stop` is set. `duty_ppm` may be changed while it runs
/// (the finder ramps it); `work` counts completed work units (loop
/// iterations, accesses or faults) so callers can report the leech's own rate.
pub fn run(
    spec: &LeechSpec,
    duty_ppm: &AtomicU64,
    stop: &AtomicBool,
    work: &AtomicU64,
) -> std::io::Result<()> {
    if spec.stride == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "leech stride must be positive",
        ));
    }
    let page = 4096usize;
    let mapping = match spec.kind {
        LeechKind::Memory | LeechKind::Faults => {
            Some(AnonMapping::map(spec.working_set.max(page))?)
        }
        _ => None,
    };
    if let Some(m) = &mapping {
        if spec.kind == LeechKind::Faults {
            m.advise(0, m.len(), libc::MADV_NOHUGEPAGE);
        }
    }
    let mut offset = 0usize;
    let mut acc = 1.000_001_f64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while !stop.load(Ordering::Relaxed) {
        let duty = duty_ppm.load(Ordering::Relaxed).min(DUTY_FULL);
        let start = monotonic_ns();
        let busy_until = start + SLICE_NS * duty / DUTY_FULL;
        let mut units = 0u64;
        while monotonic_ns() < busy_until {
            for _ in 0..64 {
                match spec.kind {
                    LeechKind::Cpu => {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                    }
                    LeechKind::Fpu => {
                        acc = acc * 1.000_000_1 + 1e-9;
                    }
                    LeechKind::Memory => {
                        let m = mapping.as_ref().expect("mapped");
                        // SAFETY: offset < len.
                        unsafe {
                            let p = m.as_ptr().add(offset);
                            std::ptr::write_volatile(p, std::ptr::read_volatile(p).wrapping_add(1));
                        }
                        offset += spec.stride;
                        if offset >= m.len() {
                            offset = (offset + 8) % spec.stride.min(m.len());
                        }
                    }
                    LeechKind::Faults => {
                        let m = mapping.as_ref().expect("mapped");
                        // SAFETY: offset < len.
                        unsafe { std::ptr::write_volatile(m.as_ptr().add(offset), 1) };
                        offset += page;
                        if offset >= m.len() {
                            offset = 0;
                            m.advise(0, m.len(), libc::MADV_DONTNEED);
                        }
                    }
                }
            }
            units += 64;
        }
        work.fetch_add(units, Ordering::Relaxed);
        let rest = start + SLICE_NS;
        let now = monotonic_ns();
        if duty < DUTY_FULL && now < rest {
            std::thread::sleep(std::time::Duration::from_nanos(rest - now));
        }
    }
    std::hint::black_box((acc, x));
    Ok(())
}

/// Leech threads sharing one duty cycle: what `hwqos-sra leech` runs and
/// what the resource-limit finder ramps ([`crate::limit::Ramp`]).
pub struct LeechThreads {
    duty: std::sync::Arc<AtomicU64>,
    work: std::sync::Arc<AtomicU64>,
    stop: std::sync::Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl LeechThreads {
    /// Starts `threads` (at least one) leech threads at duty `duty` in
    /// [0, 1], each pinned to `cpu` when given; they run until `stop` is set
    /// or [`LeechThreads::stop`].
    pub fn start(
        spec: &LeechSpec,
        threads: usize,
        cpu: Option<u32>,
        duty: f64,
        stop: std::sync::Arc<AtomicBool>,
    ) -> std::io::Result<LeechThreads> {
        let mut l = LeechThreads {
            duty: std::sync::Arc::new(AtomicU64::new(duty_ppm(duty))),
            work: std::sync::Arc::new(AtomicU64::new(0)),
            stop,
            threads: Vec::new(),
        };
        for i in 0..threads.max(1) {
            let (spec, duty, stop, work) =
                (spec.clone(), l.duty.clone(), l.stop.clone(), l.work.clone());
            let t = std::thread::Builder::new()
                .name(format!("leech-{i}"))
                .spawn(move || {
                    if let Some(c) = cpu {
                        hwqos_core::affinity::pin_current_thread(c)?;
                    }
                    run(&spec, &duty, &stop, &work)
                })?;
            l.threads.push(t);
        }
        Ok(l)
    }

    /// Work units done so far by all threads.
    pub fn work(&self) -> u64 {
        self.work.load(Ordering::Relaxed)
    }

    /// Whether a thread has ended (an error, or the stop flag).
    pub fn any_finished(&self) -> bool {
        self.threads.iter().any(|t| t.is_finished())
    }

    /// Stops and joins every thread; the first thread error, if any.
    pub fn stop(self) -> std::io::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        let mut first = Ok(());
        for t in self.threads {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a leech thread panicked")));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl crate::limit::Ramp for LeechThreads {
    fn set_intensity(&mut self, intensity: f64) {
        tracing::info!(intensity, "leech intensity");
        self.duty.store(duty_ppm(intensity), Ordering::SeqCst);
    }
}

/// A duty in [0, 1] as parts per million.
pub fn duty_ppm(duty: f64) -> u64 {
    (duty.clamp(0.0, 1.0) * DUTY_FULL as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_leech_faults_once_per_page_touched() {
        let stop = AtomicBool::new(false);
        let work = AtomicU64::new(0);
        let duty = AtomicU64::new(DUTY_FULL);
        let spec = LeechSpec {
            kind: LeechKind::Faults,
            working_set: 64 * 4096,
            stride: 64,
        };
        let before = minor_faults();
        std::thread::scope(|s| {
            s.spawn(|| run(&spec, &duty, &stop, &work).unwrap());
            while work.load(Ordering::Relaxed) < 10_000 {
                std::thread::yield_now();
            }
            stop.store(true, Ordering::Relaxed);
        });
        let faults = minor_faults() - before;
        let touched = work.load(Ordering::Relaxed);
        // Every touch after a MADV_DONTNEED is a fresh fault (kernel count as oracle).
        assert!(faults >= touched, "{faults} faults for {touched} touches");
    }

    fn minor_faults() -> u64 {
        // SAFETY: an all-zero rusage is a valid value (plain integers).
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage fills the struct it is given.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        ru.ru_minflt as u64
    }

    #[test]
    fn rejects_bad_kinds_and_strides() {
        assert!("gpu".parse::<LeechKind>().is_err());
        let spec = LeechSpec {
            stride: 0,
            ..LeechSpec::default()
        };
        let err = run(
            &spec,
            &AtomicU64::new(0),
            &AtomicBool::new(true),
            &AtomicU64::new(0),
        );
        assert!(err.is_err());
    }
}
