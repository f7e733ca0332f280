//! Bad input on the wire: every kind of damage gives an error that names it,
//! and lengths are checked against the limit before anything is allocated.

use hwqos_compress::wire::{
    parse_all, write_control, FrameKind, Header, Hello, BASE_VERSION, MAGIC,
};
use hwqos_compress::{CodecId, Endpoint, FrameDecoder, Limits, Registry, StreamConfig, WireError};
use proptest::prelude::*;
use std::sync::Arc;

fn limits() -> Limits {
    Limits {
        max_message: 1 << 20,
    }
}

/// A connected pair of endpoints (handshake done), no throttle.
fn pair(config: StreamConfig) -> (Endpoint, Endpoint) {
    let reg = Arc::new(Registry::standard());
    let mut a = Endpoint::new(config.clone(), reg.clone());
    let mut b = Endpoint::new(config, reg);
    a.handshake_in_memory(&mut b).unwrap();
    (a, b)
}

fn config() -> StreamConfig {
    StreamConfig {
        throttle: None,
        policy: "one:zstd-3".parse().unwrap(),
        checksum: true,
        probe_every: 0,
        ..Default::default()
    }
}

fn data_frame(msg: &[u8]) -> Vec<u8> {
    let (mut a, _) = pair(config());
    let mut out = Vec::new();
    a.encode(msg, &mut out).unwrap();
    out
}

fn decode_one(bytes: &[u8]) -> Result<Vec<u8>, WireError> {
    let (_, mut b) = pair(config());
    let mut frames = parse_all(bytes, b.limits())?;
    let mut replies = Vec::new();
    b.decode(frames.remove(0), &mut replies)
        .map(|m| m.expect("a data frame"))
}

#[test]
fn a_valid_frame_decodes() {
    let msg = b"INVITE sip:bob@example.invalid SIP/2.0\r\n".repeat(10);
    assert_eq!(decode_one(&data_frame(&msg)).unwrap(), msg);
}

#[test]
fn truncated_frames_are_reported_as_truncated() {
    let f = data_frame(&[7u8; 300]);
    for cut in [1, 5, 13, 15, f.len() - 1] {
        let e = parse_all(&f[..cut], limits()).unwrap_err();
        assert!(matches!(e, WireError::Truncated { .. }), "cut {cut}: {e}");
        assert!(e.to_string().contains("truncated"), "{e}");
    }
}

#[test]
fn corrupted_payload_is_reported() {
    let mut f = data_frame(&b"abcdefgh".repeat(100));
    let n = f.len();
    f[n - 3] ^= 0xff;
    let e = decode_one(&f).unwrap_err();
    assert!(
        matches!(
            e,
            WireError::Corrupted(_) | WireError::ChecksumMismatch { .. }
        ),
        "{e}"
    );
}

#[test]
fn a_checksum_catches_damage_the_codec_misses() {
    // Uncompressed payload: only the checksum can notice a flipped bit.
    let (mut a, mut b) = pair(StreamConfig {
        policy: "one:none".parse().unwrap(),
        ..config()
    });
    let mut f = Vec::new();
    a.encode(&[1u8; 64], &mut f).unwrap();
    let n = f.len();
    f[n - 1] ^= 1;
    let frame = parse_all(&f, b.limits()).unwrap().remove(0);
    let e = b.decode(frame, &mut Vec::new()).unwrap_err();
    assert!(matches!(e, WireError::ChecksumMismatch { .. }), "{e}");
    assert!(e.to_string().contains("checksum"));
}

fn header(kind: u8, codec: u8, flags: u8, ulen: u32, plen: u32) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.push(BASE_VERSION);
    h.push(kind);
    h.push(codec);
    h.push(flags);
    h.extend_from_slice(&ulen.to_le_bytes());
    h.extend_from_slice(&plen.to_le_bytes());
    h
}

#[test]
fn a_declared_4_gib_message_is_rejected_after_the_header_without_allocating() {
    let h = header(0, 0, 0, u32::MAX, u32::MAX);
    let mut d = FrameDecoder::new(limits());
    let e = d.push(&h).unwrap_err();
    assert!(matches!(e, WireError::Oversized { .. }), "{e}");
    assert!(e.to_string().contains("4294967295"), "{e}");
    // Allowed lengths reserve exactly the declared payload, nothing more.
    let mut d = FrameDecoder::new(limits());
    d.push(&header(0, 0, 0, 1000, 1000)).unwrap();
    assert_eq!(d.wanted(), 1000);
}

#[test]
fn compressed_length_over_the_limit_is_oversized() {
    let e = parse_all(&header(0, 4, 0, 10, (1 << 20) + 1), limits()).unwrap_err();
    assert!(matches!(e, WireError::Oversized { .. }), "{e}");
}

#[test]
fn a_decompression_bomb_stops_at_the_declared_length() {
    // 1 MiB of zeros compresses to a few hundred bytes; declaring 1 KiB must
    // fail without producing the megabyte.
    let reg = Registry::standard();
    // Each codec of this build (features); `none` has no bomb to stop.
    for name in ["zstd-3", "lzma-6", "bzip2-9", "deflate", "lz4", "snappy"] {
        let Some(c) = reg.by_name(name) else {
            continue;
        };
        let mut packed = Vec::new();
        c.compress(&vec![0u8; 1 << 20], &mut packed).unwrap();
        let mut out = Vec::new();
        let e = c.decompress(&packed, 1024, &mut out).unwrap_err();
        assert!(out.capacity() <= 1025, "{name} grew to {}", out.capacity());
        assert!(e.to_string().contains(name), "{e}");
    }
}

