//! Checks one kernel group's generated CUDA C against the reference interpreter: the
//! kernel body is lowered to a loop nest, its CUDA kernel is run on the CPU by the emulation
//! harness ([`emulate`](super::emulate): g++ and the shim header) on the interpreter's seeded
//! random inputs, and every output element is compared with what
//! [`kiln_ir::interp::eval`] computes for the body graph.
//!
//! Tolerance: |got - want| ≤ 1e-5·|want| + 1e-6 for pointwise kernels, 1e-4·|want| + 1e-5
//! for reducing kernels (sums are accumulated in a different order); bool outputs and
//! infinities exactly; NaN where the interpreter has NaN.
//!
//! Used by the CUDA emulation tests of this crate and of the frontend (the models' kernels).

use super::emulate::{emulate, EmuBuffer};
use super::launch::{nest_loop_sizes, nest_loop_strides};
use super::{cuda_kernel, CudaKernel};
use crate::loops::{lower_kernel_half, LoopNest, Role};
use kiln_ir::interp::{eval, random_inputs, Value};
use kiln_ir::{DType, Graph};

/// Kernels with more elements than this in one buffer are not emulated (too slow):
/// [`check_kernel`] skips them.
pub const MAX_ELEMENTS: usize = 1 << 16;

/// Threads per emulated block for [`check_kernel`]. Generated kernels stride by
/// `blockDim.x` and size their reductions by it, so any multiple of 32 up to
/// [`CudaKernel::block_threads`] is a valid launch; the emulation uses 64 (two warps: the
/// cross-warp reduction is still exercised) because one OS thread per CUDA thread on a
/// 2-core machine makes every `__syncthreads()` a round of context switches. Pass
/// [`BLOCK_THREADS`](super::BLOCK_THREADS) to launch the kernels' own block size.
pub const EMU_THREADS: u32 = 64;

/// The loop sizes of `nest` for buffers of these shapes (the nest's buffers in order);
/// symbolic dims that no buffer indexes get `sym`. A nest without dims has one dim of
/// size 1.
pub fn loop_sizes(nest: &LoopNest, shapes: &[Vec<usize>], sym: usize) -> Vec<i64> {
    let shapes: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    nest_loop_sizes(nest, &shapes, &|_| sym)
}

/// Each buffer's element strides along each of the `nd` loop dims, for contiguous buffers
/// of these shapes (0 where a dim is not indexed or is broadcast).
pub fn loop_strides(nest: &LoopNest, shapes: &[Vec<usize>], nd: usize) -> Vec<Vec<i64>> {
    let strides: Vec<Vec<isize>> = shapes
        .iter()
        .map(|s| kiln_runtime::contiguous_strides(s).to_vec())
        .collect();
    let layouts: Vec<(&[usize], &[isize])> = shapes
        .iter()
        .zip(&strides)
        .map(|(s, st)| (s.as_slice(), st.as_slice()))
        .collect();
    nest_loop_strides(nest, &layouts, nd)
}

/// A value's bytes as a kernel buffer holds them (f32, f16 or bf16 little-endian, or bool
/// bytes 0/1).
fn to_bytes(v: &Value) -> Vec<u8> {
    match v.dtype {
        DType::Bool => v.data.iter().map(|&x| u8::from(x != 0.0)).collect(),
        DType::F16 => v
            .data
            .iter()
            .flat_map(|&x| half::f16::from_f64(x).to_le_bytes())
            .collect(),
        DType::BF16 => v
            .data
            .iter()
            .flat_map(|&x| half::bf16::from_f64(x).to_le_bytes())
            .collect(),
        _ => v
            .data
            .iter()
            .flat_map(|&x| (x as f32).to_le_bytes())
            .collect(),
    }
}

/// Bytes per element of a kernel buffer of `dtype`.
fn element_bytes(dtype: DType) -> usize {
    match dtype {
        DType::Bool => 1,
        DType::F16 | DType::BF16 => 2,
        _ => 4,
    }
}

/// The tolerance `(relative, absolute)` of a half-precision output: the kernel computes a
/// fused chain in f32 and rounds once at the store, the interpreter rounds after every op
/// (as eager mode does), so they may differ by a few units in the last place: 8 of them
/// (f16: 2⁻¹⁰ relative, bf16: 2⁻⁷), and as much absolutely near zero.
fn half_tolerance(dtype: DType) -> Option<(f64, f64)> {
    match dtype {
        DType::F16 => Some((8.0 * 2f64.powi(-10), 8.0 * 2f64.powi(-10))),
        DType::BF16 => Some((8.0 * 2f64.powi(-7), 8.0 * 2f64.powi(-7))),
        _ => None,
    }
}

/// The elements of a kernel buffer's bytes.
fn from_bytes(bytes: &[u8], dtype: DType) -> Vec<f64> {
    match dtype {
        DType::Bool => bytes.iter().map(|&b| f64::from(b)).collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
    }
}

