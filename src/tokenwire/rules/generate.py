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

import math
from itertools import chain
from typing import Any, cast

import numpy as np

from ..base._args import check_num_experts, check_payload_root, check_prompt_tokens, check_start, check_top_k
from ..base._errors import MalformedResponseError
from ..base._table import CHOICE, GENERATE, KEY, top_keys
from ..base._types import GenerateChoice, GenerateResponse, Ragged
from ..base._wire import COMPACT_FORMAT, MAX_OFFSET, VLLM_LOGPROB_SENTINEL
from ..extract.python import (
    Evidence,
    extract_choice,
    full_at,
    load_document,
    numbers,
    records_by_position,
)
from ..kernels.python import HEAD_MISSING_SUPPORT, HEAD_TOO_FEW, Candidates, NativeEntries, is_int
from .arrays import (
    explained,
    named,
    parse_routed_experts,
    parse_teacher_scores,
)
from .payload import (
    PayloadFiles,
    check_payload_overlap,
    given_prompt_length,
    parse_payload,
    read_payload,
    segment_spans,
)

__all__ = ["parse_document", "parse_generate_response"]

PACKED_DTYPES = {"float32": np.dtype("<f4"), "float64": np.dtype("<f8")}

# The transports of a choice's sampled-token logprobs: the rules consume the one they read (a
# new transport's key joins them here, or it is consumed whenever present).
_TRANSPORTS = (KEY.compact_logprobs, KEY.completion_logprobs, KEY.logprobs)
# Fields of a choice that become attributes; the rest stays in ``GenerateChoice.raw``: the
# index, the finish reason and the wire table's generate fields but the transports.
_CONSUMED = ("index", "finish_reason", *sorted(top_keys(CHOICE, GENERATE) - set(_TRANSPORTS)))




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


# How to get records that name ids (vLLM's generate endpoint).
_ASK_FOR_IDS = ('request output_mode "tokens" (the generate endpoint\'s default), or start vLLM with '
                "--return-tokens-as-token-ids")


def _support_fault(ids: np.ndarray, rows: Ragged, token: int) -> str:
    """What is wrong with the kept set of ``token``, for the message."""
    support = rows[token].tolist()
    shown = support if len(support) <= 8 else [*support[:8], "..."]
    if not support:
        return f"row {token} is empty"
    if len(set(support)) != len(support):
        return f"row {token} {shown} repeats an id"
    return f"row {token} {shown} does not hold the sampled id {int(ids[token])}"


def _decoded_text(c: Evidence, choice: dict[str, Any], index: int) -> str | None:
    """The decoded text record ``index`` of ``logprobs.content`` carries in place of an id
    (no ``token_id``, a ``token`` that is not ``"token_id:N"``), or None. Read on the error
    path only, from the records as sent (the compiled extractor blanked them in the parsed
    copy)."""
    entry = full_at(c, choice["logprobs"]["content"], c.logprobs_content.span)[index]
    token = entry.get("token") if isinstance(entry, dict) and "token_id" not in entry else None
    return token if isinstance(token, str) and not token.startswith("token_id:") else None


def _token_message(c: Evidence, choice: dict[str, Any], index: int, ids: np.ndarray) -> str:
    """Record ``index`` names another token than ``ids[index]``; when it carries decoded text
    instead of an id, the message says so and how to ask for ids. (An error of renderers'
    type, the renderers drop-in's, keeps renderers' own message.)"""
    message = _native_message(_NATIVE_SAMPLED, "token", index, ids)
    text = _decoded_text(c, choice, index) if c.error is MalformedResponseError else None
    if text is None:
        return message
    shown = repr(text if len(text) <= 32 else text[:32] + "...")
    return (f"{message} The record carries decoded text ({shown}), not a token id, and the response "
            'does not say output_mode "text" (which aligns records with token_ids by position): '
            f"to get ids, {_ASK_FOR_IDS}.")


