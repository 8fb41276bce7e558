/*
 * Generated documents (long entries, long strings, block boundaries), colliding ids and
 * keys, allocation failures and tw_blank_field.
 * Part of test_records.c, which includes this file after its harness; not a program of its own.
 */

/* ------------------------------------------------------------------------ */
/* Generated documents: long entries, long strings, block boundaries         */
/* ------------------------------------------------------------------------ */

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int k;
    for (;;) {
        va_start(ap, fmt);
        k = vsnprintf(b->s ? b->s + b->n : NULL, b->cap - b->n, fmt, ap); /* no NULL + 0 */
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n)
            break;
        b->cap = b->cap * 2 + (size_t)k + 64;
        b->s = (char *)realloc(b->s, b->cap);
        if (!b->s)
            exit(2);
    }
    b->n += (size_t)k;
}

/* A string value that stresses the skippers: quotes, backslashes and
   brackets, runs of backslashes, long enough to cross 64-byte blocks. */
static void sb_junk(sbuf *b)
{
    static const char *const PIECES[] = {"\\\"", "\\\\", "]", "}", "[", "{", ",", "x", "\\u0022",
                                         "\\\\\\\"", "\\/", " ", "\xc3\xa9", "\\n"};
    size_t len = rndn(4) == 0 ? 60 + rndn(200) : rndn(20);
    sb_put(b, "\"");
    for (size_t i = 0; i < len; i++)
        sb_put(b, "%s", PIECES[rndn(sizeof PIECES / sizeof PIECES[0])]);
    sb_put(b, "\"");
}

/* n entries with k candidates each (distinct ids, or a duplicate at the
   end when dup), junk values in between. */
static void make_content(sbuf *b, size_t n, size_t k, int dup, int64_t *ids)
{
    sb_put(b, "[");
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int64_t)rndn(200000);
        sb_put(b, "%s{", i ? "," : "");
        if (rndn(3) == 0) {
            sb_put(b, "\"junk\":");
            sb_junk(b);
            sb_put(b, ",");
        }
        sb_put(b, "\"token\":\"token_id:%lld\",\"logprob\":-%u.%06u,", (long long)ids[i],
               (unsigned)rndn(20), (unsigned)rndn(1000000));
        if (rndn(2)) {
            sb_put(b, "\"deep\":[[{\"a\":");
            sb_junk(b);
            sb_put(b, "},[]],{\"logprob\":1,\"top_logprobs\":null}],");
        }
        sb_put(b, "\"top_logprobs\":[");
        for (size_t j = 0; j < k; j++) {
            long long cid = (long long)(i * 100003 + j * 7919) % 4294967296LL;
            if (dup && j == k - 1 && k > 1)
                cid = (long long)(i * 100003 + rndn(j) * 7919) % 4294967296LL;
            sb_put(b, "%s{\"token_id\":%lld,\"logprob\":-%u.5", j ? "," : "", cid,
                   (unsigned)rndn(30));
            if (rndn(4) == 0) {
                sb_put(b, ",\"s\":");
                sb_junk(b);
            }
            sb_put(b, "}");
        }
        sb_put(b, "]}");
    }
    sb_put(b, "]");
}

