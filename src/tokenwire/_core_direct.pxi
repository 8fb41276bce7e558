# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

from libc.string cimport memset

# --- bodies straight into a batch: the plain path's choices written into the step's rows -----------
#
# tokenwire.parse_batch reads many bodies into one Batch. A body the plain path would take
# (_core_plain.pxi: token ids with packed logprobs or compact rows, nothing else of the wire
# table) is scanned once (_direct_generate: the scan, the remainder's JSON, each choice's form;
# nothing decoded into an array), and once the batch's widths are known its choices are read
# straight into their rows of the padded blocks (_direct_rows): the ids from the scan's
# integers, the packed logprobs from the scan's base64 (or the compact rows' sampled values, as
# the row rules find them), by the same checks and C kernels as the plain path. No
# GenerateResponse, no GenerateChoice and no per-choice array is made. Like the plain path it
# decides nothing: a body it doubts is handed back (None, or 0 from _direct_rows) and the
# caller parses it with the rules, which give the verdict and the message.


cdef class _Direct:
    """One body the plain path can take, scanned: kept until its rows are written."""
    cdef _Scan scan
    cdef object document
    cdef list forms  # each choice's _plain_form
    cdef readonly list finish_reasons
    cdef readonly list counts  # each choice's token count, as the scan counted the ids
    cdef readonly Py_ssize_t prompt  # the prompt's id count, -1 without prompt ids

    def response(self):
        """The GenerateResponse the plain path makes of this body, or None (the rules decide)."""
        if self.scan.size < _SMALL_BODY:
            return _plain_generate(self.scan, self.document)
        previous = PyDataMem_SetHandler(_NP_HANDLER)
        try:
            return _plain_generate(self.scan, self.document)
        finally:
            PyDataMem_SetHandler(previous)


def _direct_generate(raw):
    """``raw`` scanned, as a _Direct when each of its choices has a plain form, else None (a
    body the scan refuses too: the rules' parser says why)."""
    return _direct_scan(raw)


cdef object _direct_scan(object raw):
    cdef size_t i, count
    cdef int form
    cdef _Scan scan = _Scan()
    try:
        document = scan.document(raw)
    except MalformedResponseError:
        return None
    if not _PLAIN_HOST or type(document) is not dict:
        return None
    for key in _PLAIN_ROOT_ABSENT:
        if (<dict>document).get(key) is not None:
            return None
    choices = (<dict>document).get(_KEY_CHOICES)
    if type(choices) is not list or not choices or <size_t>len(<list>choices) > scan.doc.nchoices:
        return None
    count = len(<list>choices)
    cdef _Direct d = _Direct.__new__(_Direct)
    d.forms, d.finish_reasons, d.counts = [], [], []
    for i in range(count):
        choice = (<list>choices)[i]
        form = _plain_form(scan, i, <dict>choice) if type(choice) is dict else 0
        if form == 0:
            return None
        d.forms.append(form)
        d.finish_reasons.append((<dict>choice).get("finish_reason"))
        d.counts.append(scan.doc.choice[i].f[TW_F_TOKEN_IDS].count)
    d.prompt = -1
    if (<dict>document).get(_KEY_PROMPT_TOKEN_IDS) is not None:
        if not scan.doc.prompt_token_ids.present or scan.doc.prompt_token_ids.type != TW_T_ARRAY:
            return None
        d.prompt = scan.doc.prompt_token_ids.count
    d.scan, d.document = scan, document
    return d


cdef inline int _direct_ints(_Scan scan, const tw_value *v, uint64_t high, int64_t *out) noexcept nogil:
    """The integers recorded at ``v`` (``v.count`` of them) into ``out``; 0 when each is at most
    ``high``."""
    cdef size_t err = 0
    if v.read:
        return tw_take_uints(&scan.doc, v, high, out, &err)
    if v.count:
        return tw_parse_uint_array(scan.buf, v, high, out, &err, scan.path)
    return 0


cdef int _direct_choice(_Scan scan, size_t index, dict choice, int form, int64_t *ids, int64_t *offsets,
                        float *logprobs, object lp_block, Py_ssize_t lp_row) except -1:
    """Choice ``index``'s ids into ``ids`` and its logprobs into ``logprobs`` (its token count
    of each; ``offsets`` room for one more, the compact rows' offsets) when every rule the plain
    path checks passes: 1, else 0 (``logprobs`` is row ``lp_row`` of ``lp_block``)."""
    cdef const tw_value *f = scan.doc.choice[index].f
    cdef size_t n = f[TW_F_TOKEN_IDS].count, size = 0, count, itemsize
    cdef uint8_t *data = NULL
    cdef ptrdiff_t bad = -1
    cdef bint big = scan.size >= _NOGIL_MIN
    cdef int rc
    if big:
        with nogil:
            rc = _direct_ints(scan, &f[TW_F_TOKEN_IDS], _MAX_TOKEN_ID, ids)
    else:
        rc = _direct_ints(scan, &f[TW_F_TOKEN_IDS], _MAX_TOKEN_ID, ids)
    if rc < 0:
        return 0
    if form == _PLAIN_COMPACT:
        if (f[TW_F_CP_OFFSETS].count != n + 1
                or _direct_ints(scan, &f[TW_F_CP_OFFSETS], _MAX_OFFSET, offsets) < 0):
            return 0
        if tw_offsets_not_rising(offsets, n + 1) >= 0:
            return 0
        count = <size_t>offsets[n]
        data = _plain_blob(scan, &f[TW_F_CP_DATA], &size)
        if data == NULL:
            return 0
        blob = _adopt(data, size)  # freed with it
        if size % 8 or size // 8 != count:
            return 0
        if n and big:
            with nogil:
                bad = _plain_rows(data, offsets, n, count, ids, logprobs)
        elif n:
            bad = _plain_rows(data, offsets, n, count, ids, logprobs)
        return bad < 0
    itemsize = <size_t>form
    shape = (<dict>choice[_KEY_COMPLETION_LOGPROBS]).get("shape", _MISSING)
    if shape is not _MISSING and not (type(shape) is list and len(<list>shape) == 1
                                      and type((<list>shape)[0]) is int and (<list>shape)[0] == n):
        return 0
    data = _plain_blob(scan, &f[TW_F_CL_DATA], &size)
    if data == NULL:
        return 0
    blob = _adopt(data, size)  # freed with it
    if size != n * itemsize:
        return 0
    if n and big:
        with nogil:
            bad = _packed_bad(data, n, itemsize)
    elif n:
        bad = _packed_bad(data, n, itemsize)
    if bad >= 0:
        return 0
    if itemsize == 4:
        memcpy(logprobs, data, n * 4)
    elif n:  # float64 rounded to float32 by numpy, as collate casts them
        np.copyto(lp_block[lp_row, :n], blob.view(np.float64))
    return 1


