//! The OpenMetrics (`/metrics`) exposition of the newest measurements: this
//! module folds frames into series and has `prometheus-client` write the text
//! (through `hwqos_agent::render_exposition`, as the other agents do); the
//! frames come from the live state (the `live` module) and the endpoint is
//! hwqos-agent's bounded server (`hwqos_agent::serve_metrics`, started by the
//! `service` module).
//!
//! Naming scheme (every family is a gauge; see below why):
//!
//! - a **counter** metric (`hw.*`, `sw.*`, `os.interrupts`, …) is exposed as the
//!   per-second rate over the last interval in which it was counted:
//!   `hwqos_<metric>_per_second`, e.g. `hwqos_sw_page_faults_per_second`.
//!   Time counters in nanoseconds become seconds per second
//!   (`hwqos_sw_task_clock_seconds_per_second`, i.e. CPUs busy);
//! - a **gauge** metric is exposed as its value, converted to base units with the
//!   unit as suffix where it has one: `hwqos_os_cpu_util_ratio`,
//!   `hwqos_os_proc_rss_bytes`; application metrics named `…_us`/`…_ms`/`…_ns`
//!   are converted to `…_seconds`;
//! - labels are the scope's (`scope="process",pid="42"`, `scope="cpu",cpu="0"`, …)
//!   plus `comm` for processes and threads whose name is known.
//!
//! **Event-set rotation.** With several event sets a counter is counted only in
//! the ticks its set is active, so its series is the rate over the most recent
//! interval *in which it was counted* — never an extrapolated total. A series
//! whose scope or metric has not been seen for `stale_after` ticks (twice the
//! rotation length, at least 10 ticks) disappears. Counters the kernel had to
//! multiplex also get `hwqos_counter_running_ratio{metric="…",…}`: the share of
//! the interval the counter actually ran (its value was scaled up by the inverse).
//!
//! **Application metrics** (`app.*`, pushed on an `[[app]]` socket, tailed or
//! run) arrive when the application sends them, often far less often than
//! the rotation horizon: their last value stays for `[metrics] app_stale_s`
//! (default 300 s) after the tick that carried it ([`AppHold`]), then goes.
//!
//! `derived.rate.*` metrics are left out: they repeat the `_per_second` families.
//! Monitor self-metrics are `hwqos_monitor_*`.
//!
//! Every family is typed `gauge`: the values are per-interval snapshots, and the
//! self-counts (frames sampled, …) are monotonic gauges because OpenMetrics
//! (`# TYPE x counter` + `x_total`) and the classic text format that
//! `promtool check metrics` lints disagree on counter family names; a gauge is
//! read identically by both, and `rate()` still works on it.

use hwqos_agent::{encode_gauge, encode_gauge_family};
use hwqos_core::{Frame, MetricName, Sample, Scope};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel as _, EncodeLabelSet, LabelSetEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use std::collections::{BTreeMap, HashMap};

/// The content type of the exposition.
pub use hwqos_agent::OPENMETRICS_CONTENT_TYPE as CONTENT_TYPE;

/// One exposed series' latest value.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    value: f64,
    /// Share of the interval a multiplexed counter ran (`None`: not multiplexed).
    running: Option<f64>,
    seq: u64,
}

/// How a metric is exposed: the shared naming rule's result and the help
/// text written for it.
#[derive(Clone, Debug, PartialEq)]
struct Family {
    exposition: hwqos_core::metric::Exposition,
    help: String,
}

fn family_for(metric: &MetricName) -> Family {
    let exposition = metric.exposition();
    let info = metric.info();
    let help = if exposition.per_second {
        format!(
            "{} per second, over the last interval in which it was counted",
            info.help
        )
    } else {
        info.help
    };
    Family { exposition, help }
}

/// A family and its series, for rendering.
type FamilySeries<'a> = (&'a Family, Vec<(&'a Scope, &'a Entry)>);

