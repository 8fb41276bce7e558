# cython: language_level=3, freethreading_compatible=True
"""The compiled core: C kernels over raw buffers, the GIL released around every hot loop."""

import json
import os
import sys
import warnings

import numpy as np

cimport numpy as cnp
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.ref cimport PyObject


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from ._args import check_input, check_top_k, output_bytes
from ._errors import MalformedResponseError, invalid_json
from . import _json, _table
from .extract import python as _extract
from .kernels import python as _kernels
from .rules import generate as _generate
from .rules import openai as _openai_rules

cnp.import_array()


cdef extern from "tw_hash.h" nogil:
    int tw_hash_seed(const uint8_t *key)


cdef _seed_hashes():
    # The secret of every table whose keys a response chooses (csrc/tw_hash.h), drawn once.
    cdef bytes key = os.urandom(32)
    tw_hash_seed(<const uint8_t *><const char *>key)


_seed_hashes()


# --- memory: every array a parse makes comes from tw_mem's size-class cache ----------------------

cdef extern from "tw_mem.h" nogil:
    void *tw_mem_alloc(size_t n)
    void *tw_mem_calloc(size_t count, size_t size)
    void *tw_mem_realloc(void *p, size_t n)
    void tw_mem_free(void *p)
    size_t tw_mem_set_limit(size_t bytes)
    ctypedef struct tw_mem_stats:
        size_t cached_bytes, cached_blocks, limit, hits, misses
    void tw_mem_get_stats(tw_mem_stats *out)


cdef extern from "numpy/arrayobject.h":
    ctypedef struct PyDataMemAllocator:
        void *ctx
        void *(*alloc "malloc")(void *ctx, size_t size) noexcept nogil
        void *(*zalloc "calloc")(void *ctx, size_t nelem, size_t elsize) noexcept nogil
        void *(*resize "realloc")(void *ctx, void *ptr, size_t size) noexcept nogil
        void (*release "free")(void *ctx, void *ptr, size_t size) noexcept nogil
    ctypedef struct PyDataMem_Handler:
        char name[127]
        uint8_t version
        PyDataMemAllocator allocator
    object PyDataMem_SetHandler(object handler)


cdef void *_np_alloc(void *ctx, size_t size) noexcept nogil:
    return tw_mem_alloc(size)


cdef void *_np_zalloc(void *ctx, size_t nelem, size_t elsize) noexcept nogil:
    return tw_mem_calloc(nelem, elsize)


cdef void *_np_resize(void *ctx, void *ptr, size_t size) noexcept nogil:
    return tw_mem_realloc(ptr, size)


cdef void _np_release(void *ctx, void *ptr, size_t size) noexcept nogil:
    tw_mem_free(ptr)


# numpy's allocator for the arrays made while a parse runs (the arrays keep it for their free).
cdef PyDataMem_Handler _np_handler
memcpy(_np_handler.name, b"tokenwire", 10)
_np_handler.version = 1
_np_handler.allocator.ctx = NULL
_np_handler.allocator.alloc = _np_alloc
_np_handler.allocator.zalloc = _np_zalloc
_np_handler.allocator.resize = _np_resize
_np_handler.allocator.release = _np_release
_NP_HANDLER = PyCapsule_New(&_np_handler, "mem_handler", NULL)


