//! Selecting what to monitor, and following it as processes and threads come and go.
//!
//! A [`TargetSelector`] names targets the way a user does — `pid:N`, `tid:N`,
//! `name:X`, `regex:X`, `cgroup:/path`, `unit:foo.service` — and a [`Resolver`]
//! turns a list of selectors into the concrete processes, threads and cgroup
//! directories to count right now, by reading `/proc` and the cgroup2 tree.
//! Resolving again later and comparing with [`diff`] gives the churn (processes
//! that appeared or exited, threads that started or ended) the sampler follows.
//!
//! Reading `/proc` races with processes exiting: a process that vanishes while it
//! is being read is skipped, never reported as an error. Errors are reserved for
//! selectors that cannot mean anything (an invalid regex, a cgroup or unit that
//! does not exist, no cgroup2 mount for a cgroup selector).

use crate::PmuError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

/// How deep [`Resolver`] descends into a cgroup tree (guards against loops and
/// pathological trees; real hierarchies are a handful of levels deep).
const MAX_CGROUP_DEPTH: usize = 32;

/// What to monitor, in the text form used in configs and on command lines.
///
/// Serialized as that text form (`"pid:42"`, `"unit:sshd.service"`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum TargetSelector {
    /// A process with all its threads: `pid:N`.
    Pid(u32),
    /// One thread: `tid:N`.
    Tid(u32),
    /// Processes whose `comm` or `argv[0]` basename is exactly this: `name:X`.
    Name(String),
    /// Processes whose command line (arguments joined by spaces) matches: `regex:X`.
    Regex(String),
    /// All processes in a cgroup2 directory and its descendants, plus the cgroup
    /// itself for cgroup-mode counting: `cgroup:/path` (relative to the cgroup2
    /// root, or absolute under its mount point).
    Cgroup(PathBuf),
    /// A systemd unit's cgroup: `unit:foo.service`.
    Unit(String),
}

impl fmt::Display for TargetSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetSelector::Pid(p) => write!(f, "pid:{p}"),
            TargetSelector::Tid(t) => write!(f, "tid:{t}"),
            TargetSelector::Name(n) => write!(f, "name:{n}"),
            TargetSelector::Regex(r) => write!(f, "regex:{r}"),
            TargetSelector::Cgroup(p) => write!(f, "cgroup:{}", p.display()),
            TargetSelector::Unit(u) => write!(f, "unit:{u}"),
        }
    }
}

impl FromStr for TargetSelector {
    type Err = PmuError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| {
            PmuError::Config(format!(
                "invalid target `{s}`: {reason} (expected pid:N, tid:N, name:X, regex:X, cgroup:/PATH or unit:NAME)"
            ))
        };
        let (kind, rest) = s.split_once(':').ok_or_else(|| bad("missing `:`"))?;
        let id = |v: &str| match v.parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(bad("not a positive integer")),
        };
        match kind {
            "pid" => Ok(TargetSelector::Pid(id(rest)?)),
            "tid" => Ok(TargetSelector::Tid(id(rest)?)),
            "name" if rest.is_empty() => Err(bad("empty process name")),
            "name" => Ok(TargetSelector::Name(rest.to_string())),
            "regex" => {
                compile_regex(rest)?;
                Ok(TargetSelector::Regex(rest.to_string()))
            }
            "cgroup" if rest.is_empty() => Err(bad("empty cgroup path")),
            "cgroup" => {
                let path = PathBuf::from(rest);
                if path.components().any(|c| c == Component::ParentDir) {
                    return Err(bad("cgroup path must not contain `..`"));
                }
                Ok(TargetSelector::Cgroup(path))
            }
            "unit" if rest.is_empty() => Err(bad("empty unit name")),
            "unit" if rest.contains('/') => Err(bad("a unit name has no `/`")),
            "unit" => Ok(TargetSelector::Unit(rest.to_string())),
            _ => Err(bad("unknown target kind")),
        }
    }
}

impl TryFrom<String> for TargetSelector {
    type Error = PmuError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<TargetSelector> for String {
    fn from(t: TargetSelector) -> String {
        t.to_string()
    }
}

fn compile_regex(re: &str) -> Result<regex::Regex, PmuError> {
    regex::Regex::new(re).map_err(|e| PmuError::Config(format!("invalid target regex `{re}`: {e}")))
}

/// A process to monitor with the threads it had when resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessTarget {
    /// The process id (thread group id).
    pub pid: u32,
    /// `/proc/PID/comm` (the kernel's short name, at most 15 bytes).
    pub comm: String,
    /// Thread ids, sorted (the main thread's tid equals the pid).
    pub threads: Vec<u32>,
}

