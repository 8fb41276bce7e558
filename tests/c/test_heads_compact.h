/*
 * Compact rows: to candidates and straight to heads against the reference, wide ids,
 * allocation failures, and the exact sums and fast exps.
 * Part of test_heads.c, which includes this file after its harness; not a program of its own.
 */

/* ------------------------------------------------------------------------------------------
 * Compact candidates.
 * ------------------------------------------------------------------------------------------ */

static size_t ref_compact_row(const uint32_t *ids, const float *vals, size_t len, int64_t num_top,
                              int64_t *oid, double *olp) {
    size_t take = num_top < 1 ? 1 : (size_t)num_top, c = 0;
    for (size_t i = 0; i < len; i++) {
        size_t j = 0;
        while (j < c && oid[j] != (int64_t)ids[i]) j++;
        if (j < c) { /* dict(row) keeps the first position and the last value */
            olp[j] = vals[i];
        } else if (c < take) {
            oid[c] = ids[i];
            olp[c++] = vals[i];
        }
    }
    return c;
}

enum { FLOOD_WIDE = 4096 };
static uint32_t *g_flood_wide; /* flood_ids64(FLOOD_WIDE) */

static void test_compact(long count) {
    for (long c = 0; c < count; c++) {
        size_t n = 1 + rndn(40), total = 0;
        size_t lens[41];
        int short_rows = rndn(2); /* every row of at most 32: the one-pass kernel's own path */
        for (size_t t = 0; t < n; t++) {
            static const size_t choices[] = {0, 1, 2, 16, 17, 23, 31, 32, 33, 64, 65};
            lens[t] = rndn(3) ? choices[rndn(11)] : rndn(rndn(50) == 0 ? 2000 : 100);
            if (short_rows && lens[t] > 32) lens[t] = rndn(33);
            total += lens[t];
        }
        int64_t *roff = xmalloc((n + 1) * sizeof(int64_t));
        uint32_t *ids = xmalloc(total * sizeof(uint32_t));
        float *vals = xmalloc(total * sizeof(float));
        roff[0] = 0;
        for (size_t t = 0; t < n; t++) {
            roff[t + 1] = roff[t] + (int64_t)lens[t];
            uint32_t alphabet = (uint32_t)(rndn(3) == 0 ? 3 : rndn(2) ? lens[t] + 1 : 0xFFFFFFFFu);
            int flood = (int)rndn(6); /* 0, 1: ids that collide under a fixed hash (tw_flood.h) */
            if (flood < 2 && alphabet > FLOOD_WIDE) alphabet = FLOOD_WIDE;
            for (size_t i = 0; i < lens[t]; i++) {
                uint32_t id = (uint32_t)rndn(alphabet);
                if (flood < 2) id = flood ? g_flood_wide[id] : flood_id32(id);
                size_t at = (size_t)roff[t] + i, j;
                for (j = (size_t)roff[t]; j < at && ids[j] != id; j++) {}
                ids[at] = id;
                if (j < at)
                    vals[at] = vals[j] == 0.0f && rndn(2) ? -vals[j] : vals[j];
                else
                    vals[at] = rndn(4) == 0 ? 0.0f : -(float)(rnd01() * 10);
                if (rndn(200) == 0) vals[at] = -3.0f; /* unequal repeat: the last one wins */
                if (rndn(400) == 0) vals[at] = NAN;   /* the one-pass kernel hands NaN rows over */
            }
        }
        static const int64_t tops[] = {-1, 0, 1, 2, 5, 20, 22, 31, 32, 33, 64, 4000, INT64_MAX};
        int64_t num_top = tops[rndn(sizeof tops / sizeof tops[0])];
        int64_t *want_off = xmalloc((n + 1) * sizeof(int64_t));
        int64_t *want_ids = xmalloc(total * sizeof(int64_t) + 8);
        double *want_lps = xmalloc(total * sizeof(double) + 8);
        want_off[0] = 0;
        for (size_t t = 0; t < n; t++)
            want_off[t + 1] = want_off[t] + (int64_t)ref_compact_row(ids + roff[t], vals + roff[t], lens[t],
                                                                     num_top, want_ids + want_off[t],
                                                                     want_lps + want_off[t]);
        int64_t *coff = xmalloc((n + 1) * sizeof(int64_t));
        int64_t *cids = xmalloc(total * sizeof(int64_t));
        double *clps = xmalloc(total * sizeof(double));
        for (int p = 0; p < g_npaths; p++) {
            int rc = tw_compact_candidates(n, roff, ids, vals, num_top, coff, cids, clps, g_paths[p]);
            int ok = rc == TW_HEAD_OK && memcmp(coff, want_off, (n + 1) * sizeof(int64_t)) == 0;
            for (int64_t i = 0; ok && i < coff[n]; i++)
                ok = cids[i] == want_ids[i] && equal_bits(clps[i], want_lps[i]);
            CHECK(ok, "compact candidates, path %d, case %ld, num_top %lld", g_paths[p], c,
                  (long long)num_top);
        }
        /* Rows and candidates in one pass: tw_compact_rows, then tw_compact_candidates of the
           rows before the first bad one (the later rows have none), on every path. */
        int64_t *sampled = xmalloc(n * sizeof(int64_t));
        float *want_s = xmalloc(n * sizeof(float)), *got_s = xmalloc(n * sizeof(float));
        for (size_t t = 0; t < n; t++)
            sampled[t] = lens[t] && rndn(8) ? (int64_t)ids[(size_t)roff[t] + rndn(lens[t])]
                                            : (int64_t)rndn(5) - 1;
        for (int p = 0; p < g_npaths; p++) {
            int want_kind = -1, got_kind = -1;
            memset(want_s, 0, n * sizeof(float));
            memset(got_s, 0, n * sizeof(float));
            ptrdiff_t want_bad = tw_compact_rows(ids, vals, roff, n, sampled, want_s, &want_kind, g_paths[p]);
            size_t limit = want_bad >= 0 ? (size_t)want_bad : n;
            int rc = tw_compact_candidates(limit, roff, ids, vals, num_top, want_off, want_ids,
                                           want_lps, g_paths[p]);
            memset(coff, 0xA5, (n + 1) * sizeof(int64_t)); /* nothing left from the last path */
            memset(cids, 0xA5, total * sizeof(int64_t));
            memset(clps, 0xA5, total * sizeof(double));
            ptrdiff_t got_bad = tw_compact_rows_candidates(n, roff, ids, vals, sampled, num_top, got_s,
                                                           &got_kind, coff, cids, clps, g_paths[p]);
            int ok = rc == TW_HEAD_OK && got_bad == want_bad && got_kind == want_kind &&
                     memcmp(got_s, want_s, n * sizeof(float)) == 0 &&
                     memcmp(coff, want_off, (limit + 1) * sizeof(int64_t)) == 0;
            for (size_t t = limit; ok && t < n; t++) ok = coff[t + 1] == coff[limit];
            for (int64_t i = 0; ok && i < coff[limit]; i++)
                ok = cids[i] == want_ids[i] && equal_bits(clps[i], want_lps[i]);
            CHECK(ok, "compact rows and candidates in one pass, path %d, case %ld, bad %td/%td",
                  g_paths[p], c, got_bad, want_bad);
        }
        free(sampled);
        free(want_s);
        free(got_s);
        /* Allocation failure for long rows. */
        if (c % 50 == 0) {
            size_t longest = 0;
            for (size_t t = 0; t < n; t++)
                if (lens[t] > longest) longest = lens[t];
            g_fail_after = 0;
            int rc = tw_compact_candidates(n, roff, ids, vals, num_top, coff, cids, clps, 0);
            g_fail_after = -1;
            CHECK(rc == (longest > 64 ? TW_HEAD_NOMEM : TW_HEAD_OK), "compact nomem: %d", rc);
        }
        free(roff);
        free(ids);
        free(vals);
        free(want_off);
        free(want_ids);
        free(want_lps);
        free(coff);
        free(cids);
        free(clps);
    }
}

