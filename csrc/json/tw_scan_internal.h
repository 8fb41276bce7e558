/*
 * tw_scan_internal - what the files of the structural scanner share; no public API (that is
 * tw_scan.h). The files:
 *
 *   tw_scan.c         tw_scan: the one pass (its state machine over the stack of open
 *                     containers), the paths of the wire table, the arrays read whole on the
 *                     way (ids, offsets, sampling_mask lists), base64 decoded on the way
 *   tw_scan_values.c  what a caller reads after the scan: the document's lifetime and its
 *                     decoded blobs and ids, the stripped copy, and the recorded values read
 *                     again (integer arrays, nested arrays, array elements, unescaped strings)
 *
 * Here: the byte-level checks of the scan (whitespace, the string skip kernels, strings with
 * their escapes and UTF-8, numbers), unescaping, and the decimal digit runs that integer
 * arrays are read by. All static inline, so each file's hot loops inline them as one file's
 * did. Plain C11, no Python API.
 *
 * The SIMD kernels use GCC/Clang function target attributes, so the files build with
 * default flags; tw_doc.path picks the path at run time (tw_cpu.h).
 */
#ifndef TW_SCAN_INTERNAL_H
#define TW_SCAN_INTERNAL_H

#include "json/tw_scan.h"
#include "base/tw_cpu.h"
#include "base/tw_mem.h"
#include "base/tw_util.h"

#include <stdlib.h>
#include <string.h>

/* On the SIMD paths SSE2 (the x86-64 baseline) is the short-string probe, and SSE2 or NEON
   finds the digits and commas of integer runs (tws_uint_block); TW_PATH_SCALAR runs none of
   it. */
#ifdef TW_X86_SIMD
#define TWS_SSE2 1
#include <emmintrin.h>
#include <immintrin.h>
#endif

#ifdef TW_NEON_SIMD
#include <arm_neon.h>
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif


/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */


/* JSON whitespace: space, tab, LF, CR. */
static inline int tws_ws(uint8_t c)
{
    return c <= 0x20 && ((UINT64_C(0x100002600) >> c) & 1u);
}


static inline const uint8_t *tws_skip_ws(const uint8_t *p, const uint8_t *e)
{
    while (p < e && tws_ws(*p))
        p++;
    return p;
}

/* A byte that stops the fast string skip: '"', '\\', < 0x20 or >= 0x80. */
static inline int tws_special(uint8_t c)
{
    return (uint8_t)(c - 0x20) >= 0x60 || c == '"' || c == '\\';
}


/* Length of the valid UTF-8 sequence (2..4 bytes) at p, or 0. */
static inline size_t tws_utf8(const uint8_t *p, const uint8_t *end)
{
    size_t n = (size_t)(end - p);
    uint8_t c = p[0], lo = 0x80, hi = 0xBF;
    if (c < 0xC2)
        return 0; /* continuation byte or overlong 2-byte lead */
    if (c < 0xE0)
        return (n >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3)
            return 0;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* UTF-16 surrogates */
        return (p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80) ? 3 : 0;
    }
    if (c < 0xF5) {
        if (n < 4)
            return 0;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* above U+10FFFF */
        return (p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 &&
                (p[3] & 0xC0) == 0x80)
                   ? 4
                   : 0;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* String skip kernels: first byte in [p, end) with tws_special, or end      */
/* ------------------------------------------------------------------------ */


static inline const uint8_t *tws_skip_scalar(const uint8_t *p, const uint8_t *end)
{
    while (end - p >= 8) {
        uint64_t w, q, s;
        memcpy(&w, p, 8);
        q = w ^ (TW_ONES * '"');
        s = w ^ (TW_ONES * '\\');
        /* Any byte >= 0x80, < 0x20, == '"' or == '\\' (exact "any" tests). */
        if ((w | ((w - TW_ONES * 0x20) & ~w) | ((q - TW_ONES) & ~q) |
             ((s - TW_ONES) & ~s)) &
            TW_HIGH)
            break;
        p += 8;
    }
    while (p < end && !tws_special(*p))
        p++;
    return p;
}

#ifdef TWS_SSE2
static inline uint64_t tws_mask16(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    /* Signed compare: bytes >= 0x80 are negative, so "< 0x20" covers them. */
    __m128i m = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                     _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
        _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
    return (uint32_t)_mm_movemask_epi8(m);
}

TW_TARGET_AVX2 static inline __m256i tws_special32(__m256i v)
{
    return _mm256_or_si256(
        _mm256_or_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi8('"')),
                        _mm256_cmpeq_epi8(v, _mm256_set1_epi8('\\'))),
        _mm256_cmpgt_epi8(_mm256_set1_epi8(0x20), v));
}

