"""Convolutions (``aten.convolution``, ``aten.convolution_backward``; any spatial rank),
composed from kiln's slices, pads, cats and matmuls.

* Forward convolution: the input is zero-padded; for each kernel offset ``k`` (a tuple over
  the spatial dims) the *window* it multiplies is the strided slice
  ``xp[..., k·d : k·d + (L_out-1)·s + 1 : s]`` ([N, C, L] once the output dims are
  flattened). With groups the channels split as [G, C/G]. The windows are gathered into one
  im2col tensor ([N, G, C/G·K, L], a `cat`) and multiplied by the weight seen as
  [G, O/G, C/G·K]: one batched GEMM, the fastest form in kiln (one large matmul instead of K
  small ones, and no chain of K adds). When that tensor would exceed `_IM2COL_LIMIT`
  elements (K times the input), each window is multiplied by its weight slice instead and
  the K products summed, which needs no more memory than the output.
* Transposed convolution: the forward convolution (stride 1) of the input dilated by the
  stride (s-1 zeros between elements), padded by ``d·(k-1) - p`` before and
  ``d·(k-1) - p + output_padding`` after (a negative pad crops), with the kernel flipped and
  its in/out channel dims swapped within each group.
* Backward: grad_input of a convolution is the transposed convolution of grad_output (its
  output_padding chosen to give back the input's size), and grad_input of a transposed
  convolution is the convolution of grad_output; grad_weight is the product of the
  "rows" operand (grad_output, or the input of a transposed convolution) with the windows of
  the other one, contracted over batch and positions; grad_bias sums grad_output.

f16 and bf16 are computed in f32 and rounded once at the end (torch's CPU kernels also
accumulate in f32); f32 and f64 in their own dtype, so results differ from torch's only in
the order of the sums.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterator, Sequence

from ..fx_to_kir import (
    _FLOATS, Out, Unsupported, Value, _Builder, _constant_pad, _flip, _handles, _ints,
    _static_size, _tensor,
)

_IM2COL_LIMIT = 1 << 24
"""The most elements (64 MiB of f32) an im2col tensor may have; above it each kernel
offset is multiplied separately and the products summed."""


# -- helpers -----------------------------------------------------------------------------


def _sizes(x: Value) -> list[int]:
    return [_static_size(x, d) for d in range(x.rank)]


def _per_dim(v: object, n: int, what: str) -> list[int]:
    """An int list of the spatial rank `n` (a single value repeated, as aten does)."""
    vals = _ints(v, what)
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n:
        raise Unsupported(f"{what}: {vals} for {n} spatial dims")
    return vals


def _work(b: _Builder, x: Value, op: str) -> Value:
    """`x` in the dtype sums are computed in (f32 for f16/bf16)."""
    if x.dtype not in _FLOATS:
        raise Unsupported(f"{op}: {x.dtype} tensors (torch convolves floating types only)")
    return b.cast(x, "f32") if x.dtype in ("f16", "bf16") else x


def _pad(b: _Builder, x: Value, lo: Sequence[int], hi: Sequence[int]) -> Value:
    """Zero-pads (negative: crops) the spatial dims 2.. of `x` by `lo` before, `hi` after."""
    pad = [p for pair in reversed(list(zip(lo, hi))) for p in pair]
    return _constant_pad(b, {"self": x, "pad": pad, "value": 0}, None)


def _offsets(ksize: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Kernel offsets in row-major order (the order of the weight's flattened dims)."""
    return itertools.product(*(range(k) for k in ksize))


def _out_sizes(sizes: Sequence[int], ksize: Sequence[int], stride: Sequence[int],
               dilation: Sequence[int]) -> list[int]:
    """Output sizes of a convolution of input sizes that already include the padding."""
    return [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(sizes, ksize, stride, dilation)]


def _window(b: _Builder, xp: Value, offset: Sequence[int], stride: Sequence[int],
            dilation: Sequence[int], out: Sequence[int]) -> Value:
    """The [N, C, L] positions of padded `xp` that kernel `offset` multiplies."""
    for i, (k, s, d, n) in enumerate(zip(offset, stride, dilation, out)):
        start = k * d
        xp = b.slice(xp, 2 + i, start, start + (n - 1) * s + 1, s)
    return b.reshape(xp, [xp.shape[0], xp.shape[1], math.prod(out)])


