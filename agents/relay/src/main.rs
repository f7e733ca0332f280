//! `hwqos-relay`: glue between the command line, the agent lifecycle
//! ([`hwqos_agent::lifecycle`]: exit statuses, located configuration errors,
//! sd_notify, the watchdog) and [`hwqos_relay::service`].

use anyhow::Context;
use clap::Parser;
use hwqos_agent::lifecycle::{self, Heartbeat, ServiceManager};
use hwqos_relay::cli::Cli;
use hwqos_relay::{Config, Running};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    hwqos_agent::init_logging();
    lifecycle::finish("hwqos-relay", run(Cli::parse()))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::load(&cli.config)?;
    if cli.check_config {
        println!("{}: ok", cli.config.display());
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(serve(&cli.config, config))
}

/// How often the work loop passes when no signal comes and no watchdog
/// asks for more (each pass checks the accept loop and feeds the watchdog).
const IDLE_PASS: Duration = Duration::from_secs(1);

async fn serve(path: &Path, config: Config) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let manager = ServiceManager::from_env();
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
    manager.ready(&format!("relaying on {}", running.listen_addr));
    let mut heartbeat = manager.heartbeat();
    let result = work_loop(
        path,
        &running,
        &manager,
        &mut heartbeat,
        (&mut hup, &mut term, &mut int),
    )
    .await;
    manager.stopping();
    tracing::info!(
        open = running.open_connections(),
        "stopping: draining connections"
    );
    running.shutdown().await;
    result
}

type Signals<'a> = (
    &'a mut tokio::signal::unix::Signal,
    &'a mut tokio::signal::unix::Signal,
    &'a mut tokio::signal::unix::Signal,
);

/// The relay's work loop on the runtime: reloads on SIGHUP, ends on
/// SIGTERM/SIGINT, and on every pass checks that the accept loop still runs
/// before it feeds the watchdog. A stuck runtime or a dead accept loop stops
/// the pings; nothing else pings.
async fn work_loop(
    path: &Path,
    running: &Running,
    manager: &ServiceManager,
    heartbeat: &mut Heartbeat,
    (hup, term, int): Signals<'_>,
) -> anyhow::Result<()> {
    let pass = heartbeat.max_block().unwrap_or(IDLE_PASS).min(IDLE_PASS);
    let mut tick = tokio::time::interval(pass);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if !running.is_accepting() {
            anyhow::bail!("the accept loop ended unexpectedly");
        }
        heartbeat.beat();
        tokio::select! {
            _ = hup.recv() => {
                manager.reloading();
                match Config::load(path) {
                    Ok(c) => running.reload(c),
                    Err(e) => tracing::error!("reload rejected, keeping the running configuration: {e}"),
                }
                manager.ready(&format!("relaying on {}", running.listen_addr));
            }
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            _ = tick.tick() => {}
        }
    }
}
