"""SGLang's per-token fields in ``meta_info``, read on a ``/generate`` item and on a chat
choice that carries one (``return_meta_info``): the sampling mask, the sampling logprobs and
the mask logprobs (checked against the ids and against each other), the prompt's top
logprobs in their plain and flat base64 forms, and the weight-version spans. The rules of
``rules/openai.py``'s SGLang and chat parsers call them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base._table import KEY, SGLANG
from ..base._types import Ragged
from ..base._wire import VLLM_LOGPROB_SENTINEL
from ..extract.python import Evidence, LazyEvidence, full_at
from ..kernels.python import Candidates, is_int
from .generate import mask_logprob_values, parse_weight_versions
from .sources import IDS_REASON, Logprobs, check_values


_MASK = "meta_info.output_token_sampling_mask"
_SAMPLING = "meta_info.output_token_sampling_logprobs"
_MASK_LOGPROBS = "meta_info.output_token_sampling_mask_logprobs"


def _support_fault(row: np.ndarray, sampled: int) -> str:
    """Why one sampling mask row is not the kept set of its token."""
    kept = row.tolist()
    if not kept:
        return "sampling mask row is empty: a kept set holds at least the sampled token"
    seen: set[int] = set()
    for token_id in kept:
        if token_id in seen:
            return f"sampling mask row repeats token id {token_id}"
        seen.add(token_id)
    return f"sampling mask row does not hold the sampled token id {sampled}"


def _sglang_mask(c: Evidence, meta: dict[str, Any], ids: np.ndarray) -> Ragged | None:
    """``output_token_sampling_mask`` (``return_sampling_mask``): one row of kept ids per output
    token, every row holding its sampled id once and no id twice; its
    ``output_token_sampling_mask_length`` counts the rows."""
    if meta.get("output_token_sampling_mask") is None:
        return None
    read = c.output_token_sampling_mask
    if read is None:
        c.fail("output_token_sampling_mask must be a list of id lists, one per output token", _MASK)
    rows, count, bad_row = read
    n = len(ids)
    if count != n:
        c.fail(f"sampling mask has {count} rows but the completion has {n} token ids ({count - n:+d})", _MASK)
    bad = c.kernels.first_bad_support(ids, rows, n if bad_row is None else bad_row)
    if bad >= 0:
        c.fail(_support_fault(rows[bad], int(ids[bad])), _MASK, bad)
    if bad_row is not None:
        c.fail("sampling mask row must be a list of token ids in [0, 2**31)", _MASK, bad_row)
    length = meta.get("output_token_sampling_mask_length")
    if length is not None:
        field = "meta_info.output_token_sampling_mask_length"
        if not is_int(length) or length < 0:
            c.fail("output_token_sampling_mask_length must be a non-negative int", field)
        if length != n:
            c.fail(f"output_token_sampling_mask_length is {length} but the sampling mask has {n} rows "
                   f"({length - n:+d})", field)
    return rows


def _aligned_rows(c: Evidence, rows: Any, mask: Ragged, ids: np.ndarray, field: str) -> tuple[Ragged, np.ndarray]:
    """Logprob rows aligned with the sampling mask (:func:`mask_logprob_values`): as float64
    rows sharing the mask's offsets, and each row's value at its sampled id."""
    values = mask_logprob_values(c, rows, mask, field)
    sampled_at = np.flatnonzero(mask.values == np.repeat(ids, mask.lengths()))  # one per row: the mask's rule
    return Ragged(mask.offsets, values), values[sampled_at]


def _sglang_sampling(
    c: Evidence, meta: dict[str, Any], ids: np.ndarray, mask: Ragged | None
) -> tuple[np.ndarray | None, Ragged | None]:
    """``output_token_sampling_logprobs``: per output token log(w[y] / sum w), the sampled
    token's logprob under the truncated distribution renormalized over its kept set; one
    number a token, or (``sampling_logprobs_mode: "support"``) a row aligned with the token's
    mask row. Returns the sampled values and, for rows, the rows."""
    sent = meta.get("output_token_sampling_logprobs")
    if sent is None:
        return None, None
    read = c.output_token_sampling_logprobs
    if read is None:
        c.fail("output_token_sampling_logprobs must be a list, one value per output token", _SAMPLING)
    n = len(ids)
    if read.length != n:
        c.fail(f"output_token_sampling_logprobs has {read.length} values but the completion has {n} token "
               f"ids ({read.length - n:+d})", _SAMPLING)
    values = read.numbers
    if values.bad is not None and isinstance(values.example, list):
        if mask is None:
            c.fail("output_token_sampling_logprobs holds rows (sampling_logprobs_mode \"support\") but the "
                   "response has no output_token_sampling_mask to align them with", _SAMPLING)
        rows, sampled = _aligned_rows(c, full_at(c, sent, read.span), mask, ids, _SAMPLING)
        return sampled, rows
    logprobs = Logprobs(_SAMPLING, n, values.values, values.bad, values, "sampling logprob")
    return check_values(c, logprobs), None


def _sglang_mask_logprobs(c: Evidence, meta: dict[str, Any], ids: np.ndarray, mask: Ragged | None,
                          sampled: np.ndarray | None) -> Ragged | None:
    """``output_token_sampling_mask_logprobs`` (Miles' SGLang branch): the renormalized logprob
    of every kept id, rows aligned with the mask; at the sampled id it is the token's
    sampling logprob."""
    rows = meta.get("output_token_sampling_mask_logprobs")
    if rows is None:
        return None
    if mask is None:
        c.fail("output_token_sampling_mask_logprobs needs the output_token_sampling_mask its rows are "
               "aligned with", _MASK_LOGPROBS)
    aligned, at_sampled = _aligned_rows(c, rows, mask, ids, _MASK_LOGPROBS)
    if sampled is not None:
        differ = np.flatnonzero(~np.isclose(at_sampled, sampled, rtol=1e-6, atol=1e-5))
        if len(differ):
            t = int(differ[0])
            c.fail(f"output_token_sampling_mask_logprobs gives the sampled token {float(at_sampled[t])!r} "
                   f"but output_token_sampling_logprobs is {float(sampled[t])!r}", _MASK_LOGPROBS, t)
    return aligned


def _over_support(candidates: Candidates, mask: Ragged, sampled: np.ndarray) -> tuple[Candidates, np.ndarray]:
    """SGLang's top logprobs are the sampler's distribution before truncation: over a row whose
    kept ids are all among its candidates and whose kept mass is at most 1.0001, every
    candidate and the sampled logprob are shifted by -log(kept mass), so the kept ids' values
    are the truncated distribution renormalized (the head is then exactly the kept set, as
    for vLLM's processed logprobs). Other rows stay as sent, for the head rules to reject."""
    n = len(mask)
    widths = np.diff(candidates.offsets)
    rows = np.repeat(np.arange(len(widths), dtype=np.int64), widths)
    kept = np.isin(rows * 2**32 + candidates.ids,
                   np.repeat(np.arange(n, dtype=np.int64), mask.lengths()) * 2**32 + mask.values)
    kept &= candidates.logprobs != VLLM_LOGPROB_SENTINEL
    found = np.bincount(rows[kept], minlength=n)[:n]
    mass = np.bincount(rows[kept], weights=np.exp(candidates.logprobs[kept]), minlength=n)[:n]
    shift = np.zeros(n, dtype=np.float64)
    ok = (found == mask.lengths()) & (mass > 0) & (mass <= 1.0001)
    shift[ok] = np.log(mass[ok])
    shifted = np.where(candidates.logprobs == VLLM_LOGPROB_SENTINEL, candidates.logprobs,
                       candidates.logprobs - shift[rows])
    return Candidates(candidates.offsets, candidates.ids, shifted), sampled - shift


# SGLang's sampling fields, read on a chat choice's meta_info as on a /generate item's (and,
# as there, leaving it: the mask's row count, checked, stays).
_CHAT_META = ("output_token_sampling_mask", "output_token_sampling_logprobs", "output_token_sampling_mask_logprobs")


def _chat_meta_info(c: Evidence, choice: dict[str, Any], ids: np.ndarray, raw: dict[str, Any]) -> dict[str, Any]:
    """SGLang's chat choices carry the /generate item's ``meta_info`` (``return_meta_info``):
    its sampling mask, sampling logprobs and mask logprobs are read and checked as on
    ``/generate``, against the choice's ids, and leave ``raw["meta_info"]``; the rest of it
    stays there as sent. Returns the choice's attributes (none without them)."""
    meta = choice.get(KEY.meta_info)
    if not isinstance(meta, dict) or all(meta.get(key) is None for key in _CHAT_META):
        return {}
    item = LazyEvidence(c.index, {KEY.meta_info: meta}, SGLANG, kernels=c.kernels, error=c.error)
    fields = _sglang_sampling_fields(item, meta, ids)
    raw[KEY.meta_info] = {key: value for key, value in meta.items() if key not in _CHAT_META}
    return fields


def _sglang_sampling_fields(c: Evidence, meta: dict[str, Any], ids: np.ndarray) -> dict[str, Any]:
    """The sampling mask, sampling logprobs and mask logprobs of a ``meta_info`` (a /generate
    item's, or a chat choice's), checked against ``ids``, as the choice's attributes."""
    mask = _sglang_mask(c, meta, ids)
    sampling, support = _sglang_sampling(c, meta, ids, mask)
    mask_logprobs = _sglang_mask_logprobs(c, meta, ids, mask, sampling)
    return {"sampling_mask": mask,
            "sampling_mask_present": None if mask is None else mask.offsets[1:] != mask.offsets[:-1],
            "sampling_logprobs": sampling,
            "sampling_mask_logprobs": support if support is not None else mask_logprobs}


def _sglang_prompt_top(c: Evidence, meta: dict[str, Any]) -> tuple[Ragged | None, Ragged | None]:
    """The flat prompt top-k (``return_flat_raw_top_logprobs``, with ``_b64``): ``rows x k``
    values and ids, as JSON lists or base64 float32 / int32 (``_b64_dtype``), covering the
    prompt positions after ``input_top_logprobs_null_prefix`` positions without any;
    ``input_top_logprobs_shape`` is ``[rows, k]``, the arrays' own shape (the null prefix not
    counted), and the positions covered are those of ``input_token_logprobs``."""
    keys = [f"input_top_logprobs_{name}" for name in ("val_flat", "idx_flat", "val_flat_b64", "idx_flat_b64")]
    plain, b64 = (any(meta.get(key) is not None for key in pair) for pair in (keys[:2], keys[2:]))
    if not plain and not b64:
        return None, None
    if plain and b64:
        c.fail("the flat prompt top-k is sent both as lists and as base64: one form only", "meta_info." + keys[0])
    shape, prefix = meta.get("input_top_logprobs_shape"), meta.get("input_top_logprobs_null_prefix")
    if not isinstance(shape, list) or len(shape) != 2 or not all(is_int(d) and d >= 0 for d in shape):
        c.fail("input_top_logprobs_shape must be [rows, k]: two non-negative ints", "meta_info.input_top_logprobs_shape")
    if not is_int(prefix) or prefix < 0:
        c.fail("input_top_logprobs_null_prefix must be a non-negative int", "meta_info.input_top_logprobs_null_prefix")
    rows, k = shape
    positions = meta.get("input_token_logprobs")
    if not isinstance(positions, list) or len(positions) != prefix + rows:
        covered = f"has {len(positions)}" if isinstance(positions, list) else "is missing"
        c.fail(f"input_top_logprobs_null_prefix ({prefix}) and input_top_logprobs_shape[0] ({rows}) cover "
               f"{prefix + rows} prompt positions but meta_info.input_token_logprobs, which lists them, {covered}",
               "meta_info.input_top_logprobs_shape")
    if plain:
        ids, values = _flat_plain(c, keys, rows, k, prefix)
    else:
        ids, values = _flat_b64(c, meta, keys, rows, k, prefix)
    field = "meta_info." + (keys[0] if plain else keys[2])
    bad = c.kernels.first_bad("top_k", values)
    if bad >= 0:
        c.fail("Top logprob must be a number at most 1e-6 or -inf (NaN or positive)", field, prefix + bad // k)
    if k > 1 and rows:
        ordered = np.sort(ids.reshape(rows, k), axis=1)
        repeats = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
        if len(repeats):
            c.fail("Duplicate top logprob token id", "meta_info." + keys[1 if plain else 3], prefix + int(repeats[0]))
    offsets = np.zeros(prefix + rows + 1, dtype=np.int64)
    offsets[prefix + 1:] = np.arange(1, rows + 1, dtype=np.int64) * k
    return Ragged(offsets, ids), Ragged(offsets, values)


def _flat_count(c: Evidence, key: str, got: int, rows: int, k: int, prefix: int) -> None:
    """A flat array holds rows x k values; an earlier revision of SGLang's format counted the
    null prefix in rows, which is named when that is what the array matches."""
    if got != rows * k:
        older = ""
        if prefix and k and got == max(rows - prefix, 0) * k:
            older = ("; it matches rows counting the null prefix, an earlier revision of SGLang's flat format "
                     "(input_top_logprobs_shape[0] is the arrays' own row count)")
        c.fail(f"{key} holds {got} values but input_top_logprobs_shape [{rows}, {k}] gives {rows * k}{older}",
               "meta_info." + key)


def _flat_plain(c: Evidence, keys: list[str], rows: int, k: int, prefix: int) -> tuple[np.ndarray, np.ndarray]:
    """The plain form: a JSON list of rows x k numbers and one of ids."""
    read, parsed = c.input_top_logprobs_val_flat, c.input_top_logprobs_idx_flat
    if read is None:
        c.fail(f"{keys[0]} must be a list of numbers", "meta_info." + keys[0])
    _flat_count(c, keys[0], read.length, rows, k, prefix)
    if read.numbers.bad is not None:
        c.fail(f"{keys[0]} must hold numbers", "meta_info." + keys[0], prefix + read.numbers.bad // k)
    if parsed is None:
        c.fail(f"{keys[1]} must be a list of token ids", "meta_info." + keys[1])
    ids, length, bad = parsed
    _flat_count(c, keys[1], length, rows, k, prefix)
    if bad is not None:
        c.fail(f"{keys[1]} {IDS_REASON}", "meta_info." + keys[1], prefix + bad // k)
    return ids, read.numbers.values


# The base64 form's arrays and the dtypes SGLang names in their ``_dtype`` fields.
_FLAT_DTYPES = {"idx_flat_b64": ("int32", "<i4"), "val_flat_b64": ("float32", "<f4")}


def _flat_b64(c: Evidence, meta: dict[str, Any], keys: list[str], rows: int, k: int,
              prefix: int) -> tuple[np.ndarray, np.ndarray]:
    """The base64 form: little-endian int32 ids and float32 values, rows x k of each."""
    arrays = []
    for key, raw in ((keys[3], c.input_top_logprobs_idx_flat_b64), (keys[2], c.input_top_logprobs_val_flat_b64)):
        name, dtype = _FLAT_DTYPES[key[len("input_top_logprobs_"):]]
        if meta.get(key + "_dtype") != name:
            c.fail(f"{key}_dtype must be {name!r}", f"meta_info.{key}_dtype")
        if raw is None:
            c.fail(f"{key} must be canonical base64", "meta_info." + key)
        if len(raw) % 4:
            c.fail(f"{key} holds {len(raw)} bytes, not a whole number of {name} values", "meta_info." + key)
        _flat_count(c, key, len(raw) // 4, rows, k, prefix)
        arrays.append(raw.view(dtype))
    ids, values = arrays
    bad = c.kernels.first_bad("negative", ids)
    if bad >= 0:
        c.fail("Top logprob must identify a nonnegative token id", "meta_info." + keys[3], prefix + bad // k)
    return ids.astype(np.int64), values


def _sglang_weight_versions(c: Evidence, meta: dict[str, Any], n: int) -> tuple[tuple[str, int, int], ...] | None:
    """SGLang's ``meta_info.weight_versions`` spans (the generate endpoint's rules), and
    beside them the single ``weight_version``, which names the last span's weights. Alone (older
    SGLang), the single version says which weights were loaded when the response was built,
    not which sampled each token: it is no span and stays in ``raw["meta_info"]``."""
    field = "meta_info.weight_versions"
    value = meta.get("weight_versions")
    if value is None:
        return None
    spans = parse_weight_versions(value, n, c, field)
    single = meta.get("weight_version")
    if single is not None and spans and single != spans[-1][0]:
        c.fail(f"meta_info.weight_version ({single!r}) is not the version of the last "
               f"{field} span ({spans[-1][0]!r})", "meta_info.weight_version")
    return spans
