/*
 * Standalone tests for csrc/rules/tw_validate.c's row checks: tw_compact_rows, tw_support_rows
 * and tw_compact_values_bad_on on every path this CPU has, each compared with TW_PATH_SCALAR (the
 * portable hash table and pairwise / sorted repeat checks) over random responses built to hit every verdict: ids
 * from small alphabets (repeats everywhere), values from a small set (equal and unequal
 * repeats, both zeros, infinities, the sentinel; no NaN, which the callers reject first
 * with tw_compact_values_bad), rows around the vector limits (32 compact
 * entries, 48 support entries), sampled ids present, absent, negative and out of range.
 *
 *   test_validate [ROUNDS]
 */
#include "tw_check.h"
#include "base/tw_cpu.h"
#include "tw_flood.h"
#include "rules/tw_validate.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long g_path_checks[TW_PATH_LAST + 1];
/* How the scalar verdicts came out: compact rows ok / disagree / missing, supports ok / bad,
   and the rows checked before the verdict (so a test cannot end at row 0 unnoticed). */
static unsigned long long g_verdicts[5], g_rows;

enum { MAXT = 24, MAXROW = 70 };

/* A row length: mostly near the vector limits, sometimes anything up to MAXROW. */
static size_t row_len(size_t limit)
{
    switch (rndn(4)) {
    case 0: return rndn(MAXROW + 1);
    case 1: return rndn(6);
    default: return limit - 4 + rndn(9);
    }
}

static float value(unsigned kinds)
{
    static const float SET[] = {-1.5f, -0.25f, -2.0f, 0.0f, -0.0f, -9999.0f, 1e-6f, -1e30f};
    switch (rndn(kinds)) {
    case 0: return -INFINITY;
    case 1: return INFINITY;
    default: return SET[rndn(sizeof SET / sizeof SET[0])];
    }
}

