//! Butterworth low-pass filtering: a digital design by the bilinear transform
//! as a cascade of second-order sections, a causal single-pass filter for
//! online use ([`Butterworth`]) and zero-phase forward-backward filtering of a
//! whole signal ([`butterworth_lowpass_filtfilt`]).
//!
//! Cutoffs are normalized to the Nyquist frequency (half the sampling rate),
//! as in `scipy.signal.butter`: `cutoff` 0.2 at 10 Hz sampling is 1 Hz.

/// The highest order accepted: beyond it the poles crowd so closely that
/// nothing is gained.
pub const MAX_ORDER: usize = 24;

/// One second-order section `H(z) = (b0 + b1 z⁻¹ + b2 z⁻²) / (1 + a1 z⁻¹ + a2 z⁻²)`.
/// A first-order section has `b2 = a2 = 0`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Section {
    /// Numerator `[b0, b1, b2]`.
    pub b: [f64; 3],
    /// `[a1, a2]` (a0 is 1).
    pub a: [f64; 2],
}

impl Section {
    fn is_first_order(&self) -> bool {
        self.b[2] == 0.0 && self.a[1] == 0.0
    }

    /// The filter state (transposed direct form II) of this section after a
    /// constant input `x` forever: its step response's steady state.
    fn steady_state(&self, x: f64) -> [f64; 2] {
        let gain = (self.b[0] + self.b[1] + self.b[2]) / (1.0 + self.a[0] + self.a[1]);
        let y = gain * x;
        [y - self.b[0] * x, self.b[2] * x - self.a[1] * y]
    }

    /// One step of transposed direct form II.
    fn step(&self, state: &mut [f64; 2], x: f64) -> f64 {
        let y = self.b[0] * x + state[0];
        state[0] = self.b[1] * x - self.a[0] * y + state[1];
        state[1] = self.b[2] * x - self.a[1] * y;
        y
    }
}

/// Designs an `order`-th order digital Butterworth low-pass with normalized
/// cutoff `cutoff` (fraction of Nyquist, in (0, 1)) as second-order sections
/// (one first-order section last for odd orders). Each section has unity gain
/// at DC. `None` for an order outside 1..=[`MAX_ORDER`] or a cutoff outside (0, 1).
pub fn butterworth_lowpass_sections(order: usize, cutoff: f64) -> Option<Vec<Section>> {
    if !(1..=MAX_ORDER).contains(&order) || cutoff.is_nan() || cutoff <= 0.0 || cutoff >= 1.0 {
        return None;
    }
    // Pre-warped analog cutoff for the bilinear transform s = 2·fs·(z−1)/(z+1)
    // with fs = 2 (frequencies normalized to Nyquist).
    let fs2 = 4.0;
    let warped = fs2 * (std::f64::consts::FRAC_PI_2 * cutoff).tan();
    let n = order as f64;
    let mut sections = Vec::with_capacity(order.div_ceil(2));
    // Analog poles warped·exp(iθ) with θ = π/2 + π(2k+1)/(2N), k = 0..N/2 for
    // the upper half plane; each conjugate pair makes one section.
    for k in 0..order / 2 {
        let theta =
            std::f64::consts::FRAC_PI_2 + std::f64::consts::PI * (2 * k + 1) as f64 / (2.0 * n);
        let (re, im) = (warped * theta.cos(), warped * theta.sin());
        // z = (fs2 + s) / (fs2 − s)
        let (num_re, num_im) = (fs2 + re, im);
        let (den_re, den_im) = (fs2 - re, -im);
        let den_abs2 = den_re * den_re + den_im * den_im;
        let z_re = (num_re * den_re + num_im * den_im) / den_abs2;
        let z_abs2 = (num_re * num_re + num_im * num_im) / den_abs2;
        let a = [-2.0 * z_re, z_abs2];
        // Zeros at z = −1 (numerator (1 + z⁻¹)²), scaled to unity DC gain.
        let gain = (1.0 + a[0] + a[1]) / 4.0;
        sections.push(Section {
            b: [gain, 2.0 * gain, gain],
            a,
        });
    }
    if order % 2 == 1 {
        let z = (fs2 - warped) / (fs2 + warped);
        let gain = (1.0 - z) / 2.0;
        sections.push(Section {
            b: [gain, gain, 0.0],
            a: [-z, 0.0],
        });
    }
    Some(sections)
}

/// The transfer function `(b, a)` of a cascade of sections (polynomials in
/// z⁻¹, `a[0] = 1`), as `scipy.signal.butter(order, cutoff)` returns it.
pub fn sections_to_transfer_function(sections: &[Section]) -> (Vec<f64>, Vec<f64>) {
    let mut b = vec![1.0];
    let mut a = vec![1.0];
    for s in sections {
        let (sb, sa): (&[f64], Vec<f64>) = if s.is_first_order() {
            (&s.b[..2], vec![1.0, s.a[0]])
        } else {
            (&s.b[..], vec![1.0, s.a[0], s.a[1]])
        };
        b = convolve(&b, sb);
        a = convolve(&a, &sa);
    }
    (b, a)
}

