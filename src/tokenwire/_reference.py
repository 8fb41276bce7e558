"""The pure-Python reference: the readable specification of every rule tokenwire enforces.

It applies renderers' generate-client checks (renderers 0.1.13.dev13, ``renderers/client.py``)
to the parsed JSON document, with the deliberate differences listed in the README:
canonical base64 only, every choice validated, every field that is present validated,
and anything that is not the expected shape raises :class:`MalformedResponseError`.
The compiled core must make the same decision on every input and return the same values.
"""

from __future__ import annotations

import ast
import base64
import math
import re
from typing import Any

import numpy as np
import orjson

from ._errors import MalformedResponseError
from ._types import GenerateChoice, GenerateResponse, Ragged, RoutedExperts

__all__ = ["b64decode", "b64encode", "parse_generate_response", "select_head"]

# vLLM writes this both for a missing logprob and as the clamp of -inf, so a sampled
# token at this value carries no evidence; a top-k candidate at it was filtered out.
VLLM_LOGPROB_SENTINEL = -9999.0
COMPACT_FORMAT = "u32-f32-le-v1"
# Compact rows store ids as u32, so no id outside this range can ever be matched.
MAX_TOKEN_ID = 2**32 - 1
MAX_MASK_ID = 2**31 - 1  # sampling masks are int32 on the wire
MAX_OFFSET = 2**63 - 1  # offsets index an int64-addressed buffer
PACKED_DTYPES = {"float32": np.dtype("<f4"), "float64": np.dtype("<f8")}
ROUTED_DTYPES = {"uint8": np.dtype("u1"), "uint16": np.dtype("<u2"), "int32": np.dtype("<i4")}
NPY_DESCRS = {"|u1": "uint8", "<u1": "uint8", "u1": "uint8", "<u2": "uint16", "<i4": "int32"}

# Fields of a choice that become attributes; the rest stays in ``GenerateChoice.raw``.
_CONSUMED = ("index", "token_ids", "finish_reason", "sampling_mask", "kept_tokens", "routed_experts")

