"""Distances and multilinear products: `dist`, `_cdist_forward`, `_pdist_forward`,
`_trilinear` (what `nn.functional.bilinear` becomes), composed from kiln's pointwise ops,
reductions and matmul in the order torch's CPU kernels use."""

from __future__ import annotations

import math

from ..fx_to_kir import (
    Out, TType, Unsupported, Value, _Builder, _handles, _ints, _norm_dim, _numel, _scalar,
    _static_size, _tensor,
)

_MAX_PAIRS = 1 << 16
"""The most row pairs `_pdist_forward` lists as constant indices."""


def _p_norm(b: _Builder, d: Value, p: float, dim: int) -> Value:
    """`‖d‖_p` along `dim` as torch's distance kernels define it: p = 0 counts the nonzero
    entries, ±inf takes max/min of |d|, p = 1 sums |d|, p = 2 is sqrt(Σd²), else
    (Σ|d|^p)^(1/p)."""
    if p == 0:
        return b.reduce("sum", b.cast(b.binary("ne", d, 0), d.dtype), [dim], False)
    mag = b.unary("abs", d)
    if math.isinf(p):
        return b.reduce("amax" if p > 0 else "amin", mag, [dim], False)
    if p == 1:
        return b.reduce("sum", mag, [dim], False)
    if p == 2:
        return b.unary("sqrt", b.reduce("sum", b.mul(d, d), [dim], False))
    return b.binary("pow", b.reduce("sum", b.binary("pow", mag, p), [dim], False), 1.0 / p)


@_handles("aten.dist.default")
def _dist(b: _Builder, a: dict, out: Out) -> Value:
    """composed: the p-norm of `self - other` over all elements."""
    x, y = _tensor(a, "self"), _tensor(a, "other")
    p = float(_scalar(a["p"], "dist"))
    d = b.cast(b.sub(x, y), out.dtype)
    flat = b.reshape(d, [_numel(d.shape)])
    return b.reshape(_p_norm(b, flat, p, 0), out.shape)


def _euclid_by_matmul(b: _Builder, x1: Value, x2: Value) -> Value:
    """torch's `_euclidean_dist`: [-2·x1, |x1|², 1] · [x2, 1, |x2|²]ᵀ, clamped at 0, sqrt."""
    def squares(x: Value) -> Value:
        return b.reduce("sum", b.mul(x, x), [x.rank - 1], True)

    n1, n2 = squares(x1), squares(x2)
    ones1, ones2 = b.full(n1.shape, 1, x1.dtype), b.full(n2.shape, 1, x2.dtype)
    left = b.cat([b.mul(x1, -2), n1, ones1], x1.rank - 1)
    right = b.cat([x2, ones2, n2], x2.rank - 1)
    prod = b.matmul(left, b.transpose(right, right.rank - 2, right.rank - 1))
    return b.unary("sqrt", b.binary("maximum", prod, 0.0))


def _batched(b: _Builder, x: Value, lead: tuple) -> Value:
    """`x` [..., r, m] broadcast to the batch sizes `lead` + [r, m]."""
    full = lead + tuple(x.shape[-2:])
    if x.rank < len(full):
        x = b.reshape(x, (1,) * (len(full) - x.rank) + tuple(x.shape))
    return b.expand(x, full) if tuple(x.shape) != full else x


@_handles("aten._cdist_forward.default")
def _cdist(b: _Builder, a: dict, out: Out) -> Value:
    """composed: for p = 2 where torch's kernel uses matrix products (compute_mode 1, or the
    default with more than 25 rows on either side) its `_euclidean_dist`; otherwise the
    p-norm of the broadcast differences `x1[..., :, None, :] - x2[..., None, :, :]`."""
    x1, x2 = _tensor(a, "x1"), _tensor(a, "x2")
    p, mode = float(a["p"]), a["compute_mode"]
    if x1.rank < 2 or x2.rank < 2:
        raise Unsupported("aten._cdist_forward: operands of rank < 2")
    lead = tuple(out.shape[:-2])
    x1, x2 = _batched(b, b.cast(x1, out.dtype), lead), _batched(b, b.cast(x2, out.dtype), lead)
    rows1, rows2 = _static_size(x1, x1.rank - 2), _static_size(x2, x2.rank - 2)
    if p == 2 and (mode == 1 or (mode in (None, 0) and (rows1 > 25 or rows2 > 25))):
        return _euclid_by_matmul(b, x1, x2)
    r = x1.rank
    left = b.reshape(x1, tuple(x1.shape[:-1]) + (1, x1.shape[-1]))
    right = b.reshape(x2, tuple(x2.shape[:-2]) + (1,) + tuple(x2.shape[-2:]))
    return _p_norm(b, b.sub(left, right), p, r)


@_handles("aten._pdist_forward.default")
def _pdist(b: _Builder, a: dict, out: Out) -> Value:
    """composed: the rows i < j (row-major) picked by `index_select` at constant indices,
    then the p-norm of their differences."""
    x, p = _tensor(a, "self"), float(a["p"])
    if x.rank != 2:
        raise Unsupported(f"aten._pdist_forward: rank {x.rank} input")
    n = _static_size(x, 0)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    if len(pairs) > _MAX_PAIRS:
        raise Unsupported(f"aten._pdist_forward: {len(pairs)} pairs > {_MAX_PAIRS}")
    if not pairs:
        return b.full(out.shape, 0, out.dtype)

    def rows(k: int) -> Value:
        attrs = {"values": [float(pr[k]) for pr in pairs], "shape": [len(pairs)],
                 "dtype": "i64"}
        return b.emit("from_vec", [], attrs, TType("i64", (len(pairs),)))

    xs = b.cast(x, out.dtype)
    d = b.sub(b.index_select(xs, 0, rows(0)), b.index_select(xs, 0, rows(1)))
    return _p_norm(b, d, p, 1)


@_handles("aten._trilinear.default")
def _trilinear(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `Σ_sumdim i1·i2·i3`, each operand with size-1 dims inserted at its
    `expand` positions so the three broadcast; the product summed in f32 or wider."""
    ins = [_tensor(a, k) for k in ("i1", "i2", "i3")]
    expands = [_ints(a[k], "_trilinear") for k in ("expand1", "expand2", "expand3")]
    sumdim = _ints(a["sumdim"], "_trilinear")
    rank = ins[0].rank + len(expands[0])
    shaped = []
    for x, ex in zip(ins, expands):
        dims, it = [], iter(x.shape)
        for d in range(rank):
            dims.append(1 if d in ex else next(it))
        shaped.append(b.reshape(b.cast(x, out.dtype), dims))
    prod = b.mul(b.mul(shaped[0], shaped[1]), shaped[2])
    dims = sorted({_norm_dim(d, rank) for d in sumdim})
    return b.reduce("sum", prod, dims, False) if dims else prod
