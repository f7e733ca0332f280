//! The hardware model file: atomic save and exact reload, rejection of
//! corrupt, foreign and oversized files with messages naming the file, the
//! diff between two models, and CPI penalties from measured latencies.

use hwqos_topology::model::{diff, ModelError, MAX_MODEL_BYTES};
use hwqos_topology::probe::memlat::{InferredLevel, MemLatResult};
use hwqos_topology::probe::Measured;
use hwqos_topology::{HardwareModel, OsInventory, Topology, SCHEMA};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn model_of(name: &str) -> HardwareModel {
    let root = fixture(name);
    HardwareModel::new(
        Topology::read(&root).unwrap(),
        OsInventory::read(&root),
        None,
    )
}

fn level(name: &str, level: u8, size: u64, cycles: f64) -> InferredLevel {
    InferredLevel {
        name: name.into(),
        level: Some(level),
        effective_size_bytes: size,
        sysfs_size_bytes: Some(size),
        latency_ns: cycles / 2.0,
        latency_cycles: Some(cycles),
    }
}

fn with_memlat(mut m: HardwareModel, levels: Vec<InferredLevel>, mem_cycles: f64) -> HardwareModel {
    m.measured = Some(Measured {
        memlat: Some(MemLatResult {
            points: Vec::new(),
            levels,
            memory_latency_ns: mem_cycles / 2.0,
            memory_latency_cycles: Some(mem_cycles),
            tsc_ghz: Some(2.0),
            steps_per_octave: 4,
            line_size: 64,
            repeats: 3,
            huge_pages_advised: true,
            seed: 1,
        }),
        ..Measured::default()
    });
    m
}

#[test]
fn save_and_load_round_trip_atomically() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("node.json");
    let m = with_memlat(
        model_of("numa-server"),
        vec![level("L1d", 1, 32 << 10, 4.0)],
        200.0,
    );
    m.save(&path).unwrap();
    // Overwriting works and leaves no temporary file behind.
    m.save(&path).unwrap();
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["node.json"]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644, "readable by the agents");
    let back = HardwareModel::load(&path).unwrap();
    assert_eq!(back, m);
    assert_eq!(back.schema, SCHEMA);
    assert_eq!(back.topology.cache_domains(3).len(), 2);
    // A missing directory is created (hwqos_core::fs::write_atomic) ...
    m.save(&d.path().join("new/dir/node.json")).unwrap();
    assert_eq!(
        HardwareModel::load(&d.path().join("new/dir/node.json")).unwrap(),
        m
    );
    // ... and a save that cannot happen (a file where a directory must be)
    // fails naming the file.
    let e = m.save(&path.join("node.json")).unwrap_err();
    assert!(e.to_string().contains("node.json/node.json"), "{e}");
}

fn load_text(text: &str) -> (PathBuf, ModelError, tempfile::TempDir) {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("bad.json");
    std::fs::write(&path, text).unwrap();
    let e = HardwareModel::load(&path).unwrap_err();
    (path, e, d)
}

#[test]
fn corrupt_files_are_rejected_naming_file_and_problem() {
    let good = model_of("this-vm").to_json();
    // Truncated JSON: position of the problem in the file.
    let (path, e, _d) = load_text(&good[..good.len() / 2]);
    let msg = e.to_string();
    assert!(matches!(e, ModelError::Corrupt { .. }), "{msg}");
    assert!(msg.starts_with(&path.display().to_string()), "{msg}");
    assert!(msg.contains("corrupt hardware model"), "{msg}");
    // Not an object / no schema.
    let (_p, e, _d) = load_text("[1, 2, 3]");
    assert!(e.to_string().contains("not a JSON object"), "{e}");
    let (_p, e, _d) = load_text("{\"topology\": {}}");
    assert!(e.to_string().contains("no `schema` field"), "{e}");
    let (_p, e, _d) = load_text("{\"schema\": \"hwqos.recording/1\"}");
    assert!(e.to_string().contains("not a hwqos hardware model"), "{e}");
    // Right schema, wrong content.
    let broken = good.replacen("\"cpus\": [", "\"cpus\": 7, \"x\": [", 1);
    let (_p, e, _d) = load_text(&broken);
    assert!(matches!(e, ModelError::Invalid { .. }), "{e}");
    assert!(e.to_string().contains("invalid hardware model"), "{e}");
    // Binary garbage.
    let (_p, e, _d) = load_text("\u{0}\u{1}\u{2}garbage");
    assert!(matches!(e, ModelError::Corrupt { .. }), "{e}");
    // Missing file.
    let e = HardwareModel::load(Path::new("/nonexistent/node.json")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/node.json"), "{e}");
}

#[test]
fn foreign_versions_are_rejected() {
    let good = model_of("this-vm").to_json();
    let v2 = good.replace(SCHEMA, "hwqos.hwmodel/2");
    let (path, e, _d) = load_text(&v2);
    assert!(matches!(e, ModelError::ForeignVersion { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(
        msg.contains("hwqos.hwmodel/2") && msg.contains(SCHEMA),
        "{msg}"
    );
    let (_p, e, _d) = load_text("{\"schema\": 1}");
    assert!(e.to_string().contains("its schema is 1"), "{e}");
}

#[test]
fn oversized_files_are_rejected_before_reading() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("huge.json");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(MAX_MODEL_BYTES + 1).unwrap(); // sparse: no disk used
    let e = HardwareModel::load(&path).unwrap_err();
    assert!(matches!(e, ModelError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("huge.json"), "{e}");
}

#[test]
fn diff_lists_hardware_os_and_measured_differences() {
    let a = with_memlat(
        model_of("this-vm"),
        vec![level("L1d", 1, 32 << 10, 4.0)],
        200.0,
    );
    assert!(diff(&a, &a.clone(), 0.1).is_empty());
    // A different machine: many topology differences, including the LLC size.
    let b = model_of("haswell-laptop");
    let d = diff(&a, &b, 0.1);
    assert!(d.iter().any(|x| x.path == "cpu_model"), "{d:?}");
    assert!(
        d.iter()
            .any(|x| x.path.starts_with("topology.caches") && x.path.ends_with("size_bytes")),
        "{d:?}"
    );
    // Same machine, one sysctl changed and memory 5 % vs 50 % slower.
    let mut c = a.clone();
    c.os.sysctls.insert("vm.swappiness".into(), "10".into());
    c.created = "2000-01-01T00:00:00Z".into(); // ignored
    c.host = Some("other".into()); // ignored
    let d = diff(&a, &c, 0.1);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].path, "os.sysctls.vm.swappiness");
    assert_eq!(d[0].b, "\"10\"");
    let slower = |f: f64| {
        let mut x = a.clone();
        let m = x.measured.as_mut().unwrap().memlat.as_mut().unwrap();
        m.memory_latency_ns *= f;
        x
    };
    assert!(diff(&a, &slower(1.05), 0.1).is_empty());
    let d = diff(&a, &slower(1.5), 0.1);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].path, "measured.memlat.memory.latency");
    // A field present in one model only.
    let mut e = a.clone();
    e.os.sysctls.remove("vm.swappiness");
    let mut f = a.clone();
    f.os.sysctls.insert("vm.swappiness".into(), "60".into());
    let d = diff(&e, &f, 0.1);
    assert_eq!(d[0].a, "(absent)");
}

