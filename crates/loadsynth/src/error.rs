//! Errors of load synthesis, each naming what was wrong.

/// Why a load target, model, measurement or generator failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A target or model file that cannot be used (schema, values, names).
    #[error("{path}: {reason}")]
    BadFile { path: String, reason: String },
    /// A model made on different hardware.
    #[error("{0}")]
    WrongNode(String),
    /// A metric this node cannot measure or generate.
    #[error("{0}")]
    Unsupported(String),
    /// A safety cap would be exceeded.
    #[error("safety cap: {0}")]
    Cap(String),
    #[error("{0}")]
    Config(String),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error("measurement: {0}")]
    Measure(String),
    /// The closed loop did not converge in time.
    #[error("{0}")]
    NotConverged(String),
}
