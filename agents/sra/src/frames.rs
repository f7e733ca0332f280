//! Where the run loop's frames come from: one sampler per node.
//!
//! When `hwqos-monitor` serves its live API (`[monitor] api_socket`, default
//! `/run/hwqos/monitor.sock`), the agent subscribes to the process scopes and
//! the events it analyses and opens no `perf_event` counter of its own — the
//! closed loop of thesis 5.4.3, where the node's one monitor feeds the
//! agents that act on its measurements. When the socket is absent, refuses
//! the connection, or the subscription drops, the agent samples on its own
//! ([`hwqos_pmu::sampler::Sampler::for_this_node`], as before) and tries the
//! monitor again every [`MONITOR_RETRY`]; once the monitor answers, its own
//! counters are closed.
//!
//! The application metric *x* comes from the agent's own sources
//! (`[[monitor.app_sources]]`) in both cases: they are merged into every
//! frame, whichever sampler counted it.

use crate::config::Config;
use hwqos_core::{Frame, Ticker, Timestamp};
use hwqos_pmu::api::{ApiClient, FrameFilter};
use hwqos_pmu::appmetric::AppMetrics;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long the agent samples on its own before it tries the monitor again.
pub const MONITOR_RETRY: Duration = Duration::from_secs(5);

/// Which sampler the current frames come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameOrigin {
    /// The node monitor's live API.
    Monitor,
    /// The agent's own `perf_event` sampler (no monitor reachable).
    OwnSampler,
}

impl FrameOrigin {
    /// The label `/metrics` shows (`monitor`, `sampler`).
    pub fn as_str(self) -> &'static str {
        match self {
            FrameOrigin::Monitor => "monitor",
            FrameOrigin::OwnSampler => "sampler",
        }
    }
}

/// A subscription read on its own thread, so the loop never blocks on the
/// socket for longer than it chooses.
struct MonitorFeed {
    frames: Receiver<Result<Frame, String>>,
}

/// The run loop's frames: from the monitor when it serves, else sampled here.
pub struct FrameSource {
    socket: Option<PathBuf>,
    events: Vec<String>,
    x_metric: String,
    targets: Vec<String>,
    sampler_config: SamplerConfig,
    interval: Duration,
    ticker: Ticker,
    app: Option<AppMetrics>,
    monitor: Option<MonitorFeed>,
    sampler: Option<Sampler>,
    next_try: Instant,
}

impl FrameSource {
    /// Connects to the monitor if it serves, else opens the agent's own
    /// sampler; starts the application metric sources.
    pub fn start(config: &Config) -> anyhow::Result<FrameSource> {
        let app = if config.monitor.app_sources.is_empty() {
            None
        } else {
            Some(AppMetrics::start(&config.monitor.app_sources)?)
        };
        let mut source = FrameSource {
            socket: config.monitor_socket().map(PathBuf::from),
            events: config.monitor.events.clone(),
            x_metric: config.monitor.x_metric.clone(),
            targets: config
                .monitor
                .targets
                .iter()
                .map(|t| t.to_string())
                .collect(),
            sampler_config: SamplerConfig {
                targets: config.monitor.targets.clone(),
                event_sets: vec![config.monitor.events.clone()],
                rescan_every: 10,
                ..SamplerConfig::default()
            },
            interval: Duration::from_millis(config.agent.sample_interval_ms),
            ticker: Ticker::new(Duration::from_millis(config.agent.sample_interval_ms))?,
            app,
            monitor: None,
            sampler: None,
            next_try: Instant::now(),
        };
        if !source.try_monitor() {
            source.open_sampler()?;
        }
        Ok(source)
    }

    /// Where frames come from now.
    pub fn origin(&self) -> FrameOrigin {
        if self.monitor.is_some() {
            FrameOrigin::Monitor
        } else {
            FrameOrigin::OwnSampler
        }
    }

