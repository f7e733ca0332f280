//! Running `hwqos stat`: choose scopes and targets, start the command or attach
//! to processes, threads or CPUs, count until the end condition, print
//! intervals and totals (or, with `-r N`, the mean of N runs).
//!
//! What is counted and what only sets the duration, as in perf:
//! - `-- CMD` alone counts the command (and everything it starts);
//! - `-p PID…` counts those processes, `-t TID…` those threads, `-a` or
//!   `-C CPUS` those CPUs; a command given with them only sets how long to
//!   count (`-p 42 -- sleep 5`); without one, counting ends when the processes
//!   or threads are gone, or on Ctrl-C.

use crate::args::StatArgs;
use crate::child::{self, HeldChild, RunningChild};
use crate::error::usage;
use crate::stat::{self, CounterSet, Format, Reading, RunInfo, ScopeTargets, StatEvent};
use anyhow::{Context, Result};
use hwqos_core::Scope;
use hwqos_pmu::backend::{CountTarget, CounterBackend};
use hwqos_pmu::{Event, PmuError};
use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Everything `hwqos stat` needs from the node, injectable for tests.
pub struct StatEnv<'a> {
    /// The counter backend: perf on the node, the simulator in tests.
    pub backend: &'a mut dyn CounterBackend,
    /// Resolves an event name to an encoding (see [`crate::node_resolver`]).
    pub resolve: &'a mut dyn FnMut(&str) -> Result<Event, PmuError>,
    /// Where the counts go: standard error, or the `-o` file.
    pub out: &'a mut dyn Write,
}

/// The event groups to count: `-e` lists (`{a,b}` groups, commas inside
/// `pmu/…/` terms kept), or perf's default list, one event a group.
pub fn requested_events(args: &StatArgs) -> Result<Vec<Vec<String>>> {
    if args.events.is_empty() {
        return Ok(stat::DEFAULT_EVENTS
            .iter()
            .map(|s| vec![s.to_string()])
            .collect());
    }
    let mut groups = Vec::new();
    for list in &args.events {
        groups.extend(stat::parse_event_groups(list).map_err(|e| usage(format!("-e: {e}")))?);
    }
    Ok(groups)
}

fn output_format(args: &StatArgs) -> Format {
    if args.json {
        Format::PerfJson
    } else if args.json_full {
        Format::HwqosJson
    } else if let Some(sep) = &args.separator {
        Format::Separated(sep.clone())
    } else {
        Format::Text
    }
}

/// How the measurement ends.
enum Until {
    /// The command exits; the waiter thread sends its exit code.
    Child(mpsc::Receiver<Result<i32>>),
    /// All attached processes or threads are gone, or Ctrl-C.
    Tasks(Vec<u32>),
    /// Ctrl-C only (system-wide without a command).
    Interrupt,
}

/// What is counted, decided once from the arguments.
enum Counted {
    /// The command itself (and everything it starts).
    Command,
    /// These CPUs (all online ones for `-a`).
    Cpus(Vec<u32>),
    Processes(Vec<u32>),
    Threads(Vec<u32>),
}

fn counted(args: &StatArgs) -> Result<Counted> {
    let target = &args.target;
    let chosen = usize::from(!target.pids.is_empty())
        + usize::from(!args.tids.is_empty())
        + usize::from(target.all_cpus || args.cpus.is_some());
    if chosen > 1 {
        return Err(usage(
            "hwqos stat counts one of: -p PID[,PID…], -t TID[,TID…], -a / -C CPUS, or -- CMD",
        ));
    }
    if chosen == 0 && target.command.is_empty() {
        return Err(usage(
            "hwqos stat needs a command to run (-- CMD [ARGS…]) or what to count: -p PID, -t TID, -a or -C CPUS",
        ));
    }
    if args.per_cpu && !(target.all_cpus || args.cpus.is_some()) {
        return Err(usage("-A (per-CPU counts) needs -a or -C CPUS"));
    }
    Ok(if let Some(list) = &args.cpus {
        let cpus =
            hwqos_pmu::target::parse_cpu_list(list).map_err(|e| usage(format!("-C: {e}")))?;
        let online = hwqos_pmu::target::online_cpus(std::path::Path::new("/sys"));
        if let Some(cpu) = cpus.iter().find(|c| !online.contains(c)) {
            return Err(usage(format!("-C: CPU {cpu} is not online")));
        }
        if cpus.is_empty() {
            return Err(usage("-C: empty CPU list"));
        }
        Counted::Cpus(cpus)
    } else if target.all_cpus {
        Counted::Cpus(hwqos_pmu::target::online_cpus(std::path::Path::new("/sys")))
    } else if !target.pids.is_empty() {
        Counted::Processes(target.pids.clone())
    } else if !args.tids.is_empty() {
        Counted::Threads(args.tids.clone())
    } else {
        Counted::Command
    })
}

