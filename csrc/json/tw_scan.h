/*
 * tw_scan - structural scanner for /inference/v1/generate response documents.
 *
 * tw_scan() validates a whole document as strict RFC 8259 JSON (the same
 * accept/reject decision as orjson.loads, see "Grammar" below) in one pass
 * without building a tree, and records where the big values at a fixed set
 * of paths are.  The caller then
 *   1. copies the document with those values blanked (tw_stripped_size,
 *      tw_strip) and parses the small remainder with a general JSON parser;
 *   2. decodes the recorded spans directly (tw_parse_uint_array,
 *      tw_count_nested / tw_parse_nested_uint, tw_unescape, base64).
 *
 * Plain C11, no Python API, no global mutable state, no recursion; every
 * function is thread-safe on distinct tw_doc objects and never reads outside
 * buf[0:len] (the buffer needs no terminating NUL).  Allocation failures are
 * reported (TW_ERR_NOMEM), never fatal.
 *
 * Grammar (what tw_scan accepts; matches orjson 3.13):
 *   - exactly one JSON value, optionally surrounded by whitespace; whitespace
 *     is space, tab, LF, CR only; an empty or all-whitespace document, a
 *     leading UTF-8 BOM and anything after the value are errors;
 *   - literals true/false/null only (no NaN/Infinity), no comments, no
 *     trailing commas, object keys are strings;
 *   - numbers: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?  and, like
 *     orjson, a number whose magnitude rounds to infinity as an IEEE double
 *     (|x| >= 2^1024 - 2^970, e.g. 1e309 or a 310-digit integer) is an error;
 *     integers beyond 64 bits are accepted (orjson turns them into floats);
 *   - strings: no raw byte < 0x20; escapes \" \\ \/ \b \f \n \r \t \uXXXX
 *     (hex digits in either case); a \u high surrogate must be followed by a
 *     \u low surrogate, a lone low surrogate is an error; raw bytes must be
 *     valid UTF-8 (shortest form, no encoded surrogates, <= U+10FFFF);
 *   - nesting: at most doc->max_depth arrays/objects open at once (default
 *     1024, orjson's limit; 0 = unlimited, the stack lives on the heap).
 *
 * Recorded paths (only these exact paths; the same key names anywhere else
 * are ignored).  The root must be an object, otherwise nothing is recorded
 * (top_is_object = 0) and tw_scan still returns TW_OK for valid JSON.
 *   root.prompt_token_ids                  -> doc->prompt_token_ids
 *   root.choices                           -> doc->choices
 *   root.choices[i] (each element)         -> doc->choice[i]
 *   root.<key> of every other root row     -> doc->root[TW_R_*]
 *     of the wire table (prompt_routed_experts)
 * and relative to a choice object, doc->choice[i].f[TW_F_*]: the choice rows of the
 * wire table (src/tokenwire/base/_table.py; tw_fields.def lists each TW_F_* with its path),
 * the generate fields (token_ids, logprobs, logprobs.content, compact_logprobs.data,
 * sampling_mask, ...) and the OpenAI-compatible ones (logprobs.token_logprobs,
 * raw_output.completion_token_ids, ...) alike.
 *   SGLang documents (doc->sglang = 1) have no "choices": the root object is
 *   choice 0, or each element of a root array is a choice, with the item rows of
 *   the table (output_ids, meta_info.output_token_logprobs,
 *   meta_info.output_top_logprobs, the sampling mask and its logprobs, the flat
 *   prompt top-k, meta_info.routed_experts, meta_info.indexer_topk) and nothing
 *   else; only the strings of the rows with blank_openai (meta_info.routed_experts,
 *   meta_info.indexer_topk: TWS_BLANK_STR_OPENAI) are blanked and decoded as they
 *   pass, the rest only on request (a sampling mask list and the id arrays are
 *   still read as they pass). Keys of up to 39 bytes are matched.
 *   A path is followed only through objects: under "compact_logprobs": null
 *   (or a string, an array...) nothing is recorded.  Keys are compared after
 *   unescaping ("token\u005fids" is token_ids).
 *
 * Duplicate keys: the last occurrence wins for everything beneath it, as in
 * orjson.  When a key on a recorded path occurs again, every record at or
 * beneath it is cleared before the new value is scanned (a second
 * "compact_logprobs" whose object has no "offsets" leaves CP_OFFSETS absent;
 * a second root "choices" discards the records of the first one; a second
 * "nvext", "engine_data" or "engine_data.routed_experts" the root records
 * beneath it, TWS_KEY's clear_root).
 *
 * OpenAI-compatible documents (doc->openai = 1): the same paths are
 * recorded, but only the table's rows with blank_openai are blanked by the
 * scan (token_ids and root.prompt_token_ids when arrays, routed_experts and
 * root.prompt_routed_experts when strings: TWS_BLANK_ARR_OPENAI,
 * TWS_BLANK_STR_OPENAI; everything else only on request, tw_blank_field),
 * only those strings are decoded during the scan (TWS_B64_OPENAI), and the
 * choice records follow the OpenAI rule below.
 *
 * Blanking: EVERY occurrence of a blankable value is blanked, also ones
 * superseded by a later duplicate key (harmless: a JSON parser keeps only
 * the last occurrence).  The table's "blank" column says which (in generate
 * documents, of the rows generate's rules read): blanked when
 * a string (content removed -> ""): the base64 fields (completion_logprobs.data,
 * compact_logprobs.data, sampling_mask.{ids,counts}.data, kept_tokens.{ids,counts},
 * routed_experts and routed_experts.data); blanked when an array (everything
 * between the brackets removed -> []): token_ids, compact_logprobs.offsets,
 * sampling_mask and root.prompt_token_ids (TWS_BLANK_STR / TWS_BLANK_ARR in
 * tw_fields.def).
 * Blanking only removes bytes, so the stripped copy is never longer.
 *
 * Blanking on request, during the scan: doc->blank_fields names more fields
 * (bit TW_F_x), blanked like the ones above wherever they are recorded (an
 * array's interior, a string's content), every occurrence, in the same pass;
 * the cost stays linear in the document however many choices and duplicate
 * keys it has.  Spans that a later blanked container holds are merged into
 * it as it closes.
 *
 * Blanking on request, after the scan: tw_blank_field adds one recorded value of a choice
 * (an array: everything between the brackets; a string: its content) to the
 * blank list after tw_scan, e.g. logprobs.content when the caller reads it
 * with the record readers (tw_records.h; the stripped copy then has
 * "content":[]).  Only the recorded (last) occurrence is blanked; an earlier
 * duplicate stays in the stripped copy, where the JSON parser discards it.
 *
 * Choice records (deviation from "one record per element", to bound memory:
 * a tw_choice is ~810 bytes, so "[{},{},...]" would otherwise amplify a
 * document ~270x): records are kept for elements 0, 1, ... up to and
 * including the first element that is certain to fail validation, which is
 *   - an element that is not an object (record with is_object = 0), or
 *   - an object whose (last) token_ids is absent or not an array (with
 *     doc->openai: and whose raw_output is not an object, and whose
 *     logprobs holds no content, tokens or token_ids array; with
 *     doc->sglang: an item with neither output_ids nor
 *     meta_info.output_token_logprobs an array);
 * later elements are still validated as JSON and counted in choices.count,
 * but get no record and nothing in them is blanked (the stripped copy keeps
 * them whole), so nchoices may be less than choices.count.  Choices are
 * validated in order and the first failing one is reported, so later
 * records could never be used.
 *
 * Decoding during the scan (doc->decode = 1): a string at a base64 path
 * (the table's base64 column, TWS_B64) whose first TW_SCAN_FUSE_MIN content bytes hold no '"', '\\',
 * control or non-ASCII byte is decoded as base64 in the same pass that finds
 * its end, into a buffer (tw_mem_alloc) sized for the rest of the document (and
 * shrunk to fit when that wastes more than an eighth of it).  Only strings
 * that are plain canonical base64 (no escape at all, tw_b64_decode's rules)
 * get a blob; for anything else the buffer is freed and the record is the
 * same as without decoding, so the caller's usual path reports the error.
 * A decoding failure never fails the scan: out of memory just skips it (as
 * does a 65536th blob in one document).
 * Blobs not taken are freed by the next tw_scan and by tw_doc_free.
 *
 * Records read during the scan (doc->content_reader set, not openai or
 * sglang): at a choice's logprobs.content array that is not empty, the scan
 * hands the array to the reader (tw_rec_content_reader, tw_records.h), which
 * validates it as the scan would and reads its entries into doc->entries;
 * the record then has read = 1 and read_at = the index of its first entry,
 * and tw_rec_take gives what tw_rec_parse gives for it.  Where the reader
 * declines, the scan goes on over the array as usual (read = 0), so what the
 * scan accepts, rejects and records never depends on the reader.  Not
 * tried when the array's entries could reach the depth limit.
 *
 * Memory: the nesting stack takes 32 bytes per open container (32 KB at the
 * default depth limit), the blank list 16 bytes per blanked value, records
 * read during the scan 40 bytes per entry and 16 per candidate; all of it
 * is kept in the tw_doc and reused by the next tw_scan.
 */
