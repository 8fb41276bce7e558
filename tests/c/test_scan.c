/*
 * Standalone tests and benchmark for the structural scanner (csrc/json/tw_scan.c, tw_scan_values.c).
 *
 *   make -C tests/c scan-test      (rules in tests/c/Makefile), or:
 *   cc -O2 -Wall -Wextra -std=c11 -Icsrc -o /tmp/test_scan tests/c/test_scan.c
 *   /tmp/test_scan [file.json ...]          tests (+ span checks on files)
 *   /tmp/test_scan --fuzz N [file.json ...] the same with N random mutations
 *   /tmp/test_scan --bench [file.json ...]  throughput of every path
 *
 * This file includes csrc/json/tw_scan.c and tw_scan_values.c itself (do not link them again), with
 * realloc redirected so that allocation failures can be injected.
 *
 * Every input is copied to the very end of an exactly-sized heap block, so
 * a read past `len` shows up under ASan/valgrind.  Every test runs on every
 * code path this CPU has (scalar, AVX2, AVX-512) and the paths must agree.
 * The differential test against orjson is tests/c/check_scan.py.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TW_RNG_SEED 0x243F6A8885A308D3ull
#include "tw_check.h"

/* Allocation failure injection (g_fail_after, tw_check.h) for every realloc and malloc. */
#define tw_mem_realloc test_realloc
#define tw_mem_alloc test_malloc
#include "../../csrc/json/tw_scan.c"
#include "../../csrc/json/tw_scan_values.c"
#undef tw_mem_realloc
#undef tw_mem_alloc

#include "tw_strip_copy.h"

/* A copy of s[0:n] at the end of an exactly-sized block. */
static char *tail_copy(const char *s, size_t n)
{
    char *block = (char *)xmalloc(n);
    if (n)
        memcpy(block, s, n);
    return block;
}

/* Scan with one path; the input lives in its own exactly-sized block. */
static int scan_path(const char *s, size_t n, int path, size_t max_depth, tw_doc *d)
{
    char *copy = tail_copy(s, n);
    int rc;
    d->path = path;
    d->max_depth = max_depth;
    rc = tw_scan(copy, n, d);
    free(copy);
    return rc;
}

static int value_eq(const tw_value *a, const tw_value *b)
{
    return a->present == b->present && a->type == b->type &&
           a->has_escape == b->has_escape && a->ascii == b->ascii &&
           a->all_int == b->all_int && a->start == b->start && a->end == b->end &&
           a->count == b->count;
}

static int doc_eq(const tw_doc *a, const tw_doc *b)
{
    if (a->top_is_object != b->top_is_object || a->nchoices != b->nchoices ||
        a->nblank != b->nblank || a->blank_bytes != b->blank_bytes ||
        !value_eq(&a->prompt_token_ids, &b->prompt_token_ids) ||
        !value_eq(&a->choices, &b->choices))
        return 0;
    for (size_t i = 0; i < a->nchoices; i++) {
        if (a->choice[i].is_object != b->choice[i].is_object)
            return 0;
        for (int f = 0; f < TW_NFIELDS; f++)
            if (!value_eq(&a->choice[i].f[f], &b->choice[i].f[f]))
                return 0;
    }
    for (size_t i = 0; i < a->nblank; i++)
        if (a->blank[i].start != b->blank[i].start || a->blank[i].end != b->blank[i].end)
            return 0;
    return 1;
}

/* Scan with every available path; they must agree.  d gets the result of
   the first path.  Returns its rc. */
static int scan_all(const char *s, size_t n, size_t max_depth, tw_doc *d)
{
    tw_doc o;
    int rc0 = 0, have = 0;
    tw_doc_init(&o);
    for (int i = 0; i < g_npaths; i++) {
        int rc;
        if (!have) {
            rc0 = scan_path(s, n, g_paths[i], max_depth, d);
            have = 1;
            continue;
        }
        rc = scan_path(s, n, g_paths[i], max_depth, &o);
        CHECK(rc == rc0, "path %s rc %d != %d", tw_path_name(g_paths[i]), rc, rc0);
        if (rc == TW_OK && rc0 == TW_OK)
            CHECK(doc_eq(d, &o), "path %s records differ", tw_path_name(g_paths[i]));
        if (rc != TW_OK && rc0 != TW_OK)
            CHECK(d->err_pos == o.err_pos && d->err_msg == o.err_msg,
                  "path %s error differs: %zu %s vs %zu %s", tw_path_name(g_paths[i]), o.err_pos,
                  o.err_msg, d->err_pos, d->err_msg);
    }
    tw_doc_free(&o);
    return rc0;
}

