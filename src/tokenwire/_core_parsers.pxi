# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- the parsers: scan, extract, then the plain path or the rules --------------------------------


# A body below this many bytes makes no array the block cache would keep (its ids, 8 bytes
# each, take at least 2 bytes of JSON: under tw_mem's 64 KiB), so its plain path runs with
# numpy's own allocator, without the two context-variable writes of setting the handler.
DEF _SMALL_BODY = 16384


def parse_generate_response(raw, *, top_k=None, require_logprobs=True, require_sampling_mask=False,
                            prompt_logprob_start=None, teacher_logits=False, payload_root=None,
                            num_experts=None, prompt_tokens=None):
    """Parse and validate a ``/inference/v1/generate`` response (see the package docs)."""
    return _parse_generate(raw, top_k, require_logprobs, require_sampling_mask, prompt_logprob_start,
                           teacher_logits, payload_root, num_experts, prompt_tokens)


from cpython.ref cimport Py_DECREF, Py_INCREF


cdef extern from *:
    """
    /* One spare _Scan, kept between calls by the small plain path: its tw_doc's arrays
       (records, blank spans, ids, nesting stack) are then allocated once, not per call.
       Taken and given back by an atomic exchange, so that two threads never share it. */
    static PyObject *tw_spare_scan = NULL;
    #if defined(_MSC_VER)
    #include <intrin.h>
    #define TW_SPARE_SWAP(v) ((PyObject *)_InterlockedExchangePointer((void *volatile *)&tw_spare_scan, (v)))
    #else
    #define TW_SPARE_SWAP(v) __atomic_exchange_n(&tw_spare_scan, (v), __ATOMIC_ACQ_REL)
    #endif
    /* The spare (a new reference), or NULL when there is none. */
    static PyObject *tw_spare_take(void) { return TW_SPARE_SWAP(NULL); }
    /* Keep obj (its reference stolen) as the spare; one already kept is released. */
    static void tw_spare_give(PyObject *obj) { Py_XDECREF(TW_SPARE_SWAP(obj)); }
    """
    PyObject *tw_spare_take() noexcept
    void tw_spare_give(PyObject *obj) noexcept


cdef inline _Scan _small_scan():
    """The spare _Scan (see tw_spare_scan), or a new one."""
    cdef PyObject *spare = tw_spare_take()
    if spare == NULL:
        return _Scan()
    scan = <_Scan>spare
    Py_DECREF(scan)  # the cast took a reference of its own: the spare's is given up
    return scan


cdef inline void _small_scan_done(_Scan scan) noexcept:
    """Keep ``scan``, done with (nothing made from it refers to it), as the spare."""
    scan.source = None  # no body kept alive by the spare
    scan.keep = None
    scan.buf = NULL  # nor a pointer into the body just freed
    scan.size = 0
    Py_INCREF(scan)
    tw_spare_give(<PyObject *>scan)


# parse_generate_response's keyword defaults after top_k, in its signature's order (which is
# _parse_generate's): read from the signature, so that they are stated once.
cdef tuple _GENERATE_DEFAULTS = tuple(parse_generate_response.__kwdefaults__.values())[1:]
cdef object _TOP_K_DEFAULT = parse_generate_response.__kwdefaults__["top_k"]


# The facade's parser's ``top_k`` when the call names none.
cdef object _NO_TOP_K = object()


cdef dict _with_top_k(dict options, object top_k):
    """The facade's call's keyword options: ``options`` with ``top_k`` unless it is _NO_TOP_K."""
    if top_k is not _NO_TOP_K:
        options["top_k"] = top_k
    return options


cdef object _generate_call(object raw, object top_k, dict options):
    """parse_generate_response(raw, top_k=top_k, **options) (``top_k`` _NO_TOP_K: not
    given), without a keyword dictionary when ``options`` is empty (the facade's common
    calls: no option, or ``top_k`` alone)."""
    cdef tuple d = _GENERATE_DEFAULTS
    if options:
        return parse_generate_response(raw, **_with_top_k(options, top_k))
    if top_k is _NO_TOP_K:
        top_k = _TOP_K_DEFAULT
    return _parse_generate(raw, top_k, d[0], d[1], d[2], d[3], d[4], d[5], d[6])


