//! Runs this crate's example (issue 23) and checks what it prints; it also
//! asserts its own known answer. `cargo test` builds the examples before it
//! runs any test; `cargo test -p hwqos-loadsynth --test examples` alone
//! needs `cargo build -p hwqos-loadsynth --examples` first.

use std::process::Command;

fn value(stdout: &str, key: &str) -> u64 {
    let rest = stdout
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {stdout}"));
    rest.trim_start_matches(" = ").parse().expect(key)
}

#[test]
fn generator_example_causes_the_faults_it_counts() {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join("generator");
    assert!(
        path.exists(),
        "{} not built: run `cargo build -p hwqos-loadsynth --examples`",
        path.display()
    );
    let out = Command::new(&path).output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = value(&stdout, "generator faults");
    let counted = value(&stdout, "kernel minor faults");
    assert!(generated >= 20_000, "{stdout}");
    assert!(counted >= generated, "{stdout}");
}
