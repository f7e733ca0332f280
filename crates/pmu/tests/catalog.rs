//! Event catalog and target specs against hand-written sysfs/procfs fixture trees
//! (this VM, an Intel Skylake laptop, an AMD Zen 3 server, an Arm big.LITTLE
//! board) and, for availability, against this node's real perf backend.

use hwqos_core::MetricName;
use hwqos_pmu::backend::perf::PerfBackend;
use hwqos_pmu::backend::{BackendKind, CountTarget, CounterBackend, GroupId, GroupReading};
use hwqos_pmu::catalog::{
    generic_event_names, perf_event_names, Catalog, CpuModel, NameSource, Vendor,
};
use hwqos_pmu::spec::{self, check_availability, render_event_table, TargetSpec, SCHEMA_VERSION};
use hwqos_pmu::{Event, EventSource, PmuError};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn catalog(name: &str) -> Catalog {
    let root = fixture(name);
    Catalog::load_with_cpu(&root.join("sys"), &root.join("proc"))
}

fn generate(name: &str) -> TargetSpec {
    let root = fixture(name);
    spec::generate(&root.join("sys"), &root.join("proc"))
}

/// `(type, config)` of a name that must resolve.
fn enc(cat: &Catalog, name: &str) -> (u32, u64) {
    match cat.resolve(name) {
        Ok(ev) => (ev.attr.type_, ev.attr.config),
        Err(e) => panic!("{name} did not resolve: {e}"),
    }
}

fn resolved(cat: &Catalog, name: &str) -> Event {
    cat.resolve(name)
        .unwrap_or_else(|e| panic!("{name} did not resolve: {e}"))
}

/// The reason of an UnknownEvent error (panics on success or another error).
fn unknown_reason(cat: &Catalog, name: &str) -> String {
    match cat.resolve(name) {
        Err(PmuError::UnknownEvent { name: n, reason }) => {
            assert_eq!(n, name, "the error names the event as given");
            reason
        }
        other => panic!("{name:?}: expected UnknownEvent, got {other:?}"),
    }
}

fn no_pmus() -> Catalog {
    Catalog::load(Path::new("/nonexistent/hwqos-test-sysfs"))
}

// ---------------------------------------------------------------- generic ABI

#[test]
fn generic_and_perf_names_have_the_kernel_encodings() {
    let cat = no_pmus();
    // PERF_TYPE_HW_CACHE: id | op << 8 | result << 16 (checked with `perf stat -vv`).
    assert_eq!(enc(&cat, "L1-dcache-load-misses"), (3, 0x10000));
    assert_eq!(enc(&cat, "hw.llc.miss"), (3, 0x10002));
    assert_eq!(enc(&cat, "LLC-loads"), (3, 0x2));
    assert_eq!(enc(&cat, "L1-dcache-stores"), (3, 0x100));
    assert_eq!(enc(&cat, "L1-icache-load-misses"), (3, 0x10001));
    assert_eq!(enc(&cat, "dTLB-load-misses"), (3, 0x10003));
    assert_eq!(enc(&cat, "iTLB-loads"), (3, 0x4));
    assert_eq!(enc(&cat, "branch-load-misses"), (3, 0x10005));
    assert_eq!(enc(&cat, "node-loads"), (3, 0x6));
    assert_eq!(enc(&cat, "dTLB-store-misses"), (3, 0x10103));
    // PERF_TYPE_HARDWARE.
    assert_eq!(enc(&cat, "hw.cycles"), (0, 0));
    assert_eq!(enc(&cat, "cpu-cycles"), (0, 0));
    assert_eq!(enc(&cat, "instructions"), (0, 1));
    assert_eq!(enc(&cat, "cache-references"), (0, 2));
    assert_eq!(enc(&cat, "cache-misses"), (0, 3));
    assert_eq!(enc(&cat, "branches"), (0, 4));
    assert_eq!(enc(&cat, "branch-misses"), (0, 5));
    assert_eq!(enc(&cat, "bus-cycles"), (0, 6));
    assert_eq!(enc(&cat, "stalled-cycles-frontend"), (0, 7));
    assert_eq!(enc(&cat, "hw.stalled_cycles.backend"), (0, 8));
    assert_eq!(enc(&cat, "ref-cycles"), (0, 9));
    // PERF_TYPE_SOFTWARE.
    assert_eq!(enc(&cat, "cpu-clock"), (1, 0));
    assert_eq!(enc(&cat, "task-clock"), (1, 1));
    assert_eq!(enc(&cat, "faults"), (1, 2));
    assert_eq!(enc(&cat, "cs"), (1, 3));
    assert_eq!(enc(&cat, "migrations"), (1, 4));
    assert_eq!(enc(&cat, "minor-faults"), (1, 5));
    assert_eq!(enc(&cat, "major-faults"), (1, 6));
    assert_eq!(enc(&cat, "alignment-faults"), (1, 7));
    assert_eq!(enc(&cat, "emulation-faults"), (1, 8));
}

