"""Tests of kiln.fx_to_kir: FX graphs captured the way the kiln backend gets them
(torch.compile → aot_autograd with the core ATen decompositions), translated to kiln IR, run
by kiln through its native module (``cpu``: compiled, and ``eager``: kiln's eager kernels)
and compared with the FX graph run by torch on the same inputs. The compiled functions return a boxed wrapper that records
the real inputs of each graph (aot_autograd hands the compiler fake example inputs), so each
forward and backward graph is compared on the values it actually ran on.

Tolerances: f32 results are compared at rtol 1e-5 / atol 1e-6 (torch.testing's f32 default
is 1.3e-6 / 1e-5); transcendental functions and graphs with matmuls and reductions get
1e-4 / 1e-5 because kiln's vectorised math and its summation order differ from torch's
kernels by a few ulps.
"""

from __future__ import annotations

import math
import operator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fx_harness import (
    LOOSE, Unsupported, call_nodes, capture, check, check_graphs,
    node_support, run_kiln, translate,
)


# ---------------------------------------------------------------------------------------
# Translation only
# ---------------------------------------------------------------------------------------


def test_translation_fields_and_literals():
    (gm, _), = capture(
        lambda x, i: (x + 1e-5, x * float("inf"), x - float("-inf"), i * 3, x.clamp(min=-0.0)),
        torch.randn(2, 3),
        torch.arange(3),
    )
    tr = translate(gm, "lits")
    assert tr.input_names == [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    assert tr.placeholder_index == [0, 1]
    assert tr.output_count == 5
    assert tr.kir.startswith("graph @lits(")
    for literal in ("1e-05", "inf", "-inf", "-0.0", ", 3 "):
        assert literal in tr.kir, literal


def test_unsupported_ops_have_reasons():
    (gm, _), = capture(
        lambda x: (x.mode(0)[0], torch.histc(x), x + 1), torch.randn(5)
    )
    reasons = {n.name: node_support(n) for n in gm.graph.nodes}
    assert reasons["mode"] == "aten.mode.default: no kiln op"
    assert reasons["histc"] == "aten.histc.default: no kiln op"
    for n in gm.graph.nodes:  # a getitem goes with its source
        if n.target is operator.getitem:
            assert reasons[n.name] == reasons[n.args[0].name] is not None
    assert reasons["add"] is None
    assert all(reasons[n.name] is None for n in gm.graph.nodes if n.op != "call_function")
    with pytest.raises(Unsupported, match="mode"):
        translate(gm)


def test_unsupported_dtype_and_random():
    (gm, _), = capture(lambda x: (x.to(torch.uint8) + 1, torch.rand_like(x)), torch.randn(3))
    reasons = [node_support(n) for n in call_nodes(gm)]
    assert any(r and "dtype uint8" in r for r in reasons), reasons
    assert any(r and "random" in r for r in reasons), reasons


def test_none_output_is_unsupported():
    x, w = torch.randn(3, 4), torch.randn(4, requires_grad=True)
    captured = capture(lambda x, w: (x * w).sum(), x, w, backward=True)
    gm = captured[-1][0]  # the backward graph: None for x's gradient
    assert None in next(n for n in gm.graph.nodes if n.op == "output").args[0]
    with pytest.raises(Unsupported, match="non-tensor output"):
        translate(gm)


def test_symbolic_sizes_become_symbols():
    captured = capture(
        lambda x, y: ((x * 2).sum(0) + y.view(-1)[:4]).softmax(0),
        torch.randn(5, 4), torch.randn(8), dynamic=True,
    )
    tr = translate(captured[0][0])
    assert "f32[S" in tr.kir
    assert len(tr.input_names) == 2  # the SymInt placeholders are not inputs


def test_node_support_matches_translate_on_models():
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.LayerNorm(8), nn.Linear(8, 2))
    for gm, _ in capture(model, torch.randn(3, 6, requires_grad=True), backward=True):
        assert all(node_support(n) is None for n in gm.graph.nodes)


