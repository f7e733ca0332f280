//! Butterworth low-pass filtering (placeholder signature; implemented by the core helper).

/// Zero-phase (forward-backward) Butterworth low-pass filter of `order` with
/// normalized cutoff `cutoff` (fraction of Nyquist, in (0, 1)). `None` for invalid
/// parameters or input shorter than the filter needs.
pub fn butterworth_lowpass_filtfilt(xs: &[f64], order: usize, cutoff: f64) -> Option<Vec<f64>> {
    let _ = (xs, order, cutoff);
    None
}