static void test_generated(void)
{
    static const size_t SHAPES[][3] = {
        {1, 1, 0},   {5, 20, 0},   {3, 63, 1},  {3, 64, 1},  {3, 65, 1},   {2, 300, 0},
        {2, 300, 1}, {1, 5000, 0}, {1, 5000, 1}, {50, 3, 0}, {400, 22, 0},
    };
    for (size_t sh = 0; sh < sizeof SHAPES / sizeof SHAPES[0]; sh++) {
        for (int rep = 0; rep < 3; rep++) {
            size_t n = SHAPES[sh][0], k = SHAPES[sh][1];
            int dup = (int)SHAPES[sh][2];
            sbuf b = {NULL, 0, 0};
            int64_t *ids = (int64_t *)calloc(n, sizeof(int64_t));
            run_t r;
            size_t total = 0;
            if (!ids)
                exit(2);
            make_content(&b, n, k, dup, ids);
            run(&r, b.s, ids, n, 1);
            CHECK(r.rc == 0 && r.res.sampled_err == -1, "gen %zu: sampled (%td, %d)", sh,
                  r.res.sampled_err, r.res.sampled_code);
            if (dup && k > 1)
                CHECK(r.res.top_err == 0 && r.res.top_code == TW_REC_TOP_DUPLICATE,
                      "gen %zu: top (%td, %d)", sh, r.res.top_err, r.res.top_code);
            else
                CHECK(r.res.top_err == -1 && r.res.ncand == n * k, "gen %zu: top (%td, %d) %zu", sh,
                      r.res.top_err, r.res.top_code, r.res.ncand);
            if (r.rc == 0 && r.res.top_err == -1 && r.res.ncand == n * k) {
                int ok = 1;
                for (size_t i = 0; i < n && ok; i++)
                    for (size_t j = 0; j < k; j++)
                        ok &= r.c.ids[i * k + j] == (int64_t)((i * 100003 + j * 7919) % 4294967296ULL);
                CHECK(ok, "gen %zu: candidate ids", sh);
            }
            CHECK(tw_rec_count(r.buf, &r.v, &total, g_path) == 0 && total == n * k, "gen %zu: count %zu",
                  sh, total);
            /* fixed arrays: exactly the count is enough, one less is not */
            if (r.rc == 0 && r.res.top_err == -1 && total) {
                tw_rec_cands c = {NULL, NULL, 0, 0};
                tw_rec_result res;
                c.ids = (int64_t *)malloc(total * sizeof(int64_t));
                c.lps = (double *)malloc(total * sizeof(double));
                if (!c.ids || !c.lps)
                    exit(2);
                c.cap = total;
                CHECK(tw_rec_parse(r.buf, &r.v, n, ids, 1, r.sampled, r.coff, r.elps, &c, &res, g_path) ==
                              TW_REC_OK &&
                          res.ncand == total,
                      "fixed exact");
                c.cap = total - 1;
                CHECK(tw_rec_parse(r.buf, &r.v, n, ids, 1, r.sampled, r.coff, r.elps, &c, &res, g_path) ==
                          TW_REC_NOMEM,
                      "fixed too small");
                free(c.ids);
                free(c.lps);
            }
            done(&r);
            free(ids);
            free(b.s);
        }
    }
    printf("generated: long entries, duplicates (bloom and hash), long strings\n");
}

/* Candidates and keys that all collide under the fixed hashes the tables once had
   (tw_flood.h): a list of FLOOD native candidates, with and without a repeat at its end,
   and a keyed row ({"token_id:N": logprob, ...}) of FLOOD keys, with and without a repeated
   key, read as any others. */
static void test_flood(void)
{
    enum { FLOOD = 4000 };
    uint32_t *ids = flood_ids64(FLOOD), *keys = flood_keys(FLOOD);
    for (int dup = 0; dup < 2; dup++) {
        sbuf b = {NULL, 0, 0};
        run_t r;
        int64_t sid = ids[0];
        sb_put(&b, "[{\"token_id\":%u,\"logprob\":-0.5,\"top_logprobs\":[", ids[0]);
        for (size_t j = 0; j < FLOOD; j++)
            sb_put(&b, "%s{\"token_id\":%u,\"logprob\":-%zu.5}", j ? "," : "",
                   dup && j == FLOOD - 1 ? ids[FLOOD / 2] : ids[j], j);
        sb_put(&b, "]}]");
        run(&r, b.s, &sid, 1, 1);
        if (dup) {
            CHECK(r.rc == TW_REC_OK && r.res.top_err == 0 && r.res.top_code == TW_REC_TOP_DUPLICATE,
                  "colliding candidates with a repeat: rc %d top (%td, %d)", r.rc, r.res.top_err,
                  r.res.top_code);
        } else {
            int ok = r.rc == TW_REC_OK && r.res.top_err == -1 && r.res.ncand == FLOOD;
            for (size_t j = 0; ok && j < FLOOD; j++) ok = r.c.ids[j] == (int64_t)ids[j];
            CHECK(ok, "colliding candidates: rc %d top (%td, %d) %zu", r.rc, r.res.top_err,
                  r.res.top_code, r.res.ncand);
        }
        done(&r);
        free(b.s);

        b = (sbuf){NULL, 0, 0};
        sb_put(&b, "[{");
        for (size_t j = 0; j < FLOOD; j++)
            sb_put(&b, "%s\"token_id:%u\":-%zu.5", j ? "," : "",
                   dup && j == FLOOD - 1 ? keys[FLOOD / 3] : keys[j], j);
        sb_put(&b, "}]");
        char *buf;
        tw_value v;
        CHECK(prepare(b.s, &buf, &v), "colliding keys: content");
        int64_t coff[2] = {0, 0};
        tw_rec_cands c = {NULL, NULL, 0, 1};
        tw_rec_result res;
        tw_rec_repeat rep;
        int rc = tw_rec_keyed_heads(buf, &v, 1, coff, &c, &res, &rep, g_path);
        if (dup) {
            char want[32];
            int len = snprintf(want, sizeof want, "token_id:%u", keys[FLOOD / 3]);
            CHECK(rc == TW_REC_OK && rep.row == 0 && rep.end - rep.start == (size_t)len &&
                      memcmp(buf + rep.start, want, (size_t)len) == 0,
                  "colliding keys with a repeat: rc %d row %td", rc, rep.row);
        } else {
            int ok = rc == TW_REC_OK && rep.row == -1 && !rep.escaped && res.top_err == -1 &&
                     coff[1] == FLOOD;
            for (size_t j = 0; ok && j < FLOOD; j++) ok = c.ids[j] == (int64_t)keys[j];
            CHECK(ok, "colliding keys: rc %d row %td top (%td, %d)", rc, rep.row, res.top_err,
                  res.top_code);
        }
        tw_rec_cands_free(&c);
        free(buf);
        free(b.s);
    }
    free(ids);
    free(keys);
    printf("colliding candidates and keys\n");
}

