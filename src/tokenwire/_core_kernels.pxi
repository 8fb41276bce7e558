# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- the kernels: the reference's per-token loops as free functions, in C ------------------------


# tw_heads' codes, as the reference words them.
_HEAD_REASONS = (None, *_kernels.HEAD_REASONS)


# The kernels below trust their rows: every row t is [offsets[t], offsets[t + 1]) of arrays that
# hold it. The rules hand them only rows they checked; a caller of these private functions may
# not, so each checks its rows first (one pass over the offsets, before any kernel runs) and
# raises ValueError for rows that would reach past their arrays.
cdef int _rows_within(const int64_t[::1] offs, size_t n, Py_ssize_t size, str what) except -1:
    """ValueError unless offs holds n + 1 offsets, none below 0, never falling, the last at most
    ``size`` (the length of the arrays the rows index)."""
    cdef size_t i
    cdef bint ok = True
    if <size_t>offs.shape[0] < n + 1:
        raise ValueError(f"{what}: {n + 1} offsets needed, {offs.shape[0]} given")
    with nogil:
        if offs[0] < 0 or offs[n] > size:
            ok = False
        for i in range(n):
            if offs[i + 1] < offs[i]:
                ok = False
                break
    if not ok:
        raise ValueError(f"{what}: the offsets must rise from 0 or more to at most {size}")
    return 0


cdef int _at_least(object values, size_t n, str what) except -1:
    if <size_t>len(values) < n:
        raise ValueError(f"{what}: {n} needed, {len(values)} given")
    return 0


cdef int _supports_within(object supports, size_t n) except -1:
    if supports is not None:
        _rows_within(supports.offsets, n, len(supports.values), "supports")
    return 0


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
    if rule == "top_k":
        return _kernels.first_bad(rule, values)
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
                bad = tw_compact_values_bad_on(&f32[0], n, _path)
    return bad


def first_out_of_range(values, limit=None):
    """The reference's ``first_out_of_range`` in one C pass over the array's bytes
    (tw_first_at_or_above: a signed value read as unsigned is at or above half its range
    exactly when it is negative)."""
    cdef size_t n = len(values)
    cdef size_t width = values.dtype.itemsize
    cdef uint64_t top
    cdef uint32_t bound
    cdef ptrdiff_t bad
    cdef const void *data
    if n == 0:
        return -1
    if values.dtype.kind not in "iu" or width not in (1, 2, 4):
        return _kernels.first_out_of_range(values, limit)
    if values.dtype.kind == "i":
        top = 1 << (8 * width - 1)  # a negative value reads at or above it
        if limit is not None and limit < top:
            top = limit
    elif limit is None or limit >= 1 << (8 * width):
        return -1  # no unsigned value of this width can reach it
    else:
        top = limit
    bound = <uint32_t>top
    values = np.ascontiguousarray(values)
    data = cnp.PyArray_DATA(values)
    if n * width < _NOGIL_MIN:
        return tw_first_at_or_above(data, n, width, bound)
    with nogil:
        bad = tw_first_at_or_above(data, n, width, bound)
    return bad


def first_not_rising(offsets):
    cdef const int64_t[::1] offs = offsets
    cdef ptrdiff_t bad
    if offs.shape[0] == 0:
        return -1
    with nogil:
        bad = tw_offsets_not_rising(&offs[0], offs.shape[0])
    return bad


def routed_row_count(n, prompt, start=0):
    """The reference's ``routed_row_count`` in C (tw_routed_rows); counts past its range (no
    response's) by the reference."""
    cdef int64_t rows = -1
    if (type(n) is int and type(prompt) is int and type(start) is int and 0 <= n <= TW_ROUTED_ROWS_MAX
            and 0 <= prompt <= TW_ROUTED_ROWS_MAX and 0 <= start <= TW_ROUTED_ROWS_MAX):
        rows = tw_routed_rows(n, prompt, start)
    return rows if rows >= 0 else _kernels.routed_row_count(n, prompt, start)


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
    _at_least(ids, count, "ids")
    _rows_within(offs, count, len(rows.values), "rows")
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
    _rows_within(offs, n, min(rids.shape[0], vals.shape[0]), "rows")
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
    _rows_within(roff, n, min(len(row_ids), len(row_values)), "rows")
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
    return _compact_heads(ids, row_ids, row_values, offsets, num_top, k, supports, False, False)[2:]


