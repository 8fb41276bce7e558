# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

cdef uint64_t _MAX_TOKEN_ID = 4294967295
cdef uint64_t _MAX_OFFSET = 9223372036854775807
# --- extraction: a choice's evidence, a loop over the wire table ---------------------------------

# The formats an extractor reads a choice as, and their names in the table.
cdef enum:
    _GENERATE, _OPENAI, _SGLANG

_FORMAT_NAMES = (_table.GENERATE, _table.OPENAI, _table.SGLANG)

# What a row's kind reads (tokenwire.base._table).
cdef enum:
    _K_IDS, _K_BLOB, _K_MASK, _K_RECORDS, _K_NUMBERS, _K_TOKENS, _K_ROWS, _K_VALUE

_KIND_CODES = {_table.IDS: _K_IDS, _table.BLOB: _K_BLOB, _table.MASK: _K_MASK,
               _table.RECORDS: _K_RECORDS, _table.NUMBERS: _K_NUMBERS, _table.TOKENS: _K_TOKENS,
               _table.ROWS: _K_ROWS, _table.VALUE: _K_VALUE}
_HIGHS = {None: 0, _table.TOKEN_ID: _MAX_TOKEN_ID, _table.OFFSET: _MAX_OFFSET}

# The wire keys the extraction and the plain path look up in a parsed choice or document,
# named by the table once, at import (C variables: nothing is looked up per call).
cdef str _KEY_CHOICES = _table.KEY.choices
cdef str _KEY_PROMPT_TOKEN_IDS = _table.KEY.prompt_token_ids
cdef str _KEY_TOKEN_IDS = _table.KEY.token_ids
cdef str _KEY_LOGPROBS = _table.KEY.logprobs
cdef str _KEY_COMPLETION_LOGPROBS = _table.KEY.completion_logprobs
cdef str _KEY_COMPACT_LOGPROBS = _table.KEY.compact_logprobs


def _table_rows(fmt, top):
    """(record index, kind code, evidence attribute, limit) of each row an extractor fills for
    a format, in table order (a choice's id fields come before the records read with them):
    the index is a choice row's TW_F_* id, a root row's place in tw_doc.root."""
    if top:
        ids = {f.name: i for i, f in enumerate(_table.ROOT_FIELDS)}
    else:
        ids = {f.name: i for f, i in zip(_table.CHOICE_FIELDS, _FIELD_IDS)}
    return tuple((ids[f.name], _KIND_CODES[f.kind], f.attr, _HIGHS[f.high])
                 for f in _extract.rows_of(fmt, top))


_ROWS = tuple(_table_rows(name, False) for name in _FORMAT_NAMES)
_TOP_ROWS = tuple(_table_rows(name, True) for name in _FORMAT_NAMES)


cdef object _records_read(_Scan scan, const tw_value *v, object c, object choice, object k, int fmt):
    """A RECORDS row's reading of the array ``v`` (see ``tokenwire.extract.python.read_field``)."""
    if fmt == _SGLANG:
        return _extract.Read(v.count, records=scan.triples(v))
    if fmt == _OPENAI:
        # The candidates do not depend on the ids (only the sampled pass reads them).
        top = scan.native(v, np.zeros(v.count, dtype=np.int64), True) if k is not None else None
        return _extract.Read(v.count, records=scan.records(v), top=top, span=(v.start, v.end))
    ids = c.token_ids
    entries = None
    if ids is not None and ids[2] is None and v.count == <size_t>len(ids[0]):
        entries = scan.native(v, None if c.by_position else ids[0],
                              k is not None and choice.get(_KEY_COMPACT_LOGPROBS) is None)
    return _extract.Read(v.count, entries=entries, span=(v.start, v.end))


