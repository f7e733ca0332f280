//! Append-only recordings: what a flush writes.
//!
//! One monitor run writes a series of **segments** into `[output] dir`, each a
//! JSON-lines file (`hwqos.recording/1`: a header line, then one frame per
//! line) and/or a CSV file (its header row, then one row per scope per tick),
//! named `hwqos-<node>-<UTC start>Z-<pid>.<NNNNNN>.<jsonl|csv>`. A flush
//! appends the frames newer than the last frame it flushed, then fsyncs; it
//! never rewrites what is already on disk, so its cost is proportional to the
//! new frames, not to the database.
//!
//! - **Whole files.** A new segment's files are written under a hidden
//!   temporary name (`.hwqos-….tmp`) and get their name, with the header and
//!   the flush's first frames in them, once synced (a link, never replacing a
//!   file); a temporary file left by `kill -9` is what the monitor removes at
//!   start.
//! - **Whole frames.** Frames are serialized into a buffer and written to the
//!   file (`O_APPEND`) in whole frames, at most about [`COMMIT_BYTES`] at a
//!   time; a failed write truncates the file back to the length it had before
//!   the flush, and the next flush starts a new segment. A reader that looks
//!   while a flush writes, or at a file cut by `kill -9` or a power loss, sees
//!   at most a torn last line, which `hwqos_core::recording` reads up to the
//!   last whole frame (`Recording::truncated_at`).
//! - **New segments** start when a file passes `[output] segment_mib` (a
//!   segment exceeds it by at most one frame), and when a flush's frames would
//!   make a header wrong: other event sets or rate (JSON lines header), a
//!   counter class the header does not state (software → mixed), a metric the
//!   CSV header has no column for, another directory or format list. A new
//!   segment's header covers every metric the run has flushed so far, so the
//!   event-set rotation does not start one segment per set. A segment that got
//!   no frame (a flush before the first tick) is removed when the next one starts.
//! - **Gaps.** Frames that fell out of the database's ring before a flush
//!   reached them are counted ([`Gap`], [`OutputStats::frames_lost`]) and
//!   reported by the caller, never silently skipped.
//! - **Disk bound.** After each flush the oldest segment files in the
//!   directory (this run's and earlier runs', recognized by their name) are
//!   removed until all of them together fit `[output] max_mib`; the segment
//!   being written is never removed. Nothing is removed at start.

use crate::db::{EncodedFrames, FlushError, Format};
use hwqos_core::recording::{CounterClass, CsvWriter, RecordingHeader, RecordingWriter};
use hwqos_core::{Frame, MetricName, Sample, Scope, Timestamp};
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tracing::warn;

/// Default `[output] segment_mib`: the size a segment file grows to before
/// the next one starts.
pub const DEFAULT_SEGMENT_MIB: u64 = 64;
/// Largest `[output] segment_mib`.
pub const MAX_SEGMENT_MIB: u64 = 4096;
/// Default `[output] max_mib`: all segment files in the directory together.
pub const DEFAULT_MAX_MIB: u64 = 1024;
/// Largest `[output] max_mib` (1 TiB).
pub const MAX_MAX_MIB: u64 = 1 << 20;
/// Serialized frames are written to the file once this many bytes are
/// pending (always whole frames).
pub const COMMIT_BYTES: usize = 1 << 20;

/// The size bounds of the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A segment file that reaches this size is closed; the next frame starts a new segment.
    pub segment_bytes: u64,
    /// All segment files in the directory together, the open segment excepted.
    pub max_bytes: u64,
}

impl Limits {
    /// Bounds in MiB, as configured.
    pub fn mib(segment_mib: u64, max_mib: u64) -> Limits {
        Limits {
            segment_bytes: segment_mib.saturating_mul(1 << 20),
            max_bytes: max_mib.saturating_mul(1 << 20),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::mib(DEFAULT_SEGMENT_MIB, DEFAULT_MAX_MIB)
    }
}

/// Frames that fell out of the database before a flush reached them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// How many frames were lost.
    pub frames: u64,
    /// The newest frame flushed before them (`None`: nothing had been flushed yet).
    pub after_seq: Option<u64>,
    /// The oldest frame this flush wrote after them (`None`: none was left).
    pub resumed_seq: Option<u64>,
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} frames fell out of the database before they were flushed",
            self.frames
        )?;
        match (self.after_seq, self.resumed_seq) {
            (Some(a), Some(r)) => write!(f, " (after seq {a}, resuming at seq {r})"),
            (Some(a), None) => write!(f, " (after seq {a})"),
            (None, Some(r)) => write!(f, " (before seq {r})"),
            (None, None) => Ok(()),
        }
    }
}

/// What one flush did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlushReport {
    /// The files this flush wrote to (the open segment's, and those of
    /// segments it started and closed), oldest first.
    pub paths: Vec<PathBuf>,
    /// Frames appended.
    pub frames: u64,
    /// Bytes appended (headers of new segments included).
    pub bytes: u64,
    /// Frames lost since the previous flush, if any.
    pub gap: Option<Gap>,
    /// Old segment files removed to respect the disk bound.
    pub removed: Vec<PathBuf>,
    /// The newest frame flushed so far.
    pub last_seq: Option<u64>,
}

