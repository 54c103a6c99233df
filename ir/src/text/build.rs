//! The semantic half of the parser: reads graphs line by line with [`Parser`] and builds
//! them with [`Graph::add_input`] and [`Graph::add_op`], checking names, declared types,
//! return types and finally the verifier. Every error carries the position of the token
//! it is about.

use super::error::{ParseError, Pos};
use super::lex::Tok;
use super::parse::{check_size, AttrList, Operand, PResult, Parser};
use crate::{verify, Arg, Graph, GraphError, NodeId, Op, OpParseError, TensorType, VerifyError};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Parses every graph in `text` (zero or more, separated by blank lines).
///
/// # Errors
///
/// The first problem in text order: a malformed token, a syntax error, an unknown op or
/// attribute, an undefined or redefined value, an op that rejects its operands, a
/// declared type that is not the inferred one, a `return` that does not match the
/// header, or a graph that fails [`crate::verify()`].
pub fn parse_module(text: &str) -> PResult<Vec<Graph>> {
    let mut p = Parser::new(text);
    let mut graphs = Vec::new();
    loop {
        p.skip_trivia();
        if *p.tok() == Tok::Eof {
            return Ok(graphs);
        }
        graphs.push(graph(&mut p)?);
    }
}

/// Parses a text that holds exactly one graph.
///
/// # Errors
///
/// As [`parse_module`], and when the text holds no graph or more than one.
pub fn parse_graph(text: &str) -> PResult<Graph> {
    let mut p = Parser::new(text);
    p.skip_trivia();
    let g = graph(&mut p)?;
    p.skip_trivia();
    if *p.tok() != Tok::Eof {
        return Err(p.unexpected("the end of the text after one graph"));
    }
    Ok(g)
}

/// One graph being built: its names and where each node was written.
struct Builder {
    g: Graph,
    defs: HashMap<String, (NodeId, Pos)>,
    node_pos: HashMap<NodeId, Pos>,
    bound: HashSet<Arc<str>>,
}

impl Builder {
    fn define(&mut self, name: String, id: NodeId, pos: Pos) {
        self.node_pos.insert(id, pos);
        self.defs.insert(name, (id, pos));
    }

    fn check_new(&self, name: &str, pos: Pos) -> PResult<()> {
        match self.defs.get(name) {
            Some((_, first)) => Err(ParseError::new(
                pos,
                format!("redefinition of `%{name}` (first defined at {first})"),
            )),
            None => Ok(()),
        }
    }

    fn lookup(&self, name: &str, pos: Pos) -> PResult<NodeId> {
        match self.defs.get(name) {
            Some((id, _)) => Ok(*id),
            None => Err(ParseError::new(
                pos,
                format!("use of undefined value `%{name}`"),
            )),
        }
    }
}

fn graph(p: &mut Parser) -> PResult<Graph> {
    let start = p.expect_word("graph", "`graph`")?;
    let name = match p.tok() {
        Tok::Global(n) => n.clone(),
        _ => return Err(p.unexpected("the graph's name (`@name`)")),
    };
    p.bump();
    let mut b = Builder {
        g: Graph::new(name.clone()),
        defs: HashMap::new(),
        node_pos: HashMap::new(),
        bound: HashSet::new(),
    };
    p.expect(&Tok::LParen, "`(` and the graph's inputs")?;
    params(p, &mut b)?;
    p.expect(&Tok::Arrow, "`->` and the result type")?;
    let results = result_types(p)?;
    p.expect(&Tok::LBrace, "`{`")?;
    p.end_of_line("end of line after `{`")?;
    loop {
        p.skip_trivia();
        match p.tok() {
            Tok::Value(_) => instruction(p, &mut b)?,
            Tok::Ident(w) if w == "return" => break,
            Tok::RBrace => {
                let msg = format!("expected `return` before the `}}` that closes @{name}");
                return Err(ParseError::new(p.pos(), msg));
            }
            _ => return Err(p.unexpected("an instruction (`%name = op ...`) or `return`")),
        }
    }
    ret(p, &mut b, &results)?;
    p.skip_trivia();
    let after = if matches!(p.tok(), Tok::Value(_)) {
        " (`return` is the last line of a graph)"
    } else {
        ""
    };
    p.expect(&Tok::RBrace, &format!("`}}` to close graph @{name}{after}"))?;
    p.end_of_line("end of line after `}`")?;
    verify(&b.g).map_err(|e| {
        let at = verify_node(&e).and_then(|n| {
            let found = b.node_pos.iter().find(|(id, _)| id.index() == n);
            found.map(|(_, pos)| *pos)
        });
        let msg = format!("graph @{name} fails verification: {e}");
        ParseError::new(at.unwrap_or(start), msg)
    })?;
    Ok(b.g)
}

/// The node an error of the verifier is about, if any.
fn verify_node(e: &VerifyError) -> Option<usize> {
    match e {
        VerifyError::Type { node, .. }
        | VerifyError::TypeMismatch { node, .. }
        | VerifyError::UseBeforeDef { node, .. }
        | VerifyError::BadInput { node, .. }
        | VerifyError::UnboundSymbol { node, .. } => Some(*node),
        VerifyError::BadOutputs { .. } => None,
    }
}

