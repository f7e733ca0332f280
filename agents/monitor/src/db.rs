//! The monitor's in-memory database: a bounded ring of the most recent frames
//! (thesis 5.3: a memory-based database flushed to disk on demand).
//!
//! Frames are stored encoded with [`frame_codec`] against a dictionary of the
//! scopes, metrics and labels they use, about 5–10 bytes per sample instead of
//! about 100 for a decoded [`Frame`]: 30,000 frames of a 100-process target fit in
//! a few hundred MiB. Queries decode lazily, only the frames they return; the
//! newest frame is also kept decoded (it is the one the status and the exporter
//! read, and the same `Arc` subscribers already hold).
//!
//! The ring is bounded twice: by a number of frames (default 30,000, as in the
//! thesis) and by the bytes it holds — the encoded frames, the dictionary and the
//! newest frame — so a target that suddenly matches thousands of processes cannot
//! grow the monitor without limit. A dictionary only grows while it lives, so
//! with process churn new frames are encoded against a fresh dictionary once
//! the current one has doubled (and passed [`DICTIONARY_KEY_LIMIT`] entries),
//! and the old one goes with its last frame: at most two dictionaries, no
//! re-encoding under the lock (see [`FrameDb`]). Only when the dictionaries
//! pass half the byte bound are the frames held re-encoded against one.
//!
//! [`FrameDb::encoded_frames`] and [`FrameDb::encoded_frames_after`] share the encoded frames
//! and the dictionary (no copy, no decoding under the lock); a flush
//! (the `segments` module) decodes the frames newer than the last one it wrote,
//! one at a time, while it appends them to its files.

use crate::frame_codec::{self, DecodeError, Dictionary};
use hwqos_core::recording::CounterClass;
use hwqos_core::{Frame, MetricName, Sample, Scope, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tracing::error;
/// A file format the database can be flushed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// JSON lines: a schema header, then one frame per line.
    Jsonl,
    /// CSV: one row per scope per tick.
    Csv,
}

impl Format {
    /// The file name extension of a segment in this format, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
        }
    }
}

/// Why a flush failed.
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    /// Creating, writing, syncing or removing a file failed.
    #[error("flush to {path}: {source}")]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// `[output] formats` is empty: there is nothing to write.
    #[error("flush: no output format configured ([output] formats is empty)")]
    NoFormats,
    /// A frame from the database does not decode (a bug, not an input error).
    #[error("flush: a stored frame does not decode (a bug in the frame database): {source}")]
    Corrupt {
        /// The decoder's error.
        #[source]
        source: DecodeError,
    },
}

/// Approximate heap + inline bytes of a decoded frame (the newest frame is held
/// decoded and counted with this).
pub fn frame_bytes(frame: &Frame) -> usize {
    fn scope_heap(s: &Scope) -> usize {
        match s {
            Scope::Cgroup { path } => path.len(),
            Scope::Stream { name } => name.len(),
            _ => 0,
        }
    }
    let samples: usize = frame
        .samples
        .iter()
        .map(|s| std::mem::size_of::<Sample>() + s.metric.as_str().len() + scope_heap(&s.scope))
        .sum();
    let labels: usize = frame
        .labels
        .iter()
        .map(|l| std::mem::size_of_val(l) + l.name.len() + scope_heap(&l.scope))
        .sum();
    std::mem::size_of::<Frame>() + samples + labels
}

/// Dictionary entries (scopes, metrics, series, labels, label-set pairs) a
/// dictionary may hold before a new one is started (see [`FrameDb`]): the
/// floor of the "doubled since it started" rule, so that a node without churn
/// never switches.
pub const DICTIONARY_KEY_LIMIT: usize = 4096;

/// Bytes an encoded frame costs in the ring: its buffer and the `Arc` counts.
fn stored_bytes(encoded: &[u8]) -> usize {
    encoded.len() + 2 * std::mem::size_of::<usize>()
}

/// One dictionary and the run of consecutive frames encoded against it.
#[derive(Clone, Debug)]
struct Generation {
    dict: Arc<Dictionary>,
    /// Frames in the ring encoded against `dict` (a contiguous run).
    frames: usize,
    /// Keys right after its first frame: about the live set when it started.
    base_keys: Option<usize>,
}

impl Generation {
    fn new() -> Generation {
        Generation {
            dict: Arc::new(Dictionary::new()),
            frames: 0,
            base_keys: None,
        }
    }
}

