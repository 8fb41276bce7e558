/* What the libFuzzer targets share: the paths this CPU runs, a log of everything a kernel
   gave (fuzz_paths.c compares the logs of every path), and the failure report.

   A target's kernels run on one path and append every output they give to a fz_log (NULL:
   nothing is kept). Doubles go in with their NaNs made one NaN (the kernels promise the same
   decisions, not the same NaN payload); everything else bit for bit. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tw_cpu.h"

typedef struct {
    uint8_t *p;
    size_t n, cap;
} fz_log;

static inline void fz_put(fz_log *l, const void *v, size_t n)
{
    if (!l || !n)
        return;
    if (l->n + n > l->cap) {
        size_t cap = l->cap ? l->cap : 4096;
        while (cap < l->n + n)
            cap *= 2;
        uint8_t *p = (uint8_t *)realloc(l->p, cap);
        if (!p)
            abort();
        l->p = p;
        l->cap = cap;
    }
    memcpy(l->p + l->n, v, n);
    l->n += n;
}

static inline void fz_u64(fz_log *l, uint64_t v) { fz_put(l, &v, sizeof v); }

static inline void fz_f64(fz_log *l, double v)
{
    if (isnan(v))
        v = NAN;
    fz_put(l, &v, sizeof v);
}

static inline void fz_f64s(fz_log *l, const double *v, size_t n)
{
    for (size_t i = 0; l && i < n; i++)
        fz_f64(l, v[i]);
}

static inline void fz_f32s(fz_log *l, const float *v, size_t n)
{
    for (size_t i = 0; l && i < n; i++)
        fz_f64(l, (double)v[i]);
}

static inline void fz_free(fz_log *l)
{
    free(l->p);
    l->p = NULL;
    l->n = l->cap = 0;
}

/* A finding: say what and where, then abort (libFuzzer saves the input). */
#define FZ_FAIL(...)                                                   \
    do {                                                               \
        fprintf(stderr, "fuzz: %s:%d: ", __FILE__, __LINE__);          \
        fprintf(stderr, __VA_ARGS__);                                  \
        fputc('\n', stderr);                                           \
        abort();                                                       \
    } while (0)
#define FZ_CHECK(cond, ...)      \
    do {                         \
        if (!(cond))             \
            FZ_FAIL(__VA_ARGS__); \
    } while (0)

/* Every path this CPU runs as itself, scalar first. */
static inline int fz_paths(int *out)
{
    int n = 0;
    for (int p = TW_PATH_SCALAR; p <= TW_PATH_LAST; p++)
        if (tw_path_available(p) && tw_path_resolve(p) == p)
            out[n++] = p;
    return n;
}

/* A reader of fuzz input: bytes and small numbers taken from the front, zeros once it is
   used up. */
typedef struct {
    const uint8_t *p;
    size_t n;
} fz_in;

static inline uint8_t fz_byte(fz_in *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static inline uint32_t fz_u32(fz_in *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = v << 8 | fz_byte(in);
    return v;
}

#endif
