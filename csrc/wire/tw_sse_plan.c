/*
 * tw_sse_plan: one event's chunk walked once into a plan (tw_sse_internal.h): spans of the
 * event's bytes for each choice's ids, records, text and other fields, every value validated
 * by the scanner's checks (tw_scan_string, tw_scan_number); NULL declines the event.
 */
#include "wire/tw_sse_internal.h"

#include "json/tw_scan.h"

TW_INTERNAL const char *const tw_sse_rec_keys[TW_SSE_RECORDS] = {"tokens", "token_logprobs", "top_logprobs",
                                                                "text_offset"};

/* p at the opening quote: the string's content in *out, the byte after the closing quote
   returned; keys (key != 0) with an escape are declined. */
static const uint8_t *string(const uint8_t *p, const uint8_t *e, int simd, span *out, int key,
                             unsigned *flags_out)
{
    unsigned flags = 0;
    const uint8_t *q = tw_scan_string(p + 1, e, simd, &flags);
    if (!q || (key && (flags & TW_STR_ESCAPE)))
        return NULL;
    if (out) {
        out->p = p + 1;
        out->n = (size_t)(q - p - 1);
    }
    if (flags_out)
        *flags_out = flags;
    return q + 1;
}

static const uint8_t *value(const uint8_t *p, const uint8_t *e, int simd, int depth);
static const uint8_t *object(const uint8_t *p, const uint8_t *e, int simd, int depth);

/* After a member or element: the next one's start (*more 1, past the comma), or past the
   closing bracket (*more 0); NULL for anything else. */
static inline const uint8_t *after(const uint8_t *p, const uint8_t *e, uint8_t close, int *more)
{
    p = ws(p, e);
    if (p < e && *p == ',') {
        *more = 1;
        return ws(p + 1, e);
    }
    *more = 0;
    return p < e && *p == close ? p + 1 : NULL;
}

/* p after '[': the elements, counted in *count. */
static const uint8_t *array(const uint8_t *p, const uint8_t *e, int simd, int depth, size_t *count)
{
    size_t n = 0;
    int more = 1;
    p = ws(p, e);
    if (p < e && *p == ']')
        p++, more = 0;
    while (more && p) {
        p = value(p, e, simd, depth + 1);
        if (p)
            n++, p = after(p, e, ']', &more);
    }
    if (p && count)
        *count = n;
    return p;
}

/* p at a value (no whitespace before it): the byte after it. */
static const uint8_t *value(const uint8_t *p, const uint8_t *e, int simd, int depth)
{
    int is_int;
    if (p >= e)
        return NULL;
    switch (*p) {
    case '"':
        return string(p, e, simd, NULL, 0, NULL);
    case '{':
        return depth >= SSE_MAX_DEPTH ? NULL : object(p + 1, e, simd, depth);
    case '[':
        return depth >= SSE_MAX_DEPTH ? NULL : array(p + 1, e, simd, depth, NULL);
    case 't':
        return (size_t)(e - p) >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return (size_t)(e - p) >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        return (size_t)(e - p) >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default:
        if (*p == '-' || (*p >= '0' && *p <= '9'))
            return tw_scan_number(p, e, simd, &is_int);
        return NULL;
    }
}

static inline int is_null(span v) { return v.n == 4 && memcmp(v.p, "null", 4) == 0; }

/* A value's text in *v (validated), or NULL. */
static const uint8_t *take(const uint8_t *p, const uint8_t *e, int simd, int depth, span *v)
{
    const uint8_t *q = value(p, e, simd, depth);
    if (q) {
        v->p = p;
        v->n = (size_t)(q - p);
    }
    return q;
}

/* An array's interior in *in and its elements counted; null gives in->p NULL. Anything else
   declines. */
static const uint8_t *list(const uint8_t *p, const uint8_t *e, int simd, int depth, span *in, size_t *count,
                           int *was_null)
{
    const uint8_t *q;
    if (p < e && *p == 'n') {
        q = value(p, e, simd, depth);
        in->p = NULL;
        in->n = 0;
        *count = 0;
        if (was_null)
            *was_null = 1;
        return q;
    }
    if (p >= e || *p != '[' || depth >= SSE_MAX_DEPTH)
        return NULL;
    q = array(p + 1, e, simd, depth, count);
    if (!q)
        return NULL;
    in->p = p + 1;
    in->n = (size_t)(q - 1 - (p + 1));
    if (was_null)
        *was_null = 0;
    return q;
}

/* A delta text: a string (its content in *out) or null; anything else the specification refuses. */
static const uint8_t *text(const uint8_t *p, const uint8_t *e, int simd, span *out)
{
    if (p < e && *p == '"')
        return string(p, e, simd, out, 0, NULL);
    return (size_t)(e - p) >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
}

