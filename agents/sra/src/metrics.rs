//! The agent's OpenMetrics exposition (`hwqos_sra_*`), written by
//! `prometheus-client` (set up in `hwqos-agent`). Every family is a gauge, as
//! in the monitor and the relay (the `_total` counter naming and the classic
//! text format `promtool check metrics` lints disagree).

use crate::agent::AgentState;
use hwqos_agent::{encode_gauge, encode_gauge_family};
use hwqos_sched::backend::EventStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::registry::Unit;

pub use hwqos_agent::OPENMETRICS_CONTENT_TYPE as CONTENT_TYPE;

/// Renders a snapshot.
pub fn render(s: &AgentState) -> String {
    hwqos_agent::render_exposition("hwqos_sra", Exposition(s.clone()))
}

#[derive(EncodeLabelSet)]
struct InfoLabels {
    backend: String,
    throttle: String,
    route: String,
}

#[derive(EncodeLabelSet)]
struct ProcessLabels {
    pid: u32,
    entry: String,
}

#[derive(EncodeLabelSet)]
struct EventLabels {
    pid: u32,
    entry: String,
    event: String,
}

#[derive(EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(EncodeLabelSet)]
struct QuantileLabels {
    quantile: &'static str,
}

/// The families of one snapshot, written at each scrape.
#[derive(Debug)]
struct Exposition(AgentState);

impl Exposition {
    /// The contract entry of an enforced process ("" when it is not applied).
    fn entry(&self, pid: u32) -> String {
        self.0
            .applied
            .get(&pid)
            .map(|a| a.entry.clone())
            .unwrap_or_default()
    }

    /// One value per enforced process.
    fn per_process<'a, N>(
        &'a self,
        get: impl Fn(&hwqos_sched::backend::QuotaStats) -> N + 'a,
    ) -> impl Iterator<Item = (ProcessLabels, N)> + 'a {
        self.0.quota.iter().map(move |(pid, q)| {
            let labels = ProcessLabels {
                pid: *pid,
                entry: self.entry(*pid),
            };
            (labels, get(q))
        })
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let s = &self.0;
        let info = InfoLabels {
            backend: s.backend.clone(),
            throttle: s.throttle.clone(),
            route: s.route.clone(),
        };
        encode_gauge_family(
            &mut encoder,
            "info",
            "Quota backend, throttle method and overflow route in use.",
            None,
            [(info, 1u32)],
        )?;
        for (name, help, value) in [
            (
                "contract_version",
                "Version of the contract applied.",
                s.contract_version,
            ),
            (
                "contract_dir_rejected",
                "Files of the contract directory rejected (bad JSON, failed validation, too big, not a regular file) since start.",
                s.contract_dir_rejected,
            ),
            (
                "evaluations",
                "Evaluation periods completed.",
                s.evaluations,
            ),
            (
                "skipped_entries",
                "Contract entries skipped (offline CPUs, unknown events, no process).",
                s.skipped.len() as u64,
            ),
            (
                "apply_errors",
                "Pinning or enforcement failures since start.",
                s.apply_errors,
            ),
            (
                "processes",
                "Processes the contract covers.",
                s.applied.len() as u64,
            ),
        ] {
            encode_gauge(&mut encoder, name, help, None, Some(value))?;
        }
        encode_gauge_family(
            &mut encoder,
            "frames",
            "Frames received since start, by source: the node monitor's live API or the agent's own sampler.",
            None,
            [
                (SourceLabels { source: "monitor" }, s.frames_from_monitor),
                (SourceLabels { source: "sampler" }, s.frames_sampled),
            ],
        )?;
        encode_gauge_family(
            &mut encoder,
            "pinned_threads",
            "Threads pinned and verified, per process.",
            None,
            s.applied.iter().map(|(pid, a)| {
                let labels = ProcessLabels {
                    pid: *pid,
                    entry: a.entry.clone(),
                };
                (labels, a.pinned_threads)
            }),
        )?;
        encode_gauge_family(
            &mut encoder,
            "throttled",
            "1 while the process is throttled.",
            None,
            self.per_process(|q| u32::from(q.throttled)),
        )?;
        encode_gauge_family(
            &mut encoder,
            "throttles",
            "Times the process was throttled.",
            None,
            self.per_process(|q| q.nr_throttled),
        )?;
        encode_gauge_family(
            &mut encoder,
            "throttled",
            "Time spent throttled.",
            Some(Unit::Seconds),
            self.per_process(|q| q.throttled_ns as f64 / 1e9),
        )?;
        encode_gauge_family(
            &mut encoder,
            "periods",
            "Quota periods completed.",
            None,
            self.per_process(|q| q.nr_periods),
        )?;
        type Get = fn(&EventStats) -> u64;
        let per_event: [(&str, &str, Get); 4] = [
            ("event_quota", "Events allowed per period.", |e| e.quota),
            (
                "event_last_period",
                "Events counted in the last complete period.",
                |e| e.last_period,
            ),
            (
                "event_counted",
                "Events counted since enforcement started.",
                |e| e.total,
            ),
            (
                "event_borrowed",
                "Events borrowed from other processes' unused budgets (lending).",
                |e| e.borrowed,
            ),
        ];
        for (name, help, get) in per_event {
            let samples = s.quota.iter().flat_map(|(pid, q)| {
                q.events.iter().map(move |e| {
                    let labels = EventLabels {
                        pid: *pid,
                        entry: self.entry(*pid),
                        event: e.name.clone(),
                    };
                    (labels, get(e))
                })
            });
            encode_gauge_family(&mut encoder, name, help, None, samples)?;
        }
        let quantiles = [
            ("0.5", s.stop_latency_p50_ns),
            ("0.99", s.stop_latency_p99_ns),
        ];
        encode_gauge_family(
            &mut encoder,
            "stop_latency",
            "Overflow signal read to throttle issued (agent route).",
            Some(Unit::Seconds),
            quantiles
                .into_iter()
                .filter_map(|(q, ns)| ns.map(|v| (QuantileLabels { quantile: q }, v as f64 / 1e9))),
        )
    }
}

