/*
 * tw_base64 - strict base64 codec with scalar, AVX2, AVX-512 VBMI and
 * aarch64 NEON paths.
 * See tw_base64.h for the contract.
 *
 * Layout of the decoders: the input is split into a "body" (every quantum
 * but the last one, which can hold no padding) and the final quantum.  A
 * SIMD kernel decodes as much of the body as it can without reading or
 * writing out of bounds, the scalar kernel finishes the body, and the final
 * quantum (padding) is handled separately.  Kernels only accumulate an error
 * flag; when it is set, a slow pass (tw_locate_error) finds the offset to
 * report.  Encoders likewise: a SIMD kernel consumes whole 3-byte groups,
 * the scalar code does the rest and the padding.
 *
 * The SIMD kernels are compiled with GCC/Clang function target attributes,
 * so the file builds with default flags; the path is chosen at run time
 * (tw_cpu.h).
 */
#include "codecs/tw_base64.h"
#include "base/tw_util.h"

#include <string.h>

#ifdef TW_X86_SIMD
#include <immintrin.h>
#endif
#ifdef TW_NEON_SIMD
#include <arm_neon.h>
#endif

/* The SIMD decoders ask for the input this many bytes ahead of the bytes they
   decode: a string of megabytes (MoE routing) comes from memory, not from a
   cache, and the prefetchers alone leave the loop waiting for it (8 MB
   decoded in 1.05-1.10 ms without, 0.81-0.89 ms with, on a shared EPYC;
   no cost when the input is cached).  A prefetch never faults, so the
   address may lie past the input; it is formed as an integer, since a
   pointer past the object would not be valid C. */
#define TW_DEC_AHEAD 2048
#define TW_AHEAD(p) ((const void *)((uintptr_t)(const void *)(p) + TW_DEC_AHEAD))
#if defined(__GNUC__) || defined(__clang__)
#define TW_PREFETCH_AHEAD(p) __builtin_prefetch(TW_AHEAD(p), 0, 3)
#elif defined(TW_X86_SIMD)
#define TW_PREFETCH_AHEAD(p) _mm_prefetch((const char *)TW_AHEAD(p), _MM_HINT_T0)
#else
#define TW_PREFETCH_AHEAD(p) ((void)0)
#endif

/* TW_LE enables little-endian shortcuts; TW_GENERIC_ENDIAN forces the
   byte-order independent code (used to test it on x86). */
#if defined(TW_GENERIC_ENDIAN)
#elif defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define TW_LE 1
#endif
#elif defined(_M_X64) || defined(_M_IX86) || defined(_M_ARM64)
#define TW_LE 1
#endif


/* ------------------------------------------------------------------------ */
/* Tables (constant, built by the preprocessor)                              */
/* ------------------------------------------------------------------------ */

#define TW_R4(F, b) F(b), F((b) + 1), F((b) + 2), F((b) + 3)
#define TW_R16(F, b) \
    TW_R4(F, b), TW_R4(F, (b) + 4), TW_R4(F, (b) + 8), TW_R4(F, (b) + 12)
#define TW_R64(F, b)                                                  \
    TW_R16(F, b), TW_R16(F, (b) + 16), TW_R16(F, (b) + 32),           \
        TW_R16(F, (b) + 48)
#define TW_R256(F, b)                                                 \
    TW_R64(F, b), TW_R64(F, (b) + 64), TW_R64(F, (b) + 128),          \
        TW_R64(F, (b) + 192)
#define TW_R4096(F)                                                   \
    TW_R256(F, 0), TW_R256(F, 256), TW_R256(F, 512), TW_R256(F, 768), \
        TW_R256(F, 1024), TW_R256(F, 1280), TW_R256(F, 1536),         \
        TW_R256(F, 1792), TW_R256(F, 2048), TW_R256(F, 2304),         \
        TW_R256(F, 2560), TW_R256(F, 2816), TW_R256(F, 3072),         \
        TW_R256(F, 3328), TW_R256(F, 3584), TW_R256(F, 3840)

/* 6-bit value of ASCII character code c, 0xFF if not in the alphabet. */
#define TW_VAL(c)                                  \
    (((c) >= 'A' && (c) <= 'Z')   ? (c) - 'A'      \
     : ((c) >= 'a' && (c) <= 'z') ? (c) - 'a' + 26 \
     : ((c) >= '0' && (c) <= '9') ? (c) - '0' + 52 \
     : ((c) == '+')               ? 62             \
     : ((c) == '/')               ? 63             \
                                  : 0xFF)

/* Character of 6-bit value v. */
#define TW_CHR(v)                       \
    ((v) < 26   ? 'A' + (v)             \
     : (v) < 52 ? 'a' + ((v) - 26)      \
     : (v) < 62 ? '0' + ((v) - 52)      \
     : (v) == 62 ? '+'                  \
                 : '/')

/*
 * Scalar decoding tables.  For a quantum c0 c1 c2 c3 the three output bytes,
 * as a little-endian 24-bit word, are dec0[c0] | dec1[c1] | dec2[c2] |
 * dec3[c3].  Characters outside the alphabet map to TW_BAD, whose bits lie
 * above bit 23 only, so an OR of entries has bits 24..31 set iff one of the
 * characters is invalid.
 */
