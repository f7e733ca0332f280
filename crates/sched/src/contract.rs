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
//!       "quotas": { "L1-dcache-loads": 1000000, "sw.page_faults": 100000 },
//!       "quota_scope": "process" },
//!     { "name": "Sample allocation of proc #1", "process": "name:testrun_core1",
//!       "affinity": [1] }
//!   ]
//! }
//! ```
//!
//! `quota_scope` says what each quota bounds: `"thread"` (the default) each
//! thread on its own, so a period's total can reach threads × quota;
//! `"process"` the sum over all threads of the process, threads that start
//! later included (not yet the default: a few periods in ten overshoot on a
//! loaded node, docs/sra.md). Any other word is refused. The process is throttled as
//! soon as any one of its quota events is used up.
//!
//! [`Contract::parse`] checks the structure (unknown fields, schema, zero
//! quotas, period range, affinity outside `allowed_cpus`) and fails with an
//! error naming the entry and the field. [`Contract::resolve`] checks it
//! against this machine — CPUs online, events countable, processes present —
//! and *skips* entries that cannot apply, each with a reason, so one stale
//! entry never stops the rest.

use crate::backend::{
    EventQuota, QuotaScope, QuotaSet, MAX_EVENTS, MAX_PERIOD, MAX_QUOTA, MIN_PERIOD,
};
use crate::SchedError;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::target::{Resolver, TargetSelector};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The `schema` value every contract carries; any other is refused.
pub const SCHEMA: &str = "hwqos.contract/1";
/// Upper bound on entries (contracts come from files and the network).
pub const MAX_ENTRIES: usize = 4096;

/// A whole contract: what to pin and throttle, one [`Entry`] per process
/// selector. Unknown fields are errors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Monotonically increasing version written by the decision engine.
    #[serde(default)]
    pub version: u64,
    /// Who wrote the contract (the decision engine sets it); `None` for one
    /// written by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_by: Option<String>,
    /// 1 to [`MAX_ENTRIES`] entries, each with a non-empty name and a
    /// selector no other entry has.
    pub entries: Vec<Entry>,
}

/// What one process (or every process a selector matches) gets: where it
/// may run, where it is pinned, and its event quotas per period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The entry's name, not empty; errors and skip reasons name the entry by
    /// it (uniqueness is not checked, so keep names distinct).
    pub name: String,
    /// Free text for humans; ignored by the agent.
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
    /// What each quota bounds: `"thread"` (default) each thread on its own,
    /// `"process"` the sum over all the process's threads.
    #[serde(default, skip_serializing_if = "QuotaScope::is_default")]
    pub quota_scope: QuotaScope,
    /// Why the decision engine chose this entry, one line per reason; empty
    /// for a hand-written entry. Informational only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub explanation: Vec<String>,
    /// Allows the entry to match PID 1 or kernel threads (refused otherwise).
    /// The agent's own processes are never matched, forced or not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

fn default_period_us() -> u64 {
    10_000
}

impl Entry {
    /// The quota period, `period_us` as a [`Duration`].
    pub fn period(&self) -> Duration {
        Duration::from_micros(self.period_us)
    }
}

/// An entry checked against this machine.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedEntry {
    /// The entry as the contract gave it.
    pub entry: Entry,
    /// The processes (thread-group ids) it applies to: never empty, never the
    /// agent's own, none claimed by an earlier entry.
    pub pids: Vec<u32>,
    /// `None` when the entry has no quotas.
    pub quotas: Option<QuotaSet>,
}

/// An entry (or a process of one) left out, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The entry's [`Entry::name`].
    pub entry: String,
    /// Why it (or one of its processes) was left out, for a human.
    pub reason: String,
}

impl Contract {
    /// A contract of `entries` with the current [`SCHEMA`], version 0 and no
    /// `generated_by`; not validated (see [`Contract::validate`]).
    pub fn new(entries: Vec<Entry>) -> Contract {
        Contract {
            schema: SCHEMA.into(),
            version: 0,
            generated_by: None,
            entries,
        }
    }

