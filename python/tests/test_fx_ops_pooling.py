"""Tests of kiln.fx_ops.pooling: average, max (values and indices) and adaptive pools in 1, 2
and 3 spatial dims, and their backwards, compared with eager torch through fx_harness."""

from __future__ import annotations

import pytest
import torch

from fx_harness import Unsupported, capture, check, run_kiln, translate

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

F = torch.nn.functional
NAN, INF = float("nan"), float("inf")
TOL = dict(rtol=1.3e-6, atol=1e-5)


def _rand(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _special():
    """(1, 2, 7, 6): ties, NaNs (two in one window), infinities, -0.0, an all -inf corner."""
    x = torch.randint(-2, 3, (1, 2, 7, 6), generator=torch.Generator().manual_seed(3)).float()
    x[0, 0, 1, 1] = x[0, 0, 2, 2] = NAN
    x[0, 0, 4, 3] = INF
    x[0, 1, 0:3, 0:3] = -INF
    x[0, 1, 5, 5] = -0.0
    x[0, 1, 3, 4] = NAN
    return x


# -- average pools ----------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=0, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, stride=1, padding=1, divisor_override=3),
    dict(kernel_size=2),  # non-overlapping windows, an odd size leaves a row out
])
def test_avg_pool2d(args):
    check(lambda x: F.avg_pool2d(x, **args), _rand(2, 3, 9, 8), **TOL)


def test_avg_pool2d_backward_and_noncontiguous():
    x = _rand(3, 2, 8, 9).transpose(2, 3).requires_grad_()
    check(lambda x: F.avg_pool2d(x, 3, 2, 1, True, False), x, backward=True, **TOL)
    check(lambda x: F.avg_pool2d(x, 2, divisor_override=5), x, backward=True, **TOL)


def test_avg_pool1d_3d_and_unbatched():
    check(lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), _rand(2, 3, 10), **TOL)
    check(lambda x: F.avg_pool3d(x, (3, 2, 2), (2, 1, 2), (1, 0, 1), count_include_pad=False),
          _rand(2, 2, 5, 6, 7).requires_grad_(), backward=True, **TOL)
    check(lambda x: F.avg_pool2d(x, 1), _rand(1, 1, 1, 1), **TOL)
    check(lambda x: F.avg_pool2d(x, 3, 1, 1), _rand(3, 5, 4), **TOL)  # (C, H, W)


def test_avg_pool_special_values_and_half():
    check(lambda x: F.avg_pool2d(x, 2, 1, 1), _special(), **TOL)
    x = _rand(1, 2, 7, 6).to(torch.float16)
    check(lambda x: F.avg_pool2d(x, 3, 2, 1), x, rtol=1e-3, atol=1e-3)


def test_avg_pool_of_integers_is_refused():
    x = torch.arange(24).reshape(1, 1, 4, 6)
    (gm, _), = capture(lambda x: F.avg_pool2d(x, 2), x)
    with pytest.raises(Unsupported, match="avg_pool2d: i64 input"):
        translate(gm)


def _signs(fn, x):
    """signbit of kiln's and torch's first output of `fn(x)` (assert_close ignores it)."""
    (gm, inputs), = capture(fn, x)
    got = run_kiln(translate(gm), gm, inputs, "cpu")[0]
    return torch.signbit(got).tolist(), torch.signbit(fn(x)).tolist()


@pytest.mark.parametrize("fn", [
    lambda x: F.avg_pool2d(x, 2), lambda x: F.avg_pool2d(x, (2, 1), 1),
    lambda x: F.adaptive_avg_pool2d(x, (1, 3)), lambda x: F.max_pool2d(x, 2),
    lambda x: F.max_pool2d(x, (2, 1), 1), lambda x: F.max_pool2d(x, 3, 2, 1),
])
def test_signed_zeros(fn):
    # the kernels' sums start at +0.0; a max pool keeps the first maximum's sign
    x = torch.tensor([[[[-0.0, 0.0, 0.0, -0.0], [0.0, -0.0, -0.0, -0.0]]]])
    got, want = _signs(fn, x)
    assert got == want
    got, want = _signs(fn, torch.full((1, 1, 2, 4), -0.0))
    assert got == want


# -- max pools --------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(2, 1)),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2),  # non-overlapping windows: the reshape path
    dict(kernel_size=2, ceil_mode=True),
])
def test_max_pool2d(args):
    x = _rand(2, 3, 9, 8).requires_grad_()
    check(lambda x: F.max_pool2d(x, return_indices=True, **args), x, **TOL)
    check(lambda x: F.max_pool2d(x, **args), x, backward=True, **TOL)


