/*
 * Standalone tests and benchmark for csrc/tw_scan.c.
 *
 *   make -C tests/c scan-test      (rules in tests/c/Makefile), or:
 *   cc -O2 -Wall -Wextra -std=c11 -Icsrc -o /tmp/test_scan tests/c/test_scan.c
 *   /tmp/test_scan [file.json ...]          tests (+ span checks on files)
 *   /tmp/test_scan --fuzz N [file.json ...] the same with N random mutations
 *   /tmp/test_scan --bench [file.json ...]  throughput of every path
 *
 * This file includes csrc/tw_scan.c itself (do not link it again), with
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
#include "../../csrc/tw_scan.c"
#undef tw_mem_realloc
#undef tw_mem_alloc

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

static char *strip_copy(const char *buf, size_t len, const tw_doc *d, size_t *out_len)
{
    size_t n = tw_stripped_size(d, len);
    char *out = (char *)malloc(n + 1);
    if (!out)
        exit(2);
    tw_strip(buf, len, d, out);
    out[n] = 0;
    *out_len = n;
    return out;
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

typedef struct {
    const char *doc;
    const char *stripped; /* NULL: do not check */
} rec_case;

static void test_paths(void)
{
    tw_doc d;
    tw_doc_init(&d);

    /* duplicate keys: the last one wins, every occurrence is blanked */
    {
        const char *b =
            "{\"choices\":[{\"token_ids\":[1]}],\"choices\":[{\"compact_logprobs\":{\"data\":"
            "\"AA==\",\"offsets\":[0]},\"compact_logprobs\":{\"data\":\"BB==\"},\"token_ids\":[2],"
            "\"token_ids\":[3,4],\"logprobs\":{\"content\":[1]},\"logprobs\":{}}],"
            "\"prompt_token_ids\":[1],\"prompt_token_ids\":\"x\"}";
        const char *want =
            "{\"choices\":[{\"token_ids\":[]}],\"choices\":[{\"compact_logprobs\":{\"data\":"
            "\"\",\"offsets\":[]},\"compact_logprobs\":{\"data\":\"\"},\"token_ids\":[],"
            "\"token_ids\":[],\"logprobs\":{\"content\":[1]},\"logprobs\":{}}],"
            "\"prompt_token_ids\":[],\"prompt_token_ids\":\"x\"}";
        size_t sn;
        char *s;
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK, "dup doc");
        CHECK(d.nchoices == 1 && d.choices.count == 1, "dup nchoices %zu", d.nchoices);
        if (d.nchoices == 1) {
            tw_choice *c = &d.choice[0];
            CHECK(text_is(b, &c->f[TW_F_CP_DATA], "BB=="), "dup cp data");
            CHECK(!c->f[TW_F_CP_OFFSETS].present, "dup cp offsets cleared");
            CHECK(text_is(b, &c->f[TW_F_TOKEN_IDS], "[3,4]"), "dup token_ids");
            CHECK(text_is(b, &c->f[TW_F_LOGPROBS], "{}") &&
                      !c->f[TW_F_LOGPROBS_CONTENT].present,
                  "dup logprobs");
        }
        CHECK(d.prompt_token_ids.type == TW_T_STRING && text_is(b, &d.prompt_token_ids, "x"),
              "dup prompt");
        s = strip_copy(b, strlen(b), &d, &sn);
        CHECK(sn == strlen(want) && memcmp(s, want, sn) == 0, "dup stripped: %s", s);
        free(s);
    }
    /* non-object intermediates, whole values of any type */
    {
        const char *b = "{\"choices\":[{\"token_ids\":[1],\"compact_logprobs\":null,"
                        "\"sampling_mask\":null,\"logprobs\":\"x\",\"kept_tokens\":[1],"
                        "\"routed_experts\":7,\"completion_logprobs\":{\"data\":null}}]}";
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK, "null doc");
        if (d.nchoices == 1) {
            tw_choice *c = &d.choice[0];
            CHECK(!c->f[TW_F_CP_DATA].present && !c->f[TW_F_CP_OFFSETS].present, "cp null");
            CHECK(c->f[TW_F_SAMPLING_MASK].type == TW_T_NULL &&
                      text_is(b, &c->f[TW_F_SAMPLING_MASK], "null"),
                  "sm null");
            CHECK(c->f[TW_F_LOGPROBS].type == TW_T_STRING && !c->f[TW_F_LOGPROBS_CONTENT].present,
                  "logprobs string");
            CHECK(!c->f[TW_F_KT_IDS].present, "kept_tokens array");
            CHECK(c->f[TW_F_ROUTED].type == TW_T_NUMBER && text_is(b, &c->f[TW_F_ROUTED], "7"),
                  "routed number");
            CHECK(c->f[TW_F_CL_DATA].type == TW_T_NULL, "cl data null");
        }
        CHECK(d.nblank == 1, "only token_ids blanked (%zu)", d.nblank);
    }
    /* escapes in keys */
    {
        const char *b = "{\"choi\\u0063es\":[{\"token\\u005fids\":[1],\"compact_logprobs\":"
                        "{\"d\\u0061ta\":\"AB\\/C\"},\"\\u006bept_tokens\":{\"ids\":\"\\u0041\"}}],"
                        "\"prompt_token_ids\\u0000\":[1],\"prompt\\/token_ids\":[2]}";
        char out[16];
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK, "escaped keys doc");
        CHECK(d.nchoices == 1, "escaped choices");
        CHECK(!d.prompt_token_ids.present, "near-miss keys ignored");
        if (d.nchoices == 1) {
            tw_choice *c = &d.choice[0];
            CHECK(text_is(b, &c->f[TW_F_TOKEN_IDS], "[1]"), "escaped token_ids");
            CHECK(text_is(b, &c->f[TW_F_CP_DATA], "AB\\/C") && c->f[TW_F_CP_DATA].has_escape,
                  "escaped cp data");
            CHECK(tw_unescape(b, &c->f[TW_F_CP_DATA], out) == 4 && memcmp(out, "AB/C", 4) == 0,
                  "unescape \\/");
            CHECK(text_is(b, &c->f[TW_F_KT_IDS], "\\u0041"), "escaped kept_tokens");
        }
    }
    /* decoys at other paths */
    {
        const char *b =
            "{\"usage\":{\"token_ids\":[1],\"prompt_token_ids\":[2],\"choices\":[{\"token_ids\":[3]}]},"
            "\"kv_transfer_params\":{\"compact_logprobs\":{\"data\":\"x\"}},"
            "\"choices\":[{\"token_ids\":[1],\"data\":\"d\",\"ids\":\"i\",\"offsets\":[1],"
            "\"logprobs\":{\"content\":[{\"token_ids\":[5],\"compact_logprobs\":{\"data\":\"y\"}}],"
            "\"data\":\"z\"},\"x\":{\"choices\":[{\"token_ids\":[9]}],\"token_ids\":[8]},"
            "\"compact_logprobs\":{\"ids\":{\"data\":\"q\"},\"x\":{\"data\":\"r\"}},"
            "\"sampling_mask\":{\"data\":\"s\",\"ids\":\"t\",\"counts\":{\"shape\":[1]}},"
            "\"kept_tokens\":{\"data\":\"u\"},\"routed_experts\":{\"ids\":\"v\"}}],"
            "\"choices_\":[],\"Choices\":[]}";
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK, "decoy doc");
        CHECK(!d.prompt_token_ids.present, "decoy prompt");
        CHECK(d.nchoices == 1 && d.nblank == 1, "decoy blanks %zu", d.nblank);
        if (d.nchoices == 1) {
            tw_choice *c = &d.choice[0];
            CHECK(text_is(b, &c->f[TW_F_TOKEN_IDS], "[1]"), "decoy token_ids");
            for (int f = 0; f < TW_NFIELDS; f++)
                if (f != TW_F_TOKEN_IDS && f != TW_F_LOGPROBS && f != TW_F_LOGPROBS_CONTENT &&
                    f != TW_F_SAMPLING_MASK && f != TW_F_ROUTED)
                    CHECK(!c->f[f].present, "decoy field %d recorded", f);
        }
    }
    /* not an object at the root: nothing recorded */
    {
        const char *b = "[{\"choices\":[{\"token_ids\":[1]}],\"prompt_token_ids\":[1]}]";
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK, "array root");
        CHECK(!d.top_is_object && d.nchoices == 0 && d.nblank == 0 && !d.choices.present,
              "array root records");
        CHECK(scan_all("\"choices\"", 9, 1024, &d) == TW_OK && !d.top_is_object, "string root");
    }
    /* choice records stop after the first choice that must fail */
    {
        const char *b = "{\"choices\":[{\"token_ids\":[1]},{\"x\":1},{\"token_ids\":[2,3]}]}";
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK, "stop doc");
        CHECK(d.nchoices == 2 && d.choices.count == 3 && d.choice[1].is_object,
              "stop after missing token_ids (%zu)", d.nchoices);
        CHECK(d.nblank == 1, "later choices not blanked");
        b = "{\"choices\":[{\"token_ids\":[1]},[],{\"token_ids\":[2,3]}]}";
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK, "stop doc 2");
        CHECK(d.nchoices == 2 && !d.choice[1].is_object && d.choices.count == 3,
              "stop after non-object");
        b = "{\"choices\":[{\"token_ids\":\"1\"},{\"token_ids\":[2]}]}";
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK && d.nchoices == 1,
              "stop after non-array token_ids");
        b = "{\"choices\":[1],\"choices\":[{\"token_ids\":[2]},{\"token_ids\":[3]}]}";
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK && d.nchoices == 2 &&
                  d.choice[0].is_object,
              "second choices array records again");
        b = "{\"choices\":{\"token_ids\":[1]}}";
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK && d.nchoices == 0 &&
                  d.choices.type == TW_T_OBJECT && d.nblank == 0,
              "choices object");
    }
    /* whitespace everywhere, other key orders, \/ inside base64 */
    {
        const char *b =
            " \n{ \"prompt_token_ids\" :\t[ 1 ,\r\n2 ] ,\"choices\" : [ { \"routed_experts\" : { "
            "\"dtype\" : \"uint8\" , \"data\" : \"AA\\/B\" } , \"sampling_mask\" : { \"counts\" : { "
            "\"data\" : \"Cc==\" } , \"ids\" : { \"data\" : \"\\/\\/\\/\\/\" } } , \"token_ids\" : "
            "[ 5 ] } ] } \r\n";
        const char *want =
            " \n{ \"prompt_token_ids\" :\t[] ,\"choices\" : [ { \"routed_experts\" : { "
            "\"dtype\" : \"uint8\" , \"data\" : \"\" } , \"sampling_mask\" : { \"counts\" : { "
            "\"data\" : \"\" } , \"ids\" : { \"data\" : \"\" } } , \"token_ids\" : "
            "[] } ] } \r\n";
        size_t sn;
        char *s;
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK, "ws doc");
        CHECK(d.prompt_token_ids.count == 2 && d.prompt_token_ids.all_int, "ws prompt");
        if (d.nchoices == 1) {
            tw_choice *c = &d.choice[0];
            CHECK(text_is(b, &c->f[TW_F_RE_DATA], "AA\\/B"), "ws re data");
            CHECK(text_is(b, &c->f[TW_F_SM_COUNTS_DATA], "Cc=="), "ws sm counts");
            CHECK(text_is(b, &c->f[TW_F_SM_IDS_DATA], "\\/\\/\\/\\/"), "ws sm ids");
            CHECK(text_is(b, &c->f[TW_F_TOKEN_IDS], "[ 5 ]"), "ws token_ids");
        }
        s = strip_copy(b, strlen(b), &d, &sn);
        CHECK(sn == strlen(want) && memcmp(s, want, sn) == 0, "ws stripped: %s", s);
        free(s);
    }
    /* string flags */
    {
        const char *b = "{\"choices\":[{\"token_ids\":[],\"kept_tokens\":{\"ids\":\"\xc3\xa9\","
                        "\"counts\":\"\"}}]}";
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK && d.nchoices == 1, "flags doc");
        if (d.nchoices == 1) {
            CHECK(!d.choice[0].f[TW_F_KT_IDS].ascii && !d.choice[0].f[TW_F_KT_IDS].has_escape,
                  "non-ascii flag");
            CHECK(d.choice[0].f[TW_F_KT_COUNTS].ascii &&
                      d.choice[0].f[TW_F_KT_COUNTS].start == d.choice[0].f[TW_F_KT_COUNTS].end,
                  "empty string");
        }
    }
    tw_doc_free(&d);
}