#ifndef TW_SCAN_H
#define TW_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/tw_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes of tw_scan. */
enum { TW_OK = 0, TW_ERR_SYNTAX = -1, TW_ERR_NOMEM = -2 };

/* Strings shorter than this are never decoded during the scan. */
#define TW_SCAN_FUSE_MIN 4096

/* Value types (tw_value.type). */
enum {
    TW_T_NONE = 0, TW_T_NULL, TW_T_FALSE, TW_T_TRUE, TW_T_NUMBER,
    TW_T_STRING, TW_T_ARRAY, TW_T_OBJECT
};

/*
 * One recorded value.  present = 0 means the path does not exist (the whole
 * struct is then zero).  Offsets are byte offsets into buf:
 *   strings: [start, end) is the content between the quotes (raw, escapes
 *            not decoded); has_escape = a backslash occurs in it;
 *            ascii = every content byte is < 0x80;
 *   others:  [start, end) is the whole value text ("[...]", "{...}", "12").
 *   arrays:  count = number of elements, all_int = every element is an
 *            integer literal (optional '-', digits, no fraction/exponent;
 *            1 for an empty array).
 * Fields that do not apply to the type are 0.
 */
typedef struct {
    uint8_t present, type, has_escape, ascii, all_int;
    uint8_t read; /* an array of ids or offsets read during the scan (tw_take_uints), a
                     sampling_mask list read so (tw_take_nested), or a logprobs.content
                     array whose entries the scan read */
    uint16_t blob; /* 1-based index into tw_doc.blobs when decoded, else 0 */
    size_t start, end, count;
    size_t read_at; /* where its count values start in tw_doc.uints when read
                       (tw_doc.entries for logprobs.content) */
} tw_value;

