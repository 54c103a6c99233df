//! The CUDA C generated for kernel groups, run on the CPU by the emulation harness
//! ([`kiln_codegen::cuda::emulate`]: g++ and a shim header, one thread per CUDA thread) and
//! compared with the reference interpreter on the kernel's own body graph, for every op and
//! fused pattern of the programs below and every graph of the optimiser's corpus
//! (`passes/tests/corpus`) whose kernels are small enough to emulate.
//!
//! Inputs are the interpreter's seeded random inputs; symbolic dims are 5 (and 37 for the
//! programs below). Tolerance: |got - want| ≤ 1e-5·|want| + 1e-6 for pointwise kernels,
//! 1e-4·|want| + 1e-5 for reducing kernels (sums are accumulated in a different order); bool
//! outputs exactly; NaN where the interpreter has NaN.

mod common;

use common::PROGRAMS;
use kiln_codegen::cuda::emulate::{emulate, EmuBuffer};
use kiln_codegen::cuda::{cuda_kernel, CudaKernel};
use kiln_codegen::loops::{lower_kernel, LoopNest, Role};
use kiln_ir::interp::{eval, random_inputs, Value};
use kiln_ir::text::parse_module;
use kiln_ir::{DType, Dim, Graph};
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::schedule;

/// Kernels with more elements than this in one buffer are not emulated (too slow).
const MAX_ELEMENTS: usize = 1 << 16;

/// Threads per emulated block. Generated kernels stride by `blockDim.x` and size their
/// reductions by it, so any multiple of 32 up to `block_threads` is a valid launch; the
/// emulation uses 64 (two warps: the cross-warp reduction is still exercised) because one
/// OS thread per CUDA thread on a 2-core machine makes every `__syncthreads()` a round of
/// context switches. `full_blocks_of_256_threads` launches the kernels' own block size.
const EMU_THREADS: u32 = 64;

/// The loop sizes of `nest` for buffers of these shapes.
fn loop_sizes(nest: &LoopNest, shapes: &[Vec<usize>], sym: usize) -> Vec<i64> {
    let mut sizes: Vec<i64> = nest
        .dims
        .iter()
        .map(|d| match d {
            Dim::Const(n) => *n as i64,
            Dim::Sym(_) => sym as i64,
        })
        .collect();
    for (b, shape) in nest.buffers.iter().zip(shapes) {
        for (j, ix) in b.index.iter().enumerate() {
            if let Some(d) = ix {
                if shape[j] != 1 {
                    sizes[*d] = shape[j] as i64;
                }
            }
        }
    }
    if sizes.is_empty() {
        sizes.push(1);
    }
    sizes
}

/// Each buffer's element strides along each loop dim (contiguous buffers; 0 where a dim is
/// not indexed or broadcast).
fn loop_strides(nest: &LoopNest, shapes: &[Vec<usize>], nd: usize) -> Vec<Vec<i64>> {
    nest.buffers
        .iter()
        .zip(shapes)
        .map(|(b, shape)| {
            let mut st = vec![0i64; nd];
            let mut s = 1i64;
            for j in (0..shape.len()).rev() {
                if let Some(d) = b.index[j] {
                    if shape[j] != 1 {
                        st[d] = s;
                    }
                }
                s *= shape[j] as i64;
            }
            st
        })
        .collect()
}

fn to_bytes(v: &Value) -> Vec<u8> {
    match v.dtype {
        DType::Bool => v.data.iter().map(|&x| u8::from(x != 0.0)).collect(),
        _ => v
            .data
            .iter()
            .flat_map(|&x| (x as f32).to_le_bytes())
            .collect(),
    }
}

fn from_bytes(bytes: &[u8], dtype: DType) -> Vec<f64> {
    match dtype {
        DType::Bool => bytes.iter().map(|&b| f64::from(b)).collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
    }
}

/// Emulates one kernel body against the interpreter; `Ok(false)` when it is skipped (no
/// nest, or too large).
fn check_kernel(body: &Graph, sym: usize, what: &str) -> Result<bool, String> {
    check_kernel_with(body, sym, what, EMU_THREADS)
}

fn check_kernel_with(body: &Graph, sym: usize, what: &str, threads: u32) -> Result<bool, String> {
    let Ok(nest) = lower_kernel(body) else {
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
                vec![0xA5; n * if b.dtype == DType::Bool { 1 } else { 4 }]
            }
        };
        bufs.push(EmuBuffer { bytes });
    }
    let rows: i64 = sizes[..sizes.len() - 1].iter().product();
    let total: i64 = sizes.iter().product();
    assert!(threads <= kernel.block_threads && threads.is_multiple_of(32));
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
    let (rel, abs) = if nest.reduces {
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

/// Every kernel of every graph in `text`, after decompose + fuse; returns how many ran.
fn check_module(text: &str, sym: usize, file: &str) -> Result<usize, String> {
    let graphs = parse_module(text).map_err(|e| format!("{file}: {e}"))?;
    let mut ran = 0;
    for g in &graphs {
        let opt = run_passes(g, &["decompose", "fuse"], &PassOptions::default(), false)
            .map_err(|e| format!("{file} @{}: {e}", g.name()))?;
        let s = schedule(&opt).map_err(|e| format!("{file} @{}: {e}", g.name()))?;
        for k in &s.kernels {
            let what = format!("{file} @{} kernel {}", g.name(), k.body.name());
            if check_kernel(&k.body, sym, &what)? {
                ran += 1;
            }
        }
    }
    Ok(ran)
}

#[test]
fn ops_and_fused_patterns_match_the_interpreter() {
    let ran = check_module(PROGRAMS, 37, "programs").unwrap_or_else(|e| panic!("{e}"));
    eprintln!("emulated {ran} kernels of the op programs");
    assert!(ran >= 12, "only {ran} kernels emulated");
}

#[test]
fn full_blocks_of_256_threads() {
    let text = r#"
graph @softmax_rows(%x: f32[3,700]) -> f32[3,700] {
  %0 = softmax %x {dim = -1} : f32[3,700]
  return %0
}
graph @pointwise(%x: f32[600]) -> f32[600] {
  %0 = tanh %x : f32[600]
  return %0
}
"#;
    let graphs = parse_module(text).expect("valid IR");
    let mut ran = 0;
    for g in &graphs {
        let opt = run_passes(g, &["decompose", "fuse"], &PassOptions::default(), false)
            .expect("passes run");
        for k in &schedule(&opt).expect("schedules").kernels {
            let what = format!("@{} kernel {}", g.name(), k.body.name());
            if check_kernel_with(&k.body, 5, &what, kiln_codegen::cuda::BLOCK_THREADS)
                .unwrap_or_else(|e| panic!("{e}"))
            {
                ran += 1;
            }
        }
    }
    assert_eq!(ran, 2);
}

#[test]
fn corpus_kernels_match_the_interpreter() {
    let mut ran = 0;
    for (name, text) in common::corpus() {
        ran += check_module(&text, 5, &name).unwrap_or_else(|e| panic!("{e}"));
    }
    eprintln!("emulated {ran} corpus kernels");
    assert!(ran >= 20, "only {ran} corpus kernels emulated");
}
