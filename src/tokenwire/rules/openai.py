"""Exact token ids from OpenAI-compatible completions and chat responses (vLLM, Fireworks,
Together) and from SGLang's native ``/generate``: the readable specification.

A trainer aligns each sampled-token logprob with its token id, position by position. These
endpoints return text first and token evidence only on request, in several shapes; a client
that re-tokenizes the text instead of reading exact ids silently loses tokens (a final EOS
decodes to nothing). So the rules here are:

* ids are read only where the server wrote them: ``choices[].token_ids``,
  ``raw_output.completion_token_ids`` and the logprob records themselves (``token_id``
  fields, ``"token_id:N"`` token strings, ``logprobs.token_ids``, SGLang's
  ``[logprob, id, text]`` triples); there is no tokenizer anywhere;
* the returned ids come from the records that carry the logprobs whenever those name ids;
  every other id source that is present must agree with them, token by token;
* ids and logprobs must have the same length, ``usage`` must count the same tokens, every
  logprob must be real sampling evidence, and a head comes only from candidates named by id.

Every rule raises :class:`MalformedResponseError` naming the choice, field and token. The
rules read each choice's big values from its evidence record
(:class:`tokenwire.extract.python.Evidence`), filled by ``extract_openai_choice`` /
``extract_sglang_item`` from the parsed document or by the compiled core from the raw bytes
(``evidence`` in the ``parse_*_document`` functions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base._args import check_num_experts, check_routed_shape, check_top_k, int_arg
from ..base._errors import MalformedResponseError
from ..base._table import ITEM, KEY, SGLANG, fields
from ..base._types import GenerateChoice, GenerateResponse, Ragged, RoutedExperts
from ..base._wire import LLAMA_LOGPROB_LOG0, VLLM_LOGPROB_SENTINEL
from ..extract.python import (
    Evidence,
    LazyEvidence,
    Read,
    extract_openai_choice,
    extract_sglang_item,
    full_at,
    is_number,
    load_document,
    load_openai_document,
)
from ..kernels.python import HEAD_TOO_FEW, Candidates, is_int, native_head
from .arrays import bare_rows, bare_values, check_experts, check_rows, explained, fail_base64, parse_npy, routed_rows
from .dynamo import (
    ENGINE,
    ENGINE_IDS,
    NVEXT_IDS,
    Dynamo,
    check_engine,
    dynamo_of,
    engine_payload,
    engine_prompt,
    engine_routing,
    engine_sources,
    unpaired_head,
)
from .generate import NATIVE_TOP, parse_packed_top_k, response_of, top_k_block
from .requests import (
    _CHAT,
    _COMPLETIONS,
    _SGLANG,
    _Endpoint,
    chat_completions_request_params,
    completions_request_params,
    generate_request_params,
    sglang_generate_request_params,
)
from .sglang_meta import (
    _chat_meta_info,
    _over_support,
    _sglang_prompt_top,
    _sglang_sampling_fields,
    _sglang_weight_versions,
)
from .sources import (
    UNNAMED_RECORD,
    IdSource,
    Logprobs,
    check_alignment,
    check_values,
    id_array,
    id_list,
    ids_from_records,
    numbers_of,
)

__all__ = [
    "chat_completions_request_params",
    "completions_request_params",
    "generate_request_params",
    "parse_chat_completions_document",
    "parse_chat_completions_response",
    "parse_completions_document",
    "parse_completions_response",
    "parse_sglang_generate_document",
    "parse_sglang_generate_response",
    "sglang_generate_request_params",
]

# --- OpenAI-compatible logprobs: the shapes servers send -----------------------------------------

_PACKED_TOP_K = "logprobs.top_k"


def _chosen_heads(
    c: Evidence,
    field: str,
    ids: np.ndarray,
    candidates: Candidates,
    sampled: np.ndarray,
    k: int,
    top_err: tuple[int, str] | None,
    no_id: str,
    supports: Ragged | None = None,
) -> tuple[Ragged, Ragged]:
    """The heads chosen from every token's candidates (``c.heads``; with ``supports``, each
    token's recorded kept set), token by token: a head that breaks a rule before the first
    row with bad candidates (``top_err``, codes as ``NativeEntries.top_err``) is reported
    first, then that row's fault (``no_id``: the message for a candidate that names no id)."""
    limit = len(ids) if top_err is None else top_err[0]
    top_ids, top_logprobs, head_bad = c.kernels.heads(ids, candidates, sampled, k, supports, limit)
    if head_bad is not None:
        reason = head_bad[1]
        if reason == HEAD_TOO_FEW:
            reason = explained(c, reason, (
                f"a head of top_k={k} needs k + 2 = {k + 2} candidates per token (one beyond the "
                f"k-th to see a tie, and the sampled token's own), and token {head_bad[0]} has "
                f"fewer: request {k + 2} top logprobs (the request helpers, given top_k={k}, set it)"))
        c.fail(reason, field, head_bad[0])
    if top_err is not None:
        index, code = top_err
        c.fail(no_id if code == "top_no_id" else NATIVE_TOP[code], field, index)
    return top_ids, top_logprobs


