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

/// One request and its echo between two endpoints in memory, for `one:none`
/// and `adaptive`, with everything the streams do per message (framing,
/// probes and their stamped replies, decoding, sampling after the send, round
/// boundaries). In memory the link is free, so `adaptive` settles on `none`:
/// the difference between the two is the learning policy's own cost per
/// exchange where compression cannot pay (loopback).
fn echo_exchange(c: &mut Criterion) {
    let reg = Arc::new(Registry::standard());
    let mut g = c.benchmark_group("echo_exchange_dp");
    for policy in ["one:none", "adaptive"] {
        let cfg = StreamConfig {
            policy: policy.parse().unwrap(),
            throttle: None,
            round_messages: 50,
            ..Default::default()
        };
        let mut a = Endpoint::new(cfg.clone(), reg.clone());
        let mut b = Endpoint::new(cfg, reg.clone());
        a.handshake_in_memory(&mut b).unwrap();
        let mut src = MessageSource::new(DataSet::Realistic, 512, 3);
        let msgs: Vec<Vec<u8>> = (0..1000).map(|_| src.next_message()).collect();
        let (mut wire_ab, mut wire_ba) = (Vec::new(), Vec::new());
        let (mut replies_a, mut replies_b) = (Vec::new(), Vec::new());
        let mut exchange = |m: &[u8]| {
            // a sends (with the replies it owes b in front), b receives.
            wire_ab.clear();
            wire_ab.append(&mut replies_a);
            let owed = wire_ab.len();
            a.encode(m, &mut wire_ab).unwrap();
            a.stamp_replies(&mut wire_ab[..owed]);
            a.run_deferred_sample();
            let mut echo = None;
            for f in parse_all(&wire_ab, b.limits()).unwrap() {
                echo = b.decode(f, &mut replies_b).unwrap().or(echo);
            }
            // b echoes, a receives.
            wire_ba.clear();
            wire_ba.append(&mut replies_b);
            let owed = wire_ba.len();
            b.encode(&echo.unwrap(), &mut wire_ba).unwrap();
            b.stamp_replies(&mut wire_ba[..owed]);
            b.run_deferred_sample();
            let mut got = None;
            for f in parse_all(&wire_ba, a.limits()).unwrap() {
                got = a.decode(f, &mut replies_a).unwrap().or(got);
            }
            got.unwrap().len()
        };
        // Past the learning phase: what a long-running stream pays.
        for m in msgs.iter().cycle().take(20_000) {
            exchange(m);
        }
        let mut i = 0;
        g.bench_function(policy, |bench| {
            bench.iter(|| {
                i = (i + 1) % msgs.len();
                exchange(black_box(&msgs[i]))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, codecs, decision, echo_exchange);
criterion_main!(benches);
