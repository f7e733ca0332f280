//! hwqos-procfs: the operating system's own accounting, read from `/proc`.
//!
//! Hardware counters say what the CPU did; the kernel's accounting says who had
//! the CPU and how busy it was. This crate reads the second kind: CPU
//! utilization per CPU and for the node, context switches, run queue and load,
//! hardware and soft interrupts (the thesis found interrupt counts decisive),
//! available memory, and per-process CPU time, faults, threads and resident
//! memory. It has one job — turn `/proc` files into numbers — and depends on
//! nothing heavier than `hwqos-core` (for the [`Sample`] it emits), so a crate
//! that only needs "how busy is this CPU" (the relay's compression throttle,
//! the load generator's feedback) does not pull in perf_event or an async
//! runtime. `hwqos-pmu` uses it as its procfs backend and re-exports it as
//! `hwqos_pmu::procfs`.
//!
//! Two layers:
//!
//! - **Parsers** ([`parse_proc_stat`], [`parse_loadavg`], [`parse_cpu_table`],
//!   [`parse_mem_available`], [`parse_pid_stat`]): one file's text in, a typed
//!   value out; malformed content gives a [`ProcParseError`] saying what was
//!   wrong, never a panic.
//! - **[`ProcfsSampler`]**: reads the files under a `/proc` root each tick and
//!   reports samples.
//!
//! Most of these files hold cumulative counters, so [`ProcfsSampler`] keeps the
//! previous snapshot and reports interval deltas: the first call after
//! [`ProcfsSampler::new`] (and the first call for a process) only primes the
//! counters and emits the gauges. Counter-like values are plain numbers here
//! (`Sample::counter` is `None`): the kernel does not multiplex them.
//!
//! The kernel accounts CPU time in clock ticks (`USER_HZ`, normally 100 per
//! second), so at sampling rates near or above that the per-interval ratios and
//! `os.proc.cpu` are coarse (an interval without a tick reports no CPU ratios);
//! use `sw.task_clock` for fine-grained CPU time.

#![deny(missing_docs)]

use hwqos_core::metric::names;
use hwqos_core::{MetricName, Sample, Scope, Timestamp};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

/// Why the content of a `/proc` file could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProcParseError(
    /// What was wrong, with the line where it helps.
    pub String,
);

/// Why [`ProcfsSampler`] could not read a `/proc` file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcfsError {
    /// The file could not be read, or its content not understood (then the
    /// source's kind is [`io::ErrorKind::InvalidData`] and it wraps the
    /// [`ProcParseError`]).
    #[error("{context}: {source}")]
    Io {
        /// What was being done (`reading /proc/stat`).
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl ProcfsError {
    fn io(context: String, source: io::Error) -> Self {
        ProcfsError::Io { context, source }
    }

    /// True when the file is gone because the task exited while it was read.
    pub fn is_gone(&self) -> bool {
        match self {
            ProcfsError::Io { source, .. } => is_gone(source),
        }
    }
}

/// True for the errors that mean "the task exited while we looked".
fn is_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
        || e.kind() == io::ErrorKind::NotFound
}

fn perr(msg: impl Into<String>) -> ProcParseError {
    ProcParseError(msg.into())
}

/// Cumulative CPU time of one CPU (or all) in clock ticks, from a `cpu` line of `/proc/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Time in user mode (guest time included).
    pub user: u64,
    /// Time in user mode at low priority (niced; guest_nice included).
    pub nice: u64,
    /// Time in kernel mode.
    pub system: u64,
    /// Idle time.
    pub idle: u64,
    /// Idle time while I/O was outstanding (may go backwards).
    pub iowait: u64,
    /// Time servicing hardware interrupts.
    pub irq: u64,
    /// Time servicing soft interrupts.
    pub softirq: u64,
    /// Time stolen by the hypervisor for other guests.
    pub steal: u64,
}

impl CpuTimes {
    /// All ticks of the line. Guest time is already contained in user/nice, so it is not added.
    pub fn total(&self) -> u64 {
        self.user
            .saturating_add(self.nice)
            .saturating_add(self.system)
            .saturating_add(self.idle)
            .saturating_add(self.iowait)
            .saturating_add(self.irq)
            .saturating_add(self.softirq)
            .saturating_add(self.steal)
    }

    /// Field-wise increase since `earlier` (fields that went back, as iowait can, count 0).
    pub fn delta_since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(earlier.user),
            nice: self.nice.saturating_sub(earlier.nice),
            system: self.system.saturating_sub(earlier.system),
            idle: self.idle.saturating_sub(earlier.idle),
            iowait: self.iowait.saturating_sub(earlier.iowait),
            irq: self.irq.saturating_sub(earlier.irq),
            softirq: self.softirq.saturating_sub(earlier.softirq),
            steal: self.steal.saturating_sub(earlier.steal),
        }
    }
}

