//! One PID controller per (metric, CPU), built on the `pid` crate, plus the
//! closed loop that runs them against a [`MetricSource`].
//!
//! The `pid` crate assumes a fixed sample period and symmetric output limits.
//! [`Controller`] therefore (1) rescales the integral and derivative gains by
//! the actual interval each step (gains are per second), (2) centres the
//! symmetric PID output on a bias (the knob's feed-forward value) and clamps
//! the sum to the actuator's own range, and (3) stops integrating while the
//! knob sits at a range end and the error pushes further out (conditional
//! integration: anti-windup), so a saturated loop recovers at once when the
//! target moves back into reach.
//!
//! A pair is *within tolerance* when the mean of its last `needed`
//! measurements is, and each half of that window is within twice the
//! tolerance (no transient passes): one interval's value is too coarse a
//! judge — `/proc/stat` counts idle time in 10 ms units, so a 250 ms
//! utilization sample alone is only good to ±4 percentage points, while the
//! mean of 8 (2 s) is good to ±0.5.
//!
//! Coupled metrics (an L2 miss is also an L1 miss) are controlled deepest
//! first: each step visits a CPU's controllers from the deepest cache level
//! up, and a shallower controller integrates at a quarter of its rate until
//! every deeper one is within twice its tolerance, then at full rate tops up
//! the rest. (Not a hard hold: a deeper ratio needs the shallower levels'
//! traffic to exist at all.)

use crate::metric::LoadMetric;
use crate::source::{Measurement, MetricSource};
use crate::LoadError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Gains in knob units per metric unit (per second for `ki`, seconds for `kd`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gains {
    /// Proportional gain: knob change per unit of error.
    pub kp: f64,
    /// Integral gain, per second: rescaled by each step's actual interval.
    pub ki: f64,
    /// Derivative gain, in seconds: divided by each step's actual interval.
    pub kd: f64,
}

impl Gains {
    /// Defaults for knobs with roughly unit gain on their metric (every
    /// generator's knob is scaled that way): mostly integral action.
    pub fn default_for(_metric: LoadMetric) -> Gains {
        Gains {
            kp: 0.3,
            ki: 1.5,
            kd: 0.0,
        }
    }
}

/// A controller's state worth storing in a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ControllerState {
    /// The gains it ran with.
    pub gains: Gains,
    /// The feed-forward knob value the PID output is centred on.
    pub bias: f64,
    /// The PID integral term at the last step, in knob units.
    pub integral: f64,
    /// The knob it last set, within `range`.
    pub knob: f64,
    /// The actuator's `(min, max)` knob range from the safety caps.
    pub range: (f64, f64),
}

/// A PID controller for one (metric, CPU).
#[derive(Clone, Debug)]
pub struct Controller {
    pid: pid::Pid<f64>,
    gains: Gains,
    bias: f64,
    range: (f64, f64),
    knob: f64,
    integral: f64,
}

impl Controller {
    /// A controller for `target`, starting from knob `bias`, acting in `range`.
    pub fn new(target: f64, bias: f64, range: (f64, f64), gains: Gains) -> Controller {
        let span = (range.1 - range.0).abs().max(f64::MIN_POSITIVE);
        let mut pid = pid::Pid::new(target, 2.0 * span);
        pid.p(gains.kp, 2.0 * span)
            .i(0.0, 2.0 * span)
            .d(0.0, 2.0 * span);
        let bias = bias.clamp(range.0, range.1);
        Controller {
            pid,
            gains,
            bias,
            range,
            knob: bias,
            integral: 0.0,
        }
    }

    /// The current setpoint, in the metric's unit.
    pub fn target(&self) -> f64 {
        self.pid.setpoint
    }

    /// Moves the setpoint; the integral stays (bumpless).
    pub fn set_target(&mut self, target: f64) {
        self.pid.setpoint(target);
    }

    /// The knob of the last step (the bias before the first), within range.
    pub fn knob(&self) -> f64 {
        self.knob
    }

    /// One step: the new knob for `measured` over an interval of `dt_s`
    /// seconds, integrating at `integral_scale` (0..=1) of the full rate
    /// (coupled-metric sequencing).
    pub fn step(&mut self, measured: f64, dt_s: f64, integral_scale: f64) -> f64 {
        let dt = dt_s.clamp(1e-3, 10.0);
        let error = self.pid.setpoint - measured;
        let at_high = self.knob >= self.range.1 && error > 0.0;
        let at_low = self.knob <= self.range.0 && error < 0.0;
        let hold = at_high || at_low;
        self.pid.ki = if hold {
            0.0
        } else {
            self.gains.ki * dt * integral_scale.clamp(0.0, 1.0)
        };
        self.pid.kd = self.gains.kd / dt;
        let out = self.pid.next_control_output(measured);
        self.integral = out.i;
        self.knob = (self.bias + out.output).clamp(self.range.0, self.range.1);
        self.knob
    }

    /// A snapshot for a model file.
    pub fn state(&self) -> ControllerState {
        ControllerState {
            gains: self.gains,
            bias: self.bias,
            integral: self.integral,
            knob: self.knob,
            range: self.range,
        }
    }
}