/* Iterate an object's members: p after '{'. */
#define MEMBERS(p, e, simd, KEY, ...)                                                          \
    do {                                                                                       \
        span keys_[SSE_MAX_KEYS];                                                              \
        size_t nk_ = 0, i_;                                                                    \
        int more_ = 1;                                                                         \
        p = ws(p, e);                                                                          \
        if (p < e && *p == '}')                                                                \
            p++, more_ = 0;                                                                    \
        while (more_) {                                                                        \
            span KEY;                                                                          \
            if (p >= e || *p != '"' || nk_ == SSE_MAX_KEYS)                                    \
                return NULL;                                                                   \
            p = string(p, e, simd, &KEY, 1, NULL);                                             \
            if (!p)                                                                            \
                return NULL;                                                                   \
            for (i_ = 0; i_ < nk_; i_++)                                                       \
                if (keys_[i_].n == KEY.n && memcmp(keys_[i_].p, KEY.p, KEY.n) == 0)            \
                    return NULL;                                                               \
            keys_[nk_++] = KEY;                                                                \
            p = ws(p, e);                                                                      \
            if (p >= e || *p != ':')                                                           \
                return NULL;                                                                   \
            p = ws(p + 1, e);                                                                  \
            __VA_ARGS__;                                                                       \
            if (!p || !(p = after(p, e, '}', &more_)))                                         \
                return NULL;                                                                   \
        }                                                                                      \
    } while (0)

/* p after '{': any object, its keys checked for repeats. */
static const uint8_t *object(const uint8_t *p, const uint8_t *e, int simd, int depth)
{
    MEMBERS(p, e, simd, k, p = value(p, e, simd, depth + 1));
    return p;
}

/* A choice's logprobs object (p after '{'); depth is the object's. */
static const uint8_t *logprobs(const uint8_t *p, const uint8_t *e, int simd, int depth, int form,
                               plan_choice *c)
{
    MEMBERS(p, e, simd, k, {
        int slot = -1, r;
        if (form == TW_SSE_COMPLETIONS) {
            for (r = 0; r < TW_SSE_RECORDS; r++)
                if (eq(k, tw_sse_rec_keys[r]))
                    slot = r;
        } else if (eq(k, "content")) {
            slot = 0;
        }
        if (slot >= 0) {
            p = list(p, e, simd, depth + 1, &c->rec[slot], &c->nrec[slot], &c->rec_null[slot]);
        } else if (form == TW_SSE_COMPLETIONS && eq(k, "top_k")) {
            span v;
            p = take(p, e, simd, depth + 1, &v);
            if (p && !is_null(v))
                return NULL; /* a packed top-k block: concatenated by the specification */
        } else {
            p = value(p, e, simd, depth + 1);
        }
    });
    return p;
}

/* A chat delta (p after '{'). */
static const uint8_t *delta(const uint8_t *p, const uint8_t *e, int simd, int depth, int form, plan_choice *c)
{
    MEMBERS(p, e, simd, k, {
        span v;
        if (eq(k, "content") && form == TW_SSE_CHAT) {
            p = text(p, e, simd, &c->text);
        } else if (eq(k, "role")) {
            p = take(p, e, simd, depth + 1, &v);
            if (p && !is_null(v)) {
                /* only a non-empty string is kept as sent ("role or 'assistant'") */
                if (form == TW_SSE_CHAT && (v.p[0] != '"' || v.n < 3))
                    return NULL;
                c->role = v;
            }
        } else {
            p = value(p, e, simd, depth + 1);
        }
    });
    return p;
}

typedef const uint8_t *(*reader)(const uint8_t *, const uint8_t *, int, int, int, plan_choice *);

/* A choice's object value read by `read` (p at it); any other value only validated. */
static const uint8_t *inner(const uint8_t *p, const uint8_t *e, int simd, int depth, int form, plan_choice *c,
                            reader read)
{
    if (p < e && *p == '{')
        return depth >= SSE_MAX_DEPTH ? NULL : read(p + 1, e, simd, depth, form, c);
    return value(p, e, simd, depth);
}

static int repeatable(span k)
{
    return eq(k, "index") || eq(k, "finish_reason") || eq(k, "stop_reason") || eq(k, "delta") ||
           eq(k, "logprobs") || eq(k, "text") || eq(k, "token_ids") || eq(k, "prompt_token_ids");
}

