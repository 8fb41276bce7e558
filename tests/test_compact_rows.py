"""Compact rows of every length (the AVX-512 and AVX2 paths cover rows of up to 32 entries,
longer ones and the scalar path take the table): repeats, their values and the sampled id,
against the reference, on every SIMD path."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire import MalformedResponseError, samples
from tokenwire.kernels import python as python_kernels

from .conftest import PYTHON, _core


@st.composite
def compact_documents(draw):
    n = draw(st.integers(1, 4))
    rows, sampled_ids = [], []
    for _ in range(n):
        length = draw(st.sampled_from([1, 2, 15, 16, 17, 23, 31, 32, 33, 48, 70]))
        alphabet = draw(st.sampled_from([3, 40, 10**6]))  # few ids: many repeats
        ids = draw(st.lists(st.integers(0, alphabet), min_size=length, max_size=length))
        value_of = {i: -float(draw(st.integers(0, 3))) / 4 for i in set(ids)}
        values = [value_of[i] for i in ids]
        if draw(st.integers(0, 3)) == 0:  # a repeat that disagrees, somewhere in the row
            at = draw(st.integers(0, length - 1))
            values[at] -= 0.5
        if draw(st.integers(0, 3)) == 0:  # zeros of both signs on one id (they agree)
            zeros = [j for j, v in enumerate(values) if v == 0]
            if zeros:
                values[draw(st.sampled_from(zeros))] = draw(st.sampled_from([0.0, -0.0]))
        if draw(st.integers(0, 9)) == 0:  # the sampled value at the sentinel
            values = [samples.SENTINEL if i == ids[0] else v for i, v in zip(ids, values)]
        rows.append((ids, values))
        sampled_ids.append(ids[draw(st.integers(0, length - 1))] if draw(st.integers(0, 7)) else alphabet + 1)
    flat_ids = [i for ids, _ in rows for i in ids]
    flat_values = [v for _, vs in rows for v in vs]
    offsets = [0]
    for ids, _ in rows:
        offsets.append(offsets[-1] + len(ids))
    data = np.asarray(flat_ids, "<u4").tobytes() + np.asarray(flat_values, "<f4").tobytes()
    choice = {
        "token_ids": sampled_ids,
        "compact_logprobs": {
            "data": base64.b64encode(data).decode(),
            "format": "u32-f32-le-v1",
            "offsets": offsets,
            "num_top_logprobs": draw(st.sampled_from([0, 3, 40])),
        },
    }
    return samples.dumps({"choices": [choice]})


def outcome(impl, raw, top_k=None):
    """The sampled values to the bit (a zero's sign too), the head's, or the error."""
    try:
        choice = impl.parse_generate_response(raw, top_k=top_k).choices[0]
    except MalformedResponseError as exc:
        return (exc.choice, exc.field, exc.token, exc.reason)
    head = None if top_k is None else (choice.completion_top_ids.values.tolist(),
                                       choice.completion_top_logprobs.values.tobytes())
    return choice.completion_logprobs.tobytes(), head


@given(compact_documents(), st.sampled_from([None, None, 1]))
def test_rows_of_every_length_match_the_reference(impl, raw, top_k):
    assert outcome(impl, raw, top_k) == outcome(PYTHON, raw, top_k)


@given(st.lists(st.integers(-3, 40), max_size=12), st.booleans())
def test_offsets_not_rising_kernel_matches_the_reference(values, rising):
    """The first offset that breaks ``offsets[0] == 0`` and strictly rising offsets: the
    compiled kernel and the reference's numpy form agree."""
    if _core is None:
        pytest.skip("the compiled core is not built")
    offsets = np.cumsum([0, *map(abs, values)]) if rising else np.asarray(values, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    expected = python_kernels.first_not_rising(offsets)
    assert _core.first_not_rising(offsets) == expected
    if rising and all(values):
        assert expected == -1


# rule: the dtype, values that break it, values that keep it
_FIRST_BAD_CASES = {
    "negative": (np.int32, [-1, -(2**31), -7], [0, 5, 2**31 - 1]),
    "packed": (np.float32, [np.nan, -np.inf, np.inf, -9999.0, -1e6], [-0.0, 0.0, -1.5, -9998.0]),
    "packed64": (np.float64, [np.nan, -np.inf, np.inf, -9999.0, -1e300], [-0.0, 0.0, -1.5, -9998.0]),
    "compact": (np.float32, [np.nan, -np.inf, np.inf, 1e-5, 0.5], [0.0, -0.0, -1.5, -1e30, 1e-6]),
}


@given(st.sampled_from(sorted(_FIRST_BAD_CASES)), st.integers(0, 300), st.data())
def test_first_bad_kernels_match_the_reference(simd, case, n, data):
    """The validators' kernels find the first bad value (blocks of 64 checked without a
    branch a value, then searched; the compact values 32 at a time on the AVX2 and AVX-512
    paths): at any position, one or several, or none, on every path."""
    dtype, bad, good = _FIRST_BAD_CASES[case]
    values = np.resize(np.array(data.draw(st.lists(st.sampled_from(good), min_size=1, max_size=8)), dtype=dtype), n)
    for at in data.draw(st.lists(st.integers(0, n - 1), max_size=3)) if n else []:
        values[at] = data.draw(st.sampled_from(bad))
    rule = "packed" if case == "packed64" else case
    assert _core.first_bad(rule, values) == python_kernels.first_bad(rule, values)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 63, 64, 65, 95, 96, 97, 130])
