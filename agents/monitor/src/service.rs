//! The monitor service: a sampling thread driven by the drift-free ticker feeds
//! the frame database, the live subscribers and the OpenMetrics exposition;
//! [`run`] adds the API socket, the `/metrics` endpoint and the signals
//! (SIGHUP reload, SIGUSR1 flush, SIGTERM/SIGINT clean shutdown).
//!
//! Everything is usable as a library: [`Monitor::start`] runs the sampling
//! thread with any [`FrameSource`] (the shipped one is the `hwqos-pmu` sampler,
//! see [`Engine::this_node`]), and [`MonitorHandle`] offers what the API offers.

use crate::config::{self, Config, ConfigError};
use crate::db::{self, FlushError, FrameDb, WindowRange};
use crate::openmetrics::{AppHold, Exposition, SelfMetrics};
use crate::segments::{FlushReport, OutputStats, SegmentWriter};
use crate::{api_server, openmetrics};
use hwqos_core::recording::{CounterClass, RecordedBackend, RecordingHeader};
use hwqos_core::ticker::Ticker;
use hwqos_core::{Frame, Timestamp};
use hwqos_pmu::api::{EventSets, MonitorStatus, UnavailableEvent};
use hwqos_pmu::backend::perf::PerfBackend;
use hwqos_pmu::backend::BackendKind;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::Sampler;
use hwqos_pmu::target::Resolver;
use hwqos_pmu::PmuError;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tracing::{error, info, warn};

/// The version reported in status, hello lines and recordings.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Something that produces one frame per tick (the sampler, or a test double).
pub trait FrameSource: Send {
    /// Takes one tick's measurements.
    fn sample(&mut self, time: Timestamp) -> Frame;
    /// The event sets being rotated (unavailable events removed).
    fn event_sets(&self) -> Vec<Vec<String>>;
    /// Replaces the event sets; on error the old ones stay.
    fn set_event_sets(&mut self, sets: Vec<Vec<String>>) -> Result<(), PmuError>;
    /// Configured events this node cannot count.
    fn unavailable(&self) -> Vec<UnavailableEvent>;
    fn backend(&self) -> BackendKind;
}

/// The shipped frame source: the `hwqos-pmu` sampler.
pub struct SamplerSource {
    sampler: Sampler,
}

impl FrameSource for SamplerSource {
    fn sample(&mut self, time: Timestamp) -> Frame {
        self.sampler.sample(time)
    }
    fn event_sets(&self) -> Vec<Vec<String>> {
        self.sampler.event_sets()
    }
    fn set_event_sets(&mut self, sets: Vec<Vec<String>>) -> Result<(), PmuError> {
        self.sampler.set_event_sets(sets)
    }
    fn unavailable(&self) -> Vec<UnavailableEvent> {
        self.sampler.unavailable().to_vec()
    }
    fn backend(&self) -> BackendKind {
        self.sampler.backend_kind()
    }
}

/// Builds a frame source for a configuration.
pub type SourceFactory = dyn Fn(&Config) -> Result<Box<dyn FrameSource>, PmuError> + Send + Sync;

/// Checks an event name against the catalog (`Err(reason)` when unknown).
pub type EventChecker = dyn Fn(&str) -> Result<(), String> + Send + Sync;

/// Where frames come from and how event names are checked.
#[derive(Clone)]
pub struct Engine {
    pub make_source: Arc<SourceFactory>,
    pub check_event: Arc<EventChecker>,
}

impl Engine {
    /// The real thing: this node's event catalog, `perf_event` counters, `/proc`.
    pub fn this_node() -> Engine {
        let catalog = Arc::new(Catalog::for_this_node());
        let for_check = catalog.clone();
        Engine {
            make_source: Arc::new(move |config: &Config| {
                let sampler = Sampler::new(
                    config.sampler_config(),
                    &catalog,
                    Box::new(PerfBackend::for_this_node()),
                    Resolver::for_this_node().excluding_pid(Some(std::process::id())),
                )?;
                Ok(Box::new(SamplerSource { sampler }) as Box<dyn FrameSource>)
            }),
            check_event: Arc::new(move |name: &str| match for_check.resolve(name) {
                Err(PmuError::UnknownEvent { reason, .. }) => Err(reason),
                // Known but not countable here: the sampler drops and lists it.
                _ => Ok(()),
            }),
        }
    }