TW_TARGET_AVX2 static inline const uint8_t *tws_skip_avx2(const uint8_t *p, const uint8_t *end)
{
    while (end - p >= 64) {
        __m256i a = tws_special32(_mm256_loadu_si256((const __m256i *)(const void *)p));
        __m256i c = tws_special32(
            _mm256_loadu_si256((const __m256i *)(const void *)(p + 32)));
        __m256i m = _mm256_or_si256(a, c);
        if (!_mm256_testz_si256(m, m)) {
            uint32_t k = (uint32_t)_mm256_movemask_epi8(a);
            if (k)
                return p + tw_ctz32(k);
            return p + 32 + tw_ctz32((uint32_t)_mm256_movemask_epi8(c));
        }
        p += 64;
    }
    if (end - p >= 32) {
        uint32_t k = (uint32_t)_mm256_movemask_epi8(
            tws_special32(_mm256_loadu_si256((const __m256i *)(const void *)p)));
        if (k)
            return p + tw_ctz32(k);
        p += 32;
    }
    if (end - p >= 16) {
        uint64_t k = tws_mask16(p);
        if (k)
            return p + tw_ctz64(k);
        p += 16;
    }
    return tws_skip_scalar(p, end);
}
#endif

#ifdef TW_NEON_SIMD
/* Bytes '"', '\\', < 0x20 or >= 0x80 (negative as signed bytes, so "< 0x20" covers them). */
static inline uint8x16_t tws_special16(uint8x16_t v)
{
    return vorrq_u8(vorrq_u8(vceqq_u8(v, vdupq_n_u8('"')), vceqq_u8(v, vdupq_n_u8('\\'))),
                    vcltq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8(0x20)));
}

static inline uint64_t tws_mask16(const uint8_t *p)
{
    return tw_neon_nibbles(tws_special16(vld1q_u8(p)));
}

/* 64 bytes per step: one test of the four vectors' OR, the first byte searched only in the
   block that holds it. */
static inline const uint8_t *tws_skip_neon(const uint8_t *p, const uint8_t *end)
{
    while (end - p >= 64) {
        uint8x16x4_t v = vld1q_u8_x4(p);
        uint8x16_t a = tws_special16(v.val[0]), b = tws_special16(v.val[1]);
        uint8x16_t c = tws_special16(v.val[2]), d = tws_special16(v.val[3]);
        if (tw_neon_nibbles(vorrq_u8(vorrq_u8(a, b), vorrq_u8(c, d)))) {
            uint64_t m;
            if ((m = tw_neon_nibbles(a)) != 0)
                return p + (tw_ctz64(m) >> 2);
            if ((m = tw_neon_nibbles(b)) != 0)
                return p + 16 + (tw_ctz64(m) >> 2);
            if ((m = tw_neon_nibbles(c)) != 0)
                return p + 32 + (tw_ctz64(m) >> 2);
            return p + 48 + (tw_ctz64(tw_neon_nibbles(d)) >> 2);
        }
        p += 64;
    }
    while (end - p >= 16) {
        uint64_t m = tws_mask16(p);
        if (m)
            return p + (tw_ctz64(m) >> 2);
        p += 16;
    }
    return tws_skip_scalar(p, end);
}
#define tws_skip_wide tws_skip_neon
#elif defined(TWS_SSE2)
#define tws_skip_wide tws_skip_avx2
#endif

