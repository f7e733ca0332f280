//! Data-cache misses at chosen levels (an improved thesis Listing 6.2).
//!
//! The generator reads from a few *conflict streams*, one per cache level k:
//! `ways + 1` lines spaced by the level's `sets × line` stride, so they all
//! fall into one set of level k (and, the stride being a multiple of every
//! shallower level's stride, into one set of every shallower level too) and
//! LRU evicts each before it is read again: every read of stream k misses
//! levels `0..=k` and hits level `k + 1`. The rest of the reads go to a few
//! hot lines, one per L1 set, that always hit. Each stream lives in its own
//! set of every level, so streams never evict each other or the hot lines.
//!
//! The knob of each level is the miss ratio asked for there;
//! [`Plan::fractions_for`] turns per-level miss ratios (misses per access *at that level*, like
//! `hw.llc.miss / hw.llc.access`) into those shares. Every block of 65536
//! reads has the asked-for mix (fractions carried between blocks), and each
//! stream's reads are one tight loop without other data accesses (no index
//! arrays, no spills), so an external cache model sees exactly that mix.
//!
//! Physically indexed caches (L2, LLC) see the set conflicts only when the
//! stride's address bits are the same in physical addresses: the mapping is
//! advised to use transparent huge pages (2 MiB), which cover the set-index
//! bits of an L2 (1 MiB, 8 ways) or one LLC slice of 32 MiB/16 ways. A hashed
//! LLC slice selection weakens the LLC stream; the closed loop corrects it.

use super::Context;
use crate::knob::Knob;
use hwqos_core::mem::AnonMapping;
use serde::{Deserialize, Serialize};

/// One cache level's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// Capacity in bytes.
    pub size_bytes: u64,
    /// Associativity (lines per set).
    pub ways: u32,
    /// Line size in bytes.
    pub line_size: u32,
}

impl Geometry {
    /// Number of sets: size / (ways × line size).
    pub fn sets(&self) -> u64 {
        self.size_bytes / (self.ways as u64 * self.line_size as u64).max(1)
    }

    /// Parses `SIZE,WAYS,LINE` (cachegrind's `--D1=` syntax).
    pub fn parse(s: &str) -> Result<Geometry, String> {
        let parts: Vec<&str> = s.split(',').collect();
        let nums: Result<Vec<u64>, _> = parts.iter().map(|p| p.trim().parse::<u64>()).collect();
        match nums.as_deref() {
            Ok([size, ways, line]) if *size > 0 && *ways > 0 && *line > 0 => Ok(Geometry {
                size_bytes: *size,
                ways: *ways as u32,
                line_size: *line as u32,
            }),
            _ => Err(format!(
                "`{s}`: expected SIZE,WAYS,LINE in bytes (e.g. 32768,8,64)"
            )),
        }
    }

    /// From a topology cache (all of size, ways and line size known).
    pub fn of(cache: &hwqos_topology::Cache) -> Option<Geometry> {
        Some(Geometry {
            size_bytes: cache.size_bytes?,
            ways: cache.ways?,
            line_size: cache.line_size?,
        })
    }
}

/// Hot lines (one per L1 set past the stream sets).
const HOT_LINES: u64 = 16;

/// The address layout for a list of data-cache levels, shallowest first.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The levels it was laid out for, shallowest first.
    pub levels: Vec<Geometry>,
    line: u64,
    /// Per stream: (offset of the first line from the mapping's start, stride, lines).
    streams: Vec<(usize, usize, usize)>,
    hot_offset: usize,
    len: usize,
}

impl Plan {
    /// Lays out streams for `levels` (1 to 4 levels, shallowest first, same
    /// line size, power-of-two set counts).
    pub fn new(levels: &[Geometry]) -> Result<Plan, String> {
        if levels.is_empty() || levels.len() > 4 {
            return Err(format!("{} cache levels: expected 1 to 4", levels.len()));
        }
        let line = levels[0].line_size as u64;
        for g in levels {
            if g.line_size as u64 != line || !g.sets().is_power_of_two() {
                return Err(format!(
                    "cache {} B/{} ways/{} B lines: needs the L1 line size and a power-of-two set count",
                    g.size_bytes, g.ways, g.line_size
                ));
            }
        }
        if levels[0].sets() < 2 + levels.len() as u64 + HOT_LINES {
            return Err("the first level has too few sets for the streams and hot lines".into());
        }
        let mut streams = Vec::new();
        let mut max_stride = 0u64;
        let mut max_ways = 0u32;
        let mut region_len = 0u64;
        for g in levels {
            max_stride = max_stride.max(g.sets() * line);
            max_ways = max_ways.max(g.ways);
            let lines = max_ways as u64 + 1;
            streams.push((max_stride, lines));
            region_len = region_len.max(lines * max_stride);
        }
        // Each stream's region is aligned to the largest stride, so its first
        // line sits in set `k + 1` of every level.
        let region = region_len.div_ceil(max_stride) * max_stride + max_stride;
        let streams: Vec<(usize, usize, usize)> = streams
            .into_iter()
            .enumerate()
            .map(|(k, (stride, lines))| {
                (
                    (k as u64 * region + (k as u64 + 1) * line) as usize,
                    stride as usize,
                    lines as usize,
                )
            })
            .collect();
        let hot_offset = (levels.len() as u64 * region + (levels.len() as u64 + 1) * line) as usize;
        let len = hot_offset + (HOT_LINES * line) as usize + max_stride as usize;
        Ok(Plan {
            levels: levels.to_vec(),
            line,
            streams,
            hot_offset,
            len,
        })
    }

