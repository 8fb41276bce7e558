/*
 * Standalone tests and benchmark for head selection: csrc/rules/tw_heads.c, tw_compact_candidates.c,
 * tw_compact_heads.c, tw_sum.c, tw_exp.c and tw_rank.c (included below, so that allocation
 * failures can be injected; tw_validate.c is linked).
 *
 *   make -C tests/c heads-test          (see tests/c/Makefile)
 *   ./test_heads [random_responses]     edge cases, thresholds, random cross-check
 *   ./test_heads --bench [FILE]         the compact 8k x 23, k = 20 workload: FILE as
 *                                       written by check_heads.py --dump-sample, else
 *                                       synthesized the same way
 *   ./test_heads --exp-sweep            the AVX2 heads' single-precision exp against exp() on
 *                                       every float in [-88, 1] (about 1.1e9; a minute)
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
#include "../../csrc/rules/tw_sum.c"
#include "../../csrc/rules/tw_exp.c"
#include "../../csrc/rules/tw_rank.c"
#include "../../csrc/rules/tw_heads.c"
#include "../../csrc/rules/tw_compact_candidates.c"
#include "../../csrc/rules/tw_compact_heads.c"
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

/* The test groups, in files of their own (they use the harness above). */
#include "test_heads_select.h"
#include "test_heads_compact.h"

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

#ifdef TW_X86_SIMD
/* tw_distinct_after_first_avx2_n (tw_heads_internal.h) against its statement: 1 exactly when
   the keys of lanes 0 .. P-1 are distinct, P = 16, 24 or 32 lanes by the vector count, a lane's
   key the low 16 bits of its id, 0xFFE0 + the lane for lane 0 and the lanes past the row (so a
   1 always means lanes 1 .. len-1 hold distinct ids). Ids drawn to collide: a few small ones,
   ids 2^16 apart, ids whose low bits are a stand-in's, and random ones. */
TW_TARGET_AVX2 static int distinct_avx2(const uint32_t *ids, size_t len, size_t nvec) {
    __m256i a[4];
    tw_load32_avx2_n(ids, len, a, (unsigned)nvec);
    switch (nvec) {
    case 1: return tw_distinct_after_first_avx2_n(a, len, 1);
    case 2: return tw_distinct_after_first_avx2_n(a, len, 2);
    case 3: return tw_distinct_after_first_avx2_n(a, len, 3);
    default: return tw_distinct_after_first_avx2_n(a, len, 4);
    }
}

static void test_distinct_keys(long count) {
    if (!tw_path_available(TW_PATH_AVX2)) return;
    for (long it = 0; it < count; it++) {
        size_t len = rndn(33), kind = rndn(5);
        uint32_t ids[32] = {0};
        for (size_t i = 0; i < len; i++) {
            switch (kind) {
            case 0: ids[i] = (uint32_t)rndn(48); break;
            case 1: ids[i] = (uint32_t)rndn(40) + ((uint32_t)rndn(4) << 16); break;
            case 2: ids[i] = rndn(4) ? (uint32_t)(0xFFE0 + rndn(32)) + ((uint32_t)rndn(3) << 16) : (uint32_t)rnd(); break;
            case 3: ids[i] = (uint32_t)rnd(); break;
            default: ids[i] = (uint32_t)(rndn(200000) + (rndn(2) ? 0 : 0xFFFF0000u)); break;
            }
        }
        /* now and then a row of distinct ids, or one repeat of lane 0 */
        if (rndn(3) == 0)
            for (size_t i = 0; i < len; i++) ids[i] = (uint32_t)(i * 7919u + (kind << 16));
        if (len > 1 && rndn(2)) ids[1 + rndn(len - 1)] = ids[0];
        uint32_t *row = malloc(len ? len * sizeof *row : 1); /* exact size: ASan sees a read past it */
        if (len) memcpy(row, ids, len * sizeof *row);
        for (size_t nvec = len ? (len + 7) / 8 : 1; nvec <= 4; nvec++) {
            size_t lanes = nvec <= 2 ? 16 : 8 * nvec;
            uint32_t key[32];
            int want = 1;
            for (size_t i = 0; i < lanes; i++) {
                key[i] = i == 0 || i >= len ? 0xFFE0u + (uint32_t)i : ids[i] & 0xFFFFu;
                for (size_t j = 0; j < i; j++) want &= key[j] != key[i];
            }
            int got = distinct_avx2(row, len, nvec);
            CHECK(got == want, "distinct keys: len %zu nvec %zu kind %zu: got %d, want %d", len, nvec, kind, got, want);
            if (got)
                for (size_t i = 1; i < len; i++)
                    for (size_t j = 1; j < i; j++)
                        CHECK(ids[i] != ids[j], "distinct keys: len %zu nvec %zu: lanes %zu and %zu repeat", len, nvec, j, i);
        }
        free(row);
    }
}
#else
static void test_distinct_keys(long count) { (void)count; }
#endif

int main(int argc, char **argv) {
    paths_init();
    flood_seed();
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) return bench(argc > 2 ? argv[2] : NULL);
    if (argc > 1 && strcmp(argv[1], "--exp-sweep") == 0) {
        exp_f32_sweep(1);
        return checks_done();
    }
    long count = argc > 1 ? strtol(argv[1], NULL, 10) : 3000;
    paths_print(NULL);
    g_flood_wide = flood_ids64(FLOOD_WIDE);
    test_fsum();
    test_edges();
    test_thresholds(walk_limit);
    test_nomem();
    test_distinct_keys(count * 20);
    test_compact(count / 2);
    test_compact_wide_ids();
    test_compact_empty_row();
    test_compact_heads(count);
    test_thresholds(walk_compact);
    test_random(count);
    free(g_flood_wide);
    return checks_done();
}
