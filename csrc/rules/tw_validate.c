#include "rules/tw_validate.h"
#include "base/tw_cpu.h"
#include "base/tw_hash.h"
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

/* The value scans run in blocks without an early exit, so the compiler can vectorize them;
   only a block that holds a violation is searched for its first one. */
#define TW_BLOCK 64

ptrdiff_t tw_packed_f32_bad(const float *v, size_t n) {
    /* !(x > -9999) is true for NaN, -inf and the sentinel and below; +inf is the other case. */
    for (size_t base = 0; base < n; base += TW_BLOCK) {
        size_t end = n - base < TW_BLOCK ? n : base + TW_BLOCK;
        int bad = 0;
        for (size_t i = base; i < end; i++) bad |= !(v[i] > (float)TW_SENTINEL) | (v[i] == INFINITY);
        if (bad)
            for (size_t i = base; i < end; i++)
                if (!(v[i] > (float)TW_SENTINEL) || v[i] == INFINITY) return (ptrdiff_t)i;
    }
    return -1;
}

ptrdiff_t tw_packed_f64_bad(const double *v, size_t n) {
    for (size_t base = 0; base < n; base += TW_BLOCK) {
        size_t end = n - base < TW_BLOCK ? n : base + TW_BLOCK;
        int bad = 0;
        for (size_t i = base; i < end; i++) bad |= !(v[i] > TW_SENTINEL) | (v[i] == INFINITY);
        if (bad)
            for (size_t i = base; i < end; i++)
                if (!(v[i] > TW_SENTINEL) || v[i] == INFINITY) return (ptrdiff_t)i;
    }
    return -1;
}

ptrdiff_t tw_compact_values_bad(const float *v, size_t n) {
    /* !(x <= 1e-6) is true for NaN and anything above 1e-6 (float32(1e-6) is the largest
       float32 not above it, so comparing in float32 decides as comparing in double); -inf is
       the other non-finite case. */
    for (size_t base = 0; base < n; base += TW_BLOCK) {
        size_t end = n - base < TW_BLOCK ? n : base + TW_BLOCK;
        int bad = 0;
        for (size_t i = base; i < end; i++) bad |= !(v[i] <= 1e-6f) | (v[i] == -INFINITY);
        if (bad)
            for (size_t i = base; i < end; i++)
                if (!(v[i] <= 1e-6f) || v[i] == -INFINITY) return (ptrdiff_t)i;
    }
    return -1;
}

#ifdef TW_X86_SIMD
/* tw_compact_values_bad 32 values at a time: !(x <= 1e-6) is the unordered compare
   _CMP_NLE_UQ (true for NaN), -inf the ordered _CMP_EQ_OQ. The first block of 32 holding a
   violation, and the tail, go to the scalar code, which finds the first one. */
TW_TARGET_AVX2 static ptrdiff_t compact_values_bad_avx2(const float *v, size_t n) {
    const __m256 top = _mm256_set1_ps(1e-6f), ninf = _mm256_set1_ps(-INFINITY);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 bad = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            __m256 x = _mm256_loadu_ps(v + i + 8 * k);
            bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(x, top, _CMP_NLE_UQ),
                                                 _mm256_cmp_ps(x, ninf, _CMP_EQ_OQ)));
        }
        if (!_mm256_testz_ps(bad, bad)) break;
    }
    ptrdiff_t r = tw_compact_values_bad(v + i, n - i);
    return r < 0 ? r : r + (ptrdiff_t)i;
}
#endif

ptrdiff_t tw_compact_values_bad_on(const float *v, size_t n, int path) {
#ifdef TW_X86_SIMD
    int p = tw_path_resolve(path);
    if (p == TW_PATH_AVX2 || p == TW_PATH_AVX512) return compact_values_bad_avx2(v, n);
#else
    (void)path;
#endif
    return tw_compact_values_bad(v, n);
}

/* A per-call open-addressing table keyed by token id, slotted by the keyed hash (tw_hash.h:
   the ids a row lists cannot be chosen to share a probe cluster). Each row stamps the slots
   it fills, so the table is never cleared between rows. */
typedef struct {
    uint32_t *keys;
    float *vals;
    uint32_t *stamps;
    unsigned bits;
} tw_table;

static int table_init(tw_table *t, size_t longest) {
    unsigned bits = 4;
    while (((size_t)1 << bits) < 2 * longest) bits++;
    size_t cap = (size_t)1 << bits;
    t->bits = bits;
    t->keys = tw_mem_alloc(cap * sizeof(uint32_t));
    t->vals = tw_mem_alloc(cap * sizeof(float));
    t->stamps = tw_mem_calloc(cap, sizeof(uint32_t));
    return t->keys && t->vals && t->stamps;
}

static void table_free(tw_table *t) {
    tw_mem_free(t->keys);
    tw_mem_free(t->vals);
    tw_mem_free(t->stamps);
}

static inline size_t table_slot(const tw_table *t, uint32_t id) {
    return tw_hash_slot(id, t->bits);
}

