//! Selection policies (thesis 7.2.5) and ours, `adaptive`.
//!
//! - `one:<codec>`: every message with one codec (an offline choice);
//! - `round-robin`: the compressing codecs in turn, regardless of performance;
//! - `majority`: at each round boundary the codec with the lowest predicted
//!   transmission time (eq. 7.6) gets every message but 1% per other codec
//!   (`none` included), chosen at random per message; round 0 is uniform;
//! - `adaptive`: the best codec gets *every* message. Other codecs are never
//!   sent to learn about them: instead, every `explore_every`-th message is
//!   also compressed (and decompressed locally) with one candidate codec off
//!   the send path — after the message has been written (the default,
//!   [`crate::Sampling::AfterSend`]) or on a background thread, within the
//!   CPU budget — and the candidate is only sent with once it is predicted
//!   to win. When a round's compression ratio (of a codec seen on at least
//!   four messages of the round) departs from the averages by more than
//!   `change_threshold`, the averages restart and the next round samples
//!   every message (burst), so a content change is re-evaluated within one or
//!   two rounds. Codecs predicted at more than twice the best time are sampled
//!   32 times less often, and the sampler may use at most 2% of the wall
//!   time (10% during a burst). Once the choice is confident — the chosen
//!   codec's own cost (eq. 7.6 without the RTT/2 every codec shares) beats
//!   every other codec's by `confident_margin` — the sampling interval (and,
//!   while `none` is chosen, the probe interval; see [`Selector::backoff`])
//!   doubles every round, up to 16 times. When even a codec that compressed
//!   to nothing could not beat `none`, because its compression and
//!   decompression cost per byte exceeds the link's (a fast link, where
//!   exploration is pure overhead whatever the content), the back-off starts
//!   at 16 and goes up to 1,024 times. Any doubt (a burst, a closer race, a
//!   switch) resets it to 1. A switch needs a 1% predicted gain
//!   (hysteresis). A stream has at most one sample in flight.

use crate::codec::{CodecId, Registry};
use crate::learn::Learner;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Which policy a stream uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum PolicyKind {
    /// One fixed codec, by name.
    One(String),
    /// `round-robin`: the compressing codecs in turn.
    RoundRobin,
    /// `majority`: the predicted best codec, all but 1% per other codec drawn at random.
    Majority,
    /// `adaptive`: the predicted best codec for every message, learning from
    /// samples off the send path (the default).
    Adaptive,
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyKind::One(c) => write!(f, "one:{c}"),
            PolicyKind::RoundRobin => f.write_str("round-robin"),
            PolicyKind::Majority => f.write_str("majority"),
            PolicyKind::Adaptive => f.write_str("adaptive"),
        }
    }
}

impl FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "round-robin" => Ok(PolicyKind::RoundRobin),
            "majority" => Ok(PolicyKind::Majority),
            "adaptive" => Ok(PolicyKind::Adaptive),
            _ => match s.strip_prefix("one:") {
                Some(c) if !c.is_empty() => Ok(PolicyKind::One(c.to_string())),
                _ => Err(format!(
                    "unknown policy `{s}` (expected one:<codec>, round-robin, majority or adaptive)"
                )),
            },
        }
    }
}

impl TryFrom<String> for PolicyKind {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<PolicyKind> for String {
    fn from(p: PolicyKind) -> String {
        p.to_string()
    }
}

/// Tuning of the adaptive policy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveTuning {
    /// Sample one candidate every this many messages (steady state).
    pub explore_every: u32,
    /// Relative ratio change that counts as a content change.
    pub change_threshold: f64,
    /// Required predicted gain before switching (hysteresis).
    pub switch_gain: f64,
    /// Most of a round's wall time the sampler may spend in steady state
    /// (compression and local decompression of samples).
    pub explore_share: f64,
    /// The same during a burst (after a content change, or while some codec
    /// is still unmeasured).
    pub burst_share: f64,
    /// Predicted lead over every other codec that makes the choice
    /// confident, so exploration backs off (0.25: 25% faster).
    pub confident_margin: f64,
    /// Most of what compression could save that the sampler may spend: per
    /// message sent, its credit grows by this fraction of the chosen codec's
    /// own predicted cost (eq. 7.6 without RTT/2) — no other codec can save
    /// more than that — and a sample runs only when its expected cost fits
    /// in the credit left. Where nothing can be saved (loopback), nothing
    /// is sampled.
    pub gain_share: f64,
    /// Messages per round while the policy is still learning (round 0 and
    /// bursts), so the first choice is made after a few messages rather than
    /// a whole round.
    pub learning_round: u32,
}

