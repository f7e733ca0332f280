//! Performance prediction for a configuration change (thesis 6.4.4: the
//! message RTT after switching OS, predicted at +14 % and later confirmed
//! at +15 %, where a bare test said +183 %).
//!
//! 1. **Fit** ([`fit`]): in a *production* recording, the application metric
//!    *x* of one scope is fitted to one resource *r* by ordinary least
//!    squares, `x = a + b·r`, on the series aligned on one time base (and,
//!    optionally, low-pass filtered with the analysis' Butterworth filter,
//!    which keeps the mean). The resource is r̂, the one most correlated with
//!    *x* ([`crate::analysis::analyse`]), or one the user names. The fit
//!    reports R², n and the residual standard error
//!    `s = √(Σe² / (n − 2))`.
//! 2. **Level** ([`level`]): in a *test* recording made under the changed
//!    configuration (on a test node under replayed production load, with the
//!    change applied), the mean r′ of the same resource, with its standard
//!    deviation and effective sample size.
//! 3. **Prediction** ([`predict`]): `x̂ = a + b·r′` with a prediction
//!    interval at `level` for the mean *x* of a run under the change,
//!    with the standard error
//!
//!    ```text
//!    se² = (n / n_eff) · s² · (1/n + (r′ − r̄)² / Sxx)   OLS: the mean response at r′
//!        + 2 · b² · s_r′² / n′_eff                       r′ is a mean, and so is r in the run
//!        + s² / m_eff                                    the run's own mean residual
//!    ```
//!
//!    where the second term counts the test run's mean r′ and the real
//!    run's own mean r, each with the variance `s_r′² / n′_eff` (a real run
//!    as long as the test run), `n_eff` is [`hwqos_core::stats::effective_sample_size`] of the
//!    fit's residuals (successive samples are not independent; the OLS
//!    variance is inflated by `n / n_eff`), `n′_eff` that of r′ in the test
//!    run, and `m_eff = n′ · n_eff / n` (a run as long as the test run, with
//!    production's residual autocorrelation). The quantile is Student's t
//!    with `n_eff − 2` degrees of freedom (at least 1). An r′ outside the
//!    range of *r* in production is an **extrapolation** and is flagged.
//! 4. **Check** ([`check`]): with a recording where the change is real, the
//!    actual mean *x*, the relative prediction error and whether it lies
//!    inside the interval.
//!
//! [`predict_recordings`] does all of it on frames; `hwqos-sra predict` is
//! its command line. On recordings, every series it uses — production's
//! (r, x) pairs, r′ and the actual run's *x* — keeps only the windows that
//! are **full observations** of the scope ([`full_windows`]): a window whose
//! length is off the recording's nominal interval (a partial first or last
//! tick, a late or missed one), the window in which the scope's process
//! exited and the windows after it (the monitor keeps writing the exited
//! task's counters, as zeros, until it notices) are left out, and counted in
//! [`Dropped`].

use crate::analysis::{self, AnalysisParams, ProcessSeries};
use crate::SchedError;
use hwqos_core::{stats, Frame, Series};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Fewer aligned samples than this cannot be fitted.
pub const MIN_SAMPLES: usize = 10;

/// A window whose length differs from the recording's nominal interval by
/// more than this share of it is not a full observation ([`full_windows`]).
pub const WINDOW_TOLERANCE: f64 = 0.1;

/// Why a window of a scope is not a full observation ([`full_windows`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partial {
    /// The frame's `interval_ns` is off the nominal interval by more than
    /// [`WINDOW_TOLERANCE`]: a partial first or last tick, or a late or
    /// missed one (per-interval counts would not compare).
    OffInterval,
    /// The last window in which the scope's counters ran, when the scope
    /// did not run again before the recording ended: its process exited
    /// during it, so it covers only part of the window.
    ExitWindow,
    /// After the exit window: the monitor reports the exited task's
    /// counters as zeros (not enabled at all) until it drops the scope.
    AfterExit,
}

/// Samples (or, for a fit, windows) of one series left out because they
/// are not full observations ([`full_windows`]), by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Windows off the nominal interval ([`Partial::OffInterval`]).
    pub off_interval: usize,
    /// The window the process exited in ([`Partial::ExitWindow`]; 0 or 1).
    pub exit_window: usize,
    /// Windows after the process exited ([`Partial::AfterExit`]).
    pub after_exit: usize,
}

impl Dropped {
    /// All the samples left out.
    pub fn total(&self) -> usize {
        self.off_interval + self.exit_window + self.after_exit
    }

    fn count(&mut self, why: Partial) {
        match why {
            Partial::OffInterval => self.off_interval += 1,
            Partial::ExitWindow => self.exit_window += 1,
            Partial::AfterExit => self.after_exit += 1,
        }
    }

    /// `"; left out 3 (not full windows: 1 off-interval, 1 exit, 1 after exit)"`, or
    /// nothing when none was.
    fn describe(&self) -> String {
        if self.total() == 0 {
            return String::new();
        }
        format!(
            "; left out {} (not full windows: {} off-interval, {} exit, {} after exit)",
            self.total(),
            self.off_interval,
            self.exit_window,
            self.after_exit
        )
    }
}

/// The rule for which windows of `scope` (`pid:42`, `system`) in a
/// recording are **full observations**: one entry per frame, `None` for a
/// full one, else why not.
///
/// 1. The nominal interval is the median of the frames' positive
///    `interval_ns`. A frame whose interval differs from it by more than
///    [`WINDOW_TOLERANCE`] (10 %) is [`Partial::OffInterval`] for every scope.
/// 2. The scope's counter samples (those with a `counter` reading) say
///    whether its tasks ran in a window (`time_enabled > 0`; a task's
///    counters are enabled only while it runs). When frames follow the last
///    window in which they ran — frames where they did not run at all (the
///    zeros the monitor writes for an exited task) or where the scope is gone
///    — the process exited during that last window: it is
///    [`Partial::ExitWindow`], and every later frame is
///    [`Partial::AfterExit`]. A process that did not run at all in the
///    recording's last windows looks the same and is treated the same.
///    A scope without counter samples (an `app.*` metric alone, `system`
///    without counters) is judged by rule 1 only.
pub fn full_windows(frames: &[Frame], scope: &str) -> Vec<Option<Partial>> {
    let nominal = median_interval(frames).unwrap_or(0) as f64;
    let mut last_ran: Option<usize> = None;
    for (i, f) in frames.iter().enumerate() {
        let ran = f
            .samples
            .iter()
            .any(|s| s.counter.is_some_and(|c| c.time_enabled > 0) && s.scope.to_string() == scope);
        if ran {
            last_ran = Some(i);
        }
    }
    let exit = last_ran.filter(|&l| l + 1 < frames.len());
    frames
        .iter()
        .enumerate()
        .map(|(i, f)| match exit {
            Some(l) if i > l => Some(Partial::AfterExit),
            Some(l) if i == l => Some(Partial::ExitWindow),
            _ if nominal > 0.0
                && (f.interval_ns as f64 - nominal).abs() > WINDOW_TOLERANCE * nominal =>
            {
                Some(Partial::OffInterval)
            }
            _ => None,
        })
        .collect()
}

