"""The harness the translator's tests share: capture the FX graphs torch.compile hands a
backend (aot_autograd with the core ATen decompositions), translate each to kiln IR, run it
on kiln (compiled ``cpu`` and kiln's ``eager`` kernels) on the inputs the graph really ran on,
and compare with torch running the same graph. ``conftest.py`` puts this folder on
``sys.path`` so each test module imports it as ``fx_harness``."""

from __future__ import annotations

import torch
from kiln import _native, fx_to_kir
from kiln.backend import _describe
from torch.utils.dlpack import from_dlpack

translate, node_support, Unsupported = (
    fx_to_kir.translate,
    fx_to_kir.node_support,
    fx_to_kir.Unsupported,
)

LOOSE = dict(rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


def capture(fn, *args, dynamic=False, backward=False, decompose=True):
    """[(gm, real inputs)] of every graph aot_autograd compiled and ran for `fn(*args)`
    (and for the backward of the sum of its outputs when `backward`); without `decompose`,
    aot_autograd keeps ATen's composite ops (`_softmax_backward_data`, ...)."""
    from functorch.compile import make_boxed_func
    from kiln.backend import decompositions
    from torch._dynamo.backends.common import aot_autograd

    captured = []

    def compiler(gm, example_inputs):
        def run(*inputs):
            captured.append((gm, [_snapshot(x) for x in inputs]))
            return gm(*inputs)

        return make_boxed_func(run)

    backend = aot_autograd(
        fw_compiler=compiler,
        bw_compiler=compiler,
        decompositions=decompositions() if decompose else None,
    )
    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)(*args)
    if backward:
        outs = out if isinstance(out, (tuple, list)) else (out,)
        sum(o.float().sum() for o in outs if o.requires_grad).backward()
    return captured


def _snapshot(x):
    return x.detach().clone() if isinstance(x, torch.Tensor) else x


def drop_none_outputs(gm):
    """Removes the None entries (gradients of inputs that need none) from a backward
    graph's outputs, as the glue does before translating; returns the kept positions."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = out.args[0]
    kept = [i for i, v in enumerate(values) if v is not None]
    out.args = (tuple(values[i] for i in kept),)
    gm.recompile()
    return kept


def run_kiln(tr, gm, inputs, backend):
    """Runs a Translation with the FX inputs `inputs` on kiln's `backend`; returns its
    outputs."""
    tensors = []
    for index in tr.placeholder_index:
        if index >= 0:
            tensors.append(inputs[index])
        else:
            tensors.append(fx_to_kir._fetch_attr(gm, tr.attr_targets[-1 - index]))
    try:
        graph = _native.compile(tr.kir, backend)
        return [from_dlpack(c) for c in graph([_describe(t) for t in tensors])]
    except _native.KilnError as e:
        raise AssertionError(f"kiln ({backend}) failed: {e}\n{tr.kir}") from e


def check_graphs(captured, backends=("cpu", "eager"), rtol=1e-5, atol=1e-6):
    """Translates and runs every captured graph; compares with torch running the graph."""
    assert captured, "nothing was compiled"
    for k, (gm, inputs) in enumerate(captured):
        drop_none_outputs(gm)
        want = gm(*inputs)
        want = [w.detach() for w in (want if isinstance(want, (tuple, list)) else (want,))]
        tr = translate(gm, f"g{k}")
        assert tr.output_count == len(want)
        for backend in backends:
            got = run_kiln(tr, gm, inputs, backend)
            for i, (g, w) in enumerate(zip(got, want)):
                torch.testing.assert_close(
                    g, w, rtol=rtol, atol=atol, equal_nan=True,
                    msg=lambda m: f"graph {k} output {i} on {backend}: {m}\n{tr.kir}",
                )


def check(fn, *args, backward=False, dynamic=False, decompose=True, **tol):
    captured = capture(fn, *args, backward=backward, dynamic=dynamic, decompose=decompose)
    check_graphs(captured, **tol)


def call_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def seeded_randn(*shape, seed=0):
    """Standard-normal floats of `shape` from a fixed seed."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def seeded_ints(*shape, lo=-3, hi=4, seed=0):
    """Integers in [lo, hi) of `shape` from a fixed seed."""
    return torch.randint(lo, hi, shape, generator=torch.Generator().manual_seed(seed))