/* ------------------------------------------------------------------------ */
/* Corpus                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
    int ok;
    const char *s;
    size_t n;
} snippet;

#define V(lit) {1, lit, sizeof(lit) - 1}
#define I(lit) {0, lit, sizeof(lit) - 1}

static const snippet CORPUS[] = {
    /* valid */
    V("{}"), V("[]"), V("0"), V("-0"), V("1.5e-3"), V("-12.25E+7"), V("\"x\""),
    V("true"), V("false"), V("null"), V(" \t\r\n{ \"a\" : [ 1 , 2 ] } \n"),
    V("\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD834\\uDD1E\""),
    V("\"\xc3\xa9\xe6\xbc\xa2\xf0\x9f\x98\x80\""), V("\"\\u0000\""), V("[[[[]]]]"),
    V("{\"a\":{\"b\":{\"c\":[null,true,false]}}}"), V("1e308"),
    V("1.7976931348623157e308"), V("-1.7976931348623157e308"),
    V("17976931348623158079e289"), V("18446744073709551616"), V("1e-400"),
    V("0e99999999999"), V("-0.0e-99999999999999999999999"), V("\"\x7f\""),
    V("\"\xef\xbf\xbf\""), V("\"\xf4\x8f\xbf\xbf\""), V("\"\xed\x9f\xbf\""),
    V("\"\xee\x80\x80\""), V("{\"a\":1,\"a\":2}"), V("[1,\"a\",{},[]]"),
    V("\"\\uDBFF\\uDFFF\""), V("\"\\uabcd\\uABCD\""), V("{\"\":0}"),
    V("[0.0,-0.0,0e0,0E-0,0e+1,1E+2]"), V("\"\xf0\x90\x80\x80\""), V("\"\xc2\x80\""),
    V("[\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
      "\\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\\/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]"),
    V("{\"choices\":[],\"prompt_token_ids\":null}"),
    /* invalid */
    I(""), I(" "), I("\xef\xbb\xbf{}"), I("{"), I("["), I("]"), I("[1,]"),
    I("{\"a\":1,}"), I("{,}"), I("[,1]"), I("[1 2]"), I("{\"a\" 1}"), I("{\"a\":}"),
    I("{a:1}"), I("{1:1}"), I("{'a':1}"), I("NaN"), I("Infinity"), I("-Infinity"),
    I("nul"), I("tru"), I("True"), I("01"), I("-01"), I("+1"), I(".5"), I("1."),
    I("1.e5"), I("1e"), I("1e+"), I("-"), I("--1"), I("0x10"), I("1e309"),
    I("-1e309"), I("1.7976931348623159e308"), I("17976931348623158080e289"),
    I("\"\x00\""), I("\"\x1f\""), I("\"\t\""), I("\"\\x\""), I("\"\\U0041\""),
    I("\"\\u00g0\""), I("\"\\u12\""), I("\"\\ud800\""), I("\"\\udc00\""),
    I("\"\\ud800\\u0041\""), I("\"\\ud800\\ud800\""), I("\"\\ud800x\""),
    I("\"\xc0\x80\""), I("\"\xe0\x80\x80\""), I("\"\xed\xa0\x80\""),
    I("\"\xf4\x90\x80\x80\""), I("\"\xf5\x80\x80\x80\""), I("\"\x80\""), I("\"\xc3\""),
    I("\"\xff\""), I("\"abc"), I("{\"a\":1}x"), I("[1]]"), I("{}{}"), I("1 2"),
    I("\x0c" "1"), I("[1]\x00"), I("/*c*/1"), I("[1,//\n2]"), I("{\"a\":1 \"b\":2}"),
    I("[\"a\":1]"), I("[true false]"), I("\"\xf0\x8f\xbf\xbf\""), I("\"\xe0\x9f\xbf\""),
    I("[-]"), I("[1.5.5]"), I("[1e5e5]"), I("{\"a\":[}"), I("{\"a\":]"), I("[{]}"),
    I("\"\\"), I("\"\\u"), I("[1,\n]"), I("{\"a\":1,\"b\"}"), I("\"\xe2\x82\""),
    I("\xc2\xa0" "1"), I("[01.5]"), I("-0x1"), I("1E+-5"), I("{\"a\":nulls}"),
    I("[nan]"), I("\"\\ud800\\udc00\\udc00\""), I("{\"a\"::1}"), I("[1,,2]"),
    I("{\"a\":1}}"), I("\"\\ud800\\"), I("\"\\ud800\\u"), I("\"\\ud800\\udc0"),
    I("\"\\uDC00\\uD800\""), I("{\"a\":\"\x80\"}"), I("[\"\xc3\xa9\xc3\"]"),
    I("{\"\xff\":1}"), I("{\"a\\q\":1}"), I("[1]\n\n,"),
};

