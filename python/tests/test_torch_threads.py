"""kiln's parallel kernel work runs on torch's OpenMP team (``_native.adopt_torch_threads``,
called when ``kiln`` is imported): the results of jobs big enough to be shared across the
team (products, reductions, convolutions), called from the main thread and from others,
equal eager PyTorch's, and a training step's gradients equal a float64 run's."""

import threading

import pytest
import torch
import torch.nn as nn

import kiln
from kiln import _native

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

OPENMP = "parallel backend: OpenMP" in torch.__config__.parallel_info()


@pytest.mark.skipif(not OPENMP, reason="this torch is built without OpenMP")
def test_the_team_is_adopted_on_import():
    assert _native.adopt_torch_threads()  # adopted by `import kiln`: stays adopted


def model(dtype=torch.float32):
    torch.manual_seed(3)
    # odd sizes, each product and the convolution big enough to be split across threads
    return nn.Sequential(
        nn.Conv2d(3, 17, 3, padding=1), nn.GELU(), nn.Flatten(),
        nn.Linear(17 * 9 * 11, 301), nn.LayerNorm(301), nn.Linear(301, 97),
    ).to(dtype)


def inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(67, 3, 9, 11, generator=g, dtype=dtype)
    w = torch.randn(67, 97, generator=g, dtype=dtype)
    return x, w


def test_forward_on_the_team_equals_eager_from_the_main_thread_and_others():
    m = model().eval()
    x, _ = inputs()
    c = torch.compile(m, backend=kiln.backend())
    with torch.no_grad():
        want = m(x)
        torch.testing.assert_close(c(x), want, rtol=1e-5, atol=1e-5)
        got = []
        threads = [threading.Thread(target=lambda: got.append(c(x))) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(got) == 3
    for g in got:
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-5)


def test_training_gradients_on_the_team_equal_a_float64_run():
    x, w = inputs()
    m = model()
    ref = model(torch.float64)
    ref.load_state_dict({k: v.double() for k, v in m.state_dict().items()})
    c = torch.compile(m, backend=kiln.backend())
    (c(x) * w).sum().backward()
    (ref(x.double()) * w.double()).sum().backward()
    eager = model()
    eager.load_state_dict(m.state_dict())
    (eager(x) * w).sum().backward()
    for (name, p), q, e in zip(m.named_parameters(), ref.parameters(), eager.parameters()):
        want = q.grad.float()
        # kiln's error within a small multiple of eager float32's own, plus a floor
        bound = 4 * (e.grad - want).abs().max() + 1e-5 * want.abs().max()
        assert (p.grad - want).abs().max() <= bound, name
