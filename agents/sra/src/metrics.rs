//! The agent's OpenMetrics exposition (`hwqos_sra_*`), written by
//! `prometheus-client` (set up in `hwqos-agent`). Every family is a gauge, as
//! in the monitor and the relay (the `_total` counter naming and the classic
//! text format `promtool check metrics` lints disagree).

use crate::agent::AgentState;
use hwqos_agent::{encode_gauge, encode_gauge_family};
use hwqos_sched::backend::EventStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
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
        // A histogram, not gauges with a `quantile` label (which promtool
        // rejects): prometheus-client 0.26 writes no summaries.
        let mut family = encoder.encode_descriptor(
            "stop_latency",
            "Overflow signal read to throttle issued (agent route), since start.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        if let Some(lat) = &s.stop_latency {
            let mut buckets: Vec<(f64, u64)> = lat
                .buckets
                .iter()
                .map(|&(bound_ns, n)| (bound_ns as f64 / 1e9, n))
                .collect();
            let counted: u64 = lat.buckets.iter().map(|(_, n)| n).sum();
            buckets.push((f64::INFINITY, lat.count - counted));
            family.encode_histogram::<NoLabelSet>(
                lat.sum_ns as f64 / 1e9,
                lat.count,
                &buckets,
                None,
            )?;
        }
        Ok(())
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

#[cfg(test)]
mod stop_latency_tests {
    use super::*;
    use crate::agent::StopLatency;
    use hwqos_core::ticker::LatencyHistogram;

    /// Stop latencies are a histogram promtool accepts: buckets at
    /// `2^k - 1` ns, cumulative, `+Inf` holding what is above 1.07 s, an
    /// exact `_sum` and `_count` (promtool rejected the old gauge with a
    /// `quantile` label).
    #[test]
    fn stop_latencies_are_a_valid_histogram() {
        let mut h = LatencyHistogram::new();
        for ns in [2_000u64, 2_000, 3_000_000, 5_000_000_000] {
            h.record(ns);
        }
        let s = AgentState {
            route: "agent".into(),
            stop_latency: Some(StopLatency::from_histogram(&h)),
            ..AgentState::default()
        };
        let text = render(&s);
        let family: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("hwqos_sra_stop_latency"))
            .collect();
        let mut expected = vec![
            "# HELP hwqos_sra_stop_latency_seconds Overflow signal read to throttle issued (agent route), since start.".to_string(),
            "# TYPE hwqos_sra_stop_latency_seconds histogram".into(),
            "# UNIT hwqos_sra_stop_latency_seconds seconds".into(),
            "hwqos_sra_stop_latency_seconds_sum 5.003004".into(),
            "hwqos_sra_stop_latency_seconds_count 4".into(),
        ];
        // `2^k - 1` ns for k = 10..=30, in seconds, as the crate writes them.
        let les = [
            "0.000001023",
            "0.000002047",
            "0.000004095",
            "0.000008191",
            "0.000016383",
            "0.000032767",
            "0.000065535",
            "0.000131071",
            "0.000262143",
            "0.000524287",
            "0.001048575",
            "0.002097151",
            "0.004194303",
            "0.008388607",
            "0.016777215",
            "0.033554431",
            "0.067108863",
            "0.134217727",
            "0.268435455",
            "0.536870911",
            "1.073741823",
        ];
        for (i, le) in les.iter().enumerate() {
            let n = match i + 10 {
                10 => 0,      // 2 µs > 1023 ns
                11..=21 => 2, // both 2 µs
                _ => 3,       // and 3 ms (≤ 2^22 - 1 ns); 5 s only in +Inf
            };
            expected.push(format!(
                "hwqos_sra_stop_latency_seconds_bucket{{le=\"{le}\"}} {n}"
            ));
        }
        expected.push("hwqos_sra_stop_latency_seconds_bucket{le=\"+Inf\"} 4".into());
        assert_eq!(family, expected, "{text}");
        assert!(text.contains("_bucket{le=\"0.000002047\"} 2\n"), "{text}");
        hwqos_testsupport::promtool_check_metrics(&text);
    }

    /// Without stop latencies (direct route) the family has no samples and
    /// the page still passes promtool.
    #[test]
    fn no_stop_latency_no_samples() {
        let text = render(&AgentState::default());
        assert!(text.contains("# TYPE hwqos_sra_stop_latency_seconds histogram\n"));
        assert!(
            !text.contains("hwqos_sra_stop_latency_seconds_count"),
            "{text}"
        );
        hwqos_testsupport::promtool_check_metrics(&text);
    }
}