static void test_compact(long rounds)
{
    static uint32_t ids[MAXT * MAXROW];
    static float vals[MAXT * MAXROW], out[MAXT], want[MAXT];
    int64_t offs[MAXT + 1], sampled[MAXT];
    for (long r = 0; r < rounds; r++) {
        size_t n = 1 + rndn(MAXT), o = 0;
        /* a small alphabet repeats ids in most rows; a wide one (every fifth round) in few, and
           then the ids of some responses differ in their high 16 bits only (the AVX-512 path
           compares a row's tail by the low 16 bits first) */
        uint32_t alpha = (uint32_t)(1 + rndn(r % 5 == 4 ? 1u << 20 : r % 3 == 0 ? 4 : 64));
        uint32_t base = rndn(4) == 0 ? UINT32_MAX - 70 : (uint32_t)rndn(1000);
        uint32_t high = r % 5 == 4 && rndn(2) ? 3 : 0;
        unsigned kinds = rndn(8) == 0 ? 10 : 400; /* infinities in some responses only */
        /* rows before `fault` follow the rules, row `fault` (if any) breaks one by chance */
        size_t fault = rndn(n + 1);
        offs[0] = 0;
        for (size_t t = 0; t < n; t++) {
            /* every seventh response mostly of one-entry rows (a sampled-only response's,
               read in runs by rows_single), the others of rows of every length */
            size_t len = r % 7 == 6 && rndn(8) ? 1 : row_len(32);
            int valid = t < fault;
            for (size_t i = 0; i < len; i++) {
                ids[o + i] = base + (high ? (uint32_t)rndn(8) + ((uint32_t)rndn(high + 1) << 16) : (uint32_t)rndn(alpha));
                vals[o + i] = value(kinds);
                for (size_t j = 0; j < i; j++)
                    if (ids[o + j] == ids[o + i] && (valid || rndn(4) != 0))
                        vals[o + i] = vals[o + j];
            }
            if (valid && len) {
                size_t at = rndn(len);
                for (size_t i = 0; i < len; i++)
                    if (ids[o + i] == ids[o + at] && vals[o + i] == -9999.0f) vals[o + i] = -0.5f;
                sampled[t] = (int64_t)ids[o + at];
                o += len;
                offs[t + 1] = (int64_t)o;
                continue;
            }
            switch (rndn(8)) {
            case 0: sampled[t] = -1 - (int64_t)rndn(3); break;
            case 1: sampled[t] = (int64_t)UINT32_MAX + 1 + (int64_t)rndn(3); break;
            case 2: sampled[t] = (int64_t)(base + alpha); break;
            default: sampled[t] = len ? (int64_t)ids[o + rndn(len)] : 0; break;
            }
            o += len;
            offs[t + 1] = (int64_t)o;
        }
        int kind0 = -1;
        memset(want, 0x5A, sizeof want);
        ptrdiff_t r0 = tw_compact_rows(ids, vals, offs, n, sampled, want, &kind0, TW_PATH_SCALAR);
        g_verdicts[r0 < 0 ? 0 : kind0 == TW_ROW_REPEAT_DISAGREE ? 1 : 2]++;
        g_rows += r0 < 0 ? n : (size_t)r0 + 1;
        for (int p = 0; p < g_npaths; p++) {
            int kind = -1;
            unsigned long long before = g_checks;
            memset(out, 0x5A, sizeof out);
            ptrdiff_t got = tw_compact_rows(ids, vals, offs, n, sampled, out, &kind, g_paths[p]);
            CHECK(got == r0 && (got < 0 || kind == kind0), "compact round %ld path %s: row %td kind %d, want %td %d",
                  r, tw_path_name(g_paths[p]), got, kind, r0, kind0);
            size_t upto = r0 < 0 ? n : (size_t)r0;
            CHECK(memcmp(out, want, upto * sizeof *out) == 0, "compact round %ld path %s: sampled values differ", r,
                  tw_path_name(g_paths[p]));
            g_path_checks[g_paths[p]] += g_checks - before;
        }
        /* tw_compact_rows_valid: every rule (the values rule too) on every path, then again
           with one value of a row put off the values rule (NaN, above 1e-6, -inf) */
        size_t count = (size_t)offs[n];
        for (int poison = 0; poison < 2; poison++) {
            size_t at = count ? rndn(count) : 0;
            float keep = count ? vals[at] : 0.0f;
            if (poison && count) {
                static const float OFF[] = {NAN, 2e-6f, -INFINITY, 1.0f};
                vals[at] = OFF[rndn(4)];
            }
            int valid = tw_compact_values_bad(vals, count) < 0 &&
                        tw_compact_rows(ids, vals, offs, n, sampled, want, &kind0, TW_PATH_SCALAR) < 0;
            for (int p = 0; p < g_npaths; p++) {
                unsigned long long before = g_checks;
                memset(out, 0x5A, sizeof out);
                ptrdiff_t got = tw_compact_rows_valid(ids, vals, offs, n, sampled, out, g_paths[p]);
                CHECK((got < 0) == valid && got < (ptrdiff_t)n, "valid round %ld poison %d path %s: %td, want %s", r,
                      poison, tw_path_name(g_paths[p]), got, valid ? "valid" : "not");
                CHECK(!valid || memcmp(out, want, n * sizeof *out) == 0,
                      "valid round %ld path %s: sampled values differ", r, tw_path_name(g_paths[p]));
                g_path_checks[g_paths[p]] += g_checks - before;
            }
            if (count) vals[at] = keep;
        }
    }
}