/// `%a: T, %b: T)` after the `(`; newlines may separate inputs.
fn params(p: &mut Parser, b: &mut Builder) -> PResult<()> {
    p.skip_trivia();
    if p.eat(&Tok::RParen) {
        return Ok(());
    }
    loop {
        let (name, pos) = p.value_name("an input (`%name: TYPE`) or `)`")?;
        b.check_new(&name, pos)?;
        p.expect(&Tok::Colon, &format!("`:` and the type of `%{name}`"))?;
        let (ty, _) = p.tensor_type()?;
        b.bound.extend(ty.shape.symbols());
        let id =
            b.g.add_input(name.clone(), ty)
                .map_err(|e| ParseError::new(pos, e.to_string()))?;
        b.define(name, id, pos);
        p.skip_trivia();
        if p.eat(&Tok::RParen) {
            return Ok(());
        }
        p.expect(&Tok::Comma, "`,` or `)`")?;
        p.skip_trivia();
    }
}

/// `T` or `(T1, T2, ...)` after the `->`.
fn result_types(p: &mut Parser) -> PResult<Vec<TensorType>> {
    if !p.eat(&Tok::LParen) {
        return Ok(vec![p.tensor_type()?.0]);
    }
    let mut out = Vec::new();
    p.skip_trivia();
    if p.eat(&Tok::RParen) {
        return Ok(out);
    }
    loop {
        out.push(p.tensor_type()?.0);
        p.skip_trivia();
        if p.eat(&Tok::RParen) {
            return Ok(out);
        }
        p.expect(&Tok::Comma, "`,` or `)`")?;
        p.skip_trivia();
    }
}

/// One op without operands, as an instruction writes it: `NAME` or `NAME {attr = value, ...}`
/// (spaces optional, so the compact form of [`super::compact_op`] reads back). Attributes
/// whose default comes from an operand (`layer_norm`'s `ndim`) must be written; the printed
/// forms write every attribute.
pub fn parse_op(text: &str) -> PResult<Op> {
    let mut p = Parser::new(text);
    let pos = p.pos();
    let name = match p.tok() {
        Tok::Ident(w) => w.clone(),
        _ => return Err(p.unexpected("an op name")),
    };
    p.bump();
    let attrs = if *p.tok() == Tok::LBrace {
        p.attrs()?
    } else {
        AttrList::default()
    };
    if *p.tok() != Tok::Eof {
        return Err(p.unexpected("`{` or the end of the op"));
    }
    let op =
        Op::from_parts(&name, &attrs.items).map_err(|e| ParseError::new(pos, e.to_string()))?;
    if let Some(shape) = attr_shape(&op) {
        check_size(shape).map_err(|m| ParseError::new(pos, m))?;
    }
    Ok(op)
}

/// One instruction line as written.
struct Line {
    def: String,
    def_pos: Pos,
    op_name: String,
    op_pos: Pos,
    operands: Vec<(Operand, Pos)>,
    attrs: AttrList,
    declared: TensorType,
    ty_pos: Pos,
    loc: Option<String>,
}

/// `%N = op operands {attrs} : TYPE  # loc`, with its newline: reads it, then adds it.
fn instruction(p: &mut Parser, b: &mut Builder) -> PResult<()> {
    let line = read_line(p)?;
    b.check_new(&line.def, line.def_pos)?;
    let (op, args) = resolve(b, &line)?;
    let op_pos = line.op_pos;
    let id = b.g.add_op(op, &args, line.loc).map_err(|e| match e {
        GraphError::Type { source, .. } => ParseError::new(op_pos, source.to_string()),
        other => ParseError::new(op_pos, other.to_string()),
    })?;
    let inferred = b.g.node(id).ty.clone();
    check_size(&inferred.shape).map_err(|m| ParseError::new(op_pos, m))?;
    if let Some(s) = inferred
        .shape
        .symbols()
        .iter()
        .find(|s| !b.bound.contains(*s))
    {
        let msg = format!(
            "symbolic dim `{s}` of the result {inferred} is not bound by any input's shape"
        );
        return Err(ParseError::new(op_pos, msg));
    }
    if line.declared != inferred {
        let msg = format!(
            "declared type {} but the op gives {inferred}",
            line.declared
        );
        return Err(ParseError::new(line.ty_pos, msg));
    }
    b.define(line.def, id, line.def_pos);
    Ok(())
}

