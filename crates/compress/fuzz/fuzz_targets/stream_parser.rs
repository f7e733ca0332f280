//! The incremental stream parser fed in fuzzer-chosen chunk sizes: it must
//! never take more than the current frame needs, never buffer beyond the
//! limit, and agree with the one-shot parser.
#![no_main]

use hwqos_compress::wire::parse_all;
use hwqos_compress::{FrameDecoder, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let limits = Limits { max_message: 4096 };
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
            assert!(f.payload.len() <= 64 * 1024);
            frames.push(f);
        }
    }
    let whole = parse_all(input, limits);
    match whole {
        Ok(all) => {
            assert!(!failed);
            assert_eq!(all, frames);
        }
        Err(_) => assert!(failed || d.finish().is_err()),
    }
});
