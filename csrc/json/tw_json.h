/*
 * tw_json - skipping over JSON that tw_scan has already validated, for the
 * record readers (header-only, static inline).
 *
 * Strings: a search for '"' and '\\' (SSE2 or NEON, 16 bytes per step, on
 * the SIMD paths; 8-byte SWAR on TW_PATH_SCALAR).  Containers whose first structural
 * byte closes them (int arrays such as "bytes"): one search.  Other
 * containers on the SIMD paths: 64 bytes per step, string interiors masked
 * out with a prefix XOR of the unescaped quotes, then the brackets walked;
 * on TW_PATH_SCALAR (and after the last whole block) a bracket-by-bracket
 * walk.  `simd` arguments: 0 on TW_PATH_SCALAR, 1 on the SIMD paths.
 *
 * Every function reads only [p, e) and assumes valid JSON there.
 */
#ifndef TW_JSON_H
#define TW_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "base/tw_cpu.h"
#include "base/tw_util.h"

#ifdef TW_X86_SIMD
#include <emmintrin.h>
#endif

/* High bit of each byte of w equal to c; exact for the lowest such byte
   (a borrow can only mark bytes above a true match). */
static inline uint64_t twj_eq8(uint64_t w, uint8_t c)
{
    uint64_t x = w ^ (TW_ONES * c);
    return (x - TW_ONES) & ~x & TW_HIGH;
}

#if defined(TW_X86_SIMD)
static inline uint64_t twj_qb16(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    return (uint32_t)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                                    _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
}

static inline uint64_t twj_struct16(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    /* only '[' and '{' become '{' with bit 5 set, only ']' and '}' '}' */
    __m128i b = _mm_or_si128(v, _mm_set1_epi8(0x20));
    return (uint32_t)_mm_movemask_epi8(
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(b, _mm_set1_epi8('{')),
                                  _mm_cmpeq_epi8(b, _mm_set1_epi8('}'))),
                     _mm_cmpeq_epi8(v, _mm_set1_epi8('"'))));
}
#elif defined(TW_NEON_SIMD)
static inline uint64_t twj_qb16(const uint8_t *p)
{
    uint8x16_t v = vld1q_u8(p);
    return tw_neon_nibbles(vorrq_u8(vceqq_u8(v, vdupq_n_u8('"')), vceqq_u8(v, vdupq_n_u8('\\'))));
}

static inline uint64_t twj_struct16(const uint8_t *p)
{
    uint8x16_t v = vld1q_u8(p);
    /* only '[' and '{' become '{' with bit 5 set, only ']' and '}' '}' */
    uint8x16_t b = vorrq_u8(v, vdupq_n_u8(0x20));
    return tw_neon_nibbles(vorrq_u8(vorrq_u8(vceqq_u8(b, vdupq_n_u8('{')), vceqq_u8(b, vdupq_n_u8('}'))),
                                    vceqq_u8(v, vdupq_n_u8('"'))));
}
#endif

static inline uint64_t twj_qb8(uint64_t w) { return twj_eq8(w, '"') | twj_eq8(w, '\\'); }

static inline uint64_t twj_struct8(uint64_t w)
{
    return twj_eq8(w, '"') | twj_eq8(w, '[') | twj_eq8(w, ']') | twj_eq8(w, '{') | twj_eq8(w, '}');
}

/* First '"' or '\\' in [p, e), or e. */
static inline const uint8_t *twj_find_qb(const uint8_t *p, const uint8_t *e, int simd)
{
    p = tw_skip_unmarked(p, e, simd, TW_MARK16(twj_qb16), twj_qb8);
    while (p < e && *p != '"' && *p != '\\')
        p++;
    return p;
}

/* First '"', '[', ']', '{' or '}' in [p, e), or e. */
static inline const uint8_t *twj_find_struct(const uint8_t *p, const uint8_t *e, int simd)
{
    p = tw_skip_unmarked(p, e, simd, TW_MARK16(twj_struct16), twj_struct8);
    while (p < e && *p != '"' && *p != '[' && *p != ']' && *p != '{' && *p != '}')
        p++;
    return p;
}

