#include "tw_validate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ptrdiff_t tw_packed_f32_bad(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = v[i];
        /* NaN fails the comparison; +inf is caught by isfinite, -inf by the sentinel bound. */
        if (!(x > (float)TW_SENTINEL) || !isfinite(x)) return (ptrdiff_t)i;
    }
    return -1;
}

ptrdiff_t tw_packed_f64_bad(const double *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = v[i];
        if (!(x > TW_SENTINEL) || !isfinite(x)) return (ptrdiff_t)i;
    }
    return -1;
}

ptrdiff_t tw_compact_values_bad(const float *v, size_t n) {
    /* Compared in double, as the reference compares numpy float32 against 1e-6. */
    for (size_t i = 0; i < n; i++) {
        float x = v[i];
        if (!isfinite(x) || (double)x > 1e-6) return (ptrdiff_t)i;
    }
    return -1;
}

typedef struct {
    uint32_t id;
    uint32_t pos;
    float val;
} tw_item;

static int cmp_item(const void *a, const void *b) {
    const tw_item *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : (x->pos > y->pos);
}

/* Rows longer than this are checked by sorting a copy instead of pairwise. */
#define TW_SMALL_ROW 48

static int row_check(const uint32_t *ids, const float *vals, size_t len, uint32_t sampled,
                     int sampled_ok, float *out, tw_item **scratch, size_t *cap) {
    int found = 0;
    float value = 0.0f;
    if (len <= TW_SMALL_ROW) {
        for (size_t j = 1; j < len; j++)
            for (size_t i = 0; i < j; i++)
                if (ids[i] == ids[j] && vals[i] != vals[j]) return TW_ROW_REPEAT_DISAGREE;
    } else {
        if (*cap < len) {
            tw_item *grown = realloc(*scratch, len * sizeof(tw_item));
            if (!grown) return TW_ROW_NOMEM;
            *scratch = grown;
            *cap = len;
        }
        tw_item *items = *scratch;
        for (size_t i = 0; i < len; i++) {
            items[i].id = ids[i];
            items[i].pos = (uint32_t)i;
            items[i].val = vals[i];
        }
        qsort(items, len, sizeof(tw_item), cmp_item);
        for (size_t i = 1; i < len; i++)
            if (items[i].id == items[i - 1].id && items[i].val != items[i - 1].val)
                return TW_ROW_REPEAT_DISAGREE;
    }
    if (sampled_ok) {
        for (size_t i = 0; i < len; i++) {
            if (ids[i] == sampled) {
                found = 1;
                value = vals[i]; /* all occurrences agree (checked above) */
                break;
            }
        }
    }
    if (!found || value == (float)TW_SENTINEL) return TW_ROW_MISSING_SAMPLED;
    *out = value;
    return TW_ROW_OK;
}

ptrdiff_t tw_compact_rows(const uint32_t *ids, const float *vals, const int64_t *offsets,
                          size_t n, const int64_t *sampled, float *out, int *kind) {
    tw_item *scratch = NULL;
    size_t cap = 0;
    for (size_t t = 0; t < n; t++) {
        size_t start = (size_t)offsets[t], end = (size_t)offsets[t + 1];
        int64_t s = sampled[t];
        int ok = s >= 0 && s <= (int64_t)UINT32_MAX;
        int r = row_check(ids + start, vals + start, end - start, (uint32_t)s, ok, out + t,
                          &scratch, &cap);
        if (r != TW_ROW_OK) {
            free(scratch);
            *kind = r;
            return (ptrdiff_t)t;
        }
    }
    free(scratch);
    *kind = TW_ROW_OK;
    return -1;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

ptrdiff_t tw_support_rows(const int32_t *values, const int64_t *offsets, size_t n,
                          const int64_t *sampled, int *nomem) {
    int32_t *scratch = NULL;
    size_t cap = 0;
    *nomem = 0;
    for (size_t t = 0; t < n; t++) {
        const int32_t *row = values + offsets[t];
        size_t len = (size_t)(offsets[t + 1] - offsets[t]);
        int bad = len == 0;
        if (!bad) {
            int found = 0;
            for (size_t i = 0; i < len; i++)
                if ((int64_t)row[i] == sampled[t]) { found = 1; break; }
            bad = !found;
        }
        if (!bad && len <= TW_SMALL_ROW) {
            for (size_t j = 1; j < len && !bad; j++)
                for (size_t i = 0; i < j; i++)
                    if (row[i] == row[j]) { bad = 1; break; }
        } else if (!bad) {
            if (cap < len) {
                int32_t *grown = realloc(scratch, len * sizeof(int32_t));
                if (!grown) { free(scratch); *nomem = 1; return (ptrdiff_t)t; }
                scratch = grown;
                cap = len;
            }
            memcpy(scratch, row, len * sizeof(int32_t));
            qsort(scratch, len, sizeof(int32_t), cmp_i32);
            for (size_t i = 1; i < len; i++)
                if (scratch[i] == scratch[i - 1]) { bad = 1; break; }
        }
        if (bad) { free(scratch); return (ptrdiff_t)t; }
    }
    free(scratch);
    return -1;
}

ptrdiff_t tw_i32_negative(const int32_t *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0) return (ptrdiff_t)i;
    return -1;
}
