//! Target selection: known answers on a hand-written `/proc` + cgroup tree, churn
//! detection, selector text/serde forms, and live checks on this node.

use hwqos_pmu::target::{
    cgroup2_mount, diff, online_cpus, parse_cpu_list, ProcessTarget, Resolved, Resolver,
    TargetSelector,
};
use hwqos_pmu::PmuError;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc-targets")
}

fn resolver() -> Resolver {
    Resolver::new(fixture().join("proc"), Some(fixture().join("cgroup2")))
        .with_systemd_v1_root(Some(fixture().join("systemd")))
        .excluding_pid(None)
}

fn sel(s: &str) -> TargetSelector {
    s.parse().unwrap()
}

fn pids(r: &Resolved) -> Vec<u32> {
    r.processes.iter().map(|p| p.pid).collect()
}

fn resolve(r: &Resolver, sels: &[&str]) -> Result<Resolved, PmuError> {
    let sels: Vec<TargetSelector> = sels.iter().map(|s| sel(s)).collect();
    r.resolve(&sels)
}

#[test]
fn selector_text_and_serde_round_trip() {
    for s in [
        "pid:42",
        "tid:43",
        "name:nginx",
        "regex:^python3 .*worker",
        "cgroup:/system.slice/a.service",
        "unit:a.service",
    ] {
        let t: TargetSelector = s.parse().unwrap();
        assert_eq!(t.to_string(), s);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, format!("\"{s}\""));
        assert_eq!(serde_json::from_str::<TargetSelector>(&json).unwrap(), t);
    }
    assert_eq!(sel("pid:7"), TargetSelector::Pid(7));
    assert_eq!(
        sel("cgroup:/a/b"),
        TargetSelector::Cgroup(PathBuf::from("/a/b"))
    );
}

#[test]
fn bad_selectors_are_rejected_with_the_reason() {
    for (s, why) in [
        ("", "missing `:`"),
        ("pid", "missing `:`"),
        ("pid:x", "not a positive integer"),
        ("pid:0", "not a positive integer"),
        ("tid:-3", "not a positive integer"),
        ("name:", "empty process name"),
        ("cgroup:", "empty cgroup path"),
        ("cgroup:/a/../b", "`..`"),
        ("unit:a/b.service", "no `/`"),
        ("disk:sda", "unknown target kind"),
    ] {
        let e = s.parse::<TargetSelector>().unwrap_err().to_string();
        assert!(e.contains(&format!("`{s}`")) && e.contains(why), "{s}: {e}");
    }
    let e = "regex:(unclosed"
        .parse::<TargetSelector>()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("(unclosed") && e.contains("unclosed group"),
        "{e}"
    );
    assert!(serde_json::from_str::<TargetSelector>("\"pid:abc\"").is_err());
}

