# The C kernels' headers (csrc/<layer>/tw_*.h), as the compiled core (_core.pyx) uses them: cimported
# there with ``from ._csrc cimport *``. Plain C, no Python API; every function is callable
# without the GIL. The TW_F_* field ids come from the generated _fields.pxi instead.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "base/tw_hash.h" nogil:
    int tw_hash_seed(const uint8_t *key)


cdef extern from "base/tw_mem.h" nogil:
    void *tw_mem_alloc(size_t n)
    void *tw_mem_calloc(size_t count, size_t size)
    void *tw_mem_realloc(void *p, size_t n)
    void tw_mem_free(void *p)
    size_t tw_mem_set_limit(size_t bytes)
    ctypedef struct tw_mem_stats:
        size_t cached_bytes, cached_blocks, limit, hits, misses
    void tw_mem_get_stats(tw_mem_stats *out)


cdef extern from "base/tw_cpu.h" nogil:
    enum:
        TW_PATH_AUTO
        TW_PATH_SCALAR
        TW_PATH_AVX2
        TW_PATH_AVX512
        TW_PATH_NEON
    int tw_path_available(int path)
    int tw_path_best()
    const char *tw_path_name(int path)


cdef extern from "codecs/tw_base64.h" nogil:
    ptrdiff_t tw_b64_decoded_size(const char *src, size_t len)
    ptrdiff_t tw_b64_decode(const char *src, size_t len, uint8_t *dst, size_t cap, int path,
                            size_t *err_pos)
    size_t tw_b64_encoded_size(size_t n)
    size_t tw_b64_encode(const uint8_t *src, size_t len, char *dst, int path)
    ptrdiff_t tw_b64_check_signed(const char *src, size_t len, size_t itemsize, int path,
                                  int *negative)


cdef extern from "json/tw_scan.h" nogil:
    enum:
        TW_OK
        TW_ERR_SYNTAX
        TW_ERR_NOMEM
    enum:
        TW_T_NONE
        TW_T_NULL
        TW_T_STRING
        TW_T_ARRAY
        TW_T_OBJECT
    enum:
        # How many TW_F_* fields a choice has: the generated _fields.pxi declares the fields
        # and TW_NFIELDS itself, in the module, so this file names it otherwise.
        _TW_NFIELDS "TW_NFIELDS"
        # How many root rows the table has (tw_doc.root[], in the table's order).
        TW_NROOT
    ctypedef struct tw_value:
        uint8_t present, type, has_escape, ascii, all_int, read
        uint16_t blob
        size_t start, end, count, read_at
    ctypedef struct tw_choice:
        uint8_t is_object
        tw_value f[_TW_NFIELDS]
    ctypedef struct tw_doc:
        int path
        int decode
        int b64_path
        uint64_t blank_fields
        int openai
        int sglang
        uint8_t top_is_object
        tw_value prompt_token_ids, choices
        tw_value root[TW_NROOT]  # every root record, prompt_token_ids and choices first
        tw_choice *choice
        size_t nchoices
        size_t err_pos
        const char *err_msg
    void tw_doc_init(tw_doc *d)
    int tw_scan(const char *buf, size_t len, tw_doc *doc)
    void tw_doc_free(tw_doc *d)
    size_t tw_stripped_size(const tw_doc *doc, size_t len)
    void tw_strip(const char *buf, size_t len, const tw_doc *doc, char *out)
    int tw_parse_uint_array(const char *buf, const tw_value *v, uint64_t max, int64_t *out, size_t *err_index, int path)
    int tw_take_uints(const tw_doc *d, const tw_value *v, uint64_t max, int64_t *out, size_t *err_index)
    size_t tw_nested_bound(const char *buf, const tw_value *v)
    int tw_parse_nested_uint(const char *buf, const tw_value *v, uint64_t max, int64_t *offsets, int32_t *values, size_t *err_row)
    size_t tw_nested_total(const tw_doc *d, const tw_value *v)
    int tw_take_nested(const tw_doc *d, const tw_value *v, uint64_t max, int64_t *offsets, int32_t *values, size_t *err_row)
    size_t tw_unescape(const char *buf, const tw_value *v, char *dst)
    uint8_t *tw_take_blob(tw_doc *doc, const tw_value *v, size_t *len)
    int tw_array_element(const char *buf, const tw_value *v, size_t index, size_t *start, size_t *end)


