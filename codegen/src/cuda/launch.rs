//! Launch arithmetic shared by the CUDA plans: how tensors map onto a kernel's argument
//! struct (loop sizes, strides along loop dims, the grid), how a GEMM operand is read by
//! cuBLAS, and how a gather's operands fold.

use super::device_tensor::DeviceTensor;
use super::gpu::{DevicePtr, GemmOperand, GpuDevice, GpuError, KernelLaunch};
use super::CudaKernel;
use crate::cpu::kernels::{lookup, Bindings};
use crate::loops::LoopNest;
use kiln_ir::{Dim, Graph, Op};

/// Largest grid a plan launches (kernels stride over the rest).
const MAX_GRID: u64 = 1 << 16;
/// Elements one thread of a pointwise kernel takes per step (its `float4` path).
const ELEMENTS_PER_THREAD: u64 = 4;

/// A generated kernel and the nest it came from (whose buffers say how operands index).
pub struct NestLaunch {
    /// the loop nest
    pub nest: LoopNest,
    /// its CUDA kernel
    pub kernel: CudaKernel,
}

/// How cuBLAS reads `t` (`[batch..., rows, cols]`), if it can as it is: rows or columns
/// contiguous, the stored matrix's leading dim at least its inner size, and the batch dims
/// folding into one stride (or all broadcast).
pub fn gemm_operand(t: &DeviceTensor) -> Option<GemmOperand> {
    let r = t.shape().len();
    if r < 2 {
        return None;
    }
    let (rows, cols) = (t.shape()[r - 2], t.shape()[r - 1]);
    let (rs, cs) = (t.strides()[r - 2], t.strides()[r - 1]);
    // row-major: consecutive columns adjacent, rows `ld ≥ cols` apart; or the transpose
    // stored row-major (column-major): consecutive rows adjacent, columns `ld ≥ rows` apart
    let (transposed, ld) = if (cols == 1 || cs == 1) && (rows == 1 || rs >= cols.max(1) as isize) {
        (false, if rows == 1 { cols.max(1) as isize } else { rs })
    } else if (rows == 1 || rs == 1) && (cols == 1 || cs >= rows.max(1) as isize) {
        (true, if cols == 1 { rows.max(1) as isize } else { cs })
    } else {
        return None;
    };
    // the batch dims of size > 1, outer first: they must fold into one stride
    let dims: Vec<(usize, isize)> = t.shape()[..r - 2]
        .iter()
        .zip(&t.strides()[..r - 2])
        .filter(|(&n, _)| n > 1)
        .map(|(&n, &s)| (n, s))
        .collect();
    let batch_stride = match dims.last() {
        None => 0,
        Some(&(_, s)) => {
            let folds = dims.windows(2).all(|w| w[0].1 == w[1].1 * w[1].0 as isize);
            let broadcast = dims.iter().all(|&(_, s)| s == 0);
            if !(folds || broadcast) || s < 0 {
                return None;
            }
            s
        }
    };
    Some(GemmOperand {
        ptr: t.ptr(),
        ld: ld as i64,
        batch_stride: batch_stride as i64,
        transposed,
    })
}

/// The one stride that steps through dims `dims` of `t` in row-major order (their merged
/// index), if there is one: 0 when they are all size 1.
pub(crate) fn folded_stride(t: &DeviceTensor, dims: std::ops::Range<usize>) -> Option<i64> {
    let d: Vec<(usize, isize)> = dims
        .map(|i| (t.shape()[i], t.strides()[i]))
        .filter(|&(n, _)| n > 1)
        .collect();
    match d.last() {
        None => Some(0),
        Some(&(_, s)) => d
            .windows(2)
            .all(|w| w[0].1 == w[1].1 * w[1].0 as isize)
            .then_some(s as i64),
    }
}

/// A gather group's `index_select`: the normalised dim, and the positions (in the group's
/// inputs) of the gathered tensor and of the indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherOperands {
    /// the gathered dim, normalised
    pub dim: usize,
    /// the input position of the tensor gathered from
    pub x: usize,
    /// the input position of the indices
    pub idx: usize,
}

