//! Relay statistics and their OpenMetrics exposition (`hwqos_relay_*`),
//! written by `prometheus-client` (set up in `hwqos-agent`).
//!
//! Every family is a gauge (monotonic ones included), as in the monitor: the
//! OpenMetrics counter naming (`_total`) and the classic text format that
//! `promtool check metrics` lints disagree, and a gauge reads the same in both.

use hwqos_agent::{encode_gauge, encode_gauge_family};
use hwqos_compress::{StreamHandle, StreamStats};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Counters shared by the accept loop, the connections and the endpoint.
#[derive(Default)]
pub struct RelayStats {
    live: Mutex<BTreeMap<u64, StreamHandle>>,
    closed: Mutex<Totals>,
    /// Connections accepted since start.
    pub accepted: AtomicU64,
    /// Accepted connections not yet closed (handshaking ones included).
    pub open: AtomicU64,
    /// Connections refused since start because `max_connections` were open.
    pub refused: AtomicU64,
    /// Connections that ended with an error since start.
    pub failed: AtomicU64,
    /// Configuration reloads (SIGHUP) applied since start.
    pub reloads: AtomicU64,
    /// Where the throttle read CPU utilization last (monitor or /proc).
    pub throttle_source: crate::cpu_source::SourceCell,
    next_id: AtomicU64,
}

#[derive(Clone, Debug, Default)]
struct Totals {
    plain_in: u64,
    link_out: u64,
    link_in: u64,
    plain_out: u64,
    per_codec: BTreeMap<String, u64>,
    throttled: u64,
    link_changes: u64,
    samples: u64,
    sample_ns: u64,
    probes: u64,
}

impl Totals {
    fn add(&mut self, s: &StreamStats) {
        self.plain_in += s.app_bytes_sent;
        self.link_out += s.wire_bytes_sent;
        self.link_in += s.wire_bytes_received;
        self.plain_out += s.app_bytes_received;
        for (c, n) in &s.sent_per_codec {
            *self.per_codec.entry(c.clone()).or_default() += n;
        }
        self.throttled += s.throttled_messages;
        self.link_changes += s.link_changes;
        self.samples += s.samples;
        self.sample_ns += s.sample_ns;
        self.probes += s.probes;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a scrape shows besides the streams.
pub struct Labels<'a> {
    /// The relay's mode (`compress` or `decompress`), a label of the info family.
    pub mode: &'a str,
    /// The configured codec policy, a label of the info family.
    pub policy: &'a str,
    /// The configured throttle target (0: throttle off).
    pub cpu_target: f64,
}

impl RelayStats {
    /// Registers a live link stream; returns its id.
    pub fn add(&self, h: StreamHandle) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.live).insert(id, h);
        id
    }

    /// Folds a finished stream into the totals.
    pub fn remove(&self, id: u64) {
        if let Some(h) = lock(&self.live).remove(&id) {
            lock(&self.closed).add(&h.stats());
        }
    }

    /// Handles of the live streams.
    pub fn live(&self) -> Vec<StreamHandle> {
        lock(&self.live).values().cloned().collect()
    }

    /// Number of live link streams.
    pub fn live_count(&self) -> usize {
        lock(&self.live).len()
    }

    /// The exposition text.
    pub fn render(&self, labels: &Labels<'_>) -> String {
        let live: Vec<StreamStats> = self.live().iter().map(|h| h.stats()).collect();
        let mut totals = lock(&self.closed).clone();
        for s in &live {
            totals.add(s);
        }
        let mean = |f: &dyn Fn(&StreamStats) -> Option<f64>| {
            let v: Vec<f64> = live.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let mut chosen: BTreeMap<String, u32> = BTreeMap::new();
        for s in &live {
            *chosen.entry(s.chosen.clone()).or_default() += 1;
        }
        let exposition = Exposition {
            mode: labels.mode.to_string(),
            policy: labels.policy.to_string(),
            cpu_target: labels.cpu_target,
            totals,
            open: self.open.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            reloads: self.reloads.load(Ordering::Relaxed),
            rtt_s: mean(&|s| s.rtt_ns.map(|v| v * 1e-9)),
            link_s_per_byte: mean(&|s| s.link_ns_per_byte.map(|v| v * 1e-9)),
            budget_s: {
                let v: Vec<f64> = live
                    .iter()
                    .filter_map(|s| s.budget_ns.map(|b| b as f64 * 1e-9))
                    .collect();
                (!v.is_empty()).then(|| v.iter().sum())
            },
            spent_s: (!live.is_empty())
                .then(|| live.iter().map(|s| s.spent_ns as f64 * 1e-9).sum()),
            cpu_share: mean(&|s| s.cpu_share),
            cpu_utilization: mean(&|s| s.cpu_utilization),
            throttle_source: self.throttle_source.get().as_str(),
            chosen,
        };
        hwqos_agent::render_exposition("hwqos_relay", exposition)
    }
}

#[derive(EncodeLabelSet)]
struct InfoLabels {
    mode: String,
    policy: String,
    version: &'static str,
}

#[derive(EncodeLabelSet)]
struct DirectionLabels {
    direction: &'static str,
}

#[derive(EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(EncodeLabelSet)]
struct CodecLabels {
    codec: String,
}

