//! The `kiln` command-line tool: dump and run IR files, and a demo.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // installs the stderr subscriber when KILN_LOGS asks for logs
    let _ = kiln::compile::log_enabled(kiln::compile::LogCategory::Passes);
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
