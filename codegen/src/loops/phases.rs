//! Ordering the work of one row: which values are computed once per row, which inner loops
//! fold which reductions, and where outputs are stored.

use super::{Expr, Phase, ScalarType, Stmt, Store, ValueId};

/// The operands of an instruction.
pub(crate) fn operands(e: &Expr) -> Vec<ValueId> {
    match e {
        Expr::Load(_) | Expr::Const(_) | Expr::InnerLen => vec![],
        Expr::Unary(_, x)
        | Expr::BoolToF32(x)
        | Expr::Widen(x)
        | Expr::Narrow(x)
        | Expr::Round(_, x)
        | Expr::Reduce(_, x) => vec![*x],
        Expr::Binary(_, x, y) => vec![*x, *y],
        Expr::Where(c, x, y) => vec![*c, *x, *y],
    }
}

/// Marks `v` and its dependencies up to (not through) reductions, as the point values an
/// inner loop must compute (`point`) and the row values it needs first (`row`). A worklist,
/// not recursion: a fused chain of 20,000 ops is a dependency chain that deep.
fn collect(body: &[Stmt], v: ValueId, point: &mut [bool], row: &mut [bool]) {
    let mut work = vec![v];
    while let Some(v) = work.pop() {
        let seen = if body[v].row {
            &mut row[v]
        } else {
            &mut point[v]
        };
        if *seen {
            continue;
        }
        *seen = true;
        if !(body[v].row && matches!(body[v].expr, Expr::Reduce(..))) {
            work.extend(operands(&body[v].expr));
        }
    }
}

/// The phases of a nest: before each inner loop, the row values it needs that are not yet
/// computed; loops fold every reduction whose operand depends only on reductions already
/// folded (so independent reductions share one pass over the row); the last loop stores
/// the point-valued outputs, and row-valued outputs are stored after the reductions.
pub(crate) fn plan_phases(body: &[Stmt], stores: &[Store]) -> Vec<Phase> {
    let n = body.len();
    let mut done = vec![false; n];
    let mut phases = Vec::new();
    let reductions: Vec<ValueId> = (0..n)
        .filter(|&v| matches!(body[v].expr, Expr::Reduce(..)))
        .collect();
    let mut pending = reductions.clone();
    // row values needed before a loop, in body order, that are not yet done
    let flush_rows = |row: &[bool], done: &mut [bool], phases: &mut Vec<Phase>| {
        let vs: Vec<ValueId> = (0..n)
            .filter(|&v| row[v] && !done[v] && !matches!(body[v].expr, Expr::Reduce(..)))
            .collect();
        for &v in &vs {
            done[v] = true;
        }
        if !vs.is_empty() {
            phases.push(Phase::Row(vs));
        }
    };
    while !pending.is_empty() {
        // reductions whose dependencies are all folded already
        let ready: Vec<ValueId> = pending
            .iter()
            .copied()
            .filter(|&r| {
                let mut point = vec![false; n];
                let mut row = vec![false; n];
                collect(body, operand_of(body, r), &mut point, &mut row);
                reductions.iter().all(|&q| !row[q] || done[q])
            })
            .collect();
        let ready = if ready.is_empty() {
            vec![pending[0]]
        } else {
            ready
        };
        let mut point = vec![false; n];
        let mut row = vec![false; n];
        for &r in &ready {
            collect(body, operand_of(body, r), &mut point, &mut row);
        }
        flush_rows(&row, &mut done, &mut phases);
        phases.push(Phase::Inner {
            point: (0..n).filter(|&v| point[v]).collect(),
            reduces: ready.clone(),
            stores: vec![],
        });
        for &r in &ready {
            done[r] = true;
        }
        pending.retain(|r| !ready.contains(r));
    }
    // stores
    let mut point = vec![false; n];
    let mut row = vec![false; n];
    let (mut point_stores, mut row_stores) = (Vec::new(), Vec::new());
    for (i, s) in stores.iter().enumerate() {
        collect(body, s.value, &mut point, &mut row);
        if body[s.value].row {
            row_stores.push(i);
        } else {
            point_stores.push(i);
        }
    }
    flush_rows(&row, &mut done, &mut phases);
    if !row_stores.is_empty() {
        phases.push(Phase::RowStores(row_stores));
    }
    if !point_stores.is_empty() {
        phases.push(Phase::Inner {
            point: (0..n).filter(|&v| point[v]).collect(),
            reduces: vec![],
            stores: point_stores,
        });
    }
    phases
}

fn operand_of(body: &[Stmt], r: ValueId) -> ValueId {
    match body[r].expr {
        Expr::Reduce(_, x) => x,
        _ => unreachable!("not a reduction"),
    }
}

/// True for instructions worth storing rather than computing twice (transcendentals and
/// library calls, by their cost class in the table).
fn expensive(e: &Expr) -> bool {
    match e {
        Expr::Unary(u, _) => u.info().cost.is_expensive(),
        Expr::Binary(b, ..) => b.info().cost.is_expensive(),
        _ => false,
    }
}

