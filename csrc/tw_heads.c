#include "tw_heads.h"
#include "tw_cpu.h"
#include "tw_hash.h"
#include "tw_util.h"
#include "tw_mem.h"
#include "tw_validate.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef TW_X86_SIMD
#include <immintrin.h>
#endif
#ifdef TW_NEON_SIMD
#include <arm_neon.h>
#endif

/* vLLM's value for a filtered-out candidate. */
#define HEAD_SENTINEL (-9999.0)
/* select_head's thresholds: the head's mass, and the support's normalization tolerance. */
#define MASS_LIMIT 1.0001
#define NORM_TOL 1e-4
/* Tokens per block: the heads of a block are selected, then their sums are checked. */
#define TOKEN_BLOCK 256

/* ------------------------------------------------------------------------------------------
 * Exact sums.
 *
 * A nonnegative finite double is an integer multiple of 2^-1074 below 2^1024, so any sum of
 * fewer than 2^64 of them is an integer below 2^2162 in units of 2^-1074: a fixed-point
 * accumulator of 36 64-bit limbs (2304 bits) holds it exactly, and rounding it once to the
 * nearest double (ties to even) gives the correctly rounded sum, which is math.fsum's result.
 * ------------------------------------------------------------------------------------------ */

#define ACC_LIMBS 36

typedef struct {
    uint64_t w[ACC_LIMBS];
} exact_acc;

static void acc_add(exact_acc *a, double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    unsigned e = (unsigned)(bits >> 52) & 0x7FFu;
    uint64_t m = bits & ((UINT64_C(1) << 52) - 1);
    unsigned pos = 0; /* x = m * 2^(pos - 1074) */
    if (e) {
        m |= UINT64_C(1) << 52;
        pos = e - 1;
    }
    if (!m) return;
    unsigned w = pos >> 6, s = pos & 63;
    uint64_t lo = m << s, hi = s ? m >> (64 - s) : 0;
    uint64_t old = a->w[w];
    a->w[w] = old + lo;
    hi += a->w[w] < old; /* hi < 2^53: no overflow */
    old = a->w[w + 1];
    a->w[w + 1] = old + hi;
    int carry = a->w[w + 1] < old;
    for (unsigned i = w + 2; carry && i < ACC_LIMBS; i++) carry = ++a->w[i] == 0;
}

static unsigned top_bit(uint64_t v) { return 63u - tw_clz64(v); } /* v != 0 */

/* 64 bits of the accumulator starting at bit `from`. */
static uint64_t acc_bits(const exact_acc *a, unsigned from) {
    unsigned w = from >> 6, s = from & 63;
    uint64_t v = a->w[w] >> s;
    if (s && w + 1 < ACC_LIMBS) v |= a->w[w + 1] << (64 - s);
    return v;
}

static double acc_round(const exact_acc *a) {
    int top = ACC_LIMBS - 1;
    while (top >= 0 && !a->w[top]) top--;
    if (top < 0) return 0.0;
    unsigned high = 64u * (unsigned)top + top_bit(a->w[top]);
    if (high < 53) return ldexp((double)a->w[0], -1074); /* below 2^-1021: exact */
    unsigned low = high - 52; /* the 53 bits kept are [low, high] */
    uint64_t mant = acc_bits(a, low) & ((UINT64_C(1) << 53) - 1);
    unsigned half = low - 1; /* the first bit dropped */
    int round = (int)((a->w[half >> 6] >> (half & 63)) & 1);
    int sticky = (a->w[half >> 6] & ((UINT64_C(1) << (half & 63)) - 1)) != 0;
    for (unsigned i = 0; !sticky && i < (half >> 6); i++) sticky = a->w[i] != 0;
    if (round && (sticky || (mant & 1))) {
        mant++;
        if (mant == (UINT64_C(1) << 53)) {
            mant >>= 1;
            low++;
        }
    }
    return ldexp((double)mant, (int)low - 1074); /* +inf past DBL_MAX */
}

double tw_fsum_nonneg(const double *x, size_t n) {
    int saved = errno;
    exact_acc a;
    memset(&a, 0, sizeof a);
    int nan = 0, inf = 0;
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        if (v != v || v < 0)
            nan = 1;
        else if (v == INFINITY)
            inf = 1;
        else
            acc_add(&a, v);
    }
    double s = nan ? NAN : inf ? INFINITY : acc_round(&a);
    errno = saved;
    return s;
}

double tw_fsum_exp(const double *p, size_t n) {
    int saved = errno;
    exact_acc a;
    memset(&a, 0, sizeof a);
    int nan = 0, inf = 0;
    for (size_t i = 0; i < n; i++) {
        double v = exp(p[i]);
        if (v != v)
            nan = 1;
        else if (v == INFINITY)
            inf = 1;
        else
            acc_add(&a, v);
    }
    double s = nan ? NAN : inf ? INFINITY : acc_round(&a);
    errno = saved;
    return s;
}

/* ------------------------------------------------------------------------------------------
 * Deciding the mass rules without exp() for every candidate.
 *
 * The rules compare R = fsum(exp(p)) (the correctly rounded sum of the C library's exp) with
 * T = 1.0001 (MASS: R > T) and with 1 -/+ 1e-4 (NORMALIZE: |1 - R| <= 1e-4, where 1 - R is
 * exact whenever R is within [0.5, 2]). Each token's sum is first estimated as
 * S = fl(sum of F(p)) with a fast exp F for p in [-700, 1] (0 below -700):
 *
 *   |F(p) - exp(p)| <= eps exp(p)     F's error: eps = 2^-45 for fast_exp (scalar code),
 *                                     2^-18 for the vector code's (fast_exp16_avx512 ...);
 *   |E(p) - exp(p)| <= 2^-40 exp(p)   assumed of the C library's exp E (glibc's errs by less
 *                                     than 1 ulp, 2^-52);
 *   |F - E| <= 2^-1000                for p < -700, where F = 0 and E < exp(-700) < 2^-1010;
 *   fl-summation of r terms >= 0, in any order, errs by at most (r-1) 2^-53 times their sum.
 *
 * So |S - sum E| <= S (r 2^-53 + eps + 2^-40)(1 + 2^-17) + r 2^-1000, and
 *   delta = S (r 2^-52 + rel) + r 2^-999,   rel = 2^-37 (scalar) or 2^-16 (vector),
 * bounds it with room for the roundings of delta and of the comparisons. When S is farther
 * than delta + 2^-50 t from a threshold t, the exact sum is more than 2^-51 t away from t,
 * which is more than the rounding to R can move it (half an ulp), so R is on the same side
 * of t as S. Otherwise, and when a value is NaN or above 1, the token's exact sum decides:
 * in practice sums sit far from the thresholds (heads of real distributions add up to at
 * most 1 plus rounding noise of about 1e-6), so that is rare.
 * ------------------------------------------------------------------------------------------ */

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

static int is_close(double a, double b, double rel_tol, double abs_tol) {
    if (a == b) return 1;
    if (isinf(a) || isinf(b)) return 0;
    double diff = fabs(b - a);
    return diff <= fabs(rel_tol * b) || diff <= fabs(rel_tol * a) || diff <= abs_tol;
}

/* The rules on the exact sum, as select_head states them. */
static int exact_verdict(const double *v, size_t r, int has_sup) {
    double s = tw_fsum_exp(v, r);
    if (has_sup && !is_close(s, 1.0, 0.0, NORM_TOL)) return TW_HEAD_NORMALIZE;
    if (r == 0 || s > MASS_LIMIT) return TW_HEAD_MASS;
    return TW_HEAD_OK;
}

static inline int near_limit(double s, double limit, double delta) {
    return fabs(s - limit) <= delta + limit * 0x1p-50;
}

/* The rules from the estimate s of the token's sum of r values (rel: 2^-37 or 2^-16 by
   the fast exp used), or SUM_EXACT when only the exact sum decides (s NaN: a value NaN or
   above 1; or s near a threshold). */
enum { SUM_EXACT = -1 }; /* not a TW_HEAD_* code: those are 0 and up */
static inline int sum_verdict(size_t r, int has_sup, double s, double rel) {
    if (s != s) return SUM_EXACT;
    double delta = s * ((double)r * 0x1p-52 + rel) + (double)r * 0x1p-999;
    if (near_limit(s, MASS_LIMIT, delta)) return SUM_EXACT;
    if (has_sup) {
        if (near_limit(s, 1.0 - NORM_TOL, delta) || near_limit(s, 1.0 + NORM_TOL, delta))
            return SUM_EXACT;
        if (!(s >= 1.0 - NORM_TOL && s <= 1.0 + NORM_TOL)) return TW_HEAD_NORMALIZE;
    }
    if (r == 0 || s > MASS_LIMIT) return TW_HEAD_MASS;
    return TW_HEAD_OK;
}

static inline int too_few(size_t len, int64_t k) { return (int64_t)len - 2 < k; }

/* Whether token t has a recorded support: an empty row is an absent one (kept_tokens' zero
   count), and that token's head follows the rule without a support. */
static inline int row_has_support(const int64_t *soff, size_t t) {
    return soff != NULL && soff[t + 1] > soff[t];
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
TW_TARGET_AVX512 static inline void fast_exp16_avx512(__m512d x0, __m512d x1,
                                                                              __m512d *e0,
                                                                              __m512d *e1) {
    const __m512d shift = _mm512_set1_pd(SHIFT), invln2 = _mm512_set1_pd(INVLN2);
    const __m512d ln2hi = _mm512_set1_pd(LN2HI), ln2lo = _mm512_set1_pd(LN2LO);
    __m512d t0 = _mm512_fmadd_pd(x0, invln2, shift), t1 = _mm512_fmadd_pd(x1, invln2, shift);
    __m512d k0 = _mm512_sub_pd(t0, shift), k1 = _mm512_sub_pd(t1, shift);
    __m512d r0 = _mm512_fnmadd_pd(k0, ln2lo, _mm512_fnmadd_pd(k0, ln2hi, x0));
    __m512d r1 = _mm512_fnmadd_pd(k1, ln2lo, _mm512_fnmadd_pd(k1, ln2hi, x1));
    __m512 r = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(r0)), _mm512_cvtpd_ps(r1), 1);
    __m512 p = _mm512_set1_ps(F6);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(F5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(F4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(F3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(F2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i bias = _mm512_set1_epi64(1023);
    __m512d s0 = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(_mm512_castpd_si512(t0), bias), 52));
    __m512d s1 = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(_mm512_castpd_si512(t1), bias), 52));
    *e0 = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(p)), s0);
    *e1 = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(p, 1)), s1);
}

TW_TARGET_AVX2 static inline void fast_exp8_avx2(__m256d x0, __m256d x1,
                                                                         __m256d *e0, __m256d *e1) {
    const __m256d shift = _mm256_set1_pd(SHIFT), invln2 = _mm256_set1_pd(INVLN2);
    const __m256d ln2hi = _mm256_set1_pd(LN2HI), ln2lo = _mm256_set1_pd(LN2LO);
    __m256d t0 = _mm256_fmadd_pd(x0, invln2, shift), t1 = _mm256_fmadd_pd(x1, invln2, shift);
    __m256d k0 = _mm256_sub_pd(t0, shift), k1 = _mm256_sub_pd(t1, shift);
    __m256d r0 = _mm256_fnmadd_pd(k0, ln2lo, _mm256_fnmadd_pd(k0, ln2hi, x0));
    __m256d r1 = _mm256_fnmadd_pd(k1, ln2lo, _mm256_fnmadd_pd(k1, ln2hi, x1));
    __m256 r = _mm256_set_m128(_mm256_cvtpd_ps(r1), _mm256_cvtpd_ps(r0));
    __m256 p = _mm256_set1_ps(F6);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(F5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(F4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(F3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(F2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i bias = _mm256_set1_epi64x(1023);
    __m256d s0 = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(_mm256_castpd_si256(t0), bias), 52));
    __m256d s1 = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(_mm256_castpd_si256(t1), bias), 52));
    *e0 = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(p)), s0);
    *e1 = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)), s1);
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
 * Ranking: (value desc, id asc) on parallel id/value arrays.
 * ------------------------------------------------------------------------------------------ */

static inline int better(double va, int64_t ia, double vb, int64_t ib) {
    return va > vb || (va == vb && ia < ib);
}

static void insertion_sort(int64_t *id, double *v, size_t m) {
    for (size_t i = 1; i < m; i++) {
        double x = v[i];
        int64_t d = id[i];
        if (!better(x, d, v[i - 1], id[i - 1])) continue;
        size_t j = i;
        do {
            v[j] = v[j - 1];
            id[j] = id[j - 1];
            j--;
        } while (j > 0 && better(x, d, v[j - 1], id[j - 1]));
        v[j] = x;
        id[j] = d;
    }
}

