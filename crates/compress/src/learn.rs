//! Per-stream learning (thesis 7.2.2–7.2.3, 7.3.2): moving averages of each
//! codec's compression cost, decompression cost and ratio, of the network's
//! round-trip time and per-byte link cost, and the predicted transmission
//! time of eq. 7.6, t = t_c + t_s + RTT/2 + t_d.
//!
//! Observations are gathered per round and folded in at the round boundary
//! with an exponentially weighted moving average whose weight is 1/n for the
//! first rounds (a cumulative average until the EWMA weight takes over), so
//! early rounds are not biased towards an arbitrary initial value.

use crate::codec::CodecId;
use crate::transport::BulkEstimate;
use crate::wire::HEADER_LEN;
use std::collections::BTreeMap;

/// An exponentially weighted moving average that starts as a cumulative average.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ewma {
    alpha: f64,
    value: f64,
    count: u64,
}

impl Ewma {
    /// An empty average whose weight of a new value is at least `alpha`
    /// (clamped to [1e-6, 1]); 1/n while that is larger.
    pub fn new(alpha: f64) -> Self {
        Ewma {
            alpha: alpha.clamp(1e-6, 1.0),
            value: 0.0,
            count: 0,
        }
    }

    /// Folds in one value; non-finite values are ignored.
    pub fn update(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        self.count += 1;
        let w = (1.0 / self.count as f64).max(self.alpha);
        self.value += w * (x - self.value);
    }

    /// Forgets history: the next update sets the value.
    pub fn reset(&mut self) {
        self.count = 0;
    }

    /// The average; `None` before the first value (or since a reset).
    pub fn get(&self) -> Option<f64> {
        (self.count > 0).then_some(self.value)
    }

    /// Values folded in since creation or the last reset.
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// Sums over one round for one codec.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoundObs {
    /// Uncompressed bytes compressed (sent or sampled).
    pub bytes_in: u64,
    /// Their compressed size.
    pub bytes_out: u64,
    /// Time spent compressing them, in ns.
    pub compress_ns: u64,
    /// Messages compressed.
    pub compressions: u32,
    /// Bytes decompressed locally (sampling), uncompressed size.
    pub local_decompress_bytes: u64,
    /// Time the local decompressions took, in ns.
    pub local_decompress_ns: u64,
    /// Bytes the receiver decompressed (from probe replies), uncompressed size.
    pub remote_decompress_bytes: u64,
    /// Time the receiver's decompressions took, in ns.
    pub remote_decompress_ns: u64,
}

/// What is known about one codec on this stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CodecEstimate {
    /// Compressed size over uncompressed size (1/H of definition 19).
    pub ratio: Ewma,
    /// Compression time per uncompressed input byte, in ns.
    pub compress_ns_per_byte: Ewma,
    /// Decompression time per uncompressed byte measured on this end (sampling), in ns.
    pub local_decompress_ns_per_byte: Ewma,
    /// Decompression time per uncompressed byte the receiver reported, in ns.
    pub remote_decompress_ns_per_byte: Ewma,
}

impl CodecEstimate {
    fn new(alpha: f64) -> Self {
        CodecEstimate {
            ratio: Ewma::new(alpha),
            compress_ns_per_byte: Ewma::new(alpha),
            local_decompress_ns_per_byte: Ewma::new(alpha),
            remote_decompress_ns_per_byte: Ewma::new(alpha),
        }
    }

    /// Decompression cost per output byte: the receiver's own figure when it
    /// reported one, else the local measurement on sampled messages.
    pub fn decompress_ns_per_byte(&self) -> Option<f64> {
        self.remote_decompress_ns_per_byte
            .get()
            .or(self.local_decompress_ns_per_byte.get())
    }
}

/// The last few values, for a median.
///
/// The values are also kept sorted, so a quantile is a lookup: predictions
/// read the link's quantiles for every codec at every round boundary (sorting
/// a copy each time was half of `adaptive`'s cost per message on loopback).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Window {
    values: std::collections::VecDeque<f64>,
    sorted: Vec<f64>,
}