static void test_support(long rounds)
{
    static int32_t vals[MAXT * MAXROW];
    int64_t offs[MAXT + 1], sampled[MAXT];
    for (long r = 0; r < rounds; r++) {
        size_t n = 1 + rndn(MAXT), o = 0;
        int32_t base = rndn(4) == 0 ? INT32_MAX - 100 : rndn(4) == 0 ? INT32_MIN : (int32_t)rndn(1000) - 500;
        size_t fault = rndn(n + 1); /* as in test_compact */
        offs[0] = 0;
        for (size_t t = 0; t < n; t++) {
            size_t len = row_len(48);
            int valid = t < fault;
            /* distinct ids (a permutation step) unless a repeat is planted */
            uint32_t step = 1 + 2 * (uint32_t)rndn(50);
            if (valid && len == 0) len = 1;
            for (size_t i = 0; i < len; i++) vals[o + i] = (int32_t)((uint32_t)base + step * (uint32_t)i);
            if (!valid && len > 1 && rndn(3) == 0) vals[o + rndn(len)] = vals[o + rndn(len)];
            if (valid) {
                sampled[t] = vals[o + rndn(len)];
                o += len;
                offs[t + 1] = (int64_t)o;
                continue;
            }
            switch (rndn(8)) {
            case 0: sampled[t] = (int64_t)INT32_MAX + 1 + (int64_t)rndn(3); break;
            case 1: sampled[t] = (int64_t)INT32_MIN - 1 - (int64_t)rndn(3); break;
            case 2: sampled[t] = (int64_t)base - 1; break;
            default: sampled[t] = len ? vals[o + rndn(len)] : 0; break;
            }
            if (rndn(16) == 0 && len) /* the same id, wider: must not match */
                sampled[t] = (int64_t)vals[o] + ((int64_t)1 << 32);
            o += len;
            offs[t + 1] = (int64_t)o;
        }
        int nomem0 = 0, absent = (int)rndn(2); /* kept_tokens: an empty row is an absent one */
        ptrdiff_t r0 = tw_support_rows(vals, offs, n, sampled, absent, &nomem0, TW_PATH_SCALAR);
        CHECK(!nomem0, "support round %ld: nomem", r);
        g_verdicts[r0 < 0 ? 3 : 4]++;
        g_rows += r0 < 0 ? n : (size_t)r0 + 1;
        for (int p = 0; p < g_npaths; p++) {
            int nomem = 0;
            unsigned long long before = g_checks;
            ptrdiff_t got = tw_support_rows(vals, offs, n, sampled, absent, &nomem, g_paths[p]);
            CHECK(got == r0 && !nomem, "support round %ld path %s: row %td, want %td", r, tw_path_name(g_paths[p]),
                  got, r0);
            g_path_checks[g_paths[p]] += g_checks - before;
        }
    }
}

/* tw_hash.c: SipHash against the published SipHash-2-4 vectors (key 00..0f, message
   00 01 02 ...), and a secret set once. */
static void test_hash(void)
{
    uint8_t key[16], msg[16], other[32];
    for (int i = 0; i < 16; i++) key[i] = msg[i] = (uint8_t)i;
    CHECK(tw_siphash(key, msg, 0, 2, 4) == UINT64_C(0x726fdb47dd0e0e31), "siphash-2-4 of 0 bytes");
    CHECK(tw_siphash(key, msg, 1, 2, 4) == UINT64_C(0x74f839c593dc67fd), "siphash-2-4 of 1 byte");
    CHECK(tw_siphash(key, msg, 8, 2, 4) == UINT64_C(0x93f5f5799a932462), "siphash-2-4 of 8 bytes");
    CHECK(tw_siphash(key, msg, 15, 2, 4) == UINT64_C(0xa129ca6149be45e5), "siphash-2-4 of 15 bytes");
    uint64_t words[4];
    memcpy(words, tw_hash_tab[3] + 250, sizeof words);
    memset(other, 0x77, sizeof other);
    CHECK(tw_hash_seed(other) == 0, "a second seed is refused");
    CHECK(memcmp(words, tw_hash_tab[3] + 250, sizeof words) == 0, "the secret is set once");
    CHECK((words[0] | words[1] | words[2] | words[3]) != 0, "the tabulation words are set");
    CHECK(tw_hash_bytes(msg, 15) != tw_hash_bytes(msg, 14), "string hashes differ");
}

