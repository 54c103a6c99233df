//! `kiln::compile` on random programs: each random well-formed graph (the IR property
//! tests' generator, symbolic dims included) is replayed through kiln's op dispatch as if it
//! were user code, compiled (the cpu backend: generated code, eager kernels where it has
//! none), and called at several sizes and layouts; every compiled result must equal eager
//! within f32 tolerance (1e-4 relative, 1e-5 absolute: generated code rounds and sums in
//! its own order), and a graph must not compile more than twice for the three sizes of its
//! symbols.

#[path = "../../ir/tests/common/graph_gen.rs"]
mod graph_gen;

use graph_gen::{arb_graph_with, GenConfig};
use kiln::graph_exec::replay;
use kiln::{compile, DType, Graph, Tensor};
use proptest::prelude::*;

fn input(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    match dtype {
        // integer inputs are often indices: keep them valid for any table of size ≥ 2
        DType::I32 | DType::I64 => (&Tensor::rand(shape, DType::F64, seed).unwrap() * 2.0)
            .unwrap()
            .cast(dtype)
            .unwrap(),
        DType::Bool => Tensor::rand(shape, DType::F32, seed)
            .unwrap()
            .lt(0.5)
            .unwrap(),
        d => Tensor::randn(shape, d, seed).unwrap(),
    }
}

/// Inputs for `g` with `B` and `T` bound to `sizes`; `transposed` makes rank-2 inputs
/// non-contiguous views.
fn inputs(g: &Graph, sizes: (usize, usize), seed: u64, transposed: bool) -> Vec<Tensor> {
    g.inputs()
        .iter()
        .enumerate()
        .map(|(k, (_, id))| {
            let ty = &g.node(*id).ty;
            let shape = kiln_tests::bind_generated_symbols(&ty.shape, sizes);
            if transposed && shape.len() == 2 {
                input(&[shape[1], shape[0]], ty.dtype, seed + k as u64)
                    .t()
                    .unwrap()
            } else {
                input(&shape, ty.dtype, seed + k as u64)
            }
        })
        .collect()
}

fn same(a: &[Tensor], b: &[Tensor]) -> Result<(), String> {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x.shape() != y.shape() || x.dtype() != y.dtype() {
            return Err(format!(
                "output {i}: {} vs {}",
                x.tensor_type(),
                y.tensor_type()
            ));
        }
        let (xv, yv) = (x.to_vec_f64().unwrap(), y.to_vec_f64().unwrap());
        for (j, (p, q)) in xv.iter().zip(&yv).enumerate() {
            if !(p == q || (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-4 * q.abs() + 1e-5) {
                return Err(format!("output {i} element {j}: compiled {p} vs eager {q}"));
            }
        }
    }
    Ok(())
}

/// True for errors that depend on tensor values (an index out of range), not on types.
fn is_data_dependent(e: &kiln::Error) -> bool {
    matches!(
        e,
        kiln::Error::Runtime(kiln_runtime::RuntimeError::IndexOutOfRange { .. })
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(0x6b696c6e), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn compiled_random_programs_equal_eager(g in arb_graph_with(GenConfig { symbolic: true, max_steps: 12 })) {
        let f = |xs: &[Tensor]| replay(&g, xs);
        let cf = compile(f);
        for (i, sizes) in [(2usize, 3usize), (3, 5), (4, 6), (4, 6)].into_iter().enumerate() {
            for transposed in [false, true] {
                let xs = inputs(&g, sizes, 7 * i as u64, transposed);
                let eager = f(&xs);
                let compiled = cf.call(&xs);
                match (compiled, eager) {
                    (Ok(c), Ok(e)) => same(&c, &e).map_err(|m| TestCaseError::fail(format!("{m}\n{g}")))?,
                    (Err(c), Err(e)) => prop_assert!(c.to_string().starts_with(&e.to_string()), "{c} vs {e}"),
                    // an index error depends on the data, so the tracer cannot see it; when
                    // the op's result is unused the optimiser removes the op (as Inductor
                    // does), and the compiled call succeeds where eager failed
                    (Ok(_), Err(e)) if is_data_dependent(&e) => {}
                    (c, e) => prop_assert!(false, "compiled {:?} vs eager {:?}\n{g}", c.map(|_| ()), e.map(|_| ())),
                }
            }
        }
        let s = cf.stats();
        prop_assert!(s.compiles <= 2, "{s:?}\n{:?}\n{g}", cf.guards());
        prop_assert_eq!(s.graph_breaks, 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, rng_seed: proptest::test_runner::RngSeed::Fixed(0x6b696c6e), failure_persistence: None, ..ProptestConfig::default() })]

    /// The same programs with a graph break after them (a value read) and more ops after
    /// the break, so that every live value (views included) crosses a break.
    #[test]
    fn compiled_random_programs_with_a_break_equal_eager(g in arb_graph_with(GenConfig { symbolic: true, max_steps: 10 })) {
        let f = |xs: &[Tensor]| -> kiln::Result<Vec<Tensor>> {
            let outs = replay(&g, xs)?;
            let n = outs[0].to_vec_f64()?.len() as f64;
            let mut more = Vec::new();
            for t in &outs {
                more.push((&t.cast(DType::F64)? * 0.5)?.add(n)?);
            }
            more.extend(outs);
            Ok(more)
        };
        let cf = compile(f);
        let mut succeeded = false;
        for (i, sizes) in [(2usize, 3usize), (3, 5), (3, 5)].into_iter().enumerate() {
            let xs = inputs(&g, sizes, 11 * i as u64, i == 1);
            match (cf.call(&xs), f(&xs)) {
                (Ok(c), Ok(e)) => {
                    succeeded = true;
                    same(&c, &e).map_err(|m| TestCaseError::fail(format!("{m}\n{g}")))?
                }
                (Err(c), Err(e)) => prop_assert!(c.to_string().starts_with(&e.to_string()), "{c} vs {e}"),
                (Ok(_), Err(e)) if is_data_dependent(&e) => {}
                (c, e) => prop_assert!(false, "compiled {:?} vs eager {:?}\n{g}", c.map(|_| ()), e.map(|_| ())),
            }
        }
        prop_assert!(!succeeded || cf.stats().graph_breaks >= 1);
    }
}
