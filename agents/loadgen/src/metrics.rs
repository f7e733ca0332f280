//! The agent's OpenMetrics exposition (`hwqos_loadgen_*`): per (metric, CPU)
//! pair the target, the measured value, the relative error, the knob and
//! whether the pair has converged, for the fleet dashboard's loadgen
//! convergence panel. Every family is a gauge, as in the monitor, the relay
//! and hwqos-sra. The family names are a contract with
//! `deploy/prometheus/`; keep them. The text is written by
//! `prometheus-client` (set up in `hwqos-agent`).
//!
//! The command loop writes its [`LoopState`] (what `/metrics` shows: every
//! pair's target, measurement, knob and convergence) after every control or
//! measurement interval; [`MetricsServer`] serves it on `GET /metrics` from its own
//! runtime thread, which sleeps until a scrape arrives (no polling, so it adds
//! nothing to the measured CPU between scrapes).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

pub use hwqos_agent::OPENMETRICS_CONTENT_TYPE as CONTENT_TYPE;
use hwqos_agent::{encode_gauge, encode_gauge_family};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::registry::Unit;

/// One (metric, CPU) pair's state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PairGauges {
    /// The value the pair's metric is held at (in the metric's unit).
    pub target: f64,
    /// None until the first measurement (or when the command measures nothing).
    pub measured: Option<f64>,
    /// The generator's knob now (duty cycle, rate or ratio, in the
    /// generator's unit).
    pub knob: f64,
    /// Within tolerance for the needed number of consecutive intervals now.
    pub converged: bool,
    /// Seconds from the start of the loop to the first convergence.
    pub convergence_s: Option<f64>,
    /// Consecutive intervals within tolerance (bookkeeping for `converged`).
    pub within_run: u32,
}

/// The state of a command's loop as `/metrics` shows it: mode, file and every pair.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoopState {
    /// `synthesize`, `replay` or `run`.
    pub mode: String,
    /// The targets or model file.
    pub model: String,
    /// Keyed by (metric name, CPU).
    pub pairs: BTreeMap<(String, u32), PairGauges>,
    /// Control or measurement intervals done.
    pub samples: u64,
    /// With `[run] model_dir`: files of the directory rejected since start
    /// (`None` without one).
    pub model_dir_rejected: Option<u64>,
}

impl LoopState {
    /// A loop of command `mode` on file `model` with no pairs yet.
    pub fn new(mode: &str, model: &str) -> LoopState {
        LoopState {
            mode: mode.into(),
            model: model.into(),
            ..LoopState::default()
        }
    }

    /// Records one interval's result for a pair: `within` says whether the
    /// measurement was within tolerance; `needed` consecutive ones converge
    /// the pair, and the first time that happens, at `elapsed_s` since the
    /// loop started, is its convergence time.
    #[allow(clippy::too_many_arguments)]
    pub fn update_pair(
        &mut self,
        metric: &str,
        cpu: u32,
        target: f64,
        measured: Option<f64>,
        knob: f64,
        within: Option<bool>,
        needed: u32,
        elapsed_s: f64,
    ) {
        let p = self.pairs.entry((metric.to_string(), cpu)).or_default();
        p.target = target;
        if measured.is_some() {
            p.measured = measured;
        }
        p.knob = knob;
        if let Some(w) = within {
            p.within_run = if w { p.within_run.saturating_add(1) } else { 0 };
            p.converged = p.within_run >= needed.max(1);
            if p.converged && p.convergence_s.is_none() {
                p.convergence_s = Some(elapsed_s);
            }
        }
    }
}

/// The loop state shared between the command loop (writer) and the
/// [`MetricsServer`] (reader).
pub type SharedLoopState = Arc<Mutex<LoopState>>;

/// Renders the exposition of a loop state.
pub fn render(s: &LoopState) -> String {
    hwqos_agent::render_exposition("hwqos_loadgen", Exposition(s.clone()))
}

#[derive(EncodeLabelSet)]
struct InfoLabels {
    mode: String,
    model: String,
}

#[derive(EncodeLabelSet)]
struct PairLabels {
    metric: String,
    cpu: u32,
}

/// Each pair's value of one family; pairs without one are left out.
fn per_pair<'a, N>(
    s: &'a LoopState,
    get: impl Fn(&PairGauges) -> Option<N> + 'a,
) -> impl Iterator<Item = (PairLabels, N)> + 'a {
    s.pairs.iter().filter_map(move |((metric, cpu), p)| {
        let labels = PairLabels {
            metric: metric.clone(),
            cpu: *cpu,
        };
        get(p).map(|v| (labels, v))
    })
}