/* A head's entries in ranked order: value desc, id asc (insertion sort). */
static void rank_row(uint32_t *ids, float *vals, size_t n) {
    for (size_t j = 1; j < n; j++)
        for (size_t i = j; i > 0 && (vals[i] > vals[i - 1] || (vals[i] == vals[i - 1] && ids[i] < ids[i - 1])); i--) {
            float v = vals[i];
            uint32_t d = ids[i];
            vals[i] = vals[i - 1];
            ids[i] = ids[i - 1];
            vals[i - 1] = v;
            ids[i - 1] = d;
        }
}

/* One compact row as a sampler writes it: the sampled token, then a ranked head of `width`
   (flat, peaked or tied values, a filtered tail at the sentinel, `mass` in all before it), the
   sampled id again among them or not; one case in three disturbed (two entries swapped, a
   sentinel inside, NaN, a value above 1, a zero of the other sign, a repeat appended); tied
   values in the engine's order (not by id) one row in three.
   `plain`: wide enough for a head of k, a mass below the limit, seldom disturbed.
   Returns the row's length; ids below 2^31 when `small_ids`. */
static size_t sampler_row(uint32_t *ids, float *vals, int small_ids, int64_t k, int plain) {
    static const size_t widths[] = {0, 1, 2, 3, 8, 15, 16, 19, 20, 21, 22, 23, 24, 30, 31, 40};
    static const double masses[] = {0.3, 0.9, 0.99989, 0.9999, 1.0, 1.0, 1.0, 1.0001, 1.0002};
    size_t width = widths[rndn(sizeof widths / sizeof widths[0])], len = 0;
    if (plain && k <= 30) width = (size_t)k + 2 + rndn(4); /* enough for a head of k */
    double mass = masses[rndn(plain ? 7 : sizeof masses / sizeof masses[0])], p[40], total = 0.0;
    int shape = (int)rndn(3);
    for (size_t j = 0; j < width; j++)
        p[j] = shape == 0 ? (plain ? 1.0 - 0.001 * (double)j : 1.0) /* flat (exactly: all tied) */
               : shape == 1 ? pow(0.5, (double)j) : 1.0 / (double)(1 + rndn(3));
    for (size_t j = 1; j < width; j++) /* largest first */
        for (size_t i = j; i > 0 && p[i] > p[i - 1]; i--) {
            double x = p[i];
            p[i] = p[i - 1];
            p[i - 1] = x;
        }
    /* a filtered tail (at the sentinel); the mass is that of the candidates before it */
    size_t cut = width && rndn(4) == 0 ? 1 + rndn(width) : width;
    for (size_t j = 0; j < cut; j++) total += p[j];
    uint32_t alphabet = rndn(2) ? (uint32_t)width + 2 : small_ids ? 0x7FFFFFFEu : 0xFFFFFFFFu;
    uint32_t hid[40];
    float hv[40];
    for (size_t j = 0; j < width; j++) {
        uint32_t id;
        size_t i;
        do { /* distinct */
            id = (uint32_t)rndn((size_t)alphabet + 1);
            for (i = 0; i < j && hid[i] != id; i++) {}
        } while (i < j);
        hid[j] = id;
        hv[j] = j < cut ? (float)log(mass * p[j] / total) : (float)HEAD_SENTINEL;
    }
    rank_row(hid, hv, width);
    if (rndn(3) == 0) /* the engine's order of tied values: not by id */
        for (size_t j = 0; j + 1 < width; j++)
            if (hv[j] == hv[j + 1] && rndn(2)) {
                uint32_t d = hid[j];
                hid[j] = hid[j + 1];
                hid[j + 1] = d;
            }
    if (width && rndn(2)) { /* the sampled token is in the head */
        size_t at = rndn(width);
        ids[len] = hid[at];
        vals[len++] = hv[at];
    } else {
        ids[len] = (uint32_t)rndn((size_t)alphabet + 1);
        vals[len++] = -(float)(rnd01() * 5);
        for (size_t j = 0; j < width; j++)
            if (hid[j] == ids[0]) vals[0] = hv[j];
    }
    for (size_t j = 0; j < width; j++) {
        ids[len] = hid[j];
        vals[len++] = hv[j];
    }
    if (rndn(plain ? 12 : 3) == 0) {
        size_t a = rndn(len), b = rndn(len);
        switch (rndn(6)) {
        case 0: {
            uint32_t d = ids[a];
            float v = vals[a];
            ids[a] = ids[b];
            vals[a] = vals[b];
            ids[b] = d;
            vals[b] = v;
            break;
        }
        case 1: vals[a] = (float)HEAD_SENTINEL; break;
        case 2: vals[a] = NAN; break;
        case 3: vals[len > 1 ? 1 : 0] = 1.5f; break;
        case 4: vals[a] = vals[a] == 0.0f ? -vals[a] : rndn(2) ? 0.0f : -0.0f; break;
        default:
            ids[len] = ids[a];
            vals[len++] = vals[a];
        }
    }
    return len;
}

