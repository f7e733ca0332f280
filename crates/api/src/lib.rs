//! hwqos-api: the live API of `hwqos-monitor` — the protocol it speaks on its
//! Unix socket and a blocking client for it.
//!
//! `hwqos-monitor` is the one sampler on a node: it owns the perf_event
//! counters and the `/proc` readers, and serves every tick's frame on a Unix
//! stream socket (default `/run/hwqos/monitor.sock`, mode 0660). That socket is
//! the closed-loop interface of thesis 5.4.3: other agents (the SRA agent, the
//! relay's CPU throttle, the load generator) and other services subscribe to
//! frames, fetch recent history and change the event sets being rotated,
//! instead of opening counters of their own.
//!
//! This crate is what such a client depends on, and nothing more: the
//! request/response types, the scope and metric patterns that filter frames,
//! the status the monitor reports, and [`ApiClient`], a blocking client over
//! `std::os::unix::net`. It does not pull in perf_event, an async runtime or an
//! HTTP server; its only hwqos dependency is `hwqos-core` (the frame type).
//! The server side lives in `agents/monitor`; `hwqos-pmu` re-exports this
//! crate as `hwqos_pmu::api` for older paths.
//!
//! The wire format below is the contract between the two ends and is
//! documented here, next to the types that encode it; change both together
//! and bump [`SCHEMA`] when an old client could misread a new server.
//!
//! # Wire format (schema [`SCHEMA`])
//!
//! Newline-delimited JSON, UTF-8, one object per line, both directions. A request
//! line is at most [`MAX_REQUEST_BYTES`] bytes; longer lines get an error and the
//! connection is closed.
//!
//! On connect the server sends a hello line:
//! `{"type":"hello","schema":"hwqos.api/1","node":"host","version":"0.1.0","rate_hz":10.0}`.
//! A client must check `schema` and stop if it is not one it speaks.
//!
//! Then the client sends requests, one per line, each answered before the next is read:
//!
//! | request | response lines |
//! |---|---|
//! | `{"op":"subscribe","scopes":[…],"metrics":[…]}` | `{"type":"subscribed","scopes":[…],"metrics":[…]}`, then one `{"type":"frame","frame":{…}}` per tick, forever |
//! | `{"op":"window","seconds":S}` or `{"op":"window","frames":N}` (+ `scopes`, `metrics`) | the matching recent frames as `{"type":"frame",…}` lines, oldest first, then `{"type":"end","count":N}` |
//! | `{"op":"set_event_sets","sets":[["sw.task_clock","sw.page_faults"],…]}` | `{"type":"event_sets","sets":[…],"unavailable":[{"name":…,"reason":…}]}` |
//! | `{"op":"get_event_sets"}` | `{"type":"event_sets",…}` as above |
//! | `{"op":"flush"}` | `{"type":"flushed","paths":["/var/lib/…/x.jsonl",…]}` |
//! | `{"op":"status"}` | `{"type":"status",…}` with the fields of [`MonitorStatus`] |
//!
//! Any failure is answered with `{"type":"error","message":"…"}`; the connection
//! stays usable unless the request line was too long or not UTF-8.
//!
//! **Filters.** `scopes` and `metrics` are lists of patterns; an empty or missing
//! list matches everything. A pattern is either exact (`pid:123`, `cpu:0`,
//! `system`, `sw.page_faults`) or ends in `*` and matches by prefix of the text
//! form (`cpu:*`, `pid:*`, `tid:123/*`, `cgroup:/system.slice/*`, `hw.*`, `*`).
//! Samples are kept when their scope matches any scope pattern and their metric
//! any metric pattern. A subscriber receives every tick's frame even when the
//! filter leaves it empty, so gaps in `seq` always mean missed ticks.
//!
//! **Slow subscribers.** Each subscriber has a bounded queue of frames; one that
//! falls behind by more than that is sent `{"type":"error","message":"subscriber
//! too slow: …"}` and disconnected. The sampler never waits for a client.
//!
//! A frame is the serde form of [`hwqos_core::Frame`]:
//! `{"seq":…,"time":{"mono_ns":…,"wall_ns":…},"interval_ns":…,"samples":[{"time":…,
//! "scope":{"kind":"process","pid":42},"metric":"sw.page_faults","value":12.0,
//! "counter":{"raw":12,"time_enabled":…,"time_running":…}}],"labels":[{"scope":…,"name":"nginx"}]}`.

