//! PyTorch tensors as kiln tensors without copying: the storage is borrowed (its address,
//! element count, dtype) and seen with the tensor's sizes, strides and storage offset; the
//! Python tensor object is held until kiln drops the last view of it.

use kiln::ir::DType;
use kiln::Tensor;
use kiln_runtime::CpuTensor;
use pyo3::prelude::*;
use std::str::FromStr;

/// One input as Python describes it: `(storage address, kiln dtype name, sizes, strides,
/// storage offset, storage element count, the tensor object to hold, the pin)`. The pin,
/// `(key, version)` or None, is given for a parameter under the backend's `pin_weights`: the
/// key names the parameter for its lifetime, the version is its `_version`, and kiln may
/// keep packed copies of it while both stay the same ([`kiln_runtime::ForeignPin`]).
pub(crate) type InputSpec = (
    usize,
    String,
    Vec<usize>,
    Vec<isize>,
    usize,
    usize,
    Py<PyAny>,
    Option<(u64, u64)>,
);

/// Keeps a PyTorch tensor alive while kiln views its memory. It is dropped under the
/// interpreter lock (taken when the dropping thread lacks it): a compiled call lets go of a
/// lent input while it runs without the lock, and a reference dropped without it would only
/// be counted down (and the tensor freed) when the lock is next taken, after the call.
struct Owner(Option<Py<PyAny>>);

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            Python::attach(move |_| drop(t));
        }
    }
}

/// A kiln tensor viewing the memory `spec` describes. A pinned parameter is borrowed; any
/// other input is lent to the one call it is passed to, which lets go of it after its last
/// reader ([`CpuTensor::from_foreign_lent`]): a tensor only the call still holds (a saved
/// activation in a backward pass, whose list of arguments the caller cleared) is freed then.
pub(crate) fn borrow(index: usize, spec: InputSpec) -> PyResult<Tensor> {
    let (ptr, dtype, shape, strides, offset, storage_len, owner, pin) = spec;
    let dtype = DType::from_str(&dtype).map_err(|e| crate::to_py(format!("input {index}: {e}")))?;
    let owner = Box::new(Owner(Some(owner)));
    let pin = pin.map(|(key, version)| kiln_runtime::ForeignPin { key, version });
    // SAFETY: the address and element count are those of the tensor's own storage (read by
    // kiln/backend.py from `untyped_storage()`), which `owner` keeps alive; kiln's compiled
    // graphs are functional and never write their inputs; PyTorch does not write them while
    // the call runs (the caller waits for it). A pin's key is never reused (kiln/backend.py
    // counts them) and is forgotten when its parameter goes; its version is the parameter's
    // `_version`, which every write through the parameter bumps (the contract `pin_weights`
    // documents for the writes that do not: `.data`). A lent input is passed to one call
    // (`Compiled::__call__`) and never read after it (only the addresses of those the call
    // kept are compared with its outputs').
    let t = unsafe {
        match pin {
            Some(_) => CpuTensor::from_foreign_pinned(
                ptr as *mut u8,
                dtype,
                storage_len,
                &shape,
                &strides,
                offset,
                owner,
                pin,
            ),
            None => CpuTensor::from_foreign_lent(
                ptr as *mut u8,
                dtype,
                storage_len,
                &shape,
                &strides,
                offset,
                owner,
                None,
            ),
        }
    }
    .map_err(|e| crate::to_py(format!("input {index}: {e}")))?;
    Ok(Tensor::from_cpu(t))
}

/// Drops kiln's packed copies of the parameter pinned as `key` (kiln/backend.py calls it when
/// the parameter is freed).
#[pyfunction]
pub(crate) fn forget_pinned(key: u64) {
    kiln_runtime::forget_pinned(key);
}

/// Bytes kiln's packed weight copies hold now (pinned parameters' included).
#[pyfunction]
pub(crate) fn pack_cache_bytes() -> usize {
    kiln_runtime::pack_cache_bytes()
}

/// kiln's CPU memory counters, as torch's `memory_stats` names them: bytes held by live
/// tensors (`allocated_bytes`) and their peak since the last [`reset_peak_memory_stats`],
/// bytes obtained from the system and kept (`reserved_bytes`: allocated plus cached blocks),
/// cached blocks, allocation requests and cache hits, and the packed weight copies' bytes.
#[pyfunction]
pub(crate) fn memory_stats() -> std::collections::HashMap<&'static str, u64> {
    let s = kiln_runtime::allocator_stats();
    [
        ("allocated_bytes", s.allocated_bytes as u64),
        ("peak_allocated_bytes", s.peak_allocated_bytes as u64),
        ("reserved_bytes", s.reserved_bytes as u64),
        ("cached_blocks", s.cached_blocks as u64),
        ("alloc_calls", s.alloc_calls),
        ("cache_hits", s.cache_hits),
        ("pack_cache_bytes", kiln_runtime::pack_cache_bytes() as u64),
    ]
    .into_iter()
    .collect()
}

/// Starts a new peak of `peak_allocated_bytes` at the bytes allocated now (torch's
/// `reset_peak_memory_stats`).
#[pyfunction]
pub(crate) fn reset_peak_memory_stats() {
    kiln_runtime::reset_peak_stats();
}

/// Returns kiln's cached blocks to the system (torch's `empty_cache`); live tensors keep
/// theirs.
#[pyfunction]
pub(crate) fn empty_cache() {
    kiln_runtime::empty_cache();
}

/// The bytes of the storage `spec` describes (its address, and its element count times the
/// dtype's size): an output starting in them is that input's memory.
pub(crate) fn memory(spec: &InputSpec) -> PyResult<std::ops::Range<usize>> {
    let dtype = DType::from_str(&spec.1).map_err(crate::to_py)?;
    Ok(spec.0..spec.0 + spec.5 * dtype.size_bytes())
}
