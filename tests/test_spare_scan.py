"""The compiled generate parser keeps one spare scan between small plain parses (taken and given
back by an atomic exchange). Nothing a parse returns may share memory with that scan: results
kept across later parses, parses on other threads and parses started from inside a parse (a
finalizer run by the collector) must all read as a serial parse of the same body does."""

from __future__ import annotations

import copy
import gc
import sys
import threading

import numpy as np
import pytest

from tokenwire import MalformedResponseError, samples

_core = pytest.importorskip("tokenwire._core")

BODIES = samples.WORKLOADS["packed_128"].responses(12)


def _state(result):
    """What a caller can read of ``result``, copied."""
    choices = [(c.completion_ids.copy(), c.completion_logprobs.copy(), copy.deepcopy(c.raw), list(c.raw))
               for c in result.choices]
    return choices, result.prompt_token_ids.copy(), copy.deepcopy(result.payload), list(result.payload)


def _same(a, b) -> bool:
    (ca, pa, da, ka), (cb, pb, db, kb) = a, b
    if len(ca) != len(cb) or not np.array_equal(pa, pb) or da != db or ka != kb:
        return False
    return all(np.array_equal(i1, i2) and np.array_equal(l1, l2) and r1 == r2 and k1 == k2
               for (i1, l1, r1, k1), (i2, l2, r2, k2) in zip(ca, cb))


EXPECTED = [_state(_core.parse_generate_response(body)) for body in BODIES]


def test_results_kept_across_parses_own_their_memory():
    first = _core.parse_generate_response(BODIES[0])
    second = _core.parse_generate_response(BODIES[0])
    a, b = first.choices[0], second.choices[0]
    assert not np.shares_memory(a.completion_ids, b.completion_ids)
    assert not np.shares_memory(a.completion_logprobs, b.completion_logprobs)
    assert a.raw is not b.raw and first.payload is not second.payload
    for k in range(1, len(BODIES)):  # later parses leave the first results as they were
        _core.parse_generate_response(BODIES[k])
    assert _same(_state(first), EXPECTED[0]) and _same(_state(second), EXPECTED[0])


def test_a_caller_changing_a_result_changes_no_later_parse():
    result = _core.parse_generate_response(BODIES[1])
    result.choices[0].completion_ids[:] = -1
    result.choices[0].raw["changed"] = True
    result.payload["changed"] = True
    assert _same(_state(_core.parse_generate_response(BODIES[1])), EXPECTED[1])


def test_threads_parsing_side_by_side_read_as_a_serial_parse():
    errors: list[tuple[int, int]] = []
    interval = sys.getswitchinterval()

    def work(t: int) -> None:
        kept = []
        for i in range(300):
            k = (7 * t + i) % len(BODIES)
            kept.append((k, _core.parse_generate_response(BODIES[k])))
            if i % 50 == 49:
                errors.extend((t, j) for j, r in kept if not _same(_state(r), EXPECTED[j]))
                kept = kept[-8:]
        errors.extend((t, j) for j, r in kept if not _same(_state(r), EXPECTED[j]))

    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


def test_a_parse_inside_a_parse_gets_a_scan_of_its_own():
    inner: list[tuple[int, object]] = []

    class Parses:
        def __init__(self, k: int) -> None:
            self.k = k
            self.cycle = self  # freed by the collector, which may run inside a parse

        def __del__(self) -> None:
            inner.append((self.k, _core.parse_generate_response(BODIES[self.k])))

    outer = []
    broken = BODIES[0][:-5]
    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        for i in range(400):
            k = i % len(BODIES)
            for _ in range(3):
                Parses((k + 5) % len(BODIES))
            if i % 5 == 0:
                with pytest.raises(MalformedResponseError):
                    _core.parse_generate_response(broken)
            outer.append((k, _core.parse_generate_response(BODIES[k])))
    finally:
        gc.set_threshold(*thresholds)
        gc.collect()
    assert inner, "the collector ran no finalizer"
    assert all(_same(_state(r), EXPECTED[k]) for k, r in outer)
    assert all(_same(_state(r), EXPECTED[k]) for k, r in inner)