static void test_corpus(void)
{
    size_t nv = 0, ni = 0;
    tw_doc d;
    tw_doc_init(&d);
    for (size_t i = 0; i < sizeof CORPUS / sizeof CORPUS[0]; i++) {
        const snippet *c = &CORPUS[i];
        int rc = scan_all(c->s, c->n, 1024, &d);
        CHECK((rc == TW_OK) == c->ok, "corpus #%zu (%.40s): rc %d, expected %s (%s @%zu)", i,
              c->s, rc, c->ok ? "ok" : "error", d.err_msg ? d.err_msg : "-", d.err_pos);
        if (rc != TW_OK)
            CHECK(d.err_msg != NULL && d.err_pos <= c->n, "corpus #%zu error info", i);
        nv += c->ok != 0;
        ni += c->ok == 0;
    }
    printf("corpus: %zu valid + %zu invalid snippets\n", nv, ni);
    tw_doc_free(&d);
}

/* ------------------------------------------------------------------------ */
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

static int text_is(const char *buf, const tw_value *v, const char *want)
{
    size_t n = strlen(want);
    return v->present && v->end - v->start == n && memcmp(buf + v->start, want, n) == 0;
}

static const char DOC[] =
    "{\"request_id\":\"r\",\"choices\":[{\"index\":0,\"text\":\"caf\xc3\xa9\",\"token_ids\":[1,2,3],"
    "\"logprobs\":{\"content\":[{\"token\":\"token_id:1\",\"logprob\":-0.5,\"token_ids\":[9]}]},"
    "\"completion_logprobs\":{\"data\":\"AAAA\",\"shape\":[1],\"dtype\":\"float32\"},"
    "\"compact_logprobs\":{\"data\":\"QUJD\\/RA==\",\"format\":\"u32-f32-le-v1\","
    "\"offsets\":[0,1,2,3],\"num_top_logprobs\":0},"
    "\"sampling_mask\":{\"ids\":{\"data\":\"AQAAAA==\",\"shape\":[1],\"dtype\":\"int32\"},"
    "\"counts\":{\"data\":\"AgAAAA==\",\"dtype\":\"int32\"}},"
    "\"kept_tokens\":{\"ids\":\"Zm9v\",\"counts\":\"YmFy\"},"
    "\"routed_experts\":{\"data\":\"AAEC\",\"shape\":[1,3],\"dtype\":\"uint8\"}},"
    " {\"token_ids\" : [ ] , \"routed_experts\":\"k05VTVBZ\",\"sampling_mask\":[[1,2],[3]]},5],"
    "\"usage\":{\"prompt_tokens\":3,\"token_ids\":[7]},\"prompt_token_ids\":[4,5,-6.5],"
    "\"kv_transfer_params\":null}";