def parse_native_logprobs(
    choice: dict[str, Any], ids: np.ndarray, c: Evidence, want_top: bool = False
) -> tuple[np.ndarray, NativeEntries | None]:
    """The sampled logprobs from native records; with ``want_top`` the same read also
    collects the head candidates, for :func:`parse_native_heads`."""
    field = "logprobs.content"
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        reason = "Engine response choice.logprobs must be an object."
        if logprobs is None:
            reason = explained(c, reason, (
                "the choice carries no sampled-token logprobs (logprobs, completion_logprobs and "
                "compact_logprobs absent or null): set `sampling_params.logprobs` in the request (0 "
                "for the sampled token's alone, k + 2 with a head of k), or "
                "`sampling_params.extra_args.prl_compact_logprobs: true` (prime-rl) for compact rows; "
                "tokenwire.generate_request_params() sets them; or parse with require_logprobs=False"))
        c.fail(reason, "logprobs")
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
        if code == "token":
            c.fail(_token_message(c, choice, index, ids), field, index)
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
    rows, unchecked = sampling_mask_unchecked(choice, ids, c, handle)
    if unchecked is not None:
        _check_supports(c, ids, cast(Ragged, rows), unchecked)
    return rows


def sampling_mask_unchecked(choice: dict[str, Any], ids: np.ndarray, c: Evidence,
                            handle: Ragged | None = None) -> tuple[Ragged | None, str | None]:
    """:func:`parse_sampling_mask` but for the support rule (``first_bad_support``), left to
    the caller when the second item (the mask's field, to fail at) is not None: the rows are
    read and their form checked, no more (compact heads check the supports in the rows'
    pass: ``checked_supports_compact_heads``)."""
    if handle is not None:
        return handle, None
    field = _mask_field(choice)
    if field is None:
        return None, None
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
    elif isinstance(mask, list) and not bare:
        rows, count, bad_row = c.sampling_mask
        if count != len(ids):
            c.fail("Sampling mask token count mismatch", field)
    elif bare:  # no list form: the ids and counts are base64 strings
        c.fail("kept_tokens must be an object {ids, counts} of base64 int32 strings", field)
    else:
        c.fail("Sampling mask token count mismatch", field)
    if bad_row is not None:  # a malformed list row: the supports before it now, then that row
        return _check_supports(c, ids, rows, field, bad_row), None
    return rows, field


def _check_supports(c: Evidence, ids: np.ndarray, rows: Ragged, field: str, bad_row: int | None = None) -> Ragged:
    """``rows`` when each is a valid support of its token, else the first that is not (or
    ``bad_row``, a malformed row, when every row before it is valid) fails at ``field``."""
    limit = len(ids) if bad_row is None else bad_row
    # An empty row (a zero count) is a token without a recorded support, in every form: prime-rl
    # sends vLLM's packed mask with zero counts for positions without replay (and by handle, a
    # row of padding only).
    _fail_support(c, ids, rows, field, c.kernels.first_bad_support(ids, rows, limit, absent_ok=True))
    if bad_row is not None:
        c.fail("Invalid recorded sampling support", field, bad_row)
    return rows


def _fail_support(c: Evidence, ids: np.ndarray, rows: Ragged, field: str, bad: int) -> None:
    """Fail at token ``bad``, whose support row breaks the support rule, unless it is -1."""
    if bad >= 0:
        c.fail(explained(c, "Invalid recorded sampling support", _support_fault(ids, rows, bad)), field, bad)