    /// The next frame, with the application metrics merged in. Waits at most
    /// about one sample interval: `None` when no frame came in that time (the
    /// monitor samples at its own rate), so the caller keeps its loop going.
    pub fn next_frame(&mut self) -> anyhow::Result<Option<Frame>> {
        if self.monitor.is_none() && Instant::now() >= self.next_try && self.try_monitor() {
            // The monitor counts now: close the agent's own counters.
            self.sampler = None;
        }
        let frame = match &self.monitor {
            Some(feed) => match feed.frames.recv_timeout(self.interval) {
                Ok(Ok(frame)) => Some(frame),
                Err(RecvTimeoutError::Timeout) => None,
                Ok(Err(e)) => {
                    self.monitor_lost(&e)?;
                    None
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.monitor_lost("the subscription ended")?;
                    None
                }
            },
            None => {
                if self.sampler.is_none() {
                    self.open_sampler()?;
                }
                self.ticker.wait();
                self.sampler.as_mut().map(|s| s.sample(Timestamp::now()))
            }
        };
        Ok(frame.map(|mut f| {
            if let Some(app) = self.app.as_mut() {
                f.samples.extend(app.drain());
            }
            f
        }))
    }

    fn monitor_lost(&mut self, why: &str) -> anyhow::Result<()> {
        tracing::warn!(
            "lost the monitor's live API ({why}); sampling on our own, retrying the monitor in {:?}",
            MONITOR_RETRY
        );
        self.monitor = None;
        self.next_try = Instant::now() + MONITOR_RETRY;
        self.open_sampler()
    }

    fn open_sampler(&mut self) -> anyhow::Result<()> {
        let sampler = Sampler::for_this_node(self.sampler_config.clone())?;
        for u in sampler.unavailable() {
            tracing::warn!(event = %u.name, reason = %u.reason, "event not countable here");
        }
        tracing::info!(events = ?self.events, "sampling with our own perf_event counters");
        self.sampler = Some(sampler);
        Ok(())
    }

    /// Connects, checks what the monitor counts, subscribes. `false` (and
    /// the next try scheduled) when the monitor does not serve.
    fn try_monitor(&mut self) -> bool {
        self.next_try = Instant::now() + MONITOR_RETRY;
        let Some(socket) = self.socket.clone() else {
            return false;
        };
        match self.subscribe(&socket) {
            Ok(feed) => {
                self.monitor = Some(feed);
                true
            }
            Err(e) => {
                tracing::info!(socket = %socket.display(), "no monitor live API: {e}");
                false
            }
        }
    }

    fn subscribe(&self, socket: &std::path::Path) -> anyhow::Result<MonitorFeed> {
        let mut client = ApiClient::connect(socket)?;
        // A monitor that accepts but never answers must not hang the loop.
        client.set_read_timeout(Some(Duration::from_secs(10)))?;
        let status = client.status()?;
        let counted: Vec<&String> = status.event_sets.iter().flatten().collect();
        for event in &self.events {
            if !counted.contains(&event) {
                tracing::warn!(
                    event = %event,
                    "the monitor does not count `{event}` (its event sets: {:?}); the analysis goes without it until the monitor's event_sets include it",
                    status.event_sets
                );
            }
        }
        for t in &self.targets {
            if !status.targets.contains(t) {
                tracing::warn!(
                    "the monitor's targets {:?} do not include `{t}`; its frames hold only the processes it targets",
                    status.targets
                );
            }
        }
        let mut metrics = self.events.clone();
        metrics.push(self.x_metric.clone());
        let filter = FrameFilter::new(&["pid:*", "system"], &metrics)?;
        let sub = client.subscribe(filter)?;
        sub.set_read_timeout(None)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1024);
        std::thread::Builder::new()
            .name("sra-monitor-feed".into())
            .spawn(move || {
                for item in sub {
                    let stop = item.is_err();
                    if tx.send(item.map_err(|e| e.to_string())).is_err() || stop {
                        return;
                    }
                }
            })?;
        tracing::info!(
            socket = %socket.display(),
            monitor = %status.node,
            rate_hz = status.rate_hz,
            "reading frames from the monitor's live API; no counters of our own"
        );
        Ok(MonitorFeed { frames: rx })
    }
}
