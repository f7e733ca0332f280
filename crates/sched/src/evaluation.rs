//! One evaluation of the closed loop (thesis 8.3 and 5.4.3): the frames of
//! one period — from the node's monitor or a recording — are split into
//! per-process series, each process is analysed (Listing 8.1), and the
//! sensitivity model is updated through
//! [`SensitivityModel::record_analysis`], which keeps the quotas the
//! resource-limit finder found. `hwqos-sra run` calls [`evaluate`] every
//! evaluation period; `hwqos-sra analyse` calls [`analyse_frames`] and
//! [`update_model`] on a recording.

use crate::analysis::{self, AnalysisParams, ProcessCorrelation, ProcessSeries};
use crate::model::SensitivityModel;
use crate::SchedError;
use hwqos_core::Frame;
use hwqos_pmu::target::TargetSelector;

/// The metric whose per-interval value is CPU time in nanoseconds; its mean
/// over the interval length is a process's CPU demand (CPUs' worth of work).
pub const CPU_TIME_METRIC: &str = "task_clock";

/// The per-process analyses of `frames` with `x_metric` as *x*: every
/// process scope with both resource samples and *x*, in scope order. A
/// process whose series cannot be analysed (too short, no overlap) is
/// returned with the reason instead.
pub fn analyse_frames(
    frames: &[Frame],
    x_metric: &str,
    params: &AnalysisParams,
) -> Vec<(ProcessSeries, Result<ProcessCorrelation, SchedError>)> {
    analysis::from_frames(frames, x_metric)
        .into_values()
        .map(|series| {
            let r = analysis::analyse(&series, params);
            (series, r)
        })
        .collect()
}

/// A process's CPU demand from its series: the mean CPU time per interval
/// (`sw.task_clock`) over the interval length, or `None` when the series
/// has no CPU time.
pub fn cpu_demand(series: &ProcessSeries, interval_ns: u64) -> Option<f64> {
    series
        .resources
        .iter()
        .find(|(k, _)| k.contains(CPU_TIME_METRIC))
        .and_then(|(_, s)| s.mean())
        .map(|mean| mean / interval_ns.max(1) as f64)
}

/// The pid of a process scope's text form (`pid:42`).
pub fn scope_pid(scope: &str) -> Option<u32> {
    scope.strip_prefix("pid:")?.parse().ok()
}

/// Records each successful analysis in `model`, keyed by `selector_of(pid)`
/// (the configured selector when it denotes exactly that process, else
/// `pid:N`), with the CPU demand measured over `interval_ns` intervals.
/// Returns how many processes were updated.
pub fn update_model(
    model: &mut SensitivityModel,
    analyses: &[(ProcessSeries, Result<ProcessCorrelation, SchedError>)],
    interval_ns: u64,
    mut selector_of: impl FnMut(u32) -> TargetSelector,
) -> usize {
    let mut updated = 0;
    for (series, result) in analyses {
        let (Some(pid), Ok(result)) = (scope_pid(&series.process), result) else {
            continue;
        };
        model.record_analysis(&selector_of(pid), result, cpu_demand(series, interval_ns));
        updated += 1;
    }
    updated
}

/// One evaluation period of `hwqos-sra run`: analyses `frames` and records
/// the results in `model` (see [`update_model`]); logs each correlation
/// table and each process that could not be analysed. Returns how many
/// processes were updated (0: the model and the contract stay as they are).
pub fn evaluate(
    frames: &[Frame],
    x_metric: &str,
    params: &AnalysisParams,
    model: &mut SensitivityModel,
    selector_of: impl FnMut(u32) -> TargetSelector,
) -> usize {
    let analyses = analyse_frames(frames, x_metric, params);
    for (series, r) in &analyses {
        match r {
            Ok(r) => tracing::info!(process = %series.process, "correlation\n{}", r.table()),
            Err(e) => tracing::info!(process = %series.process, error = %e, "not analysed"),
        }
    }
    let interval = frames.first().map(|f| f.interval_ns).unwrap_or(1);
    update_model(model, &analyses, interval, selector_of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::{MetricName, Sample, Scope, Timestamp};

    fn frames(pid: u32, with_cpu_time: bool) -> Vec<Frame> {
        (0..200u64)
            .map(|i| {
                let t = Timestamp {
                    mono_ns: i * 100_000_000,
                    wall_ns: 0,
                };
                let slow = (i as f64 * 0.05).sin();
                let sample = |m: &str, v: f64| Sample {
                    time: t,
                    scope: Scope::Process { pid },
                    metric: MetricName::new(m).unwrap(),
                    value: v,
                    counter: None,
                };
                let mut samples = vec![
                    sample("sw.page_faults", 1000.0 + 300.0 * slow),
                    sample("app.rate", 5e5 - 1e5 * slow),
                ];
                if with_cpu_time {
                    // Half a CPU busy in every 100 ms interval.
                    samples.push(sample("sw.task_clock", 50_000_000.0));
                }
                Frame {
                    seq: i,
                    time: t,
                    interval_ns: 100_000_000,
                    samples,
                    labels: vec![],
                }
            })
            .collect()
    }

    fn params() -> AnalysisParams {
        AnalysisParams {
            step_ns: 100_000_000,
            filter_order: 4,
            filter_cutoff: 0.2,
            threshold: 0.5,
        }
    }

    #[test]
    fn an_evaluation_keeps_the_quotas_and_measures_the_demand() {
        let sel: TargetSelector = "name:victim".parse().unwrap();
        let mut model = SensitivityModel::default();
        model.record_quota(&sel, "sw.page_faults", 77, 20_000);
        let n = evaluate(
            &frames(42, true),
            "app.rate",
            &params(),
            &mut model,
            |pid| {
                assert_eq!(pid, 42);
                sel.clone()
            },
        );
        assert_eq!(n, 1);
        let e = model.get(&sel).unwrap();
        assert_eq!(e.sensitive_to[0].resource, "sw.page_faults");
        assert_eq!(e.quotas["sw.page_faults"], 77);
        assert_eq!(e.period_us, 20_000);
        assert!((e.cpu_demand - 0.5).abs() < 1e-9, "{}", e.cpu_demand);
    }

    #[test]
    fn without_cpu_time_the_demand_stays() {
        let sel = TargetSelector::Pid(42);
        let mut model = SensitivityModel::default();
        model.entry(&sel).cpu_demand = 2.0;
        let n = evaluate(&frames(42, false), "app.rate", &params(), &mut model, |p| {
            TargetSelector::Pid(p)
        });
        assert_eq!(n, 1);
        assert_eq!(model.get(&sel).unwrap().cpu_demand, 2.0);
        assert_eq!(
            evaluate(
                &frames(42, false),
                "app.nothing",
                &params(),
                &mut model,
                |p| { TargetSelector::Pid(p) }
            ),
            0
        );
    }
}