/// What `/proc/stat` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// The aggregate `cpu` line.
    pub total: CpuTimes,
    /// The `cpuN` lines, by CPU number (offline CPUs are absent).
    pub cpus: BTreeMap<u32, CpuTimes>,
    /// Context switches since boot (`ctxt`).
    pub ctxt: u64,
}

/// Parses `/proc/stat` (the `cpu`, `cpuN` and `ctxt` lines; the rest is ignored).
pub fn parse_proc_stat(text: &str) -> Result<ProcStat, ProcParseError> {
    let mut total = None;
    let mut cpus = BTreeMap::new();
    let mut ctxt = None;
    for (n, line) in text.lines().enumerate() {
        let mut fields = line.split_whitespace();
        let Some(key) = fields.next() else { continue };
        let num = |v: &str| {
            v.parse::<u64>().map_err(|_| {
                perr(format!(
                    "line {}: `{key}` has a non-numeric field `{v}`",
                    n + 1
                ))
            })
        };
        if key == "ctxt" {
            let v = fields
                .next()
                .ok_or_else(|| perr(format!("line {}: `ctxt` has no value", n + 1)))?;
            ctxt = Some(num(v)?);
        } else if let Some(id) = key.strip_prefix("cpu") {
            let vals = fields.map(num).collect::<Result<Vec<u64>, _>>()?;
            if vals.len() < 4 {
                return Err(perr(format!(
                    "line {}: `{key}` has {} fields, expected at least 4 (user nice system idle)",
                    n + 1,
                    vals.len()
                )));
            }
            let at = |i: usize| vals.get(i).copied().unwrap_or(0);
            let t = CpuTimes {
                user: at(0),
                nice: at(1),
                system: at(2),
                idle: at(3),
                iowait: at(4),
                irq: at(5),
                softirq: at(6),
                steal: at(7),
            };
            if id.is_empty() {
                total = Some(t);
            } else {
                let cpu = id
                    .parse::<u32>()
                    .map_err(|_| perr(format!("line {}: `{key}` is not cpuN", n + 1)))?;
                cpus.insert(cpu, t);
            }
        }
    }
    Ok(ProcStat {
        total: total.ok_or_else(|| perr("no aggregate `cpu` line"))?,
        cpus,
        ctxt: ctxt.ok_or_else(|| perr("no `ctxt` line"))?,
    })
}

/// What `/proc/loadavg` says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadAvg {
    /// Load average over 1 minute.
    pub load1: f64,
    /// Load average over 5 minutes.
    pub load5: f64,
    /// Load average over 15 minutes.
    pub load15: f64,
    /// Currently runnable scheduling entities (the `R` of `R/T`).
    pub runnable: u64,
    /// Scheduling entities that exist (the `T` of `R/T`).
    pub total: u64,
}

/// Parses `/proc/loadavg` (`0.05 0.22 0.12 3/104 7205`).
pub fn parse_loadavg(text: &str) -> Result<LoadAvg, ProcParseError> {
    let f: Vec<&str> = text.split_whitespace().collect();
    if f.len() < 4 {
        return Err(perr(format!(
            "expected at least 4 fields, found {}",
            f.len()
        )));
    }
    let load = |i: usize| {
        f[i].parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| perr(format!("field {} `{}` is not a load average", i + 1, f[i])))
    };
    let (r, t) = f[3]
        .split_once('/')
        .ok_or_else(|| perr(format!("field 4 `{}` is not RUNNABLE/TOTAL", f[3])))?;
    let count = |v: &str| {
        v.parse::<u64>()
            .map_err(|_| perr(format!("field 4 `{}` is not RUNNABLE/TOTAL", f[3])))
    };
    Ok(LoadAvg {
        load1: load(0)?,
        load5: load(1)?,
        load15: load(2)?,
        runnable: count(r)?,
        total: count(t)?,
    })
}

