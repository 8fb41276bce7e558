/* Small bit and character helpers shared by the C kernels (header-only, static inline). */
#ifndef TW_UTIL_H
#define TW_UTIL_H

#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

#include "base/tw_cpu.h"

#ifdef TW_X86_SIMD
#include <emmintrin.h>
#include <immintrin.h>
#endif
#ifdef TW_NEON_SIMD
#include <arm_neon.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TW_LIKELY(x) __builtin_expect(!!(x), 1)
#define TW_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TW_ALWAYS_INLINE __attribute__((always_inline))
#else
#define TW_LIKELY(x) (x)
#define TW_UNLIKELY(x) (x)
#define TW_ALWAYS_INLINE
#endif

/* A function shared by the files of one kernel, not by the library's users: external linkage,
   hidden from the shared library where the compiler can say so. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(_WIN32) && !defined(__CYGWIN__)
#define TW_INTERNAL __attribute__((visibility("hidden")))
#else
#define TW_INTERNAL
#endif

/* Every byte 0x01 / every byte's high bit, for 8-byte SWAR. */
#define TW_ONES UINT64_C(0x0101010101010101)
#define TW_HIGH UINT64_C(0x8080808080808080)

/* Unroll the loop that follows four / eight times (GCC; other compilers choose). */
#if defined(__GNUC__) && !defined(__clang__)
#define TW_UNROLL4 _Pragma("GCC unroll 4")
#define TW_UNROLL8 _Pragma("GCC unroll 8")
#else
#define TW_UNROLL4
#define TW_UNROLL8
#endif

/* Number of set bits of x. On x86 the builtin is one instruction only where the build
   targets POPCNT; otherwise (a baseline x86-64 build) it is a call into libgcc, slower than
   the bit arithmetic below inlined. */
static inline unsigned tw_popcount64(uint64_t x)
{
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__POPCNT__) || !(defined(__x86_64__) || defined(__i386__)))
    return (unsigned)__builtin_popcountll(x);
#else
    x = x - ((x >> 1) & UINT64_C(0x5555555555555555));
    x = (x & UINT64_C(0x3333333333333333)) + ((x >> 2) & UINT64_C(0x3333333333333333));
    x = (x + (x >> 4)) & UINT64_C(0x0F0F0F0F0F0F0F0F);
    return (unsigned)((x * UINT64_C(0x0101010101010101)) >> 56);
#endif
}

/* Index of the lowest set bit of x (x != 0). */
static inline unsigned tw_ctz64(uint64_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_ctzll(x);
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_ARM64))
    unsigned long i;
    _BitScanForward64(&i, x);
    return (unsigned)i;
#else
    unsigned n = 0;
    while (!(x & 1u)) {
        x >>= 1;
        n++;
    }
    return n;
#endif
}

/* Index of the lowest set bit of x (x != 0). */
static inline unsigned tw_ctz32(uint32_t x) { return tw_ctz64(x); }

/* Number of leading zero bits of x (x != 0). */
static inline unsigned tw_clz64(uint64_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_clzll(x);
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_ARM64))
    unsigned long i;
    _BitScanReverse64(&i, x);
    return 63u - (unsigned)i;
#else
    unsigned n = 0;
    while (!(x >> 63)) {
        x <<= 1;
        n++;
    }
    return n;
#endif
}

/* The 8 bytes at p as a little-endian word (byte 0 lowest) on any host. */
static inline uint64_t tw_load_le64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

/* Value of eight decimal digits given as byte values 0..9 in a
   little-endian word, byte 0 the most significant digit. */
static inline uint64_t tw_swar_digits8(uint64_t v)
{
    /* bytes 2i: 10 * d(2i) + d(2i+1) */
    v = v * 10 + (v >> 8);
    /* pairs at bytes 0,4 times 10^6,100 and at bytes 2,6 times 10^4,1 */
    return (((v & UINT64_C(0x000000FF000000FF)) * (100 + (UINT64_C(1000000) << 32))) +
            (((v >> 16) & UINT64_C(0x000000FF000000FF)) * (1 + (UINT64_C(10000) << 32)))) >>
           32;
}

static inline int tw_is_digit(uint8_t c) { return (unsigned)(c - '0') < 10u; }

