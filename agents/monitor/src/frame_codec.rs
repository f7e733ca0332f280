//! A compact, lossless in-memory encoding of [`Frame`]s for the monitor's database.
//!
//! A decoded frame costs about 100 bytes per sample (a timestamp, a scope, a
//! heap-allocated metric name, the value and an optional counter reading), so the
//! thesis' 30,000 frames of a 100-process target would need gigabytes. Stored
//! frames are therefore encoded against a [`Dictionary`] that interns what repeats
//! from tick to tick:
//!
//! - scopes, metric names and label strings get `u32` ids, and every
//!   `(scope, metric)` pair a *series* id;
//! - the list of `(scope, label)` pairs of a frame is interned as a whole (the set
//!   of monitored processes rarely changes), so a frame's labels cost one varint.
//!
//! The bytes of a frame are: `seq`, `time.mono_ns`, `time.wall_ns` (zigzag),
//! `interval_ns`, the label-set id + 1 (0: no labels) and the sample count, all as
//! LEB128 varints; then per sample a flags byte and
//!
//! - the series id, unless it is the previous sample's id + 1 ([`NEXT_SERIES`]);
//! - the sample time as zigzag deltas from the frame time, unless equal ([`OWN_TIME`]);
//! - the value in the smallest exact form: implied by the counter reading
//!   (`value == reading.scaled()`), a reference to one of the last 16 counter
//!   samples whose per-second rate over the frame's interval it is (the
//!   `derived.rate.*` metrics), a zigzag varint integer, the significant high bytes
//!   of the IEEE-754 bits, or all 8 bytes. The encoder only picks a form after
//!   checking it reproduces the value bit for bit, so NaN payloads, infinities and
//!   `-0.0` survive;
//! - the counter reading: `raw`, then `time_enabled` and `time_running` unless
//!   they repeat the previous reading's in this frame (counters of one perf group
//!   share them) or `time_running == time_enabled` (not multiplexed).
//!
//! Every frame decodes on its own (no state is carried between frames), so the
//! database can evict the oldest frame and decode any window lazily. Decoding
//! checks every length and id against the remaining bytes and the dictionary: bad
//! bytes give a [`DecodeError`], never a panic or an unbounded allocation.

use hwqos_core::{CounterReading, Frame, MetricName, Sample, Scope, ScopeLabel, Timestamp};
use std::collections::HashMap;
use std::sync::Arc;

const VALUE_MASK: u8 = 0b111;
/// The sample carries a counter reading.
pub const HAS_COUNTER: u8 = 1 << 3;
/// The sample's time differs from the frame's; two zigzag deltas follow.
pub const OWN_TIME: u8 = 1 << 4;
/// The series id is the previous sample's id + 1 and is not written.
pub const NEXT_SERIES: u8 = 1 << 5;
const TIMES_SHIFT: u8 = 6;

/// How a value is stored (flag bits 0–2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ValueForm {
    /// Not stored: the counter reading's scaled value.
    Scaled = 0,
    /// A zigzag varint of an integer that converts to the value exactly.
    Integer = 1,
    /// A length byte `n`, then the top `n` bytes of the bits (the rest are zero).
    Trimmed = 2,
    /// All 8 bytes of the bits, little-endian.
    Full = 3,
    /// A varint `k`: the value is the per-second rate of the `k`-th previous
    /// counter sample's value over the frame's interval (`derived.rate.*`).
    RateOf = 4,
}

impl ValueForm {
    fn from_flags(flags: u8) -> Option<ValueForm> {
        Some(match flags & VALUE_MASK {
            0 => ValueForm::Scaled,
            1 => ValueForm::Integer,
            2 => ValueForm::Trimmed,
            3 => ValueForm::Full,
            4 => ValueForm::RateOf,
            _ => return None,
        })
    }
}

/// Which counter times are written (flag bits 6–7; zero without a counter).
/// Counters of one perf group share both times, and unmultiplexed ones run for
/// as long as they are enabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Times {
    /// `time_enabled` and `time_running` follow.
    Both = 0,
    /// `time_enabled` follows; `time_running` equals it.
    RunningIsEnabled = 1,
    /// Nothing follows: `time_enabled` is the previous reading's, `time_running` equals it.
    SameEnabledRunningIsEnabled = 2,
    /// Nothing follows: both equal the previous reading's.
    SameAsPrevious = 3,
}

impl Times {
    fn from_flags(flags: u8) -> Times {
        match flags >> TIMES_SHIFT {
            0 => Times::Both,
            1 => Times::RunningIsEnabled,
            2 => Times::SameEnabledRunningIsEnabled,
            _ => Times::SameAsPrevious,
        }
    }

