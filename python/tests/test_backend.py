"""torch.compile(backend="kiln") end to end: the entry point, results and gradients equal to
eager PyTorch, training steps, partitions around unsupported ops, the zero-copy bridge, and
errors. Fixed seeds; odd sizes, size 1 and non-contiguous inputs."""

import copy
import gc
import threading
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounterWithBackend
from torch.utils.dlpack import from_dlpack

import kiln
from kiln import _native

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

F32 = dict(rtol=1e-5, atol=1e-6)
# matmuls and reductions: kiln's blocking and summation order differ from torch's
MM = dict(rtol=1e-4, atol=1e-5)


def test_the_backend_is_found_by_name():
    from torch._dynamo import list_backends

    assert "kiln" in list_backends()
    f = torch.compile(lambda x: torch.tanh(x) * 2 + 1, backend="kiln", fullgraph=True)
    x = torch.randn(7, 3)
    torch.testing.assert_close(f(x), torch.tanh(x) * 2 + 1, **F32)


@pytest.mark.parametrize("shape", [(1,), (7,), (5, 1), (3, 17, 5)])
def test_pointwise_chains_equal_eager_on_odd_sizes(shape):
    def f(x, y):
        return torch.sigmoid(x) * y - torch.exp(-x.abs()) / (1 + y * y)

    x, y = torch.randn(shape), torch.randn(shape)
    got = torch.compile(f, backend="kiln", fullgraph=True, dynamic=False)(x, y)
    torch.testing.assert_close(got, f(x, y), **F32)


def test_non_contiguous_inputs_are_read_with_their_strides():
    base = torch.randn(9, 12)
    x = base.t()[2:, 1:8]  # transposed, offset into the storage
    y = base[::2, ::3]
    assert not x.is_contiguous() and x.storage_offset() > 0

    def f(a, b):
        return (a * 2).sum(0) + b.sum()

    got = torch.compile(f, backend="kiln", fullgraph=True)(x, y)
    torch.testing.assert_close(got, f(x, y), **MM)


def test_dtypes_cross_both_ways():
    def f(x, i, b, h):
        return x * 2, i + 3, b & (x > 0), h * 2, (i > 1)

    x = torch.randn(6)
    i = torch.arange(6)
    b = torch.tensor([True, False, True, True, False, True])
    h = torch.randn(6, dtype=torch.float16)
    got = torch.compile(f, backend="kiln", fullgraph=True)(x, i, b, h)
    for g, e in zip(got, f(x, i, b, h)):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e)


def mlp(d_in=13, hidden=32, d_out=5):
    return nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, d_out))


def test_mlp_inference_and_gradients_equal_eager():
    m = mlp()
    ref = copy.deepcopy(m)
    x = torch.randn(11, 13)
    y = torch.randint(0, 5, (11,))
    cm = torch.compile(m, backend="kiln")
    loss = F.cross_entropy(cm(x), y)
    expect = F.cross_entropy(ref(x), y)
    torch.testing.assert_close(loss, expect, **MM)
    loss.backward()
    expect.backward()
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **MM, msg=name)


class Attention(nn.Module):
    """A pre-LN transformer block with causal attention."""

    def __init__(self, d=24, heads=3):
        super().__init__()
        self.h = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        split = lambda t: t.view(b, s, self.h, d // self.h).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        att = (q @ k.transpose(-2, -1)) / (d // self.h) ** 0.5
        att = att.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


@pytest.mark.parametrize("make, optimizer", [(Attention, "sgd"), (mlp, "sgd"), (mlp, "adamw")])
def test_training_steps_equal_eager(make, optimizer):
    """Three steps. AdamW is not run on the attention block: the gradient of the key
    projection's bias is zero in exact arithmetic (softmax ignores a shift along the keys),
    so both sides hold rounding noise there, which AdamW scales up to ±lr per step."""
    m = make()
    ref = copy.deepcopy(m)
    opts = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
            "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2)}
    opt, ref_opt = opts[optimizer](m.parameters()), opts[optimizer](ref.parameters())
    cm = torch.compile(m, backend="kiln")
    x = torch.randn(2, 5, 24) if make is Attention else torch.randn(9, 13)
    for _ in range(3):
        for model, o in ((cm, opt), (ref, ref_opt)):
            o.zero_grad()
            model(x).square().mean().backward()
            o.step()
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)


