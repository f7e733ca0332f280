//! The monitor's in-memory database: a bounded ring of the most recent frames
//! (thesis 5.3: a memory-based database flushed to disk on demand).
//!
//! The ring is bounded twice: by a number of frames (default 30,000, as in the
//! thesis) and by an estimate of the bytes the frames occupy, so a target that
//! suddenly matches thousands of processes cannot grow the monitor without limit.
//! Frames are shared (`Arc`) with subscribers and the exporter, never copied.
//! [`FrameDb::flush`] writes the current contents atomically (temporary file +
//! rename) as JSON lines and/or CSV, in the formats of [`hwqos_core::recording`].

use hwqos_core::recording::{self, RecordingHeader, RecordingWriter};
use hwqos_core::{Frame, Sample, Scope};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    #[error("flush to {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("flush: no output format configured ([output] formats is empty)")]
    NoFormats,
}

/// Approximate heap + inline bytes of a frame, for the memory bound.
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

/// The bounded ring of recent frames.
#[derive(Debug)]
pub struct FrameDb {
    frames: VecDeque<(Arc<Frame>, usize)>,
    capacity: usize,
    max_bytes: usize,
    bytes: usize,
    evicted: u64,
}

impl FrameDb {
    /// A database holding at most `capacity` frames and about `max_bytes` bytes
    /// (at least one frame is always kept).
    pub fn new(capacity: usize, max_bytes: usize) -> FrameDb {
        FrameDb {
            frames: VecDeque::with_capacity(capacity.min(4096)),
            capacity: capacity.max(1),
            max_bytes,
            bytes: 0,
            evicted: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Estimated bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Frames evicted to respect the bounds, since creation.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Changes the bounds, evicting the oldest frames if needed (a reload keeps
    /// the newest frames).
    pub fn set_limits(&mut self, capacity: usize, max_bytes: usize) {
        self.capacity = capacity.max(1);
        self.max_bytes = max_bytes;
        self.evict();
    }

    fn evict(&mut self) {
        while self.frames.len() > self.capacity
            || (self.bytes > self.max_bytes && self.frames.len() > 1)
        {
            if let Some((_, b)) = self.frames.pop_front() {
                self.bytes -= b;
                self.evicted += 1;
            }
        }
    }

    /// Appends a frame, evicting the oldest ones beyond the bounds.
    pub fn push(&mut self, frame: Arc<Frame>) {
        let b = frame_bytes(&frame);
        self.bytes += b;
        self.frames.push_back((frame, b));
        self.evict();
    }

    /// The newest frame.
    pub fn latest(&self) -> Option<&Arc<Frame>> {
        self.frames.back().map(|(f, _)| f)
    }

    /// All frames, oldest first.
    pub fn snapshot(&self) -> Vec<Arc<Frame>> {
        self.frames.iter().map(|(f, _)| f.clone()).collect()
    }

    /// The most recent frames, oldest first: at most `frames` of them, and only
    /// those at most `seconds` older than the newest frame.
    pub fn window(&self, seconds: Option<f64>, frames: Option<usize>) -> Vec<Arc<Frame>> {
        let newest = match self.latest() {
            Some(f) => f.time.mono_ns,
            None => return Vec::new(),
        };
        let horizon = seconds.map(|s| newest.saturating_sub((s.max(0.0) * 1e9) as u64));
        let mut out: Vec<Arc<Frame>> = self
            .frames
            .iter()
            .rev()
            .take(frames.unwrap_or(usize::MAX))
            .take_while(|(f, _)| horizon.is_none_or(|h| f.time.mono_ns >= h))
            .map(|(f, _)| f.clone())
            .collect();
        out.reverse();
        out
    }
}

/// Writes `frames` into `dir` in each of `formats`, each file atomically
/// (a temporary file in `dir`, fsynced, then renamed). Returns the paths written.
///
/// Files are named `<stem>.<ext>`; the caller picks a stem that is unique per flush.
pub fn flush(
    frames: &[Arc<Frame>],
    header: &RecordingHeader,
    dir: &Path,
    stem: &str,
    formats: &[Format],
) -> Result<Vec<PathBuf>, FlushError> {
    if formats.is_empty() {
        return Err(FlushError::NoFormats);
    }
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FlushError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(err(dir))?;
    let mut written = Vec::new();
    for format in formats {
        let path = dir.join(format!("{stem}.{}", format.extension()));
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{stem}."))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(err(dir))?;
        let mut out = BufWriter::new(tmp.as_file());
        match format {
            Format::Jsonl => {
                let mut w = RecordingWriter::new(&mut out, header).map_err(err(&path))?;
                for f in frames {
                    w.write_frame(f).map_err(err(&path))?;
                }
                w.finish().map_err(err(&path))?;
            }
            Format::Csv => {
                recording::write_csv(&mut out, frames.iter().map(|f| f.as_ref()))
                    .map_err(err(&path))?;
            }
        }
        out.flush().map_err(err(&path))?;
        drop(out);
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o640))
            .map_err(err(&path))?;
        tmp.as_file().sync_all().map_err(err(&path))?;
        tmp.persist(&path).map_err(|e| FlushError::Io {
            path: path.clone(),
            source: e.error,
        })?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::recording::{CounterClass, RecordedBackend};
    use hwqos_core::{MetricName, Timestamp};

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

    #[test]
    fn ring_keeps_the_newest_frames() {
        let mut db = FrameDb::new(3, usize::MAX);
        for i in 0..5 {
            db.push(frame(i, i * 10, 1));
        }
        assert_eq!(db.len(), 3);
        assert_eq!(db.evicted(), 2);
        let seqs: Vec<u64> = db.snapshot().iter().map(|f| f.seq).collect();
        assert_eq!(seqs, vec![2, 3, 4]);
        db.set_limits(2, usize::MAX);
        let seqs: Vec<u64> = db.snapshot().iter().map(|f| f.seq).collect();
        assert_eq!(seqs, vec![3, 4]);
    }

    #[test]
    fn ring_respects_the_byte_bound() {
        let one = frame_bytes(&frame(0, 0, 10));
        let mut db = FrameDb::new(1000, one * 4);
        for i in 0..20 {
            db.push(frame(i, i, 10));
        }
        assert_eq!(db.len(), 4);
        assert!(db.bytes() <= one * 4);
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
        assert_eq!(db.window(None, None).len(), 10);
        assert!(FrameDb::new(5, 5).window(Some(1.0), None).is_empty());
    }

    #[test]
    fn flush_writes_files_that_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let frames: Vec<Arc<Frame>> = (0..4).map(|i| frame(i, i * 1000, 2)).collect();
        let header = RecordingHeader::new(
            "n",
            frames[0].time,
            10.0,
            RecordedBackend::Perf,
            CounterClass::None,
        );
        let paths = flush(
            &frames,
            &header,
            &dir.path().join("sub"),
            "rec",
            &[Format::Jsonl, Format::Csv],
        )
        .unwrap();
        assert_eq!(paths.len(), 2);
        let rec = recording::read_recording(&paths[0]).unwrap();
        assert_eq!(rec.frames.len(), 4);
        assert_eq!(rec.frames[3], *frames[3]);
        let csv = recording::read_csv(&paths[1]).unwrap();
        assert_eq!(csv.rows.len(), 8);
        let mode = std::fs::metadata(&paths[0]).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        // No temporary files are left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(matches!(
            flush(&frames, &header, dir.path(), "x", &[]),
            Err(FlushError::NoFormats)
        ));
    }
}
