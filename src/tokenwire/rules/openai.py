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

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._args import check_top_k
from .._errors import MalformedResponseError
from .._types import GenerateChoice, GenerateResponse, Ragged
from .._wire import VLLM_LOGPROB_SENTINEL
from ..extract.python import (
    Evidence,
    Numbers,
    Read,
    extract_openai_choice,
    extract_sglang_item,
    full_at,
    is_number,
    load_document,
    load_openai_document,
    numbers,
)
from ..kernels.python import Candidates, is_int, native_head
from .generate import NATIVE_TOP, checked_int_list, response_of

__all__ = [
    "chat_completions_request_params",
    "completions_request_params",
    "parse_chat_completions_document",
    "parse_chat_completions_response",
    "parse_completions_document",
    "parse_completions_response",
    "parse_sglang_generate_document",
    "parse_sglang_generate_response",
    "sglang_generate_request_params",
]

_IDS_REASON = "must hold token ids in [0, 2**32)"
_UNNAMED_RECORD = "logprob entry names no token id in [0, 2**32) while other entries do"


# --- how to ask each server for what a parser needs (every error that blames a missing field
# --- says which request flag produces it) --------------------------------------------------------


@dataclass(frozen=True)
class _Endpoint:
    name: str
    format: str  # GenerateResponse.format
    ids_advice: str
    logprobs_advice: str
    heads_advice: str


_COMPLETIONS = _Endpoint(
    name="/v1/completions",
    format="completions",
    ids_advice=(
        "set `return_token_ids: true` in the request (vLLM; Fireworks too), which adds "
        "`choices[].token_ids`; or, with `logprobs`, vLLM's `return_tokens_as_token_ids: true` "
        "(tokens become \"token_id:N\"); on Fireworks `raw_output: true` adds "
        "`raw_output.completion_token_ids` and `logprobs: true` gives `logprobs.content[]` "
        "entries with `token_id`; Together sends `logprobs.token_ids` whenever `logprobs` is "
        "set. tokenwire.completions_request_params() sets vLLM's flags"
    ),
    logprobs_advice="set `logprobs` in the request (an int, e.g. 1)",
    heads_advice=(
        "set `return_tokens_as_token_ids: true` (vLLM) so `top_logprobs` is keyed by "
        "\"token_id:N\", or use Fireworks' `logprobs: true` with `top_logprobs` (candidates "
        "carry `token_id`)"
    ),
)


_CHAT = _Endpoint(
    name="/v1/chat/completions",
    format="chat",
    ids_advice=(
        "set `return_token_ids: true` in the request (vLLM; Fireworks too), which adds "
        "`choices[].token_ids`; or vLLM's `return_tokens_as_token_ids: true` with "
        "`logprobs: true` (`logprobs.content[].token` becomes \"token_id:N\"); on Fireworks "
        "`raw_output: true` adds `raw_output.completion_token_ids`, and `logprobs: true` gives "
        "`logprobs.content[]` entries with `token_id`; Together sends `logprobs.token_ids` "
        "whenever `logprobs` is set. tokenwire.chat_completions_request_params() sets vLLM's "
        "flags"
    ),
    logprobs_advice="set `logprobs: true` in the request",
    heads_advice=(
        "set `return_tokens_as_token_ids: true` (vLLM) so candidates are \"token_id:N\"; "
        "Fireworks candidates carry `token_id`"
    ),
)


_SGLANG = _Endpoint(
    name="/generate",
    format="sglang",
    ids_advice=(
        "set `return_logprob: true` in the request: `meta_info.output_token_logprobs` then "
        "holds a [logprob, token_id, text] triple per token. "
        "tokenwire.sglang_generate_request_params() sets it"
    ),
    logprobs_advice="set `return_logprob: true` in the request",
    heads_advice="set `top_logprobs_num` in the request (k + 2 for a head of k)",
)


def _asked(params: Any, top_k: int | None) -> tuple[dict[str, Any], int | None]:
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, not {type(params).__name__}")
    return dict(params), check_top_k(top_k)


def completions_request_params(params: dict[str, Any], *, top_k: int | None = None) -> dict[str, Any]:
    """A copy of ``/v1/completions`` request ``params`` that asks for exact ids.

    Sets ``return_token_ids=True`` and ``logprobs=1`` (``top_k + 2`` with a head, plus
    ``return_tokens_as_token_ids=True`` so candidates are keyed by id) only where the caller
    did not: an explicit ``False`` is kept, and parsing the response then fails loudly.
    These are vLLM's names; Fireworks accepts ``return_token_ids`` as well.
    """
    out, k = _asked(params, top_k)
    out.setdefault("return_token_ids", True)
    out.setdefault("logprobs", 1 if k is None else k + 2)
    if k is not None:
        out.setdefault("return_tokens_as_token_ids", True)
    return out


