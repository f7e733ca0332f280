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

/// The `p`-quantile of Student's t distribution with `dof` degrees of freedom
/// (`dof` need not be an integer: Welch's degrees of freedom are not).
///
/// Below 10⁵ degrees of freedom it is solved by a bracketed Newton iteration
/// on the distribution function (the regularized incomplete beta function,
/// evaluated by its continued fraction with Lentz's method; bisection where a
/// Newton step leaves the bracket). From 10⁵ up, the Cornish–Fisher
/// expansion around the normal quantile (Abramowitz & Stegun 26.7.5, four
/// terms; the omitted one is below 1e-15 there) is used, and an infinite
/// `dof` gives the normal quantile. Accurate to about 1e-12 relative.
/// `None` for `p` outside (0, 1) or `dof` not positive or NaN.
pub fn student_t_quantile(p: f64, dof: f64) -> Option<f64> {
    if !(p > 0.0 && p < 1.0 && dof > 0.0) {
        return None;
    }
    if p == 0.5 {
        return Some(0.0);
    }
    // Solve upper_tail(t) = q for t > 0 and use the symmetry F(−t) = 1 − F(t).
    let (q, sign) = if p > 0.5 { (1.0 - p, 1.0) } else { (p, -1.0) };
    let t = if dof >= 1e5 {
        let z = solve_upper_tail(q, normal_upper_tail, |z| {
            (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt()
        })?;
        let (z2, r) = (z * z, 1.0 / dof);
        let g1 = z * (z2 + 1.0) / 4.0;
        let g2 = z * ((5.0 * z2 + 16.0) * z2 + 3.0) / 96.0;
        let g3 = z * (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) / 384.0;
        let g4 = z * ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) / 92160.0;
        z + r * (g1 + r * (g2 + r * (g3 + r * g4)))
    } else {
        let ln_norm = 0.5 * dof.ln() + ln_beta(dof / 2.0, 0.5);
        solve_upper_tail(
            q,
            |t| student_t_upper_tail(t, dof),
            |t| (-(dof + 1.0) / 2.0 * (t * t / dof).ln_1p() - ln_norm).exp(),
        )?
    };
    let t = sign * t;
    t.is_finite().then_some(t)
}

/// The `t > 0` where the decreasing `upper_tail` (whose derivative is
/// `−pdf`) equals `q` in (0, ½): a bracket found by doubling, then Newton
/// steps, bisecting where one leaves the bracket.
fn solve_upper_tail(
    q: f64,
    upper_tail: impl Fn(f64) -> f64,
    pdf: impl Fn(f64) -> f64,
) -> Option<f64> {
    let mut lo = 0.0_f64; // upper_tail(lo) > q
    let mut hi = 1.0_f64;
    while upper_tail(hi) > q {
        lo = hi;
        hi *= 2.0;
        if !hi.is_finite() {
            return None;
        }
    }
    let mut t = 0.5 * (lo + hi);
    for _ in 0..400 {
        let f = upper_tail(t) - q;
        if f == 0.0 {
            break;
        }
        if f > 0.0 {
            lo = t;
        } else {
            hi = t;
        }
        let newton = t + f / pdf(t);
        let next = if newton > lo && newton < hi {
            newton
        } else {
            0.5 * (lo + hi)
        };
        let done = (next - t).abs() <= 4.0 * f64::EPSILON * t || hi - lo <= 4.0 * f64::EPSILON * hi;
        t = next;
        if done {
            break;
        }
    }
    Some(t)
}

/// The cumulative distribution function of Student's t distribution with
/// `dof` degrees of freedom: P(T ≤ t) = 1 − ½ I_x(ν/2, ½) for t > 0, with
/// x = ν / (ν + t²) and I the regularized incomplete beta function. NaN for
/// NaN arguments or `dof` not positive and finite. The continued fraction
/// needs O(√ν) steps: meant for the ν below 10⁵ that the quantile solves
/// for (and the tests).
#[cfg_attr(not(test), allow(dead_code))]
fn student_t_cdf(t: f64, dof: f64) -> f64 {
    if t.is_nan() || !(dof > 0.0 && dof.is_finite()) {
        return f64::NAN;
    }
    if t > 0.0 {
        1.0 - student_t_upper_tail(t, dof)
    } else {
        student_t_upper_tail(-t, dof)
    }
}

