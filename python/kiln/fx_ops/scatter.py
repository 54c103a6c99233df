"""Scatters: elements of a source written (or reduced) at indexed positions of ``self``.

kiln has `index_add` (an accumulating scatter along one dim) and `index_select`, so:

* accumulating scatters (scatter_add, scatter_reduce sum/mean, index_put and put with
  accumulate=True, index_reduce mean) are one `index_add`: along the indexed dim when whole
  rows are indexed, else on dim 0 of the flattened ``self`` at row-major offsets;
* overwriting scatters (index_put, put, scatter) follow torch's CPU kernels, which write
  serially, so with repeated indices the last write wins: per target the largest source
  position writing it is found by a one-hot comparison of the index values (`amax` of
  `where(hit, s, -1)`), and that source element is read with `index_select`;
* amax/amin/prod reductions reduce the one-hot `where(hit, src, ∓inf or 1)` over the
  sources (prod by halving, in f64 for floats).

The one-hot comparisons are quadratic, so they are made at the coarsest granularity the
index allows (whole rows for index_put, lines along `dim` for scatter) and refused beyond
`_ONE_HOT_MAX` compared pairs.
"""

from __future__ import annotations

import math
from typing import Callable

from ..fx_to_kir import (
    _FLOATS,
    _INTS,
    Out,
    Unsupported,
    Value,
    _broadcast,
    _Builder,
    _flat_offsets,
    _gather,
    _handles,
    _norm_dim,
    _numel,
    _scalar,
    _slice_to,
    _static_size,
    _tensor,
    _wrap_negative,
)
from .scan import tree_prod

_ONE_HOT_MAX = 2**22
"""The most (source, target) pairs a one-hot comparison may hold."""

_FILL = {  # the identity of amax / amin per dtype category
    "amax": {"float": -math.inf, "i32": -(2**31), "i64": -(2**63)},
    "amin": {"float": math.inf, "i32": 2**31 - 1, "i64": 2**63 - 1},
}


def _check_one_hot(op: str, sources: int, targets: int) -> None:
    if sources * targets > _ONE_HOT_MAX:
        raise Unsupported(
            f"{op}: the one-hot comparison of {sources} sources × {targets} targets is over "
            f"{_ONE_HOT_MAX} pairs (kiln has no overwriting or max/min scatter op)")


def _lift(b: _Builder, v):
    """A 0-d tensor as shape (1,) (torch treats 0-d scatter operands as one element)."""
    return b.reshape(v, (1,)) if isinstance(v, Value) and v.rank == 0 else v


def _work(x: Value) -> str:
    """The dtype to add or compare in: bool as i32 (its sum is a logical or)."""
    return "i32" if x.dtype == "bool" else x.dtype


def _last_writer(b: _Builder, hit: Value, axis: int) -> Value:
    """Per target, the largest source position along `axis` whose `hit` is set, -1 for
    none (`axis` removed)."""
    s = b.arange_along(_static_size(hit, axis), axis, hit.rank)
    return b.reduce("amax", b.where(hit, s, -1), [axis], False)


def _extreme(b: _Builder, reduce: str, hit: Value, vals: Value, axis: int, base: Value,
             include_self: bool) -> Value:
    """`base` with each target that some source hits (`hit` over `axis`) replaced by the
    amax/amin of those sources' `vals` (and of `base` when `include_self`); NaN propagates."""
    work = _work(base)
    base, vals = b.cast(base, work), b.cast(vals, work)
    fill = _FILL[reduce]["float" if work in _FLOATS else work]
    red = b.reduce(reduce, b.where(hit, vals, fill), [axis], False)
    if include_self:  # maximum(a, b) is b on ties: self, the first value, wins (torch's ±0)
        red = b.binary("maximum" if reduce == "amax" else "minimum", red, base)
    hits = b.reduce("amax", b.cast(hit, "i32"), [axis], False)
    return b.where(b.binary("gt", hits, 0), red, base)


def _product(b: _Builder, hit: Value, vals: Value, axis: int, base: Value,
             include_self: bool) -> Value:
    """As `_extreme` for prod: the one-hot `where(hit, vals, 1)` multiplied over `axis`
    (floats in f64 and rounded once, so within torch's serial rounding of the same
    product; integers wrap alike in any order)."""
    work = _work(base)
    wide = "f64" if work in _FLOATS else work
    p = tree_prod(b, b.where(hit, b.cast(vals, wide), 1), axis)
    p = b.reshape(p, p.shape[:axis] + p.shape[axis + 1:])
    if include_self:
        p = b.mul(b.cast(base, wide), p)
    hits = b.reduce("amax", b.cast(hit, "i32"), [axis], False)
    return b.where(b.binary("gt", hits, 0), b.cast(p, work), b.cast(base, work))


