//! `hwqos stat`: count events for a command, processes or the whole system, like
//! `perf stat`.
//!
//! As in `perf stat`, every event is opened as its own counter (its own
//! one-event group) on every task or CPU of a scope, so events that cannot share
//! the PMU are multiplexed by the kernel; each count is then scaled by
//! `time_enabled / time_running` and the running percentage is shown when it is
//! below 100 %. Per-task or per-CPU counts of one scope are summed (counts,
//! enabled and running times alike) before scaling, which is perf's aggregation.
//!
//! The engine ([`CounterSet`]) works on any [`CounterBackend`], so it is tested
//! with the simulator; [`render`] turns readings into perf-like text, perf's
//! `-x` CSV, or JSON lines.

use anyhow::{Context, Result};
use hwqos_core::metric::Unit;
use hwqos_core::{CounterReading, MetricName, Scope};
use hwqos_pmu::backend::{CountTarget, CounterBackend, GroupId};
use hwqos_pmu::{Event, PmuError};
use serde::Serialize;
use std::fmt::Write as _;

/// Schema of the JSON lines `hwqos stat --json` prints.
pub const STAT_SCHEMA: &str = "hwqos.stat/1";

/// perf's default event list for `perf stat` without `-e` (software events plus
/// the common hardware ones, which are reported `<not supported>` where the node
/// has no PMU).
pub const DEFAULT_EVENTS: &[&str] = &[
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "cycles",
    "instructions",
    "branches",
    "branch-misses",
];

/// Splits a `-e` argument into event names at commas that are not inside a
/// `pmu/…/` term list (`cpu/event=0x51,umask=0x1/` stays one event).
pub fn split_event_list(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut slashes = 0usize;
    for c in list.chars() {
        match c {
            '/' => {
                slashes += 1;
                current.push(c);
            }
            ',' if slashes % 2 == 0 => {
                out.push(std::mem::take(&mut current));
                slashes = 0;
            }
            _ => current.push(c),
        }
    }
    out.push(current);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// One event as the user named it, resolved, or the reason it cannot be counted.
#[derive(Clone, Debug)]
pub struct StatEvent {
    /// The name exactly as given on the command line.
    pub name: String,
    /// The metric it is counted as (absent only if resolution itself failed).
    pub metric: Option<MetricName>,
    pub event: Option<Event>,
    /// Why this event is not counted on this node (perf's `<not supported>`).
    pub unavailable: Option<String>,
}

impl StatEvent {
    pub fn counted(event: Event) -> StatEvent {
        StatEvent {
            name: event.name.clone(),
            metric: Some(event.metric.clone()),
            event: Some(event),
            unavailable: None,
        }
    }

    pub fn unit(&self) -> Unit {
        self.metric
            .as_ref()
            .map(|m| m.info().unit)
            .unwrap_or(Unit::Events)
    }

    fn is_task_clock(&self) -> bool {
        self.metric
            .as_ref()
            .is_some_and(|m| matches!(m.as_str(), "sw.task_clock" | "sw.cpu_clock"))
    }

    fn mark_unavailable(&mut self, reason: String) {
        self.event = None;
        self.unavailable = Some(reason);
    }
}

/// Resolves names with `resolve`; unknown names are an error naming the event
/// (exit 2), names the catalog knows but the node cannot count are kept and
/// marked unavailable.
pub fn resolve_events(
    names: &[String],
    resolve: &mut dyn FnMut(&str) -> Result<Event, PmuError>,
) -> Result<Vec<StatEvent>> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        match resolve(name) {
            Ok(mut event) => {
                event.name = name.clone();
                out.push(StatEvent::counted(event));
            }
            Err(PmuError::Unavailable { reason, .. }) => out.push(StatEvent {
                name: name.clone(),
                metric: None,
                event: None,
                unavailable: Some(reason),
            }),
            Err(e) => return Err(anyhow::Error::new(e)).context("in -e"),
        }
    }
    Ok(out)
}

/// Checks each counted event by opening it once on the calling thread, marking
/// the ones the node refuses. Fails if no event at all can be counted.
pub fn probe_events(backend: &mut dyn CounterBackend, events: &mut [StatEvent]) -> Result<()> {
    for ev in events.iter_mut() {
        let Some(event) = &ev.event else { continue };
        match backend.probe(event) {
            Ok(()) => {}
            Err(PmuError::Unavailable { reason, .. }) => ev.mark_unavailable(reason),
            Err(e @ PmuError::Permission { .. }) => ev.mark_unavailable(e.to_string()),
            Err(e) => return Err(anyhow::Error::new(e)).context("probing events"),
        }
    }
    ensure_some_counted(events)
}

