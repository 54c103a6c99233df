/*
 * kiln_math.h: kiln's pointwise float routines on GCC/Clang vector types (C11).
 *
 * A port of the Cranelift emitters in codegen/src/cpu/math.rs and codegen/src/cpu/math/
 * (exp_log.rs, trig.rs, erf.rs, act.rs, emit.rs): the same algorithms, the same polynomial
 * coefficients and split constants, the same special-case handling. math.rs's module doc
 * has the table of methods and measured error bounds that the one-line comments below
 * repeat; errors are against the f64 reference, relative over |y| >= 1e-30 unless said.
 * kiln_math_test.c (next to this file) checks every routine against those bounds.
 *
 * Use: `#define KILN_W 16` (or 8, or 4: f32 lanes per vector), then include this file.
 * Only <stdint.h>, <math.h> and <string.h> are included; GCC >= 9 or Clang (vector
 * extensions, __builtin_convertvector). Every routine is lane-wise on kf;
 * the result of a lane never depends on the other lanes. Plain -O3 (no -ffast-math): FMA
 * contraction of separate multiplies and adds is harmless (math.rs has FMA and non-FMA
 * forms too); the multiply-adds math.rs fuses when the host has FMA are fused explicitly
 * here when __FMA__ is defined (KILN_FMA), and are a multiply and an add otherwise.
 *
 * As in math.rs, only pow, fmod, atan2 (and remainder, from fmod) call libm, lane by lane,
 * and sin/cos/tan for lanes past |x| = 1e5 (or infinite), in double precision and rounded
 * once, through a branch taken only when some lane needs it.
 *
 * Not here (as in math.rs): the fitted polynomials for bounded arguments (math/fitted.rs),
 * and relu6/hardswish/mish, which are decomposed before the cpu backend sees them.
 */
#ifndef KILN_MATH_H
#define KILN_MATH_H

#include <stdint.h>
#include <math.h>
#include <string.h>

#ifndef KILN_W
#error "define KILN_W (f32 lanes per vector: 4, 8 or 16) before including kiln_math.h"
#endif

typedef float kf __attribute__((vector_size(4 * KILN_W)));    /* f32 lanes */
typedef int32_t ki __attribute__((vector_size(4 * KILN_W)));  /* i32 lanes; masks: -1 / 0 */
typedef uint32_t ku __attribute__((vector_size(4 * KILN_W)));
typedef double kiln__kd __attribute__((vector_size(8 * KILN_W))); /* tan's f64 reduction */

/* 1 where the multiply-adds are fused (math.rs's `fma` flag), else 0. */
#if defined(__FMA__)
#define KILN_FMA 1
#else
#define KILN_FMA 0
#endif

#ifdef __has_builtin
#define KILN__HAS_BUILTIN(x) __has_builtin(x)
#else
#define KILN__HAS_BUILTIN(x) 0
#endif

#define KILN_INLINE static inline __attribute__((always_inline, unused))

/* KILN_W 16 on a machine without AVX-512: GCC notes that 64-byte vector arguments change the
 * ABI; these routines are always inlined, so the note is noise (popped at the end). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

/* ------------------------------------------------------------------------------------ */
/* Vocabulary (emit.rs's Em)                                                            */
/* ------------------------------------------------------------------------------------ */

/* Every lane `c`. */
KILN_INLINE kf kiln__c(float c) {
    kf r;
    for (int l = 0; l < KILN_W; l++) r[l] = c;
    return r;
}

/* Every lane `c` (an integer). */
KILN_INLINE ki kiln__ci(int32_t c) {
    ki r;
    for (int l = 0; l < KILN_W; l++) r[l] = c;
    return r;
}

/* Every lane the float whose bits are `b`. */
KILN_INLINE kf kiln__cbits(uint32_t b) { return (kf)kiln__ci((int32_t)b); }

/* `m ? a : b` lane by lane (m: -1 or 0 lanes). */
KILN_INLINE kf kiln_select(ki m, kf a, kf b) { return (kf)(((ki)a & m) | ((ki)b & ~m)); }

/* `a * b + c`, fused when KILN_FMA. */
KILN_INLINE kf kiln__fma(kf a, kf b, kf c) {
#if KILN_FMA
#if KILN__HAS_BUILTIN(__builtin_elementwise_fma)
    return __builtin_elementwise_fma(a, b, c);
#else
    kf r;
    for (int l = 0; l < KILN_W; l++) r[l] = __builtin_fmaf(a[l], b[l], c[l]);
    return r;
#endif
#else
    return a * b + c;
#endif
}

/* `a * k + c` and `a * m + k` with a constant k */
#define kiln__fmak(a, k, c) kiln__fma((a), kiln__c(k), (c))
#define kiln__fmac(a, m, k) kiln__fma((a), (m), kiln__c(k))

/* The sign bit of x. */
KILN_INLINE kf kiln__sign_of(kf x) { return (kf)((ki)x & kiln__ci(INT32_MIN)); }

/* `m ? 0 : x` */
KILN_INLINE kf kiln__zero_if(ki m, kf x) { return (kf)((ki)x & ~m); }

/* `m ? NaN : x` (an all-ones lane is a quiet NaN) */
KILN_INLINE kf kiln__nan_if(ki m, kf x) { return (kf)((ki)x | m); }

/* `min(x, k)` keeping a NaN x: `k < x ? k : x` (minps). */
KILN_INLINE kf kiln__min_keep_nan(kf x, float k) {
    kf kv = kiln__c(k);
    return kiln_select(kv < x, kv, x);
}

/* `max(x, k)` keeping a NaN x: `x < k ? k : x` (maxps). */
KILN_INLINE kf kiln__max_keep_nan(kf x, float k) {
    kf kv = kiln__c(k);
    return kiln_select(x < kv, kv, x);
}

/* `x | bits(y)` and `x ^ bits(y)` on floats */
KILN_INLINE kf kiln__or(kf x, kf y) { return (kf)((ki)x | (ki)y); }
KILN_INLINE kf kiln__xor(kf x, kf y) { return (kf)((ki)x ^ (ki)y); }

/* |x| (the sign bit cleared) */
KILN_INLINE kf kiln_abs(kf x) { return (kf)((ki)x & kiln__ci(0x7fffffff)); }