static void test_depth(void)
{
    size_t n = 100000;
    char *s = (char *)malloc(2 * n + 8);
    tw_doc d;
    size_t k;
    if (!s)
        exit(2);
    tw_doc_init(&d);
    /* 100k nested arrays: "nesting too deep" by default, accepted when unlimited */
    memset(s, '[', n);
    memset(s + n, ']', n);
    CHECK(scan_all(s, 2 * n, 1024, &d) == TW_ERR_SYNTAX && d.err_pos == 1024 &&
              strcmp(d.err_msg, "nesting too deep") == 0,
          "100k deep: %s @%zu", d.err_msg, d.err_pos);
    CHECK(scan_all(s, 2 * n, 0, &d) == TW_OK, "100k deep unlimited");
    CHECK(scan_all(s, 2 * n - 1, 0, &d) == TW_ERR_SYNTAX, "100k deep unlimited, truncated");
    /* 1024 levels accepted, 1025 rejected (orjson's limit) */
    CHECK(scan_all(s + n - 1024, 2048, 1024, &d) == TW_OK, "1024 deep");
    CHECK(scan_all(s + n - 1025, 2050, 1024, &d) == TW_ERR_SYNTAX, "1025 deep");
    /* mixed objects and arrays, 100k levels */
    k = 0;
    for (size_t i = 0; i < n / 5; i++) {
        memcpy(s + k, "{\"a\":", 5);
        k += 5;
    }
    s[k++] = '1';
    memset(s + k, '}', n / 5);
    k += n / 5;
    CHECK(scan_all(s, k, 0, &d) == TW_OK, "20k deep objects");
    CHECK(scan_all(s, k, 1024, &d) == TW_ERR_SYNTAX, "20k deep objects limited");
    /* 1024 objects around a value: ok; 1024 objects around [1]: too deep */
    {
        size_t m = 1024 * 5;
        char *t = (char *)malloc(m + 1024 + 8);
        if (!t)
            exit(2);
        for (size_t i = 0; i < 1024; i++)
            memcpy(t + 5 * i, "{\"a\":", 5);
        t[m] = '1';
        memset(t + m + 1, '}', 1024);
        CHECK(scan_all(t, m + 1 + 1024, 1024, &d) == TW_OK, "1024 deep objects");
        memcpy(t + m, "[1]", 3);
        memset(t + m + 3, '}', 1024);
        CHECK(scan_all(t, m + 3 + 1024, 1024, &d) == TW_ERR_SYNTAX, "1025 deep mixed");
        free(t);
    }
    free(s);
    tw_doc_free(&d);
}

