"""The pure-Python kernels: the per-token loops as free functions, and the readable
specification of what each one returns.

The compiled core (``tokenwire._core``) has the same functions under the same names in C and
must return the same values on every input. The rules reach them through an evidence record
(``Evidence.kernels``), and code that holds arrays rather than a response through
``tokenwire.read._select.kernels``.
"""

from __future__ import annotations

import array
import base64
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base._args import check_input, check_itemsize, check_offset, output_bytes
from ..base._errors import MalformedResponseError
from ..base._types import Ragged
from ..base._wire import MAX_MASK_ID, MAX_TOKEN_ID, VLLM_LOGPROB_SENTINEL

__all__ = ["b64decode", "b64encode", "rows_to_lists", "select_head"]

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


def is_int(value: Any) -> bool:
    return type(value) is int


def _text(data: Any) -> bytes | str | None:
    """The characters (an exact str) or the bytes (one private copy) of ``data``, or None
    when it is neither a str nor a buffer: read once, so a buffer another thread rewrites
    is checked and decoded in one state."""
    if isinstance(data, str):
        return str.__str__(data)
    if type(data) is bytes:
        return data
    try:
        view = memoryview(data)
    except TypeError:
        return None
    return view.tobytes() if view.c_contiguous else None


def _b64(data: Any) -> bytes | None:
    """Canonical base64 (standard alphabet, padded, nothing else) or None."""
    data = _text(data)
    if isinstance(data, str):
        if not data.isascii():
            return None
        data = data.encode("ascii")
    if data is None or _CANONICAL_B64.fullmatch(data) is None:
        return None
    return base64.b64decode(data, validate=True)


