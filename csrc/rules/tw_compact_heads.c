/* tw_compact_heads (tw_heads.h): compact rows straight to heads. */
#include "rules/tw_heads.h"
#include "base/tw_cpu.h"
#include "rules/tw_heads_internal.h"
#include "base/tw_util.h"
#include "base/tw_mem.h"
#include "rules/tw_validate.h"

#include <stdlib.h>
#include <string.h>

#ifdef TW_X86_SIMD
#include <immintrin.h>
#endif

/* ------------------------------------------------------------------------------------------
 * Compact rows to heads in one call. What the registers do not decide goes to the two
 * kernels: tw_compact_rows_candidates (tw_compact_candidates.c), then tw_select_heads
 * (tw_heads.c).
 * ------------------------------------------------------------------------------------------ */

/* What compact_head_avx2 made of a token. */
#define FAST_NO 0  /* nothing decided: the token goes to the two kernels */
#define FAST_OK 1  /* a valid row and head, written */
#define FAST_ROW 2 /* the row breaks a row rule (*row_kind) */
#define FAST_SUM 3 /* a valid row whose head, written, breaks a sum rule (*head_code) */

#ifdef TW_X86_SIMD
/* better() of eight lanes (values v, ids c) over eight others (pv, pc): a bit per lane, the
   ids compared unsigned (their top bits flipped, then a signed compare). */
TW_TARGET_AVX2 static inline uint32_t better8(__m256 v, __m256i c, __m256 pv, __m256i pc) {
    const __m256i flip = _mm256_set1_epi32(INT32_MIN);
    __m256i lt = _mm256_cmpgt_epi32(_mm256_xor_si256(pc, flip), _mm256_xor_si256(c, flip));
    __m256 b = _mm256_or_ps(_mm256_cmp_ps(v, pv, _CMP_GT_OQ),
                            _mm256_and_ps(_mm256_cmp_ps(v, pv, _CMP_EQ_OQ), _mm256_castsi256_ps(lt)));
    return (uint32_t)_mm256_movemask_ps(b);
}

/* Lanes 8k-1 .. 8k+6 of the 8 nv lanes in x (lane -1: lane 7 of x[0]), and lanes 8k+1 .. 8k+8
   (lane 8 nv: lane 0 of x[nv-1]), from registers. */
TW_TARGET_AVX2 static inline __m256i lanes_before(const __m256i *x, size_t k) {
    const __m256i up = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
    return _mm256_blend_epi32(_mm256_permutevar8x32_epi32(x[k], up),
                              _mm256_permutevar8x32_epi32(x[k ? k - 1 : 0], up), 0x01);
}
TW_TARGET_AVX2 static inline __m256i lanes_after(const __m256i *x, size_t k, size_t nv) {
    const __m256i down = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
    return _mm256_blend_epi32(_mm256_permutevar8x32_epi32(x[k], down),
                              _mm256_permutevar8x32_epi32(x[k + 1 < nv ? k + 1 : nv - 1], down), 0x80);
}

/* cnt lanes of ids (widened to int64) and of value bits into oid/olp, which hold `room` (>= cnt)
   entries from there on: a whole vector where it fits (lanes past cnt are written too: the
   output is scratch past the heads, tw_heads.h), else masked, nothing past the cnt lanes
   written (the output may end there). Masked stores (vpmaskmov) are slow on AMD cores: whole
   vectors took about 5% off tw_compact_heads' time on one (tests/c's test_heads --bench). */
TW_TARGET_AVX2 static inline void store_head8(int64_t *oid, float *olp, __m256i ids, __m256i vals,
                                              unsigned cnt, size_t room) {
    __m256i lo = _mm256_cvtepu32_epi64(_mm256_castsi256_si128(ids));
    __m256i hi = _mm256_cvtepu32_epi64(_mm256_extracti128_si256(ids, 1));
    if (cnt >= 8 || room >= 8) {
        _mm256_storeu_si256((__m256i *)(void *)olp, vals);
        _mm256_storeu_si256((__m256i *)(void *)oid, lo);
        _mm256_storeu_si256((__m256i *)(void *)(oid + 4), hi);
        return;
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt), lane);
    _mm256_maskstore_epi32((int *)(void *)olp, m, vals);
    _mm256_maskstore_epi64((long long *)(void *)oid, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(m)), lo);
    _mm256_maskstore_epi64((long long *)(void *)(oid + 4), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(m, 1)), hi);
}

