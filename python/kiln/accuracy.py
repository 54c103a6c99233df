"""Accuracy judged as PyTorch's dashboard judges a compiler: against a float64 run.

A compiled float32 result is compared with eager float32 *and* eager float64. It passes when
its error against float64 (root mean square over the tensor) is at most ``multiplier`` times
eager float32's own error against float64, plus a small absolute allowance ``atol`` for
results whose eager error is zero or denormal-small (``torch._dynamo.utils.same`` with
``fp64_ref``). A compiled result can then differ from eager float32 by reordered rounding,
but not by more than eager itself is off, and a wrong result (a gradient 100× too large, a
transposed mask) fails however loose the relative tolerance of a plain comparison.

Losses for gradient checks should depend on every output with a fixed random weight
(:func:`weighted_loss`): ``sum(out * w)``. A loss that is nearly constant in the outputs
(``mean(out**2)`` after a LayerNorm) has gradients made of rounding noise, which any wrong
gradient matches."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Optional, Sequence

import torch

__all__ = ["Verdict", "judge", "judge_all", "weighted_loss", "rms_error"]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One tensor's judgement."""

    name: str
    """What was compared (``"out"``, ``"grad q"``, a parameter's name)."""
    ok: bool
    """Whether it passed."""
    error: float
    """The compiled result's RMS error against float64."""
    eager_error: float
    """Eager float32's RMS error against float64."""
    max_abs_diff: float
    """The largest absolute difference from eager float32 (for the report)."""
    scale: float
    """The largest absolute value of the float64 result (for the report)."""
    reason: str = ""
    """Why it failed (shape, dtype, non-finite values, or the error ratio); empty if ok."""

    def __str__(self) -> str:
        status = "ok" if self.ok else f"FAIL ({self.reason})"
        return (f"{self.name}: {status}; rms error {self.error:.3g} vs eager's "
                f"{self.eager_error:.3g}, max |diff| {self.max_abs_diff:.3g} of {self.scale:.3g}")


def rms_error(a: torch.Tensor, ref: torch.Tensor) -> float:
    """Root mean square of ``a - ref`` in float64 (non-finite entries equal in both count 0)."""
    a, ref = a.detach().double(), ref.detach().double()
    same = (a == ref) | (torch.isnan(a) & torch.isnan(ref))
    diff = torch.where(same, torch.zeros_like(a), a - ref)
    return math.sqrt(diff.square().mean().item()) if diff.numel() else 0.0


def judge(name: str, got: Optional[torch.Tensor], ref32: Optional[torch.Tensor],
          ref64: Optional[torch.Tensor], multiplier: float = 3.0,
          atol: float = 1e-6) -> Verdict:
    """Judges ``got`` (compiled, float32) against eager ``ref32`` and ``ref64`` (see the
    module doc). ``None`` (a gradient nobody computed) counts as zero: it passes where the
    others are None or all zero. The allowance is ``atol`` times the float64 result's
    largest magnitude, or ``atol`` itself where that is below 1 (a gradient that is exactly
    zero in float64, as the query's gradient of attention over one key: eager's float32
    error is 0 there, and kiln's rounding noise of 1e-7 must not fail it)."""
    if got is None or ref32 is None or ref64 is None:
        # torch.compile's joint graph gives a zero gradient where eager leaves None (a
        # parameter only an unused output depends on: BERT's pooler under a loss on the
        # hidden states), as aot_eager does; a None means zero
        present = [t for t in (got, ref32, ref64) if t is not None]
        ok = all(not t.is_floating_point() or not bool(t.any()) for t in present)
        return Verdict(name, ok, 0.0, 0.0, 0.0, 0.0,
                       "" if ok else f"non-zero in {'compiled' if got is not None else 'eager'} only")
    if tuple(got.shape) != tuple(ref32.shape):
        return Verdict(name, False, math.inf, 0.0, math.inf, 0.0,
                       f"shape {list(got.shape)} against eager's {list(ref32.shape)}")
    if got.dtype != ref32.dtype:
        return Verdict(name, False, math.inf, 0.0, math.inf, 0.0,
                       f"dtype {got.dtype} against eager's {ref32.dtype}")
    if not got.is_floating_point():
        ok = torch.equal(got, ref32)
        return Verdict(name, ok, 0.0, 0.0, 0.0 if ok else math.inf, 0.0,
                       "" if ok else "integer values differ")
    finite_got, finite_ref = torch.isfinite(got), torch.isfinite(ref32)
    scale = ref64.detach().double().abs().nan_to_num(0, 0, 0).max().item() if ref64.numel() else 0.0
    max_diff = (got.detach().double() - ref32.detach().double()).abs().nan_to_num(0, 0, 0)
    max_diff = max_diff.max().item() if max_diff.numel() else 0.0
    if not torch.equal(finite_got, finite_ref):
        return Verdict(name, False, math.inf, 0.0, max_diff, scale,
                       "non-finite values where eager's are finite (or the reverse)")
    error, eager_error = rms_error(got, ref64), rms_error(ref32, ref64)
    bound = multiplier * eager_error + atol * max(scale, 1.0)
    ok = error <= bound
    reason = "" if ok else f"rms error {error:.3g} > {multiplier}× eager's {eager_error:.3g} + allowance"
    return Verdict(name, ok, error, eager_error, max_diff, scale, reason)


def judge_all(named: Iterable[tuple[str, Any, Any, Any]], multiplier: float = 3.0,
              atol: float = 1e-6) -> list[Verdict]:
    """:func:`judge` over ``(name, got, ref32, ref64)`` rows."""
    return [judge(n, g, r, r64, multiplier, atol) for n, g, r, r64 in named]


def weighted_loss(outputs: Sequence[torch.Tensor], weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """``Σ sum(out * w)`` over the floating outputs: a loss every output entry moves."""
    total = None
    for o, w in zip(outputs, weights):
        if not o.is_floating_point():
            continue
        term = (o * w.to(o.dtype)).sum()
        total = term if total is None else total + term
    if total is None:
        raise ValueError("weighted_loss: no floating-point output")
    return total