/// The standard normal upper tail 1 − Φ(z) = ½ Q(½, z²/2) for z ≥ 0, Q the
/// regularized upper incomplete gamma function: its series below z²/2 = 1.5,
/// its continued fraction (Lentz's method) above (Numerical Recipes §6.2).
fn normal_upper_tail(z: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let u = 0.5 * z * z;
    let a = 0.5;
    // ln Γ(½) = ½ ln π.
    let front = (-u + a * u.ln() - 0.5 * std::f64::consts::PI.ln()).exp();
    if u < a + 1.0 {
        // P(a, u) = e^{−u} u^a / Γ(a + 1) · Σ uⁿ / ((a + 1)…(a + n)).
        let (mut term, mut sum, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..200 {
            ap += 1.0;
            term *= u / ap;
            sum += term;
            if term.abs() < sum.abs() * f64::EPSILON {
                break;
            }
        }
        0.5 * (1.0 - front * sum)
    } else {
        let mut b = u + 1.0 - a;
        let mut c = 1.0 / TINY;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..200 {
            let i = f64::from(i);
            let an = -i * (i - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < TINY {
                d = TINY;
            }
            c = b + an / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() <= f64::EPSILON {
                break;
            }
        }
        0.5 * front * h
    }
}

/// P(T > t) for t ≥ 0: ½ I_x(ν/2, ½), x = ν / (ν + t²), with 1 − x computed
/// as t² / (ν + t²) so that neither loses precision.
fn student_t_upper_tail(t: f64, dof: f64) -> f64 {
    if t.is_infinite() {
        return 0.0;
    }
    let t2 = t * t;
    let (x, y) = if t2 > dof {
        let r = dof / t2;
        (r / (1.0 + r), 1.0 / (1.0 + r))
    } else {
        let r = t2 / dof;
        (1.0 / (1.0 + r), r / (1.0 + r))
    };
    0.5 * regularized_beta(dof / 2.0, 0.5, x, y)
}

/// The regularized incomplete beta function I_x(a, b) for a, b > 0, given
/// both `x` and `y = 1 − x` (so a caller that knows 1 − x precisely keeps
/// it). Continued fraction (Numerical Recipes §6.4) evaluated by Lentz's
/// method, on the side of the symmetry I_x(a, b) = 1 − I_y(b, a) where it
/// converges quickly.
fn regularized_beta(a: f64, b: f64, x: f64, y: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if y <= 0.0 {
        return 1.0;
    }
    let ln_x = if x > 0.5 { (-y).ln_1p() } else { x.ln() };
    let ln_y = if y > 0.5 { (-x).ln_1p() } else { y.ln() };
    let front = (a * ln_x + b * ln_y - ln_beta(a, b)).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_continued_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_continued_fraction(b, a, y) / b
    }
}

/// The continued fraction of I_x(a, b) (the part after x^a (1−x)^b / (a B(a, b))),
/// modified Lentz's method.
fn beta_continued_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    // Converges in O(√max(a, b)) steps; the cap is far above what 1e6
    // degrees of freedom need.
    for m in 1..200_000 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        for aa in [
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ] {
            d = 1.0 + aa * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + aa / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            h *= d * c;
        }
        if (d * c - 1.0).abs() <= f64::EPSILON {
            break;
        }
    }
    h
}

/// ln B(a, b) = ln Γ(a) + ln Γ(b) − ln Γ(a + b). Where the larger argument
/// is large, ln Γ(a) − ln Γ(a + b) comes from the difference of Stirling's
/// series (no cancellation of two huge logarithms: the t distribution needs
/// B(ν/2, ½) for ν up to millions and beyond).
fn ln_beta(a: f64, b: f64) -> f64 {
    let (small, big) = if a < b { (a, b) } else { (b, a) };
    if big < 10.0 {
        return ln_gamma(a) + ln_gamma(b) - ln_gamma(a + b);
    }
    // ln Γ(z) = (z − ½) ln z − z + ½ ln 2π + c(z) gives
    // ln Γ(big) − ln Γ(big + small)
    //   = −small ln big − (big + small − ½) ln(1 + small/big) + small + c(big) − c(big + small).
    let diff = -small * big.ln() - (big + small - 0.5) * (small / big).ln_1p()
        + small
        + stirling_correction(big)
        - stirling_correction(big + small);
    let ln_gamma_small = if small < 10.0 {
        ln_gamma(small)
    } else {
        stirling(small)
    };
    ln_gamma_small + diff
}