cdef object _parse_generate(object raw, object top_k, object require_logprobs, object require_sampling_mask,
                            object prompt_logprob_start, object teacher_logits, object payload_root,
                            object num_experts, object prompt_tokens):
    """parse_generate_response, for a caller in this module (the facade's parser) without its
    keyword arguments."""
    # Each check is a Python call: the defaults (None) skip it, being valid as they are.
    k = None if top_k is None else check_top_k(top_k)
    start = None if prompt_logprob_start is None else check_start(prompt_logprob_start)
    root = None if payload_root is None else check_payload_root(payload_root)
    experts = None if num_experts is None else check_num_experts(num_experts)
    prompt_count = None if prompt_tokens is None else check_prompt_tokens(prompt_tokens)
    scan = _small_scan()
    document = scan.document(raw)  # the scan and the JSON of its remainder make no numpy array
    # The plain path takes no mask, and no prompt length of the caller's (the rules compare it
    # with the one the response states).
    plain = k is None and not require_sampling_mask and prompt_count is None
    if plain and scan.size < _SMALL_BODY:
        response = _plain_generate(scan, document)
        if response is not None:
            _small_scan_done(scan)
            return response
        plain = False  # handed over: the rules decide
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        if plain:
            response = _plain_generate(scan, document)
            if response is not None:
                return response
        by_position = _extract.records_by_position(document)
        top, read = _evidence_records(scan, _choices_of(document), k, _GENERATE, by_position)
        return _generate.parse_document(document, k, require_logprobs,
                                        _lookup(top, read, _table.GENERATE, k, by_position),
                                        require_sampling_mask, start, bool(teacher_logits), root, experts,
                                        prompt_count)
    finally:
        PyDataMem_SetHandler(previous)


def parse_sglang_generate_response(raw, *, top_k=None, require_logprobs=True, check_usage=True, num_experts=None,
                                   routed_experts_shape=None, routed_experts_start_len=0):
    """Parse and validate an SGLang ``/generate`` response (see the package docs)."""
    k = check_top_k(top_k)
    routing = _openai_rules.sglang_routing(num_experts, routed_experts_shape, routed_experts_start_len)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        document, top, read = _scan_openai(_Scan(), raw, k, True)
        return _openai_rules.parse_sglang_generate_document(document, k, require_logprobs, check_usage,
                                                      _lookup(top, read, _table.SGLANG, k), routing)
    finally:
        PyDataMem_SetHandler(previous)


cdef object _parse_openai(object raw, object top_k, bint require_logprobs, bint check_usage,
                          object num_experts, object routed_experts_shape, object routed_experts_start_len,
                          object parse_document):
    k = check_top_k(top_k)
    routing = _openai_rules.sglang_routing(num_experts, routed_experts_shape, routed_experts_start_len)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        document, top, read = _scan_openai(_Scan(), raw, k, False)
        return parse_document(document, k, require_logprobs, check_usage, _lookup(top, read, _table.OPENAI, k),
                              routing.num_experts, routing)
    finally:
        PyDataMem_SetHandler(previous)


def parse_completions_response(raw, *, top_k=None, require_logprobs=True, check_usage=True, num_experts=None,
                               routed_experts_shape=None, routed_experts_start_len=0):
    """Parse and validate an OpenAI-compatible ``/v1/completions`` response (see the
    package docs)."""
    return _parse_openai(raw, top_k, require_logprobs, check_usage, num_experts, routed_experts_shape,
                         routed_experts_start_len, _openai_rules.parse_completions_document)


def parse_chat_completions_response(raw, *, top_k=None, require_logprobs=True, check_usage=True,
                                    num_experts=None, routed_experts_shape=None, routed_experts_start_len=0):
    """Parse and validate an OpenAI-compatible ``/v1/chat/completions`` response (see the
    package docs)."""
    return _parse_openai(raw, top_k, require_logprobs, check_usage, num_experts, routed_experts_shape,
                         routed_experts_start_len, _openai_rules.parse_chat_completions_document)
