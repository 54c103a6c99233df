//! Ordering the work of one row: which values are computed once per row, which inner loops
//! fold which reductions, and where outputs are stored.

use super::{Expr, Phase, ScalarType, Stmt, Store, ValueId};

/// The operands of an instruction.
pub(crate) fn operands(e: &Expr) -> Vec<ValueId> {
    match e {
        Expr::Load(_) | Expr::Const(_) | Expr::InnerLen => vec![],
        Expr::Unary(_, x) | Expr::BoolToF32(x) | Expr::Reduce(_, x) => vec![*x],
        Expr::Binary(_, x, y) => vec![*x, *y],
        Expr::Where(c, x, y) => vec![*c, *x, *y],
    }
}

/// Marks `v` and its dependencies up to (not through) reductions, as the point values an
/// inner loop must compute (`point`) and the row values it needs first (`row`).
fn collect(body: &[Stmt], v: ValueId, point: &mut [bool], row: &mut [bool]) {
    if body[v].row {
        row[v] = true;
        if !matches!(body[v].expr, Expr::Reduce(..)) {
            for o in operands(&body[v].expr) {
                collect(body, o, point, row);
            }
        }
        return;
    }
    if point[v] {
        return;
    }
    point[v] = true;
    for o in operands(&body[v].expr) {
        collect(body, o, point, row);
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
    debug_assert!(body
        .iter()
        .all(|s| s.ty == ScalarType::F32 || s.ty == ScalarType::Bool));
    phases
}

fn operand_of(body: &[Stmt], r: ValueId) -> ValueId {
    match body[r].expr {
        Expr::Reduce(_, x) => x,
        _ => unreachable!("not a reduction"),
    }
}
