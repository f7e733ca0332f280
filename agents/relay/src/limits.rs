//! Bounds the link side puts on a peer: a budget of decompressed bytes per
//! peer address, a counting reader for the link bytes that earn the free
//! expansion, and warnings aggregated per interval (a flood must not turn
//! into a flood of log lines).

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, ReadBuf};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A token bucket of bytes per second that may go into debt: a message is
/// charged whole and its sender then waits until the debt is paid, so a
/// message larger than the burst still passes (slowly) and the long-run rate
/// is the configured one.
#[derive(Debug)]
pub struct Bucket {
    rate: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    /// A full bucket of `rate` bytes per second (burst: one second's worth).
    pub fn new(rate: u64) -> Self {
        let rate = rate as f64;
        Bucket {
            rate,
            state: Mutex::new((rate, Instant::now())),
        }
    }

    /// Takes `n` bytes; returns how long the caller must wait before going on.
    pub fn charge(&self, n: u64) -> Duration {
        let mut s = lock(&self.state);
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() * self.rate;
        s.0 = (s.0 + refill).min(self.rate) - n as f64;
        s.1 = now;
        if s.0 >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.0 / self.rate)
        }
    }
}

/// One [`Bucket`] per peer address, shared by that peer's connections and
/// dropped with its last one (so the map holds at most one entry per open
/// connection).
#[derive(Default)]
pub struct PeerBudgets {
    map: Mutex<HashMap<IpAddr, Arc<Bucket>>>,
}

/// A connection's share of its peer's bucket.
pub struct PeerBudget {
    owner: Arc<PeerBudgets>,
    ip: IpAddr,
    bucket: Option<Arc<Bucket>>,
}

impl PeerBudgets {
    /// The bucket of `ip` at `rate` bytes per second.
    pub fn get(self: &Arc<Self>, ip: IpAddr, rate: u64) -> PeerBudget {
        let bucket = lock(&self.map)
            .entry(ip)
            .or_insert_with(|| Arc::new(Bucket::new(rate)))
            .clone();
        PeerBudget {
            owner: self.clone(),
            ip,
            bucket: Some(bucket),
        }
    }

    /// Peers with a bucket now.
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    /// No peer has a bucket now (no link connection is open).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PeerBudget {
    /// The peer's bucket, shared with its other connections.
    pub fn bucket(&self) -> &Bucket {
        self.bucket.as_ref().expect("present until drop")
    }
}

impl Drop for PeerBudget {
    fn drop(&mut self) {
        let mut map = lock(&self.owner.map);
        drop(self.bucket.take());
        if map.get(&self.ip).is_some_and(|b| Arc::strong_count(b) == 1) {
            map.remove(&self.ip);
        }
    }
}

/// What one connection's link-to-application direction may deliver:
/// `free_ratio` decompressed bytes per link byte read, the rest from the
/// peer's bucket.
pub struct Expansion {
    /// The peer's bucket that pays for expansion beyond the free ratio.
    pub budget: PeerBudget,
    /// Decompressed bytes each link byte read lets through without charge
    /// (`free_expansion_ratio`).
    pub free_ratio: f64,
    /// Link bytes read on this connection so far (fed by a
    /// [`CountingReader`]).
    pub link_in: Arc<AtomicU64>,
    seen: u64,
}

impl Expansion {
    /// A budget that has seen no link bytes yet.
    pub fn new(budget: PeerBudget, free_ratio: f64, link_in: Arc<AtomicU64>) -> Self {
        Expansion {
            budget,
            free_ratio,
            link_in,
            seen: 0,
        }
    }

    /// Accounts a decompressed message of `len` bytes; returns the wait.
    pub fn charge(&mut self, len: usize) -> Duration {
        let now = self.link_in.load(Ordering::Relaxed);
        let earned = (now - self.seen) as f64 * self.free_ratio;
        self.seen = now;
        let excess = len as f64 - earned;
        if excess <= 0.0 {
            Duration::ZERO
        } else {
            self.budget.bucket().charge(excess as u64)
        }
    }
}

