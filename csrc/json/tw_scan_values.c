/*
 * tw_scan_values - what a caller reads after tw_scan (see tw_scan.h): the document's lifetime
 * (tw_doc_init / tw_doc_free, its decoded blobs and growable arrays), the id and offset arrays
 * read during the scan, the stripped copy, and the recorded values read again from the bytes
 * the scan validated (integer arrays, nested arrays, array elements, unescaped strings).
 */
#include "json/tw_scan_internal.h"

/* The bytes between the brackets of array v, its leading whitespace skipped, as [*p, *e);
   0 (leaving them unset) when v is no array with room for an element. */
static inline int tws_array_inside(const char *buf, const tw_value *v, const uint8_t **p,
                                   const uint8_t **e)
{
    if (!v->present || v->type != TW_T_ARRAY || v->end - v->start < 2)
        return 0;
    *e = (const uint8_t *)buf + v->end - 1;
    *p = tws_skip_ws((const uint8_t *)buf + v->start + 1, *e);
    return 1;
}

/* ------------------------------------------------------------------------ */
/* The document                                                              */
/* ------------------------------------------------------------------------ */

void tw_doc_init(tw_doc *d)
{
    memset(d, 0, sizeof *d);
    d->path = TW_PATH_AUTO;
    d->max_depth = 1024;
}

void tw_doc_free(tw_doc *d)
{
    tw_doc settings;
    void *owned[] = {d->blobs, d->uints, d->entries, d->cand_ids,
                     d->cand_lps, d->choice, d->blank, d->stack};
    tws_free_blobs(d);
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        tw_mem_free(owned[i]);
    tw_doc_init(&settings); /* keep every setting, nothing else */
    settings.path = d->path;
    settings.max_depth = d->max_depth;
    settings.decode = d->decode;
    settings.b64_path = d->b64_path;
    settings.openai = d->openai;
    settings.sglang = d->sglang;
    settings.content_reader = d->content_reader;
    *d = settings;
}

uint8_t *tw_take_blob(tw_doc *d, const tw_value *v, size_t *len)
{
    uint8_t *data;
    *len = 0;
    if (!v->blob || v->blob > d->nblobs)
        return NULL;
    data = d->blobs[v->blob - 1].data;
    if (data)
        *len = d->blobs[v->blob - 1].len;
    d->blobs[v->blob - 1].data = NULL;
    return data;
}

int tw_doc_grow(void **arr, size_t *cap, size_t n, size_t size, size_t first)
{
    size_t ncap;
    void *q;
    if (n < *cap)
        return 0;
    ncap = *cap ? *cap : first;
    while (ncap <= n) {
        if (ncap > SIZE_MAX / 2 / size)
            return -1;
        ncap *= 2;
    }
    q = tw_mem_realloc(*arr, ncap * size);
    if (!q)
        return -1;
    *arr = q;
    *cap = ncap;
    return 0;
}

size_t tw_nested_total(const tw_doc *d, const tw_value *v)
{
    const uint64_t *u = d->uints + v->read_at;
    size_t total = 0;
    for (size_t r = 0; r < v->count; r++) {
        total += (size_t)*u;
        u += 1 + *u;
    }
    return total;
}

int tw_take_nested(const tw_doc *d, const tw_value *v, uint64_t max, int64_t *offsets,
                   int32_t *values, size_t *err_row)
{
    const uint64_t *u = d->uints + v->read_at;
    size_t k = 0;
    if (max > (uint64_t)INT32_MAX)
        max = (uint64_t)INT32_MAX;
    offsets[0] = 0;
    for (size_t r = 0; r < v->count; r++) {
        size_t n = (size_t)*u++;
        for (size_t i = 0; i < n; i++) {
            if (u[i] > max) {
                *err_row = r;
                return -1;
            }
            values[k + i] = (int32_t)u[i];
        }
        u += n;
        k += n;
        offsets[r + 1] = (int64_t)k;
    }
    return 0;
}

