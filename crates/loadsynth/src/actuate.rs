//! Starting, steering and stopping the generators for a set of (metric, CPU)
//! pairs: one thread (or two, for context switches) per generator and CPU,
//! one [`Knob`] per pair, clamped to the pair's range from the safety caps.
//! Stopping sets the shared flag and joins every thread; each checks the flag
//! at least every ~10 ms and frees its memory on return.

use crate::config::LoadConfig;
use crate::generator::{self, dcache, Context};
use crate::knob::{Knob, StopFlag, WorkCounter};
use crate::metric::LoadMetric;
use crate::LoadError;
use std::collections::BTreeMap;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The data-cache levels of the node: L1D, L2, LLC (shallowest first).
#[derive(Clone, Debug, PartialEq)]
pub struct CacheLevels {
    /// Each level's miss-ratio metric and geometry, shallowest first; only
    /// levels whose size, ways and line size are all known.
    pub levels: Vec<(LoadMetric, dcache::Geometry)>,
}

impl CacheLevels {
    /// From a topology: the data caches of `cpu` with full geometry.
    pub fn of(topology: &hwqos_topology::Topology, cpu: u32) -> CacheLevels {
        let mut levels = Vec::new();
        for (lvl, metric) in [
            (1, LoadMetric::L1dMissRatio),
            (2, LoadMetric::L2MissRatio),
            (3, LoadMetric::LlcMissRatio),
        ] {
            if let Some(g) = topology.cache_of(cpu, lvl).and_then(dcache::Geometry::of) {
                levels.push((metric, g));
            }
        }
        CacheLevels { levels }
    }

    /// The line size in bytes of the shallowest level (64 when no level is
    /// known).
    pub fn line_size(&self) -> usize {
        self.levels
            .first()
            .map_or(64, |(_, g)| g.line_size as usize)
    }

    /// The size in bytes of the deepest level (32 MiB when no level is
    /// known).
    pub fn llc_bytes(&self) -> u64 {
        self.levels.last().map_or(32 << 20, |(_, g)| g.size_bytes)
    }
}

/// Pages of the page-fault generator per CPU (4 MiB with 4 KiB pages).
const FAULT_PAGES: usize = 1024;
/// Pages of the TLB generator per CPU.
const TLB_PAGES: usize = 4096;

struct Running {
    name: String,
    handle: JoinHandle<std::io::Result<()>>,
}

/// Running generators and their knobs.
pub struct Actuators {
    stop: StopFlag,
    threads: Vec<Running>,
    knobs: BTreeMap<(LoadMetric, u32), Knob>,
    ranges: BTreeMap<(LoadMetric, u32), (f64, f64)>,
    work: BTreeMap<(LoadMetric, u32), WorkCounter>,
    nice: Option<i32>,
    siblings: BTreeMap<u32, generator::Siblings>,
}

/// Sets the calling thread's nice value.
fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    let tid = nix::unistd::gettid().as_raw();
    // SAFETY: setpriority on this thread's id; no memory is passed.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(
            e.kind(),
            format!("setting nice {nice} (negative values need CAP_SYS_NICE): {e}"),
        ));
    }
    Ok(())
}

/// The knob range of a metric's generator under `cfg`'s caps.
pub fn knob_range(metric: LoadMetric, cfg: &LoadConfig) -> (f64, f64) {
    let c = &cfg.caps;
    match metric {
        LoadMetric::CpuUtil => (0.0, c.max_cpu_share),
        LoadMetric::PageFaultRate => (0.0, c.max_fault_rate),
        LoadMetric::ContextSwitchRate => (0.0, c.max_switch_rate),
        LoadMetric::MemBandwidth => (0.0, c.max_mem_bandwidth),
        LoadMetric::IoWriteRate => (0.0, c.max_io_rate),
        LoadMetric::InstRate => (0.0, c.max_inst_rate),
        _ => (0.0, 1.0),
    }
}

