//! The unary chains of a nest (`loops/chains.rs`) the CPU backend computes as one fitted
//! polynomial of the chain's input (`math/fitted.rs::fit_chain`): a chain whose input's range
//! is a short finite interval, where a polynomial cheaper than the chain's own ops follows
//! the chain's f64 composition within the fits' tolerance (1.5 ulp of 1, relative, on a
//! dense sweep). The other members are then not computed at all. A chain no such polynomial
//! follows keeps its ops (each transcendental may still be fitted alone). `CodegenOptions::chain_fits`
//! turns this off, for measurements.

use super::cost::stmt_cost;
use super::math::{fit_chain, Fitted};
use crate::loops::{unary_chains, LoopNest, ValueId, ValueRange};
use std::collections::{HashMap, HashSet};

/// The highest polynomial degree tried for a chain: past it, a monomial Horner form in f32
/// seldom holds 1.5 ulp, and the fit search's cost grows.
const MAX_CHAIN_DEGREE: usize = 16;

/// A chain computed as one polynomial.
pub(crate) struct FittedChain {
    /// the chain's input
    pub(crate) input: ValueId,
    /// the polynomial of the input
    pub(crate) fit: Fitted,
    /// how many statements it replaces
    pub(crate) steps: usize,
    /// the input's interval
    pub(crate) range: ValueRange,
}

/// The chains of one nest computed by fitted polynomials.
#[derive(Default)]
pub(crate) struct ChainFits {
    /// each fitted chain, by its output
    pub(crate) fits: HashMap<ValueId, FittedChain>,
    /// the fitted chains' other members: never computed
    pub(crate) absorbed: HashSet<ValueId>,
}

/// The chains of `nest` worth fitting (polynomials for an FMA host when `fma`); none when
/// `enabled` is false (`CodegenOptions::chain_fits`).
pub(crate) fn chain_fits(
    nest: &LoopNest,
    ranges: &[ValueRange],
    fma: bool,
    enabled: bool,
) -> ChainFits {
    let mut out = ChainFits::default();
    if !enabled {
        return out;
    }
    for chain in unary_chains(&nest.body, &nest.stores, ranges) {
        let cost: usize = chain
            .members
            .iter()
            .map(|&m| stmt_cost(&nest.body[m].expr, ranges))
            .sum();
        // the polynomial (degree + 3 instructions) must cost less than the ops it replaces
        let max_degree = cost.saturating_sub(4).min(MAX_CHAIN_DEGREE);
        if let Some(f) = fit_chain(&chain.steps, ranges[chain.input], fma, max_degree) {
            let output = chain.output();
            out.absorbed
                .extend(chain.members.iter().copied().filter(|&m| m != output));
            out.fits.insert(
                output,
                FittedChain {
                    input: chain.input,
                    fit: f,
                    steps: chain.members.len(),
                    range: ranges[chain.input],
                },
            );
        }
    }
    out
}

impl ChainFits {
    /// One comment line per fitted chain, in body order, for `kiln dump --stage clif`:
    /// `; v30 = P(v5): 17 steps as one polynomial of degree 3 on [-1.000000, 1.000000]`.
    pub(crate) fn describe(&self) -> Vec<String> {
        let mut outputs: Vec<&ValueId> = self.fits.keys().collect();
        outputs.sort();
        outputs
            .into_iter()
            .map(|v| {
                let c = &self.fits[v];
                format!(
                    "; v{v} = P(v{}): {} steps as one polynomial of degree {} on [{:.6}, {:.6}]",
                    c.input,
                    c.steps,
                    c.fit.degree(),
                    c.range.lo,
                    c.range.hi
                )
            })
            .collect()
    }

    /// The estimated cost of each body statement (see [`stmt_cost`]) with the fits applied:
    /// 0 for an absorbed member, the polynomial's length for a fitted chain's output.
    pub(crate) fn costs(&self, nest: &LoopNest, ranges: &[ValueRange]) -> Vec<usize> {
        (0..nest.body.len())
            .map(|v| {
                if self.absorbed.contains(&v) {
                    0
                } else if let Some(c) = self.fits.get(&v) {
                    c.fit.cost()
                } else {
                    stmt_cost(&nest.body[v].expr, ranges)
                }
            })
            .collect()
    }
}