/// Parses a per-CPU table in the layout of `/proc/interrupts` and `/proc/softirqs`:
/// a header of `CPUn` columns, then one row per source. Returns the per-CPU sums
/// over all rows. Rows with fewer numbers than CPUs (`ERR`, `MIS`: error counts
/// that are not per CPU) are not counted.
pub fn parse_cpu_table(text: &str) -> Result<BTreeMap<u32, u64>, ProcParseError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or_else(|| perr("empty file"))?;
    let cpus = header
        .split_whitespace()
        .map(|c| {
            c.strip_prefix("CPU")
                .and_then(|n| n.parse::<u32>().ok())
                .ok_or_else(|| perr(format!("header column `{c}` is not CPUn")))
        })
        .collect::<Result<Vec<u32>, _>>()?;
    if cpus.is_empty() {
        return Err(perr("header names no CPU columns"));
    }
    let mut sums: BTreeMap<u32, u64> = cpus.iter().map(|&c| (c, 0)).collect();
    for (n, line) in lines {
        let (label, rest) = line
            .split_once(':')
            .ok_or_else(|| perr(format!("line {}: no `NAME:` label", n + 1)))?;
        let counts: Vec<u64> = rest
            .split_whitespace()
            .take(cpus.len())
            .map_while(|v| v.parse::<u64>().ok())
            .collect();
        if counts.len() < cpus.len() {
            if counts.is_empty() {
                return Err(perr(format!(
                    "line {}: `{}` has no counts",
                    n + 1,
                    label.trim()
                )));
            }
            continue;
        }
        for (cpu, c) in cpus.iter().zip(counts) {
            if let Some(s) = sums.get_mut(cpu) {
                *s = s.saturating_add(c);
            }
        }
    }
    Ok(sums)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn parse_mem_available(text: &str) -> Result<u64, ProcParseError> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .ok_or_else(|| perr("no `MemAvailable:` line"))?;
    let mut f = line.split_whitespace();
    let kb = f
        .next()
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| perr(format!("`MemAvailable:{line}` has no number")))?;
    match f.next() {
        Some("kB") => Ok(kb.saturating_mul(1024)),
        None => Ok(kb),
        Some(u) => Err(perr(format!("`MemAvailable` has unknown unit `{u}`"))),
    }
}

/// The fields hwqos uses from `/proc/PID/stat` (or `/proc/PID/task/TID/stat`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PidStat {
    /// The process (or thread) id.
    pub pid: u32,
    /// The command name, without the parentheses.
    pub comm: String,
    /// The state letter (`R`, `S`, `D`, `Z`, …).
    pub state: char,
    /// Minor page faults since start.
    pub minflt: u64,
    /// Major page faults since start.
    pub majflt: u64,
    /// User CPU time in clock ticks.
    pub utime: u64,
    /// System CPU time in clock ticks.
    pub stime: u64,
    /// Threads in the process.
    pub num_threads: u64,
    /// Start time after boot in clock ticks (tells a reused pid from the old process).
    pub starttime: u64,
    /// Resident set size in pages.
    pub rss_pages: u64,
}

/// Parses `/proc/PID/stat`. The command name may contain spaces and
/// parentheses, so it is taken up to the *last* `)`.
pub fn parse_pid_stat(text: &str) -> Result<PidStat, ProcParseError> {
    let open = text
        .find('(')
        .ok_or_else(|| perr("no `(` before the command name"))?;
    let close = text
        .rfind(')')
        .ok_or_else(|| perr("no `)` after the command name"))?;
    if close < open {
        return Err(perr("`)` before `(`"));
    }
    let pid = text[..open]
        .trim()
        .parse::<u32>()
        .map_err(|_| perr(format!("pid `{}` is not a number", text[..open].trim())))?;
    let comm = text[open + 1..close].to_string();
    // rest[i] is field i + 3 of proc(5).
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    if rest.len() < 22 {
        return Err(perr(format!(
            "{} fields after the command name, expected at least 22",
            rest.len()
        )));
    }
    let field = |i: usize| {
        rest[i].parse::<u64>().map_err(|_| {
            perr(format!(
                "field {} `{}` is not a non-negative integer",
                i + 3,
                rest[i]
            ))
        })
    };
    let mut state = rest[0].chars();
    let (Some(st), None) = (state.next(), state.next()) else {
        return Err(perr(format!("state `{}` is not one character", rest[0])));
    };
    // rss (field 24) is signed in the kernel's format; a negative value means 0.
    let rss_pages = match rest[21].parse::<i64>() {
        Ok(v) => v.max(0) as u64,
        Err(_) => return Err(perr(format!("field 24 `{}` is not an integer", rest[21]))),
    };
    Ok(PidStat {
        pid,
        comm,
        state: st,
        minflt: field(7)?,
        majflt: field(9)?,
        utime: field(11)?,
        stime: field(12)?,
        num_threads: field(17)?,
        starttime: field(19)?,
        rss_pages,
    })
}

