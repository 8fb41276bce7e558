"""The pure-Python reference: the readable specification of every rule tokenwire enforces.

It applies renderers' generate-client checks (renderers 0.1.13.dev13, ``renderers/client.py``)
to the parsed JSON document, with the deliberate differences listed in the README:
canonical base64 only, every choice validated, every field that is present validated,
and anything that is not the expected shape raises :class:`MalformedResponseError`.
The compiled core must make the same decision on every input and return the same values.
"""

from __future__ import annotations

import array
import ast
import base64
import math
import re
import sys
from dataclasses import dataclass
from dataclasses import field as _field
from typing import Any, NoReturn

import numpy as np

from . import _json
from ._args import check_input, output_bytes
from ._errors import MalformedResponseError, invalid_json
from ._types import GenerateChoice, GenerateResponse, Ragged, RoutedExperts

__all__ = ["b64decode", "b64encode", "parse_generate_response", "rows_to_lists", "select_head"]

# vLLM writes this both for a missing logprob and as the clamp of -inf, so a sampled
# token at this value carries no evidence; a top-k candidate at it was filtered out.
VLLM_LOGPROB_SENTINEL = -9999.0
COMPACT_FORMAT = "u32-f32-le-v1"
# Compact rows store ids as u32, so no id outside this range can ever be matched.
MAX_TOKEN_ID = 2**32 - 1
MAX_MASK_ID = 2**31 - 1  # sampling masks are int32 on the wire
MAX_OFFSET = 2**63 - 1  # offsets index an int64-addressed buffer
MAX_DIMS = 64  # numpy's limit on an array's dimensions
PACKED_DTYPES = {"float32": np.dtype("<f4"), "float64": np.dtype("<f8")}
# int16: a captured int16 routing array passes through prime-rl's encoder as it is.
ROUTED_DTYPES = {"uint8": np.dtype("u1"), "uint16": np.dtype("<u2"), "int16": np.dtype("<i2"),
                 "int32": np.dtype("<i4")}
NPY_DESCRS = {"|u1": "uint8", "<u1": "uint8", "u1": "uint8", "<u2": "uint16", "<i2": "int16",
              "<i4": "int32"}

# Fields of a choice that become attributes; the rest stays in ``GenerateChoice.raw``.
_CONSUMED = ("index", "token_ids", "finish_reason", "sampling_mask", "kept_tokens", "routed_experts")

