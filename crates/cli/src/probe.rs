//! `hwqos probe`: the node's hardware model — topology, caches, OS inventory
//! and measured probes — as tables, a versioned JSON file (`--json -o`), an
//! SVG latency curve (`--plot`), or the differences between two model files
//! (`--diff A B`). The work is done by `hwqos_topology`; this is the thin
//! command-line layer.

use crate::error::usage;
use crate::plot::draw_err;
use anyhow::{anyhow, Context, Result};
use hwqos_core::stats::Summary;
use hwqos_topology::model::{self, describe_caches};
use hwqos_topology::probe::{self, Measured, ProbeKind, ProbeOptions};
use hwqos_topology::sysfs::{format_cpu_list, format_size};
use hwqos_topology::{HardwareModel, OsInventory, Topology};
use plotters::prelude::*;
use std::io::Write;
use std::path::Path;

use crate::args::ProbeArgs;

/// Runs `hwqos probe`; returns the exit code (for `--diff`: 0 same, 1 different).
pub fn run(args: &ProbeArgs, out: &mut dyn Write) -> Result<u8> {
    if let Some(files) = &args.diff {
        return run_diff(&files[0], &files[1], args.tolerance, out);
    }
    let kinds = parse_kinds(&args.probes)?;
    if let Some(n) = args.repeats {
        if n < 2 {
            return Err(usage(
                "--repeats must be at least 2 (a spread needs two batches)",
            ));
        }
    }
    if args.plot.is_some() && !kinds.contains(&ProbeKind::Memlat) {
        return Err(usage("--plot draws the memlat curve: add the memlat probe"));
    }
    let topology = Topology::this_node().context("reading the node's topology")?;
    if let Some(cpu) = args.cpu {
        if !topology.online_cpus().contains(&cpu) {
            return Err(usage(format!(
                "--cpu {cpu}: not an online CPU (online: {})",
                format_cpu_list(&topology.online_cpus())
            )));
        }
    }
    let os = OsInventory::this_node();
    let measured = if args.static_only {
        None
    } else {
        let options = ProbeOptions {
            cpu: args.cpu,
            quick: args.quick,
            repeats: args.repeats,
            seed: args.seed,
            timer_requests: args.timer_requests,
            timer_max_ms: args.timer_max_ms,
            ..ProbeOptions::default()
        };
        let bar = crate::progress::steps(kinds.len() as u64, "hwqos probe");
        let mut started = 0;
        let measured = probe::run(&kinds, &options, |k| {
            if bar.is_hidden() {
                eprintln!("hwqos probe: {k} …");
            }
            bar.set_position(started);
            bar.set_message(k.to_string());
            started += 1;
        });
        bar.finish_and_clear();
        Some(measured)
    };
    let model = HardwareModel::new(topology, os, measured);
    if let Some(path) = &args.output {
        model.save(path)?;
        eprintln!("hwqos probe: wrote {}", path.display());
    }
    if let Some(path) = &args.plot {
        let m = model
            .measured
            .as_ref()
            .and_then(|m| m.memlat.as_ref())
            .ok_or_else(|| anyhow!("the memlat probe failed: nothing to plot"))?;
        let title = format!(
            "Memory latency — {} ({})",
            model.host.as_deref().unwrap_or("this node"),
            model.cpu_model.as_deref().unwrap_or("unknown CPU")
        );
        let svg = render_latency_svg(m, &title)?;
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("hwqos probe: wrote {}", path.display());
    }
    if args.json && args.output.is_none() {
        out.write_all(model.to_json().as_bytes())?;
    } else if !args.json {
        print_model(&model, out)?;
    }
    let failed = model.measured.as_ref().map_or(0, |m| m.errors.len());
    Ok(u8::from(failed > 0))
}

fn parse_kinds(names: &[String]) -> Result<Vec<ProbeKind>> {
    if names.is_empty() {
        return Ok(ProbeKind::ALL.to_vec());
    }
    names
        .iter()
        .map(|n| n.parse::<ProbeKind>().map_err(usage))
        .collect()
}

