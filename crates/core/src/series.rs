//! A bounded series (ring) of timestamped values with the operations every
//! consumer needs: statistics, resampling to a common time base, correlation
//! and low-pass filtering.

use crate::{filter, stats};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// A bounded ring of `(monotonic ns, value)` points in time order. Pushing past
/// the capacity drops the oldest point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    capacity: usize,
    points: VecDeque<(u64, f64)>,
}

impl Series {
    /// An empty series holding at most `capacity` points (at least 1).
    pub fn new(capacity: usize) -> Series {
        let capacity = capacity.max(1);
        Series {
            capacity,
            points: VecDeque::with_capacity(capacity.min(4096)),
        }
    }

    /// A series of the given points (keeping the newest `capacity`).
    pub fn from_points(capacity: usize, points: impl IntoIterator<Item = (u64, f64)>) -> Series {
        let mut s = Series::new(capacity);
        for (t, v) in points {
            s.push(t, v);
        }
        s
    }

    /// The most points the series keeps (at least 1).
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// The number of points held (at most [`capacity`](Series::capacity)).
    pub fn len(&self) -> usize {
        self.points.len()
    }
    /// Whether the series holds no points.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Appends a point. Points older than the newest one are inserted in order so
    /// the series stays sorted by time.
    pub fn push(&mut self, t_ns: u64, value: f64) {
        if self.points.len() == self.capacity {
            self.points.pop_front();
        }
        match self.points.back() {
            Some(&(last, _)) if t_ns < last => {
                let at = self.points.partition_point(|&(t, _)| t <= t_ns);
                self.points.insert(at, (t_ns, value));
            }
            _ => self.points.push_back((t_ns, value)),
        }
    }

    /// Drops every point; the capacity stays.
    pub fn clear(&mut self) {
        self.points.clear();
    }

    /// The `(monotonic ns, value)` points, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, f64)> + '_ {
        self.points.iter().copied()
    }

    /// The values alone, oldest first.
    pub fn values(&self) -> Vec<f64> {
        self.points.iter().map(|&(_, v)| v).collect()
    }

    /// The time stamps alone (monotonic ns), oldest first.
    pub fn times(&self) -> Vec<u64> {
        self.points.iter().map(|&(t, _)| t).collect()
    }

    /// The newest point; `None` when empty.
    pub fn last(&self) -> Option<(u64, f64)> {
        self.points.back().copied()
    }

    /// The mean of the values ([`stats::mean`]); `None` when empty or any
    /// value is NaN.
    pub fn mean(&self) -> Option<f64> {
        stats::mean(&self.values())
    }

    /// The median of the values ([`stats::median`]); `None` when empty or
    /// any value is NaN.
    pub fn median(&self) -> Option<f64> {
        stats::median(&self.values())
    }

    /// The `p`-th percentile (0–100).
    pub fn percentile(&self, p: f64) -> Option<f64> {
        stats::percentile(&self.values(), p)
    }

    /// The points with `from_ns <= t < to_ns`.
    pub fn window(&self, from_ns: u64, to_ns: u64) -> Series {
        Series::from_points(
            self.capacity,
            self.iter().filter(|&(t, _)| t >= from_ns && t < to_ns),
        )
    }

    /// Linear interpolation of the value at `t_ns`; `None` outside the series' span.
    pub fn value_at(&self, t_ns: u64) -> Option<f64> {
        let first = self.points.front()?;
        let last = self.points.back()?;
        if t_ns < first.0 || t_ns > last.0 {
            return None;
        }
        let i = self.points.partition_point(|&(t, _)| t < t_ns);
        let (t1, v1) = self.points[i];
        if t1 == t_ns || i == 0 {
            return Some(v1);
        }
        let (t0, v0) = self.points[i - 1];
        Some(v0 + (v1 - v0) * (t_ns - t0) as f64 / (t1 - t0) as f64)
    }

    /// Resamples onto a regular grid `start, start+step, …` (while ≤ `end`) by
    /// linear interpolation; grid points outside the series' span are skipped.
    pub fn resample(&self, start_ns: u64, end_ns: u64, step_ns: u64) -> Series {
        let step = step_ns.max(1);
        let n = ((end_ns.saturating_sub(start_ns)) / step + 1) as usize;
        let mut out = Series::new(n.max(1));
        let mut t = start_ns;
        while t <= end_ns {
            if let Some(v) = self.value_at(t) {
                out.push(t, v);
            }
            t = match t.checked_add(step) {
                Some(t) => t,
                None => break,
            };
        }
        out
    }

    /// Pearson correlation with `other` after resampling both onto the
    /// overlap of their spans with `step_ns`.
    pub fn correlation(&self, other: &Series, step_ns: u64) -> Option<f64> {
        let start = self.points.front()?.0.max(other.points.front()?.0);
        let end = self.points.back()?.0.min(other.points.back()?.0);
        if end <= start {
            return None;
        }
        let a = self.resample(start, end, step_ns);
        let b = other.resample(start, end, step_ns);
        stats::pearson(&a.values(), &b.values())
    }

    /// Zero-phase Butterworth low-pass filtering of the values (assumed evenly
    /// spaced; resample first otherwise). `cutoff` is a fraction of the Nyquist
    /// frequency in (0, 1).
    pub fn lowpass(&self, order: usize, cutoff: f64) -> Option<Series> {
        let filtered = filter::butterworth_lowpass_filtfilt(&self.values(), order, cutoff)?;
        Some(Series::from_points(
            self.capacity,
            self.times().into_iter().zip(filtered),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_bounded_and_ordered() {
        let mut s = Series::new(3);
        for i in 0..5u64 {
            s.push(i * 10, i as f64);
        }
        assert_eq!(s.len(), 3);
        assert_eq!(s.values(), vec![2.0, 3.0, 4.0]);
        s.push(25, 9.0);
        assert_eq!(s.times(), vec![25, 30, 40]);
        assert_eq!(s.mean(), Some((9.0 + 3.0 + 4.0) / 3.0));
    }

    #[test]
    fn resample_interpolates() {
        let s = Series::from_points(10, [(0, 0.0), (100, 10.0)]);
        let r = s.resample(0, 100, 25);
        assert_eq!(r.values(), vec![0.0, 2.5, 5.0, 7.5, 10.0]);
        assert_eq!(s.value_at(101), None);
        assert_eq!(s.window(0, 100).len(), 1);
    }

    #[test]
    fn correlation_on_common_time_base() {
        let a = Series::from_points(100, (0..20u64).map(|i| (i * 10, i as f64)));
        // Sampled at other instants, but the same line: correlation 1.
        let b = Series::from_points(
            100,
            (0..13u64).map(|i| (i * 15 + 5, 2.0 * (i * 15 + 5) as f64)),
        );
        let r = a.correlation(&b, 10).unwrap();
        assert!((r - 1.0).abs() < 1e-9, "{r}");
    }
}