def _against_sampled(
    content: list[Any], sampled: np.ndarray
) -> tuple[Candidates, np.ndarray, tuple[int, str] | None]:
    """The head candidates of ``[{token, logprob, top_logprobs}]`` entries as the native
    records' rules read them (:func:`native_head`), with each entry's own ``logprob`` where
    it is a number and the sampled value where it is not; ``(index, code)`` of the first
    entry whose candidates break a rule."""
    rows: list[list[tuple[int, float]]] = []
    top_err = None
    for index, entry in enumerate(content):
        head, problem = native_head(entry)
        if problem is not None:
            top_err = (index, problem)
            break
        rows.append(list(head.items()))
    rows += [[] for _ in range(len(content) - len(rows))]
    own = [
        entry.get("logprob") if is_number(entry.get("logprob")) else value
        for entry, value in zip(content, sampled.tolist())
    ]
    return Candidates.from_rows(rows), np.array(own, dtype=np.float64), top_err


def _probabilities(entry: Any, key: str) -> bool:
    """Whether a record carries a probability where its logprob should be (llama.cpp's
    ``post_sampling_probs``: ``prob`` and ``top_probs`` instead of ``logprob`` and
    ``top_logprobs``, ``tools/server/server-task.cpp``)."""
    return isinstance(entry, dict) and key not in entry and "prob" in entry


def _content_logprobs(
    c: Evidence, content: list[Any], read: Read, field: str, sources: list[IdSource], endpoint: _Endpoint
) -> Logprobs:
    """``[{token, logprob, top_logprobs, ...}]`` (chat; vLLM, Fireworks ``logprobs: true``,
    Fireworks ``raw_output.completion_logprobs``), as its evidence ``read`` it: the ids go
    first among ``sources``."""
    records = read.records
    if records.bad is not None:
        c.fail("logprob entry must be an object", field, records.bad)
    if records.mixed is not None:
        c.fail("sampling_logprob is missing while other entries carry it", field, records.mixed)
    values, bad = numbers_of(records.values)
    if bad is not None and _probabilities(full_at(c, content, read.span)[bad], records.value_key):
        c.fail(f"{field} records carry probabilities (prob, top_probs), not logprobs: llama.cpp's "
               "post_sampling_probs form, whose values are the sampler's probabilities after its filters; "
               "a probability read as a log probability is wrong evidence: request without post_sampling_probs",
               field, bad)
    source = ids_from_records(c, records.ids, field, UNNAMED_RECORD)
    if source is not None:
        sources.insert(0, source)

    def heads(c: Evidence, k: int, ids: np.ndarray, sampled: np.ndarray) -> tuple[Ragged, Ragged]:
        # The candidates' rules, candidate by candidate, are those of vLLM's native records
        # (one read of them, `top_entries`); each head is checked against the value in the
        # candidates' own distribution: the entry's `logprob` (Fireworks' `sampling_logprob`
        # is what the sampler drew with).
        entries = read.top
        candidates, own, top_err = entries.candidates, entries.entry_lps, entries.top_err
        if top_err is not None and top_err[1] == "sampled_not_number":
            # An entry without a numeric `logprob` of its own: its head is checked against
            # the sampled value instead.
            candidates, own, top_err = _against_sampled(full_at(c, content, read.span), sampled)
        log0 = candidates.logprobs == LLAMA_LOGPROB_LOG0  # llama.cpp's log(0): a candidate of no probability
        if log0.any():  # filtered out, as the sentinel is
            candidates = Candidates(candidates.offsets, candidates.ids,
                                    np.where(log0, VLLM_LOGPROB_SENTINEL, candidates.logprobs))
        no_id = (
            "top_logprobs candidates name decoded text, not token ids: unusable for a head; "
            f"{endpoint.heads_advice}"
        )
        return _chosen_heads(c, field, ids, candidates, own, k, top_err, no_id)

    return Logprobs(field, read.length, values, bad, records.values, records.value_key, heads)


def _array_logprobs(
    c: Evidence, logprobs: dict[str, Any], sources: list[IdSource], endpoint: _Endpoint
) -> Logprobs:
    """``{tokens, token_logprobs, top_logprobs, text_offset}`` (completions; Together and
    Fireworks add ``token_ids``): ids from ``token_ids`` and from "token_id:N" tokens."""
    field = "logprobs.token_logprobs"
    if not isinstance(logprobs[KEY.token_logprobs], list):
        c.fail("logprobs.token_logprobs must be a list", field)
    sent, count = c.token_logprobs.numbers, c.token_logprobs.length
    values, bad = sent.values, sent.bad
    records: list[IdSource] = []
    if logprobs.get(KEY.token_ids) is not None:
        records.append(id_list(c, c.logprob_token_ids, "logprobs.token_ids"))
    tokens = logprobs.get("tokens")
    if tokens is not None:
        if not isinstance(tokens, list):
            c.fail("logprobs.tokens must be a list", "logprobs.tokens")
        token_ids, named = c.tokens
        if len(token_ids) != count:
            c.fail(
                f"logprobs.tokens has {len(token_ids)} entries but logprobs.token_logprobs has "
                f"{count} ({count - len(token_ids):+d})",
                "logprobs.tokens",
            )
        if named:
            reason = 'token is not "token_id:N" while other tokens are'
            source = ids_from_records(c, token_ids, "logprobs.tokens", reason)
            if source is not None:
                records.append(source)
    sources[:0] = records

    def heads(c: Evidence, k: int, ids: np.ndarray, sampled: np.ndarray) -> tuple[Ragged, Ragged]:
        field = "logprobs.top_logprobs"
        rows = logprobs.get(KEY.top_logprobs)
        if not isinstance(rows, list) or c.top_logprobs.length != count:
            c.fail("Missing requested top logprobs", field)
        candidates, top_err, repeated = c.top_logprobs.rows
        if repeated is not None:  # before any other rule: the loudest symptom
            c.fail(
                f"top_logprobs repeats the key {repeated[1]!r}: candidates sent under one key "
                "are never merged",
                field,
                repeated[0],
            )
        no_id = (
            "top_logprobs is keyed by decoded text, not token ids: unusable for a head "
            f"(two ids that decode alike share one key); {endpoint.heads_advice}"
        )
        return _chosen_heads(c, field, ids, candidates, sampled, k, top_err, no_id)

    return Logprobs(field, count, values, bad, sent, "logprob", heads)