/* One compact row through tw_compact_heads on every path: the failure (-1: none) and code,
   else the head's ids. */
static void compact_case(size_t len, const uint32_t *ids, const float *vals, int64_t sampled, int64_t k,
                         size_t slen, const int32_t *sup, ptrdiff_t want, int code, size_t hlen,
                         const int64_t *head, const char *what) {
    int64_t roff[2] = {0, (int64_t)len}, soff[2] = {0, (int64_t)slen}, off[2], oid[40];
    float olp[40], s0;
    for (int p = 0; p < g_npaths; p++) {
        int kind = -1, got_code = -1;
        ptrdiff_t got = tw_compact_heads(1, roff, ids, vals, &sampled, 64, k, slen ? soff : NULL, sup, &s0,
                                         off, oid, olp, &kind, &got_code, g_paths[p]);
        int ok = kind == TW_ROW_OK && got == want && (want < 0 ? (size_t)off[1] == hlen : got_code == code);
        for (size_t i = 0; ok && want < 0 && i < hlen; i++) ok = oid[i] == head[i];
        CHECK(ok, "%s, path %d: failed %td code %d, head of %lld", what, g_paths[p], got, got_code,
              (long long)off[1]);
    }
}

/* Ids of 2^31 and more: a kept id of -1 is not the id 2^32 - 1, and ties rank ids unsigned. */
static void test_compact_wide_ids(void) {
    float h = (float)log(0.5);
    uint32_t a[] = {0xFFFFFFFFu, 7, 0xFFFFFFFFu};
    float av[] = {h, h, h};
    int32_t kept[] = {7, -1};
    compact_case(3, a, av, 0xFFFFFFFF, 1, 2, kept, 0, TW_HEAD_MISSING_SUPPORT, 0, NULL,
                 "kept id -1 against the id 2^32 - 1");
    uint32_t b[] = {0x80000000u, 5, 0x80000000u, 9, 11};
    float bv[] = {h, h, h, -20.0f, -21.0f};
    int64_t want[] = {5, 0x80000000};
    compact_case(5, b, bv, 0x80000000, 2, 0, NULL, -1, 0, 2, want, "tied ids on both sides of 2^31");
}