static const char DOC_STRIPPED[] =
    "{\"request_id\":\"r\",\"choices\":[{\"index\":0,\"text\":\"caf\xc3\xa9\",\"token_ids\":[],"
    "\"logprobs\":{\"content\":[{\"token\":\"token_id:1\",\"logprob\":-0.5,\"token_ids\":[9]}]},"
    "\"completion_logprobs\":{\"data\":\"\",\"shape\":[1],\"dtype\":\"float32\"},"
    "\"compact_logprobs\":{\"data\":\"\",\"format\":\"u32-f32-le-v1\","
    "\"offsets\":[],\"num_top_logprobs\":0},"
    "\"sampling_mask\":{\"ids\":{\"data\":\"\",\"shape\":[1],\"dtype\":\"int32\"},"
    "\"counts\":{\"data\":\"\",\"dtype\":\"int32\"}},"
    "\"kept_tokens\":{\"ids\":\"\",\"counts\":\"\"},"
    "\"routed_experts\":{\"data\":\"\",\"shape\":[1,3],\"dtype\":\"uint8\"}},"
    " {\"token_ids\" : [] , \"routed_experts\":\"\",\"sampling_mask\":[]},5],"
    "\"usage\":{\"prompt_tokens\":3,\"token_ids\":[7]},\"prompt_token_ids\":[],"
    "\"kv_transfer_params\":null}";

static void test_doc_records(void)
{
    tw_doc d;
    const char *b = DOC;
    size_t n = sizeof DOC - 1, sn;
    char *s;
    tw_choice *c;
    tw_doc_init(&d);
    CHECK(scan_all(DOC, n, 1024, &d) == TW_OK, "DOC rejected: %s @%zu", d.err_msg, d.err_pos);
    CHECK(d.top_is_object == 1, "top_is_object");
    CHECK(text_is(b, &d.prompt_token_ids, "[4,5,-6.5]") &&
              d.prompt_token_ids.type == TW_T_ARRAY && d.prompt_token_ids.count == 3 &&
              d.prompt_token_ids.all_int == 0,
          "prompt_token_ids");
    CHECK(d.choices.type == TW_T_ARRAY && d.choices.count == 3 && d.choices.all_int == 0,
          "choices");
    CHECK(d.nchoices == 3, "nchoices %zu", d.nchoices);
    if (d.nchoices == 3) {
        c = &d.choice[0];
        CHECK(c->is_object, "choice 0 object");
        CHECK(text_is(b, &c->f[TW_F_TOKEN_IDS], "[1,2,3]") && c->f[TW_F_TOKEN_IDS].count == 3 &&
                  c->f[TW_F_TOKEN_IDS].all_int == 1,
              "token_ids");
        CHECK(c->f[TW_F_LOGPROBS].type == TW_T_OBJECT &&
                  b[c->f[TW_F_LOGPROBS].start] == '{' && b[c->f[TW_F_LOGPROBS].end - 1] == '}',
              "logprobs");
        CHECK(c->f[TW_F_LOGPROBS_CONTENT].type == TW_T_ARRAY &&
                  c->f[TW_F_LOGPROBS_CONTENT].count == 1 &&
                  c->f[TW_F_LOGPROBS_CONTENT].all_int == 0,
              "logprobs.content");
        CHECK(text_is(b, &c->f[TW_F_CL_DATA], "AAAA") && c->f[TW_F_CL_DATA].ascii &&
                  !c->f[TW_F_CL_DATA].has_escape,
              "completion_logprobs.data");
        CHECK(text_is(b, &c->f[TW_F_CP_DATA], "QUJD\\/RA==") && c->f[TW_F_CP_DATA].has_escape &&
                  c->f[TW_F_CP_DATA].type == TW_T_STRING,
              "compact_logprobs.data");
        CHECK(text_is(b, &c->f[TW_F_CP_OFFSETS], "[0,1,2,3]") &&
                  c->f[TW_F_CP_OFFSETS].count == 4,
              "compact_logprobs.offsets");
        CHECK(c->f[TW_F_SAMPLING_MASK].type == TW_T_OBJECT, "sampling_mask");
        CHECK(text_is(b, &c->f[TW_F_SM_IDS_DATA], "AQAAAA=="), "sampling_mask.ids.data");
        CHECK(text_is(b, &c->f[TW_F_SM_COUNTS_DATA], "AgAAAA=="), "sampling_mask.counts.data");
        CHECK(text_is(b, &c->f[TW_F_KT_IDS], "Zm9v"), "kept_tokens.ids");
        CHECK(text_is(b, &c->f[TW_F_KT_COUNTS], "YmFy"), "kept_tokens.counts");
        CHECK(c->f[TW_F_ROUTED].type == TW_T_OBJECT, "routed_experts");
        CHECK(text_is(b, &c->f[TW_F_RE_DATA], "AAEC"), "routed_experts.data");
        c = &d.choice[1];
        CHECK(c->is_object && text_is(b, &c->f[TW_F_TOKEN_IDS], "[ ]") &&
                  c->f[TW_F_TOKEN_IDS].count == 0 && c->f[TW_F_TOKEN_IDS].all_int == 1,
              "choice 1 token_ids");
        CHECK(text_is(b, &c->f[TW_F_ROUTED], "k05VTVBZ") && c->f[TW_F_ROUTED].type == TW_T_STRING,
              "choice 1 routed_experts string");
        CHECK(!c->f[TW_F_RE_DATA].present && !c->f[TW_F_LOGPROBS].present &&
                  !c->f[TW_F_CP_DATA].present,
              "choice 1 absent fields");
        CHECK(text_is(b, &c->f[TW_F_SAMPLING_MASK], "[[1,2],[3]]") &&
                  c->f[TW_F_SAMPLING_MASK].count == 2 && c->f[TW_F_SAMPLING_MASK].all_int == 0,
              "choice 1 sampling_mask list");
        {
            size_t total = 99, err = 99;
            int64_t off[3];
            int32_t vals[3];
            CHECK(tw_count_nested(b, &c->f[TW_F_SAMPLING_MASK], &total) == 0 && total == 3,
                  "count_nested");
            CHECK(tw_nested_bound(b, &c->f[TW_F_SAMPLING_MASK]) >= total, "nested_bound");
            CHECK(tw_parse_nested_uint(b, &c->f[TW_F_SAMPLING_MASK], 100, off, vals, &err) == 0 &&
                      off[0] == 0 && off[1] == 2 && off[2] == 3 && vals[0] == 1 &&
                      vals[1] == 2 && vals[2] == 3,
                  "parse_nested");
        }
        c = &d.choice[2];
        CHECK(!c->is_object, "choice 2 not an object");
        for (int f = 0; f < TW_NFIELDS; f++)
            CHECK(!c->f[f].present, "choice 2 field %d", f);
    }
    s = strip_copy(DOC, n, &d, &sn);
    CHECK(sn == sizeof DOC_STRIPPED - 1 && memcmp(s, DOC_STRIPPED, sn) == 0,
          "stripped DOC:\n%s", s);
    free(s);
    tw_doc_free(&d);
}

