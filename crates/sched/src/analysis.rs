//! Data pre-processing and correlation analysis (thesis 8.2.3, definitions
//! 25–27, Listing 8.1): align the hardware series *R* and the application
//! metric *x* of each process on one time base, normalize, low-pass filter
//! (Butterworth, forward-backward so no phase shift), compute
//! Corr(r, x, p) (Pearson), sort per process and pick r̂ above θ.
//!
//! The result renders as a text table ([`ProcessCorrelation::table`]) and as
//! an SVG like thesis Fig. 8.11 ([`render_svg`]): one panel per resource,
//! sorted by correlation, raw values dashed and filtered values solid, with
//! the filtered *x* for comparison.

use crate::SchedError;
use hwqos_core::filter::butterworth_lowpass_filtfilt;
use hwqos_core::{stats, Frame, Series};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// How the analysis is run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnalysisParams {
    /// Common time base step, ns.
    pub step_ns: u64,
    /// Butterworth order, 1..=8.
    pub filter_order: usize,
    /// Butterworth cutoff as a fraction of Nyquist, in (0, 1); 1.0 or more
    /// disables filtering.
    pub filter_cutoff: f64,
    /// θ: a resource is r̂ when |Corr| ≥ θ.
    pub threshold: f64,
}

impl Default for AnalysisParams {
    fn default() -> Self {
        AnalysisParams {
            step_ns: 100_000_000,
            filter_order: 4,
            filter_cutoff: 0.2,
            threshold: 0.5,
        }
    }
}

/// The measurements of one process: resource series by name and *x*.
#[derive(Clone, Debug)]
pub struct ProcessSeries {
    /// The process's name as reported (table and SVG titles, errors).
    pub process: String,
    /// The hardware series *R*, keyed by resource (event) name.
    pub resources: BTreeMap<String, Series>,
    /// The application metric *x*.
    pub x: Series,
}

/// One resource of one process after analysis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResourceCorrelation {
    /// The resource (event) name, a key of [`ProcessSeries::resources`].
    pub resource: String,
    /// Corr(r, x, p) of the filtered, normalized series.
    pub correlation: f64,
    /// Mean usage per step before normalization.
    pub mean: f64,
    /// The aligned series, one value per step, before normalization (not
    /// serialized).
    #[serde(skip)]
    pub raw: Vec<f64>,
    /// The normalized, low-pass filtered series that was correlated (not
    /// serialized).
    #[serde(skip)]
    pub filtered: Vec<f64>,
}

/// The analysis of one process: resources sorted by |Corr| (highest first).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessCorrelation {
    /// The process's name, from [`ProcessSeries::process`].
    pub process: String,
    /// Steps on the common time base (the length of every aligned series).
    pub samples: usize,
    /// Every resource, sorted by |Corr| highest first, ties by name.
    pub resources: Vec<ResourceCorrelation>,
    /// The resources with |Corr| ≥ θ, in the same order (r̂ is the first).
    pub selected: Vec<String>,
    /// *x* aligned on the time base, before normalization (not serialized).
    #[serde(skip)]
    pub x_raw: Vec<f64>,
    /// *x* normalized and filtered, as correlated (not serialized).
    #[serde(skip)]
    pub x_filtered: Vec<f64>,
}

impl ProcessCorrelation {
    /// r̂, the resource most correlated with x (if any passed θ).
    pub fn r_hat(&self) -> Option<&str> {
        self.selected.first().map(String::as_str)
    }

    /// A plain-text table: resource, Corr, mean, selected.
    pub fn table(&self) -> String {
        let mut out = format!(
            "process {} ({} samples)\n{:<32} {:>8} {:>14}  r̂\n",
            self.process, self.samples, "resource", "Corr", "mean/step"
        );
        for r in &self.resources {
            let mark = if self.selected.contains(&r.resource) {
                "*"
            } else {
                ""
            };
            out.push_str(&format!(
                "{:<32} {:>8.3} {:>14.1}  {}\n",
                r.resource, r.correlation, r.mean, mark
            ));
        }
        out
    }
}

