//! The fleet's Decision Engine input: the monitors' series read back from
//! Prometheus's HTTP API (`/api/v1/query_range`) instead of a local
//! recording, grouped into one [`ProcessSeries`] per process name and node,
//! and analysed per process name over all nodes pooled
//! ([`analyse_fleet`]), with a per-node check of the pooled r̂.
//!
//! **HTTP.** [`http_get`] is a deliberately small HTTP/1.1 client over
//! [`std::net::TcpStream`]: `http://HOST[:PORT][/prefix]` URLs only (no TLS:
//! an `https://` URL is refused with that reason), one `GET` per connection
//! (`Connection: close`), connect, per-read and whole-request timeouts, and
//! a bound on the response size ([`MAX_RESPONSE_BYTES`] by default). Bodies
//! framed by `Content-Length`, by `Transfer-Encoding: chunked` (Prometheus
//! chunks large answers) or by the end of the connection are read. No
//! compression is asked for, so none is decoded.
//!
//! **Names.** The monitor exposes a metric `fam.a.b` as `hwqos_fam_a_b`
//! with a unit suffix and, for counters, `_per_second`
//! ([`MetricName::exposition`], the rule the monitor exposes by), and
//! [`hwqos_name`] inverts it — exactly for every metric in hwqos-core's
//! registry (the names the model, `decide` and contracts use, e.g.
//! `hwqos_sw_page_faults_per_second` → `sw.page_faults`,
//! `hwqos_sw_task_clock_seconds_per_second` → `sw.task_clock`); for any
//! other name, by guessing that the family is the first `_`-separated word
//! and the rest is one part (`hwqos_hw_foo_bar_per_second` → `hw.foo_bar`).
//! A dot inside an unregistered name cannot be told from an underscore, so
//! such a name comes back with underscores; values are in the exposed units
//! (per second, seconds, bytes), which correlation does not care about.

use crate::analysis::{
    self, AnalysisParams, ProcessCorrelation, ProcessSeries, ResourceCorrelation,
};
use crate::SchedError;
use hwqos_core::metric::{MetricName, FAMILIES};
use hwqos_core::{stats, Series};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The default bound on one HTTP response (headers and body): 64 MiB.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Most bytes of the status line and headers.
const MAX_HEADER_BYTES: usize = 64 << 10;

/// Timeouts and bounds of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpOptions {
    /// Connecting to one address.
    pub connect_timeout: Duration,
    /// One read or write on the socket.
    pub io_timeout: Duration,
    /// The whole request, from connecting to the last byte.
    pub total_timeout: Duration,
    /// Most bytes of the response (headers and body together).
    pub max_bytes: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(30),
            total_timeout: Duration::from_secs(120),
            max_bytes: MAX_RESPONSE_BYTES,
        }
    }
}

/// A parsed `http://HOST[:PORT][/prefix]` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl {
    /// The host as written (a name, an IPv4 address or `[IPv6]`).
    pub host: String,
    /// The port (80 when the URL names none).
    pub port: u16,
    /// The path prefix without a trailing `/` (empty for none), e.g. `/prometheus`.
    pub prefix: String,
}

