//! Errors of load synthesis, each naming what was wrong.

/// Why a load target, model, measurement or generator failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A target or model file that cannot be used (schema, values, names).
    #[error("{path}: {reason}")]
    BadFile {
        /// The file, as the caller named it.
        path: String,
        /// What is wrong with it, for a human.
        reason: String,
    },
    /// A model made on different hardware.
    #[error("{0}")]
    WrongNode(String),
    /// A metric this node cannot measure or generate.
    #[error("{0}")]
    Unsupported(String),
    /// A safety cap would be exceeded.
    #[error("safety cap: {0}")]
    Cap(String),
    /// Generator settings that cannot work (caps, nice, period).
    #[error("{0}")]
    Config(String),
    /// An argument that cannot work: a `METRIC@CPU=VALUE` pair, a PID list,
    /// a CPU that is not online, a filter that leaves nothing.
    #[error("{0}")]
    Invalid(String),
    /// This node's hardware model or topology could not be read.
    #[error("{0}")]
    Node(String),
    /// Reading or writing a file failed (what was done, and why).
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// Measuring failed (counters, `/proc/stat`, the monitor's API), or a
    /// stop was asked for while a loop needed measurements.
    #[error("measurement: {0}")]
    Measure(String),
    /// The closed loop did not converge in time.
    #[error("{0}")]
    NotConverged(String),
    /// A command the gate ran failed (exit status, signal, output without
    /// the metric), or the gate was stopped.
    #[error("{0}")]
    Command(String),
}

impl LoadError {
    /// Whether the error is bad input (a file, a setting or an argument that
    /// cannot work: retrying will not help) rather than a runtime failure.
    /// Agents exit with status 2 for bad input and 1 otherwise.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            LoadError::BadFile { .. }
                | LoadError::WrongNode(_)
                | LoadError::Unsupported(_)
                | LoadError::Cap(_)
                | LoadError::Config(_)
                | LoadError::Invalid(_)
        )
    }
}