/* -x (the sign bit flipped) */
KILN_INLINE kf kiln_neg(kf x) { return kiln__xor(x, kiln__c(-0.0f)); }

/* Whether any lane of the mask is set. */
KILN_INLINE int kiln__any(ki m) {
    int32_t a = 0;
    for (int l = 0; l < KILN_W; l++) a |= m[l];
    return a != 0;
}

/* ------------------------------------------------------------------------------------ */
/* Constants (copied from the Rust files; f32 unless marked f64)                        */
/* ------------------------------------------------------------------------------------ */

/* exp_log.rs */
#define KILN__LOG2E 1.44269504088896340735992468100189214f /* std LOG2_E */
#define KILN__LOG2E_LO 1.925963e-8f
#define KILN__LN2 0.693147180559945309417232121458176568f /* std LN_2 */
#define KILN__SHIFTER 12582912.0f /* 1.5 * 2^23 */
#define KILN__SHIFTER_BITS 0x4b400000
#define KILN__LN2_HI 0.6933594f
#define KILN__LN2_LO (-0.00021219444f)
#define KILN__EXP_HI 88.72283f
#define KILN__EXP_LO (-87.33655f)
#define KILN__EXPM1_LO (-20.0f)
#define KILN__EXPM1_HI 89.0f
#define KILN__EXP2_CLAMP 160.0f
#define KILN__SQRT_HALF 0.707106781186547524400844362104849039f /* std FRAC_1_SQRT_2 */
#define KILN__TINY 2.9802322e-8f /* 2^-25 */
#define KILN__MIN_POSITIVE 1.17549435e-38f /* f32::MIN_POSITIVE, 2^-126 */
/* trig.rs */
#define KILN__TWO_OVER_PI 0.636619772367581343075535053490057448f /* std FRAC_2_PI */
#define KILN__PIO2_1 1.5703125f
#define KILN__PIO2_2 0.00048446655f
#define KILN__PIO2_3 (-6.3975784e-7f)
#define KILN__TAN_C1_BITS 0x3fc90fdau /* 1.5707963, under f32's pi/2 */
#define KILN__TAN_C2 7.5497894e-8f
#define KILN__TAN_C3 5.3903025e-15f
#define KILN__TAN_D1 1.5707963267341256    /* f64 */
#define KILN__TAN_D2 6.077100506303966e-11 /* f64 */
#define KILN__TAN_D3 2.0222662487959506e-21 /* f64 */
#define KILN__PIO2_HI 1.57079632679489661923132169163975144f /* std FRAC_PI_2 */
#define KILN__PIO2_LO (-4.371139e-8f)
#define KILN__TRIG_LIMIT 1e5f /* math.rs TRIG_LIMIT */
/* erf.rs */
#define KILN__ERF_SMALL 0.75f
#define KILN__ERF_C0_HI 1.12837916709551257389615890312154517f /* std FRAC_2_SQRT_PI */
#define KILN__ERF_C0_LO (-5.8635383e-8f)
#define KILN__HIGH_12_BITS 0xfffff000u
#define KILN__HALF_SQ_CLAMP 15.0f
/* act.rs */
#define KILN__TANH_CLAMP 20.0f
#define KILN__GELU_K1 1.5957692f
#define KILN__GELU_K2 0.071354814f

/* ------------------------------------------------------------------------------------ */
/* exp and friends (exp_log.rs)                                                         */
/* ------------------------------------------------------------------------------------ */

/* e^r = 1 + r(1 + r P(r)) for |r| <= ln2/2; EXP_P minimax relative 3.1e-9. */
KILN_INLINE kf kiln__exp_poly(kf r) {
    kf p = kiln__fmac(kiln__c(0.0013814613f), r, 0.00836871f);
    p = kiln__fmac(p, r, 0.04166839f);
    p = kiln__fmac(p, r, 0.16666521f);
    p = kiln__fmac(p, r, 0.49999994f);
    kf q = kiln__fmac(p, r, 1.0f);
    return kiln__fmac(q, r, 1.0f);
}

/* exp_reduced with lo = None: n = round(x/ln2) by the shifter (t holds n in its low
 * mantissa bits), r = x - n ln2 in two parts; returns e^r, sets *t. */
KILN_INLINE kf kiln__exp_reduced(kf x, kf *t) {
    kf sh = kiln__c(KILN__SHIFTER);
    *t = kiln__fmak(x, KILN__LOG2E, sh);
    kf n = *t - sh;
    kf r = kiln__fmak(n, -KILN__LN2_HI, x);
    r = kiln__fmak(n, -KILN__LN2_LO, r);
    return kiln__exp_poly(r);
}

/* exp_reduced with lo = Some(lo): the argument hi + lo, the reduction on each part. */
KILN_INLINE kf kiln__exp_reduced_hl(kf hi, kf lo, kf *t) {
    kf s = hi + lo;
    kf sh = kiln__c(KILN__SHIFTER);
    *t = kiln__fmak(s, KILN__LOG2E, sh);
    kf n = *t - sh;
    kf r = kiln__fmak(n, -KILN__LN2_HI, hi);
    kf l = kiln__fmak(n, -KILN__LN2_LO, lo);
    r = r + l;
    return kiln__exp_poly(r);
}

/* `k 2^n` for a power of two k and the n held in t's low bits: (bits(t) << 23) + bits(k). */
KILN_INLINE kf kiln__pow2_times(kf t, uint32_t k_bits) {
    return (kf)(((ku)t << 23) + k_bits);
}

/* 2^n for the n in t (normal for n in [-126, 127]). */
KILN_INLINE kf kiln__pow2_of(kf t) { return kiln__pow2_times(t, 0x3f800000u); }

/* exp_core: e^r with n added into the exponent bits; valid on [EXP_LO, EXP_HI], no NaN. */
KILN_INLINE kf kiln__exp_core_of(kf y, kf t) { return (kf)((ku)y + ((ku)t << 23)); }

