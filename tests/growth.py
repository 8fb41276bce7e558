"""How a call's time grows from one input to an input four times its size: the complexity tests'
one measure (tests/test_complexity.py, test_hash_flooding.py, test_streams.py).

A linear call takes about 4x as long on 4x the input, a quadratic one 16x; the tests bound the
ratio at 8x. Each time is the least of three calls on the process's CPU time
(``time.process_time``), with Python's cyclic collector paused: another process taking the CPU
(a loaded runner, a test suite beside) does not count, as it would on the wall clock. A ratio
is measured up to five times and the least is kept: a spike inflates one, not five, and a
quadratic call stays near 16x in all of them."""

from __future__ import annotations

import gc
import time
from typing import Callable

BOUND = 8.0
TRIES = 5


def seconds(call: Callable[[], object]) -> float:
    """The least CPU time of three calls of ``call``."""
    best = float("inf")
    gc.disable()
    try:
        for _ in range(3):
            start = time.process_time()
            call()
            best = min(best, time.process_time() - start)
    finally:
        gc.enable()
    return best


def ratio(small: Callable[[], object], large: Callable[[], object]) -> float:
    """``large``'s time over ``small``'s, the least of up to TRIES measures (the first under
    BOUND ends them); ``small`` is called once first, to warm."""
    small()
    ratios = []
    for _ in range(TRIES):
        ratios.append(seconds(large) / max(seconds(small), 1e-9))
        if ratios[-1] < BOUND:
            break
    return min(ratios)
