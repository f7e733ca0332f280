//! The per-stream engine without I/O: the send procedure (round boundaries,
//! policy, budget, probes, off-path sampling) and the receive procedure
//! (decoding, decompression statistics, probe replies) of thesis 7.2.4.
//!
//! The blocking and async streams ([`crate::stream`], and
//! `crate::async_stream` with the `tokio` feature) only move bytes between
//! a socket and an [`Endpoint`]; anything else that
//! frames bytes (a simulated network, a fuzzer) can drive it the same way.

use crate::codec::{Codec, CodecId, Registry};
use crate::history::{StreamDecoder, StreamEncoder};
use crate::learn::Learner;
use crate::policy::{AdaptiveTuning, PolicyKind, Selector};
use crate::throttle::{CpuLoad, CpuThrottle, SharedThrottle, ThrottleConfig};
use crate::transport::{TransportInfo, TransportSample, LINK_PROBE_NS};
use crate::wire::{
    write_control, DecompressReport, FrameKind, Header, Hello, Limits, LinkProbe, LinkProbeReply,
    RawFrame, WireError, DEFAULT_MAX_MESSAGE, FLAG_CHECKSUM, FLAG_RESET, FLAG_STREAM,
};
use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Where the adaptive policy compresses its samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// On the sending thread, right after the message has been written to
    /// the connection, while it is in flight (default): the streams call
    /// [`Endpoint::run_deferred_sample`] after their write. A caller that
    /// drives an [`Endpoint`] directly must do the same, or its samples are
    /// dropped. On loopback this kept adaptive's median round trip level
    /// with uncompressed, where a background thread added about 3 µs
    /// (docs/experiments/compression.md).
    AfterSend,
    /// On a background thread shared by all streams of the process.
    Background,
    /// In the send call, after the message is framed (deterministic; tests).
    Inline,
    /// No sampling: the adaptive policy learns only from what it sends.
    Off,
}

/// Everything that configures one stream.
#[derive(Clone, Debug)]
pub struct StreamConfig {
    /// How the codec of each message is chosen.
    pub policy: PolicyKind,
    /// Largest message accepted and sent (uncompressed bytes).
    pub max_message: u32,
    /// Append a CRC-32 of each message to its header.
    pub checksum: bool,
    /// Messages per round (definition 21).
    pub round_messages: u32,
    /// A probe every this many messages (0: no probes).
    pub probe_every: u32,
    /// Padding of every other probe, to measure the per-byte link cost.
    pub probe_pad: u32,
    /// EWMA weight of a new round's observations.
    pub alpha: f64,
    /// A known one-way link cost (ns per byte) instead of the measured one.
    pub link_ns_per_byte: Option<f64>,
    /// The CPU throttle; `None` gives compression an unlimited budget.
    pub throttle: Option<ThrottleConfig>,
    /// Where the adaptive policy's codec samples run.
    pub sampling: Sampling,
    /// Exploration and sampling parameters of the adaptive policy.
    pub adaptive: AdaptiveTuning,
    /// Seed of the per-message draw of `majority`.
    pub seed: u64,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            policy: PolicyKind::Adaptive,
            max_message: DEFAULT_MAX_MESSAGE,
            checksum: false,
            round_messages: 100,
            probe_every: 16,
            // More than one packet: a padding that ends inside the first packet
            // of a write is not delayed by its own length (see `encode`).
            probe_pad: 2048,
            alpha: 0.3,
            link_ns_per_byte: None,
            throttle: Some(ThrottleConfig::default()),
            sampling: Sampling::AfterSend,
            adaptive: AdaptiveTuning::default(),
            seed: 0x9e37_79b9_7f4a_7c15,
        }
    }
}

/// Counters and estimates of one stream, for metrics.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct StreamStats {
    /// Application messages sent.
    pub messages_sent: u64,
    /// Application messages received.
    pub messages_received: u64,
    /// Application bytes handed to `send_msg`.
    pub app_bytes_sent: u64,
    /// Bytes written to the connection (headers, probes and hello included).
    pub wire_bytes_sent: u64,
    /// Application bytes delivered by `recv_msg` (uncompressed).
    pub app_bytes_received: u64,
    /// Bytes read from the connection (headers and control frames included).
    pub wire_bytes_received: u64,
    /// Messages sent per codec name.
    pub sent_per_codec: BTreeMap<String, u64>,
    /// Messages sent uncompressed because the round's budget was spent.
    pub throttled_messages: u64,
    /// Codec samples the sampler measured (adaptive).
    pub samples: u64,
    /// Time the sampler spent (warm-ups included) and the credit it earned
    /// (adaptive; see [`AdaptiveTuning::gain_share`]).
    pub sample_ns: u64,
    /// See `sample_ns`: the sampling credit earned so far, in ns.
    pub sample_credit_ns: f64,
    /// The most one sample cost (ns).
    pub max_sample_ns: u64,
    /// CPU time of the sampler's first, untimed run of each codec.
    pub warm_up_ns: u64,
    /// Padding of the padded probes (adapted to the link).
    pub probe_pad: u32,
    /// Smoothed round-trip time from the probes, in ns; `None` before the first reply.
    pub rtt_ns: Option<f64>,
    /// Estimated one-way link cost, in ns per byte (configured or measured);
    /// `None` while unknown.
    pub link_ns_per_byte: Option<f64>,
    /// Link changes the probes' RTTs showed (each restarts the link estimate).
    pub link_changes: u64,
    /// Probes sent, padded ones included.
    pub probes: u64,
    /// Padded probes sent (the learning policies' own extra traffic).
    pub padded_probes: u64,
    /// This round's compression budget (`None`: unlimited) and what is spent.
    pub budget_ns: Option<u64>,
    /// Compression time spent this round, in ns.
    pub spent_ns: u64,
    /// The throttle's current share of one CPU for compression; `None` without a throttle.
    pub cpu_share: Option<f64>,
    /// The last CPU utilization the throttle read, in [0, 1]; `None` without a
    /// throttle or before its first reading.
    pub cpu_utilization: Option<f64>,
    /// Name of the codec the policy currently chooses.
    pub chosen: String,
    /// Index of the current round (counted from 0).
    pub round: u64,
    /// The transport's view (see [`Endpoint::set_transport`]): messages go
    /// out back to back and predictions use the slowest stage; the share
    /// of readings that found the sender ahead of the link; the link cost
    /// from bytes the peer acknowledged while it was.
    pub pipelined: bool,
    /// See `pipelined`: the share of transport readings, in [0, 1], that found
    /// the sender ahead of the link.
    pub backlogged: f64,
    /// Link probes: stretches sent with the cheapest codec by a pipelined
    /// sender that had not been ahead of the link for a while.
    pub link_probes: u64,
    /// See `pipelined`: the link cost from acknowledged bytes, in ns per byte;
    /// `None` until measured.
    pub delivered_link_ns_per_byte: Option<f64>,
}

