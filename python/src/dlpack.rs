//! kiln tensors given to PyTorch without copying, as DLPack capsules (the legacy
//! `"dltensor"` capsule protocol `torch.from_dlpack` accepts): the capsule's
//! `DLManagedTensor` points into the kiln tensor's storage and owns a clone of the tensor,
//! dropped by the deleter PyTorch calls when its tensor dies (or by the capsule's destructor
//! when nobody adopted it).

use kiln::ir::DType;
use kiln::Tensor;
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_void, CStr};

/// `DLDevice` (DLPack 0.8).
#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

/// `DLManagedTensor`.
#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

/// What the managed tensor owns: the kiln tensor (its storage stays alive) and the shape
/// and strides arrays the `DLTensor` points to.
struct Context {
    _tensor: Tensor,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

const K_DL_CPU: i32 = 1;
const K_DL_INT: u8 = 0;
const K_DL_FLOAT: u8 = 2;
const K_DL_BFLOAT: u8 = 4;
const K_DL_BOOL: u8 = 6;

const DLTENSOR: &CStr = c"dltensor";

fn dl_dtype(d: DType) -> DlDataType {
    let (code, bits) = match d {
        DType::Bool => (K_DL_BOOL, 8),
        DType::I32 => (K_DL_INT, 32),
        DType::I64 => (K_DL_INT, 64),
        DType::F16 => (K_DL_FLOAT, 16),
        DType::BF16 => (K_DL_BFLOAT, 16),
        DType::F32 => (K_DL_FLOAT, 32),
        DType::F64 => (K_DL_FLOAT, 64),
    };
    DlDataType {
        code,
        bits,
        lanes: 1,
    }
}

/// Frees a managed tensor and what it owns (DLPack's deleter).
unsafe extern "C" fn delete_managed(m: *mut DlManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its context were made by `Box::into_raw` in `capsule`, and DLPack
    // calls the deleter exactly once.
    unsafe {
        let m = Box::from_raw(m);
        drop(Box::from_raw(m.manager_ctx as *mut Context));
    }
}

/// The capsule's destructor: frees the managed tensor if no consumer took it (a consumer
/// renames the capsule to `"used_dltensor"` and calls the deleter itself).
unsafe extern "C" fn destroy_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule, under the interpreter lock.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()) as *mut DlManagedTensor;
            delete_managed(m);
        }
    }
}

/// A DLPack capsule over `t` (a CPU tensor with data).
pub(crate) fn capsule(py: Python<'_>, t: Tensor) -> PyResult<Py<PyAny>> {
    let cpu = t.as_cpu().map_err(crate::to_py)?;
    let shape: Vec<i64> = cpu.shape().iter().map(|&n| n as i64).collect();
    let strides: Vec<i64> = cpu.strides().iter().map(|&s| s as i64).collect();
    let (data, dtype) = (cpu.data_ptr() as *mut c_void, dl_dtype(cpu.dtype()));
    let mut ctx = Box::new(Context {
        _tensor: t,
        shape,
        strides,
    });
    let managed = Box::new(DlManagedTensor {
        dl_tensor: DlTensor {
            data,
            device: DlDevice {
                device_type: K_DL_CPU,
                device_id: 0,
            },
            ndim: ctx.shape.len() as i32,
            dtype,
            shape: ctx.shape.as_mut_ptr(),
            strides: ctx.strides.as_mut_ptr(),
            byte_offset: 0,
        },
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(delete_managed),
    });
    let managed = Box::into_raw(managed);
    // SAFETY: `managed` is a valid pointer we own until the deleter runs.
    unsafe { (*managed).manager_ctx = Box::into_raw(ctx) as *mut c_void };
    // SAFETY: PyCapsule_New with a non-null pointer, a static name and a destructor.
    let obj = unsafe {
        ffi::PyCapsule_New(
            managed as *mut c_void,
            DLTENSOR.as_ptr(),
            Some(destroy_capsule),
        )
    };
    if obj.is_null() {
        // SAFETY: the capsule was not made, so we still own `managed`.
        unsafe { delete_managed(managed) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference returned by PyCapsule_New.
    Ok(unsafe { Bound::from_owned_ptr(py, obj) }.unbind())
}
