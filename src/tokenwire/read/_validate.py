"""Evidence handed over in process: ``validate`` for arrays (lists, numpy or torch), and the
adapters that read an engine's own output objects (vLLM's ``RequestOutput`` and
``CompletionOutput``, SGLang's ``meta_info`` dicts) without importing the engine.

No rule is written here. The arrays are laid out as the generate endpoint's binary fields
(packed logprobs, a packed sampling mask, routing rows, vLLM's compact rows) and
handed, as an evidence record, to the generate parser's own rules
(``rules.generate._parse_choice``) with the kernels of the implementation in use; SGLang's
``meta_info`` goes to the SGLang parser's rules as it is. A broken rule raises the parsers'
``MalformedResponseError`` with the parsers' reason, its ``field`` the keyword (or the
engine's attribute) that carried the evidence.
"""

from __future__ import annotations

import math
from itertools import chain
from operator import attrgetter
from typing import Any, NoReturn

import numpy as np

from . import _select
from ..base._args import INT64_MAX, check_num_experts, check_top_k, int_arg, int_array, real_array
from ..base._errors import MalformedResponseError
from ..base._table import KEY, SGLANG
from ..base._types import GenerateChoice, GenerateResponse, Ragged, RoutedExperts
from ..base._wire import COMPACT_FORMAT, MAX_TOKEN_ID, VLLM_LOGPROB_SENTINEL
from ..extract.python import Evidence, LazyEvidence, Read
from ..kernels.python import Candidates, NativeEntries
from ..rules.arrays import check_experts, check_rows, routed_rows
from ..rules.generate import _parse_choice, checked_int_list
from ..rules.openai import _parse_sglang_item, sglang_routing

__all__ = ["validate", "validate_sglang_meta_info", "validate_vllm_output"]


class _Given(Evidence):
    """The evidence record of arrays handed over in process: filled here, not by an
    extractor, and failing at the caller's names for the fields (``names`` maps a rule's
    wire field, or its first part, to the name the caller gave it)."""

    __slots__ = ("names",)

    def __init__(self, index: int, names: dict[str, str]) -> None:
        super().__init__(index, _select.kernels)
        self.names = names

    def fail(self, reason: str, field: str | None = None, token: int | None = None) -> NoReturn:
        if field is not None:
            field = self.names.get(field) or self.names.get(field.split(".")[0], field.split(".")[0])
        raise self.error(reason, choice=self.index, field=field, token=token)


# How validate's keywords name the wire fields the rules read.
_KEYWORDS = {
    "token_ids": "completion_ids",
    "logprobs": "completion_logprobs",
    "logprobs.content": "completion_top_logprobs",
    "kept_tokens": "sampling_mask",
}
# The rules ask for these; validate hands over nothing of the kind (absent).
_ABSENT = ("compact_offsets", "compact_data", "kept_ids", "kept_counts", "routed_experts", "top_k_ids",
           "top_k_logprobs", "logprobs_sampled")


# --- arrays in: lists, numpy, torch -------------------------------------------------------------


def _array(value: Any) -> Any:
    """A torch tensor as numpy (on the CPU; torch is never imported here: a tensor comes
    with it loaded); anything else as it is."""
    if type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach"):
        tensor = value.detach()
        if str(getattr(tensor, "dtype", "")) in ("torch.bfloat16", "torch.float16"):
            tensor = tensor.float()
        return tensor.cpu().numpy()
    return value


def _ids(value: Any, name: str) -> tuple[np.ndarray, int, int | None]:
    """Token ids as the id rule reads them: ``(values, count, first bad index)``, the values
    int64; a list goes through the parsers' own list reader, an array through the range
    kernel (an id is in ``[0, 2**32)``)."""
    value = _array(value)
    if isinstance(value, list):
        read = _select.kernels.int_list(value, MAX_TOKEN_ID)
        assert read is not None
        return read
    if isinstance(value, (tuple, range)) or type(value).__name__ == "array":  # array.array
        return _ids(list(value), name)
    # A private copy first: the range kernel (without the GIL) and the result read it, so
    # another thread writing the caller's array cannot change a checked id.
    array = np.array(value, order="C")
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, not {array.ndim}-D")
    if array.dtype.kind not in "iu" and array.size:
        raise TypeError(f"{name} must hold integers, not {array.dtype}")
    bad = _select.kernels.first_out_of_range(array, MAX_TOKEN_ID + 1) if array.size else -1
    if bad >= 0:
        return array[:bad].astype(np.int64), len(array), bad
    return array.astype(np.int64, copy=False), len(array), None


