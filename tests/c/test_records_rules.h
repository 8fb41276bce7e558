/*
 * The per-entry rules of both passes (sampled and candidates), the outputs and the
 * counting pass.
 * Part of test_records.c, which includes this file after its harness; not a program of its own.
 */

/* A good candidate list for entry objects. */
#define TOP2 "\"top_logprobs\":[{\"token\":\"token_id:7\",\"logprob\":-0.5},{\"token_id\":8,\"logprob\":-1}]"

static void test_sampled_rules(void)
{
    /* good: token or token_id, any key order, whitespace */
    EXPECT("[{\"token\":\"token_id:5\",\"logprob\":-0.25," TOP2 "}]", ONE(5), -1, 0, -1, 0);
    EXPECT("[{\"logprob\":-0.25,\"token_id\":5," TOP2 "}]", ONE(5), -1, 0, -1, 0);
    EXPECT(" [ \t{ \"logprob\" :\n-0.25 ,\r\"token\"\t: \"token_id:5\" , " TOP2 " } \n] ",
           ONE(5), -1, 0, -1, 0);
    EXPECT("[{\"token_id\":0,\"logprob\":0," TOP2 "}]", ONE(0), -1, 0, -1, 0);
    EXPECT("[{\"token_id\":-0,\"logprob\":0," TOP2 "}]", ONE(0), -1, 0, -1, 0);
    EXPECT("[{\"token_id\":4294967295,\"logprob\":1," TOP2 "}]", ONE(4294967295), -1, 0, -1, 0);
    EXPECT("[{\"token\":\"token_id:4294967295\",\"logprob\":1," TOP2 "}]", ONE(4294967295), -1, 0,
           -1, 0);
    EXPECT("[{\"token\":\"token_id:0004294967295\",\"logprob\":1," TOP2 "}]", ONE(4294967295),
           -1, 0, -1, 0);
    EXPECT("[{\"token\":\"token_id:00000000000000000000000000000000000000007\",\"logprob\":1,"
           TOP2 "}]", ONE(7), -1, 0, -1, 0);
    /* not an object */
    EXPECT("[1]", ONE(1), 0, TW_REC_ENTRY_NOT_OBJECT, 0, TW_REC_MISSING_TOP);
    EXPECT("[\"token_id:1\"]", ONE(1), 0, TW_REC_ENTRY_NOT_OBJECT, 0, TW_REC_MISSING_TOP);
    EXPECT("[null]", ONE(1), 0, TW_REC_ENTRY_NOT_OBJECT, 0, TW_REC_MISSING_TOP);
    EXPECT("[[{\"token_id\":1,\"logprob\":-1}]]", ONE(1), 0, TW_REC_ENTRY_NOT_OBJECT, 0,
           TW_REC_MISSING_TOP);
    EXPECT("[true]", ONE(1), 0, TW_REC_ENTRY_NOT_OBJECT, 0, TW_REC_MISSING_TOP);
    /* ids that are not ids, or the wrong one */
    {
        static const char *const BAD[] = {
            "\"token\":\"token_id:6\"", "\"token\":\"token_id: 5\"", "\"token\":\"token_id:5 \"",
            "\"token\":\"token_id:+5\"", "\"token\":\"token_id:-5\"", "\"token\":\"token_id:\"",
            "\"token\":\"token_id:5a\"", "\"token\":\"token_id:5.0\"", "\"token\":\"Token_id:5\"",
            "\"token\":\"token_id:4294967301\"", "\"token\":\"token_id:99999999999999999999995\"",
            "\"token\":\"token_id:\\u0665\"", "\"token\":\"token_id:\xd9\xa5\"",
            "\"token\":\"token_id:5\\u0000\"", "\"token\":\"token_id\\u0000:5\"",
            "\"token\":\"5\"", "\"token\":\"\"", "\"token\":5", "\"token\":null", "\"token\":true",
            "\"token\":[\"token_id:5\"]", "\"token\":{\"token\":\"token_id:5\"}",
            "\"token_id\":\"5\"", "\"token_id\":5.0", "\"token_id\":5e0", "\"token_id\":50e-1",
            "\"token_id\":-5", "\"token_id\":4294967301", "\"token_id\":18446744073709551621",
            "\"token_id\":true", "\"token_id\":null", "\"token_id\":[5]", "\"token_id\":{}",
            /* token_id present (and bad) decides even with a good token */
            "\"token\":\"token_id:5\",\"token_id\":\"5\"", "\"token_id\":null,\"token\":\"token_id:5\"",
            "\"token_id\":6,\"token\":\"token_id:5\"",
            /* last occurrence wins */
            "\"token\":\"token_id:5\",\"token\":\"token_id:6\"", "\"token_id\":5,\"token_id\":6",
            "\"token_id\":5,\"token_id\":5.5", "",
            /* decoys */
            "\"tokens\":\"token_id:5\"", "\"Token\":\"token_id:5\"", "\"token \":\"token_id:5\"",
            "\"x\":{\"token\":\"token_id:5\",\"token_id\":5}", "\"token_ids\":5",
        };
        char buf[512];
        for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
            sprintf(buf, "[{%s%s\"logprob\":-1," TOP2 "}]", BAD[i], BAD[i][0] ? "," : "");
            EXPECT(buf, ONE(5), 0, TW_REC_TOKEN_MISMATCH, -1, 0);
        }
    }
    /* ids that are ids */
    {
        static const char *const GOOD[] = {
            "\"token\":\"token_id:\\u0035\"", "\"token\":\"\\u0074oken_id:5\"",
            "\"token\":\"token\\u005Fid\\u003a5\"", "\"tok\\u0065n\":\"token_id:5\"",
            "\"\\u0074\\u006f\\u006b\\u0065\\u006e\\u005f\\u0069\\u0064\":5",
            "\"token\":\"token_id:6\",\"token_id\":5", "\"token_id\":5,\"token\":\"junk\"",
            "\"token\":\"junk\",\"token\":\"token_id:5\"", "\"token_id\":6,\"token_id\":5",
            "\"token_id\":\"5\",\"token_id\":5", "\"token_id\":-0,\"token_id\":5",
            "\"token\":\"token_id:05\"", "\"token\":\"token_id:5\",\"x\":{\"token_id\":9}",
        };
        char buf[512];
        for (size_t i = 0; i < sizeof GOOD / sizeof GOOD[0]; i++) {
            sprintf(buf, "[{%s,\"logprob\":-1," TOP2 "}]", GOOD[i]);
            EXPECT(buf, ONE(5), -1, 0, -1, 0);
        }
    }
    /* logprob: missing or not a number */
    {
        static const char *const BAD[] = {
            "", "\"logprob\":true,", "\"logprob\":false,", "\"logprob\":null,",
            "\"logprob\":\"-1\",", "\"logprob\":[],", "\"logprob\":[-1],", "\"logprob\":{},",
            "\"logprob\":-1,\"logprob\":null,", "\"logprobs\":-1,", "\"Logprob\":-1,",
            "\"x\":{\"logprob\":-1},",
        };
        char buf[512];
        for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
            sprintf(buf, "[{\"token_id\":5,%s" TOP2 "}]", BAD[i]);
            EXPECT(buf, ONE(5), 0, TW_REC_NOT_A_NUMBER, 0, TW_REC_SAMPLED_NOT_A_NUMBER);
        }
    }
    /* the sentinel */
    EXPECT("[{\"token_id\":5,\"logprob\":-9999.0," TOP2 "}]", ONE(5), 0, TW_REC_NO_EVIDENCE, -1,
           0);
    EXPECT("[{\"token_id\":5,\"logprob\":-9999," TOP2 "}]", ONE(5), 0, TW_REC_NO_EVIDENCE, -1, 0);
    EXPECT("[{\"token_id\":5,\"logprob\":-9.999e3," TOP2 "}]", ONE(5), 0, TW_REC_NO_EVIDENCE,
           -1, 0);
    EXPECT("[{\"token_id\":5,\"logprob\":-9999.000000000000000000001," TOP2 "}]", ONE(5), 0,
           TW_REC_NO_EVIDENCE, -1, 0);
    EXPECT("[{\"token_id\":5,\"logprob\":-9999.000000001," TOP2 "}]", ONE(5), -1, 0, -1, 0);
    EXPECT("[{\"token_id\":5,\"logprob\":-9999.0,\"logprob\":-1," TOP2 "}]", ONE(5), -1, 0, -1, 0);
    /* order of the checks within an entry: object, id, number, finite, sentinel */
    EXPECT("[{\"token_id\":6,\"logprob\":null}]", ONE(5), 0, TW_REC_TOKEN_MISMATCH, 0,
           TW_REC_MISSING_TOP);
    /* the first failing entry */
    EXPECT("[{\"token_id\":1,\"logprob\":-1," TOP2 "},{\"token_id\":2,\"logprob\":-9999," TOP2
           "},{\"token_id\":9,\"logprob\":null," TOP2 "}]",
           ((const int64_t[]){1, 2, 3}), 3, 1, TW_REC_NO_EVIDENCE, 2,
           TW_REC_SAMPLED_NOT_A_NUMBER);
}

