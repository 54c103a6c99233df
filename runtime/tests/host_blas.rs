//! Matrix products on an adopted host BLAS (`kiln_runtime::host_blas`), with a stand-in
//! Fortran BLAS written here (naive, column-major, honouring transposition flags and
//! leading dimensions as `sgemm_` does): every layout of each operand, batches, products
//! split among the pool's threads, `matmul_into` and convolutions give a naive product's
//! values, and a BLAS whose products are wrong is refused. Its own test binary: the
//! adoption lasts for the process.

mod common;
use common::*;
use kiln_ir::{DType, Op, Scalar, Shape};
use kiln_runtime::host_blas::{self, AdoptError};
use std::ffi::c_char;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Calls of the stand-in BLAS so far.
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// The Fortran `?gemm_` contract, naively: `c = alpha·op(a)·op(b) + beta·c`, column-major
/// (`c` is m×n with leading dimension ldc), `beta = 0` ignoring c's old values.
///
/// # Safety
/// The Fortran BLAS contract: every pointer valid for the matrices it describes.
#[allow(clippy::too_many_arguments)]
unsafe fn naive_gemm<T>(
    transa: *const c_char,
    transb: *const c_char,
    m: *const i64,
    n: *const i64,
    k: *const i64,
    alpha: *const T,
    a: *const T,
    lda: *const i64,
    b: *const T,
    ldb: *const i64,
    beta: *const T,
    c: *mut T,
    ldc: *const i64,
    ignore_transa: bool,
) where
    T: Copy + Into<f64> + FromF64,
{
    CALLS.fetch_add(1, Ordering::Relaxed);
    let (m, n, k) = (*m as usize, *n as usize, *k as usize);
    let (lda, ldb, ldc) = (*lda as usize, *ldb as usize, *ldc as usize);
    let ta = *transa as u8 == b'T' && !ignore_transa;
    let tb = *transb as u8 == b'T';
    let (alpha, beta): (f64, f64) = ((*alpha).into(), (*beta).into());
    for j in 0..n {
        for i in 0..m {
            let mut s = 0.0f64;
            for p in 0..k {
                let x: f64 = (*a.add(if ta { p + i * lda } else { i + p * lda })).into();
                let y: f64 = (*b.add(if tb { j + p * ldb } else { p + j * ldb })).into();
                s += x * y;
            }
            let at = c.add(i + j * ldc);
            let old = if beta == 0.0 {
                0.0
            } else {
                beta * (*at).into()
            };
            *at = T::from_f64(alpha * s + old);
        }
    }
}

/// The element types of the stand-in.
trait FromF64 {
    fn from_f64(v: f64) -> Self;
}
impl FromF64 for f32 {
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
}
impl FromF64 for f64 {
    fn from_f64(v: f64) -> f64 {
        v
    }
}

macro_rules! stand_in {
    ($name:ident, $t:ty, $ignore:expr) => {
        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $name(
            transa: *const c_char,
            transb: *const c_char,
            m: *const i64,
            n: *const i64,
            k: *const i64,
            alpha: *const $t,
            a: *const $t,
            lda: *const i64,
            b: *const $t,
            ldb: *const i64,
            beta: *const $t,
            c: *mut $t,
            ldc: *const i64,
        ) {
            naive_gemm(
                transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, $ignore,
            )
        }
    };
}
stand_in!(sgemm, f32, false);
stand_in!(dgemm, f64, false);
stand_in!(sgemm_ignoring_transa, f32, true);

fn naive_product(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    out
}

fn nan_filled(shape: &[usize], dtype: DType) -> kiln_runtime::CpuTensor {
    ex(
        Op::Full {
            shape: Shape::of(shape),
            value: Scalar::Float(f64::NAN),
            dtype,
        },
        &[],
    )
}

/// The naive 2-d convolution (stride 1, padding 1, no groups) of x [n, ci, h, w] with
/// w [co, ci, 3, 3].
fn naive_conv3x3(x: &[f64], w: &[f64], dims: [usize; 5]) -> Vec<f64> {
    let [nb, ci, co, h, wd] = dims;
    let mut out = vec![0.0; nb * co * h * wd];
    for b in 0..nb {
        for o in 0..co {
            for y in 0..h {
                for xx in 0..wd {
                    let mut s = 0.0;
                    for c in 0..ci {
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let (iy, ix) = (y + ky, xx + kx);
                                if iy < 1 || ix < 1 || iy > h || ix > wd {
                                    continue;
                                }
                                s += x[((b * ci + c) * h + iy - 1) * wd + ix - 1]
                                    * w[((o * ci + c) * 3 + ky) * 3 + kx];
                            }
                        }
                    }
                    out[((b * co + o) * h + y) * wd + xx] = s;
                }
            }
        }
    }
    out
}

