//! Where measurements come from: the [`MetricSource`] trait, with the shipped
//! in-process implementation ([`LocalSource`]: per-CPU perf_event counters
//! through the monitor engine, and `/proc/stat` for utilization), the
//! monitor's live API ([`MonitorSource`]) and, for tests, a simulated plant
//! (`crate::sim`). Every source measures the **whole CPU** (all tasks on it),
//! so a controller tops up a background load instead of doubling it.

use crate::metric::{Formula, LoadMetric};
use crate::LoadError;
use hwqos_core::metric::names;
use hwqos_core::{Frame, Scope};
use hwqos_pmu::procfs::{parse_proc_stat, CpuTimes};
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use std::collections::BTreeMap;
use std::time::Duration;

/// The values of one measurement interval, per (metric, CPU).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measurement {
    /// End of the interval (monotonic ns).
    pub t_ns: u64,
    /// Length of the interval, ns.
    pub interval_ns: u64,
    /// Each measured metric's value on each CPU, in the metric's unit
    /// ([`LoadMetric`]); a pair absent from the map was not measured.
    pub values: BTreeMap<(LoadMetric, u32), f64>,
}

/// A source of per-CPU measurements.
pub trait MetricSource {
    /// Blocks until the next interval ends and returns what was measured in
    /// it (a metric may be absent in an interval, e.g. while its counter set
    /// is not the one being counted).
    fn next(&mut self) -> Result<Measurement, LoadError>;
}

/// The (metric, CPU) values a frame holds for `wanted`.
pub fn values_from_frame(
    frame: &Frame,
    wanted: &[(LoadMetric, u32)],
) -> BTreeMap<(LoadMetric, u32), f64> {
    let secs = frame.interval_ns as f64 / 1e9;
    let find = |cpu: u32, name: &str| {
        frame.samples.iter().find_map(|s| {
            (s.scope == Scope::Cpu { cpu } && s.metric.as_str() == name).then_some(s.value)
        })
    };
    let mut out = BTreeMap::new();
    for &(m, cpu) in wanted {
        let v = match m.formula() {
            Formula::Gauge(name) => find(cpu, name),
            Formula::Rate(name) if secs > 0.0 => find(cpu, name).map(|v| v / secs),
            Formula::Rate(_) => None,
            Formula::Ratio(n, d) => match (find(cpu, n), find(cpu, d)) {
                (Some(n), Some(d)) if d > 0.0 => Some(n / d),
                _ => None,
            },
            Formula::SelfReported => None,
        };
        if let Some(v) = v {
            out.insert((m, cpu), v);
        }
    }
    out
}

/// What a measurement covers.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum MeasureOn {
    /// Everything on each CPU (the shipped default).
    #[default]
    WholeCpu,
    /// Only these processes (with all their threads, present and future), all
    /// attributed to the one CPU of the wanted pairs. For shared nodes where
    /// other tenants' load must not count: list the generator's own process
    /// and the background load that is to be topped up.
    Processes(Vec<u32>),
}

/// Metrics summed over processes and re-labelled as one CPU's.
const PROCESS_SUMS: [&str; 9] = [
    names::SW_TASK_CLOCK,
    names::SW_PAGE_FAULTS,
    names::SW_CONTEXT_SWITCHES,
    names::HW_L1D_MISS,
    names::HW_L1D_ACCESS,
    names::HW_LLC_MISS,
    names::HW_LLC_ACCESS,
    names::HW_BRANCH_MISS,
    names::HW_INSTRUCTIONS,
];

/// A frame whose process scopes (those in `pids`, or all when empty) are
/// summed into scope `cpu:N`, with `os.cpu.util` from `sw.task_clock` over
/// the interval: the load of a set of processes pinned to one CPU.
pub fn processes_as_cpu(frame: &Frame, pids: &[u32], cpu: u32) -> Frame {
    let mut sums: BTreeMap<&str, f64> = BTreeMap::new();
    for s in &frame.samples {
        if let Scope::Process { pid } = s.scope {
            if pids.is_empty() || pids.contains(&pid) {
                if let Some(name) = PROCESS_SUMS.iter().find(|n| **n == s.metric.as_str()) {
                    *sums.entry(name).or_default() += s.value;
                }
            }
        }
    }
    let mut out = Frame {
        samples: Vec::new(),
        ..frame.clone()
    };
    for (name, v) in &sums {
        out.samples.push(hwqos_core::Sample::gauge(
            frame.time,
            Scope::Cpu { cpu },
            hwqos_core::MetricName::from_static(name),
            *v,
        ));
    }
    if let Some(tc) = sums.get(names::SW_TASK_CLOCK) {
        if frame.interval_ns > 0 {
            out.samples.push(hwqos_core::Sample::gauge(
                frame.time,
                Scope::Cpu { cpu },
                hwqos_core::MetricName::from_static(names::OS_CPU_UTIL),
                (tc / frame.interval_ns as f64).clamp(0.0, 1.0),
            ));
        }
    }
    out
}

