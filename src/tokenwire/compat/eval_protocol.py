"""eval-protocol's Fireworks ``/v1/completions`` client on tokenwire's reader: a drop-in.

eval-protocol's ``FireworksV1CompletionsClient.create_completion_from_prompt_ids``
(``eval_protocol/integrations/fireworks_v1_completions_client.py``) sends token ids to
Fireworks through the Fireworks SDK (``AsyncFireworks``), has the SDK build a pydantic object
per token of ``choices[0].logprobs.content``, dumps it to a dict per token with
``model_dump()``, and reads ``token_id`` and ``sampling_logprob`` entry by entry. It checks
that each entry has both, and nothing else: a ``content`` one entry longer than ``usage``
says (N ids and logprobs for N - 1 tokens), a ``-9999`` or a NaN logprob all pass.

:func:`patch` replaces that method on the class (every name eval-protocol exports it under
is the same class) with :func:`create_completion_from_prompt_ids`: the same request through
the same SDK client (``with_raw_response``, so the SDK's own retries and errors, and
eval-protocol's retry loop around them, are kept), the body's bytes read by tokenwire's
parser (the ids and the logprobs in the compiled kernels, no object per token), the rest of
the result built from the SDK's own model of the response without its per-token list. On a
response eval-protocol accepts and tokenwire finds well formed, the result is equal, key by
key and value by value (lists of Python ints and floats), to eval-protocol's.

Every refusal raises :class:`MalformedFireworksResponseError`, a
:class:`tokenwire.MalformedResponseError` (so a ``ValueError``) and a ``RuntimeError``,
eval-protocol's two error types here, so its callers' ``except`` clauses keep working. Where
eval-protocol itself refuses the response (no choices, no ``content[]`` entries, an entry
without ``token_id`` or ``sampling_logprob``), ``str(exc)`` is eval-protocol's own message;
everywhere else it is tokenwire's, naming choice, field and token
(``docs/migrating-from-eval-protocol.md`` lists them).

:func:`unpatch` puts eval-protocol's method back; :func:`patched` does both around a block.
An eval-protocol release not in :data:`SUPPORTED_VERSIONS` is refused (``RuntimeError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.metadata
import json
import logging
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..read import _select
from ..base._errors import MalformedResponseError, location
from ..extract.python import extract_openai_choice
from ..rules.openai import parse_completions_document
from . import _patching
from .openai import body_of

__all__ = ["CLIENT_CLASS", "CLIENT_MODULE", "MalformedFireworksResponseError", "create_completion_from_prompt_ids",
           "eval_protocol_version", "original", *_patching.API]

CLIENT_MODULE = "eval_protocol.integrations.fireworks_v1_completions_client"
CLIENT_CLASS = "FireworksV1CompletionsClient"
_METHOD = "create_completion_from_prompt_ids"
# The releases whose client module this drop-in follows (its request, retry loop and result).
SUPPORTED_VERSIONS: tuple[str, ...] = ("0.3.33",)
# How many times the patched method ran in this process (the pytest plugin reports it).
calls = 0

# eval-protocol's retry loop around the SDK call (the SDK retries inside it, too).
_MAX_RETRIES = 40
_BASE_DELAY = 10.0
_MAX_DELAY = 60.0
_TRANSIENT_STATUS = (425, 429, 502, 503, 504)
_TRANSIENT_TEXT = ("model_not_ready", "hot loading", "Model not found", "DEPLOYMENT_SCALING_UP")

# eval-protocol's messages for the responses it refuses itself.
_NO_CHOICES = "Fireworks /v1/completions response did not include choices"
_NO_CONTENT = (
    "Fireworks /v1/completions returned no content[] logprobs entries. "
    "This client requires the boolean logprobs=True (content) shape to "
    "recover exact per-token ids and sampling logprobs. Refusing to "
    "re-encode decoded text: retokenization drops the end-of-turn token "
    "and misaligns per-token logprobs, corrupting inference KLD. "
    "choice keys={keys}"
)
_NO_TOKEN_ID = (
    "Fireworks /v1/completions content[] entry is missing token_id "
    "at index {index}; cannot align per-token logprobs to token ids "
    "without re-encoding. Refusing to return corrupted data."
)
_NO_SAMPLING_LOGPROB = (
    "Fireworks /v1/completions content[] entry is missing "
    "sampling_logprob at index {index}. The sampling logprob is the "
    "exact value the sampler drew with and is required for correct "
    "inference KLD; refusing to substitute the rounded logprob or 0.0."
)
_CONTENT = "logprobs.content"


class MalformedFireworksResponseError(MalformedResponseError, RuntimeError):
    """A Fireworks completions response eval-protocol's client must not return.

    Both a :class:`tokenwire.MalformedResponseError` (a ``ValueError``, which is what
    eval-protocol raises for a response without choices) and a ``RuntimeError`` (what it
    raises for a missing ``content[]`` entry, ``token_id`` or ``sampling_logprob``).
    ``choice``, ``field`` and ``token`` say where. Where eval-protocol refuses the response
    too, ``str(exc)`` is eval-protocol's message alone (``reason`` too) and ``tokenwire_reason``
    is what tokenwire said; elsewhere both are tokenwire's.
    """

    tokenwire_reason: str | None = None

    @classmethod
    def theirs(cls, reason: str, found: MalformedResponseError | None, **where: Any) -> MalformedFireworksResponseError:
        exc = cls(reason, **where)
        exc.args = (reason,)  # str(exc): eval-protocol's message, as its callers match it
        exc.tokenwire_reason = None if found is None else str(found)
        return exc

    @property
    def location(self) -> str:
        """Where in the response, e.g. ``choices[0].logprobs.content[3]`` (may be empty)."""
        return location(self.choice, self.field, self.token)


# --- the release followed ------------------------------------------------------------------------


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version("eval-protocol")
    except importlib.metadata.PackageNotFoundError:
        return None


def eval_protocol_version() -> str:
    """The installed eval-protocol release; ``RuntimeError`` naming the supported ones when it
    is not among :data:`SUPPORTED_VERSIONS` (or is not installed)."""
    version = _installed_version()
    if version not in SUPPORTED_VERSIONS:
        raise RuntimeError(
            f"tokenwire.compat.eval_protocol does not support eval-protocol {version or '(not installed)'}; "
            f"it follows eval-protocol {', '.join(SUPPORTED_VERSIONS)}. Install one of those "
            f"(pip install 'eval-protocol=={SUPPORTED_VERSIONS[-1]}'), or read the responses with "
            "tokenwire.parse_completions_response."
        )
    return version


# --- eval-protocol's own decisions, for the error path ---------------------------------------------


def _their_refusal(document: Any) -> tuple[str, dict[str, Any]] | None:
    """What eval-protocol refuses in a response as its SDK hands it over (``document``: the
    body as ``json.loads`` reads it, NaN and Infinity included, or the dict a client's object
    dumped): its message and where; None when it would accept the response."""
    choices = document.get("choices") if isinstance(document, dict) else None
    if not choices:
        return _NO_CHOICES, {"field": "choices"}
    choice = choices[0]
    if not isinstance(choice, dict):
        return None  # eval-protocol fails on it with an AttributeError, not a decision of its own
    logprobs = choice.get("logprobs")
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not entries:
        return _NO_CONTENT.format(keys=list(choice.keys())), {"choice": 0, "field": "logprobs"}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or entry.get("token_id") is None:
            return _NO_TOKEN_ID.format(index=index), {"choice": 0, "field": _CONTENT, "token": index}
        if entry.get("sampling_logprob") is None:
            return _NO_SAMPLING_LOGPROB.format(index=index), {"choice": 0, "field": _CONTENT, "token": index}
    return None


def _non_finite(document: Any) -> tuple[str, int] | None:
    """The first ``choices[0].logprobs.content`` entry whose logprob is NaN or infinite (the
    body held a ``NaN``/``Infinity`` literal, which is not JSON and which tokenwire therefore
    refuses as invalid JSON), as a reason and its index."""
    try:
        entries = document["choices"][0]["logprobs"]["content"]
        for index, entry in enumerate(entries):
            for key in ("sampling_logprob", "logprob"):
                value = entry.get(key)
                if isinstance(value, float) and not math.isfinite(value):
                    return (f"{key} is {value!r} (sent as a NaN or Infinity literal, which JSON cannot carry): "
                            "the token carries no sampling evidence"), index
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    return None


def _refuse(found: MalformedResponseError, view: Callable[[], Any]) -> MalformedFireworksResponseError:
    """The error for a response tokenwire refused: eval-protocol's message where it refuses the
    response too (``view()``: the response as eval-protocol sees it), tokenwire's elsewhere
    (its location kept)."""
    try:
        document = view()
    except (ValueError, RecursionError, TypeError):  # not even Python's json reads it
        document = None
    theirs = _their_refusal(document) if document is not None else None
    if theirs is not None:
        return MalformedFireworksResponseError.theirs(theirs[0], found, **theirs[1])
    if found.choice is None and found.field is None and document is not None:
        named = _non_finite(document)  # NaN or Infinity, which only Python's json reads
        if named is not None:
            exc = MalformedFireworksResponseError(named[0], choice=0, field=_CONTENT, token=named[1])
            exc.tokenwire_reason = str(found)
            return exc
    exc = MalformedFireworksResponseError(found.reason, choice=found.choice, field=found.field, token=found.token)
    exc.tokenwire_reason = str(found)
    return exc


# --- reading the response ------------------------------------------------------------------------


def _read(sent: Any, view: Callable[[], Any]) -> tuple[Any, Any]:
    """tokenwire's parse of the response (bytes, or a dict a client object dumped), and the
    evidence of its first choice (what its ``logprobs.content`` records were read as).
    ``view()`` gives the response as eval-protocol sees it, for the messages of a refusal."""
    read: list[Any] = []
    top = None
    if isinstance(sent, dict):
        document = sent
    else:
        try:
            document, top, read = _select.impl.extract_openai(sent)
        except MalformedResponseError as exc:  # not JSON (NaN, Infinity): eval-protocol's SDK reads them
            raise _refuse(exc, view) from exc
    seen: dict[int | None, Any] = {}

    def evidence(index: int | None, value: Any) -> Any:
        if index is None and top is not None:
            c = top
        elif index is not None and index < len(read):
            c = read[index]
        else:  # past the records the compiled scan read (a choice that must fail), or a dict
            c = extract_openai_choice(index, value, None)
        seen[index] = c
        return c

    try:
        response = parse_completions_document(document, None, True, True, evidence)
    except MalformedResponseError as exc:
        raise _refuse(exc, view) from exc
    return response, seen.get(0)


def _content_records(first: Any) -> Any:
    """The first choice's ``logprobs.content`` records as tokenwire read them (None: none)."""
    read = getattr(first, "logprobs_content", None)
    return getattr(read, "records", None)