/* Rows of ids that all collide under the fixed hashes the tables once had (tw_flood.h):
   the same verdicts on every path as any other rows. */
static void test_flood(void)
{
    enum { FLOOD = 5000 };
    uint32_t *ids = malloc((FLOOD + 1) * sizeof *ids), *wide = flood_ids64(FLOOD);
    float *vals = malloc((FLOOD + 1) * sizeof *vals);
    if (!ids || !vals) exit(2);
    for (int set = 0; set < 2; set++) {
        for (size_t j = 0; j < FLOOD; j++) {
            ids[j] = set ? wide[j] : flood_id32((uint32_t)j);
            vals[j] = -(float)(j + 1) / FLOOD;
        }
        const int64_t offs[] = {0, FLOOD}, longer[] = {0, FLOOD + 1};
        const int64_t sampled[] = {(int64_t)ids[FLOOD / 2]}, absent[] = {(int64_t)ids[FLOOD - 1] + 1};
        for (int p = 0; p < g_npaths; p++) {
            int kind = -1, path = g_paths[p];
            float out = 0;
            CHECK(tw_compact_rows(ids, vals, offs, 1, sampled, &out, &kind, path) == -1 &&
                      out == vals[FLOOD / 2], "colliding row %d, path %s", set, tw_path_name(path));
            CHECK(tw_compact_rows(ids, vals, offs, 1, absent, &out, &kind, path) == 0 &&
                      kind == TW_ROW_MISSING_SAMPLED, "colliding row %d without the sampled id, path %s",
                  set, tw_path_name(path));
            ids[FLOOD] = ids[FLOOD / 3];
            vals[FLOOD] = vals[FLOOD / 3];
            CHECK(tw_compact_rows(ids, vals, longer, 1, sampled, &out, &kind, path) == -1,
                  "colliding row %d with an agreeing repeat, path %s", set, tw_path_name(path));
            vals[FLOOD] = -2.0f;
            CHECK(tw_compact_rows(ids, vals, longer, 1, sampled, &out, &kind, path) == 0 &&
                      kind == TW_ROW_REPEAT_DISAGREE, "colliding row %d with a disagreeing repeat, path %s",
                  set, tw_path_name(path));
        }
    }
    free(ids);
    free(vals);
    free(wide);
}