def test_compact_values_bad_at_every_offset(simd, n):
    """Each value that breaks the compact rule at each place of arrays around the vector
    kernel's blocks of 32 (and a second, later one that must not win), on every path."""
    for bad in _FIRST_BAD_CASES["compact"][1]:
        for at in range(n):
            values = np.full(n, -0.5, dtype=np.float32)
            values[at] = bad
            if at + 3 < n:
                values[at + 3] = np.nan
            assert _core.first_bad("compact", values) == at
    assert _core.first_bad("compact", np.full(n, 1e-6, dtype=np.float32)) == -1


@st.composite
def compact_rows_arrays(draw):
    """Rows as the kernels take them: ids, values, offsets, the sampled ids and num_top; few
    ids (many repeats), repeats that disagree, zeros of both signs, NaN and the sentinel."""
    n = draw(st.integers(0, 6))
    longest = draw(st.sampled_from([4, 32, 33, 70]))
    row_ids, row_values, offsets, sampled = [], [], [0], []
    for _ in range(n):
        length = draw(st.integers(0, longest))
        alphabet = draw(st.sampled_from([3, 40, 2**32 - 1]))
        ids = draw(st.lists(st.integers(0, alphabet), min_size=length, max_size=length))
        choices = [-0.25, -1.5, 0.0, -0.0, samples.SENTINEL] + ([float("nan")] if draw(st.integers(0, 4)) == 0 else [])
        value_of = {i: draw(st.sampled_from(choices)) for i in set(ids)}
        values = [value_of[i] for i in ids]
        if length and draw(st.integers(0, 3)) == 0:  # a repeat with other bits: -0.0, or another value
            at = draw(st.integers(0, length - 1))
            values[at] = draw(st.sampled_from([-0.0, 0.0, -2.0]))
        row_ids += ids
        row_values += values
        offsets.append(offsets[-1] + length)
        pick = draw(st.integers(-1, length - 1)) if length else -1
        sampled.append(ids[pick] if pick >= 0 else draw(st.sampled_from([alphabet + 1, -1, 2**32])))
    return (np.asarray(sampled, dtype=np.int64), np.asarray(row_ids, dtype="<u4"),
            np.asarray(row_values, dtype="<f4"), np.asarray(offsets, dtype=np.int64),
            draw(st.sampled_from([-1, 0, 1, 3, 20, 2**40])))


def _fused(kernels, arrays) -> tuple:
    sampled, bad, candidates = kernels.compact_rows_candidates(*arrays)
    return (sampled.tobytes(), bad, candidates.offsets.tolist(), candidates.ids.tolist(),
            candidates.logprobs.tobytes())


@given(compact_rows_arrays())
def test_rows_and_candidates_in_one_pass(impl, arrays):
    """compact_rows_candidates is compact_rows, then compact_candidates of the rows before the
    first bad one (later rows empty), on every path: the AVX-512 path's one pass over rows
    of up to 32 entries, and its hand-over of rows with NaN or zeros of both signs."""
    ids, row_ids, row_values, offsets, num_top = arrays
    got = _fused(impl, arrays)
    if not np.isnan(row_values).any():  # the rules pass no NaN (first_bad before): the kernels
        assert got == _fused(PYTHON, arrays)  # agree on every other value, a zero's sign too
    sampled, bad = impl.compact_rows(ids, row_ids, row_values, offsets)
    assert (sampled.tobytes(), bad) == got[:2]
    limit = len(ids) if bad is None else bad[0]
    candidates = impl.compact_candidates(row_ids, row_values, offsets, num_top)
    end = int(candidates.offsets[limit])
    assert got[2][: limit + 1] == candidates.offsets[: limit + 1].tolist()
    assert set(got[2][limit:]) == {end}
    assert (got[3], got[4]) == (candidates.ids[:end].tolist(), candidates.logprobs[:end].tobytes())


