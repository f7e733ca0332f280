//! `hwqos top`: a live per-process and per-CPU view built on the monitor engine.
//!
//! Every process on the node (or only the `-p` pids) is a sampler target
//! (followed as processes come and go) with `/proc` metrics (CPU use, faults,
//! threads, RSS) and kernel counters (context switches, page faults;
//! instructions and cycles for IPC/CPI where the node has a PMU); every CPU
//! gets utilization, interrupts and soft interrupts from `/proc/stat` and the
//! same counters CPU-wide.
//!
//! On a terminal the view is interactive (`tui`, ratatui on crossterm; the
//! model in [`view`]): `q` quits, Tab switches between processes and CPUs,
//! letters, `<` and `>` sort, `r` reverses, columns are dropped to fit the
//! width. Otherwise (or with `--plain`) each update is printed as a plain
//! block, no escape codes ([`render_frame`]).

mod tui;
pub mod view;

use crate::args::TopArgs;
use crate::error::usage;
use crate::record::{node_sampler, parse_event_sets};
use anyhow::{Context, Result};
use hwqos_core::metric::names;
use hwqos_core::ticker::Ticker;
use hwqos_core::{Frame, Scope, Timestamp};
use hwqos_pmu::sampler::SamplerConfig;
use hwqos_pmu::target::TargetSelector;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Counters `top` uses unless `-e` says otherwise (hardware ones are dropped
/// where there is no PMU).
pub fn default_event_sets() -> Vec<Vec<String>> {
    vec![vec![
        names::SW_CONTEXT_SWITCHES.into(),
        names::SW_PAGE_FAULTS.into(),
        names::HW_INSTRUCTIONS.into(),
        names::HW_CYCLES.into(),
    ]]
}

fn per_sec(frame: &Frame, scope: &Scope, metric: &str) -> Option<f64> {
    let secs = frame.interval_ns as f64 / 1e9;
    (secs > 0.0)
        .then(|| frame.value(scope, metric).map(|v| v / secs))
        .flatten()
}

fn cell(v: Option<f64>, fmt: impl Fn(f64) -> String) -> String {
    v.filter(|x| x.is_finite())
        .map_or_else(|| "-".to_string(), fmt)
}

/// One update as plain text: a system line, the CPU table and the `top`
/// processes with the highest CPU use.
pub fn render_frame(frame: &Frame, top: usize) -> String {
    let mut out = String::new();
    let sys = Scope::System;
    let _ = writeln!(
        out,
        "hwqos top — {}  interval {:.2} s  cpu {}  runnable {}  load1 {}  ctxsw/s {}  irq/s {}  mem avail {}",
        hwqos_core::time::format_rfc3339(frame.time.wall_ns),
        frame.interval_ns as f64 / 1e9,
        cell(frame.value(&sys, names::OS_CPU_UTIL), |v| format!("{:.1}%", v * 100.0)),
        cell(frame.value(&sys, names::OS_RUNQUEUE), |v| format!("{v:.0}")),
        cell(frame.value(&sys, names::OS_LOAD1), |v| format!("{v:.2}")),
        cell(per_sec(frame, &sys, names::OS_CTXT), |v| format!("{v:.0}")),
        cell(per_sec(frame, &sys, names::OS_INTERRUPTS), |v| format!("{v:.0}")),
        cell(frame.value(&sys, names::OS_MEM_AVAILABLE), |v| format!("{:.0} MiB", v / 1048576.0)),
    );
    let _ = writeln!(
        out,
        "\n{:>5} {:>6} {:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>6}",
        "CPU", "util%", "user%", "sys%", "irq%", "irq/s", "softirq/s", "ctxsw/s", "IPC"
    );
    let mut cpus: Vec<u32> = frame
        .scopes()
        .into_iter()
        .filter_map(|s| match s {
            Scope::Cpu { cpu } => Some(*cpu),
            _ => None,
        })
        .collect();
    cpus.sort_unstable();
    for cpu in cpus {
        let s = Scope::Cpu { cpu };
        let pct = |m: &str| cell(frame.value(&s, m), |v| format!("{:.1}", v * 100.0));
        let _ = writeln!(
            out,
            "{cpu:>5} {:>6} {:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>6}",
            pct(names::OS_CPU_UTIL),
            pct(names::OS_CPU_USER),
            pct(names::OS_CPU_SYSTEM),
            pct(names::OS_CPU_IRQ),
            cell(per_sec(frame, &s, names::OS_INTERRUPTS), |v| format!(
                "{v:.0}"
            )),
            cell(per_sec(frame, &s, names::OS_SOFTIRQS), |v| format!(
                "{v:.0}"
            )),
            cell(per_sec(frame, &s, names::SW_CONTEXT_SWITCHES), |v| format!(
                "{v:.0}"
            )),
            cell(frame.value(&s, names::DERIVED_IPC), |v| format!("{v:.2}")),
        );
    }
    let mut procs: Vec<(u32, f64)> = frame
        .scopes()
        .into_iter()
        .filter_map(|s| match s {
            Scope::Process { pid } => {
                Some((*pid, frame.value(s, names::OS_PROC_CPU).unwrap_or(0.0)))
            }
            _ => None,
        })
        .collect();
    procs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let _ = writeln!(
        out,
        "\n{:>7} {:<16} {:>6} {:>4} {:>9} {:>9} {:>9} {:>6}   ({} processes)",
        "PID",
        "COMMAND",
        "CPU%",
        "THR",
        "RSS MiB",
        "faults/s",
        "ctxsw/s",
        "IPC",
        procs.len()
    );
    for (pid, _) in procs.into_iter().take(top) {
        let s = Scope::Process { pid };
        let _ = writeln!(
            out,
            "{pid:>7} {:<16} {:>6} {:>4} {:>9} {:>9} {:>9} {:>6}",
            frame
                .label(&s)
                .unwrap_or("?")
                .chars()
                .take(16)
                .collect::<String>(),
            cell(frame.value(&s, names::OS_PROC_CPU), |v| format!(
                "{:.1}",
                v * 100.0
            )),
            cell(frame.value(&s, names::OS_PROC_THREADS), |v| format!(
                "{v:.0}"
            )),
            cell(frame.value(&s, names::OS_PROC_RSS), |v| format!(
                "{:.1}",
                v / 1048576.0
            )),
            cell(
                per_sec(frame, &s, names::SW_PAGE_FAULTS).or_else(|| per_sec(
                    frame,
                    &s,
                    names::OS_PROC_MINOR_FAULTS
                )),
                |v| format!("{v:.0}")
            ),
            cell(per_sec(frame, &s, names::SW_CONTEXT_SWITCHES), |v| format!(
                "{v:.0}"
            )),
            cell(frame.value(&s, names::DERIVED_IPC), |v| format!("{v:.2}")),
        );
    }
    out
}

/// The machine's host name, for the header.
fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "?".to_string())
}