/// Stores instead of recomputing: when the loop that stores the outputs would recompute an
/// expensive point value that an earlier reduction loop of the row already computed (the
/// `exp` of softmax), the earlier loop also stores it into the output buffer and the last
/// loop loads it back (then overwrites it at the same index). Applies when the last loop has
/// one store, to an output indexed by every loop dim, and the value's users in the last loop
/// are used nowhere else.
pub(crate) fn reuse_expensive(nest: &mut super::LoopNest) {
    let dims = nest.dims.len();
    let Some(Phase::Inner {
        point: last_point,
        reduces: last_reduces,
        stores: last_stores,
    }) = nest.phases.last().cloned()
    else {
        return;
    };
    if !last_reduces.is_empty() || last_stores.len() != 1 {
        return;
    }
    let out = nest.stores[last_stores[0]].buffer;
    let covers = (0..dims).all(|d| nest.buffers[out].index.contains(&Some(d)));
    if !covers || nest.buffers[out].dtype != kiln_ir::DType::F32 {
        return;
    }
    // point values of earlier loops
    let mut earlier: Vec<(usize, ValueId)> = Vec::new();
    for (pi, p) in nest.phases.iter().enumerate() {
        if let Phase::Inner { point, .. } = p {
            if pi + 1 < nest.phases.len() {
                earlier.extend(point.iter().map(|&v| (pi, v)));
            }
        }
    }
    let Some(&(phase, e)) = earlier
        .iter()
        .filter(|(_, v)| last_point.contains(v) && expensive(&nest.body[*v].expr))
        .max_by_key(|(_, v)| *v)
    else {
        return;
    };
    // the last loop's users of `e` must belong to the last loop alone
    let users: Vec<ValueId> = last_point
        .iter()
        .copied()
        .filter(|&u| operands(&nest.body[u].expr).contains(&e))
        .collect();
    if users.iter().any(|u| earlier.iter().any(|(_, v)| v == u)) {
        return;
    }
    let reload = nest.body.len();
    nest.body.push(super::Stmt {
        expr: Expr::Load(out),
        ty: ScalarType::F32,
        row: false,
    });
    for &u in &users {
        let expr = match nest.body[u].expr.clone() {
            Expr::Unary(op, _) => Expr::Unary(op, reload),
            Expr::Binary(op, x, y) => Expr::Binary(
                op,
                if x == e { reload } else { x },
                if y == e { reload } else { y },
            ),
            Expr::Where(c, x, y) => Expr::Where(
                if c == e { reload } else { c },
                if x == e { reload } else { x },
                if y == e { reload } else { y },
            ),
            Expr::BoolToF32(_) => Expr::BoolToF32(reload),
            Expr::Widen(_) => Expr::Widen(reload),
            Expr::Narrow(_) => Expr::Narrow(reload),
            Expr::Round(t, _) => Expr::Round(t, reload),
            other => other,
        };
        nest.body[u].expr = expr;
    }
    nest.stores.push(Store {
        buffer: out,
        value: e,
    });
    let spill = nest.stores.len() - 1;
    if let Phase::Inner { stores, .. } = &mut nest.phases[phase] {
        stores.push(spill);
    }
    // the last loop's point values, recollected from its store
    let n = nest.body.len();
    let mut point = vec![false; n];
    let mut row = vec![false; n];
    collect(
        &nest.body,
        nest.stores[last_stores[0]].value,
        &mut point,
        &mut row,
    );
    // body order is dependency order except for the reload (appended last, depends on
    // nothing): loads go first
    let mut order: Vec<ValueId> = (0..n).filter(|&v| point[v]).collect();
    order.sort_by_key(|&v| (!matches!(nest.body[v].expr, Expr::Load(_)), v));
    if let Some(Phase::Inner { point: p, .. }) = nest.phases.last_mut() {
        *p = order;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::{ReduceOp, UnaryOp};

    /// A dependency chain far deeper than a recursive walk survives on a 2 MiB test
    /// thread (a fused 20,000-op chain overflowed it in release builds): a row sum of
    /// `neg` applied 300,000 times, then the same again on the row value.
    #[test]
    fn a_chain_300000_deep_is_planned_without_recursion() {
        let depth = 300_000;
        let mut body = vec![Stmt::f32(Expr::Load(0), false)];
        for i in 0..depth {
            body.push(Stmt::f32(Expr::Unary(UnaryOp::Neg, i), false));
        }
        body.push(Stmt::f32(Expr::Reduce(ReduceOp::Sum, depth), true));
        let sum = depth + 1;
        for i in 0..depth {
            body.push(Stmt::f32(Expr::Unary(UnaryOp::Neg, sum + i), true));
        }
        let last = body.len() - 1;
        let phases = plan_phases(
            &body,
            &[Store {
                buffer: 1,
                value: last,
            }],
        );
        let Phase::Inner { point, reduces, .. } = &phases[0] else {
            panic!("{:?}", &phases[..1]);
        };
        assert_eq!((point.len(), reduces.as_slice()), (depth + 1, &[sum][..]));
        let Phase::Row(row) = &phases[1] else {
            panic!("{:?}", &phases[1..2]);
        };
        assert_eq!(row.len(), depth);
        assert_eq!(phases[2], Phase::RowStores(vec![0]));
    }
}