#[test]
fn unknown_codec_is_named() {
    let mut f = header(0, 200, 0, 3, 3);
    f.extend_from_slice(b"abc");
    let e = decode_one(&f).unwrap_err();
    assert!(matches!(e, WireError::UnknownCodec(200)), "{e}");
    assert!(e.to_string().contains("200"));
}

#[test]
fn wrong_version_is_named() {
    let mut f = data_frame(b"hello hello hello");
    f[2] = 9;
    let e = parse_all(&f, limits()).unwrap_err();
    assert!(matches!(e, WireError::WrongVersion { found: 9 }), "{e}");
    assert!(e.to_string().contains("version 9"), "{e}");
}

#[test]
fn garbage_before_the_header_is_named() {
    let mut f = b"GET / HTTP/1.1\r\n".to_vec();
    f.extend(data_frame(b"x"));
    let e = parse_all(&f, limits()).unwrap_err();
    assert!(matches!(e, WireError::BadMagic(b'G', b'E')), "{e}");
    assert!(e.to_string().contains("garbage"), "{e}");
}

#[test]
fn unknown_kinds_and_flags_are_rejected() {
    let e = parse_all(&header(9, 0, 0, 0, 0), limits()).unwrap_err();
    assert!(matches!(e, WireError::UnknownKind(9)), "{e}");
    let e = parse_all(&header(0, 0, 0x80, 0, 0), limits()).unwrap_err();
    assert!(matches!(e, WireError::UnknownFlags(0x80)), "{e}");
    let e = parse_all(&header(2, 0, 0, 70_000, 70_000), limits()).unwrap_err();
    assert!(matches!(e, WireError::Oversized { .. }), "{e}");
}

#[test]
fn a_hello_without_none_or_with_a_bad_length_is_rejected() {
    let bad = Hello {
        max_message: 100,
        decoders: vec![CodecId::LZ4],
        want_checksum: false,
    }
    .encode();
    assert!(Hello::decode(&bad)
        .unwrap_err()
        .to_string()
        .contains("none"));
    let mut short = Hello {
        max_message: 100,
        decoders: vec![CodecId::NONE, CodecId::LZ4],
        want_checksum: false,
    }
    .encode();
    short.pop();
    assert!(Hello::decode(&short).is_err());
}

#[test]
fn a_data_frame_instead_of_a_hello_fails_the_handshake() {
    let reg = Arc::new(Registry::standard());
    let mut b = Endpoint::new(config(), reg);
    let f = parse_all(&data_frame(b"hi"), b.limits()).unwrap().remove(0);
    let e = b.accept_hello(f).unwrap_err();
    assert!(matches!(e, WireError::Handshake(_)), "{e}");
}

#[test]
fn sending_more_than_the_peers_limit_is_refused() {
    let reg = Arc::new(Registry::standard());
    let mut a = Endpoint::new(config(), reg.clone());
    let mut small = Endpoint::new(
        StreamConfig {
            max_message: 100,
            ..config()
        },
        reg,
    );
    let mut h = Vec::new();
    small.write_hello(&mut h);
    a.accept_hello(parse_all(&h, a.limits()).unwrap().remove(0))
        .unwrap();
    let e = a.encode(&[0u8; 101], &mut Vec::new()).unwrap_err();
    assert!(
        matches!(
            e,
            WireError::MessageTooLarge {
                len: 101,
                limit: 100
            }
        ),
        "{e}"
    );
    a.encode(&[0u8; 100], &mut Vec::new()).unwrap();
}

#[test]
fn control_frames_must_be_uncompressed() {
    let mut f = Vec::new();
    write_control(FrameKind::Probe, &[0u8; 12], &mut f);
    f[4] = 1; // codec lz4 on a probe
    let e = parse_all(&f, limits()).unwrap_err();
    assert!(matches!(e, WireError::BadHeader { .. }), "{e}");
    let h = Header::parse(&header(1, 0, 0, 5, 5).try_into().unwrap(), &limits()).unwrap();
    assert_eq!(h.kind, FrameKind::Hello);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic_the_parser_or_the_endpoint(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        prefix_valid in any::<bool>(),
    ) {
        let mut input = if prefix_valid { data_frame(b"seed seed seed") } else { Vec::new() };
        input.extend_from_slice(&bytes);
        let (_, mut b) = pair(config());
        let mut d = FrameDecoder::new(Limits { max_message: 4096 });
        let mut rest = &input[..];
        let mut replies = Vec::new();
        while !rest.is_empty() {
            match d.push(rest) {
                Ok(n) => rest = &rest[n..],
                Err(_) => break,
            }
            if let Some(f) = d.take_frame() {
                prop_assert!(f.payload.len() <= 4096);
                if let Ok(Some(m)) = b.decode(f, &mut replies) {
                    prop_assert!(m.len() <= 1 << 24);
                }
            }
        }
    }
}