/* Every proper prefix of DOC is invalid. */
static void test_truncation(void)
{
    tw_doc d;
    size_t n = sizeof DOC - 1, bad = 0;
    tw_doc_init(&d);
    for (size_t i = 0; i < n; i++) {
        int rc = scan_all(DOC, i, 1024, &d);
        if (rc != TW_ERR_SYNTAX)
            bad++;
        CHECK(rc == TW_ERR_SYNTAX, "prefix %zu accepted", i);
    }
    printf("truncation: %zu prefixes rejected\n", n - bad);
    tw_doc_free(&d);
}

/* The test groups, in files of their own (they use the harness above). */
#include "test_scan_paths.h"
#include "test_scan_arrays.h"

/* Stripping an accepted document gives an accepted document with the same
   structure whose blankable values are empty. */
static void check_strip_invariants(const char *buf, size_t len, const tw_doc *d, const char *what)
{
    size_t sn;
    char *s = strip_copy(buf, len, d, &sn);
    tw_doc e;
    tw_doc_init(&e);
    CHECK(scan_all(s, sn, 1024, &e) == TW_OK, "%s: stripped copy rejected: %s @%zu", what,
          e.err_msg, e.err_pos);
    CHECK(e.nblank == 0 && e.nchoices == d->nchoices, "%s: stripped copy still has blanks", what);
    free(s);
    tw_doc_free(&e);
}