/// The concrete targets a list of selectors denotes at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    /// Processes, sorted by pid, each once.
    pub processes: Vec<ProcessTarget>,
    /// `(pid, tid)` of threads selected with `tid:N`, sorted, each once.
    pub threads: Vec<(u32, u32)>,
    /// Absolute cgroup2 directories selected by `cgroup:` or `unit:`, sorted, each once.
    pub cgroups: Vec<PathBuf>,
}

impl Resolved {
    /// True when nothing was selected.
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty() && self.threads.is_empty() && self.cgroups.is_empty()
    }

    /// The process with this pid, if selected.
    pub fn process(&self, pid: u32) -> Option<&ProcessTarget> {
        self.processes
            .binary_search_by_key(&pid, |p| p.pid)
            .ok()
            .map(|i| &self.processes[i])
    }

    /// Every selected `(pid, tid)`: all threads of the processes plus the `tid:` threads.
    pub fn all_threads(&self) -> BTreeSet<(u32, u32)> {
        let mut out: BTreeSet<(u32, u32)> = self.threads.iter().copied().collect();
        for p in &self.processes {
            out.extend(p.threads.iter().map(|&t| (p.pid, t)));
        }
        out
    }
}

/// What changed between two resolutions of the same selectors.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Churn {
    /// Pids selected now that were not before.
    pub appeared: Vec<u32>,
    /// Pids selected before that are no longer.
    pub exited: Vec<u32>,
    /// `(pid, tid)` threads that are new, excluding the threads of `appeared` processes.
    pub new_threads: Vec<(u32, u32)>,
    /// `(pid, tid)` threads that ended, excluding the threads of `exited` processes.
    pub exited_threads: Vec<(u32, u32)>,
}

impl Churn {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.appeared.is_empty()
            && self.exited.is_empty()
            && self.new_threads.is_empty()
            && self.exited_threads.is_empty()
    }
}

/// Compares two resolutions: which processes appeared or exited, which threads
/// (of processes present in both, or selected by `tid:`) started or ended.
pub fn diff(old: &Resolved, new: &Resolved) -> Churn {
    let old_pids: BTreeSet<u32> = old.processes.iter().map(|p| p.pid).collect();
    let new_pids: BTreeSet<u32> = new.processes.iter().map(|p| p.pid).collect();
    let appeared: Vec<u32> = new_pids.difference(&old_pids).copied().collect();
    let exited: Vec<u32> = old_pids.difference(&new_pids).copied().collect();
    let old_threads = old.all_threads();
    let new_threads = new.all_threads();
    Churn {
        new_threads: new_threads
            .difference(&old_threads)
            .filter(|(pid, _)| appeared.binary_search(pid).is_err())
            .copied()
            .collect(),
        exited_threads: old_threads
            .difference(&new_threads)
            .filter(|(pid, _)| exited.binary_search(pid).is_err())
            .copied()
            .collect(),
        appeared,
        exited,
    }
}

/// Turns selectors into targets by reading a `/proc` tree and a cgroup2 tree.
#[derive(Clone, Debug)]
pub struct Resolver {
    proc_root: PathBuf,
    cgroup2_root: Option<PathBuf>,
    systemd_v1_root: Option<PathBuf>,
    exclude_pid: Option<u32>,
}

impl Resolver {
    /// A resolver over the given `/proc` and cgroup2 roots (fixture trees in tests).
    /// The calling process is excluded from `name:` and `regex:` matches.
    pub fn new(proc_root: PathBuf, cgroup2_root: Option<PathBuf>) -> Self {
        Resolver {
            proc_root,
            cgroup2_root,
            systemd_v1_root: None,
            exclude_pid: Some(std::process::id()),
        }
    }

