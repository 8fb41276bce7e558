/*
 * tw_heads_internal - what the files of head selection share; no public API (that is
 * tw_heads.h). The files:
 *
 *   tw_heads.c               tw_select_heads: one token's head (its ranked order, what is kept,
 *                            its support), a block of tokens at a time, then their sum rules
 *   tw_compact_candidates.c  tw_compact_candidates, tw_compact_rows_candidates
 *   tw_compact_heads.c       tw_compact_heads (and _checked): compact rows straight to heads
 *   tw_sum.c                 exact sums (tw_fsum_nonneg, tw_fsum_exp)
 *   tw_exp.c                 the fast exps of the sums' estimates, one per target
 *   tw_rank.c                ranking by (value desc, id asc): tw_rank_top, tw_sort_head
 *   tw_validate.c            the compact-row rule (tw_compact_rows), and the rows the head
 *                            kernels hold in registers (tw_row_keep_avx512 ...)
 *
 * Functions declared here have external linkage, hidden from the shared library where the
 * compiler can say so; what the hot loops call per token or per candidate is static inline
 * here instead. Plain C11, no Python API.
 */
#ifndef TW_HEADS_INTERNAL_H
#define TW_HEADS_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "base/tw_cpu.h"
#include "rules/tw_heads.h"
#include "rules/tw_validate.h"
#include "base/tw_util.h"

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
/* Candidates per sweep (tw_heads.c); a block of tokens (block_end) fits one. */
#define SWEEP 4096

/* The ranked order: value descending, then id ascending. */
static inline int better(double va, int64_t ia, double vb, int64_t ib) {
    return va > vb || (va == vb && ia < ib);
}

static inline int is_close(double a, double b, double rel_tol, double abs_tol) {
    if (a == b) return 1;
    if (isinf(a) || isinf(b)) return 0;
    double diff = fabs(b - a);
    return diff <= fabs(rel_tol * b) || diff <= fabs(rel_tol * a) || diff <= abs_tol;
}

/* ------------------------------------------------------------------------------------------
 * Deciding the mass rules without exp() for every candidate.
 *
 * The rules compare R = fsum(exp(p)) (the correctly rounded sum of the C library's exp) with
 * T = 1.0001 (MASS: R > T) and with 1 -/+ 1e-4 (NORMALIZE: |1 - R| <= 1e-4, where 1 - R is
 * exact whenever R is within [0.5, 2]). Each token's sum is first estimated as
 * S = fl(sum of F(p)) with a fast exp F for p in [-700, 1] (0 below -700; tw_exp.c):
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

/* The rules on the exact sum, as select_head states them. */
static inline int exact_verdict(const double *v, size_t r, int has_sup) {
    double s = tw_fsum_exp(v, r);
    if (has_sup && !is_close(s, 1.0, 0.0, NORM_TOL)) return TW_HEAD_NORMALIZE;
    if (r == 0 || s > MASS_LIMIT) return TW_HEAD_MASS;
    return TW_HEAD_OK;
}

static inline int near_limit(double s, double limit, double delta) {
    return fabs(s - limit) <= delta + limit * 0x1p-50;
}

/* The rules from the estimate s of the token's sum of r values, which errs by at most delta,
   or SUM_EXACT when only the exact sum decides (s NaN: a value NaN or above 1; or s near a
   threshold). */
enum { SUM_EXACT = -1 }; /* not a TW_HEAD_* code: those are 0 and up */
static inline int sum_verdict_within(size_t r, int has_sup, double s, double delta) {
    if (s != s) return SUM_EXACT;
    if (near_limit(s, MASS_LIMIT, delta)) return SUM_EXACT;
    if (has_sup) {
        if (near_limit(s, 1.0 - NORM_TOL, delta) || near_limit(s, 1.0 + NORM_TOL, delta))
            return SUM_EXACT;
        if (!(s >= 1.0 - NORM_TOL && s <= 1.0 + NORM_TOL)) return TW_HEAD_NORMALIZE;
    }
    if (r == 0 || s > MASS_LIMIT) return TW_HEAD_MASS;
    return TW_HEAD_OK;
}

