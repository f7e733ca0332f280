//! `hwqos report`: per scope and metric summary of a recording — count, mean,
//! median, p99, min, max, a 95 % Student-t confidence interval of the mean, and
//! the share of samples scaled from multiplexed counters.

use crate::error::usage;
use anyhow::Result;
use hwqos_core::recording::{read_recording, Recording, RecordingHeader};
use hwqos_core::stats;
use hwqos_core::{Frame, MetricName, Scope};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Schema of the JSON lines `hwqos report --json` prints.
pub const REPORT_SCHEMA: &str = "hwqos.report/1";

/// Reads a recording; any problem with the file is a usage error (exit 2) whose
/// message names the file, the line and what was wrong.
/// A recording cut in the middle of a frame (its writer was killed) is read up
/// to its last whole frame, with a warning.
pub fn load(path: &Path) -> Result<Recording> {
    let rec = read_recording(path).map_err(|e| usage(format!("cannot read recording: {e}")))?;
    if let Some(line) = rec.truncated_at {
        tracing::warn!(
            "{}:{line}: incomplete last frame left out (was the recorder killed?); read {} whole frames",
            path.display(),
            rec.frames.len()
        );
    }
    Ok(rec)
}

/// The values of one metric about one scope, in time order.
#[derive(Clone, Debug, Default)]
pub struct Column {
    /// The scope's label (a process's `comm`) from the first frame that has
    /// one; `None` when no frame labels the scope.
    pub label: Option<String>,
    /// Seconds since the first frame of the recording.
    pub times: Vec<f64>,
    /// The sample values, one per entry of `times`, in the metric's unit.
    pub values: Vec<f64>,
    /// How many of the values were scaled from a multiplexed counter.
    pub multiplexed: usize,
}

/// All columns of a recording, keyed by scope then metric (sorted).
pub type Columns = BTreeMap<Scope, BTreeMap<MetricName, Column>>;

/// Splits frames into per-scope, per-metric columns.
pub fn columns(frames: &[Frame]) -> Columns {
    let t0 = frames.first().map(|f| f.time).unwrap_or_default();
    let mut out: Columns = BTreeMap::new();
    for frame in frames {
        let t = frame.time.secs_since(&t0);
        for s in &frame.samples {
            let col = out
                .entry(s.scope.clone())
                .or_default()
                .entry(s.metric.clone())
                .or_default();
            if col.label.is_none() {
                col.label = frame.label(&s.scope).map(str::to_string);
            }
            col.times.push(t);
            col.values.push(s.value);
            col.multiplexed += usize::from(s.multiplexed());
        }
    }
    out
}

/// One row of the report.
#[derive(Clone, Debug, Serialize)]
pub struct ReportRow {
    /// Always [`REPORT_SCHEMA`].
    pub schema: &'static str,
    /// The scope's text form (`cpu:0`, `pid:42`).
    pub scope: String,
    /// The scope's label (a process's `comm`), if the recording has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The metric name.
    pub metric: String,
    /// The unit of every value below (from the metric registry).
    pub unit: hwqos_core::Unit,
    /// The number of samples summarized.
    pub count: usize,
    /// Their mean.
    pub mean: f64,
    /// Their median.
    pub median: f64,
    /// Their 99th percentile.
    pub p99: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// The sample standard deviation (0 for a single sample).
    pub stddev: f64,
    /// 95 % confidence interval of the mean (absent with fewer than two values).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci95_low: Option<f64>,
    /// Upper bound of the same interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci95_high: Option<f64>,
    /// Share (0–1) of the values scaled from multiplexed counters.
    pub multiplexed_share: f64,
}

/// Summarizes every scope/metric column with at least one finite value.
pub fn summarize(frames: &[Frame]) -> Vec<ReportRow> {
    let mut rows = Vec::new();
    for (scope, metrics) in columns(frames) {
        for (metric, col) in metrics {
            let finite: Vec<f64> = col
                .values
                .iter()
                .copied()
                .filter(|v| v.is_finite())
                .collect();
            let Some(s) = stats::summarize(&finite) else {
                continue;
            };
            rows.push(ReportRow {
                schema: REPORT_SCHEMA,
                scope: scope.to_string(),
                label: col.label.clone(),
                unit: metric.info().unit,
                metric: metric.to_string(),
                count: s.n,
                mean: s.mean,
                median: s.median,
                p99: s.p99,
                min: s.min,
                max: s.max,
                stddev: s.stddev,
                // A quantity never seen below 0 (counts, rates, ratios) has
                // no negative interval bound.
                ci95_low: s.ci95.map(|c| {
                    if s.min >= 0.0 {
                        c.low().max(0.0)
                    } else {
                        c.low()
                    }
                }),
                ci95_high: s.ci95.map(|c| c.high()),
                multiplexed_share: col.multiplexed as f64 / col.values.len().max(1) as f64,
            });
        }
    }
    rows
}

/// A number as people read it: thousands separators from 1,000 on (whole
/// numbers from 100,000 on), `T` for 10¹² and more, four decimals below 1,000,
/// scientific notation under 0.01.
pub(crate) fn num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        return v.to_string();
    }
    if a == 0.0 {
        "0".into()
    } else if a >= 1e12 {
        format!("{:.2}T", v / 1e12)
    } else if a >= 1e5 {
        group_thousands(&format!("{v:.0}"))
    } else if a >= 1e3 {
        group_thousands(&format!("{v:.1}"))
    } else if a >= 0.01 {
        format!("{v:.4}")
    } else {
        format!("{v:.3e}")
    }
}

