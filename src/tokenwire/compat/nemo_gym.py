"""NeMo-Gym's token path on tokenwire's readers: a drop-in that refuses what it passed.

NeMo-Gym 0.7.0 reads an upstream response in ``nemo_gym.server_utils.get_response_json``
(``orjson.loads`` of the body; the name is imported into ``nemo_gym.openai_utils`` and other
modules, so each binding is replaced), then its vLLM model server
(``responses_api_models/vllm_model/app.py``) takes the token ids and logprobs from the choice's
``logprobs.content`` one record at a time (``_extract_choice_logprobs``) or from the message's
own bundle (``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs``,
``routed_experts``), which ``_validate_token_bundle`` checks for presence and lengths but
never scans: a ``-9999`` (vLLM's sentinel for a missing or clamped logprob) and a routing
envelope of any row count pass through to training.

With :func:`patch`:

- ``get_response_json`` parses the same bytes with ``orjson.loads`` (the same document, the
  same ``orjson.JSONDecodeError`` for invalid JSON, NaN among it) and, when a choice carries
  token evidence, validates the response with tokenwire's chat-completions (or completions)
  reader: ``token_ids`` against ``logprobs.content`` (N against N+1), ``"token_id:N"`` names,
  a missing, non-finite or sentinel logprob; and the message bundle below;
- ``_extract_choice_logprobs`` returns what NeMo-Gym's returns (lists of ints and floats),
  read in whole-list operations instead of a Python loop per token, and refuses a sentinel;
- on the model server's token path (``chat_completions`` of a ``return_token_id_information``
  server that drops the choice's records after extracting them), ``get_response_json`` hands
  it the document tokenwire's reader made from the bytes, ``logprobs.content`` held as the
  reader's ids and logprobs rather than a dict per record (:func:`token_path_document`);
- ``_validate_token_bundle`` runs NeMo-Gym's checks, then refuses a logprob that is not a
  finite number or is the sentinel, and a routing (``nrlre1:<dtype>:<SxLxK>:<base64>``
  envelope, NeMo-RL's codec, or nested lists) whose rows are not one per prompt and
  generation token, whose base64 is not canonical or does not hold ``S*L*K`` values of its
  dtype, or which holds a negative expert id (NeMo-Gym's missing-route fill, ``-1``).

Every refusal raises :class:`NeMoGymResponseError`: a ``tokenwire.MalformedResponseError``
(naming choice, field and token) and a ``RuntimeError``, the type NeMo-Gym raises for the
token metadata it refuses itself, so its callers' ``except RuntimeError`` still works.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import math
import os
import secrets
import sys
import threading
from collections import Counter
from contextvars import ContextVar
from itertools import repeat
from typing import Any

import numpy as np
import orjson

from ..read import _select
from ..base import _table
from ..base._errors import MalformedResponseError
from ..base._table import KEY
from ..rules.openai import parse_chat_completions_document
from . import _patching
from ._renderers_generate import ReadRecords
from ._checks import check_logprobs
from .renderers import _numbers, _token_ids

__all__ = ["NeMoGymResponseError", "check_response", "check_routed_experts", "check_token_bundle",
           "get_response_json", "nemo_gym_version", *_patching.API]

SUPPORTED_VERSIONS: tuple[str, ...] = ("0.7.0",)
_SERVER_UTILS = "nemo_gym.server_utils"
_VLLM_APP = "responses_api_models.vllm_model.app"
_MAGIC = "nrlre1"
# NeMo-RL's envelope dtypes (nemo_gym/token_id_capture/staging/routes.py).
_ENVELOPE_DTYPES = {"int8": np.dtype("<i1"), "int16": np.dtype("<i2"), "int32": np.dtype("<i4")}
# How often each replacement ran (the pytest plugin reports which tests reached them).
calls: Counter[str] = Counter()


class NeMoGymResponseError(MalformedResponseError, RuntimeError):
    """A response NeMo-Gym would have passed to training: a ``tokenwire.MalformedResponseError``
    and the ``RuntimeError`` NeMo-Gym raises for token metadata it refuses itself."""


def _refuse(reason: str, *, choice: int | None = None, field: str | None = None,
            token: int | None = None) -> NeMoGymResponseError:
    return NeMoGymResponseError(reason, choice=choice, field=field, token=token)


def nemo_gym_version() -> str | None:
    """The installed NeMo-Gym release (None when it is not installed)."""
    try:
        return importlib.metadata.version("nemo-gym")
    except importlib.metadata.PackageNotFoundError:
        return None


# --- the checks ----------------------------------------------------------------------------------


def check_routed_experts(routed: Any, rows: int | None, *, choice: int | None = None,
                         field: str = "message.routed_experts") -> np.ndarray:
    """The routing as a ``(rows, layers, topk)`` integer array, refused unless it is NeMo-RL's
    ``nrlre1`` envelope (canonical base64 of ``S*L*K`` values of its dtype) or ``[rows][layers]
    [topk]`` lists of ints, holds no negative expert id, and has ``rows`` rows (one per prompt
    and generation token) when ``rows`` is given."""
    array = _check_routing(routed, rows, choice, field)
    if array is None:  # an envelope, checked without its decoding kept
        dtype, shape, _, start = _envelope(routed, choice, field)
        array = _select.kernels.b64decode(routed[start:]).view(dtype).reshape(shape)
    return array


def _envelope(routed: str, choice: int | None, field: str) -> tuple[np.dtype, tuple[int, ...], str, int]:
    """The dtype and shape an ``nrlre1:<dtype>:<SxLxK>:<base64>`` envelope names (and the
    shape's text), and where its base64 starts; refused unless it is one. The base64 is not
    copied (``str.split`` would)."""
    first = routed.find(":")
    second = routed.find(":", first + 1) if first >= 0 else -1
    third = routed.find(":", second + 1) if second >= 0 else -1
    if third < 0 or not routed.startswith(_MAGIC + ":"):
        raise _refuse(f"routed_experts is not an {_MAGIC}:<dtype>:<SxLxK>:<base64> envelope",
                      choice=choice, field=field)
    dtype_name, shape_text = routed[first + 1:second], routed[second + 1:third]
    dtype = _ENVELOPE_DTYPES.get(dtype_name)
    if dtype is None:
        raise _refuse(f"routed_experts dtype {dtype_name!r} is not int8, int16 or int32",
                      choice=choice, field=field)
    dims = shape_text.split("x")
    if len(dims) != 3 or not all(d.isascii() and d.isdigit() and len(d) <= 18 for d in dims):
        raise _refuse(f"routed_experts shape {shape_text!r} is not SxLxK", choice=choice, field=field)
    shape = tuple(int(d) for d in dims)
    if min(shape) <= 0:
        raise _refuse(f"routed_experts shape {shape_text!r} has an empty dimension", choice=choice, field=field)
    return dtype, shape, shape_text, third + 1


def _check_routing(routed: Any, rows: int | None, choice: int | None, field: str) -> np.ndarray | None:
    """:func:`check_routed_experts`' checks; the array of nested lists, None for an envelope,
    whose base64 is checked a cache-sized block at a time and never decoded whole (the
    kernels' ``b64check_signed``): on the way to training NeMo-Gym carries the string."""
    if isinstance(routed, str):
        dtype, shape, shape_text, start = _envelope(routed, choice, field)
        size, negative = _select.kernels.b64check_signed(routed, dtype.itemsize, start)
        if size < 0:
            raise _refuse("routed_experts base64 is not canonical", choice=choice, field=field)
        if size != math.prod(shape) * dtype.itemsize:
            raise _refuse(f"routed_experts holds {size} bytes, not {math.prod(shape) * dtype.itemsize} "
                          f"for {dtype.name}[{shape_text}]", choice=choice, field=field)
        array = None
        count = shape[0]
    else:
        try:
            array = np.array(routed, dtype=np.int64)
        except (ValueError, TypeError, OverflowError):
            array = None
        if (array is None or array.ndim != 3 or array.size == 0 or not isinstance(routed, list)
                or not _all_ints(routed)):
            raise _refuse("routed_experts must be [rows][layers][topk] lists of ints", choice=choice, field=field)
        count = array.shape[0]
        negative = bool((array < 0).any())
    _check_rows(count, rows, choice, field)
    if negative:
        if array is None:  # the refusal names the row: the envelope decoded now
            array = _select.kernels.b64decode(routed[start:]).view(dtype).reshape(shape)
        below = (array < 0).reshape(len(array), -1).any(axis=1)
        row = int(np.argmax(below))
        raise _refuse(f"routed_experts holds a negative expert id ({int(array[row].min())})",
                      choice=choice, field=field, token=row)
    return array


def _check_rows(count: int, rows: int | None, choice: int | None, field: str) -> None:
    if rows is not None and count != rows:
        raise _refuse(f"routed_experts has {count} rows, not {rows}: one per prompt and "
                      "generation token", choice=choice, field=field)


def _all_ints(rows: list[Any]) -> bool:
    # np.array(..., int64) also takes floats and bools; the wire's routing is ints only.
    return all(type(e) is int for r in rows for layer in r for e in layer)


def check_token_bundle(prompt_token_ids: Any, generation_token_ids: Any, generation_log_probs: Any,
                       routed_experts: Any = None, *, choice: int | None = None,
                       where: str = "message") -> None:
    """Refuse a message-level token bundle whose logprobs are not one finite, non-sentinel
    number per generation token, or whose routing does not cover every prompt and
    generation token (see :func:`check_routed_experts`)."""
    count = len(generation_token_ids) if isinstance(generation_token_ids, list) else None
    if generation_log_probs is not None and generation_log_probs is _checked_logprobs.get():
        _checked_logprobs.set(None)  # checked when extracted: not scanned again
        values = generation_log_probs
    else:
        values = check_logprobs(generation_log_probs, f"{where}.generation_log_probs", NeMoGymResponseError,
                                sentinel=True, choice=choice)
    if count is not None and len(values) != count:
        raise _refuse(f"{len(values)} logprobs for {count} generation token ids",
                      choice=choice, field=f"{where}.generation_log_probs")
    if routed_experts is not None:
        rows = None
        if count is not None and isinstance(prompt_token_ids, list):
            rows = len(prompt_token_ids) + count
        if routed_experts is _checked_routing.get():  # checked but for its rows when read
            _checked_routing.set(None)
            _, shape, _, _ = _envelope(routed_experts, choice, f"{where}.routed_experts")
            _check_rows(shape[0], rows, choice, f"{where}.routed_experts")
        else:
            _check_routing(routed_experts, rows, choice, f"{where}.routed_experts")


def _carries_tokens(choice: Any) -> bool:
    if not isinstance(choice, dict):
        return False
    if choice.get("token_ids") is not None:
        return True
    logprobs = choice.get("logprobs")
    return isinstance(logprobs, dict) and bool(logprobs.get("content") or logprobs.get("tokens"))


def check_response(raw: Any, body: Any) -> None:
    """Validate a parsed upstream response (``body``, from ``raw``) where it carries token
    evidence: tokenwire's reader over the choices' ids and logprobs, and each message's token
    bundle. Anything else (a tokenize result, a response without logprobs) is left alone."""
    if not isinstance(body, dict):
        return
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return
    if any(map(_carries_tokens, choices)):
        chat = any(isinstance(c, dict) and "message" in c for c in choices)
        kernels = _select.kernels  # the implementation in use (a test may point it at the other)
        reader = kernels.parse_chat_completions_response if chat else kernels.parse_completions_response
        try:
            parsed = reader(raw)
        except NeMoGymResponseError:
            raise
        except MalformedResponseError as exc:
            raise _refuse(exc.reason, choice=exc.choice, field=exc.field, token=exc.token) from None
        _remember(raw, choices, parsed)
    for index, choice in enumerate(choices):
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and message.get("generation_log_probs") is not None:
            check_token_bundle(message.get("prompt_token_ids"), message.get("generation_token_ids"),
                               message.get("generation_log_probs"), message.get("routed_experts"),
                               choice=index)


# What tokenwire read for the response the running task fetched last: (the ``logprobs.content``
# list handed over, its ids, its logprobs) per choice, for ``_extract_choice_logprobs`` of the
# same task, which NeMo-Gym's model server calls on that response right after (the code between
# touches the message and capture fields only). One response per task: nothing outlives it.
_last_read: ContextVar[tuple[tuple[list[Any], np.ndarray, np.ndarray], ...]] = ContextVar(
    "tokenwire_nemo_gym_last_read", default=())
_TOKEN_ID_RECORD = b'"token":"token_id:'
# The logprobs list _extract_choice_logprobs returned last in this task (every value finite and
# not the sentinel: checked on each of its branches), for the bundle check after it.
_checked_logprobs: ContextVar[list[float] | None] = ContextVar("tokenwire_nemo_gym_checked_logprobs",
                                                               default=None)


def _remember(raw: Any, choices: list[Any], parsed: Any) -> None:
    """Keep tokenwire's arrays for the records of ``choices`` when every record's ``token`` is
    a ``"token_id:N"`` name (the form NeMo-Gym reads ids from; tokenwire checked each against
    the ids): the bytes hold that key once per record and nowhere else (no candidates)."""
    kept = []
    contents = []
    for choice in choices:
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        contents.append(content if isinstance(content, list) else None)
    total = sum(len(c) for c in contents if c is not None)
    data = raw if isinstance(raw, (bytes, bytearray)) else None
    if data is None or total == 0 or data.count(_TOKEN_ID_RECORD) != total:
        _last_read.set(())
        return
    for content, choice in zip(contents, parsed.choices):
        if content is not None:
            kept.append((content, choice.completion_ids, choice.completion_logprobs))
    _last_read.set(tuple(kept))


async def get_response_json(response: Any) -> Any:
    """NeMo-Gym's ``get_response_json``: the body as ``orjson.loads`` reads it, validated by
    :func:`check_response`; or, for the upstream chat completion of the vLLM model server's
    token path, the document :func:`token_path_document` makes from the bytes."""
    calls["get_response_json"] += 1
    raw = await response.read()
    armed = _token_path.get()
    if armed is not None and armed[0]:
        armed[0] = False  # the first fetch of the call only: its upstream chat completion
        document = token_path_document(raw)
        if document is not None:
            calls["get_response_json read from the bytes"] += 1
            return document
    body = orjson.loads(raw)
    check_response(raw, body)
    return body


# --- the vLLM model server's token path, read from the bytes -------------------------------------

# Set (a one-item list, True until the first get_response_json of the call takes it) while the
# patched VLLMModel.chat_completions runs on a server whose token path drops the choice's
# logprob records unread by anything but _extract_choice_logprobs: return_token_id_information,
# the chat endpoint (not use_completions_api), no external capture handler (it reads the whole
# document) and no transport log (it copies the whole document).
_token_path: ContextVar[list[bool] | None] = ContextVar("tokenwire_nemo_gym_token_path", default=None)
# NeMo-Gym's message-level token bundle (openai_utils.REQUIRED_TOKEN_METADATA_FIELDS): a message
# carrying one keeps the choice's logprobs in the response it returns.
_BUNDLE_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
# The keys whose values the compiled scan blanks in the document it hands back (the rules read
# them from the bytes); the token path puts back the two NeMo-Gym reads, refuses the rest.
_BLANKED_CHOICE = _table.top_keys(_table.CHOICE, _table.OPENAI) - {KEY.token_ids, KEY.logprobs}
_BLANKED_ROOT = _table.top_keys(_table.ROOT, _table.OPENAI) - {KEY.choices, KEY.prompt_token_ids}


def _drops_records(model: Any) -> bool:
    config = getattr(model, "config", None)
    return (getattr(config, "return_token_id_information", False) is True
            and not getattr(config, "use_completions_api", False)
            and getattr(model, "_external_capture_handler", None) is None
            and not os.environ.get("NEMO_GYM_VLLM_TRANSPORT_LOG", "").strip()
            and getattr(type(model), "_extract_choice_logprobs", None) is _extract_choice_logprobs)


def token_path_document(raw: Any) -> dict[str, Any] | None:
    """The upstream chat completion as NeMo-Gym's vLLM model server reads it on its token path,
    made from what tokenwire's reader read of ``raw`` (its checks all passed): every value as
    ``orjson.loads`` gives it but the choice's ``logprobs.content``, which is a
    :class:`ReadRecords` (the ids and logprobs, no dict per record) that the patched
    ``_extract_choice_logprobs`` turns into NeMo-Gym's two lists before the server drops it.
    None (the caller then reads the body as before) unless the body is one chat choice whose
    message carries no token bundle, with ``logprobs`` holding only ``content``, records that
    each name their id by ``"token": "token_id:N"`` and carry ``"logprob"``, and nothing else
    the reader takes from the bytes but ``token_ids`` and ``prompt_token_ids``."""
    if type(raw) is not bytes:
        return None
    raw, routing = _routing_apart(raw)
    kernels = _select.kernels  # the implementation in use (a test may point it at the other)
    try:
        document, top, read = kernels.extract_openai(raw)
    except MalformedResponseError:
        return None
    if type(document) is not dict or len(read) != 1 or not _BLANKED_ROOT.isdisjoint(document):
        return None
    choices = document.get(KEY.choices)
    choice = choices[0] if type(choices) is list and len(choices) == 1 else None
    if type(choice) is not dict or not _BLANKED_CHOICE.isdisjoint(choice):
        return None
    message, logprobs = choice.get("message"), choice.get(KEY.logprobs)
    if type(message) is not dict or any(key in message for key in _BUNDLE_FIELDS):
        return None
    if routing is not None:  # the stand-in left in the bytes must be the message's routing, alone
        stand_in, text = routing
        if message.get(KEY.routed_experts) != stand_in or _strings_equal(document, stand_in) != 1:
            return None
        message[KEY.routed_experts] = text
    if type(logprobs) is not dict or list(logprobs) != ["content"] or type(logprobs["content"]) is not list:
        return None
    token_ids, prompt = choice.get(KEY.token_ids), document.get(KEY.prompt_token_ids)
    if (token_ids is not None and type(token_ids) is not list) or (prompt is not None and type(prompt) is not list):
        return None
    try:
        parsed = parse_chat_completions_document(
            document, None, True, True, lambda index, value: top if index is None else read[index])
    except MalformedResponseError:
        return None  # the caller's check_response refuses it, as without this path
    if not _named_by_token(read[0].logprobs_content, logprobs["content"], raw):  # the bytes read
        return None
    first = parsed.choices[0]
    ids = first.completion_ids.tolist()
    if token_ids is not None:
        choice[KEY.token_ids] = ids
    if prompt is not None:
        document[KEY.prompt_token_ids] = parsed.prompt_token_ids.tolist()
    choice[KEY.logprobs] = {"content": ReadRecords(ids, first.completion_logprobs)}
    if routing is not None:
        _checked_routing.set(routing[1])
    return document


# A message's routing envelope as orjson writes it: a string value, opened right after its key.
_ROUTING_VALUE = f'"{KEY.routed_experts}":"'.encode()
# The routing token_path_document put in the document it made (checked but for its row count,
# which the bundle check after it compares), for that check, in the same task.
_checked_routing: ContextVar[str | None] = ContextVar("tokenwire_nemo_gym_checked_routing", default=None)


def _routing_apart(raw: bytes) -> tuple[bytes, tuple[str, str] | None]:
    """``raw`` with its routing envelope's base64 left out, a stand-in in its place (the
    envelope's header and a value drawn for the call, ``"nrlre1:<dtype>:<SxLxK>:~<hex>"``), and
    (that stand-in, the envelope as a ``str``, made from the bytes once and checked but for its rows), so that the reader neither copies nor
    builds the megabytes NeMo-Gym only carries; ``(raw, None)`` unless the body holds one
    ``"routed_experts":"`` and its string is an envelope :func:`check_routed_experts` accepts
    (no quote, escape or other character outside its alphabet: the string ``orjson.loads``
    reads). The caller checks that the stand-in is the message's routing and no other string."""
    at = raw.find(_ROUTING_VALUE)
    if at < 0:
        return raw, None
    start = at + len(_ROUTING_VALUE)
    end = raw.find(b'"', start)
    if end < 0 or raw.find(_ROUTING_VALUE, end) >= 0:  # none in between: it holds no quote
        return raw, None
    view = memoryview(raw)
    try:
        text = str(view[start:end], "ascii")
        _check_routing(text, None, None, KEY.routed_experts)
    except (UnicodeDecodeError, NeMoGymResponseError):
        return raw, None  # read as before: the bundle check refuses it in its place
    # The header and a value drawn for this call: only the copy of the key left here can read
    # as it (a key repeated in another spelling, which the reader would keep, cannot).
    stand_in = f"{text[:_envelope(text, None, KEY.routed_experts)[3]]}~{secrets.token_hex(8)}"
    return b"".join((view[:start], stand_in.encode(), view[end:])), (stand_in, text)


def _strings_equal(document: Any, text: str) -> int:
    """How many strings in ``document`` (its values, at any depth) are ``text``."""
    found, stack = 0, [document]
    while stack:
        value = stack.pop()
        if type(value) is str:
            found += value == text
        elif type(value) is dict:
            stack.extend(value.values())
        elif type(value) is list:
            stack.extend(value)
    return found


def _named_by_token(read: Any, content: list[Any], raw: bytes) -> bool:
    """Whether every record the reader read named its id by its ``token`` and carried it as
    ``logprob``, the fields NeMo-Gym reads (tokenwire's reader takes a ``token_id`` or ``id``
    key first, and ``sampling_logprob`` when every record has one)."""
    records = getattr(read, "records", None)
    if records is None or records.value_key != "logprob":
        return False
    ids = records.ids
    if isinstance(ids, np.ndarray):  # the compiled reader: -1 for a record naming no id
        if read.span is None or (ids.size and int(ids.min()) < 0):
            return False
        # Without escapes, every id a record names has a literal "d" in it ("token_id", "id",
        # "token_id:N"), followed by ":" only in a "token_id:N" string: when each "d" of the
        # records is, no record has a "token_id" or "id" key, and each named its id by its token.
        start, end = read.span
        if raw.find(b"\\", start, end) >= 0:
            return False
        text = np.frombuffer(raw, np.uint8, end - start, start)  # the array's text: "[" to "]"
        d = np.flatnonzero(text[:-1] == ord("d"))
        return bool((text[d + 1] == ord(":")).all())
    return all(i is not None for i in ids) and all(
        type(e) is dict and "token_id" not in e and "id" not in e for e in content)


# --- the vLLM model server's methods -------------------------------------------------------------


def _extract_choice_logprobs(self: Any, choice_dict: dict[str, Any]) -> tuple[list[int], list[float]]:
    """NeMo-Gym's ``VLLMModel._extract_choice_logprobs`` in whole-list operations: the same
    lists, the same ``RuntimeError`` for a malformed record (NeMo-Gym's own loop reports it),
    and a refusal of the sentinel."""
    calls["_extract_choice_logprobs"] += 1
    logprobs_block = choice_dict.get("logprobs") if isinstance(choice_dict, dict) else None
    content = logprobs_block.get("content") if isinstance(logprobs_block, dict) else None
    if type(content) is ReadRecords:  # token_path_document's: read and checked from the bytes
        calls["_extract_choice_logprobs from the bytes"] += 1
        return list(content.ids), _checked(content.logprobs.tolist())
    for records, ids, values in _last_read.get():
        if records is content and len(ids) == len(content):
            calls["_extract_choice_logprobs from the reader's arrays"] += 1
            return ids.tolist(), _checked(values.astype(np.float64, copy=False).tolist())
    fast = None
    if isinstance(content, list) and content:
        try:
            names = list(map(dict.get, content, repeat("token")))
            values = list(map(dict.get, content, repeat("logprob")))
        except TypeError:  # a record that is not a dict
            names = values = None
        if names is not None:
            ids = _token_ids(names)
            numbers = _numbers(values) if ids is not None else None
            if numbers is not None:
                fast = ids, numbers
    if fast is None:
        token_ids, logprobs = _saved_attr(_VLLM_APP, "VLLMModel._extract_choice_logprobs")(self, choice_dict)
        check_logprobs(logprobs, "logprobs.content", NeMoGymResponseError, sentinel=True, choice=None)
        return token_ids, _checked(logprobs)
    ids, numbers = fast
    check_logprobs(numbers, "logprobs.content", NeMoGymResponseError, sentinel=True, choice=None)
    return ids.tolist(), _checked(numbers.tolist())


def _checked(values: list[float]) -> list[float]:
    """``values``, the logprobs list ``_extract_choice_logprobs`` returns, handed to the bundle
    check that follows (``_checked_logprobs``): every one was found finite and not the
    sentinel, by tokenwire's reader or by ``_checks.check_logprobs``."""
    _checked_logprobs.set(values)
    return values


def _validate_token_bundle(cls: Any, bundle: dict[str, Any], source: str) -> dict[str, Any]:
    """NeMo-Gym's ``VLLMModel._validate_token_bundle``, then :func:`check_token_bundle` on
    what it normalized."""
    calls["_validate_token_bundle"] += 1
    normalized = _saved_attr(_VLLM_APP, "VLLMModel._validate_token_bundle").__func__(cls, bundle, source)
    check_token_bundle(normalized["prompt_token_ids"], normalized["generation_token_ids"],
                       normalized["generation_log_probs"], normalized.get("routed_experts"),
                       where=source)
    return normalized


async def _chat_completions(self: Any, request: Any, body: Any) -> Any:
    """NeMo-Gym's ``VLLMModel.chat_completions``, its first ``get_response_json`` (the upstream
    chat completion) handing back :func:`token_path_document`'s document where the server's
    token path drops the choice's records unread by anything else (see ``_token_path``)."""
    armed = _drops_records(self)
    if armed:
        calls["chat_completions on the token path"] += 1
    mark = _token_path.set([True] if armed else None)
    try:
        return await _saved_attr(_VLLM_APP, "VLLMModel.chat_completions")(self, request, body)
    finally:
        _token_path.reset(mark)


# --- patching ------------------------------------------------------------------------------------

_patch_lock = threading.RLock()
# (module name, attribute path) -> NeMo-Gym's own object, for everything patch() replaced.
_saved: dict[tuple[str, str], Any] = {}
_OURS_METHODS = {
    "VLLMModel.chat_completions": _chat_completions,
    "VLLMModel._extract_choice_logprobs": _extract_choice_logprobs,
    "VLLMModel._validate_token_bundle": classmethod(_validate_token_bundle),
}


def _saved_attr(module: str, path: str) -> Any:
    found = _saved.get((module, path))
    if found is None:  # called without patch(): NeMo-Gym's own, as defined now
        owner, name = path.split(".")
        found = vars(getattr(importlib.import_module(module), owner))[name]
    return found


def _nemo_gym_modules() -> list[Any]:
    return [m for n, m in list(sys.modules.items())
            if m is not None and (n == "nemo_gym" or n.startswith("nemo_gym.")
                                  or n.startswith("responses_api_models."))]


def patch() -> None:
    """Put the replacements into every loaded module that holds NeMo-Gym's
    ``get_response_json`` and, when the vLLM model server is importable, into ``VLLMModel``.
    Idempotent; :func:`unpatch` undoes it. ``RuntimeError`` (patching nothing) for a NeMo-Gym
    release not in :data:`SUPPORTED_VERSIONS`."""
    with _patch_lock:
        version = nemo_gym_version()
        if version not in SUPPORTED_VERSIONS:
            raise RuntimeError(f"tokenwire.compat.nemo_gym follows NeMo-Gym {', '.join(SUPPORTED_VERSIONS)}, "
                               f"not {version}")
        server_utils = importlib.import_module(_SERVER_UTILS)
        importlib.import_module("nemo_gym.openai_utils")  # holds get_response_json by name
        theirs = _saved.get((_SERVER_UTILS, "get_response_json"), server_utils.get_response_json)
        for module in _nemo_gym_modules():
            if vars(module).get("get_response_json") is theirs:
                _saved[(module.__name__, "get_response_json")] = theirs
                module.get_response_json = get_response_json
        try:
            app = importlib.import_module(_VLLM_APP)
        except ImportError:
            app = None
        if app is not None:
            for path, ours in _OURS_METHODS.items():
                owner, name = path.split(".")
                cls = getattr(app, owner)
                if (_VLLM_APP, path) not in _saved:
                    _saved[(_VLLM_APP, path)] = vars(cls)[name]
                setattr(cls, name, ours)


def unpatch() -> None:
    """Put NeMo-Gym's own back wherever :func:`patch` replaced them."""
    with _patch_lock:
        for (module_name, path), original in list(_saved.items()):
            module = sys.modules.get(module_name)
            if module is None:
                continue
            if "." in path:
                owner, name = path.split(".")
                setattr(getattr(module, owner), name, original)
            elif vars(module).get(path) is get_response_json:
                setattr(module, path, original)
        _saved.clear()


def is_patched() -> bool:
    """Whether ``nemo_gym.server_utils`` and ``nemo_gym.openai_utils`` hold the replacement."""
    return all(getattr(sys.modules.get(n), "get_response_json", None) is get_response_json
               for n in (_SERVER_UTILS, "nemo_gym.openai_utils"))


def patched() -> contextlib.AbstractContextManager[None]:
    """``with patched():`` runs the block with :func:`patch` in effect, then restores."""
    return _patching.block(_patch_lock, lambda: bool(_saved), patch, unpatch)