    fn of(c: &CounterReading, previous: Option<(u64, u64)>) -> Times {
        let same_enabled = previous.is_some_and(|(e, _)| e == c.time_enabled);
        if c.time_running == c.time_enabled {
            if same_enabled {
                Times::SameEnabledRunningIsEnabled
            } else {
                Times::RunningIsEnabled
            }
        } else if previous == Some((c.time_enabled, c.time_running)) {
            Times::SameAsPrevious
        } else {
            Times::Both
        }
    }
}

/// How many counter samples back a [`ValueForm::RateOf`] reference may reach.
const RATE_REACH: usize = 16;

/// Why bytes are not an encoded frame (for this dictionary).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes end in the middle of a field.
    #[error("encoded frame: truncated while reading {what}")]
    Truncated {
        /// The field being read.
        what: &'static str,
    },
    /// A variable-length integer has more than 64 bits.
    #[error("encoded frame: varint for {what} is longer than 64 bits")]
    VarintOverflow {
        /// The field being read.
        what: &'static str,
    },
    /// A decoded integer does not fit the field's type.
    #[error("encoded frame: {what} {value} does not fit")]
    OutOfRange {
        /// The field being read.
        what: &'static str,
        /// The value read.
        value: u64,
    },
    /// A sample's flag byte has bits the encoding does not define.
    #[error("encoded frame: sample {index} has unknown flag bits {flags:#04x}")]
    BadFlags {
        /// Position of the sample in the frame (from 0).
        index: usize,
        /// The flag byte read.
        flags: u8,
    },
    /// A sample names a (scope, metric) series id the dictionary does not hold.
    #[error("encoded frame: sample {index} refers to series {id}, but the dictionary has {known}")]
    UnknownSeries {
        /// Position of the sample in the frame (from 0).
        index: usize,
        /// The series id read.
        id: u64,
        /// Series the dictionary holds.
        known: usize,
    },
    /// The frame names a label set id the dictionary does not hold.
    #[error("encoded frame: label set {id} is not in the dictionary ({known} known)")]
    UnknownLabelSet {
        /// The label set id read.
        id: u64,
        /// Label sets the dictionary holds.
        known: usize,
    },
    /// A sample marked as scaled has no counter reading to scale.
    #[error("encoded frame: sample {index} has a scaled value but no usable counter reading")]
    NoScaledValue {
        /// Position of the sample in the frame (from 0).
        index: usize,
    },
    /// A rate refers to a counter sample before the frame's first one.
    #[error(
        "encoded frame: sample {index} is a rate of counter sample -{back}, which does not exist"
    )]
    BadRateReference {
        /// Position of the sample in the frame (from 0).
        index: usize,
        /// How many counter samples back the reference reaches.
        back: u64,
    },
    /// A sample repeats the previous counter times, but none precedes it.
    #[error("encoded frame: sample {index} repeats counter times but no reading precedes it")]
    NoPreviousEnabled {
        /// Position of the sample in the frame (from 0).
        index: usize,
    },
    /// A trimmed value claims more than 8 bytes.
    #[error("encoded frame: sample {index} has a trimmed value of {len} bytes (at most 8)")]
    BadValueLength {
        /// Position of the sample in the frame (from 0).
        index: usize,
        /// The length read.
        len: u8,
    },
    /// The dictionary itself refers to an id it does not hold.
    #[error("encoded frame: the dictionary refers to a {what} id it does not hold")]
    BrokenDictionary {
        /// The kind of id: scope, metric, label or series.
        what: &'static str,
    },
    /// Bytes follow the last sample (the count of bytes left).
    #[error("encoded frame: {0} bytes left over after the last sample")]
    TrailingBytes(usize),
}

/// Why a frame could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A table of the dictionary already holds `u32::MAX` entries.
    #[error("frame dictionary: more than {} distinct {what}", u32::MAX)]
    DictionaryFull {
        /// The kind of entry (scopes, metrics, series, labels, label sets).
        what: &'static str,
    },
}

/// Approximate bytes of hash-map and vector bookkeeping per interned entry.
const ENTRY_OVERHEAD: usize = 24;

/// The intern tables that encoded frames refer to. Ids are never reused while the
/// dictionary lives; the database replaces it as a whole (see [`Dictionary::keys`]).
#[derive(Clone, Debug, Default)]
pub struct Dictionary {
    scopes: Vec<Scope>,
    scope_ids: HashMap<Scope, u32>,
    metrics: Vec<MetricName>,
    metric_ids: HashMap<MetricName, u32>,
    series: Vec<(u32, u32)>,
    series_ids: HashMap<(u32, u32), u32>,
    labels: Vec<String>,
    label_ids: HashMap<String, u32>,
    label_sets: Vec<Arc<[(u32, u32)]>>,
    label_set_ids: HashMap<Arc<[(u32, u32)]>, u32>,
    label_set_pairs: usize,
    heap_bytes: usize,
}