/// Serves `GET /metrics` on `listener` until `stop` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    snapshot: crate::agent::SharedState,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let exposition = move || render(&snapshot.lock().unwrap_or_else(|p| p.into_inner()));
    hwqos_agent::serve_metrics(listener, std::sync::Arc::new(exposition), stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_once_and_ends_with_eof() {
        let mut s = AgentState {
            backend: "userspace".into(),
            throttle: "sigstop".into(),
            route: "direct".into(),
            ..AgentState::default()
        };
        s.applied.insert(
            7,
            crate::agent::Applied {
                entry: "a\"b".into(),
                affinity: vec![0],
                pinned_threads: 2,
                enforced: true,
            },
        );
        s.quota.insert(
            7,
            hwqos_sched::backend::QuotaStats {
                pid: 7,
                throttled: true,
                nr_throttled: 3,
                events: vec![hwqos_sched::backend::EventStats {
                    name: "sw.page_faults".into(),
                    quota: 50,
                    last_period: 50,
                    total: 500,
                    overflows: 3,
                    borrowed: 0,
                }],
                ..Default::default()
            },
        );
        s.contract_version = 3;
        s.contract_dir_rejected = 2;
        let text = render(&s);
        assert!(text.ends_with("# EOF\n"));
        assert!(text.contains("\nhwqos_sra_contract_version 3\n"), "{text}");
        assert!(
            text.contains("\nhwqos_sra_contract_dir_rejected 2\n"),
            "{text}"
        );
        assert!(text.contains(
            "hwqos_sra_info{backend=\"userspace\",throttle=\"sigstop\",route=\"direct\"} 1"
        ));
        assert!(text.contains(
            "hwqos_sra_event_quota{pid=\"7\",entry=\"a\\\"b\",event=\"sw.page_faults\"} 50"
        ));
        assert!(text.contains("hwqos_sra_throttled{pid=\"7\",entry=\"a\\\"b\"} 1"));
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        let mut dedup = types.clone();
        dedup.dedup();
        assert_eq!(types.len(), dedup.len());
    }
}
