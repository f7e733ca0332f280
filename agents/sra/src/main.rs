//! `hwqos-sra`: command-line and process glue around the [`hwqos_sra`]
//! library and hwqos-sched. Exit statuses follow
//! [`hwqos_agent::lifecycle`]: 0 success (SIGTERM included), 1 runtime
//! failure, 2 bad configuration or input.

use clap::Parser;
use hwqos_sra::cli::{Cli, Command};
use hwqos_sra::commands;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Guardian = cli.command {
        // Before anything else: no logging setup, no threads.
        hwqos_sched::guardian::ignore_group_stop_signals();
        // SAFETY: getppid has no preconditions.
        let agent = unsafe { libc::getppid() } as u32;
        let reg = hwqos_sched::guardian::run_for(std::io::stdin().lock(), Some(agent));
        if !reg.pids.is_empty() || !reg.cgroups.is_empty() {
            eprintln!(
                "hwqos-sra guardian: agent gone; thawed {} pid(s) and {} cgroup(s)",
                reg.pids.len(),
                reg.cgroups.len()
            );
        }
        return ExitCode::SUCCESS;
    }
    hwqos_agent::init_logging();
    let result = match cli.command {
        Command::Run {
            config,
            check_config,
        } => commands::run(&config, check_config),
        Command::Apply(a) => commands::apply(a),
        Command::Analyse(a) => commands::analyse(a),
        Command::Predict(a) => commands::predict(a),
        Command::Decide(a) => commands::decide(a),
        Command::FindLimit(a) => commands::find_limit(a),
        Command::Leech(a) => commands::leech(a),
        Command::Thaw { state_dir } => commands::thaw(&state_dir),
        Command::ValidateDir { dir } => commands::validate_dir(&dir),
        Command::Guardian => unreachable!("handled above"),
    };
    hwqos_agent::lifecycle::finish("hwqos-sra", result)
}
