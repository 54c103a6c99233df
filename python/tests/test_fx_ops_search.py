"""Tests of kiln.fx_ops.search: `searchsorted` and `bucketize` as unrolled binary searches,
compared exactly with torch (indices), sorted or not, with ties, NaNs and every option."""

from __future__ import annotations

import pytest
import torch

from fx_harness import check

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

EXACT = dict(rtol=0, atol=0)
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("n", [1, 2, 5, 8, 33])
def test_bucketize_sorted_with_ties(right, n):
    bounds = torch.randint(-4, 5, (n,)).float().sort().values  # ties for most n
    values = torch.cat([torch.randint(-6, 7, (7, 3)).float(),
                        torch.tensor([[NAN, INF, -INF]])]).t()  # non-contiguous
    check(lambda v, b: torch.bucketize(v, b, right=right), values, bounds, **EXACT)
    check(lambda v, b: torch.bucketize(v, b, right=right, out_int32=True), values, bounds,
          **EXACT)


def test_bucketize_matches_torch_on_unsorted_and_nan_boundaries():
    bounds = torch.tensor([3.0, NAN, -1.0, 7.0, 2.0, NAN])
    values = torch.linspace(-3, 9, 25)
    check(lambda v, b: torch.bucketize(v, b), values, bounds, **EXACT)
    check(lambda v, b: torch.bucketize(v, b, right=True), torch.tensor(2.0), bounds, **EXACT)


def test_bucketize_integers_against_float_boundaries():
    check(lambda v, b: torch.bucketize(v, b), torch.arange(-3, 9), torch.tensor([0.5, 2.0, 6.5]),
          **EXACT)


@pytest.mark.parametrize("side", [None, "left", "right"])
def test_searchsorted_rows_and_sorter(side):
    seq = torch.randn(4, 9).sort(dim=1).values
    values = torch.randn(4, 6)
    values[1, 2] = seq[1, 4]  # a tie
    check(lambda s, v: torch.searchsorted(s, v, side=side), seq, values, **EXACT)
    perm = torch.randperm(9)
    shuffled = seq[0][perm]
    sorter = torch.argsort(shuffled)
    check(lambda s, v, o: torch.searchsorted(s, v, side=side, sorter=o), shuffled, values[0],
          sorter, **EXACT)
    check(lambda s, v: torch.searchsorted(s, v, right=True, out_int32=True), seq[2], values,
          **EXACT)


def test_searchsorted_scalar_value_and_single_boundary():
    check(lambda s, v: torch.searchsorted(s, v), torch.tensor([1.0]),
          torch.tensor([[0.5, 1.0, 2.0]]), **EXACT)
    check(lambda s, v: torch.searchsorted(s, v), torch.arange(5.0), torch.tensor(2.5), **EXACT)


@pytest.mark.parametrize("size", [0, 1, 4, 30])
def test_nonzero_static_pads_and_truncates(size):
    x = torch.randn(3, 5).t()  # non-contiguous
    x[x.abs() < 0.5] = 0
    x[1, 1] = float("nan")  # NaN is nonzero
    check(lambda t: torch.nonzero_static(t, size=size, fill_value=-3), x, **EXACT)
    check(lambda t: torch.nonzero_static(t > 0, size=size), x, **EXACT)
    check(lambda t: torch.nonzero_static(t, size=size), torch.tensor([0.0, 2.0, 0.0, 1.0]),
          **EXACT)


def test_combinations():
    x = torch.randn(6)
    check(lambda t: torch.combinations(t, 2), x, **EXACT)
    check(lambda t: torch.combinations(t, 3, with_replacement=True), x[:4], **EXACT)
