//! Progress bars for the long steps of `hwqos` (indicatif, on standard error).
//! Drawn only when standard error is a terminal: in a pipe, a log or CI they
//! are hidden and the commands print their plain lines instead.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

/// A bar over `len` named steps (`set_message` names the current one).
pub fn steps(len: u64, prefix: &'static str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{prefix}: [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A bar over a known duration, advanced in milliseconds.
pub fn timed(total: Duration, prefix: &'static str) -> ProgressBar {
    let bar =
        ProgressBar::with_draw_target(Some(total.as_millis() as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{prefix}: [{bar:30}] {elapsed}/{duration} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix);
    bar
}
