//! Storage: the bytes behind tensors. A caching-allocated, 64-byte aligned buffer of elements
//! of one dtype, shared by `Arc` between views, behind a reader-writer lock (kernels read under
//! shared guards; in-place ops write under the exclusive guard), with a version counter that
//! in-place writes bump.

use crate::alloc::Block;
use crate::element::Element;
use crate::error::RuntimeError;
use kiln_ir::DType;
use parking_lot::{MappedRecursiveRwLockReadGuard, RecursiveRwLock, RecursiveRwLockReadGuard};
use parking_lot::{MappedRecursiveRwLockWriteGuard, RecursiveRwLockWriteGuard};
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The elements of a storage. Only reachable through the storage's lock.
///
/// Invariant: all `len` elements are initialised values of `dtype` (every constructor fills
/// the whole buffer before the `Buf` exists).
pub(crate) struct Buf {
    block: Block,
    len: usize,
    dtype: DType,
}

impl Buf {
    fn check<T: Element>(&self) {
        assert_eq!(
            T::DTYPE,
            self.dtype,
            "internal error: typed access with the wrong dtype"
        );
    }

    /// The elements as a typed slice. Panics if `T` is not the storage's dtype (an internal
    /// bug: public entry points check dtypes first).
    pub(crate) fn slice<T: Element>(&self) -> &[T] {
        self.check::<T>();
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the block is 64-byte aligned and holds `len` initialised `T`s (the Buf
        // invariant; T's dtype is checked above, and the sealed Element types are exactly
        // the dtypes' Rust types). The borrow of `self` keeps the block alive and the lock
        // guard that produced `&self` excludes writers.
        unsafe { std::slice::from_raw_parts(self.block.as_ptr() as *const T, self.len) }
    }

    /// The elements as a mutable typed slice (under the write guard, or before sharing).
    pub(crate) fn slice_mut<T: Element>(&mut self) -> &mut [T] {
        self.check::<T>();
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `slice`; `&mut self` proves exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.block.as_ptr() as *mut T, self.len) }
    }
}

/// A buffer of `len` elements of one dtype, from the caching allocator.
pub struct Storage {
    buf: RecursiveRwLock<Buf>,
    dtype: DType,
    len: usize,
    version: AtomicU64,
    /// the memory is borrowed from another library (whose writes kiln does not see)
    foreign: bool,
    /// the lender's identity and version of borrowed memory, when it vouches for them
    pin: Option<ForeignPin>,
    /// the owner of memory lent for one call ([`Storage::lent_for_one_call`]), until the
    /// call lets go of it ([`Storage::release_lent`]); None for other storages
    lent: Option<parking_lot::Mutex<Option<Box<dyn Send + Sync>>>>,
}

/// What the lender of foreign memory ([`Storage::from_foreign`]) vouches for, so that kiln
/// may keep packed copies of it between calls (a PyTorch parameter's transposed weight):
/// `key` names the lender's tensor for its lifetime (never reused for another; the lender
/// calls [`crate::forget_pinned`] when the tensor goes), `version` changes with every write
/// to its memory (PyTorch's `_version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForeignPin {
    /// the lender's tensor, unique for the process's lifetime
    pub key: u64,
    /// the lender's write counter for that memory at this borrow
    pub version: u64,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("dtype", &self.dtype)
            .field("len", &self.len)
            .field("version", &self.version())
            .finish()
    }
}

impl Storage {
    /// A storage of `len` elements of `T`, initialised by `init`, which must write every
    /// element (it is handed possibly uninitialised memory).
    pub(crate) fn build<T: Element>(
        len: usize,
        init: impl FnOnce(&mut [MaybeUninit<T>]),
    ) -> Storage {
        let nbytes = len
            .checked_mul(std::mem::size_of::<T>())
            .expect("tensor size overflows usize");
        let block = Block::new(nbytes, false);
        if len > 0 {
            // SAFETY: the block holds `nbytes` bytes, 64-byte aligned; MaybeUninit<T> has
            // no validity requirement, and nothing else refers to the fresh block.
            let s = unsafe {
                std::slice::from_raw_parts_mut(block.as_ptr() as *mut MaybeUninit<T>, len)
            };
            init(s);
        }
        Self::from_block(block, len, T::DTYPE)
    }

    /// A storage of `len` elements of `dtype` whose bytes are not initialised (see
    /// [`CpuTensor::uninit`](crate::CpuTensor::uninit) for the contract).
    pub(crate) fn uninit(dtype: DType, len: usize) -> Storage {
        let nbytes = len
            .checked_mul(dtype.size_bytes())
            .expect("tensor size overflows usize");
        Self::from_block(Block::new(nbytes, false), len, dtype)
    }

    /// A storage of `len` zeros (false, 0, +0.0) of `dtype`.
    pub(crate) fn zeros(dtype: DType, len: usize) -> Storage {
        let nbytes = len
            .checked_mul(dtype.size_bytes())
            .expect("tensor size overflows usize");
        // All-zero bytes are a valid zero of every dtype.
        Self::from_block(Block::new(nbytes, true), len, dtype)
    }

