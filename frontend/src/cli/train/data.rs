//! The training data of `kiln train`: a CSV of feature columns then an integer label, and
//! the order its rows are drawn in (file order, or a seeded shuffle per epoch).

use kiln::nn::derive_seed;
use kiln::{Result as KResult, Tensor};
use std::path::Path;

/// Rows of features (f32, as written in the file, unscaled) and their labels.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// row-major `[rows, features]`
    pub features: Vec<f32>,
    /// one class index per row
    pub labels: Vec<i64>,
    /// columns before the label
    pub num_features: usize,
}

impl Dataset {
    /// Parses CSV text: lines starting with `#` and empty lines are skipped, then exactly
    /// one header row; every other line is `f1,...,fk,label` with the same `k`, the label
    /// a non-negative integer. Errors name the file and the line.
    pub fn parse(text: &str, file: &Path) -> Result<Dataset, String> {
        let at = |line: usize, why: String| format!("{}:{line}: {why}", file.display());
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        if lines.next().is_none() {
            return Err(format!(
                "{}: no header row and no data (expected a header row, then rows of \
                 features followed by an integer label)",
                file.display()
            ));
        }
        let mut data = Dataset {
            features: Vec::new(),
            labels: Vec::new(),
            num_features: 0,
        };
        for (n, line) in lines {
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            if cells.len() < 2 {
                return Err(at(n, "a row needs at least one feature and a label".into()));
            }
            let k = cells.len() - 1;
            if data.labels.is_empty() {
                data.num_features = k;
            } else if k != data.num_features {
                return Err(at(
                    n,
                    format!(
                        "{} columns, but the first data row has {}",
                        k + 1,
                        data.num_features + 1
                    ),
                ));
            }
            for (c, cell) in cells[..k].iter().enumerate() {
                let v: f32 = cell
                    .parse()
                    .map_err(|_| at(n, format!("column {}: `{cell}` is not a number", c + 1)))?;
                data.features.push(v);
            }
            let label = cells[k];
            match label.parse::<i64>() {
                Ok(l) if l >= 0 => data.labels.push(l),
                _ => {
                    return Err(at(
                        n,
                        format!("the label `{label}` is not a non-negative integer"),
                    ))
                }
            }
        }
        if data.labels.is_empty() {
            return Err(format!("{}: no data rows after the header", file.display()));
        }
        Ok(data)
    }

    /// Reads and parses `path`.
    pub fn read(path: &Path) -> Result<Dataset, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Dataset::parse(&text, path)
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// The number of classes the labels need (the largest label + 1).
    pub fn classes(&self) -> usize {
        self.labels.iter().max().map_or(0, |&m| m as usize + 1)
    }

    /// The rows `idx` as a features tensor `[len, features]` and a labels tensor `[len]`.
    pub fn gather(&self, idx: &[usize]) -> KResult<(Tensor, Tensor)> {
        let f = self.num_features;
        let mut x = Vec::with_capacity(idx.len() * f);
        for &i in idx {
            x.extend_from_slice(&self.features[i * f..(i + 1) * f]);
        }
        let y: Vec<i64> = idx.iter().map(|&i| self.labels[i]).collect();
        Ok((
            Tensor::from_vec(x, &[idx.len(), f])?,
            Tensor::from_vec(y, &[idx.len()])?,
        ))
    }

    /// Every row, in file order.
    pub fn all(&self) -> KResult<(Tensor, Tensor)> {
        Tensor::from_vec(self.features.clone(), &[self.len(), self.num_features])
            .and_then(|x| Ok((x, Tensor::from_vec(self.labels.clone(), &[self.len()])?)))
    }
}

/// The order rows are drawn in: one stream through the data, epoch after epoch, cut into
/// batches of a fixed size (a batch that reaches the end of an epoch continues at the
/// start of the next, so every batch is full). Without a shuffle seed every epoch is file
/// order; with one, epoch `e` is a permutation drawn from stream `e` of the seed.
pub struct BatchOrder {
    rows: usize,
    shuffle: Option<u64>,
    /// the current epoch's order and its number
    epoch: Option<(u64, Vec<usize>)>,
}

impl BatchOrder {
    /// The order over `rows` rows (at least one).
    pub fn new(rows: usize, shuffle: Option<u64>) -> BatchOrder {
        BatchOrder {
            rows,
            shuffle,
            epoch: None,
        }
    }

    /// The row indices of batch `step` of size `batch`.
    pub fn batch(&mut self, step: usize, batch: usize) -> Vec<usize> {
        (0..batch)
            .map(|j| {
                let pos = (step * batch + j) as u64;
                self.row(pos / self.rows as u64, (pos % self.rows as u64) as usize)
            })
            .collect()
    }

    /// Row `i` of epoch `e`'s order.
    fn row(&mut self, e: u64, i: usize) -> usize {
        let Some(seed) = self.shuffle else {
            return i;
        };
        if self.epoch.as_ref().is_none_or(|(n, _)| *n != e) {
            self.epoch = Some((e, permutation(self.rows, derive_seed(seed, e))));
        }
        self.epoch.as_ref().map_or(i, |(_, p)| p[i])
    }
}

/// A Fisher-Yates permutation of `0..n` driven by SplitMix64 from `seed`.
fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    let mut state = seed;
    for i in (1..n).rev() {
        state = derive_seed(state, i as u64);
        // a multiply-shift draw in [0, i]: unbiased enough for a data order
        let j = ((state >> 32) * (i as u64 + 1)) >> 32;
        p.swap(i, j as usize);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_one_header_row_are_skipped() {
        let text = "# a comment\n\nx,y,label\n# another\n1,2,0\n3.5,-4,2\n";
        let d = Dataset::parse(text, Path::new("t.csv")).unwrap();
        assert_eq!(d.num_features, 2);
        assert_eq!(d.features, vec![1.0, 2.0, 3.5, -4.0]);
        assert_eq!(d.labels, vec![0, 2]);
        assert_eq!(d.classes(), 3);
    }

    #[test]
    fn bad_rows_name_the_line() {
        let e = Dataset::parse("h\n1,2,0\n1,0\n", Path::new("t.csv")).unwrap_err();
        assert!(e.contains("t.csv:3") && e.contains("2 columns"), "{e}");
        let e = Dataset::parse("h\n1,x,0\n", Path::new("t.csv")).unwrap_err();
        assert!(e.contains("t.csv:2") && e.contains("`x`"), "{e}");
        let e = Dataset::parse("h\n1,2,1.5\n", Path::new("t.csv")).unwrap_err();
        assert!(e.contains("label `1.5`"), "{e}");
        let e = Dataset::parse("# only\nh\n", Path::new("t.csv")).unwrap_err();
        assert!(e.contains("no data rows"), "{e}");
    }

    #[test]
    fn batches_wrap_in_file_order_and_shuffles_are_permutations_per_epoch() {
        let mut o = BatchOrder::new(5, None);
        assert_eq!(o.batch(0, 3), vec![0, 1, 2]);
        assert_eq!(o.batch(1, 3), vec![3, 4, 0]);
        assert_eq!(o.batch(2, 3), vec![1, 2, 3]);
        let mut s = BatchOrder::new(7, Some(9));
        let e0: Vec<usize> = s.batch(0, 7);
        let e1: Vec<usize> = s.batch(1, 7);
        let mut sorted = e0.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..7).collect::<Vec<_>>());
        assert_ne!(e0, e1, "each epoch is shuffled again");
        assert_eq!(BatchOrder::new(7, Some(9)).batch(1, 7), e1, "deterministic");
    }
}