/* Restore the heap [0, h) below i; the root of the heap is its worst entry. */
static void sift_worst(int64_t *id, double *v, size_t h, size_t i) {
    double x = v[i];
    int64_t d = id[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h) break;
        if (c + 1 < h && better(v[c], id[c], v[c + 1], id[c + 1])) c++;
        if (!better(x, d, v[c], id[c])) break;
        v[i] = v[c];
        id[i] = id[c];
        i = c;
    }
    v[i] = x;
    id[i] = d;
}

/* Leave the best `need` (1 <= need <= m) of the m entries in [0, need), best first. */
static void rank_top(int64_t *id, double *v, size_t m, size_t need) {
    if (m <= 48) {
        insertion_sort(id, v, m);
        return;
    }
    for (size_t i = need / 2; i-- > 0;) sift_worst(id, v, need, i);
    for (size_t j = need; j < m; j++) {
        if (better(v[j], id[j], v[0], id[0])) {
            v[0] = v[j];
            id[0] = id[j];
            sift_worst(id, v, need, 0);
        }
    }
    for (size_t h = need; h > 1; h--) {
        double x = v[0];
        int64_t d = id[0];
        v[0] = v[h - 1];
        id[0] = id[h - 1];
        v[h - 1] = x;
        id[h - 1] = d;
        sift_worst(id, v, h - 1, 0);
    }
}

/* ------------------------------------------------------------------------------------------
 * Selecting one token's head into its output slot.
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    int32_t *sup; /* a sorted copy of a large support */
    size_t cap;
} scratch;

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Which of the m (<= 64) ids each support id is, a bit per id; 0 when one is not there (a
   support is never empty). */
static uint64_t support_marks_scalar(const int64_t *oid, size_t m, const int32_t *sup, size_t slen) {
    /* the ids' positions in a 128-slot open-addressing table (ranked ids are distinct). Its
       hash is fixed: ids chosen to share a cluster make a look-up at most 64 compares, the
       AVX-512 path's cost of every support id (all m ids, eight a vector) */
    uint8_t slot[128];
    uint64_t marks = 0;
    memset(slot, 0xFF, sizeof slot);
    for (size_t j = 0; j < m; j++) {
        unsigned h = ((uint32_t)oid[j] * 0x9E3779B1u) >> 25;
        while (slot[h] != 0xFF) h = (h + 1) & 127;
        slot[h] = (uint8_t)j;
    }
    for (size_t s = 0; s < slen; s++) {
        int64_t want = sup[s];
        unsigned h = ((uint32_t)want * 0x9E3779B1u) >> 25;
        while (slot[h] != 0xFF && oid[slot[h]] != want) h = (h + 1) & 127;
        if (slot[h] == 0xFF) return 0;
        marks |= UINT64_C(1) << slot[h];
    }
    return marks;
}

#ifdef TW_X86_SIMD
/* keep_support for m <= 64 ids: each support id compared with all ids at once, eight a
   vector, then the kept entries compressed in place; 0 when a support id is not there,
   else 1 and *r the number kept. */
TW_TARGET_AVX512 static int keep_marked_avx512(int64_t *oid, double *olp, size_t m,
                                               const int32_t *sup, size_t slen, size_t *r) {
    __m512i c[8];
    __mmask8 live[8];
    size_t nv = (m + 7) / 8; /* only the vectors the ids fill: a compare per id per vector */
    for (size_t b = 0; b < nv; b++) {
        size_t left = m - 8 * b;
        live[b] = left >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << left) - 1);
        c[b] = _mm512_maskz_loadu_epi64(live[b], oid + 8 * b);
    }
    uint64_t marks = 0;
    for (size_t s = 0; s < slen; s++) {
        __m512i want = _mm512_set1_epi64((int64_t)sup[s]);
        uint64_t hit = 0;
        for (size_t b = 0; b < nv; b++)
            hit |= (uint64_t)_mm512_mask_cmpeq_epi64_mask(live[b], c[b], want) << (8 * b);
        if (!hit) return 0;
        marks |= hit;
    }
    size_t w = 0;
    for (size_t b = 0; b < nv; b++) {
        /* compressed in a register, then a masked store (a compressing store to memory is
           microcoded on some cores) */
        __mmask8 keep = (__mmask8)(marks >> (8 * b));
        unsigned cnt = (unsigned)_mm_popcnt_u32(keep);
        __mmask8 head = (__mmask8)((1u << cnt) - 1);
        __m512d v = _mm512_maskz_loadu_pd(live[b], olp + 8 * b);
        _mm512_mask_storeu_epi64(oid + w, head, _mm512_maskz_compress_epi64(keep, c[b]));
        _mm512_mask_storeu_pd(olp + w, head, _mm512_maskz_compress_pd(keep, v));
        w += cnt;
    }
    *r = w;
    return 1;
}

/* The marks of support_marks_scalar by vector compares, four ids a vector (keep_support
   compacts by them). */
TW_TARGET_AVX2 static uint64_t support_marks_avx2(const int64_t *oid, size_t m,
                                                  const int32_t *sup, size_t slen) {
    int64_t padded[64];
    __m256i c[16];
    size_t nv = (m + 3) / 4;
    memcpy(padded, oid, m * sizeof(int64_t));
    for (size_t j = m; j < 4 * nv; j++) padded[j] = 0;
    for (size_t v = 0; v < nv; v++) c[v] = _mm256_loadu_si256((const __m256i *)(padded + 4 * v));
    uint64_t valid = m == 64 ? ~UINT64_C(0) : (UINT64_C(1) << m) - 1, marks = 0;
    for (size_t s = 0; s < slen; s++) {
        __m256i want = _mm256_set1_epi64x((int64_t)sup[s]);
        uint64_t hit = 0;
        for (size_t v = 0; v < nv; v++)
            hit |= (uint64_t)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(c[v], want)))
                   << (4 * v);
        hit &= valid;
        if (!hit) return 0;
        marks |= hit;
    }
    return marks;
}
#endif

static uint64_t support_marks(int path, const int64_t *oid, size_t m, const int32_t *sup,
                              size_t slen) {
#ifdef TW_X86_SIMD
    if (path == TW_PATH_AVX2) return support_marks_avx2(oid, m, sup, slen);
#endif
    (void)path;
    return support_marks_scalar(oid, m, sup, slen);
}

/* Keep the m ranked entries whose id is in the support; *r gets how many. */
static int keep_support(int path, int64_t *oid, double *olp, size_t m, const int32_t *sup,
                        size_t slen, size_t *r, scratch *sc) {
    size_t w = 0;
    if (m <= 64 && slen <= 64) {
#ifdef TW_X86_SIMD
        if (path == TW_PATH_AVX512)
            return keep_marked_avx512(oid, olp, m, sup, slen, r) ? TW_HEAD_OK : TW_HEAD_MISSING_SUPPORT;
#endif
        uint64_t marks = support_marks(path, oid, m, sup, slen);
        if (!marks) return TW_HEAD_MISSING_SUPPORT;
        for (size_t j = 0; j < m; j++) { /* w <= j: a write never passes a read */
            oid[w] = oid[j];
            olp[w] = olp[j];
            w += marks >> j & 1;
        }
        *r = w;
        return TW_HEAD_OK;
    }
    int32_t local[256];
    int32_t *sorted = local;
    if (slen > 256) {
        if (sc->cap < slen) {
            int32_t *grown = tw_mem_realloc(sc->sup, slen * sizeof(int32_t));
            if (!grown) return TW_HEAD_NOMEM;
            sc->sup = grown;
            sc->cap = slen;
        }
        sorted = sc->sup;
    }
    memcpy(sorted, sup, slen * sizeof(int32_t));
    qsort(sorted, slen, sizeof(int32_t), cmp_i32);
    size_t distinct = 0;
    for (size_t s = 0; s < slen; s++)
        if (s == 0 || sorted[s] != sorted[s - 1]) sorted[distinct++] = sorted[s];
    if (distinct > m) return TW_HEAD_MISSING_SUPPORT; /* ranked ids are distinct */
    for (size_t j = 0; j < m; j++) {
        int64_t id = oid[j];
        size_t lo = 0, hi = distinct;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if ((int64_t)sorted[mid] < id)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < distinct && (int64_t)sorted[lo] == id) {
            oid[w] = id;
            olp[w] = olp[j];
            w++;
        }
    }
    if (w != distinct) return TW_HEAD_MISSING_SUPPORT;
    *r = w;
    return TW_HEAD_OK;
}

/*
 * Most heads need no sorting: engine order is ranked order (native heads), or is except that
 * the first candidate belongs further down (compact rows start with the sampled token). Such
 * a head, over its live candidates (all of them, or those before a tail at the sentinel: a
 * filtered row), has a `shape`: 0 when it is in ranked order, q > 0 when its first candidate
 * goes after the next q (the run of those better than it), which is what insertion_sort
 * would make of it. Other heads are ranked by rank_top.
 *
 * Shapes come from a sweep over a block of candidates that flags, per candidate, whether it
 * is better than the one before it (`up`) and whether it is at the sentinel (`sent`); a token's
 * first `up` bit compares with the token before it and is ignored.
 */
#define SWEEP 4096 /* candidates per sweep */
#define SWEEP_WORDS (SWEEP / 64 + 1)

/* The end of the block of tokens from `from` (< n) whose entries (offsets off) fit one
   sweep: at most TOKEN_BLOCK tokens, and always at least one, however long. With
   `long_only`, the block also stops before a token of at most 32 entries (those the
   AVX-512 and AVX2 paths decide in registers). */
static size_t block_end(const int64_t *off, size_t from, size_t n, int long_only) {
    size_t to = from + 1;
    while (to < n && to - from < TOKEN_BLOCK && off[to + 1] - off[from] <= SWEEP &&
           (!long_only || off[to + 1] - off[to] > 32))
        to++;
    return to;
}

/* The flags of candidates [i, end) of one word into its bits i & 63. */
static inline size_t sweep_range(const int64_t *ids, const double *lps, size_t i, size_t end,
                                 uint64_t *u, uint64_t *z) {
    for (; i < end; i++) {
        uint64_t b = i > 0 && better(lps[i], ids[i], lps[i - 1], ids[i - 1]);
        *u |= b << (i & 63);
        *z |= (uint64_t)(lps[i] == HEAD_SENTINEL) << (i & 63);
    }
    return end;
}

static void sweep_scalar(const int64_t *ids, const double *lps, size_t n, uint64_t *up,
                         uint64_t *sent) {
    for (size_t w = 0; w * 64 < n; w++) {
        uint64_t u = 0, z = 0;
        sweep_range(ids, lps, w * 64, n - w * 64 < 64 ? n : w * 64 + 64, &u, &z);
        up[w] = u;
        sent[w] = z;
    }
}

#ifdef TW_X86_SIMD
TW_TARGET_AVX2 static void sweep_avx2(const int64_t *ids, const double *lps,
                                                              size_t n, uint64_t *up,
                                                              uint64_t *sent) {
    const __m256d sentinel = _mm256_set1_pd(HEAD_SENTINEL);
    for (size_t w = 0; w * 64 < n; w++) {
        uint64_t u = 0, z = 0;
        size_t i = w * 64, end = n - w * 64 < 64 ? n : w * 64 + 64;
        if (i == 0) /* the first four: there is nothing before the first */
            i = sweep_range(ids, lps, 0, end < 4 ? end : 4, &u, &z);
        for (; i + 4 <= end; i += 4) {
            __m256i id = _mm256_loadu_si256((const __m256i *)(ids + i));
            __m256i pid = _mm256_loadu_si256((const __m256i *)(ids + i - 1));
            __m256d v = _mm256_loadu_pd(lps + i), pv = _mm256_loadu_pd(lps + i - 1);
            __m256d gt = _mm256_cmp_pd(v, pv, _CMP_GT_OQ), eq = _mm256_cmp_pd(v, pv, _CMP_EQ_OQ);
            __m256d lt = _mm256_castsi256_pd(_mm256_cmpgt_epi64(pid, id));
            __m256d b = _mm256_or_pd(gt, _mm256_and_pd(eq, lt));
            u |= (uint64_t)_mm256_movemask_pd(b) << (i & 63);
            z |= (uint64_t)_mm256_movemask_pd(_mm256_cmp_pd(v, sentinel, _CMP_EQ_OQ)) << (i & 63);
        }
        sweep_range(ids, lps, i, end, &u, &z);
        up[w] = u;
        sent[w] = z;
    }
}
#endif