def _floats(value: Any, name: str) -> np.ndarray:
    """Logprobs as float32 (kept) or float64, a private C-contiguous copy."""
    value = _array(value)
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return real_array(value, name, np.float32)
    return real_array(value, name, np.float64)


def _bytes(array: np.ndarray) -> np.ndarray:
    """An array's bytes as the decoded base64 of a wire field (uint8, little-endian values)."""
    array = np.ascontiguousarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array.reshape(-1).view(np.uint8)


def _rows(value: Any, name: str, dtype: Any) -> Ragged:
    """Rows per token: a Ragged, a 2-D array (every row full), or a sequence of rows."""
    value = _array(value)
    if isinstance(value, Ragged):
        offsets = int_array(value.offsets, f"{name}.offsets", np.int64, 0, INT64_MAX)
        values = np.array(_array(value.values))
        if len(offsets) == 0 or offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] != len(values):
            raise ValueError(f"{name}'s offsets must start at 0, never decrease and end at its values' length")
    elif isinstance(value, np.ndarray) and value.ndim == 2:
        offsets = np.arange(value.shape[0] + 1, dtype=np.int64) * value.shape[1]
        values = value.reshape(-1)
    else:
        rows = [np.asarray(_array(row)) for row in value]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([row.size for row in rows], out=offsets[1:])
        filled = [row.reshape(-1) for row in rows if row.size]  # an empty list reads as float64
        values = np.concatenate(filled) if filled else np.zeros(0, dtype=dtype)
        if any(row.ndim != 1 for row in filled):
            raise ValueError(f"{name}'s rows must be 1-D")
    if np.dtype(dtype).kind == "f":
        return Ragged(offsets, real_array(values, name, dtype, flat=True))
    array = np.array(values, order="C").reshape(-1)
    if array.dtype.kind not in "iu" and array.size:
        raise TypeError(f"{name} must hold integers, not {array.dtype}")
    if array.size and (array.min() < np.iinfo(dtype).min or array.max() > np.iinfo(dtype).max):
        raise ValueError(f"{name} must hold integers in [{np.iinfo(dtype).min}, {np.iinfo(dtype).max}]")
    return Ragged(offsets, array.astype(dtype))


# --- the native candidates' rule over arrays ---------------------------------------------------


def _native_entries(sampled: np.ndarray, ids: Ragged, logprobs: Ragged) -> NativeEntries:
    """Head candidates as the native records' reader gives them (``native_head``'s rule over
    arrays): per row, every candidate names an id in ``[0, 2**32)``, carries a finite logprob
    at most 1e-6 and no id twice; an empty row has no candidates. The first row that breaks
    it and its code, as ``NativeEntries.top_err``. A ``-inf`` candidate (the in-process value
    of one the sampler filtered out, which the JSON clamps to the sentinel) is the sentinel."""
    if not np.array_equal(ids.offsets, logprobs.offsets):
        raise ValueError("completion_top_ids and completion_top_logprobs must have the same rows")
    offsets, cand, values = ids.offsets, ids.values.astype(np.int64), logprobs.values.astype(np.float64)
    values = np.where(values == -np.inf, VLLM_LOGPROB_SENTINEL, values)
    rows = len(offsets) - 1
    row_of = np.repeat(np.arange(rows, dtype=np.int64), np.diff(offsets))
    order = np.lexsort((cand, row_of))
    later = np.zeros(len(cand), dtype=bool)  # a repeat of an id earlier in its row
    same = (np.diff(cand[order]) == 0) & (np.diff(row_of[order]) == 0)
    later[order[1:][same]] = True  # lexsort is stable: the first in row order stays unmarked
    codes = np.select([(cand < 0) | (cand > MAX_TOKEN_ID), ~np.isfinite(values), values > 1e-6, later],
                      [1, 2, 3, 4], 0)
    bad = np.flatnonzero(codes)
    empty = np.flatnonzero(np.diff(offsets) == 0)
    top_err = None
    at = int(row_of[bad[0]]) if len(bad) else rows
    if len(empty) and int(empty[0]) < at:
        top_err = (int(empty[0]), "missing_top")
    elif len(bad):
        top_err = (at, ("top_no_id", "top_not_finite", "top_positive", "top_duplicate")[codes[bad[0]] - 1])
    candidates = Candidates(offsets, np.where(codes == 1, 0, cand), values)
    return NativeEntries(sampled, None, candidates, sampled, top_err)


