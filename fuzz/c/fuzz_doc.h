/* The structural scanner (csrc/json) and the record readers (csrc/wire) on one fuzz input.

   Input: a settings byte, then the document. The settings byte chooses the scan's mode
   (bits 0-1 modulo 3: generate, OpenAI-compatible, SGLang), decoding during the scan (bit 2),
   records read during the scan (bit 3), every field blanked (bit 4) and a small depth limit
   (bit 5; bits 6-7 choose it). fz_doc scans on `path` and then:
     FZ_SCAN     every recorded value read back with the scan's helpers (ids, nested lists,
                 strings, elements, the blobs decoded during the scan, the stripped copy);
     FZ_RECORDS  every record reader over every array recorded in a choice.
   Besides the sanitizers, it checks what the headers promise: the scan accepts and rejects
   (and where) whatever the settings; what the scan read as it went equals what the helpers
   and readers give after it (tw_take_uints and tw_parse_uint_array, tw_take_nested and
   tw_parse_nested_uint, tw_rec_take and tw_rec_parse); a blob decoded during the scan is the
   string's base64; the stripped copy is as long as tw_stripped_size says, its blanks sorted
   and disjoint; tw_rec_count's room suffices for tw_rec_parse, which gives the same results
   into caller-sized storage; every output goes to the log that fuzz_paths.c compares. */
#ifndef FUZZ_DOC_H
#define FUZZ_DOC_H

#include "base/tw_mem.h"
#include "codecs/tw_base64.h"
#include "json/tw_scan.h"
#include "wire/tw_records.h"

#include "fuzz_util.h"

enum { FZ_SCAN = 1, FZ_RECORDS = 2 };

/* Choices read back (a document may record thousands). */
#define FZ_MAX_CHOICES 8

static void fz_settings(tw_doc *d, uint8_t s, int path)
{
    tw_doc_init(d);
    d->path = path;
    d->b64_path = path;
    d->openai = (s & 3) % 3 == 1;
    d->sglang = (s & 3) % 3 == 2;
    d->decode = (s >> 2) & 1;
    if (s & 8)
        tw_rec_read_during_scan(d);
    if (s & 16)
        d->blank_fields = TW_NFIELDS >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << TW_NFIELDS) - 1;
    if (s & 32)
        d->max_depth = (size_t[]){1, 3, 6, 40}[s >> 6];
}

static void fz_value(fz_log *l, const tw_value *v)
{
    uint8_t head[8] = {v->present, v->type, v->has_escape, v->ascii, v->all_int, v->read,
                       (uint8_t)(v->blob != 0), 0};
    fz_put(l, head, sizeof head);
    fz_u64(l, v->start);
    fz_u64(l, v->end);
    fz_u64(l, v->count);
}

/* The ids of an array, by tw_parse_uint_array and, when the scan read them, tw_take_uints
   (which must agree). Returns the parsed ids (malloc'd, count + 1) when every one is in
   [0, 2^32), else NULL. */
static int64_t *fz_uints(fz_log *l, const char *buf, const tw_doc *d, const tw_value *v, int path)
{
    int64_t *out = (int64_t *)malloc((v->count + 1) * sizeof *out);
    int64_t *took = (int64_t *)malloc((v->count + 1) * sizeof *took);
    const uint64_t maxes[2] = {UINT32_MAX, UINT64_MAX};
    int all_ok = 0;
    if (!out || !took)
        abort();
    for (int m = 0; m < 2; m++) {
        size_t err = 0, err2 = 0;
        int rc = tw_parse_uint_array(buf, v, maxes[m], out, &err, path);
        size_t good = rc == 0 ? v->count : err;
        fz_u64(l, (uint64_t)rc);
        fz_u64(l, err);
        fz_put(l, out, good * sizeof *out);
        if (m == 0)
            all_ok = rc == 0;
        if (v->read) {
            int rc2 = tw_take_uints(d, v, maxes[m], took, &err2);
            FZ_CHECK(rc2 == rc && (rc == 0 || err2 == err) && !memcmp(out, took, good * sizeof *out),
                     "tw_take_uints (rc %d, err %zu) differs from tw_parse_uint_array (rc %d, err %zu)",
                     rc2, err2, rc, err);
        }
    }
    free(took);
    if (!all_ok) {
        free(out);
        return NULL;
    }
    return out;
}

