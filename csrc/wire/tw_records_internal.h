/*
 * tw_records_internal - what the files of the record readers share; no public API (that is
 * tw_records.h). The files:
 *
 *   tw_records.c       vLLM's logprobs.content: tw_rec_count, tw_rec_parse, and the same
 *                      walk over bytes not validated yet, run during the scan
 *                      (tw_rec_content_reader, tw_rec_take); the entry and candidate objects
 *                      (tw_rec_object) and the duplicate-id set of a row (tw_rec_seen)
 *   tw_records_rows.c  the OpenAI-compatible records and rows (tw_rec_numbers,
 *                      tw_rec_token_strings, tw_rec_entries, tw_rec_keyed_heads) and SGLang's
 *                      triples (tw_rec_triples, tw_rec_triple_heads)
 *
 * Here: keys and ids as the readers decode them, the fields of an entry or candidate object,
 * the candidate storage, and the walk over a recorded array. What the hot loops call per key,
 * per value or per candidate is static inline; the functions declared here have external
 * linkage, hidden from the shared library where the compiler can say so. Numbers are
 * converted by tw_number.c; values of no interest are skipped with tw_json.h.
 */
#ifndef TW_RECORDS_INTERNAL_H
#define TW_RECORDS_INTERNAL_H

#include "wire/tw_records.h"
#include "base/tw_cpu.h"
#include "base/tw_hash.h"
#include "json/tw_json.h"
#include "base/tw_mem.h"
#include "codecs/tw_number.h"
#include "base/tw_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Keys and ids                                                              */
/* ------------------------------------------------------------------------ */

enum { TWR_K_OTHER, TWR_K_TOKEN, TWR_K_TOKEN_ID, TWR_K_LOGPROB, TWR_K_TOP, TWR_K_SLP, TWR_K_ID };

static inline int twr_classify(const uint8_t *s, size_t n)
{
    switch (n) {
    case 2: /* llama.cpp's records name their token by "id" */
        return memcmp(s, "id", 2) == 0 ? TWR_K_ID : TWR_K_OTHER;
    case 5:
        return memcmp(s, "token", 5) == 0 ? TWR_K_TOKEN : TWR_K_OTHER;
    case 7:
        return memcmp(s, "logprob", 7) == 0 ? TWR_K_LOGPROB : TWR_K_OTHER;
    case 8:
        return memcmp(s, "token_id", 8) == 0 ? TWR_K_TOKEN_ID : TWR_K_OTHER;
    case 12:
        return memcmp(s, "top_logprobs", 12) == 0 ? TWR_K_TOP : TWR_K_OTHER;
    case 16:
        return memcmp(s, "sampling_logprob", 16) == 0 ? TWR_K_SLP : TWR_K_OTHER;
    default:
        return TWR_K_OTHER;
    }
}

/* p just after the opening quote of a key: the position after its closing
   quote with *kind its class when the key is one of the usual ones (read 8
   bytes at a time; their text is printable ASCII, a valid string), else NULL. */
static inline const uint8_t *twr_usual_key(const uint8_t *p, const uint8_t *e, int *kind)
{
    if (TW_LIKELY(e - p >= 16)) {
        const uint64_t m48 = (UINT64_C(1) << 48) - 1, m40 = (UINT64_C(1) << 40) - 1;
        uint64_t a = tw_load_le64(p);
        if ((a & m48) == (tw_load_le64((const uint8_t *)"token\"\0") & m48)) {
            *kind = TWR_K_TOKEN;
            return p + 6;
        }
        if (a == tw_load_le64((const uint8_t *)"logprob\"")) {
            *kind = TWR_K_LOGPROB;
            return p + 8;
        }
        if ((a & m48) == (tw_load_le64((const uint8_t *)"bytes\"\0") & m48)) {
            *kind = TWR_K_OTHER;
            return p + 6;
        }
        if (a == tw_load_le64((const uint8_t *)"top_logp") &&
            (tw_load_le64(p + 8) & m40) == (tw_load_le64((const uint8_t *)"robs\"\0\0\0") & m40)) {
            *kind = TWR_K_TOP;
            return p + 13;
        }
        if (a == tw_load_le64((const uint8_t *)"token_id") && p[8] == '"') {
            *kind = TWR_K_TOKEN_ID;
            return p + 9;
        }
    }
    return NULL;
}

/* p just after the opening quote of a key: the position after its closing
   quote, *kind its class. */
static inline const uint8_t *twr_key(const uint8_t *p, const uint8_t *e, int *kind, int simd)
{
    const uint8_t *r, *end;
    uint8_t tmp[17];
    size_t n = 0;
    r = twr_usual_key(p, e, kind);
    if (r)
        return r;
    r = twj_find_qb(p, e, simd);
    if (TW_LIKELY(r < e && *r == '"')) {
        *kind = twr_classify(p, (size_t)(r - p));
        return r + 1;
    }
    /* escapes: decode (ASCII only, at most 16 characters can match) */
    end = twj_skip_string(p, e, simd);
    *kind = TWR_K_OTHER;
    if (end <= p)
        return end;
    {
        const uint8_t *s = p, *se = end - 1;
        while (s < se) {
            uint32_t c = twj_next_char(&s, se);
            if (c >= 0x80 || n == sizeof tmp)
                return end;
            tmp[n++] = (uint8_t)c;
        }
    }
    *kind = twr_classify(tmp, n);
    return end;
}

