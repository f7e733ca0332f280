//! What the transport under a stream knows about its sending side (issue
//! 25): whether the sender is ahead of the link (bytes written and not yet
//! sent) and how fast the peer actually receives (bytes acknowledged over
//! time). On Linux TCP sockets this is `TCP_INFO`.
//!
//! Probes measure the link from the RTTs of small and padded probes. That
//! works for request/response traffic, where the probes find an empty
//! queue; on a bulk stream both kinds wait behind the same standing queue
//! of megabytes, their difference is noise (mostly ≤ 0, so the link looked
//! free and `none` ranked first). A backlogged sender instead learns the
//! link from the bytes the peer acknowledged per unit of time while the
//! send queue never ran dry: that is the link's rate, whatever the queue.

use std::os::fd::RawFd;
use std::time::Instant;

/// One reading of the transport's sending state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TransportSample {
    /// When it was read (ns on any monotonic clock the source keeps).
    pub at_ns: u64,
    /// Bytes written to the transport and not yet sent (TCP:
    /// `tcpi_notsent_bytes`): more than 0 means the sender is ahead of the
    /// link.
    pub unsent_bytes: u64,
    /// Bytes the peer acknowledged since the connection started (TCP:
    /// `tcpi_bytes_acked`).
    pub acked_bytes: u64,
    /// Lowest round-trip time seen (TCP: `tcpi_min_rtt`), ns: the path
    /// without queues.
    pub rtt_ns: Option<u64>,
    /// Time the sender spent limited by the peer's receive window since the
    /// connection started (TCP: `tcpi_rwnd_limited`, kernel 4.10+), ns: a
    /// peer that does not read fast enough, not the link.
    pub peer_limited_ns: Option<u64>,
}

/// A source of [`TransportSample`]s for [`crate::Endpoint::set_transport`].
pub trait TransportInfo: Send {
    /// The transport's state now; `None` when it cannot be read (the
    /// reading is then skipped).
    fn sample(&mut self) -> Option<TransportSample>;
}

/// `TCP_INFO` of a TCP socket, read by file descriptor. The descriptor is
/// borrowed: the caller keeps the socket open while the endpoint sends
/// (after it closes, readings fail and are ignored).
pub struct TcpInfo {
    fd: RawFd,
    epoch: Instant,
}

impl TcpInfo {
    /// Reads `TCP_INFO` of the TCP socket `fd` (borrowed; see above).
    pub fn new(fd: RawFd) -> Self {
        TcpInfo {
            fd,
            epoch: Instant::now(),
        }
    }
}

impl TransportInfo for TcpInfo {
    fn sample(&mut self) -> Option<TransportSample> {
        // SAFETY: tcp_info is plain data; getsockopt writes at most `len`
        // bytes into the value we own and sets `len` to what it wrote.
        let (info, len) = unsafe {
            let mut info: libc::tcp_info = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
            let r = libc::getsockopt(
                self.fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            );
            if r != 0 {
                return None;
            }
            (info, len as usize)
        };
        // Kernels before 4.6 (bytes_acked) / 4.6 (notsent_bytes) return a
        // shorter struct: no reading rather than zeros.
        let needed = std::mem::offset_of!(libc::tcp_info, tcpi_notsent_bytes) + 4;
        if len < needed {
            return None;
        }
        let rwnd = std::mem::offset_of!(libc::tcp_info, tcpi_rwnd_limited) + 8;
        Some(TransportSample {
            at_ns: self.epoch.elapsed().as_nanos() as u64,
            unsent_bytes: u64::from(info.tcpi_notsent_bytes),
            acked_bytes: info.tcpi_bytes_acked,
            rtt_ns: (info.tcpi_min_rtt > 0).then(|| u64::from(info.tcpi_min_rtt) * 1000),
            peer_limited_ns: (len >= rwnd).then(|| info.tcpi_rwnd_limited.saturating_mul(1000)),
        })
    }
}