def _openai_logprobs(
    c: Evidence, choice: dict[str, Any], sources: list[IdSource], endpoint: _Endpoint
) -> tuple[Logprobs | None, bool]:
    """The choice's sampled-token logprobs (None: it has none) and whether they came from
    ``choice.logprobs`` (consumed) rather than ``raw_output``; the ids their records name go
    first in ``sources``. Records that name ids win: Fireworks' ``raw_output`` entries are
    read instead of a ``choice.logprobs`` whose tokens are only text."""
    found = None
    logprobs = choice.get("logprobs")
    if logprobs is not None:
        if not isinstance(logprobs, dict):
            c.fail("logprobs must be an object", "logprobs")
        named = len(sources)
        if logprobs.get("content") is not None:
            content = logprobs["content"]
            if not isinstance(content, list):
                c.fail("logprobs.content must be a list", "logprobs.content")
            found = _content_logprobs(c, content, c.logprobs_content, "logprobs.content", sources, endpoint)
        elif logprobs.get(KEY.token_logprobs) is not None:
            found = _array_logprobs(c, logprobs, sources, endpoint)
        if found is not None and len(sources) > named:
            return found, True
    raw_output = choice.get(KEY.raw_output)
    if isinstance(raw_output, dict):
        completion = raw_output.get(KEY.completion_logprobs)
        content = completion.get("content") if isinstance(completion, dict) else None
        if content is not None:
            field = "raw_output.completion_logprobs.content"
            if not isinstance(content, list):
                c.fail(f"{field} must be a list", field)
            named = len(sources)
            records = _content_logprobs(c, content, c.raw_content, field, sources, endpoint)
            if found is None or len(sources) > named:
                return records, False
    return found, found is not None


def _raw_output_ids(c: Evidence, choice: dict[str, Any], primary: Logprobs | None) -> list[IdSource]:
    """Fireworks ``raw_output``: ``completion_token_ids`` and, when the logprobs were read
    from ``choice.logprobs``, the ids its own logprob records name."""
    raw_output = choice.get(KEY.raw_output)
    if raw_output is None:
        return []
    if not isinstance(raw_output, dict):
        c.fail("raw_output must be an object", "raw_output")
    sources = []
    if raw_output.get(KEY.completion_token_ids) is not None:
        field = "raw_output.completion_token_ids"
        sources.append(id_list(c, c.raw_token_ids, field))
    completion = raw_output.get(KEY.completion_logprobs)
    content = completion.get("content") if isinstance(completion, dict) else None
    field = "raw_output.completion_logprobs.content"
    if isinstance(content, list) and (primary is None or primary.field != field):
        records = c.raw_content.records
        if records.bad is not None:
            c.fail("logprob entry must be an object", field, records.bad)
        source = ids_from_records(c, records.ids, field, UNNAMED_RECORD)
        if source is not None:
            sources.append(source)
    return sources


def _missing_ids(c: Evidence, logprobs: Logprobs | None, ids_advice: str, dynamo: bool) -> None:
    held = ""
    if logprobs is not None:
        held = f"its {logprobs.count} logprobs cannot be aligned to tokens without them, and "
    engine = f"no `{ENGINE_IDS}` or `{NVEXT_IDS}`, " if dynamo else ""
    c.fail(
        f"no exact completion token ids in the response ({engine}no `token_ids`, no "
        "`raw_output.completion_token_ids`, no ids in the logprob records): "
        f"{held}re-tokenizing the text is not exact (a final EOS, for one, decodes to nothing). "
        f"To get them, {ids_advice}."
    )


# --- MoE routing replay: vLLM's routed_experts -----------------------------------------------------


