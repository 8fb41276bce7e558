/*
 * tw_records - per-token JSON records read straight from the raw response
 * bytes: stock vLLM per-token logprobs (choices[i].logprobs.content: the
 * per-token records the tw_rec_* names refer to), the OpenAI-compatible
 * chat and completions records, SGLang's triples.
 *
 * The input is the logprobs.content value recorded by tw_scan (a tw_value of
 * type TW_T_ARRAY inside a document tw_scan accepted, so the JSON is known
 * to be valid and nothing is re-validated).  Each element is expected to be
 *   {"token": "token_id:123", "logprob": -0.1, "bytes": [..],
 *    "top_logprobs": [{"token": "token_id:5", "logprob": -0.2, ...}, ...]}
 * or the same with "token_id": 123 instead of (or besides) "token".
 *
 * Two independent passes over the same elements, each reporting its first
 * failing element (the reference runs the whole sampled pass before the
 * candidates pass, so both are always computed in full):
 *
 * Sampled pass (the per-entry rules of the reference's native logprobs
 * parser; the caller checks content->count == n first).  For entry i:
 *   not an object                          -> TW_REC_ENTRY_NOT_OBJECT
 *   its id != ids[i] (id rules below)      -> TW_REC_TOKEN_MISMATCH
 *     (not checked when ids is NULL: the entries of a response of vLLM's
 *     output_mode "text", whose "token" is decoded text, are aligned with
 *     the completion ids by position)
 *   "logprob" missing or not a number      -> TW_REC_NOT_A_NUMBER
 *   not finite                             -> TW_REC_NOT_FINITE
 *   == -9999.0 (vLLM's "no evidence")      -> TW_REC_NO_EVIDENCE
 *   else sampled[i] = the logprob.
 *
 * Candidates pass (want_top; the per-entry rules of the reference's native
 * top-k parser, before head selection).  For entry i:
 *   "top_logprobs" missing, not an array, or empty (also when the entry is
 *   not an object)                         -> TW_REC_MISSING_TOP
 *   then per candidate, in order, the first of:
 *     not an object                        -> TW_REC_TOP_NOT_OBJECT
 *     no id (id rules below)               -> TW_REC_TOP_NO_ID
 *     "logprob" missing, not a number, or not finite
 *                                          -> TW_REC_TOP_NOT_FINITE
 *     logprob > 1e-6                       -> TW_REC_TOP_POSITIVE
 *     id already listed in this entry      -> TW_REC_TOP_DUPLICATE
 *   then the entry's own "logprob" missing or not a number
 *                                          -> TW_REC_SAMPLED_NOT_A_NUMBER
 *   else the candidates are appended to the CSR output and
 *   entry_lps[i] = the entry's logprob.
 *
 * Id of an object: if it has a "token_id" key, the value of the last one,
 * which must be an integer literal in [0, 2^32) ("-0" is 0; 1.0, 1e2, true,
 * strings are not ids); otherwise the last "id" key (llama.cpp's records),
 * read by the same rule; otherwise the last "token" key, which must be a
 * string "token_id:" followed by one or more ASCII digits (leading zeros
 * allowed) with value <= 2^32 - 1.  Strings and keys are compared after
 * decoding escapes ("token_id:\u0031" is token_id:1, "tok\u0065n" is token).
 *
 * Numbers: JSON integers and floats are both numbers; true/false/null,
 * strings, arrays and objects are not.  The value is the double Python's
 * float() gives for the literal's text, correctly rounded (round half to
 * even) from the exact decimal value, for any number of digits and any
 * exponent (underflow to +-0.0 or a subnormal; overflow, which tw_scan
 * rejects anyway, to +-inf) - except that an integer literal is an int to
 * the reference, so "-0" gives +0.0 (float(0)); "-0.0" and "-0e0" give -0.0.
 *
 * Duplicate keys: the last occurrence wins (as in json.loads and orjson),
 * also for "top_logprobs" (an earlier array, valid or not, is discarded).
 * Other keys ("bytes", ...) are skipped without building anything.
 *
 * Plain C11, no Python API, no global mutable state, no recursion beyond
 * the fixed two levels (entry, candidate); never reads outside the content
 * span [content->start, content->end).  Thread-safe on distinct outputs.
 */
