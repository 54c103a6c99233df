"""Pinned weights (``kiln.backend(pin_weights=True)``, the default): kiln keeps packed copies
of parameters between calls (a Linear's ``wᵀ`` transposed once), reused while the parameter
keeps its storage and its ``_version``; every result still equals eager PyTorch's, after
optimizer steps, ``load_state_dict`` and new storages too."""

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
    c = torch.compile(m, backend=kiln.backend(pin_weights=False))
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


def test_the_backend_found_by_name_pins_by_default():
    kiln.forget_weights()
    base = _native.pack_cache_bytes()
    m, x = model()
    c = torch.compile(m, backend="kiln")
    with torch.no_grad():
        for _ in range(3):
            close(c(x), m(x))
        assert _native.pack_cache_bytes() - base >= (128 * 161 + 161 * 97) * 4


def test_default_training_with_a_torch_optimizer_between_calls_equals_eager():
    """AdamW steps the parameters in place between compiled calls (each step bumps their
    `_version`); the compiled forward of the next step must read the new values. The loss
    `sum(out * w)` moves with every output; gradients and parameters stay equal to eager."""
    torch.manual_seed(2)
    m, x = model()
    ref, _ = model()
    ref.load_state_dict(m.state_dict())
    w = torch.randn(301, 97)
    c = torch.compile(m, backend="kiln")
    opt = torch.optim.AdamW(m.parameters(), lr=0.01)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.01)
    for _ in range(4):
        for mod, o, f in ((m, opt, c), (ref, ref_opt, ref)):
            o.zero_grad()
            (f(x) * w).sum().backward()
            o.step()
        for p, q in zip(m.parameters(), ref.parameters()):
            # sums over 301 rows in another order: within 1e-4 of the gradient's size
            scale = q.grad.abs().max().item()
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4 * scale)
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(c(x), ref(x), rtol=1e-4, atol=1e-4)


def test_load_state_dict_and_new_storages_are_seen():
    kiln.forget_weights()
    m, x = model()
    c = torch.compile(m, backend="kiln")
    with torch.no_grad():
        for _ in range(3):
            close(c(x), m(x))
        # load_state_dict copies into the parameters under no_grad: _version moves
        other, _ = model()
        m.load_state_dict(other.state_dict())
        close(c(x), m(x))
        close(c(x), m(x))
        close(c(x), m(x))
        # a new storage bumps no version; the pin follows the storage
        m[0].weight.data = torch.randn(161, 128)
        close(c(x), m(x))
        close(c(x), m(x))
        close(c(x), m(x))


def test_a_pin_names_one_storage():
    """A parameter's pin key stays while its storage does and changes with a new storage
    (`p.data = t` bumps no version): kiln's copies are keyed by storage identity, held by a
    weak reference, so a new storage at a freed storage's address is never taken for it."""
    from kiln.backend import _pin_of

    p = nn.Parameter(torch.randn(5, 3))
    key, version = _pin_of(p, p.untyped_storage())
    assert _pin_of(p, p.untyped_storage()) == (key, version)
    with torch.no_grad():
        p.mul_(2.0)
    assert _pin_of(p, p.untyped_storage()) == (key, version + 1)
    p.data = torch.randn(5, 3)
    new_key, new_version = _pin_of(p, p.untyped_storage())
    assert new_key != key and new_version == version + 1
    assert _pin_of(torch.randn(3), torch.randn(3).untyped_storage()) is None
    kiln.forget_weights()
    assert _pin_of(p, p.untyped_storage())[0] not in (key, new_key)