/* simd: 0 on TW_PATH_SCALAR, else 1 (AVX2 serves both x86-64 SIMD paths, NEON aarch64's). */
static inline const uint8_t *tws_skip(const uint8_t *p, const uint8_t *end, int simd)
{
#ifdef TW_SIMD16
    if (simd && end - p >= 16) {
        /* Most strings are short: probe 16 bytes inline first. */
        uint64_t m = tws_mask16(p);
        if (m)
            return p + (tw_ctz64(m) >> TW_MARK16_SHIFT);
        return tws_skip_wide(p + 16, end);
    }
#else
    (void)simd;
#endif
    return tws_skip_scalar(p, end);
}

/* ------------------------------------------------------------------------ */
/* Strings and numbers                                                       */
/* ------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *pos;
    const char *msg;
} tws_err;

static const char TWS_MSG_END[] = "unexpected end of data";

/* A string's or a number's refusal: *e set to where and why; NULL. */
static inline const uint8_t *tws_refuse(tws_err *e, const uint8_t *pos, const char *msg)
{
    e->pos = pos;
    e->msg = msg;
    return NULL;
}

#define TWS_STR_ESCAPE TW_STR_ESCAPE
#define TWS_STR_NONASCII TW_STR_NONASCII

/* p at a backslash: the position after the escape, or NULL. */
static inline const uint8_t *tws_escape(const uint8_t *p, const uint8_t *end, tws_err *e)
{
    long cp, lo;
    if (end - p < 2)
        goto truncated;
    switch (p[1]) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        return p + 2;
    case 'u':
        break;
    default:
        return tws_refuse(e, p, "invalid escape in string");
    }
    if (end - p < 6)
        goto truncated;
    cp = tw_hex4(p + 2);
    if (cp < 0)
        return tws_refuse(e, p, "invalid \\u escape in string");
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return tws_refuse(e, p, "lone low surrogate in string");
    if (cp < 0xD800 || cp > 0xDBFF)
        return p + 6;
    if ((end - p >= 7 && p[6] != '\\') || (end - p >= 8 && p[7] != 'u'))
        return tws_refuse(e, p, "lone high surrogate in string");
    if (end - p < 12)
        goto truncated;
    lo = tw_hex4(p + 8);
    if (lo < 0)
        return tws_refuse(e, p + 6, "invalid \\u escape in string");
    if (lo < 0xDC00 || lo > 0xDFFF)
        return tws_refuse(e, p, "lone high surrogate in string");
    return p + 12;
truncated:
    return tws_refuse(e, end, TWS_MSG_END);
}

/* p: first content byte after the opening quote.  Returns the closing
   quote, or NULL with *e set.  *flags gets TWS_STR_ESCAPE/NONASCII. */
static inline const uint8_t *tws_string(const uint8_t *p, const uint8_t *end, int simd,
                                 unsigned *flags, tws_err *e)
{
    unsigned f = 0;
    for (;;) {
        uint8_t c;
        p = tws_skip(p, end, simd);
        if (TW_UNLIKELY(p >= end))
            return tws_refuse(e, end, TWS_MSG_END);
        c = *p;
        if (TW_LIKELY(c == '"')) {
            *flags = f;
            return p;
        }
        if (c == '\\') {
            f |= TWS_STR_ESCAPE;
            p = tws_escape(p, end, e);
            if (!p)
                return NULL;
        } else if (c < 0x20) {
            return tws_refuse(e, p, "control character in string");
        } else {
            f |= TWS_STR_NONASCII;
            do {
                size_t n = tws_utf8(p, end);
                if (!n)
                    return tws_refuse(e, p, "invalid UTF-8 in string");
                p += n;
            } while (p < end && *p >= 0x80);
        }
    }
}

/* 2^1024 - 2^970: the smallest magnitude that rounds to infinity. */
static const char TWS_INF_DIGITS[] =
    "1797693134862315807937289714053034150799341327100378269361737789"
    "8044496829276475094664901797758720709633028641669288791094655554"
    "7851940402630657488671505820681908902000708383676273854845817711"
    "5317644757302700698555713669596228429148198608349364752927190741"
    "68444365510704342711559699508093042880177904174497792";
#define TWS_INF_NDIGITS 309

