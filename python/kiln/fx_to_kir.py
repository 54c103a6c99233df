"""Translate a torch.fx GraphModule of core-ATen ops into one graph of kiln's textual IR.

This is the front half of ``torch.compile(backend="kiln")``: aot_autograd (with the core
ATen decompositions) hands the backend a functional FX graph per forward and backward;
``translate`` turns it into kiln IR text that ``kiln`` parses, verifies and compiles.

Conventions
-----------
* Inputs: every FX placeholder whose ``meta['val']`` is a tensor becomes a kir input named
  after the placeholder, in placeholder order; placeholders holding ints or SymInts are not
  inputs (sizes are read from the tensors' ``meta['val']``). Then every ``get_attr`` node
  (a constant tensor held by the GraphModule) becomes an input, in graph order:
  ``Translation.placeholder_index`` holds, for each kir input, the index of the placeholder
  it comes from, or ``-1 - k`` for the k-th get_attr, whose qualified name is
  ``Translation.attr_targets[k]`` (the glue fetches it with ``getattr(gm, target)``, dots
  followed).
* Outputs: the entries of the ``output`` node, in order (``out0``, ``out1``, ...); ``None``
  or a non-tensor entry raises ``Unsupported``.
* Types: each kir instruction carries its type; after each FX node the value is cast to the
  FX node's dtype if kiln's typing rule gives another, so every value has exactly the dtype
  and shape of ``node.meta['val']``. Static sizes print as integers; a SymInt that is a plain
  symbol ``s0`` prints as the kiln symbol ``S0``; a size expression (``2*s0``) is unsupported.
* Scalars print so that they parse back to the same value (``repr`` of a float, ``inf``,
  ``-inf``, ``nan``; ``true``/``false``); they take part in type promotion as Python scalars
  do in PyTorch (a float scalar on an integer tensor gives the default float dtype).

Ops are translated by the functions in ``_HANDLERS``, keyed by overload
(``"aten.add.Tensor"``) or by packet (``"aten.add"``) when every overload is handled alike.
Each receives the builder, the op's arguments bound by name from its schema (defaults filled
in, FX nodes replaced by kir values) and the node's output type(s), and returns a value (or a
tuple/list of values for multi-output ops, read by ``operator.getitem``). The builder's
methods mirror kiln's ops and compute each result's type with kiln's rules (``infer.rs``),
which ``kiln dump`` checks again.
"""

from __future__ import annotations

import importlib
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, Union

import torch
import torch.fx

__all__ = ["Unsupported", "Translation", "node_support", "translate"]


class Unsupported(Exception):
    """A node kiln cannot express; the message names the op (or target) and why."""


@dataclass
class Translation:
    """One FX graph as kiln IR, with how its inputs and outputs line up with the FX graph."""

    kir: str
    """The text of one kiln graph."""
    input_names: list[str]
    """kir input names in order (one per tensor placeholder, then one per get_attr)."""
    placeholder_index: list[int]
    """For each kir input: the FX placeholder index (in placeholder order) it comes from,
    or ``-1 - k`` for the k-th get_attr constant (see ``attr_targets``)."""
    output_count: int
    """Number of kir outputs (the FX output tuple's length)."""
    attr_targets: list[str] = field(default_factory=list)
    """Qualified names of the get_attr constants, in the order of their kir inputs."""


# ---------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------

Dim = Union[int, str]
Shape = tuple  # of Dim
Scalar = Union[bool, int, float]

_DTYPES = {
    torch.bool: "bool",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float32: "f32",
    torch.float64: "f64",
}
_FLOATS = ("f16", "bf16", "f32", "f64")
_INTS = ("i32", "i64")
_SIZE = {"bool": 1, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8}
_DEFAULT_FLOAT = "f32"
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _category(dtype: str) -> int:
    """0 for bool, 1 for integers, 2 for floating point (kiln's ``Category``)."""
    return 2 if dtype in _FLOATS else 1 if dtype in _INTS else 0


def _promote(a: str, b: str) -> str:
    """``torch.promote_types`` on kiln dtype names (kiln's ``DType::promote``)."""
    if a == b:
        return a
    ca, cb = _category(a), _category(b)
    if ca != cb:
        return a if ca > cb else b
    if {a, b} == {"f16", "bf16"}:
        return "f32"
    return a if _SIZE[a] >= _SIZE[b] else b


_NARROW_INTS = {torch.uint8: (0, 256), torch.int8: (-128, 256), torch.int16: (-32768, 65536)}
"""Integer dtypes kiln has no type for, as (lowest value, number of values). Inside a graph
their values are carried in i64 and wrapped back into range after every node
(`_wrap_narrow`), which is exact: torch's arithmetic on them wraps the same way. A graph
input or output of these dtypes stays unsupported (kiln cannot hold the caller's tensor)."""


def _kiln_dtype(dtype: torch.dtype) -> str:
    if dtype not in _DTYPES:
        raise Unsupported(f"dtype {str(dtype).removeprefix('torch.')}")
    return _DTYPES[dtype]


def _dim(size: Any) -> Dim:
    """A torch size (int or SymInt) as a kiln dim: an int, or a symbol name."""
    if isinstance(size, int):
        return size
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        if expr.is_Integer:
            return int(expr)
        if expr.is_Symbol and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(expr)):
            return str(expr).upper()
        raise Unsupported(f"symbolic size expression {expr}")
    raise Unsupported(f"size {size!r}")


@dataclass(frozen=True)
class TType:
    """A tensor type: kiln dtype name and shape (ints and symbol names)."""

    dtype: str
    shape: Shape

    @staticmethod
    def of(t: torch.Tensor) -> "TType":
        return TType(_kiln_dtype(t.dtype), tuple(_dim(s) for s in t.shape))

    @staticmethod
    def carried(t: torch.Tensor) -> "TType":
        """The type of an intermediate value: as `of`, but a narrow integer dtype
        (`_NARROW_INTS`) is carried in i64."""
        if t.dtype in _NARROW_INTS:
            return TType("i64", tuple(_dim(s) for s in t.shape))
        return TType.of(t)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Value:
    """A kir value: its name (without ``%``) and type."""

    name: str
    type: TType

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def shape(self) -> Shape:
        return self.type.shape

    @property
    def rank(self) -> int:
        return self.type.rank


Operand = Union[Value, bool, int, float]