static inline const uint8_t *twj_ws(const uint8_t *p, const uint8_t *e)
{
    while (p < e && *p <= ' ')
        p++;
    return p;
}

/* p just after an opening quote: the position after the closing quote. */
static inline const uint8_t *twj_skip_string(const uint8_t *p, const uint8_t *e, int simd)
{
    for (;;) {
        p = twj_find_qb(p, e, simd);
        if (p >= e)
            return e;
        if (*p == '"')
            return p + 1;
        p += 2; /* an escape: the escaped byte is never a quote to stop at */
    }
}

/* Generic container skip: p just after an opening bracket, at nesting
   depth `depth`; the position after the bracket closing depth 1.  With
   commas, *commas += the commas at depth 1. */
static inline const uint8_t *twj_skip_nested(const uint8_t *p, const uint8_t *e, size_t depth,
                                             size_t *commas, int simd)
{
    for (;;) {
        const uint8_t *q = twj_find_struct(p, e, simd);
        uint8_t c;
        if (commas && depth == 1)
            for (const uint8_t *r = p; r < q; r++)
                *commas += *r == ',';
        if (q >= e)
            return e;
        c = *q;
        p = q + 1;
        if (c == '"')
            p = twj_skip_string(p, e, simd);
        else if (c == '[' || c == '{')
            depth++;
        else if (--depth == 0)
            return p;
    }
}

#ifdef TW_SIMD16
static inline uint64_t twj_prefix_xor(uint64_t x)
{
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

/* Bytes of [p, p + 64) equal to '"', '\\', an opening bracket, a closing
   bracket, ','. */
#ifdef TW_X86_SIMD
static inline void twj_masks64(const uint8_t *p, uint64_t *quote, uint64_t *bs,
                               uint64_t *open, uint64_t *close, uint64_t *comma)
{
    uint64_t mq = 0, mb = 0, mo = 0, mc = 0, mm = 0;
    for (int i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
        /* only '[' and '{' become '{' with bit 5 set, only ']' and '}' '}' */
        __m128i b = _mm_or_si128(v, _mm_set1_epi8(0x20));
        unsigned sh = 16u * (unsigned)i;
        mq |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('"'))) << sh;
        mb |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))) << sh;
        mo |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(b, _mm_set1_epi8('{'))) << sh;
        mc |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(b, _mm_set1_epi8('}'))) << sh;
        mm |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(','))) << sh;
    }
    *quote = mq;
    *bs = mb;
    *open = mo;
    *close = mc;
    *comma = mm;
}
#else
static inline void twj_masks64(const uint8_t *p, uint64_t *quote, uint64_t *bs,
                               uint64_t *open, uint64_t *close, uint64_t *comma)
{
    const uint8x16x4_t v = vld1q_u8_x4(p);
    uint8x16_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = vorrq_u8(v.val[i], vdupq_n_u8(0x20));
#define TWJ_EQ4(x, c)                                                                        \
    tw_neon_bits64(vceqq_u8(x[0], vdupq_n_u8(c)), vceqq_u8(x[1], vdupq_n_u8(c)),               \
                   vceqq_u8(x[2], vdupq_n_u8(c)), vceqq_u8(x[3], vdupq_n_u8(c)))
    *quote = TWJ_EQ4(v.val, '"');
    *bs = TWJ_EQ4(v.val, '\\');
    *open = TWJ_EQ4(b, '{');
    *close = TWJ_EQ4(b, '}');
    *comma = TWJ_EQ4(v.val, ',');
#undef TWJ_EQ4
}
#endif
#endif

/* p just after the opening bracket of a container: the position after its
   closing bracket.  With commas, *commas += the commas directly inside it.
   64 bytes per step: string interiors are masked out with a prefix XOR of
   the unescaped quotes, then the brackets are walked. */