impl Window {
    const LEN: usize = 15;

    /// Adds a value, dropping the oldest once the window holds 15.
    pub fn push(&mut self, v: f64) {
        if self.values.len() == Self::LEN {
            if let Some(old) = self.values.pop_front() {
                let i = self.sorted.partition_point(|x| x.total_cmp(&old).is_lt());
                self.sorted.remove(i);
            }
        }
        self.values.push_back(v);
        let i = self.sorted.partition_point(|x| x.total_cmp(&v).is_lt());
        self.sorted.insert(i, v);
    }

    /// The median (nearest rank); `None` when empty.
    pub fn median(&self) -> Option<f64> {
        self.quantile(0.5)
    }

    /// The value at quantile `q` in [0, 1] (nearest rank).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        nearest_rank(&self.sorted, q)
    }

    /// Like [`Window::quantile`], leaving out the last `n` values.
    pub fn quantile_before_last(&self, q: f64, n: usize) -> Option<f64> {
        if n == 0 {
            return self.quantile(q);
        }
        let keep = self.values.len().saturating_sub(n);
        let mut v: Vec<f64> = self.values.iter().take(keep).copied().collect();
        v.sort_by(f64::total_cmp);
        nearest_rank(&v, q)
    }

    /// How many values the window holds (at most 15).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the window holds no value.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Forgets every value.
    pub fn clear(&mut self) {
        self.values.clear();
        self.sorted.clear();
    }
}

fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    sorted
        .get((last as f64 * q.clamp(0.0, 1.0)).round() as usize)
        .copied()
}

/// What is known about the link.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkEstimate {
    /// Round-trip time of small probes (the thesis' moving average).
    pub rtt_ns: Ewma,
    /// The last small-probe and padded-probe RTTs, and the padding.
    pub small_rtts: Window,
    /// See `small_rtts`: the last padded-probe RTTs, in ns.
    pub padded_rtts: Window,
    /// See `small_rtts`: the padding (bytes) of the probes in `padded_rtts`.
    pub pad: u32,
    /// A configured link cost that overrides the measured one.
    pub fixed_link_ns_per_byte: Option<f64>,
    /// The estimate made with the previous padding, used until probes with
    /// the new padding have been answered.
    pub previous_link_ns_per_byte: Option<f64>,
    /// Consecutive probe RTTs far below / far above what the link gave
    /// before (see [`Learner::observe_rtt`]), of small and of padded probes.
    pub low_streak: [u32; 2],
    /// See `low_streak`: probe RTTs in a row far above.
    pub high_streak: [u32; 2],
    /// Link changes detected over the stream's life.
    pub changes: u64,
    /// What the transport reports (backlog, delivered bytes over time);
    /// empty without a transport source.
    pub bulk: BulkEstimate,
}

impl NetworkEstimate {
    /// One-way cost of one more byte: the configured value, else the
    /// difference of the lower quartiles of padded and small probe RTTs over
    /// the padding (quartiles: one RTT inflated by a busy peer must not move
    /// it, and delay only ever adds to a probe's RTT).
    pub fn link_ns_per_byte(&self) -> Option<f64> {
        if let Some(v) = self.fixed_link_ns_per_byte {
            return Some(v);
        }
        // The rate at which the peer acknowledged bytes while the sender was
        // ahead of the link is the link's, measured directly; probes on a
        // stream that had such a backlog waited behind it (their difference
        // was noise: 0, or tens of µs per byte when the queue moved between
        // a small and a padded probe).
        if self.bulk.link_ns_per_byte.is_some() {
            return self.bulk.link_ns_per_byte;
        }
        self.probed_link_ns_per_byte()
    }

