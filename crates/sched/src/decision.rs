//! The decision engine (thesis 8.2.6): places processes that share the same
//! r̂ in different cache domains at the level r̂ refers to, fills the rest by
//! CPU demand, honours manual constraints, and explains every decision. Its
//! output is a [`Contract`].
//!
//! Placement, in order:
//!
//! 1. processes whose r̂ is a cache-level resource, groups with more members
//!    first: each goes to the domain of that level holding the fewest members
//!    of its group, then the least loaded one (load = summed CPU demand per
//!    CPU), then the lowest-numbered;
//! 2. the others (no r̂, or a CPU-time r̂) by CPU demand: the least loaded
//!    CPU, then its least loaded core;
//! 3. constraints: `only_cpus` restricts the candidates, `not_same_core`
//!    removes the cores holding the other process (a process with no CPU
//!    left stays unplaced, explained), `max_events` becomes a quota.
//!
//! A process demanding d CPUs gets ⌈d⌉ CPUs inside its chosen domain.

use crate::contract::{Contract, Entry};
use crate::model::{Constraint, ProcessModel, SensitivityModel};
use crate::SchedError;
use hwqos_pmu::target::TargetSelector;
use hwqos_topology::Topology;
use std::collections::BTreeMap;

/// The engine's output: the contract, with the log of every decision in each
/// entry's [`Entry::explanation`].
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The generated contract (`generated_by` set), ready to validate and apply.
    pub contract: Contract,
}

struct Domains {
    kind: String,
    sets: Vec<Vec<u32>>,
}

fn domains_at(topo: &Topology, level: u8) -> Domains {
    let online = topo.online_cpus();
    let keep = |cpus: &[u32]| -> Vec<u32> {
        cpus.iter()
            .copied()
            .filter(|c| online.contains(c))
            .collect()
    };
    let caches = topo.cache_domains(level);
    if !caches.is_empty() {
        let sets: Vec<Vec<u32>> = caches
            .iter()
            .map(|d| keep(&d.cpus))
            .filter(|s| !s.is_empty())
            .collect();
        return Domains {
            kind: format!("L{level}"),
            sets,
        };
    }
    // No cache of that level described: the closest structure that shares it.
    if level <= 2 {
        Domains {
            kind: "core".into(),
            sets: topo
                .cores()
                .iter()
                .map(|c| keep(c))
                .filter(|s| !s.is_empty())
                .collect(),
        }
    } else {
        let mut sets: Vec<Vec<u32>> = topo
            .packages
            .iter()
            .map(|p| keep(&p.cpus))
            .filter(|s| !s.is_empty())
            .collect();
        if sets.is_empty() {
            sets.push(online);
        }
        Domains {
            kind: "package".into(),
            sets,
        }
    }
}

struct Placer<'a> {
    topo: &'a Topology,
    load: BTreeMap<u32, f64>,
    /// CPUs given to each process (by selector).
    placed: BTreeMap<TargetSelector, Vec<u32>>,
}

impl Placer<'_> {
    fn core_of(&self, cpu: u32) -> Vec<u32> {
        self.topo
            .smt_siblings(cpu)
            .map(|s| s.to_vec())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| vec![cpu])
    }

    fn core_load(&self, cpu: u32) -> f64 {
        self.core_of(cpu)
            .iter()
            .map(|c| self.load.get(c).copied().unwrap_or(0.0))
            .sum()
    }

    fn cpu_load(&self, cpu: u32) -> f64 {
        self.load.get(&cpu).copied().unwrap_or(0.0)
    }

    /// The `n` least loaded CPUs of `candidates`: least loaded core first,
    /// then least loaded CPU, then lowest id.
    fn pick(&self, candidates: &[u32], n: usize) -> Vec<u32> {
        let mut c = candidates.to_vec();
        c.sort_by(|a, b| {
            self.cpu_load(*a)
                .total_cmp(&self.cpu_load(*b))
                .then(self.core_load(*a).total_cmp(&self.core_load(*b)))
                .then(a.cmp(b))
        });
        c.truncate(n.max(1));
        c.sort_unstable();
        c
    }

    fn assign(&mut self, p: &ProcessModel, cpus: &[u32]) {
        let share = p.cpu_demand / cpus.len() as f64;
        for c in cpus {
            *self.load.entry(*c).or_insert(0.0) += share;
        }
        self.placed.insert(p.process.clone(), cpus.to_vec());
    }
}

