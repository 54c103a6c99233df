//! The host's BLAS as the matrix products' kernel.
//!
//! Inside PyTorch (the torch backend), torch's own `sgemm_`/`dgemm_` (MKL, linked into
//! `libtorch_cpu`) computes every eager matmul and convolution product. On this machine (2
//! cores, AVX-512; KILN_PROFILE kernel means, the two alternated in one process) it and the
//! `gemm` crate are level on the row and column shares of transformer-sized products (BERT
//! at hidden 128: the training step's kernels 0.99× the time on MKL, single kernels 0.8-1.2×
//! either way), but MKL is much faster on the products of convolutions' backward passes:
//! ResNet-18's training step (batch 4, 64×64) took 0.88× the kernel time, its 512-channel
//! 3×3 input gradient 0.56×.
//!
//! [`adopt`] hands the runtime those two functions (the Python extension finds them in the
//! already loaded `libtorch_cpu`); from then on [`gemm`] computes every product whose
//! operands BLAS can address (one unit stride per matrix) with eager PyTorch's own kernels,
//! and MKL threads a product on the OpenMP team itself when it is called outside
//! a parallel region (inside one, as in a pool job, it runs on its caller alone). Without a
//! host BLAS (pure Rust), nothing changes.

use crate::kernels::matmul::MatRef;
use std::ffi::c_char;
use std::sync::OnceLock;

/// The Fortran BLAS `?gemm_` ABI: `c = alpha·op(a)·op(b) + beta·c`, column-major, every
/// argument by pointer.
///
/// The integers are passed as pointers to `i64` holding values below 2³¹: an LP64 BLAS
/// (32-bit integers, as torch's MKL) reads their low halves, which on a little-endian
/// machine are the values themselves, and an ILP64 one reads all of them.
pub type FortranGemm<T> = unsafe extern "C" fn(
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
);

/// An adopted BLAS: its single- and double-precision products.
pub struct HostBlas {
    sgemm: FortranGemm<f32>,
    dgemm: FortranGemm<f64>,
}

static HOST: OnceLock<HostBlas> = OnceLock::new();

/// Element types a host BLAS multiplies.
pub(crate) trait BlasElement: Copy {
    /// 1, BLAS's `alpha`
    const UNIT: Self;
    /// 0, BLAS's `beta` when the output is overwritten
    const NOUGHT: Self;
    /// This type's product in `blas`.
    fn gemm_of(blas: &HostBlas) -> FortranGemm<Self>;
}
impl BlasElement for f32 {
    const UNIT: f32 = 1.0;
    const NOUGHT: f32 = 0.0;
    fn gemm_of(blas: &HostBlas) -> FortranGemm<f32> {
        blas.sgemm
    }
}
impl BlasElement for f64 {
    const UNIT: f64 = 1.0;
    const NOUGHT: f64 = 0.0;
    fn gemm_of(blas: &HostBlas) -> FortranGemm<f64> {
        blas.dgemm
    }
}

/// Why a BLAS was not adopted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdoptError {
    /// one was adopted before (the first stays)
    #[error("a host BLAS was adopted already")]
    AlreadyAdopted,
    /// this machine's byte order breaks the integer convention of [`FortranGemm`]
    #[error("a host BLAS needs a little-endian machine")]
    BigEndian,
    /// the functions' products disagree with a naive product: not the BLAS ABI assumed
    #[error("the host BLAS's {0} disagrees with a naive product of the same operands")]
    WrongProduct(&'static str),
}

/// Makes [`gemm`] compute matrix products with the host's BLAS from now on, after checking
/// each function against a naive product of small operands in every transposition.
///
/// # Safety
/// `sgemm` and `dgemm` follow the Fortran BLAS `sgemm_`/`dgemm_` contract (as
/// [`FortranGemm`] describes) and stay loaded for the rest of the process.
pub unsafe fn adopt(sgemm: FortranGemm<f32>, dgemm: FortranGemm<f64>) -> Result<(), AdoptError> {
    if HOST.get().is_some() {
        return Err(AdoptError::AlreadyAdopted);
    }
    if cfg!(target_endian = "big") {
        return Err(AdoptError::BigEndian);
    }
    let blas = HostBlas { sgemm, dgemm };
    if !agrees::<f32>(&blas) {
        return Err(AdoptError::WrongProduct("sgemm"));
    }
    if !agrees::<f64>(&blas) {
        return Err(AdoptError::WrongProduct("dgemm"));
    }
    HOST.set(blas).map_err(|_| AdoptError::AlreadyAdopted)
}

/// Whether matrix products run on a host BLAS ([`adopt`]).
pub fn adopted() -> bool {
    HOST.get().is_some()
}

