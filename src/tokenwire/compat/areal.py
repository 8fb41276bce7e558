"""AReaL's generation parse path on tokenwire's checks: a drop-in that refuses what it passed.

AReaL 1.0.4 posts each generation request with aiohttp (``areal.infra.utils.http.
arequest_with_retry``, ``response.json()``), then hands the parsed body to its backend's
``parse_generation_response``:

- vLLM (``areal.engine.vllm_remote.VLLMBackend`` and the inference service's
  ``VLLMBridgeBackend``): ``int(name.split(":")[1])`` per ``"token_id:N"`` name of
  ``logprobs.tokens`` (completions) or ``logprobs.content`` (chat), the logprobs taken as
  they are (``token_logprobs`` is returned itself);
- SGLang (``areal.engine.sglang_remote.SGLangBackend`` and ``SGLangBridgeBackend``): the
  ids and logprobs of ``meta_info.output_token_logprobs`` triples, and the routing
  (``meta_info.routed_experts``, base64 of int32) reshaped to ``prompt_tokens +
  completion_tokens - 1`` rows.

Nothing compares the ids with the logprobs, the response's own counts, or the routing's
rows: N ids against N+1 logprobs, a ``null``, ``NaN`` or ``-9999`` (vLLM's sentinel)
logprob reach training, and routing one row short passes whenever its values still divide
into the rows.

With :func:`patch`, each backend's ``parse_generation_response`` returns what AReaL's
returns (the same ``HttpGenerationResult``: the same lists, the logprob lists being the
response's own objects as AReaL's are), the ids of ``"token_id:N"`` names read in whole-
string operations rather than a split per token, and refuses:

- ids and logprobs of different counts (``logprobs.tokens`` against ``token_logprobs``; any
  of them against the choice's ``token_ids`` or ``usage.completion_tokens``; SGLang's
  triples against ``meta_info.completion_tokens`` or ``output_ids``);
- a logprob that is not a finite number other than ``-9999``;
- an id that is not an int in ``[0, 2**32)``;
- routing that is not canonical base64 of whole int32 values, does not divide into one
  row per prompt and generation token but the last, is not :data:`routing_width` values a
  row (when it is set: ``layers * topk``), or holds a negative expert id.

Every refusal raises :class:`AReaLResponseError`, a ``tokenwire.MalformedResponseError``
(naming choice, field and token) and so a ``ValueError``: the type AReaL raises for a body
it cannot parse (``"Unexpected vLLM response format."``, a routing that does not reshape),
so its callers' ``except ValueError`` still works. Where AReaL's own parse raises (a missing
key, a name without ``:``), the drop-in runs AReaL's and raises what it raises.

On the generation path the body is read from its bytes: :func:`patch` also wraps
``arequest_with_retry`` where ``RemoteInfEngine.agenerate`` looks it up
(``areal.infra.remote_inf_engine``), and for a generation request (``/v1/completions``,
``/v1/chat/completions``, ``/generate``) on AReaL's aiohttp session, that response's
``json()`` hands the bytes to tokenwire's reader (``parse_completions_response``,
``parse_chat_completions_response``, ``parse_sglang_generate_response``) instead of
``json.loads``: no dict or list per token is made before ``parse_generation_response``, which
then makes AReaL's lists from tokenwire's arrays. This is taken only for one choice whose
every record is a ``"token_id:N"`` name (SGLang: one response, no routing, not aborted) that the
reader accepts; any other body (and every body of other endpoints or callers) is
``json.loads``'s dict and the checks above, so a refusal is the drop-in's as before. A logprob
written as an integer literal comes back as a float on the bytes path (AReaL's ``list[float]``),
where ``json.loads`` keeps the int.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import inspect
import sys
import threading
from collections import Counter
from contextvars import ContextVar
from itertools import repeat
from typing import Any

import numpy as np

import tokenwire

from ..base._errors import MalformedResponseError
from ..read import _select
from ..base._table import KEY
from . import _patching
from ._checks import check_ids, check_logprobs
from .renderers import _token_ids

__all__ = ["AReaLResponseError", "SUPPORTED_VERSIONS", "areal_version", "check_sglang", "check_vllm", "is_patched",
           "patch", "patched", "routing_width", "unpatch"]

SUPPORTED_VERSIONS: tuple[str, ...] = ("1.0.4",)
# (module, class, kind) of every backend whose parse_generation_response is replaced.
BACKENDS: tuple[tuple[str, str, str], ...] = (
    ("areal.engine.vllm_remote", "VLLMBackend", "vllm"),
    ("areal.engine.sglang_remote", "SGLangBackend", "sglang"),
    ("areal.experimental.inference_service.vllm.bridge", "VLLMBridgeBackend", "vllm"),
    ("areal.experimental.inference_service.sglang.bridge", "SGLangBridgeBackend", "sglang"),
)
# Values per routing row (layers * topk) when known: a row short then never passes, even
# when the values divide into the rows. None: the rows are checked by divisibility only.
routing_width: int | None = None
# How often each replacement ran (the pytest plugin reports which tests reached them).
calls: Counter[str] = Counter()


class AReaLResponseError(MalformedResponseError):
    """A response AReaL would have passed to training: a ``tokenwire.MalformedResponseError``,
    so a ``ValueError``, the type AReaL raises for a body it cannot parse."""


def _refuse(reason: str, *, field: str | None = None, token: int | None = None) -> AReaLResponseError:
    return AReaLResponseError(reason, choice=0, field=field, token=token)


def areal_version() -> str | None:
    """The installed AReaL release (None when it is not installed)."""
    try:
        return importlib.metadata.version("areal")
    except importlib.metadata.PackageNotFoundError:
        return None


# --- the checks ----------------------------------------------------------------------------------


def _check_count(count: int, other: Any, what: str, field: str) -> None:
    if other is not None and (type(other) is not int or other != count):
        raise _refuse(f"{count} sampled tokens against {what} {other!r}", field=field)


def check_vllm(response: dict[str, Any], output_tokens: list[int], output_logprobs: Any) -> None:
    """Refuse a vLLM response whose ids (``output_tokens``, as AReaL read them) and logprobs
    do not pair one to one, or disagree with the choice's ``token_ids`` or the usage."""
    choice = response["choices"][0]
    field = "logprobs.token_logprobs" if "tokens" in choice["logprobs"] else "logprobs.content"
    check_logprobs(output_logprobs, field, AReaLResponseError, sentinel=True)
    n = len(output_tokens)
    if len(output_logprobs) != n:
        raise _refuse(f"{n} token ids against {len(output_logprobs)} logprobs", field=field)
    check_ids(output_tokens, field, AReaLResponseError)
    token_ids = choice.get(KEY.token_ids)
    if token_ids is not None:
        if not isinstance(token_ids, list) or len(token_ids) != n:
            raise _refuse(f"{n} sampled tokens against {len(token_ids) if isinstance(token_ids, list) else token_ids!r} "
                          "token_ids", field="token_ids")
        if token_ids != output_tokens:
            t = next(t for t, (a, b) in enumerate(zip(token_ids, output_tokens)) if a != b)
            raise _refuse(f"token_ids holds {token_ids[t]!r} where the logprobs name {output_tokens[t]}",
                          field="token_ids", token=t)
    usage = response.get("usage")
    if isinstance(usage, dict) and len(response["choices"]) == 1:
        _check_count(n, usage.get("completion_tokens"), "usage.completion_tokens", "usage.completion_tokens")