/* A token whose row is empty: no sampled entry, on every path (the block of the two kernels
   then needs no scratch, and gets some all the same: no arithmetic on a NULL block). */
static void test_compact_empty_row(void) {
    int64_t roff[2] = {0, 0}, soff[2] = {0, 0}, sampled = 7, off[2] = {-1, -1}, oid[1];
    uint32_t ids[1] = {7};
    float vals[1] = {-1.0f}, olp[1], s0;
    for (int p = 0; p < g_npaths; p++) {
        for (int with_sup = 0; with_sup < 2; with_sup++) {
            int kind = -1, code = -1;
            ptrdiff_t got = tw_compact_heads(1, roff, ids, vals, &sampled, -1, 14, with_sup ? soff : NULL,
                                             NULL, &s0, off, oid, olp, &kind, &code, g_paths[p]);
            CHECK(got == 0 && kind == TW_ROW_MISSING_SAMPLED && off[0] == 0, "empty row, path %d: %td, %d",
                  g_paths[p], got, kind);
        }
    }
}

/* tw_compact_heads against tw_compact_rows_candidates then tw_select_heads (sampled values
   as found, heads' values narrowed to float) on every path: the heads the register kernel
   decides and every token it hands to the two kernels, with and without kept sets. */
static void test_compact_heads(long count) {
    for (long c = 0; c < count; c++) {
        size_t n = rndn(12), total = 0, stotal = 0;
        int with_sup = rndn(3) == 0, plain = rndn(4) != 0;
        uint32_t *ids = xmalloc(n * 41 * sizeof(uint32_t) + 4);
        float *vals = xmalloc(n * 41 * sizeof(float) + 4);
        int64_t *roff = xmalloc((n + 1) * sizeof(int64_t)), *soff = xmalloc((n + 1) * sizeof(int64_t));
        int32_t *sup = xmalloc(n * 48 * sizeof(int32_t) + 4);
        int64_t *sampled = xmalloc(n * sizeof(int64_t) + 8);
        static const int64_t tops[] = {-1, 0, 1, 3, 20, 21, 40, INT64_C(1) << 40, INT64_C(1) << 40};
        static const int64_t ks[] = {0, 1, 3, 19, 20, 20, INT64_C(1) << 62};
        int64_t num_top = tops[rndn(sizeof tops / sizeof tops[0])], k = ks[rndn(sizeof ks / sizeof ks[0])];
        roff[0] = soff[0] = 0;
        for (size_t t = 0; t < n; t++) {
            size_t len = sampler_row(ids + total, vals + total, with_sup, k, plain);
            if (len && rndn(30) == 0) /* a value above 1 (or at it): its head's sum is decided exactly */
                vals[total + rndn(len)] = rndn(2) ? 1.5f : 1.0f;
            sampled[t] = len && rndn(10) ? (int64_t)ids[total] : (int64_t)rndn(3) - 1;
            if (with_sup) {
                size_t w = 0, kind = rndn(6);
                for (size_t i = 0; i < len; i++) {
                    int live = vals[total + i] != (float)HEAD_SENTINEL;
                    if (live && (kind == 1 || kind == 2 || kind == 4 || kind == 5 || (kind == 3 && w < 2)))
                        sup[stotal + w++] = (int32_t)ids[total + i];
                }
                if (kind == 4) { /* and one not ranked: not there, negative, or filtered (at the sentinel) */
                    sup[stotal + w] = rndn(2) ? -1 : 0x7FFFFFFF;
                    for (size_t i = 0; i < len; i++)
                        if (vals[total + i] == (float)HEAD_SENTINEL && rndn(2)) sup[stotal + w] = (int32_t)ids[total + i];
                    w++;
                }
                if (kind == 5 && w) sup[stotal + w++] = sup[stotal]; /* repeated */
                stotal += w;
                soff[t + 1] = (int64_t)stotal;
            }
            total += len;
            roff[t + 1] = (int64_t)total;
        }
        size_t cap = total ? total : 1;
        int64_t *coff = xmalloc((n + 1) * sizeof(int64_t)), *cids = xmalloc(cap * sizeof(int64_t));
        double *clps = xmalloc(cap * sizeof(double)), *slps = xmalloc(n * sizeof(double) + 8);
        int64_t *woff = xmalloc((n + 1) * sizeof(int64_t)), *wids = xmalloc(cap * sizeof(int64_t));
        double *wlps = xmalloc(cap * sizeof(double));
        float *ws = xmalloc(n * sizeof(float) + 4), *gs = xmalloc(n * sizeof(float) + 4);
        int64_t *goff = xmalloc((n + 1) * sizeof(int64_t)), *gids = xmalloc(cap * sizeof(int64_t));
        float *glps = xmalloc(cap * sizeof(float)), *bvals = xmalloc(cap * sizeof(float));
        const int64_t *so = with_sup ? soff : NULL;
        for (int p = 0; p < g_npaths; p++) {
            int kind = -1, code = TW_HEAD_OK, gkind = -1, gcode = -1;
            memset(ws, 0, n * sizeof(float));
            ptrdiff_t bad_row = tw_compact_rows_candidates(n, roff, ids, vals, sampled, num_top, ws, &kind,
                                                           coff, cids, clps, g_paths[p]);
            size_t limit = bad_row >= 0 ? (size_t)bad_row : n;
            for (size_t t = 0; t < limit; t++) slps[t] = ws[t];
            woff[0] = 0;
            ptrdiff_t bad_head = limit ? tw_select_heads(limit, coff, cids, clps, sampled, slps, k, so, sup,
                                                         woff, wids, wlps, &code, g_paths[p])
                                       : -1;
            ptrdiff_t want = bad_head >= 0 ? bad_head : bad_row;
            if (bad_head >= 0) kind = TW_ROW_OK;
            memset(gs, 0, n * sizeof(float));
            memset(goff, 0xA5, (n + 1) * sizeof(int64_t)); /* nothing left from the last path */
            memset(gids, 0xA5, cap * sizeof(int64_t));
            memset(glps, 0xA5, cap * sizeof(float));
            ptrdiff_t got = tw_compact_heads(n, roff, ids, vals, sampled, num_top, k, so, sup, gs, goff,
                                             gids, glps, &gkind, &gcode, g_paths[p]);
            int ok = got == want && gkind == kind && (bad_head < 0 || gcode == code);
            if (ok) { /* every head before the failing token (all of them when none fails) */
                size_t upto = want < 0 ? n : (size_t)want;
                ok = memcmp(gs, ws, upto * sizeof(float)) == 0 && memcmp(goff, woff, (upto + 1) * sizeof(int64_t)) == 0;
                for (int64_t i = 0; ok && i < woff[upto]; i++) {
                    float v = (float)wlps[i];
                    ok = gids[i] == wids[i] && memcmp(&glps[i], &v, sizeof v) == 0;
                }
            }
            CHECK(ok, "compact heads, path %d, case %ld: failed %td (row %d, head %d), two kernels %td (%d, %d)",
                  g_paths[p], c, got, gkind, gcode, want, kind, code);
            /* tw_compact_heads_checked: the values rule in the same pass, on values that may
               break it anywhere (a NaN, an infinity, a value above 1e-6, at any lane): its
               first failure as tw_compact_values_bad finds it, else what tw_compact_heads gave */
            memcpy(bvals, vals, total * sizeof(float));
            for (int b = rndn(3) ? 0 : 1 + (int)rndn(2); b > 0 && total; b--) {
                static const float off[] = {NAN, INFINITY, -INFINITY, 2e-6f, 1e-5f, 1.5f, 1e30f};
                bvals[rndn(total)] = off[rndn(sizeof off / sizeof off[0])];
            }
            ptrdiff_t vwant = total ? tw_compact_values_bad(bvals, total) : -1, vgot = -2;
            int ckind = -1, ccode = -1;
            ptrdiff_t cgot = tw_compact_heads_checked(n, roff, ids, bvals, sampled, num_top, k, so, sup, gs, goff,
                                                      gids, glps, &ckind, &ccode, g_paths[p], &vgot, NULL);
            int same = memcmp(bvals, vals, total * sizeof(float)) == 0;
            CHECK(vgot == vwant && (vwant >= 0 || !same || (cgot == got && ckind == gkind && (got < 0 || gkind != TW_ROW_OK || ccode == gcode))),
                  "checked compact heads, path %d, case %ld: value %td (want %td), failed %td (%d, %d), unchecked %td (%d, %d)",
                  g_paths[p], c, vgot, vwant, cgot, ckind, ccode, got, gkind, gcode);
            if (so) {
                /* and the support rule in the same pass: after the values rule, the first
                   support tw_support_rows finds (an empty row absent), else as above */
                ptrdiff_t sgot = -2, svgot = -2;
                int skind = -1, scode = -1, snomem = 0;
                ptrdiff_t sret = tw_compact_heads_checked(n, roff, ids, bvals, sampled, num_top, k, so, sup, gs, goff,
                                                          gids, glps, &skind, &scode, g_paths[p], &svgot, &sgot);
                ptrdiff_t swant = n ? tw_support_rows(sup, so, n, sampled, 1, &snomem, g_paths[p]) : -1;
                CHECK(svgot == vwant && (vwant >= 0 || sgot == swant) &&
                          (vwant >= 0 || swant >= 0 || !same ||
                           (sret == got && skind == gkind && (got < 0 || gkind != TW_ROW_OK || scode == gcode))),
                      "supports checked compact heads, path %d, case %ld: value %td (want %td), support %td (want %td), "
                      "failed %td (%d, %d), unchecked %td (%d, %d)",
                      g_paths[p], c, svgot, vwant, sgot, swant, sret, skind, scode, got, gkind, gcode);
            }
        }
        /* Allocation failure: a token the kernels take needs scratch space. */
        if (c % 40 == 0 && n) {
            int gkind = -1, gcode = -1;
            g_fail_after = 0;
            ptrdiff_t got = tw_compact_heads(n, roff, ids, vals, sampled, num_top, k, so, sup, gs, goff,
                                             gids, glps, &gkind, &gcode, TW_PATH_SCALAR);
            g_fail_after = -1;
            CHECK(got == 0 && gkind == TW_ROW_NOMEM, "compact heads nomem: %td %d", got, gkind);
        }
        free(ids);
        free(vals);
        free(roff);
        free(soff);
        free(sup);
        free(sampled);
        free(coff);
        free(cids);
        free(clps);
        free(slps);
        free(woff);
        free(wids);
        free(wlps);
        free(ws);
        free(gs);
        free(goff);
        free(gids);
        free(glps);
        free(bvals);
    }
}