def chat_completions_request_params(
    params: dict[str, Any], *, top_k: int | None = None
) -> dict[str, Any]:
    """A copy of ``/v1/chat/completions`` request ``params`` that asks for exact ids.

    Sets ``return_token_ids=True`` and ``logprobs=True`` (with a head also
    ``top_logprobs=top_k + 2`` and ``return_tokens_as_token_ids=True``) where the caller did
    not; explicit values, ``False`` included, are kept.
    """
    out, k = _asked(params, top_k)
    out.setdefault("return_token_ids", True)
    out.setdefault("logprobs", True)
    if k is not None:
        out.setdefault("top_logprobs", k + 2)
        out.setdefault("return_tokens_as_token_ids", True)
    return out


def sglang_generate_request_params(
    params: dict[str, Any], *, top_k: int | None = None
) -> dict[str, Any]:
    """A copy of SGLang ``/generate`` request ``params`` that asks for exact ids:
    ``return_logprob=True`` (with a head also ``top_logprobs_num=top_k + 2``) where the
    caller did not set them."""
    out, k = _asked(params, top_k)
    out.setdefault("return_logprob", True)
    if k is not None:
        out.setdefault("top_logprobs_num", k + 2)
    return out


# --- rules shared by every format ----------------------------------------------------------------


@dataclass
class _IdSource:
    field: str
    ids: np.ndarray


@dataclass
class _Logprobs:
    """The sampled-token logprobs of a choice: where they are, their values, and the
    candidates each token's head is built from (read only when a head is requested)."""

    field: str  # e.g. "logprobs.token_logprobs"
    count: int
    values: np.ndarray  # float64, the values before ``bad``
    bad: int | None  # first value that is not a number
    raw: list[Any] | Any  # the values as sent, to name a bad one
    key: str  # "logprob", "sampling_logprob", ...
    heads: Any = None  # a callable(c, k, ids, values) -> (top_ids, top_logprobs)


def _id_list(c: Evidence, parsed: tuple[np.ndarray, int, int | None] | None, field: str) -> _IdSource:
    """A JSON list of token ids as its evidence read it (the generate endpoint's
    ``token_ids`` rules)."""
    return _IdSource(field, checked_int_list(c, parsed, field, f"{field} {_IDS_REASON}"))


def _numbers(values: list[Any] | Numbers) -> tuple[np.ndarray, int | None]:
    """Record values as numbers: read already (the compiled extractor), or now."""
    return (values.values, values.bad) if isinstance(values, Numbers) else numbers(values)


def _element(values: list[Any] | Numbers, index: int) -> Any:
    """The value ``index`` as sent (to name a bad one)."""
    return values.example if isinstance(values, Numbers) else values[index]


def _id_array(ids: list[int | None] | np.ndarray) -> np.ndarray:
    """Ids named by records as int64, -1 where a record names none (a list holds None)."""
    if isinstance(ids, list):
        return np.array([-1 if token_id is None else token_id for token_id in ids], dtype=np.int64)
    return ids


def _ids_from_records(
    c: Evidence, ids: list[int | None] | np.ndarray, field: str, reason: str
) -> _IdSource | None:
    """The ids the records name (None or -1: a record naming none): none at all (None), or
    one for every record (else ``reason`` at the first record naming none)."""
    ids = _id_array(ids)
    missing = np.flatnonzero(ids < 0)
    if len(missing) == len(ids):
        return None
    if len(missing):
        c.fail(reason, field, int(missing[0]))
    return _IdSource(field, ids)


