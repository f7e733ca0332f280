//! Accurate sleeps and a drift-free periodic ticker.
//!
//! Every agent samples on a period. Sleeping "one period" after each piece of
//! work makes the schedule drift: each wake-up is late by the kernel's wake-up
//! latency plus the work time, and those errors add up. The [`Ticker`] instead
//! puts tick `k` on the absolute deadline `start + k·period` (integer
//! nanoseconds on `CLOCK_MONOTONIC`), so an error made in one tick never
//! carries into the next.
//!
//! How a thread waits for a deadline is a [`SleepStrategy`]. The strategies
//! follow the classic ways of sleeping accurately without kernel support:
//! a plain relative sleep (the baseline that drifts), an absolute
//! `clock_nanosleep(TIMER_ABSTIME)`, sleeping early by an estimate of the
//! wake-up latency and busy-waiting the rest ("pre-compensation", learnt by a
//! [`SlackEstimator`]), pure busy-waiting, and a hybrid with a fixed busy-wait
//! tail for sub-millisecond periods.
//!
//! [`sleep_until`] / [`sleep_for`] are the one-shot forms (for timer-accuracy
//! probes); [`LatencyHistogram`] and [`SleepErrorStats`] hold the error
//! statistics (lateness percentiles; the absolute/relative error sample means
//! and variances AESM, AESV, RESM, RESV).

use crate::time::monotonic_ns;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

const NS_PER_SEC: u64 = 1_000_000_000;

/// The shortest period a [`Ticker`] accepts.
pub const MIN_PERIOD: Duration = Duration::from_micros(1);
/// The longest period a [`Ticker`] accepts.
pub const MAX_PERIOD: Duration = Duration::from_secs(86_400);
/// The busy-wait tail of `hybrid` when no spin time is given.
pub const DEFAULT_HYBRID_SPIN_NS: u64 = 100_000;
/// The longest busy-wait tail `hybrid` accepts: spinning longer only burns a CPU.
pub const MAX_HYBRID_SPIN_NS: u64 = NS_PER_SEC;
/// Periods at least this long default to [`SleepStrategy::SlackCompensated`],
/// shorter ones to [`SleepStrategy::Hybrid`].
pub const HYBRID_BELOW_PERIOD: Duration = Duration::from_millis(1);

/// How a thread waits until a deadline on `CLOCK_MONOTONIC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum SleepStrategy {
    /// `nanosleep` of the time remaining. In a [`Ticker`] the period is measured
    /// from the previous wake-up, so lateness accumulates: the baseline for
    /// comparisons.
    Relative,
    /// `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)` to the deadline.
    Absolute,
    /// Absolute sleep to the deadline minus the learnt wake-up latency
    /// ([`SlackEstimator`]), then busy-wait to the deadline.
    SlackCompensated,
    /// Busy-wait on the monotonic clock (one CPU at 100 %).
    BusyWait,
    /// Absolute sleep to `deadline − spin_ns`, then busy-wait to the deadline.
    Hybrid {
        /// The busy-wait tail in nanoseconds (at most [`MAX_HYBRID_SPIN_NS`];
        /// `hybrid` alone means [`DEFAULT_HYBRID_SPIN_NS`]).
        spin_ns: u64,
    },
}

impl SleepStrategy {
    /// The strategy a [`Ticker`] uses for `period` unless told otherwise.
    pub fn default_for(period: Duration) -> SleepStrategy {
        if period >= HYBRID_BELOW_PERIOD {
            SleepStrategy::SlackCompensated
        } else {
            let half = duration_ns(period) / 2;
            SleepStrategy::Hybrid {
                spin_ns: DEFAULT_HYBRID_SPIN_NS.min(half),
            }
        }
    }

    /// The names [`FromStr`] accepts (`hybrid` also as `hybrid:SPIN`).
    pub const NAMES: [&'static str; 5] = [
        "relative",
        "absolute",
        "slack-compensated",
        "busy-wait",
        "hybrid",
    ];
}

impl fmt::Display for SleepStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SleepStrategy::Relative => f.write_str("relative"),
            SleepStrategy::Absolute => f.write_str("absolute"),
            SleepStrategy::SlackCompensated => f.write_str("slack-compensated"),
            SleepStrategy::BusyWait => f.write_str("busy-wait"),
            SleepStrategy::Hybrid { spin_ns } if *spin_ns == DEFAULT_HYBRID_SPIN_NS => {
                f.write_str("hybrid")
            }
            SleepStrategy::Hybrid { spin_ns } => write!(f, "hybrid:{}", format_ns(*spin_ns)),
        }
    }
}