    /// The link cost from the probes alone (see [`Self::link_ns_per_byte`]).
    pub fn probed_link_ns_per_byte(&self) -> Option<f64> {
        // Until three of each were answered, noise dominates (one cold first
        // RTT made a loopback look like a 10 Mbit/s link).
        if self.padded_rtts.len() < MIN_PROBES_FOR_LINK
            || self.small_rtts.len() < MIN_PROBES_FOR_LINK
        {
            return self.previous_link_ns_per_byte;
        }
        let small = self.small_rtts.quantile(LINK_QUANTILE)?;
        let padded = self.padded_rtts.quantile(LINK_QUANTILE)?;
        (self.pad > 0).then(|| ((padded - small) / f64::from(self.pad)).max(0.0))
    }

    /// The padding the next padded probes should carry, given the current
    /// one: large enough that the padding's delay stands out of the RTT
    /// jitter (2 × the interquartile range of the small probes' RTTs, at
    /// least 4 µs), small enough not to waste the link. It moves in powers
    /// of two between `min` and `max`, only by a factor of 2 or more (so it
    /// settles), and only after three padded probes with the current padding.
    ///
    /// The padding's own cost is bounded too: its link time (at the current
    /// estimate) may be at most 0.5% of the time `padded_every` messages take
    /// (RTT each), so a slow link gets a small padding.
    pub fn next_pad(&self, current: u32, min: u32, max: u32, padded_every: u32) -> u32 {
        if self.fixed_link_ns_per_byte.is_some() || self.padded_rtts.len() < 3 {
            return current;
        }
        let max = match (self.link_ns_per_byte(), self.rtt_ns.get()) {
            (Some(link), Some(rtt)) if link > 0.0 => {
                let affordable = 0.005 * f64::from(padded_every) * rtt / link;
                (affordable.min(f64::from(max)) as u32).max(min)
            }
            // No usable estimate yet (noise can make it 0): grow gradually.
            _ => max.min(current.saturating_mul(4)),
        };
        let (Some(small), Some(padded), Some(q1), Some(q3)) = (
            self.small_rtts.quantile(LINK_QUANTILE),
            self.padded_rtts.quantile(LINK_QUANTILE),
            self.small_rtts.quantile(0.25),
            self.small_rtts.quantile(0.75),
        ) else {
            return current;
        };
        let wanted_signal = (2.0 * (q3 - q1)).max(4_000.0);
        let signal = (padded - small).max(1.0);
        let factor = wanted_signal / signal;
        if (0.5..2.0).contains(&factor) && current <= max {
            return current;
        }
        let target = (f64::from(current) * factor).clamp(f64::from(min), f64::from(max));
        let pow2 = (target as u32).next_power_of_two();
        if pow2 > max { pow2 / 2 } else { pow2 }.max(min)
    }
}

/// The quantile of the small and padded probes' RTTs whose difference gives
/// the link cost: a low one, because scheduling and queueing only ever add
/// delay (the median at 1 Gbit/s came out 1.5–2.4 times the true cost).
const LINK_QUANTILE: f64 = 0.25;
/// Small and padded probe RTTs needed before the link cost is estimated.
const MIN_PROBES_FOR_LINK: usize = 3;
/// Probes in a row far faster than before that signal a faster link.
pub const LINK_CHANGE_LOW: u32 = 2;
/// Probes in a row far slower than before that signal a slower link.
pub const LINK_CHANGE_HIGH: u32 = 3;

/// Compressions of a codec within one round needed before its ratio may
/// signal a content change.
pub const MIN_MESSAGES_FOR_CHANGE: u32 = 4;

/// Per-stream estimates and predictions.
#[derive(Clone, Debug)]
pub struct Learner {
    alpha: f64,
    /// What is known of each codec observed so far.
    pub codecs: BTreeMap<CodecId, CodecEstimate>,
    /// What is known of the link.
    pub net: NetworkEstimate,
    /// Typical message size (bytes).
    pub message_size: Ewma,
    round: BTreeMap<CodecId, RoundObs>,
}