def mask_logprob_values(c: Evidence, rows: Any, mask: Ragged, field: str, marker: float | None = None) -> np.ndarray:
    """The values of logprob rows aligned with the sampling mask ``mask``: a list of one row
    per mask row, each a list of one logprob per kept id (an absent row: an empty list), the
    sampler's logprob renormalized over its row. Every value is a finite number at most 1e-6,
    and each row's probabilities sum to 1 within 1e-4 (the head rule's tolerance), but a row
    whose every value is ``marker`` (a server's "not captured" row). Returns them flat, in
    the mask's order, as float64; a broken rule fails at ``field``, its row as the token."""
    lengths = mask.lengths()
    name = field.split(".")[-1]
    if not isinstance(rows, list) or len(rows) != len(lengths):
        c.fail(f"{name} must be a list of {len(lengths)} rows, one per sampling mask row", field)
    for t, (row, width) in enumerate(zip(rows, lengths.tolist())):
        if not isinstance(row, list) or len(row) != width:
            c.fail(f"{name} row must be a list of {width} logprobs, one per id of its sampling mask row", field, t)
    values, bad = numbers(list(chain.from_iterable(rows)))
    faults = np.flatnonzero(~np.isfinite(values) | (values > 1e-6))
    at = int(faults[0]) if len(faults) else bad
    if at is not None:
        t = int(np.searchsorted(mask.offsets, at, side="right")) - 1
        value = values[at] if at < len(values) else None
        reason = ("must be a number" if value is None else "must be finite" if not math.isfinite(value)
                  else f"cannot be positive ({float(value)!r})")
        c.fail(f"support logprob {reason}", field, t)
    # Row sums over row indices (an absent row holds nothing and is not checked).
    row_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    mass = np.bincount(row_of, weights=np.exp(values), minlength=len(lengths))
    checked = lengths > 0
    if marker is not None:
        unmarked = np.bincount(row_of, weights=values != marker, minlength=len(lengths))
        checked &= unmarked > 0
    off = np.flatnonzero(checked & (np.abs(mass - 1.0) > 1e-4))
    if len(off):
        t = int(off[0])
        unless = "" if marker is None else f", or be {marker!r} throughout (a row the server did not capture)"
        c.fail(f"support logprobs must normalize over their sampling mask row (probabilities sum to "
               f"{float(mass[t])!r}){unless}", field, t)
    return values


def parse_mask_logprobs(choice: dict[str, Any], mask: Ragged | None, held: Ragged | None,
                        c: Evidence) -> Ragged | None:
    """prime-rl's ``sampling_mask_logprobs`` (``enable_return_sampling_mask_logprobs``): the
    sampler's logprob of every kept id, renormalized over the kept set (log_softmax of the
    processed logits), rows aligned with ``sampling_mask``; a row wider than the server's
    capture buffer is -9999 throughout. Returned as float32 rows sharing the mask's offsets;
    without them, ``held``: the rows read by handle."""
    rows = choice.get(KEY.sampling_mask_logprobs)
    if rows is None:
        return held
    field = KEY.sampling_mask_logprobs  # never beside a by-handle segment of it (parse_payload)
    if mask is None:
        c.fail("sampling_mask_logprobs needs the sampling_mask its rows are aligned with", field)
    values = mask_logprob_values(c, rows, cast(Ragged, mask), field, VLLM_LOGPROB_SENTINEL)
    return Ragged(cast(Ragged, mask).offsets, values.astype(np.float32))


def _mask_field(choice: dict[str, Any]) -> str | None:
    """The field the supports are read from (``sampling_mask`` before ``kept_tokens``), or
    None."""
    if choice.get(KEY.sampling_mask) is not None:
        return KEY.sampling_mask
    return KEY.kept_tokens if choice.get(KEY.kept_tokens) is not None else None


