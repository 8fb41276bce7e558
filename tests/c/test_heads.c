/*
 * Standalone tests and benchmark for head selection: csrc/tw_heads.c, tw_compact_candidates.c,
 * tw_compact_heads.c, tw_sum.c, tw_exp.c and tw_rank.c (included below, so that allocation
 * failures can be injected; tw_validate.c is linked).
 *
 *   make -C tests/c heads-test          (see tests/c/Makefile)
 *   ./test_heads [random_responses]     edge cases, thresholds, random cross-check
 *   ./test_heads --bench [FILE]         the compact 8k x 23, k = 20 workload: FILE as
 *                                       written by check_heads.py --dump-sample, else
 *                                       synthesized the same way
 *
 * Every path is compared with a slow reference written from select_head's rules (qsort,
 * linear searches, the C library's exp on every candidate, tw_fsum_exp for the exact sum).
 * Inputs and outputs are exactly-sized heap blocks, so out-of-bounds accesses show up under
 * ASan/valgrind.
 */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TW_CHECK_MAX_REPORTS 30
#include "tw_check.h"

/* Allocation failure injection (g_fail_after, tw_check.h): the n-th allocation from now
   fails (-1: none). */
#define tw_mem_alloc(n) test_malloc(n)
#define tw_mem_calloc(n, s) test_calloc(n, s)
#define tw_mem_realloc(p, n) test_realloc(p, n)
#include "../../csrc/tw_sum.c"
#include "../../csrc/tw_exp.c"
#include "../../csrc/tw_rank.c"
#include "../../csrc/tw_heads.c"
#include "../../csrc/tw_compact_candidates.c"
#include "../../csrc/tw_compact_heads.c"
#undef tw_mem_alloc
#undef tw_mem_calloc
#undef tw_mem_realloc

#include "tw_flood.h"

/* ------------------------------------------------------------------------------------------
 * A response under test: CSR candidates, sampled tokens, optional supports.
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    size_t n, total, stotal;
    int64_t *coff, *ids, *sids, *soff;
    double *lps, *slps;
    int32_t *sup;
    int64_t k;
} resp;

static void resp_alloc(resp *r, size_t n, size_t total, int with_sup, size_t stotal) {
    memset(r, 0, sizeof *r);
    r->n = n;
    r->total = total;
    r->coff = xmalloc((n + 1) * sizeof(int64_t));
    r->ids = xmalloc(total * sizeof(int64_t));
    r->lps = xmalloc(total * sizeof(double));
    r->sids = xmalloc(n * sizeof(int64_t));
    r->slps = xmalloc(n * sizeof(double));
    if (with_sup) {
        r->stotal = stotal;
        r->soff = xmalloc((n + 1) * sizeof(int64_t));
        r->sup = xmalloc(stotal * sizeof(int32_t));
    }
}

static void resp_free(resp *r) {
    free(r->coff);
    free(r->ids);
    free(r->lps);
    free(r->sids);
    free(r->slps);
    free(r->soff);
    free(r->sup);
}

typedef struct {
    ptrdiff_t failed;
    int code;
    int64_t *off, *ids;
    double *lps;
} result;

static void result_alloc(result *o, const resp *r) {
    o->off = xmalloc((r->n + 1) * sizeof(int64_t));
    o->ids = xmalloc(r->total * sizeof(int64_t));
    o->lps = xmalloc(r->total * sizeof(double));
}

static void result_free(result *o) {
    free(o->off);
    free(o->ids);
    free(o->lps);
}

static void run(const resp *r, result *o, int path) {
    o->failed = tw_select_heads(r->n, r->coff, r->ids, r->lps, r->sids, r->slps, r->k, r->soff,
                                r->sup, o->off, o->ids, o->lps, &o->code, path);
}

/* ------------------------------------------------------------------------------------------
 * The slow reference.
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    int64_t id;
    double v;
} entry;

static int cmp_rank(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int ref_close(double a, double b, double rel, double abs_tol) {
    if (a == b) return 1;
    if (isinf(a) || isinf(b)) return 0;
    double d = fabs(a - b), m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    return d <= (rel * m > abs_tol ? rel * m : abs_tol);
}

static void ref_select(const resp *r, result *o) {
    int64_t w = 0;
    entry *e = xmalloc(r->total * sizeof(entry) + sizeof(entry));
    double *ex = xmalloc(r->total * sizeof(double) + sizeof(double));
    o->failed = -1;
    o->code = 0;
    o->off[0] = 0;
    for (size_t t = 0; t < r->n; t++) {
        const int64_t *ids = r->ids + r->coff[t];
        const double *lps = r->lps + r->coff[t];
        size_t len = (size_t)(r->coff[t + 1] - r->coff[t]), m = 0, i, j;
        int code = 0;
        /* an empty support row is no support (an absent kept set) */
        int sup = r->soff && r->soff[t + 1] > r->soff[t];
        for (i = 0; i < len; i++)
            if (ids[i] == r->sids[t]) {
                if (!ref_close(lps[i], r->slps[t], 1e-6, 1e-5)) code = TW_HEAD_DISAGREE;
                break;
            }
        if (!code) {
            for (i = 0; i < len; i++)
                if (lps[i] != -9999.0) e[m++] = (entry){ids[i], lps[i]};
            qsort(e, m, sizeof(entry), cmp_rank);
            if (sup) {
                const int32_t *s = r->sup + r->soff[t];
                size_t slen = (size_t)(r->soff[t + 1] - r->soff[t]), kept = 0;
                for (i = 0; i < slen && !code; i++) {
                    for (j = 0; j < m && e[j].id != s[i]; j++) {}
                    if (j == m) code = TW_HEAD_MISSING_SUPPORT;
                }
                for (j = 0; j < m && !code; j++) {
                    for (i = 0; i < slen && s[i] != e[j].id; i++) {}
                    if (i < slen) e[kept++] = e[j];
                }
                m = kept;
                if (!code) {
                    for (i = 0; i < m; i++) ex[i] = e[i].v;
                    if (!ref_close(tw_fsum_exp(ex, m), 1.0, 0.0, 1e-4)) code = TW_HEAD_NORMALIZE;
                }
            } else if (r->k < 1) {
                m = 0;
            } else if ((int64_t)m > r->k && e[r->k - 1].v == e[r->k].v) {
                double b = e[r->k].v;
                size_t kept = 0;
                for (j = 0; j < m; j++)
                    if (e[j].v > b) e[kept++] = e[j];
                m = kept;
            } else if ((int64_t)m > r->k) {
                m = (size_t)r->k;
            }
        }
        if (!code) {
            for (i = 0; i < m; i++) ex[i] = e[i].v;
            if (m == 0 || tw_fsum_exp(ex, m) > 1.0001) code = TW_HEAD_MASS;
        }
        if (!code && !sup && (r->k > INT64_MAX - 2 || (int64_t)len < r->k + 2))
            code = TW_HEAD_FEWER;
        if (code) {
            o->failed = (ptrdiff_t)t;
            o->code = code;
            break;
        }
        for (i = 0; i < m; i++) {
            o->ids[w + (int64_t)i] = e[i].id;
            o->lps[w + (int64_t)i] = e[i].v;
        }
        w += (int64_t)m;
        o->off[t + 1] = w;
    }
    free(e);
    free(ex);
}