def set_memory_cache(limit):
    """Bound the bytes tokenwire keeps cached for reuse by later parses (0 releases them all
    and caches nothing). Returns the previous bound."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError("limit must be an int (bytes)")
    if limit < 0:
        raise ValueError("limit must be >= 0")
    return tw_mem_set_limit(min(limit, 2**62))


def memory_stats():
    """The block cache now: cached bytes and blocks, its bound, and how many large requests
    it served (hits) or passed to the system (misses)."""
    cdef tw_mem_stats st
    tw_mem_get_stats(&st)
    return {"cached_bytes": st.cached_bytes, "cached_blocks": st.cached_blocks,
            "limit": st.limit, "hits": st.hits, "misses": st.misses}


cdef extern from "tw_cpu.h" nogil:
    enum:
        TW_PATH_AUTO
        TW_PATH_SCALAR
        TW_PATH_AVX2
        TW_PATH_AVX512
        TW_PATH_NEON
    int tw_path_available(int path)
    int tw_path_best()
    const char *tw_path_name(int path)


cdef extern from "tw_base64.h" nogil:
    ptrdiff_t tw_b64_decoded_size(const char *src, size_t len)
    ptrdiff_t tw_b64_decode(const char *src, size_t len, uint8_t *dst, size_t cap, int path,
                            size_t *err_pos)
    size_t tw_b64_encoded_size(size_t n)
    size_t tw_b64_encode(const uint8_t *src, size_t len, char *dst, int path)


_PATHS = {"scalar": TW_PATH_SCALAR, "avx2": TW_PATH_AVX2, "avx512": TW_PATH_AVX512,
          "neon": TW_PATH_NEON}

# The one process-wide setting: the code path of every C kernel (the structural scanner, the
# record readers, head selection, row validation, base64), one TW_PATH_* of tw_cpu.h. Read
# from TOKENWIRE_SIMD at import, changed only by set_simd_path() (tests use it, or
# simd_path_forced, to cover every path); each parse reads it once when it starts.
cdef int _path = tw_path_best()


def simd_paths():
    """Names of the code paths this CPU can run, best last."""
    return [name for name, p in _PATHS.items() if tw_path_available(p)]


def simd_path():
    return tw_path_name(_path).decode()


def set_simd_path(name):
    """Force the code path of every C kernel (``None`` or ``"auto"``: the best one). Returns
    the previous name."""
    global _path
    previous = simd_path()
    if name is None or name == "auto":
        _path = tw_path_best()
    elif name not in _PATHS:
        raise ValueError(f"unknown SIMD path {name!r}; choose from {sorted(_PATHS)}")
    elif not tw_path_available(_PATHS[name]):
        raise ValueError(f"this CPU cannot run the {name} path")
    else:
        _path = _PATHS[name]
    return previous


class simd_path_forced:
    """``with simd_path_forced("scalar"): ...`` runs every C kernel on that path inside the
    block and restores the previous path on leaving it (for tests: the setting is
    process-wide, so concurrent parses in other threads see it too)."""

    def __init__(self, name):
        self.name = name
        self.previous = None

    def __enter__(self):
        self.previous = set_simd_path(self.name)
        return self.name

    def __exit__(self, *exc):
        set_simd_path(self.previous)
        return False


_forced = os.environ.get("TOKENWIRE_SIMD", "").strip().lower()
if _forced:
    try:
        set_simd_path(_forced)
    except ValueError as exc:
        warnings.warn(f"TOKENWIRE_SIMD ignored: {exc}", RuntimeWarning, stacklevel=2)


cdef object _bytes_view(object data):
    """A flat byte view of str (as UTF-8) or any contiguous buffer; no copy for buffers."""
    if isinstance(data, str):
        try:
            data = (<str>data).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: what orjson.loads says of such a str
            raise MalformedResponseError("invalid JSON: str is not valid UTF-8: surrogates not allowed") from None
    try:
        return memoryview(data).cast("B")
    except TypeError:
        raise TypeError(
            f"expected str or a bytes-like object, not {type(data).__name__}"
        ) from None


cdef const char *_EMPTY = ""


cdef inline const char *_start(const unsigned char[::1] view) noexcept:
    return <const char *>&view[0] if view.shape[0] else _EMPTY


# Below this many input bytes the decode takes less time than releasing the GIL does.
DEF _NOGIL_MIN = 16384


cdef int _acquire(object data, Py_buffer *buf, const char **src, Py_ssize_t *size) except -1:
    """Point ``src``/``size`` at the bytes of ``data``: a str's UTF-8, or any C-contiguous
    buffer, which ``buf`` then holds. Returns 1 when ``buf`` must be released."""
    if isinstance(data, str):
        src[0] = PyUnicode_AsUTF8AndSize(data, size)
        return 0
    if PyObject_GetBuffer(data, buf, PyBUF_C_CONTIGUOUS) < 0:
        raise TypeError(f"expected str or a bytes-like object, not {type(data).__name__}")
    src[0] = <const char *>buf.buf
    size[0] = buf.len
    return 1


def b64decode(data, out=None):
    """Strictly decode base64 ``data`` (str or bytes-like) to a uint8 array, into ``out`` when given."""
    cdef Py_buffer buf
    cdef const char *src
    cdef Py_ssize_t size = 0
    cdef ptrdiff_t need, got = -1
    cdef size_t err = 0
    cdef uint8_t *dst
    cdef int path = _path
    cdef cnp.npy_intp dims[1]
    # The arguments first (the input, then the output buffer), then the content: as the reference.
    if not (type(data) is bytes or isinstance(data, str)):
        check_input(data)
    if out is not None and not (type(out) is np.ndarray and cnp.PyArray_NDIM(out) == 1
                                and cnp.PyArray_TYPE(out) == cnp.NPY_UINT8
                                and cnp.PyArray_IS_C_CONTIGUOUS(out) and cnp.PyArray_ISWRITEABLE(out)):
        out = output_bytes(out)
    if isinstance(data, str) and not (<str>data).isascii():  # never base64 (nor always UTF-8)
        raise MalformedResponseError("invalid base64")
    cdef bint borrowed = _acquire(data, &buf, &src, &size)
    try:
        need = tw_b64_decoded_size(src, <size_t>size)
        if need < 0:
            raise MalformedResponseError("invalid base64")
        if out is None:
            dims[0] = need
            result = cnp.PyArray_SimpleNew(1, dims, cnp.NPY_UINT8)
        else:
            if cnp.PyArray_SIZE(out) < need:
                raise ValueError(f"output buffer holds {cnp.PyArray_SIZE(out)} bytes, {need} needed")
            result = out if cnp.PyArray_SIZE(out) == need else out[:need]
        if need == 0:
            return result
        dst = <uint8_t *>cnp.PyArray_DATA(result)
        # need bounds the writes: a buffer rewritten by another thread may change its padding.
        if size >= _NOGIL_MIN:
            with nogil:
                got = tw_b64_decode(src, <size_t>size, dst, <size_t>need, path, &err)
        else:
            got = tw_b64_decode(src, <size_t>size, dst, <size_t>need, path, &err)
        if got != need:
            raise MalformedResponseError("invalid base64")
        return result
    finally:
        if borrowed:
            PyBuffer_Release(&buf)


def b64encode(data):
    """Standard base64 with padding, as bytes (str or any contiguous buffer in)."""
    cdef Py_buffer buf
    cdef const char *src
    cdef Py_ssize_t size = 0
    cdef size_t need
    cdef char *dst
    cdef int path = _path
    cdef bint borrowed = _acquire(data, &buf, &src, &size)
    try:
        need = tw_b64_encoded_size(<size_t>size)
        result = PyBytes_FromStringAndSize(NULL, need)
        dst = PyBytes_AS_STRING(result)
        if size >= _NOGIL_MIN:
            with nogil:
                tw_b64_encode(<const uint8_t *>src, <size_t>size, dst, path)
        else:
            tw_b64_encode(<const uint8_t *>src, <size_t>size, dst, path)
        return result
    finally:
        if borrowed:
            PyBuffer_Release(&buf)


# --- Python lists from rows ----------------------------------------------------------------------

cdef extern from "Python.h":
    ctypedef struct _ListObject "PyListObject":
        PyObject **ob_item
    object _new_list "PyList_New"(Py_ssize_t size)
    PyObject *_new_row "PyList_New"(Py_ssize_t size) except NULL
    PyObject *_new_int "PyLong_FromLongLong"(long long value) except NULL
    PyObject *_new_float "PyFloat_FromDouble"(double value) except NULL

ctypedef fused _flat:
    int32_t
    uint32_t
    int64_t
    float
    double

# The element types built here; any other array goes through the reference.
_LIST_DTYPES = tuple(np.dtype(t) for t in (np.int32, np.uint32, np.int64, np.float32, np.float64))


cdef int _fill_rows(object outer, const _flat[::1] flat, const int64_t[::1] bounds) except -1:
    """Put ``flat[bounds[i]:bounds[i + 1]]`` into row ``i`` of ``outer`` (rows already sized)."""
    cdef PyObject **rows = (<_ListObject *>outer).ob_item
    cdef PyObject **items
    cdef Py_ssize_t i, j, start, n = bounds.shape[0] - 1
    for i in range(n):
        items = (<_ListObject *>rows[i]).ob_item
        start = bounds[i]
        for j in range(bounds[i + 1] - start):
            if _flat is float or _flat is double:
                items[j] = _new_float(flat[start + j])
            else:
                items[j] = _new_int(flat[start + j])
    return 0


cdef bint _well_formed(object offsets, list arrays):
    """The rows are in bounds and every array is one this module builds lists from."""
    cdef const int64_t[::1] bounds = offsets
    cdef Py_ssize_t i, n = bounds.shape[0] - 1
    if bounds[0] < 0:
        return False
    for i in range(n):
        if bounds[i + 1] < bounds[i]:
            return False
    for array in arrays:
        if (array.ndim != 1 or array.dtype not in _LIST_DTYPES or not array.dtype.isnative
                or array.shape[0] < bounds[n]):
            return False
    return True


def rows_to_lists(offsets, *values):
    """The reference's ``rows_to_lists``, built directly: every row list of every array is
    made before any element, so the collections that creating thousands of lists triggers
    traverse empty rows, and no flat list or per-row array is made on the way.

    The offsets are read once, into a private copy that is checked and then both sizes the
    rows and bounds the fill: those collections can run a gc callback, and another thread
    can write the caller's array, between the two (a row sized from one state and filled
    from another would be written past its end). The values are new views, whose length and
    dtype (checked here) only this call sees, each read once by its fill."""
    bounds = np.array(offsets)  # always a copy
    arrays = [np.asarray(v).view() for v in values]
    if bounds.ndim != 1 or bounds.shape[0] < 2 or bounds.dtype.kind not in "iu":
        return _kernels.rows_to_lists(bounds, *arrays)
    signed = np.ascontiguousarray(bounds, dtype=np.int64)  # uint64 past 2**63 turns negative
    if not _well_formed(signed, arrays):
        return _kernels.rows_to_lists(bounds, *arrays)
    cdef const int64_t[::1] b = signed
    cdef Py_ssize_t i, n = b.shape[0] - 1
    cdef PyObject **rows
    flats = [np.ascontiguousarray(array) for array in arrays]  # a copy only of a strided array
    out = []
    for _ in flats:
        outer = _new_list(n)
        out.append(outer)  # owned from here: a failure below frees what was made
        rows = (<_ListObject *>outer).ob_item
        for i in range(n):
            rows[i] = _new_row(b[i + 1] - b[i])
    for outer, array in zip(out, flats):
        if array.dtype == np.float32:
            _fill_rows[float](outer, array, b)
        elif array.dtype == np.float64:
            _fill_rows[double](outer, array, b)
        elif array.dtype == np.int64:
            _fill_rows[int64_t](outer, array, b)
        elif array.dtype == np.uint32:
            _fill_rows[uint32_t](outer, array, b)
        else:
            _fill_rows[int32_t](outer, array, b)
    return out


include "_fields.pxi"


cdef extern from "tw_scan.h" nogil:
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
    ctypedef struct tw_value:
        uint8_t present, type, has_escape, ascii, all_int, read
        uint16_t blob
        size_t start, end, count, read_at
    ctypedef struct tw_choice:
        uint8_t is_object
        tw_value f[TW_NFIELDS]
    ctypedef struct tw_doc:
        int path
        int decode
        int b64_path
        uint64_t blank_fields
        int openai
        int sglang
        uint8_t top_is_object
        tw_value prompt_token_ids, choices
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
    int tw_blank_field(tw_doc *doc, size_t ci, int field)
    uint8_t *tw_take_blob(tw_doc *doc, const tw_value *v, size_t *len)
    int tw_array_element(const char *buf, const tw_value *v, size_t index, size_t *start, size_t *end)


cdef extern from "tw_heads.h" nogil:
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
    int tw_compact_candidates(size_t n, const int64_t *roff, const uint32_t *row_ids,
                              const float *row_vals, int64_t num_top, int64_t *coff,
                              int64_t *cand_ids, double *cand_lps, int simd)


# tw_heads' codes, as the reference words them.
_HEAD_REASONS = (None, *_kernels.HEAD_REASONS)


cdef extern from "tw_records.h" nogil:
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


cdef extern from "tw_validate.h" nogil:
    enum:
        TW_ROW_OK
        TW_ROW_REPEAT_DISAGREE
        TW_ROW_MISSING_SAMPLED
        TW_ROW_NOMEM
    ptrdiff_t tw_packed_f32_bad(const float *v, size_t n)
    ptrdiff_t tw_packed_f64_bad(const double *v, size_t n)
    ptrdiff_t tw_compact_values_bad(const float *v, size_t n)
    ptrdiff_t tw_compact_rows(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t n, const int64_t *sampled, float *out, int *kind, int simd)
    ptrdiff_t tw_support_rows(const int32_t *values, const int64_t *offsets, size_t n, const int64_t *sampled, int absent_ok, int *nomem, int path)
    ptrdiff_t tw_i32_negative(const int32_t *v, size_t n)
    ptrdiff_t tw_offsets_not_rising(const int64_t *v, size_t n)


from ._types import Ragged
from ._wire import COMPACT_FORMAT

cdef uint64_t _MAX_MASK_ID = 2147483647

# Where the scanner records each value of a generate choice the rules read.
_FIELDS = {
    "token_ids": TW_F_TOKEN_IDS,
    "completion_logprobs.data": TW_F_CL_DATA,
    "compact_logprobs.data": TW_F_CP_DATA,
    "compact_logprobs.offsets": TW_F_CP_OFFSETS,
    "sampling_mask": TW_F_SAMPLING_MASK,
    "sampling_mask.ids.data": TW_F_SM_IDS_DATA,
    "sampling_mask.counts.data": TW_F_SM_COUNTS_DATA,
    "kept_tokens.ids": TW_F_KT_IDS,
    "kept_tokens.counts": TW_F_KT_COUNTS,
    "routed_experts": TW_F_ROUTED,
    "routed_experts.data": TW_F_RE_DATA,
    "logprobs.content": TW_F_LOGPROBS_CONTENT,
    "raw_output": TW_F_RAW_OUTPUT,
    "raw_output.completion_token_ids": TW_F_RO_TOKEN_IDS,
    "raw_output.completion_logprobs.content": TW_F_RO_CONTENT,
}
def _blank_mask(fields):
    """The ``tw_doc.blank_fields`` bits of these TW_F_* fields (made once, at import)."""
    mask = 0
    for field in fields:
        mask |= 1 << field
    return mask


# What the generate parser reads from the raw bytes besides what the scan blanks itself.
_GENERATE_BLANK = _blank_mask((TW_F_LOGPROBS_CONTENT,))
# Where the scanner records each value the OpenAI-compatible parsers read through their hooks.
_OPENAI_FIELDS = {
    "token_ids": TW_F_TOKEN_IDS,
    "prompt_token_ids": TW_F_PROMPT_IDS,
    "logprobs": TW_F_LOGPROBS,
    "logprobs.token_logprobs": TW_F_LP_TOKEN_LOGPROBS,
    "logprobs.tokens": TW_F_LP_TOKENS,
    "logprobs.token_ids": TW_F_LP_TOKEN_IDS,
    "logprobs.content": TW_F_LOGPROBS_CONTENT,
    "raw_output": TW_F_RAW_OUTPUT,
    "raw_output.completion_token_ids": TW_F_RO_TOKEN_IDS,
    "raw_output.completion_logprobs.content": TW_F_RO_CONTENT,
    "logprobs.top_logprobs": TW_F_LP_TOP,
}
# Read from the raw bytes (token_ids and the top-level prompt ids are blanked by the scan);
# text_offset is read by nothing, top_logprobs only for heads.
# With a head the record candidates are read by tw_rec_parse and keyed rows by
# tw_rec_keyed_heads, so the same fields are blanked with a head or without.
_OPENAI_BLANK = _blank_mask((TW_F_PROMPT_IDS, TW_F_LP_TOKEN_LOGPROBS, TW_F_LP_TOKENS,
                             TW_F_LP_TOKEN_IDS, TW_F_LP_TEXT_OFFSET, TW_F_RO_TOKEN_IDS, TW_F_LP_TOP,
                             TW_F_LOGPROBS_CONTENT, TW_F_RO_CONTENT))
# SGLang items.
_SGLANG_FIELDS = {
    "output_ids": TW_F_SGL_IDS,
    "meta_info.output_token_logprobs": TW_F_SGL_TRIPLES,
    "meta_info.output_top_logprobs": TW_F_SGL_TOP,
}
# Everything is read in C, heads included (tw_rec_triple_heads).
_SGLANG_BLANK = _blank_mask((TW_F_SGL_IDS, TW_F_SGL_TRIPLES, TW_F_SGL_TOP))
# Record lists read by tw_rec_entries, number lists by tw_rec_numbers.
_RECORD_FIELDS = {path: _OPENAI_FIELDS[path]
                  for path in ("logprobs.content", "raw_output.completion_logprobs.content")}
_NUMBER_FIELDS = {"logprobs.token_logprobs": TW_F_LP_TOKEN_LOGPROBS}
# A value of each class tw_rec_entries reports, as json.loads would give it (for messages).
_KIND_EXAMPLES = (None, 0.0, None, "", True, [], {})
# tw_records' codes, as the reference names them.
_NATIVE_CODES = (None, "not_object", "token", "number", "finite", "evidence", "missing_top",
                 "top_not_object", "top_no_id", "top_not_finite", "top_positive", "top_duplicate",
                 "sampled_not_number")


cdef uint8_t *_decoded(const char *buf, const tw_value *v, int path, size_t *size) except? NULL:
    """Strictly decode a recorded JSON string holding base64 into memory from tw_mem that the
    caller owns (``*size`` bytes), or NULL when the value is not a string of canonical
    base64. Long values are unescaped and decoded without the GIL."""
    cdef const char *src = buf + v.start
    cdef char *tmp = NULL
    cdef uint8_t *data = NULL
    cdef size_t length = v.end - v.start, err = 0
    cdef ptrdiff_t need = -1, got = -1
    if v.type != TW_T_STRING or not v.ascii:
        return NULL
    if v.has_escape:  # "\/" and friends: unescape first, then decode
        tmp = <char *>tw_mem_alloc(length + 1)
        if tmp == NULL:
            raise MemoryError()
        with nogil:
            length = tw_unescape(buf, v, tmp)
        src = tmp
    need = tw_b64_decoded_size(src, length)
    if need >= 0:
        data = <uint8_t *>tw_mem_alloc(<size_t>need + 1)
    if data != NULL and length < _NOGIL_MIN:
        got = tw_b64_decode(src, length, data, <size_t>need, path, &err)
    elif data != NULL:
        with nogil:
            got = tw_b64_decode(src, length, data, <size_t>need, path, &err)
    tw_mem_free(tmp)
    if need >= 0 and data == NULL:
        raise MemoryError()
    if got < 0:
        tw_mem_free(data)
        return NULL
    size[0] = <size_t>need
    return data


cdef object _decode(const char *buf, const tw_value *v, int path):
    """``_decoded`` as a uint8 array, or None."""
    cdef size_t size = 0
    cdef uint8_t *data = _decoded(buf, v, path, &size)
    return None if data == NULL else _adopt(data, size)


cdef void _free_blob(object capsule) noexcept:
    tw_mem_free(PyCapsule_GetPointer(capsule, NULL))


cdef object _adopt(uint8_t *data, size_t size):
    """A uint8 array over ``data`` (from tw_mem), which it owns from now on (freed with it)."""
    return _adopt_typed(data, size, cnp.NPY_UINT8)


cdef object _adopt_typed(uint8_t *data, size_t count, int typenum):
    """A 1-d array of ``count`` elements of ``typenum`` over ``data`` (from tw_mem), which it
    owns from now on (freed with it)."""
    cdef cnp.npy_intp dims[1]
    try:
        owner = PyCapsule_New(data, NULL, _free_blob)
    except BaseException:
        tw_mem_free(data)
        raise
    dims[0] = <cnp.npy_intp>count
    out = cnp.PyArray_SimpleNewFromData(1, dims, typenum, data)
    cnp.set_array_base(out, owner)
    return out


cdef inline const int64_t *_i64(object a):
    cdef int64_t[::1] v = a
    return &v[0] if v.shape[0] else NULL


cdef inline void _cands_init(tw_rec_cands *cands) noexcept:
    """Empty candidate storage that the tw_rec passes grow."""
    cands.ids = NULL
    cands.lps = NULL
    cands.cap = 0
    cands.grow = 1


cdef object _candidates(int rc, object coff, const tw_rec_cands *cands, size_t ncand):
    """The candidates a tw_rec pass wrote (its return code ``rc``), copied out."""
    if rc == TW_REC_NOMEM:
        raise MemoryError()
    if rc != TW_REC_OK:
        raise AssertionError(f"tokenwire: logprob records could not be read (code {rc})")
    cand_ids = np.empty(ncand, dtype=np.int64)
    cand_lps = np.empty(ncand, dtype=np.float64)
    if ncand:
        memcpy(cnp.PyArray_DATA(cand_ids), cands.ids, ncand * sizeof(int64_t))
        memcpy(cnp.PyArray_DATA(cand_lps), cands.lps, ncand * sizeof(double))
    return _kernels.Candidates(coff, cand_ids, cand_lps)


cdef class _Scan:
    """The raw bytes of one response and what the structural scanner recorded in them."""
    cdef const char *buf
    cdef tw_doc doc
    cdef int path
    cdef object keep
    cdef readonly object source  # the bytes buf points into, as a Python buffer (for spans)

    def __cinit__(self):
        tw_doc_init(&self.doc)
        tw_rec_read_during_scan(&self.doc)  # logprobs.content entries: read as they are scanned

    def __dealloc__(self):
        tw_doc_free(&self.doc)

    cdef object document(self, object raw, uint32_t blank=_GENERATE_BLANK, bint openai=False,
                         bint sglang=False):
        """Scan ``raw`` and return the document with its big values blanked, parsed by orjson.
        ``blank``: the choice fields also blanked (read from the raw bytes instead), as
        ``tw_doc.blank_fields`` bits (``_blank_mask``);
        ``openai``/``sglang``: an OpenAI-compatible / SGLang document (see tw_scan.h)."""
        cdef const unsigned char[::1] view
        cdef size_t n
        cdef int rc
        cdef char *dst
        if type(raw) is bytes:  # the common case, without a view: bytes never change
            self.source = raw
            self.buf = PyBytes_AS_STRING(raw)
            n = <size_t>PyBytes_GET_SIZE(raw)
        else:
            mv = _bytes_view(raw)
            view = mv
            n = view.shape[0]
            if type(mv.obj) is bytes:  # a subclass may export another object's memory
                self.keep = view
                self.source = mv
                self.buf = _start(view)
            else:
                # Another thread may rewrite any memory but a bytes object's (a reused receive
                # buffer, also behind a read-only view) while the GIL is released: every pass
                # then reads one private snapshot, so counts taken by one pass hold for the next.
                dst = <char *>tw_mem_alloc(n + 1)
                if dst == NULL:
                    raise MemoryError()
                memcpy(dst, _start(view), n)
                self.source = _adopt(<uint8_t *>dst, n)  # owns the snapshot from now on
                self.buf = dst
        self.path = _path
        self.doc.path = _path
        self.doc.decode = 1
        self.doc.b64_path = _path
        self.doc.openai = openai
        self.doc.sglang = sglang
        self.doc.blank_fields = blank  # values read in C: orjson need not build them
        with nogil:
            rc = tw_scan(self.buf, n, &self.doc)
        if rc == TW_ERR_NOMEM:
            raise MemoryError("tokenwire: out of memory while scanning the response")
        if rc != TW_OK:
            raise MalformedResponseError(
                f"invalid JSON: {self.doc.err_msg.decode()} at byte {self.doc.err_pos}"
            )
        stripped = PyBytes_FromStringAndSize(NULL, tw_stripped_size(&self.doc, n))
        dst = PyBytes_AS_STRING(stripped)
        with nogil:
            tw_strip(self.buf, n, &self.doc, dst)
        try:
            return _json.loads(stripped)
        except _json.JSONDecodeError as exc:
            raise invalid_json(exc, stripped) from None

    cdef object blob(self, const tw_value *v):
        """The bytes of the base64 string ``v`` as a uint8 array, or None when they are not
        canonical base64: decoded by the scan when it could, else now."""
        cdef size_t size = 0
        cdef uint8_t *data = tw_take_blob(&self.doc, v, &size)
        if data != NULL:
            return _adopt(data, size)
        return _decode(self.buf, v, self.path)

    def has_record(self, index):
        return index is None or index < self.doc.nchoices

    cdef const tw_value *value(self, object index, object path, dict fields=_FIELDS):
        """The record of ``path`` in choice ``index`` (None: the top level), or NULL when the
        scanner does not record that path (the parsed document then holds the value)."""
        if index is None:
            return &self.doc.prompt_token_ids if path == "prompt_token_ids" else NULL
        field = fields.get(path)
        if field is None:
            return NULL
        return &self.doc.choice[<size_t>index].f[<int>field]

    cdef const tw_value *array(self, object index, object path, dict fields):
        """The record of ``path`` (as ``value``) when it is an array, else NULL."""
        cdef const tw_value *v = self.value(index, path, fields)
        return v if v != NULL and v.type == TW_T_ARRAY else NULL

    cdef object text(self, const tw_value *v):
        return PyBytes_FromStringAndSize(self.buf + v.start, v.end - v.start)

    cdef object parsed(self, const tw_value *v):
        """The recorded array or string ``v`` as ``json.loads`` gives it (a string's record
        holds its characters without the quotes)."""
        text = self.text(v)
        return _json.loads(b'"' + text + b'"' if v.type == TW_T_STRING else text)

    cdef object element(self, const tw_value *v, size_t index):
        """Element ``index`` of the array ``v``, parsed."""
        cdef size_t start = 0, end = 0
        if tw_array_element(self.buf, v, index, &start, &end) != 0:
            raise IndexError(index)
        return _json.loads(PyBytes_FromStringAndSize(self.buf + start, end - start))

    cdef object numbers(self, const tw_value *v):
        cdef ptrdiff_t bad
        cdef double[::1] view
        out = np.empty(v.count + 1, dtype=np.float64)  # one spare element: never empty
        view = out
        with nogil:
            bad = tw_rec_numbers(self.buf, v, &view[0], self.path)
        if bad >= 0:
            return out[:bad], bad
        return out[: v.count], None

    cdef object native(self, const tw_value *v, object ids, bint want_top):
        """tw_rec_parse over the array ``v``: the reference's ``native_entries``."""
        cdef size_t n = len(ids)
        cdef tw_rec_cands cands
        cdef tw_rec_result res
        cdef int rc
        cdef int top = want_top
        cdef double[::1] sampled_view, entry_view
        cdef int64_t[::1] coff_view
        cdef const int64_t *ids_ptr
        sampled = np.zeros(n + 1, dtype=np.float64)  # one spare element: never an empty view
        entry_lps = np.zeros(n + 1, dtype=np.float64)
        coff = np.zeros(n + 1, dtype=np.int64)
        sampled_view, entry_view, coff_view = sampled, entry_lps, coff
        ids_ptr = _i64(ids)
        _cands_init(&cands)
        try:
            with nogil:
                if v.read:  # the scan read its entries
                    rc = tw_rec_take(&self.doc, v, n, ids_ptr, top, &sampled_view[0],
                                     &coff_view[0], &entry_view[0], &cands, &res)
                else:
                    rc = tw_rec_parse(self.buf, v, n, ids_ptr, top, &sampled_view[0],
                                      &coff_view[0], &entry_view[0], &cands, &res, self.path)
            candidates = _candidates(rc, coff, &cands, res.ncand)
        finally:
            tw_rec_cands_free(&cands)
        return _kernels.NativeEntries(
            sampled[:n],
            None if res.sampled_err < 0 else (res.sampled_err, _NATIVE_CODES[res.sampled_code]),
            candidates,
            entry_lps[:n],
            None if res.top_err < 0 else (res.top_err, _NATIVE_CODES[res.top_code]),
        )

    cdef object head_rows(self, const tw_value *v, bint keyed):
        """Head candidate rows of the array ``v``: SGLang's triples (tw_rec_triple_heads,
        the reference's ``top_triples``) or, ``keyed``, completions' objects
        (tw_rec_keyed_heads, the reference's ``keyed_rows``). Returns the candidates, the
        first bad row and the first row repeating a key (``True`` when a key holds an
        escape: the caller reads the rows)."""
        cdef size_t n = v.count
        cdef tw_rec_cands cands
        cdef tw_rec_result res
        cdef tw_rec_repeat rep
        cdef int rc
        cdef int64_t[::1] coff_view
        coff = np.zeros(n + 1, dtype=np.int64)
        coff_view = coff
        rep.row = -1
        rep.escaped = 0
        _cands_init(&cands)
        try:
            with nogil:
                if keyed:
                    rc = tw_rec_keyed_heads(self.buf, v, n, &coff_view[0], &cands, &res, &rep,
                                               self.path)
                else:
                    rc = tw_rec_triple_heads(self.buf, v, n, &coff_view[0], &cands, &res,
                                                self.path)
            candidates = _candidates(rc, coff, &cands, res.ncand)
        finally:
            tw_rec_cands_free(&cands)
        if rep.escaped:
            return candidates, None, True
        if rep.row >= 0:
            key = json.loads(b'"' + PyBytes_FromStringAndSize(self.buf + rep.start, rep.end - rep.start) + b'"')
            return candidates, None, (rep.row, key)
        return candidates, None if res.top_err < 0 else (res.top_err, _NATIVE_CODES[res.top_code]), None

    cdef object records(self, const tw_value *v):
        """``logprobs.content`` entries: the Records the reference's reader builds, its values
        as a _RecordValues."""
        cdef size_t n = v.count
        cdef ptrdiff_t bad
        cdef int64_t[::1] ids_view
        cdef double[::1] lp_view, slp_view
        cdef uint8_t[::1] lpk_view, slpk_view
        ids = np.empty(n + 1, dtype=np.int64)
        lp = np.empty(n + 1, dtype=np.float64)
        slp = np.empty(n + 1, dtype=np.float64)
        lp_kind = np.empty(n + 1, dtype=np.uint8)
        slp_kind = np.empty(n + 1, dtype=np.uint8)
        ids_view, lp_view, slp_view, lpk_view, slpk_view = ids, lp, slp, lp_kind, slp_kind
        with nogil:
            bad = tw_rec_entries(self.buf, v, &ids_view[0], &lp_view[0], &lpk_view[0],
                                    &slp_view[0], &slpk_view[0], self.path)
        end = n if bad < 0 else bad
        sampling = bool((slp_kind[:end] != TW_REC_V_MISSING).any())
        mixed = None
        if sampling:
            missing = np.flatnonzero(slp_kind[:end] == TW_REC_V_MISSING)
            mixed = int(missing[0]) if len(missing) else None
            values, kinds = slp[:end], slp_kind[:end]
        else:
            values, kinds = lp[:end], lp_kind[:end]
        return _extract.Records(ids[:end], _record_values(values, kinds),
                                "sampling_logprob" if sampling else "logprob",
                                None if bad < 0 else bad, mixed)

    cdef object triples(self, const tw_value *v):
        """SGLang ``[logprob, token_id, text]`` entries: the Records the reference's reader
        builds, its values as a _RecordValues."""
        cdef size_t n = v.count
        cdef ptrdiff_t bad
        cdef int64_t[::1] ids_view
        cdef double[::1] values_view
        cdef uint8_t[::1] kinds_view
        ids = np.empty(n + 1, dtype=np.int64)
        values = np.empty(n + 1, dtype=np.float64)
        kinds = np.empty(n + 1, dtype=np.uint8)
        ids_view, values_view, kinds_view = ids, values, kinds
        with nogil:
            bad = tw_rec_triples(self.buf, v, &ids_view[0], &values_view[0], &kinds_view[0],
                                    self.path)
        end = n if bad < 0 else bad
        return _extract.Records(ids[:end], _record_values(values[:end], kinds[:end]), "logprob",
                                None if bad < 0 else bad)

    cdef object token_strings(self, const tw_value *v):
        cdef size_t named
        cdef int64_t[::1] view
        out = np.empty(v.count + 1, dtype=np.int64)
        view = out
        with nogil:
            named = tw_rec_token_strings(self.buf, v, &view[0], self.path)
        return out[: v.count], named

    cdef object ints(self, const tw_value *v, uint64_t high):
        cdef size_t err = 0
        cdef int rc = 0
        cdef int64_t *data
        cdef cnp.npy_intp dims[1]
        if v.type != TW_T_ARRAY:
            return None
        dims[0] = <cnp.npy_intp>v.count
        out = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        data = <int64_t *>cnp.PyArray_DATA(out)
        if v.read and v.count < _NOGIL_MIN // 8:  # read during the scan: a short copy
            rc = tw_take_uints(&self.doc, v, high, data, &err)
        elif v.read:
            with nogil:
                rc = tw_take_uints(&self.doc, v, high, data, &err)
        elif v.count:
            with nogil:
                rc = tw_parse_uint_array(self.buf, v, high, data, &err, self.path)
        if rc < 0:
            return out[:err], v.count, err
        return out, v.count, None

    cdef object nested(self, const tw_value *v):
        cdef size_t total = 0, bad = 0, rows = v.count
        cdef int rc
        cdef int64_t[::1] offs
        cdef int32_t[::1] vals
        if v.read:  # the scan read its rows
            total = tw_nested_total(&self.doc, v)
        else:  # no walk to count: the unused tail is sliced off
            total = tw_nested_bound(self.buf, v)
        offsets = np.empty(rows + 1, dtype=np.int64)
        values = np.empty(total, dtype=np.int32)
        offs = offsets
        vals = values
        if v.read:
            with nogil:
                rc = tw_take_nested(&self.doc, v, _MAX_MASK_ID, &offs[0], &vals[0] if total else NULL, &bad)
        else:
            with nogil:
                rc = tw_parse_nested_uint(self.buf, v, _MAX_MASK_ID, &offs[0],
                                          &vals[0] if total else NULL, &bad)
        if rc < 0:
            return Ragged(offsets[: bad + 1], values[: offsets[bad]]), rows, bad
        return Ragged(offsets, values[: offsets[rows]]), rows, None


