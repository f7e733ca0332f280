//! The life of an agent process, the same for every hwqos agent: how it
//! reports a bad configuration, which exit status it ends with, how it talks
//! to systemd (`Type=notify`, `WatchdogSec=`) and how it learns it must stop.
//!
//! Conventions every agent follows (documented for users in `docs/deploy.md`):
//!
//! - Exit status **0**: success, including a shutdown asked for by SIGTERM or
//!   SIGINT. **1**: a runtime failure. **2**: bad input — a configuration,
//!   contract, model or target file, or a command line that cannot work.
//! - A configuration error names the file, the line, the key and what was
//!   expected: `/etc/hwqos/relay.toml:7: key `throttle.cpu_target`: expected
//!   a number in [0, 1], found 2.5`.
//! - The systemd watchdog is fed by a [`Heartbeat`] that the agent's *work
//!   loop* calls on each pass; nothing pings on a timer of its own, so a
//!   stuck loop stops the pings and systemd restarts the agent.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Exit status of a successful run (SIGTERM and SIGINT included).
pub const EXIT_OK: u8 = 0;
/// Exit status of a runtime failure.
pub const EXIT_RUNTIME: u8 = 1;
/// Exit status of bad input: configuration, contract, model, targets, flags.
pub const EXIT_BAD_INPUT: u8 = 2;

/// Bad input that is not a configuration file (a contract, a model, a target
/// list, a flag combination): the run exits with [`EXIT_BAD_INPUT`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Wraps a message as [`BadInput`] in an [`anyhow::Error`].
pub fn bad_input(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(message.into()))
}

/// The exit status for an error: [`EXIT_BAD_INPUT`] when any error in its
/// chain is a [`BadInput`] or a [`ConfigError`], [`EXIT_RUNTIME`] otherwise.
pub fn exit_status(error: &anyhow::Error) -> u8 {
    let bad = error
        .chain()
        .any(|e| e.is::<BadInput>() || e.is::<ConfigError>());
    if bad {
        EXIT_BAD_INPUT
    } else {
        EXIT_RUNTIME
    }
}

/// Ends `main`: for an error, prints `AGENT: MESSAGE: CAUSE: …` (the whole
/// chain, as anyhow's `{:#}` writes it) on stderr; returns the conventional
/// exit status ([`EXIT_OK`], or [`exit_status`] of the error).
pub fn finish(agent: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => {
            eprintln!("{agent}: {e:#}");
            ExitCode::from(exit_status(&e))
        }
    }
}

/// One mistake in a configuration file: where it is and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The configuration file, as the agent was given it.
    pub file: PathBuf,
    /// 1-based line of the mistake, when it can be located.
    pub line: Option<usize>,
    /// Dotted key (`section.key`), when the mistake belongs to one.
    pub key: Option<String>,
    /// What was wrong and what was expected instead.
    pub expected: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key `{key}`")?;
        }
        write!(f, ": {}", self.expected)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// The file could not be read.
    pub fn unreadable(file: &Path, error: &std::io::Error) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            line: None,
            key: None,
            expected: format!("cannot read: {error}"),
        }
    }

    /// A value that parsed but is not acceptable; the line is looked up in
    /// `text` (the file's contents) from the dotted `key`.
    pub fn invalid(file: &Path, text: &str, key: &str, expected: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            line: line_of_key(text, key),
            key: Some(key.to_string()),
            expected: expected.into(),
        }
    }

    /// A TOML syntax or type error from `toml::from_str(text)`.
    pub fn from_toml(file: &Path, text: &str, error: &toml::de::Error) -> Self {
        let (line, key) = match error.span() {
            Some(span) => {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                (Some(line), key_at_line(text, line))
            }
            None => (None, None),
        };
        ConfigError {
            file: file.to_path_buf(),
            line,
            key,
            expected: error.message().trim().to_string(),
        }
    }
}

/// Reads (bounded, regular files only) and parses a TOML configuration file.
/// Returns the value and the text, for [`ConfigError::invalid`] in the
/// caller's validation.
pub fn load_toml<T: serde::de::DeserializeOwned>(file: &Path) -> Result<(T, String), ConfigError> {
    let text = crate::read_config_file(file, crate::MAX_CONFIG_BYTES)
        .map_err(|e| ConfigError::unreadable(file, &e))?;
    let value = toml::from_str(&text).map_err(|e| ConfigError::from_toml(file, &text, &e))?;
    Ok((value, text))
}

/// The dotted key defined on 1-based `line`: the enclosing `[table]` header
/// and the bare key left of `=`.
fn key_at_line(text: &str, line: usize) -> Option<String> {
    let mut table = String::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if let Some(header) = table_header(l) {
            table = header;
        }
        if i + 1 == line {
            let key = l.split_once('=').map(|(k, _)| k.trim().trim_matches('"'));
            return match key {
                Some(k) if !k.is_empty() && !l.starts_with('[') => Some(if table.is_empty() {
                    k.to_string()
                } else {
                    format!("{table}.{k}")
                }),
                _ if !table.is_empty() => Some(table),
                _ => None,
            };
        }
    }
    None
}

