"""The rules of the generate endpoint (``/inference/v1/generate``): the readable
specification of every rule tokenwire enforces there.

It applies renderers' generate-client checks (renderers 0.1.13.dev13, ``renderers/client.py``)
to the parsed JSON document, with the deliberate differences listed in the README:
canonical base64 only, every choice validated, every field that is present validated,
and anything that is not the expected shape raises :class:`MalformedResponseError`.
The rules read each choice's big values from its evidence record
(:class:`tokenwire.extract.python.Evidence`); the compiled core must make the same decision
on every input and return the same values.
"""

from __future__ import annotations

import ast
import io
import math
import os
import stat
from typing import Any, NamedTuple, cast

import numpy as np

from .._args import MAX_EXPERTS, check_num_experts, check_payload_root, check_start, check_top_k
from .._errors import MalformedResponseError
from .._table import CHOICE, GENERATE, KEY, top_keys
from .._types import GenerateChoice, GenerateResponse, PayloadSegment, Ragged, RoutedExperts
from .._wire import COMPACT_FORMAT, MAX_OFFSET, VLLM_LOGPROB_SENTINEL
from ..extract.python import Evidence, extract_choice, load_document
from ..kernels.python import HEAD_MISSING_SUPPORT, Candidates, NativeEntries, is_int

__all__ = ["parse_document", "parse_generate_response"]

PACKED_DTYPES = {"float32": np.dtype("<f4"), "float64": np.dtype("<f8")}
# int16: a captured int16 routing array passes through prime-rl's encoder as it is.
ROUTED_DTYPES: dict[str, np.dtype[Any]] = {"uint8": np.dtype("u1"), "uint16": np.dtype("<u2"),
                                           "int16": np.dtype("<i2"), "int32": np.dtype("<i4")}
NPY_DESCRS = {"|u1": "uint8", "<u1": "uint8", "u1": "uint8", "<u2": "uint16", "<i2": "int16",
              "<i4": "int32"}

# The transports of a choice's sampled-token logprobs: the rules consume the one they read (a
# new transport's key joins them here, or it is consumed whenever present).
_TRANSPORTS = (KEY.compact_logprobs, KEY.completion_logprobs, KEY.logprobs)
# Fields of a choice that become attributes; the rest stays in ``GenerateChoice.raw``: the
# index, the finish reason and the wire table's generate fields but the transports.
_CONSUMED = ("index", "finish_reason", *sorted(top_keys(CHOICE, GENERATE) - set(_TRANSPORTS)))


def named(table: dict[str, Any], name: Any) -> Any:
    """``table[name]`` for a str ``name`` that is a key, else None (a JSON array or object
    names nothing, and cannot even be looked up)."""
    return table.get(name) if isinstance(name, str) else None


def checked_int_list(c: Evidence, parsed: tuple[np.ndarray, int, int | None] | None, field: str,
                     reason: str) -> np.ndarray:
    """The ints an id field's evidence holds (``int_list``'s reading of the list at
    ``field``), or ``reason`` fails there (at the first bad element)."""
    if parsed is None:
        c.fail(f"{reason}: expected a list", field)
    values, _, bad = parsed
    if bad is not None:
        c.fail(reason, field, bad)
    return values


def _shape_is(shape: Any, count: int) -> bool:
    return isinstance(shape, list) and len(shape) == 1 and is_int(shape[0]) and shape[0] == count


# --- sampled-token logprobs: packed --------------------------------------------------------------


def parse_packed_logprobs(packed: Any, n: int, c: Evidence) -> np.ndarray:
    # The compiled core's plain path (_core_plain.pxi, _plain_choice) accepts the plainest valid
    # packed choices on its own: a rule added here must be added there (or hand them over).
    field = "completion_logprobs"
    if not isinstance(packed, dict):
        c.fail("Engine response choice.completion_logprobs must be an object.", field)
    dtype = named(PACKED_DTYPES, packed.get("dtype"))
    if dtype is None:
        c.fail("Unsupported packed logprob dtype (float32 or float64)", field + ".dtype")
    raw = c.completion_data
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


# --- sampled-token logprobs: native JSON ----------------------------------------------------------


_NATIVE_SAMPLED = {
    "not_object": "{at} must be an object.",
    "token": "{at}.token must be 'token_id:{id}'.",
    "number": "{at}.logprob must be a number.",
    "finite": "{at}.logprob must be finite.",
    "evidence": "{at}.logprob does not contain sampling evidence.",
}


