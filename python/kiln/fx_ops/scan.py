"""Products and scans, composed from kiln's slices, cats and pointwise ops.

* Products (``prod``): a log-depth pairwise tree along the reduced dim: pad an odd length
  with the identity 1, multiply the first half by the second half, repeat (⌈log2 n⌉ steps).
* Scans (``cumsum``, ``cumprod``, ``cummax``, ``cummin``, ``logcumsumexp``): Hillis–Steele
  inclusive scans: in step k every element from position 2^k on is combined with the element
  2^k before it (a `slice` of the first n - 2^k elements), the first 2^k are kept (a `cat`);
  after ⌈log2 n⌉ steps element i combines elements 0..i. Every combine here is associative
  and commutative (float rounding aside), so the tree order is as good as torch's loop.

Floating products and sums run in f64 (torch's CPU ``cumsum``/``cumprod`` accumulate f32 in
double too), integer ones in i64, whose products and sums wrap exactly as torch's do.
"""

from __future__ import annotations

import math
from typing import Callable

from ..fx_to_kir import (
    _FLOATS, Out, Unsupported, Value, _Builder, _handles, _kiln_dtype, _norm_dim,
    _numel, _static_size, _tensor,
)

Combine = Callable[[_Builder, Value, Value], Value]


def _work_dtype(dtype: str) -> str:
    """Where products and sums of `dtype` values are computed: f64 or i64."""
    return "f64" if dtype in _FLOATS else "i64"


def _with_dtype(b: _Builder, x: Value, a: dict, out: Out) -> Value:
    """`x` cast to the op's `dtype=` (torch converts the input first), then to the work
    dtype of the result."""
    if a.get("dtype") is not None:
        x = b.cast(x, _kiln_dtype(a["dtype"]))
    return b.cast(b.cast(x, out.dtype), _work_dtype(out.dtype))


# -- products -------------------------------------------------------------------------------


def tree_prod(b: _Builder, x: Value, dim: int) -> Value:
    """The product along `dim` (kept as size 1): pairwise halves, odd lengths padded with 1."""
    n = _static_size(x, dim)
    if n == 0:
        shape = list(x.shape)
        shape[dim] = 1
        return b.full(shape, 1, x.dtype)
    while n > 1:
        if n % 2:
            pad = list(x.shape)
            pad[dim] = 1
            x, n = b.cat([x, b.full(pad, 1, x.dtype)], dim), n + 1
        h = n // 2
        x, n = b.mul(b.slice(x, dim, 0, h), b.slice(x, dim, h, n)), h
    return x


