//! The reference interpreter's contractions (matmul, linear) and layout ops against
//! hand-computed values.

use kiln_ir::interp::{eval_op, InterpArg, Value};
use kiln_ir::{DType, Op, Shape};

fn t(dtype: DType, shape: &[usize], data: &[f64]) -> InterpArg {
    InterpArg::Tensor(Value::new(dtype, shape.to_vec(), data.to_vec()).unwrap())
}

fn f32t(shape: &[usize], data: &[f64]) -> InterpArg {
    t(DType::F32, shape, data)
}

fn iota(dtype: DType, shape: &[usize]) -> InterpArg {
    let n: usize = shape.iter().product();
    t(dtype, shape, &(0..n).map(|i| i as f64).collect::<Vec<_>>())
}

fn run(op: Op, args: Vec<InterpArg>) -> Value {
    eval_op(&op, &args).unwrap_or_else(|e| panic!("{op}: {e}"))
}

fn check(v: &Value, dtype: DType, shape: &[usize], data: &[f64]) {
    assert_eq!((v.dtype, v.shape.as_slice()), (dtype, shape), "{v:?}");
    assert_eq!(v.data, data);
}

fn mm(a: InterpArg, b: InterpArg) -> Value {
    run(Op::Matmul, vec![a, b])
}

#[test]
fn matmul_2d_and_1d_operands() {
    let a = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f32t(&[2, 2], &[5.0, 6.0, 7.0, 8.0]);
    check(
        &mm(a.clone(), b.clone()),
        DType::F32,
        &[2, 2],
        &[19.0, 22.0, 43.0, 50.0],
    );
    let v = f32t(&[2], &[1.0, 2.0]);
    check(&mm(v.clone(), b), DType::F32, &[2], &[19.0, 22.0]);
    check(&mm(a, v.clone()), DType::F32, &[2], &[5.0, 11.0]);
    check(
        &mm(f32t(&[3], &[1.0, 2.0, 3.0]), f32t(&[3], &[4.0, 5.0, 6.0])),
        DType::F32,
        &[],
        &[32.0],
    );
    // [2,2,2] @ [2] -> [2,2]; [2] @ [2,2,3] -> [2,3].
    check(
        &mm(iota(DType::F32, &[2, 2, 2]), v.clone()),
        DType::F32,
        &[2, 2],
        &[2.0, 8.0, 14.0, 20.0],
    );
    check(
        &mm(v, iota(DType::F32, &[2, 2, 3])),
        DType::F32,
        &[2, 3],
        &[6.0, 9.0, 12.0, 24.0, 27.0, 30.0],
    );
    let e = eval_op(
        &Op::Matmul,
        &[f32t(&[2, 3], &[0.0; 6]), f32t(&[2, 3], &[0.0; 6])],
    )
    .unwrap_err();
    assert!(e.to_string().contains("inner dims differ"), "{e}");
}

#[test]
fn matmul_broadcasts_batch_dims() {
    // a[i] = (i+1)·I, b[j] = [[j, 1], [2, j]], so out[i, j] = (i+1)·b[j].
    let a = f32t(&[2, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 2.0]);
    let bj = |j: f64| [j, 1.0, 2.0, j];
    let b: Vec<f64> = (0..3).flat_map(|j| bj(j as f64)).collect();
    let v = mm(a, f32t(&[3, 2, 2], &b));
    let want: Vec<f64> = (1..=2)
        .flat_map(|i| (0..3).flat_map(move |j| bj(j as f64).map(|x| x * i as f64)))
        .collect();
    check(&v, DType::F32, &[2, 3, 2, 2], &want);
    let eye = f32t(&[1, 2, 2], &[1.0, 0.0, 0.0, 1.0]);
    check(&mm(eye, f32t(&[3, 2, 2], &b)), DType::F32, &[3, 2, 2], &b);
}