/* Range variants (math.rs exp_in, act.rs tanh): where the loop nest's value ranges bound the
 * argument, math.rs leaves out the special cases the range excludes, with kiln_exp's bits on
 * that range (kiln_exp_scaled* round denormal results correctly where kiln_exp's are off by
 * under an ulp of 2^-126). For x in [lo, hi] (nan: x may be NaN):
 *   !nan, lo >= -87.33655, hi <= 88.72283   kiln_exp_core
 *   hi <= 88, lo >= -87.33655               kiln_exp_scaled
 *   hi <= 88                                kiln_exp_scaled_flush
 *   otherwise                               kiln_exp
 * sigmoid and silu are 1/(1 + e) and x/(1 + e) with e the variant for -x's range;
 * kiln_tanh_noclamp where 2 max(|lo|, |hi|) <= 20. */

/* exp(x) for x in [-87.33655, 88.72283], not NaN (exp_in: exp_core alone); kiln_exp's bits
 * there. */
KILN_INLINE kf kiln_exp_core(kf x) {
    kf t;
    kf y = kiln__exp_reduced(x, &t);
    return kiln__exp_core_of(y, t);
}

/* exp(x) for x in [-87.33655, 88.0] or NaN (exp_in, range.hi <= 88, range.lo >= EXP_LO:
 * exp_scaled, e^r times 2^n as a float, NaN stays NaN). */
KILN_INLINE kf kiln_exp_scaled(kf x) {
    kf t;
    kf y = kiln__exp_reduced(x, &t);
    return y * kiln__pow2_of(t);
}

/* exp(x) for x <= 88.0 or NaN, any lower end (exp_in, range.hi <= 88 with range.lo below
 * EXP_LO: exp_scaled plus the flush below EXP_LO); softmax's exp(x - max). */
KILN_INLINE kf kiln_exp_scaled_flush(kf x) {
    return kiln__zero_if(x < kiln__c(KILN__EXP_LO), kiln_exp_scaled(x));
}

/* exp: 2^n (1 + r(1 + r P(r))), n = round(x/ln2), 2-part ln2; 1.16 ulp; > 88.72283 -> +inf,
 * < -87.33655 -> 0 (outputs under 2^-126 flushed), NaN -> NaN. */
KILN_INLINE kf kiln_exp(kf x) {
    kf y = kiln_exp_core(x);
    ki over = ~(x <= kiln__c(KILN__EXP_HI)); /* unordered or greater */
    kf inf = x + kiln__c(INFINITY);            /* +inf, or NaN for a NaN x */
    y = kiln_select(over, inf, y);
    return kiln__zero_if(x < kiln__c(KILN__EXP_LO), y);
}

/* exp_hl: e^(hi + lo) for hi + lo <= 0, small lo; flushed under 2^-126. */
KILN_INLINE kf kiln__exp_hl(kf hi, kf lo) {
    kf t;
    kf e = kiln__exp_reduced_hl(hi, lo, &t);
    kf y = kiln__exp_core_of(e, t);
    kf s = hi + lo;
    return kiln__zero_if(s < kiln__c(KILN__EXP_LO), y);
}

/* expm1_reduced: e^r - 1 = r + r^2 P(r) with exp's P; sets *t (n in its low bits). */
KILN_INLINE kf kiln__expm1_reduced(kf y, kf *t) {
    kf sh = kiln__c(KILN__SHIFTER);
    *t = kiln__fmak(y, KILN__LOG2E, sh);
    kf n = *t - sh;
    kf r = kiln__fmak(n, -KILN__LN2_HI, y);
    r = kiln__fmak(n, -KILN__LN2_LO, r);
    kf p = kiln__fmac(kiln__c(0.0013814613f), r, 0.00836871f);
    p = kiln__fmac(p, r, 0.04166839f);
    p = kiln__fmac(p, r, 0.16666521f);
    p = kiln__fmac(p, r, 0.49999994f);
    kf r2 = r * r;
    return kiln__fma(r2, p, r);
}

/* expm1_nonpositive: e^y - 1 for y in [-20, 0] or NaN: 2^n (e^r - 1) + (2^n - 1). */
KILN_INLINE kf kiln__expm1_nonpositive(kf y) {
    kf t;
    kf em = kiln__expm1_reduced(y, &t);
    kf scale = kiln__pow2_of(t);
    kf sm1 = scale + kiln__c(-1.0f);
    return kiln__fma(scale, em, sm1);
}

/* keep_tiny: x where |x| < 2^-25, else y. */
KILN_INLINE kf kiln__keep_tiny(kf x, kf y) {
    kf ax = kiln_abs(x);
    return kiln_select(ax < kiln__c(KILN__TINY), x, y);
}

/* expm1: 2(h(e^r - 1) + (h - 1/2)), h = 2^(n-1), x clamped to [-20, 89]; 1.53 ulp;
 * > 88.72 -> +inf, -1 below -17.4, -0 -> -0, tiny x -> x. */
KILN_INLINE kf kiln_expm1(kf x) {
    kf y = kiln__max_keep_nan(x, KILN__EXPM1_LO);
    y = kiln__min_keep_nan(y, KILN__EXPM1_HI);
    kf t;
    kf em = kiln__expm1_reduced(y, &t);
    kf h = kiln__pow2_times(t, 0x3f000000u); /* 0.5 */
    kf hm = h + kiln__c(-0.5f);
    kf half = kiln__fma(h, em, hm);
    kf r = half + half;
    r = kiln__or(r, kiln__sign_of(x));
    return kiln__keep_tiny(x, r);
}

/* exp2: 2^r 2^(n>>1) 2^(n-(n>>1)), n = round(x), r = x - n exact, 2^r = e^(r ln2); 1.15 ulp;
 * exact on integers; >= 128 -> +inf; correctly rounded denormals (no flush), 0 below
 * 2^-150; x clamped to +-160; NaN -> NaN. */
KILN_INLINE kf kiln_exp2(kf x) {
    x = kiln__max_keep_nan(x, -KILN__EXP2_CLAMP);
    x = kiln__min_keep_nan(x, KILN__EXP2_CLAMP);
    kf sh = kiln__c(KILN__SHIFTER);
    kf t = x + sh;
    kf n = t - sh;
    kf r = x - n;
    kf q = r * kiln__c(KILN__LN2);
    kf y = kiln__exp_poly(q);
    ki ni = (ki)t - kiln__ci(KILN__SHIFTER_BITS);
    ki n1 = ni >> 1;
    ki n2 = ni - n1;
    y = y * (kf)(((ku)n1 << 23) + 0x3f800000u);
    y = y * (kf)(((ku)n2 << 23) + 0x3f800000u);
    return y;
}