impl BaseUrl {
    /// Parses `url`; anything but a plain `http://` URL without query,
    /// fragment or credentials is refused with the reason.
    pub fn parse(url: &str) -> Result<BaseUrl, SchedError> {
        let bad = |reason: &str| SchedError::invalid(format!("Prometheus URL `{url}`"), reason);
        if url
            .get(..6)
            .is_some_and(|s| s.eq_ignore_ascii_case("https:"))
        {
            return Err(bad(
                "https is not supported (this client speaks plain HTTP only, no TLS); use http:// to a local Prometheus or a TLS-terminating proxy",
            ));
        }
        let rest = match url.get(..7) {
            Some(s) if s.eq_ignore_ascii_case("http://") => &url[7..],
            _ => return Err(bad("expected http://HOST[:PORT][/prefix]")),
        };
        if rest.contains(['?', '#', '@', ' ']) || rest.chars().any(|c| c.is_control()) {
            return Err(bad("no query, fragment, credentials or spaces allowed"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (host, port) = if let Some(after) = authority.strip_prefix('[') {
            let end = after
                .find(']')
                .ok_or_else(|| bad("unclosed `[` in the host"))?;
            let host = &authority[..end + 2];
            let port = &after[end + 1..];
            (host, port.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(bad("no host"));
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("the port is not a number in 1..=65535"))?,
        };
        Ok(BaseUrl {
            host: host.to_string(),
            port,
            prefix: path.trim_end_matches('/').to_string(),
        })
    }
}

/// One HTTP response: status code and body (de-chunked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code, e.g. 200.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

fn http_err(reason: impl Into<String>) -> SchedError {
    SchedError::invalid("HTTP response", reason)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Parses a complete response (the connection's bytes up to its end):
/// status line, headers, and a body framed by `Transfer-Encoding: chunked`,
/// `Content-Length`, or the end of the bytes. Never panics; every malformed
/// input is an error naming what was wrong.
pub fn parse_http_response(bytes: &[u8], max_body: usize) -> Result<HttpResponse, SchedError> {
    let head_end = find(&bytes[..bytes.len().min(MAX_HEADER_BYTES)], b"\r\n\r\n")
        .ok_or_else(|| http_err("no end of headers (truncated, or headers over 64 KiB)"))?;
    let head =
        std::str::from_utf8(&bytes[..head_end]).map_err(|_| http_err("headers are not UTF-8"))?;
    let rest = &bytes[head_end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(http_err(format!(
            "not an HTTP/1.x status line: `{}`",
            snippet(status_line.as_bytes())
        )));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..=999).contains(s))
        .ok_or_else(|| {
            http_err(format!(
                "bad status code in `{}`",
                snippet(status_line.as_bytes())
            ))
        })?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
    for line in lines {
        let (name, value) = line.split_once(':').ok_or_else(|| {
            http_err(format!(
                "malformed header line `{}`",
                snippet(line.as_bytes())
            ))
        })?;
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or_default().trim();
            if !last.eq_ignore_ascii_case("chunked") {
                return Err(http_err(format!("unsupported Transfer-Encoding `{value}`")));
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .map_err(|_| http_err(format!("bad Content-Length `{value}`")))?;
            if length.is_some_and(|l| l != n) {
                return Err(http_err("conflicting Content-Length headers"));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("content-encoding")
            && !value.eq_ignore_ascii_case("identity")
        {
            return Err(http_err(format!("unsupported Content-Encoding `{value}`")));
        }
    }
    let body = if chunked {
        dechunk(rest, max_body)?
    } else if let Some(n) = length {
        if n > max_body {
            return Err(http_err(format!(
                "body of {n} bytes is over the {max_body}-byte bound"
            )));
        }
        rest.get(..n)
            .ok_or_else(|| http_err(format!("body truncated: {} of {n} bytes", rest.len())))?
            .to_vec()
    } else {
        if rest.len() > max_body {
            return Err(http_err(format!("body is over the {max_body}-byte bound")));
        }
        rest.to_vec()
    };
    Ok(HttpResponse { status, body })
}

/// Decodes a chunked body (RFC 9112 7.1), trailers ignored.
fn dechunk(mut rest: &[u8], max_body: usize) -> Result<Vec<u8>, SchedError> {
    let mut body = Vec::new();
    loop {
        let eol = find(&rest[..rest.len().min(1024)], b"\r\n")
            .ok_or_else(|| http_err("chunked body truncated or chunk-size line too long"))?;
        let line = std::str::from_utf8(&rest[..eol])
            .map_err(|_| http_err("chunk-size line is not text"))?;
        let hex = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(hex, 16)
            .ok()
            .filter(|_| !hex.is_empty() && hex.len() <= 16)
            .ok_or_else(|| http_err(format!("bad chunk size `{}`", snippet(line.as_bytes()))))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        if size > max_body.saturating_sub(body.len()) {
            return Err(http_err(format!(
                "chunked body is over the {max_body}-byte bound"
            )));
        }
        let chunk = rest
            .get(..size)
            .ok_or_else(|| http_err(format!("chunk of {size} bytes truncated")))?;
        body.extend_from_slice(chunk);
        rest = &rest[size..];
        if !rest.starts_with(b"\r\n") {
            return Err(http_err("chunk not followed by CRLF"));
        }
        rest = &rest[2..];
    }
}

fn snippet(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(120)]);
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `GET {prefix}{path_and_query}` on `url` with `opts`: the response, or
/// why there is none (connection, timeout, bound, malformed response).
pub fn http_get(
    url: &BaseUrl,
    path_and_query: &str,
    opts: &HttpOptions,
) -> Result<HttpResponse, SchedError> {
    let target = format!("{}:{}", url.host, url.port);
    let io = |op: &str, e: std::io::Error| SchedError::io(format!("{op} http://{target}"), e);
    let start = Instant::now();
    let addrs: Vec<_> = target
        .to_socket_addrs()
        .map_err(|e| io("resolving", e))?
        .collect();
    let mut last = None;
    let mut stream = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, opts.connect_timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut stream = stream.ok_or_else(|| {
        io(
            "connecting to",
            last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address")),
        )
    })?;
    stream
        .set_read_timeout(Some(opts.io_timeout))
        .map_err(|e| io("configuring", e))?;
    stream
        .set_write_timeout(Some(opts.io_timeout))
        .map_err(|e| io("configuring", e))?;
    let request = format!(
        "GET {}{} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: hwqos-sra\r\nConnection: close\r\n\r\n",
        url.prefix, path_and_query, target
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| io("sending to", e))?;
    let limit = opts.max_bytes.saturating_add(MAX_HEADER_BYTES);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        if start.elapsed() > opts.total_timeout {
            return Err(io(
                "reading from",
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no complete answer within {:?}", opts.total_timeout),
                ),
            ));
        }
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io("reading from", e)),
        };
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > limit {
            return Err(http_err(format!(
                "the answer from http://{target} is over the {}-byte bound",
                opts.max_bytes
            )));
        }
    }
    parse_http_response(&buf, opts.max_bytes)
}

/// Percent-encodes `s` for a query string value.
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One series of a range query: its labels (with `__name__` when the
/// query was a plain selector) and its points `(unix seconds, value)`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RangeSeries {
    /// The series' labels.
    pub labels: BTreeMap<String, String>,
    /// `(unix seconds, value)` in Prometheus's order (time ascending).
    pub points: Vec<(f64, f64)>,
}

impl RangeSeries {
    /// The metric name (`__name__`), empty when the result has none.
    pub fn name(&self) -> &str {
        self.labels
            .get("__name__")
            .map(String::as_str)
            .unwrap_or("")
    }
}

fn api_err(reason: impl Into<String>) -> SchedError {
    SchedError::invalid("Prometheus answer", reason)
}

/// A Prometheus sample value: a decimal string, or `NaN`, `+Inf`, `-Inf`.
fn sample_value(v: &serde_json::Value) -> Option<f64> {
    match v.as_str()? {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        s => s.parse().ok(),
    }
}

/// Parses a `/api/v1/query_range` answer body. `status: "error"` becomes an
/// error with Prometheus's `errorType` and `error`; a body that is not JSON,
/// a result that is not a matrix, or a malformed series is an error naming
/// what was wrong.
pub fn parse_query_range(body: &[u8]) -> Result<Vec<RangeSeries>, SchedError> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| api_err(format!("not JSON ({e}): `{}`", snippet(body))))?;
    match v.get("status").and_then(|s| s.as_str()) {
        Some("success") => {}
        Some("error") => {
            return Err(api_err(format!(
                "status error ({}): {}",
                v.get("errorType")
                    .and_then(|s| s.as_str())
                    .unwrap_or("no errorType"),
                v.get("error")
                    .and_then(|s| s.as_str())
                    .unwrap_or("no error text")
            )))
        }
        other => return Err(api_err(format!("unexpected status {other:?}"))),
    }
    let data = v.get("data").ok_or_else(|| api_err("no `data`"))?;
    match data.get("resultType").and_then(|s| s.as_str()) {
        Some("matrix") => {}
        other => {
            return Err(api_err(format!(
                "resultType {other:?} where a range query gives \"matrix\""
            )))
        }
    }
    let result = data
        .get("result")
        .and_then(|r| r.as_array())
        .ok_or_else(|| api_err("`data.result` is not an array"))?;
    let mut out = Vec::with_capacity(result.len());
    for (i, s) in result.iter().enumerate() {
        let metric = s
            .get("metric")
            .and_then(|m| m.as_object())
            .ok_or_else(|| api_err(format!("series {i}: no `metric` object")))?;
        let mut labels = BTreeMap::new();
        for (k, v) in metric {
            let v = v
                .as_str()
                .ok_or_else(|| api_err(format!("series {i}: label `{k}` is not a string")))?;
            labels.insert(k.clone(), v.to_string());
        }
        let values = match s.get("values") {
            Some(v) => v
                .as_array()
                .ok_or_else(|| api_err(format!("series {i}: `values` is not an array")))?
                .as_slice(),
            None => &[],
        };
        let mut points = Vec::with_capacity(values.len());
        for p in values {
            let pair = p.as_array().filter(|a| a.len() == 2);
            let point = pair.and_then(|a| Some((a[0].as_f64()?, sample_value(&a[1])?)));
            let (t, v) = point.ok_or_else(|| {
                api_err(format!(
                    "series {i}: point {p} is not [unix_seconds, \"value\"]"
                ))
            })?;
            points.push((t, v));
        }
        out.push(RangeSeries { labels, points });
    }
    Ok(out)
}

