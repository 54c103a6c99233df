/*
 * kiln_math_test.c: accuracy and special-value checks of kiln_math.h against double-precision
 * libm, the C counterpart of codegen/src/cpu/math_tests.rs (same seeded inputs: SplitMix64,
 * sweeps, random values and bit patterns, special values).
 *
 *   gcc -O3 -march=native -DKILN_W=16 kiln_math_test.c -lm && ./a.out
 *   (KILN_W 16, 8 or 4; with or without -mno-fma; ./a.out N also sweeps every N-th f32 bit
 *   pattern through exp, log, log1p, expm1, log2, exp2, tan and atan)
 *
 * Each row prints the maximum error in ulps (|out - ref| over the f32 ulp at ref, ref the
 * unrounded f64 value, as math_tests.rs's `ulps`), the maximum relative error, both over
 * |ref| >= the row's floor, and the maximum absolute error below it. A row fails when its
 * ulps exceed math.rs's table bound plus 0.5 ulp (for FMA contraction differences), when
 * its absolute error below the floor exceeds the table's bound plus half an ulp of the
 * floor, or when a NaN, infinity or exact value is wrong. Every result is also checked to
 * be the same bits when computed alone (the other lanes 0) as among its neighbours (sin, cos
 * and tan give libm's value only to the lanes past 1e5). Exit status 1 on any failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KILN_W
#define KILN_W 16
#endif
/* pi and sqrt 2 (M_PI and M_SQRT2 are not ISO C) */
#define PI_ 3.14159265358979323846264338327950288
#define SQRT2_ 1.41421356237309504880168872420969808
#include "kiln_math.h"

/* ------------------------------------------------------------------------------------ */
/* inputs (math_tests.rs's Rng, sweep, log_sweep, around, specials, tiny, inputs)        */
/* ------------------------------------------------------------------------------------ */

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) {
    r->s += 0x9e3779b97f4a7c15ull;
    uint64_t z = r->s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [lo, hi) */
static float rng_uniform(rng_t *r, double lo, double hi) {
    double u = (double)(rng_next(r) >> 11) / (double)(1ull << 53);
    return (float)(lo + (hi - lo) * u);
}

static float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint32_t to_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* any bit pattern */
static float rng_bits(rng_t *r) { return from_bits((uint32_t)rng_next(r)); }

typedef struct {
    float *v;
    size_t n, cap;
} vec;

static void push(vec *a, float x) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 1024;
        a->v = realloc(a->v, a->cap * sizeof(float));
        if (!a->v) abort();
    }
    a->v[a->n++] = x;
}

static void append(vec *a, const vec *b) {
    for (size_t i = 0; i < b->n; i++) push(a, b->v[i]);
}

static void vfree(vec *a) {
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

static void sweep(vec *a, double lo, double hi, size_t n) {
    for (size_t i = 0; i < n; i++) push(a, (float)(lo + (hi - lo) * (double)i / (double)(n - 1)));
}

static void log_sweep(vec *a, double lo, double hi, size_t n) {
    double la = log(lo), lb = log(hi);
    for (size_t i = 0; i < n; i++) push(a, (float)exp(la + (lb - la) * (double)i / (double)(n - 1)));
}

/* every f32 within k ulps of x */
static void around(vec *a, float x, int k) {
    for (int d = -k; d <= k; d++) push(a, from_bits((uint32_t)((int64_t)to_bits(x) + d)));
}

static void specials(vec *a) {
    static const float base[] = {
        0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 0, 3.40282347e38f, -3.40282347e38f,
        1.17549435e-38f, -1.17549435e-38f, 0, 0, 1e-40f, -1e-40f, 1e-30f, -1e-30f, 1e-10f,
        -1e-10f, 1e-5f, -1e-5f, 0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -2.0f, 10.0f, -10.0f, 100.0f,
        -100.0f, 1e10f, -1e10f, 1e30f, -1e30f, 3.0f, 1.5f, 0.75f, 0.625f, 0, 0};
    size_t start = a->n;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
        float x = base[i];
        if (i == 6) x = from_bits(0x7fc01234u); /* NaN with a payload */
        if (i == 11) x = from_bits(1);
        if (i == 12) x = -from_bits(1);
        if (i == 39) x = nextafterf(0.625f, -INFINITY);
        if (i == 40) x = nextafterf(0.75f, -INFINITY);
        push(a, x);
    }
    size_t end = a->n;
    for (size_t i = start; i < end; i++) push(a, -a->v[i]);
}

/* tiny values of both signs */
static void tiny(vec *a) {
    size_t start = a->n;
    log_sweep(a, 1e-38, 1e-2, 20001);
    log_sweep(a, 1e-45, 1e-38, 101);
    size_t end = a->n;
    for (size_t i = start; i < end; i++) push(a, -a->v[i]);
}

/* sweep + random + special inputs on [lo, hi], then `extra` */
static vec inputs(uint64_t seed, double lo, double hi, const vec *extra) {
    rng_t r = {seed};
    vec v = {0};
    sweep(&v, lo, hi, 200001);
    for (int i = 0; i < 100000; i++) push(&v, rng_uniform(&r, lo, hi));
    for (int i = 0; i < 20000; i++) push(&v, rng_bits(&r));
    specials(&v);
    if (extra) append(&v, extra);
    return v;
}

static void trig_inputs_into(vec *v, uint64_t seed, double hi) {
    rng_t r = {seed};
    sweep(v, -hi, hi, 200001);
    for (int i = 0; i < 100000; i++) push(v, rng_uniform(&r, -hi, hi));
    int64_t kmax = (int64_t)(hi / (PI_ / 2));
    int64_t step = kmax / 2000 > 1 ? kmax / 2000 : 1;
    for (int64_t k = -kmax; k <= kmax; k += step) around(v, (float)((double)k * (PI_ / 2)), 2);
    tiny(v);
    vec s = {0};
    specials(&s);
    for (size_t i = 0; i < s.n; i++)
        if (fabs((double)s.v[i]) <= hi) push(v, s.v[i]);
    vfree(&s);
    push(v, NAN);
    push(v, INFINITY);
    push(v, -INFINITY);
}

static vec trig_inputs(uint64_t seed, double hi) {
    vec v = {0};
    trig_inputs_into(&v, seed, hi);
    return v;
}

