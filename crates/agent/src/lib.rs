//! Plumbing every hwqos agent binary needs and that the libraries must not
//! depend on (hwqos-core stays free of tokio, axum and tracing-subscriber):
//! the logging set-up, the OpenMetrics exposition set-up on
//! `prometheus-client` ([`render_exposition`], [`encode_gauge_family`],
//! [`encode_gauge`]), the `/metrics` endpoint (with bounded connections: a
//! header-read timeout, a lifetime and a connection cap) and bounded reads of
//! configuration files ([`read_config_file`]); and in [`lifecycle`] the life
//! of an agent process: exit statuses, configuration errors, systemd's notify
//! protocol and watchdog, stop and reload signals.
//!
//! The four agents (`hwqos-monitor`, `hwqos-relay`, `hwqos-loadgen`,
//! `hwqos-sra`) are thin `main`s around library calls; this crate is what
//! makes them behave alike towards an operator. A `main` calls
//! [`init_logging`] (stderr, the journal under systemd, filtered by
//! `RUST_LOG`), loads its TOML configuration with [`lifecycle::load_toml`] and
//! reports a bad value as a [`lifecycle::ConfigError`] that names the file,
//! line and key, tells systemd it is ready through a
//! [`lifecycle::ServiceManager`], feeds the watchdog from its work loop with a
//! [`lifecycle::Heartbeat`], stops on SIGTERM/SIGINT
//! ([`lifecycle::StopSignals`] for synchronous loops) and ends with
//! [`lifecycle::finish`], which maps the error chain to the exit status
//! convention (0 success, 1 runtime failure, 2 bad input).
//!
//! For Prometheus, an agent implements `prometheus_client`'s `Collector` on a
//! snapshot of its state, renders it per scrape with [`render_exposition`]
//! and serves the text with [`serve_metrics`] (or [`serve_metrics_with`] and
//! explicit [`MetricsLimits`]) on a Tokio runtime; the server stops when its
//! `watch` channel changes. All four agents' expositions are written this
//! way.
//!
//! Any other Rust service that should run as a hwqos-style systemd agent can
//! use the same pieces; nothing here is specific to one agent.
//!
//! # Examples
//!
//! A configuration value that parses but is not acceptable, reported with its
//! location and the bad-input exit status:
//!
//! ```rust
//! use hwqos_agent::lifecycle::{self, ConfigError};
//! use std::path::Path;
//!
//! #[derive(serde::Deserialize)]
//! struct Config {
//!     sampling: Sampling,
//! }
//! #[derive(serde::Deserialize)]
//! struct Sampling {
//!     rate_hz: f64,
//! }
//!
//! fn run(path: &Path) -> anyhow::Result<()> {
//!     let (config, text): (Config, String) = lifecycle::load_toml(path)?;
//!     if !(config.sampling.rate_hz > 0.0) {
//!         let e = ConfigError::invalid(path, &text, "sampling.rate_hz", "a positive rate in Hz");
//!         return Err(e.into());
//!     }
//!     Ok(())
//! }
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("agent.toml");
//! std::fs::write(&path, "[sampling]\nrate_hz = -5.0\n")?;
//! let err = run(&path).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     format!("{}:2: key `sampling.rate_hz`: a positive rate in Hz", path.display())
//! );
//! assert_eq!(lifecycle::exit_status(&err), lifecycle::EXIT_BAD_INPUT);
//! // In `main`: `lifecycle::finish("my-agent", run(&path))` prints the error
//! // and returns this status as the process's `ExitCode`.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! An exposition rendered from a snapshot, as `/metrics` serves it:
//!
//! ```rust
//! use hwqos_agent::{encode_gauge, render_exposition};
//! use prometheus_client::collector::Collector;
//! use prometheus_client::encoding::DescriptorEncoder;
//! use prometheus_client::registry::Unit;
//!
//! #[derive(Debug)]
//! struct Exposition {
//!     uptime_s: f64,
//! }
//!
//! impl Collector for Exposition {
//!     fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
//!         let help = "Seconds since the agent started.";
//!         encode_gauge(&mut encoder, "uptime", help, Some(Unit::Seconds), Some(self.uptime_s))
//!     }
//! }
//!
//! let text = render_exposition("hwqos_example", Exposition { uptime_s: 12.5 });
//! assert!(text.contains("hwqos_example_uptime_seconds 12.5\n"), "{text}");
//! assert!(text.ends_with("# EOF\n"));
//! ```

