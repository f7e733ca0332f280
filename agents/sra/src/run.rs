//! `hwqos-sra run`: the closed loop — frames (from the node's monitor, or
//! sampled here when none serves: [`crate::frames`]), then every evaluation
//! period analyse → update and save the model → decide → save and apply the
//! contract. The loop feeds systemd's watchdog on each pass and stops on
//! SIGTERM/SIGINT.
//!
//! With `[agent] contract_dir` the fleet decides instead: the loop still
//! analyses and saves the model, but runs no decision; it applies the best
//! contract of the directory ([`hwqos_sched::contract_dir`]) whenever that
//! changes — seen through inotify on each pass, and by a full rescan every
//! evaluation period. Rejected files are logged with their reason and
//! counted; when the directory holds no valid contract (empty, all bad,
//! missing) the contract applied last stays applied.

use crate::agent::{Agent, SharedState};
use crate::config::Config;
use crate::frames::{FrameOrigin, FrameSource};
use hwqos_agent::lifecycle::{Heartbeat, StopSignals};
use hwqos_agent::watched::WatchedFiles;
use hwqos_core::Frame;
use hwqos_pmu::target::{Resolver, TargetSelector};
use hwqos_sched::analysis::AnalysisParams;
use hwqos_sched::contract::Contract;
use hwqos_sched::contract_dir::{contract_dir, Limits};
use hwqos_sched::model::SensitivityModel;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The model key of process `pid`: the configured selector when it denotes
/// exactly this process (`name:victim`), else `pid:N`.
pub fn selector_for(resolver: &Resolver, targets: &[TargetSelector], pid: u32) -> TargetSelector {
    targets
        .iter()
        .find(|t| {
            resolver
                .resolve(std::slice::from_ref(*t))
                .map(|r| r.processes.len() == 1 && r.processes[0].pid == pid)
                .unwrap_or(false)
        })
        .cloned()
        .unwrap_or(TargetSelector::Pid(pid))
}

/// Re-applies the contract saved by an earlier run; returns its version (0: none).
fn reapply_saved(config: &Config, agent: &mut Agent) -> u64 {
    let path = &config.agent.contract;
    let Ok(text) = hwqos_sched::input::read_regular(path, hwqos_sched::input::MAX_INPUT_BYTES)
    else {
        return 0;
    };
    match Contract::parse(&text) {
        Ok(c) => {
            tracing::info!(version = c.version, "re-applying the saved contract");
            let v = c.version;
            agent.apply(c);
            v
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "saved contract ignored");
            0
        }
    }
}

/// The watched contract directory of `run` (`[agent] contract_dir`).
struct FleetContracts {
    files: WatchedFiles<Contract>,
}

impl FleetContracts {
    fn new(path: &std::path::Path) -> FleetContracts {
        FleetContracts {
            files: WatchedFiles::new(contract_dir(path, Limits::default()), "contract"),
        }
    }

    /// Rescans and applies the directory's best contract when it differs
    /// from the one applied; returns whether it applied one.
    fn sync(&mut self, config: &Config, agent: &mut Agent) -> bool {
        let dir = self.files.path().display().to_string();
        let Some(scan) = self.files.rescan() else {
            return false;
        };
        agent.contract_dir_rejected += scan.new_rejections.len() as u64;
        let Some((file, contract)) = scan.chosen() else {
            return false;
        };
        if agent.contract() == Some(contract.as_ref()) {
            return false;
        }
        tracing::info!(
            dir,
            file = %file.name,
            version = contract.version,
            previous = agent.contract().map(|c| c.version).unwrap_or(0),
            "the contract directory's best contract changed"
        );
        let c = Contract::clone(contract);
        let path = &config.agent.contract;
        if let Err(e) = hwqos_core::fs::write_atomic(path, c.to_json().as_bytes(), 0o644) {
            tracing::warn!(path = %path.display(), error = %e, "cannot save the contract");
        }
        agent.apply(c);
        true
    }
}

