//! The workflow of thesis 6.2.1 on top of the parts: [`synthesize`] (closed
//! loop until converged, then the knobs become a model) and [`replay`] (from
//! a model's knobs, optionally following the recorded series and measuring
//! the deviation per metric).
//!
//! A target is a *total* (everything on the CPU, or the listed processes),
//! and a fixed knob holds a total only while the rest of it — other tasks on
//! the CPU, what the other generators cost under contention — stays as it
//! was during synthesis. So [`replay`] with a source keeps the loop closed
//! ([`ReplayMode::ClosedLoop`], the CLI's default): the controllers start
//! from the stored knobs (no transient when nothing changed) and go on
//! holding the targets when something did. [`ReplayMode::OpenLoop`] applies
//! the stored knobs as they are (the thesis' open-loop replay).

use crate::actuate::{Actuators, CacheLevels};
use crate::config::LoadConfig;
use crate::control::{ClosedLoop, Controller, Gains, KnobSink, PairStatus};
use crate::metric::{Formula, LoadMetric};
use crate::model::{LoadModel, ModelEntry, MODEL_SCHEMA};
use crate::source::MetricSource;
use crate::targets::LoadTargets;
use crate::LoadError;
use hwqos_topology::HardwareModel;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// How the closed loop runs.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    /// Measurement period.
    pub period: Duration,
    /// Consecutive samples within tolerance that count as converged.
    pub needed: u32,
    /// Give up (an error) after this long.
    pub timeout: Duration,
    /// Samples after convergence over which the stored knobs are averaged.
    pub hold: u32,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            period: Duration::from_millis(250),
            needed: 8,
            timeout: Duration::from_secs(120),
            hold: 24,
        }
    }
}

/// The knob a controller starts from: the target itself (every knob has
/// roughly unit gain on its metric: a duty cycle, a rate, or for the caches
/// the miss ratio asked of that level).
pub fn initial_knob(targets: &LoadTargets, metric: LoadMetric, cpu: u32) -> f64 {
    targets
        .targets
        .iter()
        .find(|x| x.metric == metric && x.cpu == cpu)
        .map_or(0.0, |x| x.mean)
}

/// Runs the closed loop for `targets` with actuators from `start` (normally
/// [`Actuators::start`]) and a `source`; on convergence returns the model.
#[allow(clippy::too_many_arguments)]
pub fn synthesize<S: KnobSink>(
    targets: &LoadTargets,
    node: HardwareModel,
    source: &mut dyn MetricSource,
    sink: &mut S,
    ranges: &dyn Fn(LoadMetric, u32) -> (f64, f64),
    opts: &SynthOptions,
    progress: &mut dyn FnMut(&[PairStatus], u64),
) -> Result<LoadModel, LoadError> {
    let mut lp = ClosedLoop::new(opts.needed);
    for t in &targets.targets {
        if t.metric.formula() == Formula::SelfReported {
            continue;
        }
        let bias = initial_knob(targets, t.metric, t.cpu);
        let c = Controller::new(
            t.mean,
            bias,
            ranges(t.metric, t.cpu),
            Gains::default_for(t.metric),
        );
        sink.set(t.metric, t.cpu, c.knob());
        lp.add(t.metric, t.cpu, c, t.metric.default_tolerance());
    }
    let max_samples = (opts.timeout.as_secs_f64() / opts.period.as_secs_f64())
        .ceil()
        .max(1.0) as u64;
    let start = hwqos_core::time::monotonic_ns();
    let mut first_t = None;
    let mut last_t = 0;
    let mut wrapped = |l: &ClosedLoop| progress(&l.status(), l.samples);
    let samples = {
        let mut src = TimedSource {
            inner: source,
            first: &mut first_t,
            last: &mut last_t,
        };
        lp.run_until_converged(&mut src, sink, max_samples, &mut wrapped)?
    };
    let convergence_s = match first_t {
        Some(f) => (last_t - f) as f64 / 1e9,
        None => (hwqos_core::time::monotonic_ns() - start) as f64 / 1e9,
    };
    // Hold: keep controlling, average the knobs.
    let mut sums: BTreeMap<(LoadMetric, u32), f64> = BTreeMap::new();
    let mut measured: BTreeMap<(LoadMetric, u32), (f64, usize)> = BTreeMap::new();
    for _ in 0..opts.hold {
        let m = source.next()?;
        lp.step(&m, sink);
        progress(&lp.status(), lp.samples);
        for (k, c) in &lp.controllers {
            *sums.entry(*k).or_default() += c.knob();
        }
        for (k, v) in &m.values {
            let e = measured.entry(*k).or_default();
            e.0 += v;
            e.1 += 1;
        }
    }
    let mut entries = Vec::new();
    for t in &targets.targets {
        let key = (t.metric, t.cpu);
        let (knob, controller, tolerance) = match lp.controllers.get(&key) {
            Some(c) => (
                if opts.hold > 0 {
                    sums[&key] / opts.hold as f64
                } else {
                    c.knob()
                },
                c.state(),
                lp.tolerance[&key],
            ),
            None => {
                // Open-loop metrics: the knob is the target itself.
                let range = ranges(t.metric, t.cpu);
                let knob = t.mean.clamp(range.0, range.1);
                let c = Controller::new(t.mean, knob, range, Gains::default_for(t.metric));
                (knob, c.state(), t.metric.default_tolerance())
            }
        };
        entries.push(ModelEntry {
            metric: t.metric,
            cpu: t.cpu,
            target: t.mean,
            knob,
            controller,
            tolerance,
            measured: measured.get(&key).map(|(s, n)| s / *n as f64),
            series: t.series.clone(),
        });
    }
    Ok(LoadModel {
        schema: MODEL_SCHEMA.into(),
        created: hwqos_core::time::format_rfc3339(hwqos_core::time::wall_ns()),
        version: 0,
        node,
        convergence_s,
        samples,
        period_s: opts.period.as_secs_f64(),
        measured_on: crate::model::ModelScope::WholeCpu,
        entries,
    })
}

