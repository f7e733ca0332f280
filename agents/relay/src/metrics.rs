//! Relay statistics and their OpenMetrics exposition (`hwqos_relay_*`).
//!
//! Every family is a gauge (monotonic ones included), as in the monitor: the
//! OpenMetrics counter naming (`_total`) and the classic text format that
//! `promtool check metrics` lints disagree, and a gauge reads the same in both.

use hwqos_compress::{StreamHandle, StreamStats};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Counters shared by the accept loop, the connections and the endpoint.
#[derive(Default)]
pub struct RelayStats {
    live: Mutex<BTreeMap<u64, StreamHandle>>,
    closed: Mutex<Totals>,
    pub accepted: AtomicU64,
    /// Accepted connections not yet closed (handshaking ones included).
    pub open: AtomicU64,
    pub refused: AtomicU64,
    pub failed: AtomicU64,
    pub reloads: AtomicU64,
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
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a scrape shows besides the streams.
pub struct Labels<'a> {
    pub mode: &'a str,
    pub policy: &'a str,
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

    pub fn live_count(&self) -> usize {
        lock(&self.live).len()
    }

    /// The exposition text.
    pub fn render(&self, labels: &Labels<'_>) -> String {
        let live: Vec<StreamStats> = self.live().iter().map(|h| h.stats()).collect();
        let mut t = lock(&self.closed).clone();
        for s in &live {
            t.add(s);
        }
        let mut o = String::new();
        let family = |o: &mut String, name: &str, help: &str| {
            let _ = writeln!(o, "# TYPE {name} gauge\n# HELP {name} {help}");
        };
        family(
            &mut o,
            "hwqos_relay_info",
            "Relay mode, policy and version.",
        );
        let _ = writeln!(
            o,
            "hwqos_relay_info{{mode=\"{}\",policy=\"{}\",version=\"{}\"}} 1",
            labels.mode,
            labels.policy,
            env!("CARGO_PKG_VERSION")
        );
        family(&mut o, "hwqos_relay_bytes", "Bytes moved since start: plain_in read from applications, link_out written to the link (headers and probes included), link_in read from the link, plain_out written to applications.");
        for (dir, v) in [
            ("plain_in", t.plain_in),
            ("link_out", t.link_out),
            ("link_in", t.link_in),
            ("plain_out", t.plain_out),
        ] {
            let _ = writeln!(o, "hwqos_relay_bytes{{direction=\"{dir}\"}} {v}");
        }
        let total: u64 = t.per_codec.values().sum();
        family(
            &mut o,
            "hwqos_relay_messages",
            "Messages sent on the link per codec since start.",
        );
        for (c, n) in &t.per_codec {
            let _ = writeln!(o, "hwqos_relay_messages{{codec=\"{c}\"}} {n}");
        }
        family(
            &mut o,
            "hwqos_relay_codec_share_ratio",
            "Share of the messages sent with each codec since start.",
        );
        for (c, n) in &t.per_codec {
            let share = if total > 0 {
                *n as f64 / total as f64
            } else {
                0.0
            };
            let _ = writeln!(o, "hwqos_relay_codec_share_ratio{{codec=\"{c}\"}} {share}");
        }
        family(
            &mut o,
            "hwqos_relay_throttled_messages",
            "Messages sent uncompressed because the compression budget was spent.",
        );
        let _ = writeln!(o, "hwqos_relay_throttled_messages {}", t.throttled);
        family(
            &mut o,
            "hwqos_relay_link_changes",
            "Link changes the probes' round-trip times showed since start (each restarts the link estimate).",
        );
        let _ = writeln!(o, "hwqos_relay_link_changes {}", t.link_changes);
        family(
            &mut o,
            "hwqos_relay_connections",
            "Open connections (accepted and not yet closed, handshaking ones included).",
        );
        let _ = writeln!(
            o,
            "hwqos_relay_connections {}",
            self.open.load(Ordering::Relaxed)
        );
        family(
            &mut o,
            "hwqos_relay_connections_accepted",
            "Connections accepted since start.",
        );
        let _ = writeln!(
            o,
            "hwqos_relay_connections_accepted {}",
            self.accepted.load(Ordering::Relaxed)
        );
        family(
            &mut o,
            "hwqos_relay_connections_refused",
            "Connections refused (over max_connections) since start.",
        );
        let _ = writeln!(
            o,
            "hwqos_relay_connections_refused {}",
            self.refused.load(Ordering::Relaxed)
        );
        family(
            &mut o,
            "hwqos_relay_connections_failed",
            "Connections that ended with an error since start.",
        );
        let _ = writeln!(
            o,
            "hwqos_relay_connections_failed {}",
            self.failed.load(Ordering::Relaxed)
        );
        family(
            &mut o,
            "hwqos_relay_reloads",
            "Configuration reloads (SIGHUP) since start.",
        );
        let _ = writeln!(
            o,
            "hwqos_relay_reloads {}",
            self.reloads.load(Ordering::Relaxed)
        );
        family(
            &mut o,
            "hwqos_relay_throttle_target_ratio",
            "Target CPU utilization of the throttle (0: off).",
        );
        let _ = writeln!(o, "hwqos_relay_throttle_target_ratio {}", labels.cpu_target);

        let mean = |f: &dyn Fn(&StreamStats) -> Option<f64>| {
            let v: Vec<f64> = live.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let gauges: [(&str, &str, Option<f64>); 6] = [
            ("hwqos_relay_rtt_seconds", "Round-trip time estimate from probes (mean over open connections).", mean(&|s| s.rtt_ns.map(|v| v * 1e-9))),
            ("hwqos_relay_link_seconds_per_byte", "One-way link cost per byte, measured with padded probes (mean over open connections).", mean(&|s| s.link_ns_per_byte.map(|v| v * 1e-9))),
            ("hwqos_relay_compression_budget_seconds", "Compression time budget of the current round (sum over open connections).", {
                let v: Vec<f64> = live.iter().filter_map(|s| s.budget_ns.map(|b| b as f64 * 1e-9)).collect();
                (!v.is_empty()).then(|| v.iter().sum())
            }),
            ("hwqos_relay_compression_spent_seconds", "Compression and decompression time spent in the current round (sum over open connections).", (!live.is_empty()).then(|| live.iter().map(|s| s.spent_ns as f64 * 1e-9).sum())),
            ("hwqos_relay_throttle_cpu_share_ratio", "Share of one CPU the relay's throttle grants compression (one throttle shared by all connections).", mean(&|s| s.cpu_share)),
            ("hwqos_relay_cpu_utilization_ratio", "CPU utilization the throttle last read (/proc/stat or the cgroup, per cpu_aggregate).", mean(&|s| s.cpu_utilization)),
        ];
        for (name, help, v) in gauges {
            family(&mut o, name, help);
            if let Some(v) = v {
                let _ = writeln!(o, "{name} {v}");
            }
        }
        family(
            &mut o,
            "hwqos_relay_chosen_codec",
            "Connections whose policy currently prefers each codec.",
        );
        let mut chosen: BTreeMap<&str, u32> = BTreeMap::new();
        for s in &live {
            *chosen.entry(s.chosen.as_str()).or_default() += 1;
        }
        for (c, n) in chosen {
            let _ = writeln!(o, "hwqos_relay_chosen_codec{{codec=\"{c}\"}} {n}");
        }
        o.push_str("# EOF\n");
        o
    }
}
