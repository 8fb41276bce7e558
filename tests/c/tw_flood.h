/* The C tests' hash secret, and inputs built to flood the fixed hashes the tables once had
   (the test programs that link csrc/base/tw_hash.c include this). */
#ifndef TW_FLOOD_H
#define TW_FLOOD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../csrc/base/tw_hash.h"

/* The secret from TW_HASH_SEED (a number: a failing run is repeated with the seed it
   printed), else from /dev/urandom, spread over 32 bytes by splitmix64. */
static inline void flood_seed(void)
{
    const char *env = getenv("TW_HASH_SEED");
    uint64_t s = 0;
    uint8_t key[32];
    if (env && *env) {
        s = strtoull(env, NULL, 0);
    } else {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&s, sizeof s, 1, f) != 1)
            s = (uint64_t)(uintptr_t)&s ^ (uint64_t)time(NULL);
        if (f)
            fclose(f);
    }
    printf("hash seed: TW_HASH_SEED=0x%016llx\n", (unsigned long long)s);
    for (int i = 0; i < 4; i++) {
        uint64_t z = (s += UINT64_C(0x9E3779B97F4A7C15));
        z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
        z ^= z >> 31;
        memcpy(key + 8 * i, &z, 8);
    }
    tw_hash_seed(key);
}

/* Id j of a set whose products with 0x9E3779B1 are 0, 1, 2, ... (mod 2^32): every one in
   the first slots of a table slotted by the product's top bits. */
static inline uint32_t flood_id32(uint32_t j)
{
    uint32_t inv = 0x9E3779B1u; /* the inverse mod 2^32 by Newton's iteration */
    for (int i = 0; i < 5; i++)
        inv *= 2u - 0x9E3779B1u * inv;
    return j * inv;
}

/* The first n ids whose products with 0x9E3779B97F4A7C15 have their top 12 bits zero (one
   id in 4096): every one in the first 2^(bits - 12) slots of a table of 2^bits. Malloc'd. */
static inline uint32_t *flood_ids64(size_t n)
{
    uint32_t *ids = malloc(n * sizeof *ids + 1);
    size_t k = 0;
    if (!ids)
        exit(2);
    for (uint64_t id = 0; k < n && id <= UINT32_MAX; id++)
        if ((id * UINT64_C(0x9E3779B97F4A7C15)) >> 52 == 0)
            ids[k++] = (uint32_t)id;
    return ids;
}

/* The first n ids N from 10^6 whose keys "token_id:N" have FNV-1a hashes with their low 16
   bits below 512: one cluster in a table of up to 2^16 slots masked to the low bits. */
static inline uint32_t *flood_keys(size_t n)
{
    uint32_t *ids = malloc(n * sizeof *ids + 1);
    size_t k = 0;
    char key[32];
    if (!ids)
        exit(2);
    for (uint32_t id = 1000000; k < n && id < 10000000; id++) {
        int len = snprintf(key, sizeof key, "token_id:%u", id);
        uint64_t h = UINT64_C(0xcbf29ce484222325);
        for (int i = 0; i < len; i++)
            h = (h ^ (uint8_t)key[i]) * UINT64_C(0x100000001b3);
        if ((h & 0xFFFF) < 512)
            ids[k++] = id;
    }
    return ids;
}

#endif