/// The 1-based line that defines dotted `key` (`table.key`; a nested table
/// `a.b.key` too), or the table's header when only the table is named.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    let mut table = String::new();
    let mut header_line = None;
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if let Some(header) = table_header(l) {
            table = header;
            if table == key {
                header_line = Some(i + 1);
            }
            continue;
        }
        if let Some((k, _)) = l.split_once('=') {
            let k = k.trim().trim_matches('"');
            let full = if table.is_empty() {
                k.to_string()
            } else {
                format!("{table}.{k}")
            };
            if full == key {
                return Some(i + 1);
            }
        }
    }
    header_line
}

fn table_header(line: &str) -> Option<String> {
    let inner = line.strip_prefix("[[").and_then(|l| l.split("]]").next());
    let inner = inner.or_else(|| line.strip_prefix('[').and_then(|l| l.split(']').next()))?;
    Some(inner.trim().to_string())
}

/// The agent's side of systemd's notify protocol (sd_notify(3)): READY,
/// RELOADING, STOPPING, STATUS and WATCHDOG. Without `$NOTIFY_SOCKET` (run
/// by hand, under a test) every call does nothing.
#[derive(Debug)]
pub struct ServiceManager {
    watchdog: Option<Duration>,
    warned: AtomicBool,
}

impl ServiceManager {
    /// Reads `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID`.
    pub fn from_env() -> Arc<Self> {
        Arc::new(ServiceManager {
            watchdog: sd_notify::watchdog_enabled().filter(|d| !d.is_zero()),
            warned: AtomicBool::new(false),
        })
    }

    fn send(&self, states: &[sd_notify::NotifyState<'_>]) {
        if let Err(e) = sd_notify::notify(states) {
            // Once: a broken notify socket must not flood the log every ping.
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!("cannot notify the service manager: {e}");
            }
        }
    }

    /// Start-up (or a reload) is complete; `status` is shown by `systemctl status`.
    pub fn ready(&self, status: &str) {
        self.send(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(status),
        ]);
    }

    /// A configuration reload begins; call [`ServiceManager::ready`] when done.
    pub fn reloading(&self) {
        use sd_notify::NotifyState;
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[NotifyState::Reloading, now]),
            Err(e) => {
                tracing::warn!("cannot read CLOCK_MONOTONIC for RELOADING=1: {e}");
                self.send(&[NotifyState::Reloading]);
            }
        }
    }

    /// Shutdown begins.
    pub fn stopping(&self) {
        self.send(&[sd_notify::NotifyState::Stopping]);
    }

    /// A one-line status for `systemctl status`.
    pub fn status(&self, line: &str) {
        self.send(&[sd_notify::NotifyState::Status(line)]);
    }

    /// The watchdog period systemd asked for (`WatchdogSec=`), if any.
    pub fn watchdog_period(&self) -> Option<Duration> {
        self.watchdog
    }

    /// A heartbeat for the agent's work loop.
    pub fn heartbeat(self: &Arc<Self>) -> Heartbeat {
        Heartbeat {
            manager: Arc::clone(self),
            last: None,
        }
    }
}

/// Feeds systemd's watchdog from the work loop: call [`Heartbeat::beat`] once
/// per pass of the loop that does the agent's real work (never from a timer
/// of its own). It pings at most every half watchdog period.
#[derive(Debug)]
pub struct Heartbeat {
    manager: Arc<ServiceManager>,
    last: Option<Instant>,
}

impl Heartbeat {
    /// The work loop made progress.
    pub fn beat(&mut self) {
        let Some(period) = self.manager.watchdog else {
            return;
        };
        if self.last.is_none_or(|t| t.elapsed() >= period / 2) {
            self.manager.send(&[sd_notify::NotifyState::Watchdog]);
            self.last = Some(Instant::now());
        }
    }

    /// How long the work loop may block between beats without missing the
    /// watchdog (a quarter of the period; `None` without a watchdog).
    pub fn max_block(&self) -> Option<Duration> {
        self.manager.watchdog.map(|p| p / 4)
    }
}

/// SIGTERM/SIGINT (stop) and SIGHUP (reload) as flags, for agents whose work
/// loop is synchronous (hwqos-sra, hwqos-loadgen; the tokio agents take the
/// same signals as streams in their select loop).
///
/// There is no signal handler: [`StopSignals::install`] blocks the three
/// signals in the calling thread — call it first in `main`, before any thread
/// exists, so every thread inherits the mask — and one thread takes them with
/// `sigwait(2)` and sets the flags. So no system call of the work (a
/// generator's, a measurement's) is interrupted with EINTR, nothing polls,
/// and a signal that arrives during start-up stays pending until the flags
/// exist. A blocked mask survives `exec` (Rust's `Command` keeps it): start
/// children through `hwqos_core::process::clear_signal_mask_on_exec`. A
/// SIGHUP no longer kills the process.
#[derive(Debug, Clone)]
pub struct StopSignals {
    stop: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
}