/// Convergence: every |target − measured| within tolerance for `needed`
/// consecutive samples.
#[derive(Clone, Debug)]
pub struct Convergence {
    /// Samples within tolerance that count as converged; for a
    /// [`ClosedLoop`] also the length of each pair's averaging window.
    pub needed: u32,
    streak: u32,
}

impl Convergence {
    /// Not converged, needing `needed` samples.
    pub fn new(needed: u32) -> Convergence {
        Convergence { needed, streak: 0 }
    }
    /// Feeds one sample's verdict; true once converged.
    pub fn observe(&mut self, all_within: bool) -> bool {
        self.streak = if all_within { self.streak + 1 } else { 0 };
        self.converged()
    }
    /// Whether the last `needed` verdicts were all within tolerance.
    pub fn converged(&self) -> bool {
        self.streak >= self.needed
    }
}

/// Whether `measured` is within the tolerance of `target` for `metric`
/// (`(absolute, relative)`: the larger applies).
pub fn within(metric: LoadMetric, tolerance: (f64, f64), target: f64, measured: f64) -> bool {
    let _ = metric;
    let tol = tolerance.0.max(tolerance.1 * target.abs());
    (target - measured).abs() <= tol
}

/// One controlled pair's progress, for progress bars and reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairStatus {
    /// The controlled metric.
    pub metric: LoadMetric,
    /// The CPU it is controlled on.
    pub cpu: u32,
    /// The current setpoint, in the metric's unit.
    pub target: f64,
    /// The last measured value; `None` until one arrived.
    pub measured: Option<f64>,
    /// The knob the controller last set.
    pub knob: f64,
    /// Whether the pair's full convergence window is within tolerance (see
    /// the module notes).
    pub within: bool,
}

/// Something the loop can turn: normally [`crate::actuate::Actuators`].
pub trait KnobSink {
    /// Sets the knob of `metric` on `cpu` to `value` (already clamped to its
    /// range); a pair the sink has no generator for is ignored.
    fn set(&mut self, metric: LoadMetric, cpu: u32, value: f64);
}

impl KnobSink for crate::actuate::Actuators {
    fn set(&mut self, metric: LoadMetric, cpu: u32, value: f64) {
        if let Some(k) = self.knob(metric, cpu) {
            k.set(value);
        }
    }
}

/// The closed loop over many (metric, CPU) pairs.
pub struct ClosedLoop {
    /// One controller per (metric, CPU) pair.
    pub controllers: BTreeMap<(LoadMetric, u32), Controller>,
    /// Each pair's `(absolute, relative)` tolerance; the larger applies.
    pub tolerance: BTreeMap<(LoadMetric, u32), (f64, f64)>,
    /// The convergence verdict; its `needed` is the window length.
    pub convergence: Convergence,
    last: BTreeMap<(LoadMetric, u32), f64>,
    /// The last `needed` measurements per pair (the convergence window).
    window: BTreeMap<(LoadMetric, u32), std::collections::VecDeque<f64>>,
    last_t: Option<u64>,
    /// Samples taken so far.
    pub samples: u64,
}

impl ClosedLoop {
    /// An empty loop whose convergence window is `needed` samples.
    pub fn new(needed: u32) -> ClosedLoop {
        ClosedLoop {
            controllers: BTreeMap::new(),
            tolerance: BTreeMap::new(),
            convergence: Convergence::new(needed),
            last: BTreeMap::new(),
            window: BTreeMap::new(),
            last_t: None,
            samples: 0,
        }
    }

    /// Adds a controlled pair.
    pub fn add(&mut self, metric: LoadMetric, cpu: u32, c: Controller, tolerance: (f64, f64)) {
        self.controllers.insert((metric, cpu), c);
        self.tolerance.insert((metric, cpu), tolerance);
    }

    /// Whether the pair's window (full, unless `partial`) has its mean within
    /// `factor` × its tolerance and each half within twice that.
    fn pair_within(&self, key: &(LoadMetric, u32), factor: f64, partial: bool) -> bool {
        let (Some(c), Some(w)) = (self.controllers.get(key), self.window.get(key)) else {
            return false;
        };
        let needed = self.convergence.needed.max(1) as usize;
        if w.is_empty() || (!partial && w.len() < needed) {
            return false;
        }
        let t = self.tolerance[key];
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let v: Vec<f64> = w.iter().copied().collect();
        let ok = |vals: &[f64], f: f64| {
            vals.is_empty() || within(key.0, (t.0 * f, t.1 * f), c.target(), mean(vals))
        };
        let (a, b) = v.split_at(v.len() / 2);
        ok(&v, factor) && ok(a, 2.0 * factor) && ok(b, 2.0 * factor)
    }

    /// Whether the pair's last measurement is within `factor` × its tolerance
    /// (the coupled-metric sequencing: fast, one sample is enough there).
    fn last_within(&self, key: &(LoadMetric, u32), factor: f64) -> bool {
        let (Some(c), Some(m)) = (self.controllers.get(key), self.last.get(key)) else {
            return false;
        };
        let t = self.tolerance[key];
        within(key.0, (t.0 * factor, t.1 * factor), c.target(), *m)
    }

