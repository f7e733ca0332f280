//! `hwqos plot`: a recording as an SVG — one time-series panel per metric with a
//! line per scope, and, when the recording holds CPI-stack components
//! (`derived.cpi.*`), stacked bars of their mean per scope (thesis 5.4.2).

use crate::error::usage;
use crate::report::{self, Column};
use anyhow::{anyhow, Context, Result};
use hwqos_core::{Frame, MetricName, Scope};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// At most this many scopes are drawn per panel (those with the largest mean),
/// so panels of recordings with hundreds of processes stay readable.
pub const MAX_LINES_PER_PANEL: usize = 8;

const WIDTH: u32 = 1100;
const PANEL_HEIGHT: u32 = 280;

/// What to plot.
#[derive(Clone, Debug, Default)]
pub struct PlotFilter {
    /// Only these metrics (empty: all).
    pub metrics: Vec<String>,
    /// Only these scopes (empty: all).
    pub scopes: Vec<Scope>,
}

/// One panel's lines: metric → (scope, label, column), largest means first.
type Panels = BTreeMap<MetricName, Vec<(Scope, Column)>>;

fn mean(v: &[f64]) -> f64 {
    hwqos_core::stats::mean(v).unwrap_or(0.0)
}

/// The CPI-stack components present: `derived.cpi.<part>`.
fn is_cpi_component(m: &MetricName) -> bool {
    m.as_str().starts_with("derived.cpi.")
}

/// Selects the panels to draw; fails naming a requested metric or scope that is
/// not in the recording.
pub fn select(frames: &[Frame], filter: &PlotFilter) -> Result<(Panels, usize)> {
    let cols = report::columns(frames);
    for s in &filter.scopes {
        if !cols.contains_key(s) {
            let have: Vec<String> = cols.keys().map(Scope::to_string).collect();
            return Err(usage(format!(
                "--scope {s}: not in the recording (it has: {})",
                have.join(", ")
            )));
        }
    }
    let mut panels: Panels = BTreeMap::new();
    let mut total_scopes: BTreeMap<MetricName, usize> = BTreeMap::new();
    for (scope, metrics) in cols {
        if !filter.scopes.is_empty() && !filter.scopes.contains(&scope) {
            continue;
        }
        for (metric, col) in metrics {
            if !filter.metrics.is_empty() && !filter.metrics.iter().any(|m| m == metric.as_str()) {
                continue;
            }
            *total_scopes.entry(metric.clone()).or_default() += 1;
            panels.entry(metric).or_default().push((scope.clone(), col));
        }
    }
    for m in &filter.metrics {
        if !panels.keys().any(|k| k.as_str() == m) {
            return Err(usage(format!(
                "--metric {m}: not in the recording (for the selected scopes)"
            )));
        }
    }
    let mut truncated = 0;
    for lines in panels.values_mut() {
        lines.sort_by(|a, b| mean(&b.1.values).total_cmp(&mean(&a.1.values)));
        if lines.len() > MAX_LINES_PER_PANEL {
            truncated += lines.len() - MAX_LINES_PER_PANEL;
            lines.truncate(MAX_LINES_PER_PANEL);
        }
    }
    Ok((panels, truncated))
}

fn scope_name(scope: &Scope, col: &Column) -> String {
    match &col.label {
        Some(l) => format!("{scope} ({l})"),
        None => scope.to_string(),
    }
}

/// The legend box both kinds of panel use.
fn draw_legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err)
}

/// Plotters' errors as anyhow errors (shared by every SVG the CLI draws).
pub(crate) fn draw_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the plot: {e:?}")
}

