"""PyTorch's OpInfo database as kiln's coverage measure.

Every entry of ``torch.testing._internal.common_methods_invocations.op_db`` (it ships in the
torch wheel) is run through ``torch.compile(fn, backend=kiln.backend(...), fullgraph=True,
dynamic=False)`` on each of its CPU sample inputs, for each requested dtype the op supports,
and compared with eager PyTorch. Each sample runs in three kinds:

* ``forward``: the sample as OpInfo gives it, then its non-contiguous variant
  (``sample.noncontiguous()``);
* ``backward`` (ops with ``supports_autograd``, floating dtypes): the sample with
  ``requires_grad=True``; the outputs (``output_process_fn_grad`` applied) and the gradients of
  every input that requires one, for a seeded random cotangent, are compared with eager's.

Dynamo is reset before every sample. Each sample is classified as

* ``pass``: equal to eager (``torch.testing.assert_close`` at :data:`TOLERANCES`, or a
  :data:`TOLERANCE_OVERRIDES` entry; or, where they differ by more, no farther than eager
  from the sample computed in float64, see :func:`_closer_to_f64`), and every FX op node
  ran in kiln;
* ``fallback``: equal to eager, but some nodes ran in eager PyTorch (kiln does not support
  them; the reason is the backend's ``ExplainReport.unsupported``);
* ``fail``: values (or dtypes, shapes) differ from eager, or kiln raised;
* ``skip``: the sample is unusable: eager PyTorch raises on it, the output is not
  deterministic, or compiling fails (or differs from eager) without kiln too (Dynamo with
  ``backend="eager"``, or aot_autograd with the core ATen decompositions and no kiln), each
  with its reason.

An op (for one dtype and kind) is ``pass`` when all its samples pass (skipped ones aside, at
least one passing), ``fail`` when any sample fails, else ``fallback`` when any falls back,
else ``skip``. Each op has a time budget (:data:`OP_BUDGET_S`): the samples left when it is
spent are not run (counted as ``skip``). A hard per-op timeout is enforced by running the
ops in a worker process (:class:`Worker`), replaced when an op overruns (``fail``).

``python -m kiln.opinfo --dtypes float32 --out python/OPINFO.md --json /tmp/opinfo.json``
runs a sweep and writes the table; ``--help`` lists the options (a subset of ops, backward
on or off, budgets, the expected-status file of ``tests/test_opinfo.py``).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import math
import multiprocessing
import re
import sys
import time
import warnings
from typing import Any, Callable, Iterable, Optional, Sequence

import torch
import torch.utils._pytree as pytree

from .backend import ExplainReport, backend as kiln_backend

__all__ = [
    "DTYPES", "TOLERANCES", "TOLERANCE_OVERRIDES", "STORAGE_OPS", "OP_BUDGET_S", "SampleResult",
    "OpResult", "CONFIGS", "op_entries", "op_key", "run_op", "Worker", "jobs", "sweep",
    "markdown_table", "expected_statuses",
]

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "bool": torch.bool,
}
"""The dtypes a sweep may cover, by the names the table and the CLI use."""

TOLERANCES = {
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.int64: (0.0, 0.0),
    torch.bool: (0.0, 0.0),
}
"""(rtol, atol) per sample dtype: ``torch.testing.assert_close``'s defaults. The exact
integer and bool tolerances apply to integer and bool results; a floating-point result of
an integer sample (``lgamma`` of int64) is compared at its own dtype's default."""

TOLERANCE_OVERRIDES: dict[str, dict[torch.dtype, tuple[float, float]]] = {}
"""Per-op (rtol, atol) where kiln's vectorised math legitimately differs from torch's
kernels by a few ulps: op key → dtype → tolerance. Each entry says why."""

UNDEFINED_VALUES = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                    "new_empty_strided"}
"""Ops whose values are uninitialised memory: only their outputs' dtypes and shapes are
compared."""

STORAGE_OPS = {"as_strided", "as_strided.partial_views", "as_strided_copy",
               "as_strided_scatter"}
"""Ops that address their input's storage rather than its elements: their non-contiguous
variants (``sample.noncontiguous()``, the elements spaced out in a bigger storage whose gaps
hold a sentinel "that won't be accessed", as PyTorch's helper says) read those gaps, so the
values are not the sample's; OpInfo's own ``test_noncontiguous_samples`` skips them too. Only
their contiguous samples run."""

