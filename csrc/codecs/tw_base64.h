/*
 * tw_base64 - strict base64 (RFC 4648 standard alphabet, '=' padding)
 * encoder and decoder with scalar, AVX2 and AVX-512 VBMI code paths.
 *
 * Plain C99; no global mutable state, every function is thread-safe.
 * The code path is chosen per call by the `path` argument.
 */
#ifndef TW_BASE64_H
#define TW_BASE64_H

#include <stddef.h>
#include <stdint.h>

#include "base/tw_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Path arguments of the codec functions below: a TW_PATH_* (tw_cpu.h),
 * resolved with tw_path_resolve.  All paths give identical results.
 */

/*
 * Size that decoding src[0:len] produces if it is valid base64, judged from
 * the length and the trailing '=' only: 3*len/4 minus the number of
 * trailing '=' (0 for len == 0).  -1 if len % 4 != 0 or if it ends with
 * more than two '='.  The characters themselves are not checked.
 */
ptrdiff_t tw_b64_decoded_size(const char *src, size_t len);

/*
 * Strict decode of src[0:len] into dst[0:cap].  Nothing is ever written at
 * or beyond dst + cap, and nothing at all when tw_b64_decoded_size(src, len)
 * is -1 (dst may then be NULL, as it may for len == 0).  A capacity of
 * tw_b64_decoded_size(src, len) is enough; a smaller one makes a valid
 * input fail.  The capacity is what keeps the output in bounds when src is
 * a buffer that another thread rewrites during the call (a reused receive
 * buffer): its padding, and so its decoded size, may change after the
 * caller sized dst.  Such an input gives -1 or some bytes, never a write
 * past dst + cap.
 *
 * Valid input: len % 4 == 0; every character is in A-Z a-z 0-9 + /,
 * except that the last quantum may end in "=" or "==" (padding).  The
 * empty input is valid.  Non-zero unused bits in the last quantum are
 * accepted ("QR==" gives "A").  This is exactly the set accepted by
 * CPython 3.13's base64.b64decode(s, validate=True), with identical bytes.
 * CPython 3.11/3.12 also accept '=' after a complete final quantum
 * ("AAAA=", "AAAA===="), which is not canonical and is rejected here;
 * everything else they accept is accepted here with identical bytes.
 * src and dst must not overlap.
 *
 * Returns the number of bytes written (>= 0), or -1 on invalid input or
 * when the decoding needs more than cap bytes.
 * On -1, if err_pos is not NULL, *err_pos is set as follows:
 *   - err_pos < len: offset of the first byte that cannot appear at its
 *     position in a valid string of length len.  That is the first byte
 *     that is neither an alphabet character nor an allowed '='; a '=' is
 *     allowed only at offset len-1, or at offset len-2 when the byte at
 *     len-1 is '=' too.  So a bad character, or the first misplaced '='
 *     (leading, in the middle, third from the end, or followed by a
 *     non-'='), is reported where it stands.
 *   - err_pos == len: every byte is acceptable at its position but
 *     len % 4 != 0 (bad length / incomplete padding, e.g. "AB=").
 * Character errors take precedence over the length error; a decoding that
 * does not fit in cap reports the first error in src, or len when there is
 * none.  On error the
 * content of dst is unspecified (bytes within the capacity may have been
 * written).
 */
ptrdiff_t tw_b64_decode(const char *src, size_t len, uint8_t *dst,
                        size_t cap, int path, size_t *err_pos);

/*
 * Decode a leading run of whole alphabet characters of src[0:avail] (the
 * input may go on past the base64, e.g. a JSON string followed by the rest
 * of a document): returns n, a multiple of 4, such that src[0:n] consists of
 * alphabet characters only (no '=') and dst[0:3n/4] holds their decoding.
 * n may stop short of the first non-alphabet byte (the work goes in blocks
 * of 4096 characters; n is 0 when avail < 4096), so the caller decodes the
 * rest src[n:len] with tw_b64_decode: src[0:len] is valid iff that rest is.
 * Writes at most 3*avail/4 bytes to dst.
 */
size_t tw_b64_decode_prefix(const char *src, size_t avail, uint8_t *dst,
                            int path);

/*
 * Check src[0:len] as tw_b64_decode would decode it, without keeping the
 * decoding: the characters are decoded a block at a time into a buffer on
 * the stack (cache-sized), so a long string costs one read and no
 * allocation.  Returns the size the decoding has (>= 0), or -1 when
 * tw_b64_decode would refuse src (the same canonical rules).  *negative is
 * set to 1 when some complete little-endian signed integer of itemsize
 * bytes (1, 2, 4 or 8; a trailing incomplete one is not read) of the
 * decoding is below zero, else 0; itemsize outside those: -1.
 */
ptrdiff_t tw_b64_check_signed(const char *src, size_t len, size_t itemsize,
                              int path, int *negative);
/* Encoded length for n input bytes: 4*ceil(n/3). */
size_t tw_b64_encoded_size(size_t n);

/* Standard alphabet with '=' padding; writes exactly
   tw_b64_encoded_size(len) bytes (no terminating NUL); returns that count.
   src and dst must not overlap. */
size_t tw_b64_encode(const uint8_t *src, size_t len, char *dst, int path);

#ifdef __cplusplus
}
#endif

#endif /* TW_BASE64_H */
