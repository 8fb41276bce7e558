/*
 * tw_plain - what the plain path reads of a generate document's stripped copy, without a
 * JSON parser building it.
 *
 * tw_scan has validated the document and tw_strip has blanked its big values; the plain
 * path (src/tokenwire/_core_plain.pxi) then needs only a few small members: whether some
 * keys hold anything but null, the packed logprobs' dtype and shape, the compact rows' format
 * and num_top_logprobs, each choice's finish_reason. tw_plain_walk reads them from the
 * stripped bytes and skips everything else. It decides nothing: wherever a member is in a
 * form it does not read (a key written with an escape, a key it reads given twice, a
 * finish_reason that is neither a string nor null, a number that is not a short integer,
 * more choices than the caller has room for, a root that is not an object...) it returns 0
 * and the caller reads the document with its JSON parser as before.
 *
 * Plain C11, no Python API. The copy is valid JSON (the scan validated every byte and blanking
 * keeps it so): it is skipped by tw_json.h, which assumes that, on the given code path.
 */
#ifndef TW_PLAIN_H
#define TW_PLAIN_H

#include <stddef.h>
#include <stdint.h>

/* The kind of a member's value (its last occurrence). */
enum { TW_PV_ABSENT = 0, TW_PV_NULL = 1, TW_PV_OBJECT = 2, TW_PV_STRING = 3 };

typedef struct {
    uint8_t others;   /* a key of keys->choice_absent holds a value other than null */
    uint8_t packed;   /* completion_logprobs: TW_PV_ABSENT, _NULL or _OBJECT */
    uint8_t compact;  /* compact_logprobs: likewise */
    uint8_t dtype;    /* the packed dtype: 4 "float32", 8 "float64", 0 absent or another string */
    uint8_t shape;    /* the packed shape: 0 absent, 1 a list of one integer (shape_n) */
    uint8_t format;   /* compact format: 1 the string keys->compact_format, 0 absent or another string */
    uint8_t num_top;  /* num_top_logprobs: 1 an integer (num_top_n), 0 absent */
    uint8_t finish;   /* finish_reason: TW_PV_ABSENT, _NULL or _STRING (finish_start/end: its bytes) */
    int64_t shape_n, num_top_n;
    size_t finish_start, finish_end;
} tw_plain_choice;

typedef struct {
    /* the keys of each list one after the other, each its length (a byte) then its bytes */
    const char *root_absent;
    size_t nroot_absent;
    const char *choice_absent;
    size_t nchoice_absent;
    const char *compact_format;
} tw_plain_keys;

typedef struct {
    uint8_t others;   /* a key of keys->root_absent holds a value other than null */
    uint8_t prompt;   /* prompt_token_ids holds a value other than null */
    uint8_t choices;  /* 1: choices is an array (count elements, each an object) */
    size_t count;
} tw_plain_doc;

/* Read the stripped document s[0:n] into *doc and out[0:doc->count] (room for cap choices),
   skipping on the code path `path` (TW_PATH_*). Returns 1 when read, 0 when the caller must
   read the document otherwise. */
int tw_plain_walk(const char *s, size_t n, const tw_plain_keys *keys, tw_plain_doc *doc,
                  tw_plain_choice *out, size_t cap, int path);

#endif
