"""`F.scaled_dot_product_attention` through torch.compile(backend="kiln"), forward and
backward, on the path users get by default (no `attn_implementation="eager"`).

Each case compiles attention, takes the loss `sum(out * w)` with a fixed random `w` (a loss
every output moves), and judges the output and every input's gradient against eager float32
and a float64 run (`kiln.accuracy`). The CPU flash attention op and its backward must run in
kiln (no eager node): the cases exist to test kiln's translation, not torch's kernels.

The fault this guards against: torch's core decomposition of
`_scaled_dot_product_flash_attention_for_cpu` returns the attention weights `[N, H, L, S]`
where the op returns its logsumexp `[N, H, L]`, and the backward read them as one, so every
gradient through attention was wrong (GPT-2's `wte.weight` off by 100× its size)."""

from __future__ import annotations

import dataclasses
from typing import Optional

import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln.accuracy import judge_all, weighted_loss
from kiln.backend import ExplainReport

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@dataclasses.dataclass(frozen=True)
class Case:
    """One attention call: sizes, then SDPA's options and the inputs' layout."""

    id: str
    n: int = 2
    h: int = 4
    l: int = 5
    s: int = 7
    e: int = 8
    hk: Optional[int] = None
    """Key/value heads (grouped-query attention) when not `h`."""
    mask: Optional[str] = None
    """None, `"bool"`, `"additive"`, `"bool_row_masked"` (a query row sees no key) or
    `"additive_broadcast"` (`[N, 1, L, S]`)."""
    causal: bool = False
    scale: Optional[float] = None
    layout: str = "contiguous"
    """`"contiguous"`, `"bhle"` (q/k/v as `[N, L, H, E]` transposed, as transformers make
    them) or `"packed"` (slices of one `[N, L, 3·H·E]` projection)."""
    dtype: torch.dtype = torch.float32


CASES = [
    Case("plain"),
    Case("bool_mask", mask="bool"),
    Case("additive_mask", mask="additive"),
    Case("additive_broadcast_mask", mask="additive_broadcast"),
    Case("row_fully_masked", mask="bool_row_masked"),
    Case("causal", l=7, s=7, causal=True),
    Case("causal_rectangular", l=5, s=9, causal=True),
    Case("causal_odd", n=3, h=1, l=11, s=11, e=5, causal=True),
    Case("scale", scale=0.3),
    Case("gqa", h=6, hk=2),
    Case("gqa_causal", h=4, hk=2, l=6, s=6, causal=True),
    Case("mqa", h=4, hk=1, mask="bool"),
    Case("batch_and_head_of_one", n=1, h=1),
    Case("one_query_one_key", n=1, h=2, l=1, s=1),
    Case("odd_sizes", n=3, h=3, l=13, s=11, e=5),
    Case("transposed_bhle", layout="bhle", mask="additive_broadcast"),
    Case("packed_qkv", layout="packed", l=9, s=9, causal=True),
]