/// The syntax of one instruction line.
fn read_line(p: &mut Parser) -> PResult<Line> {
    let (def, def_pos) = p.value_name("a value name")?;
    p.expect(&Tok::Equals, &format!("`=` after `%{def}`"))?;
    let op_pos = p.pos();
    let op_name = match p.tok() {
        Tok::Ident(w) => w.clone(),
        _ => return Err(p.unexpected("an op name")),
    };
    p.bump();
    let mut operands = Vec::new();
    if p.at_operand() {
        loop {
            operands.push(p.operand()?);
            if !p.eat(&Tok::Comma) {
                break;
            }
        }
    }
    let brace = p.pos();
    let attrs = if *p.tok() == Tok::LBrace {
        p.attrs()?
    } else {
        AttrList::default()
    };
    let expected = if brace != p.pos() {
        "`:` and the result type"
    } else if operands.is_empty() {
        "an operand, `{`, or `:` and the result type"
    } else {
        "`,`, `{`, or `:` and the result type"
    };
    p.expect(&Tok::Colon, expected)?;
    let (declared, ty_pos) = p.tensor_type()?;
    let loc = p.end_of_line("end of line (or a `# location` comment) after the type")?;
    Ok(Line {
        def,
        def_pos,
        op_name,
        op_pos,
        operands,
        attrs,
        declared,
        ty_pos,
        loc,
    })
}

/// The op and operands of a line, with errors at the op, the operand or the attribute
/// they are about.
fn resolve(b: &Builder, line: &Line) -> PResult<(Op, Vec<Arg>)> {
    let mut args = Vec::with_capacity(line.operands.len());
    for (o, pos) in &line.operands {
        args.push(match o {
            Operand::Value(v) => Arg::Value(b.lookup(v, *pos)?),
            Operand::Scalar(s) => Arg::Scalar(*s),
        });
    }
    // the operands' types, for the defaults that depend on them (`layer_norm`'s `ndim`)
    let types: Vec<crate::ArgType> = args
        .iter()
        .map(|a| match a {
            Arg::Value(v) => crate::ArgType::Tensor(b.g.node(*v).ty.clone()),
            Arg::Scalar(s) => crate::ArgType::Scalar(*s),
        })
        .collect();
    let op = Op::from_parts_with(&line.op_name, &line.attrs.items, &types);
    if let Err(e @ OpParseError::UnknownOp(_)) = &op {
        return Err(ParseError::new(line.op_pos, e.to_string()));
    }
    let attr_pos = |name: &str| {
        let items = &line.attrs.items;
        let i = items.iter().position(|(k, _)| k == name);
        i.map_or(line.op_pos, |i| line.attrs.pos[i])
    };
    let op = op.map_err(|e| {
        let pos = match &e {
            OpParseError::UnknownAttr { attr, .. } => attr_pos(attr),
            OpParseError::BadAttr { attr, .. } => attr_pos(attr),
            _ => line.op_pos,
        };
        ParseError::new(pos, e.to_string())
    })?;
    if let Some(shape) = attr_shape(&op) {
        check_size(shape).map_err(|m| ParseError::new(attr_pos("shape"), m))?;
    }
    check_operand_sizes(b, &args).map_err(|m| ParseError::new(line.op_pos, m))?;
    Ok((op, args))
}

/// The shape attribute of an op, if it has one.
fn attr_shape(op: &Op) -> Option<&crate::Shape> {
    match op {
        Op::Full { shape, .. }
        | Op::Rand { shape, .. }
        | Op::Randn { shape, .. }
        | Op::FromVec { shape, .. }
        | Op::Reshape { shape }
        | Op::Expand { shape } => Some(shape),
        _ => None,
    }
}

/// Fails when the operands' constant dims add up to more than `MAX_ELEMS`, so that no
/// op (`cat` adds sizes) can overflow while inferring its type.
fn check_operand_sizes(b: &Builder, args: &[Arg]) -> Result<(), String> {
    let mut total = 0usize;
    for a in args {
        if let Arg::Value(v) = a {
            for d in b.g.node(*v).ty.shape.dims() {
                total = total.saturating_add(d.as_const().unwrap_or(0));
            }
        }
    }
    if total > super::parse::MAX_ELEMS {
        return Err("the operands are too large (their sizes add up to more than 2^48)".into());
    }
    Ok(())
}

/// `return %a, %b` with its newline; checks the values against the header's types.
fn ret(p: &mut Parser, b: &mut Builder, results: &[TensorType]) -> PResult<()> {
    let ret_pos = p.bump().pos;
    let mut outs = Vec::new();
    loop {
        let (name, pos) = p.value_name("a value to return (`%name`)")?;
        outs.push((b.lookup(&name, pos)?, name, pos));
        if !p.eat(&Tok::Comma) {
            break;
        }
    }
    p.end_of_line("`,` or end of line")?;
    if outs.len() != results.len() {
        let msg = format!(
            "the header declares {} result(s) but `return` gives {}",
            results.len(),
            outs.len()
        );
        return Err(ParseError::new(ret_pos, msg));
    }
    for (i, ((id, name, pos), want)) in outs.iter().zip(results).enumerate() {
        let got = &b.g.node(*id).ty;
        if got != want {
            let msg = format!(
                "`%{name}` has type {got} but the header declares {want} for result {}",
                i + 1
            );
            return Err(ParseError::new(*pos, msg));
        }
    }
    let ids = outs.into_iter().map(|(id, _, _)| id).collect();
    b.g.set_outputs(ids)
        .map_err(|e| ParseError::new(ret_pos, e.to_string()))
}