/* The value of a hex digit (either case), or -1. */
static inline int tw_hexval(uint8_t c)
{
    if ((unsigned)(c - '0') < 10u)
        return c - '0';
    c |= 0x20;
    if ((unsigned)(c - 'a') < 6u)
        return c - 'a' + 10;
    return -1;
}

/* The byte a one-letter JSON escape stands for, given the letter after the backslash
   (b f n r t, and " \\ / for themselves); not for 'u'. */
static inline uint8_t tw_escape_byte(uint8_t c)
{
    switch (c) {
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return c;
    }
}

/* Four hex digits at p (caller checked they exist), or -1. */
static inline long tw_hex4(const uint8_t *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = tw_hexval(p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* The high bit of every byte of w that is not an ASCII digit (a high
   nibble other than 3, or above '9'); exact for every byte. */
static inline uint64_t tw_nondigit8(uint64_t w)
{
    return ((w & (TW_ONES * 0xF0)) ^ (TW_ONES * 0x30)) |
           (((w + TW_ONES * 0x06) & (TW_ONES * 0xF0)) ^ (TW_ONES * 0x30));
}

/* Value of the 1..8 ASCII digits at p when 8 bytes can be read there: the
   digits are moved to the top of the word and '0's put below them. */
static inline uint64_t tw_short_digits(const uint8_t *p, size_t len)
{
    uint64_t v = (tw_load_le64(p) << (8 * (8 - len))) | (((TW_ONES * '0') >> (8 * len - 1)) >> 1);
    return tw_swar_digits8(v - TW_ONES * '0');
}

/* The marked bytes of a block of 16 at p (TW_SIMD16 builds: SSE2 or NEON), or of the word w
   as the high bit of each marked byte (SWAR; exact for the lowest marked byte).  A 16-byte
   mark has 1 << TW_MARK16_SHIFT bits per byte (SSE2: a movemask; NEON: a nibble per byte),
   so the first marked byte is at tw_ctz64(m) >> TW_MARK16_SHIFT. */
#if defined(TW_X86_SIMD)
#define TW_SIMD16 1
#define TW_MARK16_SHIFT 0
#elif defined(TW_NEON_SIMD)
#define TW_SIMD16 1
#define TW_MARK16_SHIFT 2
#endif
typedef uint64_t (*tw_mark16)(const uint8_t *p);
typedef uint64_t (*tw_mark8)(uint64_t w);
#ifdef TW_SIMD16
#define TW_MARK16(f) (f)
#else
#define TW_MARK16(f) ((tw_mark16)0)
#endif

#ifdef TW_NEON_SIMD
/* The nibble mask of a comparison result (bytes 0 or 0xFF): byte i gives bits 4i..4i+3. */
static inline uint64_t tw_neon_nibbles(uint8x16_t m)
{
    return vget_lane_u64(vreinterpret_u64_u8(vshrn_n_u16(vreinterpretq_u16_u8(m), 4)), 0);
}

/* One bit per byte of four comparison results (bytes 0 or 0xFF); a's 16 bytes are the lowest bits. */
static inline uint64_t tw_neon_bits64(uint8x16_t a, uint8x16_t b, uint8x16_t c, uint8x16_t d)
{
    static const uint8_t weights[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t w = vld1q_u8(weights);
    uint8x16_t ab = vpaddq_u8(vandq_u8(a, w), vandq_u8(b, w));
    uint8x16_t cd = vpaddq_u8(vandq_u8(c, w), vandq_u8(d, w));
    uint8x16_t x = vpaddq_u8(ab, cd);
    return vgetq_lane_u64(vreinterpretq_u64_u8(vpaddq_u8(x, x)), 0);
}
#endif

/* The first marked byte in [p, e), or a position fewer than 16 bytes before e (the caller goes
   on byte by byte): 16 bytes per step with m16 when simd (the SIMD paths), else 8 with m8.
   Callers pass constant functions, which the compiler inlines. */
static inline const uint8_t *tw_skip_unmarked(const uint8_t *p, const uint8_t *e, int simd,
                                              tw_mark16 m16, tw_mark8 m8)
{
#ifdef TW_SIMD16
    if (simd) {
        while (e - p >= 16) {
            uint64_t m = m16(p);
            if (m)
                return p + (tw_ctz64(m) >> TW_MARK16_SHIFT);
            p += 16;
        }
        return p;
    }
#else
    (void)simd;
    (void)m16;
#endif
    while (e - p >= 8) {
        uint64_t m = m8(tw_load_le64(p));
        if (m)
            return p + tw_ctz64(m) / 8;
        p += 8;
    }
    return p;
}

#if defined(TW_X86_SIMD)
static inline uint64_t tw_nondigit16(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    return (uint32_t)_mm_movemask_epi8(_mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8('0')),
                                                    _mm_cmpgt_epi8(v, _mm_set1_epi8('9'))));
}
#elif defined(TW_NEON_SIMD)
static inline uint64_t tw_nondigit16(const uint8_t *p)
{
    /* c - '0' > 9 as unsigned bytes */
    uint8x16_t v = vsubq_u8(vld1q_u8(p), vdupq_n_u8('0'));
    return tw_neon_nibbles(vcgtq_u8(v, vdupq_n_u8(9)));
}
#endif

/* End of the run of ASCII digits starting at p; simd: as tw_skip_unmarked. */
static inline const uint8_t *tw_digits(const uint8_t *p, const uint8_t *e, int simd)
{
    p = tw_skip_unmarked(p, e, simd, TW_MARK16(tw_nondigit16), tw_nondigit8);
    while (p < e && tw_is_digit(*p))
        p++;
    return p;
}

#ifdef TW_X86_SIMD
/* Up to 32 elements of 32 bits at p as vectors of 8 (lane i of a[k] is element 8k + i), the
   lanes past len zero (masked loads: nothing past them is read); returns the bits of the
   len lanes. */
TW_TARGET_AVX2 static inline TW_ALWAYS_INLINE uint32_t tw_load32_avx2_n(const void *p, size_t len, __m256i *a,
                                                                      const unsigned nvec)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    TW_UNROLL4 for (unsigned k = 0; k < nvec; k++)
        a[k] = _mm256_maskload_epi32((const int *)p + 8 * k,
                                     _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(len - 8 * k)), lane));
    return len >= 32 ? ~UINT32_C(0) : (UINT32_C(1) << len) - 1;
}

