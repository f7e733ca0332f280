//! Application performance metrics — the thesis' *x* (sections 5.2.5 and 8.3.1) —
//! collected next to the counters and stamped on the same monotonic time base.
//!
//! Three kinds of [`AppSource`], each served by its own thread:
//!
//! - `tail_file`: follows a file of `TIMESTAMP VALUE` lines (wall-clock seconds as
//!   a float, or `-` for "now"), like `tail -F`: the file may not exist yet, may be
//!   truncated or rotated. Lines already in the file at start are skipped unless
//!   `from_start` is set. Wall time is converted to the monotonic base with the
//!   offset between the two clocks at the moment the line is read.
//! - `socket`: a Unix **stream** socket; any number of clients (up to
//!   [`MAX_CLIENTS`] at once) write newline-terminated lines `METRIC VALUE [SCOPE]`,
//!   e.g. `app.rtt_us 153 pid:1234` (scope defaults to `system`). Lines longer than
//!   [`MAX_LINE`] bytes, unknown metric families and unparsable values are rejected
//!   line by line and counted. A stale socket file is replaced on start; the socket
//!   is removed on stop.
//! - `command`: runs a command every `every_ms` milliseconds and takes the first
//!   number on its standard output; a command that runs longer than its timeout is
//!   killed with its whole process group.
//!
//! Everything lands in one bounded queue: when it is full the oldest sample is
//! dropped and counted, so a stalled reader never blocks a source. Application
//! metric names must be in the `app` family.