#[test]
fn products_on_an_adopted_blas_match_a_naive_product() {
    // a BLAS that ignores its first operand's transposition is refused, and nothing adopted
    // SAFETY: the stand-ins follow the FortranGemm contract (the first one's values aside).
    let refused = unsafe { host_blas::adopt(sgemm_ignoring_transa, dgemm) };
    assert_eq!(refused, Err(AdoptError::WrongProduct("sgemm")));
    assert!(!host_blas::adopted());
    // SAFETY: as above.
    unsafe { host_blas::adopt(sgemm, dgemm) }.expect("the stand-in agrees");
    assert!(host_blas::adopted());
    // SAFETY: as above.
    assert_eq!(
        unsafe { host_blas::adopt(sgemm, dgemm) },
        Err(AdoptError::AlreadyAdopted)
    );

    // odd sizes, every layout of each operand (row-major, transposed in storage, a step-2
    // slice, an offset slice), f32 and f64, through the eager op and matmul_into; 300 rows
    // are shared among the pool's threads
    for (m, k, n) in [(37, 19, 23), (300, 64, 40), (2, 5, 7), (6, 2, 3)] {
        for dt in [DType::F32, DType::F64] {
            let a = randn(&[m, k], dt, 41);
            let b = randn(&[k, n], dt, 42);
            let want = naive_product(&a.to_f64_vec(), &b.to_f64_vec(), m, k, n);
            let tol = if dt == DType::F32 { 1e-5 } else { 1e-12 };
            let mut a_layouts = layouts(&a);
            a_layouts.push(a.clone());
            let mut b_layouts = layouts(&b);
            b_layouts.push(b.clone());
            for la in &a_layouts {
                for lb in &b_layouts {
                    let before = CALLS.load(Ordering::Relaxed);
                    let got = ex(Op::Matmul, &[la, lb]);
                    assert_close(&got.to_f64_vec(), &want, tol, tol);
                    if dt == DType::F32 {
                        let out = nan_filled(&[m, n], dt);
                        kiln_runtime::matmul_into(la, lb, &out, None).unwrap();
                        assert_close(&out.to_f64_vec(), &want, tol, tol);
                    }
                    let unit = |t: &kiln_runtime::CpuTensor| t.strides().contains(&1);
                    if k > 1 && unit(la) && unit(lb) {
                        assert!(
                            CALLS.load(Ordering::Relaxed) > before,
                            "{m}×{k} @ {k}×{n}, strides {:?} and {:?}: not on the BLAS",
                            la.strides(),
                            lb.strides()
                        );
                    }
                }
            }
        }
    }

    // a single row, a single column, and k = 1 (not a BLAS call: a lone product)
    for (m, k, n) in [(1, 5, 7), (6, 5, 1), (6, 1, 3)] {
        let a = randn(&[m, k], DType::F32, 47);
        let b = randn(&[k, n], DType::F32, 48);
        let got = ex(Op::Matmul, &[&a, &b]).to_f64_vec();
        let want = naive_product(&a.to_f64_vec(), &b.to_f64_vec(), m, k, n);
        assert_close(&got, &want, 1e-5, 1e-5);
    }

    // a batch: [3, 5, 7] @ [7, 4]
    let a = randn(&[3, 5, 7], DType::F32, 43);
    let b = randn(&[7, 4], DType::F32, 44);
    let got = ex(Op::Matmul, &[&a, &b]).to_f64_vec();
    let want = naive_product(&a.to_f64_vec(), &b.to_f64_vec(), 15, 7, 4);
    assert_close(&got, &want, 1e-5, 1e-5);

    // a convolution (im2col and a product per item): 3×3, padding 1, odd sizes
    let (nb, ci, co, h, w) = (2, 3, 5, 7, 6);
    let x = randn(&[nb, ci, h, w], DType::F32, 45);
    let wt = randn(&[co, ci, 3, 3], DType::F32, 46);
    let before = CALLS.load(Ordering::Relaxed);
    let got = ex(
        Op::Convolution {
            stride: vec![1, 1],
            padding: vec![1, 1],
            dilation: vec![1, 1],
            transposed: false,
            output_padding: vec![0, 0],
            groups: 1,
        },
        &[&x, &wt],
    );
    assert!(
        CALLS.load(Ordering::Relaxed) > before,
        "the convolution's products"
    );
    let want = naive_conv3x3(&x.to_f64_vec(), &wt.to_f64_vec(), [nb, ci, co, h, w]);
    assert_close(&got.to_f64_vec(), &want, 1e-5, 1e-5);
}
