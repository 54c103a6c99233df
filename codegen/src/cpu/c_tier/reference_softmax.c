/* A hand-written AVX-512 softmax over the last dim: the reference `kiln bench` measures the
 * softmax workload against (issue 24: the C tier within 1.3x of it). It is what one would
 * write by hand for this machine, with no generality: contiguous f32 rows, three passes over
 * each row while it is in L1 (max; exp(x - max) stored and summed; scale by 1/sum), four
 * accumulators, masked tails, f32 sums, and a Cephes-style exp (degree-6 polynomial after a
 * two-part ln2 reduction, 2^n by vscalefps; about 1 ulp; inputs are <= 0, clamped at -87.3).
 * Same signature as kiln's kernels: (buffers, byte strides [buffer][dim], sizes, rows r0..r1,
 * inner i0..i1); buffer 0 is the input, buffer 1 the output. */
#include <immintrin.h>
#include <stdint.h>

#ifndef __AVX512F__
#error "the softmax reference needs AVX-512F"
#endif

static inline __m512 exp_nonpositive(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 r2 = _mm512_mul_ps(r, r);
    const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

static void softmax_row(const float *x, float *y, int64_t n) {
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
    __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
        m2 = _mm512_max_ps(m2, _mm512_loadu_ps(x + i + 32));
        m3 = _mm512_max_ps(m3, _mm512_loadu_ps(x + i + 48));
    }
    for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1u);
    m0 = _mm512_mask_max_ps(m0, tail, m0, _mm512_maskz_loadu_ps(tail, x + i));
    const __m512 max = _mm512_set1_ps(
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3))));

    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (i = 0; i + 64 <= n; i += 64) {
        const __m512 e0 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + i), max));
        const __m512 e1 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), max));
        const __m512 e2 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + i + 32), max));
        const __m512 e3 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + i + 48), max));
        _mm512_storeu_ps(y + i, e0);
        _mm512_storeu_ps(y + i + 16, e1);
        _mm512_storeu_ps(y + i + 32, e2);
        _mm512_storeu_ps(y + i + 48, e3);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
        s2 = _mm512_add_ps(s2, e2);
        s3 = _mm512_add_ps(s3, e3);
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + i), max));
        _mm512_storeu_ps(y + i, e);
        s0 = _mm512_add_ps(s0, e);
    }
    if (i < n) {
        const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), max));
        _mm512_mask_storeu_ps(y + i, tail, e);
        s0 = _mm512_mask_add_ps(s0, tail, s0, e);
    }
    const float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    const __m512 inv = _mm512_set1_ps(1.0f / sum);

    for (i = 0; i + 32 <= n; i += 32) {
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
        _mm512_storeu_ps(y + i + 16, _mm512_mul_ps(_mm512_loadu_ps(y + i + 16), inv));
    }
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
    if (i < n) _mm512_mask_storeu_ps(y + i, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, y + i), inv));
}

void kiln_kernel(uint8_t *const *ptrs, const int64_t *strides, const int64_t *sizes, int64_t r0,
                 int64_t r1, int64_t i0, int64_t i1) {
    (void)sizes;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)(ptrs[0] + r * strides[0]) + i0;
        float *y = (float *)(ptrs[1] + r * strides[2]) + i0;
        softmax_row(x, y, i1 - i0);
    }
}
