/*
 * tw_sse: streamed responses read in one pass into growing owned buffers (tw_sse.h): the
 * reader, its buffers, the events split out of each piece, each event's plan (tw_sse_plan.c)
 * checked against what was read before and only then taken (tw_sse_internal.h). The document
 * is written by tw_sse_document.c.
 */
#include "wire/tw_sse_internal.h"

#include "base/tw_cpu.h"
#include "base/tw_mem.h"

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


/* Free the buffers and blocks a reader or a choice owns (lists of pointers to them). */
static void release(tw_sse_buf *const *bufs, size_t nbufs, void *const *blocks, size_t nblocks)
{
    size_t i;
    for (i = 0; i < nbufs; i++)
        buf_free(bufs[i]);
    for (i = 0; i < nblocks; i++)
        tw_mem_free(blocks[i]);
}

_Static_assert(TW_SSE_RECORDS == 4, "choice_free lists the four record buffers");

static void choice_free(tw_sse_choice *c)
{
    tw_sse_buf *const bufs[] = {&c->ids, &c->rec[0], &c->rec[1], &c->rec[2], &c->rec[3], &c->text,
                                &c->finish, &c->stop, &c->role, &c->prompt, &c->store};
    void *const blocks[] = {c->once, c->starts, c->events};
    release(bufs, sizeof bufs / sizeof *bufs, blocks, sizeof blocks / sizeof *blocks);
}

void tw_sse_free(tw_sse *s)
{
    size_t i;
    if (!s)
        return;
    for (i = 0; i < s->nchoices; i++)
        choice_free(&s->choices[i]);
    {
        tw_sse_buf *const bufs[] = {&s->pending, &s->root_store, &s->prompt, &s->usage};
        void *const blocks[] = {s->choices, s->root, s->scratch, s};
        release(bufs, sizeof bufs / sizeof *bufs, blocks, sizeof blocks / sizeof *blocks);
    }
}

static int set(tw_sse_buf *b, span v)
{
    b->n = 0;
    return buf_put(b, v.p, v.n);
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
        if (c->ids.p)
            st->sent_ids = 1;
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
    q = tw_sse_chunk(q, data + dn, simd, s->form, pl);
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