static int row_hash(tw_table *t, uint32_t stamp, const uint32_t *ids, const float *vals,
                    size_t len, uint32_t sampled, int sampled_ok, float *out) {
    size_t mask = ((size_t)1 << t->bits) - 1;
    for (size_t i = 0; i < len; i++) {
        size_t h = table_slot(t, ids[i]);
        for (;;) {
            if (t->stamps[h] != stamp) {
                t->stamps[h] = stamp;
                t->keys[h] = ids[i];
                t->vals[h] = vals[i];
                break;
            }
            if (t->keys[h] == ids[i]) {
                if (t->vals[h] != vals[i]) return TW_ROW_REPEAT_DISAGREE;
                t->vals[h] = vals[i]; /* the last occurrence's value (a zero's sign) */
                break;
            }
            h = (h + 1) & mask;
        }
    }
    if (sampled_ok) {
        for (size_t h = table_slot(t, sampled); t->stamps[h] == stamp; h = (h + 1) & mask) {
            if (t->keys[h] == sampled) return sampled_value(t->vals[h], out);
        }
    }
    return TW_ROW_MISSING_SAMPLED;
}

/* A row without disagreeing repeats: OK with its sampled value in *out when the sampled id is
   in it with a value other than the sentinel. Its occurrences are equal; the last one gives
   the value (as a dict built from the row keeps it: only the sign of a zero can differ). */
static inline int row_sampled(const uint32_t *ids, const float *vals, size_t len, uint32_t sampled,
                              int sampled_ok, float *out) {
    size_t last = len;
    if (sampled_ok)
        for (size_t i = len; i-- > 0;)
            if (ids[i] == sampled) {
                last = i;
                break;
            }
    return last == len ? TW_ROW_MISSING_SAMPLED : sampled_value(vals[last], out);
}

/* Rows of one entry from row t on (every row of a sampled-only response), as row_sampled
   decides them, in one loop: the first row it leaves (a longer or an empty one, or n), or the
   first that breaks the rule (*r MISSING_SAMPLED). */
static size_t rows_single(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t t, size_t n,
                          const int64_t *sampled, float *out, int *r) {
    for (; t < n; t++) {
        size_t start = (size_t)offsets[t];
        if ((size_t)offsets[t + 1] - start != 1) break;
        int64_t s = sampled[t];
        if (!sampled_in_range(s) || ids[start] != (uint32_t)s || vals[start] == (float)TW_SENTINEL) {
            *r = TW_ROW_MISSING_SAMPLED;
            break;
        }
        out[t] = vals[start];
    }
    return t;
}

#ifdef TW_X86_SIMD
/* Repeated ids within one vector of 16 lanes (lanes outside m are zero and come last, so
   they are never an earlier lane of a valid one): vpconflictd marks every lane whose id
   occurs in an earlier lane; each such lane must carry the value of the latest earlier
   occurrence, which by induction makes all occurrences agree. */
TW_TARGET_AVX512 static inline int
dup_disagree(__m512i ids, __m512 vals, __mmask16 m) {
    __m512i conflicts = _mm512_maskz_conflict_epi32(m, ids);
    __mmask16 repeated = _mm512_test_epi32_mask(conflicts, conflicts);
    if (!repeated) return 0;
    __m512i latest = _mm512_sub_epi32(_mm512_set1_epi32(31), _mm512_lzcnt_epi32(conflicts));
    __m512 earlier = _mm512_permutexvar_ps(latest, vals);
    return _mm512_mask_cmp_ps_mask(repeated, vals, earlier, _CMP_NEQ_UQ) != 0; /* != of C */
}

/* Rows of at most 32 entries, which is every row a top-k request up to k = 29 produces. */
TW_TARGET_AVX512 static inline TW_ALWAYS_INLINE int
row_avx512(const uint32_t *ids, const float *vals, size_t len, uint32_t sampled,
           int sampled_ok, float *out) {
    __mmask16 ma = len >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << len) - 1);
    __m512i a = _mm512_maskz_loadu_epi32(ma, ids);
    __m512 va = _mm512_maskz_loadu_ps(ma, vals);
    __m512i s = _mm512_set1_epi32((int)sampled);
    if (dup_disagree(a, va, ma)) return TW_ROW_REPEAT_DISAGREE;
    /* the lanes holding the sampled id, found with the same registers */
    uint32_t hit = _mm512_mask_cmpeq_epi32_mask(ma, a, s);
    if (len > 16) {
        __mmask16 mb = (__mmask16)((1u << (len - 16)) - 1);
        __m512i b = _mm512_maskz_loadu_epi32(mb, ids + 16);
        __m512 vb = _mm512_maskz_loadu_ps(mb, vals + 16);
        if (dup_disagree(b, vb, mb)) return TW_ROW_REPEAT_DISAGREE;
        /* the tail against the first 16: first by their low 16 bits (words), each half of the
           tail's 16 (8 words in both halves of t; lanes past the row are 0) against the first
           16 in a16, t turned a word at a time within its halves (vpalignr) so that each of
           a16's words meets each of the 8. Only where two low halves are equal (about 0.2% of
           the rows of a top-20 response, and where the sampled id repeats in the tail), id by
           id: 7.7 against 11.5 ns a row of 23 entries with the loop alone. */
        __m256i a16 = _mm512_cvtepi32_epi16(a), b16 = _mm512_cvtepi32_epi16(b);
        __m256i t = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(b16));
        __m256i nearby = _mm256_cmpeq_epi16(a16, t);
#define TW_TAIL_TURN(r) nearby = _mm256_or_si256(nearby, _mm256_cmpeq_epi16(a16, _mm256_alignr_epi8(t, t, 2 * (r))))
        TW_TAIL_TURN(1); TW_TAIL_TURN(2); TW_TAIL_TURN(3); TW_TAIL_TURN(4);
        TW_TAIL_TURN(5); TW_TAIL_TURN(6); TW_TAIL_TURN(7);
        if (len > 24) {
            t = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(b16, 1));
            nearby = _mm256_or_si256(nearby, _mm256_cmpeq_epi16(a16, t));
            TW_TAIL_TURN(1); TW_TAIL_TURN(2); TW_TAIL_TURN(3); TW_TAIL_TURN(4);
            TW_TAIL_TURN(5); TW_TAIL_TURN(6); TW_TAIL_TURN(7);
        }