/* Compact rows whose head's exact sum walks across a threshold a float ulp of one value at
   a time: tw_compact_heads decides each as the exact rule does, on every path (the register
   kernel's single-precision estimate hands the tokens near a threshold to the exact sum). */
static void walk_compact(double limit, int with_sup, int terms, const char *what) {
    double w[32], total = 0.0, d[32]; /* terms <= 30 */
    float v[32];
    for (int i = 0; i < terms; i++) total += w[i] = 0.05 + rnd01();
    for (int i = 0; i < terms - 1; i++) d[i] = v[i] = (float)log(w[i] / total * limit * 0.9);
    double first = terms > 1 ? tw_fsum_exp(d, (size_t)terms - 1) : 0.0;
    float last = (float)log(limit - first);
    for (int i = 0; i < 40; i++) last = nextafterf(last, -INFINITY);
    int below = 0, above = 0;
    for (int step = 0; step < 80; step++, last = nextafterf(last, INFINITY)) {
        v[terms - 1] = last;
        d[terms - 1] = last;
        double sum = tw_fsum_exp(d, (size_t)terms);
        below += sum < limit;
        above += sum > limit;
        int want = with_sup ? !(fabs(1.0 - sum) <= 1e-4) ? TW_HEAD_NORMALIZE : sum > 1.0001 ? TW_HEAD_MASS : 0
                            : sum > 1.0001 ? TW_HEAD_MASS : 0;
        /* the row: the sampled token, the head ranked (value desc, id asc), two filtered */
        uint32_t hid[34], ids[35];
        float hv[34], vals[35];
        for (int i = 0; i < terms; i++) {
            hid[i] = (uint32_t)(i * 7 + 3);
            hv[i] = v[i];
        }
        rank_row(hid, hv, (size_t)terms);
        int at = (int)rndn((size_t)terms);
        ids[0] = hid[at];
        vals[0] = hv[at];
        for (int i = 0; i < terms; i++) {
            ids[i + 1] = hid[i];
            vals[i + 1] = hv[i];
        }
        ids[terms + 1] = 1;
        ids[terms + 2] = 2;
        vals[terms + 1] = vals[terms + 2] = (float)HEAD_SENTINEL;
        int64_t roff[2] = {0, terms + 3}, soff[2] = {0, with_sup ? terms : 0}, sampled = ids[0];
        int32_t sup[32];
        for (int i = 0; i < terms; i++) sup[i] = (int32_t)hid[i];
        for (int p = 0; p < g_npaths; p++) {
            int64_t off[2], oid[35];
            float olp[35], s0 = 0.0f;
            int kind = -1, code = -1;
            ptrdiff_t got = tw_compact_heads(1, roff, ids, vals, &sampled, 64, terms, with_sup ? soff : NULL,
                                             sup, &s0, off, oid, olp, &kind, &code, g_paths[p]);
            CHECK(kind == TW_ROW_OK && (want ? got == 0 && code == want : got == -1),
                  "compact, %s: path %d, sum %.17g, step %d: failed %td code %d, want %d", what, g_paths[p], sum,
                  step, got, code, want);
        }
    }
    crossed(below, above, limit, what);
}

