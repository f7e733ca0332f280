//! Plumbing every hwqos agent binary needs and that the libraries must not
//! depend on (hwqos-core stays free of tokio, axum and tracing-subscriber):
//! the logging set-up and the OpenMetrics `/metrics` endpoint.

use std::io::IsTerminal;
use std::sync::Arc;

/// The content type of an OpenMetrics 1.0 text exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Logs to stderr (the journal under systemd), colours only on a terminal,
/// filtered by `RUST_LOG` (default `info`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}

/// Writes the `# TYPE` (gauge), `# UNIT` (when given) and `# HELP` lines
/// that open a metric family.
pub fn gauge_family(out: &mut String, name: &str, help: &str, unit: Option<&str>) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "# TYPE {name} gauge");
    if let Some(u) = unit {
        let _ = writeln!(out, "# UNIT {name} {u}");
    }
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
}

/// A label value as the exposition format quotes it.
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// HELP text as the exposition format wants it.
pub fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value (`NaN` and `±Inf` spelled as the format wants).
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// Renders the current exposition for a scrape.
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves `GET /metrics` with what `render` returns until `stop` changes
/// (or its sender is dropped), then finishes the requests in flight.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    render: RenderMetrics,
    mut stop: tokio::sync::watch::Receiver<bool>,
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
    let r = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await;
    if let Err(e) = r {
        tracing::error!("/metrics server failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn families_labels_and_numbers_are_written_as_openmetrics_wants() {
        let mut out = String::new();
        gauge_family(&mut out, "x_seconds", "a\\b\nc", Some("seconds"));
        assert_eq!(
            out,
            "# TYPE x_seconds gauge\n# UNIT x_seconds seconds\n# HELP x_seconds a\\\\b\\nc\n"
        );
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(0.25), "0.25");
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
}