@_handles("aten.prod.default", "aten.prod.dim_int")
def _prod(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `tree_prod` along the dim (no dim: of the flattened tensor), in f64 for
    floats and i64 for integers and bool (so integer products wrap as torch's), then cast to
    the result dtype and reshaped to the result shape (keepdim or not)."""
    x = _with_dtype(b, _tensor(a, "self"), a, out)
    if a.get("dim") is None:
        x, dim = b.reshape(x, [_numel(x.shape)]), 0
    elif x.rank == 0:
        _norm_dim(a["dim"], 0)
        return b.cast(x, out.dtype)
    else:
        dim = _norm_dim(a["dim"], x.rank)
    return b.reshape(b.cast(tree_prod(b, x, dim), out.dtype), out.shape)


# -- scans ----------------------------------------------------------------------------------


def inclusive_scan(b: _Builder, x: Value, dim: int, combine: Combine) -> Value:
    """Hillis–Steele inclusive scan of `x` along `dim` with an associative, commutative
    `combine(earlier, later)`: ⌈log2 n⌉ steps of two `slice`s, one combine and a `cat` (a 0-d
    `x` is its own scan)."""
    if x.rank == 0:
        return x
    dim = _norm_dim(dim, x.rank)
    n, s = _static_size(x, dim), 1
    while s < n:
        later = combine(b, b.slice(x, dim, 0, n - s), b.slice(x, dim, s, n))
        x = b.cat([b.slice(x, dim, 0, s), later], dim)
        s *= 2
    return x


def _add(b: _Builder, p: Value, q: Value) -> Value:
    return b.add(p, q)


def _mul(b: _Builder, p: Value, q: Value) -> Value:
    return b.mul(p, q)


def _maximum(b: _Builder, p: Value, q: Value) -> Value:
    return b.binary("maximum", p, q)


def _minimum(b: _Builder, p: Value, q: Value) -> Value:
    return b.binary("minimum", p, q)


def _log_add_exp(b: _Builder, p: Value, q: Value) -> Value:
    """`log(exp(p) + exp(q))` = `max + log1p(exp(-|p - q|))`; `p + ln 2` where p == q (also
    for ±inf, where p - q is NaN); NaN propagates through `maximum`."""
    top = b.binary("maximum", p, q)
    gap = b.unary("neg", b.unary("abs", b.sub(p, q)))
    general = b.add(top, b.unary("log1p", b.unary("exp", gap)))
    return b.where(b.binary("eq", p, q), b.add(p, math.log(2.0)), general)


def scan_sum(b: _Builder, x: Value, dim: int, out_dtype: str) -> Value:
    """`cumsum` along `dim` by `inclusive_scan` in f64 (floats) or i64 (integers, bool),
    cast to `out_dtype`."""
    x = b.cast(b.cast(x, out_dtype), _work_dtype(out_dtype))
    return b.cast(inclusive_scan(b, x, dim, _add), out_dtype)


@_handles("aten.cumprod.default")
def _cumprod(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `inclusive_scan` of `mul` in f64 (floats) or i64 (integers, bool: wrapping
    as torch's), after the `dtype=` conversion, cast to the result dtype."""
    x = _with_dtype(b, _tensor(a, "self"), a, out)
    return b.cast(inclusive_scan(b, x, a["dim"], _mul), out.dtype)


@_handles("aten.logcumsumexp.default")
def _logcumsumexp(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `inclusive_scan` of log-add-exp (`max + log1p(exp(-|p - q|))`, `p + ln 2`
    where p == q, NaN propagating) in f64, cast to the result dtype."""
    x = _tensor(a, "self")
    if out.dtype not in _FLOATS:
        raise Unsupported(f"aten.logcumsumexp: result dtype {out.dtype} is not floating")
    return b.cast(inclusive_scan(b, b.cast(x, "f64"), a["dim"], _log_add_exp), out.dtype)


def _running_index(b: _Builder, x: Value, values: Value, dim: int) -> Value:
    """The index torch's cummax/cummin report: the latest j ≤ i where x_j equals the running
    value (both NaN counts as equal), i.e. where torch's loop updated: an `inclusive_scan`
    of `maximum` over j at those positions, -1 elsewhere."""
    hit = b.binary("eq", x, values)
    if x.dtype in _FLOATS:
        both_nan = b.binary("logical_and", b.unary("isnan", x), b.unary("isnan", values))
        hit = b.binary("logical_or", hit, both_nan)
    j = b.arange_along(_static_size(x, dim), dim, x.rank)
    return inclusive_scan(b, b.where(hit, j, -1), dim, _maximum)


def _cum_extremum(combine: Combine, name: str):
    def handler(b: _Builder, a: dict, out: Out) -> tuple:
        x = _tensor(a, "self")
        dim = _norm_dim(a["dim"], x.rank)
        if x.rank == 0:
            return x, b.full((), 0, "i64")
        values = inclusive_scan(b, x, dim, combine)
        return values, _running_index(b, x, values, dim)

    handler.__doc__ = (
        f"composed: values: `inclusive_scan` of `{name}` (NaN propagating); indices: "
        "`_running_index` (ties take the later index, NaN the latest NaN's, as torch's loop)")
    return handler


_handles("aten.cummax.default")(_cum_extremum(_maximum, "maximum"))
_handles("aten.cummin.default")(_cum_extremum(_minimum, "minimum"))