# --- the kernels: the reference's per-token loops as free functions, in C ------------------------


def int_list(value, high):
    """The reference's ``int_list``, one pass in C over a list."""
    if type(value) is not list:
        return _kernels.int_list(value, high)
    cdef list items = value
    cdef Py_ssize_t i = 0, n = len(items)
    cdef long long x, top = min(high, 2**63 - 1)
    cdef int overflow = 0
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    while i < n:
        item = items[i]
        if type(item) is not int:
            break
        x = PyLong_AsLongLongAndOverflow(item, &overflow)
        if overflow or x < 0 or x > top:
            break
        o[i] = x
        i += 1
    return (out, n, None) if i == n else (out[:i], n, i)


def first_bad(rule, values):
    cdef ptrdiff_t bad = -1
    cdef size_t n = len(values)
    cdef const float[::1] f32
    cdef const double[::1] f64
    cdef const int32_t[::1] i32
    if n == 0:
        return -1
    if rule == "negative":
        if values.dtype.itemsize != 4:  # int16 routing: numpy's comparison is the loop
            return _kernels.first_bad(rule, values)
        i32 = values
        with nogil:
            bad = tw_i32_negative(&i32[0], n)
    elif values.dtype.itemsize == 8:
        f64 = values
        with nogil:
            bad = tw_packed_f64_bad(&f64[0], n)
    else:
        f32 = values
        if rule == "packed":
            with nogil:
                bad = tw_packed_f32_bad(&f32[0], n)
        else:
            with nogil:
                bad = tw_compact_values_bad(&f32[0], n)
    return bad