#ifdef TW_NEON_SIMD
/* Eight 64-bit comparison results (lanes all ones or zero) as the low 8 bits of a word. */
static inline uint64_t bits8_neon(uint64x2_t a, uint64x2_t b, uint64x2_t c, uint64x2_t d) {
    static const uint8_t weights[8] = {1, 2, 4, 8, 16, 32, 64, 128};
    uint32x4_t ab = vuzp1q_u32(vreinterpretq_u32_u64(a), vreinterpretq_u32_u64(b));
    uint32x4_t cd = vuzp1q_u32(vreinterpretq_u32_u64(c), vreinterpretq_u32_u64(d));
    uint16x8_t all = vuzp1q_u16(vreinterpretq_u16_u32(ab), vreinterpretq_u16_u32(cd));
    return vaddv_u8(vand_u8(vmovn_u16(all), vld1_u8(weights)));
}

/* sweep_avx2 with NEON: eight candidates per step, two per vector. */
static void sweep_neon(const int64_t *ids, const double *lps, size_t n, uint64_t *up,
                       uint64_t *sent) {
    const float64x2_t sentinel = vdupq_n_f64(HEAD_SENTINEL);
    for (size_t w = 0; w * 64 < n; w++) {
        uint64_t u = 0, z = 0;
        size_t i = w * 64, end = n - w * 64 < 64 ? n : w * 64 + 64;
        if (i == 0) /* the first eight: there is nothing before the first */
            i = sweep_range(ids, lps, 0, end < 8 ? end : 8, &u, &z);
        for (; i + 8 <= end; i += 8) {
            float64x2x4_t v = vld1q_f64_x4(lps + i), pv = vld1q_f64_x4(lps + i - 1);
            int64x2x4_t id = vld1q_s64_x4(ids + i), pid = vld1q_s64_x4(ids + i - 1);
            uint64x2_t b[4], s[4];
            for (int k = 0; k < 4; k++) {
                uint64x2_t tie = vandq_u64(vceqq_f64(v.val[k], pv.val[k]), vcltq_s64(id.val[k], pid.val[k]));
                b[k] = vorrq_u64(vcgtq_f64(v.val[k], pv.val[k]), tie);
                s[k] = vceqq_f64(v.val[k], sentinel);
            }
            u |= bits8_neon(b[0], b[1], b[2], b[3]) << (i & 63);
            z |= bits8_neon(s[0], s[1], s[2], s[3]) << (i & 63);
        }
        sweep_range(ids, lps, i, end, &u, &z);
        up[w] = u;
        sent[w] = z;
    }
}
#endif

static void sweep(int path, const int64_t *ids, const double *lps, size_t n, uint64_t *up,
                  uint64_t *sent) {
    up[(n + 63) / 64] = sent[(n + 63) / 64] = 0; /* the word to spare */
#ifdef TW_X86_SIMD
    if (path == TW_PATH_AVX2 || path == TW_PATH_AVX512) {
        sweep_avx2(ids, lps, n, up, sent);
        return;
    }
#endif
#ifdef TW_NEON_SIMD
    if (path == TW_PATH_NEON) {
        sweep_neon(ids, lps, n, up, sent);
        return;
    }
#endif
    (void)path;
    sweep_scalar(ids, lps, n, up, sent);
}

/* len (<= 64) bits of a flag array from bit `at` (the array has a word to spare). */
static inline uint64_t flag_bits(const uint64_t *f, size_t at, size_t len) {
    size_t w = at >> 6, s = at & 63;
    uint64_t v = f[w] >> s;
    if (s) v |= f[w + 1] << (64 - s);
    return len == 64 ? v : v & ((UINT64_C(1) << len) - 1);
}

/* The shape of a head of up to 64 candidates without sentinels from its `up` bits. */
static inline int head_shape(const int64_t *ids, const double *lps, size_t len, uint64_t up) {
    up &= ~UINT64_C(1);
    if (up == 0) return 0;
    if (up != 2) return -1;
    size_t q = 1;
    while (q + 1 < len && better(lps[q + 1], ids[q + 1], lps[0], ids[0])) q++;
    return (int)q;
}

#ifdef TW_X86_SIMD
/* head_shape's run (the candidates after the second that are better than the first) eight
   at a time. */
TW_TARGET_AVX512 static inline int head_shape_avx512(const int64_t *ids, const double *lps,
                                                     size_t len, uint64_t up) {
    up &= ~UINT64_C(1);
    if (up == 0) return 0;
    if (up != 2) return -1;
    const __m512d v0 = _mm512_set1_pd(lps[0]);
    const __m512i i0 = _mm512_set1_epi64(ids[0]);
    size_t q = 1;
    for (size_t i = 2; i < len; i += 8) {
        __mmask8 m = len - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (len - i)) - 1);
        __m512d v = _mm512_maskz_loadu_pd(m, lps + i);
        __mmask8 b = _mm512_mask_cmp_pd_mask(m, v, v0, _CMP_GT_OQ) |
                     (_mm512_mask_cmp_pd_mask(m, v, v0, _CMP_EQ_OQ) &
                      _mm512_mask_cmplt_epi64_mask(m, _mm512_maskz_loadu_epi64(m, ids + i), i0));
        unsigned run = tw_ctz32(~(uint32_t)b); /* lanes past the head are 0: the run stops */
        q += run;
        if (run < 8) break;
    }
    return (int)q;
}

/* dst[0 .. n) = src[0 .. n), eight at a time. */
TW_TARGET_AVX512 static inline void copy_avx512(int64_t *oid, double *olp, const int64_t *ids,
                                                const double *lps, size_t n) {
    for (size_t j = 0; j < n; j += 8) {
        __mmask8 m = n - j >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - j)) - 1);
        _mm512_mask_storeu_epi64(oid + j, m, _mm512_maskz_loadu_epi64(m, ids + j));
        _mm512_mask_storeu_pd(olp + j, m, _mm512_maskz_loadu_pd(m, lps + j));
    }
}

/* emit, eight at a time. */
TW_TARGET_AVX512 static void emit_avx512(const int64_t *ids, const double *lps, int shape,
                                         size_t count, int64_t *oid, double *olp) {
    size_t q = (size_t)shape;
    if (shape == 0) {
        copy_avx512(oid, olp, ids, lps, count);
        return;
    }
    copy_avx512(oid, olp, ids + 1, lps + 1, count < q ? count : q);
    if (count > q) {
        oid[q] = ids[0];
        olp[q] = lps[0];
        copy_avx512(oid + q + 1, olp + q + 1, ids + q + 1, lps + q + 1, count - q - 1);
    }
}

/* Where sid first is among ids[0 .. len), or len. */
TW_TARGET_AVX512 static inline size_t find_avx512(const int64_t *ids, size_t len, int64_t sid) {
    const __m512i want = _mm512_set1_epi64(sid);
    for (size_t i = 0; i < len; i += 8) {
        __mmask8 m = len - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (len - i)) - 1);
        __mmask8 hit = _mm512_mask_cmpeq_epi64_mask(m, _mm512_maskz_loadu_epi64(m, ids + i), want);
        if (hit) return i + tw_ctz32(hit);
    }
    return len;
}
#endif

/* Position p of the ranked order, for a shape >= 0. */
static inline size_t shape_at(int shape, size_t p) {
    size_t q = (size_t)shape;
    return shape == 0 || p > q ? p : p < q ? p + 1 : 0;
}

/* How many of a ranked head of m without support are kept: the first k, or those above a
   tie across the k-th place. */
static inline size_t kept(const double *lps, int shape, size_t m, int64_t k) {
    size_t kk = k < 1 ? 0 : (uint64_t)k < m ? (size_t)k : m;
    if (kk > 0 && kk < m && lps[shape_at(shape, kk - 1)] == lps[shape_at(shape, kk)]) {
        double boundary = lps[shape_at(shape, kk)];
        while (kk > 0 && lps[shape_at(shape, kk - 1)] == boundary) kk--;
    }
    return kk;
}

/* The first count of the ranked order, for a shape >= 0. */
static void emit(const int64_t *ids, const double *lps, int shape, size_t count, int64_t *oid,
                 double *olp) {
    size_t q = (size_t)shape;
    if (count == 0) return;
    if (shape == 0) {
        memcpy(oid, ids, count * sizeof(int64_t));
        memcpy(olp, lps, count * sizeof(double));
    } else if (count <= q) {
        memcpy(oid, ids + 1, count * sizeof(int64_t));
        memcpy(olp, lps + 1, count * sizeof(double));
    } else {
        memcpy(oid, ids + 1, q * sizeof(int64_t));
        memcpy(olp, lps + 1, q * sizeof(double));
        oid[q] = ids[0];
        olp[q] = lps[0];
        memcpy(oid + q + 1, ids + q + 1, (count - q - 1) * sizeof(int64_t));
        memcpy(olp + q + 1, lps + q + 1, (count - q - 1) * sizeof(double));
    }
}

/* The head of one token, ranked, into oid/olp (room for len entries); *r gets its size.
   shape: as head_shape gives it for the first `live` candidates (the rest are at the
   sentinel), or -1 (unknown: ranked here). */
static int select_one(int path, const int64_t *ids, const double *lps, size_t len, size_t live,
                      int64_t sid, double slp, int64_t k, const int32_t *sup, size_t slen,
                      int has_sup, int shape, int64_t *oid, double *olp, size_t *r, scratch *sc) {
    size_t at = len;
#ifdef TW_X86_SIMD
    if (path == TW_PATH_AVX512)
        at = find_avx512(ids, len, sid);
    else
#endif
        for (size_t i = 0; i < len; i++)
            if (ids[i] == sid) {
                at = i;
                break;
            }
    if (at < len && !is_close(lps[at], slp, 1e-6, 1e-5)) return TW_HEAD_DISAGREE;
    size_t m = 0;
    if (shape >= 0) {
        m = has_sup ? live : kept(lps, shape, live, k);
#ifdef TW_X86_SIMD
        if (path == TW_PATH_AVX512)
            emit_avx512(ids, lps, shape, m, oid, olp);
        else
#endif
            emit(ids, lps, shape, m, oid, olp);
        if (!has_sup) {
            *r = m;
            return TW_HEAD_OK;
        }
    } else {
        for (size_t i = 0; i < len; i++) {
            oid[m] = ids[i];
            olp[m] = lps[i];
            m += lps[i] != HEAD_SENTINEL;
        }
    }
    if (has_sup) {
        /* keep_support keeps order: rank before or after it */
        int bad = keep_support(path, oid, olp, m, sup, slen, &m, sc);
        if (bad) return bad;
        if (shape < 0 && m > 1) rank_top(oid, olp, m, m);
        *r = m;
        return TW_HEAD_OK;
    }
    if (k < 1 || m == 0) {
        *r = 0;
        return TW_HEAD_OK;
    }
    size_t kk = (uint64_t)k < m ? (size_t)k : m;
    rank_top(oid, olp, m, kk < m ? kk + 1 : m);
    *r = kept(olp, 0, m, k); /* ranked in place: shape 0 */
    return TW_HEAD_OK;
}

/* ------------------------------------------------------------------------------------------
 * All tokens.
 * ------------------------------------------------------------------------------------------ */

/* Values per batch of fast exps (a token longer than this is estimated in pieces). */
#define EXP_CHUNK 1024

/* e[i] = F(v[i]) for v[i] in [-700, 1], 0 below -700. Returns whether some v[i] is NaN or
   above 1 (the tokens with one are decided exactly). */
