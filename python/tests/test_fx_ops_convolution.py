"""Tests of kiln.fx_ops.convolution: aten.convolution (forward and transposed, 1d/2d/3d)
and aten.convolution_backward, compared with eager torch through fx_harness."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fx_harness import Unsupported, capture, check, translate

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

TOL = dict(rtol=1.3e-6, atol=1e-5)
"""f32 tolerance: kiln and torch sum the same products in another order."""

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _rand(*shape, seed=0, grad=False):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    return x.requires_grad_(grad)


def _conv_args(n, c, o, groups, size, ksize, bias, grad=False):
    x = _rand(n, c, *size, seed=1, grad=grad)
    w = _rand(o, c // groups, *ksize, seed=2, grad=grad)
    b = _rand(o, seed=3, grad=grad) if bias else None
    return x, w, b


# -- forward ---------------------------------------------------------------------------------

FORWARD = [
    # (n, c, o, groups, size, ksize, options); odd-numbered cases have no bias
    (2, 3, 4, 1, (9,), (3,), dict()),
    (1, 3, 5, 1, (10,), (4,), dict(stride=3, padding=2, dilation=2)),
    (2, 4, 6, 2, (7,), (1,), dict(stride=2)),
    (2, 3, 4, 1, (7, 6), (3, 2), dict(padding=1)),
    (1, 4, 4, 4, (5, 7), (3, 3), dict(padding=(1, 2), stride=(2, 1))),  # depthwise
    (3, 6, 9, 3, (8, 5), (2, 3), dict(dilation=(2, 1), padding=(0, 1), stride=(1, 2))),
    (2, 1, 1, 1, (1, 1), (1, 1), dict()),
    (0, 3, 4, 1, (5, 5), (3, 3), dict(padding=1)),  # empty batch
    (1, 2, 3, 1, (6, 5), (3, 3), dict(padding="same")),
    (1, 2, 3, 1, (6, 5), (2, 4), dict(padding="same")),  # even kernel: an uneven pad
    (2, 2, 3, 1, (6, 5), (3, 3), dict(padding="valid")),
    (2, 2, 3, 1, (5, 4, 6), (3, 2, 3), dict(padding=1)),
    (1, 4, 2, 2, (5, 6, 4), (2, 3, 1), dict(stride=(2, 1, 3), padding=(1, 0, 2),
                                           dilation=(1, 2, 1))),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("case", range(len(FORWARD)))
def test_conv(case):
    n, c, o, groups, size, ksize, opts = FORWARD[case]
    x, w, b = _conv_args(n, c, o, groups, size, ksize, bias=case % 2 == 0)
    conv = CONV[len(size)]
    check(lambda x, w, b: conv(x, w, b, groups=groups, **opts), x, w, b, **TOL)


def test_conv_channels_last_input():
    x = _rand(2, 7, 6, 5).permute(0, 3, 1, 2)  # [2, 5, 7, 6], channels-last strides
    w, b = _rand(4, 5, 3, 3, seed=1), _rand(4, seed=2)
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=2), x, w, b, **TOL)


def test_conv_sliced_weight_and_unbatched_input():
    x, w = _rand(3, 11), _rand(4, 3, 6, seed=1)[:, :, ::2]
    check(lambda x, w: F.conv1d(x, w, padding=2), x, w, **TOL)


@pytest.mark.parametrize("dtype,tol", [
    (torch.float64, dict(rtol=1e-12, atol=1e-12)),
    (torch.float16, dict(rtol=1e-3, atol=1e-5)),
    (torch.bfloat16, dict(rtol=1.6e-2, atol=1e-5)),
])
def test_conv_dtypes(dtype, tol):
    x, w, b = (t.to(dtype) for t in _conv_args(2, 3, 4, 1, (6, 5), (3, 2), True))
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b, **tol)


def test_conv_translates_to_one_native_op_per_convolution():
    """A convolution and its backward are kiln `convolution` ops, not composed im2col."""
    x, w, b = _conv_args(2, 4, 6, 2, (7, 6), (3, 2), True, grad=True)
    (gm, _), = capture(lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2), x, w, b)
    text = translate(gm).kir
    assert text.count("convolution ") == 1 and " cat " not in text, text
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=(2, 1), groups=2), x, w, b,
          backward=True, **TOL)
    x = _rand(2, 4, 7, seed=1, grad=True)
    w = _rand(4, 3, 3, seed=2, grad=True)
    check(lambda x, w: F.conv_transpose1d(x, w, stride=2, groups=2), x, w,
          backward=True, **TOL)


# -- transposed ------------------------------------------------------------------------------

TRANSPOSED = [
    # (n, cin, cout, groups, size, ksize, options); odd-numbered cases have no bias
    (2, 3, 4, 1, (7,), (3,), dict()),
    (1, 4, 6, 2, (5,), (4,), dict(stride=3, padding=2, output_padding=1)),
    (2, 2, 3, 1, (6,), (3,), dict(stride=2, padding=1, output_padding=1, dilation=2)),
    (2, 2, 3, 1, (6,), (2,), dict(padding=2)),  # padding beyond d·(k-1): a crop
    (2, 3, 2, 1, (5, 4), (3, 2), dict(stride=(2, 1), padding=(1, 0))),
    (1, 4, 4, 4, (3, 5), (3, 3), dict(stride=2, padding=1, output_padding=(1, 0))),
    (2, 6, 3, 3, (4, 3), (2, 3), dict(dilation=(1, 3), output_padding=(0, 2), stride=(1, 3))),
    (1, 2, 3, 1, (3, 4, 2), (2, 3, 2), dict(stride=(2, 1, 2), padding=(0, 1, 1))),
]


@pytest.mark.parametrize("case", range(len(TRANSPOSED)))
def test_conv_transpose(case):
    n, cin, cout, groups, size, ksize, opts = TRANSPOSED[case]
    x = _rand(n, cin, *size, seed=1)
    w = _rand(cin, cout // groups, *ksize, seed=2)
    b = _rand(cout, seed=3) if case % 2 == 0 else None
    conv = CONV_T[len(size)]
    check(lambda x, w, b: conv(x, w, b, groups=groups, **opts), x, w, b, **TOL)


def test_conv_transpose_noncontiguous_input():
    x, w = _rand(2, 5, 3, 4).transpose(1, 3), _rand(4, 2, 2, 3, seed=1)
    check(lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=(0, 1)), x, w, **TOL)


# -- backward --------------------------------------------------------------------------------


@pytest.mark.parametrize("n,c,o,groups,size,ksize,opts", [
    FORWARD[1], FORWARD[4], FORWARD[5], FORWARD[12],
    (2, 3, 4, 1, (8, 7), (3, 3), dict(stride=2, padding=1)),  # uneven: input rows unused
    # 16 groups or more of one output channel: vectorised across the groups (forward, input
    # gradient and weight gradient)
    (3, 24, 24, 24, (9, 8), (3, 3), dict(stride=2, padding=1)),
    (2, 16, 16, 16, (11,), (3,), dict(dilation=2, padding=2)),
    # weight gradients with fewer positions than taps, or a batch above the channels: one
    # GEMM over every output position
    (4, 40, 24, 1, (2, 2), (1, 1), dict()),
    (2, 20, 18, 1, (2, 2), (3, 3), dict(padding=1)),
    (3, 12, 10, 2, (6, 5), (3, 3), dict(stride=2, padding=1)),
])
def test_conv_backward(n, c, o, groups, size, ksize, opts):
    x, w, b = _conv_args(n, c, o, groups, size, ksize, True, grad=True)
    conv = CONV[len(size)]
    check(lambda x, w, b: conv(x, w, b, groups=groups, **opts), x, w, b, backward=True, **TOL)


@pytest.mark.parametrize("n,cin,cout,groups,size,ksize,opts", [
    TRANSPOSED[1], TRANSPOSED[3], TRANSPOSED[6], TRANSPOSED[7],
])
def test_conv_transpose_backward(n, cin, cout, groups, size, ksize, opts):
    x = _rand(n, cin, *size, seed=1, grad=True)
    w = _rand(cin, cout // groups, *ksize, seed=2, grad=True)
    b = _rand(cout, seed=3, grad=True)
    conv = CONV_T[len(size)]
    check(lambda x, w, b: conv(x, w, b, groups=groups, **opts), x, w, b, backward=True, **TOL)


@pytest.mark.parametrize("needs", [(True, False), (False, True)])
def test_conv_backward_output_mask(needs):
    """Only the gradients asked for are computed (output_mask)."""
    x = _rand(2, 3, 6, 5, grad=needs[0])
    w = _rand(4, 3, 3, 3, seed=1, grad=needs[1])
    check(lambda x, w: F.conv2d(x, w, padding=1), x, w, backward=True, **TOL)


def test_small_cnn_train_step():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, groups=2), torch.nn.Tanh(),
        torch.nn.ConvTranspose2d(8, 4, 2, stride=2), torch.nn.Flatten(), torch.nn.Linear(576, 5),
    )
    x = _rand(2, 3, 13, 13, grad=True)
    check(lambda x: net(x), x, backward=True, **TOL)


# -- refusals --------------------------------------------------------------------------------


def test_symbolic_sizes_refused():
    x, w = _rand(2, 3, 9), _rand(4, 3, 3, seed=1)
    (gm, _), = capture(lambda x, w: F.conv1d(x, w), x, w, dynamic=True)
    with pytest.raises(Unsupported, match="symbolic"):
        translate(gm)
