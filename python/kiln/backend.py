"""The torch.compile backend: FX graphs from aot_autograd, compiled by kiln.

``torch.compile(model, backend="kiln")`` (or ``backend=kiln.backend(...)``) hands each
graph Dynamo captures to :func:`backend`'s compiler, which runs it through ``aot_autograd``
with the core ATen decompositions: every forward and backward graph arrives as a
functional FX graph of core ATen ops, and :func:`_compile_fx` compiles it.

* When kiln can express every node, the whole graph becomes one kiln graph
  (``fx_to_kir.translate``) compiled by ``kiln._native.compile``.
* Otherwise the graph is partitioned (``CapabilityBasedPartitioner``): the runs of nodes
  kiln supports become kiln graphs, the rest stays eager PyTorch; each fallback is logged on
  the ``kiln`` logger with its reason, and :func:`explain` lists them.
* Graphs on a device kiln's PyTorch bridge does not reach yet (CUDA) run eagerly, logged.

Tensors cross without copies: inputs are described by their storage address, sizes,
strides and offset (kiln borrows the storage and holds the tensor), outputs come back as
DLPack capsules over kiln's memory (``torch.from_dlpack``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import logging
import operator
import weakref
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx
from torch._decomp import core_aten_decompositions, get_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.utils.dlpack import from_dlpack

from . import _native, fx_to_kir

log = logging.getLogger("kiln")

__all__ = ["backend", "kiln_backend", "explain", "ExplainReport"]

_DTYPES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.bool: "bool",
}

_MODES = {None: "auto", "default": "auto", "reduce-overhead": "auto", "max-autotune": "c",
          "max-autotune-no-cudagraphs": "c", "cranelift": "cranelift"}


@dataclasses.dataclass
class ExplainReport:
    """What kiln ran and what fell back to eager PyTorch, over every graph compiled."""

    graphs: int = 0
    """FX graphs handed to the backend (forward and backward graphs counted apart)."""
    kiln_graphs: int = 0
    """kiln graphs compiled from them (one per graph, or one per supported partition)."""
    kiln_nodes: int = 0
    """FX op nodes that run in kiln."""
    eager_nodes: int = 0
    """FX op nodes that run in eager PyTorch."""
    unsupported: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    """``(op, reason)`` → how many nodes of it fell back."""

    def __str__(self) -> str:
        lines = [
            f"graphs: {self.graphs} ({self.kiln_graphs} kiln graphs)",
            f"op nodes: {self.kiln_nodes} in kiln, {self.eager_nodes} in eager PyTorch",
        ]
        if self.unsupported:
            lines.append("unsupported (count, op: reason):")
            for (op, reason), n in self.unsupported.most_common():
                lines.append(f"  {n:4d}  {op}: {reason}")
        return "\n".join(lines)


def _op_name(node: torch.fx.Node) -> str:
    """``aten.add.Tensor`` for an ATen overload, else the target's name."""
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t.namespace}.{t.__name__}"
    return getattr(t, "__name__", str(t))


def _device_of(node: torch.fx.Node) -> Optional[torch.device]:
    v = node.meta.get("val")
    return v.device if isinstance(v, torch.Tensor) else None


class _Support(OperatorSupportBase):
    """The nodes kiln runs: call_function nodes ``fx_to_kir`` translates, on the CPU."""

    def __init__(self) -> None:
        self.reasons: dict[torch.fx.Node, str] = {}

    def reason(self, node: torch.fx.Node) -> Optional[str]:
        if node not in self.reasons:
            try:
                r = fx_to_kir.node_support(node)
            except Exception as e:  # a translator bug must not break the compile: eager
                r = f"translator error {type(e).__name__}: {e}"
            if r is None:
                dev = _device_of(node)
                if dev is not None and dev.type != "cpu":
                    r = f"on {dev}: kiln's PyTorch bridge runs CPU tensors"
            self.reasons[node] = r
        return self.reasons[node]

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and self.reason(node) is None


