//! Known-answer tests of the static topology on fixture trees: this
//! development VM (real files), a Haswell laptop (thesis Table 8.1), a
//! 2-socket NUMA server and an Arm big.LITTLE board; plus trees with optional
//! files removed. See `fixtures/make_fixtures.py` for how the synthetic trees
//! mirror the real machines.

use hwqos_topology::{CacheType, Topology};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str) -> Topology {
    Topology::read(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The CPU groups of the level's cache domains.
fn domains(t: &Topology, level: u8) -> Vec<Vec<u32>> {
    t.cache_domains(level).into_iter().map(|d| d.cpus).collect()
}

fn sizes(t: &Topology, level: u8) -> Vec<Option<u64>> {
    t.cache_domains(level)
        .into_iter()
        .map(|d| d.cache.size_bytes)
        .collect()
}

const K: u64 = 1024;

#[test]
fn this_vm() {
    let t = read("this-vm");
    assert_eq!(t.online_cpus(), [0, 1]);
    assert_eq!(t.cores(), [vec![0], vec![1]]);
    assert!(!t.has_smt());
    assert_eq!(t.smt_siblings(1), Some(&[1][..]));
    assert_eq!(t.packages.len(), 1);
    assert_eq!(t.packages[0].cpus, [0, 1]);
    assert_eq!(t.packages[0].cores, 2);
    assert_eq!(t.numa_nodes.len(), 1);
    assert_eq!(t.numa_nodes[0].cpus, [0, 1]);
    assert_eq!(t.numa_nodes[0].memory_bytes, Some(15_427_788 * 1024));
    assert_eq!(t.data_cache_levels(), [1, 2, 3]);
    assert_eq!(domains(&t, 1), [vec![0], vec![1]]);
    assert_eq!(domains(&t, 2), [vec![0], vec![1]]);
    assert_eq!(domains(&t, 3), [vec![0, 1]]);
    assert_eq!(sizes(&t, 1), [Some(32 * K); 2]);
    assert_eq!(sizes(&t, 2), [Some(1024 * K); 2]);
    assert_eq!(sizes(&t, 3), [Some(32768 * K)]);
    let l3 = &t.llc()[0].cache;
    assert_eq!(
        (l3.ways, l3.sets, l3.line_size),
        (Some(16), Some(32768), Some(64))
    );
    assert_eq!(l3.id, Some(0));
    let l1d = &t.l1d()[0].cache;
    assert_eq!(l1d.kind, CacheType::Data);
    assert_eq!((l1d.ways, l1d.sets), (Some(8), Some(64)));
    // Instruction caches exist but are not cache domains.
    assert_eq!(
        t.caches
            .iter()
            .filter(|c| c.kind == CacheType::Instruction)
            .count(),
        2
    );
    assert_eq!(t.cpu_model.as_deref(), Some("AMD EPYC"));
    assert!(t.invariant_tsc());
    assert_eq!(t.cpu(0).unwrap().die, Some(0));
    assert_eq!(t.cpu(0).unwrap().numa_node, Some(0));
}

#[test]
fn haswell_laptop_siblings_are_0_2_and_1_3() {
    let t = read("haswell-laptop");
    assert_eq!(t.online_cpus(), [0, 1, 2, 3]);
    assert!(t.has_smt());
    assert_eq!(t.smt_siblings(0), Some(&[0, 2][..]));
    assert_eq!(t.smt_siblings(2), Some(&[0, 2][..]));
    assert_eq!(t.smt_siblings(1), Some(&[1, 3][..]));
    assert_eq!(t.smt_siblings(3), Some(&[1, 3][..]));
    assert_eq!(t.smt_siblings(4), None);
    assert_eq!(t.cores(), [vec![0, 2], vec![1, 3]]);
    assert_eq!(t.packages[0].cores, 2);
    // L1d and L2 are per core, i.e. shared by the hyperthread pair.
    assert_eq!(domains(&t, 1), [vec![0, 2], vec![1, 3]]);
    assert_eq!(domains(&t, 2), [vec![0, 2], vec![1, 3]]);
    assert_eq!(domains(&t, 3), [vec![0, 1, 2, 3]]);
    assert_eq!(sizes(&t, 1), [Some(32 * K); 2]);
    assert_eq!(sizes(&t, 2), [Some(256 * K); 2]);
    assert_eq!(sizes(&t, 3), [Some(4096 * K)]);
    assert_eq!(t.llc()[0].cache.ways, Some(16));
    // Linux 4.6: no cache id, no die id.
    assert!(t.caches.iter().all(|c| c.id.is_none()));
    assert!(t.cpus.iter().all(|c| c.die.is_none()));
    assert_eq!(
        t.cpu_model.as_deref(),
        Some("Intel(R) Core(TM) i7-4600U CPU @ 2.10GHz")
    );
}

#[test]
fn two_socket_numa_server() {
    let t = read("numa-server");
    assert_eq!(t.cpus.len(), 16);
    assert_eq!(t.packages.len(), 2);
    assert_eq!(t.cpus_in_package(0), [0, 1, 2, 3, 8, 9, 10, 11]);
    assert_eq!(t.cpus_in_package(1), [4, 5, 6, 7, 12, 13, 14, 15]);
    assert_eq!(t.packages[1].cores, 4);
    assert_eq!(t.numa_nodes.len(), 2);
    assert_eq!(t.cpus_in_node(0), [0, 1, 2, 3, 8, 9, 10, 11]);
    assert_eq!(t.cpus_in_node(1), [4, 5, 6, 7, 12, 13, 14, 15]);
    assert_eq!(t.cpus_in_node(7), Vec::<u32>::new());
    assert_eq!(t.cpu(13).unwrap().numa_node, Some(1));
    for c in 0..8 {
        assert_eq!(t.smt_siblings(c), Some(&[c, c + 8][..]));
        assert_eq!(t.smt_siblings(c + 8), Some(&[c, c + 8][..]));
    }
    let pairs: Vec<Vec<u32>> = (0..8).map(|c| vec![c, c + 8]).collect();
    assert_eq!(domains(&t, 1), pairs);
    assert_eq!(domains(&t, 2), pairs);
    assert_eq!(
        domains(&t, 3),
        [
            vec![0, 1, 2, 3, 8, 9, 10, 11],
            vec![4, 5, 6, 7, 12, 13, 14, 15]
        ]
    );
    assert_eq!(sizes(&t, 2), [Some(1024 * K); 8]);
    assert_eq!(sizes(&t, 3), [Some(5632 * K); 2]);
    let l3 = &t.llc()[1].cache;
    assert_eq!((l3.ways, l3.sets, l3.id), (Some(11), Some(8192), Some(1)));
    assert_eq!(t.numa_nodes[1].memory_bytes, Some(98_999_056 * 1024));
}

#[test]
fn arm_big_little() {
    let t = read("arm-biglittle");
    assert_eq!(t.cpus.len(), 6);
    assert!(!t.has_smt());
    assert_eq!(t.data_cache_levels(), [1, 2]);
    assert_eq!(domains(&t, 1), (0..6).map(|c| vec![c]).collect::<Vec<_>>());
    // The LLC is the per-cluster L2.
    assert_eq!(domains(&t, 2), [vec![0, 1, 2, 3], vec![4, 5]]);
    assert_eq!(t.llc(), t.l2());
    assert_eq!(sizes(&t, 2), [Some(512 * K), Some(1024 * K)]);
    assert!(t.cache_domains(3).is_empty());
    // Different L1 geometry on the two core types.
    assert_eq!(t.cache_of(0, 1).unwrap().ways, Some(4));
    assert_eq!(t.cache_of(5, 1).unwrap().ways, Some(2));
    let l1i_big = t
        .caches
        .iter()
        .find(|c| c.kind == CacheType::Instruction && c.shared_cpus == [4])
        .unwrap();
    assert_eq!(l1i_big.size_bytes, Some(48 * K));
    assert_eq!(t.cpu(0).unwrap().capacity, Some(485));
    assert_eq!(t.cpu(4).unwrap().capacity, Some(1024));
    assert_eq!(t.cpu(4).unwrap().max_freq_khz, Some(1_800_000));
    assert_eq!(t.cpu(1).unwrap().cluster, Some(0));
    assert_eq!(t.cpu(5).unwrap().cluster, Some(1));
    assert!(t.caches.iter().all(|c| c.physical_line_partition.is_none()));
    assert_eq!(
        t.cpu_model.as_deref(),
        Some("implementer 0x41 part 0xd03 + implementer 0x41 part 0xd08")
    );
    assert!(!t.invariant_tsc());
}

/// Copies a fixture into a temporary directory so files can be removed.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

fn remove_everywhere(dir: &Path, file: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            n += remove_everywhere(&e.path(), file);
        } else if e.file_name() == file {
            std::fs::remove_file(e.path()).unwrap();
            n += 1;
        }
    }
    n
}