/* Fixed cases: verdicts that do not depend on the path. */
static void test_fixed(void)
{
    static const uint32_t ids[] = {5, 7, 5, 9};
    static const float agree[] = {-1.0f, -2.0f, -1.0f, -3.0f}, differ[] = {-1.0f, -2.0f, -1.5f, -3.0f};
    static const float zeros[] = {0.0f, -2.0f, -0.0f, -3.0f};
    const int64_t offs[] = {0, 4}, s7[] = {7}, s8[] = {8};
    for (int p = 0; p < g_npaths; p++) {
        int kind = -1, path = g_paths[p];
        float out = 0;
        CHECK(tw_compact_rows(ids, agree, offs, 1, s7, &out, &kind, path) == -1 && out == -2.0f,
              "agree, path %s", tw_path_name(path));
        CHECK(tw_compact_rows(ids, differ, offs, 1, s7, &out, &kind, path) == 0 && kind == TW_ROW_REPEAT_DISAGREE,
              "differ, path %s", tw_path_name(path));
        CHECK(tw_compact_rows(ids, zeros, offs, 1, s7, &out, &kind, path) == -1, "zeros, path %s", tw_path_name(path));
        /* a NaN equals nothing (!=, as the table compares): its repeat disagrees on every path */
        const float nan_first[] = {NAN, -2.0f, -1.0f, -3.0f}, nan_both[] = {NAN, -2.0f, NAN, -3.0f};
        CHECK(tw_compact_rows(ids, nan_first, offs, 1, s7, &out, &kind, path) == 0 && kind == TW_ROW_REPEAT_DISAGREE,
              "NaN repeat, path %s", tw_path_name(path));
        CHECK(tw_compact_rows(ids, nan_both, offs, 1, s7, &out, &kind, path) == 0 && kind == TW_ROW_REPEAT_DISAGREE,
              "NaN repeats, path %s", tw_path_name(path));
        CHECK(tw_compact_rows(ids, agree, offs, 1, s8, &out, &kind, path) == 0 && kind == TW_ROW_MISSING_SAMPLED,
              "missing, path %s", tw_path_name(path));
        int nomem = 0;
        const int32_t sup[] = {3, 1, 2, 3};
        const int64_t soff[] = {0, 3, 4}, ss[] = {2, 3}, miss[] = {4, 3};
        CHECK(tw_support_rows(sup, soff, 2, ss, 0, &nomem, path) == -1, "support ok, path %s", tw_path_name(path));
        CHECK(tw_support_rows(sup, soff, 2, miss, 0, &nomem, path) == 0, "support missing, path %s", tw_path_name(path));
        /* the sampled id 0, not in a row shorter than a vector (whose lanes past it load as 0) */
        const int64_t zero_s[] = {0};
        CHECK(tw_support_rows(sup, soff, 1, zero_s, 0, &nomem, path) == 0, "support without id 0, path %s",
              tw_path_name(path));
        const int64_t rep_off[] = {0, 4};
        CHECK(tw_support_rows(sup, rep_off, 1, ss, 0, &nomem, path) == 0, "support repeat, path %s",
              tw_path_name(path));
        /* an empty row between two good ones: absent (kept_tokens) or bad (sampling_mask) */
        const int64_t gap_off[] = {0, 3, 3, 4}, gap_s[] = {2, 9, 3};
        CHECK(tw_support_rows(sup, gap_off, 3, gap_s, 1, &nomem, path) == -1, "absent row, path %s",
              tw_path_name(path));
        CHECK(tw_support_rows(sup, gap_off, 3, gap_s, 0, &nomem, path) == 1, "empty row, path %s",
              tw_path_name(path));
    }
}

/* tw_first_at_or_above, each width, against a plain loop: random arrays around the block
   size, the first bad value anywhere (or none), limits at the edges of the width, and signed
   values read as unsigned (a negative one is at or above half the range). */
static void test_at_or_above(long rounds)
{
    enum { MAXN = 300 };
    static uint32_t v32[MAXN];
    static uint16_t v16[MAXN];
    static uint8_t v8[MAXN];
    static const uint32_t LIMITS[] = {0, 1, 7, 128, 255, 256, 32768, 65535, 65536, 0x80000000u, 0xFFFFFFFFu};
    for (long r = 0; r < rounds; r++) {
        size_t n = rndn(4) ? rndn(MAXN + 1) : 60 + rndn(10);
        uint32_t limit = LIMITS[rndn(sizeof LIMITS / sizeof LIMITS[0])], top = 1 + rndn(limit ? limit : 1);
        for (size_t i = 0; i < n; i++)
            v32[i] = rndn(8) ? (uint32_t)rndn(top) : (uint32_t)rnd();
        if (n && rndn(2))
            v32[rndn(n)] = rndn(2) ? limit : 0xFFFFFFFFu; /* at the limit, or -1 read as unsigned */
        for (size_t i = 0; i < n; i++) {
            v16[i] = (uint16_t)v32[i];
            v8[i] = (uint8_t)v32[i];
        }
        ptrdiff_t w32 = -1, w16 = -1, w8 = -1;
        for (size_t i = n; i-- > 0;) {
            if (v32[i] >= limit) w32 = (ptrdiff_t)i;
            if (v16[i] >= limit) w16 = (ptrdiff_t)i;
            if (v8[i] >= limit) w8 = (ptrdiff_t)i;
        }
        CHECK(tw_first_at_or_above(v32, n, 4, limit) == w32, "at_or_above u32 n %zu limit %u", n, limit);
        CHECK(tw_first_at_or_above(v16, n, 2, limit) == w16, "at_or_above u16 n %zu limit %u", n, limit);
        CHECK(tw_first_at_or_above(v8, n, 1, limit) == w8, "at_or_above u8 n %zu limit %u", n, limit);
    }
    const int32_t signed32[] = {3, 5, -1, 9};
    const int16_t signed16[] = {3, -2, 5};
    CHECK(tw_first_at_or_above(signed32, 4, 4, 0x80000000u) == 2, "int32 -1 at or above 2^31");
    CHECK(tw_first_at_or_above(signed32, 4, 4, 5) == 1, "int32 5 at or above 5");
    CHECK(tw_first_at_or_above(signed16, 3, 2, 0x8000u) == 1, "int16 -2 at or above 2^15");
    CHECK(tw_first_at_or_above(signed16, 3, 8, 1) == -1, "no other width");
}

