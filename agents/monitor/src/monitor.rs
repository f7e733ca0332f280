//! [`Monitor`], the embeddable part of the agent (it owns the sampling
//! thread), and [`MonitorHandle`], the cheap handle the API server, the
//! `/metrics` endpoint and an embedding service query it through.
//!
//! Locks: the frame database (`db`) is taken by the sampling thread for one
//! push per tick and by `window` requests and flushes; the live state
//! ([`crate::live`]) serves subscribers and scrapes without it.

use crate::config::Config;
use crate::counters::{Counters, WindowBuffer};
use crate::db::{self, FrameDb, WindowRange};
use crate::error::MonitorError;
use crate::live::{lock, LiveState};
use crate::openmetrics::SelfMetrics;
use crate::segments::{OutputStats, SegmentWriter};
use crate::source::{backend_name, NodeSources, SourceInfo};
use crate::state::{db_bytes, period_ns, Shared};
use crate::VERSION;
use hwqos_agent::lifecycle::Heartbeat;
use hwqos_core::ticker::Ticker;
use hwqos_core::{Frame, Timestamp};
use hwqos_pmu::api::{EventSets, MonitorStatus};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::broadcast;
use tracing::{info, warn};

/// Frames a `window` response decodes per turn of the database lock…
pub const WINDOW_BATCH_FRAMES: usize = 64;
/// …and about the most decoded bytes a turn takes (at least one frame): what a
/// window response holds at a time, however large the window.
pub const WINDOW_BATCH_BYTES: usize = 1 << 20;

/// A cheap, cloneable handle on a running monitor: what the API and the
/// endpoint use, and what an embedding service uses.
#[derive(Clone)]
pub struct MonitorHandle {
    pub(crate) shared: Arc<Shared>,
}

/// A running monitor: owns the sampling thread.
pub struct Monitor {
    handle: MonitorHandle,
    thread: Option<std::thread::JoinHandle<()>>,
    done: mpsc::Receiver<()>,
}

impl Monitor {
    /// Builds the frame source and starts the sampling thread.
    pub fn start(
        config: Config,
        config_path: Option<PathBuf>,
        rate_override: Option<f64>,
        sources: NodeSources,
    ) -> Result<Monitor, MonitorError> {
        Monitor::start_with_heartbeat(config, config_path, rate_override, sources, None)
    }

    /// [`Monitor::start`] with the service manager's watchdog fed by the
    /// sampling thread: one beat per tick, so a stuck sampler stops the pings.
    pub fn start_with_heartbeat(
        config: Config,
        config_path: Option<PathBuf>,
        rate_override: Option<f64>,
        sources: NodeSources,
        heartbeat: Option<Heartbeat>,
    ) -> Result<Monitor, MonitorError> {
        let source = sources.source_for(&config)?;
        // A flush interrupted by kill -9 leaves its temporary file behind (as
        // large as the database); nothing else would ever remove it.
        match db::remove_stale_temp_files(&config.output.dir) {
            Ok((removed, bytes)) if !removed.is_empty() => info!(
                "removed {} temporary files ({bytes} bytes) left in {} by an interrupted flush",
                removed.len(),
                config.output.dir.display()
            ),
            Ok(_) => {}
            Err(e) => warn!(
                "cannot remove stale temporary files in {}: {e}",
                config.output.dir.display()
            ),
        }
        let info = SourceInfo::of(source.as_ref());
        if !info.unavailable.is_empty() {
            warn!(
                "{} configured events are unavailable on this node and are not sampled (see `--list-events` or the API status)",
                info.unavailable.len()
            );
        }
        let mut ticker =
            Ticker::new(config.period()).map_err(|e| MonitorError::Ticker(e.to_string()))?;
        ticker.set_strategy(crate::sampling::sleep_strategy(&config));
        if let Some(max_block) = heartbeat.as_ref().and_then(Heartbeat::max_block) {
            if config.period() > max_block {
                warn!(
                    "the sampling period ({:?}) is longer than a quarter of the watchdog period; \
                     raise WatchdogSec= or rate_hz, or systemd may restart the monitor",
                    config.period()
                );
            }
        }
        let max_windows = config.api.max_windows.max(1);
        let node = hwqos_core::recording::node_name();
        let started = Timestamp::now();
        let shared = Arc::new(Shared {
            output: Mutex::new(SegmentWriter::new(&node, started.wall_ns)),
            output_stats: Mutex::new(OutputStats::default()),
            live: LiveState::new(
                config.api.client_queue,
                info.event_sets.len(),
                config.metrics.app_stale_s,
            ),
            node,
            started,
            config_path,
            rate_override,
            sources,
            db: Mutex::new(FrameDb::new(config.database.frames, db_bytes(&config))),
            period_ns: AtomicU64::new(period_ns(config.rate_hz)),
            queue: config.api.client_queue.max(1),
            config: RwLock::new(Arc::new(config)),
            source: Mutex::new(source),
            source_info: Mutex::new(info),
            counters: Counters::default(),
            metrics_addr: Mutex::new(None),
            stop: AtomicBool::new(false),
            windows: Arc::new(tokio::sync::Semaphore::new(max_windows)),
            max_windows,
        });
        let (done_tx, done) = mpsc::channel();
        let for_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name("hwqos-sampler".into())
            .spawn(move || {
                crate::sampling::sampling_loop(&for_thread, &mut ticker, heartbeat);
                let _ = done_tx.send(());
            })
            .map_err(MonitorError::io("cannot start the sampling thread"))?;
        Ok(Monitor {
            handle: MonitorHandle { shared },
            thread: Some(thread),
            done,
        })
    }

