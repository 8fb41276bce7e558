/*
 * tw_records_rows - the OpenAI-compatible records and rows, and SGLang's triples, read from
 * the raw bytes (see tw_records.h): the flat arrays of the completions format
 * (tw_rec_numbers, tw_rec_token_strings), the chat format's logprobs.content entries
 * (tw_rec_entries), SGLang's [logprob, token_id(, text)] triples (tw_rec_triples), and the
 * rows of candidates read for heads: SGLang's (tw_rec_triple_heads) and the completions
 * format's {"token_id:N": logprob} objects (tw_rec_keyed_heads).
 */
#include "wire/tw_records_internal.h"

/* ------------------------------------------------------------------------ */
/* Flat arrays of the OpenAI-compatible completions format                   */
/* ------------------------------------------------------------------------ */

ptrdiff_t tw_rec_numbers(const char *buf, const tw_value *arr, double *out, int path)
{
    int simd;
    const uint8_t *e = NULL, *p = twr_array_begin(buf, arr, path, &e, &simd);
    size_t i = 0;
    if (!p)
        return 0;
    while (p < e && *p != ']') {
        int is_int;
        if (*p != '-' && !tw_is_digit(*p))
            return (ptrdiff_t)i;
        p = twr_array_next(tw_number_read(p, e, &out[i++], &is_int, simd), e);
    }
    return -1;
}

size_t tw_rec_token_strings(const char *buf, const tw_value *arr, int64_t *ids, int path)
{
    int simd;
    const uint8_t *e = NULL, *p = twr_array_begin(buf, arr, path, &e, &simd);
    size_t i = 0, named = 0;
    if (!p)
        return 0;
    while (p < e && *p != ']') {
        int64_t id = -1;
        if (*p == '"')
            p = twr_token(p + 1, e, &id, simd);
        else
            p = twj_skip_value(p, e, simd);
        ids[i++] = id;
        named += id >= 0;
        p = twr_array_next(p, e);
    }
    return named;
}

ptrdiff_t tw_rec_entries(const char *buf, const tw_value *content, int64_t *ids,
                            double *lp, uint8_t *lp_kind, double *slp, uint8_t *slp_kind,
                            int path)
{
    int simd;
    const uint8_t *e = NULL, *p = twr_array_begin(buf, content, path, &e, &simd);
    twr_ctx x;
    size_t i = 0;
    if (!p)
        return 0;
    twr_ctx_init(&x, e, simd, NULL);
    while (p < e && *p != ']') {
        twr_obj o;
        if (*p != '{')
            return (ptrdiff_t)i;
        p = tw_rec_object(&x, p, &o, NULL);
        ids[i] = twr_obj_id(&o);
        lp[i] = o.lp;
        lp_kind[i] = o.lp_kind;
        slp[i] = o.slp;
        slp_kind[i] = o.slp_kind;
        i++;
        p = twr_array_next(p, e);
    }
    return -1;
}

ptrdiff_t tw_rec_triples(const char *buf, const tw_value *arr, int64_t *ids, double *values,
                            uint8_t *kinds, int path)
{
    int simd;
    const uint8_t *e = NULL, *p = twr_array_begin(buf, arr, path, &e, &simd);
    size_t i = 0;
    if (!p)
        return 0;
    while (p < e && *p != ']') {
        size_t n = 0;
        int is_int;
        if (*p != '[')
            return (ptrdiff_t)i;
        ids[i] = -1;
        values[i] = 0.0;
        kinds[i] = TW_REC_V_MISSING;
        p = twj_ws(p + 1, e);
        while (p < e && *p != ']') {
            if (n == 0) {
                kinds[i] = twr_kind(*p);
                if (kinds[i] == TW_REC_V_NUMBER)
                    p = tw_number_read(p, e, &values[i], &is_int, simd);
                else
                    p = twj_skip_value(p, e, simd);
            } else if (n == 1) {
                p = twr_token_id(p, e, &ids[i], simd);
            } else {
                p = twj_skip_value(p, e, simd);
            }
            n++;
            p = twr_array_next(p, e);
        }
        if (n < 2 || n > 3)
            return (ptrdiff_t)i;
        i++;
        p = twr_array_next(p < e ? p + 1 : e, e);
    }
    return -1;
}

