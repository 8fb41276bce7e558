/*
 * tw_cpu - the one CPU dispatcher of the C kernels.
 *
 * Every kernel with more than one code path (base64, the structural scanner,
 * the per-token record readers, head selection, compact-row validation)
 * takes a `path` argument from the enum below and resolves it with
 * tw_path_resolve, so one setting forces all of them at once and a call
 * never executes instructions the CPU lacks.  Every path gives identical
 * results.
 *
 * The x86-64 SIMD code is compiled with GCC/Clang function target
 * attributes (TW_TARGET_AVX2 / TW_TARGET_AVX512 below), so the whole
 * library builds with default flags and one build serves every x86-64 CPU.
 * On aarch64 Advanced SIMD (NEON) is part of the base architecture: the
 * NEON kernels (TW_NEON_SIMD) need no attribute and no run-time check.
 * TW_NO_SIMD builds the portable code only (every path then resolves to
 * TW_PATH_SCALAR).
 *
 * No global mutable state beyond the compiler runtime's own feature bits;
 * every function is thread-safe.
 */
#ifndef TW_CPU_H
#define TW_CPU_H

#ifdef __cplusplus
extern "C" {
#endif

enum {
    TW_PATH_AUTO = 0,   /* the best path available on this CPU */
    TW_PATH_SCALAR = 1, /* portable C (8-byte SWAR where it helps) */
    TW_PATH_AVX2 = 2,   /* x86-64 AVX2 + FMA + BMI1/BMI2 + POPCNT */
    TW_PATH_AVX512 = 3, /* the AVX2 set + AVX-512 F/BW/VL/CD/DQ/VBMI/VBMI2 */
    TW_PATH_NEON = 4    /* aarch64 Advanced SIMD (baseline on every aarch64 CPU) */
};

/* The highest path value, for loops over every path. */
#define TW_PATH_LAST TW_PATH_NEON

/* 1 if this CPU (and this build) can run `path`; TW_PATH_AUTO and
   TW_PATH_SCALAR always give 1, unknown values give 0. */
int tw_path_available(int path);

/* The path TW_PATH_AUTO resolves to on this CPU (the best available). */
int tw_path_best(void);

/* The path a kernel runs for `path`: TW_PATH_SCALAR stays scalar; an
   available SIMD path is itself; TW_PATH_AUTO, a path this CPU lacks and an
   unknown value give tw_path_best(). */
int tw_path_resolve(int path);

/* "auto", "scalar", "avx2", "avx512", "neon"; "unknown" for anything else. */
const char *tw_path_name(int path);

/* TW_X86_SIMD: this build compiles the x86-64 SIMD kernels.  The kernels
   mark them with these attributes, which list exactly the features
   tw_path_available checks. */
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(_MSC_VER) && !defined(TW_NO_SIMD)
#if defined(__clang__) ? (__clang_major__ >= 8) : (__GNUC__ >= 8)
#define TW_X86_SIMD 1
#define TW_TARGET_AVX2 __attribute__((target("avx2,fma,bmi,bmi2,popcnt")))
#define TW_TARGET_AVX512                                                                \
    __attribute__((target("avx2,fma,bmi,bmi2,popcnt,avx512f,avx512bw,avx512vl,avx512cd," \
                          "avx512dq,avx512vbmi,avx512vbmi2")))
#endif
#endif

/* TW_NEON_SIMD: this build compiles the aarch64 NEON kernels (GCC/Clang;
   <arm_neon.h> is all they need). */
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(_MSC_VER) && \
    !defined(TW_NO_SIMD) && defined(__ARM_NEON)
#define TW_NEON_SIMD 1
#endif

#ifdef __cplusplus
}
#endif

#endif /* TW_CPU_H */
