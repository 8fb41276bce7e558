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

/* ------------------------------------------------------------------------------------------
 * The fast exps (tw_exp.c): e[i] = F(v[i]) for v[i] in [-700, 1], 0 below -700. Each returns
 * whether some v[i] is NaN or above 1 (the tokens with one are decided exactly); the _f32
 * ones take floats that are neither (the heads tw_compact_heads holds in registers).
 * ------------------------------------------------------------------------------------------ */

TW_INTERNAL int tw_exps_scalar(const double *v, size_t n, double *e);
#ifdef TW_X86_SIMD
TW_TARGET_AVX512 TW_INTERNAL int tw_exps_avx512(const double *v, size_t n, double *e);
TW_TARGET_AVX2 TW_INTERNAL int tw_exps_avx2(const double *v, size_t n, double *e);
TW_TARGET_AVX512 TW_INTERNAL void tw_exps_f32_avx512(const float *v, size_t n, double *e);
TW_TARGET_AVX2 TW_INTERNAL void tw_exps_f32_avx2(const float *v, size_t n, double *e);
#endif
#ifdef TW_NEON_SIMD
TW_INTERNAL int tw_exps_neon(const double *v, size_t n, double *e);
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
#endif

#endif