/// c(z) = ln Γ(z) − ((z − ½) ln z − z + ½ ln 2π), Stirling's series, for z ≥ 10
/// (the omitted terms are below 1e-16 there).
fn stirling_correction(z: f64) -> f64 {
    let r = 1.0 / z;
    let r2 = r * r;
    r * (1.0 / 12.0
        - r2 * (1.0 / 360.0
            - r2 * (1.0 / 1260.0
                - r2 * (1.0 / 1680.0 - r2 * (1.0 / 1188.0 - r2 * (691.0 / 360_360.0))))))
}

/// ln Γ(z) by Stirling's series, z ≥ 10.
fn stirling(z: f64) -> f64 {
    const HALF_LN_2PI: f64 = 0.918_938_533_204_672_8;
    (z - 0.5) * z.ln() - z + HALF_LN_2PI + stirling_correction(z)
}

/// ln Γ(z) for z > 0: Stirling's series from 10 up, below it the Lanczos
/// approximation (g = 7, 9 terms; about 1e-15 relative), with the reflection
/// formula under ½.
fn ln_gamma(z: f64) -> f64 {
    const G: f64 = 7.0;
    const COEF: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if z >= 10.0 {
        return stirling(z);
    }
    if z < 0.5 {
        // Γ(z) Γ(1 − z) = π / sin(πz), positive for 0 < z < ½.
        let pi = std::f64::consts::PI;
        return (pi / (pi * z).sin()).ln() - ln_gamma(1.0 - z);
    }
    let z = z - 1.0;
    let mut sum = COEF[0];
    for (i, c) in COEF.iter().enumerate().skip(1) {
        sum += c / (z + i as f64);
    }
    let t = z + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (z + 0.5) * t.ln() - t + sum.ln()
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

    fn rel_err(got: f64, want: f64) -> f64 {
        if got == want {
            0.0
        } else {
            (got - want).abs() / want.abs()
        }
    }

    #[test]
    fn t_quantiles_match_textbook_tables() {
        // t₀.₉₇₅ from printed tables (4 decimals).
        for (dof, want) in [
            (1.0, 12.7062),
            (2.0, 4.3027),
            (10.0, 2.2281),
            (30.0, 2.0423),
        ] {
            let got = student_t_quantile(0.975, dof).unwrap();
            assert!((got - want).abs() < 5e-5, "dof {dof}: {got} vs {want}");
            let low = student_t_quantile(0.025, dof).unwrap();
            assert!(rel_err(-low, got) < 1e-14, "dof {dof}: symmetry");
        }
    }

    /// Values computed with mpmath at 40 digits (`betainc(ν/2, ½, 0, x,
    /// regularized=True)`, `findroot` for the quantiles): an oracle
    /// independent of both this code and statrs.
    #[test]
    #[allow(clippy::excessive_precision)] // mpmath's digits, as printed
    fn t_distribution_matches_high_precision_values() {
        let cdfs = [
            (-50.0, 1.0, 0.006_365_349_100_972_796_679_3),
            (-3.0, 1e6, 0.001_349_931_270_710_898_529_4),
            (2.0, 1e6, 0.977_249_733_074_340_395_79),
            (-6.0, 1e6, 9.869_249_061_772_173_349_5e-10),
            (-10.0, 3.0, 0.001_064_199_529_207_075_028_7),
            (1.5, 2.5, 0.876_081_773_456_851_869_44),
            (-40.0, 30.0, 6.863_022_597_203_201_393_6e-28),
        ];
        for (t, dof, want) in cdfs {
            let got = student_t_cdf(t, dof);
            // The continued fraction's thousands of steps at ν = 10⁶ cost
            // some digits (3.7e-11 relative at t = −3).
            let tol = if dof < 1e3 { 1e-12 } else { 1e-10 };
            assert!(
                rel_err(got, want) < tol,
                "cdf({t}, {dof}) = {got}, want {want}"
            );
        }
        let quantiles = [
            (0.9, 1e6, 1.281_552_412_129_938_606_9),
            (0.95, 1e6, 1.644_855_150_722_040_062),
            (0.975, 1e6, 1.959_966_356_814_106_655_3),
            (0.995, 1e6, 2.575_834_220_105_333_847_2),
            (0.9995, 1e6, 3.290_536_461_248_722_116_5),
            (0.9995, 1.0, 636.619_248_768_789_729_83),
            (0.995, 2.5, 7.163_728_138_948_782_879_1),
            (0.975, 1.0, 12.706_204_736_174_693_314),
            (0.975, 10.0, 2.228_138_851_986_274_224_5),
        ];
        for (p, dof, want) in quantiles {
            let got = student_t_quantile(p, dof).unwrap();
            assert!(
                rel_err(got, want) < 1e-12,
                "quantile({p}, {dof}) = {got}, want {want}"
            );
        }
    }

    /// statrs (a dev-dependency only) as the oracle over a grid: within 1e-9
    /// relative up to 100 degrees of freedom. At ν = 10⁶ statrs itself is
    /// off by up to about 2.5e-9 in the distribution function (cdf(−1.5) =
    /// 0.06680735895332879 against mpmath's 0.0668073591183964, where this
    /// code gives 0.0668073591183958), so the bound there is 1e-8; the
    /// high-precision test above holds this code to 1e-10. statrs's quantile
    /// at ν = 10⁶ is further off (1.28118 for p = 0.9, where mpmath and this
    /// code give 1.2815524121299386): those quantiles are checked against
    /// mpmath in the test above instead.
    #[test]
    fn t_distribution_matches_statrs() {
        use statrs::distribution::{ContinuousCDF, StudentsT};
        let dofs = [1.0, 2.0, 2.5, 3.0, 5.0, 10.0, 30.0, 100.0, 1e6];
        let ps = [0.5, 0.9, 0.95, 0.975, 0.995, 0.9995];
        for dof in dofs {
            let oracle = StudentsT::new(0.0, 1.0, dof).unwrap();
            let tol = if dof <= 100.0 { 1e-9 } else { 1e-8 };
            let (mut worst_cdf, mut worst_q) = (0.0_f64, 0.0_f64);
            for i in -200..=200 {
                let t = f64::from(i) * 0.25;
                let (got, want) = (student_t_cdf(t, dof), oracle.cdf(t));
                let e = rel_err(got, want);
                worst_cdf = worst_cdf.max(e);
                assert!(e <= tol, "cdf({t}, {dof}) = {got}, statrs {want}");
            }
            for p in ps.into_iter().filter(|_| dof <= 100.0) {
                for p in [p, 1.0 - p] {
                    let (got, want) = (student_t_quantile(p, dof).unwrap(), oracle.inverse_cdf(p));
                    let e = if want == 0.0 {
                        got.abs()
                    } else {
                        rel_err(got, want)
                    };
                    worst_q = worst_q.max(e);
                    assert!(e <= tol, "quantile({p}, {dof}) = {got}, statrs {want}");
                }
            }
            eprintln!("dof {dof}: worst relative difference from statrs: cdf {worst_cdf:e}, quantile {worst_q:e}");
        }
    }

    #[test]
    fn t_distribution_edge_cases() {
        assert_eq!(student_t_quantile(0.5, 7.0), Some(0.0));
        for p in [0.0, 1.0, -0.1, 1.1, f64::NAN] {
            assert_eq!(student_t_quantile(p, 5.0), None, "p {p}");
        }
        for dof in [0.0, -1.0, f64::NAN] {
            assert_eq!(student_t_quantile(0.9, dof), None, "dof {dof}");
            assert!(student_t_cdf(1.0, dof).is_nan(), "dof {dof}");
        }
        // Infinitely many degrees of freedom: the normal, Φ⁻¹(0.9) = 1.2815515655446004.
        let z = student_t_quantile(0.9, f64::INFINITY).unwrap();
        assert!(rel_err(z, 1.281_551_565_544_600_4) < 1e-14, "{z}");
        assert!(student_t_cdf(f64::NAN, 5.0).is_nan());
        assert_eq!(student_t_cdf(f64::INFINITY, 5.0), 1.0);
        assert_eq!(student_t_cdf(f64::NEG_INFINITY, 5.0), 0.0);
        assert_eq!(student_t_cdf(0.0, 5.0), 0.5);
        // Cauchy (ν = 1): F(t) = ½ + atan(t)/π.
        for t in [-3.0, -0.5, 0.25, 1.0, 7.0] {
            let want = 0.5 + f64::atan(t) / std::f64::consts::PI;
            assert!(rel_err(student_t_cdf(t, 1.0), want) < 1e-14, "t {t}");
        }
        // The two methods meet at 10⁵ degrees of freedom (the incomplete
        // beta just below, Cornish–Fisher from there).
        for p in [0.6, 0.9, 0.975, 0.9995] {
            let below = student_t_quantile(p, 99_999.999).unwrap();
            let at = student_t_quantile(p, 1e5).unwrap();
            assert!(rel_err(below, at) < 1e-11, "p {p}: {below} vs {at}");
        }
        // Very many degrees of freedom approach the normal: Φ(1.959963984540054) = 0.975.
        let q = student_t_quantile(0.975, 1e12).unwrap();
        assert!((q - 1.959_963_984_540_054).abs() < 1e-8, "{q}");
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