/* The fields of a choice (or an SGLang item), tw_choice.f[TW_F_*]: one row each of the wire
   table, src/tokenwire/base/_table.py, in its order (tw_fields.def is written from it). */
enum {
#define TW_FIELD(name, path) TW_F_##name,
#include "json/tw_fields.def"
    TW_NFIELDS
};

typedef struct {
    uint8_t is_object; /* 0: the element is not an object (f[] all absent) */
    tw_value f[TW_NFIELDS];
} tw_choice;

/* The fields of the root object, tw_doc.root[TW_R_*]: one row each of the wire table's root
   rows, in its order (tw_fields.def's TWS_ROOT). The first two are prompt_token_ids and
   choices, which tw_doc also names. */
enum {
#define TWS_ROOT(name, path) TW_R_##name,
#include "tw_fields.def"
    TW_NROOT
};

/* A base64 value decoded during the scan (see "Decoding during the scan"):
   data comes from tw_mem_alloc, owned by the tw_doc until tw_take_blob hands it over. */
typedef struct {
    uint8_t *data;
    size_t len;
} tw_blob;

/* One logprobs.content entry read during the scan (see "Records read during
   the scan"): what tw_rec_parse reads from it. */
typedef struct {
    int64_t id;       /* its last "token_id" when it has one, else the id its
                         "token" names (tw_records.h's id rules); -1: none */
    double lp;        /* its "logprob" (a number: an entry without one is not stored) */
    size_t k0, k;     /* its candidates: tw_doc.cand_ids/cand_lps[k0 .. k) (with
                         top_code set: those written before the bad one) */
    uint8_t top_code; /* TW_REC_* verdict of its "top_logprobs" (tw_records.h),
                         0 when every candidate is good */
} tw_entry;

struct tw_doc;
/* A reader of the records of a logprobs.content array (tw_doc.content_reader):
   p at the array's first element (not ']'), simd as the scan's.  Returns the
   position after the closing ']' with the element count in *count, having
   appended one tw_entry per element (and their candidates) to the doc; or
   NULL, leaving the doc as it was, when it cannot (the array is not valid
   JSON, or has a shape the reader leaves to the scan and tw_rec_parse). */
typedef const uint8_t *(*tw_content_reader)(struct tw_doc *d, const uint8_t *p,
                                            const uint8_t *end, int simd, size_t *count);

/* Bytes [start, end) of the input that the stripped copy leaves out. */
typedef struct {
    size_t start, end;
} tw_span;

