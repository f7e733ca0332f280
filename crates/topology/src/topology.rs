//! The static topology of a node read from sysfs and procfs: CPUs (package,
//! die, core, cluster, NUMA node, SMT siblings, capacity), packages, NUMA
//! nodes, every cache with its geometry, and the *cache domains* derived from
//! them (groups of CPUs sharing one cache of a level).
//!
//! [`Topology::read`] takes a root directory so the same code parses the live
//! node (`/`) and fixture trees (`tests/fixtures/<name>/`). Optional files that
//! a kernel generation or architecture does not provide (a cache `id`,
//! `ways_of_associativity`, `die_id`, NUMA directories) yield absent fields,
//! never errors; only a tree without any CPU is an error.

use crate::sysfs::{self, format_cpu_list, parse_cpu_list, parse_cpu_mask, read_number};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Why a topology could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The root (carried) has no `sys/devices/system/cpu/cpuN` directory:
    /// not a Linux sysfs tree, or the wrong root.
    #[error("{}: no CPUs found (is this a Linux sysfs root? expected sys/devices/system/cpu/cpuN)", .0.display())]
    NoCpus(PathBuf),
    /// A directory that exists could not be listed (permissions, I/O error);
    /// a missing optional directory is not an error.
    #[error("{}: cannot list the directory: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// The kind of a cache as sysfs names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheType {
    /// A data cache (sysfs `Data`, e.g. L1d).
    Data,
    /// An instruction cache (sysfs `Instruction`, e.g. L1i).
    Instruction,
    /// A cache holding both (sysfs `Unified`, usually L2 and L3).
    Unified,
    /// The `type` file is missing or holds something else.
    Unknown,
}

impl CacheType {
    fn parse(text: Option<String>) -> CacheType {
        match text.as_deref() {
            Some("Data") => CacheType::Data,
            Some("Instruction") => CacheType::Instruction,
            Some("Unified") => CacheType::Unified,
            _ => CacheType::Unknown,
        }
    }

    /// Whether the cache holds data (the caches that make cache domains).
    pub fn holds_data(self) -> bool {
        matches!(self, CacheType::Data | CacheType::Unified)
    }

    /// The short name used in tables: `d`, `i`, ``, `?`.
    pub fn suffix(self) -> &'static str {
        match self {
            CacheType::Data => "d",
            CacheType::Instruction => "i",
            CacheType::Unified => "",
            CacheType::Unknown => "?",
        }
    }
}

/// One cache instance (e.g. "the L2 of core 3"), deduplicated across the CPUs
/// that share it. Every geometry field is absent when its sysfs file is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cache {
    /// The kernel's cache id (unique per level and type), if exposed.
    pub id: Option<u32>,
    /// 1 for L1, 2 for L2, …; absent if the `level` file is.
    pub level: Option<u8>,
    /// Data, instruction or unified (`type` in JSON).
    #[serde(rename = "type")]
    pub kind: CacheType,
    /// Capacity in bytes (sysfs `size`, e.g. `32K`).
    pub size_bytes: Option<u64>,
    /// Associativity (`ways_of_associativity`); 0 on some kernels for a
    /// fully associative cache.
    pub ways: Option<u32>,
    /// Number of sets (`number_of_sets`).
    pub sets: Option<u32>,
    /// Coherency line size in bytes (`coherency_line_size`, usually 64).
    pub line_size: Option<u32>,
    /// Lines per tag (`physical_line_partition`, usually 1).
    pub physical_line_partition: Option<u32>,
    /// The CPUs sharing this cache. When neither `shared_cpu_list` nor
    /// `shared_cpu_map` exists, only the CPU the cache was listed under.
    pub shared_cpus: Vec<u32>,
}

impl Cache {
    /// Fills absent geometry fields from another copy of the same cache.
    fn fill_from(&mut self, other: &Cache) {
        self.size_bytes = self.size_bytes.or(other.size_bytes);
        self.ways = self.ways.or(other.ways);
        self.sets = self.sets.or(other.sets);
        self.line_size = self.line_size.or(other.line_size);
        self.physical_line_partition = self
            .physical_line_partition
            .or(other.physical_line_partition);
    }

