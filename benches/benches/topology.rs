//! Benchmarks of hwqos-topology: reading a node's topology from sysfs (a
//! 16-CPU two-socket fixture tree and this node's live `/sys`), the CPU-list
//! and CPU-mask parsers, cache-domain lookups, and the versioned hardware
//! model file read back.
//!
//! `cargo bench -p hwqos-benches --bench topology` measures;
//! `… -- --test` runs every benchmark once as a smoke test.

use criterion::{criterion_group, criterion_main, Criterion};
use hwqos_topology::sysfs::{format_cpu_list, parse_cpu_list, parse_cpu_mask};
use hwqos_topology::{HardwareModel, OsInventory, Topology};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The thesis' 16-CPU two-socket server (hwqos-topology's test fixture):
/// a sysfs and procfs tree of 746 files.
fn numa_server_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/topology/tests/fixtures/numa-server")
}

fn bench_read(c: &mut Criterion) {
    let root = numa_server_root();
    c.bench_function("topology_read_numa_server_fixture", |b| {
        b.iter(|| black_box(Topology::read(black_box(&root)).expect("the fixture reads")))
    });
    if let Err(e) = Topology::this_node() {
        eprintln!("skipping topology_read_this_node: {e}");
        return;
    }
    c.bench_function("topology_read_this_node", |b| {
        b.iter(|| black_box(Topology::this_node().ok()))
    });
}

fn bench_cpu_lists(c: &mut Criterion) {
    // A 256-CPU node with SMT: online CPUs and one core's siblings.
    c.bench_function("parse_cpu_list_256_cpus", |b| {
        b.iter(|| parse_cpu_list(black_box("0-63,128-191,64-127,192-255")))
    });
    c.bench_function("parse_cpu_mask_256_cpus", |b| {
        b.iter(|| {
            parse_cpu_mask(black_box(
                "ffffffff,ffffffff,ffffffff,ffffffff,ffffffff,ffffffff,ffffffff,ffffffff",
            ))
        })
    });
    let scattered: Vec<u32> = (0..256).filter(|c| c % 3 != 0).collect();
    c.bench_function("format_cpu_list_170_cpus_85_ranges", |b| {
        b.iter(|| format_cpu_list(black_box(&scattered)))
    });
}

fn bench_cache_domains(c: &mut Criterion) {
    let topo = Topology::read(&numa_server_root()).expect("the fixture reads");
    c.bench_function("llc_domains_numa_server", |b| {
        b.iter(|| black_box(black_box(&topo).llc()))
    });
    let cpus = topo.online_cpus();
    let levels = topo.data_cache_levels();
    // Every CPU's cache at every data level: what placing processes by
    // shared cache looks up.
    c.bench_function("cache_of_every_cpu_and_level_numa_server", |b| {
        b.iter(|| {
            let mut found = 0usize;
            for &cpu in &cpus {
                for &level in &levels {
                    found += usize::from(black_box(&topo).cache_of(cpu, level).is_some());
                }
            }
            black_box(found)
        })
    });
}

fn bench_model_file(c: &mut Criterion) {
    let root = numa_server_root();
    let topo = Topology::read(&root).expect("the fixture reads");
    let model = HardwareModel::new(topo, OsInventory::read(&root), None);
    let path = std::env::temp_dir().join(format!("hwqos-bench-model-{}.json", std::process::id()));
    model.save(&path).expect("the model saves");
    c.bench_function("hardware_model_load_numa_server", |b| {
        b.iter(|| black_box(HardwareModel::load(black_box(&path)).expect("the model loads")))
    });
    c.bench_function("hardware_model_to_json_numa_server", |b| {
        b.iter(|| black_box(black_box(&model).to_json()))
    });
    let _ = std::fs::remove_file(&path);
}

criterion_group!(
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_read, bench_cpu_lists, bench_cache_domains, bench_model_file
);
criterion_main!(benches);
