//! The relay's configuration (`/etc/hwqos/relay.toml`; every key is optional,
//! see `deploy/config/relay.toml` for each key explained).

use hwqos_compress::{PolicyKind, Registry, Sampling, StreamConfig, ThrottleConfig};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Which end of the link this relay is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Accepts plain TCP from applications on `listen`, carries it framed and
    /// compressed to the peer relay at `connect`.
    Compress,
    /// Accepts framed connections from the peer relay on `listen`, carries
    /// them plain to the real server at `connect`.
    Decompress,
}

/// The `/metrics` endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Address of the OpenMetrics endpoint; empty string: no endpoint.
    pub listen: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9188".into(),
        }
    }
}

/// Everything the relay reads from its file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub mode: Mode,
    pub listen: String,
    pub connect: String,
    pub policy: PolicyKind,
    /// Target CPU utilization (0, 1] for the throttle; 0 turns the throttle off.
    pub cpu_target: f64,
    /// How per-CPU utilizations combine: "mean" (the node), "max" (the
    /// busiest CPU) or "affinity" (mean over the CPUs the relay may run on).
    pub cpu_aggregate: hwqos_compress::CpuAggregate,
    /// Codecs offered and used (empty: all built-in).
    pub codecs: Vec<String>,
    pub max_message: u32,
    /// Largest chunk read from the plain side as one message.
    pub chunk_bytes: u32,
    pub checksum: bool,
    pub round_messages: u32,
    pub probe_every: u32,
    pub probe_pad: u32,
    /// Known one-way link cost in ns per byte (0: measure with probes).
    pub link_ns_per_byte: f64,
    /// How long SIGTERM waits for open connections before exiting.
    pub drain_timeout_ms: u64,
    /// Most simultaneous connections (further ones are refused).
    pub max_connections: usize,
    pub metrics: MetricsConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Compress,
            listen: "127.0.0.1:7400".into(),
            connect: "127.0.0.1:7401".into(),
            policy: PolicyKind::Adaptive,
            cpu_target: 0.8,
            cpu_aggregate: hwqos_compress::CpuAggregate::Mean,
            codecs: Vec::new(),
            max_message: 1 << 20,
            chunk_bytes: 16 * 1024,
            checksum: false,
            round_messages: 100,
            probe_every: 16,
            probe_pad: 512,
            link_ns_per_byte: 0.0,
            drain_timeout_ms: 5000,
            max_connections: 256,
            metrics: MetricsConfig::default(),
        }
    }
}

/// A configuration problem, naming the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: key `{key}`: {message}")]
    Invalid {
        path: PathBuf,
        key: &'static str,
        message: String,
    },
}

