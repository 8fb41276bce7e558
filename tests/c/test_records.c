/*
 * Standalone tests and benchmark for the record readers (csrc/wire/tw_records.c, tw_records_rows.c)
 * and the number conversion (csrc/codecs/tw_number.c).
 *
 *   make -C tests/c records-test    (rules in tests/c/Makefile), or:
 *   cc -O2 -Wall -Wextra -std=c11 -Icsrc -o /tmp/test_records tests/c/test_records.c
 *   /tmp/test_records                       tests
 *   /tmp/test_records --fuzz N              the same with N random mutations
 *   /tmp/test_records --bench file.json ... kernel time on choices[0]
 *
 * This file includes the scanner's, tw_number.c's and the record readers'
 * files itself (link none of them), with realloc redirected so that allocation failures
 * can be injected.  Every test runs on every path this CPU has (TW_PATH_*,
 * scanner and readers alike); build it with -DTW_NO_SIMD too for a build
 * with the portable code only.
 *
 * Every content array is validated by tw_scan inside a small document, then
 * copied to an exactly-sized heap block and parsed from there, so a read
 * past the content shows up under ASan/valgrind.  Numbers are checked
 * against strtod (correctly rounded in glibc; this program never calls
 * setlocale, so it runs in the "C" locale).  The differential test against
 * the Python reference is tests/c/check_records.py.
 */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tw_check.h"

/* The path every kernel call of a test run takes (main runs the tests on each
   path this CPU has). */
static int g_path = TW_PATH_AUTO;

/* Allocation failure injection (g_fail_after, tw_check.h) for every realloc. */
static long g_inject = -1; /* g_fail_after during run()'s parse */
#define tw_mem_realloc test_realloc
#include "../../csrc/json/tw_scan.c"
#include "../../csrc/json/tw_scan_values.c"
#include "../../csrc/codecs/tw_number.c"
#include "../../csrc/wire/tw_records.c"
#include "../../csrc/wire/tw_records_rows.c"
#undef tw_mem_realloc

#include "tw_flood.h"
#include "tw_strip_copy.h"