/// Renders the panels (and CPI-stack bars if present) as an SVG document.
pub fn render_svg(frames: &[Frame], filter: &PlotFilter, title: &str) -> Result<String> {
    let (panels, truncated) = select(frames, filter)?;
    if panels.is_empty() {
        return Err(usage("nothing to plot: the recording has no samples"));
    }
    // CPI stack: mean of each component per scope.
    let mut stack: BTreeMap<Scope, BTreeMap<String, f64>> = BTreeMap::new();
    for (metric, lines) in &panels {
        if !is_cpi_component(metric) {
            continue;
        }
        let part = metric
            .as_str()
            .trim_start_matches("derived.cpi.")
            .to_string();
        for (scope, col) in lines {
            stack
                .entry(scope.clone())
                .or_default()
                .insert(part.clone(), mean(&col.values));
        }
    }
    let n_panels = panels.len() + usize::from(!stack.is_empty());
    let height = PANEL_HEIGHT * n_panels as u32 + 40;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut caption = title.to_string();
        if truncated > 0 {
            caption.push_str(&format!(
                " — {truncated} lines not drawn (only the {MAX_LINES_PER_PANEL} largest scopes per metric)"
            ));
        }
        let (head, body) = root.split_vertically(40);
        head.titled(&caption, ("sans-serif", 20))
            .map_err(draw_err)?;
        let areas = body.split_evenly((n_panels, 1));
        let t_max = frames
            .last()
            .zip(frames.first())
            .map(|(b, a)| b.time.secs_since(&a.time))
            .filter(|t| *t > 0.0)
            .unwrap_or(1.0);
        for ((metric, lines), area) in panels.iter().zip(&areas) {
            draw_series_panel(area, metric, lines, t_max)?;
        }
        if !stack.is_empty() {
            if let Some(area) = areas.last() {
                draw_cpi_stack(area, &stack)?;
            }
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

fn draw_series_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    metric: &MetricName,
    lines: &[(Scope, Column)],
    t_max: f64,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let values = lines
        .iter()
        .flat_map(|(_, c)| c.values.iter().copied())
        .filter(|v| v.is_finite());
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let (lo, hi) = if lo.is_finite() {
        (lo.min(0.0), hi)
    } else {
        (0.0, 1.0)
    };
    let hi = if hi > lo {
        hi + (hi - lo) * 0.05
    } else {
        lo + 1.0
    };
    let unit = format!("{:?}", metric.info().unit).to_lowercase();
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{metric} [{unit}]"), ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..t_max, lo..hi)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_label_formatter(&|v| format_axis(*v))
        .draw()
        .map_err(draw_err)?;
    for (i, (scope, col)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = col
            .times
            .iter()
            .zip(&col.values)
            .filter(|(_, v)| v.is_finite())
            .map(|(t, v)| (*t, *v))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(draw_err)?
            .label(scope_name(scope, col))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    draw_legend(&mut chart)
}

fn draw_cpi_stack<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    stack: &BTreeMap<Scope, BTreeMap<String, f64>>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let scopes: Vec<&Scope> = stack.keys().collect();
    let parts: Vec<&String> = {
        let mut p: Vec<&String> = stack.values().flat_map(|m| m.keys()).collect();
        p.sort();
        p.dedup();
        p
    };
    let total_max = stack
        .values()
        .map(|m| {
            m.values()
                .filter(|v| v.is_finite() && **v > 0.0)
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    let y_max = if total_max > 0.0 {
        total_max * 1.1
    } else {
        1.0
    };
    let n = scopes.len();
    let labels: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            "CPI stack (mean cycles per instruction by component)",
            ("sans-serif", 16),
        )
        .margin(8)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..y_max)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n.max(1) * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor();
            if (x - i - 0.5).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("CPI")
        .draw()
        .map_err(draw_err)?;
    let mut base = vec![0.0; n];
    for (pi, part) in parts.iter().enumerate() {
        let color = Palette99::pick(pi).to_rgba();
        let mut rects = Vec::new();
        for (si, scope) in scopes.iter().enumerate() {
            let v = stack[*scope].get(*part).copied().unwrap_or(0.0);
            if !(v.is_finite() && v > 0.0) {
                continue;
            }
            let x = si as f64;
            rects.push(Rectangle::new(
                [(x + 0.2, base[si]), (x + 0.8, base[si] + v)],
                color.filled(),
            ));
            base[si] += v;
        }
        chart
            .draw_series(rects)
            .map_err(draw_err)?
            .label(part.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    draw_legend(&mut chart)
}

fn format_axis(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// `hwqos plot RECORDING -o FILE.svg [--metric M] [--scope S]`.
pub fn run(recording: &Path, output: &Path, metrics: &[String], scopes: &[String]) -> Result<()> {
    let scopes = scopes
        .iter()
        .map(|s| {
            s.parse::<Scope>()
                .map_err(|e| usage(format!("--scope: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let rec = report::load(recording)?;
    let title = format!(
        "{} — {} ({:?} backend, {:?} counters)",
        recording.display(),
        rec.header.node,
        rec.header.backend,
        rec.header.counters
    );
    let filter = PlotFilter {
        metrics: metrics.to_vec(),
        scopes,
    };
    let svg = render_svg(&rec.frames, &filter, &title)?;
    std::fs::write(output, svg).with_context(|| format!("writing {}", output.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::{Sample, Timestamp};

    fn frames() -> Vec<Frame> {
        (0..5u64)
            .map(|i| {
                let time = Timestamp {
                    mono_ns: i * 100_000_000,
                    wall_ns: 0,
                };
                let g = |scope: Scope, m: &'static str, v: f64| {
                    Sample::gauge(time, scope, MetricName::from_static(m), v)
                };
                Frame {
                    seq: i,
                    time,
                    interval_ns: 100_000_000,
                    samples: vec![
                        g(Scope::Cpu { cpu: 0 }, "os.cpu.util", 0.1 * i as f64),
                        g(Scope::Cpu { cpu: 1 }, "os.cpu.util", 0.5),
                        g(Scope::Process { pid: 9 }, "derived.cpi.base", 0.5),
                        g(Scope::Process { pid: 9 }, "derived.cpi.l1d", 0.25),
                    ],
                    labels: vec![],
                }
            })
            .collect()
    }

    #[test]
    fn svg_has_a_panel_per_metric_and_cpi_bars() {
        let svg = render_svg(&frames(), &PlotFilter::default(), "test").unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..50.min(svg.len())]);
        assert!(svg.contains("os.cpu.util [ratio]"));
        assert!(svg.contains("CPI stack"));
        assert!(svg.contains("cpu:1"));
        assert!(svg.contains("l1d"));
    }

    #[test]
    fn filters_name_what_is_missing() {
        let filter = PlotFilter {
            metrics: vec!["hw.cycles".into()],
            scopes: vec![],
        };
        let err = render_svg(&frames(), &filter, "t").unwrap_err();
        assert!(err.to_string().contains("--metric hw.cycles"), "{err}");
        let filter = PlotFilter {
            metrics: vec![],
            scopes: vec![Scope::Cpu { cpu: 7 }],
        };
        let err = render_svg(&frames(), &filter, "t").unwrap_err();
        assert!(err.to_string().contains("--scope cpu:7"), "{err}");
        let only = PlotFilter {
            metrics: vec!["os.cpu.util".into()],
            scopes: vec![Scope::Cpu { cpu: 1 }],
        };
        let svg = render_svg(&frames(), &only, "t").unwrap();
        assert!(!svg.contains("cpu:0"));
        assert!(!svg.contains("CPI stack"));
    }
}
