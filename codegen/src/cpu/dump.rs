//! The text of the CPU backend's stages: loop nests (`kiln dump --stage loops`),
//! Cranelift IR (`--stage clif`) and the C tier's source (`--stage c`), kernel by kernel.

use super::chain_fits::chain_fits;
use super::emit::{row_group, InnerAccess, Spec};
use super::jit::clif_text;
use super::jit::host_fma;
use super::plan::{CpuKernel, CpuPlan};
use crate::error::CodegenError;
use crate::loops::{value_ranges, LoopNest, Role};
use crate::CodegenOptions;
use kiln_passes::schedule::Schedule;
use std::fmt::Write;

/// The specialisation a nest gets when every tensor is contiguous and no dims collapse.
pub fn default_spec(nest: &LoopNest, opts: &CodegenOptions) -> Spec {
    let inner = nest.inner();
    let access: Vec<InnerAccess> = nest
        .buffers
        .iter()
        .map(|b| {
            let on_inner = |i: &Option<usize>| inner.is_some() && *i == inner;
            match b.index.last() {
                Some(i) if on_inner(i) => InnerAccess::Contiguous,
                _ if b.index.iter().any(on_inner) => InnerAccess::Strided,
                _ => InnerAccess::Broadcast,
            }
        })
        .collect();
    let outer = nest.dims.len().saturating_sub(1);
    Spec {
        outer,
        row_group: row_group(nest, outer, &access, opts),
        access,
        opts: opts.clone(),
    }
}

/// Which text of each kernel [`describe`] prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NestText {
    /// the loop nest
    Loops,
    /// the Cranelift IR at [`default_spec`]
    Clif,
    /// the C tier's source at [`default_spec`], for the host's vector width
    C,
}

/// The loop nests (or their Cranelift IR, or their C source, at [`default_spec`]) of every
/// kernel of a schedule, each after a comment line saying how the kernel runs.
pub fn describe(
    s: &Schedule,
    text: NestText,
    opts: &CodegenOptions,
) -> Result<String, CodegenError> {
    let plan = CpuPlan::with_options(s, opts)?;
    let mut out = String::new();
    let show = |out: &mut String, nest: &LoopNest| -> Result<(), CodegenError> {
        if text == NestText::C {
            let spec = default_spec(nest, opts);
            let _ = writeln!(out, "/* {} at {:?} */", nest.name, spec);
            match super::c_tier::source::c_source(nest, &spec, super::c_tier::source::Lanes::host())
            {
                Ok(src) => out.push_str(&src),
                Err(why) => {
                    let _ = writeln!(out, "/* not taken by the C tier: {why} */");
                }
            }
            out.push('\n');
        } else if text == NestText::Clif {
            let spec = default_spec(nest, opts);
            let _ = writeln!(out, "; {} at {:?}", nest.name, spec);
            let fits = chain_fits(nest, &value_ranges(&nest.body), host_fma(), opts.chain_fits);
            for line in fits.describe() {
                let _ = writeln!(out, "{line}");
            }
            out.push_str(&clif_text(nest, &spec)?);
            out.push('\n');
        } else {
            let _ = writeln!(out, "{nest}");
        }
        Ok(())
    };
    for (name, k) in plan.kernels() {
        match k {
            CpuKernel::Nest(n) => {
                let _ = writeln!(out, "# kernel {name}: generated loop nest");
                show(&mut out, &n.nest)?;
            }
            CpuKernel::Matmul(m) => {
                let _ = writeln!(
                    out,
                    "# kernel {name}: gemm{}",
                    if m.epilogue_nest().is_some() {
                        ", then the epilogue over each block of output rows"
                    } else {
                        ""
                    }
                );
                if let Some(n) = m.epilogue_nest() {
                    show(&mut out, n)?;
                } else {
                    out.push('\n');
                }
            }
            CpuKernel::Eager(e) => {
                let _ = writeln!(out, "# kernel {name}: eager kernels ({})\n", e.reason);
            }
        }
    }
    let _ = Role::Input;
    Ok(out)
}