def _check_their_shape(response: Any, first: Any, view: Callable[[], Any]) -> None:
    """eval-protocol's own refusals that tokenwire's rules do not make: tokenwire takes ids and
    logprobs from other sources too (``token_ids``, ``token_logprobs``, ``raw_output``) and an
    entry's ``logprob`` when no entry has ``sampling_logprob``; eval-protocol takes only
    ``choices[0].logprobs.content[]``, each entry's ``token_id`` and ``sampling_logprob``."""
    records = _content_records(first)
    choice = response.choices[0]
    ids = None if records is None else records.ids
    named = ids is not None and len(ids) > 0 and (
        bool((ids >= 0).all()) if isinstance(ids, np.ndarray) else all(i is not None for i in ids))
    if (records is None or not named or records.value_key != "sampling_logprob"
            or len(ids) != len(choice.completion_ids) or "logprobs" in choice.raw):
        theirs = _their_refusal(view())
        if theirs is None:  # cannot happen: tokenwire read the content records it accepted
            raise MalformedFireworksResponseError(
                "the completion's ids and logprobs were not read from logprobs.content", choice=0, field=_CONTENT)
        raise MalformedFireworksResponseError.theirs(theirs[0], None, **theirs[1])


def _model_of_rest(client: Any, raw: Any, response: Any, choice: Any) -> dict[str, Any]:
    """The response as eval-protocol's ``response.model_dump()`` gives it, but for the per-token
    fields (``choices[0].logprobs``, ``token_ids``, ``prompt_token_ids``), which are left out:
    the SDK's own model (``_process_response_data``, the code ``create`` runs) of the rest."""
    rest = {key: value for key, value in choice.raw.items() if key not in ("logprobs", "prompt_token_ids")}
    rest.update(index=choice.index, finish_reason=choice.finish_reason)
    return _sdk_model(client, raw, {**response.payload, "choices": [rest]})


