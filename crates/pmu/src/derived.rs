//! Metrics derived from the counts of ONE counter group over ONE interval: IPC
//! and CPI, miss ratios, CPU utilization, per-second rates and a CPI stack
//! (thesis 5.4.2).
//!
//! Mixing counts of different groups or intervals would combine numbers that were
//! not measured at the same time (under rotation, different event sets run in
//! different ticks), so the sampler calls [`derive()`] once per group reading and a
//! ratio is only produced when both of its events are in that group.
//!
//! The CPI stack follows the thesis: each component is the number of misses at a
//! level times the mean penalty of such a miss, per instruction; what is left of
//! the measured CPI is the base (real work plus unattributed stalls). Penalties
//! come from a configurable [`CpiPenalties`] table.

use hwqos_core::metric::names;
use hwqos_core::metric::rate_name;
use hwqos_core::MetricName;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Mean extra cycles one miss costs at each level. Each penalty is the cost
/// *beyond* the next-closer level's hit (an L2 miss that hits the LLC costs the L1
/// penalty plus the L2 penalty), so the components of one access add up.
///
/// The defaults are typical of current x86 server cores (L1 hit ≈ 4–5 cycles,
/// L2 hit ≈ 14, LLC hit ≈ 40–50, DRAM ≈ 200–250 cycles, a TLB miss that walks the
/// page table in cache ≈ 20–30, a branch misprediction ≈ 15–20); replace them
/// with measured values of the node (later: from the hardware model).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CpiPenalties {
    /// An L1 data miss that hits L2.
    pub l1d: f64,
    /// An L1 instruction miss that hits L2.
    pub l1i: f64,
    /// An L2 miss that hits the LLC.
    pub l2: f64,
    /// An LLC miss served by memory.
    pub llc: f64,
    /// A data TLB miss (page walk).
    pub dtlb: f64,
    /// An instruction TLB miss (page walk).
    pub itlb: f64,
    /// A mispredicted branch (pipeline flush).
    pub branch: f64,
}

impl Default for CpiPenalties {
    fn default() -> Self {
        CpiPenalties {
            l1d: 10.0,
            l1i: 10.0,
            l2: 30.0,
            llc: 180.0,
            dtlb: 25.0,
            itlb: 25.0,
            branch: 17.0,
        }
    }
}

impl CpiPenalties {
    /// `(component metric, miss event metric, penalty)` for every level.
    fn levels(&self) -> [(&'static str, &'static str, f64); 7] {
        [
            (names::DERIVED_CPI_L1D, names::HW_L1D_MISS, self.l1d),
            (names::DERIVED_CPI_L1I, names::HW_L1I_MISS, self.l1i),
            (names::DERIVED_CPI_L2, names::HW_L2_MISS, self.l2),
            (names::DERIVED_CPI_LLC, names::HW_LLC_MISS, self.llc),
            (names::DERIVED_CPI_DTLB, names::HW_DTLB_MISS, self.dtlb),
            (names::DERIVED_CPI_ITLB, names::HW_ITLB_MISS, self.itlb),
            (
                names::DERIVED_CPI_BRANCH,
                names::HW_BRANCH_MISS,
                self.branch,
            ),
        ]
    }

    /// Rejects negative or non-finite penalties.
    pub fn validate(&self) -> Result<(), String> {
        for (component, _, p) in self.levels() {
            if !p.is_finite() || p < 0.0 {
                return Err(format!(
                    "CPI penalty for {} must be a non-negative number of cycles, got {p}",
                    component.trim_start_matches("derived.cpi.")
                ));
            }
        }
        Ok(())
    }
}

/// A CPI stack: the measured CPI split into a base and per-level miss components.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpiStack {
    /// The measured cycles per instruction.
    pub cpi: f64,
    /// What is not attributed to misses: `cpi − Σ components`, never negative.
    pub base: f64,
    /// `derived.cpi.<level>` and its share of the CPI, for the levels whose miss
    /// event was counted.
    pub components: Vec<(MetricName, f64)>,
    /// True when the penalty estimates added up to more than the measured CPI
    /// and the components were scaled down proportionally to fit it.
    pub scaled_down: bool,
}