/* ------------------------------------------------------------------------------------ */
/* logarithms (exp_log.rs)                                                              */
/* ------------------------------------------------------------------------------------ */

/* log_reduce: x = m 2^k, m in [sqrt(1/2), sqrt 2), f = m - 1 exact; `denormals`: scale
 * x < 2^-126 by 2^23 first. Returns f, sets *k. */
KILN_INLINE kf kiln__log_reduce(kf x, int denormals, kf *k) {
    kf xs, bias;
    if (denormals) {
        ki den = x < kiln__c(KILN__MIN_POSITIVE);
        kf scaled = x * kiln__c(8388608.0f); /* 2^23 */
        xs = kiln_select(den, scaled, x);
        bias = kiln_select(den, kiln__c(126.0f + 23.0f), kiln__c(126.0f));
    } else {
        xs = x;
        bias = kiln__c(126.0f);
    }
    ki ei = (ki)((ku)xs >> 23);
    kf ef = __builtin_convertvector(ei, kf);
    kf kk = ef - bias;
    /* m in [0.5, 1): the mantissa with the exponent of 0.5 */
    kf m = (kf)(((ki)xs & kiln__ci(0x007fffff)) | kiln__ci(0x3f000000));
    ki small = m < kiln__c(KILN__SQRT_HALF);
    kk = kiln_select(small, kk + kiln__c(-1.0f), kk);
    m = kiln_select(small, m + m, m);
    *k = kk;
    return m + kiln__c(-1.0f);
}

/* P(f) = (ln(1+f) - f + f^2/2)/f^3 on [sqrt(1/2)-1, sqrt 2-1] (LOG_P, minimax relative 5.8e-9). */
KILN_INLINE kf kiln__log_p(kf f) {
    kf p = kiln__fmac(kiln__c(-0.076345f), f, 0.12761578f);
    p = kiln__fmac(p, f, -0.13160181f);
    p = kiln__fmac(p, f, 0.14201757f);
    p = kiln__fmac(p, f, -0.16623357f);
    p = kiln__fmac(p, f, 0.20001227f);
    p = kiln__fmac(p, f, -0.2500082f);
    p = kiln__fmac(p, f, 0.3333333f);
    return p;
}

/* log_of: k ln2 + ln(1 + f), ln2 in two parts (k LN2_HI exact). */
KILN_INLINE kf kiln__log_of(kf f, kf k) {
    kf z = f * f;
    kf p = kiln__log_p(f);
    kf fz = f * z;
    kf y = p * fz;
    y = kiln__fmak(k, KILN__LN2_LO, y);
    y = kiln__fmak(z, -0.5f, y);
    kf r = f + y;
    return kiln__fmak(k, KILN__LN2_HI, r);
}

/* log_specials: +inf / NaN give x, negatives NaN, zeros -inf. */
KILN_INLINE kf kiln__log_specials(kf x, kf r) {
    ki big = ~(x < kiln__c(INFINITY)); /* unordered or >= inf */
    r = kiln_select(big, x, r);
    r = kiln__nan_if(x < kiln__c(0.0f), r);
    return kiln_select(x == kiln__c(0.0f), kiln__c(-INFINITY), r);
}

/* log: k ln2 + f - f^2/2 + f^3 P(f), x = m 2^k, denormals scaled by 2^23; 0.81 ulp;
 * log 0 = -inf, log(x<0) = NaN, log inf = inf, NaN -> NaN. */
KILN_INLINE kf kiln_log(kf x) {
    kf k;
    kf f = kiln__log_reduce(x, 1, &k);
    return kiln__log_specials(x, kiln__log_of(f, k));
}

/* log1p: u = 1 + x and its rounding error c, u = m 2^k, f = (m - 1) + c 2^-k, then as log;
 * 1.41 ulp; -1 -> -inf, < -1 -> NaN, inf -> inf, -0 -> -0, tiny x -> x. */
KILN_INLINE kf kiln_log1p(kf x) {
    kf u = x + kiln__c(1.0f);
    kf um1 = u + kiln__c(-1.0f);
    kf c = x - um1;
    kf k;
    kf f = kiln__log_reduce(u, 0, &k);
    /* 2^-k through the shifter's bits, k capped where 2^-k stays normal (c is 0 there) */
    kf kc = kiln__min_keep_nan(k, 126.0f);
    kf t = kiln__c(KILN__SHIFTER) - kc;
    kf s = kiln__pow2_of(t);
    f = kiln__fma(c, s, f);
    kf r = kiln__log_of(f, k);
    r = kiln__log_specials(u, r);
    return kiln__or(r, kiln__sign_of(x));
}

/* log2: k + L (f - f^2/2 + f^3 P(f)), L = log2(e) in two parts, k added last; 0.98 ulp with
 * FMA, 1.93 without; exact on powers of two (denormals too); specials as log. */
KILN_INLINE kf kiln_log2(kf x) {
    kf k;
    kf f = kiln__log_reduce(x, 1, &k);
    kf z = f * f;
    kf p = kiln__log_p(f);
    kf fz = f * z;
    kf y = p * fz;
    y = kiln__fmak(z, -0.5f, y);
    kf l = y * kiln__c(KILN__LOG2E);
    l = kiln__fmak(f, KILN__LOG2E_LO, l);
    l = kiln__fmak(f, KILN__LOG2E, l);
    kf r = l + k;
    return kiln__log_specials(x, r);
}

/* ------------------------------------------------------------------------------------ */
/* circular functions (trig.rs)                                                         */
/* ------------------------------------------------------------------------------------ */

/* The libm path of sin (0), cos (1), tan (2): f64 libm, rounded once, on the lanes set in
 * `big` (out of line: taken only when a lane is past 1e5 or infinite). */
static __attribute__((noinline, cold, unused)) void kiln__trig_libm(int which, const float *x,
                                                                    const int32_t *big,
                                                                    float *r) {
    for (int l = 0; l < KILN_W; l++) {
        if (!big[l]) continue;
        double d = (double)x[l];
        r[l] = (float)(which == 0 ? sin(d) : which == 1 ? cos(d) : tan(d));
    }
}

