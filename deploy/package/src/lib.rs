//! Packaging assets generated from the binaries' clap definitions: man pages
//! (`clap_mangen`) and shell completions (`clap_complete`).
//!
//! Every binary's clap definition is public in its library crate (`cli`
//! modules). Adding an agent: depend on its crate and add its command to
//! [`commands`].

use clap::CommandFactory;
use clap_complete::Shell;
use std::io;
use std::path::{Path, PathBuf};

/// The clap command of every packaged binary.
pub fn commands() -> Vec<clap::Command> {
    vec![
        hwqos_monitor::cli::Cli::command(),
        hwqos_relay::cli::Cli::command(),
        hwqos_loadgen::cli::Cli::command(),
        hwqos_sra::cli::Cli::command(),
        hwqos_cli::args::Cli::command(),
    ]
}

/// Writes `out/man/NAME.1` (and `NAME-SUB.1` per subcommand) and
/// `out/completions/{bash/NAME, zsh/_NAME, fish/NAME.fish}` for every command
/// of [`commands`]; returns the paths written.
pub fn write_assets(out: &Path) -> io::Result<Vec<PathBuf>> {
    let man_dir = out.join("man");
    std::fs::create_dir_all(&man_dir)?;
    let mut written = Vec::new();
    for cmd in commands() {
        let mut cmd = cmd;
        cmd.build();
        written.extend(write_man_pages(&cmd, &man_dir)?);
        for (shell, dir, file) in [
            (Shell::Bash, "bash", cmd.get_name().to_string()),
            (Shell::Zsh, "zsh", format!("_{}", cmd.get_name())),
            (Shell::Fish, "fish", format!("{}.fish", cmd.get_name())),
        ] {
            let dir = out.join("completions").join(dir);
            std::fs::create_dir_all(&dir)?;
            let path = dir.join(file);
            let mut f = std::fs::File::create(&path)?;
            let name = cmd.get_name().to_string();
            clap_complete::generate(shell, &mut cmd.clone(), name, &mut f);
            written.push(path);
        }
    }
    Ok(written)
}

/// One page for the command and one per (visible) subcommand, named like
/// git's: `hwqos-stat.1`.
fn write_man_pages(cmd: &clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let path = dir.join(format!(
        "{}.1",
        cmd.get_display_name().unwrap_or(cmd.get_name())
    ));
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    std::fs::write(&path, buf)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        written.extend(write_man_pages(sub, dir)?);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_pages_and_completions_name_the_real_options() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_assets(dir.path()).unwrap();
        let read = |rel: &str| {
            std::fs::read_to_string(dir.path().join(rel))
                .unwrap_or_else(|e| panic!("{rel}: {e}; written: {written:?}"))
        };
        let monitor = read("man/hwqos-monitor.1");
        assert!(
            monitor.starts_with(".ie \\n(.g .ds Aq"),
            "roff: {monitor:.80}"
        );
        assert!(monitor.contains(".TH hwqos-monitor 1"), "{monitor}");
        // roff escapes dashes: \-\-check\-config.
        for flag in ["check\\-config", "list\\-events", "once", "rate"] {
            assert!(monitor.contains(flag), "hwqos-monitor.1 lacks {flag}");
        }
        for agent in ["hwqos-relay", "hwqos-loadgen", "hwqos-sra"] {
            let page = read(&format!("man/{agent}.1"));
            assert!(page.contains(&format!(".TH {agent} 1")), "{page:.200}");
            assert!(read(&format!("completions/bash/{agent}")).contains(agent));
        }
        assert!(read("man/hwqos-sra-apply.1").contains("contract"));
        assert!(read("man/hwqos-loadgen-replay.1").contains("verify"));
        let stat = read("man/hwqos-stat.1");
        assert!(stat.contains(".TH hwqos-stat 1"), "{stat:.200}");
        assert!(read("completions/bash/hwqos-monitor").contains("--check-config"));
        assert!(read("completions/zsh/_hwqos").contains("#compdef hwqos"));
        assert!(read("completions/fish/hwqos.fish").contains("complete -c hwqos"));
    }
}