fn run_diff(a: &Path, b: &Path, tolerance: f64, out: &mut dyn Write) -> Result<u8> {
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        return Err(usage(format!(
            "--tolerance {tolerance}: must be a non-negative fraction"
        )));
    }
    let ma = HardwareModel::load(a).map_err(|e| usage(e.to_string()))?;
    let mb = HardwareModel::load(b).map_err(|e| usage(e.to_string()))?;
    let diffs = model::diff(&ma, &mb, tolerance);
    if diffs.is_empty() {
        writeln!(
            out,
            "no differences (hardware, OS inventory; measured figures within {:.0} %)",
            tolerance * 100.0
        )?;
        return Ok(0);
    }
    writeln!(
        out,
        "{} difference(s): A = {}, B = {}",
        diffs.len(),
        a.display(),
        b.display()
    )?;
    let w = diffs.iter().map(|d| d.path.len()).max().unwrap_or(0);
    for d in &diffs {
        writeln!(out, "  {:<w$}  A: {}  B: {}", d.path, d.a, d.b)?;
    }
    Ok(1)
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn summary_row(
    out: &mut dyn Write,
    name: &str,
    s: &Summary,
    fmt: &dyn Fn(f64) -> String,
) -> Result<()> {
    let ci = s
        .ci95
        .map(|c| format!("± {}", fmt(c.half_width)))
        .unwrap_or_default();
    writeln!(
        out,
        "  {name:<30} {:>12}  {:>12} {:<14} min {:>10}  n={}",
        fmt(s.median),
        fmt(s.mean),
        ci,
        fmt(s.min),
        s.n
    )?;
    Ok(())
}

/// The human tables.
pub fn print_model(model: &HardwareModel, out: &mut dyn Write) -> Result<()> {
    let t = &model.topology;
    writeln!(
        out,
        "hwqos hardware model — {} ({}), {}",
        model.host.as_deref().unwrap_or("?"),
        model.cpu_model.as_deref().unwrap_or("unknown CPU"),
        model.created
    )?;
    writeln!(out, "\nTopology")?;
    for line in t.describe().lines() {
        writeln!(out, "  {line}")?;
    }
    writeln!(out, "  cache domains (CPUs sharing one cache):")?;
    for (name, size, groups) in describe_caches(t) {
        writeln!(out, "    {name:<4} {size:>9}: {groups}")?;
    }
    print_os(&model.os, out)?;
    if let Some(m) = &model.measured {
        print_measured(m, out)?;
    }
    Ok(())
}

fn print_os(os: &OsInventory, out: &mut dyn Write) -> Result<()> {
    let o = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
    writeln!(out, "\nOS")?;
    writeln!(
        out,
        "  kernel {}, clocksource {}",
        o(&os.kernel_release),
        o(&os.clocksource)
    )?;
    writeln!(
        out,
        "  HZ {} ({}), THP {} (defrag {})",
        os.hz.map(|h| h.to_string()).unwrap_or_else(|| "?".into()),
        match os.hz_source {
            Some(hwqos_topology::os::HzSource::KernelConfig) => "kernel config",
            Some(hwqos_topology::os::HzSource::MeasuredJiffies) => "measured from jiffies",
            None => "unknown",
        },
        o(&os.thp_enabled),
        o(&os.thp_defrag)
    )?;
    let govs: Vec<String> = os
        .cpufreq_governors
        .iter()
        .map(|(g, c)| format!("{g} on {c}"))
        .collect();
    writeln!(
        out,
        "  cpufreq governors: {}; isolated CPUs: {}",
        if govs.is_empty() {
            "none (no cpufreq driver)".into()
        } else {
            govs.join(", ")
        },
        os.isolated_cpus
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or("none")
    )?;
    let keys = [
        "vm.swappiness",
        "vm.dirty_ratio",
        "vm.dirty_background_ratio",
        "vm.min_free_kbytes",
        "kernel.numa_balancing",
        "kernel.sched_autogroup_enabled",
        "debug.sched.base_slice_ns",
        "debug.sched.migration_cost_ns",
    ];
    let shown: Vec<String> = keys
        .iter()
        .filter_map(|k| os.sysctls.get(*k).map(|v| format!("{k}={v}")))
        .collect();
    writeln!(out, "  {}", shown.join("  "))?;
    writeln!(
        out,
        "  ({} sysctls recorded in the JSON model)",
        os.sysctls.len()
    )?;
    Ok(())
}

