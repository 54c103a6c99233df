//! The parser's error: a position and a message that says what was expected and what
//! was found.

/// Why a text does not parse into graphs, with the 1-based line and column where the
/// problem was found. Displays as `LINE:COL: MESSAGE`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct ParseError {
    /// 1-based line of the offending token.
    pub line: usize,
    /// 1-based column (in characters) of the offending token.
    pub col: usize,
    /// What was expected and what was found, or which rule the text breaks.
    pub message: String,
}

impl ParseError {
    /// An error at `pos` (line, column) with `message`.
    pub(crate) fn new(pos: Pos, message: impl Into<String>) -> ParseError {
        ParseError {
            line: pos.line,
            col: pos.col,
            message: message.into(),
        }
    }
}

/// A 1-based position in the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Pos {
    /// 1-based line.
    pub(crate) line: usize,
    /// 1-based column, counted in characters.
    pub(crate) col: usize,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}
