//! Branch mispredictions: a loop of conditional branches where a knob share
//! depends on a pseudo-random bit (mispredicted about half the time) and the
//! rest always go the same way (always predicted).

use super::Context;
use crate::knob::{Carry, Knob};

/// Runs `n` branches with a `random` share of unpredictable ones.
pub fn branches(random: f64, n: u64, state: &mut u64) -> u64 {
    let mut carry = Carry::default();
    let mut acc = 0u64;
    for i in 0..n {
        let unpredictable = carry.take(random.clamp(0.0, 1.0)) > 0;
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let bit = if unpredictable { *state & 1 == 1 } else { true };
        if std::hint::black_box(bit) {
            acc = acc.wrapping_add(i);
        } else {
            acc ^= i.rotate_left(7);
        }
    }
    acc
}

/// Runs until stopped.
pub fn run(ctx: &Context, random: &Knob) {
    let mut state = 0x2545_F491_4F6C_DD1D ^ ctx.cpu as u64;
    let mut sink = 0u64;
    while !ctx.stop.is_stopped() {
        sink = sink.wrapping_add(branches(random.get(), 100_000, &mut state));
        ctx.done.add(100_000);
    }
    std::hint::black_box(sink);
}
