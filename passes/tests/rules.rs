//! The rewrite rules as data: one line per rule test (egg's `test_fn!` style), each running
//! only the named rule on a tiny typed e-graph; negative cases where a condition must refuse;
//! `RULES.md` in sync with the code; the e-graph language's text round trip and the
//! soundness of matching op variables in large e-classes; switching rules off.

use egg::{Id, Language, RecExpr, Runner, Searcher};
use kiln_ir::text::parse_module;
use kiln_ir::{DType, Dim, TensorType};
use kiln_passes::egraph::lang::TNode;
use kiln_passes::egraph::sym::OpSym;
use kiln_passes::egraph::{TEGraph, TensorAnalysis};
use kiln_passes::optimize::{optimize, OptimizeOptions};
use kiln_passes::rules::{self, Exactness};
use kiln_passes::PassError;
use std::collections::BTreeSet;

/// `f32[2,3]` (symbols allowed: `f32[B,3]`).
fn ty(s: &str) -> TensorType {
    let (dtype, dims) = s.split_once('[').expect("dtype[dims]");
    let dims = dims.trim_end_matches(']');
    let shape = dims
        .split(',')
        .filter(|d| !d.is_empty())
        .map(|d| match d.trim().parse::<usize>() {
            Ok(n) => Dim::Const(n),
            Err(_) => Dim::sym(d.trim()),
        })
        .collect();
    TensorType::new(dtype.parse::<DType>().expect("a dtype"), shape)
}

/// An e-graph whose inputs `in0, in1, ...` have the space-separated `types`.
fn egraph(types: &str) -> TEGraph {
    let analysis = TensorAnalysis {
        input_types: types.split_whitespace().map(ty).collect(),
        ..TensorAnalysis::default()
    };
    TEGraph::new(analysis)
}

/// Runs only rule `rule` on `start` (inputs of `types`): is `start` then equal to `goal`?
fn rewrites(rule: &str, types: &str, start: &str, goal: &str) -> bool {
    let r = rules::named(rule).unwrap_or_else(|| panic!("no rule `{rule}`"));
    let mut eg = egraph(types);
    let s = eg.add_expr(&start.parse::<RecExpr<TNode>>().unwrap());
    eg.rebuild();
    let runner = Runner::default()
        .with_iter_limit(4)
        .with_egraph(eg)
        .run([&r.rewrite]);
    let mut eg = runner.egraph;
    let g = eg.add_expr(&goal.parse::<RecExpr<TNode>>().unwrap());
    eg.find(s) == eg.find(g)
}

/// `rule_test!(test, "rule", "input types", "start" => "goal")`: the rule rewrites start to
/// goal; `!=>`: it must not (a condition refuses).
macro_rules! rule_test {
    ($test:ident, $rule:literal, $types:literal, $start:literal => $goal:literal) => {
        #[test]
        fn $test() {
            assert!(
                rewrites($rule, $types, $start, $goal),
                "`{}` should rewrite {} to {}",
                $rule,
                $start,
                $goal
            );
        }
    };
    ($test:ident, $rule:literal, $types:literal, $start:literal !=> $goal:literal) => {
        #[test]
        fn $test() {
            assert!(
                !rewrites($rule, $types, $start, $goal),
                "`{}` must not rewrite {} to {}",
                $rule,
                $start,
                $goal
            );
        }
    };
}