    /// Loads and validates a config file (the built-in defaults when `path` is
    /// `None`), applying a `--rate` override.
    pub fn load_config(
        &self,
        path: Option<&Path>,
        rate_override: Option<f64>,
    ) -> Result<Config, ConfigError> {
        let check = self.check_event.clone();
        let check = move |n: &str| check(n);
        let mut config = match path {
            Some(path) => Config::load(path, &check)?,
            None => Config::parse("", Path::new("<built-in defaults>"), &check)?,
        };
        if let Some(rate) = rate_override {
            config::check_rate(rate).map_err(|message| ConfigError {
                file: PathBuf::from("--rate"),
                position: None,
                key: None,
                message,
            })?;
            config.rate_hz = rate;
        }
        Ok(config)
    }
}

/// Why the monitor stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// A fatal configuration error (exit code 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The configuration is well-formed but the sampler rejects it (exit code 2).
    #[error("configuration rejected by the sampler: {0}")]
    Rejected(PmuError),
    #[error("cannot start sampling: {0}")]
    Source(PmuError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("sampling clock: {0}")]
    Ticker(String),
    #[error(transparent)]
    Flush(#[from] FlushError),
}

impl MonitorError {
    /// The process exit code: 2 for configuration errors, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            MonitorError::Config(_) | MonitorError::Rejected(_) => 2,
            _ => 1,
        }
    }

    fn from_source(e: PmuError) -> MonitorError {
        match e {
            PmuError::UnknownEvent { .. } | PmuError::SetTooLarge { .. } | PmuError::Config(_) => {
                MonitorError::Rejected(e)
            }
            other => MonitorError::Source(other),
        }
    }

    fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> MonitorError {
        let context = context.into();
        move |source| MonitorError::Io { context, source }
    }
}

/// Hooks for a service manager (sd-notify READY/RELOADING/STOPPING/WATCHDOG).
pub trait Notifier: Send + Sync {
    /// The sampler, the API socket and `/metrics` are up.
    fn ready(&self) {}
    /// A reload (SIGHUP) starts; [`Notifier::ready`] follows when it is done.
    fn reloading(&self) {}
    /// A clean shutdown starts.
    fn stopping(&self) {}
    /// Called every [`Notifier::watchdog_interval`] while the sampling thread
    /// makes progress (a stuck sampler stops the pings).
    fn watchdog(&self) {}
    /// A one-line, human-readable state (`systemctl status` shows it).
    fn status(&self, _text: &str) {}
    /// How often [`Notifier::watchdog`] is wanted; `None`: never.
    fn watchdog_interval(&self) -> Option<Duration> {
        None
    }
}

/// A notifier that does nothing.
pub struct NoNotifier;
impl Notifier for NoNotifier {}

/// Notifies systemd through `$NOTIFY_SOCKET` (sd_notify(3), `Type=notify`
/// units): `READY=1`, `RELOADING=1` with `MONOTONIC_USEC`, `STOPPING=1`,
/// `STATUS=` lines, and `WATCHDOG=1` at half of `$WATCHDOG_USEC` when the
/// watchdog is enabled for this process (`$WATCHDOG_PID` unset or ours).
/// Without `$NOTIFY_SOCKET` every call does nothing.
pub struct SystemdNotifier {
    watchdog_usec: Option<Duration>,
    send_failed: AtomicBool,
}

impl SystemdNotifier {
    /// Reads `$WATCHDOG_USEC`/`$WATCHDOG_PID`; `$NOTIFY_SOCKET` is read on
    /// every message.
    pub fn from_env() -> SystemdNotifier {
        SystemdNotifier {
            watchdog_usec: sd_notify::watchdog_enabled().filter(|d| !d.is_zero()),
            send_failed: AtomicBool::new(false),
        }
    }

