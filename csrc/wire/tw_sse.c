/*
 * tw_sse: streamed responses read in one pass into growing owned buffers (tw_sse.h).
 *
 * One event at a time: its data is walked once, every value validated by the scanner's
 * checks, into a plan (spans of the event's bytes: each choice's ids, records, text and
 * other fields); the plan is checked against what was read before; only then is it copied
 * into the reader's buffers. So a declined event leaves the reader as it was before it.
 */
#include "wire/tw_sse.h"

#include <stddef.h>
#include <string.h>

#include "base/tw_cpu.h"
#include "base/tw_mem.h"
#include "json/tw_scan.h"

#define SSE_MAX_DEPTH 64    /* deeper values are left to the specification */
#define SSE_MAX_KEYS 32     /* keys per object checked for repeats; more are left to it too */
#define SSE_MAX_CHOICES 16  /* choices in one chunk */
#define SSE_MAX_FIELDS 32   /* once-sent fields of a choice, root fields */

typedef struct {
    const uint8_t *p;
    size_t n;
} span; /* p NULL: absent (or null where null means absent) */

typedef struct {
    int64_t index;
    span ids;
    size_t nids;
    span rec[TW_SSE_RECORDS];
    size_t nrec[TW_SSE_RECORDS];
    int rec_null[TW_SSE_RECORDS]; /* present as null (or absent) */
    int has;
    span text, role, finish, stop, prompt;
    size_t nonce;
    span okey[SSE_MAX_FIELDS], oval[SSE_MAX_FIELDS]; /* last: not cleared per event */
} plan_choice;

typedef struct {
    int has_choices, choices_null, has_error, object_error;
    span usage, prompt;
    size_t nroot, nch;
    span rkey[SSE_MAX_FIELDS], rval[SSE_MAX_FIELDS]; /* from here on: not cleared per event */
    plan_choice ch[SSE_MAX_CHOICES];
} plan;

static const char *const REC_KEYS[TW_SSE_RECORDS] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
static const char *const LAST_ONLY[] = {"routed_experts", "sampling_mask", "kept_tokens", "weight_versions",
                                        "sampling_mask_logprobs"};

/* ---------------------------------------------------------------------------------------- */
/* buffers                                                                                  */
/* ---------------------------------------------------------------------------------------- */

static int buf_reserve(tw_sse_buf *b, size_t more)
{
    size_t need, cap;
    char *p;
    if (more <= b->cap - b->n)
        return 0;
    if (more > SIZE_MAX / 2 - b->n)
        return -1;
    need = b->n + more;
    cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    p = (char *)tw_mem_realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(tw_sse_buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n))
        return -1;
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    return 0;
}

static void buf_free(tw_sse_buf *b)
{
    tw_mem_free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
    size_t c;
    void *p;
    if (n < *cap)
        return 0;
    c = *cap ? *cap * 2 : 8;
    if (c > SIZE_MAX / size)
        return -1;
    p = tw_mem_realloc(*arr, c * size);
    if (!p)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* JSON: validated by the scanner's checks; NULL declines                                   */
/* ---------------------------------------------------------------------------------------- */

static inline const uint8_t *ws(const uint8_t *p, const uint8_t *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static inline int eq(span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.n == n && memcmp(s.p, lit, n) == 0;
}

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
                if (eq(k, REC_KEYS[r]))
                    slot = r;
        } else if (eq(k, "content")) {
            slot = 0;
        }
        if (slot >= 0)
            p = list(p, e, simd, depth + 1, &c->rec[slot], &c->nrec[slot], &c->rec_null[slot]);
        else
            p = value(p, e, simd, depth + 1);
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

/* The chunk (p at '{'). */
static const uint8_t *chunk(const uint8_t *p, const uint8_t *e, int simd, int form, plan *pl)
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

/* ---------------------------------------------------------------------------------------- */
/* the reader                                                                               */
/* ---------------------------------------------------------------------------------------- */

tw_sse *tw_sse_new(int form)
{
    tw_sse *s = (tw_sse *)tw_mem_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->form = form;
    s->prompt_event = -1;
    s->scratch = tw_mem_alloc(sizeof(plan));
    if (!s->scratch) {
        tw_mem_free(s);
        return NULL;
    }
    return s;
}

static void choice_free(tw_sse_choice *c)
{
    int r;
    buf_free(&c->ids);
    for (r = 0; r < TW_SSE_RECORDS; r++)
        buf_free(&c->rec[r]);
    buf_free(&c->text);
    buf_free(&c->finish);
    buf_free(&c->stop);
    buf_free(&c->role);
    buf_free(&c->prompt);
    buf_free(&c->store);
    tw_mem_free(c->once);
    tw_mem_free(c->starts);
    tw_mem_free(c->events);
}

void tw_sse_free(tw_sse *s)
{
    size_t i;
    if (!s)
        return;
    for (i = 0; i < s->nchoices; i++)
        choice_free(&s->choices[i]);
    tw_mem_free(s->choices);
    buf_free(&s->pending);
    buf_free(&s->root_store);
    buf_free(&s->prompt);
    buf_free(&s->usage);
    tw_mem_free(s->root);
    tw_mem_free(s->scratch);
    tw_mem_free(s);
}

static int set(tw_sse_buf *b, span v)
{
    b->n = 0;
    return buf_put(b, v.p, v.n);
}

static tw_sse_field *find(tw_sse_field *f, size_t n, const char *store, span k)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (f[i].key_len == k.n && memcmp(store + f[i].key, k.p, k.n) == 0)
            return &f[i];
    return NULL;
}

