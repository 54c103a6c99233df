//! Row kernels stepping several rows together (`Spec::row_group` > 1) give the same bits
//! as one row at a time: each row keeps its own accumulators and order, so grouping must
//! change nothing but the speed. Checked on layer norm, softmax, sum of squares and a
//! variance and a column sum (a reduction over the outer dim, as a bias gradient's, after two
//! full-size ops: a lone one runs on the runtime's column reduction, not a nest), at row
//! counts that leave a remainder after the groups, on row ranges that start
//! mid-group (as a split across threads does), and on transposed (strided) inputs.

use super::nest_exec::NestKernel;
use super::plan::{kernel_for, CpuKernel};
use kiln_ir::interp::random_inputs;
use kiln_ir::text::parse_module;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::schedule;
use kiln_runtime::CpuTensor;

const GRAPHS: &str = r#"
graph @layernorm(%x: f32[R,C], %w: f32[C], %b: f32[C]) -> f32[R,C] {
  %0 = layer_norm %x, %w, %b {ndim = 1, eps = 1e-5} : f32[R,C]
  return %0
}
graph @softmax(%x: f32[R,C]) -> f32[R,C] {
  %0 = softmax %x {dim = -1} : f32[R,C]
  return %0
}
graph @sum_squares(%x: f32[R,C]) -> f32[R] {
  %0 = mul %x, %x : f32[R,C]
  %1 = sum %0 {dims = [1], keepdim = false} : f32[R]
  return %1
}
graph @variance(%x: f32[R,C]) -> f32[R,1] {
  %0 = var %x {dims = [1], correction = 1, keepdim = true} : f32[R,1]
  return %0
}
graph @column_sum(%x: f32[C,R], %m: f32[R]) -> (f32[R], f32[R]) {
  %a = mul %x, %x : f32[C,R]
  %b = add %a, %x : f32[C,R]
  %0 = sum %b {dims = [0], keepdim = false} : f32[R]
  %1 = sub %0, %m : f32[R]
  %2 = mul %0, %0 : f32[R]
  return %1, %2
}
"#;

/// Options that keep every kernel on its Cranelift code: the comparisons are of Cranelift's
/// row groups bit for bit, and the automatic tier could swap a kernel whose C object is in
/// the on-disk cache to C code (equal within the op's error budget, not bit for bit) in the
/// middle of the test.
fn cranelift_only() -> crate::CodegenOptions {
    crate::CodegenOptions {
        tier: crate::TierPolicy::CraneliftOnly,
        ..Default::default()
    }
}

/// The outputs of `kernel` on `inputs` with rows stepped `g` at a time, the rows run as the
/// ranges `[0, split)` and `[split, rows)`.
fn run_grouped(
    kernel: &NestKernel,
    inputs: &[CpuTensor],
    outs: &[Vec<usize>],
    split: usize,
) -> Vec<Vec<u32>> {
    let outputs: Vec<CpuTensor> = outs
        .iter()
        .map(|shape| {
            let n = shape.iter().product();
            CpuTensor::from_f64(&vec![f64::NAN; n], shape, kiln_ir::DType::F32).expect("output")
        })
        .collect();
    let all: Vec<&CpuTensor> = inputs.iter().chain(&outputs).collect();
    let call = kernel
        .prepare(&all, false)
        .expect("compiles")
        .expect("non-empty loops");
    let (rows, inner) = (call.rows(), call.inner());
    let split = split.min(rows);
    call.call(0, split, 0, inner);
    call.call(split, rows, 0, inner);
    outputs
        .iter()
        .map(|t| {
            t.to_vec::<f32>()
                .expect("f32")
                .iter()
                .map(|v| v.to_bits())
                .collect()
        })
        .collect()
}