def first_not_rising(offsets):
    cdef const int64_t[::1] offs = offsets
    cdef ptrdiff_t bad
    if offs.shape[0] == 0:
        return -1
    with nogil:
        bad = tw_offsets_not_rising(&offs[0], offs.shape[0])
    return bad


def first_bad_support(ids, rows, limit, absent_ok=False):
    cdef ptrdiff_t bad = -1
    cdef int nomem = 0
    cdef size_t count = limit
    cdef int absent = bool(absent_ok)
    cdef const int64_t *sampled
    cdef const int64_t[::1] offs = rows.offsets
    cdef const int32_t[::1] vals = rows.values if len(rows.values) else np.zeros(1, dtype=np.int32)
    if count == 0:
        return -1
    sampled = _i64(ids)
    with nogil:
        bad = tw_support_rows(&vals[0], &offs[0], count, sampled, absent, &nomem, _path)
    if nomem:
        raise MemoryError()
    return bad


def compact_rows(ids, row_ids, row_values, offsets):
    cdef size_t n = len(ids)
    cdef int kind = 0
    cdef ptrdiff_t row = -1
    cdef const uint32_t[::1] rids
    cdef const float[::1] vals
    cdef const int64_t[::1] offs = offsets
    cdef const int64_t *sampled_ids
    cdef float[::1] out
    cdef int simd = _path
    sampled = np.zeros(n, dtype=np.float32)
    if n == 0:
        return sampled, None
    rids = row_ids
    vals = row_values
    out = sampled
    sampled_ids = _i64(ids)
    with nogil:
        row = tw_compact_rows(&rids[0], &vals[0], &offs[0], n, sampled_ids, &out[0], &kind, simd)
    return sampled, _row_failure(row, kind)


