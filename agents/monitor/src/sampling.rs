//! The sampling thread: one frame per tick of the drift-free ticker, into the
//! frame database and the live state ([`crate::live`]); it also feeds the
//! service manager's watchdog, so that a stuck sampler stops the pings.

use crate::config::Config;
use crate::live::lock;
use crate::state::Shared;
use hwqos_agent::lifecycle::Heartbeat;
use hwqos_core::ticker::{SleepStrategy, Ticker};
use hwqos_core::Timestamp;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, warn};

/// The strategy the sampling thread waits with: `sleep` when configured,
/// else `absolute` (`clock_nanosleep` to the deadline, the sampling thread's
/// timer slack at 1 ns) at every rate.
///
/// The ticker's own default for periods of 1 ms and more,
/// `slack-compensated`, wakes early by a learnt wake-up latency and spins to
/// the deadline: it buys a median lateness of a few µs instead of a few
/// tens, not the tail (which on a VM is the hypervisor's), and costs that
/// latency on every tick — on a busy node up to a quarter of the period. Run
/// side by side with `perf stat -I` (docs/anchors.md) it made the monitor's
/// own CPU 1.2× perf's at 10 Hz and 4.6–7.4× at 100 Hz, while with absolute
/// sleeps it stays at or below perf's; so a monitor spins only when asked
/// (`sleep = "slack-compensated"`). Counts are scaled by the measured
/// interval either way, so lateness does not bias a rate.
pub(crate) fn sleep_strategy(config: &Config) -> SleepStrategy {
    config.sleep.unwrap_or(SleepStrategy::Absolute)
}

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
        // The ticker read the monotonic clock on waking: no second read.
        let now = Timestamp {
            mono_ns: tick.woke_ns,
            wall_ns: hwqos_core::time::wall_ns(),
        };
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
                // The strategy does not depend on the period.
                Ok(()) => period = wanted,
                Err(e) => error!("cannot change the sampling period: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monitor_never_spins_unless_told_to() {
        for hz in [1.0, 10.0, 100.0, 1000.0, 10_000.0] {
            let config = Config {
                rate_hz: hz,
                ..Config::default()
            };
            assert_eq!(sleep_strategy(&config), SleepStrategy::Absolute, "{hz} Hz");
        }
        // A configured strategy always wins.
        let spin = SleepStrategy::SlackCompensated;
        let config = Config {
            sleep: Some(spin),
            ..Config::default()
        };
        assert_eq!(sleep_strategy(&config), spin);
    }
}
