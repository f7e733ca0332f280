//! The generic perf ABI: hwqos's `hw.*`/`sw.*` names and perf's own symbolic and
//! legacy-cache names, encoded as `PERF_TYPE_HARDWARE`, `PERF_TYPE_HW_CACHE` and
//! `PERF_TYPE_SOFTWARE` events (constants from `include/uapi/linux/perf_event.h`;
//! perf's name tables from `tools/perf/util/evsel.c` and `parse-events.l`).

use crate::event::perf_type;

/// `enum perf_hw_id`.
mod hw_id {
    pub const CPU_CYCLES: u64 = 0;
    pub const INSTRUCTIONS: u64 = 1;
    pub const CACHE_REFERENCES: u64 = 2;
    pub const CACHE_MISSES: u64 = 3;
    pub const BRANCH_INSTRUCTIONS: u64 = 4;
    pub const BRANCH_MISSES: u64 = 5;
    pub const BUS_CYCLES: u64 = 6;
    pub const STALLED_CYCLES_FRONTEND: u64 = 7;
    pub const STALLED_CYCLES_BACKEND: u64 = 8;
    pub const REF_CPU_CYCLES: u64 = 9;
}

/// `enum perf_sw_ids`.
mod sw_id {
    pub const CPU_CLOCK: u64 = 0;
    pub const TASK_CLOCK: u64 = 1;
    pub const PAGE_FAULTS: u64 = 2;
    pub const CONTEXT_SWITCHES: u64 = 3;
    pub const CPU_MIGRATIONS: u64 = 4;
    pub const PAGE_FAULTS_MIN: u64 = 5;
    pub const PAGE_FAULTS_MAJ: u64 = 6;
    pub const ALIGNMENT_FAULTS: u64 = 7;
    pub const EMULATION_FAULTS: u64 = 8;
}

/// `enum perf_hw_cache_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cache {
    L1d = 0,
    L1i = 1,
    Ll = 2,
    Dtlb = 3,
    Itlb = 4,
    Bpu = 5,
    Node = 6,
}

/// `enum perf_hw_cache_op_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CacheOp {
    Read = 0,
    Write = 1,
    Prefetch = 2,
}

/// `enum perf_hw_cache_op_result_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CacheResult {
    Access = 0,
    Miss = 1,
}

/// How a generic hwqos name is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    Hardware(u64),
    Cache(Cache, CacheOp, CacheResult),
    Software(u64),
    /// Not in the generic ABI: looked up in the curated per-model table.
    CuratedL2(CacheResult),
}

impl Encoding {
    /// `(type, config)`, or `None` for curated events.
    pub(crate) fn attr(self) -> Option<(u32, u64)> {
        match self {
            Encoding::Hardware(id) => Some((perf_type::HARDWARE, id)),
            Encoding::Software(id) => Some((perf_type::SOFTWARE, id)),
            Encoding::Cache(cache, op, result) => {
                Some((perf_type::HW_CACHE, cache_config(cache, op, result)))
            }
            Encoding::CuratedL2(_) => None,
        }
    }
}

/// `config = id | (op << 8) | (result << 16)` for `PERF_TYPE_HW_CACHE`.
pub(crate) fn cache_config(cache: Cache, op: CacheOp, result: CacheResult) -> u64 {
    (cache as u64) | ((op as u64) << 8) | ((result as u64) << 16)
}