_CANONICAL_B64 = re.compile(rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def _is_int(value: Any) -> bool:
    return type(value) is int


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
    decoded = _b64(data)
    if decoded is None:
        if not isinstance(data, str):
            try:
                memoryview(data)
            except TypeError:
                raise TypeError(f"expected str or a bytes-like object, not {type(data).__name__}"
                ) from None
        raise MalformedResponseError("invalid base64")
    if out is None:
        return np.frombuffer(bytearray(decoded), dtype=np.uint8)
    target = np.frombuffer(memoryview(out).cast("B"), dtype=np.uint8)
    if len(target) < len(decoded):
        raise ValueError(f"output buffer holds {len(target)} bytes, {len(decoded)} needed")
    target[: len(decoded)] = np.frombuffer(decoded, dtype=np.uint8)
    return target[: len(decoded)]


def b64encode(data: Any) -> bytes:
    """Standard base64 with padding, as bytes."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return base64.b64encode(memoryview(data).cast("B"))


class _Choice:
    """One choice being parsed (``index`` None: the top level): where its errors are located,
    and how its big values are read.

    The reference reads the big values (int lists, base64 strings) from the parsed document
    and runs the per-token loops in Python; the compiled core subclasses this to read the
    same values straight from the raw bytes and to run those loops in C. Every rule, and the
    order the rules are checked in, is written once, in the functions below.
    """

    def __init__(self, index: int | None) -> None:
        self.index = index

    def fail(self, reason: str, field: str | None = None, token: int | None = None):
        raise MalformedResponseError(reason, choice=self.index, field=field, token=token)

    def ints(self, value: Any, path: str, high: int) -> tuple[np.ndarray, int, int | None] | None:
        """An int list: its values before the first bad element (int64), its length, and the
        index of the first element that is not an int in ``[0, high]`` (or None).
        None when ``value`` is not a list."""
        if not isinstance(value, list):
            return None
        for i, x in enumerate(value):
            if not _is_int(x) or not 0 <= x <= high:
                return np.array(value[:i], dtype=np.int64), len(value), i
        return np.array(value, dtype=np.int64), len(value), None

    def nested(self, value: list[Any], path: str) -> tuple[Ragged, int, int | None]:
        """A list of int lists: its rows before the first row that is not a list of ints in
        ``[0, MAX_MASK_ID]`` (int32), its length, and that row's index (or None)."""
        for index, row in enumerate(value):
            if not isinstance(row, list) or not all(_is_int(i) and 0 <= i <= MAX_MASK_ID for i in row):
                return Ragged.from_lists(value[:index], np.int32), len(value), index
        return Ragged.from_lists(value, np.int32), len(value), None

    def blob(self, value: Any, path: str) -> np.ndarray | None:
        """The bytes of a canonical base64 string (a new uint8 array), or None."""
        raw = _b64(value)
        return None if raw is None else np.frombuffer(bytearray(raw), dtype=np.uint8)

    def first_bad(self, rule: str, values: np.ndarray) -> int:
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

    def first_bad_support(self, ids: np.ndarray, rows: Ragged, limit: int) -> int:
        """First of the first ``limit`` supports that is empty, repeats an id, or misses the
        sampled id; -1 when there is none."""
        for index, (sampled, support) in enumerate(zip(ids.tolist()[:limit], rows.to_lists())):
            if not support or len(set(support)) != len(support) or sampled not in support:
                return index
        return -1

    def compact_sampled(
        self, ids: np.ndarray, row_ids: np.ndarray, row_values: np.ndarray, offsets: np.ndarray
    ) -> np.ndarray:
        """The per-row rules of compact logprobs without a head; the sampled values."""
        return compact_rows(ids.tolist(), row_ids, row_values, offsets.tolist(), 0, None, None, self)[0]


def _int_list(c: _Choice, value: Any, field: str, high: int, reason: str) -> np.ndarray:
    parsed = c.ints(value, field, high)
    if parsed is None:
        c.fail(f"{reason}: expected a list", field)
    values, _, bad = parsed
    if bad is not None:
        c.fail(reason, field, bad)
    return values


def _first_not_rising(offsets: np.ndarray) -> int:
    """First index breaking ``offsets[0] == 0`` and strictly increasing offsets, or -1."""
    if len(offsets) and offsets[0] != 0:
        return 0
    bad = np.flatnonzero(np.diff(offsets) <= 0)
    return int(bad[0]) + 1 if len(bad) else -1


def _shape_is(shape: Any, count: int) -> bool:
    return isinstance(shape, list) and len(shape) == 1 and _is_int(shape[0]) and shape[0] == count


# --- sampled-token logprobs: packed --------------------------------------------------------------


def _parse_packed_logprobs(packed: Any, n: int, c: _Choice) -> np.ndarray:
    field = "completion_logprobs"
    if not isinstance(packed, dict):
        c.fail("Engine response choice.completion_logprobs must be an object.", field)
    dtype = PACKED_DTYPES.get(packed.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        c.fail("Unsupported packed logprob dtype (float32 or float64)", field + ".dtype")
    raw = c.blob(packed.get("data"), field + ".data")
    if raw is None:
        c.fail("Invalid packed logprob base64", field + ".data")
    if len(raw) % dtype.itemsize:
        c.fail("Invalid packed logprob buffer length", field + ".data")
    values = raw.view(dtype)
    if "shape" in packed and not _shape_is(packed["shape"], len(values)):
        c.fail(f"Packed logprob shape does not match its {len(values)} values", field + ".shape")
    problem = (
        f"Engine response choice.completion_logprobs: {len(values)} values for "
        f"{n} completion tokens, or a non-finite or missing (-9999) logprob."
    )
    if len(values) != n:
        c.fail(problem, field)
    bad = c.first_bad("packed", values)
    if bad >= 0:
        c.fail(problem, field, bad)
    return values


# --- sampled-token logprobs: native JSON ---------------------------------------------------------


def _logprob_token_id(entry: dict[str, Any]) -> int | None:
    """The id a logprob record names: ``token_id`` if present, else a ``"token_id:N"`` token."""
    if "token_id" in entry:
        token_id = entry["token_id"]
        return token_id if _is_int(token_id) and 0 <= token_id <= MAX_TOKEN_ID else None
    token = entry.get("token")
    if isinstance(token, str) and token.startswith("token_id:"):
        digits = token[9:]
        if digits.isascii() and digits.isdigit():
            token_id = int(digits)
            return token_id if token_id <= MAX_TOKEN_ID else None
    return None


def _parse_native_logprobs(choice: dict[str, Any], ids_array: np.ndarray, c: _Choice) -> np.ndarray:
    field = "logprobs.content"
    ids = ids_array.tolist()
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        c.fail("Engine response choice.logprobs must be an object.", "logprobs")
    content = logprobs.get("content")
    if not isinstance(content, list):
        c.fail("Engine response choice.logprobs.content must be a list.", field)
    if len(content) != len(ids):
        c.fail(
            "Engine response completion token count "
            f"({len(ids)}) does not match logprob count ({len(content)}).",
            field,
        )
    values = np.empty(len(ids), dtype=np.float64)
    for index, entry in enumerate(content):
        at = f"Engine response choice.logprobs.content[{index}]"
        if not isinstance(entry, dict):
            c.fail(f"{at} must be an object.", field, index)
        if _logprob_token_id(entry) != ids[index]:
            c.fail(f"{at}.token must be 'token_id:{ids[index]}'.", field, index)
        logprob = entry.get("logprob")
        if isinstance(logprob, bool) or not isinstance(logprob, (int, float)):
            c.fail(f"{at}.logprob must be a number.", field, index)
        if not math.isfinite(logprob):
            c.fail(f"{at}.logprob must be finite.", field, index)
        if logprob == VLLM_LOGPROB_SENTINEL:
            c.fail(f"{at}.logprob does not contain sampling evidence.", field, index)
        values[index] = logprob
    return values


# --- sampling mask -------------------------------------------------------------------------------


def _parse_sampling_mask(choice: dict[str, Any], ids: np.ndarray, c: _Choice) -> Ragged | None:
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
            raw = c.blob(data, source)
            if raw is None or len(raw) % 4:
                c.fail("Invalid packed sampling mask", f"{field}.{name}.data")
            values = raw.view("<i4")
            if not bare and not _shape_is(packed.get("shape"), len(values)):
                c.fail("Invalid packed sampling mask", f"{field}.{name}.shape")
            negative = c.first_bad("negative", values)
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
        rows, count, bad_row = c.nested(mask, field)
        if count != len(ids):
            c.fail("Sampling mask token count mismatch", field)
    else:
        c.fail("Sampling mask token count mismatch", field)
    # The first row that breaks a rule: malformed (bad_row) or not a valid support.
    bad = c.first_bad_support(ids, rows, len(ids) if bad_row is None else bad_row)
    if bad >= 0:
        c.fail("Invalid recorded sampling support", field, bad)
    if bad_row is not None:
        c.fail("Invalid recorded sampling support", field, bad_row)
    return rows


# --- top-k head ----------------------------------------------------------------------------------


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
        raise MalformedResponseError("Sampler head and sampled-token logprob disagree")
    # Candidates at the sentinel were filtered out by the sampler (-inf on the engine side).
    ranked = sorted(
        ((i, p) for i, p in head.items() if p != VLLM_LOGPROB_SENTINEL),
        key=lambda item: (-item[1], item[0]),
    )
    if support is not None:
        support_set = set(support)
        if not support_set.issubset(i for i, _ in ranked):
            raise MalformedResponseError("Missing sampling-support probabilities")
        ranked = [(i, p) for i, p in ranked if i in support_set]
        if not math.isclose(
            math.fsum(math.exp(p) for _, p in ranked), 1.0, rel_tol=0, abs_tol=1e-4
        ):
            raise MalformedResponseError(
                "Sampler probabilities must normalize over the recorded support"
            )
    elif len(ranked) > k and ranked[k - 1][1] == ranked[k][1]:
        # A tie across the k-th place: keeping any of the tied candidates would make the
        # head depend on the order the engine happened to list them in.
        boundary = ranked[k][1]
        ranked = [(i, p) for i, p in ranked if p > boundary]
    else:
        ranked = ranked[:k]
    if not ranked or math.fsum(math.exp(p) for _, p in ranked) > 1.0001:
        raise MalformedResponseError("Invalid sampler head probability mass")
    if support is None and len(head) < k + 2:
        raise MalformedResponseError("Engine returned fewer top logprobs than requested")
    return [i for i, _ in ranked], [p for _, p in ranked]


def _head_or_fail(c: _Choice, field: str, index: int, *args: Any) -> tuple[list[int], list[float]]:
    try:
        return select_head(*args)
    except MalformedResponseError as exc:
        c.fail(exc.reason, field, index)
        raise  # unreachable


# --- sampled-token logprobs and heads: compact ---------------------------------------------------


def _parse_compact_logprobs(
    choice: dict[str, Any], ids: np.ndarray, k: int | None, c: _Choice
) -> tuple[np.ndarray, Ragged | None, Ragged | None, Ragged | None]:
    field = "compact_logprobs"
    packed = choice[field]
    if not isinstance(packed, dict) or packed.get("format") != COMPACT_FORMAT:
        c.fail("Unsupported compact logprob format", field + ".format")
    parsed = c.ints(packed.get("offsets"), field + ".offsets", MAX_OFFSET)
    if parsed is None or parsed[1] != len(ids) + 1:
        c.fail("Invalid compact logprob offsets", field + ".offsets")
    offsets, _, bad_offset = parsed
    rising = _first_not_rising(offsets)  # over the valid prefix: the first failure wins
    if rising >= 0:
        c.fail("Invalid compact logprob offsets", field + ".offsets", rising)
    if bad_offset is not None:
        c.fail("Invalid compact logprob offsets", field + ".offsets", bad_offset)
    num_top = packed.get("num_top_logprobs")
    if not _is_int(num_top) or num_top < -1:
        c.fail("Invalid compact logprob candidate count", field + ".num_top_logprobs")
    raw = c.blob(packed.get("data"), field + ".data")
    if raw is None:
        c.fail("Invalid compact logprob base64", field + ".data")
    count = int(offsets[-1])
    if len(raw) != count * 8:
        c.fail("Invalid compact logprob buffer length", field + ".data")
    row_ids = raw[: count * 4].view("<u4")
    row_values = raw[count * 4 :].view("<f4")
    bad = c.first_bad("compact", row_values)
    if bad >= 0:
        row = int(np.searchsorted(offsets, bad, side="right")) - 1
        c.fail("Invalid compact logprob values", field, row)
    if k is None:
        # Without a head the rows' own errors come first (renderers never looks at the mask
        # then); with one, the support decides the head, so it is checked before the rows.
        sampled = c.compact_sampled(ids, row_ids, row_values, offsets)
        return sampled, None, None, _parse_sampling_mask(choice, ids, c)
    supports = _parse_sampling_mask(choice, ids, c)
    sampled, top_ids, top_logprobs = compact_rows(
        ids.tolist(), row_ids, row_values, offsets.tolist(), num_top, k, supports, c
    )
    return sampled, top_ids, top_logprobs, supports


def compact_rows(
    ids: list[int],
    row_ids: np.ndarray,
    row_values: np.ndarray,
    offsets: list[int],
    num_top: int,
    k: int | None,
    supports: Ragged | None,
    c: _Choice,
) -> tuple[np.ndarray, Ragged | None, Ragged | None]:
    """Per-row rules of compact logprobs, and the head of each row when ``k`` is given."""
    field = "compact_logprobs"
    sampled = np.empty(len(ids), dtype=np.float32)
    top_ids: list[list[int]] = []
    top_logprobs: list[list[float]] = []
    for index, token_id in enumerate(ids):
        start, end = offsets[index], offsets[index + 1]
        items = list(zip(row_ids[start:end].tolist(), row_values[start:end].tolist()))
        # The engine's flat storage may repeat the sampled id inside its row; a dict keeps
        # the first position and the last value, exactly as vLLM's own dict would.
        row = dict(items)
        if any(row[i] != p for i, p in items):
            c.fail("Repeated compact logprobs disagree", field, index)
        if token_id not in row or row[token_id] == VLLM_LOGPROB_SENTINEL:
            c.fail("Missing compact sampled-token evidence", field, index)
        sampled[index] = row[token_id]
        if k is not None:
            head = dict(list(row.items())[: max(num_top, 1)])
            support = supports[index].tolist() if supports is not None else None
            selected = _head_or_fail(c, field, index, head, token_id, row[token_id], k, support)
            top_ids.append(selected[0])
            top_logprobs.append(selected[1])
    if k is None:
        return sampled, None, None
    return sampled, Ragged.from_lists(top_ids, np.int64), Ragged.from_lists(top_logprobs, np.float32)


def _parse_native_heads(
    choice: dict[str, Any], ids_array: np.ndarray, k: int, c: _Choice
) -> tuple[Ragged, Ragged, Ragged | None]:
    field = "logprobs.content"
    ids = ids_array.tolist()
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or len(content) != len(ids):
        c.fail("Missing requested top logprobs", field)
    supports = _parse_sampling_mask(choice, ids_array, c)
    top_ids: list[list[int]] = []
    top_logprobs: list[list[float]] = []
    for index, (sampled_id, entry) in enumerate(zip(ids, content)):
        candidates = entry.get("top_logprobs") if isinstance(entry, dict) else None
        if not isinstance(candidates, list) or not candidates:
            c.fail("Missing requested top logprobs", field, index)
        head: dict[int, float] = {}
        for candidate in candidates:
            if not isinstance(candidate, dict):
                c.fail("Top logprob must be an object", field, index)
            token_id = _logprob_token_id(candidate)
            if token_id is None:
                c.fail("Top logprob must identify a nonnegative token id", field, index)
            logprob = candidate.get("logprob")
            if (
                isinstance(logprob, bool)
                or not isinstance(logprob, (int, float))
                or not math.isfinite(logprob)
            ):
                c.fail("Top logprob must be finite", field, index)
            if logprob > 1e-6:
                c.fail("Top logprob cannot be positive", field, index)
            if token_id in head:
                c.fail("Duplicate top logprob token id", field, index)
            head[token_id] = float(logprob)
        sampled_logprob = entry.get("logprob")
        if isinstance(sampled_logprob, bool) or not isinstance(sampled_logprob, (int, float)):
            c.fail(f"Engine response choice.logprobs.content[{index}].logprob must be a number.", field, index)
        support = supports[index].tolist() if supports is not None else None
        selected = _head_or_fail(c, field, index, head, sampled_id, sampled_logprob, k, support)
        top_ids.append(selected[0])
        top_logprobs.append(selected[1])
    return (
        Ragged.from_lists(top_ids, np.int64),
        Ragged.from_lists(top_logprobs, np.float64),
        supports,
    )


# --- routed experts ------------------------------------------------------------------------------


def _parse_npy(raw: np.ndarray, c: _Choice) -> np.ndarray:
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
        or header.get("descr") not in NPY_DESCRS
        or not isinstance(header.get("shape"), tuple)
    ):
        c.fail("routed_experts .npy header is invalid", field)
    return _shaped(raw[begin + size :], list(header["shape"]), NPY_DESCRS[header["descr"]], c)


def _shaped(data: np.ndarray, shape: Any, dtype_name: str, c: _Choice) -> np.ndarray:
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
    return data.view(dtype).reshape(shape)


def _parse_routed_experts(value: Any, c: _Choice) -> RoutedExperts:
    field = "routed_experts"
    if isinstance(value, str):
        raw = c.blob(value, field)
        if raw is None:
            c.fail("Invalid routed_experts base64", field)
        return RoutedExperts(_parse_npy(raw, c), None)
    if not isinstance(value, dict):
        c.fail("routed_experts must be an object or a base64 .npy string", field)
    dtype_name = value.get("dtype", "uint8")
    if dtype_name not in ROUTED_DTYPES:
        c.fail("Unsupported routed_experts dtype (uint8, uint16 or int32)", field + ".dtype")
    start = value.get("start")
    if start is not None and (not _is_int(start) or start < 0):
        c.fail("routed_experts start must be a non-negative int", field + ".start")
    raw = c.blob(value.get("data"), field + ".data")
    if raw is None:
        c.fail("Invalid routed_experts base64", field + ".data")
    return RoutedExperts(_shaped(raw, value.get("shape"), dtype_name, c), start)


# --- a whole response ----------------------------------------------------------------------------


def _check_top_k(top_k: Any) -> int | None:
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
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedResponseError(f"invalid JSON: {exc}") from None


def _parse_choice(c: _Choice, choice: Any, k: int | None, require_logprobs: bool) -> GenerateChoice:
    if not isinstance(choice, dict):
        c.fail("choice must be an object")
    ids = _int_list(c, choice.get("token_ids"), "token_ids", MAX_TOKEN_ID, "token_ids must hold token ids in [0, 2**32)")
    top_ids = top_logprobs = None
    consumed = list(_CONSUMED)
    if choice.get("compact_logprobs") is not None:
        logprobs, top_ids, top_logprobs, mask = _parse_compact_logprobs(choice, ids, k, c)
        consumed.append("compact_logprobs")
    else:
        if choice.get("completion_logprobs") is not None:
            logprobs = _parse_packed_logprobs(choice["completion_logprobs"], len(ids), c)
            consumed.append("completion_logprobs")
        elif choice.get("logprobs") is not None or require_logprobs or k is not None:
            logprobs = _parse_native_logprobs(choice, ids, c)
        else:
            logprobs = None
        if k is not None:
            top_ids, top_logprobs, mask = _parse_native_heads(choice, ids, k, c)
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
        raw={key: value for key, value in choice.items() if key not in consumed},
    )