/* Append (k, v) to a field list of at most SSE_MAX_FIELDS, grown by doubling from 4 (its
   capacity: 0, then 4, then the next power of two at or above its length). */
static int add_field(tw_sse_field **f, size_t *n, tw_sse_buf *store, span k, span v, int64_t event)
{
    tw_sse_field *x;
    if (*n == 0 || (*n >= 4 && (*n & (*n - 1)) == 0)) {
        tw_sse_field *g = (tw_sse_field *)tw_mem_realloc(*f, (*n ? *n * 2 : 4) * sizeof **f);
        if (!g)
            return -1;
        *f = g;
    }
    x = &(*f)[*n];
    x->key = store->n;
    x->key_len = k.n;
    if (buf_put(store, k.p, k.n))
        return -1;
    x->val = store->n;
    x->val_len = v.n;
    if (buf_put(store, v.p, v.n))
        return -1;
    x->event = event;
    (*n)++;
    return 0;
}

/* Check the plan against the reader; TW_SSE_OK to take it. */
static int check(const tw_sse *s, const plan *pl, int64_t event)
{
    size_t known = s->nchoices, i, j, k, fresh = 0;
    if (!pl->has_choices && (pl->has_error || pl->object_error))
        return TW_SSE_DECLINE; /* the server's error */
    if (pl->prompt.p && s->form != TW_SSE_COMPLETIONS && (s->prompt.n || s->nchoices))
        return TW_SSE_DECLINE;
    for (i = 0; i < pl->nch; i++) {
        const plan_choice *c = &pl->ch[i];
        const tw_sse_choice *st = NULL;
        for (j = 0; j < i; j++)
            if (pl->ch[j].index == c->index)
                return TW_SSE_DECLINE;
        if ((size_t)c->index == known + fresh) {
            fresh++;
        } else if ((size_t)c->index < known) {
            st = &s->choices[c->index];
        } else {
            return TW_SSE_DECLINE;
        }
        if (c->nids && st && st->has_records >= 0 && st->has_records != c->has)
            return TW_SSE_DECLINE;
        if (c->prompt.p && (st ? (st->prompt.n || st->first_event != event) : 0))
            return TW_SSE_DECLINE;
        if (st) {
            if (st->nonce + c->nonce > SSE_MAX_FIELDS)
                return TW_SSE_DECLINE;
            for (k = 0; k < c->nonce; k++) {
                const tw_sse_field *f = find(st->once, st->nonce, st->store.p, c->okey[k]);
                if (f && (f->val_len != c->oval[k].n || memcmp(st->store.p + f->val, c->oval[k].p, f->val_len)))
                    return TW_SSE_DECLINE; /* changed, or the same value written otherwise */
            }
        }
    }
    fresh = 0; /* now the new root keys */
    for (i = 0; i < pl->nroot; i++)
        if (!find(s->root, s->nroot, s->root_store.p, pl->rkey[i]))
            fresh++;
    if (s->nroot + fresh + 1 > SSE_MAX_FIELDS)
        return TW_SSE_DECLINE;
    return TW_SSE_OK;
}

static int append_list(tw_sse_buf *b, span in, size_t before)
{
    if (before && in.n && buf_put(b, ",", 1))
        return -1;
    return buf_put(b, in.p, in.n);
}

