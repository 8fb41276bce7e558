"""SkyRL's generation client on tokenwire's checks: a drop-in that refuses what it passed.

SkyRL 0.4.0 generates through ``RemoteInferenceClient._generate_single``, which calls
``RemoteGenerateClient.generate``
(``skyrl.backends.skyrl_train.inference_servers.remote_inference_client``): one aiohttp POST
(``_post``: the body read whole, ``orjson.loads``, or for the packed side channels
``generate_wire.load_packed_body``), then ``token_ids`` taken as they are, one
``record["logprob"]`` per record of ``logprobs.content``, and the routing
(``routed_experts``, a ``{data, shape, dtype}`` envelope) decoded by
``generate_wire.decode_packed_routed_experts`` (``pybase64`` and ``np.frombuffer``).

Nothing compares the logprobs with the ids or the routing's rows with the tokens: N ids
against N+1 logprobs, a ``null`` logprob (``None`` in the list) and routing one row short
reach the generator. SkyRL's own server (``/skyrl/v1/generate``) writes each record as
``{"logprob": x}`` (no token field) and writes ``-9999.0`` (``CLAMPED_LOGPROB``) on purpose
for a logprob vLLM left out or made non-finite, and the client hands it on as a logprob.

With :func:`patch`, ``RemoteGenerateClient.generate`` returns what SkyRL's returns (its own
``RemoteGenerateResult``, from its own code) and refuses, raising
:class:`SkyRLResponseError` (a ``tokenwire.MalformedResponseError`` naming choice, field and
token, and so a ``ValueError``, the type SkyRL raises for a packed envelope it cannot decode):

- when the request asked for logprobs (``sampling_params["logprobs"]`` not None, SkyRL's own
  test): logprobs and ids of different counts (``logprobs.content`` against ``token_ids``),
  or a non-empty completion without logprobs (``logprobs`` null, or its ``content`` absent,
  null or empty: SkyRL reads ``response_logprobs`` None, and the trainer that asked for them
  would get None); a logprob that is not a finite number (``null``, a string, ``NaN`` or an
  infinity);
- an id that is not an int in ``[0, 2**32)``;
- routing whose rows are not one per token from ``routed_experts_prompt_start`` (0 when not
  given) to the last but one (``prompt - start + completion - 1``, the count SkyRL's
  ``RoutedExpertTrace`` expects), and a sample support whose rows are not one per token.

Logprobs the request did not ask for are no evidence anyone asked for: a real vLLM sends
``logprobs: null`` then, and SkyRL's ``RemoteInferenceClient.generate``, the one caller of
``_generate_single``, drops ``response_logprobs`` when ``sampling_params["logprobs"]`` is None
(its ``get_logprobs``), so they never reach the generator. The drop-in hands them on unchecked,
exactly as SkyRL read them (a direct caller of ``RemoteGenerateClient.generate`` that asked for
none gets what the server sent, as from SkyRL); ids, routing and sample support are checked
all the same.

SkyRL's clamp stays SkyRL's contract, made visible: a response holding ``-9999.0`` logprobs
gives its ``response_logprobs`` as a :class:`ClampedLogprobs`, the same list of the same
values (a ``list`` subclass) with ``clamped``, a bool array marking each clamped token, and
``clamped_tokens``, their positions; the drop-in logs a warning naming them and counts them in
``calls["clamped tokens"]``. A response without one gives a plain ``list`` as SkyRL does. Set
:data:`refuse_clamped` to refuse them instead. What SkyRL itself refuses keeps its error: a body
that is not JSON (a ``NaN`` literal) is still ``orjson.JSONDecodeError`` and retried by
``_post``; a malformed envelope is still SkyRL's ``ValueError``. The EOS the generator appends
after a stop string, with a placeholder ``0.0`` logprob that its loss mask then hides, is the
generator's, after the client, and is not touched.

On the path the trainer takes (``RemoteInferenceClient._generate_single``, which keeps only the
ids, logprobs, stop reason and side channels) the body is read from its bytes when tokenwire's
reader accepts it: ``orjson.loads`` and ``load_packed_body`` as ``_post`` looks them up hand the
bytes to the compiled reader, and SkyRL's document is made from its arrays, no dict per record.
That covers vLLM's records without routing (read by their ``"token_id:N"`` names, each matching
its id; a body whose names do not is left to SkyRL's read, which takes each ``logprob`` by
position; on ``/inference/v1/generate``, where SkyRL reads no routing, such a body goes to the
reader as it is, not searched for an envelope first, and one in whose choice the reader finds
routing is left to SkyRL's read) and SkyRL's own token-less records (``{"logprob": x}``, which
SkyRL reads by position and never by a token: the reader reads them as it reads records by
position, its ``output_mode: "text"``, each still an object whose ``logprob`` is a finite
number, one per id; on a body with routing every record is read so, vLLM's named records too,
their names not compared), with its routing envelope (its place taken, for the reader, by an
envelope of no rows shaped anew for each call, which the reader must report at the choice's own
``routed_experts``; the ``data`` a view of the body, as SkyRL's splice leaves it, decoded by
``decode_packed_routed_experts`` as the client module looks it up: a uint8 envelope by
tokenwire's ``b64decode`` into SkyRL's array, any other by SkyRL's own); one choice, finite
logprobs, none the clamp, a request that asked for logprobs, the logprobs in
``logprobs.content`` (SkyRL's one source: no key of another transport,
``logprobs.sampled``, ``completion_logprobs`` or ``compact_logprobs``, in the body, and no
escape, with which a key may be spelled), no other packed envelope. That result's
``raw_response`` (which ``_generate_single`` drops) then holds the choice's ``token_ids``,
``finish_reason`` and routing envelope only. Every other body (a clamped logprob, records the
reader refuses, a sample support, a request without logprobs, other endpoints, a direct call of
``RemoteGenerateClient.generate``, whose ``raw_response`` is the whole document) is read by
SkyRL's own code and checked after it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.metadata
import logging
import secrets
import threading
from collections import Counter
from contextvars import ContextVar
from typing import Any

import numpy as np

from ..base._errors import MalformedResponseError
from ..base import _json
from ..base._table import KEY
from ..base._wire import VLLM_LOGPROB_SENTINEL
from ..read import _select
from . import _patching, distribution_version
from ._checks import check_ids, check_logprobs

__all__ = ["ClampedLogprobs", "SUPPORTED_VERSIONS", "SkyRLResponseError", "check_response", "is_patched", "patch",
           "patched", "refuse_clamped", "skyrl_version", "unpatch"]

SUPPORTED_VERSIONS: tuple[str, ...] = ("0.4.0",)
CLIENT_MODULE = "skyrl.backends.skyrl_train.inference_servers.remote_inference_client"
# SkyRL's CLAMPED_LOGPROB, vLLM's floor: the same number.
CLAMPED_LOGPROB = VLLM_LOGPROB_SENTINEL
# True: a -9999.0 logprob is refused like any other defect instead of flagged.
refuse_clamped: bool = False
# How often each replacement ran (the pytest plugin reports which tests reached them).
calls: Counter[str] = Counter()
_log = logging.getLogger(__name__)


class SkyRLResponseError(MalformedResponseError):
    """A response SkyRL would have passed to the generator: a ``tokenwire.MalformedResponseError``,
    so a ``ValueError``, the type SkyRL raises for a side channel it cannot decode."""


class ClampedLogprobs(list):
    """``response_logprobs`` of a response holding SkyRL's clamped ``-9999.0``: the values as
    sent, with ``clamped`` (a bool array, True at each clamped token) and ``clamped_tokens``
    (their positions)."""

    clamped: np.ndarray
    clamped_tokens: list[int]


def _refuse(reason: str, **where: Any) -> SkyRLResponseError:
    """The refusal of the response's one choice, at ``field`` (and ``token``) when given."""
    return SkyRLResponseError(reason, choice=0, **where)


