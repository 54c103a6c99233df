//! `kiln dump FILE.kir`: parse, verify and print with inferred types;
//! `kiln dump --model NAME --stage traced`: the graph `kiln::compile` captures for a model.

use super::{read_module, CliError, Stage};
use kiln::{compile_with, models, CompileOptions, Dynamic, Tensor};
use std::path::Path;

/// Prints every graph of the file in canonical form.
pub fn dump(file: &Path) -> Result<(), CliError> {
    let graphs = read_module(file)?;
    print!("{}", kiln::ir::text::print_module(&graphs));
    Ok(())
}

/// Traces a model of the zoo on fresh inputs and prints the captured graph(s).
pub fn dump_model(
    name: &str,
    stage: Stage,
    shape: Option<&[usize]>,
    dynamic: bool,
) -> Result<(), CliError> {
    let model = models::build(name, shape)?;
    let inputs = model.example_inputs(0)?;
    let opts = CompileOptions::default().name(name).dynamic(if dynamic {
        Dynamic::Always
    } else {
        Dynamic::Auto
    });
    let compiled = compile_with(|xs: &[Tensor]| model.forward(xs), opts);
    let graphs = match stage {
        Stage::Traced => compiled.capture(&inputs)?,
    };
    print!("{}", kiln::ir::text::print_module(&graphs));
    Ok(())
}
