//! Where the relay's compression throttle reads CPU utilization from.
//!
//! One sampler per node: while `hwqos-monitor` runs, the throttle takes the
//! per-CPU utilization the monitor already measures (`os.cpu.util` of every
//! `cpu:N` scope, from its live API at `monitor_socket`) instead of reading
//! `/proc/stat` itself. When the socket is absent, the connection fails or
//! the monitor publishes no `os.cpu.util` (its `procfs = false`), the
//! throttle reads `/proc/stat` as before, and the monitor is tried again
//! every [`RETRY`]. Neither source opens a perf_event counter.
//!
//! A reader thread holds the subscription and adds each frame's per-CPU
//! values to a running sum; [`MonitorCpuLoad::utilization`] takes the mean
//! of the frames since its previous call (so the throttle sees the same
//! interval as with `/proc/stat`, whatever the monitor's rate) and combines
//! the CPUs as `cpu_aggregate` says. The `cgroup` aggregate has its own
//! source (the relay's cgroup usage) and never asks the monitor.

use hwqos_api::{ApiClient, FrameFilter, MetricPattern, ScopePattern};
use hwqos_compress::{CpuAggregate, CpuLoad};
use hwqos_core::metric::names;
use hwqos_core::Scope;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// How long the throttle uses `/proc/stat` before trying the monitor again.
pub const RETRY: Duration = Duration::from_secs(5);

/// A monitor that sends no frame for this long is taken as gone.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The metric the monitor publishes per CPU (its procfs sampler).
const CPU_UTIL: &str = names::OS_CPU_UTIL;

/// Which source the throttle reads (the reader thread switches it as the
/// monitor comes and goes; each reading confirms it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// No reading yet, or the throttle is off.
    None = 0,
    /// The monitor's live API.
    Monitor = 1,
    /// `/proc/stat`, read by the relay.
    Procfs = 2,
    /// The relay's cgroup usage (`cpu_aggregate = "cgroup"`).
    Cgroup = 3,
}

impl Source {
    /// The label value in `/metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::None => "none",
            Source::Monitor => "monitor",
            Source::Procfs => "procfs",
            Source::Cgroup => "cgroup",
        }
    }
}

/// The source in use, shared between the throttle and `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct SourceCell(Arc<AtomicU8>);

impl SourceCell {
    /// Records the source of the latest reading; logs a change.
    pub fn set(&self, source: Source) {
        let old = self.0.swap(source as u8, Ordering::Relaxed);
        if old != source as u8 {
            tracing::info!(
                source = source.as_str(),
                "throttle: CPU utilization from {}",
                source.as_str()
            );
        }
    }

    /// The source of the latest reading.
    pub fn get(&self) -> Source {
        match self.0.load(Ordering::Relaxed) {
            1 => Source::Monitor,
            2 => Source::Procfs,
            3 => Source::Cgroup,
            _ => Source::None,
        }
    }
}

/// The throttle's CPU-load source for `aggregate`: the monitor at `monitor`
/// with `/proc/stat` as the fallback, `/proc/stat` alone without a socket,
/// or the cgroup source.
pub fn throttle_load(
    aggregate: CpuAggregate,
    monitor: Option<&Path>,
    cell: &SourceCell,
) -> Box<dyn CpuLoad> {
    match (aggregate, monitor) {
        (CpuAggregate::Cgroup, _) => {
            cell.set(Source::Cgroup);
            aggregate.source()
        }
        (_, None) => {
            cell.set(Source::Procfs);
            Box::new(Tagged {
                inner: aggregate.source(),
                source: Source::Procfs,
                cell: cell.clone(),
            })
        }
        (_, Some(socket)) => Box::new(MonitorCpuLoad::start(socket, aggregate, cell.clone())),
    }
}

/// A source that records itself in the cell on every reading.
struct Tagged {
    inner: Box<dyn CpuLoad>,
    source: Source,
    cell: SourceCell,
}

impl CpuLoad for Tagged {
    fn utilization(&mut self) -> Option<f64> {
        self.cell.set(self.source);
        self.inner.utilization()
    }
}

/// What the reader thread has seen since the last reading.
#[derive(Default)]
struct Feed {
    /// Subscribed and receiving `os.cpu.util`.
    usable: bool,
    /// Per CPU: sum of the values and number of frames since the last reading.
    sums: BTreeMap<u32, (f64, u32)>,
}

/// CPU utilization from the monitor's live API, `/proc/stat` while the
/// monitor is not there (see the module docs).
pub struct MonitorCpuLoad {
    aggregate: CpuAggregate,
    feed: Arc<Mutex<Feed>>,
    fallback: Box<dyn CpuLoad>,
    cell: SourceCell,
}

