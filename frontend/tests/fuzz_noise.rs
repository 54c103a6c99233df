//! The fuzzer's rounding noise (`kiln::fuzz::noise`): it is large where a result cancels
//! and a few units of roundoff where it does not, so it excuses an f32 result that lands
//! on cancellation noise and still catches a small miscompile of a well-conditioned one.

use kiln::fuzz::noise::{unit_roundoff, with_noise, SAMPLES};
use kiln::fuzz::{check_graph, widened, CheckOptions, Executor, Outcome, Sabotage};
use kiln::graph_exec::run_graph;
use kiln::ir::text::{parse_graph, print_graph};
use kiln::ir::DType;
use kiln::{Graph, Tensor};
use std::sync::Arc;

/// `x - mean(x)` summed per row: 0 in real arithmetic, and `exp(x)`.
const G: &str = "graph @g(%x: f32[4, 9]) -> (f32[4], f32[4, 9]) {
  %0 = mean %x {dims = [1], keepdim = true} : f32[4, 1]
  %1 = sub %x, %0 : f32[4, 9]
  %2 = sum %1 {dims = [1]} : f32[4]
  %3 = exp %x : f32[4, 9]
  return %2, %3
}";

/// The largest distance from the unperturbed run, over the perturbed runs, per output.
fn spread(g: &Graph, x: &Tensor) -> Vec<f64> {
    let truth = run_graph(g, std::slice::from_ref(x)).unwrap();
    let mut out = vec![0.0f64; truth.len()];
    for k in 0..SAMPLES {
        let runs = with_noise(k, unit_roundoff(DType::F32), || {
            run_graph(g, std::slice::from_ref(x)).unwrap()
        });
        for (o, (r, t)) in out.iter_mut().zip(runs.iter().zip(&truth)) {
            let (r, t) = (r.to_vec_f64().unwrap(), t.to_vec_f64().unwrap());
            for (a, b) in r.iter().zip(&t) {
                *o = o.max((a - b).abs());
            }
        }
    }
    out
}

#[test]
fn noise_spans_cancellation_and_is_units_of_roundoff_elsewhere() {
    let g = widened(&parse_graph(G).unwrap()).unwrap();
    // values near 1000 (x - mean is a few units): the f32 centring costs ~1000 · 2^-24
    let v: Vec<f64> = (0..36).map(|i| 1000.0 + ((i * 7) % 5) as f64).collect();
    let x = Tensor::from_f64(&v, &[4, 9], DType::F64).unwrap();
    let cancelled = spread(&g, &x)[0];
    let u = unit_roundoff(DType::F32);
    // the sum of 9 centred values each off by up to ~2·1000·u (operand and result)
    assert!(
        cancelled > 1000.0 * u && cancelled < 9.0 * 4.0 * 1005.0 * u,
        "{cancelled:e}"
    );
    // exp(1004) is inf in f64 too: exp of smaller values is a relative few u
    let small = Tensor::from_f64(&vec![1.5; 36], &[4, 9], DType::F64).unwrap();
    let s = spread(&g, &small);
    let e15 = 1.5f64.exp();
    assert!(s[1] > 0.0 && s[1] <= 2.0 * u * e15 * 1.0001, "{:e}", s[1]);
    // outside `with_noise` nothing is perturbed: the same graph gives the same bits
    let a = run_graph(&g, std::slice::from_ref(&x)).unwrap();
    let b = run_graph(&g, std::slice::from_ref(&x)).unwrap();
    assert_eq!(a[0].to_vec_f64().unwrap(), b[0].to_vec_f64().unwrap());
}

/// A layer norm with a wrong epsilon (1e-3 for 1e-5): 5e-4 relative on unit-variance rows.
fn wrong_eps(g: &Graph) -> Graph {
    let text = print_graph(g).replace("eps = 1e-5", "eps = 1e-3");
    parse_graph(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn options(executor: Executor, grad: bool, sabotage: bool) -> CheckOptions {
    CheckOptions {
        executors: vec![executor],
        cases: CheckOptions::default_cases(11),
        grad,
        sabotage: sabotage.then(|| Sabotage {
            executor,
            rewrite: Arc::new(wrong_eps),
        }),
    }
}

#[test]
fn a_small_miscompile_of_a_well_conditioned_norm_is_still_found() {
    let g = parse_graph(
        "graph @g(%x: f32[B, T], %w: f32[T]) -> f32[B, T] {
  %0 = layer_norm %x, %w {ndim = 1, eps = 1e-5} : f32[B, T]
  return %0
}",
    )
    .unwrap();
    for executor in [Executor::Cpu, Executor::Interp] {
        for grad in [false, true] {
            let ok = check_graph(&g, &options(executor, grad, false));
            assert!(matches!(ok, Outcome::Agree { .. }), "{executor}: {ok:?}");
            let bad = check_graph(&g, &options(executor, grad, true));
            let Outcome::Diverged(d) = bad else {
                panic!("{executor} grad {grad}: the wrong epsilon agreed: {bad:?}")
            };
            assert!(d.detail.contains("rounding noise"), "{d}");
        }
    }
}
