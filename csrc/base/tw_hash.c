#include "base/tw_hash.h"
#include "base/tw_util.h"

#include <string.h>

TW_HASH_HIDDEN uint64_t tw_hash_tab[4][256];

static uint8_t tw_hash_key[16]; /* tw_hash_bytes' key */
static int tw_hash_seeded;

static inline uint64_t rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

/* One SipRound on the state v[0..3]. */
#define TW_SIPROUND(v0, v1, v2, v3)                                                          \
    do {                                                                                     \
        v0 += v1; v1 = rotl64(v1, 13); v1 ^= v0; v0 = rotl64(v0, 32);                        \
        v2 += v3; v3 = rotl64(v3, 16); v3 ^= v2;                                             \
        v0 += v3; v3 = rotl64(v3, 21); v3 ^= v0;                                             \
        v2 += v1; v1 = rotl64(v1, 17); v1 ^= v2; v2 = rotl64(v2, 32);                        \
    } while (0)

/* SipHash with c compression and d finalization rounds, as the algorithm's paper defines
   it: the state from the key and four constants, each 8-byte little-endian word of the
   message absorbed (XOR-ed into v3, c rounds, XOR-ed into v0), then the last 0-7 bytes with
   the length's low byte on top as one more word, then 0xff into v2 and d rounds. */
static inline uint64_t siphash(uint64_t k0, uint64_t k1, const uint8_t *s, size_t n, int c,
                               int d)
{
    uint64_t v0 = k0 ^ UINT64_C(0x736f6d6570736575);
    uint64_t v1 = k1 ^ UINT64_C(0x646f72616e646f6d);
    uint64_t v2 = k0 ^ UINT64_C(0x6c7967656e657261);
    uint64_t v3 = k1 ^ UINT64_C(0x7465646279746573);
    size_t whole = n & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = tw_load_le64(s + i);
        v3 ^= m;
        for (int r = 0; r < c; r++)
            TW_SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t last = (uint64_t)(n & 0xFF) << 56;
    for (size_t i = whole; i < n; i++)
        last |= (uint64_t)s[i] << (8 * (i - whole));
    v3 ^= last;
    for (int r = 0; r < c; r++)
        TW_SIPROUND(v0, v1, v2, v3);
    v0 ^= last;
    v2 ^= 0xFF;
    for (int r = 0; r < d; r++)
        TW_SIPROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t tw_siphash(const uint8_t key[16], const uint8_t *s, size_t n, int c, int d)
{
    return siphash(tw_load_le64(key), tw_load_le64(key + 8), s, n, c, d);
}

uint64_t tw_hash_bytes(const uint8_t *s, size_t n)
{
    return siphash(tw_load_le64(tw_hash_key), tw_load_le64(tw_hash_key + 8), s, n, 1, 3);
}

int tw_hash_seed(const uint8_t key[32])
{
    if (tw_hash_seeded)
        return 0;
    tw_hash_seeded = 1;
    memcpy(tw_hash_key, key, 16);
    /* The tabulation words: SipHash-2-4 under the other half of the entropy, of the word's
       index (a pseudorandom function in counter mode). */
    uint64_t k0 = tw_load_le64(key + 16), k1 = tw_load_le64(key + 24);
    for (unsigned i = 0; i < 4 * 256; i++) {
        uint8_t index[2] = {(uint8_t)(i & 0xFF), (uint8_t)(i >> 8)};
        tw_hash_tab[i >> 8][i & 0xFF] = siphash(k0, k1, index, sizeof index, 2, 4);
    }
    return 1;
}
