# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

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
