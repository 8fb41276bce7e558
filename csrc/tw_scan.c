/*
 * tw_scan - structural scanner for /inference/v1/generate documents.
 * See tw_scan.h for the contract.
 *
 * Layout: one iterative pass (tw_scan) driven by gotos between four states
 * (value, element, key, after) over an explicit, heap-grown stack of open
 * containers.  Each open container carries a "context" saying which recorded
 * path it is (root object, choices array, a choice, compact_logprobs, ...);
 * keys are compared only inside such containers, so ignored subtrees cost a
 * plain validation.  String contents are skipped with a kernel that finds
 * the first byte that is '"', '\\', < 0x20 or >= 0x80 (AVX2 with an SSE2
 * probe on the x86-64 SIMD paths, NEON on aarch64, 8-byte SWAR on
 * TW_PATH_SCALAR); escapes and
 * non-ASCII bytes are then validated by scalar code and the kernel resumes
 * after them.
 *
 * A logprobs.content array may be handed to tw_doc.content_reader instead,
 * which validates it as this loop would while reading its records (see
 * "Records read during the scan" in tw_scan.h).
 *
 * The SIMD kernels use GCC/Clang function target attributes, so the file
 * builds with default flags; tw_doc.path picks the path at run time
 * (tw_cpu.h).
 */
#include "tw_scan.h"
#include "tw_cpu.h"
#include "tw_base64.h"
#include "tw_util.h"
#include "tw_mem.h"

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

#if defined(__GNUC__) || defined(__clang__)
#define TWS_LIKELY(x) __builtin_expect(!!(x), 1)
#define TWS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define TWS_LIKELY(x) (x)
#define TWS_UNLIKELY(x) (x)
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


static const uint8_t *tws_skip_scalar(const uint8_t *p, const uint8_t *end)
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

TW_TARGET_AVX2 static const uint8_t *tws_skip_avx2(const uint8_t *p,
                                                    const uint8_t *end)
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
static const uint8_t *tws_skip_neon(const uint8_t *p, const uint8_t *end)
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

#define TWS_STR_ESCAPE TW_STR_ESCAPE
#define TWS_STR_NONASCII TW_STR_NONASCII

/* p at a backslash: the position after the escape, or NULL. */
static const uint8_t *tws_escape(const uint8_t *p, const uint8_t *end, tws_err *e)
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
        e->pos = p;
        e->msg = "invalid escape in string";
        return NULL;
    }
    if (end - p < 6)
        goto truncated;
    cp = tw_hex4(p + 2);
    if (cp < 0) {
        e->pos = p;
        e->msg = "invalid \\u escape in string";
        return NULL;
    }
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
        e->pos = p;
        e->msg = "lone low surrogate in string";
        return NULL;
    }
    if (cp < 0xD800 || cp > 0xDBFF)
        return p + 6;
    if ((end - p >= 7 && p[6] != '\\') || (end - p >= 8 && p[7] != 'u')) {
        e->pos = p;
        e->msg = "lone high surrogate in string";
        return NULL;
    }
    if (end - p < 12)
        goto truncated;
    lo = tw_hex4(p + 8);
    if (lo < 0) {
        e->pos = p + 6;
        e->msg = "invalid \\u escape in string";
        return NULL;
    }
    if (lo < 0xDC00 || lo > 0xDFFF) {
        e->pos = p;
        e->msg = "lone high surrogate in string";
        return NULL;
    }
    return p + 12;
truncated:
    e->pos = end;
    e->msg = TWS_MSG_END;
    return NULL;
}

/* p: first content byte after the opening quote.  Returns the closing
   quote, or NULL with *e set.  *flags gets TWS_STR_ESCAPE/NONASCII. */