    fn send(&self, states: &[sd_notify::NotifyState<'_>]) {
        if let Err(e) = sd_notify::notify(states) {
            // Once: a broken notify socket must not flood the log every ping.
            if !self.send_failed.swap(true, Ordering::Relaxed) {
                warn!("cannot notify the service manager: {e}");
            }
        }
    }
}

impl Notifier for SystemdNotifier {
    fn ready(&self) {
        self.send(&[sd_notify::NotifyState::Ready]);
    }
    fn reloading(&self) {
        use sd_notify::NotifyState;
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[NotifyState::Reloading, now]),
            Err(e) => {
                warn!("cannot read CLOCK_MONOTONIC for RELOADING=1: {e}");
                self.send(&[NotifyState::Reloading]);
            }
        }
    }
    fn stopping(&self) {
        self.send(&[sd_notify::NotifyState::Stopping]);
    }
    fn watchdog(&self) {
        self.send(&[sd_notify::NotifyState::Watchdog]);
    }
    fn status(&self, text: &str) {
        // STATUS= is one line of the datagram.
        let line = text.replace('\n', " ");
        self.send(&[sd_notify::NotifyState::Status(&line)]);
    }
    fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog_usec.map(|d| d / 2)
    }
}

#[derive(Default)]
struct Counters {
    frames_sampled: AtomicU64,
    missed_ticks: AtomicU64,
    last_lateness_ns: AtomicU64,
    max_lateness_ns: AtomicU64,
    multiplexed_samples: AtomicU64,
    dropped_subscribers: AtomicU64,
    subscribers: AtomicUsize,
    reloads: AtomicU64,
    last_tick_mono_ns: AtomicU64,
    /// Decoded frames and encoded lines that `window` responses hold now…
    window_buffered: AtomicUsize,
    /// …and the most they held at once.
    window_buffered_peak: AtomicUsize,
    windows_refused: AtomicU64,
    windows_cut: AtomicU64,
}

/// What the source reports about itself, cached so status never waits for a tick.
#[derive(Clone, Debug)]
struct SourceInfo {
    event_sets: Vec<Vec<String>>,
    unavailable: Vec<UnavailableEvent>,
    backend: BackendKind,
}

impl SourceInfo {
    fn of(source: &dyn FrameSource) -> SourceInfo {
        SourceInfo {
            event_sets: source.event_sets(),
            unavailable: source.unavailable(),
            backend: source.backend(),
        }
    }
}

struct Shared {
    node: String,
    started: Timestamp,
    config_path: Option<PathBuf>,
    rate_override: Option<f64>,
    engine: Engine,
    config: RwLock<Arc<Config>>,
    db: Mutex<FrameDb>,
    source: Mutex<Box<dyn FrameSource>>,
    source_info: Mutex<SourceInfo>,
    frames_tx: broadcast::Sender<Arc<Frame>>,
    queue: usize,
    counters: Counters,
    metrics_addr: Mutex<Option<SocketAddr>>,
    period_ns: AtomicU64,
    stop: AtomicBool,
    /// The append-only recordings; its lock also makes flushes one at a time.
    output: Mutex<SegmentWriter>,
    /// Application metrics kept on `/metrics` for `[metrics] app_stale_s`.
    app_hold: Mutex<AppHold>,
    /// One permit per `window` response being sent (`[api] max_windows`).
    windows: Arc<tokio::sync::Semaphore>,
    max_windows: usize,
}

/// Frames a `window` response decodes per turn of the database lock…
pub const WINDOW_BATCH_FRAMES: usize = 64;
/// …and about the most decoded bytes a turn takes (at least one frame): what a
/// window response holds at a time, however large the window.
pub const WINDOW_BATCH_BYTES: usize = 1 << 20;

/// Bytes a `window` response holds (decoded frames, encoded lines), counted in
/// the monitor's window accounting until dropped.
pub struct WindowBuffer<'a> {
    counters: &'a Counters,
    bytes: usize,
}

impl WindowBuffer<'_> {
    /// Counts `n` more bytes held.
    pub fn add(&mut self, n: usize) {
        self.bytes += n;
        let now = self
            .counters
            .window_buffered
            .fetch_add(n, Ordering::Relaxed)
            + n;
        self.counters
            .window_buffered_peak
            .fetch_max(now, Ordering::Relaxed);
    }

    /// Counts `n` bytes released.
    pub fn release(&mut self, n: usize) {
        let n = n.min(self.bytes);
        self.bytes -= n;
        self.counters
            .window_buffered
            .fetch_sub(n, Ordering::Relaxed);
    }
}

