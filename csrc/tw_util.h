/* Small bit and character helpers shared by the C kernels (header-only, static inline). */
#ifndef TW_UTIL_H
#define TW_UTIL_H

#include <stdint.h>

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

/* Index of the lowest set bit of x (x != 0). */
static inline unsigned tw_ctz32(uint32_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_ctz(x);
#elif defined(_MSC_VER)
    unsigned long i;
    _BitScanForward(&i, x);
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
