/* Head selection and the per-token rules (csrc/rules) on one fuzz input.

   The input describes a response's rows: a header (tokens, k, num_top, whether supports are
   recorded), then per token a row of (id, value) entries, its sampled id and support; ids
   come from a small alphabet (so rows repeat ids and rows share them) or are any 32 bits,
   values from a palette of the edges (the -9999 sentinel, zeros of both signs, the 1e-6 and
   mass thresholds, infinities, NaN, subnormals, the exp overflow) or any float. Every kernel
   gets arrays of exactly the size it may use and the preconditions its header states.

   Besides the sanitizers, it checks what tw_heads.h promises: tw_compact_heads decides as
   tw_compact_rows_candidates and then tw_select_heads on the candidates (the same token, the
   same reasons, the same heads with their values narrowed to float); tw_compact_rows_candidates
   decides as tw_compact_rows and gives tw_compact_candidates' candidates;
   tw_compact_heads_checked finds tw_compact_values_bad's first value, and without one decides
   as tw_compact_heads; every output goes to the log. */
#ifndef FUZZ_HEADS_H
#define FUZZ_HEADS_H

#include "rules/tw_heads.h"
#include "rules/tw_validate.h"

#include "fuzz_util.h"

#define FZ_MAX_TOKENS 48
#define FZ_MAX_ROW 80

static double fz_value_of(fz_in *in)
{
    static const double palette[] = {
        0.0, -0.0, 1e-6, 1.0000001e-6, -1e-5, -9999.0, -INFINITY, INFINITY, NAN, -0.6931471805599453,
        -1.3862943611198906, -1.0986122886681098, -700.0, -745.2, 709.8, 1e-310, -1e-310, -2.3025850929940455,
        -0.10536051565782628, -4.605170185988091, 9.999500033330834e-05, -1e-4, -0.5, -20.0};
    uint8_t b = fz_byte(in);
    if (b < 2 * sizeof palette / sizeof palette[0])
        return palette[b % (sizeof palette / sizeof palette[0])];
    if (b < 200) /* a small negative value: a plausible logprob */
        return -(double)fz_byte(in) / 16.0 - (double)(b & 15) / 4096.0;
    float f;
    uint32_t bits = fz_u32(in);
    memcpy(&f, &bits, sizeof f);
    return (double)f;
}

static uint32_t fz_id_of(fz_in *in, int narrow)
{
    return narrow ? fz_byte(in) % 12 : fz_u32(in);
}

typedef struct {
    size_t n, total, stotal;
    int64_t k, num_top;
    int supports, absent_ok;
    int64_t *roff, *soff, *sampled;
    uint32_t *row_ids;
    float *row_vals;
    int32_t *sup;
} fz_rows;

static void fz_rows_read(fz_rows *r, fz_in *in)
{
    uint8_t h = fz_byte(in);
    int narrow = !(h & 1);
    r->supports = (h >> 1) & 1;
    r->absent_ok = (h >> 2) & 1;
    r->n = fz_byte(in) % (FZ_MAX_TOKENS + 1);
    r->k = (int64_t)(fz_byte(in) % 24) - 1;
    r->num_top = (int64_t)(fz_byte(in) % 24) - 1;
    r->roff = (int64_t *)malloc((r->n + 1) * sizeof *r->roff);
    r->soff = (int64_t *)malloc((r->n + 1) * sizeof *r->soff);
    r->sampled = (int64_t *)malloc((r->n + 1) * sizeof *r->sampled);
    r->row_ids = (uint32_t *)malloc((r->n * FZ_MAX_ROW + 1) * sizeof *r->row_ids);
    r->row_vals = (float *)malloc((r->n * FZ_MAX_ROW + 1) * sizeof *r->row_vals);
    r->sup = (int32_t *)malloc((r->n * FZ_MAX_ROW + 1) * sizeof *r->sup);
    if (!r->roff || !r->soff || !r->sampled || !r->row_ids || !r->row_vals || !r->sup)
        abort();
    r->roff[0] = r->soff[0] = 0;
    size_t at = 0, sat = 0;
    for (size_t t = 0; t < r->n; t++) {
        size_t len = fz_byte(in) % (FZ_MAX_ROW + 1);
        for (size_t i = 0; i < len; i++, at++) {
            r->row_ids[at] = fz_id_of(in, narrow);
            r->row_vals[at] = (float)fz_value_of(in);
        }
        uint8_t s = fz_byte(in);
        /* the sampled id: a row entry's (most often), or any */
        r->sampled[t] = len && s < 200 ? (int64_t)r->row_ids[at - 1 - s % len] : (int64_t)fz_id_of(in, narrow);
        size_t slen = r->supports ? fz_byte(in) % 8 : 0;
        for (size_t i = 0; i < slen; i++, sat++) {
            uint8_t c = fz_byte(in);
            r->sup[sat] = len && c < 200 ? (int32_t)r->row_ids[at - 1 - c % len] : (int32_t)fz_id_of(in, narrow);
        }
        r->roff[t + 1] = (int64_t)at;
        r->soff[t + 1] = (int64_t)sat;
    }
    r->total = at;
    r->stotal = sat;
}