#define TW_BAD 0xFF000000u
#define TW_D0(c) (TW_VAL(c) == 0xFF ? TW_BAD : (uint32_t)TW_VAL(c) << 2)
#define TW_D1(c)                                             \
    (TW_VAL(c) == 0xFF ? TW_BAD                              \
                       : ((uint32_t)TW_VAL(c) >> 4) |        \
                             (((uint32_t)TW_VAL(c) & 15u) << 12))
#define TW_D2(c)                                             \
    (TW_VAL(c) == 0xFF ? TW_BAD                              \
                       : (((uint32_t)TW_VAL(c) >> 2) << 8) | \
                             (((uint32_t)TW_VAL(c) & 3u) << 22))
#define TW_D3(c) (TW_VAL(c) == 0xFF ? TW_BAD : (uint32_t)TW_VAL(c) << 16)

static const uint32_t tw_dec0[256] = {TW_R256(TW_D0, 0)};
static const uint32_t tw_dec1[256] = {TW_R256(TW_D1, 0)};
static const uint32_t tw_dec2[256] = {TW_R256(TW_D2, 0)};
static const uint32_t tw_dec3[256] = {TW_R256(TW_D3, 0)};

/* 1 for the 64 alphabet characters. */
#define TW_ISB64(c) (TW_VAL(c) != 0xFF)
static const uint8_t tw_isb64[256] = {TW_R256(TW_ISB64, 0)};

/* Scalar encoding table: the two characters of each 12-bit value. */
#define TW_E2(x) {(char)TW_CHR((x) >> 6), (char)TW_CHR((x) & 63)}
static const char tw_enc2[4096][2] = {TW_R4096(TW_E2)};

static const char tw_alphabet[64] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* ------------------------------------------------------------------------ */
/* Small memory helpers                                                      */
/* ------------------------------------------------------------------------ */

static inline void tw_store_le64(uint8_t *p, uint64_t v)
{
#ifdef TW_LE
    memcpy(p, &v, 8);
#else
    int k;
    for (k = 0; k < 8; k++) p[k] = (uint8_t)(v >> (8 * k));
#endif
}

static inline uint64_t tw_load_be64(const uint8_t *p)
{
#if defined(TW_LE) && (defined(__GNUC__) || defined(__clang__))
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
#else
    return ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) |
           ((uint64_t)p[2] << 40) | ((uint64_t)p[3] << 32) |
           ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) |
           ((uint64_t)p[6] << 8) | (uint64_t)p[7];
#endif
}

static inline void tw_put2(char *p, uint32_t x12) { memcpy(p, tw_enc2[x12], 2); }

/* ------------------------------------------------------------------------ */
/* Sizes and error location                                                  */
/* ------------------------------------------------------------------------ */

size_t tw_b64_encoded_size(size_t n) { return n / 3 * 4 + (n % 3 ? 4 : 0); }

ptrdiff_t tw_b64_decoded_size(const char *src, size_t len)
{
    size_t pads = 0;
    if (len % 4 != 0) return -1;
    if (len == 0) return 0;
    while (pads < len && pads < 3 && src[len - 1 - pads] == '=') pads++;
    if (pads > 2) return -1;
    return (ptrdiff_t)(len / 4 * 3 - pads);
}

/* First byte that cannot stand at its position (see tw_base64.h), or len. */
static size_t tw_locate_error(const uint8_t *s, size_t len)
{
    size_t i;
    for (i = 0; i < len; i++) {
        uint8_t c = s[i];
        if (tw_isb64[c]) continue;
        if (c == '=' &&
            (i == len - 1 || (i == len - 2 && s[len - 1] == '=')))
            continue;
        return i;
    }
    return len;
}

/* ------------------------------------------------------------------------ */
/* Scalar kernels                                                            */
/* ------------------------------------------------------------------------ */

#define TW_Q(s) \
    (tw_dec0[(s)[0]] | tw_dec1[(s)[1]] | tw_dec2[(s)[2]] | tw_dec3[(s)[3]])

/* Decode n (multiple of 4) unpadded characters into 3n/4 bytes.  Returns
   nonzero if some character is outside the alphabet. */
static int tw_dec_scalar_body(const uint8_t *s, size_t n, uint8_t *d)
{
    uint32_t err = 0;
    size_t i = 0;
    /* 8 characters -> 6 bytes with one 8-byte store; the store stays
       within 3n/4 as long as i + 12 <= n. */
    for (; i + 36 <= n; i += 32, d += 24) {
        uint32_t a = TW_Q(s + i), b = TW_Q(s + i + 4);
        uint32_t c = TW_Q(s + i + 8), e = TW_Q(s + i + 12);
        uint32_t f = TW_Q(s + i + 16), g = TW_Q(s + i + 20);
        uint32_t h = TW_Q(s + i + 24), k = TW_Q(s + i + 28);
        err |= a | b | c | e | f | g | h | k;
        tw_store_le64(d, a | (uint64_t)b << 24);
        tw_store_le64(d + 6, c | (uint64_t)e << 24);
        tw_store_le64(d + 12, f | (uint64_t)g << 24);
        tw_store_le64(d + 18, h | (uint64_t)k << 24);
    }
    for (; i + 12 <= n; i += 8, d += 6) {
        uint32_t a = TW_Q(s + i), b = TW_Q(s + i + 4);
        err |= a | b;
        tw_store_le64(d, a | (uint64_t)b << 24);
    }
    for (; i < n; i += 4, d += 3) {
        uint32_t a = TW_Q(s + i);
        err |= a;
        d[0] = (uint8_t)a;
        d[1] = (uint8_t)(a >> 8);
        d[2] = (uint8_t)(a >> 16);
    }
    return (err >> 24) != 0;
}