static uint64_t dbits(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

/* ------------------------------------------------------------------------ */
/* Numbers                                                                   */
/* ------------------------------------------------------------------------ */

/* tw_number_parse(s, g_path) must consume all of s and equal `want` bit for bit,
   alone in an exact heap block (overreads show) and followed by 64 bytes of
   JSON punctuation (room for the SIMD reads). */
static void num_is(const char *s, double want)
{
    static const char PAD[] = ",\"bytes\":[116,50],\"top_logprobs\":[]},{\"token\":\"x\"}   ";
    double got = 12345.0;
    size_t n = strlen(s), used;
    char *heap = (char *)malloc(n + 64);
    if (!heap)
        exit(2);
    for (int pad = 0; pad < 2; pad++) {
        size_t len = n + (pad ? 64 : 0);
        char *b = pad ? heap : heap + 64; /* unpadded: the block's last n bytes */
        memcpy(b, s, n);
        if (pad)
            for (size_t i = 0; i < 64; i++)
                b[n + i] = PAD[i % (sizeof PAD - 1)];
        used = tw_number_parse(b, len, &got, g_path);
        CHECK(used == n && dbits(got) == dbits(want),
              "number %.80s (pad %d): used %zu/%zu, %.17g != %.17g", s, pad, used, n, got, want);
    }
    free(heap);
}

/* Against strtod (integer literal "-0" excepted: it is +0.0 here). */
static void num_strtod(const char *s) { num_is(s, strtod(s, NULL)); }

static void test_numbers(void)
{
    static const char *const LIT[] = {
        "0", "1", "-1", "0.0", "-0.0", "-0e0", "0e-5", "1.5", "-5.171349048614502",
        "-3.8219659328460693", "-9.734710693359375", "-4.0206756591796875", "0.1", "0.2",
        "0.30000000000000004", "1e23", "8.98846567431158e307", "1.7976931348623157e308",
        "1.7976931348623158e308", "2.2250738585072011e-308", "2.2250738585072014e-308",
        "2.2250738585072012e-308", "4.9406564584124654e-324", "2.4703282292062327e-324",
        "2.4703282292062328e-324", "7e-324", "1e-400", "-1e-400", "1e-999999999999",
        "9007199254740993", "9007199254740992.5", "4503599627370496.5", "4503599627370497.5",
        "-9999", "-9999.0", "-9999.00000000000000000001", "123456789012345678901234567890",
        "18446744073709551615", "18446744073709551616", "9223372036854775808",
        "1.00000000000000011102230246251565404236316680908203125",
        "1.00000000000000011102230246251565404236316680908203124",
        "1.00000000000000011102230246251565404236316680908203126", "1E+2", "1e+02", "1E-2",
        "0.000001", "1e-6", "123.456e-2", "-0.0000000000000000000000000001e-300", "2.5e-324",
        "6.103515625e-05", "7.450580596923828125e-9", "3.0517578125e-05", "0.5", "-0.25",
        "1234567890123456789", "12345678901234567890", "1.2345678901234567890e10",
        "5e-324", "4.9e-324", "1.5e-323", "2.225073858507201e-308",
    };
    char buf[2048];
    for (size_t i = 0; i < sizeof LIT / sizeof LIT[0]; i++)
        num_strtod(LIT[i]);
    num_is("-0", 0.0); /* an integer literal: the int 0 */
    {
        double v;
        CHECK(tw_number_parse("-00", 3, &v, g_path) == 2, "-00 consumes -0");
        CHECK(tw_number_parse("1.5x", 4, &v, g_path) == 3 && v == 1.5, "1.5x");
        CHECK(tw_number_parse("01", 2, &v, g_path) == 1 && v == 0.0, "01");
        CHECK(tw_number_parse("1e5e", 4, &v, g_path) == 3 && v == 1e5, "1e5e");
        CHECK(tw_number_parse("", 0, &v, g_path) == 0, "empty");
        CHECK(tw_number_parse("-", 1, &v, g_path) == 0, "-");
        CHECK(tw_number_parse(".5", 2, &v, g_path) == 0, ".5");
        CHECK(tw_number_parse("1.", 2, &v, g_path) == 1 && v == 1.0, "1.");
        CHECK(tw_number_parse("1e", 2, &v, g_path) == 1 && v == 1.0, "1e");
        CHECK(tw_number_parse("1e+", 3, &v, g_path) == 1 && v == 1.0, "1e+");
        CHECK(tw_number_parse("1.5e-x", 6, &v, g_path) == 3 && v == 1.5, "1.5e-x");
        CHECK(tw_number_parse("-x", 2, &v, g_path) == 0, "-x");
        CHECK(tw_number_parse("+1", 2, &v, g_path) == 0, "+1");
        CHECK(tw_number_parse("1e400", 5, &v, g_path) == 5 && isinf(v) && v > 0, "1e400 -> inf");
        CHECK(tw_number_parse("-1e400", 6, &v, g_path) == 6 && isinf(v) && v < 0, "-1e400 -> -inf");
    }
    /* long digit strings */
    memset(buf, '9', 1500);
    buf[1500] = 0;
    num_strtod(buf); /* 1500 nines: > DBL_MAX? no, 10^1500 -> inf */
    strcpy(buf, "0.");
    memset(buf + 2, '0', 1000);
    strcpy(buf + 1002, "123456789e1000");
    num_strtod(buf);
    strcpy(buf, "1.");
    memset(buf + 2, '0', 1200);
    strcpy(buf + 1202, "1");
    num_strtod(buf); /* 1 + 10^-1201: rounds to 1 */
    /* halfway between 1 and its successor, with a 1 at digit 900 */
    strcpy(buf, "1.00000000000000011102230246251565404236316680908203125");
    memset(buf + strlen(buf), '0', 900);
    buf[55 + 900] = '1';
    buf[56 + 900] = 0;
    num_strtod(buf);
    /* random literals against strtod */
    for (int i = 0; i < 300000; i++) {
        size_t k = 0, nd = 1 + rndn(i % 10 == 0 ? 60 : 20), point;
        if (rnd() & 1)
            buf[k++] = '-';
        buf[k++] = (char)('1' + rndn(9));
        for (size_t j = 1; j < nd; j++)
            buf[k++] = (char)('0' + rndn(10));
        if (rnd() & 1) {
            /* a fraction: move some digits after the point */
            point = rndn(nd);
            memmove(buf + k - point + 1, buf + k - point, point);
            buf[k - point] = '.';
            k++;
            if (point == 0)
                buf[k++] = '0';
        }
        if (rnd() % 3) {
            int e = (int)rndn(700) - 350;
            k += (size_t)sprintf(buf + k, "%c%d", (rnd() & 1) ? 'e' : 'E', e);
        }
        buf[k] = 0;
        if (fabs(strtod(buf, NULL)) == HUGE_VAL)
            continue;
        num_strtod(buf);
    }
    /* the neighbours of random doubles, printed with 17 and 25 digits */
    for (int i = 0; i < 200000; i++) {
        uint64_t b = rnd() & 0x7FEFFFFFFFFFFFFFull;
        double x;
        memcpy(&x, &b, sizeof x);
        sprintf(buf, "%.16e", x);
        num_strtod(buf);
        sprintf(buf, "%.24e", x);
        num_strtod(buf);
        sprintf(buf, "%.40e", x);
        num_strtod(buf);
    }
    printf("numbers: %llu checks\n", g_checks);
}

/* ------------------------------------------------------------------------ */
/* Content arrays                                                            */
/* ------------------------------------------------------------------------ */

typedef struct {
    char *buf;     /* exactly the content text, heap */
    tw_value v;
    size_t n;
    int rc;
    tw_rec_result res;
    double *sampled, *elps;
    int64_t *coff;
    tw_rec_cands c;
} run_t;

/* Validate `content` with tw_scan and copy it to an exact heap block. */
static int prepare(const char *content, char **out, tw_value *v)
{
    static const char pre[] = "{\"choices\":[{\"token_ids\":[],\"logprobs\":{\"content\":";
    static const char post[] = "}}]}";
    size_t n = strlen(content);
    char *doc = (char *)malloc(sizeof pre + n + sizeof post);
    tw_doc d;
    int ok;
    if (!doc)
        exit(2);
    sprintf(doc, "%s%s%s", pre, content, post);
    tw_doc_init(&d);
    d.path = g_path;
    ok = tw_scan(doc, strlen(doc), &d) == TW_OK && d.nchoices == 1 &&
         d.choice[0].f[TW_F_LOGPROBS_CONTENT].type == TW_T_ARRAY;
    if (ok) {
        *v = d.choice[0].f[TW_F_LOGPROBS_CONTENT];
        *out = (char *)malloc(n ? n : 1);
        if (!*out)
            exit(2);
        memcpy(*out, doc + v->start, n);
        v->end -= v->start;
        v->start = 0;
    }
    tw_doc_free(&d);
    free(doc);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Records read during the scan: the same as the scan, then tw_rec_parse     */
/* ------------------------------------------------------------------------ */

static unsigned long long g_taken; /* content arrays the scan's reader read */

/* Same scan verdict and records with the content reader (c1) as without (c0). */
static int same_scan(const tw_doc *a, int ra, const tw_doc *b, int rb)
{
    if (ra != rb || a->err_pos != b->err_pos || (a->err_msg == NULL) != (b->err_msg == NULL) ||
        (a->err_msg && strcmp(a->err_msg, b->err_msg) != 0))
        return 0;
    if (ra != TW_OK)
        return 1;
    if (a->nchoices != b->nchoices || a->nblank != b->nblank || a->blank_bytes != b->blank_bytes ||
        memcmp(&a->choices, &b->choices, sizeof(tw_value)) != 0)
        return 0;
    for (size_t i = 0; i < a->nblank; i++)
        if (a->blank[i].start != b->blank[i].start || a->blank[i].end != b->blank[i].end)
            return 0;
    for (size_t i = 0; i < a->nchoices; i++) {
        if (a->choice[i].is_object != b->choice[i].is_object)
            return 0;
        for (int f = 0; f < TW_NFIELDS; f++) {
            tw_value x = a->choice[i].f[f], y = b->choice[i].f[f];
            if (f == TW_F_LOGPROBS_CONTENT) {
                if (x.read || (y.read && y.type != TW_T_ARRAY))
                    return 0;
                y.read = 0;
                y.read_at = 0;
            }
            if (memcmp(&x, &y, sizeof x) != 0)
                return 0;
        }
    }
    return 1;
}

/* tw_rec_take against tw_rec_parse over one document's content record. */
static void take_vs_parse(const char *doc, const tw_doc *d, const tw_value *v, const int64_t *ids,
                          int want_top)
{
    size_t n = v->count;
    double *s0 = (double *)calloc(n + 1, sizeof(double)), *s1 = (double *)calloc(n + 1, sizeof(double));
    double *e0 = (double *)calloc(n + 1, sizeof(double)), *e1 = (double *)calloc(n + 1, sizeof(double));
    int64_t *c0 = (int64_t *)calloc(n + 1, sizeof(int64_t)), *c1 = (int64_t *)calloc(n + 1, sizeof(int64_t));
    tw_rec_cands k0 = {NULL, NULL, 0, 1}, k1 = {NULL, NULL, 0, 1};
    tw_rec_result r0, r1;
    int rc0, rc1, ok;
    size_t good;
    if (!s0 || !s1 || !e0 || !e1 || !c0 || !c1)
        exit(2);
    tw_value plain = *v;
    plain.read = 0;
    rc0 = tw_rec_parse(doc, &plain, n, ids, want_top, s0, want_top ? c0 : NULL,
                       want_top ? e0 : NULL, want_top ? &k0 : NULL, &r0, g_path);
    rc1 = tw_rec_take(d, v, n, ids, want_top, s1, want_top ? c1 : NULL, want_top ? e1 : NULL,
                      want_top ? &k1 : NULL, &r1);
    ok = rc0 == rc1 && r0.sampled_err == r1.sampled_err && r0.sampled_code == r1.sampled_code &&
         r0.top_err == r1.top_err && r0.top_code == r1.top_code && r0.ncand == r1.ncand;
    good = r0.sampled_err < 0 ? n : (size_t)r0.sampled_err;
    ok = ok && memcmp(s0, s1, good * sizeof(double)) == 0;
    if (ok && want_top) {
        size_t t = r0.top_err < 0 ? n : (size_t)r0.top_err;
        ok = memcmp(c0, c1, (n + 1) * sizeof(int64_t)) == 0 &&
             memcmp(e0, e1, t * sizeof(double)) == 0 &&
             (!r0.ncand || (memcmp(k0.ids, k1.ids, r0.ncand * sizeof(int64_t)) == 0 &&
                            memcmp(k0.lps, k1.lps, r0.ncand * sizeof(double)) == 0));
    }
    CHECK(ok, "take vs parse (top %d): rc %d/%d sampled (%td,%d)/(%td,%d) top (%td,%d)/(%td,%d) "
              "ncand %zu/%zu: %.300s",
          want_top, rc0, rc1, r0.sampled_err, r0.sampled_code, r1.sampled_err, r1.sampled_code,
          r0.top_err, r0.top_code, r1.top_err, r1.top_code, r0.ncand, r1.ncand, doc);
    if (want_top && rc0 == TW_REC_OK && r0.ncand) {
        /* fixed-size candidate arrays: the same room is enough, or too small */
        for (size_t cap = r0.ncand - 1; cap <= r0.ncand; cap++) {
            tw_rec_cands f0 = {k0.ids, k0.lps, cap, 0}, f1 = {k1.ids, k1.lps, cap, 0};
            rc0 = tw_rec_parse(doc, &plain, n, ids, 1, s0, c0, e0, &f0, &r0, g_path);
            rc1 = tw_rec_take(d, v, n, ids, 1, s1, c1, e1, &f1, &r1);
            CHECK(rc0 == rc1, "take vs parse, %zu candidates room: rc %d/%d", cap, rc0, rc1);
        }
    }
    tw_rec_cands_free(&k0);
    tw_rec_cands_free(&k1);
    free(s0);
    free(s1);
    free(e0);
    free(e1);
    free(c0);
    free(c1);
}

/* `content` in a document scanned with and without the content reader, at several depth limits:
   the same verdict, error and records; where the reader read the array, tw_rec_take gives what
   tw_rec_parse gives (for ids, then zeros where ids is shorter). */
static void check_take(const char *content, const int64_t *ids, size_t nids)
{
    static const char pre[] = "{\"choices\":[{\"token_ids\":[],\"logprobs\":{\"content\":";
    static const char post[] = "}}]}";
    static const size_t DEPTHS[] = {1024, 6, 7, 8, 9, 10, 0};
    size_t n = strlen(content), len;
    char *doc = (char *)malloc(sizeof pre + n + sizeof post);
    if (!doc)
        exit(2);
    sprintf(doc, "%s%s%s", pre, content, post);
    len = strlen(doc);
    for (size_t di = 0; di < sizeof DEPTHS / sizeof DEPTHS[0]; di++) {
        tw_doc d0, d1;
        int r0, r1;
        tw_doc_init(&d0);
        tw_doc_init(&d1);
        d0.path = d1.path = g_path;
        d0.max_depth = d1.max_depth = DEPTHS[di];
        d0.blank_fields = d1.blank_fields = 1u << TW_F_LOGPROBS_CONTENT;
        tw_rec_read_during_scan(&d1);
        r0 = tw_scan(doc, len, &d0);
        r1 = tw_scan(doc, len, &d1);
        CHECK(same_scan(&d0, r0, &d1, r1), "scan with the content reader differs (depth %zu): %.300s",
              DEPTHS[di], doc);
        if (r1 == TW_OK && d1.nchoices == 1 && d1.choice[0].f[TW_F_LOGPROBS_CONTENT].read) {
            const tw_value *v = &d1.choice[0].f[TW_F_LOGPROBS_CONTENT];
            int64_t *idv = (int64_t *)calloc(v->count + 1, sizeof(int64_t));
            if (!idv)
                exit(2);
            for (size_t i = 0; i < v->count && i < nids; i++)
                idv[i] = ids[i];
            take_vs_parse(doc, &d1, v, idv, 1);
            take_vs_parse(doc, &d1, v, idv, 0);
            take_vs_parse(doc, &d1, v, NULL, 1); /* by position */
            take_vs_parse(doc, &d1, v, NULL, 0);
            g_taken++;
            free(idv);
        }
        tw_doc_free(&d0);
        tw_doc_free(&d1);
    }
    free(doc);
}

/* Parse content for ids (n = the content's count; ids shorter: zeros). */
static void run(run_t *r, const char *content, const int64_t *ids, size_t nids, int want_top)
{
    int64_t *idv;
    memset(r, 0, sizeof *r);
    if (!prepare(content, &r->buf, &r->v)) {
        CHECK(0, "invalid test content: %.200s", content);
        r->rc = -100;
        return;
    }
    r->n = r->v.count;
    idv = (int64_t *)calloc(r->n + 1, sizeof(int64_t));
    r->sampled = (double *)calloc(r->n + 1, sizeof(double));
    r->elps = (double *)calloc(r->n + 1, sizeof(double));
    r->coff = (int64_t *)calloc(r->n + 1, sizeof(int64_t));
    if (!idv || !r->sampled || !r->elps || !r->coff)
        exit(2);
    for (size_t i = 0; i < r->n && i < nids; i++)
        idv[i] = ids[i];
    r->c.grow = 1;
    g_fail_after = g_inject; /* allocation failures in the parse only */
    r->rc = tw_rec_parse(r->buf, &r->v, r->n, idv, want_top, r->sampled, r->coff, r->elps,
                            &r->c, &r->res, g_path);
    g_fail_after = -1;
    if (g_inject < 0 && want_top)
        check_take(content, idv, r->n);
    free(idv);
}

static void done(run_t *r)
{
    free(r->buf);
    free(r->sampled);
    free(r->elps);
    free(r->coff);
    tw_rec_cands_free(&r->c);
}

/* Expect the first failing entries and codes of both passes. */
static void expect(const char *content, const int64_t *ids, size_t nids, ptrdiff_t serr,
                   int scode, ptrdiff_t terr, int tcode, int line)
{
    run_t r;
    run(&r, content, ids, nids, 1);
    CHECK(r.rc == TW_REC_OK && r.res.sampled_err == serr && r.res.sampled_code == scode &&
              r.res.top_err == terr && r.res.top_code == tcode,
          "line %d: rc %d sampled (%td, %d) want (%td, %d), top (%td, %d) want (%td, %d): %.300s",
          line, r.rc, r.res.sampled_err, r.res.sampled_code, serr, scode, r.res.top_err,
          r.res.top_code, terr, tcode, content);
    done(&r);
    /* the sampled pass alone gives the same sampled verdict */
    run(&r, content, ids, nids, 0);
    CHECK(r.rc == TW_REC_OK && r.res.sampled_err == serr && r.res.sampled_code == scode &&
              r.res.top_err == -1 && r.res.top_code == 0 && r.res.ncand == 0,
          "line %d (sampled only): (%td, %d)", line, r.res.sampled_err, r.res.sampled_code);
    done(&r);
}

#define ONE(id) ((const int64_t[]){id}), 1
/* EXPECT(content, ids, nids, serr, scode, terr, tcode) */
#define EXPECT(...) expect(__VA_ARGS__, __LINE__)

/* The test groups, in files of their own (they use the harness above). */
#include "test_records_rules.h"
#include "test_records_generated.h"

/* ------------------------------------------------------------------------ */
/* Fuzz: mutations of a valid document, parsed when tw_scan accepts them     */
/* ------------------------------------------------------------------------ */

/* A document of one choice whose logprobs.content holds count copies of entry; its length in
   *len. Exits when out of memory. */
static char *repeated_entries_doc(const char *entry, size_t count, size_t *len)
{
    static const char pre[] = "{\"choices\":[{\"token_ids\":[],\"logprobs\":{\"content\":[";
    size_t w = strlen(entry), n = sizeof pre - 1;
    char *doc = (char *)malloc(sizeof pre + count * (w + 1) + 8);
    if (!doc)
        exit(2);
    memcpy(doc, pre, n);
    for (size_t k = 0; k < count; k++) {
        memcpy(doc + n, entry, w);
        n += w;
        doc[n++] = k + 1 < count ? ',' : ']';
    }
    memcpy(doc + n, "}}]}", 4);
    *len = n + 4;
    return doc;
}

/* Entries certain to fail (no number as logprob) are not stored: arrays of small objects that
   cannot pass leave the reader's entries at their first block (and the array to the scan),
   whatever their count.  An entry naming no id but with a logprob is stored (records read by
   position): each takes at least 13 bytes of text ({"logprob":0}). */
static void test_reader_bounded(void)
{
    static const char *const ENTRY[] = {"{}", "{\"token_id\":1}", "{\"token\":\"a\"}",
                                        "{\"token_id\":1,\"logprob\":null}"};
    for (size_t i = 0; i < sizeof ENTRY / sizeof ENTRY[0]; i++) {
        size_t count = 200000, len;
        char *doc = repeated_entries_doc(ENTRY[i], count, &len);
        tw_doc d;
        tw_doc_init(&d);
        d.path = g_path;
        tw_rec_read_during_scan(&d);
        CHECK(tw_scan(doc, len, &d) == TW_OK, "bounded reader: scan failed (%s)", ENTRY[i]);
        CHECK(d.nentries == 0 && d.entries_cap <= 256 && !d.choice[0].f[TW_F_LOGPROBS_CONTENT].read,
              "bounded reader: %zu entries stored (capacity %zu) for %zu entries %s", d.nentries,
              d.entries_cap, count, ENTRY[i]);
        tw_doc_free(&d);
        free(doc);
    }
}

/* Entries the reader stores (here naming no id, as a response read by position has them, at
   their shortest: {"logprob":0}, 13 bytes) hold at most sizeof(tw_entry) for each 13 bytes of
   text, twice that with the capacity's doubling: entries_cap bounded by the text. */
static void test_reader_bounded_stored(void)
{
    size_t count = 200000, len;
    char *doc = repeated_entries_doc("{\"logprob\":0}", count, &len);
    tw_doc d;
    tw_doc_init(&d);
    d.path = g_path;
    tw_rec_read_during_scan(&d);
    CHECK(tw_scan(doc, len, &d) == TW_OK, "bounded reader, stored entries: scan failed");
    CHECK(d.nentries == count && d.entries_cap <= 2 * (len / 13) + 256,
          "bounded reader, stored entries: %zu of %zu stored, capacity %zu for %zu bytes of text", d.nentries,
          count, d.entries_cap, len);
    tw_doc_free(&d);
    free(doc);
}

/* The records of a response read by position (no id named: SkyRL's {"logprob": x}, decoded
   text) are read during the scan; tw_rec_take gives what tw_rec_parse gives for them with the
   ids compared (the first entry refused) and without (every logprob read). */
static void test_reader_positional(void)
{
    static const char *const DOCS[] = {
        "{\"choices\":[{\"token_ids\":[5,6],\"logprobs\":{\"content\":[{\"logprob\":-1},{\"logprob\":-0.5}]}}]}",
        "{\"choices\":[{\"token_ids\":[5,6],\"logprobs\":{\"content\":[{\"token\":\"a\",\"logprob\":-1},"
        "{\"token\":\"b\",\"logprob\":-0.5}]}}]}"};
    static const int64_t ids[] = {5, 6};
    for (size_t i = 0; i < sizeof DOCS / sizeof DOCS[0]; i++) {
        tw_doc d;
        tw_rec_result r1, r2;
        double s1[2], s2[2];
        const tw_value *v;
        tw_doc_init(&d);
        d.path = g_path;
        tw_rec_read_during_scan(&d);
        CHECK(tw_scan(DOCS[i], strlen(DOCS[i]), &d) == TW_OK, "by position: scan failed (%zu)", i);
        v = &d.choice[0].f[TW_F_LOGPROBS_CONTENT];
        CHECK(v->read && d.nentries == 2, "by position: %zu entries read during the scan (%zu)", d.nentries, i);
        for (int named = 0; named < 2; named++) {
            const int64_t *with = named ? ids : NULL;
            int rc1 = tw_rec_take(&d, v, 2, with, 0, s1, NULL, NULL, NULL, &r1);
            tw_value plain = *v;
            plain.read = 0;
            int rc2 = tw_rec_parse(DOCS[i], &plain, 2, with, 0, s2, NULL, NULL, NULL, &r2, g_path);
            CHECK(rc1 == rc2 && r1.sampled_err == r2.sampled_err && r1.sampled_code == r2.sampled_code,
                  "by position: take %d (%td, %d) against parse %d (%td, %d) (%zu, named %d)", rc1,
                  r1.sampled_err, r1.sampled_code, rc2, r2.sampled_err, r2.sampled_code, i, named);
            CHECK(named ? r1.sampled_err == 0 && r1.sampled_code == TW_REC_TOKEN_MISMATCH
                        : r1.sampled_err < 0 && s1[0] == -1.0 && s1[1] == -0.5,
                  "by position: verdict (%zu, named %d)", i, named);
        }
        tw_doc_free(&d);
    }
}

static void test_fuzz(size_t rounds)
{
    sbuf b = {NULL, 0, 0};
    int64_t ids[6];
    size_t accepted = 0;
    static const char ALPHA[] = "{}[]\",:\\ 0123456789.-eEtruefalsn_kopgbyid";
    make_content(&b, 6, 4, 0, ids);
    for (size_t r = 0; r < rounds; r++) {
        char *m = (char *)malloc(b.n + 1);
        size_t edits = 1 + rndn(4);
        run_t rr;
        char *buf;
        tw_value v;
        if (!m)
            exit(2);
        memcpy(m, b.s, b.n + 1);
        for (size_t e = 0; e < edits; e++)
            m[rndn(b.n)] = ALPHA[rndn(sizeof ALPHA - 1)];
        check_take(m, ids, 6);
        if (prepare(m, &buf, &v)) {
            int64_t *idv = (int64_t *)calloc(v.count + 1, sizeof(int64_t));
            double *s = (double *)calloc(v.count + 1, sizeof(double));
            double *el = (double *)calloc(v.count + 1, sizeof(double));
            int64_t *co = (int64_t *)calloc(v.count + 1, sizeof(int64_t));
            tw_rec_cands c = {NULL, NULL, 0, 1};
            size_t total = 0;
            if (!idv || !s || !el || !co)
                exit(2);
            for (size_t i = 0; i < v.count && i < 6; i++)
                idv[i] = ids[i];
            CHECK(tw_rec_parse(buf, &v, v.count, idv, 1, s, co, el, &c, &rr.res, g_path) == 0,
                  "fuzz parse");
            CHECK(tw_rec_count(buf, &v, &total, g_path) == 0 && rr.res.ncand <= total &&
                      (rr.res.top_err < 0 || co[v.count] == co[rr.res.top_err]),
                  "fuzz count %zu < %zu", total, rr.res.ncand);
            accepted++;
            tw_rec_cands_free(&c);
            free(idv);
            free(s);
            free(el);
            free(co);
            free(buf);
        }
        free(m);
    }
    free(b.s);
    printf("fuzz: %zu mutations, %zu valid\n", rounds, accepted);
}

/* Content in the shape servers send (what the scan's reader reads), with variations at every
   value: number forms, "token_id" besides or instead of "token", other keys, whitespace. */
static void make_shaped(sbuf *b, size_t n, size_t k, int64_t *ids)
{
    static const char *const LPS[] = {"-0.5216978788375854", "-2", "0", "-0", "-0.0", "-1e-3",
                                      "-1.5E+2", "-123456789.5", "-0.00000000000000000000001",
                                      "1e-7", "2", "-9999.0", "-9999", "-1e400", "-4.0e0",
                                      "-12345678.123456789012", "\"x\"", "null", "true", "[]"};
    static const char *const WS[] = {"", "", "", " ", "\n  ", "\t", "\r\n"};
#define SW WS[rndn(sizeof WS / sizeof WS[0])]
    sb_put(b, "[%s", SW);
    for (size_t i = 0; i < n; i++) {
        size_t kk = rndn(8) == 0 ? rndn(3) : k;
        ids[i] = (int64_t)rndn(200000);
        sb_put(b, "%s{%s", i ? "," : "", SW);
        if (rndn(6) == 0)
            sb_put(b, "\"token_id\"%s:%s%lld,", SW, SW, (long long)ids[i]);
        sb_put(b, "\"token\":%s\"token_id:%lld\"%s,", SW, (long long)ids[i], SW);
        sb_put(b, "\"logprob\":%s%s,", SW,
               rndn(3) ? "-0.25" : LPS[rndn(sizeof LPS / sizeof LPS[0])]);
        if (rndn(4) == 0)
            sb_put(b, "\"bytes\":[%s116,%s49,0,255]%s,", SW, SW, SW);
        else if (rndn(8) == 0)
            sb_put(b, "\"bytes\":%s,", rndn(2) ? "null" : "[]");
        if (rndn(8) == 0)
            sb_put(b, "\"sampling_logprob\":-1.25,\"t\\u0065xt\":\"\xc3\xa9\\n\",");
        sb_put(b, "\"top_logprobs\":%s[", SW);
        for (size_t j = 0; j < kk; j++) {
            long long cid = (long long)(i * 100003 + j * 7919) % 4294967296LL;
            if (rndn(16) == 0)
                sb_put(b, "%s{\"token_id\":%lld,\"logprob\":%s}", j ? "," : "", cid,
                       LPS[rndn(sizeof LPS / sizeof LPS[0])]);
            else
                sb_put(b, "%s{\"token\":\"token_id:%lld\",%s\"logprob\":-%u.%u,\"bytes\":[%u,%u]}",
                       j ? "," : "", cid, SW, (unsigned)rndn(30), (unsigned)rndn(100000),
                       (unsigned)rndn(300), (unsigned)rndn(10));
        }
        sb_put(b, "]%s}", SW);
    }
    sb_put(b, "%s]", SW);
#undef SW
}

/* Mutations of shaped content: the scan with its content reader against the scan without,
   and tw_rec_take against tw_rec_parse wherever the reader read the array. */
static void test_fuzz_shaped(size_t rounds)
{
    static const char ALPHA[] = "{}[]\",:\\ 0123456789.-eEtruefalsn_kopgbyid\x80\xc3\x01";
    unsigned long long before = g_taken;
    for (size_t r = 0; r < rounds; r++) {
        sbuf b = {NULL, 0, 0};
        int64_t ids[8];
        size_t n = 1 + rndn(8), edits = rndn(3);
        make_shaped(&b, n, 1 + rndn(25), ids);
        for (size_t e = 0; e < edits; e++)
            b.s[rndn(b.n)] = ALPHA[rndn(sizeof ALPHA - 1)];
        if (rndn(4) == 0 && n > 1)
            ids[rndn(n)] = 7; /* a token mismatch */
        check_take(b.s, ids, n);
        free(b.s);
    }
    printf("fuzz (shaped): %zu contents, %llu read during the scan\n", rounds, g_taken - before);
}

/* vLLM's named records in the exact layout it writes ({"token":"token_id:N","logprob":X,
   "bytes":null,"top_logprobs":[]}), which the content reader takes without its key-by-key
   walk, with bytes of them edited: the scan with its content reader against the scan without,
   and tw_rec_take against tw_rec_parse.  Then the text cut after every byte, each cut in a
   buffer of its own length (under ASan, a read past it is an error), with and without the
   reader. */
static void make_vllm(sbuf *b, size_t n, int64_t *ids)
{
    static const char *const LPS[] = {"-0.5216978788375854", "-1.3540220142304382", "-12.75",
                                      "-0.0001234", "-1.2e-05", "-9999.0", "-0", "0", "-2",
                                      "-123456789.5", "-1.23456789012345678901", "null"};
    static const char *const IDS[] = {"%lld", "%lld", "%lld", "%lld", "0%lld", "%lld0000000"};
    char id[40];
    sb_put(b, "[");
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int64_t)rndn(rndn(2) ? 150000 : 10);
        snprintf(id, sizeof id, IDS[rndn(sizeof IDS / sizeof IDS[0])], (long long)ids[i]);
        sb_put(b, "%s{\"token\":\"token_id:%s\",\"logprob\":%s,\"bytes\":null,\"top_logprobs\":[]}",
               i ? "," : "", id, rndn(4) ? "-0.6931471805599453" : LPS[rndn(sizeof LPS / sizeof LPS[0])]);
    }
    sb_put(b, "]");
}