    /// The resolver for this node: `/proc`, the cgroup2 mount and the
    /// `name=systemd` v1 hierarchy, both found in `/proc/mounts`.
    pub fn for_this_node() -> Self {
        let proc_root = PathBuf::from("/proc");
        let mounts = std::fs::read_to_string(proc_root.join("mounts")).unwrap_or_default();
        Resolver {
            cgroup2_root: find_mount(&mounts, |fstype, _| fstype == "cgroup2"),
            systemd_v1_root: find_mount(&mounts, |fstype, opts| {
                fstype == "cgroup" && opts.split(',').any(|o| o == "name=systemd")
            }),
            proc_root,
            exclude_pid: Some(std::process::id()),
        }
    }

    /// Also searches this cgroup v1 `name=systemd` hierarchy for `unit:` selectors
    /// (processes only: v1 directories are not used for cgroup-mode counting).
    pub fn with_systemd_v1_root(mut self, root: Option<PathBuf>) -> Self {
        self.systemd_v1_root = root;
        self
    }

    /// Which pid `name:` and `regex:` never match (default: this process; `None`: none).
    pub fn excluding_pid(mut self, pid: Option<u32>) -> Self {
        self.exclude_pid = pid;
        self
    }

    /// The cgroup2 root this resolver uses, if any.
    pub fn cgroup2_root(&self) -> Option<&Path> {
        self.cgroup2_root.as_deref()
    }

    /// Resolves `selectors` against the current state of the node.
    ///
    /// A `pid:`/`tid:` that does not exist resolves to nothing (it may have exited;
    /// use [`Resolver::check`] to reject such selectors at start-up).
    pub fn resolve(&self, selectors: &[TargetSelector]) -> Result<Resolved, PmuError> {
        let mut pids: BTreeSet<u32> = BTreeSet::new();
        let mut threads: BTreeSet<(u32, u32)> = BTreeSet::new();
        let mut cgroups: BTreeSet<PathBuf> = BTreeSet::new();
        // Scanned lazily: only name/regex selectors need every process's details.
        let mut scan: Option<Vec<ProcInfo>> = None;
        for sel in selectors {
            match sel {
                TargetSelector::Pid(pid) => {
                    pids.insert(*pid);
                }
                TargetSelector::Tid(tid) => {
                    if let Some(pid) = self.tgid_of(*tid) {
                        threads.insert((pid, *tid));
                    }
                }
                TargetSelector::Name(name) => {
                    let procs = scan.get_or_insert_with(|| self.scan());
                    pids.extend(
                        procs
                            .iter()
                            .filter(|p| Some(p.pid) != self.exclude_pid)
                            .filter(|p| {
                                p.comm == *name || p.argv0_basename() == Some(name.as_str())
                            })
                            .map(|p| p.pid),
                    );
                }
                TargetSelector::Regex(re) => {
                    let re = compile_regex(re)?;
                    let procs = scan.get_or_insert_with(|| self.scan());
                    pids.extend(
                        procs
                            .iter()
                            .filter(|p| Some(p.pid) != self.exclude_pid)
                            .filter(|p| re.is_match(&p.command_line()))
                            .map(|p| p.pid),
                    );
                }
                TargetSelector::Cgroup(path) => {
                    let dir = self.cgroup_dir(path)?;
                    pids.extend(cgroup_tree_pids(&dir));
                    cgroups.insert(dir);
                }
                TargetSelector::Unit(unit) => {
                    let (v2, v1) = self.unit_dirs(unit)?;
                    for dir in v2 {
                        pids.extend(cgroup_tree_pids(&dir));
                        cgroups.insert(dir);
                    }
                    for dir in v1 {
                        pids.extend(cgroup_tree_pids(&dir));
                    }
                }
            }
        }
        let processes = pids
            .into_iter()
            .filter_map(|pid| self.process(pid))
            .collect();
        Ok(Resolved {
            processes,
            threads: threads.into_iter().collect(),
            cgroups: cgroups.into_iter().collect(),
        })
    }

    /// Start-up validation: like [`Resolver::resolve`], and additionally fails when
    /// a `pid:`/`tid:` selector names a task that does not exist.
    pub fn check(&self, selectors: &[TargetSelector]) -> Result<Resolved, PmuError> {
        for sel in selectors {
            match sel {
                TargetSelector::Pid(pid) if self.process(*pid).is_none() => {
                    return Err(PmuError::Config(format!(
                        "target `{sel}`: no process {pid}"
                    )));
                }
                TargetSelector::Tid(tid) if self.tgid_of(*tid).is_none() => {
                    return Err(PmuError::Config(format!("target `{sel}`: no thread {tid}")));
                }
                _ => {}
            }
        }
        self.resolve(selectors)
    }