/// Totals since the writer was created (the monitor started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputStats {
    /// Flushes attempted.
    pub flushes: u64,
    /// Frames appended (once per frame, whatever the number of formats).
    pub frames_written: u64,
    /// Bytes written to segment files, all formats together.
    pub bytes_written: u64,
    /// Frames the database evicted before a flush reached them.
    pub frames_lost: u64,
    /// Flushes that found such a gap.
    pub gaps: u64,
    /// Segments started.
    pub segments_started: u64,
    /// Old segment files removed to respect `[output] max_mib`.
    pub files_removed: u64,
}

/// What a segment's header lines state.
#[derive(Clone, Debug, PartialEq)]
struct Stated {
    dir: PathBuf,
    formats: Vec<Format>,
    rate_hz: f64,
    event_sets: Vec<Vec<String>>,
    counters: CounterClass,
    columns: BTreeSet<MetricName>,
}

impl Stated {
    /// Whether a segment with these headers can take frames that need `wanted`.
    fn covers(&self, wanted: &Stated) -> bool {
        if self.dir != wanted.dir || self.formats != wanted.formats {
            return false;
        }
        let jsonl_ok = !self.formats.contains(&Format::Jsonl)
            || (self.rate_hz == wanted.rate_hz
                && self.event_sets == wanted.event_sets
                && self.counters == wanted.counters);
        let csv_ok =
            !self.formats.contains(&Format::Csv) || wanted.columns.is_subset(&self.columns);
        jsonl_ok && csv_ok
    }
}

/// Bytes serialized but not yet written to the file (whole frames only).
#[derive(Clone, Default)]
struct Pending(Arc<Mutex<Vec<u8>>>);

