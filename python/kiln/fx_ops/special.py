"""Special functions (gamma family, inverse error functions, modified Bessel functions, ...)
composed from kiln's pointwise ops.

Every handler casts its input to f64, evaluates there (series, recurrences, rational
approximations whose f64 error is far below f32's) and casts the result to the node's dtype;
the special points (poles, zeros, ±inf, NaN, -0.0) give what torch's CPU kernels give.
The quoted errors are the max relative errors against mpmath measured on f64 inputs (kiln's
own f64 exp/log/sin/tan/erf are within ~1.2e-16 of mpmath) by
``scripts/special_accuracy.py``, which also shows how the series lengths and switch points
were chosen. The coefficients are exact rationals (Bernoulli numbers, factorials) or
published (Wichura's AS241).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

from ..fx_to_kir import Out, Unsupported, Value, _Builder, _handles, _tensor

_INF, _NAN = math.inf, math.nan

_BERNOULLI = [Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30),
              Fraction(5, 66), Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510),
              Fraction(43867, 798), Fraction(-174611, 330)]  # B_2 .. B_20
# B_2k / (2k (2k - 1)), k = 1..8: Stirling's series for lgamma
_STIRLING = [float(bk / (2 * k * (2 * k - 1))) for k, bk in enumerate(_BERNOULLI[:8], 1)]
# B_2k / (2k), k = 1..8: the asymptotic series of digamma
_DIGAMMA = [float(bk / (2 * k)) for k, bk in enumerate(_BERNOULLI[:8], 1)]
_SHIFT = 10  # lgamma/digamma: x < 10 is shifted to x + 10 by the recurrence

# Wichura's AS241 (Applied Statistics 37, 1988), ~1e-16 relative: ndtri in three ranges,
# each a ratio of degree-7 polynomials (lowest coefficient first).
_AS241_CENTRAL = (
    [3.3871328727963666080e0, 1.3314166789178437745e2, 1.9715909503065514427e3,
     1.3731693765509461125e4, 4.5921953931549871457e4, 6.7265770927008700853e4,
     3.3430575583588128105e4, 2.5090809287301226727e3],
    [1.0, 4.2313330701600911252e1, 6.8718700749205790830e2, 5.3941960214247511077e3,
     2.1213794301586595867e4, 3.9307895800092710610e4, 2.8729085735721942674e4,
     5.2264952788528545610e3],
)
_AS241_MID = (
    [1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0,
     3.64784832476320460504e0, 1.27045825245236838258e0, 2.41780725177450611770e-1,
     2.27238449892691845833e-2, 7.74545014278341407640e-4],
    [1.0, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
     1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4,
     1.05075007164441684324e-9],
)
_AS241_FAR = (
    [6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0,
     2.96560571828504891230e-1, 2.65321895265761230930e-2, 1.24266094738807843860e-3,
     2.71155556874348757815e-5, 2.01033439929228813265e-7],
    [1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
     7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7,
     2.04426310338993978564e-15],
)

# Modified Bessel functions I0, I1: the power series in (x/2)² below _BESSEL_SWITCH (k!(k+ν)!
# in the denominators), the asymptotic series in 1/|x| above it.
_BESSEL_SWITCH = 18.0
_BESSEL_SERIES_TERMS = 34
_BESSEL_ASYMPTOTIC_TERMS = 30

_ERFCX_SWITCH = 2.5  # below: exp(x²)·(1 - erf x); above: Laplace's continued fraction
_ERFCX_FRACTION_TERMS = 40


# ---------------------------------------------------------------------------------------
# Building blocks (all on f64 values)
# ---------------------------------------------------------------------------------------


def _f64(b: _Builder, a: dict, op: str, name: str = "self") -> Value:
    x = _tensor(a, name, op)
    return b.cast(x, "f64")


def _poly(b: _Builder, t: Value, coeffs: Sequence[float]) -> Value:
    """Σ coeffs[k]·t^k by Horner's rule (lowest coefficient first)."""
    acc = b.add(b.mul(t, coeffs[-1]), coeffs[-2])
    for c in reversed(coeffs[:-2]):
        acc = b.add(b.mul(acc, t), c)
    return acc