/* A list of lists, by tw_parse_nested_uint and, when the scan read it, tw_take_nested. */
static void fz_nested(fz_log *l, const char *buf, const tw_doc *d, const tw_value *v, int read)
{
    size_t total = 0, bound = tw_nested_bound(buf, v), bad = 0, bad2 = 0;
    int rc = tw_count_nested(buf, v, &total);
    FZ_CHECK(rc == 0 && total <= bound, "tw_count_nested %d: %zu elements, bound %zu", rc, total, bound);
    int64_t *offs = (int64_t *)malloc((v->count + 1) * sizeof *offs);
    int64_t *offs2 = (int64_t *)malloc((v->count + 1) * sizeof *offs2);
    int32_t *vals = (int32_t *)malloc((total + 1) * sizeof *vals);
    int32_t *vals2 = (int32_t *)malloc((total + 1) * sizeof *vals2);
    if (!offs || !offs2 || !vals || !vals2)
        abort();
    rc = tw_parse_nested_uint(buf, v, INT32_MAX, offs, vals, &bad);
    size_t rows = rc == 0 ? v->count : bad;
    fz_u64(l, (uint64_t)rc);
    fz_u64(l, total);
    fz_u64(l, bad);
    fz_put(l, offs, (rows + 1) * sizeof *offs);
    fz_put(l, vals, (size_t)offs[rows] * sizeof *vals);
    if (read) {
        FZ_CHECK(tw_nested_total(d, v) == total, "tw_nested_total %zu != %zu", tw_nested_total(d, v), total);
        int rc2 = tw_take_nested(d, v, INT32_MAX, offs2, vals2, &bad2);
        FZ_CHECK(rc2 == rc && (rc == 0 || bad2 == bad) &&
                     !memcmp(offs, offs2, (rows + 1) * sizeof *offs) &&
                     !memcmp(vals, vals2, (size_t)offs[rows] * sizeof *vals),
                 "tw_take_nested (rc %d, row %zu) differs from tw_parse_nested_uint (rc %d, row %zu)", rc2,
                 bad2, rc, bad);
    }
    free(offs);
    free(offs2);
    free(vals);
    free(vals2);
}

/* A string: its unescaped text, and the blob the scan decoded (which must be its base64). */
static void fz_string(fz_log *l, const char *buf, tw_doc *d, const tw_value *v, int path)
{
    size_t n = v->end - v->start;
    char *text = (char *)malloc(n + 1);
    if (!text)
        abort();
    size_t len = tw_unescape(buf, v, text);
    FZ_CHECK(len <= n, "tw_unescape wrote %zu bytes for %zu", len, n);
    fz_u64(l, len);
    fz_put(l, text, len);
    free(text);
    size_t blen = 0;
    uint8_t *blob = tw_take_blob(d, v, &blen);
    if (blob) {
        ptrdiff_t size = tw_b64_decoded_size(buf + v->start, n);
        uint8_t *dec = (uint8_t *)malloc((size_t)(size > 0 ? size : 1));
        if (!dec)
            abort();
        ptrdiff_t got = size < 0 ? -1 : tw_b64_decode(buf + v->start, n, dec, (size_t)size, path, NULL);
        FZ_CHECK(got == (ptrdiff_t)blen && !memcmp(dec, blob, blen),
                 "a blob of %zu bytes from the scan, tw_b64_decode gives %td", blen, got);
        fz_u64(l, blen);
        fz_put(l, blob, blen);
        free(dec);
        tw_mem_free(blob);
        FZ_CHECK(tw_take_blob(d, v, &blen) == NULL, "a blob taken twice");
    }
}

static void fz_elements(fz_log *l, const char *buf, const tw_value *v)
{
    size_t idx[3] = {0, v->count / 2, v->count}, s = 0, e = 0;
    for (int i = 0; i < 3; i++) {
        int rc = tw_array_element(buf, v, idx[i], &s, &e);
        FZ_CHECK(rc == (idx[i] < v->count ? 0 : -1) && (rc || (v->start < s && s <= e && e < v->end)),
                 "tw_array_element(%zu of %zu): %d [%zu, %zu)", idx[i], v->count, rc, s, e);
        fz_u64(l, rc ? 0 : s);
        fz_u64(l, rc ? 0 : e);
    }
}

/* Read back one recorded value with the helpers its type and field take. */
static void fz_readback(fz_log *l, const char *buf, tw_doc *d, const tw_value *v, int field, int path)
{
    fz_value(l, v);
    if (!v->present)
        return;
    if (v->type == TW_T_STRING) {
        fz_string(l, buf, d, v, path);
    } else if (v->type == TW_T_ARRAY) {
        int nested = field == TW_F_SAMPLING_MASK || field == TW_F_SGL_MASK;
        int records = field == TW_F_LOGPROBS_CONTENT;
        fz_elements(l, buf, v);
        fz_nested(l, buf, d, v, nested && v->read);
        tw_value ints = *v;
        if (nested || records)
            ints.read = 0; /* the scan's read means rows or entries there, not ids */
        free(fz_uints(l, buf, d, &ints, path));
    }
}

