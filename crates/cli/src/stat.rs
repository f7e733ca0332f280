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
//! Events written as a group (`{cycles,instructions}`) are opened as one
//! counter group per task or CPU, so the kernel schedules them together and
//! their ratio is taken over the same time, as in perf.
//!
//! The engine ([`CounterSet`]) works on any [`CounterBackend`], so it is tested
//! with the simulator; [`render`] turns readings into perf-like text, perf's
//! `-x` CSV (perf 6.1's field order), perf's JSON lines, or hwqos's own JSON
//! lines (`hwqos.stat/1`).

use anyhow::{Context, Result};
use hwqos_core::metric::names;
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

/// Parses a `-e` argument into event groups: `{a,b}` is one group (a modifier
/// after the brace, `{a,b}:u`, applies to every member), a plain name is a
/// group of one; commas inside a `pmu/…/` term list do not split.
pub fn parse_event_groups(list: &str) -> Result<Vec<Vec<String>>, String> {
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut open_group: Option<Vec<String>> = None;
    let mut current = String::new();
    let mut slashes = 0usize;
    let mut chars = list.chars().peekable();
    let flush = |current: &mut String, into: &mut Vec<String>| {
        let name = current.trim().to_string();
        current.clear();
        if !name.is_empty() {
            into.push(name);
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '/' => {
                slashes += 1;
                current.push(c);
            }
            '{' if slashes % 2 == 0 => {
                if open_group.is_some() {
                    return Err(format!("event groups do not nest: `{list}`"));
                }
                if !current.trim().is_empty() {
                    return Err(format!("a comma must come before `{{` in `{list}`"));
                }
                open_group = Some(Vec::new());
            }
            '}' if slashes % 2 == 0 => {
                let Some(mut members) = open_group.take() else {
                    return Err(format!("`}}` without its `{{` in `{list}`"));
                };
                flush(&mut current, &mut members);
                if members.is_empty() {
                    return Err(format!("an empty event group in `{list}`"));
                }
                if chars.peek() == Some(&':') {
                    chars.next();
                    let mut modifiers = String::new();
                    while let Some(&m) = chars.peek() {
                        if m == ',' {
                            break;
                        }
                        modifiers.push(m);
                        chars.next();
                    }
                    for m in &mut members {
                        m.push(':');
                        m.push_str(modifiers.trim());
                    }
                }
                groups.push(members);
            }
            ',' if slashes % 2 == 0 => {
                slashes = 0;
                match open_group.as_mut() {
                    Some(members) => flush(&mut current, members),
                    None => {
                        let mut one = Vec::new();
                        flush(&mut current, &mut one);
                        if !one.is_empty() {
                            groups.push(one);
                        }
                    }
                }
            }
            _ => current.push(c),
        }
    }
    if open_group.is_some() {
        return Err(format!("`{{` without its `}}` in `{list}`"));
    }
    let mut one = Vec::new();
    flush(&mut current, &mut one);
    if !one.is_empty() {
        groups.push(one);
    }
    Ok(groups)
}

/// One event as the user named it, resolved, or the reason it cannot be counted.
#[derive(Clone, Debug)]
pub struct StatEvent {
    /// The name exactly as given on the command line.
    pub name: String,
    /// The metric it is counted as (absent only if resolution itself failed).
    pub metric: Option<MetricName>,
    /// The resolved event to open; `None` when it cannot be counted here
    /// (then `unavailable` says why).
    pub event: Option<Event>,
    /// Why this event is not counted on this node (perf's `<not supported>`).
    pub unavailable: Option<String>,
    /// The counter group it is opened in (events of one `{…}` share it).
    pub group: usize,
}

impl StatEvent {
    /// An event resolved and counted under its own name, in group 0.
    pub fn counted(event: Event) -> StatEvent {
        StatEvent {
            name: event.name.clone(),
            metric: Some(event.metric.clone()),
            event: Some(event),
            unavailable: None,
            group: 0,
        }
    }

