//! PyTorch tensors as kiln tensors without copying: the storage is borrowed (its address,
//! element count, dtype) and seen with the tensor's sizes, strides and storage offset; the
//! Python tensor object is held until kiln drops the last view of it.

use kiln::ir::DType;
use kiln::Tensor;
use kiln_runtime::CpuTensor;
use pyo3::prelude::*;
use std::str::FromStr;

/// One input as Python describes it: `(storage address, kiln dtype name, sizes, strides,
/// storage offset, storage element count, the tensor object to hold)`.
pub(crate) type InputSpec = (
    usize,
    String,
    Vec<usize>,
    Vec<isize>,
    usize,
    usize,
    Py<PyAny>,
);

/// Keeps a PyTorch tensor alive while kiln views its memory. Dropping it without the
/// interpreter lock defers the reference count's decrement to PyO3's pool.
struct Owner(#[allow(dead_code)] Py<PyAny>);

/// A kiln tensor viewing the memory `spec` describes.
pub(crate) fn borrow(index: usize, spec: InputSpec) -> PyResult<Tensor> {
    let (ptr, dtype, shape, strides, offset, storage_len, owner) = spec;
    let dtype = DType::from_str(&dtype).map_err(|e| crate::to_py(format!("input {index}: {e}")))?;
    // SAFETY: the address and element count are those of the tensor's own storage (read by
    // kiln/backend.py from `untyped_storage()`), which `owner` keeps alive; kiln's compiled
    // graphs are functional and never write their inputs; PyTorch does not write them while
    // the call runs (the caller waits for it).
    let t = unsafe {
        CpuTensor::from_foreign(
            ptr as *mut u8,
            dtype,
            storage_len,
            &shape,
            &strides,
            offset,
            Box::new(Owner(owner)),
        )
    }
    .map_err(|e| crate::to_py(format!("input {index}: {e}")))?;
    Ok(Tensor::from_cpu(t))
}