/// The configuration key that bounds a metric's knob (`None`: a share, 0..=1).
pub fn knob_cap_key(metric: LoadMetric) -> Option<&'static str> {
    match metric {
        LoadMetric::CpuUtil => Some("caps.max_cpu_share"),
        LoadMetric::PageFaultRate => Some("caps.max_fault_rate"),
        LoadMetric::ContextSwitchRate => Some("caps.max_switch_rate"),
        LoadMetric::MemBandwidth => Some("caps.max_mem_bandwidth"),
        LoadMetric::IoWriteRate => Some("caps.max_io_rate"),
        LoadMetric::InstRate => Some("caps.max_inst_rate"),
        _ => None,
    }
}

/// Checks a knob given by hand (`generate --knob`) against its range:
/// out of range is an error naming the value and the bound, not a silent clamp.
pub fn check_knob(metric: LoadMetric, value: f64, cfg: &LoadConfig) -> Result<(), String> {
    let (lo, hi) = knob_range(metric, cfg);
    if value.is_finite() && (lo..=hi).contains(&value) {
        return Ok(());
    }
    let bound = match knob_cap_key(metric) {
        Some(key) => format!("{key} = {hi}"),
        None => "a share of accesses".into(),
    };
    Err(format!(
        "knob {value} for {metric} is out of range: it must lie in {lo}..={hi} ({bound})"
    ))
}

/// Memory a generator for `metric` uses on one CPU.
fn memory_of(metric: LoadMetric, caches: &CacheLevels, cfg: &LoadConfig) -> u64 {
    let page = generator::faults::page_size() as u64;
    match metric {
        LoadMetric::PageFaultRate => FAULT_PAGES as u64 * page,
        LoadMetric::DtlbMissRatio => {
            if cfg.tlb_huge_pages {
                (TLB_PAGES as u64 / 8) * (2 << 20)
            } else {
                TLB_PAGES as u64 * page
            }
        }
        LoadMetric::MemBandwidth => 2 * caches.llc_bytes(),
        LoadMetric::L1dMissRatio | LoadMetric::L2MissRatio | LoadMetric::LlcMissRatio => {
            // Touched lines only; with huge pages each touched page is 2 MiB.
            64 * (2 << 20)
        }
        _ => 0,
    }
}

impl Actuators {
    /// Starts the generators for `pairs` on `caches`'s geometry with every
    /// knob at `initial` (clamped to its range). Fails before starting anything
    /// when a metric has no generator on this node or the memory cap would be
    /// exceeded.
    pub fn start(
        pairs: &[((LoadMetric, u32), f64)],
        caches: &CacheLevels,
        cfg: &LoadConfig,
    ) -> Result<Actuators, LoadError> {
        Actuators::start_with_stop(pairs, caches, cfg, StopFlag::new())
    }

