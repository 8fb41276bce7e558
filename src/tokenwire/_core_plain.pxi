# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- the plain path: responses without a head, without the rules' Python -------------------------
#
# A choice whose only evidence is its token ids and either packed logprobs or compact rows
# (no head asked for, no mask), each of them valid, is built here straight from the scan.
# This path decides nothing: it takes a choice only when every rule of rules/generate.py
# that could apply passes, and hands anything else, valid or not, to the rules, which then
# give the same result or say what is wrong (tests/test_plain_path.py holds the two to the
# same results).

# The allow-list: the wire-table fields of a generate choice this path reads. A choice that
# holds any other table field (not null) goes to the rules, each such field bringing rules
# this path lacks: _PLAIN_ABSENT is the rest of the table, so a field added to the table is
# sent to the rules until this path learns it. (For compact rows, the packed logprobs go to
# the rules too: they keep them in GenerateChoice.raw.) Keys outside the table are the
# choice's raw fields, under either path.
_PLAIN_TAKES = (_KEY_TOKEN_IDS, _KEY_COMPLETION_LOGPROBS, _KEY_COMPACT_LOGPROBS)
_PLAIN_ABSENT = tuple(sorted(_table.top_keys(_table.CHOICE, _table.GENERATE) - set(_PLAIN_TAKES)))
# The same at the top level: a document with any other root field of the table goes to the rules.
_PLAIN_ROOT_ABSENT = tuple(sorted(_table.top_keys(_table.ROOT, _table.GENERATE) - {_KEY_PROMPT_TOKEN_IDS, _KEY_CHOICES}))
# GenerateChoice.raw: the choice without these (rules/generate.py's consumed fields).
_PLAIN_CONSUMED = _generate._CONSUMED + (_KEY_COMPLETION_LOGPROBS,)
_PLAIN_COMPACT_CONSUMED = _generate._CONSUMED + (_KEY_COMPACT_LOGPROBS,)
# _plain_form's answer for compact rows (packed logprobs: their item size, 4 or 8).
DEF _PLAIN_COMPACT = 1
_GenerateChoice = _generate.GenerateChoice
_GenerateResponse = _generate.GenerateResponse


cdef extern from *:
    """
    /* An instance of cls (a dataclass whose __new__ is object's and whose __init__ only
       sets its fields) with the dict d, taken over, as its attributes: what cls(**d) makes,
       without running the dataclass's __init__ one attribute at a time. Made by the type's
       tp_alloc, as object.__new__ makes it but for the attribute storage: object.__new__
       also sets up the instance's own attribute values (Python 3.11 and 3.12: an array from
       the allocator), which setting d first turns into a dict of their own and then drops
       (an allocation, a dict and their frees an object, for nothing). */
    static PyObject *tw_instance_of(PyObject *cls, PyObject *d, PyObject *dict_name) {
        PyTypeObject *tp = (PyTypeObject *)cls;
        PyObject *obj = tp->tp_alloc(tp, 0);
        if (obj == NULL) return NULL;
#if PY_VERSION_HEX >= 0x030D0000
        /* Python 3.13 keeps such an instance's attributes in values inline in the object,
           which PyObject_GenericSetDict leaves in force (3.13.0: every attribute then reads
           as if d were not there); the type's __dict__ setter (dict_name: the string
           "__dict__", made once when the module is imported, so that no two threads of a
           free-threaded interpreter make it at once) replaces them. */
        if (PyObject_SetAttr(obj, dict_name, d) < 0) {
#else
        (void)dict_name;
        if (PyObject_GenericSetDict(obj, d, NULL) < 0) {
#endif
            Py_DECREF(obj);
            return NULL;
        }
        return obj;
    }
    """
    object tw_instance_of(object cls, dict d, object dict_name)


# tw_instance_of's attribute name on Python 3.13+ (made here, at import, by one thread).
cdef object _DICT_NAME = sys.intern("__dict__")


