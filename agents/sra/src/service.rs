//! The process around every long-running `hwqos-sra` command, from
//! [`hwqos_agent::lifecycle`]: SIGTERM/SIGINT stop it ([`StopSignals`]),
//! systemd hears READY/STOPPING ([`ServiceManager`]), and `/metrics` is
//! served from the agent's published [`AgentState`] on a small runtime of
//! its own while the work runs on the calling thread.

use crate::agent::{Agent, AgentState, SharedState};
use anyhow::Context as _;
use hwqos_agent::lifecycle::{bad_input, Heartbeat, ServiceManager, StopSignals};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Signals, service manager and the `/metrics` server of one command.
pub struct Service {
    rt: tokio::runtime::Runtime,
    signals: StopSignals,
    manager: Arc<ServiceManager>,
    stop_tx: tokio::sync::watch::Sender<bool>,
    shared: SharedState,
}

impl Service {
    /// Installs the signal handlers and, with `metrics_listen`, serves
    /// `/metrics` there (a port that cannot be bound is bad input).
    pub fn start(metrics_listen: Option<&str>) -> anyhow::Result<Service> {
        // First: the runtime's threads must inherit the blocked signals.
        let signals = StopSignals::install().context("taking SIGTERM/SIGINT/SIGHUP")?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("starting the runtime")?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let shared: SharedState = Arc::new(Mutex::new(AgentState::default()));
        if let Some(addr) = metrics_listen {
            let listener = rt
                .block_on(tokio::net::TcpListener::bind(addr))
                .map_err(|e| bad_input(format!("metrics_listen {addr}: {e}")))?;
            let local = listener.local_addr()?;
            eprintln!("metrics on {local}");
            rt.spawn(crate::metrics::serve(listener, shared.clone(), stop_rx));
        }
        Ok(Service {
            rt,
            signals,
            manager: ServiceManager::from_env(),
            stop_tx,
            shared,
        })
    }

    /// The stop and reload requests.
    pub fn signals(&self) -> &StopSignals {
        &self.signals
    }

    /// Whether SIGTERM or SIGINT arrived.
    pub fn stop_requested(&self) -> bool {
        self.signals.stop_requested()
    }

    /// The stop flag, for threads that watch it.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.signals.stop_flag()
    }

    /// The state `/metrics` shows.
    pub fn shared(&self) -> &SharedState {
        &self.shared
    }

    /// Publishes the agent's state to `/metrics`.
    pub fn publish(&self, a: &Agent) {
        *self.shared.lock().unwrap_or_else(|p| p.into_inner()) = a.state();
    }

    /// Start-up is done (systemd READY=1).
    pub fn ready(&self, status: &str) {
        self.manager.ready(status);
    }

    /// The watchdog heartbeat for the work loop.
    pub fn heartbeat(&self) -> Heartbeat {
        self.manager.heartbeat()
    }

    /// Stops the `/metrics` server; tells systemd the service is stopping.
    pub fn finish(self) {
        self.manager.stopping();
        let _ = self.stop_tx.send(true);
        self.rt.shutdown_timeout(Duration::from_secs(2));
    }
}
