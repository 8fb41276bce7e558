/*
 * The fast exps of the sums' estimates (tw_heads_internal.h: the error bounds, sum_verdict),
 * one per target: double precision on the scalar path (fast_exp), single precision
 * polynomials on the vector paths. A path's kernels are called through exps().
 */
#include "rules/tw_heads_internal.h"

#include <string.h>

#ifdef TW_X86_SIMD
#include <immintrin.h>
#endif
#ifdef TW_NEON_SIMD
#include <arm_neon.h>
#endif

#define FEXP_LO (-700.0)
#define INVLN2 1.4426950408889634074       /* 1/ln 2 */
#define SHIFT 6755399441055744.0            /* 1.5 * 2^52: adding it rounds to an integer */
#define LN2HI 6.93147180369123816490e-01    /* ln 2 in its first 32 bits: k * LN2HI is exact */
#define LN2LO 1.90821492927058770002e-10    /* ln 2 - LN2HI */
/* Taylor coefficients 1/j!, j = 2..11 */
#define C2 (1.0 / 2.0)
#define C3 (1.0 / 6.0)
#define C4 (1.0 / 24.0)
#define C5 (1.0 / 120.0)
#define C6 (1.0 / 720.0)
#define C7 (1.0 / 5040.0)
#define C8 (1.0 / 40320.0)
#define C9 (1.0 / 362880.0)
#define C10 (1.0 / 3628800.0)
#define C11 (1.0 / 39916800.0)

/*
 * exp(x) for x in [-700, 1], as 2^k exp(r): k = round(x / ln 2) in [-1010, 2] and
 * r = x - k ln 2 with |r| <= 0.34658 (k * LN2HI and x - k * LN2HI are exact; the rest errs
 * by < 2^-53). exp(r) by its Taylor polynomial of degree 11: the remainder is
 * < |r|^12 / 12! e^|r| < 2^-46 exp(r); the coefficients' roundings and those of Estrin's
 * scheme (short dependency chains; at most 12 roundings on any term) stay
 * < 13 2^-53 e^|r| / e^-|r| < 2^-48 exp(r). 2^k is built from k's bits, and scaling by it is
 * exact (the result stays normal). In all, |F(x) - exp(x)| < 2^-45 exp(x).
 */
static inline double fast_exp(double x) {
    double t = x * INVLN2 + SHIFT;
    double kd = t - SHIFT;
    double r = (x - kd * LN2HI) - kd * LN2LO;
    double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    double p01 = 1.0 + r, p23 = C2 + C3 * r, p45 = C4 + C5 * r, p67 = C6 + C7 * r;
    double p89 = C8 + C9 * r, p1011 = C10 + C11 * r;
    double p03 = p01 + p23 * r2, p47 = p45 + p67 * r2, p811 = p89 + p1011 * r2;
    double p = (p03 + p47 * r4) + p811 * r8;
    uint64_t tb, sb;
    memcpy(&tb, &t, sizeof tb);
    sb = (tb + 1023) << 52; /* t's low bits are k: this is 2^k */
    double scale;
    memcpy(&scale, &sb, sizeof scale);
    return p * scale;
}

#if defined(TW_X86_SIMD) || defined(TW_NEON_SIMD)
/*
 * The vector code's fast exp, for x in [-700, 1]: the range reduction (as in fast_exp) and the
 * scaling by 2^k in double, exp(r) by its Taylor polynomial of degree 6 in single precision,
 * twice as many lanes at a time. Rounding r to single precision changes exp(r) by < 2^-25;
 * the remainder is < |r|^7 / 7! e^|r| < 2^-22 exp(r); rounding the coefficients to single
 * precision < 2^-24 e^|r| / e^-|r| = 2^-23 exp(r); Horner's roundings < 12 2^-24 e^|r| / e^-|r|
 * < 2^-19.4 exp(r). In all, |F(x) - exp(x)| < 2^-18 exp(x).
 */
#define F2 (1.0f / 2.0f)
#define F3 (1.0f / 6.0f)
#define F4 (1.0f / 24.0f)
#define F5 (1.0f / 120.0f)
#define F6 (1.0f / 720.0f)
#endif

#ifdef TW_X86_SIMD
/* The steps both x86 widths take, written once over the intrinsics' prefix V (_mm512 or
   _mm256) and width W (512 or 256): the range reduction of x (t holds k in its low bits, r is
   x - k ln 2), the degree-6 polynomial of exp(r) in single precision, and 2^k from t. */
#define TW_EXP_REDUCE(V, x, t, r)                                                             \
    do {                                                                                      \
        t = V##_fmadd_pd(x, V##_set1_pd(INVLN2), V##_set1_pd(SHIFT));                         \
        r = V##_sub_pd(t, V##_set1_pd(SHIFT));                                                \
        r = V##_fnmadd_pd(r, V##_set1_pd(LN2LO), V##_fnmadd_pd(r, V##_set1_pd(LN2HI), x));    \
    } while (0)