static int equal_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Compare a path's result with the reference: the decision, and every head before it. */
static int same_result(const resp *r, const result *a, const result *b, const char *what) {
    if (a->failed != b->failed || a->code != b->code) {
        FAIL("%s: failed %td code %d, reference %td code %d", what, a->failed, a->code,
             b->failed, b->code);
        return 0;
    }
    size_t upto = a->failed < 0 ? r->n : (size_t)a->failed;
    for (size_t t = 0; t <= upto; t++) {
        if (a->off[t] != b->off[t]) {
            FAIL("%s: out_off[%zu] %lld, reference %lld", what, t, (long long)a->off[t],
                 (long long)b->off[t]);
            return 0;
        }
    }
    for (int64_t i = 0; i < a->off[upto]; i++) {
        if (a->ids[i] != b->ids[i] || !equal_bits(a->lps[i], b->lps[i])) {
            FAIL("%s: output %lld: %lld %.17g, reference %lld %.17g", what, (long long)i,
                 (long long)a->ids[i], a->lps[i], (long long)b->ids[i], b->lps[i]);
            return 0;
        }
    }
    g_checks++;
    return 1;
}

/* Every path against the reference; after a failure, again from the next token on, so
   that every token's decision is compared. */
static void check_all(const resp *whole, const char *what) {
    resp r = *whole;
    for (;;) {
        result want, got;
        r.total = (size_t)(r.coff[r.n] - r.coff[0]);
        result_alloc(&want, &r);
        result_alloc(&got, &r);
        ref_select(&r, &want);
        for (int p = 0; p < g_npaths; p++) {
            char name[160];
            snprintf(name, sizeof name, "%s [path %d, from token %zu]", what, g_paths[p],
                     whole->n - r.n);
            run(&r, &got, g_paths[p]);
            same_result(&r, &got, &want, name);
        }
        ptrdiff_t f = want.failed;
        result_free(&want);
        result_free(&got);
        if (f < 0 || (size_t)f + 1 >= r.n) break;
        r.n -= (size_t)f + 1;
        r.coff += f + 1;
        r.sids += f + 1;
        r.slps += f + 1;
        if (r.soff) r.soff += f + 1;
    }
}

/* Check a decision on every path: the failed token and code. */
static void expect(const resp *r, ptrdiff_t failed, int code, const char *what) {
    result got;
    result_alloc(&got, r);
    for (int p = 0; p < g_npaths; p++) {
        run(r, &got, g_paths[p]);
        CHECK(got.failed == failed && got.code == code, "%s [path %d]: got %td/%d, want %td/%d",
              what, g_paths[p], got.failed, got.code, failed, code);
    }
    result_free(&got);
    check_all(r, what);
}

