/* tw_plain: see tw_plain.h. */
#include "json/tw_plain.h"

#include "base/tw_cpu.h"
#include "json/tw_json.h"

#include <string.h>

typedef struct {
    const char *s;
    size_t n, p;
    int simd; /* tw_json.h's searches: 0 on TW_PATH_SCALAR */
} tw_rd;

enum { TW_PLAIN_MAX_KEYS = 48 };

static inline void tw_pl_ws(tw_rd *r) {
    r->p = (size_t)(twj_ws((const uint8_t *)r->s + r->p, (const uint8_t *)r->s + r->n) - (const uint8_t *)r->s);
}

/* At a '"': past the string; its content is s[*start:*end]; *esc when it holds a '\'. */
static inline int tw_pl_str(tw_rd *r, size_t *start, size_t *end, int *esc) {
    const uint8_t *b = (const uint8_t *)r->s, *e = b + r->n, *p = b + r->p + 1;
    *esc = 0;
    *start = r->p + 1;
    for (;;) {
        p = twj_find_qb(p, e, r->simd);
        if (p >= e) return 0;
        if (*p == '"') {
            *end = (size_t)(p - b);
            r->p = *end + 1;
            return 1;
        }
        *esc = 1;
        p += 2; /* the escaped byte is never a quote to stop at */
    }
}

