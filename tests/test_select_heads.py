"""tokenwire.select_heads: the parsers' head rules for arrays the caller already holds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError
from tokenwire.kernels import python as python_kernels

from .conftest import PYTHON

PROBS = [0.5, 0.25, 0.125, 0.0625, 0.2, 0.1, 0.05, 0.6]


@pytest.fixture
def heads_impl(kernels):
    return kernels


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
            chosen = python_kernels.select_head(dict(row), s, lp, k)
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


def test_every_argument_is_checked_before_the_kernels(heads_impl):
    row = np.arange(3)
    ok = dict(candidate_ids=row, candidate_logprobs=np.full(3, -1.5), candidate_offsets=[0, 3],
              sampled_ids=[0], sampled_logprobs=[-1.5], k=1)
    bad = [
        # (changes, exception, message)
        (dict(candidate_logprobs=np.array([-0.5], np.float32), num_top=3), ValueError, "3 candidate ids but 1"),
        (dict(candidate_logprobs=[-0.5]), ValueError, "3 candidate ids but 1"),
        (dict(candidate_logprobs=np.full(4, -1.5)), ValueError, "3 candidate ids but 4"),
        (dict(candidate_logprobs=np.full(3, 1j)), TypeError, "real numbers"),
        (dict(candidate_ids=row.reshape(1, 3)), ValueError, "1-D"),
        (dict(candidate_ids=[0.0, 1.0, 2.0]), TypeError, "integers"),
        (dict(candidate_ids=np.array([0, 1, 2**63], np.uint64)), ValueError, "candidate_ids"),
        (dict(candidate_ids=[0, 1, 2**32], num_top=3), ValueError, "candidate_ids"),
        (dict(candidate_offsets=[0, 4]), ValueError, "end at 3"),
        (dict(candidate_offsets=np.array([0, 2**64 - 1], np.uint64)), ValueError, "candidate_offsets"),
        (dict(sampled_ids=[0, 1]), ValueError, "sampled ids"),
        (dict(sampled_logprobs=[]), ValueError, "sampled ids"),
        (dict(sampled_logprobs=[[-1.5]]), ValueError, "1-D"),
        (dict(k=0), ValueError, "k must be"),
        (dict(k=2**63), ValueError, "k must be"),
        (dict(k=True), TypeError, "k must be an int"),
        (dict(k=1.0), TypeError, "k must be an int"),
        (dict(num_top=-2), ValueError, "num_top"),
        (dict(num_top=2**63), ValueError, "num_top"),
        (dict(support_ids=[0]), ValueError, "go together"),
        (dict(support_ids=[2**32], support_offsets=[0, 1]), ValueError, "support_ids"),
        (dict(support_ids=[-1], support_offsets=[0, 1]), ValueError, "support_ids"),
        (dict(support_ids=[0, 1], support_offsets=[0, 1]), ValueError, "end at 2"),
        (dict(support_ids=[0], support_offsets=[0, 0, 1]), ValueError, "2 supports for 1"),
    ]
    for changes, exception, message in bad:
        with pytest.raises(exception, match=message):
            tokenwire.select_heads(**{**ok, **changes})
    # numpy integers are ints.
    lps = np.log([0.5, 0.3, 0.2])
    top, _ = tokenwire.select_heads(**{**ok, "k": np.int64(1), "candidate_logprobs": lps, "sampled_logprobs": lps[:1]})
    assert top.to_lists() == [[0]]


def test_compact_rows_shorter_than_their_ids_are_refused(heads_impl):
    # Once read past the end of the logprobs (a value from whatever memory followed).
    with pytest.raises(ValueError, match="candidate ids but"):
        tokenwire.select_heads(np.arange(3), np.array([-0.5], np.float32), [0, 3], [0], [-0.5], k=1, num_top=3)


def test_offsets_rewritten_by_another_thread_meanwhile(heads_impl):
    """The kernels run without the GIL and trust the offsets they were given: those are a
    private copy, so a caller's array changed meanwhile cannot move a read or write."""
    import threading

    n = 20000
    ids = np.tile(np.arange(4), n)
    values = np.tile(np.log([0.4, 0.3, 0.2, 0.1]), n)
    offsets = np.arange(0, 4 * n + 1, 4, dtype=np.int64)
    sampled, sampled_lps = np.zeros(n, np.int64), np.full(n, np.log(0.4))
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            offsets[1:-1] = 4 * n  # every row but the first empty, the last one huge
            offsets[1:-1] = np.arange(4, 4 * n, 4)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(30 if heads_impl is not PYTHON else 2):
            try:
                tokenwire.select_heads(ids, values, offsets, sampled, sampled_lps, 2)
            except (ValueError, MalformedResponseError):
                pass
    finally:
        stop.set()
        thread.join()


def test_candidate_logprobs_follow_the_parsers_rule(heads_impl):
    """Finite and at most 1e-6: above 709 math.exp overflows and NaN orders nothing, so both
    implementations refuse them the same way before any head is chosen."""
    for bad in (710.0, 0.5, math.nan, math.inf, -math.inf):
        for compact in (False, True):
            lps = np.array([-0.1, -0.2, -0.3, -0.4, bad, -0.6])
            kw = {"num_top": 2} if compact else {}
            with pytest.raises(MalformedResponseError, match="finite and at most 1e-6") as info:
                tokenwire.select_heads([0, 1, 2, 3, 4, 5], lps, [0, 3, 6], [0, 3], [-0.1, -0.4], 1, **kw)
            assert info.value.token == 1