/* Not finite: only reachable with a literal tw_scan would reject. */
static void test_not_finite(void)
{
    static const char txt[] = "[{\"token_id\":5,\"logprob\":-1e999,\"top_logprobs\":[{\"token_id\":"
                              "1,\"logprob\":1e999}]}]";
    size_t n = sizeof txt - 1;
    char *b = (char *)malloc(n);
    tw_value v;
    tw_rec_result res;
    tw_rec_cands c = {NULL, NULL, 0, 1};
    double s[1], el[1];
    int64_t co[2], id = 5;
    if (!b)
        exit(2);
    memcpy(b, txt, n);
    memset(&v, 0, sizeof v);
    v.present = 1;
    v.type = TW_T_ARRAY;
    v.end = n;
    v.count = 1;
    CHECK(tw_rec_parse(b, &v, 1, &id, 1, s, co, el, &c, &res, g_path) == TW_REC_OK &&
              res.sampled_err == 0 && res.sampled_code == TW_REC_NOT_FINITE && res.top_err == 0 &&
              res.top_code == TW_REC_TOP_NOT_FINITE,
          "not finite: (%td, %d) (%td, %d)", res.sampled_err, res.sampled_code, res.top_err,
          res.top_code);
    tw_rec_cands_free(&c);
    free(b);
}

