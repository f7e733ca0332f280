//! Generators (the actuators): each runs on a thread pinned to one CPU, reads
//! its knob at least every ~10 ms, checks the stop flag as often, and frees
//! its memory when it returns.
//!
//! | generator | knob | module |
//! |---|---|---|
//! | CPU duty cycle | busy share of each 10 ms period | [`cpu`] |
//! | page faults | faults per second | [`faults`] |
//! | context switches | switches per second (pipe ping-pong) | [`switches`] |
//! | instructions | instructions per second (paced spin of a known loop) | [`inst`] |
//! | data-cache misses | share of accesses per conflict stream | [`dcache`] |
//! | instruction-cache misses | share of far jumps | [`icache`] |
//! | TLB misses | share of page-strided accesses | [`tlb`] |
//! | branch mispredictions | share of random branches | [`branch`] |
//! | memory bandwidth | bytes per second | [`membw`] |
//! | file I/O | bytes per second written | [`io`] |

pub mod branch;
pub mod cpu;
pub mod dcache;
pub mod faults;
pub mod icache;
pub mod inst;
pub mod io;
pub mod membw;
pub mod switches;
pub mod tlb;

use crate::knob::{StopFlag, WorkCounter};
use std::time::Duration;

/// How often every generator looks at its knob and the stop flag.
pub const SLICE: Duration = Duration::from_millis(10);

/// Pins the calling thread to `cpu` (through [`hwqos_core::affinity`], the
/// one pinning implementation), naming the CPU in the error.
pub(crate) fn pin_to_cpu(cpu: u32) -> std::io::Result<()> {
    hwqos_core::affinity::pin_current_thread(cpu)
        .map_err(|e| std::io::Error::new(e.kind(), format!("pinning to CPU {cpu}: {e}")))
}

/// What every generator thread gets.
#[derive(Clone, Debug)]
pub struct Context {
    /// The CPU the thread pins itself to.
    pub cpu: u32,
    /// Set to stop; checked at least every [`SLICE`].
    pub stop: StopFlag,
    /// Work done (bytes, events), for self-reported metrics and tests.
    pub done: WorkCounter,
    /// Every generator thread pinned to this CPU (this one included).
    pub siblings: Siblings,
}

/// One generator thread: its kernel thread id and CPU-time clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sibling {
    /// Kernel thread id (for `/proc/self/task/TID`).
    pub tid: i32,
    /// The thread's CPU-time clock (see [`clock_ns`]).
    pub clock: libc::clockid_t,
}

/// The generator threads of one CPU, so that the CPU and context-switch
/// generators can top up what the others already use: the CPU generator
/// makes the CPU time of *all* generator threads on its CPU equal its knob,
/// the switch generator their context switches. Each knob then means the
/// total of the generators on that CPU, whatever share the other generators
/// take under contention (which otherwise varies with the other tenants and
/// breaks open-loop replay).
#[derive(Clone, Debug, Default)]
pub struct Siblings(std::sync::Arc<std::sync::Mutex<Vec<Sibling>>>);

impl Siblings {
    /// Registers the calling thread.
    pub fn register_self(&self) {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: pthread_self is this live thread; clock is a valid out pointer.
        if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } != 0 {
            return;
        }
        let tid = nix::unistd::gettid().as_raw();
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Sibling { tid, clock });
    }

    /// The threads registered so far (some may have exited).
    pub fn list(&self) -> Vec<Sibling> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// CPU time of a thread of this process (None once it has exited).
pub fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer.
    (unsafe { libc::clock_gettime(clock, &mut ts) } == 0)
        .then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Voluntary plus involuntary context switches of a thread of this process,
/// from `/proc/self/task/TID/status` (the counts perf's context-switches
/// event sees per task; None once the thread has exited).
pub fn thread_switches(tid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let mut sum = 0u64;
    let mut found = 0;
    for line in text.lines() {
        if let Some(v) = line
            .strip_prefix("voluntary_ctxt_switches:")
            .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
        {
            sum += v.trim().parse::<u64>().ok()?;
            found += 1;
        }
    }
    (found == 2).then_some(sum)
}

/// Sums a per-thread counter over siblings, as increments since the last
/// call: threads that appear start at their current value, threads that
/// exit stop counting.
#[derive(Debug, Default)]
pub struct SiblingTotal {
    last: std::collections::BTreeMap<i32, u64>,
}