@dataclass(frozen=True)
class _Routing:
    """What the routing rules of a response's choices know before the choices are read."""

    # The caller's routing arguments: the model's count of experts (when given), and the shape
    # and start of SGLang's bare rows (SGLang, Dynamo's SGLang worker).
    bare: _SGLangRouting
    split: bool  # the response sends the prompt's routing apart (prompt_routed_experts)
    prompt: int | None  # the prompt's token count, when the response says it
    sglext: Any = None  # SGLang's sglext object, when sent (its routing is the first choice's)
    top: Evidence | None = None  # the top level's evidence (which read sglext's routing)
    check_usage: bool = True  # meta_info.prompt_tokens counts SGLang's routing rows


def _routing(c: Evidence, value: Any, raw: np.ndarray | None, field: str, num_experts: int | None,
             rows: tuple[int, ...] | None, counted: str) -> RoutedExperts:
    """A routing array as vLLM sends it on the OpenAI-compatible endpoints: a base64 string of
    a whole ``.npy`` file (``raw``: its decoded bytes, None when it is not canonical base64),
    or, in vLLM 0.21, ``[rows][layers][topk]`` lists of ints (read as int32). Its shape, then
    its row count (one of ``rows`` when known; ``counted`` says of what), then its ids."""
    if isinstance(value, str):
        if raw is None:
            fail_base64(c, f"Invalid {field} base64", field, value)
        routing = parse_npy(raw, c, field)
    elif isinstance(value, list):
        try:
            routing = np.array(value)
        except (ValueError, TypeError, OverflowError, RecursionError):  # ragged, or not numbers
            routing = None
        if routing is None or routing.ndim != 3 or routing.dtype.kind not in "iu" or 0 in routing.shape[1:]:
            c.fail(f"{field} must be a base64 .npy string or [rows, layers, topk] lists of ints, with "
                   "at least one layer and one expert per row", field)
    else:
        c.fail(f"{field} must be a base64 .npy string or [rows, layers, topk] lists of ints", field)
    check_rows(c, routing, field, rows, counted)
    check_experts(routing, num_experts, c, field)
    return RoutedExperts(routing if isinstance(value, str) else routing.astype(np.int32), None)


def _choice_routing(c: Evidence, choice: dict[str, Any], n: int, prompt: int | None, routing: _Routing) -> RoutedExperts:
    """The choice's ``routed_experts``, a row per routed position
    (:func:`~tokenwire.rules.arrays.routed_rows`)."""
    field = "routed_experts"
    rows, counted = routed_rows(n, prompt, routing.split)
    return _routing(c, choice[field], c.routed_experts, field, routing.bare.num_experts, rows, counted)