/// Per-CPU busy share from two `/proc/stat` readings and the wall time between them.
fn busy_share(prev: &CpuTimes, now: &CpuTimes, wall_ns: u64, clk_tck: f64) -> f64 {
    let d = now.delta_since(prev);
    let idle_ns = (d.idle + d.iowait) as f64 * 1e9 / clk_tck;
    (1.0 - idle_ns / wall_ns as f64).clamp(0.0, 1.0)
}

/// A wall interval (ns) and the busy share of each CPU over it.
type BusyShares = (u64, BTreeMap<u32, f64>);

/// The shipped source: the monitor engine over perf_event counting each
/// wanted CPU (software events here; hardware events where a PMU exists),
/// and `/proc/stat` idle time over the exact wall interval for utilization.
pub struct LocalSource {
    sampler: Option<Sampler>,
    on: MeasureOn,
    wanted: Vec<(LoadMetric, u32)>,
    ticker: hwqos_core::Ticker,
    prev_stat: Option<(u64, BTreeMap<u32, CpuTimes>)>,
    clk_tck: f64,
}

impl LocalSource {
    /// Opens counters for `wanted` and measures every `period`. Metrics whose
    /// events this node cannot count are an error naming them.
    pub fn new(wanted: &[(LoadMetric, u32)], period: Duration) -> Result<LocalSource, LoadError> {
        LocalSource::measuring(wanted, period, MeasureOn::WholeCpu)
    }

    /// Like [`LocalSource::new`], measuring what `on` says.
    pub fn measuring(
        wanted: &[(LoadMetric, u32)],
        period: Duration,
        on: MeasureOn,
    ) -> Result<LocalSource, LoadError> {
        let mut events: Vec<String> = Vec::new();
        if let MeasureOn::Processes(pids) = &on {
            let cpus: std::collections::BTreeSet<u32> = wanted.iter().map(|w| w.1).collect();
            if cpus.len() > 1 {
                return Err(LoadError::Config(format!(
                    "measuring processes {pids:?} attributes them to one CPU, but the targets are on CPUs {cpus:?}"
                )));
            }
            events.push(names::SW_TASK_CLOCK.into());
        }
        for (m, _) in wanted {
            for e in m.events() {
                if !events.iter().any(|x| x == e) {
                    events.push(e.to_string());
                }
            }
        }
        let cpus: Vec<u32> = {
            let mut c: Vec<u32> = wanted.iter().map(|w| w.1).collect();
            c.sort_unstable();
            c.dedup();
            c
        };
        let sampler = if events.is_empty() {
            None
        } else {
            let cfg = match &on {
                MeasureOn::WholeCpu => SamplerConfig {
                    per_cpu: true,
                    cpus: Some(cpus),
                    event_sets: vec![events],
                    rescan_every: 0,
                    ..SamplerConfig::default()
                },
                MeasureOn::Processes(pids) => SamplerConfig {
                    targets: pids
                        .iter()
                        .map(|p| hwqos_pmu::target::TargetSelector::Pid(*p))
                        .collect(),
                    event_sets: vec![events],
                    rescan_every: 0,
                    ..SamplerConfig::default()
                },
            };
            let s = Sampler::for_this_node(cfg).map_err(|e| LoadError::Measure(e.to_string()))?;
            if !s.unavailable().is_empty() {
                let names: Vec<String> = s
                    .unavailable()
                    .iter()
                    .map(|u| format!("{} ({})", u.name, u.reason))
                    .collect();
                return Err(LoadError::Unsupported(format!(
                    "this node cannot count {}",
                    names.join(", ")
                )));
            }
            Some(s)
        };
        // SAFETY: sysconf has no preconditions.
        let clk = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let mut src = LocalSource {
            sampler,
            on,
            wanted: wanted.to_vec(),
            // Absolute sleeps: spinning would add CPU load to what is measured.
            ticker: hwqos_core::Ticker::new(period)
                .map_err(|e| LoadError::Config(format!("measurement period: {e}")))?
                .with_strategy(hwqos_core::SleepStrategy::Absolute),
            prev_stat: None,
            clk_tck: if clk > 0 { clk as f64 } else { 100.0 },
        };
        src.read_stat()?;
        if let Some(s) = src.sampler.as_mut() {
            s.sample(hwqos_core::Timestamp::now());
        }
        Ok(src)
    }

