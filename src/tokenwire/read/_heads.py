"""Head selection for callers that already hold the candidates as arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _select
from ..base._args import INT64_MAX, int_arg, int_array, real_array
from ..base._errors import MalformedResponseError
from ..base._types import Ragged
from ..base._wire import MAX_MASK_ID, MAX_TOKEN_ID
from ..kernels.python import Candidates

__all__ = ["select_heads"]


def _offsets(values: Any, size: int, name: str) -> np.ndarray:
    # A private copy (int_array's): the kernels size their output and bound their reads by
    # it, without the GIL, so another thread writing the caller's array must not change it
    # after the check.
    offsets = int_array(values, name, np.int64, 0, INT64_MAX)
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
    (``support_ids``/``support_offsets``, CSR) makes each head exactly its support; an empty
    support row is no support (a ``kept_tokens`` token without a kept set): that token's head
    is its top ``k``.
    Returns ``(ids, logprobs)`` as :class:`Ragged`; raises :class:`MalformedResponseError`
    located at the first token whose head breaks a rule (a candidate logprob that is not finite
    or above 1e-6 first), and ValueError/TypeError for arrays that do not fit together.
    """
    k = int_arg(k, "k", 1)
    compact = num_top is not None
    if compact:
        num_top = int_arg(num_top, "num_top", -1)
    # Compact rows are what the wire carries: u32 ids and f32 values.
    ids = int_array(candidate_ids, "candidate_ids", np.int64, 0 if compact else -INT64_MAX - 1,
                    MAX_TOKEN_ID if compact else INT64_MAX)
    logprobs = real_array(candidate_logprobs, "candidate_logprobs", np.float32 if compact else np.float64)
    if len(logprobs) != len(ids):
        raise ValueError(f"{len(ids)} candidate ids but {len(logprobs)} logprobs")
    offsets = _offsets(candidate_offsets, len(ids), "candidate_offsets")
    n = len(offsets) - 1
    # The parsers' rule for a candidate (math.exp of a value above 709 overflows, and NaN
    # orders nothing), checked for the whole array first as the compact parser does.
    unusable = np.flatnonzero(~np.isfinite(logprobs) | (logprobs > 1e-6))
    if len(unusable):
        row = int(np.searchsorted(offsets, unusable[0], side="right")) - 1
        raise MalformedResponseError("Top logprob must be finite and at most 1e-6", field="heads", token=row)
    sampled = int_array(sampled_ids, "sampled_ids", np.int64, -INT64_MAX - 1, INT64_MAX)
    sampled_lps = real_array(sampled_logprobs, "sampled_logprobs", np.float64)
    if len(sampled) != n or len(sampled_lps) != n:
        raise ValueError(f"{n} tokens of candidates but {len(sampled)} sampled ids and {len(sampled_lps)} logprobs")
    supports = None
    if support_ids is not None or support_offsets is not None:
        if support_ids is None or support_offsets is None:
            raise ValueError("support_ids and support_offsets go together")
        values = int_array(support_ids, "support_ids", np.int32, 0, MAX_MASK_ID)
        supports = Ragged(_offsets(support_offsets, len(values), "support_offsets"), values)
        if len(supports) != n:
            raise ValueError(f"{len(supports)} supports for {n} tokens")
    kernels = _select.kernels
    if compact:
        candidates = kernels.compact_candidates(ids.astype(np.uint32), logprobs, offsets, num_top)
    else:
        rows = np.repeat(np.arange(n), np.diff(offsets))
        order = np.lexsort((ids, rows))
        repeated = np.flatnonzero((np.diff(ids[order]) == 0) & (np.diff(rows[order]) == 0))
        if len(repeated):
            raise MalformedResponseError("Duplicate top logprob token id", field="heads", token=int(rows[order][repeated].min()))
        candidates = Candidates(offsets, ids, logprobs)
    top_ids, top_logprobs, bad = kernels.heads(sampled, candidates, sampled_lps, k, supports, n)
    if bad is not None:
        raise MalformedResponseError(bad[1], field="heads", token=bad[0])
    return top_ids, top_logprobs