/// What the interactive header says: the counter kind from the events being
/// counted, and why IPC/CPI are not available where they are not.
fn header(
    sampler: &hwqos_pmu::sampler::Sampler,
    catalog: &hwqos_pmu::catalog::Catalog,
    args: &TopArgs,
) -> tui::Header {
    let metric = |name: &str| {
        catalog
            .resolve(name)
            .map_or_else(|_| name.to_string(), |e| e.metric.as_str().to_string())
    };
    let counted: Vec<String> = sampler
        .event_sets()
        .iter()
        .flatten()
        .map(|n| metric(n))
        .collect();
    let unavailable: Vec<(String, String)> = sampler
        .unavailable()
        .iter()
        .map(|u| (metric(&u.name), u.reason.clone()))
        .collect();
    let has = |family: &str| counted.iter().any(|m| m.split('.').next() == Some(family));
    let counters = match (has("hw"), has("sw")) {
        (true, true) => view::CounterKind::Mixed,
        (true, false) => view::CounterKind::Hardware,
        (false, true) => view::CounterKind::Software,
        (false, false) => view::CounterKind::None,
    };
    let has_pmu = catalog.core_pmus().next().is_some();
    tui::Header {
        node: node_name(),
        cpus: hwqos_pmu::target::online_cpus(std::path::Path::new("/sys")).len(),
        period: Duration::from_secs_f64(args.delay),
        counters,
        ipc_note: view::ipc_note(&counted, &unavailable, has_pmu),
        pids: args.pids.clone(),
    }
}