static void test_helpers(void)
{
    static const struct {
        const char *arr;
        uint64_t max;
        int rc;
        size_t err;
    } cases[] = {
        {"[0, -0, 4294967295 ,12]", 4294967295u, 0, 0},
        {"[]", 10, 0, 0},
        {"[ ]", 10, 0, 0},
        {" [ 1 , 2 ] ", 10, 0, 0},
        {"[1,2.0]", 10, -1, 1},
        {"[1,-1]", 10, -1, 1},
        {"[4294967296]", 4294967295u, -1, 0},
        {"[1,\"a\"]", 10, -1, 1},
        {"[1,1e2]", 1000, -1, 1},
        {"[99999999999999999999999]", UINT64_MAX, -1, 0},
        {"[9223372036854775807]", UINT64_MAX, 0, 0},
        {"[9223372036854775808]", UINT64_MAX, -1, 0},
        {"[[1]]", 10, -1, 0},
        {"[-0.0]", 10, -1, 0},
        {"[-0e1]", 10, -1, 0},
        {"[1,2,null]", 10, -1, 2},
        {"[1,2,true]", 10, -1, 2},
        {"[10,11]", 10, -1, 1},
        {"[0,{},1]", 10, -1, 1},
    };
    tw_doc d;
    tw_doc_init(&d);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *a = cases[i].arr;
        int64_t out[8];
        size_t err = 777;
        int rc;
        CHECK(scan_all(a, strlen(a), 1024, &d) == TW_OK, "helper doc %s", a);
        /* root arrays are not recorded: build the value by hand */
        {
            tw_value v;
            const char *o = strchr(a, '['), *c = strrchr(a, ']');
            memset(&v, 0, sizeof v);
            v.present = 1;
            v.type = TW_T_ARRAY;
            v.start = (size_t)(o - a);
            v.end = (size_t)(c - a) + 1;
            v.count = 8;
            rc = tw_parse_uint_array(a, &v, cases[i].max, out, &err, g_paths[i % (size_t)g_npaths]);
        }
        CHECK(rc == cases[i].rc && (rc == 0 || err == cases[i].err),
              "parse_uint_array %s: rc %d err %zu", a, rc, err);
        if (i == 0)
            CHECK(out[0] == 0 && out[1] == 0 && out[2] == 4294967295 && out[3] == 12,
                  "parse_uint_array values");
        if (i == 10)
            CHECK(out[0] == INT64_MAX, "INT64_MAX");
    }
    /* recorded values and the count bound */
    {
        const char *b = "{\"prompt_token_ids\":[7,8,9],\"choices\":[{\"token_ids\":[1,2],"
                        "\"sampling_mask\":[[1,[2]],[3]]},{\"token_ids\":[],\"sampling_mask\":"
                        "[[1],[2147483648]]},{\"token_ids\":[],\"sampling_mask\":[[5],7]}]}";
        int64_t out[3], off[4];
        int32_t vals[4];
        size_t err = 0, total = 0;
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK && d.nchoices == 3, "helpers doc");
        CHECK(tw_parse_uint_array(b, &d.prompt_token_ids, 10, out, &err, TW_PATH_AUTO) == 0 && out[0] == 7 &&
                  out[2] == 9,
              "prompt ids");
        CHECK(tw_parse_uint_array(b, &d.choices, 10, out, &err, TW_PATH_AUTO) == -1 && err == 0,
              "choices not ints");
        CHECK(tw_parse_uint_array(b, &d.choice[0].f[TW_F_LOGPROBS], 10, out, &err, TW_PATH_AUTO) == -1 &&
                  err == 0,
              "absent value");
        CHECK(tw_count_nested(b, &d.choice[0].f[TW_F_SAMPLING_MASK], &total) == 0 && total == 3,
              "count nested with a nested array: %zu", total);
        CHECK(tw_nested_bound(b, &d.choice[0].f[TW_F_SAMPLING_MASK]) >= total, "nested_bound 0");
        CHECK(tw_parse_nested_uint(b, &d.choice[0].f[TW_F_SAMPLING_MASK], 100, off, vals, &err) ==
                      -1 &&
                  err == 0,
              "nested bad element row 0");
        CHECK(tw_count_nested(b, &d.choice[1].f[TW_F_SAMPLING_MASK], &total) == 0 && total == 2,
              "count nested 2");
        CHECK(tw_nested_bound(b, &d.choice[1].f[TW_F_SAMPLING_MASK]) >= total, "nested_bound 1");
        CHECK(tw_parse_nested_uint(b, &d.choice[1].f[TW_F_SAMPLING_MASK], UINT64_MAX, off, vals,
                                   &err) == -1 &&
                  err == 1,
              "nested out of int32 range");
        CHECK(tw_count_nested(b, &d.choice[2].f[TW_F_SAMPLING_MASK], &total) == 0 && total == 1,
              "count nested non-array row");
        CHECK(tw_nested_bound(b, &d.choice[2].f[TW_F_SAMPLING_MASK]) >= total, "nested_bound 2");
        CHECK(tw_parse_nested_uint(b, &d.choice[2].f[TW_F_SAMPLING_MASK], 100, off, vals, &err) ==
                      -1 &&
                  err == 1 && off[1] == 1 && vals[0] == 5,
              "nested non-array row");
        CHECK(tw_count_nested(b, &d.choice[2].f[TW_F_TOKEN_IDS], &total) == 0 && total == 0,
              "count nested empty");
        CHECK(tw_parse_nested_uint(b, &d.choice[2].f[TW_F_TOKEN_IDS], 100, off, vals, &err) == 0 &&
                  off[0] == 0,
              "nested empty");
    }
    /* tw_unescape */
    {
        const char *b = "{\"choices\":[{\"token_ids\":[],\"kept_tokens\":{\"ids\":"
                        "\"a\\u00e9\\ud83d\\ude00\\n\\/\\\\\\\"\\b\\f\\r\\t\\u0000\\u20AC\"}}]}";
        const char want[] = "a\xc3\xa9\xf0\x9f\x98\x80\n/\\\"\b\f\r\t\0\xe2\x82\xac";
        char out[64];
        size_t n;
        CHECK(scan_all(b, strlen(b), 1024, &d) == TW_OK && d.nchoices == 1, "unescape doc");
        n = tw_unescape(b, &d.choice[0].f[TW_F_KT_IDS], out);
        CHECK(n == sizeof want - 1 && memcmp(out, want, n) == 0, "unescape result (%zu)", n);
        CHECK(tw_unescape(b, &d.choice[0].f[TW_F_TOKEN_IDS], out) == 0, "unescape non-string");
    }
    tw_doc_free(&d);
}