/* ------------------------------------------------------------------------------------------
 * Building responses by hand: one token per call of tok().
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    size_t n, total, stotal;
    int64_t ids[4096], sids[256], lens[256], slens[256];
    double lps[4096], slps[256];
    int32_t sup[4096];
    int with_sup;
} builder;

static void tok(builder *b, size_t len, const int64_t *ids, const double *lps, int64_t sid,
                double slp, size_t slen, const int32_t *sup) {
    if (len) {
        memcpy(b->ids + b->total, ids, len * sizeof(int64_t));
        memcpy(b->lps + b->total, lps, len * sizeof(double));
    }
    b->total += len;
    if (slen) memcpy(b->sup + b->stotal, sup, slen * sizeof(int32_t));
    b->stotal += slen;
    b->lens[b->n] = (int64_t)len;
    b->slens[b->n] = (int64_t)slen;
    b->sids[b->n] = sid;
    b->slps[b->n] = slp;
    b->n++;
}

static void build(const builder *b, resp *r, int64_t k) {
    resp_alloc(r, b->n, b->total, b->with_sup, b->stotal);
    r->k = k;
    r->coff[0] = 0;
    for (size_t t = 0; t < b->n; t++) r->coff[t + 1] = r->coff[t] + b->lens[t];
    memcpy(r->ids, b->ids, b->total * sizeof(int64_t));
    memcpy(r->lps, b->lps, b->total * sizeof(double));
    memcpy(r->sids, b->sids, b->n * sizeof(int64_t));
    memcpy(r->slps, b->slps, b->n * sizeof(double));
    if (b->with_sup) {
        r->soff[0] = 0;
        for (size_t t = 0; t < b->n; t++) r->soff[t + 1] = r->soff[t] + b->slens[t];
        memcpy(r->sup, b->sup, b->stotal * sizeof(int32_t));
    }
}

/* One token, k, optional support: the decision (-1/0 or the token 0 with code). */
static void one(size_t len, const int64_t *ids, const double *lps, int64_t sid, double slp,
                int64_t k, int with_sup, size_t slen, const int32_t *sup, int code,
                const char *what) {
    static builder b;
    memset(&b, 0, sizeof b);
    b.with_sup = with_sup;
    tok(&b, len, ids, lps, sid, slp, slen, sup);
    resp r;
    build(&b, &r, k);
    expect(&r, code ? 0 : -1, code, what);
    resp_free(&r);
}

/* The head of a valid single token, on every path. */
static void head_is(size_t len, const int64_t *ids, const double *lps, int64_t k, int with_sup,
                    size_t slen, const int32_t *sup, size_t hlen, const int64_t *hids,
                    const char *what) {
    static builder b;
    memset(&b, 0, sizeof b);
    b.with_sup = with_sup;
    tok(&b, len, ids, lps, -1, NAN, slen, sup);
    resp r;
    build(&b, &r, k);
    result got;
    result_alloc(&got, &r);
    for (int p = 0; p < g_npaths; p++) {
        run(&r, &got, g_paths[p]);
        int ok = got.failed == -1 && got.off[1] == (int64_t)hlen;
        for (size_t i = 0; ok && i < hlen; i++) ok = got.ids[i] == hids[i];
        CHECK(ok, "%s [path %d]: failed %td code %d, head of %lld", what, g_paths[p], got.failed,
              got.code, (long long)got.off[1]);
    }
    result_free(&got);
    resp_free(&r);
}

