//! Stream codecs (wire version 3, `hwqos_compress::history`): message
//! boundaries, the reference zstd decoder as oracle, codec switches,
//! negotiation with a version-2 peer, the bounds of the receiving context,
//! and what the learner measures.

use hwqos_compress::codec::CodecError;
use hwqos_compress::history::{MAX_STREAM_WINDOW_LOG, STREAM_WINDOW_LOG};
use hwqos_compress::wire::{
    parse_all, write_control, FrameKind, Header, RawFrame, BASE_VERSION, FLAG_CHECKSUM, FLAG_RESET,
    FLAG_STREAM, MAGIC, VERSION,
};
use hwqos_compress::{CodecId, Endpoint, PolicyKind, Registry, Sampling, StreamConfig, WireError};
use std::io::Read;
use std::sync::Arc;

/// Deterministic text: sentences over a 300-word vocabulary (like
/// docs/experiments/gentext.py), `n` bytes.
fn text(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as usize
    };
    let syl = [
        "ka", "lo", "mi", "ter", "san", "vo", "ri", "den", "pa", "ul", "zen", "mor",
    ];
    let words: Vec<String> = (0..300)
        .map(|i| {
            let k = 1 + i % 3;
            (0..k)
                .map(|j| syl[(i * 7 + j * 5 + i / 12) % syl.len()])
                .collect()
        })
        .collect();
    let mut out = Vec::with_capacity(n + 32);
    while out.len() < n {
        let len = 4 + next() % 12;
        for w in 0..len {
            let word = &words[next() % words.len()];
            if w == 0 {
                out.extend(word[..1].to_uppercase().bytes());
                out.extend(word[1..].bytes());
            } else {
                out.push(b' ');
                out.extend(word.bytes());
            }
        }
        out.extend_from_slice(b". ");
    }
    out.truncate(n);
    out
}

fn config(policy: &str) -> StreamConfig {
    StreamConfig {
        throttle: None,
        policy: policy.parse().unwrap(),
        probe_every: 0,
        round_messages: 10,
        checksum: true,
        sampling: Sampling::Inline,
        link_ns_per_byte: Some(100.0),
        ..Default::default()
    }
}

fn pair_with(a_cfg: StreamConfig, a_reg: Registry, b_reg: Registry) -> (Endpoint, Endpoint) {
    let mut a = Endpoint::new(a_cfg, Arc::new(a_reg));
    let mut b = Endpoint::new(config("one:none"), Arc::new(b_reg));
    a.handshake_in_memory(&mut b).unwrap();
    (a, b)
}

fn pair(policy: &str) -> (Endpoint, Endpoint) {
    pair_with(
        config(policy),
        Registry::standard_with_streams(),
        Registry::standard_with_streams(),
    )
}

/// Encodes `msg` on `a` and returns its data frame (the only frame: no probes).
fn send(a: &mut Endpoint, msg: &[u8]) -> RawFrame {
    let mut out = Vec::new();
    a.encode(msg, &mut out).unwrap();
    let mut frames = parse_all(&out, a.limits()).unwrap();
    assert_eq!(frames.len(), 1);
    frames.remove(0)
}

fn recv(b: &mut Endpoint, f: RawFrame) -> Result<Vec<u8>, WireError> {
    b.decode(f, &mut Vec::new())
        .map(|m| m.expect("a data frame"))
}

/// Header bytes of a data frame with this version, codec and flags.
fn header(version: u8, kind: u8, codec: u8, flags: u8, ulen: u32, plen: u32) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend([version, kind, codec, flags]);
    h.extend_from_slice(&ulen.to_le_bytes());
    h.extend_from_slice(&plen.to_le_bytes());
    h
}

/// A stream frame carrying `payload` for a message of `ulen` bytes.
fn stream_frame(codec: CodecId, reset: bool, ulen: usize, payload: &[u8]) -> Vec<u8> {
    let flags = FLAG_STREAM | if reset { FLAG_RESET } else { 0 };
    let mut f = header(
        VERSION,
        0,
        codec.0,
        flags,
        ulen as u32,
        payload.len() as u32,
    );
    f.extend_from_slice(payload);
    f
}

