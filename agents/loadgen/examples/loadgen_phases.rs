//! The shape of thesis experiment 6.4.1 with the metrics this node offers: a
//! test application alone on CPU 1, then with the load generator converging
//! to a production node's targets on that CPU. Writes a CSV of every sample
//! and an SVG of the measured metrics against their targets and of the
//! application's request latency.
//!
//! The application serves 200 requests/s, each 1 ms of computation, on CPU 1;
//! its latency is completion time minus scheduled time. Measurement covers this
//! process (application + generators, all pinned to CPU 1), so other tenants
//! of a shared VM do not count (`MeasureOn::Processes`).
//!
//! Usage: cargo run --release -p hwqos-loadgen --example loadgen_phases -- OUT_DIR [ALONE_S] [LOADED_S]

use hwqos_loadsynth::actuate::{Actuators, CacheLevels};
use hwqos_loadsynth::config::LoadConfig;
use hwqos_loadsynth::control::{ClosedLoop, Controller, Gains};
use hwqos_loadsynth::knob::StopFlag;
use hwqos_loadsynth::source::{LocalSource, MeasureOn, MetricSource};
use hwqos_loadsynth::LoadMetric;
use plotters::prelude::*;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CPU: u32 = 1;
const TARGETS: [(LoadMetric, f64); 3] = [
    (LoadMetric::CpuUtil, 0.60),
    (LoadMetric::PageFaultRate, 20_000.0),
    (LoadMetric::ContextSwitchRate, 5_000.0),
];

/// The test application: requests every 5 ms, 1 ms of work each; latencies in µs.
fn application(stop: StopFlag, latencies: Arc<Mutex<Vec<f64>>>) {
    hwqos_core::affinity::pin_current_thread(CPU).unwrap();
    let period = 5_000_000u64;
    let mut next = hwqos_core::time::monotonic_ns() + period;
    while !stop.is_stopped() {
        while hwqos_core::time::monotonic_ns() < next {
            std::thread::sleep(Duration::from_micros(200));
        }
        let start = hwqos_core::time::thread_cpu_ns();
        let mut x = 1u64;
        while hwqos_core::time::thread_cpu_ns() - start < 1_000_000 {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        let done = hwqos_core::time::monotonic_ns();
        latencies.lock().unwrap().push((done - next) as f64 / 1e3);
        next += period;
    }
}

struct Row {
    t: f64,
    phase: &'static str,
    values: Vec<Option<f64>>,
    p50_us: f64,
    p99_us: f64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = std::path::PathBuf::from(args.get(1).map_or("loadgen_phases", |s| s.as_str()));
    let alone_s: f64 = args.get(2).map_or(10.0, |s| s.parse().unwrap());
    let loaded_s: f64 = args.get(3).map_or(30.0, |s| s.parse().unwrap());
    std::fs::create_dir_all(&out).unwrap();
    let wanted: Vec<(LoadMetric, u32)> = TARGETS.iter().map(|(m, _)| (*m, CPU)).collect();
    let period = Duration::from_millis(250);

    let stop = StopFlag::new();
    let lat = Arc::new(Mutex::new(Vec::new()));
    let app = {
        let (s, l) = (stop.clone(), lat.clone());
        std::thread::spawn(move || application(s, l))
    };
    let root = nix::unistd::geteuid().is_root();
    let cfg = LoadConfig {
        nice: root.then_some(-20),
        ..LoadConfig::default()
    };
    let topo = hwqos_topology::Topology::this_node().unwrap();
    let mut rows: Vec<Row> = Vec::new();
    let t0 = hwqos_core::time::monotonic_ns();
    let mut record = |m: &hwqos_loadsynth::source::Measurement, phase: &'static str| {
        let mut l = std::mem::take(&mut *lat.lock().unwrap());
        l.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            if l.is_empty() {
                f64::NAN
            } else {
                l[((l.len() - 1) as f64 * p) as usize]
            }
        };
        rows.push(Row {
            t: (m.t_ns - t0) as f64 / 1e9,
            phase,
            values: wanted.iter().map(|k| m.values.get(k).copied()).collect(),
            p50_us: pct(0.5),
            p99_us: pct(0.99),
        });
    };

    // Phase 1: the application alone.
    {
        let mut src = LocalSource::measuring(
            &wanted,
            period,
            MeasureOn::Processes(vec![std::process::id()]),
        )
        .unwrap();
        for _ in 0..(alone_s / 0.25) as usize {
            let m = src.next().unwrap();
            record(&m, "alone");
        }
    }
    // Phase 2: the generators converge to the targets, topping up the application.
    let pairs: Vec<((LoadMetric, u32), f64)> =
        TARGETS.iter().map(|(m, t)| ((*m, CPU), *t)).collect();
    let mut act = Actuators::start(&pairs, &CacheLevels::of(&topo, CPU), &cfg).unwrap();
    let mut src = LocalSource::measuring(
        &wanted,
        period,
        MeasureOn::Processes(vec![std::process::id()]),
    )
    .unwrap();
    let mut lp = ClosedLoop::new(8);
    for (m, t) in TARGETS {
        let c = Controller::new(t, t, act.range(m, CPU).unwrap(), Gains::default_for(m));
        lp.add(m, CPU, c, m.default_tolerance());
    }
    let mut converged_at = None;
    for _ in 0..(loaded_s / 0.25) as usize {
        let m = src.next().unwrap();
        if lp.step(&m, &mut act) && converged_at.is_none() {
            converged_at = Some((m.t_ns - t0) as f64 / 1e9);
        }
        record(&m, "loaded");
    }
    act.stop().unwrap();
    stop.stop();
    app.join().unwrap();

    let mut csv = std::fs::File::create(out.join("loadgen_phases.csv")).unwrap();
    writeln!(
        csv,
        "t_s,phase,cpu_util,page_fault_rate,context_switch_rate,app_p50_us,app_p99_us"
    )
    .unwrap();
    for r in &rows {
        let v: Vec<String> = r
            .values
            .iter()
            .map(|x| x.map_or(String::new(), |v| format!("{v:.4}")))
            .collect();
        writeln!(
            csv,
            "{:.3},{},{},{:.1},{:.1}",
            r.t,
            r.phase,
            v.join(","),
            r.p50_us,
            r.p99_us
        )
        .unwrap();
    }
    let loaded_start = rows
        .iter()
        .find(|r| r.phase == "loaded")
        .map_or(0.0, |r| r.t);
    println!(
        "loaded phase from {loaded_start:.2} s; converged at {} (all three within tolerance for 8 samples)",
        converged_at.map_or("never".into(), |c| format!("{c:.2} s ({:.2} s after the start)", c - loaded_start))
    );
    for phase in ["alone", "loaded"] {
        let sel: Vec<&Row> = rows.iter().filter(|r| r.phase == phase).collect();
        let tail = &sel[sel.len() / 2..];
        let mean =
            |f: &dyn Fn(&Row) -> f64| tail.iter().map(|r| f(r)).sum::<f64>() / tail.len() as f64;
        println!(
            "{phase}: (second half) cpu_util {:.3} page_faults/s {:.0} switches/s {:.0} app p50 {:.0} µs p99 {:.0} µs",
            mean(&|r| r.values[0].unwrap_or(f64::NAN)),
            mean(&|r| r.values[1].unwrap_or(f64::NAN)),
            mean(&|r| r.values[2].unwrap_or(f64::NAN)),
            mean(&|r| r.p50_us),
            mean(&|r| r.p99_us)
        );
    }
    plot(&out.join("loadgen_phases.svg"), &rows, loaded_start);
}