struct SampleJob {
    codec: Arc<dyn Codec>,
    data: Arc<[u8]>,
    /// What a stream codec's sample is primed with (empty for the others).
    history: Arc<[u8]>,
    reply: mpsc::Sender<SampleResult>,
}

#[derive(Clone, Copy, Debug)]
struct SampleResult {
    codec: CodecId,
    bytes_in: usize,
    bytes_out: usize,
    compress_ns: u64,
    decompress_ns: u64,
    /// Untimed first run of the codec on this thread (cost, not estimate).
    warm_up_ns: u64,
    /// A stream codec's priming with the history: part of the sample's
    /// cost (it counts against the sampling credit), not of the estimate.
    prime_ns: u64,
}

/// A stream codec's sampling contexts on one thread.
type SampleContexts = (CodecId, Box<dyn StreamEncoder>, Box<dyn StreamDecoder>);

thread_local! {
    /// Codec ids this thread has already run once (bit per id).
    static WARM: std::cell::Cell<[u64; 4]> = const { std::cell::Cell::new([0; 4]) };
    /// This thread's contexts for samples of stream codecs, one pair per codec.
    static SAMPLE_CONTEXTS: std::cell::RefCell<Vec<SampleContexts>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `codec` once untimed on this thread if it never ran here: the first
/// call pays for thread-local contexts and fresh heap pages (a first bzip2-9
/// or lzma-6 call took about a millisecond where later ones took 50–150 µs),
/// which would make one cold sample rank the codec far too slow. Returns the
/// time the warm-up took (0 when the codec was warm).
fn warm_up(codec: &dyn Codec, data: &[u8]) -> u64 {
    let id = codec.id().0 as usize;
    let (word, bit) = (id / 64, 1u64 << (id % 64));
    let mut warm = WARM.with(|w| w.get());
    if warm[word] & bit != 0 {
        return 0;
    }
    warm[word] |= bit;
    WARM.with(|w| w.set(warm));
    let t0 = thread_cpu_ns();
    let mut c = Vec::new();
    if codec.compress(data, &mut c).is_ok() {
        let mut d = Vec::new();
        let _ = codec.decompress(&c, data.len(), &mut d);
    }
    thread_cpu_ns().saturating_sub(t0)
}

/// This thread's CPU time (ns). Samples are timed in CPU time, not wall
/// time: a sample preempted for a millisecond on a busy node would
/// otherwise count a millisecond against the sampling credit and stop
/// exploration for thousands of messages.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Samples a stream codec as the stream would use it: its sampling
/// contexts are reset and primed with `history` (the stream's last
/// messages; untimed, reported as warm-up), then `data` is compressed and
/// decompressed as the next stream frame, timed. The ratio and costs are
/// then those of a message with history, as the stream sends it, not those
/// of a message on its own; the priming's time is reported apart
/// (`prime_ns`): the stream pays it, the estimate does not include it.
fn run_stream_sample(codec: &dyn Codec, data: &[u8], history: &[u8]) -> Option<SampleResult> {
    SAMPLE_CONTEXTS.with(|cell| {
        let mut all = cell.borrow_mut();
        let i = match all.iter().position(|(id, _, _)| *id == codec.id()) {
            Some(i) => i,
            None => {
                all.push((codec.id(), codec.stream_encoder()?, codec.stream_decoder()?));
                all.len() - 1
            }
        };
        let (_, enc, dec) = &mut all[i];
        let t0 = thread_cpu_ns();
        let mut c = Vec::new();
        let mut d = Vec::new();
        enc.compress(history, true, &mut c).ok()?;
        dec.decompress(&c, true, history.len(), &mut d).ok()?;
        c.clear();
        let t1 = thread_cpu_ns();
        enc.compress(data, false, &mut c).ok()?;
        let t2 = thread_cpu_ns();
        dec.decompress(&c, false, data.len(), &mut d).ok()?;
        let t3 = thread_cpu_ns();
        Some(SampleResult {
            codec: codec.id(),
            bytes_in: data.len(),
            bytes_out: c.len(),
            compress_ns: t2.saturating_sub(t1),
            decompress_ns: t3.saturating_sub(t2),
            warm_up_ns: 0,
            prime_ns: t1.saturating_sub(t0),
        })
    })
}

fn run_sample(codec: &dyn Codec, data: &[u8], history: &[u8]) -> Option<SampleResult> {
    if codec.is_stream() {
        return run_stream_sample(codec, data, history);
    }
    let warm_up_ns = warm_up(codec, data);
    let mut c = Vec::with_capacity(data.len() / 2 + 64);
    let t0 = thread_cpu_ns();
    codec.compress(data, &mut c).ok()?;
    let t1 = thread_cpu_ns();
    let compress_ns = t1.saturating_sub(t0);
    let mut d = Vec::new();
    codec.decompress(&c, data.len(), &mut d).ok()?;
    let decompress_ns = thread_cpu_ns().saturating_sub(t1);
    Some(SampleResult {
        codec: codec.id(),
        bytes_in: data.len(),
        bytes_out: c.len(),
        compress_ns,
        decompress_ns,
        warm_up_ns,
        prime_ns: 0,
    })
}

/// The process-wide sampler thread; jobs beyond its queue are dropped.
fn sampler() -> &'static mpsc::SyncSender<SampleJob> {
    static SAMPLER: OnceLock<mpsc::SyncSender<SampleJob>> = OnceLock::new();
    SAMPLER.get_or_init(|| {
        let (tx, rx) = mpsc::sync_channel::<SampleJob>(64);
        std::thread::Builder::new()
            .name("hwqos-sampler".into())
            .spawn(move || {
                // Samples run at nice 19: they take idle CPU freely but yield
                // to everything else (SCHED_IDLE starved them entirely on a
                // busy node, and the stream never learned).
                // SAFETY: setpriority on this thread's own id; no memory is passed.
                let _ = unsafe {
                    libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19)
                };
                while let Ok(job) = rx.recv() {
                    // Always answer, so the stream's in-flight count drops.
                    let r = run_sample(job.codec.as_ref(), &job.data, &job.history).unwrap_or(
                        SampleResult {
                            codec: job.codec.id(),
                            bytes_in: 0,
                            bytes_out: 0,
                            compress_ns: 0,
                            decompress_ns: 0,
                            warm_up_ns: 0,
                            prime_ns: 0,
                        },
                    );
                    let _ = job.reply.send(r);
                }
            })
            .expect("spawn the sampler thread");
        tx
    })
}

