//! A stream codec's receiving context fed a sequence of arbitrary stream
//! payloads with fuzzer-chosen reset flags and declared lengths: errors or
//! exactly the declared bytes, bounded output, no decoding without a live
//! context (`hwqos_compress::fuzz_checks`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hwqos_compress::fuzz_checks::stream_contexts(data);
});
