//! The TOML configuration of `hwqos-sra run` (`/etc/hwqos/sra.toml`).
//!
//! ```toml
//! [agent]
//! evaluation_period_s = 30       # monitor → analyse → decide → apply, every 30 s
//! sample_interval_ms = 100       # counter sampling inside a period
//! model = "/var/lib/hwqos-sra/model.json"
//! contract = "/var/lib/hwqos-sra/contract.json"
//! state_dir = "/run/hwqos-sra"
//! metrics_listen = "127.0.0.1:9466"
//! backend = "auto"               # auto | userspace | sched_sra
//! throttle = "sigstop"           # sigstop | freeze
//! route = "direct"               # direct | agent
//! rt_priority = 10
//! lending = false                # MemGuard-style lending (route = "agent")
//!
//! [monitor]
//! targets = ["name:victim"]
//! events = ["sw.page_faults", "sw.task_clock", "sw.context_switches"]
//! x_metric = "app.rate"
//! [[monitor.app_sources]]
//! type = "tail_file"
//! path = "/run/victim/rate"
//! metric = "app.rate"
//!
//! [analysis]
//! step_ms = 100
//! filter_order = 4
//! filter_cutoff = 0.2
//! threshold = 0.5
//! ```

use hwqos_pmu::appmetric::AppSource;
use hwqos_pmu::target::TargetSelector;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub agent: AgentSection,
    pub monitor: MonitorSection,
    #[serde(default)]
    pub analysis: AnalysisSection,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSection {
    pub evaluation_period_s: f64,
    pub sample_interval_ms: u64,
    pub model: PathBuf,
    pub contract: PathBuf,
    pub state_dir: PathBuf,
    pub metrics_listen: Option<String>,
    pub backend: String,
    pub throttle: String,
    pub route: String,
    pub rt_priority: i32,
    /// MemGuard-style lending of unused budget (needs route = "agent").
    pub lending: bool,
    /// Samples kept per evaluation (bounds memory).
    pub max_frames: usize,
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            evaluation_period_s: 30.0,
            sample_interval_ms: 100,
            model: "/var/lib/hwqos-sra/model.json".into(),
            contract: "/var/lib/hwqos-sra/contract.json".into(),
            state_dir: "/run/hwqos-sra".into(),
            metrics_listen: Some("127.0.0.1:9466".into()),
            backend: "auto".into(),
            throttle: "sigstop".into(),
            route: "direct".into(),
            rt_priority: 10,
            lending: false,
            max_frames: 36_000,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorSection {
    pub targets: Vec<TargetSelector>,
    #[serde(default = "default_events")]
    pub events: Vec<String>,
    pub x_metric: String,
    #[serde(default)]
    pub app_sources: Vec<AppSource>,
}

fn default_events() -> Vec<String> {
    vec![
        "sw.page_faults".into(),
        "sw.task_clock".into(),
        "sw.context_switches".into(),
        "sw.cpu_migrations".into(),
    ]
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnalysisSection {
    pub step_ms: u64,
    pub filter_order: usize,
    pub filter_cutoff: f64,
    pub threshold: f64,
}

impl Default for AnalysisSection {
    fn default() -> Self {
        AnalysisSection {
            step_ms: 100,
            filter_order: 4,
            filter_cutoff: 0.2,
            threshold: 0.5,
        }
    }
}

impl Config {
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let bad = |m: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: m,
        };
        let a = &c.agent;
        if !(a.evaluation_period_s.is_finite() && a.evaluation_period_s >= 1.0) {
            return Err(bad(format!(
                "agent.evaluation_period_s = {} (at least 1)",
                a.evaluation_period_s
            )));
        }
        if a.sample_interval_ms == 0
            || a.sample_interval_ms as f64 > a.evaluation_period_s * 1000.0 / 3.0
        {
            return Err(bad(format!(
                "agent.sample_interval_ms = {} (positive, at most a third of the evaluation period)",
                a.sample_interval_ms
            )));
        }
        if !(1..=10_000_000).contains(&a.max_frames) {
            return Err(bad(format!(
                "agent.max_frames = {} (1..=10000000)",
                a.max_frames
            )));
        }
        if !(0..=99).contains(&a.rt_priority) {
            return Err(bad(format!(
                "agent.rt_priority = {} (0 = no SCHED_FIFO, or a SCHED_FIFO priority 1..=99)",
                a.rt_priority
            )));
        }
        crate::agent::parse_enforce(&a.backend, &a.throttle, &a.route)
            .map_err(|e| bad(format!("agent: {e}")))?;
        if a.lending && a.route != "agent" {
            return Err(bad(
                "agent.lending = true needs agent.route = \"agent\"".into()
            ));
        }
        if c.monitor.targets.is_empty() {
            return Err(bad("monitor.targets is empty".into()));
        }
        if !c.monitor.x_metric.starts_with("app.") {
            return Err(bad(format!(
                "monitor.x_metric = `{}` (application metrics are in the app family: app.NAME)",
                c.monitor.x_metric
            )));
        }
        let an = &c.analysis;
        if an.step_ms == 0
            || !(0.0..=1.0).contains(&an.threshold)
            || an.filter_cutoff <= 0.0
            || !(1..=8).contains(&an.filter_order)
        {
            return Err(bad(format!(
                "analysis: step_ms {} > 0, threshold {} in [0, 1], filter_order {} in 1..=8, filter_cutoff {} > 0",
                an.step_ms, an.threshold, an.filter_order, an.filter_cutoff
            )));
        }
        Ok(c)
    }

    /// Reads and parses a configuration: a regular file of at most 1 MiB
    /// (devices and FIFOs are refused without reading).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            hwqos_sched::input::read_regular(path, MAX_CONFIG_BYTES).map_err(|e| match e {
                hwqos_sched::SchedError::File { source, .. } => ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                },
                hwqos_sched::SchedError::Invalid { reason, .. } => ConfigError::Invalid {
                    path: path.to_path_buf(),
                    message: reason,
                },
                other => ConfigError::Invalid {
                    path: path.to_path_buf(),
                    message: other.to_string(),
                },
            })?;
        Config::parse(&text, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/sra.toml");
        let c = Config::load(&path).unwrap();
        assert!(!c.monitor.targets.is_empty());
    }

    #[test]
    fn errors_name_the_field() {
        let p = Path::new("x.toml");
        let base = "[monitor]\ntargets = [\"name:a\"]\nx_metric = \"app.x\"\n";
        assert!(Config::parse(base, p).is_ok());
        let cases = [
            (
                format!("{base}[agent]\nevaluation_period_s = 0\n"),
                "evaluation_period_s",
            ),
            (format!("{base}[agent]\nthrottle = \"nap\"\n"), "throttle"),
            (
                format!("{base}[agent]\nlending = true\n"),
                "lending = true needs",
            ),
            (base.replace("app.x", "x"), "x_metric"),
            (base.replace("\"name:a\"", "\"pid:x\""), "invalid target"),
            (format!("{base}[analysis]\nthreshold = 3\n"), "threshold 3"),
            (
                format!("{base}[agent]\nrt_priority = 1000\n"),
                "agent.rt_priority = 1000",
            ),
            (
                format!("{base}[agent]\nrt_priority = -1\n"),
                "rt_priority = -1",
            ),
            (format!("{base}bogus = 1\n"), "unknown field"),
        ];
        for (text, want) in cases {
            let e = Config::parse(&text, p).unwrap_err().to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }
}