def _instance_template(cls, names):
    """Every field of the dataclass ``cls`` with its default, in the fields' order (the order
    its __init__ sets them): the plain path copies it and sets ``names``, the fields it fills.
    Checked once: a field without a plain default that the path does not fill, or an
    __init__/__post_init__ of the class's own beyond the dataclass's, fails the import
    instead of building a different object."""
    template = {}
    for f in _dataclass_fields(cls):
        if f.name in names:
            template[f.name] = None
        elif f.default is _dataclass_MISSING or f.default_factory is not _dataclass_MISSING:
            raise ImportError(f"{cls.__name__}.{f.name} has no plain default: update _core_plain.pxi")
        else:
            template[f.name] = f.default
    if (hasattr(cls, "__post_init__") or cls.__new__ is not object.__new__ or cls.__setattr__ is not object.__setattr__
            or "__slots__" in cls.__dict__ or set(names) - set(template)):
        raise ImportError(f"{cls.__name__} is no longer a plain dataclass of {names}: update _core_plain.pxi")
    return template


# The plain path builds its results from these (a copy each, the fields it fills set): about
# 600 instructions less per object than the dataclass's __init__ with its 19 parameters.
cdef dict _PLAIN_CHOICE = _instance_template(_GenerateChoice, (
    "index", "completion_ids", "completion_logprobs", "finish_reason", "raw"))
cdef dict _PLAIN_RESPONSE = _instance_template(_GenerateResponse, (
    "choices", "request_id", "usage", "prompt_token_ids", "payload", "format"))
_MISSING = object()
# The packed values are read as the host's floats, which are the wire's little-endian ones.
cdef bint _PLAIN_HOST = sys.byteorder == "little"


cdef object _plain_ints(_Scan scan, const tw_value *v):
    """The ids recorded at ``v`` as an int64 array, or None unless every one is a token id."""
    cdef size_t bad = 0
    if not v.present or v.type != TW_T_ARRAY:
        return None
    got = scan.int_array(v, _MAX_TOKEN_ID, &bad)
    return got if bad == <size_t>-1 else None


cdef uint8_t *_plain_blob(_Scan scan, const tw_value *v, size_t *size) except? NULL:
    """The bytes of the base64 string ``v`` (decoded by the scan, or now) in memory from
    tw_mem that the caller owns, or NULL when they are not canonical base64."""
    cdef uint8_t *data = tw_take_blob(&scan.doc, v, size)
    return data if data != NULL else _decoded(scan.buf, v, scan.path, size)


cdef inline ptrdiff_t _packed_bad(const uint8_t *data, size_t n, size_t itemsize) noexcept nogil:
    if itemsize == 4:
        return tw_packed_f32_bad(<const float *>data, n)
    return tw_packed_f64_bad(<const double *>data, n)


cdef int _plain_form(_Scan scan, size_t index, dict choice) except -2:
    """What choice ``index`` holds when it has a plain form, recorded by the scan: the item
    size of its packed logprobs (of a known dtype), _PLAIN_COMPACT for compact rows of the
    known format; else 0. What is checked before anything is decoded."""
    cdef const tw_value *f = scan.doc.choice[index].f
    for key in _PLAIN_ABSENT:
        if choice.get(key) is not None:
            return 0
    if not f[TW_F_TOKEN_IDS].present or f[TW_F_TOKEN_IDS].type != TW_T_ARRAY:
        return 0
    compact = choice.get(_KEY_COMPACT_LOGPROBS)
    if compact is not None:
        if (type(compact) is not dict or choice.get(_KEY_COMPLETION_LOGPROBS) is not None
                or not f[TW_F_CP_DATA].present or f[TW_F_CP_DATA].type != TW_T_STRING
                or not f[TW_F_CP_OFFSETS].present or f[TW_F_CP_OFFSETS].type != TW_T_ARRAY):
            return 0
        name = (<dict>compact).get("format")
        num_top = (<dict>compact).get("num_top_logprobs")
        if (type(name) is not str or name != COMPACT_FORMAT or type(num_top) is not int
                or num_top < -1):
            return 0
        return _PLAIN_COMPACT
    packed = choice.get(_KEY_COMPLETION_LOGPROBS)
    if type(packed) is not dict or not f[TW_F_CL_DATA].present or f[TW_F_CL_DATA].type != TW_T_STRING:
        return 0
    name = (<dict>packed).get("dtype")
    if type(name) is not str:
        return 0
    return 4 if name == "float32" else 8 if name == "float64" else 0