/// The monitor's own figures, exposed as `hwqos_monitor_*`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SelfMetrics {
    /// The monitor's version (a label of `hwqos_monitor_build_info`).
    pub version: String,
    /// The counter backend in use (a label of `hwqos_monitor_build_info`).
    pub backend: String,
    /// Frames sampled since the monitor started.
    pub frames_sampled: u64,
    /// Ticks missed because sampling overran the period, since start.
    pub missed_ticks: u64,
    /// How late the newest tick woke after its deadline, in ns.
    pub last_lateness_ns: u64,
    /// Largest tick lateness since start, in ns.
    pub max_lateness_ns: u64,
    /// Live API subscribers dropped for falling behind, since start.
    pub dropped_subscribers: u64,
    /// Live API subscribers connected now.
    pub subscribers: usize,
    /// Samples scaled from multiplexed counters, since start.
    pub multiplexed_samples: u64,
    /// Frames held in the in-memory database.
    pub database_frames: usize,
    /// Estimated memory held by the database, in bytes.
    pub database_bytes: usize,
    /// Configured events this node cannot count.
    pub unavailable_events: usize,
    /// The configured sampling period, in seconds.
    pub period_s: f64,
    /// Successful configuration reloads since start.
    pub reloads: u64,
    /// Wall-clock time of the newest frame, in ns since the Unix epoch
    /// (`None` before the first frame).
    pub last_frame_wall_ns: Option<i64>,
    /// Frames flushes appended to recordings, since start.
    pub flushed_frames: u64,
    /// Bytes flushes appended to recordings, since start.
    pub flushed_bytes: u64,
    /// Frames that fell out of the database before a flush reached them, since start.
    pub flush_lost_frames: u64,
    /// Application-metric series held for `[metrics] app_stale_s`.
    pub app_series_held: usize,
}

/// The latest value of every (metric, scope) seen recently.
#[derive(Debug, Default)]
pub struct Exposition {
    entries: BTreeMap<(MetricName, Scope), Entry>,
    families: HashMap<MetricName, Family>,
    comms: HashMap<Scope, (String, u64)>,
    latest_seq: u64,
}

impl Exposition {
    /// An exposition that holds no series yet.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Number of series held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No series is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes in a frame; series not updated for `stale_after` ticks are dropped.
    pub fn update(&mut self, frame: &Frame, stale_after: u64) {
        self.latest_seq = frame.seq;
        for s in &frame.samples {
            self.take_sample(s, frame.interval_ns, frame.seq);
        }
        for l in &frame.labels {
            self.comms
                .insert(l.scope.clone(), (l.name.clone(), frame.seq));
        }
        let horizon = frame.seq.saturating_sub(stale_after);
        self.entries.retain(|_, e| e.seq >= horizon);
        self.comms.retain(|_, (_, seq)| *seq >= horizon);
        let entries = &self.entries;
        self.families
            .retain(|m, _| entries.keys().any(|(em, _)| em == m));
    }

    /// Takes in one sample of a frame with interval `interval_ns` and sequence `seq`.
    fn take_sample(&mut self, s: &Sample, interval_ns: u64, seq: u64) {
        // `derived.rate.*` repeats what the per-second counter families show.
        if !s.value.is_finite() || s.metric.as_str().starts_with("derived.rate.") {
            return;
        }
        let interval_s = interval_ns as f64 / 1e9;
        let family = self
            .families
            .entry(s.metric.clone())
            .or_insert_with(|| family_for(&s.metric));
        let e = &family.exposition;
        let value = if e.per_second {
            if interval_s <= 0.0 {
                return;
            }
            s.value * e.scale / interval_s
        } else {
            s.value * e.scale
        };
        let running = s
            .counter
            .filter(|c| c.multiplexed())
            .map(|c| c.running_fraction());
        self.entries.insert(
            (s.metric.clone(), s.scope.clone()),
            Entry {
                value,
                running,
                seq,
            },
        );
    }

    /// Adds the application metrics `hold` keeps that the frames taken in no
    /// longer show (older than the rotation horizon), if they were pushed at
    /// most `hold`'s window before `now_mono_ns`. Call after the last
    /// [`Exposition::update`].
    pub fn add_held(&mut self, hold: &AppHold, now_mono_ns: u64) {
        for ((metric, scope), held) in &hold.series {
            if !hold.fresh(held, now_mono_ns) {
                continue;
            }
            if self.entries.contains_key(&(metric.clone(), scope.clone())) {
                continue;
            }
            self.take_sample(&held.sample, held.interval_ns, held.seq);
        }
    }