static void test_edges(void) {
    const double S = -9999.0, L2 = log(0.5), L4 = log(0.25), L8 = log(0.125);
    /* Ranking and the k-th place. */
    {
        int64_t ids[] = {7, 3, 5, 9, 1};
        double lps[] = {L8, L2, L8, L4, -30};
        int64_t h2[] = {3, 9}, h3[] = {3, 9, 5}, h4[] = {3, 9, 5, 7};
        head_is(5, ids, lps, 2, 0, 0, NULL, 2, h2, "k=2, no tie at the boundary");
        /* places 3 and 4 tie (5 and 7 at 1/8): both dropped */
        head_is(5, ids, lps, 3, 0, 0, NULL, 2, h2, "tie across k=3: both 1/8 dropped");
        int64_t ids6[] = {7, 3, 5, 9, 1, 2};
        double lps6[] = {L8, L2, L8, L4, -30, S};
        head_is(6, ids6, lps6, 4, 0, 0, NULL, 4, h4, "tie inside k=4, sentinel counted");
        (void)h3;
        int64_t ids7[] = {7, 3, 5, 9, 1, 2, 4};
        double lps7[] = {L8, L2, L8, L4, -30, S, S};
        head_is(7, ids7, lps7, 4, 0, 0, NULL, 4, h4, "tie inside k=4 kept, id order");
    }
    /* All tied: nothing left. */
    {
        int64_t ids[] = {4, 3, 2, 1, 0};
        double lps[] = {L4, L4, L4, L4, L4};
        one(5, ids, lps, -1, NAN, 2, 0, 0, NULL, TW_HEAD_MASS, "all tied across k");
        one(5, ids, lps, 2, L4, 3, 0, 0, NULL, TW_HEAD_MASS, "all tied, k=3");
        one(5, ids, lps, -1, NAN, 1, 0, 0, NULL, TW_HEAD_MASS, "all tied, k=1");
        int64_t h[] = {0, 1, 2, 3, 4};
        int32_t sup[] = {3, 1, 4, 0, 2};
        double five[] = {log(0.2), log(0.2), log(0.2), log(0.2), log(0.2)};
        head_is(5, ids, five, 1, 1, 5, sup, 5, h, "all tied inside a support: id order");
    }
    /* Sentinels: never ranked, but counted by FEWER. */
    {
        int64_t ids[] = {1, 2, 3, 4};
        double lps[] = {S, L2, S, S};
        int64_t h[] = {2};
        head_is(4, ids, lps, 1, 0, 0, NULL, 1, h, "sentinels are skipped");
        one(4, ids, lps, -1, NAN, 3, 0, 0, NULL, TW_HEAD_FEWER, "sentinels count for fewer");
        double all[] = {S, S, S, S};
        one(4, ids, all, -1, NAN, 1, 0, 0, NULL, TW_HEAD_MASS, "only sentinels");
        one(4, ids, all, 3, S, 1, 0, 0, NULL, TW_HEAD_MASS, "sampled at the sentinel");
        one(4, ids, all, 3, -1.0, 1, 0, 0, NULL, TW_HEAD_DISAGREE, "sentinel vs sampled value");
    }
    /* Empty rows. */
    {
        one(0, NULL, NULL, 5, -0.1, 1, 0, 0, NULL, TW_HEAD_MASS, "empty head");
        int32_t s1[] = {5};
        one(0, NULL, NULL, 5, -0.1, 1, 1, 1, s1, TW_HEAD_MISSING_SUPPORT, "empty head, support");
        /* an empty support row is no support (an absent kept set): the rule without one */
        one(0, NULL, NULL, 5, -0.1, 1, 1, 0, NULL, TW_HEAD_MASS, "empty head, absent support");
        int64_t ids[] = {5, 6, 7};
        double lps[] = {-0.5, -1.5, -2.5};
        one(3, ids, lps, 5, -0.5, 1, 1, 0, NULL, TW_HEAD_OK, "absent support: head of k");
        one(3, ids, lps, 5, -0.5, 2, 1, 0, NULL, TW_HEAD_FEWER, "absent support: k + 2 needed");
    }
    /* k = 1, k >= len, huge k. */
    {
        int64_t ids[] = {10, 11, 12};
        double lps[] = {L4, L2, L8};
        int64_t h1[] = {11}, h3[] = {11, 10, 12};
        head_is(3, ids, lps, 1, 0, 0, NULL, 1, h1, "k=1");
        one(3, ids, lps, -1, NAN, 2, 0, 0, NULL, TW_HEAD_FEWER, "len = k + 1");
        one(3, ids, lps, -1, NAN, 3, 0, 0, NULL, TW_HEAD_FEWER, "len = k");
        one(3, ids, lps, -1, NAN, INT64_MAX, 0, 0, NULL, TW_HEAD_FEWER, "k = INT64_MAX");
        one(3, ids, lps, -1, NAN, 0, 0, 0, NULL, TW_HEAD_MASS, "k = 0");
        one(3, ids, lps, -1, NAN, -5, 0, 0, NULL, TW_HEAD_MASS, "k < 0");
        int32_t sup[] = {12, 10, 11};
        double full[] = {L4, L2, L4};
        int64_t h3s[] = {11, 10, 12};
        (void)h3;
        head_is(3, ids, full, INT64_MAX, 1, 3, sup, 3, h3s, "support ignores k");
    }
    /* Supports. */
    {
        int64_t ids[] = {1, 2, 3, 4, 5};
        double lps[] = {L2, L4, L8, L8, S};
        int32_t all[] = {4, 3, 2, 1};
        int64_t h[] = {1, 2, 3, 4};
        head_is(5, ids, lps, 1, 1, 4, all, 4, h, "support = every ranked id");
        int32_t dup[] = {4, 3, 2, 1, 3, 1};
        head_is(5, ids, lps, 1, 1, 6, dup, 4, h, "support with repeats");
        int32_t with_sentinel[] = {1, 2, 3, 4, 5};
        one(5, ids, lps, -1, NAN, 1, 1, 5, with_sentinel, TW_HEAD_MISSING_SUPPORT,
            "support names a sentinel candidate");
        int32_t absent[] = {1, 2, 3, 4, 9};
        one(5, ids, lps, -1, NAN, 1, 1, 5, absent, TW_HEAD_MISSING_SUPPORT, "support id absent");
        int32_t negative[] = {-1};
        one(5, ids, lps, -1, NAN, 1, 1, 1, negative, TW_HEAD_MISSING_SUPPORT, "negative id");
        int32_t part[] = {1, 2};
        one(5, ids, lps, -1, NAN, 1, 1, 2, part, TW_HEAD_NORMALIZE, "3/4 of the mass");
        int32_t half[] = {1};
        one(5, ids, lps, 1, L2, 1, 1, 1, half, TW_HEAD_NORMALIZE, "half of the mass");
        int32_t big[300];
        for (int i = 0; i < 300; i++) big[i] = i < 4 ? i + 1 : (i % 4) + 1;
        head_is(5, ids, lps, 1, 1, 300, big, 4, h, "a long support with repeats");
        big[299] = 77;
        one(5, ids, lps, -1, NAN, 1, 1, 300, big, TW_HEAD_MISSING_SUPPORT, "long support, absent id");
    }
    /* The sampled logprob. */
    {
        int64_t ids[] = {1, 2, 3, 4};
        double lps[] = {-0.5, -1.0, -2.0, -3.0};
        one(4, ids, lps, 2, -1.0, 2, 0, 0, NULL, TW_HEAD_OK, "sampled equal");
        one(4, ids, lps, 2, -1.0 + 0.9e-5, 2, 0, 0, NULL, TW_HEAD_OK, "sampled within abs_tol");
        one(4, ids, lps, 2, -1.0 - 1.5e-5, 2, 0, 0, NULL, TW_HEAD_DISAGREE, "sampled off");
        one(4, ids, lps, 2, NAN, 2, 0, 0, NULL, TW_HEAD_DISAGREE, "sampled NaN, in head");
        one(4, ids, lps, 9, NAN, 2, 0, 0, NULL, TW_HEAD_OK, "sampled NaN, not in head");
        one(4, ids, lps, 2, -INFINITY, 2, 0, 0, NULL, TW_HEAD_DISAGREE, "sampled -inf");
        double big[] = {-0.5, -100.0, -2.0, -3.0};
        one(4, ids, big, 2, -100.0 * (1 + 0.9e-6), 2, 0, 0, NULL, TW_HEAD_OK, "within rel_tol");
        one(4, ids, big, 2, -100.0 * (1 + 1.1e-6), 2, 0, 0, NULL, TW_HEAD_DISAGREE, "past rel_tol");
    }
    /* Mass. */
    {
        int64_t ids[] = {1, 2, 3, 4, 5};
        double lps[] = {L2, L2, L4, -40, -50};
        one(5, ids, lps, -1, NAN, 2, 0, 0, NULL, TW_HEAD_OK, "mass 1");
        one(5, ids, lps, -1, NAN, 3, 0, 0, NULL, TW_HEAD_MASS, "mass 1.25");
        double hot[] = {1e-6, -1e-7, -50, -60, -70};
        one(5, ids, hot, -1, NAN, 1, 0, 0, NULL, TW_HEAD_OK, "one token at probability 1");
        one(5, ids, hot, -1, NAN, 2, 0, 0, NULL, TW_HEAD_MASS, "two tokens near probability 1");
        double odd[] = {INFINITY, -1, -2, -3, -4};
        one(5, ids, odd, -1, NAN, 1, 0, 0, NULL, TW_HEAD_MASS, "+inf candidate");
        double deep[] = {-700.0, -701.0, -745.0, -746.0, -INFINITY};
        one(5, ids, deep, -1, NAN, 3, 0, 0, NULL, TW_HEAD_OK, "vanishing mass passes");
        double pos[] = {0.5, -1, -2, -3, -4};
        one(5, ids, pos, -1, NAN, 1, 0, 0, NULL, TW_HEAD_MASS, "positive logprob");
        double huge[] = {800.0, -1, -2, -3, -4};
        one(5, ids, huge, -1, NAN, 1, 0, 0, NULL, TW_HEAD_MASS, "exp overflow");
    }
    /* The first failing token wins; checks within a token keep their order. */
    {
        static builder b;
        memset(&b, 0, sizeof b);
        int64_t ids[] = {1, 2, 3, 4};
        double ok[] = {-0.5, -1.5, -2.5, -3.5}, heavy[] = {-0.1, -0.2, -2.5, -3.5};
        tok(&b, 4, ids, ok, 1, -0.5, 0, NULL);
        tok(&b, 4, ids, ok, 2, -1.5, 0, NULL);
        tok(&b, 4, ids, heavy, 3, -2.5, 0, NULL); /* MASS */
        tok(&b, 4, ids, ok, 1, -0.7, 0, NULL);    /* DISAGREE, later */
        resp r;
        build(&b, &r, 2);
        expect(&r, 2, TW_HEAD_MASS, "first failure wins");
        r.k = 3;
        expect(&r, 0, TW_HEAD_FEWER, "fewer at token 0 with k=3");
        resp_free(&r);
    }
}

