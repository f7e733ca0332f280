//! hwqos-sched: shared-resource-aware allocation and scheduling (thesis
//! chapter 8): correlation of hardware usage with application performance,
//! resource sensitivity models, the placement decision engine, contracts, and
//! quota enforcement backends.