    /// Parses and validates a contract. A key given twice in one object is
    /// an error (serde_json alone would keep the last one).
    pub fn parse(text: &str) -> Result<Contract, SchedError> {
        let not_a_contract = |e: serde_json::Error| {
            SchedError::invalid("contract", format!("not a hwqos.contract/1 document: {e}"))
        };
        crate::input::check_no_duplicate_keys(text).map_err(not_a_contract)?;
        let c: Contract = serde_json::from_str(text).map_err(not_a_contract)?;
        c.validate()?;
        Ok(c)
    }

    /// The contract as pretty-printed JSON, which [`Contract::parse`] reads
    /// back.
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
        if self.entries.is_empty() {
            return Err(SchedError::invalid(
                "contract",
                "no entries (\"entries\": [] would do nothing)",
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
            if let Some((ev, q)) = e.quotas.iter().find(|(_, q)| **q > MAX_QUOTA) {
                return Err(bad(format!(
                    "quota of `{ev}` is {q}, out of range (1..={MAX_QUOTA} events per period)"
                )));
            }
            if let Some((j, other)) = self.entries[..i]
                .iter()
                .enumerate()
                .find(|(_, o)| o.process == e.process)
            {
                return Err(bad(format!(
                    "process `{}` is already the selector of entry {j} (`{}`); one entry per process",
                    e.process, other.name
                )));
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
    /// machine cannot count, or no running process are skipped with a reason,
    /// and so are entries that match PID 1 or a kernel thread without
    /// `"force": true`. The agent's own processes ([`Guard`]) are never
    /// matched: an entry that matches nothing else is skipped with that
    /// reason. A process matched by two entries goes to the first; the later
    /// entry gets a skip naming both.
    pub fn resolve(
        &self,
        online_cpus: &[u32],
        catalog: &Catalog,
        resolver: &Resolver,
        guard: &Guard,
    ) -> (Vec<ResolvedEntry>, Vec<Skipped>) {
        let mut ok = Vec::new();
        let mut skipped = Vec::new();
        let mut claimed: BTreeMap<u32, String> = BTreeMap::new();
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
                scope: e.quota_scope,
            });
            if let Some(q) = &quotas {
                if let Err(err) = q.validate() {
                    skipped.push(skip(err.to_string()));
                    continue;
                }
            }
            let matched: Vec<u32> = match resolver.resolve(std::slice::from_ref(&e.process)) {
                Ok(r) => r.processes.iter().map(|p| p.pid).collect(),
                Err(err) => {
                    skipped.push(skip(format!("process `{}`: {err}", e.process)));
                    continue;
                }
            };
            if matched.is_empty() {
                skipped.push(skip(format!("no running process matches `{}`", e.process)));
                continue;
            }
            let (own, mut pids): (Vec<u32>, Vec<u32>) =
                matched.into_iter().partition(|p| guard.is_own(*p));
            if pids.is_empty() {
                skipped.push(skip(format!(
                    "`{}` matches only the agent's own processes (pid {}): hwqos-sra never \
                     pins or throttles itself, its threads or its guardian",
                    e.process,
                    own.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
                continue;
            }
            if !e.force {
                if let Some(refusal) = pids.iter().find_map(|p| guard.refusal(*p)) {
                    skipped.push(skip(format!(
                        "`{}` matches {refusal}; refused unless the entry sets \"force\": true",
                        e.process
                    )));
                    continue;
                }
            }
            let (taken, free): (Vec<u32>, Vec<u32>) =
                pids.drain(..).partition(|p| claimed.contains_key(p));
            for p in &taken {
                skipped.push(skip(format!(
                    "pid {p} is also matched by entry `{}`, which has it (one entry per process)",
                    claimed[p]
                )));
            }
            if free.is_empty() {
                continue;
            }
            for p in &free {
                claimed.insert(*p, e.name.clone());
            }
            ok.push(ResolvedEntry {
                entry: e.clone(),
                pids: free,
                quotas,
            });
        }
        (ok, skipped)
    }
}

/// What an agent must never touch: its own process (every thread), its
/// guardian, and — unless an entry is forced — PID 1 and kernel threads.
#[derive(Clone, Debug)]
pub struct Guard {
    /// Where `/proc` is (thread and parent lookups); a fake tree in tests.
    pub proc_root: PathBuf,
    /// Thread-group ids of the agent's own processes.
    pub own: BTreeSet<u32>,
    /// Also the children of this process (its guardian, whichever pid a
    /// restarted one has, and the commands it runs for `app_sources`).
    pub own_children: bool,
}

impl Guard {
    /// The calling process, its children, and `others`.
    pub fn for_this_process(others: &[u32]) -> Guard {
        let mut own: BTreeSet<u32> = others.iter().copied().collect();
        own.insert(std::process::id());
        Guard {
            proc_root: PathBuf::from("/proc"),
            own,
            own_children: true,
        }
    }

    /// Whether `pid` (a process or one of its threads) is one of ours.
    pub fn is_own(&self, pid: u32) -> bool {
        if self.own.contains(&pid) {
            return true;
        }
        let Some((tgid, ppid)) = tgid_ppid(&self.proc_root, pid) else {
            return false;
        };
        self.own.contains(&tgid) || (self.own_children && ppid == std::process::id())
    }

    /// Why `pid` needs `"force": true`, if it does.
    pub fn refusal(&self, pid: u32) -> Option<String> {
        if pid == 1 || tgid(&self.proc_root, pid) == Some(1) {
            return Some("PID 1 (init)".into());
        }
        if is_kernel_thread(&self.proc_root, pid) {
            let comm = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("comm"))
                .unwrap_or_default();
            return Some(format!("kernel thread {pid} ({})", comm.trim()));
        }
        None
    }
}

/// The thread group a task belongs to (`Tgid:` of `/proc/<pid>/status`).
pub fn tgid(proc_root: &Path, pid: u32) -> Option<u32> {
    tgid_ppid(proc_root, pid).map(|(t, _)| t)
}

/// `Tgid:` and `PPid:` of `/proc/<pid>/status`.
fn tgid_ppid(proc_root: &Path, pid: u32) -> Option<(u32, u32)> {
    let status = std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")).ok()?;
    let field = |k: &str| -> Option<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((field("Tgid:")?, field("PPid:")?))
}

/// Whether `pid` is a kernel thread (`PF_KTHREAD` in the flags of
/// `/proc/<pid>/stat`).
pub fn is_kernel_thread(proc_root: &Path, pid: u32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let Ok(stat) = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")) else {
        return false;
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    // After the comm: state ppid pgrp session tty_nr tpgid flags.
    rest.split_whitespace()
        .nth(6)
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|f| f & PF_KTHREAD != 0)
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
                quota_scope: QuotaScope::Process,
                explanation: vec![],
                force: false,
            };
        let c = Contract::new(vec![
            entry(
                "ok",
                format!("pid:{pid}"),
                vec![0],
                &[("sw.page_faults", 50)],
            ),
            entry("bad-cpu", "name:bad-cpu-proc".into(), vec![999], &[]),
            entry(
                "bad-event",
                "name:bad-event-proc".into(),
                vec![0],
                &[("no.such_event", 5)],
            ),
            entry("gone", "pid:999999999".into(), vec![0], &[]),
        ]);
        c.validate().unwrap();
        let catalog = Catalog::for_this_node();
        let resolver = Resolver::for_this_node();
        // The test's own children are the processes under test here.
        let guard = Guard {
            own_children: false,
            ..Guard::for_this_process(&[])
        };
        let (ok, skipped) = c.resolve(&[0, 1], &catalog, &resolver, &guard);
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

    fn one(process: &str, force: bool) -> Contract {
        let mut c = Contract::new(vec![Entry {
            name: "e".into(),
            description: String::new(),
            process: process.parse().unwrap(),
            allowed_cpus: None,
            affinity: vec![],
            period_us: 10_000,
            quotas: BTreeMap::new(),
            quota_scope: QuotaScope::default(),
            explanation: vec![],
            force,
        }]);
        c.version = 1;
        c
    }

    #[test]
    fn the_agent_itself_is_never_matched_and_pid_1_needs_force() {
        let catalog = Catalog::for_this_node();
        let resolver = Resolver::for_this_node().excluding_pid(None);
        let guard = Guard::for_this_process(&[]);
        let me = std::process::id();
        // Every selector kind ends in the same filter; pid: and tid: of a thread.
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        for sel in [format!("pid:{me}"), format!("pid:{tid}")] {
            for force in [false, true] {
                let (ok, skipped) = one(&sel, force).resolve(&[0], &catalog, &resolver, &guard);
                assert!(ok.is_empty(), "{sel}");
                assert!(
                    skipped[0].reason.contains("only the agent's own processes"),
                    "{skipped:?}"
                );
            }
        }
        let (ok, skipped) = one("pid:1", false).resolve(&[0], &catalog, &resolver, &guard);
        assert!(ok.is_empty());
        assert!(
            skipped[0].reason.contains("PID 1") && skipped[0].reason.contains("\"force\": true"),
            "{skipped:?}"
        );
        let (ok, _) = one("pid:1", true).resolve(&[0], &catalog, &resolver, &guard);
        assert_eq!(ok[0].pids, vec![1]);
        if is_kernel_thread(Path::new("/proc"), 2) {
            let (ok, skipped) = one("pid:2", false).resolve(&[0], &catalog, &resolver, &guard);
            assert!(ok.is_empty() && skipped[0].reason.contains("kernel thread 2"));
        }
        assert!(!is_kernel_thread(Path::new("/proc"), me));
    }

    #[test]
    fn contracts_that_do_nothing_or_mean_two_things_are_refused() {
        let cases = [
            (
                r#"{"schema":"hwqos.contract/1","entries":[]}"#.to_string(),
                "no entries",
            ),
            (
                FIG_8_9.replace("\"affinity\": [1]", "\"affinity\": [1], \"affinity\": [0]"),
                "duplicate key `affinity`",
            ),
            (
                FIG_8_9.replace("1000000", "18446744073709551615"),
                "quota of `L1-dcache-loads` is 18446744073709551615, out of range (1..=9223372036854775807",
            ),
            (
                FIG_8_9.replace("name:testrun_core1", "name:testrun_core0"),
                "entry 1 (`Sample allocation of proc #1`): process `name:testrun_core0` is already the selector of entry 0",
            ),
        ];
        for (text, want) in cases {
            let err = Contract::parse(&text).unwrap_err().to_string();
            assert!(err.contains(want), "{err} does not contain {want}");
        }
        // quota_scope: two words, anything else refused; the default is
        // "thread" and is not written back.
        let scoped = FIG_8_9.replace(
            "\"quotas\": { \"L1-dcache-loads\"",
            "\"quota_scope\": \"process\", \"quotas\": { \"L1-dcache-loads\"",
        );
        let c = Contract::parse(&scoped).unwrap();
        assert_eq!(c.entries[0].quota_scope, QuotaScope::Process);
        assert_eq!(c.entries[1].quota_scope, QuotaScope::Thread);
        assert!(c.to_json().contains("\"quota_scope\": \"process\""));
        assert_eq!(c.to_json().matches("quota_scope").count(), 1);
        assert_eq!(Contract::parse(&c.to_json()).unwrap(), c);
        let err = Contract::parse(
            &scoped.replace("\"quota_scope\": \"process\"", "\"quota_scope\": \"cores\""),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("unknown variant `cores`, expected `process` or `thread`"),
            "{err}"
        );
        // The largest quota the kernel takes is accepted.
        assert!(Contract::parse(&FIG_8_9.replace("1000000", "9223372036854775807")).is_ok());
    }
}