/// What [`Learner::end_round`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoundSummary {
    /// The largest relative change of a codec's ratio against its average
    /// before this round (0 when no codec was observed in both).
    pub max_ratio_change: f64,
}

impl Learner {
    /// A learner with EWMA weight `alpha`, nothing observed yet; a
    /// `fixed_link_ns_per_byte` replaces the measured link cost.
    pub fn new(alpha: f64, fixed_link_ns_per_byte: Option<f64>) -> Self {
        Learner {
            alpha,
            codecs: BTreeMap::new(),
            net: NetworkEstimate {
                rtt_ns: Ewma::new(alpha),
                small_rtts: Window::default(),
                padded_rtts: Window::default(),
                pad: 0,
                fixed_link_ns_per_byte,
                previous_link_ns_per_byte: None,
                low_streak: [0; 2],
                high_streak: [0; 2],
                changes: 0,
                bulk: BulkEstimate::default(),
            },
            message_size: Ewma::new(0.05),
            round: BTreeMap::new(),
        }
    }

    /// Records one compression (sent or sampled).
    pub fn observe_compression(
        &mut self,
        codec: CodecId,
        bytes_in: usize,
        bytes_out: usize,
        ns: u64,
    ) {
        let o = self.round.entry(codec).or_default();
        o.bytes_in += bytes_in as u64;
        o.bytes_out += bytes_out as u64;
        o.compress_ns += ns;
        o.compressions += 1;
    }

    /// Records a local decompression of a sampled message.
    pub fn observe_local_decompression(&mut self, codec: CodecId, bytes: usize, ns: u64) {
        let o = self.round.entry(codec).or_default();
        o.local_decompress_bytes += bytes as u64;
        o.local_decompress_ns += ns;
    }

    /// Records decompression work the receiver reported.
    pub fn observe_remote_decompression(&mut self, codec: CodecId, bytes: u64, ns: u64) {
        let o = self.round.entry(codec).or_default();
        o.remote_decompress_bytes += bytes;
        o.remote_decompress_ns += ns;
    }

    /// A small probe took `rtt_ns`. Returns true when this RTT, with the
    /// ones before it, says the link changed (see `Learner::link_change`);
    /// the link estimate then starts over from this RTT.
    pub fn observe_rtt(&mut self, rtt_ns: u64) -> bool {
        let changed = self.link_change(rtt_ns as f64, false);
        self.net.rtt_ns.update(rtt_ns as f64);
        self.net.small_rtts.push(rtt_ns as f64);
        changed
    }

    /// A padded probe of `pad` extra bytes took `rtt_ns`. Returns true when
    /// the link changed, like [`Learner::observe_rtt`].
    pub fn observe_padded_rtt(&mut self, rtt_ns: u64, pad: u32) -> bool {
        if pad == 0 {
            return false;
        }
        let mut changed = false;
        if pad != self.net.pad {
            if self.net.pad != 0 {
                // A zero estimate is noise, not a free link: not kept.
                self.net.previous_link_ns_per_byte =
                    self.net.probed_link_ns_per_byte().filter(|&v| v > 0.0);
            }
            self.net.padded_rtts.clear();
            self.net.pad = pad;
        } else {
            changed = self.link_change(rtt_ns as f64, true);
        }
        self.net.padded_rtts.push(rtt_ns as f64);
        changed
    }

