//! Contracts distributed as plain files in a directory (issue 21 item 3):
//! a configuration tool (Ansible, Salt, a Kubernetes ConfigMap) writes
//! `hwqos.contract/1` files into one directory, and the agent applies the
//! best of them.
//!
//! The rule, used by `hwqos-sra run` (`[agent] contract_dir`) and
//! `hwqos-sra validate-dir`:
//!
//! - **Candidates** are the entries whose name ends in `.json` and does not
//!   start with a dot. Everything else is ignored without a word: dotfiles
//!   (`.#x.json` editor locks, `..data` of a ConfigMap, the `.x.json.N.tmp`
//!   files of an atomic save), `*.tmp`, `*.json.swp`, `*~`. A tool should
//!   write `NAME.json.tmp` (or a dotfile) and rename it to `NAME.json`, so the
//!   file is only ever seen whole.
//! - At most [`MAX_FILES`] candidates are considered, the first ones in byte
//!   order of their names; the rest are counted in [`Scan::left_out`].
//! - Each candidate is read through [`crate::input::read_regular`] (a
//!   regular file, symbolic links followed, at most [`Limits::max_bytes`];
//!   a FIFO or device is refused without blocking) and parsed with
//!   [`Contract::parse`] (no duplicate keys, [`Contract::validate`]). A file
//!   that fails is *rejected* with its name and the reason.
//! - The **chosen** contract is the valid one with the highest `version`;
//!   between equal versions, the file whose name sorts last. A directory with
//!   no valid candidate chooses nothing (the agent then keeps what it has).
//!
//! [`ContractDir`] remembers each file's identity (device, inode, size,
//! modification and change times) and re-reads only files that changed, so
//! a rejected file is reported once, not at every rescan. [`DirWatch`] is a
//! non-blocking inotify watch that says when the directory may have changed.

use crate::contract::Contract;
use crate::SchedError;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Most candidate files considered in one directory.
pub const MAX_FILES: usize = 256;

/// Bounds of one scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Candidates considered (the first ones by name); default [`MAX_FILES`].
    pub max_files: usize,
    /// Largest file read, in bytes; default
    /// [`crate::input::MAX_INPUT_BYTES`].
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_files: MAX_FILES,
            max_bytes: crate::input::MAX_INPUT_BYTES,
        }
    }
}

/// Whether a directory entry named `name` is a contract candidate: it ends
/// in `.json` and does not start with a dot.
pub fn is_candidate(name: &OsStr) -> bool {
    let b = name.as_bytes();
    b.len() > ".json".len() && b.ends_with(b".json") && !b.starts_with(b".")
}

/// One candidate file and what it holds.
#[derive(Clone, Debug)]
pub struct FileVerdict {
    /// The file's name in the directory (lossy UTF-8).
    pub name: String,
    /// Its path.
    pub path: PathBuf,
    /// The valid contract, or why the file was rejected.
    pub contract: Result<Arc<Contract>, String>,
}

/// A rejected file, reported once per version of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The file's name in the directory.
    pub name: String,
    /// What was wrong with it.
    pub reason: String,
}

/// What a scan of the directory found.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// Every candidate considered, in byte order of the names.
    pub files: Vec<FileVerdict>,
    /// Candidates beyond [`Limits::max_files`], not read.
    pub left_out: usize,
    /// Files rejected that the previous scan had not rejected as they are
    /// now (every rejected file on a first scan).
    pub new_rejections: Vec<Rejected>,
}

impl Scan {
    /// The chosen file: the valid contract with the highest version, ties to
    /// the name that sorts last; `None` when no candidate is valid.
    pub fn chosen(&self) -> Option<(&FileVerdict, &Arc<Contract>)> {
        self.files
            .iter()
            .filter_map(|f| f.contract.as_ref().ok().map(|c| (f, c)))
            .max_by(|(fa, a), (fb, b)| {
                a.version
                    .cmp(&b.version)
                    .then_with(|| fa.name.as_bytes().cmp(fb.name.as_bytes()))
            })
    }