@st.composite
def compact_head_arrays(draw, support=None):
    """Rows as samplers write them (the sampled token, then the ranked head: ties, also at
    the k-th place and in the engine's order, filtered tails at the sentinel, the sampled id
    again among them), some
    disturbed (two entries swapped, a sentinel inside, a repeat, NaN, a value above 1), their
    masses at and around each threshold, and kept sets per token (absent, exact, with an id
    the row lacks, a negative id, repeated ids, longer than the row)."""
    n = draw(st.integers(0, 5))
    num_top = draw(st.sampled_from([-1, 0, 1, 3, 20, 21, 40, 2**40, 2**40, 2**40]))
    k = draw(st.sampled_from([0, 1, 3, 19, 20, 20, 20, 2**40]))
    row_ids, row_values, offsets, sampled, soff, sup = [], [], [0], [], [0], []
    with_support = draw(st.integers(0, 2)) == 0 if support is None else support
    for _ in range(n):
        if k <= 30 and draw(st.integers(0, 3)) > 0:  # enough candidates for a head of k: k + 2, and the sampled one
            length = k + 3 + draw(st.integers(0, 3))
        else:
            length = draw(st.sampled_from([0, 1, 2, 3, 8, 16, 17, 21, 22, 24, 25, 31, 32, 33, 40]))
        width = max(length - 1, 0)
        # two rows in three are plain (valid, most of them decided in registers on AVX-512):
        # every token after a failure goes unchecked
        plain = draw(st.integers(0, 2)) > 0
        masses = [0.3, 0.9, 0.99989, 0.9999, 1.0] + ([] if plain else [1.0001, 1.00011, 1.0002, 2.0])
        if with_support and plain:  # a kept set's mass is 1 (the sampler renormalized over it)
            masses = [0.99989, 0.9999, 1.0, 1.0, 1.0001]
        mass = draw(st.sampled_from(masses))
        shape = draw(st.sampled_from(["flat", "peaked", "peaked", "ties"]))
        if shape == "flat":  # nearly (a plain row), or exactly: every value tied
            probs = [mass / max(width, 1) * (1 - (0.001 * j if plain else 0)) for j in range(width)]
        elif shape == "peaked":
            raw = [0.5**j for j in range(width)]
            probs = [mass * p / sum(raw) for p in raw]
        else:
            groups = [draw(st.integers(1, 4)) for _ in range(width)]
            probs = [mass / max(width, 1) / g for g in groups]
        values = sorted((float(np.float32(np.log(p))) for p in probs), reverse=True)
        alphabet = draw(st.sampled_from([width + 2, 2**31 - 2 if with_support else 2**32 - 1]))  # kept ids: int32
        ids = draw(st.lists(st.integers(0, alphabet), min_size=width, max_size=width, unique=True))
        pairs = sorted(zip(values, ids), key=lambda p: (-p[0], p[1]))
        head_ids, head_values = [i for _, i in pairs], [v for v, _ in pairs]
        if draw(st.integers(0, 2)) == 0:  # tied values in the engine's order, not by id
            for j in range(width - 1):
                if head_values[j] == head_values[j + 1] and draw(st.booleans()):
                    head_ids[j], head_ids[j + 1] = head_ids[j + 1], head_ids[j]
        if width and draw(st.integers(0, 3)) == 0:  # a filtered tail
            cut = draw(st.integers(1 if plain else 0, width))
            head_values[cut:] = [samples.SENTINEL] * (width - cut)
        if length:
            pick = draw(st.integers(-1, width - 1)) if width else -1
            if plain and pick >= 0 and head_values[pick] == samples.SENTINEL:
                pick = 0
            if pick >= 0:  # the sampled token is in the head: it repeats there
                first_id, first_value = head_ids[pick], head_values[pick]
            else:
                first_id = draw(st.integers(0, alphabet))
                first_value = float(np.float32(draw(st.sampled_from([-0.05, -3.0, -30.0]))))
                if first_id in head_ids:
                    first_value = head_values[head_ids.index(first_id)]
            row = [(first_id, first_value)] + list(zip(head_ids, head_values))
            disturb = -1 if plain else draw(st.integers(0, 5))
            if disturb == 0 and len(row) > 2:
                a, b = draw(st.integers(0, len(row) - 1)), draw(st.integers(0, len(row) - 1))
                row[a], row[b] = row[b], row[a]
            elif disturb == 1 and len(row) > 2:
                at = draw(st.integers(1, len(row) - 2))
                row[at] = (row[at][0], samples.SENTINEL)
            elif disturb == 2:
                at = draw(st.integers(0, len(row) - 1))
                row[at] = (row[at][0], draw(st.sampled_from([float("nan"), 1.5, -0.0, 0.0])))
            elif disturb == 3:
                row.append(row[draw(st.integers(0, len(row) - 1))])
            elif disturb == 4 and len(row) > 1:  # the best value above 1: still ranked
                row[1] = (row[1][0], 1.5)
            sampled.append(row[0][0] if plain or draw(st.integers(0, 3)) else draw(st.sampled_from([-1, 2**32, alphabet + 1])))
        else:
            row = []
            sampled.append(draw(st.integers(0, 5)))
        row_ids += [i for i, _ in row]
        row_values += [v for _, v in row]
        offsets.append(offsets[-1] + len(row))
        if with_support:
            kinds = ["absent", "all", "all"] if plain else ["absent", "all", "head", "part", "missing", "negative", "filtered", "repeated"]
            kind = draw(st.sampled_from(kinds))
            live = [i for i, v in row if v != samples.SENTINEL]
            chosen = {"absent": [], "all": live, "head": live[: max(k, 0) % 64], "part": live[:2],
                      "missing": live[:3] + [2**31 - 1], "negative": live[:2] + [-1],
                      "filtered": live + [i for i, v in row if v == samples.SENTINEL][:1],
                      "repeated": live[:2] * 3}[kind]
            sup += chosen
            soff.append(soff[-1] + len(chosen))
    supports = None
    if with_support:
        from tokenwire.base._types import Ragged

        supports = Ragged(np.asarray(soff, np.int64), np.asarray(sup, np.int32))
    return (np.asarray(sampled, dtype=np.int64), np.asarray(row_ids, dtype="<u4"),
            np.asarray(row_values, dtype="<f4"), np.asarray(offsets, dtype=np.int64), num_top, k, supports)


