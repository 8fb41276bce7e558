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
import math
from typing import Any, cast

import numpy as np

from .._args import check_start, check_top_k
from .._errors import MalformedResponseError
from .._types import GenerateChoice, GenerateResponse, Ragged, RoutedExperts
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

# Fields of a choice that become attributes; the rest stays in ``GenerateChoice.raw``.
_CONSUMED = ("index", "token_ids", "finish_reason", "sampling_mask", "kept_tokens", "routed_experts")


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
    "compact_logprobs": "compact_logprobs row {t}",
    "completion_logprobs": "completion_logprobs[{t}]",
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
    if used == "compact_logprobs" and choice.get("completion_logprobs") is not None:
        packed = parse_packed_logprobs(choice["completion_logprobs"], len(ids), c)
        _check_agrees(c, packed, "completion_logprobs", logprobs, used)
    field = choice.get("logprobs")
    if used == "logprobs" or field is None:
        return None
    if isinstance(field, dict) and field.get("content") is None and field.get("sampled") is None:
        return None  # an object holding no logprobs (each member null or absent)
    want_top = k is not None and used == "completion_logprobs"
    native, entries = parse_native_logprobs(choice, ids, c, want_top)
    _check_agrees(c, native, "logprobs.sampled" if entries is None else "logprobs.content", logprobs, used)
    return entries


# --- sampling mask -------------------------------------------------------------------------------


def parse_sampling_mask(choice: dict[str, Any], ids: np.ndarray, c: Evidence) -> Ragged | None:
    field = _mask_field(choice)
    if field is None:
        return None
    mask = choice[field]
    # kept_tokens (prime-rl's sampling replay): the same CSR with bare base64 strings.
    bare = field == "kept_tokens"
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
    # The first row that breaks a rule: malformed (bad_row) or not a valid support.
    limit = len(ids) if bad_row is None else bad_row
    # An empty row (a zero count) is a token without a recorded support, in every form: prime-rl
    # sends vLLM's packed mask with zero counts for positions without replay.
    bad = c.kernels.first_bad_support(ids, rows, limit, absent_ok=True)
    if bad >= 0:
        c.fail("Invalid recorded sampling support", field, bad)
    if bad_row is not None:
        c.fail("Invalid recorded sampling support", field, bad_row)
    return rows


def _mask_field(choice: dict[str, Any]) -> str | None:
    """The field the supports are read from (``sampling_mask`` before ``kept_tokens``), or
    None."""
    if choice.get("sampling_mask") is not None:
        return "sampling_mask"
    return "kept_tokens" if choice.get("kept_tokens") is not None else None


def _fail_head(c: Evidence, choice: dict[str, Any], field: str, bad: tuple[int, str], supports: Ragged | None):
    """Report the head rule ``bad`` broke. A kept set with an id the head has no candidate
    logprob for is located at ``kept_tokens`` and says what to request."""
    token, reason = bad
    if reason == HEAD_MISSING_SUPPORT and supports is not None and _mask_field(choice) == "kept_tokens":
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
    choice: dict[str, Any], ids: np.ndarray, k: int | None, c: Evidence
) -> tuple[np.ndarray, Ragged | None, Ragged | None, Ragged | None]:
    # The compiled core's plain path (_core_plain.pxi, _plain_compact) accepts the plainest valid
    # choices of compact rows without a head on its own: a rule added here must be added
    # there (or hand them over).
    field = "compact_logprobs"
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
        return sampled, None, None, parse_sampling_mask(choice, ids, c)
    supports = parse_sampling_mask(choice, ids, c)
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
    choice: dict[str, Any], ids: np.ndarray, k: int, c: Evidence, entries: NativeEntries | None = None
) -> tuple[Ragged, Ragged, Ragged | None]:
    field = "logprobs.content"
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or c.logprobs_content.length != len(ids):
        c.fail("Missing requested top logprobs", field)
    supports = parse_sampling_mask(choice, ids, c)
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
    choice: dict[str, Any], ids: np.ndarray, sampled: np.ndarray, k: int, c: Evidence
) -> tuple[Ragged, Ragged, Ragged | None]:
    """The heads of packed top-k rows, as from native candidates."""
    supports = parse_sampling_mask(choice, ids, c)
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