_CANONICAL_B64 = re.compile(rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def rows_to_lists(offsets: np.ndarray, *values: np.ndarray) -> list[list[list[Any]]]:
    """Rows cut from flat arrays as Python lists: for each array in ``values``, the list of
    ``values[offsets[i]:offsets[i + 1]].tolist()`` for every row ``i``.

    The element types are ``ndarray.tolist()``'s (Python ints for integer arrays, floats for
    float arrays). The compiled core builds the same lists without an intermediate flat list.
    """
    bounds = np.asarray(offsets).tolist()
    n = len(bounds) - 1
    out: list[list[list[Any]]] = []
    for given in values:
        flat_values = np.asarray(given)
        if n <= 0:
            out.append([])
            continue
        start, end = bounds[0], bounds[n]
        width = bounds[1] - start
        if (0 <= start <= end <= len(flat_values) and end - start == n * width
                and all(b - a == width for a, b in zip(bounds, bounds[1:]))):
            # Rows of one width (the usual head): one C call builds every list.
            out.append(flat_values[start:end].reshape(n, width).tolist())
            continue
        flat = flat_values.tolist()
        out.append([flat[a:b] for a, b in zip(bounds, bounds[1:])])
    return out


def _is_int(value: Any) -> bool:
    return type(value) is int


def _named(table: dict[str, Any], name: Any) -> Any:
    """``table[name]`` for a str ``name`` that is a key, else None (a JSON array or object
    names nothing, and cannot even be looked up)."""
    return table.get(name) if isinstance(name, str) else None


def _b64(data: Any) -> bytes | None:
    """Canonical base64 (standard alphabet, padded, nothing else) or None."""
    if isinstance(data, str):
        if not data.isascii():
            return None
        data = data.encode("ascii")
    else:
        try:
            data = memoryview(data).cast("B").tobytes()
        except TypeError:
            return None
    if _CANONICAL_B64.fullmatch(data) is None:
        return None
    return base64.b64decode(data, validate=True)


def b64decode(data: Any, out: Any = None) -> np.ndarray:
    """Strictly decode base64 ``data`` to a uint8 array (into ``out`` when given)."""
    check_input(data)
    target = None if out is None else output_bytes(out)
    text = data.encode("ascii", "replace") if isinstance(data, str) else memoryview(data).cast("B")
    # The size the length and the padding promise decides whether out is big enough, before
    # the characters are read (as the compiled core decodes straight into out).
    tail = bytes(text[-3:])
    pads = len(tail) - len(tail.rstrip(b"="))
    if len(text) % 4 or pads > 2 or (isinstance(data, str) and not data.isascii()):
        raise MalformedResponseError("invalid base64")
    need = len(text) // 4 * 3 - pads
    if target is not None and len(target) < need:
        raise ValueError(f"output buffer holds {len(target)} bytes, {need} needed")
    decoded = _b64(data)
    if decoded is None:
        raise MalformedResponseError("invalid base64")
    if target is None:
        return np.frombuffer(bytearray(decoded), dtype=np.uint8)
    target[: len(decoded)] = np.frombuffer(decoded, dtype=np.uint8)
    return target[: len(decoded)]


def b64encode(data: Any) -> bytes:
    """Standard base64 with padding, as bytes."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return base64.b64encode(memoryview(data).cast("B"))


# --- the per-token loops (kernels): free functions; the compiled core has the same ones in C ---


def int_list(value: Any, high: int) -> tuple[np.ndarray, int, int | None] | None:
    """An int list: its values before the first bad element (int64), its length, and the
    index of the first element that is not an int in ``[0, high]`` (or None). None when
    ``value`` is not a list."""
    if not isinstance(value, list):
        return None
    high = min(high, 2**63 - 1)  # the values are int64
    if value and set(map(type, value)) == {int}:
        # The common all-valid list in one C conversion; the element loop below runs
        # only to find the first bad element.
        try:
            values = np.frombuffer(array.array("Q", value), dtype=np.uint64)
        except OverflowError:  # a negative id, or one beyond 64 bits
            values = None
        if values is not None and int(values.max()) <= high:
            return values.view(np.int64), len(value), None
    for i, x in enumerate(value):
        if not _is_int(x) or not 0 <= x <= high:
            return np.array(value[:i], dtype=np.int64), len(value), i
    return np.array(value, dtype=np.int64), len(value), None


def first_bad(rule: str, values: np.ndarray) -> int:
    """Index of the first value breaking ``rule``, or -1. ``"packed"``: finite and above the
    sentinel; ``"compact"``: finite and at most 1e-6; ``"negative"``: not below zero."""
    if rule == "packed":
        ok = np.isfinite(values) & (values > VLLM_LOGPROB_SENTINEL)
    elif rule == "compact":
        ok = np.isfinite(values) & ~(values > 1e-6)
    else:
        ok = values >= 0
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else -1


def first_bad_support(ids: np.ndarray, rows: Ragged, limit: int) -> int:
    """First of the first ``limit`` supports that is empty, repeats an id, or misses the
    sampled id; -1 when there is none."""
    for index, (sampled, support) in enumerate(zip(ids.tolist()[:limit], rows_to_lists(rows.offsets, rows.values)[0])):
        if not support or len(set(support)) != len(support) or sampled not in support:
            return index
    return -1


def compact_rows(
    ids: np.ndarray, row_ids: np.ndarray, row_values: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, tuple[int, str] | None]:
    """The per-row rules of compact logprobs: the sampled values (float32), and the first
    row that breaks a rule with its reason (or None)."""
    sampled = np.zeros(len(ids), dtype=np.float32)
    bounds = offsets.tolist()
    for index, token_id in enumerate(ids.tolist()):
        start, end = bounds[index], bounds[index + 1]
        items = list(zip(row_ids[start:end].tolist(), row_values[start:end].tolist()))
        # The engine's flat storage may repeat the sampled id inside its row; a dict
        # keeps the first position and the last value, exactly as vLLM's own dict would.
        row = dict(items)
        if any(row[i] != p for i, p in items):
            return sampled, (index, "Repeated compact logprobs disagree")
        if token_id not in row or row[token_id] == VLLM_LOGPROB_SENTINEL:
            return sampled, (index, "Missing compact sampled-token evidence")
        sampled[index] = row[token_id]
    return sampled, None


def compact_candidates(
    row_ids: np.ndarray, row_values: np.ndarray, offsets: np.ndarray, num_top: int
) -> Candidates:
    """The head candidates of each compact row: its first ``max(num_top, 1)`` distinct ids
    in row order (a dict built from the row keeps the first position of a repeat)."""
    rows = []
    bounds = offsets.tolist()
    for index in range(len(bounds) - 1):
        start, end = bounds[index], bounds[index + 1]
        row = dict(zip(row_ids[start:end].tolist(), row_values[start:end].tolist()))
        rows.append(list(row.items())[: max(num_top, 1)])
    return Candidates.from_rows(rows)


def heads(
    ids: np.ndarray,
    candidates: Candidates,
    sampled_lps: np.ndarray,
    k: int,
    supports: Ragged | None,
    limit: int,
) -> tuple[Ragged, Ragged, tuple[int, str] | None]:
    """The head of each of the first ``limit`` tokens (ids int64, logprobs float64), and
    the first token whose head breaks a rule with the reason (or None)."""
    top_ids: list[list[int]] = []
    top_logprobs: list[list[float]] = []
    bounds = candidates.offsets.tolist()
    cand_ids, cand_lps = candidates.ids.tolist(), candidates.logprobs.tolist()
    ids_list, sampled = ids.tolist(), sampled_lps.tolist()
    bad = None
    for t in range(limit):
        head = dict(zip(cand_ids[bounds[t] : bounds[t + 1]], cand_lps[bounds[t] : bounds[t + 1]]))
        # An empty row is an absent kept set (kept_tokens' zero count): the unmasked rule.
        support = supports[t].tolist() if supports is not None and len(supports[t]) else None
        try:
            chosen_ids, chosen_lps = select_head(head, ids_list[t], sampled[t], k, support)
        except MalformedResponseError as exc:
            bad = (t, exc.reason)
            break
        top_ids.append(chosen_ids)
        top_logprobs.append(chosen_lps)
    return Ragged.from_lists(top_ids, np.int64), Ragged.from_lists(top_logprobs, np.float64), bad


def nested_ints(value: list[Any]) -> tuple[Ragged, int, int | None]:
    """A list of int lists: its rows before the first row that is not a list of ints in
    ``[0, MAX_MASK_ID]`` (int32), its length, and that row's index (or None)."""
    for index, row in enumerate(value):
        if not isinstance(row, list) or not all(_is_int(i) and 0 <= i <= MAX_MASK_ID for i in row):
            return Ragged.from_lists(value[:index], np.int32), len(value), index
    return Ragged.from_lists(value, np.int32), len(value), None


def blob(value: Any) -> np.ndarray | None:
    """The bytes of a canonical base64 string (a new uint8 array), or None."""
    raw = _b64(value)
    return None if raw is None else np.frombuffer(bytearray(raw), dtype=np.uint8)


def native_entries(content: list[Any], ids: np.ndarray, want_top: bool) -> NativeEntries:
    """Both passes over native ``logprobs.content`` records (see :class:`NativeEntries`)."""
    ids_list = ids.tolist()
    sampled = np.zeros(len(ids_list), dtype=np.float64)
    sampled_err = None
    for index, entry in enumerate(content):
        logprob = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(entry, dict):
            sampled_err = (index, "not_object")
        elif _logprob_token_id(entry) != ids_list[index]:
            sampled_err = (index, "token")
        elif isinstance(logprob, bool) or not isinstance(logprob, (int, float)):
            sampled_err = (index, "number")
        elif not math.isfinite(logprob):
            sampled_err = (index, "finite")
        elif logprob == VLLM_LOGPROB_SENTINEL:
            sampled_err = (index, "evidence")
        else:
            sampled[index] = logprob
            continue
        break
    rows: list[list[tuple[int, float]]] = []
    entry_lps = np.zeros(len(ids_list), dtype=np.float64)
    top_err = None
    for index, entry in enumerate(content if want_top else ()):
        head, problem = _native_head(entry)
        if problem is None:
            logprob = entry.get("logprob")
            if isinstance(logprob, bool) or not isinstance(logprob, (int, float)):
                problem = "sampled_not_number"
            else:
                entry_lps[index] = logprob
        if problem is not None:
            top_err = (index, problem)
            break
        rows.append(list(head.items()))
    rows += [[] for _ in range(len(ids_list) - len(rows))]
    return NativeEntries(sampled, sampled_err, Candidates.from_rows(rows), entry_lps, top_err)


# --- the evidence of a choice: what the rules read ------------------------------------------------


@dataclass(eq=False)
class Evidence:
    """What was read of one choice (``index`` None: the top level) before its rules run.

    ``values`` maps a field's path to what was read there: ``int_list``'s result for an id
    or offset list, ``blob``'s for a base64 string, ``nested_ints``' for a list-form mask,
    :class:`NativeEntries` for ``logprobs.content`` (with ``"logprobs.content:len"`` its
    length), and under ``"PATH:raw"`` the value a blanked field had as sent. An extractor
    fills it: :func:`extract_choice` from the parsed document, or the compiled core in one
    pass over the raw bytes. A path that is not there is read from the parsed value when a
    rule needs it, with ``kernels`` (so a caller holding only a dict, like the writer and
    the renderers drop-in, fills what it has and leaves the rest).
    """

    index: int | None
    values: dict[str, Any] = _field(default_factory=dict)
    kernels: Any = None  # the free functions of the per-token loops; this module when None
    error: Any = MalformedResponseError  # what a broken rule raises (a subclass of it)
    source: Any = None  # the raw bytes that ``PATH:span`` values point into

    def __post_init__(self) -> None:
        if self.kernels is None:
            self.kernels = sys.modules[__name__]

    def fail(self, reason: str, field: str | None = None, token: int | None = None) -> NoReturn:
        raise self.error(reason, choice=self.index, field=field, token=token)


_MISSING = object()


def _ints(c: Evidence, value: Any, path: str, high: int) -> tuple[np.ndarray, int, int | None] | None:
    got = c.values.get(path, _MISSING)
    return c.kernels.int_list(value, high) if got is _MISSING else got


def _blob(c: Evidence, value: Any, path: str) -> np.ndarray | None:
    got = c.values.get(path, _MISSING)
    return c.kernels.blob(value) if got is _MISSING else got


def _nested(c: Evidence, value: list[Any], path: str) -> tuple[Ragged, int, int | None]:
    got = c.values.get(path, _MISSING)
    return c.kernels.nested_ints(value) if got is _MISSING else got


def _native(c: Evidence, content: list[Any], ids: np.ndarray, want_top: bool) -> NativeEntries:
    got = c.values.get("logprobs.content", _MISSING)
    return c.kernels.native_entries(content, ids, want_top) if got is _MISSING else got


def _length(c: Evidence, value: list[Any], path: str) -> int:
    return c.values.get(path + ":len", len(value))


# Fields that GenerateChoice.raw may keep and the compiled extractor blanks in part.
_MAY_BE_BLANKED = ("logprobs", "completion_logprobs")


def extract_choice(index: int | None, choice: Any, k: int | None = None) -> Evidence:
    """The pure-Python extractor: the evidence of one parsed choice (``index`` None: the
    top level, ``choice`` the document), as the compiled core's one pass over the raw bytes
    reads it."""
    values: dict[str, Any] = {}
    c = Evidence(index, values)
    if not isinstance(choice, dict):
        return c
    if index is None:
        values["prompt_token_ids"] = int_list(choice.get("prompt_token_ids"), MAX_TOKEN_ID)
        return c
    values["token_ids"] = ids = int_list(choice.get("token_ids"), MAX_TOKEN_ID)
    compact = choice.get("compact_logprobs")
    if isinstance(compact, dict):
        values["compact_logprobs.offsets"] = int_list(compact.get("offsets"), MAX_OFFSET)
        values["compact_logprobs.data"] = blob(compact.get("data"))
    for name, key in (("completion_logprobs", "data"), ("routed_experts", "data"), ("kept_tokens", "ids"),
                      ("kept_tokens", "counts")):
        value = choice.get(name)
        if isinstance(value, dict):
            values[f"{name}.{key}"] = blob(value.get(key))
    mask = choice.get("sampling_mask")
    if isinstance(mask, list):
        values["sampling_mask"] = nested_ints(mask)
    elif isinstance(mask, dict):
        for name in ("ids", "counts"):
            packed = mask.get(name)
            if isinstance(packed, dict):
                values[f"sampling_mask.{name}.data"] = blob(packed.get("data"))
    routed = choice.get("routed_experts")
    if isinstance(routed, str):
        values["routed_experts"] = blob(routed)
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if isinstance(content, list):
        values["logprobs.content:len"] = len(content)
        packed = choice.get("completion_logprobs") is not None
        if (compact is None and (not packed or k is not None) and ids is not None and ids[2] is None
                and len(content) == ids[1]):
            values["logprobs.content"] = native_entries(content, ids[0], k is not None)
    return c


@dataclass
class Candidates:
    """Head candidates per token in CSR form, ids distinct within a token, in engine order."""

    offsets: np.ndarray  # int64, n + 1
    ids: np.ndarray  # int64
    logprobs: np.ndarray  # float64

    @classmethod
    def from_rows(cls, rows: list[list[tuple[int, float]]]) -> Candidates:
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=offsets[1:])
        ids = np.array([i for r in rows for i, _ in r], dtype=np.int64)
        logprobs = np.array([p for r in rows for _, p in r], dtype=np.float64)
        return cls(offsets, ids, logprobs)


