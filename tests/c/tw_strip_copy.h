/*
 * strip_copy: the stripped copy of a scanned document (tw_strip) in a new NUL-terminated
 * buffer, for the programs that include the scanner (test_scan.c, test_records.c).
 * Include after csrc/json/tw_scan.c.
 */
#ifndef TW_STRIP_COPY_H
#define TW_STRIP_COPY_H

/* Its length in *out_len when out_len is not NULL; exits 2 when out of memory. */
static char *strip_copy(const char *buf, size_t len, const tw_doc *d, size_t *out_len)
{
    size_t n = tw_stripped_size(d, len);
    char *out = (char *)malloc(n + 1);
    if (!out)
        exit(2);
    tw_strip(buf, len, d, out);
    out[n] = 0;
    if (out_len)
        *out_len = n;
    return out;
}

#endif
