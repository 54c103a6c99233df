"""Tests of kiln.fx_ops.strided (`as_strided` and its copy and scatter forms, which address
storage) and kiln.fx_ops.distance (`dist`, `cdist`, `pdist`, `bilinear`): each graph
translated, run on kiln compiled and eager, compared with torch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fx_harness import LOOSE, Unsupported, capture, check, translate

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def test_as_strided_windows_and_overlaps():
    x = torch.randn(4, 5)
    check(lambda t: torch.as_strided(t, (3, 3), (5, 1), 2), x)  # a window
    check(lambda t: torch.as_strided(t, (4, 3), (1, 1)), x)  # overlapping rows
    check(lambda t: torch.as_strided(t, (2, 2, 3), (0, 6, 2), 1), x)  # a stride 0
    check(lambda t: torch.as_strided(t, (1,), (1,), 19), x)  # the last element
    check(lambda t: torch.as_strided_copy(t, (5, 4), (1, 5)), x)  # a transpose


def test_as_strided_of_a_permuted_input_follows_its_storage():
    x = torch.randn(3, 4).t()  # storage order differs from element order
    check(lambda t: torch.as_strided(t, (6,), (2,), 0), x)
    check(lambda t: torch.as_strided(t, (2, 2), (1, 3), 1), x)


def test_as_strided_into_a_gap_is_unsupported():
    x = torch.randn(4, 6)[:, ::2]  # storage positions 1, 3, 5, ... hold no element
    (gm, _), = capture(lambda t: torch.as_strided(t, (4,), (1,), 0), x)
    with pytest.raises(Unsupported, match="no element"):
        translate(gm)


def test_as_strided_scatter():
    # (an overlapping view is left out: torch calls writing through one undefined)
    x, src = torch.randn(3, 4), torch.randn(2, 3)
    check(lambda t, s: torch.as_strided_scatter(t, s, (2, 3), (4, 1), 1), x, src)
    check(lambda t, s: torch.as_strided_scatter(t, s, (2, 3), (1, 4), 0), x, src.t().t())
    check(lambda t, s: torch.as_strided_scatter(t, s, (), (), 5), x, torch.tensor(9.0))


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.5, float("inf"), float("-inf")])
def test_dist(p):
    x, y = torch.randn(3, 5), torch.randn(5)
    x[0, 0] = y[0]  # one zero difference for p = 0
    check(lambda a, b: torch.dist(a, b, p), x, y, **LOOSE)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 0.5, float("inf")])
def test_cdist_direct_and_by_matmul(p):
    x1, x2 = torch.randn(2, 5, 3), torch.randn(2, 7, 3)
    check(lambda a, b: torch.cdist(a, b, p), x1, x2, **LOOSE)
    big1, big2 = torch.randn(30, 4), torch.randn(27, 4).t().contiguous().t()
    check(lambda a, b: torch.cdist(a, b, p), big1, big2, **LOOSE)  # > 25 rows: mm for p=2
    mode = "use_mm_for_euclid_dist" if p == 2 else "donot_use_mm_for_euclid_dist"
    check(lambda a, b: torch.cdist(a, b, p, compute_mode=mode), x1, x2, **LOOSE)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf")])
def test_pdist(p):
    check(lambda a: F.pdist(a, p), torch.randn(6, 4), **LOOSE)
    check(lambda a: F.pdist(a, p), torch.randn(1, 3))  # no pairs


def test_bilinear_forward_and_backward():
    x1 = torch.randn(4, 3, requires_grad=True)
    x2 = torch.randn(4, 5, requires_grad=True)
    w = torch.randn(6, 3, 5, requires_grad=True)
    bias = torch.randn(6, requires_grad=True)
    check(F.bilinear, x1, x2, w, bias, backward=True, **LOOSE)
    check(F.bilinear, torch.randn(2, 7, 3), torch.randn(2, 7, 5), w.detach(), None, **LOOSE)


def test_cdist_broadcasts_batch_dims():
    check(torch.cdist, torch.randn(3, 4), torch.randn(2, 5, 4), **LOOSE)
    check(torch.cdist, torch.randn(2, 1, 3, 4), torch.randn(5, 4), **LOOSE)
    check(lambda a, b: torch.cdist(a, b, 1.0), torch.randn(2, 1, 3, 4), torch.randn(3, 6, 4),
          **LOOSE)