static void test_vllm_layout(size_t rounds)
{
    static const char ALPHA[] = "{}[]\",:\\ 0123456789.-eEtruefalsn_kopgbyid\x80\x01";
    static const char pre[] = "{\"choices\":[{\"token_ids\":[],\"logprobs\":{\"content\":";
    unsigned long long before = g_taken;
    for (size_t r = 0; r < rounds; r++) {
        sbuf b = {NULL, 0, 0};
        int64_t ids[12];
        size_t n = 1 + rndn(12), edits = rndn(3);
        make_vllm(&b, n, ids);
        for (size_t e = 0; e < edits; e++)
            b.s[rndn(b.n)] = ALPHA[rndn(sizeof ALPHA - 1)];
        if (rndn(4) == 0)
            ids[rndn(n)] = 7; /* a token mismatch */
        check_take(b.s, ids, n);
        if (r < 40) { /* cut after every byte */
            size_t len = strlen(pre) + b.n;
            char *full = (char *)malloc(len);
            if (!full)
                exit(2);
            memcpy(full, pre, strlen(pre));
            memcpy(full + strlen(pre), b.s, b.n);
            for (size_t cut = strlen(pre); cut <= len; cut++) {
                char *doc = (char *)malloc(cut ? cut : 1);
                tw_doc d0, d1;
                int r0, r1;
                if (!doc)
                    exit(2);
                memcpy(doc, full, cut);
                tw_doc_init(&d0);
                tw_doc_init(&d1);
                d0.path = d1.path = g_path;
                tw_rec_read_during_scan(&d1);
                r0 = tw_scan(doc, cut, &d0);
                r1 = tw_scan(doc, cut, &d1);
                CHECK(r1 != TW_OK && same_scan(&d0, r0, &d1, r1), "vLLM layout cut at %zu of %zu", cut, len);
                tw_doc_free(&d0);
                tw_doc_free(&d1);
                free(doc);
            }
            free(full);
        }
        free(b.s);
    }
    printf("vLLM layout: %zu contents, %llu read during the scan\n", rounds, g_taken - before);
}

