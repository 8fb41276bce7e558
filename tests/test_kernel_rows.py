"""The compiled kernels' free functions (``tokenwire._core``: what the rules call with rows they
checked) check the rows they are handed before any kernel reads them: offsets that fall, start
below 0, end past their arrays or are too few raise ValueError, never a read out of bounds; rows
that are within their arrays decide as the Python kernels do."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire.kernels import python as _kernels
from tokenwire.base._types import Ragged

_core = pytest.importorskip("tokenwire._core")

IDS = np.array([5, 6], dtype=np.int64)
ROW_IDS = np.array([5, 1, 6, 2], dtype=np.uint32)
ROW_VALUES = np.array([-0.5, -1.0, -0.25, -2.0], dtype=np.float32)
GOOD = np.array([0, 2, 4], dtype=np.int64)

BAD_OFFSETS = {
    "falling": np.array([0, 3, 2], dtype=np.int64),
    "past the end": np.array([0, 2, 4000000], dtype=np.int64),
    "below zero": np.array([-8, 2, 4], dtype=np.int64),
    "too few": np.array([0, 2], dtype=np.int64),
    "huge": np.array([0, 2**62, 4], dtype=np.int64),
}


def _supports(offsets, values=(5, 6, 7)):
    return Ragged(np.asarray(offsets, dtype=np.int64), np.asarray(values, dtype=np.int32))


CALLS = {
    "compact_rows": lambda o: _core.compact_rows(IDS, ROW_IDS, ROW_VALUES, o),
    "compact_rows_candidates": lambda o: _core.compact_rows_candidates(IDS, ROW_IDS, ROW_VALUES, o, 20),
    "compact_heads": lambda o: _core.compact_heads(IDS, ROW_IDS, ROW_VALUES, o, 20, 2, None),
    "checked_compact_heads": lambda o: _core.checked_compact_heads(IDS, ROW_IDS, ROW_VALUES, o, 20, 2, None),
    "checked_supports_compact_heads": lambda o: _core.checked_supports_compact_heads(
        IDS, ROW_IDS, ROW_VALUES, o, 20, 2, None),
    "compact_candidates": lambda o: _core.compact_candidates(ROW_IDS, ROW_VALUES, o, 20),
    "supports of compact_heads": lambda o: _core.compact_heads(IDS, ROW_IDS, ROW_VALUES, GOOD, 20, 2,
                                                               _supports(o)),
    "first_bad_support": lambda o: _core.first_bad_support(IDS, _supports(o), 2),
    "heads": lambda o: _core.heads(IDS, _kernels.Candidates(o, IDS[[0, 1, 0, 1]],
                                                            np.array([-0.5, -1.0, -0.2, -2.0])),
                                   np.array([-0.5, -0.2]), 1, None, 2),
}


# compact_candidates takes as many rows as its offsets make: it has no "too few"
@pytest.mark.parametrize("call, bad", [(c, b) for c in sorted(CALLS) for b in sorted(BAD_OFFSETS)
                                       if (c, b) != ("compact_candidates", "too few")])
def test_rows_past_their_arrays_are_refused(call, bad):
    with pytest.raises(ValueError):
        CALLS[call](BAD_OFFSETS[bad])


@pytest.mark.parametrize("call", sorted(CALLS))
def test_rows_within_their_arrays_are_read(call):
    CALLS[call](GOOD if call not in ("supports of compact_heads", "first_bad_support") else [0, 1, 3])


def test_heads_needs_as_many_ids_and_sampled_values_as_tokens():
    cands = _kernels.Candidates(GOOD, IDS[[0, 1, 0, 1]], np.array([-0.5, -1.0, -0.2, -2.0]))
    with pytest.raises(ValueError):
        _core.heads(IDS[:1], cands, np.array([-0.5, -0.2]), 1, None, 2)
    with pytest.raises(ValueError):
        _core.heads(IDS, cands, np.array([-0.5]), 1, None, 2)
    with pytest.raises(ValueError):
        _core.first_bad_support(IDS[:1], _supports([0, 1, 3]), 2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 6), min_size=1, max_size=6), st.integers(0, 4))
def test_any_offsets_decide_or_raise(offsets, size):
    """Random offsets over rows of `size` entries: the compiled compact_rows either raises
    ValueError (rows past the arrays) or decides as the Python kernel does."""
    offs = np.array(offsets, dtype=np.int64)
    n = len(offs) - 1
    ids = np.arange(n, dtype=np.int64)
    row_ids = np.arange(size, dtype=np.uint32) % 3
    row_values = np.full(size, -1.0, dtype=np.float32)
    within = n == 0 or (offs[0] >= 0 and offs[-1] <= size and bool(np.all(np.diff(offs) >= 0)))
    if not within:
        with pytest.raises(ValueError):
            _core.compact_rows(ids, row_ids, row_values, offs)
        return
    got = _core.compact_rows(ids, row_ids, row_values, offs)
    want = _kernels.compact_rows(ids, row_ids, row_values, offs)
    assert (got[1] is None) == (want[1] is None)
    if got[1] is None:
        np.testing.assert_array_equal(got[0], want[0])
    else:
        assert got[1] == want[1]
