//! The relay's configuration (`/etc/hwqos/relay.toml`; every key is optional,
//! see `deploy/config/relay.toml` for each key explained).

use hwqos_compress::{PolicyKind, Registry, Sampling, StreamConfig, ThrottleConfig};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Upper bound of `max_message` (16 MiB, hwqos-compress' default bound).
pub const MAX_MESSAGE: u64 = 16 << 20;
/// Upper bound of `chunk_bytes`: one buffer of this size per connection.
pub const MAX_CHUNK: u64 = 1 << 20;
/// Default `chunk_bytes`: on 100 Mbit/s, 256 KiB messages of text put
/// 1.13× fewer bytes on the link than 16 KiB ones (docs/compression.md).
pub const DEFAULT_CHUNK: u64 = 256 << 10;
/// Upper bound of `max_connections`.
pub const MAX_CONNECTIONS: usize = 65_536;
/// Upper bound of `drain_timeout_ms` and `idle_timeout_ms` (one day).
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;
/// Upper bound of `handshake_timeout_ms` (5 minutes).
pub const MAX_HANDSHAKE_TIMEOUT_MS: u64 = 300_000;
/// Lower bound of a non-zero `peer_expansion_bytes_per_s` (64 KiB/s).
pub const MIN_EXPANSION_BUDGET: u64 = 64 * 1024;
/// Upper bound of `peer_expansion_bytes_per_s` (2^40 bytes/s).
pub const MAX_EXPANSION_BUDGET: u64 = 1 << 40;

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
    /// Which end of the link this relay is (default `compress`).
    pub mode: Mode,
    /// Address (IP:port) connections are accepted on; a non-loopback one
    /// needs `allow_non_loopback` (default `127.0.0.1:7400`).
    pub listen: String,
    /// Address (IP:port) each accepted connection is carried to: the peer
    /// relay in `compress` mode, the real server in `decompress` mode
    /// (default `127.0.0.1:7401`).
    pub connect: String,
    /// Codec selection: `adaptive` (default), `majority`, `round-robin` or
    /// `one:<codec>`; reloaded on SIGHUP.
    pub policy: PolicyKind,
    /// Target CPU utilization (0, 1] for the throttle; 0 turns the throttle off.
    pub cpu_target: f64,
    /// How per-CPU utilizations combine: "mean" (the node), "max" (the
    /// busiest CPU), "affinity" (mean over the CPUs the relay may run on) or
    /// "cgroup" (the relay's cgroup usage against its CPU limit).
    pub cpu_aggregate: hwqos_compress::CpuAggregate,
    /// Codecs offered and used (empty: all built-in).
    pub codecs: Vec<String>,
    /// Largest message accepted from the link (1024 ..= 16 MiB).
    pub max_message: u64,
    /// Largest chunk read from the plain side as one message (1 ..= 1 MiB,
    /// at most `max_message`; default 256 KiB). Reads start at 16 KiB and
    /// double while they fill the buffer (a bulk transfer), see
    /// [`crate::chunk`].
    pub chunk_bytes: u64,
    /// Append a CRC-32 of every message to its header (default off; both
    /// ends honour a request).
    pub checksum: bool,
    /// Messages per round: the policy and the compression budget are
    /// re-evaluated at every round boundary (at least 1, default 100).
    pub round_messages: u32,
    /// A round-trip probe every this many messages (0: none; default 16).
    pub probe_every: u32,
    /// Starting padding in bytes of the padded probes that measure the
    /// link's per-byte cost; it then adapts to the link (at most 60000,
    /// default 2048).
    pub probe_pad: u32,
    /// Known one-way link cost in ns per byte (0: measure with probes).
    pub link_ns_per_byte: f64,
    /// How long SIGTERM waits for open connections before exiting.
    pub drain_timeout_ms: u64,
    /// Most simultaneous connections (further ones are refused).
    pub max_connections: usize,
    /// Allow `listen` and `metrics.listen` on a non-loopback address.
    pub allow_non_loopback: bool,
    /// Pre-shared key file for the peer handshake (empty: no
    /// authentication); relative to the configuration file's directory.
    pub psk_file: String,
    /// Bound on connecting onward and the whole link handshake.
    pub handshake_timeout_ms: u64,
    /// A connection on which no byte moved either way for this long is
    /// closed (0: never).
    pub idle_timeout_ms: u64,
    /// Decompressed bytes per link byte received that are never limited.
    pub free_expansion_ratio: f64,
    /// Decompressed bytes per second each peer address may deliver beyond
    /// `free_expansion_ratio` (0: unlimited).
    pub peer_expansion_bytes_per_s: u64,
    /// The monitor's live API socket the throttle reads CPU utilization
    /// from while `hwqos-monitor` runs (falling back to `/proc/stat` when it
    /// does not); empty: always `/proc/stat`.
    pub monitor_socket: String,
    /// The `[metrics]` table: the OpenMetrics endpoint.
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
            chunk_bytes: DEFAULT_CHUNK,
            checksum: false,
            round_messages: 100,
            probe_every: 16,
            probe_pad: StreamConfig::default().probe_pad,
            link_ns_per_byte: 0.0,
            drain_timeout_ms: 5000,
            max_connections: 256,
            allow_non_loopback: false,
            psk_file: String::new(),
            handshake_timeout_ms: 10_000,
            idle_timeout_ms: 600_000,
            free_expansion_ratio: 16.0,
            peer_expansion_bytes_per_s: 64 << 20,
            monitor_socket: DEFAULT_MONITOR_SOCKET.into(),
            metrics: MetricsConfig::default(),
        }
    }
}

