"""`searchsorted` and `bucketize` as torch's CPU kernel computes them: a binary search per
value, unrolled into a fixed number of halving steps (⌈log2(n+1)⌉ for n boundaries), each a
gather of the middle boundary and a comparison, so unsorted boundaries and NaNs give the
same answer as torch's loop."""

from __future__ import annotations

from ..fx_to_kir import (
    Out, Unsupported, Value, _Builder, _handles, _promote, _static_size, _tensor,
)


def _halve(b: _Builder, lo: Value, hi: Value) -> Value:
    """`(lo + hi) // 2` of non-negative i64 values (through f64, exact below 2^53)."""
    return b.cast(b.unary("floor", b.div(b.cast(b.add(lo, hi), "f64"), 2.0)), "i64")


def _rows_gather(b: _Builder, seq: Value, idx: Value) -> Value:
    """`seq[..., idx]` row by row: `seq` [..., n], `idx` [..., m] with the same leading
    sizes (or `seq` 1-d, shared by every value); one `index_select` of the flattened rows."""
    if seq.rank == 1:
        return b.index_select(seq, 0, idx)
    n = _static_size(seq, seq.rank - 1)
    rows = 1
    for d in range(seq.rank - 1):
        rows *= _static_size(seq, d)
    row = b.reshape(b.arange(0, rows * n, n, "i64"), tuple(seq.shape[:-1]) + (1,))
    return b.index_select(b.reshape(seq, [rows * n]), 0, b.add(idx, row))


def _search(b: _Builder, seq: Value, values: Value, right: bool, sorter: Value | None,
            dtype: str) -> Value:
    """torch's `cus_lower_bound` / `cus_upper_bound`: while lo < hi, go right past mid when
    `!(seq[mid] >= v)` (lower) or `!(seq[mid] > v)` (upper), else hi = mid."""
    n = _static_size(seq, seq.rank - 1)
    common = _promote(seq.dtype, values.dtype)
    seq, values = b.cast(seq, common), b.cast(values, common)
    lo = b.full(values.shape, 0, "i64")
    if n == 0:
        return b.cast(lo, dtype)
    hi = b.full(values.shape, n, "i64")
    for _ in range(n.bit_length()):
        active = b.binary("lt", lo, hi)
        mid = _halve(b, lo, hi)
        safe = b.binary("minimum", mid, n - 1)
        pos = _rows_gather(b, sorter, safe) if sorter is not None else safe
        at = _rows_gather(b, seq, pos)
        stop = b.binary("gt" if right else "ge", at, values)
        go_right = b.binary("logical_and", active, b.unary("logical_not", stop))
        go_left = b.binary("logical_and", active, stop)
        lo = b.where(go_right, b.add(mid, 1), lo)
        hi = b.where(go_left, mid, hi)
    return b.cast(lo, dtype)


@_handles("aten.searchsorted.Tensor")
def _searchsorted(b: _Builder, a: dict, out: Out) -> Value:
    """composed: the unrolled binary search (module docstring); `side` overrides `right`,
    `sorter` indirects each probe."""
    seq, values = _tensor(a, "sorted_sequence"), _tensor(a, "self")
    right = a["right"] if a.get("side") is None else a["side"] == "right"
    sorter = a.get("sorter")
    if seq.rank == 0:
        raise Unsupported("aten.searchsorted: a 0-d sorted_sequence")
    if seq.rank > 1 and tuple(seq.shape[:-1]) != tuple(values.shape[:-1]):
        raise Unsupported("aten.searchsorted: leading sizes of sequence and values differ")
    if values.rank == 0:
        flat = b.reshape(values, (1,))
        return b.reshape(_search(b, seq, flat, right, sorter, out.dtype), ())
    return _search(b, seq, values, right, sorter, out.dtype)


@_handles("aten.bucketize.Tensor")
def _bucketize(b: _Builder, a: dict, out: Out) -> Value:
    """composed: the unrolled binary search of each value in the 1-d boundaries."""
    values, bounds = _tensor(a, "self"), _tensor(a, "boundaries")
    if bounds.rank != 1:
        raise Unsupported(f"aten.bucketize: boundaries of rank {bounds.rank}")
    if values.rank == 0:
        flat = b.reshape(values, (1,))
        return b.reshape(_search(b, bounds, flat, a["right"], None, out.dtype), ())
    return _search(b, bounds, values, a["right"], None, out.dtype)