/// The bounded ring of recent frames.
///
/// **Dictionary generations.** A dictionary only grows, so with process churn
/// (new pids, threads, cgroups) it collects the keys of processes long gone.
/// When the newest dictionary holds more than twice the keys it had after its
/// first frame (and more than the key limit), and the previous dictionary's
/// frames have all been evicted, a new, empty dictionary starts: new frames
/// are encoded against it, and the old one is dropped with its last frame. No
/// frame is re-encoded, so this costs nothing under the lock, and at most two
/// dictionaries live at once, each holding the keys of frames still in (or,
/// for the newest, recently in) the ring. Under byte pressure (dictionaries
/// over half the byte bound) everything is re-encoded against one fresh
/// dictionary, as a last resort.
#[derive(Debug)]
pub struct FrameDb {
    frames: VecDeque<Arc<[u8]>>,
    /// Oldest first; the last one is the one new frames are encoded against.
    gens: VecDeque<Generation>,
    latest: Option<Arc<Frame>>,
    latest_bytes: usize,
    /// Sum of [`stored_bytes`] over `frames`.
    frames_bytes: usize,
    capacity: usize,
    max_bytes: usize,
    evicted: u64,
    /// Frames stored since creation (the ordinal of the next frame).
    stored: u64,
    key_limit: usize,
    /// Dictionary entries right after the last re-encoding: the next one waits
    /// until the dictionaries have doubled, so it stays amortized O(1) per frame.
    keys_after_rebuild: usize,
    rebuilds: u64,
    scratch: Vec<u8>,
}

impl FrameDb {
    /// A database holding at most `capacity` frames and about `max_bytes` bytes
    /// (at least one frame is always kept).
    pub fn new(capacity: usize, max_bytes: usize) -> FrameDb {
        FrameDb {
            frames: VecDeque::with_capacity(capacity.min(4096)),
            gens: VecDeque::from([Generation::new()]),
            latest: None,
            latest_bytes: 0,
            frames_bytes: 0,
            capacity: capacity.max(1),
            max_bytes,
            evicted: 0,
            stored: 0,
            key_limit: DICTIONARY_KEY_LIMIT,
            keys_after_rebuild: 0,
            rebuilds: 0,
            scratch: Vec::new(),
        }
    }

    /// Frames held now.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// No frame is held (none sampled yet, or cleared).
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Most frames held (`[database] frames`); the oldest are evicted first.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held: the encoded frames and the ring's slots, the dictionaries
    /// and the newest frame decoded.
    pub fn bytes(&self) -> usize {
        self.frames_bytes
            + self.frames.capacity() * std::mem::size_of::<Arc<[u8]>>()
            + self.dictionary_bytes()
            + self.latest_bytes
    }

    /// Bytes of the encoded frames alone (without dictionary and newest frame).
    pub fn encoded_bytes(&self) -> usize {
        self.frames_bytes
    }

    /// Estimated bytes of the dictionaries.
    pub fn dictionary_bytes(&self) -> usize {
        self.gens.iter().map(|g| g.dict.bytes()).sum()
    }

    /// Entries of the dictionaries.
    pub fn dictionary_keys(&self) -> usize {
        self.gens.iter().map(|g| g.dict.keys()).sum()
    }

    /// Dictionaries alive (1 or 2).
    pub fn dictionaries(&self) -> usize {
        self.gens.len()
    }

    /// Frames evicted to respect the bounds, since creation.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Frames stored since creation (evicted ones included).
    pub fn stored(&self) -> u64 {
        self.stored
    }

    /// Times a fresh dictionary was started (a new generation or a
    /// re-encoding), since creation.
    pub fn dictionary_rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Changes the dictionary size below which no new dictionary is started
    /// (default [`DICTIONARY_KEY_LIMIT`]).
    pub fn set_dictionary_limit(&mut self, keys: usize) {
        self.key_limit = keys;
        self.maybe_rebuild();
        self.evict();
    }

    /// Changes the bounds, evicting the oldest frames if needed (a reload keeps
    /// the newest frames).
    pub fn set_limits(&mut self, capacity: usize, max_bytes: usize) {
        self.capacity = capacity.max(1);
        self.max_bytes = max_bytes;
        self.evict();
        self.maybe_rebuild();
        self.evict();
    }

    fn pop_oldest(&mut self) {
        if let Some(f) = self.frames.pop_front() {
            self.frames_bytes -= stored_bytes(&f);
            self.evicted += 1;
            if let Some(g) = self.gens.front_mut() {
                g.frames = g.frames.saturating_sub(1);
            }
            self.drop_empty_generations();
        }
    }

    /// Drops old dictionaries no frame refers to any more.
    fn drop_empty_generations(&mut self) {
        while self.gens.len() > 1 && self.gens.front().is_some_and(|g| g.frames == 0) {
            self.gens.pop_front();
        }
    }

