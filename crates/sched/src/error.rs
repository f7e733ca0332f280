//! The one error type of hwqos-sched: every variant names what was wrong.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SchedError {
    /// A contract, model or config that cannot mean anything.
    #[error("invalid {what}: {reason}")]
    Invalid { what: String, reason: String },
    /// A process the caller named no longer exists (skipped, never fatal for a
    /// whole contract).
    #[error("process {pid} vanished")]
    Vanished { pid: u32 },
    /// An event name the catalog cannot resolve or the machine cannot count.
    #[error("event `{name}`: {reason}")]
    Event { name: String, reason: String },
    /// A syscall or file operation failed.
    #[error("{op}: {source}")]
    Io {
        op: String,
        #[source]
        source: std::io::Error,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The backend cannot do what was asked on this machine.
    #[error("{backend} backend: {reason}")]
    Unsupported { backend: String, reason: String },
}

impl SchedError {
    pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> SchedError {
        SchedError::Invalid {
            what: what.into(),
            reason: reason.into(),
        }
    }

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
