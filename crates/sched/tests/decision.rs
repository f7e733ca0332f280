//! Decision-engine placements on the topology fixtures of hwqos-topology.

use hwqos_sched::contract::Contract;
use hwqos_sched::decision::decide;
use hwqos_sched::model::{Constraint, ProcessModel, Sensitivity, SensitivityModel};
use hwqos_topology::Topology;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fixture(name: &str) -> Topology {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../topology/tests/fixtures")
        .join(name);
    Topology::read(&root).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn proc_model(name: &str, resource: Option<(&str, f64)>) -> ProcessModel {
    ProcessModel {
        process: format!("name:{name}").parse().unwrap(),
        sensitive_to: resource
            .map(|(r, c)| {
                vec![Sensitivity {
                    resource: r.into(),
                    correlation: c,
                    level: None,
                }]
            })
            .unwrap_or_default(),
        cpu_demand: 1.0,
        quotas: BTreeMap::new(),
        period_us: 10_000,
    }
}

fn placements(c: &Contract) -> BTreeMap<String, Vec<u32>> {
    c.entries
        .iter()
        .map(|e| {
            (
                e.process.to_string().replace("name:", ""),
                e.affinity.clone(),
            )
        })
        .collect()
}

fn core(topo: &Topology, cpu: u32) -> Vec<u32> {
    topo.smt_siblings(cpu).unwrap().to_vec()
}

/// Thesis 8.4.1: two memory-bound (L1D-sensitive) and two CPU-bound
/// processes on the 2-core/4-thread i7-4600U (siblings (0,2), (1,3)): the
/// memory-bound ones on different cores (different L1D), the CPU-bound ones
/// on the remaining hyperthreads.
#[test]
fn thesis_8_4_1_on_the_haswell_laptop() {
    let topo = fixture("haswell-laptop");
    let model = SensitivityModel {
        processes: vec![
            proc_model("mem1", Some(("L1-dcache-load-misses", 0.91))),
            proc_model("mem2", Some(("L1-dcache-load-misses", 0.87))),
            proc_model("cpu1", Some(("sw.task_clock", 0.95))),
            proc_model("cpu2", None),
        ],
        ..SensitivityModel::default()
    };
    let d = decide(&topo, &model).unwrap();
    let p = placements(&d.contract);
    assert_eq!(p["mem1"], vec![0]);
    assert_eq!(p["mem2"], vec![1]);
    assert_eq!(p["cpu1"], vec![2]);
    assert_eq!(p["cpu2"], vec![3]);
    assert_ne!(core(&topo, p["mem1"][0]), core(&topo, p["mem2"][0]));
    for e in &d.contract.entries {
        assert!(!e.explanation.is_empty(), "{} has no explanation", e.name);
    }
    assert!(d.contract.entries[1]
        .explanation
        .iter()
        .any(|l| l.contains("kept apart from name:mem1")));
    // The contract is valid JSON of the published schema.
    Contract::parse(&d.contract.to_json()).unwrap();
}

/// 16-CPU two-socket server: four LLC-sensitive processes go two per socket,
/// each on its own core; eight L1-sensitive ones each get their own core.
#[test]
fn numa_server_spreads_by_llc_and_l1() {
    let topo = fixture("numa-server");
    let llc = topo.cache_domains(3);
    assert_eq!(llc.len(), 2);
    let mut model = SensitivityModel::default();
    for i in 0..4 {
        model.processes.push(proc_model(
            &format!("llc{i}"),
            Some(("LLC-load-misses", 0.8)),
        ));
    }
    let d = decide(&topo, &model).unwrap();
    let p = placements(&d.contract);
    let socket = |cpu: u32| llc.iter().position(|d| d.cpus.contains(&cpu)).unwrap();
    let per_socket: Vec<usize> = (0..2)
        .map(|s| p.values().filter(|c| socket(c[0]) == s).count())
        .collect();
    assert_eq!(per_socket, vec![2, 2]);
    let cores: std::collections::BTreeSet<Vec<u32>> =
        p.values().map(|c| core(&topo, c[0])).collect();
    assert_eq!(cores.len(), 4);

    let mut model = SensitivityModel::default();
    for i in 0..8 {
        model.processes.push(proc_model(
            &format!("l1_{i}"),
            Some(("L1-dcache-loads", 0.8)),
        ));
    }
    for i in 0..8 {
        model.processes.push(proc_model(&format!("cpu{i}"), None));
    }
    let d = decide(&topo, &model).unwrap();
    let p = placements(&d.contract);
    let l1_cores: std::collections::BTreeSet<Vec<u32>> = (0..8)
        .map(|i| core(&topo, p[&format!("l1_{i}")][0]))
        .collect();
    assert_eq!(
        l1_cores.len(),
        8,
        "two L1-sensitive processes share a core: {p:?}"
    );
    let all: std::collections::BTreeSet<u32> = p.values().flatten().copied().collect();
    assert_eq!(all.len(), 16, "every CPU used once: {p:?}");
}

/// big.LITTLE: two L2-sensitive processes go to different clusters.
#[test]
fn arm_biglittle_separates_l2_clusters() {
    let topo = fixture("arm-biglittle");
    let l2 = topo.cache_domains(2);
    assert_eq!(l2.len(), 2);
    let model = SensitivityModel {
        processes: vec![
            proc_model("a", Some(("hw.l2.misses", 0.9))),
            proc_model("b", Some(("hw.l2.misses", 0.9))),
        ],
        ..SensitivityModel::default()
    };
    let p = placements(&decide(&topo, &model).unwrap().contract);
    let cluster = |cpu: u32| l2.iter().position(|d| d.cpus.contains(&cpu)).unwrap();
    assert_ne!(cluster(p["a"][0]), cluster(p["b"][0]));
}

/// This 2-vCPU VM has one LLC: two memory-sensitive processes cannot be
/// separated at that level, and the explanation says so.
#[test]
fn this_vm_explains_what_it_cannot_separate() {
    let topo = fixture("this-vm");
    let model = SensitivityModel {
        processes: vec![
            proc_model("m1", Some(("sw.page_faults", 0.9))),
            proc_model("m2", Some(("sw.page_faults", 0.9))),
        ],
        ..SensitivityModel::default()
    };
    let d = decide(&topo, &model).unwrap();
    let p = placements(&d.contract);
    assert_ne!(p["m1"], p["m2"], "still on different CPUs by load");
    if topo.cache_domains(3).len() == 1 {
        assert!(
            d.contract.entries[1]
                .explanation
                .iter()
                .any(|l| l.contains("already holds")),
            "{:?}",
            d.contract.entries[1].explanation
        );
    }
}

#[test]
fn constraints_are_honoured() {
    let topo = fixture("haswell-laptop");
    let mut model = SensitivityModel {
        processes: vec![
            proc_model("a", None),
            proc_model("b", None),
            proc_model("c", None),
        ],
        ..SensitivityModel::default()
    };
    model.constraints = vec![
        Constraint::OnlyCpus {
            process: "name:a".parse().unwrap(),
            cpus: vec![1, 3],
        },
        Constraint::NotSameCore {
            process: "name:b".parse().unwrap(),
            other: "name:a".parse().unwrap(),
        },
        Constraint::MaxEvents {
            process: "name:c".parse().unwrap(),
            event: "sw.page_faults".into(),
            quota: 500,
            period_us: 20_000,
        },
    ];
    let d = decide(&topo, &model).unwrap();
    let p = placements(&d.contract);
    assert!([1, 3].contains(&p["a"][0]));
    assert_eq!(d.contract.entries[0].allowed_cpus, Some(vec![1, 3]));
    assert_ne!(core(&topo, p["a"][0]), core(&topo, p["b"][0]));
    assert_eq!(d.contract.entries[2].quotas["sw.page_faults"], 500);
    assert_eq!(d.contract.entries[2].period_us, 20_000);
}

#[test]
fn a_constraint_the_engine_cannot_apply_is_an_error_not_dropped() {
    let topo = fixture("haswell-laptop");
    let base = SensitivityModel {
        processes: vec![proc_model("a", None), proc_model("b", None)],
        ..SensitivityModel::default()
    };
    let cases = [
        (
            Constraint::NotSameCore {
                process: "name:a".parse().unwrap(),
                other: "name:ghost".parse().unwrap(),
            },
            "`name:ghost`, which has no entry in `processes`",
        ),
        (
            Constraint::OnlyCpus {
                process: "name:nobody".parse().unwrap(),
                cpus: vec![1],
            },
            "`name:nobody`",
        ),
        (
            Constraint::OnlyCpus {
                process: "name:a".parse().unwrap(),
                cpus: vec![64, 65],
            },
            "allows no online CPU",
        ),
        (
            Constraint::MaxEvents {
                process: "name:b".parse().unwrap(),
                event: "sw.page_faults".into(),
                quota: 0,
                period_us: 10_000,
            },
            "quota of 0",
        ),
    ];
    for (c, needle) in cases {
        let mut model = base.clone();
        model.constraints = vec![c];
        let e = decide(&topo, &model).unwrap_err().to_string();
        assert!(e.contains("constraints[0]") && e.contains(needle), "{e}");
    }
}
