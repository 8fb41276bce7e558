# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.


# --- bodies straight into a batch: the plain path's choices written into the step's rows -----------
#
# tokenwire.parse_batch reads many bodies into one Batch. A body the plain path would take
# (_core_plain.pxi: token ids with packed logprobs or compact rows, nothing else of the wire
# table) is read by the plain path's own checks and kernels, one body at a time while its
# decoded bytes are in cache (_direct_generate): what the batch needs of it, each choice's ids
# and float32 logprobs (the packed values, or the compact rows' sampled values as the row
# rules find them) and the prompt ids, and nothing else: no GenerateResponse, no
# GenerateChoice, no `raw` or `payload` dict. The caller pads them into the batch's blocks
# (pad_rows) once every body is read. Like the plain path it decides nothing: a body it doubts
# is handed back (None) and the caller parses it with the rules, which give the verdict and
# the message.


cdef class _Direct:
    """What the batch needs of one body the plain path takes."""
    cdef readonly list ids  # each choice's token ids (int64)
    cdef readonly list logprobs  # each choice's logprobs (float32)
    cdef readonly list finish_reasons
    cdef readonly object prompt  # the prompt ids (int64), or None

    def response(self):
        """The body as a GenerateResponse with what collate reads of it (a batch of these and
        the rules' responses is collated)."""
        choices = [_GenerateChoice(index=i, completion_ids=ids, completion_logprobs=lp, finish_reason=reason)
                   for i, (ids, lp, reason) in enumerate(zip(self.ids, self.logprobs, self.finish_reasons))]
        return _GenerateResponse(choices=choices, request_id=None, usage=None, prompt_token_ids=self.prompt, payload={},
                                 format="generate")


def _direct_generate(raw):
    """What the batch needs of ``raw`` (a _Direct) when the plain path takes it, else None (a
    body the scan refuses too: the rules' parser says why)."""
    return _direct_scan(raw)


from libc.string cimport memcmp


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)


def _walk_keys(keys):
    """``keys`` as tw_plain_walk reads a list of them: each its length (a byte), then its bytes."""
    out = b""
    for key in keys:
        data = key.encode()
        if len(data) > 255:
            raise ImportError(f"the key {key!r} is too long for tw_plain_walk")
        out += bytes([len(data)]) + data
    return out


# The keys the walk of the stripped copy reads (tw_plain_walk), kept alive here for the C
# struct that points into them.
cdef bytes _WALK_ROOT_ABSENT = _walk_keys(_PLAIN_ROOT_ABSENT)
cdef bytes _WALK_CHOICE_ABSENT = _walk_keys(_PLAIN_ABSENT)
cdef bytes _WALK_COMPACT_FORMAT = COMPACT_FORMAT.encode()
cdef tw_plain_keys _WALK_KEYS
_WALK_KEYS.root_absent = _WALK_ROOT_ABSENT
_WALK_KEYS.nroot_absent = len(_PLAIN_ROOT_ABSENT)
_WALK_KEYS.choice_absent = _WALK_CHOICE_ABSENT
_WALK_KEYS.nchoice_absent = len(_PLAIN_ABSENT)
_WALK_KEYS.compact_format = _WALK_COMPACT_FORMAT
# The keys tw_plain_walk reads itself must not be among the lists' (each key read one way).
if ({_KEY_CHOICES, _KEY_PROMPT_TOKEN_IDS} & set(_PLAIN_ROOT_ABSENT)
        or {"finish_reason", _KEY_COMPLETION_LOGPROBS, _KEY_COMPACT_LOGPROBS} & set(_PLAIN_ABSENT)
        or (_KEY_CHOICES, _KEY_PROMPT_TOKEN_IDS, _KEY_COMPLETION_LOGPROBS, _KEY_COMPACT_LOGPROBS)
        != ("choices", "prompt_token_ids", "completion_logprobs", "compact_logprobs")):
    raise ImportError("the plain path's keys changed: update tw_plain.c and _core_direct.pxi")
DEF _WALK_ROOM = 8  # choices walked without an allocation


cdef object _direct_scan(object raw):
    cdef _Scan scan = _Scan()
    try:
        stripped = scan.stripped(raw)
    except MalformedResponseError:
        return None
    if scan.size < _SMALL_BODY:
        return _direct_read_stripped(scan, stripped)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        return _direct_read_stripped(scan, stripped)
    finally:
        PyDataMem_SetHandler(previous)


cdef object _finish_reason(const char *s, const tw_plain_choice *c):
    """A walked choice's finish_reason, as the JSON reader gives it."""
    cdef size_t n = c.finish_end - c.finish_start
    cdef const char *p = s + c.finish_start
    if c.finish != TW_PV_STRING:
        return None
    if n == 4 and memcmp(p, b"stop", 4) == 0:
        return "stop"
    if n == 6 and memcmp(p, b"length", 6) == 0:
        return "length"
    return PyUnicode_DecodeUTF8(p, <Py_ssize_t>n, NULL)


