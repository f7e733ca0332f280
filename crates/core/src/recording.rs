//! Recordings: frames written to disk, in the two formats every hwqos tool reads.
//!
//! **JSON lines** (`*.jsonl`, schema [`SCHEMA`]): the first line is a
//! [`RecordingHeader`] object (`{"schema":"hwqos.recording/1","node":…,"started":…,
//! "rate_hz":…,"backend":"perf"|"simulated","counters":"software"|"hardware"|"mixed"|"none",…}`),
//! every following line is one [`Frame`] exactly as serde serializes it. Readers
//! reject other schemas, report the line number of a bad line and refuse lines
//! longer than [`MAX_LINE_BYTES`] (so a corrupt file cannot exhaust memory).
//!
//! **CSV** (`*.csv`, RFC 4180 quoting): one row per scope per tick, in the spirit
//! of the thesis' Charmon dump (Fig. 8.8). Columns:
//!
//! ```text
//! seq,mono_ns,wall_time,scope,label,<metric>…,multiplexed
//! ```
//!
//! `wall_time` is RFC 3339 UTC, `scope` the scope's text form (`cpu:0`, `pid:42`),
//! `label` its name (a process's `comm`) or empty. There is one column per metric
//! seen anywhere in the recording, sorted by name; a cell is empty where the
//! metric was not sampled for that scope in that tick (event-set rotation leaves
//! most hardware cells empty). The last column, `multiplexed`, lists the metrics
//! of the row whose value was scaled from a multiplexed counter, separated by `;`
//! (empty when none was).
//!
//! The CSV writer and reader (`CsvWriter`, `write_csv`, `read_csv`,
//! `read_csv_from`) need the crate feature **`csv`** (off by default: it adds
//! the `csv` and `csv-core` crates); the JSON-lines format is always built.

use crate::time::format_rfc3339;
use crate::{Frame, Timestamp};
#[cfg(feature = "csv")]
use crate::{MetricName, Scope};
use serde::{Deserialize, Serialize};
#[cfg(feature = "csv")]
use std::collections::{BTreeMap, BTreeSet};
#[cfg(feature = "csv")]
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// The schema of JSON-lines recordings this version writes and reads.
pub const SCHEMA: &str = "hwqos.recording/1";

/// Longest line a reader accepts (64 MiB: a frame of thousands of scopes fits).
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// Which counter backend produced a recording's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordedBackend {
    /// The kernel's perf_event subsystem.
    Perf,
    /// The deterministic simulator (tests).
    Simulated,
}

/// Whether a recording's counters are hardware (PMU) events, kernel software
/// events, both, or neither (only OS / application metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterClass {
    /// Only kernel software events (`sw.*`): what a VM without a PMU gives.
    Software,
    /// Only PMU hardware events (`hw.*`).
    Hardware,
    /// Both hardware and software events.
    Mixed,
    /// No counters at all: only OS (procfs), application or derived metrics.
    None,
}

impl CounterClass {
    /// Classifies by the families of the metrics in `frames` (`hw.*` are hardware,
    /// `sw.*` software).
    pub fn of<'a>(frames: impl IntoIterator<Item = &'a Frame>) -> CounterClass {
        CounterClass::of_families(
            frames
                .into_iter()
                .flat_map(|f| &f.samples)
                .map(|s| s.metric.family()),
        )
    }

    /// Classifies by metric families (`hw` hardware, `sw` software, others
    /// neither): the one classification behind [`CounterClass::of`] and the
    /// CLI's, which classifies the events it is about to open.
    pub fn of_families<'a>(families: impl IntoIterator<Item = &'a str>) -> CounterClass {
        let (mut hw, mut sw) = (false, false);
        for family in families {
            match family {
                "hw" => hw = true,
                "sw" => sw = true,
                _ => {}
            }
            if hw && sw {
                break;
            }
        }
        match (hw, sw) {
            (true, true) => CounterClass::Mixed,
            (true, false) => CounterClass::Hardware,
            (false, true) => CounterClass::Software,
            (false, false) => CounterClass::None,
        }
    }
}

