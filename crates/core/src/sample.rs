//! Samples and frames: the unit of measurement in hwqos.
//!
//! A [`Sample`] is one value of one metric about one scope at one time. Counter
//! samples carry a [`CounterReading`]: the raw increment with the kernel's
//! `time_enabled`/`time_running` over the same interval, so a reader can see how
//! the value was scaled and whether the counter was multiplexed. A [`Frame`] holds
//! the samples of one sampling tick.

use crate::{MetricName, Scope, Timestamp};
use serde::{Deserialize, Serialize};

/// A counter's raw increment over one interval, as the kernel reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterReading {
    /// Events counted while the counter was actually on the PMU.
    pub raw: u64,
    /// Nanoseconds the counter was enabled during the interval.
    pub time_enabled: u64,
    /// Nanoseconds the counter was running (scheduled on a hardware counter).
    pub time_running: u64,
}

impl CounterReading {
    /// True when the counter ran for less than it was enabled: the value is an
    /// estimate scaled from a fraction of the interval.
    pub fn multiplexed(&self) -> bool {
        self.time_running < self.time_enabled
    }

    /// The raw count scaled by `time_enabled / time_running` (perf's estimate of
    /// what a dedicated counter would have counted). `None` if the counter never ran.
    pub fn scaled(&self) -> Option<f64> {
        if self.time_running == 0 {
            return if self.time_enabled == 0 && self.raw == 0 {
                Some(0.0)
            } else {
                None
            };
        }
        if self.time_running >= self.time_enabled {
            return Some(self.raw as f64);
        }
        Some(self.raw as f64 * self.time_enabled as f64 / self.time_running as f64)
    }

    /// Share of the enabled time the counter ran (1.0 = not multiplexed).
    pub fn running_fraction(&self) -> f64 {
        if self.time_enabled == 0 {
            1.0
        } else {
            (self.time_running as f64 / self.time_enabled as f64).min(1.0)
        }
    }

    /// The increment from an earlier cumulative reading to this cumulative one.
    pub fn delta_since(&self, earlier: &CounterReading) -> CounterReading {
        CounterReading {
            raw: self.raw.wrapping_sub(earlier.raw),
            time_enabled: self.time_enabled.saturating_sub(earlier.time_enabled),
            time_running: self.time_running.saturating_sub(earlier.time_running),
        }
    }
}

/// One value of one metric about one scope.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When the value was taken: for counters, the end of the interval.
    pub time: Timestamp,
    /// What the value is about (the node, a CPU, a process…).
    pub scope: Scope,
    /// Which metric it is; its unit and kind are in [`MetricName::info`].
    pub metric: MetricName,
    /// The value: for counters the (scaled) increment over the interval, for
    /// gauges the level.
    pub value: f64,
    /// For counters: the raw reading the value was scaled from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter: Option<CounterReading>,
}

impl Sample {
    /// A gauge (or any value without a counter reading).
    pub fn gauge(time: Timestamp, scope: Scope, metric: MetricName, value: f64) -> Sample {
        Sample {
            time,
            scope,
            metric,
            value,
            counter: None,
        }
    }

    /// A counter increment, valued at its scaled count. Returns `None` when the
    /// counter never ran during the interval (nothing honest to report).
    pub fn counter(
        time: Timestamp,
        scope: Scope,
        metric: MetricName,
        reading: CounterReading,
    ) -> Option<Sample> {
        Some(Sample {
            time,
            scope,
            metric,
            value: reading.scaled()?,
            counter: Some(reading),
        })
    }

    /// Whether the value was scaled from a multiplexed counter.
    pub fn multiplexed(&self) -> bool {
        self.counter.is_some_and(|c| c.multiplexed())
    }
}

/// A human-readable name for a scope in a frame (for example a process's `comm`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeLabel {
    /// The scope named.
    pub scope: Scope,
    /// Its name: a process's or thread's `comm`, a unit name.
    pub name: String,
}

/// The samples of one sampling tick.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// Tick sequence number since the sampler started (gaps mean missed ticks).
    pub seq: u64,
    /// When the tick was taken.
    pub time: Timestamp,
    /// The length of the interval the counters cover, in nanoseconds.
    pub interval_ns: u64,
    /// The tick's samples, in no guaranteed order; with event-set rotation a
    /// counter metric appears only in the ticks its set was measured.
    pub samples: Vec<Sample>,
    /// Names of the scopes in this frame that have one (process names, units).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<ScopeLabel>,
}

