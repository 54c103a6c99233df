"""Attention: `_scaled_dot_product_flash_attention_for_cpu` and its backward, composed from
`matmul`, `amax`, `exp`, `sum` and `where`.

This is the op `F.scaled_dot_product_attention` (the default attention of every Hugging Face
transformer) dispatches to on the CPU, forward and backward. Its second output is the
logsumexp of each query row's scaled scores, `[N, H, L]` in float32, which the backward
consumes to rebuild the softmax without storing it. ``kiln.backend.decompositions`` leaves
these two ops whole: torch's own decomposition of the forward returns the attention
weights `[N, H, L, S]` in the logsumexp's place, and the backward (which no decomposition
replaces) read them as a logsumexp, so every gradient through attention was wrong.

Semantics, as torch's CPU kernels (checked against them in ``test_fx_ops_attention.py``):

* scores ``s = (q @ kᵀ)·scale`` (``scale`` default ``1/√E``), plus a float ``attn_mask``
  (broadcast to ``[N, H, L, S]``; a bool mask keeps where true), with ``is_causal`` keeping
  key ``j ≤ i`` for query ``i`` (the top-left triangle, as ``torch.tril(ones(L, S))``);
* grouped-query attention: key/value heads ``Hk`` dividing the query heads ``H``, query
  head ``h`` reads key/value head ``h // (H / Hk)``; their gradients sum over each group;
* a query row whose every key is masked gives output 0 and logsumexp 0 (and no gradient);
* float16/bfloat16 are computed in float32 and rounded once at the end, the logsumexp
  stays float32.

Dropout (``dropout_p > 0``) is not expressed: torch never sends it to this op on the CPU
(it takes the math path, whose ops kiln translates one by one); were it sent, the node
falls back to eager PyTorch with that reason."""

from __future__ import annotations

import math

from ..fx_to_kir import (
    Out, Unsupported, Value, _Builder, _handles, _stats_dtype, _tensor,
)


def _check(a: dict, op: str) -> tuple[Value, Value, Value]:
    q, k, v = (_tensor(a, n, op) for n in ("query", "key", "value"))
    if q.rank != 4 or k.rank != 4 or v.rank != 4:
        raise Unsupported(f"{op}: q, k, v of ranks {q.rank}, {k.rank}, {v.rank} (needs 4)")
    if a["dropout_p"] != 0:
        raise Unsupported(f"{op}: dropout_p = {a['dropout_p']} (kiln draws no dropout here)")
    heads, kv_heads = q.shape[1], k.shape[1]
    if not isinstance(heads, int) or not isinstance(kv_heads, int) or heads % kv_heads:
        raise Unsupported(f"{op}: {heads} query heads over {kv_heads} key/value heads")
    return q, k, v


def _scale(a: dict, q: Value) -> float:
    scale = a["scale"]
    if scale is None:
        e = q.shape[-1]
        if not isinstance(e, int):
            raise Unsupported("attention: symbolic head size without an explicit scale")
        return 1.0 / math.sqrt(e)
    return float(scale)


def _widen(b: _Builder, x: Value) -> Value:
    """``x`` in the dtype attention computes in (float32 for the half types)."""
    return b.cast(x, _stats_dtype(x))


def _repeat_heads(b: _Builder, x: Value, heads: int) -> Value:
    """Key/value heads ``[N, Hk, S, E]`` repeated to ``[N, heads, S, E]``, each ``heads/Hk``
    times in a row (``repeat_interleave`` on dim 1)."""
    n, kv, s, e = x.shape
    if kv == heads:
        return x
    group = heads // kv
    x = b.expand(b.reshape(x, (n, kv, 1, s, e)), (n, kv, group, s, e))
    return b.reshape(x, (n, heads, s, e))