static int exps_scalar(const double *v, size_t n, double *e) {
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
TW_TARGET_AVX512 static int exps_avx512(const double *v, size_t n,
                                                                double *e) {
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

TW_TARGET_AVX2 static int exps_avx2(const double *v, size_t n, double *e) {
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
    if (i < n) any |= exps_scalar(v + i, n - i, e + i);
    return any;
}
#endif

#ifdef TW_NEON_SIMD
static int exps_neon(const double *v, size_t n, double *e) {
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
    if (i < n) any |= exps_scalar(v + i, n - i, e + i);
    return any;
}
#endif

static int exps(int path, const double *v, size_t n, double *e) {
#ifdef TW_X86_SIMD
    if (path == TW_PATH_AVX512) return exps_avx512(v, n, e);
    if (path == TW_PATH_AVX2) return exps_avx2(v, n, e);
#endif
#ifdef TW_NEON_SIMD
    if (path == TW_PATH_NEON) return exps_neon(v, n, e);
#endif
    (void)path;
    return exps_scalar(v, n, e);
}

/* Whether a value is NaN or above 1. */
static int any_special(const double *v, size_t r) {
    int bad = 0;
    for (size_t i = 0; i < r; i++) bad |= !(v[i] <= 1.0);
    return bad;
}

/* Plain summation (any order is covered by the bound), four chains for speed. */
static inline double sum(const double *e, size_t r) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    size_t i = 0;
    for (; i + 4 <= r; i += 4) {
        s0 += e[i];
        s1 += e[i + 1];
        s2 += e[i + 2];
        s3 += e[i + 3];
    }
    for (; i < r; i++) s0 += e[i];
    return (s0 + s1) + (s2 + s3);
}

/*
 * The sum rules, then FEWER, for the tokens [from, to) of a block, whose heads are selected:
 * the estimates of their sums into sums[t - from] (NaN: decide exactly), fast exps for as
 * many whole tokens as fit a chunk, then the verdicts. Returns the first failing token, or -1.
 */
static ptrdiff_t check_sums(int path, size_t from, size_t to, const int64_t *coff, int64_t k,
                            const int64_t *soff, const int64_t *out_off, const double *out_lps,
                            double *sums, int *code) {
    double e[EXP_CHUNK];
    /* the relative part of the estimate's error bound, by the fast exp's precision */
    double rel = path == TW_PATH_SCALAR ? 0x1p-37 : 0x1p-16;
    for (size_t t = from; t < to;) {
        int64_t base = out_off[t];
        size_t u = t;
        while (u < to && out_off[u + 1] - base <= EXP_CHUNK) u++;
        if (u == t) { /* one long token, in pieces */
            size_t r = (size_t)(out_off[t + 1] - base);
            double s = 0.0;
            int special = 0;
            for (size_t i = 0; i < r; i += EXP_CHUNK) {
                size_t piece = r - i < EXP_CHUNK ? r - i : EXP_CHUNK;
                special |= exps(path, out_lps + base + i, piece, e);
                s += sum(e, piece);
            }
            sums[t - from] = special ? NAN : s;
            u = t + 1;
        } else {
            int special = exps(path, out_lps + base, (size_t)(out_off[u] - base), e);
            for (size_t x = t; x < u; x++) {
                size_t r = (size_t)(out_off[x + 1] - out_off[x]);
                double s = sum(e + (out_off[x] - base), r);
                sums[x - from] = special && any_special(out_lps + out_off[x], r) ? NAN : s;
            }
        }
        t = u;
    }
    for (size_t t = from; t < to; t++) {
        const double *v = out_lps + out_off[t];
        size_t r = (size_t)(out_off[t + 1] - out_off[t]);
        double s = sums[t - from];
        int has_sup = row_has_support(soff, t);
        int verdict = r == 0 && !has_sup ? TW_HEAD_MASS : sum_verdict(r, has_sup, s, rel);
        if (verdict == SUM_EXACT) verdict = exact_verdict(v, r, has_sup);
        if (!verdict && !has_sup && too_few((size_t)(coff[t + 1] - coff[t]), k))
            verdict = TW_HEAD_FEWER;
        if (verdict) {
            *code = verdict;
            return (ptrdiff_t)t;
        }
    }
    return -1;
}

ptrdiff_t tw_select_heads(size_t n, const int64_t *coff, const int64_t *cand_ids,
                          const double *cand_lps, const int64_t *sampled_ids,
                          const double *sampled_lps, int64_t k, const int64_t *soff,
                          const int32_t *sup, int64_t *out_off, int64_t *out_ids,
                          double *out_lps, int *code, int path) {
    path = tw_path_resolve(path);
    scratch sc = {NULL, 0};
    ptrdiff_t failed = -1;
    int64_t o = 0;
    uint64_t up[SWEEP_WORDS], sent[SWEEP_WORDS];
    double sums[TOKEN_BLOCK];
    *code = TW_HEAD_OK;
    out_off[0] = 0;
    for (size_t from = 0, to; from < n && failed < 0; from = to) {
        /* a block: tokens whose candidates fit one sweep, or one longer token */
        int64_t base = coff[from];
        to = block_end(coff, from, n, 0);
        int flagged = coff[to] - base <= SWEEP;
        if (flagged) sweep(path, cand_ids + base, cand_lps + base, (size_t)(coff[to] - base), up, sent);
        int bad = TW_HEAD_OK;
        size_t t;
        for (t = from; t < to; t++) {
            size_t len = (size_t)(coff[t + 1] - coff[t]), r = 0;
            const int64_t *ids = cand_ids + coff[t];
            const double *lps = cand_lps + coff[t];
            int shape = -1;
            size_t live = len;
            if (flagged && len <= 64 && len > 0) {
                size_t at = (size_t)(coff[t] - base);
                uint64_t tail = flag_bits(sent, at, len);
                if (tail) { /* sentinels as a tail (a filtered row) leave a head before them */
                    size_t p = tw_ctz64(tail);
                    live = tail >> p == (len - p == 64 ? ~UINT64_C(0) : (UINT64_C(1) << (len - p)) - 1) ? p : 0;
                }
                if (live) {
#ifdef TW_X86_SIMD
                    if (path == TW_PATH_AVX512)
                        shape = head_shape_avx512(ids, lps, live, flag_bits(up, at, live));
                    else
#endif
                        shape = head_shape(ids, lps, live, flag_bits(up, at, live));
                }
            }
            int has_sup = row_has_support(soff, t);
            const int32_t *s = has_sup ? sup + soff[t] : NULL;
            size_t slen = has_sup ? (size_t)(soff[t + 1] - soff[t]) : 0;
            bad = select_one(path, ids, lps, len, live, sampled_ids[t], sampled_lps[t], k, s, slen,
                             has_sup, shape, out_ids + o, out_lps + o, &r, &sc);
            if (bad) break;
            o += (int64_t)r;
            out_off[t + 1] = o;
        }
        failed = check_sums(path, from, t, coff, k, soff, out_off, out_lps, sums, code);
        if (failed < 0 && bad) {
            failed = (ptrdiff_t)t;
            *code = bad;
        }
    }
    tw_mem_free(sc.sup);
    return failed;
}

/* ------------------------------------------------------------------------------------------
 * Compact rows to candidates.
 * ------------------------------------------------------------------------------------------ */

/* Rows of up to 64 entries: a 256-bit filter of the ids kept so far; a hit is confirmed by
   a scan of them. A repeat of a kept id updates its value (the dict keeps the last). The
   filter's hash is fixed: ids chosen to hit it cost at most 64 compares an entry. */
static size_t compact_row_small(const uint32_t *ids, const float *vals, size_t len, uint64_t take,
                                int64_t *oid, double *olp) {
    uint64_t seen[4] = {0, 0, 0, 0};
    size_t c = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t id = ids[i];
        unsigned h = (uint32_t)(id * 0x9E3779B1u) >> 24;
        uint64_t bit = UINT64_C(1) << (h & 63);
        if (seen[h >> 6] & bit) {
            size_t j = 0;
            while (j < c && oid[j] != (int64_t)id) j++;
            if (j < c) {
                olp[j] = vals[i];
                continue;
            }
        }
        if (c == take) continue;
        seen[h >> 6] |= bit;
        oid[c] = id;
        olp[c] = vals[i];
        c++;
    }
    return c;
}

/* Longer rows: an open-addressing table from id to output position, stamped per row and
   slotted by the keyed hash (tw_hash.h: the row's ids cannot be chosen to share a cluster). */
typedef struct {
    uint32_t *keys;
    size_t *pos;
    uint64_t *stamps;
    unsigned bits;
} id_table;

static size_t compact_row_table(id_table *tb, uint64_t stamp, const uint32_t *ids,
                                const float *vals, size_t len, uint64_t take, int64_t *oid,
                                double *olp) {
    size_t mask = ((size_t)1 << tb->bits) - 1, c = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t id = ids[i];
        size_t h = tw_hash_slot(id, tb->bits);
        for (;;) {
            if (tb->stamps[h] != stamp) {
                if (c < take) {
                    tb->stamps[h] = stamp;
                    tb->keys[h] = id;
                    tb->pos[h] = c;
                    oid[c] = id;
                    olp[c] = vals[i];
                    c++;
                }
                break;
            }
            if (tb->keys[h] == id) {
                olp[tb->pos[h]] = vals[i];
                break;
            }
            h = (h + 1) & mask;
        }
    }
    return c;
}

#ifdef TW_X86_SIMD
TW_TARGET_AVX512 static inline void store_lanes(__m512i ids, __m512 vals,
                                                                        unsigned cnt, int64_t *oid,
                                                                        double *olp) {
    __mmask8 m0 = cnt >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << cnt) - 1);
    _mm512_mask_storeu_epi64(oid, m0, _mm512_cvtepu32_epi64(_mm512_castsi512_si256(ids)));
    _mm512_mask_storeu_pd(olp, m0, _mm512_cvtps_pd(_mm512_castps512_ps256(vals)));
    if (cnt > 8) {
        __mmask8 m1 = (__mmask8)((1u << (cnt - 8)) - 1);
        _mm512_mask_storeu_epi64(oid + 8, m1, _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(ids, 1)));
        _mm512_mask_storeu_pd(olp + 8, m1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(vals, 1)));
    }
}

/* One row of up to 32 entries loaded (ids a/b, values va/vb: lanes 0-15 and 16-31, zero
   past the row) and its candidates found by conflict detection: *keep gets the lanes of the
   first `take` distinct ids. 0 when a repeated id does not carry identical bits everywhere
   (a zero of either sign), left to the scalar code. */
typedef struct {
    __m512i a, b, va, vb;
    __mmask16 ma, mb;
} row_lanes;

TW_TARGET_AVX512 static int row_keep_avx512(const uint32_t *ids, const float *vals, size_t len,
                                            uint64_t take, row_lanes *L, uint32_t *keep_out) {
    __mmask16 ma = len >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << len) - 1);
    __mmask16 mb = len > 16 ? (__mmask16)((1u << (len - 16)) - 1) : 0;
    __m512i a = _mm512_maskz_loadu_epi32(ma, ids);
    __m512i va = _mm512_maskz_loadu_epi32(ma, vals);
    __m512i ca = _mm512_maskz_conflict_epi32(ma, a);
    uint32_t rep = _mm512_test_epi32_mask(ca, ca); /* lanes repeating an earlier lane */
    __m512i b = _mm512_setzero_si512(), vb = _mm512_setzero_si512();
    if (mb) {
        b = _mm512_maskz_loadu_epi32(mb, ids + 16);
        vb = _mm512_maskz_loadu_epi32(mb, vals + 16);
        unsigned lb = (unsigned)len - 16;
        uint32_t repb;
        if (lb <= 8) {
            /* two more conflict detections cover the second vector against the first: on
               a[0 .. 16-lb) + b[0 .. lb) and on a[16-lb .. 16) + b[0 .. lb) */
            const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
            __m512i idx1 = _mm512_mask_add_epi32(iota, (__mmask16)(0xFFFFu << (16 - lb)), iota,
                                                 _mm512_set1_epi32((int)lb));
            __m512i idx2 = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(16 - lb)));
            __m512i c1 = _mm512_conflict_epi32(_mm512_permutex2var_epi32(a, idx1, b));
            __m512i c2 = _mm512_maskz_conflict_epi32((__mmask16)((1u << (2 * lb)) - 1),
                                                     _mm512_permutex2var_epi32(a, idx2, b));
            repb = ((uint32_t)_mm512_test_epi32_mask(c1, c1) >> (16 - lb)) |
                   ((uint32_t)_mm512_test_epi32_mask(c2, c2) >> lb);
        } else {
            __m512i cb = _mm512_maskz_conflict_epi32(mb, b);
            repb = _mm512_test_epi32_mask(cb, cb);
            for (uint32_t left = mb & ~repb; left; left &= left - 1) {
                unsigned j = tw_ctz32(left);
                if (_mm512_mask_cmpeq_epi32_mask(ma, a, _mm512_set1_epi32((int)ids[16 + j])))
                    repb |= 1u << j;
            }
        }
        rep |= (repb & mb) << 16;
    }
    /* every occurrence of a repeated id must carry the same bits (else: the scalar code) */
    for (uint32_t left = rep; left; left &= left - 1) {
        unsigned j = tw_ctz32(left);
        uint32_t bits;
        memcpy(&bits, vals + j, sizeof bits);
        __m512i want = _mm512_set1_epi32((int)ids[j]), same = _mm512_set1_epi32((int)bits);
        __mmask16 ea = _mm512_mask_cmpeq_epi32_mask(ma, a, want);
        __mmask16 eb = _mm512_mask_cmpeq_epi32_mask(mb, b, want);
        if (_mm512_mask_cmpneq_epi32_mask(ea, va, same) | _mm512_mask_cmpneq_epi32_mask(eb, vb, same))
            return 0;
    }
    uint32_t keep = ((uint32_t)ma | (uint32_t)mb << 16) & ~rep;
    if (take < 32 && (uint64_t)_mm_popcnt_u32(keep) > take)
        keep = _pdep_u32((1u << take) - 1, keep);
    L->a = a;
    L->b = b;
    L->va = va;
    L->vb = vb;
    L->ma = ma;
    L->mb = mb;
    *keep_out = keep;
    return 1;
}

