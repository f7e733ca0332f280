//! Codec throughput per message size on realistic control-plane content (Dp)
//! and the per-message decision overhead of the selection policies.
//!
//! `cargo bench -p hwqos-benches --bench compress_codecs` measures;
//! `… -- --test` runs every benchmark once as a smoke test.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hwqos_compress::codec::CodecId;
use hwqos_compress::datasets::{DataSet, MessageSource};
use hwqos_compress::learn::Learner;
use hwqos_compress::policy::Selector;
use hwqos_compress::wire::parse_all;
use hwqos_compress::{Endpoint, PolicyKind, Registry, Sampling, StreamConfig};
use std::hint::black_box;
use std::sync::Arc;

/// Concatenated Dp messages cut to `size` bytes.
fn dp_message(size: usize) -> Vec<u8> {
    let mut src = MessageSource::new(DataSet::Realistic, 512, 3);
    let mut m = Vec::new();
    while m.len() < size {
        m.extend(src.next_message());
    }
    m.truncate(size);
    m
}

fn codecs(c: &mut Criterion) {
    let reg = Registry::standard();
    for size in [256usize, 1024, 16 * 1024] {
        let msg = dp_message(size);
        let mut g = c.benchmark_group(format!("codec_compress_{size}B"));
        g.throughput(Throughput::Bytes(size as u64));
        for id in reg.ids() {
            let codec = reg.get(id).unwrap();
            g.bench_with_input(BenchmarkId::from_parameter(codec.name()), &msg, |b, m| {
                let mut out = Vec::with_capacity(size * 2);
                b.iter(|| {
                    out.clear();
                    codec.compress(black_box(m), &mut out).unwrap();
                    out.len()
                })
            });
        }
        g.finish();
        let mut g = c.benchmark_group(format!("codec_decompress_{size}B"));
        g.throughput(Throughput::Bytes(size as u64));
        for id in reg.ids() {
            let codec = reg.get(id).unwrap();
            let mut packed = Vec::new();
            codec.compress(&msg, &mut packed).unwrap();
            g.bench_with_input(
                BenchmarkId::from_parameter(codec.name()),
                &packed,
                |b, p| {
                    let mut out = Vec::new();
                    b.iter(|| {
                        codec.decompress(black_box(p), size, &mut out).unwrap();
                        out.len()
                    })
                },
            );
        }
        g.finish();
    }
}

fn trained_learner() -> Learner {
    let mut l = Learner::new(0.3, Some(80.0));
    for id in Registry::standard().ids().into_iter().skip(1) {
        l.observe_compression(
            id,
            1000,
            300 + u64::from(id.0) as usize * 20,
            1000 * u64::from(id.0),
        );
        l.observe_local_decompression(id, 1000, 300);
    }
    l.observe_message_size(400);
    l.observe_rtt(200_000);
    l.end_round(None);
    l
}

fn decision(c: &mut Criterion) {
    let reg = Registry::standard();
    let learner = trained_learner();
    let mut g = c.benchmark_group("decision");
    for kind in [
        PolicyKind::Adaptive,
        PolicyKind::Majority,
        PolicyKind::RoundRobin,
    ] {
        let mut s = Selector::new(kind.clone(), reg.ids(), &reg, 5);
        s.start_round(&learner, false);
        g.bench_function(format!("pick_{kind}"), |b| {
            b.iter(|| (black_box(s.pick()), s.explore()))
        });
    }
    g.bench_function("round_boundary_adaptive", |b| {
        let mut s = Selector::new(PolicyKind::Adaptive, reg.ids(), &reg, 5);
        b.iter(|| s.start_round(black_box(&learner), false))
    });
    // The whole send path without compression: framing, probes, bookkeeping.
    let cfg = StreamConfig {
        policy: "one:none".parse().unwrap(),
        throttle: None,
        sampling: Sampling::Off,
        ..Default::default()
    };
    let reg = Arc::new(reg);
    let mut a = Endpoint::new(cfg.clone(), reg.clone());
    let mut peer = Endpoint::new(cfg, reg);
    let (mut ha, mut hb) = (Vec::new(), Vec::new());
    a.write_hello(&mut ha);
    peer.write_hello(&mut hb);
    a.accept_hello(parse_all(&hb, a.limits()).unwrap().remove(0))
        .unwrap();
    let msg = dp_message(400);
    let mut out = Vec::with_capacity(2048);
    g.bench_function("encode_400B_uncompressed", |b| {
        b.iter(|| {
            out.clear();
            a.encode(black_box(&msg), &mut out).unwrap()
        })
    });
    g.finish();
    let _ = CodecId::NONE;
}

criterion_group!(benches, codecs, decision);
criterion_main!(benches);