/// Builds the CPI stack from one group's counts (keyed by metric name).
///
/// Returns `None` without instructions or cycles, or when no miss event of any
/// level is in `counts`. The components never exceed the measured CPI: if the
/// penalty estimates add up to more, all components are scaled down by the same
/// factor so that they sum to the CPI and the base is 0 (and `scaled_down` says so).
pub fn cpi_stack(
    counts: &HashMap<MetricName, f64>,
    instructions: f64,
    cycles: f64,
    p: &CpiPenalties,
) -> Option<CpiStack> {
    if !(instructions > 0.0 && cycles > 0.0) {
        return None;
    }
    let cpi = cycles / instructions;
    let mut components: Vec<(MetricName, f64)> = p
        .levels()
        .iter()
        .filter_map(|&(component, miss, penalty)| {
            let misses = counts.get(&MetricName::from_static(miss))?;
            Some((
                MetricName::from_static(component),
                misses.max(0.0) * penalty / instructions,
            ))
        })
        .collect();
    if components.is_empty() {
        return None;
    }
    let attributed: f64 = components.iter().map(|(_, v)| v).sum();
    let scaled_down = attributed > cpi;
    if scaled_down {
        let factor = cpi / attributed;
        for (_, v) in &mut components {
            *v *= factor;
        }
    }
    let attributed: f64 = components.iter().map(|(_, v)| v).sum();
    Some(CpiStack {
        cpi,
        base: (cpi - attributed).max(0.0),
        components,
        scaled_down,
    })
}

const MISS_RATIOS: &[(&str, &str, &str)] = &[
    (
        names::DERIVED_L1D_MISS_RATIO,
        names::HW_L1D_MISS,
        names::HW_L1D_ACCESS,
    ),
    (
        names::DERIVED_L2_MISS_RATIO,
        names::HW_L2_MISS,
        names::HW_L2_ACCESS,
    ),
    (
        names::DERIVED_LLC_MISS_RATIO,
        names::HW_LLC_MISS,
        names::HW_LLC_ACCESS,
    ),
    (
        names::DERIVED_DTLB_MISS_RATIO,
        names::HW_DTLB_MISS,
        names::HW_DTLB_ACCESS,
    ),
    (
        names::DERIVED_BRANCH_MISS_RATIO,
        names::HW_BRANCH_MISS,
        names::HW_BRANCHES,
    ),
];