/* The kept lanes of a row (row_keep_avx512) as candidates: ids and values widened. */
TW_TARGET_AVX512 static size_t store_keep(const row_lanes *L, uint32_t keep, int64_t *oid, double *olp) {
    __mmask16 ka = (__mmask16)(keep & 0xFFFF), kb = (__mmask16)(keep >> 16);
    unsigned na = (unsigned)_mm_popcnt_u32(ka), nb = (unsigned)_mm_popcnt_u32(kb);
    store_lanes(_mm512_maskz_compress_epi32(ka, L->a),
                _mm512_maskz_compress_ps(ka, _mm512_castsi512_ps(L->va)), na, oid, olp);
    if (nb)
        store_lanes(_mm512_maskz_compress_epi32(kb, L->b),
                    _mm512_maskz_compress_ps(kb, _mm512_castsi512_ps(L->vb)), nb, oid + na, olp + na);
    return na + nb;
}

/* Rows of up to 32 entries by conflict detection; 0 (nothing written) when a repeated id
   does not carry identical bits everywhere (a zero of either sign), left to the scalar code. */
TW_TARGET_AVX512 static int compact_row_avx512(const uint32_t *ids, const float *vals, size_t len,
                                               uint64_t take, int64_t *oid, double *olp,
                                               size_t *count) {
    row_lanes L;
    uint32_t keep;
    if (!row_keep_avx512(ids, vals, len, take, &L, &keep)) return 0;
    *count = store_keep(&L, keep, oid, olp);
    return 1;
}

/* The row rule on a row row_keep_avx512 took (its repeats carry identical bits): 0 when a
   value is NaN (left to the scalar code), else 1 with *r TW_ROW_OK and the sampled value in
   *out when the sampled id is in the row and its last value (a zero's sign) is not the
   sentinel, TW_ROW_MISSING_SAMPLED otherwise. */
TW_TARGET_AVX512 static int row_rule_avx512(const row_lanes *L, const float *vals, int64_t sid,
                                            float *out, int *r) {
    __m512 va = _mm512_castsi512_ps(L->va), vb = _mm512_castsi512_ps(L->vb);
    if (_mm512_mask_cmp_ps_mask(L->ma, va, va, _CMP_UNORD_Q) | _mm512_mask_cmp_ps_mask(L->mb, vb, vb, _CMP_UNORD_Q))
        return 0;
    uint32_t hit = 0;
    if (sid >= 0 && sid <= (int64_t)UINT32_MAX) {
        __m512i want = _mm512_set1_epi32((int)(uint32_t)sid);
        hit = (uint32_t)_mm512_mask_cmpeq_epi32_mask(L->ma, L->a, want) |
              (uint32_t)_mm512_mask_cmpeq_epi32_mask(L->mb, L->b, want) << 16;
    }
    *r = TW_ROW_MISSING_SAMPLED;
    if (hit && vals[63 - tw_clz64(hit)] != (float)TW_SENTINEL) {
        *out = vals[63 - tw_clz64(hit)];
        *r = TW_ROW_OK;
    }
    return 1;
}
#endif

#ifdef TW_X86_SIMD
/* One row of up to 32 entries for both kernels: its candidates (compact_row_avx512) and its
   row rule in *r, with the sampled value in *out when it holds. 0 (nothing decided) when the
   row holds a NaN or repeats whose bits differ (a zero of either sign): the kernels then run
   on it one after the other. Repeats with identical bits and no NaN agree, so what is left
   of the row rule is the sampled id. */
TW_TARGET_AVX512 static int fused_row_avx512(const uint32_t *ids, const float *vals, size_t len,
                                             uint64_t take, int64_t sid, float *out, int64_t *oid,
                                             double *olp, size_t *count, int *r) {
    row_lanes L;
    uint32_t keep;
    if (!row_keep_avx512(ids, vals, len, take, &L, &keep) || !row_rule_avx512(&L, vals, sid, out, r))
        return 0;
    *count = store_keep(&L, keep, oid, olp);
    return 1;
}

/* row_keep_avx512 and row_rule_avx512 with AVX2, for rows of up to 32 entries: the lanes
   repeating an earlier lane found in registers, eight lanes a compare. 0 (nothing decided)
   when the row holds a NaN or repeats whose bits differ (a zero of either sign); else 1, the
   row loaded into a and bits (four vectors each, zero past the row), *keep the lanes of the
   first `take` distinct ids, and the row rule in *r with the sampled value in *out when it
   holds. */
TW_TARGET_AVX2 static int row_keep_avx2(const uint32_t *ids, const float *vals, size_t len,
                                        uint64_t take, int64_t sid, float *out, int *r,
                                        __m256i *a, __m256i *bits, uint32_t *keep_out) {
    size_t nvec = (len + 7) / 8;
    uint32_t all = tw_load32_avx2(ids, len, a), nan = 0, rep, hit = 0, keep;
    tw_load32_avx2(vals, len, bits);
    for (size_t k = nvec; k < 4; k++) a[k] = bits[k] = _mm256_setzero_si256();
    TW_UNROLL4 for (size_t k = 0; k < 4; k++) {
        __m256 v = _mm256_castsi256_ps(bits[k]);
        nan |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) << (8 * k);
    }
    if (nan) return 0;
    /* lanes past the row (id 0) come after the row's, so they mark none of the row's; they
       are dropped from rep, so nothing past the row is read below */
    rep = tw_repeats_avx2(a, nvec) & all;
    /* every occurrence of a repeated id must carry the same bits (else: the scalar code) */
    for (uint32_t left = rep; left; left &= left - 1) {
        unsigned j = tw_ctz32(left);
        int32_t same;
        uint32_t differ = 0;
        memcpy(&same, vals + j, sizeof same);
        __m256i want = _mm256_set1_epi32((int)ids[j]), want_bits = _mm256_set1_epi32(same);
        TW_UNROLL4 for (size_t k = 0; k < 4; k++)
            differ |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(
                          _mm256_andnot_si256(_mm256_cmpeq_epi32(bits[k], want_bits), _mm256_cmpeq_epi32(a[k], want))))
                      << (8 * k);
        if (differ & all) return 0;
    }
    if (sid >= 0 && sid <= (int64_t)UINT32_MAX) {
        __m256i want = _mm256_set1_epi32((int)(uint32_t)sid);
        TW_UNROLL4 for (size_t k = 0; k < 4; k++)
            hit |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a[k], want))) << (8 * k);
        hit &= all; /* lanes past the row load as id 0 */
    }
    *r = TW_ROW_MISSING_SAMPLED;
    if (hit && vals[63 - tw_clz64(hit)] != (float)TW_SENTINEL) {
        *out = vals[63 - tw_clz64(hit)];
        *r = TW_ROW_OK;
    }
    /* the first `take`: the highest lanes dropped (a row holds at most a few more) */
    keep = all & ~rep;
    while ((uint64_t)_mm_popcnt_u32(keep) > take) keep &= ~(UINT32_C(1) << (63 - tw_clz64(keep)));
    *keep_out = keep;
    return 1;
}

/* fused_row_avx512 with AVX2 (row_keep_avx2), the candidates widened one at a time. */
TW_TARGET_AVX2 static int fused_row_avx2(const uint32_t *ids, const float *vals, size_t len,
                                         uint64_t take, int64_t sid, float *out, int64_t *oid,
                                         double *olp, size_t *count, int *r) {
    __m256i a[4], bits[4];
    uint32_t keep;
    size_t c = 0;
    if (!row_keep_avx2(ids, vals, len, take, sid, out, r, a, bits, &keep)) return 0;
    for (; keep; keep &= keep - 1, c++) {
        unsigned i = tw_ctz32(keep);
        oid[c] = ids[i];
        olp[c] = vals[i];
    }
    *count = c;
    return 1;
}
#endif

ptrdiff_t tw_compact_rows_candidates(size_t n, const int64_t *roff, const uint32_t *row_ids,
                                     const float *row_vals, const int64_t *sampled,
                                     int64_t num_top, float *out_sampled, int *kind,
                                     int64_t *coff, int64_t *cand_ids, double *cand_lps,
                                     int path) {
    size_t longest = 0, limit = n;
    ptrdiff_t failed = -1;
    path = tw_path_resolve(path);
    for (size_t t = 0; t < n; t++) {
        size_t len = (size_t)(roff[t + 1] - roff[t]);
        if (len > longest) longest = len;
    }
    coff[0] = 0;
#ifdef TW_X86_SIMD
    if ((path == TW_PATH_AVX512 || path == TW_PATH_AVX2) && longest <= 32) {
        uint64_t take = num_top < 1 ? 1 : (uint64_t)num_top;
        int64_t o = 0;
        for (size_t t = 0; t < n; t++) {
            const uint32_t *ids = row_ids + roff[t];
            const float *vals = row_vals + roff[t];
            size_t len = (size_t)(roff[t + 1] - roff[t]), c = 0;
            int64_t s = sampled[t], one[2];
            int r = TW_ROW_OK;
            int fused = path == TW_PATH_AVX512
                            ? fused_row_avx512(ids, vals, len, take, s, out_sampled + t, cand_ids + o,
                                               cand_lps + o, &c, &r)
                            : fused_row_avx2(ids, vals, len, take, s, out_sampled + t, cand_ids + o,
                                             cand_lps + o, &c, &r);
            if (!fused) {
                /* rows of at most 32: neither kernel needs scratch memory */
                tw_compact_rows(row_ids, row_vals, roff + t, 1, sampled + t, out_sampled + t, &r, path);
                if (r == TW_ROW_OK)
                    tw_compact_candidates(1, roff + t, row_ids, row_vals, num_top, one, cand_ids + o,
                                          cand_lps + o, path);
                c = r == TW_ROW_OK ? (size_t)one[1] : 0;
            }
            if (r != TW_ROW_OK) {
                for (size_t u = t; u < n; u++) coff[u + 1] = o;
                *kind = r;
                return (ptrdiff_t)t;
            }
            o += (int64_t)c;
            coff[t + 1] = o;
        }
        *kind = TW_ROW_OK;
        return -1;
    }
#endif
    failed = tw_compact_rows(row_ids, row_vals, roff, n, sampled, out_sampled, kind, path);
    if (*kind == TW_ROW_NOMEM)
        return 0;
    if (failed >= 0)
        limit = (size_t)failed;
    if (tw_compact_candidates(limit, roff, row_ids, row_vals, num_top, coff, cand_ids, cand_lps,
                              path) == TW_HEAD_NOMEM) {
        *kind = TW_ROW_NOMEM;
        return 0;
    }
    for (size_t u = limit; u < n; u++) coff[u + 1] = coff[limit];
    return failed;
}

