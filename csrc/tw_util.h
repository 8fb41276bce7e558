/* Small bit and character helpers shared by the C kernels (header-only, static inline). */
#ifndef TW_UTIL_H
#define TW_UTIL_H

#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

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

#endif
