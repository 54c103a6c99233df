//! `kiln dump FILE.kir`: parse, verify and print with inferred types.

use super::{read_module, CliError};
use std::path::Path;

/// Prints every graph of the file in canonical form.
pub fn dump(file: &Path) -> Result<(), CliError> {
    let graphs = read_module(file)?;
    print!("{}", kiln::ir::text::print_module(&graphs));
    Ok(())
}
