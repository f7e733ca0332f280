//! `hwqos-dist-assets OUT_DIR`: writes the man pages (`OUT_DIR/man/*.1`, from
//! the clap definitions with `clap_mangen`) and shell completions
//! (`OUT_DIR/completions/{bash,zsh,fish}/`, with `clap_complete`) of every
//! hwqos binary that goes into the package. A packaging-time tool: nothing
//! here is linked into the agents.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;

/// Writes the man pages and shell completions of every packaged hwqos binary.
#[derive(Debug, Parser)]
#[command(name = "hwqos-dist-assets", version)]
struct Args {
    /// Directory to write `man/` and `completions/{bash,zsh,fish}/` into
    /// (created if missing).
    #[arg(value_name = "OUT_DIR")]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let written = hwqos_dist::write_assets(&args.out)
        .with_context(|| format!("writing assets to {}", args.out.display()))?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}