#undef TW_TAIL_TURN
        if (!_mm256_testz_si256(nearby, nearby))
            for (size_t j = 16; j < len; j++) {
                __mmask16 eq = _mm512_mask_cmpeq_epi32_mask(ma, a, _mm512_set1_epi32((int)ids[j]));
                if (eq && _mm512_mask_cmp_ps_mask(eq, va, _mm512_set1_ps(vals[j]), _CMP_NEQ_UQ))
                    return TW_ROW_REPEAT_DISAGREE;
            }
        hit |= (uint32_t)_mm512_mask_cmpeq_epi32_mask(mb, b, s) << 16;
    }
    return sampled_ok ? sampled_in_lanes(vals, hit, out) : TW_ROW_MISSING_SAMPLED;
}

/* An empty asm that takes and gives v in a register: the compiler keeps the ORs into v in
   program order instead of reassociating the chain, which would make every rotation before
   the first compare and spill them. */
#if defined(__GNUC__)
#define TW_KEEP_ORDER(v) __asm__("" : "+x"(v))
#else
#define TW_KEEP_ORDER(v) ((void)0)
#endif

/* tw_distinct_after_first_avx2_n's decision (tw_heads_internal.h: 1 when lanes 1 .. len-1
   of the nvec vectors of ids in a hold distinct ids, 0 when they may not; lane 0 and the lanes
   past the row take the same distinct stand-ins), its compares in another order: one rotation
   at a time, against its own vector (rotations 1 to 4) and every vector after it, so that the
   vectors, the rotation and the accumulator stay in registers (the rotations made first and
   compared after are spilled to the stack in a row loop). */
TW_TARGET_AVX2 static inline TW_ALWAYS_INLINE int
distinct_after_first_avx2_n(const __m256i *a, size_t len, const unsigned nvec) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i x[4], same = _mm256_setzero_si256();
    TW_UNROLL4 for (unsigned k = 0; k < nvec; k++) {
        __m256i at = _mm256_add_epi32(lane, _mm256_set1_epi32((int)(8 * k)));
        __m256i out = _mm256_cmpgt_epi32(at, _mm256_set1_epi32((int)len - 1));
        if (k == 0) out = _mm256_or_si256(out, _mm256_cmpeq_epi32(at, _mm256_setzero_si256()));
        x[k] = _mm256_blendv_epi8(a[k], _mm256_add_epi32(at, _mm256_set1_epi32((int)0xFFFFFFE0u)), out);
    }
    TW_UNROLL4 for (unsigned k = 0; k < nvec; k++) {
        TW_UNROLL4 for (unsigned k2 = k + 1; k2 < nvec; k2++) same = _mm256_or_si256(same, _mm256_cmpeq_epi32(x[k2], x[k]));
        TW_UNROLL8 for (int r = 1; r < 8; r++) {
            if (r > 4 && k + 1 >= nvec) break;
            __m256i turned = _mm256_permutevar8x32_epi32(
                x[k], _mm256_and_si256(_mm256_sub_epi32(lane, _mm256_set1_epi32(r)), _mm256_set1_epi32(7)));
            if (r <= 4) same = _mm256_or_si256(same, _mm256_cmpeq_epi32(x[k], turned));
            TW_UNROLL4 for (unsigned k2 = k + 1; k2 < nvec; k2++)
                same = _mm256_or_si256(same, _mm256_cmpeq_epi32(x[k2], turned));
            TW_KEEP_ORDER(same);
        }
    }
    return _mm256_testz_si256(same, same);
}

/* A row verdict of the fused kernel only (tw_compact_rows_valid): a value off the values rule. */
#define TW_ROW_VALUE_OFF 4

/* The same rows with AVX2: the entries repeating an earlier one found in registers, then each
   such entry's value against those of the earlier entries with its id (!=, as the table).
   Lanes past the row load as id 0, come after the row's and are masked off. First whether
   lanes 1 .. len-1 hold distinct ids (distinct_after_first_avx2_n, half the compares of
   tw_repeats_avx2_n; a compact row is the sampled id, then the distinct candidates): then only
   lane 0's id can repeat, and its repeats agree exactly when each one's value equals lane 0's
   (!= is an equivalence on the values that are not NaN; a NaN on either side disagrees, as a
   pair with it does in the table). Else every repeating lane is found (tw_repeats_avx2_n).
   check_values (a constant): the values rule (tw_compact_values_bad) on the row's values too,
   read in registers before the other rules (TW_ROW_VALUE_OFF). */