impl Frame {
    /// The first sample of `metric` about `scope`, if any.
    pub fn get(&self, scope: &Scope, metric: &str) -> Option<&Sample> {
        self.samples
            .iter()
            .find(|s| &s.scope == scope && s.metric.as_str() == metric)
    }

    /// The value of `metric` about `scope`, if sampled this tick.
    pub fn value(&self, scope: &Scope, metric: &str) -> Option<f64> {
        self.get(scope, metric).map(|s| s.value)
    }

    /// The distinct scopes in this frame, in first-seen order.
    pub fn scopes(&self) -> Vec<&Scope> {
        let mut out: Vec<&Scope> = Vec::new();
        for s in &self.samples {
            if !out.contains(&&s.scope) {
                out.push(&s.scope);
            }
        }
        out
    }

    /// The label of a scope, if the frame has one.
    pub fn label(&self, scope: &Scope) -> Option<&str> {
        self.labels
            .iter()
            .find(|l| &l.scope == scope)
            .map(|l| l.name.as_str())
    }

    /// Keeps only the samples for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&Sample) -> bool) {
        self.samples.retain(|s| keep(s));
        let samples = &self.samples;
        self.labels
            .retain(|l| samples.iter().any(|s| s.scope == l.scope));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &'static str) -> MetricName {
        MetricName::from_static(s)
    }

    #[test]
    fn scaling_is_honest() {
        let full = CounterReading {
            raw: 1000,
            time_enabled: 10,
            time_running: 10,
        };
        assert!(!full.multiplexed());
        assert_eq!(full.scaled(), Some(1000.0));
        let half = CounterReading {
            raw: 1000,
            time_enabled: 10,
            time_running: 5,
        };
        assert!(half.multiplexed());
        assert_eq!(half.scaled(), Some(2000.0));
        assert_eq!(half.running_fraction(), 0.5);
        let never = CounterReading {
            raw: 0,
            time_enabled: 10,
            time_running: 0,
        };
        assert_eq!(never.scaled(), None);
        assert!(
            Sample::counter(Timestamp::default(), Scope::System, m("hw.cycles"), never).is_none()
        );
        let idle = CounterReading {
            raw: 0,
            time_enabled: 0,
            time_running: 0,
        };
        assert_eq!(idle.scaled(), Some(0.0));
    }

    #[test]
    fn delta_of_cumulative_readings() {
        let a = CounterReading {
            raw: 100,
            time_enabled: 1000,
            time_running: 800,
        };
        let b = CounterReading {
            raw: 250,
            time_enabled: 2000,
            time_running: 1300,
        };
        assert_eq!(
            b.delta_since(&a),
            CounterReading {
                raw: 150,
                time_enabled: 1000,
                time_running: 500
            }
        );
    }

    #[test]
    fn frame_lookup_and_serde() {
        let t = Timestamp {
            mono_ns: 5,
            wall_ns: 6,
        };
        let reading = CounterReading {
            raw: 10,
            time_enabled: 4,
            time_running: 2,
        };
        let mut f = Frame {
            seq: 1,
            time: t,
            interval_ns: 100,
            samples: vec![
                Sample::counter(t, Scope::Process { pid: 7 }, m("sw.page_faults"), reading)
                    .unwrap(),
                Sample::gauge(t, Scope::Cpu { cpu: 0 }, m("os.cpu.util"), 0.25),
            ],
            labels: vec![ScopeLabel {
                scope: Scope::Process { pid: 7 },
                name: "sleep".into(),
            }],
        };
        assert_eq!(
            f.value(&Scope::Process { pid: 7 }, "sw.page_faults"),
            Some(20.0)
        );
        assert!(f
            .get(&Scope::Process { pid: 7 }, "sw.page_faults")
            .unwrap()
            .multiplexed());
        assert_eq!(f.label(&Scope::Process { pid: 7 }), Some("sleep"));
        let json = serde_json::to_string(&f).unwrap();
        let back: Frame = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f);
        f.retain(|s| s.scope.kind() == "cpu");
        assert_eq!(f.samples.len(), 1);
        assert!(f.labels.is_empty());
    }
}
