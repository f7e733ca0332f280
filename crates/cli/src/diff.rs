//! `hwqos diff A.jsonl B.jsonl`: two recordings compared per scope and metric
//! — the change of the mean from A to B with a confidence interval that
//! accounts for autocorrelation, ranked by effect size, with a verdict, the
//! CPI change split into stack levels, release gates (`--fail-on`), JSON
//! (`--json`, schema [`DIFF_SCHEMA`]) and an SVG of the ranked changes
//! (`--plot`). The statistics live in [`hwqos_core::compare`]; this module
//! reads the files, prints and draws.
//!
//! Exit status: 0 when every gate passes (or none is given), 1 when a gate
//! fails (or writing the output fails), 2 for bad input: a malformed gate, an
//! unreadable or invalid recording, a confidence outside (0, 1), a filter or
//! gate that matches nothing.

use crate::args::DiffArgs;
use crate::error::usage;
use crate::plot::draw_err;
use crate::report::{self, num};
use anyhow::{Context, Result};
use hwqos_core::compare::{
    self, CompareOptions, Comparison, Gate, GateResult, MetricChange, Verdict,
};
use hwqos_core::recording::Recording;
use plotters::prelude::*;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// Schema of the JSON object `hwqos diff --json` prints.
pub const DIFF_SCHEMA: &str = "hwqos.diff/1";

/// The method, as the JSON output names it.
pub const METHOD: &str = "welch_t_geyer_effective_sample_size";

/// At most this many rows are drawn by `--plot` (the top of the ranking).
pub const MAX_PLOT_ROWS: usize = 40;

/// Exit status when a `--fail-on` gate fails.
pub const EXIT_GATE_FAILED: u8 = crate::error::EXIT_FAILURE;

/// What the JSON output says about each recording.
#[derive(Debug, Serialize)]
pub struct RecordingInfo {
    /// The path given on the command line.
    pub path: String,
    /// The node it was recorded on.
    pub node: String,
    /// When recording started (RFC 3339 UTC).
    pub started_utc: String,
    /// Frames read.
    pub frames: usize,
    /// Configured sampling rate.
    pub rate_hz: f64,
    /// Counter class of the header (`software`, `hardware`, `mixed`, `none`).
    pub counters: hwqos_core::recording::CounterClass,
}

impl RecordingInfo {
    fn of(path: &Path, rec: &Recording) -> RecordingInfo {
        RecordingInfo {
            path: path.display().to_string(),
            node: rec.header.node.clone(),
            started_utc: rec.header.started_utc.clone(),
            frames: rec.frames.len(),
            rate_hz: rec.header.rate_hz,
            counters: rec.header.counters,
        }
    }
}

/// One gate in the JSON output.
#[derive(Debug, Serialize)]
pub struct GateJson {
    /// The gate as written.
    pub gate: String,
    /// Rows its pattern matched.
    pub matched: usize,
    /// Whether it failed.
    pub failed: bool,
    /// `scope metric` of the rows that failed it.
    pub failures: Vec<String>,
}

/// The JSON document of `hwqos diff --json`.
#[derive(Debug, Serialize)]
pub struct DiffJson<'a> {
    /// Always [`DIFF_SCHEMA`].
    pub schema: &'static str,
    /// Always [`METHOD`].
    pub method: &'static str,
    /// The baseline.
    pub a: RecordingInfo,
    /// The compared recording.
    pub b: RecordingInfo,
    /// The comparison (its fields appear at the top level).
    #[serde(flatten)]
    pub comparison: &'a Comparison,
    /// Every gate's outcome, in command-line order.
    pub gates: Vec<GateJson>,
    /// How many gates failed.
    pub failed_gates: usize,
}

/// A confidence level as a percentage without float noise (0.57 → `57`).
fn level_pct(confidence: f64) -> f64 {
    (confidence * 1e6).round() / 1e4
}

fn pct(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{:+.1}%", v * 100.0),
        _ => "-".into(),
    }
}

fn signed(v: f64) -> String {
    let s = num(v);
    if v > 0.0 {
        format!("+{s}")
    } else {
        s
    }
}

/// Shortens a list for the text output.
fn listing(items: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut s = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        let _ = write!(s, " … and {} more", items.len() - SHOWN);
    }
    s
}