/// The reference: zstd's own streaming encoder at `level` and `window_log`,
/// flushed after each message; returns each message's bytes.
fn reference_stream(msgs: &[Vec<u8>], level: i32, window_log: u32) -> Vec<Vec<u8>> {
    let mut enc = zstd::stream::raw::Encoder::new(level).unwrap();
    use zstd::stream::raw::{Operation, OutBuffer};
    use zstd::zstd_safe::CParameter;
    enc.set_parameter(CParameter::WindowLog(window_log))
        .unwrap();
    enc.set_parameter(CParameter::ChecksumFlag(false)).unwrap();
    let mut parts = Vec::new();
    for m in msgs {
        let mut out = vec![0u8; m.len() * 2 + 1024];
        let mut inb = zstd::stream::raw::InBuffer::around(m);
        let mut ob = OutBuffer::around(&mut out[..]);
        while inb.pos() < m.len() {
            enc.run(&mut inb, &mut ob).unwrap();
        }
        while enc.flush(&mut ob).unwrap() != 0 {}
        let n = ob.pos();
        parts.push(out[..n].to_vec());
    }
    parts
}

#[test]
fn stream_frames_keep_message_boundaries_and_match_the_reference_decoder() {
    let (mut a, mut b) = pair("one:zstd-1-stream");
    let msgs: Vec<Vec<u8>> = (0..24)
        .map(|i| text(3000 + 700 * (i % 5), i as u64))
        .collect();
    let mut payloads = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let f = send(&mut a, m);
        // Version 3, stream flag, reset only on the first frame, checksum kept.
        assert_eq!(f.header.version(), VERSION);
        assert_eq!(f.header.codec, CodecId::ZSTD1_STREAM);
        let want = FLAG_STREAM | FLAG_CHECKSUM | if i == 0 { FLAG_RESET } else { 0 };
        assert_eq!(f.header.flags, want, "message {i}");
        payloads.extend_from_slice(&f.payload);
        // Each message decodes as soon as its frame is in, to exactly its bytes.
        assert_eq!(recv(&mut b, f).unwrap(), *m, "message {i}");
    }
    // Oracle: the concatenated payloads are one zstd frame (not ended) that
    // zstd's own streaming decoder turns into the concatenated messages.
    let all: Vec<u8> = msgs.concat();
    let mut dec = zstd::stream::read::Decoder::new(&payloads[..]).unwrap();
    let mut got = vec![0u8; all.len()];
    dec.read_exact(&mut got).unwrap();
    assert_eq!(got, all);
    // And they are byte for byte what zstd's streaming encoder writes with
    // a flush after each message at the same level and window.
    let reference = reference_stream(&msgs, 1, STREAM_WINDOW_LOG).concat();
    assert_eq!(payloads, reference);
}

#[test]
fn history_makes_a_repeated_message_almost_free() {
    // 16 KiB of incompressible bytes, sent twice: on its own each copy stays
    // 16 KiB; with the stream context the second is a few dozen bytes.
    let mut x = 1u64;
    let noise: Vec<u8> = (0..16384)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let (mut a, mut b) = pair("one:zstd-1-stream");
    let first = send(&mut a, &noise);
    assert!(first.payload.len() > 16384, "{}", first.payload.len());
    assert_eq!(recv(&mut b, first).unwrap(), noise);
    let second = send(&mut a, &noise);
    assert!(second.payload.len() < 64, "{}", second.payload.len());
    assert_eq!(recv(&mut b, second).unwrap(), noise);
    // The per-message codec cannot do that (the message goes as `none`).
    let (mut c, _) = pair("one:zstd-1");
    send(&mut c, &noise);
    let f = send(&mut c, &noise);
    assert_eq!((f.header.codec, f.payload.len()), (CodecId::NONE, 16384));
}