/// One `/proc` snapshot of the system-wide counters.
struct SystemSnapshot {
    stat: ProcStat,
    interrupts: BTreeMap<u32, u64>,
    softirqs: BTreeMap<u32, u64>,
}

/// One snapshot of a process's counters.
struct ProcSnapshot {
    time: Timestamp,
    starttime: u64,
    cpu_ticks: u64,
    minflt: u64,
    majflt: u64,
}

/// Samples `/proc` and reports interval deltas (see the module docs).
pub struct ProcfsSampler {
    proc_root: PathBuf,
    clk_tck: u64,
    page_size: u64,
    system: Option<SystemSnapshot>,
    procs: HashMap<u32, ProcSnapshot>,
    /// Pids whose unreadable stat file was already logged (log once, not every tick).
    complained: HashSet<u32>,
}

fn metric(name: &'static str) -> MetricName {
    MetricName::from_static(name)
}

impl ProcfsSampler {
    /// A sampler over `proc_root` (normally `/proc`), with this node's clock tick
    /// rate and page size.
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        // SAFETY: sysconf has no preconditions; it returns -1 for unknown names.
        let clk_tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        // SAFETY: as above.
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        ProcfsSampler {
            proc_root: proc_root.into(),
            clk_tck: if clk_tck > 0 { clk_tck as u64 } else { 100 },
            page_size: if page_size > 0 {
                page_size as u64
            } else {
                4096
            },
            system: None,
            procs: HashMap::new(),
            complained: HashSet::new(),
        }
    }

    /// Overrides the clock tick rate (`USER_HZ`) and page size, for reading a
    /// `/proc` tree captured on another node.
    pub fn with_units(mut self, clk_tck: u64, page_size: u64) -> Self {
        self.clk_tck = clk_tck.max(1);
        self.page_size = page_size;
        self
    }

    fn read(&self, rel: &str) -> Result<String, ProcfsError> {
        let path = self.proc_root.join(rel);
        std::fs::read_to_string(&path)
            .map_err(|e| ProcfsError::io(format!("reading {}", path.display()), e))
    }

    fn parse<T>(
        &self,
        rel: &str,
        parse: impl Fn(&str) -> Result<T, ProcParseError>,
    ) -> Result<T, ProcfsError> {
        let text = self.read(rel)?;
        parse(&text).map_err(|e| {
            ProcfsError::io(
                format!("parsing {}", self.proc_root.join(rel).display()),
                io::Error::new(io::ErrorKind::InvalidData, e),
            )
        })
    }

    /// System-wide and per-CPU metrics: `os.cpu.{util,user,system,iowait,irq}`
    /// (per CPU and system), `os.ctxt`, `os.interrupts` and `os.softirqs` (per CPU
    /// and system) over the interval since the previous call, and the gauges
    /// `os.runqueue`, `os.load1` and `os.mem.available`.
    pub fn sample_system(&mut self, time: Timestamp) -> Result<Vec<Sample>, ProcfsError> {
        let stat = self.parse("stat", parse_proc_stat)?;
        let load = self.parse("loadavg", parse_loadavg)?;
        let interrupts = self.parse("interrupts", parse_cpu_table)?;
        let softirqs = self.parse("softirqs", parse_cpu_table)?;
        let mem_available = self.parse("meminfo", parse_mem_available)?;

        let mut out = vec![
            Sample::gauge(
                time,
                Scope::System,
                metric(names::OS_RUNQUEUE),
                load.runnable as f64,
            ),
            Sample::gauge(time, Scope::System, metric(names::OS_LOAD1), load.load1),
            Sample::gauge(
                time,
                Scope::System,
                metric(names::OS_MEM_AVAILABLE),
                mem_available as f64,
            ),
        ];
        let now = SystemSnapshot {
            stat,
            interrupts,
            softirqs,
        };
        if let Some(prev) = &self.system {
            cpu_ratios(
                &mut out,
                time,
                Scope::System,
                &now.stat.total.delta_since(&prev.stat.total),
            );
            for (cpu, t) in &now.stat.cpus {
                if let Some(p) = prev.stat.cpus.get(cpu) {
                    cpu_ratios(&mut out, time, Scope::Cpu { cpu: *cpu }, &t.delta_since(p));
                }
            }
            out.push(Sample::gauge(
                time,
                Scope::System,
                metric(names::OS_CTXT),
                now.stat.ctxt.saturating_sub(prev.stat.ctxt) as f64,
            ));
            table_deltas(
                &mut out,
                time,
                names::OS_INTERRUPTS,
                &prev.interrupts,
                &now.interrupts,
            );
            table_deltas(
                &mut out,
                time,
                names::OS_SOFTIRQS,
                &prev.softirqs,
                &now.softirqs,
            );
        }
        self.system = Some(now);
        Ok(out)
    }

    /// Per-process metrics for `pid`: `os.proc.threads` and `os.proc.rss`, and
    /// from the second call on `os.proc.cpu` (CPUs used over the interval),
    /// `os.proc.minor_faults` and `os.proc.major_faults`. `None` if the process
    /// does not exist (any more) or its stat file cannot be understood.
    pub fn sample_process(&mut self, pid: u32, time: Timestamp) -> Option<Vec<Sample>> {
        let rel = format!("{pid}/stat");
        let stat = match self.parse(&rel, parse_pid_stat) {
            Ok(s) => s,
            Err(e) => {
                if !e.is_gone() && self.complained.insert(pid) {
                    #[cfg(feature = "tracing")]
                    tracing::warn!("process {pid}: {e}");
                }
                self.procs.remove(&pid);
                return None;
            }
        };
        let scope = Scope::Process { pid };
        let mut out = vec![
            Sample::gauge(
                time,
                scope.clone(),
                metric(names::OS_PROC_THREADS),
                stat.num_threads as f64,
            ),
            Sample::gauge(
                time,
                scope.clone(),
                metric(names::OS_PROC_RSS),
                stat.rss_pages.saturating_mul(self.page_size) as f64,
            ),
        ];
        let now = ProcSnapshot {
            time,
            starttime: stat.starttime,
            cpu_ticks: stat.utime.saturating_add(stat.stime),
            minflt: stat.minflt,
            majflt: stat.majflt,
        };
        // A different start time means the pid was reused: start over.
        if let Some(prev) = self
            .procs
            .get(&pid)
            .filter(|p| p.starttime == now.starttime)
        {
            let secs = time.secs_since(&prev.time);
            if secs > 0.0 {
                let cpu_s =
                    now.cpu_ticks.saturating_sub(prev.cpu_ticks) as f64 / self.clk_tck as f64;
                out.push(Sample::gauge(
                    time,
                    scope.clone(),
                    metric(names::OS_PROC_CPU),
                    cpu_s / secs,
                ));
            }
            out.push(Sample::gauge(
                time,
                scope.clone(),
                metric(names::OS_PROC_MINOR_FAULTS),
                now.minflt.saturating_sub(prev.minflt) as f64,
            ));
            out.push(Sample::gauge(
                time,
                scope,
                metric(names::OS_PROC_MAJOR_FAULTS),
                now.majflt.saturating_sub(prev.majflt) as f64,
            ));
        }
        self.procs.insert(pid, now);
        Some(out)
    }

    /// Drops the state kept for `pid` (call when it stops being a target).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.complained.remove(&pid);
    }

    /// The pids whose counters are primed.
    pub fn tracked(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.procs.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// The `/proc` root this sampler reads.
    pub fn proc_root(&self) -> &Path {
        &self.proc_root
    }
}