/* sum_verdict_within for s summed in double precision from the fast exps above (rel: 2^-37
   or 2^-16 by the fast exp used). */
static inline int sum_verdict(size_t r, int has_sup, double s, double rel) {
    return sum_verdict_within(r, has_sup, s, s * ((double)r * 0x1p-52 + rel) + (double)r * 0x1p-999);
}

/* sum_verdict_within for s summed in single precision, in any order, from at most 32 values
   of tw_exp8_f32_avx2 (below): |S - sum E| <= S (2^-19 + 2^-18 + 2^-40)(1 + 2^-17) + 32 2^-125
   (the summation's at most 31 roundings of 2^-24, F's error, E's), which
   delta = S 2^-16 + 2^-110 bounds with room, as above. */
static inline int sum_verdict_f32(size_t r, int has_sup, double s) {
    return sum_verdict_within(r, has_sup, s, s * 0x1p-16 + 0x1p-110);
}

static inline int too_few(size_t len, int64_t k) { return (int64_t)len - 2 < k; }

/* Whether token t has a recorded support: an empty row is an absent one (kept_tokens' zero
   count), and that token's head follows the rule without a support. */
static inline int row_has_support(const int64_t *soff, size_t t) {
    return soff != NULL && soff[t + 1] > soff[t];
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

/* The end of the block of tokens from `from` (< n) whose entries (offsets off) fit one
   sweep: at most TOKEN_BLOCK tokens, and always at least one, however long. With
   `long_only`, the block also stops before a token of at most 32 entries (those the
   AVX-512 and AVX2 paths decide in registers). */
static inline size_t block_end(const int64_t *off, size_t from, size_t n, int long_only) {
    size_t to = from + 1;
    while (to < n && to - from < TOKEN_BLOCK && off[to + 1] - off[from] <= SWEEP &&
           (!long_only || off[to + 1] - off[to] > 32))
        to++;
    return to;
}

/* The last of a compact row's rules, the sampled id's, for every kernel that decides it (here
   and in the rows in registers below): the sampled id is an id (0 .. 2^32 - 1) and is in the
   row, and the value of its last occurrence (the value a dict built from the row keeps: the
   repeats agree, so only the sign of a zero can differ) is not the sentinel. That value is
   the row's sampled value. */
static inline int sampled_in_range(int64_t sampled) {
    return sampled >= 0 && sampled <= (int64_t)UINT32_MAX;
}

/* The verdict from the value of the sampled id's last occurrence, written to *out when OK. */
static inline int sampled_value(float last, float *out) {
    if (last == (float)TW_SENTINEL) return TW_ROW_MISSING_SAMPLED;
    *out = last;
    return TW_ROW_OK;
}

/* The verdict from the lanes (of a row of up to 32 entries) that hold the sampled id. */
static inline int sampled_in_lanes(const float *vals, uint32_t hit, float *out) {
    return hit ? sampled_value(vals[63 - tw_clz64(hit)], out) : TW_ROW_MISSING_SAMPLED;
}

/* ------------------------------------------------------------------------------------------
 * The fast exps (tw_exp.c): e[i] = F(v[i]) for v[i] in [-700, 1], 0 below -700. Each returns
 * whether some v[i] is NaN or above 1 (the tokens with one are decided exactly);
 * tw_exp8_f32_avx2 takes floats that are neither (the heads tw_compact_heads holds in
 * registers).
 * ------------------------------------------------------------------------------------------ */

TW_INTERNAL int tw_exps_scalar(const double *v, size_t n, double *e);
#ifdef TW_X86_SIMD
TW_TARGET_AVX512 TW_INTERNAL int tw_exps_avx512(const double *v, size_t n, double *e);
TW_TARGET_AVX2 TW_INTERNAL int tw_exps_avx2(const double *v, size_t n, double *e);
#endif
#ifdef TW_NEON_SIMD
TW_INTERNAL int tw_exps_neon(const double *v, size_t n, double *e);
#endif

#ifdef TW_X86_SIMD
/*
 * F(x) for eight floats at once, in single precision throughout: the heads compact_head_avx2
 * holds in registers, whose values keep the values rule (finite, at most 1e-6; x may be
 * anything not NaN here: clamped to [-87, 1], and F = 0 below -87). As exp(x) = 2^k exp(r):
 * k = round(x / ln 2) in [-126, 2] (x times 1/ln 2 in single precision errs by < 2^-17 in
 * all, so |r| < 0.3466); r = x - k ln 2 by two fmas with ln 2 split in two floats (each fma
 * rounds once, by at most 2^-26 at |r| < 0.5; the low part's own rounding, times |k|, is
 * < 2^-40), so r errs by < 2^-24.9 and exp(r) by a factor < 1 + 2^-24.9; exp(r) by the
 * degree-6 Taylor polynomial and Horner's scheme of tw_exp.c's vector code (< 2^-18.5 exp(r)
 * with the coefficients' and Horner's roundings, as bounded there); 2^k from k's bits, the
 * scaling exact (exp(-87) is above 2^-126: the results stay normal). Below -87, F = 0 errs
 * by exp(-87) < 2^-125. In all |F(x) - exp(x)| < 2^-18 exp(x) + 2^-125, which
 * tests/c/test_heads.c checks against exp() on every float in [-88, 1] it is given
 * (--exp-sweep: all of them).
 */
TW_TARGET_AVX2 static inline __m256 tw_exp8_f32_avx2(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f), shift = _mm256_set1_ps(12582912.0f); /* 1.5 * 2^23 */
    __m256 c = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(1.0f));
    __m256 t = _mm256_fmadd_ps(c, _mm256_set1_ps(1.44269502162933349609375f), shift); /* k in its low bits */
    __m256 k = _mm256_sub_ps(t, shift);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), c);         /* ln 2's first 16 bits */
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187045e-06f), r);         /* the rest */
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 720.0f), r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* t's bits are 0x4B400000 + k: shifted by 23, (k + 127) << 23 is 2^k */
    __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(127)), 23));
    return _mm256_and_ps(_mm256_mul_ps(p, scale), _mm256_cmp_ps(x, lo, _CMP_GE_OQ));
}
#endif