impl Pending {
    fn buf(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Write for Pending {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct SegmentFile {
    /// The file's name once published.
    path: PathBuf,
    /// Its hidden temporary name until the first flush that wrote to it has
    /// synced it: a reader never sees a segment without its header.
    tmp: Option<PathBuf>,
    file: File,
    pending: Pending,
    /// Bytes in the file (whole lines only).
    len: u64,
    /// The length before this flush wrote to it: a failed flush truncates back to it.
    flush_start: u64,
}

impl SegmentFile {
    /// Writes the pending bytes to the file; returns how many.
    fn commit(&mut self) -> io::Result<u64> {
        let mut buf = self.pending.buf();
        if buf.is_empty() {
            return Ok(0);
        }
        self.file.write_all(&buf)?;
        let n = buf.len() as u64;
        self.len += n;
        buf.clear();
        Ok(n)
    }

    fn size(&self) -> u64 {
        self.len + self.pending.buf().len() as u64
    }

    /// The name the file has now.
    fn current_path(&self) -> &Path {
        self.tmp.as_deref().unwrap_or(&self.path)
    }

    /// Gives a synced new file its name (never replacing a file of that name).
    fn publish(&mut self) -> io::Result<()> {
        if let Some(tmp) = &self.tmp {
            std::fs::hard_link(tmp, &self.path)?;
            std::fs::remove_file(tmp)?;
            self.tmp = None;
        }
        Ok(())
    }

    fn remove(&self) -> io::Result<()> {
        std::fs::remove_file(self.current_path())
    }
}

struct Segment {
    files: Vec<SegmentFile>,
    jsonl: Option<RecordingWriter<Pending>>,
    csv: Option<CsvWriter<Pending>>,
    stated: Stated,
    /// Frames in the segment (written or pending).
    frames: u64,
    /// Frames that were in the files before this flush.
    frames_before_flush: u64,
}

impl Segment {
    fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.files.iter().map(|f| &f.path)
    }

    fn size(&self) -> u64 {
        self.files.iter().map(SegmentFile::size).max().unwrap_or(0)
    }

    fn write_frame(&mut self, frame: &Frame) -> io::Result<u64> {
        if let Some(w) = self.jsonl.as_mut() {
            w.write_frame(frame)?;
        }
        if let Some(w) = self.csv.as_mut() {
            w.write_frame(frame)?;
        }
        self.frames += 1;
        let mut written = 0;
        for f in &mut self.files {
            if f.pending.buf().len() >= COMMIT_BYTES {
                written += f.commit()?;
            }
        }
        Ok(written)
    }

    /// Writes everything pending and makes it durable; a new segment's files
    /// get their names.
    fn commit_and_sync(&mut self) -> io::Result<u64> {
        let mut written = 0;
        for f in &mut self.files {
            written += f.commit()?;
            f.file.sync_data()?;
        }
        for f in &mut self.files {
            f.publish()?;
        }
        Ok(written)
    }

    /// Undoes this flush: truncates the files to their length before it (a
    /// segment that had no frame before it is removed).
    fn abandon(self) {
        for f in &self.files {
            let undo = if self.frames_before_flush == 0 {
                f.remove()
            } else {
                f.file.set_len(f.flush_start)
            };
            if let Err(e) = undo {
                warn!(
                    "cannot undo the failed flush of {}: {e}; its last line may be torn",
                    f.path.display()
                );
            }
        }
    }
}

/// The monitor's append-only recording output (see the module docs).
pub struct SegmentWriter {
    /// `hwqos-<node>-<UTC start>Z-<pid>`.
    run: String,
    next_index: u64,
    open: Option<Segment>,
    /// Metrics of every frame flushed by this run.
    run_metrics: BTreeSet<MetricName>,
    /// The newest frame on disk.
    last_seq: Option<u64>,
    /// The database's stored-frames count up to and including that frame.
    stored_flushed: u64,
    stats: OutputStats,
}

impl SegmentWriter {
    /// A writer for one monitor run; `started_wall_ns` and the process id name its files.
    pub fn new(node: &str, started_wall_ns: i64) -> SegmentWriter {
        let node: String = node
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let utc: String = hwqos_core::time::format_rfc3339(started_wall_ns)
            .chars()
            .take(19)
            .filter(|c| *c != '-' && *c != ':')
            .collect();
        SegmentWriter {
            run: format!("hwqos-{node}-{utc}Z-{}", std::process::id()),
            next_index: 1,
            open: None,
            run_metrics: BTreeSet::new(),
            last_seq: None,
            stored_flushed: 0,
            stats: OutputStats::default(),
        }
    }

    /// The newest frame flushed (the next flush appends the frames after it).
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    /// The totals since the writer was created.
    pub fn stats(&self) -> OutputStats {
        self.stats
    }

    /// The files of the segment being written.
    pub fn open_paths(&self) -> Vec<PathBuf> {
        self.open
            .as_ref()
            .map(|s| s.paths().cloned().collect())
            .unwrap_or_default()
    }

    /// Appends `new` — the database's frames after [`SegmentWriter::last_seq`],
    /// taken together with the database's stored-frames count `stored` — to the
    /// open segment (starting segments as needed), fsyncs, and removes the
    /// oldest segment files beyond `limits.max_bytes`. `header` gives node,
    /// start, rate, backend, event sets and writer; its counter class is
    /// replaced by the class of the metrics this run has flushed.
    pub fn append(
        &mut self,
        new: &EncodedFrames,
        stored: u64,
        header: &RecordingHeader,
        dir: &Path,
        formats: &[Format],
        limits: Limits,
    ) -> Result<FlushReport, FlushError> {
        if formats.is_empty() {
            return Err(FlushError::NoFormats);
        }
        let corrupt = |source| FlushError::Corrupt { source };
        // Frames the database stored since the last flush that are no longer in it.
        let present = new.len() as u64;
        let lost = stored
            .saturating_sub(self.stored_flushed)
            .saturating_sub(present);
        let gap = (lost > 0).then(|| Gap {
            frames: lost,
            after_seq: self.last_seq,
            resumed_seq: new.first_seq(),
        });
        let mut run_metrics = self.run_metrics.clone();
        run_metrics.extend(new.metrics().map_err(corrupt)?);
        let wanted = Stated {
            dir: dir.to_path_buf(),
            formats: formats.to_vec(),
            rate_hz: header.rate_hz,
            event_sets: header.event_sets.clone(),
            counters: counter_class(&run_metrics),
            columns: run_metrics.clone(),
        };
        self.run_metrics = run_metrics;
        self.stats.flushes += 1;
        if let Some(gap) = gap {
            self.stats.frames_lost += gap.frames;
            self.stats.gaps += 1;
        }
        // Frames before this flush's first one, counted as the database stores them.
        let base = stored.saturating_sub(present);
        let mut report = FlushReport {
            gap,
            ..FlushReport::default()
        };
        let mut dir_changed = false;
        let outcome = self.write(
            new,
            base,
            header,
            &wanted,
            limits,
            &mut report,
            &mut dir_changed,
        );
        if let Err(e) = outcome {
            if let Some(segment) = self.open.take() {
                segment.abandon();
            }
            return Err(e);
        }
        self.stored_flushed = stored.max(self.stored_flushed);
        if let Some(seq) = new.last_seq() {
            self.last_seq = Some(seq);
        }
        report.last_seq = self.last_seq;
        let keep = self.open_paths();
        report.removed = enforce_max_bytes(dir, limits.max_bytes, &keep);
        self.stats.files_removed += report.removed.len() as u64;
        if dir_changed || !report.removed.is_empty() {
            sync_dir(dir);
        }
        Ok(report)
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        new: &EncodedFrames,
        base: u64,
        header: &RecordingHeader,
        wanted: &Stated,
        limits: Limits,
        report: &mut FlushReport,
        dir_changed: &mut bool,
    ) -> Result<(), FlushError> {
        let io_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| FlushError::Io { path, source }
        };
        if self.open.as_ref().is_some_and(|s| !s.stated.covers(wanted)) {
            *dir_changed |= self.close(report)?;
        }
        if let Some(s) = self.open.as_mut() {
            s.frames_before_flush = s.frames;
            for f in &mut s.files {
                f.flush_start = f.len;
            }
            report.paths.extend(s.paths().cloned());
        }
        for (i, frame) in new.frames().enumerate() {
            let frame = frame.map_err(|source| FlushError::Corrupt { source })?;
            if self.open.is_none() {
                self.start(header, wanted, report)?;
                *dir_changed = true;
            }
            let segment = self.open.as_mut().expect("a segment is open");
            let written = segment
                .write_frame(&frame)
                .map_err(io_err(&segment.files[0].path))?;
            self.stats.bytes_written += written;
            report.bytes += written;
            report.frames += 1;
            self.stats.frames_written += 1;
            if segment.size() >= limits.segment_bytes {
                self.close(report)?;
                // Everything up to this frame is on disk now.
                self.last_seq = Some(frame.seq);
                self.stored_flushed = base + i as u64 + 1;
            }
        }
        if self.open.is_none() && report.paths.is_empty() {
            // Nothing new and nothing open: a header-only segment, so that a
            // flush always names its files.
            self.start(header, wanted, report)?;
            *dir_changed = true;
        }
        if let Some(segment) = self.open.as_mut() {
            let path = segment.files[0].path.clone();
            let written = segment.commit_and_sync().map_err(io_err(&path))?;
            self.stats.bytes_written += written;
            report.bytes += written;
        }
        Ok(())
    }

    /// Creates the next segment's files and writes their headers (pending).
    fn start(
        &mut self,
        header: &RecordingHeader,
        wanted: &Stated,
        report: &mut FlushReport,
    ) -> Result<(), FlushError> {
        let dir = &wanted.dir;
        let io_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| FlushError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        // Never overwrite: a name taken (by an earlier run with this pid and
        // start second) moves on to the next index.
        let files = 'index: loop {
            let index = self.next_index;
            self.next_index += 1;
            let mut files = Vec::new();
            for format in &wanted.formats {
                let name = format!("{}.{index:06}.{}", self.run, format.extension());
                let path = dir.join(&name);
                let tmp = dir.join(format!(".{name}.tmp"));
                let opened = if path.exists() {
                    Err(io::Error::from(io::ErrorKind::AlreadyExists))
                } else {
                    OpenOptions::new()
                        .append(true)
                        .create_new(true)
                        .mode(0o640)
                        .open(&tmp)
                };
                match opened {
                    Ok(file) => files.push(SegmentFile {
                        path,
                        tmp: Some(tmp),
                        file,
                        pending: Pending::default(),
                        len: 0,
                        flush_start: 0,
                    }),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists && index < 1_000_000 => {
                        for f in &files {
                            let _ = f.remove();
                        }
                        continue 'index;
                    }
                    Err(e) => {
                        for f in &files {
                            let _ = f.remove();
                        }
                        return Err(io_err(&tmp)(e));
                    }
                }
            }
            break files;
        };
        let mut jsonl = None;
        let mut csv = None;
        let mut header = header.clone();
        header.counters = wanted.counters;
        let mut failed = None;
        for (format, f) in wanted.formats.iter().zip(&files) {
            // The umask may have taken bits off the creation mode.
            let made = f
                .file
                .set_permissions(std::fs::Permissions::from_mode(0o640))
                .and_then(|()| match format {
                    Format::Jsonl => {
                        jsonl = Some(RecordingWriter::new(f.pending.clone(), &header)?);
                        Ok(())
                    }
                    Format::Csv => {
                        csv = Some(CsvWriter::new(
                            f.pending.clone(),
                            wanted.columns.iter().cloned(),
                        )?);
                        Ok(())
                    }
                });
            if let Err(e) = made {
                failed = Some(io_err(&f.path)(e));
                break;
            }
        }
        if let Some(e) = failed {
            for f in &files {
                let _ = f.remove();
            }
            return Err(e);
        }
        report.paths.extend(files.iter().map(|f| f.path.clone()));
        self.stats.segments_started += 1;
        self.open = Some(Segment {
            files,
            jsonl,
            csv,
            stated: wanted.clone(),
            frames: 0,
            frames_before_flush: 0,
        });
        Ok(())
    }