/* The candidates x->c[k0..end) of one row, in order: a logprob that is not
   finite (NaN: not a number), one > 1e-6, an id listed before; *code the
   first failure (left as is when none).  -1 when out of memory, else 0. */
static int twr_check_row(twr_ctx *x, size_t k0, size_t end, int *code)
{
    twr_seen_set seen;
    twr_seen_init(&seen);
    for (size_t j = k0; j < end; j++) {
        double lp = x->c->lps[j];
        int dup;
        if (!isfinite(lp)) {
            *code = TW_REC_TOP_NOT_FINITE;
            return 0;
        }
        if (lp > 1e-6) {
            *code = TW_REC_TOP_POSITIVE;
            return 0;
        }
        dup = tw_rec_seen(x, &seen, k0, j, x->c->ids[j]);
        if (dup < 0)
            return -1;
        if (dup) {
            *code = TW_REC_TOP_DUPLICATE;
            return 0;
        }
    }
    return 0;
}

/* p at the '[' of one row of [logprob, token_id(, text)] candidates: append
   them from k (ids, logprobs; NaN for a logprob that is not a number) and
   return the position after the row, *k the new end and *code
   TW_REC_TOP_NO_ID when an element is not such an array or names no id. */
static const uint8_t *twr_triple_row(twr_ctx *x, const uint8_t *p, size_t *k, int *code)
{
    const uint8_t *e = x->e;
    p = twj_ws(p + 1, e);
    while (p < e && *p != ']') {
        size_t n = 0;
        int is_int;
        int64_t id = -1;
        double value = NAN;
        if (*p != '[') {
            *code = TW_REC_TOP_NO_ID;
            return twj_skip_container(p, e, NULL, x->simd);
        }
        p = twj_ws(p + 1, e);
        while (p < e && *p != ']') {
            if (n == 0 && twr_kind(*p) == TW_REC_V_NUMBER)
                p = tw_number_read(p, e, &value, &is_int, x->simd);
            else if (n == 1)
                p = twr_token_id(p, e, &id, x->simd);
            else
                p = twj_skip_value(p, e, x->simd);
            n++;
            p = twr_array_next(p, e);
        }
        if (n < 2 || n > 3 || id < 0) {
            *code = TW_REC_TOP_NO_ID;
            return twj_skip_container(p < e ? p + 1 : e, e, NULL, x->simd);
        }
        if (!twr_room(x, *k))
            return e;
        x->c->ids[*k] = id;
        x->c->lps[*k] = value;
        (*k)++;
        p = twr_array_next(p < e ? p + 1 : e, e);
    }
    return p < e ? p + 1 : e;
}

/* Reads one non-empty row of candidates (p at its opening bracket): appends
   them from *k and returns the position after the row; *code a bad shape. */
typedef const uint8_t *(*twr_row_reader)(twr_ctx *x, const uint8_t *p, size_t *k, int *code);

/* The rows of arr (arr->count == n) read for heads: a row that is not a
   non-empty container opened by `open` is TW_REC_MISSING_TOP, else `read`
   takes its shape whole, then twr_check_row its candidates in order; the
   first failing row ends the pass (res->top_err / top_code; the rows after
   it get no candidates). */