def _parse_openai_choice(
    c: Evidence,
    choice: Any,
    k: int | None,
    require_logprobs: bool,
    endpoint: _Endpoint,
    routing: _Routing,
    dynamo: Dynamo | None = None,
) -> GenerateChoice:
    if not isinstance(choice, dict):
        c.fail("choice must be an object")
    consumed = ["index", KEY.token_ids, "finish_reason", KEY.routed_experts]
    prompt = None
    if choice.get(KEY.prompt_token_ids) is not None:
        prompt = id_list(c, c.prompt_token_ids, "prompt_token_ids").ids
        if dynamo is not None:  # the engine's prompt, where it sent one: the routing rows count it
            prompt = engine_prompt(dynamo, prompt, c)
    sources: list[IdSource] = []
    if choice.get(KEY.token_ids) is not None:
        sources.append(id_list(c, c.token_ids, "token_ids"))
    named = len(sources)
    logprobs, from_choice = _openai_logprobs(c, choice, sources, endpoint)
    paired = len(sources) > named  # the records of the choice's logprobs name their ids
    sources += _raw_output_ids(c, choice, logprobs)
    engine_ids, engine_logprobs = engine_sources(dynamo)
    # The engine's, where sent: then the choice's logprobs are not evidence (rules/dynamo.py).
    sampled = engine_logprobs if engine_logprobs is not None else logprobs
    ids_advice = endpoint.dynamo_advice if dynamo is not None else endpoint.ids_advice
    if sampled is None and (require_logprobs or k is not None):
        if not sources and engine_ids is None:  # both missing: every flag to set, in one message
            advice = (ids_advice if ids_advice.startswith(endpoint.logprobs_advice)
                      else f"for the logprobs, {endpoint.logprobs_advice}; for the ids, {ids_advice}")
            c.fail(f"no exact completion token ids and no logprobs in the response: {advice}", "logprobs")
        c.fail(f"no logprobs in the response: {endpoint.logprobs_advice}", "logprobs")
    if k is not None and logprobs is None:
        c.fail(f"Missing requested top logprobs: {ENGINE} carries the sampled logprobs only, a head comes "
               f"from the choice's candidates: {endpoint.heads_advice}", "logprobs")
    if not sources and engine_ids is None:
        _missing_ids(c, sampled, ids_advice, dynamo is not None)
    if dynamo is not None:
        check_engine(c, dynamo, engine_ids, engine_logprobs, sources, logprobs)
        if k is not None and sampled is engine_logprobs and not paired:
            unpaired_head(c, logprobs)
    if engine_ids is not None:
        sources.insert(0, engine_ids)
    check_alignment(c, sources, sampled, prompt)
    ids = sources[0].ids
    values = top_ids = top_logprobs = None
    if sampled is not None:
        # The engine's faults are named where the engine data is: beside the choices.
        values = check_values(dynamo.top if dynamo is not None and sampled is engine_logprobs else c, sampled)
        if from_choice and (logprobs is sampled or k is not None):
            consumed.append(KEY.logprobs)
    # vLLM's packed top-k (completions' return_top_k_logprobs): the generate endpoint's block and
    # rules, checked whenever sent; with a head, the candidates are its rows.
    block = top_k_block(choice)
    packed = parse_packed_top_k(block, ids, c) if block is not None else None
    if k is not None:
        if packed is not None:
            top_ids, top_logprobs = _chosen_heads(c, _PACKED_TOP_K, ids, packed, values, k, None, "")
        else:
            top_ids, top_logprobs = logprobs.heads(c, k, ids, values)
    routed = None
    count = routing.prompt if prompt is None else len(prompt)
    if choice.get(KEY.routed_experts) is not None:
        routed = _choice_routing(c, choice, len(ids), count, routing)
    bare = routing.bare
    engine_routed = engine_routing(dynamo, len(ids), count, bare.num_experts, bare.shape, bare.start)
    if engine_routed is not None:
        if routed is not None:
            c.fail("routed_experts is sent on the choice and in nvext: one form only", "routed_experts")
        routed = engine_routed
    if routing.sglext is not None and c.index == 0:
        sglang_routed = sglext_routing(routing.top, routing.sglext, len(ids), count, bare)
        if sglang_routed is not None:
            if routed is not None:
                c.fail(f"routed_experts is sent on the choice and in {_SGLEXT_ROUTED}: one form only",
                       "routed_experts")
            routed = sglang_routed
    meta_routed = _meta_info_routing(c, choice, len(ids), routing)
    if meta_routed is not None:
        if routed is not None:
            c.fail("routed_experts is sent twice (meta_info.routed_experts and another form): one form only",
                   "meta_info.routed_experts")
        routed = meta_routed
    raw = {key: value for key, value in choice.items() if key not in consumed}
    for key, span in ((KEY.logprobs, c.logprobs), (KEY.raw_output, c.raw_output)):
        if key in raw:  # as sent: the compiled extractor left their arrays empty
            raw[key] = full_at(c, raw[key], span)
    if prompt is not None:
        raw[KEY.prompt_token_ids] = prompt
    sampling = _chat_meta_info(c, choice, ids, raw)
    if meta_routed is not None:  # read: it leaves the choice's meta_info, as on /generate
        raw[KEY.meta_info] = {key: v for key, v in raw[KEY.meta_info].items() if key != KEY.routed_experts}
    return GenerateChoice(
        index=c.index,  # type: ignore[arg-type]
        completion_ids=ids,
        completion_logprobs=values,
        completion_top_ids=top_ids,
        completion_top_logprobs=top_logprobs,
        routed_experts=routed,
        finish_reason=choice.get("finish_reason"),
        raw=raw,
        **sampling,
    )


def _meta_info_routing(c: Evidence, choice: dict[str, Any], n: int, routing: _Routing) -> RoutedExperts | None:
    """SGLang's chat choice with ``return_meta_info``: the /generate item's ``meta_info``, whose
    ``routed_experts`` (with ``return_routed_experts``; SGLang then sends no ``sglext`` copy) is
    the choice's routing, read by the /generate item's rule, its rows counted with its
    ``meta_info.prompt_tokens``."""
    meta = choice.get(KEY.meta_info)
    if not isinstance(meta, dict) or meta.get(KEY.routed_experts) is None:
        return None
    item = LazyEvidence(c.index, {KEY.meta_info: meta}, SGLANG, kernels=c.kernels, error=c.error)
    bare = routing.bare
    array = _sglang_rows(item, meta, KEY.routed_experts, item.routed_experts, n, bare, routing.check_usage, bare.shape)
    check_experts(array, bare.num_experts, item, "meta_info.routed_experts")
    return RoutedExperts(array, bare.start)


def _check_usage(usage: Any, choices: list[GenerateChoice]) -> None:
    """``usage.completion_tokens`` counts every choice's tokens together, so it is compared
    only when there is one choice to attribute it to."""
    if not isinstance(usage, dict) or usage.get("completion_tokens") is None or len(choices) != 1:
        return
    _check_token_count(Evidence(None), usage["completion_tokens"], "usage.completion_tokens",
                       len(choices[0].completion_ids))


def _check_token_count(c: Evidence, counted: Any, field: str, n: int) -> None:
    """A server's own count of completion tokens (``field``) agrees with the ``n`` ids."""
    if not is_int(counted) or counted < 0:
        c.fail(f"{field} must be a non-negative int", field)
    if counted != n:
        c.fail(f"{field} is {counted} but the completion has {n} token ids ({counted - n:+d})", field)


def _prompt_tokens(document: dict[str, Any], prompt: np.ndarray | None, endpoint: _Endpoint, check_usage: bool,
                   choices: int) -> int | None:
    """The prompt's token count, where the response says it: its prompt ids, else (with
    ``check_usage``) ``usage.prompt_tokens`` of a response to one prompt (a chat, or one
    completion: a batch of prompts counts them all)."""
    if prompt is not None:
        return len(prompt)
    usage = document.get("usage")
    counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if check_usage and is_int(counted) and counted >= 0 and (endpoint is _CHAT or choices == 1):
        return counted
    return None