#[test]
fn switching_codecs_between_messages_keeps_each_stream_context() {
    // Each stream codec's context continues across its own frames only,
    // whatever was sent in between: a reset only on each one's first frame.
    let (mut a, mut b) = pair("one:zstd-1-stream");
    let plan = [
        "zstd-1-stream",
        "none",
        "zstd-1-stream",
        "zstd-3",
        "zstd-3-stream",
        "zstd-1-stream",
        "lz4",
        "zstd-3-stream",
        "zstd-1-stream",
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (i, codec) in plan.iter().enumerate() {
        a.set_policy(PolicyKind::One(codec.to_string()));
        let m = text(5000, 100 + i as u64);
        let f = send(&mut a, &m);
        assert_eq!(f.header.codec, a.registry().by_name(codec).unwrap().id());
        let stream = codec.ends_with("-stream");
        assert_eq!(f.header.is_stream(), stream, "{codec}");
        assert_eq!(
            f.header.is_reset(),
            stream && seen.insert(*codec),
            "{i} {codec}"
        );
        assert_eq!(recv(&mut b, f).unwrap(), m, "{i} {codec}");
    }
}

#[test]
fn an_empty_message_goes_uncompressed_and_leaves_the_context_alone() {
    let (mut a, mut b) = pair("one:zstd-1-stream");
    let m = text(4000, 7);
    let f = send(&mut a, &m);
    assert_eq!(recv(&mut b, f).unwrap(), m);
    let f = send(&mut a, b"");
    assert_eq!(
        (f.header.codec, f.header.flags),
        (CodecId::NONE, FLAG_CHECKSUM)
    );
    assert_eq!(recv(&mut b, f).unwrap(), b"");
    let f = send(&mut a, &m);
    assert!(f.header.is_stream() && !f.header.is_reset());
    assert_eq!(recv(&mut b, f).unwrap(), m);
}

/// What a version-2 peer holds: the standard registry, ids 0 to 10 (those
/// of them this build's features have).
fn without_streams() -> Registry {
    let r = Registry::standard();
    assert!(r.ids().iter().all(|c| c.0 <= 10), "{:?}", r.ids());
    r
}

#[test]
fn the_stream_codecs_are_opt_in() {
    let names = Registry::standard_with_streams().names();
    let n = Registry::standard().len();
    assert_eq!(names.len(), n + 2);
    assert_eq!(&names[n..], ["zstd-1-stream", "zstd-3-stream"]);
    assert_eq!(&names[..n], Registry::standard().names());
    assert!(!Registry::standard().ids().contains(&CodecId::ZSTD1_STREAM));
}

#[test]
fn a_version_2_peer_gets_only_version_2_frames() {
    // A peer whose hello lacks the stream codecs (as a version-2 end's does)
    // never receives a stream frame: the adaptive policy and a fixed stream
    // codec fall back to per-message codecs, and every byte sent is version 2.
    for policy in ["one:zstd-1-stream", "adaptive"] {
        let (mut a, mut b) = pair_with(
            config(policy),
            Registry::standard_with_streams(),
            without_streams(),
        );
        assert!(!a.send_codecs().contains(&CodecId::ZSTD1_STREAM));
        for i in 0..40 {
            let m = text(4000, i);
            let mut out = Vec::new();
            a.encode(&m, &mut out).unwrap();
            let frames = parse_all(&out, a.limits()).unwrap();
            for f in frames {
                assert_eq!(f.header.version(), BASE_VERSION, "{policy}");
                assert!(!f.header.is_stream());
                if let Some(got) = b.decode(f, &mut Vec::new()).unwrap() {
                    assert_eq!(got, m);
                }
            }
            a.run_deferred_sample();
        }
    }
    // The hello itself is a version-2 frame, byte for byte the version-2 layout.
    let a = Endpoint::new(
        config("adaptive"),
        Arc::new(Registry::standard_with_streams()),
    );
    let mut hello = Vec::new();
    write_control(FrameKind::Hello, &a.hello().encode(), &mut hello);
    assert_eq!(&hello[..4], &[b'H', b'Q', 2, 1]);
    assert_eq!(
        hello[14 + 5] as usize,
        Registry::standard_with_streams().len()
    );
    assert!(hello[14 + 6..].contains(&11) && hello[14 + 6..].contains(&12));
}

#[test]
fn a_version_2_hello_from_an_old_peer_is_accepted() {
    // The bytes a version-2 end sends: ids 0-10, no stream codec.
    let mut old = header(2, 1, 0, 0, 17, 17);
    old.extend_from_slice(&(16u32 << 20).to_le_bytes());
    old.extend([0, 11]);
    old.extend(0..=10u8);
    let mut a = Endpoint::new(
        config("one:zstd-1-stream"),
        Arc::new(Registry::standard_with_streams()),
    );
    let frame = parse_all(&old, a.limits()).unwrap().remove(0);
    a.accept_hello(frame).unwrap();
    // Every per-message codec of this build (features) is in ids 0-10.
    assert_eq!(a.send_codecs().len(), Registry::standard().len());
    let mut out = Vec::new();
    assert_eq!(a.encode(&text(3000, 1), &mut out).unwrap(), CodecId::NONE);
    assert_eq!(out[2], 2);
}

#[test]
fn header_rules_of_version_3() {
    let lim = hwqos_compress::Limits::default();
    let parse = |h: Vec<u8>| parse_all(&h, lim);
    // Version 3 is for stream data frames only.
    let e = parse(header(VERSION, 2, 0, FLAG_STREAM, 12, 12)).unwrap_err();
    assert!(
        matches!(
            e,
            WireError::BadHeader {
                field: "version",
                ..
            }
        ),
        "{e}"
    );
    let e = parse(header(VERSION, 0, 11, 0, 1, 1)).unwrap_err();
    assert!(
        matches!(e, WireError::BadHeader { field: "flags", .. }),
        "{e}"
    );
    let e = parse(header(VERSION, 0, 0, FLAG_STREAM, 1, 1)).unwrap_err();
    assert!(
        matches!(e, WireError::BadHeader { field: "flags", .. }),
        "{e}"
    );
    let e = parse(header(VERSION, 0, 11, FLAG_STREAM | 0x08, 1, 1)).unwrap_err();
    assert!(matches!(e, WireError::UnknownFlags(0x0a)), "{e}");
    // The stream flags do not exist in version 2.
    let e = parse(header(BASE_VERSION, 0, 11, FLAG_STREAM, 1, 1)).unwrap_err();
    assert!(matches!(e, WireError::UnknownFlags(FLAG_STREAM)), "{e}");
    let e = parse(header(4, 0, 11, FLAG_STREAM, 1, 1)).unwrap_err();
    assert!(matches!(e, WireError::WrongVersion { found: 4 }), "{e}");
    // Lengths are still checked before anything is allocated.
    let e = parse(header(VERSION, 0, 11, FLAG_STREAM, u32::MAX, 1)).unwrap_err();
    assert!(matches!(e, WireError::Oversized { .. }), "{e}");
    // Header::write derives the version from the flags.
    let mut out = Vec::new();
    Header {
        kind: FrameKind::Data,
        codec: CodecId::ZSTD3_STREAM,
        flags: FLAG_STREAM | FLAG_RESET,
        uncompressed_len: 5,
        payload_len: 3,
    }
    .write(&mut out);
    assert_eq!(out, header(3, 0, 12, 6, 5, 3));
}

#[test]
fn stream_and_codec_must_agree_at_the_receiver() {
    let (_, mut b) = pair("one:none");
    // A version-2 (per-message) frame naming a stream codec.
    let mut payload = Vec::new();
    let reg = Registry::standard_with_streams();
    reg.get(CodecId::ZSTD1_STREAM)
        .unwrap()
        .compress(b"hello hello hello", &mut payload)
        .unwrap();
    let mut f = header(BASE_VERSION, 0, 11, 0, 17, payload.len() as u32);
    f.extend_from_slice(&payload);
    let e = decode_stream(&mut b, &f).unwrap_err();
    assert!(
        matches!(e, WireError::BadHeader { field: "flags", .. }),
        "{e}"
    );
    // A stream frame naming a per-message codec.
    let f = stream_frame(CodecId::ZSTD1, true, 17, &payload);
    let e = decode_stream(&mut b, &f).unwrap_err();
    assert!(
        matches!(e, WireError::BadHeader { field: "flags", .. }),
        "{e}"
    );
}

fn decode_stream(b: &mut Endpoint, f: &[u8]) -> Result<Vec<u8>, WireError> {
    let frame = parse_all(f, b.limits())?.remove(0);
    recv(b, frame)
}

#[test]
fn a_stream_frame_needs_a_live_context() {
    let msgs: Vec<Vec<u8>> = (0..3).map(|i| text(2000, i)).collect();
    let parts = reference_stream(&msgs, 1, STREAM_WINDOW_LOG);
    let (_, mut b) = pair("one:none");
    // No reset first: refused, nothing decoded.
    let e = decode_stream(
        &mut b,
        &stream_frame(CodecId::ZSTD1_STREAM, false, 2000, &parts[1]),
    )
    .unwrap_err();
    assert!(
        matches!(e, WireError::Corrupted(CodecError::Corrupted { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("reset"), "{e}");
    let (_, mut b) = pair("one:none");
    assert_eq!(
        decode_stream(
            &mut b,
            &stream_frame(CodecId::ZSTD1_STREAM, true, 2000, &parts[0])
        )
        .unwrap(),
        msgs[0]
    );
    // A frame that fails (here: a declared length one short) kills the
    // context: the next frame, though valid, is refused...
    let e = decode_stream(
        &mut b,
        &stream_frame(CodecId::ZSTD1_STREAM, false, 1999, &parts[1]),
    )
    .unwrap_err();
    assert!(
        matches!(e, WireError::Corrupted(CodecError::LengthMismatch { .. })),
        "{e}"
    );
    let e = decode_stream(
        &mut b,
        &stream_frame(CodecId::ZSTD1_STREAM, false, 2000, &parts[2]),
    )
    .unwrap_err();
    assert!(e.to_string().contains("reset"), "{e}");
    // ...until a reset frame starts a new context.
    assert_eq!(
        decode_stream(
            &mut b,
            &stream_frame(CodecId::ZSTD1_STREAM, true, 2000, &parts[0])
        )
        .unwrap(),
        msgs[0]
    );
}

#[test]
fn the_window_is_bounded_at_the_receiver() {
    let m = vec![text(3000, 5)];
    let (_, mut b) = pair("one:none");
    // 2^23: accepted.
    let ok = reference_stream(&m, 1, MAX_STREAM_WINDOW_LOG).concat();
    assert_eq!(
        decode_stream(
            &mut b,
            &stream_frame(CodecId::ZSTD1_STREAM, true, 3000, &ok)
        )
        .unwrap(),
        m[0]
    );
    // 2^24: refused from the frame header, before the window is allocated.
    let big = reference_stream(&m, 1, MAX_STREAM_WINDOW_LOG + 1).concat();
    let (_, mut b) = pair("one:none");
    let e = decode_stream(
        &mut b,
        &stream_frame(CodecId::ZSTD1_STREAM, true, 3000, &big),
    )
    .unwrap_err();
    assert!(
        matches!(e, WireError::Corrupted(CodecError::Corrupted { .. })),
        "{e}"
    );
    assert!(e.to_string().to_lowercase().contains("memory"), "{e}");
}

#[test]
fn a_stream_bomb_stops_at_the_declared_length() {
    // 1 MiB of zeros as one stream message, declared as 1 KiB.
    let parts = reference_stream(&[vec![0u8; 1 << 20]], 3, STREAM_WINDOW_LOG);
    assert!(parts[0].len() < 1024);
    let reg = Registry::standard_with_streams();
    let mut dec = reg
        .get(CodecId::ZSTD3_STREAM)
        .unwrap()
        .stream_decoder()
        .unwrap();
    let mut out = Vec::new();
    let e = dec.decompress(&parts[0], true, 1024, &mut out).unwrap_err();
    assert!(
        matches!(e, CodecError::LengthMismatch { declared: 1024, .. }),
        "{e}"
    );
    assert!(out.capacity() <= 1025, "grew to {}", out.capacity());
    // Short of the declared length: also a mismatch, with what came out.
    let mut out = Vec::new();
    let e = dec
        .decompress(&parts[0], true, (1 << 20) + 1, &mut out)
        .unwrap_err();
    assert_eq!(
        e,
        CodecError::LengthMismatch {
            codec: "zstd-3-stream",
            declared: (1 << 20) + 1,
            actual: 1 << 20
        }
    );
    // Trailing garbage after the message's blocks is not decodable.
    let mut out = Vec::new();
    let mut bad = parts[0].clone();
    bad.extend_from_slice(&[0xff; 7]);
    assert!(dec.decompress(&bad, true, 1 << 20, &mut out).is_err());
}

/// Compressed over uncompressed bytes of `msgs`: per message with zstd at
/// `level`, or as one stream flushed per message.
fn oracle_ratios(msgs: &[Vec<u8>], level: i32) -> (f64, f64) {
    let total: usize = msgs.iter().map(Vec::len).sum();
    let single: usize = msgs
        .iter()
        .map(|m| zstd::bulk::compress(m, level).unwrap().len())
        .sum();
    let stream: usize = reference_stream(msgs, level, STREAM_WINDOW_LOG)
        .iter()
        .map(Vec::len)
        .sum();
    (single as f64 / total as f64, stream as f64 / total as f64)
}

#[test]
fn the_learner_measures_the_stream_ratio_of_what_is_sent() {
    let msgs: Vec<Vec<u8>> = (0..60).map(|i| text(4096, 1000 + i)).collect();
    let (single, stream) = oracle_ratios(&msgs, 1);
    assert!(stream < single - 0.05, "stream {stream} single {single}");
    for (policy, id, oracle) in [
        ("one:zstd-1-stream", CodecId::ZSTD1_STREAM, stream),
        ("one:zstd-1", CodecId::ZSTD1, single),
    ] {
        let (mut a, _) = pair(policy);
        for m in &msgs {
            send(&mut a, m);
        }
        let est = &a.learner().codecs[&id];
        let learned = est.ratio.get().unwrap();
        assert!(
            (learned - oracle).abs() < 0.03,
            "{policy}: learned {learned}, oracle {oracle}"
        );
    }
}

#[test]
fn samples_of_a_stream_codec_are_primed_with_the_history() {
    // The adaptive policy explores with samples (inline here): a stream
    // codec's sample must show the ratio with history, not the ratio of a
    // message on its own, or the policy could never prefer it.
    let msgs: Vec<Vec<u8>> = (0..400).map(|i| text(4096, 5000 + i)).collect();
    let (single, stream) = oracle_ratios(&msgs, 1);
    let mut cfg = config("adaptive");
    cfg.adaptive.explore_share = f64::INFINITY;
    cfg.adaptive.burst_share = f64::INFINITY;
    let (mut a, mut b) = pair_with(
        cfg,
        Registry::standard_with_streams(),
        Registry::standard_with_streams(),
    );
    for m in &msgs {
        let mut out = Vec::new();
        a.encode(m, &mut out).unwrap();
        for f in parse_all(&out, a.limits()).unwrap() {
            if let Some(got) = b.decode(f, &mut Vec::new()).unwrap() {
                assert_eq!(&got, m);
            }
        }
    }
    let codecs = &a.learner().codecs;
    let s = codecs[&CodecId::ZSTD1_STREAM].ratio.get().unwrap();
    let p = codecs[&CodecId::ZSTD1].ratio.get().unwrap();
    assert!(
        (s - stream).abs() < 0.05,
        "stream: learned {s}, oracle {stream}"
    );
    assert!(
        (p - single).abs() < 0.05,
        "single: learned {p}, oracle {single}"
    );
    assert!(s < p, "stream {s} single {p}");
}

/// Bytes that do not compress (the random data set), `n` bytes.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    hwqos_compress::datasets::MessageSource::new(hwqos_compress::datasets::DataSet::Random, n, seed)
        .next_message()
}

#[test]
fn zstd_3_stream_finds_repeats_8_mib_back_and_zstd_1_stream_within_512_kib() {
    // 1 MiB of noise, 2 MiB of other noise, then the first MiB again, in
    // 256 KiB messages: the repeat lies 3 MiB back, inside 8 MiB, outside
    // 512 KiB.
    let first = noise(1 << 20, 7);
    let mut stream = first.clone();
    stream.extend(noise(2 << 20, 11));
    stream.extend(&first);
    let msgs: Vec<&[u8]> = stream.chunks(256 << 10).collect();
    let reg = Registry::standard_with_streams();
    let repeat_bytes = |id: CodecId| -> usize {
        let codec = reg.get(id).unwrap();
        let mut enc = codec.stream_encoder().unwrap();
        let mut dec = codec.stream_decoder().unwrap();
        let mut sizes = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            let mut out = Vec::new();
            enc.compress(m, i == 0, &mut out).unwrap();
            let mut back = Vec::new();
            dec.decompress(&out, i == 0, m.len(), &mut back).unwrap();
            assert!(back == *m, "{}: message {i} changed", codec.name());
            sizes.push(out.len());
        }
        sizes[12..].iter().sum()
    };
    let wide = repeat_bytes(CodecId::ZSTD3_STREAM);
    let narrow = repeat_bytes(CodecId::ZSTD1_STREAM);
    assert!(
        wide < 16 << 10,
        "zstd-3-stream: {wide} bytes for the repeated MiB"
    );
    assert!(
        narrow > 1 << 20,
        "zstd-1-stream: {narrow} bytes for the repeated MiB"
    );
}