NATIVE_TOP = {
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


def parse_native_logprobs(
    choice: dict[str, Any], ids: np.ndarray, c: Evidence, want_top: bool = False
) -> tuple[np.ndarray, NativeEntries | None]:
    """The sampled logprobs from native records; with ``want_top`` the same read also
    collects the head candidates, for :func:`parse_native_heads`."""
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
    count = c.logprobs_content.length
    if count != len(ids):
        c.fail(
            "Engine response completion token count "
            f"({len(ids)}) does not match logprob count ({count}).",
            field,
        )
    entries = c.logprobs_content.entries  # read when the ids and the count agree, as here
    if entries.sampled_err is not None:
        index, code = entries.sampled_err
        c.fail(_native_message(_NATIVE_SAMPLED, code, index, ids), field, index)
    if sampled is not None:
        _check_agrees(c, _parse_sampled_list(sampled, ids, c), "logprobs.sampled", entries.sampled, "logprobs.content")
    return entries.sampled, entries


# vLLM's ``logprobs.sampled`` (``return_token_logprobs``): one number per completion token.
_SAMPLED_AT = "Engine response choice.logprobs.sampled"
_SAMPLED_VALUE = {
    "number": "{at} must be a number.",
    "finite": "{at} must be finite.",
    "evidence": "{at} does not contain sampling evidence.",
}


def _first_bad_number(c: Evidence) -> tuple[int, str] | None:
    """The first value of ``logprobs.sampled`` that is not sampled-token evidence and its code
    in :data:`_SAMPLED_VALUE`, or None (the numbers read before the first element that is not
    one are checked first: they come before it)."""
    numbers = c.logprobs_sampled.numbers
    values = numbers.values
    bad = np.flatnonzero(~np.isfinite(values) | (values == VLLM_LOGPROB_SENTINEL))
    if len(bad):
        index = int(bad[0])
        return index, "finite" if not math.isfinite(values[index]) else "evidence"
    if numbers.bad is not None:
        # An int beyond the double range is a number that is not finite.
        example = numbers.example
        return numbers.bad, "finite" if type(example) is int else "number"
    return None


def _parse_sampled_list(sampled: Any, ids: np.ndarray, c: Evidence) -> np.ndarray:
    """``logprobs.sampled`` as the sampled-token logprobs (float64), under the rules of a
    ``logprobs.content`` record's ``logprob``."""
    field = "logprobs.sampled"
    if not isinstance(sampled, list):
        c.fail(f"{_SAMPLED_AT} must be a list.", field)
    count = c.logprobs_sampled.length
    if count != len(ids):
        c.fail(
            f"Engine response completion token count ({len(ids)}) does not match "
            f"logprobs.sampled count ({count}).",
            field,
        )
    bad = _first_bad_number(c)
    if bad is not None:
        index, code = bad
        c.fail(_SAMPLED_VALUE[code].format(at=f"{_SAMPLED_AT}[{index}]"), field, index)
    return c.logprobs_sampled.numbers.values


# How a disagreement names each transport's value of token t.
_NAMES = {
    KEY.compact_logprobs: "compact_logprobs row {t}",
    KEY.completion_logprobs: "completion_logprobs[{t}]",
    "logprobs.content": "logprobs.content[{t}].logprob",
    "logprobs.sampled": "logprobs.sampled[{t}]",
}


def _check_agrees(c: Evidence, values: np.ndarray, field: str, reference: np.ndarray, reference_field: str) -> None:
    """Two transports of the sampled-token logprobs, each valid under its own rules: every
    value of ``field`` must be the number ``reference_field`` gives that token, within the
    head rule's tolerance (``numpy.isclose(values, reference, rtol=1e-6, atol=1e-5)``, float32
    values read as the float64 they are), else it fails at ``field``, the first token that
    differs."""
    differ = np.flatnonzero(~np.isclose(values, reference, rtol=1e-6, atol=1e-5))
    if len(differ):
        t = int(differ[0])
        c.fail(
            f"Engine response choice.{_NAMES[field].format(t=t)} ({float(values[t])!r}) and "
            f"{_NAMES[reference_field].format(t=t)} ({float(reference[t])!r}) disagree.",
            field,
            t,
        )


def check_other_transports(
    c: Evidence, choice: dict[str, Any], ids: np.ndarray, used: str, logprobs: np.ndarray, k: int | None
) -> NativeEntries | None:
    """Every transport of the sampled-token logprobs present beside ``used`` (the one that
    gave ``logprobs``), in a fixed order: ``completion_logprobs``, then ``logprobs``. Each is
    validated under its own rules, then must agree with ``logprobs`` (a ``logprobs`` object
    whose ``content`` and ``sampled`` are null or absent holds none). Returns the records of
    ``logprobs.content`` when they were read (with their head candidates when a head is read
    from them: ``top_k`` beside packed logprobs), else None. (The compiled core's plain path
    takes no choice with a second transport: it hands them all to these rules.)"""
    if used == KEY.compact_logprobs and choice.get(KEY.completion_logprobs) is not None:
        packed = parse_packed_logprobs(choice[KEY.completion_logprobs], len(ids), c)
        _check_agrees(c, packed, KEY.completion_logprobs, logprobs, used)
    field = choice.get(KEY.logprobs)
    if used == KEY.logprobs or field is None:
        return None
    if isinstance(field, dict) and field.get("content") is None and field.get("sampled") is None:
        return None  # an object holding no logprobs (each member null or absent)
    want_top = k is not None and used == KEY.completion_logprobs
    native, entries = parse_native_logprobs(choice, ids, c, want_top)
    _check_agrees(c, native, "logprobs.sampled" if entries is None else "logprobs.content", logprobs, used)
    return entries


# --- sampling mask -------------------------------------------------------------------------------


def parse_sampling_mask(choice: dict[str, Any], ids: np.ndarray, c: Evidence,
                        handle: Ragged | None = None) -> Ragged | None:
    """The kept supports of a choice; ``handle``, the mask already read by handle
    (:func:`read_payload`), stands for the inline forms, which cannot be beside it."""
    if handle is not None:
        return handle
    field = _mask_field(choice)
    if field is None:
        return None
    mask = choice[field]
    # kept_tokens (prime-rl's sampling replay): the same CSR with bare base64 strings.
    bare = field == KEY.kept_tokens
    bad_row = None
    if isinstance(mask, dict):
        arrays = {}
        read = ({"ids": c.kept_ids, "counts": c.kept_counts} if bare
                else {"ids": c.sampling_mask_ids, "counts": c.sampling_mask_counts})
        for name in ("ids", "counts"):
            packed = mask.get(name)
            if not bare and (not isinstance(packed, dict) or packed.get("dtype") != "int32"):
                c.fail("Invalid packed sampling mask", f"{field}.{name}")
            raw = read[name]
            if raw is None or len(raw) % 4:
                c.fail("Invalid packed sampling mask", f"{field}.{name}.data")
            values = raw.view("<i4")
            if not bare and not _shape_is(cast(dict[str, Any], packed).get("shape"), len(values)):
                c.fail("Invalid packed sampling mask", f"{field}.{name}.shape")
            negative = c.kernels.first_bad("negative", values)
            if negative >= 0:
                c.fail("Invalid packed sampling mask", f"{field}.{name}", negative)
            arrays[name] = values
        counts, values = arrays["counts"], arrays["ids"]
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])  # no count is negative: the last offset is their sum
        if len(counts) != len(ids) or int(offsets[-1]) != len(values):
            c.fail("Sampling mask token count mismatch", field)
        rows = Ragged(offsets, values)
    elif isinstance(mask, list):
        rows, count, bad_row = c.sampling_mask
        if count != len(ids):
            c.fail("Sampling mask token count mismatch", field)
    else:
        c.fail("Sampling mask token count mismatch", field)
    return _check_supports(c, ids, rows, field, bad_row)


def _check_supports(c: Evidence, ids: np.ndarray, rows: Ragged, field: str, bad_row: int | None = None) -> Ragged:
    """``rows`` when each is a valid support of its token, else the first that is not (or
    ``bad_row``, a malformed row, when every row before it is valid) fails at ``field``."""
    limit = len(ids) if bad_row is None else bad_row
    # An empty row (a zero count) is a token without a recorded support, in every form: prime-rl
    # sends vLLM's packed mask with zero counts for positions without replay (and by handle, a
    # row of padding only).
    bad = c.kernels.first_bad_support(ids, rows, limit, absent_ok=True)
    if bad >= 0:
        c.fail("Invalid recorded sampling support", field, bad)
    if bad_row is not None:
        c.fail("Invalid recorded sampling support", field, bad_row)
    return rows


def _mask_field(choice: dict[str, Any]) -> str | None:
    """The field the supports are read from (``sampling_mask`` before ``kept_tokens``), or
    None."""
    if choice.get(KEY.sampling_mask) is not None:
        return KEY.sampling_mask
    return KEY.kept_tokens if choice.get(KEY.kept_tokens) is not None else None


def _fail_head(c: Evidence, choice: dict[str, Any], field: str, bad: tuple[int, str], supports: Ragged | None):
    """Report the head rule ``bad`` broke. A kept set with an id the head has no candidate
    logprob for is located at ``kept_tokens`` and says what to request."""
    token, reason = bad
    if reason == HEAD_MISSING_SUPPORT and supports is not None and _mask_field(choice) == KEY.kept_tokens:
        width = len(supports[token])
        c.fail(
            f"{reason}: kept_tokens[{token}] holds {width} ids and the response has no candidate "
            f"logprob for some of them; request at least {width} top logprobs per token "
            "(vLLM's `logprobs`, with `logprobs_mode` processed_logprobs) or parse without top_k",
            "kept_tokens",
            token,
        )
    c.fail(reason, field, token)


# --- sampled-token logprobs and heads: compact ---------------------------------------------------


def parse_compact_logprobs(
    choice: dict[str, Any], ids: np.ndarray, k: int | None, c: Evidence, handle: Ragged | None = None
) -> tuple[np.ndarray, Ragged | None, Ragged | None, Ragged | None]:
    # The compiled core's plain path (_core_plain.pxi, _plain_compact) accepts the plainest valid
    # choices of compact rows without a head on its own: a rule added here must be added
    # there (or hand them over).
    field = KEY.compact_logprobs
    packed = choice[field]
    if not isinstance(packed, dict) or packed.get("format") != COMPACT_FORMAT:
        c.fail("Unsupported compact logprob format", field + ".format")
    parsed = c.compact_offsets
    if parsed is None or parsed[1] != len(ids) + 1:
        c.fail("Invalid compact logprob offsets", field + ".offsets")
    offsets, _, bad_offset = parsed
    rising = c.kernels.first_not_rising(offsets)  # over the valid prefix: the first failure wins
    if rising >= 0:
        c.fail("Invalid compact logprob offsets", field + ".offsets", rising)
    if bad_offset is not None:
        c.fail("Invalid compact logprob offsets", field + ".offsets", bad_offset)
    num_top = packed.get("num_top_logprobs")
    if not is_int(num_top) or cast(int, num_top) < -1:
        c.fail("Invalid compact logprob candidate count", field + ".num_top_logprobs")
    raw = c.compact_data
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
        return sampled, None, None, parse_sampling_mask(choice, ids, c, handle)
    supports = parse_sampling_mask(choice, ids, c, handle)
    # Rows are checked in order, a row's own rules before its head: a head error in an
    # earlier row comes first, then the row error.
    sampled, top_ids, top_logprobs, bad, head_bad = c.kernels.compact_heads(
        ids, row_ids, row_values, offsets, num_top, k, supports
    )
    if head_bad is not None:
        _fail_head(c, choice, field, head_bad, supports)
    if bad is not None:
        c.fail(bad[1], field, bad[0])
    assert sampled is not None  # with the heads, when nothing failed
    return sampled, top_ids, top_logprobs, supports