#![deny(missing_docs)]

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric as _,
};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// The content type of an OpenMetrics 1.0 text exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Logs to stderr (the journal under systemd), colours only on a terminal,
/// filtered by `RUST_LOG` (default `info`). A log line that cannot be
/// written (stderr a closed pipe: the reader of the log died) is dropped;
/// without that, tracing-subscriber reports the failure with `eprintln!`,
/// which panics on the same broken pipe and kills the logging thread — a
/// watcher or worker thread would die on its next log line.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_writer(|| LossyStderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}

/// Stderr for the log, ignoring write errors (see [`init_logging`]).
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // A failed write counts as written: a log line is not worth a panic.
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// The OpenMetrics text exposition of what `collector` writes for this
/// scrape, every family name under `prefix_`, ending with `# EOF`.
///
/// The agents render from a snapshot of their state at scrape time, so each
/// one has a [`Collector`] that owns the snapshot and writes its families with
/// [`encode_gauge_family`] and [`encode_gauge`]: families and series come out
/// in the order written (a `prometheus_client` `Family` keeps its series in a
/// hash map), and a family without series still shows its metadata.
pub fn render_exposition(prefix: &str, collector: impl Collector) -> String {
    let mut registry = Registry::with_prefix(prefix);
    registry.register_collector(Box::new(collector));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("encoding an exposition into a String cannot fail");
    out
}

/// Writes a gauge family: `# HELP`, `# TYPE` and, with a unit, `# UNIT` (the
/// crate appends the unit to `name`: `convergence` with [`Unit::Seconds`] is
/// `…_convergence_seconds`), then one sample per label set, in the order
/// given. `help` is written as it is: plain text, no newline or backslash.
pub fn encode_gauge_family<S, N>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    samples: impl IntoIterator<Item = (S, N)>,
) -> std::fmt::Result
where
    S: EncodeLabelSet,
    N: EncodeGaugeValue,
{
    debug_assert!(
        !help.contains(['\n', '\\']),
        "HELP is written unescaped: {help:?}"
    );
    let mut family = encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
    for (labels, value) in samples {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Writes a gauge family of one unlabelled series, or of none when `value`
/// is `None` (the metadata is written either way); as [`encode_gauge_family`].
pub fn encode_gauge<N: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: Option<N>,
) -> std::fmt::Result {
    debug_assert!(
        !help.contains(['\n', '\\']),
        "HELP is written unescaped: {help:?}"
    );
    let mut metric = encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
    if let Some(v) = value {
        metric.encode_gauge(&v)?;
    }
    Ok(())
}

/// Renders the current exposition for a scrape.
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Bounds on the connections of the `/metrics` server, so that slow or idle
/// clients cannot hold it (slowloris) or grow the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsLimits {
    /// A client must send a request's whole header within this; it also bounds
    /// how long an idle keep-alive connection waits for its next request.
    pub header_read_timeout: Duration,
    /// After this a connection is closed once its request in flight is answered…
    pub max_connection_age: Duration,
    /// …or, at the latest, this much later (a client that does not read its response).
    pub close_grace: Duration,
    /// Connections served at once; further connections are closed on accept.
    pub max_connections: usize,
}

impl Default for MetricsLimits {
    /// 10 s to send a header, connections live 60 s (+ 5 s to finish a
    /// response), 128 at once: far above what a Prometheus server needs.
    fn default() -> Self {
        MetricsLimits {
            header_read_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(60),
            close_grace: Duration::from_secs(5),
            max_connections: 128,
        }
    }
}

/// Serves `GET /metrics` with what `render` returns until `stop` changes
/// (or its sender is dropped), then finishes the requests in flight; with the
/// default [`MetricsLimits`]. Needs a Tokio runtime with both I/O and timers
/// enabled (`enable_all`): the limits are timers.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    render: RenderMetrics,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    serve_metrics_with(listener, render, stop, MetricsLimits::default()).await;
}