# --- validate ------------------------------------------------------------------------------------


def _check_choice(c: _Given, *, ids: tuple[np.ndarray, int, int | None], logprobs: np.ndarray | None = None,
                  compact: tuple[np.ndarray, np.ndarray, np.ndarray, int] | None = None,
                  candidates: tuple[Ragged, Ragged] | None = None, top_k: int | None = None,
                  sampling_mask: Ragged | None = None, routed_experts: Any = None, start: int | None = None,
                  prompt: np.ndarray | None = None, num_experts: int | None = None, weight_versions: Any = None,
                  require_logprobs: bool = True, require_sampling_mask: bool = False,
                  finish_reason: Any = None) -> GenerateChoice:
    """The generate rules over the arrays given, laid out as a generate choice's fields."""
    choice: dict[str, Any] = {"index": c.index, KEY.token_ids: None, "finish_reason": finish_reason}
    c.token_ids = ids
    for name in _ABSENT:
        setattr(c, name, None)
    n = ids[1]
    checked_int_list(c, ids, KEY.token_ids, "token_ids must hold token ids in [0, 2**32)")
    if compact is not None:
        offsets, row_ids, row_values, num_top = compact
        choice[KEY.compact_logprobs] = {"format": COMPACT_FORMAT, "num_top_logprobs": num_top}
        c.compact_offsets = (offsets, len(offsets), None)
        c.compact_data = np.concatenate([_bytes(row_ids.astype("<u4")), _bytes(row_values.astype("<f4"))])
    if logprobs is not None:
        choice[KEY.completion_logprobs] = {"dtype": logprobs.dtype.name, "shape": [len(logprobs)]}
        c.completion_data = _bytes(logprobs)
    if candidates is not None:
        choice[KEY.logprobs] = {"content": []}
        sampled = np.zeros(0) if logprobs is None else logprobs.astype(np.float64)
        c.logprobs_content = Read(len(candidates[0]), entries=_native_entries(sampled, *candidates))
    if sampling_mask is not None:
        counts = np.diff(sampling_mask.offsets).astype("<i4")
        values = sampling_mask.values.astype("<i4")
        choice[KEY.sampling_mask] = {"ids": {"dtype": "int32", "shape": [len(values)]},
                                     "counts": {"dtype": "int32", "shape": [len(counts)]}}
        c.sampling_mask_ids, c.sampling_mask_counts = _bytes(values), _bytes(counts)
    else:
        c.sampling_mask_ids = c.sampling_mask_counts = None
    routing = None
    if routed_experts is not None:
        routing = np.array(_array(routed_experts), order="C")  # private: the result keeps it
        if routing.dtype.kind not in "iu":
            raise TypeError(f"routed_experts must hold integers, not {routing.dtype}")
        if routing.dtype.name not in ("uint8", "uint16", "int16", "int32"):
            if routing.ndim and routing.shape[0]:
                check_experts(routing.reshape(routing.shape[0], -1), num_experts, c, "routed_experts")
            routing = routing.astype(np.int32)
        choice[KEY.routed_experts] = {"dtype": routing.dtype.name, "shape": list(routing.shape), "start": start}
        c.routed_experts_data = _bytes(routing)
    if weight_versions is not None:
        choice[KEY.weight_versions] = [
            {"version": span[0], "start": span[1], "end": span[2]} if isinstance(span, tuple) and len(span) == 3
            else span for span in weight_versions]
    if logprobs is None and compact is None and require_logprobs:
        c.fail("no sampled-token logprobs were given and require_logprobs is set", "logprobs")
    if candidates is not None and logprobs is None:
        c.fail("Missing requested top logprobs: the heads need the sampled logprobs beside them", "logprobs")
    if top_k is not None and candidates is None and compact is None:
        c.fail("Missing requested top logprobs: top_k without candidates", "logprobs.content")
    result = _parse_choice(c, choice, top_k, False, require_sampling_mask, num_experts=num_experts)
    if result.routed_experts is not None and prompt is not None:
        rows, counted = routed_rows(n, len(prompt), start=start or 0)
        check_rows(c, result.routed_experts.array, "routed_experts", rows, counted)
    result.raw = {}
    result.prompt_token_ids = prompt
    return result