/// Runs a range query (`/api/v1/query_range`) on the Prometheus at `url`
/// with default [`HttpOptions`]; see [`query_range_with`].
pub fn query_range(
    url: &str,
    promql: &str,
    start_s: f64,
    end_s: f64,
    step_s: f64,
) -> Result<Vec<RangeSeries>, SchedError> {
    query_range_with(url, promql, start_s, end_s, step_s, &HttpOptions::default())
}

/// Runs a range query with explicit timeouts and bounds. The answer is
/// parsed whatever its HTTP status (Prometheus reports query errors as
/// JSON with a 4xx/5xx status); a non-JSON answer names the status.
pub fn query_range_with(
    url: &str,
    promql: &str,
    start_s: f64,
    end_s: f64,
    step_s: f64,
    opts: &HttpOptions,
) -> Result<Vec<RangeSeries>, SchedError> {
    if !(start_s.is_finite() && end_s.is_finite() && start_s < end_s) {
        return Err(SchedError::invalid(
            "query range",
            format!("start {start_s} must be before end {end_s}"),
        ));
    }
    if !(step_s.is_finite() && step_s > 0.0) {
        return Err(SchedError::invalid(
            "query step",
            format!("{step_s} s is not positive"),
        ));
    }
    let base = BaseUrl::parse(url)?;
    let path = format!(
        "/api/v1/query_range?query={}&start={}&end={}&step={}",
        url_encode(promql),
        start_s,
        end_s,
        step_s
    );
    let resp = http_get(&base, &path, opts)?;
    match parse_query_range(&resp.body) {
        Err(e) if resp.status != 200 => {
            Err(api_err(format!("HTTP {} from {url}: {e}", resp.status)))
        }
        r => r,
    }
}

/// A time as `unix seconds`: an RFC 3339 date-time
/// (`2026-11-28T03:00:00Z`, fractional seconds and `±HH:MM` offsets
/// allowed), a number of unix seconds, `now`, or `now-DURATION`
/// (`now-1h`).
pub fn parse_time(s: &str, now_s: f64) -> Result<f64, SchedError> {
    let bad = |r: &str| SchedError::invalid(format!("time `{s}`"), r);
    let s = s.trim();
    if s == "now" {
        return Ok(now_s);
    }
    if let Some(d) = s.strip_prefix("now-") {
        return Ok(now_s - parse_duration(d)?);
    }
    if let Ok(v) = s.parse::<f64>() {
        return if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(bad("unix seconds must be finite and not negative"))
        };
    }
    let t: jiff::Timestamp = s.parse().map_err(|e: jiff::Error| {
        bad(&format!(
            "expected RFC 3339 (2026-11-28T03:00:00Z), unix seconds, now or now-DURATION ({e})"
        ))
    })?;
    let secs = t.as_second() as f64 + f64::from(t.subsec_nanosecond()) / 1e9;
    if secs < 0.0 {
        return Err(bad("before 1970"));
    }
    Ok(secs)
}

/// A duration in seconds: a number with an optional unit `ms`, `s`, `m`,
/// `h` or `d` (`5s`, `1.5m`, `300`).
pub fn parse_duration(s: &str) -> Result<f64, SchedError> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else if let Some(n) = t.strip_suffix('d') {
        (n, 86_400.0)
    } else {
        (t, 1.0)
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * mult),
        _ => Err(SchedError::invalid(
            format!("duration `{s}`"),
            "expected a positive number with an optional unit ms, s, m, h or d (e.g. 5s)",
        )),
    }
}

