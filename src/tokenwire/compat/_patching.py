"""What the framework drop-ins share about patching: ``with patched():`` around a block."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def patched_block(lock: Any, saved: dict[Any, Any], patch: Callable[[], None],
                  unpatch: Callable[[], None]) -> Iterator[None]:
    """Run the block with ``patch()`` in effect, then ``unpatch()`` unless the drop-in was
    patched before (``saved``, its record of what it replaced, not empty), so blocks nest."""
    with lock:
        already = bool(saved)
        patch()
    try:
        yield
    finally:
        if not already:
            unpatch()