struct TimedSource<'a> {
    inner: &'a mut dyn MetricSource,
    first: &'a mut Option<u64>,
    last: &'a mut u64,
}

impl MetricSource for TimedSource<'_> {
    fn next(&mut self) -> Result<crate::source::Measurement, LoadError> {
        let m = self.inner.next()?;
        if self.first.is_none() {
            // The loop starts when the first interval began.
            *self.first = Some(m.t_ns.saturating_sub(m.interval_ns));
        }
        *self.last = m.t_ns;
        Ok(m)
    }
}

/// The measured deviation of one replayed pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Deviation {
    /// The replayed metric.
    pub metric: LoadMetric,
    /// The CPU it was replayed on.
    pub cpu: u32,
    /// The model's target, in the metric's unit.
    pub target: f64,
    /// The mean measured after the warm-up (for a self-reported metric, the
    /// work done over the whole replay per second).
    pub measured: f64,
    /// Intervals averaged into `measured` (1 for a self-reported metric).
    pub samples: usize,
    /// (measured − target) / target (absolute difference when the target is 0).
    pub relative: f64,
}

/// The knob for time `t_s` of a dynamic replay: the stored knob scaled by
/// the series value over its mean (knobs have roughly unit gain), clamped.
pub fn dynamic_knob(e: &ModelEntry, t_s: f64) -> f64 {
    if e.series.is_empty() || e.target <= 0.0 {
        return e.knob;
    }
    let v = dynamic_target(e, t_s);
    (e.knob * v / e.target).clamp(e.controller.range.0, e.controller.range.1)
}

/// Whether a generator ended on its own (an error, or the I/O volume cap):
/// the replay then ends too, and stopping reports the error if there was one.
fn ended(actuators: &Actuators) -> bool {
    let finished = actuators.finished();
    if !finished.is_empty() {
        tracing::warn!(
            "generator(s) {} ended; ending the replay",
            finished.join(", ")
        );
        return true;
    }
    false
}

/// The convergence window of a closed-loop replay (samples).
pub const REPLAY_WINDOW: u32 = 8;

/// Measured values per (metric, CPU).
pub type Values = BTreeMap<(LoadMetric, u32), f64>;

/// How [`replay`] drives the knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReplayMode {
    /// Controllers start from the stored knobs and keep holding the targets
    /// (needs a source; without one the knobs stay fixed).
    #[default]
    ClosedLoop,
    /// The stored knobs, fixed (or scaled by the series for `dynamic`).
    OpenLoop,
}

/// The target of an entry at time `t_s` of a dynamic replay (the series
/// value, looping over the recorded span), or its mean.
pub fn dynamic_target(e: &ModelEntry, t_s: f64) -> f64 {
    if e.series.is_empty() {
        return e.target;
    }
    let span = e.series.last().map_or(0.0, |p| p.0).max(1e-9);
    let t = t_s % span;
    e.series
        .iter()
        .rev()
        .find(|p| p.0 <= t)
        .or(e.series.first())
        .map_or(e.target, |p| p.1)
}

