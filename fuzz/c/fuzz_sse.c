/* libFuzzer target: the stream scan (tw_sse) on any bytes behind two settings bytes (the form;
   the size of the pieces it is fed in). Checked: fed whole on the scalar path and fed in
   pieces on every path, the reader stops at the same event, or
   writes the same document (the pieces after a refusal are not fed: the bytes pending
   differ); every document it writes is JSON the scanner accepts. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "json/tw_scan.h"
#include "wire/tw_sse.h"

typedef struct {
    int rc;
    int64_t event;
    size_t pending, size;
    char *doc;
} fz_sse_end;

static fz_sse_end fz_sse_run(int form, const uint8_t *body, size_t n, size_t piece, int path)
{
    fz_sse_end end = {TW_SSE_OK, 0, 0, 0, NULL};
    tw_sse *s = tw_sse_new(form);
    size_t at = 0;
    FZ_CHECK(s != NULL, "out of memory");
    while (at < n && end.rc == TW_SSE_OK) {
        size_t k = n - at < piece ? n - at : piece;
        end.rc = tw_sse_feed(s, (const char *)body + at, k, path);
        FZ_CHECK(end.rc != TW_SSE_NOMEM, "out of memory");
        at += k;
    }
    end.event = s->event;
    end.pending = s->pending.n;
    if (end.rc == TW_SSE_OK) {
        end.size = tw_sse_document(s, NULL);
        if (end.size) {
            tw_doc d;
            end.doc = (char *)malloc(end.size);
            FZ_CHECK(end.doc && tw_sse_document(s, end.doc) == end.size, "the document's size changed");
            tw_doc_init(&d);
            FZ_CHECK(tw_scan(end.doc, end.size, &d) == TW_OK, "a document that is not JSON: %.*s",
                     (int)(end.size < 400 ? end.size : 400), end.doc);
            tw_doc_free(&d);
        }
    }
    tw_sse_free(s);
    return end;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int paths[TW_PATH_LAST + 1];
    int np = fz_paths(paths), form, i;
    size_t piece;
    fz_sse_end whole;
    if (size < 2)
        return 0;
    form = data[0] % 3;
    piece = (size_t)data[1] % 64 + 1;
    data += 2;
    size -= 2;
    whole = fz_sse_run(form, data, size, size ? size : 1, TW_PATH_SCALAR);
    for (i = 0; i < np; i++) {
        fz_sse_end cut = fz_sse_run(form, data, size, piece, paths[i]);
        if (!memchr(data, '\r', size)) { /* a piece with a CR is declined whole, wherever it falls */
            FZ_CHECK(cut.rc == whole.rc, "fed in pieces of %zu: %d, whole: %d", piece, cut.rc, whole.rc);
            FZ_CHECK(cut.rc != TW_SSE_DECLINE || cut.event == whole.event,
                     "declined at event %lld against %lld", (long long)cut.event, (long long)whole.event);
            FZ_CHECK(cut.size == whole.size && (!cut.size || memcmp(cut.doc, whole.doc, cut.size) == 0),
                     "another document fed in pieces of %zu", piece);
        }
        free(cut.doc);
    }
    free(whole.doc);
    return 0;
}