def check_sglang(meta_info: dict[str, Any], output_tokens: list[Any], output_logprobs: list[Any],
                 routed_experts: Any) -> None:
    """Refuse an SGLang ``meta_info`` whose triples disagree with its counts or ``output_ids``,
    hold a logprob that is not finite (or the sentinel), or whose routing (``routed_experts``,
    as AReaL reshaped it, None when there is none) is not one row per token but the last."""
    field = "meta_info.output_token_logprobs"
    check_logprobs(output_logprobs, field, AReaLResponseError, sentinel=True)
    check_ids(output_tokens, field, AReaLResponseError)
    n = len(output_tokens)
    _check_count(n, meta_info.get("completion_tokens"), "meta_info.completion_tokens", field)
    raw = meta_info.get(KEY.routed_experts)
    if raw is not None:
        _check_routing(raw, meta_info)


def _check_routing(raw: Any, meta_info: dict[str, Any]) -> None:
    field = "meta_info.routed_experts"
    if not isinstance(raw, str):
        raise _refuse("routed_experts must be a base64 string", field=field)
    try:
        data = tokenwire.b64decode(raw)
    except MalformedResponseError:
        raise _refuse("routed_experts is not canonical base64", field=field) from None
    if len(data) % 4:
        raise _refuse(f"routed_experts holds {len(data)} bytes, not whole int32 values", field=field)
    values = data.view("<i4")
    rows = meta_info.get("prompt_tokens", 0) + meta_info.get("completion_tokens", 0) - 1
    if rows <= 0 or len(values) % rows:
        raise _refuse(f"routed_experts holds {len(values)} values, which do not divide into {rows} rows "
                      "(one per prompt and generation token but the last)", field=field)
    if routing_width is not None and len(values) != rows * routing_width:
        raise _refuse(f"routed_experts holds {len(values) // routing_width} rows of {routing_width}, not "
                      f"{rows} (one per prompt and generation token but the last)", field=field)
    negative = values < 0
    if negative.any():
        row = int(np.argmax(negative)) // (len(values) // rows)
        raise _refuse("routed_experts holds a negative expert id", field=field, token=row)


