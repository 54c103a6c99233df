//! Non-contiguous inputs (permuted, sliced with a step, offset, expanded) give the same values
//! as their contiguous copies, for every kernel family.

mod common;
use common::*;
use kiln_ir::{BinaryOp, DType, Op, ReduceOp, Scalar, Shape, UnaryOp};
use kiln_runtime::CpuTensor;

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

fn check(op: Op, args: &[&CpuTensor], vary: usize, rtol: f64) {
    let want = ex(op.clone(), args);
    for v in layouts(args[vary]) {
        let mut a: Vec<&CpuTensor> = args.to_vec();
        a[vary] = &v;
        let got = ex(op.clone(), &a);
        assert_eq!(got.shape(), want.shape(), "{op}");
        assert_eq!(got.dtype(), want.dtype(), "{op}");
        assert_close(&got.to_f64_vec(), &want.to_f64_vec(), rtol, rtol);
    }
}

#[test]
fn unary_ops() {
    for dt in FLOATS {
        for shape in [&[3usize, 5, 7][..], &[64, 1100]] {
            let x = randn(shape, dt, 1);
            // every unary op the table types for this dtype
            for u in UnaryOp::ALL
                .into_iter()
                .filter(|u| u.info().dtype.result(dt).is_ok())
            {
                check(Op::Unary(u), &[&x], 0, 0.0);
            }
            check(Op::Cast { dtype: DType::I32 }, &[&x], 0, 0.0);
            check(Op::Contiguous, &[&x], 0, 0.0);
        }
    }
    for dt in [DType::I32, DType::I64] {
        let x = ex(
            Op::Cast { dtype: dt },
            &[&ex_s(
                Op::Binary(BinaryOp::Mul),
                &randn(&[4, 9], DType::F32, 2),
                Scalar::Float(50.0),
            )],
        );
        for u in [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Exp] {
            check(Op::Unary(u), &[&x], 0, 0.0);
        }
    }
}

#[test]
fn binary_ops() {
    for dt in FLOATS.into_iter().chain([DType::I64]) {
        let a = ex(
            Op::Cast { dtype: dt },
            &[&ex_s(
                Op::Binary(BinaryOp::Mul),
                &randn(&[6, 70], DType::F64, 3),
                Scalar::Float(10.0),
            )],
        );
        let b = ex(
            Op::Cast { dtype: dt },
            &[&ex_s(
                Op::Binary(BinaryOp::Mul),
                &randn(&[6, 70], DType::F64, 4),
                Scalar::Float(10.0),
            )],
        );
        let row = ex(Op::Cast { dtype: dt }, &[&randn(&[70], DType::F64, 5)]);
        for op in BinaryOp::ALL {
            // integer pow and division by a random integer (which may be 0) have their
            // own tests
            let int_division = matches!(op, BinaryOp::Pow | BinaryOp::Remainder | BinaryOp::Fmod);
            if (int_division && !dt.is_float()) || op.info().dtype.result(dt).is_err() {
                continue;
            }
            check(Op::Binary(op), &[&a, &b], 0, 0.0);
            check(Op::Binary(op), &[&a, &b], 1, 0.0);
            check(Op::Binary(op), &[&a, &row], 0, 0.0);
            check(Op::Binary(op), &[&row, &a], 1, 0.0);
        }
    }
    let big_a = randn(&[300, 257], DType::F32, 6);
    let big_b = randn(&[300, 257], DType::F32, 7);
    check(Op::Binary(BinaryOp::Add), &[&big_a, &big_b], 0, 0.0);
    check(Op::Binary(BinaryOp::Mul), &[&big_a, &big_b], 1, 0.0);
    let cond = ex(Op::Binary(BinaryOp::Gt), &[&big_a, &big_b]);
    check(Op::Where, &[&cond, &big_a, &big_b], 0, 0.0);
    check(Op::Where, &[&cond, &big_a, &big_b], 2, 0.0);
}

