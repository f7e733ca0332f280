//! `hwqos-monitor`: command-line glue around [`hwqos_monitor::service`].
//! Exit codes: 0 success, 1 runtime failure, 2 fatal configuration error.

/// The clap definitions (shared with the man-page generator in `deploy/package`).
use anyhow::Context;
use clap::Parser;
use hwqos_monitor::cli::Cli;
use hwqos_monitor::service::{self, Engine, MonitorError, RunOptions, SystemdNotifier};
use hwqos_monitor::{Config, ConfigError};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

const DEFAULT_CONFIG: &str = "/etc/hwqos/monitor.toml";

fn main() -> ExitCode {
    hwqos_agent::init_logging();
    let cli = Cli::parse();
    if let Err(e) = hwqos_pmu::backend::perf::raise_open_file_limit() {
        tracing::warn!("cannot raise the open-file limit (every counter is a file): {e}");
    }
    match real_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = e
                .downcast_ref::<MonitorError>()
                .map(MonitorError::exit_code)
                .or_else(|| e.downcast_ref::<ConfigError>().map(|_| 2))
                .unwrap_or(1);
            eprintln!("hwqos-monitor: {e:#}");
            ExitCode::from(code as u8)
        }
    }
}

fn load(engine: &Engine, cli: &Cli) -> Result<(Config, Option<PathBuf>), MonitorError> {
    let path = cli.config.clone().or_else(|| {
        Path::new(DEFAULT_CONFIG)
            .exists()
            .then(|| PathBuf::from(DEFAULT_CONFIG))
    });
    Ok((engine.load_config(path.as_deref(), cli.rate)?, path))
}

fn real_main(cli: Cli) -> anyhow::Result<()> {
    let engine = Engine::this_node();
    if cli.list_events {
        print!("{}", list_events());
        return Ok(());
    }
    let (config, path) = load(&engine, &cli)?;
    if cli.check_config {
        let name = path
            .as_deref()
            .map_or("<built-in defaults>".into(), |p| p.display().to_string());
        println!("{name}: configuration is valid");
        return Ok(());
    }
    if cli.once {
        let frame = service::sample_once(&config, &engine)?;
        println!(
            "{}",
            serde_json::to_string(&frame).context("encoding the frame")?
        );
        return Ok(());
    }
    service::run_with(
        config,
        path,
        engine,
        RunOptions {
            rate_override: cli.rate,
            notifier: Arc::new(SystemdNotifier::from_env()),
        },
    )?;
    Ok(())
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
