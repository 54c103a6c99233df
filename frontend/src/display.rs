//! `Display` for tensors in PyTorch's style: `tensor([[ 0.5000, -1.2500], ...])`,
//! 4 decimals (or `1.` when every value is integral, or scientific notation when the
//! range is wide), right-aligned columns, `...` summaries past 1000 elements, and a
//! `dtype=` suffix for dtypes other than the defaults (f32, i64, bool).

use crate::Tensor;
use kiln_ir::DType;
use std::fmt;

const SUMMARY_THRESHOLD: usize = 1000;
const EDGE_ITEMS: usize = 3;
const LINE_WIDTH: usize = 80;

enum FloatMode {
    Int,
    Fixed,
    Sci,
}

fn sci(v: f64) -> String {
    let s = format!("{v:.4e}");
    match s.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = e.strip_prefix('-').map(|d| ('-', d)).unwrap_or(('+', e));
            format!("{m}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

struct Formatter {
    dtype: DType,
    mode: FloatMode,
    width: usize,
}

impl Formatter {
    fn new(dtype: DType, values: &[f64]) -> Formatter {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let mode = if !dtype.is_float()
            || finite.iter().all(|v| v.fract() == 0.0) && finite.iter().all(|v| v.abs() < 1e8)
        {
            FloatMode::Int
        } else {
            let nonzero: Vec<f64> = finite
                .iter()
                .map(|v| v.abs())
                .filter(|&v| v > 0.0)
                .collect();
            let max = nonzero.iter().cloned().fold(0.0, f64::max);
            let min = nonzero.iter().cloned().fold(f64::INFINITY, f64::min);
            if max > 1e8 || min < 1e-4 || (min > 0.0 && max / min > 1000.0) {
                FloatMode::Sci
            } else {
                FloatMode::Fixed
            }
        };
        let mut f = Formatter {
            dtype,
            mode,
            width: 0,
        };
        f.width = values
            .iter()
            .map(|&v| f.raw(v).chars().count())
            .max()
            .unwrap_or(0);
        f
    }

    fn raw(&self, v: f64) -> String {
        match self.dtype {
            DType::Bool => if v != 0.0 { "True" } else { "False" }.to_string(),
            DType::I32 | DType::I64 => format!("{}", v as i64),
            _ if v.is_nan() => "nan".into(),
            _ if v.is_infinite() => if v > 0.0 { "inf" } else { "-inf" }.into(),
            _ => match self.mode {
                FloatMode::Int => format!("{v:.0}."),
                FloatMode::Fixed => format!("{v:.4}"),
                FloatMode::Sci => sci(v),
            },
        }
    }

    fn cell(&self, v: f64) -> String {
        format!("{:>w$}", self.raw(v), w = self.width)
    }
}

/// The indices of a dim of size `n` that are shown (all, or the edges when summarising).
fn shown(n: usize, summarize: bool) -> Vec<Option<usize>> {
    if summarize && n > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS)
            .map(Some)
            .chain([None])
            .chain((n - EDGE_ITEMS..n).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    }
}

/// What every level of the nested rendering shares.
struct Printer<'a> {
    fmt: &'a Formatter,
    data: &'a [f64],
    summarize: bool,
}

impl Printer<'_> {
    /// Renders the sub-tensor at `base` with the given (row-major) shape and strides.
    fn render(
        &self,
        out: &mut String,
        shape: &[usize],
        strides: &[usize],
        base: usize,
        indent: usize,
    ) {
        out.push('[');
        let dims = shown(shape[0], self.summarize);
        if shape.len() == 1 {
            let per_line = (LINE_WIDTH.saturating_sub(indent) / (self.fmt.width + 2)).max(1);
            for (k, i) in dims.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                    if k % per_line == 0 {
                        out.push('\n');
                        out.push_str(&" ".repeat(indent + 1));
                    } else {
                        out.push(' ');
                    }
                }
                match i {
                    Some(i) => out.push_str(&self.fmt.cell(self.data[base + i * strides[0]])),
                    None => out.push_str(" ..."),
                }
            }
        } else {
            let blank_lines = shape.len() - 1;
            for (k, i) in dims.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                    out.push_str(&"\n".repeat(blank_lines));
                    out.push_str(&" ".repeat(indent + 1));
                }
                match i {
                    Some(i) => self.render(
                        out,
                        &shape[1..],
                        &strides[1..],
                        base + i * strides[0],
                        indent + 1,
                    ),
                    None => out.push_str("..."),
                }
            }
        }
        out.push(']');
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let data = match self.to_vec_f64() {
            Ok(d) => d,
            // under `fullgraph`, printing a traced tensor cannot break the graph
            Err(e) => return write!(f, "tensor(<traced {}: {e}>)", self.tensor_type()),
        };
        let shape = self.shape();
        let summarize = data.len() > SUMMARY_THRESHOLD;
        let mut strides = vec![1usize; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1];
        }
        let mut out = String::from("tensor(");
        let mut suffixes = Vec::new();
        if data.is_empty() {
            out.push_str("[]");
            if shape != [0] {
                let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
                suffixes.push(format!("size=({})", dims.join(", ")));
            }
        } else {
            // Only the elements shown decide the format, as in PyTorch.
            let fmt_values: Vec<f64> = if summarize {
                data.iter()
                    .copied()
                    .take(EDGE_ITEMS)
                    .chain(data.iter().rev().copied().take(EDGE_ITEMS))
                    .collect()
            } else {
                data.clone()
            };
            let fmtr = Formatter::new(self.dtype(), &fmt_values);
            if shape.is_empty() {
                out.push_str(fmtr.raw(data[0]).as_str());
            } else {
                let fmtr = if summarize {
                    fmtr
                } else {
                    Formatter::new(self.dtype(), &data)
                };
                let p = Printer {
                    fmt: &fmtr,
                    data: &data,
                    summarize,
                };
                p.render(&mut out, shape, &strides, 0, "tensor(".len());
            }
        }
        if !matches!(self.dtype(), DType::F32 | DType::I64 | DType::Bool) {
            suffixes.push(format!("dtype={}", self.dtype()));
        }
        for s in suffixes {
            out.push_str(", ");
            out.push_str(&s);
        }
        out.push(')');
        f.write_str(&out)
    }
}