/* Every allocation failure is reported as TW_ERR_NOMEM, leaves the doc
   usable, and leaks nothing (ASan/valgrind). */
static void test_nomem(void)
{
    size_t n = sizeof DOC - 1, nomem = 0;
    char *deep = (char *)malloc(20000);
    tw_doc d;
    if (!deep)
        exit(2);
    memset(deep, '[', 10000);
    memset(deep + 10000, ']', 10000);
    for (long k = 0; k < 40; k++) {
        int rc;
        tw_doc_init(&d);
        g_fail_after = k;
        rc = tw_scan(DOC, n, &d);
        g_fail_after = -1;
        CHECK(rc == TW_OK || (rc == TW_ERR_NOMEM && strcmp(d.err_msg, "out of memory") == 0),
              "nomem %ld: rc %d", k, rc);
        nomem += rc == TW_ERR_NOMEM;
        CHECK(tw_scan(DOC, n, &d) == TW_OK && d.nchoices == 3 && d.nblank == 13,
              "rescan after nomem %ld", k);
        g_fail_after = k;
        d.max_depth = 0;
        rc = tw_scan(deep, 20000, &d);
        g_fail_after = -1;
        CHECK(rc == TW_OK || rc == TW_ERR_NOMEM, "nomem deep %ld: rc %d", k, rc);
        nomem += rc == TW_ERR_NOMEM;
        tw_doc_free(&d);
    }
    printf("nomem: %zu injected allocation failures reported\n", nomem);
    free(deep);
}

/* tw_parse_uint_array and the scan's integer runs on long generated arrays (their 64-byte blocks,
   its 8-byte path and the general one) against values known by
   construction: compact and spaced runs, 1..19 digits, "-0", values above
   max, and a non-integer element somewhere. */
/* A random integer of `digits` digits (1 to 19), without a leading zero. */
static uint64_t rnd_literal(unsigned digits)
{
    uint64_t x = rnd() % 10;
    for (unsigned k = 1; k < digits; k++)
        x = x * 10 + (k == 1 && x == 0 ? 1 + rnd() % 9 : rnd() % 10);
    return x;
}

/* sampling_mask lists: the scan reads a list of compact integer rows whole on every path
   (tw_take_nested), and that gives what tw_parse_nested_uint parses from the bytes (the same
   offsets and values, the same first bad row), for lists with empty rows, long and short
   elements, elements above the bound, whitespace, and rows that are not integer arrays. */