cdef int _walked_form(_Scan scan, size_t index, const tw_plain_choice *c) noexcept:
    """_plain_form's answer for a walked choice."""
    cdef const tw_value *f = scan.doc.choice[index].f
    if c.others or not f[TW_F_TOKEN_IDS].present or f[TW_F_TOKEN_IDS].type != TW_T_ARRAY:
        return 0
    if c.compact == TW_PV_OBJECT:
        if (c.packed == TW_PV_OBJECT or not f[TW_F_CP_DATA].present or f[TW_F_CP_DATA].type != TW_T_STRING
                or not f[TW_F_CP_OFFSETS].present or f[TW_F_CP_OFFSETS].type != TW_T_ARRAY
                or not c.format or not c.num_top or c.num_top_n < -1):
            return 0
        return _PLAIN_COMPACT
    if c.packed != TW_PV_OBJECT or not f[TW_F_CL_DATA].present or f[TW_F_CL_DATA].type != TW_T_STRING:
        return 0
    return c.dtype


cdef object _direct_read_stripped(_Scan scan, bytes stripped):
    """What the batch needs of the scanned body whose stripped copy is ``stripped``: its few
    small members walked in C (tw_plain_walk) or, where the walk does not read them, the
    copy read by the JSON reader."""
    cdef tw_plain_doc doc
    cdef tw_plain_choice room[_WALK_ROOM]
    cdef tw_plain_choice *walked = room
    cdef size_t i, cap = scan.doc.nchoices
    cdef int form, read
    cdef const char *text = PyBytes_AS_STRING(stripped)
    if not _PLAIN_HOST:
        return None
    if cap > _WALK_ROOM:
        walked = <tw_plain_choice *>tw_mem_alloc(cap * sizeof(tw_plain_choice))
        if walked == NULL:
            raise MemoryError()
    try:
        read = tw_plain_walk(text, <size_t>PyBytes_GET_SIZE(stripped), &_WALK_KEYS, &doc, walked, cap,
                             scan.path)
        if not read:
            try:
                document = scan.loads(stripped)
            except MalformedResponseError:
                return None
            return _direct_read_plain(scan, document)
        if doc.others or not doc.choices or doc.count == 0:
            return None
        forms, shapes, finishes = [], [], []
        for i in range(doc.count):
            form = _walked_form(scan, i, &walked[i])
            if form == 0:
                return None
            forms.append(form)
            shapes.append(_NO_SHAPE if not walked[i].shape else walked[i].shape_n if walked[i].shape_n >= 0
                          else _BAD_SHAPE)
            finishes.append(_finish_reason(text, &walked[i]))
        return _direct_choices(scan, forms, shapes, finishes, doc.prompt)
    finally:
        if walked != room:
            tw_mem_free(walked)


cdef object _direct_read_plain(_Scan scan, object document):
    """What the batch needs of the scanned body read as ``document``: _plain_generate's checks."""
    cdef size_t i, count
    cdef int form
    if type(document) is not dict:
        return None
    for key in _PLAIN_ROOT_ABSENT:
        if (<dict>document).get(key) is not None:
            return None
    choices = (<dict>document).get(_KEY_CHOICES)
    if type(choices) is not list or not choices or <size_t>len(<list>choices) > scan.doc.nchoices:
        return None
    count = len(<list>choices)
    forms, shapes, finishes = [], [], []
    for i in range(count):  # every choice's form first: nothing is decoded for a hand-over
        choice = (<list>choices)[i]
        form = _plain_form(scan, i, <dict>choice) if type(choice) is dict else 0
        if form == 0:
            return None
        forms.append(form)
        shapes.append(_NO_SHAPE if form == _PLAIN_COMPACT else _packed_shape(<dict>(<dict>choice)[_KEY_COMPLETION_LOGPROBS]))
        finishes.append((<dict>choice).get("finish_reason"))
    return _direct_choices(scan, forms, shapes, finishes, (<dict>document).get(_KEY_PROMPT_TOKEN_IDS) is not None)


cdef object _direct_choices(_Scan scan, list forms, list shapes, list finishes, bint prompt):
    """The _Direct of a body whose choices have the plain ``forms`` (their packed ``shapes``
    and ``finishes``) and, if ``prompt``, prompt ids: the plain path's kernels; None when one
    of them doubts it."""
    cdef size_t i
    cdef int form
    cdef const tw_value *f
    cdef _Direct d = _Direct.__new__(_Direct)
    d.prompt = None
    if prompt:
        d.prompt = _plain_ints(scan, &scan.doc.prompt_token_ids)
        if d.prompt is None:
            return None
    d.ids, d.logprobs, d.finish_reasons = [], [], finishes
    for i in range(len(forms)):
        f = scan.doc.choice[i].f
        ids = _plain_ints(scan, &f[TW_F_TOKEN_IDS])
        if ids is None:
            return None
        form = forms[i]
        if form == _PLAIN_COMPACT:
            logprobs = _plain_compact(scan, f, ids, len(ids))
        else:
            logprobs = _plain_packed(scan, f, shapes[i], ids, <size_t>form)
            if logprobs is not None and form == 8:  # rounded to float32, as collate casts them
                logprobs = logprobs.astype(np.float32)
        if logprobs is None:
            return None
        d.ids.append(ids)
        d.logprobs.append(logprobs)
    return d


def _direct_read(list bodies, fallback):
    """Each body read (a _Direct), or where the plain path does not take it
    ``fallback(i, body)`` (the rules' response, or the error)."""
    cdef Py_ssize_t i
    out = [None] * len(bodies)
    for i in range(len(bodies)):
        d = _direct_scan(bodies[i])
        out[i] = d if d is not None else fallback(i, bodies[i])
    return out