/// Runs `hwqos top`.
pub fn run(args: &TopArgs, out: &mut dyn Write) -> Result<()> {
    if !(args.delay.is_finite() && args.delay > 0.0) {
        return Err(usage(format!(
            "-d {}: the delay must be a positive number of seconds",
            args.delay
        )));
    }
    let mut ticker =
        Ticker::new(Duration::from_secs_f64(args.delay)).map_err(|e| usage(format!("-d: {e}")))?;
    let event_sets = match &args.events {
        Some(spec) => parse_event_sets(spec)?,
        None => default_event_sets(),
    };
    let targets = if args.pids.is_empty() {
        vec![TargetSelector::Regex(String::new())]
    } else {
        args.pids.iter().map(|&p| TargetSelector::Pid(p)).collect()
    };
    let cfg = SamplerConfig {
        targets,
        per_cpu: true,
        event_sets,
        procfs: true,
        rescan_every: 1,
        ..SamplerConfig::default()
    };
    let session = node_sampler(cfg)?;
    let mut sampler = session.sampler;
    crate::child::catch_interrupts()?;
    if !args.plain && std::io::stdout().is_terminal() {
        let header = header(&sampler, &session.catalog, args);
        return tui::run(&mut sampler, &header, args.iterations, out);
    }
    sampler.sample(Timestamp::now());
    let mut shown = 0u64;
    while args.iterations.is_none_or(|n| shown < n) && !crate::child::interrupted() {
        ticker.wait();
        let frame = sampler.sample(Timestamp::now());
        let text = render_frame(&frame, args.top);
        out.write_all(format!("{text}\n").as_bytes())
            .and_then(|()| out.flush())
            .context("writing to stdout")?;
        shown += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::{MetricName, Sample, ScopeLabel};

    #[test]
    fn plain_table_known_answers() {
        let time = Timestamp {
            mono_ns: 1,
            wall_ns: 0,
        };
        let g = |scope: Scope, m: &'static str, v: f64| {
            Sample::gauge(time, scope, MetricName::from_static(m), v)
        };
        let p1 = Scope::Process { pid: 100 };
        let p2 = Scope::Process { pid: 200 };
        let frame = Frame {
            seq: 3,
            time,
            interval_ns: 500_000_000,
            samples: vec![
                g(Scope::System, "os.runqueue", 3.0),
                g(Scope::Cpu { cpu: 1 }, "os.cpu.util", 0.25),
                g(Scope::Cpu { cpu: 1 }, "os.interrupts", 50.0),
                g(p1.clone(), "os.proc.cpu", 0.10),
                g(p2.clone(), "os.proc.cpu", 0.90),
                g(p2.clone(), "sw.context_switches", 1000.0),
                g(p2.clone(), "derived.ipc", 1.5),
            ],
            labels: vec![
                ScopeLabel {
                    scope: p1,
                    name: "idle".into(),
                },
                ScopeLabel {
                    scope: p2,
                    name: "busy".into(),
                },
            ],
        };
        let text = render_frame(&frame, 1);
        assert!(!text.contains('\x1b'));
        assert!(text.contains("runnable 3"), "{text}");
        // 50 interrupts in 0.5 s = 100/s on CPU 1 at 25 % utilization.
        let cpu_line = text
            .lines()
            .find(|l| l.trim_start().starts_with("1 "))
            .unwrap();
        assert!(
            cpu_line.contains("25.0") && cpu_line.contains("100"),
            "{cpu_line}"
        );
        // Only the busiest process is shown with -top 1: 1000 switches in 0.5 s.
        let busy = text.lines().find(|l| l.contains("busy")).unwrap();
        assert!(
            busy.contains("90.0") && busy.contains("2000") && busy.contains("1.50"),
            "{busy}"
        );
        assert!(!text.contains("idle"));
        assert!(text.contains("(2 processes)"));
    }
}