/* ------------------------------------------------------------------------------------------
 * Thresholds: walk one value by ulps until the exact sum crosses a limit, and check the
 * decision on both sides on every path.
 * ------------------------------------------------------------------------------------------ */

/* A walk across a threshold must have steps on both sides of it. */
static void crossed(int below, int above, double limit, const char *what) {
    CHECK(below >= 3 && above >= 3, "%s: the walk does not cross %.17g (%d below, %d above)", what,
          limit, below, above);
}

static void walk_limit(double limit, int with_sup, int terms, const char *what) {
    double lps[40], weights[40], total = 0;
    int64_t ids[40];
    int32_t sup[40];
    for (int i = 0; i < terms; i++) total += weights[i] = 0.05 + rnd01();
    for (int i = 0; i < terms - 1; i++) lps[i] = log(weights[i] / total * limit * 0.9);
    double first = terms > 1 ? tw_fsum_exp(lps, (size_t)terms - 1) : 0.0;
    /* each step moves exp(last) by about 2^-55: a quarter of an ulp of the sum near 1 */
    double step = 0x1p-55 / (limit - first), base = log(limit - first) - 40 * step;
    for (int i = 0; i < terms + 2; i++) ids[i] = (int64_t)(i * 7 + 3);
    for (int i = 0; i < terms; i++) sup[i] = (int32_t)ids[i];
    lps[terms] = lps[terms + 1] = -9999.0; /* for FEWER: k + 2 candidates */
    int below = 0, above = 0;
    for (int i = 0; i < 80; i++) {
        lps[terms - 1] = base + i * step;
        double s = tw_fsum_exp(lps, (size_t)terms);
        int want;
        if (with_sup)
            want = !(fabs(1.0 - s) <= 1e-4) ? TW_HEAD_NORMALIZE : s > 1.0001 ? TW_HEAD_MASS : 0;
        else
            want = s > 1.0001 ? TW_HEAD_MASS : 0;
        below += s < limit;
        above += s > limit;
        char name[160];
        snprintf(name, sizeof name, "%s: sum %.17g, step %d", what, s, i);
        int sampled = (int)rndn((size_t)terms);
        one((size_t)terms + 2, ids, lps, ids[sampled], lps[sampled], terms, with_sup,
            with_sup ? (size_t)terms : 0, sup, want, name);
    }
    crossed(below, above, limit, what);
}

/* Every threshold walked by `walk` (walk_limit, walk_compact) with heads of 1 to 30. */
static void test_thresholds(void (*walk)(double limit, int with_sup, int terms, const char *what)) {
    for (int rep = 0; rep < 30; rep++) {
        int terms = 1 + (int)rndn(rep < 10 ? 3 : 30);
        walk(1.0001, 0, terms, "mass limit");
        walk(1.0001, 1, terms, "mass limit with support");
        walk(1.0 + 1e-4, 1, terms, "normalization, high side");
        walk(1.0 - 1e-4, 1, terms, "normalization, low side");
    }
}