    /// The unit of the event's values (from the metric registry; events when
    /// unresolved).
    pub fn unit(&self) -> Unit {
        self.metric
            .as_ref()
            .map(|m| m.info().unit)
            .unwrap_or(Unit::Events)
    }

    fn is_task_clock(&self) -> bool {
        self.metric
            .as_ref()
            .is_some_and(|m| matches!(m.as_str(), names::SW_TASK_CLOCK | names::SW_CPU_CLOCK))
    }

    fn mark_unavailable(&mut self, reason: String) {
        self.event = None;
        self.unavailable = Some(reason);
    }
}

/// Resolves the names of each group with `resolve`; unknown names are an error
/// naming the event (exit 2), names the catalog knows but the node cannot count
/// are kept and marked unavailable.
pub fn resolve_events(
    groups: &[Vec<String>],
    resolve: &mut dyn FnMut(&str) -> Result<Event, PmuError>,
) -> Result<Vec<StatEvent>> {
    let mut out = Vec::new();
    for (group, names) in groups.iter().enumerate() {
        for name in names {
            match resolve(name) {
                Ok(mut event) => {
                    event.name = name.clone();
                    out.push(StatEvent {
                        group,
                        ..StatEvent::counted(event)
                    });
                }
                Err(PmuError::Unavailable { reason, .. }) => out.push(StatEvent {
                    name: name.clone(),
                    metric: None,
                    event: None,
                    unavailable: Some(reason),
                    group,
                }),
                Err(e) => return Err(anyhow::Error::new(e)).context("in -e"),
            }
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
    /// The scope the counts are reported for.
    pub scope: Scope,
    /// The tasks or CPUs whose counters are summed into it.
    pub targets: Vec<CountTarget>,
}

/// The open counters: per scope, per counter group, one kernel group per task
/// or CPU.
pub struct CounterSet {
    /// Every event as given, counted or not, in command-line order.
    pub events: Vec<StatEvent>,
    scopes: Vec<ScopeTargets>,
    /// The counted events of each counter group, in their order in the group.
    units: Vec<Vec<usize>>,
    /// groups[scope][unit] = the kernel groups summed for that cell.
    groups: Vec<Vec<Vec<GroupId>>>,
}

/// One cumulative (or, after [`Reading::delta_since`], interval) count.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// The scope counted.
    pub scope: Scope,
    /// Index into [`CounterSet::events`].
    pub event: usize,
    /// Summed over the scope's tasks/CPUs; `None` when the event is unavailable.
    pub counter: Option<CounterReading>,
}

impl Reading {
    /// The interval count from an earlier cumulative reading of the same scope
    /// and event to this one; unchanged when either is unavailable.
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

/// The counted events of each counter group, in the order they were given.
fn counter_units(events: &[StatEvent]) -> Vec<Vec<usize>> {
    let mut units: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        if ev.event.is_none() {
            continue;
        }
        match units.iter_mut().find(|(g, _)| *g == ev.group) {
            Some((_, members)) => members.push(i),
            None => units.push((ev.group, vec![i])),
        }
    }
    units.into_iter().map(|(_, members)| members).collect()
}

impl CounterSet {
    /// Opens every counter group on every target of every scope (disabled).
    /// A group the kernel refuses makes its events unavailable (its other
    /// kernel groups are closed); a task that exited in the meantime is skipped.
    pub fn open(
        backend: &mut dyn CounterBackend,
        mut events: Vec<StatEvent>,
        scopes: Vec<ScopeTargets>,
    ) -> Result<CounterSet> {
        let mut units = counter_units(&events);
        let mut groups = vec![vec![Vec::new(); units.len()]; scopes.len()];
        let mut refused_units = Vec::new();
        for (ui, members) in units.iter().enumerate() {
            let unit_events: Vec<Event> = members
                .iter()
                .filter_map(|&i| events[i].event.clone())
                .collect();
            let mut refused = None;
            'scopes: for (si, scope) in scopes.iter().enumerate() {
                for target in &scope.targets {
                    match backend.open_group(target, &unit_events) {
                        Ok(g) => groups[si][ui].push(g),
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
                            let names: Vec<&str> =
                                members.iter().map(|&i| events[i].name.as_str()).collect();
                            return Err(anyhow::Error::new(e)).with_context(|| {
                                format!("opening `{}` on {}", names.join(","), scope.scope)
                            });
                        }
                    }
                }
            }
            if let Some(reason) = refused {
                for per_scope in groups.iter_mut() {
                    for g in per_scope[ui].drain(..) {
                        backend.close(g);
                    }
                }
                for &i in members {
                    events[i].mark_unavailable(reason.clone());
                }
                refused_units.push(ui);
            }
        }
        for ui in refused_units.into_iter().rev() {
            units.remove(ui);
            for per_scope in groups.iter_mut() {
                per_scope.remove(ui);
            }
        }
        ensure_some_counted(&events)?;
        Ok(CounterSet {
            events,
            scopes,
            units,
            groups,
        })
    }

    fn all_groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups.iter().flatten().flatten().copied()
    }

    /// Starts every counter; errors name the failing operation.
    pub fn enable(&self, backend: &mut dyn CounterBackend) -> Result<()> {
        for g in self.all_groups() {
            backend.enable(g).context("enabling counters")?;
        }
        Ok(())
    }

    /// Stops every counter (readings keep their values).
    pub fn disable(&self, backend: &mut dyn CounterBackend) -> Result<()> {
        for g in self.all_groups() {
            backend.disable(g).context("disabling counters")?;
        }
        Ok(())
    }

    /// Closes every counter.
    pub fn close(self, backend: &mut dyn CounterBackend) {
        for g in self.all_groups() {
            backend.close(g);
        }
    }

    /// The scopes counted, in the order readings are returned.
    pub fn scopes(&self) -> impl Iterator<Item = &Scope> {
        self.scopes.iter().map(|s| &s.scope)
    }

    /// Cumulative readings, scope-major in event order.
    pub fn read(&self, backend: &mut dyn CounterBackend) -> Result<Vec<Reading>> {
        let mut out = Vec::new();
        for (si, scope) in self.scopes.iter().enumerate() {
            let mut sums: Vec<Option<CounterReading>> = vec![None; self.events.len()];
            for (ui, members) in self.units.iter().enumerate() {
                for &i in members {
                    sums[i] = Some(CounterReading {
                        raw: 0,
                        time_enabled: 0,
                        time_running: 0,
                    });
                }
                for g in &self.groups[si][ui] {
                    let r = backend.read(*g).with_context(|| {
                        format!(
                            "reading `{}` on {}",
                            self.events[members[0]].name, scope.scope
                        )
                    })?;
                    for (position, &i) in members.iter().enumerate() {
                        if let Some(sum) = sums[i].as_mut() {
                            sum.raw = sum
                                .raw
                                .wrapping_add(r.values.get(position).copied().unwrap_or(0));
                            sum.time_enabled += r.time_enabled;
                            sum.time_running += r.time_running;
                        }
                    }
                }
            }
            for (ei, counter) in sums.into_iter().enumerate() {
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
    /// perf's `-x SEP` format: `[time,][CPU,]count,unit,event,[variance,]run-time,percentage,metric,metric-unit`.
    Separated(String),
    /// perf's `-j` JSON: one object per line with perf's keys.
    PerfJson,
    /// hwqos's own JSON lines ([`StatLine`], schema `hwqos.stat/1`).
    HwqosJson,
}

/// One `hwqos stat --json-full` line.
#[derive(Clone, Debug, Serialize)]
pub struct StatLine {
    /// Always [`STAT_SCHEMA`].
    pub schema: &'static str,
    /// The event name as given.
    pub event: String,
    /// The hwqos metric name it was counted as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// `pid:N`, `tid:P/T`, `system` or `cpu:N`.
    pub scope: String,
    /// The scaled count (for task-clock: nanoseconds); `null` when not counted.
    /// With `-r`: the mean over the runs.
    pub value: Option<f64>,
    /// The unit of `value` and `counter_value` (`nanoseconds`, `events`).
    pub unit: Unit,
    /// The raw count before scaling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counter_value: Option<u64>,
    /// Nanoseconds the counter was enabled (perf's `time_enabled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_enabled: Option<u64>,
    /// Nanoseconds the counter was on the PMU (perf's `time_running`).
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
    /// With `-r`: the standard error of the mean over the runs, in percent of
    /// the mean (perf's `+- x%`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rel_stddev_pct: Option<f64>,
}

/// Builds the JSON records of a set of readings; `spread` (empty, or one per
/// reading) is the relative standard error of `-r`.
pub fn stat_lines(
    events: &[StatEvent],
    readings: &[Reading],
    interval: Option<f64>,
    spread: &[f64],
) -> Vec<StatLine> {
    readings
        .iter()
        .enumerate()
        .map(|(i, r)| {
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
                rel_stddev_pct: spread.get(i).copied(),
            }
        })
        .collect()
}

/// What the text header and footer need to know about the run.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// `'CMD ARGS'`, `process id '1234'` or `'system wide'`.
    pub what: String,
    /// Wall time counted, in nanoseconds (with `-r`: the mean over the runs).
    pub elapsed_ns: u64,
    /// With `-r N`: N, and the standard error of the mean elapsed time in ns.
    pub runs: Option<(u32, f64)>,
}

