//! `hwqos plot`: a recording as an SVG — one time-series panel per metric with a
//! line per scope, and, when the recording holds CPI-stack components
//! (`derived.cpi.*`), stacked bars of their mean per scope (thesis 5.4.2).

use crate::error::usage;
use crate::report::{self, Column};
use anyhow::{anyhow, Context, Result};
use hwqos_core::metric::names;
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
    // CPI stack: one bar per scope as tall as its measured mean CPI.
    let stack = if panels.keys().any(is_cpi_component) {
        let cols = report::columns(frames);
        cpi_bars(&cols, |scope| {
            filter.scopes.is_empty() || filter.scopes.contains(scope)
        })
    } else {
        BTreeMap::new()
    };
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

/// One scope's CPI-stack bar: the measured mean CPI split into its levels.
#[derive(Clone, Debug, PartialEq)]
pub struct CpiBar {
    /// The measured mean CPI (`derived.cpi`): the bar's height.
    pub cpi: f64,
    /// The levels stacked in the bar, bottom up: each miss level's mean
    /// component (sorted by name), then `base`, what is left of the CPI. They
    /// add up to `cpi`.
    pub parts: Vec<(String, f64)>,
    /// The factor the miss levels were scaled by to fit the measured CPI
    /// (1 when they fit; below 1 when the penalty estimates add up to more
    /// than the CPI, and then the base is 0).
    pub scale: f64,
}

/// The CPI-stack bars of the scopes `keep` accepts that have a measured CPI.
///
/// Under event-set rotation each tick counts only some miss levels, and the
/// recorded `derived.cpi.base` of a tick is the CPI minus only the levels of
/// that tick. Stacking the mean of that base on the means of every level
/// counts each level twice (once as itself, once inside the base of the ticks
/// that did not count it) and drew bars taller than the measured CPI. So the
/// bar is the mean of `derived.cpi`; each level is the mean of its component
/// over the ticks that counted it; the base is the CPI minus their sum; and
/// levels that add up to more than the CPI are scaled down to fit it, with
/// the factor in [`CpiBar::scale`] (the caption names them).
pub fn cpi_bars(cols: &report::Columns, keep: impl Fn(&Scope) -> bool) -> BTreeMap<Scope, CpiBar> {
    let mut bars = BTreeMap::new();
    for (scope, metrics) in cols {
        if !keep(scope) {
            continue;
        }
        let finite_mean = |c: &Column| {
            let v: Vec<f64> = c.values.iter().copied().filter(|v| v.is_finite()).collect();
            hwqos_core::stats::mean(&v)
        };
        let Some(cpi) = metrics
            .get(&MetricName::from_static(names::DERIVED_CPI))
            .and_then(finite_mean)
            .filter(|c| *c > 0.0)
        else {
            continue;
        };
        let mut parts: Vec<(String, f64)> = metrics
            .iter()
            .filter(|(m, _)| is_cpi_component(m) && m.as_str() != names::DERIVED_CPI_BASE)
            .filter_map(|(m, c)| {
                let level = m.as_str().trim_start_matches("derived.cpi.").to_string();
                Some((level, finite_mean(c)?.max(0.0)))
            })
            .collect();
        let attributed: f64 = parts.iter().map(|(_, v)| v).sum();
        let scale = if attributed > cpi {
            cpi / attributed
        } else {
            1.0
        };
        for (_, v) in &mut parts {
            *v *= scale;
        }
        let attributed: f64 = parts.iter().map(|(_, v)| v).sum();
        parts.push(("base".to_string(), (cpi - attributed).max(0.0)));
        bars.insert(scope.clone(), CpiBar { cpi, parts, scale });
    }
    bars
}