TW_TARGET_AVX2 static inline TW_ALWAYS_INLINE int
row_avx2_n(const uint32_t *ids, const float *vals, size_t len, uint32_t sampled, int sampled_ok,
           float *out, const unsigned nvec, const int check_values) {
    __m256i a[4];
    uint32_t all = tw_load32_avx2_n(ids, len, a, nvec), rep;
    if (check_values) { /* lanes past the row load as 0.0, which keeps the rule */
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256 top = _mm256_set1_ps(1e-6f), ninf = _mm256_set1_ps(-INFINITY);
        __m256 off = _mm256_setzero_ps();
        TW_UNROLL4 for (unsigned k = 0; k < nvec; k++) {
            __m256 x = _mm256_maskload_ps(vals + 8 * k, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(len - 8 * k)), lane));
            off = _mm256_or_ps(off, _mm256_or_ps(_mm256_cmp_ps(x, top, _CMP_NLE_UQ), _mm256_cmp_ps(x, ninf, _CMP_EQ_OQ)));
        }
        if (!_mm256_testz_ps(off, off)) return TW_ROW_VALUE_OFF;
    }
    if (distinct_after_first_avx2_n(a, len, nvec)) {
        __m256i first = _mm256_permutevar8x32_epi32(a[0], _mm256_setzero_si256());
        rep = 0;
        TW_UNROLL4 for (unsigned k = 0; k < nvec; k++)
            rep |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a[k], first))) << (8 * k);
        for (rep &= all & ~UINT32_C(1); rep; rep &= rep - 1)
            if (vals[tw_ctz32(rep)] != vals[0]) return TW_ROW_REPEAT_DISAGREE;
    } else {
        for (rep = tw_repeats_avx2_n(a, nvec) & all; rep; rep &= rep - 1) {
            unsigned j = tw_ctz32(rep);
            for (unsigned i = 0; i < j; i++)
                if (ids[i] == ids[j] && vals[i] != vals[j]) return TW_ROW_REPEAT_DISAGREE;
        }
    }
    if (!sampled_ok) return TW_ROW_MISSING_SAMPLED;
    /* the lanes holding the sampled id, from the loaded registers */
    __m256i s = _mm256_set1_epi32((int)sampled);
    uint32_t hit = 0;
    TW_UNROLL4 for (unsigned v = 0; v < nvec; v++)
        hit |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a[v], s))) << (8 * v);
    return sampled_in_lanes(vals, hit & all, out);
}

/* One body a vector count, as tw_repeats_avx2: the loads and the loops over the vectors
   unroll. */
#define TW_ROW_AVX2_BODIES(check)                                                                  \
    switch ((len + 7) / 8) {                                                                       \
    case 1:                                                                                        \
        return row_avx2_n(ids, vals, len, sampled, sampled_ok, out, 1, check);                     \
    case 2:                                                                                        \
        return row_avx2_n(ids, vals, len, sampled, sampled_ok, out, 2, check);                     \
    case 3:                                                                                        \
        return row_avx2_n(ids, vals, len, sampled, sampled_ok, out, 3, check);                     \
    default:                                                                                       \
        return row_avx2_n(ids, vals, len, sampled, sampled_ok, out, 4, check);                     \
    }

TW_TARGET_AVX2 static int
row_avx2(const uint32_t *ids, const float *vals, size_t len, uint32_t sampled, int sampled_ok,
         float *out) {
    TW_ROW_AVX2_BODIES(0)
}

TW_TARGET_AVX2 static int
row_valid_avx2(const uint32_t *ids, const float *vals, size_t len, uint32_t sampled, int sampled_ok,
               float *out) {
    TW_ROW_AVX2_BODIES(1)
}

/* tw_compact_rows' loop on the AVX2 path from row t, while the rows hold 2 to 32 entries (one
   call for the rows, not one a row): the first row it leaves (a shorter or a longer one, or n),
   or the first that breaks the rule, with its verdict in *r. check_values: the values rule
   too (row_valid_avx2). */
TW_TARGET_AVX2 static inline TW_ALWAYS_INLINE size_t
rows_avx2_on(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t t, size_t n,
             const int64_t *sampled, float *out, int *r, const int check_values) {
    for (; t < n; t++) {
        size_t start = (size_t)offsets[t], len = (size_t)(offsets[t + 1] - offsets[t]);
        int64_t s = sampled[t];
        if (len <= 1 || len > 32) break;
        *r = (check_values ? row_valid_avx2 : row_avx2)(ids + start, vals + start, len, (uint32_t)s,
                                                        sampled_in_range(s), out + t);
        if (*r != TW_ROW_OK) break;
    }
    return t;
}

TW_TARGET_AVX2 static size_t
rows_avx2(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t t, size_t n,
          const int64_t *sampled, float *out, int *r) {
    return rows_avx2_on(ids, vals, offsets, t, n, sampled, out, r, 0);
}

/* rows_avx2's loop on the AVX-512 path (row_avx512 inlined: one call for the rows). */
TW_TARGET_AVX512 static size_t
rows_avx512(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t t, size_t n,
            const int64_t *sampled, float *out, int *r) {
    for (; t < n; t++) {
        size_t start = (size_t)offsets[t], len = (size_t)(offsets[t + 1] - offsets[t]);
        int64_t s = sampled[t];
        if (len <= 1 || len > 32) break;
        *r = row_avx512(ids + start, vals + start, len, (uint32_t)s, sampled_in_range(s), out + t);
        if (*r != TW_ROW_OK) break;
    }
    return t;
}

TW_TARGET_AVX2 static size_t
rows_valid_avx2(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t t, size_t n,
                const int64_t *sampled, float *out, int *r) {
    return rows_avx2_on(ids, vals, offsets, t, n, sampled, out, r, 1);
}

#endif

/* Supports longer than this are checked for repeats by sorting a copy instead of pairwise. */
#define TW_SMALL_ROW 48

#ifdef TW_NEON_SIMD
/* The lanes of a 4-lane vector above lane j % 4: all ones; the others zero. */
static inline uint32x4_t lanes_above(size_t j) {
    static const uint32_t iota[4] = {0, 1, 2, 3};
    return vcgtq_u32(vld1q_u32(iota), vdupq_n_u32((uint32_t)(j & 3)));
}