/// Why a string is not a [`SleepStrategy`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseStrategyError {
    /// Not one of [`SleepStrategy::NAMES`] (the trimmed input is carried).
    #[error(
        "unknown sleep strategy `{0}`: expected relative, absolute, slack-compensated, \
         busy-wait, hybrid or hybrid:SPIN (e.g. hybrid:50us)"
    )]
    Unknown(String),
    /// `hybrid:SPIN` with a spin time that is not a whole number with a unit
    /// of ns, us, ms or s, or is longer than [`MAX_HYBRID_SPIN_NS`].
    #[error(
        "bad busy-wait tail `{value}` in `hybrid:{value}`: {reason} \
         (write e.g. 50us, 200000ns or 1ms; at most 1s)"
    )]
    BadSpin {
        /// The text after `hybrid:`.
        value: String,
        /// What is wrong with it, e.g. "longer than 1s".
        reason: &'static str,
    },
}

impl FromStr for SleepStrategy {
    type Err = ParseStrategyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let (name, spin) = match lower.split_once(':') {
            Some((name, spin)) => (name, Some(spin)),
            None => (lower.as_str(), None),
        };
        match (name, spin) {
            ("relative", None) => Ok(SleepStrategy::Relative),
            ("absolute", None) => Ok(SleepStrategy::Absolute),
            ("slack-compensated", None) => Ok(SleepStrategy::SlackCompensated),
            ("busy-wait", None) => Ok(SleepStrategy::BusyWait),
            ("hybrid", None) => Ok(SleepStrategy::Hybrid {
                spin_ns: DEFAULT_HYBRID_SPIN_NS,
            }),
            ("hybrid", Some(spin)) => Ok(SleepStrategy::Hybrid {
                spin_ns: parse_spin_ns(spin)?,
            }),
            _ => Err(ParseStrategyError::Unknown(s.trim().to_string())),
        }
    }
}