def checked_compact_heads(ids, row_ids, row_values, offsets, num_top, k, supports):
    """``first_bad("compact", row_values)`` and ``compact_heads`` in one pass (kernels/python.py)."""
    got = _compact_heads(ids, row_ids, row_values, offsets, num_top, k, supports, True, False)
    return (got[0], *got[2:])


def checked_supports_compact_heads(ids, row_ids, row_values, offsets, num_top, k, supports):
    """``first_bad("compact", row_values)``, ``first_bad_support`` of the supports (an empty row
    absent) and ``compact_heads`` in one pass (kernels/python.py)."""
    return _compact_heads(ids, row_ids, row_values, offsets, num_top, k, supports, True, supports is not None)


cdef tuple _compact_heads(ids, row_ids, row_values, offsets, num_top, k, supports, bint check_values,
                          bint check_supports):
    """(first bad value, first bad support, sampled values, heads' ids, heads' values, bad row,
    bad head); a rule not checked reports -1."""
    cdef size_t n = len(ids)
    cdef int row_kind = 0, head_code = 0
    cdef ptrdiff_t bad = -1, value_bad = -1, support_bad = -1
    cdef ptrdiff_t *value_out = &value_bad if check_values else NULL
    cdef ptrdiff_t *support_out = &support_bad if check_supports else NULL
    cdef const int64_t[::1] roff = offsets
    cdef const uint32_t[::1] rids = row_ids if len(row_ids) else np.zeros(1, np.uint32)
    cdef const float[::1] rvals = row_values if len(row_values) else np.zeros(1, np.float32)
    cdef int64_t top = min(num_top, 2**62)
    cdef int64_t kk = min(k, 2**62)
    cdef int simd = _path
    cdef const int64_t *sampled_ids
    cdef _KeptSets kept
    _rows_within(roff, n, min(len(row_ids), len(row_values)), "rows")
    _supports_within(supports, n)
    kept = _kept_sets(supports)
    sampled = np.zeros(n, dtype=np.float32)
    out_off, out_ids, out_lps = _ragged_arrays(n, int(offsets[n]) - int(offsets[0]), np.float32)
    cdef float[::1] out = sampled, olp_view = out_lps
    cdef int64_t[::1] off_view = out_off, oid_view = out_ids
    if n:
        sampled_ids = _i64(ids)
        with nogil:
            bad = tw_compact_heads_checked(n, &roff[0], &rids[0], &rvals[0], sampled_ids, top, kk, kept.soff,
                                           kept.sup, &out[0], &off_view[0], &oid_view[0], &olp_view[0],
                                           &row_kind, &head_code, simd, value_out, support_out)
    if value_bad >= 0:
        return value_bad, -1, None, None, None, None, None
    if support_bad >= 0:
        return -1, support_bad, None, None, None, None, None
    if bad >= 0:
        if row_kind != TW_ROW_OK:
            return -1, -1, None, None, None, _row_failure(bad, row_kind), None
        if head_code == TW_HEAD_NOMEM:
            raise MemoryError()
        return -1, -1, None, None, None, None, (bad, _HEAD_REASONS[head_code])
    end = int(out_off[n])
    return -1, -1, sampled, Ragged(out_off, out_ids[:end]), Ragged(out_off.copy(), out_lps[:end]), None, None


def compact_candidates(row_ids, row_values, offsets, num_top):
    cdef size_t n = len(offsets) - 1
    cdef const int64_t[::1] roff = offsets
    cdef const uint32_t[::1] rids = row_ids if len(row_ids) else np.zeros(1, np.uint32)
    cdef const float[::1] rvals = row_values if len(row_values) else np.zeros(1, np.float32)
    cdef int64_t top = min(num_top, 2**62)
    cdef int rc
    cdef int simd = _path
    _rows_within(roff, n, min(len(row_ids), len(row_values)), "rows")
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
    cdef const int64_t *sampled_ids
    cdef const double[::1] slps
    cdef _KeptSets kept
    _at_least(ids, n, "ids")
    _at_least(sampled_lps, n, "sampled values")
    _rows_within(coff, n, min(len(candidates.ids), len(candidates.logprobs)), "candidates")
    _supports_within(supports, n)
    sampled_ids = _i64(ids) if len(ids) else NULL
    slps = sampled_lps if len(sampled_lps) else np.zeros(1)
    kept = _kept_sets(supports)
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


# This module as the namespace of the kernels in this file (what the extractors hand the rules
# in every Evidence record).
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