int tw_compact_candidates(size_t n, const int64_t *roff, const uint32_t *row_ids,
                          const float *row_vals, int64_t num_top, int64_t *coff,
                          int64_t *cand_ids, double *cand_lps, int path) {
    path = tw_path_resolve(path);
    uint64_t take = num_top < 1 ? 1 : (uint64_t)num_top;
    size_t longest = 0;
    for (size_t t = 0; t < n; t++) {
        size_t len = (size_t)(roff[t + 1] - roff[t]);
        if (len > longest) longest = len;
    }
    id_table tb = {NULL, NULL, NULL, 0};
    if (longest > 64) {
        size_t keys = (uint64_t)longest < take ? longest : (size_t)take;
        unsigned bits = 4;
        /* at most 2^32 distinct ids: a table of 2^33 slots is never full */
        while (bits < 33 && bits + 1 < sizeof(size_t) * 8 && ((size_t)1 << bits) < 2 * keys) bits++;
        size_t cap = (size_t)1 << bits;
        tb.bits = bits;
        tb.keys = tw_mem_alloc(cap * sizeof(uint32_t));
        tb.pos = tw_mem_alloc(cap * sizeof(size_t));
        tb.stamps = tw_mem_calloc(cap, sizeof(uint64_t));
        if (!tb.keys || !tb.pos || !tb.stamps) {
            tw_mem_free(tb.keys);
            tw_mem_free(tb.pos);
            tw_mem_free(tb.stamps);
            return TW_HEAD_NOMEM;
        }
    }
    int64_t o = 0;
    coff[0] = 0;
    for (size_t t = 0; t < n; t++) {
        size_t len = (size_t)(roff[t + 1] - roff[t]), c = 0;
        const uint32_t *ids = row_ids + roff[t];
        const float *vals = row_vals + roff[t];
        int done = 0;
#ifdef TW_X86_SIMD
        if (path == TW_PATH_AVX512 && len <= 32)
            done = compact_row_avx512(ids, vals, len, take, cand_ids + o, cand_lps + o, &c);
#endif
        if (!done) {
            if (len <= 64)
                c = compact_row_small(ids, vals, len, take, cand_ids + o, cand_lps + o);
            else
                c = compact_row_table(&tb, (uint64_t)t + 1, ids, vals, len, take, cand_ids + o,
                                      cand_lps + o);
        }
        o += (int64_t)c;
        coff[t + 1] = o;
    }
    tw_mem_free(tb.keys);
    tw_mem_free(tb.pos);
    tw_mem_free(tb.stamps);
    (void)path;
    return TW_HEAD_OK;
}

/* ------------------------------------------------------------------------------------------
 * Compact rows to heads in one call.
 * ------------------------------------------------------------------------------------------ */

/* What compact_head_avx512 made of a token. */
#define FAST_NO 0  /* nothing decided: the token goes to the kernels above */
#define FAST_OK 1  /* a valid row and head, written */
#define FAST_ROW 2 /* the row breaks a row rule (*row_kind) */

#ifdef TW_X86_SIMD
/* n ids and their values in insertion_sort's order (value descending, then id ascending),
   in place. */
static void sort_head(uint32_t *id, float *val, unsigned n) {
    for (unsigned i = 1; i < n; i++) {
        uint32_t d = id[i];
        float x = val[i];
        unsigned j = i;
        while (j > 0 && (x > val[j - 1] || (x == val[j - 1] && d < id[j - 1]))) {
            id[j] = id[j - 1];
            val[j] = val[j - 1];
            j--;
        }
        id[j] = d;
        val[j] = x;
    }
}

/* cnt (<= 16) lanes of ids (as int64) and values into oid/olp. */
TW_TARGET_AVX512 static inline void store_head(int64_t *oid, float *olp, __m512i ids, __m512 vals,
                                               unsigned cnt) {
    __mmask16 m = (__mmask16)((1u << cnt) - 1);
    _mm512_mask_storeu_epi64(oid, (__mmask8)m, _mm512_cvtepu32_epi64(_mm512_castsi512_si256(ids)));
    if (cnt > 8)
        _mm512_mask_storeu_epi64(oid + 8, (__mmask8)(m >> 8),
                                 _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(ids, 1)));
    _mm512_mask_storeu_ps(olp, m, vals);
}

/* better() of 16 lanes (values v, ids c) over 16 others (pv, pc): a bit per lane. */
TW_TARGET_AVX512 static inline __mmask16 better16(__m512 v, __m512i c, __m512 pv, __m512i pc) {
    return _mm512_cmp_ps_mask(v, pv, _CMP_GT_OQ) |
           (_mm512_cmp_ps_mask(v, pv, _CMP_EQ_OQ) & _mm512_cmplt_epu32_mask(c, pc));
}

/* Whether a lane `take` of (v0, v1) is above 1 (its token's sum is decided exactly). */
TW_TARGET_AVX512 static inline int above_one(__m512 v0, __m512 v1, uint32_t take) {
    const __m512 one = _mm512_set1_ps(1.0f);
    return (_mm512_mask_cmp_ps_mask((__mmask16)take, v0, one, _CMP_GT_OQ) |
            _mm512_mask_cmp_ps_mask((__mmask16)(take >> 16), v1, one, _CMP_GT_OQ)) != 0;
}

/* e[i] = F(v[i]) as exps_avx512 makes it, from floats (not NaN, at most 1). */
TW_TARGET_AVX512 static void exps_f32_avx512(const float *v, size_t n, double *e) {
    const __m512d lo = _mm512_set1_pd(FEXP_LO), one = _mm512_set1_pd(1.0);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(m, v + i);
        __m512d x0 = _mm512_cvtps_pd(_mm512_castps512_ps256(x)), x1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
        __m512d f0, f1;
        fast_exp16_avx512(_mm512_min_pd(_mm512_max_pd(x0, lo), one), _mm512_min_pd(_mm512_max_pd(x1, lo), one),
                          &f0, &f1);
        _mm512_mask_storeu_pd(e + i, (__mmask8)m, _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(x0, lo, _CMP_GE_OQ), f0));
        _mm512_mask_storeu_pd(e + i + 8, (__mmask8)(m >> 8),
                              _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(x1, lo, _CMP_GE_OQ), f1));
    }
}

/*
 * One token of a compact row of up to 32 entries, in registers: the row rule
 * (row_rule_avx512), the candidates (row_keep_avx512), their ranked order (from their shape
 * as head_shape finds it, or sorted as select_one's rank_top sorts candidates without one:
 * ties in another order, sentinels inside), the head kept (kept(), or the support's ids as
 * keep_support keeps them), written to oid/olp. It decides only what is plain: FAST_OK when
 * the row is valid and so is its head up to the sum rules (no value above 1, not empty, no
 * FEWER), which heads_in_registers then checks a batch at a time; FAST_ROW when the sampled id
 * breaks the row rule. Anything else (a NaN, a repeat whose zero's sign differs, a support
 * id not ranked, ...) is FAST_NO, and the token goes to the kernels above, which decide and
 * report it as for every token. The sampled id's candidate carries the sampled value itself
 * (repeats here have identical bits), so DISAGREE never holds here.
 */
TW_TARGET_AVX512 static int compact_head_avx512(const uint32_t *ids, const float *vals, size_t len,
                                                uint64_t take, int64_t sid, int64_t k,
                                                const int32_t *sup, size_t slen, float *out_sampled,
                                                int64_t *oid, float *olp, size_t *count,
                                                int *row_kind) {
    row_lanes L;
    uint32_t keep;
    if (len == 0 || len > 32 || !row_keep_avx512(ids, vals, len, take, &L, &keep) ||
        !row_rule_avx512(&L, vals, sid, out_sampled, row_kind))
        return FAST_NO;
    if (*row_kind != TW_ROW_OK) return FAST_ROW;

    /* the m candidates as lanes 0-31 of (c0, c1) and (v0, v1) */
    __mmask16 ka = (__mmask16)(keep & 0xFFFF), kb = (__mmask16)(keep >> 16);
    unsigned na = (unsigned)_mm_popcnt_u32(ka), m = na + (unsigned)_mm_popcnt_u32(kb);
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i ia = _mm512_maskz_compress_epi32(ka, L.a), ib = _mm512_maskz_compress_epi32(kb, L.b);
    __m512i wa = _mm512_maskz_compress_epi32(ka, L.va), wb = _mm512_maskz_compress_epi32(kb, L.vb);
    __m512i gap = _mm512_sub_epi32(_mm512_add_epi32(iota, sixteen), _mm512_set1_epi32((int)na));
    __m512i idx0 = _mm512_mask_mov_epi32(gap, (__mmask16)((1u << na) - 1), iota);
    __m512i c0 = _mm512_permutex2var_epi32(ia, idx0, ib), c1 = _mm512_permutexvar_epi32(gap, ib);
    __m512 v0 = _mm512_castsi512_ps(_mm512_permutex2var_epi32(wa, idx0, wb));
    __m512 v1 = _mm512_castsi512_ps(_mm512_permutexvar_epi32(gap, wb));
    uint32_t all = m == 32 ? ~UINT32_C(0) : (UINT32_C(1) << m) - 1;

    /* live: the candidates before a tail at the sentinel */
    const __m512 sentinel = _mm512_set1_ps((float)HEAD_SENTINEL);
    uint32_t z = ((uint32_t)_mm512_cmp_ps_mask(v0, sentinel, _CMP_EQ_OQ) |
                  (uint32_t)_mm512_cmp_ps_mask(v1, sentinel, _CMP_EQ_OQ) << 16) & all;
    unsigned live = z ? tw_ctz32(z) : m;
    uint32_t lm = live == 32 ? ~UINT32_C(0) : (UINT32_C(1) << live) - 1;
    int shaped = live > 0 && (z == 0 || z >> live == all >> live); /* sentinels only as a tail */

    /* the shape (head_shape): each candidate against the one before it, then the run */
    __m512 pv0 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v0), _mm512_castps_si512(v0), 15));
    __m512 pv1 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v1), _mm512_castps_si512(v0), 15));
    __m512i pc0 = _mm512_alignr_epi32(c0, c0, 15), pc1 = _mm512_alignr_epi32(c1, c0, 15);
    uint32_t up = ((uint32_t)better16(v0, c0, pv0, pc0) | (uint32_t)better16(v1, c1, pv1, pc1) << 16) & lm & ~UINT32_C(1);
    unsigned q = 0;
    __m512i r0, r1;
    __m512 rv0, rv1;
    if (shaped && (up == 0 || up == 2)) {
        if (up) {
            __m512 f = _mm512_set1_ps(_mm512_cvtss_f32(v0));
            __m512i fi = _mm512_set1_epi32(_mm_cvtsi128_si32(_mm512_castsi512_si128(c0)));
            uint32_t run = ((uint32_t)better16(v0, c0, f, fi) | (uint32_t)better16(v1, c1, f, fi) << 16) & lm;
            q = 1 + tw_ctz32(~(run >> 2));
        }
        /* the ranked order (shape_at): r = c[1 .. q], c[0], c[q+1 ..] */
        __m512i qv = _mm512_set1_epi32((int)q), one = _mm512_set1_epi32(1), hi16 = _mm512_add_epi32(iota, sixteen);
        __m512i x0 = _mm512_mask_add_epi32(iota, _mm512_cmplt_epi32_mask(iota, qv), iota, one);
        __m512i x1 = _mm512_mask_add_epi32(hi16, _mm512_cmplt_epi32_mask(hi16, qv), hi16, one);
        x0 = _mm512_mask_mov_epi32(x0, _mm512_cmpeq_epi32_mask(iota, qv), _mm512_setzero_si512());
        x1 = _mm512_mask_mov_epi32(x1, _mm512_cmpeq_epi32_mask(hi16, qv), _mm512_setzero_si512());
        r0 = _mm512_permutex2var_epi32(c0, x0, c1);
        r1 = _mm512_permutex2var_epi32(c0, x1, c1);
        rv0 = _mm512_permutex2var_ps(v0, x0, v1);
        rv1 = _mm512_permutex2var_ps(v0, x1, v1);
    } else {
        /* no shape: the candidates not at the sentinel, wherever they are, sorted (what
           select_one ranks with rank_top then) */
        uint32_t keep_live = all & ~z, id[32];
        float val[32];
        __mmask16 k0 = (__mmask16)(keep_live & 0xFFFF), k1 = (__mmask16)(keep_live >> 16);
        unsigned n0 = (unsigned)_mm_popcnt_u32(k0);
        live = n0 + (unsigned)_mm_popcnt_u32(k1);
        if (live == 0) return FAST_NO;
        _mm512_storeu_si512(id, _mm512_maskz_compress_epi32(k0, c0));
        _mm512_storeu_si512(id + 16, _mm512_setzero_si512());
        _mm512_mask_storeu_epi32(id + n0, (__mmask16)((1u << (live - n0)) - 1), _mm512_maskz_compress_epi32(k1, c1));
        _mm512_storeu_ps(val, _mm512_maskz_compress_ps(k0, v0));
        _mm512_storeu_ps(val + 16, _mm512_setzero_ps());
        _mm512_mask_storeu_ps(val + n0, (__mmask16)((1u << (live - n0)) - 1), _mm512_maskz_compress_ps(k1, v1));
        sort_head(id, val, live);
        r0 = _mm512_loadu_si512(id);
        r1 = _mm512_loadu_si512(id + 16);
        rv0 = _mm512_loadu_ps(val);
        rv1 = _mm512_loadu_ps(val + 16);
        lm = live == 32 ? ~UINT32_C(0) : (UINT32_C(1) << live) - 1;
    }

    unsigned r;
    if (sup && slen) {
        /* keep_support: every support id among the live ranked ones; those are the head */
        uint32_t marks = 0;
        if (slen <= 16) {
            /* without a branch an id: the candidates against the 16 rotations of the ids'
               vector (its unused lanes repeat the first id). All ids were found when as many
               candidates are marked as there are ids: the candidates are distinct
               (row_keep_avx512 kept one lane an id, and the ranking only reorders them), so
               that many marks take that many distinct ids (a repeated id hands the token
               over). */
            __m512i s = _mm512_mask_loadu_epi32(_mm512_set1_epi32(sup[0]), (__mmask16)((1u << slen) - 1), sup);
            if (_mm512_movepi32_mask(s)) return FAST_NO; /* a negative id */
            __m512i miss0 = _mm512_set1_epi32(-1), miss1 = miss0;
#define TW_ROTATION(j)                                                          \
    do {                                                                        \
        __m512i sj = _mm512_alignr_epi32(s, s, j);                              \
        miss0 = _mm512_min_epu32(miss0, _mm512_xor_si512(r0, sj));             \
        miss1 = _mm512_min_epu32(miss1, _mm512_xor_si512(r1, sj));             \
    } while (0)
            TW_ROTATION(0); TW_ROTATION(1); TW_ROTATION(2); TW_ROTATION(3);
            TW_ROTATION(4); TW_ROTATION(5); TW_ROTATION(6); TW_ROTATION(7);
            TW_ROTATION(8); TW_ROTATION(9); TW_ROTATION(10); TW_ROTATION(11);
            TW_ROTATION(12); TW_ROTATION(13); TW_ROTATION(14); TW_ROTATION(15);
#undef TW_ROTATION
            /* a lane whose smallest xor is zero equals some id */
            marks = ((uint32_t)_mm512_testn_epi32_mask(miss0, miss0) |
                     (uint32_t)_mm512_testn_epi32_mask(miss1, miss1) << 16) & lm;
            if ((size_t)_mm_popcnt_u32(marks) != slen) return FAST_NO;
        } else {
            for (size_t j = 0; j < slen; j++) {
                if (sup[j] < 0) return FAST_NO;
                __m512i want = _mm512_set1_epi32(sup[j]);
                uint32_t h = ((uint32_t)_mm512_cmpeq_epi32_mask(r0, want) |
                              (uint32_t)_mm512_cmpeq_epi32_mask(r1, want) << 16) & lm;
                if (!h) return FAST_NO;
                marks |= h;
            }
        }
        r = (unsigned)_mm_popcnt_u32(marks);
        if (above_one(rv0, rv1, marks)) return FAST_NO; /* decided exactly */
        __mmask16 m0 = (__mmask16)(marks & 0xFFFF), m1 = (__mmask16)(marks >> 16);
        unsigned n0 = (unsigned)_mm_popcnt_u32(m0);
        store_head(oid, olp, _mm512_maskz_compress_epi32(m0, r0), _mm512_maskz_compress_ps(m0, rv0), n0);
        if (m1)
            store_head(oid + n0, olp + n0, _mm512_maskz_compress_epi32(m1, r1),
                       _mm512_maskz_compress_ps(m1, rv1), r - n0);
    } else {
        /* kept(): the first k, or those above a tie across the k-th place */
        r = k < 1 ? 0 : (uint64_t)k < live ? (unsigned)k : live;
        if (r > 0 && r < live) {
            float at[32];
            _mm512_storeu_ps(at, rv0);
            _mm512_storeu_ps(at + 16, rv1);
            if (at[r - 1] == at[r]) {
                __m512 b = _mm512_set1_ps(at[r]);
                uint32_t eq = ((uint32_t)_mm512_cmp_ps_mask(rv0, b, _CMP_EQ_OQ) |
                               (uint32_t)_mm512_cmp_ps_mask(rv1, b, _CMP_EQ_OQ) << 16) & lm;
                r = tw_ctz32(eq); /* ranked: the values equal to the boundary are one run */
            }
        }
        if (r == 0 || too_few(m, k)) return FAST_NO;
        uint32_t head = r == 32 ? ~UINT32_C(0) : (UINT32_C(1) << r) - 1;
        if (above_one(rv0, rv1, head)) return FAST_NO; /* decided exactly */
        store_head(oid, olp, r0, rv0, r < 16 ? r : 16);
        if (r > 16) store_head(oid + 16, olp + 16, r1, rv1, r - 16);
    }
    *count = r;
    return FAST_OK;
}