#[test]
fn missing_optional_files_give_absent_fields() {
    let d = tempfile::tempdir().unwrap();
    copy_tree(&fixture("this-vm"), d.path());
    for f in [
        "ways_of_associativity",
        "number_of_sets",
        "id",
        "physical_line_partition",
        "die_id",
        "cpu_capacity",
        "meminfo",
    ] {
        assert!(remove_everywhere(d.path(), f) > 0, "{f} was in the fixture");
    }
    let t = Topology::read(d.path()).unwrap();
    assert!(t
        .caches
        .iter()
        .all(|c| c.ways.is_none() && c.sets.is_none() && c.id.is_none()));
    assert!(t.caches.iter().all(|c| c.size_bytes.is_some()));
    assert!(t
        .cpus
        .iter()
        .all(|c| c.die.is_none() && c.capacity.is_none()));
    assert_eq!(t.numa_nodes[0].memory_bytes, None);
    // Domains are still right.
    assert_eq!(domains(&t, 3), [vec![0, 1]]);
    assert_eq!(domains(&t, 1), [vec![0], vec![1]]);

    // Without shared_cpu_list, the mask is used.
    assert!(remove_everywhere(d.path(), "shared_cpu_list") > 0);
    let t = Topology::read(d.path()).unwrap();
    assert_eq!(domains(&t, 3), [vec![0, 1]]);
    // Without either, each CPU's cache stands alone; without sizes, sizes are absent.
    assert!(remove_everywhere(d.path(), "shared_cpu_map") > 0);
    assert!(remove_everywhere(d.path(), "size") > 0);
    let t = Topology::read(d.path()).unwrap();
    assert_eq!(domains(&t, 3), [vec![0], vec![1]]);
    assert!(t.caches.iter().all(|c| c.size_bytes.is_none()));

    // No node directory, no topology directories, no cpuinfo: still a model.
    std::fs::remove_dir_all(d.path().join("sys/devices/system/node")).unwrap();
    std::fs::remove_dir_all(d.path().join("sys/devices/system/cpu/cpu1/topology")).unwrap();
    std::fs::remove_file(d.path().join("proc/cpuinfo")).unwrap();
    let t = Topology::read(d.path()).unwrap();
    assert!(t.numa_nodes.is_empty());
    assert_eq!(t.cpu(1).unwrap().package, None);
    assert_eq!(t.smt_siblings(1), Some(&[1][..]));
    assert_eq!(t.cpu_model, None);
}