    fn evict(&mut self) {
        while self.frames.len() > self.capacity
            || (self.bytes() > self.max_bytes && self.frames.len() > 1)
        {
            self.pop_oldest();
        }
    }

    /// Starts a new dictionary when the newest one has doubled since its first
    /// frame (and passed the key limit) and no older one is left; re-encodes
    /// everything when the dictionaries pass half the byte bound.
    fn maybe_rebuild(&mut self) {
        if self.dictionary_bytes() > self.max_bytes / 2 {
            if self.dictionary_keys() > 2 * self.keys_after_rebuild {
                self.rebuild();
            }
            return;
        }
        let current = self.gens.back().expect("one generation at least");
        let keys = current.dict.keys();
        let base = current.base_keys.unwrap_or(keys);
        if self.gens.len() == 1 && current.frames > 0 && keys > self.key_limit.max(2 * base) {
            self.gens.push_back(Generation::new());
            self.rebuilds += 1;
        }
    }

    /// The dictionary frame `index` (of the ring) was encoded against.
    fn dict_of(&self, index: usize) -> &Arc<Dictionary> {
        let mut end = 0;
        for g in &self.gens {
            end += g.frames;
            if index < end {
                return &g.dict;
            }
        }
        &self.gens.back().expect("one generation at least").dict
    }

    /// Re-encodes the frames held against one fresh dictionary holding only their keys.
    fn rebuild(&mut self) {
        let old_gens = std::mem::replace(&mut self.gens, VecDeque::from([Generation::new()]));
        let frames = std::mem::take(&mut self.frames);
        self.frames_bytes = 0;
        let mut kept = 0;
        let mut encoded_frames = frames.into_iter();
        for old in &old_gens {
            for encoded in encoded_frames.by_ref().take(old.frames) {
                self.scratch.clear();
                let dict = Arc::make_mut(&mut self.gens[0].dict);
                let reencoded = match frame_codec::decode(&encoded, &old.dict) {
                    Ok(frame) => frame_codec::encode(&frame, dict, &mut self.scratch)
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                match reencoded {
                    Ok(()) => {
                        let stored: Arc<[u8]> = Arc::from(self.scratch.as_slice());
                        self.frames_bytes += stored_bytes(&stored);
                        self.frames.push_back(stored);
                        kept += 1;
                    }
                    Err(e) => {
                        error!("frame database: dropping a stored frame while rebuilding the dictionary: {e}");
                        self.evicted += 1;
                    }
                }
            }
        }
        let g = &mut self.gens[0];
        g.frames = kept;
        g.base_keys = Some(g.dict.keys());
        self.keys_after_rebuild = g.dict.keys();
        self.rebuilds += 1;
    }

    /// Appends a frame, evicting the oldest ones beyond the bounds.
    pub fn push(&mut self, frame: Arc<Frame>) {
        self.scratch.clear();
        let current = self.gens.back_mut().expect("one generation at least");
        match frame_codec::encode(&frame, Arc::make_mut(&mut current.dict), &mut self.scratch) {
            Ok(()) => {
                current.frames += 1;
                if current.base_keys.is_none() {
                    current.base_keys = Some(current.dict.keys());
                }
                let stored: Arc<[u8]> = Arc::from(self.scratch.as_slice());
                self.frames_bytes += stored_bytes(&stored);
                self.frames.push_back(stored);
                self.stored += 1;
                self.latest_bytes = frame_bytes(&frame);
                self.latest = Some(frame);
            }
            Err(e) => error!(seq = frame.seq, "frame database: frame not stored: {e}"),
        }
        // Bound by count first so a rebuild does not re-encode frames about to go.
        while self.frames.len() > self.capacity {
            self.pop_oldest();
        }
        self.maybe_rebuild();
        self.evict();
    }

    /// The newest frame.
    pub fn latest(&self) -> Option<&Arc<Frame>> {
        self.latest.as_ref().filter(|_| !self.frames.is_empty())
    }

    /// All frames, oldest first, still encoded: a cheap, consistent view to decode
    /// or flush without holding the database.
    pub fn encoded_frames(&self) -> EncodedFrames {
        EncodedFrames {
            frames: self.frames.iter().cloned().collect(),
            gens: self
                .gens
                .iter()
                .map(|g| (g.dict.clone(), g.frames))
                .collect(),
        }
    }

    /// The frames with a sequence number above `after` (all frames: `None`),
    /// oldest first, still encoded, and [`FrameDb::stored`] at that moment:
    /// what an appending flush takes, without touching the older frames.
    pub fn encoded_frames_after(&self, after: Option<u64>) -> (EncodedFrames, u64) {
        let start = match after {
            None => 0,
            Some(after) => self.frames.partition_point(|f| {
                frame_codec::decode_header(f).map_or(u64::MAX, |h| h.seq) <= after
            }),
        };
        let mut skip = start;
        let mut gens = Vec::with_capacity(self.gens.len());
        for g in &self.gens {
            let skipped = skip.min(g.frames);
            skip -= skipped;
            if g.frames > skipped {
                gens.push((g.dict.clone(), g.frames - skipped));
            }
        }
        let view = EncodedFrames {
            frames: self.frames.range(start..).cloned().collect(),
            gens,
        };
        (view, self.stored)
    }

    /// How many of the newest frames a window takes: at most `frames` of them,
    /// and only those at most `seconds` older than the newest frame.
    fn window_len(&self, seconds: Option<f64>, frames: Option<usize>) -> usize {
        let time = |encoded: &[u8]| frame_codec::decode_header(encoded).map(|h| h.time.mono_ns);
        let newest = match self.frames.back().map(|f| time(f)) {
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                error!("frame database: cannot read the newest frame: {e}");
                return 0;
            }
            None => return 0,
        };
        let horizon = seconds.map(|s| newest.saturating_sub((s.max(0.0) * 1e9) as u64));
        self.frames
            .iter()
            .rev()
            .take(frames.unwrap_or(usize::MAX))
            .take_while(|f| horizon.is_none_or(|h| time(f).is_ok_and(|t| t >= h)))
            .count()
    }