def _sdk_model(client: Any, raw: Any, data: Any) -> Any:
    """``data`` as the SDK's ``create`` would have returned it, dumped: its own
    ``_process_response_data`` (the model it builds, strict or not as the client is set up),
    then ``model_dump()``; ``data`` itself for a client without that method."""
    process = getattr(client, "_process_response_data", None)
    cast_to = getattr(raw, "_cast_to", None)
    if process is None or cast_to is None:
        return data
    model = process(data=data, cast_to=cast_to, response=getattr(raw, "http_response", None))
    return model.model_dump() if hasattr(model, "model_dump") else dict(model)


async def _send(self: Any, payload: dict[str, Any], logger: logging.Logger) -> tuple[Any, Any]:
    """eval-protocol's request and retry loop; the SDK's raw response (the body unparsed),
    or, for a client object without ``with_raw_response``, what its ``create`` returned."""
    completions = self._client.completions
    raw_create = getattr(getattr(completions, "with_raw_response", None), "create", None)
    for attempt in range(_MAX_RETRIES + 1):
        try:
            if raw_create is not None:
                return await raw_create(**payload), True
            return await completions.create(**payload), False
        except Exception as exc:
            status = getattr(exc, "status_code", None) or getattr(exc, "status", None)
            text = str(exc)
            transient = status in _TRANSIENT_STATUS or any(marker in text for marker in _TRANSIENT_TEXT)
            if not transient or attempt >= _MAX_RETRIES:
                raise
            delay = min(_BASE_DELAY * (2 ** attempt), _MAX_DELAY)
            logger.info("Retryable error (attempt %d/%d, status=%s), retrying in %.1fs: %s",
                        attempt + 1, _MAX_RETRIES, status, delay, text[:200])
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _ints(values: Any) -> list[int]:
    return values.tolist() if isinstance(values, np.ndarray) else [int(x) for x in values]


