"""`segment_reduce`: reductions over consecutive segments of a dim whose lengths (or offsets)
are a tensor, so the segment bounds are data but the output's size is not. Each element's
membership in each segment is a one-hot comparison of its position with the segment's
[start, end) (quadratic: segments × positions × the rest, capped), and the reduction runs
over `where(member, data, identity)`, as torch's kernel defines it: `initial` joins every
segment; without it an empty segment is 0 (sum), NaN (mean), -inf (max), inf (min), 1 (prod).
"""

from __future__ import annotations

import math

from ..fx_to_kir import (
    _FLOATS, Out, Unsupported, Value, _Builder, _handles, _numel, _scalar, _static_size,
    _tensor,
)
from .scan import scan_sum, tree_prod

_ONE_HOT_MAX = 1 << 22
"""The most (segment, element) pairs the membership comparison may hold."""

_IDENTITY = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf, "prod": 1.0}


def _bounds(b: _Builder, a: dict, lead: int) -> tuple[Value, Value]:
    """Each segment's start and end positions (i64 [..., K], the data's `lead` leading sizes
    first) from `lengths` or `offsets`."""
    if a.get("lengths") is not None:
        lengths = b.cast(_tensor(a, "lengths"), "i64")
        if lengths.rank != lead + 1:
            raise Unsupported("aten.segment_reduce: lengths of the wrong rank")
        ends = scan_sum(b, lengths, lead, "i64")
        return b.sub(ends, lengths), ends
    if a.get("offsets") is not None:
        offsets = b.cast(_tensor(a, "offsets"), "i64")
        if offsets.rank != lead + 1:
            raise Unsupported("aten.segment_reduce: offsets of the wrong rank")
        k = _static_size(offsets, lead) - 1
        return b.slice(offsets, lead, 0, k), b.slice(offsets, lead, 1, k + 1)
    raise Unsupported("aten.segment_reduce: segments given by indices")


@_handles("aten.segment_reduce.default")
def _segment_reduce(b: _Builder, a: dict, out: Out) -> Value:
    """composed: the one-hot segment membership (module docstring) reduced by `sum`,
    `amax`, `amin` or a product tree; mean is (Σ + initial) / length (initial alone for an
    empty segment)."""
    data, reduce, axis = _tensor(a, "data"), a["reduce"], a["axis"]
    if reduce not in _IDENTITY:
        raise Unsupported(f"aten.segment_reduce: reduce={reduce!r}")
    if data.rank == 0:
        raise Unsupported("aten.segment_reduce: 0-d data")
    if data.dtype not in _FLOATS:
        raise Unsupported(f"aten.segment_reduce: dtype {data.dtype}")
    axis = axis % data.rank
    start, end = _bounds(b, a, axis)
    lead, rest = tuple(data.shape[:axis]), tuple(data.shape[axis + 1:])
    k, n = _static_size(start, axis), _static_size(data, axis)
    if k * _numel(data.shape) > _ONE_HOT_MAX:
        raise Unsupported(f"aten.segment_reduce: {k} segments × {_numel(data.shape)} elements "
                          f"> {_ONE_HOT_MAX}")
    ones = (1,) * len(rest)
    pos = b.reshape(b.arange(0, n, 1, "i64"), (1,) * len(lead) + (1, n) + ones)
    lo = b.reshape(start, lead + (k, 1) + ones)
    hi = b.reshape(end, lead + (k, 1) + ones)
    member = b.binary("logical_and", b.binary("ge", pos, lo), b.binary("lt", pos, hi))
    work = "f64" if reduce == "prod" else data.dtype
    values = b.cast(b.reshape(data, lead + (1, n) + rest), work)
    picked = b.where(member, values, _IDENTITY[reduce])
    initial = a.get("initial")
    init = None if initial is None else float(_scalar(initial, "segment_reduce"))
    over = len(lead) + 1
    if reduce == "prod":
        red = b.reshape(tree_prod(b, picked, over), lead + (k,) + rest)
        red = b.mul(red, init) if init is not None else red
    else:
        op = {"sum": "sum", "mean": "sum", "max": "amax", "min": "amin"}[reduce]
        red = b.reduce(op, picked, [over], False)
        if init is not None and reduce in ("sum", "mean"):
            red = b.add(red, init)
        elif init is not None:
            red = b.binary("maximum" if reduce == "max" else "minimum", red, init)
    if reduce == "mean":
        length = b.reshape(b.sub(end, start), lead + (k,) + ones)
        empty = b.binary("eq", length, 0)
        fallback = math.nan if init is None else init
        red = b.where(empty, fallback, b.div(red, b.cast(length, red.dtype)))
    return b.cast(red, out.dtype)
