"""Sorting ops (sort, topk, kthvalue, median, nanmedian) as a bitonic sorting network.

kiln has no sort op, so the sorted dim is moved last, the rows flattened to ``(R, n)`` and
padded to ``N = 2^p`` columns, and each row sorted by a bitonic network of compare-exchange
steps on ``(value, index)`` pairs: for each block size ``2^k`` one *flip* step (element ``i``
of a block against its mirror ``2^k-1-i``) then half-cleaner steps at distances
``2^(k-2) .. 1``. A step is a `reshape` to ``(R, N/2d, 2, d)``, two `slice`s (the flip step
reverses the upper half with `index_select`), one comparison, four `where`s and two `cat`s.

The order is torch's, made total by the original index: ascending puts NaN last, descending
puts NaN first, -0.0 == 0.0, and equal values keep their original order (so ``stable=True``
holds, and the result is one torch may give for ``stable=False`` too). The padding columns
hold the value that is last in the order (NaN or the dtype's maximum ascending, -inf or the
minimum descending) and the indices ``n .. N-1``, so the index tie-break puts them after
every real entry, even one with the same value.
"""

from __future__ import annotations

from ..fx_to_kir import (
    _FLOATS,
    Out,
    Unsupported,
    Value,
    _Builder,
    _handles,
    _norm_dim,
    _numel,
    _tensor,
)

_SORT_MAX = 8192
"""The longest dim sorted: the network has about log2(n)²/2 steps over the whole tensor."""

_LIMITS = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1)}


# ---------------------------------------------------------------------------------------
# Rows: the sorted dim moved last, the other dims flattened
# ---------------------------------------------------------------------------------------


def _rows(b: _Builder, x: Value, dim: int | None, op: str) -> tuple[Value, list[int]]:
    """``x`` as ``(R, n)`` rows along ``dim`` (None: the whole tensor as one row), and the
    permutation that moved ``dim`` last (empty when flattened)."""
    numel = _numel(x.shape)
    if dim is None or x.rank == 0:
        perm: list[int] = []
        rows = b.reshape(x, [1, numel])
    else:
        dim = _norm_dim(dim, x.rank)
        perm = [d for d in range(x.rank) if d != dim] + [dim]
        others = _numel([x.shape[d] for d in perm[:-1]])
        rows = b.reshape(b.permute(x, perm), [others, x.shape[dim]])
    n = rows.shape[1]
    if n > _SORT_MAX:
        raise Unsupported(f"{op}: sorting {n} > {_SORT_MAX} elements along a dim (kiln has "
                          "no sort op; the sorting network is capped)")
    return rows, perm


def _unrows(b: _Builder, rows: Value, x: Value, perm: list[int]) -> Value:
    """``(R, m)`` rows back to ``x``'s layout, the sorted dim (now of size m) in place."""
    if not perm:
        return b.reshape(rows, x.shape)
    moved = [x.shape[d] for d in perm[:-1]] + [rows.shape[1]]
    inverse = sorted(range(len(perm)), key=perm.__getitem__)
    return b.permute(b.reshape(rows, moved), inverse)


# ---------------------------------------------------------------------------------------
# The network
# ---------------------------------------------------------------------------------------


def _key_dtype(dtype: str) -> str:
    """The dtype the values are compared (and carried) in: their own, bool as i32."""
    return "i32" if dtype == "bool" else dtype


def _last_value(dtype: str, descending: bool) -> float | int:
    """A value no real entry sorts after (ties go by index, so pads stay last)."""
    if dtype in _FLOATS:
        return -float("inf") if descending else float("nan")
    lo, hi = _LIMITS[dtype]
    return lo if descending else hi


def _at_or_before(b: _Builder, x: Value, y: Value, descending: bool) -> Value:
    """Whether value ``x`` sorts at or before value ``y`` (NaN last ascending, first
    descending; comparisons with NaN are false, so NaN is caught with `isnan`)."""
    cmp = b.binary("ge" if descending else "le", x, y)
    if x.dtype not in _FLOATS:
        return cmp
    return b.binary("logical_or", cmp, b.unary("isnan", x if descending else y))


