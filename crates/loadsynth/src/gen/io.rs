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
    #[default]
    Sequential,
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
    pub dir: PathBuf,
    pub block_bytes: usize,
    pub file_bytes: u64,
    pub pattern: Pattern,
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

/// Runs until stopped or until `max_total_bytes` were written.
pub fn run(
    ctx: &Context,
    rate: &Knob,
    cfg: &IoSettings,
    max_total_bytes: u64,
) -> std::io::Result<()> {
    let block = cfg.block_bytes.max(512);
    let blocks_in_file = (cfg.file_bytes / block as u64).max(1);
    let path = cfg.dir.join(format!(
        "hwqos-loadgen-io-{}-{}.dat",
        std::process::id(),
        ctx.cpu
    ));
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).write(true).truncate(true);
    if cfg.sync == SyncMode::OSync {
        opts.custom_flags(libc::O_SYNC);
    }
    let mut file = opts
        .open(&path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("opening {}: {e}", path.display())))?;
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
    let _ = std::fs::remove_file(&path);
    match failure {
        Some(e) => Err(std::io::Error::new(
            e.kind(),
            format!("writing {}: {e}", path.display()),
        )),
        None => Ok(()),
    }
}
