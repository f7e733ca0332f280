//! The node's hardware model: packages, cores, SMT siblings, NUMA nodes, caches
//! and cache domains read from sysfs/procfs, plus measured probes and an OS
//! inventory (`hwqos probe`).
//!
//! - [`topology`]: [`Topology::read`] from any root (the live node or a fixture
//!   tree): CPUs, packages, NUMA nodes, caches and [`CacheDomain`]s;
//! - [`os`]: [`OsInventory`]: kernel, clocksource, HZ, THP, governors, isolated
//!   CPUs and the memory/scheduler sysctls;
//! - [`probe`]: the measured probes (clock, syscall, context switch, memory
//!   latency and bandwidth, page faults, loopback TCP, timer accuracy), each a
//!   function returning statistics with confidence intervals;
//! - [`model`]: the versioned JSON [`HardwareModel`] (save/load/diff) and the CPI
//!   penalties derived from it;
//! - [`sysfs`]: CPU-list, mask and size parsing helpers.
//!
//! ```no_run
//! let topo = hwqos_topology::Topology::this_node().unwrap();
//! for domain in topo.llc() {
//!     println!("LLC {:?} shared by CPUs {:?}", domain.cache.size_bytes, domain.cpus);
//! }
//! ```

pub mod model;
pub mod os;
pub mod probe;
pub mod sysfs;
pub mod topology;

pub use model::{diff, Difference, HardwareModel, ModelError, SCHEMA};
pub use os::OsInventory;
pub use probe::{Measured, ProbeKind, ProbeOptions};
pub use topology::{
    Cache, CacheDomain, CacheType, Cpu, NumaNode, Package, Topology, TopologyError,
};