static const uint8_t *tws_string(const uint8_t *p, const uint8_t *end, int simd,
                                 unsigned *flags, tws_err *e)
{
    unsigned f = 0;
    for (;;) {
        uint8_t c;
        p = tws_skip(p, end, simd);
        if (TWS_UNLIKELY(p >= end)) {
            e->pos = end;
            e->msg = TWS_MSG_END;
            return NULL;
        }
        c = *p;
        if (TWS_LIKELY(c == '"')) {
            *flags = f;
            return p;
        }
        if (c == '\\') {
            f |= TWS_STR_ESCAPE;
            p = tws_escape(p, end, e);
            if (!p)
                return NULL;
        } else if (c < 0x20) {
            e->pos = p;
            e->msg = "control character in string";
            return NULL;
        } else {
            f |= TWS_STR_NONASCII;
            do {
                size_t n = tws_utf8(p, end);
                if (!n) {
                    e->pos = p;
                    e->msg = "invalid UTF-8 in string";
                    return NULL;
                }
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
static int tws_number_is_inf(const uint8_t *s, const uint8_t *e)
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
static const uint8_t *tws_number(const uint8_t *p, const uint8_t *end, int simd,
                                 int *is_int, tws_err *e)
{
    const uint8_t *s = p;
    size_t idigits;
    int integer = 1, exponent = 0;
    if (*p == '-' && ++p == end)
        goto truncated;
    if (*p == '0') {
        p++;
        if (p < end && tw_is_digit(*p)) {
            e->pos = p - 1;
            e->msg = "number with leading zero";
            return NULL;
        }
    } else if ((unsigned)(*p - '1') < 9u) {
        p = tw_digits(p + 1, end, simd);
    } else {
        e->pos = p;
        e->msg = "invalid number: no digit after sign";
        return NULL;
    }
    idigits = (size_t)(p - s) - (*s == '-');
    if (p < end && *p == '.') {
        if (++p == end)
            goto truncated;
        if (!tw_is_digit(*p)) {
            e->pos = p;
            e->msg = "invalid number: no digit after decimal point";
            return NULL;
        }
        p = tw_digits(p + 1, end, simd);
        integer = 0;
    }
    if (p < end && (*p | 0x20) == 'e') {
        if (++p == end)
            goto truncated;
        if ((*p == '+' || *p == '-') && ++p == end)
            goto truncated;
        if (!tw_is_digit(*p)) {
            e->pos = p;
            e->msg = "invalid number: no digit in exponent";
            return NULL;
        }
        while (p < end && tw_is_digit(*p))
            p++;
        integer = 0;
        exponent = 1;
    }
    if ((exponent || idigits > 308) && tws_number_is_inf(s, p)) {
        e->pos = s;
        e->msg = "number is infinity when parsed as double";
        return NULL;
    }
    *is_int = integer;
    return p;
truncated:
    e->pos = end;
    e->msg = TWS_MSG_END;
    return NULL;
}

const uint8_t *tw_scan_string(const uint8_t *p, const uint8_t *end, int simd,
                              unsigned *flags)
{
    tws_err e;
    return tws_string(p, end, simd, flags, &e);
}

const uint8_t *tw_scan_number(const uint8_t *p, const uint8_t *end, int simd, int *is_int)
{
    tws_err e;
    return tws_number(p, end, simd, is_int, &e);
}

/* Decode the escapes of a validated string body [s, e) into d.  Returns the
   length, or SIZE_MAX if it would exceed cap. */
static size_t tws_unescape(const uint8_t *s, const uint8_t *e, uint8_t *d, size_t cap)
{
    size_t n = 0;
    while (s < e) {
        const uint8_t *bs = (const uint8_t *)memchr(s, '\\', (size_t)(e - s));
        size_t run = (size_t)((bs ? bs : e) - s);
        uint32_t cp;
        if (run > cap - n)
            return SIZE_MAX;
        memcpy(d + n, s, run);
        n += run;
        s += run;
        if (!bs)
            break;
        if (s[1] != 'u') {
            if (n == cap)
                return SIZE_MAX;
            d[n++] = tw_escape_byte(s[1]);
            s += 2;
            continue;
        }
        cp = (uint32_t)tw_hex4(s + 2);
        s += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)tw_hex4(s + 2) - 0xDC00);
            s += 6;
        }
        if (cp < 0x80) {
            if (cap - n < 1)
                return SIZE_MAX;
            d[n++] = (uint8_t)cp;
        } else if (cp < 0x800) {
            if (cap - n < 2)
                return SIZE_MAX;
            d[n++] = (uint8_t)(0xC0 | (cp >> 6));
            d[n++] = (uint8_t)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            if (cap - n < 3)
                return SIZE_MAX;
            d[n++] = (uint8_t)(0xE0 | (cp >> 12));
            d[n++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            d[n++] = (uint8_t)(0x80 | (cp & 0x3F));
        } else {
            if (cap - n < 4)
                return SIZE_MAX;
            d[n++] = (uint8_t)(0xF0 | (cp >> 18));
            d[n++] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
            d[n++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            d[n++] = (uint8_t)(0x80 | (cp & 0x3F));
        }
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Paths                                                                     */
/* ------------------------------------------------------------------------ */

/* Contexts of open containers: the structural ones, then one for each object on the way to
   a field of the wire table (tw_fields.def). */
enum {
    TWS_C_NONE = 0,  /* ignored subtree */
    TWS_C_TOP,       /* the root object */
    TWS_C_CHOICES,   /* root.choices (array) */
    TWS_C_CHOICE,    /* a choice object */
    TWS_C_SGL_ITEMS, /* SGLang: the root array of items */
    TWS_C_SGL_ITEM,  /* SGLang: an item (the root object, or an element) */
#define TWS_CONTEXT(name, path) TWS_C_##name,
#include "tw_fields.def"
    TWS_NCONTEXTS
};
typedef char tws_contexts_fit_a_byte[(TWS_NCONTEXTS <= 256) ? 1 : -1];

/* Record targets: none, the root fields, or TWS_T_F0 + TW_F_*. */
enum {
    TWS_T_NONE = 0,
#define TWS_ROOT(name, path) TWS_T_##name,
#include "tw_fields.def"
    TWS_T_F0
};
#define TWS_F(f) (TWS_T_F0 + (f))
#define TWS_BIT(t) (UINT64_C(1) << (t))
#define TWS_FB(f) (UINT64_C(1) << (f))
/* Every record target is a bit of a uint64_t mask (blank_fields shifted by TWS_T_F0). */
typedef char tws_targets_fit_a_mask[(TWS_T_F0 + TW_NFIELDS <= 64) ? 1 : -1];

/* Sets of targets: TWS_BLANK_STR / TWS_BLANK_ARR (blanked when strings / arrays by the
   generate scan), TWS_BLANK_ARR_OPENAI (by the OpenAI-compatible scan), TWS_B64 (decoded as
   base64 during the generate scan), TWS_UINTS (id and offset arrays read during the scan),
   TWS_READ_MASK (a sampling_mask list read so), TWS_READ_RECORDS (handed to the content
   reader). */
#define TWS_SET(name, targets) static const uint64_t TWS_##name = (targets);
#include "tw_fields.def"

#define TWS_MAX_KEY 40 /* longer (unescaped) keys match nothing; SGLang's reach 31 bytes */

typedef struct {
    uint8_t ctx;      /* container the key is in */
    uint8_t len;
    char name[TWS_MAX_KEY];
    uint8_t tgt;      /* record target of the value */
    uint8_t ctx_obj;  /* context if the value is an object */
    uint8_t ctx_arr;  /* context if the value is an array */
    uint64_t clear;   /* TW_F_* bits cleared when the key occurs */
} tws_rule;

/* The keys on the paths of the wire table, each in the context of the object holding it. */
static const tws_rule TWS_RULES[] = {
#define TWS_KEY(ctx, name, tgt, cobj, carr, clear) \
    {TWS_C_##ctx, (uint8_t)(sizeof(name) - 1), name, tgt, TWS_C_##cobj, TWS_C_##carr, clear},
#include "tw_fields.def"
};

static const tws_rule *tws_match(unsigned ctx, const uint8_t *k, const uint8_t *ke,
                                 unsigned flags)
{
    uint8_t tmp[TWS_MAX_KEY];
    size_t n = (size_t)(ke - k);
    if (flags & TWS_STR_ESCAPE) {
        n = tws_unescape(k, ke, tmp, sizeof tmp);
        if (n == SIZE_MAX)
            return NULL;
        k = tmp;
    }
    if (n >= TWS_MAX_KEY)
        return NULL;
    for (size_t i = 0; i < sizeof TWS_RULES / sizeof TWS_RULES[0]; i++) {
        const tws_rule *r = &TWS_RULES[i];
        if (r->ctx == ctx && r->len == n && memcmp(r->name, k, n) == 0)
            return r;
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* The document                                                              */
/* ------------------------------------------------------------------------ */

typedef struct {
    size_t start; /* offset of the opening bracket */
    size_t count; /* elements so far (arrays) */
    size_t ci;    /* choice index (choice contexts) */
    uint8_t is_obj, ctx, tgt, all_int;
} tws_frame;

void tw_doc_init(tw_doc *d)
{
    memset(d, 0, sizeof *d);
    d->path = TW_PATH_AUTO;
    d->max_depth = 1024;
}

static void tws_free_blobs(tw_doc *d)
{
    for (size_t i = 0; i < d->nblobs; i++)
        tw_mem_free(d->blobs[i].data);
    d->nblobs = 0;
}

void tw_doc_free(tw_doc *d)
{
    tw_doc settings;
    void *owned[] = {d->blobs, d->uints, d->entries, d->cand_ids,
                     d->cand_lps, d->choice, d->blank, d->stack};
    tws_free_blobs(d);
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        tw_mem_free(owned[i]);
    tw_doc_init(&settings); /* keep every setting, nothing else */
    settings.path = d->path;
    settings.max_depth = d->max_depth;
    settings.decode = d->decode;
    settings.b64_path = d->b64_path;
    settings.openai = d->openai;
    settings.sglang = d->sglang;
    settings.content_reader = d->content_reader;
    *d = settings;
}

uint8_t *tw_take_blob(tw_doc *d, const tw_value *v, size_t *len)
{
    uint8_t *data;
    *len = 0;
    if (!v->blob || v->blob > d->nblobs)
        return NULL;
    data = d->blobs[v->blob - 1].data;
    if (data)
        *len = d->blobs[v->blob - 1].len;
    d->blobs[v->blob - 1].data = NULL;
    return data;
}

int tw_doc_grow(void **arr, size_t *cap, size_t n, size_t size, size_t first)
{
    size_t ncap;
    void *q;
    if (n < *cap)
        return 0;
    ncap = *cap ? *cap : first;
    while (ncap <= n) {
        if (ncap > SIZE_MAX / 2 / size)
            return -1;
        ncap *= 2;
    }
    q = tw_mem_realloc(*arr, ncap * size);
    if (!q)
        return -1;
    *arr = q;
    *cap = ncap;
    return 0;
}

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
#endif

/* The elements of an array of unsigned integer literals written without whitespace
   ("[12,0,345]", p at the first element), each at most 19 digits (below 2^64), appended to
   d->uints; returns the byte past ']' with their number in *count. NULL when the array is
   anything else (nothing is kept: the general scan reads it), with *nomem set when memory
   ran out. On the SIMD paths a block of 64 bytes at a time while tws_uint_block takes
   elements, else (and for an element it leaves) one element at a time. */
static const uint8_t *tws_uint_run(tw_doc *d, const uint8_t *p, const uint8_t *end,
                                   size_t *count, int *nomem, int simd)
{
    size_t n = d->nuints;
#ifdef TW_SIMD16
    const uint8_t *block_at = p; /* where the next block may start */
#endif
    for (;;) {
        uint64_t x = 0;
        size_t k = 0;
        if (d->uints_cap - n < 32) { /* room for a block's elements, 32 at most */
            void *arr = d->uints;
            if (tw_doc_grow(&arr, &d->uints_cap, n + 31, sizeof(uint64_t), 1024)) {
                *nomem = 1;
                return NULL;
            }
            d->uints = (uint64_t *)arr;
        }
#ifdef TW_SIMD16
        if (simd && p >= block_at && end - p >= 72) {
            size_t got = tws_uint_block(p, UINT64_MAX, 32, d->uints + n, &p);
            n += got;
            if (got)
                continue;
            /* an element the block cannot take: the next 64 bytes go the serial way, so
               that runs of long elements do not pay for a block each */
            block_at = p + 64;
        }
#else
        (void)simd;
#endif
        if (TWS_LIKELY(end - p >= 8))
            k = tws_digits8(p, &x);
        if (k == 0) { /* 8 digits or more, or the last bytes */
            while (p + k < end && p[k] >= '0' && p[k] <= '9' && k < 20) {
                x = x * 10 + (uint64_t)(p[k] - '0');
                k++;
            }
            if (k == 0 || k > 19)
                return NULL;
        }
        if (k > 1 && *p == '0') /* a leading zero: not JSON */
            return NULL;
        d->uints[n++] = x;
        p += k;
        if (p == end)
            return NULL;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p != ']')
            return NULL;
        *count = n - d->nuints;
        d->nuints = n;
        return p + 1;
    }
}

/* A list of such arrays ("[[5,9],[],[7]]", p at the first row), the sampling_mask list
   form: each row's length, then its elements, appended to d->uints; returns the byte past the
   outer ']' with the number of rows in *rows. NULL when the list is anything else (nothing is
   kept: the general scan reads it), with *nomem set when memory ran out. */
static const uint8_t *tws_nested_run(tw_doc *d, const uint8_t *p, const uint8_t *end,
                                     size_t *rows, int *nomem, int simd)
{
    size_t first = d->nuints, r = 0;
    for (;;) {
        size_t slot = d->nuints, n = 0;
        if (*p != '[')
            break;
        if (d->uints_cap == slot) {
            void *arr = d->uints;
            if (tw_doc_grow(&arr, &d->uints_cap, slot + 1, sizeof(uint64_t), 1024)) {
                *nomem = 1;
                break;
            }
            d->uints = (uint64_t *)arr;
        }
        d->nuints = slot + 1;
        if (++p == end)
            break;
        if (*p == ']') {
            p++;
        } else {
            p = tws_uint_run(d, p, end, &n, nomem, simd);
            if (!p)
                break;
        }
        d->uints[slot] = n;
        r++;
        if (p == end)
            break;
        if (*p == ']') {
            *rows = r;
            return p + 1;
        }
        if (*p != ',' || ++p == end)
            break;
    }
    d->nuints = first;
    return NULL;
}

size_t tw_nested_total(const tw_doc *d, const tw_value *v)
{
    const uint64_t *u = d->uints + v->read_at;
    size_t total = 0;
    for (size_t r = 0; r < v->count; r++) {
        total += (size_t)*u;
        u += 1 + *u;
    }
    return total;
}

int tw_take_nested(const tw_doc *d, const tw_value *v, uint64_t max, int64_t *offsets,
                   int32_t *values, size_t *err_row)
{
    const uint64_t *u = d->uints + v->read_at;
    size_t k = 0;
    if (max > (uint64_t)INT32_MAX)
        max = (uint64_t)INT32_MAX;
    offsets[0] = 0;
    for (size_t r = 0; r < v->count; r++) {
        size_t n = (size_t)*u++;
        for (size_t i = 0; i < n; i++) {
            if (u[i] > max) {
                *err_row = r;
                return -1;
            }
            values[k + i] = (int32_t)u[i];
        }
        u += n;
        k += n;
        offsets[r + 1] = (int64_t)k;
    }
    return 0;
}

int tw_take_uints(const tw_doc *d, const tw_value *v, uint64_t max, int64_t *out,
                  size_t *err_index)
{
    const uint64_t *src = d->uints + v->read_at;
    if (max > (uint64_t)INT64_MAX)
        max = (uint64_t)INT64_MAX;
    for (size_t i = 0; i < v->count; i++) {
        if (src[i] > max) {
            *err_index = i;
            return -1;
        }
        out[i] = (int64_t)src[i];
    }
    return 0;
}

static inline tw_value *tws_slot(tw_doc *d, unsigned tgt, size_t ci)
{
    if (tgt == TWS_T_PROMPT)
        return &d->prompt_token_ids;
    if (tgt == TWS_T_CHOICES)
        return &d->choices;
    return &d->choice[ci].f[tgt - TWS_T_F0];
}

static int tws_add_blank(tw_doc *d, size_t start, size_t end)
{
    void *arr = d->blank;
    if (start >= end)
        return 0;
    /* Spans are added as their values close, so a container closes after the
       values inside it: spans it contains are the last ones, and it replaces
       them.  The list stays sorted and disjoint in one pass. */
    while (d->nblank > 0 && d->blank[d->nblank - 1].start >= start) {
        d->nblank--;
        d->blank_bytes -= d->blank[d->nblank].end - d->blank[d->nblank].start;
    }
    if (tw_doc_grow(&arr, &d->blank_cap, d->nblank, sizeof(tw_span), 16))
        return -1;
    d->blank = (tw_span *)arr;
    d->blank[d->nblank].start = start;
    d->blank[d->nblank].end = end;
    d->nblank++;
    d->blank_bytes += end - start;
    return 0;
}

static int tws_add_choice(tw_doc *d, int is_object)
{
    void *arr = d->choice;
    if (tw_doc_grow(&arr, &d->choice_cap, d->nchoices, sizeof(tw_choice), 4))
        return -1;
    d->choice = (tw_choice *)arr;
    memset(&d->choice[d->nchoices], 0, sizeof(tw_choice));
    d->choice[d->nchoices].is_object = (uint8_t)(is_object != 0);
    d->nchoices++;
    return 0;
}

/*
 * tws_string for a string at a base64 path, decoding it on the way when it
 * is long (see "Decoding during the scan" in tw_scan.h).  Same result as
 * tws_string; *blob gets the 1-based index of the decoded buffer, or 0.
 */
static const uint8_t *tws_string_b64(tw_doc *d, const uint8_t *s,
                                     const uint8_t *end, int simd,
                                     unsigned *flags, tws_err *e,
                                     uint16_t *blob)
{
    size_t avail = (size_t)(end - s), cap, n, total;
    const uint8_t *q;
    uint8_t *dst;
    ptrdiff_t got;
    *blob = 0;
    if (avail < TW_SCAN_FUSE_MIN || d->nblobs >= 0xFFFF ||
        tws_skip(s, s + TW_SCAN_FUSE_MIN, simd) != s + TW_SCAN_FUSE_MIN)
        return tws_string(s, end, simd, flags, e);
    if (d->nblobs == d->blobs_cap) {
        void *arr = d->blobs;
        if (tw_doc_grow(&arr, &d->blobs_cap, d->nblobs, sizeof(tw_blob), 4))
            return tws_string(s, end, simd, flags, e);
        d->blobs = (tw_blob *)arr;
    }
    /* The string cannot decode to more than the rest of the document. */
    cap = avail / 4 * 3;
    dst = (uint8_t *)tw_mem_alloc(cap);
    if (!dst)
        return tws_string(s, end, simd, flags, e);
    n = tw_b64_decode_prefix((const char *)s, avail, dst, d->b64_path);
    /* The prefix is alphabet characters only: flags of the rest are those
       of the whole string. */
    q = tws_string(s + n, end, simd, flags, e);
    if (q && n && !*flags) {
        got = tw_b64_decode((const char *)(s + n), (size_t)(q - (s + n)),
                            dst + n / 4 * 3, cap - n / 4 * 3, d->b64_path,
                            NULL);
        if (got >= 0) {
            total = n / 4 * 3 + (size_t)got;
            /* tw_mem keeps a block that is at least half used, and moves
               the bytes to a fitting one otherwise. */
            uint8_t *fit = (uint8_t *)tw_mem_realloc(dst, total);
            if (fit)
                dst = fit;
            d->blobs[d->nblobs].data = dst;
            d->blobs[d->nblobs].len = total;
            *blob = (uint16_t)++d->nblobs;
            return q;
        }
    }
    tw_mem_free(dst);
    return q;
}

/* A choice object certain to fail validation (see "Choice records"). */
static int tws_choice_fails(const tw_doc *d, const tw_choice *c)
{
    if (d->sglang)
        return c->f[TW_F_SGL_IDS].type != TW_T_ARRAY &&
               c->f[TW_F_SGL_TRIPLES].type != TW_T_ARRAY;
    if (c->f[TW_F_TOKEN_IDS].type == TW_T_ARRAY)
        return 0;
    if (!d->openai)
        return 1;
    return c->f[TW_F_RAW_OUTPUT].type != TW_T_OBJECT &&
           c->f[TW_F_LOGPROBS_CONTENT].type != TW_T_ARRAY &&
           c->f[TW_F_LP_TOKENS].type != TW_T_ARRAY &&
           c->f[TW_F_LP_TOKEN_IDS].type != TW_T_ARRAY;
}

#define TWS_FAIL(at, message)                  \
    do {                                       \
        d->err_pos = (size_t)((at) - b);       \
        d->err_msg = (message);                \
        rc = TW_ERR_SYNTAX;                    \
        goto out;                              \
    } while (0)
#define TWS_FAIL_E() TWS_FAIL(err.pos, err.msg)
#define TWS_FAIL_END() TWS_FAIL(end, TWS_MSG_END)
#define TWS_NOMEM()                            \
    do {                                       \
        d->err_pos = (size_t)(p - b);          \
        d->err_msg = "out of memory";          \
        rc = TW_ERR_NOMEM;                     \
        goto out;                              \
    } while (0)
#define TWS_SKIP_WS()                          \
    while (p < end && tws_ws(*p))              \
    p++

int tw_scan(const char *buf, size_t len, tw_doc *d)
{
    const uint8_t *const b = (const uint8_t *)buf;
    const uint8_t *const end = b + len;
    const uint8_t *p = b, *q;
    const int simd = tw_path_resolve(d->path) != TW_PATH_SCALAR;
    /* The caller's blank_fields, as record-target bits. */
    const uint64_t extra = (d->blank_fields & ((UINT64_C(1) << TW_NFIELDS) - 1)) << TWS_T_F0;
    const uint64_t blank_str = (d->openai || d->sglang ? 0 : TWS_BLANK_STR) | extra;
    const uint64_t blank_arr =
        (d->sglang   ? 0
         : d->openai ? TWS_BLANK_ARR_OPENAI
                     : TWS_BLANK_ARR) | extra;
    const int decode = d->decode && !d->openai && !d->sglang;
    const size_t maxd = d->max_depth;
    tws_frame *st = (tws_frame *)d->stack, *top = NULL;
    size_t depth = 0, pci = 0;
    unsigned ptgt = TWS_T_NONE, pobj = TWS_C_TOP, parr = TWS_C_NONE;
    unsigned flags = 0;
    int rc = TW_OK, is_int = 0, choices_done = 0;
    tws_err err = {NULL, NULL};
    tw_value *v;
    uint8_t c;

    tws_free_blobs(d);
    d->nuints = 0;
    d->nentries = 0;
    d->top_is_object = 0;
    memset(&d->prompt_token_ids, 0, sizeof(tw_value));
    memset(&d->choices, 0, sizeof(tw_value));
    d->nchoices = 0;
    d->nblank = 0;
    d->blank_bytes = 0;
    d->err_pos = 0;
    d->err_msg = NULL;

    if (len == 0)
        TWS_FAIL(p, "empty document");
    if (len >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF)
        TWS_FAIL(p, "UTF-8 byte order mark is not allowed");
    if (d->sglang) {
        /* the root is an item, or an array of them */
        TWS_SKIP_WS();
        pobj = TWS_C_SGL_ITEM;
        parr = TWS_C_SGL_ITEMS;
        if (p < end && *p != '[' && tws_add_choice(d, *p == '{'))
            TWS_NOMEM(); /* a root that is not an array is item 0 (maybe not an object) */
    }

value: /* a value is expected (pending target/contexts set) */
    TWS_SKIP_WS();
    if (p == end)
        TWS_FAIL_END();
value_nows:
    c = *p;
    switch (c) {
    case '{':
    case '[':
        if (maxd && depth >= maxd)
            TWS_FAIL(p, "nesting too deep");
        if (depth == d->stack_cap) {
            void *arr = st;
            if (tw_doc_grow(&arr, &d->stack_cap, depth, sizeof(tws_frame), 32))
                TWS_NOMEM();
            st = (tws_frame *)arr;
            d->stack = arr;
        }
        top = &st[depth++];
        top->start = (size_t)(p - b);
        top->count = 0;
        top->ci = pci;
        top->tgt = (uint8_t)ptgt;
        top->all_int = 1;
        top->is_obj = c == '{';
        top->ctx = (uint8_t)(c == '{' ? pobj : parr);
        if (ptgt) {
            v = tws_slot(d, ptgt, pci);
            v->present = 1;
            v->type = c == '{' ? TW_T_OBJECT : TW_T_ARRAY;
            v->start = (size_t)(p - b);
        }
        if (depth == 1 && c == '{')
            d->top_is_object = 1;
        p++;
        TWS_SKIP_WS();
        if (p == end)
            TWS_FAIL_END();
        if (c == '{') {
            if (*p == '}') {
                p++;
                goto close;
            }
            goto key;
        }
        if (*p == ']') {
            p++;
            goto close;
        }
        /* Arrays read whole while they are scanned, their elements needing no other look: id
           and offset arrays (tws_uint_run), a sampling_mask list (tws_nested_run), and the
           entries of a record array, which the reader validates as this loop would (an
           entry's object, its candidates array, a candidate's object and an array in that
           are at most 4 levels below the array) or leaves to it. */
        {
            size_t n = 0, at = d->nuints;
            int nomem = 0, elements_int = 0;
            q = NULL;
            if (TWS_UINTS & TWS_BIT(ptgt)) {
                q = tws_uint_run(d, p, end, &n, &nomem, simd);
                elements_int = 1;
            } else if ((TWS_READ_MASK & TWS_BIT(ptgt)) && *p == '[' && (!maxd || maxd - depth >= 1)) {
                q = tws_nested_run(d, p, end, &n, &nomem, simd);
            } else if ((TWS_READ_RECORDS & TWS_BIT(ptgt)) && d->content_reader && !d->openai &&
                       !d->sglang && (!maxd || maxd - depth >= 4)) {
                at = d->nentries;
                q = d->content_reader(d, p, end, simd, &n);
            }
            if (nomem)
                TWS_NOMEM();
            if (q) {
                v = tws_slot(d, ptgt, pci);
                v->read = 1;
                v->read_at = at;
                top->count = n;
                if (!elements_int)
                    top->all_int = 0; /* its elements are arrays or objects */
                p = q;
                goto close;
            }
        }
        goto element;
    case '"': {
        uint16_t blob = 0;
        if (ptgt && decode && (TWS_B64 & TWS_BIT(ptgt)))
            q = tws_string_b64(d, p + 1, end, simd, &flags, &err, &blob);
        else
            q = tws_string(p + 1, end, simd, &flags, &err);
        if (!q)
            TWS_FAIL_E();
        if (ptgt) {
            v = tws_slot(d, ptgt, pci);
            v->present = 1;
            v->type = TW_T_STRING;
            v->blob = blob;
            v->start = (size_t)(p + 1 - b);
            v->end = (size_t)(q - b);
            v->has_escape = (flags & TWS_STR_ESCAPE) != 0;
            v->ascii = (flags & TWS_STR_NONASCII) == 0;
            if ((blank_str & TWS_BIT(ptgt)) && tws_add_blank(d, v->start, v->end))
                TWS_NOMEM();
        }
        p = q + 1;
        goto after_nonint;
    }
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        q = tws_number(p, end, simd, &is_int, &err);
        if (!q)
            TWS_FAIL_E();
        if (ptgt) {
            v = tws_slot(d, ptgt, pci);
            v->present = 1;
            v->type = TW_T_NUMBER;
            v->start = (size_t)(p - b);
            v->end = (size_t)(q - b);
        }
        p = q;
        if (is_int)
            goto after;
        goto after_nonint;
    case 't':
    case 'f':
    case 'n': {
        const char *word = c == 't' ? "true" : c == 'f' ? "false" : "null";
        size_t n = c == 'f' ? 5 : 4;
        if ((size_t)(end - p) < n || memcmp(p, word, n) != 0) {
            for (size_t i = 1; i < n; i++)
                if (p + i == end)
                    TWS_FAIL_END();
                else if (p[i] != (uint8_t)word[i])
                    TWS_FAIL(p + i, "invalid literal");
        }
        if (ptgt) {
            v = tws_slot(d, ptgt, pci);
            v->present = 1;
            v->type = c == 't' ? TW_T_TRUE : c == 'f' ? TW_T_FALSE : TW_T_NULL;
            v->start = (size_t)(p - b);
            v->end = (size_t)(p + n - b);
        }
        p += n;
        goto after_nonint;
    }
    default:
        TWS_FAIL(p, "unexpected character, expected a JSON value");
    }

after_nonint: /* a value that is not an integer literal ended */
    if (top && !top->is_obj)
        top->all_int = 0;
after: /* a value ended */
    if (!top)
        goto done;
    TWS_SKIP_WS();
    if (p == end)
        TWS_FAIL_END();
    if (top->is_obj) {
        if (*p == ',') {
            p++;
            TWS_SKIP_WS();
            if (p == end)
                TWS_FAIL_END();
            if (*p == '}')
                TWS_FAIL(p, "trailing comma is not allowed");
            goto key;
        }
        if (*p == '}') {
            p++;
            goto close;
        }
        TWS_FAIL(p, "unexpected character, expected ',' or '}'");
    }
    if (*p == ',') {
        p++;
        TWS_SKIP_WS();
        if (p == end)
            TWS_FAIL_END();
        if (*p == ']')
            TWS_FAIL(p, "trailing comma is not allowed");
        goto element;
    }
    if (*p == ']') {
        p++;
        goto close;
    }
    TWS_FAIL(p, "unexpected character, expected ',' or ']'");

close: /* p is just past the closing bracket of top */
    if (top->tgt) {
        v = tws_slot(d, top->tgt, top->ci);
        v->end = (size_t)(p - b);
        if (!top->is_obj) {
            v->count = top->count;
            v->all_int = top->all_int;
            if ((blank_arr & TWS_BIT(top->tgt)) &&
                tws_add_blank(d, v->start + 1, v->end - 1))
                TWS_NOMEM();
        }
    }
    if ((top->ctx == TWS_C_CHOICE || top->ctx == TWS_C_SGL_ITEM) &&
        tws_choice_fails(d, &d->choice[top->ci]))
        choices_done = 1; /* this choice fails validation: stop recording */
    depth--;
    top = depth ? &st[depth - 1] : NULL;
    goto after_nonint;

element: /* p at the first byte of an array element */
    top->count++;
    ptgt = TWS_T_NONE;
    pobj = parr = TWS_C_NONE;
    if ((top->ctx == TWS_C_CHOICES || top->ctx == TWS_C_SGL_ITEMS) && !choices_done) {
        if (tws_add_choice(d, *p == '{'))
            TWS_NOMEM();
        if (*p == '{') {
            pobj = top->ctx == TWS_C_CHOICES ? TWS_C_CHOICE : TWS_C_SGL_ITEM;
            pci = d->nchoices - 1;
        } else {
            choices_done = 1; /* a non-object choice fails validation */
        }
    }
    goto value_nows;

key: /* p at the first byte of an object key */
    if (*p != '"')
        TWS_FAIL(p, "unexpected character, expected a string key");
    q = tws_string(p + 1, end, simd, &flags, &err);
    if (!q)
        TWS_FAIL_E();
    ptgt = TWS_T_NONE;
    pobj = parr = TWS_C_NONE;
    if (top->ctx != TWS_C_NONE) {
        const tws_rule *r = tws_match(top->ctx, p + 1, q, flags);
        if (r) {
            ptgt = r->tgt;
            pobj = r->ctx_obj;
            parr = r->ctx_arr;
            pci = top->ci;
            if (ptgt == TWS_T_PROMPT) {
                memset(&d->prompt_token_ids, 0, sizeof(tw_value));
            } else if (ptgt == TWS_T_CHOICES) {
                memset(&d->choices, 0, sizeof(tw_value));
                d->nchoices = 0;
                choices_done = 0;
            } else {
                for (unsigned f = 0; f < TW_NFIELDS; f++)
                    if (r->clear & TWS_FB(f))
                        memset(&d->choice[pci].f[f], 0, sizeof(tw_value));
            }
        }
    }
    p = q + 1;
    TWS_SKIP_WS();
    if (p == end)
        TWS_FAIL_END();
    if (*p != ':')
        TWS_FAIL(p, "unexpected character, expected ':' after key");
    p++;
    goto value;

done:
    TWS_SKIP_WS();
    if (p != end)
        TWS_FAIL(p, "unexpected content after document");
out:
    d->stack = st;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Stripped copy                                                             */
/* ------------------------------------------------------------------------ */

size_t tw_stripped_size(const tw_doc *d, size_t len)
{
    return len - d->blank_bytes;
}

void tw_strip(const char *buf, size_t len, const tw_doc *d, char *out)
{
    size_t pos = 0;
    for (size_t i = 0; i < d->nblank; i++) {
        size_t n = d->blank[i].start - pos;
        memcpy(out, buf + pos, n);
        out += n;
        pos = d->blank[i].end;
    }
    memcpy(out, buf + pos, len - pos);
}

int tw_blank_field(tw_doc *d, size_t ci, int field)
{
    const tw_value *v;
    size_t s, e, lo, hi, j, removed = 0;
    if (ci >= d->nchoices || field < 0 || field >= TW_NFIELDS)
        return TW_OK;
    v = &d->choice[ci].f[field];
    if (!v->present)
        return TW_OK;
    if (v->type == TW_T_ARRAY) {
        s = v->start + 1;
        e = v->end - 1;
    } else if (v->type == TW_T_STRING) {
        s = v->start;
        e = v->end;
    } else {
        return TW_OK;
    }
    if (s >= e)
        return TW_OK;
    /* first span starting at or after s */
    lo = 0;
    hi = d->nblank;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->blank[mid].start < s)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* spans are interiors of values, so they nest or are disjoint: one
       that starts before s either ends by s or contains [s, e) */
    if (lo > 0 && d->blank[lo - 1].end > s)
        return TW_OK;
    for (j = lo; j < d->nblank && d->blank[j].start < e; j++)
        removed += d->blank[j].end - d->blank[j].start; /* nested: replaced */
    if (j == lo) {
        void *arr = d->blank;
        if (tw_doc_grow(&arr, &d->blank_cap, d->nblank, sizeof(tw_span), 16))
            return TW_ERR_NOMEM;
        d->blank = (tw_span *)arr;
        memmove(d->blank + lo + 1, d->blank + lo, (d->nblank - lo) * sizeof(tw_span));
        d->nblank++;
    } else if (j > lo + 1) {
        memmove(d->blank + lo + 1, d->blank + j, (d->nblank - j) * sizeof(tw_span));
        d->nblank -= j - lo - 1;
    }
    d->blank[lo].start = s;
    d->blank[lo].end = e;
    d->blank_bytes += (e - s) - removed;
    return TW_OK;
}

/* ------------------------------------------------------------------------ */
/* Helpers over validated values                                             */
/* ------------------------------------------------------------------------ */

/* One integer element at *pp in [0, max] (max <= INT64_MAX): 1 with *val and
   *pp advanced past it, or 0 if it is anything else. */
static int tws_uint_elem(const uint8_t **pp, const uint8_t *e, uint64_t max, uint64_t *val)
{
    const uint8_t *p = *pp;
    uint64_t x = 0;
    size_t n = 0;
    if (p >= e)
        return 0;
    if (*p == '-') {
        /* only "-0" (an integer zero) */
        p++;
        if (p < e && *p == '0' &&
            !(p + 1 < e && (p[1] == '.' || (p[1] | 0x20) == 'e'))) {
            *val = 0;
            *pp = p + 1;
            return 1;
        }
        return 0;
    }
    while (p < e && tw_is_digit(*p)) {
        if (n < 19)
            x = x * 10 + (uint64_t)(*p - '0');
        n++;
        p++;
    }
    if (n == 0 || n > 19 || x > max)
        return 0; /* not a number, or >= 10^19 > INT64_MAX, or > max */
    if (p < e && (*p == '.' || (*p | 0x20) == 'e'))
        return 0;
    *val = x;
    *pp = p;
    return 1;
}

/* End of the validated value at p (not past e). */
static const uint8_t *tws_skip_value(const uint8_t *p, const uint8_t *e)
{
    size_t depth = 0;
    while (p < e) {
        uint8_t c = *p;
        if (c == '"') {
            p++;
            while (p < e && *p != '"')
                p += (*p == '\\' && e - p >= 2) ? 2 : 1;
            if (p < e)
                p++;
            if (depth == 0)
                return p;
            continue;
        }
        if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (depth == 0)
                return p;
            if (--depth == 0)
                return p + 1;
        } else if (depth == 0 && (c == ',' || tws_ws(c))) {
            return p;
        }
        p++;
    }
    return p;
}

int tw_parse_uint_array(const char *buf, const tw_value *v, uint64_t max,
                        int64_t *out, size_t *err_index, int path)
{
    const uint8_t *p, *e;
    size_t i = 0;
    if (!v->present || v->type != TW_T_ARRAY || v->end - v->start < 2) {
        *err_index = 0;
        return -1;
    }
    if (max > (uint64_t)INT64_MAX)
        max = (uint64_t)INT64_MAX;
    p = (const uint8_t *)buf + v->start + 1;
    e = (const uint8_t *)buf + v->end - 1;
    p = tws_skip_ws(p, e);
#ifdef TW_SIMD16
    /* Compact runs ("123,45,6789,") a block of 64 bytes at a time (tws_uint_block), while
       the blocks give elements; then the general walk. */
    if (tw_path_resolve(path) != TW_PATH_SCALAR) {
        while (e - p >= 72 && i < v->count) {
            size_t got = tws_uint_block(p, max, v->count - i, (uint64_t *)(void *)(out + i), &p);
            if (!got)
                break;
            i += got;
        }
        p = tws_skip_ws(p, e);
    }
#else
    (void)path;
#endif
    while (p < e && i < v->count) {
        uint64_t x;
        /* Fast path: 1 to 7 digits followed by ',', ']' or whitespace,
           eight bytes at a time; anything else (and the last few bytes)
           goes through tws_uint_elem. */
        if (TWS_LIKELY(e - p >= 8)) {
            unsigned n = tws_digits8(p, &x);
            uint8_t c = p[n];
            if (n && (c == ',' || c == ']' || tws_ws(c)) && (n == 1 || *p != '0')) {
                if (TWS_LIKELY(x <= max)) {
                    out[i++] = (int64_t)x;
                    p += n;
                    if (TWS_LIKELY(c == ',')) {
                        p++;
                        if (TWS_UNLIKELY(p < e && tws_ws(*p)))
                            p = tws_skip_ws(p, e);
                    } else {
                        p = tws_skip_ws(p, e);
                        if (p < e && *p == ',')
                            p = tws_skip_ws(p + 1, e);
                    }
                    continue;
                }
            }
        }
        if (!tws_uint_elem(&p, e, max, &x)) {
            *err_index = i;
            return -1;
        }
        out[i++] = (int64_t)x;
        p = tws_skip_ws(p, e);
        if (p < e && *p == ',')
            p = tws_skip_ws(p + 1, e);
    }
    return 0;
}

int tw_array_element(const char *buf, const tw_value *v, size_t index,
                     size_t *start, size_t *end)
{
    const uint8_t *b = (const uint8_t *)buf, *p, *e;
    size_t i = 0;
    if (!v->present || v->type != TW_T_ARRAY || v->end - v->start < 2 || index >= v->count)
        return -1;
    p = b + v->start + 1;
    e = b + v->end - 1;
    p = tws_skip_ws(p, e);
    for (;;) {
        const uint8_t *q = tws_skip_value(p, e);
        if (i == index) {
            *start = (size_t)(p - b);
            *end = (size_t)(q - b);
            return 0;
        }
        i++;
        p = tws_skip_ws(q, e);
        if (p < e && *p == ',')
            p = tws_skip_ws(p + 1, e);
        if (p >= e)
            return -1;
    }
}

int tw_count_nested(const char *buf, const tw_value *v, size_t *total)
{
    const uint8_t *p, *e;
    size_t t = 0;
    *total = 0;
    if (!v->present || v->type != TW_T_ARRAY || v->end - v->start < 2)
        return -1;
    p = (const uint8_t *)buf + v->start + 1;
    e = (const uint8_t *)buf + v->end - 1;
    p = tws_skip_ws(p, e);
    while (p < e) {
        if (*p == '[') {
            p = tws_skip_ws(p + 1, e);
            while (p < e && *p != ']') {
                p = tws_skip_value(p, e);
                t++;
                p = tws_skip_ws(p, e);
                if (p < e && *p == ',')
                    p = tws_skip_ws(p + 1, e);
            }
            if (p < e)
                p++; /* ']' */
        } else {
            p = tws_skip_value(p, e);
        }
        p = tws_skip_ws(p, e);
        if (p < e && *p == ',')
            p = tws_skip_ws(p + 1, e);
    }
    *total = t;
    return 0;
}

size_t tw_nested_bound(const char *buf, const tw_value *v)
{
    const uint8_t *p, *e;
    size_t n = 0;
    if (!v->present || v->type != TW_T_ARRAY)
        return 0;
    p = (const uint8_t *)buf + v->start;
    e = (const uint8_t *)buf + v->end;
    for (; e - p >= 8; p += 8) { /* the bytes equal to ',', eight at a time */
        const uint64_t low = UINT64_C(0x7F7F7F7F7F7F7F7F);
        uint64_t x = tw_load_le64(p) ^ UINT64_C(0x2C2C2C2C2C2C2C2C); /* a comma is now a zero byte */
        n += tw_popcount64(~(((x & low) + low) | x | low));
    }
    for (; p < e; p++)
        n += *p == ',';
    return n + v->count;
}

int tw_parse_nested_uint(const char *buf, const tw_value *v, uint64_t max,
                         int64_t *offsets, int32_t *values, size_t *err_row)
{
    const uint8_t *p, *e;
    size_t r = 0, k = 0;
    if (!v->present || v->type != TW_T_ARRAY || v->end - v->start < 2) {
        *err_row = 0;
        return -1;
    }
    if (max > (uint64_t)INT32_MAX)
        max = (uint64_t)INT32_MAX;
    p = (const uint8_t *)buf + v->start + 1;
    e = (const uint8_t *)buf + v->end - 1;
    offsets[0] = 0;
    p = tws_skip_ws(p, e);
    while (p < e && r < v->count) {
        if (*p != '[') {
            *err_row = r;
            return -1;
        }
        p = tws_skip_ws(p + 1, e);
        while (p < e && *p != ']') {
            uint64_t x;
            if (!tws_uint_elem(&p, e, max, &x)) {
                *err_row = r;
                return -1;
            }
            values[k++] = (int32_t)x;
            p = tws_skip_ws(p, e);
            if (p < e && *p == ',')
                p = tws_skip_ws(p + 1, e);
        }
        if (p < e)
            p++; /* ']' */
        offsets[++r] = (int64_t)k;
        p = tws_skip_ws(p, e);
        if (p < e && *p == ',')
            p = tws_skip_ws(p + 1, e);
    }
    return 0;
}

size_t tw_unescape(const char *buf, const tw_value *v, char *dst)
{
    const uint8_t *s, *e;
    if (!v->present || v->type != TW_T_STRING)
        return 0;
    s = (const uint8_t *)buf + v->start;
    e = (const uint8_t *)buf + v->end;
    if (!v->has_escape) {
        memcpy(dst, s, (size_t)(e - s));
        return (size_t)(e - s);
    }
    return tws_unescape(s, e, (uint8_t *)dst, (size_t)(e - s));
}
