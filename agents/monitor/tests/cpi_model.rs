//! `[cpi] hardware_model = "node.json"`: the CPI-stack penalties come from the
//! hardware model's measured latencies (`hwqos probe`), explicit
//! `[cpi.penalties]` keys override them, and a missing, corrupt, foreign or
//! measurement-less model is a config error (exit 2) naming the model file.

mod common;

use hwqos_monitor::config::Config;
use hwqos_pmu::derived::CpiPenalties;
use hwqos_topology::probe::memlat::{InferredLevel, MemLatResult};
use hwqos_topology::probe::Measured;
use hwqos_topology::{HardwareModel, OsInventory, Topology};
use std::path::Path;

fn level(name: &str, level: u8, cycles: f64) -> InferredLevel {
    InferredLevel {
        name: name.into(),
        level: Some(level),
        effective_size_bytes: 32 << 10,
        sysfs_size_bytes: None,
        latency_ns: cycles / 2.6,
        latency_cycles: Some(cycles),
    }
}

/// A model with L1d 4, L2 14, L3 50 and memory 250 cycles: penalties
/// l1d = 10, l2 = 36, llc = 200.
fn model(measured: bool) -> HardwareModel {
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/topology/tests/fixtures/this-vm");
    let mut m = HardwareModel::new(Topology::read(&root).unwrap(), OsInventory::default(), None);
    if measured {
        m.measured = Some(Measured {
            memlat: Some(MemLatResult {
                points: Vec::new(),
                levels: vec![
                    level("L1d", 1, 4.0),
                    level("L2", 2, 14.0),
                    level("L3", 3, 50.0),
                ],
                memory_latency_ns: 250.0 / 2.6,
                memory_latency_cycles: Some(250.0),
                tsc_ghz: Some(2.6),
                steps_per_octave: 4,
                line_size: 64,
                repeats: 3,
                huge_pages_advised: true,
                seed: 1,
            }),
            ..Measured::default()
        });
    }
    m
}

fn any_event(_: &str) -> Result<(), String> {
    Ok(())
}

/// Writes the config (with a writable output dir) next to the model.
fn parse(dir: &Path, cpi: &str) -> Result<Config, hwqos_monitor::config::ConfigError> {
    let text = format!("{cpi}\n[output]\ndir = {:?}\n", dir.join("out"));
    let path = dir.join("monitor.toml");
    std::fs::write(&path, &text).unwrap();
    Config::parse(&text, &path, &any_event)
}

#[test]
fn penalties_come_from_the_model_and_explicit_keys_override() {
    let d = tempfile::tempdir().unwrap();
    model(true).save(&d.path().join("node.json")).unwrap();
    // Relative to the config file's directory.
    let c = parse(d.path(), "[cpi]\nhardware_model = \"node.json\"").unwrap();
    let p = &c.cpi.penalties;
    assert_eq!((p.l1d, p.l1i, p.l2, p.llc), (10.0, 10.0, 36.0, 200.0));
    let defaults = CpiPenalties::default();
    assert_eq!((p.dtlb, p.branch), (defaults.dtlb, defaults.branch));
    assert_eq!(c.sampler_config().cpi_penalties, *p);
    assert!(c.cpi.hardware_model.as_ref().unwrap().is_absolute());

    let c = parse(
        d.path(),
        "[cpi]\nhardware_model = \"node.json\"\n[cpi.penalties]\nllc = 300.0\nbranch = 20.0",
    )
    .unwrap();
    let p = &c.cpi.penalties;
    assert_eq!((p.l1d, p.l2, p.llc, p.branch), (10.0, 36.0, 300.0, 20.0));

    // Without a model, the table alone (and its defaults) applies as before.
    let c = parse(d.path(), "[cpi.penalties]\nllc = 300.0").unwrap();
    assert_eq!(c.cpi.penalties.l1d, defaults.l1d);
    assert_eq!(c.cpi.penalties.llc, 300.0);
}

fn expect_error(dir: &Path, cpi: &str, must_contain: &[&str]) {
    let e = parse(dir, cpi).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("cpi.hardware_model"), "{e}");
    let s = e.to_string();
    for m in must_contain {
        assert!(s.contains(m), "{s} lacks {m:?}");
    }
}

#[test]
fn bad_models_are_config_errors_naming_the_file() {
    let d = tempfile::tempdir().unwrap();
    expect_error(
        d.path(),
        "[cpi]\nhardware_model = \"missing.json\"",
        &["missing.json", "cannot read the hardware model"],
    );
    std::fs::write(d.path().join("corrupt.json"), "{\"schema\": \"hwqos.hwm").unwrap();
    expect_error(
        d.path(),
        "[cpi]\nhardware_model = \"corrupt.json\"",
        &["corrupt.json", "corrupt hardware model"],
    );
    let foreign = model(true)
        .to_json()
        .replace("hwqos.hwmodel/1", "hwqos.hwmodel/9");
    std::fs::write(d.path().join("v9.json"), foreign).unwrap();
    expect_error(
        d.path(),
        "[cpi]\nhardware_model = \"v9.json\"",
        &["v9.json", "hwqos.hwmodel/9", "not supported"],
    );
    model(false).save(&d.path().join("static.json")).unwrap();
    expect_error(
        d.path(),
        "[cpi]\nhardware_model = \"static.json\"",
        &["static.json", "no measured cache latencies"],
    );
    // The error position points at the key.
    let e = parse(d.path(), "[cpi]\nhardware_model = \"missing.json\"").unwrap_err();
    assert_eq!(e.line, Some(2));
}

#[test]
fn the_monitor_exits_2_on_a_bad_model() {
    let d = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[cpi]\nhardware_model = \"nope.json\"\n[output]\ndir = {:?}\n",
        common::SW_SETS,
        d.path().join("out")
    );
    let path = d.path().join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let out = common::run(&["--check-config", "--config", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.toml") && stderr.contains("nope.json"),
        "{stderr}"
    );
}
