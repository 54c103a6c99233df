//! The textual IR: a deterministic printer and a parser that reads its output back.
//!
//! ```text
//! graph @mlp(%x: f32[B,1024], %w1: f32[1024,4096], %b1: f32[4096]) -> f32[B,4096] {
//!   %0 = matmul %x, %w1                      : f32[B,4096]   # models/mlp.rs:14:17
//!   %1 = add %0, %b1                         : f32[B,4096]
//!   %2 = relu %1                             : f32[B,4096]
//!   return %2
//! }
//! ```
//!
//! * [`print_graph`] / [`print_module`] (and `Display for Graph`) print. Layout: two
//!   spaces of indent; non-input nodes are numbered `%0`, `%1`, ... in graph order
//!   (skipping numbers that inputs use as names); the instruction is padded with spaces
//!   to 41 characters (at least one space), then `: TYPE`; with a source location the
//!   type is padded likewise to 14 characters, then `# LOC` (line breaks in a location
//!   print as spaces; it is trimmed, and an empty one is not printed).
//! * [`parse_graph`] / [`parse_module`] parse. Parsing builds the graph through
//!   [`crate::Graph::add_op`], so every type is inferred, then compared with the type
//!   written after `:`; the header's result types must be those of the returned values,
//!   and the graph must pass [`crate::verify()`].
//! * Errors are [`ParseError`]s: `LINE:COL: what was expected and what was found`.
//!
//! Round trip: `print_module(&parse_module(text)?) == text` for every printed text, and
//! parsing a printed graph gives the same ops, operands, types, locations and outputs.
//!
//! Grammar (newlines end instructions; a `#` comment after an instruction is its source
//! location, anywhere else it is ignored; blank lines are ignored):
//!
//! ```text
//! module  := graph*
//! graph   := 'graph' @NAME '(' (%NAME ':' type),* ')' '->' (type | '(' type,* ')') '{' NL
//!            (inst NL)* 'return' %NAME,+ NL '}'
//! inst    := %NAME '=' OPNAME (operand,+)? ('{' (IDENT '=' attr),* '}')? ':' type
//! operand := %NAME | INT | FLOAT | 'true' | 'false' | 'inf' | '-inf' | 'nan'
//! attr    := INT | FLOAT | 'true' | 'false' | 'inf' | 'nan' | STRING | DTYPE | '[' item,* ']'
//! item    := INT | FLOAT | 'true' | 'false' | 'inf' | 'nan' | STRING | SYMBOL | '[' item,* ']'
//! type    := DTYPE '[' (INT | SYMBOL),* ']'
//! ```
//!
//! In a list every other bare identifier, a dtype name included, is a symbol (`[B, 4]`).
//! A number with `.`, an exponent, `inf` or `nan` is a float, any other an integer.
//! Value names (`%x`, `%0`) are defined once and used after their definition.
//!
//! Names must be printable: value and graph names are made of ASCII letters, digits,
//! `_` and `.`, and symbols are identifiers other than `true`, `false`, `inf` and `nan`.

mod build;
mod error;
mod lex;
mod parse;
mod print;

pub use build::{parse_graph, parse_module, parse_op};
pub use error::ParseError;
pub use print::{compact_op, print_graph, print_module};
