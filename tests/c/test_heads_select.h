/*
 * Head selection: the edge cases, the walks across the mass and normalization thresholds,
 * and random responses against the reference.
 * Part of test_heads.c, which includes this file after its harness; not a program of its own.
 */

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