def _parse_openai_document(
    document: Any,
    k: int | None,
    require_logprobs: bool,
    check_usage: bool,
    endpoint: _Endpoint,
    evidence: Any,
    num_experts: int | None = None,
    bare: _SGLangRouting | None = None,
) -> GenerateResponse:
    if not isinstance(document, dict):
        raise MalformedResponseError("response must be a JSON object")
    read = evidence or (lambda index, value: extract_openai_choice(index, value, k))
    prompt = document.get(KEY.prompt_token_ids)
    split = document.get(KEY.prompt_routed_experts) is not None
    sglext = document.get(KEY.sglext)
    at_top = prompt is not None or split or sglext is not None or document.get(KEY.nvext) is not None
    top = read(None, document) if at_top else None
    if prompt is not None:
        prompt = id_list(top, top.prompt_token_ids, "prompt_token_ids").ids
    choices = document.get(KEY.choices)
    if not isinstance(choices, list) or not choices:
        raise MalformedResponseError("choices must be a non-empty list", field="choices")
    dynamo = dynamo_of(document, top, len(choices))
    if dynamo is not None:
        prompt = engine_prompt(dynamo, prompt)
    routing = _Routing(bare if bare is not None else _SGLangRouting(num_experts), split,
                       _prompt_tokens(document, prompt, endpoint, check_usage, len(choices)), sglext, top, check_usage)
    parsed = [
        _parse_openai_choice(read(i, choice), choice, k, require_logprobs, endpoint, routing, dynamo)
        for i, choice in enumerate(choices)
    ]
    if check_usage:
        _check_usage(document.get("usage"), parsed)
    if prompt is None and endpoint is _COMPLETIONS:
        # vLLM sends the prompt per choice; one prompt for the response when all agree.
        prompts = [choice.raw.get(KEY.prompt_token_ids) for choice in parsed]
        first = prompts[0]
        if first is not None and all(p is not None and np.array_equal(p, first) for p in prompts):
            prompt = first
    prompt_routing = None
    if split:
        field = "prompt_routed_experts"
        count = routing.prompt if prompt is None else len(prompt)
        prompt_routing = _routing(top, document[field], top.prompt_routed_experts, field, routing.bare.num_experts,
                                  None if count is None else (count,), f"one per prompt token ({count})")
    response = response_of(document, parsed, prompt, "id", ("prompt_routed_experts",),
                           prompt_routed_experts=prompt_routing, format=endpoint.format, top_k=k)
    engine_payload(document, dynamo, response.payload)
    if isinstance(sglext, dict) and sglext.get(KEY.routed_experts) is not None:  # read: the first choice's
        response.payload[KEY.sglext] = {key: v for key, v in sglext.items() if key != KEY.routed_experts}
    return response


def _document_parser(endpoint: Any, name: str, doc: str) -> Any:
    """The public parser of one endpoint's parsed documents (``name``, documented by ``doc``).
    ``routing`` holds the caller's routing arguments (:func:`sglang_routing`); without it,
    ``num_experts`` alone."""

    def parse(document: Any, k: int | None, require_logprobs: bool = True, check_usage: bool = True,
              evidence: Any = None, num_experts: int | None = None,
              routing: _SGLangRouting | None = None) -> GenerateResponse:
        return _parse_openai_document(document, k, require_logprobs, check_usage, endpoint, evidence, num_experts,
                                      routing)

    parse.__name__ = parse.__qualname__ = name
    parse.__doc__ = doc
    return parse


parse_completions_document = _document_parser(
    _COMPLETIONS, "parse_completions_document",
    """Validate a parsed ``/v1/completions`` response; ``evidence(index, value)`` gives the
    ``Evidence`` of each choice (index None: the top level); by default
    :func:`extract_openai_choice` reads it from the parsed document.""")
parse_chat_completions_document = _document_parser(
    _CHAT, "parse_chat_completions_document",
    """Validate a parsed ``/v1/chat/completions`` response (see parse_completions_document).""")


def _response_parser(parse_document: Any, name: str, doc: str) -> Any:
    """The public parser of one endpoint's responses (``name``, documented by ``doc``): the
    arguments checked first, then the body loaded and handed to ``parse_document``."""

    def parse(raw: Any, *, top_k: int | None = None, require_logprobs: bool = True, check_usage: bool = True,
              num_experts: int | None = None, routed_experts_shape: tuple[int, int] | None = None,
              routed_experts_start_len: int = 0) -> GenerateResponse:
        k = check_top_k(top_k)
        routing = sglang_routing(num_experts, routed_experts_shape, routed_experts_start_len)
        return parse_document(load_openai_document(raw, k), k, require_logprobs, check_usage, routing=routing)

    parse.__name__ = parse.__qualname__ = name
    parse.__doc__ = doc
    return parse


parse_completions_response = _response_parser(
    parse_completions_document, "parse_completions_response",
    """Parse and validate an OpenAI-compatible ``/v1/completions`` response (vLLM,
    Fireworks, Together) into exact completion ids and their logprobs (see docs/openai.md).""")