static void fz_rows_free(fz_rows *r)
{
    free(r->roff);
    free(r->soff);
    free(r->sampled);
    free(r->row_ids);
    free(r->row_vals);
    free(r->sup);
}

/* tw_select_heads over candidates in CSR form; logs and returns its verdict. */
static ptrdiff_t fz_select(fz_log *l, size_t n, const int64_t *coff, const int64_t *ids, const double *lps,
                           const int64_t *sampled, const double *sampled_lps, int64_t k, const int64_t *soff,
                           const int32_t *sup, int64_t *out_off, int64_t *out_ids, double *out_lps, int *code,
                           int path)
{
    ptrdiff_t t = tw_select_heads(n, coff, ids, lps, sampled, sampled_lps, k, soff, sup, out_off, out_ids,
                                  out_lps, code, path);
    size_t done = t < 0 ? n : (size_t)t;
    fz_u64(l, (uint64_t)t);
    fz_u64(l, (uint64_t)*code);
    FZ_CHECK((t < 0) == (*code == TW_HEAD_OK), "token %td with code %d", t, *code);
    fz_put(l, out_off, (done + 1) * sizeof *out_off);
    FZ_CHECK(out_off[0] == 0 && (size_t)out_off[done] <= (size_t)(coff[n] - coff[0]),
             "heads of %lld entries from %lld candidates", (long long)out_off[done], (long long)(coff[n] - coff[0]));
    fz_put(l, out_ids, (size_t)out_off[done] * sizeof *out_ids);
    fz_f64s(l, out_lps, (size_t)out_off[done]);
    return t;
}