    /// The rejected files with their reasons.
    pub fn rejected(&self) -> impl Iterator<Item = (&FileVerdict, &str)> {
        self.files
            .iter()
            .filter_map(|f| f.contract.as_ref().err().map(|r| (f, r.as_str())))
    }
}

/// What identifies one version of a file: a rename, a rewrite or a touch
/// changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Identity {
    Stat {
        dev: u64,
        ino: u64,
        len: u64,
        mtime: (i64, i64),
        ctime: (i64, i64),
    },
    /// `stat` failed (a dangling link, a file gone meanwhile): the reason.
    Unreadable(String),
}

fn identity(path: &Path) -> Identity {
    match std::fs::metadata(path) {
        Ok(m) => Identity::Stat {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        },
        Err(e) => Identity::Unreadable(e.to_string()),
    }
}

/// Reads and validates one contract file; the error is the reason (the
/// caller names the file).
pub fn check_file(path: &Path, max_bytes: u64) -> Result<Contract, String> {
    let text = crate::input::read_regular(path, max_bytes).map_err(|e| match e {
        SchedError::File { source, .. } => source.to_string(),
        SchedError::Invalid { reason, .. } => reason,
        other => other.to_string(),
    })?;
    Contract::parse(&text).map_err(|e| e.to_string())
}

/// A watched contract directory: [`ContractDir::rescan`] lists the
/// candidates, re-reads those that changed since the last scan and reports
/// the new rejections.
#[derive(Debug)]
pub struct ContractDir {
    dir: PathBuf,
    limits: Limits,
    known: BTreeMap<OsString, (Identity, Result<Arc<Contract>, String>)>,
}