def _make(case: Case, seed: int) -> tuple[list[torch.Tensor], dict, torch.Tensor]:
    """(q, k, v) leaves in float64 with the case's layout, the SDPA keyword arguments
    (masks in float64 or bool), and the loss weight."""
    g = torch.Generator().manual_seed(seed)
    hk = case.hk or case.h

    def leaf(heads, length):
        if case.layout == "bhle":
            x = torch.randn(case.n, length, heads, case.e, generator=g, dtype=torch.float64)
            return x.transpose(1, 2)
        return torch.randn(case.n, heads, length, case.e, generator=g, dtype=torch.float64)

    if case.layout == "packed":
        assert case.l == case.s and hk == case.h
        proj = torch.randn(case.n, case.l, 3 * case.h * case.e, generator=g,
                           dtype=torch.float64)
        q, k, v = (p.view(case.n, case.l, case.h, case.e).transpose(1, 2)
                   for p in proj.split(case.h * case.e, dim=-1))
        leaves = [proj]
    else:
        q, k, v = leaf(case.h, case.l), leaf(hk, case.s), leaf(hk, case.s)
        leaves = [q, k, v]
    kw: dict = {"is_causal": case.causal}
    if case.scale is not None:
        kw["scale"] = case.scale
    if hk != case.h:
        kw["enable_gqa"] = True
    if case.mask in ("bool", "bool_row_masked"):
        m = torch.rand(case.l, case.s, generator=g) > 0.4
        m[:, 0] = True  # no row left without a key, but for the case that wants one
        if case.mask == "bool_row_masked":
            m[case.l // 2] = False
        kw["attn_mask"] = m
    elif case.mask == "additive":
        kw["attn_mask"] = torch.randn(case.l, case.s, generator=g, dtype=torch.float64)
    elif case.mask == "additive_broadcast":
        kw["attn_mask"] = torch.randn(case.n, 1, case.l, case.s, generator=g,
                                      dtype=torch.float64)
    w = torch.randn(case.n, case.h, case.l, case.e, generator=g, dtype=torch.float64)
    return leaves, kw, w


def _attend(case: Case):
    def f(*xs, **kw):
        if case.layout == "packed":
            (proj,) = xs
            q, k, v = (p.view(case.n, case.l, case.h, case.e).transpose(1, 2)
                       for p in proj.split(case.h * case.e, dim=-1))
        else:
            q, k, v = xs
        return F.scaled_dot_product_attention(q, k, v, **kw)

    return f


def _run(fn, leaves64, kw64, w64, dtype):
    """fn's output and its leaves' gradients of `sum(out * w)`, in `dtype`."""
    leaves = [x.detach().to(dtype).requires_grad_() for x in leaves64]
    kw = {k: (v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
          for k, v in kw64.items()}
    out = fn(*leaves, **kw)
    weighted_loss([out], [w64.to(dtype)]).backward()
    return out.detach(), [x.grad for x in leaves]


def _judged(f, names, leaves, kw, w):
    """`f` compiled with kiln against eager float32 and float64: the output and every leaf's
    gradient judged (`kiln.accuracy`); returns the verdicts, kiln's and eager float32's
    tensors, and kiln's report."""
    report = ExplainReport()
    compiled = torch.compile(f, backend=kiln.backend(_report=report), fullgraph=True)
    got, got_grads = _run(compiled, leaves, kw, w, torch.float32)
    ref, ref_grads = _run(f, leaves, kw, w, torch.float32)
    ref64, ref64_grads = _run(f, leaves, kw, w, torch.float64)
    verdicts = judge_all(zip(names, [got, *got_grads], [ref, *ref_grads],
                             [ref64, *ref64_grads]))
    return verdicts, [got, *got_grads], [ref, *ref_grads], report


def _check(case: Case, seed: int = 0) -> ExplainReport:
    leaves, kw, w = _make(case, seed)
    names = ["out"] + [f"grad {n}" for n in (["proj"] if case.layout == "packed" else "qkv")]
    verdicts, got, ref, report = _judged(_attend(case), names, leaves, kw, w)
    bad = [str(v) for v in verdicts if not v.ok]
    assert not bad, f"{case.id}: " + "; ".join(bad)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    return report


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_attention_forward_and_every_gradient_equal_eager(case):
    report = _check(case)
    assert report.eager_nodes == 0, str(report)
    assert report.graphs == 2, str(report)  # a forward and a backward graph, both in kiln


def test_a_second_seed_agrees_too():
    _check(Case("second_seed", n=2, h=2, l=6, s=6, mask="additive"), seed=7)


def test_the_logsumexp_is_the_ops_own():
    """The forward graph's second output, checked against eager's op directly: `[N, H, L]`
    float32 (the weights `[N, H, L, S]` stood there before), 0 for a row that sees no key."""
    from kiln import _native, fx_to_kir
    from kiln.backend import _describe, decompositions
    from torch._dynamo.backends.common import aot_autograd
    from torch.utils.dlpack import from_dlpack

    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, n, 6, generator=g) for n in (4, 5, 5))
    mask = torch.randn(4, 5, generator=g)
    mask[2] = float("-inf")
    graphs = []

    def grab(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch.compile(lambda q, k, v, m: op(q, k, v, attn_mask=m, scale=0.4), fullgraph=True,
                  backend=aot_autograd(fw_compiler=grab, decompositions=decompositions())
                  )(q, k, v, mask)
    (gm,) = graphs
    assert any(n.target is op for n in gm.graph.nodes), "the op was decomposed"
    tr = fx_to_kir.translate(gm)
    compiled = _native.compile(tr.kir, "cpu", "cranelift")
    out, lse = (from_dlpack(c) for c in compiled([_describe(t) for t in (q, k, v, mask)]))
    want_out, want_lse = op(q, k, v, attn_mask=mask, scale=0.4)
    assert lse.shape == (2, 3, 4) and lse.dtype == torch.float32
    torch.testing.assert_close(lse, want_lse, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-6)
    assert torch.all(lse[:, :, 2] == 0) and torch.all(out[:, :, 2] == 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_attention_computes_in_float32(dtype):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, 6, 8, generator=g).to(dtype).requires_grad_() for _ in range(3))
    w = torch.randn(2, 2, 6, 8, generator=g).to(dtype)
    report = ExplainReport()
    f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    compiled = torch.compile(f, backend=kiln.backend(_report=report), fullgraph=True)
    out = compiled(q, k, v)
    (out * w).sum().backward()
    got = [out.detach(), *(x.grad for x in (q, k, v))]
    qr, kr, vr = (x.detach().float().requires_grad_() for x in (q, k, v))
    ref = f(qr, kr, vr)
    (ref * w.float()).sum().backward()
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=2e-3, atol=2e-3)
    for a, b in zip(got, [ref.detach(), qr.grad, kr.grad, vr.grad]):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b, **tol)
    assert report.eager_nodes == 0, str(report)


def test_dropout_trains_with_eagers_masks():
    """dropout_p > 0 takes torch's math path (the flash op takes no dropout on the CPU):
    under one seed the compiled call draws the same masks as eager (torch's generator), so
    the output and every gradient equal eager's."""
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 3, 7, 8, generator=g) for _ in range(3))
    w = torch.randn(2, 3, 7, 8, generator=g)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True)

    compiled = torch.compile(f, backend="kiln", fullgraph=True)
    runs = []
    for fn in (compiled, f):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        torch.manual_seed(1234)
        out = fn(*leaves)
        (out * w).sum().backward()
        runs.append([out.detach(), *(x.grad for x in leaves)])
    zeros = (runs[1][0] == 0).float().mean().item()
    assert 0.05 < zeros < 0.6, "dropout dropped nothing: the test would prove nothing"
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_an_additive_mask_that_requires_grad_gets_its_gradient():
    """A learned additive bias (relative positions, ALiBi-like) needs its own gradient: torch
    takes the math path there, whose ops kiln translates; judged against float64 too."""
    g = torch.Generator().manual_seed(13)
    leaves64 = [torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64) for _ in range(3)]
    leaves64.append(torch.randn(3, 5, 5, generator=g, dtype=torch.float64))  # per head
    w = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64)

    def f(q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    names = ["out", "grad q", "grad k", "grad v", "grad bias"]
    verdicts, got, _, report = _judged(f, names, leaves64, {}, w)
    assert all(v.ok for v in verdicts), "; ".join(map(str, verdicts))
    assert got[4] is not None and report.eager_nodes == 0, str(report)