static void test_top_rules(void)
{
#define E(lp, top) "[{\"token_id\":5,\"logprob\":" lp ",\"top_logprobs\":" top "}]"
    EXPECT(E("-1", "[{\"token_id\":5,\"logprob\":-1}]"), ONE(5), -1, 0, -1, 0);
    /* missing, not an array, empty */
    EXPECT("[{\"token_id\":5,\"logprob\":-1}]", ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    EXPECT(E("-1", "[]"), ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    EXPECT(E("-1", "[ \n ]"), ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    EXPECT(E("-1", "null"), ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    EXPECT(E("-1", "{}"), ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    EXPECT(E("-1", "{\"token_id\":5,\"logprob\":-1}"), ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    EXPECT(E("-1", "\"[]\""), ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    EXPECT(E("-1", "true"), ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    EXPECT("[{\"token_id\":5,\"logprob\":-1,\"top_logprob\":[{\"token_id\":1,\"logprob\":-1}]}]",
           ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    /* candidates: not an object */
    EXPECT(E("-1", "[1]"), ONE(5), -1, 0, 0, TW_REC_TOP_NOT_OBJECT);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":-1},null]"), ONE(5), -1, 0, 0,
           TW_REC_TOP_NOT_OBJECT);
    EXPECT(E("-1", "[[]]"), ONE(5), -1, 0, 0, TW_REC_TOP_NOT_OBJECT);
    /* no id */
    EXPECT(E("-1", "[{\"logprob\":-1}]"), ONE(5), -1, 0, 0, TW_REC_TOP_NO_ID);
    EXPECT(E("-1", "[{\"token\":\"x\",\"logprob\":-1}]"), ONE(5), -1, 0, 0, TW_REC_TOP_NO_ID);
    EXPECT(E("-1", "[{\"token\":\"token_id:1\",\"token_id\":null,\"logprob\":-1}]"), ONE(5), -1,
           0, 0, TW_REC_TOP_NO_ID);
    EXPECT(E("-1", "[{\"token_id\":4294967296,\"logprob\":-1}]"), ONE(5), -1, 0, 0,
           TW_REC_TOP_NO_ID);
    EXPECT(E("-1", "[{\"token_id\":1.0,\"logprob\":-1}]"), ONE(5), -1, 0, 0, TW_REC_TOP_NO_ID);
    EXPECT(E("-1", "[{\"token_id\":true,\"logprob\":-1}]"), ONE(5), -1, 0, 0, TW_REC_TOP_NO_ID);
    /* logprob: not a number (missing, bool, null, string) */
    EXPECT(E("-1", "[{\"token_id\":1}]"), ONE(5), -1, 0, 0, TW_REC_TOP_NOT_FINITE);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":false}]"), ONE(5), -1, 0, 0,
           TW_REC_TOP_NOT_FINITE);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":null}]"), ONE(5), -1, 0, 0,
           TW_REC_TOP_NOT_FINITE);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":\"-1\"}]"), ONE(5), -1, 0, 0,
           TW_REC_TOP_NOT_FINITE);
    /* id is checked before the logprob */
    EXPECT(E("-1", "[{\"logprob\":null}]"), ONE(5), -1, 0, 0, TW_REC_TOP_NO_ID);
    /* positive: > 1e-6 */
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":1e-6}]"), ONE(5), -1, 0, -1, 0);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":0.000001}]"), ONE(5), -1, 0, -1, 0);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":0}]"), ONE(5), -1, 0, -1, 0);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":-9999}]"), ONE(5), -1, 0, -1, 0);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":1.0000000001e-6}]"), ONE(5), -1, 0, 0,
           TW_REC_TOP_POSITIVE);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":1}]"), ONE(5), -1, 0, 0, TW_REC_TOP_POSITIVE);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":0.5},{\"token_id\":1,\"logprob\":-1}]"), ONE(5),
           -1, 0, 0, TW_REC_TOP_POSITIVE);
    /* duplicates */
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":-1},{\"token\":\"token_id:1\",\"logprob\":-2}]"),
           ONE(5), -1, 0, 0, TW_REC_TOP_DUPLICATE);
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":-1},{\"token_id\":2,\"logprob\":-2},"
                   "{\"token_id\":1,\"logprob\":1}]"),
           ONE(5), -1, 0, 0, TW_REC_TOP_POSITIVE);
    /* then the entry's own logprob must be a number */
    EXPECT(E("true", "[{\"token_id\":1,\"logprob\":-1}]"), ONE(5), 0, TW_REC_NOT_A_NUMBER, 0,
           TW_REC_SAMPLED_NOT_A_NUMBER);
    EXPECT(E("true", "[{\"token_id\":1}]"), ONE(5), 0, TW_REC_NOT_A_NUMBER, 0,
           TW_REC_TOP_NOT_FINITE);
    EXPECT(E("-9999", "[{\"token_id\":1,\"logprob\":-1}]"), ONE(5), 0, TW_REC_NO_EVIDENCE, -1,
           0);
    /* a later top_logprobs replaces an earlier one, valid or not */
    EXPECT("[{\"token_id\":5,\"logprob\":-1,\"top_logprobs\":[1,2],\"top_logprobs\":"
           "[{\"token_id\":1,\"logprob\":-1}]}]",
           ONE(5), -1, 0, -1, 0);
    EXPECT("[{\"token_id\":5,\"logprob\":-1,\"top_logprobs\":[{\"token_id\":1,\"logprob\":-1}],"
           "\"top_logprobs\":[]}]",
           ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    EXPECT("[{\"token_id\":5,\"logprob\":-1,\"top_logprobs\":[{\"token_id\":1,\"logprob\":-1}],"
           "\"top_logprobs\":null}]",
           ONE(5), -1, 0, 0, TW_REC_MISSING_TOP);
    EXPECT("[{\"token_id\":5,\"logprob\":-1,\"top_logprobs\":{},\"top_logprobs\":"
           "[{\"token_id\":1,\"logprob\":-1}]}]",
           ONE(5), -1, 0, -1, 0);
    /* nested top_logprobs and logprob keys inside candidates are ignored */
    EXPECT(E("-1", "[{\"token_id\":1,\"logprob\":-1,\"top_logprobs\":[{\"token_id\":1,"
                   "\"logprob\":5}],\"x\":{\"logprob\":3}}]"),
           ONE(5), -1, 0, -1, 0);
    /* independence: a sampled error does not stop the candidates pass and
       the other way round */
    EXPECT("[{\"token_id\":9,\"logprob\":-1," TOP2 "},{\"token_id\":2,\"logprob\":-1}]",
           ((const int64_t[]){1, 2}), 2, 0, TW_REC_TOKEN_MISMATCH, 1, TW_REC_MISSING_TOP);
    EXPECT("[{\"token_id\":1,\"logprob\":-1},{\"token_id\":2,\"logprob\":-1," TOP2
           "},{\"token_id\":4,\"logprob\":-1}]",
           ((const int64_t[]){1, 2, 3}), 3, 2, TW_REC_TOKEN_MISMATCH, 0, TW_REC_MISSING_TOP);
#undef E
}