/* Encode whole 3-byte groups of src[0:n] (n % 3 == 0). */
static void tw_enc_scalar_groups(const uint8_t *s, size_t n, char *d)
{
    size_t i = 0;
    /* 6 bytes -> 8 characters per 8-byte load (needs i + 8 <= n), one
       2-character store per table lookup. */
    for (; i + 14 <= n; i += 12, d += 16) {
        uint64_t w = tw_load_be64(s + i), u = tw_load_be64(s + i + 6);
        tw_put2(d, (uint32_t)(w >> 52));
        tw_put2(d + 2, (uint32_t)(w >> 40) & 0xFFF);
        tw_put2(d + 4, (uint32_t)(w >> 28) & 0xFFF);
        tw_put2(d + 6, (uint32_t)(w >> 16) & 0xFFF);
        tw_put2(d + 8, (uint32_t)(u >> 52));
        tw_put2(d + 10, (uint32_t)(u >> 40) & 0xFFF);
        tw_put2(d + 12, (uint32_t)(u >> 28) & 0xFFF);
        tw_put2(d + 14, (uint32_t)(u >> 16) & 0xFFF);
    }
    for (; i + 8 <= n; i += 6, d += 8) {
        uint64_t w = tw_load_be64(s + i);
        tw_put2(d, (uint32_t)(w >> 52));
        tw_put2(d + 2, (uint32_t)(w >> 40) & 0xFFF);
        tw_put2(d + 4, (uint32_t)(w >> 28) & 0xFFF);
        tw_put2(d + 6, (uint32_t)(w >> 16) & 0xFFF);
    }
    for (; i < n; i += 3, d += 4) {
        uint32_t x = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        tw_put2(d, x >> 12);
        tw_put2(d + 2, x & 0xFFF);
    }
}

/* ------------------------------------------------------------------------ */
/* AVX2 kernels                                                              */
/* ------------------------------------------------------------------------ */

#ifdef TW_X86_SIMD

/* Translate and pack 32 characters into 24 bytes (in the low 24 bytes of the
   result, the rest zero); OR validation bits into *err. */
TW_TARGET_AVX2 static inline __m256i tw_avx2_dec32(__m256i v, __m256i *err)
{
    /* Validation: a character is valid iff lut_hi[hi] & lut_lo[lo] == 0.
       Class bits: 0x01 high nibble never valid (0,1,8..F); 0x02 high nibble
       2 (only '+' 0x2B and '/' 0x2F); 0x04 high nibble 3 (digits 0..9);
       0x08 high nibble 4/6 (low nibble 0 invalid); 0x10 high nibble 5/7
       (low nibble B..F invalid).  lut_lo[l] has the bit of every class in
       which l is invalid. */
    const __m256i lut_lo = _mm256_setr_epi8(
        0x0B, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x07,
        0x15, 0x17, 0x17, 0x17, 0x15, 0x0B, 0x03, 0x03, 0x03, 0x03, 0x03,
        0x03, 0x03, 0x03, 0x03, 0x07, 0x15, 0x17, 0x17, 0x17, 0x15);
    const __m256i lut_hi = _mm256_setr_epi8(
        0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x08, 0x10, 0x01, 0x01, 0x01,
        0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x02, 0x04, 0x08, 0x10,
        0x08, 0x10, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01);
    /* Offset added to a character to get its value, indexed by the high
       nibble, minus one for '/': '/' +16, '+' +19, digits +4, upper -65,
       lower -71. */
    const __m256i lut_roll = _mm256_setr_epi8(
        0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 19, 4,
        -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0);
    /* Per dword: value (c0<<18|c1<<12|c2<<6|c3) little-endian, so output
       bytes are at dword offsets 2, 1, 0. */
    const __m256i pack = _mm256_setr_epi8(
        2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1, 2, 1, 0, 6, 5,
        4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1);
    /* One constant, '/' (0x2F), both finds the slashes and masks the nibbles: a shuffle
       index uses its low four bits (and bit 7, clear here), so the mask's bit 5 changes no
       lookup; hi + slash (the roll index) keeps bit 7 clear, as '/' has high nibble 2. */
    const __m256i m2f = _mm256_set1_epi8('/');
    __m256i hi = _mm256_and_si256(_mm256_srli_epi32(v, 4), m2f);
    __m256i lo = _mm256_and_si256(v, m2f);
    __m256i bad = _mm256_and_si256(_mm256_shuffle_epi8(lut_lo, lo),
                                   _mm256_shuffle_epi8(lut_hi, hi));
    __m256i slash = _mm256_cmpeq_epi8(v, m2f);
    __m256i roll = _mm256_shuffle_epi8(lut_roll, _mm256_add_epi8(hi, slash));
    __m256i t = _mm256_add_epi8(v, roll);
    *err = _mm256_or_si256(*err, bad);
    t = _mm256_maddubs_epi16(t, _mm256_set1_epi32(0x01400140));
    t = _mm256_madd_epi16(t, _mm256_set1_epi32(0x00011000));
    t = _mm256_shuffle_epi8(t, pack);
    return _mm256_permutevar8x32_epi32(t, _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7));
}

