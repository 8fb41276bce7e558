/*
 * tw_records - per-token JSON records read from the raw bytes.
 * See tw_records.h for the contract.
 *
 * Layout: a forward-only walk over the validated content array.  Each
 * element object is read key by key (the key is classified by length and
 * bytes; "token", "token_id", "logprob" and "top_logprobs" are decoded, any
 * other value is skipped with tw_json.h's bracket/string-aware scan),
 * keeping the last occurrence of every key; the top_logprobs array of an
 * entry is decoded while it is read, and read again from scratch if the key
 * repeats.  Numbers are converted by tw_number.c.
 *
 * tw_rec_content_reader is the same walk over bytes not yet validated, run
 * by tw_scan in place of its own pass over a logprobs.content array: it
 * checks every byte as the scan would and stores each entry's fields and
 * candidates in the tw_doc, from which tw_rec_take answers as tw_rec_parse
 * would; the document is then walked once instead of twice.  A record in the exact
 * layout vLLM writes when ids name the tokens and no alternatives are asked for is read there
 * without the key-by-key walk (twf_vllm_record), any other the general way.
 *
 * The keys, ids and objects' fields the readers share are in
 * tw_records_internal.h; the OpenAI-compatible and SGLang readers in
 * tw_records_rows.c.
 */
#include "wire/tw_records_internal.h"

/* ------------------------------------------------------------------------ */
/* Objects                                                                   */
/* ------------------------------------------------------------------------ */

#define TWR_LINEAR 64 /* candidates per entry checked with the bloom + scan */

/* The bloom filter's hash (tw_rec_seen): fixed, as the filter is only asked about the first
   TWR_LINEAR candidates of an entry; ids chosen to hit it cost at most TWR_LINEAR compares
   each. */
static inline unsigned twr_bloom_hash(int64_t id)
{
    return (unsigned)(((uint64_t)id * UINT64_C(0x9E3779B97F4A7C15)) >> 56);
}

/* The slot of a candidate id (0 .. TWR_MAX_ID, as every reader returns) in a table of 2^bits:
   the keyed hash (tw_hash.h), so an entry's candidates cannot be chosen to share a cluster. */
static inline size_t twr_slot(int64_t id, unsigned bits)
{
    return tw_hash_slot((uint32_t)id, bits);
}

/* Open-addressing set of the ids k0..k (all distinct) with at least
   4 * (k - k0) slots; returns the slot mask, or 0 when out of memory. */
static size_t twr_ht_build(twr_ctx *x, const int64_t *ids, size_t k0, size_t k)
{
    size_t cnt = k - k0, size = 256, mask;
    unsigned bits = 8;
    while (size < 4 * cnt) {
        if (size > SIZE_MAX / 2 / sizeof(uint64_t)) {
            x->nomem = 1;
            return 0;
        }
        size *= 2;
        bits++;
    }
    if (size > x->ht_alloc) {
        void *q = tw_mem_realloc(x->ht, size * sizeof(uint64_t));
        if (!q) {
            x->nomem = 1;
            return 0;
        }
        x->ht = (uint64_t *)q;
        x->ht_alloc = size;
    }
    memset(x->ht, 0, size * sizeof(uint64_t));
    mask = size - 1;
    for (size_t j = k0; j < k; j++) {
        size_t i = twr_slot(ids[j], bits);
        while (x->ht[i])
            i = (i + 1) & mask;
        x->ht[i] = (uint64_t)ids[j] + 1;
    }
    return mask;
}

/* An object with none of the fields read yet. */
static inline void twr_obj_init(twr_obj *o)
{
    o->tid = -1;
    o->tok = -1;
    o->iid = -1;
    o->lp = o->slp = 0.0;
    o->has_tid = 0;
    o->has_iid = 0;
    o->lp_ok = 0;
    o->lp_kind = o->slp_kind = TW_REC_V_MISSING;
}

/* Whether id is among x->c->ids[k0..k), remembering it when it is not: a
   bloom filter and a scan up to TWR_LINEAR candidates, a hash table (x->ht,
   rebuilt as the row grows) beyond.  1: seen, 0: new, -1: out of memory. */