#[test]
fn corrupt_values_are_absent_not_errors() {
    let d = tempfile::tempdir().unwrap();
    copy_tree(&fixture("this-vm"), d.path());
    let idx = d.path().join("sys/devices/system/cpu/cpu0/cache/index3");
    std::fs::write(idx.join("size"), "lots\n").unwrap();
    std::fs::write(idx.join("ways_of_associativity"), "-1\n").unwrap();
    std::fs::write(idx.join("shared_cpu_list"), "0-999999999\n").unwrap();
    let t = Topology::read(d.path()).unwrap();
    // The bad list falls back to the mask; the unreadable values of cpu0's
    // copy are filled from cpu1's copy of the same L3.
    assert_eq!(domains(&t, 3), [vec![0, 1]]);
    let l3 = t.cache_of(0, 3).unwrap();
    assert_eq!((l3.size_bytes, l3.ways), (Some(32768 * K), Some(16)));

    // A corrupt value with no intact copy is absent.
    let idx1 = d.path().join("sys/devices/system/cpu/cpu1/cache/index3");
    std::fs::write(idx1.join("size"), "\u{0}\u{1}\n").unwrap();
    let t = Topology::read(d.path()).unwrap();
    assert_eq!(t.cache_of(1, 3).unwrap().size_bytes, None);
}

#[test]
fn not_a_sysfs_tree() {
    let d = tempfile::tempdir().unwrap();
    let e = Topology::read(d.path()).unwrap_err().to_string();
    assert!(e.contains("no CPUs found"), "{e}");
}

#[test]
fn the_live_node_matches_its_sysfs() {
    // Whatever machine runs this: parsing / must give online CPUs and a
    // consistent domain structure (every online CPU in exactly one domain per level).
    let t = Topology::this_node().unwrap();
    let online = t.online_cpus();
    assert!(!online.is_empty());
    for level in t.data_cache_levels() {
        let mut covered: Vec<u32> = t
            .cache_domains(level)
            .into_iter()
            .flat_map(|d| d.cpus)
            .collect();
        covered.sort_unstable();
        for c in &online {
            assert_eq!(
                covered.iter().filter(|x| *x == c).count(),
                1,
                "CPU {c} at L{level}"
            );
        }
    }
}