    /// Whether a probe RTT, with the ones before it, shows a different link:
    /// [`LINK_CHANGE_LOW`] probes in a row under half the smallest RTT of
    /// their kind in the window (delay only ever adds to an RTT, so a much
    /// faster one is the link, not noise), or [`LINK_CHANGE_HIGH`] in a row
    /// over three times the median plus 200 µs (single spikes from a
    /// busy machine are common). Then the RTT and link estimates start over
    /// (the windows are emptied, the previous link estimate dropped), so
    /// predictions wait for the new link's probes instead of pricing
    /// messages with the old one. With a configured link cost, only the RTT
    /// follows.
    fn link_change(&mut self, rtt: f64, padded: bool) -> bool {
        // A pipelined stream's probes wait behind its own queue, which
        // grows and drains: their RTTs say nothing about the link.
        if self.net.bulk.is_pipelined() {
            return false;
        }
        let window = if padded {
            &self.net.padded_rtts
        } else {
            &self.net.small_rtts
        };
        // The reference leaves out the RTTs of the current streak (they are
        // in the window already).
        let kind = usize::from(padded);
        let streak = self.net.low_streak[kind].max(self.net.high_streak[kind]) as usize;
        if window.len() < MIN_PROBES_FOR_LINK + streak {
            return false;
        }
        let (Some(min), Some(median)) = (
            window.quantile_before_last(0.0, streak),
            window.quantile_before_last(0.5, streak),
        ) else {
            return false;
        };
        if rtt < 0.5 * min {
            self.net.low_streak[kind] += 1;
            self.net.high_streak = [0; 2];
        } else if rtt > 3.0 * median + 200_000.0 {
            self.net.high_streak[kind] += 1;
            self.net.low_streak = [0; 2];
        } else {
            self.net.low_streak = [0; 2];
            self.net.high_streak = [0; 2];
        }
        let low: u32 = self.net.low_streak.iter().sum();
        let high: u32 = self.net.high_streak.iter().sum();
        if low < LINK_CHANGE_LOW && high < LINK_CHANGE_HIGH {
            return false;
        }
        self.net.low_streak = [0; 2];
        self.net.high_streak = [0; 2];
        self.net.changes += 1;
        self.net.rtt_ns.reset();
        self.net.small_rtts.clear();
        self.net.padded_rtts.clear();
        self.net.previous_link_ns_per_byte = None;
        true
    }

    /// Folds the size (bytes) of a message to send into the typical message size.
    pub fn observe_message_size(&mut self, len: usize) {
        self.message_size.update(len as f64);
    }

    /// Folds the round's observations into the averages. With
    /// `reset_threshold`, a codec whose ratio moved by more than that fraction
    /// restarts its averages from this round (content changed).
    pub fn end_round(&mut self, reset_threshold: Option<f64>) -> RoundSummary {
        let mut summary = RoundSummary::default();
        let round = std::mem::take(&mut self.round);
        let mut changed = false;
        for (codec, o) in &round {
            // One or two messages of mixed traffic (a SIP request, then a
            // binary record) differ by more than any threshold: only a codec
            // seen on several messages this round can signal a change.
            if o.bytes_in == 0 || o.compressions < MIN_MESSAGES_FOR_CHANGE {
                continue;
            }
            let e = self
                .codecs
                .entry(*codec)
                .or_insert_with(|| CodecEstimate::new(self.alpha));
            let ratio = o.bytes_out as f64 / o.bytes_in as f64;
            if let Some(old) = e.ratio.get() {
                let change = (ratio - old).abs() / old.max(1e-9);
                summary.max_ratio_change = summary.max_ratio_change.max(change);
                if reset_threshold.is_some_and(|t| change > t) {
                    changed = true;
                }
            }
        }
        if changed {
            // Content changed: everything learned about the old content goes.
            for e in self.codecs.values_mut() {
                e.ratio.reset();
                e.compress_ns_per_byte.reset();
                e.local_decompress_ns_per_byte.reset();
                e.remote_decompress_ns_per_byte.reset();
            }
        }
        for (codec, o) in round {
            let e = self
                .codecs
                .entry(codec)
                .or_insert_with(|| CodecEstimate::new(self.alpha));
            if o.bytes_in > 0 {
                e.ratio.update(o.bytes_out as f64 / o.bytes_in as f64);
                e.compress_ns_per_byte
                    .update(o.compress_ns as f64 / o.bytes_in as f64);
            }
            if o.local_decompress_bytes > 0 {
                e.local_decompress_ns_per_byte
                    .update(o.local_decompress_ns as f64 / o.local_decompress_bytes as f64);
            }
            if o.remote_decompress_bytes > 0 {
                e.remote_decompress_ns_per_byte
                    .update(o.remote_decompress_ns as f64 / o.remote_decompress_bytes as f64);
            }
        }
        summary
    }