/* Rows of at most 32 entries with NEON. A pair i < j disagrees when its ids are equal and its
   values are not (!=, as the table). The ids' low 16 bits go eight to a vector; entry i's is
   broadcast against the lanes after it, and only an entry with a candidate (equal low bits
   somewhere after it: in a valid row, mostly the sampled id's repeat) is checked in full.
   Lanes past the row repeat its last id, which only adds candidates. */
static int row_neon(const uint32_t *ids, const float *vals, size_t len, uint32_t sampled,
                    int sampled_ok, float *out) {
    static const uint16_t iota[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const uint16x8_t lane = vld1q_u16(iota);
    uint16_t low[32];
    uint16x8_t a[4];
    size_t nvec = (len + 7) / 8;
    if (len == 0) return TW_ROW_MISSING_SAMPLED;
    for (size_t i = 0; i < 8 * nvec; i++) low[i] = (uint16_t)ids[i < len ? i : len - 1];
    for (size_t k = 0; k < nvec; k++) a[k] = vld1q_u16(low + 8 * k);
    for (size_t i = 0; i + 1 < len; i++) {
        uint16x8_t id = vld1q_dup_u16(low + i);
        size_t k = i / 8;
        uint16x8_t m = vandq_u16(vceqq_u16(a[k], id), vcgtq_u16(lane, vdupq_n_u16((uint16_t)(i & 7))));
        for (k++; k < nvec; k++) m = vorrq_u16(m, vceqq_u16(a[k], id));
        if (vmaxvq_u16(m))
            for (size_t j = i + 1; j < len; j++)
                if (ids[j] == ids[i] && vals[j] != vals[i]) return TW_ROW_REPEAT_DISAGREE;
    }
    return row_sampled(ids, vals, len, sampled, sampled_ok, out);
}

/* A support row of 1 to TW_SMALL_ROW entries with NEON: whether it holds `sampled`, and
   whether an id repeats (every pair i < j once, as row_neon). */
static int support_row_neon(const int32_t *row, size_t len, int64_t sampled) {
    int32_t pad[TW_SMALL_ROW];
    int32x4_t a[TW_SMALL_ROW / 4];
    uint32x4_t any = vdupq_n_u32(0), rep = vdupq_n_u32(0);
    size_t nvec = (len + 3) / 4;
    memcpy(pad, row, len * sizeof *row);
    for (size_t i = len; i < 4 * nvec; i++) pad[i] = row[len - 1];
    for (size_t k = 0; k < nvec; k++) a[k] = vld1q_s32(pad + 4 * k);
    if (sampled >= INT32_MIN && sampled <= INT32_MAX) {
        int32x4_t s = vdupq_n_s32((int32_t)sampled);
        for (size_t k = 0; k < nvec; k++) any = vorrq_u32(any, vceqq_s32(a[k], s));
    }
    if (!vmaxvq_u32(any)) return 1;
    for (size_t i = 0; i + 1 < len; i++) {
        int32x4_t id = vdupq_n_s32(row[i]);
        size_t k = i / 4;
        rep = vorrq_u32(rep, vandq_u32(vceqq_s32(a[k], id), lanes_above(i)));
        for (k++; k < nvec; k++) rep = vorrq_u32(rep, vceqq_s32(a[k], id));
    }
    return vmaxvq_u32(rep) != 0;
}
#endif

ptrdiff_t tw_compact_rows(const uint32_t *ids, const float *vals, const int64_t *offsets,
                          size_t n, const int64_t *sampled, float *out, int *kind, int path) {
    size_t longest = 0;
    for (size_t t = 0; t < n; t++) {
        size_t len = (size_t)(offsets[t + 1] - offsets[t]);
        if (len > longest) longest = len;
    }
    /* TW_PATH_SCALAR: the table; AVX2 / AVX512 / NEON: rows of up to 32 entries by vector. */
    int vector = tw_path_resolve(path);
    if (vector == TW_PATH_SCALAR) vector = 0;
    tw_table table = {0};
    if (!vector || longest > 32) {
        if (!table_init(&table, longest)) {
            table_free(&table);
            *kind = TW_ROW_NOMEM;
            return 0;
        }
    }
    ptrdiff_t failed = -1;
    int r = TW_ROW_OK;
    for (size_t t = 0; t < n; t++) {
        /* a run of rows of one entry (every row of a sampled-only response), then one of rows
           of 2 to 32 entries on the x86 vector paths, each in one call */
        size_t at = (size_t)(offsets[t + 1] - offsets[t]);
        if (at == 1) {
            t = rows_single(ids, vals, offsets, t, n, sampled, out, &r);
            if (r != TW_ROW_OK) {
                failed = (ptrdiff_t)t;
                break;
            }
            if (t == n) break;
            at = (size_t)(offsets[t + 1] - offsets[t]);
        }
#ifdef TW_X86_SIMD
        if ((vector == TW_PATH_AVX2 || vector == TW_PATH_AVX512) && at >= 2 && at <= 32) {
            t = (vector == TW_PATH_AVX512 ? rows_avx512 : rows_avx2)(ids, vals, offsets, t, n, sampled, out, &r);
            if (r != TW_ROW_OK) {
                failed = (ptrdiff_t)t;
                break;
            }
            if (t == n) break;
        }
#endif
        size_t start = (size_t)offsets[t], len = (size_t)(offsets[t + 1] - offsets[t]);
        int64_t s = sampled[t];
        int ok = sampled_in_range(s);
        /* here on the x86 vector paths only a row of none, one, or over 32 entries */
        if (len <= 1) /* nothing to repeat (a sampled-only row): the sampled id alone */
            r = row_sampled(ids + start, vals + start, len, (uint32_t)s, ok, out + t);
        else
#ifdef TW_NEON_SIMD
        if (vector == TW_PATH_NEON && len <= 32)
            r = row_neon(ids + start, vals + start, len, (uint32_t)s, ok, out + t);
        else
#endif
            r = row_hash(&table, (uint32_t)t + 1, ids + start, vals + start, len, (uint32_t)s,
                         ok, out + t);
        if (r != TW_ROW_OK) {
            failed = (ptrdiff_t)t;
            break;
        }
    }
    table_free(&table); /* all NULL when the table was not needed */
    *kind = r;
    return failed;
}

ptrdiff_t tw_compact_rows_valid(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t n,
                                const int64_t *sampled, float *out, int path) {
    size_t t = 0;
    int kind = TW_ROW_OK;
#ifdef TW_X86_SIMD
    if (tw_path_resolve(path) == TW_PATH_AVX2) {
        t = rows_valid_avx2(ids, vals, offsets, 0, n, sampled, out, &kind);
        if (kind != TW_ROW_OK) return (ptrdiff_t)t;
        if (t == n) return -1;
    }
#endif
    /* the rows from t on (every row on the other paths): the values rule over their values,
       then the rows' rule */
    size_t from = (size_t)offsets[t];
    if (tw_compact_values_bad_on(vals + from, (size_t)offsets[n] - from, path) >= 0) return (ptrdiff_t)t;
    ptrdiff_t bad = tw_compact_rows(ids, vals, offsets + t, n - t, sampled + t, out + t, &kind, path);
    return bad < 0 ? -1 : (ptrdiff_t)t + bad;
}

/* ------------------------------------------------------------------------------------------
 * Compact rows in registers, for the head kernels (tw_compact_candidates.c and
 * tw_compact_heads.c, on the AVX-512 and AVX2 paths, rows of up to 32 entries; declared in
 * tw_heads_internal.h). Where they decide a row they decide as tw_compact_rows, but they are
 * not its kernels:
 *   - they decide a row only when its values keep the values rule (tw_compact_values_bad: no
 *     NaN, no infinity, none above 1e-6; checked here, beside the other rules of the rows the
 *     registers hold, so the head kernels read them once) and every repeated id carries
 *     bit-identical values; for any other row they return 0 and the caller runs the scalar
 *     code on it (tw_compact_rows for the rule, compact_row_small for the candidates).
 *     tw_compact_rows' kernels compare repeats with != (a NaN disagrees with itself, -0.0
 *     agrees with 0.0) and report REPEAT_DISAGREE; on the rows the kernels below take, != and
 *     bit identity agree, so no repeat disagrees there and they never report it. What is left
 *     of the rule is the sampled id's, decided with the same helpers as in tw_compact_rows'
 *     kernels (sampled_in_range, then sampled_in_lanes: sampled_value on the last occurrence);
 *   - they also give the candidates' lanes (the first `take` distinct ids), and find the
 *     repeats by other means: tw_row_keep_avx512 by conflict detection, over both vectors of
 *     a row at once when the second holds at most 8 lanes (row_avx512 compares each lane of
 *     the second vector with the first one id at a time, as tw_row_keep_avx512 does past 8
 *     lanes); tw_row_keep_avx2 (tw_row_keep_avx2_n, tw_heads_internal.h, inlined into the AVX2
 *     head kernel) first checks that lanes 1 .. len-1 hold distinct ids (then only lane 0's
 *     id repeats), and compares the bits of every lane of a repeated id in registers
 *     (row_avx2 compares the values of earlier entries one by one).
 * ------------------------------------------------------------------------------------------ */

#ifdef TW_X86_SIMD
/* One row of up to 32 entries loaded (ids a/b, values va/vb: lanes 0-15 and 16-31, zero
   past the row) and its candidates found by conflict detection: *keep gets the lanes of the
   first `take` distinct ids. 0 when a repeated id does not carry identical bits everywhere
   (a zero of either sign), left to the scalar code. */
TW_TARGET_AVX512 int tw_row_keep_avx512(const uint32_t *ids, const float *vals, size_t len, uint64_t take,
                                        tw_row_lanes *L, uint32_t *keep_out) {
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

/* The row rule on a row tw_row_keep_avx512 took (its repeats carry identical bits): 0 when a
   value breaks the values rule (NaN among them; left to the scalar code), else 1 with *r TW_ROW_OK and the sampled value in
   *out when the sampled id is in the row and its last value (a zero's sign) is not the
   sentinel, TW_ROW_MISSING_SAMPLED otherwise. */
TW_TARGET_AVX512 int tw_row_rule_avx512(const tw_row_lanes *L, const float *vals, int64_t sid, float *out,
                                        int *r) {
    /* !(x <= 1e-6) holds for NaN and anything above; -inf is the other value off the rule */
    const __m512 top = _mm512_set1_ps(1e-6f), ninf = _mm512_set1_ps(-INFINITY);
    __m512 va = _mm512_castsi512_ps(L->va), vb = _mm512_castsi512_ps(L->vb);
    if (_mm512_mask_cmp_ps_mask(L->ma, va, top, _CMP_NLE_UQ) | _mm512_mask_cmp_ps_mask(L->ma, va, ninf, _CMP_EQ_OQ) |
        _mm512_mask_cmp_ps_mask(L->mb, vb, top, _CMP_NLE_UQ) | _mm512_mask_cmp_ps_mask(L->mb, vb, ninf, _CMP_EQ_OQ))
        return 0;
    uint32_t hit = 0;
    if (sampled_in_range(sid)) {
        __m512i want = _mm512_set1_epi32((int)(uint32_t)sid);
        hit = (uint32_t)_mm512_mask_cmpeq_epi32_mask(L->ma, L->a, want) |
              (uint32_t)_mm512_mask_cmpeq_epi32_mask(L->mb, L->b, want) << 16;
    }
    *r = sampled_in_lanes(vals, hit, out);
    return 1;
}

TW_TARGET_AVX2 int tw_row_keep_avx2(const uint32_t *ids, const float *vals, size_t len, uint64_t take,
                                    int64_t sid, float *out, int *r, __m256i *a, __m256i *bits,
                                    uint32_t *keep_out) {
    switch ((len + 7) / 8) {
    case 0:
        return tw_row_keep_avx2_n(ids, vals, len, take, sid, out, r, a, bits, keep_out, 0);
    case 1:
        return tw_row_keep_avx2_n(ids, vals, len, take, sid, out, r, a, bits, keep_out, 1);
    case 2:
        return tw_row_keep_avx2_n(ids, vals, len, take, sid, out, r, a, bits, keep_out, 2);
    case 3:
        return tw_row_keep_avx2_n(ids, vals, len, take, sid, out, r, a, bits, keep_out, 3);
    default:
        return tw_row_keep_avx2_n(ids, vals, len, take, sid, out, r, a, bits, keep_out, 4);
    }
}
#endif

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

#ifdef TW_X86_SIMD
/* A support row of 1 to TW_SMALL_ROW entries with AVX-512: whether it lacks `sampled` or
   repeats an id. Sixteen ids a vector; repeats inside a vector by conflict detection, across
   vectors by comparing each id of a later vector with the earlier ones. */
TW_TARGET_AVX512 static int support_row_avx512(const int32_t *row, size_t len, int64_t sampled) {
    __m512i a[TW_SMALL_ROW / 16];
    __mmask16 live[TW_SMALL_ROW / 16];
    size_t nvec = (len + 15) / 16;
    uint32_t found = 0, rep = 0;
    for (size_t k = 0; k < nvec; k++) {
        size_t left = len - 16 * k;
        live[k] = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        a[k] = _mm512_maskz_loadu_epi32(live[k], row + 16 * k);
        /* each live lane's bits of equal lanes before it, in its own vector */
        rep |= _mm512_mask_test_epi32_mask(live[k], _mm512_maskz_conflict_epi32(live[k], a[k]),
                                           _mm512_set1_epi32(-1));
    }
    if (sampled >= INT32_MIN && sampled <= INT32_MAX) {
        __m512i want = _mm512_set1_epi32((int32_t)sampled);
        for (size_t k = 0; k < nvec; k++) found |= _mm512_mask_cmpeq_epi32_mask(live[k], a[k], want);
    }
    if (!found) return 1;
    for (size_t i = 16; i < len && !rep; i++) {
        __m512i id = _mm512_set1_epi32(row[i]);
        for (size_t k = 0; k < i / 16; k++) rep |= _mm512_cmpeq_epi32_mask(a[k], id);
    }
    return rep != 0;
}
#endif

#ifdef TW_X86_SIMD
/* A support row of 1 to 32 entries with AVX2: whether it lacks `sampled` or repeats an id
   (tw_repeats_avx2; lanes past the row load as id 0, come after the row's and are masked
   off). */
TW_TARGET_AVX2 static int support_row_avx2(const int32_t *row, size_t len, int64_t sampled) {
    __m256i a[4];
    size_t nvec = (len + 7) / 8;
    uint32_t all = tw_load32_avx2(row, len, a), found = 0;
    if (sampled >= INT32_MIN && sampled <= INT32_MAX) {
        __m256i want = _mm256_set1_epi32((int32_t)sampled);
        for (size_t k = 0; k < nvec; k++)
            found |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a[k], want))) << (8 * k);
    }
    return !(found & all) || (tw_repeats_avx2(a, nvec) & all) != 0;
}
#endif