def _check_alignment(
    c: Evidence, sources: list[_IdSource], logprobs: _Logprobs | None, prompt: np.ndarray | None = None
) -> None:
    """Every id source has one id per logprob, and all of them name the same ids."""
    if logprobs is not None:
        for source in sources:
            if len(source.ids) != logprobs.count:
                diff = logprobs.count - len(source.ids)
                echo = ""
                if prompt is not None and len(prompt) and diff == len(prompt):
                    echo = (
                        f"; the {diff} extra logprobs match the prompt's length, as in responses "
                        "to `echo: true` requests, which carry the prompt's logprobs too"
                    )
                c.fail(
                    f"completion has {len(source.ids)} token ids but {logprobs.count} logprobs "
                    f"({diff:+d}): ids from {source.field}, logprobs from {logprobs.field}{echo}",
                    source.field,
                )
    first = sources[0]
    for source in sources[1:]:
        if len(source.ids) != len(first.ids):
            c.fail(
                f"token id sources disagree in length: {first.field} has {len(first.ids)} ids, "
                f"{source.field} has {len(source.ids)} ({len(source.ids) - len(first.ids):+d})",
                source.field,
            )
        differ = np.flatnonzero(source.ids != first.ids)
        if len(differ):
            at = int(differ[0])
            c.fail(
                f"token id sources disagree at token {at}: {first.field} has "
                f"{int(first.ids[at])}, {source.field} has {int(source.ids[at])}",
                source.field,
                at,
            )


def _check_values(c: Evidence, logprobs: _Logprobs) -> np.ndarray:
    """Every sampled-token logprob is sampling evidence: a finite number, not vLLM's -9999
    sentinel (a missing or clamped value), not positive. The first bad token wins."""
    values = logprobs.values
    bad = np.flatnonzero(
        ~np.isfinite(values) | (values == VLLM_LOGPROB_SENTINEL) | (values > 1e-6)
    )
    at = int(bad[0]) if len(bad) else None
    key = logprobs.key
    if at is None and logprobs.bad is not None:
        at = logprobs.bad
        value = _element(logprobs.raw, at)
        if value is None:
            c.fail(f"{key} is null: the token carries no sampling evidence", logprobs.field, at)
        c.fail(f"{key} must be a number, not {type(value).__name__}", logprobs.field, at)
    if at is not None:
        value = float(values[at])
        if not math.isfinite(value):
            c.fail(f"{key} must be finite", logprobs.field, at)
        if value == VLLM_LOGPROB_SENTINEL:
            c.fail(
                f"{key} is the -9999 sentinel (missing or clamped): the token carries no "
                "sampling evidence",
                logprobs.field,
                at,
            )
        c.fail(f"{key} cannot be positive ({value!r})", logprobs.field, at)
    return values


# --- OpenAI-compatible logprobs: the shapes servers send -----------------------------------------


def _chosen_heads(
    c: Evidence,
    field: str,
    ids: np.ndarray,
    candidates: Candidates,
    sampled: np.ndarray,
    k: int,
    top_err: tuple[int, str] | None,
    no_id: str,
) -> tuple[Ragged, Ragged]:
    """The heads chosen from every token's candidates (``c.heads``), token by token: a head
    that breaks a rule before the first row with bad candidates (``top_err``, codes as
    ``NativeEntries.top_err``) is reported first, then that row's fault (``no_id``: the
    message for a candidate that names no id)."""
    limit = len(ids) if top_err is None else top_err[0]
    top_ids, top_logprobs, head_bad = c.kernels.heads(ids, candidates, sampled, k, None, limit)
    if head_bad is not None:
        c.fail(head_bad[1], field, head_bad[0])
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


def _content_logprobs(
    c: Evidence, content: list[Any], read: Read, field: str, sources: list[_IdSource], endpoint: _Endpoint
) -> _Logprobs:
    """``[{token, logprob, top_logprobs, ...}]`` (chat; vLLM, Fireworks ``logprobs: true``,
    Fireworks ``raw_output.completion_logprobs``), as its evidence ``read`` it: the ids go
    first among ``sources``."""
    records = read.records
    if records.bad is not None:
        c.fail("logprob entry must be an object", field, records.bad)
    if records.mixed is not None:
        c.fail("sampling_logprob is missing while other entries carry it", field, records.mixed)
    source = _ids_from_records(c, records.ids, field, _UNNAMED_RECORD)
    if source is not None:
        sources.insert(0, source)
    values, bad = _numbers(records.values)

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
        no_id = (
            "top_logprobs candidates name decoded text, not token ids: unusable for a head; "
            f"{endpoint.heads_advice}"
        )
        return _chosen_heads(c, field, ids, candidates, own, k, top_err, no_id)

    return _Logprobs(field, read.length, values, bad, records.values, records.value_key, heads)


