//! Allocation-and-scheduling contracts (thesis Fig. 8.9), schema
//! `hwqos.contract/1`: per process a selector, the CPUs it may use, its
//! affinity, a period and per-event quotas, plus the decision engine's
//! explanations. Written by [`crate::decision`] or by hand.
//!
//! ```json
//! {
//!   "schema": "hwqos.contract/1",
//!   "entries": [
//!     { "name": "Sample allocation of proc #0",
//!       "description": "A heavy cache user; runs on core 0.",
//!       "process": "name:testrun_core0",
//!       "allowed_cpus": null,
//!       "affinity": [0],
//!       "period_us": 10000,
//!       "quotas": { "L1-dcache-loads": 1000000, "sw.page_faults": 100000 } },
//!     { "name": "Sample allocation of proc #1", "process": "name:testrun_core1",
//!       "affinity": [1] }
//!   ]
//! }
//! ```
//!
//! [`Contract::parse`] checks the structure (unknown fields, schema, zero
//! quotas, period range, affinity outside `allowed_cpus`) and fails with an
//! error naming the entry and the field. [`Contract::resolve`] checks it
//! against this machine — CPUs online, events countable, processes present —
//! and *skips* entries that cannot apply, each with a reason, so one stale
//! entry never stops the rest.

use crate::backend::{EventQuota, QuotaSet, MAX_EVENTS, MAX_PERIOD, MIN_PERIOD};
use crate::SchedError;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::target::{Resolver, TargetSelector};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

pub const SCHEMA: &str = "hwqos.contract/1";
/// Upper bound on entries (contracts come from files and the network).
pub const MAX_ENTRIES: usize = 4096;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    pub schema: String,
    /// Monotonically increasing version written by the decision engine.
    #[serde(default)]
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_by: Option<String>,
    pub entries: Vec<Entry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `pid:N`, `name:X`, `regex:X`, `cgroup:/P`, `unit:U` (hwqos-pmu targets).
    pub process: TargetSelector,
    /// CPUs the process may ever use; `null` = any (Fig. 8.9's `"CPU": "-1"`).
    #[serde(default)]
    pub allowed_cpus: Option<Vec<u32>>,
    /// CPUs every thread of the process is pinned to; empty = leave affinity alone.
    #[serde(default)]
    pub affinity: Vec<u32>,
    /// Quota period in microseconds (default 10 ms).
    #[serde(default = "default_period_us")]
    pub period_us: u64,
    /// Event name (hwqos `sw.*`/`hw.*` or perf name) → events per period.
    #[serde(default)]
    pub quotas: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub explanation: Vec<String>,
}

fn default_period_us() -> u64 {
    10_000
}

impl Entry {
    pub fn period(&self) -> Duration {
        Duration::from_micros(self.period_us)
    }
}

/// An entry checked against this machine.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedEntry {
    pub entry: Entry,
    pub pids: Vec<u32>,
    /// `None` when the entry has no quotas.
    pub quotas: Option<QuotaSet>,
}

/// An entry (or a process of one) left out, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub entry: String,
    pub reason: String,
}

impl Contract {
    pub fn new(entries: Vec<Entry>) -> Contract {
        Contract {
            schema: SCHEMA.into(),
            version: 0,
            generated_by: None,
            entries,
        }
    }

    /// Parses and validates a contract.
    pub fn parse(text: &str) -> Result<Contract, SchedError> {
        let c: Contract = serde_json::from_str(text).map_err(|e| {
            SchedError::invalid("contract", format!("not a hwqos.contract/1 document: {e}"))
        })?;
        c.validate()?;
        Ok(c)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("contracts serialize")
    }

