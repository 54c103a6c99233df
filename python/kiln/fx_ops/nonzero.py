"""`nonzero_static`: the coordinates of the first `size` nonzero elements (row-major), padded
with `fill_value`, a data-dependent selection with a static shape (what `combinations`
becomes). The k-th nonzero element is the one whose running count of nonzero elements
before it is k: a one-hot comparison of each output row with each element (quadratic:
size × elements, capped), its coordinates summed out of the one-hot `where`."""

from __future__ import annotations

from ..fx_to_kir import Out, Unsupported, Value, _Builder, _handles, _numel, _tensor
from .scan import scan_sum

_ONE_HOT_MAX = 1 << 22
"""The most (output row, element) pairs the comparison may hold."""


@_handles("aten.nonzero_static.default")
def _nonzero_static(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `rank_j` = the exclusive running count of nonzero elements, row q takes
    the coordinates of the nonzero element with rank q, or `fill_value` when none has."""
    x, size, fill = _tensor(a, "self"), a["size"], int(a["fill_value"])
    if not isinstance(size, int):
        raise Unsupported("aten.nonzero_static: a symbolic size")
    n, rank = _numel(x.shape), x.rank
    if size * n > _ONE_HOT_MAX:
        raise Unsupported(f"aten.nonzero_static: {size} rows × {n} elements > {_ONE_HOT_MAX}")
    if size == 0 or rank == 0 or n == 0:
        if rank == 0 and size > 0:
            return b.full((size, 0), 0, "i64")
        return b.full((size, rank), fill, "i64")
    nz = b.reshape(b.binary("ne", x, 0) if x.dtype != "bool" else x, [n])
    count = b.cast(nz, "i64")
    before = b.sub(scan_sum(b, count, 0, "i64"), count)
    rows = b.reshape(b.arange(0, size, 1, "i64"), (size, 1))
    match = b.binary("logical_and", b.binary("eq", b.reshape(before, (1, n)), rows),
                     b.reshape(nz, (1, n)))
    found = b.reduce("amax", b.cast(match, "i32"), [1], True)
    columns = []
    for d in range(rank):
        coord = b.expand(b.arange_along(x.shape[d], d, rank), x.shape)
        picked = b.where(match, b.reshape(coord, (1, n)), 0)
        columns.append(b.reduce("sum", picked, [1], True))
    coords = b.cat(columns, 1) if rank > 1 else columns[0]
    return b.where(b.binary("gt", found, 0), coords, fill)