/// The hwqos metric name of an exposed Prometheus name: exact for the
/// metrics of hwqos-core's registry, else a guess (family = the first
/// word, the rest one part, `_per_second` dropped); `None` when the name
/// is not `hwqos_<family>_…`.
pub fn hwqos_name(exposed: &str) -> Option<String> {
    // Every series of a fleet query is looked up: the registry's exposed
    // names are built once.
    static EXPOSED: std::sync::OnceLock<BTreeMap<String, &'static str>> =
        std::sync::OnceLock::new();
    let registry = EXPOSED.get_or_init(|| {
        hwqos_core::metric::registry()
            .iter()
            .map(|m| (m.name.exposition().name, m.name.as_str()))
            .collect()
    });
    if let Some(name) = registry.get(exposed) {
        return Some(name.to_string());
    }
    let rest = exposed.strip_prefix("hwqos_")?;
    let rest = rest.strip_suffix("_per_second").unwrap_or(rest);
    let (family, tail) = rest.split_once('_')?;
    if !FAMILIES.contains(&family) {
        return None;
    }
    MetricName::new(format!("{family}.{tail}"))
        .ok()
        .map(|m| m.as_str().to_string())
}

/// Whether an exposed name is a resource (neither the monitor's own
/// figures, nor its multiplexing ratio, nor an application metric).
fn is_resource_name(name: &str) -> bool {
    name.starts_with("hwqos_")
        && !name.starts_with("hwqos_app_")
        && !name.starts_with("hwqos_monitor_")
        && name != "hwqos_counter_running_ratio"
}

/// The label that names a process in [`group`]: its `comm`.
pub const PROCESS_LABEL: &str = "comm";

/// A group's value of `label`; a missing `node` falls back to `instance`
/// (a Prometheus without the fleet's `node` relabelling), anything else
/// missing is empty.
fn label_value(labels: &BTreeMap<String, String>, label: &str) -> String {
    match labels.get(label) {
        Some(v) => v.clone(),
        None if label == "node" => labels.get("instance").cloned().unwrap_or_default(),
        None => String::new(),
    }
}

/// One process name on one node (one group of [`group`]).
#[derive(Clone, Debug)]
pub struct NodeSeries {
    /// The group's key: each `--group-by` label and its value.
    pub key: BTreeMap<String, String>,
    /// The process name (`comm`).
    pub process: String,
    /// The node, as the group-by labels other than `comm` (`n1`, or
    /// `label=value,…` when there are several).
    pub node: String,
    /// Resources (hwqos names) and x on the step grid.
    pub series: ProcessSeries,
}

fn to_series(points: &BTreeMap<u64, (f64, usize)>, mean: bool) -> Series {
    Series::from_points(
        points.len().max(1),
        points
            .iter()
            .map(|(t, (sum, n))| (*t, if mean { sum / *n as f64 } else { *sum })),
    )
}

fn add_points(to: &mut BTreeMap<u64, (f64, usize)>, s: &RangeSeries) {
    for &(t, v) in &s.points {
        if !(t.is_finite() && t >= 0.0 && v.is_finite()) {
            continue;
        }
        let e = to.entry((t * 1e9).round() as u64).or_insert((0.0, 0));
        e.0 += v;
        e.1 += 1;
    }
}