static void fz_strip(fz_log *l, const char *buf, size_t len, const tw_doc *d)
{
    size_t size = tw_stripped_size(d, len), blanked = 0;
    for (size_t i = 0; i < d->nblank; i++) {
        const tw_span *s = &d->blank[i];
        FZ_CHECK(s->start <= s->end && s->end <= len && (i == 0 || d->blank[i - 1].end <= s->start),
                 "blank span %zu [%zu, %zu) out of order or out of bounds", i, s->start, s->end);
        blanked += s->end - s->start;
    }
    FZ_CHECK(blanked == d->blank_bytes && size == len - blanked, "stripped size %zu, blanks %zu of %zu", size,
             blanked, len);
    char *out = (char *)malloc(size + 1);
    if (!out)
        abort();
    tw_strip(buf, len, d, out);
    fz_u64(l, size);
    fz_put(l, out, size);
    free(out);
}

/* ---- the record readers over one recorded array ---- */

typedef struct {
    tw_rec_result res;
    double *sampled, *entry_lps;
    int64_t *coff;
    tw_rec_cands cands;
} fz_rec;

static void fz_rec_alloc(fz_rec *r, size_t n)
{
    memset(r, 0, sizeof *r);
    r->sampled = (double *)calloc(n + 1, sizeof *r->sampled);
    r->entry_lps = (double *)calloc(n + 1, sizeof *r->entry_lps);
    r->coff = (int64_t *)calloc(n + 1, sizeof *r->coff);
    if (!r->sampled || !r->entry_lps || !r->coff)
        abort();
    r->cands.grow = 1;
}

static void fz_rec_release(fz_rec *r)
{
    free(r->sampled);
    free(r->entry_lps);
    free(r->coff);
    if (r->cands.grow)
        tw_rec_cands_free(&r->cands);
}

/* The outputs tw_rec_parse defines (what its header says is set after each outcome). */
static void fz_rec_log(fz_log *l, int rc, const fz_rec *r, size_t n, int want_top)
{
    fz_u64(l, (uint64_t)rc);
    if (rc != TW_REC_OK)
        return;
    const tw_rec_result *res = &r->res;
    size_t s = res->sampled_err < 0 ? n : (size_t)res->sampled_err;
    size_t t = res->top_err < 0 ? n : (size_t)res->top_err;
    fz_u64(l, (uint64_t)res->sampled_err);
    fz_u64(l, (uint64_t)res->sampled_code);
    fz_u64(l, (uint64_t)res->top_err);
    fz_u64(l, (uint64_t)res->top_code);
    fz_f64s(l, r->sampled, s);
    if (!want_top)
        return;
    fz_u64(l, res->ncand);
    fz_put(l, r->coff, (n + 1) * sizeof *r->coff);
    fz_f64s(l, r->entry_lps, t);
    fz_put(l, r->cands.ids, res->ncand * sizeof(int64_t));
    fz_f64s(l, r->cands.lps, res->ncand);
}

/* Two fz_rec_log-ged outcomes that must be the same. */
static void fz_rec_same(const fz_rec *a, int rca, const fz_rec *b, int rcb, size_t n, int want_top, const char *what)
{
    fz_log la = {0}, lb = {0};
    fz_rec_log(&la, rca, a, n, want_top);
    fz_rec_log(&lb, rcb, b, n, want_top);
    FZ_CHECK(la.n == lb.n && !memcmp(la.p, lb.p, la.n), "%s: rc %d vs %d, sampled_err %td vs %td, top_err %td vs %td",
             what, rca, rcb, a->res.sampled_err, b->res.sampled_err, a->res.top_err, b->res.top_err);
    fz_free(&la);
    fz_free(&lb);
}