OP_BUDGET_S = 60.0
"""Seconds of samples per op, dtype and kind; the samples left when it is spent are skipped."""

CONFIGS = {
    "ci": {"dtypes": ["float32"], "max_samples": 1, "backward": False},
    "float32": {"dtypes": ["float32"], "max_samples": None, "backward": True},
    "full": {"dtypes": list(DTYPES), "max_samples": None, "backward": True},
}
"""Sweep presets (forward samples with their non-contiguous variants in all): ``ci`` is
sized for CI (each op's first float32 sample, forward: about 7 minutes on 2 cores, where a
compiled sample takes 0.2 to 0.6 s; with backward it would be about twice that),
``float32`` is every float32 sample, forward and backward (the issue's measure; about an
hour on 2 cores), ``full`` is every sample of every dtype, forward and backward.
``tests/opinfo_expected.json`` holds the expected statuses per preset."""

STATUSES = ("pass", "fallback", "fail", "skip")
KINDS = ("forward", "backward")


@dataclasses.dataclass
class SampleResult:
    """One sample of one op, dtype and kind."""

    index: int
    """The sample's position in ``op.sample_inputs``."""
    variant: str
    """``"contiguous"`` or ``"noncontiguous"``."""
    status: str
    reason: str = ""


@dataclasses.dataclass
class OpResult:
    """All samples of one op for one dtype and kind."""

    op: str
    dtype: str
    kind: str
    status: str
    samples: list[SampleResult] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        c = collections.Counter(s.status for s in self.samples)
        return {k: c.get(k, 0) for k in STATUSES}

    @property
    def reason(self) -> str:
        """The first reason of the samples that decided the op's status."""
        for s in self.samples:
            if s.status == self.status and s.reason:
                return s.reason
        return ""

    def to_json(self) -> dict:
        return {"op": self.op, "dtype": self.dtype, "kind": self.kind, "status": self.status,
                "seconds": round(self.seconds, 2), "counts": self.counts,
                "samples": [dataclasses.asdict(s) for s in self.samples]}

    @staticmethod
    def from_json(d: dict) -> "OpResult":
        return OpResult(d["op"], d["dtype"], d["kind"], d["status"],
                        [SampleResult(**s) for s in d["samples"]], d.get("seconds", 0.0))


def _op_status(samples: Sequence[SampleResult]) -> str:
    statuses = {s.status for s in samples}
    for st in ("fail", "fallback", "pass"):
        if st in statuses:
            return st
    return "skip"


# ---------------------------------------------------------------------------------------
# The op database
# ---------------------------------------------------------------------------------------


def op_key(op: Any) -> str:
    """``name`` or ``name.variant_test_name``: unique over op_db."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def op_entries() -> dict[str, Any]:
    """op_db by :func:`op_key`, in op_db's order."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {op_key(op): op for op in op_db}


def _supports(op: Any, dtype: torch.dtype) -> bool:
    return dtype in op.supported_dtypes("cpu")


# ---------------------------------------------------------------------------------------
# Running one sample
# ---------------------------------------------------------------------------------------