/* better() of eight lanes (values v, ids c) over eight others (pv, pc): a bit per lane, the
   ids compared unsigned (their top bits flipped, then a signed compare). */
TW_TARGET_AVX2 static inline uint32_t better8(__m256 v, __m256i c, __m256 pv, __m256i pc) {
    const __m256i flip = _mm256_set1_epi32(INT32_MIN);
    __m256i lt = _mm256_cmpgt_epi32(_mm256_xor_si256(pc, flip), _mm256_xor_si256(c, flip));
    __m256 b = _mm256_or_ps(_mm256_cmp_ps(v, pv, _CMP_GT_OQ),
                            _mm256_and_ps(_mm256_cmp_ps(v, pv, _CMP_EQ_OQ), _mm256_castsi256_ps(lt)));
    return (uint32_t)_mm256_movemask_ps(b);
}

/* Lanes 8k-1 .. 8k+6 of the 32 in x (lane -1: lane 7 of x[0]), and lanes 8k+1 .. 8k+8 (lane
   32: lane 0 of x[3]), from registers. */
TW_TARGET_AVX2 static inline __m256i lanes_before(const __m256i *x, size_t k) {
    const __m256i up = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
    return _mm256_blend_epi32(_mm256_permutevar8x32_epi32(x[k], up),
                              _mm256_permutevar8x32_epi32(x[k ? k - 1 : 0], up), 0x01);
}
TW_TARGET_AVX2 static inline __m256i lanes_after(const __m256i *x, size_t k) {
    const __m256i down = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
    return _mm256_blend_epi32(_mm256_permutevar8x32_epi32(x[k], down),
                              _mm256_permutevar8x32_epi32(x[k < 3 ? k + 1 : 3], down), 0x80);
}

/* The lanes of the four vectors of x equal to / above y, a bit each. */
TW_TARGET_AVX2 static inline uint32_t lanes_eq_ps(const __m256i *x, float y) {
    uint32_t bits = 0;
    TW_UNROLL4 for (size_t k = 0; k < 4; k++)
        bits |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_castsi256_ps(x[k]), _mm256_set1_ps(y), _CMP_EQ_OQ)) << (8 * k);
    return bits;
}
TW_TARGET_AVX2 static inline uint32_t lanes_above_ps(const __m256i *x, float y) {
    uint32_t bits = 0;
    TW_UNROLL4 for (size_t k = 0; k < 4; k++)
        bits |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_castsi256_ps(x[k]), _mm256_set1_ps(y), _CMP_GT_OQ)) << (8 * k);
    return bits;
}

/*
 * compact_head_avx512 with AVX2, for rows of up to 32 entries: the same decisions (FAST_OK,
 * FAST_ROW, or FAST_NO for anything not plain), from row_keep_avx2's lanes. The candidates
 * are moved into place in registers when the row repeats at most one earlier id (the usual
 * compact row: the sampled token, then the engine's ranked candidates, one of them the
 * sampled token again), else one at a time; the ranked order from the head's shape as there,
 * or sorted; a support's ids are found one id a compare.
 */
TW_TARGET_AVX2 static int compact_head_avx2(const uint32_t *ids, const float *vals, size_t len,
                                            uint64_t take, int64_t sid, int64_t k,
                                            const int32_t *sup, size_t slen, float *out_sampled,
                                            int64_t *oid, float *olp, size_t *count,
                                            int *row_kind) {
    __m256i a[4], bits[4], c[4], v[4], rc[4], rv[4];
    uint32_t keep;
    if (len == 0 || len > 32 || !row_keep_avx2(ids, vals, len, take, sid, out_sampled, row_kind, a, bits, &keep))
        return FAST_NO;
    if (*row_kind != TW_ROW_OK) return FAST_ROW;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    unsigned m = (unsigned)_mm_popcnt_u32(keep);
    uint32_t all = m == 32 ? ~UINT32_C(0) : (UINT32_C(1) << m) - 1;

    /* the m candidates as lanes 0 .. m-1 of c (ids) and v (value bits): lane 0 is always
       kept, so the lanes not kept below the last kept one are the holes */
    uint32_t holes = ~keep & ((UINT32_C(2) << (31 - (tw_clz64(keep) - 32))) - 1);
    if (holes == 0 || (holes & (holes - 1)) == 0) {
        __m256i j = _mm256_set1_epi32(holes ? (int)tw_ctz32(holes) : 32);
        TW_UNROLL4 for (size_t q = 0; q < 4; q++) { /* lanes from the hole on take the lane after them */
            __m256i from_next = _mm256_cmpgt_epi32(_mm256_add_epi32(lane, _mm256_set1_epi32((int)(8 * q + 1))), j);
            c[q] = _mm256_blendv_epi8(a[q], lanes_after(a, q), from_next);
            v[q] = _mm256_blendv_epi8(bits[q], lanes_after(bits, q), from_next);
        }
    } else {
        uint32_t ci[32], vi[32], ri[32], rvi[32];
        memset(ci, 0, sizeof ci);
        memset(vi, 0, sizeof vi);
        TW_UNROLL4 for (size_t q = 0; q < 4; q++) {
            _mm256_storeu_si256((__m256i *)(void *)(ri + 8 * q), a[q]);
            _mm256_storeu_si256((__m256i *)(void *)(rvi + 8 * q), bits[q]);
        }
        unsigned n = 0;
        for (uint32_t left = keep; left; left &= left - 1, n++) {
            ci[n] = ri[tw_ctz32(left)];
            vi[n] = rvi[tw_ctz32(left)];
        }
        TW_UNROLL4 for (size_t q = 0; q < 4; q++) {
            c[q] = _mm256_loadu_si256((const __m256i *)(const void *)(ci + 8 * q));
            v[q] = _mm256_loadu_si256((const __m256i *)(const void *)(vi + 8 * q));
        }
    }

    /* live: the candidates before a tail at the sentinel */
    uint32_t z = lanes_eq_ps(v, (float)HEAD_SENTINEL) & all;
    unsigned live = z ? tw_ctz32(z) : m;
    uint32_t lm = live == 32 ? ~UINT32_C(0) : (UINT32_C(1) << live) - 1;
    int shaped = live > 0 && (z == 0 || z >> live == all >> live); /* sentinels only as a tail */

    /* the shape (head_shape): each candidate against the one before it, then the run */
    uint32_t up = 0;
    TW_UNROLL4 for (size_t q = 0; q < 4; q++)
        up |= better8(_mm256_castsi256_ps(v[q]), c[q], _mm256_castsi256_ps(lanes_before(v, q)),
                      lanes_before(c, q)) << (8 * q);
    up &= lm & ~UINT32_C(1);
    float at[32];
    uint32_t id[32];
    if (shaped && (up == 0 || up == 2)) {
        unsigned q = 0;
        if (up) {
            __m256 f = _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(v[0], _mm256_setzero_si256()));
            __m256i fi = _mm256_permutevar8x32_epi32(c[0], _mm256_setzero_si256());
            uint32_t run = 0;
            TW_UNROLL4 for (size_t u = 0; u < 4; u++)
                run |= better8(_mm256_castsi256_ps(v[u]), c[u], f, fi) << (8 * u);
            run &= lm;
            q = 1 + tw_ctz32(~(run >> 2));
        }
        /* the ranked order (shape_at): c[1 .. q], c[0], c[q+1 ..] */
        __m256i qv = _mm256_set1_epi32((int)q);
        __m256i c0 = _mm256_permutevar8x32_epi32(c[0], _mm256_setzero_si256());
        __m256i v0 = _mm256_permutevar8x32_epi32(v[0], _mm256_setzero_si256());
        TW_UNROLL4 for (size_t u = 0; u < 4; u++) {
            __m256i at_lane = _mm256_add_epi32(lane, _mm256_set1_epi32((int)(8 * u)));
            __m256i before = _mm256_cmpgt_epi32(qv, at_lane), is_q = _mm256_cmpeq_epi32(qv, at_lane);
            rc[u] = _mm256_blendv_epi8(_mm256_blendv_epi8(c[u], lanes_after(c, u), before), c0, is_q);
            rv[u] = _mm256_blendv_epi8(_mm256_blendv_epi8(v[u], lanes_after(v, u), before), v0, is_q);
        }
    } else {
        /* no shape: the candidates not at the sentinel, wherever they are, sorted (what
           select_one ranks with rank_top then) */
        uint32_t cs[32], keep_live = all & ~z;
        float vs[32];
        TW_UNROLL4 for (size_t u = 0; u < 4; u++) {
            _mm256_storeu_si256((__m256i *)(void *)(cs + 8 * u), c[u]);
            _mm256_storeu_si256((__m256i *)(void *)(vs + 8 * u), v[u]);
        }
        memset(id, 0, sizeof id);
        memset(at, 0, sizeof at);
        live = 0;
        for (; keep_live; keep_live &= keep_live - 1, live++) {
            id[live] = cs[tw_ctz32(keep_live)];
            at[live] = vs[tw_ctz32(keep_live)];
        }
        if (live == 0) return FAST_NO;
        sort_head(id, at, live);
        TW_UNROLL4 for (size_t u = 0; u < 4; u++) {
            rc[u] = _mm256_loadu_si256((const __m256i *)(const void *)(id + 8 * u));
            rv[u] = _mm256_loadu_si256((const __m256i *)(const void *)(at + 8 * u));
        }
        lm = live == 32 ? ~UINT32_C(0) : (UINT32_C(1) << live) - 1;
    }
    TW_UNROLL4 for (size_t u = 0; u < 4; u++) {
        _mm256_storeu_si256((__m256i *)(void *)(id + 8 * u), rc[u]);
        _mm256_storeu_si256((__m256i *)(void *)(at + 8 * u), rv[u]);
    }

    unsigned r;
    if (sup && slen) {
        /* keep_support: every support id among the live ranked ones; those are the head */
        uint32_t marks = 0;
        for (size_t j = 0; j < slen; j++) {
            if (sup[j] < 0) return FAST_NO;
            __m256i want = _mm256_set1_epi32(sup[j]);
            uint32_t h = 0;
            TW_UNROLL4 for (size_t u = 0; u < 4; u++)
                h |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(rc[u], want))) << (8 * u);
            h &= lm;
            if (!h) return FAST_NO;
            marks |= h;
        }
        if (lanes_above_ps(rv, 1.0f) & marks) return FAST_NO; /* decided exactly */
        r = 0;
        for (; marks; marks &= marks - 1, r++) {
            unsigned i = tw_ctz32(marks);
            oid[r] = id[i];
            olp[r] = at[i];
        }
    } else {
        /* kept(): the first k, or those above a tie across the k-th place */
        r = k < 1 ? 0 : (uint64_t)k < live ? (unsigned)k : live;
        if (r > 0 && r < live && at[r - 1] == at[r])
            r = tw_ctz32(lanes_eq_ps(rv, at[r]) & lm); /* ranked: the values equal to the boundary are one run */
        if (r == 0 || too_few(m, k)) return FAST_NO;
        uint32_t head = r == 32 ? ~UINT32_C(0) : (UINT32_C(1) << r) - 1;
        if (lanes_above_ps(rv, 1.0f) & head) return FAST_NO; /* decided exactly */
        for (unsigned i = 0; i < r; i++) {
            oid[i] = id[i];
            olp[i] = at[i];
        }
    }
    *count = r;
    return FAST_OK;
}
#endif