/// The operands of a gather group's `index_select` (the group's inputs may come in any
/// order).
pub(crate) fn gather_operands(body: &Graph) -> Option<GatherOperands> {
    body.nodes().find_map(|(_, n)| match n.op {
        Op::IndexSelect { dim } => {
            let pos = |a: Option<&kiln_ir::Arg>| match a {
                Some(kiln_ir::Arg::Value(v)) => body.inputs().iter().position(|(_, i)| i == v),
                _ => None,
            };
            let (x, idx) = (pos(n.args.first())?, pos(n.args.get(1))?);
            let rank = body.node(body.inputs()[x].1).ty.shape.rank() as i64;
            let dim = if dim < 0 { dim + rank } else { dim } as usize;
            Some(GatherOperands { dim, x, idx })
        }
        _ => None,
    })
}

/// The loop sizes of `nest` over buffers of these shapes (the nest's buffers in order):
/// any dim a buffer indexes from that buffer's size, symbolic dims no buffer indexes from
/// `sym`. A nest without dims has one dim of size 1.
pub fn nest_loop_sizes(
    nest: &LoopNest,
    shapes: &[&[usize]],
    sym: &dyn Fn(&str) -> usize,
) -> Vec<i64> {
    let mut sizes: Vec<i64> = nest
        .dims
        .iter()
        .map(|d| match d {
            Dim::Const(n) => *n as i64,
            Dim::Sym(s) => sym(s) as i64,
        })
        .collect();
    for (b, shape) in nest.buffers.iter().zip(shapes) {
        for (j, ix) in b.index.iter().enumerate() {
            if let (Some(d), Some(&n)) = (ix, shape.get(j)) {
                if n != 1 {
                    sizes[*d] = n as i64;
                }
            }
        }
    }
    if sizes.is_empty() {
        sizes.push(1);
    }
    sizes
}

/// Each buffer's element stride along each of the `nd` loop dims, from its layout (`shape`,
/// `strides`; 0 where it does not index the dim or is broadcast along it).
pub fn nest_loop_strides(
    nest: &LoopNest,
    layouts: &[(&[usize], &[isize])],
    nd: usize,
) -> Vec<Vec<i64>> {
    nest.buffers
        .iter()
        .zip(layouts)
        .map(|(b, (shape, strides))| {
            let mut st = vec![0i64; nd];
            for (j, ix) in b.index.iter().enumerate() {
                if let (Some(d), Some(&n), Some(&s)) = (ix, shape.get(j), strides.get(j)) {
                    if n != 1 {
                        st[*d] = s as i64;
                    }
                }
            }
            st
        })
        .collect()
}

/// The grid for a kernel over `sizes`: a block per row for row kernels, enough blocks for
/// every element otherwise (both capped: the kernels stride over the rest).
pub fn grid_for(kernel: &CudaKernel, sizes: &[i64]) -> u32 {
    let total: u64 = sizes.iter().map(|&s| s.max(0) as u64).product();
    let blocks = if kernel.per_row {
        let rows: u64 = sizes[..sizes.len().saturating_sub(1)]
            .iter()
            .map(|&s| s.max(0) as u64)
            .product();
        rows
    } else {
        total.div_ceil(u64::from(kernel.block_threads) * ELEMENTS_PER_THREAD)
    };
    blocks.clamp(1, MAX_GRID) as u32
}

/// Launches a nest's kernel over `tensors` (its buffers in order: inputs, then outputs).
pub(crate) fn launch_nest(
    gpu: &dyn GpuDevice,
    k: &NestLaunch,
    tensors: &[&DeviceTensor],
    bound: &Bindings,
) -> Result<(), GpuError> {
    let shapes: Vec<&[usize]> = tensors.iter().map(|t| t.shape()).collect();
    let sizes = nest_loop_sizes(&k.nest, &shapes, &|s| lookup(bound, s).unwrap_or(1));
    // nothing to write: an empty output. A reduction over an empty inner loop still runs,
    // to write its rows' identity (a sum of nothing is 0, not what the memory held)
    let out_dims = if k.nest.reduces {
        &sizes[..sizes.len() - 1]
    } else {
        &sizes[..]
    };
    if out_dims.contains(&0) {
        return Ok(());
    }
    let layouts: Vec<(&[usize], &[isize])> =
        tensors.iter().map(|t| (t.shape(), t.strides())).collect();
    let strides = nest_loop_strides(&k.nest, &layouts, sizes.len());
    let ptrs: Vec<DevicePtr> = tensors.iter().map(|t| t.ptr()).collect();
    gpu.launch(&KernelLaunch {
        kernel: &k.kernel,
        grid: grid_for(&k.kernel, &sizes),
        block: k.kernel.block_threads,
        ptrs: &ptrs,
        sizes: &sizes,
        strides: &strides,
    })
}