#define TWR_MAX_ID UINT64_C(0xFFFFFFFF)
static const char TWR_TOKEN_PREFIX[] = "token_id:";

/* Id named by the token string body [s, se) without escapes, or -1. */
static inline int64_t twr_token_raw(const uint8_t *s, const uint8_t *se)
{
    uint64_t v = 0;
    if (se - s < 10 || memcmp(s, TWR_TOKEN_PREFIX, 9) != 0)
        return -1;
    for (s += 9; s < se; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (d >= 10u)
            return -1;
        v = v * 10 + d;
        if (v > TWR_MAX_ID)
            break;
    }
    for (; s < se; s++) /* too large: still all digits? either way no id */
        if (!tw_is_digit(*s))
            return -1;
    return v > TWR_MAX_ID ? -1 : (int64_t)v;
}

/* Same with escapes decoded. */
static inline int64_t twr_token_escaped(const uint8_t *s, const uint8_t *se)
{
    uint64_t v = 0;
    size_t i = 0;
    while (s < se) {
        uint32_t c = twj_next_char(&s, se);
        if (i < 9) {
            if (c != (uint8_t)TWR_TOKEN_PREFIX[i])
                return -1;
        } else {
            if (c - '0' >= 10u)
                return -1;
            if (v <= TWR_MAX_ID)
                v = v * 10 + (c - '0');
        }
        i++;
    }
    return i < 10 || v > TWR_MAX_ID ? -1 : (int64_t)v;
}

/* p just after the opening quote of a "token" value: the position after
   the closing quote, *id the id it names or -1. */
static inline const uint8_t *twr_token(const uint8_t *p, const uint8_t *e, int64_t *id, int simd)
{
    const uint8_t *r, *end;
    if (TW_LIKELY(e - p >= 24) && tw_load_le64(p) == tw_load_le64((const uint8_t *)"token_id") &&
        p[8] == ':') {
        /* "token_id:" and 1..7 digits then the closing quote */
        uint64_t x = tw_load_le64(p + 9);
        uint64_t nd = tw_nondigit8(x);
        if (nd) {
            unsigned d = tw_ctz64(nd) / 8; /* first non-digit */
            if (d && p[9 + d] == '"') {
                *id = (int64_t)tw_short_digits(p + 9, d);
                return p + 10 + d;
            }
        }
    }
    r = twj_find_qb(p, e, simd);
    if (TW_LIKELY(r < e && *r == '"')) {
        *id = twr_token_raw(p, r);
        return r + 1;
    }
    end = twj_skip_string(p, e, simd);
    *id = end > p ? twr_token_escaped(p, end - 1) : -1;
    return end;
}

/* The id an integer literal [s, d) names (in [0, 2^32); "-0" is 0), or -1. */
static inline int64_t twr_int_id(const uint8_t *s, const uint8_t *d)
{
    int neg = *s == '-';
    uint64_t v = 0;
    s += neg;
    if (d - s > 10)
        return -1;
    for (; s < d; s++)
        v = v * 10 + (uint64_t)(*s - '0');
    return v <= TWR_MAX_ID && !(neg && v) ? (int64_t)v : -1;
}

/* p at a "token_id" value: the position after it, *id the id (an integer
   literal in [0, 2^32); "-0" is 0) or -1. */
static inline const uint8_t *twr_token_id(const uint8_t *p, const uint8_t *e, int64_t *id, int simd)
{
    const uint8_t *s = p + (*p == '-'), *d;
    *id = -1;
    if (s >= e || !tw_is_digit(*s))
        return twj_skip_value(p, e, simd);
    d = tw_digits(s, e, simd);
    if (d < e && (*d == '.' || (*d | 0x20) == 'e'))
        return twj_skip_value(p, e, simd); /* a float */
    *id = twr_int_id(p, d);
    return d;
}

/* ------------------------------------------------------------------------ */
/* Objects                                                                   */
/* ------------------------------------------------------------------------ */

/* Fields of one entry or candidate object (last occurrence of each key). */
typedef struct {
    int64_t tid, tok, iid; /* id from "token_id" / "token" / "id", -1 if not an id */
    double lp, slp;        /* "logprob", "sampling_logprob" */
    uint8_t has_tid, has_iid, lp_ok;
    uint8_t lp_kind, slp_kind; /* TW_REC_V_* of those values */
} twr_obj;