    /// Closes the open segment: writes what is pending and fsyncs; a segment
    /// without frames is removed instead. Returns whether files were removed.
    fn close(&mut self, report: &mut FlushReport) -> Result<bool, FlushError> {
        let Some(mut segment) = self.open.take() else {
            return Ok(false);
        };
        if segment.frames == 0 {
            for f in &segment.files {
                if let Err(e) = f.remove() {
                    warn!(
                        "cannot remove the empty segment {}: {e}",
                        f.current_path().display()
                    );
                }
                report.paths.retain(|p| p != &f.path);
            }
            return Ok(true);
        }
        match segment.commit_and_sync() {
            Ok(written) => {
                self.stats.bytes_written += written;
                report.bytes += written;
                Ok(false)
            }
            Err(source) => {
                let path = segment.files[0].path.clone();
                segment.abandon();
                Err(FlushError::Io { path, source })
            }
        }
    }
}

/// The counter class of a set of metrics (as [`CounterClass::of`] sees frames).
fn counter_class(metrics: &BTreeSet<MetricName>) -> CounterClass {
    let probe = Frame {
        samples: metrics
            .iter()
            .map(|m| Sample::gauge(Timestamp::default(), Scope::System, m.clone(), 0.0))
            .collect(),
        ..Frame::default()
    };
    CounterClass::of(std::iter::once(&probe))
}

