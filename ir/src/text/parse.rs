//! The syntax half of the parser: a cursor over the tokens of [`super::lex`] and the
//! recursive-descent rules for the pieces of a line (types, operands, attributes).
//! [`super::build`] drives it line by line and builds the graphs.
//!
//! The grammar is in the [module docs](super).

use super::error::{ParseError, Pos};
use super::lex::{lex, Tok, Token};
use crate::{AttrValue, DType, Dim, Scalar, Shape, TensorType};

/// The largest element count (and constant dim) a parsed shape may have: 2^48. Larger
/// sizes are errors, so that no later size computation can overflow.
pub const MAX_ELEMS: usize = 1 << 48;

/// How deeply attribute lists may nest.
const MAX_LIST_DEPTH: usize = 16;

/// The result of a parsing step.
pub type PResult<T> = Result<T, ParseError>;

/// One operand as written: a value name or a scalar literal.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// `%name` (without the `%`)
    Value(String),
    /// a literal
    Scalar(Scalar),
}

/// A parsed attribute list: names, values, and each name's position.
#[derive(Clone, Debug, Default)]
pub struct AttrList {
    /// `(name, value)` in written order
    pub items: Vec<(String, AttrValue)>,
    /// position of each name
    pub pos: Vec<Pos>,
}

/// A cursor over the tokens of one text.
pub struct Parser {
    toks: Vec<Token>,
    i: usize,
}

/// The dtype names, for error messages.
fn dtype_names() -> String {
    DType::ALL.map(|d| d.name()).join(", ")
}

impl Parser {
    /// A parser at the start of `text`.
    pub fn new(text: &str) -> Parser {
        Parser {
            toks: lex(text),
            i: 0,
        }
    }

    /// The current token (the last one, `Eof`, once the end is reached).
    pub fn peek(&self) -> &Token {
        let last = self.toks.len() - 1;
        &self.toks[self.i.min(last)]
    }

    /// The current token's kind.
    pub fn tok(&self) -> &Tok {
        &self.peek().tok
    }

    /// The current token's position.
    pub fn pos(&self) -> Pos {
        self.peek().pos
    }

