//! The target and model decoders on arbitrary and mutated input: they return
//! an error naming the file, never panic, and a valid file round-trips.

use hwqos_loadsynth::model::LoadModel;
use hwqos_loadsynth::targets::{LoadTargets, Target};
use hwqos_loadsynth::LoadMetric;
use proptest::prelude::*;

fn valid_targets() -> String {
    let t = LoadTargets::new(vec![
        Target {
            metric: LoadMetric::CpuUtil,
            cpu: 1,
            mean: 0.35,
            stddev: 0.01,
            series: vec![(0.0, 0.34), (0.25, 0.36)],
        },
        Target {
            metric: LoadMetric::LlcMissRatio,
            cpu: 0,
            mean: 0.3,
            stddev: 0.0,
            series: vec![],
        },
    ]);
    serde_json::to_string(&t).unwrap()
}

fn load_both(bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.json");
    std::fs::write(&p, bytes).unwrap();
    if let Err(e) = LoadTargets::load(&p) {
        assert!(e.to_string().contains("f.json"), "{e}");
    }
    if let Err(e) = LoadModel::load(&p) {
        assert!(e.to_string().contains("f.json"), "{e}");
    }
}

#[test]
fn a_valid_targets_file_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.json");
    std::fs::write(&p, valid_targets()).unwrap();
    let t = LoadTargets::load(&p).unwrap();
    let q = dir.path().join("u.json");
    t.save(&q).unwrap();
    assert_eq!(LoadTargets::load(&q).unwrap(), t);
}

#[test]
fn duplicate_pairs_are_rejected() {
    let mut t: LoadTargets = serde_json::from_str(&valid_targets()).unwrap();
    t.targets.push(t.targets[0].clone());
    assert!(t.validate().unwrap_err().contains("appears twice"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        load_both(&bytes);
    }

    #[test]
    fn mutated_valid_files_never_panic(pos in 0usize..400, byte in any::<u8>(), cut in 0usize..400) {
        let mut b = valid_targets().into_bytes();
        let n = b.len();
        b[pos % n] = byte;
        b.truncate(n - cut.min(n));
        load_both(&b);
    }

    #[test]
    fn impossible_values_are_errors(v in prop_oneof![-1e9..-1e-9f64, 1.0000001..1e9f64]) {
        let text = valid_targets().replace("0.3,", &format!("{v},"));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.json");
        std::fs::write(&p, text).unwrap();
        prop_assert!(LoadTargets::load(&p).is_err());
    }
}