/// [`serve_metrics`] with explicit connection bounds.
pub async fn serve_metrics_with(
    listener: tokio::net::TcpListener,
    render: RenderMetrics,
    mut stop: tokio::sync::watch::Receiver<bool>,
    limits: MetricsLimits,
) {
    use axum::http::header;
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let render = render.clone();
            async move { ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], render()) }
        }),
    );
    let service = hyper_util::service::TowerToHyperService::new(app);
    let mut connections = tokio::task::JoinSet::new();
    let mut refused: u64 = 0;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // EMFILE and the like: do not spin on the error.
                        tracing::debug!("/metrics accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                while connections.try_join_next().is_some() {}
                if connections.len() >= limits.max_connections {
                    refused += 1;
                    // Once per power of two: a flood must not flood the log.
                    if refused.is_power_of_two() {
                        tracing::warn!(
                            "/metrics: {} connections open, refusing more ({refused} refused so far)",
                            limits.max_connections
                        );
                    }
                    drop(stream);
                    continue;
                }
                connections.spawn(metrics_connection(stream, service.clone(), stop.clone(), limits));
            }
            _ = stop.changed() => break,
        }
    }
    drop(listener);
    let wait_all = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.close_grace + Duration::from_secs(1), wait_all)
        .await
        .is_err()
    {
        connections.abort_all();
    }
}

async fn metrics_connection<S>(
    stream: tokio::net::TcpStream,
    service: S,
    mut stop: tokio::sync::watch::Receiver<bool>,
    limits: MetricsLimits,
) where
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<axum::body::Body>,
        > + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(conn);
    let age = tokio::time::sleep(limits.max_connection_age);
    tokio::pin!(age);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("/metrics connection ended: {e}");
            }
            return;
        }
        _ = &mut age => {}
        _ = stop.changed() => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(limits.close_grace, conn).await;
}

/// Reads a user-given file safely (regular files only, bounded, never
/// blocking on a FIFO): hwqos-core's one implementation, here for the agents.
pub use hwqos_core::fs::read_file_bounded;

pub mod lifecycle;
pub mod watched;

/// [`read_file_bounded`] for text (the file must also be UTF-8): hwqos-core's
/// `read_text_bounded` under the name the agents use for configurations.
pub fn read_config_file(path: &Path, max_bytes: u64) -> std::io::Result<String> {
    hwqos_core::fs::read_text_bounded(path, max_bytes)
}

