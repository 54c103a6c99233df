//! The rewrite rules of the e-graph, as data: egg patterns over kiln's op text, one file per
//! family, every rule named, documented, and marked exact or value-changing. `RULES.md` (in
//! the crate's folder) lists them all, one line each; a test keeps it in sync.
//!
//! | file | family |
//! | --- | --- |
//! | `arith.rs` | algebraic identities (`x * 1`, `x + 0`, `neg(neg(x))`, `where(c, x, x)`) |
//! | `layout.rs` | layout ops that change nothing, cancel or compose, or move through pointwise ops |
//! | `broadcast.rs` | `expand` feeding a pointwise op, which broadcasts by itself |
//! | `fast_math.rs` | rewrites that change floating-point rounding (only with `fast_math`) |
//!
//! # The contract
//!
//! * A rule is **exact** when both sides give the same bits for every input; exact rules run
//!   always. A **fast-math** rule may change rounding (`x / c = x * (1/c)`) and runs only under
//!   `OptimizeOptions::fast_math`.
//! * Every rule keeps the class's type: an identity (`x * 1 = x`) applies only when `x` has
//!   the product's type (`1.0` promotes an `i32` tensor, so `x * 1.0` is not `x`), and a
//!   right side that builds nodes is type-checked (`kiln_ir::infer`) and unioned only when
//!   its type is the class's.
//! * Rules only add equalities; which form wins is the cost model's choice (extraction).
//!   Constant folding is not a rule: the analysis folds constants (`crate::egraph::analysis`).
//!
//! # Writing a rule
//!
//! ```text
//! rule!("mul-one", Exact, "x * 1 = x",
//!     "(mul ?x ?c)" => "?x" if is_value("?c", 1.0) if keeps_type("?x")),
//! rule!("unary-transpose", Exact, "a unary op moves inside a transpose",
//!     "(unary{?u} (transpose{?t} ?y))" => build "(transpose{?t} (unary{?u} ?y))"),
//! ```
//!
//! Both sides are egg patterns (`egg::rewrite!` builds the rule) over the e-graph language
//! (`crate::egraph::lang`): ops in their compact text (`mul`, `transpose{dim0=0,dim1=1}`),
//! `?x` for e-classes, and op variables (`transpose{?t}`: any transpose; `unary{?u}`: any
//! unary op) that stand for one op each. `if` conditions ([`cond`]) read the analysis. A
//! right side that is a variable is egg's own applier; a right side that builds nodes is
//! `build` ([`Build`]): it reads the ops the left side's op variables matched (a variable
//! written twice on the left must match the same op both times), builds the right side
//! with those ops through type-checked adds, and `with` a hook may refuse a match or compute
//! new ops or literals (`permute{?r}` from two permutations).

use crate::egraph::lang::TNode;
use crate::egraph::TensorAnalysis;
use crate::PassError;
use egg::{Pattern, Rewrite};
use std::sync::OnceLock;

mod arith;
mod broadcast;
mod build;
pub mod cond;
mod fast_math;
mod layout;

pub use build::{Binding, Build, Hook};

/// Whether a rule keeps values bit for bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exactness {
    /// both sides are equal in floating point: always on
    Exact,
    /// the sides may round differently: only with `fast_math`
    FastMath,
}

impl Exactness {
    /// How `RULES.md` writes it: `exact` or `fast-math`.
    pub fn name(self) -> &'static str {
        match self {
            Exactness::Exact => "exact",
            Exactness::FastMath => "fast-math",
        }
    }
}

/// One rewrite rule.
pub struct Rule {
    /// its name, in logs, `RULES.md` and `OptimizeOptions::disabled_rules`
    pub name: &'static str,
    /// what it does, in one line
    pub doc: &'static str,
    /// exact or fast-math
    pub exactness: Exactness,
    /// the file of `passes/src/rules/` it lives in
    pub file: &'static str,
    /// the left side, as written
    pub lhs: &'static str,
    /// the right side, as written
    pub rhs: &'static str,
    /// the egg rewrite
    pub rewrite: Rewrite<TNode, TensorAnalysis>,
}

