//! Descriptive statistics, Student-t confidence intervals, Pearson correlation,
//! and confidence intervals that stay honest on autocorrelated time series.
//!
//! Every function takes a slice and returns `None` where the statistic is not
//! defined (empty input, zero variance, NaN values) instead of panicking.
//!
//! # Time series: effective sample size
//!
//! Successive samples of a recording are not independent: a process that is
//! busy in one 50 ms tick is likely busy in the next. A Student-t interval over
//! `n` such samples assumes `n` independent values and is too narrow (for an
//! AR(1) series with lag-1 correlation ρ, by the factor √((1−ρ)/(1+ρ))).
//! [`effective_sample_size`] estimates how many independent values the series
//! is worth, `n_eff = n · γ₀ / (γ₀ + 2 Σ_{k≥1} γ_k)`, with the autocovariance sum
//! truncated by Geyer's *initial monotone sequence* estimator (C. J. Geyer,
//! "Practical Markov Chain Monte Carlo", Statistical Science 7(4), 1992,
//! §3.3): lags are summed in adjacent pairs `Γ_m = γ_{2m} + γ_{2m+1}` while
//! the pairs stay positive, each pair capped by the one before. For a series
//! with negative correlation the estimate is capped at `n` (never claiming
//! more than `n` independent values). [`mean_difference`] uses it in a Welch
//! interval for the difference of two means, the standard error of each mean
//! being `s / √n_eff` and the degrees of freedom Welch–Satterthwaite's with
//! `n_eff − 1` per side.

use serde::{Deserialize, Serialize};

/// Arithmetic mean.
pub fn mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() || xs.iter().any(|x| x.is_nan()) {
        return None;
    }
    Some(xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Sample variance (n − 1 in the denominator). `None` for fewer than two values.
pub fn variance(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs)?;
    Some(xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64)
}

/// Sample standard deviation.
pub fn stddev(xs: &[f64]) -> Option<f64> {
    variance(xs).map(f64::sqrt)
}

/// The `p`-th percentile (0–100) with linear interpolation between closest ranks
/// (the same definition as NumPy's default).
pub fn percentile(xs: &[f64], p: f64) -> Option<f64> {
    if xs.is_empty() || !(0.0..=100.0).contains(&p) || xs.iter().any(|x| x.is_nan()) {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    Some(percentile_sorted(&v, p))
}

/// Percentile of already sorted, NaN-free data (`p` in 0–100), without the
/// copy and sort [`percentile`] makes.
///
/// # Panics
/// If `sorted` is empty.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.len() == 1 {
        return sorted[0];
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// Median (the 50th percentile).
pub fn median(xs: &[f64]) -> Option<f64> {
    percentile(xs, 50.0)
}

/// A two-sided confidence interval for the mean.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfidenceInterval {
    /// The sample mean, the interval's centre.
    pub mean: f64,
    /// Half the interval's width: the interval is `mean ± half_width`.
    pub half_width: f64,
    /// The confidence level, e.g. 0.95.
    pub level: f64,
    /// The number of values it was computed from.
    pub n: usize,
}

impl ConfidenceInterval {
    /// The lower bound, `mean − half_width`.
    pub fn low(&self) -> f64 {
        self.mean - self.half_width
    }
    /// The upper bound, `mean + half_width`.
    pub fn high(&self) -> f64 {
        self.mean + self.half_width
    }
    /// Half width relative to the mean (0.05 = ±5 %); `None` for a zero mean.
    pub fn relative(&self) -> Option<f64> {
        (self.mean != 0.0).then(|| self.half_width / self.mean.abs())
    }
}

/// The Student-t confidence interval of the mean at `level` (e.g. 0.95):
/// mean ± t(1 − α/2, n − 1) · s / √n. `None` for fewer than two values or a level
/// outside (0, 1).
pub fn confidence_interval(xs: &[f64], level: f64) -> Option<ConfidenceInterval> {
    if !(level > 0.0 && level < 1.0) || xs.len() < 2 {
        return None;
    }
    let n = xs.len();
    let s = stddev(xs)?;
    let t = student_t_quantile(1.0 - (1.0 - level) / 2.0, (n - 1) as f64)?;
    Some(ConfidenceInterval {
        mean: mean(xs)?,
        half_width: t * s / (n as f64).sqrt(),
        level,
        n,
    })
}

/// The `p`-quantile of Student's t distribution with `dof` degrees of freedom.
pub fn student_t_quantile(p: f64, dof: f64) -> Option<f64> {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let dist = StudentsT::new(0.0, 1.0, dof).ok()?;
    let q = dist.inverse_cdf(p);
    q.is_finite().then_some(q)
}