/// Resamples all series on the window they all cover, at `step_ns`.
/// Returns the time base and one vector per series, or `None` when they do
/// not overlap for at least 3 steps.
pub fn align(series: &[&Series], step_ns: u64) -> Option<(Vec<u64>, Vec<Vec<f64>>)> {
    if step_ns == 0 || series.is_empty() {
        return None;
    }
    let start = series
        .iter()
        .map(|s| s.times().first().copied())
        .collect::<Option<Vec<_>>>()?;
    let end = series
        .iter()
        .map(|s| s.times().last().copied())
        .collect::<Option<Vec<_>>>()?;
    let (start, end) = (*start.iter().max()?, *end.iter().min()?);
    if end <= start || (end - start) / step_ns < 2 {
        return None;
    }
    let out: Vec<Series> = series
        .iter()
        .map(|s| s.resample(start, end, step_ns))
        .collect();
    let n = out.iter().map(Series::len).min()?;
    let times = out[0].times()[..n].to_vec();
    Some((
        times,
        out.iter().map(|s| s.values()[..n].to_vec()).collect(),
    ))
}

/// z-score normalization (mean 0, standard deviation 1; a constant series
/// becomes all zeros).
pub fn normalize(xs: &[f64]) -> Vec<f64> {
    let mean = stats::mean(xs).unwrap_or(0.0);
    let sd = stats::stddev(xs).unwrap_or(0.0);
    xs.iter()
        .map(|x| if sd > 0.0 { (x - mean) / sd } else { 0.0 })
        .collect()
}

/// `xs` low-pass filtered as `p` says (unchanged when the cutoff is ≥ 1 or
/// the filter cannot run).
pub(crate) fn filtered(xs: &[f64], p: &AnalysisParams) -> Vec<f64> {
    if p.filter_cutoff >= 1.0 {
        return xs.to_vec();
    }
    butterworth_lowpass_filtfilt(xs, p.filter_order, p.filter_cutoff).unwrap_or_else(|| xs.to_vec())
}

/// Analyses one process (Listing 8.1).
pub fn analyse(
    p: &ProcessSeries,
    params: &AnalysisParams,
) -> Result<ProcessCorrelation, SchedError> {
    if !(params.threshold.is_finite() && (0.0..=1.0).contains(&params.threshold)) {
        return Err(SchedError::invalid(
            "threshold θ",
            format!("{} is not in [0, 1]", params.threshold),
        ));
    }
    if params.filter_cutoff <= 0.0 || !(1..=8).contains(&params.filter_order) {
        return Err(SchedError::invalid(
            "filter",
            format!(
                "order {} / cutoff {} (order 1..=8, cutoff in (0, 1), or ≥ 1 for no filter)",
                params.filter_order, params.filter_cutoff
            ),
        ));
    }
    let names: Vec<&String> = p.resources.keys().collect();
    let mut all: Vec<&Series> = vec![&p.x];
    all.extend(p.resources.values());
    let (_, values) = align(&all, params.step_ns).ok_or_else(|| {
        SchedError::invalid(
            format!("series of {}", p.process),
            "x and the resources do not overlap for at least 3 steps",
        )
    })?;
    let x_raw = values[0].clone();
    let x_filtered = filtered(&normalize(&x_raw), params);
    let mut resources: Vec<ResourceCorrelation> = names
        .iter()
        .zip(&values[1..])
        .map(|(name, raw)| {
            let f = filtered(&normalize(raw), params);
            ResourceCorrelation {
                resource: (*name).clone(),
                correlation: stats::pearson(&f, &x_filtered).unwrap_or(0.0),
                mean: stats::mean(raw).unwrap_or(0.0),
                raw: raw.clone(),
                filtered: f,
            }
        })
        .collect();
    let selected = rank_and_select(&mut resources, params.threshold);
    Ok(ProcessCorrelation {
        process: p.process.clone(),
        samples: x_raw.len(),
        resources,
        selected,
        x_raw,
        x_filtered,
    })
}

/// Sorts `resources` by |correlation| (highest first, ties by name) and
/// returns the names of those at or above `threshold` (θ): r̂ and the other
/// selected resources.
pub fn rank_and_select(resources: &mut [ResourceCorrelation], threshold: f64) -> Vec<String> {
    resources.sort_by(|a, b| {
        b.correlation
            .abs()
            .total_cmp(&a.correlation.abs())
            .then_with(|| a.resource.cmp(&b.resource))
    });
    resources
        .iter()
        .filter(|r| r.correlation.abs() >= threshold)
        .map(|r| r.resource.clone())
        .collect()
}

