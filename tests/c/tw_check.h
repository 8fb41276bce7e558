/* What the standalone C tests share: the CHECK and FAIL macros, their counters and the run's
   last line, the deterministic PRNG, the table of the paths this CPU has (each test forces
   them one by one), a whole-file reader, an allocation that exits when memory runs out, and
   allocation failure injection for the kernels a test includes.

   A failed CHECK is counted and (for the first TW_CHECK_MAX_REPORTS failures) reported;
   tests go on. Each program may define, before including this header:
     TW_CHECK_MAX_REPORTS  how many failures are reported (40)
     TW_RNG_SEED           where its PRNG starts (0x9E3779B97F4A7C15)
   now() is there for programs that ask for POSIX.1b (_POSIX_C_SOURCE >= 199309L). */
#ifndef TW_CHECK_H
#define TW_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../../csrc/base/tw_cpu.h"
#include "../../csrc/base/tw_mem.h"

#ifndef TW_CHECK_MAX_REPORTS
#define TW_CHECK_MAX_REPORTS 40
#endif

static unsigned long long g_checks, g_failures;

#define CHECK(cond, ...)                                             \
    do {                                                             \
        g_checks++;                                                  \
        if (!(cond)) {                                               \
            g_failures++;                                            \
            if (g_failures <= TW_CHECK_MAX_REPORTS) {                \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
                fprintf(stderr, __VA_ARGS__);                        \
                fputc('\n', stderr);                                 \
            }                                                        \
        }                                                            \
    } while (0)

/* A check that failed where it was found (counted and reported as CHECK does). */
#define FAIL(...) CHECK(0, __VA_ARGS__)

/* The last line of a run, "N checks, M failures", and main's exit status (1 after a
   failure). tw_mem's cached blocks go back to the system first: valgrind would report them
   as possibly lost (the cache's free lists point into them, not at their start). */
static inline int checks_done(void)
{
    tw_mem_set_limit(0);
    printf("%llu checks, %llu failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}

/* ---- deterministic PRNG (splitmix64) ---- */
#ifndef TW_RNG_SEED
#define TW_RNG_SEED 0x9E3779B97F4A7C15ull
#endif

static uint64_t g_rng = TW_RNG_SEED;

static inline uint64_t rnd(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform enough in [0, n); 0 for n = 0. */
static inline size_t rndn(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* Uniform in [0, 1), 53 bits. */
static inline double rnd01(void) { return (double)(rnd() >> 11) * 0x1p-53; }

/* ---- the paths ---- */

/* Every path this CPU (and this build) runs as itself, TW_PATH_SCALAR first, in enum order:
   scalar, avx2, avx512 on x86-64 (as the CPU has them), scalar and neon on aarch64, scalar
   alone in a TW_NO_SIMD build. A test forces each one in turn: a loop over
   g_paths[0 .. g_npaths - 1] passes it to the kernels as their path argument. */
static int g_paths[TW_PATH_LAST + 1], g_npaths;

/* Fills g_paths (once); the number of paths. */
static inline int paths_init(void)
{
    if (!g_npaths)
        for (int p = TW_PATH_SCALAR; p <= TW_PATH_LAST; p++)
            if (tw_path_available(p) && tw_path_resolve(p) == p)
                g_paths[g_npaths++] = p;
    return g_npaths;
}

/* Prints "paths: NAME NAME ...", then `tail` and a newline. */
static inline void paths_print(const char *tail)
{
    paths_init();
    printf("paths:");
    for (int i = 0; i < g_npaths; i++)
        printf(" %s", tw_path_name(g_paths[i]));
    printf("%s\n", tail ? tail : "");
}

/* ---- memory and files ---- */

/* malloc that exits (status 2) when memory runs out; never NULL, even for 0 bytes. */
static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* The whole file at `path` in a malloc'd block with a spare byte after it (its size in *len);
   NULL, with errno from fopen, when it cannot be opened. Exits (status 2) when it cannot be
   read or memory runs out. */
static inline char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    long n;
    char *buf;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        exit(2);
    buf = (char *)malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
        exit(2);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Allocation failure injection. A program that includes a kernel's .c file includes this
   header first, then points the kernel's allocator at these (#define tw_mem_realloc
   test_realloc, and so on) around the #include: the next g_fail_after allocations succeed,
   the one after fails; -1: none fails. */
static long g_fail_after = -1;

static inline int alloc_fails(void)
{
    if (g_fail_after == 0)
        return 1;
    if (g_fail_after > 0)
        g_fail_after--;
    return 0;
}

static inline void *test_malloc(size_t n) { return alloc_fails() ? NULL : tw_mem_alloc(n); }

static inline void *test_calloc(size_t n, size_t s) { return alloc_fails() ? NULL : tw_mem_calloc(n, s); }

static inline void *test_realloc(void *p, size_t n) { return alloc_fails() ? NULL : tw_mem_realloc(p, n); }

/* Seconds on the monotonic clock, for the benchmarks. */
#ifdef CLOCK_MONOTONIC
static inline double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#endif

#endif