fn scope_heap(scope: &Scope) -> usize {
    match scope {
        Scope::Cgroup { path } => path.len(),
        Scope::Stream { name } => name.len(),
        _ => 0,
    }
}

fn next_id(len: usize, what: &'static str) -> Result<u32, EncodeError> {
    u32::try_from(len).map_err(|_| EncodeError::DictionaryFull { what })
}

impl Dictionary {
    /// An empty dictionary.
    pub fn new() -> Dictionary {
        Dictionary::default()
    }

    /// Interned entries of every kind, counting each pair of a label set: the
    /// measure the database bounds the dictionary by.
    pub fn keys(&self) -> usize {
        self.scopes.len()
            + self.metrics.len()
            + self.series.len()
            + self.labels.len()
            + self.label_sets.len()
            + self.label_set_pairs
    }

    /// Distinct `(scope, metric)` series.
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    /// Estimated bytes the dictionary occupies (each key is held twice: in the
    /// id → key vector and as the key of the key → id map).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Dictionary>() + self.heap_bytes
    }

    /// The metric of a series.
    pub fn series_metric(&self, id: u32) -> Option<&MetricName> {
        let &(_, metric) = self.series.get(id as usize)?;
        self.metrics.get(metric as usize)
    }

    fn scope_id(&mut self, scope: &Scope) -> Result<u32, EncodeError> {
        if let Some(&id) = self.scope_ids.get(scope) {
            return Ok(id);
        }
        let id = next_id(self.scopes.len(), "scopes")?;
        self.heap_bytes += 2 * (std::mem::size_of::<Scope>() + scope_heap(scope)) + ENTRY_OVERHEAD;
        self.scopes.push(scope.clone());
        self.scope_ids.insert(scope.clone(), id);
        Ok(id)
    }

    fn metric_id(&mut self, metric: &MetricName) -> Result<u32, EncodeError> {
        if let Some(&id) = self.metric_ids.get(metric) {
            return Ok(id);
        }
        let id = next_id(self.metrics.len(), "metrics")?;
        self.heap_bytes +=
            2 * (std::mem::size_of::<MetricName>() + metric.as_str().len()) + ENTRY_OVERHEAD;
        self.metrics.push(metric.clone());
        self.metric_ids.insert(metric.clone(), id);
        Ok(id)
    }

    fn label_id(&mut self, label: &str) -> Result<u32, EncodeError> {
        if let Some(&id) = self.label_ids.get(label) {
            return Ok(id);
        }
        let id = next_id(self.labels.len(), "labels")?;
        self.heap_bytes += 2 * (std::mem::size_of::<String>() + label.len()) + ENTRY_OVERHEAD;
        self.labels.push(label.to_string());
        self.label_ids.insert(label.to_string(), id);
        Ok(id)
    }

    /// The series id of a sample, trying `guess` (the previous id + 1) before
    /// hashing: frames list their samples in the same order tick after tick.
    fn series_id(
        &mut self,
        scope: &Scope,
        metric: &MetricName,
        guess: u32,
    ) -> Result<u32, EncodeError> {
        if let Some(&(s, m)) = self.series.get(guess as usize) {
            if self.scopes[s as usize] == *scope && self.metrics[m as usize] == *metric {
                return Ok(guess);
            }
        }
        let key = (self.scope_id(scope)?, self.metric_id(metric)?);
        if let Some(&id) = self.series_ids.get(&key) {
            return Ok(id);
        }
        let id = next_id(self.series.len(), "series")?;
        self.heap_bytes += 2 * std::mem::size_of::<(u32, u32)>() + 4 + ENTRY_OVERHEAD;
        self.series.push(key);
        self.series_ids.insert(key, id);
        Ok(id)
    }

    fn label_set_id(&mut self, labels: &[ScopeLabel]) -> Result<u32, EncodeError> {
        let mut pairs = Vec::with_capacity(labels.len());
        for l in labels {
            pairs.push((self.scope_id(&l.scope)?, self.label_id(&l.name)?));
        }
        if let Some(&id) = self.label_set_ids.get(pairs.as_slice()) {
            return Ok(id);
        }
        let id = next_id(self.label_sets.len(), "label sets")?;
        let set: Arc<[(u32, u32)]> = pairs.into();
        self.heap_bytes += 16 + std::mem::size_of_val(&*set) + 2 * 16 + ENTRY_OVERHEAD;
        self.label_set_pairs += set.len();
        self.label_sets.push(set.clone());
        self.label_set_ids.insert(set, id);
        Ok(id)
    }

    fn scope(&self, id: u32) -> Result<&Scope, DecodeError> {
        self.scopes
            .get(id as usize)
            .ok_or(DecodeError::BrokenDictionary { what: "scope" })
    }

    fn metric(&self, id: u32) -> Result<&MetricName, DecodeError> {
        self.metrics
            .get(id as usize)
            .ok_or(DecodeError::BrokenDictionary { what: "metric" })
    }

    fn label(&self, id: u32) -> Result<&str, DecodeError> {
        self.labels
            .get(id as usize)
            .map(String::as_str)
            .ok_or(DecodeError::BrokenDictionary { what: "label" })
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// The integer an `f64` holds exactly (same bits back), if any.
fn exact_integer(v: f64) -> Option<i64> {
    // 2^63 itself does not fit in an i64; the range check excludes NaN and infinities.
    if !(-TWO_POW_63..TWO_POW_63).contains(&v) {
        return None;
    }
    let i = v as i64;
    ((i as f64).to_bits() == v.to_bits()).then_some(i)
}

/// Writes `value` in its smallest exact form. `rates` are the values of the
/// frame's counter samples so far divided by the interval in seconds, newest last.
fn put_value(
    out: &mut Vec<u8>,
    value: f64,
    reading: Option<&CounterReading>,
    rates: &[f64],
) -> ValueForm {
    let bits = value.to_bits();
    if reading.and_then(CounterReading::scaled).map(f64::to_bits) == Some(bits) {
        return ValueForm::Scaled;
    }
    if let Some(back) = rates
        .iter()
        .rev()
        .take(RATE_REACH)
        .position(|r| r.to_bits() == bits)
    {
        put_varint(out, back as u64 + 1);
        return ValueForm::RateOf;
    }
    let integer = exact_integer(value).map(zigzag);
    let significant = 8 - (bits.trailing_zeros() / 8) as usize;
    let trimmed_cost = 1 + significant;
    match integer {
        Some(z) if varint_len(z) <= trimmed_cost.min(8) => {
            put_varint(out, z);
            ValueForm::Integer
        }
        _ if trimmed_cost < 8 => {
            out.push(significant as u8);
            let top = bits >> (8 * (8 - significant));
            out.extend_from_slice(&top.to_le_bytes()[..significant]);
            ValueForm::Trimmed
        }
        _ => {
            out.extend_from_slice(&bits.to_le_bytes());
            ValueForm::Full
        }
    }
}

/// The seconds a frame's interval lasts, as `derived.rate.*` values divide by.
fn interval_secs(interval_ns: u64) -> f64 {
    interval_ns as f64 / 1e9
}

/// Appends the encoding of `frame` to `out`, interning new keys in `dict`.
pub fn encode(frame: &Frame, dict: &mut Dictionary, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let label_set = if frame.labels.is_empty() {
        0
    } else {
        u64::from(dict.label_set_id(&frame.labels)?) + 1
    };
    put_varint(out, frame.seq);
    put_varint(out, frame.time.mono_ns);
    put_varint(out, zigzag(frame.time.wall_ns));
    put_varint(out, frame.interval_ns);
    put_varint(out, label_set);
    put_varint(out, frame.samples.len() as u64);
    let mut previous = u32::MAX;
    let mut last_times: Option<(u64, u64)> = None;
    let secs = interval_secs(frame.interval_ns);
    let mut rates: Vec<f64> = Vec::new();
    for sample in &frame.samples {
        let id = dict.series_id(&sample.scope, &sample.metric, previous.wrapping_add(1))?;
        let flags_at = out.len();
        out.push(0);
        let mut flags = 0;
        if id == previous.wrapping_add(1) {
            flags |= NEXT_SERIES;
        } else {
            put_varint(out, u64::from(id));
        }
        previous = id;
        if sample.time != frame.time {
            flags |= OWN_TIME;
            put_varint(
                out,
                zigzag(sample.time.mono_ns.wrapping_sub(frame.time.mono_ns) as i64),
            );
            put_varint(
                out,
                zigzag(sample.time.wall_ns.wrapping_sub(frame.time.wall_ns)),
            );
        }
        flags |= put_value(out, sample.value, sample.counter.as_ref(), &rates) as u8;
        if let Some(c) = &sample.counter {
            flags |= HAS_COUNTER;
            put_varint(out, c.raw);
            let times = Times::of(c, last_times);
            match times {
                Times::Both => {
                    put_varint(out, c.time_enabled);
                    put_varint(out, c.time_running);
                }
                Times::RunningIsEnabled => put_varint(out, c.time_enabled),
                Times::SameEnabledRunningIsEnabled | Times::SameAsPrevious => {}
            }
            flags |= (times as u8) << TIMES_SHIFT;
            last_times = Some((c.time_enabled, c.time_running));
            rates.push(sample.value / secs);
        }
        out[flags_at] = flags;
    }
    Ok(())
}

/// The fixed fields of an encoded frame, read without decoding its samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The frame's sequence number (`Frame::seq`).
    pub seq: u64,
    /// When the frame was sampled (`Frame::time`).
    pub time: Timestamp,
    /// The interval the frame covers, in ns (`Frame::interval_ns`).
    pub interval_ns: u64,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn byte(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or(DecodeError::Truncated { what })?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated { what });
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte(what)?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(DecodeError::VarintOverflow { what });
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::VarintOverflow { what })
    }

    fn header(&mut self) -> Result<FrameHeader, DecodeError> {
        Ok(FrameHeader {
            seq: self.varint("seq")?,
            time: Timestamp {
                mono_ns: self.varint("time.mono_ns")?,
                wall_ns: unzigzag(self.varint("time.wall_ns")?),
            },
            interval_ns: self.varint("interval_ns")?,
        })
    }
}

