/*
 * tw_number - exact decimal-to-double conversion of JSON number literals.
 * See tw_number.h for the contract.
 *
 * Numbers (value = w * 10^q, w the first 19 significant digits) are
 * converted exactly in three steps:
 *   1. w times a 128-bit table value T(q) ~ 5^q * 2^-s(q): the 192-bit
 *      product w * T is within w units (in its last place) of the exact
 *      w * 5^q * 2^-s, which decides the rounding unless the bits below the
 *      rounding position are all ones down to bit 64.  For 5^q exact in 128
 *      bits (0 <= q <= 55) the product is exact and ties are decided
 *      exactly.  When digits beyond the 19th were dropped, w and w + 1 must
 *      round to the same double;
 *   2. when the product cannot decide and no digit was dropped, the value
 *      is (nearly always) a double or halfway between two: w <= 2^53 and
 *      |q| <= 22 take one correctly rounded double multiplication or
 *      division of exact operands, -27 <= q < 0 with 5^-q dividing w the
 *      integer w / 5^-q rounded and scaled by 2^q;
 *   3. otherwise an exact big-integer comparison of the decimal value with
 *      the halfway point above a floor candidate taken from step 1 (at most
 *      800 significant digits are kept, plus a sticky nonzero digit).
 * On the SIMD paths the usual literal (<= 8 integer digits, a fraction, no
 * exponent, <= 19 digits) is delimited with SSE2 and read without loops;
 * tw_number_try does the same for text not yet validated, checking the
 * grammar on the way (no digit, a leading zero, no digit after the point).
 * The table T(q), q in [-343, 308], is tw_pow5_table.h, written by
 * gen_pow5_table.py (which defines T); tests/c/check_records.py verifies its
 * bounds and the exponent formula below with exact integer arithmetic.
 *
 * Build switch (for tests): TWN_NO_INT128 selects the portable 64x64->128
 * multiplication.
 */
#include "codecs/tw_number.h"
#include "base/tw_cpu.h"
#include "codecs/tw_pow5_table.h"
#include "base/tw_util.h"

#include <math.h>
#include <string.h>

#ifdef TW_X86_SIMD
#include <emmintrin.h>
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

/* floor(q * log2(5)) for |q| <= 400 (checked over the table range by
   tests/c/check_records.py); the shifted operand is kept non-negative. */
static inline int64_t twd_log2_pow5(int64_t q)
{
    return ((q * 152170 + (INT64_C(1000) << 16)) >> 16) - 1000;
}

/* a * b = *hi * 2^64 + return value */
static inline uint64_t twd_mul128(uint64_t a, uint64_t b, uint64_t *hi)
{
#if defined(__SIZEOF_INT128__) && !defined(TWN_NO_INT128)
    __extension__ typedef unsigned __int128 twd_u128;
    twd_u128 r = (twd_u128)a * b;
    *hi = (uint64_t)(r >> 64);
    return (uint64_t)r;
#elif defined(_MSC_VER) && defined(_M_X64)
    return _umul128(a, b, hi);
#elif defined(_MSC_VER) && defined(_M_ARM64)
    *hi = __umulh(a, b);
    return a * b;
#else
    uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    *hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return (mid << 32) | (uint32_t)ll;
#endif
}