/* Values, CSR layout, entry logprobs, coff after an error. */
static void test_outputs(void)
{
    run_t r;
    const char *c =
        "[{\"token\":\"token_id:3\",\"logprob\":-0.5,\"bytes\":[1,2],\"top_logprobs\":["
        "{\"token\":\"token_id:3\",\"logprob\":-0.5,\"bytes\":[]},"
        "{\"token_id\":10,\"logprob\":-0},{\"token_id\":11,\"logprob\":-0.0}]},"
        "{\"logprob\":-2,\"token_id\":4,\"top_logprobs\":[{\"logprob\":-1e-320,\"token_id\":4294967295}]},"
        "{\"token_id\":4,\"logprob\":-3.25,\"top_logprobs\":[{\"token_id\":1,\"logprob\":-1},"
        "{\"token_id\":1,\"logprob\":-2}]},"
        "{\"token_id\":5,\"logprob\":-4,\"top_logprobs\":[{\"token_id\":1,\"logprob\":-1}]}]";
    const int64_t ids[] = {3, 4, 4, 5};
    run(&r, c, ids, 4, 1);
    CHECK(r.rc == 0 && r.res.sampled_err == -1 && r.res.top_err == 2 &&
              r.res.top_code == TW_REC_TOP_DUPLICATE && r.res.ncand == 4,
          "outputs: rc %d (%td %d) (%td %d) ncand %zu", r.rc, r.res.sampled_err,
          r.res.sampled_code, r.res.top_err, r.res.top_code, r.res.ncand);
    if (r.rc == 0 && r.res.ncand == 4) {
        CHECK(r.sampled[0] == -0.5 && r.sampled[1] == -2.0 && r.sampled[2] == -3.25 &&
                  r.sampled[3] == -4.0,
              "sampled values");
        CHECK(r.coff[0] == 0 && r.coff[1] == 3 && r.coff[2] == 4 && r.coff[3] == 4 &&
                  r.coff[4] == 4,
              "coff %lld %lld %lld %lld %lld", (long long)r.coff[0], (long long)r.coff[1],
              (long long)r.coff[2], (long long)r.coff[3], (long long)r.coff[4]);
        CHECK(r.c.ids[0] == 3 && r.c.ids[1] == 10 && r.c.ids[2] == 11 && r.c.ids[3] == 4294967295,
              "candidate ids");
        CHECK(r.c.lps[0] == -0.5 && dbits(r.c.lps[1]) == dbits(0.0) &&
                  dbits(r.c.lps[2]) == dbits(-0.0) && r.c.lps[3] == -1e-320,
              "candidate logprobs (-0 is +0.0, -0.0 is -0.0)");
        CHECK(r.elps[0] == -0.5 && r.elps[1] == -2.0, "entry logprobs");
    }
    done(&r);
    /* sampled prefix before an error */
    run(&r, "[{\"token_id\":1,\"logprob\":-1.5},{\"token_id\":2,\"logprob\":-2.5},{\"token_id\":9}]",
        (const int64_t[]){1, 2, 3}, 3, 0);
    CHECK(r.res.sampled_err == 2 && r.sampled[0] == -1.5 && r.sampled[1] == -2.5, "prefix");
    done(&r);
    /* count mismatch and non-arrays */
    {
        tw_value v;
        char *b;
        tw_rec_result res;
        double s[4];
        int64_t id[4] = {0, 0, 0, 0};
        size_t total = 99;
        CHECK(prepare("[{},{}]", &b, &v), "prepare");
        CHECK(tw_rec_parse(b, &v, 3, id, 0, s, NULL, NULL, NULL, &res, g_path) == TW_REC_BAD_ARG,
              "count != n");
        CHECK(tw_rec_parse(b, &v, 2, id, 1, s, NULL, NULL, NULL, &res, g_path) == TW_REC_BAD_ARG,
              "want_top without outputs");
        CHECK(tw_rec_parse(b, &v, 2, id, 0, s, NULL, NULL, NULL, &res, g_path) == TW_REC_OK &&
                  res.sampled_err == 0 && res.sampled_code == TW_REC_TOKEN_MISMATCH,
              "sampled only without top outputs");
        v.type = TW_T_OBJECT;
        CHECK(tw_rec_parse(b, &v, 2, id, 0, s, NULL, NULL, NULL, &res, g_path) == TW_REC_BAD_ARG,
              "not an array");
        CHECK(tw_rec_count(b, &v, &total, g_path) == TW_REC_BAD_ARG && total == 0, "count bad");
        v.present = 0;
        CHECK(tw_rec_parse(b, &v, 2, id, 0, s, NULL, NULL, NULL, &res, g_path) == TW_REC_BAD_ARG,
              "absent");
        free(b);
        CHECK(prepare("[]", &b, &v), "prepare []");
        CHECK(tw_rec_parse(b, &v, 0, NULL, 0, s, NULL, NULL, NULL, &res, g_path) == TW_REC_OK &&
                  res.sampled_err == -1,
              "empty content");
        free(b);
    }
}