/// hwqos's generic names (each is also its metric name in the core registry).
pub(crate) const GENERIC: &[(&str, Encoding)] = {
    use self::Cache::{Bpu, Dtlb, Itlb, L1d, L1i, Ll, Node};
    use CacheOp::{Read, Write};
    use CacheResult::{Access, Miss};
    use Encoding::{CuratedL2, Hardware, Software};
    const fn cache(cache: Cache, op: CacheOp, result: CacheResult) -> Encoding {
        Encoding::Cache(cache, op, result)
    }
    &[
        ("hw.cycles", Hardware(hw_id::CPU_CYCLES)),
        ("hw.ref_cycles", Hardware(hw_id::REF_CPU_CYCLES)),
        ("hw.instructions", Hardware(hw_id::INSTRUCTIONS)),
        ("hw.branches", Hardware(hw_id::BRANCH_INSTRUCTIONS)),
        ("hw.branch.miss", Hardware(hw_id::BRANCH_MISSES)),
        ("hw.cache.ref", Hardware(hw_id::CACHE_REFERENCES)),
        ("hw.cache.miss", Hardware(hw_id::CACHE_MISSES)),
        ("hw.bus_cycles", Hardware(hw_id::BUS_CYCLES)),
        (
            "hw.stalled_cycles.frontend",
            Hardware(hw_id::STALLED_CYCLES_FRONTEND),
        ),
        (
            "hw.stalled_cycles.backend",
            Hardware(hw_id::STALLED_CYCLES_BACKEND),
        ),
        ("hw.l1d.access", cache(L1d, Read, Access)),
        ("hw.l1d.miss", cache(L1d, Read, Miss)),
        ("hw.l1d.store", cache(L1d, Write, Access)),
        ("hw.l1i.access", cache(L1i, Read, Access)),
        ("hw.l1i.miss", cache(L1i, Read, Miss)),
        ("hw.l2.access", CuratedL2(Access)),
        ("hw.l2.miss", CuratedL2(Miss)),
        ("hw.llc.access", cache(Ll, Read, Access)),
        ("hw.llc.miss", cache(Ll, Read, Miss)),
        ("hw.dtlb.access", cache(Dtlb, Read, Access)),
        ("hw.dtlb.miss", cache(Dtlb, Read, Miss)),
        ("hw.itlb.access", cache(Itlb, Read, Access)),
        ("hw.itlb.miss", cache(Itlb, Read, Miss)),
        ("hw.bpu.access", cache(Bpu, Read, Access)),
        ("hw.bpu.miss", cache(Bpu, Read, Miss)),
        ("hw.node.access", cache(Node, Read, Access)),
        ("hw.node.miss", cache(Node, Read, Miss)),
        ("sw.task_clock", Software(sw_id::TASK_CLOCK)),
        ("sw.cpu_clock", Software(sw_id::CPU_CLOCK)),
        ("sw.page_faults", Software(sw_id::PAGE_FAULTS)),
        ("sw.minor_faults", Software(sw_id::PAGE_FAULTS_MIN)),
        ("sw.major_faults", Software(sw_id::PAGE_FAULTS_MAJ)),
        ("sw.context_switches", Software(sw_id::CONTEXT_SWITCHES)),
        ("sw.cpu_migrations", Software(sw_id::CPU_MIGRATIONS)),
        ("sw.alignment_faults", Software(sw_id::ALIGNMENT_FAULTS)),
        ("sw.emulation_faults", Software(sw_id::EMULATION_FAULTS)),
    ]
};

/// perf's symbolic hardware and software names (with perf's aliases) and the
/// generic hwqos name each one is reported as.
pub(crate) const PERF_SYMBOLIC: &[(&str, &str)] = &[
    ("cpu-cycles", "hw.cycles"),
    ("cycles", "hw.cycles"),
    ("instructions", "hw.instructions"),
    ("cache-references", "hw.cache.ref"),
    ("cache-misses", "hw.cache.miss"),
    ("branch-instructions", "hw.branches"),
    ("branches", "hw.branches"),
    ("branch-misses", "hw.branch.miss"),
    ("bus-cycles", "hw.bus_cycles"),
    ("stalled-cycles-frontend", "hw.stalled_cycles.frontend"),
    ("idle-cycles-frontend", "hw.stalled_cycles.frontend"),
    ("stalled-cycles-backend", "hw.stalled_cycles.backend"),
    ("idle-cycles-backend", "hw.stalled_cycles.backend"),
    ("ref-cycles", "hw.ref_cycles"),
    ("cpu-clock", "sw.cpu_clock"),
    ("task-clock", "sw.task_clock"),
    ("page-faults", "sw.page_faults"),
    ("faults", "sw.page_faults"),
    ("minor-faults", "sw.minor_faults"),
    ("major-faults", "sw.major_faults"),
    ("context-switches", "sw.context_switches"),
    ("cs", "sw.context_switches"),
    ("cpu-migrations", "sw.cpu_migrations"),
    ("migrations", "sw.cpu_migrations"),
    ("alignment-faults", "sw.alignment_faults"),
    ("emulation-faults", "sw.emulation_faults"),
];

