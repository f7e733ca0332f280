//! The incremental stream parser fed in fuzzer-chosen chunk sizes: it must
//! never take more than the current frame needs, never buffer beyond the
//! limit, and agree with the one-shot parser (`hwqos_compress::fuzz_checks`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hwqos_compress::fuzz_checks::stream_parser(data);
});