fn ensure_some_counted(events: &[StatEvent]) -> Result<()> {
    if events.iter().any(|e| e.event.is_some()) {
        return Ok(());
    }
    let reasons: Vec<String> = events
        .iter()
        .map(|e| format!("  {}: {}", e.name, e.unavailable.as_deref().unwrap_or("?")))
        .collect();
    anyhow::bail!(
        "none of the requested events can be counted on this node:\n{}",
        reasons.join("\n")
    )
}

/// What a scope counts: the tasks or CPUs whose counters are summed.
#[derive(Clone, Debug)]
pub struct ScopeTargets {
    pub scope: Scope,
    pub targets: Vec<CountTarget>,
}

/// The open counters: per scope, per event, one group per task or CPU.
pub struct CounterSet {
    pub events: Vec<StatEvent>,
    scopes: Vec<ScopeTargets>,
    /// groups[scope][event] = the groups summed for that cell.
    groups: Vec<Vec<Vec<GroupId>>>,
}

/// One cumulative (or, after [`Reading::delta_since`], interval) count.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub scope: Scope,
    /// Index into [`CounterSet::events`].
    pub event: usize,
    /// Summed over the scope's tasks/CPUs; `None` when the event is unavailable.
    pub counter: Option<CounterReading>,
}

impl Reading {
    pub fn delta_since(&self, earlier: &Reading) -> Reading {
        Reading {
            scope: self.scope.clone(),
            event: self.event,
            counter: match (self.counter, earlier.counter) {
                (Some(now), Some(then)) => Some(now.delta_since(&then)),
                (now, _) => now,
            },
        }
    }
}

impl CounterSet {
    /// Opens every counted event on every target of every scope (disabled).
    /// An event the kernel refuses becomes unavailable (its other groups are
    /// closed); a task that exited in the meantime is skipped.
    pub fn open(
        backend: &mut dyn CounterBackend,
        mut events: Vec<StatEvent>,
        scopes: Vec<ScopeTargets>,
    ) -> Result<CounterSet> {
        let mut groups = vec![vec![Vec::new(); events.len()]; scopes.len()];
        for (ei, ev) in events.iter_mut().enumerate() {
            let Some(event) = ev.event.clone() else {
                continue;
            };
            let mut refused = None;
            'scopes: for (si, scope) in scopes.iter().enumerate() {
                for target in &scope.targets {
                    match backend.open_group(target, std::slice::from_ref(&event)) {
                        Ok(g) => groups[si][ei].push(g),
                        Err(PmuError::NoSuchTask { .. }) => {}
                        Err(PmuError::Unavailable { reason, .. }) => {
                            refused = Some(reason);
                            break 'scopes;
                        }
                        Err(e @ PmuError::Permission { .. }) => {
                            refused = Some(e.to_string());
                            break 'scopes;
                        }
                        Err(e) => {
                            for cell in groups.iter().flatten().flatten() {
                                backend.close(*cell);
                            }
                            return Err(anyhow::Error::new(e)).with_context(|| {
                                format!("opening `{}` on {}", ev.name, scope.scope)
                            });
                        }
                    }
                }
            }
            if let Some(reason) = refused {
                for per_scope in groups.iter_mut() {
                    for g in per_scope[ei].drain(..) {
                        backend.close(g);
                    }
                }
                ev.mark_unavailable(reason);
            }
        }
        ensure_some_counted(&events)?;
        Ok(CounterSet {
            events,
            scopes,
            groups,
        })
    }

    fn all_groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups.iter().flatten().flatten().copied()
    }

    pub fn enable(&self, backend: &mut dyn CounterBackend) -> Result<()> {
        for g in self.all_groups() {
            backend.enable(g).context("enabling counters")?;
        }
        Ok(())
    }

    pub fn disable(&self, backend: &mut dyn CounterBackend) -> Result<()> {
        for g in self.all_groups() {
            backend.disable(g).context("disabling counters")?;
        }
        Ok(())
    }

    pub fn close(self, backend: &mut dyn CounterBackend) {
        for g in self.all_groups() {
            backend.close(g);
        }
    }

    pub fn scopes(&self) -> impl Iterator<Item = &Scope> {
        self.scopes.iter().map(|s| &s.scope)
    }

    /// Cumulative readings, scope-major in event order.
    pub fn read(&self, backend: &mut dyn CounterBackend) -> Result<Vec<Reading>> {
        let mut out = Vec::new();
        for (si, scope) in self.scopes.iter().enumerate() {
            for (ei, ev) in self.events.iter().enumerate() {
                let counter = if ev.event.is_none() {
                    None
                } else {
                    let mut sum = CounterReading {
                        raw: 0,
                        time_enabled: 0,
                        time_running: 0,
                    };
                    for g in &self.groups[si][ei] {
                        let r = backend
                            .read(*g)
                            .with_context(|| format!("reading `{}` on {}", ev.name, scope.scope))?;
                        sum.raw = sum.raw.wrapping_add(r.values.first().copied().unwrap_or(0));
                        sum.time_enabled += r.time_enabled;
                        sum.time_running += r.time_running;
                    }
                    Some(sum)
                };
                out.push(Reading {
                    scope: scope.scope.clone(),
                    event: ei,
                    counter,
                });
            }
        }
        Ok(out)
    }
}

