//! Relay throughput on loopback: an application streams 16 KiB writes through
//! a compress/decompress relay pair to an echo server and reads them back.
//!
//! `cargo bench -p hwqos-benches --bench compress_relay`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hwqos_relay::{Config, Mode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn config(mode: Mode, connect: String, policy: &str) -> Config {
    Config {
        mode,
        listen: "127.0.0.1:0".into(),
        connect,
        policy: policy.parse().unwrap(),
        cpu_target: 0.0,
        drain_timeout_ms: 100,
        metrics: hwqos_relay::config::MetricsConfig {
            listen: String::new(),
        },
        ..Config::default()
    }
}

fn relay(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let block: Vec<u8> = {
        let mut src = hwqos_compress::datasets::MessageSource::new(
            hwqos_compress::datasets::DataSet::Realistic,
            512,
            9,
        );
        let mut v = Vec::new();
        while v.len() < 16 * 1024 {
            v.extend(src.next_message());
        }
        v.truncate(16 * 1024);
        v
    };
    let mut g = c.benchmark_group("relay_loopback_16KiB_round_trip");
    g.throughput(Throughput::Bytes(block.len() as u64));
    for policy in ["one:none", "one:lz4", "adaptive"] {
        let (mut client, near, far) = rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let echo = l.local_addr().unwrap().to_string();
            tokio::spawn(async move {
                while let Ok((mut s, _)) = l.accept().await {
                    // Without it Nagle and delayed ACKs add 40 ms per round trip.
                    s.set_nodelay(true).unwrap();
                    tokio::spawn(async move {
                        let (mut r, mut w) = s.split();
                        let _ = tokio::io::copy(&mut r, &mut w).await;
                    });
                }
            });
            let far = hwqos_relay::start(config(Mode::Decompress, echo, policy))
                .await
                .unwrap();
            let near =
                hwqos_relay::start(config(Mode::Compress, far.listen_addr.to_string(), policy))
                    .await
                    .unwrap();
            let c = tokio::net::TcpStream::connect(near.listen_addr)
                .await
                .unwrap();
            c.set_nodelay(true).unwrap();
            (c, near, far)
        });
        let mut back = vec![0u8; block.len()];
        g.bench_function(BenchmarkId::from_parameter(policy), |b| {
            b.iter(|| {
                rt.block_on(async {
                    client.write_all(&block).await.unwrap();
                    client.read_exact(&mut back).await.unwrap();
                })
            })
        });
        drop(client);
        rt.block_on(async {
            near.shutdown().await;
            far.shutdown().await;
        });
    }
    g.finish();
}

criterion_group!(benches, relay);
criterion_main!(benches);