    /// `L1d`, `L2`, `L3`, `L1i`.
    pub fn name(&self) -> String {
        match self.level {
            Some(l) => format!("L{l}{}", self.kind.suffix()),
            None => format!("L?{}", self.kind.suffix()),
        }
    }
}

/// One logical CPU (hardware thread).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    /// The logical CPU number (`cpuN`), as the scheduler and perf use it.
    pub id: u32,
    /// Whether the CPU is online (from `cpu/online`, else the CPU's own
    /// `online` file; CPUs without one, like cpu0 on x86, are online).
    pub online: bool,
    /// `physical_package_id` (absent for offline CPUs or when it reads -1).
    pub package: Option<u32>,
    /// `die_id` (multi-die packages), absent when not exposed or -1.
    pub die: Option<u32>,
    /// The cluster (Arm: a group of cores sharing an L2), if exposed and valid.
    pub cluster: Option<u32>,
    /// `core_id`: unique within a package (and die), not across the node.
    pub core: Option<u32>,
    /// The NUMA node whose `cpulist` holds this CPU; absent without NUMA
    /// information in sysfs.
    pub numa_node: Option<u32>,
    /// The hardware threads of this CPU's core, this CPU included, ascending.
    pub smt_siblings: Vec<u32>,
    /// Relative compute capacity (Arm big.LITTLE: 1024 for the biggest core).
    pub capacity: Option<u32>,
    /// `cpufreq/cpuinfo_max_freq` in kHz.
    pub max_freq_khz: Option<u64>,
}

/// A physical package (socket).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    /// `physical_package_id`.
    pub id: u32,
    /// Its logical CPUs, ascending.
    pub cpus: Vec<u32>,
    /// Number of distinct physical cores in the package.
    pub cores: usize,
}

/// A NUMA node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    /// The node number (`nodeN`).
    pub id: u32,
    /// Its CPUs (`cpulist`), ascending; empty for a memory-only node.
    pub cpus: Vec<u32>,
    /// `MemTotal` from the node's `meminfo`, in bytes.
    pub memory_bytes: Option<u64>,
}

/// A group of CPUs sharing one data or unified cache of a level, with that
/// cache's geometry: the unit the SRA allocator places processes on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheDomain {
    /// The cache level (1, 2, 3…).
    pub level: u8,
    /// The CPUs sharing the cache, ascending.
    pub cpus: Vec<u32>,
    /// The shared cache itself, with its geometry.
    pub cache: Cache,
}

/// The node's static topology.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Every CPU found, online or not, by ascending id.
    pub cpus: Vec<Cpu>,
    /// The packages of the CPUs that report one, by ascending id.
    pub packages: Vec<Package>,
    /// The NUMA nodes, by ascending id; empty on kernels without NUMA
    /// information.
    pub numa_nodes: Vec<NumaNode>,
    /// Every cache instance, sorted by level, type and first CPU.
    pub caches: Vec<Cache>,
    /// The CPU model string (`model name` on x86, `CPU part` list on Arm).
    pub cpu_model: Option<String>,
    /// Flags from `/proc/cpuinfo` that matter to measurements
    /// (`tsc`, `constant_tsc`, `nonstop_tsc`, `tsc_known_freq`, `ht`,
    /// `hypervisor`), as present; empty on Arm.
    pub cpu_flags: Vec<String>,
}

const INTERESTING_FLAGS: [&str; 6] = [
    "tsc",
    "constant_tsc",
    "nonstop_tsc",
    "tsc_known_freq",
    "ht",
    "hypervisor",
];

/// What identifies one cache instance across the CPUs listing it:
/// (level, type, shared CPUs, kernel id).
type CacheKey = (Option<u8>, CacheType, Vec<u32>, Option<u32>);

/// Upper bound on CPU directories scanned, so a corrupt tree cannot make the
/// reader run away.
const MAX_CPUS: usize = sysfs::MAX_CPU as usize + 1;