async def create_completion_from_prompt_ids(
    self: Any,
    *,
    prompt_token_ids: list[int],
    tools: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """eval-protocol's ``create_completion_from_prompt_ids`` with the response read by
    tokenwire: the same request, retries and result (see the module's docs); every response
    eval-protocol would return misaligned is refused with
    :class:`MalformedFireworksResponseError`."""
    global calls
    calls += 1
    module = importlib.import_module(CLIENT_MODULE)
    active_tools = tools if tools is not None else (self.default_tools or None)
    normalized_prompt = [int(x) for x in list(prompt_token_ids)]
    payload: dict[str, Any] = {
        **self.request_params,
        "model": self.model_id,
        "prompt": normalized_prompt,
        "temperature": self.temperature,
        "max_tokens": self.max_tokens,
        "logprobs": True if self.logprobs else None,
    }
    if not self.logprobs:
        payload.pop("logprobs", None)

    raw, is_raw = await _send(self, payload, module.logger)
    if is_raw:
        sent: Any = body_of(raw)

        def view() -> Any:  # what eval-protocol's response.model_dump() gives, for the error path
            return _sdk_model(self._client, raw, json.loads(sent))
    else:  # a client object of its own (eval-protocol's tests use one): its dump is the response
        sent = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)

        def view() -> Any:
            return sent
    response, first = _read(sent, view)
    _check_their_shape(response, first, view)
    choice = response.choices[0]
    completion_ids = choice.completion_ids.tolist()
    completion_logprobs = choice.completion_logprobs.tolist()

    if is_raw:
        rest = _model_of_rest(self._client, raw, response, choice)
        choice_dict = rest["choices"][0]
    else:
        rest = sent
        choice_dict = sent["choices"][0]
    finish_reason = str(choice_dict.get("finish_reason") or "unknown")
    raw_output = choice_dict.get("raw_output") if isinstance(choice_dict.get("raw_output"), dict) else {}
    sent_prompt = choice.raw.get("prompt_token_ids")
    if sent_prompt is not None and len(sent_prompt):
        choice_prompt = _ints(sent_prompt)
    else:
        choice_prompt = module._normalize_token_id_sequence(
            raw_output.get("prompt_token_ids") or normalized_prompt)

    completion_text = self.decode_token_ids(token_ids=completion_ids)
    if not completion_text:
        completion_text = str(choice_dict.get("text") or "")

    if self.tool_call_parser is not None:
        parsed_output = self.tool_call_parser(completion_text, completion_ids, active_tools)
        parsed_tool_call = parsed_output.get("parsed_tool_call")
        assistant_content = str(parsed_output.get("assistant_content", "") or "")
        parser_name = str(parsed_output.get("parser", "external"))
        message: dict[str, Any] = {"role": "assistant", "content": assistant_content}
        if parsed_tool_call is not None:
            message["tool_calls"] = module.to_openai_tool_calls(parsed_tool_call)
    else:
        message = {"role": "assistant", "content": module.strip_chat_special_tokens(completion_text)}
        parser_name = "none"

    usage = rest.get("usage") or {}
    usage_payload = {
        "prompt_tokens": int(usage.get("prompt_tokens", len(choice_prompt))),
        "completion_tokens": int(usage.get("completion_tokens", len(completion_ids))),
        "total_tokens": int(usage.get("total_tokens", len(choice_prompt) + len(completion_ids))),
    }
    result: dict[str, Any] = {
        "choices": [
            {
                "message": message,
                "finish_reason": finish_reason,
                "raw_output": {**dict(raw_output or {}), "tool_call_parser": parser_name},
            }
        ],
        "usage": usage_payload,
        "prompt_ids": list(choice_prompt),
        "completion_ids": completion_ids,
        "finish_reason": finish_reason,
        "raw_output": {**dict(raw_output or {}), "tool_call_parser": parser_name},
    }
    if completion_logprobs:
        result["completion_logprobs"] = completion_logprobs
    return result