impl Rule {
    /// A rule from an egg rewrite of `lhs` to `rhs` (the rule files use `rule!`). Panics
    /// when egg's own applier would add nodes: a right side that builds nodes must go through
    /// [`Build`], which type-checks them (rules are built once, in tests first).
    pub fn new(
        name: &'static str,
        exactness: Exactness,
        doc: &'static str,
        (lhs, rhs): (&'static str, &'static str),
        rewrite: Rewrite<TNode, TensorAnalysis>,
    ) -> Rule {
        if let Some(ast) = rewrite.applier.get_pattern_ast() {
            let builds = ast.iter().any(|n| matches!(n, egg::ENodeOrVar::ENode(_)));
            assert!(
                !builds,
                "rule `{name}`: a right side that adds nodes must be written `build \"{rhs}\"`"
            );
        }
        if let Err(e) = rhs.parse::<Pattern<TNode>>() {
            panic!("rule `{name}`: right side `{rhs}`: {e}");
        }
        Rule {
            name,
            doc,
            exactness,
            file: "",
            lhs,
            rhs,
            rewrite,
        }
    }
}

/// A rule: `rule!(NAME, Exact | FastMath, DOC, LHS => RHS if COND ...)` with egg's own applier
/// (RHS a variable), or `LHS => build RHS (with HOOK(ARGS))? if COND ...` with [`Build`].
macro_rules! rule {
    ($name:literal, $ex:ident, $doc:literal,
     $lhs:literal => build $rhs:literal $(with $hook:ident $args:tt)? $(if $cond:expr)*) => {
        $crate::rules::Rule::new(
            $name,
            $crate::rules::Exactness::$ex,
            $doc,
            ($lhs, $rhs),
            egg::rewrite!($name;
                $lhs => { $crate::rules::Build::new($lhs, $rhs) $(.with($hook $args))? }
                $(if $cond)*),
        )
    };
    ($name:literal, $ex:ident, $doc:literal, $lhs:literal => $rhs:literal $(if $cond:expr)*) => {
        $crate::rules::Rule::new(
            $name,
            $crate::rules::Exactness::$ex,
            $doc,
            ($lhs, $rhs),
            egg::rewrite!($name; $lhs => $rhs $(if $cond)*),
        )
    };
}
pub(crate) use rule;

fn family(file: &'static str, rules: Vec<Rule>) -> impl Iterator<Item = Rule> {
    rules.into_iter().map(move |mut r| {
        r.file = file;
        r
    })
}

/// Every rule, in the order the e-graph applies them (built once per process).
pub fn all() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        family("arith.rs", arith::rules())
            .chain(family("layout.rs", layout::rules()))
            .chain(family("broadcast.rs", broadcast::rules()))
            .chain(family("fast_math.rs", fast_math::rules()))
            .collect()
    })
}

/// The rule called `name`.
pub fn named(name: &str) -> Option<&'static Rule> {
    all().iter().find(|r| r.name == name)
}

/// The rules an optimisation runs: the exact ones, the fast-math ones with `fast_math`,
/// less those named in `disabled` (an unknown name is an error).
pub fn select(fast_math: bool, disabled: &[String]) -> Result<Vec<&'static Rule>, PassError> {
    if let Some(unknown) = disabled.iter().find(|d| named(d).is_none()) {
        return Err(PassError::UnknownRule(
            unknown.clone(),
            all().iter().map(|r| r.name).collect::<Vec<_>>().join(", "),
        ));
    }
    Ok(all()
        .iter()
        .filter(|r| fast_math || r.exactness == Exactness::Exact)
        .filter(|r| !disabled.iter().any(|d| d == r.name))
        .collect())
}