def _short(e: BaseException | str, limit: int = 160) -> str:
    """An exception (or message) on one line: its type and first meaningful line."""
    if isinstance(e, BaseException):
        inner = e
        # Dynamo wraps the backend's exception; the inner one is the informative one
        while getattr(inner, "inner_exception", None) is not None:
            inner = inner.inner_exception
        text = str(inner).strip()
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        first = lines[0] if lines else ""
        text = f"{type(inner).__name__}: {first}" if first else type(inner).__name__
    else:
        text = e
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"0x[0-9a-f]+", "0x…", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Call:
    """An OpInfo sample as a function of its tensors: ``fn(*tensors)`` rebuilds the sample's
    ``(input, args, kwargs)`` with the given tensors in place of the sample's and calls the
    op, so the tensors reach the compiled graph as inputs rather than constants."""

    def __init__(self, op: Any, sample: Any, output_fn: Optional[Callable] = None):
        leaves, self.spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        self.positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        self.tensors = [leaves[i] for i in self.positions]
        self.leaves = leaves
        self.op = op.op
        self.name = op.name
        self.output_fn = output_fn or (lambda out: out)

    def fresh(self, requires_grad: bool = False, f64: bool = False) -> list[torch.Tensor]:
        """Copies of the sample's tensors (same strides), requiring grad where the sample's
        do when ``requires_grad``; with ``f64``, the floating ones widened to float64."""
        out = []
        for t in self.tensors:
            dtype = torch.float64 if f64 and t.dtype.is_floating_point else t.dtype
            c = torch.empty_strided(t.shape, t.stride(), dtype=dtype)
            c.copy_(t.detach())
            if requires_grad and t.requires_grad:
                c.requires_grad_(True)
            out.append(c)
        return out

    def fn(self) -> Callable:
        leaves, positions, spec, op, output_fn = (
            list(self.leaves), self.positions, self.spec, self.op, self.output_fn)

        def call(*tensors):
            for p, t in zip(positions, tensors):
                leaves[p] = t
            x, args, kwargs = pytree.tree_unflatten(leaves, spec)
            return output_fn(op(x, *args, **kwargs))

        return call


def _metadata(v: Any) -> Any:
    return (v.dtype, tuple(v.shape)) if isinstance(v, torch.Tensor) else v


def _compare(actual: Any, expected: Any, rtol: float, atol: float) -> Optional[str]:
    """None when equal (tensors within tolerance, NaNs equal, same dtypes and shapes), else
    why not."""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    if a_spec != e_spec:
        return f"output structure {a_spec} differs from eager's {e_spec}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"output {i}: {type(a).__name__}, eager gives a tensor"
            rt, at = rtol, atol
            if e.dtype.is_floating_point and rtol == 0 and atol == 0:
                # a float result of an integer or bool sample: its own dtype's default
                rt, at = TOLERANCES.get(e.dtype, (1e-7, 1e-7))  # (f64: assert_close's)
            try:
                torch.testing.assert_close(a.detach(), e.detach(), rtol=rt, atol=at,
                                           equal_nan=True, check_device=True,
                                           check_layout=False, check_stride=False)
            except AssertionError as err:
                lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
                return f"output {i}: " + "; ".join(lines[:4])
        elif a != e and not (isinstance(e, float) and math.isnan(e) and math.isnan(a)):
            return f"output {i}: {a!r}, eager gives {e!r}"
    return None