# --- the patch -----------------------------------------------------------------------------------

_lock = threading.RLock()
_original: Any = None
_depth = 0
_owned = False  # whether the outermost patched() block applied the patch (and so removes it)


def _client_class() -> Any:
    return getattr(importlib.import_module(CLIENT_MODULE), CLIENT_CLASS)


def patch() -> None:
    """Put :func:`create_completion_from_prompt_ids` on eval-protocol's
    ``FireworksV1CompletionsClient`` (idempotent). ``ImportError`` when eval-protocol is not
    importable, ``RuntimeError`` for a release not in :data:`SUPPORTED_VERSIONS`."""
    global _original
    with _lock:
        eval_protocol_version()
        cls = _client_class()
        current = cls.__dict__.get(_METHOD)
        if current is create_completion_from_prompt_ids:
            return
        if current is None:
            raise RuntimeError(f"{CLIENT_MODULE}.{CLIENT_CLASS} has no {_METHOD} of its own to replace")
        _original = current
        setattr(cls, _METHOD, create_completion_from_prompt_ids)


def unpatch() -> None:
    """Put eval-protocol's own method back (harmless when not patched; a method someone
    else put there since is left alone)."""
    global _original
    with _lock:
        if _original is None:
            return
        cls = _client_class()
        if cls.__dict__.get(_METHOD) is create_completion_from_prompt_ids:
            setattr(cls, _METHOD, _original)
        _original = None


def is_patched() -> bool:
    """Whether eval-protocol's client class runs on this module now."""
    try:
        cls = _client_class()
    except ImportError:
        return False
    return cls.__dict__.get(_METHOD) is create_completion_from_prompt_ids


def original() -> Any:
    """eval-protocol's own ``create_completion_from_prompt_ids`` (the function on the class
    before :func:`patch`; the class's current one when not patched)."""
    return _original if _original is not None else _client_class().__dict__[_METHOD]


@contextlib.contextmanager
def patched() -> Iterator[Any]:
    """:func:`patch` for the block, then :func:`unpatch` (nested blocks share one patch,
    removed when the outermost ends). Yields eval-protocol's client class."""
    global _depth, _owned
    with _lock:
        if _depth == 0:
            _owned = not is_patched()
            patch()
        _depth += 1
    try:
        yield _client_class()
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _owned:
                unpatch()