fn print_measured(m: &Measured, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "\nMeasured on CPU {} in {:.1} s{}{}{} ({}, mean ± 95 % CI, min, batches)",
        m.cpu,
        m.duration_s,
        if m.quick { ", quick" } else { "" },
        match (m.loadavg_1m, m.loadavg_1m_end) {
            (Some(a), Some(b)) => format!(", load average {a:.2} → {b:.2}"),
            _ => String::new(),
        },
        match (m.busy_fraction, m.steal_fraction) {
            (Some(b), Some(s)) => format!(
                ", CPU {} busy {:.0} %, stolen {:.1} %",
                m.cpu,
                b * 100.0,
                s * 100.0
            ),
            _ => String::new(),
        },
        if m.rounds > 1 {
            format!(
                "least disturbed of {} interleaved repetitions' medians",
                m.rounds
            )
        } else {
            "median".to_string()
        },
    )?;
    let ns = |v: f64| fmt_ns(v);
    if let Some(c) = &m.clock {
        summary_row(out, "clock_gettime(MONOTONIC)", &c.clock_gettime_ns, &ns)?;
        if let Some(r) = &c.rdtsc_ns {
            summary_row(out, "rdtsc", r, &ns)?;
        }
        if let Some(h) = c.tsc_hz {
            writeln!(
                out,
                "  {:<30} {:>12}  (constant+nonstop TSC: {})",
                "TSC rate",
                format!("{:.1} MHz", h / 1e6),
                if c.tsc_invariant { "yes" } else { "no" }
            )?;
        }
    }
    if let Some(s) = &m.syscall {
        summary_row(out, "syscall(SYS_getpid)", &s.getpid_ns, &ns)?;
        summary_row(out, "thread spawn+join", &s.thread_spawn_ns, &ns)?;
        summary_row(out, "fork+exit+wait", &s.process_spawn_ns, &ns)?;
    }
    if let Some(c) = &m.ctxswitch {
        summary_row(out, "pipe write+read (no switch)", &c.pipe_pair_ns, &ns)?;
        for (name, p) in [("threads", &c.threads), ("processes", &c.processes)] {
            summary_row(
                out,
                &format!("ping-pong round trip, {name}"),
                &p.round_trip_ns,
                &ns,
            )?;
            summary_row(out, &format!("context switch, {name}"), &p.switch_ns, &ns)?;
            match (p.switches_per_round(), &p.counter_error) {
                (Some(r), _) => writeln!(
                    out,
                    "  {:<30} {r:.3} per round trip over {} rounds (sw.context_switches, perf software counter; 2 expected)",
                    format!("counted switches, {name}"),
                    p.rounds
                )?,
                (None, Some(e)) => writeln!(out, "  counted switches, {name}: unavailable ({e})")?,
                _ => {}
            }
        }
    }
    if let Some(b) = &m.bandwidth {
        let gbs = |v: f64| format!("{v:.2} GB/s");
        writeln!(
            out,
            "  bandwidth over {} (single thread):",
            format_size(b.buffer_bytes)
        )?;
        summary_row(out, "  read", &b.read_gbs, &gbs)?;
        summary_row(out, "  write", &b.write_gbs, &gbs)?;
        summary_row(out, "  copy", &b.copy_gbs, &gbs)?;
    }
    if let Some(p) = &m.pagefault {
        summary_row(out, "minor page fault", &p.fault_ns, &ns)?;
        writeln!(
            out,
            "  {:<30} {:.3} per touched page (getrusage ru_minflt; 1 expected)",
            "counted minor faults", p.faults_per_page
        )?;
    }
    if let Some(n) = &m.net {
        summary_row(out, "TCP 127.0.0.1 round trip", &n.rtt_ns, &ns)?;
        summary_row(out, "TCP 127.0.0.1 connect", &n.connect_ns, &ns)?;
    }
    if let Some(l) = &m.memlat {
        writeln!(
            out,
            "\nMemory latency (pointer chase, {} steps/octave, {} points, huge pages advised: {}; cycles are TSC cycles)",
            l.steps_per_octave,
            l.points.len(),
            if l.huge_pages_advised { "yes" } else { "no" }
        )?;
        writeln!(
            out,
            "  {:<8} {:>10} {:>10} {:>12} {:>10}",
            "level", "inferred", "sysfs", "latency", "cycles"
        )?;
        for lvl in &l.levels {
            writeln!(
                out,
                "  {:<8} {:>10} {:>10} {:>12} {:>10}",
                lvl.name,
                format_size(lvl.effective_size_bytes),
                lvl.sysfs_size_bytes
                    .map(format_size)
                    .unwrap_or_else(|| "-".into()),
                fmt_ns(lvl.latency_ns),
                lvl.latency_cycles
                    .map(|c| format!("{c:.1}"))
                    .unwrap_or_else(|| "-".into())
            )?;
        }
        writeln!(
            out,
            "  {:<8} {:>10} {:>10} {:>12} {:>10}",
            "memory",
            "",
            "",
            fmt_ns(l.memory_latency_ns),
            l.memory_latency_cycles
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "-".into())
        )?;
    }
    if let Some(t) = &m.timer {
        writeln!(
            out,
            "\nTimer accuracy ({} requests per strategy, uniform 0–{} ms, seed {}, timer slack {})",
            t.requests_per_strategy,
            t.max_ms,
            t.seed,
            t.timer_slack_ns
                .map(|s| fmt_ns(s as f64))
                .unwrap_or_else(|| "?".into())
        )?;
        writeln!(
            out,
            "  {:<18} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>7}",
            "strategy", "median AE", "AESM", "sqrt(AESV)", "RESM", "RESV", "max error", "CPU"
        )?;
        for s in &t.strategies {
            writeln!(
                out,
                "  {:<18} {:>12} {:>12} {:>12} {:>12.3e} {:>12.3e} {:>12} {:>6.1}%",
                s.strategy,
                fmt_ns(s.ae_median_ns),
                fmt_ns(s.aesm_ns),
                fmt_ns(s.aesv_ns2.sqrt()),
                s.resm,
                s.resv,
                fmt_ns(s.max_error_ns),
                s.cpu_fraction * 100.0
            )?;
        }
    }
    for (kind, e) in &m.errors {
        writeln!(out, "  probe {kind} FAILED: {e}")?;
    }
    Ok(())
}