static inline int tw_pl_scalar_end(char c) {
    return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Past one value of any kind. */
static inline int tw_pl_skip(tw_rd *r) {
    const uint8_t *b = (const uint8_t *)r->s;
    r->p = (size_t)(twj_skip_value(b + r->p, b + r->n, r->simd) - b);
    return r->p <= r->n;
}

/* r before an object's '{' (*first) or after a member: the next key (no escape), r at its
   value. 1: a key; 0: the object closed; -1: not read. */
static inline int tw_pl_key(tw_rd *r, int *first, size_t *ks, size_t *ke) {
    int esc;
    tw_pl_ws(r);
    if (r->p >= r->n) return -1;
    if (*first) {
        if (r->s[r->p] != '{') return -1;
        r->p++;
        tw_pl_ws(r);
        if (r->p < r->n && r->s[r->p] == '}') {
            r->p++;
            return 0;
        }
        *first = 0;
    } else if (r->s[r->p] == '}') {
        r->p++;
        return 0;
    } else if (r->s[r->p] == ',') {
        r->p++;
        tw_pl_ws(r);
    } else {
        return -1;
    }
    if (r->p >= r->n || r->s[r->p] != '"' || !tw_pl_str(r, ks, ke, &esc) || esc) return -1;
    tw_pl_ws(r);
    if (r->p >= r->n || r->s[r->p] != ':') return -1;
    r->p++;
    tw_pl_ws(r);
    return r->p < r->n ? 1 : -1;
}

static inline int tw_pl_eq(const tw_rd *r, size_t ks, size_t ke, const char *key, size_t len) {
    return ke - ks == len && memcmp(r->s + ks, key, len) == 0;
}

/* The key s[ks:ke] is the string literal key. */
#define tw_pl_is(r, ks, ke, key) tw_pl_eq((r), (ks), (ke), (key), sizeof(key) - 1)

/* The position of the key in the list (count keys, each its length in a byte, then its
   bytes), or -1. */
static int tw_pl_find(const tw_rd *r, size_t ks, size_t ke, const char *list, size_t count) {
    for (size_t i = 0; i < count; i++) {
        size_t len = (uint8_t)list[0];
        if (tw_pl_eq(r, ks, ke, list + 1, len)) return (int)i;
        list += len + 1;
    }
    return -1;
}

/* Each key read is read once: 0 when bit was already seen. */
static inline int tw_pl_once(uint64_t *seen, unsigned bit) {
    uint64_t m = (uint64_t)1 << bit;
    if (*seen & m) return 0;
    *seen |= m;
    return 1;
}

/* Past a null (1) or another value (0). */
static inline int tw_pl_nonnull(tw_rd *r, int *ok) {
    int null = r->s[r->p] == 'n';
    *ok = tw_pl_skip(r);
    return !null;
}

/* An integer of at most 18 digits, as JSON writes one (no fraction, no exponent). */
static inline int tw_pl_int(tw_rd *r, int64_t *value) {
    size_t p = r->p, digits = 0;
    int neg = 0;
    int64_t v = 0;
    if (p < r->n && r->s[p] == '-') {
        neg = 1;
        p++;
    }
    while (p < r->n && r->s[p] >= '0' && r->s[p] <= '9') {
        if (++digits > 18) return 0;
        v = v * 10 + (r->s[p] - '0');
        p++;
    }
    if (digits == 0 || (p < r->n && !tw_pl_scalar_end(r->s[p]))) return 0;
    r->p = p;
    *value = neg ? -v : v;
    return 1;
}

/* A member's value read as a string without escapes, the member's first in its object (bit
   of seen); 0 for anything else (the walk then leaves the copy to the JSON reader). */
static int tw_pl_plain_str_once(tw_rd *r, uint64_t *seen, unsigned bit, size_t *a, size_t *b) {
    int esc;
    return tw_pl_once(seen, bit) && r->s[r->p] == '"' && tw_pl_str(r, a, b, &esc) && !esc;
}

static int tw_pl_packed(tw_rd *r, tw_plain_choice *c) {
    int first = 1, got;
    size_t ks, ke, a, b;
    uint64_t seen = 0;
    while ((got = tw_pl_key(r, &first, &ks, &ke)) == 1) {
        if (tw_pl_is(r, ks, ke, "dtype")) {
            if (!tw_pl_plain_str_once(r, &seen, 0, &a, &b)) return 0;
            c->dtype = tw_pl_is(r, a, b, "float32") ? 4 : tw_pl_is(r, a, b, "float64") ? 8 : 0;
        } else if (tw_pl_is(r, ks, ke, "shape")) {
            if (!tw_pl_once(&seen, 1) || r->s[r->p] != '[') return 0;
            r->p++;
            tw_pl_ws(r);
            if (!tw_pl_int(r, &c->shape_n)) return 0;
            tw_pl_ws(r);
            if (r->p >= r->n || r->s[r->p] != ']') return 0;
            r->p++;
            c->shape = 1;
        } else if (!tw_pl_skip(r)) {
            return 0;
        }
    }
    return got == 0;
}

static int tw_pl_compact(tw_rd *r, tw_plain_choice *c, const char *format) {
    int first = 1, got;
    size_t ks, ke, a, b;
    uint64_t seen = 0;
    while ((got = tw_pl_key(r, &first, &ks, &ke)) == 1) {
        if (tw_pl_is(r, ks, ke, "format")) {
            if (!tw_pl_plain_str_once(r, &seen, 0, &a, &b)) return 0;
            c->format = (uint8_t)tw_pl_eq(r, a, b, format, strlen(format));
        } else if (tw_pl_is(r, ks, ke, "num_top_logprobs")) {
            if (!tw_pl_once(&seen, 1) || !tw_pl_int(r, &c->num_top_n)) return 0;
            c->num_top = 1;
        } else if (!tw_pl_skip(r)) {
            return 0;
        }
    }
    return got == 0;
}

/* A logprobs member: null, or an object read by read (0 for another kind, or unread). */
static int tw_pl_member(tw_rd *r, tw_plain_choice *c, uint8_t *kind, const char *format) {
    if (r->s[r->p] == 'n') {
        *kind = TW_PV_NULL;
        return tw_pl_skip(r);
    }
    if (r->s[r->p] != '{') return 0;
    *kind = TW_PV_OBJECT;
    return format == NULL ? tw_pl_packed(r, c) : tw_pl_compact(r, c, format);
}

/* A key of the list (count keys, as tw_pl_find reads them) at r: its value skipped, *others set when it
   is not null. -1: another key; 0: not read (the key given twice); 1: read. */
static int tw_pl_absent(tw_rd *r, size_t ks, size_t ke, const char *list, size_t count, uint64_t *seen,
                        uint8_t *others) {
    int ok, at = tw_pl_find(r, ks, ke, list, count);
    if (at < 0) return -1;
    if (!tw_pl_once(seen, 8 + (unsigned)at)) return 0;
    *others |= (uint8_t)tw_pl_nonnull(r, &ok);
    return ok;
}

static int tw_pl_choice(tw_rd *r, const tw_plain_keys *keys, tw_plain_choice *c) {
    int first = 1, got, esc, at;
    size_t ks, ke;
    uint64_t seen = 0;
    memset(c, 0, sizeof *c);
    while ((got = tw_pl_key(r, &first, &ks, &ke)) == 1) {
        if (tw_pl_is(r, ks, ke, "finish_reason")) {
            if (!tw_pl_once(&seen, 0)) return 0;
            if (r->s[r->p] == 'n') {
                c->finish = TW_PV_NULL;
                if (!tw_pl_skip(r)) return 0;
            } else if (r->s[r->p] == '"' && tw_pl_str(r, &c->finish_start, &c->finish_end, &esc) && !esc) {
                c->finish = TW_PV_STRING;
            } else {
                return 0;
            }
        } else if (tw_pl_is(r, ks, ke, "completion_logprobs")) {
            if (!tw_pl_once(&seen, 1)) return 0;
            if (!tw_pl_member(r, c, &c->packed, NULL)) return 0;
        } else if (tw_pl_is(r, ks, ke, "compact_logprobs")) {
            if (!tw_pl_once(&seen, 2)) return 0;
            if (!tw_pl_member(r, c, &c->compact, keys->compact_format)) return 0;
        } else if ((at = tw_pl_absent(r, ks, ke, keys->choice_absent, keys->nchoice_absent, &seen, &c->others)) >= 0) {
            if (!at) return 0;
        } else if (!tw_pl_skip(r)) {
            return 0;
        }
    }
    return got == 0;
}

int tw_plain_walk(const char *s, size_t n, const tw_plain_keys *keys, tw_plain_doc *doc,
                  tw_plain_choice *out, size_t cap, int path) {
    tw_rd rd = {s, n, 0, tw_path_resolve(path) != TW_PATH_SCALAR};
    tw_rd *r = &rd;
    int first = 1, got, ok, at;
    size_t ks, ke;
    uint64_t seen = 0;
    if (keys->nroot_absent > TW_PLAIN_MAX_KEYS || keys->nchoice_absent > TW_PLAIN_MAX_KEYS) return 0;
    memset(doc, 0, sizeof *doc);
    while ((got = tw_pl_key(r, &first, &ks, &ke)) == 1) {
        if (tw_pl_is(r, ks, ke, "choices")) {
            if (!tw_pl_once(&seen, 0) || r->s[r->p] != '[') return 0;
            r->p++;
            doc->choices = 1;
            tw_pl_ws(r);
            if (r->p < r->n && r->s[r->p] == ']') {
                r->p++;
                continue;
            }
            for (;;) {
                if (doc->count == cap || !tw_pl_choice(r, keys, &out[doc->count])) return 0;
                doc->count++;
                tw_pl_ws(r);
                if (r->p >= r->n) return 0;
                if (r->s[r->p++] == ']') break;
                if (r->s[r->p - 1] != ',') return 0;
            }
        } else if (tw_pl_is(r, ks, ke, "prompt_token_ids")) {
            if (!tw_pl_once(&seen, 1)) return 0;
            doc->prompt = (uint8_t)tw_pl_nonnull(r, &ok);
            if (!ok) return 0;
        } else if ((at = tw_pl_absent(r, ks, ke, keys->root_absent, keys->nroot_absent, &seen, &doc->others)) >= 0) {
            if (!at) return 0;
        } else if (!tw_pl_skip(r)) {
            return 0;
        }
    }
    return got == 0;
}