impl Topology {
    /// Reads the topology under `root` (`/` for the live node).
    pub fn read(root: &Path) -> Result<Topology, TopologyError> {
        let cpu_dir = root.join("sys/devices/system/cpu");
        let ids = list_numbered(&cpu_dir, "cpu")?;
        if ids.is_empty() {
            return Err(TopologyError::NoCpus(root.to_path_buf()));
        }
        let online_list =
            sysfs::read_trimmed(&cpu_dir.join("online")).and_then(|t| parse_cpu_list(&t));
        let nodes = read_numa_nodes(root)?;
        let node_of: BTreeMap<u32, u32> = nodes
            .iter()
            .flat_map(|n| n.cpus.iter().map(move |c| (*c, n.id)))
            .collect();

        let mut cpus = Vec::new();
        let mut caches: BTreeMap<CacheKey, Cache> = BTreeMap::new();
        for id in ids.into_iter().take(MAX_CPUS) {
            let dir = cpu_dir.join(format!("cpu{id}"));
            let online = match &online_list {
                Some(list) => list.contains(&id),
                None => read_number::<u8>(&dir.join("online")).is_none_or(|v| v == 1),
            };
            let top = dir.join("topology");
            let siblings = sysfs::read_trimmed(&top.join("thread_siblings_list"))
                .or_else(|| sysfs::read_trimmed(&top.join("core_cpus_list")))
                .and_then(|t| parse_cpu_list(&t))
                .or_else(|| {
                    sysfs::read_trimmed(&top.join("thread_siblings"))
                        .and_then(|t| parse_cpu_mask(&t))
                })
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| vec![id]);
            cpus.push(Cpu {
                id,
                online,
                package: read_id(&top.join("physical_package_id")),
                die: read_id(&top.join("die_id")),
                cluster: read_id(&top.join("cluster_id")).filter(|c| *c != 0xffff),
                core: read_id(&top.join("core_id")),
                numa_node: node_of.get(&id).copied(),
                smt_siblings: siblings,
                capacity: read_number(&dir.join("cpu_capacity")),
                max_freq_khz: read_number(&dir.join("cpufreq/cpuinfo_max_freq")),
            });
            for index in list_numbered(&dir.join("cache"), "index").unwrap_or_default() {
                let c = read_cache(&dir.join(format!("cache/index{index}")), id);
                let key = (c.level, c.kind, c.shared_cpus.clone(), c.id);
                // The same cache is listed under each CPU sharing it; a value
                // unreadable in one copy is taken from another.
                caches
                    .entry(key)
                    .and_modify(|known| known.fill_from(&c))
                    .or_insert(c);
            }
        }
        let mut caches: Vec<Cache> = caches.into_values().collect();
        caches.sort_by(|a, b| {
            (a.level, a.kind, a.shared_cpus.first(), a.id).cmp(&(
                b.level,
                b.kind,
                b.shared_cpus.first(),
                b.id,
            ))
        });
        let packages = group_packages(&cpus);
        let (cpu_model, cpu_flags) = read_cpuinfo(&root.join("proc/cpuinfo"));
        Ok(Topology {
            cpus,
            packages,
            numa_nodes: nodes,
            caches,
            cpu_model,
            cpu_flags,
        })
    }

    /// The live node's topology (`/`).
    pub fn this_node() -> Result<Topology, TopologyError> {
        Topology::read(Path::new("/"))
    }

    /// The online CPUs, ascending.
    pub fn online_cpus(&self) -> Vec<u32> {
        self.cpus
            .iter()
            .filter(|c| c.online)
            .map(|c| c.id)
            .collect()
    }

    /// The CPU with this id; `None` if the node has no such CPU.
    pub fn cpu(&self, id: u32) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.id == id)
    }

    /// The hardware threads of `cpu`'s core, `cpu` included (`[cpu]` without
    /// SMT); `None` for an unknown CPU.
    pub fn smt_siblings(&self, cpu: u32) -> Option<&[u32]> {
        self.cpu(cpu).map(|c| c.smt_siblings.as_slice())
    }

    /// The distinct SMT groups (physical cores), each ascending, sorted by first CPU.
    pub fn cores(&self) -> Vec<Vec<u32>> {
        let set: BTreeSet<Vec<u32>> = self.cpus.iter().map(|c| c.smt_siblings.clone()).collect();
        let mut v: Vec<Vec<u32>> = set.into_iter().collect();
        v.sort_by_key(|g| g.first().copied());
        v
    }

    /// Whether any core has more than one hardware thread.
    pub fn has_smt(&self) -> bool {
        self.cpus.iter().any(|c| c.smt_siblings.len() > 1)
    }

    /// The CPUs (online or not) whose package is `package`, ascending; empty for an
    /// unknown package.
    pub fn cpus_in_package(&self, package: u32) -> Vec<u32> {
        self.cpus
            .iter()
            .filter(|c| c.package == Some(package))
            .map(|c| c.id)
            .collect()
    }

    /// The CPUs of NUMA node `node`, ascending; empty for an unknown node.
    pub fn cpus_in_node(&self, node: u32) -> Vec<u32> {
        self.numa_nodes
            .iter()
            .find(|n| n.id == node)
            .map(|n| n.cpus.clone())
            .unwrap_or_default()
    }

    /// The levels that have a data or unified cache, ascending (`[1, 2, 3]`).
    pub fn data_cache_levels(&self) -> Vec<u8> {
        let set: BTreeSet<u8> = self
            .caches
            .iter()
            .filter(|c| c.kind.holds_data())
            .filter_map(|c| c.level)
            .collect();
        set.into_iter().collect()
    }

    /// The groups of CPUs sharing one data or unified cache of `level`, each
    /// with that cache's geometry, sorted by first CPU. Empty if the level has
    /// no such cache.
    pub fn cache_domains(&self, level: u8) -> Vec<CacheDomain> {
        let mut v: Vec<CacheDomain> = self
            .caches
            .iter()
            .filter(|c| c.level == Some(level) && c.kind.holds_data())
            .map(|c| CacheDomain {
                level,
                cpus: c.shared_cpus.clone(),
                cache: c.clone(),
            })
            .collect();
        v.sort_by_key(|d| d.cpus.first().copied());
        v
    }

    /// The cache domains of the last (highest) data cache level.
    pub fn llc(&self) -> Vec<CacheDomain> {
        self.data_cache_levels()
            .last()
            .map(|l| self.cache_domains(*l))
            .unwrap_or_default()
    }

    /// The L1 data caches (one domain per core on most CPUs).
    pub fn l1d(&self) -> Vec<CacheDomain> {
        self.cache_domains(1)
    }

    /// The L2 cache domains (`cache_domains(2)`).
    pub fn l2(&self) -> Vec<CacheDomain> {
        self.cache_domains(2)
    }

    /// The data or unified cache of `level` that `cpu` uses.
    pub fn cache_of(&self, cpu: u32, level: u8) -> Option<&Cache> {
        self.caches
            .iter()
            .find(|c| c.level == Some(level) && c.kind.holds_data() && c.shared_cpus.contains(&cpu))
    }

    /// Whether the CPU flags say the TSC runs at a constant rate and keeps
    /// running in deep idle states (`constant_tsc` and `nonstop_tsc`).
    pub fn invariant_tsc(&self) -> bool {
        let has = |f: &str| self.cpu_flags.iter().any(|x| x == f);
        has("constant_tsc") && has("nonstop_tsc")
    }

    /// A multi-line human summary (packages, cores, nodes, caches).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        if let Some(m) = &self.cpu_model {
            s.push_str(&format!("CPU model: {m}\n"));
        }
        s.push_str(&format!(
            "CPUs: {} ({} online), {} cores, {} package(s), {} NUMA node(s), SMT {}\n",
            self.cpus.len(),
            self.online_cpus().len(),
            self.cores().len(),
            self.packages.len(),
            self.numa_nodes.len(),
            if self.has_smt() { "on" } else { "off" }
        ));
        for n in &self.numa_nodes {
            s.push_str(&format!(
                "  node {}: CPUs {}{}\n",
                n.id,
                format_cpu_list(&n.cpus),
                n.memory_bytes
                    .map(|b| format!(", {}", sysfs::format_size(b)))
                    .unwrap_or_default()
            ));
        }
        for c in &self.caches {
            s.push_str(&format!(
                "  {:<4} {:>9}  {:>2} ways  {:>6} sets  {:>3} B lines  CPUs {}\n",
                c.name(),
                c.size_bytes
                    .map(sysfs::format_size)
                    .unwrap_or_else(|| "?".into()),
                opt(c.ways),
                opt(c.sets),
                opt(c.line_size),
                format_cpu_list(&c.shared_cpus)
            ));
        }
        s
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "?".into())
}