def _fail_head(c: Evidence, choice: dict[str, Any], field: str, bad: tuple[int, str], supports: Ragged | None,
               k: int | None = None, candidates: np.ndarray | None = None):
    """Report the head rule ``bad`` broke. A kept set with an id the head has no candidate
    logprob for is located at ``kept_tokens`` and says what to request; too few candidates
    name the k + 2 rule."""
    token, reason = bad
    if reason == HEAD_TOO_FEW and k is not None:
        reason = explained(c, reason, (
            f"a head of top_k={k} needs k + 2 = {k + 2} candidates for every token without a "
            f"recorded sampling support (one beyond the k-th to see a tie, and the sampled "
            f"token's own), and token {token} has fewer: request {k + 2} top logprobs "
            f"(`sampling_params.logprobs: {k + 2}`; tokenwire.generate_request_params(params, "
            f"top_k={k}) sets it)"))
    elif reason == HEAD_MISSING_SUPPORT and supports is not None and _mask_field(choice) == KEY.sampling_mask:
        kept = supports[token].tolist()
        shown = kept if len(kept) <= 8 else [*kept[:8], "..."]
        lacking = "some of them"
        if candidates is not None:
            sent = set(candidates.tolist())
            lacking = f"kept id {next((i for i in kept if i not in sent), kept[0])}"
        c.fail(explained(c, reason, (
            f"sampling_mask[{token}] holds {len(kept)} kept ids {shown} and the response has no "
            f"candidate logprob for {lacking}; request at least {len(kept)} top logprobs per "
            "token (vLLM's `logprobs`, with `logprobs_mode` processed_logprobs) or parse without "
            "top_k")), field, token)
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
        n = len(ids)
        if parsed is None:
            detail = f"offsets must be a list of {n + 1} ints (one per completion token, plus one)"
        else:
            rows = parsed[1] - 1
            detail = (f"completion has {n} token ids but {rows} compact logprob rows ({rows - n:+d}): "
                      f"offsets holds {parsed[1]} entries, {n + 1} expected")
        c.fail(explained(c, "Invalid compact logprob offsets", detail), field + ".offsets")
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
    # A bad value (not finite, or above 1e-6: first_bad "compact") is the first error on both
    # branches below; without a head it is looked for in a pass of its own.
    if k is None:
        _compact_values(c, field, offsets, row_values, c.kernels.first_bad("compact", row_values))
        # Without a head the rows' own errors come first (renderers never looks at the mask
        # then); with one, the support decides the head, so it is checked before the rows.
        sampled, bad = c.kernels.compact_rows(ids, row_ids, row_values, offsets)
        if bad is not None:
            c.fail(bad[1], field, bad[0])
        return sampled, None, None, parse_sampling_mask(choice, ids, c, handle)
    # With a head the values are checked in the rows' pass (checked_compact_heads), and so is
    # the support rule of an inline mask (checked_supports_compact_heads): the values' rule
    # first, then the supports', then the rows' and heads'. A mask whose form fails defers to
    # a bad value, whose rule comes first.
    try:
        supports, unchecked = sampling_mask_unchecked(choice, ids, c, handle)
    except Exception:
        _compact_values(c, field, offsets, row_values, c.kernels.first_bad("compact", row_values))
        raise
    # Rows are checked in order, a row's own rules before its head: a head error in an
    # earlier row comes first, then the row error.
    support_bad = -1
    if unchecked is None:
        value_bad, sampled, top_ids, top_logprobs, bad, head_bad = c.kernels.checked_compact_heads(
            ids, row_ids, row_values, offsets, num_top, k, supports
        )
    else:
        value_bad, support_bad, sampled, top_ids, top_logprobs, bad, head_bad = (
            c.kernels.checked_supports_compact_heads(ids, row_ids, row_values, offsets, num_top, k, supports))
    _compact_values(c, field, offsets, row_values, value_bad)
    if unchecked is not None:
        _fail_support(c, ids, cast(Ragged, supports), unchecked, support_bad)
    if head_bad is not None:
        t = head_bad[0]
        _fail_head(c, choice, field, head_bad, supports, k, row_ids[offsets[t]:offsets[t + 1]])
    if bad is not None:
        c.fail(bad[1], field, bad[0])
    assert sampled is not None  # with the heads, when nothing failed
    return sampled, top_ids, top_logprobs, supports