static void test_nested_arrays(void)
{
    enum { MAXROWS = 80, MAXROW = 40 };
    static const char *const BAD[] = {"-3", "1.5", "2e3", "true", "\"7\"", "[1]", "null", "-0"};
    static const char *const ROW_BAD[] = {"null", "7", "{}", "\"x\""};
    size_t cap = MAXROWS * (MAXROW * 24 + 8) + 64;
    char *buf = (char *)malloc(cap);
    int64_t *want_off = (int64_t *)malloc((MAXROWS + 1) * sizeof(int64_t));
    int64_t *off = (int64_t *)malloc((MAXROWS + 1) * sizeof(int64_t));
    int64_t *off2 = (int64_t *)malloc((MAXROWS + 1) * sizeof(int64_t));
    int32_t *vals = (int32_t *)malloc(MAXROWS * MAXROW * sizeof(int32_t));
    int32_t *vals2 = (int32_t *)malloc(MAXROWS * MAXROW * sizeof(int32_t));
    size_t rounds = 3000, read_lists = 0, bad_lists = 0;
    tw_doc d;
    if (!buf || !want_off || !off || !off2 || !vals || !vals2)
        exit(2);
    tw_doc_init(&d);
    for (size_t r = 0; r < rounds; r++) {
        size_t rows = 1 + rndn(MAXROWS), n = 0, k = 0;
        int spaced = rndn(5) == 0, plain = 1; /* plain: compact, integer rows only */
        uint64_t max = rndn(4) == 0 ? (uint64_t)rndn(100000) : rndn(2) ? UINT64_MAX : (uint64_t)INT32_MAX;
        n += (size_t)sprintf(buf + n, "{\"choices\":[{\"sampling_mask\":[");
        want_off[0] = 0;
        for (size_t i = 0; i < rows; i++) {
            size_t len = rndn(4) == 0 ? 0 : 1 + rndn(rndn(8) == 0 ? MAXROW : 6);
            if (i) {
                int space = spaced && rndn(2);
                n += (size_t)sprintf(buf + n, "%s", space ? ", " : ",");
                plain &= !space;
            }
            if (rndn(60) == 0) {
                n += (size_t)sprintf(buf + n, "%s", ROW_BAD[rndn(4)]);
                plain = 0;
                want_off[i + 1] = (int64_t)k;
                continue;
            }
            n += (size_t)sprintf(buf + n, "[");
            for (size_t j = 0; j < len; j++) {
                if (j) {
                    int space = spaced && rndn(3) == 0;
                    n += (size_t)sprintf(buf + n, "%s", space ? " , " : ",");
                    plain &= !space;
                }
                if (rndn(300) == 0) {
                    n += (size_t)sprintf(buf + n, "%s", BAD[rndn(8)]);
                    plain = 0;
                    continue;
                }
                {
                    uint64_t x = rnd_literal(rndn(300) == 0 ? 1 + (unsigned)rndn(19) : 1 + (unsigned)rndn(5));
                    if (rndn(200) == 0) /* at the bound, or just above it */
                        x = (max < INT32_MAX ? max : INT32_MAX) + rndn(2);
                    n += (size_t)sprintf(buf + n, "%llu", (unsigned long long)x);
                }
                k++;
            }
            n += (size_t)sprintf(buf + n, "]");
            want_off[i + 1] = (int64_t)k;
        }
        n += (size_t)sprintf(buf + n, "]}]}");
        for (int pi = 0; pi < g_npaths; pi++) {
            tw_value *v;
            size_t err = 99, err2 = 99, total;
            int rc, rc2;
            char *exact;
            CHECK(scan_path(buf, n, g_paths[pi], 1024, &d) == TW_OK && d.nchoices == 1,
                  "nested %zu %s: scan", r, tw_path_name(g_paths[pi]));
            if (d.nchoices != 1)
                continue;
            v = &d.choice[0].f[TW_F_SAMPLING_MASK];
            CHECK(v->present && v->type == TW_T_ARRAY && v->count == rows && (!plain || !v->all_int) &&
                      v->read == plain,
                  "nested %zu %s: count %zu, read %d, plain %d (%.*s)", r, tw_path_name(g_paths[pi]), v->count,
                  (int)v->read, plain, (int)(n < 300 ? n : 300), buf);
            exact = tail_copy(buf, n); /* the document alone: a read past it shows under ASan */
            total = tw_nested_bound(exact, v);
            CHECK(total <= MAXROWS * MAXROW, "nested %zu: bound %zu", r, total);
            memset(off2, 0x55, (MAXROWS + 1) * sizeof(int64_t));
            rc2 = tw_parse_nested_uint(exact, v, max, off2, vals2, &err2);
            free(exact);
            if (!v->read)
                continue;
            read_lists++;
            bad_lists += rc2 != 0;
            CHECK(tw_nested_total(&d, v) == (size_t)want_off[rows], "nested %zu %s: total", r,
                  tw_path_name(g_paths[pi]));
            memset(off, 0x55, (MAXROWS + 1) * sizeof(int64_t));
            rc = tw_take_nested(&d, v, max, off, vals, &err);
            CHECK(rc == rc2 && (rc == 0 || err == err2), "nested %zu %s: rc %d/%d, row %zu/%zu", r,
                  tw_path_name(g_paths[pi]), rc, rc2, err, err2);
            {
                size_t good = rc == 0 ? rows : err; /* the rows both filled */
                CHECK(memcmp(off, off2, (good + 1) * sizeof(int64_t)) == 0 &&
                          memcmp(off, want_off, (good + 1) * sizeof(int64_t)) == 0 &&
                          memcmp(vals, vals2, (size_t)off[good] * sizeof(int32_t)) == 0,
                      "nested %zu %s: offsets or values differ", r, tw_path_name(g_paths[pi]));
            }
        }
    }
    /* a list the depth limit stops before its rows: the scan fails as it would unread */
    {
        const char *doc = "{\"choices\":[{\"sampling_mask\":[[1,2],[3]]}]}";
        for (int pi = 0; pi < g_npaths; pi++) {
            CHECK(scan_path(doc, strlen(doc), g_paths[pi], 4, &d) != TW_OK, "nested depth 4 %s",
                  tw_path_name(g_paths[pi]));
            CHECK(scan_path(doc, strlen(doc), g_paths[pi], 5, &d) == TW_OK &&
                      d.choice[0].f[TW_F_SAMPLING_MASK].read,
                  "nested depth 5 %s", tw_path_name(g_paths[pi]));
        }
    }
    tw_doc_free(&d);
    printf("nested lists: %zu generated, %zu read during the scan, %zu of those with a bad row\n",
           rounds, read_lists, bad_lists);
    free(buf);
    free(want_off);
    free(off);
    free(off2);
    free(vals);
    free(vals2);
}