# --- the generation response's bytes --------------------------------------------------------------

_ENGINE = "areal.infra.remote_inf_engine"
# AReaL's generation endpoints, and the reader of each one's body.
_READERS = {"/v1/completions": "parse_completions_response",
            "/v1/chat/completions": "parse_chat_completions_response",
            "/generate": "parse_sglang_generate_response"}
_TOKEN_ID_NAME = b'"token_id:'
# The body the running task's json() read last, as (the document handed back, the ids, the
# logprobs, the stop reason), for parse_generation_response of the same task (agenerate calls
# it on that document next, with nothing awaited between).
_read_body: ContextVar[tuple[dict[str, Any], np.ndarray, np.ndarray, Any] | None] = ContextVar(
    "tokenwire_areal_read_body", default=None)


def _read_document(raw: Any, endpoint: str) -> dict[str, Any] | None:
    """The document handed back for a generation body that tokenwire's reader accepts and
    AReaL's parse reads the way the reader does (see the module's docstring); None for any
    other (``json.loads`` then reads it)."""
    if type(raw) is not bytes:
        return None
    try:
        parsed = getattr(_select.kernels, _READERS[endpoint])(raw)
    except MalformedResponseError:
        return None
    if len(parsed.choices) != 1:
        return None
    choice = parsed.choices[0]
    ids, values = choice.completion_ids, choice.completion_logprobs
    if values is None or values.dtype != np.float64:
        return None
    if endpoint == "/generate":
        finish = choice.raw.get(KEY.meta_info, {}).get("finish_reason") if isinstance(choice.raw, dict) else None
        if (choice.routed_experts is not None or not isinstance(finish, dict)
                or finish.get("type") in (None, "abort") or len(ids) == 0):
            return None
        document = {KEY.meta_info: {"finish_reason": finish}}
        stop = finish["type"]
    else:
        # AReaL takes the ids from the names: every record named "token_id:N" (the reader
        # checked each name against the ids), and no such name anywhere else.
        if len(ids) == 0 or raw.count(_TOKEN_ID_NAME) != len(ids):
            return None
        stop = choice.finish_reason
        document = {KEY.choices: [{"finish_reason": stop}]}
    _read_body.set((document, ids, values, stop))
    return document


def _from_body(response: Any) -> tuple[list[int], list[float], Any] | None:
    """AReaL's lists and stop reason for ``response`` when it is the document the running
    task's json() made from the bytes; else None."""
    read = _read_body.get()
    if read is None or read[0] is not response:
        return None
    _read_body.set(None)
    _, ids, values, stop = read
    calls["parse_generation_response from the reader's arrays"] += 1
    return ids.tolist(), values.tolist(), stop


