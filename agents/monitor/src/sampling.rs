//! The sampling thread: one frame per tick of the drift-free ticker, into the
//! frame database and the live state ([`crate::live`]); it also feeds the
//! service manager's watchdog, so that a stuck sampler stops the pings.

use crate::live::lock;
use crate::state::Shared;
use hwqos_agent::lifecycle::Heartbeat;
use hwqos_core::ticker::Ticker;
use hwqos_core::Timestamp;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, warn};

/// Samples until `shared.stop` is set.
pub(crate) fn sampling_loop(
    shared: &Shared,
    ticker: &mut Ticker,
    mut heartbeat: Option<Heartbeat>,
) {
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
        let multiplexed = frame.samples.iter().filter(|s| s.multiplexed()).count() as u64;
        c.multiplexed_samples
            .fetch_add(multiplexed, Ordering::Relaxed);
        let frame = Arc::new(frame);
        {
            let mut db = lock(&shared.db);
            db.push(frame.clone());
            shared.live.set_db_size(db.len(), db.bytes());
        }
        shared.live.publish(frame);
        if let Some(h) = heartbeat.as_mut() {
            h.beat();
        }
        let wanted = shared.period_ns.load(Ordering::Relaxed);
        if wanted != period {
            match ticker.set_period(Duration::from_nanos(wanted)) {
                Ok(()) => period = wanted,
                Err(e) => error!("cannot change the sampling period: {e}"),
            }
        }
    }
}