static void test_nomem(void) {
    static builder b;
    memset(&b, 0, sizeof b);
    b.with_sup = 1;
    int64_t ids[] = {1, 2, 3};
    double lps[] = {-0.5, -1.0, -3.0};
    int32_t sup[300];
    for (int i = 0; i < 300; i++) sup[i] = 1 + i % 2;
    tok(&b, 3, ids, lps, 1, -0.5, 2, sup);
    tok(&b, 3, ids, lps, 1, -0.5, 300, sup);
    resp r;
    build(&b, &r, 1);
    result got;
    result_alloc(&got, &r);
    for (int p = 0; p < g_npaths; p++) {
        g_fail_after = 0;
        run(&r, &got, g_paths[p]);
        g_fail_after = -1;
        /* token 0 is NORMALIZE (3/4 of the mass) before token 1 needs memory */
        CHECK(got.failed == 0 && got.code == TW_HEAD_NORMALIZE, "nomem order: %td %d", got.failed,
              got.code);
    }
    resp_free(&r);
    result_free(&got);
    memset(&b, 0, sizeof b);
    b.with_sup = 1;
    double full[] = {log(0.5), log(0.5), -3.0};
    tok(&b, 3, ids, full, 1, log(0.5), 2, sup);
    tok(&b, 3, ids, full, 1, log(0.5), 300, sup);
    build(&b, &r, 1);
    result_alloc(&got, &r);
    for (int p = 0; p < g_npaths; p++) {
        g_fail_after = 0;
        run(&r, &got, g_paths[p]);
        g_fail_after = -1;
        CHECK(got.failed == 1 && got.code == TW_HEAD_NOMEM, "nomem: %td %d", got.failed, got.code);
        run(&r, &got, g_paths[p]);
        CHECK(got.failed == -1, "with memory: %td %d", got.failed, got.code);
    }
    resp_free(&r);
    result_free(&got);
}

