//! Runs this crate's example (issue 23) and checks what it prints; it also
//! asserts its own known answers. `cargo test` builds the examples before it
//! runs any test; `cargo test -p hwqos-sched --test examples` alone needs
//! `cargo build -p hwqos-sched --examples` first.

#[test]
fn apply_contract_example_pins_and_holds_the_quota() {
    let stdout = hwqos_testsupport::run_example("hwqos-sched", "apply_contract");
    assert!(stdout.contains("faulter: pid "), "{stdout}");
    let used = stdout
        .lines()
        .find_map(|l| l.strip_prefix("page faults per 10 ms period: "))
        .expect("per-period counts");
    let used: Vec<u64> = used
        .trim_matches(['[', ']'])
        .split(", ")
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(used.len() >= 20, "{stdout}");
    // The child faults far faster than 400 per period: held at the quota.
    let at_quota = used.iter().filter(|&&n| (400..=440).contains(&n)).count();
    assert!(at_quota * 2 >= used.len(), "{used:?}");
}
