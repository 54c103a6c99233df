//! The order the scheduler runs kernels in, judged by the live bytes of its memory plan on
//! small backward graphs built the way a model's backward is laid out.

use kiln_passes::memory::MemoryPlan;
use kiln_passes::schedule::{schedule, Schedule};

const ACT: u64 = 64 * 32 * 4;

fn scheduled(text: &str) -> Schedule {
    let g = kiln_ir::parse_graph(text).expect("parses");
    let d = kiln_passes::pipeline::run_passes(&g, &["decompose"], &Default::default(), true)
        .expect("passes run");
    schedule(&d).expect("schedules")
}

/// (most bytes live at one step, the arena's bytes), in activations.
fn live_and_planned(s: &Schedule) -> (f64, f64) {
    let bind = |_: &str| Some(64);
    let peak = MemoryPlan::peak_live_bytes(&s.requests, &bind).expect("constant sizes");
    let planned = s.memory.planned_bytes(&bind).expect("constant sizes");
    (peak as f64 / ACT as f64, planned as f64 / ACT as f64)
}

/// A graph `@backward(%g, %w1.., %t0..) -> (input gradient, weight gradients)` in the
/// layout of an optimised backward graph: each layer's gradient is `rest(k, gk)` (the
/// layer's body, given its output's gradient, returning its input's gradient), written
/// after everything `before(k)` writes for every layer; `after(k, gk)` is written at the
/// end, after every layer's weight gradient.
struct Layered<'a> {
    depth: usize,
    before: &'a dyn Fn(&mut Body, usize) -> String,
    rest: &'a dyn Fn(&mut Body, usize, &str, &str) -> String,
    after: &'a dyn Fn(&mut Body, usize, &str) -> Vec<String>,
}

/// Numbered nodes of a graph being written.
#[derive(Default)]
struct Body {
    lines: Vec<String>,
}

impl Body {
    fn node(&mut self, text: String) -> String {
        self.lines.push(format!("%{} = {text}", self.lines.len()));
        format!("%{}", self.lines.len() - 1)
    }
}

impl Layered<'_> {
    fn text(&self) -> String {
        let (act, wt) = ("f32[64,32]", "f32[32,32]");
        let depth = self.depth;
        let mut params = vec![format!("%g: {act}")];
        params.extend((1..=depth).map(|k| format!("%w{k}: {wt}")));
        params.extend((0..depth).map(|k| format!("%t{k}: {act}")));
        let mut b = Body::default();
        let early: Vec<String> = (1..=depth).map(|k| (self.before)(&mut b, k)).collect();
        let mut grad = vec![String::new(); depth + 1];
        grad[depth] = "%g".to_string();
        for k in (1..=depth).rev() {
            grad[k - 1] = (self.rest)(&mut b, k, &grad[k], &early[k - 1]);
        }
        let mut outs = vec![grad[0].clone()];
        let mut types = vec![act.to_string()];
        for (k, gk) in grad.iter().enumerate().skip(1) {
            let tt = b.node(format!(
                "transpose %t{} {{dim0 = 0, dim1 = 1}} : f32[32,64]",
                k - 1
            ));
            outs.push(b.node(format!("matmul {tt}, {gk} : {wt}")));
            types.push(wt.to_string());
        }
        for (k, gk) in grad.iter().enumerate().skip(1) {
            for o in (self.after)(&mut b, k, gk) {
                outs.push(o);
                types.push("f32[32]".to_string());
            }
        }
        format!(
            "graph @backward({}) -> ({}) {{\n  {}\n  return {}\n}}\n",
            params.join(", "),
            types.join(", "),
            b.lines.join("\n  "),
            outs.join(", ")
        )
    }
}

/// A layer's input gradient through its weight: `gk @ w_k^T`.
fn through_weight(b: &mut Body, k: usize, gk: &str) -> String {
    let wk = b.node(format!(
        "transpose %w{k} {{dim0 = 0, dim1 = 1}} : f32[32,32]"
    ));
    b.node(format!("matmul {gk}, {wk} : f32[64,32]"))
}

#[test]
fn a_value_recomputed_from_saved_inputs_is_made_next_to_its_reader() {
    // Each layer recomputes a 64x64 matrix (two activations) from its saved input alone,
    // as a backward recomputes attention probabilities. Written first, for every layer, as
    // the optimised graph lays them out: made in that order, all eight live at once.
    let before = |b: &mut Body, k: usize| {
        let t = format!("%t{}", k - 1);
        let tt = b.node(format!("transpose {t} {{dim0 = 0, dim1 = 1}} : f32[32,64]"));
        let s = b.node(format!("matmul {t}, {tt} : f32[64,64]"));
        b.node(format!("exp {s} : f32[64,64]"))
    };
    let rest = |b: &mut Body, k: usize, gk: &str, r: &str| {
        let dt = through_weight(b, k, gk);
        b.node(format!("matmul {r}, {dt} : f32[64,32]"))
    };
    let after = |_: &mut Body, _: usize, _: &str| Vec::new();
    let s = scheduled(
        &Layered {
            depth: 8,
            before: &before,
            rest: &rest,
            after: &after,
        }
        .text(),
    );
    let (live, planned) = live_and_planned(&s);
    assert!(live <= 6.0, "{live} activations live at once");
    assert!(planned <= 6.0, "an arena of {planned} activations");
}

#[test]
fn kernels_that_began_reading_a_value_finish_reading_it() {
    // Each layer's input gradient is read by the next layer, and by two weight-like
    // gradients `sum(gk * t)` and `sum(-gk)` written at the end of the graph, as fusion
    // leaves a layer norm's two weight gradients. Neither product is a weight gradient (a
    // sum reads it), and neither is the last reader of `gk` while the other waits; without
    // finishing what the next layer began, every layer's gradient lives until the end.
    let before = |_: &mut Body, _: usize| String::new();
    let rest = |b: &mut Body, k: usize, gk: &str, _: &str| {
        let dt = through_weight(b, k, gk);
        let t = format!("%t{}", k - 1);
        b.node(format!("mul {dt}, {t} : f32[64,32]"))
    };
    let after = |b: &mut Body, k: usize, gk: &str| {
        let t = format!("%t{}", k - 1);
        let p = b.node(format!("mul {gk}, {t} : f32[64,32]"));
        let n = b.node(format!("neg {gk} : f32[64,32]"));
        [p, n]
            .iter()
            .map(|v| b.node(format!("sum {v} {{dims = [0], keepdim = false}} : f32[32]")))
            .collect()
    };
    let s = scheduled(
        &Layered {
            depth: 8,
            before: &before,
            rest: &rest,
            after: &after,
        }
        .text(),
    );
    let (live, planned) = live_and_planned(&s);
    assert!(live <= 4.0, "{live} activations live at once");
    assert!(planned <= 4.0, "an arena of {planned} activations");
}