cdef object _rows_read(_Scan scan, const tw_value *v, object k, int fmt):
    """A ROWS row's reading of the array ``v``: its length, and with a head its candidates."""
    rows = None
    if k is not None and fmt == _SGLANG:
        rows = scan.head_rows(v, False)[:2]
    elif k is not None:
        rows = scan.head_rows(v, True)
        if rows[2] is True:  # a key with an escape: the rows as the reference reads them
            rows = _extract.keyed_rows(_extract.load_keeping_repeats(scan.text(v)))
    return _extract.Read(v.count, rows=rows)


cdef object _field_read(_Scan scan, const tw_value *v, int kind, object high, object c, object choice,
                        object k, int fmt):
    """What a table row of kind ``kind`` reads in the span ``v`` the scan recorded."""
    if not v.present:
        return None
    if kind == _K_IDS:
        return scan.ints(v, high)
    if kind == _K_BLOB:
        return scan.blob(v) if v.type == TW_T_STRING else None
    if kind == _K_VALUE:
        return (v.start, v.end) if v.type == TW_T_OBJECT else None
    if v.type != TW_T_ARRAY:
        return None
    if kind == _K_MASK:
        return scan.nested(v)
    if kind == _K_TOKENS:
        return scan.token_strings(v)
    if kind == _K_NUMBERS:
        read, at = scan.numbers(v)
        return _extract.Read(v.count, numbers=_extract.Numbers(read, at, None if at is None else scan.element(v, at)),
                             span=(v.start, v.end))
    if kind == _K_ROWS:
        return _rows_read(scan, v, k, fmt)
    return _records_read(scan, v, c, choice, k, fmt)


cdef object _choice_evidence(_Scan scan, size_t index, object choice, object k, int fmt, bint by_position):
    """The compiled extractor for one choice (an SGLang item): every table row of the format,
    read from the spans the scan recorded (what the reference's ``extract_fields`` reads from
    the parsed document)."""
    cdef const tw_value *f = scan.doc.choice[index].f
    cdef const tw_value *v
    c = _extract.Evidence(index, _KERNELS, source=scan.source, by_position=by_position)
    for field, kind, attr, high in _ROWS[fmt]:
        setattr(c, attr, _field_read(scan, &f[<int>field], kind, high, c, choice, k, fmt))
    if fmt == _GENERATE:
        _blanked_as_sent(scan, f, c, choice, k)
    return c


# The fields the generate scan may blank inside a choice's "logprobs" and "completion_logprobs"
# (records read during the scan, arrays and strings blanked): (TW_F_* id, path under the key).
_BLANKED_UNDER = tuple(
    (key, tuple((_FIELD_IDS[i], f.path[1:]) for i, f in enumerate(_table.CHOICE_FIELDS)
                if f.path[0] == key and len(f.path) > 1 and _table.GENERATE in f.formats
                and (f.blank is not None or f.read == "records")))
    for key in (_KEY_LOGPROBS, _KEY_COMPLETION_LOGPROBS))


cdef object _with_at(object value, tuple path, object sent):
    """A copy of the object ``value`` with ``sent`` at ``path`` (objects copied on the way),
    or ``value`` itself when the path does not lead through objects."""
    inner = value.get(path[0]) if len(path) > 1 else None
    if len(path) > 1 and not isinstance(inner, dict):
        return value
    return {**value, path[0]: _with_at(inner, path[1:], sent) if len(path) > 1 else sent}


cdef void _blanked_as_sent(_Scan scan, const tw_value *f, object c, object choice, object k):
    """What stays in GenerateChoice.raw as sent although the scan blanked it in the parsed
    copy (an array's elements, a string's characters): ``logprobs`` beside compact (or packed,
    without a head) logprobs, and packed logprobs beside compact ones."""
    cdef const tw_value *v
    compact = choice.get(_KEY_COMPACT_LOGPROBS) is not None
    in_raw = (compact or (choice.get(_KEY_COMPLETION_LOGPROBS) is not None and k is None), compact)
    for (key, rows), kept in zip(_BLANKED_UNDER, in_raw):
        value = sent = choice.get(key)
        if not kept or not isinstance(value, dict):
            continue
        for field, path in rows:
            v = &f[<int>field]
            if v.present and (v.type == TW_T_ARRAY or v.type == TW_T_STRING):
                sent = _with_at(sent, path, scan.parsed(v))
        if sent is not value:
            c.sent[key] = sent