impl Drop for WindowBuffer<'_> {
    fn drop(&mut self) {
        self.counters
            .window_buffered
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Locks a mutex, recovering the data if a thread panicked while holding it
/// (every guarded value stays consistent between statements).
fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn period_ns(rate_hz: f64) -> u64 {
    (1e9 / rate_hz).round().max(1.0) as u64
}

fn db_bytes(config: &Config) -> usize {
    config.database.max_mib.saturating_mul(1 << 20)
}

/// A cheap, cloneable handle on a running monitor: what the API and the
/// endpoint use, and what an embedding service uses.
#[derive(Clone)]
pub struct MonitorHandle {
    shared: Arc<Shared>,
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
        engine: Engine,
    ) -> Result<Monitor, MonitorError> {
        let source = (engine.make_source)(&config).map_err(MonitorError::from_source)?;
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
        if let Some(strategy) = &config.sleep {
            ticker.set_strategy(*strategy);
        }
        let (frames_tx, _) = broadcast::channel(config.api.client_queue.max(1));
        let max_windows = config.api.max_windows.max(1);
        let node = hwqos_core::recording::node_name();
        let started = Timestamp::now();
        let shared = Arc::new(Shared {
            output: Mutex::new(SegmentWriter::new(&node, started.wall_ns)),
            app_hold: Mutex::new(AppHold::new(config.metrics.app_stale_s)),
            node,
            started,
            config_path,
            rate_override,
            engine,
            db: Mutex::new(FrameDb::new(config.database.frames, db_bytes(&config))),
            period_ns: AtomicU64::new(period_ns(config.rate_hz)),
            queue: config.api.client_queue.max(1),
            config: RwLock::new(Arc::new(config)),
            source: Mutex::new(source),
            source_info: Mutex::new(info),
            frames_tx,
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
                sampling_loop(&for_thread, &mut ticker);
                let _ = done_tx.send(());
            })
            .map_err(MonitorError::io("cannot start the sampling thread"))?;
        Ok(Monitor {
            handle: MonitorHandle { shared },
            thread: Some(thread),
            done,
        })
    }

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

fn sampling_loop(shared: &Shared, ticker: &mut Ticker) {
    // The kernel's default 50 µs timer slack would dominate the tick lateness.
    if let Err(e) = hwqos_core::ticker::set_thread_timer_slack(1) {
        warn!("cannot lower the sampling thread's timer slack: {e}");
    }
    let mut seq: Option<u64> = None;
    let mut period = shared.period_ns.load(Ordering::Relaxed);
    while !shared.stop.load(Ordering::SeqCst) {
        let tick = ticker.wait();
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let now = Timestamp::now();
        let mut frame = lock(&shared.source).sample(now);
        let next = seq.map_or(0, |s| s + 1 + tick.missed);
        seq = Some(next);
        frame.seq = next;
        let c = &shared.counters;
        c.frames_sampled.fetch_add(1, Ordering::Relaxed);
        c.missed_ticks.fetch_add(tick.missed, Ordering::Relaxed);
        c.last_lateness_ns
            .store(tick.lateness_ns, Ordering::Relaxed);
        c.max_lateness_ns
            .fetch_max(tick.lateness_ns, Ordering::Relaxed);
        c.last_tick_mono_ns.store(now.mono_ns, Ordering::Relaxed);
        let multiplexed = frame.samples.iter().filter(|s| s.multiplexed()).count() as u64;
        c.multiplexed_samples
            .fetch_add(multiplexed, Ordering::Relaxed);
        let frame = Arc::new(frame);
        if frame.samples.iter().any(|s| s.metric.family() == "app") {
            lock(&shared.app_hold).take(&frame);
        }
        lock(&shared.db).push(frame.clone());
        // No receivers is fine; slow receivers lag and are dropped by the API.
        let _ = shared.frames_tx.send(frame);
        let wanted = shared.period_ns.load(Ordering::Relaxed);
        if wanted != period {
            match ticker.set_period(Duration::from_nanos(wanted)) {
                Ok(()) => period = wanted,
                Err(e) => error!("cannot change the sampling period: {e}"),
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
        self.shared.frames_tx.subscribe()
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
        WindowBuffer {
            counters: &self.shared.counters,
            bytes: 0,
        }
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
        let check = self.shared.engine.check_event.clone();
        config::check_event_sets(&sets, &move |n: &str| check(n))?;
        let mut source = lock(&self.shared.source);
        source.set_event_sets(sets).map_err(|e| e.to_string())?;
        let info = SourceInfo::of(source.as_ref());
        drop(source);
        *lock(&self.shared.source_info) = info;
        info!("event sets replaced through the API");
        Ok(self.event_sets())
    }

    /// The monitor's state.
    pub fn status(&self) -> MonitorStatus {
        let config = self.config();
        let info = lock(&self.shared.source_info).clone();
        let (frames_in_db, last_seq, scopes) = {
            let db = lock(&self.shared.db);
            let latest = db.latest();
            (
                db.len(),
                latest.map(|f| f.seq),
                latest.map_or(0, |f| f.scopes().len()),
            )
        };
        let c = &self.shared.counters;
        MonitorStatus {
            node: self.shared.node.clone(),
            version: VERSION.to_string(),
            backend: info.backend,
            rate_hz: config.rate_hz,
            started: self.shared.started,
            frames_sampled: c.frames_sampled.load(Ordering::Relaxed),
            missed_ticks: c.missed_ticks.load(Ordering::Relaxed),
            last_seq,
            last_lateness_ns: c.last_lateness_ns.load(Ordering::Relaxed),
            frames_in_db,
            db_capacity: config.database.frames,
            targets: config
                .targets
                .iter()
                .map(|t| t.select.to_string())
                .collect(),
            scopes_in_last_frame: scopes,
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

    /// The OpenMetrics exposition text.
    pub fn render_metrics(&self) -> String {
        let config = self.config();
        let info = lock(&self.shared.source_info).clone();
        let (database_frames, database_bytes, last_wall) = {
            let db = lock(&self.shared.db);
            (db.len(), db.bytes(), db.latest().map(|f| f.time.wall_ns))
        };
        let c = &self.shared.counters;
        let out = self.output_stats();
        let now = hwqos_core::time::monotonic_ns();
        let app_hold = {
            let mut hold = lock(&self.shared.app_hold);
            hold.expire(now);
            hold.len()
        };
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
            last_frame_wall_ns: last_wall,
            flushed_frames: out.frames_written,
            flushed_bytes: out.bytes_written,
            flush_lost_frames: out.frames_lost,
            app_series_held: app_hold,
        };
        // Built at scrape time from the newest frames, not on every tick: a
        // series disappears after `stale_after` ticks, so older frames cannot
        // contribute (a database smaller than that shortens the horizon).
        let stale_after = (2 * info.event_sets.len() as u64 + 2).max(10);
        let recent = lock(&self.shared.db).window(None, Some(stale_after as usize + 1));
        let mut exposition = Exposition::new();
        for frame in &recent {
            exposition.update(frame, stale_after);
        }
        exposition.add_held(&lock(&self.shared.app_hold), now);
        exposition.render(&me)
    }

    pub(crate) fn set_metrics_addr(&self, addr: SocketAddr) {
        *lock(&self.shared.metrics_addr) = Some(addr);
    }

    /// Appends the frames sampled since the last flush to the recordings in
    /// the output directory (see [`crate::segments`]) and returns the files
    /// written to.
    pub fn flush(&self) -> Result<Vec<PathBuf>, FlushError> {
        self.flush_report().map(|r| r.paths)
    }

    /// [`MonitorHandle::flush`] with what it did: frames and bytes appended,
    /// frames lost since the previous flush, old segments removed.
    pub fn flush_report(&self) -> Result<FlushReport, FlushError> {
        let mut output = lock(&self.shared.output);
        let config = self.config();
        let (frames, stored) = lock(&self.shared.db).snapshot_after(output.last_seq());
        let info = lock(&self.shared.source_info).clone();
        let mut header = RecordingHeader::new(
            self.shared.node.clone(),
            self.shared.started,
            config.rate_hz,
            match info.backend {
                BackendKind::Perf => RecordedBackend::Perf,
                BackendKind::Simulated => RecordedBackend::Simulated,
            },
            // The writer states the class of every metric the run flushed.
            CounterClass::None,
        );
        header.event_sets = info.event_sets;
        header.writer = format!("hwqos-monitor {VERSION}");
        let report = output.append(
            &frames,
            stored,
            &header,
            &config.output.dir,
            &config.output.formats,
            config.output.limits(),
        )?;
        if let Some(gap) = report.gap {
            warn!(
                "flush: {gap}; flush more often or keep more frames ([database] frames, max_mib)"
            );
        }
        if !report.removed.is_empty() {
            info!(
                "flush: removed {} old recording files to stay within [output] max_mib = {}",
                report.removed.len(),
                config.output.max_mib
            );
        }
        info!(
            frames = report.frames,
            bytes = report.bytes,
            "flushed to {}",
            config.output.dir.display()
        );
        Ok(report)
    }

    /// What the flushes wrote and lost since start.
    pub fn output_stats(&self) -> OutputStats {
        lock(&self.shared.output).stats()
    }

    /// Re-reads the config file and applies it (SIGHUP). On error the running
    /// configuration stays.
    pub fn reload(&self) -> Result<(), MonitorError> {
        let path = self
            .shared
            .config_path
            .clone()
            .ok_or_else(|| MonitorError::Io {
                context: "reload".into(),
                source: std::io::Error::other("the monitor was started without a config file"),
            })?;
        let config = self
            .shared
            .engine
            .load_config(Some(&path), self.shared.rate_override)?;
        self.apply(config)
    }

    /// Applies a new configuration, keeping the database (its newest frames if
    /// it shrinks). The API socket, the metrics address and the subscriber queue
    /// length only change on restart.
    pub fn apply(&self, mut new: Config) -> Result<(), MonitorError> {
        let old = self.config();
        if new.api != old.api {
            warn!("[api] changes take effect on restart; keeping the running socket");
            new.api = old.api.clone();
        }
        // `app_stale_s` applies at once; the endpoint itself only on restart.
        let endpoint_changed =
            MetricsEndpoint::of(&new.metrics) != MetricsEndpoint::of(&old.metrics);
        if endpoint_changed {
            warn!("[metrics] enabled/listen/allow_non_loopback change on restart; keeping the running endpoint");
            new.metrics = config::MetricsConfig {
                app_stale_s: new.metrics.app_stale_s,
                ..old.metrics.clone()
            };
        }
        lock(&self.shared.app_hold).set_window(new.metrics.app_stale_s);
        if new.sleep != old.sleep {
            warn!("`sleep` changes take effect on restart; keeping the running strategy");
            new.sleep = old.sleep;
        }
        let sampler_changed = serde_json::to_value(new.sampler_config()).ok()
            != serde_json::to_value(old.sampler_config()).ok();
        if sampler_changed {
            let source =
                (self.shared.engine.make_source)(&new).map_err(MonitorError::from_source)?;
            let info = SourceInfo::of(source.as_ref());
            *lock(&self.shared.source) = source;
            *lock(&self.shared.source_info) = info;
        }
        lock(&self.shared.db).set_limits(new.database.frames, db_bytes(&new));
        self.shared
            .period_ns
            .store(period_ns(new.rate_hz), Ordering::Relaxed);
        *self
            .shared
            .config
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(new);
        self.shared.counters.reloads.fetch_add(1, Ordering::Relaxed);
        info!(sampler_rebuilt = sampler_changed, "configuration reloaded");
        Ok(())
    }

    /// Nanoseconds (monotonic) of the newest tick, 0 before the first.
    fn last_tick_mono_ns(&self) -> u64 {
        self.shared
            .counters
            .last_tick_mono_ns
            .load(Ordering::Relaxed)
    }

    fn period(&self) -> Duration {
        Duration::from_nanos(self.shared.period_ns.load(Ordering::Relaxed))
    }
}

/// `perf` or `simulated`.
pub fn backend_name(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Perf => "perf",
        BackendKind::Simulated => "simulated",
    }
}

/// The parts of `[metrics]` that only change on restart.
#[derive(PartialEq)]
struct MetricsEndpoint<'a> {
    enabled: bool,
    listen: &'a str,
    allow_non_loopback: bool,
}

impl MetricsEndpoint<'_> {
    fn of(m: &config::MetricsConfig) -> MetricsEndpoint<'_> {
        MetricsEndpoint {
            enabled: m.enabled,
            listen: &m.listen,
            allow_non_loopback: m.allow_non_loopback,
        }
    }
}