/// Shortest stretch of continuous backlog that measures the link's rate:
/// ACKs arrive in bursts (delayed ACKs, GRO), so shorter stretches are noisy.
pub const MIN_BACKLOG_INTERVAL_NS: u64 = 10_000_000;

/// Longest a pipelined sender goes without a backlog before it probes the
/// link (see [`BulkEstimate::link_probe_due`]).
pub const LINK_PROBE_EVERY_NS: u64 = 500_000_000;
/// Longest a link probe lasts.
pub const LINK_PROBE_NS: u64 = 50_000_000;

/// Measurements of the link's cost the estimate is the lowest of.
pub const RECENT_STRETCHES: usize = 8;

/// Fewest bytes acknowledged over a stretch of backlog for its rate to
/// count (keeps the stretch's start until then).
pub const MIN_STRETCH_BYTES: u64 = 64 * 1024;

/// Fewest bytes acknowledged over an interval for its rate to bound the
/// link's cost (fewer could all have been in flight at its start).
pub const MIN_BOUND_BYTES: u64 = 256 * 1024;

/// The link as a backlogged sender sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BulkEstimate {
    /// Share of recent readings that found the sender backlogged
    /// (moving average, weight 0.1 per reading).
    pub backlogged: f64,
    /// Link cost (ns per wire byte): the lowest of the recent measurements
    /// (see [`BulkEstimate::observe`]), if any.
    pub link_ns_per_byte: Option<f64>,
    /// The last [`RECENT_STRETCHES`] measurements (ns per byte).
    recent: std::collections::VecDeque<f64>,
    /// When the last reading was taken and when the link was last measured
    /// (or a link probe started), on the readings' clock.
    last_at_ns: u64,
    measured_at_ns: u64,
    /// Share of the recent rounds' wall time this end spent compressing
    /// (moving average, weight 0.3 per round; see
    /// [`BulkEstimate::observe_round`]).
    pub cpu_busy: f64,
    /// Readings taken and stretches measured.
    pub readings: u64,
    /// See `readings`: stretches of continuous backlog measured.
    pub stretches: u64,
    /// Bytes waiting in the transport at the last reading.
    pub last_unsent: u64,
    /// Start of the current stretch of continuous backlog.
    start: Option<TransportSample>,
    /// The reading that starts the current interval of any kind.
    any_start: Option<TransportSample>,
}

impl BulkEstimate {
    /// Takes one reading.
    pub fn observe(&mut self, s: TransportSample) {
        self.readings += 1;
        self.last_at_ns = s.at_ns;
        let backlogged = s.unsent_bytes > 0;
        let w = (1.0 / self.readings as f64).max(0.1);
        self.backlogged += w * (f64::from(u8::from(backlogged)) - self.backlogged);
        self.last_unsent = s.unsent_bytes;
        // Whatever the queue did, the peer cannot acknowledge faster than
        // the link delivers: a rate seen over any interval bounds the
        // link's cost from above. While the sender is not backlogged (it
        // compresses more slowly than the link sends) this is the only
        // news about the link, and it corrects an estimate that a slow
        // receiver or a stall once made too high.
        match self.any_start {
            Some(a) => {
                let dt = s.at_ns.saturating_sub(a.at_ns);
                let acked = s.acked_bytes.saturating_sub(a.acked_bytes);
                if dt >= MIN_BACKLOG_INTERVAL_NS && acked >= MIN_BOUND_BYTES {
                    if self.link_ns_per_byte.is_some() {
                        self.record(dt as f64 / acked as f64);
                    }
                    self.any_start = Some(s);
                } else if dt >= 1_000_000_000 {
                    // Too few bytes for a bound in a second: start over.
                    self.any_start = Some(s);
                }
            }
            None => self.any_start = Some(s),
        }
        if !backlogged {
            // The queue ran dry: what was acknowledged since says how fast
            // we wrote, not how fast the link is.
            self.start = None;
            return;
        }
        let Some(start) = self.start else {
            self.start = Some(s);
            return;
        };
        let dt = s.at_ns.saturating_sub(start.at_ns);
        // Bytes already past the bottleneck at the start are acknowledged
        // within the stretch too: a stretch of several path RTTs keeps them
        // a small part of what it counts.
        let min_dt = MIN_BACKLOG_INTERVAL_NS.max(4 * start.rtt_ns.unwrap_or(0));
        if dt < min_dt {
            return;
        }
        let acked = s.acked_bytes.saturating_sub(start.acked_bytes);
        // A handful of bytes acknowledged in a stretch (the peer not reading
        // yet, at the start) says nothing about the link's rate: one such
        // stretch once priced the link at 14 µs per byte.
        if acked < MIN_STRETCH_BYTES {
            return;
        }
        // A stretch in which the peer's receive window held the sender back
        // for more than a quarter of the time measured the peer (a
        // receiver short of CPU), not the link: it is not counted.
        if let (Some(a), Some(b)) = (start.peer_limited_ns, s.peer_limited_ns) {
            if b.saturating_sub(a) > dt / 4 {
                self.start = Some(s);
                return;
            }
        }
        self.stretches += 1;
        self.measured_at_ns = s.at_ns;
        self.record(dt as f64 / acked as f64);
        self.start = Some(s);
    }