/* Whether an id repeats in a short row: a 256-bit filter of the ids seen so far, a hit
   confirmed by a scan of them (a row of distinct ids costs one filter look-up an id, and
   about one scan a row for the false hits). The filter's hash is fixed: ids chosen to hit
   it cost a scan each, at most TW_SMALL_ROW compares an id, as the vector paths' rows. */
static int small_row_repeats(const int32_t *row, size_t len) {
    uint64_t seen[4] = {0, 0, 0, 0};
    for (size_t j = 0; j < len; j++) {
        unsigned h = ((uint32_t)row[j] * 0x9E3779B1u) >> 24;
        uint64_t bit = UINT64_C(1) << (h & 63);
        if (seen[h >> 6] & bit) {
            for (size_t i = 0; i < j; i++)
                if (row[i] == row[j]) return 1;
        }
        seen[h >> 6] |= bit;
    }
    return 0;
}

ptrdiff_t tw_support_rows(const int32_t *values, const int64_t *offsets, size_t n,
                          const int64_t *sampled, int absent_ok, int *nomem, int path) {
    int32_t *scratch = NULL;
    size_t cap = 0;
    *nomem = 0;
    path = tw_path_resolve(path);
    for (size_t t = 0; t < n; t++) {
        const int32_t *row = values + offsets[t];
        size_t len = (size_t)(offsets[t + 1] - offsets[t]);
        if (len == 0 && absent_ok) continue;
        int bad = len == 0;
#ifdef TW_NEON_SIMD
        if (path == TW_PATH_NEON && !bad && len <= TW_SMALL_ROW) {
            if (support_row_neon(row, len, sampled[t])) { tw_mem_free(scratch); return (ptrdiff_t)t; }
            continue;
        }
#endif
#ifdef TW_X86_SIMD
        if (path == TW_PATH_AVX512 && !bad && len <= TW_SMALL_ROW) {
            if (support_row_avx512(row, len, sampled[t])) { tw_mem_free(scratch); return (ptrdiff_t)t; }
            continue;
        }
        if (path == TW_PATH_AVX2 && !bad && len <= 32) {
            if (support_row_avx2(row, len, sampled[t])) { tw_mem_free(scratch); return (ptrdiff_t)t; }
            continue;
        }
#endif
        if (!bad) {
            int found = 0;
            for (size_t i = 0; i < len; i++)
                if ((int64_t)row[i] == sampled[t]) { found = 1; break; }
            bad = !found;
        }
        if (!bad && len <= TW_SMALL_ROW) {
            bad = small_row_repeats(row, len);
        } else if (!bad) {
            if (cap < len) {
                int32_t *grown = tw_mem_realloc(scratch, len * sizeof(int32_t));
                if (!grown) { tw_mem_free(scratch); *nomem = 1; return (ptrdiff_t)t; }
                scratch = grown;
                cap = len;
            }
            memcpy(scratch, row, len * sizeof(int32_t));
            qsort(scratch, len, sizeof(int32_t), cmp_i32);
            for (size_t i = 1; i < len; i++)
                if (scratch[i] == scratch[i - 1]) { bad = 1; break; }
        }
        if (bad) { tw_mem_free(scratch); return (ptrdiff_t)t; }
    }
    tw_mem_free(scratch);
    return -1;
}