/* ------------------------------------------------------------------------ */
/* Benchmark                                                                 */
/* ------------------------------------------------------------------------ */

static void bench_file(const char *path)
{
    size_t m;
    char *buf = read_file(path, &m);
    tw_doc d;
    const tw_value *v;
    size_t n, err, total = 0;
    int64_t *ids, *coff;
    double *s, *el, best[3] = {1e30, 1e30, 1e30};
    tw_rec_cands c = {NULL, NULL, 0, 1};
    tw_rec_result res;
    const char *slash = strrchr(path, '/');
    if (!buf) {
        perror(path);
        return;
    }
    tw_doc_init(&d);
    d.path = g_path;
    if (tw_scan(buf, m, &d) != TW_OK || d.nchoices < 1 ||
        d.choice[0].f[TW_F_LOGPROBS_CONTENT].type != TW_T_ARRAY) {
        printf("%s: no choices[0].logprobs.content\n", path);
        free(buf);
        tw_doc_free(&d);
        return;
    }
    v = &d.choice[0].f[TW_F_LOGPROBS_CONTENT];
    n = v->count;
    ids = (int64_t *)calloc(n + 1, sizeof(int64_t));
    coff = (int64_t *)calloc(n + 1, sizeof(int64_t));
    s = (double *)calloc(n + 1, sizeof(double));
    el = (double *)calloc(n + 1, sizeof(double));
    if (!ids || !coff || !s || !el)
        exit(2);
    if (tw_parse_uint_array(buf, &d.choice[0].f[TW_F_TOKEN_IDS], 0xFFFFFFFFu, ids, &err, TW_PATH_AUTO) != 0)
        printf("  (token_ids unreadable: ids are 0)\n");
    for (int trial = 0; trial < 15; trial++) {
        for (int mode = 0; mode < 3; mode++) {
            double t0 = now();
            if (mode == 0)
                tw_rec_parse(buf, v, n, ids, 0, s, NULL, NULL, NULL, &res, g_path);
            else if (mode == 1)
                tw_rec_parse(buf, v, n, ids, 1, s, coff, el, &c, &res, g_path);
            else
                tw_rec_count(buf, v, &total, g_path);
            t0 = now() - t0;
            if (t0 < best[mode])
                best[mode] = t0;
        }
    }
    tw_rec_parse(buf, v, n, ids, 1, s, coff, el, &c, &res, g_path);
    printf("%s: %zu entries, %zu candidates (sampled: %td/%d, top: %td/%d), content %zu bytes\n",
           slash ? slash + 1 : path, n, res.ncand, res.sampled_err, res.sampled_code, res.top_err,
           res.top_code, v->end - v->start);
    printf("  sampled pass only:      %8.3f ms  %6.1f ns/entry  %5.2f GB/s\n", best[0] * 1e3,
           best[0] * 1e9 / (double)(n ? n : 1), (double)(v->end - v->start) / best[0] / 1e9);
    printf("  sampled + candidates:   %8.3f ms  %6.1f ns/entry  %6.1f ns/object (entry or "
           "candidate)\n",
           best[1] * 1e3, best[1] * 1e9 / (double)(n ? n : 1),
           best[1] * 1e9 / (double)(n + res.ncand ? n + res.ncand : 1));
    printf("  tw_rec_count:        %8.3f ms\n", best[2] * 1e3);
    tw_rec_cands_free(&c);
    free(ids);
    free(coff);
    free(s);
    free(el);
    free(buf);
    tw_doc_free(&d);
}