/* libm_past_trig_limit: `fast`, with libm's value on the lanes whose |x| > 1e5. */
KILN_INLINE kf kiln__past_trig_limit(kf x, kf fast, int which) {
    kf ax = kiln_abs(x);
    ki big = ax > kiln__c(KILN__TRIG_LIMIT);
    if (__builtin_expect(kiln__any(big), 0)) {
        float xs[KILN_W], rs[KILN_W];
        int32_t bs[KILN_W];
        memcpy(xs, &x, sizeof xs);
        memcpy(rs, &fast, sizeof rs);
        memcpy(bs, &big, sizeof bs);
        kiln__trig_libm(which, xs, bs, rs);
        memcpy(&fast, rs, sizeof rs);
    }
    return fast;
}

/* quadrant: j = round(2x/pi) by the shifter; t = j + SHIFTER holds j in its low bits. */
KILN_INLINE kf kiln__quadrant(kf x, kf *t) {
    kf sh = kiln__c(KILN__SHIFTER);
    *t = kiln__fmak(x, KILN__TWO_OVER_PI, sh);
    return *t - sh;
}

/* sin_cos: +-sin r or +-cos r by the quadrant; r = x - j pi/2 with 3-part pi/2. */
KILN_INLINE kf kiln__sin_cos(kf x, int is_cos) {
    kf t;
    kf j = kiln__quadrant(x, &t);
    kf r = kiln__fmak(j, -KILN__PIO2_1, x);
    r = kiln__fmak(j, -KILN__PIO2_2, r);
    r = kiln__fmak(j, -KILN__PIO2_3, r);
    r = kiln__min_keep_nan(r, 1.0f);
    r = kiln__max_keep_nan(r, -1.0f);
    kf z = r * r;
    kf sp = kiln__fmac(kiln__c(-0.00019515284f), z, 0.00833216f);
    sp = kiln__fmac(sp, z, -0.16666655f);
    kf rz = r * z;
    kf s = kiln__fma(sp, rz, r);
    kf cp = kiln__fmac(kiln__c(2.4433157e-5f), z, -0.0013887316f);
    cp = kiln__fmac(cp, z, 0.041666646f);
    kf zz = z * z;
    kf c0 = kiln__fmak(z, -0.5f, kiln__c(1.0f));
    kf c = kiln__fma(cp, zz, c0);
    ki q = (ki)t;
    if (is_cos) q = q + kiln__ci(1);
    ki odd = (q & kiln__ci(1)) == kiln__ci(1);
    kf v = kiln_select(odd, c, s);
    /* quadrants 2 and 3 negate: bit 1 of q moved to the sign bit */
    kf sign = (kf)(((ku)q << 30) & 0x80000000u);
    v = kiln__xor(v, sign);
    if (is_cos) return v;
    /* sin(-0) = -0: zeros take x itself */
    return kiln_select(x == kiln__c(0.0f), x, v);
}

/* sin: +-sin r / +-cos r by j mod 4, j = round(2x/pi), Cody-Waite 3-part pi/2; 1.57 ulp where
 * |y| >= 0.1 (>= 1e-3 for |x| <= 100), absolute <= 9.4e-9 near roots; |x| > 1e5 or inf:
 * libm f64 sin rounded; NaN -> NaN, +-0 -> +-0. */
KILN_INLINE kf kiln_sin(kf x) { return kiln__past_trig_limit(x, kiln__sin_cos(x, 0), 0); }

/* cos: as sin with the quadrant plus one; same bounds; cos(+-inf) = NaN. */
KILN_INLINE kf kiln_cos(kf x) { return kiln__past_trig_limit(x, kiln__sin_cos(x, 1), 1); }

/* tan's reduction without FMA: x - j pi/2 in f64 (pi/2 as 33 + 33 + 53 bits), rounded once. */
KILN_INLINE kf kiln__tan_reduce_f64(kf x, kf j) {
    kiln__kd xd = __builtin_convertvector(x, kiln__kd);
    kiln__kd jd = __builtin_convertvector(j, kiln__kd);
    kiln__kd r = xd;
    r = r - jd * KILN__TAN_D1;
    r = r - jd * KILN__TAN_D2;
    r = r - jd * KILN__TAN_D3;
    return __builtin_convertvector(r, kf);
}

/* tan: tan r (j even) or -1/tan r (j odd), tan r = r + r^3 T(r^2), r = x - j pi/2 exact but
 * for its final roundings (FMA: 3 fused steps, 3 x 24-bit pi/2; else in f64); 3.04 ulp with
 * FMA, 2.43 without, relative everywhere; |x| > 1e5 or inf: libm f64 tan rounded;
 * +-0 -> +-0, NaN -> NaN. */
KILN_INLINE kf kiln_tan(kf x) {
    kf t;
    kf j = kiln__quadrant(x, &t);
#if KILN_FMA
    kf r = kiln__fma(j, kiln__cbits(KILN__TAN_C1_BITS | 0x80000000u), x); /* -C1 */
    r = kiln__fmak(j, -KILN__TAN_C2, r);
    r = kiln__fmak(j, -KILN__TAN_C3, r);
#else
    kf r = kiln__tan_reduce_f64(x, j);
#endif
    kf z = r * r;
    kf p = kiln__fmac(kiln__c(0.0045840302f), z, -0.0003278691f);
    p = kiln__fmac(p, z, 0.011161609f);
    p = kiln__fmac(p, z, 0.02115805f);
    p = kiln__fmac(p, z, 0.05408361f);
    p = kiln__fmac(p, z, 0.13332458f);
    p = kiln__fmac(p, z, 0.33333355f);
    kf rz = r * z;
    kf tr = kiln__fma(p, rz, r);
    kf inv = kiln__c(-1.0f) / tr;
    ki odd = ((ki)t & kiln__ci(1)) == kiln__ci(1);
    return kiln__past_trig_limit(x, kiln_select(odd, inv, tr), 2);
}