/// Splits a monitor recording into per-process series: every metric of a
/// `pid:N` scope becomes a resource, except `x_metric` (an `app.*` metric),
/// which becomes *x* (taken from the process scope, or from `system` when
/// the application reports it there).
pub fn from_frames(frames: &[Frame], x_metric: &str) -> BTreeMap<String, ProcessSeries> {
    let cap = frames.len().max(1);
    let mut out: BTreeMap<String, ProcessSeries> = BTreeMap::new();
    let mut system_x = Series::new(cap);
    for f in frames {
        for s in &f.samples {
            let t = s.time.mono_ns;
            let scope = s.scope.to_string();
            if s.metric.as_str() == x_metric && scope == "system" {
                system_x.push(t, s.value);
                continue;
            }
            if !scope.starts_with("pid:") {
                continue;
            }
            let entry = out.entry(scope.clone()).or_insert_with(|| ProcessSeries {
                process: scope.clone(),
                resources: BTreeMap::new(),
                x: Series::new(cap),
            });
            if s.metric.as_str() == x_metric {
                entry.x.push(t, s.value);
            } else {
                entry
                    .resources
                    .entry(s.metric.as_str().to_string())
                    .or_insert_with(|| Series::new(cap))
                    .push(t, s.value);
            }
        }
    }
    for p in out.values_mut() {
        if p.x.is_empty() {
            p.x = system_x.clone();
        }
    }
    out.retain(|_, p| !p.x.is_empty() && !p.resources.is_empty());
    out
}

