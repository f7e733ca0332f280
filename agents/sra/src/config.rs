//! The TOML configuration of `hwqos-sra run` (`/etc/hwqos/sra.toml`).
//!
//! ```toml
//! [agent]
//! evaluation_period_s = 30       # monitor → analyse → decide → apply, every 30 s
//! sample_interval_ms = 100       # counter sampling inside a period
//! model = "/var/lib/hwqos-sra/model.json"
//! contract = "/var/lib/hwqos-sra/contract.json"
//! # contract_dir = "/etc/hwqos/contracts.d"  # the fleet decides: apply the
//! #                                          # best contract found there
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
//! api_socket = "/run/hwqos/monitor.sock"  # the monitor's live API; "" = sample alone
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

use hwqos_core::metric::names;
use hwqos_pmu::appmetric::AppSource;
use hwqos_pmu::target::TargetSelector;
use serde::Deserialize;
use std::path::{Path, PathBuf};

pub use hwqos_agent::lifecycle::ConfigError;

/// Where `hwqos-monitor` serves its live API by default.
pub const DEFAULT_MONITOR_SOCKET: &str = "/run/hwqos/monitor.sock";

/// The configuration of `hwqos-sra run`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[agent]`: the loop's timing, files and enforcement (optional).
    #[serde(default)]
    pub agent: AgentSection,
    /// `[monitor]`: what is sampled (required: `targets` and `x_metric`).
    pub monitor: MonitorSection,
    /// `[analysis]`: how resources are correlated with x (optional).
    #[serde(default)]
    pub analysis: AnalysisSection,
}

/// `[agent]`: the closed loop and how it enforces.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSection {
    /// Seconds between monitor → analyse → decide → apply passes (at least
    /// 1; default 30).
    pub evaluation_period_s: f64,
    /// How often the targets' counters and x are sampled, in ms (positive,
    /// at most a third of the evaluation period; default 100).
    pub sample_interval_ms: u64,
    /// The sensitivity model, kept across restarts (default
    /// `/var/lib/hwqos-sra/model.json`).
    pub model: PathBuf,
    /// Where the last contract is saved and re-applied from at start
    /// (default `/var/lib/hwqos-sra/contract.json`).
    pub contract: PathBuf,
    /// A directory of contracts written by the fleet's configuration tool
    /// (unset by default). When set, the agent runs no decision of its own:
    /// it applies the valid `*.json` contract with the highest version there
    /// (rules in [`hwqos_sched::contract_dir`]), watched with inotify and
    /// rescanned every evaluation period; a bad file is logged and counted,
    /// and the last good contract stays applied.
    pub contract_dir: Option<PathBuf>,
    /// Directory of the throttle state file that `hwqos-sra thaw` reads
    /// (default `/run/hwqos-sra`).
    pub state_dir: PathBuf,
    /// Address of the OpenMetrics `/metrics` endpoint (default
    /// `127.0.0.1:9466`).
    pub metrics_listen: Option<String>,
    /// Quota backend: `auto` (default: the SCHED_SRA class when
    /// `/proc/sched_sra` exists, else userspace), `userspace` or `sched_sra`.
    pub backend: String,
    /// Userspace backend's throttle: `sigstop` (default) or `freeze` (cgroup
    /// v2 freezer).
    pub throttle: String,
    /// Userspace backend's overflow route: `direct` (default: the kernel
    /// stops the task at the overflow) or `agent` (the signal goes to the
    /// agent, which throttles; needed to throttle other users' processes).
    pub route: String,
    /// SCHED_FIFO priority of the overflow and renewal threads (0: none,
    /// else 1..=99; default 10).
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
            contract_dir: None,
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

