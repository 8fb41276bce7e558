# cython: language_level=3, freethreading_compatible=True
"""The compiled core: C kernels over raw buffers, the GIL released around every hot loop."""

import os
import warnings

import numpy as np

cimport numpy as cnp
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc

import orjson

from ._errors import MalformedResponseError
from . import _reference

cnp.import_array()


cdef extern from "tw_base64.h" nogil:
    enum:
        TW_PATH_AUTO
        TW_PATH_SCALAR
        TW_PATH_AVX2
        TW_PATH_AVX512
    int tw_path_available(int path)
    int tw_path_best()
    const char *tw_path_name(int path)
    ptrdiff_t tw_b64_decoded_size(const char *src, size_t len)
    ptrdiff_t tw_b64_decode(const char *src, size_t len, uint8_t *dst, int path, size_t *err_pos)


_PATHS = {"scalar": TW_PATH_SCALAR, "avx2": TW_PATH_AVX2, "avx512": TW_PATH_AVX512}

# The one process-wide setting: which base64 path runs. Read from TOKENWIRE_SIMD at import,
# changed only by set_simd_path() (tests use it to cover every path).
cdef int _path = tw_path_best()


def simd_paths():
    """Names of the base64 paths this CPU can run, best last."""
    return [name for name, p in _PATHS.items() if tw_path_available(p)]


def simd_path():
    return tw_path_name(_path).decode()


def set_simd_path(name):
    """Force a base64 path (``None`` or ``"auto"``: the best one). Returns the previous name."""
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


_forced = os.environ.get("TOKENWIRE_SIMD", "").strip().lower()
if _forced:
    try:
        set_simd_path(_forced)
    except ValueError as exc:
        warnings.warn(f"TOKENWIRE_SIMD ignored: {exc}", RuntimeWarning, stacklevel=2)


cdef object _bytes_view(object data):
    """A flat byte view of str (as UTF-8) or any contiguous buffer; no copy for buffers."""
    if isinstance(data, str):
        data = (<str>data).encode("utf-8")
    try:
        return memoryview(data).cast("B")
    except TypeError:
        raise TypeError(
            f"expected str or a bytes-like object, not {type(data).__name__}"
        ) from None


cdef const char *_EMPTY = ""


cdef inline const char *_start(const unsigned char[::1] view) noexcept:
    return <const char *>&view[0] if view.shape[0] else _EMPTY


def b64decode(data, out=None):
    """Strictly decode base64 ``data`` (str or bytes-like) to a uint8 array, into ``out`` when given."""
    cdef const unsigned char[::1] view = _bytes_view(data)
    cdef const char *src = _start(view)
    cdef Py_ssize_t size = view.shape[0]
    cdef ptrdiff_t need = tw_b64_decoded_size(src, <size_t>size)
    cdef ptrdiff_t got
    cdef size_t err = 0
    cdef uint8_t[::1] target
    cdef int path = _path
    if need < 0:
        raise MalformedResponseError("invalid base64")
    if out is None:
        result = np.empty(need, dtype=np.uint8)
    else:
        result = np.frombuffer(memoryview(out).cast("B"), dtype=np.uint8)
        if result.shape[0] < need:
            raise ValueError(f"output buffer holds {result.shape[0]} bytes, {need} needed")
        result = result[:need]
    if need == 0:
        return result
    target = result
    with nogil:
        got = tw_b64_decode(src, <size_t>size, &target[0], path, &err)
    if got < 0:
        raise MalformedResponseError("invalid base64")
    return result


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
    enum:
        TW_F_TOKEN_IDS
        TW_F_LOGPROBS
        TW_F_LOGPROBS_CONTENT
        TW_F_CL_DATA
        TW_F_CP_DATA
        TW_F_CP_OFFSETS
        TW_F_SAMPLING_MASK
        TW_F_SM_IDS_DATA
        TW_F_SM_COUNTS_DATA
        TW_F_KT_IDS
        TW_F_KT_COUNTS
        TW_F_ROUTED
        TW_F_RE_DATA
    ctypedef struct tw_value:
        uint8_t present, type, has_escape, ascii, all_int
        size_t start, end, count
    ctypedef struct tw_choice:
        uint8_t is_object
        tw_value f[13]
    ctypedef struct tw_doc:
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
    int tw_parse_uint_array(const char *buf, const tw_value *v, uint64_t max, int64_t *out, size_t *err_index)
    int tw_count_nested(const char *buf, const tw_value *v, size_t *total)
    int tw_parse_nested_uint(const char *buf, const tw_value *v, uint64_t max, int64_t *offsets, int32_t *values, size_t *err_row)
    size_t tw_unescape(const char *buf, const tw_value *v, char *dst)


