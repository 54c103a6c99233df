//! Guards: the conditions under which a cache entry's graph may be reused for a call.

use crate::Tensor;
use kiln_ir::{DType, Dim, Shape, TensorType};
use std::fmt;
use std::sync::Arc;

/// The guard on one tensor (an argument or a lifted parameter).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorGuard {
    /// `arg0`, `arg1`, ... for arguments, `p2`, ... for parameters
    pub name: String,
    /// the dtype it must have
    pub dtype: DType,
    /// its dims: a constant size, or a symbol (any size ≥ 2, equal wherever it appears)
    pub dims: Vec<Dim>,
    /// whether it must be contiguous (`None`: the backend reads any layout)
    pub contiguous: Option<bool>,
    /// whether it must require grad (an entry compiled for gradients is never reused for a
    /// tensor that needs none, nor the reverse)
    pub requires_grad: bool,
}

impl TensorGuard {
    /// The guard matching `t` exactly (every dim constant).
    pub(crate) fn exact(name: String, t: &Tensor, layout: bool) -> TensorGuard {
        TensorGuard {
            name,
            dtype: t.dtype(),
            dims: t.shape().iter().map(|&n| Dim::Const(n)).collect(),
            contiguous: layout.then(|| t.is_contiguous()),
            requires_grad: t.requires_grad(),
        }
    }

    fn ty(&self) -> TensorType {
        TensorType::new(self.dtype, self.dims.iter().cloned().collect::<Shape>())
    }
}

impl fmt::Display for TensorGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.ty())?;
        match self.contiguous {
            Some(true) => write!(f, " contiguous"),
            Some(false) => write!(f, " strided"),
            None => Ok(()),
        }?;
        if self.requires_grad {
            write!(f, " requires_grad")?;
        }
        Ok(())
    }
}

/// Why a guard failed: which tensor, what differs, and which dims changed size.
#[derive(Clone, Debug, PartialEq)]
pub struct GuardFailure {
    /// the tensor whose guard failed (`arg0`, `p3`, or `*` for the argument count)
    pub tensor: String,
    /// what differs, in words
    pub reason: String,
    /// (argument index, dim) of each dim whose size differs from a constant guard; empty
    /// when something else failed (dtype, rank, layout)
    pub changed_dims: Vec<(usize, usize)>,
}

impl fmt::Display for GuardFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.tensor, self.reason)
    }
}

/// The guards of one cache entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Guards {
    /// one per argument, in order
    pub args: Vec<TensorGuard>,
    /// one per lifted parameter, in the graph's input order
    pub params: Vec<TensorGuard>,
    /// the grad mode the entry was compiled under (`torch.is_grad_enabled()`)
    pub grad_enabled: bool,
}