@dataclass
class NativeEntries:
    """Both passes over native ``logprobs.content``, each with its first failing entry.

    ``sampled``/``sampled_err``: the entries' logprobs as sampled-token evidence, and
    ``(index, code)`` of the first entry that is not (codes: ``not_object``, ``token``,
    ``number``, ``finite``, ``evidence``). ``candidates``/``entry_lps``/``top_err``: each
    entry's ``top_logprobs`` and own logprob, and the first entry whose candidates break a
    rule (``missing_top``, ``top_not_object``, ``top_no_id``, ``top_not_finite``,
    ``top_positive``, ``top_duplicate``, ``sampled_not_number``); entries from there on have
    no candidates.
    """

    sampled: np.ndarray
    sampled_err: tuple[int, str] | None
    candidates: Candidates
    entry_lps: np.ndarray
    top_err: tuple[int, str] | None


def _native_head(entry: Any) -> tuple[dict[int, float], str | None]:
    """One entry's ``top_logprobs`` as ``{id: logprob}``, or the code of its first problem."""
    candidates = entry.get("top_logprobs") if isinstance(entry, dict) else None
    if not isinstance(candidates, list) or not candidates:
        return {}, "missing_top"
    head: dict[int, float] = {}
    for candidate in candidates:
        if not isinstance(candidate, dict):
            return head, "top_not_object"
        token_id = _logprob_token_id(candidate)
        if token_id is None:
            return head, "top_no_id"
        logprob = candidate.get("logprob")
        if isinstance(logprob, bool) or not isinstance(logprob, (int, float)) or not math.isfinite(logprob):
            return head, "top_not_finite"
        if logprob > 1e-6:
            return head, "top_positive"
        if token_id in head:
            return head, "top_duplicate"
        head[token_id] = float(logprob)
    return head, None