fn convolve(x: &[f64], y: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; x.len() + y.len() - 1];
    for (i, xi) in x.iter().enumerate() {
        for (j, yj) in y.iter().enumerate() {
            out[i + j] += xi * yj;
        }
    }
    out
}

/// A causal Butterworth low-pass for online use, one sample at a time (e.g.
/// smoothing a controller's input). It delays the signal; use
/// [`butterworth_lowpass_filtfilt`] for recorded data.
#[derive(Clone, Debug, PartialEq)]
pub struct Butterworth {
    sections: Vec<Section>,
    state: Vec<[f64; 2]>,
    order: usize,
    cutoff: f64,
}

impl Butterworth {
    /// `None` for an order outside 1..=[`MAX_ORDER`] or a cutoff outside (0, 1).
    pub fn new(order: usize, cutoff: f64) -> Option<Butterworth> {
        let sections = butterworth_lowpass_sections(order, cutoff)?;
        let state = vec![[0.0; 2]; sections.len()];
        Some(Butterworth {
            sections,
            state,
            order,
            cutoff,
        })
    }

    /// The filter order given to [`Butterworth::new`].
    pub fn order(&self) -> usize {
        self.order
    }

    /// The normalized cutoff given to [`Butterworth::new`] (fraction of Nyquist).
    pub fn cutoff(&self) -> f64 {
        self.cutoff
    }

    /// The second-order sections the filter runs, in cascade order.
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }

    /// Filters one sample.
    pub fn process(&mut self, x: f64) -> f64 {
        self.sections
            .iter()
            .zip(self.state.iter_mut())
            .fold(x, |x, (section, state)| section.step(state, x))
    }

    /// Forgets the past: as if the input had always been zero.
    pub fn reset(&mut self) {
        self.state.iter_mut().for_each(|s| *s = [0.0; 2]);
    }

    /// As if the input had always been `x`: the output starts at `x` with no
    /// start-up transient.
    pub fn reset_to(&mut self, x: f64) {
        let mut level = x;
        for (section, state) in self.sections.iter().zip(self.state.iter_mut()) {
            *state = section.steady_state(level);
            let gain =
                (section.b[0] + section.b[1] + section.b[2]) / (1.0 + section.a[0] + section.a[1]);
            level *= gain;
        }
    }
}

/// How many samples `butterworth_lowpass_filtfilt` extends the signal by at
/// each end (scipy's `sosfiltfilt` default: 3 · (2·sections + 1 − trailing
/// zero coefficients)).
pub fn filtfilt_padding(order: usize) -> usize {
    let sections = order.div_ceil(2);
    3 * (2 * sections + 1 - order % 2)
}

/// Zero-phase (forward-backward) Butterworth low-pass filter of `order` with
/// normalized cutoff `cutoff` (fraction of Nyquist, in (0, 1)). `None` for invalid
/// parameters or input shorter than the filter needs.
///
/// The signal is extended at both ends by odd reflection (`2·x₀ − x_k`) of
/// [`filtfilt_padding`] samples and each pass starts from the filter's steady
/// state for its first sample, as scipy's `sosfiltfilt` does, so a constant
/// stays constant and the ends do not ring. The result is filtered twice, so its
/// magnitude response is |H|² (−6 dB at the cutoff) with no phase shift.
/// Inputs of at most `filtfilt_padding(order)` samples, or containing NaN or
/// infinities, give `None`.
pub fn butterworth_lowpass_filtfilt(xs: &[f64], order: usize, cutoff: f64) -> Option<Vec<f64>> {
    let mut filter = Butterworth::new(order, cutoff)?;
    let pad = filtfilt_padding(order);
    if xs.len() <= pad || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let (first, last) = (xs[0], xs[xs.len() - 1]);
    let mut extended = Vec::with_capacity(xs.len() + 2 * pad);
    extended.extend((1..=pad).rev().map(|k| 2.0 * first - xs[k]));
    extended.extend_from_slice(xs);
    extended.extend((1..=pad).map(|k| 2.0 * last - xs[xs.len() - 1 - k]));

    filter.reset_to(extended[0]);
    for x in extended.iter_mut() {
        *x = filter.process(*x);
    }
    extended.reverse();
    filter.reset_to(extended[0]);
    for x in extended.iter_mut() {
        *x = filter.process(*x);
    }
    extended.reverse();
    Some(extended[pad..pad + xs.len()].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_matches_scipy_default() {
        // scipy.signal.sosfiltfilt: 3 · (2·sections + 1 − zero b2/a2 columns).
        assert_eq!(filtfilt_padding(1), 6);
        assert_eq!(filtfilt_padding(2), 9);
        assert_eq!(filtfilt_padding(3), 12);
        assert_eq!(filtfilt_padding(4), 15);
    }
}
