//! A row-major [`Gemm`] as the arguments of one column-major `cublasSgemmStridedBatched`
//! call: the mapping [`super::driver_gpu::DriverGpu`] uses, kept apart and tested on the
//! CPU (a column-major reference GEMM run on the mapped arguments against the direct
//! row-major product), since nothing else here runs cuBLAS.

use super::gpu::{DevicePtr, Gemm, GemmOperand};

/// The arguments of one `cublasSgemmStridedBatched` call (column-major; `alpha = 1`,
/// `beta = 0`), as [`cublas_gemm_args`] maps a row-major [`Gemm`] onto them. Pointers are
/// the [`Gemm`]'s device addresses; `trans*` true means `CUBLAS_OP_T`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CublasGemmArgs {
    /// `transa`: the first operand is used transposed
    pub transa: bool,
    /// `transb`: the second operand is used transposed
    pub transb: bool,
    /// rows of cuBLAS's `C` (the row-major `n`)
    pub m: i32,
    /// columns of cuBLAS's `C` (the row-major `m`)
    pub n: i32,
    /// the inner dimension
    pub k: i32,
    /// the first operand (the row-major `B`)
    pub a: DevicePtr,
    /// its leading dimension
    pub lda: i32,
    /// elements between its matrices
    pub stride_a: i64,
    /// the second operand (the row-major `A`)
    pub b: DevicePtr,
    /// its leading dimension
    pub ldb: i32,
    /// elements between its matrices
    pub stride_b: i64,
    /// the product
    pub c: DevicePtr,
    /// its leading dimension
    pub ldc: i32,
    /// elements between its matrices
    pub stride_c: i64,
    /// matrices in the batch
    pub batch: i32,
}