def parse_native_heads(
    choice: dict[str, Any], ids: np.ndarray, k: int, c: Evidence, entries: NativeEntries | None = None,
    handle: Ragged | None = None,
) -> tuple[Ragged, Ragged, Ragged | None]:
    field = "logprobs.content"
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or c.logprobs_content.length != len(ids):
        c.fail("Missing requested top logprobs", field)
    supports = parse_sampling_mask(choice, ids, c, handle)
    if entries is None:  # the sampled logprobs came from another transport
        entries = c.logprobs_content.entries
    limit = len(ids) if entries.top_err is None else entries.top_err[0]
    top_ids, top_logprobs, head_bad = c.kernels.heads(ids, entries.candidates, entries.entry_lps, k, supports, limit)
    if head_bad is not None:
        _fail_head(c, choice, field, head_bad, supports)
    if entries.top_err is not None:
        index, code = entries.top_err
        c.fail(_native_message(NATIVE_TOP, code, index, ids), field, index)
    return top_ids, top_logprobs, supports


# --- heads: vLLM's packed top-k (logprobs.top_k) -------------------------------------------------

_TOP_K = "logprobs.top_k"


def top_k_block(choice: dict[str, Any]) -> Any:
    """``logprobs.top_k`` of a choice, or None."""
    logprobs = choice.get("logprobs")
    return logprobs.get("top_k") if isinstance(logprobs, dict) else None


