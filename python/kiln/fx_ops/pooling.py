"""Pooling: `avg_pool{2,3}d`, `max_pool{2,3}d_with_indices`, the adaptive pools and their
backwards, composed from strided slices (or `index_select` of window positions), `where`
and elementwise sums / comparisons.

Each pooled spatial dim is an `_Axis`: n inputs pool into m outputs through windows of
`taps` positions; tap j of window i reads input position `start_i + j·dilation`, masked
where it lies outside the input (padding) or past the window's end (adaptive windows of
unequal length). Average pools sum the taps one dim after another and divide by the
window's element count as torch's CPU kernels count it; max pools scan every tap of the
window in row-major order with the kernels' update rule `v > max || isnan(v)`, which gives
the first maximum's index (and the last NaN's)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..fx_to_kir import (
    _FLOATS, Out, Unsupported, Value, _Builder, _handles, _ints, _static_size, _tensor,
)

_MAX_TAPS = 256
"""The most taps one adaptive window dim is composed of (a long window of a short output)."""
_MAX_SCAN = 4096
"""The most window positions a max pool scans (the product of its dims' taps)."""


@dataclass(frozen=True)
class _Axis:
    """One pooled dim: `n` inputs to `m` outputs. Regular windows (`ends` None) start at
    `i·stride - pad` and read `taps` positions `dilation` apart; adaptive window i is
    `[⌊i·n/m⌋, ends[i])`, read as `taps` (the longest window's length) consecutive
    positions, those past `ends[i]` masked."""

    n: int
    m: int
    taps: int
    stride: int = 1
    pad: int = 0
    dilation: int = 1
    ends: tuple | None = None

    def start(self, i: int) -> int:
        if self.ends is None:
            return i * self.stride - self.pad
        return i * self.n // self.m

    def position(self, i: int, j: int) -> int:
        return self.start(i) + j * self.dilation

    def valid(self, i: int, j: int) -> bool:
        p = self.position(i, j)
        return 0 <= p < (self.n if self.ends is None else self.ends[i])

    def right_pad(self) -> int:
        """Positions past the input the last window's last tap reaches (regular windows)."""
        return max(0, self.position(self.m - 1, self.taps - 1) + 1 - self.n)


def _adaptive(n: int, m: int) -> _Axis:
    """torch's adaptive windows `[⌊i·n/m⌋, ⌈(i+1)·n/m⌉)`; a regular pool when m divides n."""
    if m > 0 and n % m == 0:
        return _Axis(n, m, n // m, n // m)
    ends = tuple(-(-(i + 1) * n // m) for i in range(m))
    taps = max((e - i * n // m for i, e in enumerate(ends)), default=0)
    if taps > _MAX_TAPS:
        raise Unsupported(f"adaptive pool of {n} to {m}: windows over {_MAX_TAPS} long")
    return _Axis(n, m, taps, ends=ends)


# -- constants --------------------------------------------------------------------------------


def _const(b: _Builder, values: list, dtype: str = "i64") -> Value:
    """A 1-d constant: one `arange` (or `full`) per arithmetic run of `values`, `cat`ed
    (bools built as f32 and compared with 0)."""
    if dtype == "bool":
        # made from f32 inside the kernel that reads it: the CPU loop nests read no bool
        # or integer inputs, so an i64 constant cast to bool kept its readers out of them
        return b.binary("ne", _const(b, [float(bool(v)) for v in values], "f32"), 0.0)
    parts, i = [], 0
    while i < len(values):
        j = i + 1
        if j < len(values):
            step = values[j] - values[i]
            while j + 1 < len(values) and values[j + 1] - values[j] == step:
                j += 1
            j += 1
        if j - i == 1 or values[i + 1] == values[i]:
            parts.append(b.full((j - i,), values[i], dtype))
        else:
            step = values[i + 1] - values[i]
            parts.append(b.arange(values[i], values[i] + step * (j - i), step, dtype))
        i = j
    return b.cat(parts, 0)


def _along(b: _Builder, v: Value, k: int, nd: int) -> Value:
    """A 1-d value shaped to broadcast along the k-th of `nd` trailing spatial dims."""
    shape = [1] * nd
    shape[k] = v.shape[0]
    return b.reshape(v, shape)


def _mask(b: _Builder, ax: _Axis, j: int) -> Value | None:
    """Tap j's validity per window (bool [m]), None when valid in every window."""
    valid = [ax.valid(i, j) for i in range(ax.m)]
    return None if all(valid) else _const(b, valid, "bool")


# -- reading taps -----------------------------------------------------------------------------


def _padded(b: _Builder, x: Value, dim: int, ax: _Axis, value: float) -> Value:
    """x with a regular axis' padding (`value`) on both sides (an adaptive axis: x)."""
    if ax.ends is not None:
        return x
    parts = []
    for width in (ax.pad, ax.right_pad()):
        shape = list(x.shape)
        shape[dim] = width
        parts.append(b.full(shape, value, x.dtype) if width > 0 else None)
    return b.cat([v for v in (parts[0], x, parts[1]) if v is not None], dim)


def _take(b: _Builder, xp: Value, dim: int, ax: _Axis, j: int) -> Value:
    """Tap j of every window along `dim` of the padded `xp` ([..., m, ...]); an adaptive
    tap past a window's end reads a clamped position (masked by its caller)."""
    if ax.ends is None:
        first = ax.pad + ax.position(0, j)
        return b.slice(xp, dim, first, first + ax.stride * (ax.m - 1) + 1, ax.stride)
    clamped = [min(ax.position(i, j), ax.n - 1) for i in range(ax.m)]
    return b.index_select(xp, dim, _const(b, clamped))


# -- non-overlapping windows ------------------------------------------------------------------


def _blocked(ax: _Axis) -> bool:
    """Windows that tile the input's start exactly (stride = kernel, no padding or
    dilation): a reshape gathers them."""
    return (ax.ends is None and ax.stride == ax.taps and ax.dilation == 1 and ax.pad == 0
            and ax.m * ax.taps <= ax.n)


def _windows(b: _Builder, x: Value, axes: list) -> Value:
    """[..., m1, m2, ..., k1·k2·...]: each window's elements last, in row-major order."""
    nd, lead = len(axes), x.rank - len(axes)
    for k, ax in enumerate(axes):
        x = b.slice(x, lead + k, 0, ax.m * ax.taps)
    split = list(x.shape[:lead]) + [d for ax in axes for d in (ax.m, ax.taps)]
    order = list(range(lead)) + [lead + 2 * k for k in range(nd)] + [
        lead + 2 * k + 1 for k in range(nd)]
    y = b.permute(b.reshape(x, split), order)
    return b.reshape(y, list(y.shape[: lead + nd]) + [math.prod(ax.taps for ax in axes)])


def _window_offsets(b: _Builder, axes: list) -> Value:
    """i64 [k1·k2·...]: each window element's flat position relative to the window's."""
    strides = [math.prod(a.n for a in axes[k + 1 :]) for k in range(len(axes))]
    offsets = [sum(r * st for r, st in zip(rs, strides))
               for rs in itertools.product(*(range(ax.taps) for ax in axes))]
    return _const(b, offsets)


def _window_bases(b: _Builder, axes: list) -> Value:
    """i64 [m1, m2, ...]: each window's first flat position."""
    nd, total = len(axes), None
    for k, ax in enumerate(axes):
        stride = math.prod(a.n for a in axes[k + 1 :]) * ax.stride
        term = _along(b, b.arange(0, ax.m * stride, stride, "i64"), k, nd)
        total = term if total is None else b.add(total, term)
    return total


def _blocked_max(b: _Builder, x: Value, axes: list) -> tuple:
    """(max, flat index) of tiling windows: `argmax` over the gathered window (the first
    maximum), or where `amax` is NaN the last NaN's position; the value is the element
    there (`amax` of it among -infs, so a maximum 0.0 keeps the sign the kernel's has)."""
    w = _windows(b, x, axes)
    last, size = w.rank - 1, w.shape[w.rank - 1]
    local = b.argmax(w, last, False)
    if x.dtype in _FLOATS:
        flipped = b.index_select(w, last, b.arange(size - 1, -1, -1, "i64"))
        last_nan = b.sub(size - 1, b.argmax(b.cast(b.unary("isnan", flipped), "i32"),
                                            last, False))
        has_nan = b.unary("isnan", b.reduce("amax", w, [last], False))
        local = b.where(has_nan, last_nan, local)
    picked = b.binary("eq", b.arange_along(size, last, w.rank),
                      b.reshape(local, tuple(local.shape) + (1,)))
    best = b.reduce("amax", b.where(picked, w, _lowest(x.dtype)), [last], False)
    pos = b.add(_window_bases(b, axes), b.index_select(_window_offsets(b, axes), 0, local))
    return best, pos


# -- average pools ----------------------------------------------------------------------------


def _acc_dtype(x: Value, op: str) -> str:
    if x.dtype not in _FLOATS:
        raise Unsupported(f"{op}: {x.dtype} input (only floating point is composed)")
    return "f32" if x.dtype in ("f16", "bf16") else x.dtype


def _window_sums(b: _Builder, x: Value, axes: list) -> Value:
    """Σ over each window: the taps of one trailing dim after another (zeros outside),
    starting from +0.0 as torch's kernels do (so a window of -0.0 sums to +0.0)."""
    nd, x = len(axes), b.add(x, 0.0)
    for k, ax in enumerate(axes):
        dim = x.rank - nd + k
        xp = _padded(b, x, dim, ax, 0.0)
        total = None
        for j in range(ax.taps):
            v = _take(b, xp, dim, ax, j)
            mask = _mask(b, ax, j) if ax.ends is not None else None  # padding is zeros
            if mask is not None:
                v = b.where(_along(b, mask, k, nd), v, 0.0)
            total = v if total is None else b.add(total, v)
        x = total
    return x


def _count(ax: _Axis, i: int, include_pad: bool) -> int:
    """Window i's divisor along one dim, as torch's kernels: the window clipped to the
    padded input (include_pad) or to the input."""
    lo = ax.start(i)
    if ax.ends is not None:
        return ax.ends[i] - lo
    hi = min(lo + ax.taps, ax.n + ax.pad)
    return hi - lo if include_pad else min(hi, ax.n) - max(lo, 0)


def _counts(b: _Builder, axes: list, k: int, include_pad: bool, dtype: str) -> Value:
    ax = axes[k]
    counts = _const(b, [_count(ax, i, include_pad) for i in range(ax.m)])
    return b.cast(_along(b, counts, k, len(axes)), dtype)


def _divide(b: _Builder, sums: Value, axes: list, include_pad: bool = True,
            override: int | None = None, adaptive: bool = False) -> Value:
    """Window sums divided as torch's kernels divide: by divisor_override, by the product
    of the per-dim counts (regular pools), or by each dim's count in turn (adaptive pools:
    `sum / kh / kw`)."""
    if override is not None:
        return b.div(sums, float(override))
    if not adaptive:
        total = _counts(b, axes, 0, include_pad, "i64")
        for k in range(1, len(axes)):
            total = b.mul(total, _counts(b, axes, k, include_pad, "i64"))
        return b.div(sums, b.cast(total, sums.dtype))
    for k in range(len(axes)):
        sums = b.div(sums, _counts(b, axes, k, include_pad, sums.dtype))
    return sums


def _coverage(ax: _Axis) -> int:
    """The most windows any one input position lies in."""
    hits = [0] * ax.n
    for i in range(ax.m):
        for j in range(ax.taps):
            if ax.valid(i, j):
                hits[ax.position(i, j)] += 1
    return max(hits, default=0)


def _exact_half_gradient(g: Value, axes: list, op: str) -> None:
    """torch's backward kernels add each window's f16/bf16 gradient into the input's, each
    add rounded to that dtype: up to two adds per position round as one f32 add does here;
    more are refused."""
    if g.dtype in ("f16", "bf16") and math.prod(_coverage(ax) for ax in axes) > 2:
        raise Unsupported(
            f"{op}: a {g.dtype} gradient summed over more than 2 windows per position")


def _average(b: _Builder, x: Value, axes: list, out: Out, op: str, **how) -> Value:
    """The average pool of x; `how`: `_divide`'s options."""
    acc = _acc_dtype(x, op)
    if any(ax.m == 0 for ax in axes):
        return b.full(out.shape, 0, out.dtype)
    if all(_blocked(ax) for ax in axes):
        w = _windows(b, b.cast(x, acc), axes)
        sums = b.reduce("sum", w, [w.rank - 1], False)
    else:
        sums = _window_sums(b, b.cast(x, acc), axes)
    return b.cast(_divide(b, sums, axes, **how), out.dtype)


def _pool_params(a: dict, x: Value, nd: int, op: str, dilation: bool) -> tuple:
    """(kernel, stride, padding, dilation) per spatial dim (one value: every dim)."""
    def per_dim(name: str, default: list) -> list:
        v = _ints(a.get(name), op) or default
        return v * nd if len(v) == 1 else v

    k = per_dim("kernel_size", [])
    s = per_dim("stride", k)
    p = per_dim("padding", [0])
    d = per_dim("dilation", [1]) if dilation else [1] * nd
    if x.rank < nd + 1 or not (len(k) == len(s) == len(p) == len(d) == nd):
        raise Unsupported(f"{op}: pool parameters {k}, {s}, {p}, {d} for rank {x.rank}")
    return k, s, p, d


def _regular_axes(a: dict, x: Value, out_shape: tuple, nd: int, op: str,
                  dilation: bool = False) -> list:
    k, s, p, d = _pool_params(a, x, nd, op, dilation)
    axes = []
    for i in range(nd):
        dim = x.rank - nd + i
        n, m = _static_size(x, dim), out_shape[len(out_shape) - nd + i]
        axes.append(_Axis(n, m, k[i], s[i], p[i], d[i]))
    return axes


def _adaptive_axes(x: Value, out_shape: tuple, nd: int) -> list:
    lead = x.rank - nd
    return [_adaptive(_static_size(x, lead + i), out_shape[len(out_shape) - nd + i])
            for i in range(nd)]


def _avg_pool(nd: int):
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        op = f"aten.avg_pool{nd}d"
        x = _tensor(a, "self", op)
        axes = _regular_axes(a, x, out.shape, nd, op)
        return _average(b, x, axes, out, op, include_pad=a["count_include_pad"],
                        override=a["divisor_override"])

    handler.__doc__ = (
        f"composed: {nd}-d average pool: zero-padded strided `slice`s summed one dim after "
        "another, `div` by the divisor_override or the product of the per-dim window counts "
        "(clipped to input+padding with count_include_pad, else to the input).")
    return handler


def _adaptive_avg_pool(nd: int):
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        op = f"aten._adaptive_avg_pool{nd}d"
        x = _tensor(a, "self", op)
        if nd == 3 and x.dtype in ("f16", "bf16"):
            raise Unsupported(f"{op}: torch's kernel sums {x.dtype} in {x.dtype}")
        return _average(b, x, _adaptive_axes(x, out.shape, nd), out, op, adaptive=True)

    handler.__doc__ = (
        f"composed: {nd}-d adaptive average: per dim the window taps (strided `slice`s when m "
        "divides n, else `index_select` of each window's j-th position masked past its end) "
        "summed, `div` by each dim's window length in turn as torch (f16/bf16 3-d: refused, "
        "torch sums those in f16/bf16).")
    return handler


for _nd in (2, 3):
    _handles(f"aten.avg_pool{_nd}d.default")(_avg_pool(_nd))
    _handles(f"aten._adaptive_avg_pool{_nd}d.default")(_adaptive_avg_pool(_nd))


# -- max pools --------------------------------------------------------------------------------


def _lowest(dtype: str) -> float | int:
    return {"i32": -(2**31), "i64": -(2**63)}.get(dtype, -math.inf)


def _index_dtype(axes: list) -> str:
    """The type of a max pool's index chain: f32 when every flat position of the input
    plane is exact in it (below 2^24), else i64. The CPU loop nests compile f32 selects but
    no integer values: an i64 chain ran op by op, about 10% of ResNet-18's training step."""
    return "f32" if math.prod(ax.n for ax in axes) < 2**24 else "i64"


def _tap_terms(b: _Builder, axes: list) -> list:
    """Per dim k and tap j: (the flat-position term pos·stride_k in the index chain's type,
    the validity mask or None), each shaped to broadcast along the k-th pooled dim."""
    nd, terms, dtype = len(axes), [], _index_dtype(axes)
    for k, ax in enumerate(axes):
        stride = math.prod(a.n for a in axes[k + 1 :])
        row = []
        for j in range(ax.taps):
            pos = _const(b, [ax.position(i, j) * stride for i in range(ax.m)], dtype)
            mask = _mask(b, ax, j)
            row.append((_along(b, pos, k, nd), mask if mask is None else _along(b, mask, k, nd)))
        terms.append(row)
    return terms


def _combine(b: _Builder, terms: list, taps: tuple) -> tuple:
    """(flat position, validity mask or None) of one tap of every pooled dim."""
    flat, mask = None, None
    for row, j in zip(terms, taps):
        pos, valid = row[j]
        flat = pos if flat is None else b.add(flat, pos)
        if valid is not None:
            mask = valid if mask is None else b.binary("logical_and", mask, valid)
    return flat, mask


def _taps_of(b: _Builder, xp: Value, axes: list, prefix: tuple, cache: dict) -> Value:
    """xp's values at taps `prefix` of the leading len(prefix) pooled dims (memoized)."""
    if not prefix:
        return xp
    if prefix not in cache:
        k = len(prefix) - 1
        dim = xp.rank - len(axes) + k
        inner = _taps_of(b, xp, axes, prefix[:-1], cache)
        cache[prefix] = _take(b, inner, dim, axes[k], prefix[-1])
    return cache[prefix]


def _max_scan(b: _Builder, x: Value, axes: list, out: Out, op: str) -> tuple:
    """(max, flat index) over each window, scanning its taps in row-major order with the
    CPU kernels' rule: take the tap if it is valid and (`v > max`, NaN, or the first).

    The maximum is its own chain, which does not read the index chain, so a graph that
    drops the indices (every inference graph) drops their chain with it. Over regular
    windows it is `maximum(tap, max)` tap after tap: padding holds the lowest value, which
    never wins; ties keep the earlier tap (`maximum`'s ties give its second operand) and a
    NaN propagates, so it is the scan's value (a NaN comes out as kiln's NaN, not the
    input's payload). Adaptive windows mask the taps past a window's end with the scan's
    rule instead."""
    if x.dtype not in _FLOATS and x.dtype not in ("i32", "i64"):
        raise Unsupported(f"{op}: {x.dtype} input")
    if all(_blocked(ax) for ax in axes) and all(ax.m > 0 for ax in axes):
        return _blocked_max(b, x, axes)
    scan = math.prod(ax.taps for ax in axes)
    if scan > _MAX_SCAN:
        raise Unsupported(f"{op}: windows of {scan} positions (over {_MAX_SCAN})")
    if any(ax.m == 0 for ax in axes) or any(ax.n == 0 for ax in axes):
        return b.full(out[0].shape, 0, out[0].dtype), b.full(out[1].shape, 0, "i64")
    xp = x
    for k, ax in enumerate(axes):
        xp = _padded(b, xp, x.rank - len(axes) + k, ax, _lowest(x.dtype))
    regular = all(ax.ends is None for ax in axes)
    best = None
    index = b.full(out[1].shape, -1, _index_dtype(axes))
    cache: dict = {}
    terms = _tap_terms(b, axes)
    for taps in itertools.product(*(range(ax.taps) for ax in axes)):
        flat, mask = _combine(b, terms, taps)
        v = _taps_of(b, xp, axes, taps, cache)
        prev = best if best is not None else b.full(out[0].shape, _lowest(x.dtype), x.dtype)
        greater = b.binary("gt", v, prev)
        if x.dtype in _FLOATS:
            greater = b.binary("logical_or", greater, b.unary("isnan", v))
        take = b.binary("logical_or", greater, b.binary("lt", index, 0))
        if mask is not None:
            greater = b.binary("logical_and", greater, mask)
            take = b.binary("logical_and", take, mask)
        index = b.where(take, flat, index)
        if regular:
            best = v if best is None else b.binary("maximum", v, best)
        else:
            best = b.where(greater, v, prev)
    return best, b.cast(index, "i64")


def _max_pool(nd: int):
    def handler(b: _Builder, a: dict, out: Out) -> tuple:
        op = f"aten.max_pool{nd}d_with_indices"
        x = _tensor(a, "self", op)
        axes = _regular_axes(a, x, out[0].shape, nd, op, dilation=True)
        return _max_scan(b, x, axes, out, op)

    handler.__doc__ = (
        f"composed: {nd}-d max pool with indices: every window tap (a strided `slice` of the "
        "padded input) scanned in row-major order; `where` takes it when valid and greater, "
        "NaN or first (first maximum, last NaN), with its flat position in the input plane.")
    return handler


def _adaptive_max_pool(nd: int):
    def handler(b: _Builder, a: dict, out: Out) -> tuple:
        op = f"aten.adaptive_max_pool{nd}d"
        x = _tensor(a, "self", op)
        return _max_scan(b, x, _adaptive_axes(x, out[0].shape, nd), out, op)

    handler.__doc__ = (
        f"composed: {nd}-d adaptive max pool with indices: the max pool scan over adaptive "
        "windows (taps by strided `slice` when m divides n, else `index_select`, masked).")
    return handler


for _nd in (2, 3):
    _handles(f"aten.max_pool{_nd}d_with_indices.default")(_max_pool(_nd))
    _handles(f"aten.adaptive_max_pool{_nd}d.default")(_adaptive_max_pool(_nd))


# -- backwards --------------------------------------------------------------------------------


def _scatter_to_indices(b: _Builder, g: Value, x: Value, indices: Value, nd: int) -> Value:
    """Σ of `g` at its flat plane positions `indices`: one `index_add` on the flattened
    input, each plane's positions offset by its plane number."""
    plane = math.prod(_static_size(x, d) for d in range(x.rank - nd, x.rank))
    planes = math.prod(_static_size(x, d) for d in range(x.rank - nd))
    count = math.prod(indices.shape[x.rank - nd :])
    base = b.mul(b.reshape(b.arange(0, planes, 1, "i64"), (planes, 1)), plane)
    flat = b.add(b.reshape(indices, (planes, count)), base)
    zeros = b.full((planes * plane,), 0, g.dtype)
    total = b.index_add(zeros, 0, b.reshape(flat, (planes * count,)),
                        b.reshape(g, (planes * count,)))
    return b.reshape(total, x.shape)


def _max_pool_backward(nd: int, adaptive: bool):
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        g, x, idx = _tensor(a, "grad_output"), _tensor(a, "self"), _tensor(a, "indices")
        op = (f"aten.adaptive_max_pool{nd}d_backward" if adaptive
              else f"aten.max_pool{nd}d_with_indices_backward")
        acc = _acc_dtype(g, op)
        if adaptive:
            _exact_half_gradient(g, _adaptive_axes(x, g.shape, nd), op)
        else:
            _exact_half_gradient(g, _regular_axes(a, x, g.shape, nd, op, dilation=True), op)
        return b.cast(_scatter_to_indices(b, b.cast(g, acc), x, idx, nd), out.dtype)

    handler.__doc__ = (
        "composed: the gradient `index_add`ed at the saved flat indices of the flattened "
        "input (plane number · plane size added); f16/bf16 with overlapping windows refused "
        "(torch adds those in f16/bf16).")
    return handler


for _nd in (2, 3):
    _handles(f"aten.max_pool{_nd}d_with_indices_backward.default")(
        _max_pool_backward(_nd, False))
    _handles(f"aten.adaptive_max_pool{_nd}d_backward.default")(_max_pool_backward(_nd, True))


def _spread(b: _Builder, g: Value, dim: int, ax: _Axis, k: int, nd: int) -> Value:
    """The transpose of summing taps along `dim`: each window's value added to every input
    position it reads (`index_add` into the padded length, padding sliced off)."""
    length = ax.n + (ax.pad + ax.right_pad() if ax.ends is None else 0)
    offset = ax.pad if ax.ends is None else 0
    shape = list(g.shape)
    shape[dim] = length
    total = b.full(shape, 0, g.dtype)
    for j in range(ax.taps):
        src = g
        mask = _mask(b, ax, j) if ax.ends is not None else None  # padding is sliced off
        if mask is not None:
            src = b.where(_along(b, mask, k, nd), g, 0.0)
        pos = [ax.position(i, j) + offset if ax.ends is None
               else min(ax.position(i, j), ax.n - 1) for i in range(ax.m)]
        total = b.index_add(total, dim, _const(b, pos), src)
    return b.slice(total, dim, offset, offset + ax.n)


def _average_backward(b: _Builder, g: Value, axes: list, out: Out, op: str, **how) -> Value:
    """The average pool's input gradient; `how`: `_divide`'s options."""
    acc = _acc_dtype(g, op)
    _exact_half_gradient(g, axes, op)
    if any(ax.m == 0 for ax in axes):
        return b.full(out.shape, 0, out.dtype)
    g = b.cast(_divide(b, g, axes, **how), acc)  # torch divides in the gradient's dtype
    nd = len(axes)
    for k, ax in enumerate(axes):
        g = _spread(b, g, g.rank - nd + k, ax, k, nd)
    return b.cast(g, out.dtype)


def _avg_pool_backward(nd: int):
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        op = f"aten.avg_pool{nd}d_backward"
        g, x = _tensor(a, "grad_output", op), _tensor(a, "self", op)
        axes = _regular_axes(a, x, g.shape, nd, op)
        return _average_backward(b, g, axes, out, op, include_pad=a["count_include_pad"],
                                 override=a["divisor_override"])

    handler.__doc__ = (
        "composed: the gradient divided as the forward divides, then per dim spread to the "
        "positions each window read (`index_add` per tap into the padded dim, sliced).")
    return handler


def _adaptive_avg_pool_backward(nd: int):
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        g, x = _tensor(a, "grad_output"), _tensor(a, "self")
        op = f"aten._adaptive_avg_pool{nd}d_backward"
        return _average_backward(b, g, _adaptive_axes(x, g.shape, nd), out, op, adaptive=True)

    handler.__doc__ = (
        "composed: the gradient divided by the window counts, then per dim spread to each "
        "window's positions (`index_add` per tap, taps past a window's end masked).")
    return handler


for _nd in (2, 3):
    _handles(f"aten.avg_pool{_nd}d_backward.default")(_avg_pool_backward(_nd))
    _handles(f"aten._adaptive_avg_pool{_nd}d_backward.default")(
        _adaptive_avg_pool_backward(_nd))
