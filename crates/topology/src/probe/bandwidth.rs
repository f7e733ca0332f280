//! Memory bandwidth: read (sum of 64-bit words), write (fill) and copy
//! (`copy_from_slice`) over a buffer twice the last-level cache (at least
//! 64 MiB), so the figures are main-memory bandwidth, single thread.

use super::{pin, ProbeError, ProbeOptions};
use crate::Topology;
use hwqos_core::stats::{summarize, Summary};
use hwqos_core::time::monotonic_ns;
use serde::{Deserialize, Serialize};
use std::hint::black_box;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BandwidthResult {
    pub buffer_bytes: u64,
    /// GB/s (10⁹ bytes per second) read.
    pub read_gbs: Summary,
    pub write_gbs: Summary,
    /// Bytes copied (each read once and written once) per second, GB/s.
    pub copy_gbs: Summary,
}

const MIN_BUFFER: u64 = 64 << 20;
const MAX_BUFFER: u64 = 512 << 20;

fn gbs(bytes: u64, ns: f64) -> f64 {
    bytes as f64 / ns.max(1.0)
}

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
    let words = (bytes / 8) as usize;
    let mut a = vec![1u64; words];
    let mut b = vec![2u64; words];
    let repeats = options.share(
        options
            .repeats_total()
            .min(if options.quick { 3 } else { 10 }),
    );
    let overhead = super::timing_overhead_ns();
    let time = |f: &mut dyn FnMut()| {
        let t0 = monotonic_ns();
        f();
        ((monotonic_ns() - t0) as f64 - overhead).max(1.0)
    };
    let read = super::unpreempted(repeats, || {
        gbs(
            bytes,
            time(&mut || {
                black_box(black_box(&a).iter().fold(0u64, |s, x| s.wrapping_add(*x)));
            }),
        )
    });
    let mut fill = 0u64;
    let write = super::unpreempted(repeats, || {
        fill += 1;
        gbs(bytes, time(&mut || black_box(&mut a).fill(fill)))
    });
    let copy = super::unpreempted(repeats, || {
        gbs(
            bytes,
            time(&mut || black_box(&mut b).copy_from_slice(black_box(&a))),
        )
    });
    let none = || ProbeError::Other("no bandwidth samples".into());
    Ok(BandwidthResult {
        buffer_bytes: bytes,
        read_gbs: summarize(&read).ok_or_else(none)?,
        write_gbs: summarize(&write).ok_or_else(none)?,
        copy_gbs: summarize(&copy).ok_or_else(none)?,
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
    })
}