/* Decode a prefix of the n unpadded body characters; returns the number of
   characters consumed (multiple of 32), sets *bad on an invalid one. */
TW_TARGET_AVX2 static size_t tw_dec_avx2(const uint8_t *s, size_t n,
                                         uint8_t *d, int *bad)
{
    __m256i err = _mm256_setzero_si256();
    size_t i = 0;
    /* Full 32-byte stores while 3i/4 + 32 <= 3n/4, i.e. i + 44 <= n (i + 140 for the
       last store of four, at 3i/4 + 72). */
    for (; i + 140 <= n; i += 128, d += 96) {
        TW_PREFETCH_AHEAD(s + i);
        TW_PREFETCH_AHEAD(s + i + 64);
        __m256i a = tw_avx2_dec32(_mm256_loadu_si256((const __m256i *)(s + i)), &err);
        __m256i b = tw_avx2_dec32(_mm256_loadu_si256((const __m256i *)(s + i + 32)), &err);
        _mm256_storeu_si256((__m256i *)d, a);
        _mm256_storeu_si256((__m256i *)(d + 24), b);
        a = tw_avx2_dec32(_mm256_loadu_si256((const __m256i *)(s + i + 64)), &err);
        b = tw_avx2_dec32(_mm256_loadu_si256((const __m256i *)(s + i + 96)), &err);
        _mm256_storeu_si256((__m256i *)(d + 48), a);
        _mm256_storeu_si256((__m256i *)(d + 72), b);
    }
    for (; i + 76 <= n; i += 64, d += 48) {
        TW_PREFETCH_AHEAD(s + i);
        __m256i a = tw_avx2_dec32(_mm256_loadu_si256((const __m256i *)(s + i)), &err);
        __m256i b = tw_avx2_dec32(_mm256_loadu_si256((const __m256i *)(s + i + 32)), &err);
        _mm256_storeu_si256((__m256i *)d, a);
        _mm256_storeu_si256((__m256i *)(d + 24), b);
    }
    for (; i + 44 <= n; i += 32, d += 24) {
        __m256i a = tw_avx2_dec32(_mm256_loadu_si256((const __m256i *)(s + i)), &err);
        _mm256_storeu_si256((__m256i *)d, a);
    }
    for (; i + 32 <= n; i += 32, d += 24) {
        __m256i a = tw_avx2_dec32(_mm256_loadu_si256((const __m256i *)(s + i)), &err);
        _mm_storeu_si128((__m128i *)d, _mm256_castsi256_si128(a));
        _mm_storel_epi64((__m128i *)(d + 16), _mm256_extracti128_si256(a, 1));
    }
    *bad = !_mm256_testz_si256(err, err);
    return i;
}

/* 24 input bytes, laid out as 12 bytes at offset 4 of the low lane and 12
   at offset 0 of the high lane, to 32 characters. */
TW_TARGET_AVX2 static inline __m256i tw_avx2_enc24(__m256i v)
{
    const __m256i spread = _mm256_setr_epi8(
        5, 4, 6, 5, 8, 7, 9, 8, 11, 10, 12, 11, 14, 13, 15, 14, 1, 0, 2, 1, 4,
        3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
    /* Offset to add to a 6-bit value, by class: 0 -> 26..51 ('a'-26),
       1..10 -> 52..61 ('0'-52), 11 -> 62, 12 -> 63, 13 -> 0..25 ('A'). */
    const __m256i shift = _mm256_setr_epi8(
        71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 65, 0, 0, 71, -4,
        -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 65, 0, 0);
    __m256i t0, t1, idx, cls;
    /* Each dword gets bytes [b, a, c, b] of a group a b c. */
    v = _mm256_shuffle_epi8(v, spread);
    /* Fields: a>>2 and (b&15)<<2|c>>6 via mulhi, the two others via mullo. */
    t0 = _mm256_and_si256(v, _mm256_set1_epi32(0x0FC0FC00));
    t0 = _mm256_mulhi_epu16(t0, _mm256_set1_epi32(0x04000040));
    t1 = _mm256_and_si256(v, _mm256_set1_epi32(0x003F03F0));
    t1 = _mm256_mullo_epi16(t1, _mm256_set1_epi32(0x01000010));
    idx = _mm256_or_si256(t0, t1);
    cls = _mm256_subs_epu8(idx, _mm256_set1_epi8(51));
    cls = _mm256_or_si256(
        cls, _mm256_and_si256(_mm256_cmpgt_epi8(_mm256_set1_epi8(26), idx),
                              _mm256_set1_epi8(13)));
    return _mm256_add_epi8(idx, _mm256_shuffle_epi8(shift, cls));
}

/* Encode a prefix of src[0:n] made of whole 24-byte blocks; returns the
   number of bytes consumed. */
TW_TARGET_AVX2 static size_t tw_enc_avx2(const uint8_t *s, size_t n, char *d)
{
    size_t i = 0;
    __m256i v;
    if (n < 32) return 0;
    /* First block: load s[0:32] and move dwords so that the low lane has
       s[0:12] at offset 4.  Later blocks load s[i-4:i+28]. */
    v = _mm256_loadu_si256((const __m256i *)s);
    v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6));
    _mm256_storeu_si256((__m256i *)d, tw_avx2_enc24(v));
    i = 24;
    d += 32;
    for (; i + 52 <= n; i += 48, d += 64) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i - 4));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 20));
        _mm256_storeu_si256((__m256i *)d, tw_avx2_enc24(a));
        _mm256_storeu_si256((__m256i *)(d + 32), tw_avx2_enc24(b));
    }
    for (; i + 28 <= n; i += 24, d += 32) {
        v = _mm256_loadu_si256((const __m256i *)(s + i - 4));
        _mm256_storeu_si256((__m256i *)d, tw_avx2_enc24(v));
    }
    return i;
}