#![deny(missing_docs)]

use hwqos_core::{Frame, Timestamp};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The protocol version this module speaks.
pub const SCHEMA: &str = "hwqos.api/1";

/// Longest request line the server accepts, in bytes.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// Longest response line the client accepts (a frame of thousands of scopes fits).
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Why a filter pattern is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} pattern `{pattern}`: {reason}")]
pub struct PatternError {
    /// Which kind of pattern (`scope` or `metric`).
    pub what: &'static str,
    /// The pattern as given.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A pattern over a text form: exact, or a prefix when it ends in `*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Pattern {
    Exact(String),
    Prefix(String),
}

impl Pattern {
    fn matches(&self, text: &str) -> bool {
        match self {
            Pattern::Exact(e) => e == text,
            Pattern::Prefix(p) => text.starts_with(p.as_str()),
        }
    }

    fn text(&self) -> String {
        match self {
            Pattern::Exact(e) => e.clone(),
            Pattern::Prefix(p) => format!("{p}*"),
        }
    }
}

/// A scope pattern: `system`, `cpu:3`, `pid:42`, `tid:42/43`, `cgroup:/a`,
/// `stream:x`, or any prefix of those text forms followed by `*` (`cpu:*`, `*`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ScopePattern(Pattern);

impl ScopePattern {
    /// Parses a scope pattern: a scope's text form (`cpu:0`), or a prefix of one ending in `*`.
    pub fn parse(s: &str) -> Result<ScopePattern, PatternError> {
        let err = |reason: String| PatternError {
            what: "scope",
            pattern: s.to_string(),
            reason,
        };
        if let Some(prefix) = s.strip_suffix('*') {
            if prefix.contains('*') {
                return Err(err("`*` is only allowed at the end".into()));
            }
            const KINDS: &[&str] = &["system", "cpu:", "pid:", "tid:", "cgroup:", "stream:"];
            let plausible = prefix.is_empty()
                || KINDS
                    .iter()
                    .any(|k| k.starts_with(prefix) || prefix.starts_with(k));
            if !plausible {
                return Err(err(
                    "no scope starts like this (scopes are system, cpu:N, pid:N, tid:P/T, cgroup:/…, stream:…)".into(),
                ));
            }
            return Ok(ScopePattern(Pattern::Prefix(prefix.to_string())));
        }
        let scope: hwqos_core::Scope = s.parse().map_err(|e| err(format!("{e}")))?;
        Ok(ScopePattern(Pattern::Exact(scope.to_string())))
    }

    /// Whether `scope` matches.
    pub fn matches(&self, scope: &hwqos_core::Scope) -> bool {
        self.0.matches(&scope.to_string())
    }
}

impl TryFrom<String> for ScopePattern {
    type Error = PatternError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        ScopePattern::parse(&s)
    }
}

impl From<ScopePattern> for String {
    fn from(p: ScopePattern) -> String {
        p.0.text()
    }
}

impl fmt::Display for ScopePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.text())
    }
}

/// A metric pattern: a metric name (`sw.page_faults`) or a prefix followed by `*`
/// (`hw.*`, `derived.cpi*`, `*`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MetricPattern(Pattern);

impl MetricPattern {
    /// Parses a metric pattern: a metric name (`sw.page_faults`), or a prefix ending in `*`.
    pub fn parse(s: &str) -> Result<MetricPattern, PatternError> {
        let err = |reason: String| PatternError {
            what: "metric",
            pattern: s.to_string(),
            reason,
        };
        if let Some(prefix) = s.strip_suffix('*') {
            let ok = prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
            if !ok {
                return Err(err(
                    "metric names use only a-z, 0-9, `_` and `.`; `*` only at the end".into(),
                ));
            }
            return Ok(MetricPattern(Pattern::Prefix(prefix.to_string())));
        }
        let name = hwqos_core::MetricName::new(s).map_err(|e| err(e.to_string()))?;
        Ok(MetricPattern(Pattern::Exact(name.as_str().to_string())))
    }

    /// Whether the metric named `metric` matches.
    pub fn matches(&self, metric: &str) -> bool {
        self.0.matches(metric)
    }
}