impl Default for AdaptiveTuning {
    fn default() -> Self {
        AdaptiveTuning {
            explore_every: 4,
            change_threshold: 0.25,
            switch_gain: 0.01,
            explore_share: 0.02,
            burst_share: 0.10,
            confident_margin: 0.25,
            gain_share: 0.25,
            learning_round: 5,
        }
    }
}

/// Small deterministic PRNG (xorshift64*) for the per-message draw.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (0 is taken as 1: xorshift has no zero state).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A uniform value in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The per-stream selector: decides the codec of each message.
#[derive(Clone, Debug)]
pub struct Selector {
    kind: PolicyKind,
    /// Negotiated codecs, `none` first.
    codecs: Vec<CodecId>,
    fixed: CodecId,
    rr_next: usize,
    /// Cumulative distribution for `majority`.
    cdf: Vec<(CodecId, f64)>,
    chosen: CodecId,
    rng: Rng,
    tuning: AdaptiveTuning,
    explore_counter: u32,
    explore_cursor: usize,
    /// Candidates, how often they are visited (1 = every cycle) and their
    /// expected sample cost (ns per byte; measured, else the codec's hint).
    explore_list: Vec<(CodecId, u32, f64)>,
    /// Each codec's [`crate::Codec::cost_hint_ns_per_byte`].
    hints: BTreeMap<CodecId, f64>,
    /// Sampling credit earned per byte sent (see [`AdaptiveTuning::gain_share`]).
    credit_ns_per_byte: f64,
    explore_visits: u64,
    burst: bool,
    /// No codec can beat `none` at the measured link cost.
    hopeless: bool,
    /// Exploration back-off factor (1 = no back-off).
    backoff: u32,
    /// The link has been measured at least once: after that, a gap in the
    /// link estimate (a link change) keeps the current choice instead of
    /// the optimistic start.
    link_known_once: bool,
}

/// Largest back-off of a confident choice: candidates are still sampled
/// every `explore_every` × 16 messages.
const MAX_BACKOFF_CONFIDENT: u32 = 16;
/// Largest back-off while no codec could beat `none` on this link.
const MAX_BACKOFF_HOPELESS: u32 = 1024;
/// Largest compression ratio (compressed/original) of a sampled codec that
/// is sent before the link is measured (see `Selector::optimistic_start`).
pub const OPTIMISTIC_RATIO: f64 = 0.5;
/// The same while the transport reports that the sender is ahead of the
/// link (see [`crate::transport`]): the link is the bottleneck, so any
/// codec much faster than a typical link that saves a fifth pays, and the
/// link's measurement follows within a few tens of milliseconds.
pub const OPTIMISTIC_RATIO_BACKLOGGED: f64 = 0.8;
/// Largest cost hint (ns per byte, see [`crate::Codec::cost_hint_ns_per_byte`])
/// of a codec sampled and sent before the link is measured: lz4, snappy,
/// zstd-1 and zstd-3 (100–300 MB/s even on a slow VM core), not the
/// entropy coders that compress at tens of MB/s.
pub const OPTIMISTIC_HINT_NS_PER_BYTE: f64 = 1.0;