def _parse_npy(raw: np.ndarray, c: Evidence) -> np.ndarray:
    """Upstream vLLM's form: a whole ``.npy`` file. Only the header fields we need are trusted."""
    shape, descr, data = npy_parts(raw, c, "routed_experts", NPY_DESCRS)
    return _shaped(data, shape, NPY_DESCRS[descr], c)


def npy_parts(raw: np.ndarray, c: Evidence, field: str, descrs: dict[str, Any]) -> tuple[list[Any], str, np.ndarray]:
    """A whole ``.npy`` file's shape (a list, not checked), its ``descr`` (a key of
    ``descrs``) and its data bytes; only those header fields are trusted, C order only."""
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
        or named(descrs, header.get("descr")) is None
        or not isinstance(header.get("shape"), tuple)
    ):
        c.fail(f"{field} .npy header is invalid", field)
    return list(header["shape"]), header["descr"], raw[begin + size :]


def _shaped(data: np.ndarray, shape: Any, dtype_name: str, c: Evidence) -> np.ndarray:
    field = "routed_experts"
    # The length and every bound first: nothing is multiplied, formatted or iterated past
    # three dimensions.
    if (
        not isinstance(shape, list)
        or len(shape) != 3
        or not all(is_int(d) and d >= 0 for d in shape)
        or not (1 <= shape[1] <= MAX_ROUTED_WIDTH and 1 <= shape[2] <= MAX_ROUTED_WIDTH)
    ):
        c.fail("routed_experts shape must be [rows, layers, topk]: three non-negative ints, with layers "
               "and topk in [1, 2**31)", field + ".shape")
    rows, layers, topk = shape
    dtype = ROUTED_DTYPES[dtype_name]
    # Python ints of three bounded factors: a declared shape can never overflow, and nothing
    # is allocated from it.
    if rows * layers * topk * dtype.itemsize != len(data):
        c.fail(
            f"routed_experts shape {shape} x {dtype.itemsize} bytes does not match "
            f"{len(data)} decoded bytes",
            field + ".shape",
        )
    # What numpy can shape even when the bytes match: zero rows make no bytes of the others.
    if max(rows, 1) * layers * topk * dtype.itemsize > MAX_OFFSET:
        c.fail(f"routed_experts shape {shape} is too big for an array (its non-zero dimensions span "
               "more than 2**63 - 1 bytes)", field + ".shape")
    routing = data.view(dtype).reshape(shape)
    if dtype.kind == "i" and routing.size:
        # Expert ids are indices: a negative one names no expert (a signed dtype allows it).
        bad = c.kernels.first_bad("negative", routing.reshape(-1))
        if bad >= 0:
            c.fail("routed_experts holds a negative expert id", field, bad // (layers * topk))
    return routing


def parse_routed_experts(value: Any, c: Evidence) -> RoutedExperts:
    field = "routed_experts"
    if isinstance(value, str):
        raw = c.routed_experts
        if raw is None:
            c.fail("Invalid routed_experts base64", field)
        return RoutedExperts(_parse_npy(raw, c), None)
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
    return RoutedExperts(_shaped(raw, value.get("shape"), dtype_name, c), start)


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
    shape, _, data = npy_parts(raw, top, _TEACHER, _TEACHER_DESCRS)
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
                  require_sampling_mask: bool = False) -> GenerateChoice:
    if not isinstance(choice, dict):
        c.fail("choice must be an object")
    ids = checked_int_list(c, c.token_ids, "token_ids", "token_ids must hold token ids in [0, 2**32)")
    if require_sampling_mask and _mask_field(choice) is None:
        c.fail(MISSING_MASK, "sampling_mask")
    top_ids = top_logprobs = None
    consumed = list(_CONSUMED)
    if choice.get("compact_logprobs") is not None:
        logprobs, top_ids, top_logprobs, mask = parse_compact_logprobs(choice, ids, k, c)
        check_other_transports(c, choice, ids, "compact_logprobs", logprobs, k)
        consumed.append("compact_logprobs")
    else:
        entries = None
        if choice.get("completion_logprobs") is not None:
            logprobs = parse_packed_logprobs(choice["completion_logprobs"], len(ids), c)
            entries = check_other_transports(c, choice, ids, "completion_logprobs", logprobs, k)
            consumed.append("completion_logprobs")
        elif choice.get("logprobs") is not None or require_logprobs or k is not None:
            logprobs, entries = parse_native_logprobs(choice, ids, c, want_top=k is not None)
        else:
            logprobs = None
        if k is not None and top_k_block(choice) is not None:
            if logprobs is None:
                c.fail("Missing requested top logprobs: packed top-k rows need the sampled "
                       "logprobs beside them (logprobs.sampled or completion_logprobs)", "logprobs.sampled")
            top_ids, top_logprobs, mask = parse_top_k_heads(choice, ids, logprobs, k, c)
            consumed.append("logprobs")
        elif k is not None:
            top_ids, top_logprobs, mask = parse_native_heads(choice, ids, k, c, entries)
            consumed.append("logprobs")
        else:
            mask = parse_sampling_mask(choice, ids, c)
            if top_k_block(choice) is not None:  # validated without a head asked for
                parse_packed_top_k(top_k_block(choice), ids, c)
        if logprobs is not None and "completion_logprobs" not in consumed:
            consumed.append("logprobs")
    routed = choice.get("routed_experts")
    return GenerateChoice(
        index=cast(int, c.index),  # a choice's evidence (None: the top level's)
        completion_ids=ids,
        completion_logprobs=logprobs,
        completion_top_ids=top_ids,
        completion_top_logprobs=top_logprobs,
        sampling_mask=mask,
        routed_experts=parse_routed_experts(routed, c) if routed is not None else None,
        finish_reason=choice.get("finish_reason"),
        raw=_raw(c, choice, consumed),
        sampling_mask_present=None if mask is None else mask.offsets[1:] != mask.offsets[:-1],
    )