/// One plot panel: title, y maximum (0: from the data), value, target.
type Panel = (
    &'static str,
    f64,
    Box<dyn Fn(&Row) -> Option<f64>>,
    Option<f64>,
);

fn plot(path: &std::path::Path, rows: &[Row], loaded_start: f64) {
    let root = SVGBackend::new(path, (900, 1000)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let panels = root.split_evenly((4, 1));
    let t_max = rows.last().map_or(1.0, |r| r.t);
    let series: [Panel; 4] = [
        (
            "CPU 1 utilization (share)",
            1.0,
            Box::new(|r: &Row| r.values[0]),
            Some(TARGETS[0].1),
        ),
        (
            "page faults / s",
            40_000.0,
            Box::new(|r: &Row| r.values[1]),
            Some(TARGETS[1].1),
        ),
        (
            "context switches / s",
            10_000.0,
            Box::new(|r: &Row| r.values[2]),
            Some(TARGETS[2].1),
        ),
        (
            "application latency p99 (µs)",
            0.0,
            Box::new(|r: &Row| Some(r.p99_us).filter(|v| v.is_finite())),
            None,
        ),
    ];
    for (area, (title, ymax, f, target)) in panels.iter().zip(series) {
        let max = if ymax > 0.0 {
            ymax
        } else {
            rows.iter().filter_map(&f).fold(1.0, f64::max) * 1.1
        };
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..t_max, 0.0..max)
            .unwrap();
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .x_desc("time (s)")
            .draw()
            .unwrap();
        chart
            .draw_series(LineSeries::new(
                rows.iter().filter_map(|r| f(r).map(|v| (r.t, v))),
                &BLUE,
            ))
            .unwrap()
            .label("measured")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], BLUE));
        if let Some(t) = target {
            chart
                .draw_series(LineSeries::new(
                    vec![(loaded_start, t), (t_max, t)],
                    RED.stroke_width(1),
                ))
                .unwrap()
                .label("target")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], RED));
        }
        chart
            .draw_series(LineSeries::new(
                vec![(loaded_start, 0.0), (loaded_start, max)],
                BLACK.mix(0.4),
            ))
            .unwrap();
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .unwrap();
    }
    root.present().unwrap();
}
