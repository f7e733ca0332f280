//! One buffer of bytes from the network through the frame parser and the
//! receiving endpoint (decompression included): errors are fine, panics and
//! allocations beyond the 64 KiB limit are not.
#![no_main]

use hwqos_compress::wire::parse_all;
use hwqos_compress::{Endpoint, Limits, Registry, StreamConfig};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_message: 1 << 16,
    };
    let config = StreamConfig {
        max_message: limits.max_message,
        throttle: None,
        ..Default::default()
    };
    let mut ep = Endpoint::new(config, Arc::new(Registry::standard()));
    let Ok(frames) = parse_all(data, limits) else {
        return;
    };
    let mut replies = Vec::new();
    let mut frames = frames.into_iter();
    if let Some(first) = frames.next() {
        if ep.accept_hello(first).is_err() {
            return;
        }
    }
    for f in frames {
        match ep.decode(f, &mut replies) {
            Ok(Some(m)) => assert!(m.len() <= limits.max_message as usize),
            Ok(None) => {}
            Err(_) => return,
        }
    }
});
