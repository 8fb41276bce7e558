# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- base64 --------------------------------------------------------------------------------------


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL


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


def b64check_signed(data, itemsize, start=0):
    """The reference's ``b64check_signed`` in C (tw_b64_check_signed): ``(size, negative)`` of
    the base64 ``data[start:]``, decoded a cache-sized block at a time and never kept."""
    cdef Py_buffer buf
    cdef const char *src
    cdef Py_ssize_t size = 0, first
    cdef ptrdiff_t got
    cdef int negative = 0
    cdef size_t width
    cdef int path = _path
    if not (type(data) is bytes or isinstance(data, str)):
        check_input(data)
    width = check_itemsize(itemsize)
    first = check_offset(data, start)
    if isinstance(data, str) and not (<str>data).isascii():
        data = data[first:]  # the characters before start are not read
        first = 0
        if not (<str>data).isascii():
            return -1, False
    cdef bint borrowed = _acquire(data, &buf, &src, &size)
    try:
        if first > size:  # a buffer rewritten shorter since check_start measured it
            raise ValueError(f"start {first} is past the {size} bytes of data")
        if size - first >= _NOGIL_MIN:
            with nogil:
                got = tw_b64_check_signed(src + first, <size_t>(size - first), width, path, &negative)
        else:
            got = tw_b64_check_signed(src + first, <size_t>(size - first), width, path, &negative)
        return got, got >= 0 and negative != 0
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