/// The comparison as text: where the numbers came from, the ranked table in
/// `hwqos report`'s style, the CPI attribution, what was not compared, and
/// the gates.
pub fn render_text(
    (path_a, a): (&Path, &Recording),
    (path_b, b): (&Path, &Recording),
    cmp: &Comparison,
    gates: &[GateResult],
) -> String {
    let mut out = String::new();
    for (tag, path, rec) in [("A", path_a, a), ("B", path_b, b)] {
        let span = match (rec.frames.first(), rec.frames.last()) {
            (Some(f), Some(l)) => l.time.secs_since(&f.time),
            _ => 0.0,
        };
        let _ = writeln!(
            out,
            "{tag}: {} — {} started {} at {} Hz: {} frames over {:.3} s; backend {:?}, counters {:?}",
            path.display(),
            rec.header.node,
            rec.header.started_utc,
            rec.header.rate_hz,
            rec.frames.len(),
            span,
            rec.header.backend,
            rec.header.counters
        );
    }
    let level = level_pct(cmp.confidence);
    let _ = writeln!(
        out,
        "change = mean(B) − mean(A); {level}% interval of the change: Welch t with each series' effective sample size n_eff (autocorrelation, Geyer 1992); d = change / pooled SD"
    );
    if cmp.rates_differ {
        let _ = writeln!(
            out,
            "note: the sampling rates differ ({} Hz, {} Hz): per-tick counter values cover different intervals; compare their derived.rate.* metrics",
            a.header.rate_hz, b.header.rate_hz
        );
    }
    let ci_head = format!("{level}% CI of change");
    let _ = writeln!(
        out,
        "{:<22} {:<16} {:<36} {:>9} {:>11} {:>15} {:>15} {:>15} {:>33} {:>9} {:>7}  verdict",
        "scope",
        "label",
        "metric",
        "n A/B",
        "n_eff A/B",
        "mean A",
        "mean B",
        "change",
        ci_head,
        "change%",
        "d"
    );
    for c in &cmp.changes {
        let _ = writeln!(
            out,
            "{:<22} {:<16} {:<36} {:>9} {:>11} {:>15} {:>15} {:>15} {:>33} {:>9} {:>7}  {}",
            c.scope,
            c.label.as_deref().unwrap_or("-"),
            c.metric.as_str(),
            format!("{}/{}", c.n_a, c.n_b),
            format!("{:.0}/{:.0}", c.n_eff_a, c.n_eff_b),
            num(c.mean_a),
            num(c.mean_b),
            signed(c.diff),
            format!("[{}, {}]", signed(c.diff_low), signed(c.diff_high)),
            pct(c.relative),
            c.standardized
                .map(|d| format!("{d:+.2}"))
                .unwrap_or_else(|| "-".into()),
            c.verdict
        );
    }
    let count = |v: Verdict| cmp.changes.iter().filter(|c| c.verdict == v).count();
    let _ = writeln!(
        out,
        "{} compared: {} regressed, {} improved, {} changed (no known direction), {} no change",
        cmp.changes.len(),
        count(Verdict::Regressed),
        count(Verdict::Improved),
        count(Verdict::ChangedUp) + count(Verdict::ChangedDown),
        count(Verdict::NoChange)
    );
    if let Some(note) = &cmp.cpi_note {
        let _ = writeln!(out, "{note}");
    }
    for attr in &cmp.cpi {
        let who = match &attr.label {
            Some(l) => format!("{} ({l})", attr.scope),
            None => attr.scope.clone(),
        };
        let _ = write!(
            out,
            "CPI {who}: {} → {} ({})",
            num(attr.cpi_a),
            num(attr.cpi_b),
            attr.verdict
        );
        if let Some(note) = &attr.note {
            let _ = writeln!(out, "; {note}");
            continue;
        }
        let parts: Vec<String> = attr
            .levels
            .iter()
            .map(|l| {
                let share = l
                    .share
                    .map(|s| format!(", {:.0}% of the change", s * 100.0))
                    .unwrap_or_default();
                let sig = if l.level == "base" {
                    " residual"
                } else if l.significant {
                    " moved"
                } else {
                    " within noise"
                };
                format!("{} {}{share}{sig}", l.level, signed(l.diff))
            })
            .collect();
        let _ = writeln!(out, "; by level: {}", parts.join("; "));
    }
    if !cmp.only_in_a.is_empty() {
        let _ = writeln!(out, "only in A (not compared): {}", listing(&cmp.only_in_a));
    }
    if !cmp.only_in_b.is_empty() {
        let _ = writeln!(out, "only in B (not compared): {}", listing(&cmp.only_in_b));
    }
    if !cmp.too_few_samples.is_empty() {
        let _ = writeln!(
            out,
            "fewer than two samples (not compared): {}",
            listing(&cmp.too_few_samples)
        );
    }
    for g in gates {
        if g.failed() {
            let _ = writeln!(
                out,
                "gate {}: FAILED on {}",
                g.gate.text,
                listing(&g.failures)
            );
        } else {
            let _ = writeln!(out, "gate {}: passed ({} rows)", g.gate.text, g.matched);
        }
    }
    out
}