def _prompt(value: Any, name: str = "prompt_token_ids") -> np.ndarray | None:
    """Prompt ids under the id rule (a top-level field: no choice in the location)."""
    if value is None:
        return None
    values, _, bad = _ids(value, name)
    if bad is not None:
        raise MalformedResponseError("prompt_token_ids must hold token ids in [0, 2**32)", field=name, token=bad)
    return values


def validate(
    *, completion_ids: Any, completion_logprobs: Any = None, completion_top_ids: Any = None,
    completion_top_logprobs: Any = None, top_k: int | None = None, sampling_mask: Any = None,
    routed_experts: Any = None, routed_experts_start: int | None = None, prompt_token_ids: Any = None,
    num_experts: int | None = None, weight_versions: Any = None, finish_reason: Any = None, index: int = 0,
    require_logprobs: bool = True, require_sampling_mask: bool = False,
) -> GenerateChoice:
    """Validate the evidence of one completion handed over in process, under the parsers'
    rules, and return it as the parsers' :class:`GenerateChoice`.

    Every array may be a list, a numpy array or a torch tensor (read on the CPU; torch is
    not imported unless a tensor is given).

    Args:
        completion_ids: the sampled token ids, each in ``[0, 2**32)``.
        completion_logprobs: each sampled token's logprob (float32 kept, anything else read as
            float64): one per token, finite, not vLLM's ``-9999`` sentinel. Required unless
            ``require_logprobs=False``.
        completion_top_ids, completion_top_logprobs: each token's head candidates, as
            :class:`Ragged` rows, 2-D ``(n, K)`` arrays or sequences of rows: ids in
            ``[0, 2**32)`` and no id twice in a row, logprobs finite and at most 1e-6 (``-inf``,
            a candidate the sampler filtered out, is dropped as the JSON's ``-9999`` is).
            Read with ``top_k``: the head of each token is selected with the parsers' rule
            (``top_k + 2`` candidates per token, the sampled one's logprob agreeing).
        top_k: the head width asked for (needs the candidates).
        sampling_mask: each token's kept set (int rows as above); an empty row is a token
            without a recorded set. With ``top_k`` the head is exactly the set.
        routed_experts: MoE routing rows ``(rows, layers, topk)`` of integers (or a
            :class:`RoutedExperts`, its ``start`` with them), every expert id
            not negative and below ``num_experts`` when given; with ``prompt_token_ids``, one
            row per prompt and completion token but the last, from ``routed_experts_start``.
        routed_experts_start: the position of the first routing row (delta replay; SGLang's
            ``routed_experts_start_len``); returned as ``routed_experts.start``.
        prompt_token_ids: the prompt's ids (checked; returned as the choice's
            ``prompt_token_ids``).
        num_experts: the model's count of routed experts.
        weight_versions: ``[{"version", "start", "end"}, ...]`` spans (or ``(version, start,
            end)`` tuples) covering the completion.
        finish_reason, index: returned as given.
        require_logprobs, require_sampling_mask: as the parsers' options.

    Raises:
        MalformedResponseError: the first broken rule, in the parsers' order, with their
            reason; ``field`` is the keyword that carried the evidence, ``token`` the token
            (``choice`` is ``index``; a prompt id's error has no choice, as the parsers').
        ValueError, TypeError: arguments that are not arrays of the kind named, or rows that
            do not fit together (the ids and logprobs of the candidates).

    Example:
        >>> choice = tokenwire.validate(completion_ids=[5, 7], completion_logprobs=[-0.5, -1.25])
        >>> choice.completion_ids.tolist(), choice.completion_logprobs.tolist()
        ([5, 7], [-0.5, -1.25])
        >>> try:
        ...     tokenwire.validate(completion_ids=[5, 7], completion_logprobs=[-0.5, float("nan")])
        ... except tokenwire.MalformedResponseError as exc:
        ...     print(exc.choice, exc.field, exc.token)
        0 completion_logprobs 1
    """
    k = check_top_k(top_k)
    experts = check_num_experts(num_experts)
    index = int_arg(index, "index", 0)
    if isinstance(routed_experts, RoutedExperts):  # a parsed choice's: its rows and start
        routed_experts, routed_experts_start = routed_experts.array, (
            routed_experts.start if routed_experts_start is None else routed_experts_start)
    start = None if routed_experts_start is None else int_arg(routed_experts_start, "routed_experts_start", 0)
    if (completion_top_ids is None) != (completion_top_logprobs is None):
        raise ValueError("completion_top_ids and completion_top_logprobs go together")
    if completion_top_ids is not None and k is None:
        raise ValueError("completion_top_ids are head candidates: give top_k, the head width to select")
    candidates = None if completion_top_ids is None else (
        _rows(completion_top_ids, "completion_top_ids", np.int64),
        _rows(completion_top_logprobs, "completion_top_logprobs", np.float64))
    mask = None if sampling_mask is None else _rows(sampling_mask, "sampling_mask", np.int32)
    c = _Given(index, _KEYWORDS)
    ids = _ids(completion_ids, "completion_ids")
    prompt = _prompt(prompt_token_ids)
    return _check_choice(
        c, ids=ids, logprobs=None if completion_logprobs is None else _floats(completion_logprobs,
                                                                               "completion_logprobs"),
        candidates=candidates, top_k=k, sampling_mask=mask, routed_experts=routed_experts, start=start,
        prompt=prompt, num_experts=experts, weight_versions=weight_versions, require_logprobs=require_logprobs,
        require_sampling_mask=bool(require_sampling_mask), finish_reason=finish_reason)


