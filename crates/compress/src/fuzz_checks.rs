//! The properties the cargo-fuzz targets (`fuzz/fuzz_targets/`) check on
//! arbitrary bytes, shared with the corpus replay test
//! (`tests/fuzz_regressions.rs`) so that both run exactly the same checks.
//! Each function panics when a property is violated; errors from the decoders
//! are expected and fine.

use crate::wire::parse_all;
use crate::{Endpoint, FrameDecoder, Limits, Registry, StreamConfig};
use std::sync::Arc;

/// Bytes from the network through the frame parser and a receiving endpoint
/// (handshake, then decompression): no panic, no message beyond the 64 KiB
/// limit. Returns how many messages were decoded.
pub fn decode_frame(data: &[u8]) -> usize {
    let limits = Limits {
        max_message: 1 << 16,
    };
    let config = StreamConfig {
        max_message: limits.max_message,
        throttle: None,
        ..Default::default()
    };
    let mut ep = Endpoint::new(config, Arc::new(Registry::standard_with_streams()));
    let Ok(frames) = parse_all(data, limits) else {
        return 0;
    };
    let mut frames = frames.into_iter();
    if let Some(first) = frames.next() {
        if ep.accept_hello(first).is_err() {
            return 0;
        }
    }
    let mut replies = Vec::new();
    let mut decoded = 0;
    for f in frames {
        match ep.decode(f, &mut replies) {
            Ok(Some(m)) => {
                assert!(m.len() <= limits.max_message as usize);
                decoded += 1;
            }
            Ok(None) => {}
            Err(_) => break,
        }
    }
    decoded
}

/// The incremental stream parser fed in chunks of `data[0] % 17 + 1` bytes:
/// it never takes more than the current frame needs, never holds a payload
/// beyond the control-frame bound, and agrees with the one-shot parser.
pub fn stream_parser(data: &[u8]) {
    let Some((&first, input)) = data.split_first() else {
        return;
    };
    let limits = Limits { max_message: 4096 };
    let step = usize::from(first % 17) + 1;
    let mut d = FrameDecoder::new(limits);
    let mut frames = Vec::new();
    let mut rest = input;
    let mut failed = false;
    while !rest.is_empty() {
        let chunk = &rest[..rest.len().min(step)];
        match d.push(chunk) {
            Ok(n) => {
                assert!(n <= chunk.len());
                rest = &rest[n..];
            }
            Err(_) => {
                failed = true;
                break;
            }
        }
        if let Some(f) = d.take_frame() {
            assert!(f.payload.len() <= 64 * 1024);
            frames.push(f);
        }
    }
    match parse_all(input, limits) {
        Ok(all) => {
            assert!(!failed);
            assert_eq!(all, frames);
        }
        Err(_) => assert!(failed || d.finish().is_err()),
    }
}

/// A codec chosen by `data[0]` decodes `data[3..]` with the declared length
/// `data[1..3]` (little endian): an error, or exactly that many bytes, and
/// never more memory than the declared length. Returns whether it decoded.
pub fn codecs(data: &[u8]) -> bool {
    if data.len() < 3 {
        return false;
    }
    let reg = Registry::standard_with_streams();
    let ids = reg.ids();
    let codec = reg.get(ids[usize::from(data[0]) % ids.len()]).unwrap();
    let declared = usize::from(u16::from_le_bytes([data[1], data[2]]));
    let mut out = Vec::new();
    let ok = codec.decompress(&data[3..], declared, &mut out).is_ok();
    if ok {
        assert_eq!(out.len(), declared);
    }
    assert!(out.capacity() <= declared + 1 + 64);
    ok
}

/// A stream codec chosen by `data[0]` decodes a sequence of stream payloads
/// through one receiving context, as consecutive stream frames would: each
/// record of `data[1..]` is a flag byte (bit 0: reset), a declared length
/// (u16 LE), a payload length (u16 LE) and the payload. Each frame gives an
/// error or exactly its declared length, the output never grows past the
/// declared length (+1, +64 for the allocator), and a frame after a failed
/// one decodes only with the reset flag. Returns how many frames decoded.
pub fn stream_contexts(data: &[u8]) -> usize {
    let Some((&first, mut rest)) = data.split_first() else {
        return 0;
    };
    let reg = Registry::standard_with_streams();
    let streams: Vec<_> = reg
        .ids()
        .into_iter()
        .filter_map(|id| reg.get(id).filter(|c| c.is_stream()))
        .collect();
    if streams.is_empty() {
        return 0; // built without the `zstd` feature: no stream codec
    }
    let codec = streams[usize::from(first) % streams.len()];
    let mut dec = codec
        .stream_decoder()
        .expect("a stream codec has a decoder");
    let mut live = false;
    let mut decoded = 0;
    while rest.len() >= 5 {
        let reset = rest[0] & 1 != 0;
        let declared = usize::from(u16::from_le_bytes([rest[1], rest[2]]));
        let len = usize::from(u16::from_le_bytes([rest[3], rest[4]])).min(rest.len() - 5);
        let payload = &rest[5..5 + len];
        rest = &rest[5 + len..];
        let mut out = Vec::new();
        let ok = dec.decompress(payload, reset, declared, &mut out).is_ok();
        assert!(out.capacity() <= declared + 1 + 64);
        if ok {
            assert!(reset || live, "a frame decoded without a live context");
            assert_eq!(out.len(), declared);
            decoded += 1;
        }
        live = ok;
    }
    decoded
}
