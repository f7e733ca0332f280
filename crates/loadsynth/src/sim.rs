//! A deterministic simulated plant for testing the control logic (tests and
//! experiments only, never the shipped path): the pmu crate's simulated
//! counter backend, read through the same monitor engine and frame
//! conversion as the real source, fed by a plant model of the generators.
//!
//! Plant per CPU: a first-order lag from knob to effect (time constant
//! `lag_s`), a background load, and these gains:
//! - `cpu_util = min(1, background + knob)`;
//! - page faults/s = background + knob; context switches/s = background + 1.9 × knob;
//! - instructions/s (`hw.instructions`) = background + 1.02 × knob (the spin
//!   plus its pacing);
//! - data cache: 1 access/ns; the knobs are the miss ratios asked of L1, L2
//!   and LLC (as for the real generator), turned into stream shares `a, b, c`
//!   that give L1 misses `a+b+c`, L2 misses `b+c`, LLC misses `c` per access;
//!   plus a background of L1 misses per access that also miss L2 (coupling).

use crate::control::KnobSink;
use crate::metric::LoadMetric;
use crate::source::{values_from_frame, Measurement, MetricSource};
use crate::LoadError;
use hwqos_core::metric::names;
use hwqos_core::{Sample, Scope, Timestamp};
use hwqos_pmu::backend::sim::{Script, SimBackend, SimSubject};
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use hwqos_pmu::target::Resolver;
use std::collections::BTreeMap;

const EVENTS: [&str; 9] = [
    names::HW_L1D_ACCESS,
    names::HW_L1D_MISS,
    names::HW_L2_ACCESS,
    names::HW_L2_MISS,
    names::HW_LLC_ACCESS,
    names::HW_LLC_MISS,
    names::SW_PAGE_FAULTS,
    names::SW_CONTEXT_SWITCHES,
    names::HW_INSTRUCTIONS,
];

/// The simulated plant; it is both the metric source and the knob sink.
pub struct SimPlant {
    sim: SimBackend,
    sampler: Sampler,
    cpus: Vec<u32>,
    period_ns: u64,
    /// Time constant of the first-order lag from knob to effect, seconds
    /// (default 0.3).
    pub lag_s: f64,
    knobs: BTreeMap<(LoadMetric, u32), f64>,
    effect: BTreeMap<(LoadMetric, u32), f64>,
    /// Background per (metric, CPU) in the metric's own unit (L1 misses per access for the caches).
    pub background: BTreeMap<(LoadMetric, u32), f64>,
    steps: BTreeMap<(u32, &'static str), Vec<(u64, f64)>>,
}

impl SimPlant {
    /// A plant over `cpus` that advances `period_s` seconds per measurement,
    /// with no background load and no knobs set.
    pub fn new(cpus: &[u32], period_s: f64) -> Result<SimPlant, LoadError> {
        let sim = SimBackend::new(16);
        let cfg = SamplerConfig {
            per_cpu: true,
            cpus: Some(cpus.to_vec()),
            event_sets: vec![EVENTS.iter().map(|e| e.to_string()).collect()],
            rescan_every: 0,
            ..SamplerConfig::default()
        };
        // A fixed CPU model, so the simulated plant has the same events on
        // every node: the curated L2 events exist for AMD Zen 3, and not for a
        // CPU missing from the table (an Intel Xeon model 0xcf, for one).
        let zen3 = hwqos_pmu::catalog::cpu::CpuModel::from_cpuinfo(
            "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n",
        );
        let mut sampler = Sampler::new(
            cfg,
            &Catalog::for_this_node().with_cpu(zen3),
            Box::new(sim.clone()),
            Resolver::for_this_node(),
        )
        .map_err(|e| LoadError::Measure(e.to_string()))?;
        sampler.sample(Timestamp {
            mono_ns: sim.now(),
            wall_ns: 0,
        });
        Ok(SimPlant {
            sim,
            sampler,
            cpus: cpus.to_vec(),
            period_ns: (period_s * 1e9) as u64,
            lag_s: 0.3,
            knobs: BTreeMap::new(),
            effect: BTreeMap::new(),
            background: BTreeMap::new(),
            steps: BTreeMap::new(),
        })
    }

