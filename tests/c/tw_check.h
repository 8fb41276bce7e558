/* The assertion macro and counters shared by the standalone C tests. A failed CHECK is
   counted and (for the first TW_CHECK_MAX_REPORTS failures) reported; tests go on. */
#ifndef TW_CHECK_H
#define TW_CHECK_H

#include <stdio.h>

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

#endif
