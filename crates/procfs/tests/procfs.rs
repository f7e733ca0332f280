//! procfs sampler: exact answers on hand-written `/proc` snapshots, robustness on
//! truncated and garbage files, and structural facts on this node's live `/proc`.

use hwqos_core::{Sample, Scope, Timestamp};
use hwqos_procfs::ProcfsError;
use hwqos_procfs::{
    parse_cpu_table, parse_loadavg, parse_mem_available, parse_pid_stat, parse_proc_stat,
    ProcfsSampler,
};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Copies a fixture tree over `dst` (so one sampler can see two snapshots).
fn install(src: &Path, dst: &Path) {
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&to).unwrap();
            install(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
}

fn at(secs: u64) -> Timestamp {
    Timestamp {
        mono_ns: secs * 1_000_000_000,
        wall_ns: 1_700_000_000_000_000_000 + (secs * 1_000_000_000) as i64,
    }
}

fn value(samples: &[Sample], scope: &Scope, metric: &str) -> Option<f64> {
    let hits: Vec<&Sample> = samples
        .iter()
        .filter(|s| &s.scope == scope && s.metric.as_str() == metric)
        .collect();
    assert!(
        hits.len() <= 1,
        "{metric} about {scope} reported {} times",
        hits.len()
    );
    hits.first().map(|s| s.value)
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

#[test]
fn two_snapshots_give_exact_interval_values() {
    let dir = tempfile::tempdir().unwrap();
    install(&fixture("proc-interval-t0"), dir.path());
    let mut s = ProcfsSampler::new(dir.path()).with_units(100, 4096);

    let first = s.sample_system(at(10)).unwrap();
    // The first call primes: gauges only.
    assert!(close(value(&first, &Scope::System, "os.runqueue"), 3.0));
    assert!(close(value(&first, &Scope::System, "os.load1"), 0.5));
    assert!(close(
        value(&first, &Scope::System, "os.mem.available"),
        1_000_000.0 * 1024.0
    ));
    assert!(first
        .iter()
        .all(|x| !x.metric.as_str().starts_with("os.cpu.")));
    assert!(value(&first, &Scope::System, "os.interrupts").is_none());
    assert!(first
        .iter()
        .all(|x| x.counter.is_none() && x.time == at(10)));

    install(&fixture("proc-interval-t1"), dir.path());
    let second = s.sample_system(at(12)).unwrap();
    let cpu0 = Scope::Cpu { cpu: 0 };
    let cpu1 = Scope::Cpu { cpu: 1 };
    let sys = Scope::System;
    // cpu0: +60 user, +20 system, +10 idle, +5 iowait, +3 irq, +2 softirq = 100 ticks.
    assert!(close(value(&second, &cpu0, "os.cpu.util"), 0.85));
    assert!(close(value(&second, &cpu0, "os.cpu.user"), 0.60));
    assert!(close(value(&second, &cpu0, "os.cpu.system"), 0.20));
    assert!(close(value(&second, &cpu0, "os.cpu.iowait"), 0.05));
    assert!(close(value(&second, &cpu0, "os.cpu.irq"), 0.05));
    // cpu1: +10 user, +10 nice, +5 system, +70 idle, +5 softirq = 100 ticks.
    assert!(close(value(&second, &cpu1, "os.cpu.util"), 0.30));
    assert!(close(value(&second, &cpu1, "os.cpu.user"), 0.20));
    assert!(close(value(&second, &cpu1, "os.cpu.iowait"), 0.0));
    // whole node: 200 ticks, 115 busy.
    assert!(close(value(&second, &sys, "os.cpu.util"), 0.575));
    assert!(close(value(&second, &sys, "os.cpu.system"), 0.125));
    assert!(close(value(&second, &sys, "os.cpu.irq"), 0.05));
    assert!(close(value(&second, &sys, "os.ctxt"), 450.0));
    // interrupts: cpu0 2 + 0 + 100, cpu1 0 + 3 + 250; ERR is not per CPU and not counted.
    assert!(close(value(&second, &cpu0, "os.interrupts"), 102.0));
    assert!(close(value(&second, &cpu1, "os.interrupts"), 253.0));
    assert!(close(value(&second, &sys, "os.interrupts"), 355.0));
    assert!(close(value(&second, &cpu0, "os.softirqs"), 42.0));
    assert!(close(value(&second, &cpu1, "os.softirqs"), 60.0));
    assert!(close(value(&second, &sys, "os.softirqs"), 102.0));
    assert!(close(value(&second, &sys, "os.runqueue"), 2.0));
    assert!(close(value(&second, &sys, "os.load1"), 1.25));
    assert!(close(
        value(&second, &sys, "os.mem.available"),
        900_000.0 * 1024.0
    ));
    // every name is in the registry
    for x in &second {
        assert!(
            hwqos_core::metric::lookup(x.metric.as_str()).is_some(),
            "{}",
            x.metric
        );
    }
}

#[test]
fn process_interval_values_and_hostile_comm() {
    let dir = tempfile::tempdir().unwrap();
    install(&fixture("proc-interval-t0"), dir.path());
    let mut s = ProcfsSampler::new(dir.path()).with_units(100, 4096);
    let p = Scope::Process { pid: 4001 };

    let first = s.sample_process(4001, at(10)).unwrap();
    assert!(close(value(&first, &p, "os.proc.threads"), 3.0));
    assert!(close(value(&first, &p, "os.proc.rss"), 250.0 * 4096.0));
    assert!(
        value(&first, &p, "os.proc.cpu").is_none(),
        "first call only primes"
    );
    assert_eq!(s.tracked(), vec![4001]);

    install(&fixture("proc-interval-t1"), dir.path());
    let second = s.sample_process(4001, at(12)).unwrap();
    // (380 + 120) - (300 + 100) = 100 ticks = 1 s of CPU in 2 s.
    assert!(close(value(&second, &p, "os.proc.cpu"), 0.5));
    assert!(close(value(&second, &p, "os.proc.minor_faults"), 60.0));
    assert!(close(value(&second, &p, "os.proc.major_faults"), 3.0));
    assert!(close(value(&second, &p, "os.proc.threads"), 4.0));
    assert!(close(value(&second, &p, "os.proc.rss"), 300.0 * 4096.0));

    // After forget() the next call primes again.
    s.forget(4001);
    assert!(s.tracked().is_empty());
    let again = s.sample_process(4001, at(14)).unwrap();
    assert!(value(&again, &p, "os.proc.cpu").is_none());

    // A vanished process gives None and is no longer tracked.
    std::fs::remove_dir_all(dir.path().join("4001")).unwrap();
    assert!(s.sample_process(4001, at(16)).is_none());
    assert!(s.tracked().is_empty());
}

#[test]
fn reused_pid_is_not_diffed_against_the_old_process() {
    let dir = tempfile::tempdir().unwrap();
    install(&fixture("proc-interval-t0"), dir.path());
    let mut s = ProcfsSampler::new(dir.path()).with_units(100, 4096);
    s.sample_process(4001, at(10)).unwrap();
    let t1 = std::fs::read_to_string(fixture("proc-interval-t1/4001/stat")).unwrap();
    // Same pid, different start time (field 22): a new process.
    let reused = t1.replace(" 5000 1000000 ", " 7000 1000000 ");
    assert_ne!(reused, t1);
    std::fs::write(dir.path().join("4001/stat"), reused).unwrap();
    let out = s.sample_process(4001, at(12)).unwrap();
    assert!(value(&out, &Scope::Process { pid: 4001 }, "os.proc.cpu").is_none());
}

#[test]
fn pid_stat_parser_takes_comm_up_to_the_last_paren() {
    let text = std::fs::read_to_string(fixture("proc-interval-t0/4001/stat")).unwrap();
    let st = parse_pid_stat(&text).unwrap();
    assert_eq!(st.pid, 4001);
    assert_eq!(st.comm, "(evil) name)");
    assert_eq!(st.state, 'S');
    assert_eq!(
        (st.minflt, st.majflt, st.utime, st.stime),
        (100, 2, 300, 100)
    );
    assert_eq!((st.num_threads, st.starttime, st.rss_pages), (3, 5000, 250));
}

#[test]
fn truncated_and_garbage_files_never_panic() {
    type Parser = fn(&str) -> bool;
    let cases: [(&str, Parser); 6] = [
        ("stat", |t| parse_proc_stat(t).is_ok()),
        ("loadavg", |t| parse_loadavg(t).is_ok()),
        ("interrupts", |t| parse_cpu_table(t).is_ok()),
        ("softirqs", |t| parse_cpu_table(t).is_ok()),
        ("meminfo", |t| parse_mem_available(t).is_ok()),
        ("4001/stat", |t| parse_pid_stat(t).is_ok()),
    ];
    for (file, parse) in cases {
        let text = std::fs::read_to_string(fixture("proc-interval-t0").join(file)).unwrap();
        assert!(parse(&text), "{file} fixture must parse");
        for cut in 0..text.len() {
            if text.is_char_boundary(cut) {
                parse(&text[..cut]);
            }
        }
        // Byte-level garbage: every byte replaced in turn by characters that break numbers.
        for (i, _) in text.char_indices() {
            for junk in ["x", "(", ")", "-", ":", "\n", " "] {
                let mut t = text.clone();
                t.replace_range(i..i + 1, junk);
                parse(&t);
            }
        }
    }
    assert!(parse_proc_stat("").is_err());
    assert!(parse_proc_stat("cpu 1 2\nctxt 5\n").is_err());
    assert!(parse_loadavg("0.1 0.2 0.3 3-100 7").is_err());
    assert!(parse_loadavg("nan 0.2 0.3 3/100 7").is_err());
    assert!(parse_cpu_table("CPU0 CPUx\n").is_err());
    assert!(parse_mem_available("MemTotal: 5 kB\n").is_err());
    assert!(parse_pid_stat("12 (x) S 1 2").is_err());
    assert!(parse_pid_stat("12 x) S").is_err());
}

#[test]
fn malformed_file_error_names_path_and_problem() {
    let dir = tempfile::tempdir().unwrap();
    install(&fixture("proc-interval-t0"), dir.path());
    std::fs::write(dir.path().join("loadavg"), "0.1 0.2\n").unwrap();
    let mut s = ProcfsSampler::new(dir.path());
    let err = s.sample_system(at(1)).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains(&dir.path().join("loadavg").display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("expected at least 4 fields"), "{msg}");

    std::fs::remove_file(dir.path().join("loadavg")).unwrap();
    let err = s.sample_system(at(2)).unwrap_err();
    assert!(matches!(err, ProcfsError::Io { .. }), "{err}");
    assert!(err.to_string().contains("loadavg"), "{err}");

    // A garbage per-process stat file is not a process: None, no panic.
    std::fs::write(dir.path().join("4001/stat"), "4001 (x) S garbage\n").unwrap();
    assert!(s.sample_process(4001, at(3)).is_none());
}

#[test]
fn live_system_metrics_are_structurally_sound() {
    let mut s = ProcfsSampler::new("/proc");
    let first = s.sample_system(Timestamp::now()).unwrap();
    assert!(
        value(&first, &Scope::System, "os.runqueue").is_some_and(|v| v >= 1.0),
        "we are running"
    );
    assert!(value(&first, &Scope::System, "os.mem.available").is_some_and(|v| v > 0.0));
    // Burn some CPU so ticks elapse between the snapshots.
    let start = hwqos_core::time::thread_cpu_ns();
    let mut x = 0u64;
    while hwqos_core::time::thread_cpu_ns() - start < 50_000_000 {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
    }
    let second = s.sample_system(Timestamp::now()).unwrap();
    let util = value(&second, &Scope::System, "os.cpu.util").expect("system utilization");
    assert!((0.0..=1.0).contains(&util), "{util}");
    // The online CPUs, as /proc/stat lists them.
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpus: Vec<u32> = parse_proc_stat(&stat).unwrap().cpus.into_keys().collect();
    let mut irq_sum = 0.0;
    for cpu in &cpus {
        let scope = Scope::Cpu { cpu: *cpu };
        irq_sum += value(&second, &scope, "os.interrupts").expect("per-CPU interrupts");
        if let Some(u) = value(&second, &scope, "os.cpu.util") {
            assert!((0.0..=1.0).contains(&u), "cpu{cpu}: {u}");
        }
    }
    assert_eq!(
        Some(irq_sum),
        value(&second, &Scope::System, "os.interrupts")
    );
    assert!(value(&second, &Scope::System, "os.ctxt").is_some_and(|v| v >= 0.0));
}

#[test]
fn live_process_metrics_follow_this_process() {
    let me = std::process::id();
    let scope = Scope::Process { pid: me };
    let mut s = ProcfsSampler::new("/proc");
    let first = s.sample_process(me, Timestamp::now()).unwrap();
    assert!(value(&first, &scope, "os.proc.threads").is_some_and(|v| v >= 1.0));
    assert!(value(&first, &scope, "os.proc.rss").is_some_and(|v| v > 0.0));
    // 200 ms of CPU time and fresh pages touched between the two snapshots.
    let start = hwqos_core::time::thread_cpu_ns();
    let mut x = 0u64;
    while hwqos_core::time::thread_cpu_ns() - start < 200_000_000 {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
    }
    let mut pages = vec![0u8; 8 << 20];
    for i in (0..pages.len()).step_by(4096) {
        pages[i] = 1;
    }
    std::hint::black_box(&pages);
    let second = s.sample_process(me, Timestamp::now()).unwrap();
    assert!(value(&second, &scope, "os.proc.cpu").is_some_and(|v| v > 0.0));
    assert!(value(&second, &scope, "os.proc.minor_faults").is_some_and(|v| v > 0.0));
    assert!(value(&second, &scope, "os.proc.major_faults").is_some_and(|v| v >= 0.0));
}

#[test]
fn live_missing_process_is_none() {
    let mut s = ProcfsSampler::new("/proc");
    // pid_max is at most 2^22, so this pid cannot exist.
    assert!(s.sample_process(4_194_305 + 7, Timestamp::now()).is_none());
}