/* The fast exps of a path. */
static inline int exps(int path, const double *v, size_t n, double *e) {
#ifdef TW_X86_SIMD
    if (path == TW_PATH_AVX512) return tw_exps_avx512(v, n, e);
    if (path == TW_PATH_AVX2) return tw_exps_avx2(v, n, e);
#endif
#ifdef TW_NEON_SIMD
    if (path == TW_PATH_NEON) return tw_exps_neon(v, n, e);
#endif
    (void)path;
    return tw_exps_scalar(v, n, e);
}

/* ------------------------------------------------------------------------------------------
 * Ranking (tw_rank.c).
 * ------------------------------------------------------------------------------------------ */

/* Leave the best `need` (1 <= need <= m) of the m entries in [0, need), best first. */
TW_INTERNAL void tw_rank_top(int64_t *id, double *v, size_t m, size_t need);

#ifdef TW_X86_SIMD
/* n ids and their values in insertion_sort's order (value descending, then id ascending),
   in place. */
TW_INTERNAL void tw_sort_head(uint32_t *id, float *val, unsigned n);

/* ------------------------------------------------------------------------------------------
 * Compact rows of up to 32 entries in registers, for the head kernels (tw_validate.c, beside
 * tw_compact_rows: what they share with its kernels, and how they differ, is said there).
 * ------------------------------------------------------------------------------------------ */

/* A row as tw_row_keep_avx512 loads it: ids a/b and values va/vb (lanes 0-15 and 16-31,
   zero past the row), ma/mb the row's lanes. */
typedef struct {
    __m512i a, b, va, vb;
    __mmask16 ma, mb;
} tw_row_lanes;