static inline const uint8_t *twj_skip_container(const uint8_t *p, const uint8_t *e,
                                                size_t *commas, int simd)
{
    size_t depth = 1;
#ifdef TW_SIMD16
    uint64_t in_str = 0; /* all ones: the previous block ended in a string */
    uint64_t esc = 0;    /* 1: the first byte of this block is escaped */
    while (simd && e - p >= 64) {
        uint64_t quote, bs, open, close, comma, str;
        twj_masks64(p, &quote, &bs, &open, &close, &comma);
        if (TW_UNLIKELY(bs | esc)) {
            /* a backslash escapes the next byte unless itself escaped */
            uint64_t escaped = esc, b = bs & ~esc;
            esc = 0;
            while (b) {
                unsigned i = tw_ctz64(b);
                if (i == 63) {
                    esc = 1;
                    break;
                }
                escaped |= UINT64_C(1) << (i + 1);
                b &= ~(UINT64_C(3) << i);
            }
            quote &= ~escaped;
        }
        str = twj_prefix_xor(quote) ^ in_str;
        in_str = (uint64_t)0 - (str >> 63);
        open &= ~str;
        close &= ~str;
        if (!commas && tw_popcount64(close) < depth) {
            /* depth cannot reach 0 in this block */
            depth += tw_popcount64(open);
            depth -= tw_popcount64(close);
        } else {
            uint64_t br = open | close, seen = 0;
            comma &= ~str;
            while (br) {
                unsigned i = tw_ctz64(br);
                uint64_t upto = (UINT64_C(1) << i) - 1; /* bits below i */
                if (commas && depth == 1)
                    *commas += tw_popcount64(comma & upto & ~seen);
                seen = upto | (UINT64_C(1) << i);
                if ((open >> i) & 1u) {
                    depth++;
                } else if (--depth == 0) {
                    return p + i + 1;
                }
                br &= br - 1;
            }
            if (commas && depth == 1)
                *commas += tw_popcount64(comma & ~seen);
        }
        p += 64;
    }
    if (in_str) {
        p += esc; /* esc implies in_str: backslashes only occur in strings */
        p = twj_skip_string(p, e, simd);
    }
#endif
    return twj_skip_nested(p, e, depth, commas, simd);
}

/* p at the first byte of a (valid) value: the position just after it. */
static inline const uint8_t *twj_skip_value(const uint8_t *p, const uint8_t *e, int simd)
{
    uint8_t c = *p;
    if (c == '"')
        return twj_skip_string(p + 1, e, simd);
    if (c == '[' || c == '{') {
        /* flat containers (int arrays like "bytes") end at the first
           structural byte */
        const uint8_t *q = twj_find_struct(p + 1, e, simd);
        if (q < e && (*q == ']' || *q == '}'))
            return q + 1;
        return twj_skip_container(p + 1, e, NULL, simd);
    }
    /* number or literal */
    while (p < e && *p > ' ' && *p != ',' && *p != ']' && *p != '}')
        p++;
    return p;
}

/* Next character of a validated string body ending at se: its code point,
   0x80 for any raw non-ASCII byte (callers only compare against ASCII), and
   *sp advanced. */
static inline uint32_t twj_next_char(const uint8_t **sp, const uint8_t *se)
{
    const uint8_t *s = *sp;
    uint32_t cp;
    if (*s != '\\') {
        *sp = s + 1;
        return *s < 0x80 ? *s : 0x80;
    }
    if (se - s < 2) { /* cannot happen in a validated string */
        *sp = se;
        return 0x80;
    }
    if (s[1] != 'u') {
        *sp = s + 2;
        return tw_escape_byte(s[1]);
    }
    if (se - s < 6) {
        *sp = se;
        return 0x80;
    }
    cp = (uint32_t)tw_hex4(s + 2); /* validated: never -1 */
    *sp = s + 6; /* a following low surrogate decodes as >= 0x80 too */
    return cp;
}

#endif /* TW_JSON_H */