/* atan: w + w^3 A(w^2), w = min(|x|,1)/max(|x|,1), past 1 pi/2 - atan w (2-part pi/2);
 * 1.43 ulp; atan +-inf = +-pi/2, +-0 -> +-0, NaN -> NaN. */
KILN_INLINE kf kiln_atan(kf x) {
    kf a = kiln_abs(x);
    kf num = kiln__min_keep_nan(a, 1.0f);
    kf den = kiln__max_keep_nan(a, 1.0f);
    kf w = num / den;
    kf z = w * w;
    kf p = kiln__fmac(kiln__c(-0.0017936229f), z, 0.010914612f);
    p = kiln__fmac(p, z, -0.031177856f);
    p = kiln__fmac(p, z, 0.05795761f);
    p = kiln__fmac(p, z, -0.08403451f);
    p = kiln__fmac(p, z, 0.109521866f);
    p = kiln__fmac(p, z, -0.14264242f);
    p = kiln__fmac(p, z, 0.19998547f);
    p = kiln__fmac(p, z, -0.333333f);
    kf wz = w * z;
    kf y = kiln__fma(p, wz, w);
    kf lo = kiln__c(KILN__PIO2_LO) - y;
    kf far = lo + kiln__c(KILN__PIO2_HI);
    kf r = kiln_select(a > kiln__c(1.0f), far, y);
    return kiln__or(r, kiln__sign_of(x));
}

/* ------------------------------------------------------------------------------------ */
/* hyperbolic functions and activations (math.rs, act.rs)                              */
/* ------------------------------------------------------------------------------------ */

/* sinh: +-(t + t/(t+1))/2, t = expm1(|x|), below 9; +-(e^(a/2)/2) e^(a/2) from 9;
 * 2.79 ulp with FMA, 3.19 without; finite to 89.4, +-inf -> +-inf, +-0 -> +-0, NaN -> NaN. */
KILN_INLINE kf kiln_sinh(kf x) {
    kf a = kiln_abs(x);
    kf t = kiln_expm1(a);
    kf t1 = t + kiln__c(1.0f);
    kf q = t / t1;
    kf s = t + q;
    kf small = s * kiln__c(0.5f);
    kf h = a * kiln__c(0.5f);
    kf u = kiln_exp(h);
    kf hu = u * kiln__c(0.5f);
    kf big = hu * u;
    kf m = kiln_select(a >= kiln__c(9.0f), big, small);
    m = kiln__xor(m, kiln__sign_of(x));
    return kiln__keep_tiny(x, m);
}

/* tanh from y = -2|x| (clamped or not): sign(x) (-t/(2 + t)), t = expm1(y). */
KILN_INLINE kf kiln__tanh_of(kf x, kf y) {
    kf t = kiln__expm1_nonpositive(y);
    kf nt = kiln__xor(t, kiln__c(-0.0f));
    kf d = t + kiln__c(2.0f);
    kf q = nt / d;
    /* |tanh x|, then x's sign (at x = 0, -t is -0: a bare OR would give tanh(+0) = -0) */
    q = (kf)((ki)q & kiln__ci(0x7fffffff));
    return kiln__or(q, kiln__sign_of(x));
}

/* tanh: sign(x) (-t/(2 + t)), t = expm1(-2|x|) (2|x| clamped to 20); 2.49 ulp;
 * tanh +-inf = +-1, +-0 -> +-0, NaN -> NaN. */
KILN_INLINE kf kiln_tanh(kf x) {
    kf y = kiln_abs(x) * kiln__c(-2.0f);
    return kiln__tanh_of(x, kiln__max_keep_nan(y, -KILN__TANH_CLAMP));
}

/* tanh for |x| <= 10 or NaN (act.rs tanh on a range whose 2|x| stays within the clamp: the
 * clamp left out); kiln_tanh's bits there. */
KILN_INLINE kf kiln_tanh_noclamp(kf x) {
    return kiln__tanh_of(x, kiln_abs(x) * kiln__c(-2.0f));
}

/* sigmoid: 1/(1 + e^-x) via kiln_exp; 2.28 ulp; x < -88.7 gives 0; +-inf -> 1, 0. */
KILN_INLINE kf kiln_sigmoid(kf x) {
    kf ex = kiln_exp(kiln_neg(x));
    return kiln__c(1.0f) / (ex + kiln__c(1.0f));
}

/* silu: x/(1 + e^-x) via kiln_exp; 1.89 ulp where |y| >= 1e-3, absolute <= 1.2e-10 below. */
KILN_INLINE kf kiln_silu(kf x) {
    kf ex = kiln_exp(kiln_neg(x));
    return x / (ex + kiln__c(1.0f));
}

/* gelu (tanh form): x/(1 + e^-2u), u = sqrt(2/pi)(x + 0.044715 x^3); 12.6 ulp where
 * |y| >= 1e-3 (the rounding of 2u), absolute <= 9.1e-10 below. */
KILN_INLINE kf kiln_gelu_tanh(kf x) {
    kf z = x * x;
    kf k = kiln__fmak(z, -KILN__GELU_K2, kiln__c(-KILN__GELU_K1));
    kf neg_2u = x * k;
    kf ex = kiln_exp(neg_2u);
    return x / (ex + kiln__c(1.0f));
}

/* ------------------------------------------------------------------------------------ */
/* erf, gelu and e^(-x^2/2) (erf.rs)                                                    */
/* ------------------------------------------------------------------------------------ */

/* erfc_scaled: R(a) = erfc(a) e^(a^2) for a in [0, 10], a polynomial in (a-3)/(a+3). */
KILN_INLINE kf kiln__erfc_scaled(kf a) {
    kf q = (a + kiln__c(-3.0f)) / (a + kiln__c(3.0f));
    kf p = kiln__fmac(kiln__c(5.5807217e-5f), q, 2.862433e-5f);
    p = kiln__fmac(p, q, -0.000594689f);
    p = kiln__fmac(p, q, 0.00071584544f);
    p = kiln__fmac(p, q, 0.004268966f);
    p = kiln__fmac(p, q, -0.024394244f);
    p = kiln__fmac(p, q, 0.071665846f);
    p = kiln__fmac(p, q, -0.15011579f);
    p = kiln__fmac(p, q, 0.2456038f);
    p = kiln__fmac(p, q, -0.32623357f);
    p = kiln__fmac(p, q, 0.17900115f);
    return p;
}