typedef struct tw_doc {
    /* Settings: tw_doc_init sets the defaults; change them before tw_scan. */
    int path;          /* TW_PATH_* (tw_cpu.h), default AUTO */
    size_t max_depth;  /* default 1024 (orjson's limit); 0 = unlimited */
    int decode;        /* 1: decode long base64 strings while scanning */
    int openai;        /* 1: an OpenAI-compatible document (see above) */
    int sglang;        /* 1: an SGLang /generate document (see above) */
    int b64_path;      /* TW_PATH_* for that, default AUTO */
    uint64_t blank_fields; /* bit f (TW_F_*): blank that field too, wherever it is
                              recorded: an array's interior or a string's
                              content (default 0; see tw_blank_field) */
    tw_content_reader content_reader; /* default NULL; see "Records read during
                                         the scan" */

    /* Results of the last successful tw_scan. */
    uint8_t top_is_object;
    union { /* the root records: root[TW_R_*], the first two also by name */
        struct {
            tw_value prompt_token_ids, choices;
        };
        tw_value root[TW_NROOT];
    };
    tw_choice *choice; /* heap, nchoices records (see "Choice records") */
    size_t nchoices;
    tw_span *blank;    /* heap, nblank disjoint spans sorted by start */
    size_t nblank;
    size_t blank_bytes; /* total length of the blank spans */

    /* Error of the last failed tw_scan: byte offset (len for "unexpected
       end of data") and a static message. */
    size_t err_pos;
    const char *err_msg;

    tw_blob *blobs;    /* heap, nblobs values decoded by the last scan */
    size_t nblobs;
    uint64_t *uints;   /* heap: the elements of the id and offset arrays the scan read */
    size_t nuints;
    tw_entry *entries; /* heap: the logprobs.content entries the scan read */
    size_t nentries;
    int64_t *cand_ids; /* heap (tw_mem): their candidates, cands_cap of each */
    double *cand_lps;
    size_t cands_cap;

    /* Internal: capacities and the reusable nesting stack. */
    size_t choice_cap, blank_cap, stack_cap, blobs_cap, uints_cap, entries_cap;
    void *stack;
} tw_doc;

/* Initialize (no allocation; default settings).  A tw_doc may be reused
   for several scans; tw_doc_free releases its memory and leaves it ready
   for reuse with the same settings. */
void tw_doc_init(tw_doc *d);
void tw_doc_free(tw_doc *d);

/*
 * Validate buf[0:len] and record the paths above.  Returns TW_OK,
 * TW_ERR_SYNTAX (err_pos, err_msg set; e.g. "nesting too deep") or
 * TW_ERR_NOMEM (err_msg "out of memory").  After an error the result fields
 * are unspecified (but tw_doc_free/tw_scan remain safe).
 */
int tw_scan(const char *buf, size_t len, tw_doc *doc);

/* Size of the stripped copy: len - doc->blank_bytes. */
size_t tw_stripped_size(const tw_doc *doc, size_t len);
/* Write the document with every blank span removed (strings become "",
   arrays []) into out, which holds tw_stripped_size(doc, len) bytes.
   buf/len must be those of the successful tw_scan that filled doc. */
void tw_strip(const char *buf, size_t len, const tw_doc *doc, char *out);

/*
 * Blank choice[ci].f[field] too (see "Blanking on request"), keeping the
 * blank list sorted and disjoint (spans nested inside it are merged).  A
 * no-op when ci >= nchoices, the value is absent, not an array or string,
 * empty, or already blanked.  Call after a successful tw_scan and before
 * tw_stripped_size / tw_strip.  Returns TW_OK or TW_ERR_NOMEM (the blank
 * list is then unchanged).  Each call may move the spans after it: for many
 * choices set blank_fields before the scan instead.
 */
int tw_blank_field(tw_doc *doc, size_t ci, int field);

/*
 * The buffer decoded for v during the scan, or NULL (decoding was off, the
 * string was short, not plain canonical base64, or the buffer was already
 * taken).  The caller owns the result (release it with tw_mem_free()); *len gets
 * its size.  v must be a record of d's last scan.
 */
uint8_t *tw_take_blob(tw_doc *d, const tw_value *v, size_t *len);

/*
 * One of a tw_doc's arrays (tw_mem, *cap elements of `size` bytes), grown by
 * doubling from `first` so that it holds at least n + 1; nothing changes
 * while n < *cap.  Returns 0, or -1 without memory or when the size would
 * overflow (the array is then as it was).  For the scan and its readers.
 */
int tw_doc_grow(void **arr, size_t *cap, size_t n, size_t size, size_t first);

/*
 * [*start, *end): the text of element `index` of the array v.  Returns 0,
 * or -1 if v is not an array or has no such element.
 */
int tw_array_element(const char *buf, const tw_value *v, size_t index,
                     size_t *start, size_t *end);