/// `[monitor]`: the processes, resources and application metric sampled.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorSection {
    /// Processes to analyse and enforce (`pid:N`, `name:X`, `regex:X`,
    /// `cgroup:/PATH`, `unit:NAME`); required, at least one.
    pub targets: Vec<TargetSelector>,
    /// The resources R correlated with x, as event names (default: the
    /// software events page faults, task clock, context switches and CPU
    /// migrations).
    #[serde(default = "default_events")]
    pub events: Vec<String>,
    /// The application performance metric x, an `app.*` metric from
    /// `app_sources`; required.
    pub x_metric: String,
    /// Where x comes from (`[[monitor.app_sources]]`: socket, tail_file or
    /// command, as in the monitor's `[[app]]`; default none).
    #[serde(default)]
    pub app_sources: Vec<AppSource>,
    /// The node monitor's live API socket. While `hwqos-monitor` serves it,
    /// the agent reads its frames there and opens no counters of its own;
    /// otherwise (absent, refused, dropped) it samples itself and tries the
    /// monitor again later. Empty: never use the monitor.
    #[serde(default = "default_api_socket")]
    pub api_socket: PathBuf,
}

fn default_api_socket() -> PathBuf {
    DEFAULT_MONITOR_SOCKET.into()
}

fn default_events() -> Vec<String> {
    vec![
        names::SW_PAGE_FAULTS.into(),
        names::SW_TASK_CLOCK.into(),
        names::SW_CONTEXT_SWITCHES.into(),
        names::SW_CPU_MIGRATIONS.into(),
    ]
}

