//! The generic perf ABI: hwqos's `hw.*`/`sw.*` names and perf's own symbolic and
//! legacy-cache names, encoded as `PERF_TYPE_HARDWARE`, `PERF_TYPE_HW_CACHE` and
//! `PERF_TYPE_SOFTWARE` events (constants from `include/uapi/linux/perf_event.h`;
//! perf's name tables from `tools/perf/util/evsel.c` and `parse-events.l`).

use crate::event::perf_type;
use hwqos_core::metric::names;

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
        (names::HW_CYCLES, Hardware(hw_id::CPU_CYCLES)),
        (names::HW_REF_CYCLES, Hardware(hw_id::REF_CPU_CYCLES)),
        (names::HW_INSTRUCTIONS, Hardware(hw_id::INSTRUCTIONS)),
        (names::HW_BRANCHES, Hardware(hw_id::BRANCH_INSTRUCTIONS)),
        (names::HW_BRANCH_MISS, Hardware(hw_id::BRANCH_MISSES)),
        (names::HW_CACHE_REF, Hardware(hw_id::CACHE_REFERENCES)),
        (names::HW_CACHE_MISS, Hardware(hw_id::CACHE_MISSES)),
        (names::HW_BUS_CYCLES, Hardware(hw_id::BUS_CYCLES)),
        (
            names::HW_STALLED_CYCLES_FRONTEND,
            Hardware(hw_id::STALLED_CYCLES_FRONTEND),
        ),
        (
            names::HW_STALLED_CYCLES_BACKEND,
            Hardware(hw_id::STALLED_CYCLES_BACKEND),
        ),
        (names::HW_L1D_ACCESS, cache(L1d, Read, Access)),
        (names::HW_L1D_MISS, cache(L1d, Read, Miss)),
        (names::HW_L1D_STORE, cache(L1d, Write, Access)),
        (names::HW_L1I_ACCESS, cache(L1i, Read, Access)),
        (names::HW_L1I_MISS, cache(L1i, Read, Miss)),
        (names::HW_L2_ACCESS, CuratedL2(Access)),
        (names::HW_L2_MISS, CuratedL2(Miss)),
        (names::HW_LLC_ACCESS, cache(Ll, Read, Access)),
        (names::HW_LLC_MISS, cache(Ll, Read, Miss)),
        (names::HW_DTLB_ACCESS, cache(Dtlb, Read, Access)),
        (names::HW_DTLB_MISS, cache(Dtlb, Read, Miss)),
        (names::HW_ITLB_ACCESS, cache(Itlb, Read, Access)),
        (names::HW_ITLB_MISS, cache(Itlb, Read, Miss)),
        (names::HW_BPU_ACCESS, cache(Bpu, Read, Access)),
        (names::HW_BPU_MISS, cache(Bpu, Read, Miss)),
        (names::HW_NODE_ACCESS, cache(Node, Read, Access)),
        (names::HW_NODE_MISS, cache(Node, Read, Miss)),
        (names::SW_TASK_CLOCK, Software(sw_id::TASK_CLOCK)),
        (names::SW_CPU_CLOCK, Software(sw_id::CPU_CLOCK)),
        (names::SW_PAGE_FAULTS, Software(sw_id::PAGE_FAULTS)),
        (names::SW_MINOR_FAULTS, Software(sw_id::PAGE_FAULTS_MIN)),
        (names::SW_MAJOR_FAULTS, Software(sw_id::PAGE_FAULTS_MAJ)),
        (
            names::SW_CONTEXT_SWITCHES,
            Software(sw_id::CONTEXT_SWITCHES),
        ),
        (names::SW_CPU_MIGRATIONS, Software(sw_id::CPU_MIGRATIONS)),
        (
            names::SW_ALIGNMENT_FAULTS,
            Software(sw_id::ALIGNMENT_FAULTS),
        ),
        (
            names::SW_EMULATION_FAULTS,
            Software(sw_id::EMULATION_FAULTS),
        ),
    ]
};

/// perf's symbolic hardware and software names (with perf's aliases) and the
/// generic hwqos name each one is reported as.
pub(crate) const PERF_SYMBOLIC: &[(&str, &str)] = &[
    ("cpu-cycles", names::HW_CYCLES),
    ("cycles", names::HW_CYCLES),
    ("instructions", names::HW_INSTRUCTIONS),
    ("cache-references", names::HW_CACHE_REF),
    ("cache-misses", names::HW_CACHE_MISS),
    ("branch-instructions", names::HW_BRANCHES),
    ("branches", names::HW_BRANCHES),
    ("branch-misses", names::HW_BRANCH_MISS),
    ("bus-cycles", names::HW_BUS_CYCLES),
    ("stalled-cycles-frontend", names::HW_STALLED_CYCLES_FRONTEND),
    ("idle-cycles-frontend", names::HW_STALLED_CYCLES_FRONTEND),
    ("stalled-cycles-backend", names::HW_STALLED_CYCLES_BACKEND),
    ("idle-cycles-backend", names::HW_STALLED_CYCLES_BACKEND),
    ("ref-cycles", names::HW_REF_CYCLES),
    ("cpu-clock", names::SW_CPU_CLOCK),
    ("task-clock", names::SW_TASK_CLOCK),
    ("page-faults", names::SW_PAGE_FAULTS),
    ("faults", names::SW_PAGE_FAULTS),
    ("minor-faults", names::SW_MINOR_FAULTS),
    ("major-faults", names::SW_MAJOR_FAULTS),
    ("context-switches", names::SW_CONTEXT_SWITCHES),
    ("cs", names::SW_CONTEXT_SWITCHES),
    ("cpu-migrations", names::SW_CPU_MIGRATIONS),
    ("migrations", names::SW_CPU_MIGRATIONS),
    ("alignment-faults", names::SW_ALIGNMENT_FAULTS),
    ("emulation-faults", names::SW_EMULATION_FAULTS),
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
            (Cache::L1d, CacheOp::Write, CacheResult::Access) => names::HW_L1D_STORE.to_string(),
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