impl TryFrom<String> for SleepStrategy {
    type Error = ParseStrategyError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<SleepStrategy> for String {
    fn from(s: SleepStrategy) -> String {
        s.to_string()
    }
}

fn parse_spin_ns(spin: &str) -> Result<u64, ParseStrategyError> {
    let bad = |reason| ParseStrategyError::BadSpin {
        value: spin.to_string(),
        reason,
    };
    let spin = spin.trim();
    let digits_end = spin
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(spin.len());
    let (digits, unit) = spin.split_at(digits_end);
    if digits.is_empty() {
        return Err(bad("expected a whole number with an optional unit"));
    }
    let value: u64 = digits.parse().map_err(|_| bad("number too large"))?;
    let scale = match unit.trim() {
        "" | "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => NS_PER_SEC,
        _ => return Err(bad("unknown unit (use ns, us, ms or s)")),
    };
    let ns = value
        .checked_mul(scale)
        .ok_or_else(|| bad("number too large"))?;
    if ns > MAX_HYBRID_SPIN_NS {
        return Err(bad("longer than 1s"));
    }
    Ok(ns)
}

fn format_ns(ns: u64) -> String {
    if ns != 0 && ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else if ns != 0 && ns % 1_000 == 0 {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

/// A running estimate of how late the kernel wakes a sleeping thread, used by
/// [`SleepStrategy::SlackCompensated`] to sleep that much early and busy-wait
/// the rest.
///
/// The estimate is an exponentially weighted moving average that rises fast
/// (weight 1/4) and falls slowly (weight 1/16): waking too late costs accuracy,
/// waking too early only a little CPU. It is bounded by `max_ns` so one huge
/// preemption cannot turn the ticker into a busy-waiter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlackEstimator {
    estimate_ns: u64,
    max_ns: u64,
    observations: u64,
}

impl SlackEstimator {
    /// The starting estimate: Linux' default timer slack (50 µs) plus syscall cost.
    pub const INITIAL_NS: u64 = 60_000;
    /// The default bound on the estimate.
    pub const DEFAULT_MAX_NS: u64 = 2_000_000;
    /// Headroom added to the estimate so that the typical wake-up is early.
    const MIN_HEADROOM_NS: u64 = 10_000;

    /// An estimator starting at [`INITIAL_NS`](Self::INITIAL_NS), bounded by
    /// [`DEFAULT_MAX_NS`](Self::DEFAULT_MAX_NS).
    pub fn new() -> SlackEstimator {
        SlackEstimator::with_max(SlackEstimator::DEFAULT_MAX_NS)
    }

    /// An estimator whose estimate never exceeds `max_ns`.
    pub fn with_max(max_ns: u64) -> SlackEstimator {
        SlackEstimator {
            estimate_ns: SlackEstimator::INITIAL_NS.min(max_ns),
            max_ns,
            observations: 0,
        }
    }

    /// The current estimate of the wake-up latency.
    pub fn estimate_ns(&self) -> u64 {
        self.estimate_ns
    }

    /// The bound the estimate never exceeds, in nanoseconds.
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Changes the bound, lowering the current estimate to it if above (a
    /// [`Ticker`] does this when its period changes).
    pub fn set_max_ns(&mut self, max_ns: u64) {
        self.max_ns = max_ns;
        self.estimate_ns = self.estimate_ns.min(max_ns);
    }

    /// How many wake-ups were observed.
    pub fn observations(&self) -> u64 {
        self.observations
    }

    /// How long before a deadline to wake: the estimate with 50 % and 10 µs of
    /// headroom, bounded by `max_ns`.
    pub fn headroom_ns(&self) -> u64 {
        (self.estimate_ns + self.estimate_ns / 2 + SlackEstimator::MIN_HEADROOM_NS).min(self.max_ns)
    }

    /// Records one observed wake-up latency (actual wake − requested wake).
    pub fn observe(&mut self, latency_ns: u64) {
        let latency = latency_ns.min(self.max_ns);
        if latency >= self.estimate_ns {
            self.estimate_ns += (latency - self.estimate_ns).div_ceil(4);
        } else {
            self.estimate_ns -= (self.estimate_ns - latency) / 16;
        }
        self.observations += 1;
    }
}

impl Default for SlackEstimator {
    fn default() -> Self {
        SlackEstimator::new()
    }
}

/// Waits until `CLOCK_MONOTONIC` reaches `deadline_mono_ns` using `strategy` and
/// returns the monotonic time read on waking (never earlier than the deadline).
/// `slack` is read and updated by [`SleepStrategy::SlackCompensated`] only.
pub fn sleep_until(
    deadline_mono_ns: u64,
    strategy: &SleepStrategy,
    slack: &mut SlackEstimator,
) -> u64 {
    match *strategy {
        SleepStrategy::Relative => {
            relative_sleep_until(deadline_mono_ns);
            spin_until(deadline_mono_ns)
        }
        SleepStrategy::Absolute => {
            absolute_sleep_until(deadline_mono_ns);
            spin_until(deadline_mono_ns)
        }
        SleepStrategy::SlackCompensated => {
            let wake_at = deadline_mono_ns.saturating_sub(slack.headroom_ns());
            if monotonic_ns() < wake_at {
                absolute_sleep_until(wake_at);
                slack.observe(monotonic_ns().saturating_sub(wake_at));
            }
            spin_until(deadline_mono_ns)
        }
        SleepStrategy::BusyWait => spin_until(deadline_mono_ns),
        SleepStrategy::Hybrid { spin_ns } => {
            let wake_at = deadline_mono_ns.saturating_sub(spin_ns);
            if monotonic_ns() < wake_at {
                absolute_sleep_until(wake_at);
            }
            spin_until(deadline_mono_ns)
        }
    }
}

/// Sleeps for `duration` from now with `strategy`; returns the wake time.
pub fn sleep_for(duration: Duration, strategy: &SleepStrategy, slack: &mut SlackEstimator) -> u64 {
    let deadline = monotonic_ns().saturating_add(duration_ns(duration));
    sleep_until(deadline, strategy, slack)
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn timespec_of(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / NS_PER_SEC) as libc::time_t,
        tv_nsec: (ns % NS_PER_SEC) as libc::c_long,
    }
}

/// Busy-waits until the monotonic clock reaches `deadline`; returns the time read.
fn spin_until(deadline: u64) -> u64 {
    loop {
        let now = monotonic_ns();
        if now >= deadline {
            return now;
        }
        std::hint::spin_loop();
    }
}

fn relative_sleep_until(deadline: u64) {
    loop {
        let now = monotonic_ns();
        if now >= deadline {
            return;
        }
        let request = timespec_of(deadline - now);
        // SAFETY: `request` is a valid timespec; a null remainder pointer is allowed.
        let rc = unsafe { libc::nanosleep(&request, std::ptr::null_mut()) };
        if rc != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // Cannot happen with a valid timespec; the caller busy-waits the rest.
            return;
        }
    }
}

fn absolute_sleep_until(deadline: u64) {
    let request = timespec_of(deadline);
    loop {
        // SAFETY: `request` is a valid timespec; with TIMER_ABSTIME no remainder
        // is written, so a null pointer is allowed.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &request,
                std::ptr::null_mut(),
            )
        };
        // clock_nanosleep returns the error number instead of setting errno.
        // Anything but EINTR cannot happen with a valid timespec; the caller
        // busy-waits the rest then.
        if rc != libc::EINTR {
            return;
        }
    }
}