def _direct_write(list scanned, ids, logprobs, prompts, pad_id):
    """The choices of each _Direct of ``scanned`` into the next rows of ``ids`` (int64 ``(B,
    T)``, ``pad_id`` past each completion) and ``logprobs`` (float32 ``(B, T)``, 0.0 past it),
    and its prompt ids into the same rows of ``prompts`` (int64 ``(B, P)``, ``pad_id`` after
    them; None when no body has prompt ids). A body the plain path does not take leaves its
    rows to the next body. Returns the positions in ``scanned`` of those bodies. The blocks'
    shapes are checked before anything is written."""
    cdef _Direct d
    cdef Py_ssize_t row = 0, rows = 0
    cdef size_t width, pwidth = 0
    cdef int64_t pad = pad_id
    _block(ids, 2, "ids")
    _block(logprobs, 2, "logprobs")
    width = ids.shape[1]
    if ids.dtype != np.int64 or logprobs.dtype != np.float32 or logprobs.shape[1] != width:
        raise ValueError("ids and logprobs do not fit the batch")
    if prompts is not None:
        _block(prompts, 2, "prompts")
        pwidth = prompts.shape[1]
        if prompts.dtype != np.int64 or prompts.shape[0] != ids.shape[0]:
            raise ValueError("prompts does not fit the batch")
    for d in scanned:
        rows += len(d.counts)
        for n in d.counts:
            if <size_t>n > width:
                raise ValueError(f"a choice has {n} tokens, more than the width {width}")
        if d.prompt >= 0 and (prompts is None or <size_t>d.prompt > pwidth):
            raise ValueError("prompts does not fit the batch")
    if rows > ids.shape[0] or logprobs.shape[0] != ids.shape[0]:
        raise ValueError("ids and logprobs do not fit the batch")
    scratch = np.empty(max(2 * (width + 1), pwidth), dtype=np.int64)  # private: what the rules read
    refused = []
    for i, d in enumerate(scanned):
        if _direct_rows(d, row, ids, logprobs, prompts, width, pwidth, pad, <int64_t *>cnp.PyArray_DATA(scratch)):
            row += len(d.counts)
        else:
            refused.append(i)
    return refused


cdef int _direct_rows(_Direct d, Py_ssize_t row, object ids, object logprobs, object prompts, size_t width,
                      size_t pwidth, int64_t pad, int64_t *tmp) except -1:
    """The choices of ``d`` into rows ``row``, ``row + 1``, ... (checked to fit by the
    caller); 1, or 0 when the plain path does not take the body (the rows are then not to be
    used)."""
    cdef size_t i, count = len(d.forms), n, plen
    cdef int64_t *ids_row
    cdef float *lp_row
    cdef int64_t *p_row
    cdef int64_t *offs = tmp + width + 1
    choices = <list>(<dict>d.document)[_KEY_CHOICES]
    for i in range(count):
        n = d.counts[i]
        ids_row = <int64_t *>cnp.PyArray_DATA(ids) + (row + i) * width
        lp_row = <float *>cnp.PyArray_DATA(logprobs) + (row + i) * width
        if not _direct_choice(d.scan, i, <dict>(<list>choices)[i], d.forms[i], tmp, offs, lp_row,
                              logprobs, row + i):
            return 0
        memcpy(ids_row, tmp, n * 8)
        _fill_i64(ids_row + n, width - n, pad)
        memset(lp_row + n, 0, (width - n) * 4)
    if d.prompt >= 0:
        plen = d.prompt
        p_row = <int64_t *>cnp.PyArray_DATA(prompts) + row * pwidth
        if _direct_ints(d.scan, &d.scan.doc.prompt_token_ids, _MAX_TOKEN_ID, tmp) < 0:
            return 0
        for i in range(count):  # every choice of a response has its prompt
            memcpy(p_row + i * pwidth, tmp, plen * 8)
            _fill_i64(p_row + i * pwidth + plen, pwidth - plen, pad)
    return 1


def _direct_read(list bodies, fallback):
    """Each body scanned (a _Direct), or where the plain path does not take it
    ``fallback(i, body)`` (the rules' response, or the error)."""
    cdef Py_ssize_t i
    out = [None] * len(bodies)
    for i in range(len(bodies)):
        d = _direct_scan(bodies[i])
        out[i] = d if d is not None else fallback(i, bodies[i])
    return out


cdef inline void _fill_i64(int64_t *out, size_t n, int64_t value) noexcept nogil:
    cdef size_t i
    if value == 0:
        memset(out, 0, n * 8)
    else:
        for i in range(n):
            out[i] = value