/// Whether a file name is a segment's: `hwqos-….<digits>.jsonl` or `….csv`
/// (the whole-database flushes of earlier versions, `hwqos-….jsonl`, are not).
pub fn is_segment_name(name: &str) -> bool {
    let Some(stem) = name
        .strip_suffix(".jsonl")
        .or_else(|| name.strip_suffix(".csv"))
    else {
        return false;
    };
    let Some((run, index)) = stem.rsplit_once('.') else {
        return false;
    };
    run.starts_with("hwqos-")
        && !run.contains('.')
        && index.len() >= 6
        && index.bytes().all(|b| b.is_ascii_digit())
}

/// Removes the oldest segment files in `dir` (by modification time, then
/// name) until the rest fit `max_bytes`, never one of `keep`. Returns the
/// files removed; failures are logged and skipped.
pub fn enforce_max_bytes(dir: &Path, max_bytes: u64, keep: &[PathBuf]) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            warn!("cannot list {} to bound its recordings: {e}", dir.display());
            return Vec::new();
        }
    };
    let mut files: Vec<(SystemTime, String, u64, PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !is_segment_name(&name) {
            continue;
        }
        // DirEntry::metadata does not follow symbolic links.
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.file_type().is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        files.push((modified, name, meta.len(), entry.path()));
    }
    let mut total: u64 = files.iter().map(|f| f.2).sum();
    files.sort();
    let mut removed = Vec::new();
    for (_, _, len, path) in files {
        if total <= max_bytes {
            break;
        }
        if keep.contains(&path) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                total -= len;
                removed.push(path);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => total -= len,
            Err(e) => warn!("cannot remove old recording {}: {e}", path.display()),
        }
    }
    removed
}

