//! Instructions per second: the paced work loop of the rate generators (the
//! page-fault and bandwidth generators' 10 ms pacing) spinning a loop of a
//! known instruction count, so the knob (instructions per second) has unit
//! gain on the `inst_rate` metric.
//!
//! The loop is two instructions per iteration on x86-64 (`dec`, `jnz`) and
//! AArch64 (`subs`, `b.ne`), in inline assembly so the compiler cannot
//! change it; elsewhere a `black_box` loop of about [`PER_ITERATION`]
//! instructions stands in (the closed loop corrects the gain). Each slice's
//! instructions are spun in chunks, and a slice stops once this thread has
//! used `max_share` of the slice in CPU time: asking more than the CPU can
//! retire saturates the generator at the `caps.max_cpu_share` duty, as the
//! CPU generator, instead of taking the whole CPU.
//!
//! The thread registers as a sibling like every generator, so a `cpu_util`
//! target on the same CPU counts its CPU time in the total it holds (and the
//! `inst_rate` controller then sees the CPU generator's instructions too).

use super::{paced, Context, SLICE};
use crate::knob::Knob;
use hwqos_core::time::thread_cpu_ns;

/// Instructions per iteration of [`spin`] (exact on x86-64 and AArch64).
pub const PER_ITERATION: u64 = 2;

/// Iterations between two checks of the slice's CPU time and the stop flag
/// (131,072 instructions: ~0.1 ms at 1 GHz).
const CHUNK: u64 = 1 << 16;

/// Retires `PER_ITERATION × iterations` user-mode instructions (plus a few
/// to enter and leave).
#[inline(never)]
pub fn spin(iterations: u64) {
    if iterations == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a register-only countdown loop: no memory, no stack; flags are
    // clobbered (asm! assumes so without `preserves_flags`).
    unsafe {
        core::arch::asm!(
            "2:",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) iterations => _,
            options(nomem, nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above.
    unsafe {
        core::arch::asm!(
            "2:",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            n = inout(reg) iterations => _,
            options(nomem, nostack),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let mut n = iterations;
        while n > 0 {
            n = std::hint::black_box(n) - 1;
        }
    }
}

/// Runs until stopped: `rate` instructions per second (the knob), each 10 ms
/// slice's share spun in chunks, at most `max_share` of the slice in CPU time.
pub fn run(ctx: &Context, rate: &Knob, max_share: f64) {
    let budget_ns = (max_share.clamp(0.0, 1.0) * SLICE.as_nanos() as f64) as u64;
    paced(
        &ctx.stop,
        || rate.get() / PER_ITERATION as f64,
        |iterations| {
            let start = thread_cpu_ns();
            let mut left = iterations;
            while left > 0 {
                let n = left.min(CHUNK);
                spin(n);
                ctx.done.add(n * PER_ITERATION);
                left -= n;
                if ctx.stop.is_stopped() || thread_cpu_ns().saturating_sub(start) >= budget_ns {
                    break;
                }
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knob::{StopFlag, WorkCounter};

    fn ctx() -> Context {
        Context {
            cpu: 0,
            stop: StopFlag::new(),
            done: WorkCounter::default(),
            siblings: Default::default(),
        }
    }

    #[test]
    fn the_knob_paces_the_instructions_spun() {
        let c = ctx();
        let (c2, rate) = (c.clone(), Knob::new(2e8));
        let r2 = rate.clone();
        let h = std::thread::spawn(move || run(&c2, &r2, 1.0));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let a = c.done.total();
        let t = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let per_s = (c.done.total() - a) as f64 / t.elapsed().as_secs_f64();
        c.stop.stop();
        h.join().unwrap();
        // 2e8/s = 20 % of a 1 GHz core: reachable on any test machine; the
        // pacing is by wall time, so a preempted thread catches up.
        assert!((1.5e8..=2.5e8).contains(&per_s), "{per_s}");
    }

    #[test]
    fn more_than_the_cpu_can_retire_stops_at_the_share_cap() {
        let c = ctx();
        let c2 = c.clone();
        let h = std::thread::spawn(move || {
            let cpu0 = thread_cpu_ns();
            let wall = std::time::Instant::now();
            let stopper = c2.stop.clone();
            let t = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(400));
                stopper.stop();
            });
            run(&c2, &Knob::new(1e15), 0.25);
            t.join().unwrap();
            (thread_cpu_ns() - cpu0) as f64 / wall.elapsed().as_nanos() as f64
        });
        let share = h.join().unwrap();
        // About a quarter of the wall time (a slice ends at the first chunk
        // past the budget), far from the whole CPU.
        assert!(share < 0.5, "{share}");
        assert!(c.done.total() > 0);
    }
}