def skyrl_version() -> str | None:
    """The installed SkyRL release (None when it is not installed)."""
    return distribution_version("skyrl")


# --- the checks ----------------------------------------------------------------------------------


def _check_logprobs(values: list[Any], n: int) -> np.ndarray | None:
    """Refuse unless ``values`` are ``n`` finite numbers; the mask of SkyRL's clamped ones
    (None when there is none)."""
    field = "logprobs.content"
    if len(values) != n:
        raise _refuse(f"{n} token ids against {len(values)} logprobs", field=field)
    array = check_logprobs(values, field, SkyRLResponseError, sentinel=False)
    clamped = array == CLAMPED_LOGPROB
    if not clamped.any():
        return None
    if refuse_clamped:
        raise _refuse("the sampled token's logprob is SkyRL's clamp -9999.0 (missing or non-finite at the "
                      "server)", field=field, token=int(np.argmax(clamped)))
    return clamped


def check_response(document: Any, result: Any, *, prompt_tokens: int | None = None,
                   routing_start: int | None = None, logprobs_asked: bool = True) -> Any:
    """Check SkyRL's ``RemoteGenerateResult`` ``result`` against the body ``document`` it was
    read from (None: the drop-in read the body itself and checked its logprobs) and the
    request (the prompt's length, ``routed_experts_prompt_start``, whether its
    ``sampling_params`` asked for logprobs); give ``result``, its ``response_logprobs`` a
    :class:`ClampedLogprobs` when some are SkyRL's clamp. Logprobs the request did not ask for
    are not checked and handed on as SkyRL read them (its ``RemoteInferenceClient.generate``
    drops them); ids, routing and sample support are checked always."""
    n = len(result.response_ids) if document is None else check_ids(result.response_ids, KEY.token_ids,
                                                                              SkyRLResponseError)
    if document is not None and logprobs_asked:
        values = result.response_logprobs
        if values is None:
            # SkyRL reads a logprobs block that is null, or whose content is absent, null or
            # empty, as no logprobs: the trainer that asked for them would get None for them
            if n:
                raise _refuse(f"{n} token ids against 0 logprobs", field="logprobs.content")
        else:
            clamped = _check_logprobs(values, n)
            if clamped is not None:
                flagged = ClampedLogprobs(values)
                flagged.clamped = clamped
                flagged.clamped_tokens = np.flatnonzero(clamped).tolist()
                calls["clamped tokens"] += len(flagged.clamped_tokens)
                _log.warning("tokenwire.compat.skyrl: %d of %d sampled logprobs are SkyRL's clamp -9999.0 "
                             "(tokens %s); marked in response_logprobs.clamped", len(flagged.clamped_tokens), n,
                             flagged.clamped_tokens[:8])
                result = dataclasses.replace(result, response_logprobs=flagged)
    if result.routed_experts is not None and prompt_tokens is not None:
        rows = _select.kernels.routed_row_count(n, prompt_tokens, routing_start or 0)
        got = result.routed_experts.shape[0]
        if got != rows:
            raise _refuse(f"routed_experts holds {got} rows, not {rows} (one per token from "
                          f"routed_experts_prompt_start {routing_start or 0} to the last generated token but one)",
                          field=KEY.routed_experts)
    if result.sample_support is not None and result.sample_support.shape[0] != n:
        raise _refuse(f"rollout_sample_support holds {result.sample_support.shape[0]} rows for {n} generated "
                      "tokens", field="rollout_sample_support")
    return result


