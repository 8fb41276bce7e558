/*
 * Exact sums (tw_heads.h: tw_fsum_nonneg, tw_fsum_exp), what select_head's mass rules are
 * decided on when the fast estimate cannot decide them (tw_heads_internal.h: exact_verdict).
 */
#include "rules/tw_heads_internal.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------
 * Exact sums.
 *
 * A nonnegative finite double is an integer multiple of 2^-1074 below 2^1024, so any sum of
 * fewer than 2^64 of them is an integer below 2^2162 in units of 2^-1074: a fixed-point
 * accumulator of 36 64-bit limbs (2304 bits) holds it exactly, and rounding it once to the
 * nearest double (ties to even) gives the correctly rounded sum, which is math.fsum's result.
 * ------------------------------------------------------------------------------------------ */

#define ACC_LIMBS 36

typedef struct {
    uint64_t w[ACC_LIMBS];
} exact_acc;

static void acc_add(exact_acc *a, double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    unsigned e = (unsigned)(bits >> 52) & 0x7FFu;
    uint64_t m = bits & ((UINT64_C(1) << 52) - 1);
    unsigned pos = 0; /* x = m * 2^(pos - 1074) */
    if (e) {
        m |= UINT64_C(1) << 52;
        pos = e - 1;
    }
    if (!m) return;
    unsigned w = pos >> 6, s = pos & 63;
    uint64_t lo = m << s, hi = s ? m >> (64 - s) : 0;
    uint64_t old = a->w[w];
    a->w[w] = old + lo;
    hi += a->w[w] < old; /* hi < 2^53: no overflow */
    old = a->w[w + 1];
    a->w[w + 1] = old + hi;
    int carry = a->w[w + 1] < old;
    for (unsigned i = w + 2; carry && i < ACC_LIMBS; i++) carry = ++a->w[i] == 0;
}

static unsigned top_bit(uint64_t v) { return 63u - tw_clz64(v); } /* v != 0 */

/* 64 bits of the accumulator starting at bit `from`. */
static uint64_t acc_bits(const exact_acc *a, unsigned from) {
    unsigned w = from >> 6, s = from & 63;
    uint64_t v = a->w[w] >> s;
    if (s && w + 1 < ACC_LIMBS) v |= a->w[w + 1] << (64 - s);
    return v;
}

static double acc_round(const exact_acc *a) {
    int top = ACC_LIMBS - 1;
    while (top >= 0 && !a->w[top]) top--;
    if (top < 0) return 0.0;
    unsigned high = 64u * (unsigned)top + top_bit(a->w[top]);
    if (high < 53) return ldexp((double)a->w[0], -1074); /* below 2^-1021: exact */
    unsigned low = high - 52; /* the 53 bits kept are [low, high] */
    uint64_t mant = acc_bits(a, low) & ((UINT64_C(1) << 53) - 1);
    unsigned half = low - 1; /* the first bit dropped */
    int round = (int)((a->w[half >> 6] >> (half & 63)) & 1);
    int sticky = (a->w[half >> 6] & ((UINT64_C(1) << (half & 63)) - 1)) != 0;
    for (unsigned i = 0; !sticky && i < (half >> 6); i++) sticky = a->w[i] != 0;
    if (round && (sticky || (mant & 1))) {
        mant++;
        if (mant == (UINT64_C(1) << 53)) {
            mant >>= 1;
            low++;
        }
    }
    return ldexp((double)mant, (int)low - 1074); /* +inf past DBL_MAX */
}

/* The exact sum of x[i] (of exp(x[i]) with take_exp): NaN if any term is NaN or (without
   take_exp) negative, else +inf if any term is +inf; errno as it was. */
static inline double fsum_terms(const double *x, size_t n, int take_exp) {
    int saved = errno;
    exact_acc a;
    memset(&a, 0, sizeof a);
    int nan = 0, inf = 0;
    for (size_t i = 0; i < n; i++) {
        double v = take_exp ? exp(x[i]) : x[i];
        if (v != v || (!take_exp && v < 0))
            nan = 1;
        else if (v == INFINITY)
            inf = 1;
        else
            acc_add(&a, v);
    }
    double s = nan ? NAN : inf ? INFINITY : acc_round(&a);
    errno = saved;
    return s;
}

double tw_fsum_nonneg(const double *x, size_t n) { return fsum_terms(x, n, 0); }

double tw_fsum_exp(const double *p, size_t n) { return fsum_terms(p, n, 1); }
