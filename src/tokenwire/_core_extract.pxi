# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- extraction: the evidence of every choice, read from the scan's records ----------------------


cdef uint64_t _MAX_TOKEN_ID = 4294967295
cdef uint64_t _MAX_OFFSET = 9223372036854775807
# Base64 strings of a generate choice, by path.
_GENERATE_BLOBS = (
    ("compact_logprobs.data", TW_F_CP_DATA),
    ("completion_logprobs.data", TW_F_CL_DATA),
    ("sampling_mask.ids.data", TW_F_SM_IDS_DATA),
    ("sampling_mask.counts.data", TW_F_SM_COUNTS_DATA),
    ("kept_tokens.ids", TW_F_KT_IDS),
    ("kept_tokens.counts", TW_F_KT_COUNTS),
    ("routed_experts.data", TW_F_RE_DATA),
    ("routed_experts", TW_F_ROUTED),
)


cdef object _choice_evidence(_Scan scan, size_t index, object choice, object k):
    """The compiled extractor for one generate choice: every value its rules read, from the
    spans the scan recorded (what the reference's ``extract_choice`` reads from the parsed
    document)."""
    cdef const tw_value *f = scan.doc.choice[index].f
    cdef const tw_value *v
    cdef int field
    values = {}
    v = &f[TW_F_TOKEN_IDS]
    ids = scan.ints(v, _MAX_TOKEN_ID) if v.present else None
    if v.present:
        values["token_ids"] = ids
    v = &f[TW_F_CP_OFFSETS]
    if v.present:
        values["compact_logprobs.offsets"] = scan.ints(v, _MAX_OFFSET)
    for path, field in _GENERATE_BLOBS:
        v = &f[field]
        if v.present and v.type == TW_T_STRING:
            values[path] = scan.blob(v)
    v = &f[TW_F_SAMPLING_MASK]
    if v.present and v.type == TW_T_ARRAY:
        values["sampling_mask"] = scan.nested(v)
    compact = choice.get("compact_logprobs") is not None
    packed_value = choice.get("completion_logprobs")
    packed = packed_value is not None
    v = &f[TW_F_LOGPROBS_CONTENT]
    if v.present and v.type == TW_T_ARRAY:
        values["logprobs.content:len"] = v.count
        # The rules validate the records beside any transport (extract_choice reads the same);
        # their head candidates are read when a head comes from them (not from compact rows).
        if ids is not None and ids[2] is None and v.count == <size_t>len(ids[0]):
            values["logprobs.content"] = scan.native(v, ids[0], k is not None and not compact)
    logprobs = choice.get("logprobs")
    if (v.present and (v.type == TW_T_ARRAY or v.type == TW_T_STRING) and isinstance(logprobs, dict)
            and (compact or (packed and k is None))):
        # The records stay in GenerateChoice.raw, as sent (the scan blanked them in the parsed
        # copy: an array's elements, a string's characters).
        values["logprobs:raw"] = {**logprobs, "content": scan.parsed(v)}
    v = &f[TW_F_CL_DATA]
    if compact and v.present and v.type == TW_T_STRING and isinstance(packed_value, dict):
        values["completion_logprobs:raw"] = {**packed_value, "data": scan.parsed(v)}
    return _extract.Evidence(index, values, _KERNELS)


cdef object _choices_of(object document):
    """The choices list of a generate or OpenAI-compatible document, or None."""
    return document.get("choices") if isinstance(document, dict) else None


# The formats an extractor reads a choice as.
cdef enum:
    _GENERATE, _OPENAI, _SGLANG


cdef object _evidence_records(_Scan scan, object choices, object k, int fmt):
    """The evidence of the top level and of each recorded choice of a scanned response, read
    now in one pass over the spans."""
    cdef size_t i
    top = _extract.Evidence(None, {}, _KERNELS, source=scan.source)
    if scan.doc.prompt_token_ids.present:
        top.values["prompt_token_ids"] = scan.ints(&scan.doc.prompt_token_ids, _MAX_TOKEN_ID)
    read = []
    if isinstance(choices, list):
        for i in range(min(scan.doc.nchoices, len(choices))):
            if not isinstance(choices[i], dict):
                read.append(_extract.Evidence(i, {}, _KERNELS))
            elif fmt == _GENERATE:
                read.append(_choice_evidence(scan, i, choices[i], k))
            elif fmt == _SGLANG:
                read.append(_sglang_evidence(scan, i, k))
            else:
                read.append(_openai_evidence(scan, i, k))
    return top, read


def _lookup(top, read):
    """``evidence(index, value)`` for the rules: the records read; an empty one past them
    (records end at the first choice that must fail, whose values are intact)."""

    def evidence(index, value):
        if index is None:
            return top
        return read[index] if index < len(read) else _extract.Evidence(index, {}, _KERNELS)

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
        return (document, *_evidence_records(scan, _choices_of(document), k, _GENERATE))
    finally:
        PyDataMem_SetHandler(previous)


