//! `hwqos-relay`: command-line and service-manager glue around
//! [`hwqos_relay::service`]. Exit codes: 0 success (SIGTERM included), 1
//! runtime failure, 2 configuration error.

use clap::Parser;
use hwqos_relay::cli::Cli;
use hwqos_relay::{Config, ConfigError};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    hwqos_agent::init_logging();
    let cli = Cli::parse();
    let config = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hwqos-relay: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check_config {
        println!("{}: ok", cli.config.display());
        return ExitCode::SUCCESS;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hwqos-relay: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(cli.config, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hwqos-relay: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn notify(state: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::debug!("sd_notify: {e}");
    }
}

async fn run(path: PathBuf, config: Config) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let running = hwqos_relay::start(config).await?;
    tracing::info!(
        listen = %running.listen_addr,
        metrics = ?running.metrics_addr,
        "hwqos-relay listening"
    );
    // Machine-readable for scripts and tests (ports may be 0 in the config).
    eprintln!("listening on {}", running.listen_addr);
    if let Some(m) = running.metrics_addr {
        eprintln!("metrics on {m}");
    }
    notify(&[sd_notify::NotifyState::Ready]);
    let watchdog = sd_notify::watchdog_enabled().map(|d| {
        tokio::spawn(async move {
            let mut t = tokio::time::interval(d / 2);
            loop {
                t.tick().await;
                notify(&[sd_notify::NotifyState::Watchdog]);
            }
        })
    });
    loop {
        tokio::select! {
            _ = hup.recv() => match Config::load(&path) {
                Ok(c) => running.reload(c),
                Err(e @ (ConfigError::Read { .. } | ConfigError::Parse { .. } | ConfigError::Invalid { .. })) => {
                    tracing::error!("reload rejected, keeping the running configuration: {e}");
                }
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    notify(&[sd_notify::NotifyState::Stopping]);
    tracing::info!(
        open = running.open_connections(),
        "stopping: draining connections"
    );
    running.shutdown().await;
    if let Some(w) = watchdog {
        w.abort();
    }
    Ok(())
}