#[test]
fn perf_names_report_the_generic_metric() {
    let cat = no_pmus();
    let ev = resolved(&cat, "L1-dcache-load-misses");
    assert_eq!(ev.name, "L1-dcache-load-misses");
    assert_eq!(ev.metric.as_str(), "hw.l1d.miss");
    assert_eq!(ev.source, EventSource::PerfName);
    assert_eq!(
        resolved(&cat, "task-clock").metric.as_str(),
        "sw.task_clock"
    );
    assert_eq!(resolved(&cat, "cs").metric.as_str(), "sw.context_switches");
    assert_eq!(
        resolved(&cat, "LLC-load-misses").metric.as_str(),
        "hw.llc.miss"
    );
    assert_eq!(
        resolved(&cat, "L1-dcache-stores").metric.as_str(),
        "hw.l1d.store"
    );
    // Combinations without a registered name still get a valid hw.* metric.
    assert_eq!(
        resolved(&cat, "LLC-store-misses").metric.as_str(),
        "hw.llc.store.miss"
    );
    assert_eq!(resolved(&cat, "hw.cycles").source, EventSource::Generic);
}

#[test]
fn every_generic_name_is_registered_and_resolves_on_a_curated_cpu() {
    let cat = catalog("sysfs-skylake");
    let names = generic_event_names();
    assert!(names.len() >= 36, "{names:?}");
    for name in names {
        assert!(
            hwqos_core::metric::lookup(name).is_some(),
            "{name} is not in the core metric registry"
        );
        let ev = resolved(&cat, name);
        assert_eq!(ev.metric.as_str(), name);
        assert_eq!(ev.is_hardware(), name.starts_with("hw."), "{name}");
    }
    assert_eq!(
        cat.names(NameSource::Curated),
        vec!["hw.l2.access", "hw.l2.miss"]
    );
}

#[test]
fn every_perf_name_resolves_to_a_hw_or_sw_metric() {
    let cat = no_pmus();
    for name in perf_event_names() {
        let ev = resolved(&cat, &name);
        assert!(
            matches!(ev.metric.family(), "hw" | "sw"),
            "{name} → {}",
            ev.metric
        );
    }
}

#[test]
fn raw_events() {
    let cat = catalog("sysfs-skylake");
    let ev = resolved(&cat, "r0151");
    assert_eq!((ev.attr.type_, ev.attr.config), (4, 0x151));
    assert_eq!(ev.metric.as_str(), "hw.raw.r0151");
    assert_eq!(ev.source, EventSource::Raw);
    let upper = resolved(&cat, "r01C4");
    assert_eq!(
        (upper.attr.config, upper.metric.as_str()),
        (0x1c4, "hw.raw.r01c4")
    );
    assert_eq!(enc(&cat, "r00000000000000000001"), (4, 1));
    assert_eq!(enc(&cat, "rffffffffffffffff"), (4, u64::MAX));
    assert!(unknown_reason(&cat, "r01g1").contains("not hexadecimal"));
    assert!(unknown_reason(&cat, "r1ffffffffffffffff").contains("64 bits"));
}

// ---------------------------------------------------------------- sysfs syntax

#[test]
fn skylake_sysfs_events_encode_through_formats() {
    let cat = catalog("sysfs-skylake");
    let ev = resolved(&cat, "cpu/event=0x51,umask=0x1/");
    assert_eq!(
        (ev.attr.type_, ev.attr.config, ev.attr.config1),
        (4, 0x151, 0)
    );
    assert_eq!(ev.metric.as_str(), "hw.raw.cpu_event_0x51_umask_0x1");
    assert_eq!(ev.source, EventSource::Sysfs { pmu: "cpu".into() });
    // events/ aliases expand; later terms override the alias's fields.
    assert_eq!(enc(&cat, "cpu/cache-misses/"), (4, 0x412e));
    assert_eq!(enc(&cat, "cpu/cache-misses,umask=0x4f/"), (4, 0x4f2e));
    assert_eq!(
        resolved(&cat, "cpu/cache-misses/").metric.as_str(),
        "hw.raw.cpu_cache_misses"
    );
    // Bare flag terms are 1; single-bit and multi-bit fields; decimal values.
    assert_eq!(
        enc(&cat, "cpu/event=0x3c,inv,cmask=1/"),
        (4, 0x3c | 1 << 23 | 1 << 24)
    );
    assert_eq!(enc(&cat, "cpu/event=60,edge/"), (4, 0x3c | 1 << 18));
    assert_eq!(enc(&cat, "cpu/event/"), (4, 1));
    // config1 formats and aliases that set them.
    let mem = resolved(&cat, "cpu/mem-loads/");
    assert_eq!((mem.attr.config, mem.attr.config1), (0x1cd, 3));
    let whole = resolved(&cat, "cpu/config=0x1234,config1=5,config2=0x7/");
    assert_eq!(
        (whole.attr.config, whole.attr.config1, whole.attr.config2),
        (0x1234, 5, 7)
    );
    // Other PMUs of the tree.
    assert_eq!(enc(&cat, "msr/tsc/"), (8, 0));
    assert_eq!(enc(&cat, "msr/mperf/"), (8, 2));
    assert_eq!(enc(&cat, "power/energy-pkg/"), (11, 2));
    // Aliases are looked up case-insensitively when there is no exact match.
    assert_eq!(enc(&cat, "cpu/CACHE-MISSES/"), (4, 0x412e));
}

