"""The JSON reader and writer for the parts of a document that are not read in C.

orjson when it may be used; the standard library's ``json`` otherwise, held to orjson's
rules where they differ (no NaN or Infinity, no number that overflows a double, integers
beyond 64 bits read as floats, UTF-8 only, no lone surrogate, nesting at most 1024 deep),
so a document is accepted or rejected, and read, the same either way. The standard library's
parser recurses: it runs with the recursion limit raised for orjson's 1024 levels.

The standard library also does the two things orjson does not: keep an object's repeated keys
(``loads_keeping``) and write values nested deeper than orjson's 254 levels (``dumps_deep``).

orjson is not used when ``TOKENWIRE_NO_ORJSON=1`` or on a free-threaded interpreter running
without the GIL: importing orjson there turns the GIL back on for the whole process.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["JSONDecodeError", "backend", "document", "dumps", "dumps_deep", "fragment", "loads", "loads_keeping"]

JSONDecodeError = json.JSONDecodeError  # orjson's own error derives from it

_MAX_DEPTH = 1024  # orjson's limit; deeper documents are rejected, as orjson does
_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1


def _orjson_allowed() -> bool:
    if os.environ.get("TOKENWIRE_NO_ORJSON", "").strip().lower() not in ("", "0", "false", "no"):
        return False
    gil_enabled = getattr(sys, "_is_gil_enabled", None)
    return gil_enabled is None or gil_enabled()


def _import_orjson() -> Any:
    if not _orjson_allowed():
        return None
    try:
        import orjson
    except ImportError:
        return None
    return orjson


_orjson = _import_orjson()
backend: str = "orjson" if _orjson is not None else "json"


def _reject(message: str, text: str, pos: int = 0) -> JSONDecodeError:
    return JSONDecodeError(message, text, pos)


def _parse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number is infinity when parsed as double")
    return value


def _parse_int(text: str) -> int | float:
    value = int(text)
    # orjson reads an integer past 64 bits as a double, and refuses one past a double's range.
    return value if _INT64_MIN <= value <= _UINT64_MAX else _parse_float(text)


_lock = threading.Lock()
_users = 0
_saved_limit = 0


_raised_to = 0


@contextmanager
def _headroom() -> Iterator[None]:
    """The recursion limit raised by orjson's depth while any thread needs it (the limit is
    process-wide: the first user raises it, the last restores it, unless someone else has
    set another limit meanwhile, which then stands)."""
    global _users, _saved_limit, _raised_to
    with _lock:
        if _users == 0:
            _saved_limit = sys.getrecursionlimit()
            _raised_to = _saved_limit + 2 * _MAX_DEPTH
            sys.setrecursionlimit(_raised_to)
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and sys.getrecursionlimit() == _raised_to:
                try:
                    sys.setrecursionlimit(_saved_limit)
                except RecursionError:  # this thread is deeper than the old limit: keep it
                    pass


_decoder = json.JSONDecoder(
    parse_constant=_parse_constant, parse_float=_parse_float, parse_int=_parse_int
)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects, outside strings. Measured only when the
    text holds more than ``_MAX_DEPTH`` openers at all, which few documents do."""
    if text.count("[") + text.count("{") <= _MAX_DEPTH:
        return 0
    import numpy as np

    codes = np.frombuffer(_STRING.sub('""', text).encode("utf-8", "replace"), np.uint8)
    opens = (codes == ord("[")) | (codes == ord("{"))
    closes = (codes == ord("]")) | (codes == ord("}"))
    return int(np.cumsum(opens.astype(np.int64) - closes).max())


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def document(raw: Any) -> bytes | str:
    """``raw`` as an exact ``bytes`` or ``str`` object, what a reader is given: a str
    subclass's characters, any other object's buffer copied once (a bytearray another
    thread rewrites is read once; orjson takes exact types only). What an overridden method
    of a subclass says is never asked, as the compiled core reads the object itself."""
    if type(raw) is bytes or type(raw) is str:
        return raw
    if isinstance(raw, str):
        return str.__str__(raw)  # the characters, as an exact str
    try:
        return memoryview(raw).cast("B").tobytes()
    except TypeError:
        raise TypeError(f"expected str or a bytes-like object, not {type(raw).__name__}") from None


def stdlib_loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse one JSON document (UTF-8 bytes or str) as orjson would; raises
    :class:`JSONDecodeError`."""
    data = document(data)
    if isinstance(data, str):
        text = data
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _reject("str is not valid UTF-8: surrogates not allowed", text, exc.start) from None
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _reject("str is not valid UTF-8", "", exc.start) from None
    if text.startswith("\ufeff"):
        raise _reject("UTF-8 byte order mark (BOM) is not supported", text)
    if _depth(text) > _MAX_DEPTH:
        raise _reject("depth limit exceeded", text)
    try:
        if text.count("[") + text.count("{") > 256:  # deep enough to need the headroom
            with _headroom():
                value = _decoder.decode(text)
        else:
            value = _decoder.decode(text)
    except JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:
        raise _reject(str(exc), text) from None
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(value):
        raise _reject("lone surrogate in string", text)
    return value


# orjson's own function when it is used: the compiled core calls this per document.
loads: Callable[[bytes | bytearray | memoryview | str], Any] = (
    _orjson.loads if _orjson is not None else stdlib_loads
)


def dumps(value: Any, *, default: Any = None, indent: bool = False) -> bytes:
    """Compact UTF-8 JSON (two-space indented with ``indent=True``), as orjson writes it."""
    if _orjson is not None:
        return _orjson.dumps(value, default=default, option=_orjson.OPT_INDENT_2 if indent else 0)
    text = json.dumps(
        value,
        default=default,
        ensure_ascii=False,
        allow_nan=False,
        indent=2 if indent else None,
        separators=(",", ": ") if indent else (",", ":"),
    )
    return text.encode("utf-8")


def fragment(text: bytes) -> Any:
    """``text`` (already JSON) for a ``default=`` hook to return: orjson writes it as it is;
    the standard library gets the equivalent str, which it writes as a JSON string."""
    if _orjson is not None:
        return _orjson.Fragment(text)
    return json.loads(text)


def loads_keeping(raw: bytes | str, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any]) -> Any:
    """``json.loads`` of text orjson accepted, objects built by ``object_pairs_hook`` (which
    sees every key, repeats included); integers as orjson reads them."""
    with _headroom():
        return json.loads(raw, object_pairs_hook=object_pairs_hook, parse_int=_parse_int)


def dumps_deep(value: Any) -> bytes:
    """Compact UTF-8 JSON of a parsed value however deep it nests (lone surrogates kept as
    orjson read them)."""
    with _headroom():
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass")
