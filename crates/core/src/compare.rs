//! Comparing two recordings: per scope and metric, the change of the mean from
//! recording A (the baseline) to recording B with a confidence interval that is
//! honest for time series, a verdict (`regressed`, `improved`, `no change`, or
//! `changed (+/−)` where a metric has no known good direction), a ranking by
//! effect size, the attribution of a CPI change to the CPI-stack levels that
//! moved, and release gates (`sw.page_faults>+5%`). `hwqos diff` prints it;
//! other tools (a load generator's release gate) call [`compare`] and
//! [`evaluate_gates`] directly.
//!
//! # Method
//!
//! Each metric of each scope is a time series, one value per sampling tick.
//! Successive values are autocorrelated, so the interval of the difference of
//! the two means is Welch's interval with each mean's standard error taken from
//! the series' *effective sample size* (Geyer's initial monotone sequence
//! estimator; see [`crate::stats`] and [`stats::mean_difference`] with
//! [`Dependence::TimeSeries`]). A change is significant when that interval at
//! the chosen confidence excludes 0; its sign and the metric's [`Direction`]
//! give the verdict. There is no correction for testing many metrics at once:
//! at 95 % confidence about one metric in twenty differs by chance between two
//! recordings of the same workload, so gate on the metrics that matter.
//!
//! Scopes are paired by identity (`cpu:1` with `cpu:1`); a process or thread
//! whose id differs between the recordings (two runs of one command) is paired
//! by its label (`comm`) when exactly one scope of that kind carries the label
//! in each recording. Everything left unpaired is listed, not compared.
//!
//! Counter metrics are per-tick increments: comparing recordings sampled at
//! different rates compares different interval lengths, so compare their
//! `derived.rate.*` metrics (per second) instead; [`Comparison::rates_differ`]
//! says when the rates differ.

use crate::metric::names;
use crate::recording::{CounterClass, Recording};
use crate::stats::{self, Dependence};
use crate::{MetricName, Scope, Unit};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Which way of a metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// More is worse: CPI, page faults, task-clock, misses, latency.
    HigherIsWorse,
    /// More is better: IPC, instructions retired, throughput.
    HigherIsBetter,
}

/// Which way is better for `metric`, where hwqos knows; `None` where a rise
/// is neither good nor bad by itself (node-wide utilization, accesses) or the
/// metric is an application metric whose name does not say.
///
/// `derived.rate.X` has the direction of `X`. Consuming more CPU or memory
/// for the same workload (task-clock, cycles, CPU utilization, RSS) counts as
/// worse; application metrics whose name mentions latency, a time unit
/// (`_us`, `_ms`, `_ns`), errors or drops are worse when higher, those naming
/// throughput (`throughput`, `ops`, `rps`, `qps`) better.
pub fn direction(metric: &MetricName) -> Option<Direction> {
    use Direction::{HigherIsBetter as Better, HigherIsWorse as Worse};
    let name = metric.as_str();
    let base = name.strip_prefix("derived.rate.").unwrap_or(name);
    if base == names::DERIVED_CPI || base.starts_with("derived.cpi.") {
        return Some(Worse);
    }
    if base.ends_with(".miss") || base.ends_with(".miss_ratio") {
        return Some(Worse);
    }
    match base {
        names::DERIVED_IPC | names::HW_INSTRUCTIONS | names::OS_MEM_AVAILABLE => {
            return Some(Better)
        }
        names::SW_TASK_CLOCK
        | names::SW_CPU_CLOCK
        | names::SW_PAGE_FAULTS
        | names::SW_MINOR_FAULTS
        | names::SW_MAJOR_FAULTS
        | names::SW_CONTEXT_SWITCHES
        | names::SW_CPU_MIGRATIONS
        | names::SW_ALIGNMENT_FAULTS
        | names::SW_EMULATION_FAULTS
        | names::HW_CYCLES
        | names::HW_REF_CYCLES
        | names::HW_STALLED_CYCLES_FRONTEND
        | names::HW_STALLED_CYCLES_BACKEND
        | names::DERIVED_CPU_UTILIZATION
        | names::OS_PROC_CPU
        | names::OS_PROC_MINOR_FAULTS
        | names::OS_PROC_MAJOR_FAULTS
        | names::OS_PROC_RSS
        | names::OS_CPU_IOWAIT
        | names::OS_RUNQUEUE => return Some(Worse),
        _ => {}
    }
    if metric.family() == "app" {
        let last = base.rsplit('.').next().unwrap_or(base);
        let worse = ["latency", "rtt", "error", "drop", "loss", "timeout", "wait"];
        let better = [
            "throughput",
            "tput",
            "goodput",
            "ops",
            "rps",
            "qps",
            "requests",
        ];
        if worse.iter().any(|w| last.contains(w))
            || ["_us", "_ms", "_ns", "_s", "_seconds"]
                .iter()
                .any(|u| last.ends_with(u))
        {
            return Some(Worse);
        }
        if better.iter().any(|b| last.contains(b)) {
            return Some(Better);
        }
    }
    None
}

/// The outcome for one metric of one scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A significant change in the bad direction.
    Regressed,
    /// A significant change in the good direction.
    Improved,
    /// The interval of the difference contains 0.
    NoChange,
    /// A significant rise of a metric with no known good direction.
    ChangedUp,
    /// A significant fall of a metric with no known good direction.
    ChangedDown,
}

