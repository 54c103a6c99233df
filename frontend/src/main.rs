//! The `kiln` command-line tool: dump and run IR files, and a demo.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // installs the stderr subscriber when KILN_LOGS asks for logs
    let _ = kiln::compile::log_enabled(kiln::compile::LogCategory::Passes);
    let result = cli::run(args);
    // KILN_PROFILE=1: where the compiled kernels' time went (bench --profile prints its own)
    let rows = kiln::profile::report();
    if kiln::profile::enabled() && !rows.is_empty() {
        eprint!("{}", kiln::profile::format_report(&rows, 40));
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