cdef object _row_failure(ptrdiff_t row, int kind):
    """compact_rows' verdict on the row tw_compact_rows* reported (-1: none)."""
    if row < 0:
        return None
    if kind == TW_ROW_NOMEM:
        raise MemoryError()
    return (row, "Repeated compact logprobs disagree" if kind == TW_ROW_REPEAT_DISAGREE
            else "Missing compact sampled-token evidence")


cdef tuple _ragged_arrays(size_t n, Py_ssize_t total, dtype):
    """Offsets (zeros) for n rows and room for `total` ids and values (at least one)."""
    total = max(total, 1)
    return np.zeros(n + 1, dtype=np.int64), np.empty(total, dtype=np.int64), np.empty(total, dtype=dtype)


def compact_rows_candidates(ids, row_ids, row_values, offsets, num_top):
    """``compact_rows`` and ``compact_candidates`` in one pass over the rows; the rows from
    the first bad one on have no candidates."""
    cdef size_t n = len(ids)
    cdef int kind = 0
    cdef ptrdiff_t row = -1
    cdef const int64_t[::1] roff = offsets
    cdef const uint32_t[::1] rids = row_ids if len(row_ids) else np.zeros(1, np.uint32)
    cdef const float[::1] rvals = row_values if len(row_values) else np.zeros(1, np.float32)
    cdef int64_t top = min(num_top, 2**62)
    cdef int simd = _path
    cdef const int64_t *sampled_ids
    sampled = np.zeros(n, dtype=np.float32)
    coff, cand_ids, cand_lps = _ragged_arrays(n, int(offsets[n]), np.float64)
    cdef float[::1] out = sampled
    cdef int64_t[::1] coff_view = coff, ids_view = cand_ids
    cdef double[::1] lps_view = cand_lps
    if n:
        sampled_ids = _i64(ids)
        with nogil:
            row = tw_compact_rows_candidates(n, &roff[0], &rids[0], &rvals[0], sampled_ids, top,
                                             &out[0], &kind, &coff_view[0], &ids_view[0],
                                             &lps_view[0], simd)
    bad = _row_failure(row, kind)
    end = int(coff[n])
    return sampled, bad, _kernels.Candidates(coff, cand_ids[:end], cand_lps[:end])


cdef class _KeptSets:
    """A head kernel's kept-set arguments: the rows' pointers (NULL without kept sets), and
    the views that hold their buffers while a kernel runs."""
    cdef const int64_t[::1] offsets
    cdef const int32_t[::1] values
    cdef const int64_t *soff
    cdef const int32_t *sup


cdef _KeptSets _kept_sets(supports):
    cdef _KeptSets kept = _KeptSets()
    if supports is not None:
        kept.offsets = supports.offsets
        kept.values = supports.values if len(supports.values) else np.zeros(1, np.int32)
        kept.soff = &kept.offsets[0]
        kept.sup = &kept.values[0]
    return kept


