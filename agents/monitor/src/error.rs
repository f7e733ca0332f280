//! [`MonitorError`]: why the monitor stopped or could not start, and how that
//! maps onto the agents' exit statuses (`hwqos_agent::lifecycle`).

use crate::config::ConfigError;
use crate::db::FlushError;
use hwqos_pmu::PmuError;

/// Why the monitor stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// A fatal configuration error (exit status 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The configuration is well-formed but the sampler rejects it (exit status 2).
    #[error("configuration rejected by the sampler: {0}")]
    Rejected(PmuError),
    /// The counters or `/proc` could not be opened (exit status 1).
    #[error("cannot start sampling: {0}")]
    Source(PmuError),
    /// A socket, thread or runtime could not be set up (exit status 1).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The sampling clock could not be created (exit status 1).
    #[error("sampling clock: {0}")]
    Ticker(String),
    /// The final flush failed (exit status 1).
    #[error(transparent)]
    Flush(#[from] FlushError),
}

impl MonitorError {
    /// The process exit status: 2 for configuration errors, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            MonitorError::Config(_) | MonitorError::Rejected(_) => {
                i32::from(hwqos_agent::lifecycle::EXIT_BAD_INPUT)
            }
            _ => i32::from(hwqos_agent::lifecycle::EXIT_RUNTIME),
        }
    }

    /// As an [`anyhow::Error`] that `hwqos_agent::lifecycle::exit_status`
    /// maps to the same exit status as [`MonitorError::exit_code`].
    pub fn into_agent_error(self) -> anyhow::Error {
        match self {
            MonitorError::Config(e) => anyhow::Error::new(e),
            e @ MonitorError::Rejected(_) => hwqos_agent::lifecycle::bad_input(e.to_string()),
            other => anyhow::Error::new(other),
        }
    }

    pub(crate) fn from_source(e: PmuError) -> MonitorError {
        match e {
            PmuError::UnknownEvent { .. } | PmuError::SetTooLarge { .. } | PmuError::Config(_) => {
                MonitorError::Rejected(e)
            }
            other => MonitorError::Source(other),
        }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> MonitorError {
        let context = context.into();
        move |source| MonitorError::Io { context, source }
    }
}