    /// A pipelined sender that has not been backlogged for
    /// [`LINK_PROBE_EVERY_NS`] (it compresses more slowly than it believes
    /// the link sends) cannot see a link faster than that belief: what the
    /// peer acknowledges is then its own output rate. Time to send a
    /// stretch with the cheapest codec, which backlogs any link the belief
    /// undervalued and measures it (like BBR's bandwidth probing).
    pub fn link_probe_due(&self) -> bool {
        self.is_pipelined()
            && !self.is_backlogged()
            && self.link_ns_per_byte.is_some()
            && self.last_at_ns.saturating_sub(self.measured_at_ns) >= LINK_PROBE_EVERY_NS
    }

    /// A link probe starts now (the next one is due in [`LINK_PROBE_EVERY_NS`]).
    pub fn start_link_probe(&mut self) {
        self.measured_at_ns = self.last_at_ns;
    }

    /// Stretches of backlog measured so far.
    pub fn measurements(&self) -> u64 {
        self.stretches
    }

    /// Every measurement is the link's cost plus whatever held the
    /// pipeline up (a retransmission timeout after a tail drop at the
    /// rate limiter stalled one start for 280 ms; a busy peer): the lowest
    /// of the recent ones is the link's, as BBR keeps the highest recent
    /// delivery rate.
    fn record(&mut self, v: f64) {
        if self.recent.len() == RECENT_STRETCHES {
            self.recent.pop_front();
        }
        self.recent.push_back(v);
        self.link_ns_per_byte = self.recent.iter().copied().reduce(f64::min);
    }

    /// A round ended that took `wall_ns`, of which this end spent
    /// `busy_ns` compressing (messages and samples).
    pub fn observe_round(&mut self, wall_ns: u64, busy_ns: u64) {
        if wall_ns > 0 {
            let v = (busy_ns as f64 / wall_ns as f64).min(1.0);
            self.cpu_busy += 0.3 * (v - self.cpu_busy);
        }
    }

    /// Messages go out back to back, so the stages of consecutive messages
    /// (compression, the link, decompression) overlap: the sender is mostly
    /// ahead of the link (link-bound), or it spends most of its time
    /// compressing (CPU-bound; the link then waits for it). Only with a
    /// transport that reports (without one, nothing is known about the
    /// queue, and an in-memory loop is always "busy").
    pub fn is_pipelined(&self) -> bool {
        self.is_backlogged() || (self.readings > 0 && self.cpu_busy >= 0.5)
    }

    /// How long the bytes waiting in the transport keep the link busy
    /// (ns), at the measured link cost; 0 when either is unknown.
    pub fn queued_ns(&self) -> f64 {
        self.link_ns_per_byte
            .map_or(0.0, |v| v * self.last_unsent as f64)
    }

    /// Most recent readings found the sender ahead of the link.
    pub fn is_backlogged(&self) -> bool {
        self.readings > 0 && self.backlogged >= 0.5
    }
}
