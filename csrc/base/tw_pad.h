/* tw_pad: rows of different lengths copied into one padded block (the batch path's collate).
 *
 * A batch of B choices becomes tensors such as ids [B, T] and heads [B, T, K]: each source row
 * is copied to the start of its row of the block and the rest of that row is the fill value.
 * Every byte of the block is written once (the copied items or the fill), so the block needs
 * no clearing first.  An item is `itemsize` bytes (1, 2, 4 or 8 for the numeric dtypes; any
 * size works) and `fill` points to one item's bytes.
 *
 * tw_ragged_lengths reads per-token row offsets that belong to a caller (they may be rewritten
 * while it runs) once each, checking every one as it goes, and writes a private copy of what
 * tw_pad_ragged needs (each row's first offset and each token's length): the copy then bounds
 * every read of tw_pad_ragged.  Plain C11, no Python API; the compiled core calls these
 * without the GIL.
 */
#ifndef TW_PAD_H
#define TW_PAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Codes of tw_ragged_lengths. */
enum {
    TW_PAD_OK = 0,
    TW_PAD_TOO_MANY_TOKENS = 1, /* a row has more tokens than the block has columns */
    TW_PAD_BAD_OFFSETS = 2,     /* an offset is negative, falls or passes the row's values */
};

/* Row r of dst (`width` items, rows back to back) gets the lengths[r] items at src[r], then
 * `fill` to the width.  Returns -1, or the first row longer than `width` (the block is then
 * not to be used). */
ptrdiff_t tw_pad_rows(size_t rows, const void *const *src, const int64_t *lengths, size_t itemsize,
                      size_t width, const void *fill, void *dst);

/* The token lengths of ragged rows: source r has counts[r] tokens, token t's items being
 * offsets[r][t] .. offsets[r][t + 1] of values sizes[r] long (offsets[r] has counts[r] + 1
 * entries, read once each).  Writes first[r] = offsets[r][0], lengths[r * tokens + t] for
 * every t < tokens (0 past the row's tokens) and *longest (the longest token row, 0 for
 * none).  Returns TW_PAD_OK, or the code of the first bad row with *bad_row (and for
 * TW_PAD_BAD_OFFSETS the offset's index in *bad_token); what it wrote is then not to be used. */
int tw_ragged_lengths(size_t rows, size_t tokens, const int64_t *const *offsets, const int64_t *counts,
                      const int64_t *sizes, int64_t *first, int64_t *lengths, int64_t *longest,
                      size_t *bad_row, size_t *bad_token);

/* dst [rows, tokens, width]: token t of row r holds its lengths[r * tokens + t] items, read
 * from values[r] at first[r] plus the lengths of the tokens before it, then `fill`.  `first`
 * and `lengths` are tw_ragged_lengths' checked copies.  Returns -1, or the first flat index
 * r * tokens + t of a token longer than `width` (the block is then not to be used). */
ptrdiff_t tw_pad_ragged(size_t rows, size_t tokens, const void *const *values, const int64_t *first,
                        const int64_t *lengths, size_t itemsize, size_t width, const void *fill, void *dst);

#ifdef __cplusplus
}
#endif

#endif