cdef object _top_evidence(_Scan scan, int fmt):
    """The evidence of the top level: the root rows of the format (the prompt's ids, the
    prompt's routing), read from the root records."""
    top = _extract.Evidence(None, _KERNELS, source=scan.source)
    for field, kind, attr, high in _TOP_ROWS[fmt]:
        setattr(top, attr, _field_read(scan, &scan.doc.root[<int>field], kind, high, top, None, None, fmt))
    return top


cdef object _choices_of(object document):
    """The choices list of a generate or OpenAI-compatible document, or None."""
    return document.get(_KEY_CHOICES) if isinstance(document, dict) else None


cdef object _evidence_records(_Scan scan, object choices, object k, int fmt, bint by_position=False):
    """The evidence of the top level and of each recorded choice of a scanned response, read
    now in one pass over the spans (a choice that is not an object: read from its value);
    ``by_position``: the generate document says its native records carry text
    (``records_by_position``)."""
    cdef size_t i
    top = _top_evidence(scan, fmt)
    read = []
    if isinstance(choices, list):
        for i in range(min(scan.doc.nchoices, len(choices))):
            if isinstance(choices[i], dict):
                read.append(_choice_evidence(scan, i, choices[i], k, fmt, by_position))
            else:
                read.append(_extract.LazyEvidence(i, choices[i], _FORMAT_NAMES[fmt], k, _KERNELS,
                                                  by_position=by_position))
    return top, read


def _lookup(top, read, fmt, k, by_position=False):
    """``evidence(index, value)`` for the rules: the records read; past them, evidence read
    from the choice's value when a rule asks (records end at the first choice that must
    fail, whose values are intact)."""

    def evidence(index, value):
        if index is None:
            return top
        if index < len(read):
            return read[index]
        return _extract.LazyEvidence(index, value, fmt, k, _KERNELS, by_position=by_position)

    return evidence


def extract_generate(raw, top_k=None):
    """The compiled extractor of a generate response: ``(document, top, choices)``, the parsed
    document with its big values blanked, the :class:`~tokenwire.extract.python.Evidence` of its
    top level and of each choice the scan recorded (the reference's ``extract_generate``
    reads the same from the parsed document)."""
    k = check_top_k(top_k)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        scan = _Scan()
        document = scan.document(raw)
        return (document, *_evidence_records(scan, _choices_of(document), k, _GENERATE,
                                             _extract.records_by_position(document)))
    finally:
        PyDataMem_SetHandler(previous)


def _record_values(values, kinds):
    """The Numbers of record values of the given TW_REC_V_* classes."""
    not_number = np.flatnonzero(kinds != TW_REC_V_NUMBER)
    if not len(not_number):
        return _extract.Numbers(values, None, None)
    first = int(not_number[0])
    return _extract.Numbers(values[:first], first, _KIND_EXAMPLES[kinds[first]])


cdef object _scan_openai(_Scan scan, object raw, object k, bint sglang):
    """Scan an OpenAI-compatible (or SGLang) response: its document and its evidence."""
    if sglang:
        document = scan.document(raw, _SGLANG_BLANK, False, True)
        choices = document if isinstance(document, list) else [document]
    else:
        document = scan.document(raw, _OPENAI_BLANK, True)
        choices = _choices_of(document)
    return (document, *_evidence_records(scan, choices, k, _SGLANG if sglang else _OPENAI))


def extract_openai(raw, top_k=None, sglang=False):
    """The compiled extractor of an OpenAI-compatible (or SGLang) response: ``(document, top,
    choices)`` as :func:`extract_generate` (the reference's ``extract_openai`` reads
    the same from the parsed document)."""
    k = check_top_k(top_k)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        return _scan_openai(_Scan(), raw, k, sglang)
    finally:
        PyDataMem_SetHandler(previous)