@pytest.mark.parametrize("indices", [True, False])
@pytest.mark.parametrize("kernel", [2, 3])
def test_max_pool_nan_inf_ties(kernel, indices):
    # first maximum wins, the last NaN of a window wins, an all -inf window (padding too)
    # points at its first input position; without indices (an inference graph) the
    # maximum's chain runs alone and gives the same values
    for pad in (0, 1):
        check(lambda x: F.max_pool2d(x, kernel, kernel - pad, pad, return_indices=indices),
              _special(), **TOL)


def test_max_pool1d_3d_unbatched_noncontiguous():
    check(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True), _rand(2, 3, 11), **TOL)
    x = _rand(2, 2, 5, 6, 7).requires_grad_()
    check(lambda x: F.max_pool3d(x, 3, 2, 1, return_indices=True), x, **TOL)
    check(lambda x: F.max_pool3d(x, 2), x, backward=True, **TOL)
    check(lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True), _rand(3, 6, 5), **TOL)
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), _rand(2, 7, 6)[:, ::2], **TOL)
    check(lambda x: F.max_pool2d(x, 1), _rand(1, 1, 1, 1), **TOL)


def test_max_pool_integers():
    x = torch.randint(-5, 5, (1, 2, 7, 6), generator=torch.Generator().manual_seed(1))
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x)
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), x)


# -- adaptive pools ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(4, 3), (3, 4), 1, (9, 8), (5, 7)])
def test_adaptive_avg_pool2d(size):
    x = _rand(2, 3, 9, 8).requires_grad_()
    check(lambda x: F.adaptive_avg_pool2d(x, size), x, backward=True, **TOL)


@pytest.mark.parametrize("size", [(4, 3), (3, 4), 1, (5, 7)])
def test_adaptive_max_pool2d(size):
    x = _rand(2, 3, 9, 8).requires_grad_()
    check(lambda x: F.adaptive_max_pool2d(x, size, return_indices=True), x, **TOL)
    check(lambda x: F.adaptive_max_pool2d(x, size), x, backward=True, **TOL)


def test_adaptive_pools_1d_3d_special_noncontiguous():
    check(lambda x: F.adaptive_avg_pool1d(x, 4), _rand(2, 3, 11), **TOL)
    check(lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True), _rand(2, 3, 11), **TOL)
    x = _rand(2, 2, 5, 6, 7)
    check(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), x, **TOL)
    check(lambda x: F.adaptive_max_pool3d(x, (2, 3, 4), return_indices=True), x, **TOL)
    check(lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True), _special(), **TOL)
    check(lambda x: F.adaptive_max_pool2d(x, 1, return_indices=True), _special(), **TOL)
    check(lambda x: F.adaptive_avg_pool2d(x, (3, 4)), _rand(2, 9, 8).transpose(1, 2), **TOL)


def test_area_interpolate_and_local_response_norm():
    x = _rand(2, 3, 9, 8).requires_grad_()
    check(lambda x: F.interpolate(x, size=(4, 5), mode="area"), x, backward=True, **TOL)
    check(lambda x: F.local_response_norm(x, 3), x, backward=True, **TOL)


def test_half_precision():
    x = _rand(2, 3, 8, 6).to(torch.bfloat16).requires_grad_()
    half = dict(rtol=1.6e-2, atol=1e-5)
    check(lambda x: F.adaptive_avg_pool2d(x, (3, 4)), x, **half)
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x, **half)
    # at most two windows per input position: the gradient is exact
    check(lambda x: F.max_pool2d(x, 2), x, backward=True, **half)
    check(lambda x: F.avg_pool2d(x, 2, 3), x, backward=True, **half)
    check(lambda x: F.avg_pool2d(x, (3, 2), (2, 2), (1, 0)), x, backward=True, **half)
    check(lambda x: F.adaptive_avg_pool2d(x, (4, 4)), x, backward=True, **half)


def test_half_precision_refusals():
    # torch accumulates these in f16/bf16 in its own order
    x = _rand(1, 2, 5, 6, 7).to(torch.float16)
    (gm, _), = capture(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), x)
    with pytest.raises(Unsupported, match="sums f16 in f16"):
        translate(gm)
    x = _rand(1, 2, 8, 6).to(torch.float16).requires_grad_()
    for fn in (lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: F.avg_pool2d(x, 3, 2, 1)):
        fw, bw = capture(fn, x, backward=True)
        with pytest.raises(Unsupported, match="f16 gradient summed over more than 2 windows"):
            translate(bw[0])


def test_long_adaptive_windows_are_refused():
    (gm, _), = capture(lambda x: F.adaptive_avg_pool1d(x, 3), _rand(1, 1, 1000))
    with pytest.raises(Unsupported, match="adaptive pool of 1000 to 3"):
        translate(gm)