const MAX_PENDING_PROBES: usize = 64;
/// Probes sent with the first messages, one each (small and padded in turn).
const INITIAL_PROBES: u32 = 8;
/// The replies to the first probes are not used: they include the peer's
/// cold start (first allocations, a new thread), which made one loopback
/// stream estimate the link at 193 ns per byte.
const COLD_PROBES: u32 = 2;
/// Most unspent sampling credit, in messages' worth of credit at the current
/// rate: credit saved while nothing needed a sample must not pay for a long
/// burst later.
const MAX_CREDIT_MESSAGES: f64 = 200.0;
/// Largest padding of a padded probe: 8 KiB is 66 µs at 1 Gbit/s, enough to
/// stand out of the RTT jitter of a fast link.
const MAX_PROBE_PAD: u32 = 8 * 1024;
/// Messages from this size on are timed in thread CPU time, like samples:
/// a compression preempted on a busy node (a relay read of 16 KiB took
/// 10 ms of wall time) must not price the codec 100 times too high. Smaller
/// ones keep the monotonic clock, whose read costs tens of ns where the
/// CPU clock's system call costs a few hundred — a few % of a 256-byte
/// message's compression.
const CPU_TIMED_BYTES: usize = 4096;
/// Longest piece of a message that a sample compresses.
const MAX_SAMPLE_BYTES: usize = 64 * 1024;
/// History a stream codec's sample is primed with: the last 64 KiB sent.
/// (The stream's own context holds 512 KiB or 8 MiB; 64 KiB is most of the
/// gain on generated text, though not on data that repeats from far back,
/// and priming costs about as much as the sample.)
const HISTORY_BYTES: usize = 64 * 1024;
/// Probes sent one per message after a link change, like the first ones.
const REPROBES: u32 = 6;
/// Padded probe RTTs with the current padding after which the link estimate
/// counts as steady and only every [`STEADY_PAD_EVERY`]th padded slot
/// carries its padding (the others go as small probes).
const STEADY_PADDED: usize = 6;
const STEADY_PAD_EVERY: u32 = 4;

/// One end of a message stream: sends with its policy, receives anything.
pub struct Endpoint {
    registry: Arc<Registry>,
    config: StreamConfig,
    limits: Limits,
    peer: Option<Hello>,
    send_codecs: Vec<CodecId>,
    checksum_out: bool,
    learner: Learner,
    selector: Selector,
    throttle: Option<CpuThrottle>,
    /// The process's throttle, when streams share one (replaces `throttle`).
    shared_throttle: Option<SharedThrottle>,
    round_index: u64,
    sent_in_round: u32,
    round_started: Instant,
    budget_ns: Option<u64>,
    spent_ns: u64,
    /// Sampler time over the stream's life.
    sample_ns: u64,
    /// Sampling credit earned over the stream's life (ns; adaptive).
    sample_credit_ns: f64,
    /// Padding of the next padded probe (adapted to the link).
    probe_pad: u32,
    /// Samples handed to the sampler thread and not yet answered.
    samples_in_flight: u32,
    /// `Sampling::AfterSend`: the codec and message of the pending sample.
    deferred_codec: Option<Arc<dyn Codec>>,
    deferred_msg: Vec<u8>,
    /// `Sampling::AfterSend`: the history a pending stream-codec sample is primed with.
    deferred_history: Vec<u8>,
    /// Sending contexts of the stream codecs used so far, each with "the
    /// next frame starts a new context" (see [`crate::history`]).
    stream_encoders: BTreeMap<CodecId, (Box<dyn StreamEncoder>, bool)>,
    /// Receiving contexts of the stream codecs the peer used so far.
    stream_decoders: BTreeMap<CodecId, Box<dyn StreamDecoder>>,
    /// The last [`HISTORY_BYTES`] (up to twice that) of the messages sent,
    /// kept while a stream codec may be sampled: its samples are primed with them.
    history: Vec<u8>,
    /// Whether `history` is kept (the adaptive policy may send a stream codec).
    keep_history: bool,
    probe_seq: u32,
    /// Probes with a sequence number below this go one per message (the
    /// first ones, and again after a link change).
    dense_until_seq: u32,
    /// Messages until the next probe (0: with the next message).
    until_probe: u32,
    pending_probes: VecDeque<(u32, u64)>,
    /// The peer's probes this end has answered and not yet stamped with the
    /// hold time: (sequence number, when the probe was decoded).
    unstamped_replies: VecDeque<(u32, u64)>,
    recv_reports: BTreeMap<CodecId, DecompressReport>,
    sample_tx: mpsc::Sender<SampleResult>,
    sample_rx: mpsc::Receiver<SampleResult>,
    stats: StreamStats,
    sent_counts: BTreeMap<CodecId, u64>,
    scratch: Vec<u8>,
    epoch: Instant,
    last_codec: CodecId,
    /// The transport's sending state (TCP_INFO), read at most every
    /// [`TRANSPORT_EVERY_NS`].
    transport: Option<Box<dyn TransportInfo>>,
    last_transport_ns: Option<u64>,
    /// Time this end spent compressing in this round (messages and samples).
    round_busy_ns: u64,
    /// A link probe (see `BulkEstimate::link_probe_due`): until when, and
    /// the transport's measurement count when it started.
    link_probe: Option<(u64, u64)>,
}

/// Shortest interval between two transport readings (a `TCP_INFO` call
/// costs about a microsecond; messages may come every few).
const TRANSPORT_EVERY_NS: u64 = 1_000_000;

impl Endpoint {
    /// A stream end with `config`; its throttle (if any) reads `/proc/stat`.
    pub fn new(config: StreamConfig, registry: Arc<Registry>) -> Self {
        let load: Option<Box<dyn CpuLoad>> = config.throttle.map(|t| t.cpu_aggregate.source());
        Endpoint::with_cpu_load(config, registry, load)
    }

    /// Like [`Endpoint::new`] with another CPU-load source (simulations, tests).
    pub fn with_cpu_load(
        config: StreamConfig,
        registry: Arc<Registry>,
        load: Option<Box<dyn CpuLoad>>,
    ) -> Self {
        let throttle = match (config.throttle, load) {
            (Some(t), Some(l)) => Some(CpuThrottle::new(t, l)),
            (Some(t), None) => Some(CpuThrottle::new(t, t.cpu_aggregate.source())),
            _ => None,
        };
        let (sample_tx, sample_rx) = mpsc::channel();
        let selector = Selector::new(
            config.policy.clone(),
            vec![CodecId::NONE],
            &registry,
            config.seed,
        )
        .with_tuning(config.adaptive);
        Endpoint {
            limits: Limits {
                max_message: config.max_message,
            },
            learner: Learner::new(config.alpha, config.link_ns_per_byte),
            budget_ns: throttle.as_ref().map(CpuThrottle::initial_budget_ns),
            throttle,
            shared_throttle: None,
            selector,
            registry,
            peer: None,
            send_codecs: vec![CodecId::NONE],
            checksum_out: config.checksum,
            round_index: 0,
            sent_in_round: 0,
            round_started: Instant::now(),
            spent_ns: 0,
            sample_ns: 0,
            sample_credit_ns: 0.0,
            probe_pad: config.probe_pad,
            samples_in_flight: 0,
            deferred_codec: None,
            deferred_msg: Vec::new(),
            deferred_history: Vec::new(),
            stream_encoders: BTreeMap::new(),
            stream_decoders: BTreeMap::new(),
            history: Vec::new(),
            keep_history: false,
            probe_seq: 0,
            dense_until_seq: INITIAL_PROBES,
            until_probe: 0,
            pending_probes: VecDeque::new(),
            unstamped_replies: VecDeque::new(),
            recv_reports: BTreeMap::new(),
            sample_tx,
            sample_rx,
            stats: StreamStats::default(),
            sent_counts: BTreeMap::new(),
            scratch: Vec::new(),
            epoch: Instant::now(),
            last_codec: CodecId::NONE,
            transport: None,
            last_transport_ns: None,
            round_busy_ns: 0,
            link_probe: None,
            config,
        }
    }

