//! hwqos's curated per-CPU-model table: the encodings of events the generic perf
//! ABI lacks (L2 accesses and misses) and the counter capacity of models whose
//! capacity cannot be read from the node.
//!
//! Sources:
//! - Intel: Intel SDM vol. 3B ch. 20 ("Performance Monitoring Events") and Intel's
//!   perfmon event lists (github.com/intel/perfmon, mirrored in Linux
//!   `tools/perf/pmu-events/arch/x86/<model>/cache.json`): `L2_RQSTS.REFERENCES`
//!   (event 0x24, umask 0xff) and `L2_RQSTS.MISS` (event 0x24, umask 0x3f) on
//!   Haswell through Ice Lake / Tiger Lake. Counters: 4 general-purpose per
//!   logical CPU with Hyper-Threading on (8 with it off) and 3 fixed before Ice
//!   Lake; 8 general-purpose and 4 fixed from Ice Lake (SDM vol. 3B 20.2/20.3).
//! - AMD Zen (families 17h and 19h): PPR "Processor Programming Reference",
//!   PMCx064 `L2CacheReqStat` (core to L2 cacheable request access status, not
//!   counting L2 prefetches): umask 0xff = all instruction- and data-cache
//!   requests that reached L2, umask 0x09 = `IcFillMiss | LsRdBlkC`, the ones that
//!   missed (perf's `l2_cache_req_stat.ic_dc_miss_in_l2` in
//!   `pmu-events/arch/x86/amdzen*/cache.json`). 6 general-purpose core counters
//!   (`PerfCtrExtCore`), no fixed counters.
//! - Arm: the Armv8 PMUv3 common architectural events (Arm ARM D7.10):
//!   `L2D_CACHE` = 0x16, `L2D_CACHE_REFILL` = 0x17, counted on the core PMU;
//!   Arm Ltd. cores implement 6 event counters (PMCR_EL0.N) plus the cycle counter.

use super::cpu::{CpuModel, Vendor};
use super::generic::CacheResult;

/// An x86 model family's row.
pub(crate) struct X86Row {
    pub table: &'static str,
    pub vendor: Vendor,
    pub families: &'static [u32],
    /// `None`: every model of the families.
    pub models: Option<&'static [u32]>,
    /// (event select, umask) of L2 accesses and L2 misses.
    pub l2_access: (u16, u8),
    pub l2_miss: (u16, u8),
    pub general_purpose: usize,
    pub fixed: usize,
    pub note: &'static str,
}

pub(crate) const X86_ROWS: &[X86Row] = &[
    X86Row {
        table: "intel-haswell-broadwell",
        vendor: Vendor::Intel,
        families: &[6],
        models: Some(&[0x3c, 0x3f, 0x45, 0x46, 0x3d, 0x47, 0x4f, 0x56]),
        l2_access: (0x24, 0xff),
        l2_miss: (0x24, 0x3f),
        general_purpose: 4,
        fixed: 3,
        note: "Intel SDM 3B / perfmon: L2_RQSTS.REFERENCES, L2_RQSTS.MISS; 4 GP counters per thread with HT",
    },
    X86Row {
        table: "intel-skylake",
        vendor: Vendor::Intel,
        families: &[6],
        // Skylake client/server (Cascade/Cooper Lake), Kaby/Coffee/Whiskey/Comet Lake.
        models: Some(&[0x4e, 0x5e, 0x55, 0x8e, 0x9e, 0xa5, 0xa6]),
        l2_access: (0x24, 0xff),
        l2_miss: (0x24, 0x3f),
        general_purpose: 4,
        fixed: 3,
        note: "Intel SDM 3B / perfmon: L2_RQSTS.REFERENCES, L2_RQSTS.MISS; 4 GP counters per thread with HT",
    },
    X86Row {
        table: "intel-icelake",
        vendor: Vendor::Intel,
        families: &[6],
        // Ice Lake client/server, Tiger Lake, Rocket Lake.
        models: Some(&[0x7d, 0x7e, 0x6a, 0x6c, 0x8c, 0x8d, 0xa7]),
        l2_access: (0x24, 0xff),
        l2_miss: (0x24, 0x3f),
        general_purpose: 8,
        fixed: 4,
        note: "Intel SDM 3B / perfmon: L2_RQSTS.REFERENCES, L2_RQSTS.MISS; 8 GP + 4 fixed counters",
    },
    X86Row {
        table: "amd-zen",
        vendor: Vendor::Amd,
        families: &[0x17, 0x19],
        models: None,
        l2_access: (0x64, 0xff),
        l2_miss: (0x64, 0x09),
        general_purpose: 6,
        fixed: 0,
        note: "AMD PPR 17h/19h: PMCx064 L2CacheReqStat; 6 core counters",
    },
];

/// The row for an x86 model, if curated.
pub(crate) fn x86_row(cpu: &CpuModel) -> Option<&'static X86Row> {
    X86_ROWS.iter().find(|row| {
        row.vendor == cpu.vendor
            && row.families.contains(&cpu.family)
            && row.models.is_none_or(|models| models.contains(&cpu.model))
    })
}

/// The (event, umask) of L2 accesses or misses in an x86 row.
pub(crate) fn x86_l2(row: &X86Row, result: CacheResult) -> (u16, u8) {
    match result {
        CacheResult::Access => row.l2_access,
        CacheResult::Miss => row.l2_miss,
    }
}

/// The x86 `PERFEVTSEL` layout of event select and umask: event bits 0-7 go to
/// config bits 0-7, event bits 8-11 (AMD's extended event select) to bits 32-35.
pub(crate) fn x86_raw_config(event: u16, umask: u8) -> u64 {
    let event = u64::from(event);
    (event & 0xff) | (u64::from(umask) << 8) | (((event >> 8) & 0xf) << 32)
}

pub(crate) const ARM_TABLE: &str = "arm-pmuv3";
/// `L2D_CACHE`, `L2D_CACHE_REFILL` and the sysfs alias names the arm_pmuv3 driver
/// gives them.
pub(crate) const ARM_L2D_CACHE: (u64, &str) = (0x16, "l2d_cache");
pub(crate) const ARM_L2D_CACHE_REFILL: (u64, &str) = (0x17, "l2d_cache_refill");

/// Arm Ltd. cores with 6 event counters (PMCR_EL0.N = 6 in each core's TRM).
pub(crate) fn arm_general_purpose(cpu: &CpuModel) -> Option<usize> {
    let known = cpu.implementer == Some(0x41)
        && !cpu.parts.is_empty()
        && cpu
            .parts
            .iter()
            .all(|p| super::cpu::ARM_PARTS.iter().any(|(part, _)| part == p));
    known.then_some(6)
}

/// Human list of what the curated table covers, for "unavailable" reasons.
pub(crate) const COVERAGE: &str =
    "Intel Haswell to Ice Lake/Tiger Lake, AMD Zen (families 17h, 19h), Arm PMUv3 cores";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amd_extended_event_select_goes_to_bits_32_35() {
        assert_eq!(x86_raw_config(0x24, 0x3f), 0x3f24);
        assert_eq!(x86_raw_config(0x1c0, 0x01), 0x1_0000_01c0);
    }
}