/* The row into *L and the lanes of its first `take` distinct ids into *keep_out; 0 when a
   repeated id does not carry identical bits everywhere. */
TW_TARGET_AVX512 TW_INTERNAL int tw_row_keep_avx512(const uint32_t *ids, const float *vals, size_t len,
                                                    uint64_t take, tw_row_lanes *L, uint32_t *keep_out);

/* The row rule on a row tw_row_keep_avx512 took, in *r (the sampled value in *out when it
   holds); 0 when a value breaks the values rule (tw_compact_values_bad; NaN among them). */
TW_TARGET_AVX512 TW_INTERNAL int tw_row_rule_avx512(const tw_row_lanes *L, const float *vals, int64_t sid,
                                                    float *out, int *r);

/* Both with AVX2, the row into a and bits (four vectors each); 0 when a value breaks the values
   rule (NaN among them) or a repeated id does not carry identical bits everywhere. */
TW_TARGET_AVX2 TW_INTERNAL int tw_row_keep_avx2(const uint32_t *ids, const float *vals, size_t len,
                                                uint64_t take, int64_t sid, float *out, int *r,
                                                __m256i *a, __m256i *bits, uint32_t *keep_out);

/* Lane i of the 16 words of x takes lane (i + r) mod 16 (xs: x with its halves swapped; r a
   constant, 0 to 15). */
#define TW_ROT16(x, xs, r) \
    ((r) < 8 ? _mm256_alignr_epi8((xs), (x), 2 * ((r) & 7)) : _mm256_alignr_epi8((x), (xs), 2 * ((r) & 7)))

/* 1 when lanes 1 .. len-1 of the nvec (1 to 4) vectors of ids in a hold distinct ids (0: they
   may not). Each lane stands for its id by the id's low 16 bits, lane 0 and the lanes past the
   row by distinct stand-ins (0xFFE0 + the lane): keys that differ are ids that differ, and
   equal keys (two ids 2^16 apart, or an id whose low bits are a stand-in's) only cost the
   caller its exact search. Sixteen keys a vector, so every pair of 32 lanes is compared by
   rotations of two vectors (vpalignr across the halves swapped once): a vector against its
   rotations by 1 to 8, the other against its 16; with three vectors of ids the third's eight
   keys sit in both halves of one, compared against their rotations by 0 to 7 within a half,
   and by 1 to 4 among themselves. About half the instructions of comparing 32-bit lanes. */
TW_TARGET_AVX2 static inline TW_ALWAYS_INLINE int tw_distinct_after_first_avx2_n(const __m256i *a, size_t len,
                                                                                const size_t nvec) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i last = _mm256_set1_epi32((int)len - 1);
    __m256i x[4], same = _mm256_setzero_si256();
    TW_UNROLL4 for (size_t k = 0; k < 4; k++) {
        __m256i at = _mm256_add_epi32(lane, _mm256_set1_epi32((int)(8 * k)));
        __m256i stand = _mm256_add_epi32(at, _mm256_set1_epi32(0xFFE0));
        x[k] = k < nvec ? _mm256_blendv_epi8(a[k], stand, _mm256_cmpgt_epi32(at, last)) : stand;
    }
    x[0] = _mm256_blend_epi32(x[0], _mm256_set1_epi32(0xFFE0), 0x01); /* lane 0 */
    /* keys: lane 8k + i of x[k] as word 2i (k even) or 2i + 1 (k odd) of the pair's vector
       (the rotations' counts spelled out: vpalignr takes them as immediates) */