impl MonitorCpuLoad {
    /// Starts the reader thread for `socket`; it ends when this source is
    /// dropped (at the next frame or retry).
    pub fn start(socket: &Path, aggregate: CpuAggregate, cell: SourceCell) -> Self {
        let feed = Arc::new(Mutex::new(Feed::default()));
        let weak = Arc::downgrade(&feed);
        let socket = socket.to_path_buf();
        // `/proc/stat` until the monitor delivers.
        cell.set(Source::Procfs);
        let reader_cell = cell.clone();
        let spawned = std::thread::Builder::new()
            .name("throttle-monitor".into())
            .spawn(move || read_monitor(&socket, &weak, &reader_cell));
        if let Err(e) = spawned {
            tracing::warn!("throttle: cannot start the monitor reader ({e}); using /proc/stat");
        }
        MonitorCpuLoad {
            aggregate,
            feed,
            fallback: aggregate.source(),
            cell,
        }
    }
}

impl CpuLoad for MonitorCpuLoad {
    fn utilization(&mut self) -> Option<f64> {
        let taken = {
            let mut feed = self.feed.lock().unwrap_or_else(|p| p.into_inner());
            feed.usable.then(|| std::mem::take(&mut feed.sums))
        };
        match taken {
            Some(sums) => {
                self.cell.set(Source::Monitor);
                let per_cpu: BTreeMap<u32, f64> = sums
                    .into_iter()
                    .filter(|(_, (_, n))| *n > 0)
                    .map(|(cpu, (sum, n))| (cpu, sum / f64::from(n)))
                    .collect();
                self.aggregate.combine(&per_cpu)
            }
            None => {
                self.cell.set(Source::Procfs);
                self.fallback.utilization()
            }
        }
    }
}

/// The reader thread: subscribe, add up frames, reconnect after [`RETRY`].
fn read_monitor(socket: &PathBuf, feed: &Weak<Mutex<Feed>>, cell: &SourceCell) {
    let mut logged_failure = false;
    loop {
        match subscribe_and_read(socket, feed, cell) {
            Ok(()) => return, // the source was dropped
            Err(e) => {
                let Some(f) = feed.upgrade() else { return };
                let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
                let was_usable = std::mem::take(&mut f.usable);
                f.sums.clear();
                drop(f);
                cell.set(Source::Procfs);
                if was_usable || !logged_failure {
                    tracing::info!(
                        "throttle: monitor at {} not usable ({e}); reading /proc/stat, retrying every {}s",
                        socket.display(),
                        RETRY.as_secs()
                    );
                    logged_failure = true;
                }
            }
        }
        std::thread::sleep(RETRY);
        if feed.strong_count() == 0 {
            return;
        }
    }
}

/// One connection: `Ok` when the source was dropped, `Err` why the
/// monitor cannot be used (now).
fn subscribe_and_read(
    socket: &PathBuf,
    feed: &Weak<Mutex<Feed>>,
    cell: &SourceCell,
) -> Result<(), String> {
    if !socket.exists() {
        return Err("no socket".into());
    }
    let client = ApiClient::connect(socket).map_err(|e| e.to_string())?;
    client
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let filter = FrameFilter {
        scopes: vec![ScopePattern::parse("cpu:*").map_err(|e| e.to_string())?],
        metrics: vec![MetricPattern::parse(CPU_UTIL).map_err(|e| e.to_string())?],
    };
    let subscription = client.subscribe(filter).map_err(|e| e.to_string())?;
    for frame in subscription {
        let frame = frame.map_err(|e| e.to_string())?;
        let Some(f) = feed.upgrade() else {
            return Ok(());
        };
        let values: Vec<(u32, f64)> = frame
            .samples
            .iter()
            .filter(|s| s.metric.as_str() == CPU_UTIL)
            .filter_map(|s| match s.scope {
                Scope::Cpu { cpu } => Some((cpu, s.value)),
                _ => None,
            })
            .collect();
        let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
        // The monitor's first frame (and every frame with procfs off) has
        // no utilization yet: usable from the first frame that has one.
        if !values.is_empty() {
            if !f.usable {
                cell.set(Source::Monitor);
            }
            f.usable = true;
            for (cpu, v) in values {
                let e = f.sums.entry(cpu).or_insert((0.0, 0));
                e.0 += v;
                e.1 += 1;
            }
        }
    }
    Err("the monitor closed the subscription".into())
}