parse_chat_completions_response = _response_parser(
    parse_chat_completions_document, "parse_chat_completions_response",
    """Parse and validate an OpenAI-compatible ``/v1/chat/completions`` response (vLLM,
    Fireworks, Together) into exact completion ids and their logprobs (see docs/openai.md).""")


# --- SGLang /generate ----------------------------------------------------------------------------


# The fields of meta_info that become attributes: the wire table's SGLang rows under it that
# give a result (the single ``weight_version`` stays in raw). Miles' mask logprobs are read
# from the parsed item, without a row of their own.
_SGLANG_CONSUMED = (*(f.path[1] for f in fields(ITEM, SGLANG) if f.key == KEY.meta_info and f.result),
                    "output_token_sampling_mask_logprobs")
_SGLANG_NO_ID = "Top logprob must be [logprob, token_id, text] with an id in [0, 2**32)"


@dataclass(frozen=True)
class _SGLangRouting:
    """The caller's knowledge of an SGLang server's routing replay."""

    num_experts: int | None = None  # the model's count of experts
    shape: tuple[int, int] | None = None  # (layers, topk) of a routing row
    start: int = 0  # the request's routed_experts_start_len: the first routed position


def _sglang_rows(c: Evidence, meta: dict[str, Any], key: str, raw: np.ndarray | None, n: int,
                 routing: _SGLangRouting, check_usage: bool, shape: tuple[int, int] | None) -> np.ndarray:
    """``meta_info.<key>`` of a ``/generate`` item (:func:`~tokenwire.rules.arrays.bare_rows`),
    its rows counted with ``meta_info.prompt_tokens``."""
    field = f"meta_info.{key}"
    bare_values(c, meta[key], raw, field)  # the value's own faults first
    prompt = meta.get("prompt_tokens") if check_usage else None
    if prompt is not None and not (is_int(prompt) and prompt >= 0):  # sent, it counts the rows
        c.fail(f"meta_info.prompt_tokens must be a non-negative int to count the rows of {field}, not "
               f"{type(prompt).__name__}", "meta_info.prompt_tokens")
    return bare_rows(c, meta[key], raw, field, n, prompt, routing.start, shape, "meta_info.prompt_tokens",
                     "meta_info.prompt_tokens is not sent (or check_usage is off)")


_SGLEXT_ROUTED = "sglext.routed_experts"


def sglext_routing(top: Evidence, sglext: Any, n: int, prompt: int | None, caller: _SGLangRouting) -> RoutedExperts | None:
    """SGLang's ``sglext.routed_experts`` on its OpenAI-compatible endpoints (``SglExt`` in
    ``entrypoints/openai/protocol.py``): one per response, beside ``choices``, SGLang's bare
    int32 routing of its first generation (``process_routed_experts_from_ret(ret[0])``), so the
    routing of the first choice, of ``n`` tokens: read as ``meta_info.routed_experts`` is on
    ``/generate`` (:func:`~tokenwire.rules.arrays.bare_rows`), its rows counted from the
    ``prompt``'s length (the prompt ids, else ``usage.prompt_tokens``), ``routed_experts_shape``
    and ``routed_experts_start_len`` the caller's."""
    if not isinstance(sglext, dict):
        top.fail("sglext must be an object", KEY.sglext)
    value = sglext.get(KEY.routed_experts)
    if value is None:
        return None
    array = bare_rows(top, value, top.sglext_routed_experts, _SGLEXT_ROUTED, n, prompt, caller.start, caller.shape,
                      "the prompt's token count",
                      "the prompt's length is not in the response (no prompt_token_ids, and no usage.prompt_tokens "
                      "or check_usage off)")
    check_experts(array, caller.num_experts, top, _SGLEXT_ROUTED)
    return RoutedExperts(array, caller.start)