cdef extern from "json/tw_plain.h" nogil:
    enum:
        TW_PV_ABSENT
        TW_PV_NULL
        TW_PV_OBJECT
        TW_PV_STRING
    ctypedef struct tw_plain_choice:
        uint8_t others, packed, compact, dtype, shape, format, num_top, finish
        int64_t shape_n, num_top_n
        size_t finish_start, finish_end
    ctypedef struct tw_plain_keys:
        const char *root_absent
        size_t nroot_absent
        const char *choice_absent
        size_t nchoice_absent
        const char *compact_format
    ctypedef struct tw_plain_doc:
        uint8_t others, prompt, choices
        size_t count
    int tw_plain_walk(const char *s, size_t n, const tw_plain_keys *keys, tw_plain_doc *doc,
                      tw_plain_choice *out, size_t cap, int path)


cdef extern from "rules/tw_heads.h" nogil:
    enum:
        TW_HEAD_NOMEM
    ptrdiff_t tw_select_heads(size_t n, const int64_t *coff, const int64_t *cand_ids,
                              const double *cand_lps, const int64_t *sampled_ids,
                              const double *sampled_lps, int64_t k, const int64_t *soff,
                              const int32_t *sup, int64_t *out_off, int64_t *out_ids,
                              double *out_lps, int *code, int simd)
    ptrdiff_t tw_compact_rows_candidates(size_t n, const int64_t *roff, const uint32_t *row_ids,
                                         const float *row_vals, const int64_t *sampled,
                                         int64_t num_top, float *out_sampled, int *kind,
                                         int64_t *coff, int64_t *cand_ids, double *cand_lps,
                                         int path)
    ptrdiff_t tw_compact_heads(size_t n, const int64_t *roff, const uint32_t *row_ids,
                               const float *row_vals, const int64_t *sampled, int64_t num_top,
                               int64_t k, const int64_t *soff, const int32_t *sup,
                               float *out_sampled, int64_t *out_off, int64_t *out_ids,
                               float *out_lps, int *row_kind, int *head_code, int path)
    ptrdiff_t tw_compact_heads_checked(size_t n, const int64_t *roff, const uint32_t *row_ids,
                                       const float *row_vals, const int64_t *sampled, int64_t num_top,
                                       int64_t k, const int64_t *soff, const int32_t *sup,
                                       float *out_sampled, int64_t *out_off, int64_t *out_ids,
                                       float *out_lps, int *row_kind, int *head_code, int path,
                                       ptrdiff_t *value_bad, ptrdiff_t *support_bad)
    int tw_compact_candidates(size_t n, const int64_t *roff, const uint32_t *row_ids,
                              const float *row_vals, int64_t num_top, int64_t *coff,
                              int64_t *cand_ids, double *cand_lps, int simd)


cdef extern from "wire/tw_records.h" nogil:
    ctypedef struct tw_rec_result:
        ptrdiff_t sampled_err
        int sampled_code
        ptrdiff_t top_err
        int top_code
        size_t ncand
    ctypedef struct tw_rec_cands:
        int64_t *ids
        double *lps
        size_t cap
        int grow
    enum:
        TW_REC_OK
        TW_REC_NOMEM
    void tw_rec_cands_free(tw_rec_cands *c)
    ptrdiff_t tw_rec_numbers(const char *buf, const tw_value *arr, double *out, int path)
    size_t tw_rec_token_strings(const char *buf, const tw_value *arr, int64_t *ids, int path)
    enum:
        TW_REC_V_MISSING
        TW_REC_V_NUMBER
    ptrdiff_t tw_rec_entries(const char *buf, const tw_value *content, int64_t *ids,
                                double *lp, uint8_t *lp_kind, double *slp, uint8_t *slp_kind, int path)
    ptrdiff_t tw_rec_triples(const char *buf, const tw_value *arr, int64_t *ids, double *values,
                                uint8_t *kinds, int path)
    ctypedef struct tw_rec_repeat:
        ptrdiff_t row
        size_t start
        size_t end
        int escaped
    int tw_rec_keyed_heads(const char *buf, const tw_value *arr, size_t n, int64_t *coff,
                              tw_rec_cands *cands, tw_rec_result *res, tw_rec_repeat *rep,
                              int path)
    int tw_rec_triple_heads(const char *buf, const tw_value *arr, size_t n, int64_t *coff,
                               tw_rec_cands *cands, tw_rec_result *res, int path)
    int tw_rec_parse(const char *buf, const tw_value *content, size_t n, const int64_t *ids, int want_top,
                        double *sampled, int64_t *coff, double *entry_lps, tw_rec_cands *cands,
                        tw_rec_result *res, int path)
    void tw_rec_read_during_scan(tw_doc *d)
    int tw_rec_take(const tw_doc *d, const tw_value *content, size_t n, const int64_t *ids,
                    int want_top, double *sampled, int64_t *coff, double *entry_lps,
                    tw_rec_cands *cands, tw_rec_result *res)


