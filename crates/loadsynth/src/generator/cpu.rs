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
//!
//! **Slices of random length** (uniform in 5..15 ms, 10 ms on average), not
//! a fixed 10 ms: this kernel charges user and system time in `/proc/stat`
//! by sampling at each scheduler tick (`CONFIG_TICK_CPU_ACCOUNTING`, 4 ms at
//! HZ=250) what runs at that instant, while idle time is measured exactly.
//! A busy phase that repeats every 10 ms from a fixed start stays in one
//! phase against the 4 ms tick for the whole run, so the ticks see it at one
//! of five offsets 2 ms apart: a duty of 0.52 was counted as 0.40 or 0.60 of
//! the ticks depending on the phase the run happened to start in (issue 24:
//! 8 pp off as `top` and a `/proc/stat` reader see it, while the idle-based
//! measurement saw the target). A random slice length makes each tick an
//! unbiased sample of the busy share.

use super::{clock_ns, wait_until, Context, SiblingTotal, SLICE};
use crate::knob::Knob;
use hwqos_core::time::{monotonic_ns, thread_cpu_ns};

/// Shortest and longest slice (ns): uniform between, 10 ms on average.
const MIN_SLICE_NS: u64 = 5_000_000;
const MAX_SLICE_NS: u64 = 15_000_000;

/// xorshift64*: the slice lengths need no better randomness.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Runs until stopped; `duty` is clamped to 0..=1.
pub fn run(ctx: &Context, duty: &Knob) {
    let period = SLICE.as_nanos() as u64;
    let me = nix::unistd::gettid().as_raw();
    let mut rng = (monotonic_ns() ^ ((me as u64) << 32)) | 1;
    let mut deadline = monotonic_ns();
    let mut others = SiblingTotal::default();
    let others_ns = |t: &mut SiblingTotal| t.delta(&ctx.siblings.list(), me, |s| clock_ns(s.clock));
    others_ns(&mut others);
    // CPU time owed to the knob (ns): grows by the knob's share of the wall
    // time passed and shrinks by what this thread and its siblings used, so
    // a late wake-up or another generator's burst is made up in later
    // slices. Bounded to two average slices either way: after a long stall
    // the surplus is neither owed nor held against the next slices.
    let mut owed = 0.0f64;
    let mut last_wall = monotonic_ns();
    let mut last_own = thread_cpu_ns();
    while !ctx.stop.is_stopped() {
        let d = duty.get().clamp(0.0, 1.0);
        let now = monotonic_ns();
        let start = thread_cpu_ns();
        let used = others_ns(&mut others) + start.saturating_sub(last_own);
        owed += d * now.saturating_sub(last_wall) as f64 - used as f64;
        owed = owed.clamp(-2.0 * period as f64, 2.0 * period as f64);
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
            // Absolute deadlines (a late wake-up does not stretch the next
            // slice); a spinning wait would add CPU time the knob does not ask for.
            let slice = MIN_SLICE_NS + next_random(&mut rng) % (MAX_SLICE_NS - MIN_SLICE_NS);
            deadline = (deadline + slice).max(monotonic_ns());
            if !wait_until(deadline, &ctx.stop) {
                break;
            }
        }
    }
}
