# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.


# --- bodies straight into a batch: the plain path's choices written into the step's rows -----------
#
# tokenwire.parse_batch reads many bodies into one Batch. A body the plain path would take
# (_core_plain.pxi: token ids with packed logprobs or compact rows, nothing else of the wire
# table) is read by the plain path's own checks and kernels, one body at a time while its
# decoded bytes are in cache (_direct_generate): what the batch needs of it, each choice's ids
# and float32 logprobs (the packed values, or the compact rows' sampled values as the row
# rules find them) and the prompt ids, and nothing else: no GenerateResponse, no
# GenerateChoice, no `raw` or `payload` dict. parse_batch reads its bodies by the loop below
# (_DirectPart, without the GIL) and this reader only takes the bodies that loop leaves.
# Like the plain path it decides nothing: a body it doubts is handed back (None) and the
# caller parses it with the rules, which give the verdict and the message.


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


from libc.string cimport memcmp, memset


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


cdef int _walked_form(const tw_doc *doc, size_t index, const tw_plain_choice *c) noexcept nogil:
    """_plain_form's answer for a walked choice."""
    cdef const tw_value *f = doc.choice[index].f
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
            form = _walked_form(&scan.doc, i, &walked[i])
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


# --- many bodies in one loop without the GIL: their rows into arenas, then into the batch ---------
#
# _DirectPart reads a range of bodies (bytes) in C without the GIL: each body scanned, its
# stripped copy walked, every choice's ids and float32 logprobs written at the end of one
# arena (the logprobs at the ids' offsets), its prompt ids at the end of another: no numpy
# array, no Python object per body. It applies the checks of _direct_read_stripped with the
# same kernels, and a body they do not all pass (or another object than bytes, or a member the
# walk does not read) is listed as doubted, its arenas' ends put back: the caller reads it by
# _direct_generate or the rules. _DirectRows then puts every row in body order and writes the
# padded blocks (one allocation per array, one pass each).

ctypedef struct _drow:
    int64_t body, choice
    size_t off, n  # the row's ids and logprobs in the arenas
    size_t poff  # its prompt ids in the prompt arena
    int64_t pn  # how many (-1: no prompt)
    size_t foff, fn  # its finish_reason's bytes (fkind 3)
    int fkind  # 0: None, 1: "stop", 2: "length", 3: the bytes at foff


cdef uint64_t _DIRECT_BLANK = _GENERATE_BLANK


cdef inline bint _room(void **p, size_t *cap, size_t need, size_t item) noexcept nogil:
    """Grow the tw_mem block ``*p`` of ``*cap`` items to hold ``need``; False: out of memory."""
    cdef size_t grown
    cdef void *q
    if need <= cap[0]:
        return True
    grown = need if need > 2 * cap[0] else 2 * cap[0]
    if grown < 64:
        grown = 64
    if grown > (<size_t>-1) // (2 * item):
        return False
    q = tw_mem_realloc(p[0], grown * item)
    if q == NULL:
        return False
    p[0] = q
    cap[0] = grown
    return True


