//! `hwqos-dist-assets OUT_DIR`: writes the man pages (`OUT_DIR/man/*.1`, from
//! the clap definitions with `clap_mangen`) and shell completions
//! (`OUT_DIR/completions/{bash,zsh,fish}/`, with `clap_complete`) of every
//! hwqos binary that goes into the package. A packaging-time tool: nothing
//! here is linked into the agents.

use anyhow::Context;
use std::path::Path;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let out = match (args.next(), args.next()) {
        (Some(out), None) => std::path::PathBuf::from(out),
        _ => anyhow::bail!("usage: hwqos-dist-assets OUT_DIR"),
    };
    let written = hwqos_dist::write_assets(&out)
        .with_context(|| format!("writing assets to {}", Path::new(&out).display()))?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}