    /// The structural checks of [`Contract::parse`].
    pub fn validate(&self) -> Result<(), SchedError> {
        if self.schema != SCHEMA {
            return Err(SchedError::invalid(
                "contract",
                format!("schema `{}` (expected `{SCHEMA}`)", self.schema),
            ));
        }
        if self.entries.len() > MAX_ENTRIES {
            return Err(SchedError::invalid(
                "contract",
                format!("{} entries (at most {MAX_ENTRIES})", self.entries.len()),
            ));
        }
        for (i, e) in self.entries.iter().enumerate() {
            let bad =
                |r: String| SchedError::invalid(format!("contract entry {i} (`{}`)", e.name), r);
            if e.name.trim().is_empty() {
                return Err(bad("the name is empty".into()));
            }
            let p = e.period();
            if !e.quotas.is_empty() && (p < MIN_PERIOD || p > MAX_PERIOD) {
                return Err(bad(format!(
                    "period_us {} is outside {}..={}",
                    e.period_us,
                    MIN_PERIOD.as_micros(),
                    MAX_PERIOD.as_micros()
                )));
            }
            if e.quotas.len() > MAX_EVENTS {
                return Err(bad(format!(
                    "{} quotas (at most {MAX_EVENTS})",
                    e.quotas.len()
                )));
            }
            if let Some((ev, _)) = e.quotas.iter().find(|(_, q)| **q == 0) {
                return Err(bad(format!("quota of `{ev}` is zero")));
            }
            if let Some(allowed) = &e.allowed_cpus {
                if allowed.is_empty() {
                    return Err(bad("allowed_cpus is empty (use null for any CPU)".into()));
                }
                if let Some(c) = e.affinity.iter().find(|c| !allowed.contains(c)) {
                    return Err(bad(format!(
                        "affinity CPU {c} is not in allowed_cpus {allowed:?}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Checks every entry against this machine and resolves its processes.
    /// Entries naming offline/nonexistent CPUs, events the catalog or the
    /// machine cannot count, or no running process are skipped with a reason.
    pub fn resolve(
        &self,
        online_cpus: &[u32],
        catalog: &Catalog,
        resolver: &Resolver,
    ) -> (Vec<ResolvedEntry>, Vec<Skipped>) {
        let mut ok = Vec::new();
        let mut skipped = Vec::new();
        for e in &self.entries {
            let skip = |reason: String| Skipped {
                entry: e.name.clone(),
                reason,
            };
            let cpus = e.affinity.iter().chain(e.allowed_cpus.iter().flatten());
            if let Some(c) = cpus.clone().find(|c| !online_cpus.contains(c)) {
                skipped.push(skip(format!(
                    "CPU {c} is not online here (online: {online_cpus:?})"
                )));
                continue;
            }
            let mut events = Vec::new();
            let mut event_error = None;
            for (name, quota) in &e.quotas {
                match catalog.resolve(name) {
                    Ok(ev) => events.push(EventQuota {
                        name: name.clone(),
                        attr: ev.attr,
                        quota: *quota,
                    }),
                    Err(err) => {
                        event_error = Some(format!("event `{name}`: {err}"));
                        break;
                    }
                }
            }
            if let Some(r) = event_error {
                skipped.push(skip(r));
                continue;
            }
            let quotas = (!events.is_empty()).then(|| QuotaSet {
                period: e.period(),
                events,
            });
            if let Some(q) = &quotas {
                if let Err(err) = q.validate() {
                    skipped.push(skip(err.to_string()));
                    continue;
                }
            }
            let pids: Vec<u32> = match resolver.resolve(std::slice::from_ref(&e.process)) {
                Ok(r) => r.processes.iter().map(|p| p.pid).collect(),
                Err(err) => {
                    skipped.push(skip(format!("process `{}`: {err}", e.process)));
                    continue;
                }
            };
            if pids.is_empty() {
                skipped.push(skip(format!("no running process matches `{}`", e.process)));
                continue;
            }
            ok.push(ResolvedEntry {
                entry: e.clone(),
                pids,
                quotas,
            });
        }
        (ok, skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Thesis Fig. 8.9 in this schema.
    pub const FIG_8_9: &str = r#"{
      "schema": "hwqos.contract/1",
      "entries": [
        { "name": "Sample allocation of proc #0",
          "description": "This proc is a heavy cache user and want to execute on core 0.",
          "process": "name:testrun_core0",
          "allowed_cpus": null,
          "affinity": [0],
          "period_us": 10000,
          "quotas": { "L1-dcache-loads": 1000000, "l2_rqsts.references": 100000 } },
        { "name": "Sample allocation of proc #1",
          "description": "This proc is a heavy CPU user and want to execute on core 1.",
          "process": "name:testrun_core1",
          "affinity": [1] }
      ]
    }"#;

    #[test]
    fn fig_8_9_parses_and_round_trips() {
        let c = Contract::parse(FIG_8_9).unwrap();
        assert_eq!(c.entries.len(), 2);
        assert_eq!(c.entries[0].affinity, vec![0]);
        assert_eq!(c.entries[0].quotas["L1-dcache-loads"], 1_000_000);
        assert_eq!(c.entries[1].period(), Duration::from_millis(10));
        assert_eq!(Contract::parse(&c.to_json()).unwrap(), c);
    }

    #[test]
    fn structural_errors_name_the_entry_and_field() {
        let cases = [
            (FIG_8_9.replace("hwqos.contract/1", "v0"), "schema `v0`"),
            (
                FIG_8_9.replace("\"period_us\": 10000", "\"period_us\": 5"),
                "period_us 5",
            ),
            (
                FIG_8_9.replace("1000000", "0"),
                "quota of `L1-dcache-loads` is zero",
            ),
            (
                FIG_8_9.replace("\"allowed_cpus\": null", "\"allowed_cpus\": [1]"),
                "affinity CPU 0 is not in allowed_cpus",
            ),
            (
                FIG_8_9.replace("\"affinity\": [1]", "\"afinity\": [1]"),
                "unknown field `afinity`",
            ),
            (
                FIG_8_9.replace("name:testrun_core1", "pid:abc"),
                "invalid target `pid:abc`",
            ),
            ("[1,2".to_string(), "not a hwqos.contract/1 document"),
        ];
        for (text, want) in cases {
            let err = Contract::parse(&text).unwrap_err().to_string();
            assert!(err.contains(want), "{err} does not contain {want}");
        }
    }

    #[test]
    fn resolve_skips_bad_cpus_unknown_events_and_vanished_pids() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let entry =
            |name: &str, process: String, affinity: Vec<u32>, quotas: &[(&str, u64)]| Entry {
                name: name.into(),
                description: String::new(),
                process: process.parse().unwrap(),
                allowed_cpus: None,
                affinity,
                period_us: 10_000,
                quotas: quotas.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                explanation: vec![],
            };
        let c = Contract::new(vec![
            entry(
                "ok",
                format!("pid:{pid}"),
                vec![0],
                &[("sw.page_faults", 50)],
            ),
            entry("bad-cpu", format!("pid:{pid}"), vec![999], &[]),
            entry(
                "bad-event",
                format!("pid:{pid}"),
                vec![0],
                &[("no.such_event", 5)],
            ),
            entry("gone", "pid:999999999".into(), vec![0], &[]),
        ]);
        c.validate().unwrap();
        let catalog = Catalog::for_this_node();
        let resolver = Resolver::for_this_node();
        let (ok, skipped) = c.resolve(&[0, 1], &catalog, &resolver);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].pids, vec![pid]);
        assert_eq!(ok[0].quotas.as_ref().unwrap().events[0].attr.config, 2);
        let reasons: Vec<(&str, &str)> = skipped
            .iter()
            .map(|s| (s.entry.as_str(), s.reason.as_str()))
            .collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[0].0 == "bad-cpu" && reasons[0].1.contains("CPU 999 is not online"));
        assert!(reasons[1].0 == "bad-event" && reasons[1].1.contains("no.such_event"));
        assert!(
            reasons[2].0 == "gone" && reasons[2].1.contains("no running process"),
            "{reasons:?}"
        );
    }
}