#ifndef TW_RECORDS_H
#define TW_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "base/tw_cpu.h"
#include "json/tw_scan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every reader below takes a `path` (last argument): a TW_PATH_* (tw_cpu.h),
   resolved with tw_path_resolve; every path gives the same results.  Numbers
   are converted by tw_number (tw_number.h): the double Python's float() gives. */

/* Codes of tw_rec_result.sampled_code / top_code, and return values. */
enum {
    TW_REC_OK = 0,
    TW_REC_ENTRY_NOT_OBJECT,
    TW_REC_TOKEN_MISMATCH,
    TW_REC_NOT_A_NUMBER,
    TW_REC_NOT_FINITE,
    TW_REC_NO_EVIDENCE,
    TW_REC_MISSING_TOP,
    TW_REC_TOP_NOT_OBJECT,
    TW_REC_TOP_NO_ID,
    TW_REC_TOP_NOT_FINITE,
    TW_REC_TOP_POSITIVE,
    TW_REC_TOP_DUPLICATE,
    TW_REC_SAMPLED_NOT_A_NUMBER,
    TW_REC_NOMEM,   /* return value only: allocation failed / no room */
    TW_REC_BAD_ARG  /* return value only: content not an array, or
                          content->count != n */
};

/*
 * First failing entry of each pass: *_err = its index and *_code its
 * TW_REC_* code, or *_err = -1 and *_code = TW_REC_OK when the pass
 * succeeds.  Without want_top: top_err = -1, top_code = OK.
 * ncand: candidates written (coff[n]).
 */
typedef struct {
    ptrdiff_t sampled_err;
    int sampled_code;
    ptrdiff_t top_err;
    int top_code;
    size_t ncand;
} tw_rec_result;

/*
 * Candidate storage of the candidates pass: ids[0..cap) and lps[0..cap).
 *   grow = 1: the kernel enlarges ids/lps with tw_mem_realloc when needed (they
 *             must be NULL or blocks from tw_mem_alloc; cap 0 is fine, and
 *             they stay NULL when nothing is written); the caller keeps
 *             them for reuse across calls and releases them with
 *             tw_rec_cands_free.  No counting pass is needed: copy
 *             ids/lps[0..ncand) out (or take them over) after the parse.
 *   grow = 0: ids/lps are the caller's arrays of cap elements (size them
 *             with tw_rec_count); needing more is TW_REC_NOMEM.
 */
typedef struct {
    int64_t *ids;
    double *lps;
    size_t cap;
    int grow;
} tw_rec_cands;

/* tw_mem_free(ids), tw_mem_free(lps), cap = 0 (grow mode only). */
void tw_rec_cands_free(tw_rec_cands *c);

/*
 * The room the candidates pass needs in grow = 0 mode: the sum, over the
 * elements that are objects, of the element count of their longest
 * "top_logprobs" array (candidates are written while an array is read, so
 * an array later replaced by a shorter duplicate key needs its room too;
 * without duplicate keys this is exactly the number of candidates).  A
 * structural walk of the content, about as costly as the sampled pass.
 * Returns TW_REC_OK, or TW_REC_BAD_ARG (*total = 0) if content is not
 * a recorded array.
 */
int tw_rec_count(const char *buf, const tw_value *content, size_t *total, int path);

/*
 * Run both passes over content (n elements, content->count == n) for the
 * completion token ids ids[0..n), or for ids NULL: entry i stands for token i
 * whatever id it names (the sampled pass reads no id).
 *   sampled[0..n):   the sampled logprobs; on a sampled error at entry s,
 *                    sampled[0..s) are set and the rest unspecified.
 * With want_top (otherwise coff, entry_lps, cands are not touched and may
 * be NULL):
 *   coff[0..n]:      CSR offsets, coff[0] = 0; entry i's candidates are
 *                    cands->ids/lps[coff[i] .. coff[i+1]), in the order
 *                    sent.  On a candidates error at entry t, entries < t
 *                    are complete and coff[t..n] all equal coff[t].
 *   entry_lps[0..n): the entries' own logprobs (entries < t on error).
 * Returns TW_REC_OK (res filled), TW_REC_NOMEM (an allocation failed,
 * or grow = 0 and cands->cap was too small) or TW_REC_BAD_ARG; res and
 * the outputs are unspecified after an error return.
 */