def _int_list(c: Evidence, value: Any, field: str, high: int, reason: str) -> np.ndarray:
    parsed = _ints(c, value, field, high)
    if parsed is None:
        c.fail(f"{reason}: expected a list", field)
    values, _, bad = parsed
    if bad is not None:
        c.fail(reason, field, bad)
    return values


def first_not_rising(offsets: np.ndarray) -> int:
    """First index breaking ``offsets[0] == 0`` and strictly increasing offsets, or -1."""
    if len(offsets) and offsets[0] != 0:
        return 0
    bad = np.flatnonzero(np.diff(offsets) <= 0)
    return int(bad[0]) + 1 if len(bad) else -1


def _shape_is(shape: Any, count: int) -> bool:
    return isinstance(shape, list) and len(shape) == 1 and _is_int(shape[0]) and shape[0] == count


# --- sampled-token logprobs: packed --------------------------------------------------------------


def _parse_packed_logprobs(packed: Any, n: int, c: Evidence) -> np.ndarray:
    field = "completion_logprobs"
    if not isinstance(packed, dict):
        c.fail("Engine response choice.completion_logprobs must be an object.", field)
    dtype = _named(PACKED_DTYPES, packed.get("dtype"))
    if dtype is None:
        c.fail("Unsupported packed logprob dtype (float32 or float64)", field + ".dtype")
    raw = _blob(c, packed.get("data"), field + ".data")
    if raw is None:
        c.fail("Invalid packed logprob base64", field + ".data")
    if len(raw) % dtype.itemsize:
        c.fail("Invalid packed logprob buffer length", field + ".data")
    values = raw.view(dtype)
    if "shape" in packed and not _shape_is(packed["shape"], len(values)):
        c.fail(f"Packed logprob shape does not match its {len(values)} values", field + ".shape")
    bad = -1 if len(values) != n else c.kernels.first_bad("packed", values)
    if len(values) != n or bad >= 0:
        c.fail(
            f"Engine response choice.completion_logprobs: {len(values)} values for "
            f"{n} completion tokens, or a non-finite or missing (-9999) logprob.",
            field, None if bad < 0 else bad,
        )
    return values


# --- sampled-token logprobs: native JSON ---------------------------------------------------------


def _token_string_id(token: Any) -> int | None:
    """The id in a ``"token_id:N"`` string (ASCII digits, at most 2**32 - 1), else None."""
    if isinstance(token, str) and token.startswith("token_id:"):
        digits = token[9:]
        if digits.isascii() and digits.isdigit():
            token_id = int(digits)
            if token_id <= MAX_TOKEN_ID:
                return token_id
    return None


def _logprob_token_id(entry: dict[str, Any]) -> int | None:
    """The id a logprob record names: ``token_id`` if present, else a ``"token_id:N"`` token."""
    if "token_id" in entry:
        token_id = entry["token_id"]
        return token_id if _is_int(token_id) and 0 <= token_id <= MAX_TOKEN_ID else None
    return _token_string_id(entry.get("token"))


_NATIVE_SAMPLED = {
    "not_object": "{at} must be an object.",
    "token": "{at}.token must be 'token_id:{id}'.",
    "number": "{at}.logprob must be a number.",
    "finite": "{at}.logprob must be finite.",
    "evidence": "{at}.logprob does not contain sampling evidence.",
}
_NATIVE_TOP = {
    "missing_top": "Missing requested top logprobs",
    "top_not_object": "Top logprob must be an object",
    "top_no_id": "Top logprob must identify a nonnegative token id",
    "top_not_finite": "Top logprob must be finite",
    "top_positive": "Top logprob cannot be positive",
    "top_duplicate": "Duplicate top logprob token id",
    "sampled_not_number": "{at}.logprob must be a number.",
}


def _native_message(messages: dict[str, str], code: str, index: int, ids: np.ndarray) -> str:
    at = f"Engine response choice.logprobs.content[{index}]"
    return messages[code].format(at=at, id=int(ids[index]))