/* exp_neg_sq: e^(-s v^2) for v >= 0, s in {1, 1/2}, v = vh + vl (vh: 12 bits) so s vh^2 is
 * exact and s vl (v + vh) the small rest. */
KILN_INLINE kf kiln__exp_neg_sq(kf v, float s) {
    kf vh = (kf)((ku)v & KILN__HIGH_12_BITS);
    kf vl = v - vh;
    kf sum = v + vh;
    kf hh = vh * vh;
    kf hi = hh * kiln__c(-s);
    kf ll = vl * sum;
    kf lo = ll * kiln__c(-s);
    return kiln__exp_hl(hi, lo);
}

/* exp(x*x*(-0.5)) (the kernels' pattern; gelu's derivative): e^(-x^2/2) with x^2 split
 * exactly; 1.11 ulp; |x| clamped to 15 (0 from 13.2 on, flushed as exp), +-inf -> 0,
 * NaN -> NaN. */
KILN_INLINE kf kiln_exp_neg_half_sq(kf x) {
    kf ax = kiln_abs(x);
    kf v = kiln__min_keep_nan(ax, KILN__HALF_SQ_CLAMP);
    kf y = kiln__exp_neg_sq(v, 0.5f);
    kf zero_or_nan = v - v; /* 0, or NaN for a NaN x */
    return y + zero_or_nan;
}

/* erf: x (2/sqrt(pi) + x^2 Q(x^2)) for |x| < 0.75, else +-(1 - e^(-x^2) R(|x|)) with x^2
 * split exactly and |x| clamped to 10; 1.92 ulp; erf +-inf = +-1, NaN -> NaN, +-0 -> +-0. */
KILN_INLINE kf kiln_erf(kf x) {
    kf ax = kiln_abs(x);
    kf a = kiln__min_keep_nan(ax, 10.0f);
    kf r = kiln__erfc_scaled(a);
    kf ex = kiln__exp_neg_sq(a, 1.0f);
    /* 0 past |x| = 9 (erf.rs ERF_FLUSH: the same bits, and no denormal product) */
    ex = kiln__zero_if(a > kiln__c(9.0f), ex);
    kf erfc = ex * r;
    kf big = kiln__c(1.0f) - erfc;
    kf sign = kiln__sign_of(x);
    big = kiln__or(big, sign);
    /* x (C0_HI + (C0_LO + x^2 Q(x^2))): the leading product fused, the rest small */
    kf z = x * x;
    kf q = kiln__fmac(kiln__c(-0.00067495136f), z, 0.005114346f);
    q = kiln__fmac(q, z, -0.026834624f);
    q = kiln__fmac(q, z, 0.11283377f);
    q = kiln__fmac(q, z, -0.3761262f);
    kf rest = kiln__fma(q, z, kiln__c(KILN__ERF_C0_LO));
    kf xr = x * rest;
    kf small = kiln__fmak(x, KILN__ERF_C0_HI, xr);
    kf y = kiln_select(ax < kiln__c(KILN__ERF_SMALL), small, big);
    return kiln__or(y, sign);
}

/* gelu from its e^(-x^2/2) `ex` (kiln_exp_neg_half_sq(x)): a kernel computing gelu and its
 * derivative computes `ex` once and passes it here; the same bits as kiln_gelu_erf. */
KILN_INLINE kf kiln_gelu_erf_with(kf x, kf ex) {
    kf ax = kiln_abs(x);
    kf axc = kiln__min_keep_nan(ax, 14.0f);
    kf a = axc * kiln__c(KILN__SQRT_HALF);
    kf r = kiln__erfc_scaled(a);
    kf h = r * kiln__c(0.5f);
    /* erf.rs gelu: x < 0 as (x R/2) e^(-x^2/2), 0 past |x| = 13.147 (GELU_NEG_FLUSH) and
     * where under the smallest normal; the
     * positive side's tail 0 past |x| = 12.9 (GELU_TAIL_FLUSH): never a denormal (each
     * costs a microcode assist on x86) */
    kf lower = (x * h) * kiln__zero_if(ax > kiln__c(13.147f), ex);
    lower = kiln_select(kiln_abs(lower) < kiln__c(1.17549435e-38f), kiln__sign_of(lower), lower);
    kf tail = kiln__zero_if(ax > kiln__c(12.9f), ex) * h;
    kf upper = x * (kiln__c(1.0f) - tail);
    return kiln_select(x < kiln__c(0.0f), lower, upper);
}

/* gelu (erf form): x Phi(x), Phi(-|x|) = e^(-x^2/2) R(|x|/sqrt 2)/2, Phi(|x|) = 1 - Phi(-|x|);
 * 4.86 ulp for all |y| >= 1e-30 (against x erfc(-x/sqrt 2)/2), left tail included;
 * gelu(+inf) = +inf, gelu(-inf) = NaN (the reference's -inf * 0), NaN -> NaN. */
KILN_INLINE kf kiln_gelu_erf(kf x) { return kiln_gelu_erf_with(x, kiln_exp_neg_half_sq(x)); }

/* ------------------------------------------------------------------------------------ */
/* algebraic and bit-level ops (math.rs unary_general_in)                               */
/* ------------------------------------------------------------------------------------ */
/* (kiln_abs and kiln_neg are defined with the vocabulary at the top.) */

