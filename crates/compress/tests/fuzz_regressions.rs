//! Replays the fuzz corpus (`fuzz/corpus/<target>/`) through the same checks
//! as the cargo-fuzz targets, so every checked-in input — the seeds and any
//! crash cargo-fuzz found, added here as a file — runs in the ordinary test
//! suite without cargo-fuzz.

use hwqos_compress::wire::parse_all;
use hwqos_compress::{Endpoint, FrameDecoder, Limits, Registry, StreamConfig};
use std::path::Path;
use std::sync::Arc;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

#[test]
fn decode_frame_corpus() {
    let limits = Limits {
        max_message: 1 << 16,
    };
    let mut decoded = 0;
    for data in corpus("decode_frame") {
        let config = StreamConfig {
            max_message: limits.max_message,
            throttle: None,
            ..Default::default()
        };
        let mut ep = Endpoint::new(config, Arc::new(Registry::standard()));
        let Ok(frames) = parse_all(&data, limits) else {
            continue;
        };
        let mut frames = frames.into_iter();
        if let Some(first) = frames.next() {
            if ep.accept_hello(first).is_err() {
                continue;
            }
        }
        let mut replies = Vec::new();
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
    }
    assert!(decoded > 0, "the seeds hold valid messages");
}

#[test]
fn stream_parser_corpus() {
    let limits = Limits { max_message: 4096 };
    for data in corpus("stream_parser") {
        if data.is_empty() {
            continue;
        }
        let step = usize::from(data[0] % 17) + 1;
        let input = &data[1..];
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
}

#[test]
fn codecs_corpus() {
    let reg = Registry::standard();
    let ids = reg.ids();
    let mut ok = 0;
    for data in corpus("codecs") {
        if data.len() < 3 {
            continue;
        }
        let codec = reg.get(ids[usize::from(data[0]) % ids.len()]).unwrap();
        let declared = usize::from(u16::from_le_bytes([data[1], data[2]]));
        let mut out = Vec::new();
        if codec.decompress(&data[3..], declared, &mut out).is_ok() {
            assert_eq!(out.len(), declared);
            ok += 1;
        }
        assert!(out.capacity() <= declared + 1 + 64);
    }
    assert!(ok > 0, "the seeds hold valid compressed messages");
}