/// Output formats of `hwqos stat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// perf-like aligned text.
    Text,
    /// perf's `-x SEP` format: value, unit, event, run time, running %, metric value, metric unit.
    Separated(String),
    /// One JSON object per line ([`StatLine`]).
    Json,
}

/// One `hwqos stat --json` line.
#[derive(Clone, Debug, Serialize)]
pub struct StatLine {
    pub schema: &'static str,
    /// The event name as given.
    pub event: String,
    /// The hwqos metric name it was counted as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// `pid:N`, `system` or `cpu:N`.
    pub scope: String,
    /// The scaled count (for task-clock: nanoseconds); `null` when not counted.
    pub value: Option<f64>,
    /// The unit of `value` and `counter_value` (`nanoseconds`, `events`).
    pub unit: Unit,
    /// The raw count before scaling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counter_value: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_enabled: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_running: Option<u64>,
    /// Share of the enabled time the counter ran, in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_pct: Option<f64>,
    /// True when the value was scaled from a multiplexed counter.
    pub multiplexed: bool,
    /// Why the event was not counted (`<not supported>` / `<not counted>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// With `-I`: seconds since counting started, at the end of this interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<f64>,
}

/// Builds the JSON/CSV records of a set of readings.
pub fn stat_lines(
    events: &[StatEvent],
    readings: &[Reading],
    interval: Option<f64>,
) -> Vec<StatLine> {
    readings
        .iter()
        .map(|r| {
            let ev = &events[r.event];
            let (value, unavailable) = match (&ev.unavailable, r.counter) {
                (Some(reason), _) => (None, Some(format!("<not supported>: {reason}"))),
                (None, Some(c)) => match c.scaled() {
                    Some(v) => (Some(v), None),
                    None => (
                        None,
                        Some("<not counted>: the counter never got onto the PMU".to_string()),
                    ),
                },
                (None, None) => (None, Some("<not counted>".to_string())),
            };
            StatLine {
                schema: STAT_SCHEMA,
                event: ev.name.clone(),
                metric: ev.metric.as_ref().map(|m| m.to_string()),
                scope: r.scope.to_string(),
                value,
                unit: ev.unit(),
                counter_value: r.counter.map(|c| c.raw),
                time_enabled: r.counter.map(|c| c.time_enabled),
                time_running: r.counter.map(|c| c.time_running),
                running_pct: r.counter.map(|c| c.running_fraction() * 100.0),
                multiplexed: r.counter.is_some_and(|c| c.multiplexed()),
                unavailable,
                interval,
            }
        })
        .collect()
}

/// What the text header and footer need to know about the run.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// `'CMD ARGS'`, `process id '1234'` or `'system wide'`.
    pub what: String,
    /// Wall time counted, in nanoseconds.
    pub elapsed_ns: u64,
}

fn unit_word(unit: Unit) -> &'static str {
    match unit {
        Unit::Nanoseconds => "msec",
        _ => "",
    }
}

/// The display value: task-clock in milliseconds like perf, counts as they are.
fn display_value(unit: Unit, v: f64) -> f64 {
    if unit == Unit::Nanoseconds {
        v / 1e6
    } else {
        v
    }
}