/// The first line of a JSON-lines recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordingHeader {
    /// Always [`SCHEMA`] when written by this version.
    pub schema: String,
    /// Host name of the node the frames were sampled on.
    pub node: String,
    /// When sampling started (both clocks).
    pub started: Timestamp,
    /// `started` as RFC 3339 UTC, for humans.
    #[serde(default)]
    pub started_utc: String,
    /// Configured sampling rate.
    pub rate_hz: f64,
    /// Which counter backend produced the counts.
    pub backend: RecordedBackend,
    /// Which kinds of counters the frames hold, so a reader knows whether
    /// `hw.*` numbers can be expected (see [`CounterClass::of`]).
    pub counters: CounterClass,
    /// The event sets that were rotated (as configured names).
    #[serde(default)]
    pub event_sets: Vec<Vec<String>>,
    /// The tool and version that wrote the file (`hwqos-monitor 0.1.0`).
    #[serde(default)]
    pub writer: String,
}

impl RecordingHeader {
    /// A header for this schema with the human-readable start time filled in.
    pub fn new(
        node: impl Into<String>,
        started: Timestamp,
        rate_hz: f64,
        backend: RecordedBackend,
        counters: CounterClass,
    ) -> RecordingHeader {
        RecordingHeader {
            schema: SCHEMA.to_string(),
            node: node.into(),
            started,
            started_utc: format_rfc3339(started.wall_ns),
            rate_hz,
            backend,
            counters,
            event_sets: Vec::new(),
            writer: String::new(),
        }
    }
}

/// A recording read back: its header and frames in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct Recording {
    /// The first line of the file.
    pub header: RecordingHeader,
    /// Every whole frame, in file order (blank lines are skipped).
    pub frames: Vec<Frame>,
    /// The line (1-based) of an incomplete last frame that was left out: what a writer
    /// killed in the middle of a frame leaves behind. Readers warn about it;
    /// every whole frame before it is in `frames`.
    pub truncated_at: Option<usize>,
}

/// Why a recording could not be read.
///
/// Every variant carries the `path` the caller gave (for a reader, the name
/// passed to [`read_recording_from`] or `read_csv_from`) and, where one
/// line is at fault, its 1-based `line` number, so the message locates the
/// problem.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// Opening or reading the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The recording.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The file has no lines at all, so no header.
    #[error("{path}: empty file (expected a `{SCHEMA}` header line)")]
    Empty {
        /// The recording.
        path: PathBuf,
    },
    /// A line (or a CSV record) is longer than [`MAX_LINE_BYTES`]; reading
    /// stops there rather than buffering it.
    #[error("{path}:{line}: line is longer than {limit} bytes")]
    LineTooLong {
        /// The recording.
        path: PathBuf,
        /// The 1-based line where the over-long line starts.
        line: usize,
        /// The limit that was exceeded, in bytes.
        limit: usize,
    },
    /// The first line is not JSON, has no `schema` field or lacks a header
    /// field.
    #[error("{path}:1: not a recording header: {message}")]
    BadHeader {
        /// The recording.
        path: PathBuf,
        /// What is wrong with it (serde's message).
        message: String,
    },
    /// The header names a schema other than [`SCHEMA`] (a newer or older
    /// format).
    #[error("{path}: unsupported schema `{found}` (this version reads `{SCHEMA}`)")]
    UnknownSchema {
        /// The recording.
        path: PathBuf,
        /// The schema the header names.
        found: String,
    },
    /// A frame line that is not a valid frame and is not the last line (a bad
    /// last line is a truncation, reported in [`Recording::truncated_at`]).
    #[error("{path}:{line}: bad frame: {message}")]
    BadFrame {
        /// The recording.
        path: PathBuf,
        /// The 1-based line of the bad frame.
        line: usize,
        /// What is wrong with it (serde's message).
        message: String,
    },
    /// A CSV recording with a bad header, a row of the wrong width, an
    /// unparsable cell, non-UTF-8 text or an unterminated quote.
    #[error("{path}:{line}: bad CSV: {message}")]
    BadCsv {
        /// The recording.
        path: PathBuf,
        /// The 1-based line where the bad record starts.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
}

/// Writes a JSON-lines recording: the header on construction, then one frame per line.
pub struct RecordingWriter<W: Write> {
    out: W,
    frames: u64,
}

impl<W: Write> RecordingWriter<W> {
    /// Starts a recording by writing `header`.
    pub fn new(mut out: W, header: &RecordingHeader) -> io::Result<RecordingWriter<W>> {
        serde_json::to_writer(&mut out, header)?;
        out.write_all(b"\n")?;
        Ok(RecordingWriter { out, frames: 0 })
    }

