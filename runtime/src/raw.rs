//! Raw access for generated code: tensors whose elements a compiled kernel writes before
//! anything reads them, element addresses, and read locks held while a kernel runs.

use crate::storage::{Buf, ForeignPin, Storage};
use crate::tensor::{checked_numel, CpuTensor};
use crate::RuntimeError;
use kiln_ir::DType;
use parking_lot::{RecursiveRwLockReadGuard, RecursiveRwLockWriteGuard};

/// A shared lock on a tensor's storage: in-place writers wait while it is held.
pub struct ReadLock<'a> {
    _guard: RecursiveRwLockReadGuard<'a, Buf>,
}

/// An exclusive lock on a tensor's storage, for a kernel that writes the tensor's elements
/// through [`CpuTensor::data_ptr`] (a compiled graph updating an input in place): readers and
/// other writers wait while it is held; dropping it bumps the version counter, as an in-place
/// op does. Do not read the storage through its guarded accessors while holding it.
pub struct WriteLock<'a> {
    tensor: &'a CpuTensor,
    guard: Option<RecursiveRwLockWriteGuard<'a, Buf>>,
}

impl Drop for WriteLock<'_> {
    fn drop(&mut self) {
        self.guard.take();
        self.tensor.storage().bump_version();
    }
}

impl CpuTensor {
    /// Locks the storage for an in-place write until the returned guard drops (which bumps
    /// the version counter).
    pub fn write_lock(&self) -> WriteLock<'_> {
        WriteLock {
            tensor: self,
            guard: Some(self.storage().guard_mut()),
        }
    }

    /// A contiguous tensor of `shape` whose elements are not initialised.
    ///
    /// # Safety
    /// The caller must write every element before any is read (generated kernels that
    /// store to every index of their output). `bool` tensors are zero-filled, since not
    /// every byte is a valid bool.
    pub unsafe fn uninit(dtype: DType, shape: &[usize]) -> Result<CpuTensor, RuntimeError> {
        let len = checked_numel(shape)
            .filter(|n| n.checked_mul(dtype.size_bytes()).is_some())
            .ok_or_else(|| RuntimeError::ShapeMismatch {
                op: "uninit",
                shape: shape.to_vec(),
                reason: "the element count overflows".to_string(),
            })?;
        let storage = if dtype == DType::Bool {
            Storage::zeros(dtype, len)
        } else {
            Storage::uninit(dtype, len)
        };
        Ok(CpuTensor::from_storage(storage, shape))
    }

    /// The address of the tensor's first element (storage start plus offset). Reading
    /// through it is sound while the tensor lives and no in-place op writes it (hold
    /// [`CpuTensor::read_lock`]); writing is sound only for a storage nothing else shares.
    pub fn data_ptr(&self) -> *mut u8 {
        self.storage()
            .elements_ptr()
            .wrapping_add(self.offset() * self.dtype().size_bytes())
    }

    /// Locks the storage for reading until the returned guard drops.
    pub fn read_lock(&self) -> ReadLock<'_> {
        ReadLock {
            _guard: self.storage().guard(),
        }
    }
}

impl CpuTensor {
    /// A view of memory another library owns (a PyTorch tensor), without copying: a storage
    /// of `storage_len` elements at `ptr` (see [`Storage::from_foreign`]) seen with `shape`,
    /// `strides` and `offset` (in elements), which must stay inside it.
    ///
    /// # Safety
    /// As [`Storage::from_foreign`]: `ptr` valid for `storage_len` elements of `dtype`,
    /// aligned, and alive (with nothing else writing it while kiln reads) as long as `owner`.
    pub unsafe fn from_foreign(
        ptr: *mut u8,
        dtype: DType,
        storage_len: usize,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        owner: Box<dyn Send + Sync>,
    ) -> Result<CpuTensor, RuntimeError> {
        // SAFETY: the caller's contract.
        unsafe {
            CpuTensor::from_foreign_pinned(
                ptr,
                dtype,
                storage_len,
                shape,
                strides,
                offset,
                owner,
                None,
            )
        }
        .map_err(|e| e.renamed("from_foreign"))
    }

    /// [`CpuTensor::from_foreign`] where the lender may vouch for the memory's identity and
    /// version ([`ForeignPin`]; None: it does not): kiln may then keep a packed copy of it (a
    /// transposed weight) from call to call while `pin.key` and `pin.version` stay the same.
    ///
    /// # Safety
    /// As [`CpuTensor::from_foreign`]; and with a pin, the memory must not change while
    /// `pin.version` stays the same, nor `pin.key` name other memory before
    /// [`crate::forget_pinned`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn from_foreign_pinned(
        ptr: *mut u8,
        dtype: DType,
        storage_len: usize,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        owner: Box<dyn Send + Sync>,
        pin: Option<ForeignPin>,
    ) -> Result<CpuTensor, RuntimeError> {
        // SAFETY: the caller's contract.
        let storage = unsafe { Storage::from_foreign(ptr, storage_len, dtype, owner)? };
        CpuTensor::over_foreign(storage, pin, storage_len, shape, strides, offset)
            .map_err(|e| e.renamed("from_foreign_pinned"))
    }

    /// [`CpuTensor::from_foreign_pinned`] lent for one call: the compiled call it is passed
    /// to may drop `owner` once its last reader of the memory has run, while the call goes on
    /// (see [`Storage::release_lent`]); a lender that holds no other reference to the memory
    /// then sees it freed early (PyTorch's saved activations during a backward pass).
    ///
    /// # Safety
    /// As [`CpuTensor::from_foreign_pinned`]; and the tensor and its views are passed to one
    /// compiled call only and not read after it (the call may have let go of the memory).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn from_foreign_lent(
        ptr: *mut u8,
        dtype: DType,
        storage_len: usize,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        owner: Box<dyn Send + Sync>,
        pin: Option<ForeignPin>,
    ) -> Result<CpuTensor, RuntimeError> {
        // SAFETY: the caller's contract.
        let storage = unsafe { Storage::from_foreign(ptr, storage_len, dtype, owner)? };
        let storage = storage.lent_for_one_call();
        CpuTensor::over_foreign(storage, pin, storage_len, shape, strides, offset)
            .map_err(|e| e.renamed("from_foreign_lent"))
    }

    /// A foreign storage of `storage_len` elements, pinned as `pin` says, seen with `shape`,
    /// `strides` and `offset`.
    fn over_foreign(
        mut storage: Storage,
        pin: Option<ForeignPin>,
        storage_len: usize,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> Result<CpuTensor, RuntimeError> {
        if let Some(pin) = pin {
            storage = storage.with_pin(pin);
        }
        CpuTensor::from_storage(storage, &[storage_len]).with_layout(shape, strides, offset)
    }

    /// A contiguous copy with storage of its own.
    pub fn deep_copy(&self) -> CpuTensor {
        self.copy_as(self.dtype())
    }
}