/* ------------------------------------------------------------------------------------------
 * Random responses.
 * ------------------------------------------------------------------------------------------ */

static double value(int mode) {
    static const double small[] = {0.0, -0.0, -0.25, -0.5, -1.0, -2.0, -9999.0, -0.6931471805599453,
                                   -1.3862943611198906, -20.0, -700.0, -701.0, 1e-6, -1e-300};
    switch (mode) {
    case 0:
        return small[rndn(sizeof small / sizeof small[0])];
    case 1:
        return log(ldexp(1.0, -(int)rndn(8) - 1));
    case 2:
        return rndn(10) == 0 ? -9999.0 : -(double)(float)(-log(1.0 - rnd01()) * (0.2 + 4 * rnd01()));
    default:
        return -rnd01() * 30.0;
    }
}

static void random_response(resp *r, size_t *lens, int huge) {
    size_t n = 1 + rndn(rndn(4) == 0 ? 300 : 20);
    int with_sup = rndn(5) < 2;
    static const int64_t ks[] = {1, 1, 2, 3, 5, 8, 20, 22, 40, INT64_MAX};
    int64_t k = ks[rndn(sizeof ks / sizeof ks[0])];
    size_t total = 0, stotal = 0;
    for (size_t t = 0; t < n; t++) {
        size_t m = rndn(24);
        if (rndn(30) == 0) m = 40 + rndn(300);
        if (huge && t == n / 2) m = 100000;
        lens[2 * t] = m;
        lens[2 * t + 1] = with_sup ? (rndn(10) == 0 ? 64 + rndn(400) : rndn(m + 2)) : 0;
        if (huge && with_sup && t == n / 2) lens[2 * t + 1] = 50000;
        total += m;
        stotal += lens[2 * t + 1];
    }
    resp_alloc(r, n, total, with_sup, stotal);
    r->k = k;
    r->coff[0] = 0;
    if (with_sup) r->soff[0] = 0;
    for (size_t t = 0; t < n; t++) {
        size_t m = lens[2 * t], slen = lens[2 * t + 1];
        r->coff[t + 1] = r->coff[t] + (int64_t)m;
        int64_t *ids = r->ids + r->coff[t];
        double *lps = r->lps + r->coff[t];
        int mode = (int)rndn(4);
        size_t alphabet = 2 * m + 2 + (rndn(2) ? 0 : 1000000);
        for (size_t i = 0; i < m; i++) {
            int64_t id;
            int fresh;
            if (m > 400) { /* distinct by construction, in random order */
                size_t j = rndn(i + 1);
                ids[i] = ids[j];
                ids[j] = (int64_t)(i * 3 + 1);
                lps[i] = value(mode);
                continue;
            }
            do { /* distinct ids */
                id = (int64_t)rndn(alphabet);
                fresh = 1;
                for (size_t j = 0; j < i && fresh; j++) fresh = ids[j] != id;
            } while (!fresh);
            ids[i] = id;
            lps[i] = value(mode);
        }
        if (m && rndn(3) == 0) { /* dyadic probabilities over a prefix */
            size_t parts = 1 + rndn(m < 8 ? m : 8);
            double left = 1.0;
            for (size_t i = 0; i < parts; i++) {
                double p = i + 1 == parts ? left : left / 2;
                lps[i] = log(p);
                left -= p;
            }
        }
        if (m && rndn(5) < 4) {
            size_t j = rndn(m);
            r->sids[t] = ids[j];
            r->slps[t] = rndn(4) ? lps[j] : lps[j] + (rndn(2) ? 1e-5 : 2e-5);
        } else {
            r->sids[t] = -1 - (int64_t)rndn(3);
            r->slps[t] = NAN;
        }
        if (with_sup) {
            r->soff[t + 1] = r->soff[t] + (int64_t)slen;
            int32_t *s = r->sup + r->soff[t];
            size_t ranked = 0;
            for (size_t i = 0; i < m; i++) ranked += lps[i] != -9999.0;
            for (size_t i = 0; i < slen; i++) {
                if (m && rndn(40)) { /* mostly ranked ids (repeats possible) */
                    size_t j;
                    do j = rndn(m);
                    while (ranked && lps[j] == -9999.0);
                    s[i] = (int32_t)ids[j];
                } else {
                    s[i] = (int32_t)rndn(100);
                }
            }
        }
    }
}

static void test_random(long count) {
    size_t *lens = xmalloc(2 * 400 * sizeof(size_t));
    for (long c = 0; c < count; c++) {
        resp r;
        random_response(&r, lens, c % 500 == 499);
        check_all(&r, "random");
        resp_free(&r);
    }
    free(lens);
}

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

/* tw_compact_heads against tw_compact_rows_candidates then tw_select_heads (sampled values
   as found, heads' values narrowed to float) on every path: the AVX-512 path's heads decided
   in registers and every token it hands to the two kernels, with and without kept sets. */
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
                    if (live && (kind == 1 || kind == 2 || kind == 4 || (kind == 3 && w < 2)))
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
        float *glps = xmalloc(cap * sizeof(float));
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
    }
}

/* Compact rows whose head's exact sum walks across a threshold a float ulp of one value at
   a time: tw_compact_heads decides each as the exact rule does, on every path (the AVX-512
   path's estimate hands the tokens near a threshold to the exact sum). */
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
}