impl ContractDir {
    /// A directory not scanned yet.
    pub fn new(dir: impl Into<PathBuf>, limits: Limits) -> ContractDir {
        ContractDir {
            dir: dir.into(),
            limits,
            known: BTreeMap::new(),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Scans the directory. Fails only when the directory itself cannot be
    /// listed (missing, not a directory, no permission); a bad file is a
    /// rejection in the result, never an error.
    pub fn rescan(&mut self) -> Result<Scan, SchedError> {
        let file_err = |e: std::io::Error| SchedError::File {
            path: self.dir.clone(),
            source: e,
        };
        // The first `max_files` names in byte order, kept bounded while
        // the listing is read.
        let mut names: BTreeSet<OsString> = BTreeSet::new();
        let mut left_out = 0usize;
        for entry in std::fs::read_dir(&self.dir).map_err(file_err)? {
            let entry = entry.map_err(file_err)?;
            let name = entry.file_name();
            if !is_candidate(&name) {
                continue;
            }
            names.insert(name);
            if names.len() > self.limits.max_files {
                names.pop_last();
                left_out += 1;
            }
        }
        let mut scan = Scan {
            left_out,
            ..Scan::default()
        };
        let mut known = BTreeMap::new();
        for name in names {
            let path = self.dir.join(&name);
            let id = identity(&path);
            let shown = name.to_string_lossy().into_owned();
            let (id, verdict) = match self.known.remove(&name) {
                Some((old_id, verdict)) if old_id == id => (old_id, verdict),
                _ => {
                    let verdict = match &id {
                        Identity::Unreadable(reason) => Err(reason.clone()),
                        Identity::Stat { .. } => {
                            check_file(&path, self.limits.max_bytes).map(Arc::new)
                        }
                    };
                    if let Err(reason) = &verdict {
                        scan.new_rejections.push(Rejected {
                            name: shown.clone(),
                            reason: reason.clone(),
                        });
                    }
                    (id, verdict)
                }
            };
            scan.files.push(FileVerdict {
                name: shown,
                path,
                contract: verdict.clone(),
            });
            known.insert(name, (id, verdict));
        }
        self.known = known;
        Ok(scan)
    }
}

/// Scans `dir` once (what `hwqos-sra validate-dir` reports).
pub fn scan(dir: &Path, limits: Limits) -> Result<Scan, SchedError> {
    ContractDir::new(dir, limits).rescan()
}

/// A non-blocking inotify watch of one directory for files closed after
/// writing, created, deleted or renamed in or out. [`DirWatch::changed`]
/// drains the queued events and says whether there were any; it never
/// blocks. A queue overflow counts as a change; callers rescan the whole
/// directory anyway, and should also rescan now and then in case a watch
/// was lost.
#[derive(Debug)]
pub struct DirWatch {
    fd: OwnedFd,
    dir: PathBuf,
    /// False once the kernel dropped the watch (the directory was removed or
    /// moved away); [`DirWatch::changed`] then tries to watch it again.
    watching: bool,
}

const WATCH_MASK: u32 = libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_DELETE
    | libc::IN_CREATE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;

impl DirWatch {
    /// Watches `dir`; fails when inotify is unavailable or the directory
    /// cannot be watched (missing, no permission).
    pub fn new(dir: &Path) -> std::io::Result<DirWatch> {
        // SAFETY: inotify_init1 takes flags only and returns a new fd or -1.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut w = DirWatch {
            fd,
            dir: dir.to_path_buf(),
            watching: false,
        };
        w.add_watch()?;
        Ok(w)
    }

    fn add_watch(&mut self) -> std::io::Result<()> {
        let c = std::ffi::CString::new(self.dir.as_os_str().as_bytes()).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the path holds a NUL byte",
            )
        })?;
        // SAFETY: the fd is an open inotify descriptor and `c` a valid
        // NUL-terminated path that outlives the call.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), WATCH_MASK) };
        if wd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.watching = true;
        Ok(())
    }

    /// Whether anything happened in the directory since the last call
    /// (drains every queued event; never blocks). After the directory was
    /// removed or moved it tries to watch the path again and reports a
    /// change when that succeeds.
    pub fn changed(&mut self) -> std::io::Result<bool> {
        let mut any = false;
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: `buf` is writable for its whole length; the fd is open.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => break,
                    Some(libc::EINTR) => continue,
                    _ => return Err(e),
                }
            }
            if n == 0 {
                break;
            }
            any = true;
            if events_drop_the_watch(&buf[..n as usize]) {
                self.watching = false;
            }
        }
        if !self.watching && self.add_watch().is_ok() {
            any = true;
        }
        Ok(any)
    }
}

