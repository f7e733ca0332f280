//! Known-answer tests of the Butterworth design and of zero-phase filtering.

use hwqos_core::filter::{
    butterworth_lowpass_filtfilt, butterworth_lowpass_sections, filtfilt_padding,
    sections_to_transfer_function, Butterworth, MAX_ORDER,
};
use std::f64::consts::PI;

fn assert_close(actual: &[f64], expected: &[f64], tol: f64) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= tol,
            "index {i}: {a} vs {e} (tolerance {tol})"
        );
    }
}

fn transfer_function(order: usize, cutoff: f64) -> (Vec<f64>, Vec<f64>) {
    sections_to_transfer_function(&butterworth_lowpass_sections(order, cutoff).unwrap())
}

/// |H(e^{iω})| of a transfer function in z⁻¹.
fn magnitude(b: &[f64], a: &[f64], omega: f64) -> f64 {
    let eval = |p: &[f64]| {
        let (mut re, mut im) = (0.0, 0.0);
        for (k, c) in p.iter().enumerate() {
            re += c * (omega * k as f64).cos();
            im -= c * (omega * k as f64).sin();
        }
        (re * re + im * im).sqrt()
    };
    eval(b) / eval(a)
}

#[test]
fn coefficients_match_scipy() {
    // scipy.signal.butter(2, 0.2)
    let (b, a) = transfer_function(2, 0.2);
    assert_close(&b, &[0.0674553, 0.1349105, 0.0674553], 1e-7);
    assert_close(&a, &[1.0, -1.1429805, 0.4128016], 1e-7);
    // scipy.signal.butter(2, 0.5): b = (1 ± √2/2 …) closed form 1/(2+√2)·[1, 2, 1]
    let (b, a) = transfer_function(2, 0.5);
    let g = 1.0 / (2.0 + 2f64.sqrt());
    assert_close(&b, &[g, 2.0 * g, g], 1e-12);
    assert_close(
        &a,
        &[1.0, 0.0, (2.0 - 2f64.sqrt()) / (2.0 + 2f64.sqrt())],
        1e-12,
    );
    // First order, K = tan(π·wc/2): b = K/(1+K)·[1, 1], a = [1, (K−1)/(K+1)].
    let k = (PI * 0.3 / 2.0).tan();
    let (b, a) = transfer_function(1, 0.3);
    assert_close(&b, &[k / (1.0 + k), k / (1.0 + k)], 1e-12);
    assert_close(&a, &[1.0, (k - 1.0) / (k + 1.0)], 1e-12);
}

#[test]
fn magnitude_response_is_butterworth() {
    // The bilinear-transformed Butterworth has exactly
    // |H|² = 1 / (1 + (tan(ω/2) / tan(ωc/2))^(2N)).
    for (order, cutoff) in [(1, 0.3), (2, 0.2), (3, 0.05), (4, 0.1), (5, 0.7), (8, 0.25)] {
        let (b, a) = transfer_function(order, cutoff);
        for f in [0.0, 0.01, 0.1, 0.2, 0.5, 0.9, 0.99] {
            let omega = PI * f;
            let ratio = (omega / 2.0).tan() / (PI * cutoff / 2.0).tan();
            let expected = 1.0 / (1.0 + ratio.powi(2 * order as i32)).sqrt();
            let actual = magnitude(&b, &a, omega);
            assert!(
                (actual - expected).abs() <= 1e-9 * expected.max(1e-3),
                "order {order} cutoff {cutoff} f {f}: {actual} vs {expected}"
            );
        }
        // −3 dB at the cutoff.
        let at_cutoff = magnitude(&b, &a, PI * cutoff);
        assert!((at_cutoff - 0.5f64.sqrt()).abs() < 1e-9);
    }
}

#[test]
fn odd_orders_have_one_first_order_section() {
    let sections = butterworth_lowpass_sections(5, 0.3).unwrap();
    assert_eq!(sections.len(), 3);
    assert_eq!(sections[2].b[2], 0.0);
    assert_eq!(sections[2].a[1], 0.0);
    assert!(sections[..2].iter().all(|s| s.a[1] != 0.0));
    // Every section has unity DC gain.
    for s in &sections {
        let dc = (s.b[0] + s.b[1] + s.b[2]) / (1.0 + s.a[0] + s.a[1]);
        assert!((dc - 1.0).abs() < 1e-12);
    }
}

#[test]
fn invalid_parameters_are_rejected() {
    let xs = vec![1.0; 100];
    for (order, cutoff) in [
        (0, 0.2),
        (MAX_ORDER + 1, 0.2),
        (2, 0.0),
        (2, 1.0),
        (2, -0.1),
        (2, f64::NAN),
    ] {
        assert!(
            Butterworth::new(order, cutoff).is_none(),
            "{order} {cutoff}"
        );
        assert!(butterworth_lowpass_filtfilt(&xs, order, cutoff).is_none());
    }
    // Too short for the padding, and non-finite input.
    let pad = filtfilt_padding(4);
    assert!(butterworth_lowpass_filtfilt(&vec![1.0; pad], 4, 0.1).is_none());
    assert!(butterworth_lowpass_filtfilt(&vec![1.0; pad + 1], 4, 0.1).is_some());
    let mut with_nan = vec![1.0; 100];
    with_nan[50] = f64::NAN;
    assert!(butterworth_lowpass_filtfilt(&with_nan, 4, 0.1).is_none());
    assert!(butterworth_lowpass_filtfilt(&[], 2, 0.2).is_none());
}