#[test]
fn cpi_penalties_from_measured_latencies() {
    let m = with_memlat(
        model_of("this-vm"),
        vec![
            level("L1d", 1, 32 << 10, 4.0),
            level("L2", 2, 1 << 20, 14.0),
            level("L3", 3, 32 << 20, 50.0),
        ],
        250.0,
    );
    let p = m.cpi_penalties().unwrap();
    assert_eq!((p.l1d, p.l1i, p.l2, p.llc), (10.0, 10.0, 36.0, 200.0));
    let defaults = hwqos_pmu::derived::CpiPenalties::default();
    assert_eq!(
        (p.dtlb, p.itlb, p.branch),
        (defaults.dtlb, defaults.itlb, defaults.branch)
    );
    // Two levels (Arm big.LITTLE: the L2 is the LLC).
    let m2 = with_memlat(
        model_of("arm-biglittle"),
        vec![
            level("L1d", 1, 32 << 10, 3.0),
            level("L2", 2, 512 << 10, 20.0),
        ],
        180.0,
    );
    let p = m2.cpi_penalties().unwrap();
    assert_eq!((p.l1d, p.l2, p.llc), (17.0, 160.0, 160.0));
    // No measurements, or no L1d plateau: no penalties.
    assert!(model_of("this-vm").cpi_penalties().is_none());
    let m3 = with_memlat(
        model_of("this-vm"),
        vec![level("L2", 2, 1 << 20, 14.0)],
        250.0,
    );
    assert!(m3.cpi_penalties().is_none());
}

#[test]
fn os_inventory_from_a_tree() {
    let d = tempfile::tempdir().unwrap();
    let w = |rel: &str, text: &str| {
        let p = d.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("proc/sys/kernel/osrelease", "6.1.0-test\n");
    w(
        "boot/config-6.1.0-test",
        "CONFIG_HZ_1000=y\nCONFIG_HZ=1000\n",
    );
    w(
        "sys/kernel/mm/transparent_hugepage/enabled",
        "[always] madvise never\n",
    );
    w("sys/devices/system/cpu/isolated", "2-3\n");
    w(
        "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
        "performance\n",
    );
    w(
        "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
        "performance\n",
    );
    w(
        "sys/devices/system/cpu/cpu2/cpufreq/scaling_governor",
        "powersave\n",
    );
    w("proc/sys/vm/swappiness", "10\n");
    w("proc/sys/kernel/sched_rt_runtime_us", "950000\n");
    w("sys/kernel/debug/sched/base_slice_ns", "3000000\n");
    let inv = OsInventory::read(d.path());
    assert_eq!(inv.kernel_release.as_deref(), Some("6.1.0-test"));
    assert_eq!(inv.hz, Some(1000));
    assert_eq!(inv.thp_enabled.as_deref(), Some("always"));
    assert_eq!(inv.isolated_cpus.as_deref(), Some("2-3"));
    assert_eq!(inv.cpufreq_governors["performance"], "0-1");
    assert_eq!(inv.cpufreq_governors["powersave"], "2");
    assert_eq!(inv.sysctls["vm.swappiness"], "10");
    assert_eq!(inv.sysctls["kernel.sched_rt_runtime_us"], "950000");
    assert_eq!(inv.sysctls["debug.sched.base_slice_ns"], "3000000");
    assert_eq!(inv.clocksource, None);
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("model.fifo");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // Before, the size check passed (a FIFO has length 0) and the read
    // blocked forever waiting for a writer.
    let e = HardwareModel::load(&path).unwrap_err();
    assert!(matches!(e, ModelError::Read { .. }), "{e}");
    assert!(e.to_string().contains("not a regular file"), "{e}");
}
