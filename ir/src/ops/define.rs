//! The macros that turn the table (`table.rs`) into code: the op enums, `ALL`, `info()`,
//! the text codec (name and attributes to an op and back) and the list of every row.
//! Nothing here knows an op by name.

use super::attr::{AttrValue, OpParseError, Reader};
use super::info::OpInfo;

/// A family of attribute-free ops that share one `Op` variant (`Op::Unary(UnaryOp)`).
pub trait Family: Copy + PartialEq + 'static {
    /// Every member, in table order.
    const MEMBERS: &'static [Self];
    /// The member's table row.
    fn row(self) -> &'static OpInfo;
    /// The attribute that tells this member apart from another of the same name
    /// (`gelu {approximate = "tanh"}`), if it has one.
    fn variant(self) -> Option<(&'static str, &'static str)>;
}

/// True when `name` is the row's name or one of its aliases.
pub(crate) fn names(row: &OpInfo, name: &str) -> bool {
    row.name == name || row.aliases.contains(&name)
}

/// The member of family `F` spelled `name` (with its variant attribute, if the name has
/// several members), `None` when no member has that name.
pub(crate) fn parse_member<F: Family>(
    name: &str,
    r: &mut Reader<'_>,
) -> Option<Result<F, OpParseError>> {
    let cands: Vec<F> = F::MEMBERS
        .iter()
        .copied()
        .filter(|m| names(m.row(), name))
        .collect();
    let first = *cands.first()?;
    let Some(key) = cands.iter().find_map(|c| c.variant().map(|(k, _)| k)) else {
        return Some(Ok(first));
    };
    let plain = cands.iter().copied().find(|c| c.variant().is_none());
    let chosen = match r.take(key) {
        None => plain,
        Some(AttrValue::Str(s)) => cands.iter().copied().find(|c| match c.variant() {
            Some((_, v)) => v == s,
            None => s == "none",
        }),
        Some(_) => None,
    };
    Some(chosen.ok_or_else(|| {
        let mut values: Vec<String> = cands
            .iter()
            .map(|c| format!("{:?}", c.variant().map_or("none", |(_, v)| v)))
            .collect();
        values.sort();
        r.bad(key, values.join(" or "))
    }))
}

/// The printed form of a family member's variant attribute.
pub(crate) fn variant_attrs(
    v: Option<(&'static str, &'static str)>,
) -> Vec<(&'static str, AttrValue)> {
    v.map(|(k, s)| vec![(k, AttrValue::Str(s.to_string()))])
        .unwrap_or_default()
}

/// `Some((key, value))` from an optional `[key = "value"]` in a family row.
macro_rules! variant_attr {
    () => {
        None
    };
    ($k:ident = $v:literal) => {
        Some((stringify!($k), $v))
    };
}
pub(crate) use variant_attr;

