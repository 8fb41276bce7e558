"""The one exception every rejection raises."""

from __future__ import annotations

from typing import Any

__all__ = ["MalformedResponseError", "invalid_json", "location"]


def location(choice: int | None, field: str | None, token: int | None) -> str:
    """Render a place in a response the way error messages name it.

    ``location(0, "compact_logprobs.offsets", 3)`` is ``choices[0].compact_logprobs.offsets[3]``.
    A field given without a choice is a top-level field.
    """
    parts = []
    if choice is not None:
        parts.append(f"choices[{choice}]")
    if field:
        parts.append(field)
    text = ".".join(parts)
    if token is not None:
        text += f"[{token}]"
    return text


class MalformedResponseError(ValueError):
    """A response does not meet the contract: nothing from it may reach training.

    ``choice``, ``field`` and ``token`` say where (each may be None); ``reason`` is the
    message without the location.
    """

    def __init__(
        self,
        reason: str,
        *,
        choice: int | None = None,
        field: str | None = None,
        token: int | None = None,
    ) -> None:
        self.reason = reason
        self.choice = choice
        self.field = field
        self.token = token
        where = location(choice, field, token)
        super().__init__(f"{where}: {reason}" if where else reason)

    def __reduce__(self):  # keep the location through pickling (multiprocessing)
        return (_rebuild, (type(self), self.reason, self.choice, self.field, self.token))


def _rebuild(cls, reason, choice, field, token):
    return cls(reason, choice=choice, field=field, token=token)


def invalid_json(exc: Exception, raw: Any = None) -> Exception:
    """What a JSON parser's error on ``raw`` means. orjson reports running out of memory as a
    decode error, and also says "failed to allocate memory" of some documents that are simply
    not JSON (an array left open deep down): given ``raw``, the standard library's reader
    (held to orjson's rules) reads it again and decides. MemoryError when the document is
    JSON after all (the parser did run out of memory), else the document is not JSON."""
    text = str(exc)
    if "memory" in text.lower():
        if raw is not None:
            from . import _json

            try:
                _json.stdlib_loads(raw)
            except _json.JSONDecodeError as again:
                return MalformedResponseError(f"invalid JSON: {again}")
        return MemoryError(f"out of memory while parsing JSON: {text}")
    return MalformedResponseError(f"invalid JSON: {text}")