OPTIMIZERS = {
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False),
    "adamw-foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_compiled_optimizer_step_runs_through_kiln(name):
    m = mlp()
    ref = copy.deepcopy(m)
    opt, ref_opt = OPTIMIZERS[name](m.parameters()), OPTIMIZERS[name](ref.parameters())
    report = kiln.ExplainReport()
    step = torch.compile(opt.step, backend=kiln.backend(_report=report))
    x = torch.randn(4, 13)
    for _ in range(3):
        for model, o, s in ((m, opt, step), (ref, ref_opt, ref_opt.step)):
            o.zero_grad()
            model(x).sum().backward()
            s()
    # every op of the step (foreach ops, lerp, addcdiv, prims.fma included) ran in kiln
    assert report.graphs >= 1 and report.eager_nodes == 0, str(report)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, **MM)


def test_graph_counts_are_as_dynamo_makes_them():
    counter = CompileCounterWithBackend("kiln")

    def f(x):
        y = torch.relu(x) + 1
        print("a graph break")  # noqa: T201 - the break is the point
        return y * 2

    torch.compile(f, backend=counter)(torch.randn(3))
    assert counter.frame_count == 2

    counter = CompileCounterWithBackend("kiln")
    m = torch.compile(mlp(), backend=counter, fullgraph=True)
    m(torch.randn(2, 13))
    m(torch.randn(2, 13))  # same shapes: no recompile
    assert counter.frame_count == 1


def test_unsupported_ops_run_in_eager_and_explain_lists_them(caplog):
    def f(x):
        return torch.mode(x.exp(), 0).values * 2 + x.sin()

    x = torch.randn(6, 3)
    with caplog.at_level("INFO", logger="kiln"):
        got = torch.compile(f, backend="kiln", fullgraph=True)(x)
    torch.testing.assert_close(got, f(x), **F32)
    assert any("aten.mode" in r.getMessage() for r in caplog.records)

    report = kiln.explain(f, x)
    assert report.graphs == 1
    assert report.eager_nodes == 1 and report.kiln_nodes >= 4
    assert [op for op, _ in report.unsupported] == ["aten.mode.default"]
    assert "aten.mode" in str(report)


def test_outputs_have_eager_strides_and_eager_freshness():
    # kiln's IR is functional: `clone` is the identity and views are free, so its graph can
    # hand back an input itself, or a layout eager would not. The backend gives each output
    # the strides its FX metadata promises and copies an output that would alias an input
    # where eager's is fresh memory.
    base = torch.randn(6, 8)
    x = base[::2, 1::2]

    def f(a):
        return a.clone(), (a * 2).t(), a.contiguous()

    got = torch.compile(f, backend="kiln", fullgraph=True, dynamic=False)(x)
    want = f(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **F32)
        assert g.stride() == w.stride()
    before = base.clone()
    for g in got:
        g.add_(1)
    assert torch.equal(base, before), "an output shared memory with the input"


def test_eager_ops_after_a_kiln_partition_get_the_layout_promised():
    # regression: the partition before an eager `_embedding_bag_forward_only` was a lone
    # `clone(indices, contiguous)`; kiln returned the stride-2 indices themselves, which the
    # eager op read as contiguous (wrong bags, indices out of range)
    w = torch.randn(10, 5)
    idx = torch.tensor([1, 0, 2, 0, 3, 0, 4, 0, 9, 0])[::2]
    offsets = torch.tensor([0, 3])
    psw = torch.randn(5)

    def f(w, i, o, p):
        return F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p)

    got = torch.compile(f, backend="kiln", fullgraph=True, dynamic=False)(w, idx, offsets, psw)
    torch.testing.assert_close(got, f(w, idx, offsets, psw), **F32)


def test_complex_tensors_fall_back_with_a_reason():
    def f(x):
        return (x * 2).abs() + 1

    x = torch.randn(4, dtype=torch.complex64)
    got = torch.compile(f, backend="kiln")(x)
    torch.testing.assert_close(got, f(x))
    report = kiln.explain(f, x)
    assert report.eager_nodes >= 1 and report.unsupported


def test_backend_options():
    x = torch.randn(5, 4)
    for mode in (None, "max-autotune", "cranelift"):
        torch._dynamo.reset()
        f = torch.compile(lambda a: torch.tanh(a).sum(-1), backend=kiln.backend(mode=mode))
        torch.testing.assert_close(f(x), torch.tanh(x).sum(-1), **MM)
    with pytest.raises(ValueError, match="device"):
        kiln.backend(device="tpu")
    with pytest.raises(ValueError, match="mode"):
        kiln.backend(mode="fastest")


