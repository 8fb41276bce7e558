/*
 * tw_heads - the top-k head of every token of a response in one call.
 *
 * tw_select_heads makes, token by token, exactly the decisions of the reference's
 * select_head (src/tokenwire/kernels/python.py) and returns the same ids and values; the
 * probability-mass rules use exp() from the C library (the one Python's math.exp calls)
 * and a correctly rounded sum (what math.fsum returns). Those are only computed for a
 * token whose fast estimate of the sum (with a proven error bound) is too close to a
 * threshold to decide; see tw_heads_internal.h.
 *
 * Plain C11, no Python API, no global mutable state; every function is thread-safe.
 * errno is left as it was found.
 */
#ifndef TW_HEADS_H
#define TW_HEADS_H

#include <stddef.h>
#include <stdint.h>

#include "base/tw_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why a head is invalid, in the order select_head checks. */
enum {
    TW_HEAD_OK = 0,
    TW_HEAD_DISAGREE = 1,        /* "Sampler head and sampled-token logprob disagree" */
    TW_HEAD_MISSING_SUPPORT = 2, /* "Missing sampling-support probabilities" */
    TW_HEAD_NORMALIZE = 3,       /* "Sampler probabilities must normalize over the recorded support" */
    TW_HEAD_MASS = 4,            /* "Invalid sampler head probability mass" */
    TW_HEAD_FEWER = 5,           /* "Engine returned fewer top logprobs than requested" */
    TW_HEAD_NOMEM = 6            /* no memory for scratch space: report as MemoryError */
};

/* The `path` arguments: a TW_PATH_* (tw_cpu.h), resolved with tw_path_resolve. Every path
   makes the same decisions and writes the same heads, offsets and sampled values; past the
   last head a path may leave other bytes (the output's tail is scratch, see below). */

/*
 * Token t's candidates are cand_ids/cand_lps[coff[t] .. coff[t+1]), in engine order, with
 * distinct ids (the dict the reference's head is). sampled_ids[t] / sampled_lps[t] are the
 * sampled token and its logprob (NaN when the caller has none: it never equals anything).
 * k is the requested head size; with supports (soff != NULL) token t's recorded support
 * is sup[soff[t] .. soff[t+1]) and k is not used for it. An empty support row is no
 * support (an absent kept set): that token follows the rules without a support.
 *
 * Per token, in order (select_head):
 *   DISAGREE        the sampled id is a candidate and its value is not
 *                   math.isclose(., sampled_lp, rel_tol=1e-6, abs_tol=1e-5);
 *   ranked          the candidates whose value is not -9999.0, by (value desc, id asc);
 *   with a support: MISSING_SUPPORT if a support id is not ranked; ranked keeps the
 *                   support's ids; NORMALIZE unless |fsum(exp(ranked)) - 1| <= 1e-4;
 *   without:        when more than k are ranked and the k-th and (k+1)-th values are
 *                   equal, every candidate at that value is dropped; else the first k;
 *   MASS            nothing is left, or fsum(exp(ranked)) > 1.0001;
 *   FEWER           no support and fewer than k + 2 candidates (sentinels counted).
 *
 * Output: token t's head is out_ids/out_lps[out_off[t] .. out_off[t+1]) (out_off[0] = 0;
 * capacity coff[n] - coff[0] entries each, all of which may be used as scratch; the output
 * must not overlap the input).
 * Returns -1 when every head is valid, else the first token whose head is invalid, with
 * *code set (*code is TW_HEAD_OK on success); out_off[0..t] are then written and the
 * rest of the output is unspecified.
 *
 * The caller guarantees: coff and soff nondecreasing and within their arrays; k >= 1
 * (k < 1 gives what select_head gives for k = 0: MASS). Decisions equal the reference's
 * for candidate values that are not NaN and at most 709 (the parsers only pass values
 * <= 1e-6); larger values, which overflow math.exp there, are reported as MASS or
 * NORMALIZE, and NaN values give some answer without any out-of-bounds access.
 */
ptrdiff_t tw_select_heads(size_t n, const int64_t *coff, const int64_t *cand_ids,
                          const double *cand_lps, const int64_t *sampled_ids,
                          const double *sampled_lps, int64_t k, const int64_t *soff,
                          const int32_t *sup, int64_t *out_off, int64_t *out_ids,
                          double *out_lps, int *code, int path);

/*
 * The candidates of compact rows: row t is row_ids/row_vals[roff[t] .. roff[t+1]), and
 * its head is the dict of the row's first max(num_top, 1) distinct ids in row order,
 * each with the value of its last occurrence in the row (repeats are equal, which only
 * leaves the sign of a zero to choose), promoted to double. Writes coff[0..n] (coff[0] = 0)
 * and cand_ids/cand_lps (capacity roff[n] - roff[0] each). Returns TW_HEAD_OK, or
 * TW_HEAD_NOMEM when scratch memory for rows longer than 64 could not be had.
 * roff must be nondecreasing and within the arrays.
 */