    /// The comm of a process or thread scope, when known.
    fn comm(&self, scope: &Scope) -> Option<&str> {
        if matches!(scope, Scope::Process { .. } | Scope::Thread { .. }) {
            self.comms.get(scope).map(|(comm, _)| comm.as_str())
        } else {
            None
        }
    }

    /// The whole exposition, terminated by `# EOF`, written by
    /// `prometheus-client` (through [`hwqos_agent::render_exposition`]).
    /// Takes the exposition: a scrape builds one from the live state and
    /// renders it once.
    pub fn render(self, me: &SelfMetrics) -> String {
        hwqos_agent::render_exposition(
            "hwqos",
            Scrape {
                exposition: self,
                me: me.clone(),
            },
        )
    }
}

/// The labels of one series: `metric` (multiplexing ratios only), the
/// scope's, then `comm` for a process or thread whose name is known.
struct SeriesLabels<'a> {
    metric: Option<&'a str>,
    scope: Vec<(&'static str, String)>,
    comm: Option<&'a str>,
}

impl EncodeLabelSet for SeriesLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
        if let Some(m) = self.metric {
            ("metric", m).encode(encoder.encode_label())?;
        }
        for (k, v) in &self.scope {
            (*k, v.as_str()).encode(encoder.encode_label())?;
        }
        if let Some(c) = self.comm {
            ("comm", c).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// What one scrape writes: the exposition it built and the self-metrics.
#[derive(Debug)]
struct Scrape {
    exposition: Exposition,
    me: SelfMetrics,
}

/// `prometheus-client` appends the unit to a family's name: the name given
/// to it is the exposed one without the `hwqos_` prefix (the registry's)
/// and without the `_<unit>` suffix.
fn stem<'a>(name: &'a str, unit: Option<&str>) -> &'a str {
    let stem = name.strip_prefix("hwqos_").unwrap_or(name);
    match unit {
        Some(u) => stem
            .strip_suffix(u)
            .and_then(|s| s.strip_suffix('_'))
            .unwrap_or(stem),
        None => stem,
    }
}

fn unit(u: &str) -> Unit {
    match u {
        "seconds" => Unit::Seconds,
        "bytes" => Unit::Bytes,
        other => Unit::Other(other.to_string()),
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let x = &self.exposition;
        // Group series by family name (two metrics never share one: names are
        // the dotted metric names with `.` → `_`, plus unit suffixes).
        let mut by_family: BTreeMap<&str, FamilySeries<'_>> = BTreeMap::new();
        for ((metric, scope), e) in &x.entries {
            if let Some(f) = x.families.get(metric) {
                by_family
                    .entry(f.exposition.name.as_str())
                    .or_insert_with(|| (f, Vec::new()))
                    .1
                    .push((scope, e));
            }
        }
        for (name, (family, series)) in &by_family {
            debug_assert!(name.starts_with("hwqos_"), "{name}");
            debug_assert!(!family.help.contains(['\\', '\n']), "{:?}", family.help);
            let u = family.exposition.unit.map(unit);
            let mut metric = encoder.encode_descriptor(
                stem(name, family.exposition.unit),
                &family.help,
                u.as_ref(),
                MetricType::Gauge,
            )?;
            for (scope, e) in series {
                let labels = SeriesLabels {
                    metric: None,
                    scope: scope.labels(),
                    comm: x.comm(scope),
                };
                metric.encode_family(&labels)?.encode_gauge(&e.value)?;
            }
        }
        let mut running = x
            .entries
            .iter()
            .filter_map(|((m, s), e)| e.running.map(|r| (m, s, r)))
            .peekable();
        if running.peek().is_some() {
            let u = unit("ratio");
            let mut metric = encoder.encode_descriptor(
                "counter_running",
                "share of the interval a multiplexed counter ran; its value was scaled by the inverse",
                Some(&u),
                MetricType::Gauge,
            )?;
            for (m, s, r) in running {
                let labels = SeriesLabels {
                    metric: Some(m.as_str()),
                    scope: s.labels(),
                    comm: x.comm(s),
                };
                metric.encode_family(&labels)?.encode_gauge(&r)?;
            }
        }
        encode_self(&mut encoder, &self.me)
    }
}

