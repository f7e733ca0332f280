//! Files distributed as plain files in a directory: a configuration tool
//! (Ansible, Salt, a Kubernetes ConfigMap) writes documents — SRA contracts,
//! load models — into one directory, and an agent applies the best of them.
//!
//! The rule, the same for every kind of document:
//!
//! - **Candidates** are the entries whose name ends in `.json` and does not
//!   start with a dot. Everything else is ignored without a word: dotfiles
//!   (`.#x.json` editor locks, `..data` of a ConfigMap, the `.x.json.N.tmp`
//!   files of an atomic save), `*.tmp`, `*.json.swp`, `*~`. A tool should
//!   write `NAME.json.tmp` (or a dotfile) and rename it to `NAME.json`, so the
//!   file is only ever seen whole.
//! - At most [`Limits::max_files`] candidates are considered, the first ones
//!   in byte order of their names; the rest are counted in
//!   [`Scan::left_out`].
//! - Each candidate is checked by the directory's checker (which reads it
//!   with [`crate::fs::read_text_bounded`]: a regular file, symbolic links
//!   followed, at most [`Limits::max_bytes`]; a FIFO or device is refused
//!   without blocking) and parsed and validated. A file that fails is
//!   *rejected* with its name and the reason.
//! - The **chosen** document is the valid one with the highest
//!   [`Versioned::version`]; between equal versions, the file whose name
//!   sorts last. A directory with no valid candidate chooses nothing (the
//!   agent then keeps what it has).
//!
//! [`WatchedDir`] remembers each file's identity (device, inode, size,
//! modification and change times) and re-reads only files that changed, so
//! a rejected file is reported once, not at every rescan. [`DirWatch`] is a
//! non-blocking inotify watch that says when the directory may have changed.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Most candidate files considered in one directory.
pub const MAX_FILES: usize = 256;

/// Default bound on one file's size.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// A document that carries a version: of the valid files in a directory,
/// the highest version is chosen.
pub trait Versioned {
    /// The document's version (0 when it has none).
    fn version(&self) -> u64;
}

/// Bounds of one scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Candidates considered (the first ones by name); default [`MAX_FILES`].
    pub max_files: usize,
    /// Largest file read, in bytes; default [`MAX_FILE_BYTES`].
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_files: MAX_FILES,
            max_bytes: MAX_FILE_BYTES,
        }
    }
}

/// Whether a directory entry named `name` is a candidate: it ends in
/// `.json` and does not start with a dot.
pub fn is_candidate(name: &OsStr) -> bool {
    let b = name.as_bytes();
    b.len() > ".json".len() && b.ends_with(b".json") && !b.starts_with(b".")
}

/// One candidate file and what it holds.
#[derive(Debug)]
pub struct FileVerdict<T> {
    /// The file's name in the directory (lossy UTF-8).
    pub name: String,
    /// Its path.
    pub path: PathBuf,
    /// The valid document, or why the file was rejected.
    pub content: Result<Arc<T>, String>,
}