#[test]
fn skylake_pmu_metadata() {
    let cat = catalog("sysfs-skylake");
    let cpu = cat.pmu("cpu").expect("cpu PMU");
    assert_eq!(cpu.type_, 4);
    assert_eq!(
        cpu.caps.get("pmu_name").map(String::as_str),
        Some("skylake")
    );
    assert_eq!(cpu.cpus.as_deref(), Some("0-3"));
    assert!(cpu.is_core());
    let power = cat.pmu("power").expect("power PMU");
    assert!(power.events.contains_key("energy-pkg"));
    assert!(!power
        .events
        .keys()
        .any(|k| k.ends_with(".scale") || k.ends_with(".unit")));
    assert_eq!(
        cat.core_pmus().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        vec!["cpu"]
    );
    assert!(cat
        .names(NameSource::Pmu)
        .contains(&"cpu/cache-misses/".to_string()));
    let listing = cat.listing_names();
    assert!(
        listing.contains(&"hw.cycles".to_string())
            && listing.contains(&"cpu/mem-loads/".to_string())
    );
    assert!(
        !listing.iter().any(|n| n.starts_with("msr/")),
        "only core PMU aliases are listed"
    );
}

#[test]
fn amd_split_event_field_places_bits_8_to_11_at_32_to_35() {
    let cat = catalog("sysfs-zen3");
    let ev = resolved(&cat, "cpu/event=0x1c0,umask=0x1/");
    assert_eq!((ev.attr.type_, ev.attr.config), (4, 0x1_0000_01c0));
    assert_eq!(enc(&cat, "cpu/event=0xfff/"), (4, 0xf_0000_00ff));
    assert!(unknown_reason(&cat, "cpu/event=0x1000/").contains("does not fit in 12 bits"));
    // Three ranges: event bits 12-13 land at config bits 59-60.
    assert_eq!(
        enc(&cat, "amd_df/event=0x3fff/"),
        (12, 0xff | 0xf << 32 | 0x3 << 59)
    );
    assert_eq!(enc(&cat, "cpu/cache-misses/"), (4, 0x0964));
}

#[test]
fn arm_big_little_pmus_have_their_own_types() {
    let cat = catalog("sysfs-arm-biglittle");
    assert_eq!(enc(&cat, "armv8_cortex_a53/l2d_cache/"), (8, 0x16));
    assert_eq!(enc(&cat, "armv8_cortex_a72/l2d_cache_refill/"), (9, 0x17));
    assert_eq!(enc(&cat, "armv8_cortex_a72/event=0x11/"), (9, 0x11));
    assert!(unknown_reason(&cat, "armv8_cortex_a53/event=0x10000/").contains("16 bits"));
    assert_eq!(
        cat.core_pmus().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        vec!["armv8_cortex_a53", "armv8_cortex_a72"]
    );
    // A bare PMU alias is not a perf name, but the error says how to write it.
    let reason = unknown_reason(&cat, "l2d_cache");
    assert!(reason.contains("armv8_cortex_a53/l2d_cache/"), "{reason}");
    assert!(reason.contains("armv8_cortex_a72/l2d_cache/"), "{reason}");
}

#[test]
fn this_vm_tree_has_only_software_and_msr_pmus() {
    let cat = catalog("sysfs-this-vm");
    assert_eq!(
        cat.pmus()
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        vec!["breakpoint", "msr", "software", "tracepoint", "uprobe"]
    );
    assert_eq!(cat.core_pmus().count(), 0);
    assert_eq!(enc(&cat, "msr/tsc/"), (9, 0));
    assert_eq!(
        enc(&cat, "uprobe/retprobe,ref_ctr_offset=0x10/"),
        (8, 1 | 0x10 << 32)
    );
    let reason = unknown_reason(&cat, "cpu/event=0x51,umask=0x1/");
    assert!(
        reason.contains("no PMU `cpu`") && reason.contains("msr"),
        "{reason}"
    );
}