/// An [`AsyncRead`] that counts the bytes read through it.
pub struct CountingReader<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R> CountingReader<R> {
    /// Wraps `inner`; every byte read is added to `count`.
    pub fn new(inner: R, count: Arc<AtomicU64>) -> Self {
        CountingReader { inner, count }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CountingReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        r
    }
}

/// Warnings of one kind, aggregated: the first `burst` of an interval are
/// logged as they come, the rest are counted and summed up in one line when
/// the interval ends.
pub struct Aggregated {
    interval: Duration,
    burst: u64,
    state: Mutex<(Instant, u64, u64)>,
}

impl Aggregated {
    /// Logs at most `burst` occurrences per `interval`; the first interval
    /// starts now.
    pub fn new(interval: Duration, burst: u64) -> Self {
        Aggregated {
            interval,
            burst,
            state: Mutex::new((Instant::now(), 0, 0)),
        }
    }

    /// Whether this occurrence should be logged now (false: it was counted).
    pub fn allow(&self) -> bool {
        let mut s = lock(&self.state);
        if s.0.elapsed() >= self.interval && s.2 == 0 {
            *s = (Instant::now(), 0, 0);
        }
        if s.1 < self.burst {
            s.1 += 1;
            true
        } else {
            s.2 += 1;
            false
        }
    }

    /// At the end of an interval (or at once with `now`, e.g. when
    /// stopping): the occurrences counted but not logged in it (the caller
    /// logs them as one line), and a new interval starts.
    pub fn take_suppressed(&self, now: bool) -> Option<(u64, Duration)> {
        let mut s = lock(&self.state);
        let elapsed = s.0.elapsed();
        if elapsed < self.interval && !now {
            return None;
        }
        let n = s.2;
        *s = (Instant::now(), 0, 0);
        (n > 0).then_some((n, elapsed))
    }

    /// The aggregation interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_goes_into_debt_and_asks_for_the_wait() {
        let b = Bucket::new(1000);
        assert_eq!(b.charge(600), Duration::ZERO);
        let w = b.charge(900);
        // 500 bytes of debt at 1000 B/s: about half a second (less the
        // refill since the first charge).
        assert!(
            w > Duration::from_millis(300) && w <= Duration::from_millis(500),
            "{w:?}"
        );
    }

    #[test]
    fn a_peer_bucket_is_shared_and_dropped_with_its_last_connection() {
        let p = Arc::new(PeerBudgets::default());
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let a = p.get(ip, 1 << 20);
        let b = p.get(ip, 1 << 20);
        assert!(std::ptr::eq(a.bucket(), b.bucket()));
        assert_eq!(p.len(), 1);
        drop(a);
        assert_eq!(p.len(), 1);
        drop(b);
        assert!(p.is_empty());
    }

    #[test]
    fn the_free_ratio_is_earned_by_link_bytes() {
        let p = Arc::new(PeerBudgets::default());
        let link_in = Arc::new(AtomicU64::new(0));
        let mut e = Expansion::new(p.get("::1".parse().unwrap(), 65_536), 16.0, link_in.clone());
        link_in.store(1000, Ordering::Relaxed);
        // 16,000 bytes are free, 1 KiB more is within the burst.
        assert_eq!(e.charge(17_000), Duration::ZERO);
        // A bomb: 1 MiB from no new link bytes is 1 MiB of debt.
        assert!(e.charge(1 << 20) > Duration::from_secs(10));
    }

    #[test]
    fn warnings_beyond_the_burst_are_counted() {
        let a = Aggregated::new(Duration::from_secs(10), 2);
        assert!(a.allow());
        assert!(a.allow());
        assert!(!a.allow());
        assert!(!a.allow());
        // The interval is not over yet.
        assert_eq!(a.take_suppressed(false), None);
        lock(&a.state).0 -= Duration::from_secs(20);
        assert_eq!(a.take_suppressed(false).map(|x| x.0), Some(2));
        assert_eq!(a.take_suppressed(false), None);
        assert!(a.allow());
        assert!(a.allow());
        assert!(!a.allow());
        assert_eq!(a.take_suppressed(true).map(|x| x.0), Some(1));
        assert!(a.allow());
    }
}