/* the f32 values next to every multiple of pi/2 up to hi, then trig_inputs */
static vec tan_inputs(uint64_t seed, double hi) {
    vec v = {0};
    int64_t kmax = (int64_t)(hi / (PI_ / 2));
    for (int64_t k = -kmax; k <= kmax; k++) {
        vec a = {0};
        around(&a, (float)((double)k * (PI_ / 2)), 1);
        for (size_t i = 0; i < a.n; i++)
            if (fabs((double)a.v[i]) <= hi) push(&v, a.v[i]);
        vfree(&a);
    }
    trig_inputs_into(&v, seed, hi);
    return v;
}

/* ------------------------------------------------------------------------------------ */
/* running the routines                                                                 */
/* ------------------------------------------------------------------------------------ */

typedef void (*kern1)(const float *, float *, size_t);
typedef void (*kern2)(const float *, const float *, float *, size_t);

/* out[i] = f(x[i]) in whole vectors, the tail in one vector padded with 0 */
#define KERNEL1(name, f)                                                                     \
    static void name(const float *x, float *y, size_t n) {                                   \
        size_t i = 0;                                                                        \
        for (; i + KILN_W <= n; i += KILN_W) {                                               \
            kf v;                                                                            \
            memcpy(&v, x + i, sizeof v);                                                     \
            v = f(v);                                                                        \
            memcpy(y + i, &v, sizeof v);                                                     \
        }                                                                                    \
        if (i < n) {                                                                         \
            kf v;                                                                            \
            memset(&v, 0, sizeof v);                                                         \
            memcpy(&v, x + i, (n - i) * sizeof(float));                                      \
            v = f(v);                                                                        \
            memcpy(y + i, &v, (n - i) * sizeof(float));                                      \
        }                                                                                    \
    }

#define KERNEL2(name, f)                                                                     \
    static void name(const float *x, const float *y, float *o, size_t n) {                   \
        size_t i = 0;                                                                        \
        for (; i + KILN_W <= n; i += KILN_W) {                                               \
            kf a, b;                                                                         \
            memcpy(&a, x + i, sizeof a);                                                     \
            memcpy(&b, y + i, sizeof b);                                                     \
            a = f(a, b);                                                                     \
            memcpy(o + i, &a, sizeof a);                                                     \
        }                                                                                    \
        if (i < n) {                                                                         \
            kf a, b;                                                                         \
            memset(&a, 0, sizeof a);                                                         \
            memset(&b, 0, sizeof b);                                                         \
            memcpy(&a, x + i, (n - i) * sizeof(float));                                      \
            memcpy(&b, y + i, (n - i) * sizeof(float));                                      \
            a = f(a, b);                                                                     \
            memcpy(o + i, &a, (n - i) * sizeof(float));                                      \
        }                                                                                    \
    }

static kf gelu_shared(kf x) {
    kf d = kiln_exp_neg_half_sq(x);
    return kiln_gelu_erf_with(x, d);
}

KERNEL1(k_exp, kiln_exp)
KERNEL1(k_log, kiln_log)
KERNEL1(k_expm1, kiln_expm1)
KERNEL1(k_log1p, kiln_log1p)
KERNEL1(k_log2, kiln_log2)
KERNEL1(k_exp2, kiln_exp2)
KERNEL1(k_sin, kiln_sin)
KERNEL1(k_cos, kiln_cos)
KERNEL1(k_tan, kiln_tan)
KERNEL1(k_atan, kiln_atan)
KERNEL1(k_sinh, kiln_sinh)
KERNEL1(k_tanh, kiln_tanh)
KERNEL1(k_erf, kiln_erf)
KERNEL1(k_sigmoid, kiln_sigmoid)
KERNEL1(k_silu, kiln_silu)
KERNEL1(k_gelu_erf, kiln_gelu_erf)
KERNEL1(k_gelu_shared, gelu_shared)
KERNEL1(k_gelu_tanh, kiln_gelu_tanh)
KERNEL1(k_half_sq, kiln_exp_neg_half_sq)
KERNEL1(k_sqrt, kiln_sqrt)
KERNEL1(k_rsqrt, kiln_rsqrt)
KERNEL1(k_recip, kiln_recip)
KERNEL1(k_floor, kiln_floor)
KERNEL1(k_ceil, kiln_ceil)
KERNEL1(k_round, kiln_round)
KERNEL1(k_trunc, kiln_trunc)
KERNEL1(k_sign, kiln_sign)
KERNEL1(k_relu, kiln_relu)
KERNEL1(k_abs, kiln_abs)
KERNEL1(k_neg, kiln_neg)
KERNEL1(k_exp_core, kiln_exp_core)
KERNEL1(k_exp_scaled, kiln_exp_scaled)
KERNEL1(k_exp_scaled_flush, kiln_exp_scaled_flush)
KERNEL1(k_tanh_noclamp, kiln_tanh_noclamp)
KERNEL2(k_maximum, kiln_maximum)
KERNEL2(k_minimum, kiln_minimum)
KERNEL2(k_pow, kiln_pow)
KERNEL2(k_fmod, kiln_fmod)
KERNEL2(k_remainder, kiln_remainder)
KERNEL2(k_atan2, kiln_atan2)

/* ------------------------------------------------------------------------------------ */
/* f64 references (kiln_ir's UnaryOp::eval_f64 / BinaryOp::eval_f64)                    */
/* ------------------------------------------------------------------------------------ */

static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double r_silu(double x) { return x / (1.0 + exp(-x)); }
static double r_gelu(double x) { return 0.5 * x * (1.0 + erf(x / SQRT2_)); }
/* x Phi(x) from erfc: the reference of math.rs's gelu row (no left-tail cancellation) */
static double r_gelu_erfc(double x) { return x * 0.5 * erfc(-x / SQRT2_); }
static double r_gelu_tanh(double x) {
    double c = sqrt(2.0 / PI_);
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}
static double r_half_sq(double x) { return exp(-x * x / 2.0); }
static double r_rsqrt(double x) { return 1.0 / sqrt(x); }
static double r_recip(double x) { return 1.0 / x; }
static double r_relu(double x) { return x < 0.0 ? 0.0 : x; }
static double r_sign(double x) { return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : 0.0; }
static double r_neg(double x) { return -x; }
static double r_round(double x) { return nearbyint(x); } /* ties to even (default mode) */
static double r_maximum(double a, double b) {
    return (isnan(a) || isnan(b)) ? NAN : a > b ? a : b;
}
static double r_minimum(double a, double b) {
    return (isnan(a) || isnan(b)) ? NAN : a < b ? a : b;
}
static double r_remainder(double a, double b) {
    double m = fmod(a, b);
    return (m != 0.0 && ((b < 0.0) != (m < 0.0))) ? m + b : m;
}

