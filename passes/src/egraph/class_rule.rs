//! [`ClassRule`]: a rule that looks at one e-class at a time and adds nodes equal to it,
//! wrapped as an egg `Rewrite` so that egg's `Runner` applies it with its node, iteration and
//! time limits. The fusion rules ([`super::fusion`]) are class rules: they build kernel groups,
//! which no pattern can describe. The rewrite rules are egg patterns (`crate::rules`).

use super::analysis::{ClassData, TensorAnalysis};
use super::lang::TNode;
use egg::{Applier, EGraph, Id, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};

/// The e-graph kiln optimises.
pub type TEGraph = EGraph<TNode, TensorAnalysis>;

/// A rule applied class by class: returns ids equal to the class (added as needed).
#[derive(Clone)]
pub struct ClassRule {
    /// the rule's name (in logs)
    pub name: &'static str,
    /// equal forms of the class
    pub apply: fn(&mut TEGraph, Id) -> Vec<Id>,
}

impl Searcher<TNode, TensorAnalysis> for ClassRule {
    fn search_eclass_with_limit(
        &self,
        egraph: &TEGraph,
        eclass: Id,
        _limit: usize,
    ) -> Option<SearchMatches<'_, TNode>> {
        matches!(egraph[eclass].data, ClassData::Tensor { .. }).then(|| SearchMatches {
            eclass,
            substs: vec![Subst::default()],
            ast: None,
        })
    }

    fn vars(&self) -> Vec<Var> {
        vec![]
    }
}

impl Applier<TNode, TensorAnalysis> for ClassRule {
    fn apply_one(
        &self,
        egraph: &mut TEGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TNode>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        let mut changed = Vec::new();
        for id in (self.apply)(egraph, eclass) {
            if egraph.union(eclass, id) {
                changed.push(eclass);
            }
        }
        changed
    }
}

impl ClassRule {
    /// As an egg rewrite.
    pub fn rewrite(&self) -> Rewrite<TNode, TensorAnalysis> {
        Rewrite::new(self.name, self.clone(), self.clone()).expect("class rules bind no vars")
    }
}