    /// Moves past the current token (never past `Eof`) and returns it.
    pub fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if self.i < self.toks.len() - 1 {
            self.i += 1;
        }
        t
    }

    /// "expected `expected`, found `<current token>`" at the current token (or the lexer's
    /// message when the current token is malformed).
    pub fn unexpected(&self, expected: &str) -> ParseError {
        let t = self.peek();
        match &t.tok {
            Tok::Error(m) => ParseError::new(t.pos, m.clone()),
            other => ParseError::new(
                t.pos,
                format!("expected {expected}, found {}", other.describe()),
            ),
        }
    }

    /// Moves past the current token if it is `tok`.
    pub fn eat(&mut self, tok: &Tok) -> bool {
        if self.tok() == tok {
            self.bump();
            true
        } else {
            false
        }
    }

    /// Moves past `tok`, or fails saying `expected`.
    pub fn expect(&mut self, tok: &Tok, expected: &str) -> PResult<Pos> {
        let pos = self.pos();
        if self.eat(tok) {
            Ok(pos)
        } else {
            Err(self.unexpected(expected))
        }
    }

    /// Moves past the identifier `word`, or fails saying `expected`.
    pub fn expect_word(&mut self, word: &str, expected: &str) -> PResult<Pos> {
        match self.tok() {
            Tok::Ident(w) if w == word => Ok(self.bump().pos),
            _ => Err(self.unexpected(expected)),
        }
    }

    /// Skips newlines and comments (blank and comment-only lines).
    pub fn skip_trivia(&mut self) {
        while matches!(self.tok(), Tok::Newline | Tok::Comment(_)) {
            self.bump();
        }
    }

    /// The end of a line: an optional comment (returned, trimmed, if not empty) then a
    /// newline or the end of the text.
    pub fn end_of_line(&mut self, expected: &str) -> PResult<Option<String>> {
        let mut comment = None;
        if let Tok::Comment(c) = self.tok() {
            let c = c.trim();
            comment = (!c.is_empty()).then(|| c.to_string());
            self.bump();
        }
        match self.tok() {
            Tok::Newline => {
                self.bump();
                Ok(comment)
            }
            Tok::Eof => Ok(comment),
            _ => Err(self.unexpected(expected)),
        }
    }

    /// A `%name`, or fails saying `expected`.
    pub fn value_name(&mut self, expected: &str) -> PResult<(String, Pos)> {
        match self.tok() {
            Tok::Value(v) => {
                let v = v.clone();
                Ok((v, self.bump().pos))
            }
            _ => Err(self.unexpected(expected)),
        }
    }

    /// A tensor type: `f32[B,1024]`, `bool[]`.
    pub fn tensor_type(&mut self) -> PResult<(TensorType, Pos)> {
        let pos = self.pos();
        let dtype = match self.tok() {
            Tok::Ident(w) => w.parse::<DType>().map_err(|_| {
                ParseError::new(
                    pos,
                    format!("unknown dtype `{w}` (expected one of {})", dtype_names()),
                )
            })?,
            _ => return Err(self.unexpected("a type such as `f32[2,3]`")),
        };
        self.bump();
        self.expect(&Tok::LBracket, "`[` and the shape after the dtype")?;
        let mut dims = Vec::new();
        if !self.eat(&Tok::RBracket) {
            loop {
                dims.push(self.dim()?);
                if self.eat(&Tok::RBracket) {
                    break;
                }
                self.expect(&Tok::Comma, "`,` or `]`")?;
            }
        }
        let shape: Shape = dims.into_iter().collect();
        check_size(&shape).map_err(|m| ParseError::new(pos, m))?;
        Ok((TensorType::new(dtype, shape), pos))
    }

    fn dim(&mut self) -> PResult<Dim> {
        let pos = self.pos();
        let d = match self.tok() {
            Tok::Int(n) if *n >= 0 => Dim::Const(*n as usize),
            Tok::Int(n) => {
                let msg = format!("a dim size must be non-negative, found `{n}`");
                return Err(ParseError::new(pos, msg));
            }
            Tok::Ident(s) => Dim::sym(s),
            _ => return Err(self.unexpected("a dim size or symbol")),
        };
        self.bump();
        Ok(d)
    }

    /// True when the current token can start an operand.
    pub fn at_operand(&self) -> bool {
        match self.tok() {
            Tok::Value(_) | Tok::Int(_) | Tok::Float(_) => true,
            Tok::Ident(w) => matches!(w.as_str(), "true" | "false" | "inf" | "nan"),
            _ => false,
        }
    }

    /// One operand: `%name` or a scalar literal.
    pub fn operand(&mut self) -> PResult<(Operand, Pos)> {
        let pos = self.pos();
        let op = match self.tok() {
            Tok::Value(v) => Operand::Value(v.clone()),
            Tok::Int(i) => Operand::Scalar(Scalar::Int(*i)),
            Tok::Float(v) => Operand::Scalar(Scalar::Float(*v)),
            Tok::Ident(w) => match literal_word(w) {
                Some(AttrValue::Bool(b)) => Operand::Scalar(Scalar::Bool(b)),
                Some(AttrValue::Float(v)) => Operand::Scalar(Scalar::Float(v)),
                _ => return Err(self.unexpected("an operand (`%name` or a literal)")),
            },
            _ => return Err(self.unexpected("an operand (`%name` or a literal)")),
        };
        self.bump();
        Ok((op, pos))
    }

    /// `{name = value, ...}`, starting at the `{`.
    pub fn attrs(&mut self) -> PResult<AttrList> {
        self.expect(&Tok::LBrace, "`{`")?;
        let mut list = AttrList::default();
        if self.eat(&Tok::RBrace) {
            return Ok(list);
        }
        loop {
            let pos = self.pos();
            let name = match self.tok() {
                Tok::Ident(k) => k.clone(),
                _ => return Err(self.unexpected("an attribute name")),
            };
            if list.items.iter().any(|(k, _)| *k == name) {
                let msg = format!("attribute `{name}` is given twice");
                return Err(ParseError::new(pos, msg));
            }
            self.bump();
            self.expect(&Tok::Equals, &format!("`=` after attribute `{name}`"))?;
            let value = self.attr_value(0)?;
            list.items.push((name, value));
            list.pos.push(pos);
            if self.eat(&Tok::RBrace) {
                return Ok(list);
            }
            self.expect(&Tok::Comma, "`,` or `}`")?;
        }
    }

    /// An attribute value; `depth` is the list nesting (0: not in a list). Inside lists a
    /// bare identifier is a symbol (`[B, 4]`), outside one it must be a dtype.
    fn attr_value(&mut self, depth: usize) -> PResult<AttrValue> {
        let pos = self.pos();
        let v = match self.tok() {
            Tok::Int(i) => AttrValue::Int(*i),
            Tok::Float(v) => AttrValue::Float(*v),
            Tok::Str(s) => AttrValue::Str(s.clone()),
            Tok::Ident(w) => match (literal_word(w), w.parse::<DType>()) {
                (Some(v), _) => v,
                (None, _) if depth > 0 => AttrValue::Sym(w.clone()),
                (None, Ok(d)) => AttrValue::DType(d),
                (None, Err(_)) => {
                    let msg = format!(
                        "expected an attribute value, found `{w}` (not a number, bool, \
                         string, list or dtype; dtypes are {})",
                        dtype_names()
                    );
                    return Err(ParseError::new(pos, msg));
                }
            },
            Tok::LBracket => return self.list(depth + 1),
            _ => return Err(self.unexpected("an attribute value")),
        };
        self.bump();
        Ok(v)
    }

    fn list(&mut self, depth: usize) -> PResult<AttrValue> {
        if depth > MAX_LIST_DEPTH {
            let msg = format!("lists are nested more than {MAX_LIST_DEPTH} deep");
            return Err(ParseError::new(self.pos(), msg));
        }
        self.bump();
        let mut items = Vec::new();
        if self.eat(&Tok::RBracket) {
            return Ok(AttrValue::List(items));
        }
        loop {
            items.push(self.attr_value(depth)?);
            if self.eat(&Tok::RBracket) {
                return Ok(AttrValue::List(items));
            }
            self.expect(&Tok::Comma, "`,` or `]`")?;
        }
    }
}

/// The literal an identifier stands for: `true`, `false`, `inf`, `nan`.
fn literal_word(w: &str) -> Option<AttrValue> {
    match w {
        "true" => Some(AttrValue::Bool(true)),
        "false" => Some(AttrValue::Bool(false)),
        "inf" => Some(AttrValue::Float(f64::INFINITY)),
        "nan" => Some(AttrValue::Float(f64::NAN)),
        _ => None,
    }
}

/// Fails when a shape has a constant dim or a constant element count above
/// [`MAX_ELEMS`] (zero-sized dims count as 1, so no partial product overflows).
pub fn check_size(shape: &Shape) -> Result<(), String> {
    let mut n = 1usize;
    for d in shape.dims() {
        if let Dim::Const(c) = d {
            n = n.saturating_mul((*c).max(1));
        }
    }
    if n > MAX_ELEMS {
        return Err(format!(
            "shape {shape} is too large (more than 2^48 elements)"
        ));
    }
    Ok(())
}