#[test]
fn causal_filter_has_unity_dc_gain_and_resets() {
    let mut f = Butterworth::new(4, 0.1).unwrap();
    let mut y = 0.0;
    for _ in 0..2000 {
        y = f.process(3.0);
    }
    assert!((y - 3.0).abs() < 1e-9, "{y}");
    f.reset();
    // From rest, the first output of a unit step is the product of the b0s.
    let b0: f64 = f.sections().iter().map(|s| s.b[0]).product();
    assert!((f.process(1.0) - b0).abs() < 1e-15);
    // Primed to a level: no transient at all.
    f.reset_to(-2.5);
    for _ in 0..50 {
        assert!((f.process(-2.5) + 2.5).abs() < 1e-12);
    }
}

#[test]
fn causal_filter_impulse_response_matches_difference_equation() {
    // y[n] = b0 x[n] + b1 x[n−1] + b2 x[n−2] − a1 y[n−1] − a2 y[n−2] for butter(2, 0.2).
    let (b, a) = (
        [0.0674552738890719, 0.1349105477781438, 0.0674552738890719],
        [1.0, -1.1429805025399011, 0.4128015980961886],
    );
    let mut f = Butterworth::new(2, 0.2).unwrap();
    let (mut x1, mut x2, mut y1, mut y2) = (0.0, 0.0, 0.0, 0.0);
    for n in 0..40 {
        let x = if n == 0 { 1.0 } else { 0.0 };
        let expected = b[0] * x + b[1] * x1 + b[2] * x2 - a[1] * y1 - a[2] * y2;
        let actual = f.process(x);
        assert!(
            (actual - expected).abs() < 1e-12,
            "n = {n}: {actual} vs {expected}"
        );
        (x2, x1, y2, y1) = (x1, x, y1, expected);
    }
}

#[test]
fn filtfilt_keeps_constants_constant() {
    for order in [1, 2, 3, 4, 7] {
        let ys = butterworth_lowpass_filtfilt(&vec![42.5; 200], order, 0.15).unwrap();
        assert_eq!(ys.len(), 200);
        assert!(ys.iter().all(|y| (y - 42.5).abs() < 1e-9), "order {order}");
    }
    // A straight line passes with no lag (zero phase): exactly in the
    // interior; the steady-state start (made for constants) leaves a small
    // transient at the ends, as in scipy.
    let line: Vec<f64> = (0..300).map(|i| 1.0 + 0.5 * i as f64).collect();
    let ys = butterworth_lowpass_filtfilt(&line, 2, 0.2).unwrap();
    assert_close(&ys[40..260], &line[40..260], 1e-6);
    assert_close(&ys, &line, 0.02);
}

fn sinusoid(n: usize, freq_of_nyquist: f64) -> Vec<f64> {
    (0..n)
        .map(|i| (PI * freq_of_nyquist * i as f64).sin())
        .collect()
}

fn rms(xs: &[f64]) -> f64 {
    (xs.iter().map(|x| x * x).sum::<f64>() / xs.len() as f64).sqrt()
}

#[test]
fn high_frequencies_are_attenuated_low_ones_pass() {
    let n = 2000;
    let middle = 500..1500;
    // 0.9 · Nyquist through order 4, cutoff 0.1: more than 20 dB down.
    let high = sinusoid(n, 0.9);
    let ys = butterworth_lowpass_filtfilt(&high, 4, 0.1).unwrap();
    let gain_db = 20.0 * (rms(&ys[middle.clone()]) / rms(&high[middle.clone()])).log10();
    assert!(gain_db < -20.0, "{gain_db} dB");
    // 0.01 · Nyquist passes within 1 %, sample by sample and with no phase shift.
    let low = sinusoid(n, 0.01);
    let ys = butterworth_lowpass_filtfilt(&low, 4, 0.1).unwrap();
    for i in middle {
        assert!(
            (ys[i] - low[i]).abs() < 0.01,
            "sample {i}: {} vs {}",
            ys[i],
            low[i]
        );
    }
}

#[test]
fn filtfilt_gain_is_magnitude_squared() {
    // At the cutoff the forward-backward gain is |H|² = 1/2.
    let n = 4000;
    let xs = sinusoid(n, 0.2);
    let ys = butterworth_lowpass_filtfilt(&xs, 2, 0.2).unwrap();
    let gain = rms(&ys[1000..3000]) / rms(&xs[1000..3000]);
    assert!((gain - 0.5).abs() < 0.01, "{gain}");
}