def compact_heads(ids, row_ids, row_values, offsets, num_top, k, supports):
    """``compact_rows_candidates`` then ``heads`` in one call (kernels/python.py)."""
    cdef size_t n = len(ids)
    cdef int row_kind = 0, head_code = 0
    cdef ptrdiff_t bad = -1
    cdef const int64_t[::1] roff = offsets
    cdef const uint32_t[::1] rids = row_ids if len(row_ids) else np.zeros(1, np.uint32)
    cdef const float[::1] rvals = row_values if len(row_values) else np.zeros(1, np.float32)
    cdef int64_t top = min(num_top, 2**62)
    cdef int64_t kk = min(k, 2**62)
    cdef int simd = _path
    cdef const int64_t *sampled_ids
    cdef _KeptSets kept = _kept_sets(supports)
    sampled = np.zeros(n, dtype=np.float32)
    out_off, out_ids, out_lps = _ragged_arrays(n, int(offsets[n]) - int(offsets[0]), np.float32)
    cdef float[::1] out = sampled, olp_view = out_lps
    cdef int64_t[::1] off_view = out_off, oid_view = out_ids
    if n:
        sampled_ids = _i64(ids)
        with nogil:
            bad = tw_compact_heads(n, &roff[0], &rids[0], &rvals[0], sampled_ids, top, kk, kept.soff, kept.sup,
                                   &out[0], &off_view[0], &oid_view[0], &olp_view[0], &row_kind,
                                   &head_code, simd)
    if bad >= 0:
        if row_kind != TW_ROW_OK:
            return None, None, None, _row_failure(bad, row_kind), None
        if head_code == TW_HEAD_NOMEM:
            raise MemoryError()
        return None, None, None, None, (bad, _HEAD_REASONS[head_code])
    end = int(out_off[n])
    return sampled, Ragged(out_off, out_ids[:end]), Ragged(out_off.copy(), out_lps[:end]), None, None


def compact_candidates(row_ids, row_values, offsets, num_top):
    cdef size_t n = len(offsets) - 1
    cdef const int64_t[::1] roff = offsets
    cdef const uint32_t[::1] rids = row_ids if len(row_ids) else np.zeros(1, np.uint32)
    cdef const float[::1] rvals = row_values if len(row_values) else np.zeros(1, np.float32)
    cdef int64_t top = min(num_top, 2**62)
    cdef int rc
    cdef int simd = _path
    total = max(int(offsets[n]), 1)
    coff = np.zeros(n + 1, dtype=np.int64)
    cand_ids = np.empty(total, dtype=np.int64)
    cand_lps = np.empty(total, dtype=np.float64)
    cdef int64_t[::1] coff_view = coff, ids_view = cand_ids
    cdef double[::1] lps_view = cand_lps
    with nogil:
        rc = tw_compact_candidates(n, &roff[0], &rids[0], &rvals[0], top, &coff_view[0],
                                   &ids_view[0], &lps_view[0], simd)
    if rc == TW_HEAD_NOMEM:
        raise MemoryError()
    end = int(coff[n])
    return _kernels.Candidates(coff, cand_ids[:end], cand_lps[:end])


def heads(ids, candidates, sampled_lps, k, supports, limit):
    cdef size_t n = limit
    cdef const int64_t[::1] coff = candidates.offsets
    cdef const int64_t[::1] cids = candidates.ids if len(candidates.ids) else np.zeros(1, np.int64)
    cdef const double[::1] clps = candidates.logprobs if len(candidates.logprobs) else np.zeros(1)
    cdef const int64_t *sampled_ids = _i64(ids) if len(ids) else NULL
    cdef const double[::1] slps = sampled_lps if len(sampled_lps) else np.zeros(1)
    cdef _KeptSets kept = _kept_sets(supports)
    cdef int code = 0
    cdef int simd = _path
    cdef ptrdiff_t bad
    # A head wider than any row decides exactly as k = 2**62 does (every row has fewer
    # than k + 2 candidates), and a top_k of 2**63 or more must not overflow int64.
    cdef int64_t kk = min(k, 2**62)
    out_off, out_ids, out_lps = _ragged_arrays(n, int(candidates.offsets[n]) - int(candidates.offsets[0]), np.float64)
    cdef int64_t[::1] off_view = out_off, oid_view = out_ids
    cdef double[::1] olp_view = out_lps
    if n:
        with nogil:
            bad = tw_select_heads(n, &coff[0], &cids[0], &clps[0], sampled_ids, &slps[0], kk, kept.soff,
                                  kept.sup, &off_view[0], &oid_view[0], &olp_view[0], &code, simd)
        if bad >= 0:
            if code == TW_HEAD_NOMEM:
                raise MemoryError()
            return None, None, (bad, _HEAD_REASONS[code])
    end = int(out_off[n])
    return Ragged(out_off, out_ids[:end]), Ragged(out_off.copy(), out_lps[:end]), None


# This module as the namespace of the kernels above (what the readers below hand the rules).
_KERNELS = sys.modules[__name__]


# The Python-valued readers behind a path the scan did not record (its value is then intact
# in the parsed document): small values, read as the reference reads them.
def blob(value):
    """The bytes of a canonical base64 string (or bytes-like value) as a new uint8 array,
    or None (the reference's ``blob``, decoded by tw_base64)."""
    if value is None:
        return None
    try:
        return b64decode(value)
    except (MalformedResponseError, TypeError):
        return None


nested_ints = _kernels.nested_ints
native_entries = _kernels.native_entries

cdef uint64_t _MAX_TOKEN_ID = 4294967295
cdef uint64_t _MAX_OFFSET = 9223372036854775807
# --- extraction: a choice's evidence, a loop over the wire table ---------------------------------

# The formats an extractor reads a choice as, and their names in the table.
cdef enum:
    _GENERATE, _OPENAI, _SGLANG

_FORMAT_NAMES = (_table.GENERATE, _table.OPENAI, _table.SGLANG)

# What a row's kind reads (tokenwire._table).
cdef enum:
    _K_IDS, _K_BLOB, _K_MASK, _K_RECORDS, _K_NUMBERS, _K_TOKENS, _K_ROWS, _K_VALUE

_KIND_CODES = {_table.IDS: _K_IDS, _table.BLOB: _K_BLOB, _table.MASK: _K_MASK,
               _table.RECORDS: _K_RECORDS, _table.NUMBERS: _K_NUMBERS, _table.TOKENS: _K_TOKENS,
               _table.ROWS: _K_ROWS, _table.VALUE: _K_VALUE}
_HIGHS = {None: 0, _table.TOKEN_ID: _MAX_TOKEN_ID, _table.OFFSET: _MAX_OFFSET}


def _table_rows(fmt, top):
    """(TW_F_* id, kind code, evidence attribute, limit) of each row an extractor fills for
    a format, in table order (a choice's id fields come before the records read with them)."""
    ids = {f.name: i for f, i in zip(_table.CHOICE_FIELDS, _FIELD_IDS)}
    return tuple((ids.get(f.name, -1), _KIND_CODES[f.kind], f.attr, _HIGHS[f.high])
                 for f in _extract.rows_of(fmt, top))


_ROWS = tuple(_table_rows(name, False) for name in _FORMAT_NAMES)
_TOP_ROWS = tuple(_table_rows(name, True) for name in _FORMAT_NAMES)


cdef object _records_read(_Scan scan, const tw_value *v, object c, object choice, object k, int fmt):
    """A RECORDS row's reading of the array ``v`` (see ``tokenwire.extract.python.read_field``)."""
    if fmt == _SGLANG:
        return _extract.Read(v.count, records=scan.triples(v))
    if fmt == _OPENAI:
        # The candidates do not depend on the ids (only the sampled pass reads them).
        top = scan.native(v, np.zeros(v.count, dtype=np.int64), True) if k is not None else None
        return _extract.Read(v.count, records=scan.records(v), top=top, span=(v.start, v.end))
    ids = c.token_ids
    entries = None
    if ids is not None and ids[2] is None and v.count == <size_t>len(ids[0]):
        entries = scan.native(v, ids[0], k is not None and choice.get("compact_logprobs") is None)
    return _extract.Read(v.count, entries=entries)


cdef object _rows_read(_Scan scan, const tw_value *v, object k, int fmt):
    """A ROWS row's reading of the array ``v``: its length, and with a head its candidates."""
    rows = None
    if k is not None and fmt == _SGLANG:
        rows = scan.head_rows(v, False)[:2]
    elif k is not None:
        rows = scan.head_rows(v, True)
        if rows[2] is True:  # a key with an escape: the rows as the reference reads them
            rows = _extract.keyed_rows(_extract.load_keeping_repeats(scan.text(v)))
    return _extract.Read(v.count, rows=rows)


cdef object _field_read(_Scan scan, const tw_value *v, int kind, object high, object c, object choice,
                        object k, int fmt):
    """What a table row of kind ``kind`` reads in the span ``v`` the scan recorded."""
    if not v.present:
        return None
    if kind == _K_IDS:
        return scan.ints(v, high)
    if kind == _K_BLOB:
        return scan.blob(v) if v.type == TW_T_STRING else None
    if kind == _K_VALUE:
        return (v.start, v.end) if v.type == TW_T_OBJECT else None
    if v.type != TW_T_ARRAY:
        return None
    if kind == _K_MASK:
        return scan.nested(v)
    if kind == _K_TOKENS:
        return scan.token_strings(v)
    if kind == _K_NUMBERS:
        read, at = scan.numbers(v)
        return _extract.Read(v.count, numbers=_extract.Numbers(read, at, None if at is None else scan.element(v, at)))
    if kind == _K_ROWS:
        return _rows_read(scan, v, k, fmt)
    return _records_read(scan, v, c, choice, k, fmt)