// ---------------------------------------------------------------- curated table

#[test]
fn l2_events_come_from_the_curated_table_per_model() {
    let sky = catalog("sysfs-skylake");
    let miss = resolved(&sky, "hw.l2.miss");
    assert_eq!((miss.attr.type_, miss.attr.config), (4, 0x3f24)); // L2_RQSTS.MISS
    assert_eq!(
        miss.source,
        EventSource::Curated {
            table: "intel-skylake".into()
        }
    );
    assert_eq!(enc(&sky, "hw.l2.access"), (4, 0xff24)); // L2_RQSTS.REFERENCES

    let zen = catalog("sysfs-zen3");
    let miss = resolved(&zen, "hw.l2.miss");
    assert_eq!((miss.attr.type_, miss.attr.config), (4, 0x0964)); // PMCx064 umask 0x09
    assert_eq!(
        miss.source,
        EventSource::Curated {
            table: "amd-zen".into()
        }
    );
    assert_eq!(enc(&zen, "hw.l2.access"), (4, 0xff64));

    let arm = catalog("sysfs-arm-biglittle");
    let access = resolved(&arm, "hw.l2.access");
    assert_eq!((access.attr.type_, access.attr.config), (8, 0x16)); // L2D_CACHE on the A53 PMU
    assert_eq!(
        access.source,
        EventSource::Curated {
            table: "arm-pmuv3".into()
        }
    );
    assert_eq!(enc(&arm, "hw.l2.miss"), (8, 0x17)); // L2D_CACHE_REFILL

    // This VM: a Zen 4 EPYC without a core PMU in sysfs: PERF_TYPE_RAW.
    let vm = catalog("sysfs-this-vm");
    assert_eq!(enc(&vm, "hw.l2.miss"), (4, 0x0964));
}

