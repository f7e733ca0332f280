//! Every codec round-trips arbitrary messages and rejects wrong lengths and
//! corrupted input with an error, never a panic.

use hwqos_compress::{CodecError, Registry};
use proptest::prelude::*;

fn messages() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..2048),
        (0usize..8192, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
        proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b' ')], 0..4096),
    ]
}

#[cfg(all(
    feature = "lz4",
    feature = "snappy",
    feature = "zstd",
    feature = "lzma",
    feature = "bzip2",
    feature = "deflate"
))]
#[test]
fn the_standard_registry_has_the_issue_codecs() {
    let r = Registry::standard();
    assert_eq!(
        r.names(),
        vec![
            "none", "lz4", "snappy", "zstd-1", "zstd-3", "zstd-9", "lzma-0", "lzma-6", "bzip2-1",
            "bzip2-9", "deflate"
        ]
    );
}

/// The default features: `Registry::standard()` has exactly the codecs built.
#[test]
fn the_standard_registry_has_exactly_the_built_codecs() {
    let names = Registry::standard().names();
    let expect = |feature: bool, codecs: &[&str]| {
        for c in codecs {
            assert_eq!(names.contains(c), feature, "{c}: {names:?}");
        }
    };
    assert!(names.contains(&"none"));
    expect(cfg!(feature = "lz4"), &["lz4"]);
    expect(cfg!(feature = "snappy"), &["snappy"]);
    expect(cfg!(feature = "zstd"), &["zstd-1", "zstd-3", "zstd-9"]);
    expect(cfg!(feature = "lzma"), &["lzma-0", "lzma-6"]);
    expect(cfg!(feature = "bzip2"), &["bzip2-1", "bzip2-9"]);
    expect(cfg!(feature = "deflate"), &["deflate"]);
    let streams = Registry::standard_with_streams().names();
    for c in ["zstd-1-stream", "zstd-3-stream"] {
        assert_eq!(streams.contains(&c), cfg!(feature = "zstd"), "{c}");
    }
}

#[test]
fn registering_a_duplicate_fails() {
    let mut r = Registry::standard();
    let lz4 = r.by_name("lz4").unwrap().clone();
    assert!(r.register(lz4).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_codec_round_trips(msg in messages()) {
        let r = Registry::standard();
        for id in r.ids() {
            let c = r.get(id).unwrap();
            let mut packed = Vec::new();
            c.compress(&msg, &mut packed).unwrap();
            let mut out = Vec::new();
            c.decompress(&packed, msg.len(), &mut out).unwrap();
            prop_assert_eq!(&out, &msg, "codec {}", c.name());
            prop_assert!(out.capacity() <= msg.len() + 1, "codec {} grew the buffer", c.name());
        }
    }

    #[test]
    fn a_wrong_declared_length_is_an_error(msg in proptest::collection::vec(any::<u8>(), 1..512)) {
        let r = Registry::standard();
        for id in r.ids() {
            let c = r.get(id).unwrap();
            let mut packed = Vec::new();
            c.compress(&msg, &mut packed).unwrap();
            let mut out = Vec::new();
            let shorter = c.decompress(&packed, msg.len() - 1, &mut out);
            prop_assert!(shorter.is_err(), "codec {} accepted a shorter length", c.name());
            let longer = c.decompress(&packed, msg.len() + 7, &mut out);
            prop_assert!(longer.is_err(), "codec {} accepted a longer length", c.name());
        }
    }

    #[test]
    fn corrupted_input_errors_or_stays_in_bounds(msg in messages(), flip in any::<usize>(), garbage in proptest::collection::vec(any::<u8>(), 0..64)) {
        let r = Registry::standard();
        for id in r.ids() {
            let c = r.get(id).unwrap();
            let mut packed = Vec::new();
            c.compress(&msg, &mut packed).unwrap();
            if !packed.is_empty() {
                let i = flip % packed.len();
                packed[i] ^= 0x5a;
            }
            let mut out = Vec::new();
            if c.decompress(&packed, msg.len(), &mut out).is_ok() {
                prop_assert_eq!(out.len(), msg.len());
            }
            // Pure garbage.
            let _ = c.decompress(&garbage, msg.len(), &mut out);
            prop_assert!(out.capacity() <= msg.len() + 1 || out.capacity() <= 64);
        }
    }
}

#[test]
fn truncated_compressed_data_is_reported() {
    let r = Registry::standard();
    let msg: Vec<u8> = (0..4000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
    for id in r.ids() {
        let c = r.get(id).unwrap();
        let mut packed = Vec::new();
        c.compress(&msg, &mut packed).unwrap();
        packed.truncate(packed.len() / 2);
        let mut out = Vec::new();
        let e = c.decompress(&packed, msg.len(), &mut out).unwrap_err();
        assert!(
            matches!(
                e,
                CodecError::Corrupted { .. } | CodecError::LengthMismatch { .. }
            ),
            "{}: {e}",
            c.name()
        );
        assert!(e.to_string().contains(c.name()), "{e}");
    }
}
