//! Contracts distributed as plain files in a directory (issue 21 item 3):
//! a configuration tool (Ansible, Salt, a Kubernetes ConfigMap) writes
//! `hwqos.contract/1` files into one directory, and `hwqos-sra run`
//! (`[agent] contract_dir`) applies the best of them; `hwqos-sra
//! validate-dir` reports what it would apply.
//!
//! The directory rule (candidates, bounds, the highest valid `version`
//! chosen, rejections reported once) is [`hwqos_core::watch_dir`]'s; this
//! module says how a contract file is checked: read through
//! [`crate::input::read_regular`] and parsed with [`Contract::parse`] (no
//! duplicate keys, [`Contract::validate`]).

use crate::contract::Contract;
use crate::SchedError;
use hwqos_core::watch_dir::{self, WatchedDir};
use std::path::Path;

pub use hwqos_core::watch_dir::{is_candidate, DirWatch, Limits, Rejected, MAX_FILES};

/// A scan of a contract directory.
pub type Scan = watch_dir::Scan<Contract>;
/// One contract file and what it holds.
pub type FileVerdict = watch_dir::FileVerdict<Contract>;
/// A watched contract directory.
pub type ContractDir = WatchedDir<Contract>;

impl watch_dir::Versioned for Contract {
    fn version(&self) -> u64 {
        self.version
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

/// A contract directory not scanned yet.
pub fn contract_dir(dir: impl Into<std::path::PathBuf>, limits: Limits) -> ContractDir {
    WatchedDir::new(dir, limits, Box::new(check_file))
}

/// Scans `dir` once (what `hwqos-sra validate-dir` reports). Fails only
/// when the directory cannot be listed; the error names it.
pub fn scan(dir: &Path, limits: Limits) -> Result<Scan, SchedError> {
    contract_dir(dir, limits)
        .rescan()
        .map_err(|source| SchedError::File {
            path: dir.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::ffi::OsStrExt;

    fn contract(version: u64, quota: u64) -> String {
        format!(
            r#"{{"schema":"hwqos.contract/1","version":{version},"entries":[{{"name":"a","process":"name:x","period_us":10000,"quotas":{{"sw.page_faults":{quota}}}}}]}}"#
        )
    }

    fn put(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
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
        let mut dir = contract_dir(p, Limits::default());
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
        let e = scan(&gone, Limits::default()).unwrap_err().to_string();
        assert!(e.contains("gone"), "{e}");
    }
}
