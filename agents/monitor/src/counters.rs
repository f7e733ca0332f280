//! The monitor's running counts (ticks, subscribers, reloads, window
//! responses), shared lock-free between the sampling thread, the API and
//! `/metrics`, and [`WindowBuffer`], the account of the bytes `window`
//! responses hold.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Counts since start; every field is updated with relaxed atomics.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) frames_sampled: AtomicU64,
    pub(crate) missed_ticks: AtomicU64,
    pub(crate) last_lateness_ns: AtomicU64,
    pub(crate) max_lateness_ns: AtomicU64,
    pub(crate) multiplexed_samples: AtomicU64,
    pub(crate) dropped_subscribers: AtomicU64,
    pub(crate) subscribers: AtomicUsize,
    pub(crate) reloads: AtomicU64,
    /// Decoded frames and encoded lines that `window` responses hold now…
    pub(crate) window_buffered: AtomicUsize,
    /// …and the most they held at once.
    pub(crate) window_buffered_peak: AtomicUsize,
    pub(crate) windows_refused: AtomicU64,
    pub(crate) windows_cut: AtomicU64,
}

/// Bytes a `window` response holds (decoded frames, encoded lines), counted in
/// the monitor's window accounting until dropped.
pub struct WindowBuffer<'a> {
    counters: &'a Counters,
    bytes: usize,
}

impl<'a> WindowBuffer<'a> {
    pub(crate) fn new(counters: &'a Counters) -> WindowBuffer<'a> {
        WindowBuffer { counters, bytes: 0 }
    }

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
