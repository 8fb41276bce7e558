/*
 * Standalone tests for csrc/tw_pad.c (the batch path's padded blocks): tw_pad_rows,
 * tw_ragged_lengths and tw_pad_ragged against an item-by-item reference written here, on
 * random rows of every item size the callers use (1, 2, 4, 8 bytes) and odd ones (3, 12),
 * fills of one repeated byte and of mixed bytes, rows of every length up to the width and
 * past it, runs of full-width tokens, offsets that start past 0, and offsets that fall, start
 * below 0 or pass the values at a random place.
 *
 *   test_pad [ROUNDS]
 */
#include "tw_check.h"
#include "base/tw_pad.h"

#include <string.h>

enum { MAXROWS = 6, MAXTOK = 9, MAXW = 7, MAXITEM = 12 };

static const size_t ITEMS[] = {1, 2, 4, 8, 3, 12};

static void random_fill(uint8_t *fill, size_t itemsize)
{
    int same = rndn(2);
    uint8_t b = (uint8_t)rnd();
    for (size_t i = 0; i < itemsize; i++)
        fill[i] = same ? b : (uint8_t)rnd();
}

/* Each item of dst at (row, col) as the reference has it: the source item, or the fill. */
static int same_item(const uint8_t *got, const uint8_t *want, size_t itemsize)
{
    return memcmp(got, want, itemsize) == 0;
}

static void test_rows(void)
{
    size_t itemsize = ITEMS[rndn(sizeof ITEMS / sizeof *ITEMS)], rows = rndn(MAXROWS + 1), width = rndn(MAXW + 1);
    uint8_t fill[MAXITEM], src[MAXROWS][(MAXW + 2) * MAXITEM], dst[MAXROWS * MAXW * MAXITEM + 1];
    const void *ptrs[MAXROWS] = {0};
    int64_t lengths[MAXROWS] = {0};
    ptrdiff_t too_long = -1;
    random_fill(fill, itemsize);
    for (size_t r = 0; r < rows; r++) {
        lengths[r] = (int64_t)rndn(width + 2); /* now and then past the width */
        if ((size_t)lengths[r] > width && too_long < 0)
            too_long = (ptrdiff_t)r;
        for (size_t i = 0; i < (size_t)lengths[r] * itemsize; i++) /* items back to back */
            src[r][i] = (uint8_t)rnd();
        ptrs[r] = src[r];
    }
    ptrdiff_t bad = tw_pad_rows(rows, ptrs, lengths, itemsize, width, fill, dst);
    CHECK(bad == too_long, "tw_pad_rows: %td, want %td", bad, too_long);
    if (too_long >= 0)
        return;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < width; i++) {
            const uint8_t *want = i < (size_t)lengths[r] ? src[r] + i * itemsize : fill;
            CHECK(same_item(dst + (r * width + i) * itemsize, want, itemsize),
                  "tw_pad_rows: row %zu item %zu (item size %zu)", r, i, itemsize);
        }
}