impl StopSignals {
    /// Blocks SIGTERM, SIGINT and SIGHUP in this thread and starts the one
    /// thread that waits for them. Installed once per process: later calls
    /// return the same flags.
    pub fn install() -> std::io::Result<Self> {
        static INSTALLED: std::sync::OnceLock<StopSignals> = std::sync::OnceLock::new();
        if let Some(s) = INSTALLED.get() {
            return Ok(s.clone());
        }
        let set = stop_and_reload_signals();
        set.thread_block().map_err(std::io::Error::from)?;
        let signals = INSTALLED
            .get_or_init(|| StopSignals {
                stop: Arc::new(AtomicBool::new(false)),
                reload: Arc::new(AtomicBool::new(false)),
            })
            .clone();
        let flags = signals.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || loop {
                match set.wait() {
                    Ok(nix::sys::signal::Signal::SIGHUP) => {
                        flags.reload.store(true, Ordering::SeqCst)
                    }
                    Ok(_) => flags.stop.store(true, Ordering::SeqCst),
                    Err(e) => {
                        tracing::error!("sigwait: {e}; stopping");
                        flags.stop.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            })?;
        Ok(signals)
    }

    /// A stop was asked for.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The flag itself, for loops that take an `AtomicBool`.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// A reload was asked for since the last call (clears the request).
    pub fn take_reload(&self) -> bool {
        self.reload.swap(false, Ordering::SeqCst)
    }
}

fn stop_and_reload_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.add(Signal::SIGHUP);
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Example {
        name: String,
        throttle: Throttle,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Throttle {
        cpu_target: f64,
    }

    #[test]
    fn a_type_error_names_file_line_and_key() {
        let text = "name = \"a\"\n\n[throttle]\ncpu_target = \"high\"\n";
        let e = toml::from_str::<Example>(text).unwrap_err();
        let c = ConfigError::from_toml(Path::new("/etc/x.toml"), text, &e);
        assert_eq!(c.line, Some(4));
        assert_eq!(c.key.as_deref(), Some("throttle.cpu_target"));
        let shown = c.to_string();
        assert!(
            shown.starts_with("/etc/x.toml:4: key `throttle.cpu_target`: "),
            "{shown}"
        );
        assert!(shown.contains("expected"), "{shown}");
    }

    #[test]
    fn an_unknown_key_is_located() {
        let text = "name = \"a\"\n[throttle]\ncpu_target = 0.5\ncpu_targte = 1\n";
        let e = toml::from_str::<Example>(text).unwrap_err();
        let c = ConfigError::from_toml(Path::new("x.toml"), text, &e);
        assert_eq!(c.line, Some(4), "{c}");
        assert!(c.to_string().contains("cpu_targte"), "{c}");
    }

    #[test]
    fn an_invalid_value_finds_its_line() {
        let text = "name = \"a\"\n[throttle]\n# comment\ncpu_target = 2.5\n";
        let c = ConfigError::invalid(
            Path::new("r.toml"),
            text,
            "throttle.cpu_target",
            "expected a number in [0, 1], found 2.5",
        );
        assert_eq!(
            c.to_string(),
            "r.toml:4: key `throttle.cpu_target`: expected a number in [0, 1], found 2.5"
        );
        assert_eq!(
            line_of_key(text, "throttle"),
            Some(2),
            "a table is found by its header"
        );
        assert_eq!(line_of_key(text, "missing"), None);
    }

    #[test]
    fn exit_status_follows_the_convention() {
        let bad = bad_input("contract: no entries");
        assert_eq!(exit_status(&bad), EXIT_BAD_INPUT);
        let wrapped = anyhow::Error::new(ConfigError::invalid(Path::new("a"), "", "k", "x"))
            .context("loading the configuration");
        assert_eq!(exit_status(&wrapped), EXIT_BAD_INPUT);
        assert_eq!(exit_status(&anyhow::anyhow!("disk full")), EXIT_RUNTIME);
    }

    #[test]
    fn without_a_watchdog_the_heartbeat_is_silent() {
        let m = Arc::new(ServiceManager {
            watchdog: None,
            warned: AtomicBool::new(false),
        });
        let mut h = m.heartbeat();
        h.beat();
        assert!(h.last.is_none());
        assert_eq!(h.max_block(), None);
    }

    #[test]
    fn the_heartbeat_pings_at_most_every_half_period() {
        let m = Arc::new(ServiceManager {
            watchdog: Some(Duration::from_secs(3600)),
            warned: AtomicBool::new(false),
        });
        let mut h = m.heartbeat();
        h.beat();
        let first = h.last.expect("the first beat pings");
        h.beat();
        assert_eq!(h.last, Some(first), "a second beat right after is skipped");
    }
}
