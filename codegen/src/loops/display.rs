//! The textual form of loop nests (`kiln dump --stage loops`, snapshot tests).

use super::{Buffer, Expr, LoopNest, Phase, ScalarType, Stmt};
use kiln_ir::format_float;
use std::fmt;

fn index_text(b: &Buffer) -> String {
    let parts: Vec<String> = b
        .index
        .iter()
        .map(|i| i.map_or("0".to_string(), |d| format!("d{d}")))
        .collect();
    format!("[{}]", parts.join(", "))
}

fn expr_text(nest: &LoopNest, e: &Expr) -> String {
    let v = |x: &usize| format!("v{x}");
    match e {
        Expr::Load(b) => {
            let buf = &nest.buffers[*b];
            format!("load {}{}", buf.name, index_text(buf))
        }
        Expr::Const(c) => format_float(*c),
        Expr::InnerLen => "len(inner)".to_string(),
        // the IR spells the tanh form `gelu {approximate = "tanh"}`; here it needs a name
        Expr::Unary(kiln_ir::UnaryOp::GeluTanh, x) => format!("gelu_tanh {}", v(x)),
        Expr::Unary(op, x) => format!("{} {}", op.name(), v(x)),
        Expr::Binary(op, x, y) => format!("{} {}, {}", op.name(), v(x), v(y)),
        Expr::Where(c, x, y) => format!("where {}, {}, {}", v(c), v(x), v(y)),
        Expr::BoolToF32(x) => format!("to_f32 {}", v(x)),
        Expr::Widen(x) => format!("widen {}", v(x)),
        Expr::Narrow(x) => format!("narrow {}", v(x)),
        Expr::Round(t, x) => format!("round_{t} {}", v(x)),
        Expr::Reduce(op, x) => format!("{} {} over inner", op.name(), v(x)),
    }
}

fn stmt_line(nest: &LoopNest, v: usize, s: &Stmt) -> String {
    let ty = match s.ty {
        ScalarType::F32 => "f32",
        ScalarType::Bool => "bool",
        ScalarType::F64 => "f64",
    };
    format!("v{v} = {} : {ty}", expr_text(nest, &s.expr))
}

impl fmt::Display for LoopNest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        writeln!(
            f,
            "nest @{} over [{}]{}",
            self.name,
            dims.join(", "),
            if self.reduces {
                " (the inner dim is reduced)"
            } else {
                ""
            }
        )?;
        for b in &self.buffers {
            let role = match b.role {
                super::Role::Input => "in ",
                super::Role::Output => "out",
            };
            writeln!(
                f,
                "  {role} {}: {}[{}] at {}",
                b.name,
                b.dtype,
                b.shape
                    .dims()
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                index_text(b)
            )?;
        }
        let outer = self.dims.len().saturating_sub(1);
        let mut indent = String::from("  ");
        for (d, size) in self.dims.iter().enumerate().take(outer) {
            writeln!(f, "{indent}for d{d} in 0..{size}:")?;
            indent.push_str("  ");
        }
        for p in &self.phases {
            match p {
                Phase::Row(vs) => {
                    for &v in vs {
                        writeln!(f, "{indent}{}", stmt_line(self, v, &self.body[v]))?;
                    }
                }
                Phase::Inner {
                    point,
                    reduces,
                    stores,
                } => {
                    let d = self.dims.len().saturating_sub(1);
                    let size = self.dims.last().map_or("1".to_string(), |s| s.to_string());
                    writeln!(f, "{indent}for d{d} in 0..{size}:")?;
                    for &v in point {
                        writeln!(f, "{indent}  {}", stmt_line(self, v, &self.body[v]))?;
                    }
                    for &v in reduces {
                        writeln!(f, "{indent}  {}", stmt_line(self, v, &self.body[v]))?;
                    }
                    for &s in stores {
                        let st = self.stores[s];
                        let b = &self.buffers[st.buffer];
                        writeln!(
                            f,
                            "{indent}  store {}{} = v{}",
                            b.name,
                            index_text(b),
                            st.value
                        )?;
                    }
                }
                Phase::RowStores(ss) => {
                    for &s in ss {
                        let st = self.stores[s];
                        let b = &self.buffers[st.buffer];
                        writeln!(
                            f,
                            "{indent}store {}{} = v{}",
                            b.name,
                            index_text(b),
                            st.value
                        )?;
                    }
                }
            }
        }
        Ok(())
    }
}
