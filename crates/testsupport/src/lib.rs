//! What the hwqos test suites would otherwise each write again: waiting for a
//! condition with a generous deadline (never a timed assertion), fetching a
//! page over HTTP/1.1 from an agent's `/metrics`, checking an exposition with
//! the real `promtool`, counting the `perf_event` file descriptors a
//! process holds (how the tests prove an agent opened no counters of its
//! own), and running a crate's examples.
//!
//! A dev-dependency only: nothing shipped depends on it.
#![deny(missing_docs)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Polls `cond` every 10 ms until it holds; panics naming `what` after
/// `deadline`. Deadlines are generous on purpose: they catch a hang, they do
/// not measure speed.
pub fn wait_for(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An HTTP response: status line, headers and (de-chunked) body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code, e.g. 200.
    pub status: u16,
    /// The header lines, as received (without the status line).
    pub headers: Vec<(String, String)>,
    /// The body, with chunked transfer encoding undone.
    pub body: String,
}

impl HttpResponse {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` from `addr` (`host:port`) with `Connection: close`; `Err` with
/// a description when the connection or the response fails.
pub fn http_get(addr: &str, path: &str) -> Result<HttpResponse, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP header end in {raw:?}"))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(body).ok_or_else(|| format!("bad chunked body {body:?}"))?
    } else {
        body.to_string()
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// The `promtool` on `PATH`, if installed.
pub fn promtool() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join("promtool"))
        .find(|p| p.is_file())
}

/// Runs `promtool check metrics` on an exposition and panics with its output
/// when it rejects it. Without promtool it prints a skip line and returns
/// `false` — unless `CI` is set (the test command installs promtool), where a
/// missing promtool is a failure.
pub fn promtool_check_metrics(body: &str) -> bool {
    let Some(promtool) = promtool() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is not installed, and CI is set"
        );
        eprintln!("promtool not installed: `promtool check metrics` skipped");
        return false;
    };
    let mut p = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting promtool");
    p.stdin
        .take()
        .expect("promtool's stdin")
        .write_all(body.as_bytes())
        .expect("writing to promtool");
    let out = p.wait_with_output().expect("waiting for promtool");
    assert!(
        out.status.success(),
        "promtool check metrics rejected the exposition: {}{}\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// How many `perf_event` file descriptors process `pid` holds now (links in
/// `/proc/PID/fd` to `anon_inode:[perf_event]`); `None` when the process is
/// gone or its fds cannot be read.
pub fn perf_event_fds(pid: u32) -> Option<usize> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        dir.flatten()
            .filter(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|t| t.as_os_str() == "anon_inode:[perf_event]")
            })
            .count(),
    )
}

/// `target/<profile>/examples/NAME`, next to the running test binary's
/// `deps` directory: an example of `package` that `cargo test` built (cargo
/// builds every example of the packages it tests). Panics, naming the
/// command that builds it, when it is missing.
pub fn example_path(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} not built: run `cargo build -p {package} --examples`",
        path.display()
    );
    path
}

/// Runs example `name` of `package` ([`example_path`]) and returns its
/// stdout; panics with its status, stdout and stderr unless it exits 0.
pub fn run_example(package: &str, name: &str) -> String {
    let out = Command::new(example_path(package, name))
        .output()
        .unwrap_or_else(|e| panic!("running example {name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk("5\r\nhello\r\n1;x=y\r\n!\r\n0\r\n\r\n").as_deref(),
            Some("hello!")
        );
        assert_eq!(dechunk("5\r\nhel"), None, "a truncated chunk");
    }

    #[test]
    fn perf_event_fds_counts_only_perf_fds() {
        // This process opens none of its own here, and a gone pid is None.
        assert_eq!(perf_event_fds(std::process::id()), Some(0));
        assert_eq!(perf_event_fds(u32::MAX), None);
    }

    #[test]
    fn http_get_reads_status_headers_and_body() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // The whole request, however many segments it came in: closing
            // with unread bytes would reset the connection before the
            // client reads the response.
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the client closed before the end of its request");
                request.extend_from_slice(&buf[..n]);
            }
            s.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            )
            .unwrap();
        });
        let r = http_get(&addr, "/x").unwrap();
        server.join().unwrap();
        assert_eq!(r.status, 404);
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.body, "abc");
    }
}