def _grad_outputs(out: Any) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The differentiable output tensors and seeded random cotangents for them."""
    outs = [t for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.requires_grad and t.dtype.is_floating_point]
    g = torch.Generator().manual_seed(1234)
    cots = [torch.randn(t.shape, generator=g, dtype=torch.float32).to(t.dtype) for t in outs]
    return outs, cots


def _run(call: _Call, fn: Callable, backward: bool, f64: bool = False) -> Any:
    """``fn`` on fresh copies of the sample's tensors (floating ones widened to float64 with
    ``f64``): its output, and with ``backward`` the gradients of the inputs that require
    grad (None where unused)."""
    tensors = call.fresh(requires_grad=backward, f64=f64)
    torch.manual_seed(0)
    out = fn(*tensors)
    if not backward:
        return out
    outs, cots = _grad_outputs(out)
    wrt = [t for t in tensors if t.requires_grad]
    if not outs or not wrt:
        raise _Unusable("no differentiable output or input")
    grads = torch.autograd.grad(outs, wrt, cots, allow_unused=True)
    return out, list(grads)


ARBITER_MAX_ERROR = 100.0
"""The largest error, in units of the tolerance, eager's result may have against the float64
run for :func:`_closer_to_f64` to judge a mismatch by it."""


def _closer_to_f64(call: _Call, fn: Callable, backward: bool, actual: Any, expected: Any,
                   rtol: float, atol: float) -> Optional[str]:
    """When kiln's result and eager's differ by more than the tolerance, the arbiter PyTorch's
    own compiled-vs-eager accuracy checks use (``torch._dynamo.utils.same`` with an
    ``fp64_ref``), at its strictest: the sample run eagerly with its floating tensors in
    float64 is the truth, and kiln passes when, in every floating output, its largest error
    against the truth, in units of the tolerance (``|x - truth| / (atol + rtol·|truth|)``),
    is no larger than eager's own (PyTorch's multiplier is 2), and eager's is at most
    :data:`ARBITER_MAX_ERROR` (the float64 run is a faithful truth only for rounding, not
    where, say, random draws differ by dtype). Everything else must be equal: structure,
    dtypes, shapes, non-float values, and where either result is not finite. A sum whose
    terms cancel (``addbmm`` of values up to 9) is where kiln's order of additions and
    eager's both stray from the truth. Returns why kiln passed, or None."""
    try:
        truth = _run(call, fn, backward, f64=True)
    except Exception:  # noqa: BLE001 - the op has no float64 form: no arbiter
        return None
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    t_leaves, t_spec = pytree.tree_flatten(truth)
    if not (a_spec == e_spec == t_spec):
        return None
    worst = (0.0, 0.0)
    for a, e, t in zip(a_leaves, e_leaves, t_leaves):
        if not isinstance(e, torch.Tensor):
            if a != e and not (isinstance(e, float) and math.isnan(e) and math.isnan(a)):
                return None
            continue
        if not isinstance(a, torch.Tensor) or not isinstance(t, torch.Tensor):
            return None
        if a.dtype != e.dtype or a.shape != e.shape or t.shape != e.shape:
            return None
        if not e.dtype.is_floating_point:
            if not torch.equal(a, e):
                return None
            continue
        a64, e64, t64 = (x.detach().to(torch.float64) for x in (a, e, t))
        finite = torch.isfinite(e64)
        if not torch.equal(finite, torch.isfinite(a64)):
            return None
        if not torch.equal(a64[~finite].nan_to_num(0.5), e64[~finite].nan_to_num(0.5)):
            return None
        finite &= torch.isfinite(t64)
        if not finite.any():
            continue
        scale = atol + rtol * t64[finite].abs()
        err_a = ((a64[finite] - t64[finite]).abs() / scale).max().item()
        err_e = ((e64[finite] - t64[finite]).abs() / scale).max().item()
        if not (err_a <= err_e <= ARBITER_MAX_ERROR):
            return None
        worst = max(worst, (err_a, err_e))
    return (f"closer to float64 than eager: largest error {worst[0]:.3g}x the tolerance, "
            f"eager's {worst[1]:.3g}x")


class _Unusable(Exception):
    """The sample cannot be compared (said why)."""


def _compile(fn: Callable, backend: Any) -> Callable:
    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)


def _aot_eager() -> Any:
    """aot_autograd with the core ATen decompositions, as kiln's backend, running the
    graphs in eager PyTorch."""
    from functorch.compile import make_boxed_func
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    def compiler(gm, example_inputs):
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                        decompositions=core_aten_decompositions())


def _fallback_reason(report: Any) -> str:
    items = [f"{op}: {reason}".removeprefix("aten.") for (op, reason), _ in
             report.unsupported.most_common(3)]
    return "; ".join(items) or f"{report.eager_nodes} node(s) ran in eager PyTorch"


def run_sample(call: _Call, dtype: torch.dtype, backward: bool,
               tol: tuple[float, float]) -> tuple[str, str]:
    """Classifies one sample (see the module docstring): (status, reason)."""
    fn = call.fn()
    try:
        expected = _run(call, fn, backward)
    except _Unusable as e:
        return "skip", str(e)
    except Exception as e:  # noqa: BLE001 - eager's own refusal of the sample
        return "skip", "eager: " + _short(e)
    torch._dynamo.reset()
    report = ExplainReport()
    try:
        actual = _run(call, _compile(fn, kiln_backend(_report=report)), backward)
    except Exception as e:  # noqa: BLE001
        return _blame(call, fn, backward, e)
    finally:
        torch._dynamo.reset()
    rtol, atol = tol
    if call.name in UNDEFINED_VALUES:
        actual, expected = (pytree.tree_map(_metadata, v) for v in (actual, expected))
    diff = _compare(actual, expected, rtol, atol)
    arbiter = ""
    if diff is not None:
        again = _run(call, fn, backward)
        if _compare(again, expected, rtol, atol) is not None:
            return "skip", "eager is not deterministic"
        if call.name not in UNDEFINED_VALUES:
            arbiter = _closer_to_f64(call, fn, backward, actual, expected, rtol, atol) or ""
    if diff is not None and not arbiter:
        torch._dynamo.reset()
        try:
            decomposed = _compare(_run(call, _compile(fn, _aot_eager()), backward), expected,
                                  rtol, atol)
        finally:
            torch._dynamo.reset()
        if decomposed is not None:
            return "skip", "aot_autograd without kiln differs too: " + _short(decomposed)
        where = "" if not report.eager_nodes else " (with fallback: " + _fallback_reason(
            report) + ")"
        return "fail", "mismatch: " + _short(diff, 240) + where
    if report.eager_nodes:
        return "fallback", _fallback_reason(report)
    return "pass", arbiter