def _array_logprobs(
    c: Evidence, logprobs: dict[str, Any], sources: list[_IdSource], endpoint: _Endpoint
) -> _Logprobs:
    """``{tokens, token_logprobs, top_logprobs, text_offset}`` (completions; Together and
    Fireworks add ``token_ids``): ids from ``token_ids`` and from "token_id:N" tokens."""
    field = "logprobs.token_logprobs"
    if not isinstance(logprobs["token_logprobs"], list):
        c.fail("logprobs.token_logprobs must be a list", field)
    sent, count = c.token_logprobs.numbers, c.token_logprobs.length
    values, bad = sent.values, sent.bad
    records: list[_IdSource] = []
    if logprobs.get("token_ids") is not None:
        records.append(_id_list(c, c.logprob_token_ids, "logprobs.token_ids"))
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
            source = _ids_from_records(c, token_ids, "logprobs.tokens", reason)
            if source is not None:
                records.append(source)
    sources[:0] = records

    def heads(c: Evidence, k: int, ids: np.ndarray, sampled: np.ndarray) -> tuple[Ragged, Ragged]:
        field = "logprobs.top_logprobs"
        rows = logprobs.get("top_logprobs")
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

    return _Logprobs(field, count, values, bad, sent, "logprob", heads)


def _openai_logprobs(
    c: Evidence, choice: dict[str, Any], sources: list[_IdSource], endpoint: _Endpoint
) -> tuple[_Logprobs | None, bool]:
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
        elif logprobs.get("token_logprobs") is not None:
            found = _array_logprobs(c, logprobs, sources, endpoint)
        if found is not None and len(sources) > named:
            return found, True
    raw_output = choice.get("raw_output")
    if isinstance(raw_output, dict):
        completion = raw_output.get("completion_logprobs")
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


def _raw_output_ids(c: Evidence, choice: dict[str, Any], primary: _Logprobs | None) -> list[_IdSource]:
    """Fireworks ``raw_output``: ``completion_token_ids`` and, when the logprobs were read
    from ``choice.logprobs``, the ids its own logprob records name."""
    raw_output = choice.get("raw_output")
    if raw_output is None:
        return []
    if not isinstance(raw_output, dict):
        c.fail("raw_output must be an object", "raw_output")
    sources = []
    if raw_output.get("completion_token_ids") is not None:
        field = "raw_output.completion_token_ids"
        sources.append(_id_list(c, c.raw_token_ids, field))
    completion = raw_output.get("completion_logprobs")
    content = completion.get("content") if isinstance(completion, dict) else None
    field = "raw_output.completion_logprobs.content"
    if isinstance(content, list) and (primary is None or primary.field != field):
        records = c.raw_content.records
        if records.bad is not None:
            c.fail("logprob entry must be an object", field, records.bad)
        source = _ids_from_records(c, records.ids, field, _UNNAMED_RECORD)
        if source is not None:
            sources.append(source)
    return sources


def _missing_ids(c: Evidence, logprobs: _Logprobs | None, endpoint: _Endpoint) -> None:
    held = ""
    if logprobs is not None:
        held = f"its {logprobs.count} logprobs cannot be aligned to tokens without them, and "
    c.fail(
        "no exact completion token ids in the response (no `token_ids`, no "
        "`raw_output.completion_token_ids`, no ids in the logprob records): "
        f"{held}re-tokenizing the text is not exact (a final EOS, for one, decodes to nothing). "
        f"To get them, {endpoint.ids_advice}."
    )


def _parse_openai_choice(
    c: Evidence,
    choice: Any,
    k: int | None,
    require_logprobs: bool,
    endpoint: _Endpoint,
) -> GenerateChoice:
    if not isinstance(choice, dict):
        c.fail("choice must be an object")
    consumed = ["index", "token_ids", "finish_reason"]
    prompt = None
    if choice.get("prompt_token_ids") is not None:
        prompt = _id_list(c, c.prompt_token_ids, "prompt_token_ids").ids
    sources: list[_IdSource] = []
    if choice.get("token_ids") is not None:
        sources.append(_id_list(c, c.token_ids, "token_ids"))
    logprobs, from_choice = _openai_logprobs(c, choice, sources, endpoint)
    sources += _raw_output_ids(c, choice, logprobs)
    if logprobs is None and (require_logprobs or k is not None):
        if not sources:  # both missing: every flag to set, in one message
            advice = (endpoint.ids_advice if endpoint.ids_advice.startswith(endpoint.logprobs_advice)
                      else f"for the logprobs, {endpoint.logprobs_advice}; for the ids, {endpoint.ids_advice}")
            c.fail(f"no exact completion token ids and no logprobs in the response: {advice}", "logprobs")
        c.fail(f"no logprobs in the response: {endpoint.logprobs_advice}", "logprobs")
    if not sources:
        _missing_ids(c, logprobs, endpoint)
    _check_alignment(c, sources, logprobs, prompt)
    ids = sources[0].ids
    values = top_ids = top_logprobs = None
    if logprobs is not None:
        values = _check_values(c, logprobs)
        if k is not None:
            top_ids, top_logprobs = logprobs.heads(c, k, ids, values)
        if from_choice:
            consumed.append("logprobs")
    raw = {key: value for key, value in choice.items() if key not in consumed}
    for key, span in (("logprobs", c.logprobs), ("raw_output", c.raw_output)):
        if key in raw:  # as sent: the compiled extractor left their arrays empty
            raw[key] = full_at(c, raw[key], span)
    if prompt is not None:
        raw["prompt_token_ids"] = prompt
    return GenerateChoice(
        index=c.index,  # type: ignore[arg-type]
        completion_ids=ids,
        completion_logprobs=values,
        completion_top_ids=top_ids,
        completion_top_logprobs=top_logprobs,
        finish_reason=choice.get("finish_reason"),
        raw=raw,
    )


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