NATIVE_T = """graph @t(%x: f32[2,3]) -> (f32[3,2], f32[2,3]) {
  %0 = transpose %x {dim0 = 0, dim1 = 1} : f32[3,2]
  %1 = mul %x, 2.0 : f32[2,3]
  return %0, %1
}"""


@pytest.mark.parametrize("backend", ["cpu", "eager"])
def test_the_native_bridge_borrows_inputs_and_lends_outputs(backend):
    g = _native.compile(NATIVE_T, backend)
    base = torch.arange(12, dtype=torch.float32)
    x = base[3:9].view(2, 3)  # offset 3 into base's storage
    spec = (base.untyped_storage().data_ptr(), "f32", [2, 3], [3, 1], 3, 12, x, None)
    t, y = (from_dlpack(c) for c in g([spec]))
    torch.testing.assert_close(t, x.t())
    torch.testing.assert_close(y, x * 2)
    # the transpose is a view of the caller's memory: no copy either way
    assert t.data_ptr() == x.data_ptr() and t.stride() == (1, 3)
    # kiln holds the input while its view lives
    del x, base
    gc.collect()
    torch.testing.assert_close(t, torch.arange(3, 9, dtype=torch.float32).view(2, 3).t())


NATIVE_PERMUTED = """graph @p(%x: f32[37,70,4,4]) -> (f32[70,37,3,3], f32[37,70,4,4]) {
  %0 = exp %x : f32[37,70,4,4]
  %1 = permute %0 {dims = [1, 0, 2, 3]} : f32[70,37,4,4]
  %2 = slice %1 {dim = 2, start = 0, end = 3, step = 1} : f32[70,37,3,4]
  %3 = slice %2 {dim = 3, start = 0, end = 3, step = 1} : f32[70,37,3,3]
  return %3, %0
}"""


