//! The one error type of hwqos-sched: every variant names what was wrong.

use std::path::PathBuf;

/// Everything that can go wrong in hwqos-sched. The `Display` text is the
/// whole message (`invalid model: …`, `process 42 vanished`, …); callers add
/// no prefix.
#[derive(Debug, thiserror::Error)]
pub enum SchedError {
    /// A contract, model or config that cannot mean anything.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The kind of thing that was wrong (`contract`, `model`, …).
        what: String,
        /// Why it cannot mean anything, for a human.
        reason: String,
    },
    /// A process the caller named no longer exists (skipped, never fatal for a
    /// whole contract).
    #[error("process {pid} vanished")]
    Vanished {
        /// The process id that no longer exists.
        pid: u32,
    },
    /// An event name the catalog cannot resolve or the machine cannot count.
    #[error("event `{name}`: {reason}")]
    Event {
        /// The event name as the caller wrote it.
        name: String,
        /// Why it cannot be resolved or counted.
        reason: String,
    },
    /// A syscall or file operation failed.
    #[error("{op}: {source}")]
    Io {
        /// The operation that failed, e.g. `perf_event_open pid 42`.
        op: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    File {
        /// The file that could not be read or written.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The backend cannot do what was asked on this machine.
    #[error("{backend} backend: {reason}")]
    Unsupported {
        /// The backend's name (`userspace`, `sched_sra`).
        backend: String,
        /// What this machine lacks.
        reason: String,
    },
}

impl SchedError {
    /// A [`SchedError::Invalid`]: `what` is the kind of thing, `reason` why
    /// it is wrong.
    pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> SchedError {
        SchedError::Invalid {
            what: what.into(),
            reason: reason.into(),
        }
    }

    /// A [`SchedError::Io`] for the failed operation `op`.
    pub fn io(op: impl Into<String>, source: std::io::Error) -> SchedError {
        SchedError::Io {
            op: op.into(),
            source,
        }
    }

    /// The last OS error as an [`SchedError::Io`].
    pub fn last_os(op: impl Into<String>) -> SchedError {
        SchedError::io(op, std::io::Error::last_os_error())
    }

    /// True when the error means the task is gone (ESRCH / vanished), which
    /// callers skip with a log line.
    pub fn is_vanished(&self) -> bool {
        match self {
            SchedError::Vanished { .. } => true,
            SchedError::Io { source, .. } | SchedError::File { source, .. } => {
                source.raw_os_error() == Some(libc::ESRCH)
                    || source.kind() == std::io::ErrorKind::NotFound
            }
            _ => false,
        }
    }
}