fn verdict_color(v: Verdict) -> RGBColor {
    match v {
        Verdict::Regressed => RGBColor(200, 30, 30),
        Verdict::Improved => RGBColor(30, 150, 60),
        Verdict::ChangedUp | Verdict::ChangedDown => RGBColor(40, 90, 200),
        Verdict::NoChange => RGBColor(140, 140, 140),
    }
}

/// An SVG of the top of the ranking: each row's relative change (percent of
/// A's mean) as a dot with its interval as a bar, coloured by verdict. Rows
/// whose mean in A is 0 have no relative change and are left out.
pub fn render_svg(cmp: &Comparison, title: &str) -> Result<String> {
    let rows: Vec<&MetricChange> = cmp
        .changes
        .iter()
        .filter(|c| c.relative.is_some() && c.relative_low.is_some() && c.relative_high.is_some())
        .take(MAX_PLOT_ROWS)
        .collect();
    if rows.is_empty() {
        return Err(usage(
            "--plot: nothing to draw (no compared metric has a non-zero mean in A)",
        ));
    }
    let n = rows.len();
    let (mut lo, mut hi) = (0f64, 0f64);
    for c in &rows {
        lo = lo.min(c.relative_low.unwrap_or(0.0) * 100.0);
        hi = hi.max(c.relative_high.unwrap_or(0.0) * 100.0);
    }
    let pad = ((hi - lo) * 0.05).max(1.0);
    let (lo, hi) = (lo - pad, hi + pad);
    let labels: Vec<String> = rows
        .iter()
        .map(|c| format!("{} {} ({})", c.scope, c.metric, c.verdict))
        .collect();
    let height = 120 + 24 * n as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(440)
            .build_cartesian_2d(lo..hi, 0f64..n as f64)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n * 2 + 1)
            .y_label_formatter(&|y| {
                let i = y.floor();
                if (y - i - 0.5).abs() < 1e-6 && i >= 0.0 {
                    // Row 0 (the top of the ranking) is drawn at the top.
                    labels.get(n - 1 - i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_desc(format!(
                "change from A to B, % of A's mean, with its {}% interval",
                level_pct(cmp.confidence)
            ))
            .draw()
            .map_err(draw_err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, 0.0), (0.0, n as f64)],
                BLACK.stroke_width(1),
            )))
            .map_err(draw_err)?;
        for (i, c) in rows.iter().enumerate() {
            let y = (n - 1 - i) as f64 + 0.5;
            let color = verdict_color(c.verdict);
            let (l, r, m) = (
                c.relative_low.unwrap_or(0.0) * 100.0,
                c.relative_high.unwrap_or(0.0) * 100.0,
                c.relative.unwrap_or(0.0) * 100.0,
            );
            chart
                .draw_series([
                    PathElement::new(vec![(l, y), (r, y)], color.stroke_width(2)),
                    PathElement::new(vec![(l, y - 0.2), (l, y + 0.2)], color.stroke_width(2)),
                    PathElement::new(vec![(r, y - 0.2), (r, y + 0.2)], color.stroke_width(2)),
                ])
                .map_err(draw_err)?;
            chart
                .draw_series(std::iter::once(Circle::new((m, y), 4, color.filled())))
                .map_err(draw_err)?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// Runs `hwqos diff`; returns the exit code (see the module docs).
pub fn run(args: &DiffArgs, out: &mut dyn std::io::Write) -> Result<u8> {
    let gates: Vec<Gate> = args
        .fail_on
        .iter()
        .map(|g| {
            g.parse::<Gate>()
                .map_err(|e| usage(format!("--fail-on: {e}")))
        })
        .collect::<Result<_>>()?;
    if !(args.confidence > 0.0 && args.confidence < 1.0) {
        return Err(usage(format!(
            "--confidence {}: must be between 0 and 1 (exclusive), e.g. 0.95",
            args.confidence
        )));
    }
    let a = report::load(&args.a)?;
    let b = report::load(&args.b)?;
    let opts = CompareOptions {
        confidence: args.confidence,
        scopes: args.scopes.clone(),
        metrics: args.metrics.clone(),
    };
    let cmp = compare::compare(&a, &b, &opts).map_err(|e| {
        let flag = match e {
            compare::CompareError::NoSuchScope(_) => "--scope: ",
            compare::CompareError::NoSuchMetric(_) => "--metric: ",
            _ => "",
        };
        usage(format!("{flag}{e}"))
    })?;
    let results =
        compare::evaluate_gates(&cmp, &gates).map_err(|e| usage(format!("--fail-on: {e}")))?;
    let failed = results.iter().filter(|g| g.failed()).count();
    let text = if args.json {
        let doc = DiffJson {
            schema: DIFF_SCHEMA,
            method: METHOD,
            a: RecordingInfo::of(&args.a, &a),
            b: RecordingInfo::of(&args.b, &b),
            comparison: &cmp,
            gates: results
                .iter()
                .map(|g| GateJson {
                    gate: g.gate.text.clone(),
                    matched: g.matched,
                    failed: g.failed(),
                    failures: g.failures.clone(),
                })
                .collect(),
            failed_gates: failed,
        };
        let mut s = serde_json::to_string(&doc).context("encoding the comparison")?;
        s.push('\n');
        s
    } else {
        render_text((&args.a, &a), (&args.b, &b), &cmp, &results)
    };
    out.write_all(text.as_bytes())
        .context("writing the comparison")?;
    if let Some(path) = &args.plot {
        let title = format!(
            "{} → {}: ranked changes",
            args.a.display(),
            args.b.display()
        );
        let svg = render_svg(&cmp, &title)?;
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    for g in results.iter().filter(|g| g.failed()) {
        eprintln!(
            "hwqos diff: gate `{}` failed on {}",
            g.gate.text,
            listing(&g.failures)
        );
    }
    Ok(if failed > 0 { EXIT_GATE_FAILED } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::recording::{CounterClass, RecordedBackend, RecordingHeader};
    use hwqos_core::{Frame, MetricName, Sample, Scope, Timestamp};

    fn rec(values: &[f64]) -> Recording {
        let frames: Vec<Frame> = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let time = Timestamp {
                    mono_ns: i as u64 * 50_000_000,
                    wall_ns: 0,
                };
                Frame {
                    seq: i as u64,
                    time,
                    interval_ns: 50_000_000,
                    samples: vec![Sample::gauge(
                        time,
                        Scope::Process { pid: 5 },
                        MetricName::from_static("sw.page_faults"),
                        *v,
                    )],
                    labels: vec![],
                }
            })
            .collect();
        Recording {
            header: RecordingHeader::new(
                "n",
                Timestamp::default(),
                20.0,
                RecordedBackend::Simulated,
                CounterClass::Software,
            ),
            frames,
            truncated_at: None,
        }
    }

    #[test]
    fn text_table_plot_and_gates() {
        let a = rec(&[10.0, 11.0, 9.0, 10.0, 10.0, 11.0, 9.0, 10.0]);
        let b = rec(&[12.0, 13.0, 11.0, 12.0, 12.0, 13.0, 11.0, 12.0]);
        let cmp = compare::compare(&a, &b, &CompareOptions::default()).unwrap();
        let gate: Gate = "sw.page_faults>+5%".parse().unwrap();
        let res = compare::evaluate_gates(&cmp, &[gate]).unwrap();
        let text = render_text((Path::new("a"), &a), (Path::new("b"), &b), &cmp, &res);
        let row = text
            .lines()
            .find(|l| l.starts_with("pid:5"))
            .expect("a row");
        assert!(
            row.contains("+20.0%") && row.ends_with("regressed"),
            "{row}"
        );
        assert!(text.contains("95% CI of change"), "{text}");
        assert_eq!(level_pct(0.57), 57.0);
        assert!(text.contains("CPI: not in these recordings"), "{text}");
        assert!(text.contains("gate sw.page_faults>+5%: FAILED on pid:5 sw.page_faults"));
        let svg = render_svg(&cmp, "t").unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("pid:5 sw.page_faults (regressed)"));
    }
}
