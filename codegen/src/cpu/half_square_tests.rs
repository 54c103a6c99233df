//! The kernel emitter computes `exp(x·x·(-0.5))` (the normal density in gelu's derivative)
//! as `e^(-x²/2)` with `x²` split exactly, sharing it with a gelu of the same value: checked
//! through whole plans, in both operand orders and beside a gelu, where `exp` of the rounded
//! square would be off by tens of ulps (|x| near 13).

use super::math::tests::ulps;
use super::plan_of;
use kiln_runtime::CpuTensor;

/// `x²/2` rounded before `exp` costs up to `x²/2` half-ulps of the argument; the exact
/// split keeps the result within a couple of ulps.
const MAX_ULPS: f64 = 2.0;

fn run(src: &str, xs: &[f32]) -> Vec<Vec<f32>> {
    let x = CpuTensor::from_slice(xs, &[1, xs.len()]).expect("a tensor");
    outputs(src, &x)
}

fn outputs(src: &str, x: &CpuTensor) -> Vec<Vec<f32>> {
    plan_of(src)
        .run(&[x])
        .expect("runs")
        .iter()
        .map(|t| t.to_vec::<f32>().expect("f32"))
        .collect()
}

/// Points where the rounded square loses most (12 ≤ |x| < 13.2, results still normal),
/// small and middling ones, an odd count so the vector loop ends in a scalar tail.
fn points() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..4001).map(|i| 12.0 + 1.2 * i as f32 / 4000.0).collect();
    xs.extend((0..2001).map(|i| -6.0 + 12.0 * i as f32 / 2000.0));
    let neg: Vec<f32> = xs.iter().map(|x| -x).collect();
    xs.extend(neg);
    xs.extend([
        0.0,
        -0.0,
        20.0,
        -1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    xs
}

fn density(x: f32) -> f64 {
    let x = f64::from(x);
    (-x * x / 2.0).exp()
}

fn check(name: &str, got: &[f32], xs: &[f32]) {
    let mut worst = (0.0, 0.0f32);
    for (g, x) in got.iter().zip(xs) {
        let r = density(*x);
        if r.is_nan() {
            assert!(g.is_nan(), "{name} at {x}: {g}, want NaN");
            continue;
        }
        if r < f64::from(f32::MIN_POSITIVE) {
            assert!(
                *g == 0.0 || f64::from(*g) < f64::from(f32::MIN_POSITIVE),
                "{name} at {x}: {g}"
            );
            continue;
        }
        let u = ulps(*g, r);
        if u > worst.0 {
            worst = (u, *x);
        }
    }
    assert!(
        worst.0 <= MAX_ULPS,
        "{name}: {:.1} ulp at x = {}",
        worst.0,
        worst.1
    );
}

#[test]
fn the_normal_density_is_computed_from_the_exact_square() {
    let xs = points();
    let n = xs.len();
    for src in [
        format!(
            "graph @d(%x: f32[1,{n}]) -> f32[1,{n}] {{\n  %0 = mul %x, %x : f32[1,{n}]\n  \
             %1 = mul %0, -0.5 : f32[1,{n}]\n  %2 = exp %1 : f32[1,{n}]\n  return %2\n}}\n"
        ),
        format!(
            "graph @d(%x: f32[1,{n}]) -> f32[1,{n}] {{\n  %0 = mul %x, %x : f32[1,{n}]\n  \
             %1 = mul -0.5, %0 : f32[1,{n}]\n  %2 = exp %1 : f32[1,{n}]\n  return %2\n}}\n"
        ),
    ] {
        let out = run(&src, &xs);
        check("exp(x·x·(-0.5))", &out[0], &xs);
    }
}

/// gelu and the density in one kernel (as in gelu's derivative): gelu's values are its own
/// routine's bits, and the density shared with it is as accurate as alone.
#[test]
fn gelu_and_its_density_in_one_kernel() {
    let xs = points();
    let n = xs.len();
    let src = format!(
        "graph @gd(%x: f32[1,{n}]) -> (f32[1,{n}], f32[1,{n}]) {{\n  \
         %0 = gelu %x : f32[1,{n}]\n  %1 = mul %x, %x : f32[1,{n}]\n  \
         %2 = mul %1, -0.5 : f32[1,{n}]\n  %3 = exp %2 : f32[1,{n}]\n  \
         return %0, %3\n}}\n"
    );
    let both = run(&src, &xs);
    let alone = run(
        &format!(
            "graph @g(%x: f32[1,{n}]) -> f32[1,{n}] {{\n  %0 = gelu %x : f32[1,{n}]\n  \
             return %0\n}}\n"
        ),
        &xs,
    );
    for (i, (a, b)) in alone[0].iter().zip(&both[0]).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "gelu at {}: {a} alone, {b} beside its density",
            xs[i]
        );
    }
    check("the density beside gelu", &both[1], &xs);
}

/// The same kernel on a strided input (every other element of a wider buffer): the
/// pattern does not depend on the access, and the values equal the contiguous ones.
#[test]
fn the_density_of_a_strided_input_equals_the_contiguous_one() {
    let xs = points();
    let n = xs.len();
    let src = format!(
        "graph @d(%x: f32[1,{n}]) -> f32[1,{n}] {{\n  %0 = mul %x, %x : f32[1,{n}]\n  \
         %1 = mul %0, -0.5 : f32[1,{n}]\n  %2 = exp %1 : f32[1,{n}]\n  return %2\n}}\n"
    );
    let wide: Vec<f32> = xs.iter().flat_map(|x| [*x, 7.0]).collect();
    let strided = CpuTensor::from_slice(&wide, &[1, 2 * n])
        .expect("a tensor")
        .with_layout(&[1, n], &[2 * n as isize, 2], 0)
        .expect("every other element");
    let got = outputs(&src, &strided);
    let want = run(&src, &xs);
    check("exp(x·x·(-0.5)) strided", &got[0], &xs);
    for (i, (a, b)) in got[0].iter().zip(&want[0]).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "x = {}: {a} strided, {b} contiguous",
            xs[i]
        );
    }
}
