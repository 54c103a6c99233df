//! `kiln_ir::gen`: every recipe builds a graph that verifies, however its parts were cut.

use kiln_ir::gen::{build, splitmix, Recipe};
use kiln_ir::verify;

#[test]
fn random_recipes_build_verified_graphs_whatever_is_cut() {
    for seed in 0..200 {
        let r = Recipe::random(seed, 12, true, true);
        assert_eq!(r, Recipe::random(seed, 12, true, true), "deterministic");
        let g = build(&r);
        verify(&g).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{g}"));
        // the minifier's cuts: no steps, no inputs, more inputs than named ones
        let mut cut = r.clone();
        cut.steps.clear();
        cut.inputs.clear();
        verify(&build(&cut)).unwrap();
        let mut wide = r.clone();
        wide.inputs = (0..7).map(|i| (i, i, [i, i + 1, i + 2])).collect();
        let g = build(&wide);
        verify(&g).unwrap();
        assert_eq!(g.inputs().len(), 7);
    }
}

#[test]
fn splitmix_is_the_reference_sequence() {
    // the first outputs of splitmix64 seeded with 0 (Vigna's reference implementation)
    let mut s = 0;
    assert_eq!(splitmix(&mut s), 0xe220_a839_7b1d_cdaf);
    assert_eq!(splitmix(&mut s), 0x6e78_9e6a_a1b9_65f4);
}