# --- the body's bytes ------------------------------------------------------------------------------


@dataclasses.dataclass
class _Reading:
    """One ``generate`` call's state: whether its body may be read from the bytes, and what
    the reader gave (the document handed to SkyRL and the logprobs)."""

    from_bytes: bool
    document: Any = None
    values: np.ndarray | None = None


# What vLLM's records name their tokens with: "token": "token_id:N", or a "token_id" member.
_NAMED, _NUMBERED = b'"token_id:', b'"token_id":'
_reading: ContextVar[_Reading | None] = ContextVar("tokenwire_skyrl_reading", default=None)
# Set by _generate_single, whose caller never sees raw_response.
_raw_dropped: ContextVar[bool] = ContextVar("tokenwire_skyrl_raw_dropped", default=False)


# SkyRL's routing envelope as its server's orjson writes it; the anchor its splice finds every
# packed envelope by (generate_wire's _PACKED_DATA_ANCHOR); what stands in the envelope's place
# for the reader (an envelope of no rows, shaped anew for each call so that no envelope the body
# holds itself can pass for it, which the reader reports only at the choice's own
# "routed_experts"); what the reader is told of SkyRL's token-less records: they stand for
# token_ids by position (the reader's output_mode "text", whose records carry no id it reads;
# the body's own output_mode, later, wins); the keys of the logprob transports other than
# logprobs.content, which SkyRL does not read (the reader would take its logprobs from them).
_ENVELOPE = f'"{KEY.routed_experts}":{{"{KEY.data}":"'.encode()
_ANCHOR = f':{{"{KEY.data}":"'.encode()
_STAND_IN = f'"{KEY.routed_experts}":{{"{KEY.data}":"","shape":[0,%d,%d],"dtype":"uint8"}}'.encode()
_BY_POSITION = b'{"output_mode":"text",'
_ROUTED_KEYS = frozenset((KEY.data, "shape", "dtype"))  # SkyRL's envelope
_OTHER_TRANSPORTS = tuple(f'"{key}"'.encode() for key in (KEY.sampled, KEY.completion_logprobs, KEY.compact_logprobs))