/// Reads the seq, time and interval of an encoded frame.
pub fn decode_header(bytes: &[u8]) -> Result<FrameHeader, DecodeError> {
    Reader { bytes, at: 0 }.header()
}

/// One sample as stored, with its series id instead of scope and metric.
struct RawSample {
    series: u32,
    time: Timestamp,
    value: f64,
    counter: Option<CounterReading>,
}

/// Decodes the samples of `bytes`, calling `each` per sample; returns the header
/// and the label-set id + 1.
fn walk(
    bytes: &[u8],
    dict: &Dictionary,
    mut each: impl FnMut(RawSample) -> Result<(), DecodeError>,
) -> Result<(FrameHeader, u64, usize), DecodeError> {
    let mut r = Reader { bytes, at: 0 };
    let header = r.header()?;
    let label_set = r.varint("label set")?;
    if label_set > dict.label_sets.len() as u64 {
        return Err(DecodeError::UnknownLabelSet {
            id: label_set - 1,
            known: dict.label_sets.len(),
        });
    }
    let count = r.varint("sample count")?;
    // Every sample takes at least two bytes: a bound on what a corrupt count can cost.
    if count > (r.remaining() / 2) as u64 {
        return Err(DecodeError::Truncated { what: "samples" });
    }
    let count = count as usize;
    let mut previous = u32::MAX;
    let mut last_times: Option<(u64, u64)> = None;
    let secs = interval_secs(header.interval_ns);
    let mut rates: Vec<f64> = Vec::new();
    for index in 0..count {
        let flags = r.byte("sample flags")?;
        let bad_flags = DecodeError::BadFlags { index, flags };
        let form = ValueForm::from_flags(flags).ok_or(bad_flags.clone())?;
        if flags & HAS_COUNTER == 0 && flags >> TIMES_SHIFT != 0 {
            return Err(bad_flags);
        }
        let series = if flags & NEXT_SERIES != 0 {
            u64::from(previous.wrapping_add(1))
        } else {
            r.varint("series id")?
        };
        if series >= dict.series.len() as u64 {
            return Err(DecodeError::UnknownSeries {
                index,
                id: series,
                known: dict.series.len(),
            });
        }
        previous = series as u32;
        let time = if flags & OWN_TIME != 0 {
            let mono = unzigzag(r.varint("sample mono_ns delta")?);
            let wall = unzigzag(r.varint("sample wall_ns delta")?);
            Timestamp {
                mono_ns: header.time.mono_ns.wrapping_add(mono as u64),
                wall_ns: header.time.wall_ns.wrapping_add(wall),
            }
        } else {
            header.time
        };
        let stored = match form {
            ValueForm::Scaled => None,
            ValueForm::Integer => Some(unzigzag(r.varint("integer value")?) as f64),
            ValueForm::Trimmed => {
                let len = r.byte("value length")?;
                if len > 8 {
                    return Err(DecodeError::BadValueLength { index, len });
                }
                let mut buf = [0u8; 8];
                buf[..len as usize].copy_from_slice(r.take(len as usize, "value")?);
                let top = u64::from_le_bytes(buf);
                let bits = if len == 0 {
                    0
                } else {
                    top << (8 * (8 - len as u32))
                };
                Some(f64::from_bits(bits))
            }
            ValueForm::Full => {
                let mut buf = [0u8; 8];
                buf.copy_from_slice(r.take(8, "value")?);
                Some(f64::from_bits(u64::from_le_bytes(buf)))
            }
            ValueForm::RateOf => {
                let back = r.varint("rate reference")?;
                let at = (rates.len() as u64)
                    .checked_sub(back)
                    .filter(|_| back >= 1 && back <= RATE_REACH as u64)
                    .ok_or(DecodeError::BadRateReference { index, back })?;
                Some(rates[at as usize])
            }
        };
        let counter = if flags & HAS_COUNTER != 0 {
            let raw = r.varint("counter raw")?;
            let previous_times = || last_times.ok_or(DecodeError::NoPreviousEnabled { index });
            let (time_enabled, time_running) = match Times::from_flags(flags) {
                Times::Both => (
                    r.varint("counter time_enabled")?,
                    r.varint("counter time_running")?,
                ),
                Times::RunningIsEnabled => {
                    let e = r.varint("counter time_enabled")?;
                    (e, e)
                }
                Times::SameEnabledRunningIsEnabled => {
                    let (e, _) = previous_times()?;
                    (e, e)
                }
                Times::SameAsPrevious => previous_times()?,
            };
            last_times = Some((time_enabled, time_running));
            Some(CounterReading {
                raw,
                time_enabled,
                time_running,
            })
        } else {
            None
        };
        let value = match stored {
            Some(v) => v,
            None => counter
                .as_ref()
                .and_then(CounterReading::scaled)
                .ok_or(DecodeError::NoScaledValue { index })?,
        };
        if counter.is_some() {
            rates.push(value / secs);
        }
        each(RawSample {
            series: series as u32,
            time,
            value,
            counter,
        })?;
    }
    if r.remaining() != 0 {
        return Err(DecodeError::TrailingBytes(r.remaining()));
    }
    Ok((header, label_set, count))
}