/* ids NULL: the entries stand for the tokens by position (vLLM's output_mode "text", whose
   tokens are decoded text): no id is read, every other rule holds, on both readers. */
static void test_by_position(void)
{
    static const struct {
        const char *content;
        ptrdiff_t serr;
        int scode;
        ptrdiff_t terr;
        int tcode;
    } cases[] = {
        {"[{\"token\":\"Hello\",\"logprob\":-0.5,\"bytes\":[72]},{\"token\":\" world\",\"logprob\":-1.5}]",
         -1, 0, 0, TW_REC_MISSING_TOP},
        {"[{\"token\":\"token_id:9\",\"logprob\":-0.5," TOP2 "},{\"token_id\":3,\"logprob\":-1," TOP2 "}]",
         -1, 0, -1, 0},
        {"[{\"logprob\":-0.5," TOP2 "},{\"token\":null,\"logprob\":-1," TOP2 "}]", -1, 0, -1, 0},
        {"[{\"token\":\"a\",\"logprob\":-0.5,\"top_logprobs\":[{\"token\":\"a\",\"logprob\":-0.5}]}]",
         -1, 0, 0, TW_REC_TOP_NO_ID},
        {"[{\"token\":\"a\",\"logprob\":-0.5},{\"token\":\"b\",\"logprob\":-9999.0}]", 1, TW_REC_NO_EVIDENCE,
         0, TW_REC_MISSING_TOP},
        {"[{\"token\":\"a\",\"logprob\":\"-0.5\"}]", 0, TW_REC_NOT_A_NUMBER, 0, TW_REC_MISSING_TOP},
        {"[{\"token\":\"a\",\"logprob\":-0.5},7]", 1, TW_REC_ENTRY_NOT_OBJECT, 0, TW_REC_MISSING_TOP},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tw_value v;
        char *b;
        double s[4] = {0, 0, 0, 0}, el[4];
        int64_t co[4];
        tw_rec_cands c = {NULL, NULL, 0, 1};
        tw_rec_result res;
        CHECK(prepare(cases[i].content, &b, &v), "prepare %zu", i);
        CHECK(tw_rec_parse(b, &v, v.count, NULL, 1, s, co, el, &c, &res, g_path) == TW_REC_OK &&
                  res.sampled_err == cases[i].serr && res.sampled_code == cases[i].scode &&
                  res.top_err == cases[i].terr && res.top_code == cases[i].tcode,
              "by position %zu: sampled (%td, %d) top (%td, %d)", i, res.sampled_err, res.sampled_code,
              res.top_err, res.top_code);
        CHECK(cases[i].serr >= 0 || (s[0] == -0.5 && s[v.count - 1] != 0), "by position %zu: values", i);
        CHECK(tw_rec_parse(b, &v, v.count, NULL, 0, s, NULL, NULL, NULL, &res, g_path) == TW_REC_OK &&
                  res.sampled_err == cases[i].serr && res.sampled_code == cases[i].scode && res.top_err == -1,
              "by position %zu, sampled only", i);
        check_take(cases[i].content, NULL, 0); /* tw_rec_take where the scan read the array */
        tw_rec_cands_free(&c);
        free(b);
    }
    /* the same text records for ids: the first names no id */
    EXPECT("[{\"token\":\"Hello\",\"logprob\":-0.5},{\"token\":\" world\",\"logprob\":-1.5}]",
           ((const int64_t[]){1, 2}), 2, 0, TW_REC_TOKEN_MISMATCH, 0, TW_REC_MISSING_TOP);
}

