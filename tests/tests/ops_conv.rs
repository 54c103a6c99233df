//! Convolutions (`Op::Convolution`): eager vs the interpreter over 1-, 2- and 3-d
//! geometries (stride, padding, dilation, groups, depthwise, transposed with output
//! padding, 1×1 kernels, a batch and channels of one), every input layout and the float
//! dtypes; compiled (cpu) vs eager vs the interpreter on a convolution with a fused bias and
//! activation, forward and backward; and the typed errors of shapes that do not fit.

use kiln::ir::text::parse_op;
use kiln::{compile_with, Backend, CompileOptions, DType, Tensor};
use kiln_tests::{assert_op, compare, make, tolerance, Dist, Layout, TestArg};

/// (op, input shape, weight shape)
const CASES: &[(&str, &[usize], &[usize])] = &[
    ("convolution {stride = [1]}", &[2, 3, 7], &[4, 3, 3]),
    (
        "convolution {stride = [2], padding = [1]}",
        &[1, 1, 9],
        &[2, 1, 3],
    ),
    (
        "convolution {stride = [1, 1], padding = [1, 1]}",
        &[2, 3, 5, 6],
        &[5, 3, 3, 3],
    ),
    (
        "convolution {stride = [2, 2], padding = [3, 3]}",
        &[1, 3, 11, 9],
        &[4, 3, 7, 7],
    ),
    (
        "convolution {stride = [1, 1]}",
        &[3, 8, 4, 5],
        &[6, 8, 1, 1],
    ),
    (
        "convolution {stride = [2, 2]}",
        &[2, 4, 5, 5],
        &[3, 4, 1, 1],
    ),
    (
        "convolution {stride = [1, 2], padding = [2, 1], dilation = [2, 1], groups = 2}",
        &[2, 4, 6, 7],
        &[6, 2, 3, 2],
    ),
    (
        "convolution {stride = [1, 1], padding = [1, 1], groups = 6}",
        &[2, 6, 5, 4],
        &[6, 1, 3, 3],
    ),
    (
        "convolution {stride = [2, 2], padding = [2, 2], groups = 3}",
        &[1, 3, 7, 7],
        &[6, 1, 5, 5],
    ),
    (
        "convolution {stride = [1, 2, 1], padding = [1, 0, 1]}",
        &[1, 2, 3, 4, 5],
        &[3, 2, 2, 3, 3],
    ),
    (
        "convolution {stride = [2], padding = [1], transposed = true, output_padding = [1]}",
        &[2, 3, 4],
        &[3, 2, 3],
    ),
    (
        "convolution {stride = [2, 2], padding = [1, 0], transposed = true, groups = 2}",
        &[1, 4, 3, 3],
        &[4, 3, 3, 2],
    ),
    (
        "convolution {stride = [1, 1], dilation = [2, 2], transposed = true, groups = 3}",
        &[2, 3, 3, 2],
        &[3, 1, 2, 2],
    ),
    (
        "convolution {stride = [1, 1]}",
        &[1, 1, 1, 1],
        &[1, 1, 1, 1],
    ),
    // one output channel a group, 16 groups or more: vectorised across the groups
    (
        "convolution {stride = [2, 2], padding = [2, 1], groups = 17}",
        &[2, 17, 7, 6],
        &[17, 1, 5, 3],
    ),
    (
        "convolution {stride = [1, 1], padding = [1, 1], dilation = [2, 2], groups = 16}",
        &[1, 64, 6, 5],
        &[16, 4, 3, 3],
    ),
    (
        "convolution {stride = [3], padding = [2], groups = 18}",
        &[3, 18, 10],
        &[18, 1, 4],
    ),
    (
        "convolution {stride = [2, 2], padding = [1, 2], transposed = true, output_padding = [1, 0], groups = 17}",
        &[2, 17, 4, 3],
        &[17, 1, 3, 5],
    ),
    // fewer output positions than taps (the weight gradient's shape): a GEMM a position
    (
        "convolution {stride = [1, 1]}",
        &[5, 4, 2, 3],
        &[6, 4, 2, 3],
    ),
    (
        "convolution {stride = [1, 1], padding = [1, 1]}",
        &[6, 3, 4, 5],
        &[4, 3, 4, 5],
    ),
    (
        "convolution {stride = [2, 1], padding = [1, 1], dilation = [2, 2], groups = 2}",
        &[3, 4, 9, 8],
        &[6, 2, 4, 4],
    ),
    (
        "convolution {stride = [1, 1], padding = [1, 0]}",
        &[1, 2, 3, 3],
        &[3, 2, 5, 3],
    ),
    (
        "convolution {stride = [1, 1], padding = [1, 1]}",
        &[7, 2, 3, 3],
        &[3, 2, 2, 2],
    ),
];