/* tw_compact_values_bad_on on every path against the scalar loop: each bad kind at each
   offset of arrays around the blocks of 32, then random arrays with a few bad values. */
static void test_values_bad(long rounds)
{
    static float v[200];
    const float bad[] = {NAN, INFINITY, -INFINITY, 2e-6f, nextafterf(1e-6f, 1.0f), 1.0f};
    const float good[] = {-1.5f, -0.0f, 0.0f, 1e-6f, -9999.0f, -1e30f, 1e-40f, -1e-40f};
    for (size_t n = 0; n <= 130; n++) {
        for (size_t i = 0; i < n; i++) v[i] = good[i % (sizeof good / sizeof good[0])];
        for (int p = 0; p < g_npaths; p++)
            CHECK(tw_compact_values_bad_on(v, n, g_paths[p]) == -1, "values n %zu, path %s: a bad value found", n,
                  tw_path_name(g_paths[p]));
        for (size_t at = 0; at < n; at++)
            for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
                float was = v[at];
                v[at] = bad[b];
                for (int p = 0; p < g_npaths; p++)
                    CHECK(tw_compact_values_bad_on(v, n, g_paths[p]) == (ptrdiff_t)at,
                          "values n %zu, bad %zu at %zu, path %s", n, b, at, tw_path_name(g_paths[p]));
                v[at] = was;
            }
    }
    for (long r = 0; r < rounds; r++) {
        size_t n = rndn(sizeof v / sizeof v[0] + 1);
        for (size_t i = 0; i < n; i++)
            v[i] = rndn(40) ? good[rndn(sizeof good / sizeof good[0])] : bad[rndn(sizeof bad / sizeof bad[0])];
        ptrdiff_t want = tw_compact_values_bad_on(v, n, TW_PATH_SCALAR);
        for (int p = 0; p < g_npaths; p++) {
            unsigned long long before = g_checks;
            CHECK(tw_compact_values_bad_on(v, n, g_paths[p]) == want, "values round %ld path %s", r,
                  tw_path_name(g_paths[p]));
            g_path_checks[g_paths[p]] += g_checks - before;
        }
    }
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
    paths_print(NULL);
    flood_seed();
    test_hash();
    test_flood();
    test_fixed();
    test_compact(rounds);
    test_support(rounds);
    test_at_or_above(rounds);
    test_values_bad(rounds);
    printf("verdicts: compact %llu ok, %llu disagree, %llu missing; support %llu ok, %llu bad; %llu rows\n",
           g_verdicts[0], g_verdicts[1], g_verdicts[2], g_verdicts[3], g_verdicts[4], g_rows);
    for (int p = 0; p < g_npaths; p++)
        printf("path %s: %llu differential checks\n", tw_path_name(g_paths[p]), g_path_checks[g_paths[p]]);
    return checks_done();
}
