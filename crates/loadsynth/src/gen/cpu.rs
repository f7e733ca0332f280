//! CPU utilization: a duty cycle on the core ticker — busy for `knob × 10 ms`
//! of this thread's own CPU time, then asleep until the next absolute
//! deadline (no drift, thesis seed 003). Counting CPU time rather than wall
//! time keeps the knob's gain at 1 when other tasks preempt the thread.
//!
//! The knob is the CPU share of *all* generator threads on the CPU: each
//! slice is busy for the CPU time still owed — the knob's share of the wall
//! time passed less what this thread and the other generators on this CPU
//! (faults, switches, caches ...) used — so the total does not move when
//! contention changes their cost or delays a wake-up (open-loop replay stays
//! exact; see [`super::Siblings`]).

use super::{clock_ns, Context, SiblingTotal, SLICE};
use crate::knob::Knob;
use hwqos_core::ticker::{SleepStrategy, Ticker};
use hwqos_core::time::{monotonic_ns, thread_cpu_ns};

/// Runs until stopped; `duty` is clamped to 0..=1.
pub fn run(ctx: &Context, duty: &Knob) {
    let period = SLICE.as_nanos() as u64;
    // Absolute sleeps: a spinning strategy would add CPU time the knob does not ask for.
    let Ok(ticker) = Ticker::new(SLICE) else {
        return;
    };
    let mut ticker = ticker.with_strategy(SleepStrategy::Absolute);
    let me = nix::unistd::gettid().as_raw();
    let mut others = SiblingTotal::default();
    let others_ns = |t: &mut SiblingTotal| t.delta(&ctx.siblings.list(), me, |s| clock_ns(s.clock));
    others_ns(&mut others);
    // CPU time owed to the knob (ns): grows by the knob's share of the wall
    // time passed and shrinks by what this thread and its siblings used, so
    // a late wake-up or another generator's burst is made up in later
    // slices. Bounded to one period either way: after a long stall the
    // surplus is neither owed nor held against the next slices.
    let mut owed = 0.0f64;
    let mut last_wall = monotonic_ns();
    let mut last_own = thread_cpu_ns();
    while !ctx.stop.is_stopped() {
        let d = duty.get().clamp(0.0, 1.0);
        let now = monotonic_ns();
        let start = thread_cpu_ns();
        let used = others_ns(&mut others) + start.saturating_sub(last_own);
        owed += d * now.saturating_sub(last_wall) as f64 - used as f64;
        owed = owed.clamp(-(period as f64), period as f64);
        last_wall = now;
        let busy = owed.max(0.0) as u64;
        let busy_until = start + busy;
        // Preempted time does not count: the slice ends when the thread has
        // had its CPU time (or on stop, or after 10 periods of starvation).
        let give_up = monotonic_ns() + 10 * period;
        let mut spins = 0u64;
        loop {
            for _ in 0..1000 {
                spins = std::hint::black_box(spins.wrapping_add(1));
            }
            if thread_cpu_ns() >= busy_until || ctx.stop.is_stopped() || monotonic_ns() >= give_up {
                break;
            }
        }
        ctx.done.add(thread_cpu_ns().saturating_sub(start));
        last_own = start;
        if d < 1.0 {
            ticker.wait();
        }
    }
}