/* ------------------------------------------------------------------------------------ */
/* checking                                                                             */
/* ------------------------------------------------------------------------------------ */

static int failures = 0;

/* what a row is held to */
typedef struct {
    double ulp;   /* max ulps over |ref| >= floor (the table's number; +0.5 slack added), <0: none */
    double floor; /* ulps/relative reported over |ref| >= floor, absolute below */
    double abs;   /* max absolute error below floor (the table's; slack added), 0: the default */
    int exact;    /* 1: bit for bit against the reference rounded to f32 (NaN: any NaN) */
    double rel;   /* >0: plain tolerance (rel or abs <= 1e-7) instead of ulps (gelu vs erf) */
} tol_t;

#define SLACK 0.5

static double ulps(float out, double r) {
    float a = fabsf((float)r);
    double ulp;
    if (a < 1.17549435e-38f)
        ulp = (double)from_bits(1);
    else if (a == 3.40282347e38f)
        ulp = (double)a - (double)nextafterf(a, 0.0f);
    else
        ulp = (double)nextafterf(a, INFINITY) - (double)a;
    return fabs((double)out - r) / ulp;
}

typedef struct {
    double max_ulp, max_rel, max_abs;
    float worst_x, worst_y;
    size_t count;
    int fails;
} stats_t;

static void report(const char *name, const stats_t *st, tol_t t) {
    char bound[64] = "exact";
    if (!t.exact && t.rel > 0)
        snprintf(bound, sizeof bound, "rel %.0e", t.rel);
    else if (!t.exact)
        snprintf(bound, sizeof bound, "%.2f+%.1f", t.ulp, SLACK);
    char u[16] = "      -";
    if (t.rel <= 0) snprintf(u, sizeof u, "%7.3f", st->max_ulp);
    printf("%-26s %s ulp  rel %.3e  (|y|>=%.0e)  abs-below %.2e  worst x %-14.7g %8zu values  "
           "[%s]%s\n",
           name, u, st->max_rel, t.floor, st->max_abs, (double)st->worst_x, st->count,
           bound, st->fails ? "  FAIL" : "");
    if (st->fails) failures++;
}

static void fail_msg(stats_t *st, const char *name, float x, float y, float out, double r,
                     const char *why) {
    if (st->fails < 6)
        printf("  FAIL %s(%.9g, %.9g) = %.9g (%#x), want %.9g: %s\n", name, (double)x, (double)y,
               (double)out, to_bits(out), r, why);
    st->fails++;
}

/* one result against its reference */
static void check_one(stats_t *st, const char *name, tol_t t, float x, float y, float out,
                      double r) {
    if (isnan(r) || isnan(out)) {
        if (!(isnan(r) && isnan(out))) fail_msg(st, name, x, y, out, r, "NaN mismatch");
        return;
    }
    float r32 = (float)r;
    if (t.exact) {
        if (to_bits(out) != to_bits(r32)) fail_msg(st, name, x, y, out, r, "not exact");
        return;
    }
    if (isinf(r32) || isinf(out)) {
        if (out != r32) fail_msg(st, name, x, y, out, r, "infinity mismatch");
        return;
    }
    double abs_err = fabs((double)out - r);
    double rel = r == 0.0 ? abs_err : abs_err / fabs(r);
    int exact_ok = out == r32;
    double min_normal = 1.17549435e-38;
    int tiny_ok = fabs(r) < min_normal && fabs((double)out) <= min_normal &&
                  (out == 0.0f || ((out > 0.0f) == (r > 0.0)));
    if (t.rel > 0) {
        if (fabs(r) >= t.floor && rel > st->max_rel) st->max_rel = rel;
        if (!(rel <= t.rel || abs_err <= 1e-7 || tiny_ok || exact_ok))
            fail_msg(st, name, x, y, out, r, "beyond tolerance");
        return;
    }
    if (fabs(r) >= t.floor) {
        double u = ulps(out, r);
        if (u > st->max_ulp) {
            st->max_ulp = u;
            st->worst_x = x;
            st->worst_y = y;
        }
        if (rel > st->max_rel) st->max_rel = rel;
        if (t.ulp >= 0 && u > t.ulp + SLACK && !exact_ok) {
            char why[64];
            snprintf(why, sizeof why, "%.3f ulp", u);
            fail_msg(st, name, x, y, out, r, why);
        }
    } else {
        if (abs_err > st->max_abs) st->max_abs = abs_err;
        int ok;
        if (t.abs > 0) {
            /* the table's bound plus half an ulp of the floor */
            double slack = SLACK * ((double)nextafterf((float)t.floor, INFINITY) - t.floor);
            ok = abs_err <= t.abs + slack;
        } else {
            ok = rel <= 2e-6;
        }
        if (!(ok || tiny_ok || exact_ok)) fail_msg(st, name, x, y, out, r, "absolute error");
    }
}

/* the same results whatever the other lanes hold: each element again alone in a vector of
 * zeros, in lane i mod KILN_W (the counterpart of math_tests.rs's scalar form) */
static void check_alone1(stats_t *st, const char *name, kern1 k, const vec *xs, const float *out) {
    float in[KILN_W], o[KILN_W];
    for (size_t i = 0; i < xs->n; i++) {
        size_t l = i % KILN_W;
        memset(in, 0, sizeof in);
        in[l] = xs->v[i];
        k(in, o, KILN_W);
        if (to_bits(o[l]) != to_bits(out[i]) && !(isnan(o[l]) && isnan(out[i])))
            fail_msg(st, name, xs->v[i], 0, o[l], out[i], "depends on the other lanes");
    }
}

static stats_t run1(const char *name, kern1 k, double (*ref)(double), const vec *xs, tol_t t) {
    stats_t st = {0};
    float *out = malloc(xs->n * sizeof(float));
    k(xs->v, out, xs->n);
    for (size_t i = 0; i < xs->n; i++) check_one(&st, name, t, xs->v[i], 0, out[i], ref(xs->v[i]));
    check_alone1(&st, name, k, xs, out);
    st.count = xs->n;
    free(out);
    report(name, &st, t);
    return st;
}