def _parse_native_logprobs(
    choice: dict[str, Any], ids: np.ndarray, c: Evidence, want_top: bool = False
) -> tuple[np.ndarray, NativeEntries]:
    """The sampled logprobs from native records; with ``want_top`` the same read also
    collects the head candidates, for :func:`_parse_native_heads`."""
    field = "logprobs.content"
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        c.fail("Engine response choice.logprobs must be an object.", "logprobs")
    content = logprobs.get("content")
    sampled = logprobs.get("sampled")
    if content is None and sampled is not None:  # vLLM's sampled-only logprobs
        return _parse_sampled_list(sampled, ids, c), None
    if not isinstance(content, list):
        c.fail("Engine response choice.logprobs.content must be a list.", field)
    count = _length(c, content, field)
    if count != len(ids):
        c.fail(
            "Engine response completion token count "
            f"({len(ids)}) does not match logprob count ({count}).",
            field,
        )
    entries = _native(c, content, ids, want_top)
    if entries.sampled_err is not None:
        index, code = entries.sampled_err
        c.fail(_native_message(_NATIVE_SAMPLED, code, index, ids), field, index)
    if sampled is not None:
        _check_sampled_agrees(_parse_sampled_list(sampled, ids, c), entries.sampled, c)
    return entries.sampled, entries


# vLLM's ``logprobs.sampled`` (``return_token_logprobs``): one number per completion token.
_SAMPLED_AT = "Engine response choice.logprobs.sampled"
_SAMPLED_VALUE = {
    "number": "{at} must be a number.",
    "finite": "{at} must be finite.",
    "evidence": "{at} does not contain sampling evidence.",
}


def _first_bad_number(values: list[Any]) -> tuple[int, str] | None:
    """The first value that is not sampled-token evidence and its code in
    :data:`_SAMPLED_VALUE`, or None."""
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return index, "number"
        try:
            number = float(value)
        except OverflowError:  # an int beyond the double range
            return index, "finite"
        if not math.isfinite(number):
            return index, "finite"
        if number == VLLM_LOGPROB_SENTINEL:
            return index, "evidence"
    return None


def _parse_sampled_list(sampled: Any, ids: np.ndarray, c: Evidence) -> np.ndarray:
    """``logprobs.sampled`` as the sampled-token logprobs (float64), under the rules of a
    ``logprobs.content`` record's ``logprob``."""
    field = "logprobs.sampled"
    if not isinstance(sampled, list):
        c.fail(f"{_SAMPLED_AT} must be a list.", field)
    if len(sampled) != len(ids):
        c.fail(
            f"Engine response completion token count ({len(ids)}) does not match "
            f"logprobs.sampled count ({len(sampled)}).",
            field,
        )
    bad = _first_bad_number(sampled)
    if bad is not None:
        index, code = bad
        c.fail(_SAMPLED_VALUE[code].format(at=f"{_SAMPLED_AT}[{index}]"), field, index)
    return np.array(sampled, dtype=np.float64)


def _check_sampled_agrees(sampled: np.ndarray, content: np.ndarray, c: Evidence) -> None:
    """``logprobs.sampled`` beside ``logprobs.content``: both name each token's logprob, and
    they must be the same number (within the head rule's tolerance)."""
    close = np.isclose(sampled, content, rtol=1e-6, atol=1e-5)
    differ = np.flatnonzero(~close)
    if len(differ):
        t = int(differ[0])
        c.fail(
            f"{_SAMPLED_AT}[{t}] ({float(sampled[t])!r}) and logprobs.content[{t}].logprob "
            f"({float(content[t])!r}) disagree.",
            "logprobs.sampled",
            t,
        )


# --- sampling mask -------------------------------------------------------------------------------


def _parse_sampling_mask(choice: dict[str, Any], ids: np.ndarray, c: Evidence) -> Ragged | None:
    field = "sampling_mask"
    mask = choice.get(field)
    bare = False
    if mask is None and choice.get("kept_tokens") is not None:
        # An older server branch: the same CSR under another name, with bare base64 strings.
        field, mask, bare = "kept_tokens", choice["kept_tokens"], True
    if mask is None:
        return None
    bad_row = None
    if isinstance(mask, dict):
        arrays = {}
        for name in ("ids", "counts"):
            packed = mask.get(name)
            if bare:
                data, source = packed, f"{field}.{name}"
            elif not isinstance(packed, dict) or packed.get("dtype") != "int32":
                c.fail("Invalid packed sampling mask", f"{field}.{name}")
            else:
                data, source = packed.get("data"), f"{field}.{name}.data"
            raw = _blob(c, data, source)
            if raw is None or len(raw) % 4:
                c.fail("Invalid packed sampling mask", f"{field}.{name}.data")
            values = raw.view("<i4")
            if not bare and not _shape_is(packed.get("shape"), len(values)):
                c.fail("Invalid packed sampling mask", f"{field}.{name}.shape")
            negative = c.kernels.first_bad("negative", values)
            if negative >= 0:
                c.fail("Invalid packed sampling mask", f"{field}.{name}", negative)
            arrays[name] = values
        counts, values = arrays["counts"], arrays["ids"]
        if len(counts) != len(ids) or int(counts.sum(dtype=np.int64)) != len(values):
            c.fail("Sampling mask token count mismatch", field)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        rows = Ragged(offsets, values)
    elif isinstance(mask, list):
        rows, count, bad_row = _nested(c, mask, field)
        if count != len(ids):
            c.fail("Sampling mask token count mismatch", field)
    else:
        c.fail("Sampling mask token count mismatch", field)
    # The first row that breaks a rule: malformed (bad_row) or not a valid support.
    limit = len(ids) if bad_row is None else bad_row
    bad = _first_bad_kept_row(ids, rows, limit, c) if bare else c.kernels.first_bad_support(ids, rows, limit)
    if bad >= 0:
        c.fail("Invalid recorded sampling support", field, bad)
    if bad_row is not None:
        c.fail("Invalid recorded sampling support", field, bad_row)
    return rows


