/*
 * Ranking heads by (value desc, id asc) (tw_heads_internal.h: better): tw_rank_top for the
 * heads tw_select_heads cannot take in engine order, tw_sort_head for those tw_compact_heads
 * holds in registers.
 */
#include "rules/tw_heads_internal.h"

/* insertion_sort and sift_worst are inline: tw_rank_top's loops are their only callers. */
static inline void insertion_sort(int64_t *id, double *v, size_t m) {
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
static inline void sift_worst(int64_t *id, double *v, size_t h, size_t i) {
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
void tw_rank_top(int64_t *id, double *v, size_t m, size_t need) {
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

#ifdef TW_X86_SIMD
/* n ids and their values in insertion_sort's order (value descending, then id ascending),
   in place. */
void tw_sort_head(uint32_t *id, float *val, unsigned n) {
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
#endif
