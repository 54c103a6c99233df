"""Tests of kiln.fx_ops.scan: prod (a pairwise tree) and the Hillis–Steele scans (cumsum,
cumprod, cummax, cummin, logcumsumexp), compared with eager torch through fx_harness."""

from __future__ import annotations

import pytest
import torch

from fx_harness import LOOSE, Unsupported, call_nodes, capture, check, translate
from fx_harness import seeded_ints as _ints
from fx_harness import seeded_randn as _rand

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

NAN, INF = float("nan"), float("inf")


def _targets(fn, *args):
    return {str(n.target) for gm, _ in capture(fn, *args) for n in call_nodes(gm)}


# -- prod -----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,dim,keepdim", [
    ((3, 7), 1, False), ((3, 7), -2, True), ((5,), 0, False), ((4, 1, 3), 1, True),
    ((2, 13, 3), -2, False), ((), 0, False), ((), -1, True), ((2, 0, 3), 1, False),
])
def test_prod_dim(shape, dim, keepdim):
    x = 1 + 0.3 * _rand(*shape)
    check(lambda x: x.prod(dim, keepdim=keepdim), x)


@pytest.mark.parametrize("shape", [(3, 7), (1,), (), (11,), (2, 0)])
def test_prod_all(shape):
    x = 1 + 0.3 * _rand(*shape)
    check(lambda x: x.prod(), x)


def test_prod_noncontiguous_special_values():
    x = (1 + 0.3 * _rand(6, 5)).t()[:, 1:]
    check(lambda x: x.prod(1), x)
    y = torch.tensor([[2.0, INF, 0.5], [0.0, INF, 1.0], [NAN, 1.0, 2.0], [-0.0, 3.0, 1.0]])
    check(lambda y: (y.prod(1), y.prod(0)), y)


def test_prod_integers_wrap_and_bool():
    big = _ints(3, 9, lo=-2**40, hi=2**40)  # products overflow i64 and wrap, as torch's
    check(lambda x: (x.prod(1), x.prod()), big)
    check(lambda x: x.prod(0, dtype=torch.int32), big)
    check(lambda x: x.int().prod(1), _ints(4, 5))
    check(lambda x: ((x > 0).prod(1), (x > -2).prod()), _ints(4, 5))


def test_prod_dtype_argument():
    x = _rand(3, 5)
    check(lambda x: (x.prod(1, dtype=torch.float64), x.prod(dtype=torch.int64)), 3 * x)
    check(lambda x: x.half().prod(1), 1 + 0.1 * x, rtol=1e-3, atol=1e-5)


# -- cumsum and cumprod ---------------------------------------------------------------------


@pytest.mark.parametrize("shape,dim", [((3, 7), 1), ((3, 7), -2), ((1,), 0), ((), 0), ((), -1),
                                       ((2, 9, 3), 1), ((4, 0), 1)])
def test_cumprod(shape, dim):
    x = 1 + 0.3 * _rand(*shape)
    check(lambda x: torch.cumprod(x, dim), x)


def test_cumprod_options_and_special_values():
    x = _rand(5, 6).t()[1:]
    check(lambda x: torch.cumprod(x, 1, dtype=torch.float64), x)
    check(lambda x: (torch.cumprod(x, 1), torch.cumprod(x > 0, 0)), _ints(4, 9))
    check(lambda x: torch.cumprod(x, 1), _ints(3, 20, lo=-2**20, hi=2**20))  # wraps
    y = torch.tensor([[2.0, INF, 0.0, 1.0], [NAN, 1.0, 2.0, 3.0], [-0.0, 3.0, -1.0, INF]])
    check(lambda y: torch.cumprod(y, 1), y)


def test_linalg_vander():
    check(lambda x: torch.linalg.vander(x), _rand(5))
    check(lambda x: torch.linalg.vander(x, N=3), _rand(2, 4))


def test_cumsum_integers_exact_in_i64():
    big = _ints(3, 9, lo=2**60, hi=2**62)  # beyond f64's 2^53, and wrapping
    check(lambda x: (torch.cumsum(x, 1), torch.cumsum(x > 2**61, 0)), big)
    check(lambda x: torch.cumsum(x, 0, dtype=torch.int32), _ints(7, 2))


def test_cumsum_beyond_matmul_limit():
    x = _rand(2, 1500)
    check(lambda x: torch.cumsum(x, -1), x, **LOOSE)
    check(lambda x: torch.cumsum(x, 0), _ints(2000, 2))


# -- cummax and cummin ----------------------------------------------------------------------


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
@pytest.mark.parametrize("shape,dim", [((3, 7), 1), ((3, 7), -2), ((1,), 0), ((), 0),
                                       ((2, 9, 3), 1), ((4, 0), 1)])
def test_cum_extremum(op, shape, dim):
    check(lambda x: op(x, dim), _rand(*shape))


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
def test_cum_extremum_ties_nan_and_dtypes(op):
    # ties take the later index; NaN propagates with the latest NaN's index; ±0 are ties
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, -1.0, -1.0],
                      [NAN, 1.0, NAN, 5.0, -INF, INF, 0.0],
                      [0.0, -0.0, 0.0, 1.0, NAN, NAN, 2.0],
                      [INF, INF, -INF, -INF, 1.0, 1.0, 1.0]])
    check(lambda x: op(x, 1), x)
    check(lambda x: op(x, 0), x.t()[::2])
    check(lambda x: op(x, 1), _ints(4, 9, lo=-2, hi=2))
    check(lambda x: op(x > 0, 1), _ints(4, 9, lo=-2, hi=2))


# -- logcumsumexp ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape,dim", [((3, 7), 1), ((3, 7), -2), ((1,), 0), ((), 0),
                                       ((2, 17, 3), 1), ((4, 0), 1)])
def test_logcumsumexp(shape, dim):
    check(lambda x: torch.logcumsumexp(x, dim), 5 * _rand(*shape), **LOOSE)


def test_logcumsumexp_special_values():
    x = torch.tensor([[-INF, -INF, 1.0, -INF, 2.0],
                      [INF, 1.0, INF, -INF, 3.0],
                      [1.0, NAN, 2.0, INF, -INF],
                      [100.0, -100.0, 100.0, 100.0, -0.0],
                      [-INF, INF, 0.0, NAN, 1.0]])
    check(lambda x: (torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0)), x, **LOOSE)
    check(lambda x: torch.logcumsumexp(x, 1), x.t()[1:], **LOOSE)


def test_logcumsumexp_refuses_integer_result():
    from kiln.fx_to_kir import _Builder, TType, Value
    from kiln.fx_ops.scan import _logcumsumexp

    x = Value("x", TType("i64", (3,)))
    with pytest.raises(Unsupported, match="aten.logcumsumexp: result dtype i64"):
        _logcumsumexp(_Builder(), {"self": x, "dim": 0}, TType("i64", (3,)))


# -- translation ----------------------------------------------------------------------------


def test_ops_reach_the_handlers():
    x = _rand(3, 4)
    names = _targets(lambda x: (x.prod(), x.prod(1), torch.cumprod(x, 0), torch.cummax(x, 1),
                                torch.cummin(x, 1), torch.logcumsumexp(x, 1)), x)
    assert {"aten.prod.default", "aten.prod.dim_int", "aten.cumprod.default",
            "aten.cummax.default", "aten.cummin.default",
            "aten.logcumsumexp.default"} <= names


def test_symbolic_dim_is_refused():
    captured = capture(lambda x: torch.cumprod(x, 0), _rand(5, 3), dynamic=True)
    with pytest.raises(Unsupported, match="symbolic dim"):
        for gm, _ in captured:
            translate(gm)