/* One choice (p after '{'); depth is the choice object's. */
static const uint8_t *choice(const uint8_t *p, const uint8_t *e, int simd, int depth, int form, plan_choice *c)
{
    int has_index = 0, r;
    memset(c, 0, offsetof(plan_choice, okey));
    for (r = 0; r < TW_SSE_RECORDS; r++)
        c->rec_null[r] = 1;
    MEMBERS(p, e, simd, k, {
        span v;
        if (eq(k, "index")) {
            const uint8_t *q = p;
            int64_t x = 0;
            while (q < e && *q >= '0' && *q <= '9' && q - p < 9)
                x = x * 10 + (*q++ - '0');
            if (q == p || (q - p > 1 && *p == '0') || (q < e && (*q == '.' || (*q | 0x20) == 'e' || (*q >= '0' && *q <= '9'))))
                return NULL;
            c->index = x;
            has_index = 1;
            p = q;
        } else if (eq(k, "token_ids")) {
            p = list(p, e, simd, depth + 1, &c->ids, &c->nids, NULL);
        } else if (eq(k, "logprobs")) {
            p = inner(p, e, simd, depth + 1, form, c, logprobs); /* not an object: no records */
        } else if (eq(k, "text") && form == TW_SSE_COMPLETIONS) {
            p = text(p, e, simd, &c->text);
        } else if (eq(k, "delta")) {
            p = inner(p, e, simd, depth + 1, form, c, delta);
        } else if (eq(k, "finish_reason") || eq(k, "stop_reason") ||
                   (eq(k, "prompt_token_ids") && form == TW_SSE_COMPLETIONS)) {
            p = take(p, e, simd, depth + 1, &v);
            if (p && !is_null(v))
                *(k.n == 13 ? &c->finish : k.n == 11 ? &c->stop : &c->prompt) = v;
        } else if (repeatable(k)) {
            p = value(p, e, simd, depth + 1);
        } else {
            p = take(p, e, simd, depth + 1, &v);
            if (p && !is_null(v)) {
                if (c->nonce == SSE_MAX_FIELDS)
                    return NULL;
                if (form == TW_SSE_CHAT && eq(k, "message"))
                    return NULL; /* it would stand beside the message the document writes */
                c->okey[c->nonce] = k;
                c->oval[c->nonce++] = v;
            }
        }
    });
    if (!has_index)
        return NULL;
    c->has = 0;
    if (form == TW_SSE_COMPLETIONS) {
        for (r = 0; r < TW_SSE_RECORDS; r++)
            if (!c->rec_null[r])
                c->has = 1;
        if (c->has)
            for (r = 0; r < TW_SSE_RECORDS; r++)
                if (c->rec_null[r] || c->nrec[r] != c->nids)
                    return NULL;
    } else {
        c->has = !c->rec_null[0];
        if (c->has && c->nrec[0] != c->nids)
            return NULL;
    }
    return p;
}

/* The chunk (p at '{'): tw_sse_internal.h. */
const uint8_t *tw_sse_chunk(const uint8_t *p, const uint8_t *e, int simd, int form, plan *pl)
{
    memset(pl, 0, offsetof(plan, rkey));
    p++;
    MEMBERS(p, e, simd, k, {
        span v;
        if (eq(k, "choices")) {
            pl->has_choices = 1;
            if (p < e && *p == '[') {
                int more = 1;
                p = ws(p + 1, e);
                if (p < e && *p == ']')
                    p++, more = 0;
                while (more) {
                    if (p >= e || *p != '{' || pl->nch == SSE_MAX_CHOICES)
                        return NULL;
                    p = choice(p + 1, e, simd, 2, form, &pl->ch[pl->nch++]);
                    if (!p || !(p = after(p, e, ']', &more)))
                        return NULL;
                }
            } else {
                p = take(p, e, simd, 1, &v);
                if (p && !is_null(v))
                    return NULL; /* choices must be an array */
                pl->choices_null = 1;
            }
        } else if (eq(k, "usage")) {
            p = take(p, e, simd, 1, &v);
            if (p && !is_null(v))
                pl->usage = v;
        } else if (eq(k, "prompt_token_ids")) {
            p = take(p, e, simd, 1, &v);
            if (p && !is_null(v))
                pl->prompt = v;
        } else if (eq(k, "nvext")) {
            p = take(p, e, simd, 1, &v);
            if (p && !is_null(v))
                return NULL; /* NVIDIA Dynamo's, merged across chunks by the specification */
        } else {
            p = take(p, e, simd, 1, &v);
            if (!p)
                return NULL;
            if (eq(k, "error"))
                pl->has_error = 1;
            if (eq(k, "object") && v.p[0] == '"' && (eq(v, "\"error\"") || memchr(v.p, '\\', v.n)))
                pl->object_error = 1;
            if (pl->nroot == SSE_MAX_FIELDS)
                return NULL;
            pl->rkey[pl->nroot] = k;
            pl->rval[pl->nroot++] = v;
        }
    });
    return p;
}
