//! [`Shared`]: the state the sampling thread and every `MonitorHandle`
//! share, and the lock each part is behind.

use crate::config::Config;
use crate::counters::Counters;
use crate::db::FrameDb;
use crate::live::LiveState;
use crate::segments::{OutputStats, SegmentWriter};
use crate::source::{FrameSource, NodeSources, SourceInfo};
use hwqos_core::Timestamp;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

/// Everything the sampling thread and the handles share.
pub(crate) struct Shared {
    pub(crate) node: String,
    pub(crate) started: Timestamp,
    pub(crate) config_path: Option<PathBuf>,
    pub(crate) rate_override: Option<f64>,
    pub(crate) sources: NodeSources,
    pub(crate) config: RwLock<Arc<Config>>,
    pub(crate) db: Mutex<FrameDb>,
    pub(crate) source: Mutex<Box<dyn FrameSource>>,
    pub(crate) source_info: Mutex<SourceInfo>,
    pub(crate) live: LiveState,
    pub(crate) queue: usize,
    pub(crate) counters: Counters,
    pub(crate) metrics_addr: Mutex<Option<SocketAddr>>,
    pub(crate) period_ns: AtomicU64,
    pub(crate) stop: AtomicBool,
    /// The append-only recordings; its lock also makes flushes one at a time.
    pub(crate) output: Mutex<SegmentWriter>,
    /// What the flushes wrote, copied after each (a scrape must not wait for a flush).
    pub(crate) output_stats: Mutex<OutputStats>,
    /// One permit per `window` response being sent (`[api] max_windows`).
    pub(crate) windows: Arc<tokio::sync::Semaphore>,
    pub(crate) max_windows: usize,
}

pub(crate) fn period_ns(rate_hz: f64) -> u64 {
    (1e9 / rate_hz).round().max(1.0) as u64
}

pub(crate) fn db_bytes(config: &Config) -> usize {
    config.database.max_mib.saturating_mul(1 << 20)
}