/// The cuBLAS (column-major) arguments that compute the row-major [`Gemm`] `g`, or why
/// they cannot (a size over `i32`, a negative stride, a leading dimension smaller than the
/// stored matrix's rows).
///
/// Proof. A row-major `r × c` matrix `X` with row stride `ld` at `p` keeps `X[i][j]` at
/// `p[i·ld + j]`. cuBLAS reads `p` with leading dimension `ld` as the column-major `c × r`
/// matrix `Y` whose `Y[j][i]` is at `p[j + i·ld]`, that is `X[i][j]`: `Y = Xᵀ`. So cuBLAS
/// sees the `m × n` output `C` (row stride `ldc`) as `Cᵀ` (`n × m`, leading dimension
/// `ldc`), and `Cᵀ = (op(A)·op(B))ᵀ = op(B)ᵀ · op(A)ᵀ`: a product with `m' = n`, `n' = m`,
/// `k' = k`. Its first operand must be `op(B)ᵀ`. cuBLAS sees `B`'s storage as its
/// transpose: stored `B` (`k × n`, not `transposed`) is seen as `Bᵀ`, already
/// `op(B)ᵀ` (`CUBLAS_OP_N`); stored `Bᵀ` (`n × k`, `transposed`) is seen as `B`, which
/// must be transposed (`CUBLAS_OP_T`). Its leading dimension is `B.ld` either way, and
/// cuBLAS's bound holds exactly when the row-major one does: `lda ≥ n` (= `m'`, for
/// `OP_N`) is `ld ≥` stored `B`'s `n` columns, `lda ≥ k` (= `k'`, for `OP_T`) is `ld ≥`
/// stored `Bᵀ`'s `k` columns. The second operand is `A` in the same way: `CUBLAS_OP_N`
/// when not `transposed` (stored `m × k`, seen as `Aᵀ`), `CUBLAS_OP_T` when `transposed`,
/// leading dimension `A.ld` (`≥ k'` = `k` for `OP_N`, `≥ n'` = `m` for `OP_T`: stored
/// `A`'s or `Aᵀ`'s columns again). The batch strides are the operands' own (0: the same
/// matrix for every batch entry).
pub fn cublas_gemm_args(g: &Gemm) -> Result<CublasGemmArgs, String> {
    let int = |v: i64, what: &str| -> Result<i32, String> {
        i32::try_from(v).map_err(|_| format!("{what} = {v} does not fit cuBLAS's 32-bit int"))
    };
    let size = |v: usize, what: &str| -> Result<i32, String> {
        i32::try_from(v).map_err(|_| format!("{what} = {v} does not fit cuBLAS's 32-bit int"))
    };
    // the columns of an operand's stored row-major matrix: its leading dimension's bound
    let check = |op: &GemmOperand, what: &str, cols: usize| -> Result<(), String> {
        if op.ld < 1 || op.ld < cols as i64 {
            return Err(format!(
                "{what}.ld = {} is less than the stored matrix's {cols} columns",
                op.ld
            ));
        }
        if op.batch_stride < 0 {
            return Err(format!(
                "{what}.batch_stride = {} is negative",
                op.batch_stride
            ));
        }
        Ok(())
    };
    check(&g.a, "a", if g.a.transposed { g.m } else { g.k })?;
    check(&g.b, "b", if g.b.transposed { g.k } else { g.n })?;
    if g.ldc < 1 || g.ldc < g.n as i64 {
        return Err(format!("ldc = {} is less than n = {}", g.ldc, g.n));
    }
    if g.batch_stride_c < 0 {
        return Err(format!("batch_stride_c = {} is negative", g.batch_stride_c));
    }
    Ok(CublasGemmArgs {
        transa: g.b.transposed,
        transb: g.a.transposed,
        m: size(g.n, "n")?,
        n: size(g.m, "m")?,
        k: size(g.k, "k")?,
        a: g.b.ptr,
        lda: int(g.b.ld, "b.ld")?,
        stride_a: g.b.batch_stride,
        b: g.a.ptr,
        ldb: int(g.a.ld, "a.ld")?,
        stride_b: g.a.batch_stride,
        c: g.c,
        ldc: int(g.ldc, "ldc")?,
        stride_c: g.batch_stride_c,
        batch: size(g.batch, "batch")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(mem: &[f32], ptr: DevicePtr, i: i64) -> f32 {
        mem[(ptr / 4) as usize + i as usize]
    }

    /// cuBLAS's `sgemm_strided_batched` (alpha 1, beta 0), column-major, on host memory.
    fn colmajor_reference(args: &CublasGemmArgs, mem: &mut [f32]) {
        let (m, n, k) = (args.m as i64, args.n as i64, args.k as i64);
        for p in 0..args.batch as i64 {
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0f32;
                    for l in 0..k {
                        // op(A)(i, l), op(B)(l, j); column-major (r, c) is at r + c·ld
                        let a = if args.transa {
                            l + i * args.lda as i64
                        } else {
                            i + l * args.lda as i64
                        };
                        let b = if args.transb {
                            j + l * args.ldb as i64
                        } else {
                            l + j * args.ldb as i64
                        };
                        s += at(mem, args.a, p * args.stride_a + a)
                            * at(mem, args.b, p * args.stride_b + b);
                    }
                    let c = (args.c / 4) as i64 + p * args.stride_c + i + j * args.ldc as i64;
                    mem[c as usize] = s;
                }
            }
        }
    }

    /// The row-major product the [`Gemm`] asks for, directly.
    fn rowmajor_direct(g: &Gemm, mem: &[f32]) -> Vec<(usize, f32)> {
        let mut out = Vec::new();
        let elem = |o: &GemmOperand, p: usize, r: usize, c: usize| {
            // op(X)(r, c): stored X at [r·ld + c], stored Xᵀ at [c·ld + r]
            let i = if o.transposed {
                c as i64 * o.ld + r as i64
            } else {
                r as i64 * o.ld + c as i64
            };
            at(mem, o.ptr, p as i64 * o.batch_stride + i)
        };
        for p in 0..g.batch {
            for i in 0..g.m {
                for j in 0..g.n {
                    let s: f32 = (0..g.k)
                        .map(|l| elem(&g.a, p, i, l) * elem(&g.b, p, l, j))
                        .sum();
                    let c = (g.c / 4) as i64 + p as i64 * g.batch_stride_c + (i as i64) * g.ldc;
                    out.push((c as usize + j, s));
                }
            }
        }
        out
    }

    /// Lays out A, B and C for a gemm of these shapes in one host array, fills A and B,
    /// runs the mapped column-major reference and compares every element of C (and that
    /// the padding between C's rows and matrices is untouched) with the direct product.
    #[allow(clippy::too_many_arguments)]
    fn check_mapping(
        (m, n, k, batch): (usize, usize, usize, usize),
        (a_t, a_pad, a_broadcast): (bool, i64, bool),
        (b_t, b_pad, b_broadcast): (bool, i64, bool),
        c_pad: i64,
    ) {
        let operand = |t: bool, rows: usize, cols: usize, pad: i64, broadcast: bool, start: i64| {
            // stored rows × cols, or cols × rows when transposed
            let (sr, sc) = if t { (cols, rows) } else { (rows, cols) };
            let ld = sc as i64 + pad;
            let size = sr as i64 * ld;
            let op = GemmOperand {
                ptr: (start * 4) as u64,
                ld,
                batch_stride: if broadcast { 0 } else { size + 3 },
                transposed: t,
            };
            let len = if broadcast {
                size
            } else {
                (size + 3) * batch as i64
            };
            (op, len)
        };
        let (a, a_len) = operand(a_t, m, k, a_pad, a_broadcast, 0);
        let (b, b_len) = operand(b_t, k, n, b_pad, b_broadcast, a_len);
        let ldc = n as i64 + c_pad;
        let c_stride = m as i64 * ldc + 5;
        let c_at = a_len + b_len;
        let total = (c_at + c_stride * batch as i64) as usize;
        let mut mem: Vec<f32> = (0..total)
            .map(|i| ((i * 7919) % 23) as f32 - 11.0)
            .collect();
        const PAD: f32 = -1234.5;
        for x in &mut mem[c_at as usize..] {
            *x = PAD;
        }
        let g = Gemm {
            m,
            n,
            k,
            batch,
            a,
            b,
            c: (c_at * 4) as u64,
            ldc,
            batch_stride_c: c_stride,
        };
        let args = cublas_gemm_args(&g).unwrap();
        assert_eq!((args.m, args.n, args.k), (n as i32, m as i32, k as i32));
        let want = rowmajor_direct(&g, &mem);
        colmajor_reference(&args, &mut mem);
        let mut written = vec![false; total];
        for (i, w) in want {
            assert_eq!(mem[i], w, "{g:?}: element {i}");
            written[i] = true;
        }
        for (i, x) in mem.iter().enumerate().skip(c_at as usize) {
            if !written[i] {
                assert_eq!(*x, PAD, "{g:?}: padding at {i} was written");
            }
        }
    }

    #[test]
    fn row_major_gemm_maps_onto_column_major_cublas() {
        // plain, with and without padded rows
        check_mapping((3, 4, 5, 1), (false, 0, false), (false, 0, false), 0);
        check_mapping((3, 4, 5, 1), (false, 2, false), (false, 1, false), 3);
        // transposed A, transposed B, both
        check_mapping((3, 4, 5, 1), (true, 1, false), (false, 0, false), 0);
        check_mapping((3, 4, 5, 1), (false, 0, false), (true, 2, false), 1);
        check_mapping((2, 6, 3, 1), (true, 0, false), (true, 0, false), 2);
        // batched, and broadcast operands (batch stride 0)
        check_mapping((3, 2, 4, 3), (false, 1, false), (true, 0, false), 1);
        check_mapping((3, 2, 4, 3), (false, 0, false), (false, 0, true), 0);
        check_mapping((4, 3, 2, 2), (true, 1, true), (false, 2, false), 0);
        // vectors
        check_mapping((1, 5, 7, 2), (false, 0, false), (false, 0, false), 0);
        check_mapping((5, 1, 7, 1), (false, 0, false), (true, 0, false), 0);
    }

    #[test]
    fn gemm_mapping_rejects_what_cublas_would() {
        let op = |ld| GemmOperand {
            ptr: 0,
            ld,
            batch_stride: 0,
            transposed: false,
        };
        let g = Gemm {
            m: 2,
            n: 3,
            k: 4,
            batch: 1,
            a: op(4),
            b: op(3),
            c: 0,
            ldc: 3,
            batch_stride_c: 0,
        };
        assert!(cublas_gemm_args(&g).is_ok());
        let e = cublas_gemm_args(&Gemm { a: op(3), ..g }).unwrap_err();
        assert!(e.contains("a.ld"), "{e}");
        let e = cublas_gemm_args(&Gemm { ldc: 2, ..g }).unwrap_err();
        assert!(e.contains("ldc"), "{e}");
        let e = cublas_gemm_args(&Gemm {
            k: 1 << 31,
            a: op(1 << 31),
            ..g
        })
        .unwrap_err();
        assert!(e.contains("32-bit"), "{e}");
    }
}
