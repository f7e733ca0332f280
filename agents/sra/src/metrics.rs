//! The agent's OpenMetrics exposition (`hwqos_sra_*`). Every family is a
//! gauge, as in the monitor and the relay (the `_total` counter naming and
//! the classic text format `promtool check metrics` lints disagree).

use crate::agent::Snapshot;
use std::fmt::Write as _;

pub use hwqos_agent::OPENMETRICS_CONTENT_TYPE as CONTENT_TYPE;
use hwqos_agent::{escape_label as escape, gauge_family as family};

/// Renders a snapshot.
pub fn render(s: &Snapshot) -> String {
    let mut o = String::new();
    family(
        &mut o,
        "hwqos_sra_info",
        "Quota backend, throttle method and overflow route in use.",
        None,
    );
    let _ = writeln!(
        o,
        "hwqos_sra_info{{backend=\"{}\",throttle=\"{}\",route=\"{}\"}} 1",
        escape(&s.backend),
        escape(&s.throttle),
        escape(&s.route)
    );
    family(
        &mut o,
        "hwqos_sra_contract_version",
        "Version of the contract applied.",
        None,
    );
    let _ = writeln!(o, "hwqos_sra_contract_version {}", s.contract_version);
    family(
        &mut o,
        "hwqos_sra_evaluations",
        "Evaluation periods completed.",
        None,
    );
    let _ = writeln!(o, "hwqos_sra_evaluations {}", s.evaluations);
    family(
        &mut o,
        "hwqos_sra_skipped_entries",
        "Contract entries skipped (offline CPUs, unknown events, no process).",
        None,
    );
    let _ = writeln!(o, "hwqos_sra_skipped_entries {}", s.skipped.len());
    family(
        &mut o,
        "hwqos_sra_apply_errors",
        "Pinning or enforcement failures since start.",
        None,
    );
    let _ = writeln!(o, "hwqos_sra_apply_errors {}", s.apply_errors);
    family(
        &mut o,
        "hwqos_sra_processes",
        "Processes the contract covers.",
        None,
    );
    let _ = writeln!(o, "hwqos_sra_processes {}", s.applied.len());
    family(
        &mut o,
        "hwqos_sra_pinned_threads",
        "Threads pinned and verified, per process.",
        None,
    );
    for (pid, a) in &s.applied {
        let _ = writeln!(
            o,
            "hwqos_sra_pinned_threads{{pid=\"{pid}\",entry=\"{}\"}} {}",
            escape(&a.entry),
            a.pinned_threads
        );
    }
    let entry = |pid: &u32| {
        s.applied
            .get(pid)
            .map(|a| escape(&a.entry))
            .unwrap_or_default()
    };
    family(
        &mut o,
        "hwqos_sra_throttled",
        "1 while the process is throttled.",
        None,
    );
    for (pid, q) in &s.quota {
        let _ = writeln!(
            o,
            "hwqos_sra_throttled{{pid=\"{pid}\",entry=\"{}\"}} {}",
            entry(pid),
            u8::from(q.throttled)
        );
    }
    family(
        &mut o,
        "hwqos_sra_throttles",
        "Times the process was throttled.",
        None,
    );
    for (pid, q) in &s.quota {
        let _ = writeln!(
            o,
            "hwqos_sra_throttles{{pid=\"{pid}\",entry=\"{}\"}} {}",
            entry(pid),
            q.nr_throttled
        );
    }
    family(
        &mut o,
        "hwqos_sra_throttled_seconds",
        "Time spent throttled.",
        Some("seconds"),
    );
    for (pid, q) in &s.quota {
        let _ = writeln!(
            o,
            "hwqos_sra_throttled_seconds{{pid=\"{pid}\",entry=\"{}\"}} {}",
            entry(pid),
            q.throttled_ns as f64 / 1e9
        );
    }
    family(
        &mut o,
        "hwqos_sra_periods",
        "Quota periods completed.",
        None,
    );
    for (pid, q) in &s.quota {
        let _ = writeln!(
            o,
            "hwqos_sra_periods{{pid=\"{pid}\",entry=\"{}\"}} {}",
            entry(pid),
            q.nr_periods
        );
    }
    for (name, help, get) in [
        (
            "hwqos_sra_event_quota",
            "Events allowed per period.",
            (|e: &hwqos_sched::backend::EventStats| e.quota) as fn(&_) -> u64,
        ),
        (
            "hwqos_sra_event_last_period",
            "Events counted in the last complete period.",
            |e| e.last_period,
        ),
        (
            "hwqos_sra_event_counted",
            "Events counted since enforcement started.",
            |e| e.total,
        ),
        (
            "hwqos_sra_event_borrowed",
            "Events borrowed from other processes' unused budgets (lending).",
            |e| e.borrowed,
        ),
    ] {
        family(&mut o, name, help, None);
        for (pid, q) in &s.quota {
            for e in &q.events {
                let _ = writeln!(
                    o,
                    "{name}{{pid=\"{pid}\",entry=\"{}\",event=\"{}\"}} {}",
                    entry(pid),
                    escape(&e.name),
                    get(e)
                );
            }
        }
    }
    family(
        &mut o,
        "hwqos_sra_stop_latency_seconds",
        "Overflow signal read to throttle issued (agent route).",
        Some("seconds"),
    );
    for (q, v) in [
        ("0.5", s.stop_latency_p50_ns),
        ("0.99", s.stop_latency_p99_ns),
    ] {
        if let Some(v) = v {
            let _ = writeln!(
                o,
                "hwqos_sra_stop_latency_seconds{{quantile=\"{q}\"}} {}",
                v as f64 / 1e9
            );
        }
    }
    o.push_str("# EOF\n");
    o
}

/// Serves `GET /metrics` on `listener` until `stop` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    snapshot: crate::agent::SharedSnapshot,
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
        let mut s = Snapshot {
            backend: "userspace".into(),
            throttle: "sigstop".into(),
            route: "direct".into(),
            ..Snapshot::default()
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
        let text = render(&s);
        assert!(text.ends_with("# EOF\n"));
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
