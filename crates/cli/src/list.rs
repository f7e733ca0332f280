//! `hwqos list` / `hwqos --list-events`: every event name the catalog knows on
//! this node (generic `hw.*`/`sw.*` names and the core PMUs' sysfs aliases),
//! probed by opening it once, with the reason for each one that is unavailable.

use anyhow::{Context, Result};
use hwqos_pmu::backend::CounterBackend;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::spec::{self, EventStatus};
use serde::Serialize;

/// Schema of the JSON lines `hwqos list --json` prints.
pub const LIST_SCHEMA: &str = "hwqos.events/1";

#[derive(Serialize)]
struct ListLine<'a> {
    schema: &'static str,
    #[serde(flatten)]
    status: &'a EventStatus,
}

/// Probes every listed name of `catalog` on `backend`.
pub fn statuses(catalog: &Catalog, backend: &mut dyn CounterBackend) -> Vec<EventStatus> {
    let names = catalog.listing_names();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    spec::check_availability(catalog, backend, &refs)
}

/// What `hwqos list FILTER…` keeps: perf's category keywords or name patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListFilter {
    /// `sw` / `software`: kernel software events.
    Software,
    /// `hw` / `hardware`: PMU events other than caches and TLBs (core PMU
    /// aliases from sysfs included).
    Hardware,
    /// `cache` / `hwcache`: cache and TLB events.
    Cache,
    /// `tracepoint`: hwqos counts no tracepoints, so this lists nothing.
    Tracepoint,
    /// A glob (`*`, `?`) matched against the whole name, or else a substring.
    Pattern(String),
}

impl ListFilter {
    /// Reads one `hwqos list` argument, like `perf list` does.
    pub fn parse(arg: &str) -> ListFilter {
        match arg {
            "sw" | "software" => ListFilter::Software,
            "hw" | "hardware" => ListFilter::Hardware,
            "cache" | "hwcache" => ListFilter::Cache,
            "tracepoint" => ListFilter::Tracepoint,
            other => ListFilter::Pattern(other.to_string()),
        }
    }

    /// Whether `status` passes this filter.
    pub fn keeps(&self, status: &EventStatus) -> bool {
        let metric = status.metric.as_ref().map(|m| m.as_str()).unwrap_or("");
        let cache = [
            "hw.l1d.", "hw.l1i.", "hw.l2.", "hw.llc.", "hw.dtlb.", "hw.itlb.", "hw.node.",
        ]
        .iter()
        .any(|p| metric.starts_with(p));
        match self {
            ListFilter::Software => metric.starts_with("sw."),
            ListFilter::Hardware => !metric.starts_with("sw.") && !cache,
            ListFilter::Cache => cache,
            ListFilter::Tracepoint => false,
            ListFilter::Pattern(p) if p.contains(['*', '?']) => {
                hwqos_core::compare::glob_match(p, &status.name)
            }
            ListFilter::Pattern(p) => status.name.contains(p.as_str()),
        }
    }
}

/// Keeps the statuses that pass any of `filters` (all of them when empty).
pub fn filter(statuses: Vec<EventStatus>, filters: &[ListFilter]) -> Vec<EventStatus> {
    if filters.is_empty() {
        return statuses;
    }
    statuses
        .into_iter()
        .filter(|s| filters.iter().any(|f| f.keeps(s)))
        .collect()
}

/// Renders the statuses as a table or JSON lines.
pub fn render(statuses: &[EventStatus], json: bool) -> Result<String> {
    if !json {
        let available = statuses.iter().filter(|s| s.available).count();
        return Ok(format!(
            "{}\n{available} of {} events available on this node\n",
            spec::render_event_table(statuses).trim_end(),
            statuses.len()
        ));
    }
    let mut out = String::new();
    for status in statuses {
        let line = ListLine {
            schema: LIST_SCHEMA,
            status,
        };
        out.push_str(&serde_json::to_string(&line).context("encoding the event list")?);
        out.push('\n');
    }
    Ok(out)
}

/// `hwqos list [--json] [FILTER…]` on this node.
pub fn run(json: bool, filters: &[String], out: &mut dyn std::io::Write) -> Result<()> {
    let catalog = Catalog::for_this_node();
    let mut backend = hwqos_pmu::backend::perf::PerfBackend::new();
    let filters: Vec<ListFilter> = filters.iter().map(|f| ListFilter::parse(f)).collect();
    let text = render(&filter(statuses(&catalog, &mut backend), &filters), json)?;
    out.write_all(text.as_bytes())
        .context("writing the event list")
}

/// `hwqos spec [-o FILE] [--no-probe]`: this node's target spec as JSON.
pub fn run_spec(args: &crate::args::SpecArgs, out: &mut dyn std::io::Write) -> Result<()> {
    let mut node_spec = spec::generate_for_this_node();
    if !args.no_probe {
        let mut backend = hwqos_pmu::backend::perf::PerfBackend::new();
        spec::probe_availability(&mut node_spec, &mut backend);
    }
    match &args.output {
        Some(path) => node_spec
            .write(path)
            .with_context(|| format!("writing the target spec to {}", path.display())),
        None => writeln!(out, "{}", node_spec.to_json_pretty()?).context("writing the target spec"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::MetricName;

    fn status(name: &str, metric: &'static str) -> EventStatus {
        EventStatus {
            name: name.into(),
            metric: Some(MetricName::from_static(metric)),
            available: true,
            reason: None,
            source: None,
        }
    }

    #[test]
    fn filters_follow_perf_list_keywords_and_globs() {
        let all = vec![
            status("sw.page_faults", "sw.page_faults"),
            status("hw.cycles", "hw.cycles"),
            status("hw.l1d.miss", "hw.l1d.miss"),
            status("cpu/cache-misses/", "hw.llc.miss"),
        ];
        let names = |f: &[&str]| -> Vec<String> {
            let f: Vec<ListFilter> = f.iter().map(|s| ListFilter::parse(s)).collect();
            filter(all.clone(), &f)
                .into_iter()
                .map(|s| s.name)
                .collect()
        };
        assert_eq!(names(&["sw"]), ["sw.page_faults"]);
        assert_eq!(names(&["hardware"]), ["hw.cycles"]);
        assert_eq!(names(&["cache"]), ["hw.l1d.miss", "cpu/cache-misses/"]);
        assert_eq!(names(&["tracepoint"]), Vec::<String>::new());
        assert_eq!(names(&["*fault*"]), ["sw.page_faults"]);
        assert_eq!(names(&["hw.l?d.*"]), ["hw.l1d.miss"]);
        assert_eq!(names(&["cycles"]), ["hw.cycles"]);
        assert_eq!(names(&["sw", "cycles"]), ["sw.page_faults", "hw.cycles"]);
        assert_eq!(names(&[]).len(), 4);
    }
}