#[test]
fn eager_matches_the_interpreter_on_every_geometry_layout_and_dtype() {
    for (i, &(text, xs, ws)) in CASES.iter().enumerate() {
        let op = parse_op(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        for dtype in [DType::F32, DType::F64, DType::BF16, DType::F16] {
            for layout in Layout::ALL {
                let seed = 10 * i as u64;
                let x = make(xs, dtype, seed, Dist::Normal, layout);
                let w = make(ws, dtype, seed + 1, Dist::Normal, Layout::Transposed);
                assert_op(&op, &[TestArg::T(x), TestArg::T(w)]);
            }
        }
    }
}

fn conv_block(op: &kiln::ir::Op) -> impl Fn(&[Tensor]) -> kiln::Result<Vec<Tensor>> + '_ {
    move |xs: &[Tensor]| {
        let y = xs[0].conv(&xs[1], Some(&xs[2]), op)?.relu()?;
        Ok(vec![y.mul(&xs[3])?.sum(&[], false)?, y])
    }
}

#[test]
fn compiled_matches_eager_and_the_interpreter() {
    for (i, &(text, xs, ws)) in CASES.iter().enumerate() {
        let op = parse_op(text).unwrap();
        let f = conv_block(&op);
        let cpu = compile_with(&f, CompileOptions::default().backend(Backend::Cpu));
        let interp = compile_with(&f, CompileOptions::default().backend(Backend::Interp));
        let channels = if text.contains("transposed = true") {
            ws[1]
                * text.split("groups = ").nth(1).map_or(1, |g| {
                    let digits = g.find(|c: char| !c.is_ascii_digit()).unwrap_or(g.len());
                    g[..digits].parse().unwrap()
                })
        } else {
            ws[0]
        };
        for layout in [Layout::Contiguous, Layout::Transposed, Layout::Strided] {
            let seed = 100 + 10 * i as u64;
            let x = make(xs, DType::F32, seed, Dist::Normal, layout);
            let w = make(ws, DType::F32, seed + 1, Dist::Normal, Layout::Contiguous);
            let b = make(
                &[channels],
                DType::F32,
                seed + 2,
                Dist::Normal,
                Layout::Contiguous,
            );
            let ones = Tensor::full(&[1], 1.0, DType::F32).unwrap();
            let shape = f(&[x.clone(), w.clone(), b.clone(), ones]).unwrap()[1]
                .shape()
                .to_vec();
            let probe = make(
                &shape,
                DType::F32,
                seed + 3,
                Dist::Normal,
                Layout::Contiguous,
            );
            let args = [x, w, b, probe];
            let want = f(&args).unwrap();
            let got = cpu
                .call(&args)
                .unwrap_or_else(|e| panic!("{text}: cpu: {e}"));
            let oracle = interp
                .call(&args)
                .unwrap_or_else(|e| panic!("{text}: interp: {e}"));
            for k in 0..2 {
                let (g, w, o) = (
                    got[k].to_vec_f64().unwrap(),
                    want[k].to_vec_f64().unwrap(),
                    oracle[k].to_vec_f64().unwrap(),
                );
                let tol = tolerance(DType::F32, true);
                compare(
                    &format!("{text} {layout:?} output {k}: cpu vs eager"),
                    &g,
                    &w,
                    tol,
                )
                .unwrap();
                compare(
                    &format!("{text} {layout:?} output {k}: eager vs interp"),
                    &w,
                    &o,
                    tol,
                )
                .unwrap();
            }
        }
        let s = cpu.stats();
        assert_eq!((s.compiles, s.graph_breaks), (1, 0), "{text}: {s:?}");
        assert!(s.eager_fallback.is_none(), "{text}: {s:?}");
    }
}

