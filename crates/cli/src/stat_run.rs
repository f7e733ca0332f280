//! Running `hwqos stat`: choose scopes and targets, start the command or attach
//! to processes, count until the end condition, print intervals and totals.

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
    pub backend: &'a mut dyn CounterBackend,
    pub resolve: &'a mut dyn FnMut(&str) -> Result<Event, PmuError>,
    pub out: &'a mut dyn Write,
}

/// The event names to count: `-e` lists (split outside `pmu/…/` terms), or perf's default list.
pub fn requested_events(args: &StatArgs) -> Vec<String> {
    let names: Vec<String> = args
        .events
        .iter()
        .flat_map(|e| stat::split_event_list(e))
        .collect();
    if args.events.is_empty() {
        stat::DEFAULT_EVENTS.iter().map(|s| s.to_string()).collect()
    } else {
        names
    }
}

fn output_format(args: &StatArgs) -> Format {
    if args.json {
        Format::Json
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
    /// All attached processes are gone, or Ctrl-C.
    Processes(Vec<u32>),
    /// Ctrl-C only (system-wide without a command).
    Interrupt,
}

/// Runs `hwqos stat`; returns the exit code (the command's own code for `-- CMD`).
pub fn run(args: &StatArgs, env: StatEnv<'_>) -> Result<u8> {
    let StatEnv {
        backend,
        resolve,
        out,
    } = env;
    let target = &args.target;
    let modes = usize::from(!target.pids.is_empty())
        + usize::from(target.all_cpus)
        + usize::from(!target.command.is_empty() && !target.all_cpus);
    if modes != 1 {
        return Err(usage(
            "hwqos stat needs exactly one of: -p PID[,PID…], -a, or -- CMD [ARGS…]",
        ));
    }
    let names = requested_events(args);
    if names.is_empty() {
        return Err(usage("-e: empty event list"));
    }
    let interval = match args.interval_ms {
        Some(0) => return Err(usage("-I: the interval must be at least 1 ms")),
        Some(ms) => Some(Duration::from_millis(ms)),
        None => None,
    };
    let format = output_format(args);
    if let Format::Separated(sep) = &format {
        if sep.is_empty() {
            return Err(usage("-x: the separator must not be empty"));
        }
    }

    let mut events: Vec<StatEvent> = stat::resolve_events(&names, resolve)?;
    stat::probe_events(backend, &mut events)?;
    child::catch_interrupts()?;

    // Scopes and their count targets; the held child exists before its counters.
    let mut held: Option<HeldChild> = None;
    let (scopes, what) = if target.all_cpus {
        let cpus = hwqos_pmu::target::online_cpus(std::path::Path::new("/sys"));
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
        if !target.command.is_empty() {
            held = Some(HeldChild::spawn(&target.command)?);
        }
        (scopes, "'system wide'".to_string())
    } else if !target.pids.is_empty() {
        let resolver = hwqos_pmu::target::Resolver::for_this_node();
        let mut scopes = Vec::new();
        for &pid in &target.pids {
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
        let list: Vec<String> = target.pids.iter().map(u32::to_string).collect();
        (scopes, format!("process id '{}'", list.join(",")))
    } else {
        let child = HeldChild::spawn(&target.command)?;
        let scopes = vec![ScopeTargets {
            scope: Scope::Process { pid: child.pid() },
            targets: vec![CountTarget::Task {
                tid: child.pid(),
                inherit: true,
            }],
        }];
        held = Some(child);
        (scopes, format!("'{}'", target.command.join(" ")))
    };

    let set = CounterSet::open(backend, events, scopes)?;
    set.enable(backend)?;
    let start = Instant::now();
    let until = match held {
        Some(child) => {
            let running = child.release()?;
            Until::Child(spawn_waiter(running))
        }
        None if !target.pids.is_empty() => Until::Processes(target.pids.clone()),
        None => Until::Interrupt,
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
                let deltas: Vec<Reading> = match &previous {
                    Some(prev) => now
                        .iter()
                        .zip(prev)
                        .map(|(n, p)| n.delta_since(p))
                        .collect(),
                    None => now.clone(),
                };
                let info = RunInfo {
                    what: what.clone(),
                    elapsed_ns: interval.map_or(0, |i| i.as_nanos() as u64),
                };
                let t = start.elapsed().as_secs_f64();
                write_out(
                    out,
                    &stat::render(&format, &set.events, &deltas, &info, Some(t)),
                )?;
                previous = Some(now);
            }
        }
    };
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    let totals = set.read(backend)?;
    set.disable(backend)?;
    let info = RunInfo { what, elapsed_ns };
    write_out(
        out,
        &stat::render(&format, &set.events, &totals, &info, None),
    )?;
    set.close(backend);
    Ok(u8::try_from(status).unwrap_or(255))
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
        Until::Processes(_) | Until::Interrupt => loop {
            if child::interrupted() {
                return Ok(Wait::Ended(None));
            }
            if let Until::Processes(pids) = until {
                if !pids.iter().any(|&p| child::process_alive(p)) {
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
