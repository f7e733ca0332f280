//! `hwqos probe`: the static model as JSON, single probes written to a model
//! file that loads again, the latency plot, `--diff` exit codes, and clear
//! errors (exit 2) for corrupt or foreign model files and unknown probes.

use hwqos_topology::{HardwareModel, SCHEMA};
use std::path::Path;
use std::process::{Command, Output};

const HWQOS: &str = env!("CARGO_BIN_EXE_hwqos");

fn hwqos(args: &[&str]) -> Output {
    Command::new(HWQOS).args(args).output().expect("run hwqos")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn static_model_as_json_matches_sysfs() {
    let o = hwqos(&["probe", "--static", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let m = HardwareModel::from_slice(&o.stdout, Path::new("stdout")).unwrap();
    assert_eq!(m.schema, SCHEMA);
    assert!(m.measured.is_none());
    let live = hwqos_topology::Topology::this_node().unwrap();
    assert_eq!(m.topology.online_cpus(), live.online_cpus());
    assert_eq!(m.topology.caches, live.caches);
    assert!(m.os.kernel_release.is_some());
}

#[test]
fn single_probes_write_a_loadable_model() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("node.json");
    let o = hwqos(&[
        "probe",
        "syscall",
        "pagefault",
        "--quick",
        "--json",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let m = HardwareModel::load(&path).unwrap();
    let measured = m.measured.unwrap();
    assert!(measured.syscall.is_some() && measured.pagefault.is_some());
    assert!(measured.memlat.is_none() && measured.timer.is_none());
    assert!(measured.errors.is_empty(), "{:?}", measured.errors);
    let pf = measured.pagefault.unwrap();
    // Known answer from the kernel: one minor fault per fresh page.
    assert!(
        (pf.faults_per_page - 1.0).abs() < 0.01,
        "{}",
        pf.faults_per_page
    );
    // Quick: 5 batches split over 3 interleaved repetitions, each of at
    // least 2 batches (⌈5/3⌉ = 2), so 6 in all.
    assert_eq!(measured.rounds, 3);
    assert_eq!(pf.fault_ns.n, 6);
}

#[test]
fn context_switch_table_reports_the_counter_check() {
    let o = hwqos(&["probe", "ctxswitch", "--quick"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("context switch, threads"), "{text}");
    assert!(text.contains("sw.context_switches"), "{text}");
}

#[test]
fn latency_plot_marks_the_boundaries() {
    let d = tempfile::tempdir().unwrap();
    let svg = d.path().join("latency.svg");
    let o = hwqos(&[
        "probe",
        "memlat",
        "--quick",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "not an SVG");
    assert!(text.contains("L1d"), "no L1d boundary label");
    assert!(text.contains("inferred boundary") && text.contains("sysfs size"));
    let o = hwqos(&["probe", "syscall", "--plot", svg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn diff_exit_codes_and_listing() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a.json");
    let o = hwqos(&["probe", "--static", "-o", a.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = hwqos(&["probe", "--diff", a.to_str().unwrap(), a.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("no differences"));

    let mut m = HardwareModel::load(&a).unwrap();
    m.os.thp_enabled = Some("always-for-the-test".into());
    let b = d.path().join("b.json");
    m.save(&b).unwrap();
    let o = hwqos(&["probe", "--diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("os.thp_enabled") && text.contains("always-for-the-test"),
        "{text}"
    );
}

#[test]
fn corrupt_and_foreign_models_are_usage_errors() {
    let d = tempfile::tempdir().unwrap();
    let good = d.path().join("good.json");
    assert!(hwqos(&["probe", "--static", "-o", good.to_str().unwrap()])
        .status
        .success());
    let text = std::fs::read_to_string(&good).unwrap();
    let corrupt = d.path().join("corrupt.json");
    std::fs::write(&corrupt, &text[..text.len() / 3]).unwrap();
    let o = hwqos(&[
        "probe",
        "--diff",
        good.to_str().unwrap(),
        corrupt.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("corrupt.json") && e.contains("corrupt hardware model"),
        "{e}"
    );

    let foreign = d.path().join("v2.json");
    std::fs::write(&foreign, text.replace(SCHEMA, "hwqos.hwmodel/2")).unwrap();
    let o = hwqos(&[
        "probe",
        "--diff",
        foreign.to_str().unwrap(),
        good.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("v2.json") && e.contains("hwqos.hwmodel/2") && e.contains("not supported"),
        "{e}"
    );
}

#[test]
fn unknown_probe_and_bad_options_exit_2() {
    let o = hwqos(&["probe", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown probe `bogus`"),
        "{}",
        stderr(&o)
    );
    let o = hwqos(&["probe", "clock", "--cpu", "4096"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not an online CPU"), "{}", stderr(&o));
    let o = hwqos(&["probe", "clock", "--repeats", "1"]);
    assert_eq!(o.status.code(), Some(2));
}
