"""A gc callback that rewrites a caller's arrays at one collection point of a call: what
tests/test_caller_arrays.py and fuzz/fuzz_mutation.py run the caller-array entries under."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def rewritten_at(k: int, mutate: Callable[[], None], restore: Callable[[], None] | None = None) -> Iterator[list[int]]:
    """While the block runs, every allocation may start a collection (threshold 1): the k-th
    collection calls ``mutate()`` and the next one ``restore()``. Yields a one-item list,
    the number of collections started so far."""
    seen = [0]

    def hook(phase: str, info: dict) -> None:
        if phase == "start":
            seen[0] += 1
            if seen[0] == k:
                mutate()
            elif seen[0] == k + 1 and restore is not None:
                restore()

    threshold = gc.get_threshold()
    gc.callbacks.append(hook)
    gc.set_threshold(1)
    try:
        yield seen
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(hook)
