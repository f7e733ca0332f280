//! Drift-free periodic ticker (placeholder; implemented by the core helper).