/* ------------------------------------------------------------------------------------------
 * Benchmark: the compact 8k-token response with 22 candidates + the sampled token per row.
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    size_t n;
    int64_t num_top;
    int64_t *roff, *sampled;
    uint32_t *ids;
    float *vals;
} workload;

static double gauss(void) {
    double u = rnd01(), v = rnd01();
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

/* As tokenwire.samples.evidence(8192, 22): log-softmax over 256 logits, top 22, the sampled
   token (inverse CDF) first in each row. */
static void synthesize(workload *w, size_t n, size_t m) {
    enum { WIDTH = 256 };
    w->n = n;
    w->num_top = (int64_t)m;
    w->roff = xmalloc((n + 1) * sizeof(int64_t));
    w->sampled = xmalloc(n * sizeof(int64_t));
    w->ids = xmalloc(n * (m + 1) * sizeof(uint32_t));
    w->vals = xmalloc(n * (m + 1) * sizeof(float));
    double logit[WIDTH];
    int order[WIDTH];
    for (size_t t = 0; t < n; t++) {
        double scale = 1.0 + 6.0 * rnd01(), top = -INFINITY, z = 0;
        for (int i = 0; i < WIDTH; i++) {
            logit[i] = gauss() * scale;
            if (logit[i] > top) top = logit[i];
            order[i] = i;
        }
        for (int i = 0; i < WIDTH; i++) z += exp(logit[i] - top);
        for (int i = 0; i < WIDTH; i++) logit[i] = logit[i] - top - log(z);
        for (int i = 1; i < WIDTH; i++) { /* by logprob, descending */
            int x = order[i], j = i;
            while (j > 0 && logit[order[j - 1]] < logit[x]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = x;
        }
        double u = rnd01(), cdf = 0;
        int s = WIDTH - 1;
        for (int i = 0; i < WIDTH; i++) {
            cdf += exp(logit[i]);
            if (cdf >= u) {
                s = i;
                break;
            }
        }
        uint32_t base = (uint32_t)rndn(151936);
        size_t at = t * (m + 1);
        w->roff[t] = (int64_t)at;
        w->ids[at] = (base + (uint32_t)s * 7919u) % 151936u;
        w->vals[at] = (float)logit[s];
        for (size_t i = 0; i < m; i++) {
            w->ids[at + 1 + i] = (base + (uint32_t)order[i] * 7919u) % 151936u;
            w->vals[at + 1 + i] = (float)logit[order[i]];
        }
        w->sampled[t] = w->ids[at];
    }
    w->roff[n] = (int64_t)(n * (m + 1));
}

/* The next n bytes of the file at *at into dst; 0 if it ends first. */
static int take(const char *buf, size_t len, size_t *at, void *dst, size_t n) {
    if (len - *at < n) return 0;
    memcpy(dst, buf + *at, n);
    *at += n;
    return 1;
}

static int load(workload *w, const char *path) {
    size_t len, at = 0;
    char *buf = read_file(path, &len);
    if (!buf) return 0;
    int64_t head[2];
    int ok = take(buf, len, &at, head, sizeof head) && head[0] >= 0 && head[0] < (1 << 28);
    if (ok) {
        w->n = (size_t)head[0];
        w->num_top = head[1];
        w->roff = xmalloc((w->n + 1) * sizeof(int64_t));
        w->sampled = xmalloc(w->n * sizeof(int64_t) + 8);
        ok = take(buf, len, &at, w->roff, (w->n + 1) * sizeof(int64_t)) && w->roff[0] == 0;
    }
    if (ok) {
        size_t cnt = (size_t)w->roff[w->n];
        w->ids = xmalloc(cnt * sizeof(uint32_t) + 4);
        w->vals = xmalloc(cnt * sizeof(float) + 4);
        ok = take(buf, len, &at, w->ids, cnt * sizeof(uint32_t)) &&
             take(buf, len, &at, w->vals, cnt * sizeof(float)) &&
             take(buf, len, &at, w->sampled, w->n * sizeof(int64_t));
    }
    free(buf);
    return ok;
}

static int bench(const char *path) {
    workload w;
    if (path) {
        if (!load(&w, path)) {
            fprintf(stderr, "cannot read %s\n", path);
            return 2;
        }
        printf("workload %s: ", path);
    } else {
        synthesize(&w, 8192, 22);
        printf("workload synthesized: ");
    }
    size_t n = w.n, cnt = (size_t)w.roff[n];
    printf("%zu tokens, %zu row entries, num_top %lld, k = 20\n", n, cnt, (long long)w.num_top);
    int64_t *coff = xmalloc((n + 1) * sizeof(int64_t)), *cids = xmalloc(cnt * sizeof(int64_t));
    double *clps = xmalloc(cnt * sizeof(double)), *slps = xmalloc(n * sizeof(double));
    int64_t *out_off = xmalloc((n + 1) * sizeof(int64_t)), *out_ids = xmalloc(cnt * sizeof(int64_t));
    double *out_lps = xmalloc(cnt * sizeof(double));
    for (size_t t = 0; t < n; t++) { /* what the glue passes: the row's value of the sampled id */
        slps[t] = NAN;
        for (int64_t i = w.roff[t]; i < w.roff[t + 1]; i++)
            if ((int64_t)w.ids[i] == w.sampled[t]) slps[t] = w.vals[i];
    }
    for (int p = 0; p < g_npaths; p++) {
        int path = g_paths[p], code = 0;
        double best_c = 1e9, best_s = 1e9, best_t = 1e9;
        ptrdiff_t failed = 0;
        for (int rep = 0; rep < 200; rep++) {
            double t0 = now();
            tw_compact_candidates(n, w.roff, w.ids, w.vals, w.num_top, coff, cids, clps, path);
            double t1 = now();
            failed = tw_select_heads(n, coff, cids, clps, w.sampled, slps, 20, NULL, NULL, out_off,
                                     out_ids, out_lps, &code, path);
            double t2 = now();
            if (t1 - t0 < best_c) best_c = t1 - t0;
            if (t2 - t1 < best_s) best_s = t2 - t1;
            if (t2 - t0 < best_t) best_t = t2 - t0;
        }
        printf("  %-6s compact_candidates %7.1f us   select_heads %7.1f us   together %7.1f us"
               "   (%.2f ns/candidate; result %td/%d, %lld head entries)\n",
               tw_path_name(path), best_c * 1e6, best_s * 1e6, best_t * 1e6, best_t * 1e9 / (double)cnt,
               failed, code, (long long)out_off[n]);
    }
    /* rows straight to heads (tw_compact_heads) against the two kernels it replaces */
    {
        float *sv = xmalloc(n * sizeof(float)), *hv = xmalloc(cnt * sizeof(float));
        for (int p = 0; p < g_npaths; p++) {
            int kind = 0, code = 0;
            ptrdiff_t failed = 0;
            double best_two = 1e9, best_one = 1e9;
            for (int rep = 0; rep < 200; rep++) {
                double t0 = now();
                tw_compact_rows_candidates(n, w.roff, w.ids, w.vals, w.sampled, w.num_top, sv, &kind, coff,
                                           cids, clps, g_paths[p]);
                tw_select_heads(n, coff, cids, clps, w.sampled, slps, 20, NULL, NULL, out_off, out_ids,
                                out_lps, &code, g_paths[p]);
                double t1 = now();
                failed = tw_compact_heads(n, w.roff, w.ids, w.vals, w.sampled, w.num_top, 20, NULL, NULL, sv,
                                          out_off, out_ids, hv, &kind, &code, g_paths[p]);
                double t2 = now();
                if (t1 - t0 < best_two) best_two = t1 - t0;
                if (t2 - t1 < best_one) best_one = t2 - t1;
            }
            printf("  %-6s rows, candidates, heads: two kernels %7.1f us   tw_compact_heads %7.1f us"
                   " (result %td/%d/%d)\n", tw_path_name(g_paths[p]), best_two * 1e6, best_one * 1e6, failed,
                   kind, code);
        }
        free(sv);
        free(hv);
    }
    /* the same decisions, all by exp() and exact sums: the cost the estimate avoids */
    {
        double best = 1e9;
        for (int rep = 0; rep < 20; rep++) {
            double t0 = now(), sink = 0;
            for (size_t t = 0; t < n; t++)
                sink += tw_fsum_exp(out_lps + out_off[t], (size_t)(out_off[t + 1] - out_off[t]));
            double t1 = now();
            if (t1 - t0 < best) best = t1 - t0;
            if (sink < 0) printf("?");
        }
        printf("  for comparison, exp() + exact sum of every head: %.1f us\n", best * 1e6);
    }
    /* native layout: the same heads without the leading sampled entry (ranked order, as
       logprobs.content's top_logprobs come), candidates already in CSR form */
    {
        int64_t *noff = xmalloc((n + 1) * sizeof(int64_t)), *nids = xmalloc(cnt * sizeof(int64_t));
        double *nlps = xmalloc(cnt * sizeof(double));
        size_t at = 0;
        noff[0] = 0;
        for (size_t t = 0; t < n; t++) {
            for (int64_t i = w.roff[t] + 1; i < w.roff[t + 1]; i++) {
                nids[at] = w.ids[i];
                nlps[at++] = w.vals[i];
            }
            noff[t + 1] = (int64_t)at;
        }
        for (int p = 0; p < g_npaths; p++) {
            int code = 0;
            ptrdiff_t failed = 0;
            double best = 1e9;
            for (int rep = 0; rep < 200; rep++) {
                double t0 = now();
                failed = tw_select_heads(n, noff, nids, nlps, w.sampled, slps, 20, NULL, NULL,
                                         out_off, out_ids, out_lps, &code, g_paths[p]);
                double t1 = now();
                if (t1 - t0 < best) best = t1 - t0;
            }
            printf("  %-6s native layout (%zu candidates): select_heads %7.1f us (result %td/%d)\n",
                   tw_path_name(g_paths[p]), at, best * 1e6, failed, code);
        }
        free(noff);
        free(nids);
        free(nlps);
    }
    free(coff);
    free(cids);
    free(clps);
    free(slps);
    free(out_off);
    free(out_ids);
    free(out_lps);
    free(w.roff);
    free(w.sampled);
    free(w.ids);
    free(w.vals);
    return 0;
}

int main(int argc, char **argv) {
    paths_init();
    flood_seed();
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) return bench(argc > 2 ? argv[2] : NULL);
    long count = argc > 1 ? strtol(argv[1], NULL, 10) : 3000;
    paths_print(NULL);
    g_flood_wide = flood_ids64(FLOOD_WIDE);
    test_fsum();
    test_edges();
    test_thresholds(walk_limit);
    test_nomem();
    test_compact(count / 2);
    test_compact_wide_ids();
    test_compact_heads(count);
    test_thresholds(walk_compact);
    test_random(count);
    free(g_flood_wide);
    return checks_done();
}