cdef dict _plain_choice(_Scan scan, size_t index, dict choice, int form):
    """The attributes of choice ``index``'s GenerateChoice (of the plain ``form``,
    _plain_form's answer) when it is valid, else None; its ``raw`` is set by
    _plain_finish."""
    cdef const tw_value *f = scan.doc.choice[index].f
    ids = _plain_ints(scan, &f[TW_F_TOKEN_IDS])
    if ids is None:
        return None
    if form == _PLAIN_COMPACT:
        logprobs = _plain_compact(scan, f, ids, len(ids))
    else:
        shape = _packed_shape(<dict>choice[_KEY_COMPLETION_LOGPROBS])
        logprobs = _plain_packed(scan, f, shape, ids, <size_t>form)
    if logprobs is None:
        return None
    d = _PLAIN_CHOICE.copy()
    d["index"] = index
    d["completion_ids"] = ids
    d["completion_logprobs"] = logprobs
    d["finish_reason"] = choice.get("finish_reason")
    return d


cdef object _plain_finish(dict d, dict choice, int form):
    """The GenerateChoice of the attributes ``d`` (_plain_choice's) of ``choice``, which
    becomes its ``raw``: the document's own dict, its consumed fields taken out (the document
    is this parse's alone, and no longer handed to the rules once every choice is taken)."""
    for key in (_PLAIN_COMPACT_CONSUMED if form == _PLAIN_COMPACT else _PLAIN_CONSUMED):
        choice.pop(key, None)
    d["raw"] = choice
    return tw_instance_of(_GenerateChoice, d, _DICT_NAME)


DEF _NO_SHAPE = -1  # _packed_shape: the packed logprobs have no shape
DEF _BAD_SHAPE = -2  # ... a shape that is not a list of one integer (or one no length equals)


cdef int64_t _packed_shape(dict packed) except -3:
    """The one length of the packed logprobs' shape, _NO_SHAPE or _BAD_SHAPE."""
    shape = packed.get("shape", _MISSING)
    if shape is _MISSING:
        return _NO_SHAPE
    if type(shape) is list and len(<list>shape) == 1 and type((<list>shape)[0]) is int:
        if 0 <= (<list>shape)[0] < 2**62:
            return (<list>shape)[0]
    return _BAD_SHAPE