/// The largest configuration file the agents read: far above any real one.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[derive(Debug)]
    struct Example;

    #[derive(prometheus_client::encoding::EncodeLabelSet)]
    struct PairLabels {
        metric: String,
        cpu: u32,
    }

    impl Collector for Example {
        fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
            encode_gauge_family(
                &mut encoder,
                "value",
                "A value per pair.",
                None,
                [
                    (
                        PairLabels {
                            metric: "b\"q\\\n".into(),
                            cpu: 1,
                        },
                        0.5,
                    ),
                    (
                        PairLabels {
                            metric: "a".into(),
                            cpu: 0,
                        },
                        7.0,
                    ),
                ],
            )?;
            encode_gauge(
                &mut encoder,
                "wait",
                "Time waited.",
                Some(Unit::Seconds),
                Some(1.5),
            )?;
            encode_gauge::<u64>(&mut encoder, "absent", "Not measured.", None, None)?;
            encode_gauge(&mut encoder, "count", "A count.", None, Some(u64::MAX))
        }
    }

    #[test]
    fn expositions_come_from_prometheus_client_in_the_order_written() {
        assert_eq!(
            render_exposition("hwqos_x", Example),
            "# HELP hwqos_x_value A value per pair.\n\
             # TYPE hwqos_x_value gauge\n\
             hwqos_x_value{metric=\"b\\\"q\\\\\\n\",cpu=\"1\"} 0.5\n\
             hwqos_x_value{metric=\"a\",cpu=\"0\"} 7.0\n\
             # HELP hwqos_x_wait_seconds Time waited.\n\
             # TYPE hwqos_x_wait_seconds gauge\n\
             # UNIT hwqos_x_wait_seconds seconds\n\
             hwqos_x_wait_seconds 1.5\n\
             # HELP hwqos_x_absent Not measured.\n\
             # TYPE hwqos_x_absent gauge\n\
             # HELP hwqos_x_count A count.\n\
             # TYPE hwqos_x_count gauge\n\
             hwqos_x_count 18446744073709551615\n\
             # EOF\n"
        );
    }

    #[tokio::test]
    async fn serves_the_rendered_exposition_and_stops_when_told() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(serve_metrics(
            listener,
            Arc::new(|| "up 1\n# EOF\n".to_string()),
            stop_rx,
        ));
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut reply = String::new();
        conn.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.contains(OPENMETRICS_CONTENT_TYPE), "{reply}");
        assert!(reply.ends_with("up 1\n# EOF\n"), "{reply}");
        stop.send(true).unwrap();
        server.await.unwrap();
    }

    fn quick_limits() -> MetricsLimits {
        MetricsLimits {
            header_read_timeout: Duration::from_secs(1),
            max_connection_age: Duration::from_secs(60),
            close_grace: Duration::from_secs(1),
            max_connections: 4,
        }
    }

    /// Reads until the server closes the connection; `Err` if it is still
    /// open after `bound` (a generous bound, not a speed assertion).
    async fn closed_within(conn: &mut tokio::net::TcpStream, bound: Duration) -> Result<(), ()> {
        let mut buf = [0u8; 1024];
        tokio::time::timeout(bound, async {
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .map_err(|_| ())
    }

    #[tokio::test]
    async fn slow_header_and_silent_clients_are_disconnected() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(serve_metrics_with(
            listener,
            Arc::new(|| "up 1\n# EOF\n".to_string()),
            stop_rx,
            quick_limits(),
        ));
        // Half a request line, then nothing (slowloris).
        let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
        half.write_all(b"GET /metr").await.unwrap();
        // Connected, never sends a byte.
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        // The header timeout is 1 s; 30 s is a generous bound (without a
        // timeout both stay open for ever).
        assert!(
            closed_within(&mut half, Duration::from_secs(30))
                .await
                .is_ok(),
            "a client that sent half a request line is still connected after 30 s"
        );
        assert!(
            closed_within(&mut silent, Duration::from_secs(30))
                .await
                .is_ok(),
            "a silent client is still connected after 30 s"
        );
        // Good scrapes still work.
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut reply = String::new();
        conn.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("server stops")
            .unwrap();
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_and_the_server_recovers() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let limits = MetricsLimits {
            header_read_timeout: Duration::from_secs(60),
            ..quick_limits()
        };
        let server = tokio::spawn(serve_metrics_with(
            listener,
            Arc::new(|| "up 1\n# EOF\n".to_string()),
            stop_rx,
            limits,
        ));
        let mut held = Vec::new();
        for _ in 0..limits.max_connections {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET /").await.unwrap();
            held.push(c);
        }
        // Make sure the server has accepted those four before the fifth.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(
            closed_within(&mut extra, Duration::from_secs(30))
                .await
                .is_ok(),
            "a connection beyond max_connections was kept"
        );
        drop(held);
        // Once they are gone, scrapes are served again.
        let mut reply = String::new();
        for _ in 0..300 {
            let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            reply.clear();
            let _ = conn.read_to_string(&mut reply).await;
            if reply.starts_with("HTTP/1.1 200") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("server stops")
            .unwrap();
    }

    #[test]
    fn config_files_must_be_regular_bounded_and_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok.toml");
        std::fs::write(&ok, "rate_hz = 10\n").unwrap();
        assert_eq!(read_config_file(&ok, 100).unwrap(), "rate_hz = 10\n");

        let err = |p: &Path, max: u64| read_config_file(p, max).unwrap_err().to_string();
        assert!(
            err(&ok, 5).contains("larger than 5 bytes"),
            "{}",
            err(&ok, 5)
        );
        assert!(
            err(dir.path(), 100).contains("is a directory, not a regular file"),
            "{}",
            err(dir.path(), 100)
        );
        // /dev/zero would grow the reader without bound; it is refused unread.
        let zero = Path::new("/dev/zero");
        assert!(
            err(zero, MAX_CONFIG_BYTES).contains("is a character device, not a regular file"),
            "{}",
            err(zero, MAX_CONFIG_BYTES)
        );
        // A FIFO without a writer would block a plain read for ever.
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(
            err(&fifo, 100).contains("is a FIFO, not a regular file"),
            "{}",
            err(&fifo, 100)
        );
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, b"a = 1\n\xff\n").unwrap();
        assert!(
            err(&bad, 100).contains("not UTF-8 text (invalid byte at offset 6)"),
            "{}",
            err(&bad, 100)
        );
        let missing = dir.path().join("missing.toml");
        assert_eq!(
            read_config_file(&missing, 100).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }
}