def _parse_openai_document(
    document: Any,
    k: int | None,
    require_logprobs: bool,
    check_usage: bool,
    endpoint: _Endpoint,
    evidence: Any,
) -> GenerateResponse:
    if not isinstance(document, dict):
        raise MalformedResponseError("response must be a JSON object")
    read = evidence or (lambda index, value: extract_openai_choice(index, value, k))
    prompt = document.get("prompt_token_ids")
    if prompt is not None:
        top = read(None, document)
        prompt = _id_list(top, top.prompt_token_ids, "prompt_token_ids").ids
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedResponseError("choices must be a non-empty list", field="choices")
    parsed = [
        _parse_openai_choice(read(i, choice), choice, k, require_logprobs, endpoint)
        for i, choice in enumerate(choices)
    ]
    if check_usage:
        _check_usage(document.get("usage"), parsed)
    if prompt is None and endpoint is _COMPLETIONS:
        # vLLM sends the prompt per choice; one prompt for the response when all agree.
        prompts = [choice.raw.get("prompt_token_ids") for choice in parsed]
        first = prompts[0]
        if first is not None and all(p is not None and np.array_equal(p, first) for p in prompts):
            prompt = first
    return response_of(document, parsed, prompt, "id", format=endpoint.format, top_k=k)


def parse_completions_document(
    document: Any,
    k: int | None,
    require_logprobs: bool = True,
    check_usage: bool = True,
    evidence: Any = None,
) -> GenerateResponse:
    """Validate a parsed ``/v1/completions`` response; ``evidence(index, value)`` gives the
    ``Evidence`` of each choice (index None: the top level); by default
    :func:`extract_openai_choice` reads it from the parsed document."""
    return _parse_openai_document(document, k, require_logprobs, check_usage, _COMPLETIONS, evidence)


def parse_chat_completions_document(
    document: Any,
    k: int | None,
    require_logprobs: bool = True,
    check_usage: bool = True,
    evidence: Any = None,
) -> GenerateResponse:
    """Validate a parsed ``/v1/chat/completions`` response (see parse_completions_document)."""
    return _parse_openai_document(document, k, require_logprobs, check_usage, _CHAT, evidence)


def parse_completions_response(
    raw: Any, *, top_k: int | None = None, require_logprobs: bool = True, check_usage: bool = True
) -> GenerateResponse:
    """Parse and validate an OpenAI-compatible ``/v1/completions`` response (vLLM,
    Fireworks, Together) into exact completion ids and their logprobs (see docs/openai.md)."""
    k = check_top_k(top_k)
    return parse_completions_document(load_openai_document(raw, k), k, require_logprobs, check_usage)


def parse_chat_completions_response(
    raw: Any, *, top_k: int | None = None, require_logprobs: bool = True, check_usage: bool = True
) -> GenerateResponse:
    """Parse and validate an OpenAI-compatible ``/v1/chat/completions`` response (vLLM,
    Fireworks, Together) into exact completion ids and their logprobs (see docs/openai.md)."""
    k = check_top_k(top_k)
    return parse_chat_completions_document(load_openai_document(raw, k), k, require_logprobs, check_usage)


# --- SGLang /generate ----------------------------------------------------------------------------


