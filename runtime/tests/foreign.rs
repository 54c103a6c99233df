//! Tensors over memory another library owns (`CpuTensor::from_foreign`, what the PyTorch
//! backend hands kiln): read in place with their strides and offset, the owner kept alive
//! exactly as long as the storage, nothing given to kiln's allocator, bad layouts rejected.

use kiln_ir::DType;
use kiln_runtime::{allocator_stats, CpuTensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Owns a buffer and counts its drops.
struct Owner {
    data: Vec<f32>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn owner(n: usize) -> (Box<Owner>, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    let data = (0..n).map(|i| i as f32).collect();
    let o = Box::new(Owner {
        data,
        drops: drops.clone(),
    });
    (o, drops)
}

#[test]
fn foreign_memory_is_read_in_place_and_released_with_the_last_view() {
    let (o, drops) = owner(12);
    let ptr = o.data.as_ptr() as *mut u8;
    let before = allocator_stats().allocated_bytes;
    // a transposed [3, 4] view of 12 elements, offset 0: element [i, j] at j*3 + i
    // SAFETY: the buffer lives in `o`, which the storage owns; nothing writes it.
    let t =
        unsafe { CpuTensor::from_foreign(ptr, DType::F32, 12, &[3, 4], &[1, 3], 0, o) }.unwrap();
    assert_eq!(allocator_stats().allocated_bytes, before, "no kiln memory");
    assert_eq!(t.data_ptr(), ptr, "no copy");
    let expect: Vec<f32> = (0..3)
        .flat_map(|i| (0..4).map(move |j| (j * 3 + i) as f32))
        .collect();
    assert_eq!(t.to_vec::<f32>().unwrap(), expect);
    // an offset view of one row
    let row = t.with_layout(&[4], &[3], 2).unwrap();
    assert_eq!(row.to_vec::<f32>().unwrap(), vec![2.0, 5.0, 8.0, 11.0]);
    drop(t);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "a view still holds the owner"
    );
    drop(row);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "released with the last view"
    );
}

#[test]
fn foreign_layouts_outside_the_buffer_and_bad_pointers_are_errors() {
    let (o, drops) = owner(6);
    let ptr = o.data.as_ptr() as *mut u8;
    // [2, 4] contiguous needs 8 elements
    let e = unsafe { CpuTensor::from_foreign(ptr, DType::F32, 6, &[2, 4], &[4, 1], 0, o) }
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(msg.contains("from_foreign"), "{msg}");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the owner is released on error"
    );

    let (o, _) = owner(6);
    let misaligned = unsafe { (o.data.as_ptr() as *mut u8).add(1) };
    let e = unsafe { CpuTensor::from_foreign(misaligned, DType::F32, 4, &[4], &[1], 0, o) };
    assert!(e.err().unwrap().to_string().contains("aligned"));

    let (o, _) = owner(1);
    let e =
        unsafe { CpuTensor::from_foreign(std::ptr::null_mut(), DType::F32, 4, &[4], &[1], 0, o) };
    assert!(e.err().unwrap().to_string().contains("null"));

    // an empty tensor may have a null pointer (PyTorch's empty tensors do)
    let (o, _) = owner(0);
    let t = unsafe {
        CpuTensor::from_foreign(std::ptr::null_mut(), DType::F32, 0, &[0, 3], &[3, 1], 0, o)
    }
    .unwrap();
    assert_eq!(t.numel(), 0);
}