/// Puts a comma between each group of three digits of the integer part.
fn group_thousands(plain: &str) -> String {
    let (sign, rest) = plain.strip_prefix('-').map_or(("", plain), |r| ("-", r));
    let (int, frac) = rest
        .split_once('.')
        .map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// The report as text: a header saying where the numbers came from, then one
/// table row per scope and metric.
pub fn render_text(header: &RecordingHeader, frames: &[Frame], rows: &[ReportRow]) -> String {
    let mut out = String::new();
    let span = match (frames.first(), frames.last()) {
        (Some(a), Some(b)) => b.time.secs_since(&a.time),
        _ => 0.0,
    };
    let _ = writeln!(
        out,
        "recording from {} started {} at {} Hz: {} frames over {:.3} s; backend {:?}, counters {:?}",
        header.node,
        header.started_utc,
        header.rate_hz,
        frames.len(),
        span,
        header.backend,
        header.counters
    );
    let _ = writeln!(
        out,
        "{:<14} {:<16} {:<36} {:>6} {:>15} {:>15} {:>15} {:>15} {:>15} {:>33} {:>6}",
        "scope",
        "label",
        "metric",
        "n",
        "mean",
        "median",
        "p99",
        "min",
        "max",
        "95% CI of mean",
        "mux%"
    );
    for r in rows {
        let ci = match (r.ci95_low, r.ci95_high) {
            (Some(l), Some(h)) => format!("[{}, {}]", num(l), num(h)),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<14} {:<16} {:<36} {:>6} {:>15} {:>15} {:>15} {:>15} {:>15} {:>33} {:>6.1}",
            r.scope,
            r.label.as_deref().unwrap_or("-"),
            r.metric,
            r.count,
            num(r.mean),
            num(r.median),
            num(r.p99),
            num(r.min),
            num(r.max),
            ci,
            r.multiplexed_share * 100.0
        );
    }
    out
}

/// `hwqos report RECORDING [--json]`.
pub fn run(path: &Path, json: bool, out: &mut dyn std::io::Write) -> Result<()> {
    use anyhow::Context;
    let rec = load(path)?;
    let rows = summarize(&rec.frames);
    let text = if json {
        let mut s = String::new();
        for r in &rows {
            s.push_str(&serde_json::to_string(r).context("encoding the report")?);
            s.push('\n');
        }
        s
    } else {
        render_text(&rec.header, &rec.frames, &rows)
    };
    out.write_all(text.as_bytes()).context("writing the report")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::{CounterReading, Sample, Timestamp};

    #[test]
    fn numbers_read_like_numbers() {
        assert_eq!(num(0.0), "0");
        assert_eq!(num(0.5), "0.5000");
        assert_eq!(num(1234.56), "1,234.6");
        assert_eq!(num(-98765.4), "-98,765.4");
        assert_eq!(num(1234567.8), "1,234,568");
        assert_eq!(num(2.5e12), "2.50T");
        assert_eq!(num(0.000123), "1.230e-4");
    }

    fn frame(seq: u64, faults: u64, running: u64) -> Frame {
        let time = Timestamp {
            mono_ns: seq * 100_000_000,
            wall_ns: 0,
        };
        let scope = Scope::Process { pid: 7 };
        let reading = CounterReading {
            raw: faults,
            time_enabled: 100,
            time_running: running,
        };
        Frame {
            seq,
            time,
            interval_ns: 100_000_000,
            samples: vec![
                Sample::counter(
                    time,
                    scope.clone(),
                    MetricName::from_static("sw.page_faults"),
                    reading,
                )
                .unwrap(),
                Sample::gauge(
                    time,
                    Scope::Cpu { cpu: 0 },
                    MetricName::from_static("os.cpu.util"),
                    0.5,
                ),
            ],
            labels: vec![hwqos_core::ScopeLabel {
                scope,
                name: "load".into(),
            }],
        }
    }

    #[test]
    fn summary_known_answers() {
        // Faults 10, 20, 30, 40 at full running, then 50 raw at half running → 100.
        let frames: Vec<Frame> = (1..=4)
            .map(|i| frame(i, i * 10, 100))
            .chain(std::iter::once(frame(5, 50, 50)))
            .collect();
        let rows = summarize(&frames);
        let faults = rows.iter().find(|r| r.metric == "sw.page_faults").unwrap();
        assert_eq!(faults.scope, "pid:7");
        assert_eq!(faults.label.as_deref(), Some("load"));
        assert_eq!(faults.count, 5);
        assert_eq!(faults.mean, 40.0);
        assert_eq!(faults.median, 30.0);
        assert_eq!(faults.min, 10.0);
        assert_eq!(faults.max, 100.0);
        assert!((faults.multiplexed_share - 0.2).abs() < 1e-12);
        // s = sqrt(5000 / 4) = 35.355; t(0.975, 4) = 2.7764 → half width 2.7764 · 35.355 / √5 = 43.90
        let half = faults.ci95_high.unwrap() - faults.mean;
        assert!((half - 43.90).abs() < 0.01, "{half}");
        let util = rows.iter().find(|r| r.metric == "os.cpu.util").unwrap();
        assert_eq!(
            (util.count, util.mean, util.multiplexed_share),
            (5, 0.5, 0.0)
        );
    }
}
