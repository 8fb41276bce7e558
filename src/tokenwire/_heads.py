"""Head selection for callers that already hold the candidates as arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _reference, _select
from ._errors import MalformedResponseError
from ._types import Ragged

__all__ = ["select_heads"]


def _array(values: Any, dtype: Any, name: str) -> np.ndarray:
    array = np.ascontiguousarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D")
    if np.dtype(dtype).kind in "iu" and array.size and array.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, not {array.dtype}")
    return np.ascontiguousarray(array, dtype=dtype)


def _offsets(values: Any, size: int, name: str) -> np.ndarray:
    offsets = _array(values, np.int64, name)
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != size or (np.diff(offsets) < 0).any():
        raise ValueError(f"{name} must start at 0, never decrease and end at {size}")
    return offsets


def select_heads(
    candidate_ids: Any,
    candidate_logprobs: Any,
    candidate_offsets: Any,
    sampled_ids: Any,
    sampled_logprobs: Any,
    k: int,
    *,
    num_top: int | None = None,
    support_ids: Any = None,
    support_offsets: Any = None,
) -> tuple[Ragged, Ragged]:
    """The action-independent top-``k`` head of every token, with the generate parsers' rules.

    Token ``t``'s candidates are ``candidate_ids/logprobs[candidate_offsets[t]:candidate_offsets[t + 1]]``
    in the order the engine listed them. With ``num_top`` they are compact rows (the sampled
    token first, repeats allowed): the head is drawn from each row's first ``max(num_top, 1)``
    distinct ids; without it every row must list distinct ids. A recorded support
    (``support_ids``/``support_offsets``, CSR) makes each head exactly its support.
    Returns ``(ids, logprobs)`` as :class:`Ragged`; raises :class:`MalformedResponseError`
    located at the first token whose head breaks a rule.
    """
    if _reference._check_top_k(k) is None:
        raise ValueError("k must be a positive int")
    ids = _array(candidate_ids, np.int64, "candidate_ids")
    offsets = _offsets(candidate_offsets, len(ids), "candidate_offsets")
    n = len(offsets) - 1
    sampled = _array(sampled_ids, np.int64, "sampled_ids")
    sampled_lps = _array(sampled_logprobs, np.float64, "sampled_logprobs")
    if len(sampled) != n or len(sampled_lps) != n:
        raise ValueError(f"{n} tokens of candidates but {len(sampled)} sampled ids and {len(sampled_lps)} logprobs")
    supports = None
    if support_ids is not None or support_offsets is not None:
        values = _array(support_ids, np.int32, "support_ids")
        supports = Ragged(_offsets(support_offsets, len(values), "support_offsets"), values)
        if len(supports) != n:
            raise ValueError(f"{len(supports)} supports for {n} tokens")
    kernels = _select.kernels
    if num_top is not None:
        if ids.size and (ids.min() < 0 or ids.max() > _reference.MAX_TOKEN_ID):
            raise ValueError("compact candidate ids must be in [0, 2**32)")
        candidates = kernels.compact_candidates(
            ids.astype(np.uint32), _array(candidate_logprobs, np.float32, "candidate_logprobs"), offsets, num_top
        )
    else:
        logprobs = _array(candidate_logprobs, np.float64, "candidate_logprobs")
        if len(logprobs) != len(ids):
            raise ValueError(f"{len(ids)} candidate ids but {len(logprobs)} logprobs")
        rows = np.repeat(np.arange(n), np.diff(offsets))
        order = np.lexsort((ids, rows))
        repeated = np.flatnonzero((np.diff(ids[order]) == 0) & (np.diff(rows[order]) == 0))
        if len(repeated):
            raise MalformedResponseError("Duplicate top logprob token id", field="heads", token=int(rows[order][repeated].min()))
        candidates = _reference.Candidates(offsets, ids, logprobs)
    top_ids, top_logprobs, bad = kernels.heads(sampled, candidates, sampled_lps, k, supports, n)
    if bad is not None:
        raise MalformedResponseError(bad[1], field="heads", token=bad[0])
    return top_ids, top_logprobs