def _before(b: _Builder, va: Value, ia: Value, vb: Value, ib: Value, descending: bool) -> Value:
    """Whether ``(va, ia)`` sorts strictly before ``(vb, ib)``: by value, then by index."""
    a_first = _at_or_before(b, va, vb, descending)
    b_first = _at_or_before(b, vb, va, descending)
    return b.where(b.binary("lt", ia, ib), a_first, b.unary("logical_not", b_first))


def _steps(size: int) -> list[tuple[bool, int]]:
    """The bitonic network for ``size = 2^p``: ``(flip, d)`` per step, comparing elements
    ``d`` apart in blocks of ``2d`` (mirrored within the block when ``flip``)."""
    steps = []
    block = 2
    while block <= size:
        steps.append((True, block // 2))
        d = block // 4
        while d >= 1:
            steps.append((False, d))
            d //= 2
        block *= 2
    return steps


def _compare_exchange(
    b: _Builder, v: Value, i: Value, flip: bool, d: int, descending: bool
) -> tuple[Value, Value]:
    """One step: in each block of ``2d``, the pair (lower half ``j``, upper half ``j``, or
    ``d-1-j`` when ``flip``) put in order. After a flip step the upper halves stay reversed:
    a reversed bitonic sequence is bitonic, and the half-cleaners after it sort either."""
    r, size = v.shape
    shape = [r, size // (2 * d), 2, d]
    halves = []
    for t in (v, i):
        t = b.reshape(t, shape)
        lo, hi = b.slice(t, 2, 0, 1), b.slice(t, 2, 1, 2)
        if flip and d > 1:
            hi = b.index_select(hi, 3, b.arange(d - 1, -1, -1, "i64"))
        halves.append((lo, hi))
    (vlo, vhi), (ilo, ihi) = halves
    swap = _before(b, vhi, ihi, vlo, ilo, descending)
    return tuple(
        b.reshape(b.cat([b.where(swap, hi, lo), b.where(swap, lo, hi)], 2), [r, size])
        for lo, hi in halves
    )


def _sort_rows(b: _Builder, rows: Value, descending: bool) -> tuple[Value, Value]:
    """``(values, indices)`` of each row of ``rows`` sorted; values in the key dtype."""
    r, n = rows.shape
    v = b.cast(rows, _key_dtype(rows.dtype))
    if n <= 1 or r == 0:
        return v, b.full((r, n), 0, "i64")
    size = 1 << (n - 1).bit_length()
    if size > n:
        pad = b.full((r, size - n), _last_value(v.dtype, descending), v.dtype)
        v = b.cat([v, pad], 1)
    i = b.expand(b.reshape(b.arange(0, size, 1, "i64"), [1, size]), [r, size])
    for flip, d in _steps(size):
        v, i = _compare_exchange(b, v, i, flip, d, descending)
    return b.slice(v, 1, 0, n), b.slice(i, 1, 0, n)


# ---------------------------------------------------------------------------------------
# Picking one position per row
# ---------------------------------------------------------------------------------------


def _pick(b: _Builder, rows: Value, pos: int | Value) -> Value:
    """``rows[r, pos_r]`` as ``(R, 1)``: a `slice` for a literal position, else an
    `index_select` of the flattened rows at ``r·n + pos_r`` (``pos`` i64 of shape (R, 1))."""
    r, n = rows.shape
    if isinstance(pos, int):
        return b.slice(rows, 1, pos, pos + 1)
    offsets = b.add(b.mul(b.reshape(b.arange(0, r, 1, "i64"), [r, 1]), n), pos)
    flat = b.index_select(b.reshape(rows, [r * n]), 0, b.reshape(offsets, [r]))
    return b.reshape(flat, [r, 1])


def _non_nan_count(b: _Builder, rows: Value) -> Value:
    """The number of non-NaN entries of each row, i64 ``(R, 1)``."""
    return b.reduce("sum", b.unary("logical_not", b.unary("isnan", rows)), [1], True)


def _lower_half(b: _Builder, count: Value) -> Value:
    """``(count - 1) // 2`` clamped at 0 (i64; exact in f64 for counts ≤ 2^53)."""
    half = b.unary("floor", b.mul(b.cast(b.sub(count, 1), "f64"), 0.5))
    return b.cast(b.binary("maximum", half, 0.0), "i64")


def _median_position(b: _Builder, rows: Value, ignore_nan: bool) -> int | Value:
    """The position of the median in each sorted row (NaN last): the lower median
    ``(n-1)//2``; with a NaN in the row, torch's median is its first NaN (position ``count``
    of non-NaNs, the NaNs keeping their order), nanmedian the lower median of the non-NaNs
    (position 0, a NaN, when all are NaN)."""
    n = rows.shape[1]
    if rows.dtype not in _FLOATS:
        return (n - 1) // 2
    count = _non_nan_count(b, rows)
    if ignore_nan:
        return _lower_half(b, count)
    return b.where(b.binary("lt", count, n), count, (n - 1) // 2)


# ---------------------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------------------


@_handles("aten.sort.default", "aten.sort.stable")
def _sort(b: _Builder, a: dict, out: Out) -> tuple:
    """composed: the bitonic network (module docstring) along `dim`; stable always."""
    x = _tensor(a, "self", "aten.sort")
    rows, perm = _rows(b, x, a["dim"], "aten.sort")
    v, i = _sort_rows(b, rows, bool(a["descending"]))
    return _unrows(b, b.cast(v, x.dtype), x, perm), _unrows(b, i, x, perm)


@_handles("aten.topk.default")
def _topk(b: _Builder, a: dict, out: Out) -> tuple:
    """composed: the first k of the network's sort along `dim`, descending for largest
    (NaN counts as largest); `sorted=False` returns them sorted too (any order is allowed)."""
    x, k = _tensor(a, "self", "aten.topk"), a["k"]
    if not isinstance(k, int):
        raise Unsupported("aten.topk: a symbolic k")
    rows, perm = _rows(b, x, a["dim"], "aten.topk")
    v, i = _sort_rows(b, rows, bool(a["largest"]))
    v, i = b.slice(v, 1, 0, k), b.slice(i, 1, 0, k)
    return _unrows(b, b.cast(v, x.dtype), x, perm), _unrows(b, i, x, perm)


def _reduced(b: _Builder, v: Value, i: Value, x: Value, out: Out) -> tuple:
    """Picked ``(R, 1)`` values and indices in the output's shape (keepdim or not: the
    other dims kept their order, so a reshape places them)."""
    return b.reshape(b.cast(v, x.dtype), out[0].shape), b.reshape(i, out[1].shape)


@_handles("aten.kthvalue.default")
def _kthvalue(b: _Builder, a: dict, out: Out) -> tuple:
    """composed: position k-1 of the network's ascending sort along `dim` (NaN last)."""
    x, k = _tensor(a, "self", "aten.kthvalue"), a["k"]
    rows, _ = _rows(b, x, a["dim"], "aten.kthvalue")
    if not (isinstance(k, int) and 1 <= k <= rows.shape[1]):
        raise Unsupported(f"aten.kthvalue: k={k} for a dim of {rows.shape[1]}")
    v, i = _sort_rows(b, rows, False)
    return _reduced(b, _pick(b, v, k - 1), _pick(b, i, k - 1), x, out)


def _median(ignore_nan: bool, with_dim: bool):
    op = f"aten.{'nan' if ignore_nan else ''}median.{'dim' if with_dim else 'default'}"

    def handler(b: _Builder, a: dict, out: Out):
        x = _tensor(a, "self", op)
        rows, _ = _rows(b, x, a["dim"] if with_dim else None, op)
        if rows.shape[1] == 0:
            raise Unsupported(f"{op}: an empty dim")
        v, i = _sort_rows(b, rows, False)
        pos = _median_position(b, rows, ignore_nan)
        if with_dim:
            return _reduced(b, _pick(b, v, pos), _pick(b, i, pos), x, out)
        return b.reshape(b.cast(_pick(b, v, pos), x.dtype), out.shape)

    handler.__doc__ = (
        "composed: the network's ascending sort (NaN last) " + ("along `dim`" if with_dim
        else "of the flattened tensor") + ", then the lower median picked by `slice`, or by "
        "`index_select` of the flattened rows at a position counted from `isnan`: "
        + ("the lower median of the non-NaNs" if ignore_nan else "the first NaN if any"))
    return handler


for _nan in (False, True):
    for _with_dim in (False, True):
        _key = f"aten.{'nan' if _nan else ''}median.{'dim' if _with_dim else 'default'}"
        _handles(_key)(_median(_nan, _with_dim))