/// perf's per-line "shadow" metric: CPUs utilized for task-clock, a rate per
/// second of task-clock for other events.
fn shadow_metric(
    events: &[StatEvent],
    readings: &[Reading],
    r: &Reading,
    elapsed_ns: u64,
) -> Option<(f64, String)> {
    let ev = &events[r.event];
    let v = r.counter?.scaled()?;
    if ev.is_task_clock() {
        return (elapsed_ns > 0).then(|| (v / elapsed_ns as f64, "CPUs utilized".to_string()));
    }
    if ev.unit() != Unit::Events {
        return None;
    }
    let clock_ns = readings.iter().find_map(|o| {
        (o.scope == r.scope && events[o.event].is_task_clock())
            .then(|| o.counter.and_then(|c| c.scaled()))
            .flatten()
    })?;
    if clock_ns <= 0.0 {
        return None;
    }
    let per_sec = v / (clock_ns / 1e9);
    let (scaled, prefix) = if per_sec >= 1e9 {
        (per_sec / 1e9, "G")
    } else if per_sec >= 1e6 {
        (per_sec / 1e6, "M")
    } else if per_sec >= 1e3 {
        (per_sec / 1e3, "K")
    } else {
        (per_sec, "")
    };
    Some((scaled, format!("{prefix}/sec")))
}

