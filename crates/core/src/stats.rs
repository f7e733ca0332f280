//! Descriptive statistics, Student-t confidence intervals and Pearson correlation.
//!
//! Every function takes a slice and returns `None` where the statistic is not
//! defined (empty input, zero variance, NaN values) instead of panicking.

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
}
