//! How `hwqos` turns failures into exit codes.
//!
//! Usage and configuration errors (an unknown event, a bad option combination, a
//! malformed recording given on the command line) exit with 2, like clap's own
//! usage errors; everything else that fails exits with 1. `hwqos stat -- CMD`
//! exits with the command's own status, which is a success path, not an error.

use hwqos_pmu::PmuError;
use std::fmt;

/// Exit code for usage and configuration errors.
pub const EXIT_USAGE: u8 = 2;
/// Exit code for runtime failures.
pub const EXIT_FAILURE: u8 = 1;

/// A usage or configuration error: the message says what was wrong.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Builds an [`anyhow::Error`] that exits with [`EXIT_USAGE`].
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}

/// The exit code for an error: [`EXIT_USAGE`] when anything in its chain is a
/// usage error or a PMU configuration error (unknown event, bad config),
/// [`EXIT_FAILURE`] otherwise.
pub fn exit_code_of(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.downcast_ref::<UsageError>().is_some() {
            return EXIT_USAGE;
        }
        if let Some(
            PmuError::UnknownEvent { .. } | PmuError::Config(_) | PmuError::SetTooLarge { .. },
        ) = cause.downcast_ref::<PmuError>()
        {
            return EXIT_USAGE;
        }
    }
    EXIT_FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn usage_errors_exit_2_even_when_wrapped() {
        let e: anyhow::Error = Err::<(), _>(usage("bad -I"))
            .context("parsing options")
            .unwrap_err();
        assert_eq!(exit_code_of(&e), EXIT_USAGE);
        let unknown = anyhow::Error::new(PmuError::UnknownEvent {
            name: "bogus".into(),
            reason: "no such event".into(),
        });
        assert_eq!(exit_code_of(&unknown), EXIT_USAGE);
        assert_eq!(exit_code_of(&anyhow::anyhow!("disk full")), EXIT_FAILURE);
    }
}
