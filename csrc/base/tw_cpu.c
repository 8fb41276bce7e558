/* tw_cpu - CPU feature detection and path resolution.  See tw_cpu.h. */
#include "base/tw_cpu.h"

/* The GCC and Clang runtimes behind __builtin_cpu_supports report AVX and
   AVX-512 features only when the OS has enabled the matching register state
   (XCR0, read with xgetbv), so no separate check is needed here.  The
   feature bits are computed once by the runtime; __builtin_cpu_init makes
   the query valid even from code that runs before constructors. */
#ifdef TW_X86_SIMD
static int tw_cpu_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
           __builtin_cpu_supports("popcnt");
}

static int tw_cpu_avx512(void)
{
    return tw_cpu_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2");
}
#else
static int tw_cpu_avx2(void) { return 0; }
static int tw_cpu_avx512(void) { return 0; }
#endif

/* Advanced SIMD is mandatory in AArch64: present whenever the build has the kernels. */
#ifdef TW_NEON_SIMD
static int tw_cpu_neon(void) { return 1; }
#else
static int tw_cpu_neon(void) { return 0; }
#endif

int tw_path_available(int path)
{
    switch (path) {
    case TW_PATH_AUTO:
    case TW_PATH_SCALAR:
        return 1;
    case TW_PATH_AVX2:
        return tw_cpu_avx2();
    case TW_PATH_AVX512:
        return tw_cpu_avx512();
    case TW_PATH_NEON:
        return tw_cpu_neon();
    default:
        return 0;
    }
}

int tw_path_best(void)
{
    if (tw_cpu_avx512()) return TW_PATH_AVX512;
    if (tw_cpu_avx2()) return TW_PATH_AVX2;
    if (tw_cpu_neon()) return TW_PATH_NEON;
    return TW_PATH_SCALAR;
}

int tw_path_resolve(int path)
{
    if (path == TW_PATH_SCALAR) return TW_PATH_SCALAR;
    if ((path == TW_PATH_AVX2 || path == TW_PATH_AVX512 || path == TW_PATH_NEON) &&
        tw_path_available(path))
        return path;
    return tw_path_best();
}

const char *tw_path_name(int path)
{
    switch (path) {
    case TW_PATH_AUTO:
        return "auto";
    case TW_PATH_SCALAR:
        return "scalar";
    case TW_PATH_AVX2:
        return "avx2";
    case TW_PATH_AVX512:
        return "avx512";
    case TW_PATH_NEON:
        return "neon";
    default:
        return "unknown";
    }
}