/* Does the (grammatical) number [s, e) round to +-infinity as a double? */
static inline int tws_number_is_inf(const uint8_t *s, const uint8_t *e)
{
    const uint8_t *p = s, *m, *mend, *q, *first = NULL;
    int64_t ex = 0, mag = 0, total;
    int point = 0;
    size_t i = 0;
    if (*p == '-')
        p++;
    m = p;
    while (p < e && *p != 'e' && *p != 'E')
        p++;
    mend = p;
    if (p < e) {
        int neg = 0;
        p++;
        if (*p == '+' || *p == '-')
            neg = *p++ == '-';
        for (; p < e; p++)
            if (ex < INT64_C(1000000000))
                ex = ex * 10 + (*p - '0');
        if (neg)
            ex = -ex;
    }
    /* value = 0.DDDD x 10^mag, D the significant digits from `first` on */
    for (q = m; q < mend; q++) {
        if (*q == '.') {
            point = 1;
        } else if (*q != '0') {
            first = q;
            break;
        } else if (point) {
            mag--;
        }
    }
    if (!first)
        return 0; /* zero */
    if (!point) {
        for (q = first; q < mend && *q != '.'; q++)
            mag++;
    }
    total = mag + ex;
    if (total != TWS_INF_NDIGITS)
        return total > TWS_INF_NDIGITS;
    for (q = first; q < mend; q++) {
        if (*q == '.')
            continue;
        if (i == TWS_INF_NDIGITS)
            return 1; /* equal prefix, more digits: >= the threshold */
        if (*q != (uint8_t)TWS_INF_DIGITS[i])
            return *q > (uint8_t)TWS_INF_DIGITS[i];
        i++;
    }
    /* equal (a tie rounds to even, which is infinity) or shorter: the
       threshold's last digit is non-zero, so a shorter prefix is smaller */
    return i == TWS_INF_NDIGITS;
}

/* p at '-' or a digit.  Returns the end of the number or NULL. */
static inline const uint8_t *tws_number(const uint8_t *p, const uint8_t *end, int simd,
                                 int *is_int, tws_err *e)
{
    const uint8_t *s = p;
    size_t idigits;
    int integer = 1, exponent = 0;
    if (*p == '-' && ++p == end)
        goto truncated;
    if (*p == '0') {
        p++;
        if (p < end && tw_is_digit(*p))
            return tws_refuse(e, p - 1, "number with leading zero");
    } else if ((unsigned)(*p - '1') < 9u) {
        p = tw_digits(p + 1, end, simd);
    } else {
        return tws_refuse(e, p, "invalid number: no digit after sign");
    }
    idigits = (size_t)(p - s) - (*s == '-');
    if (p < end && *p == '.') {
        if (++p == end)
            goto truncated;
        if (!tw_is_digit(*p))
            return tws_refuse(e, p, "invalid number: no digit after decimal point");
        p = tw_digits(p + 1, end, simd);
        integer = 0;
    }
    if (p < end && (*p | 0x20) == 'e') {
        if (++p == end)
            goto truncated;
        if ((*p == '+' || *p == '-') && ++p == end)
            goto truncated;
        if (!tw_is_digit(*p))
            return tws_refuse(e, p, "invalid number: no digit in exponent");
        while (p < end && tw_is_digit(*p))
            p++;
        integer = 0;
        exponent = 1;
    }
    if ((exponent || idigits > 308) && tws_number_is_inf(s, p))
        return tws_refuse(e, s, "number is infinity when parsed as double");
    *is_int = integer;
    return p;
truncated:
    return tws_refuse(e, end, TWS_MSG_END);
}

/* Decode the escapes of a validated string body [s, e) into d.  Returns the
   length, or SIZE_MAX if it would exceed cap (tw_scan_values.c). */
TW_INTERNAL size_t tw_unescape_body(const uint8_t *s, const uint8_t *e, uint8_t *d, size_t cap);

/* Frees the blobs decoded during the last scan (tw_doc.blobs). */
static inline void tws_free_blobs(tw_doc *d)
{
    for (size_t i = 0; i < d->nblobs; i++)
        tw_mem_free(d->blobs[i].data);
    d->nblobs = 0;
}

/* ------------------------------------------------------------------------ */
/* Decimal digit runs of integer arrays                                      */
/* ------------------------------------------------------------------------ */