class _KilnGraph:
    """A kiln graph called with FX placeholder values: picks its inputs, describes them to
    the native side, and adopts its outputs."""

    def __init__(self, gm: torch.fx.GraphModule, tr: fx_to_kir.Translation, tier: str,
                 pin: bool = False):
        self.translation = tr
        self.layouts = _output_layouts(gm)
        # outputs come back as eager lays them out, since eager ops after a kiln partition
        # may take the layout its FX metadata promised for granted (an embedding bag reads
        # its indices as contiguous after a `clone`) and a caller may write an output in
        # place. kiln's runtime does it: it copies an output into eager's strides where its
        # own differ (in blocks on its threads: ResNet-18's permuted 512x256x3x3 weight
        # gradient 0.8 ms against torch's copy_ 6.5 ms), and copies a fresh output it would
        # return as an input's memory or overlapping another output (ViT's training step
        # spent 0.93 ms a step checking that in Python, 0.02 natively). Only layouts that
        # are not a dense permutation (a broadcast) are left to torch here.
        strides, self.torch_strided = {}, []
        for i, (lay, val) in enumerate(zip(self.layouts, _output_values(gm))):
            if lay.strides is None or not isinstance(val, torch.Tensor):
                continue
            if _is_dense(val.shape, lay.strides):
                strides[i] = list(lay.strides)
            else:
                self.torch_strided.append(i)
        fresh = [i for i, lay in enumerate(self.layouts) if not lay.may_alias]
        self.compiled = _native.compile(tr.kir, "cpu", tier, strides, fresh)
        self.attrs = [fx_to_kir._fetch_attr(gm, t) for t in tr.attr_targets]
        self.pin = pin

    def __call__(self, *args: Any) -> list[torch.Tensor]:
        return self.call_boxed(list(args))

    def call_boxed(self, args: list) -> list[torch.Tensor]:
        """Runs on ``args`` and empties the list (aot_autograd's boxed calling convention):
        kiln then holds the only references the call made to its inputs and lets go of each
        after its last reader, so that what the caller no longer holds (a backward's saved
        activations, once aot_autograd has cleared them) is freed during the call, as
        eager's autograd frees them node by node."""
        specs = []
        for index in self.translation.placeholder_index:
            t = args[index] if index >= 0 else self.attrs[-1 - index]
            specs.append(_describe(t, self.pin))
        args.clear()
        outs = [from_dlpack(c) for c in self.compiled(specs)]  # (empties specs)
        for i in self.torch_strided:
            o, want = outs[i], self.layouts[i].strides
            if _strides_differ(o.shape, o.stride(), want):
                outs[i] = torch.empty_strided(o.shape, want, dtype=o.dtype).copy_(o)
        return outs


@dataclasses.dataclass(frozen=True)
class _OutputLayout:
    """What eager PyTorch's version of one graph output looks like, from its FX metadata."""

    strides: Optional[tuple[int, ...]]
    """Its strides, or None where they are symbolic (then kiln's are kept)."""
    may_alias: bool
    """Whether it may share memory with a graph input or another output (eager returns a
    view there); when not, an output kiln returns as a view of an input (``clone`` is the
    identity in kiln's functional IR) or of another output is copied."""


def _output_layouts(gm: torch.fx.GraphModule) -> list[_OutputLayout]:
    """One :class:`_OutputLayout` per output of ``gm``. Storage identity is read from the fake
    tensors, as aot_autograd reads it for its own aliasing metadata."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def storage(v: Any) -> Any:
        try:
            return StorageWeakRef(v.untyped_storage())
        except Exception:  # no storage to compare (a symbolic or unusual tensor): may alias
            return None

    inputs = {storage(n.meta.get("val")) for n in gm.graph.nodes
              if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)}
    values = _output_values(gm)
    stores = [storage(v) if isinstance(v, torch.Tensor) else None for v in values]
    layouts = []
    for i, v in enumerate(values):
        if not isinstance(v, torch.Tensor):
            layouts.append(_OutputLayout(None, True))
            continue
        strides = tuple(v.stride())
        concrete = all(isinstance(s, int) for s in strides) and all(
            isinstance(s, int) for s in v.shape)
        st = stores[i]
        shared = st is None or st in inputs or any(
            j != i and stores[j] == st for j in range(len(values)))
        layouts.append(_OutputLayout(strides if concrete else None, shared))
    return layouts


def _output_values(gm: torch.fx.GraphModule) -> list[Any]:
    """The FX metadata values (fake tensors, or None) of ``gm``'s outputs, in order."""
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return [v.meta.get("val") if isinstance(v, torch.fx.Node) else None for v in out]