    /// Appends one frame.
    pub fn write_frame(&mut self, frame: &Frame) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, frame)?;
        self.out.write_all(b"\n")?;
        self.frames += 1;
        Ok(())
    }

    /// Frames written so far.
    pub fn frames_written(&self) -> u64 {
        self.frames
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads one `\n`-terminated line of at most `limit` bytes into `buf` (without the
/// terminator). `Ok(false)` at end of input; `Err(None)` if the line is too long.
fn read_bounded_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    limit: usize,
) -> Result<bool, Option<io::Error>> {
    buf.clear();
    let n = reader
        .by_ref()
        .take(limit as u64 + 1)
        .read_until(b'\n', buf)
        .map_err(Some)?;
    if n == 0 {
        return Ok(false);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    } else if n > limit {
        return Err(None);
    }
    Ok(true)
}

/// Reads a JSON-lines recording from a file.
pub fn read_recording(path: impl AsRef<Path>) -> Result<Recording, RecordingError> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|source| RecordingError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    read_recording_from(BufReader::new(file), path)
}

/// Reads a JSON-lines recording from any reader; `path` names it in errors.
pub fn read_recording_from(
    mut reader: impl BufRead,
    path: &Path,
) -> Result<Recording, RecordingError> {
    let p = || path.to_path_buf();
    let mut buf = Vec::new();
    let mut line = 0usize;
    let mut next = |buf: &mut Vec<u8>, line: &mut usize| -> Result<bool, RecordingError> {
        *line += 1;
        read_bounded_line(&mut reader, buf, MAX_LINE_BYTES).map_err(|e| match e {
            Some(source) => RecordingError::Io { path: p(), source },
            None => RecordingError::LineTooLong {
                path: p(),
                line: *line,
                limit: MAX_LINE_BYTES,
            },
        })
    };
    if !next(&mut buf, &mut line)? {
        return Err(RecordingError::Empty { path: p() });
    }
    // Check the schema before the rest of the header so a future version's header
    // is reported as a version mismatch, not as a missing field.
    let value: serde_json::Value =
        serde_json::from_slice(&buf).map_err(|e| RecordingError::BadHeader {
            path: p(),
            message: e.to_string(),
        })?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(SCHEMA) => {}
        Some(other) => {
            return Err(RecordingError::UnknownSchema {
                path: p(),
                found: other.to_string(),
            })
        }
        None => {
            return Err(RecordingError::BadHeader {
                path: p(),
                message: "no `schema` field".to_string(),
            })
        }
    }
    let header: RecordingHeader =
        serde_json::from_value(value).map_err(|e| RecordingError::BadHeader {
            path: p(),
            message: e.to_string(),
        })?;
    let mut frames = Vec::new();
    while next(&mut buf, &mut line)? {
        if buf.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        match serde_json::from_slice::<Frame>(&buf) {
            Ok(frame) => frames.push(frame),
            Err(e) => {
                let bad_line = line;
                // A bad last line is a frame cut short by a killed writer;
                // a bad line with more after it is damage, and an error.
                if next(&mut buf, &mut line)? {
                    return Err(RecordingError::BadFrame {
                        path: p(),
                        line: bad_line,
                        message: e.to_string(),
                    });
                }
                return Ok(Recording {
                    header,
                    frames,
                    truncated_at: Some(bad_line),
                });
            }
        }
    }
    Ok(Recording {
        header,
        frames,
        truncated_at: None,
    })
}

/// The fixed leading columns of the CSV format.
pub const CSV_FIXED_COLUMNS: &[&str] = &["seq", "mono_ns", "wall_time", "scope", "label"];

/// Writes frames as CSV (one row per scope per tick; see the module docs).
/// Needs the crate feature `csv`.
/// Needs the frames twice (once for the header's metric columns); where frames
/// are produced one at a time, use [`CsvWriter`] with the metric list.
#[cfg(feature = "csv")]
pub fn write_csv<'a, W, I>(out: W, frames: I) -> io::Result<W>
where
    W: Write,
    I: IntoIterator<Item = &'a Frame> + Clone,
{
    let metrics: BTreeSet<MetricName> = frames
        .clone()
        .into_iter()
        .flat_map(|f| f.samples.iter().map(|s| s.metric.clone()))
        .collect();
    let mut writer = CsvWriter::new(out, metrics)?;
    for frame in frames {
        writer.write_frame(frame)?;
    }
    writer.finish()
}

