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

/// Formats wall-clock nanoseconds as RFC 3339 UTC with microseconds.
pub fn format_rfc3339(wall_ns: i64) -> String {
    let secs = wall_ns.div_euclid(1_000_000_000);
    let micros = wall_ns.rem_euclid(1_000_000_000) / 1000;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
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
    }
}