/// Groups range series into processes per node: `resources` (process-scope
/// `hwqos_*` series) by the `group_by` labels (which must include `comm`),
/// each resource named by [`hwqos_name`]; `x` (the x metric's series) for
/// a group is its process-scope series with the same group labels, else
/// the `scope="system"` series of the same node (the same group labels
/// other than `comm` and `pid`). Several series of one metric in a group
/// (several pids of one name, a restarted process) are summed per step for
/// resources and averaged for x; non-finite values are skipped. Groups
/// without x or without resources are left out.
pub fn group(
    resources: &[RangeSeries],
    x: &[RangeSeries],
    group_by: &[String],
) -> Result<Vec<NodeSeries>, SchedError> {
    if !group_by.iter().any(|l| l == PROCESS_LABEL) {
        return Err(SchedError::invalid(
            "group-by labels",
            format!("{group_by:?} must include `{PROCESS_LABEL}` (the process name the model is keyed by)"),
        ));
    }
    type Points = BTreeMap<u64, (f64, usize)>;
    let key_of = |labels: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        group_by
            .iter()
            .map(|l| (l.clone(), label_value(labels, l)))
            .collect()
    };
    let node_key = |key: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        key.iter()
            .filter(|(k, _)| k.as_str() != PROCESS_LABEL && k.as_str() != "pid")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let mut res: BTreeMap<BTreeMap<String, String>, BTreeMap<String, Points>> = BTreeMap::new();
    for s in resources {
        if s.labels.get("scope").map(String::as_str) != Some("process")
            || !is_resource_name(s.name())
        {
            continue;
        }
        let Some(name) = hwqos_name(s.name()) else {
            continue;
        };
        add_points(
            res.entry(key_of(&s.labels))
                .or_default()
                .entry(name)
                .or_default(),
            s,
        );
    }
    let mut proc_x: BTreeMap<BTreeMap<String, String>, Points> = BTreeMap::new();
    let mut system_x: BTreeMap<BTreeMap<String, String>, Points> = BTreeMap::new();
    for s in x {
        match s.labels.get("scope").map(String::as_str) {
            Some("process") => add_points(proc_x.entry(key_of(&s.labels)).or_default(), s),
            Some("system") => {
                add_points(system_x.entry(node_key(&key_of(&s.labels))).or_default(), s)
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (key, metrics) in res {
        let xp = proc_x
            .get(&key)
            .filter(|p| !p.is_empty())
            .or_else(|| system_x.get(&node_key(&key)).filter(|p| !p.is_empty()));
        let Some(xp) = xp else {
            continue;
        };
        let process = key.get(PROCESS_LABEL).cloned().unwrap_or_default();
        let nk = node_key(&key);
        let node = if nk.len() == 1 {
            nk.values().next().cloned().unwrap_or_default()
        } else {
            nk.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let resources: BTreeMap<String, Series> = metrics
            .iter()
            .filter(|(_, p)| !p.is_empty())
            .map(|(m, p)| (m.clone(), to_series(p, false)))
            .collect();
        if resources.is_empty() {
            continue;
        }
        out.push(NodeSeries {
            series: ProcessSeries {
                process: format!("{process}@{node}"),
                resources,
                x: to_series(xp, true),
            },
            key,
            process,
            node,
        });
    }
    Ok(out)
}

/// The default outlier tolerance: a node is an outlier when its Corr(r̂, x)
/// is more than this from the reference (see [`analyse_fleet`]).
pub const DEFAULT_OUTLIER_TOLERANCE: f64 = 0.3;

/// One node's view of a process's pooled r̂.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeCheck {
    /// The node (see [`NodeSeries::node`]).
    pub node: String,
    /// Steps analysed on this node (0 when the analysis failed).
    pub samples: usize,
    /// Corr(r̂, x) on this node alone (`None`: r̂ not measured there, or the
    /// analysis failed).
    pub correlation: Option<f64>,
    /// Whether the node departs from the fleet (see [`analyse_fleet`]).
    pub outlier: bool,
    /// Why the node could not be analysed, if it could not.
    pub error: Option<String>,
}

/// The fleet's analysis of one process name.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FleetProcess {
    /// The process name (`comm`).
    pub process: String,
    /// The analysis over all nodes pooled (resources sorted by |Corr|, r̂
    /// the first selected).
    pub pooled: ProcessCorrelation,
    /// The reference for the outlier rule: the median over nodes of
    /// Corr(r̂, x) (`None` without r̂).
    pub reference: Option<f64>,
    /// Mean CPU demand (CPUs busy, `sw.task_clock` seconds per second)
    /// over the nodes that report it.
    pub cpu_demand: Option<f64>,
    /// Every node, in node order.
    pub nodes: Vec<NodeCheck>,
}

impl FleetProcess {
    /// r̂ of the pooled analysis.
    pub fn r_hat(&self) -> Option<&str> {
        self.pooled.r_hat()
    }

    /// The pooled table and the per-node table as text.
    pub fn table(&self) -> String {
        let mut out = self.pooled.table().replacen(
            &format!("process {} (", self.process),
            &format!(
                "process {} pooled over {} nodes (",
                self.process,
                self.nodes.len()
            ),
            1,
        );
        let r_hat = self.r_hat().unwrap_or("-");
        out.push_str(&format!(
            "per node: Corr({r_hat}, x); reference (median) {}\n{:<24} {:>8} {:>8}  outlier\n",
            self.reference
                .map(|r| format!("{r:.3}"))
                .unwrap_or_else(|| "-".into()),
            "node",
            "samples",
            "Corr"
        ));
        for n in &self.nodes {
            let corr = n
                .correlation
                .map(|c| format!("{c:.3}"))
                .unwrap_or_else(|| "-".into());
            let flag = match (&n.error, n.outlier) {
                (Some(e), _) => format!("not analysed: {e}"),
                (None, true) => "OUTLIER".to_string(),
                (None, false) => String::new(),
            };
            out.push_str(&format!(
                "{:<24} {:>8} {:>8}  {flag}\n",
                n.node, n.samples, corr
            ));
        }
        out
    }
}

/// The Decision Engine over a fleet: each node's group is analysed alone
/// ([`analysis::analyse`]: aligned, normalized, filtered); the pooled
/// Corr(r, x) of a process name is the Pearson correlation of the
/// concatenation over its nodes of those normalized, filtered series (each
/// node's series is z-scored first, so no node weighs by its scale; a
/// resource only some nodes measure is pooled over those). r̂ and the
/// selection follow θ as in one node's analysis.
///
/// **Outlier rule**: a node is an outlier when its own Corr(r̂, x) differs
/// from the median of the nodes' Corr(r̂, x) by more than `tolerance`
/// (which covers a sign flip of any size that matters: `|r_node − r_ref| >
/// tolerance`). The median, not the pooled value, is the reference
/// because the pooled correlation is pulled toward the outliers
/// themselves (with three nodes, one unrelated node takes a third off
/// it). With two nodes the median is their mean, so either both or
/// neither are flagged; singling out a node needs three. A node without
/// r̂ or whose analysis failed is reported with no correlation and not
/// flagged.
pub fn analyse_fleet(
    groups: &[NodeSeries],
    params: &AnalysisParams,
    tolerance: f64,
) -> Result<Vec<FleetProcess>, SchedError> {
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        return Err(SchedError::invalid(
            "outlier tolerance",
            format!("{tolerance} is not ≥ 0"),
        ));
    }
    let mut by_process: BTreeMap<&str, Vec<&NodeSeries>> = BTreeMap::new();
    for g in groups {
        by_process.entry(&g.process).or_default().push(g);
    }
    let mut out = Vec::new();
    for (process, nodes) in by_process {
        let mut analysed = Vec::new();
        let mut checks = Vec::new();
        for n in &nodes {
            match analysis::analyse(&n.series, params) {
                Ok(a) => analysed.push((*n, a)),
                Err(e) => checks.push(NodeCheck {
                    node: n.node.clone(),
                    samples: 0,
                    correlation: None,
                    outlier: false,
                    error: Some(e.to_string()),
                }),
            }
        }
        if analysed.is_empty() {
            // Nothing to pool: report the failures under an empty analysis.
            checks.sort_by(|a, b| a.node.cmp(&b.node));
            out.push(FleetProcess {
                process: process.to_string(),
                pooled: ProcessCorrelation {
                    process: process.to_string(),
                    samples: 0,
                    resources: vec![],
                    selected: vec![],
                    x_raw: vec![],
                    x_filtered: vec![],
                },
                reference: None,
                cpu_demand: None,
                nodes: checks,
            });
            continue;
        }
        let pooled = pool(process, &analysed, params.threshold);
        let r_hat = pooled.r_hat().map(str::to_string);
        let node_corr = |a: &ProcessCorrelation| {
            r_hat.as_ref().and_then(|r| {
                a.resources
                    .iter()
                    .find(|c| &c.resource == r)
                    .map(|c| c.correlation)
            })
        };
        let corrs: Vec<f64> = analysed.iter().filter_map(|(_, a)| node_corr(a)).collect();
        let reference = stats::median(&corrs);
        for (n, a) in &analysed {
            let c = node_corr(a);
            checks.push(NodeCheck {
                node: n.node.clone(),
                samples: a.samples,
                correlation: c,
                outlier: matches!((c, reference), (Some(c), Some(r)) if (c - r).abs() > tolerance),
                error: None,
            });
        }
        checks.sort_by(|a, b| a.node.cmp(&b.node));
        let demands: Vec<f64> = analysed
            .iter()
            .filter_map(|(n, _)| {
                n.series
                    .resources
                    .get(hwqos_core::metric::names::SW_TASK_CLOCK)
                    .and_then(Series::mean)
            })
            .collect();
        out.push(FleetProcess {
            process: process.to_string(),
            pooled,
            reference,
            cpu_demand: stats::mean(&demands),
            nodes: checks,
        });
    }
    Ok(out)
}