/// perf's cache names (`evsel__hw_cache`), the hwqos metric component, and the
/// ops perf accepts for the cache (`evsel__hw_cache_stat`). Note that perf treats
/// `L2` as an alias of the *last-level* cache; hwqos follows perf here, and the
/// real L2 is `hw.l2.*`.
const CACHES: &[(Cache, &[&str], &str, &[CacheOp])] = {
    use CacheOp::*;
    &[
        (
            Cache::L1d,
            &["L1-dcache", "l1-d", "l1d", "L1-data"],
            "l1d",
            &[Read, Write, Prefetch],
        ),
        (
            Cache::L1i,
            &["L1-icache", "l1-i", "l1i", "L1-instruction"],
            "l1i",
            &[Read, Prefetch],
        ),
        (Cache::Ll, &["LLC", "L2"], "llc", &[Read, Write, Prefetch]),
        (
            Cache::Dtlb,
            &["dTLB", "d-tlb", "Data-TLB"],
            "dtlb",
            &[Read, Write, Prefetch],
        ),
        (
            Cache::Itlb,
            &["iTLB", "i-tlb", "Instruction-TLB"],
            "itlb",
            &[Read],
        ),
        (
            Cache::Bpu,
            &["branch", "branches", "bpu", "btb", "bpc"],
            "bpu",
            &[Read],
        ),
        (Cache::Node, &["node"], "node", &[Read, Write, Prefetch]),
    ]
};

/// `evsel__hw_cache_op`, with the word hwqos uses in metric names.
const OPS: &[(CacheOp, &[&str], &str)] = &[
    (CacheOp::Read, &["load", "loads", "read"], "load"),
    (CacheOp::Write, &["store", "stores", "write"], "store"),
    (
        CacheOp::Prefetch,
        &[
            "prefetch",
            "prefetches",
            "speculative-read",
            "speculative-load",
        ],
        "prefetch",
    ),
];

/// `evsel__hw_cache_result`, with the word hwqos uses in metric names.
const RESULTS: &[(CacheResult, &[&str], &str)] = &[
    (
        CacheResult::Access,
        &["refs", "Reference", "ops", "access"],
        "access",
    ),
    (CacheResult::Miss, &["misses", "miss"], "miss"),
];

/// Looks up a generic hwqos name.
pub(crate) fn generic(name: &str) -> Option<Encoding> {
    GENERIC.iter().find(|(n, _)| *n == name).map(|&(_, e)| e)
}

/// Looks up a perf symbolic name; returns the generic name it maps to.
pub(crate) fn perf_symbolic(name: &str) -> Option<&'static str> {
    PERF_SYMBOLIC
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, g)| g)
}

/// A parsed legacy cache name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CacheEvent {
    pub cache: Cache,
    pub op: CacheOp,
    pub result: CacheResult,
}

impl CacheEvent {
    pub(crate) fn config(self) -> u64 {
        cache_config(self.cache, self.op, self.result)
    }

    /// The hwqos metric: the registered generic name where there is one
    /// (`hw.l1d.miss`), otherwise `hw.<cache>.<op>.<result>`.
    pub(crate) fn metric(self) -> String {
        let key = CACHES
            .iter()
            .find(|c| c.0 == self.cache)
            .map_or("cache", |c| c.2);
        let result = RESULTS
            .iter()
            .find(|r| r.0 == self.result)
            .map_or("access", |r| r.2);
        match (self.cache, self.op, self.result) {
            (_, CacheOp::Read, _) => format!("hw.{key}.{result}"),
            (Cache::L1d, CacheOp::Write, CacheResult::Access) => "hw.l1d.store".to_string(),
            _ => {
                let op = OPS.iter().find(|o| o.0 == self.op).map_or("load", |o| o.2);
                format!("hw.{key}.{op}.{result}")
            }
        }
    }
}

/// Why a string that starts like a cache name is not a valid one.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CacheParse {
    /// Does not start with a cache name at all.
    NotCache,
    Invalid(String),
}

/// Strips a case-insensitive alias (longest first) that is followed by `-` or the
/// end; returns the alias's value and the rest (empty or starting with `-`).
fn strip_alias<'a, T: Copy>(s: &'a str, table: &[(T, &[&str])]) -> Option<(T, &'a str)> {
    let mut best: Option<(T, usize)> = None;
    for &(value, aliases) in table {
        for alias in aliases {
            let n = alias.len();
            let matches = s.len() >= n
                && s.is_char_boundary(n)
                && s[..n].eq_ignore_ascii_case(alias)
                && (s.len() == n || s.as_bytes()[n] == b'-');
            if matches && best.is_none_or(|(_, len)| n > len) {
                best = Some((value, n));
            }
        }
    }
    best.map(|(value, n)| (value, s.get(n..).unwrap_or("")))
}