def _blame(call: _Call, fn: Callable, backward: bool, err: Exception) -> tuple[str, str]:
    """A compiled run raised: ``skip`` when Dynamo (backend "eager") or aot_autograd without
    kiln raise too, else ``fail``."""
    for name, backend in (("dynamo", "eager"), ("aot_autograd", _aot_eager())):
        torch._dynamo.reset()
        try:
            _run(call, _compile(fn, backend), backward)
        except Exception as e:  # noqa: BLE001
            return "skip", f"{name} fails without kiln: " + _short(e)
        finally:
            torch._dynamo.reset()
    return "fail", "kiln: " + _short(err)


def run_op(op: Any, dtype: torch.dtype, kind: str, *, noncontiguous: bool = True,
           budget_s: float = OP_BUDGET_S, max_samples: Optional[int] = None) -> OpResult:
    """Runs every sample of ``op`` at ``dtype`` in ``kind`` (``"forward"`` or
    ``"backward"``) through kiln and classifies it (see the module docstring)."""
    key, name = op_key(op), _dtype_name(dtype)
    start = time.monotonic()
    tol = TOLERANCE_OVERRIDES.get(key, {}).get(dtype, TOLERANCES[dtype])
    backward = kind == "backward"
    results: list[SampleResult] = []
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=backward))
    except Exception as e:  # noqa: BLE001
        return OpResult(key, name, kind, "skip",
                        [SampleResult(-1, "contiguous", "skip", "sample_inputs: " + _short(e))])
    if max_samples is not None:
        samples = samples[:max_samples]
    for i, sample in enumerate(samples):
        variants = [("contiguous", sample)]
        if noncontiguous and not backward:
            variants.append(("noncontiguous", None))
        for variant, s in variants:
            if variant == "noncontiguous" and key in STORAGE_OPS:
                results.append(SampleResult(i, variant, "skip", "reads its storage's gaps "
                                            "(STORAGE_OPS)"))
                continue
            if time.monotonic() - start > budget_s:
                results.append(SampleResult(i, variant, "skip", "op time budget spent"))
                continue
            try:
                if s is None:
                    s = sample.noncontiguous()
                output_fn = sample.output_process_fn_grad if backward else None
                status, reason = run_sample(_Call(op, s, output_fn), dtype, backward, tol)
            except Exception as e:  # noqa: BLE001 - the harness must go on
                status, reason = "skip", "harness: " + _short(e)
            results.append(SampleResult(i, variant, status, reason))
    return OpResult(key, name, kind, _op_status(results), results,
                    time.monotonic() - start)


def _dtype_name(dtype: torch.dtype) -> str:
    return next(k for k, v in DTYPES.items() if v == dtype)