/// A streaming CSV writer: the header is written from a known set of metric
/// columns, then frames one at a time (a metric outside the set is left out).
///
/// Rows are written by the `csv` crate (RFC 4180 quoting, `\n` line ends).
/// Every row of a frame has reached `out` when [`CsvWriter::write_frame`]
/// returns (the monitor moves whole rows from it to its segment files), but
/// `out` is flushed only by [`CsvWriter::finish`].
///
/// Needs the crate feature `csv`.
#[cfg(feature = "csv")]
pub struct CsvWriter<W: Write> {
    out: csv::Writer<NoFlush<W>>,
    column: BTreeMap<MetricName, usize>,
    cells: Vec<Option<f64>>,
    /// One numeric field, formatted.
    field: String,
}

/// Passes writes on and ignores flushes: the `csv` writer's `flush` hands
/// its buffer over (what [`CsvWriter`] needs after each frame) and would
/// otherwise also flush `out` (a `write(2)` per frame for a `BufWriter`).
#[cfg(feature = "csv")]
struct NoFlush<W>(W);

#[cfg(feature = "csv")]
impl<W: Write> Write for NoFlush<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.write(bytes)
    }
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A `csv` crate error while writing: an I/O error of `out` (records are
/// never checked for length here, nor serialized).
#[cfg(feature = "csv")]
fn csv_io(e: csv::Error) -> io::Error {
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => io::Error::other(format!("writing CSV: {other:?}")),
    }
}

#[cfg(feature = "csv")]
impl<W: Write> CsvWriter<W> {
    /// Writes the header with one column per metric, in sorted order.
    pub fn new(out: W, metrics: impl IntoIterator<Item = MetricName>) -> io::Result<Self> {
        let metrics: BTreeSet<MetricName> = metrics.into_iter().collect();
        let mut out = csv::WriterBuilder::new()
            .terminator(csv::Terminator::Any(b'\n'))
            .flexible(true)
            .from_writer(NoFlush(out));
        let header = CSV_FIXED_COLUMNS
            .iter()
            .copied()
            .chain(metrics.iter().map(MetricName::as_str))
            .chain(["multiplexed"]);
        out.write_record(header).map_err(csv_io)?;
        out.flush()?;
        Ok(CsvWriter {
            out,
            cells: vec![None; metrics.len()],
            column: metrics
                .into_iter()
                .enumerate()
                .map(|(i, m)| (m, i))
                .collect(),
            field: String::new(),
        })
    }

    /// Writes `value` (`Display`) as the next field of the row.
    fn display_field(&mut self, value: impl std::fmt::Display) -> io::Result<()> {
        self.field.clear();
        let _ = write!(self.field, "{value}");
        self.out.write_field(&self.field).map_err(csv_io)
    }

    /// Writes one row per scope of `frame`.
    pub fn write_frame(&mut self, frame: &Frame) -> io::Result<()> {
        let wall = format_rfc3339(frame.time.wall_ns);
        for scope in frame.scopes() {
            self.cells.iter_mut().for_each(|c| *c = None);
            let mut multiplexed: Vec<&str> = Vec::new();
            for s in frame.samples.iter().filter(|s| &s.scope == scope) {
                if let Some(&i) = self.column.get(&s.metric) {
                    self.cells[i] = Some(s.value);
                }
                if s.multiplexed() {
                    multiplexed.push(s.metric.as_str());
                }
            }
            self.display_field(frame.seq)?;
            self.display_field(frame.time.mono_ns)?;
            self.out.write_field(&wall).map_err(csv_io)?;
            self.display_field(scope)?;
            let label = frame.label(scope).unwrap_or("");
            self.out.write_field(label).map_err(csv_io)?;
            for i in 0..self.cells.len() {
                match self.cells[i] {
                    Some(v) => self.display_field(v)?,
                    None => self.out.write_field("").map_err(csv_io)?,
                }
            }
            self.out
                .write_field(multiplexed.join(";"))
                .map_err(csv_io)?;
            // An empty record ends the row.
            self.out.write_record(None::<&[u8]>).map_err(csv_io)?;
        }
        // Hand the frame's rows to `out` (not flushing it).
        self.out.flush()
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        let NoFlush(mut out) = self
            .out
            .into_inner()
            .map_err(|e| io::Error::other(e.error().to_string()))?;
        out.flush()?;
        Ok(out)
    }
}

