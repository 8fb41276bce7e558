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


cdef object _direct_scan(object raw):
    cdef _Scan scan = _Scan()
    try:
        document = scan.document(raw)
    except MalformedResponseError:
        return None
    if scan.size < _SMALL_BODY:
        return _direct_read_plain(scan, document)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        return _direct_read_plain(scan, document)
    finally:
        PyDataMem_SetHandler(previous)


cdef object _direct_read_plain(_Scan scan, object document):
    """_plain_generate's checks and kernels, keeping only the arrays."""
    cdef size_t i, count
    cdef int form
    cdef const tw_value *f
    if not _PLAIN_HOST or type(document) is not dict:
        return None
    for key in _PLAIN_ROOT_ABSENT:
        if (<dict>document).get(key) is not None:
            return None
    choices = (<dict>document).get(_KEY_CHOICES)
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
    cdef _Direct d = _Direct.__new__(_Direct)
    d.prompt = None
    if (<dict>document).get(_KEY_PROMPT_TOKEN_IDS) is not None:
        d.prompt = _plain_ints(scan, &scan.doc.prompt_token_ids)
        if d.prompt is None:
            return None
    d.ids, d.logprobs, d.finish_reasons = [], [], []
    for i in range(count):
        choice = (<list>choices)[i]
        f = scan.doc.choice[i].f
        ids = _plain_ints(scan, &f[TW_F_TOKEN_IDS])
        if ids is None:
            return None
        form = forms[i]
        if form == _PLAIN_COMPACT:
            logprobs = _plain_compact(scan, f, ids, len(ids))
        else:
            logprobs = _plain_packed(scan, f, <dict>(<dict>choice)[_KEY_COMPLETION_LOGPROBS], ids, <size_t>form)
            if logprobs is not None and form == 8:  # rounded to float32, as collate casts them
                logprobs = logprobs.astype(np.float32)
        if logprobs is None:
            return None
        d.ids.append(ids)
        d.logprobs.append(logprobs)
        d.finish_reasons.append((<dict>choice).get("finish_reason"))
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
