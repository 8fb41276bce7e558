/*
 * The scanner's recorded paths, nesting depth, the helpers over validated values and
 * allocation failures.
 * Part of test_scan.c, which includes this file after its harness; not a program of its own.
 */

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
