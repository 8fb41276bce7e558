/* The base64 codec (csrc/codecs/tw_base64.c) on one fuzz input.

   The input is decoded as it is (with the capacity tw_b64_decoded_size gives, and one byte
   less), decoded by tw_b64_decode_prefix and the rest, and encoded and decoded back.
   Besides the sanitizers, it checks what the header promises: a valid input decodes to
   exactly tw_b64_decoded_size bytes and too small a capacity fails it; an invalid one
   reports a position in [0, len]; the prefix's decoding and the rest's are the whole
   decoding; encoding gives tw_b64_encoded_size canonical characters that decode back to the
   input; every output goes to the log. */
#ifndef FUZZ_BASE64_H
#define FUZZ_BASE64_H

#include "codecs/tw_base64.h"

#include "fuzz_util.h"

static void fz_base64(const uint8_t *data, size_t size, int path, fz_log *l)
{
    const char *src = (const char *)data;
    ptrdiff_t want = tw_b64_decoded_size(src, size);
    size_t cap = want > 0 ? (size_t)want : 0;
    uint8_t *dst = (uint8_t *)malloc(cap + 1), *small = (uint8_t *)malloc(cap + 1);
    uint8_t *pre = (uint8_t *)malloc(3 * size / 4 + 1);
    if (!dst || !small || !pre)
        abort();
    size_t err = (size_t)-1;
    ptrdiff_t got = tw_b64_decode(src, size, want < 0 ? NULL : dst, cap, path, &err);
    fz_u64(l, (uint64_t)want);
    fz_u64(l, (uint64_t)got);
    if (got >= 0) {
        FZ_CHECK(got == want, "decoded %td bytes, tw_b64_decoded_size says %td", got, want);
        fz_put(l, dst, (size_t)got);
    } else {
        FZ_CHECK(err <= size, "an error at %zu of %zu", err, size);
        fz_u64(l, err);
    }
    if (want > 0) { /* one byte short: never written past, and a valid input then fails */
        ptrdiff_t short_got = tw_b64_decode(src, size, small, cap - 1, path, NULL);
        FZ_CHECK(short_got == -1, "decoded %td bytes into %zu", short_got, cap - 1);
    }

    size_t n = tw_b64_decode_prefix(src, size, pre, path);
    FZ_CHECK(n % 4 == 0 && n <= size, "a prefix of %zu of %zu characters", n, size);
    fz_u64(l, n);
    fz_put(l, pre, 3 * n / 4);
    if (got >= 0) { /* the whole decoding = the prefix's, then the rest's */
        FZ_CHECK(!memcmp(pre, dst, 3 * n / 4), "the prefix decodes otherwise than the whole");
        ptrdiff_t rest = tw_b64_decode(src + n, size - n, small, cap - 3 * n / 4, path, NULL);
        FZ_CHECK(rest >= 0 && (size_t)rest == (size_t)got - 3 * n / 4 && !memcmp(small, dst + 3 * n / 4, (size_t)rest),
                 "the rest after a prefix of %zu decodes to %td bytes", n, rest);
    }

    size_t elen = tw_b64_encoded_size(size);
    char *enc = (char *)malloc(elen + 1);
    uint8_t *back = (uint8_t *)malloc(size + 1);
    if (!enc || !back)
        abort();
    FZ_CHECK(tw_b64_encode(data, size, enc, path) == elen, "encoded size");
    fz_put(l, enc, elen);
    ptrdiff_t back_n = tw_b64_decode(enc, elen, back, size, path, NULL);
    FZ_CHECK(back_n == (ptrdiff_t)size && !memcmp(back, data, size), "%zu bytes encode and decode to %td", size,
             back_n);
    if (got >= 0 && size % 4 == 0) { /* a canonical input encodes back to itself */
        char *again = (char *)malloc(tw_b64_encoded_size((size_t)got) + 1);
        if (!again)
            abort();
        size_t m = tw_b64_encode(dst, (size_t)got, again, path);
        int canonical = m == size && !memcmp(again, src, size);
        fz_u64(l, (uint64_t)canonical);
        free(again);
    }
    free(enc);
    free(back);
    free(dst);
    free(small);
    free(pre);
}

#endif