#[test]
fn expanded_operands_match_materialised() {
    let x = randn(&[1, 37], DType::F32, 8);
    let e = ex(
        Op::Expand {
            shape: Shape::of(&[5, 37]),
        },
        &[&x],
    );
    assert!(e.shares_storage(&x));
    assert_eq!(e.strides()[0], 0);
    let m = ex(Op::Contiguous, &[&e]);
    let y = randn(&[5, 37], DType::F32, 9);
    for op in [Op::Binary(BinaryOp::Sub), Op::Unary(UnaryOp::Tanh)] {
        let args_e: Vec<&CpuTensor> = if matches!(op, Op::Unary(_)) {
            vec![&e]
        } else {
            vec![&e, &y]
        };
        let args_m: Vec<&CpuTensor> = if matches!(op, Op::Unary(_)) {
            vec![&m]
        } else {
            vec![&m, &y]
        };
        assert_eq!(
            ex(op.clone(), &args_e).to_f64_vec(),
            ex(op, &args_m).to_f64_vec()
        );
    }
    let s_e = ex(
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: vec![0],
            keepdim: false,
            dtype: None,
        },
        &[&e],
    );
    let s_m = ex(
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: vec![0],
            keepdim: false,
            dtype: None,
        },
        &[&m],
    );
    assert_close(&s_e.to_f64_vec(), &s_m.to_f64_vec(), 1e-6, 0.0);
    let w = randn(&[37, 4], DType::F32, 10);
    assert_close(
        &ex(Op::Matmul, &[&e, &w]).to_f64_vec(),
        &ex(Op::Matmul, &[&m, &w]).to_f64_vec(),
        1e-6,
        1e-6,
    );
}

#[test]
fn reductions() {
    for dt in FLOATS.into_iter().chain([DType::I32]) {
        let x = ex(
            Op::Cast { dtype: dt },
            &[&ex_s(
                Op::Binary(BinaryOp::Mul),
                &randn(&[4, 5, 6], DType::F64, 11),
                Scalar::Float(20.0),
            )],
        );
        let tol = if dt.is_float() { 1e-5 } else { 0.0 };
        for dims in [vec![], vec![0], vec![-1], vec![1], vec![0, 2], vec![0, 1]] {
            for keepdim in [false, true] {
                for r in ReduceOp::ALL {
                    if r == ReduceOp::Mean && !dt.is_float() {
                        continue;
                    }
                    check(
                        Op::Reduce {
                            op: r,
                            dims: dims.clone(),
                            keepdim,
                            dtype: None,
                        },
                        &[&x],
                        0,
                        tol,
                    );
                }
                if dt.is_float() {
                    check(
                        Op::Var {
                            dims: dims.clone(),
                            correction: 1,
                            keepdim,
                        },
                        &[&x],
                        0,
                        1e-5,
                    );
                }
            }
        }
        for d in [0, 1, 2] {
            check(
                Op::Argmax {
                    dim: d,
                    keepdim: false,
                },
                &[&x],
                0,
                0.0,
            );
        }
    }
    // Long rows and many rows take the parallel paths.
    let big = randn(&[3, 200_000], DType::F32, 12);
    check(
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: vec![],
            keepdim: false,
            dtype: None,
        },
        &[&big],
        0,
        1e-5,
    );
    check(
        Op::Reduce {
            op: ReduceOp::Max,
            dims: vec![1],
            keepdim: false,
            dtype: None,
        },
        &[&big],
        0,
        0.0,
    );
    check(
        Op::Reduce {
            op: ReduceOp::Mean,
            dims: vec![0],
            keepdim: true,
            dtype: None,
        },
        &[&big],
        0,
        1e-5,
    );
}

#[test]
fn normalisations() {
    for dt in FLOATS {
        let x = randn(&[3, 4, 33], dt, 13);
        let tol = if dt == DType::F32 || dt == DType::F64 {
            1e-6
        } else {
            1e-2
        };
        for d in [0, 1, -1] {
            check(Op::Softmax { dim: d }, &[&x], 0, tol);
            check(Op::LogSoftmax { dim: d }, &[&x], 0, tol);
        }
        let w = randn(&[4, 33], dt, 14);
        let b = randn(&[4, 33], dt, 15);
        check(
            Op::LayerNorm {
                ndim: 2,
                eps: kiln_ir::F64::new(1e-5),
            },
            &[&x, &w, &b],
            0,
            tol,
        );
        check(
            Op::LayerNorm {
                ndim: 2,
                eps: kiln_ir::F64::new(1e-5),
            },
            &[&x, &w, &b],
            1,
            tol,
        );
        let w1 = randn(&[33], dt, 16);
        check(
            Op::RmsNorm {
                ndim: 1,
                eps: kiln_ir::F64::new(1e-6),
            },
            &[&x, &w1],
            0,
            tol,
        );
    }
}