def _spec(x):
    return (x.untyped_storage().data_ptr(), "f32", list(x.shape), list(x.stride()),
            x.storage_offset(), x.untyped_storage().nbytes() // 4, x, None)


@pytest.mark.parametrize("backend", ["cpu", "eager"])
def test_outputs_come_back_with_the_strides_asked_for(backend):
    # a weight gradient's shape: a permuted, cut view of a kernel's output (kiln's view
    # without the request; a copy by kiln's runtime into the strides asked for with it)
    x = torch.randn(37, 70, 4, 4)
    want = x.exp().permute(1, 0, 2, 3)[:, :, :3, :3]
    view, _ = (from_dlpack(c) for c in _native.compile(NATIVE_PERMUTED, backend)([_spec(x)]))
    assert not view.is_contiguous()
    torch.testing.assert_close(view, want)
    row_major = [37 * 9, 9, 3, 1]
    # an attention output as eager lays it out: [b, h, s, d] strides over a [b, s, h, d]
    # buffer; and the full output in a channels-last layout
    permuted = [9, 70 * 9, 3, 1]
    channels_last = [70 * 16, 1, 4 * 70, 70]
    for asked in ({0: row_major}, {0: row_major, 1: [1120, 16, 4, 1]},
                  {0: permuted, 1: channels_last}):
        g = _native.compile(NATIVE_PERMUTED, backend, "auto", asked)
        first, full = (from_dlpack(c) for c in g([_spec(x)]))
        assert list(first.stride()) == asked[0]
        if 1 in asked:
            assert list(full.stride()) == asked[1]
        # a copy of the same values: bit for bit kiln's view's
        assert torch.equal(first, view)
        torch.testing.assert_close(full, x.exp())
    with pytest.raises(kiln.KilnError, match="output 2 of a graph of 2"):
        _native.compile(NATIVE_PERMUTED, backend, "auto", {2: row_major})
    with pytest.raises(kiln.KilnError, match="3 strides for output 0 of rank 4"):
        _native.compile(NATIVE_PERMUTED, backend, "auto", {0: [9, 3, 1]})
    with pytest.raises(kiln.KilnError, match="output 5 of a graph of 2"):
        _native.compile(NATIVE_PERMUTED, backend, "auto", {}, [5])


NATIVE_ALIASES = """graph @a(%x: f32[4,6]) -> (f32[6,4], f32[4,6], f32[4,6], f32[2,6], f32[4,6]) {
  %0 = transpose %x {dim0 = 0, dim1 = 1} : f32[6,4]
  %1 = mul %x, 2.0 : f32[4,6]
  %2 = slice %1 {dim = 0, start = 1, end = 3, step = 1} : f32[2,6]
  return %0, %x, %1, %2, %1
}"""


@pytest.mark.parametrize("backend", ["cpu", "eager"])
def test_fresh_outputs_never_share_memory_with_inputs_or_earlier_outputs(backend):
    base = torch.randn(4, 13)
    x = base[:, 2:8]  # a view in the middle of its storage
    want = [x.t(), x, x * 2, (x * 2)[1:3], x * 2]
    shared = [from_dlpack(c) for c in _native.compile(NATIVE_ALIASES, backend)([_spec(x)])]
    # without the request kiln hands back views: of the input, and of one buffer thrice
    assert shared[0].data_ptr() == x.data_ptr() and shared[1].data_ptr() == x.data_ptr()
    assert shared[2].data_ptr() == shared[4].data_ptr()
    g = _native.compile(NATIVE_ALIASES, backend, "auto", {}, [0, 1, 2, 3, 4])
    fresh = [from_dlpack(c) for c in g([_spec(x)])]
    for got, w in zip(fresh, want):
        assert torch.equal(got, w)
    # copies keep the order of kiln's strides, as torch.clone: a transpose stays one
    assert fresh[0].stride() == (1, 6)
    before = base.clone()
    for t in fresh:
        t.add_(1)
    assert torch.equal(base, before), "an output shared memory with the input"
    # the first use of the product is kiln's own buffer; the later ones are copies
    assert torch.equal(fresh[2], x * 2 + 1) and torch.equal(fresh[3], (x * 2)[1:3] + 1)
    assert torch.equal(fresh[4], x * 2 + 1)


def test_convolution_weight_gradients_equal_eager_in_eagers_layout():
    # stride 2: the weight gradient is cut from a larger correlation, then permuted
    torch.manual_seed(8)
    conv = torch.nn.Conv2d(19, 29, 3, stride=2, padding=1)
    ref = torch.nn.Conv2d(19, 29, 3, stride=2, padding=1).double()
    ref.load_state_dict({k: v.double() for k, v in conv.state_dict().items()})
    x = torch.randn(3, 19, 13, 11)
    c = torch.compile(conv, backend=kiln.backend())
    out = c(x)
    w = torch.randn(out.shape)
    (out * w).sum().backward()
    (ref(x.double()) * w.double()).sum().backward()
    assert conv.weight.grad.stride() == ref.weight.grad.stride()
    torch.testing.assert_close(conv.weight.grad, ref.weight.grad.float(), rtol=1e-5, atol=1e-5)


def test_native_errors_are_kiln_errors_naming_the_problem():
    with pytest.raises(kiln.KilnError, match="line"):
        _native.compile("graph @broken(%x: f32[2]) -> f32[2] { %0 = frobnicate %x : f32[2]\n return %0 }")
    g = _native.compile(NATIVE_T)
    x = torch.randn(4, 3)
    spec = (x.untyped_storage().data_ptr(), "f32", [4, 3], [3, 1], 0, 12, x, None)
    with pytest.raises(kiln.KilnError, match=r"f32\[2,3\]"):
        g([spec])
    # a layout reaching outside the storage is refused before anything reads it
    bad = (x.untyped_storage().data_ptr(), "f32", [2, 3], [3, 1], 8, 12, x, None)
    with pytest.raises(kiln.KilnError, match="outside"):
        g([bad])
    with pytest.raises(kiln.KilnError, match="outside"):
        g([bad[:7] + ((1 << 40, 0),)])  # pinned (pin_weights) the same
    with pytest.raises(kiln.KilnError, match="tier"):
        _native.compile(NATIVE_T, "cpu", "fastest")


def test_c_tier_swap_ages_say_when_kernels_moved_to_c_code():
    # max-autotune builds each kernel with the C compiler at its first call, which waits
    before = time.perf_counter()
    f = torch.compile(lambda a: torch.tanh(a * 1.375).sum(1),
                      backend=kiln.backend(mode="max-autotune"), fullgraph=True)
    x = torch.randn(37, 129)
    torch.testing.assert_close(f(x), torch.tanh(x * 1.375).sum(1))
    elapsed = time.perf_counter() - before
    ages = _native.c_tier_swap_ages()
    # this test's kernel moved within its run (other tests' kernels moved earlier)
    assert any(0.0 <= a <= elapsed for a in ages), (ages, elapsed)
    assert all(a >= 0.0 for a in ages)


def test_calls_from_several_threads():
    f = torch.compile(lambda a: (a * a).sum(1), backend="kiln", fullgraph=True)
    xs = [torch.randn(64, 33) for _ in range(4)]
    f(xs[0])
    results = [None] * 4

    def work(i):
        results[i] = f(xs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, r in zip(xs, results):
        torch.testing.assert_close(r, (x * x).sum(1), **MM)


def test_each_graph_is_named_for_its_pass(monkeypatch):
    # a profile's kernel table and kiln's logs name kernels by plan: the forward's and the
    # backward's must not share one name (KILN_PROFILE merged their same-numbered kernels)
    import importlib
    backend_module = importlib.import_module("kiln.backend")
    names = []
    real = backend_module._KilnGraph.__init__

    def record(self, gm, tr, *args, **kwargs):
        names.append(tr.kir.split("graph @", 1)[1].split("(", 1)[0])
        real(self, gm, tr, *args, **kwargs)

    monkeypatch.setattr(backend_module._KilnGraph, "__init__", record)
    torch._dynamo.reset()
    lin = nn.Linear(5, 3)
    f = torch.compile(lambda x: torch.tanh(lin(x)), backend=kiln.backend())
    x = torch.randn(4, 5)
    f(x).sum().backward()
    assert names == ["forward0", "backward0"]
    # a graph with an op kiln leaves to eager is compiled in named partitions
    names.clear()
    torch._dynamo.reset()
    g = torch.compile(lambda x: (x * 2).abs() + 1, backend=kiln.backend())
    g(torch.randn(4, dtype=torch.complex64))
    assert names and all(n.startswith("forward0_p") for n in names), names


def test_memory_stats_count_kiln_tensors_and_empty_cache_returns_cached_blocks():
    # kiln's own counters, as torch's memory_stats names them: a compiled output of 4 MiB
    # is counted while it lives, its block is cached when it dies, and empty_cache returns
    # the cache to the system
    def f(x):
        return torch.exp(x) * 2.0

    x = torch.randn(1024, 1024)
    compiled = torch.compile(f, backend="kiln")
    compiled(x)
    _native.empty_cache()
    before = _native.memory_stats()
    _native.reset_peak_memory_stats()
    out = compiled(x)
    torch.testing.assert_close(out, f(x), rtol=1e-5, atol=1e-6)
    live = _native.memory_stats()
    assert live["allocated_bytes"] >= before["allocated_bytes"] + out.numel() * 4
    assert live["peak_allocated_bytes"] >= live["allocated_bytes"]
    assert live["reserved_bytes"] >= live["allocated_bytes"]
    del out
    gc.collect()
    cached = _native.memory_stats()
    assert cached["allocated_bytes"] <= live["allocated_bytes"] - 1024 * 1024 * 4
    assert cached["reserved_bytes"] == live["reserved_bytes"]
    _native.empty_cache()
    assert _native.memory_stats()["reserved_bytes"] <= cached["reserved_bytes"] - 1024 * 1024 * 4


def test_a_backward_lets_go_of_saved_activations_after_their_last_reader():
    # eager's autograd frees each saved activation once its node has run; kiln's backward
    # graph takes them all as inputs, and lets go of each after the last kernel reading it
    # (aot_autograd clears its list of arguments, and kiln empties its own), so the backward
    # grows by less than its gradients. Eight 512x1024 tanh layers: 2 MiB activations,
    # 4 MiB weight gradients
    from kiln.accuracy import judge

    torch.manual_seed(0)
    width, batch, depth = 1024, 512, 8
    model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.Tanh())])
    eager, model64 = copy.deepcopy(model), copy.deepcopy(model).double()
    x, w = torch.randn(batch, width), torch.randn(batch, width)
    compiled = torch.compile(model, backend="kiln")
    (compiled(x) * w).sum().backward()  # compiles the forward and the backward
    model.zero_grad(set_to_none=True)
    loss = (compiled(x) * w).sum()
    gc.collect()
    before = _native.memory_stats()["allocated_bytes"]
    _native.reset_peak_memory_stats()
    loss.backward()
    grew = _native.memory_stats()["peak_allocated_bytes"] - before
    grads = sum(p.grad.numel() * 4 for p in model.parameters())
    saved = depth * batch * width * 4
    assert grew < grads - saved // 2, f"grew {grew >> 20} MiB for {grads >> 20} MiB of gradients"
    # and the gradients are right, judged against a float64 eager run
    (eager(x) * w).sum().backward()
    (model64(x.double()) * w.double()).sum().backward()
    for (name, p), p32, p64 in zip(model.named_parameters(), eager.parameters(),
                                   model64.parameters()):
        verdict = judge(name, p.grad, p32.grad, p64.grad)
        assert verdict.ok, verdict