/* The lanes of the nv vectors of x equal to / above y, a bit each. */
TW_TARGET_AVX2 static inline uint32_t lanes_eq_ps(const __m256i *x, float y, size_t nv) {
    uint32_t bits = 0;
    TW_UNROLL4 for (size_t k = 0; k < nv; k++)
        bits |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_castsi256_ps(x[k]), _mm256_set1_ps(y), _CMP_EQ_OQ)) << (8 * k);
    return bits;
}
TW_TARGET_AVX2 static inline uint32_t lanes_above_ps(const __m256i *x, float y, size_t nv) {
    uint32_t bits = 0;
    TW_UNROLL4 for (size_t k = 0; k < nv; k++)
        bits |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_castsi256_ps(x[k]), _mm256_set1_ps(y), _CMP_GT_OQ)) << (8 * k);
    return bits;
}

/*
 * One token of a compact row of up to 32 entries, in registers (AVX2; the AVX-512 path runs it
 * too): the row rule and the candidates (tw_row_keep_avx2_n), their ranked order (from their
 * shape as head_shape finds it, or sorted as select_one's tw_rank_top sorts candidates without
 * one: ties in another order, sentinels inside), the head kept (kept(), or the support's ids
 * as keep_support keeps them), written to oid/olp, and the head's sum rules. It decides only
 * what is plain: FAST_OK when the row is valid and so is its head; FAST_SUM when the head
 * breaks a sum rule; FAST_ROW when the sampled id breaks the row rule. Anything else (a value
 * off the values rule, a repeat whose zero's sign differs, a support id not ranked, a support
 * that breaks its own rule, a head value above 1, empty or FEWER, ...) is FAST_NO, and the
 * token goes to the two kernels, which decide and report it as for every token. The sampled
 * id's candidate carries the sampled value itself (repeats here have identical bits), so
 * DISAGREE never holds here. The usual compact row (the sampled token, then the engine's
 * ranked candidates, one of them the sampled token again) is ranked as it stands; other rows'
 * candidates are moved into place in registers when the row repeats at most one earlier id,
 * else one at a time, then ranked from the head's shape as there, or sorted; a support's ids
 * are matched eight at a time. nv (2, 3 or 4: a constant in each copy compact_head_avx2
 * picks) vectors of eight lanes hold the row: a row of 23 entries (a top-22 row and its
 * sampled token) is worked on in three, not four.
 */