/* One call's arguments (tw_compact_heads). */
typedef struct {
    const int64_t *roff;
    const uint32_t *row_ids;
    const float *row_vals;
    const int64_t *sampled;
    int64_t num_top, k;
    const int64_t *soff;
    const int32_t *sup;
    float *out_sampled;
    int64_t *out_off, *out_ids;
    float *out_lps;
    int path;
    /* scratch for the tokens the kernels above decide */
    int64_t *cand_ids;
    double *cand_lps, *lps;
    size_t cap;
} compact_call;

/* Scratch for a block of the kernels above (its candidates, as ids and values, and its heads'
   values as doubles): room for `need` entries, at least a sweep's. 0 without memory. */
static int block_scratch(compact_call *c, size_t need) {
    if (need <= c->cap) return 1;
    size_t cap = need < SWEEP ? SWEEP : need;
    tw_mem_free(c->cand_ids);
    tw_mem_free(c->cand_lps);
    tw_mem_free(c->lps);
    c->cand_ids = tw_mem_alloc(cap * sizeof(int64_t));
    c->cand_lps = tw_mem_alloc(cap * sizeof(double));
    c->lps = tw_mem_alloc(cap * sizeof(double));
    c->cap = c->cand_ids && c->cand_lps && c->lps ? cap : 0;
    return c->cap != 0;
}

/* Tokens [from, to) by tw_compact_rows_candidates then tw_select_heads, the heads at *o;
   -1, or the first failing token with its reason. */
static ptrdiff_t compact_block(compact_call *c, size_t from, size_t to, int64_t *o, int *row_kind,
                               int *head_code) {
    int64_t coff[TOKEN_BLOCK + 1], off[TOKEN_BLOCK + 1];
    double slps[TOKEN_BLOCK];
    size_t n = to - from;
    if (!block_scratch(c, (size_t)(c->roff[to] - c->roff[from]))) {
        *row_kind = TW_ROW_NOMEM;
        return (ptrdiff_t)from;
    }
    ptrdiff_t row = tw_compact_rows_candidates(n, c->roff + from, c->row_ids, c->row_vals,
                                               c->sampled + from, c->num_top, c->out_sampled + from,
                                               row_kind, coff, c->cand_ids, c->cand_lps, c->path);
    if (*row_kind == TW_ROW_NOMEM) return (ptrdiff_t)from;
    size_t heads = row >= 0 ? (size_t)row : n;
    if (heads) {
        for (size_t t = 0; t < heads; t++) slps[t] = c->out_sampled[from + t];
        ptrdiff_t bad = tw_select_heads(heads, coff, c->cand_ids, c->cand_lps, c->sampled + from, slps,
                                        c->k, c->soff ? c->soff + from : NULL, c->sup, off,
                                        c->out_ids + *o, c->lps, head_code, c->path);
        /* the heads before a failing token are output too, as tw_select_heads outputs them */
        size_t done = bad >= 0 ? (size_t)bad : heads;
        for (size_t t = 0; t < done; t++) c->out_off[from + t + 1] = *o + off[t + 1];
        for (int64_t j = 0; j < off[done]; j++) c->out_lps[*o + j] = (float)c->lps[j];
        if (bad >= 0) {
            *row_kind = TW_ROW_OK;
            return (ptrdiff_t)from + bad;
        }
        *o += off[heads];
    }
    return row >= 0 ? (ptrdiff_t)from + row : -1;
}

#ifdef TW_X86_SIMD
/* exps_f32_avx512 with AVX2: eight values at a time, the last few through a copy. */
TW_TARGET_AVX2 static inline void exps8_f32_avx2(const float *v, double *e) {
    const __m256d lo = _mm256_set1_pd(FEXP_LO), one = _mm256_set1_pd(1.0);
    __m256 x = _mm256_loadu_ps(v);
    __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    __m256d f0, f1;
    fast_exp8_avx2(_mm256_min_pd(_mm256_max_pd(x0, lo), one), _mm256_min_pd(_mm256_max_pd(x1, lo), one), &f0, &f1);
    _mm256_storeu_pd(e, _mm256_and_pd(f0, _mm256_cmp_pd(x0, lo, _CMP_GE_OQ)));
    _mm256_storeu_pd(e + 4, _mm256_and_pd(f1, _mm256_cmp_pd(x1, lo, _CMP_GE_OQ)));
}

TW_TARGET_AVX2 static void exps_f32_avx2(const float *v, size_t n, double *e) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) exps8_f32_avx2(v + i, e + i);
    if (i < n) {
        float x8[8] = {0};
        double e8[8];
        for (size_t j = i; j < n; j++) x8[j - i] = v[j];
        exps8_f32_avx2(x8, e8);
        for (size_t j = i; j < n; j++) e[j] = e8[j - i];
    }
}

/* Tokens whose sums heads_in_registers checks together. */
#define SUM_BATCH 32

/* The sum rules of the tokens [from, to) that compact_head_avx512 or compact_head_avx2
   decided (check_sums' rules and estimate; heads of at most 32 values, none above 1): -1, or
   the first failing token. */
static ptrdiff_t batch_sums(const compact_call *c, size_t from, size_t to, int *head_code) {
    double e[SUM_BATCH * 32], v[32];
    int64_t base = c->out_off[from];
    if (c->path == TW_PATH_AVX512)
        exps_f32_avx512(c->out_lps + base, (size_t)(c->out_off[to] - base), e);
    else
        exps_f32_avx2(c->out_lps + base, (size_t)(c->out_off[to] - base), e);
    for (size_t t = from; t < to; t++) {
        size_t r = (size_t)(c->out_off[t + 1] - c->out_off[t]);
        int has_sup = row_has_support(c->soff, t);
        int verdict = sum_verdict(r, has_sup, sum(e + (c->out_off[t] - base), r), 0x1p-16);
        if (verdict == SUM_EXACT) {
            const float *head = c->out_lps + c->out_off[t];
            for (size_t i = 0; i < r; i++) v[i] = head[i];
            verdict = exact_verdict(v, r, has_sup);
        }
        if (verdict) {
            *head_code = verdict;
            return (ptrdiff_t)t;
        }
    }
    return -1;
}

/* tw_compact_heads on the AVX-512 and AVX2 paths: batches of tokens decided in registers,
   their sums checked together, and each token those leave to the kernels above. */
static ptrdiff_t heads_in_registers(compact_call *c, size_t n, int *row_kind, int *head_code) {
    int (*head)(const uint32_t *, const float *, size_t, uint64_t, int64_t, int64_t, const int32_t *, size_t,
                float *, int64_t *, float *, size_t *, int *) =
        c->path == TW_PATH_AVX512 ? compact_head_avx512 : compact_head_avx2;
    uint64_t take = c->num_top < 1 ? 1 : (uint64_t)c->num_top;
    int64_t o = 0;
    for (size_t t = 0; t < n;) {
        size_t from = t;
        int fast = FAST_OK;
        for (; t < n && t - from < SUM_BATCH; t++) {
            size_t len = (size_t)(c->roff[t + 1] - c->roff[t]), r = 0;
            int has_sup = row_has_support(c->soff, t);
            fast = head(c->row_ids + c->roff[t], c->row_vals + c->roff[t], len, take, c->sampled[t], c->k,
                        has_sup ? c->sup + c->soff[t] : NULL, has_sup ? (size_t)(c->soff[t + 1] - c->soff[t]) : 0,
                        c->out_sampled + t, c->out_ids + o, c->out_lps + o, &r, row_kind);
            if (fast != FAST_OK) break;
            o += (int64_t)r;
            c->out_off[t + 1] = o;
        }
        ptrdiff_t bad = batch_sums(c, from, t, head_code); /* the earlier tokens first */
        if (bad >= 0) {
            *row_kind = TW_ROW_OK;
            return bad;
        }
        if (fast == FAST_ROW) return (ptrdiff_t)t;
        if (fast == FAST_NO) { /* with the rows after it too long for the registers */
            size_t to = block_end(c->roff, t, n, 1);
            bad = compact_block(c, t, to, &o, row_kind, head_code);
            if (bad >= 0) return bad;
            t = to;
        }
    }
    return -1;
}
#endif

ptrdiff_t tw_compact_heads(size_t n, const int64_t *roff, const uint32_t *row_ids,
                           const float *row_vals, const int64_t *sampled, int64_t num_top,
                           int64_t k, const int64_t *soff, const int32_t *sup, float *out_sampled,
                           int64_t *out_off, int64_t *out_ids, float *out_lps, int *row_kind,
                           int *head_code, int path) {
    compact_call c = {roff,    row_ids, row_vals, sampled, num_top, k,    soff, sup,
                      out_sampled, out_off, out_ids, out_lps,  tw_path_resolve(path), NULL, NULL, NULL, 0};
    ptrdiff_t failed = -1;
    int64_t o = 0;
    *row_kind = TW_ROW_OK;
    *head_code = TW_HEAD_OK;
    out_off[0] = 0;
#ifdef TW_X86_SIMD
    if (c.path == TW_PATH_AVX512 || c.path == TW_PATH_AVX2)
        failed = heads_in_registers(&c, n, row_kind, head_code);
    else
#endif
        for (size_t from = 0, to; from < n && failed < 0; from = to) {
            to = block_end(roff, from, n, 0);
            failed = compact_block(&c, from, to, &o, row_kind, head_code);
        }
    tw_mem_free(c.cand_ids);
    tw_mem_free(c.cand_lps);
    tw_mem_free(c.lps);
    return failed;
}