    /// The wall interval since the previous reading and each CPU's busy share in it.
    fn read_stat(&mut self) -> Result<Option<BusyShares>, LoadError> {
        let now = hwqos_core::time::monotonic_ns();
        let text = std::fs::read_to_string("/proc/stat")
            .map_err(|e| LoadError::Io("reading /proc/stat".into(), e))?;
        let stat = parse_proc_stat(&text).map_err(|e| LoadError::Measure(e.to_string()))?;
        let cpus: BTreeMap<u32, CpuTimes> = stat.cpus.into_iter().collect();
        let out = self.prev_stat.as_ref().map(|(t, prev)| {
            let wall = now.saturating_sub(*t).max(1);
            let shares = cpus
                .iter()
                .filter_map(|(cpu, c)| {
                    prev.get(cpu)
                        .map(|p| (*cpu, busy_share(p, c, wall, self.clk_tck)))
                })
                .collect();
            (wall, shares)
        });
        self.prev_stat = Some((now, cpus));
        Ok(out)
    }
}

impl MetricSource for LocalSource {
    fn next(&mut self) -> Result<Measurement, LoadError> {
        self.ticker.wait();
        let time = hwqos_core::Timestamp::now();
        let mut m = Measurement {
            t_ns: time.mono_ns,
            ..Measurement::default()
        };
        if let Some(s) = self.sampler.as_mut() {
            let mut frame = s.sample(time);
            if let (MeasureOn::Processes(pids), Some((_, cpu))) = (&self.on, self.wanted.first()) {
                frame = processes_as_cpu(&frame, pids, *cpu);
            }
            m.interval_ns = frame.interval_ns;
            m.values = values_from_frame(&frame, &self.wanted);
        }
        let stat = self.read_stat()?;
        if let (MeasureOn::WholeCpu, Some((wall, shares))) = (&self.on, stat) {
            if m.interval_ns == 0 {
                m.interval_ns = wall;
            }
            for &(metric, cpu) in &self.wanted {
                if metric == LoadMetric::CpuUtil {
                    if let Some(v) = shares.get(&cpu) {
                        m.values.insert((metric, cpu), *v);
                    }
                }
            }
        }
        Ok(m)
    }
}

/// Measurements from a running hwqos-monitor's live API (its per-CPU frames).
pub struct MonitorSource {
    frames: hwqos_pmu::api::Subscription,
    wanted: Vec<(LoadMetric, u32)>,
}

impl MonitorSource {
    /// Subscribes to the `cpu:*` frames of the monitor at `socket`.
    pub fn connect(
        socket: &std::path::Path,
        wanted: &[(LoadMetric, u32)],
    ) -> Result<MonitorSource, LoadError> {
        let client = hwqos_pmu::api::ApiClient::connect(socket)
            .map_err(|e| LoadError::Measure(format!("monitor API {}: {e}", socket.display())))?;
        let filter = hwqos_pmu::api::FrameFilter::new(&["cpu:*"], &["*"])
            .map_err(|e| LoadError::Config(e.to_string()))?;
        let frames = client
            .subscribe(filter)
            .map_err(|e| LoadError::Measure(format!("subscribing: {e}")))?;
        Ok(MonitorSource {
            frames,
            wanted: wanted.to_vec(),
        })
    }
}

impl MetricSource for MonitorSource {
    fn next(&mut self) -> Result<Measurement, LoadError> {
        match self.frames.next() {
            Some(Ok(frame)) => Ok(Measurement {
                t_ns: frame.time.mono_ns,
                interval_ns: frame.interval_ns,
                values: values_from_frame(&frame, &self.wanted),
            }),
            Some(Err(e)) => Err(LoadError::Measure(format!("monitor API: {e}"))),
            None => Err(LoadError::Measure(
                "the monitor closed the subscription".into(),
            )),
        }
    }
}
