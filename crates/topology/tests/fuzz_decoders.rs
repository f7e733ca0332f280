//! The decoders of untrusted input never panic: model files (arbitrary bytes
//! and mutations of a valid model) and the sysfs text parsers.

use hwqos_topology::sysfs::{parse_cpu_list, parse_cpu_mask, parse_size, MAX_CPU};
use hwqos_topology::{HardwareModel, OsInventory, Topology};
use proptest::prelude::*;
use std::path::Path;

fn valid_model_json() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/numa-server");
    HardwareModel::new(
        Topology::read(&root).unwrap(),
        OsInventory::read(&root),
        None,
    )
    .to_json()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = HardwareModel::from_slice(&bytes, Path::new("fuzz.json"));
    }

    #[test]
    fn mutated_models_are_loaded_or_rejected(pos in 0usize..100_000, len in 0usize..64, with in "[ -~]{0,8}") {
        let good = valid_model_json();
        let start = pos % good.len();
        let end = (start + len).min(good.len());
        let mut bad = good.clone();
        if bad.is_char_boundary(start) && bad.is_char_boundary(end) {
            bad.replace_range(start..end, &with);
        }
        match HardwareModel::from_slice(bad.as_bytes(), Path::new("m.json")) {
            Ok(m) => prop_assert_eq!(m.schema.as_str(), hwqos_topology::SCHEMA),
            Err(e) => prop_assert!(e.to_string().starts_with("m.json"), "{}", e),
        }
    }

    #[test]
    fn cpu_lists_and_masks_are_bounded(text in "[0-9,\\- a-f]{0,40}") {
        if let Some(cpus) = parse_cpu_list(&text) {
            prop_assert!(cpus.iter().all(|c| *c <= MAX_CPU));
            prop_assert!(cpus.windows(2).all(|w| w[0] < w[1]));
        }
        if let Some(cpus) = parse_cpu_mask(&text) {
            prop_assert!(cpus.iter().all(|c| *c <= MAX_CPU));
        }
        let _ = parse_size(&text);
    }
}