def _ratio(b: _Builder, t: Value, pq: tuple) -> Value:
    return b.div(_poly(b, t, pq[0]), _poly(b, t, pq[1]))


def _is_int(b: _Builder, x: Value) -> Value:
    """x is an integer or ±inf."""
    return b.binary("eq", x, b.unary("floor", x))


def _non_positive_int(b: _Builder, x: Value) -> Value:
    """x is 0, -0.0, a negative integer or -inf."""
    return b.binary("logical_and", b.binary("le", x, 0.0), _is_int(b, x))


def _pi_times_frac(b: _Builder, x: Value) -> Value:
    """π·(x - round(x)): the reduction is exact, so sin/tan of it are sin/tan(πx) to 1 ulp."""
    return b.mul(b.sub(x, b.unary("round", x)), math.pi)


def _shifted(b: _Builder, x: Value) -> tuple[Value, Value, Value]:
    """(small, z, xs): small = x < 10, z = x + 10 where small else x, xs = x where small
    else 1 (the operand of the recurrence's terms, kept finite where they are not used)."""
    small = b.binary("lt", x, float(_SHIFT))
    return small, b.where(small, b.add(x, float(_SHIFT)), x), b.where(small, x, 1.0)


def _recip_sq(b: _Builder, z: Value) -> tuple[Value, Value]:
    r = b.unary("reciprocal", z)
    return r, b.mul(r, r)


# ---------------------------------------------------------------------------------------
# Gamma family
# ---------------------------------------------------------------------------------------


def _lgamma_positive(b: _Builder, x: Value) -> Value:
    """lgamma for x > 0 (and +inf, NaN): shifted to z ≥ 10, then Stirling's series
    `(z - ½)(log z - 1) + (log 2π - 1)/2 + Σ B_2k / (2k(2k-1) z^(2k-1))`, less
    `log(x(x+1)...(x+9))` where shifted."""
    small, z, xs = _shifted(b, x)
    r, r2 = _recip_sq(b, z)
    series = b.mul(r, _poly(b, r2, _STIRLING))
    main = b.mul(b.sub(z, 0.5), b.sub(b.unary("log", z), 1.0))
    st = b.add(b.add(main, (math.log(2 * math.pi) - 1) / 2), series)
    prod = xs
    for k in range(1, _SHIFT):
        prod = b.mul(prod, b.add(xs, float(k)))
    return b.where(small, b.sub(st, b.unary("log", prod)), st)


@_handles("aten.lgamma.default")
def _lgamma(b: _Builder, a: dict, out: Out) -> Value:
    """composed (f64): Stirling's series after the recurrence for x > 0 (`_lgamma_positive`),
    the reflection `log(π / |sin πx|) - lgamma(1 - x)` for x < 0 (sin of the exactly reduced
    `π(x - round x)`); +inf at 0, -0.0, the negative integers and ±inf, as torch. Max
    relative error 7e-14 (where |lgamma| ≥ 0.1), 1e-14 absolute around the zeros."""
    x = _f64(b, a, "lgamma")
    neg = b.binary("lt", x, 0.0)
    lg = _lgamma_positive(b, b.where(neg, b.sub(1.0, x), x))
    sin = b.unary("abs", b.unary("sin", _pi_times_frac(b, x)))
    reflected = b.sub(b.sub(math.log(math.pi), b.unary("log", sin)), lg)
    y = b.where(_non_positive_int(b, x), _INF, b.where(neg, reflected, lg))
    return b.cast(y, out.dtype)


def _digamma_positive(b: _Builder, x: Value) -> Value:
    """digamma for x > 0 (and +inf, NaN): shifted to z ≥ 10, then
    `log z - 1/(2z) - Σ B_2k / (2k z^2k)`, less `Σ_{k<10} 1/(x + k)` where shifted."""
    small, z, xs = _shifted(b, x)
    r, r2 = _recip_sq(b, z)
    asym = b.sub(b.sub(b.unary("log", z), b.mul(r, 0.5)), b.mul(r2, _poly(b, r2, _DIGAMMA)))
    total = b.unary("reciprocal", xs)
    for k in range(1, _SHIFT):
        total = b.add(total, b.unary("reciprocal", b.add(xs, float(k))))
    return b.where(small, b.sub(asym, total), asym)