/* The same, the vector count (len + 7) / 8 worked out here. */
TW_TARGET_AVX2 static inline uint32_t tw_load32_avx2(const void *p, size_t len, __m256i *a)
{
    return tw_load32_avx2_n(p, len, a, (unsigned)(len + 7) / 8);
}

/* The lanes of up to 4 vectors of 8 ids (lane i of a[k] is element 8k + i) that repeat an
   earlier lane, a bit each, without a branch: each vector against its own rotations (lane i
   against lane i - r, for i >= r) and against every rotation of each vector before it. One
   body a vector count (tw_repeats_avx2 picks it), so that the loops unroll and the
   accumulators stay in registers. */
TW_TARGET_AVX2 static inline TW_ALWAYS_INLINE uint32_t tw_repeats_avx2_n(const __m256i *a, const size_t nvec)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i rep[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                      _mm256_setzero_si256()};
    uint32_t bits = 0;
    TW_UNROLL8 for (int r = 0; r < 8; r++) {
        __m256i idx = _mm256_and_si256(_mm256_sub_epi32(lane, _mm256_set1_epi32(r)), _mm256_set1_epi32(7));
        __m256i later = _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(r - 1)); /* lanes i >= r */
        TW_UNROLL4 for (size_t k = 0; k < nvec; k++) {
            __m256i turned = _mm256_permutevar8x32_epi32(a[k], idx);
            if (r)
                rep[k] = _mm256_or_si256(rep[k], _mm256_and_si256(_mm256_cmpeq_epi32(a[k], turned), later));
            TW_UNROLL4 for (size_t k2 = k + 1; k2 < nvec; k2++)
                rep[k2] = _mm256_or_si256(rep[k2], _mm256_cmpeq_epi32(a[k2], turned));
        }
    }
    for (size_t k = 0; k < nvec; k++)
        bits |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(rep[k])) << (8 * k);
    return bits;
}

TW_TARGET_AVX2 static inline uint32_t tw_repeats_avx2(const __m256i *a, size_t nvec)
{
    switch (nvec) {
    case 0:
        return 0;
    case 1:
        return tw_repeats_avx2_n(a, 1);
    case 2:
        return tw_repeats_avx2_n(a, 2);
    case 3:
        return tw_repeats_avx2_n(a, 3);
    default:
        return tw_repeats_avx2_n(a, 4);
    }
}
#endif

#endif