/// A non-negative id file; `-1` (unknown) and missing files are `None`.
fn read_id(path: &Path) -> Option<u32> {
    sysfs::read_trimmed(path)?
        .parse::<i64>()
        .ok()
        .and_then(|v| u32::try_from(v).ok())
}

/// The numbers N of the entries `<prefix>N` in `dir`, ascending. A missing
/// directory is an empty list.
fn list_numbered(dir: &Path, prefix: &str) -> Result<Vec<u32>, TopologyError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(TopologyError::Io {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut ids: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix(prefix)?
                .parse::<u32>()
                .ok()
        })
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

fn read_cache(dir: &Path, cpu: u32) -> Cache {
    let shared = sysfs::read_trimmed(&dir.join("shared_cpu_list"))
        .and_then(|t| parse_cpu_list(&t))
        .or_else(|| {
            sysfs::read_trimmed(&dir.join("shared_cpu_map")).and_then(|t| parse_cpu_mask(&t))
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| vec![cpu]);
    Cache {
        id: read_number(&dir.join("id")),
        level: read_number(&dir.join("level")),
        kind: CacheType::parse(sysfs::read_trimmed(&dir.join("type"))),
        size_bytes: sysfs::read_trimmed(&dir.join("size")).and_then(|t| sysfs::parse_size(&t)),
        ways: read_number(&dir.join("ways_of_associativity")),
        sets: read_number(&dir.join("number_of_sets")),
        line_size: read_number(&dir.join("coherency_line_size")),
        physical_line_partition: read_number(&dir.join("physical_line_partition")),
        shared_cpus: shared,
    }
}

fn read_numa_nodes(root: &Path) -> Result<Vec<NumaNode>, TopologyError> {
    let dir = root.join("sys/devices/system/node");
    let mut nodes = Vec::new();
    for id in list_numbered(&dir, "node")? {
        let nd = dir.join(format!("node{id}"));
        let cpus = sysfs::read_trimmed(&nd.join("cpulist"))
            .and_then(|t| parse_cpu_list(&t))
            .unwrap_or_default();
        let memory_bytes = std::fs::read_to_string(nd.join("meminfo"))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    let rest = l.split_once("MemTotal:")?.1.trim();
                    let kb: u64 = rest.trim_end_matches("kB").trim().parse().ok()?;
                    kb.checked_mul(1024)
                })
            });
        nodes.push(NumaNode {
            id,
            cpus,
            memory_bytes,
        });
    }
    Ok(nodes)
}