/*
 * Helpers over values recorded by a successful tw_scan of the same buf.
 *
 * tw_parse_uint_array: v must be an array.  Parse its v->count elements into
 * out[0..count).  Each element must be an integer literal (no fraction, no
 * exponent) with value in [0, max]; "-0" is 0 and valid.  max is clamped to
 * INT64_MAX.  Returns 0, or -1 with *err_index = index of the first bad
 * element (a non-number, a fraction/exponent, a negative or too large
 * value); -1 with *err_index = 0 if v is not an array.  path: a TW_PATH_*
 * (tw_cpu.h); every path gives the same result.
 */
/*
 * Arrays of unsigned integer literals at the id and offset paths (token_ids,
 * prompt_token_ids, compact_logprobs.offsets, logprobs.token_ids,
 * raw_output.completion_token_ids, output_ids) written without whitespace, each
 * element at most 19 digits, are read while they are scanned: v->read is 1
 * and the values are in tw_doc.uints.  tw_take_uints hands them over as
 * tw_parse_uint_array would parse them (the same result, the same first bad
 * element: one above max); any other array at those paths is left to
 * tw_parse_uint_array.
 */
int tw_take_uints(const tw_doc *d, const tw_value *v, uint64_t max, int64_t *out,
                  size_t *err_index);

int tw_parse_uint_array(const char *buf, const tw_value *v, uint64_t max,
                        int64_t *out, size_t *err_index, int path);

/*
 * The scan's own checks, for the content reader: tw_scan_string (p just
 * after an opening quote) returns the closing quote with *flags
 * (TW_STR_ESCAPE: a backslash occurs, TW_STR_NONASCII: a byte >= 0x80), and
 * tw_scan_number (p at '-' or a digit) the end of the number literal, with
 * *is_int set for an integer literal; each NULL where tw_scan fails.
 */
#define TW_STR_ESCAPE 1u
#define TW_STR_NONASCII 2u
const uint8_t *tw_scan_string(const uint8_t *p, const uint8_t *end, int simd,
                              unsigned *flags);
const uint8_t *tw_scan_number(const uint8_t *p, const uint8_t *end, int simd, int *is_int);

/*
 * List of lists (the sampling_mask list form); rows = v->count.
 * tw_count_nested: *total = number of elements of the rows that are arrays
 * (non-array rows count 0).  Returns 0, or -1 if v is not an array.
 * tw_parse_nested_uint: fills offsets[0..rows] (offsets[0] = 0, row r is
 * values[offsets[r] .. offsets[r+1])) and values (capacity *total from
 * tw_count_nested, or tw_nested_bound), each element an integer literal in [0, max] (max is
 * clamped to INT32_MAX).  Returns 0, or -1 with *err_row = the first row
 * that is not an array or has a bad element (offsets/values are then
 * filled up to that row only); -1 with *err_row = 0 if v is not an array.
 */
int tw_count_nested(const char *buf, const tw_value *v, size_t *total);
/* A bound on tw_count_nested's *total for a value of a document tw_scan accepted, without
   walking it: the commas in the value's bytes plus its rows (every element of a row but the
   last is followed by one). 0 if v is not an array. */
size_t tw_nested_bound(const char *buf, const tw_value *v);
int tw_parse_nested_uint(const char *buf, const tw_value *v, uint64_t max,
                         int64_t *offsets, int32_t *values, size_t *err_row);
/*
 * A sampling_mask list whose rows are all such arrays of unsigned integer literals written
 * without whitespace ("[[5,9],[],[7]]", each element at most 19 digits) is read while it is
 * scanned: v->read is 1, and each row's length and then its elements are in tw_doc.uints.
 * tw_nested_total gives the number of elements; tw_take_nested hands them over as
 * tw_parse_nested_uint would parse them (the same offsets and values, the same first bad row:
 * one with an element above max). Any other list is left to tw_parse_nested_uint.
 */
size_t tw_nested_total(const tw_doc *d, const tw_value *v);
int tw_take_nested(const tw_doc *d, const tw_value *v, uint64_t max, int64_t *offsets,
                   int32_t *values, size_t *err_row);

/*
 * Decode the validated string value v (type TW_T_STRING) into dst, whose
 * capacity must be at least v->end - v->start bytes (decoding never grows).
 * Returns the length of the UTF-8 result (\u0000 gives a NUL byte);
 * 0 if v is not a string.
 */
size_t tw_unescape(const char *buf, const tw_value *v, char *dst);

#ifdef __cplusplus
}
#endif

#endif /* TW_SCAN_H */