static void test_uint_arrays(void)
{
    enum { MAXN = 600 };
    static const char *const BAD[] = {"-3", "1.5", "2e3", "true", "\"7\"", "[1]", "null", "-0.0"};
    char *buf = (char *)malloc(MAXN * 32 + 16);
    int64_t *want = (int64_t *)malloc(MAXN * sizeof(int64_t));
    int64_t *got = (int64_t *)malloc(MAXN * sizeof(int64_t));
    size_t rounds = 3000, failed_checked = 0;
    tw_doc d;
    if (!buf || !want || !got)
        exit(2);
    tw_doc_init(&d);
    for (size_t r = 0; r < rounds; r++) {
        size_t count = rndn(MAXN), n = 0, bad_at = SIZE_MAX, err = 0;
        int spaced = rndn(4) == 0, rc, plain = !spaced; /* plain: compact, integers only */
        char *exact;
        uint64_t max = rndn(3) == 0 ? (uint64_t)rndn(2000000) : UINT64_MAX;
        const char *prefix = "{\"prompt_token_ids\":[";
        if (rndn(3) == 0 && count)
            bad_at = rndn(count);
        n += (size_t)sprintf(buf + n, "%s", prefix);
        for (size_t i = 0; i < count; i++) {
            if (i)
                n += (size_t)sprintf(buf + n, "%s",
                                     spaced ? (const char *[]){",", ", ", " ,\n ", ",\n      "}[rndn(4)]
                                            : ",");
            if (i == bad_at) {
                n += (size_t)sprintf(buf + n, "%s", BAD[rndn(8)]);
                plain = 0;
                continue;
            }
            if (rndn(50) == 0) {
                n += (size_t)sprintf(buf + n, "-0");
                want[i] = 0;
                plain = 0;
                continue;
            }
            {
                uint64_t x = rnd_literal(rndn(10) == 0 ? 1 + (unsigned)rndn(19) : 1 + (unsigned)rndn(7));
                if (x > (uint64_t)INT64_MAX)
                    x /= 10;
                want[i] = (int64_t)x;
                n += (size_t)sprintf(buf + n, "%llu", (unsigned long long)x);
                if (x > max && bad_at > i)
                    bad_at = i;
            }
        }
        n += (size_t)sprintf(buf + n, "]}");
        CHECK(scan_path(buf, n, TW_PATH_AUTO, 1024, &d) == TW_OK, "uint %zu: scan", r);
        CHECK(d.prompt_token_ids.count == count, "uint %zu: count", r);
        if (bad_at < count)
            failed_checked++;
        for (int pi = 0; pi < g_npaths; pi++) {
            /* the scan on this path reads a plain non-empty array whole (its 64-byte blocks on the
               SIMD paths), and nothing else */
            CHECK(scan_path(buf, n, g_paths[pi], 1024, &d) == TW_OK &&
                      d.prompt_token_ids.count == count && d.prompt_token_ids.read == (plain && count),
                  "uint %zu %s: scan, read %d, plain %d", r, tw_path_name(g_paths[pi]),
                  (int)d.prompt_token_ids.read, plain);
            if (d.prompt_token_ids.read) {
                memset(got, 0x55, MAXN * sizeof(int64_t));
                CHECK(tw_take_uints(&d, &d.prompt_token_ids, UINT64_MAX, got, &err) == 0 &&
                          memcmp(got, want, count * sizeof(int64_t)) == 0,
                      "uint %zu %s: values read during the scan", r, tw_path_name(g_paths[pi]));
            }
            memset(got, 0x55, MAXN * sizeof(int64_t));
            exact = tail_copy(buf, n); /* the document alone: a read past it is caught under ASan */
            rc = tw_parse_uint_array(exact, &d.prompt_token_ids, max, got, &err, g_paths[pi]);
            free(exact);
            if (bad_at < count) {
                CHECK(rc == -1 && err == bad_at, "uint %zu %s: rc %d err %zu, want %zu", r,
                      tw_path_name(g_paths[pi]), rc, err, bad_at);
                CHECK(memcmp(got, want, bad_at * sizeof(int64_t)) == 0, "uint %zu %s: prefix", r,
                      tw_path_name(g_paths[pi]));
            } else {
                CHECK(rc == 0 && memcmp(got, want, count * sizeof(int64_t)) == 0,
                      "uint %zu %s: rc %d, values differ (spaced %d)", r, tw_path_name(g_paths[pi]), rc,
                      spaced);
            }
        }
    }
    tw_doc_free(&d);
    printf("uint arrays: %zu generated, %zu with a bad element\n", rounds, failed_checked);
    free(buf);
    free(want);
    free(got);
}

/* OpenAI-compatible documents: the choice-record rule, what the scan
   blanks, the extra paths; tw_array_element. */
static void test_openai(void)
{
    static const char DOCO[] =
        "{\"choices\":[{\"logprobs\":{\"tokens\":[\"a\"],\"token_logprobs\":[-1],"
        "\"text_offset\":[0],\"top_logprobs\":null,\"token_ids\":[4]}},"
        "{\"raw_output\":{},\"prompt_token_ids\":[1,2]},{\"x\":1},{\"token_ids\":[]}],"
        "\"x\":{\"completion_logprobs\":{\"data\":\"AAAA\"}},\"prompt_token_ids\":[9]}";
    static const char ARR[] = "{\"prompt_token_ids\":[1, \"a,]b\" , [2,[3]], {\"x\":[]} ,null]}";
    static const char *const ELEMS[] = {"1", "\"a,]b\"", "[2,[3]]", "{\"x\":[]}", "null"};
    tw_doc d;
    size_t s = 0, e = 0;
    tw_doc_init(&d);
    CHECK(scan_path(DOCO, sizeof DOCO - 1, TW_PATH_AUTO, 1024, &d) == TW_OK && d.nchoices == 1,
          "openai off: %zu records", d.nchoices);
    d.openai = 1;
    CHECK(scan_path(DOCO, sizeof DOCO - 1, TW_PATH_AUTO, 1024, &d) == TW_OK && d.nchoices == 3,
          "openai: %zu records", d.nchoices);
    if (d.nchoices == 3) {
        const tw_choice *c = &d.choice[0];
        CHECK(c->f[TW_F_LP_TOKENS].type == TW_T_ARRAY && c->f[TW_F_LP_TOKEN_LOGPROBS].count == 1 &&
                  c->f[TW_F_LP_TEXT_OFFSET].type == TW_T_ARRAY && c->f[TW_F_LP_TOP].type == TW_T_NULL &&
                  c->f[TW_F_LP_TOKEN_IDS].count == 1,
              "openai: logprobs paths");
        CHECK(d.choice[1].f[TW_F_RAW_OUTPUT].type == TW_T_OBJECT &&
                  d.choice[1].f[TW_F_PROMPT_IDS].count == 2, "openai: raw_output, prompt ids");
        CHECK(d.nblank == 1 && d.blank_bytes == 1, "openai: only the root prompt ids blanked (%zu)", d.nblank);
        CHECK(tw_blank_field(&d, 0, TW_F_LP_TOKENS) == TW_OK && d.nblank == 2, "openai: blank on request");
    }
    {
        static const char ONE[] = " {\"output_ids\":[1,2],\"meta_info\":{\"output_token_logprobs\":"
                                  "[[-1,1,null],[-2,2]],\"output_top_logprobs\":null}}";
        static const char MANY[] = "[{\"output_ids\":[1]},{\"meta_info\":{}},{\"output_ids\":[]}]";
        d.openai = 0;
        d.sglang = 1;
        CHECK(scan_path(ONE, sizeof ONE - 1, TW_PATH_AUTO, 1024, &d) == TW_OK && d.nchoices == 1 &&
                  d.choice[0].f[TW_F_SGL_IDS].count == 2 && d.choice[0].f[TW_F_SGL_TRIPLES].count == 2 &&
                  d.choice[0].f[TW_F_SGL_TOP].type == TW_T_NULL && d.nblank == 0,
              "sglang: one item");
        CHECK(scan_path(MANY, sizeof MANY - 1, TW_PATH_AUTO, 1024, &d) == TW_OK && d.nchoices == 2,
              "sglang: %zu item records", d.nchoices);
        CHECK(scan_path(" 9 ", 3, TW_PATH_AUTO, 1024, &d) == TW_OK && d.nchoices == 1 &&
                  !d.choice[0].is_object, "sglang: a scalar root is item 0, not an object");
        d.sglang = 0;
    }
    d.openai = 0;
    CHECK(scan_path(ARR, sizeof ARR - 1, TW_PATH_AUTO, 1024, &d) == TW_OK, "elements: scan");
    for (size_t i = 0; i < 5; i++) {
        int rc = tw_array_element(ARR, &d.prompt_token_ids, i, &s, &e);
        CHECK(rc == 0 && e - s == strlen(ELEMS[i]) && memcmp(ARR + s, ELEMS[i], e - s) == 0,
              "element %zu", i);
    }
    CHECK(tw_array_element(ARR, &d.prompt_token_ids, 5, &s, &e) == -1, "element past the end");
    CHECK(tw_array_element(ARR, &d.choices, 0, &s, &e) == -1, "element of an absent array");
    tw_doc_free(&d);
    printf("openai: records, blanking, elements\n");
}

