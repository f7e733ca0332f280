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

/// `hwqos list [--json]` on this node.
pub fn run(json: bool, out: &mut dyn std::io::Write) -> Result<()> {
    let catalog = Catalog::for_this_node();
    let mut backend = hwqos_pmu::backend::perf::PerfBackend::new();
    let text = render(&statuses(&catalog, &mut backend), json)?;
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