ptrdiff_t tw_i32_negative(const int32_t *v, size_t n) {
    /* blocks as tw_packed_f32_bad's: the sign bits OR-ed without a branch a value (the
       compiler vectorizes it), the first negative value then found in a block that has one */
    for (size_t base = 0; base < n; base += TW_BLOCK) {
        size_t end = n - base < TW_BLOCK ? n : base + TW_BLOCK;
        uint32_t signs = 0;
        for (size_t i = base; i < end; i++) signs |= (uint32_t)v[i];
        if (signs >> 31)
            for (size_t i = base; i < end; i++)
                if (v[i] < 0) return (ptrdiff_t)i;
    }
    return -1;
}

/* One unsigned width of tw_first_at_or_above: each block's comparisons in the values' own
   width OR-ed without a branch (the compiler vectorizes them), the first value at or above the
   limit then found in a block that has one. No value of the width reaches a larger limit. */
#define TW_RANGE_BLOCK 1024
#define TW_FIRST_AT_OR_ABOVE(name, type, widest)                                \
    static ptrdiff_t name(const type *v, size_t n, uint32_t limit) {            \
        if (limit > (widest))                                                   \
            return -1;                                                          \
        const type lim = (type)limit;                                           \
        for (size_t base = 0; base < n; base += TW_RANGE_BLOCK) {               \
            size_t end = n - base < TW_RANGE_BLOCK ? n : base + TW_RANGE_BLOCK; \
            type above = 0;                                                     \
            for (size_t i = base; i < end; i++) above |= (type)(v[i] >= lim);   \
            if (above)                                                          \
                for (size_t i = base; i < end; i++)                             \
                    if (v[i] >= lim) return (ptrdiff_t)i;                       \
        }                                                                       \
        return -1;                                                              \
    }
