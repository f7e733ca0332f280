//! `hwqos-monitor`: command-line glue around [`hwqos_monitor::service`]; the
//! exit status follows `hwqos_agent::lifecycle` (0 success, 1 runtime
//! failure, 2 bad configuration).

use anyhow::Context;
use clap::Parser;
use hwqos_monitor::cli::Cli;
use hwqos_monitor::service::{self, RunOptions};
use hwqos_monitor::source::{self, NodeSources};
use hwqos_monitor::{Config, MonitorError};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const DEFAULT_CONFIG: &str = "/etc/hwqos/monitor.toml";

fn main() -> ExitCode {
    hwqos_agent::init_logging();
    let cli = Cli::parse();
    if let Err(e) = hwqos_pmu::backend::perf::raise_open_file_limit() {
        tracing::warn!("cannot raise the open-file limit (every counter is a file): {e}");
    }
    hwqos_agent::lifecycle::finish("hwqos-monitor", real_main(cli))
}

fn load(sources: &NodeSources, cli: &Cli) -> Result<(Config, Option<PathBuf>), MonitorError> {
    let path = cli.config.clone().or_else(|| {
        Path::new(DEFAULT_CONFIG)
            .exists()
            .then(|| PathBuf::from(DEFAULT_CONFIG))
    });
    Ok((sources.load_config(path.as_deref(), cli.rate)?, path))
}

fn real_main(cli: Cli) -> anyhow::Result<()> {
    if cli.list_events {
        print!("{}", list_events());
        return Ok(());
    }
    let sources = NodeSources::this_node();
    let (config, path) = load(&sources, &cli).map_err(MonitorError::into_agent_error)?;
    if cli.check_config {
        let name = path
            .as_deref()
            .map_or("<built-in defaults>".into(), |p| p.display().to_string());
        println!("{name}: configuration is valid");
        return Ok(());
    }
    if cli.once {
        let frame =
            source::sample_once(&config, &sources).map_err(MonitorError::into_agent_error)?;
        println!(
            "{}",
            serde_json::to_string(&frame).context("encoding the frame")?
        );
        return Ok(());
    }
    let options = RunOptions {
        rate_override: cli.rate,
        ..RunOptions::default()
    };
    service::run_with(config, path, sources, options).map_err(MonitorError::into_agent_error)
}

fn list_events() -> String {
    use hwqos_pmu::backend::perf::PerfBackend;
    use hwqos_pmu::catalog::Catalog;
    use hwqos_pmu::spec;
    let catalog = Catalog::for_this_node();
    let names = catalog.listing_names();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut backend = PerfBackend::for_this_node();
    let statuses = spec::check_availability(&catalog, &mut backend, &names);
    spec::render_event_table(&statuses)
}