TW_TARGET_AVX2 static inline TW_ALWAYS_INLINE int
compact_head_avx2_n(const uint32_t *ids, const float *vals, size_t len, uint64_t take, int64_t sid, int64_t k,
                    const int32_t *sup, size_t slen, float *out_sampled, int64_t *oid, float *olp, size_t room,
                    size_t *count, int *row_kind, int *head_code, const size_t nv) {
    __m256i a[4], bits[4], c[4], v[4], rc[4], rv[4];
    uint32_t keep;
    /* tw_row_keep_avx2 also checks the values rule (a row that breaks it is not plain:
       compact_block then checks its block's values) */
    if (!tw_row_keep_avx2_n(ids, vals, len, take, sid, out_sampled, row_kind, a, bits, &keep, nv)) return FAST_NO;
    if (*row_kind != TW_ROW_OK) return FAST_ROW;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    unsigned m = (unsigned)_mm_popcnt_u32(keep), live;
    uint32_t all = m == 32 ? ~UINT32_C(0) : (UINT32_C(1) << m) - 1, lm;
    float at[32];
    uint32_t id[32];

    /* The usual compact row first: the sampled id, then the engine's candidates in ranked
       order, one of them (lane j) the sampled id again, every candidate kept. Lane j's bits
       are lane 0's (tw_row_keep_avx2_n), so the candidates in ranked order are lanes
       1 .. len-1 as they stand when those are ranked (each worse than the one before it, up
       to a tail at the sentinel): lane 0 then ranks where lane j is (what head_shape and
       shape_at below make of it, as its `up` is 0 or 2 then and its q is j - 1). */
    uint32_t hole = (len >= 32 ? ~UINT32_C(0) : (UINT32_C(1) << len) - 1) & ~keep;
    int ranked = 0;
    if (hole > 1 && (hole & (hole - 1)) == 0 && ids[tw_ctz32(hole)] == ids[0]) {
        uint32_t z = 0, down = 0;
        TW_UNROLL4 for (size_t u = 0; u < nv; u++) { /* S: lanes 1 .. of the row */
            rc[u] = lanes_after(a, u, nv);
            rv[u] = lanes_after(bits, u, nv);
            /* lane i of S better than lane i of the row: row lane i+1 better than row lane i */
            down |= better8(_mm256_castsi256_ps(rv[u]), rc[u], _mm256_castsi256_ps(bits[u]), a[u]) << (8 * u);
        }
        z = lanes_eq_ps(rv, (float)HEAD_SENTINEL, nv) & all;
        live = z ? tw_ctz32(z) : m;
        lm = live == 32 ? ~UINT32_C(0) : (UINT32_C(1) << live) - 1;
        /* ranked: no lane of S better than the one before it among the live ones (bit i of
           down, i >= 1), the sentinels only as a tail */
        ranked = live > 0 && (z == 0 || z >> live == all >> live) && (down & lm & ~UINT32_C(1)) == 0;
    }
    if (!ranked) {
        /* the m candidates as lanes 0 .. m-1 of c (ids) and v (value bits): lane 0 is always
           kept, so the lanes not kept below the last kept one are the holes */
        uint32_t holes = ~keep & ((UINT32_C(2) << (31 - (tw_clz64(keep) - 32))) - 1);
        if (holes == 0 || (holes & (holes - 1)) == 0) {
            __m256i j = _mm256_set1_epi32(holes ? (int)tw_ctz32(holes) : 32);
            TW_UNROLL4 for (size_t q = 0; q < nv; q++) { /* lanes from the hole on take the lane after them */
                __m256i from_next = _mm256_cmpgt_epi32(_mm256_add_epi32(lane, _mm256_set1_epi32((int)(8 * q + 1))), j);
                c[q] = _mm256_blendv_epi8(a[q], lanes_after(a, q, nv), from_next);
                v[q] = _mm256_blendv_epi8(bits[q], lanes_after(bits, q, nv), from_next);
            }
        } else {
            uint32_t ci[32], vi[32], ri[32], rvi[32];
            memset(ci, 0, sizeof ci);
            memset(vi, 0, sizeof vi);
            TW_UNROLL4 for (size_t q = 0; q < nv; q++) {
                _mm256_storeu_si256((__m256i *)(void *)(ri + 8 * q), a[q]);
                _mm256_storeu_si256((__m256i *)(void *)(rvi + 8 * q), bits[q]);
            }
            unsigned n = 0;
            for (uint32_t left = keep; left; left &= left - 1, n++) {
                ci[n] = ri[tw_ctz32(left)];
                vi[n] = rvi[tw_ctz32(left)];
            }
            TW_UNROLL4 for (size_t q = 0; q < nv; q++) {
                c[q] = _mm256_loadu_si256((const __m256i *)(const void *)(ci + 8 * q));
                v[q] = _mm256_loadu_si256((const __m256i *)(const void *)(vi + 8 * q));
            }
        }

        /* live: the candidates before a tail at the sentinel */
        uint32_t z = lanes_eq_ps(v, (float)HEAD_SENTINEL, nv) & all;
        live = z ? tw_ctz32(z) : m;
        lm = live == 32 ? ~UINT32_C(0) : (UINT32_C(1) << live) - 1;
        int shaped = live > 0 && (z == 0 || z >> live == all >> live); /* sentinels only as a tail */

        /* the shape (head_shape): each candidate against the one before it, then the run */
        uint32_t up = 0;
        TW_UNROLL4 for (size_t q = 0; q < nv; q++)
            up |= better8(_mm256_castsi256_ps(v[q]), c[q], _mm256_castsi256_ps(lanes_before(v, q)),
                          lanes_before(c, q)) << (8 * q);
        up &= lm & ~UINT32_C(1);
        if (shaped && (up == 0 || up == 2)) {
            unsigned q = 0;
            if (up) {
                __m256 f = _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(v[0], _mm256_setzero_si256()));
                __m256i fi = _mm256_permutevar8x32_epi32(c[0], _mm256_setzero_si256());
                uint32_t run = 0;
                TW_UNROLL4 for (size_t u = 0; u < nv; u++)
                    run |= better8(_mm256_castsi256_ps(v[u]), c[u], f, fi) << (8 * u);
                run &= lm;
                q = 1 + tw_ctz32(~(run >> 2));
            }
            /* the ranked order (shape_at): c[1 .. q], c[0], c[q+1 ..] */
            __m256i qv = _mm256_set1_epi32((int)q);
            __m256i c0 = _mm256_permutevar8x32_epi32(c[0], _mm256_setzero_si256());
            __m256i v0 = _mm256_permutevar8x32_epi32(v[0], _mm256_setzero_si256());
            TW_UNROLL4 for (size_t u = 0; u < nv; u++) {
                __m256i at_lane = _mm256_add_epi32(lane, _mm256_set1_epi32((int)(8 * u)));
                __m256i before = _mm256_cmpgt_epi32(qv, at_lane), is_q = _mm256_cmpeq_epi32(qv, at_lane);
                rc[u] = _mm256_blendv_epi8(_mm256_blendv_epi8(c[u], lanes_after(c, u, nv), before), c0, is_q);
                rv[u] = _mm256_blendv_epi8(_mm256_blendv_epi8(v[u], lanes_after(v, u, nv), before), v0, is_q);
            }
        } else {
            /* no shape: the candidates not at the sentinel, wherever they are, sorted (what
               select_one ranks with tw_rank_top then) */
            uint32_t cs[32], keep_live = all & ~z;
            float vs[32];
            TW_UNROLL4 for (size_t u = 0; u < nv; u++) {
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
            tw_sort_head(id, at, live);
            TW_UNROLL4 for (size_t u = 0; u < nv; u++) {
                rc[u] = _mm256_loadu_si256((const __m256i *)(const void *)(id + 8 * u));
                rv[u] = _mm256_loadu_si256((const __m256i *)(const void *)(at + 8 * u));
            }
            lm = live == 32 ? ~UINT32_C(0) : (UINT32_C(1) << live) - 1;
        }
    }
    TW_UNROLL4 for (size_t u = 0; u < nv; u++) {
        _mm256_storeu_si256((__m256i *)(void *)(id + 8 * u), rc[u]);
        _mm256_storeu_si256((__m256i *)(void *)(at + 8 * u), rv[u]);
    }

    unsigned r;
    uint32_t hm; /* the head's lanes of rv */
    if (sup && slen) {
        /* keep_support: every support id among the live ranked ones; those are the head. The
           support rule with it: the ranked candidates are distinct (tw_row_keep_avx2 kept one
           lane an id; the ranking only reorders them), so as many marks (live lanes holding a
           support id) as ids say the ids are there and distinct; none negative; and the sampled
           id among them. Anything else: the kernels decide. Eight support ids a vector, each
           against every lane by its eight rotations; the lanes past the support repeat its first
           id (which marks nothing more). */
        if (slen > 32 || sid < 0 || sid > INT32_MAX) return FAST_NO; /* more ids than lanes; sid not among them */
        __m256i hit[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                          _mm256_setzero_si256()};
        __m256i neg = _mm256_setzero_si256(), has_sampled = _mm256_setzero_si256();
        const __m256i first = _mm256_set1_epi32(sup[0]), want_sid = _mm256_set1_epi32((int)sid);
        for (size_t j = 0; j < slen; j += 8) {
            __m256i in = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(slen - j)), lane);
            __m256i ids8 = _mm256_blendv_epi8(first, _mm256_maskload_epi32((const int *)sup + j, in), in);
            neg = _mm256_or_si256(neg, ids8);
            has_sampled = _mm256_or_si256(has_sampled, _mm256_cmpeq_epi32(ids8, want_sid));
            TW_UNROLL8 for (int q = 0; q < 8; q++) {
                __m256i turned = q ? _mm256_permutevar8x32_epi32(
                                         ids8, _mm256_and_si256(_mm256_add_epi32(lane, _mm256_set1_epi32(q)),
                                                                _mm256_set1_epi32(7)))
                                   : ids8;
                TW_UNROLL4 for (size_t u = 0; u < nv; u++) hit[u] = _mm256_or_si256(hit[u], _mm256_cmpeq_epi32(rc[u], turned));
            }
        }
        uint32_t marks = 0;
        TW_UNROLL4 for (size_t u = 0; u < nv; u++)
            marks |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(hit[u])) << (8 * u);
        marks &= lm;
        if (_mm256_movemask_ps(_mm256_castsi256_ps(neg)) || _mm256_testz_si256(has_sampled, has_sampled) ||
            (size_t)_mm_popcnt_u32(marks) != slen)
            return FAST_NO;
        if (lanes_above_ps(rv, 1.0f, nv) & marks) return FAST_NO; /* decided exactly */
        hm = marks;
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
            r = tw_ctz32(lanes_eq_ps(rv, at[r], nv) & lm); /* ranked: the values equal to the boundary are one run */
        if (r == 0 || too_few(m, k)) return FAST_NO;
        uint32_t head = r == 32 ? ~UINT32_C(0) : (UINT32_C(1) << r) - 1;
        if (lanes_above_ps(rv, 1.0f, nv) & head) return FAST_NO; /* decided exactly */
        hm = head;
        TW_UNROLL4 for (unsigned u = 0; u < nv; u++) /* the ranked lanes in place: r of them */
            if (8 * u < r) store_head8(oid + 8 * u, olp + 8 * u, rc[u], rv[u], r - 8 * u, room - 8 * u);
    }
    *count = r;
    /* the sum rules (check_sums' rules and estimate): the head's lanes hm of rv, their fast
       exps summed in single precision (sum_verdict_f32), the exact sum only near a threshold */
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256 acc = _mm256_setzero_ps();
    TW_UNROLL4 for (size_t u = 0; u < nv; u++) {
        __m256i in = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)(hm >> (8 * u))), bit), bit);
        acc = _mm256_add_ps(acc, _mm256_and_ps(tw_exp8_f32_avx2(_mm256_castsi256_ps(rv[u])), _mm256_castsi256_ps(in)));
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    int has_sup = sup != NULL && slen > 0;
    int verdict = sum_verdict_f32(r, has_sup, (double)_mm_cvtss_f32(h));
    if (verdict == SUM_EXACT) {
        double v[32];
        for (unsigned i = 0; i < r; i++) v[i] = olp[i];
        verdict = exact_verdict(v, r, has_sup);
    }
    if (verdict) {
        *head_code = verdict;
        return FAST_SUM;
    }
    return FAST_OK;
}