#define TW_EXP_POLY(V, p, r)                                                                  \
    do {                                                                                      \
        p = V##_fmadd_ps(V##_set1_ps(F6), r, V##_set1_ps(F5));                                \
        p = V##_fmadd_ps(p, r, V##_set1_ps(F4));                                              \
        p = V##_fmadd_ps(p, r, V##_set1_ps(F3));                                              \
        p = V##_fmadd_ps(p, r, V##_set1_ps(F2));                                              \
        p = V##_fmadd_ps(p, r, V##_set1_ps(1.0f));                                            \
        p = V##_fmadd_ps(p, r, V##_set1_ps(1.0f));                                            \
    } while (0)
#define TW_EXP_SCALE(V, W, t, bias) \
    V##_castsi##W##_pd(V##_slli_epi64(V##_add_epi64(V##_castpd_si##W(t), bias), 52))

TW_TARGET_AVX512 static inline void fast_exp16_avx512(__m512d x0, __m512d x1,
                                                                              __m512d *e0,
                                                                              __m512d *e1) {
    __m512d t0, t1, r0, r1;
    __m512 p;
    TW_EXP_REDUCE(_mm512, x0, t0, r0);
    TW_EXP_REDUCE(_mm512, x1, t1, r1);
    __m512 r = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(r0)), _mm512_cvtpd_ps(r1), 1);
    TW_EXP_POLY(_mm512, p, r);
    const __m512i bias = _mm512_set1_epi64(1023);
    *e0 = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(p)), TW_EXP_SCALE(_mm512, 512, t0, bias));
    *e1 = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(p, 1)), TW_EXP_SCALE(_mm512, 512, t1, bias));
}

TW_TARGET_AVX2 static inline void fast_exp8_avx2(__m256d x0, __m256d x1,
                                                                         __m256d *e0, __m256d *e1) {
    __m256d t0, t1, r0, r1;
    __m256 p;
    TW_EXP_REDUCE(_mm256, x0, t0, r0);
    TW_EXP_REDUCE(_mm256, x1, t1, r1);
    __m256 r = _mm256_set_m128(_mm256_cvtpd_ps(r1), _mm256_cvtpd_ps(r0));
    TW_EXP_POLY(_mm256, p, r);
    const __m256i bias = _mm256_set1_epi64x(1023);
    *e0 = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(p)), TW_EXP_SCALE(_mm256, 256, t0, bias));
    *e1 = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)), TW_EXP_SCALE(_mm256, 256, t1, bias));
}

#endif

#ifdef TW_NEON_SIMD
/* fast_exp16_avx512's vector exp, four lanes at a time (two vectors of doubles, the
   polynomial on one vector of floats). */
static inline void fast_exp4_neon(float64x2_t x0, float64x2_t x1, float64x2_t *e0,
                                  float64x2_t *e1) {
    const float64x2_t shift = vdupq_n_f64(SHIFT), invln2 = vdupq_n_f64(INVLN2);
    const float64x2_t ln2hi = vdupq_n_f64(LN2HI), ln2lo = vdupq_n_f64(LN2LO);
    float64x2_t t0 = vfmaq_f64(shift, x0, invln2), t1 = vfmaq_f64(shift, x1, invln2);
    float64x2_t k0 = vsubq_f64(t0, shift), k1 = vsubq_f64(t1, shift);
    float64x2_t r0 = vfmsq_f64(vfmsq_f64(x0, k0, ln2hi), k0, ln2lo);
    float64x2_t r1 = vfmsq_f64(vfmsq_f64(x1, k1, ln2hi), k1, ln2lo);
    float32x4_t r = vcvt_high_f32_f64(vcvt_f32_f64(r0), r1);
    float32x4_t p = vdupq_n_f32(F6);
    p = vfmaq_f32(vdupq_n_f32(F5), p, r);
    p = vfmaq_f32(vdupq_n_f32(F4), p, r);
    p = vfmaq_f32(vdupq_n_f32(F3), p, r);
    p = vfmaq_f32(vdupq_n_f32(F2), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const int64x2_t bias = vdupq_n_s64(1023);
    float64x2_t s0 = vreinterpretq_f64_s64(vshlq_n_s64(vaddq_s64(vreinterpretq_s64_f64(t0), bias), 52));
    float64x2_t s1 = vreinterpretq_f64_s64(vshlq_n_s64(vaddq_s64(vreinterpretq_s64_f64(t1), bias), 52));
    *e0 = vmulq_f64(vcvt_f64_f32(vget_low_f32(p)), s0);
    *e1 = vmulq_f64(vcvt_high_f64_f32(p), s1);
}
#endif

/* ------------------------------------------------------------------------------------------
 * Batches of fast exps (tw_heads_internal.h).
 * ------------------------------------------------------------------------------------------ */

/* e[i] = F(v[i]) for v[i] in [-700, 1], 0 below -700. Returns whether some v[i] is NaN or
   above 1 (the tokens with one are decided exactly). */
int tw_exps_scalar(const double *v, size_t n, double *e) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double x = v[i];
        double c = x > 1.0 ? 1.0 : x;
        c = c < FEXP_LO ? FEXP_LO : c;
        double f = fast_exp(c);
        e[i] = x < FEXP_LO ? 0.0 : f;
        bad |= !(x <= 1.0);
    }
    return bad;
}

