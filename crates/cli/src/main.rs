//! `hwqos`: the human-facing command line (see the `hwqos_cli` library).

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    use std::io::IsTerminal;
    // RUST_LOG like every tracing-based tool; HWQOS_LOG, the older name, still works.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_env("HWQOS_LOG"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let cli = hwqos_cli::args::Cli::parse();
    if let Err(e) = hwqos_pmu::backend::perf::raise_open_file_limit() {
        tracing::warn!("cannot raise the open-file limit (every counter is a file): {e}");
    }
    match hwqos_cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("hwqos: {e:#}");
            ExitCode::from(hwqos_cli::error::exit_code_of(&e))
        }
    }
}
