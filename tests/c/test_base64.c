/*
 * Standalone tests for csrc/codecs/tw_base64.c: every available path is compared
 * with a slow reference codec written directly from the rules.
 *
 *   make -C tests/c test        (or see tests/c/Makefile for the build line)
 *   ./test_base64 [random_cases [max_exhaustive_len]]
 *
 * Inputs are placed at the very end of exactly-sized heap blocks and outputs
 * are followed by guard bytes, so out-of-bounds reads show up under
 * ASan/valgrind and out-of-bounds writes as guard failures.
 */
#include "codecs/tw_base64.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TW_CHECK_MAX_REPORTS 30
#define TW_RNG_SEED 0x1234567887654321ull
#include "tw_check.h"

/* ---- reference codec ---- */
static const char ALPHA[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int ref_val(unsigned c)
{
    const char *p;
    if (c == 0) return -1;
    p = strchr(ALPHA, (int)c);
    return p ? (int)(p - ALPHA) : -1;
}

/* Bit-by-bit encoder. */
static size_t ref_encode(const uint8_t *src, size_t n, char *dst)
{
    size_t o = 0, i;
    uint32_t acc = 0;
    int bits = 0;
    for (i = 0; i < n; i++) {
        acc = (acc << 8) | src[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            dst[o++] = ALPHA[(acc >> bits) & 63];
        }
    }
    if (bits > 0) dst[o++] = ALPHA[(acc << (6 - bits)) & 63];
    while (o % 4) dst[o++] = '=';
    return o;
}

/* Decoder for the canonical form: len % 4 == 0, alphabet characters, then
   at most two '='.  Returns the size or -1; expected err_pos transcribed from
   the header's definition. */
static ptrdiff_t ref_decode(const uint8_t *s, size_t len, uint8_t *out,
                            size_t *err_pos)
{
    size_t pads = 0, i, o = 0;
    uint32_t acc = 0;
    int bits = 0, valid;
    while (pads < len && s[len - 1 - pads] == '=') pads++;
    valid = (len % 4 == 0) && pads <= 2;
    for (i = 0; valid && i < len - pads; i++)
        if (ref_val(s[i]) < 0) valid = 0;
    if (!valid) {
        size_t e = len;
        for (i = 0; i < len; i++) {
            int ok = ref_val(s[i]) >= 0;
            if (s[i] == '=') {
                if (i == len - 1) ok = 1;
                if (i == len - 2 && s[len - 1] == '=') ok = 1;
            }
            if (!ok) {
                e = i;
                break;
            }
        }
        *err_pos = e;
        return -1;
    }
    for (i = 0; i < len - pads; i++) {
        acc = (acc << 6) | (uint32_t)ref_val(s[i]);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    return (ptrdiff_t)o;
}

/* ---- harness ---- */
#define GUARD 32
static uint8_t *g_in;   /* input copy at the end of an exact block */
static uint8_t *g_refout;

static const uint8_t *place(const uint8_t *s, size_t len)
{
    uint8_t *p;
    free(g_in);
    g_in = (uint8_t *)malloc(len ? len : 1);
    p = g_in + (len ? 0 : 1);
    if (len) memcpy(p, s, len);
    return p;
}

static int guard_ok(const uint8_t *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (p[i] != 0xA5) return 0;
    return 1;
}

/* tw_b64_check_signed on one path against the reference decoding (ref bytes
   in g_refout, or -1): the same size, and a negative integer found exactly
   where the decoding holds one.  One width per call, in turn (1, 2, 4, 8),
   so that the check costs the suite about one more decode. */
static void check_signed(const uint8_t *s, size_t len, int path, ptrdiff_t ref,
                         const char *what)
{
    static const size_t widths[] = {1, 2, 4, 8};
    static unsigned turn;
    size_t i;
    {
        size_t width = widths[turn++ % 4];
        int negative = -1, want = 0;
        ptrdiff_t r = tw_b64_check_signed((const char *)s, len, width, path, &negative);
        for (i = width - 1; ref > 0 && i < (size_t)ref; i += width)
            want |= g_refout[i] >= 0x80;
        CHECK(r == ref, "%s: path %s len %zu width %zu: check_signed %td != %td", what,
              tw_path_name(path), len, width, r, ref);
        CHECK(negative == (ref >= 0 && want), "%s: path %s len %zu width %zu: negative %d",
              what, tw_path_name(path), len, width, negative);
    }
}

/* Decode s on every path and compare with the reference. */
static void check_decode(const uint8_t *s0, size_t len, const char *what)
{
    const uint8_t *s = place(s0, len);
    size_t ref_err = (size_t)-7, pi;
    ptrdiff_t ref = ref_decode(s, len, g_refout, &ref_err);
    ptrdiff_t cap = tw_b64_decoded_size((const char *)s, len);
    size_t capz = cap > 0 ? (size_t)cap : 0;
    if (ref >= 0) CHECK(cap == ref, "%s: decoded_size %td != %td", what, cap, ref);
    for (pi = 0; pi < (size_t)g_npaths; pi++) {
        int path = g_paths[pi];
        size_t err = (size_t)-3;
        ptrdiff_t r;
        uint8_t *out = (uint8_t *)malloc(capz + GUARD);
        memset(out, 0xA5, capz + GUARD);
        r = tw_b64_decode((const char *)s, len, cap >= 0 ? out : NULL, capz, path, &err);
        CHECK(r == ref, "%s: path %s len %zu: ret %td != ref %td", what,
              tw_path_name(path), len, r, ref);
        if (r >= 0 && r == ref)
            CHECK(memcmp(out, g_refout, (size_t)r) == 0,
                  "%s: path %s len %zu: output differs", what,
                  tw_path_name(path), len);
        if (r < 0 && ref < 0)
            CHECK(err == ref_err, "%s: path %s len %zu: err_pos %zu != %zu",
                  what, tw_path_name(path), len, err, ref_err);
        CHECK(guard_ok(out + capz, GUARD), "%s: path %s len %zu: write past capacity",
              what, tw_path_name(path), len);
        if (ref < 0 && cap < 0)
            CHECK(guard_ok(out, capz + GUARD), "%s: wrote on -1 size", what);
        free(out);
        check_signed(s, len, path, ref, what);
    }
    if (ref < 0 && len % 4 != 0) CHECK(ref_err <= len, "ref err");
    if (ref < 0 && len % 4 == 0) CHECK(ref_err < len, "%s: ref err_pos == len on len%%4==0", what);
}

/* Encode on every path (source at an offset within a block) and compare. */
static void check_encode(const uint8_t *data, size_t n)
{
    size_t elen = tw_b64_encoded_size(n), pi;
    char *ref = (char *)malloc(elen + 1);
    uint8_t *src = (uint8_t *)malloc(n ? n : 1);
    size_t rl = ref_encode(data, n, ref);
    CHECK(rl == elen, "encoded_size(%zu) = %zu != %zu", n, elen, rl);
    if (n) memcpy(src, data, n);
    for (pi = 0; pi < (size_t)g_npaths; pi++) {
        int path = g_paths[pi];
        char *out = (char *)malloc(elen + GUARD);
        size_t r;
        ptrdiff_t dr;
        uint8_t *back = (uint8_t *)malloc(n + 1);
        memset(out, 0xA5, elen + GUARD);
        r = tw_b64_encode(src, n, out, path);
        CHECK(r == elen, "encode path %s n %zu ret %zu", tw_path_name(path), n, r);
        CHECK(memcmp(out, ref, elen) == 0, "encode path %s n %zu output differs",
              tw_path_name(path), n);
        CHECK(guard_ok((uint8_t *)out + elen, GUARD), "encode path %s n %zu overflow",
              tw_path_name(path), n);
        {
            const uint8_t *s = place((const uint8_t *)out, elen);
            size_t err = 0;
            dr = tw_b64_decode((const char *)s, elen, back, n, path, &err);
            CHECK(dr == (ptrdiff_t)n && (n == 0 || memcmp(back, data, n) == 0),
                  "roundtrip path %s n %zu: %td", tw_path_name(path), n, dr);
        }
        free(back);
        free(out);
    }
    free(ref);
    free(src);
}

static const uint8_t SPECIAL[] = {
    '=', '=', '=', 0, 0x80, 0xFF, 0xAB, 0xAF, 0xC1, 0xE1, 0xB0, '@', '[', '`',
    '{', ':', '/', '+', ',', '-', '.', '_', '*', ' ', '\n', '\r', '\t',
    'A', 'Z', 'a', 'z', '0', '9', 0x7F, 0x2A, 0x2E, 0x3B, 0x5C, 0x7C, 0xFE};

static uint8_t rnd_byte(void)
{
    switch (rndn(4)) {
    case 0: return (uint8_t)rnd();
    case 1: return (uint8_t)ALPHA[rndn(64)];
    default: return SPECIAL[rndn(sizeof SPECIAL)];
    }
}

int main(int argc, char **argv)
{
    long random_cases = argc > 1 ? atol(argv[1]) : 2000000;
    size_t max_ex = argc > 2 ? (size_t)atol(argv[2]) : 200;
    uint8_t data[4096], buf[8192];
    char enc[8192];
    char best[32];
    size_t n, pos, L;
    int b;
    long k;

    g_refout = (uint8_t *)malloc(8192);
    snprintf(best, sizeof best, " (best %s)", tw_path_name(tw_path_best()));
    paths_print(best);

    /* API basics. */
    CHECK(tw_path_available(TW_PATH_AUTO) && tw_path_available(TW_PATH_SCALAR), "avail");
    CHECK(!tw_path_available(99) && !tw_path_available(-1), "avail unknown");
    CHECK(strcmp(tw_path_name(TW_PATH_SCALAR), "scalar") == 0, "name");
    CHECK(strcmp(tw_path_name(TW_PATH_AVX2), "avx2") == 0, "name");
    CHECK(strcmp(tw_path_name(TW_PATH_AVX512), "avx512") == 0, "name");
    CHECK(strcmp(tw_path_name(TW_PATH_NEON), "neon") == 0, "name");
    CHECK(tw_path_available(tw_path_best()), "best available");
    CHECK(tw_b64_decoded_size("", 0) == 0, "ds0");
    CHECK(tw_b64_decoded_size("AB==", 4) == 1, "ds1");
    CHECK(tw_b64_decoded_size("ABC=", 4) == 2, "ds2");
    CHECK(tw_b64_decoded_size("A===", 4) == -1, "ds3");
    CHECK(tw_b64_decoded_size("====", 4) == -1, "ds4");
    CHECK(tw_b64_decoded_size("ABC", 3) == -1, "ds5");
    CHECK(tw_b64_decoded_size("ABCDEFGH", 8) == 6, "ds6");
    CHECK(tw_b64_encoded_size(0) == 0 && tw_b64_encoded_size(1) == 4 &&
              tw_b64_encoded_size(3) == 4 && tw_b64_encoded_size(4) == 8, "es");
    {
        uint8_t o[4];
        size_t e = 0;
        CHECK(tw_b64_decode("QR==", 4, o, sizeof o, 0, &e) == 1 && o[0] == 'A', "QR==");
        CHECK(tw_b64_decode("", 0, NULL, 0, 0, &e) == 0, "empty");
        CHECK(tw_b64_decode("AB=", 3, NULL, 0, 0, &e) == -1 && e == 3, "AB=");
        CHECK(tw_b64_decode("AB=C", 4, o, sizeof o, 0, &e) == -1 && e == 2, "AB=C");
        CHECK(tw_b64_decode("A===", 4, NULL, 0, 0, &e) == -1 && e == 1, "A===");
        CHECK(tw_b64_decode("AB!=", 4, o, sizeof o, 0, &e) == -1 && e == 2, "AB!=");
        CHECK(tw_b64_decode("AB\n=", 4, o, sizeof o, 99, &e) == -1 && e == 2, "path 99");
        /* The capacity bounds every write, whatever the padding says. */
        memset(o, 0x5A, sizeof o);
        CHECK(tw_b64_decode("QUJD", 4, o, 2, 0, &e) == -1 && e == 4 && o[2] == 0x5A, "cap 2 of 3");
        CHECK(tw_b64_decode("QUI=", 4, o, 1, 0, &e) == -1 && o[1] == 0x5A, "cap 1 of 2");
        CHECK(tw_b64_decode("QUJDQUJD", 8, o, 3, 0, &e) == -1 && o[3] == 0x5A, "cap 3 of 6");
        CHECK(tw_b64_decode("QUJD", 4, o, 3, 0, &e) == 3, "cap exact");
    }

    /* 1. Encode / round trip, lengths 0..200 and a few larger ones. */
    for (n = 0; n <= 200; n++) {
        for (k = 0; k < 8; k++) {
            for (pos = 0; pos < n; pos++)
                data[pos] = k == 0 ? 0 : k == 1 ? 0xFF : (uint8_t)rnd();
            check_encode(data, n);
        }
    }
    for (k = 0; k < 3000; k++) {
        n = rndn(4096);
        for (pos = 0; pos < n; pos++) data[pos] = (uint8_t)rnd();
        check_encode(data, n);
    }
    printf("encode/roundtrip: %llu checks, %llu failures\n", g_checks, g_failures);

    /* 2. Every position x every byte value, valid strings of data length
          0..200; plus every prefix and a few suffix extensions. */
    for (n = 0; n <= max_ex && n <= 200; n++) {
        for (pos = 0; pos < n; pos++) data[pos] = (uint8_t)rnd();
        L = ref_encode(data, n, enc);
        memcpy(buf, enc, L);
        check_decode(buf, L, "valid");
        for (pos = 0; pos < L; pos++) {
            for (b = 0; b < 256; b++) {
                buf[pos] = (uint8_t)b;
                check_decode(buf, L, "subst");
            }
            buf[pos] = (uint8_t)enc[pos];
        }
        for (pos = 0; pos < L; pos++) check_decode(buf, pos, "prefix");
        for (b = 0; b < (int)sizeof SPECIAL; b++) {
            size_t extra;
            for (extra = 1; extra <= 4; extra++) {
                memset(buf + L, SPECIAL[b], extra);
                check_decode(buf, L + extra, "suffix");
            }
        }
    }
    printf("exhaustive substitution: %llu checks, %llu failures\n", g_checks, g_failures);

    /* 3. Random differential: long strings with 0..3 mutations placed in the
          first 300 characters, near the end, or anywhere. */
    for (k = 0; k < random_cases; k++) {
        int m, muts;
        switch (rndn(4)) {
        case 0: n = rndn(64); break;
        case 1: n = rndn(800); break;
        default: n = 700 + rndn(200); break;
        }
        for (pos = 0; pos < n; pos++) data[pos] = (uint8_t)rnd();
        L = ref_encode(data, n, enc);
        memcpy(buf, enc, L);
        muts = (int)rndn(4);
        for (m = 0; m < muts && L > 0; m++) {
            size_t at;
            switch (rndn(3)) {
            case 0: at = rndn(L < 300 ? L : 300); break;
            case 1: at = L - 1 - rndn(L < 8 ? L : 8); break;
            default: at = rndn(L); break;
            }
            buf[at] = rnd_byte();
        }
        if (rndn(16) == 0 && L > 0) L -= 1 + rndn(L < 3 ? L : 3);
        if (rndn(32) == 0) {
            size_t extra = 1 + rndn(4);
            memset(buf + L, rndn(2) ? '=' : rnd_byte(), extra);
            L += extra;
        }
        check_decode(buf, L, "random");
    }
    printf("random differential (%ld cases): %llu checks, %llu failures\n",
           random_cases, g_checks, g_failures);

    /* 4. Past tw_b64_check_signed's 4096-character block: encodings that end just
          before, at and after the block's end, and span two blocks, with bytes below
          0x80 but one high byte or one bad character in the first or second block. */
    {
        static const size_t sizes[] = {3069, 3070, 3071, 3072, 3073, 3075, 3500, 4096};
        size_t si;
        int variant, turn;
        for (si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            n = sizes[si];
            for (variant = 0; variant < 5; variant++) {
                for (pos = 0; pos < n; pos++) data[pos] = (uint8_t)(rnd() & 0x7F);
                if (variant == 1) data[rndn(n < 3072 ? n : 3072)] |= 0x80;
                if (variant == 2) data[n > 3072 ? 3072 + rndn(n - 3072) : n - 1] |= 0x80;
                L = ref_encode(data, n, enc);
                memcpy(buf, enc, L);
                if (variant == 3) buf[rndn(L < 4096 ? L : 4096)] = '*';
                if (variant == 4) buf[L > 4096 ? 4096 + rndn(L - 4096) : L - 1] = '*';
                for (turn = 0; turn < 4; turn++) check_decode(buf, L, "two blocks");
            }
        }
    }
    printf("across the check's blocks: %llu checks, %llu failures\n", g_checks, g_failures);

    free(g_in);
    free(g_refout);
    if (g_failures) {
        printf("FAILED: %llu of %llu checks\n", g_failures, g_checks);
        return 1;
    }
    printf("OK: %llu checks\n", g_checks);
    return 0;
}