#[test]
fn matmuls() {
    for dt in [DType::F32, DType::F64, DType::BF16, DType::I64] {
        let cast = |t: CpuTensor| {
            ex(
                Op::Cast { dtype: dt },
                &[&ex_s(Op::Binary(BinaryOp::Mul), &t, Scalar::Float(4.0))],
            )
        };
        let a = cast(randn(&[2, 3, 5, 7], DType::F64, 17));
        let b = cast(randn(&[3, 7, 4], DType::F64, 18));
        let tol = match dt {
            DType::BF16 => 1e-2,
            DType::I64 => 0.0,
            _ => 1e-5, // different gemm paths sum in different orders
        };
        check(Op::Matmul, &[&a, &b], 0, tol);
        check(Op::Matmul, &[&a, &b], 1, tol);
        let m = cast(randn(&[9, 7], DType::F64, 19));
        let v = cast(randn(&[7], DType::F64, 20));
        check(Op::Matmul, &[&m, &b], 0, tol);
        check(Op::Matmul, &[&a, &v], 0, tol);
        check(Op::Matmul, &[&v, &b], 1, tol);
    }
    let x = randn(&[2, 5, 16], DType::F32, 21);
    let w = randn(&[8, 16], DType::F32, 22);
    let bias = randn(&[8], DType::F32, 23);
    check(Op::Linear, &[&x, &w, &bias], 0, 1e-5);
    check(Op::Linear, &[&x, &w, &bias], 1, 1e-5);
    check(Op::Linear, &[&x, &w], 1, 1e-5);
    // Large enough for gemm's own threads and the folded batch path.
    let a = randn(&[4, 64, 96], DType::F32, 24);
    let b = randn(&[96, 80], DType::F32, 25);
    check(Op::Matmul, &[&a, &b], 0, 1e-5);
    check(Op::Matmul, &[&a, &b], 1, 1e-5);
    // A batch of items each large enough for gemm's threads: one thread per item instead.
    let a = randn(&[3, 64, 80], DType::F32, 124);
    let b = randn(&[3, 80, 64], DType::F32, 125);
    check(Op::Matmul, &[&a, &b], 0, 1e-5);
    check(Op::Matmul, &[&a, &b], 1, 1e-5);
}

#[test]
fn layout_copies() {
    let x = randn(&[4, 6, 5], DType::F32, 26);
    check(Op::Triu { diagonal: 1 }, &[&x], 0, 0.0);
    check(Op::Tril { diagonal: -1 }, &[&x], 0, 0.0);
    let idx = t(&[3.0, 0.0, 3.0], &[3], DType::I64);
    for d in 0..3 {
        check(Op::IndexSelect { dim: d }, &[&x, &idx], 0, 0.0);
    }
    let y = randn(&[4, 2, 5], DType::F32, 27);
    check(Op::Cat { dim: 1 }, &[&x, &y], 0, 0.0);
    check(Op::Cat { dim: 1 }, &[&x, &y], 1, 0.0);
    check(
        Op::Reshape {
            shape: Shape::of(&[24, 5]),
        },
        &[&x],
        0,
        0.0,
    );
    check(
        Op::Reshape {
            shape: Shape::of(&[120]),
        },
        &[&x],
        0,
        0.0,
    );
}