/// Decodes a frame encoded with [`encode`] against the same dictionary.
pub fn decode(bytes: &[u8], dict: &Dictionary) -> Result<Frame, DecodeError> {
    let mut samples = Vec::new();
    let (header, label_set, _) = walk(bytes, dict, |raw| {
        let (scope, metric) = dict
            .series
            .get(raw.series as usize)
            .copied()
            .ok_or(DecodeError::BrokenDictionary { what: "series" })?;
        samples.push(Sample {
            time: raw.time,
            scope: dict.scope(scope)?.clone(),
            metric: dict.metric(metric)?.clone(),
            value: raw.value,
            counter: raw.counter,
        });
        Ok(())
    })?;
    let labels = match label_set.checked_sub(1) {
        None => Vec::new(),
        Some(id) => {
            let set = dict
                .label_sets
                .get(id as usize)
                .ok_or(DecodeError::UnknownLabelSet {
                    id,
                    known: dict.label_sets.len(),
                })?;
            set.iter()
                .map(|&(scope, label)| {
                    Ok(ScopeLabel {
                        scope: dict.scope(scope)?.clone(),
                        name: dict.label(label)?.to_string(),
                    })
                })
                .collect::<Result<Vec<_>, DecodeError>>()?
        }
    };
    Ok(Frame {
        seq: header.seq,
        time: header.time,
        interval_ns: header.interval_ns,
        samples,
        labels,
    })
}