/// Whether a buffer of `struct inotify_event`s holds `IN_IGNORED` (the
/// kernel removed the watch). Malformed lengths end the walk.
fn events_drop_the_watch(mut buf: &[u8]) -> bool {
    const HEADER: usize = 16; // wd, mask, cookie, len: four 32-bit fields
    let mut dropped = false;
    while buf.len() >= HEADER {
        let field = |i: usize| u32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let mask = field(4);
        let len = field(12) as usize;
        if mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0 {
            dropped = true;
        }
        let Some(next) = HEADER.checked_add(len).filter(|n| *n <= buf.len()) else {
            break;
        };
        buf = &buf[next..];
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract(version: u64, quota: u64) -> String {
        format!(
            r#"{{"schema":"hwqos.contract/1","version":{version},"entries":[{{"name":"a","process":"name:x","period_us":10000,"quotas":{{"sw.page_faults":{quota}}}}}]}}"#
        )
    }

    fn put(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn candidates_are_json_files_that_are_not_dotfiles() {
        for yes in ["a.json", "10-x.json", "x.y.json"] {
            assert!(is_candidate(OsStr::new(yes)), "{yes}");
        }
        for no in [
            ".a.json",
            ".#a.json",
            "..data",
            "a.json.tmp",
            "a.tmp",
            "a.json~",
            "a.json.swp",
            ".json",
            "a.JSON",
            "a",
        ] {
            assert!(!is_candidate(OsStr::new(no)), "{no}");
        }
    }

    #[test]
    fn the_highest_valid_version_wins_and_bad_files_are_named() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        put(p, "a.json", &contract(3, 100));
        put(p, "b.json", &contract(7, 200));
        // Higher versions, but invalid: never chosen.
        put(p, "c.json", &contract(9, 0));
        put(p, "d.json", "{\"schema\": ");
        put(
            p,
            "e.json",
            &contract(8, 5).replace("\"version\":8", "\"version\":8,\"version\":1"),
        );
        put(
            p,
            "f.json",
            &contract(10, 5).replace("hwqos.contract/1", "x/2"),
        );
        // Ignored whatever they hold.
        put(p, ".g.json", &contract(99, 5));
        put(p, "h.json.tmp", &contract(99, 5));
        put(p, ".#i.json", &contract(99, 5));
        let s = scan(p, Limits::default()).unwrap();
        let names: Vec<&str> = s.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            ["a.json", "b.json", "c.json", "d.json", "e.json", "f.json"]
        );
        let (f, c) = s.chosen().unwrap();
        assert_eq!((f.name.as_str(), c.version), ("b.json", 7));
        assert_eq!(c.entries[0].quotas["sw.page_faults"], 200);
        let rejected: BTreeMap<&str, &str> =
            s.rejected().map(|(f, r)| (f.name.as_str(), r)).collect();
        assert_eq!(rejected.len(), 4, "{rejected:?}");
        assert!(rejected["c.json"].contains("quota of `sw.page_faults` is zero"));
        assert!(rejected["d.json"].contains("not a hwqos.contract/1 document"));
        assert!(rejected["e.json"].contains("duplicate key `version`"));
        assert!(rejected["f.json"].contains("schema `x/2`"));
        assert_eq!(s.new_rejections.len(), 4);
        assert_eq!(s.left_out, 0);
    }

    #[test]
    fn equal_versions_go_to_the_last_name_and_nothing_valid_chooses_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        assert!(scan(p, Limits::default()).unwrap().chosen().is_none());
        put(p, "a.json", &contract(4, 1));
        put(p, "z.json", &contract(4, 2));
        let s = scan(p, Limits::default()).unwrap();
        assert_eq!(s.chosen().unwrap().0.name, "z.json");
        put(p, "a.json", "[]");
        put(p, "z.json", "");
        let s = scan(p, Limits::default()).unwrap();
        assert!(s.chosen().is_none());
        assert_eq!(s.rejected().count(), 2);
    }

    #[test]
    fn fifos_devices_directories_and_big_files_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        put(p, "good.json", &contract(1, 10));
        let fifo = std::ffi::CString::new(p.join("fifo.json").as_os_str().as_bytes()).unwrap();
        // SAFETY: `fifo` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::create_dir(p.join("dir.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", p.join("zero.json")).unwrap();
        std::os::unix::fs::symlink(p.join("nowhere"), p.join("dangling.json")).unwrap();
        put(p, "big.json", &" ".repeat(5000));
        let limits = Limits {
            max_bytes: 4096,
            ..Limits::default()
        };
        // No writer on the FIFO: a blocking open would hang here.
        let s = scan(p, limits).unwrap();
        let rejected: BTreeMap<&str, &str> =
            s.rejected().map(|(f, r)| (f.name.as_str(), r)).collect();
        assert!(rejected["fifo.json"].contains("a FIFO"), "{rejected:?}");
        assert!(rejected["dir.json"].contains("a directory"), "{rejected:?}");
        assert!(
            rejected["zero.json"].contains("a character device"),
            "{rejected:?}"
        );
        assert!(
            rejected["dangling.json"].contains("No such file"),
            "{rejected:?}"
        );
        assert!(
            rejected["big.json"].contains("larger than 4096 bytes"),
            "{rejected:?}"
        );
        assert_eq!(s.chosen().unwrap().0.name, "good.json");
    }

    #[test]
    fn the_file_count_is_bounded_by_name_order() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        for i in 0..20u64 {
            put(p, &format!("{i:02}.json"), &contract(100 - i, 1));
        }
        let s = scan(
            p,
            Limits {
                max_files: 5,
                ..Limits::default()
            },
        )
        .unwrap();
        assert_eq!(s.files.len(), 5);
        assert_eq!(s.left_out, 15);
        assert_eq!(s.files[4].name, "04.json");
        assert_eq!(s.chosen().unwrap().1.version, 100);
        let s = scan(p, Limits::default()).unwrap();
        assert_eq!((s.files.len(), s.left_out), (20, 0));
    }

    #[test]
    fn a_rejection_is_reported_once_per_version_of_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        let mut dir = ContractDir::new(p, Limits::default());
        put(p, "a.json", &contract(1, 1));
        put(p, "b.json", "nonsense");
        let s = dir.rescan().unwrap();
        assert_eq!(s.new_rejections.len(), 1);
        assert_eq!(s.new_rejections[0].name, "b.json");
        let s = dir.rescan().unwrap();
        assert!(s.new_rejections.is_empty());
        assert_eq!(s.rejected().count(), 1);
        // Rewritten (atomically, as a tool would): read again.
        put(p, ".b.json.tmp", "still nonsense");
        std::fs::rename(p.join(".b.json.tmp"), p.join("b.json")).unwrap();
        assert_eq!(dir.rescan().unwrap().new_rejections.len(), 1);
        put(p, ".b.json.tmp", &contract(2, 1));
        std::fs::rename(p.join(".b.json.tmp"), p.join("b.json")).unwrap();
        let s = dir.rescan().unwrap();
        assert!(s.new_rejections.is_empty());
        assert_eq!(s.chosen().unwrap().1.version, 2);
        // Removed: the next best is chosen.
        std::fs::remove_file(p.join("b.json")).unwrap();
        assert_eq!(dir.rescan().unwrap().chosen().unwrap().1.version, 1);
        // The directory itself gone: an error naming it.
        let gone = p.join("gone");
        let e = ContractDir::new(&gone, Limits::default())
            .rescan()
            .unwrap_err()
            .to_string();
        assert!(e.contains("gone"), "{e}");
    }

    #[test]
    fn the_watch_sees_a_rename_and_never_blocks() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        let mut w = DirWatch::new(p).unwrap();
        assert!(!w.changed().unwrap());
        put(p, ".a.json.tmp", &contract(1, 1));
        std::fs::rename(p.join(".a.json.tmp"), p.join("a.json")).unwrap();
        assert!(w.changed().unwrap());
        assert!(!w.changed().unwrap());
        std::fs::remove_file(p.join("a.json")).unwrap();
        assert!(w.changed().unwrap());
        assert!(DirWatch::new(&p.join("missing")).is_err());
    }

    #[test]
    fn event_walk_survives_truncated_buffers() {
        let mut ev = Vec::new();
        for v in [1i32 as u32, libc::IN_CREATE, 0, 4] {
            ev.extend_from_slice(&v.to_ne_bytes());
        }
        ev.extend_from_slice(b"a\0\0\0");
        assert!(!events_drop_the_watch(&ev));
        let mut ignored = ev.clone();
        for v in [1u32, libc::IN_IGNORED, 0, 0] {
            ignored.extend_from_slice(&v.to_ne_bytes());
        }
        assert!(events_drop_the_watch(&ignored));
        // A length beyond the buffer stops the walk.
        let mut bad = Vec::new();
        for v in [1u32, 0, 0, u32::MAX] {
            bad.extend_from_slice(&v.to_ne_bytes());
        }
        assert!(!events_drop_the_watch(&bad));
        assert!(!events_drop_the_watch(&bad[..7]));
    }
}