# ---------------------------------------------------------------------------------------
# Translated, run by kiln, compared with torch
# ---------------------------------------------------------------------------------------


def test_pointwise_chain():
    check(lambda x, y: ((x * 2 + y.exp() - 1.5).relu() / (y.abs() + 1)).neg(),
          torch.randn(3, 5), torch.randn(3, 5))


UNARY = {
    "exp": torch.exp, "log": lambda x: torch.log(x.abs() + 0.1), "log1p": lambda x: x.abs().log1p(),
    "expm1": torch.expm1, "sqrt": lambda x: x.abs().sqrt(), "rsqrt": lambda x: (x.abs() + 0.1).rsqrt(),
    "reciprocal": torch.reciprocal, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf, "atan": torch.atan,
    "sinh": torch.sinh, "cosh": torch.cosh, "log2": lambda x: (x.abs() + 0.1).log2(),
    "log10": lambda x: (x.abs() + 0.1).log10(), "exp2": torch.exp2, "abs": torch.abs,
    "neg": torch.neg, "sign": torch.sign, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round, "trunc": torch.trunc, "frac": torch.frac, "relu": F.relu,
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "mish": F.mish, "elu": F.elu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "softplus": lambda x: F.softplus(x, 2.0, 3.0),
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.7), "relu6": F.relu6,
    "nan_to_num": lambda x: torch.nan_to_num(x.log(), nan=0.5, neginf=-7.0),
    "isnan": lambda x: x.log().isnan(), "isinf": lambda x: (x / 0).isinf(),
    "isfinite": lambda x: (x / (x > 0)).isfinite(), "square": torch.square,
    "logical_not": torch.logical_not,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    x = torch.randn(4, 7) * 3
    x[0, 0], x[0, 1] = 0.0, 2.5  # a zero and a tie for round
    check(UNARY[name], x, **LOOSE)


def test_unary_backward():
    fns = [torch.tanh, torch.sigmoid, F.gelu, lambda x: F.gelu(x, approximate="tanh"),
           F.silu, F.relu, lambda x: F.hardtanh(x, -0.5, 0.5), lambda x: F.leaky_relu(x, 0.1)]
    check(lambda x: sum(f(x) * (i + 1) for i, f in enumerate(fns)),
          torch.randn(3, 8, requires_grad=True), backward=True, **LOOSE)


def test_binary_scalars_of_each_kind():
    def f(a, i, h):
        return (a + 2, a * -0.0, a + float("inf"), a * 1e-5, a + 1e20, a - 0,
                i + True, i * 2.5, i - 3, 3 - i, i / 2, h + 0.125, h * 1000000.0,
                torch.maximum(a, torch.tensor(float("-inf"))), a.add(a, alpha=2),
                a.sub(1.5, alpha=3), torch.rsub(a, 2), i.add(i, alpha=-2),
                torch.where(a > 0, 1, a), torch.where(a > 0, 0.5, -0.5))
    check(f, torch.randn(3, 4), torch.tensor([1, -2, 3, 7]),
          torch.randn(5).half())


def test_pow_div_mod():
    def f(a, b, i):
        return (a.pow(0.5), a.pow(-0.5), a.pow(-1), a.pow(2), a.pow(3), a.pow(-2), a.pow(1.7),
                2 ** a, a ** b, i ** 2, i.pow(3), a.div(b), a.div(0.3, rounding_mode="floor"),
                a.div(b, rounding_mode="trunc"), i.div(2, rounding_mode="trunc"),
                i.div(-2, rounding_mode="floor"), i // 3, i % 3, -i // 2, a.fmod(0.7),
                a.remainder(-0.7), i.fmod(3), i.remainder(-3), torch.atan2(a, b))
    a = torch.rand(3, 4) + 0.1
    check(f, a, torch.randn(3, 4), torch.tensor([1, -2, 3, 7, -9, 0]), **LOOSE)