/// Options of [`run`] besides the config.
pub struct RunOptions {
    /// `--rate`: overrides `rate_hz` (also across reloads).
    pub rate_override: Option<f64>,
    pub notifier: Arc<dyn Notifier>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            rate_override: None,
            notifier: Arc::new(NoNotifier),
        }
    }
}

/// Runs the monitor as a service until SIGTERM or SIGINT, with this node's
/// counters. Configuration errors are [`MonitorError::Config`] (exit code 2).
pub fn run(config_path: &Path, options: RunOptions) -> Result<(), MonitorError> {
    let engine = Engine::this_node();
    let config = engine.load_config(Some(config_path), options.rate_override)?;
    run_with(config, Some(config_path.to_path_buf()), engine, options)
}

/// [`run`] with a given configuration and engine.
pub fn run_with(
    config: Config,
    config_path: Option<PathBuf>,
    engine: Engine,
    options: RunOptions,
) -> Result<(), MonitorError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hwqos-monitor-io")
        .enable_all()
        .build()
        .map_err(MonitorError::io("cannot start the async runtime"))?;
    runtime.block_on(serve(config, config_path, engine, options))
}

async fn serve(
    config: Config,
    config_path: Option<PathBuf>,
    engine: Engine,
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

    let monitor = Monitor::start(config.clone(), config_path, options.rate_override, engine)?;
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
        tasks.push(tokio::spawn(openmetrics::serve(
            listener,
            handle.clone(),
            stop_rx.clone(),
        )));
    }

    let notifier = options.notifier.clone();
    notifier.status(&running_status(&handle));
    notifier.ready();
    info!(rate_hz = config.rate_hz, "hwqos-monitor {VERSION} sampling");
    let watchdog_every = notifier.watchdog_interval();
    let mut watchdog = tokio::time::interval(watchdog_every.unwrap_or(Duration::from_secs(3600)));
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = hup.recv() => {
                notifier.reloading();
                notifier.status("reloading the configuration");
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
                notifier.status(&outcome);
                notifier.ready();
            }
            _ = usr1.recv() => {
                let h = handle.clone();
                match tokio::task::spawn_blocking(move || h.flush()).await {
                    Ok(Ok(paths)) => info!("SIGUSR1: flushed to {}", show_paths(&paths)),
                    Ok(Err(e)) => error!("SIGUSR1 flush failed: {e}"),
                    Err(e) => error!("SIGUSR1 flush failed: {e}"),
                }
            }
            _ = watchdog.tick(), if watchdog_every.is_some() => {
                // Ping only while the sampler makes progress: a stuck sampling
                // thread lets systemd's watchdog restart the agent.
                let age = hwqos_core::time::monotonic_ns().saturating_sub(handle.last_tick_mono_ns());
                if age <= (3 * handle.period() + Duration::from_secs(1)).as_nanos() as u64 {
                    notifier.watchdog();
                }
            }
            _ = term.recv() => { info!("SIGTERM: shutting down"); break; }
            _ = int.recv() => { info!("SIGINT: shutting down"); break; }
        }
    }

    notifier.stopping();
    notifier.status("stopping: final flush and shutdown");
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

/// The `STATUS=` line while sampling.
fn running_status(handle: &MonitorHandle) -> String {
    let config = handle.config();
    let unavailable = lock(&handle.shared.source_info).unavailable.len();
    format!(
        "sampling at {} Hz, {} event sets, {} events unavailable, {} reloads",
        config.rate_hz,
        config.event_sets.len(),
        unavailable,
        handle.shared.counters.reloads.load(Ordering::Relaxed)
    )
}

/// Samples one interval and returns the frame (`--once`): a first tick starts
/// the counters, the second, one period later, reads them.
pub fn sample_once(config: &Config, engine: &Engine) -> Result<Frame, MonitorError> {
    let mut source = (engine.make_source)(config).map_err(MonitorError::from_source)?;
    let mut ticker =
        Ticker::new(config.period()).map_err(|e| MonitorError::Ticker(e.to_string()))?;
    ticker.wait();
    let _ = source.sample(Timestamp::now());
    ticker.wait();
    let mut frame = source.sample(Timestamp::now());
    frame.seq = 1;
    Ok(frame)
}
