//! Generators (the actuators): each runs on a thread pinned to one CPU, reads
//! its knob at least every ~10 ms, checks the stop flag as often, and frees
//! its memory when it returns.
//!
//! | generator | knob | module |
//! |---|---|---|
//! | CPU duty cycle | busy share of each 10 ms period | [`cpu`] |
//! | page faults | faults per second | [`faults`] |
//! | context switches | switches per second (pipe ping-pong) | [`switches`] |
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
pub mod io;
pub mod membw;
pub mod switches;
pub mod tlb;

use crate::knob::{StopFlag, WorkCounter};
use std::time::Duration;

/// How often every generator looks at its knob and the stop flag.
pub const SLICE: Duration = Duration::from_millis(10);

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: u32) -> std::io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu as usize).map_err(std::io::Error::other)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| std::io::Error::other(format!("pinning to CPU {cpu}: {e}")))
}

/// What every generator thread gets.
#[derive(Clone, Debug)]
pub struct Context {
    pub cpu: u32,
    pub stop: StopFlag,
    /// Work done (bytes, events), for self-reported metrics and tests.
    pub done: WorkCounter,
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