impl Guards {
    /// The symbols, in order of first appearance.
    pub fn symbols(&self) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = Vec::new();
        for g in self.args.iter().chain(&self.params) {
            for d in &g.dims {
                if let Dim::Sym(s) = d {
                    if !out.contains(s) {
                        out.push(s.clone());
                    }
                }
            }
        }
        out
    }

    /// Checks a call's arguments and the entry's parameters; on success returns the size
    /// of each symbol (in [`Guards::symbols`] order).
    pub(crate) fn check(
        &self,
        args: &[Tensor],
        params: &[Tensor],
    ) -> Result<Vec<(Arc<str>, usize)>, GuardFailure> {
        if args.len() != self.args.len() {
            return Err(GuardFailure {
                tensor: "*".into(),
                reason: format!(
                    "compiled for {} tensor arguments, got {}",
                    self.args.len(),
                    args.len()
                ),
                changed_dims: Vec::new(),
            });
        }
        let grad_now = crate::autograd::is_grad_enabled();
        if grad_now != self.grad_enabled {
            return Err(GuardFailure {
                tensor: "*".into(),
                reason: format!(
                    "grad mode changed: compiled with grad mode {}, called with it {}",
                    on_off(self.grad_enabled),
                    on_off(grad_now)
                ),
                changed_dims: Vec::new(),
            });
        }
        let mut bound: Vec<(Arc<str>, usize)> = Vec::new();
        let all = self
            .args
            .iter()
            .zip(args)
            .chain(self.params.iter().zip(params));
        // A changed size does not stop the check: the other tensors' changed dims are
        // collected too, so that automatic dynamic shapes sees all of them at once.
        let mut size_failure: Option<GuardFailure> = None;
        for (i, (g, t)) in all.enumerate() {
            match check_one(g, t, i, &mut bound) {
                Ok(()) => {}
                Err(f) if !f.changed_dims.is_empty() => match &mut size_failure {
                    Some(first) => first.changed_dims.extend(f.changed_dims),
                    None => size_failure = Some(f),
                },
                Err(f) => return Err(f),
            }
        }
        match size_failure {
            Some(f) => Err(f),
            None => Ok(bound),
        }
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn check_one(
    g: &TensorGuard,
    t: &Tensor,
    index: usize,
    bound: &mut Vec<(Arc<str>, usize)>,
) -> Result<(), GuardFailure> {
    let fail = |reason: String, changed_dims: Vec<(usize, usize)>| GuardFailure {
        tensor: g.name.clone(),
        reason,
        changed_dims,
    };
    if t.dtype() != g.dtype {
        return Err(fail(
            format!("dtype changed: compiled for {}, got {}", g.dtype, t.dtype()),
            vec![],
        ));
    }
    if t.rank() != g.dims.len() {
        return Err(fail(
            format!(
                "rank changed: compiled for {}, got {}",
                g.ty(),
                t.tensor_type()
            ),
            vec![],
        ));
    }
    let mut changed = Vec::new();
    let mut first_reason = None;
    for (d, (dim, &n)) in g.dims.iter().zip(t.shape()).enumerate() {
        match dim {
            Dim::Const(c) if *c != n => {
                changed.push((index, d));
                first_reason.get_or_insert_with(|| {
                    format!(
                        "size of dim {d} changed: compiled for {}, got {}",
                        g.ty(),
                        t.tensor_type()
                    )
                });
            }
            Dim::Sym(s) => {
                if n < 2 {
                    return Err(fail(
                        format!(
                            "dim {d} is the symbol {s}, which stands for sizes ≥ 2, got {n} \
                             (sizes 0 and 1 are specialised)"
                        ),
                        vec![],
                    ));
                }
                match bound.iter().find(|(b, _)| b == s) {
                    Some((_, prev)) if *prev != n => {
                        return Err(fail(
                            format!("dim {d} is {s}, already bound to {prev}, got {n}"),
                            vec![],
                        ))
                    }
                    Some(_) => {}
                    None => bound.push((s.clone(), n)),
                }
            }
            _ => {}
        }
    }
    if let Some(reason) = first_reason {
        return Err(fail(reason, changed));
    }
    if t.requires_grad() != g.requires_grad {
        return Err(fail(
            format!(
                "requires_grad changed: compiled for requires_grad={}, got {}",
                g.requires_grad,
                t.requires_grad()
            ),
            vec![],
        ));
    }
    if let Some(c) = g.contiguous {
        if t.is_contiguous() != c {
            return Err(fail(
                format!(
                    "layout changed: compiled for a {} tensor",
                    if c { "contiguous" } else { "strided" }
                ),
                vec![],
            ));
        }
    }
    Ok(())
}

impl fmt::Display for Guards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let all: Vec<String> = self
            .args
            .iter()
            .chain(&self.params)
            .map(|g| g.to_string())
            .collect();
        write!(f, "{}", all.join(", "))?;
        let syms = self.symbols();
        if !syms.is_empty() {
            let s: Vec<String> = syms.iter().map(|s| format!("{s} ≥ 2")).collect();
            write!(f, "; {}", s.join(", "))?;
        }
        if !self.grad_enabled {
            write!(f, "; grad mode off")?;
        }
        Ok(())
    }
}
