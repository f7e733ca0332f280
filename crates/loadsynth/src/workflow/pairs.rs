//! `METRIC@CPU=VALUE` pairs, as given on a command line: a target
//! (`cpu_util@1=0.35`) or a generator knob, and the check that every pair's
//! CPU is online on this node.

use crate::targets::{LoadTargets, Target};
use crate::{LoadError, LoadMetric};

/// A (metric, CPU) pair and a value: a knob or a target.
pub type Pair = ((LoadMetric, u32), f64);

/// Splits `METRIC@CPU=VALUE` into the metric, the CPU and the value text.
fn split(s: &str) -> Result<(LoadMetric, u32, &str), LoadError> {
    let invalid = || LoadError::Invalid(format!("`{s}`: expected METRIC@CPU=VALUE"));
    let (lhs, value) = s.split_once('=').ok_or_else(invalid)?;
    let (metric, cpu) = lhs.split_once('@').ok_or_else(invalid)?;
    let metric: LoadMetric = metric.parse().map_err(LoadError::Invalid)?;
    let cpu: u32 = cpu
        .parse()
        .map_err(|_| LoadError::Invalid(format!("`{s}`: bad CPU `{cpu}`")))?;
    Ok((metric, cpu, value))
}

/// `METRIC@CPU=VALUE` as a target (mean `VALUE`, no series); the value must
/// be possible for the metric.
pub fn parse_target(s: &str) -> Result<Target, LoadError> {
    let (metric, cpu, value) = split(s)?;
    let mean: f64 = value
        .parse()
        .map_err(|_| LoadError::Invalid(format!("`{s}`: bad value `{value}`")))?;
    metric.validate(mean).map_err(LoadError::Invalid)?;
    Ok(Target {
        metric,
        cpu,
        mean,
        stddev: 0.0,
        series: Vec::new(),
    })
}

/// A targets file from `METRIC@CPU=VALUE` pairs (each pair once).
pub fn targets_from_pairs<S: AsRef<str>>(pairs: &[S]) -> Result<LoadTargets, LoadError> {
    let list = pairs
        .iter()
        .map(|s| parse_target(s.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let t = LoadTargets::new(list);
    t.validate().map_err(LoadError::Invalid)?;
    Ok(t)
}

/// `METRIC@CPU=VALUE` as a knob setting (value in the generator's knob
/// unit, finite and ≥ 0; its cap is checked by
/// [`crate::actuate::check_knob`]).
pub fn parse_knob(s: &str) -> Result<Pair, LoadError> {
    let (metric, cpu, value) = split(s)?;
    let v: f64 = value
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| LoadError::Invalid(format!("`{s}`: bad knob value `{value}`")))?;
    Ok(((metric, cpu), v))
}

/// Every pair's CPU must be online on `topology`'s node.
pub fn check_online(pairs: &[Pair], topology: &hwqos_topology::Topology) -> Result<(), LoadError> {
    let online = topology.online_cpus();
    match pairs.iter().find(|((_, cpu), _)| !online.contains(cpu)) {
        Some(((m, cpu), _)) => Err(LoadError::Invalid(format!(
            "{m} targets CPU {cpu}, which is not online on this node (online: {online:?})"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_and_bad_ones_are_named() {
        let t = parse_target("cpu_util@1=0.35").unwrap();
        assert_eq!((t.metric, t.cpu, t.mean), (LoadMetric::CpuUtil, 1, 0.35));
        assert_eq!(
            parse_knob("page_fault_rate@0=100").unwrap(),
            ((LoadMetric::PageFaultRate, 0), 100.0)
        );
        for (bad, says) in [
            ("cpu_util", "expected METRIC@CPU=VALUE"),
            ("cpu_util@x=0.1", "bad CPU `x`"),
            ("cpu_util@1=lots", "bad value `lots`"),
            ("l4_miss_ratio@1=0.1", "unknown metric"),
            ("llc_miss_ratio@0=1.5", "impossible"),
        ] {
            let e = parse_target(bad).unwrap_err();
            assert!(
                e.is_bad_input() && e.to_string().contains(says),
                "{bad}: {e}"
            );
        }
        let e = parse_knob("cpu_util@1=-1").unwrap_err();
        assert!(e.to_string().contains("bad knob value"), "{e}");
        let e = targets_from_pairs(&["cpu_util@1=0.1", "cpu_util@1=0.2"]).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
    }
}