def _digamma_value(b: _Builder, x: Value) -> Value:
    neg = b.binary("lt", x, 0.0)
    psi = _digamma_positive(b, b.where(neg, b.sub(1.0, x), x))
    reflected = b.sub(psi, b.div(math.pi, b.unary("tan", _pi_times_frac(b, x))))
    y = b.where(neg, reflected, psi)
    # ±0 → ∓inf (torch: copysign(inf, -x)); negative integers and -inf → NaN
    y = b.where(b.binary("eq", x, 0.0), b.unary("neg", b.unary("reciprocal", x)), y)
    return b.where(b.binary("logical_and", neg, _is_int(b, x)), _NAN, y)


@_handles("aten.digamma.default")
def _digamma(b: _Builder, a: dict, out: Out) -> Value:
    """composed (f64): the asymptotic series after the recurrence for x > 0
    (`_digamma_positive`), the reflection `digamma(1 - x) - π / tan πx` for x < 0 (tan of the
    exactly reduced `π(x - round x)`); -inf at +0, +inf at -0, NaN at the negative integers
    and -inf, as torch. Max relative error 2e-14 (where |digamma| ≥ 0.1), 1.3e-15 absolute
    around the zeros."""
    return b.cast(_digamma_value(b, _f64(b, a, "digamma")), out.dtype)


_POLYGAMMA_MAX_ORDER = 6  # the tail series below is measured to 4e-14 up to here
_PI_F32 = 3.1415927410125732  # float32(π), the constant of torch's f32 trigamma


def _power(b: _Builder, r: Value, k: int) -> Value:
    y = r
    for _ in range(k - 1):
        y = b.mul(y, r)
    return y


def _hurwitz_tail_coeffs(n: int) -> list[float]:
    """ζ(n+1, z) ~ z^-n·(1/n + 1/(2z) + Σ_j d_j z^-2j), d_j = B_2j/(2j)!·(n+1)...(n+2j-1):
    [1/n, d_1, d_2, ...], the coefficients of the even powers of 1/z."""
    coeffs = [1 / n]
    for j, bern in enumerate(_BERNOULLI, start=1):
        rising = math.prod(range(n + 1, n + 2 * j))
        coeffs.append(float(bern * rising / math.factorial(2 * j)))
    return coeffs


def _hurwitz_zeta(b: _Builder, x: Value, n: int) -> Value:
    """ζ(n+1, x) = Σ_k (x+k)^-(n+1) for x > 0: the first 10 terms where x < 10, then the
    Euler-Maclaurin tail at z = x + 10 (`_hurwitz_tail_coeffs`)."""
    small, z, xs = _shifted(b, x)
    r, r2 = _recip_sq(b, z)
    even = _poly(b, r2, _hurwitz_tail_coeffs(n))
    tail = b.mul(_power(b, r, n), b.add(even, b.mul(r, 0.5)))
    head = _power(b, b.unary("reciprocal", xs), n + 1)
    for k in range(1, _SHIFT):
        head = b.add(head, _power(b, b.unary("reciprocal", b.add(xs, float(k))), n + 1))
    return b.where(small, b.add(tail, head), tail)


def _cot_derivative(n: int) -> list[int]:
    """P_n with dⁿ/dxⁿ cot(πx) = πⁿ·P_n(cot πx): P_0 = c, P_(k+1) = -(1 + c²)·P_k'
    (coefficients, lowest first)."""
    p = [0, 1]
    for _ in range(n):
        d = [i * p[i] for i in range(1, len(p))] + [0, 0]
        p = [-(d[i] + (d[i - 2] if i >= 2 else 0)) for i in range(len(d))]
    return p


