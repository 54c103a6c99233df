"""Tests of the pointwise compositions in kiln.fx_ops.pointwise and the smaller translator
cases beside them (elu's scales, narrow integer intermediates, 0-d index selection): each
graph translated, run on kiln compiled and eager, compared with torch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fx_harness import Unsupported, capture, check, translate

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

SPECIAL = [0.0, -0.0, 1.0, -3.5, float("inf"), float("-inf"), float("nan"), 1e-40, 0.75,
           2.0**-126, 3e38, -1e-45, 0.5, 1.0 - 2.0**-24, 65504.0]


def special(dtype=torch.float32):
    return torch.tensor(SPECIAL, dtype=dtype)


def test_angle_of_reals_and_ints():
    check(torch.angle, special())
    check(torch.angle, torch.randn(5, 3).t())
    check(torch.angle, torch.tensor([-2, 0, 3]))


def test_hypot_special_values_and_broadcast():
    x = special()
    check(torch.hypot, x, x.flip(0))
    check(torch.hypot, x, torch.full_like(x, float("nan")))
    check(torch.hypot, torch.randn(4, 1), torch.randn(1, 7) * 1e30)
    check(torch.hypot, special(torch.float64) * 1e300, special(torch.float64).flip(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_frexp_exact_everywhere(dtype):
    x = special(dtype)
    powers = torch.tensor([2.0**k for k in range(-20, 20)], dtype=dtype)
    for t in (x, powers, -powers, torch.randn(3, 5, dtype=dtype).t() * 1e4):
        check(torch.frexp, t, rtol=0, atol=0)


def test_frexp_f64_is_unsupported():
    (gm, _), = capture(torch.frexp, torch.randn(3, dtype=torch.float64))
    with pytest.raises(Unsupported, match="frexp"):
        translate(gm)


@pytest.mark.parametrize("fn", [F.selu, lambda x: F.celu(x, 0.7), lambda x: F.elu(x, 1.3)])
def test_elu_family_with_scales(fn):
    check(fn, torch.randn(7, 5) * 3)
    check(fn, special())
    check(fn, torch.randn(4, 6, requires_grad=True).t(), backward=True)


def test_narrow_integer_intermediates_wrap_like_torch():
    def f(x, n):
        eye = torch.eye(n.shape[0], dtype=torch.float32)
        u = (x * 40).to(torch.uint8)  # wraps past 255
        i8 = (x * 30).to(torch.int8) + 100  # i8 arithmetic wraps past 127
        i16 = (x * 9000).to(torch.int16) * 7
        return eye, u.float(), i8.float(), (i16 // 3).to(torch.int64), (~u).long()

    x = torch.linspace(-10, 10, 13)
    check(f, x, torch.zeros(5))


def test_narrow_integer_graph_output_is_unsupported():
    (gm, _), = capture(lambda x: (x * 3).to(torch.uint8), torch.randn(4))
    with pytest.raises(Unsupported, match="uint8"):
        translate(gm)


def test_zero_dim_index_selection():
    check(lambda x, i: torch.index_select(x, 0, i), torch.tensor(2.5), torch.tensor([0]))
    check(lambda x, i: torch.index_select(x, 1, i), torch.randn(3, 4), torch.tensor(2))
    check(lambda w, i: F.embedding(i, w), torch.randn(10, 5), torch.tensor(7))


def test_narrow_copy_and_unbind_copy():
    x = torch.randn(6, 5).t()
    check(lambda t: torch.narrow_copy(t, 1, 2, 3), x)
    check(lambda t: torch.unbind_copy(t, 1), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_nextafter_bit_exact(dtype):
    x = special(dtype)
    info = torch.finfo(dtype)
    edges = torch.tensor([info.max, -info.max, info.tiny, -info.tiny, info.smallest_normal * 2,
                          2.0**-140 if dtype != torch.float16 else 2.0**-20, 1.0, -1.0, 0.0],
                         dtype=dtype)
    for t in (x, edges):
        for towards in (float("inf"), float("-inf"), 0.0, -0.0, float("nan")):
            check(torch.nextafter, t, torch.full_like(t, towards), rtol=0, atol=0)
        check(torch.nextafter, t, t.flip(0), rtol=0, atol=0)
        check(torch.nextafter, t, t.clone(), rtol=0, atol=0)
    check(torch.nextafter, torch.randn(4, 5, dtype=dtype).t(), torch.randn(5, 1, dtype=dtype),
          rtol=0, atol=0)
