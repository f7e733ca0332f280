//! Writes the fuzzers' seed corpus: valid handshakes, data frames with every
//! codec (stream frames of the stream codecs included), probes and replies,
//! and sequences of stream payloads for the stream contexts.
//!
//! `cargo run -p hwqos-compress --features full --example fuzz_seeds -- crates/compress/fuzz/corpus`

use hwqos_compress::wire::{
    parse_all, write_control, DecompressReport, FrameKind, LinkProbe, LinkProbeReply,
};
use hwqos_compress::{CodecId, Endpoint, Registry, Sampling, StreamConfig};
use std::path::Path;
use std::sync::Arc;

fn main() {
    let root = std::env::args()
        .nth(1)
        .expect("usage: fuzz_seeds CORPUS_DIR");
    let root = Path::new(&root);
    let reg = Arc::new(Registry::standard_with_streams());
    let msgs: Vec<Vec<u8>> = vec![
        b"INVITE sip:bob@example.invalid SIP/2.0\r\nVia: SIP/2.0/TCP 10.0.0.1\r\n\r\n".to_vec(),
        vec![0u8; 700],
        vec![0xffu8; 300],
        br#"{"cmd":"update","session":4711,"avp":[{"code":263,"v":"abc"}]}"#.to_vec(),
        Vec::new(),
        // Again: a stream codec compresses it against the first copy.
        b"INVITE sip:bob@example.invalid SIP/2.0\r\nVia: SIP/2.0/TCP 10.0.0.1\r\n\r\n".to_vec(),
    ];
    let mut frame_seeds: Vec<Vec<u8>> = Vec::new();
    let mut codec_seeds: Vec<Vec<u8>> = Vec::new();
    let mut context_seeds: Vec<Vec<u8>> = Vec::new();
    for (i, id) in reg.ids().into_iter().enumerate() {
        let name = reg.name_of(id);
        let stream_codec = reg.get(id).unwrap().is_stream();
        // The stream-context seed: stream codec index, then per frame
        // flags (bit 0: reset), declared length, payload length, payload.
        let mut context_seed = vec![context_seeds.len() as u8];
        let cfg = StreamConfig {
            policy: format!("one:{name}").parse().unwrap(),
            throttle: None,
            checksum: i % 2 == 0,
            probe_every: 2,
            sampling: Sampling::Off,
            max_message: 1 << 16,
            ..Default::default()
        };
        let mut a = Endpoint::new(cfg.clone(), reg.clone());
        let mut b = Endpoint::new(cfg, reg.clone());
        let (mut ha, mut hb) = (Vec::new(), Vec::new());
        a.write_hello(&mut ha);
        b.write_hello(&mut hb);
        a.accept_hello(parse_all(&hb, a.limits()).unwrap().remove(0))
            .unwrap();
        b.accept_hello(parse_all(&ha, b.limits()).unwrap().remove(0))
            .unwrap();
        let mut stream = ha.clone();
        for m in &msgs {
            let mut one = Vec::new();
            a.encode(m, &mut one).unwrap();
            stream.extend_from_slice(&one);
            // The codec seed: codec index, declared length, payload.
            if let Some(f) = parse_all(&one, a.limits())
                .unwrap()
                .into_iter()
                .find(|f| f.header.kind == FrameKind::Data)
            {
                let mut s = vec![i as u8];
                s.extend_from_slice(&(m.len() as u16).to_le_bytes());
                s.extend_from_slice(&f.payload);
                codec_seeds.push(s);
                if f.header.is_stream() {
                    context_seed.push(u8::from(f.header.is_reset()));
                    context_seed.extend_from_slice(&(m.len() as u16).to_le_bytes());
                    context_seed.extend_from_slice(&(f.payload.len() as u16).to_le_bytes());
                    context_seed.extend_from_slice(&f.payload);
                }
            }
        }
        if stream_codec {
            context_seeds.push(context_seed);
        }
        frame_seeds.push(stream);
    }
    let mut probe = Vec::new();
    write_control(
        FrameKind::Probe,
        &LinkProbe {
            seq: 1,
            sent_ns: 42,
            pad: 16,
        }
        .encode(),
        &mut probe,
    );
    frame_seeds.push(probe);
    let mut reply = Vec::new();
    write_control(
        FrameKind::ProbeReply,
        &LinkProbeReply {
            seq: 1,
            echoed_sent_ns: 42,
            probe_len: 28,
            held_ns: 900,
            reports: vec![DecompressReport {
                codec: CodecId(1),
                messages: 3,
                bytes: 1200,
                nanos: 800,
            }],
        }
        .encode(),
        &mut reply,
    );
    frame_seeds.push(reply);
    let write = |dir: &str, seeds: &[Vec<u8>], prefix: &[u8]| {
        let d = root.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        for (i, s) in seeds.iter().enumerate() {
            let mut bytes = prefix.to_vec();
            bytes.extend_from_slice(s);
            std::fs::write(d.join(format!("seed-{i:03}")), bytes).unwrap();
        }
    };
    write("decode_frame", &frame_seeds, b"");
    // The stream parser's first byte is the chunk size.
    write("stream_parser", &frame_seeds, &[7]);
    write("codecs", &codec_seeds, b"");
    write("stream_contexts", &context_seeds, b"");
    println!(
        "wrote {} frame seeds, {} codec seeds and {} stream-context seeds under {}",
        frame_seeds.len(),
        codec_seeds.len(),
        context_seeds.len(),
        root.display()
    );
}