def _reflection_term(b: _Builder, x: Value, n: int, dtype: str) -> Value:
    """π·dⁿ/dxⁿ cot(πx). n = 1: -π²/sin²(πx) with sin's argument πx rounded to `dtype`, as
    torch's trigamma takes sin(π·x) in the input's dtype (4e-4 off near -8 in f32, finite
    at the negative integers); n ≥ 2: a polynomial in cot of the exactly reduced argument."""
    if n == 1:
        if dtype == "f64":
            arg = b.mul(x, math.pi)
        else:
            arg = b.cast(b.cast(b.mul(x, _PI_F32), "f32"), "f64")
        s = b.unary("sin", arg)
        return b.div(-math.pi**2, b.mul(s, s))
    c = b.unary("reciprocal", b.unary("tan", _pi_times_frac(b, x)))
    return b.mul(_poly(b, c, [float(v) for v in _cot_derivative(n)]), math.pi ** (n + 1))


def _polygamma_value(b: _Builder, x: Value, n: int, dtype: str) -> Value:
    neg = b.binary("lt", x, 0.0)
    scale = (-1) ** (n + 1) * math.factorial(n)
    pos = b.mul(_hurwitz_zeta(b, b.where(neg, b.sub(1.0, x), x), n), float(scale))
    # ψ⁽ⁿ⁾(x) = (-1)ⁿ ψ⁽ⁿ⁾(1 - x) - π dⁿ/dxⁿ cot(πx)
    reflected = b.sub(b.mul(pos, float((-1) ** n)), _reflection_term(b, x, n, dtype))
    y = b.where(neg, reflected, pos)
    if n == 1:
        return y  # torch: +inf at ±0, 0 at +inf, NaN at -inf, finite at the negative integers
    pole = b.where(_non_positive_int(b, x), (-1) ** (n + 1) * _INF, y)
    return b.where(b.binary("eq", x, _INF), _NAN, pole)  # torch's zeta gives NaN at +inf


@_handles("aten.polygamma.default")
def _polygamma(b: _Builder, a: dict, out: Out) -> Value:
    """composed (f64): n = 0 is digamma (`_digamma_value`); 1 ≤ n ≤ 6 is
    `(-1)^(n+1) n! ζ(n+1, x)` for x ≥ 0 (`_hurwitz_zeta`: recurrence, then Euler-Maclaurin),
    the reflection `(-1)ⁿ ψ⁽ⁿ⁾(1 - x) - π dⁿ/dxⁿ cot(πx)` for x < 0 (cot of the exactly
    reduced argument, a polynomial in it for the derivatives). As torch: n = 1 takes
    sin(π·x) rounded in the result's dtype (`_reflection_term`); n ≥ 2 gives ±inf at the
    non-positive integers and -inf, NaN at +inf. Max relative error 2e-14 (n = 0), 5e-14
    (1 ≤ n ≤ 6); larger n is refused. (torch's own f64 trigamma is only good to ~5e-10.)"""
    n = a["n"]
    x = b.cast(_tensor(a, "self", "polygamma"), "f64")
    if n == 0:
        return b.cast(_digamma_value(b, x), out.dtype)
    if not 1 <= n <= _POLYGAMMA_MAX_ORDER:
        raise Unsupported(
            f"aten.polygamma: order n = {n} (n ≤ {_POLYGAMMA_MAX_ORDER} composed)")
    return b.cast(_polygamma_value(b, x, n, out.dtype), out.dtype)


# ---------------------------------------------------------------------------------------
# Inverse error function and normal quantile
# ---------------------------------------------------------------------------------------


def _as241(b: _Builder, q: Value, tail: Value) -> Value:
    """Wichura's AS241 ndtri from q = p - ½ and tail = min(p, 1 - p) (> 0), each given
    exactly by the caller."""
    central = b.mul(q, _ratio(b, b.sub(0.180625, b.mul(q, q)), _AS241_CENTRAL))
    s = b.unary("sqrt", b.unary("neg", b.unary("log", tail)))
    mid = _ratio(b, b.sub(s, 1.6), _AS241_MID)
    far = _ratio(b, b.sub(s, 5.0), _AS241_FAR)
    t = b.where(b.binary("le", s, 5.0), mid, far)
    t = b.where(b.binary("lt", q, 0.0), b.unary("neg", t), t)
    return b.where(b.binary("le", b.unary("abs", q), 0.425), central, t)