def _first_bad_kept_row(ids: np.ndarray, rows: Ragged, limit: int, c: Evidence) -> int:
    """:func:`first_bad_support` over kept_tokens rows, where an empty row (a zero count) is
    an absent kept set and breaks no rule: the present rows of the first ``limit`` are checked."""
    lengths = np.diff(rows.offsets[: limit + 1])
    present = np.flatnonzero(lengths)
    if len(present) == limit:
        return int(c.kernels.first_bad_support(ids, rows, limit))
    offsets = np.zeros(len(present) + 1, dtype=np.int64)
    np.cumsum(lengths[present], out=offsets[1:])
    first = int(rows.offsets[0])
    kept = Ragged(offsets, rows.values[first : first + int(offsets[-1])])
    bad = int(c.kernels.first_bad_support(ids[present], kept, len(present)))
    return int(present[bad]) if bad >= 0 else -1


def _mask_field(choice: dict[str, Any]) -> str | None:
    """The field :func:`_parse_sampling_mask` reads the supports from, or None."""
    if choice.get("sampling_mask") is not None:
        return "sampling_mask"
    return "kept_tokens" if choice.get("kept_tokens") is not None else None


def _fail_head(c: Evidence, choice: dict[str, Any], field: str, bad: tuple[int, str], supports: Ragged | None):
    """Report the head rule ``bad`` broke. A kept set with an id the head has no candidate
    logprob for is located at ``kept_tokens`` and says what to request."""
    token, reason = bad
    if reason == _HEAD_MISSING_SUPPORT and supports is not None and _mask_field(choice) == "kept_tokens":
        width = len(supports[token])
        c.fail(
            f"{reason}: kept_tokens[{token}] holds {width} ids and the response has no candidate "
            f"logprob for some of them; request at least {width} top logprobs per token "
            "(vLLM's `logprobs`, with `logprobs_mode` processed_logprobs) or parse without top_k",
            "kept_tokens",
            token,
        )
    c.fail(reason, field, token)


# --- top-k head ----------------------------------------------------------------------------------


# select_head's refusals; HEAD_REASONS lists them in the order of tw_heads' codes 1..5.
_HEAD_DISAGREE = "Sampler head and sampled-token logprob disagree"
_HEAD_MISSING_SUPPORT = "Missing sampling-support probabilities"
_HEAD_NOT_NORMALIZED = "Sampler probabilities must normalize over the recorded support"
_HEAD_BAD_MASS = "Invalid sampler head probability mass"
_HEAD_TOO_FEW = "Engine returned fewer top logprobs than requested"
HEAD_REASONS = (_HEAD_DISAGREE, _HEAD_MISSING_SUPPORT, _HEAD_NOT_NORMALIZED, _HEAD_BAD_MASS, _HEAD_TOO_FEW)


def select_head(
    head: dict[int, float],
    sampled_id: int,
    sampled_logprob: float,
    k: int,
    support: list[int] | None = None,
) -> tuple[list[int], list[float]]:
    """Keep an action-independent head of ``k`` candidates, or exactly the recorded support.

    ``head`` maps candidate ids to logprobs in the order the engine sent them. Raises
    :class:`MalformedResponseError` (without a location) when the evidence is inconsistent.
    """
    if sampled_id in head and not math.isclose(
        head[sampled_id], sampled_logprob, rel_tol=1e-6, abs_tol=1e-5
    ):
        raise MalformedResponseError(_HEAD_DISAGREE)
    # Candidates at the sentinel were filtered out by the sampler (-inf on the engine side).
    ranked = sorted(
        ((i, p) for i, p in head.items() if p != VLLM_LOGPROB_SENTINEL),
        key=lambda item: (-item[1], item[0]),
    )
    if support is not None:
        support_set = set(support)
        if not support_set.issubset(i for i, _ in ranked):
            raise MalformedResponseError(_HEAD_MISSING_SUPPORT)
        ranked = [(i, p) for i, p in ranked if i in support_set]
        if not math.isclose(
            math.fsum(math.exp(p) for _, p in ranked), 1.0, rel_tol=0, abs_tol=1e-4
        ):
            raise MalformedResponseError(_HEAD_NOT_NORMALIZED)
    elif len(ranked) > k and ranked[k - 1][1] == ranked[k][1]:
        # A tie across the k-th place: keeping any of the tied candidates would make the
        # head depend on the order the engine happened to list them in.
        boundary = ranked[k][1]
        ranked = [(i, p) for i, p in ranked if p > boundary]
    else:
        ranked = ranked[:k]
    if not ranked or math.fsum(math.exp(p) for _, p in ranked) > 1.0001:
        raise MalformedResponseError(_HEAD_BAD_MASS)
    if support is None and len(head) < k + 2:
        raise MalformedResponseError(_HEAD_TOO_FEW)
    return [i for i, _ in ranked], [p for _, p in ranked]


def _head_or_fail(c: Evidence, field: str, index: int, *args: Any) -> tuple[list[int], list[float]]:
    try:
        return select_head(*args)
    except MalformedResponseError as exc:
        c.fail(exc.reason, field, index)
        raise  # unreachable


# --- sampled-token logprobs and heads: compact ---------------------------------------------------