def _is_dense(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``strides`` lay ``shape`` out densely: row-major over some order of its dims
    (what ``torch.empty_strided`` gets for a permuted tensor; dims of size 1 are free)."""
    dims = sorted((d for d in range(len(shape)) if shape[d] > 1), key=lambda d: -strides[d])
    step = 1
    for d in reversed(dims):
        if strides[d] != step:
            return False
        step *= shape[d]
    return len(strides) == len(shape) and step > 0 and all(int(n) > 0 for n in shape)


def _strides_differ(shape: Sequence[int], got: Sequence[int], want: Sequence[int]) -> bool:
    """Whether a tensor of ``shape`` laid out with ``got`` reads differently from ``want``
    (strides of dimensions of size 1 do not matter)."""
    return any(s > 1 and g != w for s, g, w in zip(shape, got, want))


@dataclasses.dataclass
class _Pin:
    """The pin of one parameter: its current key, and the storage that key stands for."""

    key: int
    storage: Any
    """A ``StorageWeakRef`` to the storage the key was made for: it holds the storage's
    control block, so while it lives no other storage can have the same address
    (``cdata``): a live storage at that address is this one."""


_pins: dict[int, _Pin] = {}
"""``id(parameter)`` -> its pin, while the parameter lives (a finalizer removes it)."""
_next_pin_key = itertools.count(1)


def _forget_parameter(ident: int) -> None:
    pin = _pins.pop(ident, None)
    if pin is not None:
        _native.forget_pinned(pin.key)


def _pin_of(t: torch.Tensor, storage: Any) -> Optional[tuple]:
    """``(key, version)`` for a parameter (``storage``: its ``untyped_storage()``): a key of
    its own (never reused: counted) and its ``_version``. The key changes, and kiln's copies
    under the old one are dropped, when the parameter's storage is another than the key was
    made for (``p.data = t``, ``p.set_(...)``: no ``_version`` bump); the copies go with the
    parameter when it is freed. None for other tensors, and for inference tensors (made
    under ``torch.inference_mode``: they count no versions, so a write could not be seen)."""
    if not isinstance(t, torch.nn.Parameter) or t.is_inference():
        return None
    ident = id(t)
    pin = _pins.get(ident)
    if pin is None:
        weakref.finalize(t, _forget_parameter, ident)
    elif pin.storage.cdata != storage._cdata:
        _native.forget_pinned(pin.key)
        pin = None
    if pin is None:
        from torch.multiprocessing.reductions import StorageWeakRef

        pin = _pins[ident] = _Pin(next(_next_pin_key), StorageWeakRef(storage))
    return (pin.key, t._version)


def _describe(t: torch.Tensor, pin: bool = False) -> tuple:
    """A tensor as ``_native`` borrows it: storage address, dtype, sizes, strides, storage
    offset, storage elements, the tensor (held while kiln uses its memory), and its pin
    (:func:`_pin_of`, with ``pin``; else None)."""
    if not t.is_cpu or t.layout is not torch.strided or t.is_neg() or t.is_conj():
        # never read memory whose meaning differs from its bytes (sparse layouts, lazy
        # negation or conjugation bits)
        raise _native.KilnError(
            f"kiln's CPU graph takes strided CPU tensors; got {t.device}, {t.layout}"
            f"{', a negated view' if t.is_neg() else ''}{', a conjugated view' if t.is_conj() else ''}")
    storage = t.untyped_storage()
    # (called for every input of every call: the cheapest reads of each field; 3.8 µs a
    # tensor with a device object and two lists made, 2.3 without)
    return (storage.data_ptr(), _DTYPES[t.dtype], t.shape, t.stride(),
            t.storage_offset(), storage.nbytes() // t.element_size(), t,
            _pin_of(t, storage) if pin else None)


class _KilnModule(torch.nn.Module):
    """A fused partition as a module: the kiln graph, returning what the partition's
    submodule returned (one value, or a tuple)."""

    def __init__(self, graph: _KilnGraph, single: bool):
        super().__init__()
        self.graph = graph
        self.single = single

    def forward(self, *args: Any) -> Any:
        outs = self.graph(*args)
        return outs[0] if self.single else tuple(outs)


def _strip_outputs(gm: torch.fx.GraphModule) -> Optional[list[int]]:
    """Removes ``None`` outputs (gradients of inputs that need none) from ``gm``'s output
    tuple; returns the kept positions, or ``None`` if some output is not a tensor node."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = out.args[0]
    if not isinstance(values, (tuple, list)):
        return None
    kept = [i for i, v in enumerate(values) if v is not None]
    for i in kept:
        v = values[i]
        if not isinstance(v, torch.fx.Node) or not isinstance(v.meta.get("val"), torch.Tensor):
            return None
    out.args = (tuple(values[i] for i in kept),)
    gm.recompile()
    return kept


def _count_ops(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem)


def _compile_fx(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], tier: str,
                report: ExplainReport, pin: bool = False, name: str = "torch") -> Callable:
    """Compiles one aot_autograd graph: whole when kiln supports every node (a boxed
    function, which empties its list of arguments), else by partitions (a GraphModule). ``name`` names its kiln graph (``name_p0``, ... its partitions): the plan's
    name in ``KILN_PROFILE``'s kernel table and kiln's logs."""
    report.graphs += 1
    support = _Support()
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is not operator.getitem:
            r = support.reason(n)
            if r is not None:
                r = r.removeprefix(f"{_op_name(n)}: ")
                report.unsupported[(_op_name(n), r)] += 1
                log.info("kiln: %s runs in eager PyTorch: %s", _op_name(n), r)
    whole = not any(support.reasons.values())
    if whole:
        n_outputs = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])
        stripped = torch.fx.GraphModule(gm, gm.graph.__deepcopy__())
        kept = _strip_outputs(stripped)
        if kept is not None:
            try:
                graph = _KilnGraph(stripped, fx_to_kir.translate(stripped, name), tier,
                                   pin)
            except (fx_to_kir.Unsupported, _native.KilnError) as e:
                log.warning("kiln: the whole graph did not translate (%s); partitioning", e)
            else:
                report.kiln_graphs += 1
                report.kiln_nodes += _count_ops(gm)

                def run(args: list) -> list:
                    outs = graph.call_boxed(args)
                    full: list = [None] * n_outputs
                    for i, t in zip(kept, outs):
                        full[i] = t
                    return full

                run._boxed_call = True  # type: ignore[attr-defined]
                return run
    return _compile_partitions(gm, support, tier, report, pin, name)


