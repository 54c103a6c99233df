//! The caching allocator reuses freed blocks and reports its counters. One test function:
//! the counters are global, so nothing else in this binary may allocate concurrently.

use kiln_ir::{DType, Op, Scalar, Shape};
use kiln_runtime::{allocator_stats, empty_cache, execute, reset_peak_stats, CpuTensor};

fn full(n: usize) -> CpuTensor {
    execute(
        &Op::Full {
            shape: Shape::of(&[n]),
            value: Scalar::Float(1.0),
            dtype: DType::F32,
        },
        &[],
    )
    .unwrap()
}

#[test]
fn blocks_are_cached_and_reused() {
    empty_cache();
    let s0 = allocator_stats();
    assert_eq!(s0.cached_blocks, 0);
    assert_eq!(s0.reserved_bytes, s0.allocated_bytes);

    // Small: 1000 f32 = 4000 bytes -> the 4096-byte class.
    let a = full(1000);
    let s1 = allocator_stats();
    assert_eq!(s1.allocated_bytes - s0.allocated_bytes, 4096);
    assert_eq!(s1.alloc_calls - s0.alloc_calls, 1);
    let addr = a.storage().read::<f32>().unwrap().as_ptr() as usize;
    assert_eq!(addr % 64, 0, "64-byte aligned");
    drop(a);
    let s2 = allocator_stats();
    assert_eq!(s2.allocated_bytes, s0.allocated_bytes);
    assert_eq!(s2.reserved_bytes, s1.reserved_bytes);
    assert_eq!(s2.cached_blocks, 1);
    // Same class (900 f32 = 3600 bytes): served from the cache, same address.
    let b = full(900);
    let s3 = allocator_stats();
    assert_eq!(s3.cache_hits - s2.cache_hits, 1);
    assert_eq!(s3.reserved_bytes, s2.reserved_bytes);
    assert_eq!(b.storage().read::<f32>().unwrap().as_ptr() as usize, addr);
    drop(b);

    // Large: 3 MiB rounds to 4 MiB; a later 3.5 MiB request reuses it.
    let big = full(3 << 18);
    let s4 = allocator_stats();
    assert_eq!(s4.allocated_bytes - s3.allocated_bytes + 4096, 4 << 20);
    drop(big);
    let big2 = full(7 << 17);
    let s5 = allocator_stats();
    assert_eq!(s5.cache_hits - s4.cache_hits, 1);
    assert_eq!(s5.reserved_bytes, s4.reserved_bytes);
    drop(big2);

    // Views and clones do not allocate.
    let x = full(64);
    let calls = allocator_stats().alloc_calls;
    let _v = x.with_layout(&[8, 8], &[8, 1], 0).unwrap();
    let _c = x.clone();
    assert_eq!(allocator_stats().alloc_calls, calls);
    drop((x, _v, _c));

    // The peak: the most bytes allocated since the last reset, reset to what is live.
    reset_peak_stats();
    let live = allocator_stats().allocated_bytes;
    assert_eq!(allocator_stats().peak_allocated_bytes, live);
    let p1 = full(1 << 16); // 256 KiB
    let p2 = full(1000); // 4096
    drop(p1);
    let p3 = full(10); // 64, from a new class
    let s = allocator_stats();
    assert_eq!(s.peak_allocated_bytes, live + (256 << 10) + 4096);
    assert_eq!(s.allocated_bytes, live + 4096 + 64);
    reset_peak_stats();
    assert_eq!(allocator_stats().peak_allocated_bytes, live + 4096 + 64);
    drop((p2, p3));
    assert_eq!(allocator_stats().peak_allocated_bytes, live + 4096 + 64);

    // Zero-size tensors allocate nothing.
    let calls = allocator_stats().alloc_calls;
    let _e = full(0);
    assert_eq!(allocator_stats().alloc_calls, calls);

    empty_cache();
    let s6 = allocator_stats();
    assert_eq!(s6.cached_blocks, 0);
    assert_eq!(s6.reserved_bytes, s6.allocated_bytes);
}
