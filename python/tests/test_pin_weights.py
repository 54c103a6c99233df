"""``kiln.backend(pin_weights=True)``: kiln keeps packed copies of parameters between calls
(a Linear's ``wᵀ`` transposed once), reused while ``_version`` is unchanged; every result
still equals eager PyTorch's, after in-place updates too."""

import gc

import pytest
import torch
import torch.nn as nn

import kiln
from kiln import _native

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def model():
    # odd sizes, big enough that kiln copies each transposed weight (each product
    # >= 2^22 multiply-adds, >= 256 rows)
    m = nn.Sequential(nn.Linear(128, 161), nn.ReLU(), nn.Linear(161, 97))
    return m, torch.randn(301, 128)


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_pinned_weights_are_kept_and_results_equal_eager():
    kiln.forget_weights()
    m, x = model()
    base = _native.pack_cache_bytes()
    c = torch.compile(m, backend=kiln.backend(pin_weights=True))
    with torch.no_grad():
        for _ in range(3):
            close(c(x), m(x))
        kept = _native.pack_cache_bytes()
        # both weights are read transposed (x @ wᵀ): both kept after the second call
        assert kept - base >= (128 * 161 + 161 * 97) * 4
        # writes through the parameter bump _version: seen at once
        m[0].weight.mul_(-0.5)
        m[2].weight.add_(0.25)
        close(c(x), m(x))
        close(c(x), m(x))
        close(c(x), m(x))
        # a write through .data is not seen by _version; forget_weights drops the copies
        m[0].weight.data.mul_(3.0)
        kiln.forget_weights()
        assert _native.pack_cache_bytes() == base
        close(c(x), m(x))
        close(c(x), m(x))


def test_freed_parameters_take_their_copies_with_them():
    kiln.forget_weights()
    base = _native.pack_cache_bytes()
    m, x = model()
    c = torch.compile(m, backend=kiln.backend(pin_weights=True))
    with torch.no_grad():
        for _ in range(3):
            c(x)
    assert _native.pack_cache_bytes() > base
    del m, c
    torch._dynamo.reset()
    gc.collect()
    assert _native.pack_cache_bytes() == base


def test_without_pinning_no_copy_of_a_parameter_is_kept():
    kiln.forget_weights()
    base = _native.pack_cache_bytes()
    m, x = model()
    c = torch.compile(m, backend="kiln")
    with torch.no_grad():
        for _ in range(3):
            close(c(x), m(x))
        assert _native.pack_cache_bytes() == base
        m[0].weight.data.mul_(3.0)  # unpinned: every call reads the parameter itself
        close(c(x), m(x))


def test_pinned_training_step_equals_eager():
    torch.manual_seed(1)
    m, x = model()
    ref, _ = model()
    ref.load_state_dict(m.state_dict())
    c = torch.compile(m, backend=kiln.backend(pin_weights=True))
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for _ in range(3):
        for mod, o, f in ((m, opt, c), (ref, ref_opt, ref)):
            o.zero_grad()
            f(x).square().mean().backward()
            o.step()
        for p, q in zip(m.parameters(), ref.parameters()):
            close(p, q)


def test_parameters_made_in_inference_mode_are_read_in_place():
    # inference tensors count no versions: a write could not be seen, so nothing is kept
    kiln.forget_weights()
    base = _native.pack_cache_bytes()
    with torch.inference_mode():
        m, x = model()
        c = torch.compile(m, backend=kiln.backend(pin_weights=True))
        for _ in range(3):
            close(c(x), m(x))
        assert _native.pack_cache_bytes() == base
        m[0].weight.mul_(2.0)
        close(c(x), m(x))