static void fz_heads(const uint8_t *data, size_t size, int path, fz_log *l)
{
    fz_in in = {data, size};
    fz_rows r;
    fz_rows_read(&r, &in);
    size_t n = r.n, cap = r.total + 1;
    const int64_t *soff = r.supports ? r.soff : NULL;
    const int32_t *sup = r.supports ? r.sup : NULL;

    /* The rules over flat arrays. */
    fz_u64(l, (uint64_t)tw_compact_values_bad(r.row_vals, r.total));
    fz_u64(l, (uint64_t)tw_packed_f32_bad(r.row_vals, r.total));
    double *promoted = (double *)malloc(cap * sizeof *promoted);
    if (!promoted)
        abort();
    for (size_t i = 0; i < r.total; i++)
        promoted[i] = (double)r.row_vals[i];
    fz_u64(l, (uint64_t)tw_packed_f64_bad(promoted, r.total));
    fz_u64(l, (uint64_t)tw_i32_negative(r.sup, r.stotal));
    fz_u64(l, (uint64_t)tw_offsets_not_rising(r.roff, n + 1));
    for (size_t w = 1; w <= 4; w *= 2)
        fz_u64(l, (uint64_t)tw_first_at_or_above(r.row_ids, r.total * 4 / w, w, (uint32_t)(r.k & 0xff) << (w * 4)));

    /* Compact rows: the row rule, the candidates, both in one pass. */
    float *out_sampled = (float *)calloc(n + 1, sizeof(float)), *rc_sampled = (float *)calloc(n + 1, sizeof(float));
    int64_t *coff = (int64_t *)calloc(n + 1, sizeof(int64_t)), *coff2 = (int64_t *)calloc(n + 1, sizeof(int64_t));
    int64_t *cand_ids = (int64_t *)calloc(cap, sizeof(int64_t)), *cand_ids2 = (int64_t *)calloc(cap, sizeof(int64_t));
    double *cand_lps = (double *)calloc(cap, sizeof(double)), *cand_lps2 = (double *)calloc(cap, sizeof(double));
    if (!out_sampled || !rc_sampled || !coff || !coff2 || !cand_ids || !cand_ids2 || !cand_lps || !cand_lps2)
        abort();
    int kind = -1, kind2 = -1;
    ptrdiff_t bad_row = tw_compact_rows(r.row_ids, r.row_vals, r.roff, n, r.sampled, out_sampled, &kind, path);
    size_t good_rows = bad_row < 0 ? n : (size_t)bad_row;
    fz_u64(l, (uint64_t)bad_row);
    fz_u64(l, (uint64_t)kind);
    fz_f32s(l, out_sampled, good_rows);
    /* every rule at once, the values rule too: whether they hold (a bad row's index is any
       bad row's) and then the same sampled values on every path */
    float *all_sampled = (float *)calloc(n + 1, sizeof(float));
    if (!all_sampled)
        abort();
    ptrdiff_t valid = tw_compact_rows_valid(r.row_ids, r.row_vals, r.roff, n, r.sampled, all_sampled, path);
    fz_u64(l, (uint64_t)(valid < 0));
    if (valid < 0)
        fz_f32s(l, all_sampled, n);
    free(all_sampled);

    int crc = tw_compact_candidates(n, r.roff, r.row_ids, r.row_vals, r.num_top, coff, cand_ids, cand_lps, path);
    fz_u64(l, (uint64_t)crc);
    if (crc == TW_HEAD_OK) {
        fz_put(l, coff, (n + 1) * sizeof *coff);
        fz_put(l, cand_ids, (size_t)coff[n] * sizeof *cand_ids);
        fz_f64s(l, cand_lps, (size_t)coff[n]);
    }

    ptrdiff_t bad2 = tw_compact_rows_candidates(n, r.roff, r.row_ids, r.row_vals, r.sampled, r.num_top, rc_sampled,
                                                &kind2, coff2, cand_ids2, cand_lps2, path);
    fz_u64(l, (uint64_t)bad2);
    fz_u64(l, (uint64_t)kind2);
    fz_put(l, coff2, (n + 1) * sizeof *coff2);
    fz_put(l, cand_ids2, (size_t)coff2[n] * sizeof *cand_ids2);
    fz_f64s(l, cand_lps2, (size_t)coff2[n]);
    if (kind != TW_ROW_NOMEM && kind2 != TW_ROW_NOMEM && crc == TW_HEAD_OK) {
        FZ_CHECK(bad2 == bad_row && kind2 == kind, "tw_compact_rows_candidates: row %td (%d); tw_compact_rows: %td (%d)",
                 bad2, kind2, bad_row, kind);
        FZ_CHECK(!memcmp(rc_sampled, out_sampled, good_rows * sizeof(float)), "the sampled values differ");
        FZ_CHECK(!memcmp(coff2, coff, (good_rows + 1) * sizeof *coff) &&
                     !memcmp(cand_ids2, cand_ids, (size_t)coff[good_rows] * sizeof *cand_ids) &&
                     !memcmp(cand_lps2, cand_lps, (size_t)coff[good_rows] * sizeof *cand_lps),
                 "tw_compact_rows_candidates' candidates differ from tw_compact_candidates'");
        for (size_t t = good_rows; t < n; t++)
            FZ_CHECK(coff2[t + 1] == coff2[good_rows], "coff not flat after the bad row %zu", good_rows);
    }

    /* Heads of the candidates of the rows before the first bad one, then compact rows straight to heads. */
    int64_t *out_off = (int64_t *)calloc(n + 1, sizeof(int64_t)), *hoff = (int64_t *)calloc(n + 1, sizeof(int64_t));
    int64_t *out_ids = (int64_t *)calloc(cap, sizeof(int64_t)), *hids = (int64_t *)calloc(cap, sizeof(int64_t));
    double *out_lps = (double *)calloc(cap, sizeof(double)), *sampled_lps = (double *)calloc(n + 1, sizeof(double));
    float *hlps = (float *)calloc(cap, sizeof(float)), *h_sampled = (float *)calloc(n + 1, sizeof(float));
    if (!out_off || !hoff || !out_ids || !hids || !out_lps || !sampled_lps || !hlps || !h_sampled)
        abort();
    size_t heads_n = bad2 < 0 ? n : (size_t)bad2;
    for (size_t t = 0; t < heads_n; t++)
        sampled_lps[t] = (double)rc_sampled[t];
    int code = -1, row_kind = -1, head_code = -1;
    ptrdiff_t th = fz_select(l, heads_n, coff2, cand_ids2, cand_lps2, r.sampled, sampled_lps, r.k, soff, sup,
                             out_off, out_ids, out_lps, &code, path);
    ptrdiff_t tc = tw_compact_heads(n, r.roff, r.row_ids, r.row_vals, r.sampled, r.num_top, r.k, soff, sup, h_sampled,
                                    hoff, hids, hlps, &row_kind, &head_code, path);
    size_t hdone = tc < 0 ? n : (size_t)tc;
    fz_u64(l, (uint64_t)tc);
    fz_u64(l, (uint64_t)row_kind);
    fz_u64(l, (uint64_t)head_code);
    fz_put(l, hoff, (hdone + 1) * sizeof *hoff);
    fz_put(l, hids, (size_t)hoff[hdone] * sizeof *hids);
    fz_f32s(l, hlps, (size_t)hoff[hdone]);
    fz_f32s(l, h_sampled, hdone);
    if (kind2 != TW_ROW_NOMEM && code != TW_HEAD_NOMEM && row_kind != TW_ROW_NOMEM && head_code != TW_HEAD_NOMEM) {
        ptrdiff_t want = th >= 0 ? th : bad2;
        FZ_CHECK(tc == want && row_kind == (th >= 0 ? TW_ROW_OK : kind2) && head_code == (th >= 0 ? code : TW_HEAD_OK),
                 "tw_compact_heads: token %td (row %d, head %d); the rows and then the heads: %td (row %d, head %d)",
                 tc, row_kind, head_code, want, th >= 0 ? TW_ROW_OK : kind2, th >= 0 ? code : TW_HEAD_OK);
        FZ_CHECK(!memcmp(hoff, out_off, (hdone + 1) * sizeof *hoff) &&
                     !memcmp(hids, out_ids, (size_t)hoff[hdone] * sizeof *hids),
                 "tw_compact_heads' heads differ from tw_select_heads'");
        for (size_t i = 0; i < (size_t)hoff[hdone]; i++)
            FZ_CHECK(!memcmp(&hlps[i], &(float){(float)out_lps[i]}, sizeof(float)) || (isnan(hlps[i]) && isnan(out_lps[i])),
                     "head value %zu: %a, tw_select_heads %a", i, (double)hlps[i], out_lps[i]);
        FZ_CHECK(!memcmp(h_sampled, rc_sampled, hdone * sizeof(float)), "tw_compact_heads' sampled values differ");
    }

    /* The values rule in the rows' pass: its first failure is tw_compact_values_bad's; without
       one, the verdict is tw_compact_heads'. */
    {
        int vkind = -1, vcode = -1;
        ptrdiff_t vbad = -2, vwant = -1;
        ptrdiff_t tv = tw_compact_heads_checked(n, r.roff, r.row_ids, r.row_vals, r.sampled, r.num_top, r.k, soff, sup,
                                                h_sampled, hoff, hids, hlps, &vkind, &vcode, path, &vbad, NULL);
        if (n && (vwant = tw_compact_values_bad(r.row_vals + r.roff[0], (size_t)(r.roff[n] - r.roff[0]))) >= 0)
            vwant += r.roff[0];
        fz_u64(l, (uint64_t)vbad);
        FZ_CHECK(vbad == vwant, "tw_compact_heads_checked: value %td, tw_compact_values_bad %td", vbad, vwant);
        if (vbad < 0 && vkind != TW_ROW_NOMEM && vcode != TW_HEAD_NOMEM && row_kind != TW_ROW_NOMEM &&
            head_code != TW_HEAD_NOMEM)
            FZ_CHECK(tv == tc && vkind == row_kind && vcode == head_code,
                     "tw_compact_heads_checked: token %td (row %d, head %d); tw_compact_heads %td (%d, %d)", tv, vkind,
                     vcode, tc, row_kind, head_code);
    }

    /* The support rule in the same pass too: after the values rule, its first failure is
       tw_support_rows' (an empty row absent); without one, the verdict is tw_compact_heads'. */
    if (soff) {
        int skind = -1, scode = -1, snomem = 0;
        ptrdiff_t vbad = -2, sbad = -2, vwant = -1, swant;
        ptrdiff_t ts = tw_compact_heads_checked(n, r.roff, r.row_ids, r.row_vals, r.sampled, r.num_top, r.k, soff, sup,
                                                h_sampled, hoff, hids, hlps, &skind, &scode, path, &vbad, &sbad);
        if (n && (vwant = tw_compact_values_bad(r.row_vals + r.roff[0], (size_t)(r.roff[n] - r.roff[0]))) >= 0)
            vwant += r.roff[0];
        swant = n ? tw_support_rows(sup, soff, n, r.sampled, 1, &snomem, path) : -1;
        fz_u64(l, (uint64_t)sbad);
        FZ_CHECK(vbad == vwant, "tw_compact_heads_checked (supports): value %td, tw_compact_values_bad %td", vbad, vwant);
        if (vbad < 0 && !snomem && skind != TW_ROW_NOMEM)
            FZ_CHECK(sbad == swant, "tw_compact_heads_checked: support %td, tw_support_rows %td", sbad, swant);
        if (vbad < 0 && sbad < 0 && skind != TW_ROW_NOMEM && scode != TW_HEAD_NOMEM && row_kind != TW_ROW_NOMEM &&
            head_code != TW_HEAD_NOMEM)
            FZ_CHECK(ts == tc && skind == row_kind && scode == head_code,
                     "tw_compact_heads_checked (supports): token %td (row %d, head %d); tw_compact_heads %td (%d, %d)",
                     ts, skind, scode, tc, row_kind, head_code);
    }

    /* Supports on their own. */
    if (r.supports) {
        int nomem = 0;
        ptrdiff_t bad_sup = tw_support_rows(r.sup, r.soff, n, r.sampled, r.absent_ok, &nomem, path);
        fz_u64(l, (uint64_t)bad_sup);
        fz_u64(l, (uint64_t)nomem);
    }

    free(promoted);
    free(out_sampled);
    free(rc_sampled);
    free(coff);
    free(coff2);
    free(cand_ids);
    free(cand_ids2);
    free(cand_lps);
    free(cand_lps2);
    free(out_off);
    free(hoff);
    free(out_ids);
    free(hids);
    free(out_lps);
    free(sampled_lps);
    free(hlps);
    free(h_sampled);
    fz_rows_free(&r);
}

#endif