    /// Bytes of address space the plan maps (only touched lines use memory).
    pub fn mapped_bytes(&self) -> usize {
        self.len
    }

    /// Bytes of memory the plan touches.
    pub fn touched_bytes(&self) -> usize {
        let lines: usize = self.streams.iter().map(|s| s.2).sum::<usize>() + HOT_LINES as usize;
        lines * 4096
    }

    /// Per-stream read shares giving miss ratio `ratios[k]` at level k (misses
    /// per access at that level). Stream k's reads miss levels 0..=k.
    pub fn fractions_for(&self, ratios: &[f64]) -> Result<Vec<f64>, String> {
        if ratios.len() != self.levels.len() {
            return Err(format!(
                "{} miss ratios for {} cache levels",
                ratios.len(),
                self.levels.len()
            ));
        }
        if let Some(r) = ratios.iter().find(|r| !(0.0..=1.0).contains(*r)) {
            return Err(format!("miss ratio {r} outside 0..=1"));
        }
        let mut reach = 1.0; // share of reads that reach level k
        let mut out = Vec::new();
        for (k, r) in ratios.iter().enumerate() {
            reach *= r; // share missing level k
            let next = ratios.get(k + 1).copied().unwrap_or(0.0);
            out.push(reach * (1.0 - next));
        }
        Ok(out)
    }

    /// The offsets [`Buffer::read`] reads, in order (for cache models in tests).
    pub fn address_sequence(&self, fractions: &[f64], reads: u64) -> Vec<usize> {
        let n = self.streams.len();
        let mut cur = vec![0usize; n];
        let mut carry = vec![crate::knob::Carry::default(); n];
        let mut hot = 0usize;
        let mut out = Vec::new();
        for _ in 0..reads.div_ceil(BLOCK) {
            let mut left = BLOCK;
            for k in (0..n).rev() {
                let count = carry[k].take(fractions[k] * BLOCK as f64).min(left);
                left -= count;
                let (start, stride, lines) = self.streams[k];
                for _ in 0..count {
                    out.push(start + cur[k]);
                    cur[k] = (cur[k] + stride) % (stride * lines);
                }
            }
            for _ in 0..left {
                out.push(self.hot_offset + hot);
                hot = (hot + self.line as usize) % (HOT_LINES as usize * self.line as usize);
            }
        }
        out
    }

    /// The per-level miss ratios that `fractions` produce (inverse of
    /// [`Plan::fractions_for`]).
    pub fn ratios_for(fractions: &[f64]) -> Vec<f64> {
        let mut out = Vec::new();
        for k in 0..fractions.len() {
            let reach: f64 = fractions[k..].iter().sum();
            let arrive: f64 = if k == 0 {
                1.0
            } else {
                fractions[k - 1..].iter().sum()
            };
            out.push(if arrive > 0.0 { reach / arrive } else { 0.0 });
        }
        out
    }
}

/// Reads per block (64 Ki: the per-block bookkeeping is < 0.1 % of the reads): each block holds the asked-for mix of stream and hot reads.
const BLOCK: u64 = 65536;

/// A mapped plan, ready to generate reads.
pub struct Buffer {
    plan: Plan,
    map: AnonMapping,
    /// Per stream: offset of the next line within its cycle.
    cur: Vec<usize>,
    carry: Vec<crate::knob::Carry>,
    hot: usize,
}

impl Buffer {
    /// Maps the plan's memory (advised to use transparent huge pages, see the
    /// module notes); fails only if the mapping does.
    pub fn new(plan: Plan) -> std::io::Result<Buffer> {
        let map = AnonMapping::map(plan.len)?;
        map.advise(0, map.len(), libc::MADV_HUGEPAGE);
        let n = plan.streams.len();
        Ok(Buffer {
            plan,
            map,
            cur: vec![0; n],
            carry: vec![crate::knob::Carry::default(); n],
            hot: 0,
        })
    }

