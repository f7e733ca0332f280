//! A CPU-bound workload with a throughput figure, for overhead experiments.
//!
//! Runs a fixed integer kernel (xorshift + multiply-accumulate) in a loop for
//! `--warmup` + `--seconds`, and prints one JSON line with the iterations per
//! second achieved during the measured part. The monitoring overhead on a
//! workload is the drop in that figure when a monitor samples it. It also
//! prints the CPU time it got during the measured part (the scheduler's
//! `/proc/self/schedstat`, ns) and the iterations per CPU-second, a figure
//! that other tenants of a shared machine move far less than wall-clock
//! throughput (they take the CPU away; they do not slow the CPU-second).
//! Usage: hwqos-spinload [--seconds S] [--warmup S] [--pid-file PATH]

use std::time::{Duration, Instant};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn kernel(state: &mut u64, acc: &mut u64, n: u64) {
    for _ in 0..n {
        let mut x = *state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *state = x;
        *acc = acc.wrapping_mul(31).wrapping_add(x);
    }
}

/// This (single-threaded) process's time on the CPU so far, in seconds: the
/// scheduler's sum of run time, field 1 of `/proc/self/schedstat`; `None`
/// where the kernel has no schedstat.
fn cpu_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let parse = |name: &str, default: f64| -> f64 {
        match arg(&args, name) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                eprintln!("hwqos-spinload: {name} needs a number, got `{v}`");
                std::process::exit(2)
            }),
        }
    };
    let seconds = parse("--seconds", 5.0);
    let warmup = parse("--warmup", 1.0);
    if let Some(path) = arg(&args, "--pid-file") {
        if let Err(e) = std::fs::write(&path, std::process::id().to_string()) {
            eprintln!("hwqos-spinload: cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
    const CHUNK: u64 = 200_000;
    let (mut state, mut acc) = (0x9E37_79B9_7F4A_7C15u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs_f64(warmup) {
        kernel(&mut state, &mut acc, CHUNK);
    }
    let measured = Instant::now();
    let cpu0 = cpu_seconds();
    let mut iterations = 0u64;
    while measured.elapsed() < Duration::from_secs_f64(seconds) {
        kernel(&mut state, &mut acc, CHUNK);
        iterations += CHUNK;
    }
    let secs = measured.elapsed().as_secs_f64();
    let cpu = match (cpu0, cpu_seconds()) {
        (Some(a), Some(b)) if b > a => format!(
            ",\"cpu_seconds\":{:.6},\"iterations_per_cpu_sec\":{:.1}",
            b - a,
            iterations as f64 / (b - a)
        ),
        _ => String::new(),
    };
    println!(
        "{{\"iterations\":{iterations},\"seconds\":{secs:.6},\"iterations_per_sec\":{:.1}{cpu},\"checksum\":{acc}}}",
        iterations as f64 / secs
    );
}