/// Pearson's correlation coefficient of two equally long series. `None` if the
/// lengths differ, fewer than two pairs exist, or either series is constant.
pub fn pearson(xs: &[f64], ys: &[f64]) -> Option<f64> {
    if xs.len() != ys.len() || xs.len() < 2 {
        return None;
    }
    let mx = mean(xs)?;
    let my = mean(ys)?;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        let (dx, dy) = (x - mx, y - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    Some((sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0))
}

/// A summary of a set of measurements, as the probes and benchmarks report it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The number of measurements (at least 1).
    pub n: usize,
    /// The smallest measurement.
    pub min: f64,
    /// The largest measurement.
    pub max: f64,
    /// The arithmetic mean.
    pub mean: f64,
    /// The median (50th percentile).
    pub median: f64,
    /// The sample standard deviation; 0 for a single measurement.
    pub stddev: f64,
    /// The 99th percentile (linear interpolation, as [`percentile`]).
    pub p99: f64,
    /// 95 % Student-t confidence interval of the mean, if n ≥ 2.
    pub ci95: Option<ConfidenceInterval>,
}

/// Summarizes `xs`; `None` when empty or containing NaN.
pub fn summarize(xs: &[f64]) -> Option<Summary> {
    let m = mean(xs)?;
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    Some(Summary {
        n: v.len(),
        min: v[0],
        max: v[v.len() - 1],
        mean: m,
        median: percentile_sorted(&v, 50.0),
        stddev: stddev(xs).unwrap_or(0.0),
        p99: percentile_sorted(&v, 99.0),
        ci95: confidence_interval(xs, 0.95),
    })
}

/// The biased (divide by `n`) sample autocovariances γ₀…γ_max_lag around the
/// mean: the estimator Geyer's truncation needs (it keeps the sequence positive
/// definite). `None` for fewer than two values or NaN.
pub fn autocovariances(xs: &[f64], max_lag: usize) -> Option<Vec<f64>> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs)?;
    let n = xs.len();
    let d: Vec<f64> = xs.iter().map(|x| x - m).collect();
    Some(
        (0..=max_lag.min(n - 1))
            .map(|k| {
                d[..n - k]
                    .iter()
                    .zip(&d[k..])
                    .map(|(a, b)| a * b)
                    .sum::<f64>()
                    / n as f64
            })
            .collect(),
    )
}

/// The effective sample size of a (stationary) time series: how many
/// independent values its mean is worth, `n · γ₀ / σ²` where
/// `σ² = γ₀ + 2 Σ_{k≥1} γ_k` is the asymptotic variance of √n times the mean.
/// The sum is truncated with Geyer's initial monotone sequence (see the
/// module docs); the result lies in `[1, n]`. A constant series (γ₀ = 0) is
/// worth all its values: `n`. `None` for fewer than two values or NaN.
pub fn effective_sample_size(xs: &[f64]) -> Option<f64> {
    let n = xs.len();
    if n < 2 {
        return None;
    }
    let m = mean(xs)?;
    let d: Vec<f64> = xs.iter().map(|x| x - m).collect();
    // Lags are computed only as far as the truncation reaches (O(n · lags)).
    let gamma = |k: usize| -> f64 {
        if k >= n {
            return 0.0;
        }
        d[..n - k]
            .iter()
            .zip(&d[k..])
            .map(|(a, b)| a * b)
            .sum::<f64>()
            / n as f64
    };
    let gamma0 = gamma(0);
    if gamma0 <= 0.0 {
        return Some(n as f64);
    }
    // σ² = −γ₀ + 2 Σ_m Γ_m, Γ_m = γ_{2m} + γ_{2m+1}, over the initial
    // positive run of Γ, each capped by the one before (monotone).
    let mut sigma2 = -gamma0;
    let mut prev = f64::INFINITY;
    let mut m = 0;
    while 2 * m < n {
        let even = if m == 0 { gamma0 } else { gamma(2 * m) };
        let pair = even + gamma(2 * m + 1);
        if pair <= 0.0 {
            break;
        }
        let pair = pair.min(prev);
        sigma2 += 2.0 * pair;
        prev = pair;
        m += 1;
    }
    if sigma2 <= 0.0 {
        return Some(n as f64);
    }
    Some((n as f64 * gamma0 / sigma2).clamp(1.0, n as f64))
}