    /// Predicted transmission time (ns) of a `size`-byte message with `codec`
    /// (eq. 7.6): compression + sending the compressed bytes + RTT/2 +
    /// decompression. `None` while a needed estimate is missing.
    ///
    /// On a pipelined stream (see [`BulkEstimate::is_pipelined`]) the
    /// stages of consecutive messages overlap — the next message is
    /// compressed while this one is on the link and the previous one is
    /// decompressed — so a message costs its slowest stage, not their sum:
    /// max(t_c, t_s, t_d) + RTT/2.
    pub fn predict(&self, codec: CodecId, size: f64) -> Option<f64> {
        let link = self.net.link_ns_per_byte()?;
        let half_rtt = self.net.rtt_ns.get().unwrap_or(0.0) / 2.0;
        if codec == CodecId::NONE {
            return Some((size + HEADER_LEN as f64) * link + half_rtt);
        }
        let e = self.codecs.get(&codec)?;
        let ratio = e.ratio.get()?;
        let tc = e.compress_ns_per_byte.get()? * size;
        let td = e.decompress_ns_per_byte()? * size;
        let ts = (size * ratio.min(1.0) + HEADER_LEN as f64) * link;
        if self.pipelined() {
            return Some(tc.max(ts).max(td) + half_rtt);
        }
        Some(tc + ts + half_rtt + td)
    }

    /// Whether predictions use the pipelined (slowest-stage) form.
    pub fn pipelined(&self) -> bool {
        self.net.bulk.is_pipelined()
    }

    /// The CPU cost per byte that decides whether `codec` can beat a
    /// per-message cost at all (the viability test of `adaptive`):
    /// compression + decompression, or on a pipelined stream the larger of
    /// the two (they run on different ends at the same time).
    pub fn cpu_ns_per_byte(&self, compress: f64, decompress: f64) -> f64 {
        if self.pipelined() {
            compress.max(decompress)
        } else {
            compress + decompress
        }
    }

    /// The codec of `candidates` with the lowest prediction, and that prediction.
    pub fn best(&self, candidates: &[CodecId], size: f64) -> Option<(CodecId, f64)> {
        candidates
            .iter()
            .filter_map(|&c| self.predict(c, size).map(|t| (c, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }
}

#[cfg(test)]
mod tests {
    use super::Window;
    use proptest::prelude::*;

    proptest! {
        /// The kept-sorted quantiles equal those of a freshly sorted copy of
        /// the last 15 values, whatever was pushed (duplicates, -0.0, NaN).
        #[test]
        fn window_quantiles_match_a_sorted_copy(
            pushes in proptest::collection::vec(
                prop_oneof![any::<f64>(), (0u8..4).prop_map(f64::from)],
                0..60,
            ),
            q in 0.0f64..=1.0,
            skip in 0usize..4,
        ) {
            let mut w = Window::default();
            for (i, &v) in pushes.iter().enumerate() {
                w.push(v);
                let last: Vec<f64> = pushes[..=i].iter().rev().take(15).rev().copied().collect();
                let reference = |n: usize| {
                    let mut v = last[..last.len().saturating_sub(n)].to_vec();
                    v.sort_by(f64::total_cmp);
                    let k = ((v.len().max(1) - 1) as f64 * q).round() as usize;
                    v.get(k).map(|x| x.to_bits())
                };
                prop_assert_eq!(w.quantile(q).map(f64::to_bits), reference(0));
                prop_assert_eq!(w.quantile_before_last(q, skip).map(f64::to_bits), reference(skip));
            }
            w.clear();
            prop_assert_eq!(w.quantile(q), None);
        }
    }
}
