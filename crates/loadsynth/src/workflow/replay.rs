//! `replay` (and the agent's `run`): start the generators at a model's
//! knobs on this node and hold its targets in closed loop (or its knobs
//! fixed, open loop), optionally following the recorded series, measuring
//! the deviation per pair, until a duration ends or the stop flag is set.

use super::pairs::{self, Pair};
use super::{scope, Observer};
use crate::actuate::{Actuators, CacheLevels};
use crate::config::LoadConfig;
use crate::control;
use crate::knob::{Knob, StopFlag};
use crate::model::LoadModel;
use crate::source::{LocalSource, MeasureOn, MetricSource};
use crate::synth::{self, Deviation, ReplayMode};
use crate::{LoadError, LoadMetric};
use std::time::Duration;

/// Whether a replay measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Measuring {
    /// Always; a measurement that cannot start is an error (`--verify`, a
    /// closed-loop `replay`).
    Required,
    /// When it can; if it cannot start, a warning and an open-loop replay
    /// (the agent, and a replay that serves `/metrics`).
    #[default]
    IfPossible,
    /// Never (an open-loop replay nobody watches).
    Never,
}

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// How long (`None`: until the stop flag is set).
    pub duration: Option<Duration>,
    /// Follow the recorded series, not just the means.
    pub dynamic: bool,
    /// Closed loop (hold the targets) or open loop (fixed knobs). Without a
    /// measurement a replay is open loop whatever is asked.
    pub mode: ReplayMode,
    /// Replay a model made on a different CPU model or cache geometry.
    pub force: bool,
    /// Measurement period (at least 10 ms).
    pub period: Duration,
    /// What to measure; `None`: what the model was synthesized on.
    pub measure_on: Option<MeasureOn>,
    /// Whether to measure.
    pub measuring: Measuring,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            duration: None,
            dynamic: false,
            mode: ReplayMode::ClosedLoop,
            force: false,
            period: Duration::from_millis(250),
            measure_on: None,
            measuring: Measuring::IfPossible,
        }
    }
}

/// What a replay is about to do, given to [`Observer::replay_started`].
#[derive(Debug)]
pub struct ReplayStart<'a> {
    /// The model replayed.
    pub model: &'a LoadModel,
    /// The mode it runs in (open loop when nothing is measured).
    pub mode: ReplayMode,
    /// What is measured, if anything.
    pub measuring: Option<&'a MeasureOn>,
}

/// One replayed pair at one pass of the loop.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayedPair {
    /// The metric.
    pub metric: LoadMetric,
    /// The CPU.
    pub cpu: u32,
    /// The model's target (its mean).
    pub target: f64,
    /// This interval's measurement (`None` when nothing is measured).
    pub measured: Option<f64>,
    /// The generator's knob now.
    pub knob: f64,
    /// Whether the measurement is within the model's tolerance.
    pub within: Option<bool>,
}

/// How a replay went.
#[derive(Clone, Debug)]
pub struct ReplayReport {
    /// The mode it ran in.
    pub mode: ReplayMode,
    /// What it measured, if anything.
    pub measured: Option<MeasureOn>,
    /// Per measured pair, the mean measurement against the target.
    pub deviations: Vec<Deviation>,
    /// How long stopping and joining the generators took.
    pub stopping_took: Duration,
}

/// Replays `model` on this node. The model must fit the node (same CPU
/// model and cache geometry) unless `force`; other differences are
/// warnings. Returns when the duration is over, `stop` is set, or a
/// generator ends on its own (the I/O cap; an error is returned).
pub fn replay(
    model: &LoadModel,
    opts: &ReplayOptions,
    cfg: &LoadConfig,
    stop: &StopFlag,
    observer: &mut dyn Observer,
) -> Result<ReplayReport, LoadError> {
    let node = super::this_node()?;
    match model.check_node(&node) {
        Ok(warnings) => {
            for w in warnings {
                tracing::warn!("this node differs from the model's: {w}");
            }
        }
        Err(e) if opts.force => tracing::warn!("{e} (replaying anyway: forced)"),
        Err(e) => return Err(e),
    }
    let knobs: Vec<Pair> = model
        .entries
        .iter()
        .map(|e| ((e.metric, e.cpu), e.knob))
        .collect();
    pairs::check_online(&knobs, &node.topology)?;
    let wanted: Vec<(LoadMetric, u32)> = knobs.iter().map(|p| p.0).collect();
    let cpu = wanted.first().map_or(0, |w| w.1);
    let mut act = Actuators::start_with_stop(
        &knobs,
        &CacheLevels::of(&node.topology, cpu),
        cfg,
        stop.clone(),
    )?;
    let on = scope::replay_scope(model, opts.measure_on.as_ref());
    let measure = || {
        LocalSource::measuring(
            &wanted,
            opts.period.max(Duration::from_millis(10)),
            on.clone(),
        )
    };
    let mut source = match opts.measuring {
        Measuring::Required => Some(measure().map_err(|e| {
            LoadError::Measure(format!(
                "measuring {} to hold the targets: {e}",
                scope::describe(&on)
            ))
        })?),
        Measuring::IfPossible => match measure() {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(
                    "measuring {}: {e}; replaying the model's knobs open loop",
                    scope::describe(&on)
                );
                None
            }
        },
        Measuring::Never => None,
    };
    let mode = if source.is_some() {
        opts.mode
    } else {
        ReplayMode::OpenLoop
    };
    let measured = source.as_ref().map(|_| on.clone());
    observer.replay_started(&ReplayStart {
        model,
        mode,
        measuring: measured.as_ref(),
    });
    let handles: Vec<Option<Knob>> = model
        .entries
        .iter()
        .map(|e| act.knob(e.metric, e.cpu).cloned())
        .collect();
    let duration = opts
        .duration
        .unwrap_or(Duration::from_secs_f64(1e12))
        .min(Duration::from_secs_f64(1e12));
    let result = synth::replay(
        model,
        &mut act,
        source.as_mut().map(|s| s as &mut dyn MetricSource),
        duration,
        opts.dynamic,
        mode,
        2,
        &mut |t: f64, values: &synth::Values| {
            let now: Vec<ReplayedPair> = model
                .entries
                .iter()
                .zip(&handles)
                .map(|(e, k)| {
                    let measured = values.get(&(e.metric, e.cpu)).copied();
                    ReplayedPair {
                        metric: e.metric,
                        cpu: e.cpu,
                        target: e.target,
                        measured,
                        knob: k.as_ref().map_or(e.knob, |k| k.get()),
                        within: measured
                            .map(|m| control::within(e.metric, e.tolerance, e.target, m)),
                    }
                })
                .collect();
            observer.replay_interval(t, &now);
        },
    );
    observer.stopping();
    let stopping_took = act.stop()?;
    tracing::debug!("generators stopped in {stopping_took:?}");
    Ok(ReplayReport {
        mode,
        measured,
        deviations: result?,
        stopping_took,
    })
}