/// Sets the calling thread's timer slack (`prctl(PR_SET_TIMERSLACK)`): how
/// much later than asked the kernel may wake it so that it can batch wake-ups.
/// The default for normal threads is 50 µs; a sampling thread can ask for 1 ns
/// to make absolute sleeps more accurate. 0 restores the thread's default.
pub fn set_thread_timer_slack(slack_ns: u64) -> std::io::Result<()> {
    let slack = libc::c_ulong::try_from(slack_ns)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, slack, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's current timer slack in nanoseconds.
pub fn thread_timer_slack() -> std::io::Result<u64> {
    // SAFETY: PR_GET_TIMERSLACK takes no pointer arguments.
    let rc = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    u64::try_from(rc).map_err(|_| std::io::Error::last_os_error())
}

/// Why a [`Ticker`] cannot be built with the requested period.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TickerError {
    /// A zero period.
    #[error("ticker period must be greater than zero")]
    ZeroPeriod,
    /// A period below [`MIN_PERIOD`] (also a rate above 1 GHz).
    #[error("ticker period {period:?} is shorter than the minimum of {min:?}")]
    PeriodTooShort {
        /// The period requested (zero for a rate too high to round to 1 ns).
        period: Duration,
        /// [`MIN_PERIOD`].
        min: Duration,
    },
    /// A period above [`MAX_PERIOD`] (one day).
    #[error("ticker period {period:?} is longer than the maximum of {max:?}")]
    PeriodTooLong {
        /// The period requested.
        period: Duration,
        /// [`MAX_PERIOD`].
        max: Duration,
    },
    /// A rate for [`Ticker::from_rate_hz`] that is zero, negative, NaN or
    /// infinite (carried, in Hz).
    #[error("ticker rate {0} Hz is not a positive finite number")]
    BadRate(f64),
}

fn validate_period(period: Duration) -> Result<u64, TickerError> {
    if period.is_zero() {
        Err(TickerError::ZeroPeriod)
    } else if period < MIN_PERIOD {
        Err(TickerError::PeriodTooShort {
            period,
            min: MIN_PERIOD,
        })
    } else if period > MAX_PERIOD {
        Err(TickerError::PeriodTooLong {
            period,
            max: MAX_PERIOD,
        })
    } else {
        Ok(duration_ns(period))
    }
}

/// One tick of a [`Ticker`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick {
    /// The tick's index on the grid: deadline = grid start + seq · period
    /// (continuing across [`Ticker::set_period`]).
    pub seq: u64,
    /// The deadline this tick was scheduled for (monotonic ns).
    pub deadline_ns: u64,
    /// When the thread actually woke (monotonic ns).
    pub woke_ns: u64,
    /// `woke_ns − deadline_ns`.
    pub lateness_ns: u64,
    /// Deadlines skipped just before this tick because the thread was late by
    /// more than a period.
    pub missed: u64,
}

impl Tick {
    /// The tick as the [`Timestamp`](crate::Timestamp) a sampler takes
    /// (`hwqos_pmu::Sampler::sample`): the monotonic time it woke at
    /// (no second clock read) and the wall clock read now.
    pub fn timestamp(&self) -> crate::Timestamp {
        crate::Timestamp {
            mono_ns: self.woke_ns,
            wall_ns: crate::time::wall_ns(),
        }
    }
}