def test_comparisons_and_clamps():
    def f(a, b, i):
        return (a == b, a != 0.5, a < b, a <= 0, a > b, a >= -0.25, i == 3, i < 2.5,
                torch.maximum(a, b), torch.minimum(a, b), a.clamp(-0.5, 0.5), a.clamp(min=0.1),
                a.clamp(max=0.2), i.clamp(max=1), i.clamp(0.5, 2.5), a.clamp(b, b + 1),
                a.clamp_min(0), torch.where(a > b, a, b))
    b = torch.randn(3, 4)
    a = b.clone()
    a[0] = torch.randn(4)
    check(f, a, b, torch.tensor([1, -2, 3, 7]))


def test_int64_and_bool_ops():
    def f(i, b):
        return (i * 2 + 1, b & (i > 2), b | (i < 0), b ^ (i > 2), ~b, ~i, i & 6, i | 1, i ^ 5,
                i.float() / 2, torch.arange(4) + i.sum(), torch.zeros(4, dtype=torch.int64),
                torch.full((2,), 7), i.abs(), -i, i.sign(), b + b, b * b,
                torch.logical_and(i, b), torch.logical_or(i, b), torch.logical_xor(i, b),
                b.any(), b.all(), i.amax(), i.max(0), i.min(0), i.argmin(), i.sum(), b.sum(),
                torch.where(b, i, -1), b.to(torch.int32) + i.to(torch.int32))
    check(f, torch.tensor([1, -2, 3, 7]), torch.tensor([True, False, True, True]))


def test_reductions_with_keepdim():
    def f(a):
        return (a.sum(), a.sum(1, keepdim=True), a.sum((0, 2)), a.mean(), a.mean(-1, keepdim=True),
                a.amax(1), a.amin((0, 1), keepdim=True), a.max(), a.min(), a.max(1), a.min(2, True),
                a.argmax(), a.argmax(1, keepdim=True), a.argmin(2), a.var(1), a.var((0, 2), correction=0),
                torch.var_mean(a, 1, keepdim=True), a.std(-1), a.norm(dim=1), a.sum(1, dtype=torch.float64),
                a.logsumexp(1), (a > 0).any(1), (a > 0).all(2, keepdim=True), a.to(torch.float64).mean(0))
    check(f, torch.randn(3, 5, 7), **LOOSE)


def test_softmax_forward_backward():
    w = torch.randn(3, 9)
    check(lambda a: (a.softmax(-1) * w, a.log_softmax(0) * w, F.softmax(a, 1)),
          torch.randn(3, 9, requires_grad=True), backward=True, **LOOSE)


def test_layer_norm_forward_backward():
    g = torch.randn(3, 5, 8)
    check(lambda a, w, b: (F.layer_norm(a, (8,), w, b, 1e-3) * g,
                                     F.layer_norm(a, (5, 8)) * g),
          torch.randn(3, 5, 8, requires_grad=True), torch.randn(8, requires_grad=True),
          torch.randn(8, requires_grad=True), backward=True, **LOOSE)


@pytest.mark.parametrize("shape", [(2, 6, 5), (1, 4, 3, 3), (0, 6, 4)])
def test_group_norm_forward_backward(shape):
    # an empty batch once divided by zero in the translator (0 rows of 0 groups)
    g = torch.randn(shape)
    check(lambda a, w, b: F.group_norm(a, 2, w, b, 1e-4) * g,
          torch.randn(shape, requires_grad=True), torch.randn(shape[1], requires_grad=True),
          torch.randn(shape[1], requires_grad=True), backward=True, **LOOSE)


def test_mlp_forward_backward():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(5, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 16),
                        nn.SiLU(), nn.Linear(16, 3))
    x, t = torch.randn(7, 5, requires_grad=True), torch.tensor([0, 1, 2, 1, 0, 2, 2])
    captured = capture(lambda x: F.cross_entropy(mlp(x), t), x, backward=True)
    assert len(captured) == 2  # forward and backward
    check_graphs(captured, **LOOSE)