/// Most application-metric series [`AppHold`] keeps: pushers choose names and
/// scopes, so the store is bounded; a new series beyond it is shown only
/// while its frames are within the rotation horizon (and counted).
pub const MAX_HELD_APP_SERIES: usize = 10_000;

#[derive(Clone, Debug)]
struct Held {
    sample: Sample,
    interval_ns: u64,
    seq: u64,
    /// Monotonic time of the tick that carried it.
    mono_ns: u64,
}

/// The last value of every application metric series (`app.*`) pushed within
/// `[metrics] app_stale_s`, so that `/metrics` keeps showing a value that an
/// application pushes less often than the rotation horizon.
#[derive(Debug, Default)]
pub struct AppHold {
    series: HashMap<(MetricName, Scope), Held>,
    window_ns: u64,
    refused: u64,
}

impl AppHold {
    /// A store that keeps values for `window_s` seconds (0: none).
    pub fn new(window_s: f64) -> AppHold {
        let mut hold = AppHold::default();
        hold.set_window(window_s);
        hold
    }

    /// Changes the window (a reload); a 0 window empties the store.
    pub fn set_window(&mut self, window_s: f64) {
        self.window_ns = (window_s.max(0.0) * 1e9) as u64;
        if self.window_ns == 0 {
            self.series.clear();
        }
    }

    /// Series held.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// No series is held.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// New series not held because [`MAX_HELD_APP_SERIES`] were.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    fn fresh(&self, held: &Held, now_mono_ns: u64) -> bool {
        now_mono_ns.saturating_sub(held.mono_ns) <= self.window_ns
    }

    /// Keeps the `app.*` samples of a frame (cheap when it has none).
    pub fn take(&mut self, frame: &Frame) {
        if self.window_ns == 0 {
            return;
        }
        let mut expired = false;
        for s in frame.samples.iter().filter(|s| s.metric.family() == "app") {
            let key = (s.metric.clone(), s.scope.clone());
            if self.series.len() >= MAX_HELD_APP_SERIES && !self.series.contains_key(&key) {
                // At most one sweep a frame.
                if !expired {
                    self.expire(frame.time.mono_ns);
                    expired = true;
                }
                if self.series.len() >= MAX_HELD_APP_SERIES {
                    self.refused += 1;
                    continue;
                }
            }
            self.series.insert(
                key,
                Held {
                    sample: s.clone(),
                    interval_ns: frame.interval_ns,
                    seq: frame.seq,
                    mono_ns: frame.time.mono_ns,
                },
            );
        }
    }

    /// Drops the series pushed longer than the window before `now_mono_ns`.
    pub fn expire(&mut self, now_mono_ns: u64) {
        let window = self.window_ns;
        self.series
            .retain(|_, h| now_mono_ns.saturating_sub(h.mono_ns) <= window);
    }
}

