# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- the parsers: scan, extract, then the plain path or the rules --------------------------------


def parse_generate_response(raw, *, top_k=None, require_logprobs=True, require_sampling_mask=False,
                            prompt_logprob_start=None, teacher_logits=False, payload_root=None,
                            num_experts=None):
    """Parse and validate a ``/inference/v1/generate`` response (see the package docs)."""
    k = check_top_k(top_k)
    start = check_start(prompt_logprob_start)
    root = check_payload_root(payload_root)
    experts = check_num_experts(num_experts)
    previous = PyDataMem_SetHandler(_NP_HANDLER)
    try:
        scan = _Scan()
        document = scan.document(raw)
        if k is None and not require_sampling_mask:  # the plain path takes no mask
            plain = _plain_generate(scan, document)
            if plain is not None:
                return plain
        by_position = _extract.records_by_position(document)
        top, read = _evidence_records(scan, _choices_of(document), k, _GENERATE, by_position)
        return _generate.parse_document(document, k, require_logprobs,
                                        _lookup(top, read, _table.GENERATE, k, by_position),
                                        require_sampling_mask, start, bool(teacher_logits), root, experts)
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
