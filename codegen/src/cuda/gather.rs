//! CUDA C for gather groups: a kernel group whose body is one `index_select` of a float
//! tensor by integer indices (an embedding lookup) has no loop nest (its index is data), so
//! it gets this kernel instead.
//!
//! The argument struct has the layout of the loop-nest kernels' (see the module docs), with
//! four buffers and four dims:
//!
//! | | `ptr` | `stride[b][0]` (outer) | `[1]` (index) | `[2]` (inner) | `[3]` (gathered dim) |
//! |---|---|---|---|---|---|
//! | 0 | `x`, f32 | along the dims before `dim` (merged) | 0 | along the dims after `dim` (merged) | along `dim` |
//! | 1 | indices, i32 or i64, in their row-major order | 0 | between indices | 0 | 0 |
//! | 2 | output, f32 | | | | 0 |
//! | 3 | error cell: two i64, zeroed by the caller | 0 | 0 | 0 | 0 |
//!
//! `size = [outer, number of indices, inner, size of dim]`. Each thread handles output
//! elements grid-stride. An index outside `[0, size)` writes NaN to its output elements and
//! sets the error cell to `[1, index]` (the launcher reports it as `index_select`'s
//! out-of-range error, as CUDA's device-side asserts do); no other memory is touched.

use super::source::{c_ident, CudaKernel, CudaUnsupported};
use kiln_ir::{Arg, DType, Graph, Op};

/// Threads per block of a gather kernel.
pub const GATHER_THREADS: u32 = 256;

/// The gather kernel of `body`, when it is one `index_select` of an f32 tensor by i32 or i64
/// indices (both graph inputs) whose result is the body's only output.
pub fn gather_kernel(body: &Graph) -> Result<CudaKernel, CudaUnsupported> {
    let fail = |reason: &str| CudaUnsupported {
        kernel: body.name().to_string(),
        reason: reason.to_string(),
    };
    let ops: Vec<_> = body
        .nodes()
        .filter(|(_, n)| !matches!(n.op, Op::Input))
        .collect();
    let [(id, node)] = ops[..] else {
        return Err(fail("a gather kernel's body is one index_select"));
    };
    if !matches!(node.op, Op::IndexSelect { .. }) || body.outputs() != [id] {
        return Err(fail("a gather kernel's body is one index_select"));
    }
    let (Some(Arg::Value(x)), Some(Arg::Value(idx))) = (node.args.first(), node.args.get(1)) else {
        return Err(fail("index_select takes two tensors"));
    };
    if body.node(*x).ty.dtype != DType::F32 {
        return Err(fail("a gather of a non-f32 tensor"));
    }
    let idx_ty = match body.node(*idx).ty.dtype {
        DType::I64 => "long long",
        DType::I32 => "int",
        _ => return Err(fail("indices that are not i32 or i64")),
    };
    let name = c_ident(&format!("kiln_{}", body.name()));
    let source = format!(
        r#"struct {name}_args {{
    void* ptr[4];
    long long size[4];
    long long stride[4][4];
}};

extern "C" __global__ void {name}({name}_args a) {{
    const float* x = (const float*)a.ptr[0];
    const {idx_ty}* idx = (const {idx_ty}*)a.ptr[1];
    float* out = (float*)a.ptr[2];
    long long* err = (long long*)a.ptr[3];
    const long long outer = a.size[0], n = a.size[1], inner = a.size[2], dsize = a.size[3];
    const long long total = outer * n * inner;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {{
        const long long k = e % inner;
        const long long t = e / inner;
        const long long j = t % n;
        const long long o = t / n;
        const long long i = (long long)idx[j * a.stride[1][1]];
        const long long at = o * a.stride[2][0] + j * a.stride[2][1] + k * a.stride[2][2];
        if (i < 0 || i >= dsize) {{
            out[at] = NAN;
            err[0] = 1;
            err[1] = i;
            continue;
        }}
        out[at] = x[o * a.stride[0][0] + i * a.stride[0][3] + k * a.stride[0][2]];
    }}
}}
"#
    );
    Ok(CudaKernel {
        name,
        source,
        block_threads: GATHER_THREADS,
        per_row: false,
        ndims: 4,
        nbuffers: 4,
    })
}
