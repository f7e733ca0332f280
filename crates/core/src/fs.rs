//! Reading the files users give hwqos (configurations, models, contracts,
//! recordings' companions) safely: only regular files, never more than a
//! bound, never blocking on a FIFO. One implementation for every crate.

use std::io::Read;
use std::path::Path;

/// Reads a file that must be a regular file of at most `max_bytes` bytes (a
/// configuration, model or contract): a FIFO, device, directory or socket is
/// refused without blocking on it and without reading it, and a larger file
/// is refused rather than read into memory. Errors say what was wrong (the
/// caller names the path); their kind is `InvalidInput` for a file that is not
/// regular and `InvalidData` for one that is too large.
pub fn read_file_bounded(path: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = |t: std::fs::FileType| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("is {}, not a regular file", file_kind(t)),
        )
    };
    let too_large = || {
        Error::new(
            ErrorKind::InvalidData,
            format!("is larger than {max_bytes} bytes, the most accepted for this file"),
        )
    };
    // Checked before opening (opening a socket fails with a confusing ENXIO) and
    // again on the open file (the path may have changed in between). O_NONBLOCK:
    // opening a FIFO without a writer must not wait for one.
    let meta = std::fs::metadata(path)?;
    if !meta.file_type().is_file() {
        return Err(not_regular(meta.file_type()));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_regular(meta.file_type()));
    }
    if meta.len() > max_bytes {
        return Err(too_large());
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > max_bytes {
        return Err(too_large());
    }
    Ok(buf)
}

/// [`read_file_bounded`] for text: the file must also be UTF-8.
pub fn read_text_bounded(path: &Path, max_bytes: u64) -> std::io::Result<String> {
    String::from_utf8(read_file_bounded(path, max_bytes)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

fn file_kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

/// Replaces `path` with `bytes` so that a reader, or the file after a crash,
/// holds either the old content or the new one, never a half-written file:
/// the bytes go to a temporary file in the same directory (created with
/// `mode`, then synced), which is renamed over `path`; the directory is then
/// synced so the rename survives a power loss. Missing parent directories are
/// created. One implementation for every file hwqos saves (models, targets,
/// contracts, state).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    // Unique per process and call, so concurrent writers never share a file.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(
        ".{}.{}-{n}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // Best effort: some file systems refuse to sync a directory.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_directories_big_and_binary_files_are_refused_without_reading() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_file_bounded(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(
            e.to_string()
                .contains("a character device, not a regular file"),
            "{e}"
        );
        let fifo = dir.path().join("f");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let e = read_file_bounded(&fifo, 1024).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let e = read_file_bounded(dir.path(), 1024).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 2048]).unwrap();
        let e = read_file_bounded(&big, 1024).unwrap_err();
        assert!(e.to_string().contains("larger than 1024 bytes"), "{e}");
        let bin = dir.path().join("bin");
        std::fs::write(&bin, [b'a', 0xff, b'b']).unwrap();
        let e = read_text_bounded(&bin, 1024).unwrap_err();
        assert!(
            e.to_string()
                .contains("not UTF-8 text (invalid byte at offset 1)"),
            "{e}"
        );
        let ok = dir.path().join("ok");
        std::fs::write(&ok, "k = 1\n").unwrap();
        assert_eq!(read_text_bounded(&ok, 1024).unwrap(), "k = 1\n");
    }

    #[test]
    fn write_atomic_replaces_whole_files_and_leaves_no_temporary() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/model.json");
        write_atomic(&path, b"first", 0o644).unwrap();
        write_atomic(&path, b"second, longer", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the new file's mode");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("model.json")]);
    }

    #[test]
    fn write_atomic_keeps_the_old_file_when_it_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.json");
        write_atomic(&path, b"old", 0o644).unwrap();
        // A directory where the file should go: the rename fails.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("x"), b"").unwrap();
        assert!(write_atomic(&blocked, b"new", 0o644).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
