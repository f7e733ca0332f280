//! A relay pair on loopback carries bytes unchanged in both directions,
//! reports them on `/metrics` (checked with `promtool check metrics`), and
//! applies a reload to open connections.

use hwqos_relay::{Config, Mode};
use hwqos_testsupport::{http_get, promtool_check_metrics};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn relay_config(mode: Mode, connect: String, policy: &str) -> Config {
    Config {
        mode,
        listen: "127.0.0.1:0".into(),
        connect,
        policy: policy.parse().unwrap(),
        probe_every: 4,
        round_messages: 10,
        // No throttle: the run is shorter than the throttle's first CPU reading.
        cpu_target: 0.0,
        metrics: hwqos_relay::config::MetricsConfig {
            listen: "127.0.0.1:0".into(),
        },
        ..Config::default()
    }
}

async fn echo_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                tokio::io::copy(&mut r, &mut w).await.unwrap();
                w.shutdown().await.unwrap();
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_pair_carries_bytes_both_ways_and_reports_them() {
    let server = echo_server().await;
    let far = hwqos_relay::start(relay_config(Mode::Decompress, server, "adaptive"))
        .await
        .unwrap();
    let near = hwqos_relay::start(relay_config(
        Mode::Compress,
        far.listen_addr.to_string(),
        "round-robin",
    ))
    .await
    .unwrap();

    let mut c = tokio::net::TcpStream::connect(near.listen_addr)
        .await
        .unwrap();
    c.set_nodelay(true).unwrap();
    let mut sent = Vec::new();
    let mut got = Vec::new();
    for i in 0..200u32 {
        let m = format!(
            "<msg id=\"{i}\"><body>{}</body></msg>\n",
            "status ok ".repeat((i % 40) as usize)
        );
        c.write_all(m.as_bytes()).await.unwrap();
        sent.extend_from_slice(m.as_bytes());
        let mut buf = vec![0u8; m.len()];
        c.read_exact(&mut buf).await.unwrap();
        got.extend_from_slice(&buf);
    }
    // A large block in one go, then a clean half-close.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 7) as u8).collect();
    let (mut r, mut w) = c.into_split();
    let writer = tokio::spawn(async move {
        w.write_all(&big).await.unwrap();
        w.shutdown().await.unwrap();
        big
    });
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).await.unwrap();
    let big = writer.await.unwrap();
    assert!(got == sent, "small messages changed on the way");
    assert_eq!(rest.len(), big.len(), "{}", near.metrics_text());
    assert!(rest == big, "the large block changed on the way");

    let body = near.metrics_text();
    assert!(
        body.contains("hwqos_relay_info{mode=\"compress\",policy=\"round-robin\""),
        "{body}"
    );
    let plain_in = sent.len() + big.len();
    assert!(
        body.contains(&format!(
            "hwqos_relay_bytes{{direction=\"plain_in\"}} {plain_in}"
        )),
        "{body}"
    );
    assert!(
        body.contains("hwqos_relay_messages{codec=\"lz4\"}"),
        "{body}"
    );
    assert!(
        body.contains("hwqos_relay_codec_share_ratio{codec="),
        "{body}"
    );
    // Round-robin sends no padded probes but its RTTs are watched too.
    assert!(body.contains("\nhwqos_relay_link_changes "), "{body}");
    // Only the adaptive policy samples; every policy probes.
    assert!(body.contains("\nhwqos_relay_samples 0\n"), "{body}");
    assert!(
        body.contains("\nhwqos_relay_sample_seconds 0.0\n"),
        "{body}"
    );
    let probes: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix("hwqos_relay_probes "))
        .expect("hwqos_relay_probes")
        .parse()
        .unwrap();
    assert!(probes > 0, "{body}");

    // The blocking client runs off the runtime's workers, which serve /metrics.
    let metrics_addr = near.metrics_addr.unwrap().to_string();
    let r = tokio::task::spawn_blocking(move || http_get(&metrics_addr, "/metrics"))
        .await
        .unwrap()
        .expect("GET /metrics");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.header("content-type").is_some_and(|v| v
            .to_ascii_lowercase()
            .contains("application/openmetrics-text")),
        "{r:?}"
    );
    let http_body = r.body;
    assert!(http_body.ends_with("# EOF\n"));

    promtool_check_metrics(&http_body);

    // Reload applies to open connections: keep one open, switch the policy.
    let mut c = tokio::net::TcpStream::connect(near.listen_addr)
        .await
        .unwrap();
    c.write_all(b"ping").await.unwrap();
    let mut b4 = [0u8; 4];
    c.read_exact(&mut b4).await.unwrap();
    // The first connection's task may still be closing (bounded wait).
    for _ in 0..400 {
        if near.open_connections() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(near.open_connections(), 1);
    near.reload(relay_config(
        Mode::Compress,
        far.listen_addr.to_string(),
        "one:zstd-3",
    ));
    for _ in 0..20 {
        c.write_all(&[b'a'; 1000]).await.unwrap();
        let mut b = vec![0u8; 1000];
        c.read_exact(&mut b).await.unwrap();
    }
    let body = near.metrics_text();
    assert!(body.contains("policy=\"one:zstd-3\""), "{body}");
    assert!(body.contains("hwqos_relay_reloads 1"), "{body}");
    assert!(
        body.contains("hwqos_relay_chosen_codec{codec=\"zstd-3\"} 1"),
        "{body}"
    );
    drop(c);
    near.shutdown().await;
    far.shutdown().await;
}