def _parse_compact_logprobs(
    choice: dict[str, Any], ids: np.ndarray, k: int | None, c: Evidence
) -> tuple[np.ndarray, Ragged | None, Ragged | None, Ragged | None]:
    field = "compact_logprobs"
    packed = choice[field]
    if not isinstance(packed, dict) or packed.get("format") != COMPACT_FORMAT:
        c.fail("Unsupported compact logprob format", field + ".format")
    parsed = _ints(c, packed.get("offsets"), field + ".offsets", MAX_OFFSET)
    if parsed is None or parsed[1] != len(ids) + 1:
        c.fail("Invalid compact logprob offsets", field + ".offsets")
    offsets, _, bad_offset = parsed
    rising = c.kernels.first_not_rising(offsets)  # over the valid prefix: the first failure wins
    if rising >= 0:
        c.fail("Invalid compact logprob offsets", field + ".offsets", rising)
    if bad_offset is not None:
        c.fail("Invalid compact logprob offsets", field + ".offsets", bad_offset)
    num_top = packed.get("num_top_logprobs")
    if not _is_int(num_top) or num_top < -1:
        c.fail("Invalid compact logprob candidate count", field + ".num_top_logprobs")
    raw = _blob(c, packed.get("data"), field + ".data")
    if raw is None:
        c.fail("Invalid compact logprob base64", field + ".data")
    count = int(offsets[-1])
    if len(raw) != count * 8:
        c.fail("Invalid compact logprob buffer length", field + ".data")
    row_ids = raw[: count * 4].view("<u4")
    row_values = raw[count * 4 :].view("<f4")
    bad = c.kernels.first_bad("compact", row_values)
    if bad >= 0:
        row = int(np.searchsorted(offsets, bad, side="right")) - 1
        c.fail("Invalid compact logprob values", field, row)
    if k is None:
        # Without a head the rows' own errors come first (renderers never looks at the mask
        # then); with one, the support decides the head, so it is checked before the rows.
        sampled, bad = c.kernels.compact_rows(ids, row_ids, row_values, offsets)
        if bad is not None:
            c.fail(bad[1], field, bad[0])
        return sampled, None, None, _parse_sampling_mask(choice, ids, c)
    supports = _parse_sampling_mask(choice, ids, c)
    sampled, bad = c.kernels.compact_rows(ids, row_ids, row_values, offsets)
    candidates = c.kernels.compact_candidates(row_ids, row_values, offsets, num_top)
    # Rows are checked in order, a row's own rules before its head: a head error in an
    # earlier row comes first, then the row error.
    limit = len(ids) if bad is None else bad[0]
    top_ids, top_logprobs, head_bad = c.kernels.heads(ids, candidates, sampled.astype(np.float64), k, supports, limit)
    if head_bad is not None:
        _fail_head(c, choice, field, head_bad, supports)
    if bad is not None:
        c.fail(bad[1], field, bad[0])
    return sampled, top_ids, Ragged(top_logprobs.offsets, top_logprobs.values.astype(np.float32)), supports


def _parse_native_heads(
    choice: dict[str, Any], ids: np.ndarray, k: int, c: Evidence, entries: NativeEntries | None = None
) -> tuple[Ragged, Ragged, Ragged | None]:
    field = "logprobs.content"
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or _length(c, content, field) != len(ids):
        c.fail("Missing requested top logprobs", field)
    supports = _parse_sampling_mask(choice, ids, c)
    if entries is None:  # the sampled logprobs came from another transport
        entries = _native(c, content, ids, True)
    limit = len(ids) if entries.top_err is None else entries.top_err[0]
    top_ids, top_logprobs, head_bad = c.kernels.heads(ids, entries.candidates, entries.entry_lps, k, supports, limit)
    if head_bad is not None:
        _fail_head(c, choice, field, head_bad, supports)
    if entries.top_err is not None:
        index, code = entries.top_err
        c.fail(_native_message(_NATIVE_TOP, code, index, ids), field, index)
    return top_ids, top_logprobs, supports


# --- routed experts ------------------------------------------------------------------------------


