/* tw_pad: rows of different lengths copied into one padded block (see tw_pad.h). */
#include "base/tw_pad.h"

#include <string.h>

/* The fill of a block: one item's bytes, and whether they are one byte repeated (0.0, 0, -1:
 * then memset writes them). */
typedef struct {
    const uint8_t *item;
    size_t size;
    int byte; /* the repeated byte, or -1 */
} tw_filler;

static tw_filler filler(const void *fill, size_t itemsize)
{
    tw_filler f = {(const uint8_t *)fill, itemsize, -1};
    size_t i = 1;
    while (i < itemsize && f.item[i] == f.item[0])
        i++;
    if (i >= itemsize)
        f.byte = f.item[0];
    return f;
}

/* `count` items of the fill at dst. */
static void fill_items(uint8_t *dst, size_t count, const tw_filler *f)
{
    size_t bytes = count * f->size, done;
    if (count == 0)
        return;
    if (f->byte >= 0) {
        memset(dst, f->byte, bytes);
        return;
    }
    switch (f->size) {
/* one item of type T, stored `count` times */
#define TW_FILL_AS(T)                                                                           \
    {                                                                                           \
        T v;                                                                                    \
        memcpy(&v, f->item, sizeof v);                                                          \
        for (size_t i = 0; i < count; i++)                                                      \
            memcpy(dst + sizeof v * i, &v, sizeof v);                                           \
        return;                                                                                 \
    }
    case 2:
        TW_FILL_AS(uint16_t)
    case 4:
        TW_FILL_AS(uint32_t)
    case 8:
        TW_FILL_AS(uint64_t)
#undef TW_FILL_AS
    default: /* one item, then the written part doubled */
        memcpy(dst, f->item, f->size);
        for (done = f->size; done < bytes; done *= 2)
            memcpy(dst + done, dst, done < bytes - done ? done : bytes - done);
    }
}

ptrdiff_t tw_pad_rows(size_t rows, const void *const *src, const int64_t *lengths, size_t itemsize,
                      size_t width, const void *fill, void *dst)
{
    tw_filler f = filler(fill, itemsize);
    uint8_t *out = (uint8_t *)dst;
    for (size_t r = 0; r < rows; r++, out += width * itemsize) {
        int64_t n = lengths[r];
        if (n < 0 || (uint64_t)n > width)
            return (ptrdiff_t)r;
        if (n)
            memcpy(out, src[r], (size_t)n * itemsize);
        fill_items(out + (size_t)n * itemsize, width - (size_t)n, &f);
    }
    return -1;
}

int tw_ragged_lengths(size_t rows, size_t tokens, const int64_t *const *offsets, const int64_t *counts,
                      const int64_t *sizes, int64_t *first, int64_t *lengths, int64_t *longest,
                      size_t *bad_row, size_t *bad_token)
{
    int64_t most = 0;
    for (size_t r = 0; r < rows; r++) {
        const int64_t *offs = offsets[r];
        int64_t *len = lengths + r * tokens;
        int64_t n = counts[r], size = sizes[r], prev;
        size_t t;
        *bad_row = r;
        if (n < 0 || (uint64_t)n > tokens)
            return TW_PAD_TOO_MANY_TOKENS;
        prev = offs[0]; /* each offset is read once: it is checked, then only the copy is used */
        if (prev < 0 || prev > size) {
            *bad_token = 0;
            return TW_PAD_BAD_OFFSETS;
        }
        first[r] = prev;
        for (t = 0; t < (size_t)n; t++) {
            int64_t next = offs[t + 1];
            if (next < prev || next > size) {
                *bad_token = t + 1;
                return TW_PAD_BAD_OFFSETS;
            }
            len[t] = next - prev;
            if (next - prev > most)
                most = next - prev;
            prev = next;
        }
        for (; t < tokens; t++)
            len[t] = 0;
    }
    *longest = most;
    return TW_PAD_OK;
}

ptrdiff_t tw_pad_ragged(size_t rows, size_t tokens, const void *const *values, const int64_t *first,
                        const int64_t *lengths, size_t itemsize, size_t width, const void *fill, void *dst)
{
    tw_filler f = filler(fill, itemsize);
    const size_t stride = width * itemsize;
    uint8_t *out = (uint8_t *)dst;
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *src = (const uint8_t *)values[r] + (size_t)first[r] * itemsize;
        const int64_t *len = lengths + r * tokens;
        size_t t = 0;
        while (t < tokens) {
            size_t n = (size_t)len[t], run = t + 1;
            if (n > width)
                return (ptrdiff_t)(r * tokens + t);
            if (n == width && n) {
                /* Tokens whose rows fill the width are back to back in the values as in the
                 * block (a head of top_k entries mostly is): one copy for the whole run. */
                while (run < tokens && (size_t)len[run] == width)
                    run++;
                memcpy(out, src, (run - t) * stride);
                src += (run - t) * stride;
                out += (run - t) * stride;
                t = run;
                continue;
            }
            if (n) {
                memcpy(out, src, n * itemsize);
                src += n * itemsize;
            }
            fill_items(out + n * itemsize, width - n, &f);
            out += stride;
            t++;
        }
    }
    return -1;
}