/// What one scrape shows: the counters, the totals over closed and live
/// streams, and the live streams' estimates (None: no live stream has one).
#[derive(Debug)]
struct Exposition {
    mode: String,
    policy: String,
    cpu_target: f64,
    totals: Totals,
    open: u64,
    accepted: u64,
    refused: u64,
    failed: u64,
    reloads: u64,
    rtt_s: Option<f64>,
    link_s_per_byte: Option<f64>,
    budget_s: Option<f64>,
    spent_s: Option<f64>,
    cpu_share: Option<f64>,
    cpu_utilization: Option<f64>,
    /// Where the throttle read CPU utilization last.
    throttle_source: &'static str,
    /// Live connections per codec their policy prefers.
    chosen: BTreeMap<String, u32>,
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let t = &self.totals;
        let info = InfoLabels {
            mode: self.mode.clone(),
            policy: self.policy.clone(),
            version: env!("CARGO_PKG_VERSION"),
        };
        encode_gauge_family(
            &mut encoder,
            "info",
            "Relay mode, policy and version.",
            None,
            [(info, 1u32)],
        )?;
        encode_gauge_family(
            &mut encoder,
            "bytes",
            "Bytes moved since start: plain_in read from applications, link_out written to the link (headers and probes included), link_in read from the link, plain_out written to applications.",
            None,
            [
                ("plain_in", t.plain_in),
                ("link_out", t.link_out),
                ("link_in", t.link_in),
                ("plain_out", t.plain_out),
            ]
            .map(|(direction, v)| (DirectionLabels { direction }, v)),
        )?;
        let codec = |c: &String| CodecLabels { codec: c.clone() };
        encode_gauge_family(
            &mut encoder,
            "messages",
            "Messages sent on the link per codec since start.",
            None,
            t.per_codec.iter().map(|(c, n)| (codec(c), *n)),
        )?;
        let total: u64 = t.per_codec.values().sum();
        encode_gauge_family(
            &mut encoder,
            "codec_share_ratio",
            "Share of the messages sent with each codec since start.",
            None,
            t.per_codec.iter().map(|(c, n)| {
                let share = if total > 0 {
                    *n as f64 / total as f64
                } else {
                    0.0
                };
                (codec(c), share)
            }),
        )?;
        for (name, help, v) in [
            (
                "throttled_messages",
                "Messages sent uncompressed because the compression budget was spent.",
                t.throttled,
            ),
            (
                "link_changes",
                "Link changes the probes' round-trip times showed since start (each restarts the link estimate).",
                t.link_changes,
            ),
            (
                "samples",
                "Messages the adaptive policy compressed off the send path with a codec other than the chosen one, to learn its ratio and speed, since start.",
                t.samples,
            ),
            (
                "probes",
                "Link probes sent since start (small and padded).",
                t.probes,
            ),
            (
                "connections",
                "Open connections (accepted and not yet closed, handshaking ones included).",
                self.open,
            ),
            (
                "connections_accepted",
                "Connections accepted since start.",
                self.accepted,
            ),
            (
                "connections_refused",
                "Connections refused (over max_connections) since start.",
                self.refused,
            ),
            (
                "connections_failed",
                "Connections that ended with an error since start.",
                self.failed,
            ),
            (
                "reloads",
                "Configuration reloads (SIGHUP) since start.",
                self.reloads,
            ),
        ] {
            encode_gauge(&mut encoder, name, help, None, Some(v))?;
        }
        for (name, help, v) in [
            (
                "throttle_target_ratio",
                "Target CPU utilization of the throttle (0: off).",
                Some(self.cpu_target),
            ),
            (
                "rtt_seconds",
                "Round-trip time estimate from probes (mean over open connections).",
                self.rtt_s,
            ),
            (
                "link_seconds_per_byte",
                "One-way link cost per byte, measured with padded probes (mean over open connections).",
                self.link_s_per_byte,
            ),
            (
                "sample_seconds",
                "CPU time the adaptive policy's samples took (compression and decompression) since start.",
                Some(t.sample_ns as f64 * 1e-9),
            ),
            (
                "compression_budget_seconds",
                "Compression time budget of the current round (sum over open connections).",
                self.budget_s,
            ),
            (
                "compression_spent_seconds",
                "Compression and decompression time spent in the current round (sum over open connections).",
                self.spent_s,
            ),
            (
                "throttle_cpu_share_ratio",
                "Share of one CPU the relay's throttle grants compression (one throttle shared by all connections).",
                self.cpu_share,
            ),
            (
                "cpu_utilization_ratio",
                "CPU utilization the throttle last read (the monitor, /proc/stat or the cgroup; see throttle_source_info).",
                self.cpu_utilization,
            ),
        ] {
            encode_gauge(&mut encoder, name, help, None, v)?;
        }
        encode_gauge_family(
            &mut encoder,
            "throttle_source_info",
            "Where the throttle read CPU utilization last: monitor (hwqos-monitor's live API), procfs (/proc/stat), cgroup, or none (no reading yet, or no throttle).",
            None,
            [(
                SourceLabels {
                    source: self.throttle_source,
                },
                1u32,
            )],
        )?;
        encode_gauge_family(
            &mut encoder,
            "chosen_codec",
            "Connections whose policy currently prefers each codec.",
            None,
            self.chosen.iter().map(|(c, n)| (codec(c), *n)),
        )
    }
}
