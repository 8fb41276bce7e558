/*
 * tw_sse: streamed responses (Server-Sent Events of vLLM's generate, completions and chat
 * chunks) read in one pass over their bytes into growing owned buffers: each choice's token
 * ids and per-token records concatenated as JSON text, the once-sent fields kept, and at the
 * end the non-streamed document they stand for written out for the format's parser.
 *
 * The reading is the fast path of src/tokenwire/read/_stream.py, which is its specification:
 * it never refuses. Each event is taken whole or not at all; at the first event it is not sure
 * of (anything the specification would refuse, and any valid form it does not handle: a CR,
 * several data lines, escaped keys, deep nesting, many keys, a field whose text differs from
 * its earlier copy) it stops before that event and says so (TW_SSE_DECLINE), and the caller
 * hands what was read and the bytes left to the specification. Every JSON value it takes is
 * validated by the scanner's own checks (tw_scan_string, tw_scan_number); an object with a
 * repeated key is declined.
 */
#ifndef TW_SSE_H
#define TW_SSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TW_SSE_GENERATE = 0, TW_SSE_COMPLETIONS = 1, TW_SSE_CHAT = 2 };
enum { TW_SSE_OK = 0, TW_SSE_DECLINE = 1, TW_SSE_NOMEM = 2 };

#define TW_SSE_RECORDS 4 /* completions: tokens, token_logprobs, top_logprobs, text_offset */

typedef struct {
    char *p;
    size_t n, cap;
} tw_sse_buf;

typedef struct {
    size_t key, key_len, val, val_len; /* offsets into the owner's store */
    int64_t event;                      /* the last event that carried it */
} tw_sse_field;

typedef struct {
    int64_t index, first_event, last_event;
    tw_sse_buf ids;  /* the elements' text, comma-separated */
    size_t nids;
    tw_sse_buf rec[TW_SSE_RECORDS];
    int has_records; /* -1: no chunk with tokens yet */
    int sent_ids;    /* a chunk carried token_ids (an array, maybe empty) */
    tw_sse_buf text; /* the string contents, as sent (escapes kept) */
    tw_sse_buf finish, stop, role, prompt; /* JSON text; n == 0: none */
    tw_sse_buf store;
    tw_sse_field *once;
    size_t nonce;
    int64_t *starts, *events; /* where each event's tokens begin in ids, and the event */
    size_t nstarts, starts_cap;
} tw_sse_choice;

typedef struct tw_sse {
    int form;
    int done;
    int64_t event;     /* the next event's position */
    tw_sse_buf pending; /* the unfinished event */
    size_t scanned;     /* how far pending was searched for an event's end */
    tw_sse_buf root_store;
    tw_sse_field *root;
    size_t nroot;
    tw_sse_buf prompt, usage; /* JSON text; n == 0: none */
    int64_t prompt_event;
    tw_sse_choice *choices;
    size_t nchoices, choices_cap;
    void *scratch; /* the event's plan */
} tw_sse;

/* A reader of `form` (TW_SSE_*), or NULL without memory. */
tw_sse *tw_sse_new(int form);
void tw_sse_free(tw_sse *s);

/*
 * Take buf[0:len], the next piece of the body. TW_SSE_OK: every complete event in it was
 * taken, the rest is pending. TW_SSE_DECLINE: the reader stopped before an event it leaves to
 * the specification; that event and everything after it are in s->pending (a piece with a CR
 * is declined before any of it is taken: it is not in pending, the caller hands it on itself).
 * TW_SSE_NOMEM: out of memory (the reader is then unusable). path: a TW_PATH_*.
 */
int tw_sse_feed(tw_sse *s, const char *buf, size_t len, int path);

/*
 * The document the stream stands for, after the whole body was fed: its size in bytes (out
 * NULL), or written to out. 0 when the reader leaves the end to the specification (pending
 * bytes, no data: [DONE], a field sent only on a choice's last chunk coming earlier).
 */
size_t tw_sse_document(const tw_sse *s, char *out);

#ifdef __cplusplus
}
#endif

#endif /* TW_SSE_H */