def _compile_partitions(gm: torch.fx.GraphModule, support: _Support, tier: str,
                        report: ExplainReport, pin: bool = False,
                        name: str = "torch") -> Callable:
    """The supported runs of ``gm`` as kiln graphs (named ``name_p0``, ...), the rest
    eager."""
    fused = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True
                                       ).partition_and_fuse()
    parts = itertools.count()
    for node in list(fused.graph.nodes):
        if node.op != "call_module":
            continue
        sub = getattr(fused, node.target)
        ops = _count_ops(sub)
        out_node = next(n for n in sub.graph.nodes if n.op == "output")
        out = out_node.args[0]
        single = not isinstance(out, (tuple, list))
        if single:
            out_node.args = ((out,),)
            sub.recompile()
        try:
            graph = _KilnGraph(sub, fx_to_kir.translate(sub, f"{name}_p{next(parts)}"), tier, pin)
        except (fx_to_kir.Unsupported, _native.KilnError) as e:
            log.warning("kiln: a partition of %d ops stays in eager PyTorch: %s", ops, e)
            report.eager_nodes += ops
            if single:
                out_node.args = (out,)
                sub.recompile()
            continue
        setattr(fused, node.target, _KilnModule(graph, single))
        report.kiln_graphs += 1
        report.kiln_nodes += ops
    report.eager_nodes += _count_ops(fused)
    fused.recompile()
    return fused