    fn eff(&self, m: LoadMetric, cpu: u32) -> f64 {
        self.effect.get(&(m, cpu)).copied().unwrap_or(0.0)
    }

    fn bg(&self, m: LoadMetric, cpu: u32) -> f64 {
        self.background.get(&(m, cpu)).copied().unwrap_or(0.0)
    }

    /// The current knob of a pair.
    pub fn knob(&self, m: LoadMetric, cpu: u32) -> f64 {
        self.knobs.get(&(m, cpu)).copied().unwrap_or(0.0)
    }
}

impl KnobSink for SimPlant {
    fn set(&mut self, metric: LoadMetric, cpu: u32, value: f64) {
        self.knobs.insert((metric, cpu), value);
    }
}

impl MetricSource for SimPlant {
    fn next(&mut self) -> Result<Measurement, LoadError> {
        let dt = self.period_ns as f64 / 1e9;
        let alpha = 1.0 - (-dt / self.lag_s.max(1e-9)).exp();
        for (k, v) in &self.knobs {
            let e = self.effect.entry(*k).or_insert(0.0);
            *e += (v - *e) * alpha;
        }
        let now = self.sim.now();
        for &cpu in &self.cpus.clone() {
            let (r1, r2, r3) = (
                self.eff(LoadMetric::L1dMissRatio, cpu),
                self.eff(LoadMetric::L2MissRatio, cpu),
                self.eff(LoadMetric::LlcMissRatio, cpu),
            );
            let (a, b, c) = (r1 * (1.0 - r2), r1 * r2 * (1.0 - r3), r1 * r2 * r3);
            let bg = self.bg(LoadMetric::L1dMissRatio, cpu);
            let l1 = (a + b + c + bg).min(1.0);
            let rates = [
                (names::HW_L1D_ACCESS, 1.0),
                (names::HW_L1D_MISS, l1),
                (names::HW_L2_ACCESS, l1),
                (names::HW_L2_MISS, b + c + bg),
                (names::HW_LLC_ACCESS, b + c + bg),
                (names::HW_LLC_MISS, c),
                (
                    names::SW_PAGE_FAULTS,
                    (self.bg(LoadMetric::PageFaultRate, cpu)
                        + self.eff(LoadMetric::PageFaultRate, cpu))
                        / 1e9,
                ),
                (
                    names::SW_CONTEXT_SWITCHES,
                    (self.bg(LoadMetric::ContextSwitchRate, cpu)
                        + 1.9 * self.eff(LoadMetric::ContextSwitchRate, cpu))
                        / 1e9,
                ),
                (
                    names::HW_INSTRUCTIONS,
                    (self.bg(LoadMetric::InstRate, cpu)
                        + 1.02 * self.eff(LoadMetric::InstRate, cpu))
                        / 1e9,
                ),
            ];
            for (event, rate) in rates {
                let steps = self.steps.entry((cpu, event)).or_default();
                steps.push((now, rate.max(0.0)));
                self.sim
                    .script_for(SimSubject::Cpu(cpu), event, Script::Steps(steps.clone()));
            }
        }
        self.sim.advance(self.period_ns);
        let time = Timestamp {
            mono_ns: self.sim.now(),
            wall_ns: 0,
        };
        let mut frame = self.sampler.sample(time);
        for &cpu in &self.cpus {
            let util =
                (self.bg(LoadMetric::CpuUtil, cpu) + self.eff(LoadMetric::CpuUtil, cpu)).min(1.0);
            frame.samples.push(Sample::gauge(
                time,
                Scope::Cpu { cpu },
                hwqos_core::MetricName::from_static(names::OS_CPU_UTIL),
                util,
            ));
        }
        let wanted: Vec<(LoadMetric, u32)> = crate::metric::ALL
            .iter()
            .flat_map(|m| self.cpus.iter().map(move |c| (*m, *c)))
            .collect();
        Ok(Measurement {
            t_ns: time.mono_ns,
            interval_ns: frame.interval_ns,
            values: values_from_frame(&frame, &wanted),
        })
    }
}