def _compact_values(c: Evidence, field: str, offsets: np.ndarray, row_values: np.ndarray, bad: int) -> None:
    """Fail at entry ``bad`` of the compact rows' values (a NaN, an infinity or a value above
    1e-6) unless it is -1."""
    if bad < 0:
        return
    row = int(np.searchsorted(offsets, bad, side="right")) - 1
    value = float(row_values[bad])
    what = "NaN" if value != value else "infinite" if abs(value) == float("inf") else "positive"
    c.fail(explained(c, "Invalid compact logprob values", (
        f"value {bad - int(offsets[row])} of row {row} (entry {bad}) is {value!r}: {what}, "
        "not a log probability (finite, at most 1e-6; -9999 for a filtered-out candidate)")),
        field, row)


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
        _fail_head(c, choice, field, head_bad, supports, k)
    if entries.top_err is not None:
        index, code = entries.top_err
        message = _native_message(NATIVE_TOP, code, index, ids)
        if code == "top_no_id" and c.by_position:
            message += (': the response is output_mode "text", whose candidates carry decoded text, and a '
                        f"head needs token ids: {_ASK_FOR_IDS}, which names every candidate by id")
        c.fail(message, field, index)
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
        _fail_head(c, choice, _TOP_K, head_bad, supports, k)
    return top_ids, top_logprobs, supports


# --- weight versions -----------------------------------------------------------------------------