/// Declares a family enum from its rows: `Variant [key = "value"]? => OpInfo { .. },`.
macro_rules! define_family {
    (
        $(#[$edoc:meta])*
        $Family:ident {
            $(
                $(#[$doc:meta])*
                $V:ident $([$vk:ident = $vv:literal])? => $info:expr,
            )*
        }
    ) => {
        $(#[$edoc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $Family {
            $( $(#[$doc])* $V, )*
        }

        impl $Family {
            /// How many members the family has.
            pub const COUNT: usize = [$(stringify!($V)),*].len();

            /// Every member, in table order.
            pub const ALL: [$Family; $Family::COUNT] = [$($Family::$V),*];

            /// The member's row of the op table.
            pub fn info(self) -> &'static $crate::ops::OpInfo {
                static ROWS: &[$crate::ops::OpInfo] = &[$($info),*];
                &ROWS[self as usize]
            }

            /// The member's name in the textual IR.
            pub fn name(self) -> &'static str {
                self.info().name
            }

            /// The attribute that tells this member apart from another of the same name
            /// (`gelu {approximate = "tanh"}`), as (key, value).
            pub fn variant_attr(self) -> Option<(&'static str, &'static str)> {
                <$Family as $crate::ops::define::Family>::variant(self)
            }
        }

        impl $crate::ops::define::Family for $Family {
            const MEMBERS: &'static [$Family] = &$Family::ALL;
            fn row(self) -> &'static $crate::ops::OpInfo {
                self.info()
            }
            fn variant(self) -> Option<(&'static str, &'static str)> {
                match self {
                    $( $Family::$V => $crate::ops::define::variant_attr!($($vk = $vv)?), )*
                }
            }
        }
    };
}
pub(crate) use define_family;

/// Declares [`crate::Op`] from the table: attribute-free families (`Unary(UnaryOp)`),
/// families with attributes whose member is chosen by name (`Reduce { op: ReduceOp, .. }`),
/// and single ops with their attributes and defaults (`Slice { dim: i64 = 0, .. }`).
/// Defaults are expressions evaluated while parsing, with `$r` (the [`Reader`]) and the
/// fields declared before them in scope.
macro_rules! define_ops {
    (
        reader($r:ident);
        families {
            $( $(#[$fdoc:meta])* $F:ident($FT:ty), )*
        }
        selected {
            $(
                $(#[$sdoc:meta])*
                $S:ident {
                    $(#[$seldoc:meta])* $sel:ident : $ST:ty,
                    $( $(#[$sadoc:meta])* $sattr:ident : $saty:ty $(= $sadef:expr)? ),* $(,)?
                },
            )*
        }
        ops {
            $(
                $(#[$doc:meta])*
                $V:ident $({
                    $( $(#[$adoc:meta])* $attr:ident : $aty:ty $(= $adef:expr)? ),* $(,)?
                })? => $info:expr;
            )*
        }
    ) => {
        /// A tensor operation (one row of the op table, with its attributes). Operands are
        /// not part of the op: a graph node holds the op and its operands
        /// ([`crate::Arg`]). Dim attributes (`dim`, `dims`) may be negative, counting from
        /// the end, as in PyTorch.
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum Op {
            $( $(#[$fdoc])* $F($FT), )*
            $(
                $(#[$sdoc])*
                $S {
                    $(#[$seldoc])* $sel: $ST,
                    $( $(#[$sadoc])* $sattr: $saty, )*
                },
            )*
            $(
                $(#[$doc])*
                $V $({ $( $(#[$adoc])* $attr: $aty, )* })?,
            )*
        }

        #[allow(clippy::upper_case_acronyms, dead_code)]
        #[derive(Clone, Copy)]
        enum OpsCode {
            $( $V, )*
        }

        static OPS_ROWS: &[$crate::ops::OpInfo] = &[$($info),*];

        impl Op {
            /// The op's row of the table.
            pub fn info(&self) -> &'static $crate::ops::OpInfo {
                match self {
                    $( Op::$F(m) => m.info(), )*
                    $( Op::$S { $sel, .. } => $sel.info(), )*
                    $( Op::$V { .. } => &OPS_ROWS[OpsCode::$V as usize], )*
                }
            }

            /// The attributes in the order the text format prints them (every attribute,
            /// defaults included; an absent optional one is left out).
            pub fn attrs(&self) -> Vec<(&'static str, $crate::ops::AttrValue)> {
                #[allow(unused_mut)]
                let mut out: Vec<(&'static str, $crate::ops::AttrValue)> = Vec::new();
                match self {
                    $( Op::$F(m) => {
                        out = $crate::ops::define::variant_attrs(
                            <$FT as $crate::ops::define::Family>::variant(*m),
                        );
                    } )*
                    $( Op::$S { $sel, $($sattr),* } => {
                        out = $crate::ops::define::variant_attrs(
                            <$ST as $crate::ops::define::Family>::variant(*$sel),
                        );
                        $(
                            if let Some(v) = $crate::ops::AttrCodec::to_attr($sattr) {
                                out.push((stringify!($sattr), v));
                            }
                        )*
                    } )*
                    $( Op::$V { $($($attr),*)? } => {
                        $($(
                            if let Some(v) = $crate::ops::AttrCodec::to_attr($attr) {
                                out.push((stringify!($attr), v));
                            }
                        )*)?
                    } )*
                }
                out
            }

            /// The op spelled `name` with the reader's attributes.
            #[allow(unused_variables, clippy::redundant_locals)]
            pub(crate) fn parse_parts(
                name: &str,
                $r: &mut $crate::ops::Reader<'_>,
            ) -> Result<Op, $crate::ops::OpParseError> {
                $(
                    if let Some(m) = $crate::ops::define::parse_member::<$FT>(name, $r) {
                        return Ok(Op::$F(m?));
                    }
                )*
                $(
                    if let Some(m) = $crate::ops::define::parse_member::<$ST>(name, $r) {
                        let $sel = m?;
                        $( let $sattr: $saty = $crate::ops::attr::attr_value!($r, $sattr : $saty $(= $sadef)?); )*
                        return Ok(Op::$S { $sel, $($sattr),* });
                    }
                )*
                $(
                    if $crate::ops::define::names(&OPS_ROWS[OpsCode::$V as usize], name) {
                        $($( let $attr: $aty = $crate::ops::attr::attr_value!($r, $attr : $aty $(= $adef)?); )*)?
                        return Ok(Op::$V { $($($attr),*)? });
                    }
                )*
                Err($crate::ops::OpParseError::UnknownOp(name.into()))
            }
        }

        /// Every row of the op table: each family's members, then the single ops.
        pub fn rows() -> Vec<&'static $crate::ops::OpInfo> {
            let mut out: Vec<&'static $crate::ops::OpInfo> = Vec::new();
            $( out.extend(<$FT>::ALL.iter().map(|m| m.info())); )*
            $( out.extend(<$ST>::ALL.iter().map(|m| m.info())); )*
            out.extend(OPS_ROWS.iter());
            out
        }
    };
}
pub(crate) use define_ops;