/* The run of 1 to 7 decimal digits at p (8 bytes readable) as a number in *x; returns its
   length, or 0 when p holds no digit or 8 of them. The high bit of the first byte that is not
   a digit marks the run's end (bytes before it are 0..9, so the addition carries nothing into
   it). */
static inline unsigned tws_digits8(const uint8_t *p, uint64_t *x)
{
    uint64_t dg = tw_load_le64(p) ^ (TW_ONES * '0');
    uint64_t nd = ((dg + TW_ONES * 0x76) | dg) & TW_HIGH;
    unsigned n = nd ? tw_ctz64(nd) >> 3 : 8;
    if (n - 1u >= 7u)
        return 0;
    *x = tw_swar_digits8(dg << (8 * (8 - n))); /* the n digits at the top, zeros below */
    return n;
}

/* Record targets holding ids or offsets: arrays of unsigned integers. */

#ifdef TW_SIMD16
/* The digits and the commas of the 64 bytes at p, a bit a byte. */
static inline void tws_digits_commas64(const uint8_t *p, uint64_t *digits, uint64_t *commas)
{
#if defined(TW_X86_SIMD)
    uint64_t dg = 0, cm = 0;
    for (int i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
        __m128i t = _mm_sub_epi8(v, _mm_set1_epi8('0')); /* a digit: 0..9 */
        unsigned sh = 16u * (unsigned)i;
        dg |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8(9)), t)) << sh;
        cm |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(','))) << sh;
    }
    *digits = dg;
    *commas = cm;
#else
    const uint8x16x4_t v = vld1q_u8_x4(p);
    const uint8x16_t zero = vdupq_n_u8('0'), nine = vdupq_n_u8(9), comma = vdupq_n_u8(',');
    *digits = tw_neon_bits64(vcleq_u8(vsubq_u8(v.val[0], zero), nine), vcleq_u8(vsubq_u8(v.val[1], zero), nine),
                             vcleq_u8(vsubq_u8(v.val[2], zero), nine), vcleq_u8(vsubq_u8(v.val[3], zero), nine));
    *commas = tw_neon_bits64(vceqq_u8(v.val[0], comma), vceqq_u8(v.val[1], comma),
                             vceqq_u8(v.val[2], comma), vceqq_u8(v.val[3], comma));
#endif
}

/* The elements of 1 to 16 digits, each followed by a comma, that open the 64 bytes at p (72
   bytes or more before the end: the last read ends 7 bytes past the block's last comma), at
   most `room` of them and each at most max, into out: how many, with *past after the last
   one's comma (p when none). It stops at the first element it cannot take so (more digits,
   a leading zero, above max, or a byte other than a digit or a comma ahead), which the
   caller's serial step then reads. The elements' bounds come from the block's comma mask,
   so their conversions do not wait on one another as a serial walk's do, each on the length
   of the one before it. */
static inline size_t tws_uint_block(const uint8_t *p, uint64_t max, size_t room, uint64_t *out,
                                    const uint8_t **past)
{
    static const uint64_t pow10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
    uint64_t digits, commas, other;
    const uint8_t *at = p;
    size_t n = 0;
    tws_digits_commas64(p, &digits, &commas);
    other = ~(digits | commas);
    if (other)
        commas &= (other & (0 - other)) - 1; /* only those before it */
    while (commas && n < room) {
        const uint8_t *comma = p + tw_ctz64(commas);
        size_t k = (size_t)(comma - at);
        uint64_t x, head;
        if (k - 1 >= 16 || (k > 1 && *at == '0'))
            break;
        /* up to 8 digits at the top of one word (zeros below), then the rest in a second */
        head = tw_load_le64(at) ^ (TW_ONES * '0');
        if (k <= 8) {
            x = tw_swar_digits8(head << (8 * (8 - k)));
        } else {
            x = tw_swar_digits8(head) * pow10[k - 8] +
                tw_swar_digits8((tw_load_le64(at + 8) ^ (TW_ONES * '0')) << (8 * (16 - k)));
        }
        if (x > max)
            break;
        out[n++] = x;
        at = comma + 1;
        commas &= commas - 1;
    }
    *past = at;
    return n;
}