    /// The limits incoming frames are checked against.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The codecs this end can use.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// This end's handshake.
    pub fn hello(&self) -> Hello {
        Hello {
            max_message: self.config.max_message,
            decoders: self.registry.ids(),
            want_checksum: self.config.checksum,
        }
    }

    /// Appends this end's hello frame.
    pub fn write_hello(&mut self, out: &mut Vec<u8>) {
        let before = out.len();
        write_control(FrameKind::Hello, &self.hello().encode(), out);
        self.stats.wire_bytes_sent += (out.len() - before) as u64;
    }

    /// Takes the peer's hello frame: from now on only codecs both ends have
    /// are sent.
    pub fn accept_hello(&mut self, frame: RawFrame) -> Result<(), WireError> {
        if frame.header.kind != FrameKind::Hello {
            return Err(WireError::Handshake(format!(
                "expected the peer's hello, got a {:?} frame",
                frame.header.kind
            )));
        }
        if self.peer.is_some() {
            return Err(WireError::Handshake("a second hello".into()));
        }
        self.stats.wire_bytes_received += (frame.payload.len() + crate::wire::HEADER_LEN) as u64;
        let hello = Hello::decode(&frame.payload)?;
        self.send_codecs = self
            .registry
            .ids()
            .into_iter()
            .filter(|c| hello.decoders.contains(c))
            .collect();
        self.checksum_out = self.config.checksum || hello.want_checksum;
        self.keep_history = self.config.policy == PolicyKind::Adaptive
            && self.config.sampling != Sampling::Off
            && self
                .send_codecs
                .iter()
                .any(|c| self.registry.get(*c).is_some_and(|c| c.is_stream()));
        self.selector = Selector::new(
            self.config.policy.clone(),
            self.send_codecs.clone(),
            &self.registry,
            self.config.seed,
        )
        .with_tuning(self.config.adaptive);
        self.peer = Some(hello);
        Ok(())
    }

    /// Runs the handshake with `peer` in memory, without a connection (for
    /// simulations, tests and benchmarks): each end takes the other's hello.
    pub fn handshake_in_memory(&mut self, peer: &mut Endpoint) -> Result<(), WireError> {
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        self.write_hello(&mut mine);
        peer.write_hello(&mut theirs);
        let hello = |bytes: &[u8], limits| {
            crate::wire::parse_all(bytes, limits)?
                .into_iter()
                .next()
                .ok_or_else(|| WireError::Handshake("no hello".into()))
        };
        self.accept_hello(hello(&theirs, self.limits())?)?;
        peer.accept_hello(hello(&mine, peer.limits())?)
    }

    /// The codecs this end may send with (after the handshake).
    pub fn send_codecs(&self) -> &[CodecId] {
        &self.send_codecs
    }

