//! The monitor's TOML configuration: parsing, defaults and validation.
//!
//! Every error names the file, the line, the key and what was expected
//! (`/etc/hwqos/monitor.toml:3: key `rate_hz`: …`, the format every hwqos agent
//! uses), so a bad config is fixed from the first message. Unknown keys are errors, not silently ignored.
//! See `deploy/config/monitor.toml` for an example with every key explained.

use crate::db::Format;
use hwqos_core::metric::names;
use hwqos_pmu::appmetric::AppSource;
use hwqos_pmu::derived::CpiPenalties;
use hwqos_pmu::sampler::SamplerConfig;
use hwqos_pmu::target::TargetSelector;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Lowest accepted sampling rate (`rate_hz`, `--rate`), in Hz.
pub const MIN_RATE_HZ: f64 = 0.1;
/// Highest accepted sampling rate, in Hz.
pub const MAX_RATE_HZ: f64 = 10_000.0;

/// Largest accepted config file: far above any real one; a larger file (or a
/// device such as `/dev/zero`) is refused rather than read into memory.
pub const MAX_CONFIG_BYTES: u64 = hwqos_agent::MAX_CONFIG_BYTES;

/// Largest accepted database size in frames.
pub const MAX_DB_FRAMES: usize = 10_000_000;

/// Checks that an event name is known to the catalog (`Err(reason)` if not).
/// Events that are known but not countable on this node are fine: the sampler
/// drops and lists them.
pub type EventCheck<'a> = &'a dyn Fn(&str) -> Result<(), String>;

/// The monitor's configuration after defaults and validation.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Ticks per second.
    #[serde(default = "default_rate")]
    pub rate_hz: f64,
    /// What to monitor besides CPUs (`[[target]] select = "name:nginx"`).
    #[serde(default, rename = "target")]
    pub targets: Vec<Target>,
    /// Count every CPU system-wide.
    #[serde(default = "yes")]
    pub per_cpu: bool,
    /// The CPUs for per-CPU and cgroup counting (default: all online).
    #[serde(default)]
    pub cpus: Option<Vec<u32>>,
    /// Event sets rotated one per tick.
    #[serde(default = "default_event_sets")]
    pub event_sets: Vec<Vec<String>>,
    /// Add software metrics from /proc.
    #[serde(default = "yes")]
    pub procfs: bool,
    /// Ticks between rescans of the target selectors (0: never).
    #[serde(default = "default_rescan")]
    pub rescan_every: u32,
    /// How the sampling thread waits for each tick (`absolute`,
    /// `slack-compensated`, `hybrid:SPIN`, `busy-wait`, `relative`); default
    /// `absolute` at every rate (no spin). Changes take effect on restart.
    #[serde(default)]
    pub sleep: Option<hwqos_core::ticker::SleepStrategy>,
    /// `[database]`: the bounds of the in-memory frame database.
    #[serde(default)]
    pub database: DatabaseConfig,
    /// `[output]`: where and how flushes write recordings.
    #[serde(default)]
    pub output: OutputConfig,
    /// `[api]`: the live API on a Unix socket.
    #[serde(default)]
    pub api: ApiConfig,
    /// `[metrics]`: the OpenMetrics endpoint.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Application performance metric sources.
    #[serde(default, rename = "app")]
    pub apps: Vec<AppSource>,
    /// `[cpi]`: the miss penalties of the CPI stack.
    #[serde(default)]
    pub cpi: CpiConfig,
}

/// One `[[target]]` table.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// `pid:N`, `tid:N`, `name:X`, `regex:X`, `cgroup:/path` or `unit:x.service`.
    pub select: TargetSelector,
}

/// `[database]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// Frames kept in memory.
    pub frames: usize,
    /// Upper bound on the memory the frames occupy, in MiB.
    pub max_mib: usize,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            frames: 30_000,
            max_mib: 256,
        }
    }
}

/// `[output]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// Directory flushes are written to (created if missing).
    pub dir: PathBuf,
    /// Formats written on each flush.
    pub formats: Vec<Format>,
    /// Flush once more on SIGTERM / SIGINT.
    pub flush_on_exit: bool,
    /// A segment file that reaches this size (MiB) is closed and the next
    /// flushed frame starts a new segment.
    pub segment_mib: u64,
    /// Bound of all segment files in `dir` together (MiB): the oldest are
    /// removed after each flush; the segment being written is never removed.
    pub max_mib: u64,
}