/* ------------------------------------------------------------------------ */
/* AVX-512 VBMI kernels                                                      */
/* ------------------------------------------------------------------------ */

/* Translation table for vpermi2b: value of ASCII code c (0..127), 0x80 when
   invalid.  Bytes >= 0x80 are caught by their own sign bit. */
#define TW_V7(c) ((uint8_t)(TW_VAL(c) == 0xFF ? 0x80 : TW_VAL(c)))
static const uint8_t tw_x_dlut[128] = {TW_R64(TW_V7, 0), TW_R64(TW_V7, 64)};
/* vpermb index compacting 16 dwords (bytes at offsets 2, 1, 0 of each)
   into 48 bytes; the top 16 bytes are don't-care. */
#define TW_PK(j) ((uint8_t)((j) < 48 ? 4 * ((j) / 3) + 2 - (j) % 3 : 0))
static const uint8_t tw_x_pack[64] = {TW_R64(TW_PK, 0)};
/* vpermb index spreading 16 groups a b c into dwords [b, a, c, b]. */
#define TW_SP(j) \
    ((uint8_t)(3 * ((j) / 4) + ((j) % 4 == 1 ? 0 : (j) % 4 == 2 ? 2 : 1)))
static const uint8_t tw_x_spread[64] = {TW_R64(TW_SP, 0)};

#define TW_LOAD512(p) _mm512_loadu_si512((const void *)(p))

/* 64 characters (values in t) to 48 bytes in the low part of the result. */
TW_TARGET_AVX512 static inline __m512i tw_avx512_pack(__m512i t, __m512i pk)
{
    t = _mm512_maddubs_epi16(t, _mm512_set1_epi32(0x01400140));
    t = _mm512_madd_epi16(t, _mm512_set1_epi32(0x00011000));
    return _mm512_permutexvar_epi8(pk, t);
}

TW_TARGET_AVX512 static size_t tw_dec_avx512(const uint8_t *s, size_t n,
                                             uint8_t *d, int *bad)
{
    const __m512i lut0 = TW_LOAD512(tw_x_dlut);
    const __m512i lut1 = TW_LOAD512(tw_x_dlut + 64);
    const __m512i pk = TW_LOAD512(tw_x_pack);
    const __mmask64 k48 = 0xFFFFFFFFFFFFull;
    __m512i err = _mm512_setzero_si512();
    size_t i = 0;
    /* Full 64-byte stores while 3i/4 + 64 <= 3n/4, i.e. i + 88 <= n. */
    for (; i + 152 <= n; i += 128, d += 96) {
        TW_PREFETCH_AHEAD(s + i);
        TW_PREFETCH_AHEAD(s + i + 64);
        __m512i a = _mm512_loadu_si512((const void *)(s + i));
        __m512i b = _mm512_loadu_si512((const void *)(s + i + 64));
        __m512i ta = _mm512_permutex2var_epi8(lut0, a, lut1);
        __m512i tb = _mm512_permutex2var_epi8(lut0, b, lut1);
        err = _mm512_ternarylogic_epi64(err, _mm512_or_si512(a, b),
                                        _mm512_or_si512(ta, tb), 0xFE);
        _mm512_storeu_si512((void *)d, tw_avx512_pack(ta, pk));
        _mm512_storeu_si512((void *)(d + 48), tw_avx512_pack(tb, pk));
    }
    for (; i + 64 <= n; i += 64, d += 48) {
        __m512i a = _mm512_loadu_si512((const void *)(s + i));
        __m512i ta = _mm512_permutex2var_epi8(lut0, a, lut1);
        err = _mm512_ternarylogic_epi64(err, a, ta, 0xFE);
        _mm512_mask_storeu_epi8((void *)d, k48, tw_avx512_pack(ta, pk));
    }
    if (i < n) {
        /* Remaining r < 64 characters (multiple of 4): masked load, with
           'A' in the unused lanes, and masked store of 3r/4 bytes. */
        size_t r = n - i;
        __mmask64 kin = ((__mmask64)1 << r) - 1;
        __mmask64 kout = ((__mmask64)1 << (r / 4 * 3)) - 1;
        __m512i a = _mm512_mask_loadu_epi8(_mm512_set1_epi8('A'), kin,
                                           (const void *)(s + i));
        __m512i ta = _mm512_permutex2var_epi8(lut0, a, lut1);
        err = _mm512_ternarylogic_epi64(err, a, ta, 0xFE);
        _mm512_mask_storeu_epi8((void *)d, kout, tw_avx512_pack(ta, pk));
        i = n;
    }
    *bad = _mm512_movepi8_mask(err) != 0;
    return i;
}