cdef object _choice_evidence(_Scan scan, size_t index, object choice, object k, int fmt):
    """The compiled extractor for one choice (an SGLang item): every table row of the format,
    read from the spans the scan recorded (what the reference's ``extract_fields`` reads from
    the parsed document)."""
    cdef const tw_value *f = scan.doc.choice[index].f
    cdef const tw_value *v
    c = _extract.Evidence(index, _KERNELS, source=scan.source)
    for field, kind, attr, high in _ROWS[fmt]:
        setattr(c, attr, _field_read(scan, &f[<int>field], kind, high, c, choice, k, fmt))
    if fmt == _GENERATE:
        _blanked_as_sent(scan, f, c, choice, k)
    return c


cdef void _blanked_as_sent(_Scan scan, const tw_value *f, object c, object choice, object k):
    """The records beside compact (or packed, without a head) logprobs, and packed logprobs
    beside compact ones, stay in GenerateChoice.raw as sent: the scan blanked them in the
    parsed copy (an array's elements, a string's characters)."""
    cdef const tw_value *v = &f[TW_F_LOGPROBS_CONTENT]
    compact = choice.get("compact_logprobs") is not None
    packed_value = choice.get("completion_logprobs")
    logprobs = choice.get("logprobs")
    if (v.present and (v.type == TW_T_ARRAY or v.type == TW_T_STRING) and isinstance(logprobs, dict)
            and (compact or (packed_value is not None and k is None))):
        c.sent["logprobs"] = {**logprobs, "content": scan.parsed(v)}
    v = &f[TW_F_CL_DATA]
    if compact and v.present and v.type == TW_T_STRING and isinstance(packed_value, dict):
        c.sent["completion_logprobs"] = {**packed_value, "data": scan.parsed(v)}


cdef object _top_evidence(_Scan scan, int fmt):
    """The evidence of the top level: the root rows of the format (the prompt's ids)."""
    top = _extract.Evidence(None, _KERNELS, source=scan.source)
    for field, kind, attr, high in _TOP_ROWS[fmt]:
        value = None
        if kind == _K_IDS and scan.doc.prompt_token_ids.present:  # the one root id list
            value = scan.ints(&scan.doc.prompt_token_ids, high)
        setattr(top, attr, value)
    return top


cdef object _choices_of(object document):
    """The choices list of a generate or OpenAI-compatible document, or None."""
    return document.get("choices") if isinstance(document, dict) else None


cdef object _evidence_records(_Scan scan, object choices, object k, int fmt):
    """The evidence of the top level and of each recorded choice of a scanned response, read
    now in one pass over the spans (a choice that is not an object: read from its value)."""
    cdef size_t i
    top = _top_evidence(scan, fmt)
    read = []
    if isinstance(choices, list):
        for i in range(min(scan.doc.nchoices, len(choices))):
            if isinstance(choices[i], dict):
                read.append(_choice_evidence(scan, i, choices[i], k, fmt))
            else:
                read.append(_extract.LazyEvidence(i, choices[i], _FORMAT_NAMES[fmt], k, _KERNELS))
    return top, read


def _lookup(top, read, fmt, k):
    """``evidence(index, value)`` for the rules: the records read; past them, evidence read
    from the choice's value when a rule asks (records end at the first choice that must
    fail, whose values are intact)."""

    def evidence(index, value):
        if index is None:
            return top
        return read[index] if index < len(read) else _extract.LazyEvidence(index, value, fmt, k, _KERNELS)

    return evidence


def extract_generate(raw, top_k=None):
    """The compiled extractor of a generate response: ``(document, top, choices)``, the parsed
    document with its big values blanked, the :class:`~tokenwire.extract.python.Evidence` of its
    top level and of each choice the scan recorded (the reference's ``extract_generate``
    reads the same from the parsed document)."""
    k = check_top_k(top_k)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        scan = _Scan()
        document = scan.document(raw)
        return (document, *_evidence_records(scan, _choices_of(document), k, _GENERATE))
    finally:
        PyDataMem_SetHandler(previous)


# --- the plain path: responses without a head, without the rules' Python -------------------------
#
# A choice whose only evidence is its token ids and either packed logprobs or compact rows
# (no head asked for, no mask), each of them valid, is built here straight from the scan.
# This path decides nothing: it takes a choice only when every rule of rules/generate.py
# that could apply passes, and hands anything else, valid or not, to the rules, which then
# give the same result or say what is wrong (tests/test_plain_path.py holds the two to the
# same results).

# The allow-list: the wire-table fields of a generate choice this path reads. A choice that
# holds any other table field (not null) goes to the rules, each such field bringing rules
# this path lacks: _PLAIN_ABSENT is the rest of the table, so a field added to the table is
# sent to the rules until this path learns it. (For compact rows, the packed logprobs go to
# the rules too: they keep them in GenerateChoice.raw.) Keys outside the table are the
# choice's raw fields, under either path.
_PLAIN_TAKES = ("token_ids", "completion_logprobs", "compact_logprobs")
_PLAIN_ABSENT = tuple(sorted(_table.top_keys(_table.CHOICE, _table.GENERATE) - set(_PLAIN_TAKES)))
# GenerateChoice.raw: the choice without these (rules/generate.py's consumed fields).
_PLAIN_CONSUMED = _generate._CONSUMED + ("completion_logprobs",)
_PLAIN_COMPACT_CONSUMED = _generate._CONSUMED + ("compact_logprobs",)
# _plain_form's answer for compact rows (packed logprobs: their item size, 4 or 8).
DEF _PLAIN_COMPACT = 1
_GenerateChoice = _generate.GenerateChoice
_GenerateResponse = _generate.GenerateResponse
_MISSING = object()
# The packed values are read as the host's floats, which are the wire's little-endian ones.
cdef bint _PLAIN_HOST = sys.byteorder == "little"


cdef object _plain_ints(_Scan scan, const tw_value *v):
    """The ids recorded at ``v`` as an int64 array, or None unless every one is a token id."""
    if not v.present or v.type != TW_T_ARRAY:
        return None
    got = scan.ints(v, _MAX_TOKEN_ID)
    return got[0] if got[2] is None else None


cdef uint8_t *_plain_blob(_Scan scan, const tw_value *v, size_t *size) except? NULL:
    """The bytes of the base64 string ``v`` (decoded by the scan, or now) in memory from
    tw_mem that the caller owns, or NULL when they are not canonical base64."""
    cdef uint8_t *data = tw_take_blob(&scan.doc, v, size)
    return data if data != NULL else _decoded(scan.buf, v, scan.path, size)


cdef inline ptrdiff_t _packed_bad(const uint8_t *data, size_t n, size_t itemsize) noexcept nogil:
    if itemsize == 4:
        return tw_packed_f32_bad(<const float *>data, n)
    return tw_packed_f64_bad(<const double *>data, n)


cdef int _plain_form(_Scan scan, size_t index, dict choice) except -2:
    """What choice ``index`` holds when it has a plain form, recorded by the scan: the item
    size of its packed logprobs (of a known dtype), _PLAIN_COMPACT for compact rows of the
    known format; else 0. What is checked before anything is decoded."""
    cdef const tw_value *f = scan.doc.choice[index].f
    for key in _PLAIN_ABSENT:
        if choice.get(key) is not None:
            return 0
    if not f[TW_F_TOKEN_IDS].present or f[TW_F_TOKEN_IDS].type != TW_T_ARRAY:
        return 0
    compact = choice.get("compact_logprobs")
    if compact is not None:
        if (type(compact) is not dict or choice.get("completion_logprobs") is not None
                or not f[TW_F_CP_DATA].present or f[TW_F_CP_DATA].type != TW_T_STRING
                or not f[TW_F_CP_OFFSETS].present or f[TW_F_CP_OFFSETS].type != TW_T_ARRAY):
            return 0
        name = (<dict>compact).get("format")
        num_top = (<dict>compact).get("num_top_logprobs")
        if (type(name) is not str or name != COMPACT_FORMAT or type(num_top) is not int
                or num_top < -1):
            return 0
        return _PLAIN_COMPACT
    packed = choice.get("completion_logprobs")
    if type(packed) is not dict or not f[TW_F_CL_DATA].present or f[TW_F_CL_DATA].type != TW_T_STRING:
        return 0
    name = (<dict>packed).get("dtype")
    if type(name) is not str:
        return 0
    return 4 if name == "float32" else 8 if name == "float64" else 0