def _parse_sglang_item(
    c: Evidence, item: Any, k: int | None, require_logprobs: bool, check_usage: bool,
    routing: _SGLangRouting = _SGLangRouting(),
) -> GenerateChoice:
    if not isinstance(item, dict):
        c.fail("response item must be an object")
    meta = item.get(KEY.meta_info)
    if not isinstance(meta, dict):
        c.fail("meta_info must be an object", "meta_info")
    sources: list[IdSource] = []
    logprobs = None
    field = "meta_info.output_token_logprobs"
    entries = meta.get(KEY.output_token_logprobs)
    if entries is not None:
        if not isinstance(entries, list):
            c.fail(f"{field} must be a list of [logprob, token_id, text] entries", field)
        read = c.output_token_logprobs
        records = read.records
        if records.bad is not None:
            c.fail("entry must be [logprob, token_id, text]", field, records.bad)
        ids = id_array(records.ids)
        missing = np.flatnonzero(ids < 0)
        if len(missing):
            c.fail("entry's token id must be in [0, 2**32)", field, int(missing[0]))
        sources.append(IdSource(field, ids))
        values, bad = numbers_of(records.values)
        logprobs = Logprobs(field, read.length, values, bad, records.values, records.value_key)
    if item.get(KEY.output_ids) is not None:
        sources.append(id_list(c, c.output_ids, "output_ids"))
    # Sampling logprobs alone are the sampled tokens' evidence too (a head needs the triples).
    sampling_only = meta.get("output_token_sampling_logprobs") is not None and k is None
    if logprobs is None and ((require_logprobs and not sampling_only) or k is not None or not sources):
        what = "no exact completion token ids and no logprobs" if not sources else "no logprobs"
        c.fail(f"{what} in the response (no {field}): {_SGLANG.ids_advice}.", field)
    check_alignment(c, sources, logprobs)
    ids = sources[0].ids
    values = top_ids = top_logprobs = None
    if logprobs is not None:
        values = sampled = check_values(c, logprobs)
    if check_usage and meta.get("completion_tokens") is not None:
        _check_token_count(c, meta["completion_tokens"], "meta_info.completion_tokens", len(ids))
    sampling_fields = _sglang_sampling_fields(c, meta, ids)
    mask = sampling_fields["sampling_mask"]
    if k is not None:
        field = "meta_info.output_top_logprobs"
        rows = meta.get(KEY.output_top_logprobs)
        if not isinstance(rows, list) or c.output_top_logprobs.length != len(ids):
            c.fail("Missing requested top logprobs", field)
        candidates, top_err = c.output_top_logprobs.rows
        if mask is not None:  # the head is the kept set, as vLLM's with a recorded support
            candidates, sampled = _over_support(candidates, mask, sampled)
        top_ids, top_logprobs = _chosen_heads(c, field, ids, candidates, sampled, k, top_err, _SGLANG_NO_ID,
                                              mask)
    prompt_top_ids, prompt_top_logprobs = _sglang_prompt_top(c, meta)
    spans = _sglang_weight_versions(c, meta, len(ids))
    routed = indexer = None
    if meta.get(KEY.routed_experts) is not None:
        array = _sglang_rows(c, meta, KEY.routed_experts, c.routed_experts, len(ids), routing, check_usage,
                             routing.shape)
        check_experts(array, routing.num_experts, c, "meta_info.routed_experts")
        routed = RoutedExperts(array, routing.start)
    if meta.get(KEY.indexer_topk) is not None:
        indexer = _sglang_rows(c, meta, KEY.indexer_topk, c.indexer_topk, len(ids), routing, check_usage, None)
    finish = meta.get("finish_reason")
    raw = {key: value for key, value in item.items() if key != KEY.output_ids}
    raw[KEY.meta_info] = {key: value for key, value in meta.items() if key not in _SGLANG_CONSUMED}
    return GenerateChoice(  # GenerateChoice's first fields: index to completion_top_logprobs
        c.index, ids, values, top_ids, top_logprobs,  # type: ignore[arg-type]
        routed_experts=routed,
        finish_reason=finish.get("type") if isinstance(finish, dict) else finish,
        raw=raw,
        **sampling_fields,
        prompt_top_ids=prompt_top_ids,
        prompt_top_logprobs=prompt_top_logprobs,
        weight_versions=spans,
        indexer_topk=indexer,
    )


def parse_sglang_generate_document(
    document: Any,
    k: int | None,
    require_logprobs: bool = True,
    check_usage: bool = True,
    evidence: Any = None,
    routing: _SGLangRouting = _SGLangRouting(),
) -> GenerateResponse:
    """Validate a parsed SGLang ``/generate`` response: one object, or a list of them (a
    batch, or ``n`` > 1), each becoming a choice (``evidence`` as in
    parse_completions_document; by default :func:`extract_sglang_item`)."""
    items = document if isinstance(document, list) else [document]
    if not items:
        raise MalformedResponseError("response must be an object or a non-empty list of objects")
    read = evidence or (lambda index, value: extract_sglang_item(index, value, k))
    parsed = [
        _parse_sglang_item(read(i, item), item, k, require_logprobs, check_usage, routing)
        for i, item in enumerate(items)
    ]
    single = not isinstance(document, list)
    return GenerateResponse(
        choices=parsed,
        request_id=parsed[0].raw[KEY.meta_info].get("id") if single else None,
        usage=None,
        prompt_token_ids=None,
        payload={},
        format=_SGLANG.format,
        top_k=k,
    )


def sglang_routing(num_experts: Any, routed_experts_shape: Any, routed_experts_start_len: Any) -> _SGLangRouting:
    """The SGLang parser's routing arguments, checked before the response is read."""
    return _SGLangRouting(check_num_experts(num_experts), check_routed_shape(routed_experts_shape),
                          int_arg(routed_experts_start_len, "routed_experts_start_len", 0))


def parse_sglang_generate_response(
    raw: Any, *, top_k: int | None = None, require_logprobs: bool = True, check_usage: bool = True,
    num_experts: int | None = None, routed_experts_shape: tuple[int, int] | None = None,
    routed_experts_start_len: int = 0,
) -> GenerateResponse:
    """Parse and validate an SGLang ``/generate`` response (see docs/openai.md)."""
    k = check_top_k(top_k)
    routing = sglang_routing(num_experts, routed_experts_shape, routed_experts_start_len)
    return parse_sglang_generate_document(load_document(raw), k, require_logprobs, check_usage, routing=routing)