/// A periodic ticker on absolute deadlines: tick `k` is due at exactly
/// `start + k·period`, so errors never accumulate.
///
/// When [`Ticker::wait`] is called less than a period after the next deadline
/// it returns at once (the tick is late). When the thread is late by more than
/// a period, the deadlines already passed are skipped, counted in
/// [`Tick::missed`], and the ticker waits for the next deadline on the same
/// grid.
///
/// ```
/// use hwqos_core::{SleepStrategy, Ticker};
/// use std::time::Duration;
///
/// let mut ticker = Ticker::new(Duration::from_millis(2))?.with_strategy(SleepStrategy::Absolute);
/// let first = ticker.wait();
/// let second = ticker.wait();
/// assert_eq!(second.seq, first.seq + 1 + second.missed);
/// assert_eq!(second.deadline_ns - first.deadline_ns, (second.seq - first.seq) * 2_000_000);
/// assert!(second.woke_ns >= second.deadline_ns);
/// # Ok::<(), hwqos_core::TickerError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Ticker {
    period_ns: u64,
    /// The deadline of tick `anchor_seq`; later deadlines are counted from it.
    anchor_ns: u64,
    anchor_seq: u64,
    next_seq: u64,
    strategy: SleepStrategy,
    slack: SlackEstimator,
    last_woke_ns: Option<u64>,
    last_deadline_ns: Option<u64>,
    lateness: LatencyHistogram,
    missed_total: u64,
}

impl Ticker {
    /// A ticker whose first tick is due one period from now, with the default
    /// strategy for the period ([`SleepStrategy::default_for`]).
    pub fn new(period: Duration) -> Result<Ticker, TickerError> {
        let period_ns = validate_period(period)?;
        Ticker::starting_at(period, monotonic_ns().saturating_add(period_ns))
    }

    /// A ticker whose first tick (seq 0) is due at `first_deadline_ns`
    /// (monotonic); pass the current time to tick at once.
    pub fn starting_at(period: Duration, first_deadline_ns: u64) -> Result<Ticker, TickerError> {
        let period_ns = validate_period(period)?;
        Ok(Ticker {
            period_ns,
            anchor_ns: first_deadline_ns,
            anchor_seq: 0,
            next_seq: 0,
            strategy: SleepStrategy::default_for(period),
            slack: SlackEstimator::with_max(slack_bound(period_ns)),
            last_woke_ns: None,
            last_deadline_ns: None,
            lateness: LatencyHistogram::new(),
            missed_total: 0,
        })
    }

    /// A ticker at `hz` ticks per second (period rounded to whole nanoseconds).
    pub fn from_rate_hz(hz: f64) -> Result<Ticker, TickerError> {
        if !(hz.is_finite() && hz > 0.0) {
            return Err(TickerError::BadRate(hz));
        }
        let period_ns = (1e9 / hz).round();
        if period_ns < 1.0 {
            return Err(TickerError::PeriodTooShort {
                period: Duration::from_nanos(0),
                min: MIN_PERIOD,
            });
        }
        // Saturates for absurdly low rates, which validation then rejects.
        Ticker::new(Duration::from_nanos(period_ns as u64))
    }

    /// The same ticker with another sleep strategy.
    pub fn with_strategy(mut self, strategy: SleepStrategy) -> Ticker {
        self.strategy = strategy;
        self
    }

    /// Changes the sleep strategy from the next [`wait`](Ticker::wait) on;
    /// the grid of deadlines stays.
    pub fn set_strategy(&mut self, strategy: SleepStrategy) {
        self.strategy = strategy;
    }

    /// The sleep strategy in use.
    pub fn strategy(&self) -> SleepStrategy {
        self.strategy
    }

    /// The period between deadlines (whole nanoseconds).
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The deadline of the next tick if the thread is on time.
    pub fn next_deadline_ns(&self) -> u64 {
        self.deadline_of(self.next_seq)
    }

    /// The learnt wake-up latency (used by [`SleepStrategy::SlackCompensated`]).
    pub fn slack(&self) -> &SlackEstimator {
        &self.slack
    }

