/*
 * tw_hash - the keyed hashes of every table whose keys a response chooses.
 *
 * A table slotted by a fixed function can be flooded: whoever reads the function can send
 * ids or keys that all land in one probe cluster, and an open-addressing table then takes
 * quadratic time on a valid response. Every such table hashes with a secret the process
 * draws once (tw_hash_seed), so the slots of a chosen set of keys are as good as random:
 *   - token ids (32 bits) by simple tabulation: four tables of 256 random 64-bit words, one
 *     a byte of the id, XOR-ed. Linear probing with it takes expected constant time an
 *     operation whatever the set of keys (Patrascu and Thorup, "The power of simple
 *     tabulation hashing"); the multiply-shift family does not give that on every set;
 *   - byte strings by SipHash-1-3 (Aumasson and Bernstein), a keyed pseudorandom function:
 *     no collisions that hold whatever the key, as FNV or multiply-xor hashes have.
 * A slot is the top bits of the 64-bit hash (tw_hash_slot); a mask of the low bits is as
 * good for both.
 *
 * Plain C, no Python API. The secret is process state, written by tw_hash_seed only.
 */
#ifndef TW_HASH_H
#define TW_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Draws the process's secret from 32 bytes of entropy (the compiled module calls it at
   import with os.urandom(32); a C program calls it before its first table). The first call
   sets it and returns 1; later calls change nothing and return 0, so a table built by one
   thread is never probed with another secret. */
int tw_hash_seed(const uint8_t key[32]);

/* Hidden where the compiler can say so: a shared library then reads the words without a
   detour through its global offset table. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(_WIN32) && !defined(__CYGWIN__)
#define TW_HASH_HIDDEN __attribute__((visibility("hidden")))
#else
#define TW_HASH_HIDDEN
#endif

/* The tabulation words, 4 x 256 (8 KB); all zero before tw_hash_seed, when every id hashes
   alike: still correct, not flood-proof. */
extern TW_HASH_HIDDEN uint64_t tw_hash_tab[4][256];

static inline uint64_t tw_hash_u32(uint32_t x)
{
    return tw_hash_tab[0][x & 0xFF] ^ tw_hash_tab[1][(x >> 8) & 0xFF] ^
           tw_hash_tab[2][(x >> 16) & 0xFF] ^ tw_hash_tab[3][x >> 24];
}

/* The slot of id x in a table of 2^bits slots (1 <= bits <= 64). */
static inline size_t tw_hash_slot(uint32_t x, unsigned bits)
{
    return (size_t)(tw_hash_u32(x) >> (64 - bits));
}

/* SipHash-1-3 of s[0..n) under the process's secret. */
uint64_t tw_hash_bytes(const uint8_t *s, size_t n);

/* SipHash-c-d of s[0..n) under a 16-byte key (tw_hash_bytes is c = 1, d = 3; the published
   test vectors are for c = 2, d = 4). */
uint64_t tw_siphash(const uint8_t key[16], const uint8_t *s, size_t n, int c, int d);

#endif
