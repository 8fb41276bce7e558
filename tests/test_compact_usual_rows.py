"""Compact rows as engines write them, many tokens at a time: the sampled token, then the
engine's ranked candidates, one of them the sampled token again. The AVX2 heads' pass takes
these in registers by their own route (the row ranked as it stands, the repeats found by a
distinctness check, a support's ids matched eight at a time, the sum rules estimated in single
precision beside the head): every path must give the reference's heads and failures, also for
rows of that shape that break a rule in a way the route must not miss."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire import samples
from tokenwire.base._types import Ragged

from .conftest import PYTHON
from .test_compact_rows import _heads_outcome, _Rest

F32 = np.float32
# ids the AVX2 distinctness check's stand-ins for lane 0 and the lanes past the row take
STAND_INS = [0xFFFFFFE0 + lane for lane in range(32)]


@st.composite
def usual_rows(draw, support=False):
    """Tokens of rows [sampled, ranked candidates...] with ties (also at the k-th place and in
    the engine's order), filtered tails at the sentinel, flat and peaked masses at and around
    the thresholds, the sampled token among the candidates or not, ids up to 2^32 - 1 (the
    stand-ins among them); with support, a kept set per token (the live candidates, a part of
    them with the sampled id, absent)."""
    n = draw(st.integers(1, 12))
    num_top = draw(st.sampled_from([20, 22, 22, 23, 40]))
    k = draw(st.sampled_from([1, 19, 20, 20, 21, 2**40]))
    width = draw(st.sampled_from([2, 7, 8, 15, 16, 19, 22, 22, 23, 30, 31]))
    masses = [0.5, 0.99989, 0.9999, 1.0, 1.0, 1.0001, 1.0002] if not support else [0.99989, 0.9999, 1.0, 1.00011]
    row_ids, row_values, offsets, sampled, soff, sup = [], [], [0], [], [0], []
    for _ in range(n):
        mass = draw(st.sampled_from(masses))
        shape = draw(st.sampled_from(["flat", "peaked", "ties", "tied_at_k"]))
        if shape == "flat":
            probs = [mass / width] * width
        elif shape == "peaked":
            raw = [0.5**j for j in range(width)]
            probs = [mass * p / sum(raw) for p in raw]
        elif shape == "ties":
            groups = [draw(st.integers(1, 3)) for _ in range(width)]
            probs = [mass / width / g for g in groups]
        else:  # a run of equal values across the k-th place
            at = max(0, min(width - 2, (k if k < width else width) - 2))
            probs = [mass / (width + 1)] * width
            for j in range(at, min(width, at + 3)):
                probs[j] = mass / (width + 1) / 2
        values = sorted((float(F32(np.log(p))) for p in probs), reverse=True)
        top = 2**31 - 2 if support else 2**32 - 1
        alphabet = draw(st.sampled_from([width + 2, top]))
        ids = draw(st.lists(st.one_of(st.integers(0, alphabet), st.sampled_from(STAND_INS if not support else [0])),
                            min_size=width, max_size=width, unique=True))
        pairs = sorted(zip(values, ids), key=lambda p: (-p[0], p[1]))
        head_ids, head_values = [i for _, i in pairs], [v for v, _ in pairs]
        if draw(st.booleans()):  # tied values in the engine's order, not by id
            for j in range(width - 1):
                if head_values[j] == head_values[j + 1] and draw(st.booleans()):
                    head_ids[j], head_ids[j + 1] = head_ids[j + 1], head_ids[j]
        if draw(st.integers(0, 3)) == 0:  # a filtered tail
            cut = draw(st.integers(1, width))
            head_values[cut:] = [samples.SENTINEL] * (width - cut)
        live = [j for j in range(width) if head_values[j] != samples.SENTINEL]
        if draw(st.integers(0, 4)) > 0:  # the sampled token among the candidates: it repeats there
            pick = draw(st.sampled_from(live))
            first = (head_ids[pick], head_values[pick])
        else:
            first_id = draw(st.integers(0, alphabet).filter(lambda i: i not in head_ids))
            first = (first_id, float(F32(draw(st.sampled_from([-0.05, -3.0, -30.0, -90.0])))))
        row = [first] + list(zip(head_ids, head_values))
        row_ids += [i for i, _ in row]
        row_values += [v for _, v in row]
        offsets.append(offsets[-1] + len(row))
        sampled.append(first[0])
        if support:
            kind = draw(st.sampled_from(["live", "live", "part", "absent"]))
            live_ids = [i for i, v in row[1:] if v != samples.SENTINEL]
            chosen = {"live": live_ids, "absent": [],
                      "part": sorted(set(draw(st.lists(st.sampled_from(live_ids), max_size=9)) + [first[0]]))}[kind]
            if chosen and first[0] not in chosen:
                chosen = chosen + [first[0]]
            if draw(st.booleans()):
                chosen = draw(st.permutations(chosen))
            sup += chosen
            soff.append(soff[-1] + len(chosen))
    supports = Ragged(np.asarray(soff, np.int64), np.asarray(sup, np.int32)) if support else None
    return [np.asarray(sampled, dtype=np.int64), np.asarray(row_ids, dtype="<u4"),
            np.asarray(row_values, dtype="<f4"), np.asarray(offsets, dtype=np.int64), num_top, k, supports]


def _break(arrays, data, support):
    """One token's row (or kept set) made to break a rule in a way that keeps the row's shape:
    a candidate's id again later with another value (still ranked by value), the sampled id's
    repeat with the other zero or another value, a value off the values rule, the sampled id
    missing, or (kept sets) an id twice, a negative id, an id not ranked, the sampled id left
    out. Returns the rule's name."""
    sampled, row_ids, row_values, offsets = arrays[0], arrays[1].copy(), arrays[2].copy(), arrays[3]
    t = data.draw(st.integers(0, len(sampled) - 1))
    lo, hi = int(offsets[t]), int(offsets[t + 1])
    rules = ["repeat_later", "sampled_repeat_value", "value", "sampled_missing"]
    if support and arrays[6].offsets[t + 1] > arrays[6].offsets[t]:
        rules += ["support_twice", "support_negative", "support_unranked", "support_no_sampled"]
    rule = data.draw(st.sampled_from(rules))
    if rule == "repeat_later":
        if hi - lo < 4:
            return [sampled, row_ids, row_values] + arrays[3:], rule
        a = data.draw(st.integers(lo + 1, hi - 3))
        b = data.draw(st.integers(a + 1, hi - 1))
        row_ids[b] = row_ids[a]
        if row_values[b] == row_values[a]:
            row_values[b] = np.nextafter(row_values[a], F32(-np.inf))
    elif rule == "sampled_repeat_value":
        rep = [j for j in range(lo + 1, hi) if row_ids[j] == row_ids[lo]]
        if rep:
            row_values[rep[0]] = F32(-0.0) if row_values[lo] == 0 else np.nextafter(row_values[lo], F32(-np.inf))
    elif rule == "value":
        row_values[data.draw(st.integers(lo, hi - 1))] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf, 2e-6]))
    elif rule == "sampled_missing":
        sampled = sampled.copy()
        sampled[t] = data.draw(st.sampled_from([-1, 2**32, 2**31 + 5]))
    else:
        sup = arrays[6].values.copy()
        s_lo, s_hi = int(arrays[6].offsets[t]), int(arrays[6].offsets[t + 1])
        at = data.draw(st.integers(s_lo, s_hi - 1))
        if rule == "support_twice":
            sup[at] = sup[s_lo if at != s_lo else min(s_lo + 1, s_hi - 1)]
        elif rule == "support_negative":
            sup[at] = -1
        elif rule == "support_unranked":
            sup[at] = 2**31 - 1
        elif rule == "support_no_sampled":
            seg = sup[s_lo:s_hi]
            seg[seg == sampled[t]] = 2**31 - 1
        arrays = arrays[:6] + [Ragged(arrays[6].offsets, sup)]
    return [sampled, row_ids, row_values] + arrays[3:], rule


@settings(max_examples=50)
@given(usual_rows())
def test_usual_rows_match_the_reference(impl, arrays):
    assert _heads_outcome(impl, arrays) == _heads_outcome(PYTHON, arrays)


@settings(max_examples=40)
@given(usual_rows(support=True))
def test_usual_rows_with_kept_sets_match_the_reference(impl, arrays):
    got, want = impl.checked_supports_compact_heads(*arrays), PYTHON.checked_supports_compact_heads(*arrays)
    assert got[:2] == want[:2]
    if got[0] < 0 and got[1] < 0:
        assert _heads_outcome(_Rest(got[2:]), arrays) == _heads_outcome(PYTHON, arrays)


@settings(max_examples=60)
@given(st.booleans(), st.data())
def test_usual_rows_breaking_a_rule_fail_as_the_reference_says(impl, support, data):
    if impl is PYTHON:
        pytest.skip("the reference against itself")
    arrays = data.draw(usual_rows(support=support))
    arrays, rule = _break(arrays, data, support)
    got, want = impl.checked_supports_compact_heads(*arrays), PYTHON.checked_supports_compact_heads(*arrays)
    assert got[:2] == want[:2], rule
    if want[0] < 0 and want[1] < 0:
        assert got[5:] == want[5:], rule