/// The process a thread belongs to (`Tgid` in `/proc/TID/status`).
fn thread_group_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Scopes, their count targets and the header text for what is counted; the
/// held child when the command is counted itself.
fn scopes_for(
    what: &Counted,
    args: &StatArgs,
) -> Result<(Vec<ScopeTargets>, String, Option<HeldChild>)> {
    Ok(match what {
        Counted::Cpus(cpus) => {
            let scopes = if args.per_cpu {
                cpus.iter()
                    .map(|&cpu| ScopeTargets {
                        scope: Scope::Cpu { cpu },
                        targets: vec![CountTarget::Cpu { cpu }],
                    })
                    .collect()
            } else {
                vec![ScopeTargets {
                    scope: Scope::System,
                    targets: cpus.iter().map(|&cpu| CountTarget::Cpu { cpu }).collect(),
                }]
            };
            let label = match &args.cpus {
                Some(list) => format!("'CPU(s) {list}'"),
                None => "'system wide'".to_string(),
            };
            (scopes, label, None)
        }
        Counted::Processes(pids) => {
            let resolver = hwqos_pmu::target::Resolver::for_this_node();
            let mut scopes = Vec::new();
            for &pid in pids {
                let proc = resolver
                    .process(pid)
                    .ok_or_else(|| usage(format!("-p: no process with pid {pid}")))?;
                scopes.push(ScopeTargets {
                    scope: Scope::Process { pid },
                    targets: proc
                        .threads
                        .iter()
                        .map(|&tid| CountTarget::Task { tid, inherit: true })
                        .collect(),
                });
            }
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            (scopes, format!("process id '{}'", list.join(",")), None)
        }
        Counted::Threads(tids) => {
            let mut scopes = Vec::new();
            for &tid in tids {
                let pid = thread_group_of(tid)
                    .ok_or_else(|| usage(format!("-t: no thread with tid {tid}")))?;
                scopes.push(ScopeTargets {
                    scope: Scope::Thread { pid, tid },
                    targets: vec![CountTarget::Task {
                        tid,
                        inherit: false,
                    }],
                });
            }
            let list: Vec<String> = tids.iter().map(u32::to_string).collect();
            (scopes, format!("thread id '{}'", list.join(",")), None)
        }
        Counted::Command => {
            let child = HeldChild::spawn(&args.target.command)?;
            let scopes = vec![ScopeTargets {
                scope: Scope::Process { pid: child.pid() },
                targets: vec![CountTarget::Task {
                    tid: child.pid(),
                    inherit: true,
                }],
            }];
            let label = format!("'{}'", args.target.command.join(" "));
            (scopes, label, Some(child))
        }
    })
}

/// Runs `hwqos stat`; returns the exit code (the command's own code for `-- CMD`).
pub fn run(args: &StatArgs, env: StatEnv<'_>) -> Result<u8> {
    let StatEnv {
        backend,
        resolve,
        out,
    } = env;
    let what = counted(args)?;
    let groups = requested_events(args)?;
    if groups.is_empty() {
        return Err(usage("-e: empty event list"));
    }
    let interval = match args.interval_ms {
        Some(0) => return Err(usage("-I: the interval must be at least 1 ms")),
        Some(ms) => Some(Duration::from_millis(ms)),
        None => None,
    };
    let runs = args.repeat.unwrap_or(1);
    if runs > 1 && args.target.command.is_empty() {
        return Err(usage("-r: repeating needs a command to run (-- CMD)"));
    }
    if runs > 1 && interval.is_some() {
        return Err(usage("-r cannot be combined with -I"));
    }
    let format = output_format(args);
    if let Format::Separated(sep) = &format {
        if sep.is_empty() {
            return Err(usage("-x: the separator must not be empty"));
        }
    }

    let mut events: Vec<StatEvent> = stat::resolve_events(&groups, resolve)?;
    stat::probe_events(backend, &mut events)?;
    child::catch_interrupts()?;

    if runs == 1 {
        let once = count_once(args, &what, backend, events, &format, interval, out)?;
        if interval.is_none() {
            let info = RunInfo::once(once.label, once.elapsed_ns);
            write_out(
                out,
                &stat::render(&format, &once.events, &once.totals, &info, None, &[]),
            )?;
        }
        return Ok(once.status);
    }

    let mut totals = Vec::new();
    let mut elapsed = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let once = count_once(args, &what, backend, events.clone(), &format, None, out)?;
        totals.push(once.totals);
        elapsed.push(once.elapsed_ns as f64);
        let interrupted = child::interrupted();
        last = Some((once.label, once.events, once.status));
        if interrupted {
            break;
        }
    }
    let (label, events, status) = last.context("no run was made")?;
    let (mean, spread) = stat::mean_of_runs(&totals);
    let mean_elapsed = elapsed.iter().sum::<f64>() / elapsed.len() as f64;
    let stderr_ns = stat::relative_standard_error(&elapsed, mean_elapsed) / 100.0 * mean_elapsed;
    let info = RunInfo {
        what: label,
        elapsed_ns: mean_elapsed.round() as u64,
        runs: Some((totals.len() as u32, stderr_ns)),
    };
    write_out(
        out,
        &stat::render(&format, &events, &mean, &info, None, &spread),
    )?;
    Ok(status)
}