/// One CSV row read back (crate feature `csv`).
#[cfg(feature = "csv")]
#[derive(Clone, Debug, PartialEq)]
pub struct CsvRow {
    /// The frame's sequence number ([`Frame::seq`]).
    pub seq: u64,
    /// The frame's monotonic time in nanoseconds.
    pub mono_ns: u64,
    /// The frame's wall-clock time as written (RFC 3339 UTC), not parsed.
    pub wall_time: String,
    /// The scope this row is about.
    pub scope: Scope,
    /// The scope's label (a process's `comm`); empty when it had none.
    pub label: String,
    /// The non-empty metric cells.
    pub values: BTreeMap<MetricName, f64>,
    /// Metrics whose value was scaled from a multiplexed counter.
    pub multiplexed: Vec<MetricName>,
}

/// A CSV recording read back: its metric columns and rows (crate feature
/// `csv`).
#[cfg(feature = "csv")]
#[derive(Clone, Debug, PartialEq)]
pub struct CsvTable {
    /// The metric columns of the header, in column order.
    pub metrics: Vec<MetricName>,
    /// The data rows, in file order.
    pub rows: Vec<CsvRow>,
}

/// Splits one CSV record with the `csv` crate (RFC 4180). `record` holds the
/// whole record, bounded by the caller ([`MAX_LINE_BYTES`]: the crate's
/// reader does not bound a record) and its quotes balanced.
#[cfg(feature = "csv")]
fn split_csv_record(record: &str) -> Result<Vec<String>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(record.as_bytes());
    let mut fields = csv::StringRecord::new();
    match reader.read_record(&mut fields) {
        Ok(true) => {}
        // An empty line: one empty field, which no header matches.
        Ok(false) => return Ok(vec![String::new()]),
        Err(e) => return Err(e.to_string()),
    }
    // A line break outside quotes inside what the caller took for one
    // record (a quote in the middle of a field): refuse rather than drop.
    if !matches!(reader.read_record(&mut csv::StringRecord::new()), Ok(false)) {
        return Err("a line break outside a quoted field".to_string());
    }
    Ok(fields.iter().map(str::to_string).collect())
}

/// Reads a CSV recording written by [`write_csv`].
#[cfg(feature = "csv")]
pub fn read_csv(path: impl AsRef<Path>) -> Result<CsvTable, RecordingError> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|source| RecordingError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    read_csv_from(BufReader::new(file), path)
}