/// The families of one loop state, written at each scrape.
#[derive(Debug)]
struct Exposition(LoopState);

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let s = &self.0;
        let info = InfoLabels {
            mode: s.mode.clone(),
            model: s.model.clone(),
        };
        encode_gauge_family(
            &mut encoder,
            "info",
            "Command the agent runs and the targets or model file it uses.",
            None,
            [(info, 1u32)],
        )?;
        encode_gauge_family(
            &mut encoder,
            "target",
            "Target value of the metric on the CPU (metric units: ratio, events/s, bytes/s).",
            None,
            per_pair(s, |p| Some(p.target)),
        )?;
        encode_gauge_family(
            &mut encoder,
            "measured",
            "Last measured value of the metric on the CPU.",
            None,
            per_pair(s, |p| p.measured),
        )?;
        encode_gauge_family(
            &mut encoder,
            "error_ratio",
            "(measured - target) / target; absent for a zero target.",
            None,
            per_pair(s, |p| match p.measured {
                Some(m) if p.target != 0.0 => Some((m - p.target) / p.target),
                _ => None,
            }),
        )?;
        encode_gauge_family(
            &mut encoder,
            "knob",
            "The generator's knob (duty cycle, rate or ratio, in the generator's unit).",
            None,
            per_pair(s, |p| Some(p.knob)),
        )?;
        encode_gauge_family(
            &mut encoder,
            "converged",
            "1 while the pair has been within tolerance for the needed consecutive intervals.",
            None,
            per_pair(s, |p| p.measured.map(|_| u32::from(p.converged))),
        )?;
        encode_gauge_family(
            &mut encoder,
            "convergence",
            "Seconds from the start of the loop until the pair first converged.",
            Some(Unit::Seconds),
            per_pair(s, |p| p.convergence_s),
        )?;
        encode_gauge(
            &mut encoder,
            "samples",
            "Control or measurement intervals done.",
            None,
            Some(s.samples),
        )?;
        if let Some(rejected) = s.model_dir_rejected {
            encode_gauge(
                &mut encoder,
                "model_dir_rejected",
                "Files of the model directory rejected (bad JSON, failed validation, another node's model, too big, not a regular file) since start.",
                None,
                Some(rejected),
            )?;
        }
        Ok(())
    }
}

/// Serves `GET /metrics` from the loop state on its own one-worker runtime until
/// dropped.
pub struct MetricsServer {
    rt: Option<tokio::runtime::Runtime>,
    stop: tokio::sync::watch::Sender<bool>,
    local: SocketAddr,
}

impl MetricsServer {
    /// Binds `addr` (e.g. `127.0.0.1:9465`; port 0 picks one) and starts
    /// serving. Threads inherit the caller's signal mask.
    pub fn start(addr: &str, state: SharedLoopState) -> Result<MetricsServer, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("hwqos-loadgen-metrics")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the metrics runtime: {e}"))?;
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(addr))
            .map_err(|e| format!("metrics listen address {addr}: {e}"))?;
        let local = listener
            .local_addr()
            .map_err(|e| format!("metrics listen address {addr}: {e}"))?;
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        rt.spawn(serve(listener, state, stop_rx));
        Ok(MetricsServer {
            rt: Some(rt),
            stop,
            local,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(std::time::Duration::from_secs(2));
        }
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    state: SharedLoopState,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let exposition = move || render(&state.lock().unwrap_or_else(|p| p.into_inner()));
    hwqos_agent::serve_metrics(listener, std::sync::Arc::new(exposition), stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_once_and_ends_with_eof() {
        let mut s = LoopState::new("synthesize", "t\"x.json");
        s.update_pair("cpu_util", 1, 0.5, Some(0.45), 0.4, Some(true), 2, 1.0);
        s.update_pair("cpu_util", 1, 0.5, Some(0.55), 0.41, Some(true), 2, 1.5);
        s.update_pair("page_fault_rate", 0, 0.0, None, 7.0, None, 2, 1.5);
        s.samples = 2;
        let text = render(&s);
        assert!(text.ends_with("# EOF\n"));
        assert!(text.contains("hwqos_loadgen_info{mode=\"synthesize\",model=\"t\\\"x.json\"} 1"));
        assert!(text.contains("hwqos_loadgen_target{metric=\"cpu_util\",cpu=\"1\"} 0.5\n"));
        assert!(text.contains("hwqos_loadgen_measured{metric=\"cpu_util\",cpu=\"1\"} 0.55\n"));
        // prometheus-client writes a float gauge with its decimal point.
        assert!(text.contains("hwqos_loadgen_knob{metric=\"page_fault_rate\",cpu=\"0\"} 7.0\n"));
        assert!(text.contains("hwqos_loadgen_converged{metric=\"cpu_util\",cpu=\"1\"} 1\n"));
        assert!(
            text.contains("hwqos_loadgen_convergence_seconds{metric=\"cpu_util\",cpu=\"1\"} 1.5\n")
        );
        // (0.55 - 0.5) / 0.5
        let err: f64 = text
            .lines()
            .find(|l| l.starts_with("hwqos_loadgen_error_ratio{metric=\"cpu_util\""))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap()
            .parse()
            .unwrap();
        assert!((err - 0.1).abs() < 1e-9, "{err}");
        // A pair that was never measured has no measured/error/converged line.
        assert!(!text.contains("hwqos_loadgen_measured{metric=\"page_fault_rate\""));
        assert!(!text.contains("hwqos_loadgen_converged{metric=\"page_fault_rate\""));
        assert!(text.contains("hwqos_loadgen_samples 2\n"));
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        let mut dedup = types.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(types.len(), dedup.len());
        assert_eq!(types.len(), 8);
    }

    #[test]
    fn leaving_tolerance_unconverges_but_keeps_the_first_convergence_time() {
        let mut s = LoopState::new("replay", "m.json");
        for (i, w) in [true, true, false, true].into_iter().enumerate() {
            s.update_pair("cpu_util", 0, 0.5, Some(0.5), 0.5, Some(w), 2, i as f64);
        }
        let p = &s.pairs[&("cpu_util".to_string(), 0)];
        assert!(!p.converged);
        assert_eq!(p.convergence_s, Some(1.0));
    }
}
