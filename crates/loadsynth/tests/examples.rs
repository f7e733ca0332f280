//! Runs this crate's example (issue 23) and checks what it prints; it also
//! asserts its own known answer. `cargo test` builds the examples before it
//! runs any test; `cargo test -p hwqos-loadsynth --test examples` alone
//! needs `cargo build -p hwqos-loadsynth --examples` first.

fn value(stdout: &str, key: &str) -> u64 {
    let rest = stdout
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {stdout}"));
    rest.trim_start_matches(" = ").parse().expect(key)
}

#[test]
fn generator_example_causes_the_faults_it_counts() {
    let stdout = hwqos_testsupport::run_example("hwqos-loadsynth", "generator");
    let generated = value(&stdout, "generator faults");
    let counted = value(&stdout, "kernel minor faults");
    assert!(generated >= 20_000, "{stdout}");
    assert!(counted >= generated, "{stdout}");
}
