"""What every drop-in's patch shares: the ``patched()`` block and the release check.

A drop-in keeps its own lock and its own record of what :func:`patch` replaced (a dict,
empty when nothing is patched); :func:`block` runs a ``with`` block with the patch in
effect and leaves the state as it found it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

# What every drop-in that patches a framework has (its ``__all__`` ends with these): the
# releases it follows, and the patch, undone, around a block, and asked about.
API = ("SUPPORTED_VERSIONS", "is_patched", "patch", "patched", "unpatch")


@contextlib.contextmanager
def block(lock: threading.RLock, active: Callable[[], bool], patch: Callable[[], None],
          unpatch: Callable[[], None], module: str | None = None) -> Iterator[Any]:
    """``patch()`` for the block (``active()`` says whether it was already in, read under
    ``lock``), then ``unpatch()`` unless it was. Yields ``sys.modules[module]`` (None without)."""
    with lock:
        already = active()
        patch()
    try:
        yield None if module is None else sys.modules[module]
    finally:
        if not already:
            unpatch()


def require_release(drop_in: str, framework: str, distribution: str, version: str | None,
                    supported: tuple[str, ...]) -> None:
    """``RuntimeError`` unless the installed ``version`` is one the drop-in follows."""
    if version not in supported:
        raise RuntimeError(
            f"tokenwire.compat.{drop_in} does not support {framework} {version}; it follows {framework} "
            f"{', '.join(supported)} (pip install '{distribution}=={supported[-1]}')."
        )