/// Pushes the CPU time shares of one interval; nothing if no tick elapsed.
fn cpu_ratios(out: &mut Vec<Sample>, time: Timestamp, scope: Scope, d: &CpuTimes) {
    let total = d.total();
    if total == 0 {
        return;
    }
    let t = total as f64;
    let busy = total - d.idle - d.iowait;
    for (name, v) in [
        (names::OS_CPU_UTIL, busy),
        (names::OS_CPU_USER, d.user + d.nice),
        (names::OS_CPU_SYSTEM, d.system),
        (names::OS_CPU_IOWAIT, d.iowait),
        (names::OS_CPU_IRQ, d.irq + d.softirq),
    ] {
        out.push(Sample::gauge(
            time,
            scope.clone(),
            metric(name),
            v as f64 / t,
        ));
    }
}

/// Pushes per-CPU increments of a CPU table and their sum as the system value.
fn table_deltas(
    out: &mut Vec<Sample>,
    time: Timestamp,
    name: &'static str,
    prev: &BTreeMap<u32, u64>,
    now: &BTreeMap<u32, u64>,
) {
    let mut sum = 0u64;
    for (cpu, v) in now {
        if let Some(p) = prev.get(cpu) {
            let d = v.saturating_sub(*p);
            sum = sum.saturating_add(d);
            out.push(Sample::gauge(
                time,
                Scope::Cpu { cpu: *cpu },
                metric(name),
                d as f64,
            ));
        }
    }
    out.push(Sample::gauge(time, Scope::System, metric(name), sum as f64));
}