    /// A handle on this monitor.
    pub fn handle(&self) -> MonitorHandle {
        self.handle.clone()
    }

    /// Stops sampling. Waits for the sampling thread up to one period (plus a
    /// second); a thread still asleep on a long period is left to end with the process.
    pub fn stop(mut self) {
        self.handle.shared.stop.store(true, Ordering::SeqCst);
        let period = Duration::from_nanos(self.handle.shared.period_ns.load(Ordering::Relaxed));
        let wait = period.min(Duration::from_secs(10)) + Duration::from_secs(1);
        if self.done.recv_timeout(wait).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl MonitorHandle {
    /// The configuration in effect.
    pub fn config(&self) -> Arc<Config> {
        self.shared
            .config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A receiver of every frame from now on (lags, then errors, if not drained).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Frame>> {
        self.shared.live.subscribe()
    }

    /// Frames a subscriber may fall behind before it is dropped.
    pub fn client_queue(&self) -> usize {
        self.shared.queue
    }

    pub(crate) fn subscriber_added(&self) {
        self.shared
            .counters
            .subscribers
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn subscriber_removed(&self, dropped: bool) {
        self.shared
            .counters
            .subscribers
            .fetch_sub(1, Ordering::Relaxed);
        if dropped {
            self.shared
                .counters
                .dropped_subscribers
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Recent frames (see [`FrameDb::window`]), all decoded at once: for small
    /// windows; [`MonitorHandle::window_range`] and
    /// [`MonitorHandle::window_batch`] stream large ones in bounded memory.
    pub fn window(&self, seconds: Option<f64>, frames: Option<usize>) -> Vec<Arc<Frame>> {
        lock(&self.shared.db).window(seconds, frames)
    }

    /// The bounds of a window (see [`FrameDb::window_range`]).
    pub fn window_range(&self, seconds: Option<f64>, frames: Option<usize>) -> Option<WindowRange> {
        lock(&self.shared.db).window_range(seconds, frames)
    }

    /// The next frames of a window from sequence number `from` to `last`,
    /// decoded under the database lock at most [`WINDOW_BATCH_FRAMES`] frames
    /// and about [`WINDOW_BATCH_BYTES`] at a time, and counted in `buffer`.
    pub fn window_batch(
        &self,
        from: u64,
        last: u64,
        buffer: &mut WindowBuffer<'_>,
    ) -> Vec<(Arc<Frame>, usize)> {
        let (frames, _) =
            lock(&self.shared.db).window_batch(from, last, WINDOW_BATCH_FRAMES, WINDOW_BATCH_BYTES);
        frames
            .into_iter()
            .map(|f| {
                let n = db::frame_bytes(&f);
                buffer.add(n);
                (f, n)
            })
            .collect()
    }

    /// A permit to send one `window` response, or `None` when `[api]
    /// max_windows` are being sent (the refusal is counted).
    pub fn try_start_window(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let permit = self.shared.windows.clone().try_acquire_owned().ok();
        if permit.is_none() {
            self.shared
                .counters
                .windows_refused
                .fetch_add(1, Ordering::Relaxed);
        }
        permit
    }

    /// `[api] max_windows` as the monitor started with it.
    pub fn max_windows(&self) -> usize {
        self.shared.max_windows
    }

    /// An empty account of the bytes a `window` response holds.
    pub fn window_buffer(&self) -> WindowBuffer<'_> {
        WindowBuffer::new(&self.shared.counters)
    }

    /// Counts a `window` response cut off at its deadline.
    pub(crate) fn window_cut(&self) {
        self.shared
            .counters
            .windows_cut
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes all `window` responses hold now (decoded frames and encoded lines
    /// not yet written), and the most they held at once since start.
    pub fn window_buffered_bytes(&self) -> (usize, usize) {
        let c = &self.shared.counters;
        (
            c.window_buffered.load(Ordering::Relaxed),
            c.window_buffered_peak.load(Ordering::Relaxed),
        )
    }

    /// `window` requests refused because `[api] max_windows` were being sent,
    /// and `window` responses cut off at `[api] window_timeout_s`.
    pub fn windows_refused_and_cut(&self) -> (u64, u64) {
        let c = &self.shared.counters;
        (
            c.windows_refused.load(Ordering::Relaxed),
            c.windows_cut.load(Ordering::Relaxed),
        )
    }

    /// The current event sets and unavailable events.
    pub fn event_sets(&self) -> EventSets {
        let info = lock(&self.shared.source_info).clone();
        EventSets {
            sets: info.event_sets,
            unavailable: info.unavailable,
        }
    }

    /// Replaces the event sets rotated for every target (until the next reload).
    /// Blocks for up to one sampling tick.
    /// An empty list is refused: it would stop all counting.
    pub fn set_event_sets(&self, sets: Vec<Vec<String>>) -> Result<EventSets, String> {
        if sets.is_empty() {
            return Err(
                "no event sets given; at least one set is needed (an empty list would stop all counting)"
                    .into(),
            );
        }
        let check = self.shared.sources.check_event.clone();
        crate::config::check_event_sets(&sets, &move |n: &str| check(n))?;
        let mut source = lock(&self.shared.source);
        source.set_event_sets(sets).map_err(|e| e.to_string())?;
        let info = SourceInfo::of(source.as_ref());
        drop(source);
        self.shared.live.set_rotation(info.event_sets.len());
        *lock(&self.shared.source_info) = info;
        info!("event sets replaced through the API");
        Ok(self.event_sets())
    }

    /// The monitor's state.
    pub fn status(&self) -> MonitorStatus {
        let config = self.config();
        let info = lock(&self.shared.source_info).clone();
        let (frames_in_db, _) = self.shared.live.db_size();
        let latest = self.shared.live.latest();
        let c = &self.shared.counters;
        MonitorStatus {
            node: self.shared.node.clone(),
            version: VERSION.to_string(),
            backend: info.backend,
            rate_hz: config.rate_hz,
            started: self.shared.started,
            frames_sampled: c.frames_sampled.load(Ordering::Relaxed),
            missed_ticks: c.missed_ticks.load(Ordering::Relaxed),
            last_seq: latest.as_ref().map(|f| f.seq),
            last_lateness_ns: c.last_lateness_ns.load(Ordering::Relaxed),
            frames_in_db,
            db_capacity: config.database.frames,
            targets: config
                .targets
                .iter()
                .map(|t| t.select.to_string())
                .collect(),
            scopes_in_last_frame: latest.as_ref().map_or(0, |f| f.scopes().len()),
            event_sets: info.event_sets,
            unavailable: info.unavailable,
            multiplexed_samples: c.multiplexed_samples.load(Ordering::Relaxed),
            subscribers: c.subscribers.load(Ordering::Relaxed),
            dropped_subscribers: c.dropped_subscribers.load(Ordering::Relaxed),
            reloads: c.reloads.load(Ordering::Relaxed),
            metrics_listen: lock(&self.shared.metrics_addr).map(|a| a.to_string()),
            output_dir: config.output.dir.clone(),
        }
    }

    /// The OpenMetrics exposition text, from the live state: the newest
    /// frames the sampler published and the counters, never the database.
    pub fn render_metrics(&self) -> String {
        let config = self.config();
        let info = lock(&self.shared.source_info).clone();
        let (database_frames, database_bytes) = self.shared.live.db_size();
        let now = hwqos_core::time::monotonic_ns();
        let (exposition, app_series_held) = self.shared.live.exposition(now);
        let out = *lock(&self.shared.output_stats);
        let c = &self.shared.counters;
        let me = SelfMetrics {
            version: VERSION.to_string(),
            backend: backend_name(info.backend).to_string(),
            frames_sampled: c.frames_sampled.load(Ordering::Relaxed),
            missed_ticks: c.missed_ticks.load(Ordering::Relaxed),
            last_lateness_ns: c.last_lateness_ns.load(Ordering::Relaxed),
            max_lateness_ns: c.max_lateness_ns.load(Ordering::Relaxed),
            dropped_subscribers: c.dropped_subscribers.load(Ordering::Relaxed),
            subscribers: c.subscribers.load(Ordering::Relaxed),
            multiplexed_samples: c.multiplexed_samples.load(Ordering::Relaxed),
            database_frames,
            database_bytes,
            unavailable_events: info.unavailable.len(),
            period_s: 1.0 / config.rate_hz,
            reloads: c.reloads.load(Ordering::Relaxed),
            last_frame_wall_ns: self.shared.live.latest().map(|f| f.time.wall_ns),
            flushed_frames: out.frames_written,
            flushed_bytes: out.bytes_written,
            flush_lost_frames: out.frames_lost,
            app_series_held,
        };
        exposition.render(&me)
    }

    pub(crate) fn set_metrics_addr(&self, addr: SocketAddr) {
        *lock(&self.shared.metrics_addr) = Some(addr);
    }

    /// Successful reloads since start (for `STATUS=` lines).
    pub(crate) fn reloads(&self) -> u64 {
        self.shared.counters.reloads.load(Ordering::Relaxed)
    }

    /// Configured events this node cannot count.
    pub(crate) fn unavailable_events(&self) -> usize {
        lock(&self.shared.source_info).unavailable.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::FrameSource;
    use hwqos_core::{MetricName, Sample, Scope};
    use hwqos_pmu::api::UnavailableEvent;
    use hwqos_pmu::backend::BackendKind;
    use hwqos_pmu::PmuError;

    /// One gauge per tick.
    struct OneGauge;

    impl FrameSource for OneGauge {
        fn sample(&mut self, time: Timestamp) -> Frame {
            Frame {
                seq: 0,
                time,
                interval_ns: 5_000_000,
                samples: vec![Sample::gauge(
                    time,
                    Scope::Cpu { cpu: 3 },
                    MetricName::from_static("os.cpu.util"),
                    0.5,
                )],
                labels: vec![],
            }
        }
        fn event_sets(&self) -> Vec<Vec<String>> {
            vec![vec!["sw.page_faults".into()]]
        }
        fn set_event_sets(&mut self, _: Vec<Vec<String>>) -> Result<(), PmuError> {
            Ok(())
        }
        fn unavailable(&self) -> Vec<UnavailableEvent> {
            Vec::new()
        }
        fn backend(&self) -> BackendKind {
            BackendKind::Simulated
        }
    }

    #[test]
    fn a_scrape_and_status_never_wait_for_the_database() {
        let out = tempfile::tempdir().unwrap();
        let mut config = Config {
            rate_hz: 200.0,
            event_sets: vec![vec!["sw.page_faults".into()]],
            ..Config::default()
        };
        config.output.dir = out.path().to_path_buf();
        let sources = NodeSources {
            make_source: Arc::new(|_: &Config| Ok(Box::new(OneGauge) as Box<dyn FrameSource>)),
            check_event: Arc::new(|_: &str| Ok(())),
        };
        let monitor = Monitor::start(config, None, None, sources).unwrap();
        let h = monitor.handle();
        let start = std::time::Instant::now();
        while h.status().frames_in_db < 3 {
            assert!(start.elapsed() < Duration::from_secs(30), "no frames");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Hold the database as a long `window` request or flush would; the
        // scrape and the status come from the live state all the same.
        let held = lock(&h.shared.db);
        let (tx, rx) = mpsc::channel();
        let scraper = h.clone();
        std::thread::spawn(move || {
            let _ = tx.send((scraper.render_metrics(), scraper.status().frames_in_db));
        });
        // A generous bound, not a speed assertion: with the database lock
        // taken by a scrape this would never arrive.
        let (text, frames) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the scrape waited for the database lock");
        drop(held);
        assert!(
            text.contains("hwqos_os_cpu_util_ratio{scope=\"cpu\",cpu=\"3\"} 0.5\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!("hwqos_monitor_database_frames {frames}\n")),
            "{text}"
        );
        monitor.stop();
    }

    #[test]
    fn the_exposition_keeps_only_the_rotation_horizon() {
        let live = LiveState::new(4, 1, 0.0);
        for seq in 0..100 {
            live.publish(Arc::new(Frame {
                seq,
                ..Frame::default()
            }));
        }
        let keep = crate::live::stale_after(1) as usize + 1;
        assert_eq!(lock(live.recent_for_tests()).len(), keep);
        live.set_rotation(20);
        for seq in 100..200 {
            live.publish(Arc::new(Frame {
                seq,
                ..Frame::default()
            }));
        }
        assert_eq!(
            lock(live.recent_for_tests()).len(),
            crate::live::stale_after(20) as usize + 1
        );
        assert_eq!(live.latest().map(|f| f.seq), Some(199));
    }
}