/// Runs the decision engine on a hardware model and a sensitivity model.
pub fn decide(topo: &Topology, model: &SensitivityModel) -> Result<Decision, SchedError> {
    let online = topo.online_cpus();
    if online.is_empty() {
        return Err(SchedError::invalid("hardware model", "no online CPUs"));
    }
    check_constraints(model, &online)?;
    let mut placer = Placer {
        topo,
        load: online.iter().map(|c| (*c, 0.0)).collect(),
        placed: BTreeMap::new(),
    };
    // Group by r̂ (resource name + level).
    let mut groups: BTreeMap<(String, u8), Vec<usize>> = BTreeMap::new();
    let mut cpu_only = Vec::new();
    for (i, p) in model.processes.iter().enumerate() {
        match p
            .sensitive_to
            .first()
            .and_then(|s| s.cache_level().map(|l| (s.resource.clone(), l)))
        {
            Some(key) => groups.entry(key).or_default().push(i),
            None => cpu_only.push(i),
        }
    }
    let mut ordered: Vec<((String, u8), Vec<usize>)> = groups.into_iter().collect();
    ordered.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    let mut explanations: BTreeMap<usize, Vec<String>> = BTreeMap::new();

    for ((resource, level), members) in &ordered {
        let domains = domains_at(topo, *level);
        let mut in_domain = vec![0usize; domains.sets.len()];
        for &i in members {
            let p = &model.processes[i];
            let allowed = allowed_cpus(p, model, &online);
            let mut why = vec![format!(
                "r̂ = {resource} (Corr {:.2}) lives at cache level {level}; {} {} domain(s) here",
                p.sensitive_to[0].correlation,
                domains.sets.len(),
                domains.kind
            )];
            let mut best: Option<(usize, Vec<u32>)> = None;
            let mut best_key = (usize::MAX, f64::MAX);
            for (d, set) in domains.sets.iter().enumerate() {
                let cands = candidates(&placer, p, model, set, &allowed);
                if cands.is_empty() {
                    continue;
                }
                let load = set.iter().map(|c| placer.cpu_load(*c)).sum::<f64>() / set.len() as f64;
                let key = (in_domain[d], load);
                if key.0 < best_key.0 || (key.0 == best_key.0 && key.1 < best_key.1) {
                    best_key = key;
                    best = Some((d, cands));
                }
            }
            let Some((d, cands)) = best else {
                why.push("no allowed CPU in any domain; left unplaced".into());
                explanations.insert(i, why);
                continue;
            };
            let cpus = placer.pick(&cands, p.cpu_demand.ceil() as usize);
            let others: Vec<String> = members
                .iter()
                .filter(|&&j| j != i && placer.placed.contains_key(&model.processes[j].process))
                .map(|&j| model.processes[j].process.to_string())
                .collect();
            if in_domain[d] == 0 {
                why.push(format!(
                    "placed in {} domain {:?}, which holds no other process sensitive to {resource}{}",
                    domains.kind,
                    domains.sets[d],
                    if others.is_empty() { String::new() } else { format!(" (kept apart from {})", others.join(", ")) }
                ));
            } else {
                why.push(format!(
                    "every {} domain already holds a process sensitive to {resource}; shared domain {:?} with the lowest count and load",
                    domains.kind, domains.sets[d]
                ));
            }
            why.push(format!(
                "CPUs {cpus:?}: the least loaded in that domain for demand {:.2}",
                p.cpu_demand
            ));
            in_domain[d] += 1;
            placer.assign(p, &cpus);
            explanations.insert(i, why);
        }
    }

    let mut rest = cpu_only;
    rest.sort_by(|a, b| {
        model.processes[*b]
            .cpu_demand
            .total_cmp(&model.processes[*a].cpu_demand)
            .then(a.cmp(b))
    });
    for i in rest {
        let p = &model.processes[i];
        let allowed = allowed_cpus(p, model, &online);
        let cands = candidates(&placer, p, model, &online, &allowed);
        let mut why = vec![match p.sensitive_to.first() {
            Some(s) => format!(
                "r̂ = {} (Corr {:.2}) is CPU time, not a shared cache: placed by CPU demand",
                s.resource, s.correlation
            ),
            None => "no resource sensitivity above θ: placed by CPU demand".to_string(),
        }];
        if cands.is_empty() {
            why.push("no allowed CPU; left unplaced".into());
            explanations.insert(i, why);
            continue;
        }
        let cpus = placer.pick(&cands, p.cpu_demand.ceil() as usize);
        why.push(format!(
            "CPUs {cpus:?}: least loaded (load before {:.2}) for demand {:.2}",
            cpus.iter().map(|c| placer.cpu_load(*c)).sum::<f64>(),
            p.cpu_demand
        ));
        placer.assign(p, &cpus);
        explanations.insert(i, why);
    }

    let mut entries = Vec::new();
    for (i, p) in model.processes.iter().enumerate() {
        let mut why = explanations.remove(&i).unwrap_or_default();
        let mut quotas = p.quotas.clone();
        let mut period_us = p.period_us;
        for c in &model.constraints {
            match c {
                Constraint::MaxEvents {
                    process,
                    event,
                    quota,
                    period_us: pu,
                } if *process == p.process => {
                    quotas.insert(event.clone(), *quota);
                    period_us = *pu;
                    why.push(format!("constraint: at most {quota} {event} per {pu} µs"));
                }
                Constraint::OnlyCpus { process, cpus } if *process == p.process => {
                    why.push(format!("constraint: only CPUs {cpus:?}"));
                }
                Constraint::NotSameCore { process, other }
                    if *process == p.process || *other == p.process =>
                {
                    why.push(format!(
                        "constraint: {process} never on the same core as {other}"
                    ));
                }
                _ => {}
            }
        }
        let allowed = model.constraints.iter().find_map(|c| match c {
            Constraint::OnlyCpus { process, cpus } if *process == p.process => Some(cpus.clone()),
            _ => None,
        });
        entries.push(Entry {
            name: format!("{}", p.process),
            description: match p.sensitive_to.first() {
                Some(s) => format!("sensitive to {} (Corr {:.2})", s.resource, s.correlation),
                None => "no resource sensitivity above θ".into(),
            },
            process: p.process.clone(),
            allowed_cpus: allowed,
            affinity: placer.placed.get(&p.process).cloned().unwrap_or_default(),
            period_us,
            quotas,
            quota_scope: Default::default(),
            explanation: why,
            force: false,
        });
    }
    let mut contract = Contract::new(entries);
    contract.generated_by = Some("hwqos-sched decision engine".into());
    contract.validate()?;
    Ok(Decision { contract })
}

