//! Errors of the PMU layer.

use std::io;

/// What went wrong opening, reading or naming counters.
#[derive(Debug, thiserror::Error)]
pub enum PmuError {
    /// The name does not denote any event hwqos knows how to encode.
    #[error("unknown event `{name}`: {reason}")]
    UnknownEvent {
        /// The event name as given.
        name: String,
        /// Why it could not be resolved (parse error, no such perf name, …).
        reason: String,
    },
    /// The event is well-formed but this node cannot count it (no PMU, no such
    /// event on this CPU model, unsupported by the kernel).
    #[error("event `{name}` is not available on this node: {reason}")]
    Unavailable {
        /// The event name as given.
        name: String,
        /// The kernel's error with a hint at the likely cause.
        reason: String,
    },
    /// The kernel refused for lack of privilege (perf_event_paranoid, capabilities).
    #[error("permission denied opening `{name}`: {reason}")]
    Permission {
        /// The event name as given.
        name: String,
        /// The kernel's error with what to check or grant.
        reason: String,
    },
    /// The task to count no longer exists.
    #[error("task {tid} does not exist (it may have exited)")]
    NoSuchTask {
        /// The thread id counted (0 when the event was not bound to a task).
        tid: u32,
    },
    /// An event set holds more events than the PMU can count at once.
    #[error("event set {set:?} has {len} events but this node counts at most {capacity} at once")]
    SetTooLarge {
        /// The names of the events in the set.
        set: Vec<String>,
        /// How many events the set holds.
        len: usize,
        /// How many counters the PMU (or simulator) offers at once.
        capacity: usize,
    },
    /// A group handle that the backend does not know.
    #[error("unknown counter group {0}")]
    NoSuchGroup(u64),
    /// Invalid configuration given to the PMU layer.
    #[error("{0}")]
    Config(String),
    /// An I/O error (perf_event syscalls, sysfs, /proc) with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, e.g. `perf_event_open for `hw.cycles``.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl PmuError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> PmuError {
        PmuError::Io {
            context: context.into(),
            source,
        }
    }

    /// Classifies an errno from `perf_event_open` for event `name` on task `tid`.
    pub fn from_open_errno(name: &str, tid: Option<u32>, err: io::Error) -> PmuError {
        let reason = err.to_string();
        match err.raw_os_error() {
            Some(libc::ENOENT)
            | Some(libc::EOPNOTSUPP)
            | Some(libc::ENODEV)
            | Some(libc::EINVAL) => PmuError::Unavailable {
                name: name.to_string(),
                reason: match err.raw_os_error() {
                    Some(libc::ENOENT) => {
                        format!("{reason} (the kernel has no such event here; no hardware PMU?)")
                    }
                    Some(libc::EOPNOTSUPP) => {
                        format!("{reason} (not supported by this PMU or not in a VM)")
                    }
                    _ => reason,
                },
            },
            Some(libc::EACCES) | Some(libc::EPERM) => PmuError::Permission {
                name: name.to_string(),
                reason: format!(
                    "{reason} (check /proc/sys/kernel/perf_event_paranoid or grant CAP_PERFMON)"
                ),
            },
            Some(libc::ESRCH) => PmuError::NoSuchTask {
                tid: tid.unwrap_or(0),
            },
            _ => PmuError::Io {
                context: format!("perf_event_open for `{name}`"),
                source: err,
            },
        }
    }
}