/* ------------------------------------------------------------------------------------------
 * Exact sums: half-way cases and a few fixed values.
 * ------------------------------------------------------------------------------------------ */

#ifdef TW_X86_SIMD
TW_TARGET_AVX2 static void exp8_f32_into(const float *x, float *e) {
    _mm256_storeu_ps(e, tw_exp8_f32_avx2(_mm256_loadu_ps(x)));
}
#endif

/* tw_exp8_f32_avx2 (the AVX2 heads' single-precision exp) against exp() on every `step`-th
   float from 1 down to -88 (bit patterns: 1 .. 0, then -0 .. -88), and on every float near
   -87 (where it stops) and 0: |F(x) - exp(x)| < 2^-18 exp(x) + 2^-125, as tw_heads_internal.h
   bounds it. step 1: every float (test_heads --exp-sweep). */
static void exp_f32_sweep(uint32_t step) {
#ifdef TW_X86_SIMD
    if (!tw_path_available(TW_PATH_AVX2)) return;
    uint32_t one, m88, m87;
    float f1 = 1.0f, f88 = -88.0f, f87 = -87.0f;
    memcpy(&one, &f1, 4);
    memcpy(&m88, &f88, 4);
    memcpy(&m87, &f87, 4);
    double worst = 0;
    long bad = 0, seen = 0;
    float xs[8];
    int nx = 0;
    /* the walk (bit patterns, from <= to): +0 .. 1 by `step`, -0 .. -88 by `step`, and every
       float near +0, -87 and 1 */
    const uint32_t walk[5][3] = {{0, one, step}, {0x80000000u, m88, step}, {0, 4096, 1},
                                 {m87 - 4096, m87 + 4096, 1}, {one - 4096, one, 1}};
    for (int part = 0; part < 5; part++) {
        for (uint64_t b = walk[part][0]; b <= walk[part][1]; b += walk[part][2]) {
            uint32_t bits = (uint32_t)b;
            memcpy(&xs[nx++], &bits, 4);
            if (nx < 8 && b + walk[part][2] <= walk[part][1]) continue;
            float es[8];
            exp8_f32_into(xs, es);
            for (int i = 0; i < nx; i++) {
                double e = exp((double)xs[i]), err = fabs((double)es[i] - e);
                if (err > 0x1p-18 * e + 0x1p-125) bad++;
                if (xs[i] >= -87.0f && err / e > worst) worst = err / e;
                seen++;
            }
            nx = 0;
        }
    }
    CHECK(bad == 0, "single-precision fast exp: %ld of %ld floats off the bound", bad, seen);
    printf("  fast exp, single precision (AVX2): %ld floats, largest relative difference from exp() %.3g "
           "(claimed < 2^-18 = %.3g)\n", seen, worst, 0x1p-18);
#else
    (void)step;
#endif
}