/* Allocation failures (candidate arrays, duplicate table) are reported as
   TW_REC_NOMEM and leak nothing. */
static void test_nomem(void)
{
    sbuf b = {NULL, 0, 0};
    int64_t ids[4];
    size_t nomem = 0;
    make_content(&b, 4, 700, 0, ids);
    for (long k = 0; k < 12; k++) {
        run_t r;
        g_inject = k;
        run(&r, b.s, ids, 4, 1);
        g_inject = -1;
        CHECK(r.rc == TW_REC_OK || r.rc == TW_REC_NOMEM, "nomem %ld: rc %d", k, r.rc);
        if (r.rc == TW_REC_OK)
            CHECK(r.res.ncand == 2800 && r.res.top_err == -1, "nomem %ld: result", k);
        nomem += r.rc == TW_REC_NOMEM;
        done(&r);
    }
    CHECK(nomem >= 3, "nomem injected %zu", nomem);
    free(b.s);
    printf("nomem: %zu injected allocation failures reported\n", nomem);
}

/* ------------------------------------------------------------------------ */
/* tw_blank_field                                                            */
/* ------------------------------------------------------------------------ */

static void test_blank_field(void)
{
    static const char DOC[] =
        "{\"choices\":[{\"token_ids\":[1,2],\"logprobs\":{\"content\":[{\"a\":1},2]},"
        "\"completion_logprobs\":{\"data\":\"QUJD\"}},"
        "{\"token_ids\":[3],\"logprobs\":{\"content\":\"str\",\"x\":[]}},"
        "{\"token_ids\":[4],\"logprobs\":{\"content\":[]}},"
        "{\"token_ids\":[5],\"logprobs\":{\"content\":[1],\"content\":[7,8]},\"logprobs\":{}}],"
        "\"prompt_token_ids\":[9]}";
    static const char WANT[] =
        "{\"choices\":[{\"token_ids\":[],\"logprobs\":{\"content\":[]},"
        "\"completion_logprobs\":{\"data\":\"\"}},"
        "{\"token_ids\":[],\"logprobs\":{\"content\":\"\",\"x\":[]}},"
        "{\"token_ids\":[],\"logprobs\":{\"content\":[]}},"
        "{\"token_ids\":[],\"logprobs\":{\"content\":[1],\"content\":[7,8]},\"logprobs\":{}}],"
        "\"prompt_token_ids\":[]}";
    static const char DOC2[] =
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"content\":[1],\"content\":[7,8]}}]}";
    static const char WANT2[] =
        "{\"choices\":[{\"token_ids\":[],\"logprobs\":{\"content\":[1],\"content\":[]}}]}";
    tw_doc d;
    char *s;
    size_t nb;
    tw_doc_init(&d);
    d.path = g_path;
    CHECK(tw_scan(DOC, sizeof DOC - 1, &d) == TW_OK && d.nchoices == 4, "blank doc");
    nb = d.nblank;
    for (int t = 0; t < 2; t++) /* twice: idempotent */
        for (size_t i = 0; i < d.nchoices + 2; i++) {
            CHECK(tw_blank_field(&d, i, TW_F_LOGPROBS_CONTENT) == TW_OK, "blank %zu", i);
            CHECK(tw_blank_field(&d, i, TW_F_LOGPROBS) == TW_OK, "blank object: no-op");
            CHECK(tw_blank_field(&d, i, TW_F_CL_DATA) == TW_OK, "already blanked: no-op");
            CHECK(tw_blank_field(&d, i, TW_F_TOKEN_IDS) == TW_OK, "already blanked: no-op");
            CHECK(tw_blank_field(&d, i, -1) == TW_OK && tw_blank_field(&d, i, TW_NFIELDS) == TW_OK,
                  "bad field: no-op");
        }
    /* choice 1's content is a string: blanked as a string; choice 3's
       logprobs was replaced by {}: nothing recorded, nothing blanked */
    CHECK(d.nblank == nb + 2, "nblank %zu -> %zu", nb, d.nblank);
    for (size_t i = 1; i < d.nblank; i++)
        CHECK(d.blank[i - 1].end <= d.blank[i].start, "blank list sorted and disjoint");
    s = strip_copy(DOC, sizeof DOC - 1, &d, NULL);
    CHECK(strcmp(s, WANT) == 0, "stripped: %s", s);
    free(s);
    /* the last content occurrence only */
    CHECK(tw_scan(DOC2, sizeof DOC2 - 1, &d) == TW_OK, "doc2");
    CHECK(tw_blank_field(&d, 0, TW_F_LOGPROBS_CONTENT) == TW_OK, "blank doc2");
    s = strip_copy(DOC2, sizeof DOC2 - 1, &d, NULL);
    CHECK(strcmp(s, WANT2) == 0, "doc2 stripped: %s", s);
    free(s);
    /* spans already blanked (the same value) are left alone */
    {
        static const char DOC3[] =
            "{\"choices\":[{\"token_ids\":[1],\"sampling_mask\":[[1],[2]],"
            "\"routed_experts\":\"AAAA\"}]}";
        CHECK(tw_scan(DOC3, sizeof DOC3 - 1, &d) == TW_OK, "doc3");
        nb = d.nblank;
        CHECK(tw_blank_field(&d, 0, TW_F_SAMPLING_MASK) == TW_OK && d.nblank == nb, "same span");
        CHECK(tw_blank_field(&d, 0, TW_F_ROUTED) == TW_OK && d.nblank == nb, "same string span");
    }
    /* a span containing blanked spans replaces them */
    {
        tw_span saved[4];
        size_t bytes;
        CHECK(tw_scan(DOC2, sizeof DOC2 - 1, &d) == TW_OK && d.nblank == 1, "doc2 again");
        /* pretend two spans inside the content were blanked (the list has
           room for 16) */
        {
            size_t cs = d.choice[0].f[TW_F_LOGPROBS_CONTENT].start;
            d.blank[1].start = cs + 1;
            d.blank[1].end = cs + 2;
            d.blank[2].start = cs + 3;
            d.blank[2].end = cs + 4;
            d.nblank = 3;
            d.blank_bytes += 2;
            memcpy(saved, d.blank, sizeof saved);
        }
        bytes = d.blank_bytes;
        CHECK(tw_blank_field(&d, 0, TW_F_LOGPROBS_CONTENT) == TW_OK && d.nblank == 2 &&
                  d.blank_bytes == bytes - 2 + 3,
              "merge: %zu spans, %zu bytes", d.nblank, d.blank_bytes);
        s = strip_copy(DOC2, sizeof DOC2 - 1, &d, NULL);
        CHECK(strcmp(s, WANT2) == 0, "merged stripped: %s", s);
        free(s);
    }
    /* allocation failure: reported, list unchanged */
    {
        size_t bytes;
        CHECK(tw_scan(DOC2, sizeof DOC2 - 1, &d) == TW_OK, "doc2 nomem");
        while (d.nblank < d.blank_cap) { /* full: the insertion must grow */
            d.blank[d.nblank].start = d.blank[d.nblank].end = sizeof DOC2 + d.nblank;
            d.nblank++;
        }
        nb = d.nblank;
        bytes = d.blank_bytes;
        g_fail_after = 0;
        CHECK(tw_blank_field(&d, 0, TW_F_LOGPROBS_CONTENT) == TW_ERR_NOMEM && d.nblank == nb &&
                  d.blank_bytes == bytes,
              "blank nomem");
        g_fail_after = -1;
        CHECK(tw_blank_field(&d, 0, TW_F_LOGPROBS_CONTENT) == TW_OK && d.nblank == nb + 1,
              "blank after nomem");
    }
    tw_doc_free(&d);
    printf("blank_field: content blanked on request, idempotent, nested spans merged\n");
}
