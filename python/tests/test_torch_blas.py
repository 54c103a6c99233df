"""kiln's matrix products run on torch's own BLAS (``_native.adopt_torch_blas``, called when
``kiln`` is imported: MKL's ``sgemm_``/``dgemm_`` from ``libtorch_cpu``): products with every
transposition of their operands, strided and batched ones, in float32 and float64, and a
convolution's forward and gradients through the backend equal eager PyTorch's (gradients
judged against a float64 run)."""

import os

import pytest
import torch
import torch.nn as nn

import kiln
from kiln import _native

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

LIBTORCH_CPU = os.path.join(torch.__path__[0], "lib", "libtorch_cpu.so")
MKL = torch.backends.mkl.is_available()


@pytest.mark.skipif(not MKL, reason="this torch has no MKL")
def test_torchs_blas_is_adopted_on_import():
    assert _native.adopt_torch_blas(LIBTORCH_CPU) is None  # adopted by `import kiln`


def test_a_library_not_loaded_is_not_opened():
    # the adoption on import stays; a path that is not loaded is never dlopen'ed
    why = _native.adopt_torch_blas("/nonexistent/libblas.so")
    assert why is None or "not loaded" in why


def operands(layout: str, m: int, k: int, n: int, dtype: torch.dtype):
    g = torch.Generator().manual_seed(11)
    a = torch.randn(m, k, generator=g, dtype=dtype)
    b = torch.randn(k, n, generator=g, dtype=dtype)
    if layout[0] == "t":
        a = a.t().contiguous().t()
    elif layout[0] == "s":  # a step-2 slice: neither stride is 1
        a = torch.randn(m, 2 * k, generator=g, dtype=dtype)[:, ::2]
    if layout[1] == "t":
        b = b.t().contiguous().t()
    return a, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt", "sn"])
@pytest.mark.parametrize("m,k,n", [(257, 131, 67), (3, 129, 5), (1000, 64, 33)])
def test_products_of_every_layout_equal_eager(layout, m, k, n, dtype):
    a, b = operands(layout, m, k, n, dtype)
    c = torch.compile(lambda a, b: torch.relu(a @ b), backend=kiln.backend())
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(c(a, b), torch.relu(a @ b), rtol=tol, atol=tol)


def test_batched_and_broadcast_products_equal_eager():
    g = torch.Generator().manual_seed(12)
    x = torch.randn(3, 7, 65, 33, generator=g)
    y = torch.randn(3, 7, 33, 40, generator=g).transpose(-1, -2).contiguous().transpose(-1, -2)
    w = torch.randn(33, 129, generator=g)
    c = torch.compile(lambda x, y, w: (x @ y, x @ w), backend=kiln.backend())
    for got, want in zip(c(x, y, w), (x @ y, x @ w)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_convolution_gradients_on_torchs_blas_equal_a_float64_run():
    def model(dtype):
        torch.manual_seed(4)
        return nn.Sequential(nn.Conv2d(5, 19, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(19, 23, 3, stride=2), nn.Flatten(),
                             nn.Linear(23 * 5 * 4, 31)).to(dtype)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(9, 5, 11, 10, generator=g)
    w = torch.randn(9, 31, generator=g)
    m, ref, eager = model(torch.float32), model(torch.float64), model(torch.float32)
    c = torch.compile(m, backend=kiln.backend())
    out = c(x)
    torch.testing.assert_close(out, eager(x), rtol=1e-5, atol=1e-5)
    (out * w).sum().backward()
    (ref(x.double()) * w.double()).sum().backward()
    (eager(x) * w).sum().backward()
    for (name, p), q, e in zip(m.named_parameters(), ref.parameters(), eager.parameters()):
        want = q.grad.float()
        bound = 4 * (e.grad - want).abs().max() + 1e-5 * want.abs().max()
        assert (p.grad - want).abs().max() <= bound, name
