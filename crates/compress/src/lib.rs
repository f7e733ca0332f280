//! Adaptive message compression (thesis chapter 7): codecs behind one trait,
//! a versioned wire format, per-stream learning of codec and network rates,
//! selection policies and a PID throttle on CPU load.