static void fz_native(fz_log *l, const char *buf, const tw_doc *d, const tw_value *v, const int64_t *ids,
                      int content, int path)
{
    size_t n = v->count, total = 0;
    fz_rec r, take, fixed;
    int rc_count = tw_rec_count(buf, v, &total, path);
    fz_u64(l, (uint64_t)rc_count);
    fz_u64(l, total);
    for (int want_top = 0; want_top < 2; want_top++) {
        for (int with_ids = 0; with_ids < 1 + (ids != NULL); with_ids++) {
            const int64_t *use = with_ids ? ids : NULL;
            fz_rec_alloc(&r, n);
            int rc = tw_rec_parse(buf, v, n, use, want_top, r.sampled, r.coff, r.entry_lps, &r.cands, &r.res, path);
            fz_rec_log(l, rc, &r, n, want_top);
            if (rc == TW_REC_OK && want_top)
                FZ_CHECK(r.res.ncand <= total, "tw_rec_parse wrote %zu candidates, tw_rec_count said %zu",
                         r.res.ncand, total);
            if (content && v->read) { /* the entries the scan read */
                fz_rec_alloc(&take, n);
                int rc2 = tw_rec_take(d, v, n, use, want_top, take.sampled, take.coff, take.entry_lps,
                                      &take.cands, &take.res);
                fz_rec_same(&r, rc, &take, rc2, n, want_top, "tw_rec_take and tw_rec_parse");
                fz_rec_release(&take);
            }
            if (want_top && rc_count == TW_REC_OK) { /* into storage sized by tw_rec_count */
                fz_rec_alloc(&fixed, n);
                fixed.cands.grow = 0;
                fixed.cands.cap = total;
                fixed.cands.ids = (int64_t *)malloc((total + 1) * sizeof(int64_t));
                fixed.cands.lps = (double *)malloc((total + 1) * sizeof(double));
                int rc3 = tw_rec_parse(buf, v, n, use, 1, fixed.sampled, fixed.coff, fixed.entry_lps, &fixed.cands,
                                       &fixed.res, path);
                fz_rec_same(&r, rc, &fixed, rc3, n, 1, "tw_rec_parse into tw_rec_count's room");
                free(fixed.cands.ids);
                free(fixed.cands.lps);
                fz_rec_release(&fixed);
            }
            fz_rec_release(&r);
        }
    }
}

/* Every reader of an array (they take any array of a document the scan accepted). */
static void fz_readers(fz_log *l, const char *buf, const tw_doc *d, const tw_value *v, const int64_t *ids,
                       int content, int path)
{
    size_t n = v->count;
    int64_t *out_ids = (int64_t *)calloc(n + 1, sizeof *out_ids);
    double *lp = (double *)calloc(n + 1, sizeof *lp), *slp = (double *)calloc(n + 1, sizeof *slp);
    uint8_t *lk = (uint8_t *)calloc(n + 1, 1), *sk = (uint8_t *)calloc(n + 1, 1);
    if (!out_ids || !lp || !slp || !lk || !sk)
        abort();
    fz_native(l, buf, d, v, ids, content, path);

    ptrdiff_t bad = tw_rec_numbers(buf, v, lp, path);
    fz_u64(l, (uint64_t)bad);
    fz_f64s(l, lp, bad < 0 ? n : (size_t)bad);

    size_t named = tw_rec_token_strings(buf, v, out_ids, path);
    fz_u64(l, named);
    fz_put(l, out_ids, n * sizeof *out_ids);

    bad = tw_rec_entries(buf, v, out_ids, lp, lk, slp, sk, path);
    size_t good = bad < 0 ? n : (size_t)bad;
    fz_u64(l, (uint64_t)bad);
    fz_put(l, out_ids, good * sizeof *out_ids);
    fz_f64s(l, lp, good);
    fz_put(l, lk, good);
    fz_f64s(l, slp, good);
    fz_put(l, sk, good);

    bad = tw_rec_triples(buf, v, out_ids, lp, lk, path);
    good = bad < 0 ? n : (size_t)bad;
    fz_u64(l, (uint64_t)bad);
    fz_put(l, out_ids, good * sizeof *out_ids);
    fz_f64s(l, lp, good);
    fz_put(l, lk, good);

    for (int keyed = 0; keyed < 2; keyed++) {
        fz_rec r;
        tw_rec_repeat rep;
        memset(&rep, 0, sizeof rep);
        fz_rec_alloc(&r, n);
        int rc = keyed ? tw_rec_keyed_heads(buf, v, n, r.coff, &r.cands, &r.res, &rep, path)
                       : tw_rec_triple_heads(buf, v, n, r.coff, &r.cands, &r.res, path);
        fz_u64(l, (uint64_t)rc);
        if (keyed) {
            fz_u64(l, (uint64_t)rep.row);
            fz_u64(l, (uint64_t)rep.escaped);
            if (rep.row >= 0)
                FZ_CHECK(v->start < rep.start && rep.start <= rep.end && rep.end < v->end,
                         "a repeated key [%zu, %zu) outside the array", rep.start, rep.end);
        }
        if (rc == TW_REC_OK && !(keyed && (rep.row >= 0 || rep.escaped))) {
            size_t t = r.res.top_err < 0 ? n : (size_t)r.res.top_err;
            fz_u64(l, (uint64_t)r.res.top_err);
            fz_u64(l, (uint64_t)r.res.top_code);
            fz_put(l, r.coff, (t + 1) * sizeof *r.coff);
            fz_u64(l, r.res.ncand);
            FZ_CHECK((size_t)r.coff[t] <= r.res.ncand, "coff[%zu] = %lld past %zu candidates", t,
                     (long long)r.coff[t], r.res.ncand);
            fz_put(l, r.cands.ids, (size_t)r.coff[t] * sizeof(int64_t));
            fz_f64s(l, r.cands.lps, (size_t)r.coff[t]);
        }
        fz_rec_release(&r);
    }
    free(out_ids);
    free(lp);
    free(slp);
    free(lk);
    free(sk);
}