/// Makes created and removed directory entries durable (best effort).
fn sync_dir(dir: &Path) {
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        warn!("cannot fsync {}: {e}", dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::FrameDb;
    use hwqos_core::recording::{self, RecordedBackend};
    use hwqos_core::CounterReading;
    use std::time::Instant;

    /// A frame of `n` CPUs with a software counter and a gauge each.
    fn frame(seq: u64, n: u32, metric: &'static str) -> Arc<Frame> {
        let t = Timestamp {
            mono_ns: seq * 100_000_000,
            wall_ns: 1_700_000_000_000_000_000 + seq as i64 * 100_000_000,
        };
        let mut samples = Vec::new();
        for cpu in 0..n {
            let scope = Scope::Cpu { cpu };
            samples.extend(Sample::counter(
                t,
                scope.clone(),
                MetricName::from_static("sw.page_faults"),
                CounterReading {
                    raw: seq * 3 + u64::from(cpu),
                    time_enabled: 100,
                    time_running: 100,
                },
            ));
            samples.push(Sample::gauge(
                t,
                scope,
                MetricName::from_static(metric),
                cpu as f64 / 8.0,
            ));
        }
        Arc::new(Frame {
            seq,
            time: t,
            interval_ns: 100_000_000,
            samples,
            labels: vec![],
        })
    }

    fn header(sets: &[&str]) -> RecordingHeader {
        let mut h = RecordingHeader::new(
            "node",
            Timestamp::default(),
            10.0,
            RecordedBackend::Simulated,
            CounterClass::None,
        );
        h.event_sets = vec![sets.iter().map(|s| s.to_string()).collect()];
        h
    }

    const BOTH: &[Format] = &[Format::Jsonl, Format::Csv];

    struct Fixture {
        dir: tempfile::TempDir,
        db: FrameDb,
        out: SegmentWriter,
        limits: Limits,
    }

    impl Fixture {
        fn new(capacity: usize) -> Fixture {
            Fixture {
                dir: tempfile::tempdir().unwrap(),
                db: FrameDb::new(capacity, usize::MAX),
                out: SegmentWriter::new("node", 1_800_000_000_000_000_000),
                limits: Limits::default(),
            }
        }

        fn push(&mut self, seqs: std::ops::Range<u64>) {
            for seq in seqs {
                self.db.push(frame(seq, 4, "os.cpu.util"));
            }
        }

        fn flush_with(&mut self, header: &RecordingHeader, formats: &[Format]) -> FlushReport {
            let (new, stored) = self.db.encoded_frames_after(self.out.last_seq());
            self.out
                .append(&new, stored, header, self.dir.path(), formats, self.limits)
                .unwrap()
        }

        fn flush(&mut self) -> FlushReport {
            self.flush_with(&header(&["sw.page_faults"]), BOTH)
        }

        /// Segment files in the directory, sorted by name.
        fn files(&self, ext: &str) -> Vec<PathBuf> {
            let mut v: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == ext))
                .filter(|p| is_segment_name(p.file_name().unwrap().to_str().unwrap()))
                .collect();
            v.sort();
            v
        }

        /// The sequence numbers of all JSON-lines segments, in order.
        fn seqs(&self) -> Vec<u64> {
            self.files("jsonl")
                .iter()
                .flat_map(|p| {
                    let rec = recording::read_recording(p).unwrap();
                    assert_eq!(rec.truncated_at, None);
                    rec.frames.into_iter().map(|f| f.seq)
                })
                .collect()
        }
    }

    #[test]
    fn flushing_twice_appends_only_the_new_frames() {
        let mut x = Fixture::new(1000);
        x.push(0..10);
        let first = x.flush();
        assert_eq!(first.frames, 10);
        assert_eq!(first.paths.len(), 2);
        assert_eq!(first.gap, None);
        x.push(10..15);
        let second = x.flush();
        assert_eq!(second.frames, 5);
        assert_eq!(second.paths, first.paths, "the same files grow");
        assert_eq!(second.last_seq, Some(14));
        // Read back: each frame once, in order, decoded as pushed.
        let rec = recording::read_recording(&first.paths[0]).unwrap();
        let seqs: Vec<u64> = rec.frames.iter().map(|f| f.seq).collect();
        assert_eq!(seqs, (0..15).collect::<Vec<_>>());
        assert_eq!(rec.frames[12], *frame(12, 4, "os.cpu.util"));
        assert_eq!(rec.header.counters, CounterClass::Software);
        assert_eq!(rec.header.event_sets, vec![vec!["sw.page_faults"]]);
        let csv = recording::read_csv(&first.paths[1]).unwrap();
        assert_eq!(csv.rows.len(), 15 * 4);
        let csv_seqs: Vec<u64> = csv.rows.iter().map(|r| r.seq).step_by(4).collect();
        assert_eq!(csv_seqs, (0..15).collect::<Vec<_>>());
        // Nothing new: nothing written, the same files named.
        let third = x.flush();
        assert_eq!((third.frames, third.bytes), (0, 0));
        assert_eq!(third.paths, first.paths);
        assert_eq!(x.seqs(), (0..15).collect::<Vec<_>>());
        let mode = std::fs::metadata(&first.paths[0])
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        assert_eq!(x.out.stats().frames_written, 15);
        // No temporary or other files.
        assert_eq!(std::fs::read_dir(x.dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_flush_after_the_ring_wrapped_reports_the_gap() {
        let mut x = Fixture::new(10);
        x.push(0..5);
        assert_eq!(x.flush().gap, None);
        // 20 more frames into a ring of 10: 5..=14 fall out unflushed.
        x.push(5..25);
        let r = x.flush();
        assert_eq!(
            r.gap,
            Some(Gap {
                frames: 10,
                after_seq: Some(4),
                resumed_seq: Some(15)
            })
        );
        assert_eq!(r.frames, 10);
        let said = r.gap.unwrap().to_string();
        assert!(
            said.contains("10 frames fell out") && said.contains("after seq 4, resuming at seq 15"),
            "{said}"
        );
        let expected: Vec<u64> = (0..5).chain(15..25).collect();
        assert_eq!(x.seqs(), expected);
        // Missed ticks (a jump in seq) are not a gap: only lost frames are.
        x.db.push(frame(40, 4, "os.cpu.util"));
        assert_eq!(x.flush().gap, None);
        let s = x.out.stats();
        assert_eq!((s.frames_lost, s.gaps), (10, 1));

        // A first flush after the ring wrapped counts what it never saw.
        let mut y = Fixture::new(10);
        y.push(0..25);
        assert_eq!(
            y.flush().gap,
            Some(Gap {
                frames: 15,
                after_seq: None,
                resumed_seq: Some(15)
            })
        );
    }

    #[test]
    fn segments_rotate_at_the_size_bound() {
        let mut x = Fixture::new(1000);
        x.push(0..1);
        let one = {
            let r = x.flush();
            std::fs::metadata(&r.paths[0]).unwrap().len()
        };
        // About 5 frames per JSON-lines file.
        x.limits = Limits {
            segment_bytes: 5 * one,
            max_bytes: u64::MAX,
        };
        x.push(1..60);
        let r = x.flush();
        let jsonl = x.files("jsonl");
        assert!(jsonl.len() >= 10, "{} segments", jsonl.len());
        assert_eq!(
            x.files("csv").len(),
            jsonl.len(),
            "both formats rotate together"
        );
        for p in x.files("jsonl").iter().chain(&x.files("csv")) {
            let len = std::fs::metadata(p).unwrap().len();
            // Past the bound by at most one frame.
            assert!(len < 5 * one + one, "{}: {len} bytes", p.display());
            assert!(r.paths.contains(p) || p == &jsonl[0] || p.ends_with("000001.csv"));
        }
        // Each segment is a whole recording; together they hold each frame once.
        assert_eq!(x.seqs(), (0..60).collect::<Vec<_>>());
        let rows: usize = x
            .files("csv")
            .iter()
            .map(|p| recording::read_csv(p).unwrap().rows.len())
            .sum();
        assert_eq!(rows, 60 * 4);
        assert_eq!(x.out.stats().segments_started, jsonl.len() as u64);
    }

    #[test]
    fn bytes_written_are_proportional_to_the_new_frames() {
        let mut x = Fixture::new(30_000);
        x.push(0..3000);
        let whole = x.flush();
        let on_disk: u64 = whole
            .paths
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        assert_eq!(whole.bytes, on_disk);
        let mut appended = 0;
        for round in 0..3u64 {
            let from = 3000 + round * 10;
            x.push(from..from + 10);
            let before: u64 = whole
                .paths
                .iter()
                .map(|p| std::fs::metadata(p).unwrap().len())
                .sum();
            let r = x.flush();
            let after: u64 = whole
                .paths
                .iter()
                .map(|p| std::fs::metadata(p).unwrap().len())
                .sum();
            assert_eq!(r.frames, 10);
            // What was written is what the files grew by, and about 10/3000 of
            // the first flush (the whole database), not the database again.
            assert_eq!(r.bytes, after - before);
            let per_frame = whole.bytes / 3000;
            assert!(
                r.bytes <= 10 * per_frame + per_frame,
                "{} bytes for 10 frames ({per_frame} a frame)",
                r.bytes
            );
            assert!(
                r.bytes * 200 < whole.bytes,
                "{} vs {}",
                r.bytes,
                whole.bytes
            );
            appended += r.bytes;
        }
        assert_eq!(x.out.stats().bytes_written, whole.bytes + appended);
        assert_eq!(x.seqs().len(), 3030);
    }

    #[test]
    fn disk_use_is_bounded_and_older_files_are_left_alone() {
        let mut x = Fixture::new(1000);
        let d = x.dir.path().to_path_buf();
        // An earlier run's segments, an earlier version's whole-database
        // flush and someone else's file.
        let old_seg = d.join("hwqos-node-20260101T000000Z-7.000001.jsonl");
        std::fs::write(&old_seg, vec![b'x'; 10_000]).unwrap();
        let old_flush = d.join("hwqos-node-20260101T000000Z-41.jsonl");
        std::fs::write(&old_flush, vec![b'x'; 10_000]).unwrap();
        let notes = d.join("notes.csv");
        std::fs::write(&notes, b"keep").unwrap();
        x.push(0..1);
        let one = {
            let r = x.flush();
            std::fs::metadata(&r.paths[0]).unwrap().len()
        };
        x.limits = Limits {
            segment_bytes: 4 * one,
            max_bytes: 30 * one,
        };
        let segment_bytes = |x: &Fixture| -> u64 {
            std::fs::read_dir(x.dir.path())
                .unwrap()
                .map(|e| e.unwrap())
                .filter(|e| is_segment_name(e.file_name().to_str().unwrap()))
                .map(|e| e.metadata().unwrap().len())
                .sum()
        };
        let mut removed = 0;
        for round in 0..20u64 {
            x.push(1 + round * 5..6 + round * 5);
            let r = x.flush();
            removed += r.removed.len();
            assert!(segment_bytes(&x) <= 30 * one, "{} bytes", segment_bytes(&x));
            for p in x.out.open_paths() {
                assert!(p.exists());
            }
        }
        assert!(removed > 0);
        assert!(!old_seg.exists(), "the oldest segment goes first");
        assert!(
            old_flush.exists() && notes.exists(),
            "only segment files are removed"
        );
        assert_eq!(x.out.stats().files_removed, removed as u64);
        // The newest frames are all there, in order.
        let seqs = x.seqs();
        assert_eq!(*seqs.last().unwrap(), 100);
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
    }

    #[test]
    fn headers_stay_true_new_metrics_and_event_sets_start_a_segment() {
        let mut x = Fixture::new(1000);
        x.push(0..3);
        let a = x.flush();
        // A metric the CSV header has no column for.
        for seq in 3..6 {
            x.db.push(frame(seq, 2, "app.queue_depth"));
        }
        let b = x.flush();
        assert_ne!(a.paths, b.paths);
        let csv = recording::read_csv(&b.paths[1]).unwrap();
        let names: Vec<&str> = csv.metrics.iter().map(|m| m.as_str()).collect();
        assert_eq!(names, ["app.queue_depth", "os.cpu.util", "sw.page_faults"]);
        // Only JSON lines: a new metric does not matter, the event sets do.
        x.push(6..8);
        let c = x.flush_with(&header(&["sw.page_faults"]), &[Format::Jsonl]);
        assert_eq!(c.paths.len(), 1);
        x.push(8..10);
        let d = x.flush_with(&header(&["sw.page_faults"]), &[Format::Jsonl]);
        assert_eq!(d.paths, c.paths);
        x.push(10..12);
        let e = x.flush_with(&header(&["sw.task_clock"]), &[Format::Jsonl]);
        assert_ne!(e.paths, d.paths);
        let rec = recording::read_recording(&e.paths[0]).unwrap();
        assert_eq!(rec.header.event_sets, vec![vec!["sw.task_clock"]]);
        assert_eq!(x.seqs(), (0..12).collect::<Vec<_>>());
    }

    #[test]
    fn a_flush_before_the_first_frame_leaves_no_empty_segment_behind() {
        let mut x = Fixture::new(100);
        let empty = x.flush();
        assert_eq!(empty.paths.len(), 2);
        assert_eq!(
            recording::read_recording(&empty.paths[0])
                .unwrap()
                .frames
                .len(),
            0
        );
        assert_eq!(empty.gap, None);
        x.push(0..3);
        let r = x.flush();
        // The header said "no counters"; the frames have software counters.
        assert_ne!(r.paths, empty.paths);
        assert!(empty.paths.iter().all(|p| !p.exists()));
        assert_eq!(x.files("jsonl").len(), 1);
        assert_eq!(x.seqs(), vec![0, 1, 2]);
    }

    #[test]
    fn a_second_writer_never_overwrites_and_a_torn_tail_reads_back() {
        let mut x = Fixture::new(100);
        x.push(0..3);
        let first = x.flush();
        // Same node, start second and pid: the names collide, the index moves on.
        let mut again = SegmentWriter::new("node", 1_800_000_000_000_000_000);
        let (new, stored) = x.db.encoded_frames_after(None);
        let r = again
            .append(
                &new,
                stored,
                &header(&["sw.page_faults"]),
                x.dir.path(),
                BOTH,
                x.limits,
            )
            .unwrap();
        assert!(r.paths.iter().all(|p| !first.paths.contains(p)), "{r:?}");
        assert_eq!(
            recording::read_recording(&first.paths[0])
                .unwrap()
                .frames
                .len(),
            3
        );
        // What kill -9 in the middle of a write leaves: a torn last line,
        // read up to the last whole frame.
        let mut f = OpenOptions::new()
            .append(true)
            .open(&first.paths[0])
            .unwrap();
        f.write_all(br#"{"seq":3,"time":{"mono"#).unwrap();
        let rec = recording::read_recording(&first.paths[0]).unwrap();
        assert_eq!((rec.frames.len(), rec.truncated_at), (3, Some(5)));
        assert!(is_segment_name("hwqos-node-20260101T000000Z-7.000001.csv"));
        assert!(!is_segment_name("hwqos-node-20260101T000000Z-41.jsonl"));
        assert!(!is_segment_name("other-1.000001.jsonl"));
        assert!(!is_segment_name("hwqos-x.12.jsonl"));
    }

    /// The figure in docs/monitor.md: bytes one flush writes at 30,000 frames
    /// of 100 processes, the first (the whole database, what every flush
    /// wrote before flushes appended) and one 1 s later at 10 Hz.
    /// `cargo test -p hwqos-monitor --lib -- --ignored --nocapture figure_`
    #[test]
    #[ignore = "prints a figure; about 6 minutes and 2.6 GB of disk in a debug build"]
    fn figure_bytes_per_flush_at_30000_frames() {
        let mut x = Fixture::new(30_000);
        x.db.set_limits(30_000, 1 << 30);
        let procs = |seq: u64| {
            let t = Timestamp {
                mono_ns: seq * 100_000_000,
                wall_ns: 1_700_000_000_000_000_000 + seq as i64 * 100_000_000,
            };
            let mut samples = Vec::new();
            let mut labels = Vec::new();
            for pid in 1000..1100u32 {
                let scope = Scope::Process { pid };
                for m in ["sw.task_clock", "sw.page_faults", "sw.context_switches"] {
                    samples.extend(Sample::counter(
                        t,
                        scope.clone(),
                        MetricName::from_static(m),
                        CounterReading {
                            raw: seq * 1000 + u64::from(pid),
                            time_enabled: 100_000_000,
                            time_running: 100_000_000,
                        },
                    ));
                }
                samples.push(Sample::gauge(
                    t,
                    scope.clone(),
                    MetricName::from_static("os.proc.cpu"),
                    0.25,
                ));
                labels.push(hwqos_core::ScopeLabel {
                    scope,
                    name: format!("worker-{pid}"),
                });
            }
            Arc::new(Frame {
                seq,
                time: t,
                interval_ns: 100_000_000,
                samples,
                labels,
            })
        };
        for seq in 0..30_000 {
            x.db.push(procs(seq));
        }
        let t = Instant::now();
        let whole = x.flush_with(&header(&["sw.task_clock"]), &[Format::Jsonl]);
        let whole_s = t.elapsed().as_secs_f64();
        for seq in 30_000..30_010 {
            x.db.push(procs(seq));
        }
        let t = Instant::now();
        let next = x.flush_with(&header(&["sw.task_clock"]), &[Format::Jsonl]);
        let next_s = t.elapsed().as_secs_f64();
        println!(
            "FIGURE database {} frames, {} MB encoded; first flush (whole database): {} frames, {} bytes, {whole_s:.2} s; \
             next flush after 10 new frames: {} frames, {} bytes, {next_s:.3} s (JSON lines only)",
            x.db.len(),
            x.db.bytes() / 1_000_000,
            whole.frames,
            whole.bytes,
            next.frames,
            next.bytes
        );
        assert_eq!(next.frames, 10);
    }
}
