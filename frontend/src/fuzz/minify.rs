//! Shrinking a diverging graph to a small one that diverges the same way (the same
//! executor, values or gradients, a failure or a wrong value).
//!
//! It works on the [`Recipe`], not the graph: any recipe builds a graph that verifies, so
//! every candidate is a valid program. Delta debugging (Zeller's ddmin) removes chunks of
//! candidate steps, halving the chunk size down to single steps; then extra outputs and
//! inputs go one by one; then each input's rank and dims are lowered (a dim to 1, a symbol
//! to a constant). A candidate is kept when the check of its graph, on the same cases,
//! still diverges the same way.

use super::{check_graph, CheckOptions, Divergence, Outcome};
use kiln_ir::gen::{build, Recipe};
use kiln_ir::Graph;

/// The smallest recipe found that diverges like `found`, its graph and its divergence;
/// at most `budget` checks.
pub fn minify(
    recipe: &Recipe,
    found: &Divergence,
    opts: &CheckOptions,
    budget: usize,
) -> (Recipe, Graph, Divergence) {
    let kind = found.kind();
    let mut checks = 0;
    let mut best = (recipe.clone(), build(recipe), found.clone());
    let mut try_recipe = |r: Recipe, best: &mut (Recipe, Graph, Divergence)| -> bool {
        if checks >= budget {
            return false;
        }
        checks += 1;
        let g = build(&r);
        match check_graph(&g, opts) {
            Outcome::Diverged(d) if d.kind() == kind => {
                *best = (r, g, d);
                true
            }
            _ => false,
        }
    };

    // ddmin over the steps
    let mut chunk = best.0.steps.len().div_ceil(2).max(1);
    loop {
        let mut start = 0;
        while start < best.0.steps.len() && best.0.steps.len() > 1 {
            let mut r = best.0.clone();
            let end = (start + chunk).min(r.steps.len());
            r.steps.drain(start..end);
            if r.steps.is_empty() || !try_recipe(r, &mut best) {
                start += chunk;
            }
        }
        if chunk == 1 {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
    // extra outputs, then inputs
    let mut i = 0;
    while i < best.0.outputs.len() {
        let mut r = best.0.clone();
        r.outputs.remove(i);
        if !try_recipe(r, &mut best) {
            i += 1;
        }
    }
    let mut i = 0;
    while i < best.0.inputs.len() && best.0.inputs.len() > 1 {
        let mut r = best.0.clone();
        r.inputs.remove(i);
        if !try_recipe(r, &mut best) {
            i += 1;
        }
    }
    // lower each input's rank, then each dim to 1 (choice 0 builds the constant 1)
    for i in 0..best.0.inputs.len() {
        while !best.0.inputs[i].1.is_multiple_of(4) {
            let mut r = best.0.clone();
            r.inputs[i].1 = r.inputs[i].1 % 4 - 1;
            if !try_recipe(r, &mut best) {
                break;
            }
        }
        for d in 0..3 {
            if !best.0.inputs[i].2[d].is_multiple_of(6) {
                let mut r = best.0.clone();
                r.inputs[i].2[d] = 0;
                try_recipe(r, &mut best);
            }
        }
    }
    best
}
