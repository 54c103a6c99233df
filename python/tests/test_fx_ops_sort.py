"""Tests of kiln.fx_ops.sort: sort, topk, kthvalue, median and nanmedian as a bitonic sorting
network, compared with eager torch (values and indices) through fx_harness."""

from __future__ import annotations

import pytest
import torch

from fx_harness import Unsupported, capture, check, translate
from fx_harness import seeded_ints as _ints
from fx_harness import seeded_randn as _rand

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

NAN, INF = float("nan"), float("inf")


def _special(seed=0):
    """(4, 13) floats with many ties, NaNs, infinities and signed zeros (a row all NaN)."""
    x = _ints(4, 13, lo=-2, hi=3, seed=seed).float()
    x[0, 3] = x[0, 7] = NAN
    x[1, ::3] = NAN
    x[2, 1], x[2, 4], x[2, 5], x[2, 9] = -0.0, 0.0, INF, -INF
    x[3] = NAN
    return x


# -- sort -----------------------------------------------------------------------------------


@pytest.mark.parametrize("descending", [False, True])
def test_sort_random(descending):
    # no ties: the unstable overload's indices are determined too
    check(lambda x: torch.sort(x, 0, descending), _rand(6, 11))
    check(lambda x: torch.sort(x, -1, descending), _rand(6, 11))


@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable_ties_nan_inf_signed_zero(descending):
    check(lambda x: torch.sort(x, dim=1, descending=descending, stable=True), _special())
    check(lambda x: torch.sort(x, dim=0, descending=descending, stable=True), _special(1))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.float16,
                                   torch.bfloat16, torch.float64])
def test_sort_dtypes(dtype):
    x = _ints(5, 9).to(dtype)
    check(lambda x: torch.sort(x, dim=1, stable=True), x)
    check(lambda x: torch.sort(x, dim=0, descending=True, stable=True), x)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_padding_after_extreme_values(descending):
    # n = 5 pads to 8 with the extreme value of the order: real entries equal to it stay first
    big = torch.tensor([[2**63 - 1, 0, -(2**63), 2**63 - 1, -(2**63)]])
    check(lambda x: torch.sort(x, descending=descending, stable=True), big)
    f = torch.tensor([[NAN, -INF, 1.0, NAN, -INF], [-INF, -INF, -INF, -INF, -INF]])
    check(lambda x: torch.sort(x, descending=descending, stable=True), f)


def test_sort_noncontiguous_3d():
    x = _rand(7, 3, 6).transpose(0, 2)[:, ::2]  # (6, 2, 7), strided
    check(lambda x: torch.sort(x, dim=1), x)
    check(lambda x: torch.sort(x, dim=0, descending=True), x)


def test_sort_trivial_dims():
    check(lambda x: torch.sort(x, dim=1), _rand(4, 1))
    check(lambda x: torch.sort(x, dim=0, descending=True), torch.tensor(3.0))


def test_argsort_msort():
    x = _rand(5, 12)
    check(lambda x: torch.argsort(x, dim=1, descending=True), x)
    check(lambda x: torch.argsort(x, dim=0, stable=True), _special())
    check(lambda x: torch.msort(x), x)


def test_sort_longest_dim():
    check(lambda x: torch.sort(x), _rand(2, 4096))


def test_sort_too_long_is_refused():
    (gm, _), = capture(lambda x: torch.sort(x), _rand(8193))
    with pytest.raises(Unsupported, match="aten.sort: sorting 8193 > 8192"):
        translate(gm)


# -- topk -----------------------------------------------------------------------------------


@pytest.mark.parametrize("largest", [True, False])
def test_topk(largest):
    x = _rand(6, 9)
    check(lambda x: torch.topk(x, 3, dim=1, largest=largest), x)
    check(lambda x: torch.topk(x, 6, dim=0, largest=largest), x.t())  # non-contiguous
    check(lambda x: torch.topk(x, 1, largest=largest), x)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_nan_inf(largest):
    # no repeated values: NaN counts as the largest
    x = torch.tensor([[1.0, NAN, -INF, 3.0, INF, -2.0, 0.5]])
    check(lambda x: torch.topk(x, 4, largest=largest), x)


def test_topk_ints_and_whole_dim():
    x = torch.randperm(11, generator=torch.Generator().manual_seed(0)).reshape(1, 11)
    check(lambda x: torch.topk(x, 5), x)
    check(lambda x: torch.topk(x, 11, largest=False), x.to(torch.int32))
    check(lambda x: torch.topk(x, 1), torch.tensor(2.0))


# -- kthvalue ---------------------------------------------------------------------------------


@pytest.mark.parametrize("k,keepdim", [(1, False), (4, True), (9, False)])
def test_kthvalue(k, keepdim):
    x = _rand(9, 5)
    check(lambda x: torch.kthvalue(x, k, dim=0, keepdim=keepdim), x)
    check(lambda x: torch.kthvalue(x, k, dim=1, keepdim=keepdim), x.t())


def test_kthvalue_nan_last():
    x = torch.tensor([[2.0, NAN, -1.0, INF, 0.5], [NAN, 1.0, -INF, 7.0, 3.0]])
    for k in (1, 3, 5):
        check(lambda x: torch.kthvalue(x, k), x)


# -- median / nanmedian ---------------------------------------------------------------------


@pytest.mark.parametrize("op", [torch.median, torch.nanmedian])
def test_median_random(op):
    x = _rand(7, 6)  # even and odd lengths: the lower median
    check(lambda x: op(x, 0), x)
    check(lambda x: op(x, 1, keepdim=True), x)
    check(lambda x: op(x, -1), x[:, 1:])
    check(lambda x: op(x), x)
    check(lambda x: op(x), x[:, ::2])


def test_median_nan_gives_first_nan():
    x = torch.tensor([[1.0, NAN, 2.0, NAN, 3.0], [4.0, 2.0, -1.0, 0.0, NAN],
                      [1.0, 2.0, 3.0, 4.0, 5.0], [NAN, NAN, NAN, NAN, NAN]])
    check(lambda x: torch.median(x, 1), x)
    check(lambda x: torch.median(x), x)


def test_nanmedian_ignores_nan():
    x = torch.tensor([[1.0, NAN, 2.0, NAN, 3.0], [4.0, 2.0, -1.0, 0.0, NAN],
                      [NAN, 5.0, NAN, NAN, NAN], [NAN, -0.5, 0.25, 9.0, NAN]])
    check(lambda x: torch.nanmedian(x, 1), x)
    check(lambda x: torch.nanmedian(x), x)
    # an all-NaN row: NaN (torch's index there is its selection algorithm's, so values only)
    check(lambda x: torch.nanmedian(x, 0).values, x)
    check(lambda x: torch.nanmedian(x), torch.full((6,), NAN))


@pytest.mark.parametrize("op", [torch.median, torch.nanmedian])
def test_median_ints_and_trivial(op):
    x = torch.randperm(12, generator=torch.Generator().manual_seed(1)).reshape(3, 4)
    check(lambda x: op(x, 1), x)
    check(lambda x: op(x), x.to(torch.int32))
    check(lambda x: op(x, 0), torch.tensor(1.5))
    check(lambda x: op(x, 1), _rand(3, 1))


def test_quantile_through_sort():
    x = _rand(4, 9)
    x[1, 2] = NAN
    check(lambda x: torch.quantile(x, 0.3, dim=1), x)
    check(lambda x: torch.nanquantile(x, 0.75, dim=1, keepdim=True), x)
