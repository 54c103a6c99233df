//! In-place ops (copy_, fill_, add_, mul_): written through the destination's strides under
//! its storage's write guard. Fast paths: a contiguous destination is updated in parallel
//! chunks with unit-stride or broadcast (stride 0) source loops; a source that shares the
//! destination's storage is copied first; mixed dtypes compute out of place, then copy.

use crate::element::{with_dtype, with_float, FloatKern, IntKern, Kern};
use crate::error::RuntimeError;
use crate::iter::{broadcast_strides, for_chunks, Space, GRAIN_CHEAP};
use crate::kernels::pointwise;
use crate::tensor::{item_scalar, CpuTensor};
use crate::EagerArg;
use kiln_ir::{result_type, ArgType, BinaryOp, InplaceOp};

/// `src` converted to `dtype`, copied if it shares `dst`'s storage (never alias a read with
/// the write).
fn source(src: &CpuTensor, dst: &CpuTensor, dtype: kiln_ir::DType) -> CpuTensor {
    if src.shares_storage(dst) {
        src.copy_as(dtype)
    } else {
        src.to_dtype(dtype)
    }
}

/// Runs an in-place op whose operand types were already checked by `infer`.
pub(crate) fn run(
    op: InplaceOp,
    dst: &CpuTensor,
    arg: &EagerArg<'_>,
    types: &[ArgType],
) -> Result<(), RuntimeError> {
    if !dst.is_non_overlapping() {
        return Err(RuntimeError::Layout {
            op: op.name(),
            shape: dst.shape().to_vec(),
            strides: dst.strides().to_vec(),
            offset: dst.offset(),
            reason: "cannot write in place into a tensor whose elements overlap (e.g. an expanded tensor); \
                     clone it first"
                .into(),
        });
    }
    let dt = dst.dtype();
    match op {
        InplaceOp::Copy | InplaceOp::Fill => {
            let src = match arg {
                EagerArg::Tensor(t) if op == InplaceOp::Copy => source(t, dst, dt),
                EagerArg::Tensor(t) => CpuTensor::scalar(item_scalar(t), dt),
                EagerArg::Scalar(s) => CpuTensor::scalar(*s, dt),
            };
            with_dtype!(dt, T => update::<T>(dst, &src, |_, s| s));
        }
        InplaceOp::Add | InplaceOp::Mul => {
            let common = result_type(types);
            let bop = if op == InplaceOp::Add {
                BinaryOp::Add
            } else {
                BinaryOp::Mul
            };
            if common == dt {
                let src = match arg {
                    EagerArg::Tensor(t) => source(t, dst, dt),
                    EagerArg::Scalar(s) => CpuTensor::scalar(*s, dt),
                };
                let add = op == InplaceOp::Add;
                with_float!(dt, T => float_update::<T>(dst, &src, add), _ => match dt {
                    kiln_ir::DType::I32 => int_update::<i32>(dst, &src, add),
                    kiln_ir::DType::I64 => int_update::<i64>(dst, &src, add),
                    _ => unreachable!("infer rejects in-place arithmetic on bools"),
                });
            } else {
                // Compute in the common dtype, then cast into the destination.
                let tmp = pointwise::binary(
                    bop,
                    &EagerArg::Tensor(dst),
                    arg,
                    common,
                    dst.shape(),
                    common,
                )?;
                let src = tmp.to_dtype(dt);
                with_dtype!(dt, T => update::<T>(dst, &src, |_, s| s));
            }
        }
    }
    dst.storage().bump_version();
    Ok(())
}

fn float_update<T: FloatKern>(dst: &CpuTensor, src: &CpuTensor, add: bool) {
    if add {
        update::<T>(dst, src, |x, y| T::down(x.up() + y.up()))
    } else {
        update::<T>(dst, src, |x, y| T::down(x.up() * y.up()))
    }
}

fn int_update<T: IntKern>(dst: &CpuTensor, src: &CpuTensor, add: bool) {
    if add {
        update::<T>(dst, src, |x, y| x.wadd(y))
    } else {
        update::<T>(dst, src, |x, y| x.wmul(y))
    }
}

/// `dst[i] = f(dst[i], src[i])` for every element, with `src` (same dtype, a different
/// storage) broadcast to `dst`'s shape.
fn update<T: Kern>(dst: &CpuTensor, src: &CpuTensor, f: impl Fn(T, T) -> T + Sync + Send) {
    debug_assert!(!src.shares_storage(dst));
    let ss = broadcast_strides(src, dst.shape());
    // Take the two locks in address order so concurrent in-place ops cannot deadlock.
    let (mut gw, gr) = if dst.storage().addr() < src.storage().addr() {
        let w = dst.storage().guard_mut();
        (w, src.storage().guard())
    } else {
        let r = src.storage().guard();
        (dst.storage().guard_mut(), r)
    };
    let sd = gr.slice::<T>();
    let dd = gw.slice_mut::<T>();
    let n = dst.numel();
    if n == 0 {
        return;
    }
    if dst.is_contiguous() {
        let region = &mut dd[dst.offset()..][..n];
        let space = Space::new(dst.shape(), [&ss]);
        let [is] = space.inner_strides();
        for_chunks(region, GRAIN_CHEAP, |start, chunk| {
            space.runs(
                [src.ioffset()],
                start..start + chunk.len(),
                |pos, [os], len| {
                    let d = &mut chunk[pos - start..][..len];
                    match is {
                        1 => {
                            for (x, &y) in d.iter_mut().zip(&sd[os as usize..][..len]) {
                                *x = f(*x, y);
                            }
                        }
                        0 => {
                            let y = sd[os as usize];
                            for x in d.iter_mut() {
                                *x = f(*x, y);
                            }
                        }
                        _ => {
                            for (i, x) in d.iter_mut().enumerate() {
                                *x = f(*x, sd[(os + i as isize * is) as usize]);
                            }
                        }
                    }
                },
            )
        });
    } else {
        let space = Space::new(dst.shape(), [dst.strides(), &ss]);
        let [id, is] = space.inner_strides();
        space.runs([dst.ioffset(), src.ioffset()], 0..n, |_, [od, os], len| {
            for i in 0..len as isize {
                let (a, b) = ((od + i * id) as usize, (os + i * is) as usize);
                dd[a] = f(dd[a], sd[b]);
            }
        });
    }
}