def _heads_outcome(kernels, arrays) -> tuple:
    sampled, top_ids, top_logprobs, bad_row, bad_head = kernels.compact_heads(*arrays)
    if bad_row is not None or bad_head is not None:
        assert (sampled, top_ids, top_logprobs) == (None, None, None)
        return bad_row, bad_head
    return (sampled.tobytes(), top_ids.offsets.tolist(), top_ids.values.tolist(),
            top_logprobs.offsets.tolist(), top_logprobs.values.dtype, top_logprobs.values.tobytes())


@settings(max_examples=300)
@given(compact_head_arrays())
def test_compact_rows_straight_to_heads(impl, arrays):
    """compact_heads equals the reference (rows, candidates, then heads) on every path: the
    AVX-512 path's heads decided in registers and the tokens it hands to the two kernels
    (repeats that differ, heads without a shape, failing heads, sums at a threshold)."""
    got = _heads_outcome(impl, arrays)
    if not np.isnan(arrays[2]).any():
        assert got == _heads_outcome(PYTHON, arrays)


_OFF_VALUES = [float("nan"), float("inf"), float("-inf"), 2e-6, 1.5, 1e30]


@settings(max_examples=300)
@given(compact_head_arrays(), st.data())
def test_values_checked_in_the_rows_pass(impl, arrays, data):
    """checked_compact_heads (the values rule in the rows' pass) equals first_bad("compact")
    then compact_heads, with values breaking the rule (NaN, infinities, above 1e-6) at any
    entry, so at every lane position of the rows the registers hold and of the others."""
    values = arrays[2].copy()
    for _ in range(data.draw(st.integers(0, 2)) if len(values) else 0):
        values[data.draw(st.integers(0, len(values) - 1))] = data.draw(st.sampled_from(_OFF_VALUES))
    arrays = arrays[:2] + (values,) + arrays[3:]
    first = PYTHON.first_bad("compact", values)
    got = impl.checked_compact_heads(*arrays)
    assert got[0] == first
    if first >= 0:
        assert got[1:] == (None,) * 5
    else:
        assert got[0] == -1
        assert _heads_outcome(_Rest(got[1:]), arrays) == _heads_outcome(impl, arrays)