impl Selector {
    /// `codecs` are the negotiated ones (must include `none`); an unknown
    /// fixed codec falls back to `none` (the caller validates names first).
    pub fn new(kind: PolicyKind, codecs: Vec<CodecId>, registry: &Registry, seed: u64) -> Self {
        let mut codecs = codecs;
        codecs.sort();
        codecs.dedup();
        let fixed = match &kind {
            PolicyKind::One(name) => registry
                .by_name(name)
                .map(|c| c.id())
                .filter(|id| codecs.contains(id))
                .unwrap_or(CodecId::NONE),
            _ => CodecId::NONE,
        };
        let mut s = Selector {
            kind,
            codecs,
            fixed,
            rr_next: 0,
            cdf: Vec::new(),
            chosen: CodecId::NONE,
            rng: Rng::new(seed),
            tuning: AdaptiveTuning::default(),
            explore_counter: 0,
            explore_cursor: 0,
            explore_list: Vec::new(),
            explore_visits: 0,
            burst: true,
            hopeless: false,
            backoff: 1,
            link_known_once: false,
            hints: BTreeMap::new(),
            credit_ns_per_byte: 0.0,
        };
        s.hints = s
            .codecs
            .iter()
            .filter_map(|&c| Some((c, registry.get(c)?.cost_hint_ns_per_byte())))
            .collect();
        s.uniform();
        // Until the link is measured only the fast codecs (cost hint at
        // most OPTIMISTIC_HINT_NS_PER_BYTE: lz4, snappy, zstd-1, zstd-3;
        // else the first compressing codec) are sampled, cheapest first; the
        // slow ones are introduced once some codec could win at all (see
        // `start_round`).
        let mut fast: Vec<CodecId> = s
            .compressing()
            .into_iter()
            .filter(|&c| s.hint(c) <= OPTIMISTIC_HINT_NS_PER_BYTE)
            .collect();
        if fast.is_empty() {
            fast = s.compressing().into_iter().take(1).collect();
        }
        fast.sort_by(|&a, &b| s.hint(a).total_cmp(&s.hint(b)));
        s.explore_list = fast.iter().map(|&c| (c, 1, s.hint(c))).collect();
        s
    }

    /// The registry's cost hint of `codec` (ns per byte; 0 when unknown).
    fn hint(&self, codec: CodecId) -> f64 {
        self.hints.get(&codec).copied().unwrap_or(0.0)
    }

