//! Targets and models are saved atomically (`hwqos_core::fs::write_atomic`):
//! a save replaces the file with a complete new one and never writes into
//! the old one, so a crash or a failed save leaves the previous file whole.

use hwqos_loadsynth::targets::{LoadTargets, Target};
use hwqos_loadsynth::LoadMetric;

fn targets(mean: f64) -> LoadTargets {
    LoadTargets::new(vec![Target {
        metric: LoadMetric::CpuUtil,
        cpu: 0,
        mean,
        stddev: 0.0,
        series: vec![],
    }])
}

/// A reader that opened (here: hard-linked) the old file still sees it
/// whole after a save: the new content is a new file renamed over the name.
/// `std::fs::write` truncated and rewrote the same file, which a crash left
/// half written.
#[test]
fn a_save_replaces_the_file_and_never_writes_into_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    targets(0.25).save(&path).unwrap();
    let old = std::fs::read(&path).unwrap();
    let held = dir.path().join("held.json");
    std::fs::hard_link(&path, &held).unwrap();
    targets(0.5).save(&path).unwrap();
    assert_eq!(
        std::fs::read(&held).unwrap(),
        old,
        "the old file was written into"
    );
    assert_eq!(LoadTargets::load(&path).unwrap().targets[0].mean, 0.5);
    assert_eq!(LoadTargets::load(&held).unwrap().targets[0].mean, 0.25);
}

/// A save that fails (the name is taken by a directory, so the final rename
/// fails, even for root) is an error naming the file, leaves what was there
/// and no temporary file behind.
#[test]
fn a_failed_save_leaves_what_was_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("inside"), b"kept").unwrap();
    let e = targets(0.5).save(&path).unwrap_err();
    assert!(e.to_string().contains("t.json"), "{e}");
    assert_eq!(std::fs::read(path.join("inside")).unwrap(), b"kept");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        vec!["t.json".to_string()],
        "a temporary file was left"
    );
}