// arith.rs
rule_test!(mul_one, "mul-one", "f32[2,3]", "(mul in0 1.0)" => "in0");
rule_test!(mul_one_int_literal, "mul-one", "i32[2,3]", "(mul in0 1)" => "in0");
rule_test!(mul_one_constant_tensor, "mul-one", "f32[2,3]", "(mul in0 (full{shape=[2,3],value=1.0,dtype=f32}))" => "in0");
rule_test!(mul_one_refuses_a_promoting_literal, "mul-one", "i32[2,3]", "(mul in0 1.0)" !=> "in0");
rule_test!(mul_one_refuses_a_broadcasting_one, "mul-one", "f32[3]", "(mul in0 (full{shape=[2,3],value=1.0,dtype=f32}))" !=> "in0");
rule_test!(mul_one_refuses_true, "mul-one", "i32[2,3]", "(mul in0 true)" !=> "in0");
rule_test!(one_mul, "one-mul", "f32[2,3]", "(mul 1.0 in0)" => "in0");
rule_test!(add_zero, "add-zero", "f32[2,3]", "(add in0 -0.0)" => "in0");
rule_test!(add_zero_int, "add-zero", "i32[2,3]", "(add in0 0)" => "in0");
rule_test!(add_zero_refuses_plus_zero_for_floats, "add-zero", "f32[2,3]", "(add in0 0.0)" !=> "in0");
rule_test!(add_zero_refuses_an_int_zero_for_floats, "add-zero", "f32[2,3]", "(add in0 0)" !=> "in0");
rule_test!(add_zero_refuses_a_plus_zero_tensor, "add-zero", "f32[2,3]", "(add in0 (full{shape=[2,3],value=0.0,dtype=f32}))" !=> "in0");
rule_test!(add_zero_refuses_a_dtype_change, "add-zero", "i32[2,3]", "(add in0 -0.0)" !=> "in0");
rule_test!(zero_add, "zero-add", "f32[2,3]", "(add -0.0 in0)" => "in0");
rule_test!(zero_add_refuses_plus_zero_for_floats, "zero-add", "f32[2,3]", "(add 0.0 in0)" !=> "in0");
rule_test!(zero_add_refuses_a_broadcasting_zero, "zero-add", "f32[3]", "(add (full{shape=[2,3],value=-0.0,dtype=f32}) in0)" !=> "in0");
rule_test!(sub_zero, "sub-zero", "f32[2,3]", "(sub in0 0.0)" => "in0");
rule_test!(sub_zero_int_literal, "sub-zero", "f32[2,3]", "(sub in0 0)" => "in0");
rule_test!(sub_zero_refuses_minus_zero_for_floats, "sub-zero", "f32[2,3]", "(sub in0 -0.0)" !=> "in0");
rule_test!(sub_zero_refuses_zero_minus_x, "sub-zero", "f32[2,3]", "(sub 0.0 in0)" !=> "in0");
rule_test!(div_one, "div-one", "f32[2,3]", "(div in0 1.0)" => "in0");
rule_test!(div_one_refuses_an_int_dividend, "div-one", "i64[2,3]", "(div in0 1)" !=> "in0");
rule_test!(neg_neg, "neg-neg", "f32[2,3]", "(neg (neg in0))" => "in0");
rule_test!(where_same, "where-same", "f32[2,3] bool[2,3]", "(where in1 in0 in0)" => "in0");
rule_test!(where_same_refuses_a_broadcasting_condition, "where-same", "f32[2,3] bool[4,2,3]", "(where in1 in0 in0)" !=> "in0");
rule_test!(where_same_refuses_different_values, "where-same", "f32[2,3] bool[2,3] f32[2,3]", "(where in1 in0 in2)" !=> "in0");