/// Renders readings. `interval` is the time stamp (seconds since start) of an
/// `-I` interval, `None` for the final totals.
pub fn render(
    format: &Format,
    events: &[StatEvent],
    readings: &[Reading],
    info: &RunInfo,
    interval: Option<f64>,
) -> String {
    let mut out = String::new();
    match format {
        Format::Json => {
            for line in stat_lines(events, readings, interval) {
                // StatLine holds only strings and numbers: serialization cannot fail.
                if let Ok(json) = serde_json::to_string(&line) {
                    out.push_str(&json);
                    out.push('\n');
                }
            }
        }
        Format::Separated(sep) => {
            let multi_scope = readings.iter().any(|r| r.scope != readings[0].scope);
            for r in readings {
                let ev = &events[r.event];
                if let Some(t) = interval {
                    let _ = write!(out, "{t:.9}{sep}");
                }
                if multi_scope {
                    let _ = write!(out, "{}{sep}", r.scope);
                }
                let unit = unit_word(ev.unit());
                match (ev.unavailable.is_some(), r.counter) {
                    (false, Some(c)) if c.scaled().is_some() => {
                        let v = display_value(ev.unit(), c.scaled().unwrap_or(0.0));
                        let (mv, mu) = shadow_metric(events, readings, r, info.elapsed_ns)
                            .map(|(v, u)| (format!("{v:.3}"), u))
                            .unwrap_or_default();
                        let value = if ev.unit() == Unit::Nanoseconds {
                            format!("{v:.2}")
                        } else {
                            format!("{v:.0}")
                        };
                        let _ = writeln!(
                            out,
                            "{value}{sep}{unit}{sep}{}{sep}{}{sep}{:.2}{sep}{mv}{sep}{mu}",
                            ev.name,
                            c.time_running,
                            c.running_fraction() * 100.0
                        );
                    }
                    (false, Some(c)) => {
                        let _ = writeln!(
                            out,
                            "<not counted>{sep}{unit}{sep}{}{sep}{}{sep}0.00{sep}{sep}",
                            ev.name, c.time_running
                        );
                    }
                    _ => {
                        let _ = writeln!(
                            out,
                            "<not supported>{sep}{unit}{sep}{}{sep}0{sep}100.00{sep}{sep}",
                            ev.name
                        );
                    }
                }
            }
        }
        Format::Text => {
            let multi_scope = readings.iter().any(|r| r.scope != readings[0].scope);
            if interval.is_none() {
                let _ = writeln!(out, "\n Performance counter stats for {}:\n", info.what);
            }
            for r in readings {
                let ev = &events[r.event];
                if let Some(t) = interval {
                    let _ = write!(out, "{t:>15.9} ");
                }
                if multi_scope {
                    let _ = write!(out, "{:<12} ", r.scope.to_string());
                }
                let unit = unit_word(ev.unit());
                match (&ev.unavailable, r.counter) {
                    (None, Some(c)) if c.scaled().is_some() => {
                        let v = display_value(ev.unit(), c.scaled().unwrap_or(0.0));
                        let value = if ev.unit() == Unit::Nanoseconds {
                            format!("{v:.2}")
                        } else {
                            format!("{v:.0}")
                        };
                        let mut line = format!("{value:>18} {unit:<4} {:<32}", ev.name);
                        if let Some((mv, mu)) = shadow_metric(events, readings, r, info.elapsed_ns)
                        {
                            let _ = write!(line, " #  {mv:>8.3} {mu}");
                        }
                        if c.multiplexed() {
                            let _ = write!(line, "  ({:.2}%)", c.running_fraction() * 100.0);
                        }
                        let _ = writeln!(out, "{}", line.trim_end());
                    }
                    (None, _) => {
                        let _ = writeln!(out, "{:>18} {unit:<4} {}", "<not counted>", ev.name);
                    }
                    (Some(reason), _) => {
                        let _ = writeln!(
                            out,
                            "{:>18} {unit:<4} {:<32} #  {reason}",
                            "<not supported>", ev.name
                        );
                    }
                }
            }
            if interval.is_none() {
                let _ = writeln!(
                    out,
                    "\n{:>18.9} seconds time elapsed\n",
                    info.elapsed_ns as f64 / 1e9
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_pmu::{EventAttr, EventSource};

    fn ev(name: &str, metric: &'static str) -> StatEvent {
        StatEvent::counted(Event {
            name: name.into(),
            metric: MetricName::from_static(metric),
            attr: EventAttr {
                type_: 1,
                config: 0,
                config1: 0,
                config2: 0,
            },
            source: EventSource::PerfName,
        })
    }

    #[test]
    fn event_lists_split_outside_pmu_terms() {
        assert_eq!(
            split_event_list("task-clock, cpu/event=0x51,umask=0x1/,r0151"),
            vec!["task-clock", "cpu/event=0x51,umask=0x1/", "r0151"]
        );
        assert_eq!(split_event_list(""), Vec::<String>::new());
    }

    #[test]
    fn json_lines_carry_scaling_and_units() {
        let mut unsupported = ev("cycles", "hw.cycles");
        unsupported.mark_unavailable("no PMU".into());
        let events = vec![
            ev("task-clock", "sw.task_clock"),
            ev("page-faults", "sw.page_faults"),
            unsupported,
        ];
        let scope = Scope::Process { pid: 42 };
        let readings = vec![
            Reading {
                scope: scope.clone(),
                event: 0,
                counter: Some(CounterReading {
                    raw: 2_000_000,
                    time_enabled: 10,
                    time_running: 10,
                }),
            },
            Reading {
                scope: scope.clone(),
                event: 1,
                counter: Some(CounterReading {
                    raw: 300,
                    time_enabled: 10,
                    time_running: 5,
                }),
            },
            Reading {
                scope,
                event: 2,
                counter: None,
            },
        ];
        let lines = stat_lines(&events, &readings, None);
        let v: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::to_value(l).unwrap())
            .collect();
        assert_eq!(v[0]["event"], "task-clock");
        assert_eq!(v[0]["unit"], "nanoseconds");
        assert_eq!(v[0]["value"], 2_000_000.0);
        assert_eq!(v[0]["scope"], "pid:42");
        assert_eq!(v[1]["value"], 600.0);
        assert_eq!(v[1]["counter_value"], 300);
        assert_eq!(v[1]["multiplexed"], true);
        assert_eq!(v[1]["running_pct"], 50.0);
        assert!(v[2]["value"].is_null());
        assert!(v[2]["unavailable"].as_str().unwrap().contains("no PMU"));

        let info = RunInfo {
            what: "'x'".into(),
            elapsed_ns: 4_000_000,
        };
        let text = render(&Format::Text, &events, &readings, &info, None);
        assert!(text.contains("2.00 msec task-clock"), "{text}");
        assert!(text.contains("0.500 CPUs utilized"), "{text}");
        // 600 faults over 2 ms of task clock = 300 K/sec, shown with the 50 % running share.
        assert!(text.contains("300.000 K/sec  (50.00%)"), "{text}");
        assert!(text.contains("<not supported>      cycles"), "{text}");
        let csv = render(
            &Format::Separated(",".into()),
            &events,
            &readings,
            &info,
            None,
        );
        assert_eq!(
            csv.lines().collect::<Vec<_>>(),
            vec![
                "2.00,msec,task-clock,10,100.00,0.500,CPUs utilized",
                "600,,page-faults,5,50.00,300.000,K/sec",
                "<not supported>,,cycles,0,100.00,,",
            ]
        );
    }
}