class _BodyResponse:
    """AReaL's aiohttp response, whose ``json()`` gives :func:`_read_document`'s document when
    there is one (else aiohttp's own, from the body already read)."""

    def __init__(self, response: Any, endpoint: str) -> None:
        self._response, self._endpoint = response, endpoint

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)

    async def json(self, **kwargs: Any) -> Any:
        document = _read_document(await self._response.read(), self._endpoint) if not kwargs else None
        return document if document is not None else await self._response.json(**kwargs)


class _BodyRequest:
    """The request context of AReaL's session, entered as a :class:`_BodyResponse`."""

    def __init__(self, request: Any, endpoint: str) -> None:
        self._request, self._endpoint = request, endpoint

    async def __aenter__(self) -> _BodyResponse:
        return _BodyResponse(await self._request.__aenter__(), self._endpoint)

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._request.__aexit__(*exc)


class _BodySession:
    """AReaL's aiohttp session, its ``post`` giving a :class:`_BodyRequest`."""

    def __init__(self, session: Any, endpoint: str) -> None:
        self._session, self._endpoint = session, endpoint

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def post(self, *args: Any, **kwargs: Any) -> _BodyRequest:
        return _BodyRequest(self._session.post(*args, **kwargs), self._endpoint)


def _reading_bytes(theirs: Any) -> Any:
    """AReaL's ``arequest_with_retry``, its generation requests on a given session read from
    the bytes (see :class:`_BodySession`); everything else exactly as AReaL's."""
    signature = inspect.signature(theirs)

    @functools.wraps(theirs)
    async def arequest_with_retry(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        endpoint, session = bound.arguments.get("endpoint"), bound.arguments.get("session")
        if (endpoint in _READERS and session is not None
                and str(bound.arguments.get("method", "POST")).upper() == "POST"):
            bound.arguments["session"] = _BodySession(session, endpoint)
        return await theirs(*bound.args, **bound.kwargs)

    arequest_with_retry.tokenwire_reads_bytes = True  # type: ignore[attr-defined]
    return arequest_with_retry


# --- the replacements ----------------------------------------------------------------------------


def _vllm_parse(self: Any, response: dict[str, Any]) -> Any:
    calls["parse_generation_response (vLLM)"] += 1
    read = _from_body(response)
    if read is not None:
        result_type = _original(type(self)).__globals__["HttpGenerationResult"]
        return result_type(output_tokens=read[0], output_logprobs=read[1], stop_reason=read[2])
    fast = None
    try:
        logprobs = response["choices"][0]["logprobs"]
        if "tokens" in logprobs:
            fast = _token_ids(logprobs["tokens"]), logprobs[KEY.token_logprobs]
        elif "content" in logprobs:
            content = logprobs["content"]
            fast = (_token_ids(list(map(dict.get, content, repeat("token")))),
                    list(map(dict.__getitem__, content, repeat("logprob"))))
    except (TypeError, KeyError, IndexError):  # AReaL's own parse raises what it raises
        fast = None
    if fast is None or fast[0] is None:
        result = _original(type(self))(self, response)
        check_vllm(response, result.output_tokens, result.output_logprobs)
        return result
    ids, values = fast
    tokens = ids.tolist()
    check_vllm(response, tokens, values)
    result_type = _original(type(self)).__globals__["HttpGenerationResult"]
    stop_reason = response["choices"][0]["finish_reason"]
    if stop_reason == "abort" and not tokens:
        return result_type(output_tokens=[], output_logprobs=[], stop_reason=stop_reason)
    return result_type(output_tokens=tokens, output_logprobs=values, stop_reason=stop_reason)


def _sglang_parse(self: Any, response: dict[str, Any]) -> Any:
    calls["parse_generation_response (SGLang)"] += 1
    read = _from_body(response)
    if read is not None:
        result_type = _original(type(self)).__globals__["HttpGenerationResult"]
        return result_type(output_tokens=read[0], output_logprobs=read[1], stop_reason=read[2], routed_experts=None)
    meta_info = response.get(KEY.meta_info) if isinstance(response, dict) else None
    if isinstance(meta_info, dict) and meta_info.get(KEY.routed_experts) is not None:
        _check_routing(meta_info[KEY.routed_experts], meta_info)  # before AReaL's reshape
    result = _original(type(self))(self, response)
    meta_info = response[KEY.meta_info]
    triples = meta_info.get(KEY.output_token_logprobs) or []
    if result.output_tokens or triples:
        check_sglang(meta_info, result.output_tokens, result.output_logprobs, result.routed_experts)
        output_ids = response.get(KEY.output_ids)
        if isinstance(output_ids, list) and output_ids != result.output_tokens:
            raise _refuse(f"output_ids holds {len(output_ids)} ids against {len(result.output_tokens)} "
                          "triples, or other ids", field="output_ids")
    return result



_REPLACEMENTS = {"vllm": _vllm_parse, "sglang": _sglang_parse}

# --- patching ------------------------------------------------------------------------------------

_patch_lock = threading.RLock()
# backend class -> AReaL's own parse_generation_response, for everything patch() replaced.
_saved: dict[type, Any] = {}
# module -> AReaL's own arequest_with_retry, where patch() wrapped it.
_wrapped: dict[str, Any] = {}


def _original(cls: type) -> Any:
    for klass in cls.__mro__:
        if klass in _saved:
            return _saved[klass]
        own = vars(klass).get("parse_generation_response")
        if own is not None and own not in _REPLACEMENTS.values():
            return own
    raise AttributeError(f"{cls.__name__} has no parse_generation_response of AReaL's")


def _backend_classes() -> list[tuple[type, str]]:
    found = []
    for module_name, class_name, kind in BACKENDS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        found.append((getattr(module, class_name), kind))
    return found


def patch() -> None:
    """Replace ``parse_generation_response`` of every AReaL backend class importable (at
    least one must be). Idempotent; :func:`unpatch` undoes it. ``RuntimeError`` (patching
    nothing) for an AReaL release not in :data:`SUPPORTED_VERSIONS`."""
    with _patch_lock:
        version = areal_version()
        if version not in SUPPORTED_VERSIONS:
            raise RuntimeError(f"tokenwire.compat.areal follows AReaL {', '.join(SUPPORTED_VERSIONS)}, "
                               f"not {version}")
        classes = _backend_classes()
        if not classes:
            raise ImportError("tokenwire.compat.areal: none of AReaL's backend modules imports")
        for cls, kind in classes:
            if cls not in _saved:
                _saved[cls] = vars(cls)["parse_generation_response"]
            cls.parse_generation_response = _REPLACEMENTS[kind]
        try:
            engine = importlib.import_module(_ENGINE)
        except ImportError:
            engine = None
        theirs = getattr(engine, "arequest_with_retry", None)
        if theirs is not None and not getattr(theirs, "tokenwire_reads_bytes", False):
            _wrapped[_ENGINE] = theirs
            engine.arequest_with_retry = _reading_bytes(theirs)


def unpatch() -> None:
    """Put AReaL's own back wherever :func:`patch` replaced them."""
    with _patch_lock:
        for cls, original in list(_saved.items()):
            cls.parse_generation_response = original
        _saved.clear()
        for module_name, theirs in list(_wrapped.items()):
            module = sys.modules.get(module_name)
            if module is not None and getattr(module.arequest_with_retry, "__wrapped__", None) is theirs:
                module.arequest_with_retry = theirs
        _wrapped.clear()


def is_patched() -> bool:
    """Whether every backend class :func:`patch` replaced still holds the replacement."""
    return bool(_saved) and all(vars(cls).get("parse_generation_response") in _REPLACEMENTS.values()
                                for cls in _saved)


def patched() -> contextlib.AbstractContextManager[None]:
    """``with patched():`` runs the block with :func:`patch` in effect, then restores."""
    return _patching.block(_patch_lock, lambda: bool(_saved), patch, unpatch)