// layout.rs
rule_test!(transpose_noop, "transpose-noop", "f32[2,3,4]", "(transpose{dim0=1,dim1=-2} in0)" => "in0");
rule_test!(transpose_noop_refuses_a_swap, "transpose-noop", "f32[2,2]", "(transpose{dim0=0,dim1=1} in0)" !=> "in0");
rule_test!(transpose_transpose, "transpose-transpose", "f32[2,3,4]", "(transpose{dim0=-1,dim1=-2} (transpose{dim0=1,dim1=2} in0))" => "in0");
rule_test!(transpose_transpose_refuses_other_swaps, "transpose-transpose", "f32[2,3,4]", "(transpose{dim0=1,dim1=2} (transpose{dim0=0,dim1=1} in0))" !=> "(transpose{dim0=0,dim1=2} in0)");
rule_test!(permute_noop, "permute-noop", "f32[2,3,4]", "(permute{dims=[0,1,2]} in0)" => "in0");
rule_test!(permute_noop_refuses_a_permutation, "permute-noop", "f32[2,2,2]", "(permute{dims=[1,0,2]} in0)" !=> "in0");
rule_test!(permute_permute, "permute-permute", "f32[2,3,4]", "(permute{dims=[2,0,1]} (permute{dims=[1,2,0]} in0))" => "(permute{dims=[0,1,2]} in0)");
rule_test!(permute_permute_composes, "permute-permute", "f32[2,3,4]", "(permute{dims=[1,0,2]} (permute{dims=[0,2,1]} in0))" => "(permute{dims=[2,0,1]} in0)");
rule_test!(reshape_noop, "reshape-noop", "f32[2,3]", "(reshape{shape=[2,3]} in0)" => "in0");
rule_test!(reshape_noop_refuses_a_new_shape, "reshape-noop", "f32[2,3]", "(reshape{shape=[3,2]} in0)" !=> "in0");
rule_test!(reshape_reshape, "reshape-reshape", "f32[2,3,4]", "(reshape{shape=[24]} (reshape{shape=[6,4]} in0))" => "(reshape{shape=[24]} in0)");
rule_test!(expand_noop, "expand-noop", "f32[2,3]", "(expand{shape=[2,3]} in0)" => "in0");
rule_test!(expand_noop_refuses_a_broadcast, "expand-noop", "f32[1,3]", "(expand{shape=[2,3]} in0)" !=> "in0");
rule_test!(cast_noop, "cast-noop", "f32[2,3]", "(cast{dtype=f32} in0)" => "in0");
rule_test!(cast_noop_refuses_a_conversion, "cast-noop", "f32[2,3]", "(cast{dtype=f64} in0)" !=> "in0");
rule_test!(contiguous, "contiguous", "f32[2,3]", "(contiguous in0)" => "in0");
rule_test!(unary_transpose, "unary-transpose", "f32[2,3]", "(exp (transpose{dim0=0,dim1=1} in0))" => "(transpose{dim0=0,dim1=1} (exp in0))");
rule_test!(unary_permute, "unary-permute", "f32[2,3,4]", "(neg (permute{dims=[2,0,1]} in0))" => "(permute{dims=[2,0,1]} (neg in0))");
rule_test!(cast_transpose, "cast-transpose", "f32[2,3]", "(cast{dtype=f16} (transpose{dim0=0,dim1=1} in0))" => "(transpose{dim0=0,dim1=1} (cast{dtype=f16} in0))");
rule_test!(cast_permute, "cast-permute", "f32[2,3,4]", "(cast{dtype=i32} (permute{dims=[2,0,1]} in0))" => "(permute{dims=[2,0,1]} (cast{dtype=i32} in0))");
rule_test!(binary_transpose, "binary-transpose", "f32[2,3] f32[2,3]", "(add (transpose{dim0=0,dim1=1} in0) (transpose{dim0=0,dim1=1} in1))" => "(transpose{dim0=0,dim1=1} (add in0 in1))");
rule_test!(binary_transpose_refuses_two_shapes, "binary-transpose", "f32[2,3] f32[1,3]", "(mul (transpose{dim0=0,dim1=1} in0) (transpose{dim0=0,dim1=1} in1))" !=> "(transpose{dim0=0,dim1=1} (mul in0 in1))");
rule_test!(binary_transpose_refuses_two_transposes, "binary-transpose", "f32[2,3,4] f32[2,3,4]", "(add (transpose{dim0=0,dim1=1} in0) (transpose{dim0=1,dim1=0} in1))" !=> "(transpose{dim0=0,dim1=1} (add in0 in1))");
rule_test!(binary_permute, "binary-permute", "f32[2,3,4] f32[2,3,4]", "(maximum (permute{dims=[2,0,1]} in0) (permute{dims=[2,0,1]} in1))" => "(permute{dims=[2,0,1]} (maximum in0 in1))");
rule_test!(binary_transpose_literal, "binary-transpose-literal", "f32[2,3]", "(mul (transpose{dim0=0,dim1=1} in0) 2.0)" => "(transpose{dim0=0,dim1=1} (mul in0 2.0))");
rule_test!(binary_transpose_literal_refuses_a_tensor, "binary-transpose-literal", "f32[2,3] f32[1]", "(mul (transpose{dim0=0,dim1=1} in0) in1)" !=> "(transpose{dim0=0,dim1=1} (mul in0 in1))");
rule_test!(binary_permute_literal, "binary-permute-literal", "f32[2,3,4]", "(sub (permute{dims=[2,0,1]} in0) 1)" => "(permute{dims=[2,0,1]} (sub in0 1))");