int tw_take_uints(const tw_doc *d, const tw_value *v, uint64_t max, int64_t *out,
                  size_t *err_index)
{
    const uint64_t *src = d->uints + v->read_at;
    if (max > (uint64_t)INT64_MAX)
        max = (uint64_t)INT64_MAX;
    for (size_t i = 0; i < v->count; i++) {
        if (src[i] > max) {
            *err_index = i;
            return -1;
        }
        out[i] = (int64_t)src[i];
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Stripped copy                                                             */
/* ------------------------------------------------------------------------ */

size_t tw_stripped_size(const tw_doc *d, size_t len)
{
    return len - d->blank_bytes;
}

void tw_strip(const char *buf, size_t len, const tw_doc *d, char *out)
{
    size_t pos = 0;
    for (size_t i = 0; i < d->nblank; i++) {
        size_t n = d->blank[i].start - pos;
        memcpy(out, buf + pos, n);
        out += n;
        pos = d->blank[i].end;
    }
    memcpy(out, buf + pos, len - pos);
}

int tw_blank_field(tw_doc *d, size_t ci, int field)
{
    const tw_value *v;
    size_t s, e, lo, hi, j, removed = 0;
    if (ci >= d->nchoices || field < 0 || field >= TW_NFIELDS)
        return TW_OK;
    v = &d->choice[ci].f[field];
    if (!v->present)
        return TW_OK;
    if (v->type == TW_T_ARRAY) {
        s = v->start + 1;
        e = v->end - 1;
    } else if (v->type == TW_T_STRING) {
        s = v->start;
        e = v->end;
    } else {
        return TW_OK;
    }
    if (s >= e)
        return TW_OK;
    /* first span starting at or after s */
    lo = 0;
    hi = d->nblank;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->blank[mid].start < s)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* spans are interiors of values, so they nest or are disjoint: one
       that starts before s either ends by s or contains [s, e) */
    if (lo > 0 && d->blank[lo - 1].end > s)
        return TW_OK;
    for (j = lo; j < d->nblank && d->blank[j].start < e; j++)
        removed += d->blank[j].end - d->blank[j].start; /* nested: replaced */
    if (j == lo) {
        void *arr = d->blank;
        if (tw_doc_grow(&arr, &d->blank_cap, d->nblank, sizeof(tw_span), 16))
            return TW_ERR_NOMEM;
        d->blank = (tw_span *)arr;
        memmove(d->blank + lo + 1, d->blank + lo, (d->nblank - lo) * sizeof(tw_span));
        d->nblank++;
    } else if (j > lo + 1) {
        memmove(d->blank + lo + 1, d->blank + j, (d->nblank - j) * sizeof(tw_span));
        d->nblank -= j - lo - 1;
    }
    d->blank[lo].start = s;
    d->blank[lo].end = e;
    d->blank_bytes += (e - s) - removed;
    return TW_OK;
}

/* ------------------------------------------------------------------------ */
/* Helpers over validated values                                             */
/* ------------------------------------------------------------------------ */

/* One integer element at *pp in [0, max] (max <= INT64_MAX): 1 with *val and
   *pp advanced past it, or 0 if it is anything else. */
static int tws_uint_elem(const uint8_t **pp, const uint8_t *e, uint64_t max, uint64_t *val)
{
    const uint8_t *p = *pp;
    uint64_t x = 0;
    size_t n = 0;
    if (p >= e)
        return 0;
    if (*p == '-') {
        /* only "-0" (an integer zero) */
        p++;
        if (p < e && *p == '0' &&
            !(p + 1 < e && (p[1] == '.' || (p[1] | 0x20) == 'e'))) {
            *val = 0;
            *pp = p + 1;
            return 1;
        }
        return 0;
    }
    while (p < e && tw_is_digit(*p)) {
        if (n < 19)
            x = x * 10 + (uint64_t)(*p - '0');
        n++;
        p++;
    }
    if (n == 0 || n > 19 || x > max)
        return 0; /* not a number, or >= 10^19 > INT64_MAX, or > max */
    if (p < e && (*p == '.' || (*p | 0x20) == 'e'))
        return 0;
    *val = x;
    *pp = p;
    return 1;
}

/* End of the validated value at p (not past e). */
static const uint8_t *tws_skip_value(const uint8_t *p, const uint8_t *e)
{
    size_t depth = 0;
    while (p < e) {
        uint8_t c = *p;
        if (c == '"') {
            p++;
            while (p < e && *p != '"')
                p += (*p == '\\' && e - p >= 2) ? 2 : 1;
            if (p < e)
                p++;
            if (depth == 0)
                return p;
            continue;
        }
        if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (depth == 0)
                return p;
            if (--depth == 0)
                return p + 1;
        } else if (depth == 0 && (c == ',' || tws_ws(c))) {
            return p;
        }
        p++;
    }
    return p;
}