/* 48 bytes (in the low part of v) to 64 characters. */
TW_TARGET_AVX512 static inline __m512i tw_avx512_enc48(__m512i v, __m512i sp,
                                                       __m512i al)
{
    /* Each dword [b, a, c, b] = b | a<<8 | c<<16 | b<<24; the four 6-bit
       fields start at bits 10, 4, 22, 16 (and +32 for the second dword). */
    const __m512i shifts = _mm512_set1_epi64(0x3036242A1016040Aull);
    v = _mm512_permutexvar_epi8(sp, v);
    v = _mm512_multishift_epi64_epi8(shifts, v);
    return _mm512_permutexvar_epi8(v, al);
}

/* Encode a prefix of src[0:n] made of whole 3-byte groups, as long as it
   can; returns the number of bytes consumed. */
TW_TARGET_AVX512 static size_t tw_enc_avx512(const uint8_t *s, size_t n,
                                             char *d)
{
    const __m512i sp = TW_LOAD512(tw_x_spread);
    const __m512i al = TW_LOAD512(tw_alphabet);
    size_t i = 0, g;
    for (; i + 112 <= n; i += 96, d += 128) {
        __m512i a = _mm512_loadu_si512((const void *)(s + i));
        __m512i b = _mm512_loadu_si512((const void *)(s + i + 48));
        _mm512_storeu_si512((void *)d, tw_avx512_enc48(a, sp, al));
        _mm512_storeu_si512((void *)(d + 64), tw_avx512_enc48(b, sp, al));
    }
    for (; i + 64 <= n; i += 48, d += 64) {
        __m512i a = _mm512_loadu_si512((const void *)(s + i));
        _mm512_storeu_si512((void *)d, tw_avx512_enc48(a, sp, al));
    }
    /* Up to 21 groups left: masked loads of whole groups. */
    while ((g = (n - i) / 3) > 0) {
        __m512i a;
        if (g > 16) g = 16;
        a = _mm512_maskz_loadu_epi8(((__mmask64)1 << (3 * g)) - 1,
                                    (const void *)(s + i));
        /* 4g <= 64 output bytes: build the mask without a 64-bit shift. */
        _mm512_mask_storeu_epi8((void *)d,
                                ~(__mmask64)0 >> (64 - 4 * g),
                                tw_avx512_enc48(a, sp, al));
        i += 3 * g;
        d += 4 * g;
    }
    return i;
}

#endif /* TW_X86_SIMD */

/* ------------------------------------------------------------------------ */
/* NEON kernels (aarch64)                                                    */
/* ------------------------------------------------------------------------ */

#ifdef TW_NEON_SIMD

/* Value of ASCII code c (0..127), 0xFF when c is outside the alphabet: the
   first 64 codes and the next 64, each one 4-register table of tbl/tbx. */
#define TW_N7(c) ((uint8_t)TW_VAL(c))
static const uint8_t tw_n_dlut[128] = {TW_R64(TW_N7, 0), TW_R64(TW_N7, 64)};

/* Values of 16 characters: codes 0..63 from lo (tbl), 64..127 from hi
   (tbx on c - 64, which leaves the other lanes alone).  A code >= 128
   misses both tables; OR-ing the code itself into the error accumulator
   catches it, as the 0xFF of every other invalid code is caught. */
static inline uint8x16_t tw_neon_values(uint8x16_t c, uint8x16x4_t lo, uint8x16x4_t hi,
                                        uint8x16_t *err)
{
    uint8x16_t v = vqtbl4q_u8(lo, c);
    v = vqtbx4q_u8(v, hi, vsubq_u8(c, vdupq_n_u8(64)));
    *err = vorrq_u8(*err, vorrq_u8(v, c));
    return v;
}

/* Decode a prefix of the n unpadded body characters, 64 at a time (16
   quanta, split by lane position by ld4, joined again by st3); returns the
   number of characters consumed, sets *bad on an invalid one. */
