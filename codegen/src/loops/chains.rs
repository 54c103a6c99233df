//! Unary chains: runs of point statements that each apply one smooth op to the value before
//! (a transcendental, a square root, a reciprocal, or `+ − × ÷` with a constant), where every
//! value but the last is used only by the next. Such a run is one function of one value, `y
//! = F(x)`; when the value ranges (`ranges.rs`) put `x` in a short finite interval, a code
//! generator may compute `F` as a single polynomial fitted to it on that interval (the CPU
//! backend's `math/fitted.rs`, checked against [`eval_chain`] in f64 before use), instead of
//! each op in turn.
//!
//! tiny's chain is the case in point: after its first `tanh`, whose argument is unbounded,
//! every value lies in [-1, 1] or near it, and the 17 steps that follow (four more `tanh`,
//! five `sigmoid`, the adds and multiplies between them) are one smooth function of it.

use super::{Expr, ScalarType, Stmt, Store, ValueId, ValueRange};
use kiln_ir::{BinaryOp, CostClass, DTypeRule, UnaryOp};

/// One step of a chain, applied to the value before it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ChainStep {
    /// `op(x)`
    Unary(UnaryOp),
    /// `x op c`
    Right(BinaryOp, f64),
    /// `c op x`
    Left(BinaryOp, f64),
}

impl ChainStep {
    /// The step on an f64 value (the reference semantics of its op).
    pub fn eval_f64(self, x: f64) -> f64 {
        match self {
            ChainStep::Unary(op) => op.eval_f64(x),
            ChainStep::Right(op, c) => op.eval_f64(x, c),
            ChainStep::Left(op, c) => op.eval_f64(c, x),
        }
    }

    /// True for a step that costs about one instruction (`neg`, `+ − ×` with a constant):
    /// its op's cost class in the table is [`CostClass::Trivial`].
    pub fn is_cheap(self) -> bool {
        let cost = match self {
            ChainStep::Unary(op) => op.info().cost,
            ChainStep::Right(op, _) | ChainStep::Left(op, _) => op.info().cost,
        };
        cost == CostClass::Trivial
    }
}

/// A chain: `members[i]` computes `steps[i]` of the value before it (`input` for the first).
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    /// the value the chain is a function of; its range is finite
    pub input: ValueId,
    /// the chain's statements, in order; only the last is used outside the chain
    pub members: Vec<ValueId>,
    /// what each member computes
    pub steps: Vec<ChainStep>,
}

impl Chain {
    /// The value the chain computes.
    pub fn output(&self) -> ValueId {
        *self.members.last().expect("a chain has members")
    }
}

/// The chain's function on an f64 value: every step in f64, no rounding between them.
pub fn eval_chain(steps: &[ChainStep], x: f64) -> f64 {
    steps.iter().fold(x, |v, s| s.eval_f64(v))
}

/// Ops that are smooth (analytic) wherever they are finite, as the table says: the ones a
/// polynomial can follow on an interval that avoids their poles and branch points. `abs`,
/// `relu` and comparisons are not (a polynomial would round their corners).
fn smooth(op: UnaryOp) -> bool {
    op.info().smooth
}

/// A binary op that is a chain step with a constant operand: smooth, with a float result.
fn smooth_binary(op: BinaryOp) -> bool {
    op.info().smooth && op.info().dtype != DTypeRule::Bool
}

/// The step `v` computes and the value it applies it to, if `v` is a point f32 statement of
/// one non-constant operand.
fn step_of(body: &[Stmt], v: ValueId) -> Option<(ValueId, ChainStep)> {
    let s = &body[v];
    if s.ty != ScalarType::F32 || s.row {
        return None;
    }
    let konst = |x: ValueId| match body[x].expr {
        Expr::Const(c) => Some(c),
        _ => None,
    };
    let f32_value = |x: ValueId| body[x].ty == ScalarType::F32 && konst(x).is_none();
    match s.expr {
        Expr::Unary(op, x) if smooth(op) && f32_value(x) => Some((x, ChainStep::Unary(op))),
        Expr::Binary(op, x, y) if smooth_binary(op) => match (konst(x), konst(y)) {
            (None, Some(c)) if f32_value(x) => Some((x, ChainStep::Right(op, c))),
            (Some(c), None) if f32_value(y) => Some((y, ChainStep::Left(op, c))),
            _ => None,
        },
        _ => None,
    }
}