def parse_document(
    document: Any, k: int | None, require_logprobs: bool, reader: Any = _Choice
) -> GenerateResponse:
    """Validate a parsed response; ``reader(index)`` makes the :class:`_Choice` for each choice
    (index None: the top level)."""
    if not isinstance(document, dict):
        raise MalformedResponseError("response must be a JSON object")
    prompt = document.get("prompt_token_ids")
    if prompt is not None:
        prompt = _int_list(
            reader(None), prompt, "prompt_token_ids", MAX_TOKEN_ID,
            "prompt_token_ids must hold token ids in [0, 2**32)",
        )
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedResponseError("choices must be a non-empty list", field="choices")
    parsed = [_parse_choice(reader(i), choice, k, require_logprobs) for i, choice in enumerate(choices)]
    return GenerateResponse(
        choices=parsed,
        request_id=document.get("request_id"),
        usage=document.get("usage"),
        prompt_token_ids=prompt,
        payload={key: v for key, v in document.items() if key not in ("choices", "prompt_token_ids")},
    )


def parse_generate_response(
    raw: Any, *, top_k: int | None = None, require_logprobs: bool = True
) -> GenerateResponse:
    """Parse and validate a ``/inference/v1/generate`` response (see the package docs)."""
    k = _check_top_k(top_k)
    return parse_document(_load(raw), k, require_logprobs)
