//! The CPU backend: loop nests to Cranelift machine code ([`emit`], [`jit`]), run over
//! tensors by [`nest_exec`]; GEMM kernels with generated epilogues and an eager fallback
//! ([`kernels`]); the compiled program over an arena of buffers ([`plan`]).

pub mod c_tier;
mod chain_fits;
pub(crate) mod const_pool;
mod cost;
mod cuts;
pub mod dump;
pub mod emit;
mod fill_merge;
#[cfg(test)]
mod half_square_tests;
pub mod jit;
pub mod kernels;
pub(crate) mod math;
pub mod nest_exec;
pub mod plan;
#[cfg(test)]
mod row_group_tests;

pub use emit::{InnerAccess, Spec};

/// The cpu plan of a graph in the textual IR, through decompose, fuse and schedule (for the
/// tests that run small graphs whole). Its kernels stay on their Cranelift code, which those
/// tests check bit for bit: the automatic tier would swap a kernel whose C object is in the
/// on-disk cache to C code, equal within the op's error budget but not to the bit.
#[cfg(test)]
pub(crate) fn plan_of(src: &str) -> CpuPlan {
    let g = kiln_ir::parse_graph(src).expect("parses");
    let f =
        kiln_passes::pipeline::run_passes(&g, &["decompose", "fuse"], &Default::default(), true)
            .expect("passes");
    let s = kiln_passes::schedule::schedule(&f).expect("schedules");
    let opts = crate::CodegenOptions {
        tier: crate::TierPolicy::CraneliftOnly,
        ..Default::default()
    };
    CpuPlan::with_options(&s, &opts).expect("plans")
}
pub use jit::{clif_text, jit_stats, KernelFn};
pub use plan::{kernel_for, CpuKernel, CpuPlan};

/// The ops the cpu backend renders itself: every primitive (as generated code or with the
/// eager kernels), and the composites it has a routine for (`gelu` in both forms, `silu`);
/// `decompose` lowers the other composites for it. One exhaustive match: a new op must say.
pub fn renders(op: &kiln_ir::Op) -> bool {
    use kiln_ir::Op;
    match op {
        // every primitive, and the composites with a routine of their own
        Op::Unary(u) => !u.info().composite || cpu_unary_composite(*u),
        // composites lowered for fusion: their parts fuse with their neighbours
        Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Linear
        | Op::Var { .. }
        | Op::Clamp
        | Op::Hardtanh { .. }
        | Op::LeakyRelu { .. }
        | Op::Elu { .. }
        | Op::Softplus { .. }
        | Op::NanToNum { .. }
        | Op::Embedding { .. } => false,
        Op::Reduce { op, .. } => !matches!(op, kiln_ir::ReduceOp::Mean),
        Op::Input
        | Op::Full { .. }
        | Op::Arange { .. }
        | Op::Rand { .. }
        | Op::Randn { .. }
        | Op::FromVec { .. }
        | Op::Binary(_)
        | Op::Inplace(_)
        | Op::Where
        | Op::Argmax { .. }
        | Op::Matmul
        | Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Expand { .. }
        | Op::Slice { .. }
        | Op::Cat { .. }
        | Op::IndexSelect { .. }
        | Op::IndexAdd { .. }
        | Op::Convolution { .. }
        | Op::Cast { .. }
        | Op::Contiguous
        | Op::Triu { .. }
        | Op::Tril { .. } => true,
    }
}

/// The composite unary ops the cpu backend computes with a routine of its own instead of
/// their decomposition (`cpu/math.rs`: gelu in both forms, silu).
fn cpu_unary_composite(u: kiln_ir::UnaryOp) -> bool {
    use kiln_ir::UnaryOp::*;
    matches!(u, Gelu | GeluTanh | Silu)
}