/// `[analysis]`: the correlation of resources with x.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnalysisSection {
    /// Common time base of R and x in ms (positive; default 100).
    pub step_ms: u64,
    /// Order of the forward-backward Butterworth low-pass (1..=8; default 4).
    pub filter_order: usize,
    /// Its cutoff as a fraction of the Nyquist frequency (> 0, ≥ 1 disables
    /// the filter; default 0.2).
    pub filter_cutoff: f64,
    /// θ: a resource counts as r̂ when |Corr(r, x)| is at least this (0..=1;
    /// default 0.5).
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
    /// Parses and validates a configuration read from `path`; errors name
    /// the file, the line and the key.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::from_toml(path, text, &e))?;
        c.validate(path, text)?;
        Ok(c)
    }

    fn validate(&self, path: &Path, text: &str) -> Result<(), ConfigError> {
        let bad =
            |key: &str, expected: String| Err(ConfigError::invalid(path, text, key, expected));
        let a = &self.agent;
        if !(a.evaluation_period_s.is_finite() && a.evaluation_period_s >= 1.0) {
            return bad(
                "agent.evaluation_period_s",
                format!("expected at least 1, found {}", a.evaluation_period_s),
            );
        }
        if a.sample_interval_ms == 0
            || a.sample_interval_ms as f64 > a.evaluation_period_s * 1000.0 / 3.0
        {
            return bad(
                "agent.sample_interval_ms",
                format!(
                    "expected a positive interval of at most a third of the evaluation period, found {}",
                    a.sample_interval_ms
                ),
            );
        }
        if !(1..=10_000_000).contains(&a.max_frames) {
            return bad(
                "agent.max_frames",
                format!("expected 1..=10000000, found {}", a.max_frames),
            );
        }
        if !(0..=99).contains(&a.rt_priority) {
            return bad(
                "agent.rt_priority",
                format!(
                    "expected 0 (no SCHED_FIFO) or a SCHED_FIFO priority 1..=99, found {}",
                    a.rt_priority
                ),
            );
        }
        if let Err(e) = crate::enforce::parse_enforce(&a.backend, &a.throttle, &a.route) {
            return bad(&format!("agent.{}", e.key), e.message);
        }
        if a.lending && a.route != "agent" {
            return bad(
                "agent.lending",
                "lending = true needs agent.route = \"agent\"".into(),
            );
        }
        if let Some(dir) = &a.contract_dir {
            if dir.as_os_str().is_empty() {
                return bad(
                    "agent.contract_dir",
                    "expected a directory (leave the key out for none)".into(),
                );
            }
            // The agent saves what it applies to `contract`: inside the
            // watched directory it would read its own copy back.
            if a.contract.parent() == Some(dir.as_path()) {
                return bad(
                    "agent.contract_dir",
                    format!(
                        "the saved contract {} must not be inside the watched directory",
                        a.contract.display()
                    ),
                );
            }
        }
        if self.monitor.targets.is_empty() {
            return bad("monitor.targets", "expected at least one target".into());
        }
        if !self.monitor.x_metric.starts_with("app.") {
            return bad(
                "monitor.x_metric",
                format!(
                    "expected an application metric (app.NAME), found `{}`",
                    self.monitor.x_metric
                ),
            );
        }
        let an = &self.analysis;
        if an.step_ms == 0 {
            return bad("analysis.step_ms", "expected a positive step".into());
        }
        if !(0.0..=1.0).contains(&an.threshold) {
            return bad(
                "analysis.threshold",
                format!("expected a number in [0, 1], found {}", an.threshold),
            );
        }
        if !(1..=8).contains(&an.filter_order) {
            return bad(
                "analysis.filter_order",
                format!("expected 1..=8, found {}", an.filter_order),
            );
        }
        if an.filter_cutoff.is_nan() || an.filter_cutoff <= 0.0 {
            return bad(
                "analysis.filter_cutoff",
                format!("expected a number > 0, found {}", an.filter_cutoff),
            );
        }
        Ok(())
    }

    /// Reads and parses a configuration: a regular file of at most 1 MiB
    /// (devices and FIFOs are refused without reading).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let (c, text): (Config, String) = hwqos_agent::lifecycle::load_toml(path)?;
        c.validate(path, &text)?;
        Ok(c)
    }

    /// The monitor's live API socket, `None` when disabled (`api_socket = ""`).
    pub fn monitor_socket(&self) -> Option<&Path> {
        Some(self.monitor.api_socket.as_path()).filter(|p| !p.as_os_str().is_empty())
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
                "x.toml:5: key `agent.evaluation_period_s`: expected at least 1, found 0",
            ),
            (
                format!("{base}[agent]\nthrottle = \"nap\"\n"),
                "x.toml:5: key `agent.throttle`: expected sigstop or freeze, found `nap`",
            ),
            (
                format!("{base}[agent]\nlending = true\n"),
                "x.toml:5: key `agent.lending`: lending = true needs",
            ),
            (base.replace("app.x", "x"), "x.toml:3: key `monitor.x_metric`"),
            (
                base.replace("\"name:a\"", "\"pid:x\""),
                "x.toml:2: key `monitor.targets`",
            ),
            (
                format!("{base}[analysis]\nthreshold = 3\n"),
                "x.toml:5: key `analysis.threshold`: expected a number in [0, 1], found 3",
            ),
            (
                format!("{base}[agent]\nrt_priority = 1000\n"),
                "x.toml:5: key `agent.rt_priority`: expected 0 (no SCHED_FIFO) or a SCHED_FIFO priority 1..=99, found 1000",
            ),
            (
                format!("{base}[agent]\nrt_priority = -1\n"),
                "found -1",
            ),
            (format!("{base}bogus = 1\n"), "unknown field"),
            (
                format!("{base}[agent]\ncontract_dir = \"\"\n"),
                "x.toml:5: key `agent.contract_dir`: expected a directory",
            ),
            (
                format!("{base}[agent]\ncontract_dir = \"/d\"\ncontract = \"/d/c.json\"\n"),
                "must not be inside the watched directory",
            ),
        ];
        let c = Config::parse(&format!("{base}api_socket = \"\"\n"), p).unwrap();
        assert_eq!(c.monitor_socket(), None);
        let c = Config::parse(base, p).unwrap();
        assert_eq!(c.monitor_socket(), Some(Path::new(DEFAULT_MONITOR_SOCKET)));
        assert_eq!(c.agent.contract_dir, None);
        let c = Config::parse(&format!("{base}[agent]\ncontract_dir = \"/d\"\n"), p).unwrap();
        assert_eq!(c.agent.contract_dir.as_deref(), Some(Path::new("/d")));
        for (text, want) in cases {
            let e = Config::parse(&text, p).unwrap_err().to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }
}