/// Every constraint must be one the engine can apply: its processes in the
/// model (a constraint about a process the model lacks would be dropped
/// without a word) and its CPUs online on the hardware model.
fn check_constraints(model: &SensitivityModel, online: &[u32]) -> Result<(), SchedError> {
    let known = |sel: &TargetSelector| model.processes.iter().any(|p| p.process == *sel);
    for (i, c) in model.constraints.iter().enumerate() {
        let what = format!("sensitivity model, constraints[{i}]");
        let (processes, kind): (Vec<&TargetSelector>, &str) = match c {
            Constraint::NotSameCore { process, other } => (vec![process, other], "not_same_core"),
            Constraint::OnlyCpus { process, cpus } => {
                let offline: Vec<u32> = cpus
                    .iter()
                    .copied()
                    .filter(|c| !online.contains(c))
                    .collect();
                if cpus.is_empty() || offline.len() == cpus.len() {
                    return Err(SchedError::invalid(
                        what,
                        format!(
                            "only_cpus for `{process}` allows no online CPU ({cpus:?}; online: {online:?})"
                        ),
                    ));
                }
                (vec![process], "only_cpus")
            }
            Constraint::MaxEvents { process, quota, .. } => {
                if *quota == 0 {
                    return Err(SchedError::invalid(
                        what,
                        format!("max_events for `{process}` has a quota of 0"),
                    ));
                }
                (vec![process], "max_events")
            }
        };
        if let Some(missing) = processes.into_iter().find(|sel| !known(sel)) {
            return Err(SchedError::invalid(
                what,
                format!(
                    "{kind} names `{missing}`, which has no entry in `processes`: the constraint could not be applied"
                ),
            ));
        }
    }
    Ok(())
}

fn allowed_cpus(p: &ProcessModel, model: &SensitivityModel, online: &[u32]) -> Vec<u32> {
    let mut allowed = online.to_vec();
    for c in &model.constraints {
        if let Constraint::OnlyCpus { process, cpus } = c {
            if *process == p.process {
                allowed.retain(|x| cpus.contains(x));
            }
        }
    }
    allowed
}

/// CPUs of `set` the process may use: allowed, and off the cores of processes
/// it must not share a core with (when that leaves anything).
fn candidates(
    placer: &Placer,
    p: &ProcessModel,
    model: &SensitivityModel,
    set: &[u32],
    allowed: &[u32],
) -> Vec<u32> {
    let base: Vec<u32> = set
        .iter()
        .copied()
        .filter(|c| allowed.contains(c))
        .collect();
    let mut banned = Vec::new();
    for c in &model.constraints {
        if let Constraint::NotSameCore { process, other } = c {
            let peer = if *process == p.process {
                other
            } else if *other == p.process {
                process
            } else {
                continue;
            };
            for cpu in placer.placed.get(peer).into_iter().flatten() {
                banned.extend(placer.core_of(*cpu));
            }
        }
    }
    base.into_iter().filter(|c| !banned.contains(c)).collect()
}
