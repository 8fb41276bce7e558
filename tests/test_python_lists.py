"""Python lists in and out.

``rows_to_lists``: CSR rows as Python lists, the form renderers' callers receive heads and
sampling masks in. The compiled core builds the lists itself; it must give exactly what the
reference (numpy's ``tolist`` cut at the offsets) gives, element types included, for any
offsets, and fall back to the reference for arrays it does not build from.

``ints``: a parsed JSON list of token ids (or offsets) read into an array, with the index of
its first bad element; the compiled core's loop against the reference's."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from tokenwire import Ragged
from tokenwire.kernels import python as python_kernels

try:
    from tokenwire import _core
except ImportError:  # pure-Python install
    _core = None

BUILT = (np.int32, np.uint32, np.int64, np.float32, np.float64)
OTHER = (np.int8, np.uint8, np.int16, np.uint64, np.float16, np.bool_)


def _typed(rows: list[list[list]]) -> list:
    """The lists with each element's type, so 1 == 1.0 and True == 1 do not pass for equal."""
    return [[[(type(x), x) for x in row] for row in array] for array in rows]


def _expected(offsets: list[int], *values: np.ndarray) -> list:
    return [[array.tolist()[a:b] for a, b in zip(offsets, offsets[1:])] for array in values]


@pytest.mark.parametrize("dtype", BUILT + OTHER)
def test_rows_are_the_cut_tolist(impl, dtype):
    values = (np.arange(12) * 7 % 11).astype(dtype)
    offsets = [0, 3, 3, 10, 12]
    got = impl.rows_to_lists(np.array(offsets), values)
    assert _typed(got) == _typed(_expected(offsets, values))


def test_equal_width_rows(impl):
    ids = np.arange(8 * 20, dtype=np.int64) * 40503 % 151_000
    logprobs = -np.arange(8 * 20, dtype=np.float32) / 7
    offsets = np.arange(0, 8 * 20 + 1, 20)
    got_ids, got_logprobs = impl.rows_to_lists(offsets, ids, logprobs)
    assert got_ids == ids.reshape(8, 20).tolist()
    assert _typed([got_logprobs]) == _typed([logprobs.reshape(8, 20).tolist()])
    assert all(type(row) is list for row in got_ids + got_logprobs)


def test_extreme_values(impl):
    values = [
        np.array([-(2**31), 2**31 - 1], dtype=np.int32),
        np.array([0, 2**32 - 1], dtype=np.uint32),
        np.array([-(2**63), 2**63 - 1], dtype=np.int64),
        np.array([-np.inf, np.nan], dtype=np.float32),
        np.array([np.finfo(np.float64).max, -0.0], dtype=np.float64),
    ]
    for array in values:
        got = impl.rows_to_lists(np.array([0, 1, 2]), array)[0]
        assert repr(got) == repr([[array.tolist()[0]], [array.tolist()[1]]])


@pytest.mark.parametrize(
    "offsets",
    [[0], [], [2, 1], [0, 5, 3], [-1, 2], [0, 13], [3, 3, 3], [0, 2**40]],
    ids=["one", "none", "falling", "falling-later", "negative", "past-end", "empty-rows", "huge"],
)
def test_any_offsets_give_the_reference(impl, offsets):
    values = np.arange(12, dtype=np.float32)
    bounds = np.array(offsets, dtype=np.int64)
    assert impl.rows_to_lists(bounds, values) == python_kernels.rows_to_lists(bounds, values)


def test_odd_arrays_give_the_reference(impl):
    offsets = np.array([0, 2, 4])
    cases = [
        np.arange(4, dtype=">i4"),  # not native byte order
        np.arange(8, dtype=np.int64)[::2],  # strided
        np.arange(4, dtype=np.int64).reshape(2, 2),  # not flat
        [1.5, 2.5, 3.5, 4.5],  # a list
        np.arange(4, dtype=np.uint64) + 2**63,  # past int64
    ]
    for values in cases:
        assert _typed(impl.rows_to_lists(offsets, values)) == _typed(python_kernels.rows_to_lists(offsets, values))
    for bounds in (np.array([0, 2, 4], dtype=np.uint64), [0, 2, 4], np.array([[0, 2]])):
        assert impl.rows_to_lists(bounds, np.arange(4)) == python_kernels.rows_to_lists(bounds, np.arange(4))
    with pytest.raises(TypeError):
        impl.rows_to_lists(np.array([0.0, 2.0]), np.arange(4))


def test_no_arrays(impl):
    assert impl.rows_to_lists(np.array([0, 1])) == []


