//! Instruction-cache misses: calls through a generated jump table of 1024
//! distinct functions (about 8× a 32 KiB L1I, see `build.rs`, thesis
//! Listing 6.1). The knob is the share of far calls (a pseudo-random function
//! anywhere in the table); the other calls go to 4 near functions that stay
//! cached.

use super::Context;
use crate::knob::{Carry, Knob};

mod generated {
    #![allow(clippy::all, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/icache_gen.rs"));
}
pub use generated::ICACHE_TABLE;

/// Bytes of generated code, estimated from the table's address span.
pub fn code_span_bytes() -> usize {
    let addrs: Vec<usize> = ICACHE_TABLE.iter().map(|f| *f as usize).collect();
    let (lo, hi) = (addrs.iter().min().copied(), addrs.iter().max().copied());
    hi.unwrap_or(0) - lo.unwrap_or(0)
}

/// Performs `calls` calls with a `far` share of far calls.
pub fn calls(far: f64, calls: u64, state: &mut u64) -> u64 {
    let mut carry = Carry::default();
    let mut acc = 0u64;
    let n = ICACHE_TABLE.len() as u64;
    for i in 0..calls {
        let f = if carry.take(far.clamp(0.0, 1.0)) > 0 {
            *state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (*state >> 33) % n
        } else {
            i % 4
        };
        acc = acc.wrapping_add(ICACHE_TABLE[f as usize](acc ^ i));
    }
    acc
}

/// Runs until stopped.
pub fn run(ctx: &Context, far: &Knob) {
    let mut state = ctx.cpu as u64 + 1;
    let mut sink = 0u64;
    while !ctx.stop.is_stopped() {
        sink = sink.wrapping_add(calls(far.get(), 20_000, &mut state));
        ctx.done.add(20_000);
    }
    std::hint::black_box(sink);
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_code_spans_several_l1i() {
        assert!(
            super::code_span_bytes() > 4 * 32 * 1024,
            "{}",
            super::code_span_bytes()
        );
    }
}