    /// The most recent frames, oldest first: at most `frames` of them, and only
    /// those at most `seconds` older than the newest frame. Decodes them all:
    /// for small windows (the exposition's); the API streams large ones with
    /// [`FrameDb::window_range`] and [`FrameDb::window_batch`].
    pub fn window(&self, seconds: Option<f64>, frames: Option<usize>) -> Vec<Arc<Frame>> {
        let chosen = self.window_len(seconds, frames);
        let first = self.frames.len() - chosen;
        let mut out = Vec::with_capacity(chosen);
        for (i, encoded) in self.frames.range(first..).enumerate() {
            if i + 1 == chosen {
                if let Some(latest) = &self.latest {
                    out.push(latest.clone());
                    continue;
                }
            }
            match frame_codec::decode(encoded, self.dict_of(first + i)) {
                Ok(f) => out.push(Arc::new(f)),
                Err(e) => error!("frame database: skipping a frame that does not decode: {e}"),
            }
        }
        out
    }

    /// The sequence numbers that bound the window [`FrameDb::window`] would
    /// return, without decoding it (`None`: the window is empty).
    pub fn window_range(&self, seconds: Option<f64>, frames: Option<usize>) -> Option<WindowRange> {
        let chosen = self.window_len(seconds, frames);
        let seq = |f: &Arc<[u8]>| frame_codec::decode_header(f).map(|h| h.seq).ok();
        let first = seq(self.frames.get(self.frames.len().checked_sub(chosen)?)?)?;
        let last = seq(self.frames.back()?)?;
        Some(WindowRange {
            first,
            last,
            frames: chosen,
        })
    }

    /// Decodes the next frames of a window, oldest first: those with a sequence
    /// number from `from` to `last`, at most `max_frames` of them and no more
    /// than about `max_bytes` decoded (at least one). Frames evicted since the
    /// window began are skipped. Returns the frames and their decoded bytes
    /// ([`frame_bytes`]); no frames: the window is done.
    pub fn window_batch(
        &self,
        from: u64,
        last: u64,
        max_frames: usize,
        max_bytes: usize,
    ) -> (Vec<Arc<Frame>>, usize) {
        let seq = |f: &Arc<[u8]>| frame_codec::decode_header(f).map_or(u64::MAX, |h| h.seq);
        let start = self.frames.partition_point(|f| seq(f) < from);
        let mut out = Vec::new();
        let mut bytes = 0;
        for (i, encoded) in self.frames.range(start..).enumerate() {
            if out.len() >= max_frames.max(1) || (bytes >= max_bytes && !out.is_empty()) {
                break;
            }
            if seq(encoded) > last {
                break;
            }
            let frame = match &self.latest {
                Some(latest) if start + i + 1 == self.frames.len() => latest.clone(),
                _ => match frame_codec::decode(encoded, self.dict_of(start + i)) {
                    Ok(f) => Arc::new(f),
                    Err(e) => {
                        error!("frame database: skipping a frame that does not decode: {e}");
                        continue;
                    }
                },
            };
            bytes += frame_bytes(&frame);
            out.push(frame);
        }
        (out, bytes)
    }
}