/// Everything derivable from one group's (scaled) counts over an interval of
/// `interval_ns`: rates per second for every counter, IPC/CPI, miss ratios,
/// CPU utilization (`sw.task_clock` / interval; may exceed 1 for processes with
/// several running threads; meaningless over a whole CPU, whose clock also
/// runs while it idles, so the sampler drops it for CPU scopes) and the CPI stack components. Ratios whose
/// denominator is zero are left out rather than reported as 0 or infinity.
pub fn derive(
    counts: &HashMap<MetricName, f64>,
    interval_ns: u64,
    penalties: &CpiPenalties,
) -> Vec<(MetricName, f64)> {
    let get = |name: &'static str| counts.get(&MetricName::from_static(name)).copied();
    let mut out = Vec::new();
    if interval_ns > 0 {
        let secs = interval_ns as f64 / 1e9;
        let mut names: Vec<&MetricName> = counts.keys().collect();
        names.sort();
        for name in names {
            out.push((rate_name(name), counts[name] / secs));
        }
        if let Some(task_clock) = get(names::SW_TASK_CLOCK) {
            out.push((
                MetricName::from_static(names::DERIVED_CPU_UTILIZATION),
                task_clock / interval_ns as f64,
            ));
        }
    }
    if let (Some(instructions), Some(cycles)) = (get(names::HW_INSTRUCTIONS), get(names::HW_CYCLES))
    {
        if cycles > 0.0 {
            out.push((
                MetricName::from_static(names::DERIVED_IPC),
                instructions / cycles,
            ));
        }
        if instructions > 0.0 {
            out.push((
                MetricName::from_static(names::DERIVED_CPI),
                cycles / instructions,
            ));
        }
        if let Some(stack) = cpi_stack(counts, instructions, cycles, penalties) {
            out.push((MetricName::from_static(names::DERIVED_CPI_BASE), stack.base));
            out.extend(stack.components);
        }
    }
    for &(ratio, miss, access) in MISS_RATIOS {
        if let (Some(m), Some(a)) = (get(miss), get(access)) {
            if a > 0.0 {
                out.push((MetricName::from_static(ratio), m / a));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&'static str, f64)]) -> HashMap<MetricName, f64> {
        pairs
            .iter()
            .map(|&(n, v)| (MetricName::from_static(n), v))
            .collect()
    }

    fn find(out: &[(MetricName, f64)], name: &str) -> Option<f64> {
        out.iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, v)| *v)
    }

    #[test]
    fn ipc_ratios_rates_and_utilization() {
        let c = counts(&[
            ("hw.instructions", 2_000.0),
            ("hw.cycles", 1_000.0),
            ("hw.l1d.miss", 50.0),
            ("hw.l1d.access", 500.0),
            ("hw.branches", 0.0),
            ("hw.branch.miss", 0.0),
            ("sw.task_clock", 250_000_000.0),
        ]);
        let out = derive(&c, 500_000_000, &CpiPenalties::default());
        assert_eq!(find(&out, "derived.ipc"), Some(2.0));
        assert_eq!(find(&out, "derived.cpi"), Some(0.5));
        assert_eq!(find(&out, "derived.l1d.miss_ratio"), Some(0.1));
        assert_eq!(
            find(&out, "derived.branch.miss_ratio"),
            None,
            "0/0 is not a ratio"
        );
        assert_eq!(find(&out, "derived.cpu_utilization"), Some(0.5));
        assert_eq!(find(&out, "derived.rate.hw.cycles"), Some(2_000.0));
        assert_eq!(find(&out, "derived.llc.miss_ratio"), None);
    }

    #[test]
    fn nothing_derived_across_missing_events_or_empty_interval() {
        let c = counts(&[("hw.cycles", 1_000.0)]);
        let out = derive(&c, 0, &CpiPenalties::default());
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn cpi_stack_attributes_misses() {
        let p = CpiPenalties {
            l1d: 10.0,
            llc: 100.0,
            ..CpiPenalties::default()
        };
        // CPI 2.0; l1d: 100 misses × 10 / 1000 = 1.0; llc: 5 × 100 / 1000 = 0.5.
        let c = counts(&[("hw.l1d.miss", 100.0), ("hw.llc.miss", 5.0)]);
        let s = cpi_stack(&c, 1_000.0, 2_000.0, &p).unwrap();
        assert_eq!(s.cpi, 2.0);
        assert_eq!(s.components.len(), 2);
        assert!((s.components[0].1 - 1.0).abs() < 1e-12);
        assert!((s.components[1].1 - 0.5).abs() < 1e-12);
        assert!((s.base - 0.5).abs() < 1e-12);
        assert!(!s.scaled_down);
    }

    #[test]
    fn cpi_stack_never_exceeds_measured_cpi() {
        // Estimates: l1d 3.0 + branch 1.0 = 4.0 per instruction, but CPI is only 2.0.
        let p = CpiPenalties {
            l1d: 30.0,
            branch: 10.0,
            ..CpiPenalties::default()
        };
        let c = counts(&[("hw.l1d.miss", 100.0), ("hw.branch.miss", 100.0)]);
        let s = cpi_stack(&c, 1_000.0, 2_000.0, &p).unwrap();
        assert!(s.scaled_down);
        assert_eq!(s.base, 0.0);
        let sum: f64 = s.components.iter().map(|(_, v)| v).sum();
        assert!((sum - 2.0).abs() < 1e-12);
        assert!(
            (s.components[0].1 / s.components[1].1 - 3.0).abs() < 1e-12,
            "proportions kept"
        );
        assert!(cpi_stack(&c, 0.0, 2_000.0, &p).is_none());
        assert!(cpi_stack(&counts(&[]), 1_000.0, 2_000.0, &p).is_none());
    }

    #[test]
    fn penalties_serde_and_validation() {
        let p: CpiPenalties = toml::from_str("llc = 250.0").unwrap();
        assert_eq!(p.llc, 250.0);
        assert_eq!(p.l1d, CpiPenalties::default().l1d);
        assert!(toml::from_str::<CpiPenalties>("l4 = 1.0").is_err());
        let bad = CpiPenalties {
            dtlb: -1.0,
            ..CpiPenalties::default()
        };
        assert!(bad.validate().unwrap_err().contains("dtlb"));
    }
}
