//! A process-wide pool of 16-byte vector constants (four equal 32-bit lanes) that generated
//! code reads through one base register.
//!
//! Why: Cranelift's x86 backend does not fold a `vconst` into the instruction that uses it,
//! so every vector constant costs a separate `vmovups (%rip)` (about half the instructions
//! of a polynomial). A `load` with the `readonly`, `notrap` and `can_move` flags is pure,
//! and when it has one use the backend sinks it into that instruction's memory operand
//! (`vfmadd213ps 0x30(%r15), %xmm1, %xmm2`). The pool gives such loads a stable address:
//! one leaked, 16-byte aligned allocation that never moves, entries deduplicated by bits
//! and never removed, so every compiled kernel can keep using the offsets it was given.
//! When the pool is full the emitters fall back to `vconst`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Entries the pool can hold (16 bytes each: 256 KiB).
const CAPACITY: usize = 16 * 1024;

/// One pool entry: four 32-bit lanes, 16-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Entry([u32; 4]);

struct Pool {
    /// the first entry of the leaked allocation
    base: *mut Entry,
    /// entries in use
    len: usize,
    /// bits → entry index
    index: HashMap<u32, usize>,
}

// SAFETY: `base` points to a leaked allocation that is only written under the mutex, at
// indices no reader has been given yet.
unsafe impl Send for Pool {}

fn pool() -> &'static Mutex<Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let entries: &'static mut [Entry] =
            Box::leak(vec![Entry([0; 4]); CAPACITY].into_boxed_slice());
        let base = entries.as_mut_ptr();
        // entry 0 holds the pool's own address (see `base_address`)
        let addr = (base as u64).to_le_bytes();
        let lo = u32::from_le_bytes([addr[0], addr[1], addr[2], addr[3]]);
        let hi = u32::from_le_bytes([addr[4], addr[5], addr[6], addr[7]]);
        entries[0] = Entry([lo, hi, 0, 0]);
        Mutex::new(Pool {
            base,
            len: 1,
            index: HashMap::new(),
        })
    })
}

/// The pool's base address. Its first 8 bytes hold the address itself: generated code
/// loads the base from there once per function, because an `iconst` base would be
/// re-materialised (a 10-byte `movabs`) at every use, where a loaded value stays in one
/// register.
pub(crate) fn base_address() -> i64 {
    let p = pool().lock().unwrap_or_else(|e| e.into_inner());
    p.base as i64
}

/// The byte offset from [`base_address`] of an entry holding `bits` in all four lanes,
/// adding it if needed; `None` when the pool is full.
pub(crate) fn offset_of(bits: u32) -> Option<i32> {
    let mut p = pool().lock().unwrap_or_else(|e| e.into_inner());
    let i = match p.index.get(&bits) {
        Some(&i) => i,
        None => {
            if p.len == CAPACITY {
                return None;
            }
            let i = p.len;
            // SAFETY: `i < CAPACITY`, inside the allocation; no generated code has this
            // entry's offset yet, so nothing reads it while it is written.
            unsafe { p.base.add(i).write(Entry([bits; 4])) };
            p.len += 1;
            p.index.insert(bits, i);
            i
        }
    };
    i32::try_from(i * std::mem::size_of::<Entry>()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_deduplicated_aligned_and_hold_the_bits() {
        let a = offset_of(0x3f80_0000).expect("room");
        let b = offset_of(0x4000_0000).expect("room");
        assert_eq!(offset_of(0x3f80_0000), Some(a));
        assert_ne!(a, b);
        let base = base_address();
        assert_eq!(base % 16, 0);
        assert_eq!(a % 16, 0);
        // SAFETY: the offset was handed out by the pool and the entry is initialised.
        let lanes = unsafe { *((base + i64::from(b)) as *const [u32; 4]) };
        assert_eq!(lanes, [0x4000_0000; 4]);
        // SAFETY: entry 0 is initialised at creation.
        let own = unsafe { *(base as *const i64) };
        assert_eq!(own, base);
    }
}