impl OutputConfig {
    /// The size bounds of the recordings.
    pub fn limits(&self) -> crate::segments::Limits {
        crate::segments::Limits::mib(self.segment_mib, self.max_mib)
    }
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            dir: PathBuf::from("/var/lib/hwqos/monitor"),
            formats: vec![Format::Jsonl, Format::Csv],
            flush_on_exit: true,
            segment_mib: crate::segments::DEFAULT_SEGMENT_MIB,
            max_mib: crate::segments::DEFAULT_MAX_MIB,
        }
    }
}

/// `[api]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Serve the live API (default true).
    pub enabled: bool,
    /// The Unix socket path.
    pub socket: PathBuf,
    /// Frames a subscriber may fall behind before it is dropped.
    pub client_queue: usize,
    /// `window` responses sent at once; more are refused with an error line.
    pub max_windows: usize,
    /// Seconds a client has to read a whole `window` response; a slower one
    /// is cut off (error line, connection closed).
    pub window_timeout_s: f64,
}

/// Most `window` responses at once that `[api] max_windows` may allow.
pub const MAX_WINDOWS_LIMIT: usize = 64;
/// Longest `[api] window_timeout_s`.
pub const MAX_WINDOW_TIMEOUT_S: f64 = 3600.0;

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            enabled: true,
            socket: PathBuf::from("/run/hwqos/monitor.sock"),
            client_queue: 1024,
            max_windows: 4,
            window_timeout_s: 60.0,
        }
    }
}

impl ApiConfig {
    /// `window_timeout_s` as a duration.
    pub fn window_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.window_timeout_s)
    }
}

/// `[metrics]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Serve `GET /metrics` (default true; changes take effect on restart).
    pub enabled: bool,
    /// Address of the OpenMetrics endpoint (port 0: any free port).
    pub listen: String,
    /// Allow a non-loopback listen address (the endpoint has no authentication).
    pub allow_non_loopback: bool,
    /// Seconds an application metric's last value stays on `/metrics` after
    /// it was pushed (0: it goes with the rotation horizon, like the counters).
    pub app_stale_s: f64,
}

/// Default `[metrics] app_stale_s`: Prometheus's default query lookback (5 min).
pub const DEFAULT_APP_STALE_S: f64 = 300.0;
/// Longest `[metrics] app_stale_s` (a day).
pub const MAX_APP_STALE_S: f64 = 86_400.0;

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            listen: "127.0.0.1:9464".to_string(),
            allow_non_loopback: false,
            app_stale_s: DEFAULT_APP_STALE_S,
        }
    }
}

impl MetricsConfig {
    /// The validated listen address.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.listen.parse().ok()
    }
}

/// `[cpi]`.
#[derive(Clone, Debug, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CpiConfig {
    /// A hardware model written by `hwqos probe --json -o FILE` (relative to
    /// the config file): its measured per-level latencies give the penalties.
    pub hardware_model: Option<PathBuf>,
    /// Cycles per miss at each level for the CPI stack. With a hardware model,
    /// the keys set here override the model's values.
    pub penalties: CpiPenalties,
}

impl CpiConfig {
    /// With `hardware_model` set: anchors a relative path at `base`, loads the
    /// model and replaces the penalties with the model's, except the keys set
    /// explicitly in `[cpi.penalties]` of `text`. Errors name the model file.
    fn resolve(&mut self, text: &str, base: &Path) -> Result<(), String> {
        let Some(path) = self.hardware_model.as_mut() else {
            return Ok(());
        };
        if path.is_relative() {
            *path = base.join(&*path);
        }
        // Read here with the agents' bounded reader: a FIFO or device named as
        // the model is refused instead of blocking or filling memory.
        let bytes = hwqos_agent::read_file_bounded(path, hwqos_topology::model::MAX_MODEL_BYTES)
            .map_err(|e| format!("cannot read the hardware model {}: {e}", path.display()))?;
        let model =
            hwqos_topology::HardwareModel::from_slice(&bytes, path).map_err(|e| e.to_string())?;
        let from_model = model.cpi_penalties().ok_or_else(|| {
            format!(
                "{}: the hardware model has no measured cache latencies in cycles (create it with `hwqos probe --json -o {}`, which runs the memlat and clock probes)",
                path.display(),
                path.display()
            )
        })?;
        let explicit: Vec<String> = toml::from_str::<toml::Table>(text)
            .ok()
            .and_then(|t| t.get("cpi")?.get("penalties")?.as_table().cloned())
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        let table = |p: &CpiPenalties| match toml::Value::try_from(p) {
            Ok(toml::Value::Table(t)) => Ok(t),
            other => Err(format!("cannot convert CPI penalties: {other:?}")),
        };
        let mut merged = table(&from_model)?;
        let configured = table(&self.penalties)?;
        for key in explicit {
            if let Some(v) = configured.get(&key) {
                merged.insert(key, v.clone());
            }
        }
        self.penalties = toml::Value::Table(merged)
            .try_into()
            .map_err(|e: toml::de::Error| e.to_string())?;
        Ok(())
    }
}

