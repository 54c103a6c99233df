//! The geometry of a convolution (`Op::Convolution`, torch's `aten.convolution`): which
//! input element each output element reads through each kernel offset, and the result's
//! sizes. Type inference, the interpreter and the runtime's kernels all read it, so a
//! convolution's shape means one thing everywhere.
//!
//! A forward convolution of `x [N, C, *S]` with `w [O, C/G, *K]` gives `y [N, O, *L]` with
//! `y[n, o, l] = Σ_{c ∈ group(o), k} x[n, c, l·s + k·d - p] · w[o, c - group start, k]`
//! (per spatial dim, out-of-range input positions read zero) and
//! `L = (S + 2p - d(K-1) - 1) / s + 1`. A transposed convolution of `x [N, Cin, *S]` with
//! `w [Cin, Cout/G, *K]` is its adjoint: each input element adds `x·w` to output position
//! `i·s + k·d - p`, and `L = (S-1)s - 2p + d(K-1) + 1 + output_padding`.

use crate::Op;

/// A convolution's attributes, one entry per spatial dim (torch's `aten.convolution`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvGeometry<'a> {
    /// step between output positions (forward) or input positions (transposed), ≥ 1
    pub stride: &'a [usize],
    /// zeros added before and after each spatial dim (transposed: removed from the output)
    pub padding: &'a [usize],
    /// spacing of the kernel's taps, ≥ 1
    pub dilation: &'a [usize],
    /// extra size at the end of a transposed convolution's output (< stride or dilation)
    pub output_padding: &'a [usize],
    /// the channels split into this many independent groups, ≥ 1
    pub groups: usize,
    /// the adjoint (`conv_transpose`) form
    pub transposed: bool,
}

impl ConvGeometry<'_> {
    /// The geometry of a convolution op (`None` for any other op).
    pub fn of(op: &Op) -> Option<ConvGeometry<'_>> {
        let Op::Convolution {
            stride,
            padding,
            dilation,
            transposed,
            output_padding,
            groups,
        } = op
        else {
            return None;
        };
        Some(ConvGeometry {
            stride,
            padding,
            dilation,
            output_padding,
            groups: *groups,
            transposed: *transposed,
        })
    }

    /// The spatial rank.
    pub fn rank(&self) -> usize {
        self.stride.len()
    }

    /// Why the attributes do not describe a convolution of spatial rank `rank`, if they
    /// do not.
    pub fn check(&self, rank: usize) -> Result<(), String> {
        let lists = [
            ("stride", self.stride),
            ("padding", self.padding),
            ("dilation", self.dilation),
            ("output_padding", self.output_padding),
        ];
        for (name, list) in lists {
            if list.len() != rank {
                return Err(format!(
                    "{name} has {} entries for {rank} spatial dims",
                    list.len()
                ));
            }
        }
        if self.stride.contains(&0) || self.dilation.contains(&0) || self.groups == 0 {
            return Err("stride, dilation and groups must be positive".into());
        }
        for i in 0..rank {
            let op = self.output_padding[i];
            if op > 0 && (!self.transposed || (op >= self.stride[i] && op >= self.dilation[i])) {
                return Err(format!(
                    "output_padding {op} of dim {i} must be smaller than the stride or the \
                     dilation, and only a transposed convolution has one"
                ));
            }
        }
        Ok(())
    }

    /// The output size of spatial dim `i` for input size `input` and kernel size `kernel`
    /// (`None`: the kernel does not fit, the output would be empty or negative).
    pub fn output_size(&self, i: usize, input: usize, kernel: usize) -> Option<usize> {
        let (s, p, d) = (self.stride[i], self.padding[i], self.dilation[i]);
        let span = d * (kernel.max(1) - 1) + 1;
        if self.transposed {
            let full = (input.checked_sub(1)?) * s + span + self.output_padding[i];
            full.checked_sub(2 * p).filter(|&n| n > 0)
        } else {
            let padded = input + 2 * p;
            padded.checked_sub(span).map(|r| r / s + 1)
        }
    }

    /// The input position that output position `out` reads through kernel tap `k` of dim
    /// `i` in a forward convolution (`None`: a padding zero).
    pub fn source(&self, i: usize, out: usize, k: usize, input: usize) -> Option<usize> {
        let at = (out * self.stride[i] + k * self.dilation[i]).checked_sub(self.padding[i])?;
        (at < input).then_some(at)
    }

    /// The output position that input position `inp` adds to through kernel tap `k` of dim
    /// `i` in a transposed convolution (`None`: cut off by the padding).
    pub fn target(&self, i: usize, inp: usize, k: usize, output: usize) -> Option<usize> {
        let at = (inp * self.stride[i] + k * self.dilation[i]).checked_sub(self.padding[i])?;
        (at < output).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::ConvGeometry;

    fn geometry<'a>(
        stride: &'a [usize],
        padding: &'a [usize],
        dilation: &'a [usize],
        output_padding: &'a [usize],
        transposed: bool,
    ) -> ConvGeometry<'a> {
        ConvGeometry {
            stride,
            padding,
            dilation,
            output_padding,
            groups: 1,
            transposed,
        }
    }

    #[test]
    fn output_sizes_follow_torch() {
        // torch: Conv2d(k=3, s=2, p=1) on 7 -> 4; dilation 2, k=3 on 7 -> 3
        assert_eq!(
            geometry(&[2], &[1], &[1], &[0], false).output_size(0, 7, 3),
            Some(4)
        );
        assert_eq!(
            geometry(&[1], &[0], &[2], &[0], false).output_size(0, 7, 3),
            Some(3)
        );
        assert_eq!(
            geometry(&[1], &[0], &[1], &[0], false).output_size(0, 2, 3),
            None
        );
        // ConvTranspose1d(k=3, s=2, p=1, output_padding=1) on 4 -> 8
        assert_eq!(
            geometry(&[2], &[1], &[1], &[1], true).output_size(0, 4, 3),
            Some(8)
        );
        assert_eq!(
            geometry(&[1], &[0], &[1], &[0], true).output_size(0, 1, 1),
            Some(1)
        );
    }

    #[test]
    fn checks_name_the_bad_attribute() {
        let g = geometry(&[1, 1], &[0], &[1, 1], &[0, 0], false);
        assert!(g.check(2).unwrap_err().contains("padding"));
        let g = geometry(&[1], &[0], &[1], &[1], false);
        assert!(g.check(1).unwrap_err().contains("output_padding"));
        let g = geometry(&[2], &[0], &[1], &[1], true);
        assert_eq!(g.check(1), Ok(()));
    }

    #[test]
    fn sources_and_targets_skip_padding() {
        let g = geometry(&[2], &[1], &[1], &[0], false);
        assert_eq!(g.source(0, 0, 0, 5), None);
        assert_eq!(g.source(0, 0, 1, 5), Some(0));
        assert_eq!(g.source(0, 2, 2, 5), None);
        let t = geometry(&[2], &[1], &[1], &[0], true);
        assert_eq!(t.target(0, 0, 0, 5), None);
        assert_eq!(t.target(0, 2, 1, 5), Some(4));
    }
}