cdef inline bint _room_ahead(void **p, size_t *cap, size_t need, size_t item, size_t done,
                             size_t total) noexcept nogil:
    """_room for an arena that grows with the bodies read: ``done`` of the part's ``total``
    bytes are read (the body that needs the room among them), and a block that must grow is
    made large enough for every body at the rate so far, and an eighth more (bodies of one
    kind fill it without a copy; others grow it as _room does, and so does a block the
    estimate cannot have)."""
    cdef double ahead
    if need <= cap[0]:
        return True
    if done and total > done:
        ahead = <double>need * (<double>total / <double>done) * 1.125
        if ahead < <double>((<size_t>-1) // (4 * item)) and _room(p, cap, <size_t>ahead, item):
            return True
    return _room(p, cap, need, item)


cdef inline int _uints_into(const tw_doc *doc, const char *buf, const tw_value *v, uint64_t high,
                            int64_t *out, int path) noexcept nogil:
    """_Scan.ints into ``out`` (room for v.count): below 0 when an element is not an id."""
    cdef size_t err = 0
    if v.read:
        return tw_take_uints(doc, v, high, out, &err)
    if v.count:
        return tw_parse_uint_array(buf, v, high, out, &err, path)
    return 0


cdef class _DirectPart:
    """The rows of the bodies one thread reads (see above)."""
    cdef int64_t *ids
    cdef float *lps
    cdef size_t nids, cap_ids, cap_lps
    cdef int64_t *prompts
    cdef size_t nprompts, cap_prompts
    cdef char *finish
    cdef size_t nfinish, cap_finish
    cdef _drow *rows
    cdef size_t nrows, cap_rows
    cdef int64_t *doubted_at
    cdef size_t ndoubted, cap_doubted
    cdef char *strip
    cdef size_t cap_strip
    cdef tw_plain_choice *walked
    cdef size_t cap_walked
    cdef int64_t *offs
    cdef size_t cap_offs
    cdef size_t done, total  # the bytes of the bodies read so far (the one being read among them), of them all
    cdef tw_doc doc  # one scan's records at a time, its memory kept for the next body
    cdef bint used  # read once: rows made from a part point into its arenas

    def __cinit__(self):
        tw_doc_init(&self.doc)
        tw_rec_read_during_scan(&self.doc)

    def __dealloc__(self):
        tw_doc_free(&self.doc)
        tw_mem_free(self.ids)
        tw_mem_free(self.lps)
        tw_mem_free(self.prompts)
        tw_mem_free(self.finish)
        tw_mem_free(self.rows)
        tw_mem_free(self.doubted_at)
        tw_mem_free(self.strip)
        tw_mem_free(self.walked)
        tw_mem_free(self.offs)

    @property
    def doubted(self):
        """The bodies this part did not take, in order."""
        return [self.doubted_at[i] for i in range(self.ndoubted)]

    def read(self, list bodies, Py_ssize_t start, Py_ssize_t stop):
        """Read ``bodies[start:stop]`` (the loop without the GIL)."""
        cdef Py_ssize_t i, n = stop - start
        cdef const char **bufs
        cdef size_t *sizes
        cdef int rc = 1, path = _path
        cdef tuple held
        if not 0 <= start <= stop <= len(bodies):
            raise ValueError(f"bodies {start} to {stop} of a list of {len(bodies)}")
        if self.used:  # a second read could move the arenas rows already point into
            raise ValueError("a _DirectPart reads one range of bodies, once")
        self.used = True
        if n == 0:
            return
        held = tuple(bodies[start:stop])  # alive while the loop runs without the GIL
        bufs = <const char **>tw_mem_alloc(n * sizeof(char *))
        sizes = <size_t *>tw_mem_alloc(n * sizeof(size_t))
        try:
            if bufs == NULL or sizes == NULL:
                raise MemoryError()
            for i in range(n):
                body = held[i]
                if type(body) is bytes and _PLAIN_HOST:
                    bufs[i] = PyBytes_AS_STRING(body)
                    sizes[i] = <size_t>PyBytes_GET_SIZE(body)
                    self.total += sizes[i]
                else:  # read from a snapshot by _direct_generate
                    bufs[i] = NULL
            with nogil:
                for i in range(n):
                    if bufs[i] != NULL:
                        self.done += sizes[i]
                    rc = self._take(bufs[i], sizes[i], start + i, path) if bufs[i] != NULL else 0
                    if rc == 0:
                        if not _room(<void **>&self.doubted_at, &self.cap_doubted, self.ndoubted + 1, sizeof(int64_t)):
                            rc = -1
                        else:
                            self.doubted_at[self.ndoubted] = start + i
                            self.ndoubted += 1
                    if rc < 0:
                        break
            if rc < 0:
                raise MemoryError()
        finally:
            tw_mem_free(bufs)
            tw_mem_free(sizes)

    cdef int _take(self, const char *buf, size_t n, int64_t body, int path) noexcept nogil:
        """Body ``body`` read into the arenas: 1, or 0 when it is doubted, -1 out of memory."""
        cdef int rc
        cdef size_t nids = self.nids, nprompts = self.nprompts, nfinish = self.nfinish, nrows = self.nrows
        self.doc.path = path
        self.doc.decode = 1
        self.doc.b64_path = path
        self.doc.openai = 0
        self.doc.sglang = 0
        self.doc.blank_fields = _DIRECT_BLANK
        rc = tw_scan(buf, n, &self.doc)
        if rc == TW_OK:
            rc = self._take_scanned(buf, n, body, &self.doc, path)
        else:
            rc = -1 if rc == TW_ERR_NOMEM else 0
        if rc != 1:  # nothing of a doubted body is kept
            self.nids, self.nprompts, self.nfinish, self.nrows = nids, nprompts, nfinish, nrows
        return rc

    cdef int _take_scanned(self, const char *buf, size_t n, int64_t body, tw_doc *doc, int path) noexcept nogil:
        cdef tw_plain_doc pdoc
        cdef size_t i, size = tw_stripped_size(doc, n), cap = doc.nchoices
        cdef int form, rc
        cdef const tw_value *v
        cdef const tw_plain_choice *c
        cdef size_t poff = self.nprompts
        cdef int64_t pn = -1
        if not _room(<void **>&self.strip, &self.cap_strip, size + 1, 1):
            return -1
        tw_strip(buf, n, doc, self.strip)
        if not _room(<void **>&self.walked, &self.cap_walked, cap + 1, sizeof(tw_plain_choice)):
            return -1
        if not tw_plain_walk(self.strip, size, &_WALK_KEYS, &pdoc, self.walked, cap, path):
            return 0  # a member in a form the walk does not read: _direct_generate reads it
        if pdoc.others or not pdoc.choices or pdoc.count == 0:
            return 0
        for i in range(pdoc.count):  # every choice's form first: nothing is decoded for a hand-over
            if _walked_form(doc, i, &self.walked[i]) == 0:
                return 0
        if pdoc.prompt:
            v = &doc.prompt_token_ids
            if not v.present or v.type != TW_T_ARRAY:
                return 0
            if not _room_ahead(<void **>&self.prompts, &self.cap_prompts, self.nprompts + v.count, sizeof(int64_t),
                               self.done, self.total):
                return -1
            if _uints_into(doc, buf, v, _MAX_TOKEN_ID, self.prompts + self.nprompts, path) < 0:
                return 0
            self.nprompts += v.count
            pn = <int64_t>v.count
        for i in range(pdoc.count):
            c = &self.walked[i]
            rc = self._choice(buf, body, doc, i, c, _walked_form(doc, i, c), path)
            if rc != 1:
                return rc
            self.rows[self.nrows - 1].poff = poff
            self.rows[self.nrows - 1].pn = pn
        return 1

    cdef int _choice(self, const char *buf, int64_t body, tw_doc *doc, size_t index, const tw_plain_choice *c,
                     int form, int path) noexcept nogil:
        """Choice ``index`` (its plain ``form``) appended as a row: 1, 0 doubted, -1 out of memory."""
        cdef const tw_value *f = doc.choice[index].f
        cdef const tw_value *v = &f[TW_F_TOKEN_IDS]
        cdef size_t count = v.count, off = self.nids, size = 0, k, fn
        cdef int64_t shape
        cdef uint8_t *data = NULL
        cdef bint ok, nomem = False
        cdef const char *p
        cdef _drow *row
        if (not _room_ahead(<void **>&self.ids, &self.cap_ids, off + count, sizeof(int64_t), self.done, self.total)
                or not _room_ahead(<void **>&self.lps, &self.cap_lps, off + count, sizeof(float), self.done,
                                   self.total)):
            return -1
        if _uints_into(doc, buf, v, _MAX_TOKEN_ID, self.ids + off, path) < 0:
            return 0
        if form == _PLAIN_COMPACT:  # _plain_compact's checks
            v = &f[TW_F_CP_OFFSETS]
            if v.type != TW_T_ARRAY or v.count != count + 1:
                return 0
            if not _room(<void **>&self.offs, &self.cap_offs, count + 1, sizeof(int64_t)):
                return -1
            if (_uints_into(doc, buf, v, _MAX_OFFSET, self.offs, path) < 0
                    or tw_offsets_not_rising(self.offs, count + 1) >= 0):
                return 0
            data = tw_take_blob(doc, &f[TW_F_CP_DATA], &size)
            if data == NULL:
                data = _decoded_c(buf, &f[TW_F_CP_DATA], path, &size, &nomem)
            if data == NULL:
                return -1 if nomem else 0
            ok = size % 8 == 0 and size // 8 == <size_t>self.offs[count]
            if ok and count:
                ok = _plain_rows(data, self.offs, count, <size_t>self.offs[count], self.ids + off, self.lps + off) < 0
        else:  # _plain_packed's checks: form is the item size
            shape = _NO_SHAPE if not c.shape else c.shape_n if c.shape_n >= 0 else _BAD_SHAPE
            if shape != _NO_SHAPE and shape != <int64_t>count:
                return 0
            data = tw_take_blob(doc, &f[TW_F_CL_DATA], &size)
            if data == NULL:
                data = _decoded_c(buf, &f[TW_F_CL_DATA], path, &size, &nomem)
            if data == NULL:
                return -1 if nomem else 0
            ok = size == count * <size_t>form
            if ok and count:
                ok = _packed_bad(data, count, <size_t>form) < 0
            if ok and form == 4 and count:  # no arena yet for a choice of no tokens
                memcpy(self.lps + off, data, count * 4)
            elif ok:  # rounded to float32, as collate casts them
                for k in range(count):
                    self.lps[off + k] = <float>(<const double *>data)[k]
        tw_mem_free(data)
        if not ok:
            return 0
        if not _room(<void **>&self.rows, &self.cap_rows, self.nrows + 1, sizeof(_drow)):
            return -1
        row = &self.rows[self.nrows]
        row.body, row.choice, row.off, row.n = body, <int64_t>index, off, count
        row.fkind, row.foff, row.fn = 0, 0, 0
        if c.finish == TW_PV_STRING:  # _finish_reason's answer, made once the loop is done
            p = self.strip + c.finish_start
            fn = c.finish_end - c.finish_start
            if fn == 4 and memcmp(p, b"stop", 4) == 0:
                row.fkind = 1
            elif fn == 6 and memcmp(p, b"length", 6) == 0:
                row.fkind = 2
            else:
                if not _room(<void **>&self.finish, &self.cap_finish, self.nfinish + fn + 1, 1):
                    return -1
                memcpy(self.finish + self.nfinish, p, fn)
                row.fkind, row.foff, row.fn = 3, self.nfinish, fn
                self.nfinish += fn
        self.nids += count
        self.nrows += 1
        return 1

    def directs(self):
        """Each body this part took as a _Direct (for a batch that is collated): {body: _Direct}."""
        cdef size_t r
        cdef _drow *row
        cdef _Direct d
        out = {}
        for r in range(self.nrows):
            row = &self.rows[r]
            d = out.get(row.body)
            if d is None:
                d = _Direct.__new__(_Direct)
                d.ids, d.logprobs, d.finish_reasons = [], [], []
                d.prompt = None if row.pn < 0 else _copied(self.prompts + row.poff, row.pn * 8, cnp.NPY_INT64)
                out[row.body] = d
            d.ids.append(_copied(self.ids + row.off, row.n * 8, cnp.NPY_INT64))
            d.logprobs.append(_copied(self.lps + row.off, row.n * 4, cnp.NPY_FLOAT32))
            d.finish_reasons.append(self._finish(row))
        return out

    cdef object _finish(self, const _drow *row):
        if row.fkind == 0:
            return None
        if row.fkind == 1:
            return "stop"
        if row.fkind == 2:
            return "length"
        return PyUnicode_DecodeUTF8(self.finish + row.foff, <Py_ssize_t>row.fn, NULL)


cdef object _copied(const void *src, size_t nbytes, int typenum):
    """A new 1-d array of ``typenum`` holding a copy of ``nbytes`` at ``src``."""
    cdef cnp.npy_intp dims[1]
    dims[0] = <cnp.npy_intp>(nbytes // (8 if typenum == cnp.NPY_INT64 else 4))
    out = cnp.PyArray_EMPTY(1, dims, typenum, 0)
    if nbytes:
        memcpy(cnp.PyArray_DATA(out), src, nbytes)
    return out


ctypedef struct _dsrc:
    const int64_t *ids
    const float *lps
    size_t n
    const int64_t *prompt
    int64_t pn


cdef class _DirectRows:
    """Every row of the parts and of the bodies read one by one (``late``: {body: _Direct}),
    in body order, and the padded blocks written from them."""
    cdef _dsrc *src
    cdef readonly size_t count
    cdef readonly object lengths, prompt_lengths, prompt_present, response, choice
    cdef readonly list finish_reasons
    cdef readonly bint any_prompt
    cdef list keep  # the parts and _Direct arrays src points into

    def __dealloc__(self):
        tw_mem_free(self.src)

    def __init__(self, list parts, dict late):
        cdef _DirectPart part
        cdef _Direct d
        cdef size_t r, total = 0, at = 0, j
        cdef _drow *row
        cdef _dsrc *s
        cdef int64_t *body
        cdef int64_t *choice
        cdef int64_t *length
        cdef int64_t *plength
        cdef cnp.npy_bool *present
        cdef cnp.npy_intp dims[1]
        self.keep = list(parts)
        for part in parts:
            total += part.nrows
        for d in late.values():
            total += len(d.ids)
        self.count = total
        self.src = <_dsrc *>tw_mem_alloc((total + 1) * sizeof(_dsrc))
        if self.src == NULL:
            raise MemoryError()
        dims[0] = <cnp.npy_intp>total
        self.response = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        self.choice = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        self.lengths = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        self.prompt_lengths = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        self.prompt_present = cnp.PyArray_EMPTY(1, dims, cnp.NPY_BOOL, 0)
        body = <int64_t *>cnp.PyArray_DATA(self.response)
        choice = <int64_t *>cnp.PyArray_DATA(self.choice)
        length = <int64_t *>cnp.PyArray_DATA(self.lengths)
        plength = <int64_t *>cnp.PyArray_DATA(self.prompt_lengths)
        present = <cnp.npy_bool *>cnp.PyArray_DATA(self.prompt_present)
        finishes = []
        for part in parts:
            for r in range(part.nrows):
                row = &part.rows[r]
                s = &self.src[at]
                s.ids, s.lps, s.n = part.ids + row.off, part.lps + row.off, row.n
                s.prompt, s.pn = part.prompts + row.poff, row.pn
                body[at], choice[at] = row.body, row.choice
                finishes.append(part._finish(row))
                at += 1
        for i, d in late.items():
            prompt = d.prompt
            if prompt is not None:
                self.keep.append(prompt)
            for j in range(len(d.ids)):
                ids, lps = d.ids[j], d.logprobs[j]
                self.keep += (ids, lps)
                s = &self.src[at]
                s.ids, s.lps, s.n = _i64(ids), <const float *>cnp.PyArray_DATA(lps), len(ids)
                s.prompt, s.pn = NULL, -1
                if prompt is not None:
                    s.prompt, s.pn = _i64(prompt), len(prompt)
                body[at], choice[at] = i, j
                finishes.append(d.finish_reasons[j])
                at += 1
        if late:  # the late rows among the others, in body order
            order = np.argsort(self.response, kind="stable")
            self._reorder(order)
            self.response, self.choice = self.response[order], self.choice[order]
            finishes = [finishes[k] for k in order.tolist()]
            body = <int64_t *>cnp.PyArray_DATA(self.response)
        self.finish_reasons = finishes
        self.any_prompt = False
        for r in range(total):
            length[r] = <int64_t>self.src[r].n
            present[r] = self.src[r].pn >= 0
            plength[r] = self.src[r].pn if self.src[r].pn >= 0 else 0
            if present[r]:
                self.any_prompt = True

    cdef _reorder(self, object order):
        cdef size_t r
        cdef const int64_t *o = _i64(order)
        cdef _dsrc *moved = <_dsrc *>tw_mem_alloc((self.count + 1) * sizeof(_dsrc))
        if moved == NULL:
            raise MemoryError()
        for r in range(self.count):
            moved[r] = self.src[o[r]]
        tw_mem_free(self.src)
        self.src = moved

    def fill(self, Py_ssize_t start, Py_ssize_t stop, ids, lps, mask, prompts, int64_t pad_id):
        """Rows ``start`` to ``stop`` of the padded blocks (``prompts`` None: no prompt ids);
        False when a row does not fit its block (nothing is written past a block)."""
        cdef size_t r, k, width, pwidth = 0
        cdef int64_t *oi
        cdef float *ol
        cdef uint8_t *om
        cdef int64_t *op = NULL
        cdef const _dsrc *s
        cdef size_t n, pn
        cdef bint fits = True
        shape = (self.count, ids.shape[1] if type(ids) is np.ndarray and ids.ndim == 2 else -1)
        for block, dtype in ((ids, np.int64), (lps, np.float32), (mask, np.bool_)):
            if (type(block) is not np.ndarray or block.shape != shape or block.dtype != dtype
                    or not block.flags.c_contiguous or not block.flags.writeable):
                raise ValueError("the padded blocks do not have the rows' shape")
        if prompts is not None:
            if (type(prompts) is not np.ndarray or prompts.ndim != 2 or prompts.shape[0] != self.count
                    or prompts.dtype != np.int64 or not prompts.flags.c_contiguous or not prompts.flags.writeable):
                raise ValueError("the padded prompt block does not have the rows' shape")
            pwidth = prompts.shape[1]
            op = <int64_t *>cnp.PyArray_DATA(prompts)
        if not 0 <= start <= stop <= <Py_ssize_t>self.count:
            raise ValueError("rows out of range")
        width = shape[1]
        oi = <int64_t *>cnp.PyArray_DATA(ids)
        ol = <float *>cnp.PyArray_DATA(lps)
        om = <uint8_t *>cnp.PyArray_DATA(mask)
        with nogil:
            for r in range(<size_t>start, <size_t>stop):
                s = &self.src[r]
                n = s.n
                pn = <size_t>s.pn if s.pn >= 0 else 0
                if n > width or (op != NULL and pn > pwidth):
                    fits = False
                    break
                if n:
                    memcpy(oi + r * width, s.ids, n * 8)
                    memcpy(ol + r * width, s.lps, n * 4)
                memset(om + r * width, 1, n)
                memset(om + r * width + n, 0, width - n)
                memset(ol + r * width + n, 0, (width - n) * 4)
                for k in range(n, width):
                    oi[r * width + k] = pad_id
                if op != NULL:
                    if pn:
                        memcpy(op + r * pwidth, s.prompt, pn * 8)
                    for k in range(pn, pwidth):
                        op[r * pwidth + k] = pad_id
        return fits