# Each key of _OTHER_TRANSPORTS holds an "m" 3 bytes in ('"sam', '"com'): they are found by
# it (memchr's search; no body's ids, numbers or records hold one), every other "m" looked at
# but _M_LIMIT times before the body is left to SkyRL's read.
_M_AT, _M_LIMIT = 3, 4096


def _another_transport(raw: bytes, start: int, end: int) -> bool:
    """Whether ``raw[start:end]`` may name a logprob transport SkyRL does not read (a key of
    :data:`_OTHER_TRANSPORTS`), or holds an escape (with which a key may be spelled)."""
    if raw.find(b"\\", start, end) >= 0:
        return True
    m = raw.find(b"m", start, end)
    for _ in range(_M_LIMIT):
        if m < 0:
            return False
        if m - _M_AT >= start and any(raw.startswith(key, m - _M_AT, end) for key in _OTHER_TRANSPORTS):
            return True
        m = raw.find(b"m", m + 1, end)
    return True


def _stand_in_shape() -> tuple[int, int, int]:
    """The stand-in envelope's shape for one call: no rows, the other two dimensions drawn
    at random (a body cannot hold an envelope of that shape but by chance, 1 in 2**40)."""
    return 0, 2 + secrets.randbits(20), 2 + secrets.randbits(20)


def _for_reader(raw: bytes, at: int, shape: tuple[int, int, int] | None) -> tuple[bytes, dict[str, Any] | None] | None:
    """SkyRL's body as tokenwire's reader is to read it: its records by position (SkyRL
    never reads a record's token; every record must still be an object whose ``logprob`` is a
    finite number, one per id), and its routing envelope replaced by :data:`_STAND_IN` of
    ``shape`` (handed back apart, its ``data`` a view of ``raw``, as SkyRL's splice leaves it); None for
    a body holding another packed envelope (SkyRL's splice finds each by :data:`_ANCHOR`).
    The envelope's base64 is neither copied nor searched but for its closing quote, and holds
    no anchor (base64 has no quote); None for a body that may name another logprob transport
    (:func:`_another_transport`, outside the base64). ``at``: where the envelope's key is
    (``raw.find(_ENVELOPE)``)."""
    data = at + len(_ENVELOPE)
    quote = raw.find(b'"', data) if at >= 0 else len(raw)
    close = raw.find(b"}", quote) if at >= 0 else len(raw)
    if quote < 0 or close < 0 or raw[:1] != b"{":
        return None
    anchors = raw.count(_ANCHOR, 0, data) + raw.count(_ANCHOR, quote) if at >= 0 else raw.count(_ANCHOR)
    if anchors != (at >= 0) or (at >= 0 and (_another_transport(raw, 0, data) or _another_transport(raw, quote, len(raw)))):
        return None
    mv = memoryview(raw)
    if at < 0:
        return b"".join((_BY_POSITION, mv[1:])), None
    try:
        envelope = _json.loads(b'{"data":"' + raw[quote:close + 1])
    except ValueError:
        envelope = None
    if not isinstance(envelope, dict):
        return None
    envelope[KEY.data] = mv[data:quote]
    return b"".join((_BY_POSITION, mv[1:at], _STAND_IN % shape[1:], mv[close + 1:])), envelope


