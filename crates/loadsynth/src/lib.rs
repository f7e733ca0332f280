//! hwqos-loadsynth: generators of hardware usage (cache, TLB, branch, CPU,
//! memory bandwidth, page faults, context switches, file I/O), each with one
//! intensity knob, and the PID controllers that drive them until a node's
//! measured usage matches a captured target (thesis chapter 6).
