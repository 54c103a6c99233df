//! `kiln::profile`: with timing on, every kernel of a compiled CPU plan is recorded once
//! per call, under its plan; with it off, nothing is. (A file of its own: the switch is
//! process-wide.)

use kiln::{compile, DType, Result, Tensor};

#[test]
fn kernels_are_timed_only_while_profiling_is_on() {
    let w = Tensor::randn(&[16, 8], DType::F32, 1).unwrap();
    let f = |x: &Tensor| -> Result<Tensor> { (&x.matmul(&w)?.tanh()? + 1.0)?.sum(&[1], false) };
    let cf = compile(f);
    let x = Tensor::randn(&[5, 16], DType::F32, 2).unwrap();

    kiln::profile::set_enabled(false);
    kiln::profile::reset();
    cf.call(&x).unwrap();
    assert!(kiln::profile::report().is_empty());

    kiln::profile::set_enabled(true);
    for _ in 0..3 {
        cf.call(&x).unwrap();
    }
    kiln::profile::set_enabled(false);
    let rows = kiln::profile::report();
    assert!(!rows.is_empty());
    for r in &rows {
        assert_eq!(r.calls, 3, "{r:?}");
        assert!(["nest", "matmul", "eager"].contains(&r.kind), "{r:?}");
        assert!(!r.ops.is_empty() && !r.ops.contains("input"), "{r:?}");
    }
    assert!(
        rows.iter()
            .any(|r| r.kind == "matmul" && r.ops.starts_with("matmul")),
        "{rows:?}"
    );
    assert!(rows.windows(2).all(|p| p[0].total >= p[1].total));
    cf.call(&x).unwrap();
    assert_eq!(
        kiln::profile::report(),
        rows,
        "off again: nothing more is recorded"
    );
}
