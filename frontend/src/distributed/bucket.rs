//! DDP's bucket assignment (PyTorch's `compute_bucket_assignment_by_size`): parameters in
//! reverse order (about the order backward produces their gradients), one open bucket per
//! dtype, a bucket closed once it holds at least its limit: 1 MiB for the first, so
//! communication starts early, the cap (25 MiB) after.

use crate::DType;

/// One bucket: the parameters whose gradients are all-reduced together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketInfo {
    /// the bucket's number, in the order buckets are reduced
    pub index: usize,
    /// the parameters' positions in the model's parameter list, in bucket order
    pub params: Vec<usize>,
    /// the parameters' names
    pub names: Vec<String>,
    /// the gradients' element type
    pub dtype: DType,
    /// bytes of gradients
    pub bytes: usize,
}

/// Buckets for parameters of `sizes` (bytes) and `dtypes`, filled in reverse parameter
/// order; `first_bytes` limits the first bucket of each dtype, `cap_bytes` the others.
/// Returned in the order they fill (by their first parameter in reverse order).
pub fn assign_buckets(
    names: &[String],
    sizes: &[usize],
    dtypes: &[DType],
    first_bytes: usize,
    cap_bytes: usize,
) -> Vec<BucketInfo> {
    struct Open {
        params: Vec<usize>,
        bytes: usize,
        limit: usize,
    }
    let mut open: Vec<(DType, Open)> = Vec::new();
    let mut closed: Vec<(DType, Vec<usize>, usize)> = Vec::new();
    for p in (0..sizes.len()).rev() {
        let dt = dtypes[p];
        let i = match open.iter().position(|(d, _)| *d == dt) {
            Some(i) => i,
            None => {
                open.push((
                    dt,
                    Open {
                        params: Vec::new(),
                        bytes: 0,
                        limit: first_bytes,
                    },
                ));
                open.len() - 1
            }
        };
        let b = &mut open[i].1;
        b.params.push(p);
        b.bytes += sizes[p];
        if b.bytes >= b.limit {
            closed.push((dt, std::mem::take(&mut b.params), b.bytes));
            b.bytes = 0;
            b.limit = cap_bytes;
        }
    }
    for (dt, b) in open {
        if !b.params.is_empty() {
            closed.push((dt, b.params, b.bytes));
        }
    }
    // in the order they fill: by the position of their first parameter in reverse order
    closed.sort_by_key(|(_, ps, _)| std::cmp::Reverse(ps[0]));
    closed
        .into_iter()
        .enumerate()
        .map(|(index, (dtype, params, bytes))| BucketInfo {
            index,
            names: params.iter().map(|&p| names[p].clone()).collect(),
            params,
            dtype,
            bytes,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("p{i}")).collect()
    }

    #[test]
    fn first_bucket_small_then_capped_in_reverse_order() {
        const MIB: usize = 1 << 20;
        // 6 parameters of 0.5, 0.75, 10, 20, 0.25, 0.6 MiB
        let sizes = [
            MIB / 2,
            3 * MIB / 4,
            10 * MIB,
            20 * MIB,
            MIB / 4,
            6 * MIB / 10,
        ];
        let b = assign_buckets(&names(6), &sizes, &[DType::F32; 6], MIB, 25 * MIB);
        let params: Vec<_> = b.iter().map(|b| b.params.clone()).collect();
        // reverse: p5 (0.6) + p4 (0.25) + p3 (20) closes the 1 MiB first bucket; then
        // p2 (10) + p1 (0.75) + p0 (0.5) stay under 25 MiB
        assert_eq!(params, vec![vec![5, 4, 3], vec![2, 1, 0]]);
        assert_eq!(b[0].bytes, sizes[5] + sizes[4] + sizes[3]);
        assert_eq!(b[1].names, ["p2", "p1", "p0"]);
        assert_eq!(b.iter().map(|b| b.index).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn dtypes_never_share_a_bucket() {
        let sizes = [8, 8, 8, 8];
        let dts = [DType::F32, DType::F64, DType::F32, DType::F64];
        let b = assign_buckets(&names(4), &sizes, &dts, 16, 16);
        let got: Vec<_> = b.iter().map(|b| (b.dtype, b.params.clone())).collect();
        assert_eq!(
            got,
            vec![(DType::F64, vec![3, 1]), (DType::F32, vec![2, 0])]
        );
    }

    #[test]
    fn everything_in_one_bucket_under_the_cap_and_none_for_no_parameters() {
        let b = assign_buckets(&names(3), &[4, 4, 4], &[DType::F32; 3], 100, 100);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].params, [2, 1, 0]);
        assert!(assign_buckets(&[], &[], &[], 1, 1).is_empty());
    }
}
