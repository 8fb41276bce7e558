"""The two extractors are peers: the compiled core's one pass over the raw bytes and the
reference's reading of the parsed document give the same evidence, on every SIMD path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from tokenwire import MalformedResponseError, _reference, samples
from tokenwire._types import Ragged

from . import strategies
from .conftest import _NO_CORE, _core

EXAMPLES = 300

if _core is None:
    pytest.skip(_NO_CORE, allow_module_level=True)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, Ragged) and isinstance(b, Ragged):
        return _same(a.offsets, b.offsets) and _same(a.values, b.values)
    if isinstance(a, (_reference.NativeEntries, _reference.Candidates)):
        return type(a) is type(b) and all(_same(getattr(a, n), getattr(b, n)) for n in vars(a))
    return a == b


def _values(evidence: _reference.Evidence) -> dict[str, Any]:
    """What an extractor read, a path it left out standing for None (the rules then read
    the parsed value, which is intact there); the raw copies of blanked fields aside."""
    return {path: value for path, value in evidence.values.items()
            if value is not None and not path.endswith(":raw")}


def assert_peers(raw: bytes, top_k: int | None) -> None:
    try:
        _, top, choices = _reference.extract_generate(raw, top_k)
    except MalformedResponseError:
        with pytest.raises(MalformedResponseError):
            _core.extract_generate(raw, top_k)
        return
    _, ctop, cchoices = _core.extract_generate(raw, top_k)
    pairs = [(top, ctop), *zip(choices, cchoices)]
    for python, compiled in pairs:
        ours, theirs = _values(python), _values(compiled)
        assert ours.keys() == theirs.keys(), (python.index, sorted(ours), sorted(theirs))
        for path in ours:
            assert _same(ours[path], theirs[path]), (python.index, path)


@pytest.mark.parametrize("name", sorted(samples.SAMPLES))
@pytest.mark.parametrize("top_k", [None, 5])
def test_samples(simd, name, top_k):
    assert_peers(samples.sample(name), top_k)


@pytest.mark.parametrize("name", sorted(samples.WORKLOADS))
def test_workloads(simd, name):
    workload = samples.WORKLOADS[name]
    for raw in workload.responses(2, first_seed=7):
        assert_peers(raw, workload.top_k)


@settings(max_examples=EXAMPLES)
@given(strategies.cases())
def test_generated_and_mutated_documents(case):
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            assert_peers(case.raw, case.top_k)