int tw_rec_seen(twr_ctx *x, twr_seen_set *s, size_t k0, size_t k, int64_t id)
{
    size_t cnt = k - k0, i;
    if (cnt < TWR_LINEAR) {
        unsigned h = twr_bloom_hash(id);
        uint64_t bit = UINT64_C(1) << (h & 63);
        int dup = 0;
        if (s->bloom[h >> 6] & bit) {
            const int64_t *ids = x->c->ids;
            for (size_t j = k0; j < k; j++)
                if (ids[j] == id) {
                    dup = 1;
                    break;
                }
        }
        s->bloom[h >> 6] |= bit;
        return dup;
    }
    if (!s->mask || 4 * cnt > s->mask + 1) {
        s->mask = twr_ht_build(x, x->c->ids, k0, k);
        if (!s->mask)
            return -1;
        s->bits = 0;
        while ((size_t)1 << s->bits <= s->mask)
            s->bits++;
    }
    i = twr_slot(id, s->bits);
    while (x->ht[i]) {
        if (x->ht[i] == (uint64_t)id + 1)
            return 1;
        i = (i + 1) & s->mask;
    }
    x->ht[i] = (uint64_t)id + 1;
    return 0;
}

/* An entry whose "top_logprobs" is missing, empty or not an array. */
static inline void twr_top_missing(twr_top *top)
{
    top->k = top->k0;
    top->code = TW_REC_MISSING_TOP;
}

/* The verdict on candidate o of a "top_logprobs" array whose candidates so
   far are [k0, *k): TW_REC_OK with o stored at *k (and *k advanced), the
   TW_REC_TOP_* code it breaks, or -1 when out of memory (x->nomem set). */
static inline int twr_candidate(twr_ctx *x, twr_seen_set *seen, size_t k0, size_t *k,
                                const twr_obj *o)
{
    int64_t id = twr_obj_id(o);
    int dup;
    if (id < 0)
        return TW_REC_TOP_NO_ID;
    if (!o->lp_ok || !isfinite(o->lp))
        return TW_REC_TOP_NOT_FINITE;
    if (o->lp > 1e-6)
        return TW_REC_TOP_POSITIVE;
    dup = tw_rec_seen(x, seen, k0, *k, id);
    if (dup < 0)
        return -1;
    if (dup)
        return TW_REC_TOP_DUPLICATE;
    if (!twr_room(x, *k))
        return -1;
    x->c->ids[*k] = id;
    x->c->lps[*k] = o->lp;
    ++*k;
    return TW_REC_OK;
}

/* The sampled-token rules on entry i (the id it names, -1 for none; its
   logprob): 1 with its logprob stored, or 0 with the broken rule in res.
   ids NULL: the entries are aligned by position, their ids not read. */