/// Replays `model` on `actuators` for `duration`; with a `source`, measures
/// every pair (after `warmup` samples), holds the targets when `mode` is
/// [`ReplayMode::ClosedLoop`], and returns the deviations.
#[allow(clippy::too_many_arguments)]
pub fn replay(
    model: &LoadModel,
    actuators: &mut Actuators,
    source: Option<&mut dyn MetricSource>,
    duration: Duration,
    dynamic: bool,
    mode: ReplayMode,
    warmup: usize,
    progress: &mut dyn FnMut(f64, &Values),
) -> Result<Vec<Deviation>, LoadError> {
    for e in &model.entries {
        actuators.set(e.metric, e.cpu, e.knob);
    }
    let stop = actuators.stop_flag();
    let start = hwqos_core::time::monotonic_ns();
    let elapsed = || (hwqos_core::time::monotonic_ns() - start) as f64 / 1e9;
    let mut sums: BTreeMap<(LoadMetric, u32), (f64, usize)> = BTreeMap::new();
    let work_start: BTreeMap<(LoadMetric, u32), u64> = model
        .entries
        .iter()
        .filter_map(|e| {
            actuators
                .work_done(e.metric, e.cpu)
                .map(|w| ((e.metric, e.cpu), w))
        })
        .collect();
    // The closed loop: one controller per measured pair, starting from the
    // stored knob (its bias) with the model's gains and range.
    let mut lp = ClosedLoop::new(crate::synth::REPLAY_WINDOW);
    if mode == ReplayMode::ClosedLoop {
        for e in &model.entries {
            if e.metric.formula() == Formula::SelfReported {
                continue;
            }
            let c = Controller::new(e.target, e.knob, e.controller.range, e.controller.gains);
            lp.add(e.metric, e.cpu, c, e.tolerance);
        }
    }
    match source {
        Some(src) => {
            let mut n = 0usize;
            while elapsed() < duration.as_secs_f64() && !stop.is_stopped() {
                if ended(actuators) {
                    break;
                }
                let m = src.next()?;
                n += 1;
                if mode == ReplayMode::ClosedLoop {
                    if dynamic {
                        for e in &model.entries {
                            lp.set_target(e.metric, e.cpu, dynamic_target(e, elapsed()));
                        }
                    }
                    lp.step(&m, actuators);
                }
                if dynamic {
                    for e in &model.entries {
                        if mode == ReplayMode::OpenLoop
                            || !lp.controllers.contains_key(&(e.metric, e.cpu))
                        {
                            actuators.set(e.metric, e.cpu, dynamic_knob(e, elapsed()));
                        }
                    }
                }
                if n > warmup {
                    for (k, v) in &m.values {
                        let s = sums.entry(*k).or_default();
                        s.0 += v;
                        s.1 += 1;
                    }
                }
                progress(elapsed(), &m.values);
            }
        }
        None => {
            while elapsed() < duration.as_secs_f64() && !stop.is_stopped() {
                if ended(actuators) {
                    break;
                }
                if dynamic {
                    for e in &model.entries {
                        actuators.set(e.metric, e.cpu, dynamic_knob(e, elapsed()));
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
                progress(elapsed(), &BTreeMap::new());
            }
        }
    }
    let secs = elapsed();
    let mut out = Vec::new();
    for e in &model.entries {
        let key = (e.metric, e.cpu);
        let measured = if e.metric.formula() == Formula::SelfReported {
            match (actuators.work_done(e.metric, e.cpu), work_start.get(&key)) {
                (Some(w), Some(w0)) => Some(((w - w0) as f64 / secs, 1)),
                _ => None,
            }
        } else {
            sums.get(&key).map(|(s, n)| (s / *n as f64, *n))
        };
        if let Some((measured, samples)) = measured {
            let relative = if e.target != 0.0 {
                (measured - e.target) / e.target
            } else {
                measured - e.target
            };
            out.push(Deviation {
                metric: e.metric,
                cpu: e.cpu,
                target: e.target,
                measured,
                samples,
                relative,
            });
        }
    }
    Ok(out)
}

/// Builds the actuators for a model's or targets' pairs with initial knobs
/// on `node`'s cache geometry (that of the first pair's CPU), stopped by
/// `stop` (see [`Actuators::start_with_stop`]).
pub fn actuators_for(
    pairs: &[((LoadMetric, u32), f64)],
    node: &hwqos_topology::Topology,
    cfg: &LoadConfig,
    stop: &crate::knob::StopFlag,
) -> Result<Actuators, LoadError> {
    let cpu = pairs.first().map_or(0, |p| p.0 .1);
    Actuators::start_with_stop(pairs, &CacheLevels::of(node, cpu), cfg, stop.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Controller, Gains};

    fn entry(series: Vec<(f64, f64)>) -> ModelEntry {
        ModelEntry {
            metric: LoadMetric::PageFaultRate,
            cpu: 1,
            target: 1000.0,
            knob: 800.0,
            controller: Controller::new(
                1000.0,
                800.0,
                (0.0, 1500.0),
                Gains::default_for(LoadMetric::PageFaultRate),
            )
            .state(),
            tolerance: (5.0, 0.02),
            measured: Some(1000.0),
            series,
        }
    }

    #[test]
    fn dynamic_knob_follows_the_series_scaled_by_the_stored_knob() {
        let e = entry(vec![
            (0.0, 500.0),
            (1.0, 1500.0),
            (2.0, 1000.0),
            (3.0, 1000.0),
        ]);
        assert_eq!(dynamic_knob(&e, 0.5), 400.0);
        assert_eq!(dynamic_knob(&e, 1.5), 1200.0);
        assert_eq!(dynamic_knob(&e, 2.5), 800.0);
        // Loops over the recorded span.
        assert_eq!(dynamic_knob(&e, 3.5), 400.0);
        // Clamped to the range.
        let e2 = entry(vec![(0.0, 5000.0), (1.0, 1000.0)]);
        assert_eq!(dynamic_knob(&e2, 0.1), 1500.0);
        // No series: the mean knob.
        assert_eq!(dynamic_knob(&entry(vec![]), 7.0), 800.0);
    }
}
