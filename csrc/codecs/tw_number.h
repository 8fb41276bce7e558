/*
 * tw_number - JSON number literals to doubles, exactly as Python's float()
 * converts their text: correctly rounded (round half to even) from the exact
 * decimal value, for any number of digits and any exponent (underflow to
 * +-0.0 or a subnormal, overflow to +-inf).  An integer literal is an int to
 * the reference, so "-0" gives +0.0 (float(0)); "-0.0" and "-0e0" give -0.0.
 *
 * Plain C11, no Python API, no global mutable state; thread-safe.
 */
#ifndef TW_NUMBER_H
#define TW_NUMBER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The number literal at the start of s[0:len] (grammar
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, the longest such prefix):
 * returns its length with *out its value, or 0 when s does not start with
 * one.  path: a TW_PATH_* (tw_cpu.h); every path gives the same result.
 */
size_t tw_number_parse(const char *s, size_t len, double *out, int path);

/*
 * For the record readers: p at a number literal known to be valid (a
 * document tw_scan accepted) that ends before e.  Returns the position after
 * it, with *out its value and *is_int set when it is an integer literal.
 * simd: 0 on TW_PATH_SCALAR, 1 on the SIMD paths (which may read up to 48
 * bytes ahead, never at or past e).
 */
const uint8_t *tw_number_read(const uint8_t *p, const uint8_t *e, double *out, int *is_int,
                              int simd);

/*
 * For a reader that validates as it reads: p at a byte of a document that
 * continues to e (p < e).  When p starts a valid number literal of the usual
 * shape (at most 8 integer digits, an optional fraction, no exponent, at
 * most 19 digits in all), returns the position after it with *out and
 * *is_int as tw_number_read gives them; else NULL (an invalid literal,
 * another shape, or TW_PATH_SCALAR and builds without the SIMD kernels),
 * where the caller checks and reads the literal the long way.  Reads up to
 * 48 bytes ahead, never at or past e.
 */
const uint8_t *tw_number_try(const uint8_t *p, const uint8_t *e, double *out, int *is_int,
                             int simd);

#ifdef __cplusplus
}
#endif

#endif /* TW_NUMBER_H */