int tw_compact_candidates(size_t n, const int64_t *roff, const uint32_t *row_ids,
                          const float *row_vals, int64_t num_top, int64_t *coff,
                          int64_t *cand_ids, double *cand_lps, int path);

/*
 * tw_compact_rows (tw_validate.h) and tw_compact_candidates in one pass over the rows: the
 * sampled values into out_sampled and the first row that breaks a row rule (its TW_ROW_*
 * reason in *kind; -1 and TW_ROW_OK when none does), and the candidates of every row before
 * that one (coff stays flat from it on: those rows have none). *kind is TW_ROW_NOMEM (row 0
 * reported) when scratch memory could not be had. On the AVX-512 and AVX2 paths, rows of up
 * to 32 entries are loaded once for both; other paths and longer rows run the two kernels.
 */
ptrdiff_t tw_compact_rows_candidates(size_t n, const int64_t *roff, const uint32_t *row_ids,
                                     const float *row_vals, const int64_t *sampled,
                                     int64_t num_top, float *out_sampled, int *kind,
                                     int64_t *coff, int64_t *cand_ids, double *cand_lps,
                                     int path);

/*
 * Compact rows straight to heads: tw_compact_rows_candidates, then tw_select_heads (with
 * sampled_lps the sampled values found) on the candidates, token by token, the heads'
 * values narrowed to float (they are the rows' floats). Stops at the first token that
 * breaks a row rule (*row_kind, TW_ROW_*) or whose head breaks a head rule (*head_code,
 * TW_HEAD_*; *row_kind is then TW_ROW_OK) and returns it; -1 when none does. A row's rule
 * comes before its head's: a token whose row is invalid has no head. TW_ROW_NOMEM or
 * TW_HEAD_NOMEM: no scratch memory. Output as tw_select_heads': out_off[0..n], out_ids and
 * out_lps of capacity roff[n] - roff[0] each (any of it may be written), out_sampled[0..n)
 * (when a token fails, out_sampled and the output from it on are unspecified).
 * On the AVX-512 and AVX2 paths a row of up to 32 entries whose head is plain (see
 * tw_compact_heads.c) is decided in registers; every other token, and every token on the other
 * paths, by the two kernels a block at a time. The same decisions and output on every path.
 */
ptrdiff_t tw_compact_heads(size_t n, const int64_t *roff, const uint32_t *row_ids,
                           const float *row_vals, const int64_t *sampled, int64_t num_top,
                           int64_t k, const int64_t *soff, const int32_t *sup, float *out_sampled,
                           int64_t *out_off, int64_t *out_ids, float *out_lps, int *row_kind,
                           int *head_code, int path);

/*
 * tw_compact_heads with the values rule of compact rows (tw_compact_values_bad, tw_validate.h:
 * every value finite and at most 1e-6) and the support rule of the kept sets
 * (tw_support_rows with absent_ok: a non-empty row holds the sampled id and no id twice) in
 * the same pass: the rows the registers take are checked there, the others a block at a time
 * just before the kernels read them, so neither the values nor the supports are read in a
 * pass of their own. Either check is made only when its output is given (not NULL):
 * *value_bad: -1 when every value of row_vals[roff[0] .. roff[n]) keeps the rule, else the
 * index (into row_vals) of the first that does not; *support_bad (with soff; -1 without, and
 * -1 whenever a value breaks its rule): -1 when every support row of the n tokens keeps its
 * rule, else the first token whose row does not (*row_kind is TW_ROW_NOMEM when tw_support_rows had no scratch memory; the check
 * after the loop may still set *support_bad then, which the caller reads first). The values rule comes before every other, the support rule before the
 * rows' and heads': the return value and the other outputs are to be ignored when either
 * fails. Otherwise as tw_compact_heads.
 */
ptrdiff_t tw_compact_heads_checked(size_t n, const int64_t *roff, const uint32_t *row_ids,
                                   const float *row_vals, const int64_t *sampled, int64_t num_top,
                                   int64_t k, const int64_t *soff, const int32_t *sup, float *out_sampled,
                                   int64_t *out_off, int64_t *out_ids, float *out_lps, int *row_kind,
                                   int *head_code, int path, ptrdiff_t *value_bad,
                                   ptrdiff_t *support_bad);

/* math.fsum(math.exp(v) for v in p): exp() from the C library, summed exactly and rounded
   once to nearest-even. NaN if any exp is NaN, else +inf if any is +inf or the sum
   overflows (where Python raises OverflowError). */
double tw_fsum_exp(const double *p, size_t n);

/* math.fsum(x) for x[i] >= 0 (NaN and +inf allowed, as above); a negative x[i] gives NaN. */
double tw_fsum_nonneg(const double *x, size_t n);

#ifdef __cplusplus
}
#endif

#endif