#ifdef TW_X86_SIMD
/* The block readers' verdict on a block from its masks (a bit a byte: digits, commas,
   '0's): 0 when no element ends in it at a comma (*commas then 0), 1 when every element up to
   the last comma before any other byte has 1 to 8 digits without a leading zero and max
   bounds every 8-digit value (*commas then holds those commas; the caller counts them
   against its room), -1 when tws_uint_block must read it. */
static inline int tws_block_plain(uint64_t digits, uint64_t *commas, uint64_t zeros, uint64_t max)
{
    uint64_t c = *commas, other = ~(digits | c), starts, body, run;
    if (other)
        c &= (other & (0 - other)) - 1; /* only those before it */
    *commas = c;
    if (!c)
        return 0;
    starts = (c << 1) | 1;                   /* each element's first byte */
    body = ~UINT64_C(0) >> tw_clz64(c);      /* the bytes up to the last comma */
    run = digits & (digits >> 1);            /* 2 digits from here on */
    run &= run >> 2;                         /* 4 */
    run &= run >> 4;                         /* 8 */
    run &= digits >> 8;                      /* 9 */
    if ((c & starts) | (run & body) | (zeros & starts & (digits >> 1) & body) || max < UINT64_C(0xFFFFFFFF))
        return -1;
    return 1;
}

/* tws_uint_block on the AVX2 and AVX-512 paths (the SIMD paths of an x86-64 build): the same
   elements, the same *past. A block whose elements are all of 1 to 8 digits without a leading
   zero (the ids and offsets of a response) is read from its masks: the digits, commas and
   zeros of its 64 bytes in two vectors, the elements' bounds from the comma mask, and the
   cases tws_uint_block stops at (an empty element, 9 digits or more, a leading zero, more
   elements than `room`, a value above max) found for the whole block before any element is
   converted; a block holding one of them goes to tws_uint_block, which stops where it
   stops. The elements are converted from a second read of the bytes: should another thread
   rewrite them in between, a value may have more than 8 digits' worth, but tw_swar_digits8 of
   any 8 bytes is below 2^32, so a max of 2^32 - 1 or more (every caller's, or 0, which goes to
   tws_uint_block) still bounds it; a smaller max goes to tws_uint_block too. */
TW_TARGET_AVX2 static size_t tws_uint_block_avx2(const uint8_t *p, uint64_t max, size_t room, uint64_t *out,
                                                 const uint8_t **past)
{
    const __m256i zero = _mm256_set1_epi8('0'), nine = _mm256_set1_epi8(9), comma = _mm256_set1_epi8(',');
    __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
    __m256i t0 = _mm256_sub_epi8(v0, zero), t1 = _mm256_sub_epi8(v1, zero);
    uint64_t digits = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(t0, nine), t0)) |
                      (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(t1, nine), t1)) << 32;
    uint64_t commas = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v0, comma)) |
                      (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v1, comma)) << 32;
    uint64_t zeros = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v0, zero)) |
                     (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v1, zero)) << 32;
    int plain = tws_block_plain(digits, &commas, zeros, max);
    if (plain == 0) {
        *past = p;
        return 0;
    }
    if (plain < 0 || (size_t)_mm_popcnt_u64(commas) > room)
        return tws_uint_block(p, max, room, out, past);
    {
        const uint8_t *at = p;
        size_t n = 0;
        do {
            const uint8_t *c = p + tw_ctz64(commas);
            size_t k = (size_t)(c - at); /* 1 to 8 */
            /* the k digits at the top: a shift by 64 - 8k, which is 0 for k = 8 (mod 64) */
            out[n++] = tw_swar_digits8((tw_load_le64(at) ^ (TW_ONES * '0')) << ((0 - 8 * k) & 63));
            at = c + 1;
            commas &= commas - 1;
        } while (commas);
        *past = at;
        return n;
    }
}

/* tws_uint_block_avx2 on the AVX-512 path: the same elements, the same *past, the same
   hand-over to tws_uint_block. The masks come from one 512-bit read, and the elements are
   converted from that same register eight at a time, with no second read of the bytes: each
   comma's position and each element's first byte are packed into the low bytes of a vector
   (vpcompressb of the byte positions), each of eight 64-bit lanes gathers the 8 bytes before
   its element's comma (vpermb over the block), the bytes before the element's first are
   zeroed, and the lane's 8 digits become its value by two multiply-adds (pairs, then
   quadruples) and one 32 x 32 multiply. */