cdef object _plain_choice(_Scan scan, size_t index, dict choice, int form):
    """The GenerateChoice of choice ``index`` (of the plain ``form``, _plain_form's answer)
    when it is valid, else None."""
    cdef const tw_value *f = scan.doc.choice[index].f
    ids = _plain_ints(scan, &f[TW_F_TOKEN_IDS])
    if ids is None:
        return None
    if form == _PLAIN_COMPACT:
        logprobs, consumed = _plain_compact(scan, f, ids, len(ids)), _PLAIN_COMPACT_CONSUMED
    else:
        packed = <dict>choice["completion_logprobs"]
        logprobs, consumed = _plain_packed(scan, f, packed, ids, <size_t>form), _PLAIN_CONSUMED
    if logprobs is None:
        return None
    raw = choice.copy()
    for key in consumed:
        raw.pop(key, None)
    return _GenerateChoice(index=index, completion_ids=ids, completion_logprobs=logprobs,
                           finish_reason=choice.get("finish_reason"), raw=raw)


cdef object _plain_packed(_Scan scan, const tw_value *f, dict packed, object ids, size_t itemsize):
    """The packed logprobs (``itemsize`` bytes each) of a choice with token ids ``ids`` when
    every rule of rules/generate.py's parse_packed_logprobs passes, else None."""
    cdef size_t size = 0, n = len(ids)
    cdef uint8_t *data
    cdef ptrdiff_t bad = -1
    shape = packed.get("shape", _MISSING)
    if shape is not _MISSING and not (type(shape) is list and len(<list>shape) == 1
                                      and type((<list>shape)[0]) is int and (<list>shape)[0] == n):
        return None
    data = _plain_blob(scan, &f[TW_F_CL_DATA], &size)
    if data == NULL:
        return None
    logprobs = _adopt_typed(data, size // itemsize, cnp.NPY_FLOAT32 if itemsize == 4 else cnp.NPY_FLOAT64)
    if size != n * itemsize:
        return None
    if n and size < _NOGIL_MIN:
        bad = _packed_bad(data, n, itemsize)
    elif n:
        with nogil:
            bad = _packed_bad(data, n, itemsize)
    return None if bad >= 0 else logprobs


cdef inline ptrdiff_t _plain_rows(const uint8_t *data, const int64_t *offs, size_t n, size_t count,
                                  const int64_t *sampled, float *out) noexcept nogil:
    """The first bad row of compact rows whose ids and values are ``data`` (-1: none)."""
    cdef int kind = 0
    cdef const float *vals = <const float *>(data + count * 4)
    if tw_compact_values_bad(vals, count) >= 0:
        return 0
    return tw_compact_rows(<const uint32_t *>data, vals, offs, n, sampled, out, &kind, _path)


cdef object _plain_compact(_Scan scan, const tw_value *f, object ids, size_t n):
    """The sampled logprobs of the compact rows of a choice with ``n`` token ids when every
    rule of rules/generate.py's parse_compact_logprobs without a head passes, else None."""
    cdef size_t size = 0, count
    cdef uint8_t *data
    cdef const int64_t *offs
    cdef const int64_t *sampled_ids
    cdef float *out
    cdef ptrdiff_t bad = -1
    got = scan.ints(&f[TW_F_CP_OFFSETS], _MAX_OFFSET)
    if got is None or got[2] is not None or <size_t>got[1] != n + 1:
        return None
    offs = <const int64_t *>cnp.PyArray_DATA(got[0])
    if tw_offsets_not_rising(offs, n + 1) >= 0:
        return None
    count = <size_t>offs[n]
    data = _plain_blob(scan, &f[TW_F_CP_DATA], &size)
    if data == NULL:
        return None
    blob = _adopt(data, size)  # freed with it
    if size % 8 or size // 8 != count:
        return None
    sampled = np.empty(n, dtype=np.float32)
    out = <float *>cnp.PyArray_DATA(sampled)
    sampled_ids = _i64(ids)
    if n == 0:  # no rows (the offsets are [0])
        pass
    elif count * 8 < _NOGIL_MIN:
        bad = _plain_rows(data, offs, n, count, sampled_ids, out)
    else:
        with nogil:
            bad = _plain_rows(data, offs, n, count, sampled_ids, out)
    return None if bad >= 0 else sampled


cdef object _plain_generate(_Scan scan, object document):
    """The GenerateResponse of a document whose choices all have the plain form and are
    valid, and whose prompt ids (if any) are valid; else None."""
    cdef size_t i, count
    cdef int form
    if not _PLAIN_HOST or type(document) is not dict:
        return None
    choices = (<dict>document).get("choices")
    if type(choices) is not list or not choices or <size_t>len(<list>choices) > scan.doc.nchoices:
        return None
    count = len(<list>choices)
    forms = []
    for i in range(count):  # every choice's form first: nothing is decoded for a hand-over
        choice = (<list>choices)[i]
        form = _plain_form(scan, i, <dict>choice) if type(choice) is dict else 0
        if form == 0:
            return None
        forms.append(form)
    prompt = (<dict>document).get("prompt_token_ids")
    if prompt is not None:
        prompt = _plain_ints(scan, &scan.doc.prompt_token_ids)
        if prompt is None:
            return None
    parsed = []
    for i in range(count):
        got = _plain_choice(scan, i, <dict>(<list>choices)[i], forms[i])
        if got is None:
            return None
        parsed.append(got)
    payload = (<dict>document).copy()
    payload.pop("choices", None)
    payload.pop("prompt_token_ids", None)
    return _GenerateResponse(choices=parsed, request_id=(<dict>document).get("request_id"),
                             usage=(<dict>document).get("usage"), prompt_token_ids=prompt, payload=payload)


def _plain_generate_response(raw):
    """What the plain path alone makes of ``raw``: its GenerateResponse, or None when it hands
    the response to the rules (for tests)."""
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        scan = _Scan()
        return _plain_generate(scan, scan.document(raw))
    finally:
        PyDataMem_SetHandler(previous)


def parse_generate_response(raw, *, top_k=None, require_logprobs=True, require_sampling_mask=False):
    """Parse and validate a ``/inference/v1/generate`` response (see the package docs)."""
    k = check_top_k(top_k)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        scan = _Scan()
        document = scan.document(raw)
        if k is None and not require_sampling_mask:  # the plain path takes no mask
            plain = _plain_generate(scan, document)
            if plain is not None:
                return plain
        top, read = _evidence_records(scan, _choices_of(document), k, _GENERATE)
        return _generate.parse_document(document, k, require_logprobs, _lookup(top, read, _table.GENERATE, k),
                                        require_sampling_mask)
    finally:
        PyDataMem_SetHandler(previous)


def _record_values(values, kinds):
    """The Numbers of record values of the given TW_REC_V_* classes."""
    not_number = np.flatnonzero(kinds != TW_REC_V_NUMBER)
    if not len(not_number):
        return _extract.Numbers(values, None, None)
    first = int(not_number[0])
    return _extract.Numbers(values[:first], first, _KIND_EXAMPLES[kinds[first]])


cdef object _scan_openai(_Scan scan, object raw, object k, bint sglang):
    """Scan an OpenAI-compatible (or SGLang) response: its document and its evidence."""
    if sglang:
        document = scan.document(raw, _SGLANG_BLANK, False, True)
        choices = document if isinstance(document, list) else [document]
    else:
        document = scan.document(raw, _OPENAI_BLANK, True)
        choices = _choices_of(document)
    return (document, *_evidence_records(scan, choices, k, _SGLANG if sglang else _OPENAI))


def extract_openai(raw, top_k=None, sglang=False):
    """The compiled extractor of an OpenAI-compatible (or SGLang) response: ``(document, top,
    choices)`` as :func:`extract_generate` (the reference's ``extract_openai`` reads
    the same from the parsed document)."""
    k = check_top_k(top_k)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        return _scan_openai(_Scan(), raw, k, sglang)
    finally:
        PyDataMem_SetHandler(previous)


def parse_sglang_generate_response(raw, *, top_k=None, require_logprobs=True, check_usage=True):
    """Parse and validate an SGLang ``/generate`` response (see the package docs)."""
    k = check_top_k(top_k)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        document, top, read = _scan_openai(_Scan(), raw, k, True)
        return _openai_rules.parse_sglang_generate_document(document, k, require_logprobs, check_usage,
                                                      _lookup(top, read, _table.SGLANG, k))
    finally:
        PyDataMem_SetHandler(previous)


cdef object _parse_openai(object raw, object top_k, bint require_logprobs, bint check_usage,
                          object parse_document):
    k = check_top_k(top_k)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        document, top, read = _scan_openai(_Scan(), raw, k, False)
        return parse_document(document, k, require_logprobs, check_usage, _lookup(top, read, _table.OPENAI, k))
    finally:
        PyDataMem_SetHandler(previous)


def parse_completions_response(raw, *, top_k=None, require_logprobs=True, check_usage=True):
    """Parse and validate an OpenAI-compatible ``/v1/completions`` response (see the
    package docs)."""
    return _parse_openai(raw, top_k, require_logprobs, check_usage,
                         _openai_rules.parse_completions_document)


def parse_chat_completions_response(raw, *, top_k=None, require_logprobs=True, check_usage=True):
    """Parse and validate an OpenAI-compatible ``/v1/chat/completions`` response (see the
    package docs)."""
    return _parse_openai(raw, top_k, require_logprobs, check_usage,
                         _openai_rules.parse_chat_completions_document)