def _sum_groups(b: _Builder, x: Value, kv_heads: int) -> Value:
    """The gradient of :func:`_repeat_heads`: ``[N, H, S, E]`` summed over each group."""
    n, heads, s, e = x.shape
    if kv_heads == heads:
        return x
    grouped = b.reshape(x, (n, kv_heads, heads // kv_heads, s, e))
    return b.reduce("sum", grouped, [2], False)


def _scores(b: _Builder, a: dict, q: Value, k: Value) -> Value:
    """The scaled, masked scores ``[N, H, L, S]`` (masked entries -inf)."""
    s = b.mul(b.matmul(q, b.transpose(k, -2, -1)), _scale(a, q))
    mask = a["attn_mask"]
    if isinstance(mask, Value):
        if mask.dtype == "bool":
            s = b.where(mask, s, -math.inf)
        else:
            s = b.add(s, b.cast(mask, s.dtype))
    elif mask is not None:
        raise Unsupported(f"attention: attn_mask of type {type(mask).__name__}")
    if a["is_causal"]:
        rows, cols = s.shape[-2], s.shape[-1]
        if not isinstance(rows, int) or not isinstance(cols, int):
            raise Unsupported("attention: is_causal with symbolic sequence lengths")
        keep = b.binary("le", b.arange_along(cols, 1, 2), b.arange_along(rows, 0, 2))
        s = b.where(keep, s, -math.inf)
    return s


@_handles("aten._scaled_dot_product_flash_attention_for_cpu.default")
def _flash_attention(b: _Builder, a: dict, out: Out) -> tuple:
    """composed: ``p = exp(s - m) / z`` over each row's max ``m`` and sum ``z`` (a row with
    every key masked: ``m = 0``, ``z = 1``, so ``p = 0``), ``(p @ v, m + log z)``."""
    q, k, v = _check(a, "_scaled_dot_product_flash_attention_for_cpu")
    dtype = q.dtype
    heads = q.shape[1]
    q, k, v = _widen(b, q), _widen(b, k), _widen(b, v)
    k, v = _repeat_heads(b, k, heads), _repeat_heads(b, v, heads)
    s = _scores(b, a, q, k)
    m = b.reduce("amax", s, [-1], True)
    m = b.where(b.binary("eq", m, -math.inf), 0.0, m)
    e = b.unary("exp", b.sub(s, m))
    z = b.reduce("sum", e, [-1], True)
    z = b.where(b.binary("eq", z, 0.0), 1.0, z)
    o = b.matmul(b.div(e, z), v)
    lse = b.reshape(b.add(m, b.unary("log", z)), m.shape[:-1])
    return b.cast(o, dtype), b.cast(lse, "f32")


@_handles("aten._scaled_dot_product_flash_attention_for_cpu_backward.default")
def _flash_attention_backward(b: _Builder, a: dict, out: Out) -> tuple:
    """composed: ``p = exp(s - lse)``; ``dv = pᵀ·do``, ``ds = p·(do·vᵀ - rowsum(do·o))``,
    ``dq = ds·k·scale``, ``dk = dsᵀ·q·scale`` (key/value gradients summed over each
    query-head group)."""
    op = "_scaled_dot_product_flash_attention_for_cpu_backward"
    q, k, v = _check(a, op)
    dtypes = (q.dtype, k.dtype, v.dtype)
    heads, kv_heads = q.shape[1], k.shape[1]
    go, o, lse = (_widen(b, _tensor(a, n, op)) for n in ("grad_out", "out", "logsumexp"))
    q, k, v = _widen(b, q), _widen(b, k), _widen(b, v)
    kr, vr = _repeat_heads(b, k, heads), _repeat_heads(b, v, heads)
    s = _scores(b, a, q, kr)
    p = b.unary("exp", b.sub(s, b.reshape(b.cast(lse, s.dtype), lse.shape + (1,))))
    dv = b.matmul(b.transpose(p, -2, -1), go)
    dp = b.matmul(go, b.transpose(vr, -2, -1))
    rows = b.reduce("sum", b.mul(go, o), [-1], True)
    ds = b.mul(p, b.sub(dp, rows))
    scale = _scale(a, q)
    dq = b.mul(b.matmul(ds, kr), scale)
    dk = b.mul(b.matmul(b.transpose(ds, -2, -1), q), scale)
    dk, dv = _sum_groups(b, dk, kv_heads), _sum_groups(b, dv, kv_heads)
    return tuple(b.cast(g, t) for g, t in zip((dq, dk, dv), dtypes))