static stats_t run2(const char *name, kern2 k, double (*ref)(double, double), const vec *xs,
                    const vec *ys, tol_t t) {
    stats_t st = {0};
    size_t n = xs->n;
    float *out = malloc(n * sizeof(float));
    k(xs->v, ys->v, out, n);
    for (size_t i = 0; i < n; i++)
        check_one(&st, name, t, xs->v[i], ys->v[i], out[i], ref(xs->v[i], ys->v[i]));
    float a[KILN_W], b[KILN_W], o[KILN_W];
    for (size_t i = 0; i < n; i++) {
        size_t l = i % KILN_W;
        memset(a, 0, sizeof a);
        for (int m = 0; m < KILN_W; m++) b[m] = 1.0f;
        a[l] = xs->v[i];
        b[l] = ys->v[i];
        k(a, b, o, KILN_W);
        if (to_bits(o[l]) != to_bits(out[i]) && !(isnan(o[l]) && isnan(out[i])))
            fail_msg(&st, name, xs->v[i], ys->v[i], o[l], out[i], "depends on the other lanes");
    }
    st.count = n;
    free(out);
    report(name, &st, t);
    return st;
}

/* each of xs through kernel k in every lane of a vector; exact results wanted (NaN: any NaN;
 * zeros with their sign) */
static void expect(const char *name, kern1 k, float x, float want) {
    float xs[KILN_W], out[KILN_W];
    for (int l = 0; l < KILN_W; l++) xs[l] = x;
    k(xs, out, KILN_W);
    for (int l = 0; l < KILN_W; l++) {
        int ok = isnan(want) ? isnan(out[l]) : to_bits(out[l]) == to_bits(want);
        if (!ok) {
            printf("  FAIL special: %s(%.9g) = %.9g, want %.9g\n", name, (double)x, (double)out[l],
                   (double)want);
            failures++;
            return;
        }
    }
}

/* tolerances: math.rs's table (its measured maxima) */
static tol_t T(double ulp) { return (tol_t){ulp, 1e-30, 0, 0, 0}; }
static tol_t TF(double ulp, double floor, double abs) { return (tol_t){ulp, floor, abs, 0, 0}; }
static const tol_t EXACT = {-1, 1e-30, 0, 1, 0};

/* per-table bounds that depend on FMA */
#if KILN_FMA
#define LOG2_ULP 0.98
#define TAN_ULP 3.04
#define SINH_ULP 2.79
#else
#define LOG2_ULP 1.93
#define TAN_ULP 2.43
#define SINH_ULP 3.19
#endif

/* ------------------------------------------------------------------------------------ */
/* the tests                                                                            */
/* ------------------------------------------------------------------------------------ */

static void test_exp(void) {
    vec e = {0};
    around(&e, 88.72283f, 8);
    around(&e, -87.33655f, 8);
    around(&e, -103.9f, 4);
    tiny(&e);
    vec xs = inputs(1, -104.0, 89.0, &e);
    run1("exp", k_exp, exp, &xs, T(1.16));
    vfree(&xs);
    vfree(&e);
}

/* The range variants give kiln_exp's / kiln_tanh's bits on their ranges (exp_scaled may
 * differ by under an ulp of 2^-126 where the result is denormal). */
static void test_bounded_variants(void) {
    struct {
        const char *name;
        kern1 k, general;
        double lo, hi;
        int nan;
    } cases[] = {
        {"exp_core [-87.3, 88.7]", k_exp_core, k_exp, -87.3, 88.7, 0},
        {"exp_core [-1, 1]", k_exp_core, k_exp, -1, 1, 0},
        {"exp_scaled [-87.3, 88] NaN", k_exp_scaled, k_exp, -87.3, 88.0, 1},
        {"exp_scaled_flush [-inf, 0]", k_exp_scaled_flush, k_exp, -INFINITY, 0.0, 1},
        {"exp_scaled_flush [-200, 88]", k_exp_scaled_flush, k_exp, -200, 88.0, 1},
        {"tanh_noclamp [-10, 10]", k_tanh_noclamp, k_tanh, -10, 10, 1},
        {"tanh_noclamp [0.4, 1.9]", k_tanh_noclamp, k_tanh, 0.4, 1.9, 0},
        {"gelu with shared density", k_gelu_shared, k_gelu_erf, -120, 120, 1},
    };
    rng_t r = {17};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double lo = cases[c].lo > -200 ? cases[c].lo : -200, hi = cases[c].hi < 200 ? cases[c].hi : 200;
        vec raw = {0}, xs = {0};
        sweep(&raw, lo, hi, 100001);
        for (int i = 0; i < 50000; i++) push(&raw, rng_uniform(&r, lo, hi));
        push(&raw, (float)lo);
        push(&raw, (float)hi);
        push(&raw, 0.0f);
        push(&raw, -0.0f);
        if (cases[c].lo == -INFINITY) push(&raw, -INFINITY);
        if (cases[c].nan) {
            push(&raw, NAN);
            push(&raw, -NAN);
            push(&raw, from_bits(0x7fc001ffu));
            push(&raw, from_bits(0xffc00101u));
        }
        for (size_t i = 0; i < raw.n; i++) {
            float x = raw.v[i];
            if (isnan(x) || (cases[c].lo <= (double)x && (double)x <= cases[c].hi)) push(&xs, x);
        }
        float *g = malloc(xs.n * sizeof(float)), *b = malloc(xs.n * sizeof(float));
        cases[c].general(xs.v, g, xs.n);
        cases[c].k(xs.v, b, xs.n);
        int bad = 0;
        for (size_t i = 0; i < xs.n; i++) {
            int same = to_bits(g[i]) == to_bits(b[i]) || (isnan(g[i]) && isnan(b[i]));
            int denormal = fabsf(g[i]) < 1.17549435e-38f &&
                           fabsf(g[i] - b[i]) <= 1.17549435e-38f * 1.1920929e-7f;
            if (!(same || denormal)) {
                if (bad < 4)
                    printf("  FAIL %s at %.9g: general %.9g, variant %.9g\n", cases[c].name,
                           (double)xs.v[i], (double)g[i], (double)b[i]);
                bad++;
            }
        }
        printf("%-26s same bits as the general routine on %zu values%s\n", cases[c].name, xs.n,
               bad ? "  FAIL" : "");
        if (bad) failures++;
        free(g);
        free(b);
        vfree(&raw);
        vfree(&xs);
    }
}