    /// Like [`Actuators::start`], stopped by the caller's `stop` flag:
    /// setting it (from a signal thread, or an embedding service's shutdown)
    /// stops every generator within its ~10 ms slice, and stopping the
    /// actuators sets it. A flag stops one run: give each run a new one.
    pub fn start_with_stop(
        pairs: &[((LoadMetric, u32), f64)],
        caches: &CacheLevels,
        cfg: &LoadConfig,
        stop: StopFlag,
    ) -> Result<Actuators, LoadError> {
        cfg.caps
            .validate()
            .map_err(|e| LoadError::Config(e.to_string()))?;
        // Memory check first.
        let mut memory = 0u64;
        let mut dcache_cpus = std::collections::BTreeSet::new();
        for ((m, cpu), _) in pairs {
            if m.depth() > 0 {
                if !caches.levels.iter().any(|(l, _)| l == m) {
                    return Err(LoadError::Unsupported(format!(
                        "{m}: this node's topology has no complete geometry for that cache level"
                    )));
                }
                if !dcache_cpus.insert(*cpu) {
                    continue;
                }
            }
            memory += memory_of(*m, caches, cfg);
        }
        if memory > cfg.caps.max_memory_bytes {
            return Err(LoadError::Cap(format!(
                "the generators need {} MiB but caps.max_memory_bytes allows {} MiB",
                memory >> 20,
                cfg.caps.max_memory_bytes >> 20
            )));
        }
        let mut act = Actuators {
            stop: stop.clone(),
            threads: Vec::new(),
            knobs: BTreeMap::new(),
            ranges: BTreeMap::new(),
            work: BTreeMap::new(),
            nice: None,
            siblings: BTreeMap::new(),
        };
        for ((m, cpu), initial) in pairs {
            let range = knob_range(*m, cfg);
            act.ranges.insert((*m, *cpu), range);
            act.knobs
                .insert((*m, *cpu), Knob::new(initial.clamp(range.0, range.1)));
        }
        if let Some(n) = cfg.nice {
            if !(-20..=19).contains(&n) {
                return Err(LoadError::Config(format!(
                    "nice = {n}: must lie in -20..=19"
                )));
            }
        }
        act.nice = cfg.nice;
        // Data-cache: one thread per CPU with one knob per level.
        for cpu in &dcache_cpus {
            // A level without a target passes every read on (ratio 1) when a
            // deeper level has one, and adds no misses (0) otherwise.
            let deepest = caches
                .levels
                .iter()
                .rposition(|(m, _)| act.knobs.contains_key(&(*m, *cpu)))
                .unwrap_or(0);
            let knobs: Vec<Knob> = caches
                .levels
                .iter()
                .enumerate()
                .map(|(i, (m, _))| {
                    act.knobs
                        .get(&(*m, *cpu))
                        .cloned()
                        .unwrap_or_else(|| Knob::new(if i < deepest { 1.0 } else { 0.0 }))
                })
                .collect();
            let geoms: Vec<dcache::Geometry> = caches.levels.iter().map(|(_, g)| *g).collect();
            let plan = dcache::Plan::new(&geoms).map_err(LoadError::Unsupported)?;
            let ctx = act.context(*cpu, None);
            act.spawn(format!("dcache-{cpu}"), ctx, move |ctx| {
                dcache::run(ctx, plan, &knobs)
            })?;
        }
        for ((m, cpu), _) in pairs {
            if m.depth() > 0 {
                continue;
            }
            let knob = act.knobs[&(*m, *cpu)].clone();
            let ctx = act.context(*cpu, Some(*m));
            let name = format!("{m}-{cpu}");
            match m {
                LoadMetric::CpuUtil => act.spawn(name, ctx, move |c| {
                    generator::cpu::run(c, &knob);
                    Ok(())
                })?,
                LoadMetric::PageFaultRate => act.spawn(name, ctx, move |c| {
                    generator::faults::run(c, &knob, FAULT_PAGES)
                })?,
                LoadMetric::ContextSwitchRate => {
                    act.spawn(name, ctx, move |c| generator::switches::run(c, &knob))?
                }
                LoadMetric::InstRate => {
                    let share = cfg.caps.max_cpu_share;
                    act.spawn(name, ctx, move |c| {
                        generator::inst::run(c, &knob, share);
                        Ok(())
                    })?
                }
                LoadMetric::L1iMissRatio | LoadMetric::ItlbMissRatio => {
                    act.spawn(name, ctx, move |c| {
                        generator::icache::run(c, &knob);
                        Ok(())
                    })?
                }
                LoadMetric::DtlbMissRatio => {
                    let huge = cfg.tlb_huge_pages;
                    let pages = if huge { TLB_PAGES / 8 } else { TLB_PAGES };
                    act.spawn(name, ctx, move |c| {
                        generator::tlb::run(c, &knob, pages, huge)
                    })?
                }
                LoadMetric::BranchMissRatio => act.spawn(name, ctx, move |c| {
                    generator::branch::run(c, &knob);
                    Ok(())
                })?,
                LoadMetric::MemBandwidth => {
                    let bytes = 2 * caches.llc_bytes() as usize;
                    let line = caches.line_size();
                    act.spawn(name, ctx, move |c| {
                        generator::membw::run(c, &knob, bytes, line)
                    })?
                }
                LoadMetric::IoWriteRate => {
                    let io = cfg.io.clone();
                    let max = cfg.caps.max_io_bytes;
                    act.spawn(name, ctx, move |c| generator::io::run(c, &knob, &io, max))?
                }
                _ => unreachable!("cache levels handled above"),
            }
        }
        // The context-switch generator starts a partner thread.
        let partners = pairs
            .iter()
            .filter(|((m, _), _)| *m == LoadMetric::ContextSwitchRate)
            .count();
        act.wait_until_registered(act.threads.len() + partners);
        Ok(act)
    }