fn draw_cpi_stack<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    stack: &BTreeMap<Scope, CpiBar>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let scopes: Vec<&Scope> = stack.keys().collect();
    let parts: Vec<&String> = {
        let mut p: Vec<&String> = stack
            .values()
            .flat_map(|b| b.parts.iter().map(|(name, _)| name))
            .collect();
        p.sort();
        p.dedup();
        // The base last, at the top of each bar.
        if let Some(i) = p.iter().position(|n| n.as_str() == "base") {
            let base = p.remove(i);
            p.push(base);
        }
        p
    };
    let total_max = stack.values().map(|b| b.cpi).fold(0.0, f64::max);
    let y_max = if total_max > 0.0 {
        total_max * 1.1
    } else {
        1.0
    };
    let n = scopes.len();
    let labels: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
    let scaled: Vec<String> = stack
        .iter()
        .filter(|(_, b)| b.scale < 1.0)
        .map(|(s, b)| format!("{s} ×{:.2}", b.scale))
        .collect();
    let mut caption = "CPI stack (bar = measured mean CPI, split by level)".to_string();
    if !scaled.is_empty() {
        caption.push_str(&format!(
            " — levels scaled down to fit the measured CPI: {}",
            scaled.join(", ")
        ));
    }
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
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
            let v = stack[*scope]
                .parts
                .iter()
                .find(|(name, _)| name == *part)
                .map_or(0.0, |(_, v)| *v);
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
    // The measured CPI as a line across each bar's top.
    chart
        .draw_series(scopes.iter().enumerate().map(|(si, scope)| {
            let (x, cpi) = (si as f64, stack[*scope].cpi);
            PathElement::new(
                vec![(x + 0.15, cpi), (x + 0.85, cpi)],
                BLACK.stroke_width(2),
            )
        }))
        .map_err(draw_err)?;
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
                        g(Scope::Process { pid: 9 }, "derived.cpi", 0.75),
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

    /// Frames as rotation makes them: even ticks count L1D misses, odd ticks
    /// LLC misses; the CPI is 2.0 in every tick and each tick's base is the
    /// CPI minus the one level counted in it.
    fn rotated_cpi_frames(l1d: f64, llc: f64) -> Vec<Frame> {
        let p = Scope::Process { pid: 4 };
        (0..10u64)
            .map(|i| {
                let time = Timestamp {
                    mono_ns: i * 100_000_000,
                    wall_ns: 0,
                };
                let g = |m: &'static str, v: f64| {
                    Sample::gauge(time, p.clone(), MetricName::from_static(m), v)
                };
                let mut samples = vec![g("derived.cpi", 2.0)];
                if i % 2 == 0 {
                    samples.push(g("derived.cpi.l1d", l1d));
                    samples.push(g("derived.cpi.base", 2.0 - l1d));
                } else {
                    samples.push(g("derived.cpi.llc", llc));
                    samples.push(g("derived.cpi.base", 2.0 - llc));
                }
                Frame {
                    seq: i,
                    time,
                    interval_ns: 100_000_000,
                    samples,
                    labels: vec![],
                }
            })
            .collect()
    }

    #[test]
    fn cpi_bars_are_as_tall_as_the_measured_cpi_under_rotation() {
        // The old plot stacked mean(base) = 1.25 on l1d 0.5 and llc 1.0: a bar
        // of 2.75 for a measured CPI of 2.0.
        let cols = report::columns(&rotated_cpi_frames(0.5, 1.0));
        let bars = cpi_bars(&cols, |_| true);
        let bar = &bars[&Scope::Process { pid: 4 }];
        assert_eq!(bar.cpi, 2.0);
        let height: f64 = bar.parts.iter().map(|(_, v)| v).sum();
        assert!((height - 2.0).abs() < 1e-12, "{bar:?}");
        assert_eq!(
            bar.parts,
            vec![
                ("l1d".to_string(), 0.5),
                ("llc".to_string(), 1.0),
                ("base".to_string(), 0.5)
            ]
        );
        assert_eq!(bar.scale, 1.0);
        let svg = render_svg(&rotated_cpi_frames(0.5, 1.0), &PlotFilter::default(), "t").unwrap();
        assert!(svg.contains("bar = measured mean CPI"));
        assert!(!svg.contains("scaled down"));

        // Levels whose estimates add up to more than the CPI (1.5 + 1.5 > 2)
        // are scaled to fit, and the plot says so.
        let cols = report::columns(&rotated_cpi_frames(1.5, 1.5));
        let bar = &cpi_bars(&cols, |_| true)[&Scope::Process { pid: 4 }];
        let height: f64 = bar.parts.iter().map(|(_, v)| v).sum();
        assert!((height - 2.0).abs() < 1e-12, "{bar:?}");
        assert!((bar.scale - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(bar.parts.last(), Some(&("base".to_string(), 0.0)));
        let svg = render_svg(&rotated_cpi_frames(1.5, 1.5), &PlotFilter::default(), "t").unwrap();
        assert!(svg.contains("scaled down to fit the measured CPI: pid:4 ×0.67"));
    }
}