/// The chains of a body worth fitting: each maximal run of chain steps, started at its
/// earliest value whose range is finite, with at least two steps of which at least one is
/// more than a cheap arithmetic step. A value read by a store, a reduction or any other
/// statement ends a run.
pub fn unary_chains(body: &[Stmt], stores: &[Store], ranges: &[ValueRange]) -> Vec<Chain> {
    let mut uses = vec![0usize; body.len()];
    for s in body {
        for x in super::operands(&s.expr) {
            uses[x] += 1;
        }
    }
    for st in stores {
        uses[st.value] += 1;
    }
    let steps: Vec<Option<(ValueId, ChainStep)>> =
        (0..body.len()).map(|v| step_of(body, v)).collect();
    // `continued[v]`: v's only use is a chain step applied to it
    let mut continued = vec![false; body.len()];
    for &(x, _) in steps.iter().flatten() {
        if uses[x] == 1 {
            continued[x] = true;
        }
    }
    let finite = |v: ValueId| {
        ranges
            .get(v)
            .is_some_and(|r| r.lo.is_finite() && r.hi.is_finite())
    };
    let mut chains = Vec::new();
    for end in 0..body.len() {
        if steps[end].is_none() || continued[end] {
            continue;
        }
        // walk back from the run's end while the value before is itself a step used once
        let mut run = vec![end];
        let mut v = end;
        while let Some((x, _)) = steps[v] {
            if steps[x].is_none() || uses[x] != 1 {
                break;
            }
            run.push(x);
            v = x;
        }
        run.reverse();
        // the earliest input with a finite range: the run's own input, or a member's value
        let inputs = std::iter::once(steps[run[0]].expect("a step").0).chain(run.iter().copied());
        let Some(start) = inputs
            .enumerate()
            .find(|&(i, x)| i < run.len() && finite(x))
            .map(|(i, _)| i)
        else {
            continue;
        };
        let members = run[start..].to_vec();
        let chain_steps: Vec<ChainStep> = members
            .iter()
            .map(|&m| steps[m].expect("a step").1)
            .collect();
        if members.len() < 2 || chain_steps.iter().all(|s| s.is_cheap()) {
            continue;
        }
        chains.push(Chain {
            input: steps[members[0]].expect("a step").0,
            members,
            steps: chain_steps,
        });
    }
    chains
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loops::value_ranges;

    fn store(buffer: usize, value: ValueId) -> Store {
        Store { buffer, value }
    }

    fn body_of(exprs: Vec<Expr>) -> Vec<Stmt> {
        exprs.into_iter().map(|e| Stmt::f32(e, false)).collect()
    }

    #[test]
    fn tinys_chain_starts_after_its_unbounded_tanh() {
        use Expr::*;
        // x + 0.25, · 1.5, tanh, sigmoid, + 0.3, · 1.4, tanh, sigmoid
        let body = body_of(vec![
            Load(0),
            Const(0.25),
            Binary(BinaryOp::Add, 0, 1),
            Const(1.5),
            Binary(BinaryOp::Mul, 2, 3),
            Unary(UnaryOp::Tanh, 4),
            Unary(UnaryOp::Sigmoid, 5),
            Const(0.3),
            Binary(BinaryOp::Add, 6, 7),
            Const(1.4),
            Binary(BinaryOp::Mul, 9, 8),
            Unary(UnaryOp::Tanh, 10),
            Unary(UnaryOp::Sigmoid, 11),
        ]);
        let stores = [store(1, 12)];
        let ranges = value_ranges(&body);
        let chains = unary_chains(&body, &stores, &ranges);
        assert_eq!(chains.len(), 1, "{chains:?}");
        let c = &chains[0];
        assert_eq!(c.input, 5);
        assert_eq!(c.members, vec![6, 8, 10, 11, 12]);
        assert_eq!(
            c.steps,
            vec![
                ChainStep::Unary(UnaryOp::Sigmoid),
                ChainStep::Right(BinaryOp::Add, 0.3),
                ChainStep::Left(BinaryOp::Mul, 1.4),
                ChainStep::Unary(UnaryOp::Tanh),
                ChainStep::Unary(UnaryOp::Sigmoid),
            ]
        );
        let x: f64 = 0.37;
        let want = UnaryOp::Sigmoid.eval_f64(((UnaryOp::Sigmoid.eval_f64(x) + 0.3) * 1.4).tanh());
        assert_eq!(eval_chain(&c.steps, x), want);
    }

    #[test]
    fn a_value_used_twice_or_stored_ends_a_run() {
        use Expr::*;
        // t = tanh(load); s = sigmoid(t); u = sigmoid(s) stored; v = s · 2 stored
        let body = body_of(vec![
            Load(0),
            Unary(UnaryOp::Tanh, 0),
            Unary(UnaryOp::Sigmoid, 1),
            Unary(UnaryOp::Sigmoid, 2),
            Const(2.0),
            Binary(BinaryOp::Mul, 2, 4),
        ]);
        let stores = [store(1, 3), store(2, 5)];
        let ranges = value_ranges(&body);
        // s has two uses: no run through it, and the runs after it are single steps
        assert!(unary_chains(&body, &stores, &ranges).is_empty());
    }

    #[test]
    fn unbounded_cheap_and_non_smooth_runs_are_not_chains() {
        use Expr::*;
        let body = body_of(vec![
            Load(0),
            Unary(UnaryOp::Sigmoid, 0),
            Unary(UnaryOp::Relu, 1),
            Unary(UnaryOp::Tanh, 2),
            Const(3.0),
            Binary(BinaryOp::Add, 3, 4),
            Binary(BinaryOp::Mul, 5, 4),
            Unary(UnaryOp::Exp, 0),
            Unary(UnaryOp::Log, 7),
        ]);
        let stores = [store(1, 6), store(2, 8)];
        let ranges = value_ranges(&body);
        let chains = unary_chains(&body, &stores, &ranges);
        // relu breaks the first run: tanh(relu(..)) + 3, · 3 is one chain from relu's value
        // (bounded: relu of a sigmoid); log(exp(load)) has no bounded input
        assert_eq!(chains.len(), 1, "{chains:?}");
        assert_eq!(chains[0].input, 2);
        assert_eq!(chains[0].members, vec![3, 5, 6]);
    }
}