/* Span checks on a real document (files given on the command line). */
static void test_file(const char *path)
{
    size_t n;
    char *buf = read_file(path, &n);
    tw_doc d;
    if (!buf) {
        perror(path);
        g_failures++;
        return;
    }
    tw_doc_init(&d);
    CHECK(scan_all(buf, n, 1024, &d) == TW_OK, "%s rejected: %s @%zu", path, d.err_msg,
          d.err_pos);
    CHECK(d.top_is_object && d.choices.type == TW_T_ARRAY && d.nchoices >= 1, "%s records", path);
    for (size_t i = 0; i < d.nchoices; i++) {
        for (int k = 0; k < TW_NFIELDS; k++) {
            const tw_value *v = &d.choice[i].f[k];
            if (!v->present)
                continue;
            if (v->type == TW_T_STRING)
                CHECK(buf[v->start - 1] == '"' && buf[v->end] == '"', "%s string span", path);
            if (v->type == TW_T_ARRAY)
                CHECK(buf[v->start] == '[' && buf[v->end - 1] == ']', "%s array span", path);
            if (v->type == TW_T_OBJECT)
                CHECK(buf[v->start] == '{' && buf[v->end - 1] == '}', "%s object span", path);
        }
        {
            const tw_value *t = &d.choice[i].f[TW_F_TOKEN_IDS];
            int64_t *ids = (int64_t *)malloc((t->count + 1) * sizeof(int64_t));
            size_t err = 0;
            CHECK(ids && t->type == TW_T_ARRAY && t->all_int &&
                      tw_parse_uint_array(buf, t, 4294967295u, ids, &err, d.path) == 0,
                  "%s token_ids", path);
            free(ids);
        }
    }
    check_strip_invariants(buf, n, &d, path);
    printf("file %s: %zu bytes, %zu choices, %zu blanks, stripped to %zu bytes\n", path, n,
           d.nchoices, d.nblank, tw_stripped_size(&d, n));
    tw_doc_free(&d);
    free(buf);
}

/* Random mutations of DOC: all paths agree, nothing crashes, accepted ones
   strip consistently. */
static void test_fuzz(size_t rounds)
{
    static const char ALPH[] = "{}[],:\"\\/ u0123456789eE.-+tfnalsr\x80\xc3\xa9\xed\xf0\x1f\x00";
    size_t n0 = sizeof DOC - 1, accepted = 0;
    char *buf = (char *)malloc(n0 + 64);
    tw_doc d;
    if (!buf)
        exit(2);
    tw_doc_init(&d);
    for (size_t r = 0; r < rounds; r++) {
        size_t n = n0, muts = 1 + rndn(3);
        memcpy(buf, DOC, n0);
        for (size_t m = 0; m < muts; m++) {
            size_t at = rndn(n + 1), kind = rndn(4);
            uint8_t byte = rndn(3) ? (uint8_t)ALPH[rndn(sizeof ALPH - 1)] : (uint8_t)rnd();
            if (kind == 0 && at < n) {
                buf[at] = (char)byte;
            } else if (kind == 1 && n < n0 + 60) {
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = (char)byte;
                n++;
            } else if (kind == 2 && at < n) {
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
            } else {
                n = at;
            }
        }
        if (scan_all(buf, n, 1024, &d) == TW_OK) {
            accepted++;
            check_strip_invariants(buf, n, &d, "fuzz");
        }
    }
    printf("fuzz: %zu mutations, %zu accepted\n", rounds, accepted);
    free(buf);
    tw_doc_free(&d);
}

/* ------------------------------------------------------------------------ */
/* Benchmark                                                                 */
/* ------------------------------------------------------------------------ */

/* n random token ids below 151936, comma-separated, at s + k; the new end. */
static size_t put_ids(char *s, size_t k, int n)
{
    for (int i = 0; i < n; i++)
        k += (size_t)sprintf(s + k, "%s%u", i ? "," : "", (unsigned)(rnd() % 151936));
    return k;
}

/* n random base64 characters at s + k; the new end. */
static size_t put_base64(char *s, size_t k, size_t n)
{
    static const char B64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i++)
        s[k++] = B64[rnd() & 63];
    return k;
}

/* A moe_16k-like document: 8192 token ids, packed logprobs, ~8 MB of
   base64 routing data, 8192 prompt ids. */