impl TryFrom<String> for MetricPattern {
    type Error = PatternError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        MetricPattern::parse(&s)
    }
}

impl From<MetricPattern> for String {
    fn from(p: MetricPattern) -> String {
        p.0.text()
    }
}

impl fmt::Display for MetricPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.text())
    }
}

/// Which samples a subscriber or window request wants (empty lists match all).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameFilter {
    /// Scope patterns (empty: every scope).
    #[serde(default)]
    pub scopes: Vec<ScopePattern>,
    /// Metric patterns (empty: every metric).
    #[serde(default)]
    pub metrics: Vec<MetricPattern>,
}

impl FrameFilter {
    /// A filter from pattern strings, e.g. `(&["cpu:*"], &["sw.*"])`.
    pub fn new<S: AsRef<str>, M: AsRef<str>>(
        scopes: &[S],
        metrics: &[M],
    ) -> Result<FrameFilter, PatternError> {
        Ok(FrameFilter {
            scopes: scopes
                .iter()
                .map(|s| ScopePattern::parse(s.as_ref()))
                .collect::<Result<_, _>>()?,
            metrics: metrics
                .iter()
                .map(|m| MetricPattern::parse(m.as_ref()))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Every sample of every scope (the same as `FrameFilter::default()`).
    pub fn all() -> FrameFilter {
        FrameFilter::default()
    }

    /// Every scope, these metrics: `FrameFilter::metrics(&["sw.*"])`
    /// (`FrameFilter::new(&[], &["sw.*"])` cannot infer the empty list's type).
    pub fn metrics<M: AsRef<str>>(metrics: &[M]) -> Result<FrameFilter, PatternError> {
        FrameFilter::new::<&str, M>(&[], metrics)
    }

    /// These scopes, every metric: `FrameFilter::scopes(&["cpu:*"])`.
    pub fn scopes<S: AsRef<str>>(scopes: &[S]) -> Result<FrameFilter, PatternError> {
        FrameFilter::new::<S, &str>(scopes, &[])
    }

    /// Whether the filter keeps everything.
    pub fn is_all(&self) -> bool {
        self.scopes.is_empty() && self.metrics.is_empty()
    }

    /// Whether a sample about `scope` of `metric` passes.
    pub fn matches(&self, scope: &hwqos_core::Scope, metric: &str) -> bool {
        (self.metrics.is_empty() || self.metrics.iter().any(|m| m.matches(metric)))
            && (self.scopes.is_empty() || self.scopes.iter().any(|s| s.matches(scope)))
    }

    /// A copy of `frame` with only the matching samples (and their labels).
    pub fn apply(&self, frame: &Frame) -> Frame {
        if self.is_all() {
            return frame.clone();
        }
        let mut out = Frame {
            seq: frame.seq,
            time: frame.time,
            interval_ns: frame.interval_ns,
            samples: frame
                .samples
                .iter()
                .filter(|s| self.matches(&s.scope, s.metric.as_str()))
                .cloned()
                .collect(),
            labels: Vec::new(),
        };
        out.labels = frame
            .labels
            .iter()
            .filter(|l| out.samples.iter().any(|s| s.scope == l.scope))
            .cloned()
            .collect();
        out
    }
}

/// A request line (see the module docs for the JSON form).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Stream every following frame, filtered.
    Subscribe {
        /// Scope patterns (empty: every scope).
        #[serde(default)]
        scopes: Vec<ScopePattern>,
        /// Metric patterns (empty: every metric).
        #[serde(default)]
        metrics: Vec<MetricPattern>,
    },
    /// Recent frames from the database: the last `frames` frames and/or those of
    /// the last `seconds` (both given: both limits apply; neither: all).
    Window {
        /// At most the frames of the last this many seconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seconds: Option<f64>,
        /// At most this many frames (the newest).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        frames: Option<usize>,
        /// Scope patterns (empty: every scope).
        #[serde(default)]
        scopes: Vec<ScopePattern>,
        /// Metric patterns (empty: every metric).
        #[serde(default)]
        metrics: Vec<MetricPattern>,
    },
    /// Replace the event sets rotated for every target.
    SetEventSets {
        /// The new event sets, each a list of event names.
        sets: Vec<Vec<String>>,
    },
    /// The event sets being rotated and the events dropped as unavailable.
    GetEventSets,
    /// Write the database to the output directory now.
    Flush,
    /// The monitor's state.
    Status,
}

/// An event this node cannot count, and why (the sampler drops such events
/// from its sets and reports them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnavailableEvent {
    /// The event's name as it was asked for.
    pub name: String,
    /// Why it cannot be counted (the kernel's answer, with a hint).
    pub reason: String,
}

/// Which kind of counter backend produced a number (every figure says where
/// it came from).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// The kernel's perf_event subsystem.
    Perf,
    /// The deterministic simulator (tests only).
    Simulated,
}