/* Take the checked plan. */
static int commit(tw_sse *s, const plan *pl, int64_t event)
{
    size_t i, k;
    int r;
    if (pl->usage.p && set(&s->usage, pl->usage))
        return TW_SSE_NOMEM;
    if (pl->prompt.p) {
        if (s->form != TW_SSE_COMPLETIONS) {
            if (set(&s->prompt, pl->prompt))
                return TW_SSE_NOMEM;
            s->prompt_event = event;
        } else {
            span pk = {(const uint8_t *)"prompt_token_ids", 16};
            if (!find(s->root, s->nroot, s->root_store.p, pk) &&
                add_field(&s->root, &s->nroot, &s->root_store, pk, pl->prompt, event))
                return TW_SSE_NOMEM;
        }
    }
    for (i = 0; i < pl->nroot; i++)
        if (!find(s->root, s->nroot, s->root_store.p, pl->rkey[i]) &&
            add_field(&s->root, &s->nroot, &s->root_store, pl->rkey[i], pl->rval[i], event))
            return TW_SSE_NOMEM;
    for (i = 0; i < pl->nch; i++) {
        const plan_choice *c = &pl->ch[i];
        tw_sse_choice *st;
        if ((size_t)c->index == s->nchoices) {
            if (grow((void **)&s->choices, &s->choices_cap, s->nchoices, sizeof *s->choices))
                return TW_SSE_NOMEM;
            st = &s->choices[s->nchoices++];
            memset(st, 0, sizeof *st);
            st->index = c->index;
            st->first_event = event;
            st->has_records = -1;
        }
        st = &s->choices[c->index];
        st->last_event = event;
        if (c->nids) {
            if (st->has_records < 0)
                st->has_records = c->has;
            if (st->nstarts == st->starts_cap) {
                size_t cap = st->starts_cap;
                int64_t *ev;
                if (grow((void **)&st->starts, &cap, st->nstarts, sizeof(int64_t)))
                    return TW_SSE_NOMEM;
                ev = (int64_t *)tw_mem_realloc(st->events, cap * sizeof(int64_t));
                if (!ev)
                    return TW_SSE_NOMEM; /* starts grew alone: its capacity stays the old one */
                st->events = ev;
                st->starts_cap = cap;
            }
            st->starts[st->nstarts] = (int64_t)st->nids;
            st->events[st->nstarts++] = event;
            if (append_list(&st->ids, c->ids, st->nids))
                return TW_SSE_NOMEM;
            if (c->has)
                for (r = 0; r < (s->form == TW_SSE_COMPLETIONS ? TW_SSE_RECORDS : 1); r++)
                    if (append_list(&st->rec[r], c->rec[r], st->nids))
                        return TW_SSE_NOMEM;
            st->nids += c->nids;
        }
        if (c->text.p && buf_put(&st->text, c->text.p, c->text.n))
            return TW_SSE_NOMEM;
        for (k = 0; k < c->nonce; k++) {
            tw_sse_field *f = find(st->once, st->nonce, st->store.p, c->okey[k]);
            if (f)
                f->event = event;
            else if (add_field(&st->once, &st->nonce, &st->store, c->okey[k], c->oval[k], event))
                return TW_SSE_NOMEM;
        }
        if (c->prompt.p && set(&st->prompt, c->prompt))
            return TW_SSE_NOMEM;
        if (c->role.p && !st->role.n && set(&st->role, c->role))
            return TW_SSE_NOMEM;
        if (c->finish.p && set(&st->finish, c->finish))
            return TW_SSE_NOMEM;
        if (c->stop.p && set(&st->stop, c->stop))
            return TW_SSE_NOMEM;
    }
    return TW_SSE_OK;
}

static inline int py_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c';
}

