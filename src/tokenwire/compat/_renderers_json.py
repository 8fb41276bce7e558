"""How the renderers drop-in (:mod:`tokenwire.compat.renderers`) reads a response's JSON as
renderers' ``parse_generate_response`` does: the long base64 ``data`` strings cut out before
the parser and handed back as views of the response bytes (decoded once, on the way), and
NaN/Infinity literals read where renderers' parser reads them (as ``logprobs.content``
logprobs, for the logprob rules to reject), refused anywhere else."""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable
from typing import Any

import numpy as np

import tokenwire

from ..base import _json
from ..base._errors import MalformedResponseError, invalid_json
from ..base._table import KEY

# The fields whose base64 ``data`` renderers' parse_generate_response hands back as a memoryview.
VIEWS = (KEY.compact_logprobs, KEY.routed_experts)

# A JSON string (skipped whole), or a NaN/Infinity literal outside strings.
_LITERALS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|(-?Infinity|NaN)')
_LITERAL_VALUES = {b"NaN": math.nan, b"Infinity": math.inf, b"-Infinity": -math.inf}


# Base64 payloads: the parser is handed the document without them (a marker in their place)
# and they come back as views of the response bytes, as renderers' splice returns them.
_DATA_KEY = b'"data":"'
_SPLICE_MIN = 512
# Where a spliced ``data`` may be put back: (field, sub-field or None, kept as a memoryview).
_DATA_PLACES = (
    *((name, None, True) for name in VIEWS),
    (KEY.completion_logprobs, None, False),
    (KEY.sampling_mask, KEY.ids, False),
    (KEY.sampling_mask, KEY.counts, False),
)


def loads(raw: Any, error_type: Callable[[], type[Exception]]) -> tuple[Any, dict[int, np.ndarray]]:
    """The document, and the payloads decoded on the way (by the id of their view); a
    rejection raises ``error_type()`` (renderers' error class, made on first use)."""
    raw = _json.document(raw)  # exact bytes or str: a mutable buffer read once
    try:
        data = raw.encode() if isinstance(raw, str) else raw
    except UnicodeEncodeError:  # a lone surrogate: as tokenwire's parsers say of such a str
        raise error_type()("invalid JSON: str is not valid UTF-8: surrogates not allowed") from None
    decoded: dict[int, np.ndarray] = {}
    if isinstance(data, bytes):
        payload = _loads_spliced(data, decoded)
        if payload is not None:
            return payload, decoded
        decoded.clear()
    try:
        return _json.loads(raw), decoded
    except _json.JSONDecodeError as exc:
        error = exc
    payload = _loads_with_literals(raw, error_type)
    if payload is None:
        raise _invalid(error, raw, error_type)
    return payload, decoded


def _invalid(exc: Exception, raw: Any, error_type: Callable[[], type[Exception]]) -> Exception:
    """orjson's error on ``raw`` as the drop-in reports it (MemoryError when it ran out of
    memory)."""
    error = invalid_json(exc, raw)
    return error if isinstance(error, MemoryError) else error_type()(str(error))


def _loads_spliced(data: bytes, decoded: dict[int, np.ndarray]) -> Any:
    """The document parsed with its long base64 ``data`` strings cut out and put back as
    views of ``data``; None when there is nothing to cut, or when anything is not exactly
    where a base64 field belongs (the caller then parses the whole document)."""
    spans: list[tuple[int, int]] = []
    pieces: list[bytes] = []
    cursor = 0
    tag = secrets.token_hex(6)
    pos = data.find(_DATA_KEY)
    while pos >= 0:
        start = pos + len(_DATA_KEY)
        end = data.find(b'"', start)
        if end < 0:
            break
        if end - start >= _SPLICE_MIN and data.find(b"\\", start, end) < 0:
            pieces += (data[cursor:start], b"\\u0000%s:%d" % (tag.encode(), len(spans)))
            spans.append((start, end))
            cursor = end
        pos = data.find(_DATA_KEY, end + 1)
    if not spans:
        return None
    pieces.append(data[cursor:])
    try:
        payload = _json.loads(b"".join(pieces))
    except _json.JSONDecodeError:
        return None
    choices = payload.get(KEY.choices) if isinstance(payload, dict) else None
    if not isinstance(choices, list):
        return None
    marker = "\x00" + tag + ":"
    whole = memoryview(data)
    placed = 0
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        for name, sub, as_view in _DATA_PLACES:
            holder = choice.get(name)
            if sub is not None and isinstance(holder, dict):
                holder = holder.get(sub)
            if not isinstance(holder, dict):
                continue
            value = holder.get("data")
            if not isinstance(value, str) or not value.startswith(marker):
                continue
            start, end = spans[int(value[len(marker):])]
            view = whole[start:end]
            try:
                # Canonical base64 is valid JSON string text; anything else is read by the
                # JSON parser itself, for its verdict.
                array = tokenwire.b64decode(view)
            except MalformedResponseError:
                return None
            if as_view:
                holder["data"] = view
                decoded[id(view)] = array
            else:
                holder["data"] = data[start:end].decode("ascii")
            placed += 1
    return payload if placed == len(spans) else None


def _loads_with_literals(raw: Any, error_type: Callable[[], type[Exception]]) -> Any:
    """The document when its only departure from RFC 8259 is NaN/Infinity literals, each a
    ``logprob`` of ``logprobs.content`` (or of a ``top_logprobs`` candidate there): those
    are read as floats, for the logprob rules to reject with renderers' message. None when
    there is no such literal; raises when one is anywhere else."""
    data = raw.encode() if isinstance(raw, str) else bytes(memoryview(raw).cast("B"))
    found: list[float] = []
    marker = f"\x00tokenwire-literal-{secrets.token_hex(8)}-"

    def mark(match: re.Match[bytes]) -> bytes:
        if match.group(1) is None:
            return match.group(0)
        found.append(_LITERAL_VALUES[match.group(1)])
        return b'"\\u0000' + marker[1:].encode() + str(len(found) - 1).encode() + b'"'

    marked = _LITERALS.sub(mark, data)
    if not found:
        return None
    try:
        payload = _json.loads(marked)
    except _json.JSONDecodeError as exc:
        raise _invalid(exc, marked, error_type) from None
    placed = 0

    def place(holder: Any) -> None:
        nonlocal placed
        if isinstance(holder, dict):
            value = holder.get("logprob")
            if isinstance(value, str) and value.startswith(marker):
                holder["logprob"] = found[int(value[len(marker):])]
                placed += 1

    choices = payload.get(KEY.choices) if isinstance(payload, dict) else None
    for choice in choices if isinstance(choices, list) else ():
        logprobs = choice.get(KEY.logprobs) if isinstance(choice, dict) else None
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        for entry in content if isinstance(content, list) else ():
            place(entry)
            top = entry.get("top_logprobs") if isinstance(entry, dict) else None
            for candidate in top if isinstance(top, list) else ():
                place(candidate)
    if placed != len(found):
        raise error_type()(
            "invalid JSON: NaN and Infinity are not JSON (read only as logprobs of logprobs.content)"
        )
    return payload