#[test]
fn grouped_rows_match_single_rows_bit_for_bit() {
    let mut checked = 0;
    for g in parse_module(GRAPHS).expect("valid IR") {
        for (rows, cols) in [(1, 1), (3, 37), (11, 50), (13, 783), (9, 4)] {
            let size = |s: &str| if s == "R" { rows } else { cols };
            let opt = run_passes(
                &g,
                &["decompose", "fuse"],
                &PassOptions::rendering(crate::cpu::renders),
                false,
            )
            .expect("passes");
            let s = schedule(&opt).expect("schedules");
            for k in &s.kernels {
                let CpuKernel::Nest(nest) = kernel_for(&k.body, k.kind, &cranelift_only()) else {
                    continue;
                };
                if !nest.nest.reduces {
                    continue;
                }
                let body = &k.body;
                let vals =
                    random_inputs(body, rows as u64 * 31 + cols as u64, &size).expect("inputs");
                let contiguous: Vec<CpuTensor> = vals
                    .iter()
                    .map(|v| CpuTensor::from_f64(&v.data, &v.shape, v.dtype).expect("tensor"))
                    .collect();
                // the same values read through a transposed buffer: 2-d inputs stored
                // column-major, so their inner access is strided
                let strided: Vec<CpuTensor> = contiguous
                    .iter()
                    .map(|t| {
                        if t.rank() != 2 {
                            return t.clone();
                        }
                        let (r, c) = (t.shape()[0], t.shape()[1]);
                        let data = t.to_f64_vec();
                        let mut col_major = vec![0.0; r * c];
                        for i in 0..r {
                            for j in 0..c {
                                col_major[j * r + i] = data[i * c + j];
                            }
                        }
                        CpuTensor::from_f64(&col_major, &[c, r], kiln_ir::DType::F32)
                            .expect("tensor")
                            .with_layout(&[r, c], &[1, r as isize], 0)
                            .expect("transposed view")
                    })
                    .collect();
                let outs: Vec<Vec<usize>> = body
                    .outputs()
                    .iter()
                    .map(|o| {
                        body.node(*o)
                            .ty
                            .shape
                            .dims()
                            .iter()
                            .map(|d| d.as_const().unwrap_or_else(|| size(&d.to_string())))
                            .collect()
                    })
                    .collect();
                for inputs in [&contiguous, &strided] {
                    let single =
                        NestKernel::new(nest.nest.clone(), &cranelift_only()).with_row_group(1);
                    let want = run_grouped(&single, inputs, &outs, rows);
                    for group in [2, 4, 8] {
                        let grouped = NestKernel::new(nest.nest.clone(), &cranelift_only())
                            .with_row_group(group);
                        for split in [0, 1, 5] {
                            let got = run_grouped(&grouped, inputs, &outs, split);
                            let first_diff =
                                got.iter().zip(&want).enumerate().find_map(|(o, (g, w))| {
                                    g.iter()
                                        .zip(w)
                                        .position(|(a, b)| a != b)
                                        .map(|i| (o, i, f32::from_bits(g[i]), f32::from_bits(w[i])))
                                });
                            assert_eq!(
                                first_diff,
                                None,
                                "@{} kernel {} at [{rows}, {cols}], {group} rows at a time, split \
                                 at row {split}: (output, element, grouped, single rows)",
                                g.name(),
                                k.id
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(
        checked >= 5 * 5 * 2 * 3 * 3,
        "only {checked} comparisons ran"
    );
}

/// Row kernels step `strided_row_group` rows together where the inner loop reads no buffer
/// contiguously (a column sum over a row-major matrix), `row_group` rows otherwise, one row
/// for nests that do not reduce.
#[test]
fn strided_reductions_take_their_own_row_group() {
    use super::emit::{row_group, InnerAccess::*};
    let g = &parse_module(GRAPHS).expect("valid IR")[4];
    let opt =
        run_passes(g, &["decompose", "fuse"], &PassOptions::default(), false).expect("passes");
    let s = schedule(&opt).expect("schedules");
    let opts = crate::CodegenOptions {
        row_group: 2,
        strided_row_group: 5,
        ..cranelift_only()
    };
    let nests: Vec<_> = s
        .kernels
        .iter()
        .filter_map(|k| match kernel_for(&k.body, k.kind, &opts) {
            CpuKernel::Nest(n) => Some(n),
            _ => None,
        })
        .collect();
    let column = nests
        .iter()
        .find(|n| n.nest.reduces)
        .expect("a reduction nest");
    let inputs = column.nest.input_count();
    let outputs = column.nest.buffers.len() - inputs;
    let with = |read: Vec<_>| {
        let mut access = read;
        access.extend(std::iter::repeat_n(Contiguous, outputs));
        row_group(&column.nest, 1, &access, &opts)
    };
    assert_eq!(with(vec![Strided; inputs]), 5);
    assert_eq!(with(vec![Contiguous; inputs]), 2);
    // a broadcast beside a strided read is still a column walk; no outer dims: one row
    let mut mixed = vec![Strided; inputs];
    mixed[inputs - 1] = Broadcast;
    assert_eq!(with(mixed), 5);
    assert_eq!(
        row_group(&column.nest, 0, &vec![Strided; inputs + outputs], &opts),
        1
    );
}