TW_TARGET_AVX512 static size_t tws_uint_block_avx512(const uint8_t *p, uint64_t max, size_t room, uint64_t *out,
                                                     const uint8_t **past)
{
    const __m512i v = _mm512_loadu_si512((const void *)p);
    const __m512i t = _mm512_sub_epi8(v, _mm512_set1_epi8('0'));
    uint64_t digits = _mm512_cmple_epu8_mask(t, _mm512_set1_epi8(9));
    uint64_t commas = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(','));
    uint64_t zeros = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('0'));
    int plain = tws_block_plain(digits, &commas, zeros, max);
    size_t n;
    if (plain == 0) {
        *past = p;
        return 0;
    }
    n = (size_t)_mm_popcnt_u64(commas);
    if (plain < 0 || n > room)
        return tws_uint_block(p, max, room, out, past);
    {
        const uint64_t starts = (commas << 1) | 1;
        const __m512i iota = _mm512_set_epi64(
            INT64_C(0x3f3e3d3c3b3a3938), INT64_C(0x3736353433323130), INT64_C(0x2f2e2d2c2b2a2928),
            INT64_C(0x2726252423222120), INT64_C(0x1f1e1d1c1b1a1918), INT64_C(0x1716151413121110),
            INT64_C(0x0f0e0d0c0b0a0908), INT64_C(0x0706050403020100));
        /* each lane's byte k: its lane's number (the element), and k - 8 (the window) */
        const __m512i lane = _mm512_srli_epi16(_mm512_and_si512(iota, _mm512_set1_epi8(0x38)), 3);
        const __m512i back = _mm512_sub_epi8(_mm512_and_si512(iota, _mm512_set1_epi8(7)), _mm512_set1_epi8(8));
        const __m512i ends = _mm512_maskz_compress_epi8(commas, iota);     /* element j's comma */
        const __m512i firsts = _mm512_maskz_compress_epi8(starts, iota);   /* element j's first byte */
        size_t j;
        for (j = 0; j < n; j += 8) {
            const __m512i which = _mm512_add_epi8(lane, _mm512_set1_epi8((char)j));
            const __m512i at = _mm512_add_epi8(_mm512_permutexvar_epi8(which, ends), back);
            const __mmask64 inside = _mm512_cmpge_epi8_mask(at, _mm512_permutexvar_epi8(which, firsts));
            const __m512i d8 = _mm512_maskz_permutexvar_epi8(inside, at, t); /* high digit first */
            const __m512i d2 = _mm512_maddubs_epi16(d8, _mm512_set1_epi16(0x010A));
            const __m512i d4 = _mm512_madd_epi16(d2, _mm512_set1_epi32(0x00010064));
            const __m512i x = _mm512_add_epi64(_mm512_mul_epu32(d4, _mm512_set1_epi64(10000)),
                                               _mm512_srli_epi64(d4, 32));
            const size_t left = n - j;
            _mm512_mask_storeu_epi64((void *)(out + j), (__mmask8)(left >= 8 ? 0xFF : (1u << left) - 1), x);
        }
        *past = p + 64 - tw_clz64(commas);
        return n;
    }
}

/* The block reader of SIMD path `path` (resolved, not scalar): the AVX-512 one on its path,
   else tws_uint_block_avx2 (every x86-64 SIMD path has AVX2). */
static inline size_t tws_uint_block_on(int path, const uint8_t *p, uint64_t max, size_t room, uint64_t *out,
                                       const uint8_t **past)
{
    if (path == TW_PATH_AVX512)
        return tws_uint_block_avx512(p, max, room, out, past);
    return tws_uint_block_avx2(p, max, room, out, past);
}
#else
/* NEON: tws_uint_block. */
static inline size_t tws_uint_block_on(int path, const uint8_t *p, uint64_t max, size_t room, uint64_t *out,
                                       const uint8_t **past)
{
    (void)path;
    return tws_uint_block(p, max, room, out, past);
}
#endif
#endif

#endif /* TW_SCAN_INTERNAL_H */