def parse_weight_versions(value: Any, n: int, c: Evidence, field: str = "weight_versions"
                          ) -> tuple[tuple[str, int, int], ...]:
    """Which weights sampled which output tokens: ``[{"version", "start", "end"}, ...]``, the
    half-open spans ``[start, end)`` over the ``n`` output-token indexes (vLLM's
    ``choices[].weight_versions``, SGLang's ``meta_info.weight_versions``). The spans are in
    order and cover the output exactly: the first starts at 0, each starts where the one
    before it ended, none is empty, the last ends at ``n``. An empty completion has no span
    (vLLM: ``[]``) or one empty span ``[0, 0)`` (SGLang). ``version`` is the label the
    trainer gave the weights, a string; ``start`` and ``end`` are ints. A broken rule fails
    at ``field``, its ``token`` the span's index in the list."""
    what = "a list of {version, start, end} spans"
    if not isinstance(value, list):
        c.fail(f"{field} must be {what}, not {type(value).__name__}", field)
    empty_ok = n == 0 and len(value) == 1  # SGLang's span of an empty completion: [0, 0)
    spans = []
    end = 0  # where the spans so far end
    for index, span in enumerate(value):
        if not isinstance(span, dict):
            c.fail(f"{field} must be {what}: span {index} is {type(span).__name__}", field, index)
        version = span.get("version")
        if not isinstance(version, str):
            c.fail(f"{field} span {index}: version must be a string (the weights' label), not "
                   f"{type(version).__name__}", field, index)
        bounds = span.get("start"), span.get("end")
        for name, bound in zip(("start", "end"), bounds):
            if not is_int(bound):
                c.fail(f"{field} span {index}: {name} must be an int (an output-token index), not "
                       f"{type(bound).__name__}", field, index)
        start, stop = cast(tuple[int, int], bounds)
        if start != end:
            if index == 0:
                reason = f"the first span must start at output token 0, not {start}"
            elif start > end:
                reason = f"a gap: span {index} starts at {start} but span {index - 1} ends at {end}"
            else:
                reason = f"an overlap: span {index} starts at {start} but span {index - 1} ends at {end}"
            c.fail(f"{field} must cover the output tokens in order without gaps or overlaps: {reason}",
                   field, index)
        if stop < start or (stop == start and not empty_ok):
            c.fail(f"{field} span {index} [{start}, {stop}) is empty or reversed: each span "
                   "must hold at least one output token", field, index)
        if stop > n:
            c.fail(f"{field} span {index} [{start}, {stop}) ends past the {n} output tokens", field, index)
        spans.append((version, start, stop))
        end = stop
    if end != n:
        covered = f"its spans end at output token {end}" if spans else "it holds no span"
        c.fail(f"{field} must cover all {n} output tokens: {covered}", field)
    return tuple(spans)


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
    if c.token_ids is None and choice.get("token_ids") is None:
        c.fail(explained(c, "token_ids must hold token ids in [0, 2**32)",
                         "token_ids is missing (or null) from the choice: vLLM's /inference/v1/generate "
                         "always sends the completion's ids there; is this the body of another endpoint?"),
               "token_ids")
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
        if top_k_block(choice) is not None:  # validated as beside any other transport (heads: the rows')
            parse_packed_top_k(top_k_block(choice), ids, c)
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
    spans = choice.get(KEY.weight_versions)
    return GenerateChoice(
        index=cast(int, c.index),  # a choice's evidence (None: the top level's)
        completion_ids=ids,
        completion_logprobs=logprobs,
        completion_top_ids=top_ids,
        completion_top_logprobs=top_logprobs,
        sampling_mask=mask,
        routed_experts=(parse_routed_experts(routed, c, num_experts, len(ids), prompt_len) if routed is not None
                        else handle.get("routed_experts")),
        finish_reason=choice.get("finish_reason"),
        raw=_raw(c, choice, consumed),
        sampling_mask_present=None if mask is None else mask.offsets[1:] != mask.offsets[:-1],
        payload=segments,
        sampling_mask_logprobs=parse_mask_logprobs(choice, mask, handle.get("sampling_mask_logprobs"), c),
        routed_expert_weights=handle.get("routed_expert_weights"),
        weight_versions=None if spans is None else parse_weight_versions(spans, len(ids), c),
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
                   num_experts: int | None = None, prompt_tokens: int | None = None) -> GenerateResponse:
    """Validate a parsed response. ``evidence(index, value)`` gives the :class:`Evidence` of
    each choice (index None: the top level, value the document); by default
    :func:`extract_choice` reads it from the parsed document, one choice at a time, as the
    rules reach it. With ``payload_root`` (a checked path), by-handle segments are read from
    files under it."""
    if not isinstance(document, dict):
        raise MalformedResponseError("response must be a JSON object")
    by_position = records_by_position(document)
    read = evidence or (lambda index, value: extract_choice(index, value, k, by_position))
    prompt = document.get(KEY.prompt_token_ids)
    teacher = document.get(KEY.prompt_token_id_logprobs)
    top = read(None, document) if prompt is not None or teacher is not None else None
    if prompt is not None:
        prompt = checked_int_list(top, top.prompt_token_ids, "prompt_token_ids",
                                  "prompt_token_ids must hold token ids in [0, 2**32)")
    if teacher is not None:
        teacher = parse_teacher_scores(top, prompt, prompt_logprob_start, teacher_logits)
    choices = document.get(KEY.choices)
    if not isinstance(choices, list) or not choices:
        raise MalformedResponseError("choices must be a non-empty list", field="choices")
    prompt_len = given_prompt_length(document, prompt, prompt_tokens)
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
        return response_of(document, parsed, prompt, "request_id", format="generate", top_k=k)
    return response_of(document, parsed, prompt, "request_id", (KEY.prompt_token_id_logprobs,),
                       prompt_token_id_logprobs=teacher, format="generate", top_k=k)


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
    num_experts: int | None = None, prompt_tokens: int | None = None,
) -> GenerateResponse:
    """Parse and validate a ``/inference/v1/generate`` response (see the package docs)."""
    k = check_top_k(top_k)
    start = check_start(prompt_logprob_start)
    root = check_payload_root(payload_root)
    experts = check_num_experts(num_experts)
    prompt_count = check_prompt_tokens(prompt_tokens)
    return parse_document(load_document(raw), k, require_logprobs, require_sampling_mask=require_sampling_mask,
                          prompt_logprob_start=start, teacher_logits=bool(teacher_logits), payload_root=root,
                          num_experts=experts, prompt_tokens=prompt_count)