#define TW_SAME(p, q) (same = _mm256_or_si256(same, _mm256_cmpeq_epi16((p), (q))))
#define TW_SELF(v, vs) \
    (TW_SAME(v, TW_ROT16(v, vs, 1)), TW_SAME(v, TW_ROT16(v, vs, 2)), TW_SAME(v, TW_ROT16(v, vs, 3)), \
     TW_SAME(v, TW_ROT16(v, vs, 4)), TW_SAME(v, TW_ROT16(v, vs, 5)), TW_SAME(v, TW_ROT16(v, vs, 6)), \
     TW_SAME(v, TW_ROT16(v, vs, 7)), TW_SAME(v, vs))
    __m256i k0 = _mm256_blend_epi16(x[0], _mm256_slli_epi32(x[1], 16), 0xAA);
    __m256i k0s = _mm256_permute4x64_epi64(k0, 0x4E);
    TW_SELF(k0, k0s);
    if (nvec == 3) {
        /* x[2]'s eight keys in each half: its own words even, its halves swapped odd */
        __m256i y = _mm256_blend_epi16(x[2], _mm256_slli_epi32(_mm256_permute4x64_epi64(x[2], 0x4E), 16), 0xAA);
        __m256i y1 = _mm256_alignr_epi8(y, y, 2), y2 = _mm256_alignr_epi8(y, y, 4);
        __m256i y3 = _mm256_alignr_epi8(y, y, 6), y4 = _mm256_alignr_epi8(y, y, 8);
        TW_SAME(k0, y), TW_SAME(k0, y1), TW_SAME(k0, y2), TW_SAME(k0, y3), TW_SAME(k0, y4);
        TW_SAME(k0, _mm256_alignr_epi8(y, y, 10)), TW_SAME(k0, _mm256_alignr_epi8(y, y, 12));
        TW_SAME(k0, _mm256_alignr_epi8(y, y, 14));
        TW_SAME(y, y1), TW_SAME(y, y2), TW_SAME(y, y3), TW_SAME(y, y4);
    } else if (nvec == 4) {
        __m256i k1 = _mm256_blend_epi16(x[2], _mm256_slli_epi32(x[3], 16), 0xAA);
        __m256i k1s = _mm256_permute4x64_epi64(k1, 0x4E);
        TW_SELF(k1, k1s);
        TW_SAME(k0, k1), TW_SAME(k0, TW_ROT16(k1, k1s, 1)), TW_SAME(k0, TW_ROT16(k1, k1s, 2));
        TW_SAME(k0, TW_ROT16(k1, k1s, 3)), TW_SAME(k0, TW_ROT16(k1, k1s, 4)), TW_SAME(k0, TW_ROT16(k1, k1s, 5));
        TW_SAME(k0, TW_ROT16(k1, k1s, 6)), TW_SAME(k0, TW_ROT16(k1, k1s, 7)), TW_SAME(k0, k1s);
        TW_SAME(k0, TW_ROT16(k1, k1s, 9)), TW_SAME(k0, TW_ROT16(k1, k1s, 10)), TW_SAME(k0, TW_ROT16(k1, k1s, 11));
        TW_SAME(k0, TW_ROT16(k1, k1s, 12)), TW_SAME(k0, TW_ROT16(k1, k1s, 13));
        TW_SAME(k0, TW_ROT16(k1, k1s, 14)), TW_SAME(k0, TW_ROT16(k1, k1s, 15));
    }
#undef TW_SELF
#undef TW_SAME
    return _mm256_testz_si256(same, same);
}

/* tw_row_keep_avx512 and tw_row_rule_avx512 with AVX2, for rows of up to 32 entries: the lanes
   repeating an earlier lane found in registers, eight lanes a compare. 0 (nothing decided)
   when a value breaks the values rule (NaN among them) or repeats' bits differ (a zero of
   either sign); else 1, the row loaded into a and bits (four vectors each, zero past the
   row), *keep the lanes of the first `take` distinct ids, and the row rule in *r with the
   sampled value in *out when it holds. nvec (0 to 4, a constant in each copy its callers
   pick; at least the vectors that hold the row): the vectors loaded. */