/* tw_rec_count: the room the candidates pass needs. */
static void test_count(void)
{
    static const struct {
        const char *content;
        size_t total;
    } CASES[] = {
        {"[]", 0},
        {"[1,null,\"x\",[1,2]]", 0},
        {"[{\"top_logprobs\":[1,2,3]},{\"top_logprobs\":[]},{\"top_logprobs\":{}}]", 3},
        {"[{\"top_logprobs\":[1,2,3],\"top_logprobs\":[1]}]", 3},
        {"[{\"top_logprobs\":[1],\"top_logprobs\":[1,[2,3],{\"a\":[4,5]},\"6,7\"]}]", 4},
        {"[{\"x\":{\"top_logprobs\":[1,2]},\"top_logprobs\":[ 1 , 2 ]}]", 2},
        {"[{\"top_logprobs\":[\"a,b\\\",c\",{\"k\":\"]\"}]}]", 2},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char *b;
        tw_value v;
        size_t total = 99;
        if (!prepare(CASES[i].content, &b, &v)) {
            CHECK(0, "count case %zu invalid", i);
            continue;
        }
        CHECK(tw_rec_count(b, &v, &total, g_path) == TW_REC_OK && total == CASES[i].total,
              "count %zu: %zu != %zu", i, total, CASES[i].total);
        free(b);
    }
}