static void test_log_family(void) {
    {
        vec e = {0};
        log_sweep(&e, 1e-45, 3.4e38, 300001);
        around(&e, 1.0f, 1000);
        log_sweep(&e, 0.5, 2.0, 100001);
        rng_t r = {2};
        for (int i = 0; i < 100000; i++) push(&e, fabsf(rng_bits(&r)));
        vec xs = inputs(2, 0.0, 100.0, &e);
        run1("log", k_log, log, &xs, T(0.81));
        vfree(&xs);
        vfree(&e);
    }
    {
        vec e = {0};
        tiny(&e);
        sweep(&e, -1.0, 1.0, 200001);
        log_sweep(&e, 1e-45, 3.4e38, 200001);
        sweep(&e, -0.5, 0.5, 100001);
        around(&e, -1.0f, 1000);
        around(&e, 16777216.0f, 100);
        rng_t r = {21};
        for (int i = 0; i < 100000; i++) push(&e, fabsf(rng_bits(&r)));
        vec xs = inputs(20, -1.0, 100.0, &e);
        run1("log1p", k_log1p, log1p, &xs, T(1.41));
        vfree(&xs);
        vfree(&e);
    }
    {
        vec e = {0};
        log_sweep(&e, 1e-45, 3.4e38, 300001);
        around(&e, 1.0f, 1000);
        around(&e, 2.0f, 1000);
        log_sweep(&e, 0.5, 2.0, 100001);
        rng_t r = {23};
        for (int i = 0; i < 100000; i++) push(&e, fabsf(rng_bits(&r)));
        vec xs = inputs(24, 0.0, 100.0, &e);
        run1("log2", k_log2, log2, &xs, T(LOG2_ULP));
        vfree(&xs);
        vfree(&e);
        /* powers of two, denormals included, give their exponent exactly */
        vec p = {0};
        for (int k = -149; k < 128; k++) push(&p, ldexpf(1.0f, k));
        run1("log2 of powers of two", k_log2, log2, &p, EXACT);
        vfree(&p);
    }
}

static void test_exp_family(void) {
    {
        vec e = {0};
        tiny(&e);
        sweep(&e, -1.0, 1.0, 200001);
        around(&e, 88.72283f, 8);
        around(&e, -17.4f, 100);
        vec xs = inputs(22, -25.0, 89.0, &e);
        run1("expm1", k_expm1, expm1, &xs, T(1.53));
        vfree(&xs);
        vfree(&e);
    }
    {
        vec e = {0};
        tiny(&e);
        sweep(&e, -1.0, 1.0, 100001);
        around(&e, 128.0f, 8);
        around(&e, -126.0f, 8);
        around(&e, -149.0f, 8);
        vec xs = inputs(25, -152.0, 129.0, &e);
        run1("exp2", k_exp2, exp2, &xs, T(1.15));
        vfree(&xs);
        vfree(&e);
        /* integers give their power of two exactly, denormals included; 0 below, inf above */
        vec p = {0};
        for (int k = -160; k < 140; k++) push(&p, (float)k);
        run1("exp2 of integers", k_exp2, exp2, &p, EXACT);
        vfree(&p);
    }
    {
        vec e = {0};
        tiny(&e);
        sweep(&e, -10.0, 10.0, 200001);
        around(&e, 9.0f, 100);
        around(&e, 89.41599f, 100);
        sweep(&e, 85.0, 90.0, 20001);
        sweep(&e, -90.0, -85.0, 20001);
        vec xs = inputs(30, -90.0, 90.0, &e);
        run1("sinh", k_sinh, sinh, &xs, T(SINH_ULP));
        vfree(&xs);
        vfree(&e);
    }
}

static void test_trig(void) {
    /* sin/cos: ulps over |y| >= 1e-3 on |x| <= 100, over |y| >= 0.1 to 1e5; absolute below */
    for (int c = 0; c < 2; c++) {
        kern1 k = c ? k_cos : k_sin;
        double (*ref)(double) = c ? cos : sin;
        vec xs = trig_inputs(3, 100.0);
        run1(c ? "cos |x|<=100" : "sin |x|<=100", k, ref, &xs, TF(1.57, 1e-3, 9.4e-9));
        vfree(&xs);
        xs = trig_inputs(4, 1e5);
        run1(c ? "cos |x|<=1e5" : "sin |x|<=1e5", k, ref, &xs, TF(1.57, 0.1, 9.4e-9));
        vfree(&xs);
    }
    {
        vec xs = tan_inputs(26, 100.0);
        run1("tan |x|<=100", k_tan, tan, &xs, T(TAN_ULP));
        vfree(&xs);
        xs = tan_inputs(27, 1e5);
        run1("tan |x|<=1e5", k_tan, tan, &xs, T(TAN_ULP));
        vfree(&xs);
        /* past 1e5 (or infinite): libm's f64 tangent, correctly rounded from it */
        rng_t r = {28};
        for (int i = 0; i < 200000; i++) {
            float x = rng_bits(&r);
            if (isnan(x) || fabsf(x) > 1e5f) push(&xs, x);
        }
        run1("tan past 1e5 (libm)", k_tan, tan, &xs, T(0.0));
        vfree(&xs);
        /* and sin/cos there too */
        r.s = 31;
        for (int i = 0; i < 100000; i++) {
            float x = rng_bits(&r);
            if (isnan(x) || fabsf(x) > 1e5f) push(&xs, x);
        }
        run1("sin past 1e5 (libm)", k_sin, sin, &xs, T(0.0));
        run1("cos past 1e5 (libm)", k_cos, cos, &xs, T(0.0));
        vfree(&xs);
    }
    {
        vec e = {0};
        tiny(&e);
        sweep(&e, -2.0, 2.0, 200001);
        log_sweep(&e, 1e-45, 3.4e38, 200001);
        around(&e, 1.0f, 1000);
        vec xs = inputs(29, -100.0, 100.0, &e);
        run1("atan", k_atan, atan, &xs, T(1.43));
        vfree(&xs);
        vfree(&e);
    }
    {
        /* sin and cos stay in [-1, 1] whatever the argument (NaN only for non-finite) */
        rng_t r = {4};
        vec xs = {0};
        for (int i = 0; i < 40003; i++) push(&xs, rng_bits(&r));
        float *o = malloc(xs.n * sizeof(float));
        for (int c = 0; c < 2; c++) {
            (c ? k_cos : k_sin)(xs.v, o, xs.n);
            for (size_t i = 0; i < xs.n; i++)
                if (!(fabsf(o[i]) <= 1.0f || (isnan(o[i]) && !isfinite(xs.v[i])))) {
                    printf("  FAIL %s(%g) = %g out of [-1, 1]\n", c ? "cos" : "sin",
                           (double)xs.v[i], (double)o[i]);
                    failures++;
                    break;
                }
        }
        free(o);
        vfree(&xs);
    }
}