# Fields that GenerateChoice.raw may keep and the compiled extractor blanks in part.
_MAY_BE_BLANKED = ("logprobs", "completion_logprobs")


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
                   teacher_logits: bool = False) -> GenerateResponse:
    """Validate a parsed response. ``evidence(index, value)`` gives the :class:`Evidence` of
    each choice (index None: the top level, value the document); by default
    :func:`extract_choice` reads it from the parsed document, one choice at a time, as the
    rules reach it."""
    if not isinstance(document, dict):
        raise MalformedResponseError("response must be a JSON object")
    read = evidence or (lambda index, value: extract_choice(index, value, k))
    prompt = document.get("prompt_token_ids")
    teacher = document.get(_TEACHER)
    top = read(None, document) if prompt is not None or teacher is not None else None
    if prompt is not None:
        prompt = checked_int_list(top, top.prompt_token_ids, "prompt_token_ids",
                                  "prompt_token_ids must hold token ids in [0, 2**32)")
    if teacher is not None:
        teacher = parse_teacher_scores(top, prompt, prompt_logprob_start, teacher_logits)
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedResponseError("choices must be a non-empty list", field="choices")
    parsed = [_parse_choice(read(i, choice), choice, k, require_logprobs, require_sampling_mask)
              for i, choice in enumerate(choices)]
    return response_of(document, parsed, prompt, "request_id", teacher, format="generate", top_k=k)


def response_of(document: dict[str, Any], choices: list[GenerateChoice], prompt: np.ndarray | None,
                id_key: str, teacher: np.ndarray | None = None, *, format: str, top_k: int | None
                ) -> GenerateResponse:
    """The response of a document's parsed choices: the id under ``id_key``, the usage, the
    prompt ids, the teacher scores, and every other top-level field as the payload; the
    parser's ``format`` and ``top_k``."""
    consumed = ("choices", "prompt_token_ids", *((_TEACHER,) if teacher is not None else ()))
    return GenerateResponse(
        choices=choices,
        request_id=document.get(id_key),
        usage=document.get("usage"),
        prompt_token_ids=prompt,
        payload={key: v for key, v in document.items() if key not in consumed},
        prompt_token_id_logprobs=teacher,
        format=format,
        top_k=top_k,
    )


def parse_generate_response(
    raw: Any, *, top_k: int | None = None, require_logprobs: bool = True, require_sampling_mask: bool = False,
    prompt_logprob_start: int | None = None, teacher_logits: bool = False,
) -> GenerateResponse:
    """Parse and validate a ``/inference/v1/generate`` response (see the package docs)."""
    k = check_top_k(top_k)
    start = check_start(prompt_logprob_start)
    return parse_document(load_document(raw), k, require_logprobs, require_sampling_mask=require_sampling_mask,
                          prompt_logprob_start=start, teacher_logits=bool(teacher_logits))