/// The monitor's state, as answered to `{"op":"status"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MonitorStatus {
    /// Host name.
    pub node: String,
    /// `hwqos-monitor` version.
    pub version: String,
    /// Where counts come from.
    pub backend: BackendKind,
    /// Configured sampling rate.
    pub rate_hz: f64,
    /// When the monitor started.
    pub started: Timestamp,
    /// Frames sampled since start.
    pub frames_sampled: u64,
    /// Ticks missed because sampling overran the period.
    pub missed_ticks: u64,
    /// Sequence number of the newest frame, if any.
    pub last_seq: Option<u64>,
    /// How late the newest tick woke, in nanoseconds.
    pub last_lateness_ns: u64,
    /// Frames in the in-memory database, and its capacity.
    pub frames_in_db: usize,
    /// Capacity of the in-memory database, in frames.
    pub db_capacity: usize,
    /// Configured target selectors (empty: per-CPU / system only).
    pub targets: Vec<String>,
    /// Distinct scopes in the newest frame.
    pub scopes_in_last_frame: usize,
    /// Event sets being rotated (after dropping unavailable events).
    pub event_sets: Vec<Vec<String>>,
    /// Configured events this node cannot count.
    pub unavailable: Vec<UnavailableEvent>,
    /// Samples so far that were scaled from multiplexed counters.
    pub multiplexed_samples: u64,
    /// Current subscribers, and subscribers dropped for being too slow.
    pub subscribers: usize,
    /// Subscribers disconnected so far for being too slow.
    pub dropped_subscribers: u64,
    /// Successful configuration reloads (SIGHUP).
    pub reloads: u64,
    /// The OpenMetrics endpoint's bound address, if enabled.
    pub metrics_listen: Option<String>,
    /// Directory flushes are written to.
    pub output_dir: PathBuf,
}

/// The current event sets, as answered to `get_event_sets` / `set_event_sets`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSets {
    /// The event sets, each a list of event names.
    pub sets: Vec<Vec<String>>,
    /// Configured events this node cannot count.
    #[serde(default)]
    pub unavailable: Vec<UnavailableEvent>,
}

/// A response line (see the module docs for the JSON form).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    /// First line on every connection.
    Hello {
        /// The protocol the server speaks ([`SCHEMA`]).
        schema: String,
        /// Host name.
        node: String,
        /// `hwqos-monitor` version.
        version: String,
        /// Sampling rate.
        rate_hz: f64,
    },
    /// Acknowledges a subscription with the normalized filter.
    Subscribed {
        /// The scope patterns in force.
        scopes: Vec<ScopePattern>,
        /// The metric patterns in force.
        metrics: Vec<MetricPattern>,
    },
    /// One frame (of a subscription or a window).
    Frame {
        /// The frame, filtered.
        frame: Frame,
    },
    /// Ends a window: `count` frames were sent.
    End {
        /// Frames sent.
        count: usize,
    },
    /// The event sets (answer to `get_event_sets` and `set_event_sets`).
    EventSets(EventSets),
    /// The database was written (answer to `flush`).
    Flushed {
        /// The files written.
        paths: Vec<PathBuf>,
    },
    /// The monitor's state (answer to `status`).
    Status(Box<MonitorStatus>),
    /// The request failed.
    Error {
        /// Why.
        message: String,
    },
}

impl Response {
    /// The response as one JSON line including the trailing newline.
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|e| {
            format!(r#"{{"type":"error","message":"cannot encode response: {e}"}}"#)
        });
        s.push('\n');
        s
    }

    /// An error response.
    pub fn error(message: impl Into<String>) -> Response {
        Response::Error {
            message: message.into(),
        }
    }
}