#[test]
fn matmul_dtypes_and_empty_inner_dim() {
    check(
        &mm(
            t(DType::I64, &[1, 2], &[3.0, -4.0]),
            t(DType::I64, &[2, 1], &[5.0, 6.0]),
        ),
        DType::I64,
        &[1, 1],
        &[-9.0],
    );
    // 1 + 2^-11 is a tie in f16 and rounds to even (1), once, after exact accumulation.
    check(
        &mm(
            t(DType::F16, &[2], &[1.0, 1.0]),
            t(DType::F16, &[2], &[1.0, 0.00048828125]),
        ),
        DType::F16,
        &[],
        &[1.0],
    );
    check(
        &mm(f32t(&[2, 0], &[]), f32t(&[0, 3], &[])),
        DType::F32,
        &[2, 3],
        &[0.0; 6],
    );
}

#[test]
fn matmul_64_cubed_matches_naive() {
    let n = 64;
    let a: Vec<f64> = (0..n * n).map(|i| ((i * 7) % 13) as f64 - 6.0).collect();
    let b: Vec<f64> = (0..n * n).map(|i| ((i * 5) % 11) as f64 - 5.0).collect();
    let v = mm(t(DType::F64, &[n, n], &a), t(DType::F64, &[n, n], &b));
    for i in 0..n {
        for j in 0..n {
            let want: f64 = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
            assert_eq!(v.data[i * n + j], want);
        }
    }
}

#[test]
fn linear_with_and_without_bias() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let w = f32t(&[2, 3], &[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
    let b = f32t(&[2], &[10.0, 20.0]);
    check(
        &run(Op::Linear, vec![x.clone(), w.clone()]),
        DType::F32,
        &[2, 2],
        &[4.0, 2.0, 10.0, 5.0],
    );
    check(
        &run(Op::Linear, vec![x, w.clone(), b.clone()]),
        DType::F32,
        &[2, 2],
        &[14.0, 22.0, 20.0, 25.0],
    );
    check(
        &run(Op::Linear, vec![f32t(&[1, 1, 3], &[1.0, 2.0, 3.0]), w, b]),
        DType::F32,
        &[1, 1, 2],
        &[14.0, 22.0],
    );
}

#[test]
fn reshape_permute_transpose() {
    let x = iota(DType::F32, &[2, 3]);
    check(
        &run(
            Op::Reshape {
                shape: Shape::of(&[3, 2]),
            },
            vec![x.clone()],
        ),
        DType::F32,
        &[3, 2],
        &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
    );
    check(
        &run(Op::Transpose { dim0: -1, dim1: 0 }, vec![x]),
        DType::F32,
        &[3, 2],
        &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0],
    );
    // out[c, a, b] = x[a, b, c] = 12a + 4b + c.
    let v = run(
        Op::Permute {
            dims: vec![2, 0, 1],
        },
        vec![iota(DType::I32, &[2, 3, 4])],
    );
    let want: Vec<f64> = (0..4)
        .flat_map(|c| (0..2).flat_map(move |a| (0..3).map(move |b| (12 * a + 4 * b + c) as f64)))
        .collect();
    check(&v, DType::I32, &[4, 2, 3], &want);
}

#[test]
fn expand_and_slice() {
    let v = run(
        Op::Expand {
            shape: Shape::of(&[2, 3, 2]),
        },
        vec![f32t(&[3, 1], &[1.0, 2.0, 3.0])],
    );
    let want: Vec<f64> = (0..2)
        .flat_map(|_| [1.0, 1.0, 2.0, 2.0, 3.0, 3.0])
        .collect();
    check(&v, DType::F32, &[2, 3, 2], &want);
    let x = iota(DType::F32, &[2, 5]);
    let slice = |dim, start, end, step| Op::Slice {
        dim,
        start,
        end,
        step,
    };
    check(
        &run(slice(1, 1, 5, 2), vec![x.clone()]),
        DType::F32,
        &[2, 2],
        &[1.0, 3.0, 6.0, 8.0],
    );
    check(
        &run(slice(-1, 0, 5, 3), vec![x.clone()]),
        DType::F32,
        &[2, 2],
        &[0.0, 3.0, 5.0, 8.0],
    );
    check(
        &run(slice(0, 1, 2, 1), vec![x.clone()]),
        DType::F32,
        &[1, 5],
        &[5.0, 6.0, 7.0, 8.0, 9.0],
    );
    check(
        &run(slice(1, 5, 5, 1), vec![x.clone()]),
        DType::F32,
        &[2, 0],
        &[],
    );
    assert!(eval_op(&slice(1, 0, 6, 1), &[x]).is_err());
}

