//! The constant pool: the data of literal tensors (`from_vec`), stored once per process and
//! shared by every op that holds it.
//!
//! A [`Constant`] is a handle into the pool. Equal data gives the same handle (the pool
//! interns by the values' bits), so comparing and hashing a constant is comparing and hashing
//! a pointer and a precomputed hash, and an [`crate::Op`] holding one stays cheap to compare,
//! hash and clone however large the literal. The pool holds weak references: data lives as
//! long as some op holds it.

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, Weak};

struct ConstData {
    values: Box<[f64]>,
    hash: u64,
}

/// The values of a literal tensor, row-major, interned in the process's constant pool.
#[derive(Clone)]
pub struct Constant(Arc<ConstData>);

fn hash_bits(values: &[f64]) -> u64 {
    // FNV-1a over the bits: deterministic across runs, no allocation
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in values {
        for b in v.to_bits().to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h ^ values.len() as u64
}

fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

type Pool = Mutex<HashMap<u64, Vec<Weak<ConstData>>>>;

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Constant {
    /// The pooled constant holding `values` (the existing one when equal data is pooled).
    pub fn new(values: Vec<f64>) -> Constant {
        let hash = hash_bits(&values);
        let mut pool = pool().lock().unwrap_or_else(|e| e.into_inner());
        let bucket = pool.entry(hash).or_default();
        bucket.retain(|w| w.strong_count() > 0);
        for w in bucket.iter() {
            if let Some(c) = w.upgrade() {
                if same_bits(&c.values, &values) {
                    return Constant(c);
                }
            }
        }
        let data = Arc::new(ConstData {
            values: values.into_boxed_slice(),
            hash,
        });
        bucket.push(Arc::downgrade(&data));
        Constant(data)
    }

    /// The values, row-major.
    pub fn values(&self) -> &[f64] {
        &self.0.values
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.0.values.len()
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.0.values.is_empty()
    }
}

impl From<Vec<f64>> for Constant {
    fn from(v: Vec<f64>) -> Constant {
        Constant::new(v)
    }
}

impl PartialEq for Constant {
    fn eq(&self, other: &Constant) -> bool {
        // the pool interns by bits, so equal data is the same allocation; the comparison
        // of bits covers data pooled before an earlier handle was dropped and re-created
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.hash == other.0.hash && same_bits(&self.0.values, &other.0.values))
    }
}

impl Eq for Constant {}

impl Hash for Constant {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash.hash(state);
    }
}

impl fmt::Debug for Constant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.values().iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_data_is_pooled_once() {
        let a = Constant::new(vec![1.0, f64::NAN, -0.0]);
        let b = Constant::new(vec![1.0, f64::NAN, -0.0]);
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, b);
        assert_ne!(a, Constant::new(vec![1.0, f64::NAN, 0.0]));
        assert_eq!(b.values().len(), 3);
    }
}
