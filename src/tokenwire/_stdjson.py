"""The standard library's json, for the two things orjson does not do: keep an object's repeated
keys (``object_pairs_hook``) and serialize values nested deeper than its 254 levels.

Only ever given what orjson accepted, so at most 1024 levels deep: each call gets the recursion
headroom for that, and integers come back as orjson gives them (a float outside int64/uint64),
so both parsers see one document.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["dumps", "loads"]

_ORJSON_DEPTH = 1024
_lock = threading.Lock()
_users = 0
_saved_limit = 0


@contextmanager
def _headroom() -> Iterator[None]:
    """The recursion limit raised by orjson's depth while any thread needs it (the limit is
    process-wide: the first user raises it, the last restores it)."""
    global _users, _saved_limit
    with _lock:
        if _users == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(_saved_limit + 2 * _ORJSON_DEPTH)
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                sys.setrecursionlimit(_saved_limit)


def _orjson_int(text: str) -> int | float:
    value = int(text)
    return value if -(2**63) <= value < 2**64 else float(text)


def loads(raw: bytes | str, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any]) -> Any:
    """``json.loads`` of text orjson accepted, objects built by ``object_pairs_hook``."""
    with _headroom():
        return json.loads(raw, object_pairs_hook=object_pairs_hook, parse_int=_orjson_int)


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON of a value orjson parsed (lone surrogates kept as orjson read them)."""
    with _headroom():
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass")