static char *make_moe_doc(size_t *len)
{
    size_t cap = 9u << 20, k = 0, routed = 16383u * 48 * 8 / 3 * 4;
    char *s = (char *)malloc(cap);
    if (!s)
        exit(2);
    k += (size_t)sprintf(s + k, "{\"request_id\":\"gen-0\",\"choices\":[{\"index\":0,\"text\":\"\","
                                "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null,"
                                "\"token_ids\":[");
    k = put_ids(s, k, 8192);
    k += (size_t)sprintf(s + k, "],\"completion_logprobs\":{\"data\":\"");
    k = put_base64(s, k, 8192 / 3 * 4 * 4);
    k += (size_t)sprintf(s + k, "\",\"shape\":[8192],\"dtype\":\"float32\"},"
                                "\"routed_experts\":{\"data\":\"");
    k = put_base64(s, k, routed);
    k += (size_t)sprintf(s + k, "\",\"shape\":[16383,48,8],\"start\":0,\"dtype\":\"uint8\"}}],"
                                "\"usage\":{\"prompt_tokens\":8192,\"completion_tokens\":8192,"
                                "\"total_tokens\":16384},\"prompt_token_ids\":[");
    k = put_ids(s, k, 8192);
    k += (size_t)sprintf(s + k, "],\"kv_transfer_params\":null}");
    *len = k;
    return s;
}

static void bench_one(const char *name, const char *buf, size_t n)
{
    tw_doc d;
    tw_doc_init(&d);
    printf("%-28s %9zu bytes:", name, n);
    for (int i = 0; i < g_npaths; i++) {
        double best = 1e30;
        size_t reps = 1 + (size_t)(400e6 / (double)(n + 1));
        d.path = g_paths[i];
        for (int trial = 0; trial < 7; trial++) {
            double t0 = now();
            for (size_t r = 0; r < reps; r++)
                if (tw_scan(buf, n, &d) != TW_OK) {
                    printf(" rejected: %s @%zu\n", d.err_msg, d.err_pos);
                    tw_doc_free(&d);
                    return;
                }
            t0 = (now() - t0) / (double)reps;
            if (t0 < best)
                best = t0;
        }
        printf("  %s %6.2f GB/s", tw_path_name(g_paths[i]), (double)n / best / 1e9);
    }
    {
        size_t sn = tw_stripped_size(&d, n);
        char *out = (char *)malloc(sn ? sn : 1);
        double best = 1e30;
        if (!out)
            exit(2);
        for (int trial = 0; trial < 7; trial++) {
            double t0 = now();
            tw_strip(buf, n, &d, out);
            t0 = now() - t0;
            if (t0 < best)
                best = t0;
        }
        printf("  | strip -> %zu bytes in %.1f us", sn, best * 1e6);
        free(out);
    }
    printf("\n");
    tw_doc_free(&d);
}

static int bench(int argc, char **argv)
{
    size_t n;
    char *doc = make_moe_doc(&n);
    bench_one("synthetic moe (base64)", doc, n);
    free(doc);
    for (int i = 0; i < argc; i++) {
        size_t m;
        char *buf = read_file(argv[i], &m);
        const char *slash;
        if (!buf) {
            perror(argv[i]);
            continue;
        }
        slash = strrchr(argv[i], '/');
        bench_one(slash ? slash + 1 : argv[i], buf, m);
        free(buf);
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t fuzz = 3000;
    int first_file = 1;
    paths_init();
    if (argc > 1 && strcmp(argv[1], "--bench") == 0)
        return bench(argc - 2, argv + 2);
    if (argc > 2 && strcmp(argv[1], "--fuzz") == 0) {
        fuzz = (size_t)strtoull(argv[2], NULL, 10);
        first_file = 3;
    }
    paths_print(NULL);
    test_corpus();
    test_doc_records();
    test_truncation();
    test_paths();
    test_depth();
    test_helpers();
    test_nomem();
    test_uint_arrays();
#ifdef TW_SIMD16
    test_uint_blocks();
#endif
    test_nested_arrays();
    test_openai();
    test_openai_routing();
    test_decode();
    test_fuzz(fuzz);
    for (int i = first_file; i < argc; i++)
        test_file(argv[i]);
    return checks_done();
}