static inline int twr_sampled(tw_rec_result *res, double *sampled, size_t i, int64_t id,
                              const int64_t *ids, int lp_ok, double lp)
{
    int code = TW_REC_OK;
    if (ids && (id < 0 || id != ids[i]))
        code = TW_REC_TOKEN_MISMATCH;
    else if (!lp_ok)
        code = TW_REC_NOT_A_NUMBER;
    else if (!isfinite(lp))
        code = TW_REC_NOT_FINITE;
    else if (lp == -9999.0)
        code = TW_REC_NO_EVIDENCE;
    if (code) {
        res->sampled_err = (ptrdiff_t)i;
        res->sampled_code = code;
        return 0;
    }
    sampled[i] = lp;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Public API                                                                */
/* ------------------------------------------------------------------------ */

void tw_rec_cands_free(tw_rec_cands *c)
{
    tw_mem_free(c->ids);
    tw_mem_free(c->lps);
    c->ids = NULL;
    c->lps = NULL;
    c->cap = 0;
}

int tw_rec_count(const char *buf, const tw_value *content, size_t *total, int path)
{
    int simd;
    const uint8_t *e = NULL, *p = twr_array_begin(buf, content, path, &e, &simd);
    size_t t = 0;
    *total = 0;
    if (!p)
        return TW_REC_BAD_ARG;
    while (p < e && *p != ']') {
        if (*p == '{') {
            /* the room needed: the longest top_logprobs of the entry */
            const uint8_t *q = twj_ws(p + 1, e);
            size_t most = 0;
            if (q < e && *q != '}') {
                while (q < e) {
                    int kind;
                    q = twr_key(q + 1, e, &kind, simd);
                    q = twj_ws(twj_ws(q, e) + 1, e);
                    if (q >= e)
                        break;
                    if (kind == TWR_K_TOP && *q == '[') {
                        const uint8_t *r = twj_ws(q + 1, e);
                        if (r < e && *r == ']') {
                            q = r + 1;
                        } else {
                            size_t commas = 0;
                            q = twj_skip_container(q + 1, e, &commas, simd);
                            if (commas + 1 > most)
                                most = commas + 1;
                        }
                    } else {
                        q = twj_skip_value(q, e, simd);
                    }
                    q = twj_ws(q, e);
                    if (q < e && *q == ',') {
                        q = twj_ws(q + 1, e);
                        continue;
                    }
                    if (q < e)
                        q++;
                    break;
                }
            } else if (q < e) {
                q++;
            }
            p = q;
            t += most;
        } else {
            p = twj_skip_value(p, e, simd);
        }
        p = twr_array_next(p, e);
    }
    *total = t;
    return TW_REC_OK;
}

/* The candidates pass ends at entry i, which breaks tcode: the rest of the offsets stay at
   k, its k candidates so far. Returns 0 (the pass is off). */
static inline int twr_top_failed(tw_rec_result *res, int64_t *coff, size_t i, size_t n, size_t k,
                                 int tcode)
{
    res->top_err = (ptrdiff_t)i;
    res->top_code = tcode;
    for (size_t j = i + 1; j <= n; j++)
        coff[j] = (int64_t)k;
    return 0;
}

int tw_rec_parse(const char *buf, const tw_value *content, size_t n,
                    const int64_t *ids, int want_top, double *sampled,
                    int64_t *coff, double *entry_lps, tw_rec_cands *cands,
                    tw_rec_result *res, int path)
{
    const int simd = tw_path_resolve(path) != TW_PATH_SCALAR;
    const uint8_t *p, *e;
    twr_ctx x;
    size_t k = 0;
    int s_on = 1, t_on = want_top != 0, rc = TW_REC_OK;

    twr_result_init(res);
    if (!twr_content_ok(content) || content->count != n || (n && !sampled) ||
        (t_on && (!coff || !entry_lps || !cands)))
        return TW_REC_BAD_ARG;
    p = (const uint8_t *)buf + content->start + 1;
    e = (const uint8_t *)buf + content->end;
    twr_ctx_init(&x, e, simd, cands);
    if (t_on)
        coff[0] = 0;

    for (size_t i = 0; i < n && (s_on || t_on); i++) {
        int tcode = TW_REC_OK;
        p = twj_ws(p, e);
        if (p >= e) {
            rc = TW_REC_BAD_ARG;
            break;
        }
        if (*p != '{') {
            if (s_on) {
                res->sampled_err = (ptrdiff_t)i;
                res->sampled_code = TW_REC_ENTRY_NOT_OBJECT;
                s_on = 0;
            }
            tcode = TW_REC_MISSING_TOP;
            p = twj_skip_value(p, e, simd);
        } else {
            twr_obj o;
            twr_top top;
            top.k0 = top.k = k;
            top.code = TW_REC_MISSING_TOP;
            p = tw_rec_object(&x, p, &o, t_on ? &top : NULL);
            if (x.nomem) {
                rc = TW_REC_NOMEM;
                break;
            }
            if (s_on)
                s_on = twr_sampled(res, sampled, i, twr_obj_id(&o), ids, o.lp_ok, o.lp);
            if (t_on) {
                if (top.code)
                    tcode = top.code;
                else if (!o.lp_ok)
                    tcode = TW_REC_SAMPLED_NOT_A_NUMBER;
                else {
                    k = top.k;
                    coff[i + 1] = (int64_t)k;
                    entry_lps[i] = o.lp;
                }
            }
        }
        if (t_on && tcode)
            t_on = twr_top_failed(res, coff, i, n, k, tcode);
        p = twj_ws(p, e);
        if (p < e && *p == ',')
            p++;
    }
    tw_mem_free(x.ht);
    if (want_top)
        res->ncand = k;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Reading logprobs.content during the scan                                  */
/* ------------------------------------------------------------------------ */

/*
 * tw_rec_content_reader reads each entry as tw_rec_object does, but over bytes
 * tw_scan has not validated yet: every byte it passes is checked as tw_scan
 * checks it (strings and numbers with tw_scan's own checks; the fast paths
 * for keys, token strings and numbers accept only text that is valid), and
 * whatever it does not handle makes it decline the whole array (NULL), which
 * tw_scan then reads itself.  It declines: invalid JSON; an element of the
 * array that is not an object; a key with an escape; a repeated key among
 * those tw_rec_object reads; a token string with an escape; an object anywhere
 * but as an entry or a candidate; an array in an array other than an
 * entry's "top_logprobs"; an entry certain to fail (a logprob that is not a
 * number: an entry naming no id is kept, with id -1, for records read by
 * position); running out of memory.
 */

/* JSON whitespace (space, tab, LF, CR) from p. */
static inline const uint8_t *twf_ws(const uint8_t *p, const uint8_t *e)
{
    while (p < e && *p <= ' ' && ((UINT64_C(0x100002600) >> *p) & 1u))
        p++;
    return p;
}

/* After an element of a container, at *pp: 1 when a ',' follows (*pp then
   past it and the whitespace after it), 0 when the closing byte close
   follows (*pp past it), else -1 (*pp at the end or at another byte). */
static inline int twf_next(const uint8_t **pp, const uint8_t *e, uint8_t close)
{
    const uint8_t *p = twf_ws(*pp, e);
    if (p < e && *p == ',') {
        *pp = twf_ws(p + 1, e);
        return 1;
    }
    if (p < e && *p == close) {
        *pp = p + 1;
        return 0;
    }
    *pp = p;
    return -1;
}

/* p at a value (p < e): the position after it when it is a valid string,
   number or literal, else NULL. */
static const uint8_t *twf_scalar(const uint8_t *p, const uint8_t *e, int simd)
{
    const uint8_t *q;
    unsigned flags;
    int is_int;
    switch (*p) {
    case '"':
        q = tw_scan_string(p + 1, e, simd, &flags);
        return q ? q + 1 : NULL;
    case 't':
        return e - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return e - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        return e - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default:
        if (*p == '-' || tw_is_digit(*p))
            return tw_scan_number(p, e, simd, &is_int);
        return NULL;
    }
}

/* twf_scalar, with the small positive integers of "bytes" arrays taken
   inline: 1 to 7 digits, the first not '0', followed by a byte that cannot
   continue a number. */
static inline const uint8_t *twf_element(const uint8_t *p, const uint8_t *e, int simd)
{
    if (TW_LIKELY(e - p >= 8) && (unsigned)(*p - '1') < 9u) {
        uint64_t nd = tw_nondigit8(tw_load_le64(p));
        if (nd) {
            unsigned n = tw_ctz64(nd) >> 3; /* the first byte that is not a digit */
            uint8_t c = p[n];
            if (c != '.' && (c | 0x20) != 'e')
                return p + n;
        }
    }
    return twf_scalar(p, e, simd);
}

/* p at a value (p < e): the position after it when it is a valid scalar or
   an array of them, else NULL. */
static const uint8_t *twf_skip(const uint8_t *p, const uint8_t *e, int simd)
{
    int next;
    if (*p != '[')
        return twf_scalar(p, e, simd);
    p = twf_ws(p + 1, e);
    if (p < e && *p == ']')
        return p + 1;
    for (;;) {
        if (p >= e)
            return NULL;
        p = twf_element(p, e, simd);
        if (!p)
            return NULL;
        next = twf_next(&p, e, ']');
        if (next < 0)
            return NULL;
        if (!next)
            return p;
    }
}

/* p at the opening quote of a key: the position after its closing quote
   with *kind its class, or NULL (not a valid string, or one with an escape). */
static inline const uint8_t *twf_key(const uint8_t *p, const uint8_t *e, int *kind, int simd)
{
    const uint8_t *q;
    unsigned flags;
    p++;
    q = twr_usual_key(p, e, kind);
    if (q)
        return q;
    q = tw_scan_string(p, e, simd, &flags);
    if (!q || (flags & TW_STR_ESCAPE))
        return NULL;
    *kind = twr_classify(p, (size_t)(q - p));
    return q + 1;
}

/* p just after the opening quote of a "token" value: the position after the
   closing quote with *id the id it names or -1, or NULL (not a valid string,
   or one with an escape). */
static inline const uint8_t *twf_token(const uint8_t *p, const uint8_t *e, int64_t *id, int simd)
{
    const uint8_t *q;
    unsigned flags;
    if (TW_LIKELY(e - p >= 24) && tw_load_le64(p) == tw_load_le64((const uint8_t *)"token_id") &&
        p[8] == ':') {
        /* "token_id:" and 1..7 digits then the closing quote: a valid string */
        uint64_t nd = tw_nondigit8(tw_load_le64(p + 9));
        if (nd) {
            unsigned d = tw_ctz64(nd) / 8;
            if (d && p[9 + d] == '"') {
                *id = (int64_t)tw_short_digits(p + 9, d);
                return p + 10 + d;
            }
        }
    }
    q = tw_scan_string(p, e, simd, &flags);
    if (!q || (flags & TW_STR_ESCAPE))
        return NULL;
    *id = twr_token_raw(p, q);
    return q + 1;
}

/* p at a "token_id" value (p < e): the position after it with *id as
   twr_token_id gives it, or NULL (not a valid scalar or array of them). */
static const uint8_t *twf_token_id(const uint8_t *p, const uint8_t *e, int64_t *id, int simd)
{
    const uint8_t *q;
    int is_int;
    *id = -1;
    if (*p != '-' && !tw_is_digit(*p))
        return twf_skip(p, e, simd);
    q = tw_scan_number(p, e, simd, &is_int);
    if (q && is_int)
        *id = twr_int_id(p, q);
    return q;
}

/* p at a number (p < e): the position after it with *out its value, or NULL
   (not a valid number, or one ending at e). */
static inline const uint8_t *twf_number(const uint8_t *p, const uint8_t *e, double *out, int simd)
{
    int is_int;
    const uint8_t *q = tw_number_try(p, e, out, &is_int, simd);
    if (TW_LIKELY(q != NULL))
        return q;
    q = tw_scan_number(p, e, simd, &is_int);
    if (!q || q >= e)
        return NULL;
    return tw_number_read(p, e, out, &is_int, simd);
}

static const uint8_t *twf_object(twr_ctx *x, const uint8_t *p, twr_obj *o, twr_top *top);

/* p at the '[' of an entry's "top_logprobs": read its candidates into x->c
   from top->k0 on, the verdict and the end in top; the position after the
   ']'.  checked (a constant): over bytes not validated yet (twf_*): every
   element is validated, also those after the first bad one, and NULL means
   invalid JSON or no memory; else over bytes tw_scan validated (twr_*): the
   rest of the array is skipped at the first bad candidate, and no memory
   ends the walk at the buffer's end (x->nomem set). */
static inline TW_ALWAYS_INLINE const uint8_t *twr_top_array_on(twr_ctx *x, const uint8_t *p,
                                                               twr_top *top, const int checked)
{
    const uint8_t *e = x->e, *fail = checked ? NULL : e;
    size_t k = top->k0;
    twr_seen_set seen;
    int code = TW_REC_OK, next;
    twr_seen_init(&seen);
    p = twf_ws(p + 1, e);
    if (p < e && *p == ']') {
        twr_top_missing(top);
        return p + 1;
    }
    for (;;) {
        if (p >= e) {
            if (checked)
                return NULL;
            break;
        }
        if (*p != '{') {
            if (checked && !(p = twf_skip(p, e, x->simd)))
                return NULL;
            if (code == TW_REC_OK)
                code = TW_REC_TOP_NOT_OBJECT;
        } else {
            twr_obj o;
            p = checked ? twf_object(x, p, &o, NULL) : tw_rec_object(x, p, &o, NULL);
            if (!p)
                return NULL;
            if (code == TW_REC_OK && (code = twr_candidate(x, &seen, top->k0, &k, &o)) < 0)
                return fail;
        }
        if (!checked && code != TW_REC_OK) {
            /* the first bad candidate decides: skip the rest of the array
               (p is inside it, at its element or just after one) */
            p = twj_skip_container(p, e, NULL, x->simd);
            break;
        }
        next = twf_next(&p, e, ']');
        if (next > 0)
            continue;
        if (next < 0) {
            if (checked)
                return NULL;
            p = p < e ? p + 1 : e; /* tw_scan validated the array: its ']' */
        }
        break;
    }
    top->k = k;
    top->code = code;
    return p;
}

/* A value of no interest at p (p < e): its end (checked: validated, NULL when
   invalid; see twr_top_array_on). */
static inline TW_ALWAYS_INLINE const uint8_t *twr_skip(const uint8_t *p, const uint8_t *e, int simd,
                                                       const int checked)
{
    return checked ? twf_skip(p, e, simd) : twj_skip_value(p, e, simd);
}

/* p at the '{' of an object: read its fields into o (and, with top, its
   "top_logprobs" into top, the last occurrence of every key winning); the
   position after the '}'.  simd and checked are constants (inlined per
   pair: a run-time test in every byte search of the hot loop costs about 5%
   on the SIMD paths); checked as for twr_top_array_on, and then a key with
   an escape, a token string with an escape or a repeated key among those
   read makes it give up (NULL) as for invalid JSON. */
static inline TW_ALWAYS_INLINE const uint8_t *twr_object_on(twr_ctx *x, const uint8_t *p, twr_obj *o,
                                                            twr_top *top, const int simd,
                                                            const int checked)
{
    const uint8_t *e = x->e, *fail = checked ? NULL : e;
    unsigned seen = 0;
    int is_int;
    twr_obj_init(o);
    p = twf_ws(p + 1, e);
    if (p < e && *p == '}')
        return p + 1;
    for (;;) {
        int kind, next;
        if (p >= e || (checked && *p != '"'))
            return fail;
        /* p at the key's quote */
        p = checked ? twf_key(p, e, &kind, simd) : twr_key(p + 1, e, &kind, simd);
        if (!p)
            return NULL;
        p = twf_ws(p, e);
        if (checked && (p >= e || *p != ':'))
            return NULL;
        p = twf_ws(p + 1, e);
        if (p >= e)
            return fail;
        if (checked && kind != TWR_K_OTHER) {
            /* the last occurrence would win: leave repeated keys to tw_scan */
            if (seen & (1u << kind))
                return NULL;
            seen |= 1u << kind;
        }
        switch (kind) {
        case TWR_K_LOGPROB:
            o->lp_kind = twr_kind(*p);
            if (*p == '-' || tw_is_digit(*p)) {
                p = checked ? twf_number(p, e, &o->lp, simd) : tw_number_read(p, e, &o->lp, &is_int, simd);
                o->lp_ok = 1;
            } else {
                o->lp_ok = 0;
                p = twr_skip(p, e, simd, checked);
            }
            break;
        case TWR_K_SLP:
            o->slp_kind = twr_kind(*p);
            if (*p == '-' || tw_is_digit(*p))
                p = checked ? twf_number(p, e, &o->slp, simd) : tw_number_read(p, e, &o->slp, &is_int, simd);
            else
                p = twr_skip(p, e, simd, checked);
            break;
        case TWR_K_TOKEN:
            if (*p == '"') {
                p = checked ? twf_token(p + 1, e, &o->tok, simd) : twr_token(p + 1, e, &o->tok, simd);
            } else {
                o->tok = -1;
                p = twr_skip(p, e, simd, checked);
            }
            break;
        case TWR_K_TOKEN_ID:
            o->has_tid = 1;
            p = checked ? twf_token_id(p, e, &o->tid, simd) : twr_token_id(p, e, &o->tid, simd);
            break;
        case TWR_K_ID: /* read as "token_id" is; it names the id only without one */
            o->has_iid = 1;
            p = checked ? twf_token_id(p, e, &o->iid, simd) : twr_token_id(p, e, &o->iid, simd);
            break;
        case TWR_K_TOP:
            if (top && *p == '[') {
                p = twr_top_array_on(x, p, top, checked);
                if (x->nomem)
                    return fail;
                break;
            }
            if (top)
                twr_top_missing(top);
            p = twr_skip(p, e, simd, checked);
            break;
        default:
            p = twr_skip(p, e, simd, checked);
            break;
        }
        if (checked && !p)
            return NULL;
        next = twf_next(&p, e, '}');
        if (next > 0)
            continue;
        if (next < 0 && (checked || p >= e))
            return fail;
        return next ? p + 1 : p; /* tw_scan validated the object: its '}' */
    }
}

const uint8_t *tw_rec_object(twr_ctx *x, const uint8_t *p, twr_obj *o, twr_top *top)
{
    return x->simd ? twr_object_on(x, p, o, top, 1, 0) : twr_object_on(x, p, o, top, 0, 0);
}

static const uint8_t *twf_object(twr_ctx *x, const uint8_t *p, twr_obj *o, twr_top *top)
{
    return twr_object_on(x, p, o, top, x->simd, 1);
}

/*
 * The record vLLM writes for each token when its ids name the tokens and no alternatives are
 * asked for, byte for byte as its server writes it (no whitespace):
 *
 *     {"token":"token_id:N","logprob":X,"bytes":null,"top_logprobs":[]}
 *
 * N one to seven digits, X a number.  twf_vllm_record reads such a record without the
 * key-by-key walk: the fixed bytes compared eight at a time, the id read in place as twf_token
 * reads it, the number with twf_number as twf_object reads it.  At the first byte that differs
 * (whitespace, another key or order, a longer or escaped token string, a logprob that is not a
 * number, candidates, the text ending) it returns NULL having kept nothing, and the record is
 * read by twf_object from its '{': it decides nothing on its own, so every verdict is the
 * general walk's.  What it takes, twf_object reads to the same entry: the id the token string
 * names (no "token_id", no "id"), the logprob a number, no candidates (TW_REC_MISSING_TOP).
 * p at the '{' with at least TWR_VLLM_MIN bytes before e; every byte it compares is below e.
 */
#define TWR_VLLM_MIN 96 /* head 19 + digits 8 + key 11 + tail 32, and room for a number */

static inline const uint8_t *twf_vllm_record(const uint8_t *p, const uint8_t *e, int64_t *id,
                                             double *lp, int simd)
{
    uint64_t x, nd;
    unsigned n;
    const uint8_t *q;
    /* {"token":"token_id: (19 bytes: words at 0, 8 and 11) */
    x = (tw_load_le64(p) ^ tw_load_le64((const uint8_t *)"{\"token\"")) |
        (tw_load_le64(p + 8) ^ tw_load_le64((const uint8_t *)":\"token_")) |
        (tw_load_le64(p + 11) ^ tw_load_le64((const uint8_t *)"oken_id:"));
    if (x)
        return NULL;
    /* the id: 1 to 7 digits, then the closing quote */
    nd = tw_nondigit8(tw_load_le64(p + 19));
    if (!nd)
        return NULL;
    n = tw_ctz64(nd) >> 3;
    if (!n || p[19 + n] != '"')
        return NULL;
    q = p + 20 + n;
    /* ,"logprob": (11 bytes: words at 0 and 3), then a number */
    x = (tw_load_le64(q) ^ tw_load_le64((const uint8_t *)",\"logpro")) |
        (tw_load_le64(q + 3) ^ tw_load_le64((const uint8_t *)"ogprob\":"));
    q += 11;
    if (x || (*q != '-' && !tw_is_digit(*q)))
        return NULL;
    q = twf_number(q, e, lp, simd);
    if (!q || e - q < 32)
        return NULL;
    /* ,"bytes":null,"top_logprobs":[]} (32 bytes) */
    x = (tw_load_le64(q) ^ tw_load_le64((const uint8_t *)",\"bytes\"")) |
        (tw_load_le64(q + 8) ^ tw_load_le64((const uint8_t *)":null,\"t")) |
        (tw_load_le64(q + 16) ^ tw_load_le64((const uint8_t *)"op_logpr")) |
        (tw_load_le64(q + 24) ^ tw_load_le64((const uint8_t *)"obs\":[]}"));
    if (x)
        return NULL;
    *id = (int64_t)tw_short_digits(p + 19, n);
    return q + 32;
}

const uint8_t *tw_rec_content_reader(tw_doc *d, const uint8_t *p, const uint8_t *end, int simd,
                                     size_t *count)
{
    tw_rec_cands c;
    twr_ctx x;
    const size_t n0 = d->nentries;
    size_t n = n0, kfree = n0 ? d->entries[n0 - 1].k : 0;
    const uint8_t *r = NULL;
    c.ids = d->cand_ids;
    c.lps = d->cand_lps;
    c.cap = d->cands_cap;
    c.grow = 1;
    twr_ctx_init(&x, end, simd, &c);
    for (;;) {
        twr_obj o;
        twr_top top;
        tw_entry *en;
        int next;
        if (p >= end || *p != '{')
            break;
        if (n >= d->entries_cap) {
            void *arr = d->entries;
            if (tw_doc_grow(&arr, &d->entries_cap, n, sizeof(tw_entry), 256))
                break;
            d->entries = (tw_entry *)arr;
        }
        if (end - p >= TWR_VLLM_MIN) {
            int64_t vid;
            double vlp;
            const uint8_t *r2 = twf_vllm_record(p, end, &vid, &vlp, simd);
            if (r2) {
                en = &d->entries[n++];
                en->id = vid;
                en->lp = vlp;
                en->k0 = en->k = kfree;
                en->top_code = TW_REC_MISSING_TOP;
                p = r2;
                goto next_entry;
            }
        }
        top.k0 = top.k = kfree;
        top.code = TW_REC_MISSING_TOP;
        p = twf_object(&x, p, &o, &top);
        /* An entry without a number as logprob ends the reading: stored entries
           then take at least 13 bytes of text each ({"logprob":0}), so a
           document of empty objects cannot make the scan hold 40 bytes for each
           3 of its own.  An entry naming no id is stored with id -1: the records
           of a response read by position (output_mode "text", SkyRL's token-less
           records) are read during the scan, and tw_rec_take refuses it where
           ids are compared, as tw_rec_parse does.  An entry named by a shorter
           "id" alone is left to the reading after the scan. */
        if (!p || !o.lp_ok || (o.has_iid && !o.has_tid))
            break;
        en = &d->entries[n++];
        en->id = twr_obj_id(&o);
        en->lp = o.lp;
        en->k0 = top.k0;
        en->k = top.k;
        en->top_code = (uint8_t)top.code;
        kfree = top.k;
    next_entry:
        next = twf_next(&p, end, ']');
        if (next > 0)
            continue;
        if (next == 0) {
            r = p;
            *count = n - n0;
            d->nentries = n;
        }
        break;
    }
    /* the candidate arrays may have moved, also when the array is declined */
    d->cand_ids = c.ids;
    d->cand_lps = c.lps;
    d->cands_cap = c.cap;
    tw_mem_free(x.ht);
    return r;
}

void tw_rec_read_during_scan(tw_doc *d)
{
    d->content_reader = tw_rec_content_reader;
}

int tw_rec_take(const tw_doc *d, const tw_value *content, size_t n, const int64_t *ids,
                int want_top, double *sampled, int64_t *coff, double *entry_lps,
                tw_rec_cands *cands, tw_rec_result *res)
{
    const tw_entry *en;
    twr_ctx x;
    size_t k = 0;
    int s_on = 1, t_on = want_top != 0;

    twr_result_init(res);
    if (!twr_content_ok(content) || !content->read || content->count != n ||
        content->read_at > d->nentries || d->nentries - content->read_at < n ||
        (n && !sampled) || (t_on && (!coff || !entry_lps || !cands)))
        return TW_REC_BAD_ARG;
    en = d->entries + content->read_at;
    memset(&x, 0, sizeof x);
    x.c = cands;
    if (t_on)
        coff[0] = 0;
    for (size_t i = 0; i < n && (s_on || t_on); i++) {
        if (s_on) /* stored entries have a number as logprob */
            s_on = twr_sampled(res, sampled, i, en[i].id, ids, 1, en[i].lp);
        if (t_on) {
            size_t m = en[i].k - en[i].k0;
            int tcode = en[i].top_code;
            /* tw_rec_parse writes an entry's candidates while it reads them, before
               its verdict: the same room is needed */
            if (m && !twr_room(&x, k + m - 1))
                return TW_REC_NOMEM;
            if (!tcode) {
                memcpy(cands->ids + k, d->cand_ids + en[i].k0, m * sizeof(int64_t));
                memcpy(cands->lps + k, d->cand_lps + en[i].k0, m * sizeof(double));
                k += m;
                coff[i + 1] = (int64_t)k;
                entry_lps[i] = en[i].lp;
            } else {
                t_on = twr_top_failed(res, coff, i, n, k, tcode);
            }
        }
    }
    if (want_top)
        res->ncand = k;
    return TW_REC_OK;
}