    /// A storage of `len` elements of `dtype` over memory another library owns (a PyTorch
    /// tensor's storage), without copying: `owner` is kept alive until the storage drops,
    /// and nothing is given back to kiln's allocator.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` elements of `dtype` and aligned for
    /// that dtype for as long as `owner` lives, and nothing else may write those bytes while
    /// kiln reads them.
    pub unsafe fn from_foreign(
        ptr: *mut u8,
        len: usize,
        dtype: DType,
        owner: Box<dyn Send + Sync>,
    ) -> Result<Storage, RuntimeError> {
        let bad = |reason: &str| RuntimeError::ShapeMismatch {
            op: "from_foreign",
            shape: vec![len],
            reason: reason.to_string(),
        };
        if len.checked_mul(dtype.size_bytes()).is_none() {
            return Err(bad("the byte count overflows"));
        }
        let ptr = match NonNull::new(ptr) {
            Some(p) if (p.as_ptr() as usize).is_multiple_of(dtype.size_bytes()) => p,
            Some(_) => return Err(bad("the pointer is not aligned for the dtype")),
            None if len == 0 => NonNull::<u64>::dangling().cast(),
            None => return Err(bad("the pointer is null")),
        };
        // SAFETY: the caller's contract is the block's.
        let block = unsafe { Block::foreign(ptr, owner) };
        let mut s = Self::from_block(block, len, dtype);
        s.foreign = true;
        Ok(s)
    }

    fn from_block(block: Block, len: usize, dtype: DType) -> Storage {
        Storage {
            buf: RecursiveRwLock::new(Buf { block, len, dtype }),
            dtype,
            len,
            version: AtomicU64::new(0),
            foreign: false,
            pin: None,
            lent: None,
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the storage holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size in bytes (elements times the dtype's size).
    pub fn nbytes(&self) -> usize {
        self.len * self.dtype.size_bytes()
    }

    /// True when the memory is borrowed from another library ([`Storage::from_foreign`]):
    /// that library's writes do not bump the version counter.
    pub fn is_foreign(&self) -> bool {
        self.foreign
    }

    /// The lender's identity and version of foreign memory, where it vouches for them
    /// ([`Storage::with_pin`]); None for kiln's own storages and unpinned foreign ones.
    pub fn foreign_pin(&self) -> Option<ForeignPin> {
        self.pin
    }

    /// This foreign storage with the lender's identity and version (ignored for kiln's own
    /// storages, whose version counter already sees every write).
    pub(crate) fn with_pin(mut self, pin: ForeignPin) -> Storage {
        if self.foreign {
            self.pin = Some(pin);
        }
        self
    }

    /// This foreign storage lent for one call: the caller vouches that its memory (through
    /// any view) is read only by the one compiled call it is passed to, which may then drop
    /// the owner once its last reader has run ([`Storage::release_lent`]), so that memory
    /// the lender no longer needs (a saved activation during a backward pass) is freed while
    /// the call goes on. Ignored for kiln's own storages.
    pub(crate) fn lent_for_one_call(mut self) -> Storage {
        if self.foreign {
            let owner = self.buf.get_mut().block.take_owner();
            self.lent = Some(parking_lot::Mutex::new(owner));
        }
        self
    }

    /// True for memory lent for one call ([`Storage::lent_for_one_call`]).
    pub fn is_lent(&self) -> bool {
        self.lent.is_some()
    }

    /// True once the call a storage was lent to has let go of its owner
    /// ([`Storage::release_lent`]): its memory may be gone.
    pub fn is_released(&self) -> bool {
        self.lent.as_ref().is_some_and(|l| l.lock().is_none())
    }

    /// Drops the owner of lent memory ([`Storage::lent_for_one_call`]); nothing for other
    /// storages. The memory may be freed at once (the lender's last reference gone).
    ///
    /// # Safety
    /// Nothing reads or writes this storage's memory afterwards, through any tensor: only
    /// the call it was lent to may release it, once that call's last reader of it has run
    /// and when none of the call's results views it.
    pub unsafe fn release_lent(&self) {
        if let Some(l) = &self.lent {
            let owner = l.lock().take();
            drop(owner);
        }
    }

    /// The version counter: bumped by every in-place write (for autograd's checks).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Increments the version counter.
    pub(crate) fn bump_version(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// The address of the first element (for identity comparisons and lock ordering).
    pub(crate) fn addr(&self) -> usize {
        self.buf.data_ptr() as usize
    }

    /// The address of the first element (for generated code; see
    /// [`CpuTensor::data_ptr`](crate::CpuTensor::data_ptr)).
    pub(crate) fn elements_ptr(&self) -> *mut u8 {
        // SAFETY: `block` is set at construction and never changes, so reading the
        // pointer without the lock races with no writer.
        unsafe { (*self.buf.data_ptr()).block.as_ptr() }
    }

    /// A shared guard over the elements (recursive: a thread may hold several).
    pub(crate) fn guard(&self) -> RecursiveRwLockReadGuard<'_, Buf> {
        self.buf.read()
    }

    /// The exclusive guard over the elements.
    pub(crate) fn guard_mut(&self) -> RecursiveRwLockWriteGuard<'_, Buf> {
        self.buf.write()
    }

    /// Shared, typed access to all elements (blocks in-place writers while held).
    pub fn read<T: Element>(
        &self,
    ) -> Result<MappedRecursiveRwLockReadGuard<'_, [T]>, RuntimeError> {
        self.expect::<T>()?;
        Ok(RecursiveRwLockReadGuard::map(self.buf.read(), |b| {
            b.slice::<T>()
        }))
    }

    /// Exclusive, typed access to all elements; bumps the version counter.
    pub fn write<T: Element>(
        &self,
    ) -> Result<MappedRecursiveRwLockWriteGuard<'_, [T]>, RuntimeError> {
        self.expect::<T>()?;
        let g = self.buf.write();
        self.bump_version();
        Ok(RecursiveRwLockWriteGuard::map(g, |b| b.slice_mut::<T>()))
    }

    fn expect<T: Element>(&self) -> Result<(), RuntimeError> {
        if T::DTYPE == self.dtype {
            Ok(())
        } else {
            Err(RuntimeError::DTypeMismatch {
                expected: T::DTYPE,
                got: self.dtype,
            })
        }
    }
}