static void test_ragged(void)
{
    size_t itemsize = ITEMS[rndn(sizeof ITEMS / sizeof *ITEMS)], rows = rndn(MAXROWS + 1);
    size_t tokens = rndn(MAXTOK + 1), width = rndn(MAXW + 1);
    enum { MAXVAL = 4 + MAXTOK * (MAXW + 1) + 4 };
    uint8_t fill[MAXITEM], values[MAXROWS][MAXVAL * MAXITEM], dst[MAXROWS * MAXTOK * MAXW * MAXITEM + 1];
    int64_t offsets[MAXROWS][MAXTOK + 2], counts[MAXROWS], sizes[MAXROWS];
    int64_t first[MAXROWS], lengths[MAXROWS * MAXTOK + 1], longest = -1, most = 0;
    const int64_t *offs[MAXROWS] = {0};
    const void *ptrs[MAXROWS] = {0};
    int want_rc = TW_PAD_OK;
    size_t want_row = 0, want_token = 0, bad_row = 99, bad_token = 99;
    ptrdiff_t too_wide = -1;
    random_fill(fill, itemsize);
    for (size_t r = 0; r < rows; r++) {
        size_t n = rndn(tokens + 2), at = rndn(4); /* now and then more tokens than columns */
        counts[r] = (int64_t)n;
        offsets[r][0] = (int64_t)at;
        for (size_t t = 0; t < n; t++) {
            size_t len = rndn(3) ? width : rndn(width + 2); /* runs of full-width tokens */
            offsets[r][t + 1] = offsets[r][t] + (int64_t)len;
        }
        sizes[r] = offsets[r][n] + (int64_t)rndn(3);
        if (rndn(5) == 0) { /* one offset out of place */
            size_t t = rndn(n + 1);
            offsets[r][t] = rndn(2) ? -1 - (int64_t)rndn(3) : sizes[r] + 1 + (int64_t)rndn(3);
            if (t && rndn(2))
                offsets[r][t] = offsets[r][t - 1] - 1; /* falling */
        }
        for (size_t v = 0; v < MAXVAL * itemsize; v++) /* items back to back */
            values[r][v] = (uint8_t)rnd();
        offs[r] = offsets[r];
        ptrs[r] = values[r];
    }
    /* The reference verdict: rows in order, each its token count, then its offsets in order. */
    for (size_t r = 0; r < rows && want_rc == TW_PAD_OK; r++) {
        if ((size_t)counts[r] > tokens) {
            want_rc = TW_PAD_TOO_MANY_TOKENS, want_row = r;
            break;
        }
        for (size_t t = 0; t <= (size_t)counts[r]; t++) {
            int64_t o = offsets[r][t];
            if (o < 0 || o > sizes[r] || (t && o < offsets[r][t - 1])) {
                want_rc = TW_PAD_BAD_OFFSETS, want_row = r, want_token = t;
                break;
            }
            if (t && o - offsets[r][t - 1] > most)
                most = o - offsets[r][t - 1];
        }
    }
    int rc = tw_ragged_lengths(rows, tokens, offs, counts, sizes, first, lengths, &longest, &bad_row, &bad_token);
    CHECK(rc == want_rc, "tw_ragged_lengths: code %d, want %d", rc, want_rc);
    if (rc != want_rc || rc != TW_PAD_OK) {
        CHECK(rc != want_rc || bad_row == want_row, "bad row %zu, want %zu", bad_row, want_row);
        CHECK(rc != TW_PAD_BAD_OFFSETS || bad_token == want_token, "bad offset %zu, want %zu", bad_token,
              want_token);
        return;
    }
    CHECK(longest == most, "longest %lld, want %lld", (long long)longest, (long long)most);
    for (size_t r = 0; r < rows; r++) {
        CHECK(first[r] == offsets[r][0], "first[%zu]", r);
        for (size_t t = 0; t < tokens; t++) {
            int64_t want = t < (size_t)counts[r] ? offsets[r][t + 1] - offsets[r][t] : 0;
            CHECK(lengths[r * tokens + t] == want, "lengths[%zu][%zu]", r, t);
            if (want > (int64_t)width && too_wide < 0)
                too_wide = (ptrdiff_t)(r * tokens + t);
        }
    }
    ptrdiff_t bad = tw_pad_ragged(rows, tokens, ptrs, first, lengths, itemsize, width, fill, dst);
    CHECK(bad == too_wide, "tw_pad_ragged: %td, want %td", bad, too_wide);
    if (too_wide >= 0)
        return;
    for (size_t r = 0; r < rows; r++)
        for (size_t t = 0; t < tokens; t++)
            for (size_t i = 0; i < width; i++) {
                size_t len = (size_t)lengths[r * tokens + t];
                const uint8_t *want = i < len ? values[r] + ((size_t)offsets[r][t] + i) * itemsize : fill;
                CHECK(same_item(dst + ((r * tokens + t) * width + i) * itemsize, want, itemsize),
                      "tw_pad_ragged: row %zu token %zu item %zu (item size %zu)", r, t, i, itemsize);
            }
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 20000;
    for (long i = 0; i < rounds; i++) {
        test_rows();
        test_ragged();
    }
    return checks_done();
}