#[test]
fn compiled_gradients_match_eager_gradients() {
    for (i, &(text, xs, ws)) in CASES.iter().enumerate() {
        let op = parse_op(text).unwrap();
        let seed = 300 + 10 * i as u64;
        let x = make(xs, DType::F64, seed, Dist::Normal, Layout::Contiguous);
        let w = make(ws, DType::F64, seed + 1, Dist::Normal, Layout::Contiguous);
        let y = x.conv(&w, None, &op).unwrap();
        let probe = make(
            y.shape(),
            DType::F64,
            seed + 2,
            Dist::Normal,
            Layout::Contiguous,
        );
        // the leaves live outside the compiled step, as a model's parameters do
        let op = &op;
        let step = |x: Tensor, w: Tensor| {
            move |xs: &[Tensor]| -> kiln::Result<Vec<Tensor>> {
                let l = x.conv(&w, None, op)?.mul(&xs[0])?.sum(&[], false)?;
                l.backward()?;
                Ok(vec![
                    x.grad().expect("x's gradient"),
                    w.grad().expect("w's gradient"),
                ])
            }
        };
        let leaves = || {
            (
                x.detach().requires_grad_(true).unwrap(),
                w.detach().requires_grad_(true).unwrap(),
            )
        };
        let (xe, we) = leaves();
        let eager = step(xe, we)(std::slice::from_ref(&probe)).unwrap();
        let (xc, wc) = leaves();
        let cpu = compile_with(
            step(xc, wc),
            CompileOptions::default().backend(Backend::Cpu),
        );
        let got = cpu
            .call(&[probe])
            .unwrap_or_else(|e| panic!("{text}: cpu: {e}"));
        let s = cpu.stats();
        assert_eq!(
            (s.traces, s.compiles, s.graph_breaks),
            (1, 1, 0),
            "{text}: {s:?}"
        );
        assert!(s.eager_fallback.is_none(), "{text}: {s:?}");
        for k in 0..2 {
            compare(
                &format!("{text}: gradient {k} compiled vs eager"),
                &got[k].to_vec_f64().unwrap(),
                &eager[k].to_vec_f64().unwrap(),
                tolerance(DType::F64, true),
            )
            .unwrap();
        }
    }
}

/// A weight-gradient-shaped convolution whose stacked columns pass the runtime's cap (4M
/// elements), so that its three output positions run as GEMMs of two and then one: the last,
/// shorter one must lay its result out as the others do (it picked the other operand order
/// once, 12 output channels against 8 rows, and scrambled the result).
#[test]
fn few_output_convolutions_over_the_column_cap_match_the_interpreter() {
    let op = parse_op("convolution {stride = [1, 1]}").unwrap();
    let x = make(
        &[8, 2, 300, 334],
        DType::F32,
        71,
        Dist::Normal,
        Layout::Contiguous,
    );
    let w = make(
        &[12, 2, 298, 334],
        DType::F32,
        72,
        Dist::Normal,
        Layout::Contiguous,
    );
    assert_op(&op, &[TestArg::T(x), TestArg::T(w)]);
}

#[test]
fn shapes_that_do_not_fit_are_typed_errors() {
    let op = parse_op("convolution {stride = [1, 1], groups = 2}").unwrap();
    let x = Tensor::zeros(&[1, 3, 5, 5], DType::F32).unwrap();
    let w = Tensor::zeros(&[4, 2, 3, 3], DType::F32).unwrap();
    let e = x.conv(&w, None, &op).unwrap_err().to_string();
    assert!(e.contains("convolution") && e.contains("groups"), "{e}");
    let op = parse_op("convolution {stride = [1, 1]}").unwrap();
    let big = Tensor::zeros(&[4, 3, 7, 7], DType::F32).unwrap();
    let e = x.conv(&big, None, &op).unwrap_err().to_string();
    assert!(e.contains("does not fit"), "{e}");
    let ints = Tensor::zeros(&[1, 3, 5, 5], DType::I64).unwrap();
    let e = ints.conv(&ints, None, &op).unwrap_err().to_string();
    assert!(e.contains("floating"), "{e}");
    let op = parse_op("convolution {stride = [1], output_padding = [1]}").unwrap();
    let e = Tensor::zeros(&[1, 1, 4], DType::F32)
        .unwrap()
        .conv(&Tensor::zeros(&[1, 1, 2], DType::F32).unwrap(), None, &op)
        .unwrap_err()
        .to_string();
    assert!(e.contains("output_padding"), "{e}");
}