/// What went wrong talking to the monitor.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The socket could not be connected to.
    #[error("cannot connect to the monitor at {path}: {source} (is hwqos-monitor running?)")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The connect error.
        #[source]
        source: io::Error,
    },
    /// Reading or writing the socket failed.
    #[error("monitor connection: {0}")]
    Io(#[from] io::Error),
    /// The monitor speaks another protocol version.
    #[error("the monitor speaks `{0}`, this client speaks `{SCHEMA}`")]
    Schema(String),
    /// A line that is not valid protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The monitor closed the connection.
    #[error("the monitor closed the connection")]
    Closed,
    /// The monitor answered with an error message.
    #[error("monitor: {0}")]
    Server(String),
}

/// A blocking client for the live API.
///
/// One connection answers requests ([`ApiClient::status`],
/// [`ApiClient::window`], …) until [`ApiClient::subscribe`] turns it into a
/// stream of frames (the protocol carries nothing else after a subscribe);
/// open a second client for requests while subscribed. Here against a
/// stand-in server that speaks the protocol's first lines (a real one is
/// `hwqos-monitor`; `crates/api/examples/subscribe.rs` runs against it):
///
/// ```
/// use hwqos_api::{ApiClient, FrameFilter, Response, SCHEMA};
/// use hwqos_core::{Frame, Timestamp};
/// use std::io::{BufRead, BufReader, Write};
/// use std::os::unix::net::UnixListener;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = std::env::temp_dir().join(format!("hwqos-api-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("monitor.sock");
/// let _ = std::fs::remove_file(&path);
/// let listener = UnixListener::bind(&path)?;
/// let server = std::thread::spawn(move || -> std::io::Result<()> {
///     let (mut conn, _) = listener.accept()?;
///     let hello = Response::Hello { schema: SCHEMA.into(), node: "n1".into(), version: "0.1.0".into(), rate_hz: 10.0 };
///     conn.write_all(hello.to_line().as_bytes())?;
///     let mut request = String::new();
///     BufReader::new(conn.try_clone()?).read_line(&mut request)?; // {"op":"subscribe",…}
///     conn.write_all(Response::Subscribed { scopes: vec![], metrics: vec![] }.to_line().as_bytes())?;
///     for seq in 1..=3 {
///         let frame = Frame { seq, time: Timestamp::now(), interval_ns: 100_000_000, samples: vec![], labels: vec![] };
///         conn.write_all(Response::Frame { frame }.to_line().as_bytes())?;
///     }
///     Ok(())
/// });
///
/// let client = ApiClient::connect_waiting(&path, std::time::Duration::from_secs(10))?;
/// assert_eq!(client.hello().rate_hz, 10.0);
/// let frames = client.subscribe(FrameFilter::metrics(&["sw.*"])?)?;
/// let seqs: Vec<u64> = frames.take(3).map(|f| f.map(|f| f.seq)).collect::<Result<_, _>>()?;
/// assert_eq!(seqs, [1, 2, 3]);
/// server.join().unwrap()?;
/// std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
pub struct ApiClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    hello: Hello,
    line: Vec<u8>,
}

/// What the monitor said on connect.
#[derive(Clone, Debug, PartialEq)]
pub struct Hello {
    /// Host name.
    pub node: String,
    /// `hwqos-monitor` version.
    pub version: String,
    /// Sampling rate.
    pub rate_hz: f64,
}