/// Reads a CSV recording from any reader; `path` names it in errors.
#[cfg(feature = "csv")]
pub fn read_csv_from(mut reader: impl BufRead, path: &Path) -> Result<CsvTable, RecordingError> {
    let bad = |line: usize, message: String| RecordingError::BadCsv {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    let mut records: Vec<(usize, Vec<String>)> = Vec::new();
    // A quoted field may span lines; gather physical lines until quotes balance.
    let mut record = String::new();
    let mut record_start = 0;
    loop {
        line_no += 1;
        let more =
            read_bounded_line(&mut reader, &mut buf, MAX_LINE_BYTES).map_err(|e| match e {
                Some(source) => RecordingError::Io {
                    path: path.to_path_buf(),
                    source,
                },
                None => RecordingError::LineTooLong {
                    path: path.to_path_buf(),
                    line: line_no,
                    limit: MAX_LINE_BYTES,
                },
            })?;
        if !more {
            break;
        }
        let text = std::str::from_utf8(&buf).map_err(|e| bad(line_no, e.to_string()))?;
        if record.is_empty() {
            record_start = line_no;
        } else {
            record.push('\n');
        }
        record.push_str(text);
        if record.matches('"').count() % 2 == 0 {
            if record.len() > MAX_LINE_BYTES {
                return Err(RecordingError::LineTooLong {
                    path: path.to_path_buf(),
                    line: record_start,
                    limit: MAX_LINE_BYTES,
                });
            }
            let fields = split_csv_record(&record).map_err(|m| bad(record_start, m))?;
            records.push((record_start, fields));
            record.clear();
        }
    }
    if !record.is_empty() {
        return Err(bad(record_start, "unterminated quoted field".to_string()));
    }
    let mut records = records.into_iter();
    let (_, head) = records
        .next()
        .ok_or_else(|| bad(1, "empty file (expected a header row)".to_string()))?;
    let fixed = CSV_FIXED_COLUMNS.len();
    if head.len() < fixed + 1
        || head[..fixed] != *CSV_FIXED_COLUMNS
        || head.last().map(String::as_str) != Some("multiplexed")
    {
        return Err(bad(
            1,
            format!(
                "header must be `{},<metrics>…,multiplexed`",
                CSV_FIXED_COLUMNS.join(",")
            ),
        ));
    }
    let metrics = head[fixed..head.len() - 1]
        .iter()
        .map(|m| MetricName::new(m.as_str()).map_err(|e| bad(1, e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::new();
    for (line, fields) in records {
        if fields.len() != head.len() {
            return Err(bad(
                line,
                format!("{} fields, the header has {}", fields.len(), head.len()),
            ));
        }
        let num = |i: usize| {
            fields[i].parse::<u64>().map_err(|_| {
                bad(
                    line,
                    format!("{} `{}` is not an integer", head[i], fields[i]),
                )
            })
        };
        let scope: Scope = fields[3].parse().map_err(|e| bad(line, format!("{e}")))?;
        let mut values = BTreeMap::new();
        for (m, cell) in metrics.iter().zip(&fields[fixed..]) {
            if !cell.is_empty() {
                let v = cell
                    .parse::<f64>()
                    .map_err(|_| bad(line, format!("{m} `{cell}` is not a number")))?;
                values.insert(m.clone(), v);
            }
        }
        let multiplexed = fields[head.len() - 1]
            .split(';')
            .filter(|s| !s.is_empty())
            .map(|m| MetricName::new(m).map_err(|e| bad(line, e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        rows.push(CsvRow {
            seq: num(0)?,
            mono_ns: num(1)?,
            wall_time: fields[2].clone(),
            scope,
            label: fields[4].clone(),
            values,
            multiplexed,
        });
    }
    Ok(CsvTable { metrics, rows })
}

/// This node's host name (from the kernel), or `unknown`.
pub fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CounterReading, MetricName, Sample, Scope, ScopeLabel};
    use std::io::Cursor;

    fn m(s: &'static str) -> MetricName {
        MetricName::from_static(s)
    }

    fn frames() -> Vec<Frame> {
        let t0 = Timestamp {
            mono_ns: 1_000_000_000,
            wall_ns: 1_795_355_137_500_000_000,
        };
        let t1 = Timestamp {
            mono_ns: 1_100_000_000,
            wall_ns: 1_795_355_137_600_000_000,
        };
        let p = Scope::Process { pid: 42 };
        let c = Scope::Cpu { cpu: 1 };
        let mux = CounterReading {
            raw: 50,
            time_enabled: 100,
            time_running: 50,
        };
        vec![
            Frame {
                seq: 7,
                time: t0,
                interval_ns: 100_000_000,
                samples: vec![
                    Sample::counter(t0, p.clone(), m("hw.cycles"), mux).unwrap(),
                    Sample::gauge(t0, p.clone(), m("os.proc.cpu"), 0.5),
                    Sample::gauge(t0, c.clone(), m("os.cpu.util"), 0.25),
                ],
                labels: vec![ScopeLabel {
                    scope: p.clone(),
                    name: "a,\"b\"".into(),
                }],
            },
            Frame {
                seq: 8,
                time: t1,
                interval_ns: 100_000_000,
                samples: vec![Sample::gauge(t1, c, m("sw.page_faults"), 3.0)],
                labels: vec![],
            },
        ]
    }

    fn header() -> RecordingHeader {
        let mut h = RecordingHeader::new(
            "node1",
            Timestamp {
                mono_ns: 1,
                wall_ns: 0,
            },
            10.0,
            RecordedBackend::Simulated,
            CounterClass::of(&frames()),
        );
        h.event_sets = vec![vec!["hw.cycles".into()]];
        h
    }

    #[test]
    fn jsonl_round_trip() {
        let mut w = RecordingWriter::new(Vec::new(), &header()).unwrap();
        for f in &frames() {
            w.write_frame(f).unwrap();
        }
        assert_eq!(w.frames_written(), 2);
        let bytes = w.finish().unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with(r#"{"schema":"hwqos.recording/1","node":"node1""#),
            "{first}"
        );
        assert!(
            first.contains(r#""backend":"simulated","counters":"mixed""#),
            "{first}"
        );
        assert!(first.contains(r#""started_utc":"1970-01-01T00:00:00.000000Z""#));
        let rec = read_recording_from(Cursor::new(bytes), Path::new("r.jsonl")).unwrap();
        assert_eq!(rec.header, header());
        assert_eq!(rec.frames, frames());
    }

    #[test]
    fn jsonl_rejects_unknown_schema_and_bad_lines() {
        let e = read_recording_from(
            Cursor::new(b"{\"schema\":\"hwqos.recording/9\"}\n".to_vec()),
            Path::new("x.jsonl"),
        )
        .unwrap_err();
        assert!(
            matches!(e, RecordingError::UnknownSchema { ref found, .. } if found == "hwqos.recording/9")
        );
        assert!(e.to_string().contains("x.jsonl") && e.to_string().contains("hwqos.recording/1"));

        let e = read_recording_from(Cursor::new(Vec::new()), Path::new("x")).unwrap_err();
        assert!(matches!(e, RecordingError::Empty { .. }));

        let mut bytes = RecordingWriter::new(Vec::new(), &header())
            .unwrap()
            .finish()
            .unwrap();
        bytes.extend_from_slice(serde_json::to_string(&frames()[0]).unwrap().as_bytes());
        bytes.extend_from_slice(b"\n{\"seq\": \"nope\"}\n");
        let mut damaged = bytes.clone();
        damaged.extend_from_slice(serde_json::to_string(&frames()[0]).unwrap().as_bytes());
        damaged.push(b'\n');
        let e = read_recording_from(Cursor::new(damaged), Path::new("x")).unwrap_err();
        match e {
            RecordingError::BadFrame { line, .. } => assert_eq!(line, 3),
            other => panic!("unexpected {other}"),
        }
        // The same bad line at the end is a frame cut short: left out, noted.
        let rec = read_recording_from(Cursor::new(bytes), Path::new("x")).unwrap();
        assert_eq!((rec.frames.len(), rec.truncated_at), (1, Some(3)));
    }

    #[test]
    fn a_recording_cut_in_the_middle_of_a_frame_reads_up_to_its_last_whole_frame() {
        let mut bytes = RecordingWriter::new(Vec::new(), &header())
            .unwrap()
            .finish()
            .unwrap();
        for f in frames() {
            bytes.extend_from_slice(serde_json::to_string(&f).unwrap().as_bytes());
            bytes.push(b'\n');
        }
        let whole = read_recording_from(Cursor::new(bytes.clone()), Path::new("x")).unwrap();
        assert_eq!(whole.truncated_at, None);
        let last = serde_json::to_string(&frames()[0]).unwrap();
        for cut in [1, last.len() / 2, last.len() - 1] {
            let mut cut_bytes = bytes.clone();
            cut_bytes.extend_from_slice(&last.as_bytes()[..cut]);
            let rec = read_recording_from(Cursor::new(cut_bytes), Path::new("x")).unwrap();
            assert_eq!(rec.frames, whole.frames, "cut after {cut} bytes");
            assert_eq!(rec.truncated_at, Some(whole.frames.len() + 2));
        }
    }

    #[test]
    fn bounded_lines() {
        let mut r = Cursor::new(b"12345678\nab\n".to_vec());
        let mut buf = Vec::new();
        assert!(matches!(read_bounded_line(&mut r, &mut buf, 4), Err(None)));
        let mut r = Cursor::new(b"1234\nab".to_vec());
        assert!(read_bounded_line(&mut r, &mut buf, 4).unwrap());
        assert_eq!(buf, b"1234");
        assert!(read_bounded_line(&mut r, &mut buf, 4).unwrap());
        assert_eq!(buf, b"ab");
        assert!(!read_bounded_line(&mut r, &mut buf, 4).unwrap());
    }

    #[test]
    #[cfg(feature = "csv")]
    fn csv_layout_and_round_trip() {
        let fr = frames();
        let bytes = write_csv(Vec::new(), &fr).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "seq,mono_ns,wall_time,scope,label,hw.cycles,os.cpu.util,os.proc.cpu,sw.page_faults,multiplexed"
        );
        assert_eq!(
            lines[1],
            "7,1000000000,2026-11-22T13:45:37.500000Z,pid:42,\"a,\"\"b\"\"\",100,,0.5,,hw.cycles"
        );
        assert_eq!(
            lines[2],
            "7,1000000000,2026-11-22T13:45:37.500000Z,cpu:1,,,0.25,,,"
        );
        assert_eq!(
            lines[3],
            "8,1100000000,2026-11-22T13:45:37.600000Z,cpu:1,,,,,3,"
        );
        assert_eq!(lines.len(), 4);

        let table = read_csv_from(Cursor::new(bytes), Path::new("r.csv")).unwrap();
        assert_eq!(table.metrics.len(), 4);
        assert_eq!(table.rows.len(), 3);
        let r = &table.rows[0];
        assert_eq!((r.seq, r.mono_ns), (7, 1_000_000_000));
        assert_eq!(r.scope, Scope::Process { pid: 42 });
        assert_eq!(r.label, "a,\"b\"");
        assert_eq!(r.values.get(&m("hw.cycles")), Some(&100.0));
        assert_eq!(r.values.get(&m("os.proc.cpu")), Some(&0.5));
        assert_eq!(r.values.len(), 2);
        assert_eq!(r.multiplexed, vec![m("hw.cycles")]);
        assert_eq!(table.rows[2].values.get(&m("sw.page_faults")), Some(&3.0));
    }

    #[test]
    #[cfg(feature = "csv")]
    fn csv_errors_name_the_line() {
        let text = "seq,mono_ns,wall_time,scope,label,sw.page_faults,multiplexed\n1,2,t,cpu:0,,1,\n1,2,t,cpu:x,,1,\n";
        let e =
            read_csv_from(Cursor::new(text.as_bytes().to_vec()), Path::new("r.csv")).unwrap_err();
        assert!(matches!(e, RecordingError::BadCsv { line: 3, .. }), "{e}");
        let e = read_csv_from(Cursor::new(b"a,b\n".to_vec()), Path::new("r.csv")).unwrap_err();
        assert!(matches!(e, RecordingError::BadCsv { line: 1, .. }), "{e}");
    }

    /// Quoting both ways through the `csv` crate: a label with a comma, a
    /// quote and a line break, a cgroup scope with a comma; CRLF line ends
    /// read like LF; a stray quote that hides a line break is refused with
    /// its line, not read as two rows or dropped.
    #[test]
    #[cfg(feature = "csv")]
    fn csv_quoting_line_breaks_and_crlf() {
        let t = Timestamp {
            mono_ns: 5,
            wall_ns: 1_795_355_137_500_000_000,
        };
        let cg = Scope::Cgroup {
            path: "/a,b".into(),
        };
        let p = Scope::Process { pid: 9 };
        let frame = Frame {
            seq: 1,
            time: t,
            interval_ns: 1,
            samples: vec![
                Sample::gauge(t, cg.clone(), m("os.cpu.util"), 0.125),
                Sample::gauge(t, p.clone(), m("os.cpu.util"), 1e-7),
            ],
            labels: vec![ScopeLabel {
                scope: p.clone(),
                name: "x,\"y\"\nz".into(),
            }],
        };
        let bytes = write_csv(Vec::new(), [&frame]).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert_eq!(
            text,
            "seq,mono_ns,wall_time,scope,label,os.cpu.util,multiplexed\n\
             1,5,2026-11-22T13:45:37.500000Z,\"cgroup:/a,b\",,0.125,\n\
             1,5,2026-11-22T13:45:37.500000Z,pid:9,\"x,\"\"y\"\"\nz\",0.0000001,\n"
        );
        let table = read_csv_from(Cursor::new(bytes), Path::new("r.csv")).unwrap();
        assert_eq!(table.rows.len(), 2);
        assert_eq!(table.rows[0].scope, cg);
        assert_eq!(table.rows[1].label, "x,\"y\"\nz");
        assert_eq!(table.rows[1].values.get(&m("os.cpu.util")), Some(&1e-7));

        let crlf = text.replace('\n', "\r\n");
        let table = read_csv_from(Cursor::new(crlf.into_bytes()), Path::new("r.csv")).unwrap();
        assert_eq!(table.rows.len(), 2);
        assert_eq!(table.rows[0].scope, cg);

        // `a"b` then `c"d`: the quotes balance over two lines, but neither
        // opens a quoted field, so the line break ends a record.
        let stray = "seq,mono_ns,wall_time,scope,label,sw.page_faults,multiplexed\n\
                     1,2,t,cpu:0,a\"b\nc\"d,1,\n";
        let e =
            read_csv_from(Cursor::new(stray.as_bytes().to_vec()), Path::new("r.csv")).unwrap_err();
        assert!(matches!(e, RecordingError::BadCsv { line: 2, .. }), "{e}");
        assert!(
            e.to_string().contains("line break outside a quoted field"),
            "{e}"
        );
    }
}
