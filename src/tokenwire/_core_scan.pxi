# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- the scan: the raw bytes of one response and what the C scanner recorded in them -------------


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


cdef uint64_t _MAX_MASK_ID = 2147483647


def _blank_mask(fields):
    """The ``tw_doc.blank_fields`` bits of these TW_F_* fields (made once, at import)."""
    mask = 0
    for field in fields:
        mask |= 1 << field
    return mask


# What the generate parser reads from the raw bytes besides what the scan blanks itself.
_GENERATE_BLANK = _blank_mask((TW_F_LOGPROBS_CONTENT,))
# What the OpenAI-compatible parsers read from the raw bytes (token_ids and the top-level
# prompt ids are blanked by the scan itself); text_offset is read by nothing, top_logprobs
# only for heads. With a head the record candidates are read by tw_rec_parse and keyed rows
# by tw_rec_keyed_heads, so the same fields are blanked with a head or without.
_OPENAI_BLANK = _blank_mask((TW_F_PROMPT_IDS, TW_F_LP_TOKEN_LOGPROBS, TW_F_LP_TOKENS,
                             TW_F_LP_TOKEN_IDS, TW_F_LP_TEXT_OFFSET, TW_F_RO_TOKEN_IDS, TW_F_LP_TOP,
                             TW_F_LOGPROBS_CONTENT, TW_F_RO_CONTENT))
# SGLang items: everything is read in C, heads included (tw_rec_triple_heads), and the sampling
# mask, its logprobs and the flat prompt top-k.
_SGLANG_BLANK = _blank_mask((TW_F_SGL_IDS, TW_F_SGL_TRIPLES, TW_F_SGL_TOP, TW_F_SGL_MASK, TW_F_SGL_SAMPLING,
                             TW_F_SGL_PTOP_VAL, TW_F_SGL_PTOP_IDX, TW_F_SGL_PTOP_VAL_B64, TW_F_SGL_PTOP_IDX_B64))
# A value of each class tw_rec_entries reports, as json.loads would give it (for messages).
_KIND_EXAMPLES = (None, 0.0, None, "", True, [], {})
# tw_records' codes, as the reference names them.
_NATIVE_CODES = (None, "not_object", "token", "number", "finite", "evidence", "missing_top",
                 "top_not_object", "top_no_id", "top_not_finite", "top_positive", "top_duplicate",
                 "sampled_not_number")


cdef uint8_t *_decoded_c(const char *buf, const tw_value *v, int path, size_t *size,
                         bint *nomem) noexcept nogil:
    """Strictly decode a recorded JSON string holding base64 into memory from tw_mem that the
    caller owns (``*size`` bytes), or NULL when the value is not a string of canonical
    base64 (``*nomem`` set when memory ran out)."""
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
            nomem[0] = True
            return NULL
        length = tw_unescape(buf, v, tmp)
        src = tmp
    need = tw_b64_decoded_size(src, length)
    if need >= 0:
        data = <uint8_t *>tw_mem_alloc(<size_t>need + 1)
        if data == NULL:
            nomem[0] = True
    if data != NULL:
        got = tw_b64_decode(src, length, data, <size_t>need, path, &err)
    tw_mem_free(tmp)
    if got < 0:
        tw_mem_free(data)
        return NULL
    size[0] = <size_t>need
    return data


cdef uint8_t *_decoded(const char *buf, const tw_value *v, int path, size_t *size) except? NULL:
    """_decoded_c, raising MemoryError; long values are unescaped and decoded without the GIL."""
    cdef bint nomem = False
    cdef uint8_t *data
    if v.end - v.start < _NOGIL_MIN:
        data = _decoded_c(buf, v, path, size, &nomem)
    else:
        with nogil:
            data = _decoded_c(buf, v, path, size, &nomem)
    if nomem:
        raise MemoryError()
    return data