/// The latency curve (log-log) with the inferred boundaries (solid) and the
/// sysfs sizes (dashed).
pub fn render_latency_svg(m: &probe::memlat::MemLatResult, title: &str) -> Result<String> {
    if m.points.len() < 2 {
        return Err(anyhow!("the latency curve has fewer than two points"));
    }
    let x0 = m.points[0].size_bytes as f64 / 1024.0;
    let x1 = m.points[m.points.len() - 1].size_bytes as f64 / 1024.0;
    let ymin = m
        .points
        .iter()
        .map(|p| p.min_ns)
        .fold(f64::INFINITY, f64::min)
        .max(0.01);
    let ymax = m
        .points
        .iter()
        .map(|p| p.median_ns)
        .fold(0.0, f64::max)
        .max(ymin * 2.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((x0..x1).log_scale(), (ymin * 0.8..ymax * 1.25).log_scale())
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc("working set (KiB)")
            .y_desc("latency per load (ns)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.1}"))
            .draw()
            .map_err(draw_err)?;
        let kib = |b: u64| b as f64 / 1024.0;
        chart
            .draw_series(LineSeries::new(
                m.points.iter().map(|p| (kib(p.size_bytes), p.median_ns)),
                BLUE.stroke_width(2),
            ))
            .map_err(draw_err)?
            .label("median of sweeps (inferred from)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE.stroke_width(2)));
        chart
            .draw_series(LineSeries::new(
                m.points.iter().map(|p| (kib(p.size_bytes), p.min_ns)),
                BLUE.mix(0.35),
            ))
            .map_err(draw_err)?
            .label("fastest sweep")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE.mix(0.35)));
        for (i, lvl) in m.levels.iter().enumerate() {
            let x = kib(lvl.effective_size_bytes);
            let s = chart
                .draw_series(std::iter::once(PathElement::new(
                    [(x, ymin * 0.8), (x, ymax * 1.25)],
                    RED.stroke_width(2),
                )))
                .map_err(draw_err)?;
            if i == 0 {
                s.label("inferred boundary")
                    .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED.stroke_width(2)));
            }
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{} {}", lvl.name, format_size(lvl.effective_size_bytes)),
                    (x * 1.03, ymax),
                    ("sans-serif", 13).into_font().color(&RED),
                )))
                .map_err(draw_err)?;
            if let Some(sys) = lvl.sysfs_size_bytes {
                let xs = kib(sys);
                let dashes = (0..40).map(|k| {
                    let f = |j: f64| (ymin * 0.8) * ((ymax * 1.25) / (ymin * 0.8)).powf(j / 40.0);
                    PathElement::new(
                        [(xs, f(k as f64)), (xs, f(k as f64 + 0.5))],
                        GREEN.stroke_width(2),
                    )
                });
                let s = chart.draw_series(dashes).map_err(draw_err)?;
                if i == 0 {
                    s.label("sysfs size").legend(|(x, y)| {
                        PathElement::new([(x, y), (x + 16, y)], GREEN.stroke_width(2))
                    });
                }
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}
