//! The relay under attack (issue 17), everything on loopback: clients that
//! write without reading, slowloris, decompression bombs, floods. Each test
//! asserts the outcome (nothing stuck, the next good transfer byte for byte),
//! never a duration: waits for a condition are bounded and generous.

use hwqos_relay::{Config, Mode, Running};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn relay_config(mode: Mode, connect: String) -> Config {
    Config {
        mode,
        listen: "127.0.0.1:0".into(),
        connect,
        // Fast and deterministic: the tests are about connections, not codecs.
        policy: "one:none".parse().unwrap(),
        cpu_target: 0.0,
        drain_timeout_ms: 100,
        metrics: hwqos_relay::config::MetricsConfig {
            listen: String::new(),
        },
        ..Config::default()
    }
}

/// An echo server that tolerates resets and counts its open connections.
struct Backend {
    addr: String,
    open: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
}

async fn echo_backend() -> Backend {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let open = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let (o, a) = (open.clone(), accepted.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            o.fetch_add(1, Ordering::SeqCst);
            a.fetch_add(1, Ordering::SeqCst);
            let o = o.clone();
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                if tokio::io::copy(&mut r, &mut w).await.is_ok() {
                    let _ = w.shutdown().await;
                }
                drop(s);
                o.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Backend {
        addr,
        open,
        accepted,
    }
}

/// Polls `cond` every 50 ms for at most `secs` seconds; false if it never held.
async fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Incompressible bytes (xorshift), so that the link's buffers fill too.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// One transfer through the pair: `len` bytes written while they are read
/// back, then a half-close; the echo must be byte for byte.
async fn good_transfer(near: &Running, len: usize) {
    let c = TcpStream::connect(near.listen_addr).await.unwrap();
    let data = noise(len, 42);
    let (mut r, mut w) = c.into_split();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&sent).await.unwrap();
        w.shutdown().await.unwrap();
    });
    let mut got = Vec::new();
    r.read_to_end(&mut got).await.unwrap();
    writer.await.unwrap();
    assert_eq!(got.len(), data.len(), "echo length");
    assert!(got == data, "the echo changed on the way");
}

fn gauge(r: &Running) -> String {
    r.metrics_text()
        .lines()
        .find(|l| l.starts_with("hwqos_relay_connections "))
        .unwrap_or("hwqos_relay_connections ?")
        .to_string()
}

/// Defect 1: a client that writes without reading and then closes used to
/// leave its connection (and the backend's) open for ever: the direction
/// towards the client failed, the other stayed blocked on a full link.
/// `max_connections` such clients locked the relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_only_clients_do_not_leak_connections() {
    let backend = echo_backend().await;
    let mut far_cfg = relay_config(Mode::Decompress, backend.addr.clone());
    far_cfg.max_connections = 3;
    let far = hwqos_relay::start(far_cfg).await.unwrap();
    let mut near_cfg = relay_config(Mode::Compress, far.listen_addr.to_string());
    near_cfg.max_connections = 3;
    let near = hwqos_relay::start(near_cfg).await.unwrap();

    for round in 0..2u64 {
        let mut clients = Vec::new();
        for i in 0..3u64 {
            let addr = near.listen_addr;
            clients.push(tokio::spawn(async move {
                let mut c = TcpStream::connect(addr).await.unwrap();
                let data = noise(1 << 20, round * 10 + i + 1);
                // Write until every buffer on the way is full (the client
                // never reads its echo), then close with data unread.
                let _ = tokio::time::timeout(Duration::from_secs(3), async {
                    for _ in 0..256 {
                        if c.write_all(&data).await.is_err() {
                            break;
                        }
                    }
                })
                .await;
                drop(c);
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        let closed = eventually(60, || {
            near.open_connections() == 0
                && far.open_connections() == 0
                && backend.open.load(Ordering::SeqCst) == 0
        })
        .await;
        assert!(
            closed,
            "round {round}: connections still open: near {} ({}), far {} ({}), backend {}",
            near.open_connections(),
            gauge(&near),
            far.open_connections(),
            gauge(&far),
            backend.open.load(Ordering::SeqCst)
        );
        assert_eq!(gauge(&near), "hwqos_relay_connections 0");
        assert_eq!(gauge(&far), "hwqos_relay_connections 0");
    }
    // The slots are free: a good transfer goes through byte for byte.
    good_transfer(&near, 3 << 20).await;
    assert!(
        eventually(60, || near.open_connections() == 0
            && far.open_connections() == 0)
        .await
    );
    assert_eq!(backend.accepted.load(Ordering::SeqCst), 7);
    near.shutdown().await;
    far.shutdown().await;
}
