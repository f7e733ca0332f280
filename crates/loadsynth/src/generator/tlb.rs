//! Data-TLB misses: reads that each land on a different page of a buffer far
//! larger than the TLB reach (4 KiB pages, or 2 MiB transparent huge pages
//! with `huge`), mixed with reads of one hot page. The knob is the share of
//! page-strided reads. (ITLB misses come from the far calls of [`super::icache`],
//! whose 1024 functions span many pages.)

use super::Context;
use crate::knob::{Carry, Knob};
use hwqos_core::mem::AnonMapping;

/// Runs until stopped over `pages` pages of `page` bytes.
pub fn run(ctx: &Context, share: &Knob, pages: usize, huge: bool) -> std::io::Result<()> {
    let page = if huge {
        2 << 20
    } else {
        super::faults::page_size()
    };
    let pages = pages.max(2);
    let map = AnonMapping::map(pages * page)?;
    map.advise(
        0,
        map.len(),
        if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        },
    );
    for p in 0..pages {
        // SAFETY: inside the mapping; populate every page once.
        unsafe { std::ptr::write_volatile(map.as_ptr().add(p * page), 1u8) };
    }
    let mut next = 1usize;
    let mut sink = 0u64;
    let mut carry = Carry::default();
    while !ctx.stop.is_stopped() {
        let s = share.get().clamp(0.0, 1.0);
        for i in 0..100_000usize {
            let offset = if carry.take(s) > 0 {
                next = if next + 1 == pages { 1 } else { next + 1 };
                // A different line of each page, so the data caches see spread too.
                next * page + (next * 64) % page
            } else {
                (i * 64) % page
            };
            // SAFETY: offset < pages * page.
            sink = sink
                .wrapping_add(unsafe { std::ptr::read_volatile(map.as_ptr().add(offset)) } as u64);
        }
        ctx.done.add(100_000);
    }
    std::hint::black_box(sink);
    Ok(())
}