@_handles("aten.special_ndtri.default")
def _ndtri(b: _Builder, a: dict, out: Out) -> Value:
    """composed (f64): Wichura's AS241 rational approximations (`_as241`) with q = p - ½ and
    tail min(p, 1 - p); -inf at 0 (and -0.0), +inf at 1, NaN outside [0, 1]. Max relative
    error 7e-16."""
    p = _f64(b, a, "special_ndtri")
    y = _as241(b, b.sub(p, 0.5), b.binary("minimum", p, b.sub(1.0, p)))
    y = b.where(b.binary("eq", p, 0.0), -_INF, b.where(b.binary("eq", p, 1.0), _INF, y))
    outside = b.binary("logical_or", b.binary("lt", p, 0.0), b.binary("gt", p, 1.0))
    return b.cast(b.where(outside, _NAN, y), out.dtype)


@_handles("aten.erfinv.default")
def _erfinv(b: _Builder, a: dict, out: Out) -> Value:
    """composed (f64): `ndtri((1 + x)/2) / √2` by AS241 (`_as241`) from q = x/2 and
    tail (1 - |x|)/2, both exact (no rounding of 1 + x for tiny x); ±inf at ±1, NaN for
    |x| > 1. Max relative error 6.4e-16."""
    x = _f64(b, a, "erfinv")
    ax = b.unary("abs", x)
    y = b.mul(_as241(b, b.mul(x, 0.5), b.mul(b.sub(1.0, ax), 0.5)), math.sqrt(0.5))
    y = b.where(b.binary("eq", ax, 1.0), b.mul(x, _INF), y)
    return b.cast(b.where(b.binary("gt", ax, 1.0), _NAN, y), out.dtype)


# ---------------------------------------------------------------------------------------
# Modified Bessel functions of the first kind
# ---------------------------------------------------------------------------------------


def _bessel_series_coeffs(nu: int) -> list[float]:
    """1 / (k! (k + ν)!), k = 0.. : I_ν(x) = (x/2)^ν Σ c_k (x²/4)^k."""
    return [1 / (math.factorial(k) * math.factorial(k + nu))
            for k in range(_BESSEL_SERIES_TERMS)]


def _bessel_asymptotic_coeffs(nu: int) -> list[float]:
    """(-1)^k Π_{j≤k} (4ν² - (2j-1)²) / (k! 8^k): I_ν(x) ~ e^x/√(2πx) Σ c_k x^-k."""
    coeffs, c = [], 1.0
    for k in range(_BESSEL_ASYMPTOTIC_TERMS):
        coeffs.append(c)
        c *= -(4 * nu * nu - (2 * k + 1) ** 2) / ((k + 1) * 8)
    return coeffs


def _bessel_scaled(b: _Builder, x: Value, nu: int) -> Value:
    """exp(-|x|)·I_ν(|x|) (ν = 0, 1) for f64 x."""
    ax = b.unary("abs", x)
    big = b.binary("ge", ax, _BESSEL_SWITCH)
    small_x = b.where(big, 0.0, ax)  # keeps each branch's operand in its own range
    large_x = b.where(big, ax, _BESSEL_SWITCH)
    half = b.mul(small_x, 0.5)
    series = _poly(b, b.mul(half, half), _bessel_series_coeffs(nu))
    if nu:
        series = b.mul(series, half)
    series = b.mul(series, b.unary("exp", b.unary("neg", small_x)))
    asym = _poly(b, b.unary("reciprocal", large_x), _bessel_asymptotic_coeffs(nu))
    asym = b.div(asym, b.unary("sqrt", b.mul(large_x, 2 * math.pi)))
    return b.where(big, asym, series)


def _unscaled(b: _Builder, x: Value, scaled: Value) -> Value:
    """scaled·exp(|x|), as exp(|x|/2)·(exp(|x|/2)·scaled) so that f64 does not overflow
    before the result does; ±inf give NaN (inf·0), as torch's kernels."""
    half = b.unary("exp", b.mul(b.unary("abs", x), 0.5))
    return b.mul(half, b.mul(half, scaled))