static size_t tw_dec_neon(const uint8_t *s, size_t n, uint8_t *d, int *bad)
{
    const uint8x16x4_t lo = vld1q_u8_x4(tw_n_dlut), hi = vld1q_u8_x4(tw_n_dlut + 64);
    uint8x16_t err = vdupq_n_u8(0);
    size_t i = 0;
    for (; i + 64 <= n; i += 64, d += 48) {
        TW_PREFETCH_AHEAD(s + i);
        uint8x16x4_t q = vld4q_u8(s + i);
        uint8x16_t a = tw_neon_values(q.val[0], lo, hi, &err);
        uint8x16_t b = tw_neon_values(q.val[1], lo, hi, &err);
        uint8x16_t c = tw_neon_values(q.val[2], lo, hi, &err);
        uint8x16_t e = tw_neon_values(q.val[3], lo, hi, &err);
        uint8x16x3_t o;
        /* a<<2 | b>>4, b<<4 | c>>2, c<<6 | e (shift-left-and-insert keeps
           the low bits of its first operand) */
        o.val[0] = vsliq_n_u8(vshrq_n_u8(b, 4), a, 2);
        o.val[1] = vsliq_n_u8(vshrq_n_u8(c, 2), b, 4);
        o.val[2] = vsliq_n_u8(e, c, 6);
        vst3q_u8(d, o);
    }
    /* invalid: a value 0xFF or a code >= 0x80 */
    *bad = vmaxvq_u8(err) >= 0x80;
    return i;
}

/* Encode a prefix of src[0:n] made of whole 48-byte blocks (16 groups,
   split by byte position by ld3, characters joined by st4); returns the
   number of bytes consumed. */
static size_t tw_enc_neon(const uint8_t *s, size_t n, char *d)
{
    const uint8x16x4_t al = vld1q_u8_x4((const uint8_t *)tw_alphabet);
    const uint8x16_t six = vdupq_n_u8(63);
    size_t i = 0;
    for (; i + 48 <= n; i += 48, d += 64) {
        uint8x16x3_t g = vld3q_u8(s + i);
        uint8x16x4_t o;
        /* a>>2, (a<<4 | b>>4) & 63, (b<<2 | c>>6) & 63, c & 63 (shift-right-
           and-insert keeps the high bits of its first operand) */
        o.val[0] = vshrq_n_u8(g.val[0], 2);
        o.val[1] = vandq_u8(vsriq_n_u8(vshlq_n_u8(g.val[0], 4), g.val[1], 4), six);
        o.val[2] = vandq_u8(vsriq_n_u8(vshlq_n_u8(g.val[1], 2), g.val[2], 6), six);
        o.val[3] = vandq_u8(g.val[2], six);
        o.val[0] = vqtbl4q_u8(al, o.val[0]);
        o.val[1] = vqtbl4q_u8(al, o.val[1]);
        o.val[2] = vqtbl4q_u8(al, o.val[2]);
        o.val[3] = vqtbl4q_u8(al, o.val[3]);
        vst4q_u8((uint8_t *)d, o);
    }
    return i;
}

#endif /* TW_NEON_SIMD */

/* ------------------------------------------------------------------------ */
/* Public entry points                                                       */
/* ------------------------------------------------------------------------ */

/* Decode n (multiple of 4) unpadded characters into 3n/4 bytes on `path`
   (SIMD for the bulk, scalar for the rest).  Returns nonzero if some
   character is outside the alphabet. */
static int tw_dec_body(const uint8_t *s, size_t n, uint8_t *d, int path)
{
    int bad = 0;
    size_t i = 0;
#ifdef TW_X86_SIMD
    if (n >= 32) {
        int p = tw_path_resolve(path);
        if (p == TW_PATH_AVX512)
            i = tw_dec_avx512(s, n, d, &bad);
        else if (p == TW_PATH_AVX2)
            i = tw_dec_avx2(s, n, d, &bad);
    }
#elif defined(TW_NEON_SIMD)
    if (n >= 64 && tw_path_resolve(path) == TW_PATH_NEON)
        i = tw_dec_neon(s, n, d, &bad);
#else
    (void)path;
#endif
    return bad | tw_dec_scalar_body(s + i, n - i, d + i / 4 * 3);
}

ptrdiff_t tw_b64_decode(const char *src_, size_t len, uint8_t *dst,
                        size_t cap, int path, size_t *err_pos)
{
    const uint8_t *s = (const uint8_t *)src_;
    size_t body, o, last;
    int bad;
    uint8_t c2, c3;
    uint32_t q;

    if (len == 0) return 0;
    if (TW_UNLIKELY(len % 4 != 0)) goto fail;
    body = len - 4;
    /* More than two '=' at the end: tw_b64_decoded_size() gives -1, so
       fail before writing anything. */
    if (TW_UNLIKELY(s[len - 1] == '=' && s[len - 2] == '=' && s[len - 3] == '='))
        goto fail;
    o = body / 4 * 3;
    /* The body fills o bytes whatever its characters are; the last quantum
       at least one more. */
    if (TW_UNLIKELY(cap <= o)) goto fail;
    bad = tw_dec_body(s, body, dst, path);

    /* Final quantum: "xxxx", "xxx=" or "xx==".  Each byte is read once, and
       its size checked against cap, since src may change under us. */
    s += body;
    c2 = s[2];
    c3 = s[3];
    last = c3 != '=' ? 3 : c2 != '=' ? 2 : 1;
    if (TW_UNLIKELY(cap - o < last)) {
        s -= body;
        goto fail;
    }
    if (last == 3) {
        q = tw_dec0[s[0]] | tw_dec1[s[1]] | tw_dec2[c2] | tw_dec3[c3];
        dst[o] = (uint8_t)q;
        dst[o + 1] = (uint8_t)(q >> 8);
        dst[o + 2] = (uint8_t)(q >> 16);
    } else if (last == 2) {
        q = tw_dec0[s[0]] | tw_dec1[s[1]] | tw_dec2[c2];
        dst[o] = (uint8_t)q;
        dst[o + 1] = (uint8_t)(q >> 8);
    } else {
        q = tw_dec0[s[0]] | tw_dec1[s[1]];
        dst[o] = (uint8_t)q;
    }
    o += last;
    if (TW_LIKELY(!bad && (q >> 24) == 0)) return (ptrdiff_t)o;
    s -= body;

fail:
    if (err_pos) *err_pos = tw_locate_error(s, len);
    return -1;
}