static void test_fsum(void) {
    double a[] = {1.0, 0x1p-53};
    CHECK(tw_fsum_nonneg(a, 2) == 1.0, "tie to even, down");
    double b[] = {1.0 + 0x1p-52, 0x1p-53};
    CHECK(tw_fsum_nonneg(b, 2) == 1.0 + 0x1p-51, "tie to even, up");
    double c[] = {1.0, 0x1p-53, 0x1p-1074};
    CHECK(tw_fsum_nonneg(c, 3) == 1.0 + 0x1p-52, "sticky bit breaks the tie");
    double d[] = {0x1p-1074, 0x1p-1074, 0x1p-1074};
    CHECK(tw_fsum_nonneg(d, 3) == 3 * 0x1p-1074, "subnormals");
    double e[] = {1.7976931348623157e308, 1.7976931348623157e308};
    CHECK(tw_fsum_nonneg(e, 2) == INFINITY, "overflow");
    double f[] = {1.7976931348623157e308, 0x1p970};
    CHECK(tw_fsum_nonneg(f, 2) == INFINITY, "rounds up to overflow");
    double g[] = {0.1, 0.2, 0.3};
    CHECK(tw_fsum_nonneg(g, 3) == 0.6, "0.1 + 0.2 + 0.3");
    CHECK(tw_fsum_nonneg(NULL, 0) == 0.0, "empty");
    double h[] = {NAN, INFINITY};
    CHECK(isnan(tw_fsum_nonneg(h, 2)), "nan");
    double inf[] = {INFINITY, 1.0};
    CHECK(tw_fsum_nonneg(inf, 2) == INFINITY, "inf");
    double z[] = {-0.0};
    CHECK(tw_fsum_nonneg(z, 1) == 0.0, "-0");
    /* fast_exp's error against the C library */
    double worst = 0;
    for (int i = 0; i < 2000000; i++) {
        double x = i < 1000 ? -700.0 + i * 1e-3 : i < 2000 ? 1.0 - (i - 1000) * 1e-4 : -rnd01() * 701.0 + 1.0;
        if (x < -700.0) continue;
        double rel = fabs(fast_exp(x) - exp(x)) / exp(x);
        if (rel > worst) worst = rel;
    }
    CHECK(worst < 0x1p-45, "fast exp error %g", worst);
    printf("  fast exp, scalar: largest relative difference from exp() %.3g (claimed < 2^-45 = %.3g)\n",
           worst, 0x1p-45);
    /* the vector paths' mixed-precision fast exps */
    enum { N = 1 << 16 };
    static double xs[N], es[N];
    for (int p = 1; p < g_npaths; p++) {
        double worst_v = 0;
        for (int rep = 0; rep < 40; rep++) {
            for (int i = 0; i < N; i++)
                xs[i] = rep == 0 ? -700.0 + 701.0 * i / (N - 1) : rep == 1 ? -1e-3 * i / N : -rnd01() * 701.0 + 1.0;
            CHECK(!exps(g_paths[p], xs, N, es), "no special values");
            for (int i = 0; i < N; i++) {
                if (xs[i] < -700.0) continue;
                double rel = fabs(es[i] - exp(xs[i])) / exp(xs[i]);
                if (rel > worst_v) worst_v = rel;
            }
        }
        CHECK(worst_v < 0x1p-18, "vector fast exp error %g", worst_v);
        printf("  fast exp, path %d: largest relative difference from exp() %.3g (claimed < 2^-18 = %.3g)\n",
               g_paths[p], worst_v, 0x1p-18);
    }
    exp_f32_sweep(1021);
}