/* One event block (the bytes between blank lines). */
static int event(tw_sse *s, const uint8_t *b, size_t n, int simd)
{
    const uint8_t *data = NULL, *e = b + n, *line = b, *q;
    size_t dn = 0;
    int rc;
    plan *pl = (plan *)s->scratch;
    while (line <= e) {
        const uint8_t *end = (const uint8_t *)memchr(line, '\n', (size_t)(e - line));
        const uint8_t *colon;
        size_t ln;
        if (!end)
            end = e;
        ln = (size_t)(end - line);
        if (ln && line[0] != ':') {
            colon = (const uint8_t *)memchr(line, ':', ln);
            if ((colon ? (size_t)(colon - line) : ln) == 4 && memcmp(line, "data", 4) == 0) {
                if (data || !colon)
                    return TW_SSE_DECLINE; /* several data lines, or an empty one */
                data = colon + 1;
                if (data < end && *data == ' ')
                    data++;
                dn = (size_t)(end - data);
            }
        }
        line = end + 1;
    }
    if (!data)
        return TW_SSE_OK; /* comments, keep-alives, other fields: not an event */
    if (s->done)
        return TW_SSE_DECLINE;
    {
        const uint8_t *a = data, *z = data + dn;
        while (a < z && py_space(*a))
            a++;
        while (z > a && py_space(z[-1]))
            z--;
        if (z - a == 6 && memcmp(a, "[DONE]", 6) == 0) {
            s->done = 1;
            s->event++;
            return TW_SSE_OK;
        }
    }
    q = ws(data, data + dn);
    if (q >= data + dn || *q != '{')
        return TW_SSE_DECLINE;
    q = chunk(q, data + dn, simd, s->form, pl);
    if (!q || ws(q, data + dn) != data + dn)
        return TW_SSE_DECLINE;
    rc = check(s, pl, s->event);
    if (rc != TW_SSE_OK)
        return rc;
    rc = commit(s, pl, s->event);
    if (rc != TW_SSE_OK)
        return rc;
    s->event++;
    return TW_SSE_OK;
}

/* Events of buf[0:len] from `from`; *taken: the end of the last event taken. */
static int events(tw_sse *s, const uint8_t *buf, size_t len, size_t search, size_t *taken, int simd)
{
    size_t start = 0;
    for (;;) {
        const uint8_t *nl = search < len ? (const uint8_t *)memchr(buf + search, '\n', len - search) : NULL;
        size_t at;
        int rc;
        if (!nl || (size_t)(nl - buf) + 1 >= len) {
            *taken = start;
            return TW_SSE_OK;
        }
        at = (size_t)(nl - buf);
        if (buf[at + 1] != '\n') {
            search = at + 1;
            continue;
        }
        rc = event(s, buf + start, at - start, simd);
        if (rc != TW_SSE_OK) {
            *taken = start;
            return rc;
        }
        start = search = at + 2;
    }
}

