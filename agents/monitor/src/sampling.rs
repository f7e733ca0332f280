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

/// Periods shorter than this wait with a plain absolute sleep unless `sleep`
/// says otherwise; longer ones with the ticker's default (sleep to just before
/// the deadline, then spin).
///
/// The spin before each deadline is what keeps the lateness at a few
/// microseconds, but it costs the learnt wake-up latency (tens of µs, more on
/// a busy node, up to a quarter of the period) on every tick: at 100 Hz a
/// fraction of a per cent of a CPU, at 1 kHz several per cent — more than the
/// whole rest of a tick. Above 100 Hz the default is therefore `absolute`
/// (lateness = the kernel's wake-up latency, with the sampling thread's timer
/// slack at 1 ns).
pub(crate) const SPIN_FROM_PERIOD: Duration = Duration::from_millis(10);

/// The strategy the sampling thread waits with: `sleep` when configured,
/// else `absolute` for periods below [`SPIN_FROM_PERIOD`] and the ticker's
/// default ([`SleepStrategy::default_for`]) for longer ones.
pub(crate) fn sleep_strategy(config: &Config) -> SleepStrategy {
    default_sleep(config.sleep, config.period())
}

fn default_sleep(configured: Option<SleepStrategy>, period: Duration) -> SleepStrategy {
    match configured {
        Some(s) => s,
        None if period < SPIN_FROM_PERIOD => SleepStrategy::Absolute,
        None => SleepStrategy::default_for(period),
    }
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
                Ok(()) => {
                    period = wanted;
                    // Without `sleep` the default follows the period.
                    let configured = shared
                        .config
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .sleep;
                    ticker.set_strategy(default_sleep(configured, Duration::from_nanos(wanted)));
                }
                Err(e) => error!("cannot change the sampling period: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_spins_only_at_100_hz_and_slower() {
        let ms = Duration::from_millis;
        assert_eq!(default_sleep(None, ms(1)), SleepStrategy::Absolute);
        assert_eq!(
            default_sleep(None, Duration::from_micros(9_999)),
            SleepStrategy::Absolute
        );
        assert_eq!(default_sleep(None, ms(10)), SleepStrategy::SlackCompensated);
        assert_eq!(
            default_sleep(None, ms(1000)),
            SleepStrategy::SlackCompensated
        );
        // A configured strategy always wins.
        let spin = SleepStrategy::Hybrid { spin_ns: 20_000 };
        assert_eq!(default_sleep(Some(spin), ms(1)), spin);
        assert_eq!(
            default_sleep(Some(SleepStrategy::Absolute), ms(100)),
            SleepStrategy::Absolute
        );
    }
}