    /// Reads one process: its comm and threads. `None` if it does not exist (any more).
    pub fn process(&self, pid: u32) -> Option<ProcessTarget> {
        let dir = self.proc_root.join(pid.to_string());
        let comm = read_trimmed(&dir.join("comm"))?;
        let mut threads = numeric_entries(&dir.join("task"));
        if threads.is_empty() {
            // A process always has its main thread; an unreadable task dir means it is gone.
            return None;
        }
        threads.sort_unstable();
        Some(ProcessTarget { pid, comm, threads })
    }

    /// The process (thread group) a thread belongs to.
    fn tgid_of(&self, tid: u32) -> Option<u32> {
        let status = read_trimmed(&self.proc_root.join(tid.to_string()).join("status"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse().ok())
    }

    fn scan(&self) -> Vec<ProcInfo> {
        let mut pids = numeric_entries(&self.proc_root);
        pids.sort_unstable();
        pids.into_iter()
            .filter_map(|pid| {
                let dir = self.proc_root.join(pid.to_string());
                let comm = read_trimmed(&dir.join("comm"))?;
                let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
                let mut args: Vec<String> = cmdline
                    .split(|&b| b == 0)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                while args.last().is_some_and(|a| a.is_empty()) {
                    args.pop();
                }
                Some(ProcInfo { pid, comm, args })
            })
            .collect()
    }

    fn require_cgroup2(&self, what: &str) -> Result<&Path, PmuError> {
        self.cgroup2_root.as_deref().ok_or_else(|| {
            PmuError::Config(format!(
                "target `{what}`: no cgroup2 file system is mounted (looked for fstype cgroup2 in /proc/mounts)"
            ))
        })
    }

    fn cgroup_dir(&self, path: &Path) -> Result<PathBuf, PmuError> {
        let sel = TargetSelector::Cgroup(path.to_path_buf()).to_string();
        let root = self.require_cgroup2(&sel)?;
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(PmuError::Config(format!(
                "target `{sel}`: cgroup path must not contain `..`"
            )));
        }
        let dir = if path.starts_with(root) {
            path.to_path_buf()
        } else {
            let rel: PathBuf = path
                .components()
                .filter(|c| matches!(c, Component::Normal(_)))
                .collect();
            root.join(rel)
        };
        if !dir.join("cgroup.procs").is_file() {
            return Err(PmuError::Config(format!(
                "target `{sel}`: {} is not a cgroup directory (no cgroup.procs) under the cgroup2 root {}",
                dir.display(),
                root.display()
            )));
        }
        Ok(dir)
    }

    /// The directories named exactly `unit` in the cgroup2 tree and in the v1
    /// `name=systemd` tree.
    fn unit_dirs(&self, unit: &str) -> Result<(Vec<PathBuf>, Vec<PathBuf>), PmuError> {
        let mut v2 = Vec::new();
        let mut v1 = Vec::new();
        if let Some(root) = &self.cgroup2_root {
            find_dirs_named(root, unit, 0, &mut v2);
        }
        if let Some(root) = &self.systemd_v1_root {
            find_dirs_named(root, unit, 0, &mut v1);
        }
        if v2.is_empty() && v1.is_empty() {
            let searched: Vec<String> = [&self.cgroup2_root, &self.systemd_v1_root]
                .into_iter()
                .flatten()
                .map(|p| p.display().to_string())
                .collect();
            let where_ = if searched.is_empty() {
                "no cgroup2 or name=systemd hierarchy is mounted".to_string()
            } else {
                format!(
                    "no cgroup directory of that name under {}",
                    searched.join(" or ")
                )
            };
            return Err(PmuError::Config(format!(
                "target `unit:{unit}`: systemd unit not found: {where_} (is the unit running?)"
            )));
        }
        Ok((v2, v1))
    }
}

/// What a name/regex scan needs to know about one process.
struct ProcInfo {
    pid: u32,
    comm: String,
    args: Vec<String>,
}

impl ProcInfo {
    fn argv0_basename(&self) -> Option<&str> {
        let a = self.args.first()?;
        Some(a.rsplit('/').next().unwrap_or(a))
    }