static inline double twd_from_bits(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

static const double TWD_POW10[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

#define TWD_SIGN UINT64_C(0x8000000000000000)
#define TWD_INF UINT64_C(0x7FF0000000000000)
#define TWD_HIDDEN (UINT64_C(1) << 52)

/* Bits of the non-negative double m * 2^g: m < 2^53, and m >= 2^52 unless
   g == -1074 (subnormal or zero); +inf when too large. */
static inline uint64_t twd_pack(uint64_t m, int64_t g)
{
    int64_t biased;
    if (m < TWD_HIDDEN)
        return m;
    biased = g + 1075;
    if (biased >= 2047)
        return TWD_INF;
    return ((uint64_t)biased << 52) | (m - TWD_HIDDEN);
}

/*
 * w * 10^q (w != 0, TW_POW5_QMIN <= q <= TW_POW5_QMAX) split at the rounding
 * position of its double: the value is (mant + f) * 2^g with f in [0, 1),
 * round = the first bit of f, and the rest of f below it is zero (rzero) or
 * has all its bits down to the product's bit 64 set (rfull, where the
 * product's error could carry).  exact: 5^q was exact, the split is exact.
 */
typedef struct {
    uint64_t mant;
    int64_t g;
    int round, rzero, rfull, exact;
} twd_split;

static inline void twd_split_at(uint64_t w, int64_t q, twd_split *s)
{
    const uint64_t *t = TW_POW5[q - TW_POW5_QMIN];
    unsigned lz = tw_clz64(w);
    uint64_t a1, a0, b1, b0, lo, mid, hi, restmask;
    int64_t e2, g, d;
    int top;
    w <<= lz;
    a0 = twd_mul128(w, t[0], &a1);
    b0 = twd_mul128(w, t[1], &b1);
    lo = b0;
    mid = a0 + b1;
    hi = a1 + (mid < a0);
    top = (hi >> 63) ? 191 : 190; /* leading bit of the 192-bit product */
    e2 = twd_log2_pow5(q) - 127 + q - (int64_t)lz; /* exponent of its bit 0 */
    g = top + e2 - 52;
    if (g < -1074)
        g = -1074;
    d = g - e2; /* product bits below the double's last place: >= 138 */
    s->g = g;
    s->exact = q >= 0 && q <= 55;
    if (d > 192) {
        s->mant = 0;
        s->round = 0;
        s->rzero = 0;
        s->rfull = 0;
        return;
    }
    if (d == 192) {
        s->mant = 0;
        s->round = (int)(hi >> 63);
        restmask = ~UINT64_C(0) >> 1;
    } else {
        unsigned sh = (unsigned)(d - 128); /* 10..63 */
        s->mant = hi >> sh;
        s->round = (int)((hi >> (sh - 1)) & 1u);
        restmask = (UINT64_C(1) << (sh - 1)) - 1;
    }
    s->rzero = (hi & restmask) == 0 && mid == 0 && lo == 0;
    s->rfull = (hi & restmask) == restmask && mid == ~UINT64_C(0);
}

/* Correctly rounded w * 10^q (w != 0, q in the table range) as bits, or 0
   when the product cannot decide (then *bits is untouched). */
static inline int twd_round(uint64_t w, int64_t q, uint64_t *bits)
{
    twd_split s;
    uint64_t m;
    int up;
    twd_split_at(w, q, &s);
    if (!s.exact && s.rfull)
        return 0;
    /* inexact: the true remainder is strictly positive, so no ties */
    up = s.round && (!s.exact || !s.rzero || (s.mant & 1u));
    m = s.mant + (uint64_t)up;
    if (m >> 53) {
        m >>= 1;
        s.g++;
    }
    *bits = twd_pack(m, s.g);
    return 1;
}

/* --- exact comparison (slow path) --------------------------------------- */

#define TWD_BN_LIMBS 176 /* 5632 bits; the comparisons need < 2800 */
#define TWD_MAX_DIGITS 800 /* more significant digits: 800 + a sticky 1 */

typedef struct {
    uint32_t d[TWD_BN_LIMBS];
    int n;
} twd_bn;

static void twd_bn_mul_add(twd_bn *a, uint32_t m, uint32_t add)
{
    uint64_t c = add;
    for (int i = 0; i < a->n; i++) {
        c += (uint64_t)a->d[i] * m;
        a->d[i] = (uint32_t)c;
        c >>= 32;
    }
    if (c && a->n < TWD_BN_LIMBS)
        a->d[a->n++] = (uint32_t)c;
}

static const uint64_t TWD_POW5_U64[28] = {
    UINT64_C(1),
    UINT64_C(5),
    UINT64_C(25),
    UINT64_C(125),
    UINT64_C(625),
    UINT64_C(3125),
    UINT64_C(15625),
    UINT64_C(78125),
    UINT64_C(390625),
    UINT64_C(1953125),
    UINT64_C(9765625),
    UINT64_C(48828125),
    UINT64_C(244140625),
    UINT64_C(1220703125),
    UINT64_C(6103515625),
    UINT64_C(30517578125),
    UINT64_C(152587890625),
    UINT64_C(762939453125),
    UINT64_C(3814697265625),
    UINT64_C(19073486328125),
    UINT64_C(95367431640625),
    UINT64_C(476837158203125),
    UINT64_C(2384185791015625),
    UINT64_C(11920928955078125),
    UINT64_C(59604644775390625),
    UINT64_C(298023223876953125),
    UINT64_C(1490116119384765625),
    UINT64_C(7450580596923828125)};

static void twd_bn_mul_pow5(twd_bn *a, int64_t k)
{
    /* 5^13 is the largest power of 5 that fits the 32-bit multiplier */
    while (k >= 13) {
        twd_bn_mul_add(a, (uint32_t)TWD_POW5_U64[13], 0);
        k -= 13;
    }
    if (k > 0)
        twd_bn_mul_add(a, (uint32_t)TWD_POW5_U64[k], 0);
}

static void twd_bn_shl(twd_bn *a, int64_t bits)
{
    int64_t limbs = bits / 32;
    unsigned sh = (unsigned)(bits % 32);
    int n = a->n;
    if (n == 0 || bits <= 0)
        return;
    if (n + limbs + 1 > TWD_BN_LIMBS) /* never for the comparisons made */
        limbs = TWD_BN_LIMBS - 1 - n;
    if (sh) {
        uint32_t carry = a->d[n - 1] >> (32 - sh);
        for (int i = n - 1; i > 0; i--)
            a->d[i] = (a->d[i] << sh) | (a->d[i - 1] >> (32 - sh));
        a->d[0] <<= sh;
        if (carry)
            a->d[n++] = carry;
    }
    if (limbs > 0) {
        memmove(a->d + limbs, a->d, (size_t)n * sizeof(uint32_t));
        memset(a->d, 0, (size_t)limbs * sizeof(uint32_t));
        n += (int)limbs;
    }
    a->n = n;
}

static int twd_bn_cmp(const twd_bn *a, const twd_bn *b)
{
    if (a->n != b->n)
        return a->n < b->n ? -1 : 1;
    for (int i = a->n - 1; i >= 0; i--)
        if (a->d[i] != b->d[i])
            return a->d[i] < b->d[i] ? -1 : 1;
    return 0;
}

static void twd_bn_set(twd_bn *a, uint64_t x)
{
    a->n = 0;
    while (x) {
        a->d[a->n++] = (uint32_t)x;
        x >>= 32;
    }
}

/* sign of D * 10^q - (2m + 1) * 2^(g - 1) */
static int twd_cmp_half(const twd_bn *D, int64_t q, uint64_t m, int64_t g)
{
    twd_bn a, b;
    int64_t ea = q, eb = g - 1;
    memcpy(&a, D, sizeof a);
    twd_bn_set(&b, 2 * m + 1);
    if (q >= 0)
        twd_bn_mul_pow5(&a, q);
    else
        twd_bn_mul_pow5(&b, -q);
    if (ea > eb)
        twd_bn_shl(&a, ea - eb);
    else
        twd_bn_shl(&b, eb - ea);
    return twd_bn_cmp(&a, &b);
}

/* Bits of the magnitude int(digits of [ip, ie) then [fp, fe)) * 10^q0. */
static uint64_t twd_slow(const uint8_t *ip, const uint8_t *ie,
                         const uint8_t *fp, const uint8_t *fe, int64_t q0)
{
    uint8_t dg[TWD_MAX_DIGITS + 1];
    const uint8_t *s = ip, *se = ie;
    int nd = 0, part = 0, sticky = 0, k;
    int64_t dropped = 0, q, e10;
    uint64_t w = 0, m;
    twd_split sp;
    twd_bn D;

    for (;;) {
        unsigned dd;
        if (s == se) {
            if (part)
                break;
            part = 1;
            s = fp;
            se = fe;
            continue;
        }
        dd = (unsigned)(*s++ - '0');
        if (nd == 0 && dd == 0)
            continue;
        if (nd < TWD_MAX_DIGITS)
            dg[nd++] = (uint8_t)dd;
        else {
            dropped++;
            sticky |= dd != 0;
        }
    }
    if (nd == 0)
        return 0;
    q = q0 + dropped;
    if (sticky) {
        dg[nd++] = 1;
        q--;
    }
    while (nd > 1 && dg[nd - 1] == 0) {
        nd--;
        q++;
    }
    e10 = q + nd - 1; /* the value is in [10^e10, 10^(e10+1)) */
    if (e10 < -325)
        return 0; /* < 10^-324 < 2^-1075 */
    if (e10 > 308)
        return TWD_INF;
    /* floor candidate from the first 19 digits (never above the value) */
    k = nd < 19 ? nd : 19;
    for (int i = 0; i < k; i++)
        w = w * 10 + dg[i];
    twd_split_at(w, q + (nd - k), &sp);
    m = sp.mant;
    D.n = 0;
    for (int i = 0; i < nd;) {
        uint32_t chunk = 0, scale = 1;
        for (int j = 0; j < 9 && i < nd; j++, i++) {
            chunk = chunk * 10 + dg[i];
            scale *= 10;
        }
        if (D.n == 0)
            twd_bn_set(&D, chunk);
        else
            twd_bn_mul_add(&D, scale, chunk);
    }
    for (int iter = 0; iter < 8; iter++) {
        int c = twd_cmp_half(&D, q, m, sp.g);
        if (c < 0 || (c == 0 && !(m & 1u)))
            break;
        m++;
        if (m >> 53) {
            m >>= 1;
            sp.g++;
        }
    }
    return twd_pack(m, sp.g);
}

/* --- digits ---------------------------------------------------------------- */

/* Value of the 8 ASCII digits at p (most significant first). */
static inline uint64_t twd_eight(const uint8_t *p)
{
    return tw_swar_digits8(tw_load_le64(p) - TW_ONES * '0');
}

static const uint64_t TWD_POW10_U64[20] = {
    UINT64_C(1), UINT64_C(10), UINT64_C(100), UINT64_C(1000), UINT64_C(10000),
    UINT64_C(100000), UINT64_C(1000000), UINT64_C(10000000), UINT64_C(100000000),
    UINT64_C(1000000000), UINT64_C(10000000000), UINT64_C(100000000000),
    UINT64_C(1000000000000), UINT64_C(10000000000000), UINT64_C(100000000000000),
    UINT64_C(1000000000000000), UINT64_C(10000000000000000),
    UINT64_C(100000000000000000), UINT64_C(1000000000000000000),
    UINT64_C(10000000000000000000)};

/* w * 10^len + value of the digits [p, p + len) (caller bounds the digit
   count to 19); bytes up to e may be read. */
static inline uint64_t twd_accum(uint64_t w, const uint8_t *p, size_t len, const uint8_t *e)
{
    while (len >= 8) {
        w = w * 100000000u + twd_eight(p);
        p += 8;
        len -= 8;
    }
    if (len) {
        if (e - p >= 8)
            return w * TWD_POW10_U64[len] + tw_short_digits(p, len);
        while (len--)
            w = w * 10 + (uint64_t)(*p++ - '0');
    }
    return w;
}

/* Bits of u * 2^q, correctly rounded (u != 0, no overflow or underflow). */
static uint64_t twd_scale2(uint64_t u, int64_t q)
{
    unsigned bl = 64u - tw_clz64(u);
    uint64_t m;
    if (bl <= 53) { /* exact: m in [2^52, 2^53) */
        m = u << (53 - bl);
        q -= 53 - bl;
    } else {
        unsigned sh = bl - 53;
        uint64_t rem = u & ((UINT64_C(1) << sh) - 1), half = UINT64_C(1) << (sh - 1);
        m = u >> sh;
        q += sh;
        if (rem > half || (rem == half && (m & 1u)))
            m++;
        if (m >> 53) {
            m >>= 1;
            q++;
        }
    }
    return twd_pack(m, q);
}

/* Magnitude bits of int(digits of [ip, ie) then [fp, fe)) * 10^q0; bytes up
   to e may be read. */
static uint64_t twd_decimal(const uint8_t *ip, const uint8_t *ie,
                            const uint8_t *fp, const uint8_t *fe, int64_t q0,
                            const uint8_t *e)
{
    size_t ni = (size_t)(ie - ip), nf = (size_t)(fe - fp);
    uint64_t w, bits, bits2;
    int64_t q = q0;
    int trunc = 0;
    if (TW_LIKELY(ni + nf <= 19)) {
        w = twd_accum(twd_accum(0, ip, ni, e), fp, nf, e);
    } else {
        /* significant digits: skip leading zeros ("0" then fraction zeros) */
        const uint8_t *s = ip, *se = ie, *t = fp;
        size_t ns, take, i;
        while (s < se && *s == '0')
            s++;
        if (s == se)
            while (t < fe && *t == '0')
                t++;
        ns = (size_t)(se - s) + (size_t)(fe - t);
        take = ns < 19 ? ns : 19;
        w = 0;
        for (i = 0; i < take; i++) {
            const uint8_t *c = s < se ? s++ : t++;
            w = w * 10 + (uint64_t)(*c - '0');
        }
        for (; i < ns && !trunc; i++) {
            const uint8_t *c = s < se ? s++ : t++;
            trunc = *c != '0';
        }
        q += (int64_t)(ns - take);
    }
    if (w == 0)
        return 0;
    if (q < TW_POW5_QMIN)
        return 0; /* < 10^20 * 10^-344 < 2^-1075 */
    if (q > TW_POW5_QMAX)
        return TWD_INF;
    if (TW_LIKELY(twd_round(w, q, &bits))) {
        if (!trunc)
            return bits;
        /* the value is strictly between w and w + 1 (times 10^q) */
        if (twd_round(w + 1, q, &bits2) && bits2 == bits)
            return bits;
    } else if (!trunc) {
        /* the product cannot decide: mostly values that are doubles or
           halfway between two, which for q < 0 means 5^-q divides w */
        if (w <= (UINT64_C(1) << 53) && q >= -22 && q <= 22) {
            double d = (double)w;
            d = q < 0 ? d / TWD_POW10[-q] : d * TWD_POW10[q];
            memcpy(&bits, &d, sizeof bits);
            return bits;
        }
        if (q < 0 && q >= -27 && w % TWD_POW5_U64[-q] == 0)
            return twd_scale2(w / TWD_POW5_U64[-q], q);
    }
    return twd_slow(ip, ie, fp, fe, q0);
}

#define TWD_EXP_CAP INT64_C(100000000000) /* |exponent| saturates here */

/* A literal's value: the magnitude's bits with the sign (an integer literal is a Python
   int: "-0" is 0) into *out, and whether it is an integer literal into *is_int. */
static inline void twd_store(uint64_t bits, int neg, int integer, double *out, int *is_int)
{
    if (neg && !(integer && bits == 0))
        bits |= TWD_SIGN;
    *out = twd_from_bits(bits);
    *is_int = integer;
}

#ifdef TW_X86_SIMD
/*
 * The usual shape, without loops: at most 8 integer digits, an optional
 * fraction, no exponent, at most 19 digits in all, found with one pass over
 * 32 bytes (the end of the number is on the critical path of the whole walk,
 * its value is not).  p just after the sign, 32 bytes readable.  Returns the
 * literal's length from p, with *bits its magnitude and *integer set for an
 * integer literal, or 0 for any other shape and for a value the product
 * cannot decide.  strict: the text is not known to be valid, and 0 is also
 * returned for no digit, a leading zero or no digit after the point.
 */
static inline TW_ALWAYS_INLINE unsigned twd_fast(const uint8_t *p, uint64_t *bits, int *integer,
                                                 const int strict)
{
    const __m128i lo = _mm_set1_epi8('0'), hi = _mm_set1_epi8('9');
    const __m128i dot = _mm_set1_epi8('.'), ee = _mm_set1_epi8('e');
    const __m128i bit5 = _mm_set1_epi8(0x20);
    __m128i a = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(p + 16));
    uint64_t nd = (uint64_t)(uint32_t)_mm_movemask_epi8(
                      _mm_or_si128(_mm_cmplt_epi8(a, lo), _mm_cmpgt_epi8(a, hi))) |
                  ((uint64_t)(uint32_t)_mm_movemask_epi8(
                       _mm_or_si128(_mm_cmplt_epi8(b, lo), _mm_cmpgt_epi8(b, hi)))
                   << 16) |
                  (UINT64_C(1) << 32);
    uint32_t dots = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(a, dot)) |
                    ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(b, dot)) << 16);
    uint32_t exps =
        (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_or_si128(a, bit5), ee)) |
        ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_or_si128(b, bit5), ee)) << 16);
    unsigned ni = tw_ctz64(nd), nf = 0, end = ni;
    uint64_t w;
    if (ni > 8)
        return 0;
    if (strict && (ni == 0 || (ni > 1 && *p == '0')))
        return 0;
    w = tw_short_digits(p, ni);
    *integer = 1;
    if ((dots >> ni) & 1u) {
        const uint8_t *f = p + ni + 1;
        unsigned left;
        nf = tw_ctz64(nd >> (ni + 1));
        end = ni + 1 + nf;
        if (end >= 32 || ni + nf > 19 || (strict && nf == 0))
            return 0;
        left = nf;
        if (left > 8) {
            w = w * 100000000u + twd_eight(f);
            f += 8;
            left -= 8;
        }
        if (left > 8) {
            w = w * 100000000u + twd_eight(f);
            f += 8;
            left -= 8;
        }
        w = w * TWD_POW10_U64[left] + tw_short_digits(f, left);
        *integer = 0;
    }
    if ((exps >> end) & 1u)
        return 0;
    if (w == 0)
        *bits = 0;
    else if (!twd_round(w, -(int64_t)nf, bits))
        return 0;
    return end;
}
#endif