static void test_activations(void) {
    vec e = {0};
    tiny(&e);
    sweep(&e, -1.0, 1.0, 100001);
    {
        vec xs = inputs(5, -20.0, 20.0, &e);
        run1("tanh", k_tanh, tanh, &xs, T(2.49));
        run1("erf", k_erf, erf, &xs, T(1.92));
        run1("sigmoid", k_sigmoid, r_sigmoid, &xs, T(2.28));
        vfree(&xs);
        xs = inputs(6, -110.0, 110.0, NULL);
        run1("sigmoid wide", k_sigmoid, r_sigmoid, &xs, T(2.28));
        vfree(&xs);
    }
    {
        /* left tails tending to 0: ulps over |y| >= 1e-3, the table's absolute bound below */
        vec xs = inputs(7, -20.0, 20.0, &e);
        run1("gelu_tanh", k_gelu_tanh, r_gelu_tanh, &xs, TF(12.6, 1e-3, 9.1e-10));
        run1("silu", k_silu, r_silu, &xs, TF(1.89, 1e-3, 1.2e-10));
        vfree(&xs);
        xs = inputs(8, -120.0, 120.0, NULL);
        run1("gelu_tanh wide", k_gelu_tanh, r_gelu_tanh, &xs, TF(12.6, 1e-3, 9.1e-10));
        run1("silu wide", k_silu, r_silu, &xs, TF(1.89, 1e-3, 1.2e-10));
        vfree(&xs);
    }
    {
        /* gelu against x erfc(-x/sqrt 2)/2, relatively down to 1e-30, left tail included */
        vec e2 = {0};
        append(&e2, &e);
        sweep(&e2, -14.0, -1.0, 100001);
        vec xs = inputs(9, -20.0, 20.0, &e2);
        run1("gelu_erf", k_gelu_erf, r_gelu_erfc, &xs, T(4.86));
        vfree(&xs);
        xs = inputs(10, -120.0, 120.0, NULL);
        run1("gelu_erf wide", k_gelu_erf, r_gelu_erfc, &xs, T(4.86));
        vfree(&xs);
        /* and against the plain reference 0.5 x (1 + erf(x/sqrt 2)), which cancels for x < -5 */
        xs = inputs(11, -20.0, 20.0, NULL);
        run1("gelu_erf vs 1+erf", k_gelu_erf, r_gelu, &xs, (tol_t){-1, 1e-3, 0, 0, 2e-6});
        vfree(&xs);
        vfree(&e2);
    }
    {
        vec e3 = {0};
        sweep(&e3, 12.0, 13.2, 100001);
        vec xs = inputs(12, -20.0, 20.0, &e3);
        vec more = inputs(13, -1e4, 1e4, NULL);
        append(&xs, &more);
        run1("exp_neg_half_sq", k_half_sq, r_half_sq, &xs, T(1.11));
        vfree(&xs);
        vfree(&more);
        vfree(&e3);
    }
    vfree(&e);
}

static void test_algebraic(void) {
    rng_t r = {9};
    vec xs = {0};
    for (int i = 0; i < 200000; i++) push(&xs, rng_bits(&r));
    log_sweep(&xs, 1e-45, 3.4e38, 100001);
    specials(&xs);
    run1("sqrt", k_sqrt, sqrt, &xs, EXACT);
    run1("recip", k_recip, r_recip, &xs, EXACT);
    run1("rsqrt", k_rsqrt, r_rsqrt, &xs, T(1.44));
    run1("neg", k_neg, r_neg, &xs, EXACT);
    run1("abs", k_abs, fabs, &xs, EXACT);
    run1("relu", k_relu, r_relu, &xs, EXACT);
    /* the rounding ops: also halves, the values next to them, and around 2^23 */
    sweep(&xs, -10.0, 10.0, 80001);
    for (int k = -40; k <= 40; k++) {
        around(&xs, (float)k * 0.5f, 2);
    }
    around(&xs, 8388608.0f, 4);
    around(&xs, -8388608.0f, 4);
    around(&xs, 4194304.5f, 4);
    around(&xs, 16777216.0f, 4);
    run1("floor", k_floor, floor, &xs, EXACT);
    run1("ceil", k_ceil, ceil, &xs, EXACT);
    run1("round (ties to even)", k_round, r_round, &xs, EXACT);
    run1("trunc", k_trunc, trunc, &xs, EXACT);
    run1("sign", k_sign, r_sign, &xs, EXACT);
    vfree(&xs);
}

static void pairs(vec *xs, vec *ys, const float *vals, size_t n) {
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            push(xs, vals[i]);
            push(ys, vals[j]);
        }
}

