//! What the sampling thread publishes as it makes each frame, for the
//! consumers that must never wait for the database: the live API's
//! subscribers (a broadcast queue) and the `/metrics` exposition (the newest
//! frames it needs, the held application metrics, the database's size).
//!
//! A scrape renders from here: it takes the newest frames (shared `Arc`s, no
//! copy and no decoding) and the counters, and never locks the frame database.

use crate::openmetrics::{AppHold, Exposition};
use hwqos_core::Frame;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

/// Locks a mutex, recovering the data if a thread panicked while holding it
/// (every guarded value stays consistent between statements).
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ticks after which an exposed series that was not seen again disappears:
/// twice the rotation length plus two, at least 10 (see [`crate::openmetrics`]).
pub fn stale_after(event_sets: usize) -> u64 {
    (2 * event_sets as u64 + 2).max(10)
}

/// The sampler's live output.
pub(crate) struct LiveState {
    /// Every frame, to the live API's subscribers.
    frames_tx: broadcast::Sender<Arc<Frame>>,
    /// The newest frames, newest last: the exposition's rotation horizon
    /// ([`stale_after`] + 1 frames; older ones could not show a series).
    recent: Mutex<VecDeque<Arc<Frame>>>,
    /// How many frames `recent` keeps.
    keep: AtomicUsize,
    /// Application metrics kept on `/metrics` for `[metrics] app_stale_s`.
    app_hold: Mutex<AppHold>,
    /// The frame database's size after the newest push (frames, bytes).
    db_frames: AtomicUsize,
    db_bytes: AtomicUsize,
}

impl LiveState {
    /// Subscribers may fall `queue` frames behind; the exposition follows a
    /// rotation of `event_sets` sets and holds application metrics for
    /// `app_stale_s` seconds.
    pub(crate) fn new(queue: usize, event_sets: usize, app_stale_s: f64) -> LiveState {
        let (frames_tx, _) = broadcast::channel(queue.max(1));
        let live = LiveState {
            frames_tx,
            recent: Mutex::new(VecDeque::new()),
            keep: AtomicUsize::new(0),
            app_hold: Mutex::new(AppHold::new(app_stale_s)),
            db_frames: AtomicUsize::new(0),
            db_bytes: AtomicUsize::new(0),
        };
        live.set_rotation(event_sets);
        live
    }

    /// The event sets changed (a reload, `set_event_sets`): the exposition's
    /// horizon follows the new rotation length.
    pub(crate) fn set_rotation(&self, event_sets: usize) {
        let keep = stale_after(event_sets) as usize + 1;
        self.keep.store(keep, Ordering::Relaxed);
        let mut recent = lock(&self.recent);
        while recent.len() > keep {
            recent.pop_front();
        }
    }

    /// `[metrics] app_stale_s` changed.
    pub(crate) fn set_app_window(&self, app_stale_s: f64) {
        lock(&self.app_hold).set_window(app_stale_s);
    }

    /// Publishes a frame: to the exposition, then to the subscribers.
    pub(crate) fn publish(&self, frame: Arc<Frame>) {
        // `family() == "app"` without splitting every sample's name per tick.
        if frame
            .samples
            .iter()
            .any(|s| s.metric.as_str().starts_with("app."))
        {
            lock(&self.app_hold).take(&frame);
        }
        {
            let keep = self.keep.load(Ordering::Relaxed);
            let mut recent = lock(&self.recent);
            recent.push_back(frame.clone());
            while recent.len() > keep {
                recent.pop_front();
            }
        }
        // No receivers is fine; slow receivers lag and are dropped by the API.
        let _ = self.frames_tx.send(frame);
    }

    /// Records the database's size (the sampling thread, after each push,
    /// and a reload that changes its bounds).
    pub(crate) fn set_db_size(&self, frames: usize, bytes: usize) {
        self.db_frames.store(frames, Ordering::Relaxed);
        self.db_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Frames and estimated bytes in the database.
    pub(crate) fn db_size(&self) -> (usize, usize) {
        (
            self.db_frames.load(Ordering::Relaxed),
            self.db_bytes.load(Ordering::Relaxed),
        )
    }

    /// A receiver of every frame from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<Frame>> {
        self.frames_tx.subscribe()
    }

    #[cfg(test)]
    pub(crate) fn recent_for_tests(&self) -> &Mutex<VecDeque<Arc<Frame>>> {
        &self.recent
    }

    /// The newest frame published.
    pub(crate) fn latest(&self) -> Option<Arc<Frame>> {
        lock(&self.recent).back().cloned()
    }

    /// The exposition of the newest frames and the held application metrics
    /// at monotonic time `now_mono_ns`, and how many application series are held.
    pub(crate) fn exposition(&self, now_mono_ns: u64) -> (Exposition, usize) {
        let keep = self.keep.load(Ordering::Relaxed);
        let stale = keep.saturating_sub(1) as u64;
        // Clone the `Arc`s and let the sampler go on before folding them.
        let recent: Vec<Arc<Frame>> = lock(&self.recent).iter().cloned().collect();
        let mut exposition = Exposition::new();
        for frame in &recent {
            exposition.update(frame, stale);
        }
        let mut hold = lock(&self.app_hold);
        hold.expire(now_mono_ns);
        exposition.add_held(&hold, now_mono_ns);
        (exposition, hold.len())
    }
}
