"""Convolutions (``aten.convolution``, ``aten.convolution_backward``; any spatial rank) as
kiln's native ``convolution`` op (``Op::Convolution``: im2col and GEMM, or direct loops for
depthwise kernels, in the runtime; its geometry is ``kiln_ir::conv``'s).

* Forward and transposed convolutions map to one ``convolution`` each; a bias is added
  after it (broadcast over the spatial dims).
* Backward: grad_input of a convolution is the transposed convolution of grad_output with
  the same weight (its output_padding chosen to give back the input's size), and grad_input
  of a transposed convolution is the forward convolution of grad_output; grad_weight
  correlates the "input" operand (the input, or grad_output of a transposed convolution)
  with the other one over batch and positions: a forward convolution with batch and
  channels swapped and stride and dilation exchanged (the same construction as the op's
  derivative rule, ``ir/src/ops/derivative/conv.rs``), cut to the kernel's size;
  grad_bias sums grad_output. Each only where ``output_mask`` asks.

f16 and bf16 are computed in f32 and rounded once at the end (torch's CPU kernels also
accumulate in f32); f32 and f64 in their own dtype, so results differ from torch's only in
the order of the sums.
"""

from __future__ import annotations

from typing import Sequence

from ..fx_to_kir import (
    _FLOATS, Out, TType, Unsupported, Value, _Builder, _handles, _ints, _static_size, _tensor,
)


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


def _conv_op(b: _Builder, x: Value, w: Value, stride: Sequence[int], padding: Sequence[int],
             dilation: Sequence[int], groups: int, transposed: bool,
             output_padding: Sequence[int]) -> Value:
    """kiln's `convolution` of `x` [N, C, *S] with `w`; the result's type follows
    `kiln_ir::conv` (checked again by kiln's type inference)."""
    sizes, ksize = _sizes(x)[1:], _sizes(w)
    channels, space = sizes[0], sizes[1:]
    out = []
    for n, k, s, p, d, op in zip(space, ksize[2:], stride, padding, dilation, output_padding):
        span = d * (k - 1) + 1
        size = ((n - 1) * s + span + op - 2 * p) if transposed else (n + 2 * p - span) // s + 1
        if size < 1 or k < 1:
            raise Unsupported(f"convolution: kernel {ksize[2:]} does not fit input {space} "
                              f"(stride {list(stride)}, padding {list(padding)}, dilation "
                              f"{list(dilation)})")
        out.append(size)
    o = ksize[1] * groups if transposed else ksize[0]
    if channels % groups or o % groups:
        raise Unsupported(f"convolution: {channels} channels, weight {ksize}, groups {groups}")
    attrs = {"stride": list(stride), "padding": list(padding), "dilation": list(dilation),
             "transposed": transposed, "output_padding": list(output_padding),
             "groups": groups}
    return b.emit("convolution", [x, w], attrs, TType(x.dtype, (x.shape[0], o, *out)))


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
    for v in (x, w):
        _sizes(v)  # symbolic sizes are refused here, naming the dim
    return x.rank - 2


# -- forward ---------------------------------------------------------------------------------


@_handles("aten.convolution.default")
def _convolution(b: _Builder, a: dict, out: Out) -> Value:
    """native: one `convolution` (forward or transposed), then `add` of the bias."""
    op = "aten.convolution"
    x, w = _tensor(a, "input", op), _tensor(a, "weight", op)
    rank = _check_ranks(x, w, op)
    stride, padding, dilation, output_padding = _geometry(a, rank)
    xw, ww = _work(b, x, op), _work(b, w, op)
    transposed = bool(a["transposed"])
    y = _conv_op(b, xw, ww, stride, padding, dilation, a["groups"], transposed,
                 output_padding if transposed else [0] * rank)
    if a["bias"] is not None:
        bias = _work(b, _tensor(a, "bias", op), op)
        y = b.add(y, b.reshape(bias, [bias.shape[0]] + [1] * rank))
    return b.cast(y, out.dtype)


# -- backward --------------------------------------------------------------------------------


def _weight_grad(b: _Builder, src: Value, rows: Value, ksize: Sequence[int],
                 stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                 groups: int) -> Value:
    """The weight gradient [R, C/G, *K] of a forward convolution of `src` [N, C, *S] whose
    result's gradient is `rows` [N, R, *L]: the forward convolution of `src` seen as
    [C/G, G·N, *S] with `rows` seen as the weight [R, N, *L] (stride and dilation
    exchanged), cut to the kernel and permuted."""
    n, c, *space = _sizes(src)
    r, *out = _sizes(rows)[1:]
    cg, rg, rank = c // groups, r // groups, len(space)
    tail = list(range(3, 3 + rank))
    xs = b.reshape(b.permute(b.reshape(src, [n, groups, cg, *space]), [2, 1, 0, *tail]),
                   [cg, groups * n, *space])
    gs = b.reshape(b.permute(b.reshape(rows, [n, groups, rg, *out]), [1, 2, 0, *tail]),
                   [r, n, *out])
    g = _conv_op(b, xs, gs, dilation, padding, stride, groups, False, [0] * rank)
    for i, k in enumerate(ksize):
        if _static_size(g, 2 + i) != k:
            g = b.slice(g, 2 + i, 0, k)
    return b.permute(g, [1, 0, *range(2, 2 + rank)])


def _input_grad(b: _Builder, go: Value, w: Value, size: Sequence[int], a: dict,
                geometry: tuple) -> Value:
    """The gradient of the convolution's input, of spatial sizes `size`."""
    stride, padding, dilation, _ = geometry
    ksize, groups, rank = _sizes(w)[2:], a["groups"], len(size)
    if a["transposed"]:
        return _conv_op(b, go, w, stride, padding, dilation, groups, False, [0] * rank)
    made = [(n - 1) * s + d * (k - 1) + 1
            for n, s, d, k in zip(_sizes(go)[2:], stride, dilation, ksize)]
    extra = [max(n + 2 * p - m, 0) for n, p, m in zip(size, padding, made)]
    return _conv_op(b, go, w, stride, padding, dilation, groups, True, extra)


@_handles("aten.convolution_backward.default")
def _convolution_backward(b: _Builder, a: dict, out: Out) -> list:
    """native: grad_input one `convolution` of grad_output (transposed for a forward
    convolution, forward for a transposed one), grad_weight one `convolution` correlating
    the input with grad_output (see `_weight_grad`), grad_bias a `sum`; each only where
    `output_mask` asks."""
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
        src, rows = (gow, xw) if a["transposed"] else (xw, gow)
        grads[1] = _weight_grad(b, src, rows, _sizes(w)[2:], stride, padding, dilation, groups)
    if mask[2]:
        grads[2] = b.reduce("sum", gow, [0] + list(range(2, go.rank)), False)
    return [None if g is None or t is None else b.cast(g, t.dtype) for g, t in zip(grads, out)]