TW_TARGET_AVX2 static inline TW_ALWAYS_INLINE int
tw_row_keep_avx2_n(const uint32_t *ids, const float *vals, size_t len, uint64_t take, int64_t sid, float *out,
                int *r, __m256i *a, __m256i *bits, uint32_t *keep_out, const size_t nvec) {
    uint32_t all, rep, hit = 0, keep, first_lanes = 0; /* first_lanes: those holding lane 0's id, when known */
    /* masked loads: nothing past the row is read */
    all = tw_load32_avx2_n(ids, len, a, (unsigned)nvec);
    tw_load32_avx2_n(vals, len, bits, (unsigned)nvec);
    for (size_t k = nvec; k < 4; k++) a[k] = bits[k] = _mm256_setzero_si256();
    /* the values rule: !(x <= 1e-6) holds for NaN and anything above; -inf is the other value
       off the rule (lanes past the row are 0.0, on it) */
    const __m256 top = _mm256_set1_ps(1e-6f), ninf = _mm256_set1_ps(-INFINITY);
    __m256 off = _mm256_setzero_ps();
    TW_UNROLL4 for (size_t k = 0; k < nvec; k++) {
        __m256 x = _mm256_castsi256_ps(bits[k]);
        off = _mm256_or_ps(off, _mm256_or_ps(_mm256_cmp_ps(x, top, _CMP_NLE_UQ), _mm256_cmp_ps(x, ninf, _CMP_EQ_OQ)));
    }
    if (_mm256_movemask_ps(off)) return 0;
    /* lanes past the row (id 0) come after the row's, so they mark none of the row's; they
       are dropped from rep, so nothing past the row is read below */
    if (nvec && tw_distinct_after_first_avx2_n(a, len, nvec)) { /* then only lane 0's id can repeat */
        __m256i first = _mm256_permutevar8x32_epi32(a[0], _mm256_setzero_si256());
        rep = 0;
        TW_UNROLL4 for (size_t k = 0; k < nvec; k++)
            rep |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a[k], first))) << (8 * k);
        rep &= all & ~UINT32_C(1);
        first_lanes = len ? rep | 1 : 0;
        /* every lane repeating is lane 0's id, and its occurrences are lane 0 and those lanes:
           each must carry lane 0's bits (else: the scalar code) */
        if (rep) {
            uint32_t first_bits;
            memcpy(&first_bits, vals, sizeof first_bits);
            for (uint32_t left = rep; left; left &= left - 1) {
                uint32_t b;
                memcpy(&b, vals + tw_ctz32(left), sizeof b);
                if (b != first_bits) return 0;
            }
        }
    } else {
        rep = tw_repeats_avx2_n(a, nvec) & all;
        /* every occurrence of a repeated id must carry the same bits (else: the scalar code) */
        for (uint32_t left = rep; left; left &= left - 1) {
            unsigned j = tw_ctz32(left);
            int32_t same;
            uint32_t differ = 0;
            memcpy(&same, vals + j, sizeof same);
            __m256i want = _mm256_set1_epi32((int)ids[j]), want_bits = _mm256_set1_epi32(same);
            TW_UNROLL4 for (size_t k = 0; k < nvec; k++)
                differ |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(
                              _mm256_andnot_si256(_mm256_cmpeq_epi32(bits[k], want_bits), _mm256_cmpeq_epi32(a[k], want))))
                          << (8 * k);
            if (differ & all) return 0;
        }
    }
    if (first_lanes && (uint32_t)sid == ids[0] && sampled_in_range(sid)) {
        hit = first_lanes; /* the usual row: the sampled id first */
    } else if (sampled_in_range(sid)) {
        __m256i want = _mm256_set1_epi32((int)(uint32_t)sid);
        TW_UNROLL4 for (size_t k = 0; k < nvec; k++)
            hit |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a[k], want))) << (8 * k);
        hit &= all; /* lanes past the row load as id 0 */
    }
    *r = sampled_in_lanes(vals, hit, out);
    /* the first `take`: the highest lanes dropped (a row holds at most a few more) */
    keep = all & ~rep;
    while ((uint64_t)_mm_popcnt_u32(keep) > take) keep &= ~(UINT32_C(1) << (63 - tw_clz64(keep)));
    *keep_out = keep;
    return 1;
}
#endif

#endif