/// `frames` without the samples of `scope` in the windows that are not full
/// observations of it ([`full_windows`]; other scopes' samples are kept),
/// with the count of its windows (frames that had samples of it) left out.
pub fn without_partial(frames: &[Frame], scope: &str) -> (Vec<Frame>, Dropped) {
    let windows = full_windows(frames, scope);
    let mut dropped = Dropped::default();
    let out = frames
        .iter()
        .zip(&windows)
        .map(|(f, w)| match w {
            None => f.clone(),
            Some(why) => {
                let mut f = f.clone();
                let before = f.samples.len();
                f.samples.retain(|s| s.scope.to_string() != scope);
                if f.samples.len() < before {
                    dropped.count(*why);
                }
                f
            }
        })
        .collect();
    (out, dropped)
}

/// The fit of *x* to one resource in production.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// The scope fitted (`pid:42`).
    pub scope: String,
    /// The resource *r*.
    pub resource: String,
    /// Whether *r* was named by the user (`false`: it is r̂).
    pub named: bool,
    /// Corr(r, x) of the analysis (filtered, normalized series).
    pub correlation: f64,
    /// Intercept a.
    pub a: f64,
    /// Slope b.
    pub b: f64,
    /// Coefficient of determination of the fit.
    pub r_squared: f64,
    /// Samples fitted (steps on the common time base).
    pub n: usize,
    /// Effective sample size of the residuals.
    pub n_eff: f64,
    /// Residual standard error s = √(Σe² / (n − 2)).
    pub residual_se: f64,
    /// Mean of *r*.
    pub r_mean: f64,
    /// Σ(r − r̄)².
    pub r_sxx: f64,
    /// Smallest *r* fitted.
    pub r_min: f64,
    /// Largest *r* fitted.
    pub r_max: f64,
    /// Mean of *x*.
    pub x_mean: f64,
    /// The scope's windows left out of the fit as not full observations
    /// (filled by [`predict_recordings`]; [`fit`] itself takes the series as
    /// given).
    #[serde(default)]
    pub dropped: Dropped,
}

/// The level of a series in a run: mean, spread and effective sample size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Level {
    /// The scope measured.
    pub scope: String,
    /// The metric measured.
    pub metric: String,
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (0 for a constant series).
    pub sd: f64,
    /// Samples.
    pub n: usize,
    /// Effective sample size ([`stats::effective_sample_size`]).
    pub n_eff: f64,
    /// Samples left out as not full observations (filled by
    /// [`predict_recordings`]; [`level`] takes the series as given).
    #[serde(default)]
    pub dropped: Dropped,
}

/// The prediction of *x* under the change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The production fit.
    pub fit: Fit,
    /// r′, the resource in the test run under the change.
    pub test: Level,
    /// x̂ = a + b·r′.
    pub x_predicted: f64,
    /// Relative change of x̂ from production's mean *x*.
    pub change_relative: f64,
    /// Interval level (0.95).
    pub level: f64,
    /// Standard error of the predicted mean.
    pub se: f64,
    /// Lower bound of the prediction interval.
    pub low: f64,
    /// Upper bound of the prediction interval.
    pub high: f64,
    /// Why the prediction is an extrapolation (r′ outside production's range), if it is.
    pub extrapolation: Option<String>,
    /// The check against a run where the change is real, if given.
    pub actual: Option<Actual>,
}

/// The prediction against a run where the change is real.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Actual {
    /// *x* in that run.
    pub x: Level,
    /// (x̂ − actual) / actual.
    pub error_relative: f64,
    /// Whether the actual mean lies inside the prediction interval.
    pub inside: bool,
}

