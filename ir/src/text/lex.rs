//! The lexer: text to tokens with positions.
//!
//! Newlines are tokens (they end instructions); other whitespace separates tokens. A
//! malformed token (a stray character, an unterminated string, an integer out of range)
//! becomes a [`Tok::Error`] followed by [`Tok::Eof`], so the parser reports problems in
//! text order and the lexer itself never fails.

use super::error::Pos;
use crate::format_float;

/// One token's kind and payload.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// A bare identifier: keywords, op names, dtypes, symbols, `true`, `inf`.
    Ident(String),
    /// A value name without its `%`.
    Value(String),
    /// A graph name without its `@`.
    Global(String),
    /// An integer literal (sign included).
    Int(i64),
    /// A float literal (one with `.`, an exponent, or `-inf`).
    Float(f64),
    /// A string literal, unescaped.
    Str(String),
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `[`
    LBracket,
    /// `]`
    RBracket,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `,`
    Comma,
    /// `:`
    Colon,
    /// `=`
    Equals,
    /// `->`
    Arrow,
    /// `# ...` up to the end of the line, without the `#`.
    Comment(String),
    /// The end of a line.
    Newline,
    /// The end of the text.
    Eof,
    /// A malformed token, with the message to report.
    Error(String),
}

impl Tok {
    /// How an error message names this token (`` `{` ``, `end of line`).
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Value(s) => format!("`%{s}`"),
            Tok::Global(s) => format!("`@{s}`"),
            Tok::Int(i) => format!("`{i}`"),
            Tok::Float(v) => format!("`{}`", format_float(*v)),
            Tok::Str(s) => {
                let short: String = s.chars().take(20).collect();
                let dots = if short.len() < s.len() { "..." } else { "" };
                format!("string {short:?}{dots}")
            }
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::LBracket => "`[`".into(),
            Tok::RBracket => "`]`".into(),
            Tok::LBrace => "`{`".into(),
            Tok::RBrace => "`}`".into(),
            Tok::Comma => "`,`".into(),
            Tok::Colon => "`:`".into(),
            Tok::Equals => "`=`".into(),
            Tok::Arrow => "`->`".into(),
            Tok::Comment(_) => "a comment".into(),
            Tok::Newline => "end of line".into(),
            Tok::Eof => "end of input".into(),
            Tok::Error(m) => m.clone(),
        }
    }
}

/// A token and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// what it is
    pub tok: Tok,
    /// where it starts
    pub pos: Pos,
}

/// True for characters that may continue a name (`%x.1`, `@mlp_2`, `copy_`).
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    col: usize,
}