// broadcast.rs
rule_test!(broadcast_lhs, "broadcast-lhs", "f32[3] f32[2,3]", "(add (expand{shape=[2,3]} in0) in1)" => "(add in0 in1)");
rule_test!(broadcast_lhs_refuses_a_smaller_result, "broadcast-lhs", "f32[3] f32[3]", "(add (expand{shape=[2,3]} in0) in1)" !=> "(add in0 in1)");
rule_test!(broadcast_rhs, "broadcast-rhs", "f32[2,3] f32[1,3]", "(mul in0 (expand{shape=[2,3]} in1))" => "(mul in0 in1)");
rule_test!(broadcast_rhs_keeps_an_expanded_0d_of_another_dtype, "broadcast-rhs", "f16[2] f32[]", "(ne in0 (expand{shape=[2]} in1))" !=> "(ne in0 in1)");
rule_test!(broadcast_lhs_drops_an_expanded_0d_of_the_same_dtype, "broadcast-lhs", "f32[] f32[2]", "(lt (expand{shape=[2]} in0) in1)" => "(lt in0 in1)");
rule_test!(broadcast_where_then_keeps_an_expanded_0d_of_another_dtype, "broadcast-where-then", "bool[2] f32[] f16[2]", "(where in0 (expand{shape=[2]} in1) in2)" !=> "(where in0 in1 in2)");
rule_test!(broadcast_where_cond, "broadcast-where-cond", "bool[3] f32[2,3] f32[2,3]", "(where (expand{shape=[2,3]} in0) in1 in2)" => "(where in0 in1 in2)");
rule_test!(broadcast_where_then, "broadcast-where-then", "bool[2,3] f32[3] f32[2,3]", "(where in0 (expand{shape=[2,3]} in1) in2)" => "(where in0 in1 in2)");
rule_test!(broadcast_where_else, "broadcast-where-else", "bool[2,3] f32[2,3] f32[1]", "(where in0 in1 (expand{shape=[2,3]} in2))" => "(where in0 in1 in2)");
rule_test!(broadcast_where_else_refuses_a_smaller_result, "broadcast-where-else", "bool[3] f32[3] f32[1]", "(where in0 in1 (expand{shape=[2,3]} in2))" !=> "(where in0 in1 in2)");

// fast_math.rs
rule_test!(div_literal, "div-literal", "f32[2,3]", "(div in0 4.0)" => "(mul in0 0.25)");
rule_test!(div_literal_refuses_an_int_literal, "div-literal", "f32[2,3]", "(div in0 4)" !=> "(mul in0 0.25)");
rule_test!(mul_mul_literals, "mul-mul-literals", "f32[2,3]", "(mul (mul in0 2.0) 3.0)" => "(mul in0 6.0)");
rule_test!(mul_mul_literals_refuses_a_tensor, "mul-mul-literals", "f32[2,3] f32[2,3]", "(mul (mul in0 in1) 3.0)" !=> "(mul in0 (mul in1 3.0))");

/// The rules `RULES.md` lists: (name, pattern column, kind, file).
fn documented() -> Vec<(String, String, String, String)> {
    let text = include_str!("../RULES.md");
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cols: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cols.len(), 5, "RULES.md: five columns in {l}");
            let name = cols[0].trim_matches('`').to_string();
            (name, cols[1].into(), cols[3].into(), cols[4].into())
        })
        .collect()
}

#[test]
fn rules_md_lists_exactly_the_rules_the_code_has() {
    let doc = documented();
    let names: Vec<&str> = doc.iter().map(|d| d.0.as_str()).collect();
    let code: Vec<&str> = rules::all().iter().map(|r| r.name).collect();
    assert_eq!(names, code, "RULES.md's rules (in order) vs the code's");
    for (r, (name, pattern, kind, file)) in rules::all().iter().zip(&doc) {
        assert_eq!(
            *pattern,
            format!("`{}` → `{}`", r.lhs, r.rhs),
            "{name}: pattern"
        );
        assert_eq!(kind, r.exactness.name(), "{name}: kind");
        assert_eq!(file, r.file, "{name}: file");
    }
}