@given(
    lengths=st.lists(st.integers(0, 6), max_size=20),
    dtype=st.sampled_from(BUILT + OTHER),
    extra=st.integers(0, 3),
    seed=st.integers(0, 2**32 - 1),
    shuffle=st.booleans(),
)
def test_core_matches_reference(lengths, dtype, extra, seed, shuffle):
    """Drawn rows (and drawn, possibly malformed, offsets) give the reference's lists."""
    if _core is None:
        pytest.skip("the compiled core is not built")
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if shuffle and len(offsets) > 2:
        offsets = rng.permutation(offsets)
    size = int(offsets.max()) + extra
    values = (rng.standard_normal(size) * 30).astype(dtype) if size else np.zeros(0, dtype)
    other = rng.integers(0, 2**31, size).astype(np.int64)
    expected = python_kernels.rows_to_lists(offsets, values, other)
    assert _typed(_core.rows_to_lists(offsets, values, other)) == _typed(expected)


def test_lists_are_owned_and_collectable():
    """The lists (and their elements) hold exactly one reference each and are tracked by the
    cyclic collector, so they free like any list."""
    if _core is None:
        pytest.skip("the compiled core is not built")
    offsets = np.arange(0, 301, 3)
    (rows,) = _core.rows_to_lists(offsets, np.arange(300, dtype=np.float64) + 0.5)
    assert sys.getrefcount(rows) == 2
    assert all(sys.getrefcount(row) == 3 and gc.is_tracked(row) for row in rows)
    assert all(sys.getrefcount(x) == 3 for x in rows[5])
    assert gc.is_tracked(rows)
    rows[7].append(rows)  # a cycle through a built row is collected
    del rows
    assert gc.collect() >= 1


def test_ragged_to_lists_uses_the_implementation():
    ragged = Ragged(np.array([0, 1, 3]), np.array([5, 6, 7], dtype=np.int32))
    assert ragged.to_lists() == [[5], [6, 7]]
    assert tokenwire.read._select.kernels.rows_to_lists is (
        _core.rows_to_lists if tokenwire.implementation == "c" else python_kernels.rows_to_lists
    )


class _Reader:
    """The int-list kernel as a choice reader calls it."""

    def __init__(self, kernels):
        self.kernels = kernels

    def ints(self, value, path, high):
        return self.kernels.int_list(value, high)


def _reader(impl):
    return _Reader(impl)


ODD_ELEMENTS = [-1, 5, 2**31, 2**63, 2**64, -(2**70), True, False, 1.0, None, "1", [1]]


@pytest.mark.parametrize("high", [4, 2**32 - 1, 2**63 - 1, 2**70])
def test_ints_reads_a_list(impl, high):
    reader = _reader(impl)
    for value in ([], [0], [1, 2, 3], [4] * 9, [high % 2**63], [0, 2**32 - 1]):
        values, length, bad = reader.ints(value, "token_ids", high)
        if all(x <= high for x in value):
            assert (values.tolist(), length, bad) == (value, len(value), None)
            assert values.dtype == np.int64
    assert reader.ints({"a": 1}, "token_ids", high) is None
    assert reader.ints("1,2", "token_ids", high) is None


@pytest.mark.parametrize("odd", ODD_ELEMENTS, ids=repr)
@pytest.mark.parametrize("at", [0, 1, 5])
def test_ints_stops_at_the_first_bad_element(impl, odd, at):
    value = [1, 2, 3, 4, 0][:at] + [odd] + [1, "x"]
    values, length, bad = _reader(impl).ints(value, "token_ids", 2**32 - 1)
    ok = type(odd) is int and 0 <= odd < 2**32
    assert length == len(value)
    assert bad == (at + 2 if ok else at)
    assert values.tolist() == value[:bad]


@given(
    value=st.lists(st.one_of(st.integers(0, 2**32 + 5), st.sampled_from(ODD_ELEMENTS)), max_size=40),
    high=st.sampled_from([0, 7, 2**32 - 1, 2**63 - 1, 2**64]),
)
def test_ints_core_matches_reference(value, high):
    if _core is None:
        pytest.skip("the compiled core is not built")
    expected = python_kernels.int_list(value, high)
    got = _core.int_list(value, high)
    assert (got[0].tolist(), got[0].dtype, got[1:]) == (expected[0].tolist(), expected[0].dtype, expected[1:])
    if expected[2] is None and value:  # the reference's one-conversion path, too
        assert expected[0].tolist() == value
