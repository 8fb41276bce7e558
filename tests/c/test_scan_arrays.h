/*
 * Arrays read during the scan and after it (ids, offsets, sampling_mask lists), the
 * OpenAI-compatible scan, and base64 decoded on the way.
 * Part of test_scan.c, which includes this file after its harness; not a program of its own.
 */

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

#ifdef TW_SIMD16
/* The block readers of the SIMD paths (tws_uint_block_on: AVX2's and AVX-512's on x86-64)
   against tws_uint_block, one 64-byte block at a time: the same count, the same *past and
   the same elements, with nothing written past them, for blocks of well-formed runs (1 to 8
   digits, 32 one-digit elements, a comma at byte 63) and blocks holding what they hand over
   (9 digits or more, a leading zero, an empty element, another byte), under every room from
   0 to 33 and bounds about 2^32 and 2^64. */
static void test_uint_blocks(void)
{
    static const uint64_t MAX[] = {0, 9, 99999999, UINT64_C(0xFFFFFFFE), UINT64_C(0xFFFFFFFF),
                                   UINT64_C(0x100000000), UINT64_MAX - 1, UINT64_MAX};
    static const char OTHER[] = " ]-.e\"x";
    uint8_t block[72];
    uint64_t want[40], got[40];
    size_t rounds = 200000, fast = 0;
    for (size_t r = 0; r < rounds; r++) {
        size_t i = 0, widest = 1 + rndn(rndn(4) == 0 ? 12 : 8);
        while (i < sizeof block) { /* elements of 1 to `widest` digits, each with its comma */
            size_t k = 1 + rndn(widest);
            for (size_t j = 0; j < k && i < sizeof block; j++)
                block[i++] = (uint8_t)('0' + (j == 0 && k > 1 && rndn(8) ? 1 + rndn(9) : rndn(10)));
            if (i < sizeof block)
                block[i++] = ',';
        }
        if (rndn(3) == 0) { /* a fault somewhere */
            size_t at = rndn(64), kind = rndn(4);
            block[at] = kind == 0 ? ',' : kind == 1 ? '0' : kind == 2 ? (uint8_t)OTHER[rndn(sizeof OTHER - 1)]
                                                                     : (uint8_t)rnd();
        }
        if (r % 97 == 0) /* 32 one-digit elements */
            for (i = 0; i < 64; i++)
                block[i] = i % 2 ? ',' : (uint8_t)('0' + rndn(10));
        {
            uint64_t max = rndn(2) ? UINT64_MAX : MAX[rndn(sizeof MAX / sizeof MAX[0])];
            size_t room = rndn(4) ? 32 : rndn(34);
            const uint8_t *past0, *past;
            size_t n0, n;
            for (i = 0; i < 40; i++)
                want[i] = got[i] = UINT64_C(0x5A5A5A5A5A5A5A5A);
            n0 = tws_uint_block(block, max, room, want, &past0);
            fast += n0 > 0;
            for (int pi = 0; pi < g_npaths; pi++) {
                if (tw_path_resolve(g_paths[pi]) == TW_PATH_SCALAR)
                    continue;
                for (i = 0; i < 40; i++)
                    got[i] = UINT64_C(0x5A5A5A5A5A5A5A5A);
                n = tws_uint_block_on(tw_path_resolve(g_paths[pi]), block, max, room, got, &past);
                CHECK(n == n0 && past == past0 && memcmp(got, want, sizeof got) == 0,
                      "uint block %zu %s (room %zu, max %llu): %zu elements to %td, want %zu to %td", r,
                      tw_path_name(g_paths[pi]), room, (unsigned long long)max, n, past - block, n0,
                      past0 - block);
            }
        }
    }
    printf("uint blocks: %zu generated, %zu with elements taken\n", rounds, fast);
}
#endif

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
    /* SGLang: meta_info.routed_experts, blanked and decoded by the SGLang scan too */
    n = 0;
    n += (size_t)snprintf(doc + n, 64, "{\"output_ids\":[1],\"meta_info\":{\"routed_experts\":\"");
    memset(doc + n, 'A', LEN);
    n += LEN;
    n += (size_t)snprintf(doc + n, 64, "\"}}");
    d.openai = 0;
    d.sglang = 1;
    for (int sp = 0; sp < g_npaths; sp++) {
        uint8_t *blob;
        CHECK(scan_path(doc, n, g_paths[sp], 1024, &d) == TW_OK && d.nchoices == 1, "sglang routing: scan");
        CHECK(d.blank_bytes == LEN && d.nblobs == 1, "sglang routing: %zu bytes blanked", d.blank_bytes);
        blob = tw_take_blob(&d, &d.choice[0].f[TW_F_SGL_ROUTED], &size);
        CHECK(blob && size == LEN / 4 * 3, "sglang routing: blob");
        tw_mem_free(blob);
    }
    d.sglang = 0;
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
