//! Shared scalars between controllers and generator threads: a knob (an `f64`
//! read by the generator every ~10 ms), a stop flag, and a counter of work done
//! (for generators whose output no kernel counter measures).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One generator intensity, shared between its controller and its thread.
#[derive(Clone, Debug, Default)]
pub struct Knob(Arc<AtomicU64>);

impl Knob {
    /// A knob set to `value`, in the generator's knob unit.
    pub fn new(value: f64) -> Knob {
        Knob(Arc::new(AtomicU64::new(value.to_bits())))
    }
    /// The current value, as last [`set`](Knob::set).
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    /// Sets the value; the generator sees it within a slice (~10 ms).
    /// Clamping to a range is the caller's job.
    pub fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

/// Set once to stop every generator sharing it.
#[derive(Clone, Debug, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// A flag not yet set.
    pub fn new() -> StopFlag {
        StopFlag::default()
    }
    /// Sets the flag, for every clone; it is never cleared.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether [`stop`](StopFlag::stop) was called on any clone.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
    /// A flag backed by an existing atomic (e.g. an agent's stop-signal
    /// flag): setting either sets both.
    pub fn from_atomic(flag: Arc<AtomicBool>) -> StopFlag {
        StopFlag(flag)
    }
}

/// A monotonically increasing count of work units (bytes, accesses).
#[derive(Clone, Debug, Default)]
pub struct WorkCounter(Arc<AtomicU64>);

impl WorkCounter {
    /// Adds `n` units of work.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// All work added so far, by every clone.
    pub fn total(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Spreads a fractional amount of work over ticks without losing the
/// remainders: `take(3.4)` five times yields 3, 3, 4, 3, 4 (17 in all).
#[derive(Clone, Copy, Debug, Default)]
pub struct Carry(f64);

impl Carry {
    /// Adds `amount` (negative counts as 0) to the remainder and returns its
    /// whole part, keeping the fraction for the next call.
    pub fn take(&mut self, amount: f64) -> u64 {
        self.0 += amount.max(0.0);
        let whole = self.0.floor();
        self.0 -= whole;
        whole as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carry_keeps_fractions() {
        let mut c = Carry::default();
        let total: u64 = (0..1000).map(|_| c.take(3.4)).sum();
        assert!((3399..=3400).contains(&total), "{total}");
    }

    #[test]
    fn knob_round_trips() {
        let k = Knob::new(0.25);
        let k2 = k.clone();
        k2.set(0.75);
        assert_eq!(k.get(), 0.75);
    }
}