/// A configuration problem: the file, the line, the key and what was
/// expected (the one form every hwqos agent prints).
pub use hwqos_agent::lifecycle::ConfigError;

/// Default of `monitor_socket`: the monitor's live API socket.
pub const DEFAULT_MONITOR_SOCKET: &str = "/run/hwqos/monitor.sock";

impl Config {
    /// Reads and validates a file: a regular file of at most 1 MiB (a FIFO
    /// or a device is refused without blocking or reading it); a `psk_file`
    /// is resolved against the file's directory and checked too.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let (mut c, text): (Config, String) = hwqos_agent::lifecycle::load_toml(path)?;
        c.validate(path, &text)?;
        if !c.psk_file.is_empty() {
            let key = Path::new(&c.psk_file);
            if key.is_relative() {
                let dir = path.parent().unwrap_or(Path::new("."));
                c.psk_file = dir.join(key).to_string_lossy().into_owned();
            }
            crate::auth::Psk::load(Path::new(&c.psk_file))
                .map_err(|message| ConfigError::invalid(path, &text, "psk_file", message))?;
        }
        Ok(c)
    }

    /// Parses and validates text; `path` is used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::from_toml(path, text, &e))?;
        c.validate(path, text)?;
        Ok(c)
    }

    /// Checks every value; `text` (the file's contents) locates the line of
    /// a bad key.
    pub fn validate(&self, path: &Path, text: &str) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| ConfigError::invalid(path, text, key, message);
        let addr = |key: &str, v: &str| {
            let a = v
                .parse::<SocketAddr>()
                .map_err(|e| bad(key, format!("`{v}` is not an IP:port address ({e})")))?;
            if key != "connect" && !a.ip().is_loopback() && !self.allow_non_loopback {
                return Err(bad(
                    key,
                    format!(
                        "{a} is not a loopback address; set `allow_non_loopback = true` (top level) to accept connections from other nodes{}",
                        if key == "listen" {
                            " (and give the link side a `psk_file`: without one it accepts anyone who can reach it)"
                        } else {
                            " (the endpoint has no authentication)"
                        }
                    ),
                ));
            }
            Ok(())
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
        if !(1024..=MAX_MESSAGE).contains(&self.max_message) {
            return Err(bad(
                "max_message",
                format!(
                    "{} bytes is out of range (1024 ..= {MAX_MESSAGE}, 16 MiB)",
                    self.max_message
                ),
            ));
        }
        let chunk_max = MAX_CHUNK.min(self.max_message);
        if !(1..=chunk_max).contains(&self.chunk_bytes) {
            return Err(bad(
                "chunk_bytes",
                format!(
                    "{} bytes is out of range (1 ..= {chunk_max}: at most 1 MiB and at most max_message; \
                     the default is {DEFAULT_CHUNK}, so set chunk_bytes with a smaller max_message)",
                    self.chunk_bytes
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
        if !(1..=MAX_CONNECTIONS).contains(&self.max_connections) {
            return Err(bad(
                "max_connections",
                format!(
                    "{} is out of range (1 ..= {MAX_CONNECTIONS})",
                    self.max_connections
                ),
            ));
        }
        if self.drain_timeout_ms > MAX_TIMEOUT_MS {
            return Err(bad(
                "drain_timeout_ms",
                format!(
                    "{} ms is more than {MAX_TIMEOUT_MS} ms (one day)",
                    self.drain_timeout_ms
                ),
            ));
        }
        if !(100..=MAX_HANDSHAKE_TIMEOUT_MS).contains(&self.handshake_timeout_ms) {
            return Err(bad(
                "handshake_timeout_ms",
                format!(
                    "{} ms is out of range (100 ..= {MAX_HANDSHAKE_TIMEOUT_MS})",
                    self.handshake_timeout_ms
                ),
            ));
        }
        if self.idle_timeout_ms != 0 && !(100..=MAX_TIMEOUT_MS).contains(&self.idle_timeout_ms) {
            return Err(bad(
                "idle_timeout_ms",
                format!(
                    "{} ms is out of range (0 for never, or 100 ..= {MAX_TIMEOUT_MS}, one day)",
                    self.idle_timeout_ms
                ),
            ));
        }
        if !(self.free_expansion_ratio >= 1.0 && self.free_expansion_ratio <= 1e6) {
            return Err(bad(
                "free_expansion_ratio",
                format!("{} is not in [1, 1000000]", self.free_expansion_ratio),
            ));
        }
        let b = self.peer_expansion_bytes_per_s;
        if b != 0 && !(MIN_EXPANSION_BUDGET..=MAX_EXPANSION_BUDGET).contains(&b) {
            return Err(bad(
                "peer_expansion_bytes_per_s",
                format!(
                    "{b} is out of range (0 for unlimited, or {MIN_EXPANSION_BUDGET} ..= {MAX_EXPANSION_BUDGET} bytes per second)"
                ),
            ));
        }
        if !self.monitor_socket.is_empty() && !Path::new(&self.monitor_socket).is_absolute() {
            return Err(bad(
                "monitor_socket",
                format!(
                    "expected an absolute path or \"\" (off), found `{}`",
                    self.monitor_socket
                ),
            ));
        }
        Ok(())
    }

    /// The monitor socket the throttle tries first (`None`: off).
    pub fn monitor_socket(&self) -> Option<PathBuf> {
        (!self.monitor_socket.is_empty()).then(|| PathBuf::from(&self.monitor_socket))
    }

    /// The codec registry this config allows: without `codecs`, the
    /// standard per-message codecs; with it, the named codecs among those
    /// and the stream codecs (`zstd-1-stream`, `zstd-3-stream`), which are
    /// used only where named, and only where the peer relay names them too
    /// (the handshake offers what the registry holds).
    pub fn registry(&self) -> Result<Registry, hwqos_compress::codec::RegistryError> {
        if self.codecs.is_empty() {
            Ok(Registry::standard())
        } else {
            Registry::standard_with_streams().subset(&self.codecs)
        }
    }

    /// The stream settings of one link connection.
    pub fn stream_config(&self) -> StreamConfig {
        StreamConfig {
            policy: self.policy.clone(),
            max_message: self.max_message as u32,
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
        // The library's default, the one docs/compression.md gives.
        assert_eq!(c.probe_pad, 2048);
        assert_eq!(
            c.stream_config().probe_pad,
            StreamConfig::default().probe_pad
        );
    }

    #[test]
    fn stream_codecs_only_where_named() {
        let default = Config::default().registry().unwrap();
        assert!(default.by_name("zstd-3-stream").is_none());
        assert_eq!(default.names(), Registry::standard().names());
        let text = "codecs = [\"lz4\", \"zstd-3-stream\"]\npolicy = \"one:zstd-3-stream\"";
        let c = Config::parse(text, Path::new("x")).unwrap();
        assert_eq!(
            c.registry().unwrap().names(),
            ["none", "lz4", "zstd-3-stream"]
        );
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
    fn a_non_loopback_listen_needs_the_explicit_opt_in() {
        for text in [
            "listen = \"0.0.0.0:7401\"",
            "listen = \"[::]:7401\"",
            "listen = \"192.0.2.1:7401\"",
            "[metrics]\nlisten = \"0.0.0.0:9188\"",
        ] {
            let e = Config::parse(text, Path::new("relay.toml")).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("listen"), "{text}: {msg}");
            assert!(msg.contains("allow_non_loopback = true"), "{text}: {msg}");
            let ok = format!("allow_non_loopback = true\n{text}");
            Config::parse(&ok, Path::new("relay.toml")).unwrap();
        }
        for text in ["listen = \"127.0.0.1:7401\"", "listen = \"[::1]:7401\""] {
            Config::parse(text, Path::new("relay.toml")).unwrap();
        }
    }

    #[test]
    fn sizes_and_timeouts_are_range_checked() {
        let cases = [
            ("max_message = 4294967296", "max_message"),
            ("max_message = 4294967295", "max_message"),
            ("max_message = 1000", "max_message"),
            ("chunk_bytes = 4294967296", "chunk_bytes"),
            ("chunk_bytes = 2000000", "chunk_bytes"),
            ("handshake_timeout_ms = 0", "handshake_timeout_ms"),
            ("handshake_timeout_ms = 86400000", "handshake_timeout_ms"),
            ("idle_timeout_ms = 5", "idle_timeout_ms"),
            ("idle_timeout_ms = 18446744073709551615", "idle_timeout_ms"),
            (
                "peer_expansion_bytes_per_s = 10",
                "peer_expansion_bytes_per_s",
            ),
            ("free_expansion_ratio = 0.5", "free_expansion_ratio"),
            ("free_expansion_ratio = nan", "free_expansion_ratio"),
            ("max_connections = 100000000", "max_connections"),
            (
                "drain_timeout_ms = 18446744073709551615",
                "drain_timeout_ms",
            ),
        ];
        for (text, key) in cases {
            let e = Config::parse(text, Path::new("relay.toml")).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(&format!("`{key}`")), "{text}: {msg}");
        }
        for text in [
            "max_message = 16777216\nchunk_bytes = 1048576",
            "idle_timeout_ms = 0",
            "peer_expansion_bytes_per_s = 0",
            "handshake_timeout_ms = 100",
        ] {
            Config::parse(text, Path::new("relay.toml")).unwrap();
        }
    }

    #[test]
    fn non_regular_and_oversized_files_are_refused_without_blocking() {
        let e = Config::load(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/zero") && e.contains("not a regular file"),
            "{e}"
        );
        let d = tempfile::tempdir().unwrap();
        let e = Config::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = Config::load(&fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let big = d.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; 2 << 20]).unwrap();
        let e = Config::load(&big).unwrap_err().to_string();
        assert!(e.contains("big.toml") && e.contains("larger than"), "{e}");
    }

    #[test]
    fn errors_name_file_line_key_and_what_was_expected() {
        let text = "policy = \"adaptive\"\n\ncpu_target = 1.5\n";
        let e = Config::parse(text, Path::new("/etc/hwqos/relay.toml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/hwqos/relay.toml:3: key `cpu_target`: 1.5 is not in [0, 1] (0 turns the throttle off)"
        );
        let e =
            Config::parse("monitor_socket = \"monitor.sock\"", Path::new("r.toml")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("r.toml:1: key `monitor_socket`: expected an absolute path"),
            "{e}"
        );
        let c = Config::parse("monitor_socket = \"\"", Path::new("r.toml")).unwrap();
        assert_eq!(c.monitor_socket(), None);
        assert_eq!(
            Config::default().monitor_socket().as_deref(),
            Some(Path::new(DEFAULT_MONITOR_SOCKET))
        );
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
