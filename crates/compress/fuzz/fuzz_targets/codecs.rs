//! Every codec's decoder on arbitrary bytes with a fuzzer-chosen declared
//! length: an error or exactly that many bytes, never more memory.
#![no_main]

use hwqos_compress::Registry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let reg = Registry::standard();
    let ids = reg.ids();
    let codec = reg.get(ids[usize::from(data[0]) % ids.len()]).unwrap();
    let declared = usize::from(u16::from_le_bytes([data[1], data[2]]));
    let mut out = Vec::new();
    if codec.decompress(&data[3..], declared, &mut out).is_ok() {
        assert_eq!(out.len(), declared);
    }
    assert!(out.capacity() <= declared + 1 + 64);
});