/* compact_head_avx2_n with as few vectors as hold the row (up to 32 entries). */
TW_TARGET_AVX2 static inline TW_ALWAYS_INLINE int
compact_head_avx2(const uint32_t *ids, const float *vals, size_t len, uint64_t take, int64_t sid, int64_t k,
                  const int32_t *sup, size_t slen, float *out_sampled, int64_t *oid, float *olp, size_t room,
                  size_t *count, int *row_kind, int *head_code) {
    if (len == 0 || len > 32) return FAST_NO;
    if (len <= 16)
        return compact_head_avx2_n(ids, vals, len, take, sid, k, sup, slen, out_sampled, oid, olp, room, count,
                                   row_kind, head_code, 2);
    if (len <= 24)
        return compact_head_avx2_n(ids, vals, len, take, sid, k, sup, slen, out_sampled, oid, olp, room, count,
                                   row_kind, head_code, 3);
    return compact_head_avx2_n(ids, vals, len, take, sid, k, sup, slen, out_sampled, oid, olp, room, count,
                               row_kind, head_code, 4);
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
    /* tw_compact_heads_checked's outputs, NULL for a rule not checked: the first value that
       breaks the values rule, the first token whose support breaks the support rule (both -1
       while none is found; a block's are checked just before the kernels read it) */
    ptrdiff_t *value_bad, *support_bad;
    /* scratch for the tokens the two kernels decide */
    int64_t *cand_ids;
    double *cand_lps, *lps;
    size_t cap;
} compact_call;