fn default_rate() -> f64 {
    10.0
}

fn yes() -> bool {
    true
}

fn default_rescan() -> u32 {
    10
}

/// The default rotation: kernel software events (work everywhere), then
/// hardware sets after the thesis' default overview set (Listing 5.1): IPC
/// alone, data loads/stores, branches, L1 instruction, L1 data, L2, LLC and
/// TLBs. Each hardware set carries cycles and instructions so IPC/CPI and the
/// CPI stack come from one group. Events a PMU does not offer (L2 where the
/// CPU is not in the curated table — perf's generic ABI has no L2 event —,
/// L1D stores on many x86 cores) are dropped as unavailable and listed as
/// such; a set left with only cycles and instructions still gives IPC.
pub fn default_event_sets() -> Vec<Vec<String>> {
    let hw = |extra: &[&str]| {
        [names::HW_CYCLES, names::HW_INSTRUCTIONS]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    vec![
        [
            names::SW_TASK_CLOCK,
            names::SW_PAGE_FAULTS,
            names::SW_CONTEXT_SWITCHES,
            names::SW_CPU_MIGRATIONS,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        hw(&[names::HW_L1D_ACCESS, names::HW_L1D_STORE]),
        hw(&[names::HW_BRANCHES, names::HW_BRANCH_MISS]),
        hw(&[names::HW_L1I_ACCESS, names::HW_L1I_MISS]),
        hw(&[names::HW_L1D_ACCESS, names::HW_L1D_MISS]),
        hw(&[names::HW_L2_ACCESS, names::HW_L2_MISS]),
        hw(&[names::HW_LLC_ACCESS, names::HW_LLC_MISS]),
        hw(&[names::HW_DTLB_MISS, names::HW_ITLB_MISS]),
    ]
}

impl Default for Config {
    fn default() -> Self {
        Config {
            rate_hz: default_rate(),
            targets: Vec::new(),
            per_cpu: true,
            cpus: None,
            event_sets: default_event_sets(),
            procfs: true,
            rescan_every: default_rescan(),
            sleep: None,
            database: DatabaseConfig::default(),
            output: OutputConfig::default(),
            api: ApiConfig::default(),
            metrics: MetricsConfig::default(),
            apps: Vec::new(),
            cpi: CpiConfig::default(),
        }
    }
}

/// A configuration error: `file:line: key `k`: expected…` (the one format
/// every hwqos agent prints, from `hwqos_agent::lifecycle`).
pub use hwqos_agent::lifecycle::ConfigError;

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path, check_event: EventCheck<'_>) -> Result<Config, ConfigError> {
        let text = hwqos_agent::read_config_file(path, MAX_CONFIG_BYTES)
            .map_err(|e| ConfigError::unreadable(path, &e))?;
        Config::parse(&text, path, check_event)
    }

    /// Parses and validates config text; `file` names it in errors and anchors
    /// relative paths (they are relative to the file's directory).
    pub fn parse(
        text: &str,
        file: &Path,
        check_event: EventCheck<'_>,
    ) -> Result<Config, ConfigError> {
        let mut config: Config =
            toml::from_str(text).map_err(|e| ConfigError::from_toml(file, text, &e))?;
        let file_abs = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
        let base = file_abs.parent().unwrap_or(Path::new("/"));
        for p in [&mut config.output.dir, &mut config.api.socket] {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        config
            .cpi
            .resolve(text, base)
            .map_err(|message| ConfigError::invalid(file, text, "cpi.hardware_model", message))?;
        config
            .validate(check_event)
            .map_err(|(key, message)| ConfigError::invalid(file, text, &key, message))?;
        Ok(config)
    }

    /// Checks values that the types alone do not constrain, including that the
    /// output directory is writable. Errors are `(dotted key, message)`.
    pub fn validate(&self, check_event: EventCheck<'_>) -> Result<(), (String, String)> {
        let bad = |key: &str, msg: String| Err((key.to_string(), msg));
        check_rate(self.rate_hz).or_else(|m| bad("rate_hz", m))?;
        if self.database.frames == 0 || self.database.frames > MAX_DB_FRAMES {
            return bad(
                "database.frames",
                format!(
                    "{} frames is outside 1..={MAX_DB_FRAMES}",
                    self.database.frames
                ),
            );
        }
        if self.database.max_mib == 0 {
            return bad("database.max_mib", "must be at least 1 MiB".into());
        }
        if let Some(cpus) = &self.cpus {
            if cpus.is_empty() {
                return bad(
                    "cpus",
                    "the CPU list is empty (leave it out for all online CPUs)".into(),
                );
            }
        }
        check_event_sets(&self.event_sets, check_event).or_else(|m| bad("event_sets", m))?;
        self.cpi
            .penalties
            .validate()
            .or_else(|m| bad("cpi.penalties", m))?;
        if self.output.formats.is_empty() {
            return bad(
                "output.formats",
                "no format given (use \"jsonl\" and/or \"csv\")".into(),
            );
        }
        use crate::segments::{MAX_MAX_MIB, MAX_SEGMENT_MIB};
        if !(1..=MAX_SEGMENT_MIB).contains(&self.output.segment_mib) {
            return bad(
                "output.segment_mib",
                format!(
                    "{} is out of range (1 to {MAX_SEGMENT_MIB} MiB per segment file)",
                    self.output.segment_mib
                ),
            );
        }
        if !(self.output.segment_mib..=MAX_MAX_MIB).contains(&self.output.max_mib) {
            return bad(
                "output.max_mib",
                format!(
                    "{} is out of range (at least segment_mib = {}, at most {MAX_MAX_MIB} MiB)",
                    self.output.max_mib, self.output.segment_mib
                ),
            );
        }
        check_writable_dir(&self.output.dir).or_else(|m| bad("output.dir", m))?;
        if self.api.enabled {
            if self.api.socket.as_os_str().is_empty() {
                return bad("api.socket", "empty socket path".into());
            }
            if self.api.client_queue == 0 {
                return bad("api.client_queue", "must be at least 1 frame".into());
            }
            if !(1..=MAX_WINDOWS_LIMIT).contains(&self.api.max_windows) {
                return bad(
                    "api.max_windows",
                    format!(
                        "{} is out of range (1 to {MAX_WINDOWS_LIMIT} window responses at once)",
                        self.api.max_windows
                    ),
                );
            }
            let t = self.api.window_timeout_s;
            if !t.is_finite() || t <= 0.0 || t > MAX_WINDOW_TIMEOUT_S {
                return bad(
                    "api.window_timeout_s",
                    format!(
                        "{t} is out of range (more than 0, at most {MAX_WINDOW_TIMEOUT_S} seconds)"
                    ),
                );
            }
        }
        let stale = self.metrics.app_stale_s;
        if !stale.is_finite() || !(0.0..=MAX_APP_STALE_S).contains(&stale) {
            return bad(
                "metrics.app_stale_s",
                format!("{stale} is out of range (0 to {MAX_APP_STALE_S} seconds)"),
            );
        }
        if self.metrics.enabled {
            let addr: SocketAddr = match self.metrics.listen.parse() {
                Ok(a) => a,
                Err(e) => {
                    return bad(
                        "metrics.listen",
                        format!("`{}` is not an IP:PORT address ({e})", self.metrics.listen),
                    )
                }
            };
            if !addr.ip().is_loopback() && !self.metrics.allow_non_loopback {
                return bad(
                    "metrics.listen",
                    format!(
                        "{addr} is not a loopback address; the endpoint has no authentication, so set `allow_non_loopback = true` in [metrics] to expose it beyond this node"
                    ),
                );
            }
        }
        Ok(())
    }

    /// The sampler's part of the configuration.
    pub fn sampler_config(&self) -> SamplerConfig {
        SamplerConfig {
            targets: self.targets.iter().map(|t| t.select.clone()).collect(),
            per_cpu: self.per_cpu,
            cpus: self.cpus.clone(),
            event_sets: self.event_sets.clone(),
            procfs: self.procfs,
            rescan_every: self.rescan_every,
            cpi_penalties: self.cpi.penalties.clone(),
            app_sources: self.apps.clone(),
        }
    }

    /// The sampling period.
    pub fn period(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(1.0 / self.rate_hz)
    }
}

/// Checks a sampling rate (also used for `--rate`).
pub fn check_rate(rate_hz: f64) -> Result<(), String> {
    if !rate_hz.is_finite() || !(MIN_RATE_HZ..=MAX_RATE_HZ).contains(&rate_hz) {
        return Err(format!(
            "{rate_hz} Hz is not a possible sampling rate (use {MIN_RATE_HZ} to {MAX_RATE_HZ} Hz)"
        ));
    }
    Ok(())
}

/// Most event sets rotated (each set's events stay open on every target, so
/// sets cost file descriptors and kernel memory per target).
pub const MAX_EVENT_SETS: usize = 32;
/// Most events in one set (one group read at once).
pub const MAX_EVENTS_PER_SET: usize = 16;
/// Most events over all sets.
pub const MAX_EVENTS_TOTAL: usize = 128;

/// Checks event sets: at most [`MAX_EVENT_SETS`] sets of at most
/// [`MAX_EVENTS_PER_SET`] events and [`MAX_EVENTS_TOTAL`] in all, non-empty
/// sets, no duplicates within a set, known names.
pub fn check_event_sets(sets: &[Vec<String>], check_event: EventCheck<'_>) -> Result<(), String> {
    if sets.len() > MAX_EVENT_SETS {
        return Err(format!(
            "{} event sets given; at most {MAX_EVENT_SETS} are rotated (each set stays open on every target)",
            sets.len()
        ));
    }
    let total: usize = sets.iter().map(Vec::len).sum();
    if total > MAX_EVENTS_TOTAL {
        return Err(format!(
            "{total} events over all sets; at most {MAX_EVENTS_TOTAL} are accepted"
        ));
    }
    for (i, set) in sets.iter().enumerate() {
        if set.is_empty() {
            return Err(format!("set {} is empty", i + 1));
        }
        if set.len() > MAX_EVENTS_PER_SET {
            return Err(format!(
                "set {} has {} events; at most {MAX_EVENTS_PER_SET} are accepted in one set",
                i + 1,
                set.len()
            ));
        }
        for (j, name) in set.iter().enumerate() {
            if set[..j].contains(name) {
                return Err(format!("set {} lists `{name}` twice", i + 1));
            }
            check_event(name)
                .map_err(|reason| format!("unknown event `{name}` in set {}: {reason}", i + 1))?;
        }
    }
    Ok(())
}

/// Creates `dir` if needed and proves it writable by creating a temporary file.
pub fn check_writable_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create output directory {}: {e}", dir.display()))?;
    tempfile::Builder::new()
        .prefix(".hwqos-write-check")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| format!("output directory {} is not writable: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any_event(_: &str) -> Result<(), String> {
        Ok(())
    }

    fn only_known(name: &str) -> Result<(), String> {
        if name.starts_with("hw.bogus") {
            Err("not in the catalog".into())
        } else {
            Ok(())
        }
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir();
        Config::parse(text, &dir.join("t.toml"), &only_known)
    }

    fn with_out(text: &str) -> (tempfile::TempDir, String) {
        let d = tempfile::tempdir().unwrap();
        let t = format!("{text}\n[output]\ndir = {:?}\n", d.path());
        (d, t)
    }

    #[test]
    fn event_sets_are_bounded() {
        let sets = |n: usize, per: usize| -> Vec<Vec<String>> {
            (0..n)
                .map(|i| (0..per).map(|j| format!("sw.e{i}_{j}")).collect())
                .collect()
        };
        assert!(check_event_sets(&sets(MAX_EVENT_SETS, 4), &any_event).is_ok());
        let e = check_event_sets(&sets(1000, 2), &any_event).unwrap_err();
        assert!(e.contains("1000 event sets given; at most 32"), "{e}");
        let e = check_event_sets(&sets(1, MAX_EVENTS_PER_SET + 1), &any_event).unwrap_err();
        assert!(e.contains("set 1 has 17 events; at most 16"), "{e}");
        let e = check_event_sets(&sets(20, 8), &any_event).unwrap_err();
        assert!(e.contains("160 events over all sets; at most 128"), "{e}");
        // In a config file the error names the key.
        let many = sets(40, 1)
            .iter()
            .map(|s| format!("[{:?}]", s[0]))
            .collect::<Vec<_>>()
            .join(",");
        let (_d, t) = with_out(&format!("event_sets = [{many}]"));
        let e = parse(&t).unwrap_err().to_string();
        assert!(e.contains("event_sets") && e.contains("at most 32"), "{e}");
    }

    #[test]
    fn window_limits_are_range_checked() {
        for (extra, key) in [
            ("max_windows = 0", "api.max_windows"),
            ("max_windows = 65", "api.max_windows"),
            ("window_timeout_s = 0", "api.window_timeout_s"),
            ("window_timeout_s = 1e9", "api.window_timeout_s"),
        ] {
            let (_d, t) = with_out("");
            let e = parse(&format!("{t}\n[api]\n{extra}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(key) && e.contains("out of range"),
                "{extra}: {e}"
            );
        }
    }

    #[test]
    fn defaults() {
        let (_d, t) = with_out("");
        let c = parse(&t).unwrap();
        assert_eq!(c.rate_hz, 10.0);
        assert_eq!(c.database.frames, 30_000);
        assert!(c.per_cpu && c.procfs);
        assert_eq!(c.event_sets, default_event_sets());
        assert_eq!(c.metrics.listen, "127.0.0.1:9464");
        assert_eq!(c.output.formats, vec![Format::Jsonl, Format::Csv]);
    }

    #[test]
    fn full_config() {
        let (_d, t) = with_out(
            r#"rate_hz = 1000
per_cpu = false
cpus = [0]
event_sets = [["sw.task_clock", "sw.page_faults"]]
[[target]]
select = "pid:1"
[[target]]
select = "name:nginx"
[database]
frames = 100
[api]
socket = "mon.sock"
[metrics]
listen = "[::1]:0"
[cpi.penalties]
llc = 200.0
"#,
        );
        let c = parse(&t).unwrap();
        assert_eq!(c.rate_hz, 1000.0);
        assert_eq!(c.targets.len(), 2);
        assert_eq!(c.targets[1].select.to_string(), "name:nginx");
        assert_eq!(c.database.frames, 100);
        assert_eq!(c.cpi.penalties.llc, 200.0);
        assert!(
            c.api.socket.is_absolute(),
            "relative paths anchor at the file"
        );
        let s = c.sampler_config();
        assert_eq!(s.event_sets.len(), 1);
        assert_eq!(s.cpus, Some(vec![0]));
    }

    fn err(text: &str) -> ConfigError {
        let (_d, t) = with_out(text);
        parse(&t).unwrap_err()
    }

    #[test]
    fn unknown_key_is_named_with_position() {
        let e = err("rate_hz = 10\nrat_hz = 5");
        let s = e.to_string();
        assert_eq!(e.line, Some(2), "{s}");
        assert!(s.contains("t.toml:2: key `rat_hz`: "), "{s}");
        let e = err("[database]\nframes = 5\nsize = 3");
        assert_eq!(e.key.as_deref(), Some("database.size"), "{e}");
    }

    #[test]
    fn bad_type_names_the_key() {
        let e = err("rate_hz = \"fast\"");
        assert_eq!(e.key.as_deref(), Some("rate_hz"), "{e}");
        assert!(e.to_string().contains("t.toml:1: key `rate_hz`: "), "{e}");
        let e = err("[database]\nframes = -3");
        assert_eq!(e.key.as_deref(), Some("database.frames"), "{e}");
    }

    #[test]
    fn impossible_rate() {
        for r in ["0", "0.01", "20000", "-5", "nan", "inf"] {
            let e = err(&format!("rate_hz = {r}"));
            assert_eq!(e.key.as_deref(), Some("rate_hz"), "{e}");
            assert!(
                e.to_string().contains("not a possible sampling rate"),
                "{e}"
            );
            assert_eq!(e.line, Some(1));
        }
    }

    #[test]
    fn unknown_event_and_bad_sets() {
        let e = err("event_sets = [[\"sw.page_faults\"], [\"hw.bogus_event\"]]");
        assert_eq!(e.key.as_deref(), Some("event_sets"));
        assert!(
            e.expected.contains("hw.bogus_event") && e.expected.contains("set 2"),
            "{e}"
        );
        let e = err("event_sets = [[]]");
        assert!(e.expected.contains("empty"), "{e}");
        let e = err("event_sets = [[\"sw.page_faults\", \"sw.page_faults\"]]");
        assert!(e.expected.contains("twice"), "{e}");
    }

    #[test]
    fn bad_target_selector() {
        let e = err("[[target]]\nselect = \"bogus:1\"");
        assert_eq!(e.key.as_deref(), Some("target.select"), "{e}");
        assert!(e.to_string().contains("bogus:1"), "{e}");
    }

    #[test]
    fn non_loopback_listen_needs_opt_in() {
        let e = err("[metrics]\nlisten = \"0.0.0.0:9464\"");
        assert_eq!(e.key.as_deref(), Some("metrics.listen"));
        assert!(e.expected.contains("allow_non_loopback"), "{e}");
        let (_d, t) = with_out("[metrics]\nlisten = \"0.0.0.0:9464\"\nallow_non_loopback = true");
        assert!(parse(&t).is_ok());
        let e = err("[metrics]\nlisten = \"localhost\"");
        assert!(e.expected.contains("not an IP:PORT"), "{e}");
    }

    #[test]
    fn unwritable_output_dir() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("a-file");
        std::fs::write(&file, "x").unwrap();
        let t = format!("[output]\ndir = {:?}\n", file.join("sub"));
        let e = parse(&t).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("output.dir"), "{e}");
        assert_eq!(e.line, Some(2));
        let e = Config::parse(
            "[output]\nformats = []\n",
            &d.path().join("t.toml"),
            &any_event,
        )
        .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("output.formats"));
        let e = Config::parse(
            "[output]\nformats = [\"xml\"]\n",
            &d.path().join("t.toml"),
            &any_event,
        )
        .unwrap_err();
        assert!(e.to_string().contains("xml"), "{e}");
    }

    #[test]
    fn output_bounds_and_app_staleness_are_range_checked() {
        let output = |keys: &str| {
            let d = tempfile::tempdir().unwrap();
            let t = format!("[output]\ndir = {:?}\n{keys}\n", d.path());
            (d, parse(&t))
        };
        let (_d, c) = output("");
        let c = c.unwrap();
        assert_eq!((c.output.segment_mib, c.output.max_mib), (64, 1024));
        assert_eq!(c.metrics.app_stale_s, 300.0);
        let (_d, c) = output("segment_mib = 1\nmax_mib = 1");
        assert_eq!(c.unwrap().output.limits().segment_bytes, 1 << 20);
        for (keys, key, says) in [
            ("segment_mib = 0", "output.segment_mib", "1 to 4096"),
            ("segment_mib = 5000", "output.segment_mib", "1 to 4096"),
            (
                "segment_mib = 8\nmax_mib = 4",
                "output.max_mib",
                "at least segment_mib",
            ),
            ("max_mib = 2000000", "output.max_mib", "at most 1048576"),
        ] {
            let (_d, e) = output(keys);
            let e = e.unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{keys}: {e}");
            assert!(e.expected.contains(says), "{keys}: {e}");
        }
        let (_d, t) = with_out("[metrics]\napp_stale_s = 0");
        assert_eq!(parse(&t).unwrap().metrics.app_stale_s, 0.0);
        for bad in ["-1", "86401", "nan"] {
            let e = err(&format!("[metrics]\napp_stale_s = {bad}"));
            assert_eq!(e.key.as_deref(), Some("metrics.app_stale_s"), "{e}");
            assert!(e.expected.contains("0 to 86400 seconds"), "{e}");
        }
    }

    #[test]
    fn example_config_is_valid_and_matches_the_defaults() {
        let text = include_str!("../../../deploy/config/monitor.toml");
        let d = tempfile::tempdir().unwrap();
        let text = text.replace(
            "dir = \"/var/lib/hwqos/monitor\"",
            &format!("dir = {:?}", d.path()),
        );
        let c = parse(&text).unwrap();
        let mut expected = Config::default();
        expected.output.dir = d.path().to_path_buf();
        assert_eq!(c, expected);
    }
}