impl Verdict {
    /// Whether the change is significant (anything but [`Verdict::NoChange`]).
    pub fn is_change(self) -> bool {
        self != Verdict::NoChange
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Regressed => "regressed",
            Verdict::Improved => "improved",
            Verdict::NoChange => "no change",
            Verdict::ChangedUp => "changed (+)",
            Verdict::ChangedDown => "changed (-)",
        })
    }
}

/// The change of one metric of one (paired) scope from A to B.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricChange {
    /// The scope's text form; `pid:1→pid:2` when paired by label.
    pub scope: String,
    /// The scope in recording A.
    pub scope_a: Scope,
    /// The scope in recording B.
    pub scope_b: Scope,
    /// The scope's label (a process's `comm`), if either recording has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The metric.
    pub metric: MetricName,
    /// Its unit (from the registry).
    pub unit: Unit,
    /// Which way is better, where known.
    pub direction: Option<Direction>,
    /// The verdict at [`Comparison::confidence`].
    pub verdict: Verdict,
    /// Samples in A.
    pub n_a: usize,
    /// Samples in B.
    pub n_b: usize,
    /// Effective sample size of A's series (autocorrelation accounted for).
    pub n_eff_a: f64,
    /// Effective sample size of B's series.
    pub n_eff_b: f64,
    /// Mean in A.
    pub mean_a: f64,
    /// Mean in B.
    pub mean_b: f64,
    /// `mean_b − mean_a`.
    pub diff: f64,
    /// Lower bound of the interval of `diff`.
    pub diff_low: f64,
    /// Upper bound of the interval of `diff`.
    pub diff_high: f64,
    /// `diff / |mean_a|` (0.05 = +5 %); `None` when `mean_a` is 0.
    pub relative: Option<f64>,
    /// `diff_low / |mean_a|`.
    pub relative_low: Option<f64>,
    /// `diff_high / |mean_a|`.
    pub relative_high: Option<f64>,
    /// `diff` over the pooled standard deviation `√((s_a² + s_b²)/2)`
    /// (Cohen's d); `None` when both series are constant.
    pub standardized: Option<f64>,
}

/// How one CPI-stack level moved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpiLevelChange {
    /// The level (`l1d`, `llc`, `branch`, …; `base` is the residual).
    pub level: String,
    /// Mean of the level's component in A (cycles per instruction).
    pub mean_a: f64,
    /// Mean in B.
    pub mean_b: f64,
    /// `mean_b − mean_a`.
    pub diff: f64,
    /// Interval of `diff` (absent for the residual base).
    pub diff_low: Option<f64>,
    /// Upper bound of the interval of `diff`.
    pub diff_high: Option<f64>,
    /// Whether the interval excludes 0 (always false for the residual base).
    pub significant: bool,
    /// `diff` as a share of the CPI change; `None` when the CPI did not move.
    pub share: Option<f64>,
}

/// A CPI change split into the CPI-stack levels that moved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpiAttribution {
    /// The scope (as in [`MetricChange::scope`]).
    pub scope: String,
    /// The scope's label, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Mean CPI in A.
    pub cpi_a: f64,
    /// Mean CPI in B.
    pub cpi_b: f64,
    /// The verdict of the CPI change.
    pub verdict: Verdict,
    /// The miss levels, largest absolute change first, then `base`: the
    /// change of the measured CPI not explained by the levels (the recorded
    /// `derived.cpi.base` is not used: under event-set rotation each tick's
    /// base subtracts only the levels counted in that tick).
    pub levels: Vec<CpiLevelChange>,
    /// One line when the stack cannot be split (no miss events counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A comparison of two recordings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The confidence level of every interval and verdict.
    pub confidence: f64,
    /// Every compared metric of every paired scope, ranked: significant
    /// changes first, then by absolute relative change, then by absolute
    /// standardized effect.
    pub changes: Vec<MetricChange>,
    /// CPI attributions, one per paired scope with a CPI in both recordings
    /// (none when the metric filter leaves `derived.cpi` out).
    pub cpi: Vec<CpiAttribution>,
    /// One line when neither recording has a CPI (software events only) and
    /// the metric filter does not leave the CPI out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpi_note: Option<String>,
    /// Scopes (and scope metrics) only recording A has, as text.
    pub only_in_a: Vec<String>,
    /// Scopes (and scope metrics) only recording B has, as text.
    pub only_in_b: Vec<String>,
    /// `scope metric` pairs left out for having fewer than two finite values
    /// on a side.
    pub too_few_samples: Vec<String>,
    /// True when the recordings' sampling rates differ (per-tick counter
    /// values then cover different interval lengths).
    pub rates_differ: bool,
}

/// What to compare and at which confidence.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareOptions {
    /// Confidence level in (0, 1), e.g. 0.95.
    pub confidence: f64,
    /// Scope filters (empty: all). Each is a glob over the scope's text in
    /// either recording (`pid:42`, `cpu:*`), a kind (`system` or `node`,
    /// `cpu`, `process`, `thread`, `cgroup`, `stream`) or a glob over the
    /// scope's label (`hwqos-testload`).
    pub scopes: Vec<String>,
    /// Metric filters (empty: all): globs over the metric name (`sw.*`).
    pub metrics: Vec<String>,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            confidence: 0.95,
            scopes: Vec::new(),
            metrics: Vec::new(),
        }
    }
}

