//! Memory bandwidth: read (sum of 64-bit words), write (fill) and copy
//! (`copy_from_slice`) over a buffer twice the last-level cache (at least
//! 64 MiB), 2 MiB-aligned and advised for huge pages, so the figures are
//! main-memory bandwidth of a single thread rather than page-walk cost.

use super::memlat::Buffer;
use super::{pin, ProbeError, ProbeOptions};
use crate::Topology;
use hwqos_core::stats::{summarize, Summary};
use hwqos_core::time::monotonic_ns;
use serde::{Deserialize, Serialize};
use std::hint::black_box;

/// What the [`bandwidth`](self) probe measured, per batch (GB/s).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BandwidthResult {
    /// Size of each of the two buffers: twice the LLC, clamped to
    /// 64–512 MiB.
    pub buffer_bytes: u64,
    /// GB/s (10⁹ bytes per second) read.
    pub read_gbs: Summary,
    /// GB/s written (filled).
    pub write_gbs: Summary,
    /// Bytes copied (each read once and written once) per second, GB/s.
    pub copy_gbs: Summary,
    /// Share of the buffers backed by huge pages (the lower of the two;
    /// merged: the lowest repetition), from `/proc/self/smaps`; absent in
    /// files from before the buffers were advised for huge pages.
    #[serde(default)]
    pub huge_page_share: Option<f64>,
}

const MIN_BUFFER: u64 = 64 << 20;
const MAX_BUFFER: u64 = 512 << 20;
/// Passes per kind (read, write, copy) for each batch of `--repeats`.
const BATCHES_PER_REPEAT: usize = 3;

fn gbs(bytes: u64, ns: f64) -> f64 {
    bytes as f64 / ns.max(1.0)
}

/// Runs the bandwidth probe pinned as `options` says; `topo` gives the LLC
/// size the buffers are sized from (32 MiB assumed without it). Errors when
/// pinning or mapping the buffers fails.
pub fn run(options: &ProbeOptions, topo: Option<&Topology>) -> Result<BandwidthResult, ProbeError> {
    let (_pin, cpu) = pin(options)?;
    let llc = topo
        .and_then(|t| {
            t.data_cache_levels()
                .last()
                .and_then(|l| t.cache_of(cpu, *l))
                .and_then(|c| c.size_bytes)
        })
        .unwrap_or(32 << 20);
    let bytes = (2 * llc).clamp(MIN_BUFFER, MAX_BUFFER);
    // 2 MiB-aligned buffers advised for huge pages, like the pointer chase's:
    // with 4 KiB pages a single thread's streaming rate on this VM is limited
    // by page walks (read 19 vs 27 GB/s, copy 9 vs 14 GB/s in a C loop with
    // and without MADV_HUGEPAGE, interleaved), so the figure would be the
    // TLB's rather than the memory's.
    let mut a_buf = Buffer::new(bytes as usize)?;
    let mut b_buf = Buffer::new(bytes as usize)?;
    let words = (bytes as usize) / std::mem::size_of::<usize>();
    let a = &mut a_buf.as_mut_slice()[..words];
    a.fill(1);
    let b = &mut b_buf.as_mut_slice()[..words];
    b.fill(2);
    // One pass over 64 MiB takes about 3 ms (copy 6 ms), so batches are
    // cheap: BATCHES_PER_REPEAT per requested batch, so that every
    // interleaved repetition has enough passes (9 at the default 15 / 5
    // rounds, was 2) for its median to ignore the few passes another vCPU's
    // memory traffic slows down. (It did not make whole runs agree better:
    // on the development VM that spread is the host's, see docs/probe.md.)
    let repeats = options.share(options.repeats_total() * BATCHES_PER_REPEAT);
    let overhead = super::timing_overhead_ns();
    let time = |f: &mut dyn FnMut()| {
        let t0 = monotonic_ns();
        f();
        ((monotonic_ns() - t0) as f64 - overhead).max(1.0)
    };
    // One unmeasured pass of each kind first: the first pass over freshly
    // filled pages is slower (TLB and page-walk caches cold).
    black_box(black_box(&a).iter().fold(0usize, |s, x| s.wrapping_add(*x)));
    black_box(&mut *b).copy_from_slice(black_box(&*a));
    let read = super::unpreempted(repeats, || {
        gbs(
            bytes,
            time(&mut || {
                black_box(black_box(&a).iter().fold(0usize, |s, x| s.wrapping_add(*x)));
            }),
        )
    });
    let mut fill = 0usize;
    let write = super::unpreempted(repeats, || {
        fill += 1;
        gbs(bytes, time(&mut || black_box(&mut *a).fill(fill)))
    });
    let copy = super::unpreempted(repeats, || {
        gbs(
            bytes,
            time(&mut || black_box(&mut *b).copy_from_slice(black_box(&*a))),
        )
    });
    let huge_page_share = match (a_buf.huge_page_share(), b_buf.huge_page_share()) {
        (Some(x), Some(y)) => Some(x.min(y)),
        _ => None,
    };
    let none = || ProbeError::Other("no bandwidth samples".into());
    Ok(BandwidthResult {
        buffer_bytes: bytes,
        read_gbs: summarize(&read).ok_or_else(none)?,
        write_gbs: summarize(&write).ok_or_else(none)?,
        copy_gbs: summarize(&copy).ok_or_else(none)?,
        huge_page_share,
    })
}

/// Merges interleaved repetitions (see [`super::merge_summaries_with`]): the
/// headline rate is the highest repetition median rate.
pub fn merge(parts: Vec<BandwidthResult>) -> Option<BandwidthResult> {
    use super::merge_rate;
    Some(BandwidthResult {
        buffer_bytes: parts.first()?.buffer_bytes,
        read_gbs: merge_rate(&parts, |p| &p.read_gbs)?,
        write_gbs: merge_rate(&parts, |p| &p.write_gbs)?,
        copy_gbs: merge_rate(&parts, |p| &p.copy_gbs)?,
        huge_page_share: parts
            .iter()
            .map(|p| p.huge_page_share)
            .try_fold(f64::INFINITY, |lo, s| s.map(|s| lo.min(s))),
    })
}