    /// The same selector with the adaptive policy's parameters replaced.
    pub fn with_tuning(mut self, tuning: AdaptiveTuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// The policy.
    pub fn kind(&self) -> &PolicyKind {
        &self.kind
    }

    /// The adaptive policy's parameters (unused by the other policies).
    pub fn tuning(&self) -> AdaptiveTuning {
        self.tuning
    }

    /// The codec currently preferred (adaptive/majority), or the fixed one.
    pub fn chosen(&self) -> CodecId {
        match self.kind {
            PolicyKind::One(_) => self.fixed,
            _ => self.chosen,
        }
    }

    /// True while the adaptive policy samples every message.
    pub fn in_burst(&self) -> bool {
        self.burst
    }

    /// Sampling credit (ns) a message of `len` bytes earns (adaptive; 0 while
    /// the link is unmeasured).
    pub fn sample_credit_ns(&self, len: usize) -> f64 {
        self.credit_ns_per_byte * len as f64
    }

    /// True while the adaptive policy is still learning: its rounds are
    /// [`AdaptiveTuning::learning_round`] messages long.
    pub fn learning(&self) -> bool {
        self.kind == PolicyKind::Adaptive && self.burst
    }

    /// How many times less often than configured the adaptive policy samples
    /// and probes (1 for the other policies and whenever it is unsure).
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    fn compressing(&self) -> Vec<CodecId> {
        self.codecs
            .iter()
            .copied()
            .filter(|&c| c != CodecId::NONE)
            .collect()
    }

    fn uniform(&mut self) {
        let n = self.codecs.len() as f64;
        self.cdf = self
            .codecs
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, (i + 1) as f64 / n))
            .collect();
    }

    /// Sets the next round's distribution (round boundary). `content_changed`
    /// is the learner's verdict on the round that ended.
    pub fn start_round(&mut self, learner: &Learner, content_changed: bool) {
        let size = learner.message_size.get().unwrap_or(256.0);
        match self.kind {
            PolicyKind::Majority => {
                let Some((best, _)) = learner.best(&self.codecs, size) else {
                    self.uniform();
                    return;
                };
                self.chosen = best;
                let others = (self.codecs.len() - 1) as f64 * 0.01;
                let mut acc = 0.0;
                self.cdf = self
                    .codecs
                    .iter()
                    .map(|&c| {
                        acc += if c == best { 1.0 - others } else { 0.01 };
                        (c, acc)
                    })
                    .collect();
            }
            PolicyKind::Adaptive => {
                let best = learner.best(&self.codecs, size);
                let half_rtt = learner.net.rtt_ns.get().unwrap_or(0.0) / 2.0;
                let own = |c: CodecId| learner.predict(c, size).map(|t| (t - half_rtt).max(0.0));
                // No codec can beat `none` at all (loopback, fast LANs): set
                // below once the link is measured.
                let mut cannot_win = false;
                if let Some((best, t_best)) = best {
                    self.link_known_once = true;
                    // The hysteresis compares the codecs' own costs: RTT/2
                    // is the same for every codec, and on a bulk stream
                    // behind a standing queue (an RTT of 50 ms against 7 ms
                    // of link time per 256 KiB message) it hid zstd-3's
                    // 1.7 % gain over zstd-1 inside the 1 % margin.
                    let switch = match own(self.chosen) {
                        None => true,
                        Some(tc) => {
                            (t_best - half_rtt).max(0.0) < tc * (1.0 - self.tuning.switch_gain)
                        }
                    };
                    if switch {
                        self.chosen = best;
                    }
                    // The most any codec could save per message over the
                    // chosen one is the chosen one's own cost: a codec whose
                    // compression + decompression alone costs that much
                    // cannot win, whatever its ratio, and is not sampled.
                    let own_chosen = own(self.chosen).unwrap_or(0.0);
                    self.credit_ns_per_byte = self.tuning.gain_share * own_chosen / size.max(1.0);
                    let mut any_viable = false;
                    let mut list: Vec<(CodecId, u32, f64, bool)> = self
                        .compressing()
                        .into_iter()
                        .filter(|&c| c != self.chosen)
                        .filter_map(|c| {
                            let measured = learner.codecs.get(&c).and_then(|e| {
                                Some((e.compress_ns_per_byte.get()?, e.decompress_ns_per_byte()?))
                            });
                            // What a sample costs (both run here) …
                            let hint = self.hint(c);
                            let cost = measured.map_or(hint, |(c, d)| c + d);
                            // … and what decides whether the codec can win:
                            // on a pipelined stream only the slower of
                            // compression and decompression (the hint is a
                            // sum, so at least half of it is the slower).
                            let stage = match measured {
                                Some((c, d)) => learner.cpu_ns_per_byte(c, d),
                                None if learner.pipelined() => hint / 2.0,
                                None => hint,
                            };
                            let viable = stage * size < own_chosen;
                            any_viable |= viable;
                            // Unmeasured codecs that cannot win by their hint
                            // are skipped; measured ones stay in at the slow
                            // rate, so a content change is still noticed.
                            if measured.is_none() && !viable {
                                return None;
                            }
                            let slow = !viable
                                || learner.predict(c, size).is_some_and(|t| t > 2.0 * t_best);
                            Some((c, if slow { 32 } else { 1 }, cost, measured.is_some()))
                        })
                        .collect();
                    // Unmeasured codecs first, cheapest first, so a burst
                    // measures the cheap ones before it spends its credit on
                    // an expensive one; the cursor restarts every round.
                    list.sort_by(|a, b| a.3.cmp(&b.3).then(a.2.total_cmp(&b.2)));
                    self.explore_list = list.into_iter().map(|(c, e, k, _)| (c, e, k)).collect();
                    self.explore_cursor = 0;
                    cannot_win = self.chosen == CodecId::NONE && !any_viable;
                } else {
                    self.credit_ns_per_byte = 0.0;
                    if !self.link_known_once {
                        self.chosen = self.optimistic_start(learner);
                    }
                }
                // Known enough: every codec still worth a sample has a
                // prediction (those that cannot win are never measured).
                let all_known = best.is_some()
                    && self
                        .explore_list
                        .iter()
                        .all(|&(c, _, _)| learner.predict(c, size).is_some());
                self.burst = content_changed || (!all_known && !cannot_win);
                self.hopeless = !self.burst && cannot_win;
                // Confidence: the chosen codec's prediction beats every other
                // codec's (none included) by the margin.
                // RTT/2 is common to every codec and left out: on a long
                // link it would make every choice look like a close race.
                let margin = 1.0 + self.tuning.confident_margin;
                let confident = !self.burst
                    && own(self.chosen).is_some_and(|t_chosen| {
                        self.codecs
                            .iter()
                            .filter(|&&c| c != self.chosen)
                            .all(|&c| match own(c) {
                                Some(t) => t_chosen * margin < t,
                                // Unmeasured: confident only if it cannot win.
                                None => !self.explore_list.iter().any(|e| e.0 == c),
                            })
                    });
                // Hopelessness depends on the link and the codecs' speed, not
                // on the content, so only then may sampling all but stop;
                // otherwise a content change must still be seen within a
                // few hundred messages.
                self.backoff = if self.hopeless && self.chosen == CodecId::NONE {
                    (self.backoff * 2).clamp(16, MAX_BACKOFF_HOPELESS)
                } else if confident {
                    (self.backoff * 2).min(MAX_BACKOFF_CONFIDENT)
                } else {
                    1
                };
            }
            _ => {}
        }
    }

    /// Until the link is measured for the first time, the codec to send
    /// with meanwhile: a sampled codec whose ratio is at most
    /// [`OPTIMISTIC_RATIO`], the cheapest of them, else `none`. Sending it
    /// costs at most its measured compression and decompression time,
    /// microseconds per message; what it saves on a link not measured yet
    /// may be milliseconds (2 KiB at 10 Mbit/s is 1.6 ms), so the bet is
    /// lopsided in its favour. Incompressible content keeps `none`.
    ///
    /// While the transport reports the sender ahead of the link (a bulk
    /// stream), the link sets the pace, not this end: the sampled fast
    /// codec (hint at most [`OPTIMISTIC_HINT_NS_PER_BYTE`]) with the best
    /// ratio goes instead, as `zstd --adapt` raises its level while its
    /// output is blocked. Sixteen 256 KiB messages went with lz4 (ratio 0.5)
    /// before a 100 Mbit/s link was first measured, where zstd-1 (0.32)
    /// would have saved 0.75 MB, 60 ms of link time. Should compression
    /// fall behind the link, the backlog goes and so does this rule.
    fn optimistic_start(&self, learner: &Learner) -> CodecId {
        let backlogged = learner.net.bulk.is_backlogged();
        let limit = if backlogged {
            OPTIMISTIC_RATIO_BACKLOGGED
        } else {
            OPTIMISTIC_RATIO
        };
        let candidates = self.compressing().into_iter().filter_map(|c| {
            let e = learner.codecs.get(&c)?;
            let cost = e.compress_ns_per_byte.get()? + e.decompress_ns_per_byte()?;
            let ratio = e.ratio.get()?;
            (ratio <= limit).then_some((c, cost, ratio))
        });
        let best = if backlogged {
            candidates
                .filter(|&(c, _, _)| self.hint(c) <= OPTIMISTIC_HINT_NS_PER_BYTE)
                .min_by(|a, b| a.2.total_cmp(&b.2).then(a.1.total_cmp(&b.1)))
        } else {
            candidates.min_by(|a, b| a.1.total_cmp(&b.1))
        };
        best.map_or(CodecId::NONE, |(c, _, _)| c)
    }

    /// The codec for the next message.
    pub fn pick(&mut self) -> CodecId {
        match self.kind {
            PolicyKind::One(_) => self.fixed,
            PolicyKind::RoundRobin => {
                let c = self.compressing();
                if c.is_empty() {
                    return CodecId::NONE;
                }
                let id = c[self.rr_next % c.len()];
                self.rr_next = (self.rr_next + 1) % c.len();
                id
            }
            PolicyKind::Majority => {
                let x = self.rng.next_f64();
                self.cdf
                    .iter()
                    .find(|(_, p)| x < *p)
                    .or(self.cdf.last())
                    .map(|(c, _)| *c)
                    .unwrap_or(CodecId::NONE)
            }
            PolicyKind::Adaptive => self.chosen,
        }
    }

    /// Adaptive only: the candidate to sample off the send path with this
    /// message, if any, and its expected cost per byte (ns).
    pub fn explore(&mut self) -> Option<(CodecId, f64)> {
        if self.kind != PolicyKind::Adaptive || self.explore_list.is_empty() {
            return None;
        }
        self.explore_counter += 1;
        let every = self.tuning.explore_every.max(1) * self.backoff;
        if !self.burst && self.explore_counter < every {
            return None;
        }
        self.explore_counter = 0;
        // Visit candidates in turn; slow ones only every `every`-th cycle.
        for _ in 0..self.explore_list.len() {
            let i = self.explore_cursor % self.explore_list.len();
            self.explore_cursor += 1;
            if i == 0 {
                self.explore_visits += 1;
            }
            let (c, every, cost) = self.explore_list[i];
            if self.burst || self.explore_visits % u64::from(every) == 0 {
                return Some((c, cost));
            }
        }
        None
    }
}