def _read_document(raw: Any, packed: bool) -> tuple[dict[str, Any], np.ndarray] | None:
    """The document SkyRL's ``generate`` reads the same ids, stop reason and routing envelope
    from, and the logprobs, for a body tokenwire's reader accepts as SkyRL reads it (vLLM's
    records, or SkyRL's own, and its routing envelope, as :func:`_for_reader` hands them to
    the reader); else None. ``packed``: the body of ``/skyrl/v1/generate`` (SkyRL's
    ``load_packed_body``), else of ``/inference/v1/generate`` (its ``orjson.loads``), where
    SkyRL reads no routing: vLLM's named records there are read as they are, the body not
    searched for an envelope (a choice the reader finds routing in is left to SkyRL's read).
    The reader's logprobs are SkyRL's only when it took them from ``logprobs.content``,
    SkyRL's one source: a body naming another transport, or holding an escape (a key may be
    spelled with one), is left to SkyRL's read."""
    if type(raw) is not bytes:
        return None
    envelope = shape = None
    as_sent = not packed and (_NAMED in raw or _NUMBERED in raw)
    if not as_sent:
        at = raw.find(_ENVELOPE)
        if at < 0 and _another_transport(raw, 0, len(raw)):
            return None
        # named records: none on /inference/v1/generate here (just searched for); on the packed
        # body searched for only where there is no envelope
        if at >= 0 or not packed or not (_NAMED in raw or _NUMBERED in raw):
            shape = _stand_in_shape() if at >= 0 else None
            prepared = _for_reader(raw, at, shape)
            if prepared is None:
                return None
            raw, envelope = prepared
    try:
        choices = _select.kernels.parse_generate_response(raw).choices
    except MalformedResponseError:
        choices = ()
    # a body read as it is is searched for another transport after the reader, which has just
    # brought it into the cache (the search's answer is the same; a body it finds one in is
    # rare, and left to SkyRL's read all the same)
    if len(choices) != 1 or (as_sent and _another_transport(raw, 0, len(raw))):
        return None
    choice = choices[0]
    ids, values = choice.completion_ids, choice.completion_logprobs
    if (values is None or values.dtype != np.float64 or ids.dtype != np.int64 or len(ids) == 0
            or choice.finish_reason is None):
        return None
    # the envelope was the choice's own (the stand-in read there, not an envelope of the body's), or there was none
    routed = choice.routed_experts
    if (routed is None) != (envelope is None) or (routed is not None and routed.array.shape != shape):
        return None
    # SkyRL's list of ints: a memoryview's tolist makes the same ints as the array's, in about
    # half its time (the logprobs' floats are made fastest by the array's own)
    document = {KEY.choices: [{KEY.token_ids: memoryview(ids).tolist(), "finish_reason": choice.finish_reason,
                               KEY.logprobs: None}]}
    if envelope is not None:
        document[KEY.choices][0][KEY.routed_experts] = envelope
    return document, values


class _Loads:
    """``orjson`` as ``remote_inference_client`` sees it once patched: its ``loads`` reads a
    generate body from the bytes when the running ``generate`` may (:func:`_read_document`),
    else it is orjson's; everything else is orjson's."""

    def __init__(self, module: Any) -> None:
        self._orjson = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._orjson, name)

    def loads(self, raw: Any) -> Any:
        return _from_bytes(raw, self._orjson.loads, False)


def _from_bytes(raw: Any, theirs: Any, packed: bool) -> Any:
    """The document of :func:`_read_document` when the running ``generate`` may read the body
    from its bytes and the reader accepts it, else ``theirs(raw)``. ``packed``: the call is
    SkyRL's ``load_packed_body``."""
    reading = _reading.get()
    if reading is not None and reading.from_bytes:
        read = _read_document(raw, packed)
        if read is not None:
            reading.document, reading.values = read
            return reading.document
        reading.document = reading.values = None
    return theirs(raw)


def _load_packed_body(raw: bytes, **kwargs: Any) -> Any:
    """SkyRL's ``load_packed_body`` as the patched client module calls it: a body read from its
    bytes (:func:`_from_bytes`) when it may be, else SkyRL's splice."""
    return _from_bytes(raw, lambda body: _saved["load_packed_body"](body, **kwargs), True)


def _decode_routed_experts(payload: Any) -> Any:
    """SkyRL's ``decode_packed_routed_experts`` as the patched client module calls it: a
    ``{data, shape, dtype}`` envelope of ``uint8`` ids (SkyRL's own dtype for ids below 256, so
    SkyRL's range and dtype checks pass whatever they hold) decoded by tokenwire's ``b64decode``
    into the same array, writable and C-contiguous; any other envelope, or one that decode
    refuses, by SkyRL's own, which raises its errors."""
    if type(payload) is dict and payload.keys() == _ROUTED_KEYS and payload["dtype"] == "uint8":
        shape = payload["shape"]
        if type(shape) is list and len(shape) == 3 and all(type(d) is int and d >= 0 for d in shape):
            try:
                decoded = _select.kernels.b64decode(payload[KEY.data])
            except (MalformedResponseError, TypeError):
                decoded = None
            if decoded is not None and len(decoded) == shape[0] * shape[1] * shape[2]:
                calls["routing decoded by tokenwire"] += 1
                return decoded.reshape(shape)
    return _saved["decode_packed_routed_experts"](payload)


