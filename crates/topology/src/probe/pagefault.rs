//! Minor page-fault cost: map anonymous memory (huge pages refused), touch one
//! byte per page, and divide the time by the pages. The number of faults is
//! cross-checked with the thread's `getrusage` minor-fault count.

use super::{pin, ProbeError, ProbeOptions};
use hwqos_core::mem::FreshPages;
use hwqos_core::stats::{summarize, Summary};
use hwqos_core::time::monotonic_ns;
use serde::{Deserialize, Serialize};

/// What the [`pagefault`](self) probe measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PageFaultResult {
    /// The base page size in bytes (`_SC_PAGESIZE`).
    pub page_size: u64,
    /// Pages touched per batch.
    pub pages: u64,
    /// ns per minor fault (first write to an anonymous page), including the
    /// zeroing of the page.
    pub fault_ns: Summary,
    /// `ru_minflt` per touched page over all batches (1 expected).
    pub faults_per_page: f64,
}

fn thread_minflt() -> i64 {
    // SAFETY: an all-zero rusage is a valid value (plain integers).
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given; RUSAGE_THREAD is valid.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    u.ru_minflt
}

/// Maps `pages` fresh pages, writes one byte to each, unmaps; returns the ns
/// the writes took and the minor faults they caused.
pub fn touch_fresh_pages(pages: usize) -> Result<(f64, i64), ProbeError> {
    let mut mapping = FreshPages::map(pages).map_err(|e| ProbeError::io("mmap", e))?;
    let f0 = thread_minflt();
    let t0 = monotonic_ns();
    mapping.touch_all();
    let t1 = monotonic_ns();
    let faults = thread_minflt() - f0;
    Ok(((t1 - t0) as f64, faults))
}

/// Runs the page-fault probe pinned as `options` says. Errors when pinning
/// or mapping fails.
pub fn run(options: &ProbeOptions) -> Result<PageFaultResult, ProbeError> {
    let (_pin, _cpu) = pin(options)?;
    let pages = options.scaled(8192) as usize;
    let repeats = options.repeats();
    let overhead = super::timing_overhead_ns();
    touch_fresh_pages(pages.min(256))?;
    let (mut faults, mut batches) = (0, 0);
    let mut error = None;
    let per_fault = super::unpreempted(repeats, || match touch_fresh_pages(pages) {
        Ok((ns, f)) => {
            faults += f;
            batches += 1;
            (ns - overhead).max(0.0) / pages as f64
        }
        Err(e) => {
            error.get_or_insert(e);
            f64::NAN
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    Ok(PageFaultResult {
        // SAFETY: sysconf has no preconditions.
        page_size: unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64,
        pages: pages as u64,
        fault_ns: summarize(&per_fault).ok_or_else(|| ProbeError::Other("no samples".into()))?,
        faults_per_page: faults as f64 / (pages * batches.max(1)) as f64,
    })
}

/// Merges interleaved repetitions (see [`super::merge_summaries`]).
pub fn merge(parts: Vec<PageFaultResult>) -> Option<PageFaultResult> {
    let first = parts.first()?;
    let batches: f64 = parts.iter().map(|p| p.fault_ns.n as f64).sum();
    let faults_per_page = parts
        .iter()
        .map(|p| p.faults_per_page * p.fault_ns.n as f64)
        .sum::<f64>()
        / batches.max(1.0);
    Some(PageFaultResult {
        page_size: first.page_size,
        pages: first.pages,
        fault_ns: super::merge_cost(&parts, |p| &p.fault_ns)?,
        faults_per_page,
    })
}