def _parse_npy(raw: np.ndarray, c: Evidence) -> np.ndarray:
    """Upstream vLLM's form: a whole ``.npy`` file. Only the header fields we need are trusted."""
    field = "routed_experts"
    if bytes(raw[:6]) != b"\x93NUMPY" or len(raw) < 10:
        c.fail("routed_experts .npy magic missing", field)
    major = int(raw[6])
    if major == 1:
        size, begin = int.from_bytes(bytes(raw[8:10]), "little"), 10
    elif major in (2, 3):
        size, begin = int.from_bytes(bytes(raw[8:12]), "little"), 12
    else:
        c.fail(f"routed_experts .npy version {major} is not supported", field)
    if len(raw) < begin + size:
        c.fail("routed_experts .npy header is truncated", field)
    try:
        header = ast.literal_eval(bytes(raw[begin : begin + size]).decode("latin-1"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        header = None
    if (
        not isinstance(header, dict)
        or header.get("fortran_order") is not False
        or _named(NPY_DESCRS, header.get("descr")) is None
        or not isinstance(header.get("shape"), tuple)
    ):
        c.fail("routed_experts .npy header is invalid", field)
    return _shaped(raw[begin + size :], list(header["shape"]), NPY_DESCRS[header["descr"]], c)


def _shaped(data: np.ndarray, shape: Any, dtype_name: str, c: Evidence) -> np.ndarray:
    field = "routed_experts"
    if not isinstance(shape, list) or not shape or not all(_is_int(d) and d >= 0 for d in shape):
        c.fail("routed_experts shape must be a list of non-negative ints", field + ".shape")
    dtype = ROUTED_DTYPES[dtype_name]
    # Python ints: a declared shape can never overflow, and nothing is allocated from it.
    if math.prod(shape) * dtype.itemsize != len(data):
        c.fail(
            f"routed_experts shape {shape} x {dtype.itemsize} bytes does not match "
            f"{len(data)} decoded bytes",
            field + ".shape",
        )
    # What numpy can shape even when the bytes match: a zero dimension makes no bytes of the others.
    if len(shape) > MAX_DIMS:
        c.fail(f"routed_experts shape has {len(shape)} dimensions (at most {MAX_DIMS})", field + ".shape")
    if math.prod(d for d in shape if d) * dtype.itemsize > MAX_OFFSET:
        c.fail(f"routed_experts shape {shape} is too big for an array (its non-zero dimensions span "
               "more than 2**63 - 1 bytes)", field + ".shape")
    routing = data.view(dtype).reshape(shape)
    if dtype.kind == "i" and routing.size:
        # Expert ids are indices: a negative one names no expert (a signed dtype allows it).
        bad = c.kernels.first_bad("negative", routing.reshape(-1))
        if bad >= 0:
            c.fail("routed_experts holds a negative expert id", field, bad // (routing.size // shape[0]))
    return routing


def _parse_routed_experts(value: Any, c: Evidence) -> RoutedExperts:
    field = "routed_experts"
    if isinstance(value, str):
        raw = _blob(c, value, field)
        if raw is None:
            c.fail("Invalid routed_experts base64", field)
        return RoutedExperts(_parse_npy(raw, c), None)
    if not isinstance(value, dict):
        c.fail("routed_experts must be an object or a base64 .npy string", field)
    dtype_name = value.get("dtype", "uint8")
    if _named(ROUTED_DTYPES, dtype_name) is None:
        c.fail("Unsupported routed_experts dtype (uint8, uint16, int16 or int32)", field + ".dtype")
    start = value.get("start")
    if start is not None and (not _is_int(start) or start < 0):
        c.fail("routed_experts start must be a non-negative int", field + ".start")
    raw = _blob(c, value.get("data"), field + ".data")
    if raw is None:
        c.fail("Invalid routed_experts base64", field + ".data")
    return RoutedExperts(_shaped(raw, value.get("shape"), dtype_name, c), start)


# --- a whole response ----------------------------------------------------------------------------


def _check_top_k(top_k: Any) -> int | None:
    if isinstance(top_k, np.integer):  # numpy integers are ints (np.bool_ is not one)
        top_k = int(top_k)
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise ValueError(f"top_k must be a positive int or None, not {top_k!r}")
    return top_k


def _load(raw: Any) -> Any:
    if not isinstance(raw, (bytes, str)):
        try:
            raw = memoryview(raw).cast("B").tobytes()
        except TypeError:
            raise TypeError(
                f"expected str or a bytes-like object, not {type(raw).__name__}"
            ) from None
    try:
        return _json.loads(raw)
    except _json.JSONDecodeError as exc:
        raise invalid_json(exc, raw) from None


def _parse_choice(c: Evidence, choice: Any, k: int | None, require_logprobs: bool) -> GenerateChoice:
    if not isinstance(choice, dict):
        c.fail("choice must be an object")
    ids = _int_list(c, choice.get("token_ids"), "token_ids", MAX_TOKEN_ID, "token_ids must hold token ids in [0, 2**32)")
    top_ids = top_logprobs = None
    consumed = list(_CONSUMED)
    if choice.get("compact_logprobs") is not None:
        logprobs, top_ids, top_logprobs, mask = _parse_compact_logprobs(choice, ids, k, c)
        consumed.append("compact_logprobs")
    else:
        entries = None
        if choice.get("completion_logprobs") is not None:
            logprobs = _parse_packed_logprobs(choice["completion_logprobs"], len(ids), c)
            consumed.append("completion_logprobs")
        elif choice.get("logprobs") is not None or require_logprobs or k is not None:
            logprobs, entries = _parse_native_logprobs(choice, ids, c, want_top=k is not None)
        else:
            logprobs = None
        if k is not None:
            top_ids, top_logprobs, mask = _parse_native_heads(choice, ids, k, c, entries)
            consumed.append("logprobs")
        else:
            mask = _parse_sampling_mask(choice, ids, c)
        if logprobs is not None and "completion_logprobs" not in consumed:
            consumed.append("logprobs")
    routed = choice.get("routed_experts")
    return GenerateChoice(
        index=c.index,
        completion_ids=ids,
        completion_logprobs=logprobs,
        completion_top_ids=top_ids,
        completion_top_logprobs=top_logprobs,
        sampling_mask=mask,
        routed_experts=_parse_routed_experts(routed, c) if routed is not None else None,
        finish_reason=choice.get("finish_reason"),
        raw=_raw(c, choice, consumed),
        sampling_mask_present=None if mask is None else mask.lengths() > 0,
    )


def _raw(c: Evidence, choice: dict[str, Any], consumed: list[str]) -> dict[str, Any]:
    """The fields of a choice that are not attributes, as the document holds them (a field
    an extractor blanked comes back from its evidence)."""
    raw = {key: value for key, value in choice.items() if key not in consumed}
    for key in _MAY_BE_BLANKED:
        if key in raw and key + ":raw" in c.values:
            raw[key] = c.values[key + ":raw"]
    return raw


def parse_document(document: Any, k: int | None, require_logprobs: bool, evidence: Any = None) -> GenerateResponse:
    """Validate a parsed response. ``evidence(index, value)`` gives the :class:`Evidence` of
    each choice (index None: the top level, value the document); by default
    :func:`extract_choice` reads it from the parsed document, one choice at a time, as the
    rules reach it."""
    if not isinstance(document, dict):
        raise MalformedResponseError("response must be a JSON object")
    read = evidence or (lambda index, value: extract_choice(index, value, k))
    prompt = document.get("prompt_token_ids")
    if prompt is not None:
        prompt = _int_list(
            read(None, document), prompt, "prompt_token_ids", MAX_TOKEN_ID,
            "prompt_token_ids must hold token ids in [0, 2**32)",
        )
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedResponseError("choices must be a non-empty list", field="choices")
    parsed = [_parse_choice(read(i, choice), choice, k, require_logprobs) for i, choice in enumerate(choices)]
    return GenerateResponse(
        choices=parsed,
        request_id=document.get("request_id"),
        usage=document.get("usage"),
        prompt_token_ids=prompt,
        payload={key: v for key, v in document.items() if key not in ("choices", "prompt_token_ids")},
    )


def extract_generate(raw: Any, top_k: int | None = None) -> tuple[Any, Evidence, list[Evidence]]:
    """The pure-Python extractor of a whole generate response: the parsed document, and the
    :class:`Evidence` of its top level and of each choice (what the compiled core's
    ``extract_generate`` reads in one pass over the raw bytes)."""
    k = _check_top_k(top_k)
    document = _load(raw)
    choices = document.get("choices") if isinstance(document, dict) else None
    read = [extract_choice(i, choice, k) for i, choice in enumerate(choices)] if isinstance(choices, list) else []
    return document, extract_choice(None, document), read


def parse_generate_response(
    raw: Any, *, top_k: int | None = None, require_logprobs: bool = True
) -> GenerateResponse:
    """Parse and validate a ``/inference/v1/generate`` response (see the package docs)."""
    k = _check_top_k(top_k)
    return parse_document(_load(raw), k, require_logprobs)