static int twr_head_rows(const char *buf, const tw_value *arr, size_t n, int64_t *coff,
                         tw_rec_cands *cands, tw_rec_result *res, uint8_t open,
                         twr_row_reader read, int simd)
{
    const uint8_t *p, *e;
    const uint8_t close = open == '[' ? ']' : '}';
    twr_ctx x;
    size_t k = 0, i;
    int rc = TW_REC_OK;

    twr_result_init(res);
    if (!twr_content_ok(arr) || arr->count != n || !coff || !cands)
        return TW_REC_BAD_ARG;
    p = (const uint8_t *)buf + arr->start + 1;
    e = (const uint8_t *)buf + arr->end;
    twr_ctx_init(&x, e, simd, cands);
    coff[0] = 0;
    for (i = 0; i < n; i++) {
        int code = TW_REC_OK;
        size_t end = k;
        const uint8_t *q;
        p = twj_ws(p, e);
        if (p >= e) {
            rc = TW_REC_BAD_ARG;
            break;
        }
        q = *p == open ? twj_ws(p + 1, e) : e;
        if (q >= e || *q == close) {
            code = TW_REC_MISSING_TOP;
        } else {
            p = read(&x, p, &end, &code);
            if (x.nomem || (code == TW_REC_OK && twr_check_row(&x, k, end, &code) < 0)) {
                rc = TW_REC_NOMEM;
                break;
            }
        }
        if (code != TW_REC_OK) {
            res->top_err = (ptrdiff_t)i;
            res->top_code = code;
            for (size_t j = i + 1; j <= n; j++)
                coff[j] = (int64_t)k;
            break;
        }
        k = end;
        coff[i + 1] = (int64_t)k;
        p = twr_array_next(p, e);
    }
    tw_mem_free(x.ht);
    res->ncand = k;
    return rc;
}

int tw_rec_triple_heads(const char *buf, const tw_value *arr, size_t n, int64_t *coff,
                           tw_rec_cands *cands, tw_rec_result *res, int path)
{
    const int simd = tw_path_resolve(path) != TW_PATH_SCALAR;
    return twr_head_rows(buf, arr, n, coff, cands, res, '[', twr_triple_row, simd);
}

typedef struct {
    const uint8_t *s;
    size_t n;
} twr_span;

/* Pass 1 of tw_rec_keyed_heads over row i (p at its '{'): whether a key
   repeats an earlier key of the row (1, with its span), holds an escape (2),
   or neither (0); -1 when out of memory.  The keys go in an open-addressing
   table slotted by the keyed string hash (tw_hash.h), so a row's keys cannot
   be chosen to share a cluster.  *keys / *slots are scratch that grows, freed
   by the caller. */
static int twr_row_repeats(const uint8_t *p, const uint8_t *e, twr_span **keys, size_t *kcap,
                           uint32_t **slots, size_t *scap, twr_span *rep, int simd)
{
    size_t nk = 0;
    p = twj_ws(p + 1, e);
    /* the keys first (the document is valid JSON: key, ':', value, ...) */
    while (p < e && *p == '"') {
        const uint8_t *ks = p + 1, *end = twj_skip_string(ks, e, simd);
        size_t n = (size_t)(end - 1 - ks);
        if (memchr(ks, '\\', n))
            return 2;
        if (nk == *kcap) {
            size_t ncap = *kcap ? 2 * *kcap : 64;
            void *q = tw_mem_realloc(*keys, ncap * sizeof(twr_span));
            if (!q)
                return -1;
            *keys = (twr_span *)q;
            *kcap = ncap;
        }
        (*keys)[nk].s = ks;
        (*keys)[nk].n = n;
        nk++;
        p = twj_ws(end, e);
        p = twj_ws(p + 1, e); /* past ':' */
        p = twj_ws(twj_skip_value(p, e, simd), e);
        if (p < e && *p == ',')
            p = twj_ws(p + 1, e);
    }
    if (nk < 2)
        return 0;
    {
        size_t size = 16, mask;
        while (size < 2 * nk)
            size *= 2;
        if (size > *scap) {
            void *q = tw_mem_realloc(*slots, size * sizeof(uint32_t));
            if (!q)
                return -1;
            *slots = (uint32_t *)q;
            *scap = size;
        }
        memset(*slots, 0, size * sizeof(uint32_t));
        mask = size - 1;
        for (size_t j = 0; j < nk; j++) {
            const twr_span *kj = &(*keys)[j];
            size_t at = (size_t)tw_hash_bytes(kj->s, kj->n) & mask;
            while ((*slots)[at]) {
                const twr_span *ki = &(*keys)[(*slots)[at] - 1];
                if (ki->n == kj->n && memcmp(ki->s, kj->s, kj->n) == 0) {
                    *rep = *kj;
                    return 1;
                }
                at = (at + 1) & mask;
            }
            (*slots)[at] = (uint32_t)(j + 1);
        }
    }
    return 0;
}