def _one_hot_reduce(b: _Builder, reduce: str, hit: Value, vals: Value, axis: int,
                    base: Value, include_self: bool) -> Value:
    if reduce == "prod":
        return _product(b, hit, vals, axis, base, include_self)
    if reduce in ("amax", "amin"):
        return _extreme(b, reduce, hit, vals, axis, base, include_self)
    raise Unsupported(f"reduce={reduce!r} has no kiln op")


def _sum_or_mean(b: _Builder, reduce: str, x: Value, src: Value, include_self: bool,
                 add: Callable[[Value, Value], Value], opmath: bool) -> Value:
    """torch's scatter sum/mean: `add(base, values)` is the scatter's `index_add` (values
    shaped as `src`), in order, in f32 for f16/bf16 when `opmath` (scatter's CPU kernels;
    index_put and index_reduce add in the dtype); mean divides by the count of values (1
    more with self) in the dtype, floored for integers; targets no value hits keep self."""
    work = _work(x)
    x, src = b.cast(x, work), b.cast(src, work)
    acc = "f32" if opmath and work in ("f16", "bf16") else work
    base = x if include_self else b.full(x.shape, 0, work)
    total = b.cast(add(b.cast(base, acc), b.cast(src, acc)), work)
    if reduce == "sum" and include_self:
        return total
    cdt = work if work in _FLOATS else "i64"
    count = add(b.full(x.shape, int(include_self), cdt), b.full(src.shape, 1, cdt))
    if not include_self:
        total = b.where(b.binary("gt", count, 0), total, x)
    if reduce == "sum":
        return total
    if not include_self:
        count = b.where(b.binary("eq", count, 0), 1, count)
    if work in _FLOATS:
        return b.div(total, count)
    q = b.unary("floor", b.div(b.cast(total, "f64"), b.cast(count, "f64")))
    return b.cast(q, work)


def _strides(shape) -> list:
    return [math.prod(shape[i + 1:]) for i in range(len(shape))]


def _element_offsets(b: _Builder, x: Value, dim: int, idx: Value) -> Value:
    """Row-major offsets into the flattened `x` of the positions a scatter `idx` names
    (`idx` along `dim`, its own position elsewhere), shaped as `idx`."""
    strides = _strides(x.shape)
    flat = b.cast(idx, "i64")
    flat = b.mul(flat, strides[dim]) if strides[dim] != 1 else flat
    others = _flat_offsets(b, idx.shape, strides, dim)
    return b.add(flat, others) if others is not None else flat


def _flat_add(b: _Builder, x: Value, offsets: Value, src: Value) -> Value:
    """`index_add` of `src` (shaped as `offsets`) into the flattened `x`, reshaped back."""
    flat = b.index_add(b.reshape(x, [_numel(x.shape)]), 0, offsets, b.cast(src, x.dtype))
    return b.reshape(flat, x.shape)


def _embed(b: _Builder, region: Value, x: Value) -> Value:
    """`x` with its leading corner (the extents of `region`) replaced by `region`."""
    for d in range(x.rank):
        have, want = region.shape[d], _static_size(x, d)
        if have != want:
            rest = b.slice(x, d, have, want)
            rest = _slice_to(b, rest, region.shape[:d] + (want - have,) + region.shape[d + 1:])
            region = b.cat([region, b.cast(rest, region.dtype)], d)
    return region


def _line_hits(b: _Builder, op: str, x: Value, dim: int, idx: Value) -> Value:
    """`hit[..., s, j, ...] = (idx[..., s, ...] == j)` for each position `j` of `x` along
    `dim` (a new axis after `dim`): which targets of its line each index position writes."""
    n = _static_size(x, dim)
    _check_one_hot(op, _numel(idx.shape), n)
    col = b.reshape(idx, idx.shape[:dim + 1] + (1,) + idx.shape[dim + 1:])
    return b.binary("eq", col, b.arange_along(n, dim + 1, idx.rank + 1))


def _scatter_args(b: _Builder, a: dict) -> tuple:
    """self, dim, index and src (sliced to the index's shape) or a scalar value; 0-d lifted."""
    x, idx = _lift(b, _tensor(a, "self")), _lift(b, _tensor(a, "index"))
    dim = _norm_dim(a["dim"], x.rank)
    if "src" in a:
        src = _slice_to(b, _lift(b, _tensor(a, "src")), idx.shape)
    else:
        src = b.full(idx.shape, _scalar(a["value"], "scatter"), x.dtype)
    return x, dim, idx, b.cast(src, x.dtype)


