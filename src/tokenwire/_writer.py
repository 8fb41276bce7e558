"""The server side: encode the packed fields and whole responses, byte-compatible with readers.

Every encoder validates its output with the reader's own rules (the same functions, fed the
arrays instead of base64 text), so a server cannot emit what tokenwire would reject.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

import numpy as np
import orjson

from . import _reference, _select
from ._reference import COMPACT_FORMAT, MAX_TOKEN_ID

__all__ = [
    "Blob",
    "dumps_generate_response",
    "encode_compact_logprobs",
    "encode_packed",
    "encode_routed_experts",
    "encode_sampling_mask",
    "json_default",
]


class Blob:
    """The base64 text of a packed array, kept as ASCII bytes rather than a Python str.

    ``dumps_generate_response`` splices it into the output; for ``orjson.dumps`` pass
    ``default=tokenwire.json_default``; ``str(blob)`` gives the text for other serializers.
    """

    __slots__ = ("array", "text")

    def __init__(self, text: bytes, array: np.ndarray) -> None:
        self.text = text
        self.array = array  # the encoded bytes (uint8), for validation with the reader's rules

    def __str__(self) -> str:
        return self.text.decode("ascii")

    def __len__(self) -> int:
        return len(self.text)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Blob):
            return self.text == other.text
        if isinstance(other, str):
            return self.text == other.encode("ascii", "replace")
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Blob({len(self.text)} base64 characters)"


def json_default(value: Any) -> Any:
    """``default=`` for ``orjson.dumps``: writes a :class:`Blob` as its JSON string."""
    if isinstance(value, Blob):
        return orjson.Fragment(b'"' + value.text + b'"')
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


class _Given(_reference._Choice):
    """A choice whose base64 fields are the encoder's own blobs (no decoding), checked by the
    readers' rules with the kernels in use."""

    @property  # type: ignore[override]
    def kernels(self) -> Any:
        return _select.kernels

    def blob(self, value, path):
        if isinstance(value, Blob):
            return value.array
        return super().blob(value, path)


def _given_choice() -> Any:
    return _Given(None)