    /// Changes the period. The new grid starts at the last tick's deadline (or
    /// keeps the first deadline if no tick happened yet), so the change adds no
    /// drift; tick numbers continue.
    pub fn set_period(&mut self, period: Duration) -> Result<(), TickerError> {
        let period_ns = validate_period(period)?;
        if let Some(last) = self.last_deadline_ns {
            self.anchor_ns = last;
            self.anchor_seq = self.next_seq - 1;
        }
        self.period_ns = period_ns;
        self.slack.set_max_ns(slack_bound(period_ns));
        Ok(())
    }

    fn deadline_of(&self, seq: u64) -> u64 {
        let steps = seq - self.anchor_seq;
        self.anchor_ns
            .saturating_add(steps.saturating_mul(self.period_ns))
    }

    /// Waits for the next tick and returns it.
    pub fn wait(&mut self) -> Tick {
        let now = monotonic_ns();
        let next_deadline = self.deadline_of(self.next_seq);
        let missed = deadlines_to_skip(next_deadline, self.period_ns, now);
        let seq = self.next_seq + missed;
        let deadline = self.deadline_of(seq);

        let wake_target = match (self.strategy, self.last_woke_ns) {
            // The naive loop: one period after the previous wake-up. It is never
            // before `deadline`, since the previous wake-up was not before its own.
            (SleepStrategy::Relative, Some(previous)) if missed == 0 => {
                previous.saturating_add(self.period_ns)
            }
            _ => deadline,
        };
        let woke = sleep_until(wake_target, &self.strategy, &mut self.slack);

        let lateness = woke.saturating_sub(deadline);
        self.lateness.record(lateness);
        self.missed_total += missed;
        self.next_seq = seq + 1;
        self.last_woke_ns = Some(woke);
        self.last_deadline_ns = Some(deadline);
        Tick {
            seq,
            deadline_ns: deadline,
            woke_ns: woke,
            lateness_ns: lateness,
            missed,
        }
    }

    /// Lateness and missed-tick statistics since creation or the last
    /// [`Ticker::reset_stats`].
    pub fn stats(&self) -> TickerStats {
        TickerStats {
            ticks: self.lateness.count(),
            missed: self.missed_total,
            mean_lateness_ns: self.lateness.mean().unwrap_or(0.0),
            p50_lateness_ns: self.lateness.percentile(50.0).unwrap_or(0),
            p99_lateness_ns: self.lateness.percentile(99.0).unwrap_or(0),
            max_lateness_ns: self.lateness.max().unwrap_or(0),
        }
    }

    /// The full lateness histogram.
    pub fn lateness_histogram(&self) -> &LatencyHistogram {
        &self.lateness
    }

    /// Starts [`stats`](Ticker::stats) and the lateness histogram afresh;
    /// the schedule and the learnt slack are kept.
    pub fn reset_stats(&mut self) {
        self.lateness.clear();
        self.missed_total = 0;
    }
}

/// Early wake-ups never exceed a quarter period (and 2 ms), so the busy-wait
/// share of a period stays bounded.
fn slack_bound(period_ns: u64) -> u64 {
    SlackEstimator::DEFAULT_MAX_NS.min(period_ns / 4)
}

/// How many deadlines, starting with `next_deadline` and spaced `period_ns`,
/// to skip at time `now`: none when less than a period late, otherwise all
/// that have passed.
fn deadlines_to_skip(next_deadline: u64, period_ns: u64, now: u64) -> u64 {
    let late = now.saturating_sub(next_deadline);
    if late > period_ns {
        late / period_ns + 1
    } else {
        0
    }
}

/// A summary of a ticker's lateness.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
///
/// Lateness is how long after its deadline a tick woke, in nanoseconds; the
/// percentiles come from a [`LatencyHistogram`] (within about 3 %). With no
/// tick yet every field is 0.
pub struct TickerStats {
    /// Ticks returned by [`Ticker::wait`].
    pub ticks: u64,
    /// Deadlines skipped because the thread was more than a period late (the
    /// sum of [`Tick::missed`]).
    pub missed: u64,
    /// Mean lateness (exact).
    pub mean_lateness_ns: f64,
    /// Median lateness.
    pub p50_lateness_ns: u64,
    /// 99th-percentile lateness.
    pub p99_lateness_ns: u64,
    /// Largest lateness (exact).
    pub max_lateness_ns: u64,
}

/// A histogram of nanosecond values with log-linear buckets (16 per power of
/// two, so percentiles are within about 3 % of the true value; values below 16
/// are exact), in fixed memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatencyHistogram {
    counts: Vec<u64>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