#[test]
fn l2_is_unavailable_on_unknown_cpus() {
    let root = fixture("sysfs-skylake");
    let without_cpu = Catalog::load(&root.join("sys"));
    match without_cpu.resolve("hw.l2.miss") {
        Err(PmuError::Unavailable { name, reason }) => {
            assert_eq!(name, "hw.l2.miss");
            assert!(reason.contains("CPU model is not known"), "{reason}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let mut old = CpuModel::from_cpuinfo(
        "vendor_id : GenuineIntel\ncpu family : 6\nmodel : 23\nmodel name : Core 2\n",
    );
    assert_eq!(old.vendor, Vendor::Intel);
    let old_cat = Catalog::load(&root.join("sys")).with_cpu(old.clone());
    match old_cat.resolve("hw.l2.access") {
        Err(PmuError::Unavailable { reason, .. }) => {
            assert!(
                reason.contains("curated table") && reason.contains("model 0x17"),
                "{reason}"
            )
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    old.vendor = Vendor::Unknown;
    let unknown = Catalog::load(&root.join("sys")).with_cpu(old);
    assert!(matches!(
        unknown.resolve("hw.l2.miss"),
        Err(PmuError::Unavailable { .. })
    ));
    // Everything else still resolves.
    assert_eq!(enc(&unknown, "hw.l1d.miss"), (3, 0x10000));
    assert!(unknown.names(NameSource::Curated).is_empty());
}

#[test]
fn arm_core_that_does_not_list_l2d_cache_is_unavailable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pmu = dir
        .path()
        .join("sys/bus/event_source/devices/armv8_pmuv3_0");
    std::fs::create_dir_all(pmu.join("events")).unwrap();
    std::fs::create_dir_all(pmu.join("format")).unwrap();
    std::fs::write(pmu.join("type"), "8\n").unwrap();
    std::fs::write(pmu.join("format/event"), "config:0-15\n").unwrap();
    std::fs::write(pmu.join("events/cpu_cycles"), "event=0x0011\n").unwrap();
    let cpu =
        CpuModel::from_cpuinfo("CPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd0c\n");
    let cat = Catalog::load(&dir.path().join("sys")).with_cpu(cpu);
    match cat.resolve("hw.l2.miss") {
        Err(PmuError::Unavailable { reason, .. }) => {
            assert!(reason.contains("l2d_cache_refill"), "{reason}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    // Without an events/ directory the architectural code is used directly.
    std::fs::remove_file(pmu.join("events/cpu_cycles")).unwrap();
    let cat = Catalog::load(&dir.path().join("sys")).with_cpu(cat.cpu().cloned().unwrap());
    assert_eq!(enc(&cat, "hw.l2.miss"), (8, 0x17));
}

// ---------------------------------------------------------------- errors

#[test]
fn every_error_path_names_what_is_wrong() {
    let cat = catalog("sysfs-skylake");
    let cases: &[(&str, &str)] = &[
        ("", "empty"),
        ("   ", "empty"),
        ("cyc les", "without spaces"),
        ("cycles\n", "control"),
        ("cyclés", "ASCII"),
        ("hw.cylces", "did you mean `hw.cycles`"),
        ("hw.l3.miss", "not a generic hwqos event name"),
        ("instrucions", "did you mean `instructions`"),
        ("qwertyuiopasdf", "--list-events"),
        ("cycles:p", "modifier `p` is not supported"),
        ("L1-dcache-load-misses:", "empty event modifier"),
        ("bogus-event:u", "not an event name"),
        ("sched:sched_switch", "tracepoints"),
        ("L1-icache-stores", "no `store` operation"),
        ("LLC-load-bogus", "not a cache operation"),
        ("LLC-", "ends with `-`"),
        ("r01g1", "not hexadecimal"),
        ("cpu/event=0x51", "missing the closing `/`"),
        ("cpu/event=0x51/u", "modifiers"),
        ("cpu/event=1/umask=1/", "exactly two slashes"),
        ("/event=1/", "no PMU name"),
        ("nopmu/event=1/", "no PMU `nopmu`"),
        ("cpux/event=1/", "did you mean `cpu`"),
        ("cpu//", "no terms"),
        ("cpu/event=0x51,,umask=1/", "empty term"),
        ("cpu/event=0x51,/", "empty term"),
        ("cpu/event=zz/", "not a number"),
        ("cpu/event=0x/", "not a number"),
        ("cpu/event=0x100/", "does not fit in 8 bits"),
        ("cpu/inv=2/", "does not fit in 1 bit"),
        ("cpu/foo=1/", "no format term or event `foo`"),
        ("cpu/evnt=0x3c/", "did you mean `event`"),
        ("cpu/cache-misses=1/", "takes no value"),
        ("cpu/config/", "needs a value"),
        ("cpu/event=99999999999999999999/", "not a number"),
    ];
    for (name, needle) in cases {
        let reason = unknown_reason(&cat, name);
        assert!(
            reason.contains(needle),
            "{name:?}: reason {reason:?} lacks {needle:?}"
        );
    }
    // The unknown-term message lists what the PMU does accept.
    let reason = unknown_reason(&cat, "cpu/foo=1/");
    assert!(
        reason.contains("umask") && reason.contains("cache-misses"),
        "{reason}"
    );
}

#[test]
fn broken_sysfs_files_give_errors_not_panics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let devices = dir.path().join("sys/bus/event_source/devices");
    let good = devices.join("weird");
    std::fs::create_dir_all(good.join("format")).unwrap();
    std::fs::create_dir_all(good.join("events")).unwrap();
    std::fs::write(good.join("type"), "42\n").unwrap();
    std::fs::write(good.join("format/event"), "config:0-7\n").unwrap();
    std::fs::write(good.join("format/bad"), "config:9-3\n").unwrap();
    std::fs::write(good.join("format/far"), "config3:0-7\n").unwrap();
    std::fs::write(good.join("events/loop"), "loop2\n").unwrap();
    std::fs::write(good.join("events/loop2"), "event=1\n").unwrap();
    std::fs::write(good.join("events/param"), "event=?\n").unwrap();
    let no_type = devices.join("notype");
    std::fs::create_dir_all(&no_type).unwrap();
    let bad_type = devices.join("badtype");
    std::fs::create_dir_all(&bad_type).unwrap();
    std::fs::write(bad_type.join("type"), "four\n").unwrap();

    let cat = Catalog::load(&dir.path().join("sys"));
    assert_eq!(
        cat.pmus().len(),
        1,
        "PMUs without a readable numeric type are skipped"
    );
    assert_eq!(cat.warnings().len(), 2, "{:?}", cat.warnings());
    assert!(cat
        .warnings()
        .iter()
        .any(|w| w.contains("badtype") && w.contains("four")));
    assert_eq!(enc(&cat, "weird/event=0xff/"), (42, 0xff));
    assert!(unknown_reason(&cat, "weird/bad=1/").contains("format/bad"));
    assert!(unknown_reason(&cat, "weird/far=1/").contains("config3"));
    assert!(unknown_reason(&cat, "weird/loop/").contains("another alias"));
    assert!(unknown_reason(&cat, "weird/param/").contains("needs a value"));

    let missing = no_pmus();
    assert!(missing.pmus().is_empty());
    assert!(missing.warnings()[0].contains("cannot list PMUs"));
    assert!(unknown_reason(&missing, "cpu/event=1/").contains("PMUs here: none"));
}

/// A deterministic xorshift generator for the garbage-input test.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn garbage_names_never_panic() {
    const PIECES: &[&str] = &[
        "cpu",
        "/",
        "//",
        "=",
        ",",
        "0x",
        "ff",
        "1",
        "99999999999999999999",
        "r",
        "r0",
        ":",
        ":u",
        "-",
        "L1-dcache",
        "load",
        "misses",
        "LLC",
        "hw.",
        "sw.",
        ".",
        "l2",
        "miss",
        "event",
        "umask",
        "cmask",
        "config",
        "config1",
        "cache-misses",
        "msr",
        "tsc",
        "armv8_cortex_a53",
        "l2d_cache",
        "amd_df",
        "?",
        " ",
        "\u{0}",
        "é",
        "\n",
        "_",
        "cycles",
        "task-clock",
        "L2",
        "node",
        "prefetch",
        "ζ",
        "%",
        "\\",
    ];
    let catalogs = [
        "sysfs-this-vm",
        "sysfs-skylake",
        "sysfs-zen3",
        "sysfs-arm-biglittle",
    ]
    .map(catalog);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut resolved_some = 0;
    for _ in 0..4000 {
        let len = (rng.next() % 7) as usize;
        let name: String = (0..len)
            .map(|_| PIECES[(rng.next() % PIECES.len() as u64) as usize])
            .collect();
        for cat in &catalogs {
            match cat.resolve(&name) {
                Ok(ev) => {
                    resolved_some += 1;
                    assert_eq!(ev.name, name);
                    assert!(MetricName::new(ev.metric.as_str()).is_ok());
                }
                Err(
                    PmuError::UnknownEvent { reason, .. } | PmuError::Unavailable { reason, .. },
                ) => {
                    assert!(!reason.is_empty(), "{name:?}")
                }
                Err(other) => panic!("{name:?}: unexpected error kind {other:?}"),
            }
        }
    }
    assert!(
        resolved_some > 0,
        "the generator should also produce some valid names"
    );
}

// ---------------------------------------------------------------- target specs

#[test]
fn skylake_spec_and_json_round_trip() {
    let spec = generate("sysfs-skylake");
    assert_eq!(spec.schema, SCHEMA_VERSION);
    assert_eq!(
        (spec.cpu.vendor, spec.cpu.family, spec.cpu.model),
        (Vendor::Intel, 6, 78)
    );
    assert_eq!(spec.cpu.arch, "x86_64");
    assert_eq!(
        (spec.counters.general_purpose, spec.counters.fixed),
        (Some(4), Some(3))
    );
    assert!(
        spec.counters
            .source
            .contains("curated table `intel-skylake`"),
        "{}",
        spec.counters.source
    );
    assert_eq!(spec.capacity(), Some(4));
    let cpu = spec
        .pmus
        .iter()
        .find(|p| p.name == "cpu")
        .expect("cpu PMU in spec");
    assert_eq!(
        cpu.formats.get("cmask").map(String::as_str),
        Some("config:24-31")
    );
    let l2 = spec.event("hw.l2.miss").expect("hw.l2.miss in spec");
    assert_eq!(l2.attr.map(|a| a.config), Some(0x3f24));
    assert_eq!(l2.available, None, "only a probe on the node can tell");
    assert_eq!(spec.events.len(), generic_event_names().len());

    let json = spec.to_json_pretty().expect("encode");
    assert!(json.contains("\"schema\": 1"));
    assert!(json.contains("\"type\": 4"));
    let back = TargetSpec::from_json(&json).expect("decode");
    assert_eq!(back, spec);

    // The spec alone resolves events like the tree it came from.
    let from_spec = spec.catalog();
    let from_tree = catalog("sysfs-skylake");
    for name in [
        "cpu/event=0x51,umask=0x1/",
        "cpu/mem-loads/",
        "hw.l2.access",
        "r0151",
        "hw.itlb.miss",
    ] {
        assert_eq!(
            resolved(&from_spec, name),
            resolved(&from_tree, name),
            "{name}"
        );
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("skylake.json");
    spec.write(&path).expect("write");
    assert_eq!(TargetSpec::read(&path).expect("read"), spec);
}

#[test]
fn spec_readers_reject_other_schemas() {
    let json = generate("sysfs-zen3").to_json_pretty().expect("encode");
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    value["schema"] = serde_json::json!(2);
    let err = TargetSpec::from_json(&value.to_string())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("schema 2 is not supported") && err.contains("schema 1"),
        "{err}"
    );
    value.as_object_mut().unwrap().remove("schema");
    let err = TargetSpec::from_json(&value.to_string())
        .unwrap_err()
        .to_string();
    assert!(err.contains("no `schema` field"), "{err}");
    value["schema"] = serde_json::json!("1");
    assert!(TargetSpec::from_json(&value.to_string())
        .unwrap_err()
        .to_string()
        .contains("not supported"));
    let err = TargetSpec::from_json("{not json").unwrap_err().to_string();
    assert!(err.contains("not valid JSON"), "{err}");
    let err = TargetSpec::from_json(r#"{"schema": 1, "cpu": 3}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("malformed"), "{err}");
    let err = TargetSpec::read(Path::new("/nonexistent/spec.json"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/spec.json"), "{err}");
}

#[test]
fn specs_of_the_other_fixtures() {
    let zen = generate("sysfs-zen3");
    assert_eq!(
        (zen.cpu.vendor, zen.cpu.family, zen.cpu.model),
        (Vendor::Amd, 0x19, 1)
    );
    assert_eq!(
        (zen.counters.general_purpose, zen.counters.fixed),
        (Some(6), Some(0))
    );
    assert!(zen.counters.source.contains("amd-zen"));

    let arm = generate("sysfs-arm-biglittle");
    assert_eq!(
        (arm.cpu.vendor, arm.cpu.arch.as_str()),
        (Vendor::Arm, "aarch64")
    );
    assert_eq!(arm.cpu.parts, vec![0xd03, 0xd08]);
    assert_eq!(arm.cpu.model_name, "Cortex-A53 + Cortex-A72");
    assert_eq!(
        (arm.counters.general_purpose, arm.counters.fixed),
        (Some(6), Some(1))
    );
    assert!(
        arm.counters.source.contains("PMCR_EL0.N"),
        "{}",
        arm.counters.source
    );

    let vm = generate("sysfs-this-vm");
    assert_eq!(vm.cpu.vendor, Vendor::Amd);
    assert_eq!(
        (vm.counters.general_purpose, vm.counters.fixed),
        (Some(0), Some(0))
    );
    assert!(
        vm.counters.source.contains("no CPU core PMU"),
        "{}",
        vm.counters.source
    );
    for ev in &vm.events {
        if ev.name.starts_with("hw.") {
            assert_eq!(ev.available, Some(false), "{}", ev.name);
            assert!(ev
                .reason
                .as_deref()
                .unwrap_or("")
                .contains("no hardware counters"));
        } else {
            assert_eq!(
                (ev.available, ev.reason.as_deref()),
                (None, None),
                "{}",
                ev.name
            );
        }
    }

    // Nothing at all: still a spec, with an unknown CPU and no counters.
    let empty = spec::generate(
        Path::new("/nonexistent/sys"),
        Path::new("/nonexistent/proc"),
    );
    assert_eq!(empty.cpu.vendor, Vendor::Unknown);
    assert_eq!(empty.capacity(), Some(0));
    let l2 = empty.event("hw.l2.miss").unwrap();
    assert_eq!((l2.available, l2.attr), (Some(false), None));

    // A core PMU but a CPU outside the curated table: capacity unknown, said so.
    let dir = tempfile::tempdir().expect("tempdir");
    let cpu_pmu = dir.path().join("sys/bus/event_source/devices/cpu");
    std::fs::create_dir_all(&cpu_pmu).unwrap();
    std::fs::write(cpu_pmu.join("type"), "4\n").unwrap();
    std::fs::create_dir_all(dir.path().join("proc")).unwrap();
    std::fs::write(
        dir.path().join("proc/cpuinfo"),
        "vendor_id : GenuineIntel\ncpu family : 6\nmodel : 15\n",
    )
    .unwrap();
    let old = spec::generate(&dir.path().join("sys"), &dir.path().join("proc"));
    assert_eq!(old.capacity(), None);
    assert!(
        old.counters.source.contains("not in hwqos's curated table"),
        "{}",
        old.counters.source
    );
}

// ---------------------------------------------------------------- availability

/// A backend that opens software events and refuses hardware ones the way the
/// kernel does on a node without a PMU (ENOENT).
struct NoPmuBackend {
    probed: Vec<String>,
}

impl CounterBackend for NoPmuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Simulated
    }
    fn capacity(&self) -> Option<usize> {
        Some(0)
    }
    fn open_group(&mut self, _target: &CountTarget, events: &[Event]) -> Result<GroupId, PmuError> {
        self.probed.extend(events.iter().map(|e| e.name.clone()));
        match events.iter().find(|e| e.is_hardware()) {
            Some(hw) => Err(PmuError::from_open_errno(
                &hw.name,
                None,
                std::io::Error::from_raw_os_error(libc::ENOENT),
            )),
            None => Ok(GroupId(1)),
        }
    }
    fn enable(&mut self, _: GroupId) -> Result<(), PmuError> {
        Ok(())
    }
    fn disable(&mut self, _: GroupId) -> Result<(), PmuError> {
        Ok(())
    }
    fn read(&mut self, _: GroupId) -> Result<GroupReading, PmuError> {
        Ok(GroupReading::default())
    }
    fn close(&mut self, _: GroupId) {}
}

#[test]
fn availability_with_a_pmu_less_backend() {
    let cat = catalog("sysfs-this-vm");
    let mut backend = NoPmuBackend { probed: Vec::new() };
    let names = [
        "sw.task_clock",
        "page-faults",
        "hw.cycles",
        "L1-dcache-load-misses",
        "hw.l2.miss",
        "nonsense",
    ];
    let statuses = check_availability(&cat, &mut backend, &names);
    assert_eq!(statuses.len(), names.len());
    assert_eq!(
        backend.probed,
        names[..5].to_vec(),
        "unresolvable names are not probed"
    );
    let by_name = |n: &str| statuses.iter().find(|s| s.name == n).unwrap();
    assert!(by_name("sw.task_clock").available && by_name("sw.task_clock").reason.is_none());
    assert_eq!(
        by_name("page-faults").metric.as_ref().map(|m| m.as_str()),
        Some("sw.page_faults")
    );
    for hw in ["hw.cycles", "L1-dcache-load-misses", "hw.l2.miss"] {
        let s = by_name(hw);
        assert!(!s.available, "{hw}");
        assert!(
            s.reason.as_deref().unwrap().contains("no hardware PMU?"),
            "{hw}: {:?}",
            s.reason
        );
    }
    let bad = by_name("nonsense");
    assert!(!bad.available && bad.metric.is_none() && bad.source.is_none());
    assert!(bad.reason.as_deref().unwrap().starts_with("unknown event:"));

    let table = render_event_table(&statuses);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), names.len() + 1);
    assert!(
        lines[0].starts_with("EVENT")
            && lines[0].contains("METRIC")
            && lines[0].ends_with("REASON")
    );
    let status_col = lines[0].find("STATUS").unwrap();
    assert!(
        lines[1].starts_with("sw.task_clock") && lines[1][status_col..].starts_with("available")
    );
    assert!(lines[3].starts_with("hw.cycles") && lines[3][status_col..].starts_with("unavailable"));
    assert!(lines[3].contains("No such file or directory"));
    let json = serde_json::to_string(&statuses).expect("statuses serialize");
    assert!(json.contains("\"available\":false"));
}

/// This node with the real perf backend: software events open everywhere;
/// hardware events either open or say why not, and on a node whose spec has no
/// hardware counters (this PMU-less VM) none of them opens, for lack of the event
/// in the kernel (ENOENT).
#[test]
fn availability_on_this_node_with_the_perf_backend() {
    let cat = Catalog::for_this_node();
    let node = spec::generate_for_this_node();
    let mut backend = PerfBackend::new();
    let names = generic_event_names();
    let statuses = check_availability(&cat, &mut backend, &names);
    println!(
        "{}\n{}",
        node.counters.source,
        render_event_table(&statuses)
    );
    let no_hardware = node.counters.general_purpose == Some(0);
    for s in &statuses {
        let reason = s.reason.as_deref().unwrap_or("");
        assert_eq!(s.available, s.reason.is_none(), "{}: {reason}", s.name);
        if s.name.starts_with("sw.") {
            assert!(
                s.available || reason.contains("permission"),
                "{}: {reason}",
                s.name
            );
        } else if no_hardware {
            assert!(
                !s.available,
                "{} opened although the spec says there are no hardware counters",
                s.name
            );
            if s.metric.is_some() {
                assert!(
                    reason.contains("no hardware PMU?"),
                    "{}: not ENOENT: {reason}",
                    s.name
                );
            }
        } else {
            assert!(s.available || !reason.is_empty(), "{}", s.name);
        }
    }
}

#[test]
fn group_capacity_counts_general_and_fixed_counters_only_where_known() {
    // Skylake: 4 general-purpose + 3 fixed counters (curated table).
    assert_eq!(generate("sysfs-skylake").max_group_events(), Some(7));
    // A VM without a core PMU has no hardware counters: no capacity limit is
    // imposed, hardware events are reported unavailable instead.
    assert_eq!(generate("sysfs-this-vm").max_group_events(), None);
}

#[test]
fn user_and_kernel_modifiers_select_the_privilege_levels() {
    use hwqos_pmu::Modes;
    let cat = catalog("sysfs-skylake");
    for (name, modes) in [
        ("cycles", Modes::All),
        ("cycles:u", Modes::User),
        ("page-faults:k", Modes::Kernel),
        ("L1-dcache-load-misses:uk", Modes::All),
        ("hw.instructions:u", Modes::User),
    ] {
        let event = cat.resolve(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(event.attr.modes, modes, "{name}");
        assert_eq!(event.name, name);
    }
    let plain = cat.resolve("cycles").unwrap();
    let user = cat.resolve("cycles:u").unwrap();
    assert_eq!(
        plain.metric, user.metric,
        "the same metric, counted in fewer modes"
    );
    assert_eq!(
        (plain.attr.type_, plain.attr.config),
        (user.attr.type_, user.attr.config)
    );
}
