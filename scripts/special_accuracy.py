"""Development-time check of python/kiln/fx_ops/special.py against mpmath (not run by the
tests; needs mpmath, no network).

    python3 scripts/special_accuracy.py            # every function, f64 inputs through kiln
    python3 scripts/special_accuracy.py lgamma+ i0 # some of them
    python3 scripts/special_accuracy.py --choices  # how the series lengths were chosen

Each function is translated with kiln's torch.compile front end, run on kiln's CPU backend on
f64 inputs over wide ranges, and compared with mpmath at 40 digits: the max relative error
(and, where the reference is below a floor, the max absolute error) is printed; the
handlers' docstrings quote these numbers.
"""

import sys
import warnings

import mpmath as mp
import torch

sys.path.insert(0, "python/tests")
from fx_harness import capture, drop_none_outputs, run_kiln, translate  # noqa: E402

warnings.filterwarnings("ignore")
mp.mp.dps = 40
GEN = torch.Generator().manual_seed(0)


def kiln_run(fn, x):
    (gm, inputs), = capture(fn, x)
    drop_none_outputs(gm)
    return run_kiln(translate(gm, "g"), gm, inputs, "cpu")[0]


def uniform(lo, hi, n=1500):
    return torch.rand(n, generator=GEN, dtype=torch.float64) * (hi - lo) + lo


def log_uniform(lo, hi, n=1500):
    return torch.exp(uniform(float(mp.log(lo)), float(mp.log(hi)), n))


def report(name, fn, ref, x, floor=0.0):
    """Max relative error where |ref| > floor, max absolute error elsewhere."""
    y = kiln_run(fn, x)
    rel, absolute = (0.0, None), (0.0, None)
    for xi, yi in zip(x.tolist(), y.tolist()):
        try:
            r = ref(mp.mpf(xi))
        except (ValueError, ZeroDivisionError):  # a pole
            continue
        err = abs(yi - r)
        if abs(r) > floor:
            if float(err / abs(r)) > rel[0]:
                rel = (float(err / abs(r)), xi)
        elif float(err) > absolute[0]:
            absolute = (float(err), xi)
    print(f"{name}: max rel {rel[0]:.2e} at {rel[1]}; max abs (|ref| <= {floor}) "
          f"{absolute[0]:.2e} at {absolute[1]}")


def ndtri_ref(p):
    if p >= 0.5:
        return -ndtri_ref(1 - p)
    x0 = mp.sqrt(2) * mp.erfinv(2 * p - 1) if p > 1e-30 else -mp.sqrt(-2 * mp.log(p))
    return mp.findroot(lambda t: mp.log(mp.ncdf(t)) - mp.log(p), x0)


def cases():
    pos = torch.cat([uniform(0, 30), log_uniform(1e-300, 1e300), uniform(0.5, 3)])
    neg = torch.cat([uniform(-30, 0), -log_uniform(1e-10, 1e15)])
    unit = torch.cat([uniform(-1, 1), 1 - log_uniform(1e-16, 1), log_uniform(1e-300, 1)])
    prob = torch.cat([uniform(0, 1), log_uniform(1e-300, 1), 1 - log_uniform(1e-16, 0.5)])
    bes = torch.cat([uniform(-40, 40), log_uniform(1e-300, 700), -log_uniform(1e-10, 700),
                     uniform(17, 19)])
    bes_e = torch.cat([bes, log_uniform(1, 1e300)])
    j0 = torch.cat([uniform(-50, 50), log_uniform(1e-300, 1e10)])
    erfcx = torch.cat([uniform(-26, 26), log_uniform(1e-300, 1e10), uniform(2.4, 2.6)])
    sp = torch.special
    yield "lgamma+", torch.lgamma, mp.loggamma, pos, 0.1
    yield "lgamma-", torch.lgamma, lambda v: mp.re(mp.loggamma(v)), neg, 0.1
    yield "digamma+", torch.digamma, mp.digamma, pos, 0.1
    yield "digamma-", torch.digamma, mp.digamma, neg, 0.1
    yield "erfinv", torch.erfinv, mp.erfinv, unit, 0.0
    yield "ndtri", sp.ndtri, ndtri_ref, prob, 0.0
    yield "i0", torch.i0, lambda v: mp.besseli(0, v), bes, 0.0
    yield "i0e", sp.i0e, lambda v: mp.besseli(0, v) * mp.exp(-abs(v)), bes_e, 0.0
    yield "i1", sp.i1, lambda v: mp.besseli(1, v), bes, 0.0
    yield "i1e", sp.i1e, lambda v: mp.besseli(1, v) * mp.exp(-abs(v)), bes_e, 0.0
    yield "j0", sp.spherical_bessel_j0, lambda v: mp.sin(v) / v, j0, 1e-3
    yield "erfcx", sp.erfcx, lambda v: mp.erfc(v) * mp.exp(v * v), erfcx, 0.0
    for n in range(1, 7):
        x = torch.cat([uniform(0, 30, 400), log_uniform(1e-30, 1e30, 300),
                       uniform(-30, 0, 400), -log_uniform(1e-6, 1e6, 200)])
        yield (f"polygamma{n}", lambda t, n=n: torch.polygamma(n, t),
               lambda v, n=n: mp.polygamma(n, v), x, 0.1)


def choices():
    """Series lengths: the Bessel power series at |x| = 18 and the asymptotic series' best
    truncation there; the erfc continued fraction's error at x = 2.5 for a few depths."""
    for nu in (0, 1):
        x = mp.mpf(18)
        exact = mp.besseli(nu, x)
        term, k = mp.mpf(1), 0
        while term > 1e-17 * exact / (x / 2) ** nu:
            k += 1
            term = term * x * x / 4 / (k * (k + nu))
        print(f"I{nu}: power series at x = 18 needs {k} terms")
        for terms in (20, 30, 36):
            s, c = 0, mp.mpf(1)
            for j in range(terms):
                s += c / x**j
                c *= -(4 * nu * nu - (2 * j + 1) ** 2) / ((j + 1) * 8)
            err = abs(mp.exp(x) / mp.sqrt(2 * mp.pi * x) * s / exact - 1)
            print(f"I{nu}: asymptotic series, {terms} terms, at x = 18: {float(err):.1e}")
    for depth in (30, 40, 60):
        x, g = mp.mpf(2.5), mp.mpf(2.5)
        for k in range(depth, 0, -1):
            g = x + mp.mpf(k) / 2 / g
        err = abs(1 / (mp.sqrt(mp.pi) * g) / (mp.erfc(x) * mp.exp(x * x)) - 1)
        print(f"erfcx continued fraction, depth {depth}, at x = 2.5: {float(err):.1e}")


def main(argv):
    if argv == ["--choices"]:
        choices()
        return
    for name, fn, ref, x, floor in cases():
        if not argv or name in argv:
            report(name, fn, ref, x, floor)


if __name__ == "__main__":
    main(sys.argv[1:])
