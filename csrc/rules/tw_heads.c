/* tw_select_heads (tw_heads.h): each token's head selected, then a block's sum rules checked
   (what the files of head selection share: tw_heads_internal.h). */
#include "rules/tw_heads.h"
#include "base/tw_cpu.h"
#include "rules/tw_heads_internal.h"
#include "base/tw_util.h"
#include "base/tw_mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef TW_X86_SIMD
#include <immintrin.h>
#endif
#ifdef TW_NEON_SIMD
#include <arm_neon.h>
#endif

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
 * would make of it. Other heads are ranked by tw_rank_top (tw_rank.c).
 *
 * Shapes come from a sweep over a block of candidates that flags, per candidate, whether it
 * is better than the one before it (`up`) and whether it is at the sentinel (`sent`); a token's
 * first `up` bit compares with the token before it and is ignored.
 */
#define SWEEP_WORDS (SWEEP / 64 + 1)

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

/* Where word w's candidates end; the vector sweeps' start in it (the first `lead` of word 0
   in scalar code: there is nothing before the first). */
static inline size_t word_end(size_t n, size_t w) { return n - w * 64 < 64 ? n : w * 64 + 64; }

static inline size_t word_start(const int64_t *ids, const double *lps, size_t w, size_t end,
                                size_t lead, uint64_t *u, uint64_t *z) {
    return w ? w * 64 : sweep_range(ids, lps, 0, end < lead ? end : lead, u, z);
}

/* The rest of word w in scalar code, and its flags stored. */
static inline void word_finish(const int64_t *ids, const double *lps, size_t w, size_t i,
                               size_t end, uint64_t u, uint64_t z, uint64_t *up, uint64_t *sent) {
    sweep_range(ids, lps, i, end, &u, &z);
    up[w] = u;
    sent[w] = z;
}

static void sweep_scalar(const int64_t *ids, const double *lps, size_t n, uint64_t *up,
                         uint64_t *sent) {
    for (size_t w = 0; w * 64 < n; w++)
        word_finish(ids, lps, w, w * 64, word_end(n, w), 0, 0, up, sent);
}

#ifdef TW_X86_SIMD
TW_TARGET_AVX2 static void sweep_avx2(const int64_t *ids, const double *lps,
                                                              size_t n, uint64_t *up,
                                                              uint64_t *sent) {
    const __m256d sentinel = _mm256_set1_pd(HEAD_SENTINEL);
    for (size_t w = 0; w * 64 < n; w++) {
        uint64_t u = 0, z = 0;
        size_t i, end = word_end(n, w);
        for (i = word_start(ids, lps, w, end, 4, &u, &z); i + 4 <= end; i += 4) {
            __m256i id = _mm256_loadu_si256((const __m256i *)(ids + i));
            __m256i pid = _mm256_loadu_si256((const __m256i *)(ids + i - 1));
            __m256d v = _mm256_loadu_pd(lps + i), pv = _mm256_loadu_pd(lps + i - 1);
            __m256d gt = _mm256_cmp_pd(v, pv, _CMP_GT_OQ), eq = _mm256_cmp_pd(v, pv, _CMP_EQ_OQ);
            __m256d lt = _mm256_castsi256_pd(_mm256_cmpgt_epi64(pid, id));
            __m256d b = _mm256_or_pd(gt, _mm256_and_pd(eq, lt));
            u |= (uint64_t)_mm256_movemask_pd(b) << (i & 63);
            z |= (uint64_t)_mm256_movemask_pd(_mm256_cmp_pd(v, sentinel, _CMP_EQ_OQ)) << (i & 63);
        }
        word_finish(ids, lps, w, i, end, u, z, up, sent);
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
        size_t i, end = word_end(n, w);
        for (i = word_start(ids, lps, w, end, 8, &u, &z); i + 8 <= end; i += 8) {
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
        word_finish(ids, lps, w, i, end, u, z, up, sent);
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
        if (shape < 0 && m > 1) tw_rank_top(oid, olp, m, m);
        *r = m;
        return TW_HEAD_OK;
    }
    if (k < 1 || m == 0) {
        *r = 0;
        return TW_HEAD_OK;
    }
    size_t kk = (uint64_t)k < m ? (size_t)k : m;
    tw_rank_top(oid, olp, m, kk < m ? kk + 1 : m);
    *r = kept(olp, 0, m, k); /* ranked in place: shape 0 */
    return TW_HEAD_OK;
}

/* ------------------------------------------------------------------------------------------
 * All tokens.
 * ------------------------------------------------------------------------------------------ */

/* Values per batch of fast exps (a token longer than this is estimated in pieces). */
#define EXP_CHUNK 1024

/* Whether a value is NaN or above 1. */
static int any_special(const double *v, size_t r) {
    int bad = 0;
    for (size_t i = 0; i < r; i++) bad |= !(v[i] <= 1.0);
    return bad;
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