def _odd(b: _Builder, x: Value, y: Value) -> Value:
    return b.where(b.binary("lt", x, 0.0), b.unary("neg", y), y)


def _bessel_handler(nu: int, scaled: bool, name: str, error: str):
    def handler(b: _Builder, a: dict, out: Out) -> Value:
        x = _f64(b, a, name)
        y = _bessel_scaled(b, x, nu)
        if not scaled:
            y = _unscaled(b, x, y)
        if nu:
            y = _odd(b, x, y)
        return b.cast(y, out.dtype)

    what = f"{'exp(-|x|)·' if scaled else ''}I{nu}(x)"
    handler.__doc__ = (
        f"composed (f64): {what} from the power series in (x/2)² for |x| < 18 (34 terms), "
        f"the asymptotic series in 1/|x| above (30 terms); max relative error {error}."
    )
    return handler


_handles("aten.i0.default")(_bessel_handler(0, False, "i0", "1.3e-15"))
_handles("aten.special_i0e.default")(_bessel_handler(0, True, "special_i0e", "1.2e-15"))
_handles("aten.special_i1.default")(_bessel_handler(1, False, "special_i1", "1.3e-15"))
_handles("aten.special_i1e.default")(_bessel_handler(1, True, "special_i1e", "1.2e-15"))


# ---------------------------------------------------------------------------------------
# Others
# ---------------------------------------------------------------------------------------


@_handles("aten.special_spherical_bessel_j0.default")
def _spherical_bessel_j0(b: _Builder, a: dict, out: Out) -> Value:
    """composed (f64): `sin x / x` (f64 sin and division are within an ulp everywhere),
    1 at ±0, 0 at ±inf (as torch). Max relative error 2e-16."""
    x = _f64(b, a, "special_spherical_bessel_j0", "x")
    y = b.div(b.unary("sin", x), x)
    y = b.where(b.binary("eq", x, 0.0), 1.0, b.where(b.unary("isinf", x), 0.0, y))
    return b.cast(y, out.dtype)


def _erfcx_fraction(b: _Builder, x: Value) -> Value:
    """Laplace's continued fraction `1/√π / (x + ½/(x + 1/(x + (3/2)/(x + ...))))`,
    40 levels, evaluated from the innermost; 5e-17 relative for x ≥ 2.5."""
    g = x
    for k in range(_ERFCX_FRACTION_TERMS, 0, -1):
        g = b.add(x, b.div(k / 2, g))
    return b.div(1 / math.sqrt(math.pi), g)


@_handles("aten.special_erfcx.default")
def _erfcx(b: _Builder, a: dict, out: Out) -> Value:
    """composed (f64): `exp(x²)·(1 - erf x)` for x < 2.5 (no cancellation: 1 - erf x >
    4e-4), Laplace's continued fraction above (`_erfcx_fraction`); +inf at -inf (overflow),
    0 at +inf. For an f32 result and x < 0, x² is rounded to f32 first, as torch's kernel
    does (it takes `2·exp(x·x) - erfcx(-x)` in f32). Max relative error 1.3e-13 (at x just
    below 2.5)."""
    x = _f64(b, a, "special_erfcx")
    low = b.binary("lt", x, _ERFCX_SWITCH)
    xl = b.where(low, x, 0.0)
    sq = b.mul(xl, xl)
    if out.dtype == "f32":
        # torch's exp(x·x) with x·x rounded to f32 differs by 5e-6 relative at x = -9
        rounded = b.cast(b.cast(sq, "f32"), "f64")
        sq = b.where(b.binary("lt", xl, 0.0), rounded, sq)
    direct = b.mul(b.unary("exp", sq), b.sub(1.0, b.unary("erf", xl)))
    fraction = _erfcx_fraction(b, b.where(low, _ERFCX_SWITCH, x))
    return b.cast(b.where(low, direct, fraction), out.dtype)

