/*
 * Throughput benchmark for csrc/codecs/tw_base64.c (see Makefile: make bench).
 *   ./bench_base64 [min_seconds_per_case]
 * For each encoded size S (1 KiB, 64 KiB, 16 MiB) it times decoding S
 * characters and encoding 3S/4 bytes (S characters out), and prints GB/s
 * counted in base64 characters, median of several batches.
 */
#define _POSIX_C_SOURCE 199309L
#include "codecs/tw_base64.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static volatile ptrdiff_t g_sink;

/* Median seconds per call over `samples` batches of `iters` calls. */
static double time_it(int decode, const void *in, size_t n, void *out, int path,
                      long iters, int samples)
{
    double t[64];
    int s;
    long i;
    for (s = 0; s < samples; s++) {
        double t0 = now();
        if (decode) {
            size_t e;
            for (i = 0; i < iters; i++)
                g_sink = tw_b64_decode((const char *)in, n, (uint8_t *)out, n / 4 * 3, path, &e);
        } else {
            for (i = 0; i < iters; i++)
                g_sink = (ptrdiff_t)tw_b64_encode((const uint8_t *)in, n, (char *)out, path);
        }
        t[s] = (now() - t0) / (double)iters;
    }
    qsort(t, (size_t)samples, sizeof t[0], cmp_d);
    return t[samples / 2];
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1024, 65536, 16u << 20};
    double min_s = argc > 1 ? atof(argv[1]) : 0.05;
    size_t si;
    int path;
    printf("%-7s %-9s %12s %12s\n", "path", "size", "decode GB/s", "encode GB/s");
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t S = sizes[si], raw_n = S / 4 * 3, i;
        uint8_t *raw = (uint8_t *)malloc(raw_n), *dec = (uint8_t *)malloc(raw_n);
        char *enc = (char *)malloc(S), *enc2 = (char *)malloc(S);
        uint64_t x = 88172645463325252ull;
        for (i = 0; i < raw_n; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            raw[i] = (uint8_t)x;
        }
        tw_b64_encode(raw, raw_n, enc, TW_PATH_SCALAR);
        for (path = TW_PATH_SCALAR; path <= TW_PATH_LAST; path++) {
            double td, te, t0;
            long iters = 1;
            if (!tw_path_available(path)) continue;
            if (tw_b64_decode(enc, S, dec, raw_n, path, NULL) != (ptrdiff_t)raw_n ||
                memcmp(dec, raw, raw_n) != 0) {
                printf("decode mismatch\n");
                return 1;
            }
            /* calibrate: a batch should take ~min_s/10 */
            for (;;) {
                t0 = now();
                time_it(1, enc, S, dec, path, iters, 1);
                if (now() - t0 > min_s / 10 || iters > (1L << 30)) break;
                iters *= 2;
            }
            td = time_it(1, enc, S, dec, path, iters, 11);
            te = time_it(0, raw, raw_n, enc2, path, iters, 11);
            printf("%-7s %-9zu %12.2f %12.2f\n", tw_path_name(path), S, S / td / 1e9,
                   S / te / 1e9);
        }
        free(raw); free(dec); free(enc); free(enc2);
    }
    return 0;
}