int tw_rec_parse(const char *buf, const tw_value *content, size_t n,
                    const int64_t *ids, int want_top, double *sampled,
                    int64_t *coff, double *entry_lps, tw_rec_cands *cands,
                    tw_rec_result *res, int path);

/*
 * Records read during the scan (tw_scan.h): set tw_doc.content_reader to
 * tw_rec_content_reader before tw_scan (tw_rec_read_during_scan does), and a
 * logprobs.content record with read = 1 is then read by tw_rec_take instead
 * of tw_rec_parse.
 *
 * tw_rec_content_reader: a tw_content_reader.  It validates the array as
 * tw_scan does and reads each entry as tw_rec_parse would read it (with the
 * candidates pass), or declines (NULL) for anything outside the usual shape:
 * invalid JSON, an element that is not an object, a key or a token string
 * with an escape, a repeated "token", "token_id", "logprob",
 * "top_logprobs" or "sampling_logprob" key in an object, an object other
 * than an entry or a candidate, an array in an array other than an entry's
 * "top_logprobs", out of memory.
 *
 * tw_rec_take: tw_rec_parse's results (the same return value, res, sampled,
 * coff, entry_lps and candidates) for the content record of d's last scan,
 * which must have read = 1.  TW_REC_BAD_ARG also when it has not.
 */
const uint8_t *tw_rec_content_reader(tw_doc *d, const uint8_t *p, const uint8_t *end, int simd,
                                     size_t *count);
void tw_rec_read_during_scan(tw_doc *d);
int tw_rec_take(const tw_doc *d, const tw_value *content, size_t n, const int64_t *ids,
                int want_top, double *sampled, int64_t *coff, double *entry_lps,
                tw_rec_cands *cands, tw_rec_result *res);

/*
 * Flat arrays recorded by tw_scan (arr: a TW_T_ARRAY value), as the
 * OpenAI-compatible completions format sends them; out/ids hold
 * arr->count elements.
 *
 * tw_rec_numbers: logprobs.token_logprobs.  out[i] = the value of
 * element i (numbers as above) for every element before the first one that
 * is not a number (null, a string, ...); returns that element's index, or
 * -1 when every element is a number (0 if arr is not an array).
 *
 * tw_rec_token_strings: logprobs.tokens.  ids[i] = the id a
 * "token_id:N" string names (the "token" rules above), -1 for any other
 * string and for an element that is not a string; returns how many
 * elements name an id.
 */
ptrdiff_t tw_rec_numbers(const char *buf, const tw_value *arr, double *out, int path);

/* Classes of a value read by tw_rec_entries. */
enum {
    TW_REC_V_MISSING = 0, /* the key is absent */
    TW_REC_V_NUMBER, TW_REC_V_NULL, TW_REC_V_STRING, TW_REC_V_BOOL,
    TW_REC_V_ARRAY, TW_REC_V_OBJECT
};

/*
 * tw_rec_entries: logprobs.content of the OpenAI-compatible chat format,
 * each entry's fields as the reference reads them.  For each element i
 * before the first one that is not an object: ids[i] = the id the entry
 * names (the id rules above: "token_id" when present, else "token"; -1 for
 * none), lp[i]/lp_kind[i] its "logprob" and slp[i]/slp_kind[i] its
 * "sampling_logprob" (the value when the class is TW_REC_V_NUMBER, 0.0
 * otherwise; the last occurrence of a key wins).  Returns the index of the
 * first element that is not an object, or -1.  Every array holds
 * content->count elements.
 */