const SUB_BUCKET_BITS: u32 = 4;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;
const BUCKETS: usize = ((64 - SUB_BUCKET_BITS + 1) as usize) * SUB_BUCKETS as usize;

fn bucket_of(v: u64) -> usize {
    if v < SUB_BUCKETS {
        return v as usize;
    }
    let exponent = 63 - v.leading_zeros() - SUB_BUCKET_BITS;
    let mantissa = v >> exponent; // in [16, 32)
    ((exponent as u64 + 1) * SUB_BUCKETS + (mantissa - SUB_BUCKETS)) as usize
}

/// The smallest and largest value of a bucket.
fn bucket_range(index: usize) -> (u64, u64) {
    let index = index as u64;
    if index < SUB_BUCKETS {
        return (index, index);
    }
    let exponent = index / SUB_BUCKETS - 1;
    let mantissa = index % SUB_BUCKETS + SUB_BUCKETS;
    let low = mantissa << exponent;
    (low, low + ((1u64 << exponent) - 1))
}

impl LatencyHistogram {
    /// An empty histogram (its bucket array is allocated once, about 8 KiB).
    pub fn new() -> LatencyHistogram {
        LatencyHistogram {
            counts: vec![0; BUCKETS],
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Adds one value, in nanoseconds.
    pub fn record(&mut self, value_ns: u64) {
        self.counts[bucket_of(value_ns)] += 1;
        self.count += 1;
        self.sum += u128::from(value_ns);
        self.min = self.min.min(value_ns);
        self.max = self.max.max(value_ns);
    }

    /// The number of values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The smallest value recorded (exact); `None` when empty.
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// The largest value recorded (exact); `None` when empty.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// The exact sum of the recorded values, in nanoseconds.
    pub fn sum_ns(&self) -> u128 {
        self.sum
    }

    /// How many recorded values are at most `bound_ns`: the values of every
    /// bucket that lies wholly at or below it. Exact when `bound_ns` is the
    /// largest value of a bucket, as `2^k - 1` is for every `k` (what a
    /// Prometheus histogram's `le` buckets are made of); otherwise values in
    /// the bucket that straddles `bound_ns` are left out.
    pub fn count_at_most(&self, bound_ns: u64) -> u64 {
        // Buckets are contiguous and ascending: the first whose largest
        // value exceeds the bound ends the sum.
        let end = bucket_of(bound_ns);
        let whole = if bucket_range(end).1 == bound_ns {
            end + 1
        } else {
            end
        };
        self.counts[..whole].iter().sum()
    }

    /// The exact mean of the recorded values.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The `p`-th percentile (0–100, nearest rank), as the middle of its
    /// bucket clamped to the recorded minimum and maximum. `None` when empty or
    /// `p` is out of range.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        if self.count == 0 || !(0.0..=100.0).contains(&p) {
            return None;
        }
        let rank = ((p / 100.0 * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (index, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (low, high) = bucket_range(index);
                let middle = low + (high - low) / 2;
                return Some(middle.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// Adds every value recorded in `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Forgets every value recorded.
    pub fn clear(&mut self) {
        *self = LatencyHistogram::new();
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

/// Error statistics of a series of sleeps: for requested times `x_i` and
/// actual times `y_i`, the absolute error `a_i = y_i − x_i` and the relative
/// error `r_i = a_i / x_i`, with their sample means and variances (AESM, AESV,
/// RESM, RESV). Means near zero mean no bias; variances show per-sleep jitter.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SleepErrorStats {
    absolute: Welford,
    relative: Welford,
}

/// A summary of [`SleepErrorStats`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SleepErrorSummary {
    /// The number of sleeps recorded (relative errors leave out zero requests).
    pub n: u64,
    /// Absolute error sample mean, ns.
    pub aesm_ns: f64,
    /// Absolute error sample variance, ns².
    pub aesv_ns2: f64,
    /// Relative error sample mean.
    pub resm: f64,
    /// Relative error sample variance.
    pub resv: f64,
}

impl SleepErrorStats {
    /// No sleeps recorded yet.
    pub fn new() -> SleepErrorStats {
        SleepErrorStats::default()
    }

    /// Records one sleep of `requested_ns` that took `actual_ns`. A zero
    /// request adds to the absolute error only (its relative error is undefined).
    pub fn record(&mut self, requested_ns: u64, actual_ns: u64) {
        let error = actual_ns as f64 - requested_ns as f64;
        self.absolute.push(error);
        if requested_ns > 0 {
            self.relative.push(error / requested_ns as f64);
        }
    }

    /// The number of sleeps recorded.
    pub fn count(&self) -> u64 {
        self.absolute.n
    }

    /// The summary; `None` before any sleep was recorded. Variances need two
    /// sleeps and are 0 before.
    pub fn summary(&self) -> Option<SleepErrorSummary> {
        (self.absolute.n > 0).then(|| SleepErrorSummary {
            n: self.absolute.n,
            aesm_ns: self.absolute.mean,
            aesv_ns2: self.absolute.variance(),
            resm: self.relative.mean,
            resv: self.relative.variance(),
        })
    }
}

/// Welford's numerically stable running mean and variance.
#[derive(Clone, Debug, Default, PartialEq)]
struct Welford {
    n: u64,
    mean: f64,
    m2: f64,
}

impl Welford {
    fn push(&mut self, x: f64) {
        self.n += 1;
        let delta = x - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (x - self.mean);
    }

    fn variance(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            self.m2 / (self.n - 1) as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_timestamp_is_its_wake_time_and_the_wall_clock_now() {
        let tick = Tick {
            seq: 3,
            deadline_ns: 1_000,
            woke_ns: 1_250,
            lateness_ns: 250,
            missed: 0,
        };
        let before = crate::time::wall_ns();
        let t = tick.timestamp();
        let after = crate::time::wall_ns();
        assert_eq!(t.mono_ns, 1_250);
        assert!(before <= t.wall_ns && t.wall_ns <= after);
    }

    #[test]
    fn skipping_rule() {
        // On time or early: nothing to skip.
        assert_eq!(deadlines_to_skip(1_000, 100, 900), 0);
        assert_eq!(deadlines_to_skip(1_000, 100, 1_000), 0);
        // Late by up to a period: the late tick is still delivered.
        assert_eq!(deadlines_to_skip(1_000, 100, 1_100), 0);
        // 2.5 periods late (3.5 periods of work after the previous tick):
        // deadlines 1000, 1100 and 1200 have passed; the next is 1300.
        assert_eq!(deadlines_to_skip(1_000, 100, 1_250), 3);
        assert_eq!(deadlines_to_skip(1_000, 100, 1_101), 2);
        assert_eq!(deadlines_to_skip(1_000, 100, 1_200), 3);
    }

    #[test]
    fn histogram_buckets_cover_their_values() {
        for v in [0u64, 1, 15, 16, 17, 31, 32, 33, 1000, 123_456_789, u64::MAX] {
            let (low, high) = bucket_range(bucket_of(v));
            assert!(low <= v && v <= high, "{v} not in [{low}, {high}]");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        // Buckets are contiguous.
        for i in 1..BUCKETS {
            assert_eq!(bucket_range(i).0, bucket_range(i - 1).1 + 1, "bucket {i}");
        }
    }

    #[test]
    fn counts_at_most_a_bound_are_exact_on_bucket_edges() {
        let mut h = LatencyHistogram::new();
        for v in [5u64, 1023, 1024, 1025, 2047, 2048, 1_000_000] {
            h.record(v);
        }
        assert_eq!(h.sum_ns(), 5 + 1023 + 1024 + 1025 + 2047 + 2048 + 1_000_000);
        assert_eq!(h.count_at_most(4), 0);
        assert_eq!(h.count_at_most(5), 1);
        // 2^k - 1 is the largest value of a bucket: exact.
        assert_eq!(h.count_at_most(1023), 2);
        assert_eq!(h.count_at_most(2047), 5);
        assert_eq!(h.count_at_most((1 << 20) - 1), 7);
        assert_eq!(h.count_at_most(u64::MAX), 7);
        // 1024 and 1025 share the bucket [1024, 1087]: a bound inside it
        // leaves the whole bucket out.
        assert_eq!(bucket_range(bucket_of(1024)), (1024, 1087));
        assert_eq!(h.count_at_most(1030), 2);
        assert_eq!(h.count_at_most(1087), 4);
        assert_eq!(LatencyHistogram::new().count_at_most(u64::MAX), 0);
    }
}