/* Scratch for a block of the two kernels (its candidates, as ids and values, and its heads'
   values as doubles): room for `need` entries, at least a sweep's (also for a block of empty
   rows: the kernels then get blocks, never NULL plus an offset). 0 without memory. */
static int block_scratch(compact_call *c, size_t need) {
    if (need <= c->cap && c->cap) return 1;
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
    /* the block's values and supports, while they are about to be read anyway: every earlier
       row's were checked (here, or in registers), so a failure is the first one */
    if (c->value_bad) {
        ptrdiff_t v = tw_compact_values_bad(c->row_vals + c->roff[from], (size_t)(c->roff[to] - c->roff[from]));
        if (v >= 0) {
            *c->value_bad = c->roff[from] + v;
            return (ptrdiff_t)from;
        }
    }
    if (c->support_bad) {
        int nomem = 0;
        ptrdiff_t s = tw_support_rows(c->sup, c->soff + from, n, c->sampled + from, 1, &nomem, c->path);
        if (nomem) {
            *row_kind = TW_ROW_NOMEM;
            return (ptrdiff_t)from + s;
        }
        if (s >= 0) {
            *c->support_bad = (ptrdiff_t)from + s;
            return (ptrdiff_t)from + s;
        }
    }
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
/* tw_compact_heads on the AVX2 and AVX-512 paths: each token decided in registers, its sums with it
   (compact_head_avx2), and each token those leave to the two kernels. */
TW_TARGET_AVX2 static inline TW_ALWAYS_INLINE ptrdiff_t heads_on(compact_call *c, size_t n, int *row_kind,
                                                                 int *head_code) {
    uint64_t take = c->num_top < 1 ? 1 : (uint64_t)c->num_top;
    /* the output's entries (tw_heads.h): a head never has more than its row, so o + the row's
       length stays within them */
    int64_t o = 0, cap = c->roff[n] - c->roff[0];
    for (size_t t = 0; t < n;) {
        size_t len = (size_t)(c->roff[t + 1] - c->roff[t]), r = 0;
        int has_sup = row_has_support(c->soff, t);
        int fast = compact_head_avx2(c->row_ids + c->roff[t], c->row_vals + c->roff[t], len, take, c->sampled[t],
                                     c->k, has_sup ? c->sup + c->soff[t] : NULL,
                                     has_sup ? (size_t)(c->soff[t + 1] - c->soff[t]) : 0, c->out_sampled + t,
                                     c->out_ids + o, c->out_lps + o, (size_t)(cap - o), &r, row_kind, head_code);
        if (fast == FAST_OK || fast == FAST_SUM) {
            o += (int64_t)r;
            c->out_off[t + 1] = o;
            if (fast == FAST_SUM) return (ptrdiff_t)t;
            t++;
        } else if (fast == FAST_ROW) {
            return (ptrdiff_t)t;
        } else { /* with the rows after it too long for the registers */
            size_t to = block_end(c->roff, t, n, 1);
            ptrdiff_t bad = compact_block(c, t, to, &o, row_kind, head_code);
            if (bad >= 0) return bad;
            t = to;
        }
    }
    return -1;
}

TW_TARGET_AVX2 static ptrdiff_t heads_avx2(compact_call *c, size_t n, int *row_kind, int *head_code) {
    return heads_on(c, n, row_kind, head_code);
}

/* The same code compiled for the AVX-512 path: the intrinsics are AVX2's, but the compiler may
   use the 32 vector registers (a row of 23 entries keeps about 20 live vectors: with 16 some
   are spilled) and the EVEX forms. */
TW_TARGET_AVX512 static ptrdiff_t heads_avx512(compact_call *c, size_t n, int *row_kind, int *head_code) {
    return heads_on(c, n, row_kind, head_code);
}

#endif

static ptrdiff_t compact_heads(size_t n, const int64_t *roff, const uint32_t *row_ids,
                               const float *row_vals, const int64_t *sampled, int64_t num_top,
                               int64_t k, const int64_t *soff, const int32_t *sup, float *out_sampled,
                               int64_t *out_off, int64_t *out_ids, float *out_lps, int *row_kind,
                               int *head_code, int path, ptrdiff_t *value_bad, ptrdiff_t *support_bad) {
    if (value_bad) *value_bad = -1;
    if (support_bad) *support_bad = -1;
    compact_call c = {roff,        row_ids, row_vals, sampled, num_top, k,    soff,
                      sup,         out_sampled, out_off, out_ids, out_lps, tw_path_resolve(path),
                      value_bad, soff ? support_bad : NULL, NULL, NULL, NULL, 0};
    ptrdiff_t failed = -1;
    int64_t o = 0;
    *row_kind = TW_ROW_OK;
    *head_code = TW_HEAD_OK;
    out_off[0] = 0;
#ifdef TW_X86_SIMD
    /* the AVX-512 path's rows too: what the registers leave goes to its kernels */
    if (c.path == TW_PATH_AVX512)
        failed = heads_avx512(&c, n, row_kind, head_code);
    else if (c.path == TW_PATH_AVX2)
        failed = heads_avx2(&c, n, row_kind, head_code);
    else
#endif
        for (size_t from = 0, to; from < n && failed < 0; from = to) {
            to = block_end(roff, from, n, 0);
            failed = compact_block(&c, from, to, &o, row_kind, head_code);
        }
    tw_mem_free(c.cand_ids);
    tw_mem_free(c.cand_lps);
    tw_mem_free(c.lps);
    /* A token that failed stopped the pass: the values and supports from its row on were not
       all checked (those of the rows before it were), and their rules come before the rows'
       and heads'. */
    if (failed >= 0 && (size_t)failed < n && (!value_bad || *value_bad < 0)) {
        if (value_bad) {
            ptrdiff_t v = tw_compact_values_bad(row_vals + roff[failed], (size_t)(roff[n] - roff[failed]));
            if (v >= 0) *value_bad = roff[failed] + v;
        }
        if (c.support_bad && *c.support_bad < 0 && (!value_bad || *value_bad < 0)) {
            int nomem = 0;
            ptrdiff_t s = tw_support_rows(sup, soff + failed, n - (size_t)failed, sampled + failed, 1, &nomem, c.path);
            if (nomem)
                *row_kind = TW_ROW_NOMEM;
            else if (s >= 0)
                *c.support_bad = failed + s;
        }
    }
    /* With a value broken the supports are not decided (the register and block passes stop
       checking them at different rows): support_bad says nothing then, on every path. */
    if (value_bad && *value_bad >= 0 && c.support_bad)
        *c.support_bad = -1;
    return failed;
}

ptrdiff_t tw_compact_heads(size_t n, const int64_t *roff, const uint32_t *row_ids,
                           const float *row_vals, const int64_t *sampled, int64_t num_top,
                           int64_t k, const int64_t *soff, const int32_t *sup, float *out_sampled,
                           int64_t *out_off, int64_t *out_ids, float *out_lps, int *row_kind,
                           int *head_code, int path) {
    return compact_heads(n, roff, row_ids, row_vals, sampled, num_top, k, soff, sup, out_sampled, out_off,
                         out_ids, out_lps, row_kind, head_code, path, NULL, NULL);
}

ptrdiff_t tw_compact_heads_checked(size_t n, const int64_t *roff, const uint32_t *row_ids,
                                   const float *row_vals, const int64_t *sampled, int64_t num_top,
                                   int64_t k, const int64_t *soff, const int32_t *sup, float *out_sampled,
                                   int64_t *out_off, int64_t *out_ids, float *out_lps, int *row_kind,
                                   int *head_code, int path, ptrdiff_t *value_bad,
                                   ptrdiff_t *support_bad) {
    return compact_heads(n, roff, row_ids, row_vals, sampled, num_top, k, soff, sup, out_sampled, out_off,
                         out_ids, out_lps, row_kind, head_code, path, value_bad, support_bad);
}