impl Config {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses and validates text; `path` is used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        c.validate(path)?;
        Ok(c)
    }

    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let bad = |key, message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            key,
            message,
        };
        let addr = |key, v: &str| {
            v.parse::<SocketAddr>()
                .map(|_| ())
                .map_err(|e| bad(key, format!("`{v}` is not an IP:port address ({e})")))
        };
        addr("listen", &self.listen)?;
        addr("connect", &self.connect)?;
        if !self.metrics.listen.is_empty() {
            addr("metrics.listen", &self.metrics.listen)?;
        }
        if !(0.0..=1.0).contains(&self.cpu_target) || self.cpu_target.is_nan() {
            return Err(bad(
                "cpu_target",
                format!(
                    "{} is not in [0, 1] (0 turns the throttle off)",
                    self.cpu_target
                ),
            ));
        }
        let reg = self.registry().map_err(|e| bad("codecs", e.to_string()))?;
        if let PolicyKind::One(name) = &self.policy {
            if reg.by_name(name).is_none() {
                return Err(bad(
                    "policy",
                    format!(
                        "codec `{name}` is not among the codecs ({})",
                        reg.names().join(", ")
                    ),
                ));
            }
        }
        if self.max_message < 1024 {
            return Err(bad(
                "max_message",
                format!("{} is below 1024 bytes", self.max_message),
            ));
        }
        if self.chunk_bytes == 0 || self.chunk_bytes > self.max_message {
            return Err(bad(
                "chunk_bytes",
                format!(
                    "{} must be in 1..=max_message ({})",
                    self.chunk_bytes, self.max_message
                ),
            ));
        }
        if self.round_messages == 0 {
            return Err(bad("round_messages", "must be at least 1".into()));
        }
        if self.probe_pad > 60_000 {
            return Err(bad(
                "probe_pad",
                format!("{} exceeds 60000 bytes", self.probe_pad),
            ));
        }
        if !(self.link_ns_per_byte >= 0.0 && self.link_ns_per_byte.is_finite()) {
            return Err(bad(
                "link_ns_per_byte",
                format!("{} is not >= 0", self.link_ns_per_byte),
            ));
        }
        if self.max_connections == 0 {
            return Err(bad("max_connections", "must be at least 1".into()));
        }
        Ok(())
    }

    /// The codec registry this config allows.
    pub fn registry(&self) -> Result<Registry, hwqos_compress::codec::RegistryError> {
        let all = Registry::standard();
        if self.codecs.is_empty() {
            Ok(all)
        } else {
            all.subset(&self.codecs)
        }
    }

    /// The stream settings of one link connection.
    pub fn stream_config(&self) -> StreamConfig {
        StreamConfig {
            policy: self.policy.clone(),
            max_message: self.max_message,
            checksum: self.checksum,
            round_messages: self.round_messages,
            probe_every: self.probe_every,
            probe_pad: self.probe_pad,
            link_ns_per_byte: (self.link_ns_per_byte > 0.0).then_some(self.link_ns_per_byte),
            throttle: (self.cpu_target > 0.0).then(|| ThrottleConfig {
                target: self.cpu_target,
                cpu_aggregate: self.cpu_aggregate,
                ..Default::default()
            }),
            sampling: Sampling::AfterSend,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_parses_and_equals_the_defaults() {
        let text = include_str!("../../../deploy/config/relay.toml");
        let c = Config::parse(text, Path::new("deploy/config/relay.toml")).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(
            Config::parse("", Path::new("x")).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn the_cpu_aggregate_reaches_the_throttle() {
        for (name, want) in [
            ("mean", hwqos_compress::CpuAggregate::Mean),
            ("max", hwqos_compress::CpuAggregate::Max),
            ("affinity", hwqos_compress::CpuAggregate::Affinity),
            ("cgroup", hwqos_compress::CpuAggregate::Cgroup),
        ] {
            let text = format!("cpu_target = 0.7\ncpu_aggregate = \"{name}\"");
            let c = Config::parse(&text, Path::new("x")).unwrap();
            let t = c.stream_config().throttle.expect("a throttle");
            assert_eq!((t.target, t.cpu_aggregate), (0.7, want), "{name}");
        }
        let e = Config::parse("cpu_aggregate = \"median\"", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("cpu_aggregate"), "{e}");
    }

    #[test]
    fn errors_name_the_file_and_the_key() {
        let cases = [
            ("cpu_target = 1.5", "cpu_target"),
            ("listen = \"nowhere\"", "listen"),
            ("policy = \"fastest\"", "policy"),
            ("policy = \"one:brotli\"", "policy"),
            ("codecs = [\"lz4\", \"brotli\"]", "codecs"),
            ("colour = 3", "colour"),
            ("[metrics]\nlisten = \"x\"", "metrics.listen"),
            ("chunk_bytes = 0", "chunk_bytes"),
            ("mode = \"both\"", "mode"),
        ];
        for (text, key) in cases {
            let e = Config::parse(text, Path::new("/etc/hwqos/relay.toml")).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("/etc/hwqos/relay.toml"), "{text}: {msg}");
            assert!(msg.contains(key), "{text}: {msg}");
        }
    }
}
