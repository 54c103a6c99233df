//! Dimensions (constant or symbolic), shapes and broadcasting.

use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;

/// One dimension of a shape: a known size or a named symbol (`B`, `T`) bound at run time.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// A size known at compile time.
    Const(usize),
    /// A size named by a symbol; equal symbols are equal sizes.
    Sym(Arc<str>),
}

impl Dim {
    /// A symbolic dim with the given name.
    pub fn sym(name: &str) -> Dim {
        Dim::Sym(Arc::from(name))
    }

    /// The constant size, if known.
    pub fn as_const(&self) -> Option<usize> {
        match self {
            Dim::Const(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }

    /// True when this dim is the constant 1.
    pub fn is_one(&self) -> bool {
        *self == Dim::Const(1)
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::Const(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Const(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// A tensor shape: its dims, outermost first (rank ≤ 6 is stored inline).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Shape(pub SmallVec<[Dim; 6]>);

impl Shape {
    /// The shape of a 0-d (scalar) tensor.
    pub fn scalar() -> Shape {
        Shape(SmallVec::new())
    }

    /// A shape of constant dims.
    pub fn of(dims: &[usize]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Const(d)).collect())
    }

    /// The number of dims.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The dims.
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// The constant sizes, or `None` if any dim is symbolic.
    pub fn as_consts(&self) -> Option<SmallVec<[usize; 6]>> {
        self.0.iter().map(Dim::as_const).collect()
    }

    /// The element count, or `None` if any dim is symbolic.
    pub fn numel(&self) -> Option<usize> {
        self.as_consts().map(|d| d.iter().product())
    }

    /// True when no dim is symbolic.
    pub fn is_static(&self) -> bool {
        self.0.iter().all(|d| d.as_const().is_some())
    }

    /// The symbols that occur in this shape, in order of first appearance.
    pub fn symbols(&self) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = Vec::new();
        for d in &self.0 {
            if let Dim::Sym(s) = d {
                if !out.contains(s) {
                    out.push(s.clone());
                }
            }
        }
        out
    }

    /// Normalises a possibly negative dim index (`-1` is the last dim) against this rank.
    pub fn normalize_dim(&self, dim: i64) -> Option<usize> {
        normalize_dim(dim, self.rank())
    }

    /// True when two shapes surely have the same element count: equal constant products
    /// and the same multiset of symbols.
    pub fn same_numel(&self, other: &Shape) -> bool {
        let split = |s: &Shape| {
            let mut c = 1usize;
            let mut syms: Vec<Arc<str>> = Vec::new();
            for d in &s.0 {
                match d {
                    Dim::Const(n) => c = c.saturating_mul(*n),
                    Dim::Sym(x) => syms.push(x.clone()),
                }
            }
            syms.sort();
            (c, syms)
        };
        let (a, sa) = split(self);
        let (b, sb) = split(other);
        // A zero-sized tensor reshapes to any zero-sized tensor.
        a == b && (sa == sb || a == 0)
    }
}

/// Normalises a possibly negative dim index against `rank`; `None` if out of range.
pub fn normalize_dim(dim: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let d = if dim < 0 { dim + r } else { dim };
    (0..r).contains(&d).then_some(d as usize)
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Shape {
        Shape::of(&d)
    }
}

impl FromIterator<Dim> for Shape {
    fn from_iter<I: IntoIterator<Item = Dim>>(iter: I) -> Shape {
        Shape(iter.into_iter().collect())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Broadcasts two shapes as NumPy does (align right; a dim of 1 stretches).
/// A symbol only matches itself or 1. Returns `None` when they do not broadcast.
pub fn broadcast(a: &Shape, b: &Shape) -> Option<Shape> {
    let rank = a.rank().max(b.rank());
    let mut out: SmallVec<[Dim; 6]> = SmallVec::with_capacity(rank);
    for i in 0..rank {
        let da = (i + a.rank()).checked_sub(rank).map(|j| &a.0[j]);
        let db = (i + b.rank()).checked_sub(rank).map(|j| &b.0[j]);
        let d = match (da, db) {
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(x), Some(y)) if x.is_one() => y.clone(),
            (Some(x), Some(y)) if y.is_one() => x.clone(),
            _ => return None,
        };
        out.push(d);
    }
    Some(Shape(out))
}

/// True when `from` broadcasts to exactly `to` (as `expand` and in-place ops require).
pub fn broadcasts_to(from: &Shape, to: &Shape) -> bool {
    from.rank() <= to.rank() && broadcast(from, to).as_ref() == Some(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_numpy_rules() {
        let a = Shape::of(&[3, 1, 5]);
        let b = Shape::of(&[4, 5]);
        assert_eq!(broadcast(&a, &b).unwrap(), Shape::of(&[3, 4, 5]));
        assert!(broadcast(&Shape::of(&[3]), &Shape::of(&[4])).is_none());
        let s: Shape = [Dim::sym("B"), Dim::Const(1)].into_iter().collect();
        let t = Shape::of(&[7]);
        assert_eq!(broadcast(&s, &t).unwrap().to_string(), "[B,7]");
    }

    #[test]
    fn symbolic_numel() {
        let a: Shape = [Dim::sym("B"), Dim::Const(6)].into_iter().collect();
        let b: Shape = [Dim::Const(2), Dim::sym("B"), Dim::Const(3)]
            .into_iter()
            .collect();
        assert!(a.same_numel(&b));
        assert!(!a.same_numel(&Shape::of(&[12])));
    }
}