ptrdiff_t tw_rec_entries(const char *buf, const tw_value *content, int64_t *ids,
                            double *lp, uint8_t *lp_kind, double *slp, uint8_t *slp_kind,
                            int path);

/*
 * tw_rec_triples: SGLang's meta_info.output_token_logprobs, entries
 * [logprob, token_id] or [logprob, token_id, text].  For each element i
 * before the first one that is not an array of 2 or 3 elements: ids[i] =
 * its token_id (the "token_id" rules above, -1 if not an id), values[i]
 * and kinds[i] its logprob (as lp/lp_kind of tw_rec_entries).  Returns
 * the index of that first element, or -1.
 */
ptrdiff_t tw_rec_triples(const char *buf, const tw_value *arr, int64_t *ids, double *values,
                            uint8_t *kinds, int path);
size_t tw_rec_token_strings(const char *buf, const tw_value *arr, int64_t *ids, int path);

/*
 * tw_rec_triple_heads: SGLang's meta_info.output_top_logprobs read for
 * heads: arr (arr->count == n) holds one row of [logprob, token_id] or
 * [logprob, token_id, text] candidates per token.  For row i, the first of:
 *   not an array, or an empty one              -> TW_REC_MISSING_TOP
 *   an element that is not an array of 2 or 3 elements, or whose token_id
 *   is not an id (the whole row is read before any logprob is checked)
 *                                              -> TW_REC_TOP_NO_ID
 *   then per candidate, in order: its logprob not a number, or not finite
 *                                              -> TW_REC_TOP_NOT_FINITE
 *   logprob > 1e-6                             -> TW_REC_TOP_POSITIVE
 *   id already listed in the row               -> TW_REC_TOP_DUPLICATE
 * else the row's candidates are appended to cands (as tw_rec_parse does,
 * coff[i + 1] = candidates so far).  res->top_err / top_code: the first
 * failing row (the rows after it are not read; their coff repeat the last
 * count); sampled_err is -1.  Returns TW_REC_OK, TW_REC_NOMEM, or
 * TW_REC_BAD_ARG (arr not a recorded array, or arr->count != n).
 */
int tw_rec_triple_heads(const char *buf, const tw_value *arr, size_t n, int64_t *coff,
                           tw_rec_cands *cands, tw_rec_result *res, int path);

/*
 * tw_rec_keyed_heads: /v1/completions' logprobs.top_logprobs read for
 * heads: arr (arr->count == n) holds one {"token_id:N": logprob, ...} object
 * per token.  First, over every row that is an object: the first row with a
 * key that repeats an earlier key of that row (rep->row, and [rep->start,
 * rep->end) the repeated key's text in buf); a key holding an escape stops
 * this pass with rep->escaped = 1 (its keys would have to be decoded to be
 * compared; the caller reads the rows another way).  Then, when neither, for
 * row i the first of:
 *   not an object, or an empty one             -> TW_REC_MISSING_TOP
 *   a key that is not "token_id:N" (the "token" rules above; every key of
 *   the row is read before any logprob is checked) -> TW_REC_TOP_NO_ID
 *   then per candidate, in key order: its logprob not a number, or not
 *   finite -> TW_REC_TOP_NOT_FINITE; > 1e-6 -> TW_REC_TOP_POSITIVE;
 *   an id already listed in the row            -> TW_REC_TOP_DUPLICATE
 * else the candidates are appended as by tw_rec_triple_heads.  Returns
 * TW_REC_OK, TW_REC_NOMEM or TW_REC_BAD_ARG.
 */
typedef struct {
    ptrdiff_t row;     /* -1: no row repeats a key */
    size_t start, end; /* the repeated key's text (between its quotes) */
    int escaped;
} tw_rec_repeat;

int tw_rec_keyed_heads(const char *buf, const tw_value *arr, size_t n, int64_t *coff,
                          tw_rec_cands *cands, tw_rec_result *res, tw_rec_repeat *rep,
                          int path);

#ifdef __cplusplus
}
#endif

#endif /* TW_RECORDS_H */