impl RunInfo {
    /// A single run of `what` that lasted `elapsed_ns`.
    pub fn once(what: impl Into<String>, elapsed_ns: u64) -> RunInfo {
        RunInfo {
            what: what.into(),
            elapsed_ns,
            runs: None,
        }
    }
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

/// perf's label in front of a count: `CPU3` for a CPU; a process or thread
/// scope only when several are shown (perf would sum them: see docs/cli.md).
fn scope_label(scope: &Scope, several: bool) -> Option<String> {
    match scope {
        Scope::Cpu { cpu } => Some(format!("CPU{cpu}")),
        Scope::System => None,
        other if several => Some(other.to_string()),
        _ => None,
    }
}

/// How one reading is shown, whatever the format.
enum Shown {
    /// The scaled count in display units, and the reading.
    Counted(f64, CounterReading),
    NotCounted(u64),
    NotSupported(String),
}

fn shown(ev: &StatEvent, r: &Reading) -> Shown {
    match (&ev.unavailable, r.counter) {
        (Some(reason), _) => Shown::NotSupported(reason.clone()),
        (None, Some(c)) => match c.scaled() {
            Some(v) => Shown::Counted(display_value(ev.unit(), v), c),
            None => Shown::NotCounted(c.time_running),
        },
        (None, None) => Shown::NotCounted(0),
    }
}

fn count_text(unit: Unit, v: f64) -> String {
    if unit == Unit::Nanoseconds {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// Renders readings. `interval` is the time stamp (seconds since start) of an
/// `-I` interval, `None` for the final totals; `spread` is empty, or per
/// reading the relative standard error in percent of `-r`.
pub fn render(
    format: &Format,
    events: &[StatEvent],
    readings: &[Reading],
    info: &RunInfo,
    interval: Option<f64>,
    spread: &[f64],
) -> String {
    let mut out = String::new();
    let several = readings
        .iter()
        .any(|r| !matches!(r.scope, Scope::Cpu { .. }) && r.scope != readings[0].scope);
    match format {
        Format::HwqosJson => {
            for line in stat_lines(events, readings, interval, spread) {
                // StatLine holds only strings and numbers: serialization cannot fail.
                if let Ok(json) = serde_json::to_string(&line) {
                    out.push_str(&json);
                    out.push('\n');
                }
            }
        }
        Format::PerfJson => {
            for (i, r) in readings.iter().enumerate() {
                let ev = &events[r.event];
                let mut fields: Vec<String> = Vec::new();
                if let Some(t) = interval {
                    fields.push(format!("\"interval\" : {t:.9}"));
                }
                match &r.scope {
                    Scope::Cpu { cpu } => fields.push(format!("\"cpu\" : \"{cpu}\"")),
                    Scope::System => {}
                    other if several => {
                        fields.push(format!("\"thread\" : {}", json_str(&other.to_string())))
                    }
                    _ => {}
                }
                let (value, runtime, pct) = match shown(ev, r) {
                    Shown::Counted(v, c) => (
                        format!("{v:.6}"),
                        c.time_running,
                        c.running_fraction() * 100.0,
                    ),
                    Shown::NotCounted(run) => ("<not counted>".to_string(), run, 0.0),
                    Shown::NotSupported(_) => ("<not supported>".to_string(), 0, 100.0),
                };
                fields.push(format!("\"counter-value\" : \"{value}\""));
                fields.push(format!("\"unit\" : \"{}\"", unit_word(ev.unit())));
                fields.push(format!("\"event\" : {}", json_str(&ev.name)));
                if let Some(v) = spread.get(i) {
                    fields.push(format!("\"variance\" : {v:.2}"));
                }
                fields.push(format!("\"event-runtime\" : {runtime}"));
                fields.push(format!("\"pcnt-running\" : {pct:.2}"));
                let (mv, mu) = shadow_metric(events, readings, r, info.elapsed_ns)
                    .unwrap_or((0.0, String::new()));
                fields.push(format!("\"metric-value\" : {mv:.6}"));
                fields.push(format!("\"metric-unit\" : {}", json_str(&mu)));
                let _ = writeln!(out, "{{{}}}", fields.join(", "));
            }
        }
        Format::Separated(sep) => {
            for (i, r) in readings.iter().enumerate() {
                let ev = &events[r.event];
                if let Some(t) = interval {
                    let _ = write!(out, "{t:>16.9}{sep}");
                }
                if let Some(label) = scope_label(&r.scope, several) {
                    let _ = write!(out, "{label}{sep}");
                }
                let unit = unit_word(ev.unit());
                let variance = spread
                    .get(i)
                    .map(|v| format!("{v:.2}%{sep}"))
                    .unwrap_or_default();
                match shown(ev, r) {
                    Shown::Counted(v, c) => {
                        let (mv, mu) = shadow_metric(events, readings, r, info.elapsed_ns)
                            .map(|(v, u)| (format!("{v:.3}"), u))
                            .unwrap_or_default();
                        let _ = writeln!(
                            out,
                            "{}{sep}{unit}{sep}{}{sep}{variance}{}{sep}{:.2}{sep}{mv}{sep}{mu}",
                            count_text(ev.unit(), v),
                            ev.name,
                            c.time_running,
                            c.running_fraction() * 100.0
                        );
                    }
                    Shown::NotCounted(run) => {
                        let _ = writeln!(
                            out,
                            "<not counted>{sep}{unit}{sep}{}{sep}{variance}{run}{sep}0.00{sep}{sep}",
                            ev.name
                        );
                    }
                    Shown::NotSupported(_) => {
                        let _ = writeln!(
                            out,
                            "<not supported>{sep}{unit}{sep}{}{sep}{variance}0{sep}100.00{sep}{sep}",
                            ev.name
                        );
                    }
                }
            }
        }
        Format::Text => {
            if interval.is_none() {
                let runs = info
                    .runs
                    .map(|(n, _)| format!(" ({n} runs)"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "\n Performance counter stats for {}{runs}:\n",
                    info.what
                );
            }
            for (i, r) in readings.iter().enumerate() {
                let ev = &events[r.event];
                if let Some(t) = interval {
                    let _ = write!(out, "{t:>15.9} ");
                }
                if let Some(label) = scope_label(&r.scope, several) {
                    let _ = write!(out, "{label:<12} ");
                }
                let unit = unit_word(ev.unit());
                match shown(ev, r) {
                    Shown::Counted(v, c) => {
                        let mut line =
                            format!("{:>18} {unit:<4} {:<32}", count_text(ev.unit(), v), ev.name);
                        if let Some((mv, mu)) = shadow_metric(events, readings, r, info.elapsed_ns)
                        {
                            let _ = write!(line, " #  {mv:>8.3} {mu:<20}");
                        }
                        if let Some(v) = spread.get(i) {
                            let _ = write!(line, " ( +- {v:>5.2}% )");
                        }
                        if c.multiplexed() {
                            let _ = write!(line, "  ({:.2}%)", c.running_fraction() * 100.0);
                        }
                        let _ = writeln!(out, "{}", line.trim_end());
                    }
                    Shown::NotCounted(_) => {
                        let _ = writeln!(out, "{:>18} {unit:<4} {}", "<not counted>", ev.name);
                    }
                    Shown::NotSupported(reason) => {
                        let _ = writeln!(
                            out,
                            "{:>18} {unit:<4} {:<32} #  {reason}",
                            "<not supported>", ev.name
                        );
                    }
                }
            }
            if interval.is_none() {
                let secs = info.elapsed_ns as f64 / 1e9;
                match info.runs {
                    Some((_, stderr_ns)) => {
                        let rel = if info.elapsed_ns > 0 {
                            100.0 * stderr_ns / info.elapsed_ns as f64
                        } else {
                            0.0
                        };
                        let _ = writeln!(
                            out,
                            "\n{secs:>18.9} +- {:.9} seconds time elapsed  ( +- {rel:.2}% )\n",
                            stderr_ns / 1e9
                        );
                    }
                    None => {
                        let _ = writeln!(out, "\n{secs:>18.9} seconds time elapsed\n");
                    }
                }
            }
        }
    }
    out
}

/// perf's statistics of `-r N` runs: the mean of each count and the standard
/// error of that mean in percent of it (`stddev / sqrt(N) / mean`, perf's
/// `rel_stddev_stats`). `runs` are the totals of each run, in the same order.
pub fn mean_of_runs(runs: &[Vec<Reading>]) -> (Vec<Reading>, Vec<f64>) {
    let Some(first) = runs.first() else {
        return (Vec::new(), Vec::new());
    };
    let n = runs.len() as f64;
    let mut mean = Vec::with_capacity(first.len());
    let mut spread = Vec::with_capacity(first.len());
    for (i, r) in first.iter().enumerate() {
        let counters: Vec<CounterReading> =
            runs.iter().filter_map(|run| run.get(i)?.counter).collect();
        if counters.len() != runs.len() {
            mean.push(r.clone());
            spread.push(0.0);
            continue;
        }
        let avg = |f: &dyn Fn(&CounterReading) -> f64| counters.iter().map(f).sum::<f64>() / n;
        let scaled: Vec<f64> = counters.iter().map(|c| c.scaled().unwrap_or(0.0)).collect();
        let m = scaled.iter().sum::<f64>() / n;
        let rel = relative_standard_error(&scaled, m);
        let time_enabled = avg(&|c| c.time_enabled as f64).round() as u64;
        let time_running = avg(&|c| c.time_running as f64).round() as u64;
        // The raw count that scales to the mean over the mean times.
        let raw = if time_enabled > 0 {
            (m * time_running as f64 / time_enabled as f64).round() as u64
        } else {
            avg(&|c| c.raw as f64).round() as u64
        };
        mean.push(Reading {
            scope: r.scope.clone(),
            event: r.event,
            counter: Some(CounterReading {
                raw,
                time_enabled,
                time_running,
            }),
        });
        spread.push(rel);
    }
    (mean, spread)
}

/// The standard error of the mean of `values` (whose mean is `mean`), in
/// percent of the mean; 0 for fewer than two values or a zero mean.
pub fn relative_standard_error(values: &[f64], mean: f64) -> f64 {
    let n = values.len() as f64;
    if values.len() < 2 || mean == 0.0 {
        return 0.0;
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    100.0 * (variance / n).sqrt() / mean.abs()
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
                modes: Default::default(),
            },
            source: EventSource::PerfName,
        })
    }

    #[test]
    fn event_groups_keep_pmu_terms_and_spread_group_modifiers() {
        let g = |s: &str| parse_event_groups(s).unwrap();
        assert_eq!(
            g("task-clock,{cycles,cpu/event=0x51,umask=0x1/},r0151"),
            vec![
                vec!["task-clock".to_string()],
                vec![
                    "cycles".to_string(),
                    "cpu/event=0x51,umask=0x1/".to_string()
                ],
                vec!["r0151".to_string()],
            ]
        );
        assert_eq!(
            g("{cycles,instructions}:u,page-faults"),
            vec![
                vec!["cycles:u".to_string(), "instructions:u".to_string()],
                vec!["page-faults".to_string()],
            ]
        );
        assert_eq!(g(""), Vec::<Vec<String>>::new());
        for bad in ["{a,b", "a}", "{}", "{a,{b}}", "x{a}"] {
            assert!(parse_event_groups(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn perf_json_lines_have_perfs_keys_in_perfs_order() {
        let events = vec![ev("page-faults", "sw.page_faults")];
        let readings = vec![Reading {
            scope: Scope::Cpu { cpu: 1 },
            event: 0,
            counter: Some(CounterReading {
                raw: 12,
                time_enabled: 10,
                time_running: 10,
            }),
        }];
        let info = RunInfo::once("'system wide'", 10);
        assert_eq!(
            render(&Format::PerfJson, &events, &readings, &info, Some(0.5), &[]),
            "{\"interval\" : 0.500000000, \"cpu\" : \"1\", \"counter-value\" : \"12.000000\", \"unit\" : \"\", \"event\" : \"page-faults\", \"event-runtime\" : 10, \"pcnt-running\" : 100.00, \"metric-value\" : 0.000000, \"metric-unit\" : \"\"}\n"
        );
        assert_eq!(
            render(
                &Format::Separated(",".into()),
                &events,
                &readings,
                &info,
                Some(0.5),
                &[]
            ),
            "     0.500000000,CPU1,12,,page-faults,10,100.00,,\n"
        );
    }

    #[test]
    fn repeated_runs_give_the_mean_and_perfs_relative_standard_error() {
        let run = |raw: u64| {
            vec![Reading {
                scope: Scope::Process { pid: 1 },
                event: 0,
                counter: Some(CounterReading {
                    raw,
                    time_enabled: 100,
                    time_running: 100,
                }),
            }]
        };
        let (mean, spread) = mean_of_runs(&[run(90), run(100), run(110)]);
        assert_eq!(mean[0].counter.unwrap().raw, 100);
        // stddev 10, standard error 10/sqrt(3) = 5.77 % of 100.
        assert!((spread[0] - 5.7735).abs() < 1e-3, "{spread:?}");
        assert_eq!(relative_standard_error(&[5.0], 5.0), 0.0);
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
        let lines = stat_lines(&events, &readings, None, &[]);
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

        let info = RunInfo::once("'x'", 4_000_000);
        let text = render(&Format::Text, &events, &readings, &info, None, &[]);
        assert!(text.contains("2.00 msec task-clock"), "{text}");
        assert!(text.contains("0.500 CPUs utilized"), "{text}");
        // 600 faults over 2 ms of task clock = 300 K/sec, shown with the 50 % running share.
        let faults = text.lines().find(|l| l.contains("page-faults")).unwrap();
        assert!(
            faults.contains("300.000 K/sec") && faults.ends_with("(50.00%)"),
            "{text}"
        );
        assert!(text.contains("<not supported>      cycles"), "{text}");
        let csv = render(
            &Format::Separated(",".into()),
            &events,
            &readings,
            &info,
            None,
            &[],
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