/// A 3×5 @ 5×4 product of small integers (exact in any order of summation) through `blas`,
/// with the left operand row- and column-major, the right one too, and a padded output
/// row; true when every one equals the naive product.
fn agrees<T>(blas: &HostBlas) -> bool
where
    T: BlasElement + From<i8> + PartialEq + std::ops::Mul<Output = T> + std::ops::Add<Output = T>,
{
    let (m, k, n, ld) = (3usize, 5usize, 4usize, 6usize);
    let av = |i: usize, j: usize| T::from((i * 7 + j * 3) as i8 % 5 - 2);
    let bv = |i: usize, j: usize| T::from((i * 2 + j * 5) as i8 % 7 - 3);
    let want: Vec<T> = (0..m * n)
        .map(|e| {
            let (i, j) = (e / n, e % n);
            (0..k).fold(T::NOUGHT, |s, p| s + av(i, p) * bv(p, j))
        })
        .collect();
    for a_rows in [true, false] {
        for b_rows in [true, false] {
            let a: Vec<T> = (0..m * k)
                .map(|e| {
                    if a_rows {
                        av(e / k, e % k)
                    } else {
                        av(e % m, e / m)
                    }
                })
                .collect();
            let b: Vec<T> = (0..k * n)
                .map(|e| {
                    if b_rows {
                        bv(e / n, e % n)
                    } else {
                        bv(e % k, e / k)
                    }
                })
                .collect();
            let ma = if a_rows {
                MatRef {
                    ptr: a.as_ptr(),
                    rs: k as isize,
                    cs: 1,
                }
            } else {
                MatRef {
                    ptr: a.as_ptr(),
                    rs: 1,
                    cs: m as isize,
                }
            };
            let mb = if b_rows {
                MatRef {
                    ptr: b.as_ptr(),
                    rs: n as isize,
                    cs: 1,
                }
            } else {
                MatRef {
                    ptr: b.as_ptr(),
                    rs: 1,
                    cs: k as isize,
                }
            };
            let mut c = vec![T::from(99); m * ld];
            // SAFETY: the operands and output are in bounds of these vectors.
            let ran = unsafe { call(blas, c.as_mut_ptr(), ld as isize, m, n, k, ma, mb, false) };
            let got = (0..m * n).map(|e| c[e / n * ld + e % n]);
            if !ran || !got.eq(want.iter().copied()) {
                return false;
            }
        }
    }
    true
}

/// BLAS's view of one operand of a row-major product: transposition flag and leading
/// dimension, or None when neither of its strides is 1 (or the other one is too small).
///
/// A row-major `rows × cols` matrix is, to column-major BLAS, its transpose stored with
/// leading dimension `rs`; a column-major one is itself with leading dimension `cs`.
fn blas_view<T>(t: MatRef<T>, rows: usize, cols: usize) -> Option<(u8, i64)> {
    let fits =
        |ld: isize, at_least: usize| ld >= at_least.max(1) as isize && ld <= i32::MAX as isize;
    if (t.cs == 1 || cols == 1) && fits(t.rs, cols) {
        Some((b'N', t.rs as i64))
    } else if (t.rs == 1 || rows == 1) && fits(t.cs, rows) {
        Some((b'T', t.cs as i64))
    } else {
        None
    }
}

/// `dst[m, n] (row stride dst_rs, column stride 1) (+)= a[m, k] @ b[k, n]` on the host
/// BLAS; false (nothing written) when none was adopted or it cannot address the operands.
///
/// # Safety
/// As [`crate::kernels::matmul::gemm_into`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm<T: BlasElement>(
    dst: *mut T,
    dst_rs: isize,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: MatRef<T>,
    accumulate: bool,
) -> bool {
    match HOST.get() {
        Some(blas) => call(blas, dst, dst_rs, m, n, k, a, b, accumulate),
        None => false,
    }
}

/// [`gemm`] on `blas`.
///
/// # Safety
/// As [`gemm`].
#[allow(clippy::too_many_arguments)]
unsafe fn call<T: BlasElement>(
    blas: &HostBlas,
    dst: *mut T,
    dst_rs: isize,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: MatRef<T>,
    accumulate: bool,
) -> bool {
    let small = |d: usize| d <= i32::MAX as usize;
    if m == 0 || n == 0 || k == 0 || !small(m) || !small(n) || !small(k) {
        return false;
    }
    if dst_rs < n.max(1) as isize || dst_rs > i32::MAX as isize {
        return false;
    }
    // row-major dst = a·b is column-major dstᵀ = bᵀ·aᵀ: BLAS's first operand is b
    let (Some((tb, ldb)), Some((ta, lda))) = (blas_view(b, k, n), blas_view(a, m, k)) else {
        return false;
    };
    let (tb, ta) = (tb as c_char, ta as c_char);
    let (bm, bn, bk, ldc) = (n as i64, m as i64, k as i64, dst_rs as i64);
    let beta = if accumulate { T::UNIT } else { T::NOUGHT };
    (T::gemm_of(blas))(
        &tb,
        &ta,
        &bm,
        &bn,
        &bk,
        &T::UNIT,
        b.ptr,
        &ldb,
        a.ptr,
        &lda,
        &beta,
        dst,
        &ldc,
    );
    true
}
