# cython: language_level=3, freethreading_compatible=True
"""The compiled core: C kernels over raw buffers, the GIL released around every hot loop."""

import os
import warnings

import numpy as np

cimport numpy as cnp
from libc.stdint cimport uint8_t

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


def parse_generate_response(raw, *, top_k=None, require_logprobs=True):
    """Parse and validate a ``/inference/v1/generate`` response."""
    return _reference.parse_generate_response(raw, top_k=top_k, require_logprobs=require_logprobs)