int tw_sse_feed(tw_sse *s, const char *buf, size_t len, int path)
{
    const int simd = tw_path_resolve(path) != TW_PATH_SCALAR;
    size_t taken = 0;
    int rc;
    if (len && memchr(buf, '\r', len))
        return TW_SSE_DECLINE;
    if (!s->pending.n) {
        rc = events(s, (const uint8_t *)buf, len, 0, &taken, simd);
        if (rc == TW_SSE_NOMEM)
            return rc;
        if (buf_put(&s->pending, buf + taken, len - taken))
            return TW_SSE_NOMEM;
        s->scanned = s->pending.n;
        return rc;
    }
    if (buf_put(&s->pending, buf, len))
        return TW_SSE_NOMEM;
    rc = events(s, (const uint8_t *)s->pending.p, s->pending.n, s->scanned ? s->scanned - 1 : 0, &taken, simd);
    if (rc == TW_SSE_NOMEM)
        return rc;
    if (taken) { /* (never a move of the whole unfinished event per piece) */
        memmove(s->pending.p, s->pending.p + taken, s->pending.n - taken);
        s->pending.n -= taken;
        s->scanned = 0;
    }
    if (rc == TW_SSE_OK)
        s->scanned = s->pending.n;
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* the document                                                                             */
/* ---------------------------------------------------------------------------------------- */

typedef struct {
    char *out;
    size_t n;
} writer;

static void w(writer *x, const void *p, size_t n)
{
    if (x->out && n)
        memcpy(x->out + x->n, p, n);
    x->n += n;
}

static void ws_lit(writer *x, const char *lit) { w(x, lit, strlen(lit)); }

static void w_key(writer *x, const char *store, const tw_sse_field *f)
{
    w(x, "\"", 1);
    w(x, store + f->key, f->key_len);
    w(x, "\":", 2);
    w(x, store + f->val, f->val_len);
}

size_t tw_sse_document(const tw_sse *s, char *out)
{
    writer x = {out, 0};
    size_t i, k, r;
    int first = 1;
    for (i = 0; i < s->pending.n; i++)
        if (!py_space((uint8_t)s->pending.p[i]))
            return 0;
    if (!s->done)
        return 0;
    for (i = 0; i < s->nchoices; i++) {
        const tw_sse_choice *c = &s->choices[i];
        for (k = 0; k < sizeof LAST_ONLY / sizeof *LAST_ONLY; k++) {
            span key = {(const uint8_t *)LAST_ONLY[k], strlen(LAST_ONLY[k])};
            const tw_sse_field *f = find(c->once, c->nonce, c->store.p, key);
            if (f && f->event != c->last_event)
                return 0;
        }
    }
    w(&x, "{", 1);
    if (s->form == TW_SSE_COMPLETIONS) {
        ws_lit(&x, "\"object\":\"text_completion\"");
        first = 0;
    } else if (s->form == TW_SSE_CHAT) {
        ws_lit(&x, "\"object\":\"chat.completion\"");
        first = 0;
    }
    for (i = 0; i < s->nroot; i++) {
        const tw_sse_field *f = &s->root[i];
        if (f->key_len == 6 && memcmp(s->root_store.p + f->key, "object", 6) == 0)
            continue;
        if (!first)
            w(&x, ",", 1);
        first = 0;
        w_key(&x, s->root_store.p, f);
    }
    if (s->prompt.n) {
        if (!first)
            w(&x, ",", 1);
        first = 0;
        ws_lit(&x, "\"prompt_token_ids\":");
        w(&x, s->prompt.p, s->prompt.n);
    }
    if (!first)
        w(&x, ",", 1);
    ws_lit(&x, "\"choices\":[");
    for (i = 0; i < s->nchoices; i++) {
        const tw_sse_choice *c = &s->choices[i];
        char num[24];
        size_t nn = 0;
        int64_t v = c->index;
        char tmp[24];
        do {
            tmp[nn++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        for (k = 0; k < nn; k++)
            num[k] = tmp[nn - 1 - k];
        if (i)
            w(&x, ",", 1);
        ws_lit(&x, "{\"index\":");
        w(&x, num, nn);
        if (s->form == TW_SSE_CHAT) {
            ws_lit(&x, ",\"message\":{\"role\":");
            if (c->role.n)
                w(&x, c->role.p, c->role.n);
            else
                ws_lit(&x, "\"assistant\"");
            ws_lit(&x, ",\"content\":\"");
            w(&x, c->text.p, c->text.n);
            ws_lit(&x, "\"}");
        } else if (s->form == TW_SSE_COMPLETIONS) {
            ws_lit(&x, ",\"text\":\"");
            w(&x, c->text.p, c->text.n);
            ws_lit(&x, "\"");
        }
        if (c->has_records == 1) {
            if (s->form == TW_SSE_COMPLETIONS) {
                ws_lit(&x, ",\"logprobs\":{");
                for (r = 0; r < TW_SSE_RECORDS; r++) {
                    if (r)
                        w(&x, ",", 1);
                    w(&x, "\"", 1);
                    ws_lit(&x, REC_KEYS[r]);
                    ws_lit(&x, "\":[");
                    w(&x, c->rec[r].p, c->rec[r].n);
                    w(&x, "]", 1);
                }
                w(&x, "}", 1);
            } else {
                ws_lit(&x, ",\"logprobs\":{\"content\":[");
                w(&x, c->rec[0].p, c->rec[0].n);
                ws_lit(&x, "]}");
            }
        } else {
            ws_lit(&x, ",\"logprobs\":null");
        }
        ws_lit(&x, ",\"finish_reason\":");
        if (c->finish.n)
            w(&x, c->finish.p, c->finish.n);
        else
            ws_lit(&x, "null");
        if (c->stop.n) {
            ws_lit(&x, ",\"stop_reason\":");
            w(&x, c->stop.p, c->stop.n);
        }
        ws_lit(&x, ",\"token_ids\":[");
        w(&x, c->ids.p, c->ids.n);
        w(&x, "]", 1);
        if (c->prompt.n) {
            ws_lit(&x, ",\"prompt_token_ids\":");
            w(&x, c->prompt.p, c->prompt.n);
        }
        for (k = 0; k < c->nonce; k++) {
            w(&x, ",", 1);
            w_key(&x, c->store.p, &c->once[k]);
        }
        w(&x, "}", 1);
    }
    w(&x, "]", 1);
    if (s->usage.n) {
        ws_lit(&x, ",\"usage\":");
        w(&x, s->usage.p, s->usage.n);
    }
    w(&x, "}", 1);
    return x.n;
}