class _Attention(nn.Module):
    def __init__(self, c=16, heads=2):
        super().__init__()
        self.qkv, self.o, self.ln = nn.Linear(c, 3 * c), nn.Linear(c, c), nn.LayerNorm(c)
        self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * c, c))
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // h)
        mask = torch.tril(torch.ones(t, t)) == 0
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.o(y)
        return x + self.mlp(x)


def test_attention_block_forward_backward():
    torch.manual_seed(0)
    check(_Attention(), torch.randn(2, 5, 16, requires_grad=True), backward=True,
          **LOOSE)


def test_sdpa_forward():
    q = torch.randn(2, 2, 5, 8)
    check(lambda q: F.scaled_dot_product_attention(q, q * 0.5, q, is_causal=True), q,
          **LOOSE)


def test_matmul_shapes():
    def f(m, k, v4, bat, bat2, c):
        return (m @ k, m @ v4, v4 @ v4, v4 @ k, bat @ bat2, v4 @ bat2, torch.mm(m, k),
                torch.bmm(bat2.transpose(1, 2), bat2), torch.addmm(c, m, k),
                torch.addmm(c, m, k, beta=0.5, alpha=2), torch.baddbmm(bat2[:, :, :1], bat2,
                                                                        bat2.transpose(1, 2)))
    check(f, torch.randn(3, 4), torch.randn(4, 5), torch.randn(4),
          torch.randn(2, 1, 3, 4), torch.randn(6, 4, 5), torch.randn(5), **LOOSE)


def test_views_permutes_slices_cat():
    def f(a, b):
        return (a.view(12), a.t(), a[1:, ::2], a[1], a[:, -1], a[..., None], a[-2:, 1:-1],
                a.unsqueeze(0).expand(2, 3, 4), torch.cat([a, a * 2], 1), torch.cat([a, b.int()]),
                a.chunk(2, 1)[1], a.flatten(), a.reshape(4, 3).squeeze(), a.T.contiguous(),
                a.repeat(2, 1, 3), a.flip(0, 1), a.roll(1, 0), a.roll(5), torch.stack([a, a], 2),
                a.unbind(0)[2], a.split([1, 3], 1)[1], a.permute(1, 0).reshape(2, 6),
                F.pad(a, (1, 2, -1, 0), value=3.0), a.narrow(1, 1, 2), a.transpose(0, 1)[1:3],
                a.unsqueeze(1).squeeze(1), a.tril(), a.triu(1), a.new_zeros(2), a[None, :, None],
                a.clone().view(2, 6).t())
    check(f, torch.randn(3, 4), torch.randn(1, 4))


def test_dtype_casts():
    def f(a, i, h):
        return (a.to(torch.float64) * 3, a.half() + 1, a.to(torch.bfloat16), i.to(torch.float32),
                a.to(torch.int32), a.bool(), (a > 0).long().sum(), i.to(torch.int32) + i,
                a.double().sum(), h.float() * a[0, :3], h + a[0, :3].half(), (h * 2).sum(),
                i * a[0, 0], a.sum(0, dtype=torch.float64), a.mean(0, dtype=torch.float64))
    check(f, torch.randn(3, 4) * 4, torch.tensor([1, 2, 3]), torch.randn(3).half(),
          rtol=1e-3, atol=1e-3)


def test_creation_ops():
    def f(a):
        return (torch.zeros(2, 3) + a, torch.ones_like(a), torch.full_like(a, 2.5),
                torch.arange(5), torch.arange(1, 3, 0.25), torch.arange(7, dtype=torch.float32),
                torch.zeros_like(a, dtype=torch.int64), a.new_ones(4), torch.full((2,), True),
                torch.scalar_tensor(3.5) * a, torch.tensor(1.5) + a)
    check(f, torch.randn(2, 3))


