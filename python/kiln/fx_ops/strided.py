"""`as_strided` and its copy and scatter forms, which address a tensor's *storage*.

kiln values have no storage, only their elements, so each storage position the op touches is
mapped back to the element of ``self`` that sits there, using the layout FX records for
``self`` (``meta['val']``: sizes, strides, storage offset). A position no element of ``self``
occupies (a gap of a strided view) holds bytes kiln never sees: Unsupported. The element
indices are computed at translation time and enter the graph as a constant (`from_vec`), at
most `_MAX_CONSTANT` of them, or, for a contiguous ``self``, as arithmetic on `arange`, which
has no size limit.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from ..fx_to_kir import (
    Out, TType, Unsupported, Value, _arg_meta, _Builder, _handles, _ints, _numel, _tensor,
)

_MAX_CONSTANT = 1 << 16
"""The most element indices one op may hold as a constant in the graph text."""


def _positions(sizes: Sequence[int], strides: Sequence[int], offset: int) -> list[int]:
    """Storage positions of the elements of a (sizes, strides, offset) view, row-major
    (plain Python: the translator may run under a fake-tensor mode)."""
    if _numel(sizes) > _MAX_CONSTANT:
        raise Unsupported(f"as_strided: {_numel(sizes)} positions > {_MAX_CONSTANT}")
    pos = [offset]
    for n, s in zip(sizes, strides):
        pos = [p + i * s for p in pos for i in range(n)]
    return pos


def _layout(node_val: Any, what: str) -> tuple[list[int], list[int], int]:
    if not isinstance(node_val, torch.Tensor):
        raise Unsupported(f"{what}: self's layout is unknown")
    try:
        return ([int(n) for n in node_val.shape], [int(s) for s in node_val.stride()],
                int(node_val.storage_offset()))
    except (TypeError, RuntimeError) as e:  # symbolic sizes or strides
        raise Unsupported(f"{what}: self's layout is symbolic ({e})") from None


def _element_indices(self_layout: tuple, wanted: list[int], what: str) -> list[int]:
    """For each storage position in `wanted`, the row-major index of the element of self
    stored there; Unsupported if some position holds no element of self."""
    sizes, strides, offset = self_layout
    owner = {p: j for j, p in enumerate(_positions(sizes, strides, offset))}
    missing = [p for p in wanted if p not in owner]
    if missing:
        raise Unsupported(f"{what}: it reads storage position {missing[0]}, which no element "
                          f"of self holds (self {sizes} strides {strides} offset {offset})")
    return [owner[p] for p in wanted]


def _contiguous(layout: tuple) -> bool:
    sizes, strides, _ = layout
    return all(n == 1 or s == math.prod(sizes[k + 1:]) for k, (n, s) in
               enumerate(zip(sizes, strides)))


def _constant(b: _Builder, values: list[int], shape: Sequence[int], what: str) -> Value:
    if len(values) > _MAX_CONSTANT:
        raise Unsupported(f"{what}: {len(values)} element indices > {_MAX_CONSTANT}")
    attrs = {"values": [float(v) for v in values], "shape": list(shape),
             "dtype": "i64"}
    return b.emit("from_vec", [], attrs, TType("i64", tuple(shape)))


def _view_indices(b: _Builder, layout: tuple, size: list, stride: list, offset: int,
                  what: str) -> Value:
    """The row-major element indices of self that the view (size, stride, offset) reads,
    as an i64 tensor of shape `size`."""
    if _contiguous(layout) and _numel(size) > 0:
        total = _numel(layout[0])
        lo = offset - layout[2]
        hi = lo + sum((n - 1) * s for n, s in zip(size, stride))
        if lo < 0 or hi >= total:
            raise Unsupported(f"{what}: the view reads outside self's {total} elements")
        idx: Value = b.full([1] * len(size), lo, "i64")
        for d, (n, s) in enumerate(zip(size, stride)):
            if n > 1 and s != 0:
                idx = b.add(idx, b.mul(b.arange_along(n, d, len(size)), s))
        return b.expand(idx, size) if tuple(idx.shape) != tuple(size) else idx
    picked = _element_indices(layout, _positions(size, stride, offset), what)
    return _constant(b, picked, size, what)


def _args(a: dict, what: str) -> tuple[Value, list, list, int]:
    x = _tensor(a, "self")
    size, stride = _ints(a["size"], what), _ints(a["stride"], what)
    offset = a.get("storage_offset")
    return x, size, stride, offset


@_handles("aten.as_strided.default", "aten.as_strided_copy.default")
def _as_strided(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `index_select` of the flattened self at the element indices the view's
    storage positions map to (see the module docstring)."""
    what = "aten.as_strided"
    x, size, stride, offset = _args(a, what)
    layout = _layout(_arg_meta(a), what)
    offset = layout[2] if offset is None else int(offset)
    if _numel(size) == 0:
        return b.full(size, 0, x.dtype)
    idx = _view_indices(b, layout, size, stride, offset, what)
    flat = b.reshape(x, [_numel(x.shape)]) if x.rank != 1 else x
    return b.index_select(flat, 0, idx)


@_handles("aten.as_strided_scatter.default")
def _as_strided_scatter(b: _Builder, a: dict, out: Out) -> Value:
    """composed, for a contiguous self (its copy, which the view addresses, is laid out
    row-major from position 0): each element of self that the view covers takes the element
    of src written there last (row-major order, as the copy writes), others keep self's;
    one `index_select` of src at constant indices and a `where` on a constant mask."""
    what = "aten.as_strided_scatter"
    x, size, stride, offset = _args(a, what)
    layout = _layout(_arg_meta(a), what)
    if not _contiguous(layout):
        raise Unsupported(f"{what}: a non-contiguous self (its copy's layout is torch's "
                          "choice)")
    offset = 0 if offset is None else int(offset)
    total = _numel(x.shape)
    pos = _positions(size, stride, offset)
    if pos and (min(pos) < 0 or max(pos) >= total):
        raise Unsupported(f"{what}: the view reaches outside self's {total} elements")
    if total > _MAX_CONSTANT:
        raise Unsupported(f"{what}: {total} elements > {_MAX_CONSTANT}")
    writer = [-1] * total
    for k, p in enumerate(pos):
        writer[p] = k  # the last write wins
    if total == 0 or not pos:
        return x
    src = _tensor(a, "src")
    flat_src = b.cast(b.reshape(src, [len(pos)]), x.dtype)
    taken = b.index_select(flat_src, 0, _constant(b, [max(w, 0) for w in writer], [total], what))
    hit = b.binary("ge", _constant(b, writer, [total], what), 0)
    flat_x = b.reshape(x, [total])
    return b.reshape(b.where(hit, taken, flat_x), x.shape)