    /// Waits until `expected` generator threads have registered (each does
    /// first thing), or one has ended. A measurement of this process started
    /// next lists its threads once and follows only what those create later,
    /// so a partner thread created while it attaches would go uncounted (a
    /// replay then measured 74 % more context switches than its synthesis).
    fn wait_until_registered(&self, expected: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            let registered: usize = self.siblings.values().map(|s| s.list().len()).sum();
            if registered >= expected || self.threads.iter().any(|t| t.handle.is_finished()) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        tracing::warn!("not every generator thread started within 5 s");
    }

    fn context(&mut self, cpu: u32, metric: Option<LoadMetric>) -> Context {
        let done = WorkCounter::default();
        if let Some(m) = metric {
            self.work.insert((m, cpu), done.clone());
        }
        Context {
            cpu,
            stop: self.stop.clone(),
            done,
            siblings: self.siblings.entry(cpu).or_default().clone(),
        }
    }

    fn spawn(
        &mut self,
        name: String,
        ctx: Context,
        body: impl FnOnce(&Context) -> std::io::Result<()> + Send + 'static,
    ) -> Result<(), LoadError> {
        let nice = self.nice;
        let handle = std::thread::Builder::new()
            .name(format!("loadgen-{name}"))
            .spawn(move || {
                generator::pin_to_cpu(ctx.cpu)?;
                if let Some(n) = nice {
                    set_thread_nice(n)?;
                }
                ctx.siblings.register_self();
                body(&ctx)
            })
            .map_err(|e| LoadError::Io(format!("starting generator {name}"), e))?;
        self.threads.push(Running { name, handle });
        Ok(())
    }

    /// The knob of a pair, if it was started.
    pub fn knob(&self, metric: LoadMetric, cpu: u32) -> Option<&Knob> {
        self.knobs.get(&(metric, cpu))
    }

    /// The knob range of a pair.
    pub fn range(&self, metric: LoadMetric, cpu: u32) -> Option<(f64, f64)> {
        self.ranges.get(&(metric, cpu)).copied()
    }

    /// Work done so far by a pair's generator (bytes for I/O and memory
    /// bandwidth, events for rates).
    pub fn work_done(&self, metric: LoadMetric, cpu: u32) -> Option<u64> {
        self.work.get(&(metric, cpu)).map(|w| w.total())
    }

    /// The shared stop flag (set it from a signal handler to stop everything).
    pub fn stop_flag(&self) -> StopFlag {
        self.stop.clone()
    }

    /// Whether a generator thread ended on its own (an error, or the I/O cap).
    pub fn finished(&self) -> Vec<String> {
        self.threads
            .iter()
            .filter(|r| r.handle.is_finished())
            .map(|r| r.name.clone())
            .collect()
    }

    /// Stops every generator and waits for all of them; returns how long
    /// stopping took and the first generator error.
    pub fn stop(mut self) -> Result<Duration, LoadError> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<Duration, LoadError> {
        let t = Instant::now();
        self.stop.stop();
        let mut first = None;
        for r in self.threads.drain(..) {
            match r.handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first.get_or_insert(LoadError::Io(format!("generator {}", r.name), e));
                }
                Err(_) => {
                    first
                        .get_or_insert(LoadError::Config(format!("generator {} panicked", r.name)));
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(t.elapsed()),
        }
    }
}

impl Drop for Actuators {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}
