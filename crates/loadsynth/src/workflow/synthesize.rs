//! `synthesize`: on this node, start a generator per target, run the PID
//! controllers until the measured usage holds every target (thesis 6.2.1,
//! step 2), and return the knobs as a model.

use super::pairs::{self, Pair};
use super::{scope, Observer};
use crate::config::LoadConfig;
use crate::knob::StopFlag;
use crate::model::LoadModel;
use crate::source::{LocalSource, MeasureOn, Measurement, MetricSource, MonitorSource};
use crate::synth::{self, SynthOptions};
use crate::targets::LoadTargets;
use crate::{LoadError, LoadMetric};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How to synthesize.
#[derive(Clone, Debug, Default)]
pub struct SynthesisOptions {
    /// The closed loop: period (at least 10 ms), convergence, timeout, hold.
    pub control: SynthOptions,
    /// Measure through a running hwqos-monitor's API socket instead of the
    /// in-process counters.
    pub monitor_socket: Option<PathBuf>,
    /// What to measure (the model records it as its `measured_on`).
    pub measure_on: MeasureOn,
}

/// A source that ends with an error once `stop` is set, so a stopped
/// synthesis ends instead of waiting for convergence.
struct Stoppable {
    inner: Box<dyn MetricSource>,
    stop: StopFlag,
}

impl MetricSource for Stoppable {
    fn next(&mut self) -> Result<Measurement, LoadError> {
        if self.stop.is_stopped() {
            return Err(LoadError::Measure("stopped before convergence".into()));
        }
        self.inner.next()
    }
}

fn open_source(
    wanted: &[(LoadMetric, u32)],
    period: Duration,
    monitor: Option<&std::path::Path>,
    on: MeasureOn,
) -> Result<Box<dyn MetricSource>, LoadError> {
    Ok(match monitor {
        Some(sock) => Box::new(MonitorSource::connect(sock, wanted)?),
        None => Box::new(LocalSource::measuring(wanted, period, on)?),
    })
}

/// Runs the closed loop for `targets` on this node until it converges and
/// returns the model (not saved: see [`LoadModel::save`]). Not converging
/// within the timeout, or `stop` set before, is a runtime failure; targets
/// that cannot work here (a CPU not online, a metric without a generator,
/// the memory cap) are bad input, found before anything starts.
pub fn synthesize(
    targets: &LoadTargets,
    opts: &SynthesisOptions,
    cfg: &LoadConfig,
    stop: &StopFlag,
    observer: &mut dyn Observer,
) -> Result<LoadModel, LoadError> {
    if targets.targets.is_empty() {
        return Err(LoadError::Invalid("no targets".into()));
    }
    let node = super::this_node()?;
    if let Some(hw) = &targets.hardware {
        if hw.cpu_model != node.cpu_model {
            tracing::warn!(
                "the targets come from CPU `{}`, this node is `{}`: ratios transfer, rates may not be reachable",
                hw.cpu_model.as_deref().unwrap_or("?"),
                node.cpu_model.as_deref().unwrap_or("?")
            );
        }
    }
    let pairs: Vec<Pair> = targets
        .targets
        .iter()
        .map(|x| {
            (
                (x.metric, x.cpu),
                synth::initial_knob(targets, x.metric, x.cpu),
            )
        })
        .collect();
    pairs::check_online(&pairs, &node.topology)?;
    let wanted: Vec<(LoadMetric, u32)> = pairs.iter().map(|p| p.0).collect();
    let mut control = opts.control.clone();
    control.period = control.period.max(Duration::from_millis(10));
    control.needed = control.needed.max(1);
    // Generators first, then the source: replay opens them in this order
    // too, so both count the generator threads the same way.
    let mut act = synth::actuators_for(&pairs, &node.topology, cfg, stop)?;
    let source = open_source(
        &wanted,
        control.period,
        opts.monitor_socket.as_deref(),
        opts.measure_on.clone(),
    )?;
    let mut src = Stoppable {
        inner: source,
        stop: stop.clone(),
    };
    let ranges = {
        let r: BTreeMap<(LoadMetric, u32), (f64, f64)> = wanted
            .iter()
            .filter_map(|k| act.range(k.0, k.1).map(|r| (*k, r)))
            .collect();
        move |m: LoadMetric, c: u32| r.get(&(m, c)).copied().unwrap_or((0.0, 1.0))
    };
    let start = Instant::now();
    let result = synth::synthesize(
        targets,
        node,
        &mut src,
        &mut act,
        &ranges,
        &control,
        &mut |status, n| observer.synthesis_interval(status, n, start.elapsed().as_secs_f64()),
    );
    observer.stopping();
    let stopped = act.stop();
    let mut model = result?;
    stopped?;
    model.measured_on = scope::model_scope(&opts.measure_on);
    Ok(model)
}