static void test_binary(void) {
    {
        vec s = {0}, xs = {0}, ys = {0};
        specials(&s);
        pairs(&xs, &ys, s.v, s.n);
        rng_t r = {10};
        for (int i = 0; i < 100000; i++) {
            push(&xs, rng_uniform(&r, -1e3, 1e3));
            push(&ys, rng_uniform(&r, -1e3, 1e3));
        }
        run2("maximum", k_maximum, r_maximum, &xs, &ys, EXACT);
        run2("minimum", k_minimum, r_minimum, &xs, &ys, EXACT);
        run2("fmod", k_fmod, fmod, &xs, &ys, EXACT);
        run2("remainder", k_remainder, r_remainder, &xs, &ys, T(0.0));
        run2("atan2", k_atan2, atan2, &xs, &ys, T(0.0));
        vfree(&s);
        vfree(&xs);
        vfree(&ys);
        /* fmod/remainder on random bit patterns (every exponent) */
        r.s = 32;
        for (int i = 0; i < 100000; i++) {
            push(&xs, rng_bits(&r));
            push(&ys, rng_bits(&r));
        }
        run2("fmod (bit patterns)", k_fmod, fmod, &xs, &ys, EXACT);
        run2("remainder (bit patterns)", k_remainder, r_remainder, &xs, &ys, T(0.0));
        run2("atan2 (bit patterns)", k_atan2, atan2, &xs, &ys, T(0.0));
        vfree(&xs);
        vfree(&ys);
    }
    {
        /* the NaN semantics of maximum/minimum (math_tests.rs) */
        float a[5] = {NAN, 1.0f, NAN, 2.0f, 3.0f}, b[5] = {1.0f, NAN, NAN, -0.0f, 4.0f}, o[5];
        k_maximum(a, b, o, 5);
        if (!(isnan(o[0]) && isnan(o[1]) && isnan(o[2]) && o[3] == 2.0f && o[4] == 4.0f)) {
            printf("  FAIL maximum NaN cases\n");
            failures++;
        }
        k_minimum(a, b, o, 5);
        if (!(isnan(o[0]) && isnan(o[1]) && isnan(o[2]) && to_bits(o[3]) == to_bits(-0.0f) &&
              o[4] == 3.0f)) {
            printf("  FAIL minimum NaN cases\n");
            failures++;
        }
        /* equal operands give the second: maximum(0, -0) = -0, minimum(-0, 0) = 0 */
        float z1[2] = {0.0f, -0.0f}, z2[2] = {-0.0f, 0.0f};
        k_maximum(z1, z2, o, 2);
        if (to_bits(o[0]) != to_bits(-0.0f) || to_bits(o[1]) != to_bits(0.0f)) {
            printf("  FAIL maximum of zeros\n");
            failures++;
        }
        k_minimum(z1, z2, o, 2);
        if (to_bits(o[0]) != to_bits(-0.0f) || to_bits(o[1]) != to_bits(0.0f)) {
            printf("  FAIL minimum of zeros\n");
            failures++;
        }
    }
    {
        static const float vals[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0.5f, -0.5f, 3.0f,
                                     -3.0f, -8.0f, 1.0f / 3.0f, 2.5f, 1e-40f, 1e30f, INFINITY,
                                     -INFINITY, NAN};
        vec xs = {0}, ys = {0};
        pairs(&xs, &ys, vals, sizeof vals / sizeof vals[0]);
        rng_t r = {11};
        for (int i = 0; i < 50000; i++) {
            push(&xs, rng_uniform(&r, 0.0, 10.0));
            push(&ys, rng_uniform(&r, -30.0, 30.0));
            push(&xs, -roundf(rng_uniform(&r, 0.0, 4.0)));
            push(&ys, roundf(rng_uniform(&r, -10.0, 10.0)));
        }
        run2("pow", k_pow, pow, &xs, &ys, T(0.80));
        vfree(&xs);
        vfree(&ys);
        float a[7] = {0.0f, -8.0f, -2.0f, 1.0f, NAN, 0.0f, -1.0f};
        float b[7] = {0.0f, 1.0f / 3.0f, 3.0f, NAN, 0.0f, -1.0f, INFINITY}, o[7];
        k_pow(a, b, o, 7);
        if (!(o[0] == 1.0f && isnan(o[1]) && o[2] == -8.0f && o[3] == 1.0f && o[4] == 1.0f &&
              o[5] == INFINITY && o[6] == 1.0f)) {
            printf("  FAIL pow edge cases\n");
            failures++;
        }
    }
}

