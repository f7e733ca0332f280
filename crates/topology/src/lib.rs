//! The node's hardware model: packages, cores, SMT siblings, NUMA nodes, caches
//! and cache domains read from sysfs/procfs, plus measured probes and an OS
//! inventory (`hwqos probe`).
