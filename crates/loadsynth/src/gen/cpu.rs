//! CPU utilization: a duty cycle on the core ticker — busy for `knob × 10 ms`
//! of this thread's own CPU time, then asleep until the next absolute
//! deadline (no drift, thesis seed 003). Counting CPU time rather than wall
//! time keeps the knob's gain at 1 when other tasks preempt the thread.

use super::{Context, SLICE};
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
    while !ctx.stop.is_stopped() {
        let d = duty.get().clamp(0.0, 1.0);
        let start = thread_cpu_ns();
        let busy_until = start + (d * period as f64) as u64;
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
        if d < 1.0 {
            ticker.wait();
        }
    }
}