/* One {"token_id:N": logprob, ...} row (p at its '{'): every key's id
   (TW_REC_TOP_NO_ID for one that names none) and logprob (NaN for one
   that is not a number) appended from *k. */
static const uint8_t *twr_keyed_row(twr_ctx *x, const uint8_t *p, size_t *k, int *code)
{
    const uint8_t *e = x->e;
    p = twj_ws(p + 1, e);
    while (p < e && *p == '"') {
        int64_t id = -1;
        double value = NAN;
        int is_int;
        p = twj_ws(twr_token(p + 1, e, &id, x->simd), e);
        p = twj_ws(p + 1, e); /* past ':' */
        if (twr_kind(*p) == TW_REC_V_NUMBER)
            p = tw_number_read(p, e, &value, &is_int, x->simd);
        else
            p = twj_skip_value(p, e, x->simd);
        if (id < 0)
            *code = TW_REC_TOP_NO_ID;
        if (!twr_room(x, *k))
            return e;
        x->c->ids[*k] = id;
        x->c->lps[*k] = value;
        (*k)++;
        p = twj_ws(p, e);
        if (p < e && *p == ',')
            p = twj_ws(p + 1, e);
    }
    return p < e ? p + 1 : e; /* past '}' */
}

int tw_rec_keyed_heads(const char *buf, const tw_value *arr, size_t n, int64_t *coff,
                          tw_rec_cands *cands, tw_rec_result *res, tw_rec_repeat *rep,
                          int path)
{
    const int simd = tw_path_resolve(path) != TW_PATH_SCALAR;
    const uint8_t *p, *e;
    twr_span *keys = NULL;
    uint32_t *slots = NULL;
    size_t kcap = 0, scap = 0, i;
    int rc = TW_REC_OK;

    twr_result_init(res);
    rep->row = -1;
    rep->start = rep->end = 0;
    rep->escaped = 0;
    if (!twr_content_ok(arr) || arr->count != n || !coff || !cands)
        return TW_REC_BAD_ARG;
    e = (const uint8_t *)buf + arr->end;
    coff[0] = 0;

    /* Pass 1: the first row that repeats a key, before any other rule. */
    p = twj_ws((const uint8_t *)buf + arr->start + 1, e);
    for (i = 0; i < n && p < e; i++) {
        if (*p == '{') {
            twr_span r;
            int got = twr_row_repeats(p, e, &keys, &kcap, &slots, &scap, &r, simd);
            if (got < 0) {
                rc = TW_REC_NOMEM;
                break;
            }
            if (got == 2) {
                rep->escaped = 1;
                break;
            }
            if (got == 1) {
                rep->row = (ptrdiff_t)i;
                rep->start = (size_t)(r.s - (const uint8_t *)buf);
                rep->end = rep->start + r.n;
                break;
            }
        }
        p = twr_array_next(twj_skip_value(p, e, simd), e);
    }
    tw_mem_free(keys);
    tw_mem_free(slots);
    if (rc != TW_REC_OK || rep->escaped || rep->row >= 0) {
        for (size_t j = 1; j <= n; j++)
            coff[j] = 0;
        return rc;
    }

    /* Then each row's keys whole (ids), then its candidates in order. */
    return twr_head_rows(buf, arr, n, coff, cands, res, '{', twr_keyed_row, simd);
}