/// One counted run: its totals and how it ended.
struct Once {
    label: String,
    events: Vec<StatEvent>,
    totals: Vec<Reading>,
    elapsed_ns: u64,
    status: u8,
}

fn count_once(
    args: &StatArgs,
    what: &Counted,
    backend: &mut dyn CounterBackend,
    events: Vec<StatEvent>,
    format: &Format,
    interval: Option<Duration>,
    out: &mut dyn Write,
) -> Result<Once> {
    let (scopes, label, counted_child) = scopes_for(what, args)?;
    // A command given with -p/-t/-a/-C only sets the duration; it is held
    // until the counters run, like the counted one.
    let held = match counted_child {
        Some(child) => Some(child),
        None if !args.target.command.is_empty() => Some(HeldChild::spawn(&args.target.command)?),
        None => None,
    };
    let set = CounterSet::open(backend, events, scopes)?;
    set.enable(backend)?;
    let start = Instant::now();
    let until = match held {
        Some(child) => {
            let running = child.release()?;
            Until::Child(spawn_waiter(running))
        }
        None => match what {
            Counted::Processes(pids) | Counted::Threads(pids) => Until::Tasks(pids.clone()),
            _ => Until::Interrupt,
        },
    };

    let mut previous: Option<Vec<Reading>> = None;
    let mut ticks: u32 = 0;
    let status = loop {
        let deadline = interval.map(|i| start + i * (ticks + 1));
        match wait_for_end(&until, deadline)? {
            Wait::Ended(code) => break code.unwrap_or(0),
            Wait::Tick => {
                ticks += 1;
                let now = set.read(backend)?;
                let deltas = since(&now, previous.as_deref());
                let info =
                    RunInfo::once(label.clone(), interval.map_or(0, |i| i.as_nanos() as u64));
                let t = start.elapsed().as_secs_f64();
                write_out(
                    out,
                    &stat::render(format, &set.events, &deltas, &info, Some(t), &[]),
                )?;
                previous = Some(now);
            }
        }
    };
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    let totals = set.read(backend)?;
    set.disable(backend)?;
    if let Some(i) = interval {
        // Like perf, -I ends with the last (partial) interval, not totals.
        let deltas = since(&totals, previous.as_deref());
        let partial_ns = elapsed_ns.saturating_sub(i.as_nanos() as u64 * u64::from(ticks));
        let info = RunInfo::once(label.clone(), partial_ns);
        write_out(
            out,
            &stat::render(
                format,
                &set.events,
                &deltas,
                &info,
                Some(elapsed_ns as f64 / 1e9),
                &[],
            ),
        )?;
    }
    let events = set.events.clone();
    set.close(backend);
    Ok(Once {
        label,
        events,
        totals,
        elapsed_ns,
        status: u8::try_from(status).unwrap_or(255),
    })
}

/// The counts since `previous` (all of them before the first reading).
fn since(now: &[Reading], previous: Option<&[Reading]>) -> Vec<Reading> {
    match previous {
        Some(prev) => now
            .iter()
            .zip(prev)
            .map(|(n, p)| n.delta_since(p))
            .collect(),
        None => now.to_vec(),
    }
}

fn write_out(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing the counts")
}

fn spawn_waiter(child: RunningChild) -> mpsc::Receiver<Result<i32>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    rx
}

enum Wait {
    /// The measurement is over; the command's exit code when there was a command.
    Ended(Option<i32>),
    /// The interval deadline passed.
    Tick,
}

/// Waits until the measurement ends or the deadline (if any) passes.
fn wait_for_end(until: &Until, deadline: Option<Instant>) -> Result<Wait> {
    const POLL: Duration = Duration::from_millis(20);
    match until {
        Until::Child(rx) => match deadline {
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(code) => Ok(Wait::Ended(Some(code?))),
                Err(mpsc::RecvTimeoutError::Timeout) => Ok(Wait::Tick),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    anyhow::bail!("lost track of the command")
                }
            },
            None => Ok(Wait::Ended(Some(
                rx.recv().context("lost track of the command")??,
            ))),
        },
        Until::Tasks(_) | Until::Interrupt => loop {
            if child::interrupted() {
                return Ok(Wait::Ended(None));
            }
            if let Until::Tasks(ids) = until {
                if !ids.iter().any(|&p| child::process_alive(p)) {
                    return Ok(Wait::Ended(None));
                }
            }
            let now = Instant::now();
            match deadline {
                Some(d) if now >= d => return Ok(Wait::Tick),
                Some(d) => std::thread::sleep(POLL.min(d - now)),
                None => std::thread::sleep(POLL),
            }
        },
    }
}
