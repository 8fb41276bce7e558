/*
 * tw_sse_internal - what the files of the stream reader share; no public API (that is tw_sse.h).
 * The files:
 *
 *   tw_sse.c           the reader: its buffers, events split out of the pieces fed, each
 *                      event's plan checked against what was read before and then taken
 *   tw_sse_plan.c      one event's JSON walked once into a plan (tw_sse_chunk): spans of its
 *                      bytes, every value validated by the scanner's checks
 *   tw_sse_document.c  the non-streamed document the reader stands for, written out
 *
 * One event at a time: its data is walked into a plan; the plan is checked against what was
 * read before; only then is it copied into the reader's buffers. So a declined event leaves
 * the reader as it was before it.
 */
#ifndef TW_SSE_INTERNAL_H
#define TW_SSE_INTERNAL_H

#include "wire/tw_sse.h"
#include "base/tw_util.h"

#include <stddef.h>
#include <string.h>

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

/* The completions records' keys, in the document's order (tw_sse_plan.c). */
TW_INTERNAL extern const char *const tw_sse_rec_keys[TW_SSE_RECORDS];

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

/* Python's str.strip() set, as bytes.strip() sees it. */
static inline int py_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c';
}

static inline tw_sse_field *find(tw_sse_field *f, size_t n, const char *store, span k)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (f[i].key_len == k.n && memcmp(store + f[i].key, k.p, k.n) == 0)
            return &f[i];
    return NULL;
}

/* The chunk (p at '{', e the end of the event's data) walked into *pl: the byte after it, or
   NULL to decline the event. */
TW_INTERNAL const uint8_t *tw_sse_chunk(const uint8_t *p, const uint8_t *e, int simd, int form, plan *pl);

#endif /* TW_SSE_INTERNAL_H */
