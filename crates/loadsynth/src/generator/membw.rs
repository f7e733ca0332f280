//! Memory bandwidth: paced streaming reads and writes, one word per cache
//! line, over a buffer larger than the LLC. The knob is bytes per second
//! (counted as whole lines); the work counter holds the bytes moved.

use super::{paced, Context};
use crate::knob::Knob;
use hwqos_core::mem::AnonMapping;

/// Runs until stopped over a buffer of `bytes`, with `line`-byte lines.
pub fn run(ctx: &Context, rate: &Knob, bytes: usize, line: usize) -> std::io::Result<()> {
    let line = line.max(8);
    let bytes = (bytes / line).max(1) * line;
    let map = AnonMapping::map(bytes)?;
    let mut pos = 0usize;
    paced(
        &ctx.stop,
        || rate.get() / line as f64,
        |lines| {
            for _ in 0..lines {
                // SAFETY: pos < bytes, 8-byte aligned (line is a multiple of 8 and the mapping page-aligned).
                unsafe {
                    let p = map.as_ptr().add(pos).cast::<u64>();
                    std::ptr::write_volatile(p, std::ptr::read_volatile(p).wrapping_add(1));
                }
                pos += line;
                if pos >= bytes {
                    pos = 0;
                }
            }
            ctx.done.add(lines * line as u64);
        },
    );
    Ok(())
}