/// Parses perf's `<cache>[-<op>][-<result>]` syntax (op and result in either
/// order, case-insensitive; op defaults to load, result to access).
pub(crate) fn parse_cache(name: &str) -> Result<CacheEvent, CacheParse> {
    let caches: Vec<(Cache, &[&str])> = CACHES.iter().map(|c| (c.0, c.1)).collect();
    let ops: Vec<(CacheOp, &[&str])> = OPS.iter().map(|o| (o.0, o.1)).collect();
    let results: Vec<(CacheResult, &[&str])> = RESULTS.iter().map(|r| (r.0, r.1)).collect();

    let Some((cache, mut rest)) = strip_alias(name, &caches) else {
        return Err(CacheParse::NotCache);
    };
    let mut op = None;
    let mut result = None;
    while !rest.is_empty() {
        let word = rest.strip_prefix('-').unwrap_or(rest);
        if word.is_empty() {
            return Err(CacheParse::Invalid("the name ends with `-`".to_string()));
        }
        if op.is_none() {
            if let Some((o, r)) = strip_alias(word, &ops) {
                op = Some(o);
                rest = r;
                continue;
            }
        }
        if result.is_none() {
            if let Some((res, r)) = strip_alias(word, &results) {
                result = Some(res);
                rest = r;
                continue;
            }
        }
        return Err(CacheParse::Invalid(format!(
            "`{word}` is not a cache operation (load, store, prefetch) or result (refs, misses) \
             expected after the cache name; perf's form is <cache>-<op>-<result>, e.g. L1-dcache-load-misses"
        )));
    }
    let op = op.unwrap_or(CacheOp::Read);
    let result = result.unwrap_or(CacheResult::Access);
    let (_, aliases, _, valid_ops) = CACHES
        .iter()
        .find(|c| c.0 == cache)
        .copied()
        .unwrap_or(CACHES[0]);
    if !valid_ops.contains(&op) {
        let op_name = OPS.iter().find(|o| o.0 == op).map_or("?", |o| o.2);
        return Err(CacheParse::Invalid(format!(
            "the {} cache has no `{op_name}` operation in the perf ABI",
            aliases[0]
        )));
    }
    Ok(CacheEvent { cache, op, result })
}

/// The canonical perf cache names (as `perf list` prints them), e.g.
/// `L1-dcache-loads`, `L1-dcache-load-misses`.
pub(crate) fn canonical_cache_names() -> Vec<String> {
    let mut out = Vec::new();
    for &(_, aliases, _, valid_ops) in CACHES {
        for &op in valid_ops {
            let (plural, singular) = match op {
                CacheOp::Read => ("loads", "load"),
                CacheOp::Write => ("stores", "store"),
                CacheOp::Prefetch => ("prefetches", "prefetch"),
            };
            out.push(format!("{}-{plural}", aliases[0]));
            out.push(format!("{}-{singular}-misses", aliases[0]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_names_parse_like_perf() {
        // Encodings checked against `perf stat -vv -e NAME` (linux-perf 6.1).
        let cfg = |n: &str| parse_cache(n).map(|c| c.config());
        assert_eq!(cfg("L1-dcache-load-misses"), Ok(0x10000));
        assert_eq!(cfg("L1-dcache-misses-load"), Ok(0x10000));
        assert_eq!(cfg("LLC-loads"), Ok(0x2));
        assert_eq!(cfg("dTLB-store-misses"), Ok(0x10103));
        assert_eq!(cfg("branch-loads"), Ok(0x5));
        assert_eq!(cfg("L1-dcache-prefetches"), Ok(0x200));
        assert_eq!(cfg("l1d-store-miss"), Ok(0x10100));
        assert_eq!(cfg("Data-TLB-read"), Ok(0x3));
        assert_eq!(cfg("node"), Ok(0x6));
        assert_eq!(parse_cache("cycles"), Err(CacheParse::NotCache));
        assert!(matches!(
            parse_cache("L1-icache-stores"),
            Err(CacheParse::Invalid(_))
        ));
        assert!(matches!(
            parse_cache("LLC-load-load"),
            Err(CacheParse::Invalid(_))
        ));
        assert!(matches!(parse_cache("LLC-"), Err(CacheParse::Invalid(_))));
    }

    #[test]
    fn every_canonical_name_parses() {
        for n in canonical_cache_names() {
            assert!(parse_cache(&n).is_ok(), "{n}");
        }
    }
}