int tw_parse_uint_array(const char *buf, const tw_value *v, uint64_t max,
                        int64_t *out, size_t *err_index, int path)
{
    const uint8_t *p, *e;
    size_t i = 0;
    if (!tws_array_inside(buf, v, &p, &e)) {
        *err_index = 0;
        return -1;
    }
    if (max > (uint64_t)INT64_MAX)
        max = (uint64_t)INT64_MAX;
#ifdef TW_SIMD16
    /* Compact runs ("123,45,6789,") a block of 64 bytes at a time (tws_uint_block), while
       the blocks give elements; then the general walk. */
    const int rpath = tw_path_resolve(path);
    if (rpath != TW_PATH_SCALAR) {
        while (e - p >= 72 && i < v->count) {
            size_t got = tws_uint_block_on(rpath, p, max, v->count - i, (uint64_t *)(void *)(out + i), &p);
            if (!got)
                break;
            i += got;
        }
        p = tws_skip_ws(p, e);
    }
#else
    (void)path;
#endif
    while (p < e && i < v->count) {
        uint64_t x;
        /* Fast path: 1 to 7 digits followed by ',', ']' or whitespace,
           eight bytes at a time; anything else (and the last few bytes)
           goes through tws_uint_elem. */
        if (TW_LIKELY(e - p >= 8)) {
            unsigned n = tws_digits8(p, &x);
            uint8_t c = p[n];
            if (n && (c == ',' || c == ']' || tws_ws(c)) && (n == 1 || *p != '0')) {
                if (TW_LIKELY(x <= max)) {
                    out[i++] = (int64_t)x;
                    p += n;
                    if (TW_LIKELY(c == ',')) {
                        p++;
                        if (TW_UNLIKELY(p < e && tws_ws(*p)))
                            p = tws_skip_ws(p, e);
                    } else {
                        p = tws_skip_ws(p, e);
                        if (p < e && *p == ',')
                            p = tws_skip_ws(p + 1, e);
                    }
                    continue;
                }
            }
        }
        if (!tws_uint_elem(&p, e, max, &x)) {
            *err_index = i;
            return -1;
        }
        out[i++] = (int64_t)x;
        p = tws_skip_ws(p, e);
        if (p < e && *p == ',')
            p = tws_skip_ws(p + 1, e);
    }
    return 0;
}

int tw_array_element(const char *buf, const tw_value *v, size_t index,
                     size_t *start, size_t *end)
{
    const uint8_t *b = (const uint8_t *)buf, *p, *e;
    size_t i = 0;
    if (index >= v->count || !tws_array_inside(buf, v, &p, &e))
        return -1;
    for (;;) {
        const uint8_t *q = tws_skip_value(p, e);
        if (i == index) {
            *start = (size_t)(p - b);
            *end = (size_t)(q - b);
            return 0;
        }
        i++;
        p = tws_skip_ws(q, e);
        if (p < e && *p == ',')
            p = tws_skip_ws(p + 1, e);
        if (p >= e)
            return -1;
    }
}

int tw_count_nested(const char *buf, const tw_value *v, size_t *total)
{
    const uint8_t *p, *e;
    size_t t = 0;
    *total = 0;
    if (!tws_array_inside(buf, v, &p, &e))
        return -1;
    while (p < e) {
        if (*p == '[') {
            p = tws_skip_ws(p + 1, e);
            while (p < e && *p != ']') {
                p = tws_skip_value(p, e);
                t++;
                p = tws_skip_ws(p, e);
                if (p < e && *p == ',')
                    p = tws_skip_ws(p + 1, e);
            }
            if (p < e)
                p++; /* ']' */
        } else {
            p = tws_skip_value(p, e);
        }
        p = tws_skip_ws(p, e);
        if (p < e && *p == ',')
            p = tws_skip_ws(p + 1, e);
    }
    *total = t;
    return 0;
}