size_t tw_b64_decode_prefix(const char *src, size_t avail, uint8_t *dst,
                            int path)
{
    /* Blocks of TW_PREFIX_BLOCK characters: small enough that the block
       holding the first non-alphabet byte costs little to give back, large
       enough that the per-block call vanishes next to the decoding. */
    enum { TW_PREFIX_BLOCK = 4096 };
    const uint8_t *s = (const uint8_t *)src;
    size_t done = 0;
    while (avail - done >= TW_PREFIX_BLOCK &&
           !tw_dec_body(s + done, TW_PREFIX_BLOCK, dst, path)) {
        done += TW_PREFIX_BLOCK;
        dst += TW_PREFIX_BLOCK / 4 * 3;
    }
    return done;
}

/* The sign bits of the complete little-endian integers of itemsize bytes in
   b[0:n]: a mask with 0x80 at each integer's last byte, ORed over 8-byte
   words (the same mask for every word, as 8 is a multiple of itemsize). */
static uint64_t tw_sign_bits(const uint8_t *b, size_t n, size_t itemsize)
{
    uint8_t bytes[8];
    uint64_t mask, word, acc = 0;
    size_t i, k;
    for (k = 0; k < 8; k++) bytes[k] = k % itemsize == itemsize - 1 ? 0x80 : 0;
    memcpy(&mask, bytes, 8);
    for (i = 0; i + 8 <= n; i += 8) {
        memcpy(&word, b + i, 8);
        acc |= word & mask;
    }
    for (i += itemsize - 1; i < n; i += itemsize) acc |= b[i] & 0x80;
    return acc;
}

ptrdiff_t tw_b64_check_signed(const char *src, size_t len, size_t itemsize,
                              int path, int *negative)
{
    /* 4096 characters decode to 3072 bytes: a multiple of every itemsize,
       so each block holds whole integers. */
    enum { TW_CHECK_BLOCK = 4096 };
    uint8_t block[TW_CHECK_BLOCK / 4 * 3];
    const uint8_t *s = (const uint8_t *)src;
    size_t done = 0;
    uint64_t acc = 0;
    ptrdiff_t got;

    *negative = 0;
    if (itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8)
        return -1;
    if (tw_b64_decoded_size(src, len) < 0) return -1;
    /* Every block but the last holds no '=' (tw_dec_body refuses one); the
       last, which may end in padding, goes through tw_b64_decode. */
    while (len - done > TW_CHECK_BLOCK) {
        if (tw_dec_body(s + done, TW_CHECK_BLOCK, block, path)) return -1;
        acc |= tw_sign_bits(block, sizeof block, itemsize);
        done += TW_CHECK_BLOCK;
    }
    got = tw_b64_decode(src + done, len - done, block, sizeof block, path, NULL);
    if (got < 0) return -1;
    acc |= tw_sign_bits(block, (size_t)got - (size_t)got % itemsize, itemsize);
    *negative = acc != 0;
    return (ptrdiff_t)(done / 4 * 3) + got;
}

size_t tw_b64_encode(const uint8_t *src, size_t len, char *dst, int path)
{
    size_t i = 0, whole = len - len % 3, out = tw_b64_encoded_size(len);
    char *d;
#ifdef TW_X86_SIMD
    if (len >= 32) {
        int p = tw_path_resolve(path);
        if (p == TW_PATH_AVX512)
            i = tw_enc_avx512(src, whole, dst);
        else if (p == TW_PATH_AVX2)
            i = tw_enc_avx2(src, whole, dst);
    }
#elif defined(TW_NEON_SIMD)
    if (len >= 48 && tw_path_resolve(path) == TW_PATH_NEON)
        i = tw_enc_neon(src, whole, dst);
#else
    (void)path;
#endif
    tw_enc_scalar_groups(src + i, whole - i, dst + i / 3 * 4);
    d = dst + whole / 3 * 4;
    if (len - whole == 1) {
        uint32_t a = src[whole];
        d[0] = tw_alphabet[a >> 2];
        d[1] = tw_alphabet[(a & 3) << 4];
        d[2] = '=';
        d[3] = '=';
    } else if (len - whole == 2) {
        uint32_t a = src[whole], b = src[whole + 1];
        d[0] = tw_alphabet[a >> 2];
        d[1] = tw_alphabet[((a & 3) << 4) | (b >> 4)];
        d[2] = tw_alphabet[(b & 15) << 2];
        d[3] = '=';
    }
    return out;
}