/// Calls `each` with the series id of every sample of an encoded frame, without
/// building the samples (for collecting the metrics of many frames cheaply).
pub fn for_each_series(
    bytes: &[u8],
    dict: &Dictionary,
    mut each: impl FnMut(u32),
) -> Result<(), DecodeError> {
    walk(bytes, dict, |raw| {
        each(raw.series);
        Ok(())
    })
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (splitmix64): tests need variety, not randomness.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn value(&mut self) -> f64 {
            const SPECIAL: &[f64] = &[
                0.0,
                -0.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                f64::MIN_POSITIVE,
                f64::MAX,
                f64::MIN,
                5e-324,
                TWO_POW_63,
                -TWO_POW_63,
                1.0,
                -1.0,
                0.5,
            ];
            match self.below(6) {
                0 => SPECIAL[self.below(SPECIAL.len() as u64) as usize],
                1 => f64::from_bits(self.next()), // any bit pattern, NaN payloads included
                2 => self.below(1 << 40) as f64 - (1u64 << 39) as f64,
                3 => self.below(1000) as f64 / 8.0,
                _ => self.below(1_000_000) as f64 / 997.0,
            }
        }

        fn scope(&mut self) -> Scope {
            let n = self.below(4) as u32;
            match self.below(6) {
                0 => Scope::System,
                1 => Scope::Cpu { cpu: n },
                2 => Scope::Process { pid: 100 + n },
                3 => Scope::Thread {
                    pid: 100 + n,
                    tid: 200 + n,
                },
                4 => Scope::Cgroup {
                    path: format!("/system.slice/s{n}.service"),
                },
                _ => Scope::Stream {
                    name: format!("stream,\"{n}\""),
                },
            }
        }

        fn reading(&mut self) -> CounterReading {
            let time_enabled = match self.below(3) {
                0 => 0,
                1 => 100_000_000,
                _ => self.next() >> self.below(64),
            };
            let time_running = match self.below(3) {
                0 => time_enabled,
                1 => time_enabled / 2,
                _ => self.next(),
            };
            CounterReading {
                raw: self.next() >> self.below(64),
                time_enabled,
                time_running,
            }
        }
    }

    const METRICS: &[&str] = &[
        "hw.cycles",
        "hw.instructions",
        "sw.task_clock",
        "os.proc.rss",
        "derived.ipc",
        "app.rtt_us",
    ];

    fn frame(g: &mut Gen, seq: u64) -> Frame {
        let time = Timestamp {
            mono_ns: g.next(),
            wall_ns: g.next() as i64,
        };
        let interval_ns = match g.below(3) {
            0 => 0,
            1 => 100_000_000 + g.below(1000),
            _ => g.next() >> g.below(64),
        };
        let n = g.below(40) as usize;
        let mut counter_values: Vec<f64> = Vec::new();
        let mut previous: Option<CounterReading> = None;
        let samples = (0..n)
            .map(|_| {
                let own_time = g.below(4) == 0;
                let time = if own_time {
                    Timestamp {
                        mono_ns: g.next(),
                        wall_ns: g.next() as i64,
                    }
                } else {
                    time
                };
                let counter = (g.below(2) == 0).then(|| match previous {
                    // Members of one group share their times.
                    Some(p) if g.below(2) == 0 => CounterReading {
                        raw: g.next() >> g.below(64),
                        ..p
                    },
                    _ => g.reading(),
                });
                let rate_of = counter_values
                    .len()
                    .checked_sub(1 + g.below(20) as usize)
                    .map(|i| counter_values[i] / (interval_ns as f64 / 1e9));
                let value = match (counter.and_then(|c| c.scaled()), rate_of) {
                    (Some(v), _) if g.below(2) == 0 => v,
                    (_, Some(rate)) if g.below(2) == 0 => rate,
                    _ => g.value(),
                };
                if counter.is_some() {
                    counter_values.push(value);
                    previous = counter;
                }
                Sample {
                    time,
                    scope: g.scope(),
                    metric: MetricName::from_static(METRICS[g.below(6) as usize]),
                    value,
                    counter,
                }
            })
            .collect();
        let labels = (0..g.below(3))
            .map(|i| ScopeLabel {
                scope: g.scope(),
                name: format!("comm-{}", i + g.below(3)),
            })
            .collect();
        Frame {
            seq,
            time,
            interval_ns,
            samples,
            labels,
        }
    }

    /// Frame equality that also compares value bits (`==` says NaN != NaN).
    fn assert_identical(a: &Frame, b: &Frame) {
        assert_eq!(
            (a.seq, a.time, a.interval_ns, &a.labels),
            (b.seq, b.time, b.interval_ns, &b.labels)
        );
        assert_eq!(a.samples.len(), b.samples.len());
        for (x, y) in a.samples.iter().zip(&b.samples) {
            assert_eq!(
                (x.time, &x.scope, &x.metric, x.counter),
                (y.time, &y.scope, &y.metric, y.counter)
            );
            assert_eq!(
                x.value.to_bits(),
                y.value.to_bits(),
                "{} vs {}",
                x.value,
                y.value
            );
        }
    }

    fn roundtrip(f: &Frame, dict: &mut Dictionary) -> Vec<u8> {
        let mut bytes = Vec::new();
        encode(f, dict, &mut bytes).unwrap();
        let back = decode(&bytes, dict).unwrap();
        assert_identical(&back, f);
        assert_eq!(decode_header(&bytes).unwrap().seq, f.seq);
        bytes
    }

    #[test]
    fn generated_frames_round_trip_exactly() {
        let mut g = Gen(7);
        let mut dict = Dictionary::new();
        let mut stored = Vec::new();
        for seq in 0..3000 {
            let f = frame(&mut g, seq);
            stored.push((roundtrip(&f, &mut dict), f));
        }
        // Frames encoded early still decode after the dictionary grew.
        for (bytes, f) in &stored {
            assert_identical(&decode(bytes, &dict).unwrap(), f);
        }
        assert!(dict.keys() > 0 && dict.bytes() > std::mem::size_of::<Dictionary>());
    }

    #[test]
    fn edge_frames_round_trip() {
        let mut dict = Dictionary::new();
        roundtrip(&Frame::default(), &mut dict);
        let t = Timestamp {
            mono_ns: u64::MAX,
            wall_ns: i64::MIN,
        };
        let scope = Scope::Cpu { cpu: u32::MAX };
        let m = MetricName::from_static("hw.cycles");
        let max = CounterReading {
            raw: u64::MAX,
            time_enabled: u64::MAX,
            time_running: 0,
        };
        let f = Frame {
            seq: u64::MAX,
            time: t,
            interval_ns: u64::MAX,
            samples: vec![
                Sample {
                    time: Timestamp::default(),
                    scope: scope.clone(),
                    metric: m.clone(),
                    value: -0.0,
                    counter: Some(max),
                },
                Sample::gauge(
                    t,
                    scope.clone(),
                    m.clone(),
                    f64::from_bits(0x7ff8_dead_beef_0001),
                ),
                Sample::gauge(t, scope, m, f64::NEG_INFINITY),
            ],
            labels: vec![],
        };
        roundtrip(&f, &mut dict);
    }

    #[test]
    fn values_take_their_smallest_exact_form() {
        let size = |value: f64, counter: Option<CounterReading>| {
            let mut out = Vec::new();
            let form = put_value(&mut out, value, counter.as_ref(), &[0.25, 7.0]);
            (form, out.len())
        };
        let c = CounterReading {
            raw: 1234,
            time_enabled: 10,
            time_running: 5,
        };
        assert_eq!(size(2468.0, Some(c)), (ValueForm::Scaled, 0));
        assert_eq!(size(3.0, None), (ValueForm::Integer, 1));
        assert_eq!(size(-0.0, None), (ValueForm::Trimmed, 2));
        assert_eq!(size(0.5, None), (ValueForm::Trimmed, 3));
        assert_eq!(size(f64::INFINITY, None), (ValueForm::Trimmed, 3));
        assert_eq!(size(0.1, None), (ValueForm::Full, 8));
        assert_eq!(size(f64::NAN, None).0, ValueForm::Trimmed);
        assert_eq!(size(7.0, None), (ValueForm::RateOf, 1));
        assert_eq!(size(0.25, None), (ValueForm::RateOf, 1));
    }

    #[test]
    fn repeated_shapes_cost_a_few_bytes_per_sample() {
        let mut dict = Dictionary::new();
        let t = Timestamp {
            mono_ns: 1_000_000_000,
            wall_ns: 1_700_000_000_000_000_000,
        };
        let f = Frame {
            seq: 1,
            time: t,
            interval_ns: 100_000_000,
            samples: (0..100)
                .map(|pid| {
                    Sample::counter(
                        t,
                        Scope::Process { pid },
                        MetricName::from_static("sw.page_faults"),
                        CounterReading {
                            raw: 17,
                            time_enabled: 100_000_000,
                            time_running: 100_000_000,
                        },
                    )
                    .unwrap()
                })
                .collect(),
            labels: vec![],
        };
        roundtrip(&f, &mut dict);
        let bytes = roundtrip(&f, &mut dict);
        // flags + raw for every sample, time_enabled once, plus the header.
        assert!(bytes.len() <= 2 * 100 + 4 + 30, "{}", bytes.len());
    }

    #[test]
    fn corrupt_bytes_are_errors_not_panics() {
        let mut g = Gen(99);
        let mut dict = Dictionary::new();
        let mut frames = Vec::new();
        for seq in 0..200 {
            let mut bytes = Vec::new();
            encode(&frame(&mut g, seq), &mut dict, &mut bytes).unwrap();
            frames.push(bytes);
        }
        for bytes in &frames {
            // Every truncation fails (the sample count pins the length).
            for cut in 0..bytes.len() {
                assert!(decode(&bytes[..cut], &dict).is_err(), "cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(decode(&longer, &dict), Err(DecodeError::TrailingBytes(1)));
            // Flipped bytes decode to something or fail cleanly.
            for _ in 0..50 {
                let mut bad = bytes.clone();
                let at = g.below(bad.len() as u64) as usize;
                bad[at] ^= 1 << g.below(8);
                let _ = decode(&bad, &dict);
                let _ = for_each_series(&bad, &dict, |_| {});
            }
        }
        // Random garbage, including absurd sample counts, never allocates its claim.
        for _ in 0..2000 {
            let len = g.below(64) as usize;
            let junk: Vec<u8> = (0..len).map(|_| g.next() as u8).collect();
            let _ = decode(&junk, &dict);
        }
        let mut huge = vec![];
        for v in [1, 2, 3, 4, 0, u64::MAX] {
            put_varint(&mut huge, v);
        }
        assert_eq!(
            decode(&huge, &dict),
            Err(DecodeError::Truncated { what: "samples" })
        );
        assert!(matches!(
            decode(&[0xff; 11], &dict),
            Err(DecodeError::VarintOverflow { .. })
        ));
        // A series the dictionary does not hold.
        let empty = Dictionary::new();
        assert!(matches!(
            decode(
                frames
                    .iter()
                    .find(|b| !decode(b, &dict).unwrap().samples.is_empty())
                    .unwrap(),
                &empty
            ),
            Err(DecodeError::UnknownSeries { .. } | DecodeError::UnknownLabelSet { .. })
        ));
    }

    #[test]
    fn varints_and_zigzag_round_trip() {
        for v in [0u64, 1, 127, 128, 300, u64::MAX / 3, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            assert_eq!(Reader { bytes: &out, at: 0 }.varint("v"), Ok(v));
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(exact_integer(-0.0), None);
        assert_eq!(exact_integer(TWO_POW_63), None);
        assert_eq!(exact_integer(-TWO_POW_63), Some(i64::MIN));
        assert_eq!(exact_integer(f64::NAN), None);
    }
}
