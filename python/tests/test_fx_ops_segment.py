"""Tests of kiln.fx_ops.segment: `segment_reduce` by lengths and by offsets, every reduction,
with and without `initial`, empty segments, NaN, and a leading batch dim (axis 1)."""

from __future__ import annotations

import pytest
import torch

from fx_harness import check

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("initial", [None, 1.5])
def test_segment_reduce_lengths_and_offsets(reduce, initial):
    data = torch.randn(9, 3)
    data[4, 1] = float("nan")
    lengths = torch.tensor([2, 0, 4, 1, 2])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    check(lambda d, l: torch.segment_reduce(d, reduce, lengths=l, initial=initial), data,
          lengths)
    check(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, initial=initial), data.t().t(),
          offsets)


@pytest.mark.parametrize("reduce", ["sum", "max", "mean"])
def test_segment_reduce_along_axis_1(reduce):
    data = torch.randn(2, 6, 4)
    lengths = torch.tensor([[1, 3, 2], [0, 6, 0]])
    check(lambda d, l: torch.segment_reduce(d, reduce, lengths=l, axis=1), data, lengths)