    /// The mean of a pair's convergence window (its last `needed` measurements).
    pub fn window_mean(&self, metric: LoadMetric, cpu: u32) -> Option<f64> {
        let w = self.window.get(&(metric, cpu))?;
        (!w.is_empty()).then(|| w.iter().sum::<f64>() / w.len() as f64)
    }

    /// Moves a pair's target (dynamic replay); its window starts anew.
    pub fn set_target(&mut self, metric: LoadMetric, cpu: u32, target: f64) {
        if let Some(c) = self.controllers.get_mut(&(metric, cpu)) {
            if c.target() != target {
                c.set_target(target);
                self.window.remove(&(metric, cpu));
            }
        }
    }

    /// Feeds one measurement: steps every controller with a value in it,
    /// deepest cache level first, and turns the knobs. Returns whether the
    /// loop has converged.
    pub fn step(&mut self, m: &Measurement, sink: &mut dyn KnobSink) -> bool {
        let dt = match self.last_t {
            Some(t) if m.t_ns > t => (m.t_ns - t) as f64 / 1e9,
            _ => m.interval_ns as f64 / 1e9,
        };
        self.last_t = Some(m.t_ns);
        self.samples += 1;
        let needed = self.convergence.needed.max(1) as usize;
        for (k, v) in &m.values {
            if self.controllers.contains_key(k) {
                self.last.insert(*k, *v);
                let w = self.window.entry(*k).or_default();
                w.push_back(*v);
                while w.len() > needed {
                    w.pop_front();
                }
            }
        }
        let mut keys: Vec<(LoadMetric, u32)> = self.controllers.keys().copied().collect();
        keys.sort_by_key(|(metric, cpu)| (*cpu, std::cmp::Reverse(metric.depth())));
        for key in keys {
            let Some(v) = m.values.get(&key).copied() else {
                continue;
            };
            let deeper_settled = self
                .controllers
                .keys()
                .filter(|(dm, dc)| *dc == key.1 && dm.depth() > key.0.depth() && key.0.depth() > 0)
                .all(|k| self.last_within(k, 2.0));
            let c = self.controllers.get_mut(&key).expect("key from the map");
            let knob = c.step(v, dt, if deeper_settled { 1.0 } else { 0.25 });
            sink.set(key.0, key.1, knob);
        }
        // A full window within tolerance is convergence (`needed` samples).
        let all = self
            .controllers
            .keys()
            .all(|k| self.pair_within(k, 1.0, false));
        self.convergence.streak = if all { self.convergence.needed } else { 0 };
        self.convergence.converged()
    }

    /// Every pair's target, last measurement and knob.
    pub fn status(&self) -> Vec<PairStatus> {
        self.controllers
            .iter()
            .map(|(k, c)| PairStatus {
                metric: k.0,
                cpu: k.1,
                target: c.target(),
                measured: self.last.get(k).copied(),
                knob: c.knob(),
                within: self.pair_within(k, 1.0, false),
            })
            .collect()
    }

    /// Runs until converged or `max_samples`, calling `progress` each sample.
    pub fn run_until_converged(
        &mut self,
        source: &mut dyn MetricSource,
        sink: &mut dyn KnobSink,
        max_samples: u64,
        progress: &mut dyn FnMut(&ClosedLoop),
    ) -> Result<u64, LoadError> {
        for _ in 0..max_samples {
            let m = source.next()?;
            let done = self.step(&m, sink);
            progress(self);
            if done {
                return Ok(self.samples);
            }
        }
        let off: Vec<String> = self
            .status()
            .iter()
            .filter(|s| !s.within)
            .map(|s| {
                format!(
                    "{} on CPU {}: target {:.4}, measured {}, knob {:.4}",
                    s.metric,
                    s.cpu,
                    s.target,
                    s.measured.map_or("none".into(), |v| format!("{v:.4}")),
                    s.knob
                )
            })
            .collect();
        Err(LoadError::NotConverged(format!(
            "not converged after {max_samples} samples: {}",
            off.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_to_the_actuator_range_and_does_not_wind_up() {
        // Plant: measured = 0.5 + knob (a background of 0.5); target 0.3 is unreachable.
        let mut c = Controller::new(
            0.3,
            0.0,
            (0.0, 0.9),
            Gains::default_for(LoadMetric::CpuUtil),
        );
        let mut knob = 0.0;
        for _ in 0..200 {
            knob = c.step(0.5 + knob, 0.2, 1.0);
            assert!((0.0..=0.9).contains(&knob));
        }
        assert_eq!(knob, 0.0);
        // Target back within reach: recovers in a few steps (no wound-up integral).
        c.set_target(0.8);
        let mut steps = 0;
        while ((0.5 + knob) - 0.8f64).abs() > 0.01 {
            knob = c.step(0.5 + knob, 0.2, 1.0);
            steps += 1;
            assert!(steps < 40, "no recovery: knob {knob}");
        }
    }
}
