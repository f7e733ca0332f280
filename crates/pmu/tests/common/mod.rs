//! Helpers shared by the integration tests that run real workloads: a
//! fresh-page workload with a known fault count, and reading a child's
//! protocol lines past libtest's own output.

#![allow(dead_code)] // each test binary uses a subset

use std::io::BufRead;

/// Touches `pages` fresh anonymous pages, one write each: exactly one minor
/// fault per page (transparent huge pages are disabled for the region).
pub fn touch_fresh_pages(pages: usize) {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let len = pages * page;
    // SAFETY: a fresh private anonymous mapping, written within its length, unmapped below.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        // Small pages only: a transparent huge page would fault 2 MiB at once.
        libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
        let base = p as *mut u8;
        for i in 0..pages {
            std::ptr::write_volatile(base.add(i * page), 1);
        }
        libc::munmap(p, len);
    }
}

/// Reads a child's output up to the line `marker` (libtest prints its own
/// lines first); fails if the child ends before it.
pub fn expect_line(out: &mut impl BufRead, marker: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child ended before {marker}"
        );
        if line.trim() == marker {
            return;
        }
    }
}

/// libtest arguments that run exactly the test `entry` of the current test
/// binary, quietly, with its output passed through: how a test re-executes
/// itself as a child workload.
pub fn child_test_args(entry: &str) -> [&str; 5] {
    [entry, "--exact", "--nocapture", "--test-threads=1", "-q"]
}
