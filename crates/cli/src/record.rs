//! `hwqos record`: sample a command, processes or the whole system with the
//! monitor engine ([`hwqos_pmu::sampler::Sampler`]) at a fixed rate and write a
//! JSON-lines recording (schema `hwqos.recording/1`), optionally also as CSV.
//!
//! Every tick yields one frame: the counters of the event set whose turn it was
//! (sets rotate per tick, thesis 5.3.1), derived metrics of that set, and the
//! `/proc` metrics of the system, the CPUs and the monitored processes.

use crate::args::RecordArgs;
use crate::child::{self, HeldChild};
use crate::error::usage;
use anyhow::{Context, Result};
use hwqos_core::metric::names;
use hwqos_core::recording::{
    self, CounterClass, RecordedBackend, RecordingHeader, RecordingWriter,
};
use hwqos_core::ticker::Ticker;
use hwqos_core::{Frame, Timestamp};
use hwqos_pmu::backend::BackendKind;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::{Sampler, SamplerConfig};
use hwqos_pmu::target::TargetSelector;
use std::io::{BufWriter, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The default event sets: the kernel software events every node has, and
/// instructions/cycles (for IPC/CPI) where the node has a PMU.
pub fn default_event_sets() -> Vec<Vec<String>> {
    vec![
        vec![
            names::SW_TASK_CLOCK.into(),
            names::SW_CONTEXT_SWITCHES.into(),
            names::SW_PAGE_FAULTS.into(),
            names::SW_CPU_MIGRATIONS.into(),
        ],
        vec![names::HW_INSTRUCTIONS.into(), names::HW_CYCLES.into()],
    ]
}

/// Parses `-e` event sets: sets separated by `;`, events in a set by `,`
/// (commas inside `pmu/…/` terms stay with their event).
pub fn parse_event_sets(spec: &str) -> Result<Vec<Vec<String>>> {
    let sets: Vec<Vec<String>> = spec
        .split(';')
        .map(crate::stat::split_event_list)
        .filter(|s| !s.is_empty())
        .collect();
    if sets.is_empty() {
        return Err(usage(format!(
            "-e `{spec}`: no events (expected EV,EV;EV,…)"
        )));
    }
    Ok(sets)
}

/// Whether the events that will be counted are hardware, software, both or none.
pub fn counter_class(sets: &[Vec<String>], catalog: &Catalog) -> CounterClass {
    let metrics: Vec<_> = sets
        .iter()
        .flatten()
        .filter_map(|name| catalog.resolve(name).ok())
        .map(|ev| ev.metric)
        .collect();
    CounterClass::of_families(metrics.iter().map(|m| m.family()))
}

/// A record or top session's sampler with the catalog that resolved its events.
pub struct NodeSampler {
    /// The sampler set up for the session's targets and event sets.
    pub sampler: Sampler,
    /// This node's event catalog, which resolved the events.
    pub catalog: Catalog,
}

/// Builds a sampler on the real perf backend. Unknown events and bad rates are
/// usage errors (exit 2).
pub fn node_sampler(cfg: SamplerConfig) -> Result<NodeSampler> {
    let catalog = Catalog::for_this_node();
    let sampler = Sampler::for_this_node(cfg).context("setting up sampling")?;
    // One line per cause: events refused for the same reason are named together.
    let mut by_reason: Vec<(String, Vec<String>)> = Vec::new();
    for u in sampler.unavailable() {
        match by_reason.iter_mut().find(|(r, _)| *r == u.reason) {
            Some((_, names)) => names.push(u.name.clone()),
            None => by_reason.push((u.reason.clone(), vec![u.name.clone()])),
        }
    }
    for (reason, names) in by_reason {
        eprintln!("hwqos: <not supported>: {}: {reason}", names.join(", "));
    }
    Ok(NodeSampler { sampler, catalog })
}

/// Runs `hwqos record`; returns the exit code (the command's own for `-- CMD`).
pub fn run(args: &RecordArgs) -> Result<u8> {
    let t = &args.target;
    let modes = usize::from(!t.pids.is_empty())
        + usize::from(t.all_cpus)
        + usize::from(!t.command.is_empty());
    if modes > 1 && !(t.all_cpus && t.pids.is_empty()) {
        return Err(usage("hwqos record takes at most one of -p PID and -- CMD"));
    }
    if modes == 0 && args.duration.is_none() {
        return Err(usage(
            "hwqos record needs something to record (-p PID, -a or -- CMD) or --duration for system metrics only",
        ));
    }
    let mut ticker =
        Ticker::from_rate_hz(args.freq).map_err(|e| usage(format!("-F {}: {e}", args.freq)))?;
    let duration = match args.duration {
        Some(d) if !(d.is_finite() && d > 0.0) => {
            return Err(usage(format!(
                "--duration {d}: must be a positive number of seconds"
            )))
        }
        Some(d) => Some(Duration::from_secs_f64(d)),
        None => None,
    };
    let event_sets = match &args.events {
        Some(spec) => parse_event_sets(spec)?,
        None => default_event_sets(),
    };
    let file = std::fs::File::create(&args.output)
        .with_context(|| format!("cannot write the recording {}", args.output.display()))?;
    let csv_file = match &args.csv {
        Some(p) => Some(
            std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?,
        ),
        None => None,
    };
    child::catch_interrupts()?;

    let held = if t.command.is_empty() {
        None
    } else {
        Some(HeldChild::spawn(&t.command)?)
    };
    let mut targets: Vec<TargetSelector> = t.pids.iter().map(|&p| TargetSelector::Pid(p)).collect();
    if let Some(h) = &held {
        targets.push(TargetSelector::Pid(h.pid()));
    }
    let cfg = SamplerConfig {
        targets,
        per_cpu: t.all_cpus,
        event_sets: event_sets.clone(),
        procfs: true,
        rescan_every: 1,
        ..SamplerConfig::default()
    };
    let NodeSampler {
        mut sampler,
        catalog,
    } = node_sampler(cfg)?;
    if !t.pids.is_empty() && sampler.targets().is_empty() {
        return Err(usage(format!("-p: no process with pid {:?}", t.pids)));
    }
    let started = Timestamp::now();
    let mut header = RecordingHeader::new(
        recording::node_name(),
        started,
        args.freq,
        match sampler.backend_kind() {
            BackendKind::Perf => RecordedBackend::Perf,
            BackendKind::Simulated => RecordedBackend::Simulated,
        },
        counter_class(&sampler.event_sets(), &catalog),
    );
    header.event_sets = sampler.event_sets();
    header.writer = format!("hwqos record {}", env!("CARGO_PKG_VERSION"));
    let mut writer = RecordingWriter::new(BufWriter::new(file), &header)
        .with_context(|| format!("writing {}", args.output.display()))?;
    let mut kept: Vec<Frame> = Vec::new();
    // The sampler names a process after its `comm` when it is attached, and the
    // held child is still a copy of hwqos then: label it with the command.
    let child_label = held.as_ref().map(|h| {
        let program = t.command[0]
            .rsplit('/')
            .next()
            .unwrap_or(&t.command[0])
            .to_string();
        (hwqos_core::Scope::Process { pid: h.pid() }, program)
    });
    let mut write =
        |mut frame: Frame, writer: &mut RecordingWriter<BufWriter<std::fs::File>>| -> Result<()> {
            if let Some((scope, name)) = &child_label {
                for l in frame.labels.iter_mut().filter(|l| &l.scope == scope) {
                    l.name.clone_from(name);
                }
            }
            writer
                .write_frame(&frame)
                .with_context(|| format!("writing {}", args.output.display()))?;
            if csv_file.is_some() {
                kept.push(frame);
            }
            Ok(())
        };

    // The first sample opens and enables the counters; only then may the command run.
    write(sampler.sample(Timestamp::now()), &mut writer)?;
    let start = Instant::now();
    let waiter = match held {
        Some(h) => {
            let running = h.release()?;
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(running.wait());
            });
            Some(rx)
        }
        None => None,
    };
    let bar = duration.map(|d| crate::progress::timed(d, "hwqos record"));
    let mut status = 0;
    loop {
        ticker.wait();
        write(sampler.sample(Timestamp::now()), &mut writer)?;
        if let Some(bar) = &bar {
            bar.set_position(start.elapsed().as_millis() as u64);
            bar.set_message(format!("{} frames", writer.frames_written()));
        }
        if let Some(rx) = &waiter {
            match rx.try_recv() {
                Ok(code) => {
                    status = code?;
                    break;
                }
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => anyhow::bail!("lost track of the command"),
            }
        }
        if !t.pids.is_empty() && !t.pids.iter().any(|&p| child::process_alive(p)) {
            break;
        }
        if child::interrupted() || duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let frames = writer.frames_written();
    let elapsed = start.elapsed().as_secs_f64();
    let ticks = ticker.stats();
    writer
        .finish()
        .with_context(|| format!("writing {}", args.output.display()))?;
    if let (Some(file), Some(path)) = (csv_file, &args.csv) {
        let mut out = recording::write_csv(BufWriter::new(file), kept.iter())
            .with_context(|| format!("writing {}", path.display()))?;
        out.flush()
            .with_context(|| format!("writing {}", path.display()))?;
    }
    // Frames after the first, over the time since it: the rate achieved.
    let achieved = if elapsed > 0.0 {
        frames.saturating_sub(1) as f64 / elapsed
    } else {
        0.0
    };
    let scheduled = ticks.ticks + ticks.missed;
    if scheduled > 0 && ticks.missed * 100 > scheduled {
        tracing::warn!(
            "-F {} Hz is more than this node sustains with these events and targets: {} of {} ticks missed, {achieved:.1} Hz achieved (each frame reports its own interval, so rates stay right)",
            args.freq,
            ticks.missed,
            scheduled
        );
    }
    eprintln!(
        "hwqos record: {frames} frames at {} Hz ({achieved:.1} Hz achieved) written to {}",
        args.freq,
        args.output.display()
    );
    Ok(u8::try_from(status).unwrap_or(255))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_sets_parse() {
        assert_eq!(
            parse_event_sets("task-clock,page-faults; cpu/event=0x3c,umask=0x0/").unwrap(),
            vec![
                vec!["task-clock".to_string(), "page-faults".into()],
                vec!["cpu/event=0x3c,umask=0x0/".into()]
            ]
        );
        let err = parse_event_sets(" ; ").unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), crate::error::EXIT_USAGE);
    }
}