#ifdef TW_X86_SIMD
TW_TARGET_AVX512 int tw_exps_avx512(const double *v, size_t n, double *e) {
    const __m512d lo = _mm512_set1_pd(FEXP_LO), one = _mm512_set1_pd(1.0);
    __mmask8 bad = 0;
    for (size_t i = 0; i < n; i += 16) {
        size_t left = n - i;
        __mmask8 m0 = left >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << left) - 1);
        __mmask8 m1 = left >= 16 ? (__mmask8)0xFF : left > 8 ? (__mmask8)((1u << (left - 8)) - 1) : 0;
        __m512d x0 = _mm512_maskz_loadu_pd(m0, v + i), x1 = _mm512_maskz_loadu_pd(m1, v + i + 8);
        __mmask8 live0 = _mm512_cmp_pd_mask(x0, lo, _CMP_GE_OQ);
        __mmask8 live1 = _mm512_cmp_pd_mask(x1, lo, _CMP_GE_OQ);
        bad |= _mm512_mask_cmp_pd_mask(m0, x0, one, _CMP_NLE_UQ) |
               _mm512_mask_cmp_pd_mask(m1, x1, one, _CMP_NLE_UQ);
        __m512d f0, f1;
        fast_exp16_avx512(_mm512_min_pd(_mm512_max_pd(x0, lo), one),
                          _mm512_min_pd(_mm512_max_pd(x1, lo), one), &f0, &f1);
        _mm512_mask_storeu_pd(e + i, m0, _mm512_maskz_mov_pd(live0, f0));
        _mm512_mask_storeu_pd(e + i + 8, m1, _mm512_maskz_mov_pd(live1, f1));
    }
    return bad != 0;
}

TW_TARGET_AVX2 int tw_exps_avx2(const double *v, size_t n, double *e) {
    const __m256d lo = _mm256_set1_pd(FEXP_LO), one = _mm256_set1_pd(1.0);
    __m256d bad = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256d x0 = _mm256_loadu_pd(v + i), x1 = _mm256_loadu_pd(v + i + 4);
        bad = _mm256_or_pd(bad, _mm256_or_pd(_mm256_cmp_pd(x0, one, _CMP_NLE_UQ),
                                             _mm256_cmp_pd(x1, one, _CMP_NLE_UQ)));
        __m256d f0, f1;
        fast_exp8_avx2(_mm256_min_pd(_mm256_max_pd(x0, lo), one),
                       _mm256_min_pd(_mm256_max_pd(x1, lo), one), &f0, &f1);
        _mm256_storeu_pd(e + i, _mm256_and_pd(f0, _mm256_cmp_pd(x0, lo, _CMP_GE_OQ)));
        _mm256_storeu_pd(e + i + 4, _mm256_and_pd(f1, _mm256_cmp_pd(x1, lo, _CMP_GE_OQ)));
    }
    int any = _mm256_movemask_pd(bad) != 0;
    if (i < n) any |= tw_exps_scalar(v + i, n - i, e + i);
    return any;
}

#endif

#ifdef TW_NEON_SIMD
int tw_exps_neon(const double *v, size_t n, double *e) {
    const float64x2_t lo = vdupq_n_f64(FEXP_LO), one = vdupq_n_f64(1.0);
    uint64x2_t ok = vdupq_n_u64(~UINT64_C(0)); /* lanes whose values were all <= 1 */
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float64x2_t x0 = vld1q_f64(v + i), x1 = vld1q_f64(v + i + 2);
        ok = vandq_u64(ok, vandq_u64(vcleq_f64(x0, one), vcleq_f64(x1, one)));
        float64x2_t f0, f1;
        /* maxnm: a NaN becomes FEXP_LO (its token is decided exactly) */
        fast_exp4_neon(vminq_f64(vmaxnmq_f64(x0, lo), one), vminq_f64(vmaxnmq_f64(x1, lo), one), &f0, &f1);
        vst1q_f64(e + i, vreinterpretq_f64_u64(vandq_u64(vreinterpretq_u64_f64(f0), vcgeq_f64(x0, lo))));
        vst1q_f64(e + i + 2, vreinterpretq_f64_u64(vandq_u64(vreinterpretq_u64_f64(f1), vcgeq_f64(x1, lo))));
    }
    int any = vminvq_u32(vreinterpretq_u32_u64(ok)) == 0;
    if (i < n) any |= tw_exps_scalar(v + i, n - i, e + i);
    return any;
}
#endif
