/* tw_compact_candidates and tw_compact_rows_candidates (tw_heads.h): compact rows to the
   candidates tw_select_heads takes. */
#include "rules/tw_heads.h"
#include "base/tw_cpu.h"
#include "base/tw_hash.h"
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

/* The kept lanes of a row (tw_row_keep_avx512) as candidates: ids and values widened. */
TW_TARGET_AVX512 static size_t store_keep(const tw_row_lanes *L, uint32_t keep, int64_t *oid, double *olp) {
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
    tw_row_lanes L;
    uint32_t keep;
    if (!tw_row_keep_avx512(ids, vals, len, take, &L, &keep)) return 0;
    *count = store_keep(&L, keep, oid, olp);
    return 1;
}
#endif

#ifdef TW_X86_SIMD
/* One row of up to 32 entries for both kernels: its candidates (compact_row_avx512) and its
   row rule in *r, with the sampled value in *out when it holds. 0 (nothing decided) when a
   value breaks the values rule (a NaN among them) or repeats' bits differ (a zero of either
   sign): the kernels then run on it one after the other. Repeats with identical bits and no
   NaN agree, so what is left
   of the row rule is the sampled id. */
TW_TARGET_AVX512 static int fused_row_avx512(const uint32_t *ids, const float *vals, size_t len,
                                             uint64_t take, int64_t sid, float *out, int64_t *oid,
                                             double *olp, size_t *count, int *r) {
    tw_row_lanes L;
    uint32_t keep;
    if (!tw_row_keep_avx512(ids, vals, len, take, &L, &keep) || !tw_row_rule_avx512(&L, vals, sid, out, r))
        return 0;
    *count = store_keep(&L, keep, oid, olp);
    return 1;
}

/* fused_row_avx512 with AVX2 (tw_row_keep_avx2), the candidates widened one at a time. */
TW_TARGET_AVX2 static int fused_row_avx2(const uint32_t *ids, const float *vals, size_t len,
                                         uint64_t take, int64_t sid, float *out, int64_t *oid,
                                         double *olp, size_t *count, int *r) {
    __m256i a[4], bits[4];
    uint32_t keep;
    size_t c = 0;
    if (!tw_row_keep_avx2(ids, vals, len, take, sid, out, r, a, bits, &keep)) return 0;
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