/* tw_rec_numbers and tw_rec_token_strings on crafted arrays. */
static void test_flat_arrays(void)
{
    static const struct {
        const char *arr;
        ptrdiff_t bad;
        size_t n;
        double want[8];
    } nums[] = {
        {"[]", -1, 0, {0}},
        {"[-0.5, 0, -0, 1e-3 ,-1E+2,-0.0]", -1, 6, {-0.5, 0.0, 0.0, 1e-3, -100.0, -0.0}},
        {"[12345678901234567890123, 5e-324, -9999]", -1, 3, {12345678901234567890123.0, 5e-324, -9999.0}},
        {"[1, null, 2]", 1, 1, {1.0}},
        {"[\"-1\"]", 0, 0, {0}},
        {"[[1]]", 0, 0, {0}},
        {"[true,1]", 0, 0, {0}},
        {" [ -2.5 , {\"a\": 1} ]", 1, 1, {-2.5}},
    };
    static const char toks[] =
        "[\"token_id:7\", \"token_id:007\", \"token_id:4294967295\", \"token_id:4294967296\","
        " \"token_id:\", \"token_id:12a\", \"x\", 5, null, \"token_id:\\u0031\","
        " \"\\u0074oken_id:9\", [\"token_id:1\"], \"token_id:-1\", {\"token_id\": 3},"
        "\"token_id:123456789012\"]";
    static const int64_t tok_ids[] = {7, 7, 4294967295, -1, -1, -1, -1, -1, -1, 1, 9, -1, -1, -1, -1};
    for (size_t c = 0; c < sizeof nums / sizeof nums[0]; c++) {
        char *buf;
        tw_value v;
        double out[9];
        ptrdiff_t bad;
        CHECK(prepare(nums[c].arr, &buf, &v), "numbers %zu: scan", c);
        bad = tw_rec_numbers(buf, &v, out, g_path);
        CHECK(bad == nums[c].bad, "numbers %zu: bad %td, want %td", c, bad, nums[c].bad);
        for (size_t i = 0; i < nums[c].n; i++)
            CHECK(dbits(out[i]) == dbits(nums[c].want[i]), "numbers %zu[%zu]: %.17g", c, i, out[i]);
        free(buf);
    }
    {
        char *buf;
        tw_value v;
        int64_t ids[16];
        size_t named;
        CHECK(prepare(toks, &buf, &v), "tokens: scan");
        CHECK(v.count == 15, "tokens: count %zu", v.count);
        named = tw_rec_token_strings(buf, &v, ids, g_path);
        CHECK(named == 5, "tokens: %zu named", named);
        for (size_t i = 0; i < 15; i++)
            CHECK(ids[i] == tok_ids[i], "tokens[%zu]: %lld", i, (long long)ids[i]);
        free(buf);
    }
    {
        static const char trip[] =
            "[[-0.5, 7, \"a\"], [-1, -0], [null, 4294967296, null], [\"x\", 1.0], [true, 3, \"t\"],"
            " [[1], 2], [-2e-3,9,\"z\"], [1, 2, 3, 4]]";
        static const int64_t want_ids[] = {7, 0, -1, -1, 3, 2, 9};
        static const uint8_t want_kinds[] = {TW_REC_V_NUMBER, TW_REC_V_NUMBER, TW_REC_V_NULL,
                                             TW_REC_V_STRING, TW_REC_V_BOOL, TW_REC_V_ARRAY,
                                             TW_REC_V_NUMBER};
        char *buf;
        tw_value v;
        int64_t ids[8];
        double values[8];
        uint8_t kinds[8];
        ptrdiff_t bad;
        CHECK(prepare(trip, &buf, &v), "triples: scan");
        bad = tw_rec_triples(buf, &v, ids, values, kinds, g_path);
        CHECK(bad == 7, "triples: bad %td", bad);
        for (size_t i = 0; i < 7; i++)
            CHECK(ids[i] == want_ids[i] && kinds[i] == want_kinds[i], "triples[%zu]: %lld %u", i,
                  (long long)ids[i], kinds[i]);
        CHECK(values[0] == -0.5 && values[1] == -1.0 && values[6] == -2e-3, "triples: values");
        free(buf);
        CHECK(prepare("[[1, 2], 5]", &buf, &v), "triples 2: scan");
        CHECK(tw_rec_triples(buf, &v, ids, values, kinds, g_path) == 1, "triples: not an array");
        free(buf);
        CHECK(prepare("[[1]]", &buf, &v), "triples 3: scan");
        CHECK(tw_rec_triples(buf, &v, ids, values, kinds, g_path) == 0, "triples: one element");
        free(buf);
    }
    printf("flat arrays: numbers, token strings, triples\n");
}

int main(int argc, char **argv)
{
    size_t fuzz = 3000;
    flood_seed();
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        for (int i = 2; i < argc; i++)
            bench_file(argv[i]);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "--fuzz") == 0)
        fuzz = (size_t)strtoull(argv[2], NULL, 10);
    paths_init();
    for (int i = 0; i < g_npaths; i++) {
        unsigned long long before = g_checks;
        g_path = g_paths[i];
        printf("path: %s\n", tw_path_name(g_path));
        test_numbers();
        test_sampled_rules();
        test_not_finite();
        test_top_rules();
        test_outputs();
        test_by_position();
        test_count();
        test_generated();
        test_flood();
        test_nomem();
        test_blank_field();
        test_reader_bounded();
        test_reader_bounded_stored();
        test_reader_positional();
        test_flat_arrays();
        test_fuzz(fuzz);
        test_fuzz_shaped(fuzz);
        test_vllm_layout(fuzz);
        printf("content read during the scan: %llu arrays, checked against tw_rec_parse\n", g_taken);
        g_taken = 0;
        printf("path %s: %llu checks\n", tw_path_name(g_path), g_checks - before);
    }
    return checks_done();
}