/* Routing replay on the OpenAI-compatible endpoints: root.prompt_routed_experts is a root
   record; it and a choice's routed_experts are blanked and decoded by the OpenAI-compatible
   scan when strings, on every path; the generate scan leaves the root one alone. */
static void test_openai_routing(void)
{
    enum { LEN = 8192 };
    char *doc = (char *)malloc(2 * LEN + 256);
    size_t n = 0, size = 0;
    tw_doc d;
    if (!doc)
        exit(2);
    n += (size_t)snprintf(doc + n, 64, "{\"prompt_routed_experts\":\"");
    memset(doc + n, 'A', LEN);
    n += LEN;
    n += (size_t)snprintf(doc + n, 64, "\",\"choices\":[{\"token_ids\":[1],\"routed_experts\":\"");
    memset(doc + n, 'A', LEN);
    n += LEN;
    n += (size_t)snprintf(doc + n, 64, "\"}]}");
    tw_doc_init(&d);
    for (int sp = 0; sp < g_npaths; sp++) {
        for (int openai = 0; openai < 2; openai++) {
            const tw_value *root = &d.root[TW_R_PROMPT_ROUTED];
            uint8_t *blob;
            d.decode = 1;
            d.openai = openai;
            CHECK(scan_path(doc, n, g_paths[sp], 1024, &d) == TW_OK, "routing %d: scan", openai);
            CHECK(root->type == TW_T_STRING && root->end - root->start == LEN && d.nchoices == 1,
                  "routing %d: the root record", openai);
            CHECK(d.blank_bytes == 1 + LEN + (openai ? LEN : 0) && d.nblobs == 1u + openai,
                  "routing %d: %zu bytes blanked, %zu blobs", openai, d.blank_bytes, d.nblobs);
            blob = tw_take_blob(&d, root, &size);
            CHECK((blob != NULL) == openai && (!blob || size == LEN / 4 * 3), "routing %d: root blob", openai);
            tw_mem_free(blob);
            blob = tw_take_blob(&d, &d.choice[0].f[TW_F_ROUTED], &size);
            CHECK(blob && size == LEN / 4 * 3 && !blob[0] && !blob[size - 1], "routing %d: choice blob", openai);
            tw_mem_free(blob);
        }
    }
    {
        static const char DUP[] = "{\"prompt_routed_experts\":\"AAAA\",\"choices\":[],\"prompt_routed_experts\":7}";
        CHECK(scan_path(DUP, sizeof DUP - 1, TW_PATH_AUTO, 1024, &d) == TW_OK &&
                  d.root[TW_R_PROMPT_ROUTED].type == TW_T_NUMBER && d.root[TW_R_CHOICES].count == 0,
              "routing: a repeated root key");
        CHECK(scan_path("{}", 2, TW_PATH_AUTO, 1024, &d) == TW_OK && !d.root[TW_R_PROMPT_ROUTED].present,
              "routing: records reset by the next scan");
    }
    d.openai = 0;
    tw_doc_free(&d);
    free(doc);
    printf("openai routing: root records, blanking, decoding\n");
}

/* Decoding during the scan (doc->decode): a blob exactly when the string is
   long, plain and canonical base64 with a whole first block, holding
   tw_b64_decode's bytes; every record otherwise as without decoding; on
   every scan path and base64 path; allocation failures only skip it. */