#[test]
fn every_rule_has_a_unique_name_a_doc_and_a_test() {
    let names: BTreeSet<&str> = rules::all().iter().map(|r| r.name).collect();
    assert_eq!(names.len(), rules::all().len(), "rule names are unique");
    let tests = include_str!("rules.rs");
    for r in rules::all() {
        assert!(!r.doc.is_empty(), "{}: a doc line", r.name);
        assert!(
            tests.contains(&format!(
                "rule_test!({}, \"{}\"",
                r.name.replace('-', "_"),
                r.name
            )),
            "{}: a rule_test! named after it",
            r.name
        );
    }
    let fast: Vec<&str> = rules::all()
        .iter()
        .filter(|r| r.exactness == Exactness::FastMath)
        .map(|r| r.name)
        .collect();
    assert_eq!(fast, ["div-literal", "mul-mul-literals"]);
}

/// Every op of the corpus, decomposed or not, prints as one token and parses back to itself.
#[test]
fn ops_print_as_op_text_and_parse_back() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for g in parse_module(&text).unwrap() {
            let d = kiln_passes::decompose::decompose(&g).unwrap();
            for (_, n) in g.nodes().chain(d.nodes()) {
                if n.op == kiln_ir::Op::Input {
                    continue;
                }
                let node = TNode::op(&n.op, &vec![Id::from(0); n.args.len()]);
                let printed = node.to_string();
                assert!(!printed.contains(' '), "{printed}: one token");
                let back = <TNode as egg::FromOp>::from_op(&printed, node.children().to_vec())
                    .unwrap_or_else(|e| panic!("{printed}: {e}"));
                assert_eq!(back, node, "{printed}");
                seen += 1;
            }
        }
    }
    assert!(seen > 500, "only {seen} ops");
    let e: RecExpr<TNode> = "(add (transpose{dim0=0,dim1=1} in0) 2.5)".parse().unwrap();
    assert_eq!(
        e.to_string().parse::<RecExpr<TNode>>().unwrap(),
        e,
        "egg's printer quotes tokens with braces; its parser reads them back"
    );
    for bad in [
        "(mul in0)",
        "(nosuchop in0)",
        "(in0 in1)",
        "(transpose{?} in0)",
    ] {
        assert!(
            bad.parse::<egg::Pattern<TNode>>().is_err(),
            "{bad} is an error"
        );
    }
}

/// An op variable matches in classes of 50 nodes or more, where egg binary-searches the
/// sorted nodes (and, in debug builds, checks the result against a linear scan).
#[test]
fn op_variables_match_soundly_in_large_classes() {
    let mut eg = egraph("f32[2,2]");
    let mut tops = Vec::new();
    for k in 0..20 {
        // a distinct operand per k, then four nodes over it, all unioned into one class
        let x = format!("(add in0 {k})");
        for op in [
            "neg",
            "exp",
            "transpose{dim0=0,dim1=1}",
            "transpose{dim0=1,dim1=0}",
        ] {
            let e: RecExpr<TNode> = format!("({op} {x})").parse().unwrap();
            tops.push(eg.add_expr(&e));
        }
    }
    for w in tops.windows(2) {
        eg.union(w[0], w[1]);
    }
    eg.rebuild();
    let class = eg.find(tops[0]);
    let nodes = &eg[class].nodes;
    assert!(nodes.len() >= 50, "{} nodes", nodes.len());
    assert!(nodes.windows(2).all(|w| w[0] < w[1]), "sorted");
    // the nodes of one discriminant are adjacent
    let mut runs: Vec<String> = nodes
        .iter()
        .map(|n| format!("{:?}", n.discriminant()))
        .collect();
    runs.dedup();
    let distinct: BTreeSet<&String> = runs.iter().collect();
    assert_eq!(runs.len(), distinct.len(), "{runs:?}");
    for (pattern, want) in [
        ("(transpose{?t} ?x)", 40),
        ("(unary{?u} ?x)", 40),
        ("(neg ?x)", 20),
        ("(transpose{dim0=1,dim1=0} ?x)", 20),
        ("(binary{?b} ?x ?y)", 0),
        ("(transpose{?t} (add in0 ?k))", 40),
    ] {
        let p: egg::Pattern<TNode> = pattern.parse().unwrap();
        let got = p.search_eclass(&eg, class).map_or(0, |m| m.substs.len());
        assert_eq!(got, want, "{pattern}");
    }
}