def b64check_signed(data: Any, itemsize: int, start: int = 0) -> tuple[int, bool]:
    """``(size, negative)`` of the base64 ``data[start:]`` (str or bytes-like; ``start`` in
    characters of a str, bytes of a buffer): the size its decoding has, or -1 when it is not
    canonical (as :func:`b64decode` refuses it; ``negative`` is then False), and whether some
    complete little-endian signed integer of ``itemsize`` bytes (1, 2, 4 or 8) of the decoding
    is below zero (a trailing incomplete one is not read). The compiled core never keeps the
    decoding: a check of an envelope whose bytes the caller does not need costs one read."""
    check_input(data)
    check_itemsize(itemsize)
    check_offset(data, start)
    text = _text(data)
    decoded = _b64(text[start:] if text is not None else None)
    if decoded is None:
        return -1, False
    values = np.frombuffer(decoded, f"<i{itemsize}", len(decoded) // itemsize)
    return len(decoded), bool((values < 0).any())


def b64decode(data: Any, out: Any = None) -> np.ndarray:
    """Strictly decode base64 ``data`` to a uint8 array (into ``out`` when given)."""
    check_input(data)
    target = None if out is None else output_bytes(out)
    data = _text(data)  # one read of a buffer: the size below and the decoding see the same bytes
    if data is None:  # never: check_input let a str or a C-contiguous buffer through
        raise TypeError("expected str or a C-contiguous bytes-like object")
    text = data.encode("ascii", "replace") if isinstance(data, str) else data
    # The size the length and the padding promise decides whether out is big enough, before
    # the characters are read (as the compiled core decodes straight into out).
    tail = text[-3:]
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
        data = str.__str__(data).encode("utf-8")
    return base64.b64encode(memoryview(data).cast("B"))


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
        if not is_int(x) or not 0 <= x <= high:
            return np.array(value[:i], dtype=np.int64), len(value), i
    return np.array(value, dtype=np.int64), len(value), None


def first_bad(rule: str, values: np.ndarray) -> int:
    """Index of the first value breaking ``rule``, or -1. ``"packed"``: finite and above the
    sentinel; ``"compact"``: finite and at most 1e-6; ``"top_k"``: at most 1e-6 (-inf
    allowed, NaN not); ``"negative"``: not below zero."""
    if rule == "packed":
        ok = np.isfinite(values) & (values > VLLM_LOGPROB_SENTINEL)
    elif rule == "compact":
        ok = np.isfinite(values) & ~(values > 1e-6)
    elif rule == "top_k":  # -inf allowed: a filtered candidate
        ok = values <= 1e-6
    else:
        ok = values >= 0
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else -1


def first_out_of_range(values: np.ndarray, limit: int | None = None) -> int:
    """Index of the first value below 0 or, with ``limit``, at or above it; -1 when every
    value is in range (the expert ids of a routing array: ``limit`` is the model's count of
    experts)."""
    bad = values < 0
    if limit is not None:
        bad |= values >= limit
    where = np.flatnonzero(bad)
    return int(where[0]) if len(where) else -1


def routed_row_count(n: int, prompt: int, start: int = 0) -> int:
    """The routing rows of a choice of ``n`` tokens after a prompt of ``prompt`` tokens, from
    position ``start`` on, as vLLM and prime-rl lay them out: one per prompt and completion
    token but the last (the last sampled token is never forwarded), none below zero."""
    return max(prompt + n - 1 - start, 0)


def first_bad_support(ids: np.ndarray, rows: Ragged, limit: int, absent_ok: bool = False) -> int:
    """First of the first ``limit`` supports that is empty, repeats an id, or misses the
    sampled id; -1 when there is none. With ``absent_ok`` an empty row is an absent support
    (kept_tokens' zero count) and breaks no rule."""
    for index, (sampled, support) in enumerate(zip(ids.tolist()[:limit], rows_to_lists(rows.offsets, rows.values)[0])):
        if not support and absent_ok:
            continue
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


def compact_rows_candidates(
    ids: np.ndarray, row_ids: np.ndarray, row_values: np.ndarray, offsets: np.ndarray, num_top: int
) -> tuple[np.ndarray, tuple[int, str] | None, Candidates]:
    """:func:`compact_rows` and :func:`compact_candidates` of the same rows (one pass over
    them in C): the rows from the first bad one on have no candidates (no head is chosen
    there)."""
    sampled, bad = compact_rows(ids, row_ids, row_values, offsets)
    limit = len(ids) if bad is None else bad[0]
    candidates = compact_candidates(row_ids, row_values, offsets[: limit + 1], num_top)
    flat = np.full(len(ids) - limit, candidates.offsets[-1], dtype=np.int64)
    return sampled, bad, Candidates(np.concatenate([candidates.offsets, flat]), candidates.ids, candidates.logprobs)


def compact_heads(
    ids: np.ndarray,
    row_ids: np.ndarray,
    row_values: np.ndarray,
    offsets: np.ndarray,
    num_top: int,
    k: int,
    supports: Ragged | None,
) -> tuple[np.ndarray | None, Ragged | None, Ragged | None, tuple[int, str] | None, tuple[int, str] | None]:
    """:func:`compact_rows_candidates` then :func:`heads` of the rows before the first bad
    one (one call in C): the sampled values, the heads (logprobs float32, the rows' own
    values), and the first failure, token by token, a row's rule before its head's: either
    the bad row (fourth) or the bad head before it (fifth); the arrays are None then."""
    sampled, bad_row, candidates = compact_rows_candidates(ids, row_ids, row_values, offsets, num_top)
    limit = len(ids) if bad_row is None else bad_row[0]
    top_ids, top_logprobs, bad_head = heads(ids, candidates, sampled.astype(np.float64), k, supports, limit)
    if bad_head is not None or bad_row is not None:
        return None, None, None, bad_row if bad_head is None else None, bad_head
    return sampled, top_ids, Ragged(top_logprobs.offsets, top_logprobs.values.astype(np.float32)), None, None


def checked_compact_heads(ids: np.ndarray, row_ids: np.ndarray, row_values: np.ndarray, offsets: np.ndarray,
                          num_top: int, k: int, supports: Ragged | None) -> tuple[
        int, np.ndarray | None, Ragged | None, Ragged | None, tuple[int, str] | None, tuple[int, str] | None]:
    """``first_bad("compact", row_values)`` then, when no value breaks that rule (first: -1),
    :func:`compact_heads` (the rest); the compiled core checks the values in the same pass
    as the rows. With a bad value, its index and Nones."""
    bad = first_bad("compact", row_values)
    if bad >= 0:
        return bad, None, None, None, None, None
    return (-1, *compact_heads(ids, row_ids, row_values, offsets, num_top, k, supports))


def checked_supports_compact_heads(
        ids: np.ndarray, row_ids: np.ndarray, row_values: np.ndarray, offsets: np.ndarray, num_top: int, k: int,
        supports: Ragged | None) -> tuple[int, int, np.ndarray | None, Ragged | None, Ragged | None,
                                          tuple[int, str] | None, tuple[int, str] | None]:
    """``first_bad("compact", row_values)``, then (no value breaking that rule) the first
    support of the kept sets that breaks its rule (:func:`first_bad_support` over every token,
    an empty row absent), then (none: -1) :func:`compact_heads`; the compiled core checks
    the values and the supports in the same pass as the rows. With a bad value or support,
    its index (the other -1) and Nones."""
    bad = first_bad("compact", row_values)
    if bad >= 0:
        return bad, -1, None, None, None, None, None
    support_bad = -1 if supports is None else first_bad_support(ids, supports, len(ids), absent_ok=True)
    if support_bad >= 0:
        return -1, support_bad, None, None, None, None, None
    return (-1, -1, *compact_heads(ids, row_ids, row_values, offsets, num_top, k, supports))


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
        if not isinstance(row, list) or not all(is_int(i) and 0 <= i <= MAX_MASK_ID for i in row):
            return Ragged.from_lists(value[:index], np.int32), len(value), index
    return Ragged.from_lists(value, np.int32), len(value), None


def blob(value: Any) -> np.ndarray | None:
    """The bytes of a canonical base64 string (a new uint8 array), or None."""
    raw = _b64(value)
    return None if raw is None else np.frombuffer(bytearray(raw), dtype=np.uint8)


def native_entries(content: list[Any], ids: np.ndarray | None, want_top: bool) -> NativeEntries:
    """Both passes over native ``logprobs.content`` records (see :class:`NativeEntries`),
    entry ``t`` for the token ``ids[t]``; ``ids`` None: entry ``t`` stands for token ``t``
    whatever it names (vLLM's ``output_mode: "text"`` records carry decoded text), and the
    sampled pass reads no id."""
    ids_list = None if ids is None else ids.tolist()
    n = len(content) if ids_list is None else len(ids_list)
    sampled = np.zeros(n, dtype=np.float64)
    sampled_err = None
    for index, entry in enumerate(content):
        logprob = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(entry, dict):
            sampled_err = (index, "not_object")
        elif ids_list is not None and logprob_token_id(entry) != ids_list[index]:
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
    entry_lps = np.zeros(n, dtype=np.float64)
    top_err = None
    for index, entry in enumerate(content if want_top else ()):
        head, problem = native_head(entry)
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
    rows += [[] for _ in range(n - len(rows))]
    return NativeEntries(sampled, sampled_err, Candidates.from_rows(rows), entry_lps, top_err)


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


def native_head(entry: Any) -> tuple[dict[int, float], str | None]:
    """One entry's ``top_logprobs`` as ``{id: logprob}``, or the code of its first problem."""
    candidates = entry.get("top_logprobs") if isinstance(entry, dict) else None
    if not isinstance(candidates, list) or not candidates:
        return {}, "missing_top"
    head: dict[int, float] = {}
    for candidate in candidates:
        if not isinstance(candidate, dict):
            return head, "top_not_object"
        token_id = logprob_token_id(candidate)
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


def first_not_rising(offsets: np.ndarray) -> int:
    """First index breaking ``offsets[0] == 0`` and strictly increasing offsets, or -1."""
    if len(offsets) and offsets[0] != 0:
        return 0
    bad = np.flatnonzero(np.diff(offsets) <= 0)
    return int(bad[0]) + 1 if len(bad) else -1


def token_string_id(token: Any) -> int | None:
    """The id in a ``"token_id:N"`` string (ASCII digits, at most 2**32 - 1), else None."""
    if isinstance(token, str) and token.startswith("token_id:"):
        digits = token[9:]
        if digits.isascii() and digits.isdigit():
            token_id = int(digits)
            if token_id <= MAX_TOKEN_ID:
                return token_id
    return None


def logprob_token_id(entry: dict[str, Any]) -> int | None:
    """The id a logprob record names: ``token_id`` if present, else ``id`` (llama.cpp's records
    and candidates, ``tools/server/server-task.cpp``), else a ``"token_id:N"`` token."""
    for key in ("token_id", "id"):
        if key in entry:
            token_id = entry[key]
            return token_id if is_int(token_id) and 0 <= token_id <= MAX_TOKEN_ID else None
    return token_string_id(entry.get("token"))


# select_head's refusals; HEAD_REASONS lists them in the order of tw_heads' codes 1..5.
_HEAD_DISAGREE = "Sampler head and sampled-token logprob disagree"
HEAD_MISSING_SUPPORT = "Missing sampling-support probabilities"
_HEAD_NOT_NORMALIZED = "Sampler probabilities must normalize over the recorded support"
_HEAD_BAD_MASS = "Invalid sampler head probability mass"
HEAD_TOO_FEW = "Engine returned fewer top logprobs than requested"
HEAD_REASONS = (_HEAD_DISAGREE, HEAD_MISSING_SUPPORT, _HEAD_NOT_NORMALIZED, _HEAD_BAD_MASS, HEAD_TOO_FEW)


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
            raise MalformedResponseError(HEAD_MISSING_SUPPORT)
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
        raise MalformedResponseError(HEAD_TOO_FEW)
    return [i for i, _ in ranked], [p for _, p in ranked]


# --- the batch path: rows copied into padded blocks (tokenwire.collate) ---------------------------
# One numpy call per row, never per token; the compiled core does each in one C call.


def _rows_of(rows: Any, dtype: Any, name: str) -> list[np.ndarray]:
    held = list(rows)
    for i, row in enumerate(held):
        if type(row) is not np.ndarray or row.ndim != 1 or not row.flags.c_contiguous or row.dtype != dtype:
            raise TypeError(f"{name}[{i}] must be a 1-D C-contiguous array of {dtype}")
    return held


def _block(out: Any, ndim: int, name: str) -> np.ndarray:
    if type(out) is not np.ndarray or out.ndim != ndim or not out.flags.c_contiguous or not out.flags.writeable:
        raise TypeError(f"{name} must be a writable C-contiguous {ndim}-D array")
    return out


def pad_rows(rows: Any, out: np.ndarray, fill: Any) -> int:
    """Row ``r`` of ``out`` (``(len(rows), width)``) is ``rows[r]`` then ``fill`` to the width;
    -1, or the first row longer than the width (``out`` is then not to be used)."""
    _block(out, 2, "out")
    held = _rows_of(rows, out.dtype, "rows")
    if len(held) != out.shape[0]:
        raise ValueError(f"out has {out.shape[0]} rows for {len(held)}")
    width = out.shape[1]
    for r, row in enumerate(held):
        n = len(row)
        if n > width:
            return r
        out[r, :n] = row
        out[r, n:] = fill
    return -1


def ragged_lengths(
    offsets: Any, counts: Any, sizes: Any, lengths: np.ndarray
) -> tuple[np.ndarray, int, tuple[str, int, int | None] | None]:
    """Token ``t`` of row ``r`` spans ``offsets[r][t]:offsets[r][t + 1]`` of values
    ``sizes[r]`` long, for ``t < counts[r]``: its length goes to ``lengths[r, t]`` (0 past the
    row's tokens). Returns ``(first, longest, bad)``: each row's first offset, the longest
    token, and None or ``(code, row, token)`` for the first row that does not fit (code
    ``"tokens"``: more tokens than ``lengths`` has columns; ``"offsets"``: offset ``token``
    negative, falling or past the values). Each offset is read once."""
    _block(lengths, 2, "lengths")
    if lengths.dtype != np.int64:
        raise TypeError("lengths must be int64")
    held = _rows_of(offsets, np.dtype(np.int64), "offsets")
    counts = np.array(counts, dtype=np.int64).reshape(-1)
    sizes = np.array(sizes, dtype=np.int64).reshape(-1)
    n, tokens = lengths.shape
    if len(counts) != len(held) or len(sizes) != len(held) or n != len(held):
        raise ValueError("offsets, counts, sizes and lengths must have one entry per row")
    for r in range(n):
        if not 0 <= counts[r] < len(held[r]):
            raise ValueError(f"offsets[{r}] has {len(held[r])} entries for {counts[r]} tokens")
    first = np.zeros(n, dtype=np.int64)
    longest = 0
    for r in range(n):
        count, size = int(counts[r]), int(sizes[r])
        if count > tokens:
            return first, 0, ("tokens", r, None)
        own = np.array(held[r][: count + 1], dtype=np.int64)  # one read: checks and lengths agree
        steps = np.diff(own)
        bad = (own < 0) | (own > size)
        bad[1:] |= steps < 0
        if bad.any():
            return first, 0, ("offsets", r, int(np.argmax(bad)))
        first[r] = own[0]
        lengths[r, :count] = steps
        lengths[r, count:] = 0
        if count:
            longest = max(longest, int(steps.max()))
    return first, longest, None


def pad_ragged(values: Any, first: np.ndarray, lengths: np.ndarray, out: np.ndarray, fill: Any) -> int:
    """Token ``t`` of row ``r`` of ``out`` (``(rows, tokens, width)``) holds its
    ``lengths[r, t]`` items of ``values[r]`` (from ``first[r]`` on, the tokens back to back),
    then ``fill``; ``first`` and ``lengths`` are what ``ragged_lengths`` made (they bound the
    reads). -1, or the first ``r * tokens + t`` longer than the width (``out`` is then not to
    be used)."""
    _block(out, 3, "out")
    held = _rows_of(values, out.dtype, "values")
    n, tokens, width = out.shape
    if (type(first) is not np.ndarray or first.dtype != np.int64 or first.shape != (n,)
            or type(lengths) is not np.ndarray or lengths.dtype != np.int64 or lengths.shape != (n, tokens)
            or len(held) != n):
        raise ValueError("first and lengths must be ragged_lengths' arrays for out's rows and tokens")
    ends = first + lengths.sum(axis=1)
    if n and ((first < 0).any() or (lengths < 0).any() or (ends > [len(row) for row in held]).any()):
        raise ValueError("first and lengths reach past the values")
    for r in range(n):
        lens = lengths[r]
        wide = np.flatnonzero(lens > width)
        if wide.size:
            return r * tokens + int(wide[0])
        block = out[r]
        block[...] = fill
        total = int(lens.sum())
        token = np.repeat(np.arange(tokens), lens)
        column = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
        block[token, column] = held[r][first[r] : first[r] + total]
    return -1