/// `a @ b` of row-major f64 values: `a` is `[m, k]`, `b` is `[k, n]`.
fn naive_product(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                c[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    c
}

/// Products big enough that operands whose rows are not contiguous are copied row-major
/// before the gemm (every layout of each operand, batched and not, `linear`'s wᵀ and
/// `matmul_into`): the values of a naive product, and the operands are left as they were.
#[test]
fn big_products_of_strided_operands_match_a_naive_product() {
    let (m, k, n) = (300, 64, 270);
    let a = randn(&[m, k], DType::F32, 31);
    let b = randn(&[k, n], DType::F32, 32);
    let want = naive_product(&a.to_f64_vec(), &b.to_f64_vec(), m, k, n);
    let tol = 1e-4;
    let mut a_layouts = layouts(&a);
    a_layouts.push(a.clone());
    let mut b_layouts = layouts(&b);
    b_layouts.push(b.clone());
    for la in &a_layouts {
        for lb in &b_layouts {
            let got = ex(Op::Matmul, &[la, lb]);
            assert_eq!(got.shape(), &[m, n]);
            assert_close(&got.to_f64_vec(), &want, tol, tol);
            let out = ex(
                Op::Full {
                    shape: Shape::of(&[m, n]),
                    value: Scalar::Float(f64::NAN),
                    dtype: DType::F32,
                },
                &[],
            );
            kiln_runtime::matmul_into(la, lb, &out, None).unwrap();
            assert_close(&out.to_f64_vec(), &want, tol, tol);
        }
        assert_eq!(la.to_f64_vec(), a.to_f64_vec());
    }
    // a batch of two items, the second operand's items transposed in storage
    let a2 = randn(&[2, m, k], DType::F32, 33);
    let b2 = randn(&[2, k, n], DType::F32, 34);
    let b2t = ex(
        Op::Permute {
            dims: vec![0, 2, 1],
        },
        &[&b2],
    );
    let b2t = ex(Op::Contiguous, &[&b2t]);
    let b2t = ex(
        Op::Permute {
            dims: vec![0, 2, 1],
        },
        &[&b2t],
    );
    let got = ex(Op::Matmul, &[&a2, &b2t]).to_f64_vec();
    let (av, bv) = (a2.to_f64_vec(), b2.to_f64_vec());
    for i in 0..2 {
        let w = naive_product(
            &av[i * m * k..][..m * k],
            &bv[i * k * n..][..k * n],
            m,
            k,
            n,
        );
        assert_close(&got[i * m * n..][..m * n], &w, tol, tol);
    }
    // linear: x @ wᵀ + bias with w [n, k] row-major (wᵀ is a transposed view)
    let w = randn(&[n, k], DType::F32, 35);
    let bias = randn(&[n], DType::F32, 36);
    let wt = ex(Op::Permute { dims: vec![1, 0] }, &[&w]);
    let wt = ex(Op::Contiguous, &[&wt]);
    let mut want = naive_product(&a.to_f64_vec(), &wt.to_f64_vec(), m, k, n);
    for (i, v) in want.iter_mut().enumerate() {
        *v += bias.to_f64_vec()[i % n];
    }
    let got = ex(Op::Linear, &[&a, &w, &bias]);
    assert_close(&got.to_f64_vec(), &want, tol, tol);
}

/// An f32 output for `matmul_into` filled with NaN, so that an element it never writes shows.
fn nan_output(shape: &[usize]) -> CpuTensor {
    ex(
        Op::Full {
            shape: Shape::of(shape),
            value: Scalar::Float(f64::NAN),
            dtype: DType::F32,
        },
        &[],
    )
}

/// `matmul_into`'s epilogue runs once on every output row, after the row's product is final:
/// one big matrix (its rows shared out among the threads), a smaller one (column shares on
/// the kernel pool, the last share ragged, then the epilogue), a big one of few rows (gemm's
/// own threads, then the epilogue), a batch of two, and a single row (column shares).
#[test]
fn matmul_into_epilogues_see_each_finished_row_once() {
    for (sa, sb) in [
        (vec![1031usize, 64], vec![64usize, 130]),
        (vec![301, 64], vec![64, 130]),
        (vec![301, 512], vec![512, 600]),
        (vec![2, 150, 48], vec![2, 48, 70]),
        (vec![1, 64], vec![64, 5000]),
    ] {
        let a = randn(&sa, DType::F32, 41);
        let b = randn(&sb, DType::F32, 42);
        let (k, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
        let m = sa[sa.len() - 2];
        let items = sa[..sa.len() - 2].iter().product::<usize>();
        let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
        let bstride = if sb.len() > 2 { k * n } else { 0 };
        let mut want = Vec::new();
        for i in 0..items {
            want.extend(naive_product(
                &av[i * m * k..][..m * k],
                &bv[i * bstride..][..k * n],
                m,
                k,
                n,
            ));
        }
        let mut out_shape = sa.clone();
        *out_shape.last_mut().unwrap() = n;
        let out = nan_output(&out_shape);
        let seen = std::sync::Mutex::new(vec![0u32; items * m]);
        let base = out.data_ptr() as usize;
        let double = |r0: usize, nr: usize| {
            for r in r0..r0 + nr {
                seen.lock().unwrap()[r] += 1;
                // SAFETY: row r of the contiguous output is this block's alone
                let row =
                    unsafe { std::slice::from_raw_parts_mut((base as *mut f32).add(r * n), n) };
                row.iter_mut().for_each(|v| *v *= 2.0);
            }
        };
        kiln_runtime::matmul_into(&a, &b, &out, Some(&double)).unwrap();
        assert!(
            seen.into_inner().unwrap().iter().all(|&c| c == 1),
            "{sa:?} @ {sb:?}"
        );
        let twice: Vec<f64> = want.iter().map(|v| 2.0 * v).collect();
        assert_close(&out.to_f64_vec(), &twice, 1e-4, 1e-4);
    }
}

/// `x @ wᵀ` through `matmul_into`, against the naive product of the values `w` holds now.
fn linear_into(x: &CpuTensor, w: &CpuTensor) -> Vec<f64> {
    let r = x.rank();
    let (m, k, n) = (x.numel() / x.shape()[r - 1], x.shape()[r - 1], w.shape()[0]);
    let wt = w.with_layout(&[k, n], &[1, k as isize], 0).unwrap();
    let mut out_shape = x.shape().to_vec();
    out_shape[r - 1] = n;
    let out = nan_output(&out_shape);
    kiln_runtime::matmul_into(x, &wt, &out, None).unwrap();
    let got = out.to_f64_vec();
    let want = naive_product(&x.to_f64_vec(), &wt.to_f64_vec(), m, k, n);
    assert_close(&got, &want, 1e-4, 1e-4);
    got
}

/// `x @ wᵀ` of a few rows (dot products of x's rows with wᵀ's contiguous columns, not gemm):
/// a classifier head's shape (its columns shared on the kernel pool), a single row whose
/// shared dim ends in a partial vector, and a batch folded into six rows.
#[test]
fn matmul_into_few_rows_against_transposed_weights_match_a_naive_product() {
    for (sx, sw) in [
        (vec![4usize, 512], vec![1000usize, 512]),
        (vec![1, 37], vec![9, 37]),
        (vec![3, 2, 70], vec![130, 70]),
    ] {
        let x = randn(&sx, DType::F32, 61);
        let w = randn(&sw, DType::F32, 62);
        linear_into(&x, &w);
    }
}

/// A transposed weight big enough to be copied row-major is copied once and the copy kept
/// (weight prepacking); every call still sees the weight's current values: after an in-place
/// write (which bumps the version), and for memory borrowed from another library, whose
/// writes kiln cannot see (never kept). Both for one matrix and for a batch sharing the weight.
#[test]
fn matmul_into_kept_weight_copies_never_hide_a_write() {
    // 300 rows reuse each weight element 300 times: past the copy threshold
    let x = randn(&[300, 128], DType::F32, 51);
    let w = randn(&[140, 128], DType::F32, 52);
    let first = linear_into(&x, &w);
    for _ in 0..3 {
        assert_eq!(linear_into(&x, &w), first);
    }
    {
        let mut g = w.storage().write::<f32>().unwrap();
        g.iter_mut().for_each(|v| *v = -*v);
    }
    let negated = linear_into(&x, &w);
    assert_eq!(negated[0], -first[0]);
    for _ in 0..3 {
        assert_eq!(linear_into(&x, &w), negated);
    }

    // a batch of matrices sharing the weight (3 × 100 rows: reused 300 times)
    let x3 = randn(&[3, 100, 128], DType::F32, 53);
    let batched = linear_into(&x3, &w);
    for _ in 0..3 {
        assert_eq!(linear_into(&x3, &w), batched);
    }
    w.storage().write::<f32>().unwrap()[0] += 1.0;
    assert_ne!(linear_into(&x3, &w), batched);

    // a weight in memory kiln borrows: written behind kiln's back between calls
    let vals: Vec<f32> = w.to_vec::<f32>().unwrap();
    let mut owned = vals.clone().into_boxed_slice();
    let ptr = owned.as_mut_ptr();
    struct Owner(#[allow(dead_code)] Box<[f32]>);
    // SAFETY: the boxed slice lives in the owner as long as the storage; this test writes it
    // only between calls, while no kernel reads it
    let borrowed = unsafe {
        CpuTensor::from_foreign(
            ptr.cast(),
            DType::F32,
            vals.len(),
            &[140, 128],
            &[128, 1],
            0,
            Box::new(Owner(owned)),
        )
    }
    .unwrap();
    let start = linear_into(&x, &borrowed)[0];
    for round in 0..4 {
        // SAFETY: as above; nothing reads the storage now
        unsafe { (0..vals.len()).for_each(|i| *ptr.add(i) = -*ptr.add(i)) };
        let got = linear_into(&x, &borrowed);
        assert_eq!(got[0], if round % 2 == 0 { -start } else { start });
    }
}