#[test]
fn cat_promotes() {
    let v = run(
        Op::Cat { dim: 0 },
        vec![
            f32t(&[1, 2], &[0.5, 1.5]),
            t(DType::I32, &[2, 2], &[3.0, 4.0, 5.0, 6.0]),
        ],
    );
    check(&v, DType::F32, &[3, 2], &[0.5, 1.5, 3.0, 4.0, 5.0, 6.0]);
    let v = run(
        Op::Cat { dim: -1 },
        vec![
            t(DType::I64, &[2, 1], &[1.0, 2.0]),
            t(DType::I64, &[2, 2], &[3.0, 4.0, 5.0, 6.0]),
            t(DType::I64, &[2, 0], &[]),
        ],
    );
    check(&v, DType::I64, &[2, 3], &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
    let v = run(
        Op::Cat { dim: 0 },
        vec![
            t(DType::F16, &[1], &[1.0 / 3.0]),
            t(DType::BF16, &[1], &[1.0 / 3.0]),
        ],
    );
    check(&v, DType::F32, &[2], &[0.333251953125, 0.333984375]);
}

#[test]
fn index_select_and_its_errors() {
    let x = iota(DType::F32, &[3, 2]);
    check(
        &run(
            Op::IndexSelect { dim: 0 },
            vec![x.clone(), t(DType::I64, &[3], &[2.0, 0.0, 2.0])],
        ),
        DType::F32,
        &[3, 2],
        &[4.0, 5.0, 0.0, 1.0, 4.0, 5.0],
    );
    check(
        &run(
            Op::IndexSelect { dim: -1 },
            vec![x.clone(), t(DType::I32, &[1], &[1.0])],
        ),
        DType::F32,
        &[3, 1],
        &[1.0, 3.0, 5.0],
    );
    for (i, shown) in [(3.0, "3"), (-1.0, "-1")] {
        let e = eval_op(
            &Op::IndexSelect { dim: 0 },
            &[x.clone(), t(DType::I64, &[2], &[0.0, i])],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "index_select: index {shown} is out of range for dim 0 of size 3 \
                 (operands: f32[3,2], i64[2])"
            )
        );
    }
}

#[test]
fn triu_tril_diagonals() {
    let x = t(
        DType::F32,
        &[3, 4],
        &(1..=12).map(f64::from).collect::<Vec<_>>(),
    );
    let cases: [(bool, i64, [f64; 12]); 6] = [
        (true, 0, [1., 2., 3., 4., 0., 6., 7., 8., 0., 0., 11., 12.]),
        (true, 1, [0., 2., 3., 4., 0., 0., 7., 8., 0., 0., 0., 12.]),
        (
            true,
            -1,
            [1., 2., 3., 4., 5., 6., 7., 8., 0., 10., 11., 12.],
        ),
        (false, 0, [1., 0., 0., 0., 5., 6., 0., 0., 9., 10., 11., 0.]),
        (false, -1, [0., 0., 0., 0., 5., 0., 0., 0., 9., 10., 0., 0.]),
        (
            false,
            2,
            [1., 2., 3., 0., 5., 6., 7., 8., 9., 10., 11., 12.],
        ),
    ];
    for (upper, diagonal, want) in cases {
        let op = if upper {
            Op::Triu { diagonal }
        } else {
            Op::Tril { diagonal }
        };
        check(&run(op, vec![x.clone()]), DType::F32, &[3, 4], &want);
    }
    // Batched over leading dims.
    let v = run(
        Op::Triu { diagonal: 0 },
        vec![t(DType::I32, &[2, 2, 2], &[1., 2., 3., 4., 5., 6., 7., 8.])],
    );
    check(
        &v,
        DType::I32,
        &[2, 2, 2],
        &[1., 2., 0., 4., 5., 6., 0., 8.],
    );
}