/* p at a valid number (its end is before e): the position after it, with
   *out its value and *is_int set when it is an integer literal. */
const uint8_t *tw_number_read(const uint8_t *p, const uint8_t *e, double *out, int *is_int,
                              int simd)
{
    const uint8_t *ip, *ie, *fp, *fe;
    int neg = 0, integer = 1;
    int64_t ex = 0;
    uint64_t bits;
    if (*p == '-') {
        neg = 1;
        p++;
    }
#ifdef TW_X86_SIMD
    if (simd && TW_LIKELY(e - p >= 48)) {
        unsigned n = twd_fast(p, &bits, &integer, 0);
        if (n) {
            twd_store(bits, neg, integer, out, is_int);
            return p + n;
        }
        integer = 1;
    }
#else
    (void)simd;
#endif
    ip = p;
    p = ie = tw_digits(p, e, simd);
    fp = fe = p;
    if (p < e && *p == '.') {
        fp = p + 1;
        p = fe = tw_digits(fp, e, simd);
        integer = 0;
    }
    if (p < e && (*p | 0x20) == 'e') {
        int eneg = 0;
        integer = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        while (p < e && tw_is_digit(*p)) {
            if (ex < TWD_EXP_CAP)
                ex = ex * 10 + (*p - '0');
            p++;
        }
        if (eneg)
            ex = -ex;
    }
    bits = twd_decimal(ip, ie, fp, fe, ex - (int64_t)(fe - fp), e);
    twd_store(bits, neg, integer, out, is_int);
    return p;
}

