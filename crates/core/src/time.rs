//! Clocks: monotonic nanoseconds for measurement, wall-clock time for humans.

use serde::{Deserialize, Serialize};

/// A point in time on both clocks, taken together.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp {
    /// `CLOCK_MONOTONIC` in nanoseconds: the time base every computation uses.
    pub mono_ns: u64,
    /// `CLOCK_REALTIME` in nanoseconds since the Unix epoch: for humans and for
    /// lining recordings of different nodes up.
    pub wall_ns: i64,
}

impl Timestamp {
    /// Now, on both clocks.
    pub fn now() -> Timestamp {
        Timestamp {
            mono_ns: monotonic_ns(),
            wall_ns: wall_ns(),
        }
    }

    /// Seconds (monotonic) since `earlier`; negative if `earlier` is later.
    pub fn secs_since(&self, earlier: &Timestamp) -> f64 {
        (self.mono_ns as f64 - earlier.mono_ns as f64) / 1e9
    }
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; both clocks exist on every Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC) as u64
}

/// `CLOCK_REALTIME` in nanoseconds since the epoch.
pub fn wall_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME) as i64
}

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) as u64
}

/// This process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`) in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID) as u64
}

/// Formats wall-clock nanoseconds as RFC 3339 UTC with microseconds
/// (`2026-11-26T17:09:30.375821Z`), through jiff.
pub fn format_rfc3339(wall_ns: i64) -> String {
    // Every i64 of nanoseconds (years 1677 to 2262) is a valid jiff timestamp.
    match jiff::Timestamp::from_nanosecond(i128::from(wall_ns)) {
        Ok(ts) => format!("{ts:.6}"),
        Err(_) => format!("(invalid time {wall_ns} ns)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_never_goes_back() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
    }

    #[test]
    fn rfc3339_known_values() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00.000000Z");
        // 2026-11-22T13:45:37.5Z
        assert_eq!(
            format_rfc3339(1_795_355_137_500_000_000),
            "2026-11-22T13:45:37.500000Z"
        );
        assert_eq!(
            format_rfc3339(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000Z"
        );
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59.999999Z");
        assert_eq!(format_rfc3339(i64::MAX), "2262-04-11T23:47:16.854775Z");
    }
}