    /// Performs about `reads` reads (whole blocks of 65536) with stream shares
    /// `fractions` (one per level; their sum is capped at 1) and returns a
    /// value derived from them. Each stream's reads within a block are one
    /// tight loop with no other memory accesses, so an external cache model
    /// sees exactly the asked-for mix.
    pub fn read(&mut self, fractions: &[f64], reads: u64) -> u64 {
        let n = self.plan.streams.len().min(fractions.len());
        let total: f64 = fractions.iter().take(n).map(|x| x.clamp(0.0, 1.0)).sum();
        let scale = if total > 1.0 { 1.0 / total } else { 1.0 };
        let base = self.map.as_ptr();
        let line = self.plan.line as usize;
        let hot_len = HOT_LINES as usize * line;
        let mut sum = 0u64;
        for _ in 0..reads.div_ceil(BLOCK) {
            let mut left = BLOCK;
            for k in (0..n).rev() {
                let count = self.carry[k]
                    .take(fractions[k].clamp(0.0, 1.0) * scale * BLOCK as f64)
                    .min(left);
                left -= count;
                let (start, stride, lines) = self.plan.streams[k];
                let wrap = stride * lines;
                let mut cur = self.cur[k];
                // SAFETY: start + cur < start + wrap lies inside the mapping (Plan::new).
                let first = unsafe { base.add(start) };
                for _ in 0..count {
                    // SAFETY: cur < wrap, so first + cur lies inside the
                    // mapping (Plan::new); volatile keeps the load.
                    let value = unsafe { std::ptr::read_volatile(first.add(cur)) };
                    sum = sum.wrapping_add(value as u64);
                    cur += stride;
                    if cur == wrap {
                        cur = 0;
                    }
                }
                self.cur[k] = cur;
            }
            let mut hot = self.hot;
            // SAFETY: hot < hot_len: inside the hot lines.
            let first = unsafe { base.add(self.plan.hot_offset) };
            for _ in 0..left {
                // SAFETY: hot < hot_len: inside the hot lines.
                let value = unsafe { std::ptr::read_volatile(first.add(hot)) };
                sum = sum.wrapping_add(value as u64);
                hot += line;
                if hot == hot_len {
                    hot = 0;
                }
            }
            self.hot = hot;
        }
        sum
    }
}

/// Runs until stopped: reads continuously with the per-level miss ratios in
/// `knobs` (one per level of `plan`, each clamped to 0..=1). A knob is the
/// ratio asked for at its level, so each has unit gain on its own metric and
/// the levels do not interact in the generator.
pub fn run(ctx: &Context, plan: Plan, knobs: &[Knob]) -> std::io::Result<()> {
    let mut buf = Buffer::new(plan.clone())?;
    let mut ratios = vec![0.0; knobs.len()];
    let mut sink = 0u64;
    while !ctx.stop.is_stopped() {
        for (r, k) in ratios.iter_mut().zip(knobs) {
            *r = k.get().clamp(0.0, 1.0);
        }
        let fractions = plan.fractions_for(&ratios).unwrap_or_default();
        sink = sink.wrapping_add(buf.read(&fractions, 100_000));
        ctx.done.add(100_000);
    }
    std::hint::black_box(sink);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_like() -> Vec<Geometry> {
        vec![
            Geometry {
                size_bytes: 32 << 10,
                ways: 8,
                line_size: 64,
            },
            Geometry {
                size_bytes: 1 << 20,
                ways: 8,
                line_size: 64,
            },
            Geometry {
                size_bytes: 32 << 20,
                ways: 16,
                line_size: 64,
            },
        ]
    }

    #[test]
    fn fractions_and_ratios_are_inverse() {
        let plan = Plan::new(&node_like()).unwrap();
        let ratios = [0.2, 0.5, 0.3];
        let f = plan.fractions_for(&ratios).unwrap();
        assert!((f.iter().sum::<f64>() - 0.2).abs() < 1e-12);
        let back = Plan::ratios_for(&f);
        for (a, b) in back.iter().zip(ratios) {
            assert!((a - b).abs() < 1e-12, "{back:?}");
        }
        assert!(plan.fractions_for(&[1.5, 0.0, 0.0]).is_err());
    }

    /// A software LRU model of each level checks the layout's promise:
    /// stream k misses levels 0..=k and hits k+1; hot lines always hit.
    #[test]
    fn streams_miss_exactly_their_levels_in_an_lru_model() {
        let levels = node_like();
        let plan = Plan::new(&levels).unwrap();
        let mut caches: Vec<Vec<Vec<u64>>> = levels
            .iter()
            .map(|g| vec![Vec::new(); g.sets() as usize])
            .collect();
        let mut misses = vec![0u64; levels.len()];
        let mut access = |addr: u64, misses: &mut Vec<u64>| {
            for (lvl, g) in levels.iter().enumerate() {
                let tag = addr / 64;
                let set = &mut caches[lvl][(tag % g.sets()) as usize];
                if let Some(i) = set.iter().position(|t| *t == tag) {
                    set.remove(i);
                    set.push(tag);
                    return;
                }
                misses[lvl] += 1;
                set.push(tag);
                if set.len() > g.ways as usize {
                    set.remove(0);
                }
            }
        };
        let f = plan.fractions_for(&[0.3, 0.6, 0.5]).unwrap();
        let mut n = 0u64;
        for off in plan.address_sequence(&f, 200 * BLOCK) {
            access(off as u64, &mut misses);
            n += 1;
        }
        let r1 = misses[0] as f64 / n as f64;
        let r2 = misses[1] as f64 / misses[0] as f64;
        let r3 = misses[2] as f64 / misses[1] as f64;
        assert!((r1 - 0.3).abs() < 0.01, "L1 {r1}");
        assert!((r2 - 0.6).abs() < 0.01, "L2 {r2}");
        assert!((r3 - 0.5).abs() < 0.01, "L3 {r3}");
    }
}
