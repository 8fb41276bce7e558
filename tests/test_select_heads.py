"""tokenwire.select_heads: the parsers' head rules for arrays the caller already holds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError, _reference

PROBS = [0.5, 0.25, 0.125, 0.0625, 0.2, 0.1, 0.05, 0.6]


@pytest.fixture
def heads_impl(impl, monkeypatch):
    monkeypatch.setattr(tokenwire._select, "kernels", impl)
    return impl


@st.composite
def heads(draw):
    n = draw(st.integers(0, 6))
    rows = []
    for _ in range(n):
        ids = draw(st.lists(st.integers(0, 20), min_size=0, max_size=8, unique=True))
        rows.append([(i, math.log(draw(st.sampled_from(PROBS)))) for i in ids])
    sampled = [draw(st.sampled_from([r[0][0] for r in [row] if row] or [99])) for row in rows]
    sampled_lps = [dict(row).get(s, -1.0) for row, s in zip(rows, sampled)]
    return rows, sampled, sampled_lps, draw(st.integers(1, 5))


def expected(rows, sampled, sampled_lps, k):
    out_ids, out_lps = [], []
    for t, (row, s, lp) in enumerate(zip(rows, sampled, sampled_lps)):
        try:
            chosen = _reference.select_head(dict(row), s, lp, k)
        except MalformedResponseError as exc:
            return ("error", t, exc.reason)
        out_ids.append(chosen[0])
        out_lps.append(chosen[1])
    return ("ok", out_ids, out_lps)


@given(heads())
def test_select_heads_matches_select_head(heads_impl, case):
    rows, sampled, sampled_lps, k = case
    offsets = np.cumsum([0] + [len(r) for r in rows])
    ids = [i for r in rows for i, _ in r]
    lps = [p for r in rows for _, p in r]
    try:
        top_ids, top_lps = tokenwire.select_heads(ids, lps, offsets, sampled, sampled_lps, k)
        got = ("ok", top_ids.to_lists(), top_lps.to_lists())
    except MalformedResponseError as exc:
        got = ("error", exc.token, exc.reason)
    assert got == expected(rows, sampled, sampled_lps, k)


def test_compact_rows_and_supports(heads_impl):
    lp = {i: math.log(p) for i, p in {1: 0.6, 2: 0.25, 3: 0.1, 4: 0.04, 5: 0.01}.items()}
    row = [2, 1, 2, 3, 4]  # the sampled token first, then the top candidates
    ids = np.array(row * 2)
    values = np.array([lp[i] for i in row] * 2, dtype=np.float32)
    top_ids, _ = tokenwire.select_heads(ids, values, [0, 5, 10], [2, 2], values[[0, 5]], 2, num_top=4)
    assert top_ids.to_lists() == [[1, 2], [1, 2]]
    # With a recorded support the head is exactly the support, which must normalize.
    full = {1: math.log(0.5), 2: math.log(0.3), 3: math.log(0.2)}
    row = [2, 1, 2, 3]
    values = np.array([full[i] for i in row], dtype=np.float32)
    support_ids, _ = tokenwire.select_heads(
        row, values, [0, 4], [2], values[:1], 2, num_top=3, support_ids=[3, 1, 2], support_offsets=[0, 3]
    )
    assert support_ids.to_lists() == [[1, 2, 3]]
    values = np.array([lp[i] for i in [2, 1, 2, 3, 4]] * 2, dtype=np.float32)
    with pytest.raises(MalformedResponseError, match="fewer top logprobs") as info:
        tokenwire.select_heads(ids, values, [0, 5, 10], [2, 2], values[[0, 5]], 3, num_top=4)
    assert info.value.token == 0 and info.value.field == "heads"


def test_bad_arguments(heads_impl):
    with pytest.raises(MalformedResponseError, match="Duplicate"):
        tokenwire.select_heads([1, 1], [-0.1, -0.1], [0, 2], [1], [-0.1], 1)
    with pytest.raises(ValueError):
        tokenwire.select_heads([1], [-0.1], [0, 2], [1], [-0.1], 1)
    with pytest.raises(ValueError):
        tokenwire.select_heads([1], [-0.1], [0, 1], [1, 2], [-0.1], 1)
    with pytest.raises(ValueError):
        tokenwire.select_heads([1], [-0.1], [0, 1], [1], [-0.1], 0)