cdef extern from "tw_validate.h" nogil:
    enum:
        TW_ROW_OK
        TW_ROW_REPEAT_DISAGREE
        TW_ROW_MISSING_SAMPLED
        TW_ROW_NOMEM
    ptrdiff_t tw_packed_f32_bad(const float *v, size_t n)
    ptrdiff_t tw_packed_f64_bad(const double *v, size_t n)
    ptrdiff_t tw_compact_values_bad(const float *v, size_t n)
    ptrdiff_t tw_offsets_bad(const int64_t *offsets, size_t count)
    ptrdiff_t tw_compact_rows(const uint32_t *ids, const float *vals, const int64_t *offsets, size_t n, const int64_t *sampled, float *out, int *kind)
    ptrdiff_t tw_support_rows(const int32_t *values, const int64_t *offsets, size_t n, const int64_t *sampled, int *nomem)
    ptrdiff_t tw_i32_negative(const int32_t *v, size_t n)


from ._types import GenerateChoice, GenerateResponse, Ragged, RoutedExperts

_Choice = _reference._Choice
_shape_is = _reference._shape_is
_int_array = _reference._int_array
_FORMAT = _reference.COMPACT_FORMAT
_PACKED_DTYPES = _reference.PACKED_DTYPES
_ROUTED_DTYPES = _reference.ROUTED_DTYPES
_CONSUMED = _reference._CONSUMED
cdef uint64_t _MAX_TOKEN_ID = 4294967295
cdef uint64_t _MAX_MASK_ID = 2147483647
cdef uint64_t _MAX_OFFSET = 9223372036854775807
_IDS_REASON = "token_ids must hold token ids in [0, 2**32)"
_PROMPT_REASON = "prompt_token_ids must hold token ids in [0, 2**32)"
_EMPTY_I64 = np.empty(0, dtype=np.int64)


cdef object _decode(const char *buf, const tw_value *v, int path):
    """Strictly decode a recorded JSON string holding base64 into a new uint8 array,
    or None when the value is not a string of canonical base64."""
    cdef const char *src
    cdef char *tmp = NULL
    cdef size_t length
    cdef ptrdiff_t need, got = -1
    cdef size_t err = 0
    cdef uint8_t[::1] target
    if v.type != TW_T_STRING or not v.ascii:
        return None
    src = buf + v.start
    length = v.end - v.start
    if v.has_escape:  # "\/" and friends: unescape first, then decode
        tmp = <char *>malloc(length + 1)
        if tmp == NULL:
            raise MemoryError()
        length = tw_unescape(buf, v, tmp)
        src = tmp
    try:
        need = tw_b64_decoded_size(src, length)
        if need < 0:
            return None
        out = np.empty(need, dtype=np.uint8)
        if need == 0:
            return out
        target = out
        with nogil:
            got = tw_b64_decode(src, length, &target[0], path, &err)
        return out if got >= 0 else None
    finally:
        free(tmp)


cdef object _uint_array(const char *buf, const tw_value *v, uint64_t high, object value, object fail, str field, str reason):
    cdef size_t err = 0
    cdef int rc
    cdef int64_t[::1] view
    if v.type != TW_T_ARRAY:
        return _int_array(value, <object>high, fail, field, reason)  # not a list: raises
    out = np.empty(v.count, dtype=np.int64)
    if v.count:
        view = out
        with nogil:
            rc = tw_parse_uint_array(buf, v, high, &view[0], &err)
        if rc < 0:
            fail(reason, field, err)
    return out


cdef inline const int64_t *_i64(object a):
    cdef int64_t[::1] v = a
    return &v[0] if v.shape[0] else NULL