/// Whether [`mean_difference`] treats samples as a time series (correcting
/// for autocorrelation) or as independent draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dependence {
    /// Successive values may be correlated: each mean's standard error uses
    /// the [`effective_sample_size`]. What recordings need.
    TimeSeries,
    /// Values are independent draws: the plain Welch interval (`n_eff = n`).
    /// Too narrow on autocorrelated data; kept for comparison and for
    /// genuinely independent repetitions.
    Independent,
}

/// The difference `mean(b) − mean(a)` of two samples with its confidence
/// interval ([`mean_difference`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeanDifference {
    /// Mean of the first sample (the baseline).
    pub mean_a: f64,
    /// Mean of the second sample.
    pub mean_b: f64,
    /// Sample standard deviation of the first sample.
    pub sd_a: f64,
    /// Sample standard deviation of the second sample.
    pub sd_b: f64,
    /// Values in the first sample.
    pub n_a: usize,
    /// Values in the second sample.
    pub n_b: usize,
    /// Effective sample size of the first sample (`n_a` when independent).
    pub n_eff_a: f64,
    /// Effective sample size of the second sample.
    pub n_eff_b: f64,
    /// `mean_b − mean_a`.
    pub diff: f64,
    /// Standard error of `diff`.
    pub std_error: f64,
    /// Welch–Satterthwaite degrees of freedom of the t quantile.
    pub dof: f64,
    /// Half the interval's width: the interval is `diff ± half_width`.
    pub half_width: f64,
    /// The confidence level, e.g. 0.95.
    pub level: f64,
}

impl MeanDifference {
    /// Lower bound of the interval of the difference.
    pub fn low(&self) -> f64 {
        self.diff - self.half_width
    }
    /// Upper bound of the interval of the difference.
    pub fn high(&self) -> f64 {
        self.diff + self.half_width
    }
    /// Whether the interval excludes 0: the means differ at `level`. Two
    /// constant samples with different values differ (a zero-width interval
    /// away from 0); with equal values they do not.
    pub fn significant(&self) -> bool {
        self.low() > 0.0 || self.high() < 0.0
    }
}

/// The confidence interval at `level` of `mean(b) − mean(a)`: Welch's
/// interval `diff ± t(1 − α/2, ν) · √(s_a²/n_a' + s_b²/n_b')` where `n'` is
/// the [`effective_sample_size`] for [`Dependence::TimeSeries`] (the module
/// docs give the method and its reference) and `n` for
/// [`Dependence::Independent`]; ν is Welch–Satterthwaite's with `n' − 1` per
/// side (at least 1). `None` with fewer than two values on a side, NaN, or a
/// level outside (0, 1).
pub fn mean_difference(
    a: &[f64],
    b: &[f64],
    level: f64,
    dependence: Dependence,
) -> Option<MeanDifference> {
    if !(level > 0.0 && level < 1.0) || a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (mean_a, mean_b) = (mean(a)?, mean(b)?);
    let (sd_a, sd_b) = (stddev(a)?, stddev(b)?);
    let (n_eff_a, n_eff_b) = match dependence {
        Dependence::TimeSeries => (effective_sample_size(a)?, effective_sample_size(b)?),
        Dependence::Independent => (a.len() as f64, b.len() as f64),
    };
    let va = sd_a * sd_a / n_eff_a;
    let vb = sd_b * sd_b / n_eff_b;
    let se2 = va + vb;
    let dof = if se2 > 0.0 {
        let denom = va * va / (n_eff_a - 1.0).max(1.0) + vb * vb / (n_eff_b - 1.0).max(1.0);
        (se2 * se2 / denom).max(1.0)
    } else {
        (n_eff_a + n_eff_b - 2.0).max(1.0)
    };
    let t = student_t_quantile(1.0 - (1.0 - level) / 2.0, dof)?;
    let std_error = se2.sqrt();
    Some(MeanDifference {
        mean_a,
        mean_b,
        sd_a,
        sd_b,
        n_a: a.len(),
        n_b: b.len(),
        n_eff_a,
        n_eff_b,
        diff: mean_b - mean_a,
        std_error,
        dof,
        half_width: t * std_error,
        level,
    })
}

/// SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): a tiny, seeded, deterministic generator for
/// simulations and resampling where reproducibility matters more than
/// cryptographic quality.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal value (Box–Muller).
    pub fn next_normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]: ln is finite
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn basic_statistics_known_answers() {
        let xs = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean(&xs), Some(5.0));
        assert!(close(variance(&xs).unwrap(), 32.0 / 7.0, 1e-12));
        assert_eq!(median(&xs), Some(4.5));
        assert_eq!(percentile(&xs, 0.0), Some(2.0));
        assert_eq!(percentile(&xs, 100.0), Some(9.0));
        // NumPy: np.percentile([2,4,4,4,5,5,7,9], 90) == 7.6
        assert!(close(percentile(&xs, 90.0).unwrap(), 7.6, 1e-12));
        assert_eq!(mean(&[]), None);
        assert_eq!(percentile(&xs, 101.0), None);
        assert_eq!(mean(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn t_quantiles_match_tables() {
        // Standard t-table values.
        assert!(close(student_t_quantile(0.975, 1.0).unwrap(), 12.706, 1e-3));
        assert!(close(student_t_quantile(0.975, 9.0).unwrap(), 2.262, 1e-3));
        assert!(close(student_t_quantile(0.995, 30.0).unwrap(), 2.750, 1e-3));
    }

    #[test]
    fn confidence_interval_known_answer() {
        // n = 10, mean 5.5, s = 3.02765; t(0.975, 9) = 2.2622 → half width 2.1659
        let xs: Vec<f64> = (1..=10).map(f64::from).collect();
        let ci = confidence_interval(&xs, 0.95).unwrap();
        assert!(close(ci.mean, 5.5, 1e-12));
        assert!(close(ci.half_width, 2.1659, 1e-3));
        assert!(ci.low() < 5.5 && ci.high() > 5.5);
        assert_eq!(confidence_interval(&[1.0], 0.95), None);
        assert_eq!(confidence_interval(&xs, 1.0), None);
    }

    #[test]
    fn pearson_known_answers() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert!(close(
            pearson(&x, &[2.0, 4.0, 6.0, 8.0, 10.0]).unwrap(),
            1.0,
            1e-12
        ));
        assert!(close(
            pearson(&x, &[5.0, 4.0, 3.0, 2.0, 1.0]).unwrap(),
            -1.0,
            1e-12
        ));
        // scipy.stats.pearsonr([1,2,3,4,5],[2,1,4,3,5]) = 0.8
        assert!(close(
            pearson(&x, &[2.0, 1.0, 4.0, 3.0, 5.0]).unwrap(),
            0.8,
            1e-12
        ));
        assert_eq!(pearson(&x, &[1.0; 5]), None);
        assert_eq!(pearson(&x, &[1.0, 2.0]), None);
    }

    #[test]
    fn summary() {
        let s = summarize(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.min, s.max, s.median), (3, 1.0, 3.0, 2.0));
        assert!(s.ci95.is_some());
        assert!(summarize(&[]).is_none());
    }

    /// An AR(1) series x_t = μ + ρ (x_{t−1} − μ) + σ ε_t, started in its
    /// stationary distribution.
    fn ar1(rng: &mut SplitMix64, n: usize, mu: f64, rho: f64, sigma: f64) -> Vec<f64> {
        let mut x = rng.next_normal() * sigma / (1.0 - rho * rho).sqrt();
        (0..n)
            .map(|_| {
                let v = mu + x;
                x = rho * x + sigma * rng.next_normal();
                v
            })
            .collect()
    }

    #[test]
    fn splitmix64_known_values_and_normal_moments() {
        // Reference outputs of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut r = SplitMix64::new(7);
        let xs: Vec<f64> = (0..100_000).map(|_| r.next_normal()).collect();
        assert!(mean(&xs).unwrap().abs() < 0.02);
        assert!((variance(&xs).unwrap() - 1.0).abs() < 0.02);
    }

    #[test]
    fn effective_sample_size_of_ar1_matches_theory() {
        // For AR(1), n_eff / n → (1 − ρ) / (1 + ρ).
        let mut rng = SplitMix64::new(42);
        for rho in [0.0, 0.5, 0.8] {
            let theory = (1.0 - rho) / (1.0 + rho);
            let mut ratios = Vec::new();
            for _ in 0..20 {
                let xs = ar1(&mut rng, 5000, 10.0, rho, 1.0);
                ratios.push(effective_sample_size(&xs).unwrap() / 5000.0);
            }
            let got = mean(&ratios).unwrap();
            eprintln!("rho {rho}: n_eff/n {got:.4}, theory {theory:.4}");
            assert!(
                (got - theory).abs() < 0.15 * theory + 0.02,
                "rho {rho}: n_eff/n {got}, theory {theory}"
            );
        }
        // A constant series is worth all its values; an alternating one
        // (negative correlation) is capped at n.
        assert_eq!(effective_sample_size(&[3.0; 10]), Some(10.0));
        let alt: Vec<f64> = (0..100).map(|i| (i % 2) as f64).collect();
        assert_eq!(effective_sample_size(&alt), Some(100.0));
        assert_eq!(effective_sample_size(&[1.0]), None);
    }

    #[test]
    fn independent_samples_give_about_the_student_t_interval() {
        let mut rng = SplitMix64::new(3);
        let a: Vec<f64> = (0..400).map(|_| rng.next_normal()).collect();
        let b: Vec<f64> = (0..400).map(|_| 1.0 + rng.next_normal()).collect();
        let ts = mean_difference(&a, &b, 0.95, Dependence::TimeSeries).unwrap();
        let iid = mean_difference(&a, &b, 0.95, Dependence::Independent).unwrap();
        // Welch with equal n and similar variances: half width ≈ 1.96 · √(2/400) = 0.139.
        assert!((iid.half_width - 0.139).abs() < 0.015, "{iid:?}");
        let ratio = ts.half_width / iid.half_width;
        assert!((0.85..=1.2).contains(&ratio), "ratio {ratio}");
        assert!((ts.diff - (mean(&b).unwrap() - mean(&a).unwrap())).abs() < 1e-12);
        assert!(ts.significant());
        // Known answer of the independent case: equal n, equal s → t(0.975, 2n−2).
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [2.0, 3.0, 4.0, 5.0];
        let d = mean_difference(&a, &b, 0.95, Dependence::Independent).unwrap();
        // s² = 5/3 each, se = √(2 · 5/3 / 4) = 0.9129, ν = 6, t = 2.4469 → 2.2338.
        assert!((d.diff - 1.0).abs() < 1e-12);
        assert!((d.dof - 6.0).abs() < 1e-9);
        assert!((d.half_width - 2.2338).abs() < 1e-3, "{d:?}");
        assert!(!d.significant());
        // Constant samples: different values differ, equal values do not.
        let c = mean_difference(&[1.0; 5], &[2.0; 5], 0.95, Dependence::TimeSeries).unwrap();
        assert!(c.significant() && c.half_width == 0.0);
        let c = mean_difference(&[1.0; 5], &[1.0; 5], 0.95, Dependence::TimeSeries).unwrap();
        assert!(!c.significant());
        assert!(mean_difference(&[1.0], &[1.0, 2.0], 0.95, Dependence::TimeSeries).is_none());
    }

    #[test]
    fn interval_width_on_ar1_matches_theory() {
        // Var(mean) of AR(1) ≈ σ²/(1−ρ)² / n; the interval of the difference of
        // two such means is 1.96 · √2 · σ/(1−ρ) / √n wide on each side.
        let (n, rho) = (2000, 0.7);
        let theory = 1.96 * 2f64.sqrt() / (1.0 - rho) / (n as f64).sqrt();
        let mut rng = SplitMix64::new(11);
        let widths: Vec<f64> = (0..30)
            .map(|_| {
                let a = ar1(&mut rng, n, 0.0, rho, 1.0);
                let b = ar1(&mut rng, n, 0.0, rho, 1.0);
                mean_difference(&a, &b, 0.95, Dependence::TimeSeries)
                    .unwrap()
                    .half_width
            })
            .collect();
        let got = mean(&widths).unwrap();
        eprintln!("AR(1) rho {rho}: mean half width {got:.5}, theory {theory:.5}");
        assert!((got / theory - 1.0).abs() < 0.12, "{got} vs {theory}");
    }

    #[test]
    fn coverage_on_autocorrelated_series_is_near_nominal_and_the_naive_interval_is_not() {
        // 400 pairs of AR(1) series (ρ = 0.6, n = 200) with equal means: the
        // time-series interval should contain the true difference 0 in about
        // 95 % of pairs; the plain Welch interval, √((1−ρ)/(1+ρ)) = 0.5 times
        // too narrow, in about 68 %.
        let mut rng = SplitMix64::new(2026);
        let (mut covered_ts, mut covered_iid) = (0, 0);
        let pairs = 400;
        for _ in 0..pairs {
            let a = ar1(&mut rng, 200, 5.0, 0.6, 1.0);
            let b = ar1(&mut rng, 200, 5.0, 0.6, 1.0);
            let ts = mean_difference(&a, &b, 0.95, Dependence::TimeSeries).unwrap();
            let iid = mean_difference(&a, &b, 0.95, Dependence::Independent).unwrap();
            covered_ts += usize::from(!ts.significant());
            covered_iid += usize::from(!iid.significant());
        }
        let (ts, iid) = (
            covered_ts as f64 / pairs as f64,
            covered_iid as f64 / pairs as f64,
        );
        eprintln!("coverage: time series {ts}, naive Welch {iid}");
        assert!((0.91..=0.985).contains(&ts), "time-series coverage {ts}");
        assert!(iid < 0.80, "naive coverage {iid}");
    }
}
