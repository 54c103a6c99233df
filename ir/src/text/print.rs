//! The printer: a deterministic rendering of graphs in the textual IR.
//!
//! Layout of one instruction line (every rule is fixed, so equal graphs print equally):
//!
//! ```text
//!   %0 = matmul %x, %w1                      : f32[B,4096]   # models/mlp.rs:14:17
//! ```
//!
//! * two spaces of indent, then `%N = OPNAME operands {attrs}`; non-input nodes are
//!   numbered `%0`, `%1`, ... in graph order (skipping numbers that an input already uses
//!   as its name), inputs keep their names;
//! * the instruction is padded with spaces to [`INST_WIDTH`] characters, with at least
//!   one space, then `: TYPE`;
//! * with a source location, the type is padded the same way to [`TYPE_WIDTH`]
//!   characters, then `# LOC`. Line breaks inside a location print as spaces and the
//!   location is trimmed (the parser reads it back trimmed); an empty one is not printed.

use crate::{Arg, Graph, Node, NodeId, Op};
use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write};

/// Width, in characters, that an instruction is padded to before its `: TYPE`.
pub const INST_WIDTH: usize = 41;
/// Width, in characters, that a type is padded to before its `# LOC` comment.
pub const TYPE_WIDTH: usize = 14;

/// Prints one graph: header, one line per non-input node, `return`, `}` and a final
/// newline.
pub fn print_graph(g: &Graph) -> String {
    let names = value_names(g);
    let name_of = |id: NodeId| match names.get(&id) {
        Some(n) => format!("%{n}"),
        None => format!("%{id}"),
    };
    let mut out = String::new();
    let params: Vec<String> = g
        .inputs()
        .iter()
        .map(|(name, id)| format!("%{name}: {}", type_of(g, *id)))
        .collect();
    let results: Vec<String> = g.outputs().iter().map(|o| type_of(g, *o)).collect();
    let results = if results.len() == 1 {
        results[0].clone()
    } else {
        format!("({})", results.join(", "))
    };
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "graph @{}({}) -> {results} {{",
        g.name(),
        params.join(", ")
    );
    for (id, node) in g.nodes() {
        if node.op != Op::Input {
            out += &instruction_line(&name_of(id), node, &name_of);
        }
    }
    let rets: Vec<String> = g.outputs().iter().map(|o| name_of(*o)).collect();
    let _ = writeln!(out, "  return {}", rets.join(", "));
    out.push_str("}\n");
    out
}

/// Prints several graphs, separated by a blank line.
pub fn print_module(graphs: &[Graph]) -> String {
    graphs
        .iter()
        .map(print_graph)
        .collect::<Vec<_>>()
        .join("\n")
}

impl fmt::Display for Graph {
    /// The textual IR of the graph, as [`print_graph`] gives it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print_graph(self))
    }
}

/// The printed name (without `%`) of every node: inputs keep theirs, the others are
/// numbered in graph order, skipping numbers that inputs use.
fn value_names(g: &Graph) -> HashMap<NodeId, String> {
    let taken: HashSet<&str> = g.inputs().iter().map(|(n, _)| n.as_str()).collect();
    let mut names: HashMap<NodeId, String> =
        g.inputs().iter().map(|(n, id)| (*id, n.clone())).collect();
    let mut next = 0usize;
    for (id, node) in g.nodes() {
        if node.op == Op::Input || names.contains_key(&id) {
            continue;
        }
        while taken.contains(next.to_string().as_str()) {
            next += 1;
        }
        names.insert(id, next.to_string());
        next += 1;
    }
    names
}

fn type_of(g: &Graph, id: NodeId) -> String {
    match g.try_node(id) {
        Some(n) => n.ty.to_string(),
        None => format!("<no node {id}>"),
    }
}

/// `s` followed by spaces up to `width` characters, and at least one space.
fn pad(s: &str, width: usize) -> String {
    let n = s.chars().count();
    format!("{s}{}", " ".repeat(width.saturating_sub(n).max(1)))
}

/// `%N = OPNAME operands {attrs}` without indent or type.
fn instruction(name: &str, node: &Node, name_of: &dyn Fn(NodeId) -> String) -> String {
    let mut s = format!("{name} = {}", node.op.name());
    for (i, a) in node.args.iter().enumerate() {
        s.push_str(if i == 0 { " " } else { ", " });
        match a {
            Arg::Value(v) => s.push_str(&name_of(*v)),
            Arg::Scalar(x) => {
                let _ = write!(s, "{x}");
            }
        }
    }
    let attrs = node.op.attrs();
    if !attrs.is_empty() {
        let items: Vec<String> = attrs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        let _ = write!(s, " {{{}}}", items.join(", "));
    }
    s
}

/// The whole line of a node, with indent, type, location and newline.
fn instruction_line(name: &str, node: &Node, name_of: &dyn Fn(NodeId) -> String) -> String {
    let inst = pad(&instruction(name, node, name_of), INST_WIDTH);
    let ty = node.ty.to_string();
    let loc = node
        .loc
        .as_deref()
        .map(|l| l.replace(['\n', '\r'], " ").trim().to_string())
        .filter(|l| !l.is_empty());
    match loc {
        Some(l) => format!("  {inst}: {}# {l}\n", pad(&ty, TYPE_WIDTH)),
        None => format!("  {inst}: {ty}\n"),
    }
}

/// The op without spaces: `transpose{dim0=0,dim1=1}`, `sum{dims=[1],keepdim=false}`, `neg`;
/// one token of an s-expression (e-graph patterns and dumps print ops this way).
/// [`super::parse_op`] reads it back.
pub fn compact_op(op: &crate::Op) -> String {
    fn value(v: &crate::AttrValue, out: &mut String) {
        match v {
            crate::AttrValue::List(items) => {
                out.push('[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    value(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = op.name().to_string();
    let attrs = op.attrs();
    if !attrs.is_empty() {
        out.push('{');
        for (i, (k, v)) in attrs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push('=');
            value(v, &mut out);
        }
        out.push('}');
    }
    out
}
