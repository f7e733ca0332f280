//! Configuration reload (SIGHUP): what a new configuration changes in a
//! running monitor at once, and what only changes on restart.

use crate::config::{self, Config};
use crate::error::MonitorError;
use crate::live::lock;
use crate::monitor::MonitorHandle;
use crate::source::SourceInfo;
use crate::state::{db_bytes, period_ns};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tracing::{info, warn};

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

impl MonitorHandle {
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
            .sources
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
        self.shared.live.set_app_window(new.metrics.app_stale_s);
        if new.sleep != old.sleep {
            warn!("`sleep` changes take effect on restart; keeping the running strategy");
            new.sleep = old.sleep;
        }
        let sampler_changed = serde_json::to_value(new.sampler_config()).ok()
            != serde_json::to_value(old.sampler_config()).ok();
        if sampler_changed {
            let source = self.shared.sources.source_for(&new)?;
            let info = SourceInfo::of(source.as_ref());
            *lock(&self.shared.source) = source;
            self.shared.live.set_rotation(info.event_sets.len());
            *lock(&self.shared.source_info) = info;
        }
        {
            let mut db = lock(&self.shared.db);
            db.set_limits(new.database.frames, db_bytes(&new));
            self.shared.live.set_db_size(db.len(), db.bytes());
        }
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
}