use crate::PmuError;
use hwqos_core::{MetricName, Sample, Scope, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest accepted line, in bytes, for the socket and tailed files.
pub const MAX_LINE: usize = 4096;
/// Most socket clients served at once; further connections are closed at once.
pub const MAX_CLIENTS: usize = 64;
/// Default bound of the sample queue.
pub const DEFAULT_QUEUE: usize = 10_000;
/// Most bytes of a command's output that are looked at.
const MAX_OUTPUT: usize = 64 * 1024;
/// How often blocked threads look at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(20);
/// A malformed-input warning is logged for the first occurrence and then every this many.
const LOG_EVERY: u64 = 1000;

fn system_scope() -> Scope {
    Scope::System
}

fn default_poll_ms() -> u64 {
    100
}

/// Where application metrics come from (serde: tagged by `type`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum AppSource {
    /// Follow a file of `TIMESTAMP VALUE` lines.
    TailFile {
        /// The file to follow; it may not exist yet and may be rotated.
        path: PathBuf,
        /// The metric the values are published as (in the `app` family).
        metric: MetricName,
        /// Scope in text form (`system`, `pid:1234`, …); default `system`.
        #[serde(default = "system_scope", with = "scope_text")]
        scope: Scope,
        /// Also read the lines the file holds when the source starts.
        #[serde(default)]
        from_start: bool,
        /// How often to look for new data, in ms (default 100).
        #[serde(default = "default_poll_ms")]
        poll_ms: u64,
    },
    /// Accept `METRIC VALUE [SCOPE]` lines on a Unix stream socket.
    Socket {
        /// Where the socket is bound; a stale file there is replaced.
        path: PathBuf,
    },
    /// Run a command periodically and take the first number it prints.
    Command {
        /// Program and arguments, run directly (no shell); must name a program.
        argv: Vec<String>,
        /// Interval between runs, in ms (at least 1).
        every_ms: u64,
        /// The metric the number is published as (in the `app` family).
        metric: MetricName,
        /// Scope in text form (`system`, `pid:1234`, …); default `system`.
        #[serde(default = "system_scope", with = "scope_text")]
        scope: Scope,
        /// Kill the command after this many ms (default: `every_ms`, at least 1000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
}

/// Serializes a [`Scope`] as its text form (`pid:1234`), which reads well in TOML.
mod scope_text {
    use hwqos_core::Scope;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(scope: &Scope, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(scope)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Scope, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Tuning of [`AppMetrics`].
#[derive(Clone, Debug)]
pub struct AppOptions {
    /// Most samples held between two [`AppMetrics::drain`] calls.
    pub queue_capacity: usize,
}

impl Default for AppOptions {
    fn default() -> Self {
        AppOptions {
            queue_capacity: DEFAULT_QUEUE,
        }
    }
}

/// Counts of what the sources did since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppStats {
    /// Samples accepted into the queue.
    pub received: u64,
    /// Samples dropped because the queue was full (the oldest go first).
    pub dropped: u64,
    /// Lines rejected as malformed (bad number, bad metric or scope, too long).
    pub rejected: u64,
    /// Command runs that failed, timed out or printed no number.
    pub command_failures: u64,
    /// Socket connections refused because [`MAX_CLIENTS`] were connected.
    pub refused_clients: u64,
}

#[derive(Default)]
struct Counters {
    received: AtomicU64,
    dropped: AtomicU64,
    rejected: AtomicU64,
    command_failures: AtomicU64,
    refused_clients: AtomicU64,
}

struct Shared {
    queue: Mutex<VecDeque<Sample>>,
    capacity: usize,
    stop: AtomicBool,
    counters: Counters,
}

impl Shared {
    fn push(&self, sample: Sample) {
        let mut q = match self.queue.lock() {
            Ok(q) => q,
            Err(poisoned) => poisoned.into_inner(),
        };
        while q.len() >= self.capacity {
            q.pop_front();
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(sample);
        self.counters.received.fetch_add(1, Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleeps until `deadline` or until stopped; false if stopped.
    fn sleep_until(&self, deadline: Instant) -> bool {
        loop {
            if self.stopped() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            std::thread::sleep((deadline - now).min(STOP_CHECK));
        }
    }

    fn reject(&self, log: &mut Complaints, what: std::fmt::Arguments<'_>) {
        self.counters.rejected.fetch_add(1, Ordering::Relaxed);
        log.note(what);
    }
}

/// Logs malformed input without flooding: the first time, then every [`LOG_EVERY`].
struct Complaints {
    source: String,
    count: u64,
}

impl Complaints {
    fn new(source: String) -> Self {
        Complaints { source, count: 0 }
    }

    fn note(&mut self, what: std::fmt::Arguments<'_>) {
        self.count += 1;
        if self.count == 1 || self.count % LOG_EVERY == 0 {
            tracing::warn!("{}: {what} ({} so far)", self.source, self.count);
        }
    }
}

/// The running application-metric sources.
pub struct AppMetrics {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl AppMetrics {
    /// Starts one thread per source with the default options.
    pub fn start(sources: &[AppSource]) -> Result<AppMetrics, PmuError> {
        Self::start_with(sources, AppOptions::default())
    }

    /// Starts one thread per source. Fails, with nothing left running, if a source
    /// is misconfigured or its socket cannot be bound.
    pub fn start_with(sources: &[AppSource], options: AppOptions) -> Result<AppMetrics, PmuError> {
        if options.queue_capacity == 0 {
            return Err(PmuError::Config(
                "app metric queue capacity must be at least 1".into(),
            ));
        }
        for s in sources {
            validate(s)?;
        }
        let mut me = AppMetrics {
            shared: Arc::new(Shared {
                queue: Mutex::new(VecDeque::new()),
                capacity: options.queue_capacity,
                stop: AtomicBool::new(false),
                counters: Counters::default(),
            }),
            threads: Vec::new(),
        };
        for source in sources {
            let shared = Arc::clone(&me.shared);
            let handle = match source.clone() {
                AppSource::TailFile {
                    path,
                    metric,
                    scope,
                    from_start,
                    poll_ms,
                } => {
                    let tail = Tail::new(path, metric, scope, poll_ms);
                    // Opened here, not in the thread, so "what is there at start" is
                    // decided when start() returns.
                    let initial = tail.open(!from_start);
                    spawn("hwqos-app-tail", move || tail.run(&shared, initial))?
                }
                AppSource::Socket { path } => {
                    let listener = bind_socket(&path)?;
                    spawn("hwqos-app-sock", move || {
                        serve_socket(&shared, listener, path)
                    })?
                }
                AppSource::Command {
                    argv,
                    every_ms,
                    metric,
                    scope,
                    timeout_ms,
                } => {
                    let every = Duration::from_millis(every_ms);
                    let timeout = Duration::from_millis(timeout_ms.unwrap_or(every_ms.max(1000)));
                    spawn("hwqos-app-cmd", move || {
                        run_command_loop(&shared, &argv, every, timeout, &metric, &scope)
                    })?
                }
            };
            me.threads.push(handle);
        }
        Ok(me)
    }

    /// Takes every sample that arrived since the last call, oldest first.
    pub fn drain(&mut self) -> Vec<Sample> {
        let mut q = match self.shared.queue.lock() {
            Ok(q) => q,
            Err(poisoned) => poisoned.into_inner(),
        };
        q.drain(..).collect()
    }

    /// What the sources did so far.
    pub fn stats(&self) -> AppStats {
        let c = &self.shared.counters;
        AppStats {
            received: c.received.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            command_failures: c.command_failures.load(Ordering::Relaxed),
            refused_clients: c.refused_clients.load(Ordering::Relaxed),
        }
    }

    /// Stops every source, joins its threads and removes socket files.
    pub fn stop(self) {
        // Drop does the work.
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::error!("an application metric source thread panicked");
            }
        }
    }
}

impl Drop for AppMetrics {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, PmuError> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map_err(|e| PmuError::io(format!("starting thread {name}"), e))
}

fn require_app(metric: &MetricName, source: &str) -> Result<(), PmuError> {
    if metric.family() == "app" {
        Ok(())
    } else {
        Err(PmuError::Config(format!(
            "{source}: metric `{metric}` is not an application metric (names must start with `app.`)"
        )))
    }
}

fn validate(source: &AppSource) -> Result<(), PmuError> {
    match source {
        AppSource::TailFile {
            path,
            metric,
            poll_ms,
            ..
        } => {
            let what = format!("tail_file source {}", path.display());
            require_app(metric, &what)?;
            if *poll_ms == 0 {
                return Err(PmuError::Config(format!(
                    "{what}: poll_ms must be at least 1"
                )));
            }
        }
        AppSource::Socket { path } => {
            if path.as_os_str().is_empty() {
                return Err(PmuError::Config("socket source: empty path".into()));
            }
        }
        AppSource::Command {
            argv,
            every_ms,
            metric,
            timeout_ms,
            ..
        } => {
            let what = format!("command source {argv:?}");
            if argv.is_empty() || argv[0].is_empty() {
                return Err(PmuError::Config(format!(
                    "{what}: argv must name a program"
                )));
            }
            require_app(metric, &what)?;
            if *every_ms == 0 {
                return Err(PmuError::Config(format!(
                    "{what}: every_ms must be at least 1"
                )));
            }
            if *timeout_ms == Some(0) {
                return Err(PmuError::Config(format!(
                    "{what}: timeout_ms must be at least 1"
                )));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- line formats

/// Parses a finite number.
fn number(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// A tailed line: `TIMESTAMP VALUE`, the timestamp in wall-clock seconds or `-`.
/// `Ok(None)` for blank lines and `#` comments.
pub fn parse_tail_line(line: &str) -> Result<Option<(Option<f64>, f64)>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let f: Vec<&str> = line.split_whitespace().collect();
    let [ts, value] = f.as_slice() else {
        return Err(format!(
            "expected `TIMESTAMP VALUE`, got {} fields",
            f.len()
        ));
    };
    let ts = match *ts {
        "-" => None,
        t => Some(
            number(t)
                .ok_or_else(|| format!("timestamp `{t}` is not a number of seconds or `-`"))?,
        ),
    };
    let value = number(value).ok_or_else(|| format!("value `{value}` is not a finite number"))?;
    Ok(Some((ts, value)))
}

/// A pushed line: `METRIC VALUE [SCOPE]`. `Ok(None)` for blank lines.
pub fn parse_push_line(line: &str) -> Result<Option<(MetricName, f64, Scope)>, String> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let (metric, value, scope) = match f.as_slice() {
        [] => return Ok(None),
        [m, v] => (*m, *v, None),
        [m, v, s] => (*m, *v, Some(*s)),
        _ => {
            return Err(format!(
                "expected `METRIC VALUE [SCOPE]`, got {} fields",
                f.len()
            ))
        }
    };
    let metric = MetricName::new(metric).map_err(|e| e.to_string())?;
    if metric.family() != "app" {
        return Err(format!(
            "metric `{metric}` is not an application metric (app.*)"
        ));
    }
    let value = number(value).ok_or_else(|| format!("value `{value}` is not a finite number"))?;
    let scope = match scope {
        None => Scope::System,
        Some(s) => s
            .parse()
            .map_err(|e: hwqos_core::scope::ScopeParseError| e.to_string())?,
    };
    Ok(Some((metric, value, scope)))
}

/// The timestamp for wall-clock seconds, on both clocks, using the current offset
/// between them. `None` for times before boot or out of range.
pub fn timestamp_from_wall(wall_secs: f64) -> Option<Timestamp> {
    let now = Timestamp::now();
    let wall_ns = wall_secs * 1e9;
    if !wall_ns.is_finite() || wall_ns.abs() > i64::MAX as f64 {
        return None;
    }
    let wall_ns = wall_ns as i64;
    let mono = now.mono_ns as i128 + (wall_ns as i128 - now.wall_ns as i128);
    Some(Timestamp {
        mono_ns: u64::try_from(mono).ok()?,
        wall_ns,
    })
}

/// Splits complete lines off a byte stream, bounding line length.
struct LineBuffer {
    pending: Vec<u8>,
    /// Inside a line that was too long: drop bytes up to its end.
    discarding: bool,
}

enum Line {
    Text(String),
    TooLong,
    NotUtf8,
}

impl LineBuffer {
    fn new() -> Self {
        LineBuffer {
            pending: Vec::new(),
            discarding: false,
        }
    }

    fn feed(&mut self, mut data: &[u8], out: &mut Vec<Line>) {
        while !data.is_empty() {
            let nl = data.iter().position(|&b| b == b'\n');
            let (chunk, rest, complete) = match nl {
                Some(i) => (&data[..i], &data[i + 1..], true),
                None => (data, &[][..], false),
            };
            data = rest;
            if !self.discarding {
                self.pending.extend_from_slice(chunk);
                if self.pending.len() > MAX_LINE {
                    self.pending.clear();
                    self.discarding = true;
                    out.push(Line::TooLong);
                }
            }
            if complete {
                if !self.discarding {
                    out.push(Self::decode(std::mem::take(&mut self.pending)));
                }
                self.discarding = false;
            }
        }
    }

    /// The last line of a stream that did not end in a newline.
    fn finish(&mut self) -> Option<Line> {
        let rest = std::mem::take(&mut self.pending);
        let was_discarding = std::mem::replace(&mut self.discarding, false);
        (!rest.is_empty() && !was_discarding).then(|| Self::decode(rest))
    }

    fn clear(&mut self) {
        self.pending.clear();
        self.discarding = false;
    }

    fn decode(bytes: Vec<u8>) -> Line {
        match String::from_utf8(bytes) {
            Ok(s) => Line::Text(s),
            Err(_) => Line::NotUtf8,
        }
    }
}

// ---------------------------------------------------------------- tail_file

struct Tail {
    path: PathBuf,
    metric: MetricName,
    scope: Scope,
    poll: Duration,
}

/// The file being followed: the open handle, its identity and how far it was read.
struct Followed {
    file: std::fs::File,
    dev: u64,
    ino: u64,
    pos: u64,
}

impl Tail {
    fn new(path: PathBuf, metric: MetricName, scope: Scope, poll_ms: u64) -> Tail {
        Tail {
            path,
            metric,
            scope,
            poll: Duration::from_millis(poll_ms),
        }
    }

    /// Follows the file until stopped. `current` is the file as opened at start
    /// (positioned at its end unless `from_start`); files that appear later
    /// (created, rotated in) are read from their beginning.
    fn run(self, shared: &Shared, mut current: Option<Followed>) {
        let mut log = Complaints::new(format!("tail_file {}", self.path.display()));
        let mut lines = LineBuffer::new();
        loop {
            if current.is_none() {
                current = self.open(false);
                lines.clear();
            }
            if let Some(f) = current.as_mut() {
                self.read_new(f, &mut lines, shared, &mut log);
                // Rotated: a different file now lives at the path. The old one was
                // read to its end above; continue with the new one at once.
                if let Ok(meta) = std::fs::metadata(&self.path) {
                    if (meta.dev(), meta.ino()) != (f.dev, f.ino) {
                        current = None;
                        continue;
                    }
                }
            }
            if !shared.sleep_until(Instant::now() + self.poll) {
                return;
            }
        }
    }

    fn open(&self, at_end: bool) -> Option<Followed> {
        let mut file = std::fs::File::open(&self.path).ok()?;
        let meta = file.metadata().ok()?;
        let pos = if at_end { meta.len() } else { 0 };
        file.seek(SeekFrom::Start(pos)).ok()?;
        Some(Followed {
            file,
            dev: meta.dev(),
            ino: meta.ino(),
            pos,
        })
    }

    fn read_new(
        &self,
        f: &mut Followed,
        lines: &mut LineBuffer,
        shared: &Shared,
        log: &mut Complaints,
    ) {
        let Ok(meta) = f.file.metadata() else { return };
        if meta.len() < f.pos {
            // Truncated in place (`> file`, logrotate copytruncate): start over.
            if f.file.seek(SeekFrom::Start(0)).is_err() {
                return;
            }
            f.pos = 0;
            lines.clear();
        }
        let mut buf = [0u8; 16 * 1024];
        let mut out = Vec::new();
        loop {
            match f.file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    f.pos += n as u64;
                    lines.feed(&buf[..n], &mut out);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log.note(format_args!("read error: {e}"));
                    break;
                }
            }
        }
        for line in out {
            self.take(line, shared, log);
        }
    }

    fn take(&self, line: Line, shared: &Shared, log: &mut Complaints) {
        let text = match line {
            Line::Text(t) => t,
            Line::TooLong => {
                return shared.reject(log, format_args!("line longer than {MAX_LINE} bytes"))
            }
            Line::NotUtf8 => return shared.reject(log, format_args!("line is not UTF-8")),
        };
        match parse_tail_line(&text) {
            Ok(None) => {}
            Ok(Some((ts, value))) => {
                let time = match ts {
                    None => Some(Timestamp::now()),
                    Some(secs) => timestamp_from_wall(secs),
                };
                match time {
                    Some(time) => shared.push(Sample::gauge(
                        time,
                        self.scope.clone(),
                        self.metric.clone(),
                        value,
                    )),
                    None => shared.reject(
                        log,
                        format_args!("timestamp in `{text}` is before boot or out of range"),
                    ),
                }
            }
            Err(why) => shared.reject(log, format_args!("bad line `{}`: {why}", text.trim())),
        }
    }
}

// ---------------------------------------------------------------- socket

/// Binds the socket, replacing a stale socket file but never a live socket or
/// anything that is not a socket.
fn bind_socket(path: &Path) -> Result<UnixListener, PmuError> {
    let what = format!("app metric socket {}", path.display());
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(PmuError::Config(format!(
                "{what}: the path exists and is not a socket; refusing to replace it"
            )));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(PmuError::Config(format!(
                "{what}: another process is listening on it"
            )));
        }
        std::fs::remove_file(path)
            .map_err(|e| PmuError::io(format!("removing stale {what}"), e))?;
    }
    let listener =
        UnixListener::bind(path).map_err(|e| PmuError::io(format!("binding {what}"), e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| PmuError::io(format!("configuring {what}"), e))?;
    Ok(listener)
}

fn serve_socket(shared: &Arc<Shared>, listener: UnixListener, path: PathBuf) {
    let identity = std::fs::metadata(&path).ok().map(|m| (m.dev(), m.ino()));
    let mut clients: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stopped() {
        match listener.accept() {
            Ok((stream, _)) => {
                clients.retain(|c| !c.is_finished());
                if clients.len() >= MAX_CLIENTS {
                    shared
                        .counters
                        .refused_clients
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let shared = Arc::clone(shared);
                let name = path.display().to_string();
                match spawn("hwqos-app-client", move || {
                    serve_client(&shared, stream, name)
                }) {
                    Ok(h) => clients.push(h),
                    Err(e) => tracing::warn!("{e}"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(STOP_CHECK),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!("app metric socket {}: accept: {e}", path.display());
                std::thread::sleep(STOP_CHECK);
            }
        }
    }
    for c in clients {
        let _ = c.join();
    }
    // Remove the socket only if it is still ours (not replaced by someone else).
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        if Some((meta.dev(), meta.ino())) == identity {
            let _ = std::fs::remove_file(&path);
        }
    }
}

fn serve_client(shared: &Shared, mut stream: UnixStream, socket: String) {
    let mut log = Complaints::new(format!("app metric socket {socket}"));
    if stream.set_nonblocking(false).is_err() || stream.set_read_timeout(Some(STOP_CHECK)).is_err()
    {
        return;
    }
    let mut lines = LineBuffer::new();
    let mut buf = [0u8; 4096];
    let mut out = Vec::new();
    while !shared.stopped() {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => lines.feed(&buf[..n], &mut out),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
        for line in out.drain(..) {
            take_pushed(shared, line, &mut log);
        }
    }
    if let Some(line) = lines.finish() {
        take_pushed(shared, line, &mut log);
    }
}

fn take_pushed(shared: &Shared, line: Line, log: &mut Complaints) {
    let text = match line {
        Line::Text(t) => t,
        Line::TooLong => {
            return shared.reject(log, format_args!("line longer than {MAX_LINE} bytes"))
        }
        Line::NotUtf8 => return shared.reject(log, format_args!("line is not UTF-8")),
    };
    match parse_push_line(&text) {
        Ok(None) => {}
        Ok(Some((metric, value, scope))) => {
            shared.push(Sample::gauge(Timestamp::now(), scope, metric, value))
        }
        Err(why) => shared.reject(log, format_args!("bad line `{}`: {why}", text.trim())),
    }
}

// ---------------------------------------------------------------- command

/// The first number in a command's output (`153`, `-2.5`, `1e3`, `.5`).
pub fn first_number(text: &str) -> Option<f64> {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let re = RE
        .get_or_init(|| regex::Regex::new(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?").ok())
        .as_ref()?;
    re.find_iter(text).find_map(|m| number(m.as_str()))
}

fn run_command_loop(
    shared: &Shared,
    argv: &[String],
    every: Duration,
    timeout: Duration,
    metric: &MetricName,
    scope: &Scope,
) {
    let mut log = Complaints::new(format!("command {argv:?}"));
    let mut next = Instant::now();
    loop {
        if !shared.sleep_until(next) {
            return;
        }
        match run_once(shared, argv, timeout) {
            Ok(Some(value)) => shared.push(Sample::gauge(
                Timestamp::now(),
                scope.clone(),
                metric.clone(),
                value,
            )),
            Ok(None) => return, // stopped while running
            Err(why) => {
                shared
                    .counters
                    .command_failures
                    .fetch_add(1, Ordering::Relaxed);
                log.note(format_args!("{why}"));
            }
        }
        // Keep the period on absolute deadlines; skip runs missed while the command ran.
        next += every;
        let now = Instant::now();
        if next < now {
            let behind = (now - next).as_nanos() / every.as_nanos().max(1) + 1;
            next += every * u32::try_from(behind).unwrap_or(u32::MAX);
        }
    }
}

/// Runs the command once. `Ok(None)`: stopped meanwhile (the command was killed).
fn run_once(shared: &Shared, argv: &[String], timeout: Duration) -> Result<Option<f64>, String> {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run: {e}"))?;
    let Some(mut stdout) = child.stdout.take() else {
        kill_group(&mut child);
        return Err("no stdout pipe".into());
    };
    // Read on a helper thread so a chatty command never blocks on a full pipe.
    let reader = std::thread::Builder::new()
        .name("hwqos-app-cmd-out".into())
        .spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let room = MAX_OUTPUT.saturating_sub(kept.len());
                        kept.extend_from_slice(&buf[..n.min(room)]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            kept
        });
    let reader = match reader {
        Ok(r) => r,
        Err(e) => {
            kill_group(&mut child);
            return Err(format!("cannot start output reader: {e}"));
        }
    };
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(e) => {
                kill_group(&mut child);
                let _ = reader.join();
                return Err(format!("waiting for it failed: {e}"));
            }
        }
        if shared.stopped() || Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Kill the group even after a clean exit: background children would keep the pipe open.
    kill_group(&mut child);
    let output = reader.join().unwrap_or_default();
    let Some(status) = status else {
        return if shared.stopped() {
            Ok(None)
        } else {
            Err(format!(
                "killed after the {} ms timeout",
                timeout.as_millis()
            ))
        };
    };
    if !status.success() {
        return Err(format!("exited with {status}"));
    }
    let text = String::from_utf8_lossy(&output);
    first_number(&text).map(Some).ok_or_else(|| {
        format!(
            "printed no number: `{}`",
            text.trim().chars().take(80).collect::<String>()
        )
    })
}

/// Kills the child's whole process group and reaps the child.
fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}