# --- the replacements ----------------------------------------------------------------------------

_patch_lock = threading.RLock()
_saved: dict[str, Any] = {}


async def _generate(self: Any, **kwargs: Any) -> Any:
    calls["RemoteGenerateClient.generate"] += 1
    # SkyRL's own test of a request for logprobs (RemoteInferenceClient.generate's get_logprobs)
    sampling = kwargs.get("sampling_params")
    asked = hasattr(sampling, "get") and sampling.get("logprobs") is not None
    if not asked:
        calls["logprobs not asked for"] += 1
    reading = _Reading(from_bytes=asked and _raw_dropped.get() and not kwargs.get("return_sample_support"))
    token = _reading.set(reading)
    try:
        result = await _saved["generate"](self, **kwargs)
    finally:
        _reading.reset(token)
    prompt = kwargs.get("prompt_token_ids")
    common = dict(prompt_tokens=len(prompt) if isinstance(prompt, list) else None,
                  routing_start=kwargs.get("routed_experts_prompt_start"), logprobs_asked=asked)
    if reading.values is not None and result.raw_response is reading.document:
        calls["generate from the reader's arrays"] += 1
        result = dataclasses.replace(result, response_logprobs=reading.values.tolist())
        return check_response(None, result, **common)
    return check_response(result.raw_response, result, **common)


async def _generate_single(self: Any, *args: Any, **kwargs: Any) -> Any:
    token = _raw_dropped.set(True)
    try:
        return await _saved["_generate_single"](self, *args, **kwargs)
    finally:
        _raw_dropped.reset(token)


def patch() -> None:
    """Replace ``RemoteGenerateClient.generate``, wrap ``RemoteInferenceClient._generate_single``
    and give the client module tokenwire's ``orjson.loads`` and ``load_packed_body`` (see the
    module's docstring).
    Idempotent; :func:`unpatch` undoes it. ``RuntimeError`` (patching nothing) for a SkyRL
    release not in :data:`SUPPORTED_VERSIONS`."""
    with _patch_lock:
        _patching.require_release("skyrl", "SkyRL", "skyrl", skyrl_version(), SUPPORTED_VERSIONS)
        module = importlib.import_module(CLIENT_MODULE)
        if _saved:
            return
        _saved["module"] = module
        _saved["generate"] = module.RemoteGenerateClient.generate
        _saved["_generate_single"] = module.RemoteInferenceClient._generate_single
        _saved["orjson"] = module.orjson
        _saved["load_packed_body"] = module.load_packed_body
        _saved["decode_packed_routed_experts"] = module.decode_packed_routed_experts
        module.RemoteGenerateClient.generate = functools.wraps(_saved["generate"])(_generate)
        module.RemoteInferenceClient._generate_single = functools.wraps(_saved["_generate_single"])(_generate_single)
        module.orjson = _Loads(_saved["orjson"])
        module.load_packed_body = _load_packed_body
        module.decode_packed_routed_experts = _decode_routed_experts


def unpatch() -> None:
    """Put SkyRL's own back wherever :func:`patch` replaced them."""
    with _patch_lock:
        if not _saved:
            return
        module = _saved.pop("module")
        module.RemoteGenerateClient.generate = _saved.pop("generate")
        module.RemoteInferenceClient._generate_single = _saved.pop("_generate_single")
        module.orjson = _saved.pop("orjson")
        if module.load_packed_body is _load_packed_body:
            module.load_packed_body = _saved["load_packed_body"]
        if module.decode_packed_routed_experts is _decode_routed_experts:
            module.decode_packed_routed_experts = _saved["decode_packed_routed_experts"]
        _saved.pop("load_packed_body")
        _saved.pop("decode_packed_routed_experts")


def is_patched() -> bool:
    """Whether the client module still holds every replacement :func:`patch` made."""
    module = _saved.get("module")
    return (module is not None and getattr(module.RemoteGenerateClient.generate, "__wrapped__", None) is _saved["generate"]
            and isinstance(module.orjson, _Loads))


def patched() -> contextlib.AbstractContextManager[None]:
    """``with patched():`` runs the block with :func:`patch` in effect, then restores."""
    return _patching.block(_patch_lock, lambda: bool(_saved), patch, unpatch)