#[test]
fn pid_selects_the_process_with_all_threads() {
    let r = resolve(&resolver(), &["pid:400"]).unwrap();
    assert_eq!(
        r.processes,
        vec![ProcessTarget {
            pid: 400,
            comm: "my-very-long-da".into(),
            threads: vec![400, 401, 402]
        }]
    );
    assert!(r.threads.is_empty() && r.cgroups.is_empty());
    // A pid that does not exist resolves to nothing, and check() rejects it.
    assert!(resolve(&resolver(), &["pid:12345"]).unwrap().is_empty());
    let e = resolver()
        .check(&[sel("pid:12345")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("12345"), "{e}");
}

#[test]
fn tid_selects_one_thread_with_its_process() {
    let r = resolve(&resolver(), &["tid:101"]).unwrap();
    assert_eq!(r.threads, vec![(100, 101)]);
    assert!(r.processes.is_empty());
    assert!(resolver().check(&[sel("tid:101")]).is_ok());
    assert!(resolver().check(&[sel("tid:777")]).is_err());
}

#[test]
fn name_matches_comm_or_argv0_basename() {
    let r = resolve(&resolver(), &["name:nginx"]).unwrap();
    // 500 has an nginx cmdline but vanished mid-scan (no comm): skipped silently.
    assert_eq!(pids(&r), vec![100]);
    assert_eq!(r.processes[0].threads, vec![100, 101]);
    // comm is truncated to 15 bytes; argv[0]'s basename still matches the full name.
    assert_eq!(
        pids(&resolve(&resolver(), &["name:my-very-long-daemon"]).unwrap()),
        vec![400]
    );
    assert_eq!(
        pids(&resolve(&resolver(), &["name:python3"]).unwrap()),
        vec![200]
    );
    assert!(resolve(&resolver(), &["name:worker.py"])
        .unwrap()
        .is_empty());
    assert!(resolve(&resolver(), &["name:ngin"]).unwrap().is_empty());
}

#[test]
fn regex_matches_the_command_line() {
    let r = resolve(&resolver(), &["regex:worker\\.py --queue fast$"]).unwrap();
    assert_eq!(pids(&r), vec![200]);
    // Kernel threads have no command line; they match as `[comm]`, as ps shows them.
    assert_eq!(
        pids(&resolve(&resolver(), &["regex:^\\[kthreadd\\]$"]).unwrap()),
        vec![300]
    );
    assert_eq!(
        pids(&resolve(&resolver(), &["regex:daemon"]).unwrap()),
        vec![100, 400]
    );
    // An invalid regex is a config error naming the regex.
    let bad = [TargetSelector::Regex("a(".into())];
    let e = resolver().resolve(&bad).unwrap_err();
    assert!(
        matches!(&e, PmuError::Config(m) if m.contains("`a(`")),
        "{e}"
    );
}

#[test]
fn own_pid_is_excluded_from_name_and_regex() {
    let r = Resolver::new(fixture().join("proc"), None).excluding_pid(Some(100));
    assert!(resolve(&r, &["name:nginx"]).unwrap().is_empty());
    assert!(resolve(&r, &["regex:nginx"]).unwrap().is_empty());
    // ... but an explicit pid still selects it.
    assert_eq!(pids(&resolve(&r, &["pid:100"]).unwrap()), vec![100]);
}

#[test]
fn selections_are_merged_sorted_and_deduplicated() {
    let r = resolve(
        &resolver(),
        &["pid:400", "name:nginx", "pid:100", "regex:nginx"],
    )
    .unwrap();
    assert_eq!(pids(&r), vec![100, 400]);
}

#[test]
fn cgroup_selects_member_processes_of_the_subtree_and_the_directory() {
    let root = fixture().join("cgroup2");
    let r = resolve(&resolver(), &["cgroup:/system.slice/worker.service"]).unwrap();
    // 999 is listed but gone; 400 lives in the child cgroup `jobs`.
    assert_eq!(pids(&r), vec![200, 400]);
    assert_eq!(r.cgroups, vec![root.join("system.slice/worker.service")]);
    // relative without the leading slash, and absolute under the mount, mean the same.
    assert_eq!(
        resolve(&resolver(), &["cgroup:system.slice/worker.service"]).unwrap(),
        r
    );
    let abs = format!(
        "cgroup:{}",
        root.join("system.slice/worker.service").display()
    );
    assert_eq!(resolve(&resolver(), &[&abs]).unwrap(), r);

    let e = resolve(&resolver(), &["cgroup:/system.slice/nope.service"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nope.service") && e.contains("not a cgroup directory"),
        "{e}"
    );
    let no_cg2 = Resolver::new(fixture().join("proc"), None);
    let e = resolve(&no_cg2, &["cgroup:/x"]).unwrap_err().to_string();
    assert!(e.contains("no cgroup2"), "{e}");
}

#[test]
fn unit_is_found_in_the_cgroup2_tree_or_the_systemd_v1_tree() {
    let root = fixture().join("cgroup2");
    let r = resolve(&resolver(), &["unit:nginx.service"]).unwrap();
    assert_eq!(pids(&r), vec![100]);
    assert_eq!(r.cgroups, vec![root.join("system.slice/nginx.service")]);
    // Only in the v1 name=systemd hierarchy: processes, but no cgroup2 directory to count.
    let r = resolve(&resolver(), &["unit:legacy.service"]).unwrap();
    assert_eq!(pids(&r), vec![300]);
    assert!(r.cgroups.is_empty());
    let e = resolve(&resolver(), &["unit:missing.service"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("missing.service") && e.contains("not found"),
        "{e}"
    );
}

#[test]
fn cgroup2_mount_is_read_from_proc_mounts() {
    assert_eq!(
        cgroup2_mount(&fixture().join("proc")),
        Some(PathBuf::from("/sys/fs/cgroup/my unified"))
    );
    assert_eq!(cgroup2_mount(Path::new("/nonexistent")), None);
}

fn proc(pid: u32, threads: &[u32]) -> ProcessTarget {
    ProcessTarget {
        pid,
        comm: format!("p{pid}"),
        threads: threads.to_vec(),
    }
}

#[test]
fn diff_reports_process_and_thread_churn() {
    let old = Resolved {
        processes: vec![proc(10, &[10, 11]), proc(20, &[20])],
        threads: vec![(30, 31)],
        cgroups: vec![],
    };
    let new = Resolved {
        processes: vec![proc(10, &[10, 12]), proc(40, &[40, 41])],
        threads: vec![(30, 32)],
        cgroups: vec![],
    };
    let c = diff(&old, &new);
    assert_eq!(c.appeared, vec![40]);
    assert_eq!(c.exited, vec![20]);
    // Threads of appeared/exited processes come with the process, not separately.
    assert_eq!(c.new_threads, vec![(10, 12), (30, 32)]);
    assert_eq!(c.exited_threads, vec![(10, 11), (30, 31)]);
    assert!(!c.is_empty());
    assert!(diff(&new, &new).is_empty());
}

#[test]
fn cpu_lists() {
    assert_eq!(parse_cpu_list("0-3,5\n").unwrap(), vec![0, 1, 2, 3, 5]);
    assert_eq!(parse_cpu_list("7").unwrap(), vec![7]);
    assert!(parse_cpu_list("3-1").is_err());
    assert!(parse_cpu_list("a").is_err());
    assert_eq!(parse_cpu_list(" 2, 0-1,1 ").unwrap(), vec![0, 1, 2]);
    assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
    let e = parse_cpu_list("0-8192").unwrap_err().to_string();
    assert!(e.contains("CPU 8192 is above 8191"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let cpu = dir.path().join("devices/system/cpu");
    std::fs::create_dir_all(&cpu).unwrap();
    std::fs::write(cpu.join("online"), "0,2-3\n").unwrap();
    assert_eq!(online_cpus(dir.path()), vec![0, 2, 3]);
    let live = online_cpus(Path::new("/sys"));
    assert!(!live.is_empty());
    assert!(live.windows(2).all(|w| w[0] < w[1]));
}

// ---- live checks on this node ----

/// A child process that is killed when dropped.
struct Sleeper(Child);

impl Sleeper {
    /// `sleep` with a distinctive argument so a regex matches only this child.
    fn spawn(tag: u32) -> Sleeper {
        Sleeper(
            Command::new("sleep")
                .arg(format!("{}.{tag}", 1000 + std::process::id() % 1000))
                .spawn()
                .unwrap(),
        )
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn pattern(&self, tag: u32) -> String {
        format!("regex:^sleep {}\\.{tag}$", 1000 + std::process::id() % 1000)
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until the child has exec'ed `sleep` (its cmdline is set).
fn wait_exec(pid: u32) {
    for _ in 0..500 {
        if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn live_regex_follows_a_child_and_reports_its_exit() {
    let r = Resolver::for_this_node();
    let mut child = Sleeper::spawn(1);
    wait_exec(child.pid());
    let sels = [sel(&child.pattern(1))];
    let before = r.resolve(&sels).unwrap();
    assert_eq!(pids(&before), vec![child.pid()]);
    assert_eq!(before.processes[0].comm, "sleep");
    assert_eq!(before.processes[0].threads, vec![child.pid()]);
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let after = r.resolve(&sels).unwrap();
    let churn = diff(&before, &after);
    assert_eq!(churn.exited, vec![child.pid()]);
    assert!(churn.appeared.is_empty());
}

#[test]
fn live_own_process_is_never_matched_by_regex() {
    let me = std::process::id();
    let exe = std::env::args().next().unwrap();
    let base = exe.rsplit('/').next().unwrap().to_string();
    let r = Resolver::for_this_node();
    let hits = r
        .resolve(&[TargetSelector::Regex(regex::escape(&base))])
        .unwrap();
    assert!(!pids(&hits).contains(&me));
    // but pid:self works and lists this thread.
    let mine = r.resolve(&[TargetSelector::Pid(me)]).unwrap();
    let tid = nix::unistd::gettid().as_raw() as u32;
    assert!(mine.processes[0].threads.contains(&tid));
}

#[test]
fn live_new_thread_shows_up_as_churn() {
    let me = std::process::id();
    let r = Resolver::for_this_node();
    let sels = [TargetSelector::Pid(me)];
    let before = r.resolve(&sels).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
        let _ = stop_rx.recv();
    });
    let tid = rx.recv().unwrap();
    let during = r.resolve(&sels).unwrap();
    assert!(diff(&before, &during).new_threads.contains(&(me, tid)));
    let thread_sel = r.resolve(&[TargetSelector::Tid(tid)]).unwrap();
    assert_eq!(thread_sel.threads, vec![(me, tid)]);
    stop_tx.send(()).unwrap();
    h.join().unwrap();
    // The join returns when the kernel clears the thread's id, a moment
    // before it reaps the task and its /proc entry.
    let mut after = r.resolve(&sels).unwrap();
    for _ in 0..1000 {
        if !after.processes[0].threads.contains(&tid) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        after = r.resolve(&sels).unwrap();
    }
    assert!(diff(&during, &after).exited_threads.contains(&(me, tid)));
}

/// A cgroup2 directory created for the test and removed afterwards.
struct TempCgroup(PathBuf);

impl Drop for TempCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn live_cgroup_and_unit_select_the_member_process() {
    let Some(root) = cgroup2_mount(Path::new("/proc")) else {
        eprintln!("skipped: no cgroup2 mount on this node");
        return;
    };
    let name = format!("hwqos-test-{}.service", std::process::id());
    let dir = root.join(&name);
    if let Err(e) = std::fs::create_dir(&dir) {
        eprintln!("skipped: cannot create {} ({e}); needs root", dir.display());
        return;
    }
    let cg = TempCgroup(dir.clone());
    let child = Sleeper::spawn(2);
    if let Err(e) = std::fs::write(dir.join("cgroup.procs"), child.pid().to_string()) {
        // With a threaded/domain-invalid root a process cannot always be moved.
        eprintln!(
            "skipped: cannot move a process into {} ({e})",
            dir.display()
        );
        return;
    }
    let r = Resolver::for_this_node();
    let by_path = r.resolve(&[sel(&format!("cgroup:/{name}"))]).unwrap();
    assert_eq!(pids(&by_path), vec![child.pid()]);
    assert_eq!(by_path.cgroups, vec![dir.clone()]);
    let by_unit = r.resolve(&[sel(&format!("unit:{name}"))]).unwrap();
    assert_eq!(by_unit, by_path);
    drop(child);
    // The member is gone: the cgroup is still selected, with no processes.
    let empty = r.resolve(&[sel(&format!("cgroup:/{name}"))]).unwrap();
    assert!(empty.processes.is_empty());
    drop(cg);
}
