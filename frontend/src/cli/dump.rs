//! `kiln dump FILE.kir`: parse, verify and print with inferred types;
//! `kiln dump --model NAME --stage traced`: the graph `kiln::compile` captures for a model.

use super::{read_module, CliError, Stage};
use kiln::{compile_with, models, CompileOptions, Dynamic, Tensor};
use std::path::Path;

/// Prints every graph of the file at `stage`.
pub fn dump(file: &Path, stage: Stage) -> Result<(), CliError> {
    let graphs = read_module(file)?;
    print_stage(&graphs, stage)
}

/// Prints graphs after the passes that lead to `stage`.
fn print_stage(graphs: &[kiln::Graph], stage: Stage) -> Result<(), CliError> {
    use kiln_passes::pipeline::{run_passes, stage_passes, PassOptions};
    if stage == Stage::Partition {
        for g in graphs {
            print!("{}", partition_text(g)?);
        }
        return Ok(());
    }
    let pipeline = match stage {
        Stage::Loops | Stage::Clif | Stage::C | Stage::Cuda | Stage::Ptx => "scheduled",
        s => s.name(),
    };
    let passes = stage_passes(pipeline).ok_or("unknown stage")?;
    // the pipeline the backend whose stage is printed runs: the composites it renders stay
    let mut opts = PassOptions::default();
    opts.decompose.renders = if matches!(stage, Stage::Cuda | Stage::Ptx) {
        kiln_codegen::cuda::renders
    } else {
        kiln_codegen::cpu::renders
    };
    let mut out = Vec::new();
    for g in graphs {
        out.push(run_passes(g, passes, &opts, true)?);
    }
    if stage == Stage::Scheduled {
        for g in &out {
            print!("{}", kiln_passes::schedule::schedule(g)?);
        }
    } else if stage == Stage::Ptx {
        for g in &out {
            let s = kiln_passes::schedule::schedule(g)?;
            let text = kiln_codegen::cuda::dump::describe_ptx(&s).map_err(|e| e.to_string())?;
            print!("{text}");
        }
    } else if stage == Stage::Cuda {
        for g in &out {
            let s = kiln_passes::schedule::schedule(g)?;
            print!("{}", kiln_codegen::cuda::dump::describe(&s));
        }
    } else if matches!(stage, Stage::Loops | Stage::Clif | Stage::C) {
        use kiln_codegen::cpu::dump::NestText;
        let text = match stage {
            Stage::Clif => NestText::Clif,
            Stage::C => NestText::C,
            _ => NestText::Loops,
        };
        for g in &out {
            let s = kiln_passes::schedule::schedule(g)?;
            let codegen = kiln_codegen::CodegenOptions::from_env();
            let text =
                kiln_codegen::cpu::dump::describe(&s, text, &codegen).map_err(|e| e.to_string())?;
            print!("{text}");
        }
    } else {
        let tagged: Vec<kiln::Graph> = out.iter().map(|f| f.tagged_graph()).collect();
        print!("{}", kiln::ir::text::print_module(&tagged));
    }
    Ok(())
}

/// `kiln opt FILE --passes a,b,c`: runs the passes in order on every graph of the file.
pub fn opt(file: &Path, passes: &[String]) -> Result<(), CliError> {
    use kiln_passes::pipeline::{run_passes, PassOptions};
    let graphs = read_module(file)?;
    let names: Vec<&str> = passes.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for g in &graphs {
        out.push(run_passes(g, &names, &PassOptions::default(), true)?.tagged_graph());
    }
    print!("{}", kiln::ir::text::print_module(&out));
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
    let graphs = compiled.capture(&inputs)?;
    print_stage(&graphs, stage)
}

/// The forward/backward partition of `g` with a gradient for every floating input (what
/// compiled training makes of it): the report (saved tensors with their sizes, saved bytes
/// against eager autograd's, what is recomputed), then the forward and backward graphs.
pub fn partition_text(g: &kiln::Graph) -> Result<String, CliError> {
    use kiln_passes::joint::joint;
    use kiln_passes::partition::{partition, PartitionOptions};
    let wants = vec![true; g.inputs().len()];
    let j = joint(g, &wants)?;
    let p = partition(&j, &PartitionOptions::default())?;
    Ok(format!(
        "# partition of @{}: {}\n{}{}",
        g.name(),
        p.report.to_string().replace('\n', "\n# "),
        p.forward,
        p.backward
    ))
}