# --- vLLM: RequestOutput / CompletionOutput -----------------------------------------------------

_LOGPROB = attrgetter("logprob")  # vLLM's Logprob.logprob
# How vLLM's CompletionOutput names the fields (its attributes).
_VLLM_NAMES = {"compact_logprobs": "logprobs", "completion_logprobs": "logprobs", "logprobs.content": "logprobs",
               "kept_tokens": "sampling_mask"}


def _dict_rows(rows: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One ``{token_id: Logprob}`` dict per position as CSR rows (map, chain and attrgetter
    run in C: each object vLLM built is read once, no object is made per position)."""
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)), out=offsets[1:])
    total = int(offsets[-1])
    ids = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=total)
    values = np.fromiter(map(_LOGPROB, chain.from_iterable(map(dict.values, rows))), dtype=np.float64, count=total)
    return offsets, ids, values


def _vllm_rows(logprobs: Any, n: int, c: _Given) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """vLLM's sample logprobs as compact rows: ``(offsets, ids, values)``. Row ``t`` is what
    vLLM recorded for position ``t``, in its order (the sampled token first, then the top
    candidates; ``FlatLogprobs`` may list the sampled id twice). A ``FlatLogprobs`` is read
    from its flat lists; a list holds one ``{token_id: Logprob}`` dict per position."""
    if all(hasattr(logprobs, a) for a in ("start_indices", "end_indices", "token_ids", "logprobs")):
        starts = np.asarray(logprobs.start_indices, dtype=np.int64)
        ends = np.asarray(logprobs.end_indices, dtype=np.int64)
        flat_ids = np.asarray(logprobs.token_ids)
        flat_values = np.asarray(logprobs.logprobs, dtype=np.float64)
        if len(starts) != len(ends) or (len(starts) and (starts.min() < 0 or ends.max() > len(flat_ids)
                                                         or (ends < starts).any())):
            raise ValueError("FlatLogprobs start_indices and end_indices do not index its lists")
        if len(starts) and not (starts[0] == 0 and np.array_equal(starts[1:], ends[:-1])):
            pick = np.concatenate([np.arange(s, e) for s, e in zip(starts.tolist(), ends.tolist())])
            flat_ids, flat_values = flat_ids[pick], flat_values[pick]
            ends = np.cumsum(ends - starts)
        offsets = np.concatenate([[0], ends]).astype(np.int64)
        flat_ids = flat_ids[: offsets[-1]]
        flat_values = flat_values[: offsets[-1]]
    else:
        rows = list(logprobs)
        try:
            offsets, flat_ids, flat_values = _dict_rows(rows)
        except TypeError:  # a position without a dict (None): no candidates there
            offsets, flat_ids, flat_values = _dict_rows([dict(row or {}) for row in rows])
    if len(offsets) - 1 != n:
        c.fail(f"vLLM recorded logprobs for {len(offsets) - 1} positions of a completion of {n} tokens", "logprobs")
    if flat_ids.dtype.kind not in "iu" and flat_ids.size:
        raise TypeError(f"logprobs' token ids must be integers, not {flat_ids.dtype}")
    bad = _select.kernels.first_out_of_range(flat_ids, MAX_TOKEN_ID + 1) if flat_ids.size else -1
    if bad >= 0:
        c.fail("Top logprob must identify a nonnegative token id", "logprobs",
               int(np.searchsorted(offsets, bad, side="right")) - 1)
    return offsets, flat_ids, flat_values


def _vllm_choice(output: Any, prompt: np.ndarray | None, k: int | None, num_logprobs: int | None,
                 require_logprobs: bool, experts: int | None, start: int | None) -> GenerateChoice:
    c = _Given(int_arg(getattr(output, "index", 0), "CompletionOutput.index", 0), _VLLM_NAMES)
    ids = _ids(output.token_ids, "token_ids")
    logprobs = getattr(output, "logprobs", None)
    compact = None
    if logprobs is not None:
        offsets, row_ids, values = _vllm_rows(logprobs, ids[1], c)
        compact = (offsets, row_ids, values.astype(np.float32), -1 if num_logprobs is None else num_logprobs)
    elif require_logprobs:
        c.fail("no logprobs: vLLM records them when the request's SamplingParams set logprobs "
               "(logprobs=0 for the sampled token's alone)", "logprobs")
    if k is not None and compact is None:
        c.fail("Missing requested top logprobs: top_k without logprobs", "logprobs")
    choice = _check_choice(c, ids=ids, compact=compact, top_k=k, routed_experts=getattr(output, "routed_experts", None),
                           start=start, prompt=prompt, num_experts=experts, require_logprobs=require_logprobs,
                           finish_reason=getattr(output, "finish_reason", None))
    cumulative = getattr(output, "cumulative_logprob", None)
    if cumulative is not None and choice.completion_logprobs is not None:
        total = float(np.sum(choice.completion_logprobs, dtype=np.float64))  # pairwise: far inside the tolerance
        if not (isinstance(cumulative, (int, float)) and math.isclose(total, cumulative, rel_tol=1e-6,
                                                                        abs_tol=1e-3)):
            c.fail(f"cumulative_logprob ({cumulative!r}) is not the sum of the sampled tokens' logprobs ({total!r})",
                   "cumulative_logprob")
    return choice


def validate_vllm_output(output: Any, *, top_k: int | None = None, num_logprobs: int | None = None,
                         prompt_token_ids: Any = None, num_experts: int | None = None,
                         routed_experts_start: int | None = None, require_logprobs: bool = True) -> Any:
    """Validate what vLLM's engine returns in process (``LLM.generate``, ``AsyncLLM``), read
    duck-typed (vLLM is never imported).

    ``output`` is a ``RequestOutput`` (``request_id``, ``prompt_token_ids``, ``outputs``):
    the result is a :class:`GenerateResponse` of one choice per ``CompletionOutput``; or one
    ``CompletionOutput`` (``index``, ``token_ids``, ``cumulative_logprob``, ``logprobs``,
    ``routed_experts``, ``finish_reason``): the result is its :class:`GenerateChoice`.

    ``logprobs`` (a list of ``{token_id: Logprob}`` per position, or a ``FlatLogprobs``) are
    read as the compact rows they are (the sampled token first, then the top candidates):
    one row per token, each holding the sampled id, every value finite and at most 1e-6, a
    repeated id with the same value. A missing sampled logprob or a row count that is not
    the token count is an error here, where a trainer's loop would read 0.0 or cut both
    lists to the shorter. ``cumulative_logprob``, when vLLM sends it, is their sum (within
    1e-6 relative, 1e-3 absolute). ``routed_experts`` (``[seq_len, layers, topk]``) are
    checked as ``validate`` checks them, counted against the prompt when it is known.

    Args:
        top_k: select each token's head from the rows' first ``num_logprobs`` distinct ids
            (the compact rows' rule); needs ``num_logprobs``, the request's
            ``SamplingParams.logprobs``.
        prompt_token_ids: the prompt, for a ``CompletionOutput`` (a ``RequestOutput`` has it).
        num_experts, routed_experts_start: as :func:`validate`.

    Errors are located at the ``CompletionOutput``'s attribute (``token_ids``, ``logprobs``,
    ``routed_experts``, ``cumulative_logprob``), ``choice`` its ``index``.
    """
    k = check_top_k(top_k)
    if k is not None and num_logprobs is None:
        raise ValueError("top_k needs num_logprobs: the request's SamplingParams.logprobs, the candidates "
                         "each row holds after the sampled token")
    if num_logprobs is not None:
        num_logprobs = int_arg(num_logprobs, "num_logprobs", -1)
    experts = check_num_experts(num_experts)
    start = None if routed_experts_start is None else int_arg(routed_experts_start, "routed_experts_start", 0)
    if hasattr(output, "outputs"):
        prompt = _prompt(output.prompt_token_ids if prompt_token_ids is None else prompt_token_ids)
        choices = [_vllm_choice(o, prompt, k, num_logprobs, require_logprobs, experts, start) for o in output.outputs]
        if not choices:
            raise MalformedResponseError("RequestOutput.outputs holds no completion", field="outputs")
        return GenerateResponse(choices=choices, request_id=getattr(output, "request_id", None), usage=None,
                                prompt_token_ids=prompt, payload={}, top_k=k)
    return _vllm_choice(output, _prompt(prompt_token_ids), k, num_logprobs, require_logprobs, experts, start)


# --- SGLang: meta_info ---------------------------------------------------------------------------


def _listed(value: Any) -> Any:
    """In-process SGLang builds its triples as tuples (the JSON has lists): as lists."""
    if not isinstance(value, list):
        return value
    return [list(entry) if type(entry) is tuple else [list(e) if type(e) is tuple else e for e in entry]
            if type(entry) is list and entry and type(entry[0]) is tuple else entry for entry in value]


def validate_sglang_meta_info(meta_info: Any, *, output_ids: Any = None, top_k: int | None = None,
                              require_logprobs: bool = True, check_usage: bool = True,
                              num_experts: int | None = None, routed_experts_shape: tuple[int, int] | None = None,
                              routed_experts_start_len: int = 0, index: int = 0) -> GenerateChoice:
    """Validate an SGLang engine's in-process output (``Engine.generate``, verl's and slime's
    ``tokenizer_manager`` calls) under the SGLang parser's rules: ``meta_info`` as the
    ``/generate`` response carries it (``output_token_logprobs`` triples, ``output_top_logprobs``
    rows, ``output_token_sampling_mask``, ``output_token_sampling_logprobs``,
    ``routed_experts``, ``weight_versions``, ``prompt_tokens``/``completion_tokens``), the
    triples as lists or as the tuples SGLang builds them with, ``routed_experts`` as its base64
    string or an int32 array. ``meta_info`` may also be the whole output dict
    (``{"text", "output_ids", "meta_info"}``). ``output_ids`` (the exact ids) are checked against
    the triples' ids. The other arguments are the SGLang parser's. Errors are located at
    ``meta_info.<key>`` (``output_ids``), ``choice`` being ``index``. SGLang is never imported.
    """
    k = check_top_k(top_k)
    routing = sglang_routing(num_experts, routed_experts_shape, routed_experts_start_len)
    index = int_arg(index, "index", 0)
    if isinstance(meta_info, dict) and isinstance(meta_info.get(KEY.meta_info), dict):
        output_ids = meta_info.get(KEY.output_ids) if output_ids is None else output_ids
        meta_info = meta_info[KEY.meta_info]
    if not isinstance(meta_info, dict):
        raise TypeError(f"meta_info must be a dict, not {type(meta_info).__name__}")
    meta = dict(meta_info)
    for key in (KEY.output_token_logprobs, KEY.output_top_logprobs):
        meta[key] = _listed(meta.get(key))
    item: dict[str, Any] = {KEY.meta_info: meta}
    if output_ids is not None:
        output_ids = _array(output_ids)
        item[KEY.output_ids] = output_ids if isinstance(output_ids, list) else np.asarray(output_ids).tolist()
    c = LazyEvidence(index, item, SGLANG, k, kernels=_select.kernels)
    routed = meta.get(KEY.routed_experts)
    if routed is not None and not isinstance(routed, str):
        array = np.asarray(_array(routed))  # int_array below reads a private copy
        if array.dtype.kind not in "iu":
            raise TypeError(f"meta_info.routed_experts must hold integers, not {array.dtype}")
        c.routed_experts = _bytes(int_array(array, "meta_info.routed_experts", "<i4", -2**31, 2**31 - 1,
                                            flat=True))
        meta[KEY.routed_experts] = ""  # read: the rule asks for the base64 string's place
    return _parse_sglang_item(c, item, k, require_logprobs, check_usage, routing)
