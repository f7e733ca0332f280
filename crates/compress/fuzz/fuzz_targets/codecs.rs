//! Every codec's decoder on arbitrary bytes with a fuzzer-chosen declared
//! length: an error or exactly that many bytes, never more memory
//! (`hwqos_compress::fuzz_checks`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hwqos_compress::fuzz_checks::codecs(data);
});