impl SiblingTotal {
    /// The increase of `read` summed over `siblings` since the previous call,
    /// leaving out the thread `except`.
    pub fn delta(
        &mut self,
        siblings: &[Sibling],
        except: i32,
        read: impl Fn(&Sibling) -> Option<u64>,
    ) -> u64 {
        let mut sum = 0u64;
        let mut seen = std::collections::BTreeMap::new();
        for s in siblings.iter().filter(|s| s.tid != except) {
            if let Some(v) = read(s) {
                if let Some(prev) = self.last.get(&s.tid) {
                    sum += v.saturating_sub(*prev);
                }
                seen.insert(s.tid, v);
            }
        }
        self.last = seen;
        sum
    }
}

/// Sleeps until `deadline_ns` (monotonic) unless stopped; returns false when stopped.
pub(crate) fn wait_until(deadline_ns: u64, stop: &StopFlag) -> bool {
    loop {
        if stop.is_stopped() {
            return false;
        }
        let now = hwqos_core::time::monotonic_ns();
        if now >= deadline_ns {
            return true;
        }
        let left = (deadline_ns - now).min(SLICE.as_nanos() as u64);
        std::thread::sleep(Duration::from_nanos(left));
    }
}

/// Runs `work(amount_for_this_slice)` once per [`SLICE`] at `rate_per_s()`
/// units per second, carrying fractions, until stopped.
pub(crate) fn paced(
    stop: &StopFlag,
    mut rate_per_s: impl FnMut() -> f64,
    mut work: impl FnMut(u64),
) {
    let mut carry = crate::knob::Carry::default();
    let slice_ns = SLICE.as_nanos() as u64;
    let mut deadline = hwqos_core::time::monotonic_ns();
    let mut last = deadline;
    while !stop.is_stopped() {
        let now = hwqos_core::time::monotonic_ns();
        // Work owed for the time since the last slice (a briefly preempted
        // thread catches up), but at most 250 ms of it: after a long stall a
        // burst would disturb the measurement more than the lost work.
        let dt = (now.saturating_sub(last)).min(25 * slice_ns) as f64 / 1e9;
        last = now;
        let n = carry.take(rate_per_s().max(0.0) * dt);
        if n > 0 {
            work(n);
        }
        deadline += slice_ns;
        if deadline < now {
            deadline = now + slice_ns;
        }
        if !wait_until(deadline, stop) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sibling_totals_count_increments_of_live_threads_only() {
        let a = Sibling { tid: 1, clock: 0 };
        let b = Sibling { tid: 2, clock: 0 };
        let c = Sibling { tid: 3, clock: 0 };
        let mut t = SiblingTotal::default();
        let values = |v: [Option<u64>; 3]| move |s: &Sibling| v[s.tid as usize - 1];
        // First sight: a baseline, no increment.
        assert_eq!(t.delta(&[a, b], 0, values([Some(10), Some(100), None])), 0);
        // c appears (baseline), a is left out as `except`.
        assert_eq!(
            t.delta(&[a, b, c], 1, values([Some(50), Some(130), Some(7)])),
            30
        );
        // b exited (unreadable): only c counts; a (back in) restarts from a baseline.
        assert_eq!(t.delta(&[a, b, c], 0, values([Some(60), None, Some(9)])), 2);
        assert_eq!(t.delta(&[a, b, c], 0, values([Some(65), None, Some(9)])), 5);
    }

    #[test]
    fn a_registered_thread_is_read_through_its_clock_and_proc_status() {
        let siblings = Siblings::default();
        let s2 = siblings.clone();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            s2.register_self();
            let start = hwqos_core::time::thread_cpu_ns();
            while hwqos_core::time::thread_cpu_ns() - start < 20_000_000 {
                std::hint::black_box(0u64);
            }
            // Sleeping is a voluntary switch.
            std::thread::sleep(std::time::Duration::from_millis(5));
            let _ = rx.recv();
        });
        while siblings.list().is_empty() {
            std::thread::yield_now();
        }
        let s = siblings.list()[0];
        let mut cpu = 0;
        while cpu < 20_000_000 {
            cpu = clock_ns(s.clock).unwrap();
            std::thread::yield_now();
        }
        while thread_switches(s.tid).unwrap() == 0 {
            std::thread::yield_now();
        }
        tx.send(()).unwrap();
        h.join().unwrap();
        // Gone: no value. The join returns when the kernel clears the
        // thread's id, a moment before it reaps the task and its
        // /proc/self/task entry.
        let mut gone = thread_switches(s.tid);
        for _ in 0..1000 {
            if gone.is_none() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            gone = thread_switches(s.tid);
        }
        assert_eq!(gone, None);
    }
}