def parse_packed_top_k(block: Any, ids: np.ndarray, c: Evidence) -> Candidates:
    """vLLM's packed top-k (``return_top_k_logprobs``): ``num_positions`` rows of ``k``
    candidates, base64 int32 ids and float32 logprobs, row-major, in engine order, as the
    head candidates of each token. ``-inf`` (a candidate the sampler filtered out, sent
    unclamped) is a filtered candidate like the sentinel; NaN, a positive logprob, a negative
    id, an id twice in a row, or dimensions that do not match the bytes are errors."""
    n = len(ids)
    if not isinstance(block, dict):
        c.fail(f"Engine response choice.{_TOP_K} must be an object.", _TOP_K)
    positions, width = block.get("num_positions"), block.get("k")
    if not is_int(positions) or positions != n:
        c.fail(f"Packed top-k num_positions must be the completion token count ({n})",
               _TOP_K + ".num_positions")
    if not is_int(width) or width < 0 or width > MAX_OFFSET // max(n, 1) // 4:
        c.fail("Packed top-k k must be a non-negative int", _TOP_K + ".k")
    count = n * width
    raw_ids, raw_lps = c.top_k_ids, c.top_k_logprobs
    if raw_ids is None or len(raw_ids) != 4 * count:
        c.fail(f"Packed top-k token_ids must be base64 of {count} int32 (num_positions x k)",
               _TOP_K + ".token_ids")
    if raw_lps is None or len(raw_lps) != 4 * count:
        c.fail(f"Packed top-k logprobs must be base64 of {count} float32 (num_positions x k)",
               _TOP_K + ".logprobs")
    top_ids = raw_ids.view("<i4")
    values = raw_lps.view("<f4")
    bad = c.kernels.first_bad("negative", top_ids)
    if bad >= 0:
        c.fail("Top logprob must identify a nonnegative token id", _TOP_K + ".token_ids", bad // width)
    bad = c.kernels.first_bad("top_k", values)
    if bad >= 0:
        c.fail("Top logprob must be a number at most 1e-6 or -inf (NaN or positive)",
               _TOP_K + ".logprobs", bad // width)
    offsets = np.arange(n + 1, dtype=np.int64) * width
    candidates = c.kernels.compact_candidates(top_ids.view("<u4"), values, offsets, width)
    if len(candidates.ids) != count:  # an id twice in a row: the row has fewer candidates
        row = int(np.flatnonzero(np.diff(candidates.offsets) != width)[0])
        c.fail("Duplicate top logprob token id", _TOP_K + ".token_ids", row)
    # A filtered candidate: head selection drops the sentinel.
    np.putmask(candidates.logprobs, candidates.logprobs == -np.inf, VLLM_LOGPROB_SENTINEL)
    return candidates


def parse_top_k_heads(
    choice: dict[str, Any], ids: np.ndarray, sampled: np.ndarray, k: int, c: Evidence,
    handle: Ragged | None = None,
) -> tuple[Ragged, Ragged, Ragged | None]:
    """The heads of packed top-k rows, as from native candidates."""
    supports = parse_sampling_mask(choice, ids, c, handle)
    candidates = parse_packed_top_k(top_k_block(choice), ids, c)
    top_ids, top_logprobs, head_bad = c.kernels.heads(
        ids, candidates, sampled.astype(np.float64, copy=False), k, supports, len(ids))
    if head_bad is not None:
        _fail_head(c, choice, _TOP_K, head_bad, supports)
    return top_ids, top_logprobs, supports


# --- routed experts ------------------------------------------------------------------------------


# numpy's own reader refuses a longer header (np.load's max_header_size): a (rows, layers,
# topk) header is about 100 bytes, and nothing longer is parsed.
NPY_MAX_HEADER = 10000
# A routing array's layers and topk: what Arrow's fixed-size lists hold (tokenwire.arrow).
MAX_ROUTED_WIDTH = 2**31 - 1


def parse_npy(raw: np.ndarray, c: Evidence, field: str = "routed_experts") -> np.ndarray:
    """Upstream vLLM's form: a whole ``.npy`` file (the decoded bytes of the base64 string at
    ``field``), shaped ``(rows, layers, topk)``. Only the header fields we need are trusted."""
    shape, descr, data = npy_parts(raw, c, field, NPY_DESCRS, "uint8, uint16, int16 or int32")
    return _shaped(data, shape, NPY_DESCRS[descr], c, field)


def npy_parts(raw: np.ndarray, c: Evidence, field: str, descrs: dict[str, Any],
              kinds: str) -> tuple[list[Any], str, np.ndarray]:
    """A whole ``.npy`` file's shape (a list, not checked), its ``descr`` (a key of ``descrs``,
    the dtypes ``kinds`` names) and its data bytes; only those header fields are trusted, C
    order only."""
    if bytes(raw[:6]) != b"\x93NUMPY" or len(raw) < 10:
        c.fail(f"{field} .npy magic missing", field)
    major = int(raw[6])
    if major == 1:
        size, begin = int.from_bytes(bytes(raw[8:10]), "little"), 10
    elif major in (2, 3):
        size, begin = int.from_bytes(bytes(raw[8:12]), "little"), 12
    else:
        c.fail(f"{field} .npy version {major} is not supported", field)
    if size > NPY_MAX_HEADER:
        c.fail(f"{field} .npy header is longer than {NPY_MAX_HEADER} bytes", field)
    if len(raw) < begin + size:
        c.fail(f"{field} .npy header is truncated", field)
    try:
        header = ast.literal_eval(bytes(raw[begin : begin + size]).decode("latin-1"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        header = None
    if (
        not isinstance(header, dict)
        or header.get("fortran_order") is not False
        or not isinstance(header.get("shape"), tuple)
    ):
        c.fail(f"{field} .npy header is invalid", field)
    if named(descrs, header.get("descr")) is None:
        descr = header.get("descr")
        named_type = repr(descr) if isinstance(descr, str) and len(descr) <= 32 else "of another kind"
        c.fail(f"{field} .npy header is invalid: dtype {named_type} is not {kinds}", field)
    return list(header["shape"]), header["descr"], raw[begin + size :]


def _shaped(data: np.ndarray, shape: Any, dtype_name: str, c: Evidence, field: str = "routed_experts") -> np.ndarray:
    # The length and every bound first: nothing is multiplied, formatted or iterated past
    # three dimensions.
    if (
        not isinstance(shape, list)
        or len(shape) != 3
        or not all(is_int(d) and d >= 0 for d in shape)
        or not (1 <= shape[1] <= MAX_ROUTED_WIDTH and 1 <= shape[2] <= MAX_ROUTED_WIDTH)
    ):
        c.fail(f"{field} shape must be [rows, layers, topk]: three non-negative ints, with layers "
               "and topk in [1, 2**31)", field + ".shape")
    rows, layers, topk = shape
    dtype = ROUTED_DTYPES[dtype_name]
    # Python ints of three bounded factors: a declared shape can never overflow, and nothing
    # is allocated from it.
    if rows * layers * topk * dtype.itemsize != len(data):
        c.fail(
            f"{field} shape {shape} x {dtype.itemsize} bytes does not match "
            f"{len(data)} decoded bytes",
            field + ".shape",
        )
    # What numpy can shape even when the bytes match: zero rows make no bytes of the others.
    if max(rows, 1) * layers * topk * dtype.itemsize > MAX_OFFSET:
        c.fail(f"{field} shape {shape} is too big for an array (its non-zero dimensions span "
               "more than 2**63 - 1 bytes)", field + ".shape")
    return data.view(dtype).reshape(shape)


# An expert id this far above any model's expert count is no id: routing that packs more than
# ids (Total Router Recall appends each expert's float32 weight bits to its ids) reads so.
_PACKED_ID = 2**16


def check_experts(routing: np.ndarray, num_experts: int | None, c: Evidence, field: str) -> None:
    """Every expert id of a ``(rows, layers, topk)`` routing array names an expert: not
    negative (a signed dtype allows it) and, given the model's ``num_experts``, below it; ids
    read from JSON (int64) also below 2**31, as the widest routing dtype holds them. One pass
    over the array (``first_out_of_range``); the first bad id fails at its row."""
    limit = num_experts if num_experts is not None or routing.dtype.itemsize <= 4 else MAX_EXPERTS
    flat = routing.reshape(-1)
    bad = c.kernels.first_out_of_range(flat, limit) if flat.size else -1
    if bad < 0:
        return
    _, layers, topk = routing.shape
    row, layer, value = bad // (layers * topk), bad // topk % layers, int(flat[bad])
    if value < 0:
        c.fail(f"{field} holds a negative expert id ({value}) at layer {layer}", field, row)
    bound = "2**31 (an int32)" if num_experts is None else f"num_experts={num_experts}"
    packed = (" (no model has that many: routing that packs more than ids, such as expert "
              "weights' float32 bits after them, reads so)") if value >= _PACKED_ID else ""
    c.fail(f"{field} holds expert id {value} at layer {layer}, not below {bound}{packed}", field, row)


def parse_routed_experts(value: Any, c: Evidence, num_experts: int | None = None) -> RoutedExperts:
    field = "routed_experts"
    if isinstance(value, str):
        raw = c.routed_experts
        if raw is None:
            c.fail("Invalid routed_experts base64", field)
        routing = parse_npy(raw, c)
        check_experts(routing, num_experts, c, field)
        return RoutedExperts(routing, None)
    if not isinstance(value, dict):
        c.fail("routed_experts must be an object or a base64 .npy string", field)
    dtype_name = value.get("dtype", "uint8")
    if named(ROUTED_DTYPES, dtype_name) is None:
        c.fail("Unsupported routed_experts dtype (uint8, uint16, int16 or int32)", field + ".dtype")
    start = value.get("start")
    if start is not None and (not is_int(start) or start < 0):
        c.fail("routed_experts start must be a non-negative int", field + ".start")
    raw = c.routed_experts_data
    if raw is None:
        c.fail("Invalid routed_experts base64", field + ".data")
    routing = _shaped(raw, value.get("shape"), dtype_name, c)
    check_experts(routing, num_experts, c, field)
    return RoutedExperts(routing, start)


# --- teacher scores: prompt_token_id_logprobs -----------------------------------------------------

_TEACHER = "prompt_token_id_logprobs"
_TEACHER_DESCRS = {"<f4": "float32"}


def parse_teacher_scores(top: Evidence, prompt: np.ndarray | None, start: int | None, logits: bool) -> np.ndarray:
    """vLLM's teacher scores (``prompt_logprob_token_ids`` + ``prompt_logprob_start``): a base64
    ``.npy`` float32 ``(rows, K)`` matrix, row ``i`` scoring prompt token ``start + i + 1``;
    ``rows = max(prompt_len - 1 - start, 0)``, checked when the prompt is known (with the
    request's ``start``, exactly; without it, at most ``prompt_len - 1``). A ``-1`` candidate
    of a padded row scores ``-inf``; NaN and ``+inf`` are never scores, and log probabilities
    (unless the server sends logits) are at most 1e-6."""
    raw = top.prompt_token_id_logprobs
    if raw is None:
        top.fail(f"{_TEACHER} must be a base64 .npy string", _TEACHER)
    shape, _, data = npy_parts(raw, top, _TEACHER, _TEACHER_DESCRS, "float32")
    if (len(shape) != 2 or not all(is_int(d) and d >= 0 for d in shape) or shape[1] > MAX_ROUTED_WIDTH
            or shape[0] * shape[1] * 4 != len(data)):
        top.fail(f"{_TEACHER} must be a (rows, K) float32 matrix of its {len(data)} bytes, not shape {shape}",
                 _TEACHER)
    rows = shape[0]
    if prompt is not None:
        allowed = max(len(prompt) - 1 - (0 if start is None else start), 0)
        if rows != allowed if start is not None else rows > allowed:
            top.fail(f"{_TEACHER} has {rows} rows for a prompt of {len(prompt)} tokens"
                     + (f" scored from {start}: expected {allowed}" if start is not None else f": at most {allowed}"),
                     _TEACHER)
    scores = data.view("<f4").reshape(shape)
    flat = scores.reshape(-1)
    bad = np.flatnonzero(np.isnan(flat) | (flat == np.inf) | (False if logits else flat > 1e-6))
    if len(bad):
        top.fail(f"{_TEACHER} holds NaN, +inf" + ("" if logits else " or a positive log probability")
                 + " (a padded candidate scores -inf)", _TEACHER, int(bad[0]) // max(shape[1], 1))
    return scores


# --- by-handle payloads (prime-rl's payload_dir) -------------------------------------------------
#
# prime-rl's server can write a choice's big per-token arrays to a file under its
# ``payload_dir`` (fsynced before the response) and send, instead of the arrays, ``payload``:
# segments ``[field, file, offset, pos, rows, dtype, shape]`` (an array-like msgspec struct;
# the object form with those keys is read too). A fixed-width field stores its rows at
# ``offset``; a ragged field (the masks) stores ``rows + 1`` uint32 absolute file offsets there,
# each row's values between two of them. The segments are validated without touching a file;
# with ``payload_root`` their bytes are read into memory the result owns, from files inside
# that directory only, and validated as the inline forms are.


class PayloadField(NamedTuple):
    """What a payload field holds: fixed-width rows of one of ``dtypes`` shaped ``row_form``,
    or (``ragged``) rows of file offsets pointing at values of the one dtype in ``dtypes``;
    ``inline`` the inline fields it stands for (one of them beside it, not null, is an error)."""

    dtypes: dict[str, np.dtype[Any]]
    row_form: str
    inline: tuple[str, ...]
    ragged: bool = False


PAYLOAD_FIELDS: dict[str, PayloadField] = {
    "routed_experts": PayloadField(ROUTED_DTYPES, "[layers, topk]", ("routed_experts",)),
    "routed_expert_weights": PayloadField({"float32": np.dtype("<f4")}, "[layers, topk]",
                                          ("routed_expert_weights",)),
    "sampling_mask": PayloadField({"int32": np.dtype("<i4")}, "[]", ("sampling_mask", "kept_tokens"), True),
    "sampling_mask_logprobs": PayloadField({"float32": np.dtype("<f4")}, "[]", ("sampling_mask_logprobs",), True),
}
# A segment's members, in the order of the array form.
SEGMENT_KEYS = ("field", "file", "offset", "pos", "rows", "dtype", "shape")
# A ragged segment's row is one uint32 file offset: 4 bytes, what prime-rl steps by when it
# clips a segment (row_bytes); its dtype and shape must say so.
OFFSET_ROW_DTYPES = ("uint32", "int32", "float32")
OFFSET_ROW_SHAPES = ([], [1])


def prompt_length(document: dict[str, Any], prompt: np.ndarray | None) -> int | None:
    """The prompt's token count: the length of ``prompt_token_ids``, else ``usage.prompt_tokens``
    when it is a non-negative int, else None."""
    if prompt is not None:
        return len(prompt)
    usage = document.get("usage")
    count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return count if is_int(count) and 0 <= count <= MAX_OFFSET else None


def _segment(item: Any, at: str, c: Evidence) -> PayloadSegment:
    """One segment's members, each of its kind: a known field, a non-empty ``file`` path
    without NUL, non-negative ints (never bools) for the offset, position and rows, the
    field's dtype and row shape. Errors name a member as ``payload[i].<name>`` in both forms."""
    if isinstance(item, list):
        if len(item) != len(SEGMENT_KEYS):
            c.fail(f"payload segment must be an array [{', '.join(SEGMENT_KEYS)}]", at)
        item = dict(zip(SEGMENT_KEYS, item))
    elif not isinstance(item, dict):
        c.fail(f"payload segment must be an array [{', '.join(SEGMENT_KEYS)}] (or an object of those keys)", at)
    field = item.get("field")
    spec = named(PAYLOAD_FIELDS, field)
    if spec is None:
        c.fail(f"Unknown payload field (one of {', '.join(PAYLOAD_FIELDS)})", at + ".field")
    file = item.get("file")
    if not isinstance(file, str) or not file or "\0" in file:
        c.fail("payload file must be a non-empty path without NUL", at + ".file")
    for key in ("offset", "pos", "rows"):
        number = item.get(key)
        if not is_int(number) or not 0 <= number <= MAX_OFFSET:
            c.fail(f"payload {key} must be a non-negative int", f"{at}.{key}")
    dtype, shape = item.get("dtype"), item.get("shape")
    if spec.ragged:
        if not isinstance(dtype, str) or dtype not in OFFSET_ROW_DTYPES:
            c.fail(f"{field} payload rows are uint32 file offsets: dtype {' or '.join(OFFSET_ROW_DTYPES)} "
                   "(a 4-byte row)", at + ".dtype")
        if shape not in OFFSET_ROW_SHAPES or any(not is_int(d) for d in shape):
            c.fail(f"{field} payload rows are uint32 file offsets: shape [] or [1] (a 4-byte row)", at + ".shape")
    else:
        if named(spec.dtypes, dtype) is None:
            c.fail(f"Unsupported {field} payload dtype ({' or '.join(spec.dtypes)})", at + ".dtype")
        if (not isinstance(shape, list) or len(shape) != 2
                or not all(is_int(d) and 1 <= d <= MAX_ROUTED_WIDTH for d in shape)):
            c.fail(f"{field} payload shape must be one row's, {spec.row_form}: ints in [1, 2**31)",
                   at + ".shape")
    segment = PayloadSegment(field, file, item["offset"], item["pos"], item["rows"], dtype, tuple(shape))
    if segment.offset + segment.nbytes > MAX_OFFSET:
        c.fail(f"payload segment bytes past 2**63 - 1 in {segment.file}", at)
    return segment


def parse_payload(choice: dict[str, Any], n: int, prompt_len: int | None,
                  c: Evidence) -> tuple[PayloadSegment, ...] | None:
    """The choice's by-handle segments, validated without reading a file (None without
    ``payload``): each segment's members (:func:`_segment`); a field's segments, in the order
    sent, tile its positions (each starts where the one before it ends, fixed-width ones of one
    row shape); routing rows end at ``prompt_len + n - 1`` (the last completion token is not
    routed), the weights cover the routing's positions in its row shape, mask rows are one per
    completion token from ``prompt_len``, the mask logprobs beside a mask; no inline form of a
    field beside its segments."""
    value = choice.get("payload")
    if value is None:
        return None
    if not isinstance(value, list):
        c.fail("payload must be a list of segments", "payload")
    segments = tuple(_segment(item, f"payload[{i}]", c) for i, item in enumerate(value))
    by_field: dict[str, list[int]] = {}
    for i, segment in enumerate(segments):
        before = by_field.setdefault(segment.field, [])
        if before:
            last = segments[before[-1]]
            if segment.pos != last.pos + last.rows:
                c.fail(f"{segment.field} payload segments must tile its positions: payload[{i}] must start at "
                       f"{last.pos + last.rows}, where payload[{before[-1]}] ends, not {segment.pos}", f"payload[{i}].pos")
            if segment.shape != last.shape and not segment.ragged:
                c.fail(f"{segment.field} payload segments must share one row shape ({list(last.shape)} in "
                       f"payload[{before[-1]}])", f"payload[{i}].shape")
        before.append(i)
    for field, indices in by_field.items():
        first, last = segments[indices[0]], segments[indices[-1]]
        at_first, at_last = f"payload[{indices[0]}]", f"payload[{indices[-1]}]"
        if prompt_len is None:
            c.fail("payload rows are placed by the prompt length: the response needs prompt_token_ids "
                   "or usage.prompt_tokens", at_first + ".pos")
        if field == "routed_experts":
            start, end = first.pos, prompt_len + n - 1
        elif field == "routed_expert_weights":
            routing = by_field.get("routed_experts")
            if routing is None:
                c.fail("routed_expert_weights payload needs a routed_experts payload beside it", at_first + ".field")
            routed = [segments[j] for j in routing]
            start, end = routed[0].pos, routed[-1].pos + routed[-1].rows
            if first.shape != routed[0].shape:
                c.fail(f"routed_expert_weights payload rows must be shaped as the routing's {list(routed[0].shape)}",
                       at_first + ".shape")
        else:
            start, end = prompt_len, prompt_len + n
            if field == "sampling_mask_logprobs" and "sampling_mask" not in by_field:
                c.fail("sampling_mask_logprobs payload needs a sampling_mask payload beside it", at_first + ".field")
        if last.pos + last.rows != end:
            c.fail(f"{field} payload rows must end at {end}, not {last.pos + last.rows} ({_SPANS[field]})",
                   at_last + ".rows")
        if first.pos != start:
            c.fail(f"{field} payload rows must start at {start}, not {first.pos} ({_SPANS[field]})", at_first + ".pos")
        for inline in PAYLOAD_FIELDS[field].inline:
            if choice.get(inline) is not None:
                c.fail(f"{field} sent both by handle ({at_first}) and inline ({inline})", inline)
    return segments


# What rows each field's segments cover, for the errors.
_SPANS = {
    "routed_experts": "routing rows end at prompt length + completion length - 1",
    "routed_expert_weights": "the weights cover the routing's rows",
    "sampling_mask": "one row per completion token from the prompt length",
    "sampling_mask_logprobs": "one row per completion token from the prompt length",
}


# A byte range of a payload file and its owner: (file key, start, end, choice, segment index).
Span = tuple[str, int, int, int, int]


def check_payload_overlap(spans: list[Span]) -> None:
    """No two byte ranges of one file share a byte; each range names its choice and its
    segment's index in the choice's ``payload``. Sorted by file and start, each range is
    compared with the furthest end before it."""
    spans = sorted((s for s in spans if s[2] > s[1]), key=lambda s: (s[0], s[1], s[3], s[4]))
    file, end, owner = None, 0, (0, 0)
    for key, lo, hi, choice, index in spans:
        if key == file and lo < end:
            raise MalformedResponseError(
                f"payload segment bytes [{lo}, {hi}) of {key} overlap choices[{owner[0]}].payload[{owner[1]}]",
                choice=choice, field=f"payload[{index}]")
        if key != file or hi > end:
            file, end, owner = key, hi, (choice, index)


def segment_spans(choice: int, segments: tuple[PayloadSegment, ...] | None) -> list[Span]:
    """The bytes each segment spans from its offset, by its ``file`` as sent (a ragged
    segment's values are known only once its offsets are read)."""
    return [(s.file, s.offset, s.offset + s.nbytes, choice, i) for i, s in enumerate(segments or ())]


# Opened without following a last-component symlink (one swapped in after the check fails to
# open) and without blocking (a FIFO would wait for a writer; it is refused as no regular file).
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0))
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class _File(NamedTuple):
    path: str  # resolved, inside the root
    size: int  # at open
    reader: io.FileIO


class PayloadFiles:
    """The payload files of one response, under one root directory: each opened once (on the
    first segment that names it, by resolved path) and kept open until :meth:`close`; every byte range read
    into memory the result owns (a file changed later changes nothing read). A file must
    resolve (symlinks followed) to a regular file inside the root, and is opened one
    component at a time from the root without following a symlink. ``spans`` gathers the
    byte ranges read, by resolved path, for :func:`check_payload_overlap`."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.files: dict[str, _File] = {}
        self.spans: list[Span] = []

    def close(self) -> None:
        for file in self.files.values():
            file.reader.close()
        self.files.clear()

    def open(self, name: str, c: Evidence, at: str) -> _File:
        """The file ``name`` (a path, relative to the root or absolute) names, opened on first
        use: by resolved path, so two names of one file share it."""
        at += ".file"
        if not os.path.isdir(self.root):
            c.fail(f"payload_root {self.root} is not a directory", at)
        # A relative path is under the root; an absolute one must resolve inside it.
        real = os.path.realpath(os.path.join(self.root, name))
        if real == self.root or os.path.commonpath([self.root, real]) != self.root:
            c.fail(f"payload file {name} resolves outside payload_root", at)
        file = self.files.get(real)
        if file is None:
            file = self.files[real] = self._open(name, real, c, at)
        return file

    def _open(self, name: str, real: str, c: Evidence, at: str) -> _File:
        try:
            fd = _open_beneath(self.root, os.path.relpath(real, self.root))
        except OSError as exc:
            c.fail(f"payload file {name} cannot be opened: {exc.strerror}", at)
        try:
            info = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            c.fail(f"payload file {name} cannot be opened: {exc.strerror}", at)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            c.fail(f"payload file {name} is not a regular file", at)
        return _File(real, info.st_size, io.FileIO(fd, "rb", closefd=True))

    def read(self, file: _File, ranges: list[tuple[int, int]], c: Evidence, at: list[str]) -> list[np.ndarray]:
        """The bytes of each ``[start, end)`` of ``file`` (uint8, owned), one read per run of
        contiguous ranges; ``at[i]`` is where range ``i`` fails when the file is shorter."""
        out: list[np.ndarray] = [np.empty(0, dtype=np.uint8)] * len(ranges)
        order = sorted((r for r in range(len(ranges)) if ranges[r][1] > ranges[r][0]), key=lambda r: ranges[r][0])
        run: list[int] = []
        for i in order + [-1]:
            if run and (i < 0 or ranges[i][0] != ranges[run[-1]][1]):
                lo, hi = ranges[run[0]][0], ranges[run[-1]][1]
                data = self._read_run(file, lo, hi, c, [at[r] for r in run], [ranges[r] for r in run])
                for r in run:
                    out[r] = data[ranges[r][0] - lo : ranges[r][1] - lo]
                run = []
            run.append(i)
        return out

    def _read_run(self, file: _File, lo: int, hi: int, c: Evidence, at: list[str],
                  ranges: list[tuple[int, int]]) -> np.ndarray:
        buffer = np.empty(hi - lo, dtype=np.uint8)
        view, done = memoryview(buffer), 0
        try:
            file.reader.seek(lo)
            while done < hi - lo:
                got = file.reader.readinto(view[done:])
                if not got:
                    break  # the end of the file: it shrank since it was opened
                done += got
        except OSError as exc:
            c.fail(f"payload file {file.path} cannot be read: {exc.strerror}", at[0])
        if done < hi - lo:
            r = next(j for j, (_, end) in enumerate(ranges) if end > lo + done)
            c.fail(f"payload segment bytes [{ranges[r][0]}, {ranges[r][1]}) are past the end of {file.path} "
                   f"({lo + done} bytes)", at[r])
        return buffer


def _open_beneath(root: str, relative: str) -> int:
    """A read-only descriptor of ``relative`` (a resolved path, no ``..``) under ``root``,
    each directory opened from the one before it without following a symlink, where the
    platform allows (else the joined path, its last component not followed)."""
    if os.open not in os.supports_dir_fd:
        return os.open(os.path.join(root, relative), _OPEN_FLAGS)
    *directories, name = relative.split(os.sep)
    directory = os.open(root, _DIR_FLAGS)
    try:
        for part in directories:
            below = os.open(part, _DIR_FLAGS, dir_fd=directory)
            os.close(directory)
            directory = below
        return os.open(name, _OPEN_FLAGS, dir_fd=directory)
    finally:
        os.close(directory)


def _aligned(data: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """``data`` (uint8) as ``dtype``: a view, or a copy when the view would be misaligned."""
    values = data.view(dtype)
    return values if values.flags.aligned else values.copy()


def read_payload(segments: tuple[PayloadSegment, ...], ids: np.ndarray, files: PayloadFiles,
                 prompt_len: int, c: Evidence) -> dict[str, Any]:
    """The arrays of the segments, by field (``routed_experts``: :class:`RoutedExperts`;
    ``routed_expert_weights``: float32 rows shaped as the routing's; ``sampling_mask``: int32
    :class:`Ragged`, an empty row an absent support; ``sampling_mask_logprobs``: float32
    :class:`Ragged` on the mask's rows), each validated by the rules of its inline form.

    The segments' own bytes are read first (rows, or a ragged field's offsets), then the
    values the offsets point at, once the offsets are checked: non-decreasing, each row a
    whole number of 4-byte values, inside the file, and the values' bytes overlapping no other
    segment's bytes of the response."""
    at = [f"payload[{i}]" for i in range(len(segments))]
    opened = [files.open(s.file, c, at[i]) for i, s in enumerate(segments)]
    for i, (segment, file) in enumerate(zip(segments, opened)):
        if segment.offset + segment.nbytes > file.size:
            c.fail(f"payload segment bytes [{segment.offset}, {segment.offset + segment.nbytes}) are past the "
                   f"end of {segment.file} ({file.size} bytes)", at[i])
    choice = cast(int, c.index)
    files.spans += [(f.path, s.offset, s.offset + s.nbytes, choice, i) for i, (s, f) in enumerate(zip(segments, opened))]
    check_payload_overlap(files.spans)
    own = _read_grouped(files, opened, [(s.offset, s.offset + s.nbytes) for s in segments], c, at)
    # A ragged segment's offsets: where its values are.
    starts: dict[int, np.ndarray] = {}
    values_at: list[tuple[int, int]] = [(0, 0)] * len(segments)
    for i, segment in enumerate(segments):
        if not segment.ragged:
            continue
        bounds = own[i].view("<u4").astype(np.int64)
        steps = np.diff(bounds)
        bad = np.flatnonzero((steps < 0) | (steps % 4 != 0))
        if len(bad):
            row = int(bad[0])
            reason = "decrease" if steps[row] < 0 else "are not a whole number of 4-byte values apart"
            c.fail(f"{segment.field} payload offsets {int(bounds[row])} and {int(bounds[row + 1])} of row {row} {reason}",
                   at[i], segment.pos + row - prompt_len)
        if int(bounds[-1]) > opened[i].size:
            if not segment.rows:  # no row: its one offset is past the end
                c.fail(f"{segment.field} payload offset {int(bounds[0])} is past the end of {segment.file} "
                       f"({opened[i].size} bytes)", at[i])
            row = int(np.flatnonzero(bounds[1:] > opened[i].size)[0])
            c.fail(f"{segment.field} payload row {row} ends at byte {int(bounds[row + 1])}, past the end of "
                   f"{segment.file} ({opened[i].size} bytes)", at[i], segment.pos + row - prompt_len)
        starts[i] = bounds
        values_at[i] = (int(bounds[0]), int(bounds[-1]))
    if starts:
        files.spans += [(opened[i].path, *values_at[i], choice, i) for i in starts]
        check_payload_overlap(files.spans)
    values = _read_grouped(files, opened, values_at, c, at) if starts else []
    out: dict[str, Any] = {}
    fields = {}
    for i, segment in enumerate(segments):
        fields.setdefault(segment.field, []).append(i)
    if "routed_experts" in fields:
        out["routed_experts"] = RoutedExperts(_fixed_rows(segments, fields["routed_experts"], own, c, at),
                                              segments[fields["routed_experts"][0]].pos)
    if "routed_expert_weights" in fields:
        out["routed_expert_weights"] = _fixed_rows(segments, fields["routed_expert_weights"], own, c, at)
    if "sampling_mask" in fields:
        out["sampling_mask"] = _mask_rows(segments, fields["sampling_mask"], starts, values, ids, c, at)
    if "sampling_mask_logprobs" in fields:
        out["sampling_mask_logprobs"] = _mask_logprob_rows(segments, fields["sampling_mask_logprobs"], starts, values,
                                                           out["sampling_mask"], c, at)
    return out


def _read_grouped(files: PayloadFiles, opened: list[_File], ranges: list[tuple[int, int]], c: Evidence,
                  at: list[str]) -> list[np.ndarray]:
    """Each of ``ranges`` of the file of the same index, read file by file."""
    out: list[np.ndarray] = [np.empty(0, dtype=np.uint8)] * len(ranges)
    by_path: dict[str, list[int]] = {}
    for i, file in enumerate(opened):
        by_path.setdefault(file.path, []).append(i)
    for indices in by_path.values():
        got = files.read(opened[indices[0]], [ranges[i] for i in indices], c, [at[i] for i in indices])
        for i, data in zip(indices, got):
            out[i] = data
    return out


def _fixed_rows(segments: tuple[PayloadSegment, ...], indices: list[int], own: list[np.ndarray], c: Evidence,
                at: list[str]) -> np.ndarray:
    """A fixed-width field's rows, its segments concatenated in position order (numpy's
    promotion when their dtypes differ): expert ids never negative, weights finite."""
    parts, row = [], 0
    for i in indices:
        segment = segments[i]
        dtype = PAYLOAD_FIELDS[segment.field].dtypes[segment.dtype]
        array = _aligned(own[i], dtype).reshape(segment.rows, *segment.shape)
        if dtype.kind == "f" and array.size:
            bad = np.flatnonzero(~np.isfinite(array.reshape(segment.rows, -1)).all(axis=1))
            if len(bad):
                c.fail(f"{segment.field} holds a weight that is not finite", at[i], row + int(bad[0]))
        elif dtype.kind == "i" and array.size:
            bad = c.kernels.first_bad("negative", array.reshape(-1))
            if bad >= 0:
                c.fail("routed_experts holds a negative expert id", at[i], row + bad // (array.size // segment.rows))
        parts.append(array)
        row += segment.rows
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _ragged_rows(segments: tuple[PayloadSegment, ...], indices: list[int], starts: dict[int, np.ndarray],
                 values: list[np.ndarray], dtype: str) -> tuple[Ragged, list[int]]:
    """A ragged field's rows from its segments' offsets and values, and the first row of
    each segment (then the row count)."""
    counts = [np.diff(starts[i]) // 4 for i in indices]
    offsets = np.zeros(sum(len(k) for k in counts) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(counts), out=offsets[1:])
    parts = [_aligned(values[i], np.dtype(dtype)) for i in indices]
    flat = parts[0] if len(parts) == 1 else np.concatenate(parts)
    firsts = np.cumsum([0] + [segments[i].rows for i in indices]).tolist()
    return Ragged(offsets, flat), firsts


def _where(indices: list[int], firsts: list[int], row: int, at: list[str]) -> str:
    """The segment that holds ``row`` of a field."""
    return at[indices[int(np.searchsorted(firsts, row, side="right")) - 1]]


def _mask_rows(segments: tuple[PayloadSegment, ...], indices: list[int], starts: dict[int, np.ndarray],
               values: list[np.ndarray], ids: np.ndarray, c: Evidence, at: list[str]) -> Ragged:
    """The mask's int32 rows, under the inline masks' rules: ids never negative, and each
    non-empty row a support of its token (``first_bad_support``); an empty row is an absent
    support, as a zero count inline."""
    rows, firsts = _ragged_rows(segments, indices, starts, values, "<i4")
    negative = c.kernels.first_bad("negative", rows.values)
    limit = len(ids) if negative < 0 else int(np.searchsorted(rows.offsets, negative, side="right")) - 1
    bad = c.kernels.first_bad_support(ids, rows, limit, absent_ok=True)
    if bad < 0 and negative >= 0:
        bad = limit
    if bad >= 0:
        c.fail("Invalid recorded sampling support", _where(indices, firsts, bad, at), bad)
    return rows


def _mask_logprob_rows(segments: tuple[PayloadSegment, ...], indices: list[int], starts: dict[int, np.ndarray],
                       values: list[np.ndarray], mask: Ragged, c: Evidence, at: list[str]) -> Ragged:
    """The mask logprobs' float32 rows: as wide as the mask's, each finite and at most 1e-6."""
    rows, firsts = _ragged_rows(segments, indices, starts, values, "<f4")
    differ = np.flatnonzero(np.diff(rows.offsets) != np.diff(mask.offsets))
    if len(differ):
        row = int(differ[0])
        c.fail(f"sampling_mask_logprobs row {row} holds {len(rows[row])} values for {len(mask[row])} mask ids",
               _where(indices, firsts, row, at), row)
    bad = c.kernels.first_bad("compact", rows.values)
    if bad >= 0:
        row = int(np.searchsorted(rows.offsets, bad, side="right")) - 1
        c.fail("sampling_mask_logprobs must be finite and at most 1e-6 at each kept id",
               _where(indices, firsts, row, at), row)
    return rows


# --- a whole response -----------------------------------------------------------------------------


# Why a server sends no sampling mask, for require_sampling_mask.
MISSING_MASK = (
    "no sampling mask in the response (sampling_mask and kept_tokens absent or null) and "
    "require_sampling_mask is set: vLLM sends it only when started with --return-sampling-mask "
    "(prime-rl: enable_return_sampling_mask = true on the inference server) and for requests that "
    "sample with temperature > 0 and top_k > 0; a server started with it still sends null when "
    "its batch-sharded sampler drops the mask (vLLM PR #53826)"
)


def _parse_choice(c: Evidence, choice: Any, k: int | None, require_logprobs: bool,
                  require_sampling_mask: bool = False, prompt_len: int | None = None,
                  files: PayloadFiles | None = None, num_experts: int | None = None) -> GenerateChoice:
    if not isinstance(choice, dict):
        c.fail("choice must be an object")
    ids = checked_int_list(c, c.token_ids, "token_ids", "token_ids must hold token ids in [0, 2**32)")
    segments = parse_payload(choice, len(ids), prompt_len, c)
    by_handle = {s.field for s in segments or ()}
    if require_sampling_mask and _mask_field(choice) is None and "sampling_mask" not in by_handle:
        c.fail(MISSING_MASK, "sampling_mask")
    handle = read_payload(segments, ids, files, cast(int, prompt_len), c) if segments and files is not None else {}
    held = handle.get("sampling_mask")
    top_ids = top_logprobs = None
    consumed = list(_CONSUMED)
    if choice.get(KEY.compact_logprobs) is not None:
        logprobs, top_ids, top_logprobs, mask = parse_compact_logprobs(choice, ids, k, c, held)
        check_other_transports(c, choice, ids, KEY.compact_logprobs, logprobs, k)
        consumed.append(KEY.compact_logprobs)
    else:
        entries = None
        if choice.get(KEY.completion_logprobs) is not None:
            logprobs = parse_packed_logprobs(choice[KEY.completion_logprobs], len(ids), c)
            entries = check_other_transports(c, choice, ids, KEY.completion_logprobs, logprobs, k)
            consumed.append(KEY.completion_logprobs)
        elif choice.get(KEY.logprobs) is not None or require_logprobs or k is not None:
            logprobs, entries = parse_native_logprobs(choice, ids, c, want_top=k is not None)
        else:
            logprobs = None
        if k is not None and top_k_block(choice) is not None:
            if logprobs is None:
                c.fail("Missing requested top logprobs: packed top-k rows need the sampled "
                       "logprobs beside them (logprobs.sampled or completion_logprobs)", "logprobs.sampled")
            top_ids, top_logprobs, mask = parse_top_k_heads(choice, ids, logprobs, k, c, held)
            consumed.append(KEY.logprobs)
        elif k is not None:
            top_ids, top_logprobs, mask = parse_native_heads(choice, ids, k, c, entries, held)
            consumed.append(KEY.logprobs)
        else:
            mask = parse_sampling_mask(choice, ids, c, held)
            if top_k_block(choice) is not None:  # validated without a head asked for
                parse_packed_top_k(top_k_block(choice), ids, c)
        if logprobs is not None and KEY.completion_logprobs not in consumed:
            consumed.append(KEY.logprobs)
    routed = choice.get(KEY.routed_experts)
    return GenerateChoice(
        index=cast(int, c.index),  # a choice's evidence (None: the top level's)
        completion_ids=ids,
        completion_logprobs=logprobs,
        completion_top_ids=top_ids,
        completion_top_logprobs=top_logprobs,
        sampling_mask=mask,
        routed_experts=(parse_routed_experts(routed, c, num_experts) if routed is not None
                        else handle.get("routed_experts")),
        finish_reason=choice.get("finish_reason"),
        raw=_raw(c, choice, consumed),
        sampling_mask_present=None if mask is None else mask.offsets[1:] != mask.offsets[:-1],
        payload=segments,
        sampling_mask_logprobs=handle.get("sampling_mask_logprobs"),
        routed_expert_weights=handle.get("routed_expert_weights"),
    )


# Fields that GenerateChoice.raw may keep and the compiled extractor blanks in part.
_MAY_BE_BLANKED = (KEY.logprobs, KEY.completion_logprobs)


def _raw(c: Evidence, choice: dict[str, Any], consumed: list[str]) -> dict[str, Any]:
    """The fields of a choice that are not attributes, as the document holds them (a field
    an extractor blanked comes back from its evidence)."""
    raw = {key: value for key, value in choice.items() if key not in consumed}
    for key in _MAY_BE_BLANKED:
        if key in raw and key in c.sent:
            raw[key] = c.sent[key]
    return raw


def parse_document(document: Any, k: int | None, require_logprobs: bool, evidence: Any = None,
                   require_sampling_mask: bool = False, prompt_logprob_start: int | None = None,
                   teacher_logits: bool = False, payload_root: str | None = None,
                   num_experts: int | None = None) -> GenerateResponse:
    """Validate a parsed response. ``evidence(index, value)`` gives the :class:`Evidence` of
    each choice (index None: the top level, value the document); by default
    :func:`extract_choice` reads it from the parsed document, one choice at a time, as the
    rules reach it. With ``payload_root`` (a checked path), by-handle segments are read from
    files under it."""
    if not isinstance(document, dict):
        raise MalformedResponseError("response must be a JSON object")
    read = evidence or (lambda index, value: extract_choice(index, value, k))
    prompt = document.get(KEY.prompt_token_ids)
    teacher = document.get(_TEACHER)
    top = read(None, document) if prompt is not None or teacher is not None else None
    if prompt is not None:
        prompt = checked_int_list(top, top.prompt_token_ids, "prompt_token_ids",
                                  "prompt_token_ids must hold token ids in [0, 2**32)")
    if teacher is not None:
        teacher = parse_teacher_scores(top, prompt, prompt_logprob_start, teacher_logits)
    choices = document.get(KEY.choices)
    if not isinstance(choices, list) or not choices:
        raise MalformedResponseError("choices must be a non-empty list", field="choices")
    prompt_len = prompt_length(document, prompt)
    if payload_root is None:
        parsed = [_parse_choice(read(i, choice), choice, k, require_logprobs, require_sampling_mask, prompt_len,
                                num_experts=num_experts) for i, choice in enumerate(choices)]
        # Without the files, by ``file`` as sent; with them, each choice's reads check it by path.
        check_payload_overlap([span for i, p in enumerate(parsed) for span in segment_spans(i, p.payload)])
    else:
        files = PayloadFiles(payload_root)
        try:
            parsed = [_parse_choice(read(i, choice), choice, k, require_logprobs, require_sampling_mask, prompt_len,
                                    files, num_experts) for i, choice in enumerate(choices)]
        finally:
            files.close()
    if teacher is None:
        return response_of(document, parsed, prompt, "request_id")
    return response_of(document, parsed, prompt, "request_id", (KEY.prompt_token_id_logprobs,),
                       prompt_token_id_logprobs=teacher)


def response_of(document: dict[str, Any], choices: list[GenerateChoice], prompt: np.ndarray | None,
                id_key: str, consumed: tuple[str, ...] = (), **attributes: Any) -> GenerateResponse:
    """The response of a document's parsed choices: the id under ``id_key``, the usage, the
    prompt ids, the ``attributes`` read from the ``consumed`` top-level fields, and every
    other top-level field as the payload."""
    skip = (KEY.choices, KEY.prompt_token_ids, *consumed)
    return GenerateResponse(
        choices=choices,
        request_id=document.get(id_key),
        usage=document.get("usage"),
        prompt_token_ids=prompt,
        payload={key: v for key, v in document.items() if key not in skip},
        **attributes,
    )


def parse_generate_response(
    raw: Any, *, top_k: int | None = None, require_logprobs: bool = True, require_sampling_mask: bool = False,
    prompt_logprob_start: int | None = None, teacher_logits: bool = False, payload_root: Any = None,
    num_experts: int | None = None,
) -> GenerateResponse:
    """Parse and validate a ``/inference/v1/generate`` response (see the package docs)."""
    k = check_top_k(top_k)
    start = check_start(prompt_logprob_start)
    root = check_payload_root(payload_root)
    experts = check_num_experts(num_experts)
    return parse_document(load_document(raw), k, require_logprobs, require_sampling_mask=require_sampling_mask,
                          prompt_logprob_start=start, teacher_logits=bool(teacher_logits), payload_root=root,
                          num_experts=experts)
