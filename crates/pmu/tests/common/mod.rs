//! Helpers shared by the integration tests that run real workloads: a
//! fresh-page workload with a known fault count, and reading a child's
//! protocol lines past libtest's own output.

#![allow(dead_code)] // each test binary uses a subset

use std::io::BufRead;

/// Touches `pages` fresh anonymous pages, one write each: exactly one minor
/// fault per page.
pub fn touch_fresh_pages(pages: usize) {
    hwqos_core::mem::touch_fresh_pages(pages).unwrap();
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
