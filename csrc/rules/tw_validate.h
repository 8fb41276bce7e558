/*
 * tw_validate - the per-token rules of the generate contract over decoded arrays.
 * Plain C, no Python API, no global state; every function is pure and thread-safe.
 * Each returns -1 when the input is valid, else the index (token or value) of the
 * first violation, which is what the reference implementation reports.
 */
#ifndef TW_VALIDATE_H
#define TW_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/tw_cpu.h"

/* vLLM's missing/clamped logprob value. */
#define TW_SENTINEL (-9999.0)

/* Packed sampled logprobs: first i with !(isfinite(v[i]) && v[i] > -9999). */
ptrdiff_t tw_packed_f32_bad(const float *v, size_t n);
ptrdiff_t tw_packed_f64_bad(const double *v, size_t n);

/* Compact values: first i with !isfinite(v[i]) || v[i] > 1e-6. */
ptrdiff_t tw_compact_values_bad(const float *v, size_t n);
/* The same on `path` (tw_cpu.h): the AVX2 and AVX-512 paths test 32 values at a time;
   every path gives the same index. */
ptrdiff_t tw_compact_values_bad_on(const float *v, size_t n, int path);

enum { TW_ROW_OK = 0, TW_ROW_REPEAT_DISAGREE = 1, TW_ROW_MISSING_SAMPLED = 2, TW_ROW_NOMEM = 3 };

/*
 * Compact rows without a head. Row t is [offsets[t], offsets[t+1]) of ids/vals.
 * Per row, in order: every repeated id carries the same value, as != compares them (a NaN
 * equals nothing; else REPEAT_DISAGREE);
 * the sampled id is in the row with a value other than the sentinel (else MISSING_SAMPLED).
 * Writes the sampled value to out[t]. Returns -1, or the failing row with *kind set
 * (TW_ROW_NOMEM: no memory for the scratch table, row 0 reported).
 * path (TW_PATH_*, tw_cpu.h, resolved with tw_path_resolve): TW_PATH_SCALAR is the portable
 * hash table; rows of up to 32 entries are checked in registers: AVX2 finds the repeated
 * entries by rotations (tw_repeats_avx2), NEON by all-pairs compares, AVX512 by conflict
 * detection (longer rows use the table on every path).
 */
ptrdiff_t tw_compact_rows(const uint32_t *ids, const float *vals, const int64_t *offsets,
                          size_t n, const int64_t *sampled, float *out, int *kind, int path);

/*
 * Whether compact rows keep every rule without a head: the values rule
 * (tw_compact_values_bad) over values [offsets[0], offsets[n]) and tw_compact_rows' rules,
 * with offsets[0] == 0 and rising (tw_offsets_not_rising: every value in exactly one row).
 * -1 when they do, out[t] each row's sampled value as tw_compact_rows writes it; else the
 * index of a row that breaks a rule (not necessarily the first: the caller asks the rules for
 * the verdict; out then partly written). On the AVX2 path the rows of 2 to 32 entries are read
 * once, the values rule in the registers that hold the row; the other paths (and the rows
 * from the first shorter or longer one on) run tw_compact_values_bad_on then tw_compact_rows.
 */
ptrdiff_t tw_compact_rows_valid(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t n,
                                const int64_t *sampled, float *out, int path);

/*
 * Recorded supports (sampling masks) in CSR form: each row non-empty, without
 * repeats, containing the sampled id; with absent_ok, an empty row is an absent support
 * (kept_tokens' zero count) and breaks no rule. Returns -1 or the first bad row
 * (*nomem set when scratch memory could not be had).  path (TW_PATH_*): AVX-512 checks
 * rows of up to 48 entries by conflict detection, NEON with all-pairs compares, AVX2 rows
 * of up to 32 by rotations (tw_repeats_avx2); the scalar path (and longer rows) filters for
 * repeats, or sorts a copy.
 */
ptrdiff_t tw_support_rows(const int32_t *values, const int64_t *offsets, size_t n,
                          const int64_t *sampled, int absent_ok, int *nomem, int path);

/* Any negative value: index of the first, or -1. */
ptrdiff_t tw_i32_negative(const int32_t *v, size_t n);

/* The first of n values of width bytes (1, 2 or 4) read as unsigned that is at or above
   limit, or -1. A signed value read so is at or above 2^(8 * width - 1) exactly when it is
   negative: with limit at most that, one pass finds the first value outside [0, limit). */
ptrdiff_t tw_first_at_or_above(const void *v, size_t n, size_t width, uint32_t limit);

/* The routing rows of a choice of n tokens after a prompt of `prompt` tokens, from position
   `start` on, as vLLM and prime-rl lay them out (one per prompt and completion token but the
   last, which is never forwarded): max(prompt + n - 1 - start, 0). -1 when an argument is
   negative or above TW_ROUTED_ROWS_MAX (the caller counts those otherwise). */
#define TW_ROUTED_ROWS_MAX ((int64_t)1 << 61)
int64_t tw_routed_rows(int64_t n, int64_t prompt, int64_t start);

/* CSR offsets: 0 when the first is not 0, else the first index whose offset does not rise
   above the one before it, or -1. */
ptrdiff_t tw_offsets_not_rising(const int64_t *v, size_t n);

#endif