/// Ordinary least squares `x = a + b·r` of one process's *x* against
/// `resource` (or r̂ when `None`), on the aligned series, low-pass filtered
/// when `params.filter_cutoff < 1`. Errors name what is wrong: an unknown
/// resource, no resource above θ, too few samples, a constant *r*.
pub fn fit(
    series: &ProcessSeries,
    resource: Option<&str>,
    params: &AnalysisParams,
) -> Result<Fit, SchedError> {
    let what = format!("scope {}", series.process);
    if let Some(r) = resource {
        if !series.resources.contains_key(r) {
            let known: Vec<&str> = series.resources.keys().map(String::as_str).collect();
            return Err(SchedError::invalid(
                format!("resource `{r}`"),
                format!(
                    "not in {what} (it has: {})",
                    if known.is_empty() {
                        "nothing".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        }
    }
    let corr = analysis::analyse(series, params)?;
    if corr.samples < MIN_SAMPLES {
        return Err(SchedError::invalid(
            what,
            format!(
                "too few samples: {} aligned steps of {} ms, at least {MIN_SAMPLES} needed",
                corr.samples,
                params.step_ns / 1_000_000
            ),
        ));
    }
    let (chosen, named) = match resource {
        Some(r) => (r.to_string(), true),
        None => (
            corr.r_hat()
                .ok_or_else(|| {
                    let best = corr
                        .resources
                        .first()
                        .map(|r| format!("; the best is `{}` at {:.3}", r.resource, r.correlation))
                        .unwrap_or_default();
                    SchedError::invalid(
                        what.clone(),
                        format!(
                            "no resource correlates with x at |Corr| ≥ θ = {}{best} (name one with --resource)",
                            params.threshold
                        ),
                    )
                })?
                .to_string(),
            false,
        ),
    };
    let rc = corr
        .resources
        .iter()
        .find(|r| r.resource == chosen)
        .expect("the analysis covers every resource");
    let r = analysis::filtered(&rc.raw, params);
    let x = analysis::filtered(&corr.x_raw, params);
    let n = r.len();
    let r_mean = stats::mean(&r).unwrap_or(0.0);
    let x_mean = stats::mean(&x).unwrap_or(0.0);
    let sxx: f64 = r.iter().map(|v| (v - r_mean).powi(2)).sum();
    let sxy: f64 = r
        .iter()
        .zip(&x)
        .map(|(rv, xv)| (rv - r_mean) * (xv - x_mean))
        .sum();
    let syy: f64 = x.iter().map(|v| (v - x_mean).powi(2)).sum();
    let r_min = r.iter().copied().fold(f64::INFINITY, f64::min);
    let r_max = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if sxx.is_nan() || sxx <= 0.0 || r_max - r_min <= 1e-12 * r_mean.abs().max(1.0) {
        return Err(SchedError::invalid(
            format!("resource `{chosen}` in {what}"),
            format!("constant over the {n} samples ({r_mean}): x cannot be fitted to it"),
        ));
    }
    let b = sxy / sxx;
    let a = x_mean - b * r_mean;
    let residuals: Vec<f64> = r.iter().zip(&x).map(|(rv, xv)| xv - a - b * rv).collect();
    let sse: f64 = residuals.iter().map(|e| e * e).sum();
    let residual_se = (sse / (n - 2) as f64).sqrt();
    let r_squared = if syy > 0.0 { 1.0 - sse / syy } else { 1.0 };
    let n_eff = stats::effective_sample_size(&residuals).unwrap_or(n as f64);
    Ok(Fit {
        scope: series.process.clone(),
        resource: chosen,
        named,
        correlation: rc.correlation,
        a,
        b,
        r_squared,
        n,
        n_eff,
        residual_se,
        r_mean,
        r_sxx: sxx,
        r_min,
        r_max,
        x_mean,
        dropped: Dropped::default(),
    })
}

/// The level of `series` (a metric of one scope in one run).
pub fn level(scope: &str, metric: &str, series: &Series) -> Result<Level, SchedError> {
    let v = series.values();
    if v.len() < 2 {
        return Err(SchedError::invalid(
            format!("`{metric}` of {scope}"),
            format!("too few samples: {} (at least 2 needed)", v.len()),
        ));
    }
    Ok(Level {
        scope: scope.to_string(),
        metric: metric.to_string(),
        mean: stats::mean(&v).unwrap_or(0.0),
        sd: stats::stddev(&v).unwrap_or(0.0),
        n: v.len(),
        n_eff: stats::effective_sample_size(&v).unwrap_or(v.len() as f64),
        dropped: Dropped::default(),
    })
}

/// x̂ at r′ with its prediction interval at `level` (module docs).
pub fn predict(fit: &Fit, test: &Level, level: f64) -> Result<Prediction, SchedError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(SchedError::invalid(
            "level",
            format!("{level} is not in (0, 1)"),
        ));
    }
    let n = fit.n as f64;
    let s2 = fit.residual_se.powi(2);
    let rp = test.mean;
    let ols = (n / fit.n_eff) * s2 * (1.0 / n + (rp - fit.r_mean).powi(2) / fit.r_sxx);
    let r_noise = 2.0 * fit.b.powi(2) * test.sd.powi(2) / test.n_eff.max(1.0);
    let m_eff = (test.n as f64 * fit.n_eff / n).max(1.0);
    let se = (ols + r_noise + s2 / m_eff).sqrt();
    let dof = (fit.n_eff - 2.0).max(1.0);
    let t = stats::student_t_quantile(0.5 + level / 2.0, dof)
        .ok_or_else(|| SchedError::invalid("level", format!("no t quantile for {level}")))?;
    let x_predicted = fit.a + fit.b * rp;
    let extrapolation = (rp < fit.r_min || rp > fit.r_max).then(|| {
        format!(
            "r′ = {rp:.6} of `{}` lies outside production's range [{:.6}, {:.6}]: the linear relation is extrapolated",
            fit.resource, fit.r_min, fit.r_max
        )
    });
    Ok(Prediction {
        fit: fit.clone(),
        test: test.clone(),
        x_predicted,
        change_relative: if fit.x_mean != 0.0 {
            x_predicted / fit.x_mean - 1.0
        } else {
            f64::NAN
        },
        level,
        se,
        low: x_predicted - t * se,
        high: x_predicted + t * se,
        extrapolation,
        actual: None,
    })
}

/// The prediction checked against the mean *x* of a run where the change is real.
pub fn check(p: &Prediction, x: Level) -> Actual {
    Actual {
        error_relative: if x.mean != 0.0 {
            (p.x_predicted - x.mean) / x.mean
        } else {
            f64::NAN
        },
        inside: p.low <= x.mean && x.mean <= p.high,
        x,
    }
}

/// Where the inputs of [`predict_recordings`] come from.
#[derive(Clone, Debug)]
pub struct PredictOptions {
    /// The application metric *x* (an `app.*` metric).
    pub x_metric: String,
    /// The resource to fit to (`None`: r̂).
    pub resource: Option<String>,
    /// Production scope (`None`: the only process with *x* and resources).
    pub scope: Option<String>,
    /// Scope in the test run (`None`: the one with production's process
    /// name, else the only one with the resource).
    pub test_scope: Option<String>,
    /// Scope in the actual run (`None`: as for the test run, with *x*).
    pub actual_scope: Option<String>,
    /// Alignment step, filter and θ.
    pub analysis: AnalysisParams,
    /// Interval level.
    pub level: f64,
}

/// A metric of every scope in `frames` (process scopes and `system`).
fn metric_series(frames: &[Frame], metric: &str) -> BTreeMap<String, Series> {
    let mut out: BTreeMap<String, Series> = BTreeMap::new();
    for f in frames {
        for s in &f.samples {
            if s.metric.as_str() == metric {
                out.entry(s.scope.to_string())
                    .or_insert_with(|| Series::new(frames.len().max(1)))
                    .push(s.time.mono_ns, s.value);
            }
        }
    }
    out
}

fn labels(frames: &[Frame]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for f in frames {
        for l in &f.labels {
            out.insert(l.scope.to_string(), l.name.clone());
        }
    }
    out
}

/// The recording's nominal interval: the median of its frames' positive
/// `interval_ns` (the first frame's 0 is no interval).
fn median_interval(frames: &[Frame]) -> Option<u64> {
    let mut v: Vec<u64> = frames
        .iter()
        .map(|f| f.interval_ns)
        .filter(|&i| i > 0)
        .collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// `metric` of `scope` in its full windows ([`full_windows`]), with the
/// count of its samples left out.
fn full_series(frames: &[Frame], scope: &str, metric: &str) -> (Series, Dropped) {
    let windows = full_windows(frames, scope);
    let mut out = Series::new(frames.len().max(1));
    let mut dropped = Dropped::default();
    for (f, w) in frames.iter().zip(&windows) {
        for s in &f.samples {
            if s.metric.as_str() == metric && s.scope.to_string() == scope {
                match w {
                    None => out.push(s.time.mono_ns, s.value),
                    Some(why) => dropped.count(*why),
                }
            }
        }
    }
    (out, dropped)
}

/// Picks the scope of `metric` in another run (the named one, else the one
/// labelled like production's scope, else the only one that has `metric`)
/// and returns it with the series in its full windows ([`full_series`]).
fn pick_scope(
    run: &str,
    frames: &[Frame],
    metric: &str,
    named: Option<&str>,
    prod_label: Option<&String>,
    system_fallback: bool,
) -> Result<(String, Series, Dropped), SchedError> {
    let (name, source) = pick_scope_key(run, frames, metric, named, prod_label, system_fallback)?;
    let (series, dropped) = full_series(frames, &source, metric);
    Ok((name, series, dropped))
}

/// [`pick_scope`]'s choice: the scope's name and the scope the series comes
/// from (`system` when a named process has no `metric` and `system_fallback`).
fn pick_scope_key(
    run: &str,
    frames: &[Frame],
    metric: &str,
    named: Option<&str>,
    prod_label: Option<&String>,
    system_fallback: bool,
) -> Result<(String, String), SchedError> {
    let all = metric_series(frames, metric);
    if let Some(s) = named {
        return match all.get(s) {
            Some(_) => Ok((s.to_string(), s.to_string())),
            None if system_fallback && all.contains_key("system") => {
                Ok((s.to_string(), "system".to_string()))
            }
            None => Err(SchedError::invalid(
                format!("{run}: scope `{s}`"),
                format!("has no `{metric}` samples"),
            )),
        };
    }
    if all.is_empty() {
        return Err(SchedError::invalid(
            format!("{run}: metric `{metric}`"),
            "not in the recording",
        ));
    }
    let lbl = labels(frames);
    let by_label: Vec<&String> = all
        .keys()
        .filter(|k| prod_label.is_some() && lbl.get(*k) == prod_label)
        .collect();
    if by_label.len() == 1 {
        let k = by_label[0].clone();
        return Ok((k.clone(), k));
    }
    let processes: Vec<String> = all.keys().filter(|k| *k != "system").cloned().collect();
    let key = match processes.len() {
        1 => processes[0].clone(),
        0 => "system".to_string(),
        _ => {
            return Err(SchedError::invalid(
                format!("{run}: metric `{metric}`"),
                format!(
                    "in {} scopes ({}); pick one",
                    processes.len(),
                    processes.join(", ")
                ),
            ))
        }
    };
    Ok((key.clone(), key))
}

/// The whole workflow on frames: fit in `production`, r′ from `test`, and
/// the check against `actual` when given. Errors name the run, the scope
/// or the metric at fault.
pub fn predict_recordings(
    production: &[Frame],
    test: &[Frame],
    actual: Option<&[Frame]>,
    o: &PredictOptions,
) -> Result<Prediction, SchedError> {
    let mut procs = analysis::from_frames(production, &o.x_metric);
    if procs.is_empty() {
        let has_x = production
            .iter()
            .any(|f| f.samples.iter().any(|s| s.metric.as_str() == o.x_metric));
        return Err(SchedError::invalid(
            format!("production: x metric `{}`", o.x_metric),
            if has_x {
                "no process scope has both resource samples and x"
            } else {
                "not in the recording"
            },
        ));
    }
    let series = match &o.scope {
        Some(s) => procs.remove(s).ok_or_else(|| {
            SchedError::invalid(
                format!("production: scope `{s}`"),
                format!(
                    "has no x and resources (scopes with both: {})",
                    procs.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })?,
        None if procs.len() == 1 => procs.into_values().next().expect("one"),
        None => {
            return Err(SchedError::invalid(
                "production",
                format!(
                    "{} process scopes have x and resources ({}); pick one with --scope",
                    procs.len(),
                    procs.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ))
        }
    };
    if let (Some(p), Some(t)) = (median_interval(production), median_interval(test)) {
        if p.abs_diff(t) as f64 > 0.05 * p as f64 {
            return Err(SchedError::invalid(
                "test",
                format!(
                    "its sampling interval ({} ms) differs from production's ({} ms): per-interval resource counts would not compare",
                    t as f64 / 1e6,
                    p as f64 / 1e6
                ),
            ));
        }
    }
    // The fit sees the scope's full windows only.
    let (full, dropped) = without_partial(production, &series.process);
    let series = analysis::from_frames(&full, &o.x_metric)
        .remove(&series.process)
        .ok_or_else(|| {
            SchedError::invalid(
                format!("production: scope {}", series.process),
                format!(
                    "no x and resources left in full windows ({} left out)",
                    dropped.total()
                ),
            )
        })?;
    let mut f = fit(&series, o.resource.as_deref(), &o.analysis)?;
    f.dropped = dropped;
    let prod_label = labels(production).get(&f.scope).cloned();
    let (ts, tseries, tdropped) = pick_scope(
        "test",
        test,
        &f.resource,
        o.test_scope.as_deref(),
        prod_label.as_ref(),
        false,
    )?;
    let lv = level(&format!("test {ts}"), &f.resource, &tseries)?;
    let lv = Level {
        scope: ts,
        dropped: tdropped,
        ..lv
    };
    let mut p = predict(&f, &lv, o.level)?;
    if let Some(actual) = actual {
        let (s, xs, xdropped) = pick_scope(
            "actual",
            actual,
            &o.x_metric,
            o.actual_scope.as_deref(),
            prod_label.as_ref(),
            true,
        )?;
        let x = level(&format!("actual {s}"), &o.x_metric, &xs)?;
        p.actual = Some(check(
            &p,
            Level {
                scope: s,
                dropped: xdropped,
                ..x
            },
        ));
    }
    Ok(p)
}

impl Prediction {
    /// A plain-text report: the fit, r′, x̂ with its interval, the warning
    /// and the check.
    pub fn text(&self) -> String {
        let f = &self.fit;
        let mut out = format!(
            "fit (production, {}): x = {:.6} + {:.6} · {}   R² {:.3}, n {}, n_eff {:.1}, residual SE {:.6}, Corr {:.3}{}\n",
            f.scope,
            f.a,
            f.b,
            f.resource,
            f.r_squared,
            f.n,
            f.n_eff,
            f.residual_se,
            f.correlation,
            if f.named { " (named)" } else { " (r̂)" }
        );
        out.push_str(&format!(
            "production: mean r {:.6} (range [{:.6}, {:.6}]), mean x {:.6}{}\n",
            f.r_mean,
            f.r_min,
            f.r_max,
            f.x_mean,
            f.dropped.describe()
        ));
        out.push_str(&format!(
            "test ({}): mean r′ {:.6} (sd {:.6}, n {}, n_eff {:.1}{})\n",
            self.test.scope,
            self.test.mean,
            self.test.sd,
            self.test.n,
            self.test.n_eff,
            self.test.dropped.describe()
        ));
        out.push_str(&format!(
            "predicted mean x: {:.6}  {:.0} % interval [{:.6}, {:.6}]  ({:+.1} % vs production)\n",
            self.x_predicted,
            self.level * 100.0,
            self.low,
            self.high,
            self.change_relative * 100.0
        ));
        if let Some(w) = &self.extrapolation {
            out.push_str(&format!("warning: extrapolation: {w}\n"));
        }
        if let Some(a) = &self.actual {
            out.push_str(&format!(
                "actual ({}): mean x {:.6} (n {}{}); prediction error {:+.1} %, {} the interval\n",
                a.x.scope,
                a.x.mean,
                a.x.n,
                a.x.dropped.describe(),
                a.error_relative * 100.0,
                if a.inside { "inside" } else { "outside" }
            ));
        }
        out
    }
}

/// The filtered `(r, x)` pairs of `resource` and *x* in one scope of a run,
/// in its full windows, as [`fit`] sees them (`None` when the run has no such scope or resource).
fn scope_points(
    frames: &[Frame],
    x_metric: &str,
    scope: &str,
    resource: &str,
    params: &AnalysisParams,
) -> Option<Vec<(f64, f64)>> {
    let (full, _) = without_partial(frames, scope);
    let mut procs = analysis::from_frames(&full, x_metric);
    let series = procs.remove(scope)?;
    let corr = analysis::analyse(&series, params).ok()?;
    let rc = corr.resources.iter().find(|r| r.resource == resource)?;
    let r = analysis::filtered(&rc.raw, params);
    let x = analysis::filtered(&corr.x_raw, params);
    Some(r.into_iter().zip(x).collect())
}

/// Renders a prediction as an SVG scatter plot (`hwqos-sra predict --plot`):
/// production's `(r, x)` pairs as the fit saw them (aligned, filtered), the
/// fitted line `x = a + b·r`, r′ of the test run with x̂ and its prediction
/// interval, and, with `actual`, the actual run's mean *x* (a horizontal
/// line) and its own `(r, x)` pairs where the run has the resource. The
/// legend names each series; the title names *x*, the scope and the
/// resource (whose name says the counter kind: `hw.*`, `sw.*`, …).
pub fn render_svg(
    p: &Prediction,
    production: &[Frame],
    actual: Option<&[Frame]>,
    o: &PredictOptions,
    path: &std::path::Path,
) -> Result<(), SchedError> {
    use plotters::prelude::*;
    let f = &p.fit;
    let prod = scope_points(production, &o.x_metric, &f.scope, &f.resource, &o.analysis)
        .ok_or_else(|| {
            SchedError::invalid(
                format!("production: scope {}", f.scope),
                format!("has no `{}` and x to plot", f.resource),
            )
        })?;
    let act: Option<(f64, Vec<(f64, f64)>)> = p.actual.as_ref().map(|a| {
        let pts = actual
            .and_then(|fr| scope_points(fr, &o.x_metric, &a.x.scope, &f.resource, &o.analysis))
            .unwrap_or_default();
        (a.x.mean, pts)
    });
    let rp = p.test.mean;
    let act_pts = act.as_ref().map(|a| a.1.as_slice()).unwrap_or(&[]);
    let rs = prod
        .iter()
        .chain(act_pts)
        .map(|q| q.0)
        .chain([rp, f.r_min, f.r_max]);
    let (r_lo, r_hi) = rs.fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(v), h.max(v)));
    let xs = prod
        .iter()
        .chain(act_pts)
        .map(|q| q.1)
        .chain([p.low, p.high, p.x_predicted])
        .chain(act.as_ref().map(|a| a.0));
    let (x_lo, x_hi) = xs.fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(v), h.max(v)));
    let pad = |lo: f64, hi: f64| {
        let d = if hi > lo {
            (hi - lo) * 0.05
        } else {
            lo.abs().max(1.0) * 0.05
        };
        (lo - d, hi + d)
    };
    let (r_lo, r_hi) = pad(r_lo, r_hi);
    let (x_lo, x_hi) = pad(x_lo, x_hi);
    let plot = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{}: {} against {} (R² {:.3}, n {}, n_eff {:.1})",
                    f.scope, o.x_metric, f.resource, f.r_squared, f.n, f.n_eff
                ),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(r_lo..r_hi, x_lo..x_hi)?;
        chart
            .configure_mesh()
            .x_desc(f.resource.as_str())
            .y_desc(o.x_metric.as_str())
            .draw()?;
        chart
            .draw_series(
                prod.iter()
                    .map(|&(r, x)| Circle::new((r, x), 2, BLUE.mix(0.45).filled())),
            )?
            .label("production (r, x)")
            .legend(|(x, y)| Circle::new((x, y), 3, BLUE.filled()));
        if !act_pts.is_empty() {
            chart
                .draw_series(
                    act_pts
                        .iter()
                        .map(|&(r, x)| TriangleMarker::new((r, x), 3, GREEN.mix(0.5).filled())),
                )?
                .label("actual run (r, x)")
                .legend(|(x, y)| TriangleMarker::new((x, y), 4, GREEN.filled()));
        }
        chart
            .draw_series(LineSeries::new(
                [r_lo, r_hi].map(|r| (r, f.a + f.b * r)),
                BLACK.stroke_width(2),
            ))?
            .label(format!("fit x = {:.4} + {:.4}·r", f.a, f.b))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
        chart
            .draw_series([PathElement::new(
                [(rp, p.low), (rp, p.high)],
                RED.stroke_width(3),
            )])?
            .label(format!(
                "test r′ {:.4}: x̂ {:.4}, {:.0} % interval [{:.4}, {:.4}]{}",
                rp,
                p.x_predicted,
                p.level * 100.0,
                p.low,
                p.high,
                if p.extrapolation.is_some() {
                    " (extrapolated)"
                } else {
                    ""
                }
            ))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED.stroke_width(3)));
        chart.draw_series([Circle::new((rp, p.x_predicted), 5, RED.filled())])?;
        if let Some((mean, _)) = &act {
            chart
                .draw_series(DashedLineSeries::new(
                    [(r_lo, *mean), (r_hi, *mean)],
                    6,
                    4,
                    GREEN.stroke_width(2),
                ))?
                .label(format!("actual run: mean x {mean:.4}"))
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], GREEN.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            // The corner the fitted line leaves free.
            .position(if f.b >= 0.0 {
                SeriesLabelPosition::UpperLeft
            } else {
                SeriesLabelPosition::UpperRight
            })
            .draw()?;
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
    use hwqos_core::{MetricName, Sample, Scope, ScopeLabel, Timestamp};

    /// xorshift64* and Box–Muller: seeded normal noise.
    struct Rng(u64);
    impl Rng {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            ((self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }
        fn normal(&mut self) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    const STEP: u64 = 100_000_000;

    fn series(values: &[f64]) -> Series {
        Series::from_points(
            values.len(),
            values
                .iter()
                .enumerate()
                .map(|(i, v)| (i as u64 * STEP, *v)),
        )
    }

    /// r sweeps 0..10 slowly with noise; x = 3 + 2 r + AR(1) noise (φ, sd σ).
    fn production(seed: u64, n: usize, phi: f64, sigma: f64) -> (Vec<f64>, Vec<f64>) {
        let mut g = Rng(seed);
        let mut e = 0.0;
        let r: Vec<f64> = (0..n)
            .map(|i| 5.0 + 4.0 * (i as f64 * 0.07).sin() + 0.5 * g.normal())
            .collect();
        let x = r
            .iter()
            .map(|rv| {
                e = phi * e + sigma * (1.0 - phi * phi).sqrt() * g.normal();
                3.0 + 2.0 * rv + e
            })
            .collect();
        (r, x)
    }

    fn process(r: &[f64], x: &[f64]) -> ProcessSeries {
        ProcessSeries {
            process: "pid:7".into(),
            resources: [
                ("sw.context_switches".to_string(), series(r)),
                ("sw.page_faults".to_string(), series(&vec![4.0; r.len()])),
            ]
            .into_iter()
            .collect(),
            x: series(x),
        }
    }

    fn unfiltered() -> AnalysisParams {
        AnalysisParams {
            step_ns: STEP,
            filter_cutoff: 1.0,
            ..AnalysisParams::default()
        }
    }

    #[test]
    fn noise_free_line_is_recovered_exactly() {
        let r: Vec<f64> = (0..50).map(|i| (i % 11) as f64).collect();
        let x: Vec<f64> = r.iter().map(|v| 3.0 + 2.0 * v).collect();
        let f = fit(&process(&r, &x), None, &unfiltered()).unwrap();
        assert_eq!(f.resource, "sw.context_switches");
        assert!(!f.named);
        assert!(
            (f.a - 3.0).abs() < 1e-9 && (f.b - 2.0).abs() < 1e-9,
            "{f:?}"
        );
        assert!((f.r_squared - 1.0).abs() < 1e-12 && f.residual_se < 1e-9);
        assert_eq!((f.n, f.r_min, f.r_max), (50, 0.0, 10.0));
    }

    #[test]
    fn noisy_line_recovers_a_and_b_and_the_interval_covers_the_truth() {
        let (r, x) = production(42, 400, 0.0, 0.5);
        let f = fit(&process(&r, &x), None, &unfiltered()).unwrap();
        assert!((f.a - 3.0).abs() < 0.15, "a {}", f.a);
        assert!((f.b - 2.0).abs() < 0.03, "b {}", f.b);
        assert!((f.residual_se - 0.5).abs() < 0.05, "s {}", f.residual_se);
        assert!(f.r_squared > 0.95);
        // The same fit, filtered (the CLI's default), recovers the line too.
        let ff = fit(&process(&r, &x), None, &AnalysisParams::default()).unwrap();
        assert!(
            (ff.a - 3.0).abs() < 0.3 && (ff.b - 2.0).abs() < 0.06,
            "{ff:?}"
        );
        // r′ = 6 in the test run: the truth is 15.
        let mut g = Rng(7);
        let test: Vec<f64> = (0..100).map(|_| 6.0 + 0.5 * g.normal()).collect();
        let lv = level("pid:9", "sw.context_switches", &series(&test)).unwrap();
        let p = predict(&f, &lv, 0.95).unwrap();
        assert!(p.low < 15.0 && 15.0 < p.high, "{p:?}");
        assert!((p.x_predicted - (f.a + f.b * lv.mean)).abs() < 1e-12);
        assert!(p.high - p.low < 1.0, "too wide to be useful: {p:?}");
        assert!(p.extrapolation.is_none());
        let actual = check(
            &p,
            Level {
                mean: 15.0,
                ..lv.clone()
            },
        );
        assert!(actual.inside);
        assert!((actual.error_relative - (p.x_predicted - 15.0) / 15.0).abs() < 1e-12);
        assert!(!check(&p, Level { mean: 17.0, ..lv }).inside);
    }

    /// The interval is calibrated on autocorrelated residuals: over 200
    /// seeded production / test / real runs with AR(1) noise (φ = 0.8), the
    /// real run's mean x lies inside the 95 % interval in 90–99.5 % of them;
    /// without the n/n_eff widening it would cover far less (checked too).
    #[test]
    fn prediction_interval_is_calibrated_on_autocorrelated_noise() {
        let (mut inside, mut inside_naive) = (0, 0);
        for seed in 1..=200u64 {
            let (r, x) = production(seed, 300, 0.8, 1.0);
            let f = fit(&process(&r, &x), None, &unfiltered()).unwrap();
            let mut g = Rng(seed * 1_000_003);
            let run = |g: &mut Rng| -> (Vec<f64>, Vec<f64>) {
                let mut e = 0.0;
                let r: Vec<f64> = (0..100).map(|_| 6.0 + 0.5 * g.normal()).collect();
                let x = r
                    .iter()
                    .map(|rv| {
                        e = 0.8 * e + 0.6 * g.normal();
                        3.0 + 2.0 * rv + e
                    })
                    .collect();
                (r, x)
            };
            let (test_r, _) = run(&mut g);
            let (_, real_x) = run(&mut g);
            let lv = level("t", "r", &series(&test_r)).unwrap();
            let p = predict(&f, &lv, 0.95).unwrap();
            let truth = stats::mean(&real_x).unwrap();
            inside += usize::from(p.low <= truth && truth <= p.high);
            let naive = Fit {
                n_eff: f.n as f64,
                ..f.clone()
            };
            let lv_naive = Level {
                n_eff: lv.n as f64,
                ..lv.clone()
            };
            let q = predict(&naive, &lv_naive, 0.95).unwrap();
            inside_naive += usize::from(q.low <= truth && truth <= q.high);
        }
        assert!((180..=199).contains(&inside), "coverage {inside}/200");
        assert!(inside_naive < 170, "naive coverage {inside_naive}/200");
    }

    #[test]
    fn extrapolation_is_flagged() {
        let (r, x) = production(3, 200, 0.0, 0.5);
        let f = fit(&process(&r, &x), None, &unfiltered()).unwrap();
        let lv = level("t", "r", &series(&[20.0, 20.5, 19.5, 20.0])).unwrap();
        let p = predict(&f, &lv, 0.95).unwrap();
        let w = p.extrapolation.as_deref().unwrap();
        assert!(w.contains("outside production's range"), "{w}");
        assert!(p.text().contains("warning: extrapolation"));
        assert!(p.low < 43.0 && 43.0 < p.high, "{p:?}");
    }

    #[test]
    fn bad_inputs_are_named() {
        let (r, x) = production(5, 200, 0.0, 0.5);
        let e = fit(&process(&r, &x), Some("sw.nope"), &unfiltered()).unwrap_err();
        assert!(e.to_string().contains("`sw.nope`") && e.to_string().contains("sw.page_faults"));
        let e = fit(&process(&r, &x), Some("sw.page_faults"), &unfiltered()).unwrap_err();
        assert!(e.to_string().contains("constant"), "{e}");
        let e = fit(&process(&r[..6], &x[..6]), None, &unfiltered()).unwrap_err();
        assert!(e.to_string().contains("too few samples"), "{e}");
        // Nothing above θ: x is noise.
        let mut g = Rng(9);
        let noise: Vec<f64> = (0..200).map(|_| g.normal()).collect();
        let e = fit(&process(&r, &noise), None, &unfiltered()).unwrap_err();
        assert!(e.to_string().contains("--resource"), "{e}");
        assert!(level("t", "r", &series(&[1.0])).is_err());
        let lv = level("t", "r", &series(&[1.0, 2.0])).unwrap();
        let f = fit(&process(&r, &x), None, &unfiltered()).unwrap();
        assert!(predict(&f, &lv, 1.5)
            .unwrap_err()
            .to_string()
            .contains("level"));
    }

    fn frames(pid: u32, comm: &str, rows: &[(f64, Option<f64>)]) -> Vec<Frame> {
        rows.iter()
            .enumerate()
            .map(|(i, (r, x))| {
                let time = Timestamp {
                    mono_ns: i as u64 * STEP,
                    wall_ns: 0,
                };
                let sample = |m: &str, v: f64| Sample {
                    time,
                    scope: Scope::Process { pid },
                    metric: MetricName::new(m).unwrap(),
                    value: v,
                    counter: None,
                };
                let mut samples = vec![sample("sw.context_switches", *r)];
                if let Some(x) = x {
                    samples.push(sample("app.latency_us", *x));
                }
                Frame {
                    seq: i as u64,
                    time,
                    interval_ns: STEP,
                    samples,
                    labels: vec![ScopeLabel {
                        scope: Scope::Process { pid },
                        name: comm.into(),
                    }],
                }
            })
            .collect()
    }

    fn options() -> PredictOptions {
        PredictOptions {
            x_metric: "app.latency_us".into(),
            resource: None,
            scope: None,
            test_scope: None,
            actual_scope: None,
            analysis: unfiltered(),
            level: 0.95,
        }
    }

    #[test]
    fn recordings_pick_scopes_by_name_and_check_the_actual_run() {
        let (r, x) = production(11, 300, 0.0, 0.5);
        let prod = frames(
            10,
            "victim",
            &r.iter()
                .zip(&x)
                .map(|(r, x)| (*r, Some(*x)))
                .collect::<Vec<_>>(),
        );
        // The test run has two processes with the resource: the victim
        // (renamed pid) at r′ = 7 and a co-runner at 50.
        let mut test = frames(20, "victim", &vec![(7.0, None); 50]);
        for (f, g) in test
            .iter_mut()
            .zip(frames(21, "hog", &vec![(50.0, None); 50]))
        {
            f.samples.extend(g.samples);
            f.labels.extend(g.labels);
        }
        let actual = frames(30, "victim", &vec![(7.0, Some(17.0)); 50]);
        let p = predict_recordings(&prod, &test, Some(&actual), &options()).unwrap();
        assert_eq!(p.test.scope, "pid:20");
        assert!((p.test.mean - 7.0).abs() < 1e-12);
        assert!((p.x_predicted - 17.0).abs() < 0.1, "{}", p.x_predicted);
        let a = p.actual.as_ref().unwrap();
        assert_eq!(a.x.scope, "pid:30");
        assert!(a.inside && a.error_relative.abs() < 0.01, "{a:?}");
        assert!(p.text().contains("inside the interval"));
        // The plot: every production pair (300, unfiltered) and every actual
        // pair (50) drawn once, and each series named in the legend.
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("predict.svg");
        render_svg(&p, &prod, Some(&actual), &options(), &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg"), "{}", &text[..100]);
        let prod_dots = text
            .lines()
            .filter(|l| l.contains("<circle") && l.contains("r=\"2\""))
            .count();
        assert_eq!(prod_dots, 300);
        for label in [
            "production (r, x)",
            "actual run (r, x)",
            "fit x = ",
            "test r′ 7.0000",
            "actual run: mean x 17.0000",
            "app.latency_us against sw.context_switches",
        ] {
            assert!(text.contains(label), "no `{label}` in the SVG");
        }
        // Named test scope: the co-runner, far outside production's range.
        let o = PredictOptions {
            test_scope: Some("pid:21".into()),
            ..options()
        };
        let p = predict_recordings(&prod, &test, None, &o).unwrap();
        assert!(p.extrapolation.is_some());
        // Without names to match, two candidates are an error naming both.
        let mut o = options();
        o.test_scope = None;
        let mut unnamed = test.clone();
        unnamed.iter_mut().for_each(|f| f.labels.clear());
        let e = predict_recordings(&prod, &unnamed, None, &o).unwrap_err();
        assert!(e.to_string().contains("pid:20, pid:21"), "{e}");
        // Missing x, a different sampling interval, a missing test resource.
        let o = PredictOptions {
            x_metric: "app.missing".into(),
            ..options()
        };
        let e = predict_recordings(&prod, &test, None, &o).unwrap_err();
        assert!(e.to_string().contains("`app.missing`"), "{e}");
        let mut slow = test.clone();
        slow.iter_mut().for_each(|f| f.interval_ns = 2 * STEP);
        let e = predict_recordings(&prod, &slow, None, &options()).unwrap_err();
        assert!(e.to_string().contains("sampling interval"), "{e}");
        let e = predict_recordings(&prod, &actual[..0], None, &options()).unwrap_err();
        assert!(e.to_string().contains("not in the recording"), "{e}");
    }

    /// A window of a monitor recording: the frame's interval, the scope's
    /// counter `sw.context_switches` (value, time_enabled; `None`: the scope
    /// is gone) and x.
    type Window = (u64, Option<(f64, u64)>, Option<f64>);

    /// Frames as hwqos-monitor writes them for one process: counter samples
    /// with their readings, a first frame with interval 0 and no samples.
    fn monitored(pid: u32, windows: &[Window]) -> Vec<Frame> {
        let mut t = 1_000_000_000u64;
        let mut out = vec![Frame {
            seq: 0,
            time: Timestamp {
                mono_ns: t,
                wall_ns: 0,
            },
            interval_ns: 0,
            samples: vec![],
            labels: vec![],
        }];
        for (i, (interval, r, x)) in windows.iter().enumerate() {
            t += interval;
            let time = Timestamp {
                mono_ns: t,
                wall_ns: 0,
            };
            let scope = Scope::Process { pid };
            let mut samples = Vec::new();
            if let Some((v, enabled)) = r {
                samples.push(Sample {
                    time,
                    scope: scope.clone(),
                    metric: MetricName::new("sw.context_switches").unwrap(),
                    value: *v,
                    counter: Some(hwqos_core::CounterReading {
                        raw: *v as u64,
                        time_enabled: *enabled,
                        time_running: *enabled,
                    }),
                });
            }
            if let Some(x) = x {
                samples.push(Sample::gauge(
                    time,
                    scope.clone(),
                    MetricName::new("app.latency_us").unwrap(),
                    *x,
                ));
            }
            out.push(Frame {
                seq: i as u64 + 1,
                time,
                interval_ns: *interval,
                labels: if r.is_some() {
                    vec![ScopeLabel {
                        scope,
                        name: "victim".into(),
                    }]
                } else {
                    vec![]
                },
                samples,
            });
        }
        out
    }

    /// The rule on a recording with every kind of window that is not a full
    /// observation: a partial first tick, a late tick, the exit window, the
    /// zeros after the exit and the frame where the scope is gone.
    #[test]
    fn full_windows_names_each_window_that_is_not_a_full_observation() {
        let ms = 1_000_000u64;
        let frames = monitored(
            5,
            &[
                (40 * ms, Some((3.0, 10 * ms)), None), // partial first tick
                (100 * ms, Some((8.0, 30 * ms)), None),
                (102 * ms, Some((6.0, 30 * ms)), None), // within 10 %
                (130 * ms, Some((9.0, 40 * ms)), None), // late tick
                (100 * ms, Some((0.0, 0)), None),       // idle, alive: kept
                (100 * ms, Some((8.0, 30 * ms)), None),
                (100 * ms, Some((2.0, 5 * ms)), None), // exits here
                (100 * ms, Some((0.0, 0)), Some(9.0)), // zeros after the exit
                (100 * ms, None, None),                // the scope is gone
            ],
        );
        use Partial::*;
        assert_eq!(
            full_windows(&frames, "pid:5"),
            vec![
                Some(OffInterval), // the monitor's first frame (interval 0)
                Some(OffInterval),
                None,
                None,
                Some(OffInterval),
                None,
                None,
                Some(ExitWindow),
                Some(AfterExit),
                Some(AfterExit),
            ]
        );
        // Another scope (without counters here) is judged by the interval only.
        assert_eq!(
            full_windows(&frames, "system")
                .iter()
                .filter(|w| w.is_some())
                .count(),
            3
        );
        let (kept, dropped) = without_partial(&frames, "pid:5");
        assert_eq!(
            dropped,
            Dropped {
                off_interval: 2,
                exit_window: 1,
                after_exit: 1
            }
        );
        assert_eq!(kept.iter().map(|f| f.samples.len()).sum::<usize>(), 4);
        // A process that ran in the recording's last window did not exit.
        let alive = monitored(5, &[(100 * ms, Some((4.0, 30 * ms)), None); 4]);
        assert!(full_windows(&alive, "pid:5")
            .iter()
            .skip(1)
            .all(Option::is_none));
    }

    /// Known answers end to end: production is exactly x = 3 + 2 r in its
    /// full windows, r′ = 7 and the actual x = 17 in theirs; the partial first
    /// tick, the exit window and the zeros after it carry other values. The
    /// fit, r′ and x̄ come out exact, and the dropped samples are reported.
    /// (Before the rule, r′ was the mean of all 45 samples, 6.29, the fit
    /// took the pairs (1, 30) and (0, 11) in, and x̄ the two 30s.)
    #[test]
    fn partial_and_after_exit_windows_are_left_out_of_the_fit_r_prime_and_x() {
        let ms = 1_000_000u64;
        let full = |r: f64, x: Option<f64>| (100 * ms, Some((r, 30 * ms)), x);
        let mut prod: Vec<Window> = (0..60)
            .map(|i| {
                let r = (i % 7) as f64 + 2.0;
                full(r, Some(3.0 + 2.0 * r))
            })
            .collect();
        prod.push((100 * ms, Some((1.0, 3 * ms)), Some(30.0))); // exit window
        prod.push((100 * ms, Some((0.0, 0)), Some(11.0))); // after exit
        let prod = monitored(10, &prod);
        let mut test: Vec<Window> = vec![(30 * ms, Some((2.0, 9 * ms)), None)];
        test.extend((0..40).map(|i| full(if i % 2 == 0 { 6.0 } else { 8.0 }, None)));
        test.push((100 * ms, Some((1.0, 4 * ms)), None));
        test.extend([(100 * ms, Some((0.0, 0)), None); 3]);
        test.push((100 * ms, None, None));
        let test = monitored(20, &test);
        let mut actual: Vec<Window> = (0..40).map(|_| full(7.0, Some(17.0))).collect();
        actual.push((100 * ms, Some((2.0, 8 * ms)), Some(30.0)));
        actual.push((100 * ms, Some((0.0, 0)), Some(30.0)));
        let actual = monitored(30, &actual);

        let p = predict_recordings(&prod, &test, Some(&actual), &options()).unwrap();
        let f = &p.fit;
        assert!(
            (f.a - 3.0).abs() < 1e-9 && (f.b - 2.0).abs() < 1e-9,
            "{f:?}"
        );
        assert_eq!((f.n, f.r_min, f.r_max), (60, 2.0, 8.0));
        assert_eq!(
            f.dropped,
            Dropped {
                off_interval: 0,
                exit_window: 1,
                after_exit: 1
            }
        );
        assert_eq!(p.test.mean, 7.0);
        assert_eq!(p.test.n, 40);
        assert_eq!(
            p.test.dropped,
            Dropped {
                off_interval: 1,
                exit_window: 1,
                after_exit: 3
            }
        );
        assert!((p.x_predicted - 17.0).abs() < 1e-9);
        let a = p.actual.as_ref().unwrap();
        assert_eq!((a.x.mean, a.x.n), (17.0, 40));
        assert_eq!(a.x.dropped.total(), 2);
        assert!(a.inside && a.error_relative.abs() < 1e-9, "{a:?}");
        let text = p.text();
        assert!(
            text.contains("; left out 5 (not full windows: 1 off-interval, 1 exit, 3 after exit))"),
            "{text}"
        );
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["test"]["dropped"]["after_exit"], 3);
        assert_eq!(json["fit"]["dropped"]["exit_window"], 1);
        // What the old rule (every sample) gave: a different r′.
        let all: Vec<f64> = test
            .iter()
            .flat_map(|f| f.samples.iter().map(|s| s.value))
            .collect();
        assert_eq!((all.len(), stats::mean(&all).unwrap()), (45, 283.0 / 45.0));
    }
}
