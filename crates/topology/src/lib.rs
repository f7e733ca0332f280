//! The node's hardware model: packages, cores, SMT siblings, NUMA nodes, caches
//! and cache domains read from sysfs/procfs, plus measured probes and an OS
//! inventory (`hwqos probe`).
//!
//! Placing work well on a node needs to know its shape: which CPUs are SMT
//! siblings, which share an L2 or the last-level cache, how big and how fast
//! each cache level is, and which OS settings (clocksource, HZ, transparent
//! huge pages, isolated CPUs, scheduler sysctls) change the numbers. This crate
//! gathers all of it into one serializable [`HardwareModel`]. The SRA
//! allocator (hwqos-sched) places processes on [`CacheDomain`]s, the load
//! generator (hwqos-loadsynth) sizes its cache and TLB loads from the cache
//! geometry, the monitor takes its CPI-stack penalties from a configured
//! model ([`HardwareModel::cpi_penalties`]), and `hwqos probe` writes and
//! compares models.
//!
//! [`Topology::read`] parses the static part from any root directory, so the
//! same code reads the live node (`/`, or [`Topology::this_node`]) and fixture
//! trees in tests; every per-cache field is optional because kernels and
//! architectures expose different files, and only a tree without any CPU is an
//! error. The [`probe`] module adds measurements (pinned, overhead-calibrated,
//! repeated, with confidence intervals), and [`HardwareModel::save`] /
//! [`HardwareModel::load`] keep the result as a versioned JSON file
//! ([`SCHEMA`], `hwqos.hwmodel/1`) that another service loads instead of
//! probing again; [`diff`] says whether a test node replicates a production
//! node.
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
//! # Examples
//!
//! The live node's last-level cache domains:
//!
//! ```no_run
//! let topo = hwqos_topology::Topology::this_node().unwrap();
//! for domain in topo.llc() {
//!     println!("LLC {:?} shared by CPUs {:?}", domain.cache.size_bytes, domain.cpus);
//! }
//! ```
//!
//! A model read from a (here: minimal, hand-made) sysfs tree, saved, and
//! loaded back as another service would load it:
//!
//! ```rust
//! use hwqos_topology::{diff, HardwareModel, OsInventory, Topology};
//! use std::fs;
//!
//! let root = tempfile::tempdir()?;
//! for cpu in 0..2 {
//!     let dir = root.path().join(format!("sys/devices/system/cpu/cpu{cpu}"));
//!     fs::create_dir_all(dir.join("topology"))?;
//!     fs::write(dir.join("topology/physical_package_id"), "0\n")?;
//!     fs::write(dir.join("topology/core_id"), format!("{cpu}\n"))?;
//!     let l2 = dir.join("cache/index0");
//!     fs::create_dir_all(&l2)?;
//!     fs::write(l2.join("level"), "2\n")?;
//!     fs::write(l2.join("type"), "Unified\n")?;
//!     fs::write(l2.join("size"), "1024K\n")?;
//!     fs::write(l2.join("shared_cpu_list"), "0-1\n")?;
//! }
//! let topology = Topology::read(root.path())?;
//! assert_eq!(topology.online_cpus(), vec![0, 1]);
//! let llc = topology.llc();
//! assert_eq!((llc.len(), llc[0].cpus.clone()), (1, vec![0, 1]));
//! assert_eq!(llc[0].cache.size_bytes, Some(1 << 20));
//!
//! let model = HardwareModel::new(topology, OsInventory::read(root.path()), None);
//! let file = root.path().join("node.json");
//! model.save(&file)?;
//! let loaded = HardwareModel::load(&file)?;
//! assert!(diff(&model, &loaded, 0.10).is_empty());
//! assert_eq!(loaded.topology.cache_of(1, 2).and_then(|c| c.size_bytes), Some(1 << 20));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

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
