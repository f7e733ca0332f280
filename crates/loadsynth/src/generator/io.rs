//! File I/O: paced writes into one file in a configurable directory, with the
//! drivers of file-system throughput from seed 002 chapter 3 as settings —
//! block size, sequential or random offsets, and buffered, `fsync` after each
//! block, or `O_SYNC`. The knob is bytes per second; the work counter holds
//! the bytes written. Writing stops for good at the I/O volume cap, and the
//! file is removed when the generator stops.

use super::{paced, Context};
use crate::knob::Knob;
use serde::{Deserialize, Serialize};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// Where each block goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Block after block, wrapping at the end of the file (the default).
    #[default]
    Sequential,
    /// A pseudo-random block of the file each time.
    Random,
}

/// How each block reaches the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SyncMode {
    /// Page cache only.
    #[default]
    Buffered,
    /// `fsync` after every block.
    Fsync,
    /// The file is opened with `O_SYNC`.
    OSync,
}

/// The I/O generator's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IoSettings {
    /// Directory of the generator's file (default: the system temp dir).
    pub dir: PathBuf,
    /// Bytes per write (default 64 KiB; at least 512 is used).
    pub block_bytes: usize,
    /// Size of the file the writes cycle over (default 64 MiB); total volume
    /// is bounded by the I/O cap, not by this.
    pub file_bytes: u64,
    /// Where each block goes.
    pub pattern: Pattern,
    /// How each block reaches the disk.
    pub sync: SyncMode,
}

impl Default for IoSettings {
    fn default() -> Self {
        IoSettings {
            dir: std::env::temp_dir(),
            block_bytes: 64 << 10,
            file_bytes: 64 << 20,
            pattern: Pattern::Sequential,
            sync: SyncMode::Buffered,
        }
    }
}

/// Name prefix of the fallback named files.
pub const FILE_PREFIX: &str = "hwqos-loadgen-io-";

/// Opens the generator's file in `cfg.dir`: unnamed (`O_TMPFILE`) where the
/// file system supports it, else named (returned, to be removed on stop).
fn open_file(cfg: &IoSettings, cpu: u32) -> std::io::Result<(std::fs::File, Option<PathBuf>)> {
    let sync = if cfg.sync == SyncMode::OSync {
        libc::O_SYNC
    } else {
        0
    };
    let named = cfg
        .dir
        .join(format!("{FILE_PREFIX}{}-{cpu}.dat", std::process::id()));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true)
        .custom_flags(libc::O_TMPFILE | sync)
        .mode(0o600);
    match opts.open(&cfg.dir) {
        Ok(f) => return Ok((f, None)),
        // EOPNOTSUPP / EISDIR / EINVAL: no O_TMPFILE on this file system or kernel.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
            ) => {}
        Err(e) => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("opening a file in {}: {e}", cfg.dir.display()),
            ))
        }
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).write(true).truncate(true);
    opts.custom_flags(sync);
    let f = opts
        .open(&named)
        .map_err(|e| std::io::Error::new(e.kind(), format!("opening {}: {e}", named.display())))?;
    Ok((f, Some(named)))
}

/// Removes `hwqos-loadgen-io-PID-CPU.dat` files in `dir` whose process no
/// longer runs: left by a generator that was
/// killed (`kill -9`) on a file system without `O_TMPFILE`, or by an older
/// version. Returns the files removed.
pub fn remove_stale_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(FILE_PREFIX))
            .and_then(|n| n.strip_suffix(".dat"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        // A reused PID keeps its file until that process is gone too.
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if !alive && std::fs::remove_file(e.path()).is_ok() {
            tracing::info!("removed a stale I/O file {}", e.path().display());
            removed.push(e.path());
        }
    }
    removed
}

/// Runs until stopped or until `max_total_bytes` were written.
pub fn run(
    ctx: &Context,
    rate: &Knob,
    cfg: &IoSettings,
    max_total_bytes: u64,
) -> std::io::Result<()> {
    let block = cfg.block_bytes.max(512);
    let blocks_in_file = (cfg.file_bytes / block as u64).max(1);
    remove_stale_files(&cfg.dir);
    let (mut file, path) = open_file(cfg, ctx.cpu)?;
    let data = vec![0xA5u8; block];
    let mut written = 0u64;
    let mut next = 0u64;
    let mut state = 0x9E37_79B9u64 ^ ctx.cpu as u64;
    let mut failure = None;
    paced(
        &ctx.stop,
        || rate.get() / block as f64,
        |blocks| {
            for _ in 0..blocks {
                if written + block as u64 > max_total_bytes || failure.is_some() {
                    return;
                }
                let index = match cfg.pattern {
                    Pattern::Sequential => {
                        next = (next + 1) % blocks_in_file;
                        next
                    }
                    Pattern::Random => {
                        state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                        (state >> 33) % blocks_in_file
                    }
                };
                let res = file
                    .seek(SeekFrom::Start(index * block as u64))
                    .and_then(|_| file.write_all(&data))
                    .and_then(|_| {
                        if cfg.sync == SyncMode::Fsync {
                            file.sync_data()
                        } else {
                            Ok(())
                        }
                    });
                if let Err(e) = res {
                    failure = Some(e);
                    return;
                }
                written += block as u64;
                ctx.done.add(block as u64);
            }
        },
    );
    drop(file);
    if let Some(p) = &path {
        let _ = std::fs::remove_file(p);
    }
    match failure {
        Some(e) => Err(std::io::Error::new(
            e.kind(),
            format!(
                "writing {}: {e}",
                path.as_deref().unwrap_or(&cfg.dir).display()
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_files_of_dead_processes_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        // A process that has exited: its PID is free (until reused).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = dir.path().join(format!("{FILE_PREFIX}{dead}-1.dat"));
        let live = dir
            .path()
            .join(format!("{FILE_PREFIX}{}-0.dat", std::process::id()));
        let other = dir.path().join("unrelated.dat");
        for p in [&stale, &live, &other] {
            std::fs::write(p, b"x").unwrap();
        }
        assert_eq!(remove_stale_files(dir.path()), vec![stale.clone()]);
        assert!(!stale.exists());
        assert!(live.exists() && other.exists());
    }

    #[test]
    fn the_file_has_no_name_where_o_tmpfile_works() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = IoSettings {
            dir: dir.path().into(),
            ..IoSettings::default()
        };
        let (mut f, name) = open_file(&cfg, 0).unwrap();
        f.write_all(b"data").unwrap();
        if name.is_none() {
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }
}