    /// The largest message that may be sent: the smaller of both ends' limits.
    pub fn max_send(&self) -> u32 {
        self.peer.as_ref().map_or(self.config.max_message, |p| {
            p.max_message.min(self.config.max_message)
        })
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Changes the policy at the next round boundary's state (keeps learning).
    pub fn set_policy(&mut self, policy: PolicyKind) {
        self.config.policy = policy.clone();
        let mut s = Selector::new(
            policy,
            self.send_codecs.clone(),
            &self.registry,
            self.config.seed,
        )
        .with_tuning(self.config.adaptive);
        s.start_round(&self.learner, false);
        self.selector = s;
    }

    /// Replaces the throttle, a shared one included (`None`: unlimited
    /// budget); a new throttle starts from its initial budget and reads the
    /// source its `cpu_aggregate` names.
    pub fn set_throttle(&mut self, throttle: Option<ThrottleConfig>) {
        self.shared_throttle = None;
        self.config.throttle = throttle;
        self.throttle = throttle.map(|t| CpuThrottle::new(t, t.cpu_aggregate.source()));
        self.budget_ns = self.throttle.as_ref().map(CpuThrottle::initial_budget_ns);
    }

    /// Draws compression time from `shared`, the process's one throttle,
    /// instead of this stream's own (`None`: back to the configured own
    /// throttle, starting from its initial budget).
    pub fn set_shared_throttle(&mut self, shared: Option<SharedThrottle>) {
        match shared {
            Some(t) => {
                self.config.throttle = Some(t.config());
                self.throttle = None;
                self.budget_ns = None;
                self.shared_throttle = Some(t);
            }
            None => self.set_throttle(self.config.throttle),
        }
    }

    /// Changes the round length (from the next round).
    pub fn set_round_messages(&mut self, n: u32) {
        self.config.round_messages = n.max(1);
    }

    /// Changes the throttle's CPU target.
    pub fn set_cpu_target(&mut self, target: f64) {
        if let Some(t) = &mut self.throttle {
            t.set_target(target);
        }
        if let Some(t) = &self.shared_throttle {
            t.set_target(target);
        }
        if let Some(t) = &mut self.config.throttle {
            t.target = target;
        }
    }

    /// Reads the transport's sending state (see [`crate::transport`]) from
    /// `transport` — for a TCP socket, [`crate::TcpInfo`] on its
    /// descriptor — at most every millisecond, before a message is framed.
    /// A sender that is mostly ahead of the link then prices the link by
    /// the bytes the peer acknowledged over time instead of by probes that
    /// wait behind its own queue, and ranks codecs by their slowest stage.
    pub fn set_transport(&mut self, transport: Option<Box<dyn TransportInfo>>) {
        self.transport = transport;
        self.last_transport_ns = None;
    }

    /// Takes one transport reading (what [`Endpoint::set_transport`]'s
    /// source gives; transports without one may call this directly).
    pub fn observe_transport(&mut self, sample: TransportSample) {
        self.learner.net.bulk.observe(sample);
    }

    /// During a link probe, the cheapest compressing codec instead of `chosen`.
    fn link_probe_codec(&mut self, chosen: CodecId) -> CodecId {
        let now = self.now_ns();
        let bulk = &mut self.learner.net.bulk;
        if self.link_probe.is_none() && bulk.link_probe_due() {
            bulk.start_link_probe();
            self.link_probe = Some((now + LINK_PROBE_NS, bulk.measurements()));
            self.stats.link_probes += 1;
            #[cfg(feature = "tracing")]
            tracing::trace!(backlogged = bulk.backlogged, "link probe");
        }
        match self.link_probe {
            Some((until, at)) if now < until && bulk.measurements() == at => self
                .send_codecs
                .iter()
                .copied()
                .find(|&c| c != CodecId::NONE)
                .unwrap_or(chosen),
            Some(_) => {
                self.link_probe = None;
                chosen
            }
            None => chosen,
        }
    }

    fn poll_transport(&mut self) {
        let Some(t) = self.transport.as_mut() else {
            return;
        };
        let now = self.epoch.elapsed().as_nanos() as u64;
        if self
            .last_transport_ns
            .is_some_and(|last| now.saturating_sub(last) < TRANSPORT_EVERY_NS)
        {
            return;
        }
        self.last_transport_ns = Some(now);
        if let Some(s) = t.sample() {
            self.learner.net.bulk.observe(s);
        }
    }

    /// What the stream has learned of codec and network rates.
    pub fn learner(&self) -> &Learner {
        &self.learner
    }

    /// The codec selection policy and its state.
    pub fn selector(&self) -> &Selector {
        &self.selector
    }

    /// The codec of the last message sent.
    pub fn last_codec(&self) -> CodecId {
        self.last_codec
    }

    fn drain_samples(&mut self) {
        while let Ok(r) = self.sample_rx.try_recv() {
            self.samples_in_flight = self.samples_in_flight.saturating_sub(1);
            self.absorb_sample(r);
        }
    }

    fn absorb_sample(&mut self, r: SampleResult) {
        if r.bytes_in == 0 {
            self.stats.warm_up_ns += r.warm_up_ns;
            return; // a failed sample
        }
        self.learner
            .observe_compression(r.codec, r.bytes_in, r.bytes_out, r.compress_ns);
        self.learner
            .observe_local_decompression(r.codec, r.bytes_in, r.decompress_ns);
        // Warm-ups are a one-time cost per codec and thread, not a price of
        // this stream's exploration: they count against the CPU budget but
        // not against the sampling credit (a 100 µs zstd context set-up
        // would otherwise stall exploration for hundreds of messages).
        // A stream codec's priming is paid by every one of its samples: it
        // counts against both, but not in the codec's estimate.
        let cost = r.compress_ns + r.decompress_ns + r.prime_ns;
        self.charge(cost + r.warm_up_ns);
        self.round_busy_ns += cost + r.warm_up_ns;
        self.sample_ns += cost;
        self.stats.warm_up_ns += r.warm_up_ns;
        self.stats.max_sample_ns = self.stats.max_sample_ns.max(cost);
        self.stats.samples += 1;
    }

    fn end_round(&mut self) {
        self.drain_samples();
        let now = Instant::now();
        let wall = now.duration_since(self.round_started).as_nanos() as u64;
        let adaptive = self.config.policy == PolicyKind::Adaptive;
        let threshold = self.config.adaptive.change_threshold;
        self.learner
            .net
            .bulk
            .observe_round(wall, std::mem::take(&mut self.round_busy_ns));
        let summary = self.learner.end_round(adaptive.then_some(threshold));
        let changed = adaptive && summary.max_ratio_change > threshold;
        self.selector.start_round(&self.learner, changed);
        #[cfg(feature = "tracing")]
        if tracing::enabled!(tracing::Level::TRACE) {
            let size = self.learner.message_size.get().unwrap_or(256.0);
            let bulk = &self.learner.net.bulk;
            tracing::trace!(
                round = self.round_index,
                chosen = %self.registry.get(self.selector.chosen()).map_or("?", |c| c.name()),
                burst = self.selector.in_burst(),
                backoff = self.selector.backoff(),
                pipelined = self.learner.pipelined(),
                backlogged = bulk.backlogged,
                link_ns_per_byte = ?self.learner.net.link_ns_per_byte(),
                size,
                predictions = ?self
                    .send_codecs
                    .iter()
                    .filter_map(|&c| Some((self.registry.get(c)?.name(), self.learner.predict(c, size)?)))
                    .collect::<Vec<_>>(),
                "round"
            );
        }
        let used = self.spent_ns;
        let previous = self.budget_ns.unwrap_or(0);
        self.budget_ns = self
            .throttle
            .as_mut()
            .map(|t| t.next_budget(wall, used, previous));
        self.round_index += 1;
        self.sent_in_round = 0;
        self.spent_ns = 0;
        self.round_started = now;
    }

    fn budget_left(&self) -> bool {
        match &self.shared_throttle {
            Some(shared) => shared.has_budget(),
            None => self.budget_ns.is_none_or(|b| self.spent_ns < b),
        }
    }

    /// Charges compression time (sending, samples, warm-ups, decompression)
    /// to this round's budget and to the shared throttle, if any.
    fn charge(&mut self, ns: u64) {
        self.spent_ns += ns;
        if let Some(shared) = &self.shared_throttle {
            shared.charge(ns);
        }
    }

    /// Frames `msg` (and, when due, a probe before it) into `out`; returns
    /// the codec used. The caller writes `out` to the connection.
    ///
    /// The steps, each its own method: check the size, close the round when
    /// it is full, choose a codec (policy, link probe, CPU budget), compress,
    /// write a link probe when one is due (after compressing, see
    /// `Endpoint::write_probe_if_due`), write the data frame, offer the
    /// message to the sampler, count.
    pub fn encode(&mut self, msg: &[u8], out: &mut Vec<u8>) -> Result<CodecId, WireError> {
        let limit = self.max_send();
        if msg.len() > limit as usize {
            return Err(WireError::MessageTooLarge {
                len: msg.len(),
                limit,
            });
        }
        self.drain_samples();
        self.poll_transport();
        self.deferred_codec = None;
        if self.sent_in_round >= self.round_len().max(1) {
            self.end_round();
        }
        let start_len = out.len();
        self.learner.observe_message_size(msg.len());
        let chosen = self.choose_codec();
        // `Some` (codec and stream flags) when `scratch` holds the payload.
        let compressed = self.compress_into_scratch(chosen, msg);
        self.write_probe_if_due(out);
        let codec_id = self.write_data_frame(msg, compressed, out);
        self.offer_sample(msg);
        self.remember(msg);
        self.count_sent(codec_id, msg.len(), (out.len() - start_len) as u64);
        Ok(codec_id)
    }

    /// Keeps the end of `msg` in the history stream-codec samples are primed
    /// with (when one may be sampled). Amortised: the buffer grows to twice
    /// [`HISTORY_BYTES`] before its front is dropped.
    fn remember(&mut self, msg: &[u8]) {
        if !self.keep_history {
            return;
        }
        let tail = &msg[msg.len().saturating_sub(HISTORY_BYTES)..];
        if self.history.len() + tail.len() > 2 * HISTORY_BYTES {
            let keep = HISTORY_BYTES - tail.len();
            let drop = self.history.len().saturating_sub(keep);
            self.history.drain(..drop);
        }
        self.history.extend_from_slice(tail);
    }

    /// The history a stream codec's sample is primed with.
    fn sample_history(&self) -> &[u8] {
        &self.history[self.history.len().saturating_sub(HISTORY_BYTES)..]
    }

    /// How many messages the current round holds: shorter while learning.
    fn round_len(&self) -> u32 {
        if self.round_index == 0 || self.selector.learning() {
            match self.config.policy {
                // A pipelined stream's messages are large and come back to
                // back: while learning, it decides at every message (a
                // round boundary costs microseconds; five 256 KiB messages
                // sent uncompressed cost 100 ms at 100 Mbit/s).
                PolicyKind::Adaptive if self.learner.pipelined() => 1,
                PolicyKind::Adaptive => self
                    .config
                    .round_messages
                    .min(self.config.adaptive.learning_round),
                _ => self.config.round_messages,
            }
        } else {
            self.config.round_messages
        }
    }

    /// The codec the policy picks for the next message, or none when the
    /// CPU budget of the round is spent.
    fn choose_codec(&mut self) -> CodecId {
        let mut codec_id = self.selector.pick();
        // Only a stream with transport readings can be pipelined (and
        // message streams skip the clock read).
        if self.config.policy == PolicyKind::Adaptive && self.learner.net.bulk.readings > 0 {
            codec_id = self.link_probe_codec(codec_id);
        }
        if codec_id != CodecId::NONE && !self.budget_left() {
            codec_id = CodecId::NONE;
            self.stats.throttled_messages += 1;
        }
        codec_id
    }

    /// Compresses `msg` with `codec_id` into `scratch`, charges the time and
    /// teaches the learner; `Some((codec_id, flags))` when the frame carries
    /// `scratch` (`flags`: the stream flags of a stream codec's frame), `None`
    /// to send `msg` as is.
    ///
    /// A message compressed by a stream codec is always sent compressed,
    /// even if it grew (zstd stores an incompressible block with a 3-byte
    /// header): the sending context has taken it into its history, so the
    /// receiver's must too. A stream codec never sees an empty message (it
    /// goes as `none`, leaving the context as it is). When a stream
    /// codec fails, its context starts anew with its next frame.
    fn compress_into_scratch(&mut self, codec_id: CodecId, msg: &[u8]) -> Option<(CodecId, u8)> {
        if codec_id == CodecId::NONE {
            return None;
        }
        let codec = self
            .registry
            .get(codec_id)
            .expect("negotiated codecs are registered")
            .clone();
        let stream = codec.is_stream();
        if stream && msg.is_empty() {
            return None;
        }
        self.scratch.clear();
        let mut reset = false;
        let mut run = |scratch: &mut Vec<u8>| -> bool {
            if !stream {
                return codec.compress(msg, scratch).is_ok();
            }
            let Some((enc, reset_due)) = (match self.stream_encoders.entry(codec_id) {
                std::collections::btree_map::Entry::Occupied(e) => Some(e.into_mut()),
                std::collections::btree_map::Entry::Vacant(v) => {
                    codec.stream_encoder().map(|enc| v.insert((enc, true)))
                }
            }) else {
                return false;
            };
            reset = *reset_due;
            let ok = enc.compress(msg, reset, scratch).is_ok();
            // A failed compression leaves the context unusable: the next
            // frame of this codec starts a new one.
            *reset_due = !ok;
            ok
        };
        let ok;
        let ns = if msg.len() >= CPU_TIMED_BYTES {
            let t0 = thread_cpu_ns();
            ok = run(&mut self.scratch);
            thread_cpu_ns().saturating_sub(t0)
        } else {
            let t0 = Instant::now();
            ok = run(&mut self.scratch);
            t0.elapsed().as_nanos() as u64
        };
        self.charge(ns);
        self.round_busy_ns += ns;
        if ok {
            self.learner
                .observe_compression(codec_id, msg.len(), self.scratch.len(), ns);
        }
        if ok && stream {
            Some((codec_id, FLAG_STREAM | if reset { FLAG_RESET } else { 0 }))
        } else if ok && self.scratch.len() < msg.len() {
            Some((codec_id, 0))
        } else {
            None
        }
    }

    /// Writes a link probe into `out` when one is due. The probe goes first
    /// and is stamped after compression, so its RTT holds the network and
    /// the peer, not this end's compression time.
    /// (Its end lies in the first packet of the write, so a padding shorter
    /// than a packet hardly delays it: the padding grows until the delay
    /// stands out, see `NetworkEstimate::next_pad`.) While adaptive
    /// confidently sends uncompressed (a fast link) probes back off with
    /// its sampling, at most 64 times so RTT and link cost still follow
    /// the network; while it compresses they keep their pace.
    fn write_probe_if_due(&mut self, out: &mut Vec<u8>) {
        if !(self.peer.is_some() && self.config.probe_every > 0 && self.until_probe == 0) {
            return;
        }
        // Not before three padded probes measured the link with the
        // current padding (the padding may still have to grow).
        let settled = self.learner.net.fixed_link_ns_per_byte.is_some()
            || self.learner.net.padded_rtts.len() >= 3;
        let backoff = if settled && self.selector.chosen() == CodecId::NONE {
            self.selector.backoff().min(64)
        } else {
            1
        };
        // The first probes (small and padded in turn) go with the first
        // messages, so the link is measured after a few messages instead
        // of a few `probe_every`.
        let dense = self.probe_seq < self.dense_until_seq;
        self.until_probe = if dense {
            1
        } else {
            self.config.probe_every * backoff
        };
        let pad = self.next_probe_pad(dense);
        self.stats.probes += 1;
        if pad > 0 {
            self.stats.padded_probes += 1;
        }
        let sent_ns = self.now_ns();
        let p = LinkProbe {
            seq: self.probe_seq,
            sent_ns,
            pad,
        };
        write_control(FrameKind::Probe, &p.encode(), out);
        if self.pending_probes.len() >= MAX_PENDING_PROBES {
            self.pending_probes.pop_front();
        }
        self.pending_probes
            .push_back((self.probe_seq, u64::from(pad)));
        self.probe_seq = self.probe_seq.wrapping_add(1);
    }

    /// The padding of the probe about to be sent: small and padded probes
    /// alternate; `dense` while the first probes (or those after a link
    /// change) go one per message.
    fn next_probe_pad(&self, dense: bool) -> u32 {
        // Only the learning policies need the link's per-byte cost.
        let learning = matches!(
            self.config.policy,
            PolicyKind::Adaptive | PolicyKind::Majority
        );
        // A configured link cost needs no padded probes. Once the
        // estimate is steady, only every 4th padded slot is padded: the
        // padding is the learning policies' own traffic (8 KiB every 32
        // messages each way cost ~2.5% of the RTT at 1 Gbit/s), and a
        // link change shows in the small probes' RTTs too
        // (`Learner::observe_rtt`), which restarts the dense probing.
        // Nor does a pipelined stream: its probes wait behind its own
        // queue, and the transport measures the link.
        let measuring =
            self.learner.net.fixed_link_ns_per_byte.is_none() && !self.learner.pipelined();
        let steady = !dense && self.learner.net.padded_rtts.len() >= STEADY_PADDED;
        let slot = self.probe_seq % 2 == 1;
        let padded = slot && (!steady || (self.probe_seq / 2) % STEADY_PAD_EVERY == 0);
        if learning && measuring && padded {
            self.probe_pad
        } else {
            0
        }
    }

    /// Writes the data frame of `msg`: the compressed form in `scratch` when
    /// `compressed` names its codec, `msg` itself otherwise. Returns the
    /// codec of the frame.
    fn write_data_frame(
        &self,
        msg: &[u8],
        compressed: Option<(CodecId, u8)>,
        out: &mut Vec<u8>,
    ) -> CodecId {
        let (codec_id, stream_flags, payload): (CodecId, u8, &[u8]) = match compressed {
            Some((codec, flags)) => (codec, flags, &self.scratch),
            None => (CodecId::NONE, 0, msg),
        };
        let checksum = self.checksum_out.then(|| crc32fast::hash(msg));
        Header {
            kind: FrameKind::Data,
            codec: codec_id,
            flags: stream_flags | if checksum.is_some() { FLAG_CHECKSUM } else { 0 },
            uncompressed_len: msg.len() as u32,
            payload_len: payload.len() as u32,
        }
        .write(out);
        if let Some(c) = checksum {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out.extend_from_slice(payload);
        codec_id
    }

    /// Earns sampling credit for `msg` and, when the selector wants to
    /// explore a codec and the credit, the shares and the link allow it,
    /// samples that codec on (the start of) `msg`.
    fn offer_sample(&mut self, msg: &[u8]) {
        let earned = self.selector.sample_credit_ns(msg.len());
        self.sample_credit_ns = (self.sample_credit_ns + earned)
            .min(self.sample_ns as f64 + MAX_CREDIT_MESSAGES * earned);
        let Some((candidate, cost_per_byte)) = self.selector.explore() else {
            return;
        };
        let t = self.selector.tuning();
        let share = if self.selector.in_burst() {
            t.burst_share
        } else {
            t.explore_share
        };
        // The sampler's share is over the stream's life, so a slow
        // codec's sample is paid back over the following rounds.
        let elapsed = self.epoch.elapsed().as_nanos() as f64;
        // One sample in flight at a time: the share check then sees the
        // cost of every sample it allowed before allowing the next.
        // The sample's expected cost must fit in the credit: the sampler
        // never spends more than a share of what compression could save.
        // A large message is sampled on its first MAX_SAMPLE_BYTES:
        // costs per byte and the ratio of a 64 KiB piece stand for the
        // whole, and a slow codec's first sample of a 256 KiB relay
        // read (lzma, bzip2: 100 ms or more) no longer stalls the stream.
        let sample = &msg[..msg.len().min(MAX_SAMPLE_BYTES)];
        let expected = cost_per_byte * sample.len() as f64;
        // A sender ahead of the link waits for it anyway: a sample
        // shorter than the time the queued bytes keep the link busy
        // takes no time from the stream, so neither the wall-time share
        // nor (before the link is measured, when nothing has earned
        // credit yet; only the cheapest codec is sampled then) the
        // credit holds it back — one at a time, within the CPU budget.
        // A longer one (lzma on 256 KiB takes 50 ms or more) would let
        // the queue run dry and stall the whole pipeline: it waits for
        // a longer queue. (The expected cost of an unmeasured codec is
        // its hint, a lower bound: hence a quarter of the queue.)
        let bulk = &self.learner.net.bulk;
        let unmeasured_link = self.learner.net.link_ns_per_byte().is_none();
        let fits_queue = expected <= 0.25 * bulk.queued_ns();
        let backlogged = bulk.is_backlogged();
        let free = backlogged && (unmeasured_link || fits_queue);
        let stalls = backlogged && !unmeasured_link && !fits_queue;
        if self.samples_in_flight == 0
            && !stalls
            && self.budget_left()
            && (free || (self.sample_ns as f64) <= share * elapsed)
            && ((free && unmeasured_link)
                || self.sample_ns as f64 + expected <= self.sample_credit_ns)
        {
            if let Some(codec) = self.registry.get(candidate).cloned() {
                match self.config.sampling {
                    Sampling::Background => {
                        let history: Arc<[u8]> = if codec.is_stream() {
                            Arc::from(self.sample_history())
                        } else {
                            Arc::from(&[][..])
                        };
                        let job = SampleJob {
                            codec,
                            data: Arc::from(sample),
                            history,
                            reply: self.sample_tx.clone(),
                        };
                        if sampler().try_send(job).is_ok() {
                            self.samples_in_flight += 1;
                        }
                    }
                    Sampling::AfterSend => {
                        self.deferred_msg.clear();
                        self.deferred_msg.extend_from_slice(sample);
                        self.deferred_history.clear();
                        if codec.is_stream() {
                            let h =
                                &self.history[self.history.len().saturating_sub(HISTORY_BYTES)..];
                            self.deferred_history.extend_from_slice(h);
                        }
                        self.deferred_codec = Some(codec);
                    }
                    Sampling::Inline => {
                        if let Some(r) = run_sample(codec.as_ref(), sample, self.sample_history()) {
                            self.absorb_sample(r);
                        }
                    }
                    Sampling::Off => {}
                }
            }
        }
    }

    /// Counts one sent message of `app_bytes` that took `wire_bytes`.
    fn count_sent(&mut self, codec_id: CodecId, app_bytes: usize, wire_bytes: u64) {
        self.until_probe = self.until_probe.saturating_sub(1);
        self.sent_in_round += 1;
        self.last_codec = codec_id;
        self.stats.messages_sent += 1;
        self.stats.app_bytes_sent += app_bytes as u64;
        self.stats.wire_bytes_sent += wire_bytes;
        *self.sent_counts.entry(codec_id).or_default() += 1;
    }

    /// Sets, in the probe replies among `frames`, how long this end held
    /// each of them since it decoded the probe (see [`LinkProbeReply::held_ns`]).
    /// Call it on the reply frames [`decode`](Self::decode) appended, right
    /// before they are written; replies not stamped tell the peer a hold
    /// time of 0, and their round trip then includes the wait.
    pub fn stamp_replies(&mut self, frames: &mut [u8]) {
        if self.unstamped_replies.is_empty() {
            return;
        }
        let now = self.now_ns();
        let answered = &mut self.unstamped_replies;
        LinkProbeReply::stamp_held(frames, |seq| {
            let i = answered.iter().position(|(s, _)| *s == seq)?;
            let (_, decoded) = answered.remove(i)?;
            Some(now.saturating_sub(decoded).min(u64::from(u32::MAX)) as u32)
        });
    }

    /// `Sampling::AfterSend`: compresses and decompresses the sample chosen
    /// by the last [`encode`](Self::encode), if any. Call it after the
    /// encoded bytes are written, so the message is already on its way.
    pub fn run_deferred_sample(&mut self) {
        let Some(codec) = self.deferred_codec.take() else {
            return;
        };
        if let Some(r) = run_sample(codec.as_ref(), &self.deferred_msg, &self.deferred_history) {
            self.absorb_sample(r);
        }
    }

    /// Handles one frame from the peer. Returns the application message of a
    /// data frame; control frames return `None` and may append a reply frame
    /// to `replies` (which the caller must write to the connection).
    pub fn decode(
        &mut self,
        frame: RawFrame,
        replies: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>, WireError> {
        let h = frame.header;
        self.stats.wire_bytes_received +=
            (crate::wire::HEADER_LEN + h.extra_len() + frame.payload.len()) as u64;
        match h.kind {
            FrameKind::Hello => Err(WireError::Handshake("a hello after the handshake".into())),
            FrameKind::Data => {
                let codec = self
                    .registry
                    .get(h.codec)
                    .ok_or(WireError::UnknownCodec(h.codec.0))?
                    .clone();
                if h.is_stream() != codec.is_stream() {
                    // A stream codec's frames are stream frames, and only theirs.
                    return Err(WireError::BadHeader {
                        kind: FrameKind::Data,
                        field: "flags",
                    });
                }
                let mut out = Vec::new();
                let len = h.uncompressed_len as usize;
                let decoders = &mut self.stream_decoders;
                let mut run = |out: &mut Vec<u8>| -> Result<(), crate::codec::CodecError> {
                    if !h.is_stream() {
                        return codec.decompress(&frame.payload, len, out);
                    }
                    let dec = match decoders.entry(h.codec) {
                        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::btree_map::Entry::Vacant(v) => {
                            v.insert(codec.stream_decoder().ok_or_else(|| {
                                crate::codec::CodecError::Corrupted {
                                    codec: codec.name(),
                                    detail: "no stream decoder".into(),
                                }
                            })?)
                        }
                    };
                    dec.decompress(&frame.payload, h.is_reset(), len, out)
                };
                let ns = if len >= CPU_TIMED_BYTES {
                    let t0 = thread_cpu_ns();
                    run(&mut out)?;
                    thread_cpu_ns().saturating_sub(t0)
                } else {
                    let t0 = Instant::now();
                    run(&mut out)?;
                    t0.elapsed().as_nanos() as u64
                };
                if let Some(expected) = frame.checksum {
                    let actual = crc32fast::hash(&out);
                    if actual != expected {
                        return Err(WireError::ChecksumMismatch { expected, actual });
                    }
                }
                if h.codec != CodecId::NONE {
                    let r = self
                        .recv_reports
                        .entry(h.codec)
                        .or_insert(DecompressReport {
                            codec: h.codec,
                            ..Default::default()
                        });
                    r.messages = r.messages.saturating_add(1);
                    r.bytes += out.len() as u64;
                    r.nanos += ns;
                    self.charge(ns);
                }
                self.stats.messages_received += 1;
                self.stats.app_bytes_received += out.len() as u64;
                Ok(Some(out))
            }
            FrameKind::Probe => {
                let p = LinkProbe::decode(&frame.payload)?;
                if self.unstamped_replies.len() >= MAX_PENDING_PROBES {
                    self.unstamped_replies.pop_front();
                }
                self.unstamped_replies.push_back((p.seq, self.now_ns()));
                let reply = LinkProbeReply {
                    seq: p.seq,
                    echoed_sent_ns: p.sent_ns,
                    probe_len: frame.payload.len() as u32,
                    held_ns: 0,
                    reports: std::mem::take(&mut self.recv_reports)
                        .into_values()
                        .take(255)
                        .collect(),
                };
                let before = replies.len();
                write_control(FrameKind::ProbeReply, &reply.encode(), replies);
                self.stats.wire_bytes_sent += (replies.len() - before) as u64;
                Ok(None)
            }
            FrameKind::ProbeReply => {
                let r = LinkProbeReply::decode(&frame.payload)?;
                let now = self.now_ns();
                if let Some(pos) = self.pending_probes.iter().position(|(s, _)| *s == r.seq) {
                    let (_, pad) = self.pending_probes.remove(pos).expect("position is valid");
                    let raw = now.saturating_sub(r.echoed_sent_ns);
                    let held = u64::from(r.held_ns);
                    let rtt = raw.saturating_sub(held);
                    if r.seq < COLD_PROBES {
                        // cold start: not a measurement of the link
                    } else if r.held_ns == u32::MAX || held >= raw {
                        // held for 4 s or more, or longer than the whole
                        // round trip (impossible for an honest peer): no RTT
                    } else if pad == 0 {
                        if self.learner.observe_rtt(rtt) {
                            self.on_link_change();
                        }
                    } else {
                        if self.learner.observe_padded_rtt(rtt, pad as u32) {
                            self.on_link_change();
                        }
                        self.probe_pad = self.learner.net.next_pad(
                            self.probe_pad,
                            self.config.probe_pad,
                            MAX_PROBE_PAD.max(self.config.probe_pad),
                            2 * self.config.probe_every.max(1),
                        );
                    }
                    // Older probes were lost to nothing but reordering: forget them.
                    self.pending_probes
                        .retain(|(s, _)| s.wrapping_sub(r.seq) < u32::MAX / 2);
                }
                for rep in r.reports {
                    if self.send_codecs.contains(&rep.codec) {
                        self.learner
                            .observe_remote_decompression(rep.codec, rep.bytes, rep.nanos);
                    }
                }
                Ok(None)
            }
        }
    }

    /// The probes' RTTs say the link changed (the learner dropped its link
    /// estimate): measure the new one with a probe per message, and drop the
    /// unspent sampling credit, which was earned at the old link's prices
    /// (after a switch from 10 Mbit/s to 1 Gbit/s it paid for a few hundred
    /// messages of expensive samples).
    fn on_link_change(&mut self) {
        self.dense_until_seq = self.probe_seq.wrapping_add(REPROBES);
        self.until_probe = 0;
        self.sample_credit_ns = self.sample_ns as f64;
        self.stats.link_changes += 1;
    }

    /// A snapshot of the counters and estimates.
    pub fn stats(&self) -> StreamStats {
        let mut s = self.stats.clone();
        s.sent_per_codec = self
            .sent_counts
            .iter()
            .map(|(c, n)| (self.registry.name_of(*c).to_string(), *n))
            .collect();
        s.sample_ns = self.sample_ns;
        s.probe_pad = self.probe_pad;
        s.sample_credit_ns = self.sample_credit_ns;
        s.rtt_ns = self.learner.net.rtt_ns.get();
        s.link_ns_per_byte = self.learner.net.link_ns_per_byte();
        s.budget_ns = self.budget_ns;
        s.spent_ns = self.spent_ns;
        match &self.shared_throttle {
            Some(t) => {
                s.cpu_share = Some(t.share());
                s.cpu_utilization = t.last_utilization();
            }
            None => {
                s.cpu_share = self.throttle.as_ref().map(|t| t.share());
                s.cpu_utilization = self.throttle.as_ref().and_then(|t| t.last_utilization());
            }
        }
        s.chosen = self.registry.name_of(self.selector.chosen()).to_string();
        s.round = self.round_index;
        s.pipelined = self.learner.pipelined();
        s.backlogged = self.learner.net.bulk.backlogged;
        s.delivered_link_ns_per_byte = self.learner.net.bulk.link_ns_per_byte;
        s
    }
}