/* Scan data[1:] with the settings data[0] on `path`, then what `what` asks; every output to l. */
static void fz_doc(const uint8_t *data, size_t size, int path, int what, fz_log *l)
{
    if (size < 1)
        return;
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    tw_doc d, plain;
    fz_settings(&d, data[0], path);
    int rc = tw_scan(buf, len, &d);
    fz_u64(l, (uint64_t)rc);
    /* The grammar does not depend on the settings: a plain scan decides the same, at the same byte. */
    fz_settings(&plain, data[0] & 0xE0, path);
    int rc_plain = tw_scan(buf, len, &plain);
    if (rc != TW_ERR_NOMEM && rc_plain != TW_ERR_NOMEM)
        FZ_CHECK(rc == rc_plain && (rc == TW_OK || d.err_pos == plain.err_pos),
                 "settings 0x%02x: rc %d at %zu (%s); without them rc %d at %zu (%s)", data[0], rc,
                 rc ? d.err_pos : 0, rc ? d.err_msg : "", rc_plain, rc_plain ? plain.err_pos : 0,
                 rc_plain ? plain.err_msg : "");
    tw_doc_free(&plain);
    if (rc != TW_OK) {
        if (rc == TW_ERR_SYNTAX) {
            FZ_CHECK(d.err_pos <= len && d.err_msg, "error at %zu of %zu", d.err_pos, len);
            fz_u64(l, d.err_pos);
            fz_put(l, d.err_msg, strlen(d.err_msg));
        }
        tw_doc_free(&d);
        return;
    }
    fz_u64(l, d.top_is_object);
    fz_u64(l, d.nchoices);
    FZ_CHECK(d.nchoices <= d.choices.count || d.sglang, "%zu choice records for %zu choices", d.nchoices,
             d.choices.count);
    size_t nc = d.nchoices < FZ_MAX_CHOICES ? d.nchoices : FZ_MAX_CHOICES;
    if (what & FZ_SCAN) {
        for (int r = 0; r < TW_NROOT; r++)
            fz_readback(l, buf, &d, &d.root[r], -1, path);
        for (size_t c = 0; c < nc; c++) {
            fz_u64(l, d.choice[c].is_object);
            for (int f = 0; f < TW_NFIELDS; f++)
                fz_readback(l, buf, &d, &d.choice[c].f[f], f, path);
        }
        fz_strip(l, buf, len, &d);
    }
    if (what & FZ_RECORDS) {
        for (size_t c = 0; c < nc; c++) {
            const tw_value *tok = &d.choice[c].f[d.sglang ? TW_F_SGL_IDS : TW_F_TOKEN_IDS];
            int64_t *ids = NULL;
            if (tok->present && tok->type == TW_T_ARRAY) {
                tw_value plain_ids = *tok;
                plain_ids.read = 0; /* the ids themselves: what tw_take_uints gives is checked in FZ_SCAN */
                ids = fz_uints(NULL, buf, &d, &plain_ids, path);
            }
            for (int f = 0; f < TW_NFIELDS; f++) {
                const tw_value *v = &d.choice[c].f[f];
                if (v->present && v->type == TW_T_ARRAY)
                    fz_readers(l, buf, &d, v, ids && tok->count == v->count ? ids : NULL,
                               f == TW_F_LOGPROBS_CONTENT, path);
            }
            free(ids);
        }
    }
    tw_doc_free(&d);
}

#endif