_SGLANG_CONSUMED = ("output_token_logprobs", "output_top_logprobs")
_SGLANG_NO_ID = "Top logprob must be [logprob, token_id, text] with an id in [0, 2**32)"


def _parse_sglang_item(
    c: Evidence, item: Any, k: int | None, require_logprobs: bool, check_usage: bool
) -> GenerateChoice:
    if not isinstance(item, dict):
        c.fail("response item must be an object")
    meta = item.get("meta_info")
    if not isinstance(meta, dict):
        c.fail("meta_info must be an object", "meta_info")
    sources: list[_IdSource] = []
    logprobs = None
    field = "meta_info.output_token_logprobs"
    entries = meta.get("output_token_logprobs")
    if entries is not None:
        if not isinstance(entries, list):
            c.fail(f"{field} must be a list of [logprob, token_id, text] entries", field)
        read = c.output_token_logprobs
        records = read.records
        if records.bad is not None:
            c.fail("entry must be [logprob, token_id, text]", field, records.bad)
        ids = _id_array(records.ids)
        missing = np.flatnonzero(ids < 0)
        if len(missing):
            c.fail("entry's token id must be in [0, 2**32)", field, int(missing[0]))
        sources.append(_IdSource(field, ids))
        values, bad = _numbers(records.values)
        logprobs = _Logprobs(field, read.length, values, bad, records.values, records.value_key)
    if item.get("output_ids") is not None:
        sources.append(_id_list(c, c.output_ids, "output_ids"))
    if logprobs is None and (require_logprobs or k is not None or not sources):
        what = "no exact completion token ids and no logprobs" if not sources else "no logprobs"
        c.fail(f"{what} in the response (no {field}): {_SGLANG.ids_advice}.", field)
    _check_alignment(c, sources, logprobs)
    ids = sources[0].ids
    values = top_ids = top_logprobs = None
    if logprobs is not None:
        values = sampled = _check_values(c, logprobs)
    if check_usage and meta.get("completion_tokens") is not None:
        _check_token_count(c, meta["completion_tokens"], "meta_info.completion_tokens", len(ids))
    if k is not None:
        field = "meta_info.output_top_logprobs"
        rows = meta.get("output_top_logprobs")
        if not isinstance(rows, list) or c.output_top_logprobs.length != len(ids):
            c.fail("Missing requested top logprobs", field)
        candidates, top_err = c.output_top_logprobs.rows
        top_ids, top_logprobs = _chosen_heads(c, field, ids, candidates, sampled, k, top_err, _SGLANG_NO_ID)
    finish = meta.get("finish_reason")
    raw = {key: value for key, value in item.items() if key != "output_ids"}
    raw["meta_info"] = {key: value for key, value in meta.items() if key not in _SGLANG_CONSUMED}
    return GenerateChoice(
        index=c.index,  # type: ignore[arg-type]
        completion_ids=ids,
        completion_logprobs=values,
        completion_top_ids=top_ids,
        completion_top_logprobs=top_logprobs,
        finish_reason=finish.get("type") if isinstance(finish, dict) else finish,
        raw=raw,
    )


def parse_sglang_generate_document(
    document: Any,
    k: int | None,
    require_logprobs: bool = True,
    check_usage: bool = True,
    evidence: Any = None,
) -> GenerateResponse:
    """Validate a parsed SGLang ``/generate`` response: one object, or a list of them (a
    batch, or ``n`` > 1), each becoming a choice (``evidence`` as in
    parse_completions_document; by default :func:`extract_sglang_item`)."""
    items = document if isinstance(document, list) else [document]
    if not items:
        raise MalformedResponseError("response must be an object or a non-empty list of objects")
    read = evidence or (lambda index, value: extract_sglang_item(index, value, k))
    parsed = [
        _parse_sglang_item(read(i, item), item, k, require_logprobs, check_usage)
        for i, item in enumerate(items)
    ]
    single = not isinstance(document, list)
    return GenerateResponse(
        choices=parsed,
        request_id=parsed[0].raw["meta_info"].get("id") if single else None,
        usage=None,
        prompt_token_ids=None,
        payload={},
        format=_SGLANG.format,
        top_k=k,
    )


def parse_sglang_generate_response(
    raw: Any, *, top_k: int | None = None, require_logprobs: bool = True, check_usage: bool = True
) -> GenerateResponse:
    """Parse and validate an SGLang ``/generate`` response (see docs/openai.md)."""
    k = check_top_k(top_k)
    return parse_sglang_generate_document(load_document(raw), k, require_logprobs, check_usage)