TW_FIRST_AT_OR_ABOVE(first_at_or_above_u8, uint8_t, UINT8_MAX)
TW_FIRST_AT_OR_ABOVE(first_at_or_above_u16, uint16_t, UINT16_MAX)
TW_FIRST_AT_OR_ABOVE(first_at_or_above_u32, uint32_t, UINT32_MAX)
#undef TW_FIRST_AT_OR_ABOVE

ptrdiff_t tw_first_at_or_above(const void *v, size_t n, size_t width, uint32_t limit) {
    switch (width) {
    case 1: return first_at_or_above_u8((const uint8_t *)v, n, limit);
    case 2: return first_at_or_above_u16((const uint16_t *)v, n, limit);
    case 4: return first_at_or_above_u32((const uint32_t *)v, n, limit);
    default: return -1;
    }
}

int64_t tw_routed_rows(int64_t n, int64_t prompt, int64_t start) {
    int64_t rows;
    if (n < 0 || prompt < 0 || start < 0 || n > TW_ROUTED_ROWS_MAX || prompt > TW_ROUTED_ROWS_MAX ||
        start > TW_ROUTED_ROWS_MAX)
        return -1;
    rows = prompt + n - 1 - start; /* no overflow: each term at most 2^61 */
    return rows > 0 ? rows : 0;
}

ptrdiff_t tw_offsets_not_rising(const int64_t *v, size_t n) {
    if (n && v[0] != 0) return 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] <= v[i - 1]) return (ptrdiff_t)i;
    return -1;
}