/// The pooled analysis of one process name over its analysed nodes.
fn pool(
    process: &str,
    analysed: &[(&NodeSeries, ProcessCorrelation)],
    threshold: f64,
) -> ProcessCorrelation {
    let mut names: Vec<&str> = analysed
        .iter()
        .flat_map(|(_, a)| a.resources.iter().map(|r| r.resource.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut resources: Vec<ResourceCorrelation> = names
        .iter()
        .map(|name| {
            let (mut raw, mut filtered, mut xf) = (Vec::new(), Vec::new(), Vec::new());
            for (_, a) in analysed {
                if let Some(r) = a.resources.iter().find(|r| r.resource == *name) {
                    raw.extend_from_slice(&r.raw);
                    filtered.extend_from_slice(&r.filtered);
                    xf.extend_from_slice(&a.x_filtered);
                }
            }
            ResourceCorrelation {
                resource: name.to_string(),
                correlation: stats::pearson(&filtered, &xf)
                    .filter(|c| c.is_finite())
                    .unwrap_or(0.0),
                mean: stats::mean(&raw).unwrap_or(0.0),
                raw,
                filtered,
            }
        })
        .collect();
    let selected = analysis::rank_and_select(&mut resources, threshold);
    ProcessCorrelation {
        process: process.to_string(),
        samples: analysed.iter().map(|(_, a)| a.samples).sum(),
        resources,
        selected,
        x_raw: analysed
            .iter()
            .flat_map(|(_, a)| a.x_raw.iter().copied())
            .collect(),
        x_filtered: analysed
            .iter()
            .flat_map(|(_, a)| a.x_filtered.iter().copied())
            .collect(),
    }
}

/// The PromQL selectors for a fleet analysis: every process-scope `hwqos_`
/// series, and every series of the x metric, each within `selector` (a
/// label-matcher set `{…}`, possibly empty). `x` is a hwqos name
/// (`app.rate`) or an exposed name (`hwqos_app_rate`).
pub fn fleet_queries(selector: &str, x: &str) -> Result<(String, String, String), SchedError> {
    let s = selector.trim();
    let inner = s
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(|| {
            SchedError::invalid(
                format!("selector `{selector}`"),
                "expected label matchers in braces, e.g. {job=\"hwqos-monitor\"}",
            )
        })?
        .trim()
        .trim_end_matches(',');
    if inner.contains("__name__") {
        return Err(SchedError::invalid(
            format!("selector `{selector}`"),
            "must not match on __name__ (the metrics are chosen by the analysis)",
        ));
    }
    let x_exposed = if x.starts_with("hwqos_") {
        x.to_string()
    } else {
        let m = MetricName::new(x)
            .map_err(|e| SchedError::invalid(format!("--x `{x}`"), e.to_string()))?;
        m.exposition().name
    };
    if !x_exposed
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
    {
        return Err(SchedError::invalid(
            format!("--x `{x}`"),
            "not a metric name",
        ));
    }
    let sep = if inner.is_empty() { "" } else { "," };
    Ok((
        format!("{{{inner}{sep}__name__=~\"hwqos_.+\",scope=\"process\"}}"),
        format!("{{{inner}{sep}__name__=\"{x_exposed}\"}}"),
        x_exposed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"hwqos_sw_page_faults_per_second","node":"n1","scope":"process","comm":"svc","pid":"7"},"values":[[1700000000,"1"],[1700000005.5,"NaN"],[1700000011,"+Inf"],[1700000016,"-2.5e3"]]}]}}"#;

    fn chunked(body: &str, sizes: &[usize]) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let mut rest = body.as_bytes();
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].min(rest.len());
            out.extend_from_slice(format!("{n:x};ext=1\r\n").as_bytes());
            out.extend_from_slice(&rest[..n]);
            out.extend_from_slice(b"\r\n");
            rest = &rest[n..];
            i += 1;
        }
        out.extend_from_slice(b"0\r\nX-Trailer: y\r\n\r\n");
        out
    }

    #[test]
    fn a_content_length_answer_parses() {
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{BODY}garbage-after",
            BODY.len()
        );
        let r = parse_http_response(resp.as_bytes(), 1 << 20).unwrap();
        assert_eq!(r.status, 200);
        let s = parse_query_range(&r.body).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name(), "hwqos_sw_page_faults_per_second");
        assert_eq!(s[0].labels["node"], "n1");
        let p = &s[0].points;
        assert_eq!(p[0], (1700000000.0, 1.0));
        assert!(p[1].1.is_nan());
        assert_eq!(p[1].0, 1700000005.5);
        assert_eq!(p[2].1, f64::INFINITY);
        assert_eq!(p[3].1, -2500.0);
    }

    #[test]
    fn a_chunked_answer_parses_and_bounds_hold() {
        let resp = chunked(BODY, &[1, 7, 100, 3]);
        let r = parse_http_response(&resp, 1 << 20).unwrap();
        assert_eq!(r.body, BODY.as_bytes());
        assert_eq!(parse_query_range(&r.body).unwrap()[0].points.len(), 4);
        let e = parse_http_response(&resp, 10).unwrap_err().to_string();
        assert!(e.contains("bound"), "{e}");
        let e = parse_http_response(&resp[..resp.len() - 30], 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("truncated") || e.contains("CRLF"), "{e}");
        let e = parse_http_response(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{}", 10)
            .unwrap_err();
        assert!(e.to_string().contains("bound"), "{e}");
    }

    #[test]
    fn errors_name_what_was_wrong() {
        let e = parse_query_range(
            br#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unclosed left parenthesis"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("bad_data") && e.contains("unclosed left parenthesis"),
            "{e}"
        );
        let e = parse_query_range(b"<html>502 Bad Gateway</html>")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not JSON") && e.contains("502 Bad Gateway"),
            "{e}"
        );
        let e = parse_query_range(
            br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("vector") && e.contains("matrix"), "{e}");
        let e = parse_query_range(
            br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,2]]}]}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("series 0"), "{e}");
        let e = parse_http_response(b"SSH-2.0-OpenSSH\r\n\r\n", 100)
            .unwrap_err()
            .to_string();
        assert!(e.contains("status line"), "{e}");
        let e = BaseUrl::parse("https://prom:9090").unwrap_err().to_string();
        assert!(e.contains("TLS"), "{e}");
        assert!(BaseUrl::parse("prom:9090").is_err());
        assert!(BaseUrl::parse("http://prom:0").is_err());
        assert!(BaseUrl::parse("http://:9090").is_err());
    }

    #[test]
    fn urls_parse() {
        let u = BaseUrl::parse("http://127.0.0.1:9090/prom/").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.prefix.as_str()),
            ("127.0.0.1", 9090, "/prom")
        );
        let u = BaseUrl::parse("HTTP://[::1]:9091").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.prefix.as_str()),
            ("[::1]", 9091, "")
        );
        assert_eq!(BaseUrl::parse("http://prom").unwrap().port, 80);
    }

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let seeds: Vec<Vec<u8>> = vec![
            chunked(BODY, &[5, 9]),
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{BODY}",
                BODY.len()
            )
            .into_bytes(),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab".to_vec(),
        ];
        let alphabet =
            b"0123456789abcdefHTP/1. \r\n:;{}[]\",-+NaInfTransfer-Encoding chunked Content-Length";
        for round in 0..20_000 {
            let mut b = seeds[round % seeds.len()].clone();
            match rng.next() % 4 {
                0 => {
                    // Fully random bytes.
                    let n = (rng.next() % 300) as usize;
                    b = (0..n).map(|_| rng.next() as u8).collect();
                }
                1 => {
                    // Mutate a few bytes.
                    for _ in 0..1 + rng.next() % 8 {
                        if !b.is_empty() {
                            let i = (rng.next() as usize) % b.len();
                            b[i] = alphabet[(rng.next() as usize) % alphabet.len()];
                        }
                    }
                }
                2 => {
                    let n = (rng.next() as usize) % (b.len() + 1);
                    b.truncate(n);
                }
                _ => {
                    let i = (rng.next() as usize) % (b.len() + 1);
                    let junk: Vec<u8> = (0..rng.next() % 20)
                        .map(|_| alphabet[(rng.next() as usize) % alphabet.len()])
                        .collect();
                    b.splice(i..i, junk);
                }
            }
            if let Ok(r) = parse_http_response(&b, 1 << 16) {
                let _ = parse_query_range(&r.body);
            }
            let _ = parse_query_range(&b);
            let text = String::from_utf8_lossy(&b);
            let _ = parse_time(&text, 0.0);
            let _ = parse_duration(&text);
            let _ = BaseUrl::parse(&text);
            let _ = hwqos_name(&text);
        }
    }

    #[test]
    fn times_and_durations() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z", 0.0).unwrap(), 0.0);
        assert_eq!(
            parse_time("2026-11-28T03:00:00Z", 0.0).unwrap(),
            1_795_834_800.0
        );
        assert_eq!(
            parse_time("2026-11-28T04:00:00.5+01:00", 0.0).unwrap(),
            1_795_834_800.5
        );
        assert_eq!(
            parse_time("2000-03-01T00:00:00Z", 0.0).unwrap(),
            951_868_800.0
        );
        assert_eq!(parse_time("1700000000", 0.0).unwrap(), 1.7e9);
        assert_eq!(parse_time("now-1h", 10_000.0).unwrap(), 6400.0);
        assert!(parse_time("2026-13-01T00:00:00Z", 0.0).is_err());
        assert!(parse_time("2026-11-28T03:00:00", 0.0).is_err());
        assert!(parse_time("yesterday", 0.0).is_err());
        assert_eq!(parse_duration("5s").unwrap(), 5.0);
        assert_eq!(parse_duration("250ms").unwrap(), 0.25);
        assert_eq!(parse_duration("2m").unwrap(), 120.0);
        assert_eq!(parse_duration("30").unwrap(), 30.0);
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("5x").is_err());
    }

    #[test]
    fn names_map_both_ways() {
        let m = |s: &str| MetricName::new(s).unwrap();
        // The monitor's own examples (agents/monitor/src/openmetrics.rs).
        assert_eq!(
            m("sw.page_faults").exposition().name,
            "hwqos_sw_page_faults_per_second"
        );
        assert_eq!(
            m("sw.task_clock").exposition().name,
            "hwqos_sw_task_clock_seconds_per_second"
        );
        assert_eq!(m("app.rtt_us").exposition().name, "hwqos_app_rtt_seconds");
        assert_eq!(m("app.rate").exposition().name, "hwqos_app_rate");
        assert_eq!(
            hwqos_name("hwqos_sw_page_faults_per_second").unwrap(),
            "sw.page_faults"
        );
        assert_eq!(
            hwqos_name("hwqos_sw_task_clock_seconds_per_second").unwrap(),
            "sw.task_clock"
        );
        assert_eq!(
            hwqos_name("hwqos_hw_l1d_miss_per_second").unwrap(),
            "hw.l1d.miss"
        );
        assert_eq!(hwqos_name("hwqos_hw_raw_x_per_second").unwrap(), "hw.raw_x");
        assert_eq!(hwqos_name("node_cpu_seconds_total"), None);
        assert_eq!(hwqos_name("hwqos_zz_a"), None);
        // Exact and unambiguous for the whole registry.
        let mut seen = BTreeMap::new();
        for info in hwqos_core::metric::registry() {
            let e = info.name.exposition().name;
            assert_eq!(hwqos_name(&e).as_deref(), Some(info.name.as_str()), "{e}");
            assert!(
                seen.insert(e.clone(), info.name.clone()).is_none(),
                "{e} twice"
            );
        }
    }

    #[test]
    fn queries_combine_the_selector() {
        let (r, x, e) = fleet_queries(r#"{job="hwqos-monitor"}"#, "app.rtt_us").unwrap();
        assert_eq!(
            r,
            r#"{job="hwqos-monitor",__name__=~"hwqos_.+",scope="process"}"#
        );
        assert_eq!(
            x,
            r#"{job="hwqos-monitor",__name__="hwqos_app_rtt_seconds"}"#
        );
        assert_eq!(e, "hwqos_app_rtt_seconds");
        assert_eq!(
            fleet_queries("{}", "hwqos_app_rate").unwrap().1,
            r#"{__name__="hwqos_app_rate"}"#
        );
        assert!(fleet_queries("up", "app.rate").is_err());
        assert!(fleet_queries(r#"{__name__="x"}"#, "app.rate").is_err());
        assert!(fleet_queries("{}", "app.r\"}").is_err());
    }

    fn rs(name: &str, labels: &[(&str, &str)], f: impl Fn(usize) -> f64) -> RangeSeries {
        let mut l: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.insert("__name__".into(), name.into());
        RangeSeries {
            labels: l,
            points: (0..300).map(|i| (1.7e9 + 5.0 * i as f64, f(i))).collect(),
        }
    }

    #[test]
    fn groups_pool_and_flag_the_odd_node() {
        let wave = |i: usize| 1000.0 + 300.0 * (i as f64 * 0.07).sin();
        let other = |i: usize| 50.0 + 20.0 * (i as f64 * 0.031).cos();
        let mut res = Vec::new();
        let mut xs = Vec::new();
        for node in ["n1", "n2", "n3", "n4"] {
            let p = [
                ("node", node),
                ("scope", "process"),
                ("comm", "svc"),
                ("pid", "9"),
            ];
            res.push(rs("hwqos_sw_page_faults_per_second", &p, wave));
            res.push(rs("hwqos_sw_context_switches_per_second", &p, other));
            // Monitor self-metrics and app metrics are not resources.
            res.push(rs("hwqos_counter_running_ratio", &p, |_| 1.0));
            if node == "n4" {
                // x unrelated to r, reported at system scope.
                xs.push(rs(
                    "hwqos_app_rate",
                    &[("node", node), ("scope", "system")],
                    |i| (i as f64 * 0.05).cos(),
                ));
            } else {
                xs.push(rs("hwqos_app_rate", &p, |i| {
                    2.0 * wave(i) + ((i * 7) % 5) as f64
                }));
            }
        }
        // A second pid of svc on n1 adds to its resources.
        res.push(rs(
            "hwqos_sw_page_faults_per_second",
            &[
                ("node", "n1"),
                ("scope", "process"),
                ("comm", "svc"),
                ("pid", "10"),
            ],
            |_| 5.0,
        ));
        let by: Vec<String> = vec!["node".into(), "comm".into()];
        let groups = group(&res, &xs, &by).unwrap();
        assert_eq!(groups.len(), 4);
        assert_eq!(groups[0].node, "n1");
        let keys: Vec<&String> = groups[0].series.resources.keys().collect();
        assert_eq!(keys, ["sw.context_switches", "sw.page_faults"]);
        assert_eq!(
            groups[0].series.resources["sw.page_faults"].values()[0],
            wave(0) + 5.0
        );
        let params = AnalysisParams {
            step_ns: 5_000_000_000,
            ..AnalysisParams::default()
        };
        let fleet = analyse_fleet(&groups, &params, DEFAULT_OUTLIER_TOLERANCE).unwrap();
        assert_eq!(fleet.len(), 1);
        let f = &fleet[0];
        assert_eq!(f.r_hat(), Some("sw.page_faults"));
        assert!(f.pooled.resources[0].correlation > 0.6, "{}", f.table());
        let flags: Vec<(&str, bool)> = f
            .nodes
            .iter()
            .map(|n| (n.node.as_str(), n.outlier))
            .collect();
        assert_eq!(
            flags,
            [("n1", false), ("n2", false), ("n3", false), ("n4", true)],
            "{}",
            f.table()
        );
        assert!(f.table().contains("OUTLIER"));
        assert!(group(&res, &xs, &["node".to_string()]).is_err());
    }
}