fn group_packages(cpus: &[Cpu]) -> Vec<Package> {
    let mut by_pkg: BTreeMap<u32, (Vec<u32>, BTreeSet<Vec<u32>>)> = BTreeMap::new();
    for c in cpus {
        if let Some(p) = c.package {
            let e = by_pkg.entry(p).or_default();
            e.0.push(c.id);
            e.1.insert(c.smt_siblings.clone());
        }
    }
    by_pkg
        .into_iter()
        .map(|(id, (cpus, cores))| Package {
            id,
            cpus,
            cores: cores.len(),
        })
        .collect()
}

/// The model string and the measurement-relevant flags of the first CPU.
fn read_cpuinfo(path: &Path) -> (Option<String>, Vec<String>) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return (None, Vec::new());
    };
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let model = field("model name").or_else(|| {
        // Arm: no model name; list the distinct implementer/part pairs.
        let mut parts: Vec<String> = Vec::new();
        for block in text.split("\n\n") {
            let get = |name: &str| {
                block.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == name).then(|| v.trim().to_string())
                })
            };
            if let (Some(i), Some(p)) = (get("CPU implementer"), get("CPU part")) {
                let s = format!("implementer {i} part {p}");
                if !parts.contains(&s) {
                    parts.push(s);
                }
            }
        }
        (!parts.is_empty()).then(|| parts.join(" + "))
    });
    let flags = field("flags")
        .map(|f| {
            f.split_whitespace()
                .filter(|x| INTERESTING_FLAGS.contains(x))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    (model, flags)
}