def backend(device: str = "cpu", mode: Optional[str] = None, pin_weights: bool = True,
            _report: Optional[ExplainReport] = None) -> Callable:
    """A torch.compile backend running on ``device`` (``"cpu"``; ``"cuda"`` graphs run in
    eager PyTorch for now, logged) with ``mode`` (``None``/``"default"``: Cranelift code at
    once, hot kernels moved to the C tier in the background; ``"max-autotune"``: every
    kernel built by the C compiler at its first call; ``"cranelift"``: Cranelift only).

    ``pin_weights`` (on by default): kiln keeps its packed copies of ``nn.Parameter`` inputs
    (a Linear's ``wᵀ`` as a row-major matrix) from call to call, reused while the parameter
    keeps its storage and its ``_version``, so each weight is transposed once, not on every
    call. Writes through the parameter (an optimizer step, ``load_state_dict``, a ``copy_``
    under ``no_grad``) bump ``_version``, and a new storage (``p.data = t``) gets a new pin:
    both are seen at the next call. Writes that bump no version (through ``p.data``, or a
    NumPy array sharing its memory) are not: after such a write, call
    :func:`kiln.forget_weights`, or pass ``pin_weights=False`` to read every parameter
    afresh on every call."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"kiln.backend: device {device!r} is not 'cpu' or 'cuda'")
    if mode not in _MODES:
        raise ValueError(f"kiln.backend: mode {mode!r} is not one of {sorted(map(str, _MODES))}")
    tier = _MODES[mode]
    report = _report if _report is not None else ExplainReport()

    # each graph's plan is named for its pass and numbered (`forward0`, `backward0`, ...),
    # so that a profile's kernel table tells the forward's kernels from the backward's
    numbers = {"forward": itertools.count(), "backward": itertools.count()}

    def compiler_for(kind: str) -> Callable:
        def compiler(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
            with _timed(COMPILE_TIME_KEY):
                name = f"{kind}{next(numbers[kind])}"
                f = compile_unboxed(gm, example_inputs, name)
                return f if getattr(f, "_boxed_call", False) else make_boxed_func(f)
        return compiler

    def compile_unboxed(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                        name: str) -> Callable:
        devices = {t.device.type for t in example_inputs if isinstance(t, torch.Tensor)}
        if devices - {"cpu"}:
            log.warning("kiln: a graph on %s runs in eager PyTorch (kiln's PyTorch bridge "
                        "runs CPU tensors)", sorted(devices - {"cpu"}))
            report.graphs += 1
            report.eager_nodes += _count_ops(gm)
            return gm
        return _compile_fx(gm, example_inputs, tier, report, pin_weights, name)

    return aot_autograd(fw_compiler=compiler_for("forward"),
                        bw_compiler=compiler_for("backward"), decompositions=decompositions())


COMPILE_TIME_KEY = "kiln.backend.compile"
"""The key under which kiln's graph compiler (the forward and backward compilers
aot_autograd calls) is timed in torch's ``compilation_time_metrics``, as inductor's
``compile_fx.<locals>.fw_compiler_base`` is, so torch's compile-time reports show it."""


def _timed(key: str):
    """torch's own compile-phase timer for ``key``, where this torch has one."""
    timer = getattr(torch._dynamo.utils, "dynamo_timed", None)
    return timer(key) if timer is not None else contextlib.nullcontext()


_EXTRA_DECOMPOSITIONS = ("grid_sampler_2d",)
"""ATen ops outside the core set that kiln takes as torch's own decompositions (which
Inductor uses too) rather than translating them itself."""


_KEPT_WHOLE = ("_scaled_dot_product_flash_attention_for_cpu",)
"""Core-decomposed ATen ops kiln takes whole (``fx_ops.attention`` translates them). torch's
decomposition of the CPU flash attention returns the attention weights ``[N, H, L, S]``
where the op returns its logsumexp ``[N, H, L]``, and the backward op (never decomposed)
then reads the weights as the logsumexp: with it, every gradient through
``F.scaled_dot_product_attention`` came out wrong. Inductor keeps the op whole too."""


def decompositions() -> dict:
    """The decomposition table aot_autograd applies before kiln sees a graph: the core ATen
    decompositions less `_KEPT_WHOLE`, plus `_EXTRA_DECOMPOSITIONS`."""
    table = core_aten_decompositions()
    for name in _KEPT_WHOLE:
        op = getattr(torch.ops.aten, name, None)
        if op is not None:
            for overload in op.overloads():
                table.pop(getattr(op, overload), None)
    table.update(get_decompositions([getattr(torch.ops.aten, n) for n in _EXTRA_DECOMPOSITIONS]))
    return table


def kiln_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    """The backend ``torch.compile(m, backend="kiln")`` finds by name: :func:`backend` with
    its defaults."""
    return backend()(gm, example_inputs)


def explain(fn: Callable, *args: Any, **kwargs: Any) -> ExplainReport:
    """Compiles ``fn`` with kiln, calls it on ``args``, and reports how many graphs and op
    nodes ran in kiln and in eager PyTorch, and each unsupported op with its reason."""
    report = ExplainReport()
    torch._dynamo.reset()
    torch.compile(fn, backend=backend(_report=report))(*args, **kwargs)
    torch._dynamo.reset()
    return report


def forget_weights() -> None:
    """Drops kiln's kept copies of every parameter (``backend(pin_weights=True)``, the
    default): the next calls pack them again. Needed after writes ``_version`` does not show
    (``p.data.mul_(...)``)."""
    for pin in _pins.values():
        _native.forget_pinned(pin.key)
        pin.key = next(_next_pin_key)
