//! Strided indexing shared by every op: row-major strides, broadcasting strides (0 on
//! stretched dims), a row-major walk over an output shape that tracks the matching offset
//! into each operand, and materialising a strided view as a row-major vector.

/// Row-major (C-contiguous) strides of `shape`, in elements.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![0; shape.len()];
    let mut acc = 1usize;
    for i in (0..shape.len()).rev() {
        s[i] = acc;
        acc *= shape[i];
    }
    s
}

/// The element count of `shape` (1 for a 0-d shape).
pub(crate) fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Strides for reading a row-major tensor of shape `from` as if it had shape `to`
/// (NumPy broadcasting: right-aligned, missing leading dims and size-1 dims get stride 0).
/// The caller guarantees that `from` broadcasts to `to`.
pub(crate) fn broadcast_strides(from: &[usize], to: &[usize]) -> Vec<usize> {
    let own = strides(from);
    let lead = to.len() - from.len();
    (0..to.len())
        .map(|i| {
            if i < lead || from[i - lead] == 1 {
                0
            } else {
                own[i - lead]
            }
        })
        .collect()
}

/// Calls `f` once per element of `shape`, in row-major order, with the offset of that
/// element in each of the `N` strided operands (`strides[k][d]` is operand k's stride for
/// output dim d). Does nothing for an empty shape; calls once for a 0-d shape.
pub(crate) fn for_each_offsets<const N: usize>(
    shape: &[usize],
    strides: [&[usize]; N],
    mut f: impl FnMut([usize; N]),
) {
    if shape.contains(&0) {
        return;
    }
    let rank = shape.len();
    let mut idx = vec![0usize; rank];
    let mut off = [0usize; N];
    loop {
        f(off);
        let mut d = rank;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            for k in 0..N {
                off[k] += strides[k][d];
            }
            if idx[d] < shape[d] {
                break;
            }
            for k in 0..N {
                off[k] -= strides[k][d] * shape[d];
            }
            idx[d] = 0;
        }
    }
}

/// Materialises the view of `data` with the given `shape`, per-dim `strides` and base
/// `offset` as a row-major vector.
pub(crate) fn gather(data: &[f64], shape: &[usize], strides: &[usize], offset: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(numel(shape));
    for_each_offsets(shape, [strides], |[o]| out.push(data[offset + o]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_strides() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(strides(&[]), Vec::<usize>::new());
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
    }

    #[test]
    fn transposed_gather() {
        // [[0,1,2],[3,4,5]] read transposed.
        let d: Vec<f64> = (0..6).map(f64::from).collect();
        assert_eq!(
            gather(&d, &[3, 2], &[1, 3], 0),
            vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
        );
        assert_eq!(gather(&d, &[], &[], 4), vec![4.0]);
        assert!(gather(&d, &[0, 2], &[1, 1], 0).is_empty());
    }
}