fn encode_self(encoder: &mut DescriptorEncoder, me: &SelfMetrics) -> std::fmt::Result {
    encode_gauge_family(
        encoder,
        "monitor_build_info",
        "hwqos-monitor version and counter backend (value is always 1)",
        None,
        [(
            &[
                ("version", me.version.as_str()),
                ("backend", me.backend.as_str()),
            ][..],
            1u32,
        )],
    )?;
    let count = |encoder: &mut DescriptorEncoder, name: &str, help: &str, v: u64| {
        encode_gauge(encoder, name, help, None, Some(v))
    };
    let seconds = |encoder: &mut DescriptorEncoder, name: &str, help: &str, v: f64| {
        encode_gauge(encoder, name, help, Some(Unit::Seconds), Some(v))
    };
    count(
        encoder,
        "monitor_frames_sampled",
        "frames sampled since the monitor started",
        me.frames_sampled,
    )?;
    count(
        encoder,
        "monitor_missed_ticks",
        "ticks missed because sampling overran the period, since start",
        me.missed_ticks,
    )?;
    seconds(
        encoder,
        "monitor_tick_lateness",
        "how late the newest tick woke after its deadline",
        me.last_lateness_ns as f64 / 1e9,
    )?;
    seconds(
        encoder,
        "monitor_tick_lateness_max",
        "largest tick lateness since start",
        me.max_lateness_ns as f64 / 1e9,
    )?;
    seconds(
        encoder,
        "monitor_sampling_period",
        "configured sampling period",
        me.period_s,
    )?;
    count(
        encoder,
        "monitor_subscribers",
        "live API subscribers connected",
        me.subscribers as u64,
    )?;
    count(
        encoder,
        "monitor_dropped_subscribers",
        "live API subscribers dropped for falling behind, since start",
        me.dropped_subscribers,
    )?;
    count(
        encoder,
        "monitor_multiplexed_samples",
        "samples scaled from multiplexed counters, since start",
        me.multiplexed_samples,
    )?;
    count(
        encoder,
        "monitor_database_frames",
        "frames held in the in-memory database",
        me.database_frames as u64,
    )?;
    encode_gauge(
        encoder,
        "monitor_database_size",
        "estimated memory held by the database",
        Some(Unit::Bytes),
        Some(me.database_bytes as u64),
    )?;
    count(
        encoder,
        "monitor_unavailable_events",
        "configured events this node cannot count",
        me.unavailable_events as u64,
    )?;
    count(
        encoder,
        "monitor_config_reloads",
        "successful configuration reloads since start",
        me.reloads,
    )?;
    count(
        encoder,
        "monitor_flushed_frames",
        "frames appended to recordings by flushes, since start",
        me.flushed_frames,
    )?;
    encode_gauge(
        encoder,
        "monitor_flushed",
        "bytes appended to recordings by flushes, since start",
        Some(Unit::Bytes),
        Some(me.flushed_bytes),
    )?;
    count(
        encoder,
        "monitor_flush_lost_frames",
        "frames that fell out of the database before a flush wrote them, since start",
        me.flush_lost_frames,
    )?;
    count(
        encoder,
        "monitor_app_series_held",
        "application metric series kept on /metrics for [metrics] app_stale_s",
        me.app_series_held as u64,
    )?;
    if let Some(wall) = me.last_frame_wall_ns {
        seconds(
            encoder,
            "monitor_last_frame_timestamp",
            "wall-clock time of the newest frame (Unix epoch)",
            wall as f64 / 1e9,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::{CounterReading, Sample, ScopeLabel, Timestamp};

    fn m(s: &'static str) -> MetricName {
        MetricName::from_static(s)
    }

    fn frame(seq: u64) -> Frame {
        let t = Timestamp::default();
        let p = Scope::Process { pid: 42 };
        Frame {
            seq,
            time: t,
            interval_ns: 500_000_000,
            samples: vec![
                Sample::counter(
                    t,
                    p.clone(),
                    m("sw.page_faults"),
                    CounterReading {
                        raw: 10,
                        time_enabled: 100,
                        time_running: 50,
                    },
                )
                .unwrap(),
                Sample::counter(
                    t,
                    p.clone(),
                    m("sw.task_clock"),
                    CounterReading {
                        raw: 250_000_000,
                        time_enabled: 1,
                        time_running: 1,
                    },
                )
                .unwrap(),
                Sample::gauge(t, Scope::Cpu { cpu: 1 }, m("os.cpu.util"), 0.25),
                Sample::gauge(t, Scope::System, m("app.rtt_us"), 1500.0),
            ],
            labels: vec![ScopeLabel {
                scope: p,
                name: "we\"ird\\".into(),
            }],
        }
    }

    #[test]
    fn family_names_and_values() {
        let mut x = Exposition::new();
        x.update(&frame(1), 10);
        let text = x.render(&SelfMetrics::default());
        // 10 raw, multiplexed 50% → 20 per 0.5 s → 40/s.
        assert!(
            text.contains("hwqos_sw_page_faults_per_second{scope=\"process\",pid=\"42\",comm=\"we\\\"ird\\\\\"} 40.0\n"),
            "{text}"
        );
        // 0.25 s of CPU in 0.5 s → 0.5 CPUs.
        assert!(
            text.contains(
                "hwqos_sw_task_clock_seconds_per_second{scope=\"process\",pid=\"42\",comm="
            ),
            "{text}"
        );
        assert!(text.contains("} 0.5\n"), "{text}");
        assert!(text.contains(
            "# TYPE hwqos_os_cpu_util_ratio gauge\n# UNIT hwqos_os_cpu_util_ratio ratio\n"
        ));
        assert!(text.contains("hwqos_os_cpu_util_ratio{scope=\"cpu\",cpu=\"1\"} 0.25\n"));
        assert!(
            text.contains("hwqos_app_rtt_seconds{scope=\"system\"} 0.0015\n"),
            "{text}"
        );
        assert!(text.contains("hwqos_counter_running_ratio{metric=\"sw.page_faults\",scope=\"process\",pid=\"42\",comm="));
        assert!(text.contains("hwqos_monitor_frames_sampled 0\n"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn stale_series_disappear() {
        let mut x = Exposition::new();
        x.update(&frame(1), 3);
        assert_eq!(x.len(), 4);
        let empty = Frame {
            seq: 3,
            interval_ns: 1,
            ..Frame::default()
        };
        x.update(&empty, 3);
        assert_eq!(x.len(), 4, "still within the rotation horizon");
        let later = Frame {
            seq: 5,
            interval_ns: 1,
            ..Frame::default()
        };
        x.update(&later, 3);
        assert!(x.is_empty());
        assert!(!x.render(&SelfMetrics::default()).contains("pid=\"42\""));
    }

    /// The whole page, as `prometheus-client` writes it: every family's
    /// HELP, TYPE and UNIT, label order and escaping, counts as integers
    /// (not rounded through `f64`), seconds and ratios as floats.
    #[test]
    fn the_whole_exposition_is_pinned() {
        let mut x = Exposition::new();
        x.update(&frame(1), 10);
        let me = SelfMetrics {
            version: "1.2.3".into(),
            backend: "perf\"x".into(),
            frames_sampled: u64::MAX,
            last_lateness_ns: 1_500_000,
            period_s: 0.1,
            last_frame_wall_ns: Some(1_700_000_000_250_000_000),
            ..SelfMetrics::default()
        };
        assert_eq!(
            x.render(&me),
            "# HELP hwqos_app_rtt_seconds app.rtt_us (not in the hwqos registry)\n\
             # TYPE hwqos_app_rtt_seconds gauge\n\
             # UNIT hwqos_app_rtt_seconds seconds\n\
             hwqos_app_rtt_seconds{scope=\"system\"} 0.0015\n\
             # HELP hwqos_os_cpu_util_ratio CPU utilization over the interval (busy / total jiffies)\n\
             # TYPE hwqos_os_cpu_util_ratio gauge\n\
             # UNIT hwqos_os_cpu_util_ratio ratio\n\
             hwqos_os_cpu_util_ratio{scope=\"cpu\",cpu=\"1\"} 0.25\n\
             # HELP hwqos_sw_page_faults_per_second page faults per second, over the last interval in which it was counted\n\
             # TYPE hwqos_sw_page_faults_per_second gauge\n\
             hwqos_sw_page_faults_per_second{scope=\"process\",pid=\"42\",comm=\"we\\\"ird\\\\\"} 40.0\n\
             # HELP hwqos_sw_task_clock_seconds_per_second time the task ran on a CPU (ns) per second, over the last interval in which it was counted\n\
             # TYPE hwqos_sw_task_clock_seconds_per_second gauge\n\
             hwqos_sw_task_clock_seconds_per_second{scope=\"process\",pid=\"42\",comm=\"we\\\"ird\\\\\"} 0.5\n\
             # HELP hwqos_counter_running_ratio share of the interval a multiplexed counter ran; its value was scaled by the inverse\n\
             # TYPE hwqos_counter_running_ratio gauge\n\
             # UNIT hwqos_counter_running_ratio ratio\n\
             hwqos_counter_running_ratio{metric=\"sw.page_faults\",scope=\"process\",pid=\"42\",comm=\"we\\\"ird\\\\\"} 0.5\n\
             # HELP hwqos_monitor_build_info hwqos-monitor version and counter backend (value is always 1)\n\
             # TYPE hwqos_monitor_build_info gauge\n\
             hwqos_monitor_build_info{version=\"1.2.3\",backend=\"perf\\\"x\"} 1\n\
             # HELP hwqos_monitor_frames_sampled frames sampled since the monitor started\n\
             # TYPE hwqos_monitor_frames_sampled gauge\n\
             hwqos_monitor_frames_sampled 18446744073709551615\n\
             # HELP hwqos_monitor_missed_ticks ticks missed because sampling overran the period, since start\n\
             # TYPE hwqos_monitor_missed_ticks gauge\n\
             hwqos_monitor_missed_ticks 0\n\
             # HELP hwqos_monitor_tick_lateness_seconds how late the newest tick woke after its deadline\n\
             # TYPE hwqos_monitor_tick_lateness_seconds gauge\n\
             # UNIT hwqos_monitor_tick_lateness_seconds seconds\n\
             hwqos_monitor_tick_lateness_seconds 0.0015\n\
             # HELP hwqos_monitor_tick_lateness_max_seconds largest tick lateness since start\n\
             # TYPE hwqos_monitor_tick_lateness_max_seconds gauge\n\
             # UNIT hwqos_monitor_tick_lateness_max_seconds seconds\n\
             hwqos_monitor_tick_lateness_max_seconds 0.0\n\
             # HELP hwqos_monitor_sampling_period_seconds configured sampling period\n\
             # TYPE hwqos_monitor_sampling_period_seconds gauge\n\
             # UNIT hwqos_monitor_sampling_period_seconds seconds\n\
             hwqos_monitor_sampling_period_seconds 0.1\n\
             # HELP hwqos_monitor_subscribers live API subscribers connected\n\
             # TYPE hwqos_monitor_subscribers gauge\n\
             hwqos_monitor_subscribers 0\n\
             # HELP hwqos_monitor_dropped_subscribers live API subscribers dropped for falling behind, since start\n\
             # TYPE hwqos_monitor_dropped_subscribers gauge\n\
             hwqos_monitor_dropped_subscribers 0\n\
             # HELP hwqos_monitor_multiplexed_samples samples scaled from multiplexed counters, since start\n\
             # TYPE hwqos_monitor_multiplexed_samples gauge\n\
             hwqos_monitor_multiplexed_samples 0\n\
             # HELP hwqos_monitor_database_frames frames held in the in-memory database\n\
             # TYPE hwqos_monitor_database_frames gauge\n\
             hwqos_monitor_database_frames 0\n\
             # HELP hwqos_monitor_database_size_bytes estimated memory held by the database\n\
             # TYPE hwqos_monitor_database_size_bytes gauge\n\
             # UNIT hwqos_monitor_database_size_bytes bytes\n\
             hwqos_monitor_database_size_bytes 0\n\
             # HELP hwqos_monitor_unavailable_events configured events this node cannot count\n\
             # TYPE hwqos_monitor_unavailable_events gauge\n\
             hwqos_monitor_unavailable_events 0\n\
             # HELP hwqos_monitor_config_reloads successful configuration reloads since start\n\
             # TYPE hwqos_monitor_config_reloads gauge\n\
             hwqos_monitor_config_reloads 0\n\
             # HELP hwqos_monitor_flushed_frames frames appended to recordings by flushes, since start\n\
             # TYPE hwqos_monitor_flushed_frames gauge\n\
             hwqos_monitor_flushed_frames 0\n\
             # HELP hwqos_monitor_flushed_bytes bytes appended to recordings by flushes, since start\n\
             # TYPE hwqos_monitor_flushed_bytes gauge\n\
             # UNIT hwqos_monitor_flushed_bytes bytes\n\
             hwqos_monitor_flushed_bytes 0\n\
             # HELP hwqos_monitor_flush_lost_frames frames that fell out of the database before a flush wrote them, since start\n\
             # TYPE hwqos_monitor_flush_lost_frames gauge\n\
             hwqos_monitor_flush_lost_frames 0\n\
             # HELP hwqos_monitor_app_series_held application metric series kept on /metrics for [metrics] app_stale_s\n\
             # TYPE hwqos_monitor_app_series_held gauge\n\
             hwqos_monitor_app_series_held 0\n\
             # HELP hwqos_monitor_last_frame_timestamp_seconds wall-clock time of the newest frame (Unix epoch)\n\
             # TYPE hwqos_monitor_last_frame_timestamp_seconds gauge\n\
             # UNIT hwqos_monitor_last_frame_timestamp_seconds seconds\n\
             hwqos_monitor_last_frame_timestamp_seconds 1700000000.2499998\n\
             # EOF\n"
        );
    }
}