size_t tw_nested_bound(const char *buf, const tw_value *v)
{
    const uint8_t *p, *e;
    size_t n = 0;
    if (!v->present || v->type != TW_T_ARRAY)
        return 0;
    p = (const uint8_t *)buf + v->start;
    e = (const uint8_t *)buf + v->end;
    for (; e - p >= 8; p += 8) { /* the bytes equal to ',', eight at a time */
        const uint64_t low = UINT64_C(0x7F7F7F7F7F7F7F7F);
        uint64_t x = tw_load_le64(p) ^ UINT64_C(0x2C2C2C2C2C2C2C2C); /* a comma is now a zero byte */
        n += tw_popcount64(~(((x & low) + low) | x | low));
    }
    for (; p < e; p++)
        n += *p == ',';
    return n + v->count;
}

int tw_parse_nested_uint(const char *buf, const tw_value *v, uint64_t max,
                         int64_t *offsets, int32_t *values, size_t *err_row)
{
    const uint8_t *p, *e;
    size_t r = 0, k = 0;
    if (!tws_array_inside(buf, v, &p, &e)) {
        *err_row = 0;
        return -1;
    }
    if (max > (uint64_t)INT32_MAX)
        max = (uint64_t)INT32_MAX;
    offsets[0] = 0;
    while (p < e && r < v->count) {
        if (*p != '[') {
            *err_row = r;
            return -1;
        }
        p = tws_skip_ws(p + 1, e);
        while (p < e && *p != ']') {
            uint64_t x;
            if (!tws_uint_elem(&p, e, max, &x)) {
                *err_row = r;
                return -1;
            }
            values[k++] = (int32_t)x;
            p = tws_skip_ws(p, e);
            if (p < e && *p == ',')
                p = tws_skip_ws(p + 1, e);
        }
        if (p < e)
            p++; /* ']' */
        offsets[++r] = (int64_t)k;
        p = tws_skip_ws(p, e);
        if (p < e && *p == ',')
            p = tws_skip_ws(p + 1, e);
    }
    return 0;
}

/* Decode the escapes of a validated string body [s, e) into d.  Returns the
   length, or SIZE_MAX if it would exceed cap. */
size_t tw_unescape_body(const uint8_t *s, const uint8_t *e, uint8_t *d, size_t cap)
{
    size_t n = 0;
    while (s < e) {
        const uint8_t *bs = (const uint8_t *)memchr(s, '\\', (size_t)(e - s));
        size_t run = (size_t)((bs ? bs : e) - s);
        uint32_t cp;
        if (run > cap - n)
            return SIZE_MAX;
        memcpy(d + n, s, run);
        n += run;
        s += run;
        if (!bs)
            break;
        if (s[1] != 'u') {
            if (n == cap)
                return SIZE_MAX;
            d[n++] = tw_escape_byte(s[1]);
            s += 2;
            continue;
        }
        cp = (uint32_t)tw_hex4(s + 2);
        s += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)tw_hex4(s + 2) - 0xDC00);
            s += 6;
        }
        if (cp < 0x80) {
            if (cap - n < 1)
                return SIZE_MAX;
            d[n++] = (uint8_t)cp;
        } else if (cp < 0x800) {
            if (cap - n < 2)
                return SIZE_MAX;
            d[n++] = (uint8_t)(0xC0 | (cp >> 6));
            d[n++] = (uint8_t)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            if (cap - n < 3)
                return SIZE_MAX;
            d[n++] = (uint8_t)(0xE0 | (cp >> 12));
            d[n++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            d[n++] = (uint8_t)(0x80 | (cp & 0x3F));
        } else {
            if (cap - n < 4)
                return SIZE_MAX;
            d[n++] = (uint8_t)(0xF0 | (cp >> 18));
            d[n++] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
            d[n++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            d[n++] = (uint8_t)(0x80 | (cp & 0x3F));
        }
    }
    return n;
}

size_t tw_unescape(const char *buf, const tw_value *v, char *dst)
{
    const uint8_t *s, *e;
    if (!v->present || v->type != TW_T_STRING)
        return 0;
    s = (const uint8_t *)buf + v->start;
    e = (const uint8_t *)buf + v->end;
    if (!v->has_escape) {
        memcpy(dst, s, (size_t)(e - s));
        return (size_t)(e - s);
    }
    return tw_unescape_body(s, e, (uint8_t *)dst, (size_t)(e - s));
}