cdef extern from "rules/tw_validate.h" nogil:
    enum:
        TW_ROW_OK
        TW_ROW_REPEAT_DISAGREE
        TW_ROW_MISSING_SAMPLED
        TW_ROW_NOMEM
    ptrdiff_t tw_packed_f32_bad(const float *v, size_t n)
    ptrdiff_t tw_packed_f64_bad(const double *v, size_t n)
    ptrdiff_t tw_compact_values_bad(const float *v, size_t n)
    ptrdiff_t tw_compact_values_bad_on(const float *v, size_t n, int path)
    ptrdiff_t tw_compact_rows(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t n, const int64_t *sampled, float *out, int *kind, int simd)
    ptrdiff_t tw_compact_rows_valid(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t n, const int64_t *sampled, float *out, int simd)
    ptrdiff_t tw_support_rows(const int32_t *values, const int64_t *offsets, size_t n, const int64_t *sampled, int absent_ok, int *nomem, int path)
    ptrdiff_t tw_i32_negative(const int32_t *v, size_t n)
    ptrdiff_t tw_first_at_or_above(const void *v, size_t n, size_t width, uint32_t limit)
    ptrdiff_t tw_offsets_not_rising(const int64_t *v, size_t n)
    int64_t tw_routed_rows(int64_t n, int64_t prompt, int64_t start)
    int64_t TW_ROUTED_ROWS_MAX


cdef extern from "base/tw_pad.h" nogil:
    enum:
        TW_PAD_OK
        TW_PAD_TOO_MANY_TOKENS
        TW_PAD_BAD_OFFSETS
    ptrdiff_t tw_pad_rows(size_t rows, const void *const *src, const int64_t *lengths, size_t itemsize,
                          size_t width, const void *fill, void *dst)
    int tw_ragged_lengths(size_t rows, size_t tokens, const int64_t *const *offsets, const int64_t *counts,
                          const int64_t *sizes, int64_t *first, int64_t *lengths, int64_t *longest,
                          size_t *bad_row, size_t *bad_token)
    ptrdiff_t tw_pad_ragged(size_t rows, size_t tokens, const void *const *values, const int64_t *first,
                            const int64_t *lengths, size_t itemsize, size_t width, const void *fill, void *dst)


cdef extern from "wire/tw_sse.h" nogil:
    enum:
        TW_SSE_GENERATE
        TW_SSE_COMPLETIONS
        TW_SSE_CHAT
        TW_SSE_OK
        TW_SSE_DECLINE
        TW_SSE_NOMEM
        TW_SSE_RECORDS
    ctypedef struct tw_sse_buf:
        char *p
        size_t n, cap
    ctypedef struct tw_sse_field:
        size_t key, key_len, val, val_len
        int64_t event
    ctypedef struct tw_sse_choice:
        int64_t index, first_event, last_event
        tw_sse_buf ids
        size_t nids
        tw_sse_buf rec[4]
        int has_records
        int sent_ids
        tw_sse_buf text, finish, stop, role, prompt, store
        tw_sse_field *once
        size_t nonce
        int64_t *starts
        int64_t *events
        size_t nstarts
    ctypedef struct tw_sse:
        int form, done
        int64_t event
        tw_sse_buf pending
        tw_sse_buf root_store
        tw_sse_field *root
        size_t nroot
        tw_sse_buf prompt, usage
        int64_t prompt_event
        tw_sse_choice *choices
        size_t nchoices
    tw_sse *tw_sse_new(int form)
    void tw_sse_free(tw_sse *s)
    int tw_sse_feed(tw_sse *s, const char *buf, size_t len, int path)
    size_t tw_sse_document(const tw_sse *s, char *out)