def _format_scalar(v: Scalar) -> str:
    """A literal that kiln's lexer reads back as exactly ``v``."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if not _I64_MIN <= v <= _I64_MAX:
            raise Unsupported(f"integer literal {v} is outside i64")
        return str(v)
    return repr(float(v))  # 'inf', '-inf', 'nan', '1e-05', '2.0' all lex back exactly


def _scalar_dtype(v: Scalar) -> str:
    return "bool" if isinstance(v, bool) else "i64" if isinstance(v, int) else _DEFAULT_FLOAT


def _result_type(args: Sequence[Operand]) -> str:
    """kiln's ``result_type``: dimensioned tensors, then 0-d tensors, then scalars, each
    raising the category only (as ``torch.result_type``)."""

    def fold(dtypes):
        out = None
        for d in dtypes:
            out = d if out is None else _promote(out, d)
        return out

    out = fold(a.dtype for a in args if isinstance(a, Value) and a.rank > 0)
    for extra in (
        fold(a.dtype for a in args if isinstance(a, Value) and a.rank == 0),
        fold(_scalar_dtype(a) for a in args if not isinstance(a, Value)),
    ):
        if extra is not None and (out is None or _category(extra) > _category(out)):
            out = extra
    return out or _DEFAULT_FLOAT


def _broadcast(*shapes: Shape) -> Shape:
    out: list = []
    for s in shapes:
        s = list(s)
        if len(s) > len(out):
            out = [1] * (len(s) - len(out)) + out
        s = [1] * (len(out) - len(s)) + s
        for i, (a, b) in enumerate(zip(out, s)):
            if a == 1:
                out[i] = b
            elif b != 1 and a != b:
                raise Unsupported(f"shapes {shapes} do not broadcast")
    return tuple(out)


def _norm_dim(d: int, rank: int) -> int:
    r = max(rank, 1)
    if not -r <= d < r:
        raise Unsupported(f"dim {d} out of range for rank {rank}")
    return d % r


def _numel(shape: Shape) -> int:
    if not all(isinstance(s, int) for s in shape):
        raise Unsupported(f"needs a static shape, got {list(shape)}")
    return math.prod(shape)


def _matmul_shape(a: Shape, b: Shape) -> Shape:
    if not a or not b:
        raise Unsupported("matmul of a 0-d tensor")
    a1, b1 = len(a) == 1, len(b) == 1
    a2 = (1,) + tuple(a) if a1 else tuple(a)
    b2 = tuple(b) + (1,) if b1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise Unsupported(f"matmul of {list(a)} and {list(b)}")
    out = _broadcast(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if a1:
        out = out[:-2] + out[-1:]
    if b1:
        out = out[:-1]
    return out


# kiln dtype rules (DTypeRule) of the unary and binary pointwise ops used here
_FLOAT, _NUMERIC, _ANY, _BOOL, _INTEGRAL = "float", "numeric", "any", "bool", "integral"
_UNARY_RULES = {
    **dict.fromkeys(
        "exp log sqrt rsqrt reciprocal sin cos tanh erf sigmoid gelu silu log1p expm1 log2 "
        "exp2 tan atan sinh hardswish mish leaky_relu elu softplus".split(),
        _FLOAT,
    ),
    **dict.fromkeys(
        "neg abs relu floor ceil round trunc sign hardtanh nan_to_num".split(), _NUMERIC
    ),
    **dict.fromkeys("isnan isinf logical_not".split(), _BOOL),
    "bitwise_not": _INTEGRAL,
}
_BINARY_RULES = {
    **dict.fromkeys("add sub mul pow remainder fmod".split(), _NUMERIC),
    **dict.fromkeys("div atan2".split(), _FLOAT),
    **dict.fromkeys("maximum minimum".split(), _ANY),
    **dict.fromkeys(
        "eq ne lt le gt ge logical_and logical_or logical_xor".split(), _BOOL
    ),
    **dict.fromkeys("bitwise_and bitwise_or bitwise_xor".split(), _INTEGRAL),
}


def _apply_rule(op: str, rule: str, common: str) -> str:
    if rule == _FLOAT:
        return common if common in _FLOATS else _DEFAULT_FLOAT
    if rule == _NUMERIC:
        if common == "bool":
            raise Unsupported(f"kiln `{op}` is not defined for bool tensors")
        return common
    if rule == _ANY:
        return common
    if rule == _BOOL:
        return "bool"
    if common in _FLOATS:
        raise Unsupported(f"kiln `{op}` is only defined for integer and bool tensors")
    return common


# ---------------------------------------------------------------------------------------
# The builder: one method per kiln op, each computing its result type as kiln does
# ---------------------------------------------------------------------------------------


class _Str(str):
    """A string attribute (printed quoted); plain strs in attributes are dtypes or symbols."""


def _format_attr(v: Any) -> str:
    if isinstance(v, _Str):
        return '"' + v + '"'
    if isinstance(v, str):
        return v  # a dtype, or a symbolic size in a shape
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_format_attr(x) for x in v) + "]"
    return _format_scalar(v)


class _Builder:
    """Accumulates kir instructions, naming values ``%0``, ``%1``, ... in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0
        self.note = ""
        # value name -> the 2-d value it is the transpose of (`matmul(x, wᵀ)` is `linear`)
        self.transposes: dict[str, Value] = {}

    def emit(self, op: str, operands: Sequence[Operand], attrs: dict, ty: TType) -> Value:
        """Appends ``%n = op operands {attrs} : ty`` and returns ``%n``."""
        name = str(self.count)
        self.count += 1
        text = f"%{name} = {op}"
        if operands:
            text += " " + ", ".join(
                f"%{o.name}" if isinstance(o, Value) else _format_scalar(o) for o in operands
            )
        if attrs:
            text += " {" + ", ".join(f"{k} = {_format_attr(v)}" for k, v in attrs.items()) + "}"
        text = f"  {text:<40} : {ty}"
        if self.note:
            text += f"   # {self.note}"
        self.lines.append(text)
        return Value(name, ty)

    # -- pointwise ------------------------------------------------------------------------

    def unary(self, op: str, x: Value, **attrs: Any) -> Value:
        dtype = _apply_rule(op, _UNARY_RULES[op], x.dtype)
        return self.emit(op, [x], attrs, TType(dtype, x.shape))

    def binary(self, op: str, a: Operand, b: Operand) -> Value:
        tensors = [v.shape for v in (a, b) if isinstance(v, Value)]
        if not tensors:
            raise Unsupported(f"kiln `{op}` needs a tensor operand")
        common = _result_type([a, b])
        if op == "pow" and common in _INTS and isinstance(b, int) and b < 0:
            raise Unsupported("integers to negative integer powers are not allowed")
        dtype = _apply_rule(op, _BINARY_RULES[op], common)
        if dtype in ("f16", "bf16") and any(type(v) is float for v in (a, b)):
            # torch computes in f32 with the scalar unrounded; kiln would round the scalar
            # to the tensor's dtype first (1e6 becomes inf in f16)
            wide = [self.cast(v, "f32") if isinstance(v, Value) else v for v in (a, b)]
            return self.cast(self.binary(op, *wide), dtype)
        return self.emit(op, [a, b], {}, TType(dtype, _broadcast(*tensors)))

    def add(self, a: Operand, b: Operand) -> Value:
        return self.binary("add", a, b)

    def sub(self, a: Operand, b: Operand) -> Value:
        return self.binary("sub", a, b)

    def mul(self, a: Operand, b: Operand) -> Value:
        return self.binary("mul", a, b)

    def div(self, a: Operand, b: Operand) -> Value:
        return self.binary("div", a, b)

    def where(self, cond: Value, a: Operand, b: Operand) -> Value:
        if cond.dtype != "bool":
            cond = self.cast(cond, "bool")
        shape = _broadcast(*(v.shape for v in (cond, a, b) if isinstance(v, Value)))
        return self.emit("where", [cond, a, b], {}, TType(_result_type([a, b]), shape))

    def clamp(self, x: Value, lo: Operand, hi: Operand) -> Value:
        shape = _broadcast(*(v.shape for v in (x, lo, hi) if isinstance(v, Value)))
        return self.emit("clamp", [x, lo, hi], {}, TType(_result_type([x, lo, hi]), shape))

    def cast(self, x: Value, dtype: str) -> Value:
        if x.dtype == dtype:
            return x
        return self.emit("cast", [x], {"dtype": dtype}, TType(dtype, x.shape))

    # -- creation -------------------------------------------------------------------------

    def full(self, shape: Shape, value: Scalar, dtype: str) -> Value:
        if dtype == "bool":
            value = bool(value)
        elif dtype in _INTS:
            if isinstance(value, float) and not math.isfinite(value):
                raise Unsupported(f"value {value} cannot be converted to {dtype}")
            value = int(value)
        else:
            value = float(value)
        attrs = {"shape": list(shape), "value": value, "dtype": dtype}
        return self.emit("full", [], attrs, TType(dtype, tuple(shape)))

    def arange(self, start: float, end: float, step: float, dtype: str) -> Value:
        n = max(0, math.ceil((end - start) / step))
        attrs = {"start": float(start), "end": float(end), "step": float(step), "dtype": dtype}
        return self.emit("arange", [], attrs, TType(dtype, (n,)))

    def arange_along(self, n: int, dim: int, rank: int) -> Value:
        """``arange(n)`` (i64) shaped to broadcast along ``dim`` of a rank-``rank`` tensor."""
        shape = [1] * rank
        shape[dim] = n
        return self.reshape(self.arange(0, n, 1, "i64"), shape)

    # -- reductions and normalisations ----------------------------------------------------

    def _reduced(self, x: Value, dims: Sequence[int], keepdim: bool) -> tuple[list[int], Shape]:
        norm = sorted({_norm_dim(d, x.rank) for d in dims}) if dims else list(range(x.rank))
        shape = tuple(
            1 if i in norm else s for i, s in enumerate(x.shape) if keepdim or i not in norm
        )
        return [int(d) for d in dims], shape

    def reduce(
        self, op: str, x: Value, dims: Sequence[int], keepdim: bool, dtype: str | None = None
    ) -> Value:
        """``sum``/``mean``/``amax``/``amin`` over ``dims`` (empty: all)."""
        dims, shape = self._reduced(x, dims, keepdim)
        src = dtype or x.dtype
        if op == "sum" and dtype is None and src not in _FLOATS:
            out = "i64"
        elif op == "mean" and src not in _FLOATS:
            raise Unsupported(f"mean of a {src} tensor")
        else:
            out = src
        attrs: dict = {"dims": dims, "keepdim": keepdim}
        if dtype is not None:
            attrs["dtype"] = dtype
        return self.emit(op, [x], attrs, TType(out, shape))

    def argmax(self, x: Value, dim: int, keepdim: bool) -> Value:
        if x.dtype == "bool":
            x = self.cast(x, "i32")
        _, shape = self._reduced(x, [dim] if x.rank else [], keepdim)
        return self.emit("argmax", [x], {"dim": dim, "keepdim": keepdim}, TType("i64", shape))

    def var(self, x: Value, dims: Sequence[int], correction: int, keepdim: bool) -> Value:
        dims, shape = self._reduced(x, dims, keepdim)
        attrs = {"dims": dims, "correction": correction, "keepdim": keepdim}
        return self.emit("var", [x], attrs, TType(x.dtype, shape))

    def softmax(self, op: str, x: Value, dim: int) -> Value:
        return self.emit(op, [x], {"dim": dim}, x.type)

    def layer_norm(self, x: Value, params: Sequence[Value], ndim: int, eps: float) -> Value:
        return self.emit("layer_norm", [x, *params], {"ndim": ndim, "eps": float(eps)}, x.type)

    # -- matmul ---------------------------------------------------------------------------

    def matmul(self, a: Value, b: Value) -> Value:
        if a.dtype != b.dtype:
            raise Unsupported(f"matmul of {a.dtype} and {b.dtype}")
        shape = _matmul_shape(a.shape, b.shape)
        w = self.transposes.get(b.name)
        if w is not None and a.rank >= 2:
            # x @ wᵀ (every nn.Linear after aot_autograd): kiln's `linear` reads w as stored
            return self.emit("linear", [a, w], {}, TType(a.dtype, shape))
        return self.emit("matmul", [a, b], {}, TType(a.dtype, shape))

    # -- views and copies -----------------------------------------------------------------

    def reshape(self, x: Value, shape: Sequence[Dim]) -> Value:
        shape = tuple(shape)
        if shape == x.shape:
            return x
        return self.emit("reshape", [x], {"shape": list(shape)}, TType(x.dtype, shape))

    def permute(self, x: Value, dims: Sequence[int]) -> Value:
        dims = [_norm_dim(d, x.rank) for d in dims]
        if dims == list(range(x.rank)):
            return x
        shape = tuple(x.shape[d] for d in dims)
        y = self.emit("permute", [x], {"dims": dims}, TType(x.dtype, shape))
        if x.rank == 2:
            self.transposes[y.name] = x
        return y

    def transpose(self, x: Value, d0: int, d1: int) -> Value:
        d0, d1 = _norm_dim(d0, x.rank), _norm_dim(d1, x.rank)
        if d0 == d1 or x.rank < 2:
            return x
        shape = list(x.shape)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        y = self.emit("transpose", [x], {"dim0": d0, "dim1": d1}, TType(x.dtype, tuple(shape)))
        if x.rank == 2:
            self.transposes[y.name] = x
        return y

    def expand(self, x: Value, shape: Sequence[Dim]) -> Value:
        shape = tuple(shape)
        if shape == x.shape:
            return x
        return self.emit("expand", [x], {"shape": list(shape)}, TType(x.dtype, shape))

    def slice(self, x: Value, dim: int, start: int, end: int, step: int = 1) -> Value:
        """``x[start:end:step]`` along ``dim`` (bounds already within the dim)."""
        dim = _norm_dim(dim, x.rank)
        if start == 0 and end == x.shape[dim] and step == 1:
            return x
        shape = list(x.shape)
        shape[dim] = max(0, -(-(end - start) // step))
        attrs = {"dim": dim, "start": start, "end": end, "step": step}
        return self.emit("slice", [x], attrs, TType(x.dtype, tuple(shape)))

    def cat(self, xs: Sequence[Value], dim: int) -> Value:
        if len(xs) == 1:
            return xs[0]
        dim = _norm_dim(dim, xs[0].rank)
        dtype = xs[0].dtype
        for x in xs[1:]:
            dtype = _promote(dtype, x.dtype)
        shape = list(xs[0].shape)
        shape[dim] = sum(_numel((x.shape[dim],)) for x in xs)
        return self.emit("cat", list(xs), {"dim": dim}, TType(dtype, tuple(shape)))

    def index_select(self, x: Value, dim: int, idx: Value) -> Value:
        """torch's `index_select` (a 0-d self or index as torch: the selected element, or
        the dim dropped), through kiln's, which takes rank ≥ 1 operands."""
        if x.rank == 0:
            return self.reshape(self.index_select(self.reshape(x, (1,)), 0, idx), ())
        dim = _norm_dim(dim, x.rank)
        if idx.rank == 0:
            picked = self.index_select(x, dim, self.reshape(idx, (1,)))
            return self.reshape(picked, x.shape[:dim] + x.shape[dim + 1 :])
        shape = x.shape[:dim] + idx.shape + x.shape[dim + 1 :]
        return self.emit("index_select", [x, idx], {"dim": dim}, TType(x.dtype, shape))

    def index_add(self, x: Value, dim: int, idx: Value, src: Value) -> Value:
        return self.emit("index_add", [x, idx, src], {"dim": _norm_dim(dim, x.rank)}, x.type)

    def tri(self, op: str, x: Value, diagonal: int) -> Value:
        return self.emit(op, [x], {"diagonal": diagonal}, x.type)


# ---------------------------------------------------------------------------------------
# Argument binding
# ---------------------------------------------------------------------------------------


class _Sym:
    """A non-tensor FX value (a SymInt size): usable only where sizes come from meta."""

    def __init__(self, node: torch.fx.Node) -> None:
        self.node = node


def _bind(target: Any, args: tuple, kwargs: dict) -> dict:
    """The op's arguments by schema name, defaults filled in."""
    schema = target._schema
    out = {}
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            raise Unsupported(f"{target}: missing argument {a.name}")
    return out


FX_NODE = "__fx_node__"
"""The key under which a handler's argument dict holds the FX node itself, for the few
ops that need more than values (``meta['val']`` of an argument: its strides)."""


def _arg_meta(a: dict, index: int = 0) -> Any:
    """``meta['val']`` of the node's `index`-th positional argument (None if not a node)."""
    arg = a[FX_NODE].args[index]
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None


def _tensor(a: dict, name: str, op: str = "") -> Value:
    v = a[name]
    if not isinstance(v, Value):
        raise Unsupported(f"{op or 'op'}: argument {name} is not a tensor ({type(v).__name__})")
    return v


def _scalar(v: Any, what: str) -> Scalar:
    if isinstance(v, (bool, int, float)):
        return v
    raise Unsupported(f"{what}: {type(v).__name__} is not a literal scalar")


def _operand(v: Any, what: str) -> Operand:
    return v if isinstance(v, Value) else _scalar(v, what)


def _ints(v: Any, what: str) -> list[int]:
    if v is None:
        return []
    if isinstance(v, int):
        return [v]
    if not all(isinstance(x, int) for x in v):
        raise Unsupported(f"{what}: symbolic int list {v}")
    return list(v)


# ---------------------------------------------------------------------------------------
# Handlers: one small function per ATen op (or packet)
# ---------------------------------------------------------------------------------------

Out = Union[TType, list]  # the node's output type, or a list of them (None: not a tensor)
Handler = Callable[[_Builder, dict, Out], Any]
_HANDLERS: dict[str, Handler] = {}


def _handles(*keys: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for k in keys:
            _HANDLERS[k] = fn
        return fn

    return register


def _unary(op: str, **attrs: Any) -> Handler:
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        return b.unary(op, _tensor(a, "self"), **attrs)

    handler.__doc__ = f"direct: kiln `{op}`"
    return handler


for _name in (
    "neg abs exp log sqrt rsqrt reciprocal sin cos tanh erf sigmoid relu silu floor ceil "
    "trunc log1p expm1 log2 exp2 tan atan sinh isnan isinf logical_not hardswish mish round "
    "bitwise_not"
).split():
    _HANDLERS[f"aten.{_name}.default"] = _unary(_name)


@_handles("aten.sign.default", "aten.sgn.default")
def _sign(b: _Builder, a: dict, out: Out) -> Value:
    """direct: kiln `sign` (identity on bool, as torch)."""
    x = _tensor(a, "self")
    return x if x.dtype == "bool" else b.unary("sign", x)


def _binary(op: str, reverse: bool = False) -> Handler:
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        x, y = _operand(a["self"], op), _operand(a["other"], op)
        return b.binary(op, *((y, x) if reverse else (x, y)))

    handler.__doc__ = f"direct: kiln `{op}`"
    return handler


for _name in (
    "eq ne lt le gt ge maximum minimum remainder fmod atan2 logical_and logical_or "
    "logical_xor bitwise_and bitwise_or bitwise_xor"
).split():
    _HANDLERS[f"aten.{_name}"] = _binary(_name)
_HANDLERS["aten.remainder.Scalar_Tensor"] = _binary("remainder")
_HANDLERS["aten.div.Tensor"] = _HANDLERS["aten.div.Scalar"] = _binary("div")


def _with_alpha(b: _Builder, y: Operand, alpha: Any) -> Operand:
    alpha = _scalar(alpha, "alpha")
    if alpha == 1:
        return y
    return y * alpha if not isinstance(y, Value) else b.mul(y, alpha)


@_handles("aten.add.Tensor", "aten.add.Scalar")
def _add(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `add` (`other·alpha` first when alpha ≠ 1; bool + bool is `logical_or`)."""
    x, y = _operand(a["self"], "add"), _operand(a["other"], "add")
    if out.dtype == "bool":
        return b.binary("logical_or", x, y)
    return b.add(x, _with_alpha(b, y, a["alpha"]))


@_handles("aten.sub.Tensor", "aten.sub.Scalar")
def _sub(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `sub` (`other·alpha` first when alpha ≠ 1)."""
    x, y = _operand(a["self"], "sub"), _operand(a["other"], "sub")
    return b.sub(x, _with_alpha(b, y, a["alpha"]))


@_handles("aten.rsub.Tensor", "aten.rsub.Scalar")
def _rsub(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `other - self·alpha`."""
    x, y = _operand(a["self"], "rsub"), _operand(a["other"], "rsub")
    return b.sub(y, _with_alpha(b, x, a["alpha"]))


@_handles("aten.mul.Tensor", "aten.mul.Scalar")
def _mul(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `mul` (bool · bool is `logical_and`)."""
    x, y = _operand(a["self"], "mul"), _operand(a["other"], "mul")
    if out.dtype == "bool":
        return b.binary("logical_and", x, y)
    return b.mul(x, y)


@_handles("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div_mode(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `trunc`/`floor` of `div` (integers divided in f64, exact below 2^53)."""
    x, y = _operand(a["self"], "div"), _operand(a["other"], "div")
    mode = a["rounding_mode"]
    if mode is None:
        return b.div(x, y)
    if out.dtype not in _FLOATS:
        x = b.cast(x, "f64") if isinstance(x, Value) else float(x)
        y = b.cast(y, "f64") if isinstance(y, Value) else float(y)
    return b.unary({"trunc": "trunc", "floor": "floor"}[mode], b.div(x, y))


@_handles("aten.floor_divide.default", "aten.floor_divide.Scalar")
def _floor_divide(b: _Builder, a: dict, out: Out) -> Value:
    """composed: as `div(rounding_mode="floor")`."""
    return _div_mode(b, {**a, "rounding_mode": "floor"}, out)


def _pow_scalar_exponent(b: _Builder, x: Value, e: Scalar) -> Value:
    """torch's CPU kernel special-cases these float exponents; do the same for parity."""
    if x.dtype in _FLOATS and not isinstance(e, bool):
        if e == 2:
            return b.mul(x, x)
        if e == 3:
            return b.mul(b.mul(x, x), x)
        if e == 0.5:
            return b.unary("sqrt", x)
        if e == -0.5:
            return b.unary("rsqrt", x)
        if e == -1:
            return b.unary("reciprocal", x)
        if e == -2:
            return b.unary("reciprocal", b.mul(x, x))
    return b.binary("pow", x, e)


@_handles("aten.pow.Tensor_Scalar")
def _pow_tensor_scalar(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `pow` (x·x, sqrt, rsqrt, 1/x for the exponents torch special-cases)."""
    x, e = _tensor(a, "self"), _scalar(a["exponent"], "pow")
    if out.dtype != x.dtype:
        x = b.cast(x, out.dtype)
    return _pow_scalar_exponent(b, x, e)


@_handles("aten.pow.Tensor_Tensor")
def _pow_tensor_tensor(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `pow`."""
    return b.binary("pow", _tensor(a, "self"), _tensor(a, "exponent"))


@_handles("aten.pow.Scalar")
def _pow_scalar(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `pow` with a literal base."""
    return b.binary("pow", _scalar(a["self"], "pow"), _tensor(a, "exponent"))


@_handles("aten.gelu.default")
def _gelu(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `gelu` (`{approximate = "tanh"}`)."""
    x = _tensor(a, "self")
    if a["approximate"] == "tanh":
        return b.unary("gelu", x, approximate=_Str("tanh"))
    return b.unary("gelu", x)


@_handles("aten.hardtanh.default")
def _hardtanh(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `hardtanh {min_val, max_val}`."""
    lo, hi = _scalar(a["min_val"], "hardtanh"), _scalar(a["max_val"], "hardtanh")
    return b.unary("hardtanh", _tensor(a, "self"), min_val=float(lo), max_val=float(hi))


@_handles("aten.leaky_relu.default")
def _leaky_relu(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `leaky_relu {negative_slope}`."""
    slope = float(_scalar(a["negative_slope"], "leaky_relu"))
    return b.unary("leaky_relu", _tensor(a, "self"), negative_slope=slope)


@_handles("aten.elu.default")
def _elu(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `elu {alpha}`; with a scale or input_scale (selu, celu) composed as torch's
    kernel: `x > 0 ? x·scale : expm1(x·input_scale)·(alpha·scale)`."""
    x, alpha = _tensor(a, "self"), float(_scalar(a["alpha"], "elu"))
    scale, input_scale = float(a["scale"]), float(a["input_scale"])
    if scale == 1 and input_scale == 1:
        return b.unary("elu", x, alpha=alpha)
    inner = b.mul(x, input_scale) if input_scale != 1 else x
    negative = b.mul(b.unary("expm1", inner), alpha * scale)
    return b.where(b.binary("gt", x, 0), b.mul(x, scale), negative)


@_handles("aten.softplus.default")
def _softplus(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `softplus {beta, threshold}`."""
    beta, th = _scalar(a["beta"], "softplus"), _scalar(a["threshold"], "softplus")
    return b.unary("softplus", _tensor(a, "self"), beta=float(beta), threshold=float(th))


@_handles("aten.nan_to_num.default")
def _nan_to_num(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `nan_to_num` (None bounds keep kiln's defaults, torch's)."""
    attrs = {k: float(a[k]) for k in ("nan", "posinf", "neginf") if a[k] is not None}
    return b.unary("nan_to_num", _tensor(a, "self"), **attrs)


@_handles("aten.hardsigmoid.default")
def _hardsigmoid(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `hardtanh(x + 3, 0, 6) / 6`."""
    t = b.add(_tensor(a, "self"), 3)
    return b.div(b.unary("hardtanh", t, min_val=0.0, max_val=6.0), 6)


@_handles("aten.log10.default")
def _log10(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `log(x) / ln 10`."""
    return b.div(b.unary("log", _tensor(a, "self")), math.log(10))


@_handles("aten.cosh.default")
def _cosh(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `(e^x + e^-x) / 2`."""
    x = _tensor(a, "self")
    return b.mul(b.add(b.unary("exp", x), b.unary("exp", b.unary("neg", x))), 0.5)


@_handles("aten.isfinite.default")
def _isfinite(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `not (isnan or isinf)`."""
    x = _tensor(a, "self")
    either = b.binary("logical_or", b.unary("isnan", x), b.unary("isinf", x))
    return b.unary("logical_not", either)


@_handles("aten.frac.default")
def _frac(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `x - trunc(x)`."""
    x = _tensor(a, "self")
    return b.sub(x, b.unary("trunc", x))


@_handles("aten.asin.default")
def _asin(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `atan2(x, sqrt((1 - x)·(1 + x)))`."""
    x = _tensor(a, "self")
    return b.binary("atan2", x, b.unary("sqrt", b.mul(b.sub(1, x), b.add(x, 1))))


@_handles("aten.acos.default")
def _acos(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `atan2(sqrt((1 - x)·(1 + x)), x)`."""
    x = _tensor(a, "self")
    return b.binary("atan2", b.unary("sqrt", b.mul(b.sub(1, x), b.add(x, 1))), x)


@_handles("aten.atanh.default")
def _atanh(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `log1p(2x / (1 - x)) / 2`."""
    x = _tensor(a, "self")
    return b.mul(b.unary("log1p", b.div(b.mul(x, 2), b.sub(1, x))), 0.5)


_LARGE = 1e18  # above it x² + 1 rounds to x² (and overflows soon after) in f32: log(2x) is exact


@_handles("aten.asinh.default")
def _asinh(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `±log1p(|x| + x²/(1 + sqrt(1 + x²)))`, `±(log|x| + ln 2)` for huge |x|."""
    x = _tensor(a, "self")
    ax = b.unary("abs", x)
    sq = b.mul(ax, ax)
    small = b.unary("log1p", b.add(ax, b.div(sq, b.add(b.unary("sqrt", b.add(sq, 1)), 1))))
    big = b.add(b.unary("log", ax), math.log(2))
    r = b.where(b.binary("gt", ax, _LARGE), big, small)
    return b.where(b.binary("lt", x, 0), b.unary("neg", r), r)


@_handles("aten.acosh.default")
def _acosh(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `log1p(t + sqrt(2t + t²))` with t = x - 1, `log x + ln 2` for huge x."""
    x = _tensor(a, "self")
    t = b.sub(x, 1)
    small = b.unary("log1p", b.add(t, b.unary("sqrt", b.add(b.mul(t, 2), b.mul(t, t)))))
    big = b.add(b.unary("log", x), math.log(2))
    return b.where(b.binary("gt", x, _LARGE), big, small)


@_handles("aten.erfc.default")
def _erfc(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `1 - erf(x)`."""
    return b.sub(1, b.unary("erf", _tensor(a, "self")))


def _nan_ignoring(op: str) -> Handler:
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        x, y = _tensor(a, "self"), _tensor(a, "other")
        m = b.binary(op, x, y)
        if m.dtype not in _FLOATS:
            return m
        return b.where(b.unary("isnan", x), y, b.where(b.unary("isnan", y), x, m))

    handler.__doc__ = f"composed: `{op}`, the other operand where one is NaN"
    return handler


_HANDLERS["aten.fmax.default"] = _nan_ignoring("maximum")
_HANDLERS["aten.fmin.default"] = _nan_ignoring("minimum")


@_handles("aten.copysign.Tensor", "aten.copysign.Scalar")
def _copysign(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `where(signbit(other), -|x|, |x|)`, signbit true for negatives and -0."""
    x, y = b.cast(_tensor(a, "self"), out.dtype), _operand(a["other"], "copysign")
    mag = b.unary("abs", x)
    if not isinstance(y, Value):
        negative = math.copysign(1.0, y) < 0
        return b.unary("neg", mag) if negative else mag
    neg = b.binary("lt", y, 0)
    if y.dtype in _FLOATS:
        neg_zero = b.binary("logical_and", b.binary("eq", y, 0),
                            b.binary("lt", b.unary("reciprocal", y), 0))
        neg = b.binary("logical_or", neg, neg_zero)
    return b.where(neg, b.unary("neg", mag), mag)


@_handles("aten.ldexp.Tensor")
def _ldexp(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `x·exp2(other)`."""
    x, e = _tensor(a, "self"), _tensor(a, "other")
    return b.mul(b.cast(x, out.dtype), b.unary("exp2", b.cast(e, out.dtype)))


@_handles("aten.round.decimals")
def _round_decimals(b: _Builder, a: dict, out: Out) -> Value:
    """composed as torch's kernel: `round(x·10^d) / 10^d` (d < 0: `round(x / 10^-d)·10^-d`)."""
    x, d = _tensor(a, "self"), a["decimals"]
    if d >= 0:
        scale = float(10**d)
        return b.div(b.unary("round", b.mul(x, scale)), scale)
    scale = float(10**-d)
    return b.mul(b.unary("round", b.div(x, scale)), scale)


@_handles("aten.clamp.default", "aten.clamp.Tensor")
def _clamp(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `clamp`, or `maximum`/`minimum` when one bound is None."""
    x = _tensor(a, "self")
    lo = None if a["min"] is None else _operand(a["min"], "clamp")
    hi = None if a["max"] is None else _operand(a["max"], "clamp")
    if lo is None and hi is None:
        raise Unsupported("aten.clamp: neither min nor max")
    if hi is None:
        return b.binary("maximum", x, lo)
    if lo is None:
        return b.binary("minimum", x, hi)
    return b.clamp(x, lo, hi)


@_handles("aten.clamp_min", "aten.clamp_max")
def _clamp_bound(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `maximum` (clamp_min) / `minimum` (clamp_max)."""
    if "min" in a:
        return b.binary("maximum", _tensor(a, "self"), _operand(a["min"], "clamp_min"))
    return b.binary("minimum", _tensor(a, "self"), _operand(a["max"], "clamp_max"))


@_handles("aten.where.self")
def _where(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `where`."""
    return b.where(_tensor(a, "condition"), _tensor(a, "self"), _tensor(a, "other"))


@_handles("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `where(mask, value, self)` (cast back to self's dtype)."""
    return b.where(_tensor(a, "mask"), _operand(a["value"], "masked_fill"), _tensor(a, "self"))


# -- reductions ---------------------------------------------------------------------------


def _dtype_arg(a: dict) -> str | None:
    return None if a.get("dtype") is None else _kiln_dtype(a["dtype"])


@_handles("aten.sum.default", "aten.sum.dim_IntList")
def _sum(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `sum {dims, keepdim, dtype}`."""
    dims = _ints(a.get("dim"), "sum")
    return b.reduce("sum", _tensor(a, "self"), dims, a.get("keepdim", False), _dtype_arg(a))


@_handles("aten.mean.default", "aten.mean.dim")
def _mean(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `mean {dims, keepdim, dtype}`."""
    dims = _ints(a.get("dim"), "mean")
    return b.reduce("mean", _tensor(a, "self"), dims, a.get("keepdim", False), _dtype_arg(a))


def _extremum(op: str) -> Handler:
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        dims = _ints(a.get("dim"), op)
        return b.reduce(op, _tensor(a, "self"), dims, a.get("keepdim", False))

    handler.__doc__ = f"direct: `{op} {{dims, keepdim}}`"
    return handler


for _k, _op in (("amax", "amax"), ("max", "amax"), ("amin", "amin"), ("min", "amin")):
    _HANDLERS[f"aten.{_k}.default"] = _extremum(_op)


def _argmin_along(b: _Builder, x: Value, dim: int, keepdim: bool) -> Value:
    """First index of the minimum: `argmax(-x)` for floats (NaN stays the pick), else the
    first position equal to the minimum."""
    if x.dtype in _FLOATS:
        return b.argmax(b.unary("neg", x), dim, keepdim)
    m = b.reduce("amin", x, [dim], True)
    return b.argmax(b.cast(b.binary("eq", x, m), "i32"), dim, keepdim)


def _arg_extremum(is_min: bool) -> Handler:
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        x, dim, keepdim = _tensor(a, "self"), a["dim"], a["keepdim"]
        if dim is None:
            x, dim = b.reshape(x, [_numel(x.shape)]), 0
        r = _argmin_along(b, x, dim, keepdim) if is_min else b.argmax(x, dim, keepdim)
        return b.reshape(r, out.shape)

    handler.__doc__ = ("composed: see `_argmin_along`" if is_min else "direct: `argmax`") + (
        "; dim None flattens first")
    return handler


def _extremum_dim(is_min: bool) -> Handler:
    def handler(b: _Builder, a: dict, out: Out) -> tuple:
        x, dim, keepdim = _tensor(a, "self"), a["dim"], a["keepdim"]
        if is_min:
            return b.reduce("amin", x, [dim], keepdim), _argmin_along(b, x, dim, keepdim)
        return b.reduce("amax", x, [dim], keepdim), b.argmax(x, dim, keepdim)

    handler.__doc__ = "composed: (`amin`, argmin)" if is_min else "composed: (`amax`, `argmax`)"
    return handler


_HANDLERS["aten.argmax.default"] = _arg_extremum(False)
_HANDLERS["aten.argmin.default"] = _arg_extremum(True)
_HANDLERS["aten.max.dim"] = _extremum_dim(False)
_HANDLERS["aten.min.dim"] = _extremum_dim(True)


def _correction(a: dict) -> int:
    c = a.get("correction")
    if "unbiased" in a:
        c = 1 if a["unbiased"] else 0
    c = 1 if c is None else c
    if c != int(c):
        raise Unsupported(f"non-integral correction {c}")
    return int(c)


@_handles("aten.var.correction", "aten.var.dim")
def _var(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `var {dims, correction, keepdim}`."""
    x = _tensor(a, "self")
    return b.var(x, _ints(a["dim"], "var"), _correction(a), a["keepdim"])


@_handles("aten.std.correction", "aten.std.dim")
def _std(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `sqrt(var)`."""
    return b.unary("sqrt", _var(b, a, out))


@_handles("aten.var_mean.correction")
def _var_mean(b: _Builder, a: dict, out: Out) -> tuple:
    """composed: (`var`, `mean`)."""
    x, dims = _tensor(a, "self"), _ints(a["dim"], "var_mean")
    return b.var(x, dims, _correction(a), a["keepdim"]), b.reduce("mean", x, dims, a["keepdim"])


def _any_all(test: str) -> Handler:
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        x, dims = _tensor(a, "self"), _ints(a.get("dim"), "any/all")
        count = b.reduce("sum", b.binary(test, x, 0), dims, a.get("keepdim", False))
        return b.binary(test, count, 0)

    handler.__doc__ = f"composed: `{test}(sum({test}(x, 0)), 0)`"
    return handler


for _k in ("default", "dim", "dims"):
    _HANDLERS[f"aten.any.{_k}"] = _any_all("ne")
    _HANDLERS[f"aten.all.{_k}"] = _any_all("eq")


# -- softmax and normalisation --------------------------------------------------------------


def _softmax(op: str) -> Handler:
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        x = _tensor(a, "self")
        if a["half_to_float"]:
            x = b.cast(x, "f32")
        return b.softmax(op, x, a["dim"])

    handler.__doc__ = f"direct: `{op} {{dim}}` (half_to_float: cast to f32 first)"
    return handler


_HANDLERS["aten._softmax.default"] = _softmax("softmax")
_HANDLERS["aten._log_softmax.default"] = _softmax("log_softmax")


@_handles("aten._softmax_backward_data.default")
def _softmax_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `y·(g - sum(g·y, dim, keepdim))`."""
    g, y, dim = _tensor(a, "grad_output"), _tensor(a, "output"), a["dim"]
    s = b.reduce("sum", b.mul(g, y), [dim], True)
    return b.mul(y, b.sub(g, s))


@_handles("aten._log_softmax_backward_data.default")
def _log_softmax_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `g - exp(y)·sum(g, dim, keepdim)`."""
    g, y, dim = _tensor(a, "grad_output"), _tensor(a, "output"), a["dim"]
    return b.sub(g, b.mul(b.unary("exp", y), b.reduce("sum", g, [dim], True)))


def _stats_dtype(x: Value) -> str:
    return "f32" if x.dtype in ("f16", "bf16") else x.dtype


@_handles("aten.native_layer_norm.default")
def _native_layer_norm(b: _Builder, a: dict, out: Out) -> tuple:
    """composed: (`layer_norm`, `mean`, `rsqrt(var(correction=0) + eps)`), the statistics
    over the normalised dims with keepdim (in f32 for half inputs)."""
    x, eps = _tensor(a, "input"), float(a["eps"])
    ndim = len(a["normalized_shape"])
    w, bias = a["weight"], a["bias"]
    params = [w] + ([bias] if bias is not None else []) if w is not None else []
    y = b.layer_norm(x, params, ndim, eps)
    if w is None and bias is not None:
        y = b.add(y, bias)
    dims = list(range(x.rank - ndim, x.rank))
    xs = b.cast(x, _stats_dtype(x))
    mean = b.reduce("mean", xs, dims, True)
    rstd = b.unary("rsqrt", b.add(b.var(xs, dims, 0, True), eps))
    return y, mean, rstd


@_handles("aten.native_layer_norm_backward.default")
def _native_layer_norm_backward(b: _Builder, a: dict, out: Out) -> tuple:
    """composed as torch._decomp's rule: x̂ = (x - mean)·rstd, ĝ = g·w,
    dx = rstd/N·(N·ĝ - Σĝ - x̂·Σ(ĝ·x̂)), dw = Σ_outer(g·x̂), db = Σ_outer(g)."""
    g, x = _tensor(a, "grad_out"), _tensor(a, "input")
    mean, rstd = _tensor(a, "mean"), _tensor(a, "rstd")
    w, mask = a["weight"], a["output_mask"]
    ndim = len(a["normalized_shape"])
    inner = list(range(x.rank - ndim, x.rank))
    outer = list(range(x.rank - ndim))
    n = _numel(x.shape[x.rank - ndim :])
    x_hat = b.mul(b.sub(x, mean), rstd)
    g_hat = b.mul(g, w) if w is not None else g
    dx = dw = db = None
    if mask[0]:
        t = b.sub(b.sub(b.mul(g_hat, n), b.reduce("sum", g_hat, inner, True)),
                  b.mul(x_hat, b.reduce("sum", b.mul(g_hat, x_hat), inner, True)))
        dx = b.mul(b.div(rstd, n), t)
    if mask[1] and w is not None:
        dw = b.reduce("sum", b.mul(g, x_hat), outer, False)
    if mask[2] and a["bias"] is not None:
        db = b.reduce("sum", g, outer, False)
    return dx, dw, db


def _channel(b: _Builder, v: Value, rank: int) -> Value:
    """A per-channel vector shaped `[1, C, 1, ...]` to broadcast over a rank-`rank` input."""
    return b.reshape(v, (1, v.shape[0]) + (1,) * (rank - 2)) if rank > 1 else v


def _normalize(b: _Builder, x: Value, mean: Value, rstd: Value, w: Any, bias: Any) -> Value:
    """`(x - mean)·rstd·w + bias` in the statistics' dtype, cast back to x's."""
    xs = b.cast(x, mean.dtype)
    y = b.mul(b.sub(xs, _channel(b, mean, x.rank)), _channel(b, rstd, x.rank))
    if w is not None:
        y = b.mul(y, _channel(b, w, x.rank))
    if bias is not None:
        y = b.add(y, _channel(b, bias, x.rank))
    return b.cast(y, x.dtype)


@_handles("aten._native_batch_norm_legit_functional.default",
          "aten._native_batch_norm_legit_no_training.default",
          "aten._native_batch_norm_legit.no_stats")
def _batch_norm(b: _Builder, a: dict, out: Out) -> tuple:
    """composed as torch._decomp's rule: training: the batch statistics over every dim but
    1 (biased variance; the running ones updated with the unbiased one by `momentum`);
    else the running statistics (the saved statistics empty, as torch's CPU kernel)."""
    x, w, bias, eps = _tensor(a, "input"), a["weight"], a["bias"], float(a["eps"])
    rm, rv = a.get("running_mean"), a.get("running_var")
    stats = _stats_dtype(x)
    if not a.get("training", False):
        mean, rstd = b.cast(rm, stats), b.unary("rsqrt", b.add(b.cast(rv, stats), eps))
        y = _normalize(b, x, mean, rstd, w, bias)
        empty = b.full((0,), 0, out[1].dtype)
        return (y, empty, empty) if len(out) == 3 else (y, empty, empty, rm, rv)
    dims = [0] + list(range(2, x.rank))
    xs = b.cast(x, stats)
    # the mean kept as var's own is (`[1, C, 1, ...]`), so that both share one sum
    channels = (_static_size(x, 1),)
    mean = b.reshape(b.reduce("mean", xs, dims, True), channels)
    var = b.var(xs, dims, 0, False)
    rstd = b.unary("rsqrt", b.add(var, eps))
    y = _normalize(b, x, mean, rstd, w, bias)
    if rm is None:
        return y, mean, rstd
    m = float(a["momentum"])
    n = _numel(x.shape) // _static_size(x, 1)
    unbiased = b.mul(var, n / (n - 1)) if n > 1 else var
    new_rm = b.add(b.mul(b.cast(mean, rm.dtype), m), b.mul(rm, 1 - m))
    new_rv = b.add(b.mul(b.cast(unbiased, rv.dtype), m), b.mul(rv, 1 - m))
    return y, mean, rstd, new_rm, new_rv


@_handles("aten.native_group_norm.default")
def _group_norm(b: _Builder, a: dict, out: Out) -> tuple:
    """composed: statistics over `[N, G, C/G·HxW]` (biased variance, f32 for half inputs),
    then the per-channel affine; (output, mean [N, G], rstd [N, G])."""
    x, w, bias, eps, g = _tensor(a, "input"), a["weight"], a["bias"], float(a["eps"]), a["group"]
    n = _static_size(x, 0)
    xs = b.reshape(b.cast(x, _stats_dtype(x)), (n, g, _numel(x.shape[1:]) // g))
    mean = b.reduce("mean", xs, [2], True)
    rstd = b.unary("rsqrt", b.add(b.var(xs, [2], 0, True), eps))
    y = b.reshape(b.mul(b.sub(xs, mean), rstd), x.shape)
    if w is not None:
        y = b.mul(y, _channel(b, w, x.rank))
    if bias is not None:
        y = b.add(y, _channel(b, bias, x.rank))
    return b.cast(y, x.dtype), b.reshape(mean, (n, g)), b.reshape(rstd, (n, g))


# -- pointwise backward ops -----------------------------------------------------------------


@_handles("aten.threshold_backward.default")
def _threshold_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `where(self <= threshold, 0, grad)`."""
    g, x = _tensor(a, "grad_output"), _tensor(a, "self")
    return b.where(b.binary("le", x, _scalar(a["threshold"], "threshold")), 0, g)


@_handles("aten.tanh_backward.default")
def _tanh_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `g·(1 - y·y)` (torch's order)."""
    g, y = _tensor(a, "grad_output"), _tensor(a, "output")
    return b.mul(g, b.sub(1, b.mul(y, y)))


@_handles("aten.sigmoid_backward.default")
def _sigmoid_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `g·(1 - y)·y` (torch's order)."""
    g, y = _tensor(a, "grad_output"), _tensor(a, "output")
    return b.mul(b.mul(g, b.sub(1, y)), y)


@_handles("aten.gelu_backward.default")
def _gelu_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: torch's formulas (erf: `g·(Φ(x) + x·φ(x))`; tanh: its inner derivative)."""
    g, x = _tensor(a, "grad_output"), _tensor(a, "self")
    if a["approximate"] == "tanh":
        k_beta = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5
        k_kappa = 0.044715
        x_sq = b.mul(x, x)
        x_cube = b.mul(x_sq, x)
        inner = b.mul(b.add(x, b.mul(x_cube, k_kappa)), k_beta)
        tanh_inner = b.unary("tanh", inner)
        left = b.mul(x, 0.5)
        right = b.add(tanh_inner, 1)
        left_d = b.mul(right, 0.5)
        tanh_d = b.sub(1, b.mul(tanh_inner, tanh_inner))
        inner_d = b.mul(b.add(b.mul(x_sq, 3 * k_kappa), 1), k_beta)
        right_d = b.mul(b.mul(left, tanh_d), inner_d)
        return b.mul(g, b.add(left_d, right_d))
    k_alpha = math.sqrt(0.5)
    k_beta = (2.0 / math.sqrt(math.pi)) * math.sqrt(0.5) * 0.5
    cdf = b.mul(b.add(b.unary("erf", b.mul(x, k_alpha)), 1), 0.5)
    pdf = b.mul(b.unary("exp", b.mul(b.mul(x, x), -0.5)), k_beta)
    return b.mul(g, b.add(cdf, b.mul(x, pdf)))


@_handles("aten.silu_backward.default")
def _silu_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `g·s·(1 + x·(1 - s))`, s = sigmoid(x)."""
    g, x = _tensor(a, "grad_output"), _tensor(a, "self")
    s = b.unary("sigmoid", x)
    return b.mul(b.mul(g, s), b.add(b.mul(x, b.sub(1, s)), 1))


@_handles("aten.hardtanh_backward.default")
def _hardtanh_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `where(x <= min or x >= max, 0, g)`."""
    g, x = _tensor(a, "grad_output"), _tensor(a, "self")
    lo, hi = _scalar(a["min_val"], "hardtanh"), _scalar(a["max_val"], "hardtanh")
    outside = b.binary("logical_or", b.binary("le", x, lo), b.binary("ge", x, hi))
    return b.where(outside, 0, g)


@_handles("aten.leaky_relu_backward.default")
def _leaky_relu_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `where(x > 0, g, g·slope)`."""
    g, x = _tensor(a, "grad_output"), _tensor(a, "self")
    slope = _scalar(a["negative_slope"], "leaky_relu")
    return b.where(b.binary("gt", x, 0), g, b.mul(g, slope))


# -- matmul ---------------------------------------------------------------------------------


@_handles("aten.mm.default", "aten.bmm.default", "aten.matmul.default", "aten.mv.default",
          "aten.dot.default")
def _matmul(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `matmul`."""
    x = _tensor(a, "self")
    return b.matmul(x, _tensor(a, next(k for k in ("other", "mat2", "vec", "tensor") if k in a)))


@_handles("aten.addmm.default", "aten.baddbmm.default")
def _addmm(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `self·beta + matmul(m1, m2)·alpha`."""
    m1 = _tensor(a, "mat1" if "mat1" in a else "batch1")
    m2 = _tensor(a, "mat2" if "mat2" in a else "batch2")
    beta, alpha = _scalar(a["beta"], "addmm"), _scalar(a["alpha"], "addmm")
    prod = b.matmul(m1, m2)
    if alpha != 1:
        prod = b.mul(prod, alpha)
    if beta == 0:
        return prod
    bias = _tensor(a, "self")
    return b.add(bias if beta == 1 else b.mul(bias, beta), prod)


@_handles("aten.addmv.default", "aten.addbmm.default")
def _addmv(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `self·beta + matmul(mat, vec)·alpha` (addbmm: the batched products summed
    over the batch)."""
    if "vec" in a:
        prod = b.matmul(_tensor(a, "mat"), _tensor(a, "vec"))
    else:
        prod = b.reduce("sum", b.matmul(_tensor(a, "batch1"), _tensor(a, "batch2")), [0], False)
    beta, alpha = _scalar(a["beta"], "addmv"), _scalar(a["alpha"], "addmv")
    if alpha != 1:
        prod = b.mul(prod, alpha)
    if beta == 0:
        return prod
    bias = _tensor(a, "self")
    return b.add(bias if beta == 1 else b.mul(bias, beta), prod)


# -- views, copies, shape ops ---------------------------------------------------------------


@_handles("aten.clone.default", "aten.alias.default", "aten.lift_fresh_copy.default",
          "aten.detach.default", "aten.contiguous.default")
def _identity(b: _Builder, a: dict, out: Out) -> Value:
    """identity: values are immutable in kiln."""
    return _tensor(a, "self")


@_handles("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
          "aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
          "aten.unsqueeze.default", "aten.flatten.using_ints", "aten.unflatten.int",
          "aten.view_copy.default")
def _reshape(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `reshape` to the node's shape."""
    return b.reshape(_tensor(a, "self"), out.shape)


@_handles("aten.expand.default", "aten.expand_copy.default")
def _expand(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `expand` to the node's shape."""
    return b.expand(_tensor(a, "self"), out.shape)


@_handles("aten.permute.default", "aten.permute_copy.default")
def _permute(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `permute`."""
    return b.permute(_tensor(a, "self"), _ints(a["dims"], "permute"))


@_handles("aten.transpose.int", "aten.t.default")
def _transpose(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `transpose` (t: dims 0 and 1, identity below rank 2)."""
    x = _tensor(a, "self")
    if "dim0" in a:
        return b.transpose(x, a["dim0"], a["dim1"])
    return b.transpose(x, 0, 1)


def _static_size(x: Value, dim: int) -> int:
    size = x.shape[dim]
    if not isinstance(size, int):
        raise Unsupported(f"slicing along symbolic dim {size}")
    return size


def _literal_bounds(a: dict, op: str) -> None:
    """Refuses start/end/step that are not literal (data-dependent SymInts)."""
    for k in ("start", "end", "step"):
        if not (a[k] is None or isinstance(a[k], int)):
            raise Unsupported(f"{op}: a data-dependent {k}")


@_handles("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _slice(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `slice` with Python's bound clamping (along a symbolic dim: a non-negative
    start and a static result size, read from the node)."""
    x, step = _tensor(a, "self"), a["step"]
    dim = _norm_dim(a["dim"], x.rank)
    _literal_bounds(a, "aten.slice")
    if out.shape[dim] == x.shape[dim] and a["start"] in (None, 0) and step == 1:
        return x
    if isinstance(x.shape[dim], int):
        start, stop, step = slice(a["start"], a["end"], step).indices(x.shape[dim])
        n = len(range(start, stop, step))
    else:
        start, n = a["start"] or 0, out.shape[dim]
        if not (isinstance(start, int) and start >= 0 and isinstance(n, int)):
            raise Unsupported(f"aten.slice: bounds along symbolic dim {x.shape[dim]}")
    return b.slice(x, dim, start, start + (n - 1) * step + 1 if n else start, step)


@_handles("aten.select.int", "aten.select_copy.int")
def _select(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `slice` of one index, then `reshape` dropping the dim."""
    x = _tensor(a, "self")
    dim = _norm_dim(a["dim"], x.rank)
    i = a["index"] % _static_size(x, dim)
    return b.reshape(b.slice(x, dim, i, i + 1), out.shape)


@_handles("aten.narrow.default", "aten.narrow_copy.default")
def _narrow(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `slice`."""
    x = _tensor(a, "self")
    dim = _norm_dim(a["dim"], x.rank)
    start = a["start"] % _static_size(x, dim)
    return b.slice(x, dim, start, start + a["length"])


@_handles("aten.cat.default")
def _cat(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `cat` (1-d empty tensors skipped, as torch does)."""
    xs = [v for v in a["tensors"] if not (v.rank == 1 and v.shape[0] == 0)] or a["tensors"][:1]
    return b.cat(xs, a["dim"])


@_handles("aten.split.Tensor", "aten.split_with_sizes.default", "aten.unbind.int",
          "aten.split_with_sizes_copy.default", "aten.split_copy.Tensor", "aten.unbind_copy.int")
def _split(b: _Builder, a: dict, out: Out) -> list:
    """composed: one `slice` per piece (unbind: reshaped to drop the dim)."""
    x = _tensor(a, "self")
    dim = _norm_dim(a["dim"], x.rank)
    size = _static_size(x, dim)
    if "split_sizes" in a:
        sizes = _ints(a["split_sizes"], "split")
    elif "split_size" in a:
        n = a["split_size"]
        sizes = [min(n, size - i) for i in range(0, size, n)] if size else [0]
    else:
        sizes = [1] * size
    pieces, start = [], 0
    for s, ty in zip(sizes, out):
        pieces.append(b.reshape(b.slice(x, dim, start, start + s), ty.shape))
        start += s
    return pieces


@_handles("aten.repeat.default")
def _repeat(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `reshape` to interleave size-1 dims, `expand`, `reshape` back."""
    x, reps = _tensor(a, "self"), _ints(a["repeats"], "repeat")
    shape = [1] * (len(reps) - x.rank) + list(x.shape)
    inter = [d for s in shape for d in (1, s)]
    big = [d for r, s in zip(reps, shape) for d in (r, s)]
    return b.reshape(b.expand(b.reshape(x, inter), big), out.shape)


@_handles("aten.flip.default")
def _flip(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `index_select` of a reversed `arange` per flipped dim."""
    x = _tensor(a, "self")
    for d in _ints(a["dims"], "flip"):
        d = _norm_dim(d, x.rank)
        n = _static_size(x, d)
        x = b.index_select(x, d, b.arange(n - 1, -1, -1, "i64"))
    return x


@_handles("aten.roll.default")
def _roll(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `cat` of two `slice`s per rolled dim (no dims: on the flattened tensor)."""
    x, shifts, dims = _tensor(a, "self"), _ints(a["shifts"], "roll"), _ints(a["dims"], "roll")
    if not dims:
        flat = b.reshape(x, [_numel(x.shape)])
        return b.reshape(_roll(b, {"self": flat, "shifts": shifts, "dims": [0]}, out), out.shape)
    for s, d in zip(shifts, dims):
        d = _norm_dim(d, x.rank)
        n = _static_size(x, d)
        if n == 0 or s % n == 0:
            continue
        k = n - s % n
        x = b.cat([b.slice(x, d, k, n), b.slice(x, d, 0, k)], d)
    return x


@_handles("aten.constant_pad_nd.default")
def _constant_pad(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `slice` for negative pads, `cat` with `full` blocks for positive ones."""
    x, pad = _tensor(a, "self"), _ints(a["pad"], "constant_pad_nd")
    value = _scalar(a["value"], "constant_pad_nd")
    for i in range(len(pad) // 2):
        d = x.rank - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        n = _static_size(x, d)
        x = b.slice(x, d, max(0, -lo), n - max(0, -hi))
        parts = []
        for p in (lo, hi):
            shape = list(x.shape)
            shape[d] = p
            parts.append(b.full(shape, value, x.dtype) if p > 0 else None)
        x = b.cat([v for v in (parts[0], x, parts[1]) if v is not None], d)
    return x


def _diag_positions(n: int, m: int, offset: int) -> tuple[int, int]:
    """(first flat position in an n×m matrix, length) of diagonal `offset`."""
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    return (offset if offset >= 0 else -offset * m), length


@_handles("aten.diagonal.default", "aten.diagonal_copy.default")
def _diagonal(b: _Builder, a: dict, out: Out) -> Value:
    """composed: dims `dim1`, `dim2` moved last and merged, then `index_select` of the
    diagonal's flat positions (step `m + 1`)."""
    x = _tensor(a, "self")
    d1, d2 = _norm_dim(a["dim1"], x.rank), _norm_dim(a["dim2"], x.rank)
    rest = [d for d in range(x.rank) if d not in (d1, d2)]
    n, m = _static_size(x, d1), _static_size(x, d2)
    start, length = _diag_positions(n, m, a["offset"])
    flat = b.reshape(b.permute(x, rest + [d1, d2]), [x.shape[d] for d in rest] + [n * m])
    idx = b.arange(start, start + length * (m + 1), m + 1, "i64")
    return b.reshape(b.index_select(flat, len(rest), idx), out.shape)


@_handles("aten.diagonal_scatter.default")
def _diagonal_scatter(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `where(j - i == offset, src spread along dim1 (or dim2), self)`."""
    x, src = _tensor(a, "self"), _tensor(a, "src")
    d1, d2, off = _norm_dim(a["dim1"], x.rank), _norm_dim(a["dim2"], x.rank), a["offset"]
    n, m = _static_size(x, d1), _static_size(x, d2)
    length = _diag_positions(n, m, off)[1]
    if length == 0:
        return x
    along, size = (d1, n) if off >= 0 else (d2, m)
    pos = b.binary("minimum", b.arange(0, size, 1, "i64"), length - 1)
    spread = b.index_select(src, src.rank - 1, pos)  # rest dims..., size
    rest = [d for d in range(x.rank) if d not in (d1, d2)]
    other = d2 if along == d1 else d1
    order = rest + [along, other]
    spread = b.reshape(spread, spread.shape + (1,))
    spread = b.permute(spread, [order.index(d) for d in range(x.rank)])
    hit = b.binary("eq", b.sub(b.arange_along(m, d2, x.rank), b.arange_along(n, d1, x.rank)),
                   off)
    return b.where(hit, b.cast(spread, x.dtype), x)


@_handles("aten.slice_scatter.default")
def _slice_scatter(b: _Builder, a: dict, out: Out) -> Value:
    """composed: step 1: `cat` of self's parts around `src`; else `where` of a hit mask,
    `src` placed by `index_add` into zeros."""
    x, src = _tensor(a, "self"), b.cast(_tensor(a, "src"), out.dtype)
    dim = _norm_dim(a["dim"], x.rank)
    _literal_bounds(a, "aten.slice_scatter")
    n = _static_size(x, dim)
    start, stop, step = slice(a["start"], a["end"], a["step"]).indices(n)
    count = len(range(start, stop, step))
    if count == 0:
        return x
    if step == 1:
        parts = [b.slice(x, dim, 0, start) if start > 0 else None, src,
                 b.slice(x, dim, start + count, n) if start + count < n else None]
        return b.cat([p for p in parts if p is not None], dim)
    if x.dtype == "bool":
        raise Unsupported("aten.slice_scatter: a bool tensor with step > 1")
    idx = b.arange(start, start + (count - 1) * step + 1, step, "i64")
    placed = b.index_add(b.full(x.shape, 0, x.dtype), dim, idx, src)
    mark = b.index_add(b.full((n,), 0, "f32"), 0, idx, b.full((count,), 1, "f32"))
    shape = [1] * x.rank
    shape[dim] = n
    return b.where(b.binary("ne", b.reshape(mark, shape), 0), placed, x)


@_handles("aten.unfold.default")
def _unfold(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `index_select` of window positions `arange(windows)·step + arange(size)`
    ([windows, size]), the window dim then moved last."""
    x, size, step = _tensor(a, "self"), a["size"], a["step"]
    if x.rank == 0:
        return b.reshape(x, out.shape)
    dim = _norm_dim(a["dimension"], x.rank)
    windows = (_static_size(x, dim) - size) // step + 1
    starts = b.reshape(b.arange(0, windows * step, step, "i64"), (windows, 1))
    idx = b.add(starts, b.reshape(b.arange(0, size, 1, "i64"), (1, size)))
    y = b.index_select(x, dim, idx)  # ..., windows, size, ...
    order = [d for d in range(y.rank) if d != dim + 1] + [dim + 1]
    return b.permute(y, order)


def _tri(op: str) -> Handler:
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        return b.tri(op, _tensor(a, "self"), a["diagonal"])

    handler.__doc__ = f"direct: `{op} {{diagonal}}`"
    return handler


_HANDLERS["aten.tril.default"] = _tri("tril")
_HANDLERS["aten.triu.default"] = _tri("triu")


# -- dtype conversion -----------------------------------------------------------------------


@_handles("aten._to_copy.default", "prims.convert_element_type.default",
          "aten.to.dtype", "aten._to_copy")
def _to_copy(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `cast` to the node's dtype (device changes unsupported)."""
    x = _tensor(a, "self" if "self" in a else "a")
    return b.cast(x, out.dtype)


@_handles("aten.copy.default")
def _copy(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `src` expanded to self's shape and cast to its dtype."""
    return b.cast(b.expand(_tensor(a, "src"), out.shape), out.dtype)


# -- creation -------------------------------------------------------------------------------


def _fill(value: Any) -> Handler:
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        v = value if value is not None else _scalar(a["fill_value"], "full")
        return b.full(out.shape, v, out.dtype)

    handler.__doc__ = "direct: `full` of the node's shape and dtype"
    return handler


for _k in ("aten.full.default", "aten.full_like.default", "aten.new_full.default"):
    _HANDLERS[_k] = _fill(None)
for _k in ("aten.zeros.default", "aten.zeros_like.default", "aten.new_zeros.default",
           "aten.empty.memory_format", "aten.empty_like.default", "aten.new_empty.default",
           "aten.empty_strided.default", "aten.new_empty_strided.default",
           "aten.empty_permuted.default"):
    _HANDLERS[_k] = _fill(0)  # empty: any contents will do; zeros are deterministic
for _k in ("aten.ones.default", "aten.ones_like.default", "aten.new_ones.default"):
    _HANDLERS[_k] = _fill(1)


@_handles("aten.scalar_tensor.default")
def _scalar_tensor(b: _Builder, a: dict, out: Out) -> Value:
    """direct: 0-d `full`."""
    return b.full((), _scalar(a["s"], "scalar_tensor"), out.dtype)


@_handles("aten.fill.Scalar")
def _fill_scalar(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `full` of self's shape."""
    return b.full(out.shape, _scalar(a["value"], "fill"), out.dtype)


@_handles("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `arange {start, end, step, dtype}`."""
    start = _scalar(a.get("start", 0), "arange")
    end, step = _scalar(a["end"], "arange"), _scalar(a.get("step", 1), "arange")
    return b.arange(start, end, step, out.dtype)


# -- indexing -------------------------------------------------------------------------------


@_handles("aten.embedding.default")
def _embedding(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `index_select` of rows (padding_idx only matters to the gradient)."""
    return b.index_select(_tensor(a, "weight"), 0, _tensor(a, "indices"))


def _fused(b: _Builder, x: Operand, y: Operand, z: Operand, dtype: str, what: str) -> Value:
    """`x·y + z` rounded once to `dtype` (f32 or narrower): the product of two such values
    is exact in f64, so the f64 sum rounded to `dtype` is the fused result (up to a double
    rounding at exact ties)."""
    if dtype not in ("f32", "f16", "bf16"):
        raise Unsupported(f"{what} in {dtype}: no wider type to fuse in")
    wide = [b.cast(v, "f64") if isinstance(v, Value) else float(v) for v in (x, y, z)]
    return b.cast(b.add(b.mul(wide[0], wide[1]), wide[2]), dtype)


@_handles("prims.fma.default")
def _fma(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `a·b + c` with one rounding (see `_fused`)."""
    return _fused(b, a["a"], a["b"], a["c"], out.dtype, "prims.fma")


@_handles("aten.lerp.Scalar")
def _lerp(b: _Builder, a: dict, out: Out) -> Value:
    """composed: torch's CPU kernel, `fma(w, end - self, self)` for |w| < 0.5, else
    `fma(w - 1, end - self, end)` (the decompositions leave it alone under `_foreach_lerp`)."""
    x, end, w = _tensor(a, "self"), _tensor(a, "end"), float(_scalar(a["weight"], "weight"))
    diff = b.sub(end, x)
    if abs(w) < 0.5:
        return _fused(b, w, diff, x, out.dtype, "aten.lerp")
    return _fused(b, float(torch.tensor(w) - 1), diff, end, out.dtype, "aten.lerp")


@_handles("aten.addcmul.default")
def _addcmul(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `self + value·t1·t2` in torch's CPU kernel's order."""
    t1, t2 = _tensor(a, "tensor1"), _tensor(a, "tensor2")
    return b.add(_tensor(a, "self"), b.mul(b.mul(t1, _scalar(a["value"], "value")), t2))


@_handles("aten.addcdiv.default")
def _addcdiv(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `self + value·t1 / t2` in torch's CPU kernel's order."""
    t1, t2 = _tensor(a, "tensor1"), _tensor(a, "tensor2")
    return b.add(_tensor(a, "self"), b.div(b.mul(t1, _scalar(a["value"], "value")), t2))


_CUMSUM_MAX = 1024
"""The longest dim a float ``cumsum`` takes the triangular matmul along (its ones matrix is
n² elements); longer dims scan."""


@_handles("aten.cumsum.default")
def _cumsum(b: _Builder, a: dict, out: Out) -> Value:
    """composed: floats along at most `_CUMSUM_MAX` elements: `matmul` of the dim (moved
    last) with an upper-triangular matrix of ones; integers (exact adds in i64, wrapping as
    torch's) and longer dims: `fx_ops.scan.scan_sum`, a log-depth scan of adds."""
    from .fx_ops.scan import scan_sum

    x, dim = _tensor(a, "self"), a["dim"]
    if x.rank == 0:
        return b.cast(x, out.dtype)
    dim = _norm_dim(dim, x.rank)
    n = _static_size(x, dim)
    if n > _CUMSUM_MAX or out.dtype not in _FLOATS:
        return scan_sum(b, x, dim, out.dtype)
    y = b.transpose(b.cast(x, out.dtype), dim, x.rank - 1)
    ones = b.tri("triu", b.full((n, n), 1, out.dtype), 0)
    return b.cast(b.transpose(b.matmul(y, ones), dim, x.rank - 1), out.dtype)


@_handles("aten.index_select.default")
def _index_select(b: _Builder, a: dict, out: Out) -> Value:
    """direct: `index_select` (a 0-d index selects as a 1-element one, as torch)."""
    idx = _tensor(a, "index")
    idx = b.reshape(idx, (1,)) if idx.rank == 0 else idx
    return b.index_select(_tensor(a, "self"), a["dim"], idx)


def _wrap_negative(b: _Builder, idx: Value, size: int) -> Value:
    return b.where(b.binary("lt", idx, 0), b.add(idx, size), idx)


@_handles("aten.index.Tensor")
def _index(b: _Builder, a: dict, out: Out) -> Value:
    """composed: integer index tensors (others None): the indexed dims merged into one
    (moved first when not adjacent, as torch orders the result), `index_select` of the
    row-major offsets `Σ index_k·stride_k` (negative indices wrapped, indices broadcast)."""
    x, indices = _tensor(a, "self"), list(a["indices"])
    used = [i for i, t in enumerate(indices) if t is not None]
    if not used or any(indices[i].dtype not in _INTS for i in used):
        raise Unsupported("aten.index.Tensor: only integer index tensors are supported")
    if used != list(range(used[0], used[-1] + 1)):
        rest = [d for d in range(x.rank) if d not in used]
        x = b.permute(x, used + rest)
        indices = [indices[i] for i in used]
        used = list(range(len(used)))
    first, sizes = used[0], [_static_size(x, d) for d in used]
    flat = None
    for k, d in enumerate(used):
        term = _wrap_negative(b, indices[d], sizes[k])
        stride = math.prod(sizes[k + 1 :])
        term = b.mul(term, stride) if stride != 1 else term
        flat = term if flat is None else b.add(flat, term)
    merged = x.shape[:first] + (math.prod(sizes),) + x.shape[used[-1] + 1 :]
    return b.index_select(b.reshape(x, merged), first, flat)


@_handles("aten.embedding_dense_backward.default")
def _embedding_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `index_add` of the gradient rows into zeros (rows at padding_idx masked)."""
    if a["scale_grad_by_freq"]:
        raise Unsupported("aten.embedding_dense_backward: scale_grad_by_freq")
    g, idx = _tensor(a, "grad_output"), _tensor(a, "indices")
    if a["padding_idx"] >= 0:
        pad = b.binary("eq", b.reshape(idx, idx.shape + (1,)), a["padding_idx"])
        g = b.where(pad, 0, g)
    zeros = b.full(out.shape, 0, g.dtype)
    return b.index_add(zeros, 0, idx, g)


def _flat_offsets(b: _Builder, sizes: Shape, strides: list, skip: int) -> Value | None:
    """`Σ_d arange(sizes[d])·strides[d]` over the dims other than `skip` (i64, broadcast
    to `sizes`), None when no other dim has more than one position."""
    total = None
    for d, n in enumerate(sizes):
        if d == skip or n == 1:
            continue
        term = b.mul(b.arange_along(_numel((n,)), d, len(sizes)), strides[d])
        total = term if total is None else b.add(total, term)
    return total


@_handles("aten.gather.default")
def _gather(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `index_select` on the flattened tensor at row-major offsets
    (`index·stride(dim)` plus the other dims' offsets)."""
    x, dim, idx = _tensor(a, "self"), a["dim"], _tensor(a, "index")
    if x.rank == 0:
        return b.reshape(x, out.shape)
    dim = _norm_dim(dim, x.rank)
    strides = [math.prod(x.shape[i + 1 :]) for i in range(x.rank)]
    _numel(x.shape)
    flat = b.mul(idx, strides[dim]) if strides[dim] != 1 else idx
    offsets = _flat_offsets(b, idx.shape, strides, dim)
    if offsets is not None:
        flat = b.add(flat, offsets)
    return b.index_select(b.reshape(x, [_numel(x.shape)]), 0, flat)


def _slice_to(b: _Builder, x: Value, shape: Shape) -> Value:
    for d, n in enumerate(shape):
        if x.shape[d] != n:
            x = b.slice(x, d, 0, n)
    return x


@_handles("aten.nll_loss_forward.default")
def _nll_loss_forward(b: _Builder, a: dict, out: Out) -> tuple:
    """composed: picked = -x[i, t_i]·w_i (w_i = weight[t_i], 0 where t_i == ignore_index) by a
    one-hot `where` and `sum`; reduction none/mean/sum; total_weight = Σw."""
    x, t = _tensor(a, "self"), _tensor(a, "target")
    weight, reduction, ignore = a["weight"], a["reduction"], a["ignore_index"]
    cdim = 0 if x.rank == 1 else 1
    keep = b.binary("ne", t, ignore)
    safe = b.where(keep, t, 0)
    c = _static_size(x, cdim)
    onehot = b.binary("eq", b.reshape(safe, _class_axis(safe.shape, cdim)),
                      b.arange_along(c, cdim, x.rank))
    picked = b.reduce("sum", b.where(onehot, x, 0), [cdim], False)
    w = b.cast(keep, x.dtype)
    if weight is not None:
        w = b.mul(w, b.index_select(weight, 0, safe))
    loss = b.unary("neg", b.mul(picked, w))
    total = b.reduce("sum", w, [], False)
    if reduction == 0:
        return loss, total
    summed = b.reduce("sum", loss, [], False)
    return (b.div(summed, total) if reduction == 1 else summed), total


def _class_axis(shape: Shape, cdim: int) -> Shape:
    """`shape` with a size-1 class dim inserted at `cdim`."""
    return tuple(shape[:cdim]) + (1,) + tuple(shape[cdim:])


@_handles("aten.nll_loss_backward.default")
def _nll_loss_backward(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `where(onehot(t), -g·w/(total_weight if mean), 0)`."""
    g, x, t = _tensor(a, "grad_output"), _tensor(a, "self"), _tensor(a, "target")
    weight, reduction, ignore = a["weight"], a["reduction"], a["ignore_index"]
    cdim = 0 if x.rank == 1 else 1
    keep = b.binary("ne", t, ignore)
    safe = b.where(keep, t, 0)
    w = b.cast(keep, x.dtype)
    if weight is not None:
        w = b.mul(w, b.index_select(weight, 0, safe))
    scale = b.mul(b.unary("neg", w), g)
    if reduction == 1:
        scale = b.div(scale, _tensor(a, "total_weight"))
    c = _static_size(x, cdim)
    onehot = b.binary("eq", b.reshape(safe, _class_axis(safe.shape, cdim)),
                      b.arange_along(c, cdim, x.rank))
    return b.where(onehot, b.reshape(scale, _class_axis(scale.shape, cdim)), 0)


@_handles("aten.sym_size.int", "aten.sym_numel.default", "aten.sym_stride.int")
def _sym(b: _Builder, a: dict, out: Out) -> None:
    """a size: no kir value (sizes are read from meta)."""
    return None


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------


def _target_keys(target: Any) -> list[str]:
    if isinstance(target, torch._ops.OpOverload):
        name = str(target)  # "aten.add.Tensor"
        return [name, name.rsplit(".", 1)[0]]
    return []


def _handler(node: torch.fx.Node) -> Handler:
    return _handler_for(node.target)


def _handler_for(target: Any) -> Handler:
    for k in _target_keys(target):
        if k in _HANDLERS:
            return _HANDLERS[k]
    name = str(target) if isinstance(target, torch._ops.OpOverload) else getattr(
        target, "__name__", str(target))
    if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
        raise Unsupported(f"{name}: mutates its input")
    if name.startswith("aten._foreach_"):
        return _foreach(target)
    if any(t in name for t in ("rand", "bernoulli", "dropout", "normal", "uniform")):
        raise Unsupported(f"{name}: random numbers cannot match torch's generator")
    raise Unsupported(f"{name}: no kiln op")


# The per-tensor overloads a `_foreach_X` overload maps to, in order of preference.
_FOREACH_OVERLOADS = {
    "default": ("default",),
    "Scalar": ("Scalar", "Tensor_Scalar", "default", "Tensor"),
    "ScalarList": ("Scalar", "Tensor_Scalar", "default", "Tensor"),
    "List": ("Tensor", "Tensor_Tensor", "default"),
    "Tensor": ("Tensor", "Tensor_Tensor", "default"),
    "ScalarAndTensor": ("Scalar",),
}


def _foreach(target: torch._ops.OpOverload) -> Handler:
    """composed: a `_foreach_X` op (optimisers' multi-tensor steps) as the handler of its
    per-tensor op `X` at each list position (list arguments indexed, the rest shared)."""
    op = target._schema.name.split("::")[1][len("_foreach_"):]
    packet = getattr(torch.ops.aten, op, None)
    overloads = packet.overloads() if packet is not None else []
    per = next((getattr(packet, o) for o in _FOREACH_OVERLOADS.get(target._overloadname, ())
                if o in overloads), None)
    if per is None:
        raise Unsupported(f"{target}: no per-tensor op for it")
    inner = _handler_for(per)
    kwarg_only = {arg.name for arg in per._schema.arguments if arg.kwarg_only}

    def handler(b: _Builder, a: dict, out: Out) -> list:
        if not isinstance(out, list):
            raise Unsupported(f"{target}: expected a list of outputs")
        results = []
        for i, ty in enumerate(out):
            pos, kw = [], {}
            for arg in target._schema.arguments:
                v = a[arg.name]
                if isinstance(arg.type, torch._C.ListType):
                    v = v[i]
                if arg.kwarg_only or arg.name in kwarg_only:
                    kw[arg.name] = v
                else:
                    pos.append(v)
            results.append(_coerce(b, inner(b, _bind(per, tuple(pos), kw), ty), ty, str(per)))
        return results

    return handler


def _out_type(val: Any) -> Out:
    if isinstance(val, torch.Tensor):
        return TType.carried(val)
    if isinstance(val, (tuple, list)):
        return [TType.carried(v) if isinstance(v, torch.Tensor) else None for v in val]
    return None


def _wrap_narrow(b: _Builder, v: Any, val: Any) -> Any:
    """Wraps the i64 carrier of a narrow-integer node (`_NARROW_INTS`) into its dtype's
    range: `(v - lo) mod n + lo`, torch's two's-complement wrap."""
    if isinstance(val, (tuple, list)) and isinstance(v, (tuple, list)):
        return [_wrap_narrow(b, x, t) for x, t in zip(v, val)]
    if not isinstance(val, torch.Tensor) or val.dtype not in _NARROW_INTS:
        return v
    lo, n = _NARROW_INTS[val.dtype]
    shifted = b.sub(v, lo) if lo else v
    wrapped = b.binary("remainder", shifted, n)
    return b.add(wrapped, lo) if lo else wrapped


def _coerce(b: _Builder, v: Any, ty: Out, name: str) -> Any:
    """Casts `v` to the FX node's dtype where kiln's rule differs; checks the shape."""
    if isinstance(ty, list):
        if not isinstance(v, (tuple, list)):
            raise Unsupported(f"{name}: expected {len(ty)} outputs")
        return [None if x is None or t is None else _coerce(b, x, t, name)
                for x, t in zip(v, ty)]
    if ty is None or v is None:
        return v
    if v.shape != ty.shape:
        raise Unsupported(f"{name}: translated to shape {list(v.shape)}, FX says "
                          f"{list(ty.shape)}")
    if v.dtype != ty.dtype:
        v = b.cast(v, ty.dtype)
    return v


def _lower_node(b: _Builder, node: torch.fx.Node, env: dict) -> Any:
    """Emits the kir of one call_function node; returns its value (or tuple of values)."""
    if node.target is operator.getitem:
        src, i = node.args
        items = env[src]
        if not isinstance(items, (tuple, list)) or items[i] is None:
            raise Unsupported(f"{node.name}: getitem of an output kiln does not compute")
        return items[i]
    handler = _handler(node)
    val = node.meta.get("val")
    out = _out_type(val)
    if out is None and handler is not _sym:
        raise Unsupported(f"{node.target}: non-tensor output")

    _check_device(node)
    args = torch.fx.node.map_arg(node.args, env.__getitem__)
    kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
    a = _bind(node.target, args, kwargs)
    a[FX_NODE] = node
    b.note = f"fx: {node.name}"
    return _wrap_narrow(b, _coerce(b, handler(b, a, out), out, str(node.target)), val)


def _check_device(node: torch.fx.Node) -> None:
    """Refuses a node whose result lives on another device than its tensor inputs."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        inputs = [n.meta.get("val") for n in node.all_input_nodes]
        devs = {t.device for t in inputs if isinstance(t, torch.Tensor)}
        if devs and devs != {val.device}:
            raise Unsupported(f"{node.target}: device transfer")


def _safe_name(name: str, used: set) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "in"
    out, k = base, 1
    while out in used:
        out, k = f"{base}_{k}", k + 1
    used.add(out)
    return out


def translate(gm: torch.fx.GraphModule, name: str = "fx") -> Translation:
    """Translates `gm` (core-ATen call_function nodes, FakeTensor `meta['val']` on every
    node) into one kiln graph named `name`; raises `Unsupported` when any node is
    unsupported. See the module docstring for how inputs and outputs line up."""
    b = _Builder()
    env: dict = {}
    inputs: list[Value] = []
    placeholder_index: list[int] = []
    attr_targets: list[str] = []
    used: set = set()
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    for i, n in enumerate(placeholders):
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            v = Value(_safe_name(n.name, used), TType.of(val))
            inputs.append(v)
            placeholder_index.append(i)
            env[n] = v
        else:
            env[n] = _Sym(n)
    for n in nodes:
        if n.op == "get_attr":
            t = _fetch_attr(gm, n.target)
            if not isinstance(t, torch.Tensor):
                raise Unsupported(f"get_attr {n.target}: not a tensor")
            v = Value(_safe_name(n.name, used), TType.of(t))
            inputs.append(v)
            placeholder_index.append(-1 - len(attr_targets))
            attr_targets.append(n.target)
            env[n] = v
    outputs: list[Value] = []
    for n in nodes:
        if n.op == "call_function":
            env[n] = _lower_node(b, n, env)
        elif n.op == "call_module" or n.op == "call_method":
            raise Unsupported(f"{n.op} {n.target}: not an ATen graph")
        elif n.op == "output":
            res = n.args[0]
            for o in res if isinstance(res, (tuple, list)) else (res,):
                v = env.get(o) if isinstance(o, torch.fx.Node) else None
                if not isinstance(v, Value):
                    raise Unsupported(f"output {o}: non-tensor output")
                TType.of(o.meta["val"])  # a narrow integer output is unsupported
                outputs.append(v)
    sig = ", ".join(f"%{v.name}: {v.type}" for v in inputs)
    rets = ", ".join(str(v.type) for v in outputs)
    head = f"graph @{_safe_name(name, set())}({sig}) -> ({rets}) {{"
    ret = "  return " + ", ".join(f"%{v.name}" for v in outputs)
    kir = "\n".join([head, *b.lines, ret, "}"]) + "\n"
    return Translation(kir, [v.name for v in inputs], placeholder_index, len(outputs),
                       attr_targets)


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def node_support(node: torch.fx.Node) -> str | None:
    """None if kiln can translate this call_function node, else a short reason
    (``"aten.foo.default: no kiln op"``, ``"dtype complex64"``, ``"non-tensor output"``).
    Placeholders, get_attr and output nodes: None.

    The node's handler is run on stand-in inputs made from its arguments' ``meta['val']``,
    so the answer is the one ``translate`` would give."""
    if node.op != "call_function":
        return None
    b = _Builder()
    env: dict = {}
    try:
        if any(u.op == "output" for u in node.users):
            val = node.meta.get("val")
            for t in val if isinstance(val, (tuple, list)) else (val,):
                if isinstance(t, torch.Tensor):
                    TType.of(t)  # a graph output kiln has a dtype for
        for n in node.all_input_nodes:
            val = n.meta.get("val")
            # values other nodes compute may be narrow integers; inputs may not
            of = TType.carried if n.op == "call_function" else TType.of
            if isinstance(val, torch.Tensor):
                env[n] = Value(f"in{len(env)}", of(val))
            elif isinstance(val, (tuple, list)):
                env[n] = [Value(f"in{len(env)}_{i}", of(v))
                          if isinstance(v, torch.Tensor) else None for i, v in enumerate(val)]
            else:
                env[n] = _Sym(n)
        if node.target is operator.getitem:
            src = node.args[0]
            if not isinstance(node.meta.get("val"), torch.Tensor):
                return "non-tensor output"
            return node_support(src) if isinstance(src, torch.fx.Node) else None
        _lower_node(b, node, env)
    except Unsupported as e:
        return str(e)
    return None


# The op families kept in their own modules register their handlers on import.
importlib.import_module(".fx_ops", __package__)