/* p at a value: its TW_REC_V_* class (a number is read by the caller). */
static inline uint8_t twr_kind(uint8_t c)
{
    switch (c) {
    case 'n': return TW_REC_V_NULL;
    case '"': return TW_REC_V_STRING;
    case 't': case 'f': return TW_REC_V_BOOL;
    case '[': return TW_REC_V_ARRAY;
    case '{': return TW_REC_V_OBJECT;
    default: return TW_REC_V_NUMBER;
    }
}

/* The candidates of one entry: written from k0; code is the entry's
   candidates verdict (TW_REC_MISSING_TOP until an array is read). */
typedef struct {
    size_t k0, k;
    int code;
} twr_top;

typedef struct {
    const uint8_t *e;
    tw_rec_cands *c;
    uint64_t *ht; /* duplicate-id table for long candidate lists */
    size_t ht_alloc;
    int nomem;
    int simd; /* 0 on TW_PATH_SCALAR, 1 on the SIMD paths */
} twr_ctx;

/* A reading context: the text ends at e, candidates go to c; the rest starts at zero. */
static inline void twr_ctx_init(twr_ctx *x, const uint8_t *e, int simd, tw_rec_cands *c)
{
    memset(x, 0, sizeof *x);
    x->e = e;
    x->simd = simd;
    x->c = c;
}

/* Room for candidate k in x->c (grown when it may be): 1, or 0 with x->nomem set. */
static inline int twr_room(twr_ctx *x, size_t k)
{
    tw_rec_cands *c = x->c;
    size_t ncap;
    void *q;
    if (k < c->cap)
        return 1;
    if (!c->grow) {
        x->nomem = 1;
        return 0;
    }
    ncap = c->cap < 1024 ? 1024 : c->cap;
    while (ncap <= k) {
        if (ncap > SIZE_MAX / 2 / sizeof(double)) {
            x->nomem = 1;
            return 0;
        }
        ncap *= 2;
    }
    q = tw_mem_realloc(c->ids, ncap * sizeof(int64_t));
    if (!q) {
        x->nomem = 1;
        return 0;
    }
    c->ids = (int64_t *)q;
    q = tw_mem_realloc(c->lps, ncap * sizeof(double));
    if (!q) {
        x->nomem = 1;
        return 0;
    }
    c->lps = (double *)q;
    c->cap = ncap;
    return 1;
}

/* The id an entry or candidate names: its last "token_id" when it has one, else its last
   "id" (llama.cpp's records), else the id its "token" names; -1 for none. */
static inline int64_t twr_obj_id(const twr_obj *o)
{
    return o->has_tid ? o->tid : o->has_iid ? o->iid : o->tok;
}

/* Duplicate ids within one row of candidates ids[k0..k). */
typedef struct {
    uint64_t bloom[4];
    size_t mask;
    unsigned bits;
} twr_seen_set;

static inline void twr_seen_init(twr_seen_set *s)
{
    memset(s, 0, sizeof *s);
}

/* Whether id is among x->c->ids[k0..k), remembering it when it is not (tw_records.c).
   1: seen, 0: new, -1: out of memory. */
TW_INTERNAL int tw_rec_seen(twr_ctx *x, twr_seen_set *s, size_t k0, size_t k, int64_t id);

/* p at the '{' of an object of bytes tw_scan validated: its fields into o (and, with top,
   its "top_logprobs" into top); the position after the '}' (tw_records.c). */
TW_INTERNAL const uint8_t *tw_rec_object(twr_ctx *x, const uint8_t *p, twr_obj *o, twr_top *top);

/* ------------------------------------------------------------------------ */
/* Recorded arrays                                                           */
/* ------------------------------------------------------------------------ */

static inline int twr_content_ok(const tw_value *v)
{
    return v && v->present && v->type == TW_T_ARRAY && v->end - v->start >= 2;
}

/* The first element of the recorded array arr (or its ']'), NULL if arr is
   not an array; *e gets the end of its text, *simd the kernels for `path`. */
static inline const uint8_t *twr_array_begin(const char *buf, const tw_value *arr, int path,
                                             const uint8_t **e, int *simd)
{
    *simd = tw_path_resolve(path) != TW_PATH_SCALAR;
    if (!twr_content_ok(arr))
        return NULL;
    *e = (const uint8_t *)buf + arr->end;
    return twj_ws((const uint8_t *)buf + arr->start + 1, *e);
}

/* p just after an element: the next element (or the closing ']'). */
static inline const uint8_t *twr_array_next(const uint8_t *p, const uint8_t *e)
{
    p = twj_ws(p, e);
    if (p < e && *p == ',')
        p = twj_ws(p + 1, e);
    return p;
}

/* No failure yet, no candidates. */
static inline void twr_result_init(tw_rec_result *res)
{
    res->sampled_err = -1;
    res->sampled_code = TW_REC_OK;
    res->top_err = -1;
    res->top_code = TW_REC_OK;
    res->ncand = 0;
}

#endif /* TW_RECORDS_INTERNAL_H */