/// Emulates the CUDA kernel of one kernel body (a graph whose inputs are the values the
/// kernel reads and whose outputs are the values it writes) with blocks of `threads`
/// threads (a multiple of 32, at most the kernel's block size; see [`EMU_THREADS`]) over
/// a grid of at most 3 blocks, on the interpreter's random inputs (seed 7, symbolic dims
/// `sym`), and compares every output with the interpreter's (tolerances in the module
/// docs). Output buffers start as garbage the kernel must overwrite.
///
/// `Ok(true)` when it ran and matched; `Ok(false)` when it is skipped: the body does not
/// lower to a loop nest (it runs elsewhere: a matmul, or eagerly), a buffer has more than
/// [`MAX_ELEMENTS`] elements, or the interpreter cannot run the body on its own (its
/// symbolic dims are bound only by `full` nodes, not by its inputs). `Err` names `what` and
/// says what failed: no CUDA code for the nest, an invalid `threads`, the interpreter, the
/// emulation (g++ missing, a compilation error, a crash or a deadlock), or a mismatched
/// element (with the kernel's source).
pub fn check_kernel(body: &Graph, sym: usize, what: &str, threads: u32) -> Result<bool, String> {
    let Ok(nest) = lower_kernel_half(body) else {
        return Ok(false);
    };
    let kernel: CudaKernel = cuda_kernel(&nest).map_err(|e| format!("{what}: {e}"))?;
    let inputs = random_inputs(body, 7, &|_| sym).map_err(|e| format!("{what}: {e}"))?;
    let want = match eval(body, &inputs) {
        Ok(w) => w,
        // a body whose symbolic dims only its `full` nodes use cannot run on its own (its
        // inputs do not bind them): skipped, not emulated
        Err(e) if e.to_string().contains("is not bound by any input shape") => return Ok(false),
        Err(e) => return Err(format!("{what}: interpreter: {e}")),
    };
    // buffer shapes: inputs in order, then outputs in order
    let mut shapes: Vec<Vec<usize>> = Vec::new();
    let (mut next_in, mut next_out) = (0, 0);
    for b in &nest.buffers {
        match b.role {
            Role::Input => {
                shapes.push(inputs[next_in].shape.clone());
                next_in += 1;
            }
            Role::Output => {
                shapes.push(want[next_out].shape.clone());
                next_out += 1;
            }
        }
    }
    if shapes
        .iter()
        .any(|s| s.iter().product::<usize>() > MAX_ELEMENTS)
    {
        return Ok(false);
    }
    let sizes = loop_sizes(&nest, &shapes, sym);
    let strides = loop_strides(&nest, &shapes, kernel.ndims);
    let (mut next_in, mut next_out) = (0, 0);
    let mut bufs: Vec<EmuBuffer> = Vec::new();
    for b in &nest.buffers {
        let bytes = match b.role {
            Role::Input => {
                next_in += 1;
                to_bytes(&inputs[next_in - 1])
            }
            Role::Output => {
                next_out += 1;
                let n: usize = want[next_out - 1].shape.iter().product();
                // garbage the kernel must overwrite
                vec![0xFF; n * element_bytes(b.dtype)]
            }
        };
        bufs.push(EmuBuffer { bytes });
    }
    let rows: i64 = sizes[..sizes.len() - 1].iter().product();
    let total: i64 = sizes.iter().product();
    if threads == 0 || threads > kernel.block_threads || !threads.is_multiple_of(32) {
        return Err(format!(
            "{what}: {threads} threads per block: not a multiple of 32 up to {}",
            kernel.block_threads
        ));
    }
    let work = if kernel.per_row {
        rows
    } else {
        (total + i64::from(threads) - 1) / i64::from(threads)
    };
    let grid = work.clamp(1, 3) as u32;
    emulate(
        &kernel.source,
        &kernel.name,
        threads,
        grid,
        &mut bufs,
        &sizes,
        &strides,
    )
    .map_err(|e| format!("{what}: {e}"))?;
    let f32_tolerance = if nest.reduces {
        (1e-4, 1e-5)
    } else {
        (1e-5, 1e-6)
    };
    let mut out_i = 0;
    for (b, buf) in nest.buffers.iter().zip(&bufs) {
        if b.role != Role::Output {
            continue;
        }
        let w = &want[out_i];
        out_i += 1;
        let (rel, abs) = half_tolerance(b.dtype).unwrap_or(f32_tolerance);
        let got = from_bytes(&buf.bytes, b.dtype);
        for (i, (&g, &x)) in got.iter().zip(&w.data).enumerate() {
            let ok = if x.is_nan() {
                g.is_nan()
            } else if b.dtype == DType::Bool || x.is_infinite() {
                g == x
            } else {
                (g - x).abs() <= rel * x.abs() + abs
            };
            if !ok {
                return Err(format!(
                    "{what}: output {} element {i}: emulated {g:e}, interpreter {x:e}\n{}",
                    b.name, kernel.source
                ));
            }
        }
    }
    Ok(true)
}