const uint8_t *tw_number_try(const uint8_t *p, const uint8_t *e, double *out, int *is_int,
                             int simd)
{
#ifdef TW_X86_SIMD
    int neg = 0, integer = 1;
    uint64_t bits;
    unsigned n;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (!simd || e - p < 48)
        return NULL;
    n = twd_fast(p, &bits, &integer, 1);
    if (!n)
        return NULL;
    twd_store(bits, neg, integer, out, is_int);
    return p + n;
#else
    (void)p;
    (void)e;
    (void)out;
    (void)is_int;
    (void)simd;
    return NULL;
#endif
}

size_t tw_number_parse(const char *s, size_t len, double *out, int path)
{
    const uint8_t *p = (const uint8_t *)s, *e = p + len, *q;
    const int simd = tw_path_resolve(path) != TW_PATH_SCALAR;
    int is_int;
    /* grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
    q = p;
    if (q < e && *q == '-')
        q++;
    if (q >= e || !tw_is_digit(*q))
        return 0;
    if (*q == '0')
        q++;
    else
        q = tw_digits(q, e, simd);
    if (e - q >= 2 && q[0] == '.' && tw_is_digit(q[1]))
        q = tw_digits(q + 1, e, simd);
    if (q < e && (*q | 0x20) == 'e') {
        const uint8_t *x = q + 1;
        if (x < e && (*x == '+' || *x == '-'))
            x++;
        if (x < e && tw_is_digit(*x))
            q = tw_digits(x, e, simd);
    }
    /* the rest of s may be read (it cannot continue the literal) unless
       it starts with a byte a literal could hold ("01", "1.5.", "1e") */
    if (q < e && (tw_is_digit(*q) || *q == '.' || (*q | 0x20) == 'e' || *q == '+' || *q == '-'))
        e = q;
    p = tw_number_read(p, e, out, &is_int, simd);
    return (size_t)(p - (const uint8_t *)s);
}