def _record_values(values, kinds):
    """The Numbers of record values of the given TW_REC_V_* classes."""
    not_number = np.flatnonzero(kinds != TW_REC_V_NUMBER)
    if not len(not_number):
        return _extract.Numbers(values, None, None)
    first = int(not_number[0])
    return _extract.Numbers(values[:first], first, _KIND_EXAMPLES[kinds[first]])


cdef void _put_array(_Scan scan, dict values, str path, const tw_value *v, object k):
    """Record arrays of logprob records at ``path``: the records, the length, where the text
    is and, with a head, the candidates."""
    values[path + ":records"] = scan.records(v)
    values[path + ":len"] = v.count
    values[path + ":span"] = (v.start, v.end)
    if k is not None:
        # The candidates do not depend on the ids (only the sampled pass reads them).
        values[path + ":top"] = scan.native(v, np.zeros(v.count, dtype=np.int64), True)


# Id lists of an OpenAI-compatible choice, by path.
_OPENAI_IDS = (
    ("token_ids", TW_F_TOKEN_IDS),
    ("prompt_token_ids", TW_F_PROMPT_IDS),
    ("logprobs.token_ids", TW_F_LP_TOKEN_IDS),
    ("raw_output.completion_token_ids", TW_F_RO_TOKEN_IDS),
)


cdef object _openai_evidence(_Scan scan, size_t index, object k):
    """The compiled extractor for one OpenAI-compatible choice (the reference's
    ``extract_openai_choice`` reads the same from the parsed document)."""
    cdef const tw_value *f = scan.doc.choice[index].f
    cdef const tw_value *v
    cdef int field
    cdef ptrdiff_t bad
    values = {}
    for path, field in _OPENAI_IDS:
        v = &f[field]
        if v.present:
            values[path] = scan.ints(v, _MAX_TOKEN_ID)
    v = &f[TW_F_LOGPROBS_CONTENT]
    if v.present and v.type == TW_T_ARRAY:
        _put_array(scan, values, "logprobs.content", v, k)
    v = &f[TW_F_RO_CONTENT]
    if v.present and v.type == TW_T_ARRAY:
        _put_array(scan, values, "raw_output.completion_logprobs.content", v, k)
    v = &f[TW_F_LP_TOKEN_LOGPROBS]
    if v.present and v.type == TW_T_ARRAY:
        read, at = scan.numbers(v)
        values["logprobs.token_logprobs:numbers"] = _extract.Numbers(
            read, at, None if at is None else scan.element(v, at))
        values["logprobs.token_logprobs:len"] = v.count
    v = &f[TW_F_LP_TOKENS]
    if v.present and v.type == TW_T_ARRAY:
        values["logprobs.tokens:tokens"] = scan.token_strings(v)
    v = &f[TW_F_LP_TOP]
    if v.present and v.type == TW_T_ARRAY:
        values["logprobs.top_logprobs:len"] = v.count
        if k is not None:
            candidates, top_err, repeat = scan.head_rows(v, True)
            if repeat is True:  # a key with an escape: the rows as the reference reads them
                repeat = _extract.keyed_rows(_extract.load_keeping_repeats(scan.text(v)))
                candidates, top_err, repeat = repeat
            values["logprobs.top_logprobs:rows"] = (candidates, top_err, repeat)
    for path, field in (("logprobs", TW_F_LOGPROBS), ("raw_output", TW_F_RAW_OUTPUT)):
        v = &f[field]
        if v.present and v.type == TW_T_OBJECT:
            values[path + ":span"] = (v.start, v.end)
    return _extract.Evidence(index, values, _KERNELS, source=scan.source)


cdef object _sglang_evidence(_Scan scan, size_t index, object k):
    """The compiled extractor for one SGLang item (the reference's
    ``extract_sglang_item``)."""
    cdef const tw_value *f = scan.doc.choice[index].f
    cdef const tw_value *v
    values = {}
    v = &f[TW_F_SGL_IDS]
    if v.present:
        values["output_ids"] = scan.ints(v, _MAX_TOKEN_ID)
    v = &f[TW_F_SGL_TRIPLES]
    if v.present and v.type == TW_T_ARRAY:
        values["meta_info.output_token_logprobs:records"] = scan.triples(v)
        values["meta_info.output_token_logprobs:len"] = v.count
    v = &f[TW_F_SGL_TOP]
    if v.present and v.type == TW_T_ARRAY:
        values["meta_info.output_top_logprobs:len"] = v.count
        if k is not None:
            values["meta_info.output_top_logprobs:rows"] = scan.head_rows(v, False)[:2]
    return _extract.Evidence(index, values, _KERNELS, source=scan.source)


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