impl Lexer<'_> {
    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> String {
        let mut s = String::new();
        while let Some(c) = self.peek().filter(|&c| f(c)) {
            s.push(c);
            self.bump();
        }
        s
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(|c| c != '\n' && c.is_whitespace()) {
            self.bump();
        }
    }

    /// The next token, at a non-space character; `None` at the end of the text.
    fn token(&mut self) -> Option<Tok> {
        let c = self.peek()?;
        let single = match c {
            '\n' => Some(Tok::Newline),
            '(' => Some(Tok::LParen),
            ')' => Some(Tok::RParen),
            '[' => Some(Tok::LBracket),
            ']' => Some(Tok::RBracket),
            '{' => Some(Tok::LBrace),
            '}' => Some(Tok::RBrace),
            ',' => Some(Tok::Comma),
            ':' => Some(Tok::Colon),
            '=' => Some(Tok::Equals),
            _ => None,
        };
        if let Some(t) = single {
            self.bump();
            return Some(t);
        }
        Some(match c {
            '#' => {
                self.bump();
                Tok::Comment(self.take_while(|c| c != '\n'))
            }
            '%' | '@' => {
                self.bump();
                let name = self.take_while(is_name_char);
                match (c, name.is_empty()) {
                    (_, true) => Tok::Error(format!("expected a name after `{c}`")),
                    ('%', false) => Tok::Value(name),
                    _ => Tok::Global(name),
                }
            }
            '"' => self.string(),
            '-' => self.minus(),
            c if c.is_ascii_digit() => self.number(String::new()),
            c if is_ident_start(c) => Tok::Ident(self.take_while(is_ident_char)),
            c => Tok::Error(format!("unexpected character {c:?}")),
        })
    }

    fn minus(&mut self) -> Tok {
        self.bump();
        match self.peek() {
            Some('>') => {
                self.bump();
                Tok::Arrow
            }
            Some(c) if c.is_ascii_digit() => self.number("-".into()),
            Some(c) if is_ident_start(c) => match self.take_while(is_ident_char).as_str() {
                "inf" => Tok::Float(f64::NEG_INFINITY),
                "nan" => Tok::Float(f64::NAN),
                w => Tok::Error(format!("expected a number after `-`, found `{w}`")),
            },
            _ => Tok::Error("expected a number or `>` after `-`".into()),
        }
    }

    /// `digits ('.' digits*)? ([eE] [+-]? digits)?`, after the sign already in `s`.
    fn number(&mut self, mut s: String) -> Tok {
        s += &self.take_while(|c| c.is_ascii_digit());
        let mut float = false;
        if self.peek() == Some('.') {
            float = true;
            self.bump();
            s.push('.');
            s += &self.take_while(|c| c.is_ascii_digit());
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            float = true;
            self.bump();
            s.push('e');
            if let Some(sign @ ('+' | '-')) = self.peek() {
                self.bump();
                s.push(sign);
            }
            let exp = self.take_while(|c| c.is_ascii_digit());
            if exp.is_empty() {
                return Tok::Error(format!("expected digits in the exponent of `{s}`"));
            }
            s += &exp;
        }
        if self.peek().is_some_and(is_ident_char) {
            let tail = self.take_while(is_name_char);
            return Tok::Error(format!("invalid number `{s}{tail}`"));
        }
        if float {
            match s.parse::<f64>() {
                Ok(v) => Tok::Float(v),
                Err(_) => Tok::Error(format!("invalid number `{s}`")),
            }
        } else {
            match s.parse::<i64>() {
                Ok(i) => Tok::Int(i),
                Err(_) => Tok::Error(format!("integer `{s}` does not fit in 64 bits")),
            }
        }
    }

    /// A string with the escapes that Rust's `{:?}` produces.
    fn string(&mut self) -> Tok {
        self.bump();
        let mut s = String::new();
        loop {
            match self.bump() {
                None | Some('\n') => return Tok::Error("unterminated string: missing `\"`".into()),
                Some('"') => return Tok::Str(s),
                Some('\\') => match self.bump() {
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some('r') => s.push('\r'),
                    Some('0') => s.push('\0'),
                    Some(c @ ('\\' | '"' | '\'')) => s.push(c),
                    Some('u') => match self.unicode_escape() {
                        Some(c) => s.push(c),
                        None => return Tok::Error("invalid `\\u{...}` escape in string".into()),
                    },
                    Some(c) if c != '\n' => {
                        return Tok::Error(format!("unknown escape `\\{c}` in string"))
                    }
                    _ => return Tok::Error("unterminated string: missing `\"`".into()),
                },
                Some(c) => s.push(c),
            }
        }
    }

    fn unicode_escape(&mut self) -> Option<char> {
        if self.bump()? != '{' {
            return None;
        }
        let hex = self.take_while(|c| c.is_ascii_hexdigit());
        if self.bump()? != '}' || hex.is_empty() || hex.len() > 6 {
            return None;
        }
        char::from_u32(u32::from_str_radix(&hex, 16).ok()?)
    }
}

/// Splits `text` into tokens, ending with [`Tok::Eof`]. A malformed token becomes a
/// [`Tok::Error`] and ends the list (after an `Eof`).
pub fn lex(text: &str) -> Vec<Token> {
    let mut lx = Lexer {
        chars: text.chars().peekable(),
        line: 1,
        col: 1,
    };
    let mut out = Vec::new();
    loop {
        lx.skip_space();
        let pos = Pos {
            line: lx.line,
            col: lx.col,
        };
        match lx.token() {
            None => {
                out.push(Token { tok: Tok::Eof, pos });
                return out;
            }
            Some(tok) => {
                let stop = matches!(tok, Tok::Error(_));
                out.push(Token { tok, pos });
                if stop {
                    out.push(Token { tok: Tok::Eof, pos });
                    return out;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<Tok> {
        lex(s).into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn numbers() {
        assert_eq!(
            kinds("1 -2 0.125 1e-5 -inf"),
            vec![
                Tok::Int(1),
                Tok::Int(-2),
                Tok::Float(0.125),
                Tok::Float(1e-5),
                Tok::Float(f64::NEG_INFINITY),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn names_and_positions() {
        let t = lex("  %x = add %0, @g # here\n}");
        assert_eq!(t[0].tok, Tok::Value("x".into()));
        assert_eq!(t[0].pos, Pos { line: 1, col: 3 });
        assert_eq!(t[6].tok, Tok::Comment(" here".into()));
        assert_eq!(t[8].pos, Pos { line: 2, col: 1 });
    }

    #[test]
    fn strings_unescape() {
        assert_eq!(kinds(r#""a\"b\n""#)[0], Tok::Str("a\"b\n".into()));
        assert!(matches!(kinds("\"abc")[0], Tok::Error(_)));
    }
}
