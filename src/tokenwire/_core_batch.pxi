# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- the batch path's kernels: rows copied into padded blocks (csrc/tw_pad.c) --------------------
#
# tokenwire.collate gathers the rows of many choices into one tensor per field; these copy them
# in one C call per tensor, without the GIL. The reference's kernels (kernels/python.py) do the
# same with numpy, one call per row.

cdef uint8_t _NO_DATA = 0  # what an empty row points to (its data is never read)


cdef object _row_pointers(object rows, object dtype, str name):
    """A uintp array of the data pointers of ``rows`` (1-D C-contiguous arrays of ``dtype``)
    and a tuple holding the rows while a kernel reads them; TypeError for any other row."""
    held = tuple(rows)
    pointers = np.empty(len(held), dtype=np.uintp)
    cdef size_t *out = <size_t *>cnp.PyArray_DATA(pointers)
    cdef Py_ssize_t i
    for i in range(len(held)):
        row = held[i]
        if (type(row) is not np.ndarray or cnp.PyArray_NDIM(row) != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(row)
                or row.dtype != dtype):
            raise TypeError(f"{name}[{i}] must be a 1-D C-contiguous array of {dtype}")
        out[i] = <size_t>cnp.PyArray_DATA(row) if cnp.PyArray_SIZE(row) else <size_t>&_NO_DATA
    return pointers, held


cdef object _block(object out, int ndim, str name):
    if (type(out) is not np.ndarray or cnp.PyArray_NDIM(out) != ndim or not cnp.PyArray_IS_C_CONTIGUOUS(out)
            or not cnp.PyArray_ISWRITEABLE(out)):
        raise TypeError(f"{name} must be a writable C-contiguous {ndim}-D array")
    return out


def pad_rows(rows, out, fill):
    """Row ``r`` of ``out`` (``(len(rows), width)``) is ``rows[r]`` then ``fill`` to the width;
    -1, or the first row longer than the width (``out`` is then not to be used)."""
    _block(out, 2, "out")
    pointers, held = _row_pointers(rows, out.dtype, "rows")
    if len(held) != out.shape[0]:
        raise ValueError(f"out has {out.shape[0]} rows for {len(held)}")
    lengths = np.array([len(row) for row in held], dtype=np.int64)
    fill_item = np.array(fill, dtype=out.dtype)
    cdef size_t n = len(held), width = out.shape[1], itemsize = out.dtype.itemsize
    cdef const void **src = <const void **>cnp.PyArray_DATA(pointers)
    cdef const int64_t *lens = <const int64_t *>cnp.PyArray_DATA(lengths)
    cdef const void *f = cnp.PyArray_DATA(fill_item)
    cdef void *dst = cnp.PyArray_DATA(out)
    cdef ptrdiff_t bad
    with nogil:
        bad = tw_pad_rows(n, src, lens, itemsize, width, f, dst)
    return bad


def ragged_lengths(offsets, counts, sizes, lengths):
    """Token ``t`` of row ``r`` spans ``offsets[r][t]:offsets[r][t + 1]`` of values
    ``sizes[r]`` long, for ``t < counts[r]``: its length goes to ``lengths[r, t]`` (0 past the
    row's tokens). Returns ``(first, longest, bad)``: each row's first offset, the longest
    token, and None or ``(code, row, token)`` for the first row that does not fit (code
    ``"tokens"``: more tokens than ``lengths`` has columns; ``"offsets"``: offset ``token``
    negative, falling or past the values). Each offset is read once."""
    _block(lengths, 2, "lengths")
    if lengths.dtype != np.int64:
        raise TypeError("lengths must be int64")
    pointers, held = _row_pointers(offsets, np.dtype(np.int64), "offsets")
    count_array = np.array(counts, dtype=np.int64).reshape(-1)
    size_array = np.array(sizes, dtype=np.int64).reshape(-1)
    cdef size_t n = len(held), tokens = lengths.shape[1], i
    if count_array.shape[0] != n or size_array.shape[0] != n or lengths.shape[0] != n:
        raise ValueError("offsets, counts, sizes and lengths must have one entry per row")
    for i in range(n):
        if not 0 <= count_array[i] < len(held[i]):
            raise ValueError(f"offsets[{i}] has {len(held[i])} entries for {count_array[i]} tokens")
    first = np.zeros(n, dtype=np.int64)
    cdef const int64_t **offs = <const int64_t **>cnp.PyArray_DATA(pointers)
    cdef const int64_t *cnt = <const int64_t *>cnp.PyArray_DATA(count_array)
    cdef const int64_t *sz = <const int64_t *>cnp.PyArray_DATA(size_array)
    cdef int64_t *fst = <int64_t *>cnp.PyArray_DATA(first)
    cdef int64_t *lens = <int64_t *>cnp.PyArray_DATA(lengths)
    cdef int64_t longest = 0
    cdef size_t bad_row = 0, bad_token = 0
    cdef int rc
    with nogil:
        rc = tw_ragged_lengths(n, tokens, offs, cnt, sz, fst, lens, &longest, &bad_row, &bad_token)
    if rc == TW_PAD_TOO_MANY_TOKENS:
        return first, 0, ("tokens", bad_row, None)
    if rc == TW_PAD_BAD_OFFSETS:
        return first, 0, ("offsets", bad_row, bad_token)
    return first, longest, None


def pad_ragged(values, first, lengths, out, fill):
    """Token ``t`` of row ``r`` of ``out`` (``(rows, tokens, width)``) holds its
    ``lengths[r, t]`` items of ``values[r]`` (from ``first[r]`` on, the tokens back to back),
    then ``fill``; ``first`` and ``lengths`` are what ``ragged_lengths`` made (they bound the
    reads). -1, or the first ``r * tokens + t`` longer than the width (``out`` is then not to
    be used)."""
    _block(out, 3, "out")
    pointers, held = _row_pointers(values, out.dtype, "values")
    cdef size_t n = len(held), tokens = out.shape[1], width = out.shape[2], itemsize = out.dtype.itemsize
    if (type(first) is not np.ndarray or first.dtype != np.int64 or first.shape != (n,)
            or type(lengths) is not np.ndarray or lengths.dtype != np.int64 or lengths.shape != (n, tokens)
            or not first.flags.c_contiguous or not lengths.flags.c_contiguous or out.shape[0] != n):
        raise ValueError("first and lengths must be ragged_lengths' arrays for out's rows and tokens")
    ends = first + lengths.sum(axis=1)  # what the kernel reads of each row's values
    if n and ((first < 0).any() or (lengths < 0).any()
              or (ends > np.array([len(row) for row in held], dtype=np.int64)).any()):
        raise ValueError("first and lengths reach past the values")
    fill_item = np.array(fill, dtype=out.dtype)
    cdef const void **src = <const void **>cnp.PyArray_DATA(pointers)
    cdef const int64_t *fst = <const int64_t *>cnp.PyArray_DATA(first)
    cdef const int64_t *lens = <const int64_t *>cnp.PyArray_DATA(lengths)
    cdef const void *f = cnp.PyArray_DATA(fill_item)
    cdef void *dst = cnp.PyArray_DATA(out)
    cdef ptrdiff_t bad
    with nogil:
        bad = tw_pad_ragged(n, tokens, src, fst, lens, itemsize, width, f, dst)
    return bad