impl ApiClient {
    /// Connects and checks the protocol version.
    pub fn connect(path: impl AsRef<Path>) -> Result<ApiClient, ApiError> {
        let path = path.as_ref();
        let stream = UnixStream::connect(path).map_err(|source| ApiError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        let writer = stream.try_clone()?;
        let mut client = ApiClient {
            reader: BufReader::new(stream),
            writer,
            hello: Hello {
                node: String::new(),
                version: String::new(),
                rate_hz: 0.0,
            },
            line: Vec::new(),
        };
        match client.next_response()? {
            Response::Hello {
                schema,
                node,
                version,
                rate_hz,
            } => {
                if schema != SCHEMA {
                    return Err(ApiError::Schema(schema));
                }
                client.hello = Hello {
                    node,
                    version,
                    rate_hz,
                };
                Ok(client)
            }
            other => Err(ApiError::Protocol(format!(
                "expected a hello line, got {other:?}"
            ))),
        }
    }

    /// Connects, retrying while the socket does not exist yet or refuses
    /// connections (a monitor still starting), for at most `timeout`; other
    /// errors (a wrong protocol version, a closed connection) are returned at
    /// once. The last connect error when the time is up.
    pub fn connect_waiting(
        path: impl AsRef<Path>,
        timeout: Duration,
    ) -> Result<ApiClient, ApiError> {
        let end = std::time::Instant::now() + timeout;
        loop {
            match ApiClient::connect(path.as_ref()) {
                Err(ApiError::Connect { path, source })
                    if matches!(
                        source.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                    ) =>
                {
                    if std::time::Instant::now() >= end {
                        return Err(ApiError::Connect { path, source });
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    /// What the monitor said on connect.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// Limits how long a read may block (`None`: forever).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), ApiError> {
        self.reader.get_ref().set_read_timeout(timeout)?;
        Ok(())
    }

    fn send(&mut self, request: &Request) -> Result<(), ApiError> {
        let mut line = serde_json::to_vec(request)
            .map_err(|e| ApiError::Protocol(format!("cannot encode request: {e}")))?;
        line.push(b'\n');
        self.writer.write_all(&line)?;
        Ok(())
    }

    fn next_response(&mut self) -> Result<Response, ApiError> {
        self.line.clear();
        let n = (&mut self.reader)
            .take(MAX_RESPONSE_BYTES as u64 + 1)
            .read_until(b'\n', &mut self.line)?;
        if n == 0 {
            return Err(ApiError::Closed);
        }
        if self.line.last() != Some(&b'\n') {
            return Err(if n > MAX_RESPONSE_BYTES {
                ApiError::Protocol(format!(
                    "response line longer than {MAX_RESPONSE_BYTES} bytes"
                ))
            } else {
                ApiError::Closed
            });
        }
        let response: Response = serde_json::from_slice(&self.line)
            .map_err(|e| ApiError::Protocol(format!("bad response line: {e}")))?;
        match response {
            Response::Error { message } => Err(ApiError::Server(message)),
            other => Ok(other),
        }
    }

    fn unexpected(what: &str, got: Response) -> ApiError {
        ApiError::Protocol(format!("expected {what}, got {got:?}"))
    }

    /// Subscribes; the connection then carries only frames. The iterator ends
    /// with an error when the monitor drops the subscription or goes away.
    pub fn subscribe(mut self, filter: FrameFilter) -> Result<Subscription, ApiError> {
        self.send(&Request::Subscribe {
            scopes: filter.scopes,
            metrics: filter.metrics,
        })?;
        match self.next_response()? {
            Response::Subscribed { .. } => Ok(Subscription {
                client: self,
                done: false,
            }),
            other => Err(Self::unexpected("subscribed", other)),
        }
    }

    /// Recent frames: at most `frames` of them and/or those of the last `seconds`.
    pub fn window(
        &mut self,
        seconds: Option<f64>,
        frames: Option<usize>,
        filter: FrameFilter,
    ) -> Result<Vec<Frame>, ApiError> {
        self.send(&Request::Window {
            seconds,
            frames,
            scopes: filter.scopes,
            metrics: filter.metrics,
        })?;
        let mut out = Vec::new();
        loop {
            match self.next_response()? {
                Response::Frame { frame } => out.push(frame),
                Response::End { count } if count == out.len() => return Ok(out),
                Response::End { count } => {
                    return Err(ApiError::Protocol(format!(
                        "window announced {count} frames but sent {}",
                        out.len()
                    )))
                }
                other => return Err(Self::unexpected("frame or end", other)),
            }
        }
    }

    /// Replaces the event sets; returns what the monitor now rotates.
    pub fn set_event_sets(&mut self, sets: Vec<Vec<String>>) -> Result<EventSets, ApiError> {
        self.send(&Request::SetEventSets { sets })?;
        match self.next_response()? {
            Response::EventSets(e) => Ok(e),
            other => Err(Self::unexpected("event_sets", other)),
        }
    }

    /// The event sets being rotated.
    pub fn get_event_sets(&mut self) -> Result<EventSets, ApiError> {
        self.send(&Request::GetEventSets)?;
        match self.next_response()? {
            Response::EventSets(e) => Ok(e),
            other => Err(Self::unexpected("event_sets", other)),
        }
    }

    /// The monitor's state.
    pub fn status(&mut self) -> Result<MonitorStatus, ApiError> {
        self.send(&Request::Status)?;
        match self.next_response()? {
            Response::Status(s) => Ok(*s),
            other => Err(Self::unexpected("status", other)),
        }
    }

    /// Flushes the database to disk; returns the files written.
    pub fn flush(&mut self) -> Result<Vec<PathBuf>, ApiError> {
        self.send(&Request::Flush)?;
        match self.next_response()? {
            Response::Flushed { paths } => Ok(paths),
            other => Err(Self::unexpected("flushed", other)),
        }
    }
}

/// The frames of a subscription, as they are sampled.
pub struct Subscription {
    client: ApiClient,
    done: bool,
}

impl Subscription {
    /// Limits how long waiting for the next frame may block.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), ApiError> {
        self.client.set_read_timeout(timeout)
    }
}

impl Iterator for Subscription {
    type Item = Result<Frame, ApiError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = match self.client.next_response() {
            Ok(Response::Frame { frame }) => Ok(frame),
            Ok(other) => Err(ApiClient::unexpected("frame", other)),
            Err(e) => Err(e),
        };
        if item.is_err() {
            self.done = true;
        }
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::{MetricName, Sample, Scope, ScopeLabel};

    #[test]
    fn filter_constructors_without_an_empty_list() {
        let m = FrameFilter::metrics(&["sw.*"]).unwrap();
        assert_eq!(m, FrameFilter::new(&[] as &[&str], &["sw.*"]).unwrap());
        assert!(m.scopes.is_empty() && m.metrics.len() == 1);
        let s = FrameFilter::scopes(&["cpu:*".to_string()]).unwrap();
        assert!(s.metrics.is_empty() && s.scopes.len() == 1);
        assert!(FrameFilter::all().is_all());
        assert!(FrameFilter::metrics(&["sw.*x"]).is_err());
    }

    #[test]
    fn connect_waiting_gives_up_on_a_socket_that_never_appears() {
        let dir = std::env::temp_dir().join(format!("hwqos-api-wait-{}", std::process::id()));
        let path = dir.join("never.sock");
        match ApiClient::connect_waiting(&path, Duration::from_millis(50)) {
            Err(ApiError::Connect { path: p, source }) => {
                assert_eq!(p, path);
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            Err(e) => panic!("unexpected error: {e}"),
            Ok(_) => panic!("connected to nothing"),
        }
    }

    #[test]
    fn connect_waiting_does_not_retry_a_wrong_protocol() {
        let dir = std::env::temp_dir().join(format!("hwqos-api-schema-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("old.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let hello = Response::Hello {
                schema: "hwqos.api/0".into(),
                node: "n".into(),
                version: "0".into(),
                rate_hz: 1.0,
            };
            conn.write_all(hello.to_line().as_bytes()).unwrap();
        });
        let r = ApiClient::connect_waiting(&path, Duration::from_secs(10));
        assert!(matches!(r, Err(ApiError::Schema(ref s)) if s == "hwqos.api/0"));
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn patterns() {
        let p = ScopePattern::parse("cpu:*").unwrap();
        assert!(p.matches(&Scope::Cpu { cpu: 3 }));
        assert!(!p.matches(&Scope::Process { pid: 3 }));
        let p = ScopePattern::parse("tid:5/*").unwrap();
        assert!(p.matches(&Scope::Thread { pid: 5, tid: 9 }));
        assert!(!p.matches(&Scope::Thread { pid: 55, tid: 9 }));
        assert!(ScopePattern::parse("*").unwrap().matches(&Scope::System));
        assert!(ScopePattern::parse("pid:12")
            .unwrap()
            .matches(&Scope::Process { pid: 12 }));
        assert!(!ScopePattern::parse("pid:1")
            .unwrap()
            .matches(&Scope::Process { pid: 12 }));
        for bad in ["pid:x", "disk:*", "c*u:*", "nope"] {
            let e = ScopePattern::parse(bad).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
        let m = MetricPattern::parse("hw.*").unwrap();
        assert!(m.matches("hw.cycles") && !m.matches("sw.page_faults"));
        assert!(MetricPattern::parse("sw.page_faults")
            .unwrap()
            .matches("sw.page_faults"));
        assert!(MetricPattern::parse("Hw.*").is_err());
        assert!(MetricPattern::parse("cycles").is_err());
    }

    #[test]
    fn filter_apply_keeps_labels_of_kept_scopes() {
        let t = Timestamp::default();
        let f = Frame {
            seq: 3,
            time: t,
            interval_ns: 1,
            samples: vec![
                Sample::gauge(
                    t,
                    Scope::Process { pid: 1 },
                    MetricName::from_static("sw.page_faults"),
                    1.0,
                ),
                Sample::gauge(
                    t,
                    Scope::Cpu { cpu: 0 },
                    MetricName::from_static("sw.page_faults"),
                    2.0,
                ),
                Sample::gauge(
                    t,
                    Scope::Cpu { cpu: 0 },
                    MetricName::from_static("os.cpu.util"),
                    0.5,
                ),
            ],
            labels: vec![ScopeLabel {
                scope: Scope::Process { pid: 1 },
                name: "init".into(),
            }],
        };
        let only_cpu_faults = FrameFilter::new(&["cpu:*"], &["sw.*"]).unwrap();
        let out = only_cpu_faults.apply(&f);
        assert_eq!(out.seq, 3);
        assert_eq!(out.samples.len(), 1);
        assert_eq!(
            out.value(&Scope::Cpu { cpu: 0 }, "sw.page_faults"),
            Some(2.0)
        );
        assert!(out.labels.is_empty());
        let procs = FrameFilter::new(&["pid:1"], &[] as &[&str]).unwrap();
        assert_eq!(procs.apply(&f).labels.len(), 1);
        assert_eq!(FrameFilter::default().apply(&f), f);
    }

    #[test]
    fn request_wire_forms() {
        let r: Request = serde_json::from_str(
            r#"{"op":"subscribe","scopes":["pid:123","cpu:*"],"metrics":["hw.*"]}"#,
        )
        .unwrap();
        assert_eq!(
            r,
            Request::Subscribe {
                scopes: vec![
                    ScopePattern::parse("pid:123").unwrap(),
                    ScopePattern::parse("cpu:*").unwrap()
                ],
                metrics: vec![MetricPattern::parse("hw.*").unwrap()],
            }
        );
        let r: Request = serde_json::from_str(r#"{"op":"window","frames":5}"#).unwrap();
        assert!(matches!(
            r,
            Request::Window {
                frames: Some(5),
                seconds: None,
                ..
            }
        ));
        assert_eq!(
            serde_json::to_string(&Request::Status).unwrap(),
            r#"{"op":"status"}"#
        );
        assert_eq!(
            serde_json::to_string(&Request::SetEventSets {
                sets: vec![vec!["sw.task_clock".into()]]
            })
            .unwrap(),
            r#"{"op":"set_event_sets","sets":[["sw.task_clock"]]}"#
        );
        assert!(
            serde_json::from_str::<Request>(r#"{"op":"subscribe","scope":["cpu:*"]}"#).is_err()
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"dance"}"#).is_err());
        let e = serde_json::from_str::<Request>(r#"{"op":"subscribe","scopes":["disk:1"]}"#)
            .unwrap_err();
        assert!(e.to_string().contains("disk:1"), "{e}");
    }

    #[test]
    fn response_wire_forms() {
        assert_eq!(
            Response::error("x").to_line(),
            "{\"type\":\"error\",\"message\":\"x\"}\n"
        );
        assert_eq!(
            Response::End { count: 2 }.to_line(),
            "{\"type\":\"end\",\"count\":2}\n"
        );
        let e = Response::EventSets(EventSets {
            sets: vec![vec!["sw.page_faults".into()]],
            unavailable: vec![],
        });
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"event_sets","sets":[["sw.page_faults"]],"unavailable":[]}"#
        );
        let back: Response = serde_json::from_str(&e.to_line()).unwrap();
        assert_eq!(back, e);
        let f = Response::Frame {
            frame: Frame::default(),
        };
        assert!(f
            .to_line()
            .starts_with("{\"type\":\"frame\",\"frame\":{\"seq\":0"));
    }
}