impl<T> Clone for FileVerdict<T> {
    fn clone(&self) -> Self {
        FileVerdict {
            name: self.name.clone(),
            path: self.path.clone(),
            content: self.content.clone(),
        }
    }
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
#[derive(Debug)]
pub struct Scan<T> {
    /// Every candidate considered, in byte order of the names.
    pub files: Vec<FileVerdict<T>>,
    /// Candidates beyond [`Limits::max_files`], not read.
    pub left_out: usize,
    /// Files rejected that the previous scan had not rejected as they are
    /// now (every rejected file on a first scan).
    pub new_rejections: Vec<Rejected>,
}

impl<T> Default for Scan<T> {
    fn default() -> Self {
        Scan {
            files: Vec::new(),
            left_out: 0,
            new_rejections: Vec::new(),
        }
    }
}

impl<T: Versioned> Scan<T> {
    /// The chosen file: the valid document with the highest version, ties
    /// to the name that sorts last; `None` when no candidate is valid.
    pub fn chosen(&self) -> Option<(&FileVerdict<T>, &Arc<T>)> {
        self.files
            .iter()
            .filter_map(|f| f.content.as_ref().ok().map(|c| (f, c)))
            .max_by(|(fa, a), (fb, b)| {
                a.version()
                    .cmp(&b.version())
                    .then_with(|| fa.name.as_bytes().cmp(fb.name.as_bytes()))
            })
    }
}

impl<T> Scan<T> {
    /// The rejected files with their reasons.
    pub fn rejected(&self) -> impl Iterator<Item = (&FileVerdict<T>, &str)> {
        self.files
            .iter()
            .filter_map(|f| f.content.as_ref().err().map(|r| (f, r.as_str())))
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

/// Reads one file as text within `max_bytes` and hands it to `parse`; the
/// error is the reason (the caller names the file). The usual body of a
/// [`Checker`].
pub fn check_text<T>(
    path: &Path,
    max_bytes: u64,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, String> {
    let text = crate::fs::read_text_bounded(path, max_bytes).map_err(|e| e.to_string())?;
    parse(&text)
}

/// Reads, parses and validates one file of a watched directory: the path
/// and the size bound in, the document or the reason it is rejected out.
pub type Checker<T> = Box<dyn Fn(&Path, u64) -> Result<T, String> + Send>;

/// A watched directory: [`WatchedDir::rescan`] lists the candidates,
/// re-reads those that changed since the last scan and reports the new
/// rejections.
pub struct WatchedDir<T> {
    dir: PathBuf,
    limits: Limits,
    check: Checker<T>,
    known: BTreeMap<OsString, (Identity, Result<Arc<T>, String>)>,
}

impl<T> std::fmt::Debug for WatchedDir<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchedDir")
            .field("dir", &self.dir)
            .field("limits", &self.limits)
            .field("known", &self.known.len())
            .finish()
    }
}

impl<T> WatchedDir<T> {
    /// A directory not scanned yet, whose files `check` reads and validates.
    pub fn new(dir: impl Into<PathBuf>, limits: Limits, check: Checker<T>) -> WatchedDir<T> {
        WatchedDir {
            dir: dir.into(),
            limits,
            check,
            known: BTreeMap::new(),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Scans the directory. Fails only when the directory itself cannot be
    /// listed (missing, not a directory, no permission; the error does not
    /// name it, the caller does); a bad file is a rejection in the result,
    /// never an error.
    pub fn rescan(&mut self) -> std::io::Result<Scan<T>> {
        // The first `max_files` names in byte order, kept bounded while
        // the listing is read.
        let mut names: BTreeSet<OsString> = BTreeSet::new();
        let mut left_out = 0usize;
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
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
                            (self.check)(&path, self.limits.max_bytes).map(Arc::new)
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
                content: verdict.clone(),
            });
            known.insert(name, (id, verdict));
        }
        self.known = known;
        Ok(scan)
    }
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

    /// A document of one line: `VERSION`, or anything else to be rejected.
    #[derive(Debug, PartialEq)]
    struct Doc(u64);

    impl Versioned for Doc {
        fn version(&self) -> u64 {
            self.0
        }
    }

    fn docs(dir: &Path, limits: Limits) -> WatchedDir<Doc> {
        WatchedDir::new(
            dir,
            limits,
            Box::new(|p, max| {
                check_text(p, max, |t| {
                    t.trim()
                        .parse()
                        .map(Doc)
                        .map_err(|e| format!("not a version: {e}"))
                })
            }),
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
    fn the_highest_valid_version_wins_ties_to_the_last_name() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        let mut w = docs(p, Limits::default());
        assert!(w.rescan().unwrap().chosen().is_none());
        put(p, "a.json", "3");
        put(p, "b.json", "7");
        put(p, "c.json", "nine");
        put(p, ".d.json", "99");
        put(p, "e.json.tmp", "99");
        let s = w.rescan().unwrap();
        assert_eq!(s.files.len(), 3);
        assert_eq!(s.chosen().unwrap().0.name, "b.json");
        assert_eq!(s.new_rejections.len(), 1);
        assert!(s.new_rejections[0].reason.contains("not a version"));
        // Reported once per version of the file.
        assert!(w.rescan().unwrap().new_rejections.is_empty());
        put(p, "z.json", "7");
        assert_eq!(w.rescan().unwrap().chosen().unwrap().0.name, "z.json");
        assert!(WatchedDir::<Doc>::rescan(&mut docs(&p.join("gone"), Limits::default())).is_err());
    }

    #[test]
    fn the_watch_sees_a_rename_and_never_blocks() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        let mut w = DirWatch::new(p).unwrap();
        assert!(!w.changed().unwrap());
        put(p, ".a.json.tmp", "1");
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