def _dilate(b: _Builder, x: Value, stride: Sequence[int]) -> Value:
    """`x` with s-1 zeros between neighbouring elements along each spatial dim."""
    for i, s in enumerate(stride):
        d, n = 2 + i, _static_size(x, 2 + i)
        if s == 1 or n <= 1:
            continue
        shape = list(x.shape)
        column = b.reshape(x, shape[: d + 1] + [1] + shape[d + 1:])
        zeros = b.full(shape[: d + 1] + [s - 1] + shape[d + 1:], 0, x.dtype)
        spread = b.reshape(b.cat([column, zeros], d + 1), shape[:d] + [n * s] + shape[d + 1:])
        x = b.slice(spread, d, 0, (n - 1) * s + 1)
    return x


def _transposed_weight(b: _Builder, w: Value, groups: int) -> Value:
    """A transposed convolution's weight [Cin, Cout/G, *K] as the equivalent forward
    convolution's [Cout, Cin/G, *K]: in/out swapped within each group, kernel flipped."""
    cin, cog, *ksize = _sizes(w)
    g = b.reshape(w, [groups, cin // groups, cog, *ksize])
    g = b.reshape(b.transpose(g, 1, 2), [groups * cog, cin // groups, *ksize])
    return _flip(b, {"self": g, "dims": list(range(2, w.rank))}, None)


# -- forward ---------------------------------------------------------------------------------


def _conv(b: _Builder, x: Value, w: Value, stride: Sequence[int], lo: Sequence[int],
          hi: Sequence[int], dilation: Sequence[int], groups: int) -> Value:
    """The convolution (no bias) of `x` [N, C, *S] padded by `lo`/`hi` with `w`
    [O, C/G, *K]: [N, O, *S_out]."""
    xp = _pad(b, x, lo, hi)
    n, c, *sizes = _sizes(xp)
    o, cg, *ksize = _sizes(w)
    out = _out_sizes(sizes, ksize, stride, dilation)
    if c != cg * groups or o % groups or min(out) < 1:
        raise Unsupported(f"convolution: input {[n, c, *sizes]} (padded), weight "
                          f"{[o, cg, *ksize]}, groups {groups}")
    length, kk = math.prod(out), math.prod(ksize)
    windows = (_window(b, xp, k, stride, dilation, out) for k in _offsets(ksize))
    if n * c * kk * length <= _IM2COL_LIMIT:
        cols = b.cat([b.reshape(v, [n, c, 1, length]) for v in windows], 2)
        cols = b.reshape(cols, [n, groups, cg * kk, length])
        y = b.matmul(b.reshape(w, [groups, o // groups, cg * kk]), cols)
    else:
        y = None
        for k, v in zip(_offsets(ksize), windows):
            wk = w
            for i, j in enumerate(k):
                wk = b.slice(wk, 2 + i, j, j + 1)
            part = b.matmul(b.reshape(wk, [groups, o // groups, cg]),
                            b.reshape(v, [n, groups, cg, length]))
            y = part if y is None else b.add(y, part)
    return b.reshape(y, [n, o, *out])


def _conv_transpose(b: _Builder, x: Value, w: Value, stride: Sequence[int],
                    padding: Sequence[int], dilation: Sequence[int],
                    output_padding: Sequence[int], groups: int) -> Value:
    """The transposed convolution (no bias) of `x` [N, Cin, *S] with `w` [Cin, Cout/G, *K]."""
    ksize = _sizes(w)[2:]
    edge = [d * (k - 1) - p for k, p, d in zip(ksize, padding, dilation)]
    hi = [e + op for e, op in zip(edge, output_padding)]
    wf = _transposed_weight(b, w, groups)
    return _conv(b, _dilate(b, x, stride), wf, [1] * len(ksize), edge, hi, dilation, groups)


def _geometry(a: dict, n: int) -> tuple[list[int], list[int], list[int], list[int]]:
    return (_per_dim(a["stride"], n, "convolution stride"),
            _per_dim(a["padding"], n, "convolution padding"),
            _per_dim(a["dilation"], n, "convolution dilation"),
            _per_dim(a["output_padding"], n, "convolution output_padding"))


def _check_ranks(x: Value, w: Value, op: str) -> int:
    """The spatial rank, after checking `x` and `w` agree on it."""
    if x.rank != w.rank or x.rank < 3:
        raise Unsupported(f"{op}: input of rank {x.rank} with weight of rank {w.rank} "
                          "(batched inputs only: aten adds the batch dim before)")
    return x.rank - 2


@_handles("aten.convolution.default")
def _convolution(b: _Builder, a: dict, out: Out) -> Value:
    """composed: im2col convolution: pad, one strided `slice` per kernel offset, `cat`, one
    (group-batched) `matmul` with the weight, `add` of the bias (per-offset matmuls summed
    when the im2col tensor would be too large); transposed: the same on the input dilated by
    the stride with the kernel flipped and its channel dims swapped (see module docstring)."""
    op = "aten.convolution"
    x, w = _tensor(a, "input", op), _tensor(a, "weight", op)
    rank = _check_ranks(x, w, op)
    stride, padding, dilation, output_padding = _geometry(a, rank)
    groups = a["groups"]
    xw, ww = _work(b, x, op), _work(b, w, op)
    if a["transposed"]:
        y = _conv_transpose(b, xw, ww, stride, padding, dilation, output_padding, groups)
    else:
        y = _conv(b, xw, ww, stride, padding, padding, dilation, groups)
    if a["bias"] is not None:
        bias = _work(b, _tensor(a, "bias", op), op)
        y = b.add(y, b.reshape(bias, [bias.shape[0]] + [1] * rank))
    return b.cast(y, out.dtype)


# -- backward --------------------------------------------------------------------------------


def _weight_grad(b: _Builder, rows: Value, src: Value, ksize: Sequence[int],
                 stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                 groups: int) -> Value:
    """Σ over batch and positions of `rows` [N, R, *S_out] times the windows of `src`
    [N, C, *S] padded by `padding`: the weight gradient [R, C/G, *K]."""
    xp = _pad(b, src, padding, padding)
    n, c, *_ = _sizes(xp)
    r, out = _static_size(rows, 1), _sizes(rows)[2:]
    rg, cg, length, kk = r // groups, c // groups, math.prod(out), math.prod(ksize)
    lhs = b.reshape(b.permute(b.reshape(rows, [n, groups, rg, length]), [1, 2, 0, 3]),
                    [groups, rg, n * length])
    windows = (_window(b, xp, k, stride, dilation, out) for k in _offsets(ksize))

    def by_rows(cols: Value, width: int) -> Value:
        """lhs times `cols` [N, G·width, L] contracted over (N, L): [G, Rg, width]."""
        cols = b.permute(b.reshape(cols, [n, groups, width, length]), [1, 0, 3, 2])
        return b.matmul(lhs, b.reshape(cols, [groups, n * length, width]))

    if n * c * kk * length <= _IM2COL_LIMIT:
        cols = b.cat([b.reshape(v, [n, c, 1, length]) for v in windows], 2)
        g = by_rows(b.reshape(cols, [n, c * kk, length]), cg * kk)
    else:
        parts = [b.reshape(by_rows(v, cg), [groups, rg, cg, 1]) for v in windows]
        g = b.cat(parts, 3)
    return b.reshape(g, [r, cg, *ksize])


def _input_grad(b: _Builder, go: Value, w: Value, size: Sequence[int], a: dict,
                geometry: tuple) -> Value:
    """The gradient of the convolution's input, of spatial sizes `size`."""
    stride, padding, dilation, output_padding = geometry
    ksize, groups = _sizes(w)[2:], a["groups"]
    if a["transposed"]:
        g = _conv(b, go, w, stride, padding, padding, dilation, groups)
        for i, n in enumerate(size):
            g = b.slice(g, 2 + i, 0, n)
        return g
    made = [(n - 1) * s - 2 * p + d * (k - 1) + 1
            for n, s, p, d, k in zip(_sizes(go)[2:], stride, padding, dilation, ksize)]
    extra = [n - m for n, m in zip(size, made)]
    return _conv_transpose(b, go, w, stride, padding, dilation, extra, groups)


@_handles("aten.convolution_backward.default")
def _convolution_backward(b: _Builder, a: dict, out: Out) -> list:
    """composed: grad_input a transposed convolution of grad_output (of a transposed one: a
    convolution), grad_weight one `matmul` of grad_output with the input's im2col windows
    contracted over batch and positions (transposed: input with grad_output's windows),
    grad_bias a `sum`; each only where `output_mask` asks."""
    op = "aten.convolution_backward"
    go, x, w = (_tensor(a, k, op) for k in ("grad_output", "input", "weight"))
    rank = _check_ranks(x, w, op)
    geometry = _geometry(a, rank)
    stride, padding, dilation, _ = geometry
    mask, groups = list(a["output_mask"]), a["groups"]
    gow, xw, ww = _work(b, go, op), _work(b, x, op), _work(b, w, op)
    grads: list = [None, None, None]
    if mask[0]:
        grads[0] = _input_grad(b, gow, ww, _sizes(x)[2:], a, geometry)
    if mask[1]:
        rows, src = (xw, gow) if a["transposed"] else (gow, xw)
        grads[1] = _weight_grad(b, rows, src, _sizes(w)[2:], stride, padding, dilation, groups)
    if mask[2]:
        grads[2] = b.reduce("sum", gow, [0] + list(range(2, go.rank)), False)
    return [None if g is None or t is None else b.cast(g, t.dtype) for g, t in zip(grads, out)]