@settings(max_examples=300)
@given(compact_head_arrays(support=True), st.data())
def test_values_and_supports_checked_in_the_rows_pass(impl, arrays, data):
    """checked_supports_compact_heads (the values and support rules in the rows' pass) equals
    first_bad("compact"), first_bad_support (an empty row absent), then compact_heads: kept
    sets that break their rule (an id twice, no sampled id, a negative id) at any token,
    beside rows and heads that fail before or after them, and values off their rule."""
    values = arrays[2].copy()
    if len(values) and data.draw(st.integers(0, 3)) == 0:
        values[data.draw(st.integers(0, len(values) - 1))] = data.draw(st.sampled_from(_OFF_VALUES))
    arrays = arrays[:2] + (values,) + arrays[3:]
    got = impl.checked_supports_compact_heads(*arrays)
    want = PYTHON.checked_supports_compact_heads(*arrays)
    assert got[:2] == want[:2]
    if got[0] >= 0 or got[1] >= 0:
        assert got[2:] == (None,) * 5
    else:
        assert _heads_outcome(_Rest(got[2:]), arrays) == _heads_outcome(PYTHON, arrays)


class _Rest:
    """A kernels stand-in whose compact_heads answers what was already computed."""

    def __init__(self, rest):
        self.rest = rest

    def compact_heads(self, *_arrays):
        return self.rest


def _row_document(lengths, bad_at, bad_value, mask, k_ok):
    """One choice of compact rows of the given lengths (sampled id first, repeated among the
    candidates, values ranked), a value breaking the values rule at entry ``bad_at`` (or
    none), and a packed mask that fails (``mask``: "ok", "missing", "repeated") at the last
    row."""
    ids, values, offsets, sampled, sup, counts = [], [], [0], [], [], []
    for t, length in enumerate(lengths):
        row = [100 * t + j for j in range(length - 1)]
        first = row[0] if row else 100 * t
        vals = [-0.05 * (j + 1) for j in range(len(row))]
        ids += [first] + row
        values += [vals[0] if vals else -0.5] + vals
        offsets.append(offsets[-1] + len(row) + 1)
        sampled.append(first)
        kept = row[:3] if row else [first]
        if t == len(lengths) - 1 and mask == "missing":
            kept = [x for x in kept if x != first] or [first + 1]
        if t == len(lengths) - 1 and mask == "repeated":
            kept = kept + kept[:1]
        sup += kept
        counts.append(len(kept))
    if bad_at is not None:
        values[bad_at] = bad_value
    data = np.asarray(ids, "<u4").tobytes() + np.asarray(values, "<f4").tobytes()
    b64 = lambda a: base64.b64encode(np.asarray(a, "<i4").tobytes()).decode()  # noqa: E731
    choice = {
        "token_ids": sampled,
        "compact_logprobs": {"data": base64.b64encode(data).decode(), "format": "u32-f32-le-v1",
                             "offsets": offsets, "num_top_logprobs": max(lengths) if k_ok else 1},
        "sampling_mask": {"ids": {"data": b64(sup), "shape": [len(sup)], "dtype": "int32"},
                          "counts": {"data": b64(counts), "shape": [len(counts)], "dtype": "int32"}},
    }
    return samples.dumps({"choices": [choice]})


@settings(max_examples=200)
@given(st.lists(st.sampled_from([1, 2, 7, 8, 9, 16, 17, 23, 24, 25, 32, 33, 40]), min_size=1, max_size=5),
       st.data())
def test_value_errors_win_over_mask_and_head_errors(impl, lengths, data):
    """A document with a value breaking the values rule at any entry (each lane position of
    rows on both sides of the registers' 8-, 16- and 32-lane boundaries), with or without a
    mask or head that also fails: the same error, word for word, as the reference."""
    total = sum(lengths)
    bad_at = data.draw(st.one_of(st.none(), st.integers(0, total - 1)))
    raw = _row_document(lengths, bad_at, data.draw(st.sampled_from(_OFF_VALUES)),
                        data.draw(st.sampled_from(["ok", "missing", "repeated"])), data.draw(st.booleans()))
    k = data.draw(st.sampled_from([1, 3, 20]))
    assert outcome(impl, raw, top_k=k) == outcome(PYTHON, raw, top_k=k)