def _row_firsts(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The first value of each row, -1 for a row that is empty or out of range (the reader
    then reports that row)."""
    starts, ends = bounds[:-1], bounds[1:]
    ok = (starts >= 0) & (starts < ends) & (starts < len(values))
    firsts = np.full(len(starts), -1, dtype=np.int64)
    firsts[ok] = values[starts[ok]]
    return firsts


def _blob(array: np.ndarray) -> Blob:
    raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return Blob(_select.kernels.b64encode(raw), raw)


def _integers(values: Any, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, not {array.dtype}")
    return array.astype(np.int64, copy=False).reshape(-1) if array.size else np.zeros(0, np.int64)


def _check_ids(array: np.ndarray, name: str, high: int = MAX_TOKEN_ID) -> None:
    if array.size and (array.min() < 0 or array.max() > high):
        raise ValueError(f"{name} must hold ids in [0, {high}]")


_PACKED = {"float32": "<f4", "float64": "<f8", "int32": "<i4"}


def encode_packed(array: Any) -> dict[str, Any]:
    """``{"data", "shape", "dtype"}`` for a 1-D float32/float64 (sampled logprobs: finite and
    above the -9999 sentinel) or int32 (sampling-mask ids or counts: non-negative) array."""
    values = np.asarray(array)
    name = values.dtype.name
    if name not in _PACKED or values.ndim != 1:
        raise TypeError(f"packed arrays are 1-D float32, float64 or int32, not {values.ndim}-D {name}")
    values = np.ascontiguousarray(values, dtype=_PACKED[name])
    field = {"data": _blob(values), "shape": [len(values)], "dtype": name}
    c = _given_choice()
    if name == "int32":
        bad = c.kernels.first_bad("negative", values)
        if bad >= 0:
            c.fail("Invalid packed sampling mask", "data", bad)
    else:
        _reference._parse_packed_logprobs(field, len(values), c)
    return field


def encode_compact_logprobs(
    ids: Any,
    logprobs: Any,
    offsets: Any,
    num_top_logprobs: int,
    *,
    completion_ids: Any = None,
) -> dict[str, Any]:
    """``compact_logprobs`` (``u32-f32-le-v1``): row ``t`` is ``ids/logprobs[offsets[t]:offsets[t+1]]``.

    ``completion_ids`` are the sampled ids the rows must hold; by default the first id of each
    row, where the engine's flat storage puts the sampled token.
    """
    row_ids = _integers(ids, "ids")
    _check_ids(row_ids, "ids")
    values = np.ascontiguousarray(logprobs, dtype="<f4").reshape(-1)
    if len(values) != len(row_ids):
        raise ValueError(f"{len(row_ids)} ids but {len(values)} logprobs")
    bounds = _integers(offsets, "offsets")
    data = np.concatenate([row_ids.astype("<u4").view(np.uint8), values.view(np.uint8)])
    field = {
        "data": _blob(data),
        "format": COMPACT_FORMAT,
        "offsets": bounds.tolist(),
        "num_top_logprobs": num_top_logprobs,
    }
    n = max(len(bounds) - 1, 0)
    if completion_ids is None:
        sampled = _row_firsts(row_ids, bounds)
    else:
        sampled = _integers(completion_ids, "completion_ids")
        _check_ids(sampled, "completion_ids")
        if len(sampled) != n:
            raise ValueError(f"{len(sampled)} completion ids for {n} rows")
    _reference._parse_compact_logprobs({"compact_logprobs": field}, np.asarray(sampled, np.int64), None, _given_choice())
    return field


def encode_sampling_mask(ids: Any, counts: Any, *, completion_ids: Any = None) -> dict[str, Any]:
    """The packed CSR sampling mask ``{"ids", "counts"}`` (int32): row ``t`` holds ``counts[t]``
    ids. With ``completion_ids``, every row must also hold its sampled id."""
    support = np.asarray(ids)
    sizes = np.asarray(counts)
    for name, array in (("ids", support), ("counts", sizes)):
        if array.size and array.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integers, not {array.dtype}")
        if array.size and (array.min() < 0 or array.max() > _reference.MAX_MASK_ID):
            raise ValueError(f"{name} must hold int32 values >= 0")
    field = {
        "ids": encode_packed(support.astype(np.int32).reshape(-1)),
        "counts": encode_packed(sizes.astype(np.int32).reshape(-1)),
    }
    if completion_ids is None:
        # Without the sampled ids, every other rule still holds: take each row's first id.
        bounds = np.concatenate([[0], np.cumsum(sizes.astype(np.int64).reshape(-1))])
        sampled = _row_firsts(support.astype(np.int64).reshape(-1), bounds)
    else:
        sampled = _integers(completion_ids, "completion_ids")
    _reference._parse_sampling_mask({"sampling_mask": field}, np.asarray(sampled, np.int64), _given_choice())
    return field


_ROUTED = {"uint8": "u1", "uint16": "<u2", "int32": "<i4"}


def encode_routed_experts(array: Any, start: int | None = 0) -> dict[str, Any]:
    """MoE routing replay ``{"data", "shape", "start", "dtype"}``: uint8, uint16 or int32, shaped
    ``(rows, layers, topk)``; ``start`` is the prompt offset for delta replay."""
    routing = np.asarray(array)
    name = routing.dtype.name
    if name not in _ROUTED or routing.ndim < 1:
        raise TypeError(f"routed experts are uint8, uint16 or int32 arrays, not {name}")
    routing = np.ascontiguousarray(routing, dtype=_ROUTED[name])
    field = {"data": _blob(routing), "shape": list(routing.shape), "start": start, "dtype": name}
    _reference._parse_routed_experts(field, _given_choice())
    return field


def dumps_generate_response(payload: Any) -> bytes:
    """Serialize a response exactly as vLLM's endpoint does (``json.dumps(payload,
    ensure_ascii=False, allow_nan=False, separators=(",", ":"))`` encoded as UTF-8), with every
    :class:`Blob` written as its JSON string, spliced in as bytes."""
    blobs: list[bytes] = []
    nonce = secrets.token_hex(8)

    def placeholder(value: Any) -> str:
        if isinstance(value, Blob):
            blobs.append(value.text)
            return f"\ue000tokenwire-{nonce}-{len(blobs) - 1}\ue000"
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    text = json.dumps(
        payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=placeholder
    ).encode("utf-8")
    if not blobs:
        return text
    marker = re.compile(b"\xee\x80\x80tokenwire-" + nonce.encode() + rb"-(\d+)\xee\x80\x80")
    parts = marker.split(text)
    # split() alternates text and captured indexes: text, index, text, index, ..., text.
    if len(parts) != 2 * len(blobs) + 1:
        raise RuntimeError("tokenwire: a placeholder collided with the payload's own text")
    for i in range(1, len(parts), 2):
        parts[i] = blobs[int(parts[i])]
    return b"".join(parts)