cdef class _Parse:
    """One call's state: the raw bytes, the scan records and the base64 path."""
    cdef const char *buf
    cdef tw_doc doc
    cdef int path
    cdef object keep

    def __cinit__(self):
        tw_doc_init(&self.doc)

    def __dealloc__(self):
        tw_doc_free(&self.doc)

    cdef object run(self, object raw, object k, bint require_logprobs):
        cdef const unsigned char[::1] view = _bytes_view(raw)
        cdef size_t n = view.shape[0]
        cdef int rc
        cdef size_t stripped_size
        cdef char *dst
        self.keep = view
        self.buf = _start(view)
        self.path = _path
        with nogil:
            rc = tw_scan(self.buf, n, &self.doc)
        if rc == TW_ERR_NOMEM:
            raise MemoryError("tokenwire: out of memory while scanning the response")
        if rc != TW_OK:
            raise MalformedResponseError(
                f"invalid JSON: {self.doc.err_msg.decode()} at byte {self.doc.err_pos}"
            )
        stripped_size = tw_stripped_size(&self.doc, n)
        stripped = PyBytes_FromStringAndSize(NULL, stripped_size)
        dst = PyBytes_AS_STRING(stripped)
        with nogil:
            tw_strip(self.buf, n, &self.doc, dst)
        try:
            document = orjson.loads(stripped)
        except orjson.JSONDecodeError as exc:
            raise MalformedResponseError(f"invalid JSON: {exc}") from None
        if not isinstance(document, dict):
            raise MalformedResponseError("response must be a JSON object")
        prompt = document.get("prompt_token_ids")
        if prompt is not None:
            prompt = _uint_array(self.buf, &self.doc.prompt_token_ids, _MAX_TOKEN_ID, prompt,
                                 _reference._top_level_fail, "prompt_token_ids", _PROMPT_REASON)
        choices = document.get("choices")
        if not isinstance(choices, list) or not choices:
            raise MalformedResponseError("choices must be a non-empty list", field="choices")
        parsed = [self.choice(choice, i, k, require_logprobs) for i, choice in enumerate(choices)]
        return GenerateResponse(
            choices=parsed,
            request_id=document.get("request_id"),
            usage=document.get("usage"),
            prompt_token_ids=prompt,
            payload={key: v for key, v in document.items() if key not in ("choices", "prompt_token_ids")},
        )

    cdef object choice(self, object choice, Py_ssize_t index, object k, bint require_logprobs):
        cdef tw_choice *rec
        c = _Choice(index)
        if not isinstance(choice, dict):
            c.fail("choice must be an object")
        if <size_t>index >= self.doc.nchoices:  # the scanner keeps records up to the first failing choice
            raise AssertionError("tokenwire: no scan record for a valid choice")
        rec = &self.doc.choice[index]
        ids = _uint_array(self.buf, &rec.f[TW_F_TOKEN_IDS], _MAX_TOKEN_ID, choice.get("token_ids"),
                          c.fail, "token_ids", _IDS_REASON)
        top_ids = top_logprobs = None
        consumed = list(_CONSUMED)
        if choice.get("compact_logprobs") is not None:
            logprobs, top_ids, top_logprobs, mask = self.compact(choice, ids, k, c, rec)
            consumed.append("compact_logprobs")
        else:
            if choice.get("completion_logprobs") is not None:
                logprobs = self.packed(choice["completion_logprobs"], len(ids), c, rec)
                consumed.append("completion_logprobs")
            elif choice.get("logprobs") is not None or require_logprobs or k is not None:
                logprobs = _reference._parse_native_logprobs(choice, ids.tolist(), c)
            else:
                logprobs = None
            if k is not None:
                top_ids, top_logprobs, mask = _reference._parse_native_heads(
                    choice, ids.tolist(), k, c, lambda ch, _ids, cc: self.mask(ch, ids, cc, rec)
                )
                consumed.append("logprobs")
            else:
                mask = self.mask(choice, ids, c, rec)
            if logprobs is not None and "completion_logprobs" not in consumed:
                consumed.append("logprobs")
        routed = choice.get("routed_experts")
        return GenerateChoice(
            index=index,
            completion_ids=ids,
            completion_logprobs=logprobs,
            completion_top_ids=top_ids,
            completion_top_logprobs=top_logprobs,
            sampling_mask=mask,
            routed_experts=self.routed(routed, c, rec) if routed is not None else None,
            finish_reason=choice.get("finish_reason"),
            raw={key: value for key, value in choice.items() if key not in consumed},
        )

    cdef object packed(self, object packed, Py_ssize_t n, object c, tw_choice *rec):
        cdef ptrdiff_t bad
        cdef const float[::1] f32
        cdef const double[::1] f64
        field = "completion_logprobs"
        if not isinstance(packed, dict):
            c.fail("Engine response choice.completion_logprobs must be an object.", field)
        dtype = _PACKED_DTYPES.get(packed.get("dtype"))
        if dtype is None:
            c.fail("Unsupported packed logprob dtype (float32 or float64)", field + ".dtype")
        raw = _decode(self.buf, &rec.f[TW_F_CL_DATA], self.path)
        if raw is None:
            c.fail("Invalid packed logprob base64", field + ".data")
        if len(raw) % dtype.itemsize:
            c.fail("Invalid packed logprob buffer length", field + ".data")
        values = raw.view(dtype)
        if "shape" in packed and not _shape_is(packed["shape"], len(values)):
            c.fail(f"Packed logprob shape does not match its {len(values)} values", field + ".shape")
        problem = (
            f"Engine response choice.completion_logprobs: {len(values)} values for "
            f"{n} completion tokens, or a non-finite or missing (-9999) logprob."
        )
        if len(values) != n:
            c.fail(problem, field)
        bad = -1
        if n and dtype.itemsize == 4:
            f32 = values
            with nogil:
                bad = tw_packed_f32_bad(&f32[0], <size_t>n)
        elif n:
            f64 = values
            with nogil:
                bad = tw_packed_f64_bad(&f64[0], <size_t>n)
        if bad >= 0:
            c.fail(problem, field, bad)
        return values

    cdef object compact(self, object choice, object ids, object k, object c, tw_choice *rec):
        cdef Py_ssize_t n = len(ids)
        cdef const tw_value *voff = &rec.f[TW_F_CP_OFFSETS]
        cdef size_t err = 0
        cdef int rc = 0, kind = 0
        cdef ptrdiff_t bad = -1, row = -1
        cdef const float[::1] vals
        cdef const uint32_t[::1] rids
        cdef float[::1] out
        cdef int64_t[::1] offs
        cdef const int64_t *sampled_ids
        cdef size_t ncount
        field = "compact_logprobs"
        packed = choice[field]
        if not isinstance(packed, dict) or packed.get("format") != _FORMAT:
            c.fail("Unsupported compact logprob format", field + ".format")
        if voff.type != TW_T_ARRAY or voff.count != <size_t>(n + 1):
            c.fail("Invalid compact logprob offsets", field + ".offsets")
        offsets = np.empty(n + 1, dtype=np.int64)
        offs = offsets
        with nogil:
            rc = tw_parse_uint_array(self.buf, voff, _MAX_OFFSET, &offs[0], &err)
            bad = tw_offsets_bad(&offs[0], err if rc < 0 else <size_t>(n + 1))
        if bad >= 0:
            c.fail("Invalid compact logprob offsets", field + ".offsets", bad)
        if rc < 0:
            c.fail("Invalid compact logprob offsets", field + ".offsets", err)
        num_top = packed.get("num_top_logprobs")
        if type(num_top) is not int or num_top < -1:
            c.fail("Invalid compact logprob candidate count", field + ".num_top_logprobs")
        raw = _decode(self.buf, &rec.f[TW_F_CP_DATA], self.path)
        if raw is None:
            c.fail("Invalid compact logprob base64", field + ".data")
        count = int(offsets[n])
        if len(raw) != count * 8:
            c.fail("Invalid compact logprob buffer length", field + ".data")
        row_ids = raw[: count * 4].view("<u4")
        row_values = raw[count * 4 :].view("<f4")
        ncount = count
        if ncount:
            vals = row_values
            with nogil:
                bad = tw_compact_values_bad(&vals[0], ncount)
            if bad >= 0:
                c.fail("Invalid compact logprob values", field,
                       int(np.searchsorted(offsets, bad, side="right")) - 1)
        if k is not None:
            supports = self.mask(choice, ids, c, rec)
            sampled, top_ids, top_lps = _reference.compact_rows(
                ids.tolist(), row_ids, row_values, offsets.tolist(), num_top, k, supports, c
            )
            return sampled, top_ids, top_lps, supports
        sampled = np.empty(n, dtype=np.float32)
        if n:
            rids = row_ids
            vals = row_values
            out = sampled
            sampled_ids = _i64(ids)
            with nogil:
                row = tw_compact_rows(&rids[0], &vals[0], &offs[0], <size_t>n, sampled_ids, &out[0], &kind)
            if row >= 0:
                if kind == TW_ROW_NOMEM:
                    raise MemoryError()
                c.fail("Repeated compact logprobs disagree" if kind == TW_ROW_REPEAT_DISAGREE
                       else "Missing compact sampled-token evidence", field, row)
        return sampled, None, None, self.mask(choice, ids, c, rec)

    cdef object mask(self, object choice, object ids, object c, tw_choice *rec):
        cdef Py_ssize_t n = len(ids)
        cdef const tw_value *v
        cdef ptrdiff_t bad = -1
        cdef size_t total = 0, err_row = 0
        cdef int rc = 0, nomem = 0
        cdef const int32_t[::1] i32
        cdef int64_t[::1] offs
        cdef int32_t[::1] vals
        cdef const int64_t *sampled_ids
        field = "sampling_mask"
        mask = choice.get(field)
        bare = False
        if mask is None and choice.get("kept_tokens") is not None:
            field, mask, bare = "kept_tokens", choice["kept_tokens"], True
        if mask is None:
            return None
        if isinstance(mask, dict):
            arrays = {}
            for name in ("ids", "counts"):
                packed = mask.get(name)
                if bare:
                    v = &rec.f[TW_F_KT_IDS if name == "ids" else TW_F_KT_COUNTS]
                elif not isinstance(packed, dict) or packed.get("dtype") != "int32":
                    c.fail("Invalid packed sampling mask", f"{field}.{name}")
                else:
                    v = &rec.f[TW_F_SM_IDS_DATA if name == "ids" else TW_F_SM_COUNTS_DATA]
                raw = _decode(self.buf, v, self.path)
                if raw is None or len(raw) % 4:
                    c.fail("Invalid packed sampling mask", f"{field}.{name}.data")
                values = raw.view("<i4")
                if not bare and not _shape_is(packed.get("shape"), len(values)):
                    c.fail("Invalid packed sampling mask", f"{field}.{name}.shape")
                if len(values):
                    i32 = values
                    with nogil:
                        bad = tw_i32_negative(&i32[0], <size_t>i32.shape[0])
                    if bad >= 0:
                        c.fail("Invalid packed sampling mask", f"{field}.{name}", bad)
                arrays[name] = values
            counts, values = arrays["counts"], arrays["ids"]
            if len(counts) != n or int(counts.sum(dtype=np.int64)) != len(values):
                c.fail("Sampling mask token count mismatch", field)
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            rows = Ragged(offsets, values)
            total = n
        elif isinstance(mask, list):
            if bare:  # the list form under the old name is small and never blanked
                return _reference._parse_sampling_mask(choice, ids.tolist(), c)
            v = &rec.f[TW_F_SAMPLING_MASK]
            if v.count != <size_t>n:
                c.fail("Sampling mask token count mismatch", field)
            tw_count_nested(self.buf, v, &total)
            offsets = np.empty(n + 1, dtype=np.int64)
            values = np.empty(total, dtype=np.int32)
            offs = offsets
            vals = values
            with nogil:
                rc = tw_parse_nested_uint(self.buf, v, _MAX_MASK_ID, &offs[0],
                                          &vals[0] if total else NULL, &err_row)
            rows = Ragged(offsets, values)
            total = err_row if rc < 0 else <size_t>n
        else:
            c.fail("Sampling mask token count mismatch", field)
        if total:
            offs = rows.offsets
            vals = rows.values if len(rows.values) else np.zeros(1, dtype=np.int32)
            sampled_ids = _i64(ids)
            with nogil:
                bad = tw_support_rows(&vals[0], &offs[0], total, sampled_ids, &nomem)
            if nomem:
                raise MemoryError()
        if bad >= 0:
            c.fail("Invalid recorded sampling support", field, bad)
        if rc < 0:
            c.fail("Invalid recorded sampling support", field, err_row)
        return rows

    cdef object routed(self, object value, object c, tw_choice *rec):
        field = "routed_experts"
        if rec.f[TW_F_ROUTED].type == TW_T_STRING:
            raw = _decode(self.buf, &rec.f[TW_F_ROUTED], self.path)
            if raw is None:
                c.fail("Invalid routed_experts base64", field)
            return RoutedExperts(_reference._parse_npy(raw, c), None)
        if not isinstance(value, dict):
            c.fail("routed_experts must be an object or a base64 .npy string", field)
        dtype_name = value.get("dtype", "uint8")
        if dtype_name not in _ROUTED_DTYPES:
            c.fail("Unsupported routed_experts dtype (uint8, uint16 or int32)", field + ".dtype")
        start = value.get("start")
        if start is not None and (type(start) is not int or start < 0):
            c.fail("routed_experts start must be a non-negative int", field + ".start")
        raw = _decode(self.buf, &rec.f[TW_F_RE_DATA], self.path)
        if raw is None:
            c.fail("Invalid routed_experts base64", field + ".data")
        return RoutedExperts(_reference._shaped(raw, value.get("shape"), dtype_name, c), start)


def parse_generate_response(raw, *, top_k=None, require_logprobs=True):
    """Parse and validate a ``/inference/v1/generate`` response (see the package docs)."""
    k = _reference._check_top_k(top_k)
    return _Parse().run(raw, k, require_logprobs)
