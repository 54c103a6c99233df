"""Pointwise ATen ops kiln composes from its own pointwise ops: `angle`, `hypot`, `frexp`."""

from __future__ import annotations

import math

from ..fx_to_kir import Out, Unsupported, Value, _Builder, _handles, _tensor


@_handles("aten.angle.default")
def _angle(b: _Builder, a: dict, out: Out) -> Value:
    """composed (real inputs): `π` where x < 0, else 0; NaN stays NaN (torch's kernel:
    `isnan(x) ? x : x < 0 ? π : 0`, so -0.0 gives 0)."""
    x = _tensor(a, "self")
    if x.dtype not in ("f16", "bf16", "f32", "f64"):
        x = b.cast(x, out.dtype)
    phase = b.where(b.binary("lt", x, 0), math.pi, 0.0)
    return b.where(b.unary("isnan", x), x, b.cast(phase, out.dtype))


@_handles("aten.hypot.default")
def _hypot(b: _Builder, a: dict, out: Out) -> Value:
    """composed: `sqrt(x² + y²)` in f64 for f32 and narrower (the squares are exact there, so
    the result is the correctly rounded one up to a double rounding); f64 as
    `m·sqrt(1 + (n/m)²)` with m = max(|x|, |y|), n = min, so nothing overflows. Either is inf
    when x or y is, even against NaN (C's hypot)."""
    x, y = b.cast(_tensor(a, "self"), out.dtype), b.cast(_tensor(a, "other"), out.dtype)
    if out.dtype == "f64":
        ax, ay = b.unary("abs", x), b.unary("abs", y)
        m, n = b.binary("maximum", ax, ay), b.binary("minimum", ax, ay)
        r = b.div(n, b.where(b.binary("eq", m, 0), 1.0, m))
        h = b.mul(m, b.unary("sqrt", b.add(b.mul(r, r), 1.0)))
    else:
        x64, y64 = b.cast(x, "f64"), b.cast(y, "f64")
        h = b.cast(b.unary("sqrt", b.add(b.mul(x64, x64), b.mul(y64, y64))), out.dtype)
    infinite = b.binary("logical_or", b.unary("isinf", x), b.unary("isinf", y))
    return b.where(infinite, math.inf, h)


def _binary_exponent(b: _Builder, mag: Value) -> Value:
    """For positive finite f64 `mag`: the f64 integer e with 2^(e-1) ≤ mag < 2^e, from
    ⌊log2⌋ + 1 and one exact correction each way (the scale by 2^-e is exact), so log2's
    last bit does not matter."""
    e = b.add(b.unary("floor", b.unary("log2", mag)), 1.0)
    m = b.mul(mag, b.unary("exp2", b.unary("neg", e)))
    e = b.where(b.binary("ge", m, 1.0), b.add(e, 1.0), e)
    return b.where(b.binary("lt", m, 0.5), b.sub(e, 1.0), e)


def _special(b: _Builder, mag: Value) -> Value:
    """zero, ±inf or NaN (of |x|)."""
    return b.binary("logical_or", b.binary("eq", mag, 0),
                    b.binary("logical_or", b.unary("isinf", mag), b.unary("isnan", mag)))


@_handles("aten.frexp.Tensor")
def _frexp(b: _Builder, a: dict, out: Out) -> tuple:
    """composed in f64 (f32 and narrower inputs): e = the binary exponent with
    2^(e-1) ≤ |x| < 2^e, m = x·2^-e (exact: a power-of-two scale); zero, ±inf and NaN give
    (x, 0) as C's frexp."""
    x = _tensor(a, "self")
    if x.dtype not in ("f16", "bf16", "f32"):
        raise Unsupported(f"aten.frexp: dtype {x.dtype} (the f64 scale would leave f64's range)")
    x64 = b.cast(x, "f64")
    mag = b.unary("abs", x64)
    special = _special(b, mag)
    e = _binary_exponent(b, b.where(special, 1.0, mag))
    m = b.mul(x64, b.unary("exp2", b.unary("neg", e)))
    mantissa = b.where(special, x, b.cast(m, x.dtype))
    exponent = b.where(special, 0, b.cast(e, out[1].dtype))
    return b.cast(mantissa, out[0].dtype), exponent


_FORMATS = {"f32": (24, -149, 3.4028234663852886e38), "f16": (11, -24, 65504.0),
            "bf16": (8, -133, 3.3895313892515355e38)}
"""Per dtype: significand bits, exponent of the smallest subnormal, largest finite value."""


@_handles("aten.nextafter.default")
def _nextafter(b: _Builder, a: dict, out: Out) -> Value:
    """composed in f64 (f32, f16, bf16): the neighbour of x towards y is |x| ± one unit in
    the last place, 2^(e-p) for 2^(e-1) ≤ |x| < 2^e (p significand bits; one binade lower
    when stepping down from a power of two; never below the smallest subnormal), exact in
    f64; x == y gives y, 0 gives the smallest subnormal signed as y - x, ±inf the largest
    finite value, NaN NaN. Stepping past the largest finite value rounds to inf as in C."""
    x, y = b.cast(_tensor(a, "self"), out.dtype), b.cast(_tensor(a, "other"), out.dtype)
    if out.dtype not in _FORMATS:
        raise Unsupported(f"aten.nextafter: dtype {out.dtype} (needs more than f64 to step)")
    p, tiny_exp, biggest = _FORMATS[out.dtype]
    x64, y64 = b.cast(x, "f64"), b.cast(y, "f64")
    mag = b.unary("abs", x64)
    finite_nonzero = b.unary("logical_not", _special(b, mag))
    e = _binary_exponent(b, b.where(finite_nonzero, mag, 1.0))
    tiny = 2.0**tiny_exp
    ulp = b.binary("maximum", b.unary("exp2", b.sub(e, float(p))), tiny)
    power_of_two = b.binary("eq", mag, b.unary("exp2", b.sub(e, 1.0)))
    ulp_down = b.where(power_of_two, b.binary("maximum", b.mul(ulp, 0.5), tiny), ulp)
    away = b.binary("eq", b.binary("gt", y64, x64), b.binary("gt", x64, 0))
    stepped = b.where(away, b.add(mag, ulp), b.sub(mag, ulp_down))
    signed = b.where(b.binary("lt", x64, 0), b.unary("neg", stepped), stepped)
    from_zero = b.where(b.binary("gt", y64, x64), tiny, -tiny)
    from_inf = b.where(b.binary("gt", x64, 0), biggest, -biggest)
    result = b.where(b.binary("eq", mag, 0), from_zero,
                     b.where(b.unary("isinf", mag), from_inf, signed))
    result = b.cast(result, out.dtype)
    nan = b.binary("logical_or", b.unary("isnan", x), b.unary("isnan", y))
    return b.where(nan, b.add(x, y), b.where(b.binary("eq", x, y), y, result))