def _quiet() -> None:
    """Silences the per-sample logging and warnings of a sweep."""
    warnings.filterwarnings("ignore")
    for name in ("kiln", "torch._dynamo", "torch._functorch", "torch.fx"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------
# A worker process, so that an op that hangs cannot stall the sweep
# ---------------------------------------------------------------------------------------


def _serve(conn: Any) -> None:
    _quiet()
    entries = op_entries()
    while True:
        job = conn.recv()
        if job is None:
            return
        key, dtype, kind, opts = job
        res = run_op(entries[key], DTYPES[dtype], kind, **opts)
        conn.send(res.to_json())


class Worker:
    """A process running ops on request (``run``), replaced when one overruns its timeout."""

    def __init__(self) -> None:
        self.proc = None
        self.conn = None

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True)
        self.proc.start()

    def run(self, key: str, dtype: str, kind: str, timeout_s: float, **opts: Any) -> OpResult:
        """:func:`run_op` of op ``key`` in the worker; after ``timeout_s`` seconds the worker
        is killed and the op is a ``fail`` ("timeout")."""
        if self.proc is None or not self.proc.is_alive():
            self._start()
        start = time.monotonic()
        self.conn.send((key, dtype, kind, opts))
        # the first job also waits for the worker's imports
        if self.conn.poll(timeout_s):
            try:
                return OpResult.from_json(self.conn.recv())
            except EOFError:
                pass
        crashed = self.proc.is_alive() is False
        self.close(kill=True)
        why = "the worker process died" if crashed else f"timeout after {timeout_s:.0f} s"
        return OpResult(key, dtype, kind, "fail", [SampleResult(-1, "contiguous", "fail", why)],
                        time.monotonic() - start)

    def close(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.proc = self.conn = None


def jobs(keys: Iterable[str], dtypes: Sequence[str], backward: bool) -> list[tuple]:
    """(op key, dtype, kind) for each requested op, dtype the op supports, and kind
    (backward only for ops with ``supports_autograd`` at floating dtypes)."""
    entries = op_entries()
    out = []
    for key in keys:
        op = entries[key]
        for d in dtypes:
            if not _supports(op, DTYPES[d]):
                continue
            out.append((key, d, "forward"))
            if backward and op.supports_autograd and DTYPES[d].is_floating_point:
                out.append((key, d, "backward"))
    return out


def sweep(job_list: Sequence[tuple], *, timeout_s: float, progress: bool = True,
          **opts: Any) -> list[OpResult]:
    """Runs the jobs (see :func:`jobs`) in a :class:`Worker`."""
    worker = Worker()
    results = []
    t0 = time.monotonic()
    try:
        for n, (key, dtype, kind) in enumerate(job_list):
            res = worker.run(key, dtype, kind, timeout_s + (30 if n == 0 else 0), **opts)
            results.append(res)
            if progress:
                print(f"[{n + 1}/{len(job_list)} {time.monotonic() - t0:6.0f}s] {key} {dtype} "
                      f"{kind}: {res.status} {res.counts} {res.seconds:.1f}s"
                      + (f"  {res.reason[:100]}" if res.status != "pass" else ""),
                      file=sys.stderr, flush=True)
    finally:
        worker.close()
    return results


# ---------------------------------------------------------------------------------------
# The table and the expected statuses
# ---------------------------------------------------------------------------------------


def expected_statuses(results: Iterable[OpResult]) -> dict:
    """``{dtype: {op: {kind: status}}}``, the form of a section of
    ``tests/opinfo_expected.json``."""
    out: dict = {}
    for r in results:
        out.setdefault(r.dtype, {}).setdefault(r.op, {})[r.kind] = r.status
    return {d: dict(sorted(ops.items())) for d, ops in out.items()}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(results: Sequence[OpResult], seconds: Optional[float] = None,
                   settings: str = "") -> str:
    """The committed table: per dtype and kind, ops and samples passing / falling back /
    failing / skipped; then one row per op with its statuses and first reason."""
    by = collections.defaultdict(dict)
    for r in results:
        by[(r.op, r.dtype)][r.kind] = r
    dtypes = [d for d in DTYPES if any(r.dtype == d for r in results)]
    lines = [
        "# kiln on PyTorch's OpInfo database",
        "",
        "Generated by `python -m kiln.opinfo` (see `python/kiln/opinfo.py` for the method and",
        "the statuses): every `op_db` entry, each CPU sample and its non-contiguous variant",
        "(forward) and the sample with `requires_grad` (backward: outputs and input gradients),",
        "compiled with `torch.compile(backend=kiln, fullgraph=True, dynamic=False)` and",
        "compared with eager PyTorch. `pass`: equal and every node ran in kiln; `fallback`:",
        "equal, some nodes ran in eager PyTorch; `fail`: wrong values or a kiln error; `skip`:",
        "eager or Dynamo/aot_autograd without kiln refuse the sample. An op passes when all",
        "its samples pass.",
        "",
        f"torch {torch.__version__}" + (f"; {settings}" if settings else "")
        + (f"; sweep time {seconds / 60:.1f} min (2 cores)" if seconds else ""),
        "",
        "## Summary",
        "",
        "| dtype | kind | ops | pass | fallback | fail | skip | pass % | samples | pass | "
        "fallback | fail | skip |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in dtypes:
        for kind in KINDS:
            rs = [r for r in results if r.dtype == d and r.kind == kind]
            if not rs:
                continue
            ops = collections.Counter(r.status for r in rs)
            samples = collections.Counter(s.status for r in rs for s in r.samples)
            pct = 100 * ops["pass"] / len(rs)
            lines.append(
                f"| {d} | {kind} | {len(rs)} | " + " | ".join(str(ops[s]) for s in STATUSES)
                + f" | {pct:.1f} | {sum(samples.values())} | "
                + " | ".join(str(samples[s]) for s in STATUSES) + " |")
    lines += ["", "`ops`: op_db entries with a sample at that dtype; `pass %`: of them.", ""]
    budget = [r for r in results if any(x.reason == "op time budget spent" for x in r.samples)]
    if budget:
        n = sum(x.reason == "op time budget spent" for r in budget for x in r.samples)
        lines += [f"Not run, the op's {OP_BUDGET_S:.0f} s budget spent: {n} samples of "
                  f"{len(budget)} ops and kinds ("
                  + ", ".join(sorted({f"{r.op} {r.kind}" for r in budget})) + ").", ""]
    arbitrated = [(r, x) for r in results for x in r.samples
                  if x.status == "pass" and x.reason.startswith("closer to float64")]
    if arbitrated:
        lines += [f"Passed by the float64 arbiter (kiln and eager differ by more than the "
                  f"tolerance, kiln no farther from the float64 result): {len(arbitrated)} "
                  "samples of " + ", ".join(sorted({f"{r.op} {r.kind}"
                                                    for r, _ in arbitrated})) + ".", ""]
    reasons = collections.Counter()
    for r in results:
        if r.status in ("fail", "fallback"):
            reasons[(r.status, _group(r.reason))] += 1
    if reasons:
        lines += ["## Most common reasons (ops, all dtypes and kinds)", "",
                  "| ops | status | reason |", "|---|---|---|"]
        for (st, why), n in reasons.most_common(30):
            lines.append(f"| {n} | {st} | {_cell(why)} |")
        lines.append("")
    for d in dtypes:
        lines += [f"## {d}", "", "| op | forward | backward | first reason |", "|---|---|---|---|"]
        for (op, dt), kinds in sorted(by.items()):
            if dt != d:
                continue
            fw, bw = kinds.get("forward"), kinds.get("backward")
            why = next((r.reason for r in (fw, bw) if r is not None and r.status != "pass"
                        and r.reason), "")
            cells = [_status_cell(fw), _status_cell(bw)]
            lines.append(f"| {op} | {cells[0]} | {cells[1]} | {_cell(_short(why, 140))} |")
        lines.append("")
    return "\n".join(lines)


def _status_cell(r: Optional[OpResult]) -> str:
    if r is None:
        return ""
    c = r.counts
    n = sum(c.values())
    return f"{r.status} ({c['pass']}/{n})" if r.status != "pass" else f"pass ({n})"


def _group(reason: str) -> str:
    """A reason with its specifics (numbers, shapes, names of values) blurred, for grouping."""
    reason = re.sub(r"\(with fallback:.*", "", reason)
    reason = reason.split(";")[0]
    reason = re.sub(r"\[[^\]]*\]", "[…]", reason)
    reason = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", reason)
    return reason[:110]


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kiln.opinfo", description=__doc__.split("\n")[0])
    p.add_argument("--config", choices=sorted(CONFIGS), default=None,
                   help="a preset of dtypes, samples and kinds (see CONFIGS); overrides "
                        "--dtypes and --max-samples, and may turn backward off")
    p.add_argument("--dtypes", default="float32",
                   help="comma-separated, of " + ", ".join(DTYPES) + " (default float32)")
    p.add_argument("--ops", default="",
                   help="comma-separated op keys (name or name.variant); a key ending in * "
                        "is a prefix; default all of op_db")
    p.add_argument("--no-backward", dest="backward", action="store_false",
                   help="forward samples only")
    p.add_argument("--no-noncontiguous", dest="noncontiguous", action="store_false",
                   help="skip the non-contiguous variants")
    p.add_argument("--max-samples", type=int, default=None,
                   help="at most this many samples per op (default all)")
    p.add_argument("--budget", type=float, default=OP_BUDGET_S,
                   help="seconds of samples per op, dtype and kind (default %(default)s)")
    p.add_argument("--timeout", type=float, default=None,
                   help="hard seconds per op, dtype and kind (default budget + 60)")
    p.add_argument("--out", default=None, help="write the markdown table here")
    p.add_argument("--json", default=None, help="write every sample's result here")
    p.add_argument("--expected", default=None,
                   help="with --config: write the statuses into that preset's section of this "
                        "file (tests/opinfo_expected.json), merged with its other entries")
    p.add_argument("--quiet", action="store_true", help="no per-op progress on stderr")
    return p.parse_args(argv)


def select_ops(spec: str) -> list[str]:
    """Op keys from a comma-separated list (a trailing ``*`` is a prefix); all if empty."""
    keys = list(op_entries())
    if not spec:
        return keys
    out = []
    for want in (s.strip() for s in spec.split(",") if s.strip()):
        hits = [k for k in keys if k.startswith(want[:-1])] if want.endswith("*") else (
            [want] if want in keys else [])
        if not hits:
            raise SystemExit(f"kiln.opinfo: no op_db entry {want!r}")
        out += [k for k in hits if k not in out]
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parse_args(argv)
    if args.expected and not args.config:
        raise SystemExit("kiln.opinfo: --expected needs --config")
    if args.config:
        args.dtypes = ",".join(CONFIGS[args.config]["dtypes"])
        args.max_samples = CONFIGS[args.config]["max_samples"]
        args.backward = args.backward and CONFIGS[args.config]["backward"]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in dtypes:
        if d not in DTYPES:
            raise SystemExit(f"kiln.opinfo: unknown dtype {d!r}")
    job_list = jobs(select_ops(args.ops), dtypes, args.backward)
    t0 = time.monotonic()
    results = sweep(job_list, timeout_s=args.timeout or args.budget + 60,
                    progress=not args.quiet, noncontiguous=args.noncontiguous,
                    budget_s=args.budget, max_samples=args.max_samples)
    seconds = time.monotonic() - t0
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "seconds": round(seconds, 1),
                       "results": [r.to_json() for r in results]}, f, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(markdown_table(results, seconds, _settings(args, dtypes)))
    if args.expected:
        try:
            with open(args.expected) as f:
                merged = json.load(f)
        except FileNotFoundError:
            merged = {}
        section = merged.setdefault(args.config, {})
        for d, ops in expected_statuses(results).items():
            section.setdefault(d, {})
            for op, kinds in ops.items():
                section[d].setdefault(op, {}).update(kinds)
            section[d] = dict(sorted(section[d].items()))
        with open(args.expected, "w") as f:
            json.dump(merged, f, indent=1, sort_keys=False)
            f.write("\n")
    print(summary_line(results, seconds))
    return 0


def _settings(args: argparse.Namespace, dtypes: Sequence[str]) -> str:
    samples = (f"the first {args.max_samples} sample(s) of each op" if args.max_samples
               else "every sample")
    kinds = "forward and backward" if args.backward else "forward only"
    preset = f"preset `{args.config}`: " if args.config else ""
    return f"{preset}{', '.join(dtypes)}, {samples}, {kinds}"


def summary_line(results: Sequence[OpResult], seconds: float) -> str:
    lines = []
    for d in DTYPES:
        for kind in KINDS:
            rs = [r for r in results if r.dtype == d and r.kind == kind]
            if rs:
                c = collections.Counter(r.status for r in rs)
                lines.append(f"{d} {kind}: {len(rs)} ops, " + ", ".join(
                    f"{c[s]} {s}" for s in STATUSES) + f" ({100 * c['pass'] / len(rs):.1f}% pass)")
    lines.append(f"{seconds:.0f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