    /// The arguments joined by spaces; `[comm]` for kernel threads (empty cmdline), as `ps` shows them.
    fn command_line(&self) -> String {
        if self.args.is_empty() {
            format!("[{}]", self.comm)
        } else {
            self.args.join(" ")
        }
    }
}

/// The mount point of the cgroup2 file system, from `PROC_ROOT/mounts`.
pub fn cgroup2_mount(proc_root: &Path) -> Option<PathBuf> {
    let mounts = std::fs::read_to_string(proc_root.join("mounts")).ok()?;
    find_mount(&mounts, |fstype, _| fstype == "cgroup2")
}

fn find_mount(mounts: &str, want: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [_, mountpoint, fstype, opts, ..] if want(fstype, opts) => {
                Some(PathBuf::from(unescape_mount(mountpoint)))
            }
            _ => None,
        }
    })
}

/// Undoes the octal escapes (`\040` for a space) the kernel uses in /proc/mounts.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The highest CPU number a CPU list may name (Linux's `NR_CPUS` maximum).
pub const MAX_CPU: u32 = 8191;

/// Parses a kernel CPU list such as `0-3,5,8-9` (sorted, without repeats;
/// empty text is no CPUs). The one CPU-list parser of hwqos: command lines,
/// configurations and sysfs files all go through it.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, PmuError> {
    let bad = |why: String| PmuError::Config(format!("invalid CPU list `{}`: {why}", s.trim()));
    let mut out = BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let num = |v: &str| {
            let cpu = v
                .trim()
                .parse::<u32>()
                .map_err(|_| bad(format!("`{}` is not a CPU number", v.trim())))?;
            if cpu > MAX_CPU {
                return Err(bad(format!("CPU {cpu} is above {MAX_CPU}")));
            }
            Ok(cpu)
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(bad(format!("range {a}-{b} ends before its start")));
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(num(part)?);
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// The online CPUs from `SYS_ROOT/devices/system/cpu/online`. If that file is
/// missing or malformed, falls back to CPUs `0..n` with `n` the available parallelism.
pub fn online_cpus(sys_root: &Path) -> Vec<u32> {
    let path = sys_root.join("devices/system/cpu/online");
    match std::fs::read_to_string(&path)
        .map_err(|e| PmuError::io(format!("reading {}", path.display()), e))
        .and_then(|s| parse_cpu_list(&s))
    {
        Ok(cpus) if !cpus.is_empty() => cpus,
        other => {
            let n = std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1);
            if let Err(e) = other {
                tracing::warn!("{e}; assuming CPUs 0..{n}");
            }
            (0..n).collect()
        }
    }
}

/// Reads a small file and trims trailing whitespace; `None` if it cannot be read
/// (for /proc: the task exited).
fn read_trimmed(path: &Path) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(s) => Some(s.trim_end().to_string()),
        Err(e) => {
            if !is_gone(&e) {
                tracing::debug!("skipping {}: {e}", path.display());
            }
            None
        }
    }
}

/// True for the errors that mean "the task exited while we looked".
pub(crate) fn is_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
        || e.kind() == io::ErrorKind::NotFound
}

/// The entries of a directory whose names are positive integers (pids, tids).
fn numeric_entries(dir: &Path) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|&n| n > 0)
        .collect()
}

/// The pids in `cgroup.procs` of `dir` and of every cgroup below it.
fn cgroup_tree_pids(dir: &Path) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    collect_cgroup_pids(dir, 0, &mut out);
    out
}

fn collect_cgroup_pids(dir: &Path, depth: usize, out: &mut BTreeSet<u32>) {
    if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(
            procs
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok())
                .filter(|&p| p > 0),
        );
    }
    if depth >= MAX_CGROUP_DEPTH {
        return;
    }
    for sub in subdirs(dir) {
        collect_cgroup_pids(&sub, depth + 1, out);
    }
}

fn find_dirs_named(dir: &Path, name: &str, depth: usize, out: &mut Vec<PathBuf>) {
    if depth >= MAX_CGROUP_DEPTH {
        return;
    }
    for sub in subdirs(dir) {
        if sub.file_name().is_some_and(|n| n == name) {
            out.push(sub);
        } else {
            find_dirs_named(&sub, name, depth + 1, out);
        }
    }
}

/// Subdirectories (not symlinks), sorted for deterministic results.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}