def test_size_one_and_odd_sizes():
    def f(a, b):
        return (a.sum(), a.mean(), a.softmax(0), a.amax(0, keepdim=True), a.var(0, correction=0),
                F.layer_norm(b, (7,)), b.log_softmax(1), b.sum((0, 2)), b.mean(-1, keepdim=True),
                b.squeeze(1) @ b.squeeze(1).t(), b.expand(3, 5, 7), a * b)
    check(f, torch.randn(1, 1), torch.randn(3, 1, 7), **LOOSE)


def test_embedding_gather_scatter_forward_backward():
    torch.manual_seed(0)
    emb = nn.Embedding(10, 4, padding_idx=1)
    ids = torch.tensor([[1, 2, 3], [4, 5, 1]])
    w = torch.randn(2, 3, 4)
    check(lambda i: emb(i) * w, ids, backward=True)
    check(lambda a, i: (a.gather(1, i), a.gather(0, i[:2] % 3), a[:, i[0]],
                                  torch.zeros(3, 4).scatter(1, i[:, :1], 1.0),
                                  a.scatter(1, i[:, 1:], a * 2), a[i[:, 0] % 3], a.index_select(1, i[0])),
          torch.randn(3, 4), torch.tensor([[0, 1], [3, 3], [2, 0]]))


def test_cross_entropy_variants():
    x = torch.randn(5, 4, requires_grad=True)
    t = torch.tensor([0, 3, -100, 1, 2])
    wt = torch.rand(4) + 0.5
    check(lambda x: F.cross_entropy(x, t), x, backward=True, **LOOSE)
    check(lambda x: F.cross_entropy(x, t, weight=wt, reduction="sum"), x,
          backward=True, **LOOSE)
    check(lambda x: F.nll_loss(x.log_softmax(1), t, reduction="none"), x,
          backward=True, **LOOSE)


def test_dynamic_shapes_run():
    check(lambda x, y: ((x * 2).sum(0) + y.view(-1)[:4]).softmax(0),
          torch.randn(5, 4), torch.randn(8), dynamic=True, **LOOSE)


def test_get_attr_constants_become_inputs():
    from torch.fx.experimental.proxy_tensor import make_fx

    c = torch.tensor([1.0, -2.0, 3.0])
    x = torch.randn(2, 3)
    gm = make_fx(lambda x: x * c + 1)(x)
    tr = translate(gm)
    assert tr.placeholder_index == [0, -1] and tr.attr_targets == ["_tensor_constant0"]
    got = run_kiln(tr, gm, [x], "cpu")
    torch.testing.assert_close(got[0], x * c + 1)


def test_undecomposed_backward_ops():
    """Without the decompositions the graphs keep ATen's backward ops:
    _softmax_backward_data, _log_softmax_backward_data, native_layer_norm_backward,
    threshold/tanh/sigmoid/gelu/silu_backward, embedding_dense_backward, nll_loss_*."""
    torch.manual_seed(0)
    emb = nn.Embedding(10, 6, padding_idx=0)
    ln = nn.LayerNorm(6)
    t = torch.tensor([0, 3, 5, -100])

    def f(ids, x):
        h = ln(emb(ids) + x)
        h = torch.tanh(h) + torch.sigmoid(h) + F.gelu(h) + F.silu(h) + F.relu(h)
        h = F.gelu(h, approximate="tanh") + h.softmax(-1)
        return F.cross_entropy(h, t) + F.nll_loss(h.log_softmax(-1), t, reduction="sum")

    ids = torch.tensor([1, 0, 3, 9])
    captured = capture(f, ids, torch.randn(4, 6, requires_grad=True), backward=True,
                       decompose=False)
    names = {str(n.target) for gm, _ in captured for n in call_nodes(gm)}
    for op in ("_softmax_backward_data", "_log_softmax_backward_data",
               "native_layer_norm_backward", "tanh_backward", "sigmoid_backward",
               "gelu_backward", "silu_backward", "threshold_backward",
               "embedding_dense_backward", "nll_loss_forward", "nll_loss_backward"):
        assert any(op in name for name in names), (op, names)
    check_graphs(captured, **LOOSE)