static void test_decode(void)
{
    static const char ALPHA[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    static const int B64[] = {TW_PATH_SCALAR, TW_PATH_AVX2, TW_PATH_AVX512, TW_PATH_NEON};
    static const size_t LENS[] = {0, 8, 4092, 4096, 4100, 8188, 8192, 8196, 12300};
    enum { MAXC = 20480 };
    char *content = (char *)malloc(MAXC + 16), *doc = (char *)malloc(2 * MAXC + 256);
    uint8_t *want = (uint8_t *)malloc(MAXC);
    size_t blobs = 0, plain = 0, rounds = 600;
    tw_doc d0, d1;
    if (!content || !doc || !want)
        exit(2);
    tw_doc_init(&d0);
    tw_doc_init(&d1);
    for (size_t r = 0; r < rounds; r++) {
        size_t len = r < 9 * 4 ? LENS[r % 9] : rndn(MAXC / 4) * 4, n, at;
        size_t kind = r < 9 * 4 ? r / 9 : rndn(9), pads = rndn(3);
        ptrdiff_t got;
        int valid, expect;
        for (size_t i = 0; i < len; i++)
            content[i] = ALPHA[rndn(64)];
        if (len && pads)
            memset(content + len - (pads < len ? pads : len), '=', pads < len ? pads : len);
        at = rndn(len + 1);
        switch (kind) {
        case 1: /* a byte outside the alphabet */
            if (at < len)
                content[at] = "!-_.~@ "[rndn(7)];
            break;
        case 2: /* an escaped slash: same bytes, but not plain */
            memmove(content + at + 2, content + at, len - at);
            memcpy(content + at, "\\/", 2);
            len += 2;
            break;
        case 3: /* '=' in the middle */
            if (at < len)
                content[at] = '=';
            break;
        case 4: /* a length that is not a multiple of 4 */
            len -= len ? 1 + rndn(len < 3 ? len : 3) : 0;
            break;
        case 5: /* non-ASCII */
            memmove(content + at + 2, content + at, len - at);
            memcpy(content + at, "\xc3\xa9", 2);
            len += 2;
            break;
        default:
            break;
        }
        n = (size_t)snprintf(doc, 64, "{\"choices\":[{\"token_ids\":[1],\"routed_experts\":{\"data\":\"");
        memcpy(doc + n, content, len);
        n += len;
        n += (size_t)snprintf(doc + n, 128, "\",\"shape\":[1]},\"x\":\"");
        memcpy(doc + n, content, len); /* same string at an ignored path */
        n += len;
        n += (size_t)snprintf(doc + n, 64, "\"}]}");
        valid = !memchr(content, '\\', len) && !memchr(content, 0xc3, len) &&
                tw_b64_decode(content, len, want, len / 4 * 3, TW_PATH_SCALAR, NULL) >= 0;
        got = valid ? tw_b64_decode(content, len, want, len / 4 * 3, TW_PATH_SCALAR, NULL) : -1;
        expect = valid && len >= TW_SCAN_FUSE_MIN && !memchr(content, '=', TW_SCAN_FUSE_MIN);
        plain += expect;
        d0.decode = 0;
        CHECK(scan_path(doc, n, TW_PATH_AUTO, 1024, &d0) == TW_OK, "decode %zu: scan", r);
        for (int sp = 0; sp < g_npaths; sp++) {
            for (int bp = 0; bp < 3; bp++) {
                size_t size = 0;
                uint8_t *blob;
                if (!tw_path_available(B64[bp]))
                    continue;
                d1.decode = 1;
                d1.b64_path = B64[bp];
                CHECK(scan_path(doc, n, g_paths[sp], 1024, &d1) == TW_OK, "decode %zu: scan", r);
                CHECK(doc_eq(&d0, &d1), "decode %zu (len %zu kind %zu): records differ", r, len, kind);
                CHECK(d1.nblobs == (size_t)expect, "decode %zu (len %zu kind %zu): %zu blobs",
                      r, len, kind, d1.nblobs);
                blob = tw_take_blob(&d1, &d1.choice[0].f[TW_F_RE_DATA], &size);
                CHECK((blob != NULL) == expect, "decode %zu (len %zu kind %zu): blob %d",
                      r, len, kind, blob != NULL);
                if (blob) {
                    blobs++;
                    CHECK(size == (size_t)got && memcmp(blob, want, size) == 0,
                          "decode %zu (len %zu, path %d/%d): bytes differ", r, len, sp, bp);
                    CHECK(tw_take_blob(&d1, &d1.choice[0].f[TW_F_RE_DATA], &size) == NULL &&
                              size == 0, "decode %zu: taken twice", r);
                    tw_mem_free(blob);
                }
            }
        }
        if (expect) {
            /* truncated inside the string: an error, and nothing leaks */
            d1.decode = 1;
            CHECK(scan_path(doc, 60 + len / 2, TW_PATH_AUTO, 1024, &d1) == TW_ERR_SYNTAX,
                  "decode %zu: truncated", r);
            /* every allocation failing: the same records, no blob */
            for (long k = 0; k < 3; k++) {
                g_fail_after = k;
                CHECK(scan_path(doc, n, TW_PATH_AUTO, 1024, &d1) == TW_OK,
                      "decode %zu: nomem %ld", r, k);
                g_fail_after = -1;
                CHECK(doc_eq(&d0, &d1), "decode %zu: nomem %ld records", r, k);
            }
        }
    }
    /* A superseded duplicate's blob is not the record's and is freed. */
    {
        size_t n = 0;
        memset(content, 'A', 8192);
        n += (size_t)snprintf(doc, 64, "{\"choices\":[{\"token_ids\":[],\"routed_experts\":\"");
        memcpy(doc + n, content, 8192);
        n += 8192;
        n += (size_t)snprintf(doc + n, 64, "\",\"routed_experts\":{\"data\":\"");
        memcpy(doc + n, content, 4096);
        n += 4096;
        n += (size_t)snprintf(doc + n, 64, "\"}}]}");
        d1.decode = 1;
        CHECK(scan_path(doc, n, TW_PATH_AUTO, 1024, &d1) == TW_OK, "duplicate: scan");
        CHECK(d1.nblobs == 2 && d1.choice[0].f[TW_F_ROUTED].blob == 0 &&
                  d1.choice[0].f[TW_F_RE_DATA].blob == 2,
              "duplicate: blobs %zu", d1.nblobs);
    }
    tw_doc_free(&d0);
    tw_doc_free(&d1);
    printf("decode: %zu rounds, %zu plain long strings, %zu blobs checked\n", rounds, plain, blobs);
    free(content);
    free(doc);
    free(want);
}

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

/* A moe_16k-like document: 8192 token ids, packed logprobs, ~8 MB of
   base64 routing data, 8192 prompt ids. */
static char *make_moe_doc(size_t *len)
{
    static const char B64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t cap = 9u << 20, k = 0, routed = 16383u * 48 * 8 / 3 * 4;
    char *s = (char *)malloc(cap);
    if (!s)
        exit(2);
    k += (size_t)sprintf(s + k, "{\"request_id\":\"gen-0\",\"choices\":[{\"index\":0,\"text\":\"\","
                                "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null,"
                                "\"token_ids\":[");
    for (int i = 0; i < 8192; i++)
        k += (size_t)sprintf(s + k, "%s%u", i ? "," : "", (unsigned)(rnd() % 151936));
    k += (size_t)sprintf(s + k, "],\"completion_logprobs\":{\"data\":\"");
    for (int i = 0; i < 8192 / 3 * 4 * 4; i++)
        s[k++] = B64[rnd() & 63];
    k += (size_t)sprintf(s + k, "\",\"shape\":[8192],\"dtype\":\"float32\"},"
                                "\"routed_experts\":{\"data\":\"");
    for (size_t i = 0; i < routed; i++)
        s[k++] = B64[rnd() & 63];
    k += (size_t)sprintf(s + k, "\",\"shape\":[16383,48,8],\"start\":0,\"dtype\":\"uint8\"}}],"
                                "\"usage\":{\"prompt_tokens\":8192,\"completion_tokens\":8192,"
                                "\"total_tokens\":16384},\"prompt_token_ids\":[");
    for (int i = 0; i < 8192; i++)
        k += (size_t)sprintf(s + k, "%s%u", i ? "," : "", (unsigned)(rnd() % 151936));
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
    test_nested_arrays();
    test_openai();
    test_openai_routing();
    test_decode();
    test_fuzz(fuzz);
    for (int i = first_file; i < argc; i++)
        test_file(argv[i]);
    return checks_done();
}