/* sqrt: correctly rounded (the hardware's vector square root; a per-lane sqrtf elsewhere). */
KILN_INLINE kf kiln_sqrt(kf x) {
#if KILN__HAS_BUILTIN(__builtin_elementwise_sqrt)
    return __builtin_elementwise_sqrt(x);
#elif defined(__SSE__)
    /* sqrtf lane by lane does not vectorize under the default -fmath-errno (GCC keeps an
     * errno call per lane), so the target's builtins, on native-width pieces */
#if KILN_W >= 16 && defined(__AVX512F__)
#define KILN__SQRT_PIECE 16
    typedef float kiln__p __attribute__((vector_size(64)));
#if defined(__clang__)
#define KILN__SQRT_OP(v) __builtin_ia32_sqrtps512((v), 4)
#else
#define KILN__SQRT_OP(v) __builtin_ia32_sqrtps512_mask((v), (v), (unsigned short)0xffff, 4)
#endif
#elif KILN_W >= 8 && defined(__AVX__)
#define KILN__SQRT_PIECE 8
    typedef float kiln__p __attribute__((vector_size(32)));
#define KILN__SQRT_OP(v) __builtin_ia32_sqrtps256(v)
#else
#define KILN__SQRT_PIECE 4
    typedef float kiln__p __attribute__((vector_size(16)));
#define KILN__SQRT_OP(v) __builtin_ia32_sqrtps(v)
#endif
    /* KILN_W is a multiple of the piece (4, 8 or 16 lanes) */
    kf r;
    for (int i = 0; i < KILN_W; i += KILN__SQRT_PIECE) {
        kiln__p v;
        memcpy(&v, (char *)&x + 4 * i, sizeof v);
        v = KILN__SQRT_OP(v);
        memcpy((char *)&r + 4 * i, &v, sizeof v);
    }
    return r;
#undef KILN__SQRT_PIECE
#undef KILN__SQRT_OP
#else
    kf r;
    for (int l = 0; l < KILN_W; l++) r[l] = sqrtf(x[l]);
    return r;
#endif
}

/* rsqrt: 1/sqrt(x), both correctly rounded; 1.44 ulp; 0 -> +inf, x < 0 -> NaN. */
KILN_INLINE kf kiln_rsqrt(kf x) { return kiln__c(1.0f) / kiln_sqrt(x); }

/* recip: 1/x, correctly rounded; -0 -> -inf. */
KILN_INLINE kf kiln_recip(kf x) { return kiln__c(1.0f) / x; }

/* relu: `x < 0 ? 0 : x`; NaN stays NaN, relu(-0) = -0 (maxps(0, x)). */
KILN_INLINE kf kiln_relu(kf x) { return kiln__max_keep_nan(x, 0.0f); }

/* sign: 1 above 0, -1 below, else (+-0, NaN) +0 (torch's sign). */
KILN_INLINE kf kiln_sign(kf x) {
    kf z = kiln__c(0.0f);
    kf t = kiln_select(x < z, kiln__c(-1.0f), z);
    return kiln_select(x > z, kiln__c(1.0f), t);
}

/* round, ties to even (Cranelift `nearest`): |x| < 2^23 is rounded by adding and
 * subtracting 2^23 (exact but for that one rounding), the sign put back (-0.3 -> -0);
 * larger |x|, infinities and NaN are x itself. Exact. */
KILN_INLINE kf kiln_round(kf x) {
    kf ax = kiln_abs(x);
    kf two23 = kiln__c(8388608.0f);
    kf r = (ax + two23) - two23;
    r = kiln__or(r, kiln__sign_of(x));
    return kiln_select(ax < two23, r, x);
}

/* floor: kiln_round, minus 1 where that rounded up; -0 -> -0 (floor(-0.3) = -1). Exact. */
KILN_INLINE kf kiln_floor(kf x) {
    kf r = kiln_round(x);
    return kiln_select(r > x, r - kiln__c(1.0f), r);
}

/* ceil: kiln_round, plus 1 where that rounded down; x's sign kept (ceil(-0.5) = -0). Exact. */
KILN_INLINE kf kiln_ceil(kf x) {
    kf r = kiln_round(x);
    r = kiln_select(r < x, r + kiln__c(1.0f), r);
    return kiln__or(r, kiln__sign_of(x));
}

/* trunc: floor(|x|) with x's sign. Exact. */
KILN_INLINE kf kiln_trunc(kf x) {
    return kiln__or(kiln_floor(kiln_abs(x)), kiln__sign_of(x));
}

/* isnan / isinf as masks (math.rs bool_unary) */
KILN_INLINE ki kiln_isnan(kf x) { return x != x; }
KILN_INLINE ki kiln_isinf(kf x) { return kiln_abs(x) == kiln__c(INFINITY); }

/* ------------------------------------------------------------------------------------ */
/* binary ops (math.rs binary)                                                          */
/* ------------------------------------------------------------------------------------ */

/* maximum: `y < x ? x : y` (maxps x, y; equal operands give y: maximum(0, -0) = -0), NaN
 * (all-ones bits) where either is NaN. */
KILN_INLINE kf kiln_maximum(kf x, kf y) {
    kf mx = kiln_select(y < x, x, y);
    ki un = (x != x) | (y != y);
    return kiln__nan_if(un, mx);
}

/* minimum: `x < y ? x : y` (minps x, y; equal operands give y), NaN where either is NaN. */
KILN_INLINE kf kiln_minimum(kf x, kf y) {
    kf mn = kiln_select(x < y, x, y);
    ki un = (x != x) | (y != y);
    return kiln__nan_if(un, mn);
}

/* pow: libm powf per lane (0.80 ulp; C99 special cases: pow(x, 0) = 1, pow(1, y) = 1,
 * pow(-8, 1/3) = NaN, pow(0, -1) = inf). */
KILN_INLINE kf kiln_pow(kf x, kf y) {
    kf r;
    for (int l = 0; l < KILN_W; l++) r[l] = powf(x[l], y[l]);
    return r;
}

/* fmod: C's fmodf per lane (exact; x's sign). */
KILN_INLINE kf kiln_fmod(kf x, kf y) {
    kf r;
    for (int l = 0; l < KILN_W; l++) r[l] = fmodf(x[l], y[l]);
    return r;
}

/* remainder: fmod, then + y where it is non-zero and its sign differs from y's (Python's %,
 * as torch computes it). */
KILN_INLINE kf kiln_remainder(kf x, kf y) {
    kf m = kiln_fmod(x, y);
    kf z = kiln__c(0.0f);
    ki nonzero = m != z;
    ki differ = (y < z) ^ (m < z);
    return kiln_select(nonzero & differ, m + y, m);
}

/* atan2(x, y) (x the first operand, the "y" of C's atan2): f64 libm atan2, rounded once. */
KILN_INLINE kf kiln_atan2(kf x, kf y) {
    kf r;
    for (int l = 0; l < KILN_W; l++) r[l] = (float)atan2((double)x[l], (double)y[l]);
    return r;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif /* KILN_MATH_H */
