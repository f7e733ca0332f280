//! `hwqos spec`: the node's target spec, written as JSON that the spec reader
//! accepts, with availability probed on this node.

use hwqos_pmu::spec::TargetSpec;
use std::process::Command;

const HWQOS: &str = env!("CARGO_BIN_EXE_hwqos");

#[test]
fn spec_of_this_node_round_trips_and_reports_availability() {
    let o = Command::new(HWQOS).arg("spec").output().expect("run hwqos");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).expect("utf-8");
    let spec = TargetSpec::from_json(&text).expect("a valid spec");
    // Software events are counted by the kernel on every node.
    let faults = spec.event("sw.page_faults").expect("sw.page_faults listed");
    assert_eq!(faults.available, Some(true));
    // Every event was probed: each one says whether it is available, and the
    // unavailable ones say why.
    for e in &spec.events {
        match e.available {
            Some(true) => {}
            Some(false) => assert!(e.reason.is_some(), "{} has no reason", e.name),
            None => panic!("{} was not probed", e.name),
        }
    }
    // A node whose spec knows no hardware counters cannot count hardware events.
    if spec.counters.general_purpose == Some(0) {
        let cycles = spec.event("hw.cycles").expect("hw.cycles listed");
        assert_eq!(cycles.available, Some(false));
    }
}

#[test]
fn spec_to_a_file_and_to_an_unwritable_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("node.json");
    let o = Command::new(HWQOS)
        .args(["spec", "--no-probe", "-o"])
        .arg(&path)
        .output()
        .expect("run hwqos");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let spec = TargetSpec::read(&path).expect("readable spec");
    assert_eq!(spec.schema, 1);

    let o = Command::new(HWQOS)
        .args(["spec", "-o", "/nonexistent-dir/node.json"])
        .output()
        .expect("run hwqos");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent-dir/node.json"), "{err}");
}
