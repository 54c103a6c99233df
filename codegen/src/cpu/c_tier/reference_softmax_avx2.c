/* A hand-written AVX2 softmax over the last dim: the reference `kiln bench` measures the
 * softmax workload against on a host without AVX-512 (issue 24: the C tier within 1.3x of
 * it). The same loop as reference_softmax.c at 8 lanes: contiguous f32 rows, three passes over
 * each row while it is in L1 (max; exp(x - max) stored and summed; scale by 1/sum), four
 * accumulators, masked tails, f32 sums, and a Cephes-style exp (degree-6 polynomial after a
 * two-part ln2 reduction; about 1 ulp; inputs are <= 0, clamped at -87.3, so 2^n, n in
 * [-126, 0], is built in the exponent field as a normal number).
 * Same signature as kiln's kernels: (buffers, byte strides [buffer][dim], sizes, rows r0..r1,
 * inner i0..i1); buffer 0 is the input, buffer 1 the output. */
#include <immintrin.h>
#include <stdint.h>

#if !defined(__AVX2__) || !defined(__FMA__)
#error "the AVX2 softmax reference needs AVX2 and FMA"
#endif

static inline __m256 exp_nonpositive(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 r2 = _mm256_mul_ps(r, r);
    const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static inline float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

static void softmax_row(const float *x, float *y, int64_t n) {
    const __m256 ninf = _mm256_set1_ps(-__builtin_inff());
    __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
        m2 = _mm256_max_ps(m2, _mm256_loadu_ps(x + i + 16));
        m3 = _mm256_max_ps(m3, _mm256_loadu_ps(x + i + 24));
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    /* lanes below the tail's length are all ones */
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    m0 = _mm256_max_ps(m0, _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, tail), _mm256_castsi256_ps(tail)));
    const __m256 max = _mm256_set1_ps(hmax(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3))));

    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (i = 0; i + 32 <= n; i += 32) {
        const __m256 e0 = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), max));
        const __m256 e1 = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), max));
        const __m256 e2 = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i + 16), max));
        const __m256 e3 = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i + 24), max));
        _mm256_storeu_ps(y + i, e0);
        _mm256_storeu_ps(y + i + 8, e1);
        _mm256_storeu_ps(y + i + 16, e2);
        _mm256_storeu_ps(y + i + 24, e3);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
        s2 = _mm256_add_ps(s2, e2);
        s3 = _mm256_add_ps(s3, e3);
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), max));
        _mm256_storeu_ps(y + i, e);
        s0 = _mm256_add_ps(s0, e);
    }
    if (i < n) {
        const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(x + i, tail), max));
        _mm256_maskstore_ps(y + i, tail, e);
        s0 = _mm256_add_ps(s0, _mm256_and_ps(e, _mm256_castsi256_ps(tail)));
    }
    const float sum = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    const __m256 inv = _mm256_set1_ps(1.0f / sum);

    for (i = 0; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
        _mm256_storeu_ps(y + i + 8, _mm256_mul_ps(_mm256_loadu_ps(y + i + 8), inv));
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
    if (i < n) _mm256_maskstore_ps(y + i, tail, _mm256_mul_ps(_mm256_maskload_ps(y + i, tail), inv));
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
