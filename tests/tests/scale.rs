//! Big graphs compile (no recursion deep enough to overflow a test thread's stack anywhere
//! in parsing, passes, the e-graph, scheduling or codegen) and compute what the interpreter
//! computes: a 20,000-op chain, an unrolled recurrence of 2,000 matmul steps, and a fan of
//! 10,000 ops of one input summed back together. Graphs past a quarter of the e-graph's node
//! limit skip it for greedy fusion (`kiln_passes::pipeline`).
//! Times per node are measured by `kiln run` on such files, not here (timing is no check).

use kiln::graph_exec::replay;
use kiln::ir::interp::eval;
use kiln::ir::text::parse_graph;
use kiln::{compile, Graph, Tensor};
use kiln_tests::{corpus_inputs, value};

/// `n` unary ops in a chain, with an add of the input every seventh.
fn chain(n: usize) -> String {
    let mut t = String::from("graph @chain(%x: f32[4,8]) -> f32[4,8] {\n");
    let ops = ["exp", "tanh", "sin", "neg", "sigmoid"];
    let mut prev = "%x".to_string();
    for i in 0..n {
        if i % 7 == 3 {
            t += &format!("  %{i} = add {prev}, %x : f32[4,8]\n");
        } else {
            t += &format!("  %{i} = {} {prev} : f32[4,8]\n", ops[i % ops.len()]);
        }
        prev = format!("%{i}");
    }
    t + &format!("  return {prev}\n}}\n")
}

/// `h = tanh(h @ w + x)`, `steps` times.
fn recurrence(steps: usize) -> String {
    let mut t = String::from("graph @rnn(%x: f32[2,8], %w: f32[8,8]) -> f32[2,8] {\n");
    let mut prev = "%x".to_string();
    for i in 0..steps {
        let (m, a, h) = (3 * i, 3 * i + 1, 3 * i + 2);
        t += &format!("  %{m} = matmul {prev}, %w : f32[2,8]\n");
        t += &format!("  %{a} = add %{m}, %x : f32[2,8]\n");
        t += &format!("  %{h} = tanh %{a} : f32[2,8]\n");
        prev = format!("%{h}");
    }
    t + &format!("  return {prev}\n}}\n")
}

/// `width` ops each reading the input, then added together one by one.
fn fan(width: usize) -> String {
    let mut t = String::from("graph @fan(%x: f32[3,5]) -> f32[3,5] {\n");
    for i in 0..width {
        t += &format!("  %{i} = mul %x, {}.0 : f32[3,5]\n", i % 13);
    }
    let mut prev = "%0".to_string();
    for i in 1..width {
        let id = width + i;
        t += &format!("  %{id} = add {prev}, %{i} : f32[3,5]\n");
        prev = format!("%{id}");
    }
    t + &format!("  return {prev}\n}}\n")
}

/// Compiles `g` (the cpu backend) on a thread with the default 2 MiB test stack and checks
/// it against the interpreter.
fn compiles_and_matches(g: &Graph, tol: f64) {
    // small values: 20,000 ops of a chain stay in range
    let xs: Vec<Tensor> = corpus_inputs(g, 7)
        .iter()
        .map(|x| (x * 0.25).unwrap())
        .collect();
    let vals: Vec<_> = xs.iter().map(value).collect();
    let want = eval(g, &vals).unwrap();
    let graph = g.clone();
    let f = compile(move |xs: &Vec<Tensor>| replay(&graph, xs));
    let got = f.call(&xs).unwrap();
    for (w, t) in want.iter().zip(&got) {
        let t = t.to_vec_f64().unwrap();
        for (j, (a, b)) in w.data.iter().zip(&t).enumerate() {
            assert!(
                (a - b).abs() <= tol * a.abs().max(1.0),
                "@{} element {j}: compiled {b} vs interpreter {a}",
                g.name()
            );
        }
    }
}

#[test]
fn a_chain_of_20000_ops_compiles_and_matches_the_interpreter() {
    let g = parse_graph(&chain(20_000)).unwrap();
    assert_eq!(g.len(), 20_001);
    compiles_and_matches(&g, 1e-4);
}

#[test]
fn an_unrolled_recurrence_of_2000_steps_compiles_and_matches_the_interpreter() {
    let g = parse_graph(&recurrence(2_000)).unwrap();
    compiles_and_matches(&g, 1e-4);
}

#[test]
fn a_fan_of_10000_ops_compiles_and_matches_the_interpreter() {
    let g = parse_graph(&fan(10_000)).unwrap();
    compiles_and_matches(&g, 1e-4);
}
