//! Convolutions in f64, straight from their definition (see [`crate::conv`]): a forward
//! convolution gathers, for each output element, the input under each kernel tap; a
//! transposed one scatters each input element through each tap. Sums accumulate in f64
//! and the result is rounded once.

use super::index::{numel, strides};
use super::{Out, Value};
use crate::conv::ConvGeometry;

/// Every multi-index of `shape`, row-major, as a flat list of `shape.len()`-tuples.
fn positions(shape: &[usize]) -> Vec<Vec<usize>> {
    let mut all = Vec::with_capacity(numel(shape));
    let mut at = vec![0usize; shape.len()];
    for _ in 0..numel(shape) {
        all.push(at.clone());
        for d in (0..shape.len()).rev() {
            at[d] += 1;
            if at[d] < shape[d] {
                break;
            }
            at[d] = 0;
        }
    }
    all
}

/// The convolution of `x` with `w` (operands as [`crate::infer`] accepted them).
pub(crate) fn convolution(x: &Value, w: &Value, g: &ConvGeometry<'_>, out: &Out) -> Value {
    let rank = x.shape.len() - 2;
    let (n, cin) = (x.shape[0], x.shape[1]);
    let cout = out.shape[1];
    let (in_sp, k_sp, out_sp) = (&x.shape[2..], &w.shape[2..], &out.shape[2..]);
    let (xs, ws, ys) = (strides(&x.shape), strides(&w.shape), strides(&out.shape));
    let (cin_g, cout_g) = (cin / g.groups, cout / g.groups);
    let taps = positions(k_sp);
    let mut data = vec![0.0f64; out.numel()];
    let flat = |st: &[usize], at: &[usize]| at.iter().zip(st).map(|(a, s)| a * s).sum::<usize>();
    if g.transposed {
        // each input element adds x·w to the outputs it reaches
        for b in 0..n {
            for ci in 0..cin {
                let group = ci / cin_g;
                for p in positions(in_sp) {
                    let xv = x.data[b * xs[0] + ci * xs[1] + flat(&xs[2..], &p)];
                    for k in &taps {
                        let target: Option<Vec<usize>> = (0..rank)
                            .map(|i| g.target(i, p[i], k[i], out_sp[i]))
                            .collect();
                        let Some(t) = target else { continue };
                        for co in 0..cout_g {
                            let wv = w.data[ci * ws[0] + co * ws[1] + flat(&ws[2..], k)];
                            let o = group * cout_g + co;
                            data[b * ys[0] + o * ys[1] + flat(&ys[2..], &t)] += xv * wv;
                        }
                    }
                }
            }
        }
    } else {
        // each output element sums the input under each tap
        for b in 0..n {
            for o in 0..cout {
                let group = o / cout_g;
                for p in positions(out_sp) {
                    let mut acc = 0.0f64;
                    for k in &taps {
                        let source: Option<Vec<usize>> = (0..rank)
                            .map(|i| g.source(i, p[i], k[i], in_sp[i]))
                            .collect();
                        let Some(s) = source else { continue };
                        for c in 0..cin_g {
                            let ci = group * cin_g + c;
                            let xv = x.data[b * xs[0] + ci * xs[1] + flat(&xs[2..], &s)];
                            let wv = w.data[o * ws[0] + c * ws[1] + flat(&ws[2..], k)];
                            acc += xv * wv;
                        }
                    }
                    data[b * ys[0] + o * ys[1] + flat(&ys[2..], &p)] = acc;
                }
            }
        }
    }
    out.finish(data)
}