/// Renders the analysis of one process like thesis Fig. 8.11.
pub fn render_svg(c: &ProcessCorrelation, path: &Path) -> Result<(), SchedError> {
    use plotters::prelude::*;
    let panels = c.resources.len().max(1);
    let height = 180 * panels as u32 + 40;
    let plot = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (title, body) = root.split_vertically(40);
        title.titled(
            &format!("{}: Corr(r, x, p), sorted (θ-selected marked r̂)", c.process),
            ("sans-serif", 18),
        )?;
        let areas = body.split_evenly((panels, 1));
        let n = c.x_raw.len();
        for (area, r) in areas.iter().zip(&c.resources) {
            let raw = normalize(&r.raw);
            let lo = raw
                .iter()
                .chain(&r.filtered)
                .chain(&c.x_filtered)
                .copied()
                .fold(f64::MAX, f64::min);
            let hi = raw
                .iter()
                .chain(&r.filtered)
                .chain(&c.x_filtered)
                .copied()
                .fold(f64::MIN, f64::max);
            let (lo, hi) = if lo < hi { (lo, hi) } else { (-1.0, 1.0) };
            let mark = if c.selected.first() == Some(&r.resource) {
                "  (r̂)"
            } else {
                ""
            };
            let mut chart = ChartBuilder::on(area)
                .caption(
                    format!("{}: Corr = {:.3}{mark}", r.resource, r.correlation),
                    ("sans-serif", 14),
                )
                .margin(6)
                .x_label_area_size(20)
                .y_label_area_size(40)
                .build_cartesian_2d(0..n.max(2), lo..hi)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .y_desc("z-score")
                .draw()?;
            chart
                .draw_series(DashedLineSeries::new(
                    raw.iter().enumerate().map(|(i, v)| (i, *v)),
                    4,
                    3,
                    BLUE.mix(0.5).stroke_width(1),
                ))?
                .label("r (raw)");
            chart
                .draw_series(LineSeries::new(
                    r.filtered.iter().enumerate().map(|(i, v)| (i, *v)),
                    BLUE.stroke_width(2),
                ))?
                .label("r (filtered)");
            chart
                .draw_series(LineSeries::new(
                    c.x_filtered.iter().enumerate().map(|(i, v)| (i, *v)),
                    RED.stroke_width(2),
                ))?
                .label("x (filtered)");
        }
        root.present()?;
        Ok(())
    };
    plot().map_err(|e| {
        SchedError::io(
            format!("render {}", path.display()),
            std::io::Error::other(e.to_string()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(values: impl IntoIterator<Item = f64>, step: u64) -> Series {
        let pts: Vec<(u64, f64)> = values
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i as u64 * step, v))
            .collect();
        Series::from_points(pts.len(), pts)
    }

    /// x follows resource A (planted, plus fast noise the filter removes), B
    /// is independent, C is anti-correlated: A is r̂, C second, B unselected.
    #[test]
    fn planted_correlation_is_found_and_sorted() {
        let n = 400;
        let slow: Vec<f64> = (0..n).map(|i| (i as f64 * 0.05).sin()).collect();
        let noise: Vec<f64> = (0..n)
            .map(|i| if i % 2 == 0 { 0.8 } else { -0.8 })
            .collect();
        let a: Vec<f64> = slow
            .iter()
            .zip(&noise)
            .map(|(s, e)| 100.0 + 10.0 * s + 10.0 * e)
            .collect();
        let c: Vec<f64> = slow
            .iter()
            .enumerate()
            .map(|(i, s)| 50.0 - 5.0 * s + 2.0 * (i as f64 * 0.011).cos())
            .collect();
        let b: Vec<f64> = (0..n).map(|i| ((i * 7919) % 13) as f64).collect();
        let x: Vec<f64> = slow.iter().map(|s| 1e6 + 1e5 * s).collect();
        let step = 10_000_000;
        let p = ProcessSeries {
            process: "pid:1".into(),
            resources: [("a", a), ("b", b), ("c", c)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), series(v, step)))
                .collect(),
            x: series(x, step),
        };
        let params = AnalysisParams {
            step_ns: step,
            filter_order: 4,
            filter_cutoff: 0.2,
            threshold: 0.5,
        };
        let r = analyse(&p, &params).unwrap();
        let names: Vec<&str> = r.resources.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(names, ["a", "c", "b"]);
        assert!(
            r.resources[0].correlation > 0.98,
            "{:?}",
            r.resources[0].correlation
        );
        assert!(
            r.resources[1].correlation < -0.7,
            "{:?}",
            r.resources[1].correlation
        );
        assert!(r.resources[2].correlation.abs() < 0.3);
        assert_eq!(r.r_hat(), Some("a"));
        assert_eq!(r.selected, ["a", "c"]);
        // Unfiltered, the alternating noise lowers Corr(a, x) well below the filtered value.
        let raw = analyse(
            &p,
            &AnalysisParams {
                filter_cutoff: 1.0,
                ..params.clone()
            },
        )
        .unwrap();
        let a_raw = raw
            .resources
            .iter()
            .find(|r| r.resource == "a")
            .unwrap()
            .correlation;
        assert!(a_raw < 0.8, "{a_raw}");
        assert!(r.table().contains("a "));
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("fig.svg");
        render_svg(&r, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") && text.contains("Corr = "));
    }

    #[test]
    fn align_uses_the_common_window() {
        let a = Series::from_points(10, (0..10).map(|i| (i * 10, i as f64)));
        let b = Series::from_points(10, (5..15).map(|i| (i * 10, 2.0 * i as f64)));
        let (t, v) = align(&[&a, &b], 10).unwrap();
        assert_eq!(t.first(), Some(&50));
        assert_eq!(t.last(), Some(&90));
        assert_eq!(v[0], vec![5.0, 6.0, 7.0, 8.0, 9.0]);
        assert_eq!(v[1], vec![10.0, 12.0, 14.0, 16.0, 18.0]);
        let c = Series::from_points(3, (20..23).map(|i| (i * 10, 0.0)));
        assert!(align(&[&a, &c], 10).is_none());
    }

    #[test]
    fn bad_parameters_are_named() {
        let p = ProcessSeries {
            process: "pid:1".into(),
            resources: BTreeMap::new(),
            x: Series::new(4),
        };
        let e = analyse(
            &p,
            &AnalysisParams {
                threshold: 2.0,
                ..AnalysisParams::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("threshold"));
        let e = analyse(&p, &AnalysisParams::default()).unwrap_err();
        assert!(e.to_string().contains("overlap"));
    }
}