cdef object _decode(const char *buf, const tw_value *v, int path):
    """``_decoded`` as a uint8 array, or None."""
    cdef size_t size = 0
    cdef uint8_t *data = _decoded(buf, v, path, &size)
    return None if data == NULL else _adopt(data, size)


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
    cdef size_t size  # how many bytes buf holds

    def __cinit__(self):
        tw_doc_init(&self.doc)
        tw_rec_read_during_scan(&self.doc)  # logprobs.content entries: read as they are scanned

    def __dealloc__(self):
        tw_doc_free(&self.doc)

    cdef object document(self, object raw, uint64_t blank=_GENERATE_BLANK, bint openai=False,
                         bint sglang=False):
        """Scan ``raw`` and return the document with its big values blanked, as
        ``_json.loads`` reads it.
        ``blank``: the choice fields also blanked (read from the raw bytes instead), as
        ``tw_doc.blank_fields`` bits (``_blank_mask``);
        ``openai``/``sglang``: an OpenAI-compatible / SGLang document (see tw_scan.h)."""
        return self.loads(self.stripped(raw, blank, openai, sglang))

    cdef object loads(self, bytes stripped):
        """The stripped copy ``stripped`` (validated by the scan) as ``_json.loads`` reads it."""
        try:
            return _json.loads(stripped)
        except _json.JSONDecodeError as exc:
            raise invalid_json(exc, stripped) from None

    cdef bytes stripped(self, object raw, uint64_t blank=_GENERATE_BLANK, bint openai=False,
                        bint sglang=False):
        """Scan ``raw`` (``document``'s arguments) and return its copy with the big values
        blanked: valid JSON (the scan checked every byte of it)."""
        cdef const unsigned char[::1] view
        cdef size_t n
        cdef int rc
        cdef char *dst
        cdef const char *src
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
                src = _start(view)
                if n < _NOGIL_MIN:
                    memcpy(dst, src, n)
                else:  # the view holds the buffer: other threads may run meanwhile
                    with nogil:
                        memcpy(dst, src, n)
                self.source = _adopt(<uint8_t *>dst, n)  # owns the snapshot from now on
                self.buf = dst
        self.size = n
        self.path = _path
        self.doc.path = _path
        self.doc.decode = 1
        self.doc.b64_path = _path
        self.doc.openai = openai
        self.doc.sglang = sglang
        self.doc.blank_fields = blank  # values read in C: the JSON reader need not build them
        if n < _NOGIL_MIN:  # a small body: releasing the GIL would cost more than the scan saves
            rc = tw_scan(self.buf, n, &self.doc)
        else:
            with nogil:
                rc = tw_scan(self.buf, n, &self.doc)
        if rc == TW_ERR_NOMEM:
            raise MemoryError("tokenwire: out of memory while scanning the response")
        if rc != TW_OK:
            message = self.doc.err_msg.decode()
            if message == "unexpected end of data":
                raise MalformedResponseError(truncated(self.doc.err_pos))
            raise MalformedResponseError(f"invalid JSON: {message} at byte {self.doc.err_pos}")
        stripped = PyBytes_FromStringAndSize(NULL, tw_stripped_size(&self.doc, n))
        dst = PyBytes_AS_STRING(stripped)
        if n < _NOGIL_MIN:
            tw_strip(self.buf, n, &self.doc, dst)
        else:
            with nogil:
                tw_strip(self.buf, n, &self.doc, dst)
        return stripped

    cdef object blob(self, const tw_value *v):
        """The bytes of the base64 string ``v`` as a uint8 array, or None when they are not
        canonical base64: decoded by the scan when it could, else now."""
        cdef size_t size = 0
        cdef uint8_t *data = tw_take_blob(&self.doc, v, &size)
        if data != NULL:
            return _adopt(data, size)
        return _decode(self.buf, v, self.path)

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
        """tw_rec_parse over the array ``v``: the reference's ``native_entries`` (``ids``
        None: the entries by position, no id read)."""
        cdef size_t n = v.count if ids is None else len(ids)
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
        ids_ptr = NULL if ids is None else _i64(ids)
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
        """``logprobs.content`` entries: the Records the reference's ``records`` builds, its
        values as Numbers (``_record_values``)."""
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
        """SGLang ``[logprob, token_id, text]`` entries: the Records the reference's
        ``triples`` builds, its values as Numbers (``_record_values``)."""
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
        if v.type != TW_T_ARRAY:
            return None
        out = self.int_array(v, high, &err)
        if err != <size_t>-1:
            return out, v.count, err
        return out, v.count, None

    cdef object int_array(self, const tw_value *v, uint64_t high, size_t *bad):
        """The integers of the array ``v`` (in [0, ``high``]) as an int64 array, with *bad
        (size_t)-1; else those before the first that is not, its index in *bad."""
        cdef size_t err = 0
        cdef int rc = 0
        cdef int64_t *data
        cdef cnp.npy_intp dims[1]
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
            bad[0] = err
            return out[:err]
        bad[0] = <size_t>-1
        return out

    cdef object nested(self, const tw_value *v):
        cdef size_t total = 0, bad = 0, rows = v.count
        cdef int rc
        cdef int64_t[::1] offs
        cdef int32_t[::1] vals
        with nogil:
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