#[test]
fn ops_are_pooled_once_and_ordered_by_family_then_text() {
    let a = OpSym::new(&kiln_ir::Op::Transpose { dim0: 0, dim1: 1 });
    let b = OpSym::new(&kiln_ir::Op::Transpose { dim0: 0, dim1: 1 });
    assert_eq!(a, b);
    assert_eq!(a.to_string(), "transpose{dim0=0,dim1=1}");
    let add = OpSym::new(&kiln_ir::Op::Binary(kiln_ir::BinaryOp::Add));
    let neg = OpSym::new(&kiln_ir::Op::Unary(kiln_ir::UnaryOp::Neg));
    assert!(add < a && a < neg, "binary < transpose < unary");
}

fn graph(text: &str) -> kiln_ir::Graph {
    parse_module(text).unwrap().remove(0)
}

const TWICE: &str = r#"
graph @twice(%x: f32[4,8]) -> f32[4,8] {
  %0 = transpose %x {dim0 = 0, dim1 = 1}   : f32[8,4]
  %1 = transpose %0 {dim0 = 0, dim1 = 1}   : f32[4,8]
  %2 = mul %1, 1.0                         : f32[4,8]
  return %2
}
"#;

#[test]
fn disabled_rules_do_not_run_and_fired_rules_are_counted() {
    let g = graph(TWICE);
    let opts = OptimizeOptions {
        fuse: false,
        ..OptimizeOptions::default()
    };
    let optimized = optimize(&g, &opts).unwrap();
    let (o, report) = (optimized.extracted, optimized.report);
    let fired: Vec<&str> = report.rules_fired.iter().map(|(r, _)| r.as_str()).collect();
    assert!(
        fired.contains(&"transpose-transpose") && fired.contains(&"mul-one"),
        "{fired:?}"
    );
    assert!(!o.to_string().contains("transpose"), "{o}");
    let off = OptimizeOptions {
        disabled_rules: vec!["transpose-transpose".into()],
        ..opts.clone()
    };
    let optimized = optimize(&g, &off).unwrap();
    let (o, report) = (optimized.extracted, optimized.report);
    assert!(o.to_string().contains("transpose"), "{o}");
    assert!(!report
        .rules_fired
        .iter()
        .any(|(r, _)| r == "transpose-transpose"));
    let bad = OptimizeOptions {
        disabled_rules: vec!["transpose-twice".into()],
        ..opts
    };
    match optimize(&g, &bad) {
        Err(PassError::UnknownRule(name, known)) => {
            assert_eq!(name, "transpose-twice");
            assert!(known.contains("transpose-transpose"), "{known}");
        }
        other => panic!("expected an unknown-rule error, got {other:?}"),
    }
}

#[test]
fn fast_math_rules_run_only_with_fast_math() {
    let g = graph(
        r#"
graph @scale(%x: f32[4,8]) -> f32[4,8] {
  %0 = div %x, 4.0                         : f32[4,8]
  return %0
}
"#,
    );
    let exact = OptimizeOptions {
        fuse: false,
        ..OptimizeOptions::default()
    };
    let report = optimize(&g, &exact).unwrap().report;
    assert!(report.rules_fired.is_empty(), "{:?}", report.rules_fired);
    let fast = OptimizeOptions {
        fast_math: true,
        ..exact
    };
    let report = optimize(&g, &fast).unwrap().report;
    assert_eq!(report.rules_fired, vec![("div-literal".to_string(), 1)]);
}
