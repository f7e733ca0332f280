//! `hwqos-testload`: a small deterministic workload for known-answer tests of
//! `hwqos stat` / `hwqos record` (and for comparing them with `perf stat`).
//!
//! In this order it
//! 0. sleeps `--delay-ms D` (so a test can attach with `-p` before the work);
//! 1. touches `--pages K` fresh anonymous pages (one write each, transparent huge
//!    pages disabled for the region, so each write is exactly one minor fault);
//! 2. does `--round-trips N` one-byte ping-pongs over two pipes between the main
//!    thread and a helper thread, both pinned to one CPU, so each round trip is
//!    two context switches;
//! 3. spins `--spin-iters M` iterations of a dependent integer recurrence (CPU
//!    time proportional to M, no system calls);
//! 4. sleeps `--sleep-ms S` (for tests that need a process that stays alive);
//! 5. exits with `--exit CODE`.
//!
//! With `--period-ms P --for-ms D` steps 1 and 3 (pages, then spin) are one
//! unit of work repeated every P milliseconds on absolute deadlines for D
//! milliseconds: a steady, paced workload (a late unit is caught up, so the
//! number of units depends on D/P, not on how much CPU the process gets), for
//! tests that compare recordings (`hwqos diff`).
//!
//! It is a test tool shipped with the CLI: it lets anyone reproduce the numbers
//! in the acceptance tests against `perf stat` on their own machine.

use std::hint::black_box;
use std::io::{Read, Write};
use std::process::ExitCode;

#[derive(Debug, Default)]
struct Plan {
    pages: usize,
    round_trips: u64,
    spin_iters: u64,
    sleep_ms: u64,
    delay_ms: u64,
    exit: u8,
    cpu: usize,
    period_ms: u64,
    for_ms: u64,
}

fn parse_args() -> Result<Plan, String> {
    let mut plan = Plan::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: `{v}` is not a non-negative integer"))
        };
        match flag.as_str() {
            "--pages" => plan.pages = num(&value)? as usize,
            "--round-trips" => plan.round_trips = num(&value)?,
            "--spin-iters" => plan.spin_iters = num(&value)?,
            "--sleep-ms" => plan.sleep_ms = num(&value)?,
            "--delay-ms" => plan.delay_ms = num(&value)?,
            "--cpu" => plan.cpu = num(&value)? as usize,
            "--period-ms" => plan.period_ms = num(&value)?,
            "--for-ms" => plan.for_ms = num(&value)?,
            "--exit" => {
                plan.exit = u8::try_from(num(&value)?)
                    .map_err(|_| format!("--exit: `{value}` is not in 0..=255"))?
            }
            _ => return Err(format!("unknown option `{flag}`")),
        }
    }
    Ok(plan)
}

const USAGE: &str = "usage: hwqos-testload [--pages K] [--round-trips N] [--spin-iters M] \
[--sleep-ms S] [--delay-ms D] [--cpu C] [--period-ms P --for-ms D] [--exit CODE]";

fn main() -> ExitCode {
    let plan = match parse_args() {
        Ok(p) => p,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("hwqos-testload: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = run(&plan) {
        eprintln!("hwqos-testload: {e}");
        return ExitCode::from(1);
    }
    ExitCode::from(plan.exit)
}

fn run(plan: &Plan) -> Result<(), String> {
    if plan.delay_ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(plan.delay_ms));
    }
    if plan.period_ms > 0 {
        paced(plan)?;
    } else if plan.pages > 0 {
        hwqos_core::mem::touch_fresh_pages(plan.pages).map_err(|e| e.to_string())?;
    }
    if plan.round_trips > 0 {
        ping_pong(plan.round_trips, plan.cpu)?;
    }
    if plan.spin_iters > 0 && plan.period_ms == 0 {
        black_box(spin(plan.spin_iters));
    }
    if plan.sleep_ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(plan.sleep_ms));
    }
    Ok(())
}

/// Units of work (pages, then spin) every `period_ms` on absolute deadlines
/// for `for_ms`.
fn paced(plan: &Plan) -> Result<(), String> {
    use std::time::{Duration, Instant};
    let start = Instant::now();
    let period = Duration::from_millis(plan.period_ms);
    let units = plan.for_ms / plan.period_ms;
    for k in 0..units {
        let deadline = start + period * k as u32;
        if let Some(wait) = deadline.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if plan.pages > 0 {
            hwqos_core::mem::touch_fresh_pages(plan.pages).map_err(|e| e.to_string())?;
        }
        if plan.spin_iters > 0 {
            black_box(spin(plan.spin_iters));
        }
    }
    Ok(())
}

fn pin_to_cpu(cpu: usize) -> Result<(), String> {
    hwqos_core::affinity::pin_current_thread(cpu as u32)
        .map_err(|e| format!("pinning to cpu {cpu}: {e}"))
}

fn pipe() -> Result<(std::fs::File, std::fs::File), String> {
    let (rx, tx) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    Ok((std::fs::File::from(rx), std::fs::File::from(tx)))
}

/// `n` round trips of one byte between this thread and a helper thread on the
/// same CPU: every hand-over blocks one side and wakes the other.
fn ping_pong(n: u64, cpu: usize) -> Result<(), String> {
    let (mut ping_rx, mut ping_tx) = pipe()?;
    let (mut pong_rx, mut pong_tx) = pipe()?;
    pin_to_cpu(cpu)?;
    let echo = std::thread::spawn(move || -> Result<(), String> {
        pin_to_cpu(cpu)?;
        let mut b = [0u8; 1];
        for _ in 0..n {
            ping_rx
                .read_exact(&mut b)
                .map_err(|e| format!("echo read: {e}"))?;
            pong_tx
                .write_all(&b)
                .map_err(|e| format!("echo write: {e}"))?;
        }
        Ok(())
    });
    let mut b = [7u8; 1];
    for _ in 0..n {
        ping_tx
            .write_all(&b)
            .map_err(|e| format!("ping write: {e}"))?;
        pong_rx
            .read_exact(&mut b)
            .map_err(|e| format!("pong read: {e}"))?;
    }
    echo.join()
        .map_err(|_| "echo thread panicked".to_string())?
}

/// A dependent recurrence the compiler cannot shorten: CPU time grows linearly
/// with `iters` and nothing else happens (no memory traffic, no system calls).
fn spin(iters: u64) -> u64 {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..iters {
        x = black_box(x.rotate_left(7) ^ i).wrapping_mul(0x2545_F491_4F6C_DD1D);
    }
    x
}