cdef object _plain_packed(_Scan scan, const tw_value *f, int64_t shape, object ids, size_t itemsize):
    """The packed logprobs (``itemsize`` bytes each) of a choice with token ids ``ids`` and
    the packed ``shape`` (_packed_shape's answer) when every rule of rules/generate.py's
    parse_packed_logprobs passes, else None."""
    cdef size_t size = 0, n = len(ids)
    cdef uint8_t *data
    cdef ptrdiff_t bad = -1
    if shape != _NO_SHAPE and shape != <int64_t>n:
        return None
    data = _plain_blob(scan, &f[TW_F_CL_DATA], &size)
    if data == NULL:
        return None
    logprobs = _adopt_typed(data, size // itemsize, cnp.NPY_FLOAT32 if itemsize == 4 else cnp.NPY_FLOAT64)
    if size != n * itemsize:
        return None
    if n and size < _NOGIL_MIN:
        bad = _packed_bad(data, n, itemsize)
    elif n:
        with nogil:
            bad = _packed_bad(data, n, itemsize)
    return None if bad >= 0 else logprobs


cdef inline ptrdiff_t _plain_rows(const uint8_t *data, const int64_t *offs, size_t n, size_t count,
                                  const int64_t *sampled, float *out) noexcept nogil:
    """-1 when the compact rows whose ids and values are ``data`` keep the values rule and the
    rows' rules, else a bad row (the rules say which is the first, and why)."""
    return tw_compact_rows_valid(<const uint32_t *>data, <const float *>(data + count * 4), offs, n, sampled, out,
                                 _path)


cdef object _plain_compact(_Scan scan, const tw_value *f, object ids, size_t n):
    """The sampled logprobs of the compact rows of a choice with ``n`` token ids when every
    rule of rules/generate.py's parse_compact_logprobs without a head passes, else None."""
    cdef size_t size = 0, count
    cdef uint8_t *data
    cdef const int64_t *offs
    cdef const int64_t *sampled_ids
    cdef float *out
    cdef ptrdiff_t bad = -1
    got = scan.ints(&f[TW_F_CP_OFFSETS], _MAX_OFFSET)
    if got is None or got[2] is not None or <size_t>got[1] != n + 1:
        return None
    offs = <const int64_t *>cnp.PyArray_DATA(got[0])
    if tw_offsets_not_rising(offs, n + 1) >= 0:
        return None
    count = <size_t>offs[n]
    data = _plain_blob(scan, &f[TW_F_CP_DATA], &size)
    if data == NULL:
        return None
    blob = _adopt(data, size)  # freed with it
    if size % 8 or size // 8 != count:
        return None
    sampled = np.empty(n, dtype=np.float32)
    out = <float *>cnp.PyArray_DATA(sampled)
    sampled_ids = _i64(ids)
    if n == 0:  # no rows (the offsets are [0])
        pass
    elif count * 8 < _NOGIL_MIN:
        bad = _plain_rows(data, offs, n, count, sampled_ids, out)
    else:
        with nogil:
            bad = _plain_rows(data, offs, n, count, sampled_ids, out)
    return None if bad >= 0 else sampled


cdef object _plain_generate(_Scan scan, object document):
    """The GenerateResponse of a document whose choices all have the plain form and are
    valid, and whose prompt ids (if any) are valid; else None."""
    cdef size_t i, count
    cdef int form
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
    prompt = (<dict>document).get(_KEY_PROMPT_TOKEN_IDS)
    if prompt is not None:
        prompt = _plain_ints(scan, &scan.doc.prompt_token_ids)
        if prompt is None:
            return None
    parsed = []
    for i in range(count):
        got = _plain_choice(scan, i, <dict>(<list>choices)[i], forms[i])
        if got is None:
            return None
        parsed.append(got)
    # Every choice is taken: from here on the document's dicts become the results' raw
    # fields and payload in place (no copies; nothing below fails but for memory).
    for i in range(count):
        parsed[i] = _plain_finish(<dict>parsed[i], <dict>(<list>choices)[i], forms[i])
    d = _PLAIN_RESPONSE.copy()  # no teacher scores, no head
    d["choices"] = parsed
    d["request_id"] = (<dict>document).get("request_id")
    d["usage"] = (<dict>document).get("usage")
    d["prompt_token_ids"] = prompt
    (<dict>document).pop(_KEY_CHOICES, None)
    (<dict>document).pop(_KEY_PROMPT_TOKEN_IDS, None)
    d["payload"] = document
    d["format"] = "generate"
    return tw_instance_of(_GenerateResponse, d, _DICT_NAME)


def _plain_generate_response(raw):
    """What the plain path alone makes of ``raw``: its GenerateResponse, or None when it hands
    the response to the rules (for tests)."""
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        scan = _Scan()
        return _plain_generate(scan, scan.document(raw))
    finally:
        PyDataMem_SetHandler(previous)
