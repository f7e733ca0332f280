//! The monitor as a service: [`run`] starts a [`Monitor`], the live API socket
//! and the `/metrics` endpoint (hwqos-agent's bounded server), tells the
//! service manager (`hwqos_agent::lifecycle::ServiceManager`) when it is
//! ready, reloading and stopping, and handles the signals: SIGHUP reload,
//! SIGUSR1 flush, SIGTERM/SIGINT clean shutdown (with a final flush).
//!
//! The systemd watchdog is not fed here: the sampling thread beats it once per
//! tick ([`Monitor::start_with_heartbeat`]), so a stuck sampler stops the pings.

use crate::api_server;
use crate::config::Config;
use crate::error::MonitorError;
use crate::monitor::{Monitor, MonitorHandle};
use crate::source::NodeSources;
use crate::VERSION;
use hwqos_agent::lifecycle::ServiceManager;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{error, info};

/// Options of [`run`] besides the config.
pub struct RunOptions {
    /// `--rate`: overrides `rate_hz` (also across reloads).
    pub rate_override: Option<f64>,
    /// The service manager told about readiness, reloads and shutdown, and
    /// whose watchdog the sampling thread feeds; without `$NOTIFY_SOCKET` it
    /// does nothing.
    pub service_manager: Arc<ServiceManager>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            rate_override: None,
            service_manager: ServiceManager::from_env(),
        }
    }
}

/// Runs the monitor as a service until SIGTERM or SIGINT, with this node's
/// counters. Configuration errors are [`MonitorError::Config`] (exit status 2).
pub fn run(config_path: &Path, options: RunOptions) -> Result<(), MonitorError> {
    let sources = NodeSources::this_node();
    let config = sources.load_config(Some(config_path), options.rate_override)?;
    run_with(config, Some(config_path.to_path_buf()), sources, options)
}

/// [`run`] with a given configuration and frame sources.
pub fn run_with(
    config: Config,
    config_path: Option<PathBuf>,
    sources: NodeSources,
    options: RunOptions,
) -> Result<(), MonitorError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hwqos-monitor-io")
        .enable_all()
        .build()
        .map_err(MonitorError::io("cannot start the async runtime"))?;
    runtime.block_on(serve(config, config_path, sources, options))
}

async fn serve(
    config: Config,
    config_path: Option<PathBuf>,
    sources: NodeSources,
    options: RunOptions,
) -> Result<(), MonitorError> {
    use tokio::signal::unix::{signal, SignalKind};
    // Signals first: SIGHUP's default action would kill the process.
    let sig = |kind: SignalKind, name: &str| {
        signal(kind).map_err(MonitorError::io(format!("cannot handle {name}")))
    };
    let mut hup = sig(SignalKind::hangup(), "SIGHUP")?;
    let mut usr1 = sig(SignalKind::user_defined1(), "SIGUSR1")?;
    let mut term = sig(SignalKind::terminate(), "SIGTERM")?;
    let mut int = sig(SignalKind::interrupt(), "SIGINT")?;

    let manager = options.service_manager.clone();
    let monitor = Monitor::start_with_heartbeat(
        config.clone(),
        config_path,
        options.rate_override,
        sources,
        Some(manager.heartbeat()),
    )?;
    let handle = monitor.handle();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();

    let mut socket_path = None;
    if config.api.enabled {
        let listener = api_server::bind(&config.api.socket)?;
        info!("live API on {}", config.api.socket.display());
        socket_path = Some(config.api.socket.clone());
        tasks.push(tokio::spawn(api_server::serve(
            listener,
            handle.clone(),
            stop_rx.clone(),
        )));
    }
    if config.metrics.enabled {
        let addr = config.metrics.addr().ok_or_else(|| MonitorError::Io {
            context: "metrics.listen".into(),
            source: std::io::Error::other("invalid address"),
        })?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(MonitorError::io(format!(
                "cannot listen on {addr} for /metrics"
            )))?;
        let bound = listener
            .local_addr()
            .map_err(MonitorError::io("metrics listener address"))?;
        handle.set_metrics_addr(bound);
        info!("OpenMetrics on http://{bound}/metrics");
        // hwqos-agent's server bounds its connections (header-read timeout,
        // lifetime, connection cap); each scrape renders from the live state.
        let for_scrape = handle.clone();
        let render: hwqos_agent::RenderMetrics = Arc::new(move || for_scrape.render_metrics());
        tasks.push(tokio::spawn(hwqos_agent::serve_metrics(
            listener,
            render,
            stop_rx.clone(),
        )));
    }

    // STATUS= first, then READY=1 with it: `systemctl status` shows the line
    // from the moment the unit is up.
    let status = running_status(&handle);
    manager.status(&status);
    manager.ready(&status);
    info!(rate_hz = config.rate_hz, "hwqos-monitor {VERSION} sampling");
    loop {
        tokio::select! {
            _ = hup.recv() => {
                manager.reloading();
                manager.status("reloading the configuration");
                let h = handle.clone();
                let outcome = match tokio::task::spawn_blocking(move || h.reload()).await {
                    Ok(Ok(())) => running_status(&handle),
                    Ok(Err(e)) => {
                        error!("configuration reload rejected, keeping the running configuration: {e}");
                        format!("reload rejected, running the previous configuration: {e}")
                    }
                    Err(e) => {
                        error!("configuration reload failed: {e}");
                        format!("reload failed, running the previous configuration: {e}")
                    }
                };
                manager.ready(&one_line(&outcome));
            }
            _ = usr1.recv() => {
                let h = handle.clone();
                match tokio::task::spawn_blocking(move || h.flush()).await {
                    Ok(Ok(paths)) => info!("SIGUSR1: flushed to {}", show_paths(&paths)),
                    Ok(Err(e)) => error!("SIGUSR1 flush failed: {e}"),
                    Err(e) => error!("SIGUSR1 flush failed: {e}"),
                }
            }
            _ = term.recv() => { info!("SIGTERM: shutting down"); break; }
            _ = int.recv() => { info!("SIGINT: shutting down"); break; }
        }
    }

    manager.stopping();
    manager.status("stopping: final flush and shutdown");
    let _ = stop_tx.send(true);
    tokio::task::spawn_blocking(move || monitor.stop())
        .await
        .map_err(|e| MonitorError::Io {
            context: "stopping the sampler".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
    }
    if let Some(path) = socket_path {
        api_server::remove_socket(&path);
    }
    if handle.config().output.flush_on_exit {
        let h = handle.clone();
        match tokio::task::spawn_blocking(move || h.flush()).await {
            Ok(Ok(paths)) => info!("final flush: flushed to {}", show_paths(&paths)),
            Ok(Err(e)) => {
                error!("final flush failed: {e}");
                return Err(MonitorError::Flush(e));
            }
            Err(e) => error!("final flush failed: {e}"),
        }
    }
    Ok(())
}

/// Paths for a log line (no Rust debug formatting).
fn show_paths(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

/// `STATUS=` is one line of the notify datagram.
fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}

/// The `STATUS=` line while sampling.
fn running_status(handle: &MonitorHandle) -> String {
    let config = handle.config();
    format!(
        "sampling at {} Hz, {} event sets, {} events unavailable, {} reloads",
        config.rate_hz,
        config.event_sets.len(),
        handle.unavailable_events(),
        handle.reloads()
    )
}