/// Runs the loop until a stop is asked for.
pub fn run_loop(
    config: &Config,
    agent: &mut Agent,
    signals: &StopSignals,
    heartbeat: &mut Heartbeat,
    shared: &SharedState,
) -> anyhow::Result<()> {
    let a = &config.agent;
    let mut frames_in = FrameSource::start(config)?;
    let topology = hwqos_topology::Topology::this_node()?;
    let mut model = SensitivityModel::load(&a.model)?;
    let mut fleet = a.contract_dir.as_deref().map(FleetContracts::new);
    // The directory's contract first; the saved one when it has none.
    let from_dir = match &mut fleet {
        Some(f) => f.sync(config, agent),
        None => false,
    };
    let mut version = if from_dir {
        agent.contract().map(|c| c.version).unwrap_or(0)
    } else {
        reapply_saved(config, agent)
    };
    let params = AnalysisParams {
        step_ns: config.analysis.step_ms * 1_000_000,
        filter_order: config.analysis.filter_order,
        filter_cutoff: config.analysis.filter_cutoff,
        threshold: config.analysis.threshold,
    };
    let mut frames: VecDeque<Frame> = VecDeque::new();
    let eval_every = Duration::from_secs_f64(a.evaluation_period_s);
    let mut last_eval = Instant::now();
    let mut last_maintain = Instant::now();
    let publish = |agent: &Agent| {
        *shared.lock().unwrap_or_else(|p| p.into_inner()) = agent.state();
    };
    while !signals.stop_requested() {
        if signals.take_reload() {
            tracing::warn!("SIGHUP: hwqos-sra run does not reload its configuration; restart it to apply a new one");
        }
        // Waits about one sample interval: for the monitor's next frame, or
        // for the own sampler's next tick.
        if let Some(frame) = frames_in.next_frame()? {
            match frames_in.origin() {
                FrameOrigin::Monitor => agent.frames_from_monitor += 1,
                FrameOrigin::OwnSampler => agent.frames_sampled += 1,
            }
            if frames.len() == a.max_frames {
                frames.pop_front();
            }
            frames.push_back(frame);
        }
        heartbeat.beat();
        if let Some(f) = &mut fleet {
            if f.files.poll() {
                f.sync(config, agent);
                publish(agent);
            }
        }
        if last_maintain.elapsed() >= Duration::from_secs(1) {
            agent.maintain();
            publish(agent);
            last_maintain = Instant::now();
        }
        if last_eval.elapsed() < eval_every {
            continue;
        }
        last_eval = Instant::now();
        if let Some(f) = &mut fleet {
            // The fallback for a lost watch or an overflowed queue.
            f.files.ensure_watch();
            f.sync(config, agent);
        }
        let list: Vec<Frame> = frames.drain(..).collect();
        let keys = Resolver::for_this_node();
        let updated = hwqos_sched::evaluation::evaluate(
            &list,
            &config.monitor.x_metric,
            &params,
            &mut model,
            |pid| selector_for(&keys, &config.monitor.targets, pid),
        );
        agent.evaluations += 1;
        if updated == 0 {
            tracing::info!(
                frames = list.len(),
                "evaluation: no process with both resource samples and x; contract unchanged"
            );
            publish(agent);
            continue;
        }
        if let Err(e) = model.save(&a.model) {
            tracing::warn!(error = %e, "cannot save the sensitivity model");
        }
        if fleet.is_some() {
            // The fleet decides: no decision here.
            publish(agent);
            continue;
        }
        match hwqos_sched::decision::decide(&topology, &model) {
            Ok(d) => {
                version += 1;
                let mut c = d.contract;
                c.version = version;
                if let Err(e) =
                    hwqos_core::fs::write_atomic(&a.contract, c.to_json().as_bytes(), 0o644)
                {
                    tracing::warn!(path = %a.contract.display(), error = %e, "cannot save the contract");
                }
                agent.apply(c);
            }
            Err(e) => tracing::warn!(error = %e, "decision failed; contract unchanged"),
        }
        publish(agent);
    }
    Ok(())
}
