//! Runs this crate's examples (issue 23) and checks what they print; each
//! example also asserts its own known answers. `cargo test` builds the
//! examples before it runs any test; `cargo test -p hwqos-pmu --test
//! examples` alone needs `cargo build -p hwqos-pmu --examples` first.

/// Runs this crate's example `name` and returns its stdout.
fn run_example(name: &str) -> String {
    hwqos_testsupport::run_example("hwqos-pmu", name)
}

/// The number after `KEY = ` on the line containing `KEY`.
fn value(stdout: &str, key: &str) -> f64 {
    let line = stdout.lines().find(|l| l.contains(key)).expect(key);
    let rest = &line[line.find(key).unwrap() + key.len()..];
    let v = rest
        .trim_start_matches(" = ")
        .split([' ', ','])
        .next()
        .unwrap();
    v.parse().unwrap_or_else(|_| panic!("{key} in {line}"))
}

#[test]
fn own_process_counts_its_page_faults_and_context_switches() {
    let out = run_example("own_process");
    assert!(value(&out, "sw.page_faults") >= 1024.0, "{out}");
    assert!(value(&out, "sw.context_switches") >= 20.0, "{out}");
    assert!(value(&out, "sw.task_clock") > 0.0, "{out}");
}

#[test]
fn per_cpu_counts_the_faults_on_the_pinned_cpu() {
    let out = run_example("per_cpu");
    assert!(value(&out, "sw.page_faults") >= 1024.0, "{out}");
    assert!(value(&out, "sw.cpu_clock") > 0.0, "{out}");
}

#[test]
fn rotating_sets_alternate_per_tick() {
    let out = run_example("rotating_sets");
    let ticks: Vec<&str> = out.lines().filter(|l| l.starts_with("tick ")).collect();
    assert_eq!(ticks.len(), 4, "{out}");
    for (i, t) in ticks.iter().enumerate() {
        let faults = t.contains("\"sw.page_faults\"");
        let switches = t.contains("\"sw.context_switches\"");
        assert_eq!((faults, switches), (i % 2 == 0, i % 2 == 1), "{t}");
    }
}