/// The bounds of a window: sequence numbers of its oldest and newest frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowRange {
    /// Sequence number of the oldest frame.
    pub first: u64,
    /// Sequence number of the newest frame.
    pub last: u64,
    /// Frames in the window when it was chosen.
    pub frames: usize,
}

/// The frames of a [`FrameDb`] at one moment, encoded, with the dictionaries
/// they were encoded against.
#[derive(Clone, Debug)]
pub struct EncodedFrames {
    frames: Vec<Arc<[u8]>>,
    /// Each dictionary and how many consecutive frames (oldest first) use it.
    gens: Vec<(Arc<Dictionary>, usize)>,
}

impl EncodedFrames {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// There is no frame.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Each frame with its dictionary, oldest first.
    fn encoded(&self) -> impl Iterator<Item = (&Arc<[u8]>, &Dictionary)> + '_ {
        let dicts = self
            .gens
            .iter()
            .flat_map(|(d, n)| std::iter::repeat_n(&**d, *n));
        self.frames.iter().zip(dicts)
    }

    /// The frames, oldest first, decoded one at a time.
    pub fn frames(&self) -> impl Iterator<Item = Result<Frame, DecodeError>> + '_ {
        self.encoded().map(|(f, d)| frame_codec::decode(f, d))
    }

    /// The sequence number of the oldest frame.
    pub fn first_seq(&self) -> Option<u64> {
        let oldest = self.frames.first()?;
        frame_codec::decode_header(oldest).ok().map(|h| h.seq)
    }

    /// The sequence number of the newest frame.
    pub fn last_seq(&self) -> Option<u64> {
        let newest = self.frames.last()?;
        frame_codec::decode_header(newest).ok().map(|h| h.seq)
    }

    /// The distinct metrics of all frames (read without decoding the samples).
    pub fn metrics(&self) -> Result<BTreeSet<MetricName>, DecodeError> {
        let mut out = BTreeSet::new();
        let mut frames = self.frames.iter();
        for (dict, n) in &self.gens {
            let mut series = vec![false; dict.series_count()];
            for f in frames.by_ref().take(*n) {
                frame_codec::for_each_series(f, dict, |id| {
                    if let Some(seen) = series.get_mut(id as usize) {
                        *seen = true;
                    }
                })?;
            }
            out.extend(
                series
                    .iter()
                    .enumerate()
                    .filter(|(_, seen)| **seen)
                    .filter_map(|(id, _)| dict.series_metric(id as u32).cloned()),
            );
        }
        Ok(out)
    }

    /// Which kinds of counters the frames hold, for the recording header.
    pub fn counter_class(&self) -> Result<CounterClass, DecodeError> {
        // One sample per metric is all `CounterClass::of` looks at.
        let probe = Frame {
            samples: self
                .metrics()?
                .into_iter()
                .map(|m| Sample::gauge(Timestamp::default(), Scope::System, m, 0.0))
                .collect(),
            ..Frame::default()
        };
        Ok(CounterClass::of(std::iter::once(&probe)))
    }
}

/// Whether a file name is one of the temporary files a flush (or the output
/// directory check) creates: `.hwqos-….tmp` and `.hwqos-write-check…`.
fn is_our_temp_file(name: &str) -> bool {
    name.starts_with(".hwqos-write-check")
        || (name.starts_with(".hwqos-") && name.ends_with(".tmp"))
}