@_handles("aten.scatter.src", "aten.scatter.value")
def _scatter(b: _Builder, a: dict, out: Out) -> Value:
    """composed: the last write wins (torch's CPU order): per line along `dim`, the writer
    of target j is `w = amax_s where(index[s] == j, s, -1)`; the lines the index spans
    become `where(w ≥ 0, gather(src, dim, w), self)`, the rest of self is kept (`cat`)."""
    x, dim, idx, src = _scatter_args(b, a)
    if _numel(idx.shape) == 0:
        return b.reshape(x, out.shape)
    w = _last_writer(b, _line_hits(b, "aten.scatter", x, dim, idx), dim)
    safe = b.clamp(w, 0, idx.shape[dim] - 1)
    vals = _gather(b, {"self": src, "dim": dim, "index": safe}, None)
    region = b.where(b.binary("ge", w, 0), vals, _slice_to(b, x, w.shape))
    return b.reshape(_embed(b, region, x), out.shape)


@_handles("aten.scatter_add.default", "aten.scatter.reduce", "aten.scatter.value_reduce")
def _scatter_add(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `index_add` on the flattened self at the row-major offsets of the index
    (as `gather`); scatter's reduce="add" alike, reduce="multiply" as scatter_reduce's
    prod with self."""
    if a.get("reduce", "add") == "multiply":
        return _scatter_reduce(b, {**a, "reduce": "prod", "include_self": True}, out)
    x, dim, idx, src = _scatter_args(b, a)
    add = _offsets_add(b, x, dim, idx)
    return b.reshape(_sum_or_mean(b, "sum", x, src, True, add, True), out.shape)


def _offsets_add(b: _Builder, x: Value, dim: int, idx: Value) -> Callable:
    offsets = _element_offsets(b, x, dim, idx)
    return lambda base, v: _flat_add(b, base, offsets, v)


@_handles("aten.scatter_reduce.two")
def _scatter_reduce(b: _Builder, a: dict, out: Out) -> Value:
    """composed: sum/mean: `index_add` on the flattened self (mean: over an `index_add` of
    ones, floored for integers); amax/amin: per line along `dim` the one-hot
    `where(index[s] == j, src[s], ∓inf)` reduced over s, where any s hits j; prod: the
    one-hot `where(index[s] == j, src[s], 1)` multiplied by halving (see `_product`);
    include_self both ways."""
    x, dim, idx, src = _scatter_args(b, a)
    reduce, include_self = a["reduce"], a["include_self"]
    if _numel(idx.shape) == 0:
        return b.reshape(x, out.shape)
    if reduce in ("sum", "mean"):
        add = _offsets_add(b, x, dim, idx)
        r = _sum_or_mean(b, reduce, x, src, include_self, add, True)
    else:
        hit = _line_hits(b, "aten.scatter_reduce", x, dim, idx)
        vals = b.reshape(src, src.shape[:dim + 1] + (1,) + src.shape[dim + 1:])
        region = _slice_to(b, x, hit.shape[:dim] + hit.shape[dim + 1:])
        r = _embed(b, _one_hot_reduce(b, reduce, hit, vals, dim, region, include_self), x)
    return b.reshape(r, out.shape)


@_handles("aten.index_reduce.default")
def _index_reduce(b: _Builder, a: dict, out: Out) -> Value:
    """composed: mean: `index_add` along `dim` over an `index_add` of ones (floored for
    integers); amax/amin: the one-hot `where(index[k] == j, source[k], ∓inf)` reduced over
    k, where any k hits j; prod: `where(…, source[k], 1)` multiplied by halving (see
    `_product`); include_self both ways."""
    x, idx, src = (_lift(b, _tensor(a, n)) for n in ("self", "index", "source"))
    dim, reduce, include_self = _norm_dim(a["dim"], x.rank), a["reduce"], a["include_self"]
    if reduce == "mean":
        r = _sum_or_mean(b, reduce, x, src, include_self,
                         lambda base, v: b.index_add(base, dim, idx, v), False)
    else:
        n, k = _static_size(x, dim), _numel(idx.shape)
        _check_one_hot("aten.index_reduce", _numel(src.shape), n)
        hit = b.binary("eq", b.reshape(idx, (k, 1)), b.arange(0, n, 1, "i64"))
        hit = b.reshape(hit, (1,) * dim + (k, n) + (1,) * (x.rank - dim - 1))
        vals = b.reshape(src, src.shape[:dim + 1] + (1,) + src.shape[dim + 1:])
        r = _one_hot_reduce(b, reduce, hit, vals, dim, x, include_self)
    return b.reshape(r, out.shape)


@_handles("aten.index_put.default", "aten._unsafe_index_put.default")
def _index_put(b: _Builder, a: dict, out: Out) -> Value:
    """composed: the indexed dims (moved first when not adjacent, as `index`) merged into
    one, each index position naming a row `Σ index_k·stride_k` (negative indices wrapped,
    indices broadcast, None entries whole dims); accumulate=True: `index_add` of the value
    rows; else the last write wins: per row the writer `w = amax_k where(row[k] == j, k, -1)`,
    then `where(w ≥ 0, index_select(values, w), self)`."""
    x, values = _tensor(a, "self"), _tensor(a, "values")
    return _put_rows(b, "aten.index_put", x, list(a["indices"]), values, a["accumulate"])


@_handles("aten.put.default")
def _put(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `index_put` on the flattened self with the flattened index and source."""
    x, idx, src = _tensor(a, "self"), _tensor(a, "index"), _tensor(a, "source")
    flat = b.reshape(x, (_numel(x.shape),))
    n = _numel(idx.shape)
    r = _put_rows(b, "aten.put", flat, [b.reshape(idx, (n,))], b.reshape(src, (n,)),
                  a["accumulate"])
    return b.reshape(r, x.shape)


def _put_rows(b: _Builder, op: str, x: Value, indices: list, values: Value,
              accumulate: bool) -> Value:
    used = [i for i, t in enumerate(indices) if t is not None]
    if not used:
        raise Unsupported(f"{op}: no index tensor")
    if any(indices[i].dtype not in _INTS for i in used):
        raise Unsupported(f"{op}: boolean mask indices (data-dependent positions)")
    perm = None
    if used != list(range(used[0], used[-1] + 1)):
        perm = used + [d for d in range(x.rank) if d not in used]
        x, indices, used = b.permute(x, perm), [indices[i] for i in used], list(
            range(len(used)))
    first, last = used[0], used[-1] + 1
    sizes = [_static_size(x, d) for d in used]
    shape = _broadcast(*(indices[d].shape for d in used))
    pre, post = x.shape[:first], x.shape[last:]
    k, m = _numel(shape), math.prod(sizes)
    rows = _row_offsets(b, [indices[d] for d in used], sizes, shape)
    merged = b.reshape(b.cast(x, _work(x) if accumulate else x.dtype), pre + (m,) + post)
    vals = b.reshape(b.expand(values, pre + shape + post), pre + (k,) + post)
    vals = b.cast(vals, merged.dtype)
    if k == 0:
        r = merged
    elif accumulate:
        r = b.index_add(merged, first, rows, vals)
    else:
        r = _overwrite_rows(b, op, merged, first, rows, vals)
    r = b.reshape(r, x.shape)
    if perm is not None:
        r = b.permute(r, [perm.index(d) for d in range(len(perm))])
    return r


def _row_offsets(b: _Builder, indices: list, sizes: list, shape) -> Value:
    """The merged row `Σ index_k·stride_k` of each index position, flattened (i64)."""
    flat = None
    for k, idx in enumerate(indices):
        term = _wrap_negative(b, b.cast(idx, "i64"), sizes[k])
        stride = math.prod(sizes[k + 1:])
        term = b.mul(term, stride) if stride != 1 else term
        flat = term if flat is None else b.add(flat, term)
    return b.reshape(b.expand(flat, shape), (_numel(shape),))


def _overwrite_rows(b: _Builder, op: str, x: Value, dim: int, rows: Value,
                    vals: Value) -> Value:
    """`x` with the rows along `dim` that `rows` names replaced by the matching rows of
    `vals` (along `dim` too), the last one winning where `rows` repeats."""
    m, k = _static_size(x, dim), _numel(rows.shape)
    _check_one_hot(op, k, m)
    hit = b.binary("eq", b.reshape(rows, (k, 1)), b.arange(0, m, 1, "i64"))
    w = _last_writer(b, hit, 0)
    picked = b.index_select(vals, dim, b.clamp(w, 0, k - 1))
    keep = b.reshape(b.binary("ge", w, 0), (1,) * dim + (m,) + (1,) * (x.rank - dim - 1))
    return b.where(keep, picked, x)


@_handles("aten.masked_scatter.default")
def _masked_scatter(b: _Builder, a: dict, out: Out) -> Value:
    """composed: the n-th set position of the mask (row-major) takes `source.flatten()[n]`:
    n from the inclusive count of set positions (a lower-triangular `where` summed),
    read with `index_select`; quadratic in self's size."""
    x, mask, src = _tensor(a, "self"), _tensor(a, "mask"), _tensor(a, "source")
    t, s = _numel(out.shape), _numel(src.shape)
    mask = b.reshape(b.expand(mask, out.shape), (t,))
    x = b.expand(x, out.shape)
    if t == 0 or s == 0:
        return x
    _check_one_hot("aten.masked_scatter", t, t)
    pos = b.arange(0, t, 1, "i64")
    before = b.binary("le", b.reshape(pos, (1, t)), b.reshape(pos, (t, 1)))
    count = b.reduce("sum", b.where(before, b.reshape(b.cast(mask, "i64"), (1, t)), 0), [1],
                     False)
    safe = b.clamp(b.sub(count, 1), 0, s - 1)
    taken = b.index_select(b.reshape(src, (s,)), 0, safe)
    return b.where(b.reshape(mask, out.shape), b.reshape(taken, out.shape), x)
