//! One buffer of bytes from the network through the frame parser and the
//! receiving endpoint (decompression included): errors are fine, panics and
//! messages beyond the 64 KiB limit are not (`hwqos_compress::fuzz_checks`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hwqos_compress::fuzz_checks::decode_frame(data);
});
