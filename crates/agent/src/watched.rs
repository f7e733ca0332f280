//! An agent's side of a directory of distributed documents
//! ([`hwqos_core::watch_dir`]): the inotify watch set up when the directory
//! appears, and every scan's news logged once — a listing error until it
//! changes, each rejected file once per version of the file, the files left
//! out beyond the bound when their number changes. What to do with the
//! chosen document (apply a contract, replay a model) is the caller's.

use hwqos_core::watch_dir::DirWatch;
pub use hwqos_core::watch_dir::{Limits, Scan, Versioned, WatchedDir};

/// A watched directory of one kind of document, with its log.
#[derive(Debug)]
pub struct WatchedFiles<T> {
    dir: WatchedDir<T>,
    /// What the documents are, for the log ("contract", "load model").
    what: &'static str,
    watch: Option<DirWatch>,
    /// The last error listing the directory, logged once until it changes.
    last_error: Option<String>,
    /// Candidates left out beyond the bound, logged when it changes.
    last_left_out: usize,
}

impl<T> WatchedFiles<T> {
    /// Starts watching `dir` (if it exists yet) for documents called `what`.
    pub fn new(dir: WatchedDir<T>, what: &'static str) -> WatchedFiles<T> {
        let mut f = WatchedFiles {
            dir,
            what,
            watch: None,
            last_error: None,
            last_left_out: 0,
        };
        f.ensure_watch();
        f
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Sets up the inotify watch if there is none (the directory may appear
    /// after the agent started); without one, periodic rescans still work.
    pub fn ensure_watch(&mut self) {
        if self.watch.is_some() {
            return;
        }
        match DirWatch::new(self.dir.path()) {
            Ok(w) => {
                tracing::info!(dir = %self.dir.path().display(), "watching the {} directory", self.what);
                self.watch = Some(w);
            }
            Err(e) => tracing::debug!(
                dir = %self.dir.path().display(),
                error = %e,
                "cannot watch the {} directory yet; rescanning periodically",
                self.what
            ),
        }
    }

    /// Whether the watch reported a change since the last call (never
    /// blocks). A failed watch is dropped and counts as a change.
    pub fn poll(&mut self) -> bool {
        let Some(w) = &mut self.watch else {
            return false;
        };
        match w.changed() {
            Ok(changed) => changed,
            Err(e) => {
                tracing::warn!(error = %e, "{} directory watch failed; rescanning periodically", self.what);
                self.watch = None;
                true
            }
        }
    }

    /// Rescans the directory and logs what is new; `None` when it cannot be
    /// listed (the caller keeps what it has).
    pub fn rescan(&mut self) -> Option<Scan<T>> {
        let dir = self.dir.path().display().to_string();
        let what = self.what;
        let scan = match self.dir.rescan() {
            Ok(s) => {
                if self.last_error.take().is_some() {
                    tracing::info!(dir, "the {what} directory is readable again");
                }
                s
            }
            Err(e) => {
                let msg = e.to_string();
                if self.last_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(dir, error = %msg, "cannot list the {what} directory; what is applied stays applied");
                    self.last_error = Some(msg);
                }
                return None;
            }
        };
        for r in &scan.new_rejections {
            tracing::warn!(dir, file = %r.name, reason = %r.reason, "{what} file rejected; not applied");
        }
        if scan.left_out != self.last_left_out {
            if scan.left_out > 0 {
                tracing::warn!(
                    dir,
                    left_out = scan.left_out,
                    "more {what} files than the {} considered: the rest (last by name) are ignored",
                    hwqos_core::watch_dir::MAX_FILES
                );
            }
            self.last_left_out = scan.left_out;
        }
        Some(scan)
    }
}

/// What a `validate-dir` command prints: one line per candidate file
/// (`NAME: ok vVERSION` or `NAME: rejected: REASON`), a line for the files
/// left out beyond the bound, then the file the agent would `verb` (`would
/// apply: NAME (vVERSION)`, or `nothing (no valid WHAT)`); and, when a file
/// is invalid, the command's one-line failure (`DIR: N of M WHAT file(s)
/// rejected`).
pub fn report<T: Versioned>(
    scan: &Scan<T>,
    dir: &std::path::Path,
    what: &str,
    verb: &str,
) -> (String, Option<String>) {
    use std::fmt::Write as _;
    let mut out = String::new();
    for f in &scan.files {
        match &f.content {
            Ok(c) => writeln!(out, "{}: ok v{}", f.name, c.version()),
            Err(reason) => writeln!(out, "{}: rejected: {reason}", f.name),
        }
        .expect("writing to a String");
    }
    if scan.left_out > 0 {
        writeln!(
            out,
            "{} more file(s) after the first {} by name are not read",
            scan.left_out,
            hwqos_core::watch_dir::MAX_FILES
        )
        .expect("writing to a String");
    }
    match scan.chosen() {
        Some((f, c)) => writeln!(out, "would {verb}: {} (v{})", f.name, c.version()),
        None => writeln!(out, "would {verb}: nothing (no valid {what})"),
    }
    .expect("writing to a String");
    let rejected = scan.rejected().count();
    let failure = (rejected > 0).then(|| {
        format!(
            "{}: {rejected} of {} {what} file(s) rejected",
            dir.display(),
            scan.files.len()
        )
    });
    (out, failure)
}