/// Removes the temporary files a flush leaves behind when the monitor is
/// killed in the middle of it (`kill -9`, power loss): regular files named as
/// a flush ([`crate::MonitorHandle::flush`], [`crate::segments`]) names its
/// temporary files, directly in `dir`; symbolic links and
/// everything else are left alone. Called at start, so one output directory
/// must not be shared by two running monitors. Returns the files removed and
/// their bytes; a missing `dir` is not an error.
pub fn remove_stale_temp_files(dir: &Path) -> io::Result<(Vec<PathBuf>, u64)> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    let mut bytes = 0;
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !is_our_temp_file(&name) {
            continue;
        }
        // DirEntry::metadata does not follow symbolic links.
        let meta = entry.metadata()?;
        if !meta.file_type().is_file() {
            continue;
        }
        let path = entry.path();
        match std::fs::remove_file(&path) {
            Ok(()) => {
                bytes += meta.len();
                removed.push(path);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok((removed, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::{CounterReading, ScopeLabel};

    fn frame(seq: u64, mono_ns: u64, n: usize) -> Arc<Frame> {
        let t = Timestamp {
            mono_ns,
            wall_ns: mono_ns as i64,
        };
        Arc::new(Frame {
            seq,
            time: t,
            interval_ns: 100,
            samples: (0..n)
                .map(|i| {
                    Sample::gauge(
                        t,
                        Scope::Cpu { cpu: i as u32 },
                        MetricName::from_static("os.cpu.util"),
                        0.5,
                    )
                })
                .collect(),
            labels: vec![],
        })
    }

    /// A frame about processes `pids`, with counters, labels and odd values.
    fn process_frame(seq: u64, pids: std::ops::Range<u32>) -> Arc<Frame> {
        let t = Timestamp {
            mono_ns: seq * 100_000_000,
            wall_ns: 1_700_000_000_000_000_000 + seq as i64 * 100_000_000,
        };
        let mut samples = Vec::new();
        let mut labels = Vec::new();
        for pid in pids {
            let scope = Scope::Process { pid };
            let reading = CounterReading {
                raw: 1000 + seq * 7 + u64::from(pid),
                time_enabled: 100_000_000,
                time_running: if pid % 3 == 0 {
                    50_000_000
                } else {
                    100_000_000
                },
            };
            samples.extend(Sample::counter(
                t,
                scope.clone(),
                MetricName::from_static("sw.page_faults"),
                reading,
            ));
            samples.push(Sample::gauge(
                t,
                scope.clone(),
                MetricName::from_static("os.proc.cpu"),
                if pid % 5 == 0 {
                    f64::NAN
                } else {
                    pid as f64 / 7.0
                },
            ));
            labels.push(ScopeLabel {
                scope,
                name: format!("proc,\"{pid}\""),
            });
        }
        Arc::new(Frame {
            seq,
            time: t,
            interval_ns: 100_000_000,
            samples,
            labels,
        })
    }

    fn seqs(s: &EncodedFrames) -> Vec<u64> {
        s.frames().map(|f| f.unwrap().seq).collect()
    }

    #[test]
    fn ring_keeps_the_newest_frames() {
        let mut db = FrameDb::new(3, usize::MAX);
        assert!(db.latest().is_none() && db.window(None, None).is_empty());
        for i in 0..5 {
            db.push(frame(i, i * 10, 1));
        }
        assert_eq!(db.len(), 3);
        assert_eq!(db.evicted(), 2);
        assert_eq!(seqs(&db.encoded_frames()), vec![2, 3, 4]);
        assert_eq!(db.latest().map(|f| f.seq), Some(4));
        db.set_limits(2, usize::MAX);
        assert_eq!(seqs(&db.encoded_frames()), vec![3, 4]);
        assert_eq!(db.encoded_frames().last_seq(), Some(4));
    }

    #[test]
    fn stored_frames_decode_to_what_was_pushed() {
        let mut db = FrameDb::new(100, usize::MAX);
        let pushed: Vec<Arc<Frame>> = (0..20)
            .map(|i| process_frame(i, i as u32..i as u32 + 5))
            .collect();
        for f in &pushed {
            db.push(f.clone());
        }
        let back: Vec<Frame> = db.encoded_frames().frames().map(Result::unwrap).collect();
        assert_eq!(back.len(), 20);
        for (a, b) in back.iter().zip(&pushed) {
            // `==` is false for NaN values; compare their bits too.
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
            let bits = |f: &Frame| {
                f.samples
                    .iter()
                    .map(|s| s.value.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(a), bits(b));
        }
        // The newest frame is the very `Arc` pushed.
        assert!(Arc::ptr_eq(db.latest().unwrap(), &pushed[19]));
        assert!(Arc::ptr_eq(&db.window(None, Some(1))[0], &pushed[19]));
    }

    #[test]
    fn ring_respects_the_byte_bound() {
        let mut probe = FrameDb::new(1000, usize::MAX);
        probe.push(process_frame(0, 0..50));
        let fixed = probe.bytes() - probe.encoded_bytes();
        let one = probe.encoded_bytes();
        // Room for the dictionary, the decoded newest frame and about 4 encoded frames.
        let mut db = FrameDb::new(1000, fixed + 4 * one + one / 2);
        for i in 0..20 {
            db.push(process_frame(i, 0..50));
            assert!(db.bytes() <= fixed + 4 * one + one / 2 || db.len() == 1);
        }
        assert_eq!(db.len(), 4);
        assert_eq!(db.evicted(), 20 - db.len() as u64);
        // A single frame larger than the bound is still kept (the newest data matters).
        let mut db = FrameDb::new(1000, 1);
        db.push(frame(1, 1, 10));
        db.push(frame(2, 2, 10));
        assert_eq!(db.len(), 1);
        assert_eq!(db.latest().map(|f| f.seq), Some(2));
    }

    #[test]
    fn window_by_frames_and_seconds() {
        let mut db = FrameDb::new(100, usize::MAX);
        for i in 0..10u64 {
            db.push(frame(i, i * 100_000_000, 1)); // 10 Hz
        }
        let seqs = |v: Vec<Arc<Frame>>| v.iter().map(|f| f.seq).collect::<Vec<_>>();
        assert_eq!(seqs(db.window(None, Some(3))), vec![7, 8, 9]);
        assert_eq!(seqs(db.window(Some(0.25), None)), vec![7, 8, 9]);
        assert_eq!(seqs(db.window(Some(0.25), Some(2))), vec![8, 9]);
        assert_eq!(seqs(db.window(None, Some(0))), Vec::<u64>::new());
        assert_eq!(db.window(None, None).len(), 10);
        assert_eq!(*db.window(None, None)[4], *frame(4, 400_000_000, 1));
        assert!(FrameDb::new(5, 5).window(Some(1.0), None).is_empty());
    }

    #[test]
    fn the_dictionary_is_rebuilt_from_the_frames_held() {
        let mut db = FrameDb::new(4, usize::MAX);
        db.set_dictionary_limit(500);
        // Ten processes a frame, a new ten every frame: keys of gone processes pile up.
        for i in 0..60u64 {
            let first = i as u32 * 10;
            db.push(process_frame(i, first..first + 10));
            // 4 frames × 10 processes hold ~4 × (10 scopes + 20 series + 10 labels
            // + 1 set + 10 pairs) + 2 metrics keys.
            assert!(
                db.dictionary_keys() <= 2 * 500,
                "{} keys",
                db.dictionary_keys()
            );
        }
        assert!(
            db.dictionary_rebuilds() >= 2,
            "{}",
            db.dictionary_rebuilds()
        );
        let snapshot = db.encoded_frames();
        assert_eq!(seqs(&snapshot), vec![56, 57, 58, 59]);
        let kept: Vec<Frame> = snapshot.frames().map(Result::unwrap).collect();
        assert_eq!(
            format!("{:?}", kept[0]),
            format!("{:?}", process_frame(56, 560..570))
        );
        // An encoded view keeps its own dictionary across later rebuilds.
        for i in 60..120u64 {
            let first = i as u32 * 10;
            db.push(process_frame(i, first..first + 10));
        }
        assert_eq!(seqs(&snapshot), vec![56, 57, 58, 59]);
        assert_eq!(seqs(&db.encoded_frames()), vec![116, 117, 118, 119]);
    }

    #[test]
    fn process_churn_does_not_grow_the_dictionaries_without_bound() {
        // The default limits and a database far below its byte bound: twenty
        // processes a frame, one of them new every frame (pids, labels and
        // label sets churn). Before dictionary generations the dictionary kept
        // every key until 2^20 of them (about 100 MiB): here ~25 more a frame.
        let mut db = FrameDb::new(200, 256 << 20);
        let mut most = 0;
        for i in 0..20_000u64 {
            let first = i as u32;
            db.push(process_frame(i, first..first + 20));
            assert!(db.dictionaries() <= 2);
            most = most.max(db.dictionary_keys());
        }
        // Each live dictionary is below twice the limit or twice its start
        // (the keys of 200 frames of 20 processes are far fewer).
        assert!(
            most <= 4 * DICTIONARY_KEY_LIMIT,
            "{most} dictionary keys after churn"
        );
        assert!(
            db.dictionary_rebuilds() > 10,
            "{}",
            db.dictionary_rebuilds()
        );
        // Nothing was lost: the frames held decode to what was pushed.
        let kept: Vec<Frame> = db.encoded_frames().frames().map(Result::unwrap).collect();
        assert_eq!(kept.len(), 200);
        for (k, i) in kept.iter().zip(19_800u64..) {
            let first = i as u32;
            assert_eq!(
                format!("{k:?}"),
                format!("{:?}", process_frame(i, first..first + 20))
            );
        }
        let seqs: Vec<u64> = db.window(None, None).iter().map(|f| f.seq).collect();
        assert_eq!(seqs, (19_800..20_000).collect::<Vec<_>>());
        let (batch, _) = db.window_batch(19_850, 19_999, 1000, usize::MAX);
        assert_eq!(batch.len(), 150);
        // Debug text: `==` is false for the NaN values.
        assert_eq!(
            format!("{:?}", batch[0]),
            format!("{:?}", process_frame(19_850, 19_850..19_870))
        );
        assert_eq!(
            db.encoded_frames().metrics().unwrap().len(),
            2,
            "os.proc.cpu and sw.page_faults"
        );
    }

    #[test]
    fn a_large_dictionary_counts_against_the_byte_bound() {
        // Frames of ever-new processes with a byte bound: the dictionary must not
        // keep the keys of evicted frames forever.
        let bound = 2 << 20;
        let mut db = FrameDb::new(1_000_000, bound);
        for i in 0..400u64 {
            let first = i as u32 * 100;
            db.push(process_frame(i, first..first + 100));
            assert!(db.bytes() <= bound || db.len() == 1, "{} bytes", db.bytes());
        }
        assert!(db.dictionary_rebuilds() > 0);
        assert!(db.len() > 1);
        assert_eq!(db.encoded_frames().frames().count(), db.len());
    }

    #[test]
    fn encoded_frames_metrics_and_counter_class() {
        let mut db = FrameDb::new(100, usize::MAX);
        for i in 0..6 {
            db.push(process_frame(i, 0..(i as u32 % 4 + 1)));
        }
        db.push(frame(6, 700_000_000, 3));
        assert_eq!(
            db.encoded_frames().counter_class().unwrap(),
            CounterClass::Software
        );
        let names: Vec<String> = db
            .encoded_frames()
            .metrics()
            .unwrap()
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(names, ["os.cpu.util", "os.proc.cpu", "sw.page_faults"]);
    }

    #[test]
    fn encoded_frames_after_takes_only_newer_frames_across_dictionaries() {
        let mut db = FrameDb::new(50, usize::MAX);
        db.set_dictionary_limit(30);
        for i in 0..80u64 {
            let first = i as u32 * 5;
            db.push(process_frame(i, first..first + 5));
        }
        assert!(db.dictionaries() == 2 || db.dictionary_rebuilds() > 0);
        assert_eq!(db.stored(), 80);
        let (all, stored) = db.encoded_frames_after(None);
        assert_eq!((all.len(), stored), (50, 80));
        assert_eq!(all.first_seq(), Some(30));
        let (newer, _) = db.encoded_frames_after(Some(70));
        assert_eq!(seqs(&newer), (71..80).collect::<Vec<_>>());
        let back: Vec<Frame> = newer.frames().map(Result::unwrap).collect();
        assert_eq!(
            format!("{:?}", back[0]),
            format!("{:?}", process_frame(71, 355..360))
        );
        assert!(db.encoded_frames_after(Some(79)).0.is_empty());
        assert_eq!(seqs(&db.encoded_frames_after(Some(3)).0).len(), 50);
    }

    #[test]
    fn stale_flush_temp_files_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let stale = d.join(".hwqos-node-20260101T000000Z-41.AbC123.tmp");
        std::fs::write(&stale, vec![0u8; 4096]).unwrap();
        let check = d.join(".hwqos-write-checkXyZ");
        std::fs::write(&check, b"").unwrap();
        for keep in [
            "hwqos-node-20260101T000000Z-41.jsonl",
            ".other.tmp",
            "notes.tmp",
        ] {
            std::fs::write(d.join(keep), b"x").unwrap();
        }
        // A link with our name is not followed or removed; its target stays.
        let target = d.join("target.csv");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, d.join(".hwqos-link.tmp")).unwrap();
        std::fs::create_dir(d.join(".hwqos-dir.tmp")).unwrap();

        let (removed, bytes) = remove_stale_temp_files(d).unwrap();
        let mut removed: Vec<_> = removed
            .iter()
            .map(|p| p.file_name().unwrap().to_owned())
            .collect();
        removed.sort();
        assert_eq!(
            removed,
            [stale.file_name().unwrap(), check.file_name().unwrap()]
        );
        assert_eq!(bytes, 4096);
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".hwqos-dir.tmp",
                ".hwqos-link.tmp",
                ".other.tmp",
                "hwqos-node-20260101T000000Z-41.jsonl",
                "notes.tmp",
                "target.csv"
            ]
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        // The temporary names flush really uses are recognised.
        let tmp = tempfile::Builder::new()
            .prefix(".hwqos-n-x-1.")
            .suffix(".tmp")
            .tempfile_in(d)
            .unwrap();
        let name = tmp.path().file_name().unwrap().to_str().unwrap().to_owned();
        assert!(is_our_temp_file(&name), "{name}");
        assert!(remove_stale_temp_files(&d.join("missing"))
            .unwrap()
            .0
            .is_empty());
    }
}
