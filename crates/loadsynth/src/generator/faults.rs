//! Page faults: writes to pages that were just given back with
//! `MADV_DONTNEED`, so every write is one minor fault (the mapping of
//! [`hwqos_core::mem::AnonMapping`], small pages only).

use super::{paced, Context};
use crate::knob::Knob;
use hwqos_core::mem::AnonMapping;

/// Runs until stopped: `rate` faults per second using at most `pages` pages.
pub fn run(ctx: &Context, rate: &Knob, pages: usize) -> std::io::Result<()> {
    let page = page_size();
    let pages = pages.max(1);
    let map = AnonMapping::map(pages * page)?;
    map.advise(0, map.len(), libc::MADV_NOHUGEPAGE);
    let mut next = 0usize;
    paced(
        &ctx.stop,
        || rate.get(),
        |n| {
            let mut left = n as usize;
            while left > 0 {
                let batch = left.min(pages - next);
                for p in next..next + batch {
                    // SAFETY: p < pages: inside the mapping.
                    unsafe { std::ptr::write_volatile(map.as_ptr().add(p * page), 1u8) };
                }
                map.advise(next * page, batch * page, libc::MADV_DONTNEED);
                ctx.done.add(batch as u64);
                next = (next + batch) % pages;
                left -= batch;
            }
        },
    );
    Ok(())
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}