static void test_specials(void) {
    const float inf = INFINITY, nan = NAN;
    struct {
        const char *name;
        kern1 k;
        float x, want;
    } cases[] = {
        {"exp", k_exp, inf, inf}, {"exp", k_exp, -inf, 0.0f}, {"exp", k_exp, nan, nan},
        {"exp", k_exp, 88.73f, inf}, {"exp", k_exp, -104.0f, 0.0f}, {"exp", k_exp, 0.0f, 1.0f},
        {"exp", k_exp, -0.0f, 1.0f},
        {"log", k_log, 0.0f, -inf}, {"log", k_log, -0.0f, -inf}, {"log", k_log, -1.0f, nan},
        {"log", k_log, -inf, nan}, {"log", k_log, inf, inf}, {"log", k_log, nan, nan},
        {"log", k_log, 1.0f, 0.0f},
        {"tanh", k_tanh, inf, 1.0f}, {"tanh", k_tanh, -inf, -1.0f}, {"tanh", k_tanh, nan, nan},
        {"tanh", k_tanh, 20.0f, 1.0f}, {"tanh", k_tanh, 0.0f, 0.0f}, {"tanh", k_tanh, -0.0f, -0.0f},
        {"erf", k_erf, inf, 1.0f}, {"erf", k_erf, -inf, -1.0f}, {"erf", k_erf, nan, nan},
        {"erf", k_erf, 0.0f, 0.0f}, {"erf", k_erf, -0.0f, -0.0f},
        {"sigmoid", k_sigmoid, inf, 1.0f}, {"sigmoid", k_sigmoid, -inf, 0.0f},
        {"sigmoid", k_sigmoid, nan, nan}, {"sigmoid", k_sigmoid, -100.0f, 0.0f},
        {"sin", k_sin, inf, nan}, {"sin", k_sin, -inf, nan}, {"sin", k_sin, nan, nan},
        {"sin", k_sin, 0.0f, 0.0f}, {"sin", k_sin, -0.0f, -0.0f},
        {"cos", k_cos, inf, nan}, {"cos", k_cos, nan, nan}, {"cos", k_cos, 0.0f, 1.0f},
        {"cos", k_cos, -0.0f, 1.0f},
        {"gelu_erf", k_gelu_erf, inf, inf}, {"gelu_erf", k_gelu_erf, -inf, nan},
        {"gelu_erf", k_gelu_erf, nan, nan}, {"gelu_erf", k_gelu_erf, 0.0f, 0.0f},
        {"gelu_tanh", k_gelu_tanh, inf, inf}, {"gelu_tanh", k_gelu_tanh, nan, nan},
        {"silu", k_silu, inf, inf}, {"silu", k_silu, nan, nan},
        {"relu", k_relu, nan, nan}, {"relu", k_relu, -0.0f, -0.0f}, {"relu", k_relu, -1.0f, 0.0f},
        {"relu", k_relu, -inf, 0.0f}, {"relu", k_relu, inf, inf}, {"relu", k_relu, -1e-45f, 0.0f},
        {"sqrt", k_sqrt, -1.0f, nan}, {"sqrt", k_sqrt, -0.0f, -0.0f}, {"sqrt", k_sqrt, inf, inf},
        {"rsqrt", k_rsqrt, 0.0f, inf}, {"rsqrt", k_rsqrt, -0.0f, -inf},
        {"rsqrt", k_rsqrt, -1.0f, nan}, {"rsqrt", k_rsqrt, inf, 0.0f},
        {"recip", k_recip, -0.0f, -inf}, {"recip", k_recip, 0.0f, inf},
        {"log1p", k_log1p, -1.0f, -inf}, {"log1p", k_log1p, -1.5f, nan},
        {"log1p", k_log1p, -inf, nan}, {"log1p", k_log1p, inf, inf}, {"log1p", k_log1p, nan, nan},
        {"log1p", k_log1p, 0.0f, 0.0f}, {"log1p", k_log1p, -0.0f, -0.0f},
        {"log1p", k_log1p, 3.40282347e38f, 88.72284f},
        {"expm1", k_expm1, inf, inf}, {"expm1", k_expm1, -inf, -1.0f}, {"expm1", k_expm1, nan, nan},
        {"expm1", k_expm1, 88.73f, inf}, {"expm1", k_expm1, 3.40282347e38f, inf},
        {"expm1", k_expm1, -17.5f, -1.0f}, {"expm1", k_expm1, -1e30f, -1.0f},
        {"expm1", k_expm1, 0.0f, 0.0f}, {"expm1", k_expm1, -0.0f, -0.0f},
        {"expm1", k_expm1, 1e-45f, 1e-45f}, {"expm1", k_expm1, -1e-45f, -1e-45f},
        {"log2", k_log2, 0.0f, -inf}, {"log2", k_log2, -0.0f, -inf}, {"log2", k_log2, -1.0f, nan},
        {"log2", k_log2, -inf, nan}, {"log2", k_log2, inf, inf}, {"log2", k_log2, nan, nan},
        {"log2", k_log2, 1.0f, 0.0f}, {"log2", k_log2, 1e-45f, -149.0f},
        {"log2", k_log2, 1024.0f, 10.0f},
        {"exp2", k_exp2, inf, inf}, {"exp2", k_exp2, -inf, 0.0f}, {"exp2", k_exp2, nan, nan},
        {"exp2", k_exp2, 128.0f, inf}, {"exp2", k_exp2, 1e30f, inf},
        {"exp2", k_exp2, -149.0f, 1e-45f}, {"exp2", k_exp2, -151.0f, 0.0f},
        {"exp2", k_exp2, 0.0f, 1.0f}, {"exp2", k_exp2, -0.0f, 1.0f},
        {"exp2", k_exp2, 127.0f, 1.7014118e38f},
        {"tan", k_tan, 0.0f, 0.0f}, {"tan", k_tan, -0.0f, -0.0f}, {"tan", k_tan, inf, nan},
        {"tan", k_tan, -inf, nan}, {"tan", k_tan, nan, nan},
        {"atan", k_atan, inf, 1.57079632679489661923f}, {"atan", k_atan, -inf, -1.57079632679489661923f},
        {"atan", k_atan, nan, nan}, {"atan", k_atan, 0.0f, 0.0f}, {"atan", k_atan, -0.0f, -0.0f},
        {"atan", k_atan, 3.40282347e38f, 1.57079632679489661923f},
        {"sinh", k_sinh, inf, inf}, {"sinh", k_sinh, -inf, -inf}, {"sinh", k_sinh, nan, nan},
        {"sinh", k_sinh, 0.0f, 0.0f}, {"sinh", k_sinh, -0.0f, -0.0f},
        {"sinh", k_sinh, 1e-45f, 1e-45f}, {"sinh", k_sinh, -1e-45f, -1e-45f},
        {"sinh", k_sinh, 89.5f, inf}, {"sinh", k_sinh, -89.5f, -inf},
        {"exp_neg_half_sq", k_half_sq, inf, 0.0f}, {"exp_neg_half_sq", k_half_sq, -inf, 0.0f},
        {"exp_neg_half_sq", k_half_sq, nan, nan}, {"exp_neg_half_sq", k_half_sq, 0.0f, 1.0f},
        {"exp_neg_half_sq", k_half_sq, -0.0f, 1.0f}, {"exp_neg_half_sq", k_half_sq, 14.0f, 0.0f},
        {"sign", k_sign, nan, 0.0f}, {"sign", k_sign, -0.0f, 0.0f}, {"sign", k_sign, -inf, -1.0f},
        {"sign", k_sign, 1e-45f, 1.0f},
        {"round", k_round, 0.5f, 0.0f}, {"round", k_round, 1.5f, 2.0f},
        {"round", k_round, 2.5f, 2.0f}, {"round", k_round, -0.5f, -0.0f},
        {"round", k_round, -2.5f, -2.0f}, {"round", k_round, nan, nan},
        {"floor", k_floor, -0.0f, -0.0f}, {"floor", k_floor, -0.5f, -1.0f},
        {"ceil", k_ceil, -0.5f, -0.0f}, {"ceil", k_ceil, 0.5f, 1.0f},
        {"trunc", k_trunc, -0.5f, -0.0f}, {"trunc", k_trunc, -inf, -inf},
    };
    size_t n = sizeof cases / sizeof cases[0];
    int before = failures;
    for (size_t i = 0; i < n; i++) expect(cases[i].name, cases[i].k, cases[i].x, cases[i].want);
    printf("%-26s %zu cases%s\n", "special values", n, failures > before ? "  FAIL" : "");
}

/* every `stride`-th f32 through the routines whose table rows are also over 1 in 31 */
static void every_f32(uint64_t stride) {
    struct {
        const char *name;
        kern1 k;
        double (*ref)(double);
        double ulp;
    } ops[] = {
        {"exp", k_exp, exp, 1.16},       {"log", k_log, log, 0.81},
        {"log1p", k_log1p, log1p, 1.41}, {"expm1", k_expm1, expm1, 1.53},
        {"log2", k_log2, log2, LOG2_ULP}, {"exp2", k_exp2, exp2, 1.15},
        {"tan", k_tan, tan, TAN_ULP},    {"atan", k_atan, atan, 1.43},
    };
    size_t chunk = 1 << 20;
    float *xs = malloc(chunk * sizeof(float)), *out = malloc(chunk * sizeof(float));
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        stats_t st = {0};
        tol_t t = T(ops[o].ulp);
        char name[64];
        snprintf(name, sizeof name, "%s, 1 f32 in %llu", ops[o].name, (unsigned long long)stride);
        uint64_t b = 0;
        while (b < (1ull << 32)) {
            size_t n = 0;
            for (; n < chunk && b < (1ull << 32); n++, b += stride) xs[n] = from_bits((uint32_t)b);
            ops[o].k(xs, out, n);
            for (size_t i = 0; i < n; i++) check_one(&st, name, t, xs[i], 0, out[i], ops[o].ref(xs[i]));
            st.count += n;
        }
        report(name, &st, t);
    }
    free(xs);
    free(out);
}

int main(int argc, char **argv) {
    printf("kiln_math.h: KILN_W %d, KILN_FMA %d, %s %s\n", KILN_W, KILN_FMA,
#ifdef __clang__
           "clang",
#else
           "gcc",
#endif
           __VERSION__);
    test_specials();
    test_exp();
    test_bounded_variants();
    test_log_family();
    test_exp_family();
    test_trig();
    test_activations();
    test_algebraic();
    test_binary();
    if (argc > 1) every_f32(strtoull(argv[1], NULL, 10));
    if (failures) {
        printf("%d FAILED\n", failures);
        return 1;
    }
    printf("all passed\n");
    return 0;
}