/// Why two recordings cannot be compared as asked, or a gate is malformed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompareError {
    /// The confidence level is not in (0, 1).
    #[error("confidence {0} must be between 0 and 1 (exclusive), e.g. 0.95")]
    BadConfidence(f64),
    /// A scope filter matches no paired scope.
    #[error("scope `{0}` matches no scope present in both recordings")]
    NoSuchScope(String),
    /// A metric filter matches no metric of the selected scopes.
    #[error("metric `{0}` matches no metric present in both recordings (for the selected scopes)")]
    NoSuchMetric(String),
    /// A gate does not follow the grammar.
    #[error(
        "gate `{text}`: {reason} (expected METRIC>+N% or METRIC<-N%, e.g. `sw.page_faults>+5%`)"
    )]
    BadGate {
        /// The gate as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A gate's metric pattern matches no compared metric (a typo would
    /// otherwise pass silently).
    #[error("gate `{0}` matches no compared metric")]
    GateMatchesNothing(String),
}

/// Shell-style glob with `*` and `?` over the whole of `text`.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            backtrack = Some((pi, ti));
            pi += 1;
        } else if let Some((star, matched)) = backtrack {
            pi = star + 1;
            ti = matched + 1;
            backtrack = Some((star, matched + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// One scope's series in one recording.
#[derive(Default)]
struct ScopeSeries {
    label: Option<String>,
    metrics: BTreeMap<MetricName, Vec<f64>>,
}

/// The finite values of every metric of every scope, in time order.
fn series(rec: &Recording) -> BTreeMap<Scope, ScopeSeries> {
    let mut out: BTreeMap<Scope, ScopeSeries> = BTreeMap::new();
    for frame in &rec.frames {
        for s in &frame.samples {
            let entry = out.entry(s.scope.clone()).or_default();
            if entry.label.is_none() {
                entry.label = frame.label(&s.scope).map(str::to_string);
            }
            if s.value.is_finite() {
                entry
                    .metrics
                    .entry(s.metric.clone())
                    .or_default()
                    .push(s.value);
            }
        }
    }
    out
}

fn scope_text(scope: &Scope, label: Option<&str>) -> String {
    match label {
        Some(l) => format!("{scope} ({l})"),
        None => scope.to_string(),
    }
}

/// Pairs the scopes of A and B: by identity, then processes and threads by a
/// label unique to one scope of that kind on each side. Returns the pairs and
/// the unpaired scopes of each side.
fn pair_scopes(
    a: &BTreeMap<Scope, ScopeSeries>,
    b: &BTreeMap<Scope, ScopeSeries>,
) -> (Vec<(Scope, Scope)>, Vec<Scope>, Vec<Scope>) {
    let mut pairs: Vec<(Scope, Scope)> = Vec::new();
    let mut left_a: Vec<&Scope> = Vec::new();
    for s in a.keys() {
        if b.contains_key(s) {
            pairs.push((s.clone(), s.clone()));
        } else {
            left_a.push(s);
        }
    }
    let mut left_b: Vec<&Scope> = b.keys().filter(|s| !a.contains_key(*s)).collect();
    let unique = |side: &BTreeMap<Scope, ScopeSeries>, left: &[&Scope], kind: &str, label: &str| {
        let hits: Vec<&Scope> = left
            .iter()
            .copied()
            .filter(|s| s.kind() == kind && side[*s].label.as_deref() == Some(label))
            .collect();
        (hits.len() == 1).then(|| hits[0].clone())
    };
    let mut paired_a = Vec::new();
    for sa in &left_a {
        if !matches!(sa, Scope::Process { .. } | Scope::Thread { .. }) {
            continue;
        }
        let Some(label) = a[*sa].label.as_deref() else {
            continue;
        };
        let (Some(only_a), Some(sb)) = (
            unique(a, &left_a, sa.kind(), label),
            unique(b, &left_b, sa.kind(), label),
        ) else {
            continue;
        };
        debug_assert_eq!(&only_a, *sa);
        pairs.push(((*sa).clone(), sb.clone()));
        paired_a.push((*sa).clone());
        left_b.retain(|s| **s != sb);
    }
    let left_a = left_a
        .into_iter()
        .filter(|s| !paired_a.contains(s))
        .cloned()
        .collect();
    (pairs, left_a, left_b.into_iter().cloned().collect())
}

fn scope_matches(filter: &str, scope: &Scope, label: Option<&str>) -> bool {
    filter == scope.kind()
        || (filter == "node" && *scope == Scope::System)
        || glob_match(filter, &scope.to_string())
        || label.is_some_and(|l| glob_match(filter, l))
}

fn relative(x: f64, base: f64) -> Option<f64> {
    (base != 0.0).then(|| x / base.abs())
}

/// Builds one row from two series; `None` with fewer than two values a side.
fn change(
    scope: String,
    (scope_a, scope_b): (&Scope, &Scope),
    label: Option<String>,
    metric: &MetricName,
    (xa, xb): (&[f64], &[f64]),
    confidence: f64,
) -> Option<MetricChange> {
    let d = stats::mean_difference(xa, xb, confidence, Dependence::TimeSeries)?;
    let direction = direction(metric);
    let verdict = if !d.significant() {
        Verdict::NoChange
    } else {
        match (direction, d.diff > 0.0) {
            (Some(Direction::HigherIsWorse), true) | (Some(Direction::HigherIsBetter), false) => {
                Verdict::Regressed
            }
            (Some(_), _) => Verdict::Improved,
            (None, true) => Verdict::ChangedUp,
            (None, false) => Verdict::ChangedDown,
        }
    };
    let pooled = ((d.sd_a * d.sd_a + d.sd_b * d.sd_b) / 2.0).sqrt();
    Some(MetricChange {
        scope,
        scope_a: scope_a.clone(),
        scope_b: scope_b.clone(),
        label,
        unit: metric.info().unit,
        metric: metric.clone(),
        direction,
        verdict,
        n_a: d.n_a,
        n_b: d.n_b,
        n_eff_a: d.n_eff_a,
        n_eff_b: d.n_eff_b,
        mean_a: d.mean_a,
        mean_b: d.mean_b,
        diff: d.diff,
        diff_low: d.low(),
        diff_high: d.high(),
        relative: relative(d.diff, d.mean_a),
        relative_low: relative(d.low(), d.mean_a),
        relative_high: relative(d.high(), d.mean_a),
        standardized: (pooled > 0.0).then(|| d.diff / pooled),
    })
}

/// The ranking of [`Comparison::changes`].
fn rank(a: &MetricChange, b: &MetricChange) -> std::cmp::Ordering {
    let mag = |x: Option<f64>| x.map(f64::abs).unwrap_or(-1.0);
    b.verdict
        .is_change()
        .cmp(&a.verdict.is_change())
        .then_with(|| mag(b.relative).total_cmp(&mag(a.relative)))
        .then_with(|| mag(b.standardized).total_cmp(&mag(a.standardized)))
        .then_with(|| a.scope_a.cmp(&b.scope_a))
        .then_with(|| a.metric.cmp(&b.metric))
}

/// Compares recording `b` with the baseline `a` (see the module docs for the
/// method). Fails on a confidence outside (0, 1) and on a scope or metric
/// filter that matches nothing, naming it.
pub fn compare(
    a: &Recording,
    b: &Recording,
    opts: &CompareOptions,
) -> Result<Comparison, CompareError> {
    if !(opts.confidence > 0.0 && opts.confidence < 1.0) {
        return Err(CompareError::BadConfidence(opts.confidence));
    }
    let (sa, sb) = (series(a), series(b));
    let (pairs, left_a, left_b) = pair_scopes(&sa, &sb);
    let mut only_in_a: Vec<String> = left_a
        .iter()
        .map(|s| scope_text(s, sa[s].label.as_deref()))
        .collect();
    let mut only_in_b: Vec<String> = left_b
        .iter()
        .map(|s| scope_text(s, sb[s].label.as_deref()))
        .collect();
    let mut scope_hit = vec![false; opts.scopes.len()];
    let mut metric_hit = vec![false; opts.metrics.len()];
    let mut changes = Vec::new();
    let mut cpi = Vec::new();
    let mut too_few_samples = Vec::new();
    let mut any_cpi = false;
    // The CPI attribution belongs to the output unless the metric filter
    // leaves the CPI out.
    let wants_cpi = opts.metrics.is_empty()
        || opts
            .metrics
            .iter()
            .any(|f| glob_match(f, names::DERIVED_CPI));
    for (pa, pb) in &pairs {
        let (ca, cb) = (&sa[pa], &sb[pb]);
        let label = ca.label.clone().or_else(|| cb.label.clone());
        if !opts.scopes.is_empty() {
            let mut keep = false;
            for (i, f) in opts.scopes.iter().enumerate() {
                if scope_matches(f, pa, ca.label.as_deref())
                    || scope_matches(f, pb, cb.label.as_deref())
                {
                    scope_hit[i] = true;
                    keep = true;
                }
            }
            if !keep {
                continue;
            }
        }
        let scope = if pa == pb {
            pa.to_string()
        } else {
            format!("{pa}→{pb}")
        };
        for (metric, xa) in &ca.metrics {
            let Some(xb) = cb.metrics.get(metric) else {
                only_in_a.push(format!("{} {metric}", scope_text(pa, ca.label.as_deref())));
                continue;
            };
            if !opts.metrics.is_empty() {
                let mut keep = false;
                for (i, f) in opts.metrics.iter().enumerate() {
                    if glob_match(f, metric.as_str()) {
                        metric_hit[i] = true;
                        keep = true;
                    }
                }
                if !keep {
                    continue;
                }
            }
            match change(
                scope.clone(),
                (pa, pb),
                label.clone(),
                metric,
                (xa, xb),
                opts.confidence,
            ) {
                Some(c) => changes.push(c),
                None => too_few_samples.push(format!(
                    "{scope} {metric} (n = {} / {})",
                    xa.len(),
                    xb.len()
                )),
            }
        }
        for metric in cb.metrics.keys().filter(|m| !ca.metrics.contains_key(*m)) {
            only_in_b.push(format!("{} {metric}", scope_text(pb, cb.label.as_deref())));
        }
        if !wants_cpi {
            continue;
        }
        let cpi_name = MetricName::from_static(names::DERIVED_CPI);
        any_cpi |= ca.metrics.contains_key(&cpi_name) || cb.metrics.contains_key(&cpi_name);
        if let Some(attr) = attribute_cpi(&scope, label.clone(), ca, cb, opts.confidence, &cpi_name)
        {
            cpi.push(attr);
        }
    }
    if let Some(i) = scope_hit.iter().position(|hit| !hit) {
        return Err(CompareError::NoSuchScope(opts.scopes[i].clone()));
    }
    if let Some(i) = metric_hit.iter().position(|hit| !hit) {
        return Err(CompareError::NoSuchMetric(opts.metrics[i].clone()));
    }
    changes.sort_by(rank);
    let class = |c: CounterClass| format!("{c:?}").to_lowercase();
    let cpi_note = (wants_cpi && !any_cpi).then(|| {
        format!(
            "CPI: not in these recordings (counters: {} in A, {} in B); a CPI stack needs the hardware events instructions and cycles, so no CPI change can be attributed",
            class(a.header.counters),
            class(b.header.counters)
        )
    });
    Ok(Comparison {
        confidence: opts.confidence,
        changes,
        cpi,
        cpi_note,
        only_in_a,
        only_in_b,
        too_few_samples,
        rates_differ: a.header.rate_hz != b.header.rate_hz,
    })
}

/// Splits the CPI change of one scope pair into its stack levels.
fn attribute_cpi(
    scope: &str,
    label: Option<String>,
    ca: &ScopeSeries,
    cb: &ScopeSeries,
    confidence: f64,
    cpi_name: &MetricName,
) -> Option<CpiAttribution> {
    let (xa, xb) = (ca.metrics.get(cpi_name)?, cb.metrics.get(cpi_name)?);
    let d = stats::mean_difference(xa, xb, confidence, Dependence::TimeSeries)?;
    let verdict = if d.significant() {
        if d.diff > 0.0 {
            Verdict::Regressed
        } else {
            Verdict::Improved
        }
    } else {
        Verdict::NoChange
    };
    let share = |x: f64| (d.diff != 0.0).then(|| x / d.diff);
    let mut levels = Vec::new();
    for (metric, la) in &ca.metrics {
        let Some(level) = metric.as_str().strip_prefix("derived.cpi.") else {
            continue;
        };
        if metric.as_str() == names::DERIVED_CPI_BASE {
            continue;
        }
        let Some(lb) = cb.metrics.get(metric) else {
            continue;
        };
        let Some(ld) = stats::mean_difference(la, lb, confidence, Dependence::TimeSeries) else {
            continue;
        };
        levels.push(CpiLevelChange {
            level: level.to_string(),
            mean_a: ld.mean_a,
            mean_b: ld.mean_b,
            diff: ld.diff,
            diff_low: Some(ld.low()),
            diff_high: Some(ld.high()),
            significant: ld.significant(),
            share: share(ld.diff),
        });
    }
    levels.sort_by(|x, y| {
        y.diff
            .abs()
            .total_cmp(&x.diff.abs())
            .then_with(|| x.level.cmp(&y.level))
    });
    let note = if levels.is_empty() {
        Some(
            "no CPI-stack levels: the recordings count no cache, TLB or branch miss events, so the CPI change cannot be split"
                .to_string(),
        )
    } else {
        let (ma, mb) = (
            levels.iter().map(|l| l.mean_a).sum::<f64>(),
            levels.iter().map(|l| l.mean_b).sum::<f64>(),
        );
        let (base_a, base_b) = (d.mean_a - ma, d.mean_b - mb);
        levels.push(CpiLevelChange {
            level: "base".to_string(),
            mean_a: base_a,
            mean_b: base_b,
            diff: base_b - base_a,
            diff_low: None,
            diff_high: None,
            significant: false,
            share: share(base_b - base_a),
        });
        None
    };
    Some(CpiAttribution {
        scope: scope.to_string(),
        label,
        cpi_a: d.mean_a,
        cpi_b: d.mean_b,
        verdict,
        levels,
        note,
    })
}

/// The comparison of a [`Gate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateOp {
    /// `>`: fails when the change is above the threshold.
    Above,
    /// `<`: fails when the change is below the threshold.
    Below,
}

/// A release gate: `METRIC>+5%`, `derived.ipc<-3%`, `app.rtt_us>+20`.
///
/// Grammar: `PATTERN OP THRESHOLD`, where `PATTERN` is a metric name or glob
/// (`*`, `?`), `OP` is `>` or `<`, and `THRESHOLD` a signed number, relative
/// to A's mean when it ends in `%` and in the metric's unit otherwise. A gate
/// fails on a row it matches when the change is significant (the row's
/// verdict is not `no change`) and its point estimate is beyond the threshold
/// (`>`: above it, `<`: below it). A relative gate on a metric whose mean in A
/// is 0 fails on any significant change in its direction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    /// The gate as written.
    pub text: String,
    /// The metric name or glob.
    pub pattern: String,
    /// `>` or `<`.
    pub op: GateOp,
    /// The threshold: a fraction (0.05 for `5%`) when `relative`, else in the
    /// metric's unit.
    pub threshold: f64,
    /// Whether the threshold is relative to A's mean.
    pub relative: bool,
}

impl FromStr for Gate {
    type Err = CompareError;
    fn from_str(text: &str) -> Result<Gate, CompareError> {
        let bad = |reason: &str| CompareError::BadGate {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let (at, op) = match (text.find('>'), text.find('<')) {
            (Some(_), Some(_)) => return Err(bad("has both `>` and `<`")),
            (Some(i), None) => (i, GateOp::Above),
            (None, Some(i)) => (i, GateOp::Below),
            (None, None) => return Err(bad("no `>` or `<`")),
        };
        let pattern = text[..at].trim();
        let value = text[at + 1..].trim();
        if pattern.is_empty() {
            return Err(bad("no metric before the operator"));
        }
        if !pattern
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._*?".contains(&c))
        {
            return Err(bad(
                "the metric may only use a-z, 0-9, `_`, `.` and the globs `*`, `?`",
            ));
        }
        let (number, relative) = match value.strip_suffix('%') {
            Some(n) => (n.trim(), true),
            None => (value, false),
        };
        if number.is_empty() {
            return Err(bad("no threshold after the operator"));
        }
        let threshold: f64 = number
            .parse()
            .map_err(|_| bad(&format!("`{number}` is not a number")))?;
        if !threshold.is_finite() {
            return Err(bad("the threshold must be finite"));
        }
        Ok(Gate {
            text: text.to_string(),
            pattern: pattern.to_string(),
            op,
            threshold: if relative {
                threshold / 100.0
            } else {
                threshold
            },
            relative,
        })
    }
}

impl Gate {
    /// Whether `c` fails this gate (see [`Gate`] for the rule).
    pub fn fails(&self, c: &MetricChange) -> bool {
        if !c.verdict.is_change() {
            return false;
        }
        let change = if self.relative {
            match c.relative {
                Some(r) => r,
                None if c.diff > 0.0 => f64::INFINITY,
                None => f64::NEG_INFINITY,
            }
        } else {
            c.diff
        };
        match self.op {
            GateOp::Above => change > self.threshold,
            GateOp::Below => change < self.threshold,
        }
    }
}

/// One gate's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    /// The gate.
    pub gate: Gate,
    /// How many compared rows its pattern matched.
    pub matched: usize,
    /// `scope metric` of every matched row that failed it.
    pub failures: Vec<String>,
}

impl GateResult {
    /// Whether the gate failed on any row.
    pub fn failed(&self) -> bool {
        !self.failures.is_empty()
    }
}

/// Evaluates `gates` on a comparison. A gate whose pattern matches no
/// compared row is an error ([`CompareError::GateMatchesNothing`]).
pub fn evaluate_gates(cmp: &Comparison, gates: &[Gate]) -> Result<Vec<GateResult>, CompareError> {
    gates
        .iter()
        .map(|g| {
            let matched: Vec<&MetricChange> = cmp
                .changes
                .iter()
                .filter(|c| glob_match(&g.pattern, c.metric.as_str()))
                .collect();
            if matched.is_empty() {
                return Err(CompareError::GateMatchesNothing(g.text.clone()));
            }
            Ok(GateResult {
                gate: g.clone(),
                matched: matched.len(),
                failures: matched
                    .iter()
                    .filter(|c| g.fails(c))
                    .map(|c| format!("{} {}", c.scope, c.metric))
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{RecordedBackend, RecordingHeader};
    use crate::stats::SplitMix64;
    use crate::{Frame, Sample, ScopeLabel, Timestamp};

    /// A recording of `ticks` frames; `f(tick)` gives the samples' (scope,
    /// metric, value) triples; `labels` names scopes.
    fn recording(
        ticks: u64,
        labels: &[(Scope, &str)],
        mut f: impl FnMut(u64) -> Vec<(Scope, &'static str, f64)>,
    ) -> Recording {
        let frames = (0..ticks)
            .map(|i| {
                let time = Timestamp {
                    mono_ns: i * 50_000_000,
                    wall_ns: 0,
                };
                Frame {
                    seq: i,
                    time,
                    interval_ns: 50_000_000,
                    samples: f(i)
                        .into_iter()
                        .map(|(s, m, v)| Sample::gauge(time, s, MetricName::from_static(m), v))
                        .collect(),
                    labels: labels
                        .iter()
                        .map(|(s, n)| ScopeLabel {
                            scope: s.clone(),
                            name: n.to_string(),
                        })
                        .collect(),
                }
            })
            .collect::<Vec<_>>();
        Recording {
            header: RecordingHeader::new(
                "n",
                Timestamp::default(),
                20.0,
                RecordedBackend::Simulated,
                CounterClass::of(&frames),
            ),
            frames,
            truncated_at: None,
        }
    }

    fn noisy(rng: &mut SplitMix64, mean: f64, sd: f64) -> f64 {
        mean + sd * rng.next_normal()
    }

    #[test]
    fn directions() {
        let d = |m: &'static str| direction(&MetricName::from_static(m));
        assert_eq!(d("derived.cpi"), Some(Direction::HigherIsWorse));
        assert_eq!(d("derived.cpi.llc"), Some(Direction::HigherIsWorse));
        assert_eq!(d("derived.ipc"), Some(Direction::HigherIsBetter));
        assert_eq!(d("sw.page_faults"), Some(Direction::HigherIsWorse));
        assert_eq!(
            d("derived.rate.sw.task_clock"),
            Some(Direction::HigherIsWorse)
        );
        assert_eq!(d("hw.l1d.miss"), Some(Direction::HigherIsWorse));
        assert_eq!(d("app.rtt_us"), Some(Direction::HigherIsWorse));
        assert_eq!(d("app.throughput"), Some(Direction::HigherIsBetter));
        assert_eq!(d("app.queue"), None);
        assert_eq!(d("os.cpu.util"), None);
        assert_eq!(d("hw.l1d.access"), None);
    }

    #[test]
    fn finds_a_regression_an_improvement_and_no_change_with_known_means() {
        let p = Scope::Process { pid: 1 };
        let q = Scope::Process { pid: 2 };
        let mut rng = SplitMix64::new(5);
        let a = recording(200, &[(p.clone(), "load")], |_| {
            vec![
                (p.clone(), "sw.page_faults", noisy(&mut rng, 100.0, 5.0)),
                (p.clone(), "derived.ipc", noisy(&mut rng, 2.0, 0.1)),
                (p.clone(), "os.proc.threads", 4.0),
                (
                    Scope::Cpu { cpu: 0 },
                    "os.cpu.util",
                    noisy(&mut rng, 0.5, 0.05),
                ),
            ]
        });
        // B: the same command as another pid: +20 % page faults, +10 % IPC,
        // same utilization, one thread fewer.
        let b = recording(200, &[(q.clone(), "load")], |_| {
            vec![
                (q.clone(), "sw.page_faults", noisy(&mut rng, 120.0, 5.0)),
                (q.clone(), "derived.ipc", noisy(&mut rng, 2.2, 0.1)),
                (q.clone(), "os.proc.threads", 3.0),
                (
                    Scope::Cpu { cpu: 0 },
                    "os.cpu.util",
                    noisy(&mut rng, 0.5, 0.05),
                ),
            ]
        });
        let cmp = compare(&a, &b, &CompareOptions::default()).unwrap();
        let row = |m: &str| cmp.changes.iter().find(|c| c.metric.as_str() == m).unwrap();
        let pf = row("sw.page_faults");
        assert_eq!(pf.scope, "pid:1→pid:2");
        assert_eq!(pf.label.as_deref(), Some("load"));
        assert_eq!(pf.verdict, Verdict::Regressed);
        assert!((pf.relative.unwrap() - 0.2).abs() < 0.02, "{pf:?}");
        assert!(pf.diff_low > 15.0 && pf.diff_high < 25.0, "{pf:?}");
        assert_eq!(row("derived.ipc").verdict, Verdict::Improved);
        let threads = row("os.proc.threads");
        assert_eq!(threads.verdict, Verdict::ChangedDown);
        assert_eq!(threads.standardized, None);
        assert_eq!(row("os.cpu.util").verdict, Verdict::NoChange);
        // Ranked: significant changes first, the largest relative change first.
        assert_eq!(cmp.changes[0].metric.as_str(), "os.proc.threads");
        assert_eq!(cmp.changes.last().unwrap().metric.as_str(), "os.cpu.util");
        assert!(cmp
            .cpi_note
            .as_deref()
            .unwrap()
            .contains("not in these recordings"));
        assert!(cmp.only_in_a.is_empty() && cmp.only_in_b.is_empty());

        // Filters, and filters that match nothing.
        let only = CompareOptions {
            scopes: vec!["process".into()],
            metrics: vec!["sw.*".into()],
            ..CompareOptions::default()
        };
        let cmp2 = compare(&a, &b, &only).unwrap();
        assert_eq!(cmp2.changes.len(), 1);
        assert_eq!(cmp2.cpi_note, None, "the filter leaves the CPI out");
        let by_label = CompareOptions {
            scopes: vec!["load".into()],
            ..CompareOptions::default()
        };
        assert_eq!(compare(&a, &b, &by_label).unwrap().changes.len(), 3);
        let none = CompareOptions {
            metrics: vec!["hw.*".into()],
            ..CompareOptions::default()
        };
        assert_eq!(
            compare(&a, &b, &none).unwrap_err(),
            CompareError::NoSuchMetric("hw.*".into())
        );
        let none = CompareOptions {
            scopes: vec!["cpu:7".into()],
            ..CompareOptions::default()
        };
        assert!(matches!(
            compare(&a, &b, &none),
            Err(CompareError::NoSuchScope(_))
        ));
        let bad = CompareOptions {
            confidence: 1.0,
            ..CompareOptions::default()
        };
        assert!(matches!(
            compare(&a, &b, &bad),
            Err(CompareError::BadConfidence(_))
        ));

        // Gates.
        let gates: Vec<Gate> = [
            "sw.page_faults>+5%",
            "derived.ipc<-1%",
            "sw.*>+30%",
            "os.proc.threads<-0.5",
        ]
        .iter()
        .map(|g| g.parse().unwrap())
        .collect();
        let res = evaluate_gates(&cmp, &gates).unwrap();
        assert_eq!(
            res.iter().map(GateResult::failed).collect::<Vec<_>>(),
            [true, false, false, true]
        );
        assert_eq!(res[0].failures, ["pid:1→pid:2 sw.page_faults"]);
        let typo: Gate = "sw.page_fault>+5%".parse().unwrap();
        assert_eq!(
            evaluate_gates(&cmp, &[typo]).unwrap_err(),
            CompareError::GateMatchesNothing("sw.page_fault>+5%".into())
        );
    }

    #[test]
    fn gate_grammar() {
        let g: Gate = "sw.page_faults>+5%".parse().unwrap();
        assert_eq!(
            (g.pattern.as_str(), g.op, g.threshold, g.relative),
            ("sw.page_faults", GateOp::Above, 0.05, true)
        );
        let g: Gate = " derived.ipc < -2.5 % ".parse().unwrap();
        assert_eq!(
            (g.op, g.threshold, g.relative),
            (GateOp::Below, -0.025, true)
        );
        let g: Gate = "app.rtt_us>20".parse().unwrap();
        assert_eq!((g.threshold, g.relative), (20.0, false));
        for bad in [
            "sw.page_faults",
            ">5%",
            "sw.x>",
            "sw.x>five%",
            "SW.X>1",
            "a>1<2",
            "sw.x>inf",
        ] {
            let e = bad.parse::<Gate>().unwrap_err();
            assert!(
                matches!(&e, CompareError::BadGate { text, .. } if text == bad),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_cpi_change_is_attributed_to_the_levels_that_moved() {
        // Rotation: even ticks count l1d misses, odd ticks llc misses; each
        // tick's recorded base subtracts only its own level. B's LLC
        // component rises by 0.5 cycles per instruction, and so does the CPI.
        let p = Scope::Process { pid: 3 };
        let mut rng = SplitMix64::new(9);
        let mut rec = |llc: f64| {
            recording(300, &[], |i| {
                let (l1d, llcv) = (noisy(&mut rng, 0.3, 0.02), noisy(&mut rng, llc, 0.02));
                let cpi = 1.0 + 0.3 + llc + noisy(&mut rng, 0.0, 0.02);
                let mut s = vec![(p.clone(), "derived.cpi", cpi)];
                if i % 2 == 0 {
                    s.push((p.clone(), "derived.cpi.l1d", l1d));
                    s.push((p.clone(), "derived.cpi.base", cpi - l1d));
                } else {
                    s.push((p.clone(), "derived.cpi.llc", llcv));
                    s.push((p.clone(), "derived.cpi.base", cpi - llcv));
                }
                s
            })
        };
        let (a, b) = (rec(0.4), rec(0.9));
        let cmp = compare(&a, &b, &CompareOptions::default()).unwrap();
        assert_eq!(cmp.cpi_note, None);
        let attr = &cmp.cpi[0];
        assert_eq!(attr.verdict, Verdict::Regressed);
        assert!((attr.cpi_b - attr.cpi_a - 0.5).abs() < 0.01, "{attr:?}");
        let names: Vec<&str> = attr.levels.iter().map(|l| l.level.as_str()).collect();
        assert_eq!(names, ["llc", "l1d", "base"]);
        let llc = &attr.levels[0];
        assert!(
            llc.significant && (llc.share.unwrap() - 1.0).abs() < 0.05,
            "{llc:?}"
        );
        assert!(!attr.levels[1].significant, "{:?}", attr.levels[1]);
        // The residual base did not move (the recorded base did, by rotation).
        assert!(attr.levels[2].diff.abs() < 0.02, "{:?}", attr.levels[2]);

        // CPI without miss levels: one line, no numbers invented.
        let p2 = p.clone();
        let mut rng = SplitMix64::new(1);
        let only_cpi = recording(50, &[], move |_| {
            vec![(p2.clone(), "derived.cpi", noisy(&mut rng, 1.0, 0.1))]
        });
        let cmp = compare(&only_cpi, &only_cpi, &CompareOptions::default()).unwrap();
        assert!(cmp.cpi[0].levels.is_empty());
        assert!(cmp.cpi[0]
            .note
            .as_deref()
            .unwrap()
            .contains("cannot be split"));
    }

    #[test]
    fn unpaired_scopes_and_short_series_are_listed_not_compared() {
        let (p, q, r) = (
            Scope::Process { pid: 1 },
            Scope::Process { pid: 2 },
            Scope::Process { pid: 3 },
        );
        // Two processes labelled `w` in B: the label no longer identifies one.
        let a = recording(3, &[(p.clone(), "w")], |_| {
            vec![
                (p.clone(), "sw.page_faults", 1.0),
                (Scope::System, "os.load1", 1.0),
            ]
        });
        let b = recording(1, &[(q.clone(), "w"), (r.clone(), "w")], |_| {
            vec![
                (q.clone(), "sw.page_faults", 1.0),
                (r.clone(), "sw.page_faults", 1.0),
                (Scope::System, "os.load1", 1.0),
            ]
        });
        let cmp = compare(&a, &b, &CompareOptions::default()).unwrap();
        assert!(cmp.changes.is_empty());
        assert_eq!(cmp.only_in_a, ["pid:1 (w)"]);
        assert_eq!(cmp.only_in_b, ["pid:2 (w)", "pid:3 (w)"]);
        assert_eq!(cmp.too_few_samples, ["system os.load1 (n = 3 / 1)"]);
    }
}
